"""Build SQL Server change events exactly as the Debezium connector and Kafka converters write them.

Encodings: Kafka's JsonConverter with schemas (``{"schema":…,"payload":…}``), without schemas
(payload only), and Confluent's AvroConverter wire format (magic byte 0, 4-byte big-endian schema
id, Avro binary). Schemas are built once per table and spliced with each payload; the JSON
schemas spell Connect's FLOAT64/FLOAT32 ``"double"``/``"float"``, as Kafka's ``JsonSchema`` does.

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

from debezium_bridge.errors import ConfigError, SchemaError
from debezium_bridge.formats.debezium.connect_schema import avro_schema_for, connect_struct_schema
from debezium_bridge.formats.debezium.sqltypes import (
    DEFAULT_MODES,
    ConnectorModes,
    SqlColumn,
    connect_column,
    sql_value_encoder,
)
from debezium_bridge.model.schema import json_type_name

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
    """A JsonConverter field schema of Connect type ``ctype`` (``type`` spelled as JsonConverter
    writes it: FLOAT64 is ``"double"``, FLOAT32 ``"float"``)."""
    out: dict[str, Any] = {"type": json_type_name(ctype), "optional": optional}
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




