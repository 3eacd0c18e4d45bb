"""SQL Server column types → Kafka Connect schemas and values, as the Debezium connector makes them.

Sources (debezium/debezium): ``sqlserver/SqlServerValueConverters.java``,
``jdbc/JdbcValueConverters.java#schemaBuilder``, ``jdbc/TemporalPrecisionMode.java``,
``io/debezium/time/*.java``, ``relational/mapping/PropagateSourceTypeToSchemaParameter.java``;
Kafka's ``JsonConverter#asJsonSchema`` for the JSON schema form and Confluent's
``AvroData#fromConnectSchema`` for the Avro form.

Connect types are ``Schema.Type`` names (``float64``) in :class:`Column`; the JsonConverter
schemas written here spell them as Kafka does (``"double"``, see
:func:`debezium_bridge.model.schema.json_type_name`), and the Avro schemas map them as
``AvroData`` does.

Canonical input values are the canonical logical values (docs/canonical.md) (see
:mod:`debezium_bridge.formats.debezium.logical` for the reverse direction): integers, decimals as
exact strings (``"42.00"``), floats, booleans, ``YYYY-MM-DD``, ``HH:MM:SS[.f…]``,
``YYYY-MM-DDTHH:MM:SS[.f…]`` (no zone, taken as UTC), datetimeoffset as ISO-8601 with offset,
binary as standard base64, uniqueidentifier text.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import re
import struct
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from debezium_bridge.errors import SchemaError, ValueConversionError
from debezium_bridge.model.schema import (
    SOURCE_LENGTH_PARAM,
    SOURCE_SCALE_PARAM,
    SOURCE_TYPE_PARAM,
    Column,
)

TimePrecisionMode = Literal["adaptive", "adaptive_time_microseconds", "connect", "isostring"]
DecimalHandlingMode = Literal["precise", "double", "string"]
BinaryHandlingMode = Literal["bytes", "base64", "base64-url-safe", "hex"]

UNAVAILABLE_VALUE = "__debezium_unavailable_value"
"""Debezium's default ``unavailable.value.placeholder`` (3.6+ for unchanged LOB columns)."""
UNAVAILABLE_BYTES = UNAVAILABLE_VALUE.encode()
MAX = -1
"""``SqlColumn.length`` for ``(max)`` types."""

DECIMAL = "org.apache.kafka.connect.data.Decimal"
KAFKA_DATE = "org.apache.kafka.connect.data.Date"
KAFKA_TIME = "org.apache.kafka.connect.data.Time"
KAFKA_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
PRECISION_PARAM = "connect.decimal.precision"

Encoder = Callable[[Any], Any]


class ConnectorModes(msgspec.Struct, frozen=True):
    """The connector options that change column schemas and values."""

    time_precision_mode: TimePrecisionMode = "adaptive"
    decimal_handling_mode: DecimalHandlingMode = "precise"
    binary_handling_mode: BinaryHandlingMode = "bytes"
    propagate_source_types: bool = False
    """As ``column.propagate.source.type=.*``: add ``__debezium.source.column.*`` parameters."""


DEFAULT_MODES = ConnectorModes()


class SqlColumn(msgspec.Struct, frozen=True):
    """One SQL Server column.

    ``sql_type`` is a type name (``decimal``) or a full declaration (``decimal(10,2)``,
    ``nvarchar(max)``, ``datetime2(3)``); sizes in parentheses win over the fields. ``length`` is
    the character/byte length (:data:`MAX` for ``(max)``); ``precision``/``scale`` are the decimal
    ones; the fractional-second precision of ``time``/``datetime2``/``datetimeoffset`` is ``scale``
    (SQL Server's catalog calls it that), default 7.
    """

    name: str
    sql_type: str
    precision: int | None = None
    scale: int | None = None
    length: int | None = None
    nullable: bool = True


class ColumnSpec(msgspec.Struct, frozen=True):
    base: str
    precision: int | None
    scale: int | None
    length: int | None


_DECL = re.compile(r"\s*([A-Za-z0-9_]+)\s*(?:\(\s*(max|\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*", re.I)
_INTEGERS = {"bit": "boolean", "tinyint": "int16", "smallint": "int16", "int": "int32",
             "bigint": "int64"}
_STRINGS = frozenset({"char", "varchar", "nchar", "nvarchar", "text", "ntext"})
_BINARIES = frozenset({"binary", "varbinary", "image", "rowversion", "timestamp"})
_DECIMALS = frozenset({"decimal", "numeric", "money", "smallmoney"})
_TEMPORAL_WITH_PRECISION = frozenset({"time", "datetime2", "datetimeoffset"})
# JDBC metadata (COLUMN_SIZE, DECIMAL_DIGITS) that the SQL Server driver reports for fixed types
_FIXED_META: dict[str, tuple[int, int | None]] = {
    "bit": (1, None), "tinyint": (3, 0), "smallint": (5, 0), "int": (10, 0), "bigint": (19, 0),
    "money": (19, 4), "smallmoney": (10, 4), "real": (24, None), "uniqueidentifier": (36, None),
    "date": (10, None), "datetime": (23, 3), "smalldatetime": (16, 0), "text": (2147483647, None),
    "ntext": (1073741823, None), "image": (2147483647, None), "xml": (1073741823, None),
    "rowversion": (8, None), "timestamp": (8, None),
}
_MAX_LENGTH = {"varchar": 2147483647, "nvarchar": 1073741823, "varbinary": 2147483647}


def column_spec(col: SqlColumn) -> ColumnSpec:
    m = _DECL.fullmatch(col.sql_type)
    if m is None:
        raise SchemaError(f"column {col.name!r}: cannot parse SQL type {col.sql_type!r}")
    base = m.group(1).lower()
    size, second = m.group(2), m.group(3)
    if size is not None and size.lower() == "max" and base not in _MAX_LENGTH:
        raise SchemaError(f"column {col.name!r}: {base}(max) does not exist")
    if base in ("decimal", "numeric"):
        if size is not None:
            return ColumnSpec(base, int(size), int(second or 0), None)
        return ColumnSpec(base, col.precision or 18, col.scale or 0, None)
    if base in ("money", "smallmoney"):
        return ColumnSpec(base, 19 if base == "money" else 10, 4, None)
    if base == "float":
        n = int(size) if size is not None else (col.precision or 53)
        return ColumnSpec("real" if n <= 24 else "float", 24 if n <= 24 else 53, None, None)
    if base in _TEMPORAL_WITH_PRECISION:
        if size is not None:
            p = int(size)
        elif col.scale is not None:
            p = col.scale
        elif col.precision is not None and col.precision <= 7:
            p = col.precision
        else:
            p = 7
        if not 0 <= p <= 7:
            raise SchemaError(f"column {col.name!r}: fractional precision {p} not in 0..7")
        return ColumnSpec(base, None, p, None)
    if base in ("char", "varchar", "nchar", "nvarchar", "binary", "varbinary"):
        if size is not None:
            length = MAX if size.lower() == "max" else int(size)
        else:
            length = col.length if col.length is not None else 1
        return ColumnSpec(base, None, None, length)
    if base in _INTEGERS or base in _FIXED_META:
        return ColumnSpec(base, None, None, None)
    raise SchemaError(f"column {col.name!r}: unsupported SQL Server type {col.sql_type!r}")


def _source_meta(spec: ColumnSpec) -> tuple[int | None, int | None]:
    base = spec.base
    if base in ("decimal", "numeric"):
        return spec.precision, spec.scale
    if base == "float":
        return 53, None
    if base in ("char", "varchar", "nchar", "nvarchar", "binary", "varbinary"):
        return (_MAX_LENGTH[base] if spec.length == MAX else spec.length), None
    if base in _TEMPORAL_WITH_PRECISION:
        p = spec.scale or 0
        width = {"time": 8, "datetime2": 19, "datetimeoffset": 26}[base]
        return width + (p + 1 if p else 0), p
    return _FIXED_META.get(base, (None, None))


def connect_column(col: SqlColumn, modes: ConnectorModes = DEFAULT_MODES) -> Column:
    """The Connect field schema Debezium's SQL Server connector builds for ``col``."""
    spec = column_spec(col)
    base = spec.base
    ctype: str
    semantic: str | None = None
    params: dict[str, str] = {}
    time_mode = modes.time_precision_mode
    if base in _INTEGERS:
        ctype = _INTEGERS[base]
    elif base in _DECIMALS:
        mode = modes.decimal_handling_mode
        if mode == "precise":
            ctype, semantic = "bytes", DECIMAL
            params = {"scale": str(spec.scale), PRECISION_PARAM: str(spec.precision)}
        else:
            ctype = "float64" if mode == "double" else "string"
    elif base == "real":
        ctype = "float32"
    elif base == "float":
        ctype = "float64"
    elif base in _STRINGS or base == "uniqueidentifier":
        ctype = "string"
    elif base == "xml":
        ctype, semantic = "string", "io.debezium.data.Xml"
    elif base in _BINARIES:
        ctype = "bytes" if modes.binary_handling_mode == "bytes" else "string"
    elif base == "datetimeoffset":
        ctype, semantic = "string", "io.debezium.time.ZonedTimestamp"
    elif base == "date":
        ctype, semantic = {
            "connect": ("int32", KAFKA_DATE),
            "isostring": ("string", "io.debezium.time.IsoDate"),
        }.get(time_mode, ("int32", "io.debezium.time.Date"))
    elif base == "time":
        ctype, semantic = _time_schema(time_mode, spec.scale or 0)
    else:  # datetime, smalldatetime, datetime2
        precision = spec.scale if base == "datetime2" else (3 if base == "datetime" else 0)
        ctype, semantic = _timestamp_schema(time_mode, precision or 0)
    if modes.propagate_source_types:
        params[SOURCE_TYPE_PARAM] = base.upper()
        length, scale = _source_meta(spec)
        if length is not None:
            params[SOURCE_LENGTH_PARAM] = str(length)
        if scale is not None:
            params[SOURCE_SCALE_PARAM] = str(scale)
    return Column(
        name=col.name,
        connect_type=ctype,
        semantic=semantic,
        optional=col.nullable,
        parameters=params,
        version=1 if semantic is not None else None,
    )


def _time_schema(mode: TimePrecisionMode, precision: int) -> tuple[str, str]:
    if mode == "connect":
        return "int32", KAFKA_TIME
    if mode == "isostring":
        return "string", "io.debezium.time.IsoTime"
    if mode == "adaptive_time_microseconds" or 4 <= precision <= 6:
        return "int64", "io.debezium.time.MicroTime"
    if precision <= 3:
        return "int32", "io.debezium.time.Time"
    return "int64", "io.debezium.time.NanoTime"


def _timestamp_schema(mode: TimePrecisionMode, precision: int) -> tuple[str, str]:
    if mode == "connect":
        return "int64", KAFKA_TIMESTAMP
    if mode == "isostring":
        return "string", "io.debezium.time.IsoTimestamp"
    if precision <= 3:
        return "int64", "io.debezium.time.Timestamp"
    if precision <= 6:
        return "int64", "io.debezium.time.MicroTimestamp"
    return "int64", "io.debezium.time.NanoTimestamp"


# --------------------------------------------------------------------------- values

_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()
_NS_PER_DAY = 86_400 * 10**9
_INT64 = (-(2**63), 2**63 - 1)
_TIME_RE = re.compile(r"(\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")
_TS_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?")
_DTO_RE = re.compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}:\d{2})", re.I
)
# unit divisor from nanoseconds for each integer time encoding
_TIME_DIVISORS = {"io.debezium.time.Time": 10**6, KAFKA_TIME: 10**6,
                  "io.debezium.time.MicroTime": 1000, "io.debezium.time.NanoTime": 1}
_TIMESTAMP_DIVISORS = {"io.debezium.time.Timestamp": 10**6, KAFKA_TIMESTAMP: 10**6,
                       "io.debezium.time.MicroTimestamp": 1000, "io.debezium.time.NanoTimestamp": 1}


def _fraction_ns(digits: str | None) -> int:
    return int(digits.ljust(9, "0")) if digits else 0


def _java_fraction(ns: int) -> str:
    """Java ``appendFraction(NANO_OF_SECOND, 0, 9, true)``: trailing zeros dropped."""
    return "." + f"{ns:09d}".rstrip("0") if ns else ""


def time_nanos(text: str) -> int:
    """Nanoseconds since midnight of ``HH:MM:SS[.f…]``."""
    m = _TIME_RE.fullmatch(text)
    if m is None:
        raise ValueConversionError(f"invalid time {text!r}")
    h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if h > 23 or mi > 59 or s > 59:
        raise ValueConversionError(f"time out of range {text!r}")
    return (h * 3600 + mi * 60 + s) * 10**9 + _fraction_ns(m.group(4))


def timestamp_nanos(text: str) -> int:
    """Nanoseconds since the epoch of ``YYYY-MM-DDTHH:MM:SS[.f…]`` taken as UTC (exact)."""
    m = _TS_RE.fullmatch(text)
    if m is None:
        raise ValueConversionError(f"invalid timestamp {text!r}")
    try:
        days = dt.date(int(m.group(1)), int(m.group(2)), int(m.group(3))).toordinal()
    except ValueError as exc:
        raise ValueConversionError(f"invalid timestamp {text!r}: {exc}") from exc
    h, mi, s = int(m.group(4)), int(m.group(5)), int(m.group(6))
    if h > 23 or mi > 59 or s > 59:
        raise ValueConversionError(f"time out of range {text!r}")
    day_ns = (h * 3600 + mi * 60 + s) * 10**9 + _fraction_ns(m.group(7))
    return (days - _EPOCH_ORDINAL) * _NS_PER_DAY + day_ns


def date_days(text: str) -> int:
    """Days since 1970-01-01 of ``YYYY-MM-DD``."""
    try:
        return dt.date.fromisoformat(text).toordinal() - _EPOCH_ORDINAL
    except (ValueError, TypeError) as exc:
        raise ValueConversionError(f"invalid date {text!r}") from exc


def zoned_timestamp(text: str) -> str:
    """A datetimeoffset as ``ZonedTimestamp`` writes it (Java ``ISO_OFFSET_DATE_TIME``)."""
    m = _DTO_RE.fullmatch(text.strip())
    if m is None:
        raise ValueConversionError(f"invalid datetimeoffset {text!r}")
    offset = m.group(4).upper()
    if offset in ("+00:00", "-00:00"):
        offset = "Z"
    return f"{m.group(1)}T{m.group(2)}{_java_fraction(_fraction_ns(m.group(3)))}{offset}"


def decimal_unscaled(value: Any, scale: int) -> int:
    """The unscaled integer of a decimal value at ``scale``; refuses to drop non-zero digits."""
    if isinstance(value, bool):
        raise ValueConversionError(f"expected a decimal, got {value!r}")
    if isinstance(value, int):
        return value * 10**scale
    if isinstance(value, decimal.Decimal):
        value = format(value, "f")
    if not isinstance(value, str):
        raise ValueConversionError(f"expected a decimal string, got {type(value).__name__}")
    text = value.strip()
    negative = text.startswith("-")
    whole, _, frac = text.lstrip("+-").partition(".")
    if not (whole + frac).isascii() or not (whole + frac).isdigit():
        raise ValueConversionError(f"invalid decimal {value!r}")
    if len(frac) > scale:
        if frac[scale:].strip("0"):
            raise ValueConversionError(f"decimal {value!r} has more than {scale} fraction digits")
        frac = frac[:scale]
    unscaled = int((whole or "0") + frac.ljust(scale, "0"))
    return -unscaled if negative else unscaled


def decimal_bytes(unscaled: int) -> bytes:
    """Java ``BigInteger.toByteArray()``: minimal big-endian two's complement."""
    bits = (~unscaled if unscaled < 0 else unscaled).bit_length()
    return unscaled.to_bytes(bits // 8 + 1, "big", signed=True)


def format_decimal(unscaled: int, scale: int) -> str:
    """``BigDecimal.toPlainString()`` of ``unscaled * 10**-scale``."""
    if scale <= 0:
        return str(unscaled)
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    return ("-" if unscaled < 0 else "") + f"{digits[:-scale]}.{digits[-scale:]}"


def float32(value: Any) -> float:
    """The shortest decimal that round-trips through IEEE float32 (Java ``Float.toString``)."""
    f = struct.unpack("<f", struct.pack("<f", float(value)))[0]
    if len(repr(f).lstrip("-0.").replace(".", "").partition("e")[0].rstrip("0")) <= 6:
        return f  # float32 round-trips every 6-digit decimal, so none shorter maps to f
    for digits in range(1, 10):
        candidate = float(f"{f:.{digits}g}")
        try:
            if struct.unpack("<f", struct.pack("<f", candidate))[0] == f:
                return candidate
        except OverflowError:
            continue
    return f


def _binary_of(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if not isinstance(value, str):
        raise ValueConversionError(f"expected base64 text, got {type(value).__name__}")
    try:
        return binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise ValueConversionError(f"invalid base64 {value[:40]!r}") from exc


_BINARY_TEXT: dict[str, Callable[[bytes], str]] = {
    "base64": lambda b: base64.b64encode(b).decode("ascii"),
    "base64-url-safe": lambda b: base64.urlsafe_b64encode(b).decode("ascii"),
    "hex": bytes.hex,
}


def _int_encoder(bits: int) -> Encoder:
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def encode(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueConversionError(f"expected an int{bits}, got {value!r}")
        return value

    return encode


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if value in (0, 1):
        return bool(value)
    raise ValueConversionError(f"expected a boolean, got {value!r}")


def _checked_int64(value: int) -> int:
    if not _INT64[0] <= value <= _INT64[1]:
        raise ValueConversionError(f"{value} does not fit INT64 (Debezium fails on it too)")
    return value


def _in_units(ns: int, div: int, semantic: str, value: Any) -> int:
    """``ns`` in the units of ``semantic``. Debezium's own types (``time.precision.mode``
    adaptive) are chosen to hold the column's digits, so a value they cannot hold exactly is
    refused, not cut (it was read with another column type); Kafka Connect's millisecond types
    (``connect`` mode) cut, as the connector does."""
    units, rest = divmod(ns, div)
    if rest and not semantic.startswith("org.apache.kafka"):
        raise ValueConversionError(f"{value!r:.40} has more fraction digits than {semantic} holds")
    return units


def _temporal_encoder(semantic: str) -> Encoder | None:
    if semantic in ("io.debezium.time.Date", KAFKA_DATE):
        return date_days
    if semantic == "io.debezium.time.IsoDate":
        return lambda v: dt.date.fromisoformat(v).isoformat() + "Z"
    if semantic in _TIME_DIVISORS:
        div = _TIME_DIVISORS[semantic]
        return lambda v: _in_units(time_nanos(v), div, semantic, v)
    if semantic == "io.debezium.time.IsoTime":
        def iso_time(v: str) -> str:
            ns = time_nanos(v)
            secs = ns // 10**9
            hms = f"{secs // 3600:02d}:{secs // 60 % 60:02d}:{secs % 60:02d}"
            return hms + _java_fraction(ns % 10**9) + "Z"
        return iso_time
    if semantic in _TIMESTAMP_DIVISORS:
        div = _TIMESTAMP_DIVISORS[semantic]
        return lambda v: _checked_int64(_in_units(timestamp_nanos(v), div, semantic, v))
    if semantic == "io.debezium.time.IsoTimestamp":
        def iso_timestamp(v: str) -> str:
            m = _TS_RE.fullmatch(v)
            if m is None:
                raise ValueConversionError(f"invalid timestamp {v!r}")
            timestamp_nanos(v)
            return v[:10] + "T" + v[11:19] + _java_fraction(_fraction_ns(m.group(7))) + "Z"
        return iso_timestamp
    if semantic == "io.debezium.time.ZonedTimestamp":
        return zoned_timestamp
    return None


def value_encoder(column: Column, binary_mode: BinaryHandlingMode | None = None) -> Encoder:
    """A function canonical value → Connect value for ``column``, compiled once.

    Pass ``binary_mode`` for binary SQL columns (they are Connect ``string`` in the base64/hex
    modes, which the Connect schema alone does not reveal). ``None`` stays ``None``; the LOB
    placeholder ``__debezium_unavailable_value`` becomes the placeholder text, or its UTF-8 bytes
    (encoded per ``binary_mode``) for binary columns.
    """
    base = _base_encoder(column, binary_mode)
    if binary_mode is not None or (column.connect_type == "bytes" and column.semantic is None):
        mode = binary_mode or "bytes"
        placeholder: Any = (UNAVAILABLE_BYTES if mode == "bytes"
                            else _BINARY_TEXT[mode](UNAVAILABLE_BYTES))
    elif column.connect_type == "string":
        placeholder = UNAVAILABLE_VALUE
    else:
        placeholder = None

    def encode(value: Any) -> Any:
        if value is None:
            return None
        if placeholder is not None and value in (UNAVAILABLE_VALUE, UNAVAILABLE_BYTES):
            return placeholder
        try:
            return base(value)
        except ValueConversionError:
            raise
        except (ValueError, TypeError, OverflowError, struct.error) as exc:
            raise ValueConversionError(f"column {column.name!r}: {exc}") from exc

    return encode


def _base_encoder(column: Column, binary_mode: BinaryHandlingMode | None) -> Encoder:
    ctype, semantic = column.connect_type, column.semantic
    if semantic == DECIMAL:
        scale = int(column.parameters.get("scale", "0"))
        return lambda v: decimal_bytes(decimal_unscaled(v, scale))
    if semantic is not None:
        temporal = _temporal_encoder(semantic)
        if temporal is not None:
            return temporal
    if binary_mode is not None and binary_mode != "bytes":
        text = _BINARY_TEXT[binary_mode]
        return lambda v: text(_binary_of(v))
    if ctype == "bytes":
        return _binary_of
    if ctype == "boolean":
        return _bool
    if ctype in ("int8", "int16", "int32", "int64"):
        return _int_encoder(int(ctype[3:]))
    if ctype == "float64":
        return _float
    if ctype == "float32":
        return float32
    if ctype == "string":
        return _string
    raise SchemaError(f"column {column.name!r}: no encoder for Connect type {ctype!r}")


def _float(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueConversionError(f"expected a number, got {value!r}")
    return float(value)


def _string(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    raise ValueConversionError(f"expected text, got {type(value).__name__}")


def encode_value(column: Column, canonical_value: Any,
                 binary_mode: BinaryHandlingMode | None = None) -> Any:
    """One canonical value → its Connect value (see :func:`value_encoder`)."""
    return value_encoder(column, binary_mode)(canonical_value)


def json_value(connect_value: Any) -> Any:
    """The JsonConverter form of a Connect value: bytes become standard base64 text."""
    if isinstance(connect_value, bytes | bytearray):
        return base64.b64encode(connect_value).decode("ascii")
    return connect_value


def sql_value_encoder(col: SqlColumn, modes: ConnectorModes = DEFAULT_MODES) -> Encoder:
    """Canonical → Connect encoder for a SQL column under ``modes``.

    Knows what the Connect schema alone does not: binary columns in the base64/hex modes, the
    scale of decimals in the ``double``/``string`` modes, upper-case ``uniqueidentifier`` text.
    """
    spec = column_spec(col)
    column = connect_column(col, modes)
    if spec.base in _BINARIES:
        return value_encoder(column, modes.binary_handling_mode)
    if spec.base in _DECIMALS and column.semantic is None:
        scale = spec.scale or 0
        as_double = column.connect_type == "float64"

        def decimal_text(value: Any) -> Any:
            if value is None:
                return None
            text = format_decimal(decimal_unscaled(value, scale), scale)
            return float(text) if as_double else text

        return decimal_text
    if spec.base == "uniqueidentifier":
        return lambda v: None if v is None else _string(v).upper()
    return value_encoder(column)




