"""What an earlier life already wrote: the output read back from the checkpoint's frontier.

Every output record carries its id (``debezium_bridge.event_id``: the change's deterministic
event id, plus ``:<format>:<index>`` for every record but a change's first canonical one) and
its input coordinates (``debezium_bridge.lineage``, or the ``__connect.errors.*`` headers of a
dead letter). Read from the frontier to the end, they say, per input topic:

* which record ids are written (a re-released change whose record is there is not written
  again), and
* which input records went out in which change, per format — so a change that the restarted
  translator releases in another shape than before (a key change's halves merged now but
  written unpaired before, or the reverse: only possible when a release was forced by the idle
  timeout or ``max_pending``) is recognised by its inputs (:meth:`WrittenIndex.decide`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import msgspec

from debezium_bridge.model.change import LineageRef
from debezium_bridge.model.dead_letter import ERROR_HEADER_PREFIX
from debezium_bridge.output import EVENT_ID_HEADER, LINEAGE_HEADER

_DLQ_TOPIC = ERROR_HEADER_PREFIX + "topic"
_DLQ_PARTITION = ERROR_HEADER_PREFIX + "partition"
_DLQ_OFFSET = ERROR_HEADER_PREFIX + "offset"
_lineage = msgspec.json.Decoder(list[tuple[str, int, int | None]])

Coordinate = tuple[int, int]
"""(partition, offset) of an input record within its topic."""


class Decision(Enum):
    WRITE = "write"
    WRITTEN = "written"
    """Every input of the change already went out in this format (in another shape)."""
    DIVERGENT = "divergent"
    """Some inputs went out in another change, some did not: written (at-least-once)."""


def split_id(record_id: str) -> tuple[str, str]:
    """(change event id, format) of an output record id (``<event id>`` is the canonical
    record, ``<event id>:<format>:<index>`` any other)."""
    event_id, sep, rest = record_id.partition(":")
    if not sep:
        return event_id, "canonical"
    return event_id, rest.rpartition(":")[0]


@dataclass(slots=True)
class WrittenIndex:
    """What is already written for one input topic (see the module docstring)."""

    ids: set[str] = field(default_factory=set)
    owners: dict[tuple[str, int, int], str] = field(default_factory=dict)
    """(format, partition, offset) → event id of the change the input went out in."""
    highest: dict[int, int] = field(default_factory=dict)
    """Highest input offset per partition seen in a written record."""

    def _saw(self, partition: int, offset: int | None) -> None:
        if offset is not None and offset > self.highest.get(partition, -1):
            self.highest[partition] = offset

    def add_change(self, record_id: str, lineage: Iterable[tuple[int, int | None]]) -> None:
        self.ids.add(record_id)
        event_id, fmt = split_id(record_id)
        for partition, offset in lineage:
            self._saw(partition, offset)
            if offset is not None:
                self.owners[(fmt, partition, offset)] = event_id

    def add_dead_letter(self, record_id: str, partition: int, offset: int | None) -> None:
        self.ids.add(record_id)
        self._saw(partition, offset)

    def decide(self, event_id: str, fmt: str, lineage: Sequence[LineageRef]) -> Decision:
        """Whether a change's records in ``fmt`` (those whose id is not written yet) are to be
        written."""
        owners = [self.owners.get((fmt, ref.partition, ref.offset)) if ref.offset is not None
                  else None for ref in lineage]
        others = [o for o in owners if o is not None and o != event_id]
        if not others:
            return Decision.WRITE
        if all(o is not None for o in owners):
            return Decision.WRITTEN
        return Decision.DIVERGENT

    def __len__(self) -> int:
        return len(self.ids)


def index_outputs(messages: Iterable[Any], topics: set[str]) -> dict[str, WrittenIndex]:
    """Index output (and DLQ) records whose inputs are in ``topics``."""
    indexes: dict[str, WrittenIndex] = {}
    for message in messages:
        headers = message.headers()
        if not headers:
            continue
        values: dict[str, bytes | None] = {}
        for name, value in headers:
            values[name] = value
        raw_id = values.get(EVENT_ID_HEADER)
        if raw_id is None:
            continue
        record_id = raw_id.decode()
        source = values.get(_DLQ_TOPIC)
        if source is not None:
            topic = source.decode()
            if topic in topics:
                offset_text = (values.get(_DLQ_OFFSET) or b"").decode()
                indexes.setdefault(topic, WrittenIndex()).add_dead_letter(
                    record_id, int((values.get(_DLQ_PARTITION) or b"0").decode()),
                    int(offset_text) if offset_text else None)
            continue
        raw_lineage = values.get(LINEAGE_HEADER)
        if raw_lineage is None:
            continue
        try:
            lineage = _lineage.decode(raw_lineage)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        by_topic: dict[str, list[tuple[int, int | None]]] = {}
        for topic, partition, offset in lineage:
            if topic in topics:
                by_topic.setdefault(topic, []).append((partition, offset))
        for topic, coordinates in by_topic.items():
            indexes.setdefault(topic, WrittenIndex()).add_change(record_id, coordinates)
    return indexes
