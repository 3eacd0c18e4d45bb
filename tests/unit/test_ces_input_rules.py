"""CES input rules from Microsoft's documentation and CloudEvents, on hand-built events.

Expected values come from the MS Learn CES pages as summarised in the reference ``ces.md``
(§1.2 ``@include_all_columns = 0`` "only includes columns that have changed"; §1.4 "current
latest schema version is 1", no DDL events; §1.5/§1.6 ``logicalid`` =
``<guid>:<commit LSN>:<sequencenumber>``, ``sequencenumber`` sorts the events of a transaction;
§3.1 CloudEvents: ``specversion`` ``"1.0"``, ``time`` RFC 3339, ``source`` + ``id`` identify an
event), SQL Server's type ranges and SPEC §5.1 (``unavailable_columns``: not sent, value null),
never from the code's own output.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.formats.ces.encode import CesEncoder
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.model.change import ChangeRecord
from tests.paths import DATA
from tests.unit.ces_support import as_records, events, run

SAMPLE = json.loads((DATA / "ces" / "mslearn-2026-08_employees_ins.json").read_text())
"""MF-26's INS example: the attributes every hand-built event starts from."""
COMMIT = "000000B1:000008A8:0007"
COLUMNS = [("Id", "int", 0), ("Name", "nvarchar(10)", 1), ("Qty", "int", 2)]


def event(operation: str, sequence: int, key: str, old: dict[str, str] | None = None,
          current: dict[str, str] | None = None,
          columns: list[tuple[str, str, int]] = COLUMNS, **attributes: Any) -> bytes:
    """One whole CES event in the MF-26 shape."""
    data = {
        "eventsource": {
            "db": "Db", "schema": "dbo", "tbl": "T",
            "cols": [{"name": n, "type": t, "index": i} for n, t, i in columns],
            "pkkey": [{"columnname": "Id", "value": key}],
            "transaction": {"commitlsn": COMMIT, "beginlsn": COMMIT, "sequencenumber": sequence,
                            "finalevent": False, "committime": SAMPLE["time"]}},
        "eventrow": {"old": json.dumps(old) if old else "{}",
                     "current": json.dumps(current) if current else "{}"}}
    guid = SAMPLE["logicalid"].split(":")[0]
    doc = {**SAMPLE, "id": f"00000000-0000-4000-8000-{sequence:012d}",
           "logicalid": f"{guid}:{COMMIT.replace(':', '')}:{sequence:020d}",
           "operation": operation, "data": json.dumps(data), **attributes}
    return json.dumps(doc).encode()


def row(key: str, name: str, qty: str) -> dict[str, str]:
    return {"Id": key, "Name": name, "Qty": qty}


# -- F1: a key change written as DEL + INS from CES input ----------------------------------

def key_change_transaction() -> list[bytes]:
    """One transaction: INS, a UPD changing the key 5 → 6, INS (sequence numbers 1, 2, 3)."""
    return [event("INS", 1, "1", current=row("1", "a", "1")),
            event("UPD", 2, "6", old=row("5", "b", "2"), current=row("6", "b", "2")),
            event("INS", 3, "7", current=row("7", "c", "3"))]


def delete_insert(changes: list[ChangeRecord], pipeline: Pipeline) -> list[dict[str, Any]]:
    options = CesOptions(key_changes="delete-insert")
    encoder = CesEncoder(options, pipeline.catalog)
    return events([m.value for c in changes for m in encoder.encode(c)], options)


def test_delete_insert_from_ces_input_gives_every_event_its_own_number() -> None:
    changes, dead, pipeline = run(as_records(key_change_transaction()))
    assert dead == [] and [c.key_changed for c in changes] == [False, True, False]
    out = delete_insert(changes, pipeline)
    assert [(e["operation"], e["data"]["eventsource"]["pkkey"][0]["value"]) for e in out] == [
        ("INS", "1"), ("DEL", "5"), ("INS", "6"), ("INS", "7")]
    numbers = [e["data"]["eventsource"]["transaction"]["sequencenumber"] for e in out]
    # one transaction: each event its own sequence number, sorting like the input (§1.5)
    assert numbers == sorted(set(numbers)) and len(set(numbers)) == 4
    for e, number in zip(out, numbers, strict=True):
        assert e["logicalid"].endswith(f":{number:020d}")  # §1.6
    assert len({e["logicalid"] for e in out}) == len({e["id"] for e in out}) == 4  # CE §3.1
    again, _, pipeline2 = run(as_records(key_change_transaction()))
    assert [e["id"] for e in delete_insert(again, pipeline2)] == [e["id"] for e in out]


def test_delete_insert_output_reads_back_without_a_fake_key_change() -> None:
    changes, _, pipeline = run(as_records(key_change_transaction()))
    values = [json.dumps(e | {"data": json.dumps(e["data"])}).encode()
              for e in delete_insert(changes, pipeline)]
    back, dead, _ = run(as_records(values))
    assert dead == []
    assert [(r.op, r.key, r.key_changed) for r in back] == [
        ("insert", {"Id": 1}, False), ("delete", {"Id": 5}, False),
        ("insert", {"Id": 6}, False), ("insert", {"Id": 7}, False)]


# -- F4: @include_all_columns = 0 -----------------------------------------------------------

PARTIAL = [("Name", "nvarchar(10)", 1)]
"""``cols`` of a UPD that changed only ``Name`` (table index 1)."""


@pytest.mark.parametrize("absent", ["unavailable", "null"])
def test_a_partial_update_reports_the_columns_it_leaves_out_as_unavailable(absent: str) -> None:
    values = [event("INS", 1, "1", current=row("1", "a", "5")),
              event("UPD", 2, "1", old={"Name": "a"}, current={"Name": "b"}, columns=PARTIAL)]
    changes, dead, _ = run(as_records(values), Pipeline(ces_options=CesOptions(
        absent_columns=absent)))  # type: ignore[arg-type]
    assert dead == []
    update = changes[1]
    assert update.op == "update" and update.key == {"Id": 1} and not update.key_changed
    assert update.changed_columns == ["Name"]
    assert update.unavailable_columns == ["Qty"]  # not sent, so not NULL (SPEC §5.1)
    # the key did not change: its value is pkkey's
    assert update.before == {"Id": 1, "Name": "a", "Qty": None}
    assert update.after == {"Id": 1, "Name": "b", "Qty": None}


def test_a_partial_update_without_an_earlier_event_keeps_the_listed_columns() -> None:
    changes, dead, _ = run(as_records([
        event("UPD", 1, "1", old={"Name": "a"}, current={"Name": "b"}, columns=PARTIAL)]))
    assert dead == [] and changes[0].after == {"Name": "b"}  # docs/ces.md: the limit


# -- F6: envelope and value checks ----------------------------------------------------------

@pytest.mark.parametrize(("attributes", "reason"), [
    ({"type": "com.microsoft.SQL.CES.DML.V2"}, "event type"),
    ({"type": "com.microsoft.SQL.CES.DDL.V1"}, "event type"),
    ({"specversion": "0.3"}, "specversion"),
    ({"time": "2026-08-07T25:99:99.000Z"}, "out of range"),
    ({"time": "2026-08-07T16:25:00.890+24:00"}, "out of range"),
])
def test_envelopes_outside_the_documented_format_are_dead_letters(attributes: dict[str, str],
                                                                 reason: str) -> None:
    changes, dead, _ = run(as_records([event("INS", 1, "1", current=row("1", "a", "1"),
                                             **attributes)]))
    assert changes == [] and [d.stage for d in dead] == ["envelope"]
    assert reason in dead[0].message and not dead[0].message.startswith("unexpected")


@pytest.mark.parametrize(("qty", "reason"), [
    ("--5", "invalid integer"),
    ("-", "invalid integer"),
])
def test_values_an_int_column_cannot_hold_are_dead_letters(qty: str, reason: str) -> None:
    changes, dead, _ = run(as_records([event("INS", 1, "1", current=row("1", "a", qty))]))
    assert changes == [] and [d.stage for d in dead] == ["convert"]
    assert reason in dead[0].message and "'Qty'" in dead[0].message


def test_a_value_beyond_the_range_of_real_is_a_dead_letter() -> None:
    # real: -3.40E+38 to 3.40E+38 (SQL Server float and real)
    columns = [("Id", "int", 0), ("Name", "nvarchar(10)", 1), ("Qty", "real", 2)]
    changes, dead, _ = run(as_records([
        event("INS", 1, "1", current=row("1", "a", "1e39"), columns=columns),
        event("INS", 2, "2", current=row("2", "b", "3.4e38"), columns=columns)]))
    assert [d.stage for d in dead] == ["convert"] and "out of range" in dead[0].message
    assert [c.key for c in changes] == [{"Id": 2}]
