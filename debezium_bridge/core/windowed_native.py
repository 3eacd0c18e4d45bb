"""The native counterpart of :class:`~debezium_bridge.core.windowed.WindowState`.

``debezium_bridge._native.StreamRelease`` (crate module ``stream.rs``) applies the rules of
:mod:`debezium_bridge.core.windowed` — dedupe by the partition marks of earlier calls and by
identity in the position group, pairing, release by position watermark, transaction END, end of
input and event-time watermark, late events — to events staged as the native core's bytes, and
keeps its state as bytes of its own (they start with :data:`NATIVE_STATE_MAGIC`). The Spark
job's streaming release step drives it directly (Arrow in, Arrow out); :class:`NativeWindowState`
gives it :class:`WindowState`'s API over Python events, so the rule tests and the differential
tests run the same calls on both.

The two cores' states are not interchangeable: a state written by one core is read by the other
only after :func:`adopt_reference_state` (Python state into the native window) — a native state
met by the Python reference is refused with a :class:`~debezium_bridge.errors.BridgeError` that
names ``translate.native``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from debezium_bridge.core import native
from debezium_bridge.core.counters import Counters
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.core.windowed import (
    NATIVE_STATE_MAGIC,
    RELEASE_RULES,
    PartitionMark,
    Topology,
    WindowState,
)
from debezium_bridge.errors import ReplayMismatchError
from debezium_bridge.model.change import ChangeEvent, ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord

__all__ = [
    "NATIVE_STATE_MAGIC",
    "NativeWindowState",
    "is_native_state",
    "mark_of",
    "mark_tuples",
    "mismatch_letter",
]

_sorted_json = msgspec.json.Encoder(order="sorted").encode
_stager: Any = None


def is_native_state(stored: bytes | None) -> bool:
    """Whether ``stored`` is a state the native window wrote."""
    return stored is not None and bytes(stored[:len(NATIVE_STATE_MAGIC)]) == NATIVE_STATE_MAGIC


def mismatch_letter(m: tuple[Any, ...]) -> DeadLetter:
    """The dead letter of a replay mismatch the native window found, as
    :meth:`WindowState.drain_mismatches` writes it."""
    (topic, partition, offset, stamp, table_id, seq, op, key, before, after, unavailable) = m
    images = (None if before is None else msgspec.json.decode(before),
              None if after is None else msgspec.json.decode(after), list(unavailable))
    raw = RawRecord(topic, partition, offset, stamp, bytes(key), _sorted_json(images))
    error = ReplayMismatchError(
        f"{table_id} {seq} op {op!r}: same position, op and key as an event already seen, but "
        "a different image (corruption or a different event, not a replay)")
    return DeadLetter.of(error, raw)


def mark_tuples(progress: Iterable[tuple[str, int, PartitionMark]]) -> list[tuple[Any, ...]]:
    """Partition marks as ``StreamRelease.observe`` takes them."""
    return [(topic, partition, m.commit, m.position, list(m.at_position), m.offset)
            for topic, partition, m in progress]


def mark_of(commit: bytes, position: Any, at: Iterable[bytes], offset: int) -> PartitionMark:
    """A partition mark as the native core gives it (after topic and partition)."""
    return PartitionMark(commit, None if position is None else tuple(position), tuple(at),
                         offset)


def topology_args(topology: Topology | None) -> tuple[dict[str, int], Any]:
    t = topology or Topology()
    return dict(t.partitions), t.ends


def stage(event: ChangeEvent) -> bytes:
    """A Python event as the native core's staged bytes (what the decode step writes)."""
    global _stager
    if _stager is None:
        _stager = native.module().SparkDecoder(
            placeholder="__debezium_unavailable_value", binary_mode="bytes", table_schemas=[])
    return bytes(_stager.wire(native.flatten(event), event.record.timestamp, 1)[1])


def adopt_reference_state(stored: bytes, pair_key_changes: bool,
                          topology: Topology | None) -> Any:
    """A ``StreamRelease`` holding what a state of the Python reference holds: its partition
    marks, seen-event counts, transaction END records and waiting groups (events and the
    identities seen; image digests are not comparable across cores, so a later replay of an
    identity seen before the switch counts as a duplicate, as for reference state written
    before digests existed)."""
    reference = WindowState(TranslatorConfig(pair_key_changes=pair_key_changes), stored,
                            topology)
    groups, marks, commits, transactions = reference.contents()
    adopted = []
    for (table_id, commit, local), group in groups.items():
        seen = [tuple(msgspec.msgpack.decode(identity)) for identity in group.seen]
        snapshot = bool(seen) and all(op == "r" for _, op, _ in seen) and \
            any(local == b"r" + key for _, _, key in seen)
        adopted.append((table_id, commit, snapshot, local, group.commit_ms, group.topic, seen,
                        [stage(e) for e in group.waiting]))
    return native.module().StreamRelease.adopt(
        pair_key_changes, *topology_args(topology), mark_tuples(
            (t, p, m) for (t, p), m in marks.items()), adopted, list(commits.items()),
        [(c, n, ms) for c, (n, ms) in transactions.items()])


class NativeWindowState:
    """:class:`WindowState`'s API on the native window (the events are Python events, staged
    as the native core's bytes on the way in; records come back as :class:`ChangeRecord`)."""

    def __init__(self, config: TranslatorConfig | None = None, stored: bytes | None = None,
                 topology: Topology | None = None) -> None:
        pair = (config or TranslatorConfig()).pair_key_changes
        self.topology = topology or Topology()
        if stored and not is_native_state(stored):
            self._window = adopt_reference_state(stored, pair, self.topology)
        else:
            self._window = native.module().StreamRelease(stored or None, pair,
                                                         *topology_args(self.topology))
        self.counters = Counters()
        self.released: dict[str, int] = dict.fromkeys(RELEASE_RULES, 0)
        self._records: list[ChangeRecord] = []
        self._mismatches: list[DeadLetter] = []

    def _collect(self) -> None:
        lines, counts, mismatches = self._window.take_lines()
        self._records += native.decode_lines(lines)
        self._mismatches += [mismatch_letter(m) for m in mismatches]
        c = self.counters
        (c.changes_out, c.merged, c.duplicates, c.replay_mismatches, c.late, c.pending,
         *released) = counts
        self.released = dict(zip(RELEASE_RULES, released, strict=True))

    def add(self, events: Iterable[tuple[ChangeEvent, int]], watermark_ms: int) -> None:
        for event, commit_ms in events:
            self._window.push_one(stage(event), commit_ms)
        self._window.add(watermark_ms)
        self._collect()

    def add_transactions(self, ends: Iterable[tuple[bytes, int, int]]) -> None:
        self._window.add_transactions(list(ends))

    def observe(self, progress: Iterable[tuple[str, int, PartitionMark]]) -> None:
        self._window.observe(mark_tuples(progress))

    def release(self, watermark_ms: int) -> None:
        self._window.release(watermark_ms)
        self._collect()

    def drain(self) -> list[ChangeRecord]:
        out, self._records = self._records, []
        return out

    def drain_mismatches(self) -> list[DeadLetter]:
        out, self._mismatches = self._mismatches, []
        return out

    def next_timeout_ms(self) -> int | None:
        return self._window.next_timeout_ms()  # type: ignore[no-any-return]

    def waiting_events(self) -> int:
        return self._window.waiting_events()  # type: ignore[no-any-return]

    def marks(self) -> dict[tuple[str, int], PartitionMark]:
        return {(t, p): mark_of(*native) for t, p, *native in self._window.marks()}

    def transactions(self) -> int:
        """How many transaction END records the state keeps."""
        return self._window.transactions()  # type: ignore[no-any-return]

    def __len__(self) -> int:
        return len(self._window)

    def dump(self) -> bytes:
        return bytes(self._window.dump())
