"""Checkpoints: where each input partition resumes, with the state that cannot be re-read.

A checkpoint is one record on the checkpoint topic (one partition), written after every record
released before it was delivered (or inside the Kafka transaction that holds them). It lists,
per input topic the instance owns and per partition:

* ``resume`` — where reading restarts: the lowest offset whose event still waits in state (or
  the next offset to read). The group's committed offsets are the same numbers.
* ``reread`` — the next offset to read at the time: records in ``[resume, reread)`` were
  already accounted for and their dead letters already written.
* ``mark`` — the replay-dedupe mark just before ``resume`` (see
  :meth:`debezium_bridge.core.translator.Translator.resume_marks`), so replays of events
  released before the restart point are still recognised.

plus the cumulative counters of the topic, and the *frontier*: for every output partition the
instance writes to, an offset at or before anything written after this checkpoint. Recovery
reads the output from the frontier to learn what an earlier life wrote after its last
checkpoint (docs/sidecar.md).

Lookup reads the topic backwards from its end until every wanted input topic is found: the
latest record naming a topic is its state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import msgspec

from debezium_bridge.errors import ServiceError
from debezium_bridge.sidecar.reading import end_offsets, read_ranges

log = logging.getLogger(__name__)

VERSION = 1


class Mark(msgspec.Struct, array_like=True, frozen=True):
    commit: bytes
    change: bytes
    serial: int
    seen: list[tuple[str, bytes]]
    """(op, key id) pairs of the events at exactly this position."""


class PartitionState(msgspec.Struct, array_like=True, frozen=True):
    partition: int
    resume: int
    reread: int
    mark: Mark | None = None


class UnitState(msgspec.Struct, frozen=True):
    topic: str
    partitions: list[PartitionState]
    counters: dict[str, int]


class Checkpoint(msgspec.Struct, frozen=True):
    group: str
    instance: str
    life: str
    sequence: int
    time_ms: int
    units: list[UnitState]
    frontier: dict[str, dict[int, int]]
    """Output topic → partition → offset (idempotent guarantee only)."""
    version: int = VERSION

    def unit(self, topic: str) -> UnitState | None:
        for state in self.units:
            if state.topic == topic:
                return state
        return None


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Checkpoint)


def encode(checkpoint: Checkpoint) -> bytes:
    return _encoder.encode(checkpoint)


def decode(value: bytes) -> Checkpoint:
    return _decoder.decode(value)


def find(consumer: Any, topic: str, group: str, wanted: set[str], timeout: float
         ) -> dict[str, Checkpoint]:
    """The latest checkpoint of ``group`` naming each ``wanted`` input topic (topics never
    checkpointed are absent), reading ``topic`` backwards from its end."""
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    found: dict[str, Checkpoint] = {}
    if not wanted:
        return found
    try:
        low, _ = consumer.get_watermark_offsets(KafkaTopicPartition(topic, 0), timeout=timeout,
                                                cached=False)
    except Exception as exc:  # KafkaException: unreachable, or no such topic
        raise ServiceError(f"Kafka: cannot read checkpoint topic {topic}: {exc}") from None
    stop = end_offsets(consumer, [(topic, 0)], timeout)[(topic, 0)]
    missing = set(wanted)
    chunk = 64
    while missing and stop > low:
        start = max(low, stop - chunk)
        batch = list(read_ranges(consumer, {(topic, 0): (start, stop)}, timeout))
        for message in reversed(batch):
            try:
                checkpoint = decode(message.value() or b"")
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                log.warning("checkpoint topic %s offset %s: not a checkpoint (%s)", topic,
                            message.offset(), exc)
                continue
            if checkpoint.group != group or checkpoint.version != VERSION:
                continue
            for state in checkpoint.units:
                if state.topic in missing:
                    found[state.topic] = checkpoint
                    missing.discard(state.topic)
            if not missing:
                break
        stop = start
        chunk = min(chunk * 4, 16_384)
    return found


def merge_frontiers(frontiers: list[Mapping[str, Mapping[int, int]]]
                    ) -> dict[tuple[str, int], int]:
    """The lowest offset per output partition over several checkpoints' frontiers."""
    merged: dict[tuple[str, int], int] = {}
    for frontier in frontiers:
        for topic, partitions in frontier.items():
            for partition, offset in partitions.items():
                key = (topic, int(partition))
                merged[key] = min(merged.get(key, offset), offset)
    return merged
