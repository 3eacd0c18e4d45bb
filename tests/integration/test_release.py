"""When the Spark job releases the deletes and creates that wait for a key-change partner, on
the real broker and local Spark, without heartbeats: the README's job configuration over the
demo traffic with ``Trigger.AvailableNow`` (end of input), the position watermark across
partitions when halves arrive in different micro-batches, transaction END records, and replays
that arrive after their group was released.

Expectations come from the simulator's inputs (``DemoExpectation``) or from the produced records
themselves, never from the job's output.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from debezium_bridge.clients.kafka import create_topics, produce
from debezium_bridge.model.records import RawRecord
from debezium_bridge.spark.job import load_job_config, run
from debezium_bridge.spark.translate import NO_DATA_BATCHES
from debezium_bridge.testing.simulator import demo
from tests.golden.demo_case import assert_demo_counters, assert_demo_feed

pytestmark = pytest.mark.integration

README = Path(__file__).parents[2] / "README.md"


def readme_job_config() -> dict[str, Any]:
    """The ``job.yaml`` block of the README's Spark section, as documented."""
    text = README.read_text()
    block = re.search(r"```yaml\n# job.yaml\n(.*?)```", text, re.S)
    assert block is not None, "the README's job.yaml block"
    config: dict[str, Any] = yaml.safe_load(block.group(1))
    return config


def _moved(records: list[RawRecord], prefix: str) -> list[RawRecord]:
    """The demo records under another topic prefix (``server1`` -> ``prefix``)."""
    return [RawRecord(prefix + r.topic.removeprefix("server1"), r.partition, None, r.timestamp,
                      r.key, r.value, r.headers) for r in records]


def _create(bootstrap: str, records: list[RawRecord]) -> None:
    topics: dict[str, int] = {}
    for r in records:
        topics[r.topic] = max(topics.get(r.topic, 0), r.partition + 1)
    create_topics(bootstrap, topics)


def _parquet_values(spark: Any, path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(r.value) for r in spark.read.parquet(str(path)).collect()]


def test_readme_config_with_available_now_outputs_every_change_without_heartbeats(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    prefix = f"readme{uuid.uuid4().hex[:8]}"
    records, expected = demo(partitions=3)
    moved = _moved(records, prefix)
    _create(kafka_bootstrap, moved)
    produce(kafka_bootstrap, moved)
    config = readme_job_config()
    options = config["source"]["options"]
    assert options["subscribePattern"].startswith("server1\\.")
    options["subscribePattern"] = prefix + options["subscribePattern"].removeprefix("server1")
    options["kafka.bootstrap.servers"] = kafka_bootstrap
    changes = tmp_path / "changes"
    for sink in config["sinks"]:
        if sink["kind"] == "parquet":
            sink["path"] = str(changes if sink["rows"] == "changes" else tmp_path / sink["rows"])
        if sink["kind"] == "kafka":
            sink["options"]["kafka.bootstrap.servers"] = kafka_bootstrap
    config["checkpoint"] = str(tmp_path / "checkpoint")
    config["trigger"] = "available_now"
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(config))

    before = spark.conf.get(NO_DATA_BATCHES, None)
    counters = run(load_job_config(str(path)), spark)
    print(counters.summary())

    canonical = [v for v in _parquet_values(spark, changes) if "format_version" in v]
    assert_demo_feed(canonical, expected)
    assert_demo_counters(counters.as_dict(), expected)  # pending 0: every change is out
    # The last batch with data released everything, and no batch without data followed it
    # (Spark runs one after a batch that moved the watermark unless NO_DATA_BATCHES is off):
    # every batch in the checkpoint's offset log read something new. The session's own
    # setting is back once the run is over.
    log = tmp_path / "checkpoint" / "offsets"
    read = [(log / name).read_text().splitlines()[2:]
            for name in sorted((n for n in os.listdir(log) if n.isdigit()), key=int)]
    assert read and all(a != b for a, b in itertools.pairwise(read)), read
    assert spark.conf.get(NO_DATA_BATCHES, None) == before


def _data_events(records: list[RawRecord]) -> list[tuple[RawRecord, dict[str, Any]]]:
    """The data records with their envelope, parsed with the standard library (the corrupt
    record and side records left out)."""
    out = []
    for r in records:
        try:
            doc = json.loads(r.value or b"null")
        except ValueError:
            continue
        if isinstance(doc, dict) and "payload" in doc:
            doc = doc["payload"]
        if isinstance(doc, dict) and doc.get("op") in ("c", "u", "d", "r"):
            out.append((r, doc))
    return out


def _lsn(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


def test_halves_in_different_micro_batches_pair_and_the_position_watermark_releases_the_rest(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    """Four records per micro-batch, partitions known, no end, no heartbeat, a one-hour
    watermark delay: what waits is released as soon as all three partitions passed it."""
    from debezium_bridge.core.windowed import Topology
    from debezium_bridge.spark import TranslateConfig, kafka_reader, translate
    from debezium_bridge.spark.job import RunCounters
    from tests.integration.streams import run_available_now
    from tests.integration.test_spark_translate import _batch_reading

    prefix = f"position{uuid.uuid4().hex[:8]}"
    records, expected = demo(partitions=3)
    moved = _moved(records, prefix)
    topic = moved[0].topic
    _create(kafka_bootstrap, moved)
    produce(kafka_bootstrap, moved)
    options = {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic,
               "startingOffsets": "earliest", "maxOffsetsPerTrigger": "4"}
    config = TranslateConfig(watermark_delay="1 hour", buckets=4)
    frame = translate(kafka_reader(spark, options, provider="python").load(), config,
                      Topology(partitions={topic: 3}))
    batches, progress = run_available_now(frame, str(tmp_path / "ck"))

    # independent expectation: per partition the highest commit LSN it holds; the lowest of
    # those is the position watermark at the end; inserts and deletes at or above it wait
    events = _data_events(moved)
    highest: dict[int, bytes] = {}
    for r, doc in events:
        commit = _lsn(doc["source"]["commit_lsn"])
        highest[r.partition] = max(highest.get(r.partition, b""), commit)
    assert sorted(highest) == [0, 1, 2]
    watermark = min(highest.values())
    key_change = next(c for c in expected.changes if c.old_key is not None)
    waiting = [c for c in expected.changes if c.op in ("insert", "delete")
               and _lsn(c.commit_lsn or "") >= watermark]
    rows = [r for b in batches for r in b if r.kind == "change"]
    got = [json.loads(r.value) for r in rows]
    released = [c for c in expected.changes if c not in waiting]
    assert waiting and len(released) < len(expected.changes)
    assert_demo_feed(got, msgspec.structs.replace(expected, changes=tuple(released)))
    counters = RunCounters()
    for p in progress:
        counters.add(p)
    position_released = sum(1 for c in released if c.op in ("insert", "delete"))
    assert counters.values["released_by_position"] == position_released > 0
    assert counters.values["pending"] == len(waiting)
    assert counters.values["late"] == 0 and counters.balanced
    merged = next(x for x in got if x["key_changed"])
    assert merged["old_key"] == key_change.old_key
    read_in = {_batch_reading(progress, x["topic"], x["partition"], x["offset"])
               for x in merged["lineage"]}
    assert len(read_in) == 2, "the halves were read in different micro-batches"
    assert all(p["stateOperators"][0]["numRowsTotal"] <= 4 for p in progress)


def test_a_replay_that_arrives_after_its_change_was_released_is_dropped(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    """Run 1 releases an insert (a heartbeat moves the watermark past it); the connector then
    restarts and re-sends it: run 2 must not emit it again."""
    from debezium_bridge.spark import TranslateConfig, kafka_reader, translate
    from debezium_bridge.spark.job import RunCounters
    from debezium_bridge.testing.demo import _heartbeat
    from tests.integration.streams import run_available_now

    prefix = f"replay{uuid.uuid4().hex[:8]}"
    records, _ = demo(partitions=3)
    moved = _moved(records, prefix)
    topic = moved[0].topic
    events = _data_events(moved)
    inserts = [r for r, doc in events if doc["op"] == "c"]
    original = inserts[0]
    same_partition = [r for r, _ in events if r.partition == original.partition]
    first = same_partition[: same_partition.index(original) + 1]
    beat = _heartbeat(max(r.timestamp or 0 for r in first))
    beat = RawRecord(beat.topic + prefix, 0, None, beat.timestamp, beat.key, beat.value)
    _create(kafka_bootstrap, [*first, beat])
    produce(kafka_bootstrap, [*first, beat])
    options = {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": f"{topic},{beat.topic}",
               "startingOffsets": "earliest"}
    config = TranslateConfig(watermark_delay="5 seconds", buckets=4, heartbeat_watermark=True)

    def run_once() -> tuple[list[dict[str, Any]], RunCounters]:
        frame = translate(kafka_reader(spark, options, provider="python").load(), config)
        batches, progress = run_available_now(frame, str(tmp_path / "ck"))
        counters = RunCounters()
        for p in progress:
            counters.add(p)
        return [json.loads(r.value) for b in batches for r in b if r.kind == "change"], counters

    out1, _ = run_once()
    assert [c["op"] for c in out1 if c["op"] != "read"] == ["insert"]
    produce(kafka_bootstrap, [original])  # the restarted connector re-sends it
    out2, counters = run_once()
    assert out2 == [], "the replay came out again"
    assert counters.values["duplicates"] == 1 and counters.values["late"] == 0


def test_transaction_end_records_release_a_transaction_without_waiting_for_partitions(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    """Debezium's transaction metadata (``<prefix>.transaction``), no partitions known, no
    heartbeat, a one-hour watermark delay: every transaction comes out once its END and all
    its events were read."""
    from debezium_bridge.spark import TranslateConfig, kafka_reader, translate
    from debezium_bridge.spark.job import RunCounters
    from tests.integration.streams import run_available_now

    prefix = f"txmeta{uuid.uuid4().hex[:8]}"
    records, expected = demo(partitions=3, transaction_metadata=True)
    moved = _moved(records, prefix)
    assert any(r.topic == f"{prefix}.transaction" for r in moved)
    _create(kafka_bootstrap, moved)
    produce(kafka_bootstrap, moved)
    options = {"kafka.bootstrap.servers": kafka_bootstrap,
               "subscribePattern": re.escape(prefix) + r"\..*", "startingOffsets": "earliest"}
    config = TranslateConfig(watermark_delay="1 hour", buckets=4)
    frame = translate(kafka_reader(spark, options, provider="python").load(), config)
    batches, progress = run_available_now(frame, str(tmp_path / "ck"))
    rows = [r for b in batches for r in b if r.kind == "change"]
    assert_demo_feed([json.loads(r.value) for r in rows], expected)
    counters = RunCounters()
    for p in progress:
        counters.add(p)
    assert_demo_counters(counters.as_dict(), expected)
    waited = sum(1 for c in expected.changes if c.op in ("insert", "delete"))
    assert counters.values["released_by_transaction"] == waited


def test_a_second_available_now_run_resumes_where_the_checkpoint_ended(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    """Run 1 reads the traffic up to the key change, run 2 the rest (one partition has no new
    records): together every change, once, the key change merged, nothing pending."""
    from debezium_bridge.spark.job import committed_offsets

    prefix = f"resume{uuid.uuid4().hex[:8]}"
    records, expected = demo(partitions=3)
    moved = _moved(records, prefix)
    topic = moved[0].topic
    key_change = next(c for c in expected.changes if c.old_key is not None)
    create = next(r for r, doc in _data_events(moved)
                  if doc["op"] == "c" and doc["after"]["id"] == key_change.key["id"])
    split = moved.index(create)  # the create half is produced first, then the delete half
    _create(kafka_bootstrap, moved)
    config = {
        "source": {"provider": "python", "options": {
            "subscribe": topic, "startingOffsets": "earliest",
            "kafka.bootstrap.servers": kafka_bootstrap}},
        "translate": {"watermark_delay": "1 hour", "buckets": 4},
        "sinks": [{"kind": "parquet", "rows": "changes", "path": str(tmp_path / "changes")}],
        "checkpoint": str(tmp_path / "checkpoint"), "trigger": "available_now"}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(config))
    produce(kafka_bootstrap, moved[:split])
    first = run(load_job_config(str(path)), spark)
    assert first.values["pending"] == 0
    produced = {p: sum(1 for r in moved[:split] if r.partition == p) for p in range(3)}
    assert committed_offsets(spark, config["checkpoint"]) == {
        topic: {str(p): n for p, n in produced.items()}}
    rest = moved[split:]
    assert {r.partition for r in rest} != {0, 1, 2}, "a partition without new records"
    produce(kafka_bootstrap, rest)
    second = run(load_job_config(str(path)), spark)
    assert second.values["pending"] == 0 and second.values["late"] == 0
    assert_demo_feed(_parquet_values(spark, tmp_path / "changes"), expected)
    total = {k: first.values[k] + second.values[k] for k in first.values}
    assert total["changes_out"] == len(expected.changes)
    assert total["duplicates"] == expected.duplicates
