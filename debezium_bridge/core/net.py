"""Net changes of a closed LSN window, as ``cdc.fn_cdc_get_net_changes_<capture_instance>``
returns them (docs/cdc.md, "Net changes").

Input: canonical change records in position order (from change-table rows or from any Debezium
or CES input). A record belongs to the window ``[from_lsn, to_lsn]`` when its commit LSN
(``__$start_lsn``) lies in it, both ends included. Output: one record per key changed in the
window, carrying the key's final state:

* the key did not exist before the window and does after → ``insert`` with the final values;
  existed before and after → ``update`` (``before`` = the state before the window, ``after``
  = the final values); existed before, not after → ``delete`` (the values it had when deleted);
  neither (inserted … deleted inside the window) → nothing;
* mode ``all-with-merge``: ``insert`` and ``update`` both become ``upsert`` (operation 5);
* a primary-key change is a delete of the old key and an insert of the new one;
* ``changed_columns``: the union of the columns changed by every change of the key in the
  window (an insert or a delete changes every column) — ``all-with-mask``'s aggregated
  ``__$update_mask``; the SQL Server shaped rows (:func:`net_rows`) show it only in that mode
  and only for updates, NULL otherwise, as the function does;
* a column not sent by a change (unchanged LOB) keeps the value it had earlier in the window;
  it stays in ``unavailable_columns`` only when the window never saw its value. A key change
  moves the row: such a column takes the old key's value; when the window never saw that
  either, the new key's record names the key whose row was moved (``old_key``,
  ``key_changed``), and an applier takes the value from that key's row as it was before the
  window. Net changes are applied as one set, as a ``MERGE`` does (:func:`apply_net_changes`):
  keys may rotate inside a window (1→4, 8→1, 4→8), so no order of the records lets a
  one-at-a-time applier read every moved row before another record overwrites it;
* ``position``, ``seq`` and ``commit_ts`` are those of the key's last change in the window.

Snapshot reads, truncates and upserts are not changes of a window and are counted as
``skipped``; keyless tables have no net changes (SQL Server requires a primary key or unique
index), their records are counted as ``keyless``.

Consecutive windows: ``[a, b]`` then ``[increment_lsn(b), c]`` (``sys.fn_cdc_increment_lsn``)
count every change exactly once; applying the net changes of the first and then of the second
gives the state that applying those of ``[a, c]`` gives.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from debezium_bridge.errors import ConfigError, LsnFormatError
from debezium_bridge.formats.debezium.envelope import key_identity
from debezium_bridge.model.change import ChangeRecord, LineageRef, TableRef
from debezium_bridge.model.lsn import decrement_lsn, format_lsn, increment_lsn, parse_lsn

NetMode = Literal["all", "all-with-mask", "all-with-merge"]
NET_MODES: tuple[NetMode, ...] = ("all", "all-with-mask", "all-with-merge")
OPERATION = {"delete": 1, "insert": 2, "update": 4, "upsert": 5}
"""``__$operation`` of net rows: 1 delete, 2 insert, 4 update, 5 insert or update."""


class Window(msgspec.Struct, frozen=True, gc=False):
    """A closed LSN interval ``[from_lsn, to_lsn]``; ``None`` = unbounded on that side."""

    from_lsn: bytes | None = None
    to_lsn: bytes | None = None

    def __post_init__(self) -> None:
        if self.from_lsn is not None and self.to_lsn is not None \
                and self.from_lsn > self.to_lsn:
            raise ConfigError(f"window from {format_lsn(self.from_lsn)} is above its end "
                              f"{format_lsn(self.to_lsn)}")

    @classmethod
    def of(cls, from_lsn: str | None = None, to_lsn: str | None = None, *,
           after_lsn: str | None = None) -> Window:
        """A window from LSN texts (any form: ``0x…``, Debezium's, bare hex); ``after_lsn``
        (the previous window's end) gives ``from_lsn = sys.fn_cdc_increment_lsn(after_lsn)``."""
        if after_lsn is not None and from_lsn is not None:
            raise ConfigError("give from_lsn or after_lsn, not both")
        try:
            start = _lsn(from_lsn)
            if after_lsn is not None:
                start = increment_lsn(parse_lsn(after_lsn))
            return cls(start, _lsn(to_lsn))
        except LsnFormatError as exc:
            raise ConfigError(str(exc)) from None

    def contains(self, commit_lsn: bytes) -> bool:
        return (self.from_lsn is None or commit_lsn >= self.from_lsn) and \
            (self.to_lsn is None or commit_lsn <= self.to_lsn)

    def next(self, to_lsn: bytes | None = None) -> Window:
        """The window right after this one (``sys.fn_cdc_increment_lsn`` of its end)."""
        if self.to_lsn is None:
            raise ConfigError("an unbounded window has no next window")
        return Window(increment_lsn(self.to_lsn), to_lsn)

    def describe(self) -> str:
        return f"[{format_lsn(self.from_lsn or b'') or 'min'}, " \
               f"{format_lsn(self.to_lsn or b'') or 'max'}]"


def _lsn(text: str | None) -> bytes | None:
    if text is None or text.strip().lower() in ("", "min", "max"):
        return None
    lsn = parse_lsn(text)
    return lsn or None


def consecutive_windows(boundaries: Sequence[str | bytes]) -> list[Window]:
    """Windows that cover ``[b0, b1]``, ``[next(b1), b2]``, … (``sys.fn_cdc_increment_lsn``
    between them), so that no change is counted twice and none is lost."""
    lsns = [b if isinstance(b, bytes) else parse_lsn(b) for b in boundaries]
    if len(lsns) < 2:
        raise ConfigError("consecutive windows need at least two boundaries")
    out = [Window(lsns[0], lsns[1])]
    for end in lsns[2:]:
        out.append(out[-1].next(end))
    return out


def windows_ending_at(ends: Sequence[str | bytes], start: str | bytes | None = None
                      ) -> list[Window]:
    """Windows ``[start, e0]``, ``[next(e0), e1]``, … for the upper bounds ``ends`` (e.g. the
    ``sys.fn_cdc_get_max_lsn()`` of each polling run)."""
    lsns = [e if isinstance(e, bytes) else parse_lsn(e) for e in ends]
    first = start if isinstance(start, bytes | None) else parse_lsn(start)
    out = [Window(first or None, lsns[0])]
    for end in lsns[1:]:
        out.append(out[-1].next(end))
    return out


__all__ = ["NET_MODES", "OPERATION", "NetChanges", "NetCounters", "NetMode", "Window",
           "apply_changes", "apply_net_changes", "consecutive_windows", "decrement_lsn",
           "increment_lsn", "net_changes", "net_rows", "windows_ending_at"]


# --------------------------------------------------------------------------- computing


@dataclass(slots=True)
class NetCounters:
    """``records_in = in_window + outside + skipped + keyless``; the changes in the window
    become ``net_out`` records (``cancelled`` keys were inserted and deleted inside it)."""

    records_in: int = 0
    in_window: int = 0
    outside: int = 0
    skipped: int = 0
    keyless: int = 0
    keys: int = 0
    net_out: int = 0
    cancelled: int = 0

    @property
    def balanced(self) -> bool:
        return self.records_in == self.in_window + self.outside + self.skipped + self.keyless

    def summary(self) -> str:
        return (f"net: records_in={self.records_in} = in_window={self.in_window} + "
                f"outside={self.outside} + skipped={self.skipped} + keyless={self.keyless} "
                f"[{'balanced' if self.balanced else 'NOT BALANCED'}]; keys={self.keys} "
                f"net_out={self.net_out} cancelled={self.cancelled}")


class _Key:
    """What the window did to one key."""

    __slots__ = ("changed", "columns", "existed", "exists", "first_before", "image", "key",
                 "last", "lineage", "origin", "table", "unavailable")

    def __init__(self, table: TableRef, key: dict[str, Any], existed: bool,
                 first_before: dict[str, Any] | None, unavailable: Iterable[str]) -> None:
        self.table = table
        self.key = key
        self.existed = existed
        self.exists = existed
        self.first_before = first_before
        self.image: dict[str, Any] | None = first_before
        self.unavailable: set[str] = set(unavailable) if first_before is not None else set()
        self.changed: set[str] = set()
        self.columns: list[str] = list(first_before or ())
        self.last: ChangeRecord | None = None
        self.lineage: dict[LineageRef, None] = {}
        """The records of all its changes, in order, each once (a dict: a hot key changes many
        times in one window, and a list's ``in`` made the window quadratic, 7.3 s for 20,000
        updates of one key)."""
        self.origin: tuple[dict[str, Any], str] | None = None
        """(key, seq of the key change) of the row before the window that key changes moved
        here, while a column they did not send is still unknown (the applier takes it from that
        key's row as it was before the window)."""


class NetChanges:
    """Accumulates canonical records (in position order) and gives the net changes of one
    window (module docstring). ``add`` / ``add_many``, then :meth:`result`."""

    def __init__(self, window: Window | None = None, mode: NetMode = "all") -> None:
        if mode not in NET_MODES:
            raise ConfigError(f"unknown net mode {mode!r} (one of {', '.join(NET_MODES)})")
        self.window = window or Window()
        self.mode = mode
        self.counters = NetCounters()
        self._keys: dict[tuple[str, bytes], _Key] = {}
        self.max_commit_lsn: bytes | None = None
        """The highest commit LSN in the window (where the next window starts after)."""

    def add_many(self, records: Iterable[ChangeRecord]) -> None:
        for record in records:
            self.add(record)

    def add(self, record: ChangeRecord) -> None:
        counters = self.counters
        counters.records_in += 1
        if record.op not in ("insert", "update", "delete"):
            counters.skipped += 1
            return
        commit = parse_lsn(record.position.commit_lsn)
        if not self.window.contains(commit):
            counters.outside += 1
            return
        if not record.key:
            counters.keyless += 1
            return
        counters.in_window += 1
        if self.max_commit_lsn is None or commit > self.max_commit_lsn:
            self.max_commit_lsn = commit
        if record.op == "update" and record.key_changed and record.old_key is not None:
            # the row moves: a column the change did not send keeps the OLD key's value
            carry = self._keys.get((record.table_id, key_identity(record.old_key)))
            if carry is not None and carry.image is not None:
                known, unknown = dict(carry.image), set(carry.unavailable)
                origin = carry.origin or (record.old_key, record.seq)
            else:  # the row the window never saw before: its unsent columns are pre-window
                known, unknown = {}, set(record.unavailable_columns)
                origin = (record.old_key, record.seq)
            not_sent = set(record.unavailable_columns)
            for column, value in (record.before or {}).items():
                if value is not None or column not in not_sent:
                    known[column] = value
                    unknown.discard(column)
            self._piece(record, record.old_key, "delete", record.before, None)
            self._piece(record, record.key, "insert", None, record.after,
                        carry=(origin, known, unknown))
        elif record.op == "update":
            self._piece(record, record.key, "update", record.before, record.after)
        elif record.op == "insert":
            self._piece(record, record.key, "insert", None, record.after)
        else:
            self._piece(record, record.key, "delete", record.before, None)

    def _piece(self, record: ChangeRecord, key: dict[str, Any], op: str,
               before: dict[str, Any] | None, after: dict[str, Any] | None,
               carry: tuple[tuple[dict[str, Any], str], dict[str, Any], set[str]] | None = None
               ) -> None:
        ident = (record.table_id, key_identity(key))
        state = self._keys.get(ident)
        unavailable = record.unavailable_columns
        if state is None:
            state = _Key(record.table, key, op != "insert", before,
                         [c for c in unavailable if before is not None and before.get(c) is None])
            self._keys[ident] = state
            self.counters.keys += 1
        if op == "delete":
            if state.image is None and before is not None:
                state.image = dict(before)
            state.changed.update(before or state.image or key)
            state.exists = False
            if before is not None:
                self._merge_image(state, before, unavailable)
        else:
            assert after is not None
            if op == "insert":
                state.changed.update(after)
                state.unavailable = set()
                state.image = None
                state.origin = None
                if carry is not None:  # a key change: what it did not send, the old row had
                    origin, known, unknown = carry
                    state.image = known
                    state.unavailable = unknown
                    if any(c in unknown for c in unavailable if after.get(c) is None):
                        state.origin = origin
            else:
                state.changed.update(record.changed_columns)
            self._merge_image(state, after, unavailable)
            if not state.unavailable:
                state.origin = None
            state.exists = True
        state.last = record
        state.lineage.update(dict.fromkeys(record.lineage))

    @staticmethod
    def _merge_image(state: _Key, image: dict[str, Any], unavailable: Sequence[str]) -> None:
        """The new image, with the columns this change did not send taken from the image the
        window already knows (an unchanged LOB keeps its value)."""
        merged = dict(image)
        known = state.image
        still: set[str] = set()
        for column in unavailable:
            if column not in merged or merged[column] is not None:
                continue  # sent in this image (the other image did not send it)
            if known is not None and column in known and column not in state.unavailable:
                merged[column] = known[column]
            else:
                still.add(column)
        state.unavailable = still
        state.image = merged
        state.columns = list(merged)

    def result(self) -> list[ChangeRecord]:
        """The net change records, in the order of each key's last change."""
        out: list[tuple[tuple[Any, ...], ChangeRecord]] = []
        merge = self.mode == "all-with-merge"
        for (table_id, key_id), state in self._keys.items():
            last = state.last
            assert last is not None
            if not state.existed and not state.exists:
                self.counters.cancelled += 1
                continue
            image = state.image or {}
            if not state.exists:
                op = "delete"
                before, after = image, None
            elif not state.existed:
                op = "upsert" if merge else "insert"
                before, after = None, image
            else:
                op = "upsert" if merge else "update"
                before = None if merge else state.first_before
                after = image
            order = list(image) or list(state.key)
            changed = [c for c in order if c in state.changed and c not in state.unavailable]
            unavailable = [c for c in order if c in state.unavailable]
            event_id = hashlib.blake2b(
                b"\x01".join([b"net", self.mode.encode(), table_id.encode(), key_id,
                              last.event_id.encode(),
                              (self.window.from_lsn or b""), (self.window.to_lsn or b"")]),
                digest_size=16).hexdigest()
            origin = state.origin if state.exists and unavailable else None
            # records that read a row as it was before the window come first, in the order of
            # their key changes; then by position, deletes last at one position
            order_key = ((0, origin[1]) if origin is not None else
                         (1, last.seq, op == "delete", key_id, table_id))
            out.append((order_key, ChangeRecord(
                op=op,  # type: ignore[arg-type]
                table=state.table, table_id=table_id, key=state.key,
                old_key=None if origin is None else origin[0],
                key_changed=origin is not None, before=before, after=after,
                changed_columns=changed,
                unavailable_columns=unavailable, position=last.position, seq=last.seq,
                commit_ts=last.commit_ts, capture_ts=last.capture_ts, tx=last.tx,
                snapshot="false", source=last.source, lineage=list(state.lineage),
                event_id=event_id)))
        out.sort(key=lambda item: item[0])
        self.counters.net_out = len(out)
        return [record for _, record in out]


def net_changes(records: Iterable[ChangeRecord], window: Window | None = None,
                mode: NetMode = "all") -> list[ChangeRecord]:
    """The net changes of ``window`` over ``records`` (sorted by position here; module
    docstring)."""
    net = NetChanges(window, mode)
    net.add_many(sorted(records, key=lambda r: r.seq))
    return net.result()


# --------------------------------------------------------------------------- using


def apply_changes(state: MutableMapping[tuple[str, bytes], dict[str, Any]],
                  changes: Iterable[ChangeRecord]) -> MutableMapping[tuple[str, bytes],
                                                                     dict[str, Any]]:
    """Apply change records (canonical or net, in order) to a table state keyed by
    ``(table_id, key bytes)``: what a MERGE into a replica does. Columns a change did not send
    keep their value."""
    for change in changes:
        if change.op in ("read", "truncate"):
            if change.op == "read" and change.after is not None:
                state[(change.table_id, key_identity(change.key))] = dict(change.after)
            continue
        ident = (change.table_id, key_identity(change.key))
        previous = state.get(ident)
        if change.key_changed and change.old_key is not None:
            # the row moved: what the change did not send is the old key's
            previous = state.pop((change.table_id, key_identity(change.old_key)), None)
        if change.op == "delete":
            state.pop(ident, None)
            continue
        state[ident] = _row_after(change, previous)
    return state


def _row_after(change: ChangeRecord, previous: dict[str, Any] | None) -> dict[str, Any]:
    """The row a change leaves: its ``after``, with the columns it did not send taken from
    ``previous`` (the row it replaces or moved)."""
    row = dict(change.after or {})
    for column in change.unavailable_columns:
        if previous is not None and column in previous and row.get(column) is None:
            row[column] = previous[column]
    return row


def apply_net_changes(state: MutableMapping[tuple[str, bytes], dict[str, Any]],
                      changes: Iterable[ChangeRecord]) -> MutableMapping[tuple[str, bytes],
                                                                         dict[str, Any]]:
    """Apply one window's net changes (one record per key) as a set, as a ``MERGE`` does: every
    record reads the table as it was before the window, so a record with ``old_key`` takes the
    columns it did not send from that key's row before the window, whatever the window's other
    records do to that key. A moved key that ends absent has a delete record of its own."""
    before = dict(state)
    for change in changes:
        ident = (change.table_id, key_identity(change.key))
        if change.op == "delete":
            state.pop(ident, None)
            continue
        source = change.old_key if change.key_changed and change.old_key is not None else None
        previous = before.get((change.table_id, key_identity(source)) if source is not None
                              else ident)
        state[ident] = _row_after(change, previous)
    return state


def _hex(lsn: str | None) -> str | None:
    if lsn is None:
        return None
    return "0x" + parse_lsn(lsn).hex().upper()


def net_rows(changes: Iterable[ChangeRecord], mode: NetMode,
             ordinals: Mapping[str, Mapping[str, int]] | None = None
             ) -> Iterator[dict[str, Any]]:
    """Net change records as the rows ``cdc.fn_cdc_get_net_changes_<ci>(from, to, mode)``
    returns: ``__$start_lsn`` (the last change's commit LSN, ``0x…``), ``__$operation`` (1
    delete, 2 insert, 4 update; 1 or 5 in ``all-with-merge``), ``__$update_mask`` (``all-with-
    mask`` updates only: the changed columns' bits; NULL otherwise), then the columns.
    ``ordinals``: per ``table_id`` the captured columns' ``column_ordinal`` (default: the
    image's column order)."""
    from debezium_bridge.formats.cdc.decode import mask_of

    for change in changes:
        image = change.after if change.after is not None else change.before or {}
        row: dict[str, Any] = {"__$start_lsn": _hex(change.position.commit_lsn),
                               "__$operation": OPERATION[change.op], "__$update_mask": None}
        if mode == "all-with-mask" and change.op == "update":
            positions = (ordinals or {}).get(change.table_id) or \
                {name: i for i, name in enumerate(image, start=1)}
            width = max(positions.values(), default=0)
            mask = mask_of(positions[c] for c in change.changed_columns if c in positions)
            mask = mask.rjust(max(1, (width + 7) // 8), b"\x00")
            row["__$update_mask"] = "0x" + mask.hex().upper()
        row.update(image)
        yield row


_STATE = msgspec.json.Encoder()


@dataclass(slots=True)
class WindowState:
    """Where the next window starts: the last window's end, kept in a small JSON file
    (``net --state FILE``) so that repeated runs walk consecutive windows."""

    last_to_lsn: str | None = None
    windows: list[dict[str, str | None]] = field(default_factory=list)

    def next_window(self, to_lsn: str | None) -> Window:
        if self.last_to_lsn is None:
            return Window.of(None, to_lsn)
        return Window.of(None, to_lsn, after_lsn=self.last_to_lsn)

    def to_json(self) -> bytes:
        return _STATE.encode({"last_to_lsn": self.last_to_lsn, "windows": self.windows})

    @classmethod
    def from_json(cls, data: bytes) -> WindowState:
        try:
            doc = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise ConfigError(f"window state file is not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ConfigError("window state file must hold a JSON object")
        return cls(doc.get("last_to_lsn"), list(doc.get("windows") or []))
