"""Confluent Avro wire format (magic 0 + 4-byte schema id + Avro binary) and Avro-JSON.

Writer schemas come from a :class:`SchemaResolver`: a Confluent Schema Registry (through
confluent-kafka's client) or an offline file mapping schema id → schema. Avro logical types are
stripped before parsing, so fastavro yields the same Connect-level values (unscaled decimal bytes,
epoch integers) that the JSON path sees, and one set of converters serves both.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping
from typing import Any

import fastavro
import msgspec

from debezium_bridge.errors import DecodeError, EnvelopeError, SchemaError, ValueConversionError
from debezium_bridge.formats.debezium.avro_reader import (
    Projection,
    TooManyItems,
    compile_reader,
    fastavro_reason,
)
from debezium_bridge.formats.debezium.envelope import (
    Envelope,
    RowDecoderLike,
    RowSource,
    Source,
    Transaction,
    build_event,
)
from debezium_bridge.formats.debezium.registry import SchemaResolver
from debezium_bridge.model.change import ChangeEvent, SideRecord
from debezium_bridge.model.records import RawRecord
from debezium_bridge.model.schema import Column, TableSchema

log = logging.getLogger(__name__)
_AVRO_PRIMITIVES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_AVRO_TO_CONNECT = {"int": "int32", "long": "int64", "float": "float32", "double": "float64",
                    "boolean": "boolean", "string": "string", "bytes": "bytes", "record": "struct",
                    "array": "array", "map": "map", "enum": "string", "fixed": "bytes"}
"""Avro type → Connect type, as ``AvroData#toConnectSchema`` reads it (Avro ``float`` is FLOAT32,
``double`` FLOAT64)."""
_INT_CONNECT_TYPES = frozenset({"int8", "int16"})
"""``connect.type`` annotations of an Avro ``int`` (``AvroData.NON_AVRO_TYPES_BY_TYPE_CODE``)."""


def _connect_type(avro_type: Any, annotation: Any, column: Any) -> str:
    """The Connect type of an Avro (non-null) type; unknown names are schema errors."""
    if isinstance(avro_type, list):  # a union of several types: AvroData's generalized sum struct
        return "struct"
    if annotation is not None and avro_type == "int":
        if not isinstance(annotation, str) or annotation not in _INT_CONNECT_TYPES:
            raise SchemaError(f"column {column!r}: unknown connect.type {annotation!r:.60}")
        return str(annotation)
    found = _AVRO_TO_CONNECT.get(avro_type) if isinstance(avro_type, str) else None
    if found is None:
        raise SchemaError(f"column {column!r}: unknown Avro type {avro_type!r:.60}")
    return found


def strip_logical_types(schema: Any) -> Any:
    """A copy of an Avro schema without ``logicalType`` so values stay Connect-level."""
    if isinstance(schema, list):
        return [strip_logical_types(s) for s in schema]
    if isinstance(schema, dict):
        return {k: strip_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    return schema


def _non_null(avro_type: Any) -> tuple[Any, bool]:
    if isinstance(avro_type, list):
        branches = [t for t in avro_type if t != "null"]
        return (branches[0] if len(branches) == 1 else branches), len(branches) < len(avro_type)
    return avro_type, False


def column_from_avro(field: Mapping[str, Any], names: AvroNames,
                     namespace: str | None = None) -> Column:
    """A Connect :class:`Column` from one Avro field written by Confluent's AvroConverter
    (``namespace``: the enclosing record's, which a type name in the field is resolved in)."""
    avro_type, optional = _non_null(field["type"])
    if isinstance(avro_type, str):
        avro_type = names.resolve(avro_type, namespace) or avro_type
    if isinstance(avro_type, dict):
        connect_type = _connect_type(avro_type.get("type"), avro_type.get("connect.type"),
                                     field.get("name"))
        semantic = avro_type.get("connect.name")
        params = avro_type.get("connect.parameters") or {}
        if not isinstance(params, dict):
            raise SchemaError(f"column {field.get('name')!r}: connect.parameters is not a map: "
                              f"{params!r:.60}")
        if semantic == "org.apache.kafka.connect.data.Decimal" and "scale" not in params:
            params = {**params, "scale": str(avro_type.get("scale", 0))}
        version = avro_type.get("connect.version")
    else:
        connect_type = _connect_type(avro_type, None, field.get("name"))
        semantic, params, version = None, {}, None
    return Column(name=field["name"], connect_type=connect_type, semantic=semantic,
                  optional=optional, parameters={str(k): str(v) for k, v in params.items()},
                  default=field.get("default"), version=version)


class AvroNames:
    """The named types (record, enum, fixed) of an Avro schema by full name, and a type name
    resolved as the Avro specification and fastavro, the reader, resolve it: a dotted name is
    a full name; a bare one is in the namespace of the enclosing named type (its
    ``namespace``, or the part of a dotted ``name`` before the last dot, or the namespace it
    inherits)."""

    def __init__(self, schema: Any) -> None:
        self.types: dict[str, Any] = {}
        self._spaces: dict[int, str | None] = {}
        self._collect(schema, None)

    def _collect(self, schema: Any, namespace: str | None) -> None:
        if isinstance(schema, list):
            for branch in schema:
                self._collect(branch, namespace)
        elif isinstance(schema, dict):
            name = schema.get("name")
            if schema.get("type") in ("record", "enum", "fixed") and isinstance(name, str):
                if "." in name:
                    namespace, full = name.rsplit(".", 1)[0], name
                else:
                    namespace = schema.get("namespace", namespace)
                    full = f"{namespace}.{name}" if namespace else name
                self.types[full] = schema
                self._spaces[id(schema)] = namespace
            fields = schema.get("fields")
            for field in fields if isinstance(fields, list) else ():
                if isinstance(field, dict):
                    self._collect(field.get("type"), namespace)
            for key in ("items", "values"):
                if key in schema:
                    self._collect(schema[key], namespace)

    def namespace_of(self, named_type: Any) -> str | None:
        """The namespace type names inside a named type of this schema are resolved in."""
        return self._spaces.get(id(named_type))

    def resolve(self, name: str, namespace: str | None) -> Any | None:
        """The definition a type name stands for where ``namespace`` encloses it."""
        return self.types.get(name if "." in name or not namespace else f"{namespace}.{name}")


def table_from_avro(record_schema: Mapping[str, Any], names: AvroNames) -> TableSchema:
    fields = record_schema.get("fields")
    if not isinstance(fields, list):
        raise SchemaError("Avro row schema is not a record")
    name = record_schema.get("connect.name") or record_schema.get("name")
    namespace = names.namespace_of(record_schema)
    return TableSchema(name=name, columns=tuple(column_from_avro(f, names, namespace)
                                                for f in fields))


def envelope_row_schema(schema: Mapping[str, Any]) -> TableSchema | None:
    """The row record (type of ``after``/``before``) of an Avro Debezium envelope."""
    names = AvroNames(schema)
    return _row_schema(schema, names, cloudevent=True)


def _row_schema(record: Mapping[str, Any], names: AvroNames, *,
                cloudevent: bool) -> TableSchema | None:
    """The row record of ``record``'s ``before``/``after`` fields, or (``cloudevent``) of its
    ``data`` record's (Debezium's CloudEvents: ``data`` holds just ``before`` and ``after``)."""
    for field in record.get("fields") or ():
        name = field.get("name") if isinstance(field, dict) else None
        if name in ("after", "before") or (cloudevent and name == "data"):
            inner, _ = _non_null(field["type"])
            if isinstance(inner, str):
                inner = names.resolve(inner, names.namespace_of(record))
            if not (isinstance(inner, dict) and inner.get("type") == "record"):
                continue
            if name == "data":
                return _row_schema(inner, names, cloudevent=False)
            return table_from_avro(inner, names)
    return None


def _latin1_bytes(value: Any) -> Any:
    """Avro-JSON bytes: each byte is one character U+0000..U+00FF."""
    if not isinstance(value, str):
        return value
    try:
        return value.encode("latin-1")
    except UnicodeEncodeError as exc:
        raise ValueConversionError(
            f"Avro-JSON bytes hold a character beyond U+00FF ({value[exc.start]!r} at "
            f"{exc.start}); bytes are written as ISO-8859-1 text") from exc


class _AvroJsonRows:
    """Avro-JSON row images: bytes arrive as ISO-8859-1 text; convert, then decode."""

    def __init__(self, rows: RowDecoderLike, schema: TableSchema) -> None:
        self.schema = schema
        self._rows = rows
        self._bytes = tuple(c.name for c in schema.columns if c.connect_type == "bytes")
        self._branches = {c.name: _AVRO_BRANCH[c.connect_type] for c in schema.columns
                          if c.connect_type in _AVRO_BRANCH}

    def check_branches(self, doc: dict[str, Any]) -> None:
        """The union branches an Avro-JSON datum names for its row columns (``{"int": 19000}``)
        are those of this schema's columns: a value written with another version of the
        schema (the subject's latest is all a dump without schema ids gives) is refused, not
        read as this version's type."""
        for image in ("before", "after"):
            wrapped = doc.get(image)
            if wrapped.__class__ is not dict or len(wrapped) != 1:
                continue
            (row,) = wrapped.values()
            if row.__class__ is not dict:
                continue
            for name, value in row.items():
                if value.__class__ is dict and len(value) == 1:
                    (branch,) = value
                    expected = self._branches.get(name)
                    if expected is not None and branch in _AVRO_PRIMITIVES \
                            and branch != expected:
                        raise ValueConversionError(
                            f"column {name!r}: Avro-JSON union branch {branch!r}, but the "
                            f"subject's latest schema has {expected!r} (written with another "
                            "schema version)")

    def decode(self, row: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
        for name in self._bytes:
            if name in row:
                try:
                    row[name] = _latin1_bytes(row[name])
                except ValueConversionError as exc:
                    exc.message = f"column {name!r}: {exc.message}"
                    raise
        return self._rows.decode(row)


_AVRO_BRANCH = {"int8": "int", "int16": "int", "int32": "int", "int64": "long",
                "float32": "float", "float": "float", "float64": "double", "double": "double",
                "boolean": "boolean", "string": "string", "bytes": "bytes"}
"""The Avro type (a union branch's name) the AvroConverter writes for each Connect type."""

_ENVELOPE_FIELDS: Projection = {
    **dict.fromkeys(Envelope.__struct_fields__),
    "source": dict.fromkeys(Source.__struct_fields__),
    "transaction": dict.fromkeys(Transaction.__struct_fields__),
}
"""What of a Debezium envelope datum becomes the :class:`Envelope` (the rest is not kept)."""


def _is_envelope(parsed: Any) -> bool:
    """A value schema whose datum always has ``op``, so it always becomes an :class:`Envelope`."""
    return isinstance(parsed, dict) and parsed.get("type") == "record" and any(
        isinstance(field, dict) and field.get("name") == "op" for field in parsed["fields"])


class _Compiled:
    __slots__ = ("columns", "fallbacks", "parsed", "read", "rows")

    def __init__(self, parsed: Any, rows: Any, columns: tuple[str, ...] | None,
                 keep: Projection | None) -> None:
        self.fallbacks = 0
        self.parsed = parsed
        self.read = compile_reader(parsed, keep)
        self.rows = rows
        self.columns = columns


def _fastavro_read(raw: bytes, parsed: Any) -> tuple[Any, int]:
    buffer = io.BytesIO(raw)
    buffer.seek(5)
    try:
        datum = fastavro.schemaless_reader(buffer, parsed, None)
    except Exception as exc:  # fastavro's errors on bad data: EOFError, IndexError, ValueError...
        raise DecodeError(f"Avro payload does not match its schema ({fastavro_reason(exc)})"
                          ) from exc
    return datum, buffer.tell()


class AvroDecoder:
    """Decodes Confluent wire-format keys and values; compiles each schema id once."""

    def __init__(self, resolver: SchemaResolver | None = None) -> None:
        self.resolver = resolver
        self._compiled: dict[int, _Compiled] = {}
        self._key_compiled: dict[int, _Compiled] = {}
        self._json_rows: dict[str, Any] = {}

    def _require_resolver(self) -> SchemaResolver:
        if self.resolver is None:
            raise SchemaError(
                "Confluent Avro record but no schema registry or --avro-schemas given")
        return self.resolver

    def _compile(self, schema_id: int, rows: RowSource, *, key: bool) -> _Compiled:
        schema = self._require_resolver().by_id(schema_id)
        try:
            parsed = fastavro.parse_schema(strip_logical_types(dict(schema)))
        except Exception as exc:
            raise SchemaError(f"Avro schema id {schema_id} is invalid: {exc}") from exc
        if key:
            table = (table_from_avro(schema, AvroNames(schema))
                     if schema.get("type") == "record" else None)
        else:
            table = envelope_row_schema(schema)
        row_decoder = rows.rows_for(table)
        keep = _ENVELOPE_FIELDS if not key and _is_envelope(parsed) else None
        return _Compiled(parsed, row_decoder, table.column_names if table else None, keep)

    def prepare(self, schema_id: int, rows: RowSource, *, key: bool) -> Mapping[str, Any]:
        """Compile a schema id as the first record of that id would (same cache, same errors)
        and return its writer schema: what the native core's Avro reader is built from."""
        cache = self._key_compiled if key else self._compiled
        if schema_id not in cache:
            cache[schema_id] = self._compile(schema_id, rows, key=key)
        return self._require_resolver().by_id(schema_id)

    @staticmethod
    def _read(raw: bytes, compiled: _Compiled) -> Any:
        try:
            datum, end = compiled.read(raw, 5)
        except TooManyItems as exc:  # bad data fastavro would build for minutes
            raise DecodeError(f"Avro payload does not match its schema ({exc})") from exc
        except Exception as exc:  # odd or broken input: fastavro, the reference, decides
            datum, end = _fastavro_read(raw, compiled.parsed)
            if compiled.fallbacks == 0:  # fastavro read what the generated reader declined
                log.warning("Avro schema id %d: the generated reader declined a record that "
                            "fastavro reads (%s: %s); such records take the slower path",
                            int.from_bytes(raw[1:5], "big"), type(exc).__name__, exc)
            compiled.fallbacks += 1
        if end != len(raw):
            raise DecodeError(f"Avro payload has {len(raw) - end} trailing bytes")
        return datum

    @staticmethod
    def _schema_id(raw: bytes) -> int:
        if len(raw) < 5:
            raise DecodeError("Confluent Avro record shorter than its 5-byte header")
        return int.from_bytes(raw[1:5], "big")

    def decode(self, record: RawRecord, rows: RowSource) -> ChangeEvent | SideRecord:
        raw = record.value or b""
        schema_id = self._schema_id(raw)
        compiled = self._compiled.get(schema_id)
        if compiled is None:
            compiled = self._compiled[schema_id] = self._compile(schema_id, rows, key=False)
        datum = self._read(raw, compiled)
        if not isinstance(datum, dict):
            raise EnvelopeError("Avro value is not a record")
        if "iodebeziumop" in datum:  # CloudEventsConverter, serializer.type=avro
            return rows.from_cloudevent(record, datum, compiled.rows, compiled.columns)
        if "op" not in datum:
            from debezium_bridge.formats.debezium.envelope import side_record_of_envelope

            side = side_record_of_envelope(datum, record)
            if side is not None:
                return side
            raise EnvelopeError("Avro record is not a Debezium envelope: no 'op' field")
        try:
            env = msgspec.convert(datum, Envelope, strict=False)
        except msgspec.ValidationError as exc:
            raise EnvelopeError(f"malformed envelope: {exc}") from exc
        key = rows.decode_key(record, record.key, compiled.rows)
        partner = rows.partner_key(record, env.op, compiled.rows)
        return build_event(env, record, key, compiled.rows, partner, compiled.columns)

    def decode_key(self, record: RawRecord, raw: bytes, rows: RowSource) -> dict[str, Any] | None:
        schema_id = self._schema_id(raw)
        compiled = self._key_compiled.get(schema_id)
        if compiled is None:
            compiled = self._key_compiled[schema_id] = self._compile(schema_id, rows, key=True)
        datum = self._read(raw, compiled)
        if datum is None:
            return None
        if not isinstance(datum, dict):
            raise DecodeError("Avro key is not a record")
        return compiled.rows.decode(dict(datum))[0]

    def json_rows(self, topic: str, rows: RowSource) -> Any | None:
        """Row decoder for Avro-JSON values of ``topic`` when its value schema is known."""
        if self.resolver is None:
            return None
        if topic not in self._json_rows:
            schema = self.resolver.by_subject(f"{topic}-value")
            table = envelope_row_schema(schema) if schema else None
            self._json_rows[topic] = (
                _AvroJsonRows(rows.rows_for(table), table) if table is not None else None)
        return self._json_rows[topic]


def unwrap_avro_value(value: Any) -> Any:
    if value.__class__ is dict and len(value) == 1:
        (branch, inner), = value.items()
        if branch in _AVRO_PRIMITIVES or "." in branch:
            if branch == "bytes" and isinstance(inner, str):
                return _latin1_bytes(inner)
            return inner
    return value


def unwrap_avro_json(doc: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """Remove the union-branch wrappers ``{"string": "x"}`` that Avro-JSON puts on optional fields.

    Only the envelope's known fields, the ``source``/``transaction`` fields and row columns are
    unwrapped, one level each, so a genuine single-field struct elsewhere is left alone. Also says
    whether any top-level wrapper was found (the document is Avro-JSON).
    """
    out: dict[str, Any] = {}
    wrapped = False
    for name, value in doc.items():
        unwrapped = unwrap_avro_value(value)
        wrapped = wrapped or unwrapped is not value
        if unwrapped.__class__ is dict and name in ("before", "after", "source", "transaction"):
            try:
                unwrapped = {k: unwrap_avro_value(v) for k, v in unwrapped.items()}
            except ValueConversionError as exc:
                exc.message = f"{name}: {exc.message}"
                raise
        out[name] = unwrapped
    return out, wrapped
