"""``translate``'s decode step on Arrow batches (no Spark session needed): heartbeats of every
converter move the clock, transaction END records go to the bucket of their commit LSN, a
service that is down fails the batch instead of dead-lettering it, and the progress rows."""

from __future__ import annotations

import io
import json
import socket
from typing import Any

import fastavro
import pytest

from debezium_bridge.core.windowed import ProgressTracker, event_from_bytes, marks_from_bytes
from debezium_bridge.errors import ServiceError
from debezium_bridge.formats.debezium.avro import AvroDecoder
from debezium_bridge.formats.debezium.decode import Decoder
from debezium_bridge.formats.debezium.registry import FileSchemaResolver
from debezium_bridge.model.change import SideKind, SideRecord
from debezium_bridge.model.records import RawRecord
from debezium_bridge.spark.source import kafka_rows
from debezium_bridge.spark.translate import (
    CLOCK_BUCKET,
    DEAD_BUCKET,
    PROGRESS_ROW,
    TX_END_ROW,
    TranslateConfig,
    _decode_batch,
    _decoder,
    _decoder_spec,
    _progress_batch,
    bucket_of,
)
from debezium_bridge.testing.simulator import demo

pytestmark = pytest.mark.integration

BEAT_MS = 1_700_000_123_456
HEARTBEAT_TOPIC = "__debezium-heartbeat.server1"
HEARTBEAT_SCHEMA = {"type": "record", "name": "Heartbeat",
                    "namespace": "io.debezium.connector.common",
                    "fields": [{"name": "ts_ms", "type": "long"}]}


def _batch(records: list[RawRecord]) -> Any:
    """``records`` as one Arrow batch of the Kafka source's columns."""
    import pyarrow as pa

    rows = kafka_rows(records)
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
             "headers"]
    header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    types = [pa.binary(), pa.binary(), pa.string(), pa.int32(), pa.int64(),
             pa.timestamp("us", tz="UTC"), pa.int32(), header]
    columns = [pa.array([r[i] for r in rows], t) for i, t in enumerate(types)]
    return pa.RecordBatch.from_arrays(columns, names=names)


def _avro_heartbeat(schema_id: int) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(HEARTBEAT_SCHEMA), {"ts_ms": BEAT_MS})
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


HEARTBEATS = {
    "json": json.dumps({"ts_ms": BEAT_MS}).encode(),
    "json-schema": json.dumps({
        "schema": {"type": "struct", "name": "io.debezium.connector.common.Heartbeat",
                   "optional": False, "fields": [{"field": "ts_ms", "type": "int64"}]},
        "payload": {"ts_ms": BEAT_MS}}).encode(),
    "avro": _avro_heartbeat(7),
}


@pytest.mark.parametrize("converter", sorted(HEARTBEATS))
def test_heartbeats_of_every_converter_carry_their_time_and_move_the_clock(
        converter: str) -> None:
    decoder = Decoder(avro=AvroDecoder(FileSchemaResolver({"7": HEARTBEAT_SCHEMA})))
    record = RawRecord(HEARTBEAT_TOPIC, 0, 0, BEAT_MS - 5, b'{"serverName":"server1"}',
                       HEARTBEATS[converter])
    side = decoder.decode(record)
    assert isinstance(side, SideRecord) and side.kind is SideKind.HEARTBEAT
    assert side.ts_ms == BEAT_MS
    staged = _decode_batch(_batch([record]), decoder, 4, heartbeats=True).to_pylist()
    clock = [r for r in staged if r["bucket"] == CLOCK_BUCKET]
    assert len(clock) == 1 and clock[0]["clock"].timestamp() * 1000 == BEAT_MS
    assert clock[0]["n_side_records"] == 1 and clock[0]["n_dead_letters"] == 0
    # without heartbeat_watermark the heartbeat is counted but does not move the clock
    staged = _decode_batch(_batch([record]), decoder, 4, heartbeats=False).to_pylist()
    assert [r["clock"] for r in staged if r["bucket"] == CLOCK_BUCKET] == [None]


def test_transaction_ends_go_to_the_bucket_of_their_commit_and_progress_to_every_bucket(
        ) -> None:
    records, _ = demo(partitions=3, transaction_metadata=True)
    config = TranslateConfig(buckets=8)
    decoder, _ = _decoder(_decoder_spec(config))
    tracker = ProgressTracker()
    staged = _decode_batch(_batch(records), decoder, 8, progress=tracker).to_pylist()
    ends = [r for r in staged if r["kind"] == TX_END_ROW]
    tx_records = [r for r in records if r.topic == "server1.transaction"
                  and b'"END"' in (r.value or b"")]
    assert len(ends) == len(tx_records) > 0
    events: dict[bytes, set[int]] = {}
    for row in staged:
        if row["kind"] == 0 and row["bucket"] >= 0:
            event = event_from_bytes(row["payload"])
            events.setdefault(event.sort_key[0], set()).add(bucket_of(event, 8))
    for row, record in zip(ends, tx_records, strict=True):
        doc = json.loads(record.value or b"")
        doc = doc.get("payload", doc)
        commit = bytes.fromhex(doc["id"].replace(":", ""))
        assert events[commit] == {row["bucket"]}, "an END shares its events' bucket"
    marks = {(t, p): m for t, p, m in tracker.marks()}
    last = {}
    for r in records:
        last[(r.topic, r.partition)] = max(last.get((r.topic, r.partition), -1), r.offset or 0)
    assert {tp: m.offset for tp, m in marks.items()} == last
    progress = _progress_batch(tracker.marks(), 8).to_pylist()
    assert sorted(r["bucket"] for r in progress) == list(range(8))
    assert all(r["kind"] == PROGRESS_ROW and marks_from_bytes(r["payload"]) == tracker.marks()
               for r in progress)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_schema_registry_fails_the_batch_instead_of_dead_lettering() -> None:
    records, _ = demo(partitions=3, encoding="avro")
    config = TranslateConfig(schema_registry=f"http://127.0.0.1:{_closed_port()}",
                             registry={"max.retries": "0", "timeout": "2"})
    decoder, _ = _decoder(_decoder_spec(config))
    with pytest.raises(ServiceError, match="schema registry unreachable"):
        _decode_batch(_batch(records[:1]), decoder, 4)
    # bad input stays a dead letter
    broken = RawRecord(records[0].topic, 0, 1, None, records[0].key, b"{not json")
    staged = _decode_batch(_batch([broken]), decoder, 4).to_pylist()
    assert [r["bucket"] for r in staged] == [DEAD_BUCKET, CLOCK_BUCKET]
