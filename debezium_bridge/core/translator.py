"""Order, deduplicate and pair decoded Debezium events into canonical change records.

Rules (docs/concepts.md), in the order they apply to each input record:

1. **Decode** (:mod:`debezium_bridge.formats.debezium.decode`); failures become dead letters,
   tombstones and side records are counted and dropped.
2. **Replay dedupe.** Per Kafka partition, Debezium emits transactions in commit order, and a
   restart re-sends a suffix with the same ``source``. So an event of a transaction below its
   partition's high-water mark is a replay, and at the mark itself the (op, key) pairs seen there
   decide. Inside the mark's transaction ``change_lsn`` need not rise (``data.query.mode=direct``,
   the default from 3.4, sends a transaction's rows in ``__$command_id`` order): an event below
   the mark there is a replay only if its identity is remembered (below), else a new event.
   Events of keyless tables (round-robin partitioned, so a replay may land in another partition)
   and snapshot rows are also checked against a bounded set of recent identities; CES events
   (``ChangeEvent.unordered``: no commit order in a partition) only against it.
   A replay must repeat its original's images: a 64-bit hash of :func:`image_bytes` of the
   most recent ``dedupe_capacity`` events (between half and all of them) is remembered by
   identity —
   (table, commit_lsn, change_lsn, event_serial_no, op, key), for snapshot rows (table, key,
   commit_lsn) — and a replay whose digest differs is a dead letter (stage ``replay-mismatch``,
   counted in ``replay_mismatches``, part of ``dead_letters``), never dropped. A replay of an
   event no longer remembered cannot be compared and is dropped as a duplicate, except inside
   its partition's high-water transaction, where it cannot be told from a new event and is
   emitted again (with its event id): a copy, never a loss.
3. **Wait, then release in position order.** Events are grouped by (commit_lsn, change_lsn,
   table) and a group is released when the commit watermark — the lowest commit_lsn high-water
   mark over the data partitions — has moved past its commit_lsn, when a transaction END with
   its complete event count says the transaction is whole, when more than ``max_pending`` events
   wait (lowest positions first), or at :meth:`Translator.flush` (end of input).
4. **Pair.** Inside a released group, a delete and a create with equal keys fold into an update;
   then a single remaining delete and create (a primary-key change, serials 1/2, 2/2 or 1/1) merge
   into one update with ``key_changed``. Anything else is emitted as itself.

An event that arrives after its position was released (a partition lagging by more than the
wait) is emitted at once, unpaired, and counted as ``late``.

**Two implementations.** This module is the readable reference. Where the extension
``debezium_bridge._native`` is built (and ``TranslatorConfig.native`` / ``DEBEZIUM_BRIDGE_NATIVE``
allow it), :class:`Translator` keeps its state in the native core, which implements these rules
byte for byte and hands the records it does not decode itself back to the Python decoder
(:mod:`debezium_bridge.core.native`). The public methods are the same either way.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import math
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator, Mapping
from typing import Any, Protocol

import msgspec

from debezium_bridge.core import native
from debezium_bridge.core.counters import Counters
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.errors import (
    ConfigError,
    LsnFormatError,
    RecordError,
    ReplayMismatchError,
    ServiceError,
)
from debezium_bridge.formats.ces.decode import CesDecoder
from debezium_bridge.formats.debezium.avro import AvroDecoder
from debezium_bridge.formats.debezium.decode import Decoder
from debezium_bridge.model.change import (
    DEBEZIUM_OPS,
    ChangeEvent,
    ChangeRecord,
    LineageRef,
    SideKind,
    SideRecord,
    iso_ms,
    seq_of,
)
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.lsn import parse_lsn
from debezium_bridge.model.records import KafkaRecord, RawRecord, as_raw_record

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
GroupKey = tuple[bytes, bytes, str]
ResumeMark = tuple[tuple[bytes, bytes, int], tuple[tuple[str, bytes], ...]]
"""A partition's replay-dedupe mark: the highest position seen and the (op, key id) pairs at it
(see :meth:`Translator.resume_marks`)."""


class _BoundedSet:
    """A set that forgets its oldest members beyond ``capacity``."""

    __slots__ = ("_capacity", "_members", "_order")

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._members: set[Any] = set()
        self._order: deque[Any] = deque()

    def __contains__(self, item: Any) -> bool:
        return item in self._members

    def __len__(self) -> int:
        return len(self._members)

    def add(self, item: Any) -> None:
        if item in self._members or self._capacity == 0:
            return
        self._members.add(item)
        self._order.append(item)
        if len(self._order) > self._capacity:
            self._members.discard(self._order.popleft())


_MASK64 = (1 << 64) - 1


class _ImageMemory:
    """Image hashes (see :func:`image_digest`) of the most recent events by identity hash, for
    telling a replay from a differing copy: between ``capacity / 2`` and ``capacity`` of them
    (two generations of dicts, the older dropped whole: no per-entry order to keep)."""

    __slots__ = ("_half", "_new", "_old")

    def __init__(self, capacity: int) -> None:
        self._half = max(capacity // 2, 1) if capacity else 0
        self._new: dict[int, int] = {}
        self._old: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._new) + len(self._old)

    def remember(self, identity: int, digest: int) -> None:
        if not self._half:
            return
        new = self._new
        new[identity] = digest
        if len(new) >= self._half:
            self._old, self._new = new, {}

    def get(self, identity: int) -> int | None:
        found = self._new.get(identity)
        return self._old.get(identity) if found is None else found

    def __contains__(self, identity: int) -> bool:
        return identity in self._new or identity in self._old


_OP_RANK = {"d": 0, "u": 1, "c": 1, "r": 1, "t": 1}
_PRESSURE_LOG_EVERY = 10_000
"""Forced releases are logged when they start and then every this many events."""


def _identity_bytes(e: ChangeEvent, seq: str) -> bytes:
    ident = f"{e.table_id or e.table.table_id}\x00{seq}\x00{e.op}\x00".encode() + e.key_id
    if e.is_keyless_read:  # such rows share all that: their Kafka coordinates differ
        r = e.record
        offset = -1 if r.offset is None else r.offset
        ident += f"\x00{r.topic}\x00{r.partition}\x00{offset}".encode()
    return ident


_ABSENT: Any = object()
_SCAN_PARTITIONS = 64
"""Up to this many partitions the watermark is a pass over their marks; past it, a heap."""
_new_hash = hashlib.blake2b(digest_size=16).copy
"""A fresh 16-byte BLAKE2b: copying a prepared state is cheaper than calling the constructor."""


_image_encode = msgspec.json.Encoder(order="sorted").encode
_encode_lines = msgspec.json.Encoder().encode_lines
_new_digest = hashlib.blake2b(digest_size=8).copy


def image_bytes(event: ChangeEvent) -> bytes:
    """What a replay must repeat exactly: the msgspec JSON (keys sorted) of ``[before, after,
    unavailable]`` as decoded (canonical values, so the encoding of the message does not
    matter). The envelope ``ts_ms`` and the Kafka coordinates, which differ on a replay, are
    not part of it."""
    return _image_encode((event.before, event.after, event.unavailable))


def image_digest(event: ChangeEvent) -> bytes:
    """8 bytes of BLAKE2b of :func:`image_bytes`: the same in every process, for state that
    outlives one (a Spark state store). The translator's own memory, which lives in one process,
    keeps Python's 64-bit ``hash`` of :func:`image_bytes` instead (about half the cost)."""
    digest = _new_digest()
    digest.update(image_bytes(event))
    return digest.digest()


def _event_id(*parts: bytes) -> str:
    """Deterministic id: the same input event(s) give the same id on every replay."""
    digest = _new_hash()
    digest.update(b"\x01".join(parts))
    return digest.hexdigest()


def _columns(image: dict[str, Any] | None, order: tuple[str, ...] | None) -> list[str]:
    if image is None:
        return []
    if order is not None and len(order) == len(image):
        return list(order)
    return list(image)


def _lookup(names: tuple[str, ...]) -> Container[str]:
    """``names`` for ``in`` tests: a set when a scan would cost more (many unavailable columns
    made the scans quadratic: 40,000 took 5.6 s)."""
    return set(names) if len(names) > 8 else names


def _changed(before: dict[str, Any] | None, after: dict[str, Any] | None,
             unavailable: tuple[str, ...], order: tuple[str, ...] | None) -> list[str]:
    if unavailable or before is None or after is None:
        return _changed_available(before, after, _lookup(unavailable), order)
    missing = before.get
    if order is None:
        return [c for c, value in after.items()
                if (old := missing(c, _ABSENT)) != value and _written_apart(old, value)]
    present = after.get
    return [c for c in order if (old := missing(c, _ABSENT)) != (new := present(c, _ABSENT))
            and _written_apart(old, new)]


def _written_apart(old: Any, new: Any) -> bool:
    """Whether two unequal column values are written differently: NaN and infinite floats
    are written as null (canonical JSON, as msgspec writes them), so a column that goes from
    NaN to NaN or to null has not changed."""
    return not (_null_when_written(old) and _null_when_written(new))


def _null_when_written(value: Any) -> bool:
    return value is None or (value.__class__ is float and not math.isfinite(value))


def _changed_available(before: dict[str, Any] | None, after: dict[str, Any] | None,
                       unavailable: Container[str], order: tuple[str, ...] | None
                       ) -> list[str]:
    """:func:`_changed` with some columns unavailable (never named as changed), or an image
    missing."""
    if before is None:
        return [c for c in _columns(after, order) if c not in unavailable]
    if after is None:
        return _columns(before, order)
    missing = before.get
    names = order if order is not None else tuple(after)
    return [c for c in names if c not in unavailable
            and (old := missing(c, _ABSENT)) != (new := after.get(c, _ABSENT))
            and _written_apart(old, new)]



class Translator:
    """Turns a stream of Kafka records into canonical change records and dead letters.

    Feed records with :meth:`process_many` (or :meth:`process`), collect output with
    :meth:`drain`, and call :meth:`flush` at the end of the input. Not thread-safe; one instance
    per stream.
    """

    def __init__(self, config: TranslatorConfig | None = None,
                 decoder: Decoder | None = None) -> None:
        self.config = config or TranslatorConfig()
        self.decoder = decoder or Decoder(ces=CesDecoder())
        self.counters = Counters()
        self._changes: list[ChangeRecord] = []
        self._dead: list[DeadLetter] = []
        # replay dedupe
        self._partition_marks: dict[TopicPartition, tuple[tuple[bytes, bytes, int], set[Any]]] = {}
        self._recent = _BoundedSet(self.config.dedupe_capacity)
        self._images = _ImageMemory(self.config.dedupe_capacity)
        # ordering and pairing
        self._commit_marks: dict[TopicPartition, bytes] = {}
        self._mark_heap: list[tuple[bytes, TopicPartition]] = []
        """Past :data:`_SCAN_PARTITIONS` partitions: (commit mark, tp) of the partitions, lowest
        first, with stale entries (an older mark, an idle partition) dropped when they come up:
        the watermark without a pass over every partition (that pass, on nearly every record
        of round-robin traffic, made 16,000 partitions cost 51 s per 160,000 records). Empty
        while the partitions are few: a pass over them costs less than the heap's upkeep."""
        self._idle: set[TopicPartition] = set()
        self._watermark: bytes | None = None
        self._groups: dict[GroupKey, list[ChangeEvent]] = {}
        self._group_heap: list[GroupKey] = []
        self._pending_ids: set[Any] = set()
        self._released_upto: GroupKey | None = None
        self._tx_expected: dict[bytes, int] = {}
        self._commits: dict[bytes, list[int]] = {}
        """Per commit_lsn with waiting events: [events seen, events still waiting]."""
        self._released_marks: dict[TopicPartition, tuple[tuple[bytes, bytes, int],
                                                         set[Any]]] | None = None
        """With :meth:`track_resume_points`: per partition, the dedupe mark of what was
        released."""
        self.native_fallback: Callable[[KafkaRecord], Iterable[native.Result]] | None = None
        """Where the native core sends the records it declines (default: this translator's
        decoder); the CES pipeline puts its segment assembler in front."""
        self._core: Any = None
        self._synced: dict[str, int] = {}
        if native.use_native(self.config.native) and self.decoder.__class__ is Decoder:
            options = self.decoder.options
            self._core = native.make_core(
                pair_key_changes=self.config.pair_key_changes,
                max_pending=self.config.max_pending,
                dedupe_capacity=self.config.dedupe_capacity,
                placeholder=options.unavailable_value_placeholder,
                binary_mode=options.binary_handling_mode,
                fallback=self._declined)
            self._core.configure(list(options.table_schemas), True)
            avro = self.decoder.avro
            if avro.__class__ is AvroDecoder and avro.resolver is not None:
                self._core.configure_avro(native.avro_schemas(self.decoder))
            self._synced = self._core.counters()

    @property
    def is_native(self) -> bool:
        """Whether this translator runs on the native core."""
        return self._core is not None

    @property
    def native_declined(self) -> int:
        """Records the native core declined and handed to the Python decoder so far (0 on the
        Python core): how much of a stream left the native path."""
        return 0 if self._core is None else int(self._core.declined_records)

    # -- the native core ----------------------------------------------------------------------
    def _declined(self, record: KafkaRecord) -> Iterable[native.Result]:
        if self.native_fallback is not None:
            return self.native_fallback(record)
        return native.fallback_results(self.decoder.decode, record)

    def _sync(self) -> None:
        """Apply the native counters' changes to :attr:`counters` (callers may keep and even
        change that object, e.g. the Spark window state), and tell schema listeners about
        schemas the native decoder compiled."""
        now = self._core.counters()
        counters, before = self.counters, self._synced
        for name, value in now.items():
            delta = value - before[name]
            if delta:
                setattr(counters, name, getattr(counters, name) + delta)
        forced = now["released_by_pressure"] - before["released_by_pressure"]
        if forced and (not before["released_by_pressure"] or before["released_by_pressure"]
                       // _PRESSURE_LOG_EVERY != now["released_by_pressure"]
                       // _PRESSURE_LOG_EVERY):
            log.warning("more than max_pending=%d events wait: releasing the lowest positions "
                        "before every partition moved past them (%d so far; a key change split "
                        "across partitions may stay unpaired)", self.config.max_pending,
                        now["released_by_pressure"])
        self._synced = now
        schemas = self._core.take_new_schemas()
        if schemas and self.decoder.schema_listeners:
            self._notify_schemas(schemas)

    def _notify_schemas(self, schemas: list[str]) -> None:
        for text in schemas:
            try:
                schema = msgspec.json.decode(text[1:])
                if text[0] == "v":
                    self.decoder._compile_envelope_schema(schema)
                else:
                    self.decoder._compile_key_schema(schema)
            except RecordError:
                continue

    # -- partitions ---------------------------------------------------------------------------
    def expect(self, partitions: Iterable[TopicPartition]) -> None:
        """Declare data partitions that will deliver events, so nothing is released before
        each of them has been heard from (or marked idle)."""
        if self._core is not None:
            self._core.expect([(topic, partition) for topic, partition in partitions])
            return
        for tp in partitions:
            if tp not in self._commit_marks:
                self._commit_marks[tp] = b""
                self._push_mark(tp, b"")
                self._watermark = None

    def _push_mark(self, tp: TopicPartition, commit: bytes) -> None:
        """``tp``'s commit mark is now ``commit`` (or it counts again): into the mark heap
        (past :data:`_SCAN_PARTITIONS`), built from the marks when it starts and when stale
        entries outnumber them."""
        if len(self._commit_marks) <= _SCAN_PARTITIONS:
            return
        heap = self._mark_heap
        if not heap or len(heap) > 2 * len(self._commit_marks) + 64:
            idle = self._idle
            heap[:] = [(c, p) for p, c in self._commit_marks.items() if p not in idle]
            heapq.heapify(heap)
        heapq.heappush(heap, (commit, tp))

    def _wake(self, tp: TopicPartition) -> None:
        """``tp`` is no longer idle: its mark counts again."""
        if tp in self._idle:
            self._idle.discard(tp)
            commit = self._commit_marks.get(tp)
            if commit is not None:
                self._push_mark(tp, commit)

    def mark_idle(self, partition: TopicPartition) -> None:
        """Exclude a partition from the watermark until it delivers again (idle timeout)."""
        if self._core is not None:
            self._core.mark_idle(*partition)
            self._sync()
            return
        self._idle.add(partition)
        self._watermark = None
        self._release_ready()

    def mark_active(self, partition: TopicPartition) -> None:
        """Count a partition marked idle in the watermark again before it delivers (a runner
        that sees another partition of a topic wake up expects news from this one too: its
        records may just not have been fetched yet)."""
        if self._core is not None:
            self._core.mark_active(*partition)
            return
        if partition in self._idle:
            self._wake(partition)
            self._watermark = None

    # -- input --------------------------------------------------------------------------------
    def process(self, record: KafkaRecord) -> None:
        """Translate one record; results become available through :meth:`drain`."""
        self.process_many((record,))

    def process_many(self, records: Iterable[KafkaRecord]) -> None:
        """Translate records in order; results become available through :meth:`drain`."""
        if self._core is not None:
            try:
                self._core.process(records)
            finally:
                self._sync()
            return
        counters = self.counters
        decode = self.decoder.decode
        accept = self._accept
        for record in records:
            raw = record if record.__class__ is RawRecord else as_raw_record(record)
            counters.records_in += 1
            try:
                decoded = decode(raw)
            except RecordError as exc:  # bad input: a dead letter with the error's stage
                counters.dead_letters += 1
                self._dead.append(DeadLetter.of(exc, raw))
                continue
            except ServiceError:  # a service is down, not bad input: stop the run
                counters.records_in -= 1  # not consumed; the counters stay balanced
                raise
            except Exception as exc:  # a decoder bug: never stops the stream, but is found
                log.exception("decoder bug on %s[%s]@%s (dead-lettered): %s: %s", raw.topic,
                              raw.partition, raw.offset, type(exc).__name__, exc)
                counters.dead_letters += 1
                self._dead.append(DeadLetter.of(exc, raw))
                continue
            if decoded.__class__ is SideRecord:
                self._side(decoded)  # type: ignore[arg-type]
            else:
                accept(decoded)  # type: ignore[arg-type]

    def reject(self, dead_letter: DeadLetter) -> None:
        """Account for input the runner could not even read (e.g. a corrupt dump line)."""
        if self._core is not None:
            self._core.reject(dead_letter)
            self._sync()
            return
        self.counters.records_in += 1
        self.counters.dead_letters += 1
        self._dead.append(dead_letter)

    def process_event(self, event: ChangeEvent, records: int = 1) -> None:
        """Take an event decoded from input that is not a Kafka record (SQL Server change-table
        rows, :mod:`debezium_bridge.formats.cdc`): ``records`` input records made it (2 for an
        update's old and new rows; the first counts as ``merged``)."""
        if self._core is not None:
            try:
                self._core.process_event(native.flatten(event), event.record, records)
            finally:
                self._sync()
            return
        self.counters.records_in += records
        self.counters.merged += records - 1
        self._accept(event)

    def process_events(self, events: Iterable[tuple[ChangeEvent, int]]) -> None:
        """:meth:`process_event` for each ``(event, records)`` in order (one call into the
        native core)."""
        if self._core is not None:
            try:
                self._core.process_events([(native.flatten(event), event.record, records)
                                           for event, records in events])
            finally:
                self._sync()
            return
        for event, records in events:
            self.process_event(event, records)

    def drop_duplicate(self, records: int = 1) -> None:
        """Account for input records that repeat one already taken (an identical change-table
        row in overlapping exports)."""
        if self._core is not None:
            self._core.drop_duplicate(records)
            self._sync()
            return
        self.counters.records_in += records
        self.counters.duplicates += records

    def _side(self, side: SideRecord) -> None:
        counters = self.counters
        if side.kind is SideKind.TOMBSTONE:
            counters.tombstones += 1
        elif side.kind is SideKind.MESSAGE:
            counters.skipped += 1
        else:
            counters.side_records += 1
            if side.kind is SideKind.TX_END and side.tx_id and side.event_count is not None:
                try:
                    commit = parse_lsn(side.tx_id)
                except LsnFormatError:
                    return
                self.end_transaction(commit, side.event_count)

    def end_transaction(self, commit: bytes, event_count: int) -> bool:
        """A transaction END (``provide.transaction.metadata``) for the transaction committed at
        ``commit`` (``parse_lsn`` form) with ``event_count`` events in this translator's input:
        once that many have arrived, its groups may be released without waiting for the
        watermark. A count that is too high only delays release. Returns ``False`` when no
        event of that transaction has arrived yet (a runner reading the transaction topic
        ahead of the data may offer it again later), ``True`` otherwise."""
        if self._core is not None:
            done = bool(self._core.end_transaction(commit, event_count))
            self._sync()
            return done
        if commit in self._commits:
            self._tx_expected[commit] = event_count
            self._release_ready()
            return True
        upto = self._released_upto
        return upto is not None and commit < upto[0]

    def _accept(self, event: ChangeEvent) -> None:
        record = event.record
        tp = (record.topic, record.partition)
        sort_key = event.sort_key
        op = event.op
        key_id = event.key_id
        counters = self.counters
        # replay dedupe (module docstring, rule 2; ``ChangeEvent.identity``). Only identities
        # of snapshot rows and keyless events are ever looked up in ``_pending_ids``, so only
        # those are tracked there.
        # The image memory is keyed by the hash of the identity: a collision could at worst
        # turn an identical replay into a dead letter, never drop an event.
        keyless_read = event.is_keyless_read  # no identity: never a replay
        tracked: tuple[Any, ...] | None = None
        table_id = event.table_id or event.table.table_id
        if op == "r" and event.snapshot != "incremental":
            if not keyless_read:
                tracked = (event.table, key_id, sort_key[0], "r")
            identity = hash((table_id, key_id, sort_key[0], "r"))
        else:
            identity = hash((table_id, sort_key, op, key_id))
            marks = self._partition_marks
            mark = marks.get(tp)
            local = (op, key_id)
            if event.unordered:
                tracked = (event.table, sort_key, op, key_id)
            elif mark is None or sort_key > mark[0]:
                marks[tp] = (sort_key, {local})
            elif sort_key == mark[0]:
                if not keyless_read and local in mark[1]:
                    self._replayed(event, identity)
                    return
                if not keyless_read:
                    mark[1].add(local)
            elif sort_key[0] < mark[0][0] or keyless_read or identity in self._images:
                self._replayed(event, identity)
                return
            if key_id == b"{}" and not keyless_read:
                tracked = (event.table, sort_key, op, key_id)
        if tracked is not None:
            if tracked in self._recent or tracked in self._pending_ids:
                self._replayed(event, identity)
                return
            self._recent.add(tracked)
        if not keyless_read:
            self._images.remember(identity, hash(_image_encode((event.before, event.after,
                                                                event.unavailable))))
        commit, change = sort_key[0], sort_key[1]
        # watermark bookkeeping
        commit_marks = self._commit_marks
        previous = commit_marks.get(tp)
        if previous is None or commit > previous:
            commit_marks[tp] = commit
            self._push_mark(tp, commit)
            if previous is None or previous == self._watermark or tp in self._idle:
                self._watermark = None
        if self._idle:
            self._wake(tp)
        upto = self._released_upto
        if upto is not None and (commit < upto[0] or (commit == upto[0] and change <= upto[1])):
            counters.late += 1
            if self._released_marks is not None:
                self._note_released((event,))
            self._emit_group([event])
            return
        group_key = (commit, change, event.table_id or event.table.table_id)
        group = self._groups.get(group_key)
        if group is None:
            self._groups[group_key] = [event]
            heapq.heappush(self._group_heap, group_key)
        else:
            group.append(event)
        if tracked is not None:
            self._pending_ids.add(tracked)
        counters.pending += 1
        counts = self._commits.get(commit)
        if counts is None:
            self._commits[commit] = [1, 1]
        else:
            counts[0] += 1
            counts[1] += 1
        # cheap pre-check of the release rule; usually the new event just waits
        watermark = self._watermark
        if watermark is None or self._group_heap[0][0] < watermark or self._tx_expected \
                or counters.pending > self.config.max_pending:
            self._release_ready()

    def _replayed(self, event: ChangeEvent, identity: int) -> None:
        """An event with the identity of one already seen: a duplicate when its images are the
        remembered ones (or are no longer remembered), else a dead letter."""
        original = self._images.get(identity)
        if original is None:
            self.counters.duplicates += 1
            return
        digest = hash(image_bytes(event))
        if digest == original:
            self.counters.duplicates += 1
            return
        counters = self.counters
        counters.dead_letters += 1
        counters.replay_mismatches += 1
        record = event.record
        position = event.seq or seq_of(event.sort_key)
        key = event.key_id.decode("utf-8", "replace")
        self._dead.append(DeadLetter.of(ReplayMismatchError(
            f"replay of {event.table_id or event.table.table_id} {event.op!r} key {key:.200} at "
            f"{position} has images that differ from the event already translated (image hash "
            f"{digest & _MASK64:016x}, original {original & _MASK64:016x}); Debezium replays "
            "differ only in the envelope ts_ms and the Kafka offsets", record), record))

    # -- release ------------------------------------------------------------------------------
    def _current_watermark(self) -> bytes:
        if self._watermark is None:
            self._watermark = self._lowest_mark()
        return self._watermark

    def _lowest_mark(self) -> bytes:
        """The lowest commit mark of the partitions that are not idle (``ff…`` if none)."""
        marks, idle = self._commit_marks, self._idle
        if len(marks) <= _SCAN_PARTITIONS:
            active = [c for tp, c in marks.items() if tp not in idle] if idle else marks.values()
            return min(active, default=b"\xff" * 11)
        heap = self._mark_heap
        while heap and (heap[0][1] in idle or marks.get(heap[0][1]) != heap[0][0]):
            heapq.heappop(heap)  # stale: an older mark of the partition, or it is idle
        return heap[0][0] if heap else b"\xff" * 11

    def _release_ready(self) -> None:
        heap = self._group_heap
        if not heap:
            return
        watermark = self._current_watermark()
        counters = self.counters
        tx_expected = self._tx_expected
        max_pending = self.config.max_pending
        groups = self._groups
        while heap:
            head = heap[0]
            commit = head[0]
            if commit < watermark or (tx_expected and (expected := tx_expected.get(commit))
                                      is not None and self._commits[commit][0] >= expected):
                pass
            elif counters.pending > max_pending:
                forced = len(groups[head])
                if counters.released_by_pressure // _PRESSURE_LOG_EVERY != (
                        counters.released_by_pressure + forced) // _PRESSURE_LOG_EVERY \
                        or not counters.released_by_pressure:
                    log.warning("more than max_pending=%d events wait: releasing the lowest "
                                "positions before every partition moved past them (%d so far; "
                                "a key change split across partitions may stay unpaired)",
                                max_pending, counters.released_by_pressure + forced)
                counters.released_by_pressure += forced
            else:
                break
            self._release_group(heapq.heappop(heap))

    def _release_group(self, group_key: GroupKey) -> None:
        events = self._groups.pop(group_key)
        n = len(events)
        counters = self.counters
        counters.pending -= n
        pending_ids = self._pending_ids
        if pending_ids:
            for e in events:
                if e.key_id == b"{}" or (e.op == "r" and e.snapshot != "incremental"):
                    pending_ids.discard(e.identity)
        self._released_upto = group_key
        if self._released_marks is not None:
            self._note_released(events)
        commit = group_key[0]
        counts = self._commits[commit]
        if counts[1] > n:
            counts[1] -= n
        else:
            del self._commits[commit]
            if self._tx_expected:
                self._tx_expected.pop(commit, None)
        self.emit(events)

    # -- resume points (runners that restart from committed input offsets) ---------------------
    def track_resume_points(self) -> None:
        """Keep what :meth:`resume_marks` needs (off by default: it costs a little per event).

        A runner that commits input offsets and rebuilds this state after a restart reads each
        partition again from its lowest waiting offset (:meth:`pending_offsets`), with the
        replay-dedupe mark that partition had just before that event (:meth:`resume_marks`,
        given back through :meth:`restore_marks`): replays of events released before the
        restart point are then still recognised, and everything from it on is decided exactly
        as before."""
        if self._core is not None:
            self._core.track_resume_points()
            return
        if self._released_marks is None:
            self._released_marks = {}

    def pending_offsets(self) -> dict[TopicPartition, int]:
        """The lowest input offset still waiting in state, per partition (partitions with
        nothing waiting are absent). Committed offsets must not pass it. O(waiting events)."""
        if self._core is not None:
            return dict(self._core.pending_offsets())
        lowest: dict[TopicPartition, int] = {}
        for events in self._groups.values():
            for e in events:
                r = e.record
                offset = r.offset
                if offset is None:
                    continue
                tp = (r.topic, r.partition)
                current = lowest.get(tp)
                if current is None or offset < current:
                    lowest[tp] = offset
        return lowest

    def resume_marks(self) -> dict[TopicPartition, ResumeMark]:
        """Per partition, the replay-dedupe mark as it stood just before its lowest waiting event
        (or now, when nothing of it waits). Per partition, Debezium writes in position order and
        the watermark releases in position order, so the released events are exactly the ones
        before the lowest waiting one. Needs :meth:`track_resume_points`."""
        if self._core is not None:
            return dict(self._core.resume_marks())
        if self._released_marks is None:
            raise RuntimeError("call track_resume_points() before processing")
        return {tp: (mark[0], tuple(sorted(mark[1])))
                for tp, mark in self._released_marks.items()}

    def restore_marks(self, marks: Mapping[TopicPartition, ResumeMark]) -> None:
        """Start partitions from saved marks (:meth:`resume_marks`), before their first record."""
        if self._core is not None:
            self._core.restore_marks([(tp[0], tp[1], key[0], key[1], key[2], list(locals_))
                                      for tp, (key, locals_) in marks.items()])
            return
        self.track_resume_points()
        assert self._released_marks is not None
        for tp, (sort_key, locals_) in marks.items():
            key = (sort_key[0], sort_key[1], sort_key[2])
            self._partition_marks[tp] = (key, set(locals_))
            self._released_marks[tp] = (key, set(locals_))

    def _note_released(self, events: Iterable[ChangeEvent]) -> None:
        marks = self._released_marks
        assert marks is not None
        for e in events:
            if e.op == "r" and e.snapshot != "incremental":
                continue  # snapshot rows are not in the partition marks
            r = e.record
            tp = (r.topic, r.partition)
            mark = marks.get(tp)
            sort_key = e.sort_key
            if mark is None or sort_key > mark[0]:
                marks[tp] = (sort_key, {(e.op, e.key_id)})
            elif sort_key == mark[0]:
                mark[1].add((e.op, e.key_id))

    def flush(self) -> None:
        """Release everything still waiting (end of input)."""
        if self._core is not None:
            self._core.flush()
            self._sync()
            return
        heap = self._group_heap
        while heap:
            self._release_group(heapq.heappop(heap))

    # -- pairing and output -------------------------------------------------------------------
    def emit(self, events: list[ChangeEvent]) -> None:
        """Pair and emit one position group whose release a runner decided itself (the Spark
        runner keeps waiting events in Spark state); results come out through :meth:`drain`."""
        if self._core is not None:
            self._core.emit([native.flatten(e) for e in events], False)
            self._sync()
            return
        if len(events) == 1:
            self.counters.changes_out += 1
            self._changes.append(self._single(events[0]))
        else:
            self._emit_group(events)

    def emit_each(self, events: list[ChangeEvent]) -> None:
        """Emit each event as a change of its own (no pairing), like :meth:`emit` of one."""
        if self._core is not None:
            self._core.emit([native.flatten(e) for e in events], True)
            self._sync()
            return
        self.counters.changes_out += len(events)
        self._changes.extend(map(self._single, events))

    def _emit_group(self, events: list[ChangeEvent]) -> None:
        outputs: list[tuple[tuple[int, int, bytes], ChangeRecord]] = []
        if self.config.pair_key_changes and len(events) > 1:
            events = self._pair(events, outputs)
        for e in events:
            outputs.append(((e.sort_key[2], _OP_RANK[e.op], e.key_id), self._single(e)))
        if len(outputs) > 1:
            outputs.sort(key=lambda item: item[0])
        self.counters.changes_out += len(outputs)
        self._changes.extend(record for _, record in outputs)

    def _pair(self, events: list[ChangeEvent],
              outputs: list[tuple[tuple[int, int, bytes], ChangeRecord]]) -> list[ChangeEvent]:
        deletes = [e for e in events if e.op == "d"]
        creates = [e for e in events if e.op == "c"]
        if not deletes or not creates:
            return events
        used: set[int] = set()
        creates_by_key = {c.key_id: c for c in creates}
        pairs: list[tuple[ChangeEvent, ChangeEvent]] = []
        for d in deletes:
            c = creates_by_key.get(d.key_id)
            if c is not None and id(c) not in used:
                pairs.append((d, c))
                used.update((id(d), id(c)))
        left_d = [d for d in deletes if id(d) not in used]
        left_c = [c for c in creates if id(c) not in used]
        if len(left_d) == 1 and len(left_c) == 1:
            pairs.append((left_d[0], left_c[0]))
            used.update((id(left_d[0]), id(left_c[0])))
        else:  # Case B headers name the partner exactly: each delete takes the first create
            # naming it (an index, not a scan: a bulk key update puts thousands at one position)
            named: dict[tuple[bytes | None, bytes | None], list[ChangeEvent]] = {}
            for c in reversed(left_c):
                named.setdefault((c.key_id, c.partner_key_id), []).append(c)
            for d in left_d:
                partners = named.get((d.partner_key_id, d.key_id))
                if partners:
                    c = partners.pop()
                    pairs.append((d, c))
                    used.update((id(d), id(c)))
        for d, c in pairs:
            merged = self._merged(d, c)
            if merged.key_changed:
                self.counters.key_changes_paired += 1
            self.counters.merged += 1
            outputs.append(((c.sort_key[2], 1, c.key_id), merged))
        return [e for e in events if id(e) not in used]

    def _single(self, e: ChangeEvent) -> ChangeRecord:
        op = DEBEZIUM_OPS[e.op]
        unavailable = e.unavailable
        if op == "update" and e.changed is not None:  # the source says (CDC update mask)
            skip = _lookup(unavailable)
            changed = [c for c in e.changed if c not in skip]
        elif op == "update":
            changed = _changed(e.before, e.after, unavailable, e.column_order)
        elif op == "truncate":
            changed = []
        else:
            image = e.before if op == "delete" else e.after
            if unavailable:
                skip = _lookup(unavailable)
                changed = [c for c in _columns(image, e.column_order) if c not in skip]
            else:
                changed = _columns(image, e.column_order)
        record = e.record
        seq = e.seq or seq_of(e.sort_key)
        return ChangeRecord(
            op,
            e.table,
            e.table_id or e.table.table_id,
            e.key,
            None,
            False,
            e.before,
            e.after,
            changed,
            list(unavailable) if unavailable else [],
            e.position,
            seq,
            iso_ms(e.source_ts_ms),
            iso_ms(e.ts_ms),
            e.tx,
            e.snapshot,
            e.source,
            [LineageRef(record.topic, record.partition, record.offset)],
            _event_id(_identity_bytes(e, seq)),
        )

    def _merged(self, d: ChangeEvent, c: ChangeEvent) -> ChangeRecord:
        key_changed = d.key_id != c.key_id
        in_d = _lookup(d.unavailable)
        unavailable = d.unavailable + tuple(u for u in c.unavailable if u not in in_d)
        seq = c.seq or seq_of(c.sort_key)
        if c.changed is not None and d.changed == c.changed and d.partner_key_id is not None:
            # halves of one update (rows 3 + 4 whose keys differ): its update mask says
            skip = _lookup(unavailable)
            changed = [name for name in c.changed if name not in skip]
        else:
            changed = _changed(d.before, c.after, unavailable, c.column_order)
        return ChangeRecord(
            op="update",
            table=c.table,
            table_id=c.table_id or c.table.table_id,
            key=c.key,
            old_key=d.key if key_changed else None,
            key_changed=key_changed,
            before=d.before,
            after=c.after,
            changed_columns=changed,
            unavailable_columns=list(unavailable),
            position=c.position,
            seq=seq,
            commit_ts=iso_ms(c.source_ts_ms),
            capture_ts=iso_ms(c.ts_ms),
            tx=c.tx,
            snapshot=c.snapshot,
            source=c.source,
            lineage=[LineageRef(r.topic, r.partition, r.offset) for r in (d.record, c.record)],
            event_id=_event_id(_identity_bytes(d, d.seq or seq_of(d.sort_key)),
                               _identity_bytes(c, seq)),
        )

    # -- output -------------------------------------------------------------------------------
    def drain(self) -> tuple[list[ChangeRecord], list[DeadLetter]]:
        """Take the change records and dead letters produced so far."""
        if self._core is not None:
            lines, _ = self._core.drain_lines()
            return native.decode_lines(lines), self._core.drain_dead()
        changes, dead = self._changes, self._dead
        self._changes, self._dead = [], []
        return changes, dead

    def drain_json(self) -> tuple[bytes, int, list[DeadLetter]]:
        """Take the output as canonical JSON lines (one buffer, each record ending in a
        newline; what :func:`~debezium_bridge.formats.canonical.encode_lines` writes), their
        count, and the dead letters: the runners' path, with no object per change on the native
        core."""
        if self._core is not None:
            lines, count = self._core.drain_lines()
            return lines, count, self._core.drain_dead()
        changes, dead = self.drain()
        return _encode_lines(changes) if changes else b"", len(changes), dead

    def drain_arrow(self) -> tuple[Any, list[DeadLetter]]:
        """Take the output as one Arrow batch (native core only): an object of the Arrow
        PyCapsule protocol (``pyarrow.record_batch(batch)``) with the UTF-8 columns
        ``event_id, op, table_id, seq, commit_ts, key, value`` (``value`` = the canonical JSON
        line), and the dead letters. The Python core has no Arrow view here (the core imports
        no Arrow library): runners build one from :meth:`drain_json`."""
        if self._core is None:
            raise ConfigError("drain_arrow needs the native core (native: on/auto with the "
                              "extension built); use drain_json with the Python core")
        return self._core.drain_arrow(), self._core.drain_dead()

    @property
    def has_output(self) -> bool:
        """Whether :meth:`drain` would return anything."""
        if self._core is not None:
            return bool(self._core.has_output)
        return bool(self._changes or self._dead)

    def translate(self, records: Iterable[KafkaRecord], *, flush: bool = True
                  ) -> Iterator[ChangeRecord | DeadLetter]:
        """Process ``records`` and yield outputs as they are released (flushing at the end)."""
        return translate_stream(self, records, flush=flush)

    def state_size(self) -> dict[str, int]:
        """Sizes of the bounded state (for logs, metrics and benchmarks)."""
        if self._core is not None:
            return dict(self._core.state_size())
        return {
            "pending_events": self.counters.pending,
            "pending_groups": len(self._groups),
            "partition_marks": len(self._partition_marks),
            "recent_identities": len(self._recent),
            "image_digests": len(self._images),
            "open_transactions": len(self._tx_expected),
        }


class Stage(Protocol):
    """Anything that takes records and releases changes and dead letters (a translator, or a
    translator behind the CES segment assembler)."""

    def process(self, record: KafkaRecord) -> None: ...
    def flush(self) -> None: ...
    def drain(self) -> tuple[list[ChangeRecord], list[DeadLetter]]: ...
    @property
    def has_output(self) -> bool: ...


def translate_stream(stage: Stage, records: Iterable[KafkaRecord], *, flush: bool = True
                     ) -> Iterator[ChangeRecord | DeadLetter]:
    """Feed ``records`` to ``stage``; yield dead letters, then changes, as they come out."""
    for record in records:
        stage.process(record)
        if stage.has_output:
            changes, dead = stage.drain()
            yield from dead
            yield from changes
    if flush:
        stage.flush()
        changes, dead = stage.drain()
        yield from dead
        yield from changes
