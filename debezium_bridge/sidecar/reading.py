"""Reading ranges of partitions to their true end, on any broker.

The end of a partition is learnt from the consumer's end-of-partition event, never from the
reported high watermark alone: some brokers (the embedded Tansu broker among them) report the
base offset of the last record batch + 1 as the high watermark, which is too low whenever that
batch holds more than one record. Fetching is not capped by it there, so reading from any
offset up to the end-of-partition event gives every record.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from debezium_bridge.clients.kafka import open_client
from debezium_bridge.errors import ServiceError

TopicPartition = tuple[str, int]
_BATCH = 1000


def reader(settings: Mapping[str, Any], group_id: str) -> Any:
    """A consumer for reading ranges by assignment (it never joins its group or commits)."""
    from confluent_kafka import Consumer

    return open_client(Consumer, {"fetch.wait.max.ms": "10", **settings, "group.id": group_id,
                                  "enable.auto.commit": "false", "enable.partition.eof": "true",
                                  "auto.offset.reset": "earliest"})


def read_ranges(consumer: Any, ranges: Mapping[TopicPartition, tuple[int, int | None]],
                timeout: float) -> Iterator[Any]:
    """The messages of each partition from ``start`` to ``stop`` (exclusive; ``None``: to the
    end), in offset order per partition. Raises :class:`ServiceError` when a partition makes
    no progress for ``timeout`` seconds."""
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    todo = {tp: span for tp, span in ranges.items()
            if span[1] is None or span[0] < span[1]}
    if not todo:
        return
    consumer.assign([KafkaTopicPartition(t, p, max(start, 0))
                     for (t, p), (start, _) in todo.items()])
    progress = time.monotonic()
    try:
        while todo:
            messages = consumer.consume(_BATCH, 0.2)
            now = time.monotonic()
            if messages:
                progress = now
            elif now - progress > timeout:
                raise ServiceError(f"Kafka: no progress reading {sorted(todo)[:3]} within "
                                   f"{timeout:.0f} s")
            for m in messages:
                tp = (m.topic(), m.partition())
                span = todo.get(tp)
                if span is None:
                    continue
                error = m.error()
                offset = m.offset()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if offset >= span[0]:
                            del todo[tp]
                        continue
                    if error.fatal() or error.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                                         KafkaError._UNKNOWN_PARTITION):
                        raise ServiceError(f"Kafka: cannot read {tp[0]}[{tp[1]}]: {error.str()}")
                    continue
                if offset < span[0]:
                    continue
                stop = span[1]
                if stop is not None and offset >= stop:
                    del todo[tp]
                    continue
                yield m
                if stop is not None and offset + 1 >= stop:
                    del todo[tp]
    finally:
        consumer.unassign()


def end_offsets(consumer: Any, partitions: list[TopicPartition], timeout: float
                ) -> dict[TopicPartition, int]:
    """The true end (next offset) of each partition: read from the reported high watermark
    (a lower bound) to the end-of-partition event."""
    from confluent_kafka import KafkaError
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    starts: dict[TopicPartition, int] = {}
    for topic, partition in partitions:
        try:
            low, high = consumer.get_watermark_offsets(KafkaTopicPartition(topic, partition),
                                                       timeout=timeout, cached=False)
        except Exception as exc:  # KafkaException: broker unreachable, unknown topic
            raise ServiceError(f"Kafka: no offsets for {topic}[{partition}]: {exc}") from None
        starts[(topic, partition)] = max(low, high - 1, 0)
    ends = dict(starts)
    if not starts:
        return ends
    consumer.assign([KafkaTopicPartition(t, p, start) for (t, p), start in starts.items()])
    waiting = set(starts)
    deadline = time.monotonic() + timeout
    try:
        while waiting:
            if time.monotonic() > deadline:
                raise ServiceError(f"Kafka: no end-of-partition for {sorted(waiting)[:3]} "
                                   f"within {timeout:.0f} s")
            for m in consumer.consume(_BATCH, 0.2):
                tp = (m.topic(), m.partition())
                error = m.error()
                if error is None:
                    ends[tp] = max(ends[tp], m.offset() + 1)
                elif error.code() == KafkaError._PARTITION_EOF:
                    ends[tp] = max(ends[tp], m.offset())
                    waiting.discard(tp)
    finally:
        consumer.unassign()
    return ends
