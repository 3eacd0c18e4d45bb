"""The packaged job through its two entry points: the documented spark-submit command and
``debezium-bridge spark``, on the golden demo case, with Parquet, Kafka and DLQ sinks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.clients.kafka import create_topics, produce
from debezium_bridge.model.records import RawRecord
from debezium_bridge.spark.job import load_job_config
from debezium_bridge.testing.demo import _heartbeat
from debezium_bridge.testing.simulator import demo
from tests.golden.demo_case import assert_demo_counters, assert_demo_dead_letters, assert_demo_feed

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
JOB = str(Path(__file__).parents[2] / "debezium_bridge" / "spark" / "job.py")


def _consume_all(bootstrap: str, topic: str, expected: int) -> list[Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-" + topic,
                         "enable.auto.commit": "false"})
    metadata = consumer.list_topics(topic, timeout=10)
    consumer.assign([TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions])
    out: list[Any] = []
    for _ in range(60):
        out += [m for m in consumer.consume(100, 0.5) if m.error() is None]
        if len(out) >= expected:
            break
    consumer.close()
    return out


@pytest.mark.parametrize("entry_point", ["spark-submit", "debezium-bridge spark"])
def test_job_runs_the_golden_case(entry_point: str, kafka_bootstrap: str, spark: Any,
                                  tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    records, expected = demo(partitions=3)
    topic = f"server1.testDB.dbo.customers{suffix}"
    moved = [RawRecord(topic, r.partition, None, r.timestamp, r.key, r.value, r.headers)
             for r in records]
    heartbeat = _heartbeat(max(r.timestamp or 0 for r in records))
    heartbeat = RawRecord(f"{heartbeat.topic}{suffix}", 0, None, heartbeat.timestamp,
                          heartbeat.key, heartbeat.value)
    create_topics(kafka_bootstrap, {topic: 3, heartbeat.topic: 1})
    produce(kafka_bootstrap, [*moved, heartbeat])
    config = {
        "source": {"provider": "python", "options": {
            "subscribe": f"{topic},{heartbeat.topic}", "startingOffsets": "earliest"}},
        "translate": {"watermark_delay": "5 seconds", "buckets": 4, "heartbeat_watermark": True,
                      "outputs": ["canonical", "flat"], "dlq_topic": f"dlq{suffix}"},
        "sinks": [
            {"kind": "parquet", "rows": "changes", "formats": ["canonical"],
             "path": str(tmp_path / "changes")},
            {"kind": "parquet", "rows": "dead_letters", "path": str(tmp_path / "dlq")},
            {"kind": "kafka", "rows": "all", "formats": ["flat"],
             "options": {"kafka.bootstrap.servers": kafka_bootstrap}},
            {"kind": "console", "rows": "dead_letters"},
            {"kind": "foreach_batch", "function": "tests.integration.hooks:record_batch"},
        ],
        "checkpoint": str(tmp_path / "checkpoint"),
        "trigger": "available_now",
        "master": "local[2]",
        "counters_json": str(tmp_path / "counters.json"),
    }
    config_path = tmp_path / "job.yaml"
    config_path.write_text(json.dumps(config))
    bootstrap = f"kafka.bootstrap.servers={kafka_bootstrap}"
    if entry_point == "spark-submit":
        command = [SPARK_SUBMIT, "--master", "local[2]", JOB, "--config", str(config_path),
                   "-X", bootstrap]
    else:
        command = [str(Path(sys.executable).with_name("debezium-bridge")), "spark", "--config",
                   str(config_path), "-X", bootstrap]
    hook_log = tmp_path / "hook.jsonl"
    env = os.environ | {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                        "PYTHONPATH": str(Path(__file__).parents[2]), "HOOK_LOG": str(hook_log)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600,
                            check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    # spark-submit runs the Python driver with its stderr merged into stdout
    assert "[balanced]" in result.stdout + result.stderr
    # no spark_conf: the state is split over min(buckets 4, local[2]'s 2 cores), not 200
    assert "spark.sql.shuffle.partitions=2 " in result.stdout + result.stderr
    # the console sink printed the dead letter; the hook saw every batch's rows
    assert f"dead_letter\tdlq{suffix}\t" in result.stdout
    seen = [json.loads(line) for line in hook_log.read_text().splitlines()]
    key_changes = sum(c.old_key is not None for c in expected.changes)
    # canonical: one row per change; flat: one per change, two for a key change (SPEC §5.1)
    flat_rows = len(expected.changes) + key_changes
    assert sum(b["changes"] for b in seen) == len(expected.changes) + flat_rows
    assert sum(b["dead_letters"] for b in seen) == expected.corrupt

    changes = spark.read.parquet(str(tmp_path / "changes")).collect()
    assert_demo_feed([json.loads(r.value) for r in changes], expected)
    dead = spark.read.parquet(str(tmp_path / "dlq")).collect()
    assert_demo_dead_letters(
        [{h.key: h.value.decode() for h in r.headers if h.key.startswith("__connect")}
         for r in dead], expected, topic=topic)
    assert dead[0].value == next(r.value for r in records if r.partition == 0 and r.offset == 3)
    assert_demo_counters(json.loads((tmp_path / "counters.json").read_text()), expected,
                         extra_side_records=1)

    flat = _consume_all(kafka_bootstrap, f"{topic}.flat", 10)
    ops = sorted((json.loads(m.value())["id"], json.loads(m.value())["__op"]) for m in flat)
    key_change = next(c for c in expected.changes if c.old_key is not None)
    # the flat view splits the key change: delete of the old key, upsert of the new one
    assert (key_change.old_key["id"], "delete") in ops
    assert (key_change.key["id"], "update") in ops
    ids = [dict(m.headers())["debezium_bridge.event_id"] for m in flat]
    assert len(ids) == len(set(ids)) == len(flat)
    dlq = _consume_all(kafka_bootstrap, f"dlq{suffix}", 1)
    assert len(dlq) == 1 and dict(dlq[0].headers())["__connect.errors.offset"] == b"3"


def test_job_config_rejects_unknown_keys_and_masks_secrets(tmp_path: Path) -> None:
    from debezium_bridge.errors import ConfigError

    path = tmp_path / "job.yaml"
    path.write_text(json.dumps({
        "source": {"options": {"subscribe": "t", "kafka.bootstrap.servers": "h:9092",
                               "kafka.sasl.password": "hunter2"}},
        "sinks": [{"kind": "console"}], "checkpoint": "/tmp/x"}))
    config = load_job_config(str(path))
    assert config.masked()["source"]["options"]["kafka.sasl.password"] == "******"
    assert "hunter2" not in json.dumps(config.masked())
    path.write_text(json.dumps({"source": {"options": {"subscribe": "t",
                                                       "kafka.bootstrap.servers": "h"}},
                                "sinks": [{"kind": "console"}],
                                "checkpoint": "c", "trigerr": "once"}))
    with pytest.raises(ConfigError, match="trigerr"):
        load_job_config(str(path))
    for options, message in (({"startingOffset": "earliest"}, "unknown source option"),
                             ({"maxOffsetsPerTrigger": "0"}, "positive integer"),
                             ({"failOnDataLoss": "false"}, "always fails on data loss")):
        path.write_text(json.dumps({
            "source": {"provider": "python", "options": {
                "subscribe": "t", "kafka.bootstrap.servers": "h", **options}},
            "sinks": [{"kind": "console"}], "checkpoint": "c"}))
        with pytest.raises(ConfigError, match=message):
            load_job_config(str(path))
    path.write_text(json.dumps({
        "source": {"options": {"subscribe": "t", "kafka.bootstrap.servers": "h",
                               "kafka.ssl.key.pem": "PRIVATE"}},
        "translate": {"schema_registry": "https://user:pw@sr:8081"},
        "spark_conf": {"spark.hadoop.fs.s3a.secret.key": "S3SECRET"},
        "sinks": [{"kind": "console"}], "checkpoint": "c"}))
    logged = json.dumps(load_job_config(str(path)).masked())
    for secret in ("PRIVATE", "pw@", "S3SECRET"):
        assert secret not in logged
    assert "https://******@sr:8081" in logged


def test_a_new_checkpoint_does_not_overwrite_another_checkpoints_batches(tmp_path: Path) -> None:
    from debezium_bridge.errors import ConfigError
    from debezium_bridge.spark.job import JobConfig, SourceConfig, _check_sink_paths
    from debezium_bridge.spark.sinks import SinkConfig

    out = tmp_path / "out"
    (out / "batch_id=0").mkdir(parents=True)
    config = JobConfig(
        source=SourceConfig(options={"subscribe": "t", "kafka.bootstrap.servers": "h"}),
        sinks=[SinkConfig(kind="parquet", path=str(out))], checkpoint=str(tmp_path / "ck"))
    with pytest.raises(ConfigError, match="another checkpoint"):
        _check_sink_paths(config)
    (tmp_path / "ck" / "commits").mkdir(parents=True)
    (tmp_path / "ck" / "commits" / "0").write_text("v1")
    _check_sink_paths(config)  # the checkpoint that wrote batch 0 may continue
