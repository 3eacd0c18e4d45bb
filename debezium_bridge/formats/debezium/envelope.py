"""From a parsed Debezium envelope (any encoding) to a :class:`ChangeEvent`.

Every encoding (JsonConverter with/without schema, Avro, Avro-JSON, CloudEvents) ends here, so the
envelope rules live in one place: op values, source block quirks of Debezium 1.x/2.x/3.x, LSNs,
snapshot markers, transaction blocks and the unchanged-LOB placeholder.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from debezium_bridge.errors import DecodeError, EnvelopeError, LsnFormatError
from debezium_bridge.model.change import (
    ChangeEvent,
    PositionRef,
    SideKind,
    SideRecord,
    SourceRef,
    TableRef,
    TxRef,
)
from debezium_bridge.model.lsn import normalize_lsn
from debezium_bridge.model.records import RawRecord, fits_kafka_types
from debezium_bridge.model.schema import TableSchema

_INT64_END = 2**63
_TS_MIN, _TS_END = -62135596800000, 253402300800000  # years 1..9999 in epoch milliseconds
DATA_OPS = frozenset({"c", "u", "d", "r", "t"})
OLDKEY_HEADER = "__debezium.oldkey"
NEWKEY_HEADER = "__debezium.newkey"


class Source(msgspec.Struct, gc=False):
    """The ``source`` block; unknown fields are ignored, types tolerate documented drift."""

    version: str | None = None
    connector: str | None = None
    name: str | None = None
    ts_ms: int | None = None
    snapshot: str | bool | None = None
    db: str | None = None
    schema: str | None = None
    table: str | None = None
    change_lsn: str | None = None
    commit_lsn: str | None = None
    event_serial_no: int | str | None = None


class Transaction(msgspec.Struct, gc=False):
    id: str
    total_order: int | str | None = None
    data_collection_order: int | str | None = None


class Envelope(msgspec.Struct, gc=False):
    """The value of a Debezium data event (payload of JsonConverter, record of Avro)."""

    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    source: Source | None = None
    op: str | None = None
    ts_ms: int | None = None
    transaction: Transaction | None = None


class RowDecoderLike(Protocol):
    """Turns a row image into canonical values; says which columns were "not sent"."""

    def decode(self, row: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]: ...


class RowSource(Protocol):
    """What an encoding-specific decoder (Avro) needs from the Debezium decoder: row decoders
    per table version, and keys decoded in any encoding."""

    def rows_for(self, schema: TableSchema | None) -> RowDecoderLike:
        """The row decoder of a table version (``None``: schema-less, values as they are)."""
        ...

    def decode_key(self, record: RawRecord, raw: bytes | None,
                   value_rows: RowDecoderLike | None = None) -> dict[str, Any] | None: ...

    def partner_key(self, record: RawRecord, op: str | None,
                    value_rows: RowDecoderLike | None) -> dict[str, Any] | None:
        """The partner key a primary-key change's header names, if any."""
        ...

    def from_cloudevent(self, record: RawRecord, doc: dict[str, Any],
                        rows: RowDecoderLike | None = None,
                        columns: tuple[str, ...] | None = None) -> ChangeEvent | SideRecord:
        """The event of a Debezium CloudEvent (``rows``: the row decoder of its ``data``)."""
        ...


_key_encoder = msgspec.json.Encoder()
_EMPTY_KEY_ID = b"{}"


def key_identity(key: Mapping[str, Any]) -> bytes:
    """Canonical bytes of a key: equal keys give equal bytes whatever their encoding was."""
    return _key_encoder.encode(key) if key else _EMPTY_KEY_ID


def _int_or_none(value: Any, what: str, record: RawRecord) -> int | None:
    if value is None or value.__class__ is int:
        return value
    try:
        return int(value)
    except (TypeError, ValueError) as exc:
        raise EnvelopeError(f"{what} is not an integer: {value!r:.40}", record) from exc


def _int64_or_none(value: Any, what: str, record: RawRecord) -> int | None:
    """An INT64 field (``_int_or_none``) within its range."""
    number = _int_or_none(value, what, record)
    if number is not None and not -_INT64_END <= number < _INT64_END:
        raise EnvelopeError(f"{what} out of range: {number}", record)
    return number


def _snapshot_marker(value: str | bool | None) -> str:
    if value is None:
        return "false"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return value


_TRANSACTION_FIELDS = frozenset({"status", "id", "ts_ms", "event_count", "data_collections"})
"""``TransactionMetadataValue`` (reference §1.4): a row with other members is no such record
(say, a table's row with ``id`` and ``status`` columns, flattened by ExtractNewRecordState)."""
_SCHEMA_CHANGE_FIELDS = frozenset({"source", "ts_ms", "databaseName", "schemaName", "ddl",
                                   "tableChanges"})
"""``SchemaChangeValue`` (reference §6, side topics)."""


def side_record_of_envelope(env: Mapping[str, Any], record: RawRecord) -> SideRecord | None:
    """Recognise schema-change, transaction and heartbeat values (side topics).

    ``env`` is the decoded value of any converter (JSON payload, Avro record, Avro-JSON), so
    the record's ``ts_ms`` is carried on the :class:`SideRecord` for every converter."""
    ts = env.get("ts_ms")
    ts_ms = ts if ts.__class__ is int else None
    status = env.get("status")
    if status in ("BEGIN", "END") and "id" in env and env.keys() <= _TRANSACTION_FIELDS:
        kind = SideKind.TX_BEGIN if status == "BEGIN" else SideKind.TX_END
        count = env.get("event_count")
        return SideRecord(kind, record, tx_id=str(env["id"]),
                          event_count=count if isinstance(count, int) else None, ts_ms=ts_ms)
    if ("tableChanges" in env or "ddl" in env or "databaseName" in env) \
            and env.keys() <= _SCHEMA_CHANGE_FIELDS:
        return SideRecord(SideKind.SCHEMA_CHANGE, record, ts_ms=ts_ms)
    if record.topic.startswith("__debezium-heartbeat") or set(env) == {"ts_ms"}:
        return SideRecord(SideKind.HEARTBEAT, record, ts_ms=ts_ms)
    return None


def build_event(
    env: Envelope,
    record: RawRecord,
    key: dict[str, Any] | None,
    rows: RowDecoderLike,
    partner_key: dict[str, Any] | None = None,
    column_order: tuple[str, ...] | None = None,
) -> ChangeEvent | SideRecord:
    """Validate the envelope and build the event; raises :class:`EnvelopeError`."""
    if not fits_kafka_types(record):
        raise DecodeError(f"Kafka coordinates out of range (a partition is int32, an offset "
                          f"int64): partition {record.partition}, offset {record.offset}", record)
    op = env.op
    source = env.source
    if op is None:
        raise EnvelopeError("envelope has no 'op'", record)
    if op not in DATA_OPS:
        if op == "m":
            return SideRecord(SideKind.MESSAGE, record)
        raise EnvelopeError(f"unknown op {op!r}", record)
    if source is None:
        raise EnvelopeError("envelope has no 'source' block", record)
    if source.schema is None or source.table is None:
        raise EnvelopeError("source block lacks 'schema' or 'table'", record)
    before, after = env.before, env.after
    if op in ("c", "r") and after is None:
        raise EnvelopeError(f"op {op!r} without an 'after' image", record)
    if op == "u" and after is None:
        raise EnvelopeError("update without an 'after' image", record)
    if op == "d" and before is None and not key:
        raise EnvelopeError("delete without a 'before' image or a key", record)
    commit_text = source.commit_lsn
    change_text = source.change_lsn
    # fast path: both LSNs in Debezium's own form (what normalize_lsn checks first)
    if commit_text is not None and change_text is not None \
            and _canonical_lsn(commit_text) is not None \
            and _canonical_lsn(change_text) is not None:
        commit_hex = commit_text.replace(":", "")
        change_hex = change_text.replace(":", "")
        commit_key = _fromhex(commit_hex)
        change_key = _fromhex(change_hex)
    else:
        try:
            commit_key, commit_text = normalize_lsn(commit_text)
            change_key, change_text = normalize_lsn(change_text)
        except LsnFormatError as exc:
            raise EnvelopeError(str(exc), record) from exc
        commit_hex = commit_key.hex() if commit_key else _ZERO20
        change_hex = change_key.hex() if change_key else _ZERO20
    if not commit_key and op != "t":
        raise EnvelopeError("source block has no commit_lsn (not a SQL Server event?)", record)
    serial = source.event_serial_no
    if serial is not None and (serial.__class__ is not int or not 0 <= serial < _INT64_END):
        serial = _int_or_none(serial, "source.event_serial_no", record)
        if serial is not None and not 0 <= serial < _INT64_END:
            raise EnvelopeError(f"source.event_serial_no out of range: {serial}", record)
    unavailable: tuple[str, ...] = ()
    if before is not None:
        before, unavailable = rows.decode(before)
    if after is not None:
        after, missing = rows.decode(after)
        if missing:
            unavailable += tuple(m for m in missing if m not in unavailable)
    if key is None:
        key = {}
    tx = env.transaction
    source_ts = source.ts_ms
    if source_ts is not None and (source_ts.__class__ is not int
                                  or not _TS_MIN <= source_ts < _TS_END):
        source_ts = _int_or_none(source_ts, "source.ts_ms", record)
        if source_ts is not None and not _TS_MIN <= source_ts < _TS_END:
            raise EnvelopeError(f"source.ts_ms out of range: {source_ts}", record)
    if env.ts_ms is not None and not _TS_MIN <= env.ts_ms < _TS_END:
        raise EnvelopeError(f"envelope ts_ms out of range: {env.ts_ms}", record)
    snapshot = source.snapshot
    if snapshot.__class__ is not str:
        snapshot = _snapshot_marker(snapshot)
    table_key = (source.db, source.schema, source.table)
    table = _tables.get(table_key)
    if table is None:
        if len(_tables) > 4096:
            _tables.clear()
        ref = TableRef(source.db or "", source.schema, source.table)
        table = _tables[table_key] = (ref, ref.table_id)
    source_key = (source.connector, source.name, source.version)
    source_ref = _sources.get(source_key)
    if source_ref is None:
        if len(_sources) > 4096:
            _sources.clear()
        source_ref = _sources[source_key] = SourceRef(*source_key)
    position_serial = -1 if serial is None else serial
    return ChangeEvent(
        record,
        table[0],
        op,
        key,
        _key_encoder.encode(key) if key else _EMPTY_KEY_ID,
        before,
        after,
        unavailable,
        (commit_key, change_key, position_serial),
        PositionRef(commit_text, change_text, serial),
        source_ts,
        env.ts_ms,
        snapshot,  # type: ignore[arg-type]
        None if tx is None else TxRef(
            tx.id,
            _int64_or_none(tx.total_order, "transaction.total_order", record),
            _int64_or_none(tx.data_collection_order, "transaction.data_collection_order",
                           record),
        ),
        source_ref,
        column_order,
        None if partner_key is None else key_identity(partner_key),
        table[1],
        f"{commit_hex}:{change_hex}:{_SERIAL_TEXTS[position_serial]}"
        if 0 <= position_serial < 256 else
        f"{commit_hex}:{change_hex}:{_serial_text(position_serial)}",
    )


def _serial_text(serial: int) -> str:
    return f"{serial if serial >= 0 else 0:020d}"


_SERIAL_TEXTS = tuple(_serial_text(i) for i in range(256))
_ZERO20 = "0" * 20
_canonical_lsn = re.compile(r"[0-9a-f]{8}:[0-9a-f]{8}:[0-9a-f]{4}").fullmatch
"""Debezium's own LSN form (as :mod:`debezium_bridge.model.lsn` checks it)."""
_fromhex = bytes.fromhex
_tables: dict[tuple[str | None, str, str], tuple[TableRef, str]] = {}
"""Shared TableRef and table_id per distinct (db, schema, table) (bounded)."""
_sources: dict[tuple[str | None, str | None, str | None], SourceRef] = {}
