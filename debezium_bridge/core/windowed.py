"""Replay dedupe and key-change pairing with state bounded by an event-time watermark.

This is the core's rule set (:mod:`debezium_bridge.core.translator`) for runners that keep state
outside the process and see the stream in micro-batches, with no global order: the Spark job
hashes every event to one of a fixed number of buckets by its position group (table,
commit_lsn, change_lsn) and keeps one :class:`WindowState` per bucket in Spark's state store.

Rules, per position group:

1. **Dedupe.** An event whose identity (``ChangeEvent.identity``) was already seen in its group
   is a replay and is dropped. Snapshot rows are their own group per key, so a snapshot replay is
   caught the same way.
2. **Pair as soon as possible.** Updates, snapshot reads and truncates are emitted at once.
   Deletes and creates wait in the group: as soon as the group holds exactly one delete and one
   create (whose ``__debezium.oldkey``/``newkey`` headers, when present, name each other) they
   are emitted as one merged update (a key change, or a fold when the keys are equal).
3. **Wait for the watermark.** The watermark is the highest commit time seen so far minus the
   configured delay (Spark's event-time watermark). A group whose commit time is below the
   watermark is complete: its waiting events are emitted (paired by the core's rules where
   possible) and the group is forgotten.
4. **Late events.** An event whose group was already forgotten (its commit time is below the
   watermark and nothing of it is in state) is emitted at once, unpaired, and counted ``late``.
   So the delay must cover the skew between partitions and how far a restarted connector replays
   (Debezium re-sends events after its last flushed offset, ``offset.flush.interval.ms``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from debezium_bridge.core.counters import Counters
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.core.translator import Translator
from debezium_bridge.model.change import ChangeEvent, ChangeRecord
from debezium_bridge.model.records import RawRecord

GroupKey = tuple[str, bytes, bytes]


def group_key(event: ChangeEvent) -> GroupKey:
    """The position group of ``event`` (snapshot rows: one group per key)."""
    table_id = event.table_id or event.table.table_id
    commit = event.sort_key[0]
    if event.op == "r" and event.snapshot != "incremental":
        return (table_id, commit, b"r" + event.key_id)
    return (table_id, commit, event.sort_key[1])


def _arrival_order(item: tuple[ChangeEvent, int]) -> tuple[Any, ...]:
    """Position order; copies of one event (replays) by their Kafka coordinates, so the same
    copy is kept whichever order a shuffle delivered them in."""
    event = item[0]
    r = event.record
    return (event.sort_key, r.topic, r.partition, r.offset if r.offset is not None else -1)


class _Group(msgspec.Struct, gc=False):
    commit_ms: int
    seen: list[bytes]
    waiting: list[ChangeEvent]


class _Stored(msgspec.Struct, array_like=True, gc=False):
    keys: list[tuple[str, bytes, bytes]]
    groups: list[_Group]


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Stored)


class WindowState:
    """The dedupe/pairing state of one bucket, and the outputs of one call on it."""

    def __init__(self, config: TranslatorConfig | None = None, stored: bytes | None = None
                 ) -> None:
        self._emitter = Translator(config)
        self.counters: Counters = self._emitter.counters
        """What this call did (deltas: ``pending`` goes down when earlier events leave)."""
        self._groups: dict[GroupKey, _Group] = {}
        if stored:
            data = _decoder.decode(stored)
            self._groups = {tuple(k): g for k, g in zip(data.keys, data.groups, strict=True)}  # type: ignore[misc]

    # -- input ----------------------------------------------------------------------------------
    def add(self, events: Iterable[tuple[ChangeEvent, int]], watermark_ms: int) -> None:
        """Take new events with their commit times (epoch ms), in any order."""
        pair = self._emitter.config.pair_key_changes
        counters = self.counters
        groups = self._groups
        encode = _encoder.encode
        ready: list[ChangeEvent] = []
        for event, commit_ms in sorted(events, key=_arrival_order):
            key = group_key(event)
            group = groups.get(key)
            if group is None:
                if commit_ms < watermark_ms:
                    counters.late += 1
                    ready.append(event)
                    continue
                group = groups[key] = _Group(commit_ms, [], [])
            op = event.op  # a replay repeats serial, op and key inside its position group
            identity = encode((event.sort_key[2], op, event.key_id))
            seen = group.seen
            if identity in seen:
                counters.duplicates += 1
                continue
            seen.append(identity)
            if not pair or (op != "d" and op != "c"):
                ready.append(event)
                continue
            group.waiting.append(event)
            counters.pending += 1
            self._pair_complete(group)
        self._emitter.emit_each(ready)

    def _pair_complete(self, group: _Group) -> None:
        waiting = group.waiting
        if len(waiting) != 2:
            return
        first, second = waiting
        if first.op == second.op:
            return
        d, c = (first, second) if first.op == "d" else (second, first)
        if (d.partner_key_id is not None and d.partner_key_id != c.key_id) or \
                (c.partner_key_id is not None and c.partner_key_id != d.key_id):
            return
        group.waiting = []
        self.counters.pending -= 2
        self._emitter.emit([d, c])

    def release(self, watermark_ms: int) -> None:
        """Emit and forget every group whose commit time is below ``watermark_ms``."""
        done = [key for key, group in self._groups.items() if group.commit_ms < watermark_ms]
        for key in sorted(done):
            group = self._groups.pop(key)
            if group.waiting:
                self.counters.pending -= len(group.waiting)
                self._emitter.emit(sorted(group.waiting, key=lambda e: e.sort_key))

    # -- output ---------------------------------------------------------------------------------
    def drain(self) -> list[ChangeRecord]:
        return self._emitter.drain()[0]

    def next_timeout_ms(self) -> int | None:
        """The lowest commit time still in state (release once the watermark passes it)."""
        return min((g.commit_ms for g in self._groups.values()), default=None)

    def waiting_events(self) -> int:
        return sum(len(g.waiting) for g in self._groups.values())

    def __len__(self) -> int:
        return len(self._groups)

    def dump(self) -> bytes:
        keys = list(self._groups)
        return _encoder.encode(_Stored(keys, [self._groups[k] for k in keys]))  # type: ignore[arg-type]


def event_bytes(event: ChangeEvent) -> bytes:
    """A decoded event as bytes (to carry it between Spark stages and in state), without the
    raw key, value and headers: only the record's coordinates are needed after decoding."""
    r = event.record
    coordinates = RawRecord(r.topic, r.partition, r.offset, r.timestamp)
    return _encoder.encode(msgspec.structs.replace(event, record=coordinates))


_event_decoder = msgspec.msgpack.Decoder(ChangeEvent)


def event_from_bytes(data: bytes) -> ChangeEvent:
    return _event_decoder.decode(data)

