"""Replay dedupe, key-change pairing and release for runners that keep state between calls.

This is the core's rule set (:mod:`debezium_bridge.core.translator`) for runners that keep state
outside the process and see the stream in micro-batches, with no global order: the Spark job
hashes every event to one of a fixed number of buckets by its commit LSN and keeps one
:class:`WindowState` per bucket in Spark's state store. Besides the events, every bucket is told
the *progress* of every Kafka partition (:class:`PartitionMark`, built by
:class:`ProgressTracker` where the records are read, broadcast to every bucket), the
transaction END records of its commit LSNs, and, for a run with a known end
(``Trigger.AvailableNow``), where each partition ends (:class:`Topology`).

Rules, per position group (table, commit_lsn, change_lsn; snapshot rows: one group per key):

1. **Dedupe.** Debezium writes each partition in commit order, so an event of a transaction
   below its partition's high-water position (as of the previous call), or at that position
   with an (op, key) already seen there, is a replay (the CLI's rule): it is dropped even when
   its group was released long ago. An event whose identity (serial, op, key) was already seen
   in its group is a replay too (copies that arrive in one call, and events below the mark
   inside its transaction, where ``change_lsn`` need not rise: ``data.query.mode=direct``).
2. **Pair as soon as possible.** Updates, snapshot reads and truncates are emitted at once.
   Deletes and creates wait in the group: as soon as the group holds exactly one delete and one
   create (whose ``__debezium.oldkey``/``newkey`` headers, when present, name each other) they
   are emitted as one merged update (a key change, or a fold when the keys are equal).
3. **Release** a group (its waiting events are emitted, paired by the core's rules where
   possible, and the group is forgotten) as soon as one of these holds:

   a. *position watermark*: every partition of its topic has delivered a higher commit_lsn
      (partitions: those the runner knows from the broker's metadata plus those seen; a topic
      whose partitions the runner does not know is never released by this rule);
   b. *transaction complete*: the transaction END record of its commit_lsn arrived and all its
      ``event_count`` data events were seen;
   c. *end of input*: every partition of its topic has been read up to the end of this run
      (:attr:`Topology.ends`);
   d. *event time*: Spark's event-time watermark (highest commit time - delay) passed its
      commit time (the backstop for partitions that stay silent).
4. **Late events.** A non-replayed event whose group was already forgotten and whose commit
   time is below the event-time watermark is emitted at once, unpaired, and counted ``late``.

State per bucket: the waiting groups (identities seen, events waiting, commit time, topic), one
:class:`PartitionMark` per Kafka partition (a few dozen bytes each), the seen-event count of
each commit with waiting groups and the transaction END records not yet matched.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import msgspec

from debezium_bridge.core.counters import Counters
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.core.translator import Translator, image_bytes, image_digest
from debezium_bridge.errors import BridgeError, ReplayMismatchError
from debezium_bridge.model.change import ChangeEvent, ChangeRecord, SortKey, TableRef, seq_of
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord

GroupKey = tuple[str, bytes, bytes]
TopicPartition = tuple[str, int]
_TOP = b"\xff" * 11
"""Above every LSN (10 bytes): the position watermark of a topic whose partitions all ended."""
NATIVE_STATE_MAGIC = b"DBNW"
"""The first bytes of a state written by the native window (``core.windowed_native``); no
state of this class starts with them (msgpack arrays start with 0x9X or 0xdc/0xdd)."""
RELEASE_RULES = ("position", "transaction", "end", "watermark")
"""Why waiting events were released (counted per rule in :attr:`WindowState.released`)."""


def group_key(event: ChangeEvent) -> GroupKey:
    """The position group of ``event`` (snapshot rows: one group per key)."""
    table_id = event.table_id or event.table.table_id
    commit = event.sort_key[0]
    if event.op == "r" and event.snapshot != "incremental":
        return (table_id, commit, b"r" + event.key_id)
    return (table_id, commit, event.sort_key[1])


def _streamed(event: ChangeEvent) -> bool:
    """Whether ``event`` is ordered in its partition (everything but initial snapshot rows and
    events of partitions without commit order, ``ChangeEvent.unordered``)."""
    return not event.unordered and (event.op != "r" or event.snapshot == "incremental")


class PartitionMark(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """How far one Kafka partition has been read."""

    commit: bytes = b""
    """Highest commit_lsn of any event read (the position watermark)."""
    position: SortKey | None = None
    """Highest position of a streamed event read (the replay rule)."""
    at_position: tuple[bytes, ...] = ()
    """``op + key_id`` of the events read at :attr:`position`."""
    offset: int = -1
    """Highest offset read (any record: events, tombstones, side records, dead letters)."""

    def merged(self, other: PartitionMark) -> PartitionMark:
        if self.position == other.position:
            position = self.position
            mine = set(self.at_position)
            at = self.at_position + tuple(x for x in other.at_position if x not in mine)
        elif other.position is not None and (self.position is None
                                             or other.position > self.position):
            position, at = other.position, other.at_position
        else:
            position, at = self.position, self.at_position
        return PartitionMark(max(self.commit, other.commit), position, at,
                             max(self.offset, other.offset))


class ProgressTracker:
    """Builds the :class:`PartitionMark` of every partition from the records as they are read
    (in offset order per partition), where the records are decoded."""

    __slots__ = ("_commits", "_offsets", "_positions")

    def __init__(self) -> None:
        self._offsets: dict[TopicPartition, int] = {}
        self._commits: dict[TopicPartition, bytes] = {}
        self._positions: dict[TopicPartition, tuple[SortKey, dict[bytes, None]]] = {}

    def record(self, topic: str, partition: int, offset: int | None) -> None:
        """Any record read (call it for every record, decoded or not)."""
        tp = (topic, partition)
        if offset is not None and offset > self._offsets.get(tp, -1):
            self._offsets[tp] = offset

    def event(self, event: ChangeEvent) -> None:
        """A decoded data event (after :meth:`record` of its record)."""
        r = event.record
        tp = (r.topic, r.partition)
        sort_key = event.sort_key
        commit = sort_key[0]
        if commit > self._commits.get(tp, b""):
            self._commits[tp] = commit
        if not _streamed(event):
            return
        local = event.op.encode() + event.key_id
        mark = self._positions.get(tp)
        if mark is None or sort_key > mark[0]:
            self._positions[tp] = (sort_key, {local: None})
        elif sort_key == mark[0]:
            mark[1][local] = None

    def marks(self) -> list[tuple[str, int, PartitionMark]]:
        out = []
        for tp, offset in sorted(self._offsets.items()):
            position = self._positions.get(tp)
            out.append((tp[0], tp[1], PartitionMark(
                self._commits.get(tp, b""), position[0] if position else None,
                tuple(position[1]) if position else (), offset)))
        return out


class Topology(msgspec.Struct, frozen=True, gc=False):
    """What the runner knows about the partitions it reads (from the broker, on the driver)."""

    partitions: dict[str, int] = msgspec.field(default_factory=dict)
    """Partition count per topic. The position watermark of a topic waits for every one of its
    partitions (plus any seen beyond the count); topics not listed are never released by it."""
    ends: dict[str, dict[int, int]] | None = None
    """Runs with a known end (``Trigger.AvailableNow``): per topic and partition, the offset of
    the last message this run reads. A partition not listed has nothing to read in this run;
    one whose mark reached its offset has ended. ``None``: the input has no end."""


class _Group(msgspec.Struct, gc=False):
    commit_ms: int
    seen: list[bytes]
    waiting: list[ChangeEvent]
    topic: str = ""
    digests: list[bytes] = []
    """:func:`~debezium_bridge.core.translator.image_digest` of each identity in ``seen``, in
    the same order (state written before it existed has none: its replays are not compared)."""


class _TxEnd(msgspec.Struct, array_like=True, gc=False):
    event_count: int
    ms: int
    """When the END was written (its ``ts_ms``, else the Kafka timestamp): it is forgotten once
    the event-time watermark passes it without its events."""


class _Stored(msgspec.Struct, array_like=True, gc=False):
    keys: list[tuple[str, bytes, bytes]]
    groups: list[_Group]
    mark_keys: list[tuple[str, int]] = msgspec.field(default_factory=list)
    marks: list[PartitionMark] = msgspec.field(default_factory=list)
    commits: dict[bytes, int] = msgspec.field(default_factory=dict)
    transactions: dict[bytes, _TxEnd] = msgspec.field(default_factory=dict)


_encoder = msgspec.msgpack.Encoder()
_json = msgspec.json.Encoder()
_WIDE_INT = 1
"""msgpack extension code of an integer outside msgpack's 64 bits, as its decimal text."""


def _wide_int(code: int, data: memoryview) -> int:
    if code != _WIDE_INT:
        raise ValueError(f"unknown msgpack extension {code}")
    return int(bytes(data))


def _pack(value: Any) -> bytes:
    """msgpack of ``value``. Schema-less JSON carries integers of any size (a ``numeric(38)``
    written as a JSON number), which msgpack cannot hold: those go as an extension."""
    try:
        return _encoder.encode(value)
    except OverflowError:
        return _encoder.encode(_wide_ints(msgspec.to_builtins(value, builtin_types=(bytes,))))


def _wide_ints(value: Any) -> Any:
    if value.__class__ is int:
        return (value if -(2**63) <= value < 2**64
                else msgspec.msgpack.Ext(_WIDE_INT, str(value).encode()))
    if value.__class__ is dict:
        return {k: _wide_ints(v) for k, v in value.items()}
    if value.__class__ is list:
        return [_wide_ints(v) for v in value]
    return value


_decoder = msgspec.msgpack.Decoder(_Stored, ext_hook=_wide_int)
_marks_decoder = msgspec.msgpack.Decoder(list[tuple[str, int, PartitionMark]])


def marks_bytes(marks: list[tuple[str, int, PartitionMark]]) -> bytes:
    """Progress (the output of :meth:`ProgressTracker.marks`) as bytes, to broadcast."""
    return _encoder.encode(marks)


def marks_from_bytes(data: bytes) -> list[tuple[str, int, PartitionMark]]:
    return _marks_decoder.decode(data)


def _arrival_order(item: tuple[ChangeEvent, int]) -> tuple[Any, ...]:
    """Position order; copies of one event (replays) by their Kafka coordinates, so the same
    copy is kept whichever order a shuffle delivered them in."""
    event = item[0]
    r = event.record
    return (event.sort_key, r.topic, r.partition, r.offset if r.offset is not None else -1)


class WindowState:
    """The dedupe/pairing/release state of one bucket, and the outputs of one call on it.

    One call: :meth:`add` the call's events, :meth:`add_transactions` and :meth:`observe` its
    progress (in any order: the progress of a call is only applied by :meth:`release`, so the
    call's own events are checked against the marks of earlier calls), then :meth:`release`,
    :meth:`drain` and :meth:`dump`.
    """

    def __init__(self, config: TranslatorConfig | None = None, stored: bytes | None = None,
                 topology: Topology | None = None) -> None:
        # The Python core writes what this state releases: the events here are Python
        # ChangeEvents (they travel between Spark stages as msgpack), and handing them to the
        # native core would only add a conversion each way. The Spark job's batch path has a
        # native counterpart of these rules (debezium_bridge/native/src/window.rs, decode and
        # release without Python events); streaming runs this class.
        self._emitter = Translator((config or TranslatorConfig()).model_copy(
            update={"native": "off"}))
        self.mismatched: list[ChangeEvent] = []
        """Events dropped from the waiting state as replays with a different image; see
        :meth:`drain_mismatches`."""
        self.counters: Counters = self._emitter.counters
        """What this call did (deltas: ``pending`` goes down when earlier events leave)."""
        self.released: dict[str, int] = dict.fromkeys(RELEASE_RULES, 0)
        """Waiting events this call released, per rule (:data:`RELEASE_RULES`)."""
        self.topology = topology or Topology()
        self._groups: dict[GroupKey, _Group] = {}
        self._marks: dict[TopicPartition, PartitionMark] = {}
        self._index: dict[str, dict[int, PartitionMark]] | None = None
        self._incoming: list[tuple[str, int, PartitionMark]] = []
        self._commits: dict[bytes, int] = {}
        """Streamed events seen per commit_lsn that still has groups (transaction rule)."""
        self._transactions: dict[bytes, _TxEnd] = {}
        self._seen_index: dict[GroupKey, dict[bytes, int]] = {}
        """Where each identity is in a large group's ``seen`` (built when first needed): many
        events at one position made the scans of ``seen`` quadratic (40,000: 5.4 s)."""
        self._at_sets: dict[TopicPartition, tuple[PartitionMark, frozenset[bytes]]] = {}
        """A large mark's ``at_position`` as a set, with the mark it was built from."""
        if stored:
            if bytes(stored[:len(NATIVE_STATE_MAGIC)]) == NATIVE_STATE_MAGIC:
                raise BridgeError(
                    "this state was written by the native translation core, and the Python "
                    "core cannot read it: run the query with translate.native: auto or on "
                    "(without DEBEZIUM_BRIDGE_NATIVE=0, and outputs the native core covers: not "
                    "ces, ces-avro or debezium) to keep its checkpoint, or start from a new "
                    "checkpoint")
            data = _decoder.decode(stored)
            self._groups = {tuple(k): g for k, g in zip(data.keys, data.groups, strict=True)}  # type: ignore[misc]
            self._marks = {(t, p): m for (t, p), m in zip(data.mark_keys, data.marks,
                                                          strict=True)}
            self._commits = data.commits
            self._transactions = data.transactions

    # -- input ----------------------------------------------------------------------------------
    def add(self, events: Iterable[tuple[ChangeEvent, int]], watermark_ms: int) -> None:
        """Take new events with their commit times (epoch ms), in any order."""
        pair = self._emitter.config.pair_key_changes
        counters = self.counters
        groups = self._groups
        commits = self._commits
        encode = _encoder.encode
        ready: list[ChangeEvent] = []
        replayed = self._replayed if self._marks else None
        for event, commit_ms in sorted(events, key=_arrival_order):
            if replayed is not None and replayed(event):
                counters.duplicates += 1
                continue
            key = group_key(event)
            group = groups.get(key)
            if group is None:
                if commit_ms < watermark_ms:
                    counters.late += 1
                    ready.append(event)
                    continue
                group = groups[key] = _Group(commit_ms, [], [], event.record.topic)
            op = event.op  # a replay repeats serial, op and key inside its position group
            identity = encode((event.sort_key[2], op, event.key_id))
            seen = group.seen
            keyless_read = event.is_keyless_read
            index = None if keyless_read else self._seen_at(key, seen, identity)
            if index is not None:  # a replay while its group waits: its image must be the same
                digests = group.digests
                if index < len(digests) and digests[index] != image_digest(event):
                    counters.replay_mismatches += 1
                    self.mismatched.append(event)
                else:
                    counters.duplicates += 1
                continue
            if not keyless_read:
                seen.append(identity)
                if key in self._seen_index:
                    self._seen_index[key][identity] = len(seen) - 1
                if len(group.digests) == len(seen) - 1:
                    group.digests.append(image_digest(event))
            if op != "r":
                commit = key[1]
                commits[commit] = commits.get(commit, 0) + 1
            if not pair or (op != "d" and op != "c"):
                ready.append(event)
                continue
            group.waiting.append(event)
            counters.pending += 1
            self._pair_complete(group)
        self._emitter.emit_each(ready)

    def _replayed(self, event: ChangeEvent) -> bool:
        """Below its partition's high-water position, or at it with an (op, key) seen there
        (the marks of earlier calls): a replay whose group may be long gone."""
        if not _streamed(event):
            return False
        r = event.record
        mark = self._marks.get((r.topic, r.partition))
        if mark is None or mark.position is None:
            return False
        sort_key = event.sort_key
        if sort_key < mark.position:
            # inside the mark's own transaction change_lsn need not rise (direct mode): there
            # the group's identities decide
            return sort_key[0] < mark.position[0] or event.is_keyless_read
        if sort_key != mark.position or event.is_keyless_read:
            return False
        at: Collection[bytes] = mark.at_position
        if len(at) > 8:
            tp = (r.topic, r.partition)
            cached = self._at_sets.get(tp)
            if cached is None or cached[0] is not mark:
                cached = self._at_sets[tp] = (mark, frozenset(at))
            at = cached[1]
        return event.op.encode() + event.key_id in at

    def _seen_at(self, key: GroupKey, seen: list[bytes], identity: bytes) -> int | None:
        """Where ``identity`` is in the ``seen`` of group ``key`` (``None``: not there)."""
        index = self._seen_index.get(key)
        if index is None:
            if len(seen) <= 8:
                return seen.index(identity) if identity in seen else None
            index = self._seen_index[key] = {}
            for i, x in enumerate(seen):
                index.setdefault(x, i)
        return index.get(identity)

    def add_transactions(self, ends: Iterable[tuple[bytes, int, int]]) -> None:
        """Transaction END records: (commit_lsn bytes, event_count, ms)."""
        for commit, count, ms in ends:
            self._transactions[commit] = _TxEnd(count, ms)

    def observe(self, progress: Iterable[tuple[str, int, PartitionMark]]) -> None:
        """Progress of the partitions read in this call (applied by :meth:`release`)."""
        self._incoming.extend(progress)

    def _apply_progress(self) -> None:
        if not self._incoming:
            return
        self._index = None
        marks = self._marks
        for topic, partition, mark in self._incoming:
            tp = (topic, partition)
            known = marks.get(tp)
            marks[tp] = mark if known is None else known.merged(mark)
        self._incoming = []

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

    # -- release --------------------------------------------------------------------------------
    def position_watermark(self, topic: str) -> bytes:
        """The commit_lsn every partition of ``topic`` has passed (``b""``: none known)."""
        topology = self.topology
        count = topology.partitions.get(topic)
        ends = topology.ends
        if count is None and ends is None:
            return b""
        marks = self._by_topic().get(topic, {})
        topic_ends = ends.get(topic, {}) if ends is not None else None
        low = _TOP
        for partition in set(range(count or 0)).union(marks):
            mark = marks.get(partition)
            if topic_ends is not None:
                last = topic_ends.get(partition)
                if last is None or (mark is not None and mark.offset >= last):
                    continue  # nothing (more) to read in this run
            if mark is None:
                return b""
            if mark.commit < low:
                low = mark.commit
        return low

    def _by_topic(self) -> dict[str, dict[int, PartitionMark]]:
        index = self._index
        if index is None:
            index = self._index = {}
            for (topic, partition), mark in self._marks.items():
                index.setdefault(topic, {})[partition] = mark
        return index

    def release(self, watermark_ms: int) -> None:
        """Apply the call's progress, then emit and forget every group that may go (rule 3)."""
        self._apply_progress()
        watermarks: dict[str, bytes] = {}
        commits = self._commits
        transactions = self._transactions
        complete = {commit for commit, tx in transactions.items()
                    if commits.get(commit, 0) >= tx.event_count}
        done: list[tuple[GroupKey, str]] = []
        for key, group in self._groups.items():
            topic = group.topic
            watermark = watermarks.get(topic)
            if watermark is None:
                watermark = watermarks[topic] = self.position_watermark(topic)
            commit = key[1]
            if commit < watermark:
                rule = "end" if watermark == _TOP else "position"
            elif commit in complete:
                rule = "transaction"
            elif group.commit_ms < watermark_ms:
                rule = "watermark"
            else:
                continue
            done.append((key, rule))
        for key, rule in sorted(done):
            group = self._groups.pop(key)
            self._seen_index.pop(key, None)
            if group.waiting:
                n = len(group.waiting)
                self.counters.pending -= n
                self.released[rule] += n
                self._emitter.emit(sorted(group.waiting, key=lambda e: e.sort_key))
        self._forget(watermark_ms, watermarks, complete)

    def _forget(self, watermark_ms: int, watermarks: dict[str, bytes], complete: set[bytes]
                ) -> None:
        """Drop the per-commit bookkeeping of commits without groups, and the END records of
        complete transactions, of commits every data partition has passed (their events were
        all released) and those the event-time watermark passed."""
        live = {key[1] for key in self._groups}
        self._commits = {c: n for c, n in self._commits.items() if c in live}
        if not self._transactions:
            return
        data_topics = {t for (t, _), m in self._marks.items() if m.commit}
        floor = min((watermarks.get(t) or self.position_watermark(t) for t in data_topics),
                    default=b"")
        self._transactions = {c: tx for c, tx in self._transactions.items()
                              if c in live or (c not in complete and tx.ms >= watermark_ms
                                               and c >= floor)}

    # -- output ---------------------------------------------------------------------------------
    def drain(self) -> list[ChangeRecord]:
        return self._emitter.drain()[0]

    def drain_mismatches(self) -> list[DeadLetter]:
        """Dead letters (stage ``replay-mismatch``) for the events whose identity repeated one
        still waiting with a different image. Their value is the decoded images (the raw bytes
        are not kept after the decode step); the coordinates are the replay's."""
        out = []
        for event in self.mismatched:
            r = event.record
            raw = RawRecord(r.topic, r.partition, r.offset, r.timestamp,
                            _json.encode(event.key), image_bytes(event))
            error = ReplayMismatchError(
                f"{event.table_id or event.table.table_id} {event.seq or seq_of(event.sort_key)} "
                f"op {event.op!r}: same position, op and key as an event already seen, but a "
                "different image (corruption or a different event, not a replay)")
            out.append(DeadLetter.of(error, raw))
        self.mismatched = []
        return out

    def next_timeout_ms(self) -> int | None:
        """The lowest commit time still in state (release once the watermark passes it)."""
        return min((g.commit_ms for g in self._groups.values()), default=None)

    def waiting_events(self) -> int:
        return sum(len(g.waiting) for g in self._groups.values())

    def waiting_tables(self) -> set[TableRef]:
        """The tables of the events that wait."""
        return {e.table for g in self._groups.values() for e in g.waiting}

    def marks(self) -> dict[TopicPartition, PartitionMark]:
        """The partition marks (after the last :meth:`release`)."""
        return dict(self._marks)

    def __len__(self) -> int:
        return len(self._groups)

    def transactions(self) -> int:
        """How many transaction END records the state keeps."""
        return len(self._transactions)

    def contents(self) -> tuple[dict[GroupKey, _Group], dict[TopicPartition, PartitionMark],
                                dict[bytes, int], dict[bytes, tuple[int, int]]]:
        """The state (after the last :meth:`release`): groups, partition marks, seen-event
        counts per commit, transaction END records (event_count, ms) — what the native window
        takes over from a checkpoint this class wrote."""
        self._apply_progress()
        return (dict(self._groups), dict(self._marks), dict(self._commits),
                {c: (tx.event_count, tx.ms) for c, tx in self._transactions.items()})

    def dump(self) -> bytes:
        self._apply_progress()
        keys = list(self._groups)
        mark_keys = list(self._marks)
        return _pack(_Stored(
            keys, [self._groups[k] for k in keys], mark_keys,  # type: ignore[arg-type]
            [self._marks[k] for k in mark_keys], self._commits, self._transactions))


def event_bytes(event: ChangeEvent) -> bytes:
    """A decoded event as bytes (to carry it between Spark stages and in state), without the
    raw key, value and headers: only the record's coordinates are needed after decoding."""
    r = event.record
    coordinates = RawRecord(r.topic, r.partition, r.offset, r.timestamp)
    return _pack(msgspec.structs.replace(event, record=coordinates))


_event_decoder = msgspec.msgpack.Decoder(ChangeEvent, ext_hook=_wide_int)


def event_from_bytes(data: bytes) -> ChangeEvent:
    return _event_decoder.decode(data)
