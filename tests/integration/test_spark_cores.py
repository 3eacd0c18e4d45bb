"""``translate`` on local Spark with the native core against the Python reference: the same
Kafka rows (generated streams, :mod:`tests.differential.streams`) through both, batch and
streaming (from the broker, in micro-batches), the same output rows, byte for byte (changes and
dead letters, keys, values, headers, coordinates); a streaming checkpoint carried across a
switch of ``translate.native``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.clients.kafka import create_topics, produce
from debezium_bridge.core import native as native_core
from debezium_bridge.core.windowed import Topology
from debezium_bridge.model.records import RawRecord
from debezium_bridge.spark import KAFKA_SCHEMA, TranslateConfig, kafka_reader, kafka_rows, translate
from debezium_bridge.spark.translate import OUTPUT_SCHEMA, native_translate
from tests.differential.streams import generate

pytestmark = pytest.mark.integration


def _rows(spark: Any, records: list[Any], config: TranslateConfig) -> list[tuple[Any, ...]]:
    df = spark.createDataFrame(kafka_rows(records), KAFKA_SCHEMA).repartition(3)
    rows = translate(df, config).collect()
    return sorted((tuple(r) for r in rows), key=lambda r: (r[0], r[2], r[11], r[12], r[13] or -1))


@pytest.mark.parametrize(("encoding", "seed"), [("json", 1), ("json-schema", 2), ("avro", 3)])
def test_batch_translate_is_the_same_on_both_cores(spark: Any, encoding: str, seed: int,
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)
    stream = generate(4000 + seed, encoding=encoding, n_changes=200)
    avro = None
    if stream.schemas:
        avro = tmp_path / "schemas.json"
        avro.write_text(json.dumps({str(i): s for i, s in stream.schemas.items()}))
    common = {"buckets": 4, "binary_handling_mode": stream.binary_mode,
              "avro_schemas": str(avro) if avro else None}
    python, native = TranslateConfig(native="off", **common), TranslateConfig(native="on", **common)
    frame = spark.createDataFrame(kafka_rows(stream.records[:1]), KAFKA_SCHEMA)
    assert native_translate(frame, native) and not native_translate(frame, python)
    expected = _rows(spark, stream.records, python)
    got = _rows(spark, stream.records, native)
    assert len(got) == len(expected) and sum(r[0] == "change" for r in got) >= 200
    assert got == expected


def test_both_cores_give_the_declared_output_columns(
        spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The native release leaves ``headers`` to the JVM; the result's columns and types
    (nullability included) are still :data:`OUTPUT_SCHEMA`'s."""
    monkeypatch.delenv(native_core.ENV, raising=False)
    declared = spark.createDataFrame([], OUTPUT_SCHEMA).schema
    frame = spark.createDataFrame(kafka_rows([]), KAFKA_SCHEMA)
    assert native_translate(frame, TranslateConfig(native="on"))
    for native in ("on", "off"):
        got = translate(frame, TranslateConfig(native=native)).schema
        assert [(f.name, f.dataType) for f in got] == [(f.name, f.dataType) for f in declared]


def test_jobs_the_native_steps_do_not_cover_run_the_reference(
        spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)
    frame = spark.createDataFrame(kafka_rows([]), KAFKA_SCHEMA)
    for config in (TranslateConfig(outputs=("canonical", "flat")),
                   TranslateConfig(output_topic="x.{table}", output_tombstones=True)):
        assert native_translate(frame, config)
    for config in (TranslateConfig(outputs=("canonical", "ces")),
                   TranslateConfig(outputs=("debezium",)), TranslateConfig(native="off")):
        assert not native_translate(frame, config)
    monkeypatch.setenv(native_core.ENV, "0")
    assert not native_translate(frame, TranslateConfig(native="on"))


def _streamed(spark: Any, bootstrap: str, topic: str, config: TranslateConfig,
              checkpoint: Path, topology: Any = None) -> list[tuple[Any, ...]]:
    from tests.integration.streams import run_available_now

    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
               "startingOffsets": "earliest", "maxOffsetsPerTrigger": "40"}
    frame = kafka_reader(spark, options, provider="python").load()
    batches, _ = run_available_now(translate(frame, config, topology), str(checkpoint))
    rows = [tuple(r) for b in batches for r in b]
    return sorted(rows, key=lambda r: (r[0], r[2], r[11], r[12], r[13] or -1))


def test_streaming_translate_is_the_same_on_both_cores(spark: Any, kafka_bootstrap: str,
                                                       tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A generated stream (replays, key changes across partitions, bad records) read from the
    broker in micro-batches of 40 records: the native streaming steps give the reference's
    rows."""
    monkeypatch.delenv(native_core.ENV, raising=False)
    stream = generate(4100, encoding="json", n_changes=150)
    topic = f"stream.cores.{tmp_path.name}"
    records = [RawRecord(topic, r.partition, None, r.timestamp, r.key, r.value, r.headers)
               for r in stream.records if not r.topic.endswith(".transaction")]
    partitions = {topic: 1 + max(r.partition for r in records)}
    create_topics(kafka_bootstrap, partitions)
    produce(kafka_bootstrap, records)
    topology = Topology(partitions=partitions)  # waiting halves go by the position watermark
    common = {"buckets": 4, "binary_handling_mode": stream.binary_mode,
              "watermark_delay": "1 hour"}
    python, native = TranslateConfig(native="off", **common), TranslateConfig(native="on", **common)
    expected = _streamed(spark, kafka_bootstrap, topic, python, tmp_path / "p", topology)
    got = _streamed(spark, kafka_bootstrap, topic, native, tmp_path / "n", topology)
    assert sum(r[0] == "change" for r in got) >= 100
    assert got == expected


def _restart(spark: Any, bootstrap: str, tmp_path: Path, first: TranslateConfig,
             second: TranslateConfig) -> tuple[list[Any], list[Any]]:
    """Run 1 sees only the delete half of the demo's key change, run 2 (same checkpoint, the
    other config) the create half."""
    from debezium_bridge.testing.simulator import demo
    from tests.integration.streams import run_available_now

    records, expected = demo(partitions=3)
    topic = f"server1.testDB.dbo.customers.switch.{tmp_path.name}"
    c_partition = expected.pk_change_partitions[1]
    create_topics(bootstrap, {topic: 3})
    moved = [RawRecord(topic, r.partition, None, r.timestamp, r.key, r.value, r.headers)
             for r in records]
    produce(bootstrap, [r for r in moved if r.partition != c_partition])
    options = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic,
               "startingOffsets": "earliest"}
    checkpoint = str(tmp_path / "ck")
    batches, _ = run_available_now(
        translate(kafka_reader(spark, options, provider="python").load(), first), checkpoint)
    run1 = [json.loads(r.value) for b in batches for r in b if r.kind == "change"]
    produce(bootstrap, [r for r in moved if r.partition == c_partition])
    batches, _ = run_available_now(
        translate(kafka_reader(spark, options, provider="python").load(), second), checkpoint)
    run2 = [json.loads(r.value) for b in batches for r in b if r.kind == "change"]
    return run1, run2


def test_a_checkpoint_of_the_python_core_is_taken_over_by_the_native_core(
        spark: Any, kafka_bootstrap: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)
    common = {"watermark_delay": "1 hour", "buckets": 4}
    run1, run2 = _restart(spark, kafka_bootstrap, tmp_path,
                          TranslateConfig(native="off", **common),
                          TranslateConfig(native="on", **common))
    assert not any(r["key_changed"] for r in run1)
    merged = [r for r in run2 if r["key_changed"]]
    assert len(merged) == 1 and merged[0]["old_key"] == {"id": 4}, "the waiting half was lost"
    assert not {r["event_id"] for r in run1} & {r["event_id"] for r in run2}, "emitted twice"


def test_a_checkpoint_of_the_native_core_fails_loudly_on_the_python_core(
        spark: Any, kafka_bootstrap: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)
    common = {"watermark_delay": "1 hour", "buckets": 4}
    with pytest.raises(Exception, match=r"translate\.native"):  # the query fails
        _restart(spark, kafka_bootstrap, tmp_path, TranslateConfig(native="on", **common),
                 TranslateConfig(native="off", **common))
