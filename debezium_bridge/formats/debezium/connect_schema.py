"""Connect schemas as the converters write them: JsonConverter's schema JSON of a struct and
Confluent AvroConverter's Avro schema of a Connect schema (``AvroData#fromConnectSchema``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from debezium_bridge.errors import SchemaError
from debezium_bridge.formats.debezium.sqltypes import (
    DECIMAL,
    KAFKA_DATE,
    KAFKA_TIME,
    KAFKA_TIMESTAMP,
    PRECISION_PARAM,
    json_value,
)
from debezium_bridge.model.schema import Column, connect_type_from_json, json_type_name


def field_schema(column: Column) -> dict[str, Any]:
    """The JsonConverter field schema of one column (``type, optional, name?, version?,
    parameters?, default?, field``); ``type`` as JsonConverter spells it (``"double"``,
    ``"float"``)."""
    out: dict[str, Any] = {"type": json_type_name(column.connect_type),
                           "optional": column.optional}
    if column.semantic is not None:
        out["name"] = column.semantic
    if column.version is not None:
        out["version"] = column.version
    if column.parameters:
        out["parameters"] = dict(column.parameters)
    if column.default is not None:
        out["default"] = json_value(column.default)
    out["field"] = column.name
    return out


def connect_struct_schema(
    table_columns: Sequence[Column],
    name: str | None,
    optional: bool = True,
    field: str | None = None,
    version: int | None = None,
) -> dict[str, Any]:
    """A struct schema exactly as Kafka's JsonConverter writes it
    (``type, fields, optional, name?, version?, field?``)."""
    out: dict[str, Any] = {
        "type": "struct",
        "fields": [field_schema(c) for c in table_columns],
        "optional": optional,
    }
    if name is not None:
        out["name"] = name
    if version is not None:
        out["version"] = version
    if field is not None:
        out["field"] = field
    return out


_AVRO_PRIMITIVES = {"int8": "int", "int16": "int", "int32": "int", "int64": "long",
                    "float32": "float", "float64": "double", "boolean": "boolean",
                    "string": "string", "bytes": "bytes"}


_AVRO_LOGICAL = {KAFKA_DATE: "date", KAFKA_TIME: "time-millis", KAFKA_TIMESTAMP: "timestamp-millis"}


_DEFAULT_NAMESPACE = "io.confluent.connect.avro"


_DEFAULT_NAME = "ConnectDefault"


def avro_schema_for(connect_schema: Mapping[str, Any]) -> Any:
    """The Avro schema Confluent's AvroConverter (``AvroData#fromConnectSchema``, default
    ``connect.meta.data=true``) derives from a Connect schema given in JsonConverter form
    (``"double"``/``"float"``, or ``float64``/``float32``, become Avro ``double``/``float``;
    ``int8``/``int16`` an Avro ``int`` with ``connect.type``).

    Records are named after the Connect name (namespace = everything before the last dot), a
    repeated record is a name reference, optional fields are ``["null", T]`` with ``default: null``
    (``[T, "null"]`` with the default when the Connect schema has one), and the Connect metadata
    goes into ``connect.version``, ``connect.parameters``, ``connect.default``, ``connect.name``
    and ``connect.type``. The result is a JSON-ready dict in the key order Avro prints.
    """
    return _AvroBuilder().convert(connect_schema, None, ignore_optional=False)


class _AvroBuilder:
    def __init__(self) -> None:
        self.defined: set[str] = set()

    def convert(self, schema: Mapping[str, Any], space: str | None, ignore_optional: bool) -> Any:
        ctype = connect_type_from_json(schema["type"])
        optional = bool(schema.get("optional", False)) and not ignore_optional
        if ctype == "struct":
            record = self._record(schema, space)
            return ["null", record] if optional else record
        base = self._non_record(schema, space)
        if not optional:
            return base
        return [base, "null"] if schema.get("default") is not None else ["null", base]

    def _record(self, schema: Mapping[str, Any], space: str | None) -> Any:
        full = schema.get("name") or f"{_DEFAULT_NAMESPACE}.{_DEFAULT_NAME}"
        namespace, _, short = full.rpartition(".")
        if full in self.defined:
            return short if namespace == (space or "") else full
        self.defined.add(full)
        out: dict[str, Any] = {"type": "record", "name": short}
        if namespace and namespace != space:
            out["namespace"] = namespace
        elif not namespace and space:
            out["namespace"] = ""
        inner = namespace or None
        out["fields"] = [self._field(f, inner) for f in schema["fields"]]
        self._connect_props(out, schema)
        return out

    def _field(self, schema: Mapping[str, Any], space: str | None) -> dict[str, Any]:
        out: dict[str, Any] = {"name": schema["field"],
                               "type": self.convert(schema, space, ignore_optional=False)}
        if schema.get("default") is not None:
            out["default"] = schema["default"]
        elif schema.get("optional"):
            out["default"] = None
        return out

    def _non_record(self, schema: Mapping[str, Any], space: str | None) -> Any:
        ctype = connect_type_from_json(schema["type"])
        name = schema.get("name")
        params: Mapping[str, str] = schema.get("parameters") or {}
        out: dict[str, Any]
        if ctype == "array":
            out = {"type": "array",
                   "items": self.convert(schema["items"], space, ignore_optional=False)}
        elif ctype in _AVRO_PRIMITIVES:
            out = {"type": _AVRO_PRIMITIVES[ctype]}
        else:
            raise SchemaError(f"no Avro mapping for Connect type {ctype!r}")
        decimal_logical = False
        if ctype == "bytes" and name == DECIMAL:
            scale = int(params.get("scale", "0"))
            precision = int(params.get(PRECISION_PARAM, "64"))
            out["scale"] = scale
            out["precision"] = precision
            decimal_logical = 0 <= scale <= precision
        self._connect_props(out, schema)
        if ctype in ("int8", "int16"):
            out["connect.type"] = ctype
        if decimal_logical:
            out["logicalType"] = "decimal"
        elif name in _AVRO_LOGICAL:
            out["logicalType"] = _AVRO_LOGICAL[name]
        return out if len(out) > 1 else out["type"]

    @staticmethod
    def _connect_props(out: dict[str, Any], schema: Mapping[str, Any]) -> None:
        if schema.get("doc") is not None:
            out["connect.doc"] = schema["doc"]
        if schema.get("version") is not None:
            out["connect.version"] = schema["version"]
        if schema.get("parameters"):
            out["connect.parameters"] = dict(schema["parameters"])
        if schema.get("default") is not None:
            out["connect.default"] = schema["default"]
        if schema.get("name") is not None:
            out["connect.name"] = schema["name"]
