"""SQL Server type names and the canonical strings CES writes for column values.

CES writes every column value as a string "like SQL Server's canonical string conversion"
(see docs/ces.md). Documented: integers (``"105"``), (n)varchar text,
``datetime`` ``"2025-03-14 16:45:01.000"`` and ``datetime2(7)`` ``"2026-08-07 16:25:00.8833333"``
(CONVERT style 121: space separator, exactly *p* fraction digits). Everything else is a
documented best guess, switchable through :class:`~debezium_bridge.formats.ces.options.CesOptions`:

=====================  ==============================================  =========================
type                   default                                         option
=====================  ==============================================  =========================
bit                    ``"1"`` / ``"0"``                               ``bit``
decimal(p,s), numeric  plain decimal with exactly *s* digits           -
money, smallmoney      4 fraction digits                               ``money_scale``
float, real            shortest round-trip text (``repr``)             ``floats``
uniqueidentifier       upper case                                      ``uniqueidentifier``
binary, varbinary      ``0x`` + upper-case hex                         ``binary``
date                   ``yyyy-MM-dd``                                  -
time(p)                ``HH:mm:ss`` + *p* fraction digits              -
smalldatetime          ``yyyy-MM-dd HH:mm:ss`` (style 120)             ``smalldatetime``
datetimeoffset(p)      ``yyyy-MM-dd HH:mm:ss.fffffff +hh:mm``          ``datetimeoffset``
NULL                   JSON ``null``                                   ``nulls``
=====================  ==============================================  =========================

:func:`renderer` turns a canonical logical value (docs/canonical.md) into that string;
:func:`parser` turns the string back into the canonical value, using the column's SQL type.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import decimal
import math
import re
from collections.abc import Callable
from typing import Any

import msgspec

from debezium_bridge.errors import ValueConversionError
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.debezium.logical import bytes_of
from debezium_bridge.formats.debezium.sqltypes import (
    decimal_unscaled,
    float32,
    format_decimal,
    time_nanos,
    timestamp_nanos,
    zoned_timestamp,
)
from debezium_bridge.model.sqltype import (
    BINARY_TYPES,
    DECIMAL_TYPES,
    FLOAT_TYPES,
    INTEGER_TYPES,
    MONEY_TYPES,
    TEXT_TYPES,
    SqlType,
)

Render = Callable[[Any], str]
Parse = Callable[[str], Any]

# --------------------------------------------------------------------------- rendering


class RenderStats:
    """Counts what rendering changed (values cut at ``max_column_kb``)."""

    __slots__ = ("truncated_values",)

    def __init__(self) -> None:
        self.truncated_values = 0


def _bad(value: Any, what: str) -> ValueConversionError:
    return ValueConversionError(f"cannot render {value!r:.60} as {what}")


def _render_int(value: Any) -> str:
    if value.__class__ is int:
        return str(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, str) and value.lstrip("-").isdigit() and value.isascii():
        return value
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    raise _bad(value, "an integer")


_BITS: dict[str, tuple[str, str]] = {"numeric": ("1", "0"), "boolean": ("true", "false")}
_BIT_TEXTS = {"1": True, "0": False, "true": True, "false": False}


def _bit_renderer(style: str) -> Render:
    true_text, false_text = _BITS[style]

    def render(value: Any) -> str:
        if value is True or value == 1:
            return true_text
        if value is False or value == 0:
            return false_text
        if isinstance(value, str) and value.lower() in _BIT_TEXTS:
            return true_text if _BIT_TEXTS[value.lower()] else false_text
        raise _bad(value, "bit")

    return render


def _decimal_renderer(scale: int, rounding: bool = False) -> Render:
    quantum = decimal.Decimal(1).scaleb(-scale)

    def slow(value: Any) -> str:
        if isinstance(value, bool):
            raise _bad(value, f"a decimal with scale {scale}")
        try:
            if isinstance(value, float):
                number = decimal.Decimal(repr(value))
            elif isinstance(value, int | str | decimal.Decimal):
                number = decimal.Decimal(value)
            else:
                raise _bad(value, f"a decimal with scale {scale}")
            if not number.is_finite():
                raise _bad(value, f"a decimal with scale {scale}")
            if rounding:
                return format(number.quantize(quantum, decimal.ROUND_HALF_UP), "f")
            if isinstance(value, str) and value.strip() and "e" not in value.lower():
                try:
                    return format_decimal(decimal_unscaled(value.strip(), scale), scale)
                except ValueConversionError:
                    pass  # more digits than the scale: kept below
            exact = number.quantize(quantum)
            if exact != number:  # more digits than the scale: keep them rather than lose them
                return format(number, "f")
            return format(exact, "f")
        except (decimal.InvalidOperation, ValueError) as exc:
            raise _bad(value, f"a decimal with scale {scale}") from exc

    if rounding:
        return slow

    def render(value: Any) -> str:
        if value.__class__ is str:
            dot = value.find(".")
            if ((dot < 0 and scale == 0) or (dot >= 0 and len(value) - dot - 1 == scale)) \
                    and value.replace(".", "", 1).lstrip("-").isdigit() and value.isascii():
                return value  # canonical decimals already carry their scale
        return slow(value)

    return render


def _float_renderer(style: str, single: bool) -> Render:
    """Canonical real values are already the shortest float32 text (the decoder makes them so);
    other values of a real column are first rounded to float32."""
    isfinite = math.isfinite

    def render(value: Any) -> str:
        if value.__class__ is float and style == "shortest" and isfinite(value) \
                and (not single or (abs(value) < 1e7 and len(repr(value)) <= 11)):
            return repr(value)  # type: ignore[no-any-return]
        if isinstance(value, bool) or not isinstance(value, int | float):
            if isinstance(value, str):
                try:
                    value = float(value)
                except ValueError:
                    raise _bad(value, "float") from None
            else:
                raise _bad(value, "float")
        number = float(value)
        if not math.isfinite(number):
            raise _bad(value, "float (SQL Server has no NaN/Infinity)")
        if single:
            number = float32(number)
        if style == "plain":
            return format(decimal.Decimal(repr(number)), "f")
        return repr(number)

    return render


def _truncate_text(limit: int, stats: RenderStats) -> Callable[[str], str]:
    quick = limit // 4  # no text of this many characters can exceed the limit in UTF-8

    def cut(text: str) -> str:
        if len(text) <= quick:
            return text
        raw = text.encode("utf-8", "surrogatepass")
        if len(raw) <= limit:
            return text
        stats.truncated_values += 1
        return raw[:limit].decode("utf-8", "ignore")  # drops a character cut in half

    return cut


def _text_renderer(limit: int, stats: RenderStats) -> Render:
    if limit <= 0:
        def plain(value: Any) -> str:
            if value.__class__ is str:
                return value  # type: ignore[no-any-return]
            raise _bad(value, "text")
        return plain
    cut = _truncate_text(limit, stats)
    quick = limit // 4

    def render(value: Any) -> str:
        if value.__class__ is str:
            return value if len(value) <= quick else cut(value)  # type: ignore[no-any-return]
        raise _bad(value, "text")

    return render


def _other_renderer(limit: int, stats: RenderStats) -> Render:
    cut = _truncate_text(limit, stats) if limit > 0 else (lambda text: text)
    encoder = msgspec.json.Encoder()

    def render(value: Any) -> str:
        if isinstance(value, str):
            return cut(value)
        return cut(encoder.encode(value).decode())

    return render


def _binary_bytes(value: Any) -> bytes:
    try:
        return bytes_of(value)
    except ValueConversionError as exc:
        raise _bad(value, "binary (canonical base64)") from exc


def _binary_renderer(style: str, limit: int, stats: RenderStats) -> Render:
    def render(value: Any) -> str:
        raw = _binary_bytes(value)
        if 0 < limit < len(raw):
            stats.truncated_values += 1
            raw = raw[:limit]
        if style == "base64":
            return base64.b64encode(raw).decode("ascii")
        return "0x" + raw.hex().upper()

    return render


def _guid_renderer(style: str) -> Render:
    def render(value: Any) -> str:
        if isinstance(value, str):
            return value.upper() if style == "upper" else value
        raise _bad(value, "uniqueidentifier")

    return render


def _fit_fraction(fraction: str, digits: int) -> str:
    """``fraction`` (digits after the dot) with exactly ``digits`` digits; digits beyond that
    are only dropped when they are zeros (a value is never made less precise)."""
    n = len(fraction)
    if n == digits:
        return fraction
    if n < digits:
        return fraction + "0" * (digits - n)
    if fraction[digits:].strip("0"):
        return fraction.rstrip("0")
    return fraction[:digits]


def _split_fraction(clock: str) -> tuple[str, str]:
    """``HH:MM:SS[.fff]`` → (``HH:MM:SS``, ``fff``)."""
    head, _, fraction = clock.partition(".")
    if len(head) != 8 or (fraction and not fraction.isdigit()):
        raise ValueConversionError(f"invalid time of day {clock!r}")
    return head, fraction


def _with_fraction(head: str, fraction: str, digits: int) -> str:
    fraction = _fit_fraction(fraction, digits)
    return f"{head}.{fraction}" if fraction else head


def _time_renderer(digits: int) -> Render:
    def render(value: Any) -> str:
        if not isinstance(value, str):
            raise _bad(value, "time")
        head, fraction = _split_fraction(value)
        return _with_fraction(head, fraction, digits)

    return render


def _timestamp_renderer(digits: int) -> Render:
    exact_len = 20 + digits if digits else 19

    def render(value: Any) -> str:
        if value.__class__ is str and len(value) == exact_len and value[10] == "T" \
                and (not digits or value[19] == "."):
            return value[:10] + " " + value[11:]
        if not isinstance(value, str) or len(value) < 19 or value[10] not in "T ":
            raise _bad(value, "a timestamp")
        head, fraction = _split_fraction(value[11:])
        return f"{value[:10]} {_with_fraction(head, fraction, digits)}"

    return render


_OFFSET_RE = re.compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?\s*(Z|[+-]\d{2}:\d{2})", re.I)


def _datetimeoffset_renderer(digits: int, style: str) -> Render:
    def render(value: Any) -> str:
        m = _OFFSET_RE.fullmatch(value) if isinstance(value, str) else None
        if m is None:
            raise _bad(value, "datetimeoffset")
        offset = m.group(4).upper()
        if offset == "Z":
            offset = "+00:00"
        clock = _with_fraction(m.group(2), m.group(3) or "", digits)
        if style == "iso":
            return f"{m.group(1)}T{clock}{offset}"
        return f"{m.group(1)} {clock} {offset}"

    return render


def _date_renderer(value: Any) -> str:
    if isinstance(value, str) and len(value) == 10:
        return value
    if isinstance(value, dt.date):
        return value.isoformat()
    raise _bad(value, "date")


def renderer(sql_type: SqlType, options: CesOptions, stats: RenderStats | None = None) -> Render:
    """Canonical value (never ``None``) → the string CES writes for a column of ``sql_type``."""
    stats = stats or RenderStats()
    limit = options.max_column_kb * 1024
    base = sql_type.base
    if base in INTEGER_TYPES:
        return _render_int
    if base in TEXT_TYPES:
        return _text_renderer(limit, stats)
    if base in DECIMAL_TYPES:
        return _decimal_renderer(sql_type.scale or 0)
    if base in MONEY_TYPES:
        return _decimal_renderer(options.money_scale, rounding=options.money_scale != 4)
    if base == "datetime2" or base == "datetime":
        return _timestamp_renderer(sql_type.fraction_digits)
    if base == "smalldatetime":
        return _timestamp_renderer(3 if options.smalldatetime == "milliseconds" else 0)
    if base == "date":
        return _date_renderer
    if base == "time":
        return _time_renderer(sql_type.fraction_digits)
    if base == "datetimeoffset":
        return _datetimeoffset_renderer(sql_type.fraction_digits, options.datetimeoffset)
    if base == "bit":
        return _bit_renderer(options.bit)
    if base in FLOAT_TYPES:
        return _float_renderer(options.floats, base == "real")
    if base == "uniqueidentifier":
        return _guid_renderer(options.uniqueidentifier)
    if base in BINARY_TYPES or base in ("image", "rowversion", "timestamp"):
        return _binary_renderer(options.binary, limit, stats)
    return _other_renderer(limit, stats)


# --------------------------------------------------------------------------- parsing back


def _parse_int(text: str) -> int:
    digits = text[1:] if text[:1] == "-" else text
    if digits.isascii() and digits.isdigit():
        return int(text)
    raise ValueConversionError(f"invalid integer {text!r}")


def _parse_bit(text: str) -> bool:
    value = _BIT_TEXTS.get(text.strip().lower())
    if value is None:
        raise ValueConversionError(f"invalid bit {text!r}")
    return value


def _decimal_parser(scale: int) -> Parse:
    def parse(text: str) -> str:
        try:
            return format_decimal(decimal_unscaled(text, scale), scale)
        except ValueConversionError:  # more digits than the scale: kept, never cut
            try:
                number = decimal.Decimal(text.strip())
            except decimal.InvalidOperation:
                raise ValueConversionError(f"invalid decimal {text!r:.40}") from None
            if not number.is_finite():
                raise ValueConversionError(f"invalid decimal {text!r:.40}") from None
            return format(number, "f")

    return parse


def _float_parser(single: bool) -> Parse:
    def parse(text: str) -> float:
        try:
            number = float(text)
        except ValueError:
            raise ValueConversionError(f"invalid float {text!r}") from None
        if not math.isfinite(number):
            raise ValueConversionError(f"invalid float {text!r}")
        if not single:
            return number
        try:
            return float32(number)
        except OverflowError:
            raise ValueConversionError(f"real out of range: {text!r:.40}") from None

    return parse


def _parse_binary(text: str) -> str:
    if text[:2] in ("0x", "0X"):
        try:
            raw = bytes.fromhex(text[2:])
        except ValueError:
            raise ValueConversionError(f"invalid hex binary {text[:40]!r}") from None
        return base64.b64encode(raw).decode("ascii")
    try:
        raw = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueConversionError(f"binary is neither 0x-hex nor base64: {text[:40]!r}") from None
    return base64.b64encode(raw).decode("ascii")


def _parse_date(text: str) -> str:
    try:
        return dt.date.fromisoformat(text).isoformat()
    except ValueError:
        raise ValueConversionError(f"invalid date {text!r}") from None


def _time_parser(digits: int) -> Parse:
    def parse(text: str) -> str:
        time_nanos(text)  # validates
        head, fraction = _split_fraction(text)
        return _with_fraction(head, fraction, digits)

    return parse


def _timestamp_parser(digits: int) -> Parse:
    def parse(text: str) -> str:
        timestamp_nanos(text)  # validates (space or T)
        head, fraction = _split_fraction(text[11:])
        return f"{text[:10]}T{_with_fraction(head, fraction, digits)}"

    return parse


def _text(text: str) -> str:
    return text


def parser(sql_type: SqlType) -> Parse:
    """CES string → canonical logical value for a column of ``sql_type`` (docs/canonical.md forms:
    int, exact decimal string with its scale, float, bool, ISO date/time texts, base64 binary).
    Unknown and unsupported types stay text."""
    base = sql_type.base
    if base in INTEGER_TYPES:
        return _parse_int
    if base in TEXT_TYPES:
        return _text
    if base in DECIMAL_TYPES:
        return _decimal_parser(sql_type.scale or 0)
    if base in MONEY_TYPES:
        return _decimal_parser(4)
    if base == "datetime2" or base == "datetime" or base == "smalldatetime":
        return _timestamp_parser(sql_type.fraction_digits)
    if base == "date":
        return _parse_date
    if base == "time":
        return _time_parser(sql_type.fraction_digits)
    if base == "datetimeoffset":
        return zoned_timestamp
    if base == "bit":
        return _parse_bit
    if base in FLOAT_TYPES:
        return _float_parser(base == "real")
    if base in BINARY_TYPES or base in ("image", "rowversion", "timestamp"):
        return _parse_binary
    return _text
