"""SQL column types of the tables in a stream, for ``cols[].type`` and for Debezium output.

A canonical record carries values, not SQL types. The types come from the schemas the decoder
compiles (JsonConverter schemas, Avro schemas, ``--table-schemas`` files) and from the ``cols``
of CES input; a :class:`ColumnCatalog` collects them and answers "which columns, of which SQL
types, has this record's table version".

Where the type comes from, best first:

1. ``cols[].type`` of CES input, verbatim (exact).
2. Debezium's ``__debezium.source.column.type`` / ``.length`` / ``.scale`` Connect parameters
   (``column.propagate.source.type``), e.g. ``NVARCHAR`` + 50 → ``nvarchar(50)`` (exact).
3. The Connect type and semantic name (docs/ces.md), e.g. ``int32`` → ``int``,
   ``float64`` (JsonConverter ``"double"``) → ``float``, ``float32`` (``"float"``) → ``real``,
   ``io.debezium.time.NanoTimestamp`` → ``datetime2(7)``, ``string`` → ``nvarchar(max)``,
   ``Decimal`` with scale 2 and ``connect.decimal.precision`` 10 → ``decimal(10,2)``. Lossy:
   ``tinyint`` reads as ``smallint``, ``datetime`` as ``datetime2(3)``, text lengths as ``max``.
   Column types are Connect ``Schema.Type`` names here; the schema readers convert the
   JsonConverter spellings (:func:`debezium_bridge.model.schema.connect_type_from_json`).
4. No schema at all (schema-less JSON without ``--table-schemas``): guessed from the values
   (``int`` → ``bigint``, ``float`` → ``float``, ``bool`` → ``bit``, anything else →
   ``nvarchar(max)``), remembered per table and column so one column keeps one type. Lossy.

A record is matched to a schema by its table (schema and table name; the database when the
schema name shows it) and the exact tuple of its column names. If two versions of a table have
the same column names and a column changed its type (``ALTER COLUMN``), the version registered
last wins for every record still in flight.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from debezium_bridge.errors import SchemaError
from debezium_bridge.model.change import ChangeRecord, TableRef
from debezium_bridge.model.schema import (
    SOURCE_LENGTH_PARAM,
    SOURCE_SCALE_PARAM,
    SOURCE_TYPE_PARAM,
    Column,
    TableSchema,
)
from debezium_bridge.model.sqltype import SqlType, parse_type, type_from_source


class CatalogColumn(msgspec.Struct, frozen=True, gc=False):
    """One entry of ``eventsource.cols``: column name, SQL type text, ordinal in the table."""

    name: str
    type: str
    index: int
    exact: bool = True
    """False when the type was guessed (Connect-type fallback or from values)."""
    nullable: bool = True
    """The column allows NULL (the connector's field ``optional``)."""

    @property
    def sql_type(self) -> SqlType:
        return parse_type(self.type)


Columns = tuple[CatalogColumn, ...]

_SEMANTIC_TYPES: dict[str, str] = {
    "io.debezium.time.Date": "date",
    "org.apache.kafka.connect.data.Date": "date",
    "io.debezium.time.IsoDate": "date",
    "io.debezium.time.Time": "time(3)",
    "org.apache.kafka.connect.data.Time": "time(3)",
    "io.debezium.time.MicroTime": "time(6)",
    "io.debezium.time.NanoTime": "time(7)",
    "io.debezium.time.IsoTime": "time(7)",
    "io.debezium.time.Timestamp": "datetime2(3)",
    "org.apache.kafka.connect.data.Timestamp": "datetime2(3)",
    "io.debezium.time.MicroTimestamp": "datetime2(6)",
    "io.debezium.time.NanoTimestamp": "datetime2(7)",
    "io.debezium.time.IsoTimestamp": "datetime2(7)",
    "io.debezium.time.ZonedTimestamp": "datetimeoffset(7)",
    "io.debezium.data.Xml": "xml",
    "io.debezium.data.VariableScaleDecimal": "decimal(38,18)",
}
_CONNECT_TYPES: dict[str, str] = {
    "int8": "smallint", "int16": "smallint", "int32": "int", "int64": "bigint",
    "boolean": "bit", "float32": "real", "float64": "float", "string": "nvarchar(max)",
    "bytes": "varbinary(max)", "array": "nvarchar(max)", "map": "nvarchar(max)",
    "struct": "nvarchar(max)",
}
"""Connect ``Schema.Type`` → SQL type; every name of ``CONNECT_TYPES`` (a :class:`Column`
holds no other)."""


def column_type(column: Column) -> tuple[SqlType, bool]:
    """(SQL type, exact?) of a Connect column (module docstring, sources 2 and 3)."""
    params = column.parameters
    source = params.get(SOURCE_TYPE_PARAM)
    if source:
        return type_from_source(source, _int_param(params.get(SOURCE_LENGTH_PARAM)),
                                _int_param(params.get(SOURCE_SCALE_PARAM))), True
    semantic = column.semantic
    if semantic == "org.apache.kafka.connect.data.Decimal":
        precision = _int_param(params.get("connect.decimal.precision")) or 38
        return SqlType("decimal", precision=precision,
                       scale=_int_param(params.get("scale")) or 0), False
    text = _SEMANTIC_TYPES.get(semantic or "") or _CONNECT_TYPES.get(column.connect_type)
    if text is None:
        raise SchemaError(f"column {column.name!r}: no SQL type for Connect type "
                          f"{column.connect_type!r:.60}")
    return parse_type(text), False


def _int_param(value: str | None) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)  # type: ignore[arg-type]
    except ValueError:
        return None


def columns_of(schema: TableSchema) -> Columns:
    """The ``cols`` of a Connect row schema: every field in schema order (``index`` = the
    ordinal)."""
    out = []
    for index, column in enumerate(schema.columns):
        sql_type, exact = column_type(column)
        out.append(CatalogColumn(column.name, sql_type.text, index, exact, column.optional))
    return tuple(out)


def guess_type(value: Any) -> str | None:
    """A SQL type for a schema-less value (``None`` for NULL: no evidence)."""
    if value is None:
        return None
    if value is True or value is False:
        return "bit"
    if value.__class__ is int:
        return "bigint"
    if value.__class__ is float:
        return "float"
    return "nvarchar(max)"


_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def _norm(name: str | None) -> str:
    return _UNSAFE.sub("_", name or "")


def _table_of_schema_name(name: str | None) -> tuple[str | None, str, str] | None:
    """(db or None, schema, table) from a Connect row schema name
    (``<prefix>.<db>.<schema>.<table>.Value``; 1.x ``<prefix>.<schema>.<table>.Value``)."""
    if not name:
        return None
    if name.endswith(".Value"):
        name = name[:-6]
    elif name.endswith(".Key"):
        return None
    parts = name.split(".")
    if len(parts) < 2:
        return None
    db = parts[-3] if len(parts) >= 4 else None
    return db, parts[-2], parts[-1]


class ColumnCatalog:
    """Column types of table versions, fed by schemas and CES ``cols`` (module docstring)."""

    def __init__(self) -> None:
        self._exact: dict[tuple[str, str, str, tuple[str, ...]], Columns] = {}
        self._by_table: dict[tuple[str, str, tuple[str, ...]],
                             list[tuple[str | None, Columns]]] = {}
        self._by_names: dict[tuple[str, ...], Columns] = {}
        self._guessed: dict[str, dict[str, str]] = {}
        """Guessed SQL types per table id and column, least recently guessed table first."""
        self._guessed_columns = 0
        self._cache: dict[tuple[str, tuple[str, ...]], Columns | None] = {}
        self.version = 0
        """Incremented whenever a registration can change a lookup result."""

    # -- feeding ---------------------------------------------------------------------------
    def add_schema(self, schema: TableSchema, table: str | None = None) -> None:
        """Register a Connect row schema (a decoder schema listener). ``table`` names the table
        when the schema name does not (``db.schema.table`` or a topic, as in table-schema
        files); key schemas are ignored."""
        if schema.name and schema.name.endswith(".Key"):
            return
        columns = columns_of(schema)
        names = tuple(c.name for c in columns)
        where = _table_of_schema_name(table) if table else None
        where = where or _table_of_schema_name(schema.name)
        if where is None:
            self._by_names[names] = columns
        else:
            db, schema_name, table_name = where
            key = (_norm(schema_name), _norm(table_name), names)
            versions = self._by_table.setdefault(key, [])
            versions[:] = [v for v in versions if v[0] != db]
            versions.append((db, columns))
        self._cache.clear()
        self.version += 1

    def add(self, table: TableRef, columns: Sequence[CatalogColumn]) -> None:
        """Register the exact columns of a table version (CES ``cols``)."""
        names = tuple(c.name for c in columns)
        key = (table.db, table.schema, table.name, names)
        if self._exact.get(key) != tuple(columns):
            self._exact[key] = tuple(columns)
            self._cache.clear()
            self.version += 1

    # -- looking up ------------------------------------------------------------------------
    def lookup(self, table: TableRef, names: tuple[str, ...]) -> Columns | None:
        """The registered columns of ``table`` with exactly these column names, or ``None``."""
        cache_key = (table.table_id, names)
        found = self._cache.get(cache_key, _MISSING)
        if found is not _MISSING:
            return found  # type: ignore[return-value]
        found = self._exact.get((table.db, table.schema, table.name, names))
        if found is None:
            versions = self._by_table.get((_norm(table.schema), _norm(table.name), names))
            if versions:
                same_db = [c for db, c in versions if db is None or _norm(db) == _norm(table.db)]
                found = (same_db or [c for _, c in versions])[-1]
            else:
                found = self._by_names.get(names)
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[cache_key] = found
        return found

    def guess(self, table: TableRef, images: Iterable[Mapping[str, Any] | None],
              names: tuple[str, ...]) -> Columns:
        """Columns guessed from values (source 4), sticky per table and column. Past
        :data:`GUESSED_COLUMNS` remembered columns, whole tables are forgotten, least recently
        guessed first, never the table at hand (forgetting entries in the middle of a record
        made its earlier columns ``nvarchar(max)``)."""
        table_id = table.table_id
        guessed = self._guessed.pop(table_id, None) or {}
        known = len(guessed)
        for image in images:
            if not image:
                continue
            for name, value in image.items():
                if guessed.get(name, "nvarchar(max)") == "nvarchar(max)":
                    found = guess_type(value)
                    if found is not None:
                        guessed[name] = found
        self._guessed[table_id] = guessed  # now the most recently guessed
        self._guessed_columns += len(guessed) - known
        while self._guessed_columns > GUESSED_COLUMNS and len(self._guessed) > 1:
            self._guessed_columns -= len(self._guessed.pop(next(iter(self._guessed))))
        return tuple(CatalogColumn(name, guessed.get(name, "nvarchar(max)"), index, False)
                     for index, name in enumerate(names))

    def columns_for(self, record: ChangeRecord) -> Columns:
        """The columns of the record's table version (registered, else guessed)."""
        names = record_column_names(record)
        found = self.lookup(record.table, names)
        if found is None:
            found = self.guess(record.table, (record.after, record.before, record.key), names)
        return found


_MISSING: Any = object()
GUESSED_COLUMNS = 100_000
"""How many guessed (table, column) types a catalog keeps (whole tables are forgotten)."""


def record_column_names(record: ChangeRecord) -> tuple[str, ...]:
    """Column names of a record's images in order (after's, then before's extra ones)."""
    after, before = record.after, record.before
    if after is None:
        return tuple(before) if before is not None else tuple(record.key)
    if before is None or len(before) == len(after):
        return tuple(after)
    return tuple(after) + tuple(c for c in before if c not in after)
