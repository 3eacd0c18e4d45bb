"""Change-table rows → the connector's events: every rule of the documents, each as a test.

Sources (named per test): MS-CT = MS Learn "cdc.<capture_instance>_CT (Transact-SQL)"; ABOUT =
MS Learn "About change data capture"; WORK = MS Learn "Work with change data"; DBZ = the
Debezium SQL Server connector's code (``SqlServerStreamingChangeEventSource#executeIteration``,
``SqlServerChangeTablePointer``, ``SqlServerOffsetContext#setChangePosition``,
``SqlServerChangeRecordEmitter``, ``RelationalChangeRecordEmitter``). Expected values come from
those rules and the rows given, never from the program's output.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import msgspec
import pytest

from debezium_bridge.core.pipeline import CdcPipeline
from debezium_bridge.errors import ConfigError
from debezium_bridge.formats.cdc import (
    CdcSettings,
    decode,
    is_cdc_export,
    load_capture_instances,
    mask_of,
)
from debezium_bridge.formats.cdc.decode import mask_bit
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.output import Output
from tests.unit.cdc_model import mask_hex
from tests.unit.cdc_support import row, run

ALL = mask_hex([1, 2, 3, 4, 5])
A, B = 0x0000002500000D080000, 0x0000002600000D080000


def _base(i: int = 1, **extra: Any) -> dict[str, Any]:
    return {"id": i, "name": f"n{i}", "amount": "1.50", "notes": "long text", "flag": True,
            **extra}


# --------------------------------------------------------------------------- operations

def test_operations_map_to_connector_ops_and_commit_and_change_lsns(tmp_path: Path) -> None:
    """MS-CT: __$operation 1 delete, 2 insert, 3/4 update old/new; DBZ
    SqlServerChangeRecordEmitter: 1→d, 2→c, 3(+4)→u; commit_lsn = __$start_lsn, change_lsn =
    __$seqval (SqlServerChangeTablePointer#getNextChangePosition)."""
    rows = [row(A + 10, A + 2, 2, ALL, **_base(1)),
            row(B + 10, B + 2, 3, mask_hex([2]), **_base(1)),
            row(B + 10, B + 2, 4, mask_hex([2]), **_base(1, name="x")),
            row(B + 20, B + 12, 1, ALL, **_base(1, name="x"))]
    result = run(rows, tmp_path)
    assert [c.op for c in result.changes] == ["insert", "update", "delete"]
    update = result.changes[1]
    assert update.position.commit_lsn == "00000026:00000d08:000a"
    assert update.position.change_lsn == "00000026:00000d08:0002"
    assert update.before == {"id": 1, "name": "n1", "amount": "1.50", "notes": "long text",
                             "flag": True}
    assert update.after is not None and update.after["name"] == "x"
    assert result.counters.records_in == 4 and result.counters.merged == 1


def test_one_transaction_shares_the_commit_lsn(tmp_path: Path) -> None:
    """MS-CT: all changes committed in one transaction share __$start_lsn (a delete of two rows
    gives two rows with the same __$start_lsn); DBZ: each is its own event, serial 1."""
    rows = [row(A + 10, A + 2, 1, ALL, **_base(1)), row(A + 10, A + 4, 1, ALL, **_base(2))]
    result = run(rows, tmp_path)
    assert [c.op for c in result.changes] == ["delete", "delete"]
    assert {c.position.commit_lsn for c in result.changes} == {"00000025:00000d08:000a"}
    assert [c.position.event_serial_no for c in result.changes] == [1, 1]


def test_event_serial_no_counts_rows_at_one_position(tmp_path: Path) -> None:
    """DBZ SqlServerOffsetContext#setChangePosition: += eventCount (2 for a 3+4 pair) at the
    same (commit, change) LSN, else = eventCount. Insert 1, delete 1, update 2, and rows 1 + 2
    at one __$seqval (a key update logged as delete + insert): 1 and 2."""
    rows = [row(A + 10, A + 2, 2, ALL, **_base(1)),
            row(A + 10, A + 4, 3, mask_hex([3]), **_base(1)),
            row(A + 10, A + 4, 4, mask_hex([3]), **_base(1, amount="2.00")),
            row(A + 10, A + 6, 1, ALL, **_base(1, amount="2.00")),
            row(A + 10, A + 6, 2, ALL, **_base(9, amount="2.00")),
            row(A + 10, A + 8, 1, ALL, **_base(9, amount="2.00"))]
    result = run(rows, tmp_path, pairing=False)
    assert [(c.op, c.position.event_serial_no) for c in result.changes] == [
        ("insert", 1), ("update", 2), ("delete", 1), ("insert", 2), ("delete", 1)]


def test_order_is_start_lsn_command_id_seqval_operation(tmp_path: Path) -> None:
    """MS-CT: __$seqval should not be used for ordering, __$command_id orders the operations
    of a transaction; DBZ direct mode orders by start_lsn, command_id, seqval, operation.
    Rows 1 and 2 at one __$seqval with another command between them are no longer adjacent:
    each counts from 1 (setChangePosition resets at a new position); without __$command_id
    (function mode) they are adjacent: 1 and 2."""
    rows = [row(A + 10, A + 2, 2, ALL, **_base(5), **{"__$command_id": 3}),
            row(A + 10, A + 4, 2, ALL, **_base(6), **{"__$command_id": 2}),
            row(A + 10, A + 2, 1, ALL, **_base(4), **{"__$command_id": 1})]
    result = run(rows, tmp_path, pairing=False)
    by_key = {(c.op, c.key["id"]): c.position.event_serial_no for c in result.changes}
    assert by_key == {("delete", 4): 1, ("insert", 6): 1, ("insert", 5): 1}
    plain = [{k: v for k, v in r.items() if k != "__$command_id"} for r in rows]
    result = run(plain, tmp_path, pairing=False)
    by_key = {(c.op, c.key["id"]): c.position.event_serial_no for c in result.changes}
    assert by_key == {("delete", 4): 1, ("insert", 5): 2, ("insert", 6): 1}


def test_rows_of_a_transaction_may_come_in_any_order(tmp_path: Path) -> None:
    """WORK: the query functions return rows sorted; a _CT export need not be, inside a
    transaction the reader sorts by (__$seqval, __$operation) as the connector's query does."""
    rows = [row(A + 10, A + 4, 4, mask_hex([2]), **_base(1, name="y")),
            row(A + 10, A + 2, 2, ALL, **_base(1)),
            row(A + 10, A + 4, 3, mask_hex([2]), **_base(1))]
    result = run(rows, tmp_path)
    assert [(c.op, c.position.event_serial_no) for c in result.changes] == [("insert", 1),
                                                                          ("update", 2)]


# --------------------------------------------------------------------------- bad rows

def test_bad_rows_are_dead_letters_and_counters_balance(tmp_path: Path) -> None:
    """DBZ: a 3 not followed by its 4 fails the connector ("was not followed by after event"),
    a lone 4 is an "unexpected command type", a NULL __$start_lsn is skipped with an error; the
    product dead-letters each with its coordinates and carries on (SPEC: bad input never stops
    the stream). Unknown operations, odd masks and LSNs that go back are dead letters too."""
    rows = [
        row(A + 10, A + 2, 2, ALL, **_base(1)),
        row(A + 10, A + 4, 9, ALL, **_base(2)),                      # unknown operation
        row(A + 10, A + 6, 3, mask_hex([2]), **_base(1)),            # 3 without 4
        row(A + 10, A + 8, 4, mask_hex([2]), **_base(1, name="z")),  # 4 without 3
        row(A + 10, A + 12, 2, "0x1", **_base(3)),                   # odd hex digits
        row(A + 10, A + 14, 2, "0x7F", **_base(4)),                  # bit beyond 5 columns
        row(A + 10, A + 16, 2, mask_hex([1, 2]), **_base(5)),        # insert without all bits
        row(A + 10, A + 18, 3, mask_hex([2]), **_base(6)),           # 3 and 4 masks differ
        row(A + 10, A + 18, 4, mask_hex([3]), **_base(6, name="q")),
        {**row(A + 10, A + 20, 2, ALL, **_base(7)), "__$start_lsn": None},  # NULL LSN
        {**row(A + 10, A + 22, 2, ALL, **_base(8)), "__$seqval": "0x12"},   # not 10 bytes
        row(B + 10, B + 2, 2, ALL, **_base(10)),
        row(A + 30, A + 24, 2, ALL, **_base(11)),                    # start_lsn goes back
        row(B + 10, B + 4, 2, ALL, **_base(12, amount="1.234")),     # too many decimals
    ]
    result = run(rows, tmp_path)
    assert sorted(c.key["id"] for c in result.changes) == [1, 10]
    assert sorted(result.stages) == sorted([
        "cdc-row", "cdc-pairing", "cdc-pairing", "cdc-mask", "cdc-mask", "cdc-mask",
        "cdc-mask", "cdc-mask", "cdc-row", "cdc-row", "cdc-order", "convert"])
    lines = sorted(d.record.offset or 0 for d in result.dead)
    assert lines == [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 14]
    assert all(d.record.topic == "rows.jsonl" for d in result.dead)
    c = result.counters
    assert c.records_in == len(rows) and c.dead_letters == 12 and c.changes_out == 2


def test_repeated_rows_are_duplicates_and_conflicting_copies_dead_letters(tmp_path: Path) -> None:
    """A change table has one row per (__$start_lsn, __$seqval, __$operation): an identical
    copy (overlapping exports) is dropped as a duplicate, a different one is a dead letter."""
    first = row(A + 10, A + 2, 2, ALL, **_base(1))
    rows = [first, dict(first), {**first, "name": "other"}]
    result = run(rows, tmp_path)
    assert len(result.changes) == 1 and result.counters.duplicates == 1
    assert result.stages == ["cdc-duplicate"]


def test_overlapping_exports_repeat_translated_transactions_as_duplicates(
        tmp_path: Path) -> None:
    """docs/cdc.md "Duplicates": a row repeated with the same (__$start_lsn, __$command_id,
    __$seqval, __$operation) and identical fields — overlapping exports, here a second export
    starting two transactions back — is a duplicate, also when its transaction was already
    translated; a different copy is a cdc-duplicate dead letter, and a row of such a
    transaction that was not read before is out of order (cdc-order)."""
    txs = [row(A + 16 * i, A + 16 * i + 1, 2, ALL, **_base(i), extra=["ignored"])
           for i in range(1, 6)]  # an extra column (ignored) with a JSON array in it
    first, second = txs[:3], txs[1:]
    changed = {**txs[1], "name": "other"}
    unseen = row(A + 16 * 2, A + 16 * 2 + 5, 2, ALL, **_base(9))
    result = run([*first, *second, changed, unseen], tmp_path)
    assert [c.key["id"] for c in result.changes] == [1, 2, 3, 4, 5]
    assert result.counters.duplicates == 2
    assert result.stages == ["cdc-duplicate", "cdc-order"]


def test_repeats_of_rows_no_longer_remembered_are_out_of_order(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/cdc.md "Duplicates": translated rows are remembered up to a bound; a repeat from
    further back cannot be compared and is a cdc-order dead letter (never silently dropped)."""
    monkeypatch.setattr(decode, "REMEMBERED_ROWS", 2)
    txs = [row(A + 16 * i, A + 16 * i + 1, 2, ALL, **_base(i)) for i in range(1, 5)]
    result = run([*txs, txs[0], txs[2]], tmp_path)
    assert [c.key["id"] for c in result.changes] == [1, 2, 3, 4]
    assert result.stages == ["cdc-order"] and result.counters.duplicates == 1


def test_sort_input_accepts_unordered_exports(tmp_path: Path) -> None:
    """cdc.sort_input: rows of a _CT export without ORDER BY are sorted first."""
    rows = [row(B + 10, B + 2, 2, ALL, **_base(2)), row(A + 10, A + 2, 2, ALL, **_base(1))]
    assert run(rows, tmp_path).stages == ["cdc-order"]
    result = run(rows, tmp_path, sort_input=True)
    assert [c.key["id"] for c in result.changes] == [1, 2] and not result.dead


# --------------------------------------------------------------------------- masks

def test_changed_columns_come_from_the_update_mask(tmp_path: Path) -> None:
    """MS-CT: __$update_mask is a bit mask based on the change table's column ordinals
    identifying the changed columns; ABOUT: update rows have only the bits of changed columns
    set. A column assigned its own value is marked changed by the mask."""
    rows = [row(A + 10, A + 2, 3, mask_hex([2, 5]), **_base(1)),
            row(A + 10, A + 2, 4, mask_hex([2, 5]), **_base(1, name="n1"))]
    result = run(rows, tmp_path)
    assert result.changes[0].changed_columns == ["name", "flag"]


def test_masks_of_more_than_eight_columns(tmp_path: Path) -> None:
    """sys.fn_cdc_is_bit_set (WORK names it for reading masks): bit n of the mask is
    column_ordinal n, the mask read as one big-endian number (0x0100 = ordinal 9)."""
    columns = [[f"c{i}", "int"] for i in range(1, 11)]
    description = {"dbo_wide": {"table": "db.dbo.wide", "key": ["c1"], "columns": columns}}
    values = {f"c{i}": i for i in range(1, 11)}
    rows = [row(A + 10, A + 2, 3, "0x0102", **values),
            row(A + 10, A + 2, 4, "0x0102", **{**values, "c2": 20, "c9": 90})]
    result = run(rows, tmp_path, description=description)
    assert result.changes[0].changed_columns == ["c2", "c9"]
    assert mask_of([2, 9]) == bytes.fromhex("0102")
    assert mask_bit(bytes.fromhex("0102"), 9) and not mask_bit(bytes.fromhex("0102"), 1)
    # the connector's own reading (SqlServerChangeTablePointer#isColumnChanged: byte i / 8
    # from the start) differs beyond 8 columns
    assert mask_bit(bytes.fromhex("0102"), 2, "debezium") is False
    assert mask_bit(bytes.fromhex("0102"), 1, "debezium") is True


# --------------------------------------------------------------------------- LOBs

def test_unchanged_max_column_is_not_sent(tmp_path: Path) -> None:
    """MS-CT: varchar(max)/nvarchar(max)/varbinary(max) are NULL in row 3 unless the update
    changed them; DBZ 3.6 SqlServerChangeTablePointer: NULL + mask bit 0 in an update row →
    the unavailable placeholder. So 'not sent', never a NULL value, and not changed."""
    rows = [row(A + 10, A + 2, 3, mask_hex([2]), **_base(1, notes=None)),
            row(A + 10, A + 2, 4, mask_hex([2]), **_base(1, name="m"))]
    change = run(rows, tmp_path).changes[0]
    assert change.unavailable_columns == ["notes"]
    assert change.before is not None and change.before["notes"] is None
    assert change.after is not None and change.after["notes"] == "long text"
    assert change.changed_columns == ["name"]


def test_max_column_set_to_null_is_a_value(tmp_path: Path) -> None:
    """MS-CT: a changed (max) column keeps its old value in row 3; its bit is set: NULL in row
    4 is the new value."""
    rows = [row(A + 10, A + 2, 3, mask_hex([4]), **_base(1)),
            row(A + 10, A + 2, 4, mask_hex([4]), **_base(1, notes=None))]
    change = run(rows, tmp_path).changes[0]
    assert change.unavailable_columns == [] and change.after["notes"] is None  # type: ignore[index]
    assert change.changed_columns == ["notes"]


def test_deleted_rows_keep_max_values_and_text_columns_stay_null(tmp_path: Path) -> None:
    """MS-CT: for __$operation = 1, (max) columns have their value at deletion; text, ntext and
    image are always NULL for operations 1 and 3 — the connector sends that NULL (it only
    replaces NULLs of update rows)."""
    description = {"dbo_docs": {"table": "db.dbo.docs", "key": ["id"],
                                "columns": [["id", "int"], ["body", "nvarchar(max)"],
                                            ["old", "ntext"]]}}
    rows = [row(A + 10, A + 2, 1, mask_hex([1, 2, 3], 3), id=1, body="kept", old=None)]
    change = run(rows, tmp_path, description=description).changes[0]
    assert change.before == {"id": 1, "body": "kept", "old": None}
    assert change.unavailable_columns == []


def test_null_of_a_column_of_unknown_type_is_a_value(tmp_path: Path) -> None:
    """MS-CT: only LOB columns (image, text, ntext; (max) in row 3) are left NULL by an update
    that did not change them; every other column has its value. With only the
    sp_cdc_help_change_data_capture result set the types are unknown: an unchanged NULL is the
    column's value (docs/cdc.md), not a LOB that was not sent, so Debezium output has no
    unavailable placeholder in it."""
    (tmp_path / "help.json").write_text(
        '[{"source_schema":"dbo","source_table":"t","capture_instance":"dbo_t",'
        '"index_column_list":"[id]","captured_column_list":"[id], [v], [qty]"}]')
    pipeline = CdcPipeline(load_capture_instances([tmp_path / "help.json"]),
                           CdcSettings(database="db1"))
    when = {"__$commit_time": "2024-01-02 03:04:05.123"}
    rows = [row(A + 10, A + 2, 3, mask_hex([2], 3), id=1, v="a", qty=None, **when),
            row(A + 10, A + 2, 4, mask_hex([2], 3), id=1, v="b", qty=None, **when)]
    data = b"".join(msgspec.json.encode(r) + b"\n" for r in rows)
    [change] = pipeline.translate_file(io.BytesIO(data), "dbo_t_CT.jsonl")
    assert isinstance(change, ChangeRecord)
    assert change.unavailable_columns == []
    assert change.before == {"id": "1", "v": "a", "qty": None}
    assert change.after == {"id": "1", "v": "b", "qty": None}
    [record] = Output(["debezium"], catalog=pipeline.catalog).encode(change)
    payload = msgspec.json.decode(record.value)["payload"]  # type: ignore[arg-type]
    assert (payload["before"]["qty"], payload["after"]["qty"]) == (None, None)


def test_computed_columns_are_null(tmp_path: Path) -> None:
    """MS-CT: computed columns in a capture instance are always NULL."""
    description = {"dbo_c": {"table": "db.dbo.c", "key": ["id"],
                             "columns": [["id", "int"], ["total", "int"]]}}
    rows = [row(A + 10, A + 2, 2, mask_hex([1, 2], 2), id=1, total=None)]
    assert run(rows, tmp_path, description=description).changes[0].after == {"id": 1,
                                                                              "total": None}


def test_rowversion_is_binary_8(tmp_path: Path) -> None:
    """MS-CT: timestamp (rowversion) columns are binary(8) in the change table; binary is
    base64 in canonical records."""
    description = {"dbo_v": {"table": "db.dbo.v", "key": ["id"],
                             "columns": [["id", "int"], ["rv", "timestamp"]]}}
    rows = [row(A + 10, A + 2, 2, mask_hex([1, 2], 2), id=1, rv="0x00000000000007D1")]
    after = run(rows, tmp_path, description=description).changes[0].after
    assert after == {"id": 1, "rv": base64.b64encode(bytes.fromhex("00000000000007D1")).decode()}


# --------------------------------------------------------------------------- key changes

def test_deferred_update_is_one_key_change(tmp_path: Path) -> None:
    """MS-CT: a "deferred update" is a delete row and an insert row; DBZ emits d (serial 1),
    tombstone, c (serial 2) without headers; the translator merges them into one update."""
    when = {"__$commit_time": "2024-01-02 03:04:05.123"}
    rows = [row(A + 10, A + 2, 1, ALL, **_base(1), **when),
            row(A + 10, A + 2, 2, ALL, **_base(7), **when)]
    result = run(rows, tmp_path)
    [change] = result.changes
    assert (change.op, change.key_changed, change.old_key, change.key) == (
        "update", True, {"id": 1}, {"id": 7})
    assert change.position.event_serial_no == 2
    out = Output(["debezium"], catalog=result.pipeline.catalog, ledger=result.pipeline.ledger)
    records = out.encode(change)
    values = [None if r.value is None else msgspec.json.decode(r.value)["payload"]
              for r in records]
    assert [v and (v["op"], v["source"]["event_serial_no"]) for v in values] == [
        ("d", 1), None, ("c", 2)]
    assert all(not any(h[0].startswith("__debezium.") for h in r.headers) for r in records)


def test_update_rows_whose_key_differs_are_a_key_change_with_headers(tmp_path: Path) -> None:
    """DBZ RelationalChangeRecordEmitter#emitUpdateAsPrimaryKeyChangeRecord: rows 3 + 4 with
    different keys → d with __debezium.newkey, tombstone (same headers), c with
    __debezium.oldkey, all at the pair's serial (2)."""
    when = {"__$commit_time": "2024-01-02 03:04:05.123"}
    rows = [row(A + 10, A + 2, 3, mask_hex([1]), **_base(1), **when),
            row(A + 10, A + 2, 4, mask_hex([1]), **_base(8), **when)]
    result = run(rows, tmp_path)
    [change] = result.changes
    assert (change.key_changed, change.old_key, change.key) == (True, {"id": 1}, {"id": 8})
    assert change.changed_columns == ["id"]
    out = Output(["debezium"], catalog=result.pipeline.catalog, ledger=result.pipeline.ledger)
    records = out.encode(change)
    assert [r.value is None for r in records] == [False, True, False]
    payloads = [msgspec.json.decode(r.value)["payload"] for r in records if r.value]
    assert [(p["op"], p["source"]["event_serial_no"]) for p in payloads] == [("d", 2), ("c", 2)]
    headers = [{k: v for k, v in r.headers if k.startswith("__debezium.")} for r in records]
    assert [sorted(h) for h in headers] == [["__debezium.newkey"], ["__debezium.newkey"],
                                            ["__debezium.oldkey"]]
    assert msgspec.json.decode(headers[0]["__debezium.newkey"])["payload"] == {"id": 8}
    assert msgspec.json.decode(headers[2]["__debezium.oldkey"])["payload"] == {"id": 1}
    unpaired = run(rows, tmp_path, pairing=False)
    assert [(c.op, c.position.event_serial_no) for c in unpaired.changes] == [("delete", 2),
                                                                            ("insert", 2)]


# --------------------------------------------------------------------------- row filters, times

def test_all_row_filter_gives_updates_without_before(tmp_path: Path) -> None:
    """WORK: row filter 'all' returns one final row (4) per update; 'all update old' two."""
    rows = [row(A + 10, A + 2, 4, mask_hex([2]), **_base(1, name="w"))]
    result = run(rows, tmp_path, row_filter="all")
    [change] = result.changes
    assert (change.op, change.before, change.position.event_serial_no) == ("update", None, 2)
    assert change.changed_columns == ["name"]
    assert run(rows, tmp_path).stages == ["cdc-pairing"]


def test_commit_time_from_tran_end_time_with_the_server_offset(tmp_path: Path) -> None:
    """WORK: the commit time is cdc.lsn_time_mapping.tran_end_time joined on __$start_lsn;
    DBZ (function mode): TODATETIMEOFFSET(fn_cdc_map_lsn_to_time(__$start_lsn), server offset)
    → source.ts_ms, i.e. server-local time minus the offset."""
    mapping = tmp_path / "ltm.csv"
    mapping.write_text("start_lsn,tran_begin_time,tran_end_time,tran_id\n"
                       f"0x{A + 10:020X},2024-01-02 03:04:05.120,2024-01-02 03:04:05.123,0x01\n")
    rows = [row(A + 10, A + 2, 2, ALL, **_base(1))]
    change = run(rows, tmp_path, lsn_time_mapping=str(mapping),
                 server_utc_offset="+01:00").changes[0]
    assert change.commit_ts == "2024-01-02T02:04:05.123Z"
    change = run(rows, tmp_path, lsn_time_mapping=str(mapping),
                 source_time="tran_begin_time").changes[0]
    assert change.commit_ts == "2024-01-02T03:04:05.120Z"
    timed = [{**rows[0], "__$commit_time": "2024-05-06 07:08:09.997"}]
    assert run(timed, tmp_path).changes[0].commit_ts == "2024-05-06T07:08:09.997Z"


def test_transaction_metadata_numbers_events(tmp_path: Path) -> None:
    """DBZ TransactionMonitor (provide.transaction.metadata): id = commit LSN, total_order and
    data_collection_order 1-based per event; both halves of a key change count."""
    rows = [row(A + 10, A + 2, 2, ALL, **_base(1)),
            row(A + 10, A + 4, 3, mask_hex([1]), **_base(1)),
            row(A + 10, A + 4, 4, mask_hex([1]), **_base(2))]
    result = run(rows, tmp_path, transaction_metadata=True, pairing=False)
    assert [(c.tx.id, c.tx.total_order) for c in result.changes if c.tx] == [
        ("00000025:00000d08:000a", 1), ("00000025:00000d08:000a", 2),
        ("00000025:00000d08:000a", 3)]


# --------------------------------------------------------------------------- descriptions

def test_capture_instance_from_system_table_dumps(tmp_path: Path) -> None:
    """ABOUT: capture instance metadata is in cdc.change_tables, cdc.index_columns and
    cdc.captured_columns; the default name is <schema>_<table>, the change table <name>_CT."""
    (tmp_path / "ct.csv").write_text(
        "object_id,version,source_object_id,capture_instance,start_lsn,supports_net_changes\n"
        "1269579561,0,1237579447,dbo_orders,0x0000002500000D080001,1\n")
    (tmp_path / "cc.csv").write_text(
        "object_id,column_name,column_id,column_type,column_ordinal,is_computed\n"
        "1269579561,id,1,int,1,0\n1269579561,name,2,nvarchar,2,0\n")
    (tmp_path / "ic.csv").write_text(
        "object_id,column_name,index_ordinal,column_id\n1269579561,id,1,1\n")
    instances = load_capture_instances([tmp_path / "ct.csv", tmp_path / "cc.csv",
                                        tmp_path / "ic.csv"], database="shop")
    orders = instances["dbo_orders"]
    assert orders.table.table_id == "shop.dbo.orders" and orders.key_columns == ("id",)
    assert [c.name for c in orders.columns] == ["id", "name"]
    assert orders.change_table == "cdc.dbo_orders_CT"


def test_capture_instance_from_sp_cdc_help_output(tmp_path: Path) -> None:
    """sys.sp_cdc_help_change_data_capture names the source table and lists the index and
    captured columns; sys.sp_cdc_get_captured_columns gives the exact types."""
    (tmp_path / "help.json").write_text(
        '[{"source_schema":"sales","source_table":"order_lines","capture_instance":"sales_ol",'
        '"index_column_list":"[order_id], [line]","captured_column_list":"[order_id], [line], '
        '[price]"}]')
    (tmp_path / "cols.csv").write_text(
        "source_schema,source_table,capture_instance,column_name,column_id,ordinal_position,"
        "data_type,character_maximum_length,numeric_precision,numeric_precision_radix,"
        "numeric_scale,datetime_precision\n"
        "sales,order_lines,sales_ol,order_id,1,1,int,NULL,10,10,0,NULL\n"
        "sales,order_lines,sales_ol,line,2,2,smallint,NULL,5,10,0,NULL\n"
        "sales,order_lines,sales_ol,price,4,3,decimal,NULL,12,10,3,NULL\n")
    instance = load_capture_instances([tmp_path / "help.json", tmp_path / "cols.csv"])["sales_ol"]
    assert instance.key_columns == ("order_id", "line")
    assert [(c.name, c.sql_type, c.ordinal) for c in instance.columns] == [
        ("order_id", "int", 1), ("line", "smallint", 2), ("price", "decimal(12,3)", 3)]
    with pytest.raises(ConfigError):
        load_capture_instances([tmp_path / "cols.csv", tmp_path / "cols.csv"])


# --------------------------------------------------------------------------- export spellings

EXPORTS = {
    "sqlcmd": (
        "__$start_lsn          ,__$seqval            ,__$operation,__$update_mask,id,name,"
        "amount,notes,flag\n"
        "---------------------,---------------------,------------,--------------,--,----,"
        "------,-----,----\n"
        "0x0000002500000D08000A,0x0000002500000D080002,2,0x1F,1,n1,1.50,NULL,1\n"
        "\n(1 rows affected)\n"),
    "bcp": ("0000002500000D08000A,,0000002500000D080002,2,1F,1,n1,1.50,,1,7\n"),
    "pandas": (",__$start_lsn,__$seqval,__$operation,__$update_mask,id,name,amount,notes,flag\n"
               "0,\"b'\\x00\\x00\\x00%\\x00\\x00\\r\\x08\\x00\\n'\","
               "\"b'\\x00\\x00\\x00%\\x00\\x00\\r\\x08\\x00\\x02'\",2,b'\\x1f',1,n1,1.5,,True\n"),
    "for-json": ('[{"__$start_lsn":"AAAAJQAADQgACg==","__$seqval":"AAAAJQAADQgAAg==",'
                 '"__$operation":2,"__$update_mask":"Hw==","id":1,"name":"n1","amount":1.50,'
                 '"flag":true}]'),
    "debezium-form": ('{"__$start_lsn":"00000025:00000d08:000a","__$seqval":'
                      '"00000025:00000d08:0002","__$operation":2,"__$update_mask":"0x1F",'
                      '"id":1,"name":"n1","amount":"1.50","notes":null,"flag":1}\n'),
}


@pytest.mark.parametrize("export", sorted(EXPORTS))
def test_export_spellings_read_the_same(export: str, tmp_path: Path) -> None:
    """CSV as sqlcmd (header, dash line, NULL, footer), bcp (no header, the change table's
    column order incl. __$end_lsn and __$command_id, bare hex, empty = NULL), pandas (index
    column, Python bytes), FOR JSON (base64 binary, absent = NULL) and Debezium's LSN form."""
    data = EXPORTS[export].encode()
    assert is_cdc_export(data[:200])
    result = run(data, tmp_path, source=f"dbo_orders_CT.{export}")
    assert not result.dead, [d.message for d in result.dead]
    [change] = result.changes
    assert change.after == {"id": 1, "name": "n1", "amount": "1.50", "notes": None,
                            "flag": True}
    assert change.position.commit_lsn == "00000025:00000d08:000a"
    assert change.position.change_lsn == "00000025:00000d08:0002"


def test_kafka_dumps_are_not_taken_for_change_table_rows() -> None:
    assert not is_cdc_export(b'{"topic":"t","partition":0,"offset":1,"key_b64":null}')
    assert not is_cdc_export(b"1\t{\"before\":null}")


def test_debezium_envelope_of_an_insert_is_the_connectors(tmp_path: Path) -> None:
    """The connector's envelope for one insert row (reference: the 2.7+ envelope field order
    before, after, source, transaction, op, ts_ms, ts_us, ts_ns; the source struct version,
    connector, name, ts_ms, snapshot, db, sequence, ts_us, ts_ns, schema, table, change_lsn,
    commit_lsn, event_serial_no; Decimal as BigInteger bytes; source.ts_ms the commit time). The
    processing-time fields (envelope ts_*) are null here, there being no connector clock."""
    from debezium_bridge.formats.debezium.writer import DebeziumOutOptions
    from debezium_bridge.output import OutputSettings

    rows = [row(A + 10, A + 2, 2, ALL, **_base(1), **{"__$commit_time": "2024-01-02 03:04:05.123"})]
    result = run(rows, tmp_path, topic_prefix="shop")
    settings = OutputSettings(debezium=DebeziumOutOptions(json_schemas=False))
    out = Output(["debezium"], settings, catalog=result.pipeline.catalog,
                 ledger=result.pipeline.ledger)
    [record] = out.encode(result.changes[0])
    ms = 1704164645123
    expected = {
        "before": None,
        "after": {"id": 1, "name": "n1", "amount": "AJY=", "notes": "long text", "flag": True},
        "source": {"version": "3.6.0.Final", "connector": "sqlserver", "name": "shop",
                   "ts_ms": ms, "snapshot": "false", "db": "testDB", "sequence": None,
                   "ts_us": ms * 1000, "ts_ns": ms * 1_000_000, "schema": "dbo",
                   "table": "orders", "change_lsn": "00000025:00000d08:0002",
                   "commit_lsn": "00000025:00000d08:000a", "event_serial_no": 1},
        "transaction": None, "op": "c", "ts_ms": None, "ts_us": None, "ts_ns": None}
    value = msgspec.json.decode(record.value or b"")
    assert value == expected
    assert list(value) == list(expected) and list(value["source"]) == list(expected["source"])
    assert record.topic == "shop.testDB.dbo.orders"
    assert msgspec.json.decode(record.key or b"") == {"id": 1}
    # with schemas: the key column is NOT NULL (optional false), the others optional
    schema_out = Output(["debezium"], catalog=result.pipeline.catalog)
    [with_schema] = schema_out.encode(result.changes[0])
    fields = msgspec.json.decode(with_schema.value or b"")["schema"]["fields"][1]["fields"]
    assert [(f["field"], f["optional"]) for f in fields] == [
        ("id", False), ("name", True), ("amount", True), ("notes", True), ("flag", True)]
