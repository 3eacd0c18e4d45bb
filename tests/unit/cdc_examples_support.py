"""The documented change-table examples (docs/cdc.md): the code blocks, and the files
the ``sqlcmd`` lines of the CLI example would write, made from the CDC model."""

from __future__ import annotations

import re
from pathlib import Path

from tests.paths import ROOT
from tests.unit.cdc_model import COLUMNS, CdcModel, Change

DOC = ROOT / "docs" / "cdc.md"
_BLOCK = re.compile(r"<!-- example: (\w+) -->\s*```[a-z]*\n(.*?)```\s*<!-- /example -->", re.S)


def examples(text: str | None = None) -> dict[str, str]:
    """The example code blocks by name (``cli``, ``spark``, ``net``)."""
    return {name: body for name, body in _BLOCK.findall(DOC.read_text() if text is None
                                                        else text)}


def commands(block: str) -> list[str]:
    """The ``debezium-bridge`` command lines of a shell block (continuations joined)."""
    joined = block.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines()
            if line.strip().startswith("debezium-bridge ")]


def model() -> CdcModel:
    """Four transactions on dbo.orders: inserts, an update with an unchanged LOB, a key change
    logged as a delete and an insert, a delete."""
    m = CdcModel()
    m.commit([Change("insert", 1, {"name": "ann", "amount": "1.50", "notes": "hello",
                                   "flag": True}),
              Change("insert", 2, {"name": "bob", "amount": "2.00", "notes": None,
                                   "flag": False})])
    m.commit([Change("update", 1, {"name": "anna"})])
    m.commit([Change("key-delete-insert", 2, {"id": 7})])
    m.commit([Change("delete", 1)])
    return m


def _sqlcmd(header: list[str], rows: list[list[str]], footer: bool = True) -> str:
    """What ``sqlcmd -W -s,`` writes: header, dash line, rows, and (without SET NOCOUNT ON)
    a blank line and ``(N rows affected)``."""
    lines = [",".join(header), ",".join("-" * max(len(h), 4) for h in header)]
    lines += [",".join(row) for row in rows]
    if footer:
        lines += ["", f"({len(rows)} rows affected)"]
    return "\n".join(lines) + "\n"


def write_sqlcmd_exports(directory: Path, m: CdcModel) -> None:
    """tables.csv, columns.csv, keys.csv and dbo_orders_CT.csv as the example's queries give
    them."""
    (directory / "tables.csv").write_text(_sqlcmd(
        ["object_id", "version", "source_object_id", "capture_instance", "start_lsn",
         "end_lsn", "supports_net_changes", "has_drop_pending", "role_name", "index_name",
         "filegroup_name", "create_date", "partition_switch", "database_name", "source_schema",
         "source_table"],
        [["1269579561", "0", "1237579447", "dbo_orders", "0x0000002500000D080001", "NULL", "1",
          "NULL", "NULL", "PK__orders__3213E83F", "NULL", "2024-01-02 03:00:00.000", "0",
          "testDB", "dbo", "orders"]]))
    sizes = {"int": ("int", "NULL", "10", "0", "NULL"),
             "nvarchar(50)": ("nvarchar", "50", "NULL", "NULL", "NULL"),
             "decimal(10,2)": ("decimal", "NULL", "10", "2", "NULL"),
             "nvarchar(max)": ("nvarchar", "-1", "NULL", "NULL", "NULL"),
             "bit": ("bit", "NULL", "NULL", "NULL", "NULL")}
    (directory / "columns.csv").write_text(_sqlcmd(
        ["source_schema", "source_table", "capture_instance", "column_name", "column_id",
         "ordinal_position", "data_type", "character_maximum_length", "numeric_precision",
         "numeric_precision_radix", "numeric_scale", "datetime_precision"],
        [["dbo", "orders", "dbo_orders", name, str(i), str(i), sizes[sql][0], sizes[sql][1],
          sizes[sql][2], "10" if sizes[sql][2] != "NULL" else "NULL", sizes[sql][3],
          sizes[sql][4]]
         for i, (name, sql) in enumerate(COLUMNS, start=1)]))
    (directory / "keys.csv").write_text(_sqlcmd(
        ["object_id", "column_name", "index_ordinal", "column_id"],
        [["1269579561", "id", "1", "1"]]))
    header = ["__$start_lsn", "__$end_lsn", "__$seqval", "__$operation", "__$update_mask",
              *(name for name, _ in COLUMNS), "__$command_id", "tran_end_time"]
    rows = []
    for r in m.rows:
        rows.append([r["__$start_lsn"], "NULL", r["__$seqval"], str(r["__$operation"]),
                     r["__$update_mask"], str(r["id"]), r["name"], r["amount"],
                     "NULL" if r["notes"] is None else r["notes"], "1" if r["flag"] else "0",
                     "1", r["__$commit_time"]])
    (directory / "dbo_orders_CT.csv").write_text(_sqlcmd(header, rows, footer=False))

