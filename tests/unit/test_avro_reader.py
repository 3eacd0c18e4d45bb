"""The generated Avro readers decode exactly like fastavro, or decline (and fastavro decides)."""

from __future__ import annotations

import io
import itertools
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debezium_bridge.formats.debezium.avro_reader import TooManyItems, compile_reader

_names = itertools.count()

PRIMITIVES = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]


def _named(kind: str, **rest: Any) -> dict[str, Any]:
    return {"type": kind, "name": f"n{next(_names)}", **rest}


def schemas(depth: int = 3) -> st.SearchStrategy[Any]:
    leaf = st.one_of(
        st.sampled_from(PRIMITIVES),
        st.sampled_from(PRIMITIVES[1:]).map(lambda t: {"type": t, "connect.name": "x"}),
        st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True)
        .map(lambda symbols: _named("enum", symbols=symbols)),
        st.integers(0, 5).map(lambda size: _named("fixed", size=size)),
    )
    if depth == 0:
        return leaf
    inner = schemas(depth - 1)
    return st.one_of(
        leaf,
        st.lists(inner, min_size=0, max_size=4).map(
            lambda types: _named("record", fields=[{"name": f"f{i}", "type": t}
                                                   for i, t in enumerate(types)])),
        inner.map(lambda t: {"type": "array", "items": t}),
        inner.map(lambda t: {"type": "map", "values": t}),
        st.lists(st.sampled_from(PRIMITIVES), min_size=1, max_size=4, unique=True),
        leaf.filter(lambda t: t != "null").map(lambda t: ["null", t]),
    )


def datums(schema: Any) -> st.SearchStrategy[Any]:
    if isinstance(schema, list):
        return st.one_of(*(datums(branch) for branch in schema))
    kind = schema["type"] if isinstance(schema, dict) else schema
    simple: dict[str, st.SearchStrategy[Any]] = {
        "null": st.none(), "boolean": st.booleans(),
        "int": st.integers(-(2**31), 2**31 - 1), "long": st.integers(-(2**63), 2**63 - 1),
        "float": st.floats(width=32, allow_nan=False), "double": st.floats(allow_nan=False),
        "bytes": st.binary(max_size=20), "string": st.text(max_size=20),
    }
    if kind in simple:
        return simple[kind]
    if kind == "enum":
        return st.sampled_from(schema["symbols"])
    if kind == "fixed":
        return st.binary(min_size=schema["size"], max_size=schema["size"])
    if kind == "array":
        return st.lists(datums(schema["items"]), max_size=4)
    if kind == "map":
        return st.dictionaries(st.text(max_size=5), datums(schema["values"]), max_size=4)
    return st.fixed_dictionaries({f["name"]: datums(f["type"]) for f in schema["fields"]})


def fastavro_read(parsed: Any, data: bytes) -> tuple[Any, int] | None:
    buffer = io.BytesIO(data)
    try:
        datum = fastavro.schemaless_reader(buffer, parsed, None)
    except Exception:
        return None
    return datum, buffer.tell()


def generated_read(parsed: Any, data: bytes) -> tuple[Any, int] | None:
    try:
        return compile_reader(parsed)(data, 0)
    except Exception:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data(), schemas())
def test_generated_reader_matches_fastavro(data, schema):
    parsed = fastavro.parse_schema({"type": "record", "name": f"top{next(_names)}",
                                    "fields": [{"name": "value", "type": schema}]})
    datum = data.draw(datums(parsed))
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, parsed, datum)
    encoded = buffer.getvalue() + data.draw(st.binary(max_size=3))
    assert repr(generated_read(parsed, encoded)) == repr(fastavro_read(parsed, encoded))
    for broken in (encoded[:data.draw(st.integers(0, len(encoded)))],
                   data.draw(st.binary(max_size=40))):
        ours = generated_read(parsed, broken)
        if ours is not None:  # otherwise fastavro decides; when it accepts, it must agree
            assert repr(ours) == repr(fastavro_read(parsed, broken))


def test_projection_reads_past_the_fields_it_does_not_keep():
    schema = fastavro.parse_schema({
        "type": "record", "name": "Envelope", "fields": [
            {"name": "source", "type": {"type": "record", "name": "Source", "fields": [
                {"name": "ts_ms", "type": "long"}, {"name": "ts_ns", "type": ["null", "long"]},
                {"name": "sequence", "type": ["null", "string"]}]}},
            {"name": "ts_us", "type": ["null", "long"]},
            {"name": "op", "type": "string"}]})
    datum = {"source": {"ts_ms": 1_700_000_000_000, "ts_ns": 1_700_000_000_000_000_000,
                        "sequence": "x"}, "ts_us": -(2**63), "op": "u"}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, datum)
    data = buffer.getvalue()
    read = compile_reader(schema, {"source": {"ts_ms": None}, "op": None})
    assert read(data, 0) == ({"source": {"ts_ms": 1_700_000_000_000}, "op": "u"}, len(data))
    assert generated_read(schema, data[:-1]) is None


def test_recursive_records_and_truncated_spans():
    schema = fastavro.parse_schema({
        "type": "record", "name": "Node", "fields": [
            {"name": "label", "type": "string"},
            {"name": "next", "type": ["null", "Node"]}]})
    datum = {"label": "a", "next": {"label": "é" * 70, "next": {"label": "", "next": None}}}
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, datum)
    data = buffer.getvalue()
    assert compile_reader(schema)(data, 0) == (datum, len(data))
    for cut in range(len(data)):
        assert generated_read(schema, data[:cut]) is None


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


@pytest.mark.parametrize("items", ["null", {"type": "fixed", "name": "One", "size": 1},
                                   {"type": "array", "items": "null"}])
def test_arrays_announcing_more_items_than_the_data_holds_are_bad_data(items: Any) -> None:
    """A few bytes can announce 2**40 items; fastavro would build them (an item of ``null``
    takes no bytes, a ``fixed`` is sliced past the end): the reader refuses at once."""
    parsed = fastavro.parse_schema({"type": "record", "name": f"bomb{next(_names)}",
                                    "fields": [{"name": "value", "type": {
                                        "type": "array", "items": items}}]})
    bomb = _zigzag(2**40) + b"\x00"
    if isinstance(items, dict) and items["type"] == "array":  # 1 item holding 2**40 nulls
        bomb = _zigzag(1) + bomb + b"\x00"
    with pytest.raises(TooManyItems):
        compile_reader(parsed)(bomb, 0)


def test_arrays_of_items_that_take_no_bytes_read_as_fastavro_reads_them() -> None:
    parsed = fastavro.parse_schema({"type": "record", "name": f"nulls{next(_names)}",
                                    "fields": [{"name": "value", "type": {
                                        "type": "array", "items": "null"}}]})
    data = _zigzag(3000) + b"\x00"
    assert generated_read(parsed, data) == fastavro_read(parsed, data)
    assert generated_read(parsed, data) == ({"value": [None] * 3000}, len(data))
