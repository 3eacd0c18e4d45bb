"""CES decoder and segment assembler (``debezium_bridge.formats.ces.decode``).

The round trips start from simulated Debezium traffic whose rows are the test's own inputs:
Debezium → canonical → CES → canonical must give back every logical value CES carries (the
list of what it does not carry is in the README's CES section and asserted here as the only
differences). Segment tests cut real encoder output and feed it in other orders, twice, or
with a piece missing.
"""

from __future__ import annotations

import json
import random
from typing import Any

import msgspec
import pytest

from debezium_bridge.core import Translator
from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.formats.canonical import to_dict
from debezium_bridge.formats.ces.decode import synthetic_change_lsn
from debezium_bridge.formats.ces.encode import CesEncoder
from debezium_bridge.formats.ces.envelope import HALF_HEADER
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.records import RawRecord
from debezium_bridge.testing.simulator import (
    _DEMO_ROWS,
    CUSTOMERS,
    CdcSimulator,
    Insert,
    KeyChange,
    demo,
)
from tests.unit.ces_support import PROPAGATE, as_records, ces_values, run
from tests.unit.envelopes import insert, lsn

DEMO_ROWS = {row["id"]: row for row in _DEMO_ROWS}
CARRIED = ("table", "table_id", "key", "old_key", "key_changed", "before", "after",
           "changed_columns", "unavailable_columns", "commit_ts")
"""Canonical fields CES carries (the op too, with read → insert)."""


def carried(record: ChangeRecord) -> dict[str, Any]:
    d = to_dict(record)
    out = {k: d[k] for k in CARRIED}
    out["op"] = "insert" if d["op"] == "read" else d["op"]
    out["commit_lsn"] = d["position"]["commit_lsn"]
    return out


def round_trip(records: list[RawRecord], options: CesOptions | None = None,
               config: TranslatorConfig | None = None
               ) -> tuple[list[ChangeRecord], list[ChangeRecord], Pipeline]:
    first, _dead, pipeline = run(records)
    values = ces_values(first, pipeline, options)
    second, dead2, back = run(as_records(values), Pipeline(config, ces_options=options))
    assert dead2 == [], [d.describe() for d in dead2]
    return first, second, back


def test_demo_round_trip_keeps_every_carried_value() -> None:
    records, expected = demo()
    first, second, _ = round_trip(records)
    assert len(second) == len(first) == len(expected.changes)
    assert [carried(r) for r in second] == [carried(r) for r in first]
    pk = next(r for r in second if r.key_changed)
    assert pk.op == "update" and pk.old_key == next(c.old_key for c in expected.changes
                                                    if c.old_key)
    assert any(r.unavailable_columns for r in second)  # the LOB placeholder survives


def test_round_trip_with_exact_types_and_transaction_metadata() -> None:
    sim = CdcSimulator([CUSTOMERS], modes=PROPAGATE, transaction_metadata=True)
    sim.snapshot({"customers": [DEMO_ROWS[1], DEMO_ROWS[2]]})
    sim.commit([Insert("customers", DEMO_ROWS[3]), Insert("customers", DEMO_ROWS[4])])
    sim.commit([KeyChange("customers", DEMO_ROWS[4], DEMO_ROWS[4] | {"id": 77})])
    sim.finish()
    options = CesOptions(include_old_lob_values=True)  # notes is nvarchar(max): a known LOB
    first, second, back = round_trip(sim.records, options)
    assert [carried(r) for r in second] == [carried(r) for r in first]
    for a, b in zip(first, second, strict=True):
        if a.tx is not None:  # exact sequence numbers from the transaction block
            assert b.tx is not None and b.tx.total_order == a.tx.total_order
    cols = back.catalog.lookup(first[0].table, tuple(first[0].after or {}))
    assert cols is not None and [c.type for c in cols] == [c.sql_type for c in CUSTOMERS.columns]


def test_positions_of_ces_records() -> None:
    records, _ = demo()
    _first, second, _ = round_trip(records)
    for record in second:
        assert record.tx is not None
        sequence = record.tx.total_order
        assert sequence is not None
        # CES has no change LSN: the sequence number stands in, in VLF 0 (module docstring)
        assert record.position.change_lsn == synthetic_change_lsn(sequence)
        assert record.position.change_lsn.startswith("00000000:")
        assert record.position.event_serial_no == (2 if record.op == "update" else 1)
        assert record.source.name == "ces" and record.source.connector == "sqlserver"
        assert record.tx.id == record.position.commit_lsn
    assert [r.seq for r in second] == sorted(r.seq for r in second)


def test_two_updates_of_one_row_in_one_transaction_are_both_kept() -> None:
    # Debezium's replay dedupe works on positions: CES events must never share one
    sim = CdcSimulator([CUSTOMERS])
    from debezium_bridge.testing.simulator import Update

    row = DEMO_ROWS[1]
    sim.commit([Insert("customers", row)])
    sim.commit([Update("customers", row, row | {"name": "A"}),
                Update("customers", row | {"name": "A"}, row | {"name": "B"}),
                Insert("customers", DEMO_ROWS[2]),
                KeyChange("customers", DEMO_ROWS[2], DEMO_ROWS[2] | {"id": 99})])
    first, second, _ = round_trip(sim.records)
    assert [(r.op, r.key_changed) for r in second] == [
        ("insert", False), ("update", False), ("update", False), ("insert", False),
        ("update", True)]
    assert [carried(r) for r in second] == [carried(r) for r in first]


def test_delete_insert_option_reads_back_as_delete_and_insert() -> None:
    records, _ = demo()
    options = CesOptions(key_changes="delete-insert")
    _, second, _ = round_trip(records, options)
    assert not any(r.key_changed for r in second)
    ops = [r.op for r in second]
    assert ops.count("delete") == 2 and ops.count("insert") == 6  # 3 snapshot + 2 + new key


def test_key_changing_update_needs_the_assembler() -> None:
    records, _ = demo()
    first, _, pipeline = run(records)
    values = ces_values(first, pipeline)
    translator = Translator()  # the plain decoder detects CES, but cannot split an update
    outs = list(translator.translate(as_records(values)))
    dead = [o for o in outs if not isinstance(o, ChangeRecord)]
    assert len(dead) == 1 and "CesAssembler" in dead[0].message
    assert translator.counters.balanced
    # through the assembler, with pairing off: the two halves, like Debezium's d + c
    changes, _, p = run(as_records(values), Pipeline(TranslatorConfig(pair_key_changes=False)))
    assert p.assembler.counters.split_updates == 1
    halves = [r for r in changes if r.position.commit_lsn == next(
        f.position.commit_lsn for f in first if f.key_changed)]
    assert [(r.op, r.key) for r in halves] == [("delete", {"id": 4}), ("insert", halves[1].key)]
    assert all(r.lineage[0] == halves[0].lineage[0] for r in halves)


# --------------------------------------------------------------------------- segments


def big_insert(size: int = 1_500_000, key: int = 7) -> tuple[list[RawRecord], dict[str, Any]]:
    unit = 'abc/"\\ é 日本 😀\n'
    n = size // (2 * len(unit.encode()))
    row = DEMO_ROWS[1] | {"id": key, "email": unit * n, "notes": unit[::-1] * n}
    sim = CdcSimulator([CUSTOMERS], modes=PROPAGATE)
    sim.commit([Insert("customers", row)])
    return sim.records, row


def segments(options: CesOptions, size: int = 1_500_000) -> tuple[list[bytes], dict[str, Any],
                                                                  ChangeRecord]:
    records, row = big_insert(size)
    (change,), _, pipeline = run(records)
    values = [m.value for m in CesEncoder(options, pipeline.catalog).encode(change)]
    assert len(values) > 2
    return values, row, change


@pytest.mark.parametrize("base", [0, 1])
@pytest.mark.parametrize("order", ["forward", "reverse", "shuffled", "first-last"])
def test_segments_reassemble_in_any_order(base: int, order: str) -> None:
    options = CesOptions(segment_index_base=base)
    values, row, original = segments(options)
    if order == "reverse":
        values = values[::-1]
    elif order == "shuffled":
        random.Random(5).shuffle(values)
    elif order == "first-last":
        values = values[1:] + values[:1]
    (change,), dead, pipeline = run(as_records(values))
    assert dead == []
    assert change.after == row and carried(change) == carried(original)
    c = pipeline.assembler.counters
    assert (c.assembled, c.absorbed, c.held, c.records_in) == (1, len(values) - 1, 0,
                                                               len(values))
    assert change.lineage[0].offset == len(values) - 1  # the segment that completed it


def test_duplicate_segments_and_a_resent_event_are_dropped() -> None:
    values, row, _ = segments(CesOptions())
    stream = values[:2] + values[:1] + values[2:] + values  # a segment twice, then all again
    changes, dead, pipeline = run(as_records(stream))
    assert dead == [] and [c.after for c in changes] == [row]
    c = pipeline.assembler.counters
    assert c.duplicates == 1 + len(values) and c.assembled == 1


def test_a_missing_segment_is_reported_not_guessed() -> None:
    values, _, _ = segments(CesOptions())
    held = values[:1] + values[2:]  # segment 2 (base 1) never arrives
    changes, dead, pipeline = run(as_records(held))
    assert changes == []
    assert len(dead) == len(held)  # every held segment, with its bytes, to the DLQ
    assert {d.stage for d in dead} == {"ces-assemble"}
    assert all("incomplete" in d.message and "not guessed" in d.message for d in dead)
    assert sorted(d.record.value for d in dead) == sorted(held)
    c = pipeline.assembler.counters
    assert (c.dead_letters, c.held, c.assembled) == (len(held), 0, 0) and c.balanced


def test_too_many_held_segments_release_the_oldest_as_dead_letters() -> None:
    _records, first_row = big_insert(key=7)
    _, second_row = big_insert(key=8)
    sim = CdcSimulator([CUSTOMERS], modes=PROPAGATE)  # two transactions: two logicalids
    sim.commit([Insert("customers", first_row)])
    sim.commit([Insert("customers", second_row)])
    changes, _, pipeline = run(sim.records)
    encoder = CesEncoder(catalog=pipeline.catalog)
    first, second = ([m.value for m in encoder.encode(c)] for c in changes)
    bound = len(second)
    stream = first[:-1] + second + first[-1:]  # the first event is incomplete for too long
    changes, dead, p = run(as_records(stream), Pipeline(ces_options=CesOptions(
        max_pending_segments=bound)))
    assert [c.after for c in changes] == [second_row]
    assert len(dead) == len(first)  # its held segments, and its late last one
    assert "max_pending_segments" in dead[0].message
    assert (p.assembler.counters.dead_letters, p.assembler.counters.held) == (len(first), 0)


def test_legacy_split_attributes_reassemble() -> None:
    values, row, _ = segments(CesOptions(segment_index_base=0))
    legacy = []
    for value in values:  # MF-25 names: splitindex + splittotalcnt (A1)
        doc = json.loads(value)
        doc["splitindex"], doc["splittotalcnt"] = doc.pop("segmentindex"), len(values)
        del doc["finalsegment"]
        legacy.append(json.dumps(doc).encode())
    (change,), dead, _ = run(as_records(legacy[::-1]))
    assert dead == [] and change.after == row


def test_a_segment_given_straight_to_the_decoder_is_a_dead_letter() -> None:
    values, _, _ = segments(CesOptions())
    outs = list(Translator().translate(as_records(values[:1])))
    assert len(outs) == 1 and "reassembled" in outs[0].message  # type: ignore[union-attr]


def test_pretty_inner_json_and_ascii_escapes_decode_the_same() -> None:
    records, _ = demo()
    plain = round_trip(records)[1]
    for options in (CesOptions(inner_json="pretty"), CesOptions(ascii_only=True),
                    CesOptions(escape_slashes=False), CesOptions(envelope_indent=2)):
        assert [carried(r) for r in round_trip(records, options)[1]] == \
            [carried(r) for r in plain]


def test_absent_columns_as_null() -> None:
    records, _ = demo()
    plain = round_trip(records)[1]
    nulls = round_trip(records, CesOptions(absent_columns="null"))[1]
    (lob,) = [i for i, r in enumerate(plain) if r.unavailable_columns]
    assert nulls[lob].unavailable_columns == [] and nulls[lob].after["notes"] is None
    assert [carried(r) for i, r in enumerate(nulls) if i != lob] == \
        [carried(r) for i, r in enumerate(plain) if i != lob]


def test_ces_and_debezium_input_mix() -> None:
    records, _ = demo()
    first, _, pipeline = run(records)
    ces = as_records(ces_values(first[:3], pipeline), topic="ces-topic")
    other = [insert(50, 900, partition=0, offset=0)]  # a Debezium record of another table
    changes, dead, _ = run(ces + other)
    assert dead == []
    assert sorted(c.table_id for c in changes) == sorted(
        [first[0].table_id] * 3 + ["testDB.dbo.customers"])
    assert any(c.position.change_lsn == lsn(900, 2) for c in changes)


def test_bad_ces_input_becomes_dead_letters() -> None:
    records, _ = demo()
    first, _, pipeline = run(records)
    good = json.loads(ces_values(first[:1], pipeline)[0])
    data = json.loads(good["data"])
    wrong_value = json.loads(json.dumps(data))
    wrong_value["eventrow"]["current"] = json.dumps({"id": "one"})
    bad = [b"{" + b'"type":"com.microsoft.SQL.CES.DML.V1"',  # truncated
           json.dumps({**good, "operation": "MERGE"}).encode(),
           json.dumps({**good, "data": json.dumps(wrong_value)}).encode(),
           json.dumps({**good, "data": "{}"}).encode()]
    changes, dead, _ = run(as_records(bad))
    assert changes == [] and len(dead) == len(bad)
    assert {d.stage for d in dead} >= {"decode", "envelope", "convert"}


def test_data_collection_order_counts_per_table_within_a_transaction() -> None:
    records, _ = demo()
    first, _, pipeline = run(records)
    snapshot = [r for r in first if r.op == "read"]
    assert len(snapshot) == 3
    values = ces_values(snapshot, pipeline)
    _, second, _ = round_trip(records)
    orders = [r.tx.data_collection_order for r in second[:3] if r.tx is not None]
    assert orders == [1, 2, 3]
    again, _, _ = run(as_records(values + values))  # a re-sent event keeps its number
    assert [r.tx.data_collection_order for r in again if r.tx] == [1, 2, 3]


def test_half_header_only_applies_to_updates() -> None:
    records, _ = demo()
    first, _, pipeline = run(records)
    (value,) = ces_values(first[:1], pipeline)
    record = msgspec.structs.replace(as_records([value])[0],
                                     headers=((HALF_HEADER, b"delete"),))
    (change,), _, _ = run([record])
    assert change.op == "insert"


def test_begin_lsn_appears_only_for_ces_input() -> None:
    records, _ = demo(transaction_metadata=True)
    first, second, _ = round_trip(records)
    from debezium_bridge.formats.canonical import to_json

    with_tx = [json.loads(to_json(r)) for r in first if r.tx is not None]
    assert with_tx and all(set(r["tx"]) == {"id", "total_order", "data_collection_order"}
                           for r in with_tx)  # canonical format_version 1 unchanged
    assert all(json.loads(to_json(r))["tx"]["begin_lsn"] for r in second)
