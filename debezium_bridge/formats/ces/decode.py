"""CES CloudEvents → the core's :class:`~debezium_bridge.model.change.ChangeEvent` (and so canonical
records).

Two stages:

:class:`CesAssembler` (before the translator, one per stream) reassembles segments: it buffers
the segments of a ``logicalid`` until the run from the first segment to the one with
``finalsegment: true`` (legacy: ``splittotalcnt`` segments) is complete, in any arrival order and
with either index base (a run starting at 1 is only complete if its first fragment is the start
of the ``data`` document, otherwise segment 0 is awaited), then forwards one record holding the
whole event. Duplicate segments are dropped; a missing segment is never guessed: when the input
ends (:meth:`CesAssembler.flush`) or more than ``max_pending_segments`` are held, the held
segments of the oldest incomplete event become dead letters (and so do segments of that event
arriving later). It also forwards a ``UPD`` whose key
changed (``pkkey`` differs from the key columns of ``old``) as two records, the delete and the
create half, which the translator pairs back into one update with ``key_changed`` (or emits
separately with ``--no-pairing``), exactly like Debezium's delete + create of a key change.

:class:`CesDecoder` (inside :class:`~debezium_bridge.formats.debezium.decode.Decoder`, which
detects CES by its ``type``, or by the Avro encoding of ``specversion`` ``"1.0"``) turns one
whole event into a
``ChangeEvent``: ``INS`` → ``c``, ``UPD`` → ``u``, ``DEL`` → ``d``; ``old``/``current`` (``"{}"``
= no image) and ``pkkey`` values converted back through ``cols[].type``
(:func:`debezium_bridge.formats.ces.render.parser`); ``time`` → commit time; ``commitlsn`` (or the
logicalid's second part) → ``commit_lsn``; ``sequencenumber`` (or the logicalid's third part) →
``tx.total_order``; ``beginlsn`` → ``tx.begin_lsn``; ``tx.id`` = the commit LSN (Debezium's
transaction id); ``tx.data_collection_order`` = the event's ordinal among the events of the same
transaction and table this decoder saw (derived; CES has no such field). Only ``type``
``com.microsoft.SQL.CES.DML.V1`` with ``specversion`` ``"1.0"`` is decoded. A ``UPD`` whose ``cols``
are a strict subset of the table's version last seen (``@include_all_columns = 0``) reports the
other columns of that version as unavailable (docs/ces.md).

CES has no change LSN. So that the events of one transaction keep their order and are never
taken for duplicates or for the two halves of one key change, ``change_lsn`` is the sequence
number written as an LSN in VLF 0 (``00000000:00000000:0001`` for sequencenumber 1) — no real log
record has VLF 0 — and ``event_serial_no`` is 1 for ``INS``/``DEL`` and 2 for ``UPD`` (Debezium's
numbering: an update is a CDC 3+4 row pair); the halves of a key change get 1 and 2 (Debezium's
delete + create of a primary-key update).

Accepted revisions: the current one (``segmentindex``/``finalsegment``, compact ``data``),
the 2025 one (``splitindex``/``splittotalcnt``, pretty ``data``, no ``transaction``: the
commit LSN and the sequence number then come from ``logicalid``), ``datacontenttype``
``application/json`` or ``application/avro-json`` (or anything else), ``\\/`` escapes, and the
tolerant cases of the non-conformant README illustration (``data`` as a JSON object,
``"old": null``, no ``logicalid`` when ``transaction`` is there).
"""

from __future__ import annotations

import base64
import datetime as dt
import re
from collections import OrderedDict
from typing import Any

from debezium_bridge.errors import (
    EnvelopeError,
    LsnFormatError,
    RecordError,
)
from debezium_bridge.formats.ces.envelope import (
    CES_TYPE,
    HALF_HEADER,
    SPEC_VERSION,
    parse_data,
    parse_envelope,
    parse_row,
    segment_info,
    text_of,
)
from debezium_bridge.formats.ces.options import DEFAULT_OPTIONS, CesOptions
from debezium_bridge.formats.ces.render import Parse, parser
from debezium_bridge.formats.columns import CatalogColumn, ColumnCatalog
from debezium_bridge.formats.debezium.envelope import Envelope, Source, Transaction, build_event
from debezium_bridge.model.change import ChangeEvent, SideRecord, TableRef, TxRef
from debezium_bridge.model.lsn import normalize_lsn
from debezium_bridge.model.records import RawRecord
from debezium_bridge.model.sqltype import parse_type

_OPS = {"INS": "c", "UPD": "u", "DEL": "d"}
_SERIALS = {"c": 1, "d": 1, "u": 2}








_TIME_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}:\d{2})?",
    re.I)
_EPOCH = dt.date(1970, 1, 1).toordinal()


def epoch_ms(text: str) -> int:
    """Milliseconds since the epoch of an RFC 3339 time (``Z``/offset; none = UTC)."""
    m = _TIME_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise EnvelopeError(f"CES time is not an RFC 3339 timestamp: {text!r:.40}")
    try:
        days = dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3))).toordinal() - _EPOCH
    except ValueError as exc:
        raise EnvelopeError(f"CES time {text!r:.40}: {exc}") from exc
    hour, minute, second = int(m.group(4)), int(m.group(5)), int(m.group(6))
    zone = (m.group(8) or "Z").upper()
    zone_hour, zone_minute = (0, 0) if zone == "Z" else (int(zone[1:3]), int(zone[4:6]))
    if hour > 23 or minute > 59 or second > 60 or zone_hour > 23 or zone_minute > 59:
        raise EnvelopeError(f"CES time {text!r:.40}: hour, minute, second or offset out of "
                            "range (RFC 3339)")
    seconds = days * 86400 + hour * 3600 + minute * 60 + second
    ms = int((m.group(7) or "0")[:3].ljust(3, "0"))
    if zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        seconds -= sign * (zone_hour * 3600 + zone_minute * 60)
    return seconds * 1000 + ms


def synthetic_change_lsn(sequence: int) -> str:
    """The change LSN given to CES events (module docstring): the sequence number in VLF 0."""
    return f"00000000:{sequence >> 16:08x}:{sequence & 0xFFFF:04x}"


def _logical_id_parts(logical_id: Any) -> tuple[str | None, int | None]:
    """(commit LSN in Debezium form, sequence number) from ``<guid>:<LSN20>:<SEQ20>``."""
    if not isinstance(logical_id, str):
        return None, None
    parts = logical_id.rsplit(":", 2)
    if len(parts) != 3 or len(parts[1]) != 20 or not parts[2].isdigit():
        return None, None
    try:
        h = bytes.fromhex(parts[1]).hex()
    except ValueError:
        return None, None
    return f"{h[:8]}:{h[8:16]}:{h[16:]}", int(parts[2])


class _CesRows:
    """Row texts of one ``cols`` list → canonical rows (the ``RowDecoderLike`` of build_event).
    Absent ``unlisted`` columns (left out of a partial ``UPD``) are always unavailable."""

    __slots__ = ("absent_unavailable", "names", "parsers", "unlisted")

    def __init__(self, columns: tuple[CatalogColumn, ...], absent_unavailable: bool,
                 unlisted: frozenset[str]) -> None:
        self.names = tuple(c.name for c in columns)
        self.unlisted = unlisted
        self.parsers: dict[str, Parse] = {}
        for column in columns:
            try:
                self.parsers[column.name] = parser(parse_type(column.type))
            except RecordError:
                self.parsers[column.name] = str
        self.absent_unavailable = absent_unavailable

    def value(self, name: str, text: Any) -> Any:
        text = text_of(text)
        if text is None:
            return None
        parse = self.parsers.get(name)
        if parse is None:
            return text  # a column not listed in cols (non-conformant): kept as text
        try:
            return parse(text)
        except RecordError as exc:
            exc.message = f"column {name!r}: {exc.message}"
            raise

    def decode(self, row: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
        out: dict[str, Any] = {}
        absent: list[str] = []
        for name in self.names:
            if name in row:
                out[name] = self.value(name, row[name])
            else:
                out[name] = None
                if self.absent_unavailable or name in self.unlisted:
                    absent.append(name)
        for name, text in row.items():
            if name not in out:
                out[name] = self.value(name, text)
        return out, tuple(absent)


class CesDecoder:
    """One whole CES event → :class:`ChangeEvent` (module docstring). Registers each event's
    ``cols`` with ``catalog`` so CES output can write them again."""

    def __init__(self, options: CesOptions | None = None,
                 catalog: ColumnCatalog | None = None) -> None:
        self.options = options or DEFAULT_OPTIONS
        self.catalog = catalog
        self._rows: dict[tuple[Any, ...], _CesRows] = {}
        self._tables: dict[TableRef, tuple[CatalogColumn, ...]] = {}
        """The columns of each table's version last seen (see :meth:`_table_columns`)."""
        self._orders: OrderedDict[str, dict[str, dict[int, int]]] = OrderedDict()

    def decode(self, record: RawRecord, doc: dict[str, Any] | None = None
               ) -> ChangeEvent | SideRecord:
        """Raises :class:`RecordError` subclasses (dead letters at the translator)."""
        try:
            return self._decode(record, doc)
        except RecordError as exc:
            if exc.record is None:
                exc.record = record
            raise

    def _decode(self, record: RawRecord, doc: dict[str, Any] | None) -> ChangeEvent | SideRecord:
        if doc is None:
            doc = parse_envelope(record.value or b"")
        kind = doc.get("type")
        if kind != CES_TYPE:
            raise EnvelopeError(f"unsupported CES event type {kind!r:.60} (only {CES_TYPE} "
                                "is documented)")
        if doc.get("specversion") != SPEC_VERSION:
            raise EnvelopeError(f"unsupported CloudEvents specversion "
                                f"{doc.get('specversion')!r:.20} (CES writes {SPEC_VERSION!r})")
        index, final, _ = segment_info(doc)
        if not final or index > 1:
            raise EnvelopeError(f"CES segment {index} (final={final}) of logicalid "
                                f"{doc.get('logicalid')}: segments must be reassembled first "
                                "(debezium_bridge.formats.ces.decode.CesAssembler)")
        operation = doc.get("operation")
        op = _OPS.get(operation) if isinstance(operation, str) else None
        if op is None:
            raise EnvelopeError(f"unknown CES operation {operation!r:.20}")
        data = parse_data(doc)
        source = data["eventsource"]
        row_data = data["eventrow"]
        db, schema, table = source.get("db"), source.get("schema"), source.get("tbl")
        if not all(isinstance(x, str) for x in (db, schema, table)):
            raise EnvelopeError("CES eventsource lacks db/schema/tbl")
        table_ref = TableRef(db, schema, table)
        listed = self._columns(source.get("cols"))
        columns = self._table_columns(table_ref, listed, operation == "UPD")
        unlisted = frozenset(c.name for c in columns) - {c.name for c in listed}
        rows = self._rows_for(columns, unlisted)
        if self.catalog is not None and columns:
            self.catalog.add(table_ref, columns)
        # transaction
        transaction = source.get("transaction")
        lid_commit, lid_sequence = _logical_id_parts(doc.get("logicalid"))
        commit = begin = None
        sequence = lid_sequence
        if isinstance(transaction, dict):
            commit = transaction.get("commitlsn")
            begin = transaction.get("beginlsn")
            if isinstance(transaction.get("sequencenumber"), int):
                sequence = transaction["sequencenumber"]
        commit = commit or lid_commit
        if not isinstance(commit, str) or sequence is None:
            raise EnvelopeError("CES event without commit LSN and sequence number "
                                "(neither transaction nor logicalid)")
        if sequence < 1:
            raise EnvelopeError(f"CES sequencenumber {sequence} < 1")
        try:
            commit_text = normalize_lsn(commit)[1]
            begin_text = normalize_lsn(begin)[1] if isinstance(begin, str) else None
        except LsnFormatError as exc:
            raise EnvelopeError(str(exc)) from exc
        time = doc.get("time")
        if not isinstance(time, str) and isinstance(transaction, dict):
            time = transaction.get("committime")
        ts_ms = epoch_ms(time) if isinstance(time, str) else None
        # images and key
        old = parse_row(row_data.get("old"))
        current = parse_row(row_data.get("current"))
        key = self._key(source.get("pkkey") or [], rows)
        if unlisted & key.keys():  # an unlisted key column did not change: pkkey has it
            texts = {item["columnname"]: item.get("value") for item in source["pkkey"]}
            same = {name: texts[name] for name in unlisted & key.keys()}
            old = None if old is None else same | old
            current = None if current is None else same | current
        half = record.header(HALF_HEADER)
        old_key = None
        if old and key:
            old_key = {name: rows.value(name, old.get(name)) for name in key}
            if any(name not in old for name in key):
                old_key = None
        if op == "u" and old_key is not None and old_key != key and half is None:
            raise EnvelopeError("CES UPD changes the primary key: it must pass "
                                "debezium_bridge.formats.ces.decode.CesAssembler (which splits it "
                                "into its delete and create halves)")
        if op == "u" and half == b"delete":
            op, current, key = "d", None, old_key or key
        elif op == "u" and half == b"create":
            op, old = "c", None
        if op == "c":
            old = None  # an INS has no before image (a non-conformant "old" is ignored)
        elif op == "d":
            current = None
        table_id = f"{db}.{schema}.{table}"
        change = synthetic_change_lsn(sequence)
        serial = 2 if half == b"create" and op == "c" else _SERIALS[op]  # key change: 1 and 2
        envelope = Envelope(
            before=old, after=current,
            source=Source(version=None, connector="sqlserver", name=self.options.source_name,
                          ts_ms=ts_ms, snapshot="false", db=db, schema=schema, table=table,
                          change_lsn=change, commit_lsn=commit_text, event_serial_no=serial),
            op=op, ts_ms=None,
            transaction=Transaction(id=commit_text or "", total_order=sequence,
                                    data_collection_order=self._order(commit_text or "",
                                                                      table_id, sequence)))
        event = build_event(envelope, record, key, rows, None, rows.names or None)
        if isinstance(event, ChangeEvent):
            event.unordered = True
            if event.tx is not None and begin_text:
                tx = event.tx
                event.tx = TxRef(tx.id, tx.total_order, tx.data_collection_order, begin_text)
        return event

    def _columns(self, cols: Any) -> tuple[CatalogColumn, ...]:
        if not isinstance(cols, list):
            return ()
        out = []
        for position, col in enumerate(cols):
            if not isinstance(col, dict) or not isinstance(col.get("name"), str):
                raise EnvelopeError("CES cols entry without a name")
            index = col.get("index")
            out.append(CatalogColumn(col["name"], str(col.get("type") or "nvarchar(max)").lower(),
                                 index if isinstance(index, int) else position))
        return tuple(out)

    def _table_columns(self, table: TableRef, listed: tuple[CatalogColumn, ...],
                       update: bool) -> tuple[CatalogColumn, ...]:
        """The table's columns for an event listing ``listed``. A ``UPD`` listing a strict subset
        (same names, types and indices) of the table version last seen was written with
        ``@include_all_columns = 0`` ("only includes columns that have changed"): that version's
        columns. Any other ``cols`` is the table's current version."""
        known = self._tables.get(table)
        if update and listed and known is not None and set(listed) < set(known):
            return known
        if listed:
            if len(self._tables) > 4096:
                self._tables.clear()
            self._tables[table] = listed
        return listed

    def _rows_for(self, columns: tuple[CatalogColumn, ...], unlisted: frozenset[str]
                  ) -> _CesRows:
        cache_key = (columns, unlisted, self.options.absent_columns)
        rows = self._rows.get(cache_key)
        if rows is None:
            if len(self._rows) > 4096:
                self._rows.clear()
            rows = self._rows[cache_key] = _CesRows(
                columns, self.options.absent_columns == "unavailable", unlisted)
        return rows

    @staticmethod
    def _key(pkkey: Any, rows: _CesRows) -> dict[str, Any]:
        if not isinstance(pkkey, list):
            raise EnvelopeError("CES pkkey is not an array")
        key: dict[str, Any] = {}
        for item in pkkey:
            if not isinstance(item, dict) or not isinstance(item.get("columnname"), str):
                raise EnvelopeError("CES pkkey entry without columnname")
            key[item["columnname"]] = rows.value(item["columnname"], item.get("value"))
        return key

    def _order(self, commit: str, table_id: str, sequence: int) -> int:
        """Derived ``data_collection_order``: ordinal of the event among the events of the same
        transaction and table seen so far (a re-sent event keeps its number)."""
        tables = self._orders.get(commit)
        if tables is None:
            tables = self._orders[commit] = {}
            if len(self._orders) > 4096:
                self._orders.popitem(last=False)
        seen = tables.setdefault(table_id, {})
        order = seen.get(sequence)
        if order is None:
            order = seen[sequence] = len(seen) + 1
        return order


def data_of_event(value: bytes) -> dict[str, Any]:
    """Envelope + parsed data of one whole event (tests and tools)."""
    doc = parse_envelope(value)
    out = dict(doc)
    out["data"] = parse_data(doc)
    if isinstance(doc.get("data"), bytes):
        out["data_base64"] = base64.b64encode(doc["data"]).decode()
    return out
