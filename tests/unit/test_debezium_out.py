"""Debezium envelopes from canonical records (``encode.debezium.DebeziumWriter``, SPEC §5.3).

Expected shapes come from the Debezium SQL Server connector documentation
(https://debezium.io/documentation/reference/stable/connectors/sqlserver.html) as summarized in
the reference ``debezium-sqlserver.md`` (envelope §1.1, source §1.2, key changes §2.3: "delete,
tombstone, insert" with ``event_serial_no`` 1/2, schema names ``<topic>.Envelope/Value/Key``),
and every output is read back with the core's own Debezium decoder, which must give the
canonical records the writer was given.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from debezium_bridge.cli.sink import FileSink
from debezium_bridge.clients.registry import RegistrySchemaResolver, registry_registrar
from debezium_bridge.core import Translator
from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.errors import EncodeError
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.debezium.avro import AvroDecoder
from debezium_bridge.formats.debezium.decode import Decoder
from debezium_bridge.formats.debezium.registry import FileSchemaResolver, InMemoryRegistry
from debezium_bridge.formats.debezium.writer import DebeziumOutOptions, DebeziumWriter
from debezium_bridge.formats.dumps import read_dump
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.records import RawRecord
from debezium_bridge.output import Output
from debezium_bridge.partitioner import partition_for
from debezium_bridge.testing.simulator import (
    _DEMO_ROWS,
    CUSTOMERS,
    CdcSimulator,
    Insert,
    demo,
)
from tests.support.registry import SchemaRegistryServer
from tests.unit.ces_support import PROPAGATE, as_records, ces_values, comparable, run

DEMO_ROWS = {row["id"]: row for row in _DEMO_ROWS}


@pytest.fixture(scope="module")
def demo_changes() -> tuple[list[ChangeRecord], Pipeline, Any]:
    records, expected = demo()
    changes, _, pipeline = run(records)
    return changes, pipeline, expected


def decode_back(records: list[RawRecord], decoder: Decoder | None = None
                ) -> list[ChangeRecord]:
    translator = Translator(decoder=decoder)
    out = list(translator.translate(records))
    assert all(isinstance(o, ChangeRecord) for o in out), [o for o in out]
    assert translator.counters.balanced
    return out  # type: ignore[return-value]


def same(a: list[ChangeRecord], b: list[ChangeRecord], *drop: str) -> None:
    assert [comparable(r, "lineage", *drop) for r in b] == \
        [comparable(r, "lineage", *drop) for r in a]


@pytest.mark.parametrize("json_schemas", [True, False])
def test_debezium_round_trip_is_exact(demo_changes, json_schemas: bool) -> None:
    changes, pipeline, _ = demo_changes
    writer = DebeziumWriter(DebeziumOutOptions(json_schemas=json_schemas), pipeline.catalog)
    out = [r for c in changes for r in writer.encode(c)]
    if json_schemas:
        same(changes, decode_back(out))
    else:  # schema-less JSON: values pass through undecoded (SPEC §3.1)
        back = decode_back(out)
        assert [(r.op, r.key, r.old_key) for r in back] == [
            (r.op, r.key, r.old_key) for r in changes]
        assert [r.after and r.after["name"] for r in back] == [
            r.after and r.after["name"] for r in changes]
        assert back[0].after is not None and back[0].after["balance"] != "100.00"  # raw base64


def test_envelope_shape(demo_changes) -> None:
    changes, pipeline, _ = demo_changes
    writer = DebeziumWriter(catalog=pipeline.catalog)
    first = writer.encode(changes[0])[0]
    topic = "server1.testDB.dbo.customers"  # <topic.prefix>.<db>.<schema>.<table>
    assert first.topic == topic
    value, key = json.loads(first.value), json.loads(first.key)
    schema = value["schema"]
    assert schema["name"] == f"{topic}.Envelope" and key["schema"]["name"] == f"{topic}.Key"
    fields = {f["field"]: f for f in schema["fields"]}
    assert fields["after"]["name"] == f"{topic}.Value"
    assert fields["source"]["name"] == "io.debezium.connector.sqlserver.Source"
    payload = value["payload"]
    source = payload["source"]
    assert (source["connector"], source["name"], source["db"], source["schema"],
            source["table"]) == ("sqlserver", "server1", "testDB", "dbo", "customers")
    assert (payload["op"], source["snapshot"]) == ("r", changes[0].snapshot)
    assert source["commit_lsn"] == changes[0].position.commit_lsn
    # propagated source types (on by default for this writer): the declared column types
    params = {f["field"]: f.get("parameters", {}) for f in fields["after"]["fields"]}
    assert params["id"]["__debezium.source.column.type"] == "INT"
    assert params["balance"]["__debezium.source.column.type"] == "DECIMAL"


def test_primary_key_change_is_delete_tombstone_create(demo_changes) -> None:
    changes, pipeline, _ = demo_changes
    (change,) = [c for c in changes if c.key_changed]
    records = DebeziumWriter(catalog=pipeline.catalog).encode(change)
    assert [None if r.value is None else json.loads(r.value)["payload"]["op"]
            for r in records] == ["d", None, "c"]
    d, tombstone, c = records
    assert json.loads(d.key)["payload"] == change.old_key
    assert tombstone.key == d.key and json.loads(c.key)["payload"] == change.key
    sources = [json.loads(r.value)["payload"]["source"] for r in (d, c)]
    assert [s["event_serial_no"] for s in sources] == [1, 2]
    assert {(s["commit_lsn"], s["change_lsn"]) for s in sources} == {
        (change.position.commit_lsn, change.position.change_lsn)}
    (merged,) = decode_back(records)
    assert merged.key_changed and merged.old_key == change.old_key and merged.key == change.key


def test_tombstones_and_partitions(demo_changes) -> None:
    changes, pipeline, _ = demo_changes
    plain = [r for c in changes for r in DebeziumWriter(catalog=pipeline.catalog).encode(c)]
    assert sum(r.value is None for r in plain) == sum(
        c.op == "delete" or c.key_changed for c in changes)
    none = DebeziumWriter(DebeziumOutOptions(tombstones=False), pipeline.catalog)
    assert all(r.value is not None for c in changes for r in none.encode(c))
    out = io.BytesIO()  # the CLI's lossless output over 3 partitions
    FileSink(out, "lossless", partitions=3).write(
        Output(["debezium"], catalog=pipeline.catalog).encode_many(changes))
    records = list(read_dump(io.BytesIO(out.getvalue())))
    assert len(records) == len(plain)
    for record in records:  # Kafka's default partitioner on the key bytes
        assert record.partition == partition_for(record.key, 3)
    offsets: dict[int, list[int]] = {}
    for record in records:
        offsets.setdefault(record.partition, []).append(record.offset)
    assert all(o == list(range(len(o))) for o in offsets.values())


def test_unavailable_lob_is_written_as_the_placeholder(demo_changes) -> None:
    changes, pipeline, _ = demo_changes
    (change,) = [c for c in changes if c.unavailable_columns]
    (record,) = DebeziumWriter(catalog=pipeline.catalog).encode(change)
    payload = json.loads(record.value)["payload"]
    assert payload["after"]["notes"] == "__debezium_unavailable_value"
    (back,) = decode_back([record])
    assert back.unavailable_columns == change.unavailable_columns


def test_older_debezium_shape(demo_changes) -> None:
    changes, pipeline, _ = demo_changes
    writer = DebeziumWriter(DebeziumOutOptions(version="1.9.7.Final"), pipeline.catalog)
    records = [r for c in changes for r in writer.encode(c)]
    assert records[0].topic == "server1.dbo.customers"  # 1.x topics have no database
    assert "version" not in json.loads(records[0].value)["schema"]
    same(changes, decode_back(records), "source")


def test_avro_with_registry_round_trip(demo_changes) -> None:
    changes, pipeline, _ = demo_changes
    with SchemaRegistryServer(credentials=("u", "p")) as server:
        conf = {"url": server.url, "basic.auth.user.info": "u:p"}
        writer = DebeziumWriter(catalog=pipeline.catalog, encoding="avro",
                                registrar=registry_registrar(conf))
        records = [r for c in changes for r in writer.encode(c)]
        topic = "server1.testDB.dbo.customers"
        assert set(server.subjects) == {f"{topic}-value", f"{topic}-key"}
        assert all(r.value is None or r.value[:1] == b"\x00" for r in records)
        decoder = Decoder(avro=AvroDecoder(RegistrySchemaResolver(conf)))
        same(changes, decode_back(records, decoder))


def test_avro_with_in_memory_ids(demo_changes) -> None:
    changes, pipeline, _ = demo_changes
    registry = InMemoryRegistry()
    writer = DebeziumWriter(catalog=pipeline.catalog, encoding="avro", registrar=registry)
    records = [r for c in changes for r in writer.encode(c)]
    resolver = FileSchemaResolver({str(k): v for k, v in registry.schemas.items()})
    same(changes, decode_back(records, Decoder(avro=AvroDecoder(resolver))))


def ces_input() -> tuple[list[ChangeRecord], list[ChangeRecord]]:
    """(canonical records decoded from CES, the same after Debezium output + decoding)."""
    sim = CdcSimulator([CUSTOMERS], modes=PROPAGATE, transaction_metadata=True)
    sim.snapshot({"customers": [DEMO_ROWS[1]]})
    sim.commit([Insert("customers", DEMO_ROWS[2]), Insert("customers", DEMO_ROWS[3])])
    from debezium_bridge.testing.simulator import KeyChange, Update

    sim.commit([Update("customers", DEMO_ROWS[2], DEMO_ROWS[2] | {"balance": "1.50"}),
                KeyChange("customers", DEMO_ROWS[3], DEMO_ROWS[3] | {"id": 33})])
    sim.finish()
    first, _, pipeline = run(sim.records)
    options = CesOptions(include_old_lob_values=True)
    from_ces, _, ces_pipeline = run(as_records(ces_values(first, pipeline, options)),
                                    Pipeline(ces_options=options))
    writer = DebeziumWriter(catalog=ces_pipeline.catalog)
    records = [r for c in from_ces for r in writer.encode(c)]
    return from_ces, decode_back(records)


def test_ces_to_debezium_decodes_to_the_same_canonical_records() -> None:
    from_ces, back = ces_input()
    assert len(from_ces) == 5 and any(r.key_changed for r in from_ces)
    # a Debezium envelope has no place for the CES begin LSN, and CES carries no connector
    # version (the writer fills in the one whose shape it writes)
    same(from_ces, back, "source", "tx.begin_lsn")
    assert {r.source.version for r in back} == {"3.4.0.Final"}
    assert [(r.source.connector, r.source.name) for r in back] == \
        [(r.source.connector, r.source.name) for r in from_ces]


def test_what_cannot_be_encoded() -> None:
    records, _ = demo()
    changes, _, pipeline = run(records)
    import msgspec

    writer = DebeziumWriter(catalog=pipeline.catalog)
    with pytest.raises(EncodeError, match="commit time"):
        writer.encode(msgspec.structs.replace(changes[0], commit_ts=None))
    assert writer.encode(msgspec.structs.replace(changes[0], op="truncate")) == []
    assert (writer.counters.errors, writer.counters.skipped) == (1, 1)
    with pytest.raises(Exception, match="registry"):
        DebeziumWriter(encoding="avro")


def test_a_value_of_an_older_table_version_is_refused_not_cut() -> None:
    """``datetime2(7)`` changed to ``datetime2(3)`` under the same column names: the writer
    types columns by the newest version read with those names (docs/canonical.md, known limit),
    so the older record's 7 fraction digits meet ``io.debezium.time.Timestamp`` (milliseconds,
    the connector's type for ``datetime2(0..3)``). It cannot hold them: an encode error (the
    output's dead letter), never a value cut to milliseconds."""
    from debezium_bridge.formats.debezium.encode import DebeziumEncoder, TableSpec
    from debezium_bridge.formats.debezium.sqltypes import ConnectorModes, SqlColumn
    from debezium_bridge.testing.simulator import format_lsn

    records = []
    for n, (sql_type, stamp) in enumerate([("datetime2(7)", "2023-11-14T22:13:20.1234567"),
                                           ("datetime2(3)", "2023-11-14T22:13:20.123")], 1):
        table = TableSpec("testDB", "dbo", "t", ("id",), (SqlColumn("id", "int", nullable=False),
                                                           SqlColumn("b", sql_type)))
        encoder = DebeziumEncoder(table, "server1",
                                  modes=ConnectorModes(propagate_source_types=True),
                                  encoding="json-schema", version="2.7.3.Final")
        lsn = format_lsn(0x2500000D080001 + 16 * n)
        source = encoder.source(ts_ms=1700000000000 + n, commit_lsn=lsn, change_lsn=lsn,
                                event_serial_no=1)
        value = encoder.encode_envelope("c", None, encoder.row({"id": n, "b": stamp}), source,
                                        None, 1)
        records.append(RawRecord(encoder.topic, 0, n - 1, 1, encoder.encode_key({"id": n}), value))
    changes, _, pipeline = run(records)
    assert [c.after["b"] for c in changes if c.after] == ["2023-11-14T22:13:20.1234567",
                                                          "2023-11-14T22:13:20.123"]
    writer = DebeziumWriter(catalog=pipeline.catalog)
    with pytest.raises(EncodeError, match="more fraction digits"):
        writer.encode(changes[0])
    (message,) = [m for m in writer.encode(changes[1]) if m.value]
    assert json.loads(message.value)["payload"]["after"]["b"] == 1700000000123
