"""Kafka Connect schemas of Debezium row images, as the translator needs them.

A :class:`TableSchema` describes the columns of one table version (the ``<topic>.Value`` struct of
the envelope). It is built from a JsonConverter ``schema`` object, from an Avro record schema
written by Confluent's AvroConverter, or from a table-schema file, and compiled once per table
version into value converters (see :mod:`debezium_bridge.formats.debezium.logical`).

Type names: inside the bridge, :attr:`Column.connect_type` is always a Connect ``Schema.Type``
name in lower case (:data:`CONNECT_TYPES`: ``int8 int16 int32 int64 float32 float64 boolean
string bytes array map struct``). Kafka's JsonConverter spells two of them differently in the
``schema`` it writes (``JsonSchema.java``, ``JsonConverter#asJsonSchema``/``#asConnectSchema``):
FLOAT32 is ``"float"`` and FLOAT64 is ``"double"``. :func:`connect_type_from_json` converts when a
JsonConverter schema is read (the bridge's own output before this rule wrote ``float32``/
``float64``, so both spellings are read); :func:`json_type_name` converts back when one is written.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

import msgspec

from debezium_bridge.errors import SchemaError

SOURCE_TYPE_PARAM = "__debezium.source.column.type"
SOURCE_LENGTH_PARAM = "__debezium.source.column.length"
SOURCE_SCALE_PARAM = "__debezium.source.column.scale"

CONNECT_PRIMITIVES = frozenset(
    {"int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string", "bytes"}
)
CONNECT_TYPES = CONNECT_PRIMITIVES | {"array", "map", "struct"}
"""Connect ``Schema.Type`` names, lower case: the bridge's one vocabulary of Connect types."""

_JSON_NAMES: dict[str, str] = {name: name for name in CONNECT_TYPES} | {
    "float32": "float", "float64": "double"}
"""Connect type → the name Kafka's JsonConverter writes (``JsonSchema.FLOAT_TYPE_NAME`` ``"float"``,
``DOUBLE_TYPE_NAME`` ``"double"``; every other name is the lower-case ``Schema.Type``)."""
_FROM_JSON: dict[str, str] = {json: name for name, json in _JSON_NAMES.items()} | {
    "float32": "float32", "float64": "float64"}  # written by this bridge before it wrote JSON names


def connect_type_from_json(name: Any) -> str:
    """The Connect type of a JsonConverter schema ``type`` (``"double"`` → ``float64``,
    ``"float"`` → ``float32``; ``float32``/``float64`` are read too). An unknown name is a
    :class:`~debezium_bridge.errors.SchemaError`, as in ``JsonConverter#asConnectSchema``."""
    found = _FROM_JSON.get(name) if isinstance(name, str) else None
    if found is None:
        raise SchemaError(f"unknown Connect schema type {name!r:.60}")
    return found


def json_type_name(connect_type: str) -> str:
    """The ``type`` Kafka's JsonConverter writes for a Connect type (``float64`` → ``"double"``,
    ``float32`` → ``"float"``, others unchanged)."""
    found = _JSON_NAMES.get(connect_type)
    if found is None:
        raise SchemaError(f"not a Connect type: {connect_type!r:.60}")
    return found


class Column(msgspec.Struct, frozen=True):
    """One field of a Connect struct: the column name, its Connect type and semantic name.

    ``semantic`` is the Connect schema ``name`` (``io.debezium.time.NanoTimestamp``,
    ``org.apache.kafka.connect.data.Decimal``, ...); ``parameters`` are the Connect schema
    parameters (``scale``, ``connect.decimal.precision``, and with ``column.propagate.source.type``
    ``__debezium.source.column.type`` / ``.length`` / ``.scale``).
    """

    name: str
    connect_type: str
    """A Connect ``Schema.Type`` name (:data:`CONNECT_TYPES`; never a JsonConverter spelling)."""
    semantic: str | None = None
    optional: bool = True
    parameters: Mapping[str, str] = msgspec.field(default_factory=dict)
    default: Any = None
    version: int | None = None

    def __post_init__(self) -> None:
        if self.connect_type not in CONNECT_TYPES:
            raise SchemaError(f"column {self.name!r}: {self.connect_type!r:.60} is not a Connect "
                              f"type (one of {', '.join(sorted(CONNECT_TYPES))})")

    @property
    def source_type(self) -> str | None:
        """The SQL Server type name Debezium propagated, upper-case (``DECIMAL``), if any."""
        value = self.parameters.get(SOURCE_TYPE_PARAM)
        return value.upper() if value else None

    @property
    def source_length(self) -> int | None:
        value = self.parameters.get(SOURCE_LENGTH_PARAM)
        return int(value) if value not in (None, "") else None

    @property
    def source_scale(self) -> int | None:
        value = self.parameters.get(SOURCE_SCALE_PARAM)
        return int(value) if value not in (None, "") else None


class TableSchema(msgspec.Struct, frozen=True):
    """The columns of one table version, in schema order."""

    name: str | None
    columns: tuple[Column, ...]

    def column(self, name: str) -> Column | None:
        for column in self.columns:
            if column.name == name:
                return column
        return None

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)


def column_from_connect(field: Mapping[str, Any]) -> Column:
    """A :class:`Column` from one JsonConverter field schema (``{"type","field",...}``); the
    type name is converted to the Connect one (:func:`connect_type_from_json`)."""
    try:
        name = field["field"]
        connect_type = field["type"]
    except (KeyError, TypeError) as exc:
        raise SchemaError(f"malformed Connect field schema: {field!r:.200}") from exc
    if not isinstance(name, str) or not isinstance(connect_type, str):
        raise SchemaError(f"malformed Connect field schema: {field!r:.200}")
    params = field.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise SchemaError(f"Connect parameters of {name!r} are not an object")
    try:
        connect_type = connect_type_from_json(connect_type)
    except SchemaError as exc:
        raise SchemaError(f"column {name!r}: {exc.message}") from None
    return Column(
        name=name,
        connect_type=connect_type,
        semantic=field.get("name"),
        optional=bool(field.get("optional", True)),
        parameters={str(k): str(v) for k, v in params.items()},
        default=field.get("default"),
        version=field.get("version"),
    )


def table_from_connect(struct: Mapping[str, Any]) -> TableSchema:
    """A :class:`TableSchema` from a JsonConverter struct schema (``before``/``after`` field)."""
    if not isinstance(struct, Mapping) or struct.get("type") != "struct":
        raise SchemaError(f"expected a Connect struct schema, got {struct!r:.200}")
    fields = struct.get("fields")
    if not isinstance(fields, list):
        raise SchemaError("Connect struct schema has no fields list")
    columns = tuple(column_from_connect(f) for f in fields)
    names = collections.Counter(c.name for c in columns)
    if len(names) != len(columns):  # Connect's SchemaBuilder refuses such a struct
        twice = sorted(n for n, count in names.items() if count > 1)
        raise SchemaError(f"Connect struct schema lists a field twice: {twice!r:.200}")
    return TableSchema(name=struct.get("name"), columns=columns)
