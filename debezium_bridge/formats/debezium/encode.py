"""Build SQL Server change events exactly as the Debezium connector and Kafka converters write them.

Encodings: Kafka's JsonConverter with schemas (``{"schema":…,"payload":…}``), without schemas
(payload only), and Confluent's AvroConverter wire format (magic byte 0, 4-byte big-endian schema
id, Avro binary). Schemas are built once per table and spliced with each payload.

Shapes by Debezium version (checked against real captures and ``SchemaFactory``/``Envelope``):

* 1.x: envelope ``before, after, source, op, ts_ms, transaction``; the transaction struct is
  unnamed; no schema versions; topic ``<prefix>.<schema>.<table>``; no ``ts_ms`` in BEGIN/END.
* 2.0 to 2.5: envelope ``version: 1``; transaction struct ``event.block`` (version 1), still last.
* 2.6: envelope ``version: 2`` with ``ts_us``/``ts_ns`` (``source.ts_us``/``ts_ns`` required in
  2.6.0/2.6.1, optional from 2.6.2); transaction still last.
* 2.7+: ``transaction`` right after ``source``.
* 3.1+: the source struct has ``version: 1`` and the snapshot enum lists all seven markers.
"""

from __future__ import annotations

import io
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import fastavro
import msgspec

from debezium_bridge.errors import ConfigError, EncodeError, RecordError, SchemaError
from debezium_bridge.formats.debezium.sqltypes import (
    DEFAULT_MODES,
    UNAVAILABLE_VALUE,
    BinaryHandlingMode,
    ConnectorModes,
    DecimalHandlingMode,
    SqlColumn,
    TimePrecisionMode,
    avro_schema_for,
    connect_column,
    connect_struct_schema,
    sql_value_encoder,
)

Encoding = Literal["json-schema", "json", "avro"]
Op = Literal["c", "u", "d", "r"]
SchemaRegistrar = Callable[[str, dict[str, Any]], int]
"""``(subject, avro_schema) -> schema id``, e.g. a Schema Registry client or a dict in tests."""

DEFAULT_VERSION = "3.4.0.Final"
SOURCE_SCHEMA_NAME = "io.debezium.connector.sqlserver.Source"
SNAPSHOT_MARKERS = ("true", "first", "first_in_data_collection", "last_in_data_collection",
                    "last", "false", "incremental")

_JSON = msgspec.json.Encoder()
_TOPIC_UNSAFE = re.compile(r"[^a-zA-Z0-9._-]")


class TableSpec(msgspec.Struct, frozen=True):
    """A captured table: ``db.schema.table``, its key columns and its columns in table order."""

    db: str
    schema: str
    table: str
    key_columns: tuple[str, ...]
    columns: tuple[SqlColumn, ...]

    @property
    def table_id(self) -> str:
        """``TableId.toString()``: ``db.schema.table`` (the transaction ``data_collection``)."""
        return f"{self.db}.{self.schema}.{self.table}"


class TransactionBlock(msgspec.Struct, frozen=True):
    """The envelope's ``transaction`` struct."""

    id: str
    total_order: int
    data_collection_order: int


class Change(msgspec.Struct, frozen=True):
    """One logical change as the connector would emit it; rows hold canonical values."""

    op: Op
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None
    commit_lsn: str | None = None
    change_lsn: str | None = None
    event_serial_no: int | None = None
    source_ts_ms: int = 0
    snapshot: str = "false"
    transaction: TransactionBlock | None = None
    ts_ms: int = 0
    """Envelope (processing) time; ``ts_ns`` overrides it with nanosecond precision."""
    ts_ns: int | None = None


class Features(msgspec.Struct, frozen=True):
    """What a Debezium version writes; see the module docstring."""

    envelope_version: int | None
    transaction_name: str | None
    transaction_after_source: bool
    envelope_ts_us: bool
    source_ts_us: Literal["none", "required", "optional"]
    source_version: int | None
    snapshot_allowed: str
    topic_has_db: bool
    tx_metadata_ts_ms: bool


def features(version: str) -> Features:
    """The event shape of Debezium ``version`` (e.g. ``"2.7.3.Final"``)."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if m is None:
        raise ConfigError(f"unparsable Debezium version {version!r}")
    v = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))
    if v < (2, 0, 0):
        allowed = "true,last,false" if v < (1, 7, 0) else "true,last,false,incremental"
    elif v < (3, 1, 0):
        allowed = "true,last,false,incremental"
    else:
        allowed = ",".join(SNAPSHOT_MARKERS)
    ts_us = v >= (2, 6, 0)
    return Features(
        envelope_version=None if v < (2, 0, 0) else (2 if ts_us else 1),
        transaction_name=None if v < (2, 0, 0) else "event.block",
        transaction_after_source=v >= (2, 7, 0),
        envelope_ts_us=ts_us,
        source_ts_us="none" if not ts_us else ("required" if v < (2, 6, 2) else "optional"),
        source_version=1 if v >= (3, 1, 0) else None,
        snapshot_allowed=allowed,
        topic_has_db=v >= (2, 0, 0),
        tx_metadata_ts_ms=v >= (2, 0, 0),
    )


def _field(ctype: str, field: str, optional: bool, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": ctype, "optional": optional}
    out.update(extra)
    out["field"] = field
    return out


def source_schema(feat: Features) -> dict[str, Any]:
    """The ``io.debezium.connector.sqlserver.Source`` field schema (JsonConverter form)."""
    fields = [
        _field("string", "version", False),
        _field("string", "connector", False),
        _field("string", "name", False),
        _field("int64", "ts_ms", False),
        _field("string", "snapshot", True, name="io.debezium.data.Enum", version=1,
               parameters={"allowed": feat.snapshot_allowed}, default="false"),
        _field("string", "db", False),
        _field("string", "sequence", True),
    ]
    if feat.source_ts_us != "none":
        optional = feat.source_ts_us == "optional"
        fields += [_field("int64", "ts_us", optional), _field("int64", "ts_ns", optional)]
    fields += [
        _field("string", "schema", False),
        _field("string", "table", False),
        _field("string", "change_lsn", True),
        _field("string", "commit_lsn", True),
        _field("int64", "event_serial_no", True),
    ]
    out: dict[str, Any] = {"type": "struct", "fields": fields, "optional": False,
                           "name": SOURCE_SCHEMA_NAME}
    if feat.source_version is not None:
        out["version"] = feat.source_version
    out["field"] = "source"
    return out


def transaction_schema(feat: Features) -> dict[str, Any]:
    """The envelope's ``transaction`` field schema."""
    out: dict[str, Any] = {
        "type": "struct",
        "fields": [_field("string", "id", False), _field("int64", "total_order", False),
                   _field("int64", "data_collection_order", False)],
        "optional": True,
    }
    if feat.transaction_name is not None:
        out["name"] = feat.transaction_name
        out["version"] = 1
    out["field"] = "transaction"
    return out


def topic_name(prefix: str, table: TableSpec, version: str = DEFAULT_VERSION) -> str:
    """The data topic: ``<prefix>.<db>.<schema>.<table>`` (1.x: without the database)."""
    parts = [prefix, table.db, table.schema, table.table]
    if not features(version).topic_has_db:
        del parts[1]
    return _TOPIC_UNSAFE.sub("_", ".".join(parts))


class _Avro:
    """A registered Avro schema: wire-format prefix plus the parsed schema."""

    def __init__(self, subject: str, schema: Any, registrar: SchemaRegistrar | None) -> None:
        if registrar is None:
            raise ConfigError("the avro encoding needs a SchemaRegistrar")
        self.schema = schema
        self.schema_id = registrar(subject, schema)
        self.prefix = b"\x00" + self.schema_id.to_bytes(4, "big")
        self.parsed = fastavro.parse_schema(schema)

    def encode(self, datum: Any) -> bytes:
        buf = io.BytesIO()
        buf.write(self.prefix)
        fastavro.schemaless_writer(buf, self.parsed, datum)
        return buf.getvalue()


class _Codec:
    """One Connect schema serialized in one encoding."""

    def __init__(self, schema: dict[str, Any], encoding: Encoding, subject: str,
                 registrar: SchemaRegistrar | None) -> None:
        self.schema = schema
        self.encoding = encoding
        self.avro: _Avro | None = None
        if encoding == "avro":
            self.avro = _Avro(subject, avro_schema_for(schema), registrar)
        elif encoding == "json-schema":
            self._prefix = b'{"schema":' + _JSON.encode(schema) + b',"payload":'
        elif encoding != "json":
            raise ConfigError(f"unknown encoding {encoding!r}")

    @property
    def avro_schema(self) -> Any:
        return None if self.avro is None else self.avro.schema

    def encode(self, payload: Any) -> bytes:
        if self.avro is not None:
            return self.avro.encode(payload)
        if self.encoding == "json":
            return _JSON.encode(payload)
        return self._prefix + _JSON.encode(payload) + b"}"


class _AvroEnvelopeWriter:
    """Writes an envelope as the concatenation of its fields' Avro encodings (a record is just
    its fields in order), so that row images can be encoded once and reused."""

    def __init__(self, avro: _Avro, namespace: str, row_cache: int) -> None:
        fields = avro.schema["fields"]
        row_schema = dict(fields[0]["type"][1], namespace=namespace)
        source_at = next(i for i, f in enumerate(fields) if f["name"] == "source")
        tail = {"type": "record", "name": "EnvelopeTail", "namespace": namespace,
                "fields": fields[source_at + 1:]}
        self._prefix = avro.prefix
        self._row = fastavro.parse_schema(row_schema)
        self._source = fastavro.parse_schema(fields[source_at]["type"])
        self._tail = fastavro.parse_schema(tail)
        self._cache: OrderedDict[int, tuple[Mapping[str, Any], bytes]] = OrderedDict()
        self._cache_size = row_cache

    def _row_bytes(self, row: Mapping[str, Any] | None) -> bytes:
        if row is None:
            return b"\x00"
        cached = self._cache.get(id(row)) if self._cache_size else None
        if cached is not None and cached[0] is row:
            return cached[1]
        buf = io.BytesIO()
        buf.write(b"\x02")
        fastavro.schemaless_writer(buf, self._row, row)
        data = buf.getvalue()
        if self._cache_size:
            self._cache[id(row)] = (row, data)
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return data

    def encode(self, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None,
               source: Mapping[str, Any], tail: Mapping[str, Any]) -> bytes:
        buf = io.BytesIO()
        buf.write(self._prefix)
        buf.write(self._row_bytes(before))
        buf.write(self._row_bytes(after))
        fastavro.schemaless_writer(buf, self._source, source)
        fastavro.schemaless_writer(buf, self._tail, tail)
        return buf.getvalue()


class DebeziumEncoder:
    """Keys, values and tombstones of one table's topic, in one encoding and Debezium version."""

    def __init__(
        self,
        table: TableSpec,
        topic_prefix: str,
        *,
        modes: ConnectorModes = DEFAULT_MODES,
        encoding: Encoding = "json-schema",
        version: str = DEFAULT_VERSION,
        registrar: SchemaRegistrar | None = None,
        avro_row_cache: int = 0,
    ) -> None:
        """``avro_row_cache``: remember the Avro bytes of that many row dicts by identity (rows
        passed to :meth:`encode_envelope` must then never be mutated)."""
        self.table = table
        self.topic_prefix = topic_prefix
        self.version = version
        self.encoding = encoding
        self.features = feat = features(version)
        self.topic = topic_name(topic_prefix, table, version)
        names = [c.name for c in table.columns]
        missing = [k for k in table.key_columns if k not in names]
        if missing:
            raise SchemaError(f"key columns {missing} are not columns of {table.table_id}")
        self.columns = [connect_column(c, modes) for c in table.columns]
        self._encoders = [(c.name, sql_value_encoder(c, modes)) for c in table.columns]
        by_name = {c.name: c for c in self.columns}
        key_cols = [msgspec.structs.replace(by_name[k], optional=False) for k in table.key_columns]
        self.key_schema: dict[str, Any] | None = (
            connect_struct_schema(key_cols, f"{self.topic}.Key", optional=False)
            if key_cols else None)
        value = connect_struct_schema(self.columns, f"{self.topic}.Value")
        fields = [dict(value, field="before"), dict(value, field="after"), source_schema(feat)]
        tail = [_field("string", "op", False), _field("int64", "ts_ms", True)]
        if feat.envelope_ts_us:
            tail += [_field("int64", "ts_us", True), _field("int64", "ts_ns", True)]
        if feat.transaction_after_source:
            fields += [transaction_schema(feat), *tail]
        else:
            fields += [*tail, transaction_schema(feat)]
        self.value_schema: dict[str, Any] = {"type": "struct", "fields": fields,
                                             "optional": False, "name": f"{self.topic}.Envelope"}
        if feat.envelope_version is not None:
            self.value_schema["version"] = feat.envelope_version
        self._value = _Codec(self.value_schema, encoding, f"{self.topic}-value", registrar)
        self._avro_writer = (
            None if self._value.avro is None
            else _AvroEnvelopeWriter(self._value.avro, self.topic, avro_row_cache))
        self._key = (None if self.key_schema is None else
                     _Codec(self.key_schema, encoding, f"{self.topic}-key", registrar))
        self._source_head = {"version": version, "connector": "sqlserver", "name": topic_prefix}

    @property
    def value_avro_schema(self) -> Any:
        """The registered Avro value schema (``None`` unless the encoding is avro)."""
        return self._value.avro_schema

    @property
    def key_avro_schema(self) -> Any:
        """The registered Avro key schema (``None`` unless avro and the table has a key)."""
        return None if self._key is None else self._key.avro_schema

    @property
    def encoders(self) -> dict[str, Callable[[Any], Any]]:
        """Canonical → Connect value encoder of each column."""
        return dict(self._encoders)

    def row(self, canonical: Mapping[str, Any]) -> dict[str, Any]:
        """Canonical row → Connect row in column order (absent columns are ``None``)."""
        get = canonical.get
        return {name: enc(get(name)) for name, enc in self._encoders}

    def key_of(self, row: Mapping[str, Any]) -> dict[str, Any] | None:
        """The key struct of a (Connect or canonical) row, ``None`` for keyless tables."""
        if self._key is None:
            return None
        return {k: row[k] for k in self.table.key_columns}

    def encode_key(self, key: Mapping[str, Any] | None) -> bytes | None:
        """Serialized Kafka key (``None`` for keyless tables)."""
        if self._key is None or key is None:
            return None
        return self._key.encode(key)

    def key_header(self, key: Mapping[str, Any] | None) -> bytes | None:
        """A ``__debezium.oldkey``/``newkey`` header value: the key's JSON (with schema in the
        json-schema encoding, plain payload otherwise)."""
        if self._key is None or key is None:
            return None
        if self.encoding == "json-schema":
            return self._key.encode(key)
        return _JSON.encode(key)

    def source(self, *, ts_ms: int, commit_lsn: str | None, change_lsn: str | None,
               event_serial_no: int | None, snapshot: str = "false") -> dict[str, Any]:
        """The ``source`` struct in schema order."""
        src: dict[str, Any] = dict(self._source_head)
        src["ts_ms"] = ts_ms
        src["snapshot"] = snapshot
        src["db"] = self.table.db
        src["sequence"] = None
        if self.features.source_ts_us != "none":
            src["ts_us"] = ts_ms * 1000
            src["ts_ns"] = ts_ms * 1_000_000
        src["schema"] = self.table.schema
        src["table"] = self.table.table
        src["change_lsn"] = change_lsn
        src["commit_lsn"] = commit_lsn
        src["event_serial_no"] = event_serial_no
        return src

    def encode_envelope(
        self,
        op: str,
        before: Mapping[str, Any] | None,
        after: Mapping[str, Any] | None,
        source: Mapping[str, Any],
        transaction: TransactionBlock | None,
        ts_ms: int | None,
        ts_ns: int | None = None,
    ) -> bytes:
        """Serialized envelope from Connect rows and a :meth:`source` struct (``ts_ms`` None:
        no processing time, the optional ``ts_*`` fields are null)."""
        tx = None if transaction is None else {
            "id": transaction.id, "total_order": transaction.total_order,
            "data_collection_order": transaction.data_collection_order}
        tail: dict[str, Any] = {}
        if self.features.transaction_after_source:
            tail["transaction"] = tx
        tail["op"] = op
        if ts_ns is None:
            ts_ns = None if ts_ms is None else ts_ms * 1_000_000
        else:
            ts_ms = ts_ns // 1_000_000
        tail["ts_ms"] = ts_ms
        if self.features.envelope_ts_us:
            tail["ts_us"] = None if ts_ns is None else ts_ns // 1000
            tail["ts_ns"] = ts_ns
        if not self.features.transaction_after_source:
            tail["transaction"] = tx
        if self._avro_writer is not None:
            return self._avro_writer.encode(before, after, source, tail)
        return self._value.encode({"before": before, "after": after, "source": source, **tail})

    def encode(self, change: Change) -> tuple[bytes | None, bytes]:
        """Kafka key and value of one change given with canonical rows."""
        before = None if change.before is None else self.row(change.before)
        after = None if change.after is None else self.row(change.after)
        image = after if after is not None else before
        if image is None:
            raise SchemaError(f"{change.op!r} change of {self.table.table_id} has no row image")
        source = self.source(ts_ms=change.source_ts_ms, commit_lsn=change.commit_lsn,
                             change_lsn=change.change_lsn,
                             event_serial_no=change.event_serial_no, snapshot=change.snapshot)
        value = self.encode_envelope(change.op, before, after, source, change.transaction,
                                     change.ts_ms, change.ts_ns)
        return self.encode_key(self.key_of(image)), value


class TransactionTopicEncoder:
    """BEGIN/END records of ``<prefix>.transaction`` (``provide.transaction.metadata=true``)."""

    def __init__(self, topic_prefix: str, *, encoding: Encoding = "json-schema",
                 version: str = DEFAULT_VERSION, registrar: SchemaRegistrar | None = None) -> None:
        feat = features(version)
        self.topic = f"{topic_prefix}.transaction"
        self._ts_ms = feat.tx_metadata_ts_ms
        versioned: dict[str, Any] = {"version": 1} if feat.tx_metadata_ts_ms else {}
        self.key_schema: dict[str, Any] = {
            "type": "struct", "fields": [_field("string", "id", False)], "optional": False,
            "name": "io.debezium.connector.common.TransactionMetadataKey", **versioned}
        item: dict[str, Any] = {
            "type": "struct",
            "fields": [_field("string", "data_collection", False),
                       _field("int64", "event_count", False)],
            "optional": bool(versioned)}
        if versioned:
            item.update(name="event.collection", version=1)
        fields = [_field("string", "status", False), _field("string", "id", False),
                  _field("int64", "event_count", True),
                  {"type": "array", "items": item, "optional": True, "field": "data_collections"}]
        if self._ts_ms:
            fields.append(_field("int64", "ts_ms", False))
        self.value_schema: dict[str, Any] = {
            "type": "struct", "fields": fields, "optional": False,
            "name": "io.debezium.connector.common.TransactionMetadataValue", **versioned}
        self._key = _Codec(self.key_schema, encoding, f"{self.topic}-key", registrar)
        self._value = _Codec(self.value_schema, encoding, f"{self.topic}-value", registrar)

    def _record(self, status: str, tx_id: str, ts_ms: int, event_count: int | None,
                collections: Sequence[tuple[str, int]] | None) -> tuple[bytes, bytes]:
        value: dict[str, Any] = {
            "status": status, "id": tx_id, "event_count": event_count,
            "data_collections": None if collections is None else [
                {"data_collection": name, "event_count": count} for name, count in collections]}
        if self._ts_ms:
            value["ts_ms"] = ts_ms
        return self._key.encode({"id": tx_id}), self._value.encode(value)

    def begin(self, tx_id: str, ts_ms: int) -> tuple[bytes, bytes]:
        """Key and value of a BEGIN record."""
        return self._record("BEGIN", tx_id, ts_ms, None, None)

    def end(self, tx_id: str, ts_ms: int, event_count: int,
            data_collections: Sequence[tuple[str, int]]) -> tuple[bytes, bytes]:
        """Key and value of an END record; ``data_collections`` = ``[(db.schema.table, n)]``."""
        return self._record("END", tx_id, ts_ms, event_count, data_collections)


# --------------------------------------------------------------------------- canonical → Debezium


class DebeziumOutOptions(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """How canonical records are written back as SQL Server connector envelopes.

    CLI flags are ``--debezium-<name with dashes>``; config-file keys ``debezium_<name>``.
    """

    topic_prefix: str | None = None
    """``topic.prefix`` (topics ``<prefix>.<db>.<schema>.<table>``, ``source.name``); default:
    the record's ``source.name`` (``ces`` for CES input), else ``server1``."""
    version: str | None = None
    """Debezium version whose envelope shape and ``source.version`` are written; default: the
    record's ``source.version`` when it is a Debezium version, else 3.4.0.Final."""
    json_schemas: bool = True
    """JsonConverter ``schemas.enable`` (JSON output only)."""
    tombstones: bool = True
    """``tombstones.on.delete``: a null-valued record with the key after each delete."""
    propagate_source_types: bool = True
    """Add ``__debezium.source.column.type``/``length``/``scale`` (``column.propagate.source.type
    =.*``; Debezium's default is off). On by default so that consumers see the SQL types and
    fractional seconds keep their declared precision when read back."""
    time_precision_mode: TimePrecisionMode = "adaptive"
    decimal_handling_mode: DecimalHandlingMode = "precise"
    binary_handling_mode: BinaryHandlingMode = "bytes"

    @property
    def modes(self) -> ConnectorModes:
        return ConnectorModes(time_precision_mode=self.time_precision_mode,
                              decimal_handling_mode=self.decimal_handling_mode,
                              binary_handling_mode=self.binary_handling_mode,
                              propagate_source_types=self.propagate_source_types)


class DebeziumOutCounters(msgspec.Struct, kw_only=True):
    """``records_in = encoded + skipped + errors``."""

    records_in: int = 0
    encoded: int = 0
    data_records: int = 0
    tombstones: int = 0
    key_changes: int = 0
    skipped: int = 0
    errors: int = 0
    guessed_types: int = 0

    def summary(self) -> str:
        return (f"debezium out: records_in={self.records_in} encoded={self.encoded} "
                f"data_records={self.data_records} tombstones={self.tombstones} "
                f"key_changes={self.key_changes} skipped={self.skipped} errors={self.errors} "
                f"guessed_types={self.guessed_types}")


_VERSION_RE = re.compile(r"\d+\.\d+")


def _epoch_ms(iso: str | None) -> int | None:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` (canonical commit_ts/capture_ts) → epoch milliseconds."""
    if iso is None:
        return None
    import datetime as dt

    moment = dt.datetime.fromisoformat(iso.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _sql_column(name: str, type_text: str) -> SqlColumn:
    """A :class:`SqlColumn` of a ``cols``-style type; types sqltypes does not model (UDTs,
    sql_variant, ...) are written as ``nvarchar(max)`` text."""
    from debezium_bridge.formats.debezium.sqltypes import _spec

    column = SqlColumn(name, "nvarchar(128)" if type_text == "sysname" else type_text)
    try:
        _spec(column)
    except SchemaError:
        return SqlColumn(name, "nvarchar(max)")
    return column


class DebeziumWriter:
    """Canonical :class:`~debezium_bridge.model.change.ChangeRecord` s → the SQL Server connector's
    Kafka records (SPEC §5.3), over :class:`DebeziumEncoder`.

    * Column SQL types come from a :class:`~debezium_bridge.formats.columns.ColumnCatalog` (the
      input's schemas or CES ``cols``; guessed from values when there is none).
    * ``insert`` → ``c``; ``read`` → ``r`` with the record's snapshot marker; ``update`` →
      ``u``; ``delete`` → ``d`` (+ tombstone); an update with ``key_changed`` → ``d`` (old key,
      ``event_serial_no`` 1) + tombstone + ``c`` (new key, serial 2) at the record's position,
      as the connector writes a primary-key change; ``truncate`` is skipped (the SQL Server
      connector emits none).
    * ``source`` as the connector fills it: version, ``sqlserver``, name = topic prefix,
      ``ts_ms`` = commit time, snapshot, db/schema/table, LSNs, ``event_serial_no``; envelope
      ``ts_ms`` = ``capture_ts`` (null when unknown, e.g. CES input). The transaction block
      when the record has one (a key change's delete half gets the numbers before the create's).
    * Columns in ``unavailable_columns`` get Debezium's ``__debezium_unavailable_value``
      placeholder (text, or its bytes for binary columns), as the connector sends unchanged LOBs.
    * Partition: Kafka's default partitioner over ``partitions`` (murmur2 of the key bytes;
      keyless records round-robin); offsets count per topic partition.
    """

    def __init__(self, options: DebeziumOutOptions | None = None, catalog: Any = None, *,
                 encoding: Literal["json", "avro"] = "json",
                 registrar: SchemaRegistrar | None = None, partitions: int = 1) -> None:
        from debezium_bridge.formats.columns import ColumnCatalog

        self.options = options or DebeziumOutOptions()
        self.catalog = catalog if catalog is not None else ColumnCatalog()
        if encoding == "avro":
            if registrar is None:
                raise ConfigError("Debezium Avro output needs a schema registry")
            self._encoding: Encoding = "avro"
        else:
            self._encoding = "json-schema" if self.options.json_schemas else "json"
        if partitions < 1:
            raise ConfigError("output partitions must be at least 1")
        self.registrar = registrar
        self.partitions = partitions
        self.counters = DebeziumOutCounters()
        self._encoders: dict[tuple[Any, ...], tuple[DebeziumEncoder, dict[str, Any]]] = {}
        self._offsets: dict[tuple[str, int], int] = {}
        self._round_robin = 0

    def _version(self, record: Any) -> str:
        if self.options.version:
            return self.options.version
        version = record.source.version
        return version if version and _VERSION_RE.match(version) else DEFAULT_VERSION

    def _encoder(self, record: Any) -> tuple[DebeziumEncoder, dict[str, Any]]:
        from debezium_bridge.formats.columns import record_column_names

        names = record_column_names(record)
        columns = self.catalog.lookup(record.table, names)
        if columns is None:
            columns = self.catalog.guess(record.table, (record.after, record.before,
                                                        record.key), names)
            self.counters.guessed_types += 1
        prefix = self.options.topic_prefix or record.source.name or "server1"
        version = self._version(record)
        key_columns = tuple(record.key)
        cache_key = (record.table_id, columns, key_columns, prefix, version)
        found = self._encoders.get(cache_key)
        if found is None:
            table = TableSpec(db=record.table.db, schema=record.table.schema,
                              table=record.table.name, key_columns=key_columns,
                              columns=tuple(_sql_column(c.name, c.type) for c in columns))
            encoder = DebeziumEncoder(table, prefix, modes=self.options.modes,
                                      encoding=self._encoding, version=version,
                                      registrar=self.registrar)
            if len(self._encoders) > 4096:
                self._encoders.clear()
            found = self._encoders[cache_key] = (encoder, encoder.encoders)
        return found

    def _place(self, topic: str, key: bytes | None) -> tuple[int, int]:
        from debezium_bridge.partitioner import partition_for

        if key is not None:
            partition = partition_for(key, self.partitions)
        else:
            partition = self._round_robin % self.partitions
            self._round_robin += 1
        offset = self._offsets.get((topic, partition), 0)
        self._offsets[(topic, partition)] = offset + 1
        return partition, offset

    def encode(self, record: Any) -> list[Any]:
        """The Kafka records (:class:`~debezium_bridge.model.records.RawRecord`) of one canonical
        record; raises :class:`~debezium_bridge.errors.EncodeError`."""

        self.counters.records_in += 1
        try:
            out = self._encode(record)
        except (RecordError, ValueError, TypeError, KeyError) as exc:
            self.counters.errors += 1
            message = exc.message if isinstance(exc, RecordError) else str(exc)
            raise EncodeError(f"{record.table_id} {record.seq}: {message}") from exc
        if out:
            self.counters.encoded += 1
        else:
            self.counters.skipped += 1
        return out

    def _encode(self, record: Any) -> list[Any]:
        from debezium_bridge.model.records import RawRecord

        op = record.op
        if op not in ("insert", "read", "update", "delete"):
            return []
        encoder, encoders = self._encoder(record)
        commit_ms = _epoch_ms(record.commit_ts)
        if commit_ms is None:
            raise EncodeError("no commit time (source.ts_ms)")
        capture_ms = _epoch_ms(record.capture_ts)
        position = record.position

        unavailable = record.unavailable_columns

        def connect(image: Mapping[str, Any] | None) -> dict[str, Any] | None:
            if image is None:
                return None
            if unavailable:  # "not sent": Debezium's placeholder, not NULL
                image = {**image, **{c: UNAVAILABLE_VALUE for c in unavailable
                                     if c in image and image[c] is None}}
            return encoder.row(image)

        def key_bytes(key: Mapping[str, Any]) -> bytes | None:
            if not key:
                return None
            return encoder.encode_key({k: encoders[k](v) for k, v in key.items()})

        def produce(dbz_op: str, before: Mapping[str, Any] | None,
                    after: Mapping[str, Any] | None, key: Mapping[str, Any], serial: int | None,
                    tx: TransactionBlock | None) -> list[RawRecord]:
            source = encoder.source(
                ts_ms=commit_ms, commit_lsn=position.commit_lsn, change_lsn=position.change_lsn,
                event_serial_no=serial,
                snapshot=record.snapshot if dbz_op == "r" else "false")
            value = encoder.encode_envelope(dbz_op, connect(before), connect(after), source, tx,
                                            capture_ms)
            kafka_key = key_bytes(key)
            partition, offset = self._place(encoder.topic, kafka_key)
            timestamp = capture_ms if capture_ms is not None else commit_ms
            out = [RawRecord(encoder.topic, partition, offset, timestamp, kafka_key, value)]
            self.counters.data_records += 1
            if dbz_op == "d" and self.options.tombstones:
                partition, offset = self._place(encoder.topic, kafka_key)
                out.append(RawRecord(encoder.topic, partition, offset, timestamp, kafka_key,
                                     None))
                self.counters.tombstones += 1
            return out

        tx = record.tx
        block = None
        if tx is not None and tx.total_order is not None \
                and tx.data_collection_order is not None:
            block = TransactionBlock(tx.id, tx.total_order, tx.data_collection_order)
        if op == "update" and record.key_changed and record.old_key is not None:
            self.counters.key_changes += 1
            d_block = None if block is None else TransactionBlock(
                block.id, max(1, block.total_order - 1), max(1, block.data_collection_order - 1))
            return (produce("d", record.before, None, record.old_key, 1, d_block)
                    + produce("c", None, record.after, record.key, 2, block))
        dbz_op = {"insert": "c", "read": "r", "update": "u", "delete": "d"}[op]
        return produce(dbz_op, record.before if dbz_op in ("u", "d") else None,
                       record.after if dbz_op != "d" else None, record.key,
                       position.event_serial_no, block)


