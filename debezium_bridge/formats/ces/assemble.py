"""Reassembly of segmented CES events, before the translator (see :class:`CesAssembler`).

Bad segments never stop the stream: segments that are complete but do not join (text ``data``
mixed with object or Avro ``data``, a result that cannot be encoded) become dead letters, all
the held segments of that ``logicalid`` and any of its segments arriving later (stage
``ces-assemble``, :class:`~debezium_bridge.errors.SegmentError`), like an incomplete event at the
end of the input. A second segment with a held segment's ``logicalid`` and index is dropped as a
duplicate when its ``data`` is equal, and is a dead letter when it differs; once an event is
complete only its ``logicalid`` is remembered (``completed_memory``), so a later copy of any of
its segments counts as a duplicate without being compared.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

import msgspec

from debezium_bridge.errors import RecordError, SegmentError, ServiceError
from debezium_bridge.formats.ces import avro as ces_avro
from debezium_bridge.formats.ces.envelope import (
    HALF_HEADER,
    data_text,
    is_ces,
    json_encode,
    parse_data,
    parse_envelope,
    parse_row,
    segment_info,
    starts_document,
    text_of,
)
from debezium_bridge.formats.ces.options import DEFAULT_OPTIONS, CesOptions
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord

log = logging.getLogger(__name__)

_DATA_KINDS: dict[type, str] = {str: "text", bytes: "bytes", bytearray: "bytes", dict: "object",
                                list: "array"}


class _Parts:
    """The held segments of one ``logicalid``; ``low`` and ``high`` are their lowest and
    highest index, kept as segments arrive."""

    __slots__ = ("final_index", "high", "low", "parts", "total")

    def __init__(self) -> None:
        self.parts: dict[int, tuple[RawRecord, dict[str, Any]]] = {}
        self.final_index: int | None = None
        self.total: int | None = None
        self.low = self.high = 0

    def add(self, index: int, record: RawRecord, doc: dict[str, Any]) -> None:
        """Holds a segment whose index is not held yet."""
        if self.parts:
            self.low = min(self.low, index)
            self.high = max(self.high, index)
        else:
            self.low = self.high = index
        self.parts[index] = (record, doc)

    def complete(self) -> list[int] | None:
        """The indices forming the whole event, or ``None`` while incomplete."""
        # decided by count and bounds, sorted once complete: sorting per segment was quadratic
        # (10k segments: 4 s)
        count, low, high = len(self.parts), self.low, self.high
        if self.total is not None:  # legacy: splittotalcnt segments
            if count == self.total and high - low + 1 == self.total:
                return sorted(self.parts)
            return None
        if self.final_index is None or high != self.final_index \
                or count != self.final_index - low + 1:
            return None
        if low == 0:
            return sorted(self.parts)
        if low == 1:  # base 1, or base 0 with segment 0 still to come?
            indices = sorted(self.parts)
            first = data_text(self.parts[1][1])
            if isinstance(first, bytes | bytearray):  # Avro: only the whole Data decodes
                fragments = [self.parts[i][1].get("data") for i in indices]
                pieces = [f for f in fragments if isinstance(f, bytes | bytearray)]
                if len(pieces) < len(fragments):
                    return indices  # whole by count; the join reports the mixed types
                return indices if starts_document(b"".join(pieces)) else None
            if starts_document(first):
                return indices
        return None


_LISTED_RANGES = 20
"""Index ranges a dead letter's message lists before it only counts them."""


def _index_ranges(indices: list[int]) -> str:
    """Sorted indices as ranges, ``1-1999, 2001-8000``: the first ``_LISTED_RANGES``, then how
    many there are (listing every index put N indices in each of N dead letters: 8000
    segments made a 511 MB DLQ)."""
    runs: list[list[int]] = []
    for index in indices:
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    listed = ", ".join(str(low) if low == high else f"{low}-{high}"
                       for low, high in runs[:_LISTED_RANGES])
    if len(runs) > _LISTED_RANGES:
        listed += f", ... ({len(runs)} ranges, {len(indices)} segments)"
    return listed


@dataclass(slots=True)
class AssemblerCounters:
    """``records_in = passed + assembled + absorbed + duplicates + dead_letters + held``."""

    records_in: int = 0
    passed: int = 0
    assembled: int = 0
    absorbed: int = 0
    duplicates: int = 0
    dead_letters: int = 0
    held: int = 0
    split_updates: int = 0
    """Key-changing UPDs forwarded as two records (each adds one forwarded record)."""

    @property
    def balanced(self) -> bool:
        return self.records_in == (self.passed + self.assembled + self.absorbed
                                   + self.duplicates + self.dead_letters + self.held)

    def as_dict(self) -> dict[str, int | bool]:
        return {**asdict(self), "balanced": self.balanced}

    def summary(self) -> str:
        return (f"ces input: records_in={self.records_in} = passed={self.passed} + "
                f"assembled={self.assembled} + absorbed={self.absorbed} + "
                f"duplicates={self.duplicates} + dead_letters={self.dead_letters} + "
                f"held={self.held} [{'balanced' if self.balanced else 'NOT BALANCED'}] "
                f"split_updates={self.split_updates}")


class CesAssembler:
    """Reassembles CES segments and splits key-changing updates (module docstring)."""

    def __init__(self, options: CesOptions | None = None) -> None:
        self.options = options or DEFAULT_OPTIONS
        self.counters = AssemblerCounters()
        self._pending: OrderedDict[str, _Parts] = OrderedDict()
        self._completed: OrderedDict[str, None] = OrderedDict()
        self._expired: OrderedDict[str, str] = OrderedDict()
        self._dead: list[DeadLetter] = []

    def feed(self, record: RawRecord) -> list[RawRecord]:
        """Records for the translator (none while a segmented event is incomplete).

        Never raises for bad input: segments that cannot be joined become dead letters
        (:meth:`drain_dead`). A bug (an exception that is not a :class:`RecordError`) is logged
        with its traceback and the record dead-lettered, so the run goes on."""
        self.counters.records_in += 1
        try:
            return self._feed(record)
        except ServiceError:  # not bad input (no service is used here today): stop the run
            self.counters.records_in -= 1
            raise
        except Exception as exc:
            if not isinstance(exc, RecordError):
                log.exception("CES assembler bug on %s[%s]@%s (dead-lettered): %s: %s",
                              record.topic, record.partition, record.offset,
                              type(exc).__name__, exc)
            if not self.counters.balanced:  # the record was not accounted for yet
                self.counters.dead_letters += 1
                self._dead.append(DeadLetter.of(exc, record, stage=SegmentError.stage))
            return []

    def _feed(self, record: RawRecord) -> list[RawRecord]:
        counters = self.counters
        if not is_ces(record.value):
            counters.passed += 1
            return [record]
        try:
            doc = parse_envelope(record.value or b"")
            index, final, total = segment_info(doc)
        except RecordError:
            counters.passed += 1  # the decoder reports it as a dead letter
            return [record]
        logical_id = doc.get("logicalid")
        single = final and total is None and index <= 1 and (
            index == 0 or starts_document(data_text(doc)))
        if not isinstance(logical_id, str) or (single and logical_id not in self._pending):
            counters.passed += 1
            return self._split_update(record, doc)
        if logical_id in self._completed:
            counters.duplicates += 1
            return []
        if logical_id in self._expired:  # its event was already reported incomplete
            counters.dead_letters += 1
            self._dead.append(DeadLetter.of(SegmentError(self._expired[logical_id], record),
                                            record))
            return []
        parts = self._pending.get(logical_id)
        if parts is None:
            parts = self._pending[logical_id] = _Parts()
        held = parts.parts.get(index)
        if held is not None:
            if held[1].get("data") == doc.get("data"):
                counters.duplicates += 1  # a re-sent copy
            else:  # a different segment under the same logicalid and index: never dropped
                counters.dead_letters += 1
                self._dead.append(DeadLetter.of(SegmentError(
                    f"CES logicalid {logical_id}: segment {index} conflicts with the segment "
                    f"{index} held (offset {held[0].offset}): its data differs", record), record))
            return []
        parts.add(index, record, doc)
        counters.held += 1
        if final:
            parts.final_index = index
        if total is not None:
            parts.total = total
        try:
            indices = parts.complete()
            if indices is None:
                self._enforce_bound()
                return []
            joined = self._join(parts, indices, record)
        except Exception as exc:  # SegmentError; anything else is a bug, logged
            if isinstance(exc, RecordError):
                reason = exc.message
            else:
                log.exception("CES assembler bug joining logicalid %s (dead-lettered)",
                              logical_id)
                reason = f"cannot be joined: unexpected {type(exc).__name__}: {exc}"
            self._expire(logical_id, reason, reason=reason)
            return []
        del self._pending[logical_id]
        self._remember(logical_id)
        counters.held -= len(indices)
        counters.assembled += 1
        counters.absorbed += len(indices) - 1
        return self._split_update(*joined)

    def _join(self, parts: _Parts, indices: list[int],
              last: RawRecord) -> tuple[RawRecord, dict[str, Any]]:
        """The whole event of complete segments; raises :class:`SegmentError` when they do not
        join (text and bytes or objects mixed, or a result that cannot be encoded again)."""
        first = parts.parts[indices[0]][1]
        fragments = [parts.parts[i][1].get("data") for i in indices]
        doc = {k: v for k, v in first.items() if k not in ("splitindex", "splittotalcnt")}
        doc["segmentindex"] = indices[0]
        doc["finalsegment"] = True
        try:
            if all(isinstance(f, bytes | bytearray) for f in fragments):
                doc["data"] = b"".join(fragments)  # type: ignore[arg-type]
                value = ces_avro.encode_envelope(doc)
            elif all(isinstance(f, str) for f in fragments):
                text = "".join(fragments)  # type: ignore[arg-type]
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:  # a producer cut a surrogate pair: rejoin the halves
                    text = text.encode("utf-16", "surrogatepass").decode("utf-16")
                doc["data"] = text
                value = json_encode(doc)
            else:
                kinds = sorted({_DATA_KINDS.get(f.__class__, f.__class__.__name__)
                                for f in fragments})
                raise SegmentError(f"CES segments of one event mix data types ({', '.join(kinds)})"
                                   "; only text or only bytes segments join")
        except UnicodeDecodeError as exc:
            raise SegmentError(f"CES segments join into invalid text: {exc.reason}") from exc
        except (ValueError, OverflowError, TypeError) as exc:  # the serializer refused it
            raise SegmentError(f"CES segments join into an event that cannot be encoded: "
                               f"{exc}") from exc
        return RawRecord(last.topic, last.partition, last.offset, last.timestamp, last.key,
                         value, last.headers), doc

    def _split_update(self, record: RawRecord, doc: dict[str, Any]) -> list[RawRecord]:
        if doc.get("operation") != "UPD":
            return [record]
        try:
            data = parse_data(doc)
            pkkey = data["eventsource"].get("pkkey") or []
            old = parse_row(data["eventrow"].get("old"))
        except (RecordError, KeyError, AttributeError):
            return [record]  # the decoder reports it
        if not old or not pkkey:
            return [record]
        try:
            changed = any(text_of(old.get(p["columnname"])) != p["value"]
                          for p in pkkey if p["columnname"] in old)
        except (KeyError, TypeError):
            return [record]
        if not changed:
            return [record]
        self.counters.split_updates += 1
        return [msgspec.structs.replace(record, headers=(*record.headers, (HALF_HEADER, half)))
                for half in (b"delete", b"create")]

    def _remember(self, logical_id: str) -> None:
        limit = self.options.completed_memory
        if not limit:
            return
        self._completed[logical_id] = None
        if len(self._completed) > limit:
            self._completed.popitem(last=False)

    def _enforce_bound(self) -> None:
        while self.counters.held > self.options.max_pending_segments and self._pending:
            self._expire(next(iter(self._pending)), "more than max_pending_segments held")

    def _expire(self, logical_id: str, why: str, *, reason: str | None = None) -> None:
        """Every held segment of ``logical_id`` becomes a dead letter, and so do its segments
        arriving later: the event is incomplete (``why``), or its segments do not join
        (``reason``, the message)."""
        parts = self._pending.pop(logical_id)
        indices = sorted(parts.parts)
        segments = f"segments [{_index_ranges(indices)}]"
        expected = (f"{parts.total} (splittotalcnt)" if parts.total is not None else
                    f"final index {parts.final_index}" if parts.final_index is not None
                    else "no final segment seen")
        if reason is not None:
            message = f"CES logicalid {logical_id}: {segments}: {reason}"
        else:
            message = (f"CES logicalid {logical_id}: {segments} of an incomplete event "
                       f"({expected}; {why}); a missing segment is reported, not guessed")
        for index in indices:
            raw = parts.parts[index][0]
            self._dead.append(DeadLetter.of(SegmentError(message, raw), raw))
        self.counters.held -= len(indices)
        self.counters.dead_letters += len(indices)
        if self.options.completed_memory:
            self._expired[logical_id] = message
            if len(self._expired) > self.options.completed_memory:
                self._expired.popitem(last=False)

    def flush(self) -> None:
        """End of input: every incomplete event becomes dead letters."""
        while self._pending:
            self._expire(next(iter(self._pending)), "input ended")

    def drain_dead(self) -> list[DeadLetter]:
        dead, self._dead = self._dead, []
        return dead

    @property
    def pending_segments(self) -> int:
        return self.counters.held

    def held_offsets(self) -> dict[tuple[str, int], int]:
        """The lowest input offset of a held segment, per partition (for runners that commit
        input offsets: they must not pass a segment whose event is still incomplete)."""
        lowest: dict[tuple[str, int], int] = {}
        for parts in self._pending.values():
            for record, _ in parts.parts.values():
                if record.offset is None:
                    continue
                tp = (record.topic, record.partition)
                if record.offset < lowest.get(tp, record.offset + 1):
                    lowest[tp] = record.offset
        return lowest
