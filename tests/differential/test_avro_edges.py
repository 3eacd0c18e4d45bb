"""Confluent Avro edge cases through both cores.

**Named types**: a type name means what the Avro specification says.

Avro 1.11 "Names": a dotted name is a full name; a bare name is in the namespace of the
innermost enclosing named type, which is its ``namespace`` attribute, or the part of a dotted
``name`` before the last dot, or the namespace it inherits. fastavro, which reads the data,
resolves names so (``fastavro._schema_py.schema_name`` and ``_parse_schema``). Each schema
below defines a row record that reads ``amount`` as a Connect decimal (scale 2) and, under the
same short name in another namespace, one that reads it as plain bytes; ``before``/``after``
name the first. Both cores must agree and write the decimal.

**Non-finite floats**: Avro can carry NaN and ±infinity (SQL Server cannot store them, so
only other producers send them). Canonical JSON writes them as null, and a record's
``changed_columns`` names the columns whose written values differ.
"""

from __future__ import annotations

import copy
import io
import json
import struct
from typing import Any

import fastavro
import pytest

from debezium_bridge.core import native as native_core
from debezium_bridge.formats.debezium.avro import strip_logical_types
from debezium_bridge.model.records import RawRecord
from tests.differential.streams import Stream
from tests.differential.test_cores import run_both

TOPIC = "server1.testDB.dbo.t"
SOURCE = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.sqlserver",
          "fields": [*({"name": n, "type": "string"}
                       for n in ("version", "connector", "name", "db", "schema", "table")),
                     {"name": "ts_ms", "type": "long"},
                     {"name": "snapshot", "type": ["null", "string"], "default": None},
                     {"name": "change_lsn", "type": ["null", "string"], "default": None},
                     {"name": "commit_lsn", "type": ["null", "string"], "default": None},
                     {"name": "event_serial_no", "type": ["null", "long"], "default": None}]}
DECIMAL = {"type": "bytes", "connect.name": "org.apache.kafka.connect.data.Decimal",
           "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}}
KEY = {"type": "record", "name": "Key", "namespace": TOPIC,
       "fields": [{"name": "id", "type": "int"}]}


def row(name: str, amount: Any, **namespace: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, **namespace,
            "fields": [{"name": "id", "type": "int"}, {"name": "amount", "type": amount}]}


def envelope(name: str, defined: list[Any], image: str, **namespace: Any) -> dict[str, Any]:
    """An envelope that defines ``defined`` in fields of its own, then names ``image`` as the
    type of ``before``/``after``."""
    return {"type": "record", "name": name, **namespace, "fields": [
        *({"name": f"x{i}", "type": ["null", d], "default": None} for i, d in enumerate(defined)),
        {"name": "before", "type": ["null", image], "default": None},
        {"name": "after", "type": ["null", image], "default": None},
        {"name": "source", "type": SOURCE}, {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None}]}


RIGHT = row("Value", DECIMAL)
ROW_ENVELOPE = envelope("Envelope", [], "Value", namespace=TOPIC)
ROW_ENVELOPE["fields"][0]["type"] = ["null", RIGHT]
"""An envelope whose rows are ``RIGHT`` (in the envelope's namespace)."""
CASES = {
    # a bare name in the envelope's namespace, whichever "Value" comes last
    "bare name, other namespace after": envelope(
        "Envelope", [RIGHT, row("Value", "bytes", namespace="other")], "Value", namespace="ns1"),
    "bare name, other namespace before": envelope(
        "Envelope", [row("Value", "bytes", namespace="other"), RIGHT], "Value", namespace="ns1"),
    # a dotted name gives the namespace of what it defines
    "dotted envelope name, full reference": envelope(
        "a.b.Envelope", [RIGHT, row("Value", "bytes", namespace="other")], "a.b.Value"),
    "dotted envelope name, bare reference": envelope(
        "a.b.Envelope", [row("Value", "bytes", namespace="other"), RIGHT], "Value"),
    "dotted row name in a namespace": envelope(
        "Envelope", [row("a.Value", DECIMAL), row("Value", "bytes")], "a.Value",
        namespace="ns1"),
    # "namespace": null is no namespace (fastavro), not the enclosing one
    "null namespace": envelope(
        "Envelope", [row("Value", "bytes", namespace=None), RIGHT], "Value", namespace="ns1"),
    # a column's named type, resolved in the row record's namespace
    "named column type": envelope(
        "Envelope", [{"type": "fixed", "name": "Money", "namespace": "other", "size": 2},
                     {"type": "fixed", "name": "Money", "size": 2, **{
                         k: v for k, v in DECIMAL.items() if k != "type"}},
                     row("Value", "Money")], "Value", namespace="ns1"),
}
SOURCE_VALUES = {"version": "2.7.3.Final", "connector": "sqlserver", "name": "server1",
                 "db": "testDB", "schema": "dbo", "table": "t", "ts_ms": 1700000000000,
                 "snapshot": "false", "change_lsn": "00000027:00000758:0003",
                 "commit_lsn": "00000027:00000758:0005", "event_serial_no": 1}


@pytest.fixture(autouse=True)
def _no_forced_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)


def confluent(schema_id: int, schema: Any, datum: Any) -> bytes:
    body = io.BytesIO()
    parsed = fastavro.parse_schema(strip_logical_types(copy.deepcopy(schema)))
    fastavro.schemaless_writer(body, parsed, datum)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


@pytest.mark.parametrize("case", sorted(CASES))
def test_type_names_resolve_as_the_avro_specification_says(case: str) -> None:
    schema = CASES[case]
    after = {"id": 1, "amount": (12345).to_bytes(2, "big", signed=True)}
    datum = {"before": None, "after": after, "source": SOURCE_VALUES, "op": "c", "ts_ms": 1}
    value = confluent(1, schema, {**{f["name"]: None for f in schema["fields"][:-5]}, **datum})
    records = [RawRecord(TOPIC, 0, 0, None, confluent(2, KEY, {"id": 1}), value)]
    stream = Stream(records, [(TOPIC, 0)], {1: schema, 2: KEY}, "bytes")
    python, native = run_both(stream)
    assert native[4] == 0, "the native core declined the record"
    assert not python[1]
    assert json.loads(python[0])["after"] == {"id": 1, "amount": "123.45"}


FLOATS = {"type": "record", "name": "Envelope", "namespace": TOPIC, "fields": [
    {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "int"}, {"name": "f", "type": ["null", "double"]},
        {"name": "r", "type": ["null", "float"]}, {"name": "s", "type": "string"}]}]},
    {"name": "after", "type": ["null", "Value"]},
    {"name": "source", "type": SOURCE}, {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"], "default": None}]}
NAN, INF = float("nan"), float("inf")
UPDATES = [(NAN, NAN), (NAN, None), (None, NAN), (INF, -INF), (INF, NAN), (1.5, NAN),
           (NAN, 1.5), (None, 2.5), (1.5, 1.5)]


def test_changed_columns_are_those_written_differently() -> None:
    """(The native core leaves records with non-finite floats to the Python decoder; their
    events join its state, where it writes them and compares their images itself.)"""
    records = []
    for offset, (old, new) in enumerate(UPDATES):
        before = {"id": 1, "f": old, "r": old, "s": "a"}
        after = {"id": 1, "f": new, "r": new, "s": "b" if offset % 2 else "a"}
        source = {**SOURCE_VALUES, "event_serial_no": 2,
                  "change_lsn": f"00000027:00000758:{offset + 3:04x}",
                  "commit_lsn": f"00000027:00000758:{offset + 3:04x}"}
        value = confluent(1, FLOATS, {"before": before, "after": after, "source": source,
                                      "op": "u", "ts_ms": 1})
        records.append(RawRecord(TOPIC, 0, offset, None, confluent(2, KEY, {"id": 1}), value))
    stream = Stream(records, [(TOPIC, 0)], {1: FLOATS, 2: KEY}, "bytes")
    python = run_both(stream)[0]
    lines = [json.loads(line) for line in python[0].splitlines()]
    assert len(lines) == len(UPDATES) and not python[1]
    for line in lines:
        before, after = line["before"], line["after"]
        assert line["changed_columns"] == [c for c in after if before[c] != after[c]], line


def avro_json(schema: Any, datum: Any) -> bytes:
    """A datum as Avro's JSON encoding writes it (``kafka-avro-console-consumer``)."""
    out = io.StringIO()
    fastavro.json_writer(out, fastavro.parse_schema(strip_logical_types(copy.deepcopy(schema))),
                         [datum])
    return out.getvalue().strip().encode()


def test_avro_json_keys_are_converted_as_their_rows() -> None:
    """An Avro-JSON dump read with the registry's subjects: the key, which carries no schema,
    is converted by the value's row schema, as the row is. (Avro-JSON is the Python decoder's
    on both cores.)"""
    key_schema = {"type": "record", "name": "Key", "namespace": TOPIC, "fields": [
        {"name": "id", "type": "int"}, {"name": "amount", "type": DECIMAL}]}
    schema = ROW_ENVELOPE
    amount = (12345).to_bytes(2, "big", signed=True)
    after = {"id": 1, "amount": amount}
    value = avro_json(schema, {"before": None, "after": after, "source": SOURCE_VALUES,
                               "op": "c", "ts_ms": 1})
    key = avro_json(key_schema, {"id": 1, "amount": amount})
    records = [RawRecord(TOPIC, 0, 0, None, key, value)]
    subjects = {f"{TOPIC}-value": schema, f"{TOPIC}-key": key_schema}
    stream = Stream(records, [(TOPIC, 0)], subjects, "bytes")  # type: ignore[arg-type]
    python = run_both(stream)[0]
    record = json.loads(python[0])
    assert record["key"] == record["after"] == {"id": 1, "amount": "123.45"}


def test_avro_cloudevents_are_read_as_their_json_form_is() -> None:
    """CloudEventsConverter with ``serializer.type=avro`` (reference §7): the Avro envelope of
    the attributes, ``iodebezium*`` extensions (INT64 source fields as strings) and ``data``, a
    record of just ``before`` and ``after``; its rows are converted by ``data``'s schema."""
    data = {"type": "record", "name": "Data", "namespace": "io.debezium.connector.sqlserver",
            "fields": [{"name": "before", "type": ["null", dict(RIGHT, namespace=TOPIC)],
                        "default": None},
                       {"name": "after", "type": ["null", f"{TOPIC}.Value"], "default": None}]}
    text = ("id", "source", "specversion", "type", "time", "datacontenttype", "iodebeziumop",
            "iodebeziumversion", "iodebeziumconnector", "iodebeziumname", "iodebeziumtsms",
            "iodebeziumsnapshot", "iodebeziumdb", "iodebeziumschema", "iodebeziumtable",
            "iodebeziumchangelsn", "iodebeziumcommitlsn", "iodebeziumeventserialno")
    schema = {"type": "record", "name": "Envelope", "namespace": "server1.testDB.CloudEvents",
              "fields": [*({"name": n, "type": "string"} for n in text),
                         {"name": "data", "type": data}]}
    src = SOURCE_VALUES
    datum = {"id": "name:server1;change_lsn:00000027:00000758:0003;"
                   "commit_lsn:00000027:00000758:0005;event_serial_no:1",
             "source": "/debezium/sqlserver/server1", "specversion": "1.0",
             "type": "io.debezium.connector.sqlserver.DataChangeEvent",
             "time": "2023-11-14T22:13:20.000Z", "datacontenttype": "application/avro",
             "iodebeziumop": "c", **{f"iodebezium{k.replace('_', '')}": str(src[k]) for k in (
                 "version", "connector", "name", "ts_ms", "snapshot", "db", "schema", "table",
                 "change_lsn", "commit_lsn", "event_serial_no")},
             "data": {"before": None,
                      "after": {"id": 1, "amount": (12345).to_bytes(2, "big", signed=True)}}}
    records = [RawRecord(TOPIC, 0, 0, None, confluent(2, KEY, {"id": 1}),
                         confluent(1, schema, datum))]
    stream = Stream(records, [(TOPIC, 0)], {1: schema, 2: KEY}, "bytes")
    python = run_both(stream)[0]
    assert not python[1]
    record = json.loads(python[0])
    assert (record["op"], record["key"], record["after"]) == (
        "insert", {"id": 1}, {"id": 1, "amount": "123.45"})
    assert record["position"] == {"commit_lsn": src["commit_lsn"],
                                  "change_lsn": src["change_lsn"], "event_serial_no": 1}


@pytest.mark.parametrize("headers", ["json", "avro"])
def test_avro_key_changes_are_paired_by_their_headers(headers: str) -> None:
    """Two primary-key changes at one position (serial 2 on both halves, Debezium's Case B)
    are told apart only by the ``__debezium.newkey``/``oldkey`` headers (docs/concepts.md),
    whatever the encoding of values and headers."""
    source = {**SOURCE_VALUES, "event_serial_no": 2}

    def value(op: str, before: int | None, after: int | None) -> bytes:
        image = {None: None, **{i: {"id": i, "amount": b"\x01"} for i in (1, 2, 3, 4)}}
        return confluent(1, ROW_ENVELOPE, {"before": image[before], "after": image[after],
                                           "source": source, "op": op, "ts_ms": 1})

    def key(i: int) -> bytes:
        return confluent(2, KEY, {"id": i})

    def header(i: int) -> bytes:
        return json.dumps({"id": i}).encode() if headers == "json" else key(i)

    records = [
        RawRecord(TOPIC, 0, 0, None, key(1), value("d", 1, None),
                  (("__debezium.newkey", header(3)),)),
        RawRecord(TOPIC, 0, 1, None, key(2), value("d", 2, None),
                  (("__debezium.newkey", header(4)),)),
        RawRecord(TOPIC, 1, 0, None, key(4), value("c", None, 4),
                  (("__debezium.oldkey", header(2)),)),
        RawRecord(TOPIC, 1, 1, None, key(3), value("c", None, 3),
                  (("__debezium.oldkey", header(1)),)),
    ]
    stream = Stream(records, [(TOPIC, 0), (TOPIC, 1)], {1: ROW_ENVELOPE, 2: KEY}, "bytes")
    python, native = run_both(stream, batch=1000, expect=True)
    assert native[4] == 0, "the native core declined records"
    pairs = sorted((r["old_key"]["id"], r["key"]["id"])
                   for r in map(json.loads, python[0].splitlines()) if r["op"] == "update")
    assert pairs == [(1, 3), (2, 4)]


def test_avro_string_mode_decimals_are_plain() -> None:
    """``decimal.handling.mode=string`` through the AvroConverter: a string column with the
    propagated source type, E-notation from connectors before 1.9 (``BigDecimal.toString()``;
    DBZ-4730) written as the plain decimal of the same digits and scale (Javadoc examples
    [123, 10] -> ``1.23E-8``, [0, 10] -> ``0E-10``)."""
    dec = {"type": "string", "connect.parameters": {
        "__debezium.source.column.type": "NUMERIC", "__debezium.source.column.scale": "12"}}
    schema = envelope("Envelope", [row("Value", ["null", dec])], "Value", namespace=TOPIC)
    texts = {"1.23E-8": "0.0000000123", "0E-10": "0.0000000000", "42.000000000000": None}
    records = []
    for offset, text in enumerate(texts):
        source = {**SOURCE_VALUES, "change_lsn": f"00000027:00000758:{offset + 3:04x}",
                  "commit_lsn": f"00000027:00000758:{offset + 3:04x}"}
        value = confluent(1, schema, {"before": None, "after": {"id": offset, "amount": text},
                                      "source": source, "op": "c", "ts_ms": 1})
        records.append(RawRecord(TOPIC, 0, offset, None, confluent(2, KEY, {"id": offset}),
                                 value))
    python, native = run_both(Stream(records, [(TOPIC, 0)], {1: schema, 2: KEY}, "bytes"))
    assert native[4] == 0, "the native core declined the records"
    amounts = [json.loads(line)["after"]["amount"] for line in python[0].splitlines()]
    assert not python[1] and amounts == [want or text for text, want in texts.items()]


def test_avro_json_values_of_another_schema_version_are_refused() -> None:
    """An Avro-JSON dump carries no schema ids, so its rows are read by the subject's latest
    schema. Avro's JSON encoding names each union branch (``{"int": 19000}``): a column whose
    branch is not the latest schema's type was written with another version (here ``b``, an
    ``io.debezium.time.Date`` int, later a ``MicroTimestamp`` long) and is refused, not read
    as the other type; the record written with the latest version is read."""
    def version(b_type: dict[str, Any]) -> dict[str, Any]:
        value = {"type": "record", "name": "Value", "fields": [
            {"name": "id", "type": "int"}, {"name": "b", "type": ["null", b_type]}]}
        return envelope("Envelope", [value], "Value", namespace=TOPIC)
    old = version({"type": "int", "connect.name": "io.debezium.time.Date"})
    latest = version({"type": "long", "connect.name": "io.debezium.time.MicroTimestamp"})
    values = [avro_json(old, {"before": None, "after": {"id": 1, "b": 19000},
                              "source": SOURCE_VALUES, "op": "c", "ts_ms": 1}),
              avro_json(latest, {"before": None, "after": {"id": 2, "b": 1700000000123456},
                                 "source": {**SOURCE_VALUES,
                                            "commit_lsn": "00000027:00000758:0006"},
                                 "op": "c", "ts_ms": 1})]
    records = [RawRecord(TOPIC, 0, n, None, f'{{"id":{n + 1}}}'.encode(), value)
               for n, value in enumerate(values)]
    stream = Stream(records, [(TOPIC, 0)], {f"{TOPIC}-value": latest}, "bytes")  # type: ignore[dict-item]
    lines, dead = run_both(stream)[0][:2]
    assert [json.loads(line)["after"] for line in lines.splitlines()] == [
        {"id": 2, "b": "2023-11-14T22:13:20.123456"}]
    assert [d[2] for d in dead] == [0] and "union branch 'int'" in dead[0][-1]
