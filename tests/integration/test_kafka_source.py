"""The package's Kafka source against a real broker: same columns and options as Spark's."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.clients.kafka import produce
from debezium_bridge.errors import ConfigError
from debezium_bridge.model.records import RawRecord
from debezium_bridge.spark.source import KAFKA_SCHEMA, _Topology, kafka_reader
from tests.integration.streams import run_available_now

pytestmark = pytest.mark.integration


def _records(topic: str, n: int, partitions: int = 3) -> list[RawRecord]:
    out = []
    for i in range(n):
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 5 == 0:
            headers = (("h1", b"v0"), ("h2", None), ("h1", b"dup"))
        out.append(RawRecord(topic, i % partitions, None, 1_700_000_000_000 + i,
                             None if i % 7 == 0 else f"k{i}".encode(),
                             None if i % 11 == 0 else f"value {i}".encode(), headers))
    return out


def _options(bootstrap: str, topic: str, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
            "startingOffsets": "earliest"} | extra


def _as_tuple(row: Any) -> tuple[Any, ...]:
    return (row.key, row.value, row.topic, row.partition, row.offset,
            int(row.timestamp.timestamp() * 1000), row.timestampType,
            tuple((h.key, h.value) for h in row.headers))


def _expected(delivered: list[RawRecord]) -> set[tuple[Any, ...]]:
    return {(r.key, r.value, r.topic, r.partition, r.offset, r.timestamp, 0, r.headers)
            for r in delivered}


def test_stream_has_the_builtin_schema_and_every_record(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic(3)
    delivered = produce(kafka_bootstrap, _records(topic, 60))
    frame = kafka_reader(spark, _options(kafka_bootstrap, topic), provider="python").load()
    assert frame.schema.simpleString() == spark.createDataFrame([], KAFKA_SCHEMA).schema \
        .simpleString()
    assert [f.name for f in frame.schema.fields] == ["key", "value", "topic", "partition",
                                                     "offset", "timestamp", "timestampType",
                                                     "headers"]
    batches, _ = run_available_now(frame, str(tmp_path / "ck"))
    rows = [_as_tuple(r) for batch in batches for r in batch]
    assert len(rows) == 60
    assert set(rows) == _expected(delivered)
    # header order, duplicate names and null values survive
    with_headers = [r for r in rows if r[7]]
    assert with_headers and all(h == (("h1", b"v0"), ("h2", None), ("h1", b"dup"))
                                for h in (r[7] for r in with_headers))


def test_max_offsets_per_trigger_and_restart_from_checkpoint(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic(3)
    first = produce(kafka_bootstrap, _records(topic, 30))
    options = _options(kafka_bootstrap, topic, maxOffsetsPerTrigger="10")
    checkpoint = str(tmp_path / "ck")
    frame = kafka_reader(spark, options, provider="python").load()
    batches, _ = run_available_now(frame, checkpoint)
    assert len(batches) >= 3
    assert all(len(b) <= 10 for b in batches)
    assert {_as_tuple(r) for b in batches for r in b} == _expected(first)
    second = produce(kafka_bootstrap, _records(topic, 12))
    frame = kafka_reader(spark, options, provider="python").load()
    batches, _ = run_available_now(frame, checkpoint)
    rows = [_as_tuple(r) for b in batches for r in b]
    assert len(rows) == 12
    assert set(rows) == _expected(second), "a restart reads only the new records"


def test_starting_offsets_per_partition_json(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    topic = new_topic(3)
    delivered = produce(kafka_bootstrap, _records(topic, 30))
    starting = f'{{"{topic}": {{"0": 4, "1": -2, "2": -1}}}}'
    frame = kafka_reader(spark, _options(kafka_bootstrap, topic, startingOffsets=starting),
                         provider="python").load()
    batches, _ = run_available_now(frame, str(tmp_path / "ck"))
    got = {(r.partition, r.offset) for b in batches for r in b}
    want = {(r.partition, r.offset) for r in delivered
            if (r.partition == 0 and (r.offset or 0) >= 4) or r.partition == 1}
    assert got == want


def test_starting_offsets_json_must_name_every_partition(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(2)
    produce(kafka_bootstrap, _records(topic, 4, partitions=2))
    options = _options(kafka_bootstrap, topic, startingOffsets=f'{{"{topic}": {{"0": 0}}}}')
    with pytest.raises(Exception, match=r"must name every partition; missing .*\[1\]"):
        kafka_reader(spark, options, provider="python", streaming=False).load().collect()


def test_batch_read_between_offsets_and_subscribe_pattern(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic(3, prefix="pattern")
    delivered = produce(kafka_bootstrap, _records(topic, 30))
    options = {"kafka.bootstrap.servers": kafka_bootstrap,
               "subscribePattern": topic.replace(".", r"\."),
               "startingOffsets": f'{{"{topic}": {{"0": 1, "1": -2, "2": -2}}}}',
               "endingOffsets": f'{{"{topic}": {{"0": 5, "1": -1, "2": 3}}}}'}
    rows = kafka_reader(spark, options, provider="python", streaming=False).load().collect()
    got = {(r.partition, r.offset) for r in rows}
    want = {(r.partition, r.offset) for r in delivered
            if (r.partition == 0 and 1 <= (r.offset or 0) < 5) or r.partition == 1
            or (r.partition == 2 and (r.offset or 0) < 3)}
    assert got == want


def test_end_offset_probe_finds_the_true_end(
        kafka_bootstrap: str, new_topic: Callable[..., str]) -> None:
    """Tansu reports base offset of the last batch + 1 as the end; the probe must not."""
    topic = new_topic(3)
    delivered = produce(kafka_bootstrap, _records(topic, 300),
                        settings={"linger.ms": "50", "batch.num.messages": "1000"})
    true_ends: dict[tuple[str, int], int] = {}
    for r in delivered:
        tp = (r.topic, r.partition)
        true_ends[tp] = max(true_ends.get(tp, 0), (r.offset or 0) + 1)
    topology = _Topology({"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic})
    try:
        assert topology.ends(topology.partitions()) == true_ends
    finally:
        topology.close()


def test_source_options_are_validated(spark: Any, kafka_bootstrap: str) -> None:
    with pytest.raises(ConfigError, match="provider"):
        kafka_reader(spark, {}, provider="flink")
    with pytest.raises(Exception, match="exactly one of 'subscribe' and 'subscribePattern'"):
        kafka_reader(spark, {"kafka.bootstrap.servers": kafka_bootstrap}, provider="python",
                     streaming=False).load().collect()


def test_transaction_markers_at_the_end_do_not_stall_the_reader(
        spark: Any, kafka_bootstrap: str, new_topic: Callable[..., str], tmp_path: Path) -> None:
    """A committed transaction ends with a control record: an offset with no message."""
    from confluent_kafka import Producer

    topic = new_topic(1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    producer.commit_transaction(30)
    started = time.monotonic()
    frame = kafka_reader(spark, _options(kafka_bootstrap, topic), provider="python").load()
    batches, _ = run_available_now(frame, str(tmp_path / "ck"))
    assert sorted(r.value for b in batches for r in b) == [f"v{i}".encode() for i in range(5)]
    assert time.monotonic() - started < 25, "the reader waited for a message that never comes"


def test_stream_topology_finds_the_last_message_before_trailing_transaction_markers(
        kafka_bootstrap: str, new_topic: Callable[..., str]) -> None:
    """What an ``available_now`` run waits for: the last *message* of each partition (the
    offsets after it may be control records), nothing for a partition it has read already."""
    from confluent_kafka import Producer

    from debezium_bridge.spark.source import stream_topology

    topic = new_topic(2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": topic})
    producer.init_transactions(30)
    for _ in range(2):  # two transactions: two control records in partition 0
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, value=f"v{i}".encode(), partition=0)
        producer.commit_transaction(30)
    options = {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic,
               "startingOffsets": "earliest"}
    topology, target = stream_topology(options)
    assert topology.partitions == {topic: 2} and topology.ends is None and target is None
    topology, target = stream_topology(options, available_now=True)
    assert target is not None
    end = target[topic]["0"]
    assert end >= 8  # 6 messages, 2 markers
    assert topology.ends == {topic: {0: end - 2}}, "the last message is before the marker"
    topology, _ = stream_topology(options, available_now=True,
                                  committed={topic: {"0": end, "1": 0}})
    assert topology.ends == {}, "everything was read by the committed batches"
