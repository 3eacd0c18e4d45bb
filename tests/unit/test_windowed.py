"""The Spark runner's state rules (``core.windowed.WindowState``) without Spark: replay dedupe per
position group, key-change pairing across calls, release at the watermark, late events and the
state round trip through bytes (what Spark keeps between micro-batches).

Every test runs on both windows (the suite's cores, :mod:`tests.support.cores`): the Python
reference :class:`WindowState` and the native one (``core.windowed_native.NativeWindowState``).
"""

from __future__ import annotations

from typing import Any

from debezium_bridge.core import native
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.core.windowed import (
    PartitionMark,
    ProgressTracker,
    Topology,
    WindowState,
    event_bytes,
    event_from_bytes,
)
from debezium_bridge.core.windowed_native import NativeWindowState
from debezium_bridge.formats.debezium.decode import Decoder
from debezium_bridge.model.change import ChangeEvent, ChangeRecord
from debezium_bridge.model.lsn import parse_lsn
from tests.unit.envelopes import event, insert, lsn, row, update

_decoder = Decoder()
COMMIT_MS = 1_000_000


def Window(config: TranslatorConfig | None = None, stored: bytes | None = None,
           topology: Topology | None = None) -> Any:
    """The window of the suite's core (``DEBEZIUM_BRIDGE_NATIVE``, set per test)."""
    cls = NativeWindowState if native.use_native("auto") else WindowState
    return cls(config, stored, topology)


def decoded(record: Any) -> ChangeEvent:
    result = _decoder.decode(record)
    assert isinstance(result, ChangeEvent)
    return result


def pk_change(old: int, new: int, n: int, *, delete_partition: int = 0,
              create_partition: int = 1) -> tuple[ChangeEvent, ChangeEvent]:
    """A primary-key change as Debezium SQL Server sends it (reference §3.4, Case A): a delete
    of the old key (serial 1) and a create of the new key (serial 2) at one position."""
    d = event("d", old, commit=lsn(n), change=lsn(n, 2), serial=1, before=row(old),
              partition=delete_partition, offset=n)
    c = event("c", new, commit=lsn(n), change=lsn(n, 2), serial=2, after=row(new),
              partition=create_partition, offset=n)
    return decoded(d), decoded(c)


def changes(window: Any) -> list[ChangeRecord]:
    return window.drain()


def test_updates_come_out_at_once_and_a_replay_of_them_is_dropped() -> None:
    window = Window()
    first = decoded(update(1, 5, "a", "b", offset=3))
    window.add([(first, COMMIT_MS)], watermark_ms=0)
    out = changes(window)
    assert [(c.op, c.key, (c.after or {}).get("name")) for c in out] == [("update", {"id": 1}, "b")]
    replay = decoded(update(1, 5, "a", "b", offset=9))  # same source block, later offset
    window.add([(replay, COMMIT_MS)], watermark_ms=0)
    assert changes(window) == []
    assert window.counters.duplicates == 1
    assert window.counters.changes_out == 1


def test_key_change_halves_pair_across_calls_in_either_order() -> None:
    for order in ("delete first", "create first"):
        d, c = pk_change(1, 2, 7)
        first, second = (d, c) if order == "delete first" else (c, d)
        window = Window()
        window.add([(first, COMMIT_MS)], watermark_ms=0)
        assert changes(window) == [], order  # a lone half waits for its partner
        assert window.waiting_events() == 1
        window.add([(second, COMMIT_MS)], watermark_ms=0)
        out = changes(window)
        assert [(r.op, r.key, r.old_key, r.key_changed) for r in out] == \
            [("update", {"id": 2}, {"id": 1}, True)], order
        assert [(x.partition, x.offset) for x in out[0].lineage] == [(0, 7), (1, 7)]
        assert window.counters.merged == 1
        assert window.waiting_events() == 0


def test_a_lone_create_is_released_as_an_insert_once_the_watermark_passes() -> None:
    window = Window()
    window.add([(decoded(insert(3, 4)), COMMIT_MS)], watermark_ms=0)
    assert changes(window) == []
    assert window.next_timeout_ms() == COMMIT_MS
    window.release(COMMIT_MS)  # not below the watermark yet
    assert changes(window) == []
    window.release(COMMIT_MS + 1)
    assert [(c.op, c.key) for c in changes(window)] == [("insert", {"id": 3})]
    assert len(window) == 0
    assert window.next_timeout_ms() is None


def test_an_event_whose_group_was_released_is_emitted_unpaired_and_counted_late() -> None:
    window = Window()
    d, c = pk_change(1, 2, 8)
    window.add([(d, COMMIT_MS)], watermark_ms=0)
    window.release(COMMIT_MS + 1)
    assert [r.op for r in changes(window)] == ["delete"]
    window.add([(c, COMMIT_MS)], watermark_ms=COMMIT_MS + 1)
    assert [(r.op, r.key) for r in changes(window)] == [("insert", {"id": 2})]
    assert window.counters.late == 1


def test_state_survives_the_round_trip_through_bytes() -> None:
    d, c = pk_change(1, 2, 9)
    window = Window()
    window.add([(event_from_bytes(event_bytes(d)), COMMIT_MS)], watermark_ms=0)
    window.add([(decoded(update(5, 10, "a", "b")), COMMIT_MS)], watermark_ms=0)
    assert [r.op for r in changes(window)] == ["update"]
    restored = Window(stored=window.dump())
    assert restored.waiting_events() == 1
    restored.add([(decoded(update(5, 10, "a", "b", offset=99)), COMMIT_MS)], watermark_ms=0)
    restored.add([(event_from_bytes(event_bytes(c)), COMMIT_MS)], watermark_ms=0)
    out = changes(restored)
    assert [(r.op, r.key, r.old_key) for r in out] == [("update", {"id": 2}, {"id": 1})]
    assert restored.counters.duplicates == 1  # the update replayed after the restore


def test_replay_copies_in_one_call_keep_the_lowest_kafka_coordinates() -> None:
    original = decoded(update(1, 5, "a", "b", partition=0, offset=3))
    replay = decoded(update(1, 5, "a", "b", partition=0, offset=40))
    for events in ([original, replay], [replay, original]):
        window = Window()
        window.add([(e, COMMIT_MS) for e in events], watermark_ms=0)
        out = changes(window)
        assert [x.offset for x in out[0].lineage] == [3]
        assert window.counters.duplicates == 1


# -- release rules: position watermark, transaction END, end of input; replays after release ----

TOPIC = "server1.testDB.dbo.customers"


def progress(*events: ChangeEvent, offset: int | None = None) -> list[tuple[str, int, Any]]:
    """The marks a decode task reports after reading ``events`` (in this order)."""
    tracker = ProgressTracker()
    for e in events:
        tracker.record(e.record.topic, e.record.partition,
                       offset if offset is not None else e.record.offset)
        tracker.event(e)
    return tracker.marks()


def test_a_lone_delete_goes_once_every_partition_of_its_topic_passed_its_commit() -> None:
    d, _ = pk_change(1, 2, 10, delete_partition=0)
    later0 = decoded(update(7, 11, "a", "b", partition=0, offset=20))
    later1 = decoded(update(8, 12, "a", "b", partition=1, offset=21))
    window = Window(topology=Topology(partitions={TOPIC: 2}))
    window.add([(d, COMMIT_MS)], watermark_ms=0)
    window.observe(progress(d))
    window.release(0)
    assert changes(window) == [] and window.waiting_events() == 1
    # partition 0 moved on, partition 1 has not been heard from: the create may still come
    window.add([(later0, COMMIT_MS)], watermark_ms=0)
    window.observe(progress(later0))
    window.release(0)
    assert [r.op for r in changes(window)] == ["update"]
    assert window.waiting_events() == 1
    window.add([(later1, COMMIT_MS)], watermark_ms=0)
    window.observe(progress(later1))
    window.release(0)
    assert [r.op for r in changes(window)] == ["update", "delete"]
    assert window.released["position"] == 1 and window.waiting_events() == 0
    assert set(window.marks()) == {(TOPIC, 0), (TOPIC, 1)}


def test_a_topic_without_known_partitions_is_never_released_by_the_position_rule() -> None:
    d, _ = pk_change(1, 2, 10, delete_partition=0)
    later = decoded(update(7, 11, "a", "b", partition=0, offset=20))
    window = Window()  # partitions unknown: partition 1 might hold the create
    window.add([(d, COMMIT_MS), (later, COMMIT_MS)], watermark_ms=0)
    window.observe(progress(d, later))
    window.release(0)
    assert window.waiting_events() == 1


def test_the_halves_in_one_call_pair_whatever_the_progress_says() -> None:
    d, c = pk_change(1, 2, 10, delete_partition=0, create_partition=1)
    window = Window(topology=Topology(partitions={TOPIC: 2}))
    window.add([(d, COMMIT_MS)], watermark_ms=0)
    window.observe(progress(d))
    window.release(0)
    later = decoded(update(7, 11, "a", "b", partition=0, offset=30))
    window.add([(c, COMMIT_MS), (later, COMMIT_MS)], watermark_ms=0)
    window.observe(progress(c, later))
    window.release(0)
    out = changes(window)
    assert [(r.op, r.key_changed) for r in out] == [("update", True), ("update", False)]


def test_a_transaction_end_releases_its_events_once_all_were_seen() -> None:
    tx = {"id": lsn(10), "total_order": 1, "data_collection_order": 1}
    first = decoded(event("c", 1, commit=lsn(10), change=lsn(10, 1), serial=1, after=row(1),
                          partition=0, offset=1, tx=tx))
    second = decoded(event("c", 2, commit=lsn(10), change=lsn(10, 2), serial=1, after=row(2),
                           partition=1, offset=1, tx=tx | {"total_order": 2}))
    window = Window()  # no partitions known: only the END can release early
    window.add([(first, COMMIT_MS)], watermark_ms=0)
    window.add_transactions([(first.sort_key[0], 2, COMMIT_MS)])
    window.release(0)
    assert changes(window) == [], "one of its two events is still missing"
    restored = Window(stored=window.dump())
    restored.add([(second, COMMIT_MS)], watermark_ms=0)
    restored.release(0)
    assert sorted(r.key["id"] for r in changes(restored)) == [1, 2]
    assert restored.released["transaction"] == 2
    assert Window(stored=restored.dump()).transactions() == 0


def test_an_end_that_arrives_before_its_events_waits_for_them() -> None:
    e = decoded(insert(3, 12, partition=0, offset=5))
    window = Window()
    window.add_transactions([(e.sort_key[0], 1, COMMIT_MS)])
    window.release(0)
    window = Window(stored=window.dump())
    window.add([(e, COMMIT_MS)], watermark_ms=0)
    window.release(0)
    assert [r.op for r in changes(window)] == ["insert"]


def test_end_of_input_releases_what_waits_once_every_partition_was_read_to_its_end() -> None:
    d, _ = pk_change(1, 2, 10, delete_partition=0)
    ends = Topology(partitions={TOPIC: 3}, ends={TOPIC: {0: 9, 1: 4}})  # partition 2: nothing
    window = Window(topology=ends)
    window.add([(d, COMMIT_MS)], watermark_ms=0)
    window.observe(progress(d, offset=9))
    window.release(0)
    assert window.waiting_events() == 1, "partition 1 has not been read to offset 4 yet"
    window = Window(stored=window.dump(), topology=ends)
    window.observe([(TOPIC, 1, PartitionMark(offset=4))])  # e.g. a tombstone at offset 4
    window.release(0)
    assert [r.op for r in changes(window)] == ["delete"]
    assert window.released["end"] == 1


def test_a_replay_after_its_group_was_released_is_dropped() -> None:
    original = decoded(insert(3, 12, partition=0, offset=5))
    later = decoded(update(4, 13, "a", "b", partition=0, offset=6))
    window = Window(topology=Topology(partitions={TOPIC: 1}))
    window.add([(original, COMMIT_MS), (later, COMMIT_MS)], watermark_ms=0)
    window.observe(progress(original, later))
    window.release(0)
    assert sorted(r.op for r in changes(window)) == ["insert", "update"]
    assert window.waiting_events() == 0
    # the connector restarts and re-sends both (new offsets, same source blocks)
    window = Window(stored=window.dump(), topology=Topology(partitions={TOPIC: 1}))
    again = [decoded(insert(3, 12, partition=0, offset=7)),
             decoded(update(4, 13, "a", "b", partition=0, offset=8))]
    window.add([(e, COMMIT_MS + 10) for e in again], watermark_ms=COMMIT_MS + 1)
    window.observe(progress(*again))
    window.release(COMMIT_MS + 1)
    assert changes(window) == []
    assert window.counters.duplicates == 2 and window.counters.late == 0


def test_events_of_one_call_are_checked_against_the_marks_of_earlier_calls_only() -> None:
    e = decoded(insert(3, 12, partition=0, offset=5))
    later = decoded(update(4, 13, "a", "b", partition=0, offset=6))
    window = Window(topology=Topology(partitions={TOPIC: 1}))
    window.observe(progress(e, later))  # the call's own progress, given first
    window.add([(e, COMMIT_MS), (later, COMMIT_MS)], watermark_ms=0)
    window.release(0)
    assert sorted(r.op for r in changes(window)) == ["insert", "update"]
    assert window.counters.duplicates == 0


def test_partition_marks_merge_and_track_the_pairs_at_the_high_position() -> None:
    d, c = pk_change(1, 2, 10, delete_partition=0, create_partition=0)
    marks = progress(d, c)
    assert len(marks) == 1
    mark = marks[0][2]
    assert mark.position == c.sort_key and mark.at_position == (b"c" + c.key_id,)
    # the serials differ (1 and 2), so only the create is at the high-water position
    assert mark.merged(PartitionMark(offset=99)).offset == 99
    assert PartitionMark(offset=99).merged(mark).position == c.sort_key
    snapshot_row = decoded(event("r", 9, commit=lsn(20), change=None, serial=None,
                                 after=row(9), snapshot="true", offset=11))
    mark = progress(snapshot_row)[0][2]
    assert mark.commit == snapshot_row.sort_key[0] and mark.position is None


def test_state_stored_before_the_marks_existed_still_loads() -> None:
    import msgspec

    old = msgspec.msgpack.encode([[["testDB.dbo.customers", b"\x01", b"\x02"]],
                                  [{"commit_ms": 5, "seen": [], "waiting": []}]])
    window = WindowState(stored=old)  # the reference's own format
    assert len(window) == 1 and window.marks() == {}


def test_the_jobs_default_shuffle_partitions_follow_the_buckets_and_the_cores() -> None:
    from debezium_bridge.spark.job import default_shuffle_partitions

    assert default_shuffle_partitions(64, 2) == 2  # local[2]: not Spark's 200
    assert default_shuffle_partitions(8, 32) == 8  # never more than the state buckets
    assert default_shuffle_partitions(64, 0) == 1


def test_a_replay_with_a_different_image_is_a_dead_letter_not_a_duplicate() -> None:
    """Debezium's replays are identical but for ``ts_ms`` and offsets: a waiting delete repeated
    with another image is corruption or a different event (the CLI's rule, here for Spark)."""
    window = Window()
    half, _ = pk_change(4, 40, 7)
    window.add([(half, COMMIT_MS)], watermark_ms=0)  # the delete waits for its partner
    same = decoded(event("d", 4, commit=lsn(7), change=lsn(7, 2), serial=1, before=row(4),
                         partition=0, offset=20))
    other = decoded(event("d", 4, commit=lsn(7), change=lsn(7, 2), serial=1,
                          before=row(4, "someone else"), partition=0, offset=21))
    window.add([(same, COMMIT_MS), (other, COMMIT_MS)], watermark_ms=0)
    assert (window.counters.duplicates, window.counters.replay_mismatches) == (1, 1)
    (letter,) = window.drain_mismatches()
    assert letter.stage == "replay-mismatch" and letter.error_class == "ReplayMismatchError"
    assert (letter.record.partition, letter.record.offset) == (0, 21)
    assert window.drain_mismatches() == []
    restored = Window(stored=window.dump())  # the digests survive the state store
    restored.add([(other, COMMIT_MS)], watermark_ms=0)
    assert restored.counters.replay_mismatches == 1


# -- a checkpoint written by one core, read by the other (translate.native switched) ------------


def test_a_reference_state_is_taken_over_by_the_native_window_without_losing_what_waits() -> None:
    d, c = pk_change(1, 2, 9)
    released = decoded(insert(3, 12, partition=0, offset=5))
    topology = Topology(partitions={TOPIC: 2})
    reference = WindowState(topology=topology)
    reference.add([(d, COMMIT_MS), (released, COMMIT_MS)], watermark_ms=0)
    reference.observe(progress(d, released))
    reference.add_transactions([(parse_lsn(lsn(30)), 4, COMMIT_MS)])
    reference.release(0)
    assert reference.waiting_events() == 2
    switched = NativeWindowState(stored=reference.dump(), topology=topology)
    assert (switched.waiting_events(), len(switched), switched.transactions()) == (2, 2, 1)
    assert switched.marks() == reference.marks()
    # the create meets its delete; the insert's replay (a partition mark of before the switch)
    # is dropped; the waiting insert's own identity still drops a copy in its group
    replay = decoded(insert(3, 12, partition=0, offset=40))
    switched.add([(c, COMMIT_MS), (replay, COMMIT_MS)], watermark_ms=0)
    assert [(r.op, r.key_changed) for r in switched.drain()] == [("update", True)]
    assert switched.counters.duplicates == 1
    switched.release(COMMIT_MS + 1)
    assert [r.op for r in switched.drain()] == ["insert"]
    assert switched.waiting_events() == 0


def test_a_native_state_is_refused_by_the_reference_naming_the_switch() -> None:
    import pytest

    from debezium_bridge.errors import BridgeError

    window = NativeWindowState()
    window.add([(pk_change(1, 2, 9)[0], COMMIT_MS)], watermark_ms=0)
    with pytest.raises(BridgeError, match=r"translate\.native"):
        WindowState(stored=window.dump())


def one_call_each(*events: ChangeEvent) -> Any:
    """A window that took ``events`` one call each, with their progress (one partition)."""
    window = Window()
    for e in events:
        window.add([(e, COMMIT_MS)], watermark_ms=0)
        window.observe(progress(e))
        window.release(0)
    return window


def test_a_lower_change_lsn_inside_the_marks_transaction_is_a_new_event() -> None:
    """``data.query.mode=direct`` (default from Debezium 3.4) sends a transaction's rows by
    ``__$command_id``, and ``__$seqval`` (``change_lsn``) need not rise with it (Microsoft:
    "should not be used for ordering"): below the partition's mark inside its transaction, an
    event not seen in its group is new; one seen there is a replay."""
    first = decoded(event("u", 1, commit=lsn(9), change=lsn(9, 0x30), serial=2,
                          before=row(1, "a"), after=row(1, "b"), offset=1))
    second = decoded(event("u", 2, commit=lsn(9), change=lsn(9, 0x20), serial=2,
                           before=row(2, "a"), after=row(2, "b"), offset=2))
    earlier = decoded(event("u", 3, commit=lsn(8), change=lsn(8, 0x40), serial=2,
                            before=row(3, "a"), after=row(3, "b"), offset=3))
    window = one_call_each(first, second)
    assert [c.key for c in changes(window)] == [{"id": 1}, {"id": 2}]
    window.add([(second, COMMIT_MS), (earlier, COMMIT_MS)], watermark_ms=0)  # re-sent
    window.release(0)
    assert changes(window) == [] and window.counters.duplicates == 2


def test_events_of_partitions_without_commit_order_are_not_judged_by_the_mark() -> None:
    """CES partitions keep no commit order (``ChangeEvent.unordered``): an event below the
    partition's mark of an earlier call is new unless its group saw it."""
    later = decoded(update(1, 9, "a", "b", offset=1))
    earlier = decoded(update(2, 8, "a", "b", offset=2))
    for e in (later, earlier):
        e.unordered = True
    window = one_call_each(later, earlier)
    assert [c.key for c in changes(window)] == [{"id": 1}, {"id": 2}]
    window.add([(earlier, COMMIT_MS)], watermark_ms=0)  # re-sent while its group waits
    window.release(0)
    assert changes(window) == [] and window.counters.duplicates == 1
