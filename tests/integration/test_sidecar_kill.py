"""Exactly-once across hard kills: the sidecar is SIGKILLed at random points while it translates
100,000 events (two tables, 3 partitions each, transaction metadata, heartbeats, key changes of
both kinds with their halves in different partitions, connector restarts that re-send a
partition's tail, corrupt records), restarted each time; the output topics read end to end hold
every expected logical change exactly once, with the right content, and nothing else; the DLQ
holds each corrupt record once; the counters, cumulative over the restarts, add up.

The traffic is produced chunk by chunk, one chunk before each life, so every life has work;
kills land anywhere: during recovery, mid-batch, between the output flush and the checkpoint
(a test-only hook announces that point and sleeps there), between the checkpoint and the offset
commit, and while idle.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.clients.kafka import create_topics, produce
from debezium_bridge.testing.simulator import CUSTOMERS
from tests.integration.sidecar_support import (
    Sidecar,
    group_settings,
    headers_of,
    read_all,
    table,
    table_schemas,
    topic_of,
    traffic,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EVENTS = 100_000
KILLS = 21
DLQ = "sidecar-kill.dlq"
PREFIX = "killtest"


def _kill_point(rng: random.Random) -> tuple[str, str | None]:
    """How the next life ends: (mode, hooks)."""
    roll = rng.random()
    if roll < 0.35:
        return "after-produce", "after-produce=0.3"
    if roll < 0.5:
        return "after-checkpoint", "after-checkpoint=0.3"
    if roll < 0.6:
        return "recovering", None
    return "random", None


def test_sidecar_killed_at_random_points_writes_every_change_exactly_once(
        kafka_bootstrap: str, kafka_embedded: bool, tmp_path: Path) -> None:
    started = time.monotonic()
    seed = int(os.environ.get("SIDECAR_KILL_SEED", "20261122"))
    rng = random.Random(seed)
    tables = [CUSTOMERS, table("orders")]
    data = traffic(tables, EVENTS, chunks=KILLS + 1, seed=seed, prefix=PREFIX)
    assert len(data.chunks) >= KILLS + 1
    create_topics(kafka_bootstrap, data.topics)
    config = write_config(
        tmp_path / "sidecar.json", bootstrap_servers=kafka_bootstrap, group_id="kill-test",
        subscribe=sorted(data.topics), dlq_topic=DLQ,
        table_schemas=str(table_schemas(tables, tmp_path / "schemas.json", PREFIX)),
        idle_timeout_ms=1500, commit_interval_ms=1000, batch_size=1000,
        counters_json=str(tmp_path / "counters.json"), consumer=group_settings(kafka_embedded))
    delivered = []
    kills: Counter[str] = Counter()
    for life in range(KILLS):
        delivered += produce(kafka_bootstrap, data.chunks[life], settings={"linger.ms": "20"})
        mode, hooks = _kill_point(rng)
        sidecar = Sidecar(config, tmp_path / f"life-{life}.log", hooks)
        if mode == "recovering":
            assert sidecar.wait_for("resuming", timeout=60), sidecar.text()[-3000:]
        elif mode == "random":
            assert sidecar.wait_for("adopted", timeout=60), sidecar.text()[-3000:]
            time.sleep(rng.uniform(0.05, 3.0))
        else:  # the n-th checkpoint of this life, or idle when the chunk took fewer
            assert sidecar.wait_for("adopted", timeout=60), sidecar.text()[-3000:]
            # (the first is the adoption's checkpoint; later ones follow written output)
            if sidecar.wait_for(f"test hook: {mode}", count=rng.randint(2, 3), timeout=20):
                time.sleep(0.05)  # inside the hook's sleep
            else:
                mode = "idle"
        assert sidecar.process.poll() is None, sidecar.text()[-3000:]
        sidecar.kill()
        kills[mode] += 1
    for chunk in data.chunks[KILLS:]:
        delivered += produce(kafka_bootstrap, chunk, settings={"linger.ms": "20"})
    final = Sidecar(config, tmp_path / "final.log")
    outputs = [f"{topic_of(t, PREFIX)}.canonical" for t in tables]
    deadline = time.monotonic() + 120
    while len(read_all(kafka_bootstrap, outputs)) < len(data.expected):
        assert time.monotonic() < deadline, final.text()[-3000:]
        assert final.process.poll() is None, final.text()[-3000:]
        time.sleep(1)
    time.sleep(1.5)  # a last checkpoint of the released state
    assert final.terminate(timeout=30) == 0, final.text()[-3000:]

    # every expected change exactly once, with its content, and nothing else
    messages = read_all(kafka_bootstrap, outputs)
    ids = [headers_of(m)["debezium_bridge.event_id"] for m in messages]
    assert len(ids) == len(set(ids)), "a record was written twice"
    got: dict[Any, Any] = {}
    for m in messages:
        r = json.loads(m.value())
        old = r["old_key"]["id"] if r["old_key"] else None
        key = (m.topic().removesuffix(".canonical"), r["op"], r["key"]["id"], old,
               r["position"]["commit_lsn"], r["position"]["change_lsn"])
        assert key not in got, f"{key} written twice"
        got[key] = (r["before"], r["after"])
    missing = set(data.expected) - set(got)
    extra = set(got) - set(data.expected)
    assert not missing and not extra, (len(missing), sorted(missing)[:3], len(extra),
                                       sorted(extra)[:3])
    wrong = [k for k, images in got.items() if images != data.expected[k]]
    assert not wrong, (wrong[:2], [got[k] for k in wrong[:2]], [data.expected[k]
                                                               for k in wrong[:2]])
    merged = Counter(k[0] for k in got if k[3] is not None)
    assert merged == data.key_changes and sum(merged.values()) > 1000

    # the DLQ: each corrupt record once, with its coordinates
    by_value = {(r.topic, r.key, r.value) for r in data.corrupt}
    corrupt_at = {(r.topic, r.partition, r.offset) for r in delivered
                  if (r.topic, r.key, r.value) in by_value}
    dead = read_all(kafka_bootstrap, [DLQ])
    coordinates = [(h["__connect.errors.topic"], int(h["__connect.errors.partition"]),
                    int(h["__connect.errors.offset"])) for h in map(headers_of, dead)]
    assert len(coordinates) == len(set(coordinates)) == len(corrupt_at) > 0
    assert set(coordinates) == corrupt_at

    # counters, cumulative over every restart
    counters = json.loads((tmp_path / "counters.json").read_text())["topics"]
    for spec in tables:
        topic = topic_of(spec, PREFIX)
        c = counters[topic]
        assert c["balanced"] and c["pending"] == 0, c
        assert c["records_in"] == data.records[topic], (c, data.records[topic])
        assert c["duplicates"] == data.duplicates[topic] > 0
        assert c["tombstones"] == data.tombstones[topic]
        assert c["dead_letters"] == sum(r.topic == topic for r in data.corrupt)
        assert c["merged"] == data.key_changes[topic]
        assert c["changes_out"] == data.changes(topic)
    for side in (data.transaction_topic, data.heartbeat_topic):
        assert counters[side]["records_in"] == counters[side]["side_records"] \
            == data.records[side] > 0
    print(f"kills: {dict(kills)}")
    assert sum(kills.values()) == KILLS and kills["after-produce"] >= 3, kills
    # the recovery path was taken: records written after a checkpoint were not written again
    logs = " ".join(p.read_text() for p in tmp_path.glob("*.log"))
    not_rewritten = sum(int(line.split("; ")[1].split()[0])
                        for line in logs.splitlines() if "recovery complete;" in line)
    print(f"records found already written after a kill and not written again: {not_rewritten}")
    assert not_rewritten > 0 and "is written although" not in logs
    assert time.monotonic() - started < 480
