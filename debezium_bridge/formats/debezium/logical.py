"""Connect values → canonical logical values (docs/canonical.md), compiled once per table version.

Canonical values are JSON-ready: integers; decimals and money as exact strings with their scale
(``"42.00"``); floats; booleans; date ``YYYY-MM-DD``; time ``HH:MM:SS[.f…]``; datetime/datetime2
``YYYY-MM-DDTHH:MM:SS[.f…]`` without zone; datetimeoffset as sent (ISO-8601 with its offset);
binary as standard base64; everything else as sent.

Fractional seconds keep the precision of the type: 3 digits for millisecond types, 6 for
microsecond types, 7 for nanosecond types (SQL Server's 100 ns tick; 9 if a value has finer
digits). When Debezium propagated the source column scale (``column.propagate.source.type``), that
scale is used instead. Digits are never dropped if that would lose a non-zero value.

Every value is checked against its column's Connect schema as JsonConverter would check it: the
Python class of the type (``int`` for int8..int64, never ``bool``; ``str``; ``bool``; ``float``, or
an ``int`` in range, for float32/float64; ``list``/``dict`` for array/map/struct) and the integer
ranges, so 2147483648 in an ``int32`` column is a :class:`ValueConversionError` naming the column
and the type, not a value passed on. Decimal schemas must describe a SQL Server decimal
(precision 1-38, scale 0-precision, ``scale`` present): anything else is a :class:`SchemaError`
when the table version is compiled, before a scale is used to build any string.

Unchanged LOB columns arrive as the placeholder ``__debezium_unavailable_value`` (text, or its
bytes for binary columns); they are reported as unavailable and their image value is ``None``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import re
import reprlib
import struct
from collections.abc import Callable, Mapping
from typing import Any, Literal

from debezium_bridge.errors import SchemaError, ValueConversionError
from debezium_bridge.model.schema import SOURCE_SCALE_PARAM, Column, TableSchema

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
_ISO_DATE = "io.debezium.time.IsoDate"
_ISO_TYPES = frozenset({_ISO_DATE, "io.debezium.time.IsoTime", "io.debezium.time.IsoTimestamp"})
DECIMAL_SEMANTIC = "org.apache.kafka.connect.data.Decimal"
VARIABLE_DECIMAL_SEMANTIC = "io.debezium.data.VariableScaleDecimal"


def format_unscaled(unscaled: int, scale: int) -> str:
    """``unscaled * 10**-scale`` as an exact plain decimal string keeping the scale."""
    if scale <= 0:
        return str(unscaled * 10**-scale)
    digits = str(-unscaled if unscaled < 0 else unscaled).rjust(scale + 1, "0")
    text = f"{digits[:-scale]}.{digits[-scale:]}"
    return "-" + text if unscaled < 0 else text


_a2b_base64 = binascii.a2b_base64


def bytes_of(value: Any) -> bytes:
    """Binary from bytes or canonical (strict) base64 text."""
    if value.__class__ is bytes:
        return value  # type: ignore[no-any-return]
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        try:
            return binascii.a2b_base64(value.encode("ascii"), strict_mode=True)
        except (binascii.Error, UnicodeEncodeError) as exc:
            raise ValueConversionError(f"invalid base64 {value[:40]!r}: {exc}") from exc
    raise ValueConversionError(f"expected bytes or base64 text, got {type(value).__name__}")


MAX_DECIMAL_PRECISION = 38
"""SQL Server decimals: precision 1-38, scale 0-precision (money is decimal(19,4))."""
_DECIMAL_TEXT = re.compile(r"[+-]?[0-9]{1,18}").fullmatch
_DECIMAL_CONTEXT = decimal.Context(prec=2 * MAX_DECIMAL_PRECISION + 2)
"""Room for any SQL Server decimal quantized to any SQL Server scale (the default context's 28
digits would refuse ``decimal(38,0)`` values)."""


def decimal_schema_bounds(column: Column) -> tuple[int, int]:
    """(scale, precision) of a Connect Decimal column; raises :class:`SchemaError` unless they
    describe a SQL Server decimal. Connect requires ``scale``; ``connect.decimal.precision`` is
    optional (38 when absent)."""
    params = column.parameters
    text = params.get("scale")
    if text is None:
        raise SchemaError(f"column {column.name!r}: Decimal schema without the 'scale' "
                          "parameter (Connect requires it)")
    if _DECIMAL_TEXT(text) is None:
        raise SchemaError(f"column {column.name!r}: Decimal scale {text[:40]!r} is not an "
                          "integer")
    scale = int(text)
    precision_text = params.get("connect.decimal.precision")
    if precision_text is None:
        precision = MAX_DECIMAL_PRECISION
    elif _DECIMAL_TEXT(precision_text) is None:
        raise SchemaError(f"column {column.name!r}: Decimal precision {precision_text[:40]!r} is "
                          "not an integer")
    else:
        precision = int(precision_text)
        if not 1 <= precision <= MAX_DECIMAL_PRECISION:
            raise SchemaError(f"column {column.name!r}: Decimal precision {precision} out of "
                              f"range (SQL Server: 1 to {MAX_DECIMAL_PRECISION})")
    if not 0 <= scale <= precision:
        raise SchemaError(f"column {column.name!r}: Decimal scale {scale} out of range "
                          f"(SQL Server: 0 to precision {precision})")
    return scale, precision


def _decimal_converter(scale: int, precision: int = MAX_DECIMAL_PRECISION) -> Converter:
    """Decimal values of a column whose schema passed :func:`decimal_schema_bounds`: unscaled
    values must have at most ``precision`` digits (so no value builds a long string)."""
    limit = 10**precision
    exponent = decimal.Decimal(1).scaleb(-scale)

    def too_wide(what: str) -> ValueConversionError:
        return ValueConversionError(f"decimal {what} exceeds precision {precision}")

    def from_number(value: Any) -> str:
        try:
            number = value if isinstance(value, decimal.Decimal) else decimal.Decimal(repr(value))
            quantized = number.quantize(exponent, context=_DECIMAL_CONTEXT)
        except (ArithmeticError, ValueError) as exc:  # InvalidOperation: more digits than room
            raise too_wide(f"{value!r:.40}") from exc
        if not quantized.is_finite() or quantized.adjusted() >= precision - scale:
            raise too_wide(f"{value!r:.40}")
        return format(quantized, "f")

    def convert(value: Any) -> str:
        if value.__class__ is str:
            try:  # plain ASCII base64; anything odd gets bytes_of's checks and messages
                raw = _a2b_base64(value, strict_mode=True)
            except ValueError:
                raw = bytes_of(value)
        elif isinstance(value, str | bytes | bytearray | memoryview):
            raw = bytes_of(value)
        elif isinstance(value, decimal.Decimal):
            return from_number(value)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueConversionError(f"expected a decimal, got {type(value).__name__}")
        else:  # JsonConverter decimal.format=NUMERIC: a JSON number
            return from_number(value)
        if not raw:
            raise ValueConversionError("empty decimal bytes")
        unscaled = int.from_bytes(raw, "big", signed=True)
        if not -limit < unscaled < limit:
            raise too_wide(f"of {len(raw)} bytes")
        return format_unscaled(unscaled, scale)

    return convert


_VARIABLE_LIMIT = 10**MAX_DECIMAL_PRECISION


def _variable_decimal(value: Any) -> str:
    if not isinstance(value, Mapping) or "scale" not in value or "value" not in value:
        raise ValueConversionError("VariableScaleDecimal must be a {scale, value} struct")
    scale = value["scale"]
    if scale.__class__ is not int or not 0 <= scale <= MAX_DECIMAL_PRECISION:
        raise ValueConversionError(f"VariableScaleDecimal scale {scale!r:.40} out of range "
                                   f"(SQL Server: 0 to {MAX_DECIMAL_PRECISION})")
    unscaled = int.from_bytes(bytes_of(value["value"]), "big", signed=True)
    if not -_VARIABLE_LIMIT < unscaled < _VARIABLE_LIMIT:
        raise ValueConversionError("VariableScaleDecimal value exceeds precision "
                                   f"{MAX_DECIMAL_PRECISION}")
    return format_unscaled(unscaled, scale)


_DECIMAL_TEXT_PARTS = re.compile(r"(-?)([0-9]+)(?:\.([0-9]+))?(?:[Ee]([+-]?[0-9]{1,3}))?").fullmatch


def _decimal_text(value: Any) -> Any:
    """A decimal of ``decimal.handling.mode=string`` (source type propagated) as a plain text:
    connectors before 1.9 wrote ``BigDecimal.toString()``, which uses E-notation for small
    magnitudes (``0E-10``, ``1.2345E-7``; DBZ-4730 moved to ``toPlainString()``). The same
    digits and scale; plain texts pass as sent; text that is no decimal is refused."""
    if value.__class__ is not str:
        return value
    parts = _DECIMAL_TEXT_PARTS(value)
    if parts is None:
        raise ValueConversionError(f"{value!r:.40} is not a decimal")
    sign, whole, fraction, exponent = parts.groups()
    if exponent is None:
        return value
    coefficient = (whole + (fraction or "")).lstrip("0")
    scale = len(fraction or "") - int(exponent)
    if len(coefficient) > MAX_DECIMAL_PRECISION or abs(scale) > MAX_DECIMAL_PRECISION:
        raise ValueConversionError(f"decimal {value!r:.40} exceeds precision "
                                   f"{MAX_DECIMAL_PRECISION}")
    return format_unscaled(int(sign + (coefficient or "0")), scale)


def _fraction_formatter(unit: int, digits: int) -> Callable[[int], str]:
    """``.fff`` for ``sub`` units of ``1/unit`` s, with ``digits`` digits (more if needed)."""
    full = len(str(unit)) - 1
    if digits >= full:
        padding = "0" * (digits - full)
        return lambda sub: "." + str(sub).rjust(full, "0") + padding
    step = 10 ** (full - digits)

    def fraction(sub: int) -> str:
        kept, dropped = divmod(sub, step)
        if dropped:  # never drop non-zero digits
            return "." + str(sub).rjust(full, "0").rstrip("0")
        return "." + str(kept).rjust(digits, "0") if digits else ""

    return fraction


_CLOCK = tuple(f"{minute // 60:02d}:{minute % 60:02d}:" for minute in range(24 * 60 + 1))
"""``HH:MM:`` of each minute of the day (and 24:00: for the end of the day)."""
_SECONDS = tuple(f"{second:02d}" for second in range(60))


_day_texts: dict[int, str] = {}


def _day_text(days: int) -> str:
    """``YYYY-MM-DD`` of a day number since the epoch, memoised (bounded)."""
    text = _day_texts.get(days)
    if text is None:
        text = dt.date.fromordinal(_EPOCH_ORDINAL + days).isoformat()  # ValueError, OverflowError
        if len(_day_texts) > 65536:
            _day_texts.clear()
        _day_texts[days] = text
    return text


def _time_converter(unit: int, digits: int) -> Converter:
    per_day = 86_400 * unit
    fraction = _fraction_formatter(unit, digits)

    def convert(value: Any) -> str:
        if value.__class__ is not int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueConversionError(f"expected an integer time, got {value!r:.40}")
        if not 0 <= value <= per_day:
            raise ValueConversionError(f"time of day out of range: {value}")
        secs, sub = divmod(value, unit)
        return _CLOCK[secs // 60] + _SECONDS[secs % 60] + fraction(sub)

    return convert


def _timestamp_converter(unit: int, digits: int) -> Converter:
    fraction = _fraction_formatter(unit, digits)

    def convert(value: Any) -> str:
        if value.__class__ is not int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueConversionError(f"expected an integer timestamp, got {value!r:.40}")
        seconds, sub = divmod(value, unit)
        days, secs = divmod(seconds, 86_400)
        try:
            date = _day_text(days)
        except (ValueError, OverflowError) as exc:
            raise ValueConversionError(f"timestamp out of range: {value}") from exc
        return date + "T" + _CLOCK[secs // 60] + _SECONDS[secs % 60] + fraction(sub)

    return convert


def _date(value: Any) -> str:
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueConversionError(f"expected days since epoch, got {value!r:.40}")
    try:
        return _day_text(value)
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


_ISO_SECONDS = re.compile(r"[0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.([0-9]*))?\Z")
"""The seconds and fraction that end an ISO time or timestamp."""


def _iso_utc_at_scale(scale: int) -> Converter:
    """``_iso_utc`` of a time or timestamp whose column scale was propagated: the fraction
    padded to the scale when it has fewer digits (Java's ISO formats, which Debezium's
    ``isostring`` mode uses, drop trailing zeros)."""
    def iso_at_scale(value: Any) -> str:
        text = _iso_utc(value)
        found = _ISO_SECONDS.search(text)
        if found is None:
            return text
        fraction = found.group(1) or ""
        if len(fraction) >= scale:
            return text
        seconds_end = found.start() + 8
        return f"{text[:seconds_end]}.{fraction}{'0' * (scale - len(fraction))}"
    return iso_at_scale


def _base64_of_bytes(value: Any) -> str:
    if isinstance(value, str):
        bytes_of(value)  # validate
        return value
    return base64.b64encode(bytes_of(value)).decode("ascii")


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


_FLOAT32_LIMIT = 3.4028235677973366e38
"""2**128 - 2**103, the least magnitude a float32 rounds to infinity: FLT_MAX as Jackson writes
it for JsonConverter (``3.4028235E38``) is above FLT_MAX as a double, below this."""
_FLOAT64_MAX = 1.7976931348623157e308


def _float32(value: Any) -> Any:
    """Shortest decimal that round-trips as float32 (what JsonConverter prints for FLOAT32)."""
    if not isinstance(value, float):
        return value
    try:
        packed = struct.pack("<f", value)
    except OverflowError as exc:  # the row check rejects these first; kept for direct callers
        raise ValueConversionError(f"{value!r} is out of the float32 range") from exc
    for precision in range(6, 10):
        candidate = float(f"{value:.{precision}g}")
        if abs(candidate) >= _FLOAT32_LIMIT:  # rounded up past FLT_MAX: the float32's digits
            candidate = float(f"{struct.unpack('<f', packed)[0]:.{precision}g}")
        if struct.pack("<f", candidate) == packed:
            return candidate
    return value


def converter_for(column: Column, binary_mode: BinaryHandlingMode = "bytes") -> Converter | None:
    """The converter of one column, or ``None`` when values pass through unchanged."""
    semantic = column.semantic
    if semantic == DECIMAL_SEMANTIC:
        return _decimal_converter(*decimal_schema_bounds(column))
    if semantic == VARIABLE_DECIMAL_SEMANTIC:
        return _variable_decimal
    if semantic in _TIMESTAMP_UNITS:
        unit, digits = _TIMESTAMP_UNITS[semantic]
        scale = _source_scale(column, _MAX_FRACTION_DIGITS)
        return _timestamp_converter(unit, digits if scale is None else scale)
    if semantic in _TIME_UNITS:
        unit, digits = _TIME_UNITS[semantic]
        scale = _source_scale(column, _MAX_FRACTION_DIGITS)
        return _time_converter(unit, digits if scale is None else scale)
    if semantic in _DATE_TYPES:
        return _date
    if semantic in _ISO_TYPES:
        scale = None if semantic == _ISO_DATE else _source_scale(column, _MAX_FRACTION_DIGITS)
        return _iso_utc if scale is None else _iso_utc_at_scale(scale)
    if column.connect_type == "bytes":
        return _base64_of_bytes
    if column.connect_type == "float32":
        return _float32
    source_type = column.source_type
    if column.connect_type == "string" and source_type in _BINARY_SOURCE_TYPES:
        return _binary_text_converter(binary_mode)
    if column.connect_type == "string" and source_type in _DECIMAL_SOURCE_TYPES:
        return _decimal_text
    if column.connect_type in _FLOAT64_NAMES and source_type in _DECIMAL_SOURCE_TYPES:
        # decimal.handling.mode=double with propagated source type: render at the column scale
        scale = _source_scale(column, MAX_DECIMAL_PRECISION)
        if scale is not None:
            return lambda value: f"{value:.{scale}f}" if isinstance(value, float | int) else value
    return None


_FLOAT64_NAMES = ("float64", "double")
"""FLOAT64 as ``Schema.Type`` names it and as JsonConverter writes it."""
_MAX_FRACTION_DIGITS = 9
"""Fraction digits of the finest Connect time type (nanoseconds; SQL Server's own limit is 7)."""


def _source_scale(column: Column, highest: int) -> int | None:
    """The propagated source column scale (``column.propagate.source.type``), checked: the
    converters build strings of that many digits."""
    text = column.parameters.get(SOURCE_SCALE_PARAM)
    if text is None or text == "":
        return None
    if _DECIMAL_TEXT(text) is None:
        raise SchemaError(f"column {column.name!r}: source column scale {text[:40]!r} is not an "
                          "integer")
    scale = int(text)
    if not 0 <= scale <= highest:
        raise SchemaError(f"column {column.name!r}: source column scale {scale} out of range "
                          f"(0 to {highest} for {column.source_type or column.connect_type})")
    return scale


RowFunction = Callable[[dict[str, Any]], tuple[dict[str, Any], tuple[str, ...]]]

_INT_RANGES = {"int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
               "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_TYPE_NAMES = {**{name: name for name in (*_INT_RANGES, "float32", "float64", "boolean", "string",
                                          "bytes", "array", "map", "struct")},
               "float": "float32", "double": "float64"}
"""Connect ``Schema.Type`` names, and JsonConverter's spellings of FLOAT32/FLOAT64."""
_TYPE_CHECKS = {
    **{name: f"value.__class__ is not int or not {low} <= value <= {high}"
       for name, (low, high) in _INT_RANGES.items()},
    "float32": "value.__class__ is not float and (value.__class__ is not int or not "
               f"{-_FLOAT32_LIMIT!r} < value < {_FLOAT32_LIMIT!r}) or value.__class__ is float "
               f"and {_FLOAT32_LIMIT!r} <= abs(value) < INFINITY",
    "float64": "value.__class__ is not float and (value.__class__ is not int or not "
               f"{-_FLOAT64_MAX!r} <= value <= {_FLOAT64_MAX!r})",
    "boolean": "value.__class__ is not bool",
    "string": "value.__class__ is not str",
    "array": "value.__class__ is not list",
    "map": "value.__class__ is not dict and value.__class__ is not list",  # [[k, v], ...] too
    "struct": "value.__class__ is not dict",
}
"""Per Connect type, an expression true when ``value`` (not None) is not a value of the type,
as JsonConverter would refuse it: the exact Python class (``bool`` is not an integer) and the
integer ranges; floats accept integers within their range. ``bytes`` is checked by its converter
(bytes, or strict base64 text)."""
_describe_repr = reprlib.Repr()
_describe_repr.maxstring = _describe_repr.maxother = 40
_describe_repr.maxlevel = 2


def _describe(value: Any) -> str:
    if value.__class__ is int and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    return _describe_repr.repr(value)


def type_mismatch(expected: str, value: Any) -> ValueConversionError:
    """The error for a value that is not of its column's Connect type."""
    if value.__class__ is int and expected in _INT_RANGES:
        low, high = _INT_RANGES[expected]
        return ValueConversionError(
            f"{_describe(value)} is out of the {expected} range [{low}, {high}]")
    if value.__class__ in (int, float) and expected in ("float32", "float64"):
        return ValueConversionError(f"{_describe(value)} is out of the {expected} range")
    return ValueConversionError(
        f"expected {expected}, got {type(value).__name__} {_describe(value)}")


def _type_check(column: Column) -> str | None:
    """The generated check of one column (see ``_TYPE_CHECKS``); ``None`` when its converter
    accepts several encodings and checks them itself (Decimal: bytes, base64 or a number)."""
    if column.connect_type not in _TYPE_NAMES:
        raise SchemaError(f"column {column.name!r}: unknown Connect type "
                          f"{column.connect_type!r:.40}")
    if column.semantic == DECIMAL_SEMANTIC:
        return None
    return _TYPE_CHECKS.get(_TYPE_NAMES[column.connect_type])


def _compile_row_function(schema: TableSchema, placeholder: str,
                          binary_mode: BinaryHandlingMode) -> RowFunction:
    """One generated function per table version: per column, a single ``get``, then a type
    check fused with the placeholder test and the converter call; no loop over converter
    objects. The failing branch names the column (``column = ...``) only when it fails.

    Text columns holding the placeholder are reported before binary ones, each in schema order.
    Raises :class:`SchemaError` for a schema no row can be decoded with.
    """
    constants: dict[str, Any] = {
        "ValueConversionError": ValueConversionError,
        "mismatch": type_mismatch,
        "INFINITY": float("inf"),
        "TEXT": placeholder,
        "BASE64": base64.b64encode(placeholder.encode()).decode("ascii"),
        "BYTES": placeholder.encode(),
    }
    if not (schema.name is None or schema.name.__class__ is str):
        raise SchemaError(f"row schema name is not text: {schema.name!r:.60}")
    body: list[str] = []
    for n, column in enumerate(schema.columns):
        if column.name.__class__ is not str or column.connect_type.__class__ is not str \
                or not (column.semantic is None or column.semantic.__class__ is str):
            raise SchemaError(f"malformed column in schema {schema.name!r:.80}: "
                              f"{column.name!r:.40} of type {column.connect_type!r:.40} "
                              f"named {column.semantic!r:.40}")
        name = repr(column.name)
        convert = converter_for(column, binary_mode)
        if convert is not None:
            constants[f"convert{n}"] = convert
        check = _type_check(column)
        if column.connect_type == "string":
            marker, gone = "value == TEXT", "text_gone"
        elif column.connect_type == "bytes":
            marker, gone = "value == BASE64 or value == BYTES", "binary_gone"
        elif convert is None and check is None:
            continue
        else:
            marker = gone = ""
        body += [f"    value = get({name})", "    if value is not None:"]
        if check is not None:
            expected = _TYPE_NAMES[column.connect_type]
            body += [f"        if {check}:", f"            column = {name}",
                     f"            raise mismatch({expected!r}, value)"]
        conversion = [f"column = {name}", f"row[{name}] = convert{n}(value)"]
        if not marker:
            if convert is not None:
                body += ["        " + line for line in conversion]
            continue
        body += [f"        if {marker}:", f"            row[{name}] = None",
                 f"            {gone}.append({name})"]
        if convert is not None:
            body += ["        else:", *("            " + line for line in conversion)]
    source = "\n".join([
        "def decode(row):",
        "    get = row.get",
        # lists joined once: a tuple grown per column was quadratic (40k columns: 6.5 s)
        "    text_gone = []",
        "    binary_gone = []",
        "    column = None",
        "    try:",
        *("    " + line for line in body or ["    pass"]),
        "    except ValueConversionError as exc:",
        "        exc.message = f'column {column!r}: {exc.message}'",
        "        raise",
        "    return row, (*text_gone, *binary_gone)",
        "",
    ])
    exec(compile(source, f"<row decoder {schema.name!r:.80}>", "exec"), constants)
    return constants["decode"]  # type: ignore[no-any-return]


class RowDecoder:
    """Converts row images of one table version to canonical values.

    Built once per table version; :meth:`decode` mutates and returns the row dict it is given.
    """

    __slots__ = ("decode", "schema")

    def __init__(self, schema: TableSchema, *, placeholder: str = DEFAULT_PLACEHOLDER,
                 binary_mode: BinaryHandlingMode = "bytes") -> None:
        self.schema = schema
        self.decode: RowFunction = _compile_row_function(schema, placeholder, binary_mode)
        """Canonical row and the names of unavailable (placeholder) columns."""


class SchemalessRowDecoder:
    """Rows without a schema: values pass through; only the LOB placeholder is recognised."""

    __slots__ = ("_marker_set", "_markers")

    def __init__(self, *, placeholder: str = DEFAULT_PLACEHOLDER) -> None:
        self._markers = (placeholder, base64.b64encode(placeholder.encode()).decode("ascii"))
        self._marker_set = frozenset(self._markers)

    def decode(self, row: dict[str, Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
        values = row.values()
        markers = self._markers
        try:  # one hashed pass; the usual answer is that no value is a marker
            if self._marker_set.isdisjoint(values):
                return row, ()
        except TypeError:  # an unhashable value (struct, array): compare one by one
            if markers[0] not in values and markers[1] not in values:
                return row, ()
        unavailable = tuple(k for k, v in row.items() if v.__class__ is str and v in markers)
        for name in unavailable:
            row[name] = None
        return row, unavailable
