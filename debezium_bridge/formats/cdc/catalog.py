"""Capture-instance descriptions: which table a change table belongs to, its captured columns
(names, SQL types, ordinals in the update mask) and its key columns.

Accepted inputs (each file CSV with a header, JSON, JSON lines or YAML; the kind of rows is told
by their column names, and files are combined):

* ``cdc.change_tables`` rows (``object_id``, ``source_object_id``, ``capture_instance``,
  ``start_lsn``, …; add ``source_schema``/``source_table`` with ``OBJECT_SCHEMA_NAME`` and
  ``OBJECT_NAME``, otherwise they are taken from the default capture-instance name
  ``<schema>_<table>``) with ``cdc.captured_columns`` rows (``object_id``, ``column_name``,
  ``column_id``, ``column_type``, ``column_ordinal``) and ``cdc.index_columns`` rows
  (``object_id``, ``column_name``, ``index_ordinal``);
* the result set of ``sys.sp_cdc_help_change_data_capture`` (``source_schema``,
  ``source_table``, ``capture_instance``, ``index_column_list``, ``captured_column_list``) and
  of ``sys.sp_cdc_get_captured_columns`` (``column_name``, ``column_ordinal`` — called
  ``ordinal_position`` in the SQL Server 2008-2012 documentation —, ``data_type``,
  ``character_maximum_length``, ``numeric_precision``, ``numeric_scale``,
  ``datetime_precision``), which give the exact SQL types;
* a hand-written description: ``{<capture_instance>: {table: db.schema.table, key: [..],
  columns: {name: sql type, …}}}`` (columns in change-table order);
* the table-schema file the CLI already takes (``{topic or db.schema.table: Connect or Avro
  schema}``; an entry may be ``{schema: …, key: [..]}``), the SQL types from the propagated
  source types or the Connect types.

``cdc.captured_columns.column_type`` is the bare type name (``nvarchar``): lengths then default
as in :class:`SqlColumn` (so an ``nvarchar(max)`` is not known to be one) and a bare ``decimal``
is refused (its scale is needed to read values); give ``sys.sp_cdc_get_captured_columns`` (or
sizes in the type, ``nvarchar(50)``) for exact types. A ``database_name`` (or ``db``) column of
the table rows (``DB_NAME()``) names the database.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec
import yaml

from debezium_bridge.errors import ConfigError, SchemaError, ValueConversionError
from debezium_bridge.formats.cdc.values import binary_of, server_time_ms
from debezium_bridge.formats.columns import column_type
from debezium_bridge.formats.debezium.sqltypes import SqlColumn, column_spec
from debezium_bridge.model.change import TableRef
from debezium_bridge.model.lsn import LSN_BYTES
from debezium_bridge.model.schema import TableSchema

__all__ = ["CaptureInstance", "CapturedColumn", "LsnTimes", "load_capture_instances",
           "load_lsn_times", "read_table_rows"]


class CapturedColumn(msgspec.Struct, frozen=True, gc=False):
    """One captured column: its name, its ordinal in the change table (its bit in
    ``__$update_mask``), its position in the source table and its SQL type."""

    name: str
    ordinal: int
    """``column_ordinal`` (1-based): bit ``ordinal`` of the update mask."""
    column_id: int | None
    """Position in the source table (``column_id``): the connector's column order."""
    sql_type: str | None
    """The SQL type (``nvarchar(50)``); ``None`` when unknown (values are then text)."""
    is_computed: bool = False
    nullable: bool | None = None
    """Whether the source column allows NULL (``None``: not described; key columns are taken
    as NOT NULL, the others as nullable)."""

    @property
    def sql_column(self) -> SqlColumn:
        return SqlColumn(self.name, self.sql_type or "nvarchar(max)",
                         nullable=self.nullable is not False)

    @property
    def is_max(self) -> bool:
        """A ``varchar(max)``/``nvarchar(max)``/``varbinary(max)`` column (the change table
        leaves it NULL in an update's old row unless it changed)."""
        if not self.sql_type:
            return False
        try:
            spec = column_spec(self.sql_column)
        except SchemaError:
            return False
        return spec.length == -1


class CaptureInstance(msgspec.Struct, frozen=True, gc=False):
    """A capture instance: the change table ``cdc.<name>_CT`` of one source table."""

    name: str
    table: TableRef
    columns: tuple[CapturedColumn, ...]
    """In change-table order (``column_ordinal``)."""
    key_columns: tuple[str, ...] = ()
    """The index columns (primary key or ``@index_name``), in index order; empty for a table
    without either (no net changes, null Kafka keys)."""
    start_lsn: bytes | None = None

    @property
    def value_order(self) -> tuple[str, ...]:
        """Column names in the connector's order: the source table's (``column_id``) when known,
        else the change table's."""
        if all(c.column_id is not None for c in self.columns):
            ordered = sorted(self.columns, key=lambda c: (c.column_id, c.ordinal))
            return tuple(c.name for c in ordered)
        return tuple(c.name for c in self.columns)

    @property
    def change_table(self) -> str:
        return f"cdc.{self.name}_CT"


# --------------------------------------------------------------------------- reading tables

def read_table_rows(path: str | Path) -> list[dict[str, Any]] | dict[str, Any]:
    """Rows of a CSV (header line; sqlcmd's dash line skipped), JSON array, JSON lines or YAML
    file; a YAML/JSON mapping is returned as is."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc.strerror}") from exc
    text = _text(data)
    stripped = text.lstrip()
    if not stripped:
        return []
    if stripped[0] in "[{":
        try:
            doc = json.loads(stripped)
        except ValueError:
            try:
                return [json.loads(line) for line in stripped.splitlines() if line.strip()]
            except ValueError as exc:
                raise ConfigError(f"{p}: neither JSON nor JSON lines: {exc}") from exc
        if isinstance(doc, dict | list):
            return doc  # type: ignore[return-value]
        raise ConfigError(f"{p}: expected rows or a mapping")
    if p.suffix.lower() in (".yaml", ".yml"):
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML: {exc}") from exc
        if isinstance(doc, dict | list):
            return doc  # type: ignore[return-value]
        raise ConfigError(f"{p}: expected rows or a mapping")
    return _csv_rows(text, p)


def _text(data: bytes) -> str:
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(data) > 3 and data[1:2] == b"\x00"):
        return data.decode("utf-16")
    return data.decode("utf-8-sig", errors="replace")


def _csv_rows(text: str, path: Path) -> list[dict[str, Any]]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    delimiter = max((",", "\t", "|", ";"), key=lines[0].count)
    reader = csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter)
    rows = list(reader)
    header = [h.strip().strip("[]") for h in rows[0]]
    out = []
    for row in rows[1:]:
        if all(set(cell.strip()) <= {"-"} for cell in row):
            continue  # sqlcmd's separator line
        if len(row) == 1 and row[0].strip().startswith("(") and "row" in row[0]:
            continue  # "(3 rows affected)"
        if len(row) != len(header):
            raise ConfigError(f"{path}: a row has {len(row)} fields, the header {len(header)}")
        out.append({h: _null(v.strip()) for h, v in zip(header, row, strict=True)})
    return out


def _null(value: str) -> str | None:
    return None if value in ("NULL", "") else value


# --------------------------------------------------------------------------- building

def _int(value: Any) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _bool(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes")


def _nullable(value: Any) -> bool | None:
    if value is None or value == "":
        return None
    return _bool(value)


def _lsn(value: Any) -> bytes | None:
    if value in (None, ""):
        return None
    try:
        raw = binary_of(value, "base64" if isinstance(value, str) and "=" in value else "hex")
    except ValueConversionError:
        return None
    return raw if len(raw) == LSN_BYTES else None


def _type_text(data_type: str, length: Any, precision: Any, scale: Any,
               fraction: Any) -> str:
    """``sp_cdc_get_captured_columns`` / ``INFORMATION_SCHEMA`` sizes → a SQL type text."""
    base = data_type.strip().lower()
    if "(" in base:
        return base
    n = _int(length)
    if base in ("char", "varchar", "nchar", "nvarchar", "binary", "varbinary"):
        if n is None:
            return base
        return f"{base}(max)" if n < 0 else f"{base}({n})"
    if base in ("decimal", "numeric"):
        p, s = _int(precision), _int(scale)
        return f"{base}({p},{s or 0})" if p is not None else base
    if base in ("time", "datetime2", "datetimeoffset"):
        f = _int(fraction)
        if f is None:
            f = _int(scale)
        return f"{base}({f})" if f is not None else base
    if base == "float":
        p = _int(precision)
        return f"float({p})" if p is not None else base
    return base


def _lower(row: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k).strip().strip("[]").lower(): v for k, v in row.items()}


def _typed_ordinal(row: Mapping[str, Any]) -> Any:
    """The change-table ordinal of a ``sys.sp_cdc_get_captured_columns`` row: ``column_ordinal``
    (current SQL Server) or ``ordinal_position`` (SQL Server 2008-2012 documentation)."""
    return row.get("column_ordinal", row.get("ordinal_position"))


def _split_list(text: Any) -> list[str]:
    """``[id], [name]`` (``sp_cdc_help_change_data_capture`` column lists) → names."""
    if text is None:
        return []
    if isinstance(text, list):
        return [str(t) for t in text]
    out = []
    for part in str(text).split(","):
        name = part.strip()
        if name.startswith("[") and name.endswith("]"):
            name = name[1:-1].replace("]]", "]")
        if name:
            out.append(name)
    return out


class _Builder:
    """Collects rows of every kind, then joins them into capture instances."""

    def __init__(self, database: str | None) -> None:
        self.database = database
        self.instances: dict[str, dict[str, Any]] = {}
        self.by_object: dict[str, str] = {}
        self.captured: dict[str, list[dict[str, Any]]] = {}
        self.typed: dict[str, list[dict[str, Any]]] = {}
        self.index: dict[str, list[dict[str, Any]]] = {}
        self.ready: dict[str, CaptureInstance] = {}

    def instance(self, name: str) -> dict[str, Any]:
        return self.instances.setdefault(name, {"name": name})

    def add_rows(self, rows: list[Any], source: str) -> None:
        for raw in rows:
            if not isinstance(raw, Mapping):
                raise ConfigError(f"{source}: expected rows (objects), got {raw!r:.60}")
            try:
                self._add_row(_lower(raw), source)
            except KeyError as exc:
                raise ConfigError(f"{source}: a row without the column {exc.args[0]!r}: "
                                  f"{raw!r:.80}") from None

    def _add_row(self, row: dict[str, Any], source: str) -> None:
        """One row, of the kind its column names tell."""
        if "captured_column_list" in row or "index_column_list" in row:
            info = self.instance(str(row["capture_instance"]))
            info.update(schema=row.get("source_schema"), table=row.get("source_table"),
                        start_lsn=_lsn(row.get("start_lsn")),
                        db=row.get("database_name") or row.get("db"))
            info["key"] = _split_list(row.get("index_column_list"))
            info["listed"] = _split_list(row.get("captured_column_list"))
            if row.get("object_id") is not None:
                self.by_object[str(row["object_id"])] = info["name"]
        elif "data_type" in row and ("column_ordinal" in row or "ordinal_position" in row):
            self.typed.setdefault(str(row["capture_instance"]), []).append(row)
        elif "column_ordinal" in row and "column_name" in row:
            self.captured.setdefault(str(row["object_id"]), []).append(row)
        elif "index_ordinal" in row and "column_name" in row:
            self.index.setdefault(str(row["object_id"]), []).append(row)
        elif "capture_instance" in row and "source_object_id" in row:
            info = self.instance(str(row["capture_instance"]))
            info.setdefault("schema", row.get("source_schema"))
            info.setdefault("table", row.get("source_table"))
            info.setdefault("db", row.get("database_name") or row.get("db"))
            info["start_lsn"] = info.get("start_lsn") or _lsn(row.get("start_lsn"))
            self.by_object[str(row["object_id"])] = info["name"]
        elif "tran_end_time" in row and "start_lsn" in row:
            raise ConfigError(f"{source}: cdc.lsn_time_mapping rows belong in "
                              "cdc.lsn_time_mapping, not in the capture-instance "
                              "description")
        else:
            raise ConfigError(f"{source}: rows with columns {sorted(row)[:8]} are none of "
                              "cdc.change_tables, cdc.captured_columns, cdc.index_columns, "
                              "sp_cdc_help_change_data_capture, sp_cdc_get_captured_columns")

    def add_mapping(self, doc: Mapping[str, Any], source: str) -> None:
        if "capture_instances" in doc and isinstance(doc["capture_instances"], Mapping | list):
            entries = doc["capture_instances"]
            doc = ({e["capture_instance"]: e for e in entries} if isinstance(entries, list)
                   else entries)
        for name, entry in doc.items():
            if not isinstance(entry, Mapping):
                raise ConfigError(f"{source}: entry {name!r} is not a mapping")
            if "columns" in entry and ("table" in entry or "source_table" in entry):
                self.ready[str(name)] = _hand_written(str(name), entry, self.database, source)
            elif ("schema" in entry and "type" not in entry) or entry.get("type") in ("struct",
                                                                                   "record"):
                self.ready.update(_from_table_schema(str(name), entry, self.database, source))
            else:
                raise ConfigError(f"{source}: entry {name!r} is neither a capture-instance "
                                  "description ({table, columns, key}) nor a table schema")

    def build(self) -> dict[str, CaptureInstance]:
        out = dict(self.ready)
        for object_id, rows in self.captured.items():
            name = self.by_object.get(object_id)
            if name is None:
                raise ConfigError(f"cdc.captured_columns rows of object_id {object_id} have no "
                                  "cdc.change_tables (or sp_cdc_help_change_data_capture) row")
            self.instances[name]["captured"] = rows
        for object_id, rows in self.index.items():
            name = self.by_object.get(object_id)
            if name is not None:
                ordered = sorted(rows, key=lambda r: _int(r.get("index_ordinal")) or 0)
                self.instances[name]["key"] = [str(r["column_name"]) for r in ordered]
        for name, rows in self.typed.items():
            self.instance(name)["typed"] = rows
            first = rows[0]
            self.instances[name].setdefault("schema", first.get("source_schema"))
            self.instances[name].setdefault("table", first.get("source_table"))
        for name, info in self.instances.items():
            out[name] = self._instance(name, info)
        return out

    def _instance(self, name: str, info: dict[str, Any]) -> CaptureInstance:
        schema, table = info.get("schema"), info.get("table")
        if not schema or not table:
            parts = name.split("_")
            if len(parts) != 2:
                raise ConfigError(f"capture instance {name!r}: source schema and table unknown "
                                  "(add source_schema/source_table columns, e.g. "
                                  "OBJECT_SCHEMA_NAME(source_object_id))")
            schema, table = parts
        columns: list[CapturedColumn] = []
        if "typed" in info:
            for row in info["typed"]:
                columns.append(CapturedColumn(
                    str(row["column_name"]), _int(_typed_ordinal(row)) or 0,
                    _int(row.get("column_id")),
                    _type_text(str(row["data_type"]), row.get("character_maximum_length"),
                               row.get("numeric_precision"), row.get("numeric_scale"),
                               row.get("datetime_precision")),
                    nullable=_nullable(row.get("is_nullable"))))
        elif "captured" in info:
            for row in info["captured"]:
                columns.append(CapturedColumn(
                    str(row["column_name"]), _int(row["column_ordinal"]) or 0,
                    _int(row.get("column_id")),
                    str(row["column_type"]).strip().lower() if row.get("column_type") else None,
                    _bool(row.get("is_computed")), _nullable(row.get("is_nullable"))))
        elif "listed" in info:
            columns = [CapturedColumn(n, i, None, None)
                       for i, n in enumerate(info["listed"], start=1)]
        else:
            raise ConfigError(f"capture instance {name!r}: no captured columns described")
        columns.sort(key=lambda c: c.ordinal)
        key = tuple(info.get("key") or ())
        _check(name, columns, key)
        for c in columns:
            if c.sql_type in ("decimal", "numeric"):
                raise ConfigError(
                    f"capture instance {name!r}: column {c.name!r} is a bare {c.sql_type!r} "
                    "(cdc.captured_columns has no precision and scale): describe the columns "
                    "with sys.sp_cdc_get_captured_columns, or write decimal(p,s)")
        db = self.database or info.get("db") or ""
        return CaptureInstance(name, TableRef(str(db), str(schema), str(table)),
                               tuple(columns), key, info.get("start_lsn"))


def _check(name: str, columns: Sequence[CapturedColumn], key: Sequence[str]) -> None:
    names = [c.name for c in columns]
    if len(set(names)) != len(names):
        raise ConfigError(f"capture instance {name!r}: a column is listed twice")
    if [c.ordinal for c in columns] != list(range(1, len(columns) + 1)):
        raise ConfigError(f"capture instance {name!r}: column ordinals are not 1..n")
    missing = [k for k in key if k not in names]
    if missing:
        raise ConfigError(f"capture instance {name!r}: key columns {missing} are not captured")
    for c in columns:
        if c.sql_type is not None:
            try:
                column_spec(c.sql_column)
            except SchemaError:
                continue  # types the connector cannot map are dropped from events


def _hand_written(name: str, entry: Mapping[str, Any], database: str | None,
                  source: str) -> CaptureInstance:
    table_text = str(entry.get("table") or entry.get("source_table"))
    parts = table_text.split(".")
    if len(parts) == 3:
        db, schema, table = parts
    elif len(parts) == 2:
        db, (schema, table) = "", parts
    else:
        schema = str(entry.get("source_schema") or entry.get("schema") or "dbo")
        db, table = "", table_text
    raw_columns = entry["columns"]
    columns: list[CapturedColumn] = []
    if isinstance(raw_columns, Mapping):
        items: Iterable[Any] = list(raw_columns.items())
    elif isinstance(raw_columns, list):
        items = raw_columns
    else:
        raise ConfigError(f"{source}: {name}: columns must be a mapping or a list")
    for ordinal, item in enumerate(items, start=1):
        if isinstance(item, Mapping):
            low = _lower(item)
            cname = str(low.get("name") or low.get("column_name"))
            ctype = low.get("type") or low.get("sql_type") or low.get("column_type")
            column_id = _int(low.get("column_id"))
            computed = _bool(low.get("is_computed"))
            nullable = _nullable(low.get("is_nullable", low.get("nullable")))
        elif isinstance(item, list | tuple) and len(item) == 2:
            cname, ctype = str(item[0]), item[1]
            column_id, computed, nullable = None, False, None
        else:
            raise ConfigError(f"{source}: {name}: column {item!r:.60} is not [name, type]")
        columns.append(CapturedColumn(cname, ordinal, column_id,
                                      str(ctype).strip() if ctype else None, computed,
                                      nullable))
    key = tuple(str(k) for k in entry.get("key") or entry.get("key_columns") or ())
    _check(name, columns, key)
    return CaptureInstance(name, TableRef(database or str(entry.get("database") or db), schema,
                                          table), tuple(columns), key,
                           _lsn(entry.get("start_lsn")))


def _from_table_schema(name: str, entry: Mapping[str, Any], database: str | None,
                       source: str) -> dict[str, CaptureInstance]:
    from debezium_bridge.formats.debezium.decode import table_schema_of

    schema_doc = entry.get("schema") if "schema" in entry and "type" not in entry else entry
    try:
        schema: TableSchema = table_schema_of(schema_doc)
    except SchemaError as exc:
        raise ConfigError(f"{source}: table {name!r}: {exc.message}") from exc
    parts = name.split(".")
    if len(parts) >= 3:
        db, schema_name, table = parts[-3], parts[-2], parts[-1]
    elif len(parts) == 2:
        db, (schema_name, table) = "", parts
    else:
        raise ConfigError(f"{source}: table-schema entry {name!r} does not name "
                          "[<prefix>.]<db>.<schema>.<table>")
    columns = []
    for ordinal, column in enumerate(schema.columns, start=1):
        sql, _exact = column_type(column)
        columns.append(CapturedColumn(column.name, ordinal, ordinal, sql.text,
                                      nullable=column.optional))
    key = tuple(str(k) for k in entry.get("key") or ()) if isinstance(entry, Mapping) else ()
    instance_name = f"{schema_name}_{table}"
    _check(instance_name, columns, key)
    return {instance_name: CaptureInstance(instance_name,
                                           TableRef(database or db, schema_name, table),
                                           tuple(columns), key)}


def load_capture_instances(paths: Sequence[str | Path], database: str | None = None
                           ) -> dict[str, CaptureInstance]:
    """Capture instances by name from description files (module docstring)."""
    builder = _Builder(database)
    for path in paths:
        doc = read_table_rows(path)
        if isinstance(doc, Mapping):
            builder.add_mapping(doc, str(path))
        else:
            builder.add_rows(doc, str(path))
    instances = builder.build()
    if not instances:
        raise ConfigError("no capture instance described (cdc.capture_instances)")
    return instances


class LsnTimes:
    """``cdc.lsn_time_mapping``: commit LSN → (``tran_begin_time``, ``tran_end_time``) in epoch
    milliseconds."""

    def __init__(self, times: Mapping[bytes, tuple[int | None, int | None]] | None = None
                 ) -> None:
        self.times: dict[bytes, tuple[int | None, int | None]] = dict(times or {})

    def get(self, commit_lsn: bytes, which: str) -> int | None:
        found = self.times.get(commit_lsn)
        if found is None:
            return None
        return found[0] if which == "tran_begin_time" else found[1]

    def __len__(self) -> int:
        return len(self.times)


def load_lsn_times(path: str | Path, offset_minutes: int) -> LsnTimes:
    """A dump of ``cdc.lsn_time_mapping`` (``start_lsn``, ``tran_begin_time``,
    ``tran_end_time``; server-local times)."""
    doc = read_table_rows(path)
    if isinstance(doc, Mapping):
        raise ConfigError(f"{path}: expected cdc.lsn_time_mapping rows")
    times: dict[bytes, tuple[int | None, int | None]] = {}
    for raw in doc:
        row = _lower(raw)
        lsn = _lsn(row.get("start_lsn"))
        if lsn is None:
            raise ConfigError(f"{path}: a row without a valid start_lsn: {raw!r:.80}")
        try:
            begin = (server_time_ms(row["tran_begin_time"], offset_minutes)
                     if row.get("tran_begin_time") not in (None, "") else None)
            end = (server_time_ms(row["tran_end_time"], offset_minutes)
                   if row.get("tran_end_time") not in (None, "") else None)
        except ValueConversionError as exc:
            raise ConfigError(f"{path}: {exc.message}") from exc
        times[lsn] = (begin, end)
    return LsnTimes(times)
