"""Canonical change records → the SQL Server connector's Kafka records (docs/canonical.md,
"Debezium envelopes back").

Column SQL types come from a :class:`~debezium_bridge.formats.columns.ColumnCatalog`; the
envelopes themselves are built by :class:`~debezium_bridge.formats.debezium.encode.DebeziumEncoder`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from debezium_bridge.config import Settings
from debezium_bridge.errors import ConfigError, EncodeError, RecordError, SchemaError
from debezium_bridge.formats.columns import ColumnCatalog, record_column_names
from debezium_bridge.formats.debezium.encode import (
    DEFAULT_VERSION,
    DebeziumEncoder,
    Encoding,
    TableSpec,
    TransactionBlock,
)
from debezium_bridge.formats.debezium.registry import SchemaRegistrar
from debezium_bridge.formats.debezium.sqltypes import (
    UNAVAILABLE_VALUE,
    BinaryHandlingMode,
    ConnectorModes,
    DecimalHandlingMode,
    SqlColumn,
    TimePrecisionMode,
    column_spec,
)
from debezium_bridge.model.change import epoch_ms
from debezium_bridge.model.records import RawRecord


class DebeziumOutOptions(Settings):
    """How change records are written back as SQL Server connector envelopes — the
    ``debezium`` settings group: flags ``--debezium.<name>``, file keys
    ``debezium: {<name>: …}``."""

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
    """The connector's ``time.precision.mode`` to imitate."""
    decimal_handling_mode: DecimalHandlingMode = "precise"
    """The connector's ``decimal.handling.mode`` to imitate."""
    binary_handling_mode: BinaryHandlingMode = "bytes"
    """The connector's ``binary.handling.mode`` to imitate."""

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


def _sql_column(name: str, type_text: str) -> SqlColumn:
    """A :class:`SqlColumn` of a ``cols``-style type; types sqltypes does not model (UDTs,
    sql_variant, ...) are written as ``nvarchar(max)`` text."""
    column = SqlColumn(name, "nvarchar(128)" if type_text == "sysname" else type_text)
    try:
        column_spec(column)
    except SchemaError:
        return SqlColumn(name, "nvarchar(max)")
    return column


class DebeziumWriter:
    """Canonical :class:`~debezium_bridge.model.change.ChangeRecord` s → the SQL Server connector's
    Kafka records, over :class:`DebeziumEncoder`.

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
    """

    def __init__(self, options: DebeziumOutOptions | None = None, catalog: Any = None, *,
                 encoding: Literal["json", "avro"] = "json",
                 registrar: SchemaRegistrar | None = None) -> None:
        self.options = options or DebeziumOutOptions()
        self.catalog = catalog if catalog is not None else ColumnCatalog()
        if encoding == "avro":
            if registrar is None:
                raise ConfigError("Debezium Avro output needs a schema registry")
            self._encoding: Encoding = "avro"
        else:
            self._encoding = "json-schema" if self.options.json_schemas else "json"
        self.registrar = registrar
        self.counters = DebeziumOutCounters()
        self._encoders: dict[tuple[Any, ...], tuple[DebeziumEncoder, dict[str, Any]]] = {}

    def _version(self, record: Any) -> str:
        if self.options.version:
            return self.options.version
        version = record.source.version
        return version if version and _VERSION_RE.match(version) else DEFAULT_VERSION

    def _encoder(self, record: Any) -> tuple[DebeziumEncoder, dict[str, Any]]:
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
        op = record.op
        if op not in ("insert", "read", "update", "delete"):
            return []
        encoder, encoders = self._encoder(record)
        commit_ms = epoch_ms(record.commit_ts)
        if commit_ms is None:
            raise EncodeError("no commit time (source.ts_ms)")
        capture_ms = epoch_ms(record.capture_ts)
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
            timestamp = capture_ms if capture_ms is not None else commit_ms
            out = [RawRecord(encoder.topic, 0, None, timestamp, kafka_key, value)]
            self.counters.data_records += 1
            if dbz_op == "d" and self.options.tombstones:
                out.append(RawRecord(encoder.topic, 0, None, timestamp, kafka_key,
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
