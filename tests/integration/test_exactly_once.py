"""Exactly-once across hard kills: 100,000 generated events over 3 partitions with replays and
primary-key changes; the job's process group is SIGKILLed at random points and restarted from
its checkpoint; the Parquet output, read through Spark, holds every expected logical change
exactly once and nothing else.

The expected changes are derived from the generated envelopes with the standard library's JSON
parser (not with the package's decoder).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.clients.kafka import create_topics, produce
from debezium_bridge.model.records import RawRecord
from debezium_bridge.spark.translate import OUTPUT_SCHEMA
from debezium_bridge.testing.corpus import bulk_corpus

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVENTS = 100_000
KILLS = 3
REPLAY_EVERY = 15_000
REPLAY_COUNT = 40
DELAY_S = 60
HEARTBEAT_EVERY = 2_000


def _beat(topic: str, ts_ms: int) -> RawRecord:
    return RawRecord(topic, 0, None, ts_ms, b"{}", json.dumps({"ts_ms": ts_ms}).encode())


def _traffic(topic: str, heartbeat_topic: str
             ) -> tuple[list[RawRecord], set[tuple[Any, ...]], int]:
    """Records in production order with connector-restart replays and heartbeats (every
    ``HEARTBEAT_EVERY`` records, as ``heartbeat.interval.ms`` would); expected changes; replays."""
    records: list[RawRecord] = []
    by_partition: dict[int, list[RawRecord]] = {0: [], 1: [], 2: []}
    replayed = 0
    commit_ms = 0
    for n, r in enumerate(bulk_corpus(EVENTS, "narrow", encoding="json", seed=7, partitions=3)):
        r = RawRecord(topic, r.partition, None, r.timestamp, r.key, r.value, r.headers)
        records.append(r)
        by_partition[r.partition].append(r)
        if r.value is not None:
            commit_ms = max(commit_ms, json.loads(r.value)["source"]["ts_ms"])
        if n and n % REPLAY_EVERY == 0:  # a restart re-sends the tail of one partition
            tail = by_partition[n // REPLAY_EVERY % 3][-REPLAY_COUNT:]
            records.extend(tail)
            replayed += sum(x.value is not None for x in tail)
        if n % HEARTBEAT_EVERY == 0:
            records.append(_beat(heartbeat_topic, commit_ms))
    records.append(_beat(heartbeat_topic, commit_ms + 2 * DELAY_S * 1000))  # the stream idles
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    seen: set[bytes] = set()
    for r in records:
        if r.topic != topic or r.value is None or r.value in seen:
            continue
        seen.add(r.value)
        doc = json.loads(r.value)
        src = doc["source"]
        groups.setdefault((src["commit_lsn"], src["change_lsn"]), []).append(doc)
    expected: set[tuple[Any, ...]] = set()
    ops = {"c": "insert", "u": "update", "d": "delete"}
    for (commit, change), docs in groups.items():
        kinds = sorted(d["op"] for d in docs)
        if kinds == ["c", "d"]:
            d = next(x for x in docs if x["op"] == "d")
            c = next(x for x in docs if x["op"] == "c")
            expected.add(("update", c["after"]["id"], d["before"]["id"], commit, change))
        else:
            for doc in docs:
                image = doc["after"] if doc["op"] != "d" else doc["before"]
                expected.add((ops[doc["op"]], image["id"], None, commit, change))
    return records, expected, replayed


def _job_config(tmp: Path, bootstrap: str, topic: str, heartbeat_topic: str) -> Path:
    config = {
        "source": {"provider": "python", "options": {
            "subscribe": f"{topic},{heartbeat_topic}", "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "5000", "kafka.bootstrap.servers": bootstrap}},
        "translate": {"watermark_delay": f"{DELAY_S} seconds", "buckets": 16,
                      "heartbeat_watermark": True},
        "sinks": [{"kind": "parquet", "rows": "changes", "path": str(tmp / "out")},
                  {"kind": "parquet", "rows": "dead_letters", "path": str(tmp / "dlq")}],
        "checkpoint": str(tmp / "checkpoint"),
        "trigger": "available_now",
        "master": "local[2]",
        "spark_conf": {"spark.sql.shuffle.partitions": "2"},
    }
    path = tmp / "job.json"
    path.write_text(json.dumps(config))
    return path


def _committed(tmp: Path) -> int:
    commits = tmp / "checkpoint" / "commits"
    return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0


def test_sigkilled_job_restarts_to_exactly_once_output(
        kafka_bootstrap: str, spark: Any, tmp_path: Path) -> None:
    topic, heartbeat_topic = "bench.dbo.narrow.eo", "__debezium-heartbeat.eo"
    records, expected, replayed = _traffic(topic, heartbeat_topic)
    create_topics(kafka_bootstrap, {topic: 3, heartbeat_topic: 1})
    produce(kafka_bootstrap, records, settings={"linger.ms": "20"})
    config = _job_config(tmp_path, kafka_bootstrap, topic, heartbeat_topic)
    command = [sys.executable, "-m", "debezium_bridge.spark.job", "--config", str(config)]
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    rng = random.Random(int(os.environ.get("EXACTLY_ONCE_SEED", "20261121")))
    kills = 0
    log = (tmp_path / "job.log").open("w")
    while kills < KILLS:
        before = _committed(tmp_path)
        job = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
        target = before + rng.randint(1, 4)
        deadline = time.monotonic() + 300
        while _committed(tmp_path) < target and job.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 1.5))  # somewhere inside the next micro-batch
        if job.poll() is not None:
            break  # it finished before we could kill it: no more kill points
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
        kills += 1
    assert kills == KILLS, "the job finished before every kill point was reached"
    final = subprocess.run(command, env=env, stdout=log, stderr=log, timeout=900, check=False)
    log.close()
    assert final.returncode == 0, (tmp_path / "job.log").read_text()[-3000:]

    rows = spark.read.parquet(str(tmp_path / "out")).select("event_id", "value").collect()
    got = []
    for row in rows:
        r = json.loads(row.value)
        got.append((r["op"], r["key"]["id"], (r["old_key"] or {}).get("id"),
                    r["position"]["commit_lsn"], r["position"]["change_lsn"]))
    assert len({row.event_id for row in rows}) == len(rows), "a change was written twice"
    assert len(got) == len(set(got)) == len(expected)
    assert set(got) == expected
    assert replayed > 0 and sum(t[0] == "update" and t[2] is not None for t in expected) > 1000
    # the generated traffic has no bad record: every batch wrote an empty dead-letter batch
    assert (tmp_path / "dlq").is_dir()
    assert spark.read.schema(OUTPUT_SCHEMA).parquet(str(tmp_path / "dlq")).count() == 0
