"""debezium-bridge: exact, fast translation of Debezium SQL Server change events."""

__version__ = "0.1.0"
