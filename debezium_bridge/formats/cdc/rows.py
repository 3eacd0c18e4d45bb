"""Reading exported change-table rows: CSV as ``sqlcmd``, ``bcp`` and pandas write it, JSON
lines, and JSON arrays (``FOR JSON``).

* **CSV.** The delimiter is sniffed from the first line (``,``, tab, ``|``, ``;``). A header
  line (any field ``__$start_lsn``) names the columns, and must name every captured column;
  ``sqlcmd``'s dash line under it and its ``(N rows affected)`` footer are skipped. Values of a
  ``sqlcmd -W`` export are read as written (an empty field is the empty string: sqlcmd prints
  NULL as ``NULL``); without ``-W`` (a padded header) the trailing padding is removed. Pandas'
  unnamed index column is dropped. Without a header (``bcp -c``) the columns are the change
  table's own (``__$start_lsn, __$end_lsn, __$seqval, __$operation, __$update_mask,
  <captured columns>, __$command_id``, or the function's ``__$start_lsn, __$seqval,
  __$operation, __$update_mask, <captured columns>``), told apart by the number of fields,
  unless ``cdc.columns`` names them. Fields in ``cdc.null_values`` are NULL (in a ``sqlcmd``
  export, all but the empty field); bcp's NUL character is the empty string. Files are UTF-8
  (``sqlcmd -f 65001``, ``bcp -C 65001``); UTF-16 files (``bcp -w``, ``sqlcmd -u``) are
  recognised by their byte-order mark. A row that is not valid UTF-8 (a code-page export) is
  a :class:`RowReadError`, not text with replacement characters.
* **JSON.** One object per line, or one array of objects (``FOR JSON PATH``; absent keys are
  NULL, as ``FOR JSON`` leaves NULLs out), in UTF-8: a line (or an array) that is not is a
  :class:`RowReadError`. Numbers with a fraction or an exponent are read as
  :class:`~decimal.Decimal`, exactly as written.

Readers yield :class:`CdcRow` items and, for lines that cannot be read, :class:`RowReadError`
items (the caller dead-letters them and carries on).
"""

from __future__ import annotations

import codecs
import csv
import ctypes
import io
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

import msgspec

from debezium_bridge.errors import ConfigError
from debezium_bridge.formats.cdc.catalog import CaptureInstance

__all__ = ["CdcRow", "RowReadError", "is_cdc_export", "read_rows", "select_instance"]

START_LSN, END_LSN, SEQVAL = "__$start_lsn", "__$end_lsn", "__$seqval"
OPERATION, UPDATE_MASK, COMMAND_ID = "__$operation", "__$update_mask", "__$command_id"
TIME_COLUMNS = ("__$commit_time", "tran_end_time", "tran_begin_time", "__$tran_end_time",
                "__$tran_begin_time")
CAPTURE_INSTANCE_FIELD = "__$capture_instance"
_JSON_ROW = msgspec.json.Encoder(decimal_format="number")
"""Writes a row of a JSON array back (its dead-letter text) with its numbers as read."""


class CdcRow(msgspec.Struct, frozen=True, gc=False):
    """One exported change-table row: its fields by column name, and where it came from."""

    fields: Mapping[str, Any]
    """Text (CSV; ``None`` for NULL) or JSON values, by column name."""
    source: str
    """The file (or, in Spark, the change table) the row came from."""
    line: int | None
    """1-based line number of the row's first line in the file (``None``: not from a file)."""
    raw: bytes
    """The row as read (dead letters carry it)."""
    json: bool = False
    """Values are typed JSON (binary defaults to base64) rather than CSV text."""


class RowReadError(msgspec.Struct, frozen=True, gc=False):
    """A line that is not a row (wrong number of fields, invalid JSON)."""

    source: str
    line: int
    raw: bytes
    message: str


_LSN_FIELD = re.compile(rb'\s*"?(0x)?([0-9a-fA-F]{20}|[0-9a-fA-F]{8}:[0-9a-fA-F]{8}:[0-9a-fA-F]{4})'
                        rb'"?\s*[,\t|;]')


def is_cdc_export(head: bytes) -> bool:
    """Whether a file starting with ``head`` holds change-table rows: a ``__$start_lsn``
    column in its first line, or (headerless ``bcp``) a first field that is an LSN."""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        try:
            head = head.decode("utf-16").encode()
        except UnicodeDecodeError:
            return False
    first = head.lstrip(b"\xef\xbb\xbf \t\r\n[").split(b"\n", 1)[0]
    if b"__$start_lsn" in first.lower():
        return True
    return _LSN_FIELD.match(first) is not None


def _norm(name: str) -> str:
    name = name.strip().strip('"')
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    return name


def _default_columns(count: int, instance: CaptureInstance | None) -> list[str] | None:
    if instance is None:
        return None
    names = [c.name for c in instance.columns]
    n = len(names)
    if count == n + 4:
        return [START_LSN, SEQVAL, OPERATION, UPDATE_MASK, *names]
    if count == n + 5:
        return [START_LSN, END_LSN, SEQVAL, OPERATION, UPDATE_MASK, *names]
    if count == n + 6:
        return [START_LSN, END_LSN, SEQVAL, OPERATION, UPDATE_MASK, *names, COMMAND_ID]
    return None


_UTF8_BOM = b"\xef\xbb\xbf"


def _not_utf8(exc: UnicodeDecodeError) -> str:
    return (f"not UTF-8: byte 0x{exc.object[exc.start]:02X} at position {exc.start + 1} (export "
            "as UTF-8, e.g. sqlcmd -f 65001, or as UTF-16, sqlcmd -u / bcp -w)")


def _text_lines(handle: IO[bytes]) -> Iterator[tuple[str, bytes, str | None]]:
    """Each line as text, its bytes, and why it is not UTF-8 (``None`` when it is): UTF-16
    when the file starts with a byte-order mark, else UTF-8 (a byte-order mark skipped)."""
    head = handle.peek(4)[:4]  # type: ignore[attr-defined]
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        for line in codecs.getreader("utf-16")(handle):
            yield line, line.encode(), None
        return
    first = True
    for raw in handle:
        if first:
            raw, first = raw.removeprefix(_UTF8_BOM), False
        try:
            yield raw.decode(), raw, None
        except UnicodeDecodeError as exc:
            yield raw.decode(errors="replace"), raw, _not_utf8(exc)


class _Lines:
    """Physical lines for ``csv.reader``, remembering those of the current record (their bytes,
    and whether one is not UTF-8)."""

    def __init__(self, handle: IO[bytes]) -> None:
        self.text = _text_lines(handle)
        self.current: list[bytes] = []
        self.error: str | None = None
        self.number = 0

    def __iter__(self) -> Iterator[str]:
        for line, raw, error in self.text:
            self.number += 1
            self.current.append(raw)
            if error is not None and self.error is None:
                self.error = f"line {self.number}: {error}"
            yield line

    def take(self) -> tuple[bytes, str | None]:
        """The current record's bytes and error; the next record starts empty."""
        taken = b"".join(self.current), self.error
        self.current, self.error = [], None
        return taken


def select_instance(instances: Mapping[str, CaptureInstance], path: str,
                    columns: Sequence[str] | None, wanted: str | None) -> CaptureInstance | None:
    """The capture instance of a row file: ``wanted`` (``cdc.capture_instance``), the only one
    described, the one the file name names (``dbo_customers_CT.csv``), or the one whose columns
    the file has. ``None`` when none of these decides (rows may name theirs)."""
    if wanted is not None:
        found = instances.get(wanted)
        if found is None:
            raise ConfigError(f"capture instance {wanted!r} is not described "
                              f"(known: {', '.join(sorted(instances))})")
        return found
    if len(instances) == 1:
        return next(iter(instances.values()))
    stem = Path(path).name.lower()
    named = [i for name, i in instances.items() if name.lower() in stem]
    if named:
        return max(named, key=lambda i: len(i.name))
    if columns:
        have = {c.lower() for c in columns}
        matching = [i for i in instances.values()
                    if {c.name.lower() for c in i.columns} <= have
                    and not ({c for c in have if not c.startswith("__$")}
                             - {c.name.lower() for c in i.columns} - {t.lower() for t in
                                                                       TIME_COLUMNS})]
        if len(matching) == 1:
            return matching[0]
    return None


def read_rows(handle: IO[bytes], source: str, *, instances: Mapping[str, CaptureInstance],
              wanted: str | None = None, columns: Sequence[str] = (),
              null_values: Sequence[str] = ("NULL", "")
              ) -> tuple[CaptureInstance | None, Iterator[CdcRow | RowReadError]]:
    """The capture instance of the file (see :func:`select_instance`) and its rows."""
    if not hasattr(handle, "peek"):
        handle = io.BufferedReader(handle)  # type: ignore[arg-type,type-var]
    head = handle.peek(1 << 16)[: 1 << 16]  # type: ignore[attr-defined]
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if stripped[:1] in (b"{", b"["):
        return _json_rows(handle, source, instances, wanted)
    return _csv_rows(handle, source, instances, wanted, list(columns), frozenset(null_values))


def _json_rows(handle: IO[bytes], source: str, instances: Mapping[str, CaptureInstance],
               wanted: str | None
               ) -> tuple[CaptureInstance | None, Iterator[CdcRow | RowReadError]]:
    data = handle.read().removeprefix(_UTF8_BOM)
    items: list[tuple[int, bytes, Any]] = []
    if data.lstrip().startswith(b"["):
        try:
            doc = json.loads(data.decode(), parse_float=Decimal)
        except UnicodeDecodeError as exc:
            return None, iter([RowReadError(source, 1, data[:1024], _not_utf8(exc))])
        except ValueError as exc:
            error = RowReadError(source, 1, data[:1024], f"invalid JSON array: {exc}")
            return None, iter([error])
        if not isinstance(doc, list):
            return None, iter([RowReadError(source, 1, data[:1024], "not a JSON array")])
        items = [(i + 1, _JSON_ROW.encode(obj), obj) for i, obj in enumerate(doc)]
    else:
        for number, raw in enumerate(data.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                items.append((number, raw, json.loads(raw.decode(), parse_float=Decimal)))
            except UnicodeDecodeError as exc:
                items.append((number, raw, RowReadError(source, number, raw, _not_utf8(exc))))
            except ValueError as exc:
                items.append((number, raw, RowReadError(source, number, raw,
                                                        f"invalid JSON: {exc}")))
    first = next((obj for _, _, obj in items if isinstance(obj, dict)), None)
    keys = [_norm(k) for k in first] if first else None
    instance = select_instance(instances, source, keys, wanted)

    def rows() -> Iterator[CdcRow | RowReadError]:
        for number, raw, obj in items:
            if isinstance(obj, RowReadError):
                yield obj
            elif not isinstance(obj, dict):
                yield RowReadError(source, number, raw, "a JSON row must be an object")
            else:
                yield CdcRow({_norm(k): v for k, v in obj.items()}, source, number, raw, True)

    return instance, rows()


def _is_dash_line(cells: Sequence[str]) -> bool:
    return bool(cells) and all(set(c.strip()) <= {"-"} for c in cells) \
        and any(c.strip() for c in cells)


_LARGEST_FIELD = ctypes.c_ulong(-1).value // 2
"""The largest limit ``csv.field_size_limit`` takes (a C ``long``): a ``(max)`` value may hold
2 GB, far beyond the default 128 KiB."""
_AFFECTED = re.compile(r"\s*\(\d+ rows? affected\)\s*", re.I)


def _csv_rows(handle: IO[bytes], source: str, instances: Mapping[str, CaptureInstance],
              wanted: str | None, columns: list[str], nulls: frozenset[str]
              ) -> tuple[CaptureInstance | None, Iterator[CdcRow | RowReadError]]:
    csv.field_size_limit(_LARGEST_FIELD)
    lines = _Lines(handle)
    first_line = ""
    buffered: list[str] = []
    for line in lines:
        buffered.append(line)
        if line.strip():
            first_line = line
            break
    delimiter = max((",", "\t", "|", ";"), key=first_line.count) if first_line else ","

    def all_lines() -> Iterator[str]:
        yield from buffered
        yield from lines

    reader = csv.reader(all_lines(), delimiter=delimiter)
    first_cells = next(reader, None)
    header: list[str] | None = None
    skip_index = False
    pending_first: list[str] | None = None
    if first_cells is not None and any(_norm(c).lower() == START_LSN for c in first_cells):
        header = [_norm(c) for c in first_cells]
        if header and header[0].strip() in ("", "Unnamed: 0"):
            skip_index = True
            header = header[1:]
    elif first_cells is not None:
        pending_first = first_cells
    if header is None:
        if columns:
            header = list(columns)
        elif pending_first is not None:
            candidate = select_instance(instances, source, None, wanted)
            header = _default_columns(len(pending_first), candidate)
            if header is None:
                raise ConfigError(
                    f"{source}: rows without a header line and {len(pending_first)} fields: "
                    "name the columns with cdc.columns (or export with a header)")
        else:
            header = []
    instance = select_instance(instances, source, header, wanted)
    if instance is not None and header:
        _check_header(instance, header, source)
    start_line = len(buffered)
    # sqlcmd without -W pads the header too (__$start_lsn to the 22 characters of its values)
    padded = header is not None and first_cells is not None and pending_first is None \
        and any(c != c.rstrip(" ") for c in first_cells)

    def rows() -> Iterator[CdcRow | RowReadError]:
        sqlcmd = False
        sqlcmd_nulls = nulls - {""}  # sqlcmd writes NULL as NULL: an empty field is ''
        first = [] if pending_first is None else [(pending_first, start_line, *lines.take())]
        width = len(header)
        for cells, number, raw_bytes, error in _records(reader, lines, first):
            raw = raw_bytes.rstrip(b"\r\n")
            if error is not None:
                yield RowReadError(source, number, raw, error)
                continue
            if not cells or (len(cells) == 1 and not cells[0].strip()):
                continue
            if _is_dash_line(cells):
                sqlcmd = True
                continue
            if len(cells) == 1 and _AFFECTED.fullmatch(cells[0]):
                continue
            if skip_index:
                cells = cells[1:]
            if len(cells) != width:
                yield RowReadError(source, number, raw,
                                   f"{len(cells)} fields where the header has {width}")
                continue
            fields: dict[str, Any] = {}
            if sqlcmd:
                for name, cell in zip(header, cells, strict=True):
                    if padded:  # left-aligned text and right-aligned numbers and NULLs
                        cell = cell.rstrip(" ")
                    fields[name] = None if cell.lstrip(" ") in sqlcmd_nulls else cell
            else:
                for name, cell in zip(header, cells, strict=True):
                    fields[name] = None if cell in nulls else ("" if cell == "\x00" else cell)
            yield CdcRow(fields, source, number, raw, False)

    return instance, rows()


def _check_header(instance: CaptureInstance, header: Sequence[str], source: str) -> None:
    """Every captured column is a column of the change table: one the header (or
    ``cdc.columns``) lacks is an export that does not match the description."""
    have = {name.lower() for name in header}
    missing = [c.name for c in instance.columns if c.name.lower() not in have]
    if missing:
        raise ConfigError(f"{source}: no column {', '.join(map(repr, missing))} of capture "
                          f"instance {instance.name!r} (a change table has every captured "
                          "column: export them all, or describe the capture instance the "
                          "file belongs to)")


_Record = tuple[list[str], int, bytes, str | None]
"""A CSV record: its fields, first line number, bytes, and why it cannot be read (or
``None``)."""


def _records(reader: Any, lines: _Lines, first: list[_Record]) -> Iterator[_Record]:
    yield from first
    lines.take()
    while True:
        start = lines.number + 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raw, _ = lines.take()
            yield [], start, raw, f"csv error: {exc}"
            continue
        yield (cells, start, *lines.take())
