"""Decoders: one Kafka record in, a :class:`ChangeEvent` or :class:`SideRecord` out.

Encodings are detected per record: Confluent Avro wire format (magic byte 0), JsonConverter with
schema (``{"schema","payload"}``), without schema, Avro-JSON (union branches wrapped), and
Debezium's CloudEventsConverter output. Errors are raised as :class:`RecordError` subclasses; the
translator turns them into dead letters at the record boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, TypeVar

import msgspec

from debezium_bridge.errors import (
    ConfigError,
    DecodeError,
    EnvelopeError,
    KeyDecodeError,
    RecordError,
    SchemaError,
)
from debezium_bridge.formats.debezium.avro import AvroDecoder, unwrap_avro_json, unwrap_avro_value
from debezium_bridge.formats.debezium.envelope import (
    NEWKEY_HEADER,
    OLDKEY_HEADER,
    Envelope,
    RowDecoderLike,
    build_event,
    side_record_of_envelope,
)
from debezium_bridge.formats.debezium.logical import (
    DEFAULT_PLACEHOLDER,
    BinaryHandlingMode,
    RowDecoder,
    SchemalessRowDecoder,
)
from debezium_bridge.model.change import ChangeEvent, SideKind, SideRecord
from debezium_bridge.model.records import RawRecord
from debezium_bridge.model.schema import TableSchema, table_from_connect

__all__ = ["DecodeOptions", "Decoder"]


class DecodeOptions(msgspec.Struct, frozen=True):
    """How the connector was configured, where that changes what the bytes mean."""

    unavailable_value_placeholder: str = DEFAULT_PLACEHOLDER
    binary_handling_mode: BinaryHandlingMode = "bytes"
    table_schemas: Mapping[str, TableSchema] = msgspec.field(default_factory=dict)
    """Schemas for schema-less JSON, by topic or by ``db.schema.table``."""


_RAW_NULL = msgspec.Raw(b"null")


class _WithSchema(msgspec.Struct, gc=False):
    schema: msgspec.Raw = _RAW_NULL
    payload: msgspec.Raw = _RAW_NULL


_T = TypeVar("_T")


class _SchemaCache:
    """Schema-ful JsonConverter values: the schema part is parsed once per table version.

    The bytes before ``"payload":`` are identical for every message of a table version, so a
    ``startswith`` against the last prefix seen on the topic replaces parsing ~80% of the message.
    """

    __slots__ = ("_by_prefix", "_last")

    def __init__(self) -> None:
        self._last: dict[str, tuple[bytes, Any]] = {}
        self._by_prefix: dict[bytes, Any] = {}

    def read(self, topic: str, value: bytes, compile_schema: Any,
             read_payload: Callable[[Any, bytes], _T]) -> _T:
        """``read_payload(compiled schema, payload text)`` of a value. The payload of a value
        that starts with the topic's last prefix is cut from it unparsed; if that text does
        not read (it is JSON only if the whole value is), the value is read whole, so that
        the result does not depend on the values before it."""
        last = self._last.get(topic)
        if last is not None and value.startswith(last[0]) and value.endswith(b"}"):
            try:
                return read_payload(last[1], value[len(last[0]):-1])
            except _MALFORMED:
                pass
        return read_payload(*self._split(topic, value, compile_schema))

    def _split(self, topic: str, value: bytes, compile_schema: Any) -> tuple[Any, bytes]:
        """The compiled schema and the payload text of a value read whole."""
        try:
            parts = msgspec.json.decode(value, type=_WithSchema)
        except msgspec.DecodeError as exc:
            raise DecodeError(f"invalid JSON: {exc}") from exc
        except msgspec.ValidationError as exc:
            raise DecodeError(f"not a JsonConverter value: {exc}") from exc
        payload = bytes(parts.payload)
        schema_bytes = bytes(parts.schema)
        prefix_len = len(value) - len(payload) - 1
        compiled_key = schema_bytes
        if value.endswith(b"}") and value[prefix_len:-1] == payload:
            compiled_key = value[:prefix_len]
        compiled = self._by_prefix.get(compiled_key)
        if compiled is None:
            try:
                schema = msgspec.json.decode(schema_bytes)
            except msgspec.DecodeError as exc:  # pragma: no cover - Raw was valid JSON
                raise DecodeError(f"invalid schema JSON: {exc}") from exc
            compiled = compile_schema(schema)
            if len(self._by_prefix) > 4096:
                self._by_prefix.clear()
            self._by_prefix[compiled_key] = compiled
        if compiled_key is not schema_bytes:
            self._last[topic] = (compiled_key, compiled)
        return compiled, payload


_envelope_decoder = msgspec.json.Decoder(Envelope)
_any_decoder = msgspec.json.Decoder()
_JSON_START = frozenset(b'{[" \t\r\n-0123456789tfn')
_BAD_TEXT = (UnicodeDecodeError, RecursionError)
"""msgspec raises these (not DecodeError) for invalid UTF-8 and absurd nesting."""
_MALFORMED: tuple[type[Exception], ...] = (DecodeError, msgspec.DecodeError, *_BAD_TEXT)
"""What reading a payload cut from its value by the schema cache raises when it is no JSON."""


def _envelope_row_schema(schema: Any) -> TableSchema | None:
    """The row struct (``before``/``after`` field) of a JsonConverter envelope schema."""
    if schema is None:
        return None
    if not isinstance(schema, dict) or schema.get("type") != "struct":
        raise SchemaError("envelope schema is not a Connect struct")
    fields = schema.get("fields")
    if not isinstance(fields, list):
        raise SchemaError("envelope schema has no 'fields' list")
    for field in fields:
        if isinstance(field, dict) and field.get("field") in ("after", "before"):
            return table_from_connect(field)
    return None


class CloudEventDecoder(Protocol):
    """Decodes the CloudEvents of another format found among Debezium records (SQL Server
    CES events); given to :class:`Decoder` so that this module need not know that format."""

    def decode(self, record: RawRecord, doc: dict[str, Any] | None = None
               ) -> ChangeEvent | SideRecord: ...


class Decoder:
    """Decodes keys and values of Debezium records in any supported encoding; CES events
    (JSON type ``com.microsoft.SQL.CES.*``, or Avro) go to ``ces``."""

    def __init__(self, options: DecodeOptions | None = None,
                 avro: AvroDecoder | None = None,
                 ces: CloudEventDecoder | None = None) -> None:
        self.options = options or DecodeOptions()
        self.avro = avro or AvroDecoder()
        self._value_schemas = _SchemaCache()
        self._key_schemas = _SchemaCache()
        self._schemaless = SchemalessRowDecoder(
            placeholder=self.options.unavailable_value_placeholder)
        self._row_decoders: dict[int, RowDecoderLike] = {}
        self.schema_listeners: list[Callable[[TableSchema], None]] = []
        """Called with every row schema the decoder compiles (the CES/Debezium output encoders
        learn SQL column types this way); see :meth:`add_schema_listener`."""
        self.ces = ces
        """The decoder of CES CloudEvents (``None``: CES records are rejected)."""
        self._file_rows: dict[str, RowDecoder] = {}
        for name, schema in self.options.table_schemas.items():
            try:
                self._file_rows[name] = self._row_decoder(schema)
            except SchemaError as exc:
                raise ConfigError(f"table schema {name!r}: {exc.message}") from exc

    def add_schema_listener(self, listener: Callable[[TableSchema], None]) -> None:
        """Call ``listener`` with every row schema compiled from now on (and the table-schema
        file's schemas, compiled already)."""
        self.schema_listeners.append(listener)
        for rows in self._file_rows.values():
            listener(rows.schema)

    def rows_for(self, schema: TableSchema | None) -> RowDecoderLike:
        """The row decoder of a table version (``None``: schema-less)."""
        return self._schemaless if schema is None else self._row_decoder(schema)

    def _row_decoder(self, schema: TableSchema) -> RowDecoder:
        rows = RowDecoder(schema, placeholder=self.options.unavailable_value_placeholder,
                          binary_mode=self.options.binary_handling_mode)  # checks the schema
        for listener in self.schema_listeners:
            listener(schema)
        return rows

    def _ces_decoder(self) -> CloudEventDecoder:
        if self.ces is None:
            raise EnvelopeError("a SQL Server CES event, but this decoder reads no CES")
        return self.ces

    def _compile_envelope_schema(
            self, schema: Any) -> tuple[RowDecoderLike, tuple[str, ...] | None]:
        table = _envelope_row_schema(schema)
        if table is None:
            return self._schemaless, None
        return self._row_decoder(table), table.column_names

    def _compile_key_schema(self, schema: Any) -> RowDecoderLike:
        if schema is None:
            return self._schemaless
        return self._row_decoder(table_from_connect(schema))

    # -- keys ---------------------------------------------------------------------------------
    def decode_key(self, record: RawRecord, raw: bytes | None,
                   value_rows: RowDecoderLike | None = None) -> dict[str, Any] | None:
        """The key struct as canonical values (``None`` for a null key). A JSON key without a
        schema of its own is converted by ``value_rows``, the row decoder of its value's table
        (from the value's schema, a table schema file or the registry of an Avro-JSON value):
        a key holds the row's key columns, converted as the row's are."""
        if raw is None:
            return None
        try:
            if raw[:1] == b"\x00":
                return self.avro.decode_key(record, raw, self)
            if raw[:10] == b'{"schema":':
                rows, key = self._key_schemas.read(
                    record.topic, raw, self._compile_key_schema,
                    lambda rows, payload: (rows, _any_decoder.decode(payload)))
            else:
                key = _any_decoder.decode(raw)
                if isinstance(key, dict) and "payload" in key and "schema" in key:
                    rows = self._compile_key_schema(key["schema"])
                    key = key["payload"]
                else:
                    rows = value_rows or self._schemaless
                    if key.__class__ is dict and dict in map(type, key.values()):
                        key = {k: unwrap_avro_value(v) for k, v in key.items()}
        except RecordError as exc:
            raise KeyDecodeError(f"key: {exc.message}", record) from exc
        except (msgspec.DecodeError, *_BAD_TEXT) as exc:
            raise KeyDecodeError(f"key is not valid JSON: {exc}", record) from exc
        if key is None:
            return None
        if not isinstance(key, dict):
            raise KeyDecodeError(f"key is not a struct: {key!r:.60}", record)
        try:
            return rows.decode(key)[0]
        except RecordError as exc:
            raise KeyDecodeError(f"key: {exc.message}", record) from exc

    def partner_key(self, record: RawRecord, op: str | None,
                    value_rows: RowDecoderLike | None) -> dict[str, Any] | None:
        """The key of the other half of a primary-key change, as the connector's
        ``__debezium.newkey`` (on the delete) or ``__debezium.oldkey`` (on the create) header
        names it; ``None`` when there is none or it cannot be read (headers are not
        required)."""
        if not record.headers:
            return None
        raw = record.header(NEWKEY_HEADER if op == "d" else OLDKEY_HEADER)
        if raw is None:
            return None
        try:
            return self.decode_key(record, raw, value_rows)
        except KeyDecodeError:
            return None  # headers are read, not required

    # -- values -------------------------------------------------------------------------------
    def decode(self, record: RawRecord) -> ChangeEvent | SideRecord:
        """Decode one record; raises a :class:`RecordError` for input that cannot be translated."""
        value = record.value
        if value is None:
            return SideRecord(SideKind.TOMBSTONE, record)
        if not value:
            raise DecodeError("empty value", record)
        try:
            first = value[0]
            if first == 0:
                return self.avro.decode(record, self)
            if first not in _JSON_START:
                if value.startswith(b"\x061.0"):  # Avro "1.0" (specversion): CES Avro
                    return self._ces_decoder().decode(record)
                raise DecodeError(
                    f"value is neither JSON nor Confluent Avro (first byte 0x{first:02x})")
            if value.startswith(b'{"schema":'):
                return self._value_schemas.read(
                    record.topic, value, self._compile_envelope_schema,
                    lambda compiled, payload: self._from_payload(record, payload, *compiled))
            return self._from_json(record, value)
        except RecordError as exc:
            if exc.record is None:
                exc.record = record
            raise
        except _BAD_TEXT as exc:
            raise DecodeError(f"invalid JSON: {type(exc).__name__}: {exc}", record) from exc
        except msgspec.ValidationError as exc:  # typed parts (Envelope, Source) of the JSON
            raise EnvelopeError(f"malformed envelope: {exc}", record) from exc
        except msgspec.DecodeError as exc:  # the JSON text itself, wherever it is parsed
            raise DecodeError(f"invalid JSON: {exc}", record) from exc

    def _from_payload(self, record: RawRecord, payload: bytes, rows: RowDecoderLike,
                      columns: tuple[str, ...] | None) -> ChangeEvent | SideRecord:
        try:
            env = _envelope_decoder.decode(payload)
        except msgspec.ValidationError:
            return self._from_generic(record, _any_decoder.decode(payload), rows, columns)
        except msgspec.DecodeError as exc:
            raise DecodeError(f"invalid JSON payload: {exc}") from exc
        if env.op is None:
            return self._from_generic(record, _any_decoder.decode(payload), rows, columns)
        return self._event(record, env, rows, columns)

    def _from_json(self, record: RawRecord, value: bytes) -> ChangeEvent | SideRecord:
        try:
            env = _envelope_decoder.decode(value)
        except msgspec.ValidationError:
            env = None
        except msgspec.DecodeError as exc:
            raise DecodeError(f"invalid JSON: {exc}") from exc
        if env is not None and env.op is not None:
            return self._event(record, env, None, None)
        doc = _any_decoder.decode(value)
        if not isinstance(doc, dict):
            raise EnvelopeError(f"JSON value is not an object: {type(doc).__name__}")
        if "payload" in doc and "schema" in doc:
            rows, columns = self._compile_envelope_schema(doc["schema"])
            payload = doc["payload"]
            if payload is None:
                return SideRecord(SideKind.TOMBSTONE, record)
            return self._from_generic(record, payload, rows, columns)
        if "specversion" in doc:
            if str(doc.get("type", "")).startswith("com.microsoft.SQL.CES."):
                return self._ces_decoder().decode(record, doc)
            return self.from_cloudevent(record, doc)
        return self._from_generic(record, doc, None, None)

    def _from_generic(self, record: RawRecord, doc: Any, rows: RowDecoderLike | None,
                      columns: tuple[str, ...] | None) -> ChangeEvent | SideRecord:
        if not isinstance(doc, dict):
            raise EnvelopeError(f"payload is not an object: {type(doc).__name__}")
        original = doc
        doc, avro_json = unwrap_avro_json(doc)
        if avro_json and rows is None:
            rows = self.avro.json_rows(record.topic, self)
            if rows is not None:
                rows.check_branches(original)
            columns = rows.schema.column_names if rows is not None else None
        if "op" not in doc:
            side = side_record_of_envelope(doc, record)
            if side is not None:
                return side
            missing = "op" if "source" in doc else "source/op"
            raise EnvelopeError(f"not a Debezium envelope: no '{missing}' field")
        try:
            env = msgspec.convert(doc, Envelope, strict=False)
        except msgspec.ValidationError as exc:
            raise EnvelopeError(f"malformed envelope: {exc}") from exc
        return self._event(record, env, rows, columns)

    def from_cloudevent(self, record: RawRecord, doc: dict[str, Any],
                        rows: RowDecoderLike | None = None,
                        columns: tuple[str, ...] | None = None) -> ChangeEvent | SideRecord:
        """Debezium's CloudEventsConverter (structured mode): ``iodebezium*`` + ``data``;
        ``rows``: the row decoder of ``data`` when the envelope's schema gave it (Avro)."""
        data = doc.get("data")
        if isinstance(data, str):
            raise EnvelopeError("CloudEvent with Avro 'data' needs the envelope's data schema; "
                                "use the Avro data serializer with a schema registry")
        if isinstance(data, dict) and "payload" in data and "schema" in data:
            rows, columns = self._compile_envelope_schema(data["schema"])
            data = data["payload"]
        if not isinstance(data, dict):
            raise EnvelopeError("CloudEvent without a 'data' object")
        if "iodebeziumop" not in doc:
            raise EnvelopeError("CloudEvent without the 'iodebeziumop' extension attribute")
        source = {
            "version": doc.get("iodebeziumversion"),
            "connector": doc.get("iodebeziumconnector"),
            "name": doc.get("iodebeziumname"),
            "ts_ms": doc.get("iodebeziumtsms"),
            "snapshot": doc.get("iodebeziumsnapshot"),
            "db": doc.get("iodebeziumdb"),
            "schema": doc.get("iodebeziumschema"),
            "table": doc.get("iodebeziumtable"),
            "change_lsn": doc.get("iodebeziumchangelsn"),
            "commit_lsn": doc.get("iodebeziumcommitlsn"),
            "event_serial_no": doc.get("iodebeziumeventserialno"),
        }
        tx = None
        if doc.get("iodebeziumtxid") is not None:
            tx = {"id": doc["iodebeziumtxid"],
                  "total_order": doc.get("iodebeziumtxtotalorder"),
                  "data_collection_order": doc.get("iodebeziumtxdatacollectionorder")}
        envelope = {"before": data.get("before"), "after": data.get("after"), "source": source,
                    "op": doc["iodebeziumop"], "transaction": tx}
        try:
            env = msgspec.convert(envelope, Envelope, strict=False)
        except msgspec.ValidationError as exc:
            raise EnvelopeError(f"malformed CloudEvent: {exc}") from exc
        return self._event(record, env, rows, columns)

    def _schemaless_rows(self, record: RawRecord, env: Envelope) -> tuple[RowDecoderLike,
                                                                           tuple[str, ...] | None]:
        if self._file_rows:
            rows = self._file_rows.get(record.topic)
            if rows is None and env.source is not None:
                src = env.source
                rows = self._file_rows.get(f"{src.db}.{src.schema}.{src.table}")
            if rows is not None:
                return rows, rows.schema.column_names
        return self._schemaless, None

    def _event(self, record: RawRecord, env: Envelope, rows: RowDecoderLike | None,
               columns: tuple[str, ...] | None) -> ChangeEvent | SideRecord:
        if rows is None:
            if self._file_rows:
                rows, columns = self._schemaless_rows(record, env)
            else:
                rows = self._schemaless
        key = self.decode_key(record, record.key, rows)
        return build_event(env, record, key, rows, self.partner_key(record, env.op, rows),
                           columns)


def table_schema_of(schema: Any) -> TableSchema:
    """A row schema from a Connect struct (row or whole envelope) or an Avro record schema."""
    from debezium_bridge.formats.debezium.avro import (
        AvroNames,
        envelope_row_schema,
        table_from_avro,
    )

    if isinstance(schema, dict) and schema.get("type") == "struct":
        row = _envelope_row_schema(schema)
        return row if row is not None else table_from_connect(schema)
    if isinstance(schema, dict) and schema.get("type") == "record":
        row = envelope_row_schema(schema)
        if row is not None:
            return row
        return table_from_avro(schema, AvroNames(schema))
    raise SchemaError(f"not a Connect struct or Avro record schema: {schema!r:.80}")


def load_table_schemas(path: str) -> dict[str, TableSchema]:
    """A table-schema file: ``{topic or db.schema.table: schema}`` (JSON or YAML).

    Each schema is a JsonConverter schema (the row struct, or a whole envelope schema copied from
    one schema-ful message) or an Avro record schema.
    """
    from debezium_bridge.config import load_config_file

    out: dict[str, TableSchema] = {}
    for name, schema in load_config_file(path).items():
        if isinstance(schema, dict) and "schema" in schema and "type" not in schema:
            schema = schema["schema"]
        try:
            out[str(name)] = table_schema_of(schema)
        except SchemaError as exc:
            raise ConfigError(f"{path}: table {name!r}: {exc}") from exc
    return out
