"""From a parsed Debezium envelope (any encoding) to a :class:`ChangeEvent`.

Every encoding (JsonConverter with/without schema, Avro, Avro-JSON, CloudEvents) ends here, so the
envelope rules live in one place: op values, source block quirks of Debezium 1.x/2.x/3.x, LSNs,
snapshot markers, transaction blocks and the unchanged-LOB placeholder.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from debezium_bridge.errors import EnvelopeError
from debezium_bridge.lsn import LsnFormatError, normalize_lsn
from debezium_bridge.model import (
    ChangeEvent,
    PositionRef,
    SideKind,
    SideRecord,
    SourceRef,
    TableRef,
    TxRef,
)
from debezium_bridge.records import RawRecord

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
    def decode(self, row: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]: ...


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


def _snapshot_marker(value: str | bool | None) -> str:
    if value is None:
        return "false"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return value


def side_record_of_envelope(env: Mapping[str, Any], record: RawRecord) -> SideRecord | None:
    """Recognise schema-change, transaction and heartbeat values (SPEC §3.1 side topics)."""
    status = env.get("status")
    if status in ("BEGIN", "END") and "id" in env:
        kind = SideKind.TX_BEGIN if status == "BEGIN" else SideKind.TX_END
        count = env.get("event_count")
        return SideRecord(kind, record, tx_id=str(env["id"]),
                          event_count=count if isinstance(count, int) else None)
    if "tableChanges" in env or "ddl" in env or "databaseName" in env:
        return SideRecord(SideKind.SCHEMA_CHANGE, record)
    if record.topic.startswith("__debezium-heartbeat") or set(env) == {"ts_ms"}:
        return SideRecord(SideKind.HEARTBEAT, record)
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
    try:
        commit_key, commit_text = normalize_lsn(source.commit_lsn)
        change_key, change_text = normalize_lsn(source.change_lsn)
    except LsnFormatError as exc:
        raise EnvelopeError(str(exc), record) from exc
    if not commit_key and op != "t":
        raise EnvelopeError("source block has no commit_lsn (not a SQL Server event?)", record)
    serial = _int_or_none(source.event_serial_no, "source.event_serial_no", record)
    unavailable: tuple[str, ...] = ()
    if before is not None:
        before, missing = rows.decode(before)
        unavailable += missing
    if after is not None:
        after, missing = rows.decode(after)
        unavailable += tuple(m for m in missing if m not in unavailable)
    if key is None:
        key = {}
    tx = env.transaction
    return ChangeEvent(
        record=record,
        table=TableRef(source.db or "", source.schema, source.table),
        op=op,
        key=key,
        key_id=key_identity(key),
        before=before,
        after=after,
        unavailable=unavailable,
        sort_key=(commit_key, change_key, -1 if serial is None else serial),
        position=PositionRef(commit_text, change_text, serial),
        source_ts_ms=_int_or_none(source.ts_ms, "source.ts_ms", record),
        ts_ms=env.ts_ms,
        snapshot=_snapshot_marker(source.snapshot),
        tx=None if tx is None else TxRef(
            tx.id,
            _int_or_none(tx.total_order, "transaction.total_order", record),
            _int_or_none(tx.data_collection_order, "transaction.data_collection_order", record),
        ),
        source=SourceRef(source.connector, source.name, source.version),
        column_order=column_order,
        partner_key_id=None if partner_key is None else key_identity(partner_key),
    )
