"""``translate`` on local Spark: batch, and streaming across micro-batches from the real broker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from debezium_bridge.clients.kafka import create_topics, produce
from debezium_bridge.core.translator import Translator
from debezium_bridge.errors import ConfigError
from debezium_bridge.formats.canonical import to_json
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.records import RawRecord
from debezium_bridge.spark import KAFKA_SCHEMA, TranslateConfig, kafka_reader, kafka_rows, translate
from debezium_bridge.spark.job import RunCounters
from debezium_bridge.testing.demo import _heartbeat
from debezium_bridge.testing.simulator import demo
from tests.golden.demo_case import assert_demo_counters, assert_demo_dead_letters, assert_demo_feed
from tests.integration.streams import run_available_now

pytestmark = pytest.mark.integration


def _dead_headers(rows: list[Any]) -> list[dict[str, str]]:
    return [{h.key: h.value.decode() for h in r.headers if h.key.startswith("__connect")}
            for r in rows if r.kind == "dead_letter"]


def test_batch_translate_matches_the_golden_case_and_the_core(spark: Any) -> None:
    records, expected = demo()
    rows = translate(spark.createDataFrame(kafka_rows(records), KAFKA_SCHEMA)).collect()
    changes = [r for r in rows if r.kind == "change"]
    assert_demo_feed([json.loads(r.value) for r in changes], expected)
    assert_demo_dead_letters(_dead_headers(rows), expected)
    core = [x for x in Translator().translate(records) if isinstance(x, ChangeRecord)]
    assert sorted(r.event_id for r in changes) == sorted(c.event_id for c in core)
    assert all(r.topic == "server1.testDB.dbo.customers.canonical" for r in changes)
    assert {r.format for r in changes} == {"canonical"}


def test_a_frame_without_headers_translates_as_one_with_none(spark: Any) -> None:
    """Spark's ``kafka`` format leaves ``headers`` out unless ``includeHeaders=true``."""
    records, _ = demo()
    bare = [msgspec.structs.replace(r, headers=()) for r in records]
    frame = spark.createDataFrame(kafka_rows(bare), KAFKA_SCHEMA)

    def output(df: Any) -> list[tuple[Any, ...]]:
        return sorted((r.kind, r.event_id or "", r.value or b"") for r in translate(df).collect())

    assert output(frame.drop("headers")) == output(frame)
    with pytest.raises(ConfigError, match="missing: offset"):
        translate(frame.drop("offset"))


@pytest.mark.parametrize("native", ["on", "off"])
def test_integers_beyond_64_bits_pass_through(spark: Any, native: str) -> None:
    """Schema-less JSON carries integers of any size (RFC 8259 §6 leaves the range to the
    reader; a ``numeric(38)`` column with ``decimal.format=NUMERIC``): ``translate`` passes them
    through as the core does, on both cores, through the state between stages (msgpack, which
    holds 64 bits) too."""
    records, _ = demo(encoding="json")
    insert = next(r for r in records if r.value and b'"op":"c"' in r.value)
    big = msgspec.structs.replace(insert, value=insert.value.replace(
        b'"after":{', b'"after":{"big":99999999999999999999,"small":-1180591620717411303424,', 1))
    rows = translate(spark.createDataFrame(kafka_rows([big]), KAFKA_SCHEMA),
                     TranslateConfig(native=native)).collect()  # type: ignore[arg-type]
    (change,) = [json.loads(r.value) for r in rows if r.kind == "change"]
    assert change["after"]["big"] == 99999999999999999999
    assert change["after"]["small"] == -(2**70)


def test_batch_translate_views(spark: Any) -> None:
    records, _ = demo()
    config = TranslateConfig(outputs=("flat", "exploded"))
    rows = translate(spark.createDataFrame(kafka_rows(records), KAFKA_SCHEMA), config).collect()
    flat = [json.loads(r.value) for r in rows if r.format == "flat"]
    # the key change becomes delete(old key) + upsert(new key) in the apply view
    key_change = [f for f in flat if f["__op"] == "delete" and f["id"] == 4]
    assert len(key_change) == 1 and key_change[0]["__deleted"] is True
    exploded = [json.loads(r.value) for r in rows if r.format == "exploded"]
    assert sum(e["_change_type"] == "update_preimage" for e in exploded) == 3
    ids = [r.event_id for r in rows if r.kind == "change"]
    assert len(ids) == len(set(ids)), "every output row has its own deterministic id"


def _create_topics(bootstrap: str, records: list[RawRecord]) -> None:
    topics: dict[str, int] = {}
    for r in records:
        topics[r.topic] = max(topics.get(r.topic, 0), r.partition + 1)
    create_topics(bootstrap, topics)


def test_streaming_pairs_and_dedupes_across_micro_batches(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    """Four records per micro-batch; then a heartbeat moves the watermark past everything."""
    records, expected = demo(partitions=3)
    topic = "server1.testDB.dbo.customers"
    moved = [RawRecord(topic + ".batches", r.partition, None, r.timestamp, r.key, r.value,
                       r.headers) for r in records]
    heartbeat = _heartbeat(max(r.timestamp or 0 for r in records))
    _create_topics(kafka_bootstrap, [*moved, heartbeat])
    produce(kafka_bootstrap, moved)
    options = {"kafka.bootstrap.servers": kafka_bootstrap,
               "subscribe": f"{topic}.batches,{heartbeat.topic}",
               "startingOffsets": "earliest", "maxOffsetsPerTrigger": "4"}
    config = TranslateConfig(watermark_delay="5 seconds", buckets=4, heartbeat_watermark=True,
                             outputs=("canonical", "ces"))
    checkpoint = str(tmp_path / "ck")
    batches, progress = run_available_now(
        translate(kafka_reader(spark, options, provider="python").load(), config), checkpoint)
    assert len(batches) >= 4
    produce(kafka_bootstrap, [heartbeat])
    more, more_progress = run_available_now(
        translate(kafka_reader(spark, options, provider="python").load(), config), checkpoint)
    rows = [r for b in batches + more for r in b]
    changes = [r for r in rows if r.kind == "change" and r.format == "canonical"]
    assert_demo_feed([json.loads(r.value) for r in changes], expected)
    # events that waited in state (inserts, the delete) keep their table's exact SQL types
    ces = [json.loads(json.loads(r.value)["data"]) for r in rows if r.format == "ces"]
    types = {tuple((c["name"], c["type"]) for c in d["eventsource"]["cols"]) for d in ces}
    assert len(ces) == sum(c.op != "read" for c in expected.changes)  # no snapshot rows in CES
    assert len(types) == 1, types
    assert dict(next(iter(types)))["balance"] == "decimal(10,2)"  # samples.CUSTOMERS
    assert_demo_dead_letters(_dead_headers(rows), expected, topic=f"{topic}.batches")
    counters = RunCounters()
    for p in progress + more_progress:
        counters.add(p)
    assert_demo_counters(counters.as_dict(), expected, extra_side_records=1)
    assert counters.values["late"] == 0
    # the halves of the key change were read in different micro-batches
    merged = next(json.loads(r.value) for r in changes if json.loads(r.value)["key_changed"])
    read_in = {_batch_reading(progress, x["topic"], x["partition"], x["offset"])
               for x in merged["lineage"]}
    assert len(read_in) == 2, read_in


def _batch_reading(progress: list[dict[str, Any]], topic: str, partition: int,
                   offset: int) -> int:
    """The micro-batch whose source offset range holds ``topic[partition]@offset``."""
    for p in progress:
        source = p["sources"][0]
        start = (json.loads(source["startOffset"] or "null") or {}).get(topic, {}).get(
            str(partition), 0)
        end = json.loads(source["endOffset"]).get(topic, {}).get(str(partition), 0)
        if start <= offset < end:
            return int(p["batchId"])
    raise AssertionError(f"{topic}[{partition}]@{offset} was never read")


def test_streaming_restart_keeps_waiting_halves_in_state(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    """Run 1 sees only the delete half of a key change; run 2 (from the checkpoint) the create."""
    records, expected = demo(partitions=3)
    topic = "server1.testDB.dbo.customers"
    c_partition = expected.pk_change_partitions[1]
    create_topics(kafka_bootstrap, {topic + ".restart": 3})
    moved = [RawRecord(topic + ".restart", r.partition, None, r.timestamp, r.key, r.value,
                       r.headers) for r in records]
    first = [r for r in moved if r.partition != c_partition]
    second = [r for r in moved if r.partition == c_partition]
    produce(kafka_bootstrap, first)
    options = {"kafka.bootstrap.servers": kafka_bootstrap, "subscribe": topic + ".restart",
               "startingOffsets": "earliest"}
    config = TranslateConfig(watermark_delay="1 hour", buckets=4)
    checkpoint = str(tmp_path / "ck")
    batches, _ = run_available_now(
        translate(kafka_reader(spark, options, provider="python").load(), config), checkpoint)
    run1 = [json.loads(r.value) for b in batches for r in b if r.kind == "change"]
    assert not any(r["key_changed"] for r in run1)
    assert not any(r["op"] == "delete" and r["key"] == {"id": 4} for r in run1), \
        "the delete half waits for its partner"
    produce(kafka_bootstrap, second)
    batches, _ = run_available_now(
        translate(kafka_reader(spark, options, provider="python").load(), config), checkpoint)
    run2 = [json.loads(r.value) for b in batches for r in b if r.kind == "change"]
    merged = [r for r in run2 if r["key_changed"]]
    assert len(merged) == 1 and merged[0]["old_key"] == {"id": 4}


def test_ces_and_debezium_outputs_in_spark(spark: Any) -> None:
    """CES events validate against the JSON Schemas (one UPD for the key change); the Debezium
    envelopes decode with the core's own decoder back to the same canonical changes."""
    from debezium_bridge.errors import ConfigError
    from debezium_bridge.testing.ces_schema import validate_events

    records, expected = demo()
    config = TranslateConfig(outputs=("canonical", "ces", "debezium"))
    rows = translate(spark.createDataFrame(kafka_rows(records), KAFKA_SCHEMA), config).collect()
    ces = [r for r in rows if r.format == "ces"]
    validate_events([r.value for r in ces])
    operations = [json.loads(r.value)["operation"] for r in ces]
    snapshot = sum(c.op == "read" for c in expected.changes)
    assert len(ces) == len(expected.changes) - snapshot
    key_change = [json.loads(r.value) for r in ces if r.op == "update"
                  and json.loads(json.loads(r.value)["data"])["eventsource"]["pkkey"][0]["value"]
                  == str(expected.changes[7].key["id"])]
    assert [e["operation"] for e in key_change] == ["UPD"] and operations.count("DEL") == 1
    logical_ids = [json.loads(r.value)["logicalid"] for r in ces]
    assert len(set(logical_ids)) == len(logical_ids)

    # one partition in position order, as the connector would write them
    ordered = sorted((r for r in rows if r.format == "debezium"), key=lambda r: (r.seq, r.event_id))
    envelopes = [RawRecord(r.topic, 0, i, None, r.key, r.value) for i, r in enumerate(ordered)]
    again = [x for x in Translator().translate(envelopes) if isinstance(x, ChangeRecord)]
    assert_demo_feed([json.loads(to_json(c)) for c in again], expected)
    with pytest.raises(ConfigError, match="snapshot_rows"):
        TranslateConfig(outputs=("ces",), ces=CesOptions(snapshot_rows="insert"))


def test_parse_canonical_gives_typed_rows_when_the_schema_is_known(spark: Any) -> None:
    from debezium_bridge.model.schema import table_from_connect
    from debezium_bridge.spark.rows import parse_canonical

    records, expected = demo()
    envelope = json.loads(next(r.value for r in records if r.value and r.offset == 0))
    after = next(f for f in envelope["schema"]["fields"] if f["field"] == "after")
    table = table_from_connect(after)
    out = translate(spark.createDataFrame(kafka_rows(records), KAFKA_SCHEMA))
    typed = parse_canonical(out, table, key_columns=("id",))
    fields = {f.name: f.dataType.simpleString() for f in typed.schema["after"].dataType.fields}
    assert fields["id"] == "int" and fields["name"] == "string"
    assert fields["balance"] == "string", "decimals keep their exact canonical text"
    rows = typed.collect()
    assert len(rows) == len(expected.changes)
    merged = next(r for r in rows if r.key_changed)
    assert (merged.old_key.id, merged.key.id) == (4, expected.changes[7].key["id"])
    assert merged.before.balance == "0.00" and merged.position.event_serial_no == 2


def test_the_library_example_in_docs_runs_as_written(spark, kafka_bootstrap, new_topic,
                                                     capsys) -> None:
    """docs/spark.md's library example, run as written against this session's broker (its
    address and topic substituted): it shows the demo traffic's flat rows."""
    import re

    from debezium_bridge.testing.simulator import demo
    from tests.paths import ROOT

    block = re.search(r"^```python\n(.*?)^```", (ROOT / "docs" / "spark.md").read_text(),
                      flags=re.S | re.M)
    assert block is not None
    topic = new_topic(3)
    records, _ = demo(partitions=3)
    produce(kafka_bootstrap, [msgspec.structs.replace(r, topic=topic) for r in records
                              if r.topic == "server1.testDB.dbo.customers"])
    code = block.group(1).replace("server1.testDB.dbo.customers", topic).replace(
        "127.0.0.1:9092", kafka_bootstrap)
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    exec(compile(code, "docs/spark.md", "exec"), namespace)
    shown = capsys.readouterr().out
    assert '"__op":"update"' in shown and '"__op":"delete"' in shown
    flat = [json.loads(r.value) for r in namespace["out"].where(
        "kind = 'change' AND format = 'flat'").collect()]
    # 9 changes; the key change is two apply rows (delete the old key, upsert the new one)
    assert len(flat) == 10 and len({r["__event_id"] for r in flat}) == 9
