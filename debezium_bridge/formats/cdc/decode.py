"""Change-table rows → the events the SQL Server connector emits for them.

This is what ``SqlServerStreamingChangeEventSource#executeIteration`` does with the rows of
``cdc.fn_cdc_get_all_changes_<ci>(from, to, N'all update old')`` (function mode) or of
``cdc.<ci>_CT`` (direct mode), rule by rule (docs/cdc.md):

1. **Order.** Rows are ordered by ``__$start_lsn``, ``__$command_id`` (when the export has it,
   as direct mode orders), ``__$seqval``, ``__$operation``. Rows are read one transaction
   (``__$start_lsn``) at a time per capture instance: any order inside a transaction, but a row
   whose ``__$start_lsn`` is below one already passed is a dead letter (stage ``cdc-order``),
   unless ``cdc.sort_input`` sorts everything first. Tables are merged by
   ``(__$start_lsn, __$seqval)``, as the connector merges its change-table cursors. Events are
   numbered in that order and handed on in position order (``__$command_id`` order need not
   follow ``__$seqval``; the translator would take a lower position for a replay).
2. **Pairing.** A row 3 (update, old values) and the row 4 that follows it at the same
   ``(__$start_lsn, __$seqval)`` are one update; a 3 without its 4, or a 4 without its 3, is a
   dead letter (stage ``cdc-pairing``; the connector fails its task there). 1 is a delete, 2 an
   insert. Any other ``__$operation`` is a dead letter (stage ``cdc-row``). With
   ``cdc.row_filter=all`` a lone 4 is an update without a before image.
3. **event_serial_no** as ``SqlServerOffsetContext#setChangePosition`` counts: the number of
   change-table rows consumed so far at the same ``(commit_lsn, change_lsn)`` — an insert or a
   delete counts 1, an update pair 2 — restarting at a new position. So an insert is 1, an
   update 2, and a key change logged as rows 1 + 2 at one ``__$seqval`` is a delete 1 and an
   insert 2. ``change_lsn`` is ``__$seqval`` (of the 4 row for an update), ``commit_lsn`` is
   ``__$start_lsn``.
4. **Key changes.** Rows 1 + 2 at one position are a delete and an insert (the translator
   pairs them into one update with ``key_changed``). An update pair whose key columns differ is
   emitted as the connector's ``emitUpdateAsPrimaryKeyChangeRecord`` does: a delete of the old
   key and an insert of the new, both with the pair's serial, each naming the other's key (the
   ``__debezium.newkey``/``oldkey`` headers; noted in a
   :class:`~debezium_bridge.formats.debezium.writer.KeyChangeLedger` for Debezium output).
5. **Values** go through the connector's own Connect conversion (``sql_value_encoder``) and
   back (``RowDecoder``), so they equal what a Debezium decoder reads from the connector's
   envelope. A ``varchar(max)``/``nvarchar(max)``/``varbinary(max)`` column (and ``text``,
   ``ntext``, ``image``, ``xml``: the types the JDBC driver reports as LONG*) that is NULL in an
   update row while its update-mask bit is 0 was not changed and not sent
   (``SqlServerChangeTablePointer``: the unavailable placeholder from 3.6): it is listed in
   ``unavailable_columns``, never a NULL value. A column whose type is not described is not
   taken for a LOB: its NULL is a value.
6. **changed_columns** of an update are the captured columns whose bit is set in
   ``__$update_mask`` (bit *n* = ``column_ordinal`` *n*, the lowest bit of the last byte first,
   as ``sys.fn_cdc_is_bit_set`` reads it). A mask that is not hex/base64, that sets bits beyond
   the captured columns, that differs between the 3 and 4 rows of an update, or that does not
   set every bit of an insert or a delete (the documents say they always do) is a dead letter
   (stage ``cdc-mask``).
7. **Capture instances of one table.** The older of two capture instances of one source table
   is read up to the newer one's ``start_lsn`` (``getChangeTablesToQuery``); its rows from
   there on hold changes the newer one has, and count as duplicates.
8. **Duplicates.** A row repeated with the same ``(__$start_lsn, __$command_id, __$seqval,
   __$operation)`` and identical fields (overlapping exports) is dropped and counted as a
   duplicate; a copy with different fields is a dead letter (stage ``cdc-duplicate``). This
   holds for a transaction already translated too, among the last ``REMEMBERED_ROWS`` rows
   (beyond them, a row going back is a ``cdc-order`` dead letter).
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import msgspec

from debezium_bridge.errors import RowError, SchemaError, ValueConversionError
from debezium_bridge.formats.cdc import values as cells
from debezium_bridge.formats.cdc.catalog import CapturedColumn, CaptureInstance, LsnTimes
from debezium_bridge.formats.cdc.rows import (
    COMMAND_ID,
    OPERATION,
    SEQVAL,
    START_LSN,
    TIME_COLUMNS,
    UPDATE_MASK,
    CdcRow,
)
from debezium_bridge.formats.cdc.settings import CdcSettings
from debezium_bridge.formats.debezium.envelope import key_identity
from debezium_bridge.formats.debezium.logical import RowDecoder
from debezium_bridge.formats.debezium.sqltypes import (
    DEFAULT_MODES,
    UNAVAILABLE_VALUE,
    column_spec,
    connect_column,
    sql_value_encoder,
)
from debezium_bridge.formats.debezium.writer import KeyChangeLedger
from debezium_bridge.model.change import (
    ChangeEvent,
    PositionRef,
    SourceRef,
    TableRef,
    TxRef,
    seq_of,
)
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.lsn import format_lsn
from debezium_bridge.model.records import RawRecord
from debezium_bridge.model.schema import TableSchema

__all__ = ["CdcDecoder", "EventSink", "mask_columns", "mask_of", "prepare"]

DELETE, INSERT, UPDATE_OLD, UPDATE_NEW = 1, 2, 3, 4
REMEMBERED_ROWS = 100_000
"""Rows of translated transactions remembered (as hashes of their identity and fields), so that
the same row again in an overlapping export is known for a duplicate."""
_LOB_BASES = frozenset({"text", "ntext", "image", "xml"})
"""Types the SQL Server JDBC driver reports as LONGVARCHAR/LONGNVARCHAR/LONGVARBINARY, like the
``(max)`` types (``SqlServerDatabaseSchema#isMaxColumnJdbcType``)."""


class EventSink(Protocol):
    """Where decoded events go (the translator): ``records`` input rows made ``event``."""

    def process_event(self, event: ChangeEvent, records: int = 1) -> None: ...
    def process_events(self, events: Iterable[tuple[ChangeEvent, int]]) -> None: ...
    def reject(self, dead_letter: DeadLetter) -> None: ...
    def drop_duplicate(self, records: int = 1) -> None: ...


# --------------------------------------------------------------------------- update masks

def mask_bit(mask: bytes, ordinal: int, order: str = "sql-server") -> bool:
    """Whether the bit of ``column_ordinal`` ``ordinal`` (1-based) is set.

    ``sql-server``: ``sys.fn_cdc_is_bit_set`` (bit 1 = lowest bit of the last byte).
    ``debezium``: ``SqlServerChangeTablePointer#isColumnChanged`` (bit 1 = lowest bit of the
    first byte; a mask too short says "changed")."""
    index = ordinal - 1
    if order == "debezium":
        byte = index // 8
        if byte >= len(mask):
            return True
        return bool(mask[byte] & (1 << (index % 8)))
    byte = len(mask) - 1 - index // 8
    if byte < 0:
        return False
    return bool(mask[byte] & (1 << (index % 8)))


def mask_of(ordinals: Iterable[int]) -> bytes:
    """The update mask with the bits of ``ordinals`` set, ``ceil(n / 8)`` bytes for the highest
    ordinal *n* (as SQL Server sizes it for *n* captured columns)."""
    ordinals = list(ordinals)
    top = max(ordinals, default=0)
    value = 0
    for ordinal in ordinals:
        value |= 1 << (ordinal - 1)
    return value.to_bytes(max(1, (top + 7) // 8), "big")


def mask_columns(mask: bytes, columns: Iterable[CapturedColumn]) -> list[str]:
    """Names of the columns whose bit is set (``sys.fn_cdc_is_bit_set`` order)."""
    return [c.name for c in columns if mask_bit(mask, c.ordinal)]


# --------------------------------------------------------------------------- tables

class _Column(msgspec.Struct, gc=False):
    name: str
    ordinal: int
    parse: Callable[[Any, str], Any]
    encode: Callable[[Any], Any]
    lob: bool
    placeholder: Any
    """The Connect value of "not sent" (the unavailable placeholder, text or bytes)."""


def _parser(base: str) -> Callable[[Any, str], Any]:
    if base == "bit":
        return lambda v, _p: cells.bit(v)
    if base in ("tinyint", "smallint", "int", "bigint"):
        return lambda v, _p: cells.integer(v)
    if base in ("decimal", "numeric", "money", "smallmoney"):
        return lambda v, _p: cells.decimal_text(v)
    if base in ("float", "real"):
        return lambda v, _p: cells.floating(v)
    if base in ("binary", "varbinary", "image", "timestamp", "rowversion"):
        return cells.binary_base64
    if base == "date":
        return lambda v, _p: cells.date_text(v)
    if base == "time":
        return lambda v, _p: cells.time_text(v)
    if base in ("datetime", "smalldatetime", "datetime2"):
        return lambda v, _p: cells.timestamp_text(v)
    if base == "datetimeoffset":
        return lambda v, _p: cells.offset_text(v)
    return lambda v, _p: cells.text(v)


class PreparedTable:
    """One capture instance, compiled: value converters in the connector's column order."""

    def __init__(self, instance: CaptureInstance, settings: CdcSettings) -> None:
        self.instance = instance
        db = settings.database if settings.database is not None else instance.table.db
        self.table = TableRef(db, instance.table.schema, instance.table.name)
        self.table_id = self.table.table_id
        self.ordinals = {c.name: c.ordinal for c in instance.columns}
        self.dropped: list[str] = []
        by_name = {c.name: c for c in instance.columns}
        columns: list[_Column] = []
        connect = []
        for name in instance.value_order:
            captured = by_name[name]
            sql = captured.sql_column
            try:
                spec = column_spec(sql)
                connect.append(connect_column(sql, DEFAULT_MODES))
            except SchemaError:
                self.dropped.append(name)  # the connector drops columns it cannot map
                continue
            encode = sql_value_encoder(sql, DEFAULT_MODES)
            # MS-CT: only LOB columns are left NULL when an update did not change them; a
            # column of unknown type (sp_cdc_help_change_data_capture) is not taken for one
            lob = captured.sql_type is not None and (spec.length == -1
                                                     or spec.base in _LOB_BASES)
            columns.append(_Column(name, captured.ordinal, _parser(spec.base), encode, lob,
                                   encode(UNAVAILABLE_VALUE) if lob else None))
        self.columns = columns
        self.names = tuple(c.name for c in columns)
        self.key_columns = tuple(k for k in instance.key_columns if k in self.names)
        self.decoder = RowDecoder(TableSchema(f"{self.table_id}.Value", tuple(connect)))
        self.has_lob = any(c.lob for c in columns)
        self.width = len(instance.columns)
        self.all_bits = mask_of(range(1, self.width + 1))
        self.stop_lsn: bytes | None = None
        """The ``start_lsn`` of the table's next capture instance: rows from there on are read
        from that one."""


def prepare(instances: Mapping[str, CaptureInstance], settings: CdcSettings
            ) -> dict[str, PreparedTable]:
    """Compiled tables by capture-instance name. Of two capture instances of one table, the
    older stops at the newer's ``start_lsn`` (``getChangeTablesToQuery``:
    ``currentTable.setStopLsn(futureTable.getStartLsn())``; an unknown ``start_lsn`` sorts
    lowest, as ``Lsn#compareTo`` sorts NULL)."""
    tables = {name: PreparedTable(i, settings) for name, i in instances.items()}
    by_source: dict[str, list[PreparedTable]] = {}
    for table in tables.values():
        by_source.setdefault(table.table_id, []).append(table)
    for same in by_source.values():
        same.sort(key=lambda t: t.instance.start_lsn or b"")
        for older, newer in itertools.pairwise(same):
            older.stop_lsn = newer.instance.start_lsn
    return tables


# --------------------------------------------------------------------------- rows

class _Row(msgspec.Struct, gc=False):
    """One parsed row: its position, operation, mask, time and Connect values."""

    source: CdcRow
    start: bytes
    seqval: bytes
    op: int
    mask: bytes | None
    command_id: int | None
    time_ms: int | None
    values: dict[str, Any]
    """Connect values (placeholders for LOB columns that were not sent)."""

    @property
    def order(self) -> tuple[int, bytes, int]:
        return (self.command_id or 0, self.seqval, self.op)

    @property
    def digest(self) -> int:
        """A hash of the row's fields, in any column order (equal as the fields compare)."""
        fields = self.source.fields
        try:
            return hash(frozenset(fields.items()))
        except TypeError:  # a JSON array or object in a value
            return hash(_FIELDS.encode(sorted(fields.items(), key=lambda kv: kv[0])))

    def identity(self, instance: str) -> int:
        """A hash of the row's place in the change table of ``instance``."""
        return hash((instance, self.start, self.order))


class _Unit(msgspec.Struct, gc=False):
    """What the connector dispatches at once: one row, or an update pair."""

    rows: tuple[_Row, ...]
    table: PreparedTable
    op: int
    """1, 2, or 4 for an update (its old row first when there is one)."""

    @property
    def seqval(self) -> bytes:
        return self.rows[-1].seqval


class _Fields:
    """A row's fields by column name: the exact name, else the first field in row order whose
    name is equal ignoring case (exports may change the case of column names)."""

    __slots__ = ("_fields", "_folded")

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self._fields = fields
        self._folded: dict[str, Any] | None = None

    def get(self, name: str) -> Any:
        fields = self._fields
        if name in fields:
            return fields[name]
        folded = self._folded
        if folded is None:
            # folded once, on the row's first miss: scanning the row per missing column was
            # quadratic (20k columns: 200M str.lower calls)
            folded = self._folded = {}
            for key, value in fields.items():
                folded.setdefault(key.lower(), value)  # the first in row order, as the scan
        return folded.get(name.lower())


class _Stream:
    """Per capture instance: the open transaction, the serial counter."""

    __slots__ = ("buffer", "current", "position", "serial", "table")

    def __init__(self, table: PreparedTable) -> None:
        self.table = table
        self.current: bytes | None = None
        self.buffer: list[_Row] = []
        self.position: tuple[bytes, bytes] | None = None
        self.serial = 0


_FIELDS = msgspec.json.Encoder(decimal_format="number")


def _different_copy(row: _Row) -> RowError:
    return RowError(f"a second, different row at __$start_lsn {format_lsn(row.start)} "
                    f"__$seqval {format_lsn(row.seqval)} __$operation {row.op}",
                    stage="cdc-duplicate")


def _raw_record(row: CdcRow, time_ms: int | None = None) -> RawRecord:
    return RawRecord(row.source, 0, row.line, time_ms, None, row.raw)


class CdcDecoder:
    """Turns change-table rows into connector events for an :class:`EventSink` (module
    docstring). Feed rows with :meth:`feed`, call :meth:`flush` at the end of the input."""

    def __init__(self, instances: Mapping[str, CaptureInstance], sink: EventSink,
                 settings: CdcSettings | None = None, lsn_times: LsnTimes | None = None,
                 ledger: KeyChangeLedger | None = None) -> None:
        self.settings = settings or CdcSettings()
        self.sink = sink
        self.tables = prepare(instances, self.settings)
        self.lsn_times = lsn_times
        self.ledger = ledger
        s = self.settings
        self.source = SourceRef("sqlserver", s.topic_prefix, s.connector_version)
        self._sort_all = s.sort_input or s.transaction_metadata
        self._streams: dict[str, _Stream] = {}
        self._tx: dict[bytes, tuple[int, dict[str, int]]] = {}
        self._translated: OrderedDict[int, int] = OrderedDict()
        """Identity → digest of the rows of translated transactions, the last
        :data:`REMEMBERED_ROWS` (hashes: a collision can only make a dead letter's stage
        ``cdc-duplicate`` rather than ``cdc-order``)."""
        self._offset = s.offset_minutes
        self._time_fields = (("tran_begin_time", "__$tran_begin_time")
                             if s.source_time == "tran_begin_time"
                             else ("__$commit_time", "tran_end_time", "__$tran_end_time"))

    # -- input ----------------------------------------------------------------------------
    def feed(self, row: CdcRow, instance: str) -> None:
        """One exported row of capture instance ``instance``."""
        table = self.tables[instance]
        try:
            parsed = self._parse(row, table)
        except (RowError, ValueConversionError, SchemaError) as exc:
            self._reject(row, exc)
            return
        if table.stop_lsn is not None and parsed.start >= table.stop_lsn:
            self.sink.drop_duplicate()  # the newer capture instance has this change
            return
        stream = self._streams.get(instance)
        if stream is None:
            stream = self._streams[instance] = _Stream(table)
        if self._sort_all:
            stream.buffer.append(parsed)
            return
        current = stream.current
        if current is None or parsed.start == current:
            stream.current = parsed.start
            stream.buffer.append(parsed)
        elif parsed.start > current:
            self._close({instance: stream})
            stream.current = parsed.start
            stream.buffer.append(parsed)
        else:
            self._gone_back(parsed, instance, current)

    def _gone_back(self, parsed: _Row, instance: str, current: bytes) -> None:
        """A row of a transaction before the open one: a repeat of a translated row (an
        overlapping export) is a duplicate, or a different copy of it; anything else is out of
        order."""
        digest = self._translated.get(parsed.identity(instance))
        if digest == parsed.digest:
            self.sink.drop_duplicate()
        elif digest is not None:
            self._reject(parsed.source, _different_copy(parsed))
        else:
            self._reject(parsed.source, RowError(
                f"__$start_lsn {format_lsn(parsed.start)} after {format_lsn(current)}: rows must "
                "come in __$start_lsn order (export with ORDER BY __$start_lsn, or set "
                "cdc.sort_input)", stage="cdc-order"))

    def flush(self) -> None:
        """End of input: translate what is buffered."""
        if not self._sort_all:
            for name, stream in self._streams.items():
                if stream.buffer:
                    self._close({name: stream})
            return
        # everything was buffered: one transaction at a time, tables merged
        by_commit: dict[bytes, dict[str, list[_Row]]] = {}
        for name, stream in self._streams.items():
            for parsed in stream.buffer:
                by_commit.setdefault(parsed.start, {}).setdefault(name, []).append(parsed)
            stream.buffer = []
        for commit in sorted(by_commit):
            groups = by_commit.pop(commit)
            for name, rows in groups.items():
                self._streams[name].buffer = rows
            self._close({name: self._streams[name] for name in groups})
            self._tx.pop(commit, None)

    # -- parsing --------------------------------------------------------------------------
    def _parse(self, row: CdcRow, table: PreparedTable) -> _Row:
        fields = row.fields
        named = _Fields(fields)
        prefer = self.settings.binary_text
        if prefer == "auto":
            prefer = "base64" if row.json else "hex"
        start_text = named.get(START_LSN)
        seqval_text = named.get(SEQVAL)
        if start_text is None or seqval_text is None:
            raise RowError(f"{START_LSN if start_text is None else SEQVAL} is NULL (the "
                           "connector skips such rows with an error)")
        try:
            start = cells.lsn_of(start_text, prefer)
            seqval = cells.lsn_of(seqval_text, prefer)
        except ValueConversionError as exc:
            raise RowError(f"bad LSN: {exc.message}") from None
        op_value = named.get(OPERATION)
        try:
            op = cells.integer(op_value)
        except ValueConversionError:
            op = -1
        if op not in (DELETE, INSERT, UPDATE_OLD, UPDATE_NEW):
            raise RowError(f"unknown __$operation {op_value!r:.20} (1 delete, 2 insert, 3/4 "
                           "update old/new)")
        mask_value = named.get(UPDATE_MASK)
        mask = None
        if mask_value is not None and mask_value != "":
            try:
                mask = cells.binary_of(mask_value, prefer)
            except ValueConversionError as exc:
                raise RowError(f"update mask: {exc.message}", stage="cdc-mask") from None
            self._check_mask(mask, op, table)
        command = named.get(COMMAND_ID)
        try:
            command_id = None if command in (None, "") else cells.integer(command)
        except ValueConversionError as exc:
            raise RowError(f"{COMMAND_ID}: {exc.message}") from None
        time_ms = self._time(named, start)
        values: dict[str, Any] = {}
        lob_mask = mask if table.has_lob and op in (UPDATE_OLD, UPDATE_NEW) else None
        order = self.settings.lob_mask_order
        for column in table.columns:
            cell = fields.get(column.name, _ABSENT)
            if cell is _ABSENT:
                cell = named.get(column.name)
            if cell is None:
                if lob_mask is not None and column.lob \
                        and not mask_bit(lob_mask, column.ordinal, order):
                    values[column.name] = column.placeholder
                else:
                    values[column.name] = None
                continue
            try:
                values[column.name] = column.encode(column.parse(cell, prefer))
            except ValueConversionError as exc:
                raise ValueConversionError(f"column {column.name!r}: {exc.message}") from None
            except (ValueError, TypeError, OverflowError) as exc:
                raise ValueConversionError(f"column {column.name!r}: {exc}") from None
        return _Row(row, start, seqval, op, mask, command_id, time_ms, values)

    def _check_mask(self, mask: bytes, op: int, table: PreparedTable) -> None:
        width = table.width
        value = int.from_bytes(mask, "big")
        if value >> width:
            raise RowError(f"update mask 0x{mask.hex().upper()} sets bits beyond the "
                           f"{width} captured columns", stage="cdc-mask")
        if op in (DELETE, INSERT) and value != (1 << width) - 1:
            raise RowError(f"update mask 0x{mask.hex().upper()} of an "
                           f"{'insert' if op == INSERT else 'delete'} does not set every "
                           "column's bit (inserts and deletes always set all)",
                           stage="cdc-mask")

    def _time(self, named: _Fields, start: bytes) -> int | None:
        for name in self._time_fields:
            value = named.get(name)
            if value is not None and value != "":
                return cells.server_time_ms(value, self._offset)
        if self.lsn_times is not None:
            return self.lsn_times.get(start, self.settings.source_time)
        for name in TIME_COLUMNS:  # the other time column is better than none
            value = named.get(name)
            if value is not None and value != "":
                return cells.server_time_ms(value, self._offset)
        return None

    # -- transactions ---------------------------------------------------------------------
    def _close(self, streams: Mapping[str, _Stream]) -> None:
        """Translate the buffered transaction of each stream (one commit LSN), tables merged
        by position as the connector merges its cursors."""
        unit_lists = []
        for name, stream in streams.items():
            rows, stream.buffer, stream.current = stream.buffer, [], None
            rows = self._deduplicated(rows)
            if not self._sort_all:  # sorted input never goes back
                self._remember(name, rows)
            unit_lists.append(self._units(rows, stream.table))
        if len(unit_lists) == 1:
            merged: Iterable[_Unit] = unit_lists[0]
        else:
            merged = heapq.merge(*unit_lists, key=lambda u: u.seqval)
        events: list[tuple[ChangeEvent, int]] = []
        for unit in merged:
            self._emit(unit, self._streams[unit.table.instance.name], events)
        # numbered in the connector's order; handed on in position order (direct mode's
        # __$command_id order need not follow __$seqval, and the translator takes a position
        # below its partition's mark for a replay)
        events.sort(key=lambda item: (item[0].sort_key, item[0].op != "d"))
        self.sink.process_events(events)

    def _remember(self, instance: str, rows: list[_Row]) -> None:
        translated = self._translated
        for row in rows:
            translated[row.identity(instance)] = row.digest
        while len(translated) > REMEMBERED_ROWS:
            translated.popitem(last=False)

    def _deduplicated(self, rows: list[_Row]) -> list[_Row]:
        rows.sort(key=lambda r: r.order)
        out: list[_Row] = []
        for row in rows:
            if out and out[-1].order == row.order:
                if dict(out[-1].source.fields) == dict(row.source.fields):
                    self.sink.drop_duplicate()
                else:
                    self._reject(row.source, _different_copy(row))
                continue
            out.append(row)
        return out

    def _units(self, rows: list[_Row], table: PreparedTable) -> list[_Unit]:
        units: list[_Unit] = []
        only_new = self.settings.row_filter == "all"
        i, n = 0, len(rows)
        while i < n:
            row = rows[i]
            if row.op == UPDATE_OLD:
                following = rows[i + 1] if i + 1 < n else None
                if only_new:
                    self._reject(row.source, RowError(
                        "an old-values row (3) in 'all' output (cdc.row_filter)",
                        stage="cdc-pairing"))
                    i += 1
                elif following is None or following.op != UPDATE_NEW \
                        or following.seqval != row.seqval:
                    self._reject(row.source, RowError(
                        f"update old values (3) at {format_lsn(row.start)}"
                        f"({format_lsn(row.seqval)}) not followed by its new values (4): "
                        "the connector fails here ('was not followed by after event')",
                        stage="cdc-pairing"))
                    i += 1
                elif following.mask != row.mask:
                    message = (f"the update's rows 3 and 4 at {format_lsn(row.start)}"
                               f"({format_lsn(row.seqval)}) have different update masks")
                    self._reject(row.source, RowError(message, stage="cdc-mask"))
                    self._reject(following.source, RowError(message, stage="cdc-mask"))
                    i += 2
                else:
                    units.append(_Unit((row, following), table, UPDATE_NEW))
                    i += 2
            elif row.op == UPDATE_NEW:
                if only_new:
                    units.append(_Unit((row,), table, UPDATE_NEW))
                else:
                    self._reject(row.source, RowError(
                        f"update new values (4) at {format_lsn(row.start)}"
                        f"({format_lsn(row.seqval)}) without its old values (3)",
                        stage="cdc-pairing"))
                i += 1
            else:
                units.append(_Unit((row,), table, row.op))
                i += 1
        return units

    # -- events ---------------------------------------------------------------------------
    def _emit(self, unit: _Unit, stream: _Stream,
              events: list[tuple[ChangeEvent, int]]) -> None:
        last = unit.rows[-1]
        # SqlServerOffsetContext#setChangePosition: rows consumed at this position
        count = 2 if unit.op == UPDATE_NEW else 1
        position = (last.start, last.seqval)
        stream.serial = stream.serial + count if position == stream.position else count
        stream.position = position
        serial = stream.serial
        table = unit.table
        decode = table.decoder.decode
        if unit.op == UPDATE_NEW:
            old = unit.rows[0] if len(unit.rows) == 2 else None
            before, gone_before = decode(dict(old.values)) if old is not None else (None, ())
            after, gone_after = decode(dict(last.values))
            gone_set = set(gone_before)  # membership in the tuple was quadratic in its width
            unavailable = gone_before + tuple(c for c in gone_after if c not in gone_set)
            mask = last.mask
            changed = (None if mask is None else
                       tuple(c for c in table.names if mask_bit(mask, table.ordinals[c])))
            new_key = self._key(table, after)
            old_key = self._key(table, before) if before is not None else new_key
            if old_key != new_key:
                events += self._key_change(unit, serial, before, after, old_key, new_key,
                                           unavailable, changed)
                return
            event = self._event(last, table, "u", new_key, before, after, unavailable, serial,
                                changed)
            events.append((event, len(unit.rows)))
            return
        values, unavailable = decode(dict(last.values))
        if unit.op == DELETE:
            event = self._event(last, table, "d", self._key(table, values), values, None,
                                unavailable, serial, None)
        else:
            event = self._event(last, table, "c", self._key(table, values), None, values,
                                unavailable, serial, None)
        events.append((event, 1))

    def _key_change(self, unit: _Unit, serial: int, before: dict[str, Any] | None,
                    after: dict[str, Any], old_key: dict[str, Any], new_key: dict[str, Any],
                    unavailable: tuple[str, ...], changed: tuple[str, ...] | None
                    ) -> list[tuple[ChangeEvent, int]]:
        old_row, new_row = unit.rows
        table = unit.table
        d = self._event(new_row, table, "d", old_key, before, None, unavailable, serial, changed,
                        partner=new_key, record_row=old_row)
        c = self._event(new_row, table, "c", new_key, None, after, unavailable, serial, changed,
                        partner=old_key)
        if self.ledger is not None:
            self.ledger.add(table.table_id, c.seq, old_key, new_key)
        return [(d, 1), (c, 1)]

    @staticmethod
    def _key(table: PreparedTable, image: dict[str, Any] | None) -> dict[str, Any]:
        if image is None:
            return {}
        return {k: image.get(k) for k in table.key_columns}

    def _event(self, row: _Row, table: PreparedTable, op: str, key: dict[str, Any],
               before: dict[str, Any] | None, after: dict[str, Any] | None,
               unavailable: tuple[str, ...], serial: int, changed: tuple[str, ...] | None,
               partner: dict[str, Any] | None = None, record_row: _Row | None = None
               ) -> ChangeEvent:
        sort_key = (row.start, row.seqval, serial)
        tx = None
        if self.settings.transaction_metadata:
            total, per_table = self._tx.setdefault(row.start, (0, {}))
            per_table[table.table_id] = per_table.get(table.table_id, 0) + 1
            self._tx[row.start] = (total + 1, per_table)
            tx = TxRef(format_lsn(row.start) or "", total + 1, per_table[table.table_id])
        source_row = (record_row or row).source
        return ChangeEvent(
            _raw_record(source_row, row.time_ms),
            table.table,
            op,
            key,
            key_identity(key),
            before,
            after,
            unavailable,
            sort_key,
            PositionRef(format_lsn(row.start), format_lsn(row.seqval), serial),
            row.time_ms,
            None,
            "false",
            tx,
            self.source,
            table.names,
            None if partner is None else key_identity(partner),
            table.table_id,
            seq_of(sort_key),
            changed,
        )

    def _reject(self, row: CdcRow, error: Exception) -> None:
        self.sink.reject(DeadLetter.of(error, _raw_record(row)))


_ABSENT: Any = object()
