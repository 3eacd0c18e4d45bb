"""Connect values → canonical logical values (SPEC §5.1), compiled once per table version.

Canonical values are JSON-ready: integers; decimals and money as exact strings with their scale
(``"42.00"``); floats; booleans; date ``YYYY-MM-DD``; time ``HH:MM:SS[.f…]``; datetime/datetime2
``YYYY-MM-DDTHH:MM:SS[.f…]`` without zone; datetimeoffset as sent (ISO-8601 with its offset);
binary as standard base64; everything else as sent.

Fractional seconds keep the precision of the type: 3 digits for millisecond types, 6 for
microsecond types, 7 for nanosecond types (SQL Server's 100 ns tick; 9 if a value has finer
digits). When Debezium propagated the source column scale (``column.propagate.source.type``), that
scale is used instead. Digits are never dropped if that would lose a non-zero value.

Unchanged LOB columns arrive as the placeholder ``__debezium_unavailable_value`` (text, or its
bytes for binary columns); they are reported as unavailable and their image value is ``None``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import struct
from collections.abc import Callable, Mapping
from typing import Any, Literal

from debezium_bridge.errors import ValueConversionError
from debezium_bridge.schema import Column, TableSchema

DEFAULT_PLACEHOLDER = "__debezium_unavailable_value"
BinaryHandlingMode = Literal["bytes", "base64", "base64-url-safe", "hex"]

Converter = Callable[[Any], Any]

_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_BINARY_SOURCE_TYPES = frozenset({"BINARY", "VARBINARY", "IMAGE", "TIMESTAMP", "ROWVERSION"})
_DECIMAL_SOURCE_TYPES = frozenset({"DECIMAL", "NUMERIC", "MONEY", "SMALLMONEY"})

# unit per second and default fraction digits for each integer time encoding
_TIME_UNITS: dict[str, tuple[int, int]] = {
    "io.debezium.time.Time": (1_000, 3),
    "io.debezium.time.MicroTime": (1_000_000, 6),
    "io.debezium.time.NanoTime": (1_000_000_000, 7),
    "org.apache.kafka.connect.data.Time": (1_000, 3),
}
_TIMESTAMP_UNITS: dict[str, tuple[int, int]] = {
    "io.debezium.time.Timestamp": (1_000, 3),
    "io.debezium.time.MicroTimestamp": (1_000_000, 6),
    "io.debezium.time.NanoTimestamp": (1_000_000_000, 7),
    "org.apache.kafka.connect.data.Timestamp": (1_000, 3),
}
_DATE_TYPES = frozenset({"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"})
_ISO_TYPES = frozenset({"io.debezium.time.IsoDate", "io.debezium.time.IsoTime",
                        "io.debezium.time.IsoTimestamp"})
DECIMAL_SEMANTIC = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL_SEMANTIC = "io.debezium.data.VariableScaleDecimal"


def format_unscaled(unscaled: int, scale: int) -> str:
    """``unscaled * 10**-scale`` as an exact plain decimal string keeping the scale."""
    if scale <= 0:
        return str(unscaled * 10**-scale)
    digits = str(-unscaled if unscaled < 0 else unscaled).rjust(scale + 1, "0")
    text = f"{digits[:-scale]}.{digits[-scale:]}"
    return "-" + text if unscaled < 0 else text


def _bytes_of(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        try:
            return binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise ValueConversionError(f"invalid base64 {value[:40]!r}: {exc}") from exc
    raise ValueConversionError(f"expected bytes or base64 text, got {type(value).__name__}")


def _decimal_converter(scale: int) -> Converter:
    def convert(value: Any) -> str:
        if isinstance(value, str | bytes | bytearray | memoryview):
            raw = _bytes_of(value)
            if not raw:
                raise ValueConversionError("empty decimal bytes")
            return format_unscaled(int.from_bytes(raw, "big", signed=True), scale)
        if isinstance(value, decimal.Decimal):
            return format(value.quantize(decimal.Decimal(1).scaleb(-scale)), "f")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueConversionError(f"expected a decimal, got {type(value).__name__}")
        # JsonConverter decimal.format=NUMERIC: a JSON number
        return format(decimal.Decimal(repr(value)).quantize(decimal.Decimal(1).scaleb(-scale)), "f")

    return convert


def _variable_decimal(value: Any) -> str:
    if not isinstance(value, Mapping) or "scale" not in value or "value" not in value:
        raise ValueConversionError("VariableScaleDecimal must be a {scale, value} struct")
    return format_unscaled(int.from_bytes(_bytes_of(value["value"]), "big", signed=True),
                           int(value["scale"]))


def _fraction(sub: int, unit: int, digits: int) -> str:
    """``.fff`` for ``sub`` units of ``1/unit`` s, with ``digits`` digits (more if needed)."""
    full = len(str(unit)) - 1
    text = str(sub).rjust(full, "0")
    keep = text[:digits] if digits <= full else text + "0" * (digits - full)
    if digits < full and text[digits:].strip("0"):
        keep = text.rstrip("0")
    return "." + keep if keep else ""


def _time_converter(unit: int, digits: int) -> Converter:
    per_day = 86_400 * unit

    def convert(value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueConversionError(f"expected an integer time, got {value!r:.40}")
        if not 0 <= value <= per_day:
            raise ValueConversionError(f"time of day out of range: {value}")
        secs, sub = divmod(value, unit)
        h, rem = divmod(secs, 3600)
        m, s = divmod(rem, 60)
        return f"{h:02d}:{m:02d}:{s:02d}{_fraction(sub, unit, digits)}"

    return convert


def _timestamp_converter(unit: int, digits: int) -> Converter:
    per_day = 86_400 * unit

    def convert(value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueConversionError(f"expected an integer timestamp, got {value!r:.40}")
        days, rest = divmod(value, per_day)
        try:
            date = dt.date.fromordinal(_EPOCH_ORDINAL + days)
        except (ValueError, OverflowError) as exc:
            raise ValueConversionError(f"timestamp out of range: {value}") from exc
        secs, sub = divmod(rest, unit)
        h, rem = divmod(secs, 3600)
        m, s = divmod(rem, 60)
        return f"{date.isoformat()}T{h:02d}:{m:02d}:{s:02d}{_fraction(sub, unit, digits)}"

    return convert


def _date(value: Any) -> str:
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueConversionError(f"expected days since epoch, got {value!r:.40}")
    try:
        return dt.date.fromordinal(_EPOCH_ORDINAL + value).isoformat()
    except (ValueError, OverflowError) as exc:
        raise ValueConversionError(f"date out of range: {value}") from exc


def _iso_utc(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueConversionError(f"expected an ISO-8601 string, got {value!r:.40}")
    if value.endswith("Z"):
        return value[:-1]
    if value.endswith("+00:00"):
        return value[:-6]
    return value


def _base64_of_bytes(value: Any) -> str:
    if isinstance(value, str):
        _bytes_of(value)  # validate
        return value
    return base64.b64encode(_bytes_of(value)).decode("ascii")


def _binary_text_converter(mode: BinaryHandlingMode) -> Converter | None:
    if mode == "base64":
        return None
    if mode == "hex":
        def from_hex(value: Any) -> str:
            try:
                return base64.b64encode(bytes.fromhex(value)).decode("ascii")
            except (ValueError, TypeError) as exc:
                raise ValueConversionError(f"invalid hex binary {value!r:.40}") from exc
        return from_hex
    if mode == "base64-url-safe":
        def from_urlsafe(value: Any) -> str:
            try:
                raw = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
            except (ValueError, TypeError, binascii.Error) as exc:
                raise ValueConversionError(f"invalid url-safe base64 {value!r:.40}") from exc
            return base64.b64encode(raw).decode("ascii")
        return from_urlsafe
    return None


def _float32(value: Any) -> Any:
    """Shortest decimal that round-trips as float32 (what JsonConverter prints for FLOAT32)."""
    if not isinstance(value, float):
        return value
    packed = struct.pack("<f", value)
    for precision in range(6, 10):
        candidate = float(f"{value:.{precision}g}")
        if struct.pack("<f", candidate) == packed:
            return candidate
    return value


def converter_for(column: Column, binary_mode: BinaryHandlingMode = "bytes") -> Converter | None:
    """The converter of one column, or ``None`` when values pass through unchanged."""
    semantic = column.semantic
    scale = column.source_scale
    if semantic == DECIMAL_SEMANTIC:
        try:
            return _decimal_converter(int(column.parameters.get("scale", "0")))
        except ValueError as exc:
            raise ValueConversionError(f"bad Decimal scale on column {column.name!r}") from exc
    if semantic == VARIABLE_DECIMAL_SEMANTIC:
        return _variable_decimal
    if semantic in _TIMESTAMP_UNITS:
        unit, digits = _TIMESTAMP_UNITS[semantic]
        return _timestamp_converter(unit, digits if scale is None else scale)
    if semantic in _TIME_UNITS:
        unit, digits = _TIME_UNITS[semantic]
        return _time_converter(unit, digits if scale is None else scale)
    if semantic in _DATE_TYPES:
        return _date
    if semantic in _ISO_TYPES:
        return _iso_utc
    if column.connect_type == "bytes":
        return _base64_of_bytes
    if column.connect_type == "float32":
        return _float32
    source_type = column.source_type
    if column.connect_type == "string" and source_type in _BINARY_SOURCE_TYPES:
        return _binary_text_converter(binary_mode)
    if column.connect_type == "float64" and source_type in _DECIMAL_SOURCE_TYPES \
            and scale is not None:
        # decimal.handling.mode=double with propagated source type: render at the column scale
        return lambda value: f"{value:.{scale}f}" if isinstance(value, float | int) else value
    return None


class RowDecoder:
    """Converts row images of one table version to canonical values.

    Built once per table version; :meth:`decode` mutates and returns the row dict it is given.
    """

    __slots__ = ("_binary_columns", "_converters", "_placeholder", "_placeholder_b64",
                 "_placeholder_bytes", "_text_columns", "schema")

    def __init__(self, schema: TableSchema, *, placeholder: str = DEFAULT_PLACEHOLDER,
                 binary_mode: BinaryHandlingMode = "bytes") -> None:
        self.schema = schema
        self._placeholder = placeholder
        self._placeholder_b64 = base64.b64encode(placeholder.encode()).decode("ascii")
        self._placeholder_bytes = placeholder.encode()
        self._converters = tuple(
            (c.name, conv) for c in schema.columns
            if (conv := converter_for(c, binary_mode)) is not None
        )
        self._text_columns = tuple(c.name for c in schema.columns if c.connect_type == "string")
        self._binary_columns = tuple(c.name for c in schema.columns if c.connect_type == "bytes")

    def decode(self, row: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
        """Canonical row and the names of unavailable (placeholder) columns."""
        unavailable: tuple[str, ...] = ()
        placeholder = self._placeholder
        values = row.values()
        # each column scan below only finds something if its marker is among the values at all
        if self._text_columns and placeholder in values:
            for name in self._text_columns:
                if row.get(name) == placeholder:
                    row[name] = None
                    unavailable += (name,)
        if self._binary_columns and (self._placeholder_b64 in values
                                     or self._placeholder_bytes in values):
            for name in self._binary_columns:
                value = row.get(name)
                if value == self._placeholder_b64 or value == self._placeholder_bytes:
                    row[name] = None
                    unavailable += (name,)
        if not self._converters:
            return row, unavailable
        get = row.get
        for name, convert in self._converters:
            value = get(name)
            if value is not None:
                try:
                    row[name] = convert(value)
                except ValueConversionError as exc:
                    exc.message = f"column {name!r}: {exc.message}"
                    raise
        return row, unavailable


class SchemalessRowDecoder:
    """Rows without a schema: values pass through; only the LOB placeholder is recognised."""

    __slots__ = ("_markers",)

    def __init__(self, *, placeholder: str = DEFAULT_PLACEHOLDER) -> None:
        self._markers = (placeholder, base64.b64encode(placeholder.encode()).decode("ascii"))

    def decode(self, row: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
        markers = self._markers
        values = row.values()
        if markers[0] not in values and markers[1] not in values:
            return row, ()
        unavailable = tuple(k for k, v in row.items() if v.__class__ is str and v in markers)
        for name in unavailable:
            row[name] = None
        return row, unavailable
