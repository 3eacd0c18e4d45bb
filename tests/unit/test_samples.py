"""The CDC simulator, the README demo traffic and the benchmark corpus.

Expected values come from the reference (``debezium-sqlserver.md`` §1.4, §2.2, §3, §4.1) and
Kafka's own murmur2 test vectors (``clients/.../UtilsTest#testMurmur2``).
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter, defaultdict
from typing import Any

import fastavro
import pytest

from debezium_bridge.formats.debezium.encode import TableSpec
from debezium_bridge.formats.debezium.registry import InMemoryRegistry
from debezium_bridge.formats.debezium.sqltypes import UNAVAILABLE_VALUE, SqlColumn
from debezium_bridge.model.records import RawRecord
from debezium_bridge.partitioner import murmur2, partition_for, to_positive
from debezium_bridge.testing.corpus import bulk_corpus
from debezium_bridge.testing.simulator import (
    CUSTOMERS,
    CdcSimulator,
    Delete,
    Insert,
    KeyChange,
    Update,
    demo,
    demo_expectation,
    demo_traffic,
    format_lsn,
)

LSN = re.compile(r"[0-9a-f]{8}:[0-9a-f]{8}:[0-9a-f]{4}")
ORDERS = TableSpec("testDB", "dbo", "orders", ("order_id",),
                   (SqlColumn("order_id", "int", nullable=False), SqlColumn("qty", "int")))


def row(i: int, **extra: Any) -> dict[str, Any]:
    return {"id": i, "name": f"n{i}", "email": None, "balance": "1.00",
            "created": "2024-01-01T00:00:00.0000000", "notes": None} | extra


def payload(record: RawRecord) -> Any:
    assert record.value is not None
    doc = json.loads(record.value)
    return doc["payload"] if "schema" in doc else doc


def avro_decode(registry: InMemoryRegistry, message: bytes) -> Any:
    """Decode a Confluent wire-format message with the writer schema from the registry."""
    schema = fastavro.parse_schema(registry.schemas[int.from_bytes(message[1:5], "big")])
    return fastavro.schemaless_reader(io.BytesIO(message[5:]), schema, schema)


def lsn_bytes(text: str) -> bytes:
    return bytes.fromhex(text.replace(":", ""))


# --------------------------------------------------------------------------- partitioner


def test_murmur2_matches_kafka_test_vectors() -> None:
    vectors = {b"21": -973932308, b"foobar": -790332482,
               b"a-little-bit-long-string": -985981536,
               b"a-little-bit-longer-string": -1486304829,
               b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
               b"abc": 479470107}
    for data, expected in vectors.items():
        assert murmur2(data) == expected


def test_partition_is_positive_murmur2_modulo_n() -> None:
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF
    assert partition_for(b"21", 3) == (-973932308 & 0x7FFFFFFF) % 3
    assert partition_for(b"foobar", 7) == (-790332482 & 0x7FFFFFFF) % 7


# --------------------------------------------------------------------------- simulator


def test_event_serial_numbers_follow_set_change_position() -> None:
    sim = CdcSimulator([CUSTOMERS], encoding="json")
    produced = sim.commit([Insert("customers", row(1)),
                           Update("customers", row(1), row(1, name="x")),
                           Delete("customers", row(1))])
    data = [p for p in produced if p.kind == "data"]
    assert [(p.op, p.event_serial_no) for p in data] == [("c", 1), ("u", 2), ("d", 1)]
    assert len({p.commit_lsn for p in data}) == 1
    assert len({p.change_lsn for p in data}) == 3
    for p in data:
        source = payload(p.record)["source"]
        assert LSN.fullmatch(source["commit_lsn"]) and LSN.fullmatch(source["change_lsn"])
        assert lsn_bytes(source["change_lsn"]) < lsn_bytes(source["commit_lsn"])
        assert source["event_serial_no"] == p.event_serial_no


def test_primary_key_change_case_a() -> None:
    sim = CdcSimulator([CUSTOMERS], encoding="json")
    d, tombstone, c = sim.commit([KeyChange("customers", row(4), row(40))])
    assert (d.op, tombstone.kind, c.op) == ("d", "tombstone", "c")
    assert (d.event_serial_no, c.event_serial_no) == (1, 2)
    assert d.commit_lsn == c.commit_lsn and d.change_lsn == c.change_lsn
    assert d.record.headers == tombstone.record.headers == c.record.headers == ()
    assert tombstone.record.key == d.record.key == b'{"id":4}'
    assert tombstone.record.value is None
    assert c.record.key == b'{"id":40}'


def test_primary_key_change_case_b_has_key_headers() -> None:
    sim = CdcSimulator([CUSTOMERS], encoding="json-schema")
    d, tombstone, c = sim.commit([KeyChange("customers", row(4), row(40), via_update=True)])
    assert d.event_serial_no == c.event_serial_no == 2
    assert payload(d.record)["source"] == payload(c.record)["source"]
    assert d.record.headers == tombstone.record.headers == (("__debezium.newkey", c.record.key),)
    assert c.record.headers == (("__debezium.oldkey", d.record.key),)
    assert json.loads(c.record.headers[0][1] or b"")["payload"] == {"id": 4}


def test_snapshot_rows_and_markers() -> None:
    sim = CdcSimulator([CUSTOMERS, ORDERS], encoding="json")
    start_lsn = sim.lsn.last
    snap = sim.snapshot({"customers": [row(1), row(2), row(3)],
                         "orders": [{"order_id": 1, "qty": 2}, {"order_id": 2, "qty": 3}]})
    sources = [payload(p.record)["source"] for p in snap]
    assert [payload(p.record)["op"] for p in snap] == ["r"] * 5
    assert [s["snapshot"] for s in sources] == [
        "first", "true", "last_in_data_collection", "first_in_data_collection", "last"]
    assert {s["commit_lsn"] for s in sources} == {format_lsn(start_lsn)}
    assert LSN.fullmatch(format_lsn(start_lsn))
    assert all(s["change_lsn"] is None and s["event_serial_no"] is None for s in sources)
    streamed = sim.commit([Insert("customers", row(9))])[0]
    assert lsn_bytes(streamed.commit_lsn or "") > lsn_bytes(sources[0]["commit_lsn"])
    old = CdcSimulator([CUSTOMERS], encoding="json", version="1.9.7.Final")
    markers = [payload(p.record)["source"]["snapshot"]
               for p in old.snapshot({"customers": [row(1), row(2), row(3)]})]
    assert markers == ["true", "true", "last"]


def test_tombstone_follows_each_delete_in_its_partition() -> None:
    sim = CdcSimulator([CUSTOMERS], encoding="json", partitions=4)
    sim.commit([Insert("customers", row(i)) for i in range(1, 9)])
    sim.commit([Delete("customers", row(i)) for i in range(1, 9)])
    by_partition: dict[int, list[RawRecord]] = defaultdict(list)
    for record in sim.records:
        by_partition[record.partition].append(record)
    deletes = 0
    for records in by_partition.values():
        assert [r.offset for r in records] == list(range(len(records)))
        for i, record in enumerate(records):
            if record.value is not None and payload(record)["op"] == "d":
                deletes += 1
                assert records[i + 1].value is None and records[i + 1].key == record.key
    assert deletes == 8


def test_transaction_metadata() -> None:
    sim = CdcSimulator([CUSTOMERS, ORDERS], encoding="json", transaction_metadata=True)
    first = sim.commit([Insert("customers", row(1)), Insert("orders", {"order_id": 1, "qty": 1}),
                        Delete("customers", row(1))])
    sim.commit([Insert("customers", row(2))])
    sim.finish()
    tx_records = [p.record for p in sim.produced if p.kind == "transaction"]
    assert [json.loads(r.value or b"")["status"] for r in tx_records] == [
        "BEGIN", "END", "BEGIN", "END"]
    tx_id = first[0].commit_lsn
    assert json.loads(tx_records[0].key or b"") == {"id": tx_id}
    end = json.loads(tx_records[1].value or b"")
    assert (end["id"], end["event_count"]) == (tx_id, 3)  # tombstones are not counted
    assert end["data_collections"] == [
        {"data_collection": "testDB.dbo.customers", "event_count": 2},
        {"data_collection": "testDB.dbo.orders", "event_count": 1}]
    blocks = [payload(p.record)["transaction"] for p in first if p.kind == "data"]
    assert blocks == [{"id": tx_id, "total_order": 1, "data_collection_order": 1},
                      {"id": tx_id, "total_order": 2, "data_collection_order": 1},
                      {"id": tx_id, "total_order": 3, "data_collection_order": 2}]
    assert all(r.topic == "server1.transaction" for r in tx_records)
    # END of a transaction is only emitted once the next one starts
    assert sim.produced.index(next(p for p in sim.produced if p.record is tx_records[1])) > \
        sim.produced.index(first[-1])


# --------------------------------------------------------------------------- README demo


@pytest.mark.parametrize("encoding", ["json-schema", "json"])
def test_demo_traffic_matches_its_expectation(encoding: str) -> None:
    records, expected = demo(encoding)  # type: ignore[arg-type]
    assert len(records) == expected.records
    assert [(c.op, dict(c.key), c.old_key) for c in expected.changes] == [
        ("read", {"id": 1}, None), ("read", {"id": 2}, None), ("read", {"id": 3}, None),
        ("insert", {"id": 4}, None), ("insert", {"id": 5}, None), ("update", {"id": 2}, None),
        ("delete", {"id": 3}, None),
        ("update", expected.changes[7].key, {"id": 4}),
        ("update", {"id": 1}, None)]
    assert expected.changes[7].event_serial_nos == (1, 2)
    assert expected.changes[8].unavailable_columns == ("notes",)
    assert (expected.corrupt, expected.side_records) == (1, 0)
    assert expected.duplicates >= 1

    corrupt, tombstones, data = [], [], []
    for record in records:
        if record.value is None:
            tombstones.append(record)
            continue
        try:
            data.append((record, payload(record)))
        except json.JSONDecodeError:
            corrupt.append(record)
    assert len(corrupt) == 1 and len(tombstones) == expected.tombstones
    assert len(data) == expected.data_records

    # per-partition order kept, offsets contiguous
    by_partition: dict[int, list[int]] = defaultdict(list)
    for record in records:
        assert record.offset is not None
        by_partition[record.partition].append(record.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_partition.values())

    # the PK change: halves in different partitions, the c listed before the d
    d_partition, c_partition = expected.pk_change_partitions
    assert d_partition != c_partition
    new_key = json.dumps(dict(expected.changes[7].key), separators=(",", ":"))
    d_at = next(i for i, (r, p) in enumerate(data) if p["op"] == "d" and
                p["before"]["id"] == 4)
    c_at = next(i for i, (r, p) in enumerate(data) if p["op"] == "c" and
                json.dumps({"id": p["after"]["id"]}, separators=(",", ":")) == new_key)
    assert c_at < d_at
    assert (data[d_at][0].partition, data[c_at][0].partition) == (d_partition, c_partition)
    assert data[d_at][1]["source"]["commit_lsn"] == data[c_at][1]["source"]["commit_lsn"]
    assert data[d_at][1]["source"]["change_lsn"] == data[c_at][1]["source"]["change_lsn"]

    # the placeholder update
    lob = next(p for _, p in data if p["op"] == "u" and p["after"]["name"] == "Ada King")
    assert lob["after"]["notes"] == UNAVAILABLE_VALUE

    # the replay: same source block, new envelope time, new offsets, all in one partition
    seen: dict[str, list[tuple[RawRecord, Any]]] = defaultdict(list)
    for record, doc in data:
        seen[json.dumps(doc["source"], sort_keys=True) + doc["op"]].append((record, doc))
    replays = [group for group in seen.values() if len(group) > 1]
    assert len(replays) == expected.duplicates
    for (first, first_doc), (again, again_doc) in replays:
        assert again.partition == first.partition == expected.replay_partition
        assert (again.offset or 0) > (first.offset or 0) and again.key == first.key
        assert again_doc["ts_ms"] > first_doc["ts_ms"]
        assert {k: v for k, v in again_doc.items() if not k.startswith("ts_")} == \
            {k: v for k, v in first_doc.items() if not k.startswith("ts_")}


def test_demo_expectation_is_stable_and_avro_decodes() -> None:
    assert demo_expectation("json") == demo("json")[1]
    registry = InMemoryRegistry()
    records = demo_traffic("avro", registrar=registry)
    expected = demo_expectation("avro")
    assert len(records) == expected.records
    decoded = []
    for record in records:
        if record.value is None:
            continue
        try:
            decoded.append(avro_decode(registry, record.value))
        except Exception:  # the one corrupt (truncated) record
            decoded.append(None)
    assert decoded.count(None) == 1
    ops = Counter(d["op"] for d in decoded if d is not None)
    assert sum(ops.values()) == expected.data_records and ops["r"] == 3
    assert ops["u"] >= 2 and ops["d"] >= 2 and ops["c"] >= 3


# --------------------------------------------------------------------------- bulk corpus


def test_bulk_corpus_is_deterministic_and_well_formed() -> None:
    first = list(bulk_corpus(3000, seed=7))
    assert first == list(bulk_corpus(3000, seed=7))
    assert first != list(bulk_corpus(3000, seed=8))
    ops: Counter[str] = Counter()
    offsets: dict[int, int] = defaultdict(int)
    last_commit = b""
    for i, record in enumerate(first):
        assert record.offset == offsets[record.partition]
        offsets[record.partition] += 1
        if record.value is None:
            ops["tombstone"] += 1
            previous = first[i - 1]
            assert payload(previous)["op"] == "d" and previous.key == record.key
            continue
        doc = payload(record)
        source = doc["source"]
        ops[doc["op"]] += 1
        commit = lsn_bytes(source["commit_lsn"])
        assert commit >= last_commit
        last_commit = commit
        if doc["op"] == "u":
            assert source["event_serial_no"] == 2
        else:
            assert source["event_serial_no"] in (1, 2)
        if doc["op"] == "c" and source["event_serial_no"] == 2:  # second half of a PK change
            d_doc = payload(first[i - 2])
            assert d_doc["op"] == "d" and d_doc["source"]["event_serial_no"] == 1
            assert d_doc["source"]["change_lsn"] == source["change_lsn"]
            assert d_doc["before"]["name"] == doc["after"]["name"]
    assert ops["tombstone"] == ops["d"]
    operations = 3000
    key_changes = sum(1 for r in first if r.value is not None and payload(r)["op"] == "c" and
                      payload(r)["source"]["event_serial_no"] == 2)
    assert abs(key_changes / operations - 0.05) < 0.02
    assert abs(ops["u"] / operations - 0.60) < 0.04
    assert abs((ops["d"] - key_changes) / operations - 0.15) < 0.03


@pytest.mark.parametrize("encoding", ["json-schema", "avro"])
def test_wide_corpus_has_twenty_mixed_columns(encoding: str) -> None:
    registry = InMemoryRegistry()
    records = list(bulk_corpus(200, table="wide", encoding=encoding,  # type: ignore[arg-type]
                               registrar=registry))
    value = next(r.value for r in records if r.value is not None)
    if encoding == "avro":
        after = avro_decode(registry, value)["after"]
    else:
        doc = json.loads(value)
        after = doc["payload"]["after"]
        value_fields = doc["schema"]["fields"][1]["fields"]
        types = {f["field"]: (f["type"], f.get("name")) for f in value_fields}
        assert types["c_money"] == ("bytes", "org.apache.kafka.connect.data.Decimal")
        assert types["c_datetime2"] == ("int64", "io.debezium.time.NanoTimestamp")
        assert types["c_time"] == ("int64", "io.debezium.time.NanoTime")
        assert types["c_tinyint"] == ("int16", None)
    assert len(after) == 20
    assert re.fullmatch(r"[0-9A-F-]{36}", after["c_uuid"] or "0" * 36)


def test_large_bulk_corpus_accounts_for_every_operation() -> None:
    # No clock here: throughput belongs to scripts/bench/core. This checks, on a corpus large
    # enough for every kind of operation to occur thousands of times, the bulk_corpus contract
    # (its docstring and scripts/bench/README.md): each of the N operations is one record, plus
    # a tombstone after each delete, plus the `c` (serial 2) of each primary-key change.
    n_events = 50_000
    records = list(bulk_corpus(n_events))
    ops: Counter[str] = Counter()
    offsets: dict[int, int] = defaultdict(int)
    key_changes = 0
    for record in records:
        assert record.offset == offsets[record.partition]
        offsets[record.partition] += 1
        if record.value is None:
            ops["tombstone"] += 1
            continue
        doc = payload(record)
        ops[doc["op"]] += 1
        if doc["op"] == "c" and doc["source"]["event_serial_no"] == 2:
            key_changes += 1
    assert ops["tombstone"] == ops["d"]
    assert ops["c"] + ops["u"] + ops["d"] - key_changes == n_events
    assert len(records) == n_events + ops["tombstone"] + key_changes
    assert abs(len(records) / n_events - 1.25) < 0.01  # "N operations give about 1.25 N records"
