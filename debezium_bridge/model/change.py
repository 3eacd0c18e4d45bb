"""Records the translator works with: decoded Debezium events and canonical change records."""

from __future__ import annotations

import datetime as dt
from enum import StrEnum
from typing import Any, Literal

import msgspec

from debezium_bridge.model.lsn import lsn_hex20
from debezium_bridge.model.records import RawRecord

FORMAT_VERSION = 1

CanonicalOp = Literal["insert", "update", "delete", "read", "truncate", "upsert"]
DEBEZIUM_OPS: dict[str, CanonicalOp] = {
    "c": "insert", "u": "update", "d": "delete", "r": "read", "t": "truncate",
}


class SideKind(StrEnum):
    """Records that are recognised and counted but are not row changes."""

    SCHEMA_CHANGE = "schema_change"
    HEARTBEAT = "heartbeat"
    TX_BEGIN = "transaction_begin"
    TX_END = "transaction_end"
    MESSAGE = "message"
    TOMBSTONE = "tombstone"


class TableRef(msgspec.Struct, frozen=True, gc=False):
    db: str
    schema: str
    name: str

    @property
    def table_id(self) -> str:
        return f"{self.db}.{self.schema}.{self.name}"


class SourceRef(msgspec.Struct, frozen=True, gc=False):
    connector: str | None
    name: str | None
    version: str | None


class TxRef(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    id: str
    total_order: int | None
    data_collection_order: int | None
    begin_lsn: str | None = None
    """Begin LSN of the transaction, known only for CES input (``transaction.beginlsn``);
    omitted from the JSON form when absent, so Debezium-sourced records are unchanged."""


class PositionRef(msgspec.Struct, frozen=True, gc=False):
    commit_lsn: str | None
    change_lsn: str | None
    event_serial_no: int | None


class LineageRef(msgspec.Struct, frozen=True, gc=False):
    topic: str
    partition: int
    offset: int | None


SortKey = tuple[bytes, bytes, int]
"""(commit_lsn bytes, change_lsn bytes, event_serial_no or -1): sorts like the position."""


def seq_of(key: SortKey) -> str:
    """Fixed-width string that sorts like the position: 20 hex : 20 hex : 20 decimal digits."""
    serial = key[2] if key[2] >= 0 else 0
    return f"{lsn_hex20(key[0])}:{lsn_hex20(key[1])}:{serial:020d}"


_second_texts: dict[int, str] = {}
_MS_SUFFIXES = tuple(f".{ms:03d}Z" for ms in range(1000))


def iso_ms(epoch_ms: int | None) -> str | None:
    """Epoch milliseconds as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (``None`` if out of range)."""
    if epoch_ms is None:
        return None
    seconds = epoch_ms // 1000
    text = _second_texts.get(seconds)
    if text is None:
        try:
            text = f"{dt.datetime.fromtimestamp(seconds, dt.UTC):%Y-%m-%dT%H:%M:%S}"
        except (OverflowError, OSError, ValueError):
            return None
        if len(_second_texts) > 8192:
            _second_texts.clear()
        _second_texts[seconds] = text
    return text + _MS_SUFFIXES[epoch_ms % 1000]


def epoch_ms(iso: str | None) -> int | None:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` (canonical commit_ts/capture_ts) → epoch milliseconds."""
    if iso is None:
        return None
    moment = dt.datetime.fromisoformat(iso)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    delta = moment - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


class ChangeEvent(msgspec.Struct, gc=False):
    """One decoded Debezium data event (before ordering, dedupe and pairing)."""

    record: RawRecord
    table: TableRef
    op: str
    key: dict[str, Any]
    key_id: bytes
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    unavailable: tuple[str, ...]
    sort_key: SortKey
    position: PositionRef
    source_ts_ms: int | None
    ts_ms: int | None
    snapshot: str
    tx: TxRef | None
    source: SourceRef
    column_order: tuple[str, ...] | None = None
    partner_key_id: bytes | None = None
    """Case-B PK change: the other half's key, from ``__debezium.newkey``/``oldkey`` headers."""
    table_id: str = ""
    """``table.table_id``, computed once per distinct table by the decoder ("" = not cached)."""
    seq: str = ""
    """``seq_of(sort_key)``, computed by the decoder ("" = not computed)."""
    changed: tuple[str, ...] | None = None
    """Columns the source says an update changed (SQL Server's ``__$update_mask`` of
    change-table rows), in column order; ``None``: found by comparing the images."""
    unordered: bool = False
    """Its partition does not keep commit order (CES: Microsoft documents no order across
    events, and a segmented event stands at its last segment): a replay is found by its
    identity among the recent ones, never by the partition's high-water position."""

    @property
    def is_snapshot(self) -> bool:
        return self.op == "r"

    @property
    def is_keyless_read(self) -> bool:
        """A keyless table's row read in a snapshot (initial or incremental): such rows share
        their position and their empty key, and the table may hold the same row twice, so it
        has no identity and is never a replay of another (docs/concepts.md, duplicates)."""
        return self.op == "r" and self.key_id == b"{}"

    @property
    def identity(self) -> tuple[Any, ...]:
        """What makes a replayed event a duplicate of this one (docs/concepts.md, duplicates)."""
        if self.op == "r" and self.snapshot != "incremental":
            return (self.table, self.key_id, self.sort_key[0], "r")
        return (self.table, self.sort_key, self.op, self.key_id)


class ChangeRecord(msgspec.Struct, frozen=True, gc=False):
    """The canonical change record (format_version 1, docs/canonical.md)."""

    op: CanonicalOp
    table: TableRef
    table_id: str
    key: dict[str, Any]
    old_key: dict[str, Any] | None
    key_changed: bool
    before: dict[str, Any] | None
    after: dict[str, Any] | None
    changed_columns: list[str]
    unavailable_columns: list[str]
    position: PositionRef
    seq: str
    commit_ts: str | None
    capture_ts: str | None
    tx: TxRef | None
    snapshot: str
    source: SourceRef
    lineage: list[LineageRef]
    event_id: str
    format_version: int = FORMAT_VERSION


class SideRecord(msgspec.Struct, frozen=True, gc=False):
    """A schema-change, heartbeat, transaction-boundary or message record."""

    kind: SideKind
    record: RawRecord
    tx_id: str | None = None
    event_count: int | None = None
    ts_ms: int | None = None
    """The record's own ``ts_ms`` (epoch ms) whatever the converter: a heartbeat's connector
    clock, a transaction boundary's time; ``None`` when the value has none."""
