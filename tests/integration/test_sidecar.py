"""The sidecar against a real broker: every input encoding into every output format, DLQ and
tombstones; metrics and readiness; SIGTERM within its bound; a broker that is gone; Kafka
transactions.

Expectations come from the traffic generator's inputs (``demo_expectation``, the operations fed
to the simulator), never from the program's output.
"""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

from debezium_bridge.clients.kafka import create_topics, produce
from debezium_bridge.core import native
from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.records import RawRecord
from debezium_bridge.output import Output
from debezium_bridge.testing.broker import EmbeddedKafka
from debezium_bridge.testing.simulator import CUSTOMERS, DemoExpectation, demo
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
from tests.support.registry import SchemaRegistryServer

pytestmark = [pytest.mark.integration]


def _retopic(records: list[RawRecord], topic: str) -> list[RawRecord]:
    return [msgspec.structs.replace(r, topic=topic, offset=None) for r in records]


def _cloudevents(records: list[RawRecord], topic: str) -> list[RawRecord]:
    """Debezium's CloudEventsConverter (structured JSON, data with schema) of schema-ful
    JsonConverter records; tombstones and undecodable records as they are."""
    out = []
    for r in records:
        try:
            doc = json.loads(r.value) if r.value else None
        except ValueError:
            doc = None
        if not doc:
            out.append(msgspec.structs.replace(r, topic=topic, offset=None))
            continue
        payload, source = doc["payload"], doc["payload"]["source"]
        event = {"specversion": "1.0", "id": f"{source['commit_lsn']}:{source['change_lsn']}",
                 "source": f"/debezium/sqlserver/{source['name']}", "type":
                 "io.debezium.connector.sqlserver.DataChangeEvent",
                 "datacontenttype": "application/json", "iodebeziumop": payload["op"],
                 "iodebeziumversion": source["version"], "iodebeziumconnector": "sqlserver",
                 "iodebeziumname": source["name"], "iodebeziumtsms": str(source["ts_ms"]),
                 "iodebeziumsnapshot": source["snapshot"], "iodebeziumdb": source["db"],
                 "iodebeziumschema": source["schema"], "iodebeziumtable": source["table"],
                 "iodebeziumchangelsn": source["change_lsn"],
                 "iodebeziumcommitlsn": source["commit_lsn"],
                 "iodebeziumeventserialno": source["event_serial_no"],
                 "data": {"schema": doc["schema"], "payload": {"before": payload["before"],
                                                               "after": payload["after"]}}}
        out.append(RawRecord(topic, r.partition, None, r.timestamp, r.key,
                             json.dumps(event).encode(), r.headers))
    return out


def _ces(records: list[RawRecord], topic: str) -> list[RawRecord]:
    """SQL Server CES CloudEvents of the same changes (encoded by the package's CES encoder
    from the translated demo; the sidecar must read them back as the same changes)."""
    pipeline = Pipeline()
    output = Output(["ces"], catalog=pipeline.catalog)
    out = []
    for item in pipeline.translate(records):
        if isinstance(item, ChangeRecord):
            out += [RawRecord(topic, 0, None, r.timestamp, r.key, r.value, r.headers)
                    for r in output.encode(item)]
    return out


def _logical(expectation: DemoExpectation) -> Counter[tuple[Any, ...]]:
    return Counter((c.op, c.key["id"], (c.old_key or {}).get("id"))
                   for c in expectation.changes)


def _changes(messages: list[Any]) -> Counter[tuple[Any, ...]]:
    out: Counter[tuple[Any, ...]] = Counter()
    for m in messages:
        if m.value() is None:
            continue
        r = json.loads(m.value())
        out[(r["op"], r["key"]["id"], (r["old_key"] or {}).get("id"))] += 1
    return out


def test_every_input_encoding_into_every_output_format(
        kafka_bootstrap: str, kafka_embedded: bool, tmp_path: Path) -> None:
    with SchemaRegistryServer() as registry:
        schemaful, expectation = demo("json-schema", transaction_metadata=False)
        avro, avro_expectation = demo("avro", registrar=registry.register)
        inputs = {
            "jsonschema.testDB.dbo.customers": _retopic(schemaful, "jsonschema.testDB.dbo."
                                                                   "customers"),
            "avro.testDB.dbo.customers": _retopic(avro, "avro.testDB.dbo.customers"),
            "cloudevents.testDB.dbo.customers": _cloudevents(
                schemaful, "cloudevents.testDB.dbo.customers"),
            "sqlces.testDB.dbo.customers": _ces(schemaful, "sqlces.testDB.dbo.customers"),
        }
        create_topics(kafka_bootstrap, {**dict.fromkeys(inputs, 3)})
        for topic, records in inputs.items():
            produce(kafka_bootstrap, records, keep_partitions=not topic.startswith("sqlces"))
        config = write_config(
            tmp_path / "sidecar.json", bootstrap_servers=kafka_bootstrap, group_id="encodings",
            subscribe_pattern=r"(jsonschema|avro|cloudevents|sqlces)\.testDB\.dbo\.customers",
            outputs=["canonical", "flat", "ces", "debezium"], output_topic="{topic}.{format}",
            dlq_topic="encodings.dlq", output_tombstones=True, idle_timeout_ms=500,
            schema_registry=registry.url, consumer=group_settings(kafka_embedded),
            http_port=0)
        sidecar = Sidecar(config, tmp_path / "sidecar.log")
        try:
            wanted = len(expectation.changes) * 3 + len(avro_expectation.changes)
            deadline = time.monotonic() + 90
            canonical = [f"{t}.canonical" for t in inputs]
            while len([m for m in read_all(kafka_bootstrap, canonical) if m.value()]) < wanted:
                assert time.monotonic() < deadline, sidecar.text()[-3000:]
                assert sidecar.process.poll() is None, sidecar.text()[-3000:]
                time.sleep(0.5)
            port = int(re.search(r"http endpoint on [\d.]+:(\d+)", sidecar.text())[1])
            ready = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz")
            assert ready.status == 200 and json.loads(ready.read())["ready"]
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
            assert re.search(r'debezium_bridge_sidecar_records_in_total\{topic="avro\.testDB\.'
                             r'dbo\.customers"\} \d+', metrics)
            assert "debezium_bridge_sidecar_batch_seconds_bucket" in metrics
            assert "debezium_bridge_sidecar_pending_events" in metrics
            assert sidecar.terminate(timeout=30) == 0, sidecar.text()[-3000:]
        finally:
            if sidecar.process.poll() is None:
                sidecar.kill()
    for topic in inputs:
        got = read_all(kafka_bootstrap, [f"{topic}.canonical"])
        want = _logical(avro_expectation if topic.startswith("avro") else expectation)
        if topic.startswith("sqlces"):  # CES has no snapshot: snapshot rows are INS events
            want = Counter({("insert" if op == "read" else op, *rest): n
                            for (op, *rest), n in want.items()})
        assert _changes(got) == want, topic
        deletes = sum(c.op == "delete" for c in expectation.changes)
        key_changes = sum(c.old_key is not None for c in expectation.changes)
        assert sum(m.value() is None for m in got) == deletes + key_changes  # tombstones
        flat = [json.loads(m.value()) for m in read_all(kafka_bootstrap, [f"{topic}.flat"])
                if m.value()]
        assert len(flat) == len(expectation.changes) + key_changes  # delete + upsert
        ces = [json.loads(m.value()) for m in read_all(kafka_bootstrap, [f"{topic}.ces"])]
        assert {e["type"] for e in ces} == {"com.microsoft.SQL.CES.DML.V1"}
        assert len(ces) >= len(expectation.changes)
        debezium = read_all(kafka_bootstrap, [f"{topic}.debezium"])
        assert {json.loads(m.value())["payload"]["op"] for m in debezium if m.value()} \
            <= {"c", "u", "d", "r"}
    dead = read_all(kafka_bootstrap, ["encodings.dlq"])
    sources = Counter(headers_of(m)["__connect.errors.topic"] for m in dead)
    assert sources == {"jsonschema.testDB.dbo.customers": 1, "avro.testDB.dbo.customers": 1,
                       "cloudevents.testDB.dbo.customers": 1}
    assert all(headers_of(m)["__connect.errors.stage"] for m in dead)


def _stream(tmp_path: Path, kafka_bootstrap: str, kafka_embedded: bool, group: str,
            events: int, **settings: Any) -> tuple[Any, Path, list[str]]:
    tables = [CUSTOMERS, table("orders")]
    data = traffic(tables, events, chunks=1, seed=7)
    renamed = {topic_of(t): f"{group}.{topic_of(t)}" for t in tables}
    records = [msgspec.structs.replace(r, topic=renamed.get(r.topic, f"{group}.{r.topic}"))
               for r in data.chunks[0]]
    create_topics(kafka_bootstrap, {renamed.get(t, f"{group}.{t}"): n
                                    for t, n in data.topics.items()})
    produce(kafka_bootstrap, records, settings={"linger.ms": "20"})
    schemas = json.loads(table_schemas(tables, tmp_path / "s.json").read_text())
    (tmp_path / "schemas.json").write_text(json.dumps({renamed[t]: s
                                                       for t, s in schemas.items()}))
    config = write_config(
        tmp_path / f"{group}.json", bootstrap_servers=kafka_bootstrap, group_id=group,
        subscribe_pattern=re.escape(group) + r"\..*", exclude_pattern=r".*\.canonical",
        dlq_topic=f"{group}.dlq", table_schemas=str(tmp_path / "schemas.json"),
        consumer=group_settings(kafka_embedded), **settings)
    return data, config, [f"{renamed[topic_of(t)]}.canonical" for t in tables]


def _exactly_once(kafka_bootstrap: str, data: Any, outputs: list[str], group: str) -> None:
    messages = read_all(kafka_bootstrap, outputs)
    keys = Counter()
    for m in messages:
        r = json.loads(m.value())
        keys[(m.topic().removesuffix(".canonical").removeprefix(f"{group}."), r["op"],
              r["key"]["id"], (r["old_key"] or {}).get("id"), r["position"]["commit_lsn"],
              r["position"]["change_lsn"])] += 1
    assert set(keys) == set(data.expected) and set(keys.values()) == {1}


def _expected_core() -> str:
    return "native" if native.use_native("auto") else "Python"


def test_sigterm_finishes_the_batch_and_exits_within_the_bound(
        kafka_bootstrap: str, kafka_embedded: bool, tmp_path: Path) -> None:
    data, config, outputs = _stream(tmp_path, kafka_bootstrap, kafka_embedded, "sigterm",
                                    20_000, shutdown_timeout_ms=10_000, idle_timeout_ms=1000,
                                    counters_json=str(tmp_path / "counters.json"),
                                    kafka={"sasl.password": "s3cr3t-kafka"},
                                    schema_registry="http://127.0.0.1:9",
                                    registry={"basic.auth.user.info": "u:s3cr3t-registry"})
    first = Sidecar(config, tmp_path / "first.log")
    assert first.wait_for("adopted", timeout=60), first.text()[-2000:]
    # the core the environment selects (DEBEZIUM_BRIDGE_NATIVE, else native where it is built)
    assert first.wait_for(f"translation core: {_expected_core()}", timeout=10), \
        first.text()[-2000:]
    time.sleep(0.5)  # mid-stream
    first.process.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    assert first.process.wait(15) == 0, first.text()[-3000:]
    took = time.monotonic() - sent
    assert took < 10, took
    assert "SIGTERM: finishing the batch" in first.text() and "stopped" in first.text()
    assert "sasl.password" in first.text() and "s3cr3t" not in first.text()  # masked
    assert json.loads((tmp_path / "counters.json").read_text())["topics"]
    second = Sidecar(config, tmp_path / "second.log")
    deadline = time.monotonic() + 120
    while len(read_all(kafka_bootstrap, outputs)) < len(data.expected):
        assert time.monotonic() < deadline and second.process.poll() is None, \
            second.text()[-3000:]
        time.sleep(0.5)
    second.process.send_signal(signal.SIGINT)  # Ctrl-C: the same clean stop
    assert second.process.wait(15) == 0, second.text()[-3000:]
    _exactly_once(kafka_bootstrap, data, outputs, "sigterm")


def test_shutdown_bound_holds_when_the_broker_is_gone(tmp_path: Path) -> None:
    with EmbeddedKafka(log_path=str(tmp_path / "tansu.log")) as kafka:
        _, config, _ = _stream(tmp_path, kafka.bootstrap_servers, True, "gone", 3_000,
                               shutdown_timeout_ms=3_000, idle_timeout_ms=500)
        sidecar = Sidecar(config, tmp_path / "sidecar.log")
        assert sidecar.wait_for("adopted", timeout=60), sidecar.text()[-2000:]
        kafka.stop()
        time.sleep(0.5)
        sidecar.process.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code = sidecar.process.wait(20)
        took = time.monotonic() - sent
    assert code in (1, 4), sidecar.text()[-2000:]  # never a clean exit without a checkpoint
    assert took < 3 + 2, took


def test_broker_that_cannot_be_reached_stops_the_sidecar_with_exit_4(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = write_config(tmp_path / "c.json", bootstrap_servers=f"127.0.0.1:{port}",
                          subscribe=["a.b.c.d"], service_timeout_ms=2_000)
    sidecar = Sidecar(config, tmp_path / "sidecar.log")
    assert sidecar.process.wait(30) == 4, sidecar.text()[-2000:]
    assert "127.0.0.1" in sidecar.text()


@pytest.mark.parametrize("guarantee", ["transactions", "at-least-once"])
def test_other_guarantees(kafka_bootstrap: str, kafka_embedded: bool, tmp_path: Path,
                          guarantee: str) -> None:
    """With ``guarantee: transactions`` outputs, checkpoints and offsets commit together (the
    embedded broker runs the protocol but does not isolate aborted transactions, so kills
    are tested only on brokers that do: test_kafka_transactions_across_kills);
    ``at-least-once`` skips the recovery scan."""
    group = f"g-{guarantee}"
    data, config, outputs = _stream(tmp_path, kafka_bootstrap, kafka_embedded, group, 5_000,
                                    guarantee=guarantee, idle_timeout_ms=500,
                                    instance_id="txn-test")
    sidecar = Sidecar(config, tmp_path / "sidecar.log")
    deadline = time.monotonic() + 120
    while len(read_all(kafka_bootstrap, outputs)) < len(data.expected):
        assert time.monotonic() < deadline and sidecar.process.poll() is None, \
            sidecar.text()[-3000:]
        time.sleep(0.5)
    assert sidecar.terminate(30) == 0, sidecar.text()[-3000:]
    _exactly_once(kafka_bootstrap, data, outputs, group)


@pytest.mark.slow
def test_kafka_transactions_across_kills(kafka_bootstrap: str, kafka_embedded: bool,
                                        tmp_path: Path) -> None:
    if kafka_embedded:
        pytest.skip("the embedded broker does not isolate aborted transactions")
    data, config, outputs = _stream(tmp_path, kafka_bootstrap, kafka_embedded, "txnkill",
                                    20_000, guarantee="transactions", idle_timeout_ms=1000,
                                    instance_id="txn-kill")
    for life in range(5):
        sidecar = Sidecar(config, tmp_path / f"life-{life}.log", "after-checkpoint=0.2")
        assert sidecar.wait_for("test hook: after-checkpoint", count=life % 3 + 1,
                                timeout=120), sidecar.text()[-2000:]
        sidecar.kill()
    final = Sidecar(config, tmp_path / "final.log")
    deadline = time.monotonic() + 180
    while len(read_all(kafka_bootstrap, outputs, committed=True)) < len(data.expected):
        assert time.monotonic() < deadline and final.process.poll() is None
        time.sleep(1)
    assert final.terminate(30) == 0
    messages = read_all(kafka_bootstrap, outputs, committed=True)
    assert len(messages) == len(data.expected)


def _wait_for(bootstrap: str, topic: str, count: int, sidecar: Sidecar) -> None:
    """Until ``topic`` holds ``count`` records (a minute at most, the sidecar alive)."""
    deadline = time.monotonic() + 60
    while len(read_all(bootstrap, [topic])) < count:
        assert time.monotonic() < deadline and sidecar.process.poll() is None, \
            sidecar.text()[-3000:]
        time.sleep(0.5)


def test_a_schema_registry_that_is_down_stops_the_sidecar_and_nothing_is_lost(
        kafka_bootstrap: str, kafka_embedded: bool, tmp_path: Path) -> None:
    """A registry that does not answer is not bad input: no dead letters, exit 4, and a
    restart once it is back writes every change."""
    registry = SchemaRegistryServer().start()
    records, expectation = demo("avro", registrar=registry.register)
    registry.stop()
    topic = "regdown.testDB.dbo.customers"
    create_topics(kafka_bootstrap, {topic: 3})
    produce(kafka_bootstrap, _retopic(records, topic))
    common = dict(bootstrap_servers=kafka_bootstrap, group_id="regdown", subscribe=[topic],
                  dlq_topic="regdown.dlq", idle_timeout_ms=500,
                  registry={"max.retries": "1", "retries.wait.ms": "50"},
                  consumer=group_settings(kafka_embedded))
    down = Sidecar(write_config(tmp_path / "down.json", schema_registry="http://127.0.0.1:9",
                                **common), tmp_path / "down.log")
    assert down.process.wait(60) == 4, down.text()[-3000:]
    assert "schema registry unreachable" in down.text()
    assert read_all(kafka_bootstrap, ["regdown.dlq"]) == []
    registry.start()  # back (on another port), with the same schemas
    try:
        up = Sidecar(write_config(tmp_path / "up.json", schema_registry=registry.url,
                                  **common), tmp_path / "up.log")
        output = f"{topic}.canonical"
        _wait_for(kafka_bootstrap, output, len(expectation.changes), up)
        assert up.terminate(30) == 0
    finally:
        registry.stop()
    assert _changes(read_all(kafka_bootstrap, [output])) == _logical(expectation)
    assert len(read_all(kafka_bootstrap, ["regdown.dlq"])) == 1  # the corrupt record, once


def test_a_record_larger_than_the_producer_takes_becomes_a_dead_letter(
        kafka_bootstrap: str, kafka_embedded: bool, tmp_path: Path) -> None:
    """Bad input never stops the stream (README): a corrupt value of 999,800 bytes, which the
    broker took as input, makes a dead letter larger than the producer's message.max.bytes
    (1,000,000, librdkafka's default); a good insert of ~999,300 bytes has a canonical record
    that fits and a Debezium envelope (with its schema) that does not. Each record that does
    not fit is written as a dead letter without its value, naming the value's size, and
    everything after them is written."""
    records, expectation = demo()
    topic = "huge.testDB.dbo.customers"
    insert = next(r for r in records if r.value and b'"op":"c"' in r.value)
    big_good = msgspec.structs.replace(insert, value=insert.value.replace(
        b'"notes":"', b'"notes":"' + b"x" * 996_000, 1))
    big_bad = msgspec.structs.replace(insert, value=b"{" + b"x" * 999_799)
    create_topics(kafka_bootstrap, {topic: 3})
    produce(kafka_bootstrap, _retopic([big_bad, big_good, *records], topic))
    sidecar = Sidecar(write_config(
        tmp_path / "huge.json", bootstrap_servers=kafka_bootstrap, group_id="huge",
        subscribe=[topic], outputs=["canonical", "debezium"], dlq_topic="huge.dlq",
        idle_timeout_ms=500, output_topic="{topic}.{format}",
        consumer=group_settings(kafka_embedded)), tmp_path / "huge.log")
    # (the big insert takes its original's place: the original, later, is a changed replay)
    _wait_for(kafka_bootstrap, f"{topic}.canonical", len(expectation.changes), sidecar)
    assert sidecar.terminate(30) == 0
    removed = {headers_of(m)["__connect.errors.stage"]: int(headers_of(m)[
        "debezium_bridge.value_removed"]) for m in read_all(kafka_bootstrap, ["huge.dlq"])
        if m.value() is None}
    assert removed.keys() == {"decode", "encode-debezium"}, removed
    assert removed["decode"] == len(big_bad.value)
    assert removed["encode-debezium"] > 1_000_000 - 2_000
