"""One input topic as the sidecar runs it: its pipeline, positions, marks, idle partitions and
counters that add up across restarts.

Every partition of a topic is read by one instance (:mod:`debezium_bridge.sidecar.runner`
assigns whole topics), so the two halves of a key change always reach the same translator.

Counters across restarts: a checkpoint stores the topic's cumulative counters as of its
``reread`` offsets (records before them accounted for). A restarted unit reads again from
``resume`` (< ``reread`` when events were waiting); what those re-read records add *on arrival*
(``records_in`` and their immediate fate: duplicate, tombstone, side record, dead letter,
skipped, or waiting) is counted separately and subtracted, so
``cumulative = checkpoint + this life - re-read arrivals`` counts every input record once.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import fields
from typing import Literal

import msgspec

from debezium_bridge.core.counters import Counters
from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.core.translator import ResumeMark
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.lsn import parse_lsn
from debezium_bridge.model.records import RawRecord
from debezium_bridge.sidecar.checkpoint import Mark, PartitionState, UnitState
from debezium_bridge.sidecar.recovery import WrittenIndex

log = logging.getLogger(__name__)

UnitKind = Literal["data", "transaction", "heartbeat"]
_COUNTERS = tuple(f.name for f in fields(Counters))
_IMMEDIATE = ("duplicates", "tombstones", "side_records", "dead_letters", "skipped")
"""Fates decided on arrival, the same whenever a record is read again (a record that is late
now was waiting when the checkpoint was written: it counts as waiting there)."""
_MAX_HELD_ENDS = 50_000
_any = msgspec.json.Decoder()


def kind_of(topic: str) -> UnitKind:
    """Debezium's side topics by their names: ``<prefix>.transaction`` and
    ``__debezium-heartbeat.<prefix>``; everything else is read as data. A name of four or more
    parts is a table's (``<prefix>.<db>.<schema>.<table>``, a table may be called
    ``transaction``): a prefix with two or more dots has its transaction topic read as data,
    where its records are side records all the same (docs/sidecar.md)."""
    if topic.endswith(".transaction") and topic.count(".") < 3:
        return "transaction"
    if topic.startswith("__debezium-heartbeat"):
        return "heartbeat"
    return "data"


def table_of(topic: str) -> str | None:
    """``db.schema.table`` of a Debezium SQL Server topic ``<prefix>.<db>.<schema>.<table>``."""
    parts = topic.split(".")
    return ".".join(parts[-3:]) if len(parts) >= 4 else None


def _add(into: Counters, other: Counters, sign: int = 1) -> None:
    for name in _COUNTERS:
        setattr(into, name, getattr(into, name) + sign * getattr(other, name))


def transaction_ends(record: RawRecord, decoded_count: int | None, tx_id: str | None
                     ) -> tuple[bytes, int | None, dict[str, int]] | None:
    """(commit LSN, total, per-table counts) of a transaction END record (per-table counts from
    ``data_collections`` when the value is JSON; empty for Avro values)."""
    if tx_id is None:
        return None
    try:
        commit = parse_lsn(tx_id)
    except ValueError:
        return None
    per_table: dict[str, int] = {}
    value = record.value or b""
    if value[:1] == b"{":
        try:
            doc = _any.decode(value)
        except msgspec.DecodeError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("payload"), dict):
            doc = doc["payload"]
        collections = doc.get("data_collections") if isinstance(doc, dict) else None
        for item in collections or ():
            if isinstance(item, dict) and isinstance(item.get("event_count"), int):
                per_table[str(item.get("data_collection"))] = item["event_count"]
    return commit, decoded_count, per_table


class Unit:
    """One input topic owned by this instance (see the module docstring)."""

    def __init__(self, topic: str, partitions: Iterable[int], pipeline: Pipeline,
                 start: dict[int, int], state: UnitState | None = None) -> None:
        self.topic = topic
        self.kind = kind_of(topic)
        self.table = table_of(topic)
        self.pipeline = pipeline
        self.translator = pipeline.translator
        self.translator.track_resume_points()
        self.base = Counters()
        self.reread = Counters()
        self.position: dict[int, int] = {}
        self.reread_until: dict[int, int] = {}
        self.recovering_until: dict[int, int] = {}
        self.index: WrittenIndex | None = None
        self.not_rewritten = 0
        """Records of this topic found already written during recovery (not written again)."""
        self.last_seen: dict[int, float] = {}
        """When each partition last delivered (or was woken by another one, see :meth:`_wake`):
        the start of its quiet period."""
        self.at_end: set[int] = set()
        """Partitions whose end of partition was reported (and that delivered nothing since)."""
        self.idle: set[int] = set()
        self.reprobe: set[int] = set()
        """Partitions whose end must be confirmed afresh (the runner seeks them to their
        position, which makes the consumer report the end again)."""
        self.probed: set[int] = set()
        """Partitions quiet for the idle timeout whose end is being confirmed by a seek made
        after that (:meth:`check_idle`)."""
        self.confirmed: set[int] = set()
        """Probed partitions whose end was reported after the seek: idle."""
        self.held_ends: OrderedDict[bytes, int] = OrderedDict()
        self.end_horizon: str | None = None
        """Commit (20 hex digits) of the first transaction END offered in this life."""
        self.released_commit = ""
        """Highest commit (20 hex digits) of a change released in this life."""
        self.tables: set[str] = set()
        marks: dict[tuple[str, int], ResumeMark] = {}
        if state is not None:
            for name, value in state.counters.items():
                if name in _COUNTERS:
                    setattr(self.base, name, value)
            for ps in state.partitions:
                self.position[ps.partition] = ps.resume
                if ps.reread > ps.resume:
                    self.reread_until[ps.partition] = ps.reread
                if ps.mark is not None:
                    m = ps.mark
                    marks[(topic, ps.partition)] = ((m.commit, m.change, m.serial),
                                                    tuple((op, key) for op, key in m.seen))
        if marks:
            self.translator.restore_marks(marks)
        now = time.monotonic()
        for partition in partitions:
            self.add_partition(partition, start.get(partition, 0), now)

    def add_partition(self, partition: int, start: int, now: float | None = None) -> None:
        """Expect ``partition`` (nothing is released before it has been heard from or gone
        idle); it starts at its checkpointed offset, else at ``start``."""
        self.position.setdefault(partition, start)
        self.last_seen[partition] = time.monotonic() if now is None else now
        if self.kind == "data":
            self.translator.expect([(self.topic, partition)])

    @property
    def partitions(self) -> list[int]:
        return sorted(self.position)

    # -- input ------------------------------------------------------------------------------
    def process(self, records: list[RawRecord], on_end: Callable[[bytes, int | None,
                                                                  dict[str, int]], None] | None
                = None) -> None:
        """Feed this batch's records (already in offset order per partition)."""
        pipeline = self.pipeline
        position = self.position
        reread_until = self.reread_until
        counters = self.translator.counters
        now = time.monotonic()
        late = counters.late
        if self.at_end:
            self._wake(records)
        if not reread_until and self.kind != "transaction":
            # the common case: one call for the batch (the native core reads it in one go)
            last_seen = self.last_seen
            take = []
            for record in records:
                partition = record.partition
                offset = record.offset if record.offset is not None else 0
                if offset < position.get(partition, 0):
                    continue  # already read (a fetch racing a seek)
                take.append(record)
                position[partition] = offset + 1
                last_seen[partition] = now
            pipeline.process_many(take)
            records_seen: list[RawRecord] = []
        else:
            records_seen = records
        for record in records_seen:
            partition = record.partition
            offset = record.offset if record.offset is not None else 0
            if offset < position.get(partition, 0):
                continue  # already read (a fetch racing a seek)
            if reread_until and offset < reread_until.get(partition, -1):
                before = [getattr(counters, name) for name in _IMMEDIATE]
                records_in = counters.records_in
                pipeline.process(record)
                reread = self.reread
                arrived = counters.records_in - records_in
                immediate = 0
                for name, old in zip(_IMMEDIATE, before, strict=True):
                    delta = getattr(counters, name) - old
                    if delta:
                        setattr(reread, name, getattr(reread, name) + delta)
                        immediate += delta
                reread.records_in += arrived
                reread.pending += arrived - immediate
            else:
                pipeline.process(record)
            position[partition] = offset + 1
            self.last_seen[partition] = now
            if self.kind == "transaction" and on_end is not None:
                self._transaction_end(record, on_end)
        for partition in {r.partition for r in records}:
            self.at_end.discard(partition)
            self.idle.discard(partition)
            self.probed.discard(partition)
            self.confirmed.discard(partition)
        if counters.late != late and log.isEnabledFor(logging.DEBUG):
            log.debug("%s: %d late event(s) in a batch of %s; idle %s, at end %s, released up "
                      "to commit %s", self.topic, counters.late - late,
                      {p: (min(r.offset or 0 for r in records if r.partition == p),
                           max(r.offset or 0 for r in records if r.partition == p))
                       for p in {r.partition for r in records}},
                      sorted(self.idle), sorted(self.at_end), self.released_commit)

    def _wake(self, records: list[RawRecord]) -> None:
        """A partition that was at its end delivers again: new records were written to the
        topic, and the other partitions' ends are old news (their new records may just not be
        written or fetched yet: a producer writes each partition's batches independently, so
        one partition's records of a transaction may land well after another's). Each of them
        counts in the watermark again, and its quiet period starts afresh now: it is idle again
        only once it has been at its end for the idle timeout once more (:meth:`check_idle`)."""
        delivering = {r.partition for r in records}
        if delivering.isdisjoint(self.at_end):
            return
        # The delivering partitions themselves count again before any record of the batch is
        # taken: a batch holds each partition's records one partition after the other, and an
        # idle partition still waiting for its turn would let the first one's records be
        # released past its own.
        for partition in delivering & self.idle:
            self.translator.mark_active((self.topic, partition))
            self.idle.discard(partition)
        now = time.monotonic()
        for partition in self.at_end - delivering:
            if partition in self.idle:
                self.translator.mark_active((self.topic, partition))
                self.idle.discard(partition)
            self.reprobe.add(partition)
            self.last_seen[partition] = now
            self.probed.discard(partition)
            self.confirmed.discard(partition)
        self.at_end -= self.reprobe
        log.debug("%s: %s delivering again; ends to confirm: %s", self.topic,
                  sorted(delivering), sorted(self.reprobe))

    def _transaction_end(self, record: RawRecord,
                         on_end: Callable[[bytes, int | None, dict[str, int]], None]) -> None:
        try:
            side = self.pipeline.decoder.decode(record)
        except Exception:  # counted as a dead letter by the pipeline already
            return
        tx_id = getattr(side, "tx_id", None)
        if getattr(side, "kind", None) != "transaction_end":
            return
        end = transaction_ends(record, getattr(side, "event_count", None), tx_id)
        if end is not None:
            on_end(*end)

    def offer_end(self, commit: bytes, total: int | None, per_table: dict[str, int]) -> None:
        """A transaction END read from the transaction topic: this topic's share of it."""
        count = per_table.get(self.table) if self.table else None
        if count is None:
            if per_table or total is None:
                return  # the transaction did not touch this table (or cannot say)
            count = total  # too high for a transaction over several tables: only delays
        if self.end_horizon is None:
            self.end_horizon = commit.hex()
        self.held_ends[commit] = count
        while len(self.held_ends) > _MAX_HELD_ENDS:
            self.held_ends.popitem(last=False)

    def apply_ends(self) -> None:
        """Give the translator the transaction ENDs whose events have started to arrive, in
        commit order, stopping at the first transaction none of whose events is here yet: a
        complete later transaction must not be released while an earlier one still has
        events on their way in a partition that is behind (they would come too late to be
        paired). Transactions before the first END this life has seen are unknown, so ENDs are
        used only once something at or after that first END's commit was released another way
        (the watermark: every partition has passed it, so nothing earlier is on its way)."""
        if self.end_horizon is None or self.released_commit < self.end_horizon:
            return
        end_transaction = self.translator.end_transaction
        done = []
        for commit, count in self.held_ends.items():
            if not end_transaction(commit, count):
                break
            done.append(commit)
        if done:
            log.debug("%s: %d transaction END(s) applied, up to %s", self.topic, len(done),
                      done[-1].hex())
        for commit in done:
            del self.held_ends[commit]

    def reached_end(self, partition: int, offset: int) -> None:
        """The consumer reported the end of ``partition`` at ``offset`` (ignored while a fresh
        report is awaited: the partition is still to be sought)."""
        if offset >= self.position.get(partition, 0) and partition not in self.reprobe:
            self.at_end.add(partition)
            if partition in self.probed:
                self.confirmed.add(partition)

    def check_idle(self, timeout_s: float, now: float) -> None:
        """Let partitions that have been at their end for ``timeout_s`` stop holding back the
        release (idle timeout).

        An end report says nothing about the time since it was made: the consumer may have
        reported it long ago and fetched the partition's new records since, while this process
        was busy (a slow batch, a checkpoint, a rebalance, a loaded machine). So a partition
        quiet for the timeout is first sought to its position (``reprobe``): only an end
        reported after that seek — made at least ``timeout_s`` after its last record (or its
        wake-up) — makes it idle; records delivered meanwhile cancel it."""
        if self.kind != "data" or timeout_s <= 0:
            return
        for partition in self.at_end - self.idle:
            if now - self.last_seen.get(partition, now) < timeout_s:
                continue
            if partition in self.confirmed:
                self.idle.add(partition)
                self.probed.discard(partition)
                self.confirmed.discard(partition)
                self.translator.mark_idle((self.topic, partition))
                log.debug("%s[%d] idle at %d", self.topic, partition, self.position[partition])
            elif partition not in self.probed:
                self.probed.add(partition)
                self.reprobe.add(partition)

    # -- output -----------------------------------------------------------------------------
    def drain(self) -> tuple[list[ChangeRecord], list[DeadLetter]]:
        changes, dead = self.pipeline.drain()
        if changes:
            top = max(change.seq[:20] for change in changes)
            if top > self.released_commit:
                self.released_commit = top
        return changes, dead

    def already_written_dead_letter(self, letter: DeadLetter) -> bool:
        """A dead letter of a re-read record: written before the checkpoint it resumed from."""
        r = letter.record
        return (r.topic == self.topic and r.offset is not None
                and r.offset < self.reread_until.get(r.partition, -1))

    # -- recovery ---------------------------------------------------------------------------
    def start_recovery(self, index: WrittenIndex | None) -> None:
        """Until every partition has released past what an earlier life wrote, re-released
        changes are checked against ``index``."""
        self.index = index
        until = dict(self.reread_until)
        if index is not None:
            for partition, offset in index.highest.items():
                until[partition] = max(until.get(partition, 0), offset + 1)
        self.recovering_until = {p: o for p, o in until.items() if o > self.position.get(p, 0)}
        if not self.recovering_until:
            self.index = None

    @property
    def recovering(self) -> bool:
        return bool(self.recovering_until)

    def end_recovery_if_done(self, resume: dict[int, int]) -> bool:
        """Drop the written index once every partition resumes past it; ``True`` when done."""
        if self.recovering_until and all(resume.get(p, 0) >= o
                                         for p, o in self.recovering_until.items()):
            self.recovering_until = {}
            self.index = None
            return True
        return False

    # -- checkpoint -------------------------------------------------------------------------
    def counters(self) -> Counters:
        """Cumulative counters: checkpoint + this life - re-read arrivals."""
        total = Counters()
        _add(total, self.base)
        _add(total, self.translator.counters)
        _add(total, self.reread, -1)
        return total

    def resume_offsets(self) -> dict[int, int]:
        topic = self.topic
        pending = self.translator.pending_offsets()
        held = self.pipeline.assembler.held_offsets()
        out = {}
        for partition, position in self.position.items():
            tp = (topic, partition)
            out[partition] = min(position, pending.get(tp, position), held.get(tp, position))
        return out

    def state(self) -> UnitState:
        """This topic's checkpoint entry (call only when everything drained was delivered)."""
        resume = self.resume_offsets()
        marks = self.translator.resume_marks()
        partitions = []
        for partition, position in sorted(self.position.items()):
            mark = marks.get((self.topic, partition))
            partitions.append(PartitionState(
                partition, resume[partition],
                max(position, self.reread_until.get(partition, 0)),
                None if mark is None else Mark(mark[0][0], mark[0][1], mark[0][2],
                                               [(op, key) for op, key in mark[1]])))
        for partition in [p for p, o in self.reread_until.items() if self.position[p] >= o]:
            del self.reread_until[partition]  # every dead letter of the window is decided
        counters = self.counters()
        return UnitState(self.topic, partitions,
                         {name: getattr(counters, name) for name in _COUNTERS})
