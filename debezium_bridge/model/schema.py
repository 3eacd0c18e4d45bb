"""Kafka Connect schemas of Debezium row images, as the translator needs them.

A :class:`TableSchema` describes the columns of one table version (the ``<topic>.Value`` struct of
the envelope). It is built from a JsonConverter ``schema`` object, from an Avro record schema
written by Confluent's AvroConverter, or from a table-schema file, and compiled once per table
version into value converters (see :mod:`debezium_bridge.formats.debezium.logical`).
"""

from __future__ import annotations

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


class Column(msgspec.Struct, frozen=True):
    """One field of a Connect struct: the column name, its Connect type and semantic name.

    ``semantic`` is the Connect schema ``name`` (``io.debezium.time.NanoTimestamp``,
    ``org.apache.kafka.connect.data.Decimal``, ...); ``parameters`` are the Connect schema
    parameters (``scale``, ``connect.decimal.precision``, and with ``column.propagate.source.type``
    ``__debezium.source.column.type`` / ``.length`` / ``.scale``).
    """

    name: str
    connect_type: str
    semantic: str | None = None
    optional: bool = True
    parameters: Mapping[str, str] = msgspec.field(default_factory=dict)
    default: Any = None
    version: int | None = None

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
    """A :class:`Column` from one JsonConverter field schema (``{"type","field",...}``)."""
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
    return TableSchema(name=struct.get("name"), columns=columns)
