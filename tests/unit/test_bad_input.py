"""Malformed input never stops the run (SPEC §5.4).

Each malformed record goes through ``Translator.process``. For each one the tests check that:

* no exception escapes, and exactly one :class:`DeadLetter` comes out with a sensible ``stage``
  and a message that names the problem;
* ``DeadLetter.to_record()`` keeps the original key, value and headers byte for byte and appends
  the ``__connect.errors.*`` headers with the right values;
* the conservation counters stay balanced, and a valid record processed next still translates.

Valid events are built by hand below, shaped like reference §1 (SQL Server ``source`` block).
"""

from __future__ import annotations

import base64
import copy
import decimal
import importlib
import io
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debezium_bridge.core.translator import Translator
from debezium_bridge.formats.debezium.avro import AvroDecoder, strip_logical_types
from debezium_bridge.formats.debezium.decode import Decoder
from debezium_bridge.formats.debezium.registry import FileSchemaResolver
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import Header, RawRecord

TOPIC = "server1.testDB.dbo.customers"
PARTITION = 3
OFFSET = 41
HEADERS: tuple[Header, ...] = (
    ("trace-id", b"\x00\x01\xfe binary"),
    ("null-header", None),
    ("trace-id", b"repeated name"),
)
REQUIRED_ERROR_HEADERS = ("topic", "partition", "offset", "stage", "exception.class.name",
                          "exception.message")

# --- valid events, built by hand (reference §1.1/§1.2) -----------------------------------------

COMMIT = "00000027:00000758:0005"
CHANGE = "00000027:00000758:0003"


def source(**overrides: Any) -> dict[str, Any]:
    block = {
        "version": "2.7.3.Final", "connector": "sqlserver", "name": "server1",
        "ts_ms": 1_700_000_000_123, "snapshot": "false", "db": "testDB", "sequence": None,
        "schema": "dbo", "table": "customers", "change_lsn": CHANGE, "commit_lsn": COMMIT,
        "event_serial_no": 1,
    }
    block.update(overrides)
    return block


def envelope(**overrides: Any) -> dict[str, Any]:
    env: dict[str, Any] = {
        "before": None,
        "after": {"id": 1, "amount": "AMg="},  # amount: Decimal(10,2) 2.00 as base64
        "source": source(),
        "transaction": None,
        "op": "c",
        "ts_ms": 1_700_000_000_999,
    }
    env.update(overrides)
    return env


def without(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != name}


def schemaless(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


ROW_FIELDS: list[dict[str, Any]] = [
    {"type": "int32", "optional": False, "field": "id"},
    {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
     "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"},
     "field": "amount"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.NanoTimestamp", "version": 1,
     "field": "updated"},
    {"type": "int32", "optional": True, "name": "io.debezium.time.Date", "version": 1,
     "field": "born"},
    {"type": "int64", "optional": True, "name": "io.debezium.time.NanoTime", "version": 1,
     "field": "opens"},
]


def envelope_schema() -> dict[str, Any]:
    row = {"type": "struct", "optional": True, "name": f"{TOPIC}.Value", "fields": ROW_FIELDS}
    return {
        "type": "struct", "optional": False, "name": f"{TOPIC}.Envelope", "version": 1,
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {"type": "struct", "optional": False, "field": "source",
             "name": "io.debezium.connector.sqlserver.Source", "fields": [
                 {"type": "string", "optional": False, "field": "version"},
                 {"type": "string", "optional": False, "field": "connector"},
                 {"type": "string", "optional": False, "field": "name"},
                 {"type": "int64", "optional": False, "field": "ts_ms"},
                 {"type": "string", "optional": True, "name": "io.debezium.data.Enum",
                  "version": 1, "parameters": {"allowed": "true,last,false,incremental"},
                  "default": "false", "field": "snapshot"},
                 {"type": "string", "optional": False, "field": "db"},
                 {"type": "string", "optional": True, "field": "sequence"},
                 {"type": "string", "optional": False, "field": "schema"},
                 {"type": "string", "optional": False, "field": "table"},
                 {"type": "string", "optional": True, "field": "change_lsn"},
                 {"type": "string", "optional": True, "field": "commit_lsn"},
                 {"type": "int64", "optional": True, "field": "event_serial_no"}]},
            {"type": "struct", "optional": True, "name": "event.block", "version": 1,
             "field": "transaction", "fields": [
                 {"type": "string", "optional": False, "field": "id"},
                 {"type": "int64", "optional": False, "field": "total_order"},
                 {"type": "int64", "optional": False, "field": "data_collection_order"}]},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


def schemaful(payload: Any, schema: Any = None, *, pretty: bool = False) -> bytes:
    doc = {"schema": envelope_schema() if schema is None else schema, "payload": payload}
    if pretty:
        return json.dumps(doc, indent=2).encode()
    return json.dumps(doc, separators=(",", ":")).encode()


KEY_SCHEMA = {"type": "struct", "optional": False, "name": f"{TOPIC}.Key",
              "fields": [{"type": "int32", "optional": False, "field": "id"}]}
GOOD_KEY = schemaless({"id": 1})

AVRO_SOURCE = {
    "type": "record", "name": "Source", "namespace": "io.debezium.connector.sqlserver",
    "connect.name": "io.debezium.connector.sqlserver.Source",
    "fields": [
        {"name": "version", "type": "string"}, {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"}, {"name": "ts_ms", "type": "long"},
        {"name": "snapshot", "type": [{"type": "string", "connect.version": 1,
                                        "connect.name": "io.debezium.data.Enum"}, "null"],
         "default": "false"},
        {"name": "db", "type": "string"},
        {"name": "sequence", "type": ["null", "string"], "default": None},
        {"name": "schema", "type": "string"}, {"name": "table", "type": "string"},
        {"name": "change_lsn", "type": ["null", "string"], "default": None},
        {"name": "commit_lsn", "type": ["null", "string"], "default": None},
        {"name": "event_serial_no", "type": ["null", "long"], "default": None},
    ],
}
AVRO_ENVELOPE = {
    "type": "record", "name": "Envelope", "namespace": TOPIC, "connect.name": f"{TOPIC}.Envelope",
    "fields": [
        {"name": "before", "type": ["null", {
            "type": "record", "name": "Value", "connect.name": f"{TOPIC}.Value",
            "fields": [
                {"name": "id", "type": "int"},
                {"name": "amount", "type": ["null", {
                    "type": "bytes", "scale": 2, "precision": 10, "logicalType": "decimal",
                    "connect.name": "org.apache.kafka.connect.data.Decimal",
                    "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}}],
                 "default": None},
            ]}], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": AVRO_SOURCE},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": None},
    ],
}
AVRO_KEY = {"type": "record", "name": "Key", "namespace": TOPIC, "connect.name": f"{TOPIC}.Key",
            "fields": [{"name": "id", "type": "int"}]}
AVRO_ID, AVRO_KEY_ID = 1, 2


def confluent(schema_id: int, schema: dict[str, Any], datum: Any) -> bytes:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(copy.deepcopy(schema)), datum)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


def avro_value(**overrides: Any) -> bytes:
    datum = {"before": None, "after": {"id": 1, "amount": decimal.Decimal("2.00")},
             "source": source(), "op": "c", "ts_ms": 1_700_000_000_999}
    datum.update(overrides)
    return confluent(AVRO_ID, AVRO_ENVELOPE, datum)


def avro_decoder() -> Decoder:
    resolver = FileSchemaResolver({str(AVRO_ID): AVRO_ENVELOPE, str(AVRO_KEY_ID): AVRO_KEY})
    return Decoder(avro=AvroDecoder(resolver))


def valid_followup(partition: int = PARTITION) -> RawRecord:
    """A valid event at a later position, processed after the bad one."""
    later = source(commit_lsn="00000028:00000100:0005", change_lsn="00000028:00000100:0002")
    return RawRecord(topic=TOPIC, partition=partition, offset=OFFSET + 1, key=schemaless({"id": 2}),
                     value=schemaless(envelope(after={"id": 2, "amount": "AMg="},
                                               source=later)))


# --- schemas that break the Connect rules (built like the connector's) ---------------------------

DECIMAL = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL = "io.debezium.data.VariableScaleDecimal"


def decimal_field(name: str = "amount", **parameters: str) -> dict[str, Any]:
    """A Connect Decimal field as JsonConverter writes it; ``parameters`` as given (so a test
    can leave ``scale`` out)."""
    return {"type": "bytes", "optional": True, "name": DECIMAL, "version": 1,
            "parameters": parameters, "field": name}


def with_row_fields(*fields: dict[str, Any]) -> dict[str, Any]:
    """The envelope schema with the row struct's fields replaced by ``id`` + ``fields``."""
    schema = envelope_schema()
    for side in schema["fields"][:2]:
        side["fields"] = [ROW_FIELDS[0], *fields]
    return schema


def avro_with_amount(amount_type: dict[str, Any]) -> dict[str, Any]:
    """The Avro envelope with another type for the ``amount`` column."""
    schema = copy.deepcopy(AVRO_ENVELOPE)
    schema["fields"][0]["type"][1]["fields"][1]["type"] = ["null", amount_type]
    return schema


AVRO_BAD_SCALE_ID, AVRO_NO_SCALE_ID = 3, 4
AVRO_BAD_SCALE = avro_with_amount({
    "type": "bytes", "scale": -10_000_000, "precision": 10, "logicalType": "decimal",
    "connect.name": DECIMAL, "connect.parameters": {"scale": "-10000000",
                                                     "connect.decimal.precision": "10"}})
AVRO_HUGE_SCALE = avro_with_amount({
    "type": "bytes", "scale": 10**9, "precision": 10, "logicalType": "decimal",
    "connect.name": DECIMAL, "connect.parameters": {"connect.decimal.precision": "10"}})


def avro_raw(schema_id: int, schema: dict[str, Any], amount: bytes) -> bytes:
    """A Confluent Avro value written without logical types (the scale is never used)."""
    datum = {"before": None, "after": {"id": 1, "amount": amount}, "source": source(),
             "op": "c", "ts_ms": 1_700_000_000_999}
    return confluent(schema_id, strip_logical_types(schema), datum)


def avro_decimal_decoder() -> Decoder:
    resolver = FileSchemaResolver({str(AVRO_ID): AVRO_ENVELOPE, str(AVRO_KEY_ID): AVRO_KEY,
                                   str(AVRO_BAD_SCALE_ID): AVRO_BAD_SCALE,
                                   str(AVRO_NO_SCALE_ID): AVRO_HUGE_SCALE})
    return Decoder(avro=AvroDecoder(resolver))



def typed_field(name: str, connect_type: str, **extra: Any) -> dict[str, Any]:
    return {"type": connect_type, "optional": True, "field": name, **extra}


def violating(column: str, connect_type: str, value: Any, **extra: Any) -> bytes:
    """A schema-ful event whose ``after`` holds ``value`` in a ``connect_type`` column."""
    return schemaful(envelope(after={"id": 1, column: value}),
                     with_row_fields(typed_field(column, connect_type, **extra)))


def table_schema_decoder() -> Decoder:
    """Schema-less JSON read with a table-schema file (``--table-schemas``) for the topic."""
    from debezium_bridge.formats.debezium.decode import DecodeOptions, table_schema_of

    schema = with_row_fields(typed_field("name", "string"), typed_field("big", "int64"),
                             decimal_field(scale="2", **{"connect.decimal.precision": "10"}))
    return Decoder(DecodeOptions(table_schemas={TOPIC: table_schema_of(schema)}))


AVRO_INT16_ID = 5
AVRO_INT16 = avro_with_amount({"type": "int", "connect.type": "int16"})


def avro_int16_decoder() -> Decoder:
    resolver = FileSchemaResolver({str(AVRO_INT16_ID): AVRO_INT16, str(AVRO_KEY_ID): AVRO_KEY})
    return Decoder(avro=AvroDecoder(resolver))



AVRO_NULLS_ID = 6
# Avro schemas with a malformed Connect annotation or an empty union for ``amount``, by id;
# their records are written with ``amount`` as null
AVRO_ODD = {
    6: avro_with_amount({"type": "bytes", "connect.name": DECIMAL,
                         "connect.parameters": ["scale"]}),
    7: avro_with_amount({"type": "int", "connect.type": ["int16"]}),
    8: {**AVRO_ENVELOPE, "fields": [
        {"name": "before", "type": ["null", {
            "type": "record", "name": "Value", "fields": [
                {"name": "id", "type": "int"}, {"name": "amount", "type": []}]}]},
        *AVRO_ENVELOPE["fields"][1:]]},
}


def avro_odd_decoder() -> Decoder:
    schemas = {str(i): schema for i, schema in AVRO_ODD.items()}
    return Decoder(avro=AvroDecoder(FileSchemaResolver({**schemas, str(AVRO_KEY_ID): AVRO_KEY})))


def avro_odd(schema_id: int) -> bytes:
    """A record of ``AVRO_ODD[schema_id]``, written with ``amount`` as null."""
    writer = avro_with_amount("null")  # type: ignore[arg-type]
    value = confluent(AVRO_ID, writer, {"before": None, "after": {"id": 1, "amount": None},
                                        "source": source(), "op": "c", "ts_ms": 1})
    return value[:1] + struct.pack(">I", schema_id) + value[5:]


AVRO_NULLS = copy.deepcopy(AVRO_ENVELOPE)
AVRO_NULLS["fields"].append({"name": "noise", "type": {"type": "array", "items": "null"}})


def avro_nulls(count: int) -> bytes:
    """An envelope whose last field, an array of nulls (they take no bytes), announces ``count``
    items in a single block: a few bytes that fastavro would build into ``count`` Nones."""
    value = confluent(AVRO_NULLS_ID, AVRO_NULLS, {
        "before": None, "after": {"id": 1, "amount": decimal.Decimal("2.00")},
        "source": source(), "op": "c", "ts_ms": 1_700_000_000_999, "noise": []})
    zigzag, varint = count << 1, bytearray()
    while zigzag >= 0x80:
        varint.append(zigzag & 0x7F | 0x80)
        zigzag >>= 7
    varint.append(zigzag)
    return value[:-1] + bytes(varint) + b"\x00"  # the empty array's end, after the block


def avro_nulls_decoder() -> Decoder:
    resolver = FileSchemaResolver({str(AVRO_NULLS_ID): AVRO_NULLS, str(AVRO_KEY_ID): AVRO_KEY})
    return Decoder(avro=AvroDecoder(resolver))


# --- the malformed records ---------------------------------------------------------------------


@dataclass(frozen=True)
class Bad:
    """One kind of malformed record and the dead letter it must become."""

    id: str
    value: bytes | None
    stage: str
    error_class: str
    message: str
    """Regular expression (case-insensitive) the dead-letter message must match."""
    key: bytes | None = GOOD_KEY
    decoder: Callable[[], Decoder] = avro_decoder
    marks: tuple[Any, ...] = field(default=())


GOOD = schemaless(envelope())
GOOD_SCHEMAFUL = schemaful(envelope())
DEEP = b'{"a":' * 100_000
DEEP_WELL_FORMED = schemaless(envelope(after={"id": 1, "x": "NEST"})).replace(
    b'"NEST"', b"[" * 50_000 + b"]" * 50_000)

BAD: list[Bad] = [
    # -- bytes that are not a usable JSON/Avro value
    Bad("truncated-json", GOOD[:57], "decode", "DecodeError", r"invalid JSON.*truncated"),
    Bad("truncated-json-schemaful", GOOD_SCHEMAFUL[:300], "decode", "DecodeError",
        r"invalid JSON|truncated"),
    Bad("binary-garbage", b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00garbage", "decode", "DecodeError",
        r"JSON.*0x89"),
    Bad("empty-value", b"", "decode", "DecodeError", r"empty"),
    Bad("json-array", b'[{"op":"c"}]', "decode|envelope", r"DecodeError|EnvelopeError",
        r"not an object|array|list"),
    Bad("json-array-after-whitespace", b' [{"op":"c"}]', "decode|envelope",
        r"DecodeError|EnvelopeError", r"not an object|array|list"),
    Bad("json-string", b'"op=c"', "decode|envelope", r"DecodeError|EnvelopeError",
        r"not an object|string|str"),
    Bad("deep-garbage-brackets", b"[" * 100_000, "decode", "DecodeError", r"JSON"),
    Bad("deep-garbage-objects", DEEP, "decode", "DecodeError", r"depth|deep|nest"),
    Bad("deep-well-formed-column", DEEP_WELL_FORMED, "decode", "DecodeError",
        r"depth|deep|nest"),
    Bad("invalid-utf8-in-string", GOOD.replace(b'"server1"', b'"ser\xff\xfever1"'), "decode",
        "DecodeError", r"utf-?8"),
    Bad("invalid-utf8-in-schemaful-payload",
        GOOD_SCHEMAFUL.replace(b'"server1"', b'"ser\xc3\x28ver1"'), "decode", "DecodeError",
        r"utf-?8"),
    # -- JSON, but not a Debezium envelope
    Bad("object-of-wrong-shape", schemaless({"id": 1, "name": "x"}), "envelope",
        "EnvelopeError", r"not a Debezium envelope"),
    Bad("schemaful-payload-is-array", schemaful([1, 2]), "envelope", "EnvelopeError",
        r"payload is not an object"),
    Bad("missing-source", schemaless(without(envelope(), "source")), "envelope",
        "EnvelopeError", r"source"),
    Bad("missing-op", schemaless(without(envelope(), "op")), "envelope", "EnvelopeError",
        r"'op'"),
    Bad("unknown-op-x", schemaless(envelope(op="x")), "envelope", "EnvelopeError",
        r"unknown op 'x'"),
    Bad("create-without-after", schemaless(envelope(after=None)), "envelope", "EnvelopeError",
        r"'c'.*after"),
    Bad("update-without-after", schemaless(envelope(op="u", before={"id": 1}, after=None)),
        "envelope", "EnvelopeError", r"update.*after"),
    Bad("delete-without-before-or-key", schemaless(envelope(op="d", before=None, after=None)),
        "envelope", "EnvelopeError", r"before.*key", key=None),
    Bad("after-not-an-object", schemaless(envelope(after="id=1")), "envelope", "EnvelopeError",
        r"after"),
    Bad("source-without-table", schemaless(envelope(source=without(source(), "table"))),
        "envelope", "EnvelopeError", r"table"),
    Bad("transaction-without-id", schemaless(envelope(transaction={"total_order": 1})),
        "envelope", "EnvelopeError", r"transaction"),
    # -- positions
    Bad("commit-lsn-not-hex", schemaless(envelope(source=source(commit_lsn="zz:00000758:0005"))),
        "envelope", "EnvelopeError", r"LSN 'zz:00000758:0005'"),
    Bad("commit-lsn-wrong-part-lengths",
        schemaless(envelope(source=source(commit_lsn="0027:00000758:0005"))), "envelope",
        "EnvelopeError", r"LSN '0027:00000758:0005'"),
    Bad("commit-lsn-longer-than-10-bytes",
        schemaless(envelope(source=source(commit_lsn="0x0000002700000758000500"))), "envelope",
        "EnvelopeError", r"LSN '0x0000002700000758000500'"),
    Bad("commit-lsn-NULL", schemaless(envelope(source=source(commit_lsn="NULL"))), "envelope",
        "EnvelopeError", r"commit_lsn"),
    Bad("change-lsn-not-hex",
        schemaless(envelope(source=source(change_lsn="00000027:0000075G:0003"))), "envelope",
        "EnvelopeError", r"LSN '00000027:0000075G:0003'"),
    Bad("change-lsn-wrong-length",
        schemaless(envelope(source=source(change_lsn="00000027:00000758:03"))), "envelope",
        "EnvelopeError", r"LSN '00000027:00000758:03'"),
    Bad("change-lsn-a-number", schemaless(envelope(source=source(change_lsn=12345))),
        "envelope", "EnvelopeError", r"change_lsn"),
    Bad("event-serial-no-abc", schemaless(envelope(source=source(event_serial_no="abc"))),
        "envelope", "EnvelopeError", r"event_serial_no.*abc"),
    Bad("event-serial-no-beyond-int64",
        schemaless(envelope(source=source(event_serial_no=10**40))), "envelope",
        "EnvelopeError", r"event_serial_no"),
    Bad("event-serial-no-negative", schemaless(envelope(source=source(event_serial_no=-3))),
        "envelope", "EnvelopeError", r"event_serial_no"),
    Bad("huge-integer-source-ts-ms", schemaless(envelope(source=source(ts_ms=10**40))),
        "envelope", "EnvelopeError", r"ts_ms"),
    Bad("huge-integer-envelope-ts-ms", schemaless(envelope(ts_ms=-(10**40))), "envelope",
        "EnvelopeError", r"ts_ms"),
    # -- schema-ful values whose logical values do not fit their type
    Bad("decimal-bad-base64", schemaful(envelope(after={"id": 1, "amount": "!!not base64"})),
        "convert", "ValueConversionError", r"'amount'.*base64"),
    Bad("decimal-empty-bytes", schemaful(envelope(after={"id": 1, "amount": ""})), "convert",
        "ValueConversionError", r"'amount'.*empty"),
    Bad("nanotimestamp-as-string",
        schemaful(envelope(after={"id": 1, "updated": "2010-11-12T13:14:15.1234567"})),
        "convert", "ValueConversionError", r"'updated'.*(integer|int64)"),
    Bad("date-out-of-range", schemaful(envelope(after={"id": 1, "born": 10**9})), "convert",
        "ValueConversionError", r"'born'.*out of range"),
    Bad("nanotime-beyond-a-day",
        schemaful(envelope(after={"id": 1, "opens": 86_400 * 10**9 + 1})), "convert",
        "ValueConversionError", r"'opens'.*out of range"),
    Bad("schema-not-a-struct", schemaful(envelope(), {"type": "string", "optional": False}),
        "schema", "SchemaError", r"struct"),
    Bad("schema-not-a-struct-pretty",
        schemaful(envelope(), {"type": "string", "optional": False}, pretty=True),
        "schema", "SchemaError", r"struct"),
    Bad("schemaful-invalid-payload-json",
        b'{"schema":' + json.dumps(envelope_schema()).encode() + b',"payload":{"op":"c",,}}',
        "decode", "DecodeError", r"invalid JSON"),
    # -- Confluent Avro
    Bad("avro-unknown-schema-id", b"\x00" + struct.pack(">I", 99) + avro_value()[5:], "schema",
        "SchemaError", r"schema id 99"),
    Bad("avro-truncated", avro_value()[:24], "decode", "DecodeError", r"Avro"),
    Bad("avro-trailing-bytes", avro_value() + b"\x02\x04", "decode", "DecodeError",
        r"2 trailing bytes"),
    Bad("avro-shorter-than-header", b"\x00\x00\x00", "decode", "DecodeError", r"header"),
    Bad("wrong-magic-byte", b"\x01" + avro_value()[1:], "decode", "DecodeError", r"0x01"),
    Bad("avro-without-resolver", avro_value(), "schema", "SchemaError", r"schema registry",
        decoder=Decoder),
    Bad("avro-array-of-nulls-announcing-2**40-items", avro_nulls(2**40), "decode", "DecodeError",
        r"Avro.*announce more items than the data holds", decoder=avro_nulls_decoder),
    # -- keys
    Bad("key-not-json", GOOD, "decode-key", "KeyDecodeError", r"key.*JSON",
        key=b"\xff\xfe\x00\x01garbage"),
    Bad("key-json-list", GOOD, "decode-key", "KeyDecodeError", r"key.*struct",
        key=b"[1, 2]"),
    Bad("key-truncated", GOOD, "decode-key", "KeyDecodeError", r"key", key=b'{"id":'),
    Bad("key-schema-not-a-struct", GOOD, "decode-key", "KeyDecodeError", r"key.*struct",
        key=schemaless({"schema": {"type": "int32"}, "payload": 5})),
    Bad("key-invalid-utf8", GOOD, "decode-key", "KeyDecodeError", r"utf-?8",
        key=b'{"id":"\xff"}'),
    Bad("avro-key-unknown-schema-id", GOOD, "decode-key", "KeyDecodeError", r"schema id 77",
        key=b"\x00" + struct.pack(">I", 77) + b"\x02"),
    # -- CloudEvents
    Bad("cloudevent-without-op", schemaless({"specversion": "1.0", "id": "x", "source": "/s",
                                             "type": "t", "data": {"after": {"id": 1}}}),
        "envelope", "EnvelopeError", r"iodebeziumop"),
    # -- Decimal schemas outside what SQL Server can hold (precision 1-38, scale 0-precision)
    Bad("decimal-scale-negative",
        schemaful(envelope(), with_row_fields(decimal_field(scale="-5000"))), "schema",
        "SchemaError", r"'amount'.*scale -5000"),
    Bad("decimal-scale-huge",
        schemaful(envelope(), with_row_fields(decimal_field(scale="100000"))), "schema",
        "SchemaError", r"'amount'.*scale 100000"),
    Bad("decimal-scale-39",
        schemaful(envelope(), with_row_fields(decimal_field(scale="39"))), "schema",
        "SchemaError", r"'amount'.*scale 39"),
    Bad("decimal-scale-above-precision", schemaful(envelope(), with_row_fields(
        decimal_field(scale="6", **{"connect.decimal.precision": "5"}))), "schema",
        "SchemaError", r"'amount'.*scale 6.*precision 5"),
    Bad("decimal-precision-39", schemaful(envelope(), with_row_fields(
        decimal_field(scale="2", **{"connect.decimal.precision": "39"}))), "schema",
        "SchemaError", r"'amount'.*precision 39"),
    Bad("decimal-precision-0", schemaful(envelope(), with_row_fields(
        decimal_field(scale="0", **{"connect.decimal.precision": "0"}))), "schema",
        "SchemaError", r"'amount'.*precision 0"),
    Bad("decimal-scale-not-a-number",
        schemaful(envelope(), with_row_fields(decimal_field(scale="two"))), "schema",
        "SchemaError", r"'amount'.*scale 'two'"),
    Bad("decimal-without-scale", schemaful(envelope(), with_row_fields(
        decimal_field(**{"connect.decimal.precision": "10"}))), "schema", "SchemaError",
        r"'amount'.*Decimal.*without.*'scale'"),
    Bad("decimal-without-parameters", schemaful(envelope(), with_row_fields(
        {k: v for k, v in decimal_field().items() if k != "parameters"})), "schema",
        "SchemaError", r"'amount'.*Decimal.*without.*'scale'"),
    Bad("key-decimal-without-scale", GOOD, "decode-key", "KeyDecodeError",
        r"key.*'id'.*Decimal.*without.*'scale'",
        key=schemaless({"schema": {"type": "struct", "optional": False, "name": f"{TOPIC}.Key",
                                   "fields": [decimal_field("id")]},
                        "payload": {"id": "AQ=="}})),
    Bad("avro-decimal-scale-negative", avro_raw(AVRO_BAD_SCALE_ID, AVRO_BAD_SCALE, b"\x00\xc8"),
        "schema", "SchemaError", r"'amount'.*scale -10000000", decoder=avro_decimal_decoder),
    Bad("avro-decimal-scale-huge", avro_raw(AVRO_NO_SCALE_ID, AVRO_HUGE_SCALE, b"\x00\xc8"),
        "schema", "SchemaError", r"'amount'.*scale 1000000000", decoder=avro_decimal_decoder),
    # -- VariableScaleDecimal values with a scale no SQL Server decimal has
    Bad("variable-scale-decimal-scale-huge", schemaful(
        envelope(after={"id": 1, "v": {"scale": 100_000, "value": "AQ=="}}),
        with_row_fields({"type": "struct", "optional": True, "name": VARIABLE_DECIMAL,
                         "version": 1, "field": "v", "fields": [
                             {"type": "int32", "optional": False, "field": "scale"},
                             {"type": "bytes", "optional": False, "field": "value"}]})),
        "convert", "ValueConversionError", r"'v'.*scale 100000"),
    Bad("variable-scale-decimal-scale-negative", schemaful(
        envelope(after={"id": 1, "v": {"scale": -5000, "value": "AQ=="}}),
        with_row_fields({"type": "struct", "optional": True, "name": VARIABLE_DECIMAL,
                         "version": 1, "field": "v", "fields": [
                             {"type": "int32", "optional": False, "field": "scale"},
                             {"type": "bytes", "optional": False, "field": "value"}]})),
        "convert", "ValueConversionError", r"'v'.*scale -5000"),
    Bad("decimal-value-beyond-precision",
        schemaful(envelope(after={"id": 1, "amount": "AQAAAAAAAAAAAAA="})),  # 2**80 > 10**10
        "convert", "ValueConversionError", r"'amount'.*precision 10"),
    Bad("decimal-value-thousands-of-digits",
        schemaful(envelope(after={"id": 1, "amount": base64.b64encode(b"\x7f" * 4000).decode()})),
        "convert", "ValueConversionError", r"'amount'.*precision 10"),
    Bad("decimal-number-beyond-precision",
        schemaful(envelope(after={"id": 1, "amount": 1e300})),  # decimal.format=NUMERIC
        "convert", "ValueConversionError", r"'amount'.*precision 10"),
    # -- a propagated source column scale (column.propagate.source.type) that no SQL type has
    Bad("source-scale-of-datetime2-12", schemaful(
        envelope(after={"id": 1, "updated": 10**18}), with_row_fields(
            {"type": "int64", "optional": True, "name": "io.debezium.time.NanoTimestamp",
             "field": "updated", "parameters": {"__debezium.source.column.type": "DATETIME2",
                                                "__debezium.source.column.scale": "12"}})),
        "schema", "SchemaError", r"'updated'.*scale 12"),
    Bad("source-scale-not-a-number", schemaful(
        envelope(after={"id": 1, "updated": 10**18}), with_row_fields(
            {"type": "int64", "optional": True, "name": "io.debezium.time.NanoTimestamp",
             "field": "updated", "parameters": {"__debezium.source.column.type": "DATETIME2",
                                                "__debezium.source.column.scale": "seven"}})),
        "schema", "SchemaError", r"'updated'.*scale 'seven'"),
    Bad("source-scale-negative-double-decimal", schemaful(
        envelope(after={"id": 1, "amount": 2.5}), with_row_fields(
            {"type": "double", "optional": True, "field": "amount",
             "parameters": {"__debezium.source.column.type": "DECIMAL",
                            "__debezium.source.column.scale": "-2"}})),
        "schema", "SchemaError", r"'amount'.*scale -2"),
    # -- values that violate their Connect schema (JsonConverter would refuse them)
    Bad("int32-above-range", schemaful(envelope(after={"id": 2**31, "amount": "AMg="})),
        "convert", "ValueConversionError", r"'id'.*2147483648.*int32"),
    Bad("int32-below-range", schemaful(envelope(after={"id": -(2**31) - 1})),
        "convert", "ValueConversionError", r"'id'.*-2147483649.*int32"),
    Bad("int64-2-to-the-63", violating("big", "int64", 2**63), "convert",
        "ValueConversionError", r"'big'.*9223372036854775808.*int64"),
    Bad("int64-below-range", violating("big", "int64", -(2**63) - 1), "convert",
        "ValueConversionError", r"'big'.*int64"),
    Bad("nanotimestamp-beyond-int64", schemaful(envelope(after={"id": 1, "updated": 2**63})),
        "convert", "ValueConversionError", r"'updated'.*int64"),
    Bad("int8-out-of-range", violating("tiny", "int8", 200), "convert",
        "ValueConversionError", r"'tiny'.*200.*int8"),
    Bad("int16-out-of-range", violating("small", "int16", -40_000), "convert",
        "ValueConversionError", r"'small'.*-40000.*int16"),
    Bad("int32-given-a-string", schemaful(envelope(after={"id": "1"})), "convert",
        "ValueConversionError", r"'id'.*expected int32.*str"),
    Bad("int32-given-a-boolean", schemaful(envelope(after={"id": True})), "convert",
        "ValueConversionError", r"'id'.*expected int32.*bool"),
    Bad("int32-given-a-float", schemaful(envelope(after={"id": 1.5})), "convert",
        "ValueConversionError", r"'id'.*expected int32.*float"),
    Bad("string-given-a-number", violating("name", "string", 42), "convert",
        "ValueConversionError", r"'name'.*expected string.*int"),
    Bad("string-given-an-object", violating("name", "string", {"a": 1}), "convert",
        "ValueConversionError", r"'name'.*expected string.*dict"),
    Bad("boolean-given-a-number", violating("flag", "boolean", 1), "convert",
        "ValueConversionError", r"'flag'.*expected boolean.*int"),
    Bad("boolean-given-a-string", violating("flag", "boolean", "true"), "convert",
        "ValueConversionError", r"'flag'.*expected boolean.*str"),
    Bad("bytes-not-base64", violating("blob", "bytes", "not base64!"), "convert",
        "ValueConversionError", r"'blob'.*base64"),
    Bad("bytes-given-a-number", violating("blob", "bytes", 7), "convert",
        "ValueConversionError", r"'blob'.*bytes.*int"),
    Bad("double-given-a-string", violating("ratio", "double", "1.5"), "convert",
        "ValueConversionError", r"'ratio'.*expected float64.*str"),
    Bad("float64-given-a-boolean", violating("ratio", "float64", False), "convert",
        "ValueConversionError", r"'ratio'.*expected float64.*bool"),
    Bad("float32-beyond-its-range", violating("real", "float32", 1e39), "convert",
        "ValueConversionError", r"'real'.*float32"),
    Bad("float-beyond-float32-range", violating("real", "float", -1e39), "convert",
        "ValueConversionError", r"'real'.*float32"),
    Bad("array-given-a-string", violating("tags", "array", "a,b",
                                          items={"type": "string", "optional": False}),
        "convert", "ValueConversionError", r"'tags'.*expected array.*str"),
    Bad("struct-given-a-number", violating("point", "struct", 5, fields=[
        {"type": "int32", "optional": False, "field": "x"}]), "convert",
        "ValueConversionError", r"'point'.*expected struct.*int"),
    Bad("map-given-a-string", violating("attrs", "map", "k=v",
                                        keys={"type": "string", "optional": False},
                                        values={"type": "string", "optional": False}),
        "convert", "ValueConversionError", r"'attrs'.*expected map.*str"),
    Bad("date-given-a-string", schemaful(envelope(after={"id": 1, "born": "2020-01-01"})),
        "convert", "ValueConversionError", r"'born'.*int32.*str"),
    Bad("unknown-connect-type", violating("mystery", "decimal", 1), "schema", "SchemaError",
        r"'mystery'.*unknown Connect (schema )?type 'decimal'"),
    Bad("before-image-violates", schemaful(envelope(
        op="u", before={"id": 2**40, "amount": "AMg="})), "convert", "ValueConversionError",
        r"'id'.*int32"),
    Bad("key-int32-above-range", GOOD, "decode-key", "KeyDecodeError", r"key.*'id'.*int32",
        key=schemaless({"schema": KEY_SCHEMA, "payload": {"id": 2**31}})),
    Bad("key-int32-given-a-string", GOOD, "decode-key", "KeyDecodeError",
        r"key.*'id'.*expected int32.*str",
        key=schemaless({"schema": KEY_SCHEMA, "payload": {"id": "1"}})),
    Bad("table-schema-file-int64-overflow",
        schemaless(envelope(after={"id": 1, "name": "x", "big": 2**64})), "convert",
        "ValueConversionError", r"'big'.*int64", decoder=table_schema_decoder),
    Bad("table-schema-file-string-given-a-list",
        schemaless(envelope(after={"id": 1, "name": ["x"]})), "convert",
        "ValueConversionError", r"'name'.*expected string.*list", decoder=table_schema_decoder),
    Bad("table-schema-file-int32-given-a-string",
        schemaless(envelope(after={"id": "one"})), "convert",
        "ValueConversionError", r"'id'.*expected int32.*str", decoder=table_schema_decoder),
    Bad("avro-int16-out-of-range", confluent(AVRO_INT16_ID, AVRO_INT16, {
        "before": None, "after": {"id": 1, "amount": 70_000}, "source": source(), "op": "c",
        "ts_ms": 1_700_000_000_999}), "convert", "ValueConversionError",
        r"'amount'.*70000.*int16", decoder=avro_int16_decoder),
    # -- found by tests/unit/test_fuzz_decoders.py: each used to be an "unexpected" dead letter
    Bad("schemaless-truncated-after-an-object-key", b'{"before":[', "decode", "DecodeError",
        r"invalid JSON.*truncated"),
    Bad("envelope-schema-fields-not-a-list",
        schemaful(envelope(), {**envelope_schema(), "fields": True}), "schema", "SchemaError",
        r"envelope schema has no 'fields' list"),
    Bad("row-schema-name-a-list", schemaful(envelope(), with_row_fields(
        {"type": "int64", "optional": True, "name": ["io.debezium.time.Timestamp"],
         "field": "updated"})), "schema", "SchemaError", r"'updated'.*named"),
    Bad("key-schema-name-a-list", GOOD, "decode-key", "KeyDecodeError",
        r"key.*schema name is not text",
        key=schemaless({"schema": {**KEY_SCHEMA, "name": [f"{TOPIC}.Key"]},
                        "payload": {"id": 1}})),
    Bad("avro-json-bytes-beyond-latin-1", schemaless(
        {**envelope(after={"id": 1, "amount": {"bytes": "\u20ac"}}), "ts_ms": {"long": 1}}),
        "convert", "ValueConversionError", r"after: Avro-JSON bytes.*U\+00FF"),
    Bad("avro-union-index-out-of-range",
        avro_value()[:5] + b"\x04" + avro_value()[6:], "decode", "DecodeError",
        r"Avro payload does not match its schema \(an index or length"),
    # -- found by a hunt against fastavro: each used to be an "unexpected" dead letter
    Bad("avro-connect-parameters-not-a-map", avro_odd(6), "schema", "SchemaError",
        r"'amount'.*connect.parameters is not a map", decoder=avro_odd_decoder),
    Bad("avro-connect-type-a-list", avro_odd(7), "schema", "SchemaError",
        r"'amount'.*unknown connect.type", decoder=avro_odd_decoder),
    Bad("avro-empty-union", avro_odd(8), "decode", "DecodeError",
        r"Avro payload does not match its schema", decoder=avro_odd_decoder),
]


def bad_params() -> list[Any]:
    return [pytest.param(b, id=b.id, marks=b.marks) for b in BAD]


def assert_error_headers(dead: DeadLetter, record: RawRecord) -> None:
    out = dead.to_record()
    # original key, value and headers byte for byte, then the context headers
    assert out.topic == record.topic
    assert (out.partition, out.offset, out.timestamp) == (PARTITION, OFFSET, record.timestamp)
    assert out.key == record.key
    assert out.value == record.value
    assert out.headers[:len(HEADERS)] == HEADERS
    added = out.headers[len(HEADERS):]
    assert all(name.startswith("__connect.errors.") for name, _ in added)
    errors = {name.removeprefix("__connect.errors."): value for name, value in added}
    assert set(REQUIRED_ERROR_HEADERS) <= set(errors)
    assert errors["topic"] == TOPIC.encode()
    assert errors["partition"] == str(PARTITION).encode()
    assert errors["offset"] == str(OFFSET).encode()
    assert errors["stage"] == dead.stage.encode()
    assert errors["exception.message"] == dead.message.encode()
    # the class header names a real class of that name (module + class, like Connect's FQCN)
    class_name = (errors["exception.class.name"] or b"").decode()
    module_name, _, cls_name = class_name.rpartition(".")
    assert cls_name == dead.error_class
    cls = getattr(importlib.import_module(module_name), cls_name)
    assert isinstance(cls, type) and issubclass(cls, Exception)
    # routed to a DLQ topic: same bytes, same coordinates in the headers
    routed = dead.to_record("dlq.customers")
    assert routed.topic == "dlq.customers"
    assert routed.key == record.key and routed.value == record.value
    assert routed.headers == out.headers


@pytest.mark.parametrize("bad", bad_params())
def test_malformed_record_becomes_one_dead_letter(bad: Bad) -> None:
    translator = Translator(decoder=bad.decoder())
    record = RawRecord(topic=TOPIC, partition=PARTITION, offset=OFFSET,
                       timestamp=1_700_000_001_000, key=bad.key, value=bad.value,
                       headers=HEADERS)
    translator.process(record)  # must not raise
    changes, dead = translator.drain()
    assert changes == []
    assert len(dead) == 1, [d.describe() for d in dead]
    letter = dead[0]
    assert letter.record == record
    assert re.fullmatch(bad.stage, letter.stage), letter.describe()
    assert re.fullmatch(bad.error_class, letter.error_class), letter
    assert letter.message, letter
    assert re.search(bad.message, letter.message, flags=re.IGNORECASE), letter.message
    assert translator.counters.dead_letters == 1
    assert translator.counters.balanced, translator.counters.summary()
    assert_error_headers(letter, record)

    # the run continues: a valid record afterwards still translates
    translator.process(valid_followup())
    translator.flush()
    changes, dead = translator.drain()
    assert dead == []
    assert len(changes) == 1
    assert changes[0].key == {"id": 2}
    assert changes[0].op == "insert"
    assert translator.counters.records_in == 2
    assert translator.counters.changes_out == 1
    assert translator.counters.balanced, translator.counters.summary()


def test_kinds_of_malformed_records_cover_the_brief() -> None:
    assert len(BAD) >= 25
    assert len({b.id for b in BAD}) == len(BAD)


@pytest.mark.parametrize("value", [GOOD, GOOD_SCHEMAFUL, schemaful(envelope(), pretty=True),
                                   avro_value()], ids=["schemaless", "schemaful",
                                                       "schemaful-pretty", "avro"])
def test_the_valid_baselines_translate(value: bytes) -> None:
    """The malformed records above are small mutations of these."""
    translator = Translator(decoder=avro_decoder())
    translator.process(RawRecord(topic=TOPIC, partition=PARTITION, offset=OFFSET, key=GOOD_KEY,
                                 value=value))
    translator.flush()
    changes, dead = translator.drain()
    assert dead == []
    assert len(changes) == 1
    assert changes[0].after is not None and changes[0].after["amount"] in ("AMg=", "2.00")
    assert changes[0].position.commit_lsn == COMMIT


def test_several_bad_records_in_one_stream_keep_order_and_balance() -> None:
    translator = Translator(decoder=avro_decoder())
    records = [RawRecord(topic=TOPIC, partition=PARTITION, offset=i, key=b.key, value=b.value)
               for i, b in enumerate(BAD) if not b.marks and b.decoder is avro_decoder]
    for r in records:
        translator.process(r)
    translator.process(valid_followup())
    translator.flush()
    changes, dead = translator.drain()
    assert [d.record.offset for d in dead] == [r.offset for r in records]
    assert len(changes) == 1
    assert translator.counters.balanced, translator.counters.summary()


def test_unexpected_decoder_exception_names_its_real_class() -> None:
    class ExplodingDecoder(Decoder):
        def decode(self, record: RawRecord) -> Any:
            raise RuntimeError("boom")

    translator = Translator(decoder=ExplodingDecoder())
    record = RawRecord(topic=TOPIC, partition=PARTITION, offset=OFFSET, key=GOOD_KEY,
                       value=GOOD, headers=HEADERS)
    translator.process(record)
    _, dead = translator.drain()
    assert len(dead) == 1
    assert "boom" in dead[0].message
    assert translator.counters.balanced
    headers = dict(dead[0].to_record().headers)
    class_name = (headers["__connect.errors.exception.class.name"] or b"").decode()
    module_name, _, cls_name = class_name.rpartition(".")
    assert getattr(importlib.import_module(module_name), cls_name, None) is RuntimeError


# --- property tests (hypothesis) ---------------------------------------------------------------

PROPERTY_SETTINGS = settings(max_examples=300, deadline=None,
                             suppress_health_check=[HealthCheck.too_slow])


def check_one_record(record: RawRecord) -> None:
    """Process one arbitrary record, then a valid one: nothing raises, everything balances."""
    translator = Translator(decoder=avro_decoder())
    translator.process(record)
    assert translator.counters.records_in == 1
    assert translator.counters.balanced, translator.counters.summary()
    _, dead = translator.drain()
    for letter in dead:  # every dead letter is complete and keeps the bytes
        out = letter.to_record()
        assert out.key == record.key and out.value == record.value
        assert letter.stage and letter.message
    followup = valid_followup(partition=9)
    translator.process(followup)
    translator.flush()
    changes, _ = translator.drain()
    assert any(c.lineage[-1].partition == 9 for c in changes)
    assert translator.counters.records_in == 2
    assert translator.counters.balanced, translator.counters.summary()


@PROPERTY_SETTINGS
@given(value=st.none() | st.binary(max_size=512), key=st.none() | st.binary(max_size=64))
def test_arbitrary_bytes_never_raise(value: bytes | None, key: bytes | None) -> None:
    check_one_record(RawRecord(topic=TOPIC, partition=PARTITION, offset=OFFSET, key=key,
                               value=value, headers=HEADERS))


@PROPERTY_SETTINGS
@given(value=st.sampled_from([b"\x00", b"{", b'{"schema":', b" "]).flatmap(
    lambda prefix: st.binary(max_size=256).map(lambda tail: prefix + tail)))
def test_arbitrary_bytes_after_a_plausible_prefix_never_raise(value: bytes) -> None:
    check_one_record(RawRecord(topic=TOPIC, partition=PARTITION, offset=OFFSET, key=GOOD_KEY,
                               value=value))


VALID_VALUES = [GOOD, GOOD_SCHEMAFUL, schemaful(envelope(), pretty=True), avro_value(),
                schemaless(envelope(op="u", before={"id": 1, "amount": "AGQ="})),
                schemaful(envelope(after={"id": 1, "amount": "AMg=", "updated": 10**18,
                                          "born": 19000, "opens": 3_600 * 10**9}))]
VALID_KEYS = [GOOD_KEY, schemaless({"schema": KEY_SCHEMA, "payload": {"id": 1}}),
              confluent(AVRO_KEY_ID, AVRO_KEY, {"id": 1})]


@st.composite
def mutated(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A valid (key, value) with one of its parts truncated, byte-flipped or spliced."""
    value = draw(st.sampled_from(VALID_VALUES))
    key = draw(st.sampled_from(VALID_KEYS))
    target = draw(st.sampled_from(["value", "key"]))
    data = value if target == "value" else key
    how = draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
    pos = draw(st.integers(min_value=0, max_value=len(data) - 1))
    if how == "truncate":
        data = data[:pos]
    elif how == "flip":
        data = data[:pos] + bytes([data[pos] ^ draw(st.integers(1, 255))]) + data[pos + 1:]
    elif how == "insert":
        data = data[:pos] + draw(st.binary(min_size=1, max_size=4)) + data[pos:]
    else:
        data = data[:pos] + data[pos + 1:]
    return (data, value) if target == "key" else (key, data)


@PROPERTY_SETTINGS
@given(case=mutated())
def test_mutated_valid_events_never_raise(case: tuple[bytes, bytes]) -> None:
    key, value = case
    check_one_record(RawRecord(topic=TOPIC, partition=PARTITION, offset=OFFSET, key=key,
                               value=value, headers=HEADERS))


@PROPERTY_SETTINGS
@given(cases=st.lists(mutated(), min_size=1, max_size=8))
def test_streams_of_mutated_events_stay_balanced(cases: list[tuple[bytes, bytes]]) -> None:
    translator = Translator(decoder=avro_decoder())
    for offset, (key, value) in enumerate(cases):
        translator.process(RawRecord(topic=TOPIC, partition=offset % 3, offset=offset, key=key,
                                     value=value))
        assert translator.counters.balanced, translator.counters.summary()
    translator.flush()
    changes, dead = translator.drain()
    counters = translator.counters
    assert counters.records_in == len(cases)
    assert counters.pending == 0
    assert counters.balanced, counters.summary()
    assert len(dead) == counters.dead_letters
    assert len(changes) == counters.changes_out


# --- absurd decimal scales are rejected before anything is computed with them -------------------

ABSURD_SCALE_SCRIPT = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import test_bad_input as t
from debezium_bridge.core.translator import Translator
from debezium_bridge.model.records import RawRecord

variable = {"type": "struct", "optional": True, "name": t.VARIABLE_DECIMAL, "version": 1,
            "field": "v", "fields": [{"type": "int32", "optional": False, "field": "scale"},
                                     {"type": "bytes", "optional": False, "field": "value"}]}
values = []
for scale in (-10_000_000, 10**9):
    values.append(t.schemaful(t.envelope(), t.with_row_fields(t.decimal_field(scale=str(scale)))))
    values.append(t.schemaful(t.envelope(after={"id": 1, "v": {"scale": scale, "value": "AQ=="}}),
                              t.with_row_fields(variable)))
    values.append(t.avro_raw(t.AVRO_BAD_SCALE_ID, t.avro_with_amount({
        "type": "bytes", "scale": scale, "precision": 10, "connect.name": t.DECIMAL,
        "connect.parameters": {"scale": str(scale)}}), b"\x00\xc8"))
    source_scale = {"__debezium.source.column.scale": str(scale)}
    values.append(t.schemaful(t.envelope(after={"id": 1, "updated": 10**18}), t.with_row_fields(
        {"type": "int64", "optional": True, "name": "io.debezium.time.NanoTimestamp",
         "field": "updated", "parameters": {"__debezium.source.column.type": "DATETIME2",
                                            **source_scale}})))
    values.append(t.schemaful(t.envelope(after={"id": 1, "amount": 2.5}), t.with_row_fields(
        {"type": "double", "optional": True, "field": "amount",  # decimal.handling.mode=double
         "parameters": {"__debezium.source.column.type": "DECIMAL", **source_scale}})))
out = []
for value in values:
    schema_id = int.from_bytes(value[1:5], "big") if value[0] == 0 else None
    decoder = t.avro_decimal_decoder()
    if schema_id is not None:  # this record's own schema under the bad-scale id
        from debezium_bridge.formats.debezium.avro import AvroDecoder
        from debezium_bridge.formats.debezium.decode import Decoder
        from debezium_bridge.formats.debezium.registry import FileSchemaResolver
        schema = t.avro_with_amount({"type": "bytes", "connect.name": t.DECIMAL,
                                     "connect.parameters": {"scale": str(scale)}})
        decoder = Decoder(avro=AvroDecoder(FileSchemaResolver({str(schema_id): schema})))
    translator = Translator(decoder=decoder)
    started = time.process_time()
    translator.process(RawRecord(topic=t.TOPIC, partition=0, offset=1, key=t.GOOD_KEY,
                                 value=value))
    translator.flush()
    changes, dead = translator.drain()
    out.append({"seconds": time.process_time() - started, "changes": len(changes),
                "stages": [d.stage for d in dead], "messages": [d.message for d in dead]})
print(json.dumps(out))
"""


def test_absurd_decimal_scales_are_rejected_at_once(tmp_path: Any) -> None:
    """Scale -10,000,000 used to hang the stream (10**10000000 is computed) and 10**9 to build a
    1 GB string, in a Decimal schema, a VariableScaleDecimal value, an Avro decimal and the
    propagated source column scale of a timestamp or a double-mode decimal; all must be dead
    letters in no time. A subprocess with a timeout guards the
    test run against the hang."""
    import subprocess
    import sys
    from pathlib import Path

    here = str(Path(__file__).parent)
    try:
        run = subprocess.run([sys.executable, "-c", ABSURD_SCALE_SCRIPT, here],
                             capture_output=True, text=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("decoding a Decimal with an absurd scale did not finish in 30 s")
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(run.stdout)
    assert len(results) == 10
    for result in results:
        assert result["seconds"] < 1.0, result
        assert result["changes"] == 0, result
        assert len(result["stages"]) == 1, result
        assert result["stages"][0] in ("schema", "convert"), result
        assert re.search(r"scale (-10000000|1000000000)", result["messages"][0]), result


def test_table_schema_file_with_a_decimal_outside_sql_server_is_a_configuration_error() -> None:
    """Schema-less JSON read through a table-schema file: the file is configuration, so a
    Decimal without a usable scale stops the run before any record (exit code 2 in the CLI)."""
    from debezium_bridge.errors import ConfigError
    from debezium_bridge.formats.debezium.decode import DecodeOptions, table_schema_of

    for broken in (decimal_field(scale="-10000000"), decimal_field()):
        schemas = {TOPIC: table_schema_of(with_row_fields(broken))}
        with pytest.raises(ConfigError, match=r"'amount'.*(scale -10000000|without)"):
            Decoder(DecodeOptions(table_schemas=schemas))


# --- a service that is down is not bad input ------------------------------------------------------


class RegistryDown:
    """A schema resolver whose registry does not answer (after its retries)."""

    def by_id(self, schema_id: int) -> Any:
        from debezium_bridge.errors import ServiceError

        raise ServiceError(f"schema registry unreachable after retries (schema id {schema_id})")

    def by_subject(self, subject: str) -> Any:
        return self.by_id(0)


def test_registry_down_stops_the_translator_and_dead_letters_nothing() -> None:
    from debezium_bridge.errors import ServiceError

    translator = Translator(decoder=Decoder(avro=AvroDecoder(RegistryDown())))
    translator.process(valid_followup())
    with pytest.raises(ServiceError, match="unreachable"):
        translator.process(RawRecord(topic=TOPIC, partition=PARTITION, offset=OFFSET,
                                     key=GOOD_KEY, value=avro_value()))
    with pytest.raises(ServiceError):  # an Avro key needs the registry too
        translator.process(RawRecord(topic=TOPIC, partition=PARTITION, offset=OFFSET + 2,
                                     key=confluent(AVRO_KEY_ID, AVRO_KEY, {"id": 1}), value=GOOD))
    _, dead = translator.drain()
    assert dead == []
    assert translator.counters.dead_letters == 0
    assert translator.counters.records_in == 1  # the records it stopped at were not consumed
    assert translator.counters.balanced, translator.counters.summary()


def test_registry_down_stops_the_ces_pipeline() -> None:
    from debezium_bridge.core.pipeline import Pipeline
    from debezium_bridge.errors import ServiceError

    pipeline = Pipeline(decoder=Decoder(avro=AvroDecoder(RegistryDown())))
    with pytest.raises(ServiceError):
        pipeline.process(RawRecord(topic=TOPIC, partition=PARTITION, offset=OFFSET,
                                   key=GOOD_KEY, value=avro_value()))
    assert pipeline.drain()[1] == []


def test_cli_stops_with_the_service_exit_code_when_the_registry_is_unreachable(
        tmp_path: Any) -> None:
    import socket

    from debezium_bridge.cli import EXIT_SERVICE, main
    from debezium_bridge.formats.dumps import write_lossless

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dump = tmp_path / "avro.jsonl"
    with dump.open("wb") as out:
        write_lossless([RawRecord(TOPIC, 0, 0, None, GOOD_KEY, avro_value())], out)
    dlq = tmp_path / "dlq.jsonl"
    code = main(["convert", str(dump), "-o", str(tmp_path / "out.jsonl"), "--dlq", str(dlq),
                 "--schema-registry", f"http://127.0.0.1:{port}", "-X", "max.retries=0",
                 "-X", "retries.wait.ms=1", "-X", "retries.max.wait.ms=1", "--progress", "never"])
    assert code == EXIT_SERVICE
    assert not dlq.exists() or dlq.read_bytes() == b""


@pytest.mark.parametrize(("status", "body", "bad_input"), [
    (404, b'{"error_code":40403,"message":"Schema 7 not found"}', True),
    (404, b"<html><body>Not Found</body></html>", False),  # a wrong URL, a proxy: no registry
    (404, b'{"message":"no route"}', False),
    (500, b'{"error_code":50001,"message":"Error in the backend data store"}', False),
])
def test_only_the_registrys_own_4xx_answers_are_bad_input(status: int, body: bytes,
                                                          bad_input: bool) -> None:
    """Confluent Schema Registry answers an unknown id with its error code (40403, "Schema not
    found") in a JSON body; a 4xx without one did not come from the registry, which therefore
    cannot be asked: a service problem (retry, then stop), never dead letters of good input."""
    import http.server
    import threading

    from debezium_bridge.clients.registry import RegistrySchemaResolver
    from debezium_bridge.errors import SchemaError, ServiceError

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if body[:1] == b"{"
                             else "text/html")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Answer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        resolver = RegistrySchemaResolver({"url": f"http://127.0.0.1:{server.server_port}",
                                           "max.retries": 0})
        with pytest.raises(SchemaError if bad_input else ServiceError):
            resolver.by_id(7)
    finally:
        server.shutdown()
        server.server_close()


def test_a_decoder_bug_is_dead_lettered_and_logged_with_its_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    class BuggyDecoder(Decoder):
        def decode(self, record: RawRecord) -> Any:
            return {}["no such key"]  # a genuine bug, not a RecordError

    translator = Translator(decoder=BuggyDecoder())
    with caplog.at_level("ERROR", logger="debezium_bridge"):
        translator.process(RawRecord(topic=TOPIC, partition=PARTITION, offset=OFFSET,
                                     key=GOOD_KEY, value=GOOD))
    _, dead = translator.drain()
    assert len(dead) == 1 and dead[0].error_class == "KeyError"
    assert translator.counters.balanced
    (logged,) = [r for r in caplog.records if r.name == "debezium_bridge.core.translator"]
    assert logged.levelname == "ERROR" and logged.exc_info is not None
    assert f"{TOPIC}[{PARTITION}]@{OFFSET}" in logged.getMessage()
