"""Readers and writers of Kafka topic-dump files (used by ``debezium-bridge convert``).

Three line formats, detected per file (or forced by the caller):

* ``lossless`` -- our own JSON lines, byte-exact: ``{"topic", "partition", "offset",
  "timestamp", "headers": [[name, base64|null], ...], "key_b64", "value_b64"}``.
* ``kcat`` -- ``kcat -C -J`` output (see ``fmt_msg_output_json`` in edenhill/kcat ``json.c``).
* ``text`` -- kafka-console-consumer output: ``value`` or ``key<SEP>value`` per line, ``null``
  meaning a null key/value.  Also RisingWave's ``key^value`` test files whose first line is
  ``keyschema^valueschema`` (Avro schemas, exposed as :attr:`DumpReader.avro_schemas`).

Readers yield :class:`RawRecord` items, and a :class:`DumpLineError` for each line that cannot be
read, so that the caller can dead-letter it and carry on.
"""

from __future__ import annotations

import enum
import itertools
import json
import os
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO

import msgspec

from debezium_bridge.errors import ConfigError
from debezium_bridge.model.records import Header, Int64, KafkaRecord, Partition, RawRecord

__all__ = [
    "DumpFormat",
    "DumpLineError",
    "DumpReader",
    "detect_format",
    "read_dump",
    "read_dumps",
    "record_of_line",
    "to_lossless_line",
    "write_lossless",
]

Source = str | os.PathLike[str] | BinaryIO
"""A dump file path, ``-`` for stdin, or an open binary stream."""

_SNIFF_LINES = 8
"""How many non-blank lines to look at when the first ones do not decide the format."""

_READ_BUFFER = 1 << 20
"""Read buffer for dump files: a large one makes line iteration about 3x faster."""

_TEXT_SUFFIXES = frozenset({".txt", ".json", ".jsonl", ".ndjson", ".log", ".out", ".dump", ".tsv"})
"""File-name suffixes dropped when deriving a topic name (topic names contain dots)."""


class DumpFormat(enum.Enum):
    """The line format of a dump file."""

    LOSSLESS = "lossless"
    KCAT = "kcat"
    TEXT = "text"


class DumpLineError(msgspec.Struct, frozen=True, gc=False):
    """A dump line that could not be read; yielded in the record stream instead of raised."""

    path: str
    line_no: int
    """1-based physical line number in the file."""
    raw: bytes
    """The line without its line terminator."""
    message: str


class _LosslessLine(msgspec.Struct, kw_only=True, gc=False):
    topic: str
    partition: Partition
    offset: Int64 | None = None
    timestamp: Int64 | None = None
    headers: tuple[Header, ...] = ()
    key_b64: bytes | None  # msgspec (de)serialises ``bytes`` as padded base64
    value_b64: bytes | None  # required: a missing value must not read as a tombstone


_KcatHeaders = list[str | None] | dict[str, str | list[str | None] | None] | None


class _KcatLine(msgspec.Struct, gc=False):
    topic: str
    partition: Partition
    offset: Int64
    key: Any
    payload: Any
    ts: Int64 | None = None
    headers: _KcatHeaders = None
    key_error: str | None = None
    payload_error: str | None = None


_LOSSLESS_DECODER = msgspec.json.Decoder(_LosslessLine)
_KCAT_DECODER = msgspec.json.Decoder(_KcatLine)
_ENCODER = msgspec.json.Encoder()


def _sniff(line: bytes) -> DumpFormat | None:
    """The format a non-blank line shows, or ``None`` if it starts like JSON but is not."""
    if not line.lstrip().startswith(b"{"):
        return DumpFormat.TEXT
    try:
        obj = msgspec.json.decode(line)
    except (ValueError, RecursionError):  # not JSON, or nested deeper than msgspec reads
        return None
    if not isinstance(obj, dict):
        return DumpFormat.TEXT
    if "key_b64" in obj or "value_b64" in obj:
        return DumpFormat.LOSSLESS
    if "payload" in obj and "partition" in obj and "offset" in obj:
        return DumpFormat.KCAT
    return DumpFormat.TEXT


def detect_format(first_line: bytes) -> DumpFormat:
    """The format of a dump whose first non-blank line is ``first_line``."""
    return _sniff(first_line) or DumpFormat.TEXT


def _avro_record_schema(text: bytes) -> dict[str, Any] | None:
    try:
        obj = msgspec.json.decode(text)
    except (ValueError, RecursionError):
        return None
    is_record = isinstance(obj, dict) and obj.get("type") == "record"
    return obj if is_record and isinstance(obj.get("fields"), list) else None


def _topic_from_path(path: str) -> str:
    """``dir/server1.testDB.dbo.customers.txt`` -> ``server1.testDB.dbo.customers``.

    Only a known dump suffix or a numeric one (``.1``) is dropped, since topic names contain dots.
    """
    p = Path(path)
    if p.suffix.lower() in _TEXT_SUFFIXES or p.suffix[1:].isdigit():
        return p.stem
    return p.name


def _kcat_bytes(value: Any) -> bytes | None:
    """kcat writes key and payload as JSON strings of the raw bytes (or verbatim JSON with ``-s
    avro``); yajl passes non-UTF-8 bytes through, which the slow path maps to surrogates."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    return _ENCODER.encode(value)


def _kcat_headers(headers: _KcatHeaders) -> tuple[Header, ...]:
    """kcat's ``[name1, value1, name2, value2, ...]`` (null value = null header), or the map form
    ``{name: value}`` / ``{name: [values]}`` of some kcat builds."""
    if not headers:
        return ()
    pairs: list[tuple[str | None, str | None]]
    if isinstance(headers, list):
        if len(headers) % 2:
            raise ValueError("kcat headers array has an odd number of items")
        pairs = list(zip(headers[::2], headers[1::2], strict=True))
    else:
        pairs = [
            (name, value)
            for name, values in headers.items()
            for value in (values if isinstance(values, list) else [values])
        ]
    out: list[Header] = []
    for name, value in pairs:
        if name is None:
            raise ValueError("kcat header name is null")
        out.append((name, _kcat_bytes(value)))
    return tuple(out)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _kcat_record(line: bytes) -> RawRecord:
    try:
        k = _KCAT_DECODER.decode(line)
    except (UnicodeDecodeError, msgspec.DecodeError):  # msgspec 0.23 raises the latter
        if _is_utf8(line):
            raise
        # kcat does not validate UTF-8: binary keys/values land in the line as raw bytes.
        k = msgspec.convert(json.loads(line.decode("utf-8", "surrogateescape")), _KcatLine)
    if k.key_error is not None:
        raise ValueError(f"kcat could not deserialize the key: {k.key_error}")
    if k.payload_error is not None:
        raise ValueError(f"kcat could not deserialize the payload: {k.payload_error}")
    return RawRecord(
        k.topic,
        k.partition,
        k.offset,
        k.ts,
        _kcat_bytes(k.key),
        _kcat_bytes(k.payload),
        _kcat_headers(k.headers),
    )


def record_of_line(line: bytes, fmt: DumpFormat) -> RawRecord:
    """One non-blank lossless or kcat line (without its line terminator) as a record; raises
    :class:`ValueError` with the message a :class:`DumpLineError` carries."""
    if fmt is DumpFormat.LOSSLESS:
        try:
            r = _LOSSLESS_DECODER.decode(line)
        except (ValueError, RecursionError) as exc:  # nesting deeper than msgspec reads
            raise ValueError(f"invalid lossless line: {exc}") from exc
        return RawRecord(
            r.topic, r.partition, r.offset, r.timestamp, r.key_b64, r.value_b64, r.headers
        )
    if fmt is DumpFormat.KCAT:
        try:
            return _kcat_record(line)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"invalid kcat line: {exc}") from exc
    raise ValueError(f"not a line format: {fmt}")


class DumpReader:
    """A single-pass iterable of ``RawRecord | DumpLineError`` over one dump file.

    The format, the topic of a text dump and (for RisingWave files) the Avro schemas are known as
    soon as the reader is built. ``bytes_read`` / ``total_bytes`` (``None`` unless the source is
    a regular file) serve a progress bar. A reader that opened its file closes it when exhausted
    or on :meth:`close`.
    """

    def __init__(
        self,
        source: Source,
        *,
        fmt: DumpFormat | None = None,
        topic: str | None = None,
        key_separator: str | None = None,
        partition: int = 0,
    ) -> None:
        if key_separator == "":
            raise ConfigError("the key separator must not be empty")
        self._owned = False
        self._file: BinaryIO
        if not isinstance(source, str | os.PathLike):
            self.path, self._file = str(getattr(source, "name", "<stream>")), source
        elif (path := os.fspath(source)) == "-":
            self.path, self._file = "<stdin>", sys.stdin.buffer
        else:
            self.path, self._owned = path, True
            self._file = open(path, "rb", buffering=_READ_BUFFER)  # noqa: SIM115 - see close()
        try:
            self.total_bytes = self._regular_file_size()
            self.bytes_read = 0
            self.avro_schemas: dict[str, Any] = {}
            self._partition = partition
            self._separator = key_separator.encode() if key_separator is not None else None
            self._pending: list[tuple[int, bytes]] = []
            self._next_line_no = 1
            self.format = self._peek(fmt)
            self.topic = topic
            if self.format is DumpFormat.TEXT:
                self._init_text()
        except BaseException:
            self.close()
            raise

    def _regular_file_size(self) -> int | None:
        try:
            st = os.fstat(self._file.fileno())
        except (OSError, AttributeError, ValueError):
            return None
        return st.st_size if stat.S_ISREG(st.st_mode) else None

    def _peek(self, fmt: DumpFormat | None) -> DumpFormat:
        """Read the first line(s) into ``_pending``: enough non-blank ones to tell the format."""
        found = fmt
        non_blank = 0
        for line in self._file:
            self._pending.append((self._next_line_no, line))
            self._next_line_no += 1
            if line.isspace():
                continue
            non_blank += 1
            found = found or _sniff(line)
            if found is not None or non_blank >= _SNIFF_LINES:
                break
        return found or DumpFormat.TEXT

    def _init_text(self) -> None:
        """Resolve the topic; consume a leading ``keyschema<SEP>valueschema`` Avro schema line."""
        if self.topic is None:
            if not self._owned:
                raise ConfigError(f"{self.path}: a topic is required to read a text dump stream")
            self.topic = _topic_from_path(self.path)
        index = next((i for i, (_, ln) in enumerate(self._pending) if not ln.isspace()), None)
        if index is None:
            return
        line = self._pending[index][1]
        body = line.rstrip(b"\r\n")
        sep = self._separator if self._separator is not None else b"^"
        schemas = [_avro_record_schema(part) for part in body.split(sep, 1)]
        if not all(schemas):
            return
        if len(schemas) == 2:
            self.avro_schemas[f"{self.topic}-key"] = schemas[0]
            self._separator = sep
        self.avro_schemas[f"{self.topic}-value"] = schemas[-1]
        self.bytes_read += len(line)
        del self._pending[index]

    def __iter__(self) -> Iterator[RawRecord | DumpLineError]:
        lines = itertools.chain(self._pending, enumerate(self._file, self._next_line_no))
        self._pending = []
        if self.format is DumpFormat.LOSSLESS:
            gen = self._iter_lossless(lines)
        elif self.format is DumpFormat.KCAT:
            gen = self._iter_kcat(lines)
        else:
            gen = self._iter_text(lines)
        try:
            yield from gen
        finally:
            self.close()

    def _error(self, line_no: int, line: bytes, message: str) -> DumpLineError:
        return DumpLineError(self.path, line_no, line.rstrip(b"\r\n"), message)

    def _iter_lossless(
        self, lines: Iterable[tuple[int, bytes]]
    ) -> Iterator[RawRecord | DumpLineError]:
        lossless = DumpFormat.LOSSLESS
        for line_no, line in lines:
            self.bytes_read += len(line)
            try:
                yield record_of_line(line.rstrip(b"\r\n"), lossless)
            except ValueError as exc:
                if not line.isspace():
                    yield self._error(line_no, line, str(exc))

    def _iter_kcat(self, lines: Iterable[tuple[int, bytes]]) -> Iterator[RawRecord | DumpLineError]:
        kcat = DumpFormat.KCAT
        for line_no, line in lines:
            self.bytes_read += len(line)
            if line.isspace():
                continue
            try:
                yield record_of_line(line.rstrip(b"\r\n"), kcat)
            except ValueError as exc:
                yield self._error(line_no, line, str(exc))

    def _iter_text(self, lines: Iterable[tuple[int, bytes]]) -> Iterator[RawRecord]:
        topic, partition, sep = self.topic or "", self._partition, self._separator
        offset = 0
        for _, line in lines:
            self.bytes_read += len(line)
            body = line.rstrip(b"\r\n")
            if not body or body.isspace():
                continue
            key: bytes | None = None
            value: bytes | None = body
            if sep is not None:
                head, found, tail = body.partition(sep)
                if found:
                    key = None if head == b"null" else head
                    value = tail
            if not value or value == b"null":
                value = None
            yield RawRecord(topic, partition, offset, None, key, value)
            offset += 1

    def close(self) -> None:
        """Close the file if this reader opened it."""
        if self._owned:
            self._file.close()

    def __enter__(self) -> DumpReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def read_dump(
    source: Source,
    *,
    fmt: DumpFormat | None = None,
    topic: str | None = None,
    key_separator: str | None = None,
    partition: int = 0,
) -> DumpReader:
    """Open one dump (a path, ``-`` for stdin, or a binary stream) and detect its format.

    ``topic`` (default: the file name without its dump suffix), ``key_separator`` (default: none,
    i.e. value-only lines, or ``^`` after a RisingWave schema line) and ``partition`` apply to
    text dumps only; lossless and kcat lines carry their own coordinates.
    """
    return DumpReader(
        source, fmt=fmt, topic=topic, key_separator=key_separator, partition=partition
    )


def read_dumps(
    sources: Sequence[Source],
    *,
    fmt: DumpFormat | None = None,
    topic: str | None = None,
    key_separator: str | None = None,
    partition: int = 0,
) -> Iterator[RawRecord | DumpLineError]:
    """Read several dumps as one stream, in the given order (each file detected on its own)."""
    for source in sources:
        with read_dump(
            source, fmt=fmt, topic=topic, key_separator=key_separator, partition=partition
        ) as reader:
            yield from reader


def _lossless_struct(record: KafkaRecord) -> _LosslessLine:
    return _LosslessLine(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        timestamp=record.timestamp,
        headers=tuple(record.headers),
        key_b64=record.key,
        value_b64=record.value,
    )


def to_lossless_line(record: KafkaRecord) -> bytes:
    """One lossless dump line (with its trailing newline) for ``record``."""
    return _ENCODER.encode(_lossless_struct(record)) + b"\n"


def write_lossless(records: Iterable[KafkaRecord], out: BinaryIO) -> int:
    """Write ``records`` as lossless dump lines to ``out``; returns how many were written."""
    encode_into = _ENCODER.encode_into
    buf = bytearray()
    count = 0
    for record in records:
        encode_into(_lossless_struct(record), buf, len(buf))
        buf += b"\n"
        count += 1
        if len(buf) >= 1 << 16:
            out.write(buf)
            buf.clear()
    out.write(buf)
    return count
