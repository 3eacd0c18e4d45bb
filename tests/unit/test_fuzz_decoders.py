"""Fuzzing the decoders and the CES assembler: every bad input is a dead letter with its real
stage, never an unclassified ("unexpected") one, never an exception out of the pipeline.

Each test starts from valid, connector-shaped records of one encoding and breaks them the way
the bad-input campaign did:

* **structure**: a field (at any depth: envelope, ``source``, images, schema, CloudEvent
  attributes, CES ``data``/``eventsource``/``cols``/``pkkey``/``eventrow``) replaced by a value
  of another JSON type (lists for source fields, a number for ``op``, a string for ``before``,
  huge integers, nested objects ...) or removed;
* **encodings**: JsonConverter with and without schema, Avro-JSON (union branches wrapped),
  Debezium CloudEvents (with and without a schema-ful ``data``), Confluent Avro with a random
  but valid writer schema (Connect types, names and parameters drawn too) and matching data,
  CES JSON and CES Avro (whole events and segments);
* **keys and headers**: keys as arrays, scalars, schema-ful keys with broken schemas, Avro keys
  with unknown ids, random bytes; ``__debezium.oldkey``/``newkey`` and the CES half header with
  garbage;
* **segments**: random index bases, ``finalsegment`` types, duplicates and conflicting
  duplicates, huge indexes, ``logicalid`` types, segments mixing string and object ``data``;
* **bytes**: truncation, bit flips and insertions on top of all of the above.

Every example runs through :class:`~debezium_bridge.core.pipeline.Pipeline` (the CES assembler
in front of the translator, as the CLI runs it) and checks that nothing raises, every dead
letter has a real stage and a :class:`~debezium_bridge.errors.RecordError` class, nothing was
logged as a decoder bug, and both sets of counters balance. ``EXAMPLES`` (150) examples per
test, about 1,300 in all; the module runs in a few seconds.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.formats.ces import avro as ces_avro
from debezium_bridge.formats.ces.encode import CesEncoder
from debezium_bridge.formats.ces.envelope import HALF_HEADER
from debezium_bridge.formats.debezium.avro import AvroDecoder, strip_logical_types
from debezium_bridge.formats.debezium.decode import Decoder
from debezium_bridge.formats.debezium.registry import FileSchemaResolver
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord
from tests.unit.test_bad_input import (
    AVRO_ENVELOPE,
    AVRO_ID,
    AVRO_KEY,
    AVRO_KEY_ID,
    KEY_SCHEMA,
    TOPIC,
    confluent,
    envelope,
    envelope_schema,
    schemaful,
    schemaless,
    source,
)

REAL_STAGES = frozenset({"decode", "decode-key", "envelope", "schema", "convert",
                         "ces-assemble", "replay-mismatch"})
PYTHON_ERRORS = re.compile(r"\b(TypeError|AttributeError|KeyError)\b")
"""A message naming one of these explains nothing: a bug wrapped as bad input. (What fastavro
says about broken bytes, e.g. an ``IndexError`` for a union index past its branches, is quoted
by the Avro decoders and is fine.)"""
EXAMPLES = int(os.environ.get("DEBEZIUM_BRIDGE_FUZZ_EXAMPLES", "150"))
"""Examples per fuzz test (the mixed-stream test runs half as many streams); raise it for a
longer campaign, e.g. ``DEBEZIUM_BRIDGE_FUZZ_EXAMPLES=5000``."""
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- values of every JSON type, with the edges that break converters --------------------------

EDGE_NUMBERS = [0, -1, 1, 2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64, 10**40, -(10**40),
                10**400, 1.5, -0.0, 1e308, -1e308, 3.5e38, 1e-320]
EDGE_TEXTS = ["", " ", "null", "NULL", "true", "0", "-1", "AMg=", "!!",
              "__debezium_unavailable_value", "00000027:00000758:0005", "0x", "zz:zz:zz",
              "2020-01-01T00:00:00Z", "é", "{", '{"eventsource":', "c", "u", "d", "r", "t", "m",
              "INS", "UPD", "DEL"]
scalars = (st.none() | st.booleans() | st.sampled_from(EDGE_NUMBERS) | st.integers()
           | st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(EDGE_TEXTS)
           | st.text(max_size=12))
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["id", "op", "scale", "value", "type", "a", ""])
                      | st.text(max_size=6), inner, max_size=3),
    max_leaves=6)


def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path (dict keys, list indexes) inside ``doc``."""
    if isinstance(doc, dict):
        for name, value in doc.items():
            yield (*prefix, name)
            yield from paths(value, (*prefix, name))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            yield (*prefix, index)
            yield from paths(value, (*prefix, index))


def with_change(doc: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    out = copy.deepcopy(doc)
    parent = out
    for step in path[:-1]:
        parent = parent[step]
    if delete and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


@st.composite
def mutated(draw: st.DrawFn, doc: Any, max_changes: int = 3) -> Any:
    """``doc`` with 0..``max_changes`` fields (at any depth) replaced by another JSON value,
    wrapped in a list, turned into text, or removed (``doc`` itself is never changed)."""
    doc = copy.deepcopy(doc)
    for _ in range(draw(st.integers(0, max_changes))):
        by_depth: dict[int, list[tuple[Any, ...]]] = {}
        for path in paths(doc):
            by_depth.setdefault(len(path), []).append(path)
        if not by_depth:
            break
        # a depth first, then a path at that depth: top-level fields are hit as often as the
        # many nested ones
        path = draw(st.sampled_from(by_depth[draw(st.sampled_from(sorted(by_depth)))]))
        how = draw(st.sampled_from(["replace", "replace", "wrap", "text", "delete"]))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        old = parent[path[-1]]
        value = (draw(json_values) if how == "replace" else [old] if how == "wrap"
                 else json.dumps(old) if how == "text" else None)
        doc = with_change(doc, path, value, how == "delete")
    return doc


@st.composite
def damaged(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` as is, truncated, with a flipped byte or with inserted bytes."""
    how = draw(st.sampled_from(["keep", "keep", "truncate", "flip", "insert"]))
    if how == "keep" or not data:
        return data
    pos = draw(st.integers(0, len(data) - 1))
    if how == "truncate":
        return data[:pos]
    if how == "flip":
        return data[:pos] + bytes([data[pos] ^ draw(st.integers(1, 255))]) + data[pos + 1:]
    return data[:pos] + draw(st.binary(min_size=1, max_size=4)) + data[pos:]


def encode_json(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode()


# --- keys and headers --------------------------------------------------------------------------

VALID_KEYS = [schemaless({"id": 1}), schemaless({"schema": KEY_SCHEMA, "payload": {"id": 1}}),
              confluent(AVRO_KEY_ID, AVRO_KEY, {"id": 1})]
keys = st.one_of(
    st.sampled_from(VALID_KEYS), st.none(),
    json_values.map(encode_json),
    mutated({"schema": KEY_SCHEMA, "payload": {"id": 1}}).map(encode_json),
    mutated({"id": 1}).map(encode_json),
    st.binary(max_size=12).map(lambda tail: b"\x00" + tail),  # Avro with any schema id
    st.sampled_from(VALID_KEYS).flatmap(damaged),
)
header_values = st.none() | st.binary(max_size=8) | keys | st.sampled_from([b"delete", b"create"])
headers = st.lists(st.tuples(st.sampled_from(["__debezium.oldkey", "__debezium.newkey",
                                              HALF_HEADER, "content-type", "x"]),
                             header_values), max_size=3).map(tuple)


# --- Debezium envelopes in every encoding ------------------------------------------------------

UPDATE = envelope(op="u", before={"id": 1, "amount": "AGQ="},
                  after={"id": 1, "amount": "AMg=", "updated": 10**18, "born": 19000,
                         "opens": 3_600 * 10**9})
TRANSACTION = {"id": "00000027:00000758:0005", "total_order": 1, "data_collection_order": 1}
ENVELOPES = [envelope(), UPDATE, envelope(op="d", before={"id": 1}, after=None),
             envelope(op="r", source=source(snapshot="true")),
             envelope(transaction=TRANSACTION)]
envelopes = st.sampled_from(ENVELOPES)
schemaless_values = envelopes.flatmap(mutated).map(encode_json)
schemaful_values = st.one_of(
    envelopes.flatmap(mutated).map(lambda payload: schemaful(payload)),
    st.tuples(envelopes, mutated(envelope_schema(), 4)).map(
        lambda pair: schemaful(pair[0], pair[1])),
)


def avro_json(doc: dict[str, Any]) -> dict[str, Any]:
    """Avro-JSON as ``kafka-avro-console-consumer`` prints it: optional fields wrapped in their
    union branch."""
    out: dict[str, Any] = {}
    for name, value in doc.items():
        if name in ("before", "after") and isinstance(value, dict):
            out[name] = {f"{TOPIC}.Value": {k: {"bytes": v} if k == "amount" else v
                                   for k, v in value.items()}}
        elif name == "source" and isinstance(value, dict):
            out[name] = {k: ({"string": v} if isinstance(v, str) else
                             {"long": v} if isinstance(v, int) else v) for k, v in value.items()}
        elif name == "ts_ms" and value is not None:
            out[name] = {"long": value}
        else:
            out[name] = value
    return out


avro_json_values = envelopes.map(avro_json).flatmap(mutated).map(encode_json)


def cloudevent(env: dict[str, Any], with_schema: bool) -> dict[str, Any]:
    src = env["source"]
    doc = {"specversion": "1.0", "type": "io.debezium.connector.sqlserver.DataChangeEvent",
           "source": "/debezium/sqlserver/server1", "id": "name:server1;lsn:1",
           "datacontenttype": "application/json", "time": "2023-11-14T22:13:20.123Z",
           "iodebeziumop": env["op"]}
    doc.update({f"iodebezium{k.replace('_', '')}": v for k, v in src.items()})
    data = {"before": env["before"], "after": env["after"]}
    if with_schema:
        schema = envelope_schema()
        schema["fields"] = schema["fields"][:2]
        data = {"schema": schema, "payload": data}
    doc["data"] = data
    return doc


cloudevent_values = st.tuples(envelopes, st.booleans()).map(
    lambda pair: cloudevent(*pair)).flatmap(mutated).map(encode_json)

# -- Confluent Avro: random (valid) writer schemas with Connect annotations, and matching data

CONNECT_NAMES = [None, "org.apache.kafka.connect.data.Decimal",
                 "io.debezium.data.VariableScaleDecimal", "io.debezium.time.NanoTimestamp",
                 "io.debezium.time.Date", "io.debezium.time.Time", "io.debezium.time.MicroTime",
                 "io.debezium.time.IsoTimestamp", "io.debezium.data.Json",
                 "org.apache.kafka.connect.data.Timestamp"]
CONNECT_TYPES = [None, "int8", "int16", "int32", "int64", "float32", "float64", "boolean",
                 "string", "bytes", "array", "map", "struct", "decimal", 5]
PARAMETERS = st.dictionaries(
    st.sampled_from(["scale", "connect.decimal.precision", "__debezium.source.column.type",
                     "__debezium.source.column.scale", "__debezium.source.column.length"]),
    st.sampled_from(["0", "2", "7", "10", "38", "39", "-1", "-10000000", "1000000000", "x", "",
                     "DECIMAL", "DATETIME2", "VARBINARY"]), max_size=3)


def avro_values(avro_type: str) -> st.SearchStrategy[Any]:
    return {
        "int": st.integers(-(2**31), 2**31 - 1),
        "long": st.integers(-(2**63), 2**63 - 1) | st.sampled_from([0, 10**18, 86_400 * 10**9]),
        "float": st.floats(width=32, allow_nan=False),
        "double": st.floats(allow_nan=False),
        "boolean": st.booleans(),
        "string": st.text(max_size=12) | st.sampled_from(EDGE_TEXTS),
        "bytes": st.binary(max_size=40) | st.sampled_from([b"", b"\x00\xc8", b"\x7f" * 40]),
    }[avro_type]


@st.composite
def avro_columns(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Row fields with random Connect annotations, and one row of matching data."""
    fields: list[dict[str, Any]] = [{"name": "id", "type": "int"}]
    row: dict[str, Any] = {"id": draw(avro_values("int"))}
    for n in range(draw(st.integers(0, 4))):
        base = draw(st.sampled_from(["int", "long", "float", "double", "boolean", "string",
                                     "bytes"]))
        annotated: dict[str, Any] = {"type": base}
        if (name := draw(st.sampled_from(CONNECT_NAMES))) is not None:
            annotated["connect.name"] = name
        if (kind := draw(st.sampled_from(CONNECT_TYPES))) is not None:
            annotated["connect.type"] = kind
        if draw(st.booleans()):
            annotated["connect.parameters"] = draw(PARAMETERS)
        if draw(st.booleans()):
            annotated.update(logicalType="decimal", precision=draw(st.integers(-3, 60)),
                             scale=draw(st.sampled_from([0, 2, 39, -10_000_000, 10**9])))
        fields.append({"name": f"c{n}", "type": ["null", annotated], "default": None})
        row[f"c{n}"] = draw(st.none() | avro_values(base))
    return fields, row


@st.composite
def avro_records(draw: st.DrawFn) -> tuple[bytes, dict[str, Any]]:
    """(value, writer schema under ``AVRO_ID + 100``) of a random Avro envelope."""
    fields, row = draw(avro_columns())
    schema = copy.deepcopy(AVRO_ENVELOPE)
    schema["fields"][0]["type"][1]["fields"] = fields
    src = {k: draw(avro_values("string") | st.just(v)) if isinstance(v, str) else v
           for k, v in source().items()}
    src["event_serial_no"] = draw(st.none() | st.integers(-(2**63), 2**63 - 1))
    src["ts_ms"] = draw(st.integers(-(2**63), 2**63 - 1) | st.just(1_700_000_000_123))
    src["snapshot"] = draw(st.sampled_from(["false", "true", "last", "incremental", "x"]))
    op = draw(st.sampled_from(["c", "u", "d", "r", "t", "m", "x", ""]))
    datum = {"before": draw(st.none() | st.just(row)), "after": draw(st.none() | st.just(row)),
             "source": src, "op": op, "ts_ms": draw(st.none() | st.integers(-(2**63), 2**63 - 1))}
    value = confluent(AVRO_ID + 100, strip_logical_types(schema), datum)
    return draw(damaged(value)), schema


# --- CES events, from the encoder -------------------------------------------------------------


def _ces_events() -> tuple[list[dict[str, Any]], list[bytes]]:
    """Whole CES events (JSON as dicts, Avro as bytes) of an insert, an update, a delete and a
    key change, encoded from Debezium records by this project's encoder."""
    later = source(commit_lsn="00000028:00000100:0005", change_lsn="00000028:00000100:0002")
    inputs = [envelope(), UPDATE, envelope(op="d", before={"id": 1, "amount": "AMg="},
                                           after=None, source=later)]
    pipeline = Pipeline()
    records = [RawRecord(TOPIC, 0, n, None, schemaless({"id": 1}), schemaful(doc))
               for n, doc in enumerate(inputs)]
    changes = [c for c in pipeline.translate(records) if isinstance(c, ChangeRecord)]
    assert len(changes) == 3
    json_events = [json.loads(m.value) for c in changes
                   for m in CesEncoder(catalog=pipeline.catalog).encode(c)]
    avro_events = [m.value for c in changes
                   for m in CesEncoder(catalog=pipeline.catalog, encoding="avro").encode(c)]
    # a key change: old image under key 1, pkkey 2
    key_change = copy.deepcopy(json_events[1])
    data = json.loads(key_change["data"])
    data["eventsource"]["pkkey"] = [{"columnname": "id", "value": "2"}]
    key_change["data"] = json.dumps(data)
    return [*json_events, key_change], avro_events


CES_JSON, CES_AVRO = _ces_events()
ces_whole = st.sampled_from(CES_JSON)


@st.composite
def ces_json_event(draw: st.DrawFn) -> dict[str, Any]:
    """A CES JSON event with its envelope and/or its ``data`` document broken."""
    event = draw(mutated(draw(ces_whole)))
    if isinstance(event.get("data"), str) and draw(st.booleans()):
        try:
            data = json.loads(event["data"])
        except ValueError:
            return event
        data = draw(mutated(data, 4))
        event["data"] = data if draw(st.booleans()) else json.dumps(data)  # object or text
    return event


@st.composite
def ces_segments(draw: st.DrawFn) -> list[bytes]:
    """One CES event cut into segments, then shuffled, duplicated (equal or conflicting),
    renumbered, with some ``data`` as an object and some segment attributes of other types."""
    event = draw(ces_whole)
    text = event["data"]
    count = draw(st.integers(1, 4))
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), min_size=count - 1,
                                max_size=count - 1)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    base = draw(st.sampled_from([0, 1, 7, 2**31, 10**20]))
    segments: list[dict[str, Any]] = []
    for n, piece in enumerate(pieces):
        segment = {**event, "segmentindex": base + n, "finalsegment": n == len(pieces) - 1,
                   "data": piece}
        segments.append(segment)
    segments = draw(st.permutations(segments))
    for _ in range(draw(st.integers(0, 2))):  # duplicates, equal or conflicting
        twin = dict(draw(st.sampled_from(segments)))
        if draw(st.booleans()):
            twin["data"] = draw(st.text(max_size=8))
        segments.insert(draw(st.integers(0, len(segments))), twin)
    for _ in range(draw(st.integers(0, 2))):  # attributes of other types
        victim = draw(st.integers(0, len(segments) - 1))
        name = draw(st.sampled_from(["segmentindex", "finalsegment", "logicalid", "data",
                                     "splitindex", "splittotalcnt", "operation"]))
        segments[victim] = {**segments[victim], name: draw(
            json_values | st.just({"eventsource": {}, "eventrow": {}}))}
    return [encode_json(s) for s in segments]


@st.composite
def ces_avro_event(draw: st.DrawFn) -> bytes:
    """A CES Avro event: attributes redrawn (of their Avro types), data cut or damaged."""
    value = draw(st.sampled_from(CES_AVRO))
    event = ces_avro.decode_envelope(value)
    for name in draw(st.lists(st.sampled_from(list(event)), max_size=3)):
        if name == "segmentindex":
            event[name] = draw(st.integers(-(2**31), 2**31 - 1))
        elif name == "finalsegment":
            event[name] = draw(st.booleans())
        elif name == "data":
            event[name] = draw(damaged(event["data"]))
        else:
            event[name] = draw(st.text(max_size=12) | st.sampled_from(EDGE_TEXTS))
    return draw(damaged(ces_avro.encode_envelope(event)))


# --- the check ---------------------------------------------------------------------------------


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def decoder_bugs() -> Iterator[list[logging.LogRecord]]:
    """ERROR records logged by the package (decoder bugs are logged with their traceback)."""
    handler = _Collect()
    logger = logging.getLogger("debezium_bridge")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


def pipeline_for(extra_schemas: dict[str, Any] | None = None) -> Pipeline:
    schemas = {str(AVRO_ID): AVRO_ENVELOPE, str(AVRO_KEY_ID): AVRO_KEY, **(extra_schemas or {})}
    return Pipeline(decoder=Decoder(avro=AvroDecoder(FileSchemaResolver(schemas))))


def check(records: list[RawRecord], pipeline: Pipeline | None = None) -> list[DeadLetter]:
    """Run ``records`` through the pipeline; nothing escapes, everything is classified."""
    pipeline = pipeline or pipeline_for()
    with decoder_bugs() as bugs:
        out = list(pipeline.translate(records))
    dead = [item for item in out if isinstance(item, DeadLetter)]
    assert not bugs, [f"{r.getMessage()}\n{r.exc_text or ''}" for r in bugs]
    for letter in dead:
        assert letter.stage in REAL_STAGES, letter.describe()
        assert not letter.message.startswith("unexpected"), letter.describe()
        assert not PYTHON_ERRORS.search(letter.message), letter.describe()
        assert letter.error_module == "debezium_bridge.errors", letter
        assert letter.message, letter
    translator, assembler = pipeline.translator.counters, pipeline.assembler.counters
    assert translator.balanced, translator.summary()
    assert assembler.balanced, assembler.summary()
    assert translator.pending == 0 and assembler.held == 0
    assert len(dead) == translator.dead_letters + assembler.dead_letters
    changes = [item for item in out if isinstance(item, ChangeRecord)]
    assert len(changes) == translator.changes_out
    return dead


def one(value: bytes | None, key: bytes | None = None, hdrs: tuple[Any, ...] = (),
        offset: int = 0, partition: int = 0) -> RawRecord:
    return RawRecord(TOPIC, partition, offset, None, key, value, hdrs)


# --- the tests ---------------------------------------------------------------------------------


@FUZZ
@given(value=schemaless_values.flatmap(damaged), key=keys, hdrs=headers)
def test_fuzz_schemaless_json(value: bytes, key: bytes | None, hdrs: tuple[Any, ...]) -> None:
    check([one(value, key, hdrs)])


@FUZZ
@given(value=schemaful_values.flatmap(damaged), key=keys, hdrs=headers)
def test_fuzz_json_with_schema(value: bytes, key: bytes | None, hdrs: tuple[Any, ...]) -> None:
    check([one(value, key, hdrs)])


@FUZZ
@given(value=avro_json_values, key=keys)
def test_fuzz_avro_json(value: bytes, key: bytes | None) -> None:
    check([one(value, key)])


@FUZZ
@given(value=cloudevent_values.flatmap(damaged), key=keys, hdrs=headers)
def test_fuzz_debezium_cloudevents(value: bytes, key: bytes | None,
                                   hdrs: tuple[Any, ...]) -> None:
    check([one(value, key, hdrs)])


@FUZZ
@given(case=avro_records(), key=keys, hdrs=headers)
def test_fuzz_confluent_avro_with_random_writer_schemas(
        case: tuple[bytes, dict[str, Any]], key: bytes | None, hdrs: tuple[Any, ...]) -> None:
    value, schema = case
    check([one(value, key, hdrs)], pipeline_for({str(AVRO_ID + 100): schema}))


@FUZZ
@given(event=ces_json_event(), key=keys, hdrs=headers)
def test_fuzz_ces_json(event: dict[str, Any], key: bytes | None,
                       hdrs: tuple[Any, ...]) -> None:
    check([one(encode_json(event), key, hdrs)])


@FUZZ
@given(value=ces_avro_event(), hdrs=headers)
def test_fuzz_ces_avro(value: bytes, hdrs: tuple[Any, ...]) -> None:
    check([one(value, None, hdrs)])


@FUZZ
@given(values=ces_segments(), damage=st.booleans(), data=st.data())
def test_fuzz_ces_segments(values: list[bytes], damage: bool, data: st.DataObject) -> None:
    if damage:
        values = [data.draw(damaged(v)) for v in values]
    check([one(v, offset=n) for n, v in enumerate(values)])


any_value = st.one_of(schemaless_values, schemaful_values, avro_json_values, cloudevent_values,
                      st.builds(encode_json, ces_json_event()), ces_avro_event(),
                      st.sampled_from([encode_json(e) for e in CES_JSON]), st.none())


@settings(FUZZ, max_examples=EXAMPLES // 2)
@given(stream=st.lists(st.tuples(any_value, keys, st.integers(0, 2)), min_size=1, max_size=6))
def test_fuzz_mixed_streams(stream: list[tuple[bytes | None, bytes | None, int]]) -> None:
    """Encodings mixed in one stream over three partitions (ordering, dedupe, pairing and the
    assembler see bad records between good ones)."""
    check([one(value, key, offset=n, partition=p) for n, (value, key, p) in enumerate(stream)])


BASELINES = [*(encode_json(e) for e in CES_JSON), *CES_AVRO, *(schemaful(e) for e in ENVELOPES),
             *(schemaless(e) for e in ENVELOPES), *(schemaless(avro_json(e)) for e in ENVELOPES),
             *(encode_json(cloudevent(e, s)) for e in ENVELOPES for s in (False, True))]


@pytest.mark.parametrize("value", BASELINES, ids=[f"seed{n}" for n in range(len(BASELINES))])
def test_the_fuzzed_seeds_are_valid(value: bytes) -> None:
    """The seeds of the fuzzers translate without a dead letter."""
    assert check([one(value, schemaless({"id": 1}))]) == []
