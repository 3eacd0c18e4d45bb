"""Two sidecars in one group: whole tables per instance (the halves of a key change always meet
in one translator), a graceful handover when the second instance joins, and a takeover when an
instance is SIGKILLed mid-stream; every key change still merged, every change exactly once,
counters that add up over both instances."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest

from debezium_bridge.clients.kafka import create_topics, produce
from debezium_bridge.partitioner import partition_for
from tests.integration.sidecar_support import (
    Sidecar,
    group_settings,
    read_all,
    table,
    table_schemas,
    topic_of,
    traffic,
    write_config,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SLOTS = 12
PREFIX = "pairtest"


def _tables() -> list:
    """Four tables, two in each half of the slots (the group gives each of two instances one
    half: the range assignor over one topic)."""
    low, high = [], []
    for n in range(200):
        spec = table(f"t{n}")
        slot = partition_for(topic_of(spec, PREFIX).encode(), SLOTS)
        (low if slot < SLOTS // 2 else high).append(spec)
    return low[:2] + high[:2]


def _owned(sidecar: Sidecar, tables: list) -> set[str]:
    text = sidecar.text()
    return {topic_of(t, PREFIX) for t in tables if f"{topic_of(t, PREFIX)}: resuming" in text
            or f"{topic_of(t, PREFIX)}: no checkpoint" in text}


def test_two_instances_share_tables_and_one_takes_over_after_a_kill(
        kafka_bootstrap: str, kafka_embedded: bool, tmp_path: Path) -> None:
    tables = _tables()
    data = traffic(tables, 30_000, chunks=3, seed=11, prefix=PREFIX)
    create_topics(kafka_bootstrap, data.topics)
    common = dict(bootstrap_servers=kafka_bootstrap, group_id="two-instances",
                  subscribe=sorted(data.topics), slots=SLOTS, dlq_topic="two-instances.dlq",
                  table_schemas=str(table_schemas(tables, tmp_path / "schemas.json", PREFIX)),
                  idle_timeout_ms=1500, commit_interval_ms=300,
                  consumer=group_settings(kafka_embedded))
    a_config = write_config(tmp_path / "a.json", instance_id="a", **common)
    b_config = write_config(tmp_path / "b.json", instance_id="b",
                            counters_json=str(tmp_path / "b-counters.json"), **common)
    produce(kafka_bootstrap, data.chunks[0], settings={"linger.ms": "20"})
    a = Sidecar(a_config, tmp_path / "a.log")
    assert a.wait_for("adopted", timeout=60), a.text()[-2000:]
    assert _owned(a, tables) == {topic_of(t, PREFIX) for t in tables}  # alone, it has every table
    time.sleep(0.5)
    b = Sidecar(b_config, tmp_path / "b.log")
    try:
        assert b.wait_for("adopted", timeout=60), b.text()[-2000:]
        assert a.wait_for("slots revoked", timeout=30) and a.wait_for("handed over")
        produce(kafka_bootstrap, data.chunks[1], settings={"linger.ms": "20"})
        mine = _owned(b, tables)
        assert 0 < len(mine) < len(tables), mine  # each instance has whole tables
        time.sleep(0.3)  # mid-stream
        a.kill()
        produce(kafka_bootstrap, data.chunks[2], settings={"linger.ms": "20"})
        assert b.wait_for("adopted", count=2, timeout=60), b.text()[-3000:]
        assert _owned(b, tables) == {topic_of(t, PREFIX) for t in tables}
        outputs = [f"{topic_of(t, PREFIX)}.canonical" for t in tables]
        deadline = time.monotonic() + 120
        while len(read_all(kafka_bootstrap, outputs)) < len(data.expected):
            assert time.monotonic() < deadline and b.process.poll() is None, b.text()[-3000:]
            time.sleep(0.5)
        time.sleep(1)
        assert b.terminate(30) == 0, b.text()[-3000:]
    finally:
        for sidecar in (a, b):
            if sidecar.process.poll() is None:
                sidecar.kill()
    got: Counter = Counter()
    for m in read_all(kafka_bootstrap, outputs):
        r = json.loads(m.value())
        got[(m.topic().removesuffix(".canonical"), r["op"], r["key"]["id"],
             (r["old_key"] or {}).get("id"), r["position"]["commit_lsn"],
             r["position"]["change_lsn"])] += 1
    assert set(got) == set(data.expected) and set(got.values()) == {1}
    assert "is written although" not in b.text()  # no change released in another shape
    merged = Counter(k[0] for k in got if k[3] is not None)
    assert merged == data.key_changes and all(merged[topic_of(t, PREFIX)] > 50 for t in tables)
    dead = read_all(kafka_bootstrap, ["two-instances.dlq"])
    assert len(dead) == len(data.corrupt)
    counters = json.loads((tmp_path / "b-counters.json").read_text())["topics"]
    for spec in tables:
        c = counters[topic_of(spec, PREFIX)]
        assert c["balanced"] and c["pending"] == 0
        assert c["late"] == 0  # no partition was skipped while its records were on their way
        assert c["records_in"] == data.records[topic_of(spec, PREFIX)]
        assert c["merged"] == data.key_changes[topic_of(spec, PREFIX)]
