"""The canonical record as a typed Spark struct: ``parse_canonical(out, table_schema)``.

With the table's Debezium (Connect) schema, ``key``/``before``/``after`` become structs with
Spark types for the columns whose canonical JSON value maps losslessly (integers, floats,
booleans, strings); decimals, temporal values and binary stay strings, exactly as in the
canonical JSON (docs/canonical.md), because Spark's decimal and timestamp types would round them.
Without a schema they are ``map<string,string>``.
"""

from __future__ import annotations

from typing import Any

from debezium_bridge.model.schema import Column, TableSchema

_SPARK_TYPES = {"int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint",
                "float32": "float", "float64": "double", "boolean": "boolean",
                "string": "string"}
"""Connect ``Schema.Type`` → Spark type. A :class:`Column` holds these names (a JsonConverter
``"double"``/``"float"`` is read as ``float64``/``float32``); other types (bytes, arrays, maps,
structs) stay canonical strings."""


def _spark_type(column: Column) -> str:
    if column.semantic is None:
        return _SPARK_TYPES.get(column.connect_type, "string")
    return "string"  # logical types: canonical strings (decimals, times, ...)


def _image(schema: TableSchema | None, names: tuple[str, ...] | None = None) -> str:
    if schema is None:
        return "map<string, string>"
    columns = [c for c in schema.columns if names is None or c.name in names]
    return "struct<" + ", ".join(f"`{c.name}`: {_spark_type(c)}" for c in columns) + ">"


def canonical_schema(table: TableSchema | None = None,
                     key_columns: tuple[str, ...] | None = None) -> str:
    """The DDL of the canonical record (format_version 1)."""
    image = _image(table)
    key = _image(table, key_columns) if key_columns else image if table is None \
        else "map<string, string>"
    return (
        f"op string, table struct<db: string, schema: string, name: string>, table_id string, "
        f"key {key}, old_key {key}, key_changed boolean, before {image}, after {image}, "
        f"changed_columns array<string>, unavailable_columns array<string>, "
        f"position struct<commit_lsn: string, change_lsn: string, event_serial_no: bigint>, "
        f"seq string, commit_ts string, capture_ts string, "
        f"tx struct<id: string, total_order: bigint, data_collection_order: bigint, "
        f"begin_lsn: string>, snapshot string, "
        f"source struct<connector: string, name: string, version: string>, "
        f"lineage array<struct<topic: string, partition: int, offset: bigint>>, "
        f"event_id string, format_version int"
    )


def parse_canonical(out: Any, table: TableSchema | None = None,
                    key_columns: tuple[str, ...] | None = None) -> Any:
    """The canonical rows of :func:`~debezium_bridge.spark.translate` output as typed structs
    (one column per canonical field)."""
    from pyspark.sql import functions as F

    schema = canonical_schema(table, key_columns)
    changes = out.where((F.col("kind") == "change") & (F.col("format") == "canonical"))
    return changes.select(F.from_json(F.col("value").cast("string"), schema).alias("r")) \
        .select("r.*")
