"""The Spark runner's state rules (``core.windowed.WindowState``) without Spark: replay dedupe per
position group, key-change pairing across calls, release at the watermark, late events and the
state round trip through bytes (what Spark keeps between micro-batches)."""

from __future__ import annotations

from typing import Any

from debezium_bridge.core.windowed import WindowState, event_bytes, event_from_bytes
from debezium_bridge.formats.debezium.decode import Decoder
from debezium_bridge.model.change import ChangeEvent, ChangeRecord
from tests.unit.envelopes import event, insert, lsn, row, update

_decoder = Decoder()
COMMIT_MS = 1_000_000


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


def changes(window: WindowState) -> list[ChangeRecord]:
    return window.drain()


def test_updates_come_out_at_once_and_a_replay_of_them_is_dropped() -> None:
    window = WindowState()
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
        window = WindowState()
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
    window = WindowState()
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
    window = WindowState()
    d, c = pk_change(1, 2, 8)
    window.add([(d, COMMIT_MS)], watermark_ms=0)
    window.release(COMMIT_MS + 1)
    assert [r.op for r in changes(window)] == ["delete"]
    window.add([(c, COMMIT_MS)], watermark_ms=COMMIT_MS + 1)
    assert [(r.op, r.key) for r in changes(window)] == [("insert", {"id": 2})]
    assert window.counters.late == 1


def test_state_survives_the_round_trip_through_bytes() -> None:
    d, c = pk_change(1, 2, 9)
    window = WindowState()
    window.add([(event_from_bytes(event_bytes(d)), COMMIT_MS)], watermark_ms=0)
    window.add([(decoded(update(5, 10, "a", "b")), COMMIT_MS)], watermark_ms=0)
    assert [r.op for r in changes(window)] == ["update"]
    restored = WindowState(stored=window.dump())
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
        window = WindowState()
        window.add([(e, COMMIT_MS) for e in events], watermark_ms=0)
        out = changes(window)
        assert [x.offset for x in out[0].lineage] == [3]
        assert window.counters.duplicates == 1
