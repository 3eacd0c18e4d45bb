#!/bin/bash
# Create testDB with a CDC-enabled customers table (run inside the sqlserver container).
/opt/mssql-tools18/bin/sqlcmd -C -S localhost -U sa -P "$MSSQL_SA_PASSWORD" -Q "
CREATE DATABASE testDB;
GO
USE testDB;
EXEC sys.sp_cdc_enable_db;
CREATE TABLE dbo.customers (id int PRIMARY KEY, name nvarchar(255), email nvarchar(255),
  balance decimal(10,2), created datetime2(7), notes nvarchar(max));
EXEC sys.sp_cdc_enable_table @source_schema = 'dbo', @source_name = 'customers',
  @role_name = NULL, @supports_net_changes = 0;
INSERT INTO dbo.customers VALUES (1, 'Ada', 'ada@example.com', 100.00, SYSUTCDATETIME(), 'n');
UPDATE dbo.customers SET id = 2 WHERE id = 1;  -- a primary-key change: delete + insert in CDC
GO"
