"""Canonical change records → SQL Server 2025 CES CloudEvents (``com.microsoft.SQL.CES.DML.V1``).

Field by field (docs/ces.md; options in
:class:`~debezium_bridge.formats.ces.options.CesOptions`):

* The 11 attributes in the documented order: ``specversion`` ``"1.0"``, ``type``, ``source``
  ``"/"``, ``id``, ``logicalid``, ``time``, ``datacontenttype``, ``operation``,
  ``segmentindex``, ``finalsegment``, ``data``.
* ``operation``: insert → ``INS``, snapshot read → ``INS`` (or dropped), update → ``UPD``,
  delete → ``DEL``. A merged primary-key change is one ``UPD`` whose ``old`` is the row under
  the old key and whose ``pkkey`` is the new key, or ``DEL`` + ``INS``. Truncates are dropped
  (CES forbids TRUNCATE on streamed tables) and counted.
* ``time`` and ``transaction.committime``: the record's ``commit_ts`` (Debezium's
  ``source.ts_ms``, true UTC with 3 fraction digits; CES itself writes local time with ``Z`` on
  non-UTC servers).
* ``transaction.commitlsn``: the commit LSN in upper case. ``beginlsn``: the record's own
  (CES input) or derived per ``begin_lsn`` (Debezium knows no begin LSN). ``sequencenumber``:
  ``tx.total_order`` when Debezium's transaction block is present (exact), else **derived**: the
  1-based ordinal of the event among the consecutive records with the same commit LSN that this
  encoder saw (exact when whole transactions pass through one encoder in position order, as the
  translator releases them; a merged key change counts once, or twice as DEL + INS). CES
  input written with ``key_changes=delete-insert``: doubled (:meth:`CesEncoder._spread`).
  ``finalevent``: ``false`` ("always false" in the documentation).
* ``logicalid``: ``<guid>:<commit LSN, 20 upper-case hex digits>:<sequencenumber, 20 digits>``.
* ``cols``: the table's columns with SQL types (:mod:`debezium_bridge.formats.columns`); ``pkkey``:
  the key columns (record key order) with their values as strings; ``old``/``current``: compact
  JSON texts of ``{column: string | null}`` (``"{}"`` where there is no image).
* Unchanged LOB columns (Debezium's unavailable placeholder) are left out of ``old``/``current``
  (CES would have sent the value; Debezium did not).
* Segmentation: an event whose serialized envelope exceeds ``max_message_size_kb`` is split into
  segments that share ``logicalid``, each a complete event with its own ``id``, ``segmentindex``
  counting from ``segment_index_base``, ``finalsegment`` true on the last one. JSON: the escaped
  ``data`` text is cut at escape and character boundaries (never inside a UTF-8 sequence, an
  escape sequence or a surrogate pair), so each segment's ``data`` is a valid JSON string and
  their concatenation is the whole ``data``. Avro: the ``Data`` bytes are cut.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import msgspec

from debezium_bridge.errors import EncodeError, RecordError
from debezium_bridge.formats.ces import avro as ces_avro
from debezium_bridge.formats.ces.envelope import CES_TYPE, SPEC_VERSION
from debezium_bridge.formats.ces.options import DEFAULT_OPTIONS, CesOptions
from debezium_bridge.formats.ces.render import Render, RenderStats, renderer
from debezium_bridge.formats.ces.segments import split_content
from debezium_bridge.formats.columns import (
    CatalogColumn,
    ColumnCatalog,
    Columns,
    record_column_names,
)
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.records import Header
from debezium_bridge.model.sqltype import parse_type

CONTENT_TYPE_HEADER = ("content-type", b"application/cloudevents+json; charset=UTF-8")
Encoding = Literal["json", "avro"]

ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "urn:debezium-bridge:ces:id")
"""Namespace of the deterministic segment ids: ``uuid5(ID_NAMESPACE, "<logicalid>:<index>")``."""
_ID_NS = ID_NAMESPACE.bytes
_INT32_MAX = 2**31 - 1
_SYNTHETIC_LSN_PREFIX = "00000000:"
"""Change LSNs in VLF 0 never occur in a log: the CES decoder uses them for CES input."""


def uuid5_text(name: str, namespace: bytes = _ID_NS) -> str:
    """``str(uuid.uuid5(UUID(bytes=namespace), name))``, about three times faster."""
    digest = bytearray(hashlib.sha1(namespace + name.encode()).digest()[:16])
    digest[6] = (digest[6] & 0x0F) | 0x50
    digest[8] = (digest[8] & 0x3F) | 0x80
    h = digest.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def default_logical_id_guid(source_name: str | None, db: str) -> str:
    """The default logicalid GUID, stable per database:
    ``uuid5(NAMESPACE_URL, "mssql://<source.name>/<db>")``."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"mssql://{source_name or ''}/{db}"))


class CesMessage(msgspec.Struct, frozen=True, gc=False):
    """One Kafka record to produce: key (per partition-key scheme), value (one event or
    segment), headers."""

    key: bytes | None
    value: bytes
    headers: tuple[Header, ...] = ()


@dataclass(slots=True)
class CesCounters:
    """What the encoder did. ``records_in = encoded + skipped_* + errors``."""

    records_in: int = 0
    encoded: int = 0
    events_out: int = 0
    segments_out: int = 0
    split_events: int = 0
    skipped_snapshot: int = 0
    skipped_truncate: int = 0
    skipped_other: int = 0
    errors: int = 0
    truncated_values: int = 0
    guessed_types: int = 0
    """Records whose column types were guessed (no schema with SQL types was registered)."""

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def summary(self) -> str:
        return (f"ces: records_in={self.records_in} encoded={self.encoded} "
                f"events_out={self.events_out} segments_out={self.segments_out} "
                f"split_events={self.split_events} skipped_snapshot={self.skipped_snapshot} "
                f"skipped_truncate={self.skipped_truncate} skipped_other={self.skipped_other} "
                f"errors={self.errors} truncated_values={self.truncated_values} "
                f"guessed_types={self.guessed_types}")


# --------------------------------------------------------------------------- JSON pieces


class _Json:
    """JSON serializers of one style (compact or pretty rows, raw UTF-8 or ASCII-only)."""

    def __init__(self, options: CesOptions) -> None:
        self.ascii = options.ascii_only
        self.pretty = options.inner_json == "pretty"
        self.slashes = options.escape_slashes
        encoder = msgspec.json.Encoder()
        self._encode = encoder.encode
        separators = (", ", ": ") if self.pretty else (",", ":")
        if self.ascii or self.pretty:
            dumps = json.JSONEncoder(ensure_ascii=self.ascii, separators=separators).encode
            self.row: Callable[[dict[str, Any]], bytes] = lambda row: dumps(row).encode()
            self.string: Callable[[str], bytes] = lambda text: json.dumps(
                text, ensure_ascii=self.ascii).encode()
        else:
            self.row = self._encode
            self.string = self._encode

    def slash(self, text: bytes) -> bytes:
        return text.replace(b"/", b"\\/") if self.slashes else text

    def embed(self, text: bytes) -> bytes:
        """JSON text (no raw control characters) → the content of a JSON string holding it."""
        return text.replace(b"\\", b"\\\\").replace(b'"', b'\\"')

    def embed_any(self, text: bytes) -> bytes:
        """Any UTF-8 text → JSON string content (escapes control characters too)."""
        if self.ascii:
            return json.dumps(text.decode("utf-8", "surrogatepass"), ensure_ascii=True)[1:-1]\
                .encode()
        return self._encode(text.decode("utf-8", "surrogatepass"))[1:-1]


# --------------------------------------------------------------------------- per-table plan


class _Plan:
    """Everything about one table version that does not change from record to record."""

    __slots__ = ("all_renders", "by_name", "cols_avro", "columns", "guessed", "lob", "old_renders",
                 "prefix", "renders")

    def __init__(self, record: ChangeRecord, columns: Columns, options: CesOptions,
                 js: _Json, stats: RenderStats, guessed: bool) -> None:
        self.columns = columns
        self.guessed = guessed
        renders: list[tuple[str, Render]] = []
        self.by_name: dict[str, tuple[CatalogColumn, Render]] = {}
        self.lob: set[str] = set()
        kept: list[CatalogColumn] = []
        for column in columns:
            sql_type = parse_type(column.type)
            render = renderer(sql_type, options, stats)
            self.by_name[column.name] = (column, render)
            if not sql_type.supported and options.unsupported_columns == "omit":
                continue
            kept.append(column)
            renders.append((column.name, render))
            if column.exact and sql_type.is_lob:
                self.lob.add(column.name)
        self.renders = tuple(renders)
        self.all_renders = self.renders
        self.old_renders = (self.renders if options.include_old_lob_values
                            else tuple(r for r in self.renders if r[0] not in self.lob))
        self.cols_avro = [{"name": c.name, "type": c.type, "index": c.index} for c in kept]
        table = record.table
        cols = b"[" + b",".join(
            b'{"name":' + js.string(c.name) + b',"type":' + js.string(c.type)
            + b',"index":' + str(c.index).encode() + b"}" for c in kept) + b"]"
        self.prefix = (b'{"eventsource":{"db":' + js.string(table.db) + b',"schema":'
                       + js.string(table.schema) + b',"tbl":' + js.string(table.name)
                       + b',"cols":' + cols + b',"pkkey":')


_Op = tuple[str, dict[str, Any] | None, dict[str, Any] | None, dict[str, Any], int]
"""(operation, old image, current image, key, sequence-number offset)."""


class CesEncoder:
    """Encodes canonical :class:`~debezium_bridge.model.change.ChangeRecord` s as CES events.

    Stateful (derived sequence numbers and begin LSNs follow the stream): feed records in the
    order the translator releases them, one encoder per output stream. Not thread-safe.
    """

    def __init__(self, options: CesOptions | None = None, catalog: ColumnCatalog | None = None,
                 *, encoding: Encoding = "json") -> None:
        self.options = options = options or DEFAULT_OPTIONS
        self.catalog = catalog if catalog is not None else ColumnCatalog()
        if encoding not in ("json", "avro"):
            raise ValueError(f"unknown CES encoding {encoding!r}")
        self.encoding = encoding
        self.counters = CesCounters()
        self._stats = RenderStats()
        self._js = _Json(options)
        self._plans: dict[tuple[str, tuple[str, ...], Columns], _Plan] = {}
        self._known: dict[tuple[str, tuple[str, ...]], _Plan] = {}
        """Plans of registered (not guessed) table versions, valid for ``_known_version``."""
        self._known_version = -1
        self._guids: dict[tuple[str | None, str], str] = {}
        self._seq_commit: str | None = None
        self._seq_last = 0
        self._begin_lsn: str | None = None
        self._earlier: OrderedDict[str, tuple[int, str | None]] = OrderedDict()
        """(last sequence number, lowest change LSN) of commits left behind, so that an event
        released late (after its commit) continues its transaction's numbering (bounded)."""
        self._limit = options.max_message_bytes
        self._base = options.segment_index_base
        js = self._js
        ct = options.datacontenttype if encoding == "json" else options.avro_datacontenttype
        self._content_type = ct
        self._ct_json = js.slash(js.string(ct))
        self._source_json = js.slash(js.string("/"))
        self._headers: tuple[Header, ...] = (
            (CONTENT_TYPE_HEADER,) if options.content_type_header and encoding == "json" else ())
        self._time_cache: dict[str, bytes] = {}

    # -- public API ------------------------------------------------------------------------
    def encode(self, record: ChangeRecord) -> list[CesMessage]:
        """The Kafka records (events or segments) of one canonical record; ``[]`` when the
        record is dropped (truncate, or a snapshot row with ``snapshot_rows=skip``). Raises
        :class:`~debezium_bridge.errors.EncodeError`."""
        headers = self._headers
        return [CesMessage(key, value, headers) for key, value in self._encode(record)]

    def encode_many(self, records: Iterable[ChangeRecord],
                    errors: list[tuple[ChangeRecord, Exception]] | None = None
                    ) -> list[CesMessage]:
        """:meth:`encode` over ``records``; with ``errors`` given, failures are collected there
        instead of raised."""
        out: list[CesMessage] = []
        headers = self._headers
        for record in records:
            try:
                out.extend(CesMessage(k, v, headers) for k, v in self._encode(record))
            except EncodeError as exc:
                if errors is None:
                    raise
                errors.append((record, exc))
        return out

    def encode_lines(self, records: Iterable[ChangeRecord],
                     errors: list[tuple[ChangeRecord, Exception]] | None = None) -> bytes:
        """JSON encoding: the events (values) one per line, in one buffer (like
        :func:`debezium_bridge.formats.canonical.encode_lines`)."""
        if self.encoding != "json":
            raise ValueError("encode_lines needs the json encoding")
        buf = bytearray()
        for record in records:
            try:
                for _, value in self._encode(record):
                    buf += value
                    buf += b"\n"
            except EncodeError as exc:
                if errors is None:
                    raise
                errors.append((record, exc))
        return bytes(buf)

    # -- one record ------------------------------------------------------------------------
    def _operations(self, record: ChangeRecord) -> list[_Op]:
        op = record.op
        key = record.key
        if op == "insert":
            return [("INS", None, record.after, key, 0)]
        if op == "update":
            if record.key_changed and record.old_key is not None \
                    and self.options.key_changes == "delete-insert":
                return [("DEL", record.before, None, record.old_key, 0),
                        ("INS", None, record.after, key, 1)]
            return [("UPD", record.before, record.after, key, 0)]
        if op == "delete":
            return [("DEL", record.before, None, key, 0)]
        if op == "read":
            if self.options.snapshot_rows == "insert":
                return [("INS", None, record.after, key, 0)]
            self.counters.skipped_snapshot += 1
            return []
        if op == "truncate":
            self.counters.skipped_truncate += 1
        else:
            self.counters.skipped_other += 1
        return []

    def _encode(self, record: ChangeRecord) -> list[tuple[bytes | None, bytes]]:
        counters = self.counters
        counters.records_in += 1
        try:
            out = self._encode_record(record)
        except EncodeError:
            counters.errors += 1
            raise
        except (RecordError, ValueError, TypeError, KeyError) as exc:
            counters.errors += 1
            message = exc.message if isinstance(exc, RecordError) else str(exc)
            raise EncodeError(f"{record.table_id} {record.seq}: {message}") from exc
        return out

    def _encode_record(self, record: ChangeRecord) -> list[tuple[bytes | None, bytes]]:
        operations = self._operations(record)
        if not operations:
            return []
        counters = self.counters
        truncated = self._stats.truncated_values
        plan = self._plan(record)
        commit = record.position.commit_lsn
        if commit is None:
            raise EncodeError(f"{record.table_id} {record.seq}: no commit LSN")
        time = record.commit_ts or record.capture_ts
        if time is None:
            raise EncodeError(f"{record.table_id} {record.seq}: no commit time")
        sequence = self._sequence(record, len(operations))
        begin = self._begin(record, commit)
        guid = self._guid(record)
        commit_upper = commit.upper()
        commit_hex = commit_upper.replace(":", "")
        out: list[tuple[bytes | None, bytes]] = []
        for operation, old, current, key, offset in operations:
            seq = sequence + offset - (len(operations) - 1)
            if not 1 <= seq <= _INT32_MAX:
                raise EncodeError(f"sequencenumber {seq} out of range 1..{_INT32_MAX}")
            logical_id = f"{guid}:{commit_hex}:{seq:020d}"
            if self.encoding == "json":
                data = self._data_json(plan, record, operation, old, current, key, commit_upper,
                                       begin, seq, time)
                messages = self._envelopes_json(data, logical_id, time, operation)
            else:
                data_avro = self._data_avro(plan, record, operation, old, current, key,
                                            commit_upper, begin, seq, time)
                messages = self._envelopes_avro(data_avro, logical_id, time, operation)
            kafka_key = self._kafka_key(plan, record, old if operation == "DEL" else current)
            out.extend((kafka_key, value) for value in messages)
            counters.events_out += 1
            counters.segments_out += len(messages)
            if len(messages) > 1:
                counters.split_events += 1
        counters.encoded += 1
        counters.truncated_values += self._stats.truncated_values - truncated
        if plan.guessed:
            counters.guessed_types += 1
        return out

    # -- state: sequence numbers and begin LSNs -------------------------------------------
    def _sequence(self, record: ChangeRecord, events: int) -> int:
        """Sequence number of the record's last event (module docstring)."""
        commit = record.position.commit_lsn
        tx = record.tx
        if commit != self._seq_commit:
            self._switch(commit)
        if tx is not None and tx.total_order is not None:
            last = tx.total_order
            if self._spread(record):
                last *= 2
            elif events > 1 and last - events + 1 < 1:
                last = events
        else:
            last = self._seq_last + events
        self._seq_last = last
        return last

    def _spread(self, record: ChangeRecord) -> bool:
        """Does the record's transaction need doubled sequence numbers? CES input counts a key
        change once, so with ``key_changes=delete-insert`` every event of CES origin (its
        change LSN in VLF 0) takes ``2 * sequencenumber`` and the delete half of a key change
        ``2 * sequencenumber - 1``: unique within the transaction, in order, and the same on
        every run (docs/ces.md)."""
        change = record.position.change_lsn
        return self.options.key_changes == "delete-insert" and change is not None \
            and change.startswith(_SYNTHETIC_LSN_PREFIX)

    def _switch(self, commit: str | None) -> None:
        """Remember where the current commit stopped; continue ``commit`` where it stopped."""
        earlier = self._earlier
        if self._seq_commit is not None:
            earlier[self._seq_commit] = (self._seq_last, self._begin_lsn)
            if len(earlier) > 4096:
                earlier.popitem(last=False)
        last, begin = earlier.pop(commit, (0, None)) if commit is not None else (0, None)
        self._seq_commit, self._seq_last = commit, last
        self._begin_lsn = begin

    def _begin(self, record: ChangeRecord, commit: str) -> str:
        tx = record.tx
        if tx is not None and tx.begin_lsn:
            return tx.begin_lsn.upper()
        mode = self.options.begin_lsn
        change = record.position.change_lsn
        if change is None or change.startswith(_SYNTHETIC_LSN_PREFIX) or mode == "commit":
            begin = commit
        elif mode == "change":
            begin = change
        else:
            if self._begin_lsn is None or change < self._begin_lsn:
                self._begin_lsn = change
            begin = self._begin_lsn
        return begin.upper()

    def _guid(self, record: ChangeRecord) -> str:
        if self.options.logical_id_guid is not None:
            return self.options.logical_id_guid.lower()
        cache_key = (record.source.name, record.table.db)
        guid = self._guids.get(cache_key)
        if guid is None:
            guid = self._guids[cache_key] = default_logical_id_guid(*cache_key)
        return guid

    def _plan(self, record: ChangeRecord) -> _Plan:
        names = record_column_names(record)
        catalog = self.catalog
        if catalog.version != self._known_version:
            self._known.clear()
            self._known_version = catalog.version
        plan = self._known.get((record.table_id, names))
        if plan is not None:
            return plan
        columns = catalog.lookup(record.table, names)
        guessed = columns is None
        if columns is None:
            columns = catalog.guess(record.table, (record.after, record.before, record.key),
                                    names)
        plan_key = (record.table_id, names, columns)
        plan = self._plans.get(plan_key)
        if plan is None:
            if len(self._plans) > 4096:
                self._plans.clear()
            plan = self._plans[plan_key] = _Plan(record, columns, self.options, self._js,
                                                 self._stats, guessed)
        if not guessed:
            if len(self._known) > 4096:
                self._known.clear()
            self._known[(record.table_id, names)] = plan
        return plan

    # -- data ------------------------------------------------------------------------------
    def _row(self, plan: _Plan, record: ChangeRecord, image: dict[str, Any] | None,
             renders: Sequence[tuple[str, Render]], changed_only: bool) -> dict[str, Any] | None:
        """``{column: string | None}`` of an image (``None``: no image)."""
        if image is None:
            return None
        get = image.get
        row = {name: (None if (v := get(name)) is None else render(v)) for name, render in renders}
        unavailable = record.unavailable_columns
        if unavailable:
            for name in unavailable:
                row.pop(name, None)
        if self.options.nulls == "omit":
            row = {k: v for k, v in row.items() if v is not None}
        if changed_only:
            keep = set(record.changed_columns) | set(record.key) | set(record.old_key or ())
            row = {k: v for k, v in row.items() if k in keep}
        return row

    def _rows(self, plan: _Plan, record: ChangeRecord, operation: str,
              old: dict[str, Any] | None, current: dict[str, Any] | None
              ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        options = self.options
        changed_only = not options.include_all_columns and operation == "UPD"
        old_row = None
        if operation != "INS" and options.include_old_values:
            old_row = self._row(plan, record, old, plan.old_renders, changed_only)
        current_row = self._row(plan, record, current, plan.renders, changed_only) \
            if operation != "DEL" else None
        return old_row, current_row

    def _pkkey(self, plan: _Plan, key: dict[str, Any]) -> list[tuple[str, str]]:
        out = []
        for name, value in key.items():
            if value is None:
                raise EncodeError(f"key column {name!r} is NULL")
            found = plan.by_name.get(name)
            out.append((name, found[1](value) if found is not None else str(value)))
        return out

    def _cols_for(self, plan: _Plan, record: ChangeRecord, operation: str
                  ) -> list[dict[str, Any]] | None:
        """``cols`` when only changed columns are listed (``include_all_columns=false``)."""
        if self.options.include_all_columns or operation != "UPD":
            return None
        keep = set(record.changed_columns) | set(record.key) | set(record.old_key or ())
        return [c for c in plan.cols_avro if c["name"] in keep]

    def _data_json(self, plan: _Plan, record: ChangeRecord, operation: str,
                   old: dict[str, Any] | None, current: dict[str, Any] | None,
                   key: dict[str, Any], commit: str, begin: str, seq: int, time: str) -> bytes:
        js = self._js
        old_row, current_row = self._rows(plan, record, operation, old, current)
        pkkey = self._pkkey(plan, key)
        cols = self._cols_for(plan, record, operation)
        if js.pretty:
            return self._data_pretty(plan, record, old_row, current_row, pkkey, cols, commit,
                                     begin, seq, time)
        old_text = js.slash(js.row(old_row)) if old_row is not None else b"{}"
        current_text = js.slash(js.row(current_row)) if current_row is not None else b"{}"
        string = js.string
        time_json = self._time_cache.get(time)
        if time_json is None:
            if len(self._time_cache) > 4096:
                self._time_cache.clear()
            time_json = self._time_cache[time] = string(time)
        prefix = plan.prefix
        if cols is not None:
            table = record.table
            prefix = (b'{"eventsource":{"db":' + string(table.db) + b',"schema":'
                      + string(table.schema) + b',"tbl":' + string(table.name) + b',"cols":'
                      + b"[" + b",".join(b'{"name":' + string(c["name"]) + b',"type":'
                                         + string(c["type"]) + b',"index":'
                                         + str(c["index"]).encode() + b"}" for c in cols)
                      + b'],"pkkey":')
        data = b"".join((
            prefix,
            b"[" + b",".join(b'{"columnname":' + string(n) + b',"value":' + string(v) + b"}"
                             for n, v in pkkey) + b"]",
            b',"transaction":{"commitlsn":"', commit.encode(), b'","beginlsn":"', begin.encode(),
            b'","sequencenumber":', str(seq).encode(), b',"finalevent":false,"committime":',
            time_json, b'}},"eventrow":{"old":"', js.embed(old_text), b'","current":"',
            js.embed(current_text), b'"}}',
        ))
        return js.slash(data)

    def _data_pretty(self, plan: _Plan, record: ChangeRecord, old_row: dict[str, Any] | None,
                     current_row: dict[str, Any] | None, pkkey: list[tuple[str, str]],
                     cols: list[dict[str, Any]] | None, commit: str, begin: str, seq: int,
                     time: str) -> bytes:
        js = self._js
        doc = self._data_dict(plan, record, old_row, current_row, pkkey, cols, commit, begin,
                              seq, time, rows_as=lambda row: js.slash(js.row(row)).decode())
        text = json.dumps(doc, indent=2, ensure_ascii=js.ascii).encode()
        return js.slash(text)

    def _data_dict(self, plan: _Plan, record: ChangeRecord, old_row: dict[str, Any] | None,
                   current_row: dict[str, Any] | None, pkkey: list[tuple[str, str]],
                   cols: list[dict[str, Any]] | None, commit: str, begin: str, seq: int,
                   time: str, rows_as: Callable[[dict[str, Any]], str],
                   finalevent: bool = True) -> dict[str, Any]:
        transaction: dict[str, Any] = {"commitlsn": commit, "beginlsn": begin,
                                       "sequencenumber": seq}
        if finalevent:
            transaction["finalevent"] = False
        transaction["committime"] = time
        table = record.table
        return {
            "eventsource": {
                "db": table.db, "schema": table.schema, "tbl": table.name,
                "cols": cols if cols is not None else plan.cols_avro,
                "pkkey": [{"columnname": n, "value": v} for n, v in pkkey],
                "transaction": transaction,
            },
            "eventrow": {"old": rows_as(old_row) if old_row is not None else "{}",
                         "current": rows_as(current_row) if current_row is not None else "{}"},
        }

    def _data_avro(self, plan: _Plan, record: ChangeRecord, operation: str,
                   old: dict[str, Any] | None, current: dict[str, Any] | None,
                   key: dict[str, Any], commit: str, begin: str, seq: int, time: str) -> bytes:
        js = self._js
        old_row, current_row = self._rows(plan, record, operation, old, current)
        revision = self.options.avro_data_schema
        doc = self._data_dict(plan, record, old_row, current_row, self._pkkey(plan, key),
                              self._cols_for(plan, record, operation), commit, begin, seq, time,
                              rows_as=lambda row: js.slash(js.row(row)).decode(),
                              finalevent=revision == "2026-08")
        return ces_avro.encode_data(doc, revision)

    # -- envelopes -------------------------------------------------------------------------
    def _segment_id(self, logical_id: str, index: int) -> str:
        if self.options.ids == "random":
            return str(uuid.uuid4())
        return uuid5_text(f"{logical_id}:{index}")

    def _envelope_json(self, logical_id: str, index: int, final: bool, time: str,
                       operation: str, content: bytes) -> bytes:
        segment_id = self._segment_id(logical_id, index)
        indent = self.options.envelope_indent
        if not indent:
            return b"".join((
                b'{"specversion":"1.0","type":"com.microsoft.SQL.CES.DML.V1","source":',
                self._source_json, b',"id":"', segment_id.encode(), b'","logicalid":"',
                logical_id.encode(), b'","time":"', time.encode(), b'","datacontenttype":',
                self._ct_json, b',"operation":"', operation.encode(), b'","segmentindex":',
                str(index).encode(), b',"finalsegment":', b"true" if final else b"false",
                b',"data":"', content, b'"}'))
        js = self._js
        pad = b"\n" + b" " * indent
        members = (
            (b"specversion", js.string(SPEC_VERSION)), (b"type", js.string(CES_TYPE)),
            (b"source", self._source_json), (b"id", js.string(segment_id)),
            (b"logicalid", js.string(logical_id)), (b"time", js.string(time)),
            (b"datacontenttype", self._ct_json), (b"operation", js.string(operation)),
            (b"segmentindex", str(index).encode()),
            (b"finalsegment", b"true" if final else b"false"),
            (b"data", b'"' + content + b'"'),
        )
        return b"{" + b",".join(pad + b'"' + name + b'": ' + value for name, value in members) \
            + b"\n}"

    def _envelopes_json(self, data: bytes, logical_id: str, time: str,
                        operation: str) -> list[bytes]:
        js = self._js
        content = js.slash(js.embed_any(data) if js.pretty or js.ascii else js.embed(data))
        base = self._base
        single = self._envelope_json(logical_id, base, True, time, operation, content)
        if len(single) <= self._limit:
            return [single]
        overhead = len(single) - len(content)
        # the index may need more digits than the base; "false" is one byte longer than "true"
        budget = self._limit - overhead - len(str(base + len(content))) - 1
        pieces = split_content(content, budget)
        last = len(pieces) - 1
        return [self._envelope_json(logical_id, base + i, i == last, time, operation, piece)
                for i, piece in enumerate(pieces)]

    def _envelopes_avro(self, data: bytes, logical_id: str, time: str,
                        operation: str) -> list[bytes]:
        base = self._base

        def envelope(index: int, final: bool, piece: bytes) -> bytes:
            return ces_avro.encode_envelope({
                "specversion": SPEC_VERSION, "type": CES_TYPE, "source": "/",
                "id": self._segment_id(logical_id, index), "logicalid": logical_id,
                "time": time, "datacontenttype": self._content_type, "operation": operation,
                "segmentindex": index, "finalsegment": final, "data": piece})

        single = envelope(base, True, data)
        if len(single) <= self._limit:
            return [single]
        overhead = len(envelope(base + len(data), False, b""))
        budget = self._limit - overhead - 5  # the bytes length prefix (zigzag varint)
        pieces = [data[i:i + budget] for i in range(0, len(data), budget)]
        last = len(pieces) - 1
        return [envelope(base + i, i == last, piece) for i, piece in enumerate(pieces)]

    # -- Kafka key -------------------------------------------------------------------------
    def _kafka_key(self, plan: _Plan, record: ChangeRecord,
                   image: dict[str, Any] | None) -> bytes | None:
        scheme = self.options.partition_key_scheme
        if scheme == "None":
            return None
        if scheme == "Table":
            return f"{record.table.schema}.{record.table.name}".encode()
        if scheme == "StreamGroup":
            return self.options.stream_group.encode()
        column = self.options.partition_key_column or ""
        if image is None or image.get(column) is None:
            return None
        found = plan.by_name.get(column)
        value = image[column]
        return (found[1](value) if found is not None else str(value)).encode()
