"""Core rules of SPEC §4: ordering, replay dedupe, PK-change pairing, snapshots, conservation."""

from __future__ import annotations

import json

import pytest

from debezium_bridge.core import Translator
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.model.change import ChangeRecord
from tests.unit.envelopes import TOPIC, delete, event, insert, lsn, row, tombstone, update


def run(records, config=None, expect=None) -> tuple[list[ChangeRecord], Translator]:
    t = Translator(config)
    if expect:
        t.expect(expect)
    out = [o for o in t.translate(records) if isinstance(o, ChangeRecord)]
    assert t.counters.balanced, t.counters.summary()
    assert t.counters.pending == 0
    return out, t


def test_orders_by_commit_then_change_then_serial_across_partitions():
    # change_lsn of the later transaction is LOWER: never order by change_lsn alone
    a = event("c", 1, commit=lsn(10), change=lsn(9, 5), serial=1, after=row(1), partition=0)
    b = event("c", 2, commit=lsn(11), change=lsn(3, 1), serial=1, after=row(2), partition=1)
    c = event("u", 1, commit=lsn(11), change=lsn(3, 1), serial=3, before=row(1), after=row(1, "b"),
              partition=0, offset=1)
    out, _ = run([b, a, c], expect=[(TOPIC, 0), (TOPIC, 1)])
    assert [(r.op, r.key["id"], r.position.event_serial_no) for r in out] == [
        ("insert", 1, 1), ("insert", 2, 1), ("update", 1, 3)]
    assert [r.seq for r in out] == sorted(r.seq for r in out)


def test_lsn_forms_compare_as_unsigned_bytes():
    upper = event("c", 1, commit="0000002A:00000001:0001", change="0X0000002A000000010001",
                  serial=1, after=row(1))
    low = event("c", 2, commit="00000009:ffffffff:ffff", change="00000009:ffffffff:ffff",
                serial=1, after=row(2), partition=1)
    out, _ = run([upper, low])
    assert [r.key["id"] for r in out] == [2, 1]
    assert out[1].position.commit_lsn == "0000002a:00000001:0001"  # Debezium's lower-case form
    assert out[1].position.change_lsn == "0000002a:00000001:0001"


def test_replayed_suffix_produces_no_second_output():
    first = [insert(1, 1, offset=0), update(1, 2, "a", "b", offset=1), delete(1, 3, offset=2),
             tombstone(1, offset=3)]
    replay = [update(1, 2, "a", "b", offset=4, ts_ms=1_800_000_000_000),
              delete(1, 3, offset=5, ts_ms=1_800_000_000_000), tombstone(1, offset=6)]
    out, t = run(first + replay)
    assert [r.op for r in out] == ["insert", "update", "delete"]
    assert t.counters.duplicates == 2
    assert t.counters.tombstones == 2
    assert t.counters.records_in == 7


def test_event_id_is_the_same_on_replay():
    out1, _ = run([update(1, 2, "a", "b", offset=1)])
    out2, _ = run([update(1, 2, "a", "b", offset=99, ts_ms=1)])
    assert out1[0].event_id == out2[0].event_id
    assert out1[0].lineage[0].offset == 1 and out2[0].lineage[0].offset == 99


def _pk_change(serials=(1, 2), headers=False):
    commit, change = lsn(5), lsn(5, 3)
    d = event("d", 7, commit=commit, change=change, serial=serials[0], before=row(7, "x"),
              partition=0, offset=10,
              headers=((("__debezium.newkey", b'{"id":8}'),) if headers else ()))
    tomb = tombstone(7, partition=0, offset=11)
    c = event("c", 8, commit=commit, change=change, serial=serials[1], after=row(8, "x"),
              partition=2, offset=4,
              headers=((("__debezium.oldkey", b'{"id":7}'),) if headers else ()))
    return d, tomb, c


@pytest.mark.parametrize("serials,headers", [((1, 2), False), ((2, 2), True), ((1, 1), False)])
@pytest.mark.parametrize("create_first", [True, False])
def test_pk_change_halves_merge_into_one_update(serials, headers, create_first):
    d, tomb, c = _pk_change(serials, headers)
    records = [c, d, tomb] if create_first else [d, tomb, c]
    out, t = run(records, expect=[(TOPIC, 0), (TOPIC, 2)])
    assert len(out) == 1
    r = out[0]
    assert (r.op, r.key, r.old_key, r.key_changed) == ("update", {"id": 8}, {"id": 7}, True)
    assert r.before == row(7, "x") and r.after == row(8, "x")
    assert r.changed_columns == ["id"]
    assert [(x.partition, x.offset) for x in r.lineage] == [(0, 10), (2, 4)]
    assert (t.counters.merged, t.counters.key_changes_paired, t.counters.tombstones) == (1, 1, 1)


def test_pairing_can_be_turned_off():
    d, tomb, c = _pk_change()
    out, _ = run([c, d, tomb], TranslatorConfig(pair_key_changes=False))
    assert [(r.op, r.key["id"]) for r in out] == [("delete", 7), ("insert", 8)]  # d before c


def test_equal_key_delete_create_folds_into_plain_update():
    commit, change = lsn(6), lsn(6, 1)
    d = event("d", 3, commit=commit, change=change, serial=1, before=row(3, "old"))
    c = event("c", 3, commit=commit, change=change, serial=2, after=row(3, "new"), offset=2)
    out, t = run([d, tombstone(3, offset=1), c])
    assert len(out) == 1
    assert (out[0].op, out[0].key_changed, out[0].old_key) == ("update", False, None)
    assert out[0].changed_columns == ["name"]
    assert t.counters.key_changes_paired == 0 and t.counters.merged == 1


def test_ambiguous_multi_row_key_changes_are_not_guessed():
    commit, change = lsn(6), lsn(6, 1)
    recs = [event("d", 1, commit=commit, change=change, serial=1, before=row(1)),
            event("d", 2, commit=commit, change=change, serial=2, before=row(2), offset=1),
            event("c", 11, commit=commit, change=change, serial=3, after=row(11), partition=1),
            event("c", 12, commit=commit, change=change, serial=4, after=row(12), partition=1,
                  offset=1)]
    out, _ = run(recs)
    assert [r.op for r in out] == ["delete", "delete", "insert", "insert"]


def test_delete_and_create_at_different_change_lsn_are_not_paired():
    d = event("d", 1, commit=lsn(7), change=lsn(7, 1), serial=1, before=row(1))
    c = event("c", 2, commit=lsn(7), change=lsn(7, 2), serial=1, after=row(2), partition=1)
    out, _ = run([c, d])
    assert [(r.op, r.key_changed) for r in out] == [("delete", False), ("insert", False)]


def test_snapshot_rows_dedupe_by_table_key_and_commit():
    snap = [event("r", i, commit=lsn(1), change=None, serial=None, after=row(i),
                  snapshot="true" if i else "first", offset=i) for i in range(3)]
    replay = [event("r", 1, commit=lsn(1), change=None, serial=None, after=row(1),
                    snapshot="true", offset=9)]
    out, t = run(snap + replay)
    assert [(r.op, r.key["id"], r.snapshot) for r in out] == [
        ("read", 0, "first"), ("read", 1, "true"), ("read", 2, "true")]
    assert t.counters.duplicates == 1
    assert out[0].position.change_lsn is None and out[0].position.event_serial_no is None


def test_incremental_snapshot_row_is_not_a_duplicate_of_the_streamed_event():
    streamed = update(1, 4, "a", "b", offset=0)
    incremental = event("r", 1, commit=lsn(4), change=lsn(4, 2), serial=2, after=row(1, "b"),
                        snapshot="incremental", offset=1)
    out, t = run([streamed, incremental])
    assert [r.op for r in out] == ["update", "read"]
    assert t.counters.duplicates == 0


def test_boolean_snapshot_and_string_serial_are_tolerated():
    rec = event("c", 1, commit=lsn(2), change=lsn(2, 1), serial="1", after=row(1), snapshot=False)
    out, _ = run([rec])
    assert out[0].snapshot == "false" and out[0].position.event_serial_no == 1


def test_unavailable_lob_is_never_a_value():
    rec = event("u", 1, commit=lsn(3), change=lsn(3, 1), serial=2,
                before=row(1, "a", "__debezium_unavailable_value"),
                after=row(1, "b", "__debezium_unavailable_value"))
    out, _ = run([rec])
    r = out[0]
    assert r.after["notes"] is None and r.before["notes"] is None
    assert r.unavailable_columns == ["notes"]
    assert r.changed_columns == ["name"]


def test_truncate_and_message_ops():
    t_rec = event("t", None, commit=lsn(3), change=lsn(3, 1), serial=1)
    m_rec = event("m", None, commit=lsn(3), change=lsn(3, 1), serial=1, offset=1)
    out, t = run([t_rec, m_rec])
    assert [r.op for r in out] == ["truncate"]
    assert t.counters.skipped == 1


def test_side_topics_are_counted_not_translated():
    begin = json.dumps({"status": "BEGIN", "id": lsn(9), "event_count": None,
                        "data_collections": None, "ts_ms": 1}).encode()
    heartbeat = json.dumps({"ts_ms": 5}).encode()
    schema_change = json.dumps({"source": {}, "ts_ms": 1, "databaseName": "testDB",
                                "schemaName": "dbo", "ddl": None, "tableChanges": []}).encode()
    from debezium_bridge.model.records import RawRecord

    recs = [RawRecord("server1.transaction", 0, 0, None, None, begin),
            RawRecord("__debezium-heartbeat.server1", 0, 0, None, None, heartbeat),
            RawRecord("server1", 0, 0, None, None, schema_change)]
    out, t = run(recs)
    assert out == [] and t.counters.side_records == 3


def test_a_flattened_row_is_no_side_record_whatever_its_columns():
    """A row ExtractNewRecordState flattened is no envelope (a dead letter), even when its
    table has a column named like a member of a schema-change or transaction value: those
    values have no other members (reference §1.4 and §6, side topics)."""
    from debezium_bridge.model.records import RawRecord

    rows = [{"id": 1, "ddl": "ALTER TABLE t ADD c int"}, {"id": 2, "databaseName": "crm"},
            {"id": "3", "status": "END", "owner": "ops"}]
    recs = [RawRecord(TOPIC, 0, n, None, None, json.dumps(row).encode())
            for n, row in enumerate(rows)]
    out, t = run(recs)
    assert out == [] and t.counters.side_records == 0 and t.counters.dead_letters == 3


def test_watermark_waits_for_every_expected_partition():
    t = Translator()
    t.expect([(TOPIC, 0), (TOPIC, 1)])
    t.process(insert(1, 1, partition=0))
    t.process(insert(2, 2, partition=0, offset=1))
    assert t.drain()[0] == []  # partition 1 not heard from yet
    t.process(insert(3, 3, partition=1))
    # watermark = min(partition 0 at commit 2, partition 1 at commit 3): only commit 1 is safe,
    # partition 0 may still deliver more events of commit 2
    assert [r.key["id"] for r in t.drain()[0]] == [1]
    t.mark_idle((TOPIC, 0))
    assert [r.key["id"] for r in t.drain()[0]] == [2]  # 3 is at the watermark itself
    t.flush()
    assert [r.key["id"] for r in t.drain()[0]] == [3]


def test_transaction_end_releases_a_complete_transaction():
    t = Translator()
    t.expect([(TOPIC, 0), (TOPIC, 1)])
    t.process(insert(1, 4, partition=0))
    t.process(insert(2, 4, partition=0, offset=1))
    end = json.dumps({"status": "END", "id": lsn(4), "event_count": 2,
                      "data_collections": [{"data_collection": "testDB.dbo.customers",
                                            "event_count": 2}], "ts_ms": 1}).encode()
    from debezium_bridge.model.records import RawRecord

    assert t.drain()[0] == []
    t.process(RawRecord("server1.transaction", 0, 0, None, None, end))
    assert [r.key["id"] for r in t.drain()[0]] == [1, 2]


def test_pressure_releases_lowest_positions_first_and_late_events_are_kept(caplog):
    t = Translator(TranslatorConfig(max_pending=2))
    t.expect([(TOPIC, 0), (TOPIC, 1)])
    for i in range(4):
        t.process(insert(10 + i, 10 + i, partition=0, offset=i))
    assert [r.key["id"] for r in t.drain()[0]] == [10, 11]
    t.process(insert(5, 5, partition=1))  # older than what was already released
    t.flush()
    assert [r.key["id"] for r in t.drain()[0]] == [5, 12, 13]
    assert t.counters.late == 1 and t.counters.released_by_pressure == 2
    assert t.counters.balanced
    forced = [r for r in caplog.records if "max_pending=2" in r.getMessage()]
    assert len(forced) == 1 and forced[0].levelname == "WARNING"  # logged once, when it starts


def test_keyless_table_replay_in_another_partition_is_dropped():
    rec = event("c", None, commit=lsn(3), change=lsn(3, 1), serial=1, after=row(1), partition=0)
    again = event("c", None, commit=lsn(3), change=lsn(3, 1), serial=1, after=row(1), partition=1,
                  offset=5)
    out, t = run([rec, again])
    assert len(out) == 1 and out[0].key == {} and t.counters.duplicates == 1


def test_changed_columns_per_op():
    out, _ = run([insert(1, 1), update(1, 2, "a", "b", offset=1), delete(1, 3, offset=2)])
    assert [r.changed_columns for r in out] == [["id", "name", "notes"], ["name"],
                                                ["id", "name", "notes"]]
    assert out[0].before is None and out[2].after is None
    assert out[2].key == {"id": 1}
