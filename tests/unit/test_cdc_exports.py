"""Change-table exports read exactly as the tools write them, and descriptions as SQL Server
returns them.

Sources (named per test): GCC = MS Learn "sys.sp_cdc_get_captured_columns (Transact-SQL)"
(result set: ``source_schema, source_table, capture_instance, column_name, column_id,
column_ordinal, data_type, character_maximum_length, numeric_precision,
numeric_precision_radix, numeric_scale, datetime_precision``); SQLCMD = MS Learn "sqlcmd
utility" (``-W`` removes trailing spaces; NULL is printed ``NULL``); NCHAR = MS Learn "nchar and
nvarchar" (``nvarchar(max)`` holds up to 2^30-1 characters); SPEC §3.3/§5.1 (decimals and money
as exact decimal strings); DBZ = ``SqlServerStreamingChangeEventSource#getChangeTablesToQuery``
(``currentTable.setStopLsn(futureTable.getStartLsn())``; rows at or after the stop LSN are
skipped). Expected values come from those and the rows given, never from the program's output.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
import yaml

from debezium_bridge.core.pipeline import CdcPipeline
from debezium_bridge.errors import ConfigError
from debezium_bridge.formats.cdc import CdcSettings, load_capture_instances
from debezium_bridge.model.change import ChangeRecord
from tests.unit.cdc_support import run

TABLE = {"dbo_t": {"table": "db1.dbo.t", "key": ["id"],
                   "columns": {"id": "int", "v": "nvarchar(max)", "c": "nchar(5)"}}}
HEADER = "__$start_lsn,__$end_lsn,__$seqval,__$operation,__$update_mask,id,v,c,__$command_id\n"


def _insert(seqval: int, ident: int, v: str, c: str) -> str:
    return (f"0x0000000A00000D080010,NULL,0x0000000A00000D08{seqval:04X},2,0x07,{ident},{v},{c},"
            "1\n")


def test_sp_cdc_get_captured_columns_as_current_sql_server_names_its_columns(
        tmp_path: Path) -> None:
    """GCC: the result set names the change-table ordinal column_ordinal (ordinal_position in
    the SQL Server 2008-2012 pages); its rows carry capture_instance and no object_id."""
    (tmp_path / "tables.csv").write_text(
        "object_id,source_object_id,capture_instance,start_lsn,source_schema,source_table\n"
        "1269579561,1237579447,dbo_orders,0x0000002500000D080001,dbo,orders\n")
    (tmp_path / "columns.csv").write_text(
        "source_schema,source_table,capture_instance,column_name,column_id,column_ordinal,"
        "data_type,character_maximum_length,numeric_precision,numeric_precision_radix,"
        "numeric_scale,datetime_precision\n"
        "-------------,------------,----------------,-----------,---------,--------------,"
        "---------,------------------------,-----------------,-----------------------,"
        "-------------,------------------\n"
        "dbo,orders,dbo_orders,id,1,1,int,NULL,10,10,0,NULL\n"
        "dbo,orders,dbo_orders,name,2,2,nvarchar,-1,NULL,NULL,NULL,NULL\n"
        "dbo,orders,dbo_orders,amount,4,3,decimal,NULL,12,10,3,NULL\n"
        "dbo,orders,dbo_orders,at,5,4,datetime2,NULL,NULL,NULL,NULL,3\n")
    orders = load_capture_instances([tmp_path / "tables.csv", tmp_path / "columns.csv"])[
        "dbo_orders"]
    assert [(c.name, c.ordinal, c.column_id, c.sql_type) for c in orders.columns] == [
        ("id", 1, 1, "int"), ("name", 2, 2, "nvarchar(max)"), ("amount", 3, 4, "decimal(12,3)"),
        ("at", 4, 5, "datetime2(3)")]


def test_a_description_row_without_its_join_column_is_a_configuration_error(
        tmp_path: Path) -> None:
    """cdc.captured_columns rows are joined to cdc.change_tables by object_id: a row without
    one cannot be placed, which is said, not a crash."""
    (tmp_path / "cc.csv").write_text("column_name,column_id,column_type,column_ordinal\n"
                                     "id,1,int,1\n")
    with pytest.raises(ConfigError, match="object_id"):
        load_capture_instances([tmp_path / "cc.csv"])


def test_for_json_decimals_and_money_keep_every_digit(tmp_path: Path) -> None:
    """SPEC §5.1: decimals and money are exact decimal strings with their scale; FOR JSON
    writes them as JSON numbers with every digit (decimal(38,10) has 38, money 19)."""
    table = {"dbo_t": {"table": "db1.dbo.t", "key": ["id"],
                       "columns": {"id": "bigint", "d": "decimal(38,10)", "m": "money",
                                   "s": "smallmoney"}}}
    data = (b'[{"__$start_lsn":"AAAACgAADQgACw==","__$seqval":"AAAACgAADQgADA==",'
            b'"__$operation":2,"__$update_mask":"Dw==","id":9007199254740993,'
            b'"d":1234567890123456789012345678.1234567890,"m":922337203685477.5807,'
            b'"s":-214748.3648}]')
    result = run(data, tmp_path, description=table, source="dbo_t_CT.json")
    assert not result.dead, [d.message for d in result.dead]
    [change] = result.changes
    assert change.after == {"id": 9007199254740993, "d": "1234567890123456789012345678.1234567890",
                            "m": "922337203685477.5807", "s": "-214748.3648"}


def test_csv_values_longer_than_pythons_default_field_limit(tmp_path: Path) -> None:
    """NCHAR: an nvarchar(max) value may hold up to 2^30-1 characters; one of 200,000 (above
    the csv module's default 131,072) is a value, not a bad line."""
    big = "x" * 200_000
    data = (HEADER + _insert(2, 1, big, "ab")).encode()
    result = run(data, tmp_path, description=TABLE, source="dbo_t_CT.csv")
    assert not result.dead, [d.message for d in result.dead]
    [change] = result.changes
    assert change.after is not None and change.after["v"] == big


def test_rows_that_are_not_utf8_are_dead_letters_not_replacement_characters(
        tmp_path: Path) -> None:
    """SQLCMD: sqlcmd writes the console code page unless told -f 65001 (UTF-8) or -u
    (Unicode); in Windows-1252 "café" ends in the byte 0xE9, which UTF-8 cannot start a
    character with followed by ",". Such a row is a cdc-read dead letter carrying its bytes as
    read (docs/cdc.md "Bad input"); the UTF-8 rows around it (a BOM first) are read, "é"
    included; a JSON line with the same byte is a dead letter too."""
    data = (b"\xef\xbb\xbf" + HEADER.encode() + _insert(2, 1, "caf\u00e9", "ab").encode()
            + _insert(3, 2, "caf", "ab").encode().replace(b"caf", b"caf\xe9")
            + _insert(4, 3, "ok", "ab").encode())
    result = run(data, tmp_path, description=TABLE, source="dbo_t_CT.csv")
    assert [c.after["v"] for c in result.changes if c.after] == ["caf\u00e9", "ok"]
    [dead] = result.dead
    assert (dead.stage, dead.record.offset) == ("cdc-read", 3)
    assert dead.record.value is not None and b"caf\xe9," in dead.record.value
    json_rows = (b'{"__$start_lsn":"0x0000000A00000D080010","__$seqval":"0x0000000A00000D080002",'
                 b'"__$operation":2,"__$update_mask":"0x07","id":1,"v":"caf\xe9","c":"ab"}\n')
    result = run(json_rows, tmp_path, description=TABLE, source="dbo_t_CT.jsonl")
    assert not result.changes and result.stages == ["cdc-read"]


def test_sqlcmd_w_export_values_are_read_as_written(tmp_path: Path) -> None:
    """SQLCMD: with -W (docs/cdc.md's invocation) sqlcmd writes no padding and prints NULL as
    NULL, so leading spaces are data, an empty field is the empty string and NULL is NULL."""
    dashes = ",".join("-" * len(h) for h in HEADER.strip().split(",")) + "\n"
    data = (HEADER + dashes + _insert(2, 1, "  lead", "ab   ") + _insert(3, 2, "", "NULL")
            + "\n(2 rows affected)\n").encode()
    result = run(data, tmp_path, description=TABLE, source="dbo_t_CT.csv")
    assert not result.dead, [d.message for d in result.dead]
    assert [c.after for c in result.changes] == [{"id": 1, "v": "  lead", "c": "ab   "},
                                                 {"id": 2, "v": "", "c": None}]


def test_sqlcmd_padded_export_loses_only_its_padding(tmp_path: Path) -> None:
    """SQLCMD: without -W every column, its header included, is padded to its display width
    (text left-aligned, numbers right-aligned); the padding is not part of the value."""
    widths = [22, 22, 22, 12, 14, 11, 10, 5, 13]
    names = HEADER.strip().split(",")

    def line(cells: list[str], right: set[int]) -> str:
        return ",".join(cell.rjust(w) if i in right else cell.ljust(w)
                        for i, (cell, w) in enumerate(zip(cells, widths, strict=True))) + "\n"

    numbers = {3, 5, 8}
    data = (line(names, set()) + ",".join("-" * w for w in widths) + "\n"
            + line(["0x0000000A00000D080010", "NULL", "0x0000000A00000D080002", "2", "0x07",
                    "1", "  lead", "NULL", "1"], numbers)).encode()
    result = run(data, tmp_path, description=TABLE, source="dbo_t_CT.csv")
    assert not result.dead, [d.message for d in result.dead]
    assert [c.after for c in result.changes] == [{"id": 1, "v": "  lead", "c": None}]


def test_a_header_without_a_captured_column_is_a_configuration_error(tmp_path: Path) -> None:
    """MS-CT: the change table has a column for every captured column; an export without one
    does not match its description (the column is not NULL in every row), and the error names
    it."""
    data = (b"__$start_lsn,__$seqval,__$operation,__$update_mask,id,v\n"
            b"0x0000000A00000D080010,0x0000000A00000D080002,2,0x07,1,a\n")
    with pytest.raises(ConfigError, match="'c'"):
        run(data, tmp_path, description=TABLE, source="dbo_t_CT.csv")


def _read(tmp: Path, description: dict[str, Any], files: dict[str, str]) -> CdcPipeline:
    (tmp / "d.yaml").write_text(yaml.safe_dump(description))
    pipeline = CdcPipeline(load_capture_instances([tmp / "d.yaml"]), CdcSettings())
    for name, text in files.items():
        pipeline.read(io.BytesIO(text.encode()), name)
    pipeline.flush()
    return pipeline


def test_the_older_capture_instance_stops_at_the_newer_ones_start_lsn(tmp_path: Path) -> None:
    """DBZ: of two capture instances of one table, the older is read only below the newer's
    start_lsn; from there the newer one's rows (the same changes, captured twice) are read."""
    columns = {"id": "int", "v": "nvarchar(20)"}
    description = {
        "dbo_t": {"table": "db1.dbo.t", "key": ["id"], "columns": columns,
                  "start_lsn": "0x00000000000000000010"},
        "dbo_t_v2": {"table": "db1.dbo.t", "key": ["id"], "columns": {**columns, "w": "int"},
                     "start_lsn": "0x00000000000000000200"},
    }
    head = "__$start_lsn,__$seqval,__$operation,__$update_mask,id,v"
    old = (f"{head}\n"
           "0x00000000000000000100,0x00000000000000000101,2,0x03,1,a\n"
           "0x00000000000000000300,0x00000000000000000301,3,0x02,1,a\n"
           "0x00000000000000000300,0x00000000000000000301,4,0x02,1,b\n")
    new = (f"{head},w\n"
           "0x00000000000000000300,0x00000000000000000301,3,0x02,1,a,7\n"
           "0x00000000000000000300,0x00000000000000000301,4,0x02,1,b,7\n")
    pipeline = _read(tmp_path, description, {"dbo_t_CT.csv": old, "dbo_t_v2_CT.csv": new})
    changes, dead = pipeline.drain()
    assert not dead
    assert [(c.op, c.position.commit_lsn, c.after) for c in changes
            if isinstance(c, ChangeRecord)] == [
        ("insert", "00000000:00000000:0100", {"id": 1, "v": "a"}),
        ("update", "00000000:00000000:0300", {"id": 1, "v": "b", "w": 7})]
    assert pipeline.counters.duplicates == 2 and pipeline.counters.balanced
