"""Cells of exported change-table rows → the values the connector reads.

Exports write the same value in many ways: ``sqlcmd`` and SSMS print ``binary`` as ``0x…``,
``bcp -c`` as bare hex, ``FOR JSON`` as base64, pandas as Python's ``b'…'``; bits as ``1``/``0``
or ``true``/``false``; ``datetime`` with a space or a ``T``; pandas' ``to_json`` writes
datetimes as epoch milliseconds. Each function here takes any of those spellings and returns
the canonical input form of :func:`debezium_bridge.formats.debezium.sqltypes.sql_value_encoder`
(decimals as exact text, temporal values as ISO text, binary as base64), so that values go
through exactly the Connect conversion the connector applies.
"""

from __future__ import annotations

import ast
import base64
import binascii
import datetime as dt
import math
import re
from decimal import Decimal
from typing import Any

from debezium_bridge.errors import ValueConversionError
from debezium_bridge.model.lsn import LSN_BYTES

_HEX = re.compile(r"[0-9a-fA-F]*")
_DEBEZIUM_LSN = re.compile(r"[0-9a-fA-F]{8}:[0-9a-fA-F]{8}:[0-9a-fA-F]{4}")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def binary_of(value: Any, prefer: str = "hex") -> bytes:
    """Bytes from any export spelling: ``bytes``; ``0x…`` hex; Debezium's
    ``xxxxxxxx:xxxxxxxx:xxxx``; Python's ``b'…'``; else bare hex (``prefer="hex"``) or base64
    (``prefer="base64"``). Raises :class:`ValueConversionError`."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if not isinstance(value, str):
        raise ValueConversionError(f"expected binary text, got {type(value).__name__}")
    text = value.strip()
    if text[:2] in ("0x", "0X"):
        return _hex(text[2:], value)
    if _DEBEZIUM_LSN.fullmatch(text):
        return bytes.fromhex(text.replace(":", ""))
    if text[:2] in ("b'", 'b"'):
        try:
            literal = ast.literal_eval(text)
        except (ValueError, SyntaxError) as exc:
            raise ValueConversionError(f"invalid bytes literal {value[:40]!r}") from exc
        if not isinstance(literal, bytes):
            raise ValueConversionError(f"invalid bytes literal {value[:40]!r}")
        return literal
    if prefer == "base64":
        if not _BASE64.fullmatch(text) or len(text) % 4:
            raise ValueConversionError(f"invalid base64 {value[:40]!r}")
        try:
            return base64.b64decode(text, validate=True)
        except binascii.Error as exc:
            raise ValueConversionError(f"invalid base64 {value[:40]!r}") from exc
    return _hex(text, value)


def _hex(digits: str, original: str) -> bytes:
    if len(digits) % 2 or not _HEX.fullmatch(digits):
        raise ValueConversionError(f"invalid hex {original[:40]!r} (odd length or not hex)")
    return bytes.fromhex(digits)


def lsn_of(value: Any, prefer: str = "hex") -> bytes:
    """A ``binary(10)`` LSN (``__$start_lsn``, ``__$seqval``) in any spelling of
    :func:`binary_of`; shorter hex is not accepted (a truncated LSN is not an LSN)."""
    if isinstance(value, str) and prefer == "base64" and _looks_hex_lsn(value):
        prefer = "hex"
    raw = binary_of(value, prefer)
    if len(raw) != LSN_BYTES:
        raise ValueConversionError(f"LSN {str(value)[:40]!r} is {len(raw)} bytes, not 10")
    return raw


def _looks_hex_lsn(text: str) -> bool:
    text = text.strip()
    return len(text) == 2 * LSN_BYTES and bool(_HEX.fullmatch(text))


# --------------------------------------------------------------------------- times

_TIME_TEXT = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?"
    r"\s*(Z|[+-]\d{2}:?\d{2})?", re.I)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def server_time_ms(value: Any, offset_minutes: int) -> int:
    """Epoch milliseconds of a ``cdc.lsn_time_mapping`` time: server-local ``datetime`` text
    (the server's UTC offset is subtracted, as the connector's ``TODATETIMEOFFSET(…,
    DATEPART(TZOFFSET, SYSDATETIMEOFFSET()))`` does), text with its own offset, or a JSON number
    of epoch milliseconds (pandas' ``to_json`` default)."""
    if isinstance(value, bool):
        raise ValueConversionError(f"expected a time, got {value!r}")
    if isinstance(value, Decimal):
        value = float(value)  # epoch milliseconds are exact in a float
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueConversionError(f"expected a time, got {value!r}")
        return int(value)
    if not isinstance(value, str):
        raise ValueConversionError(f"expected a time, got {type(value).__name__}")
    m = _TIME_TEXT.fullmatch(value.strip())
    if m is None:
        raise ValueConversionError(f"invalid time {value[:40]!r}")
    try:
        local = dt.datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), int(m.group(4)),
                            int(m.group(5)), int(m.group(6) or 0), tzinfo=dt.UTC)
    except ValueError as exc:
        raise ValueConversionError(f"invalid time {value[:40]!r}: {exc}") from exc
    fraction = m.group(7) or ""
    zone = m.group(8)
    if zone is not None:
        if zone.upper() == "Z":
            offset = 0
        else:
            digits = zone[1:].replace(":", "")
            offset = (int(digits[:2]) * 60 + int(digits[2:])) * (-1 if zone[0] == "-" else 1)
    else:
        offset = offset_minutes
    delta = local - _EPOCH
    ms = (delta.days * 86_400 + delta.seconds) * 1000 + int((fraction + "000")[:3])
    return ms - offset * 60_000


# --------------------------------------------------------------------------- cells

_TRUE = frozenset({"1", "true", "t", "yes", "y"})
_FALSE = frozenset({"0", "false", "f", "no", "n"})
_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)")
_DECIMAL_EXPONENT_LIMIT = 100
"""Larger exponents are beyond every SQL decimal (38 digits) and would be written out in full."""
_FLOAT_WORDS = {"inf": math.inf, "-inf": -math.inf, "infinity": math.inf,
                "-infinity": -math.inf, "nan": math.nan}


def bit(value: Any) -> bool:
    if value is True or value is False:
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueConversionError(f"expected a bit, got {str(value)[:40]!r}")


def integer(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueConversionError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Decimal) and value.adjusted() < 40 \
            and value == value.to_integral_value():
        return int(value)  # pandas writes integer columns with NULLs as 1.0
    text = str(value).strip()
    if _INTEGER.fullmatch(text):
        return int(text)
    raise ValueConversionError(f"expected an integer, got {text[:40]!r}")


def decimal_text(value: Any) -> str:
    """Exact decimal text (``$`` and thousands separators of money exports removed)."""
    if isinstance(value, bool):
        raise ValueConversionError(f"expected a decimal, got {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):  # a JSON number, as written
        exponent = value.as_tuple().exponent
        if not isinstance(exponent, int) or abs(exponent) > _DECIMAL_EXPONENT_LIMIT:
            raise ValueConversionError(f"expected a decimal, got {str(value)[:40]!r}")
        return format(value, "f")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueConversionError(f"expected a decimal, got {value!r}")
        return repr(value) if "e" not in repr(value) else format(value, "f")
    text = str(value).strip().replace(",", "").lstrip("$")
    if text.startswith(("-$", "+$")):
        text = text[0] + text[2:]
    if not _DECIMAL.fullmatch(text):
        raise ValueConversionError(f"expected a decimal, got {str(value)[:40]!r}")
    return text


def floating(value: Any) -> float:
    if isinstance(value, bool):
        raise ValueConversionError(f"expected a number, got {value!r}")
    if isinstance(value, int | float | Decimal):
        return float(value)
    text = str(value).strip()
    word = _FLOAT_WORDS.get(text.lower())
    if word is not None:
        return word
    try:
        return float(text)
    except ValueError as exc:
        raise ValueConversionError(f"expected a number, got {text[:40]!r}") from exc


def timestamp_text(value: Any) -> str:
    """``YYYY-MM-DDTHH:MM:SS[.f…]`` from text with a space or a ``T`` (pandas may drop the
    seconds' zero fraction), or epoch milliseconds (pandas' ``to_json``)."""
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        ms = int(value)
        moment = _EPOCH + dt.timedelta(milliseconds=ms)
        return f"{moment:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}"
    if not isinstance(value, str):
        raise ValueConversionError(f"expected a timestamp, got {type(value).__name__}")
    text = value.strip()
    m = _TIME_TEXT.fullmatch(text)
    if m is None or m.group(8) is not None:
        raise ValueConversionError(f"invalid timestamp {text[:40]!r}")
    out = f"{text[:10]}T{m.group(4)}:{m.group(5)}:{m.group(6) or '00'}"
    return out + (f".{m.group(7)}" if m.group(7) else "")


def date_text(value: Any) -> str:
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return timestamp_text(value)[:10]
    text = str(value).strip()
    if len(text) > 10 and text[10] in " T" and text[11:].strip("0:. ") == "":
        text = text[:10]  # pandas writes dates as midnight datetimes
    return text


def time_text(value: Any) -> str:
    text = str(value).strip()
    if len(text) > 10 and text[10] in " T":  # a date part (pandas, Excel) is not the time
        text = text[11:]
    return text


def offset_text(value: Any) -> str:
    return str(value).strip()


def text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float | Decimal):
        return str(value)
    raise ValueConversionError(f"expected text, got {type(value).__name__}")


def binary_base64(value: Any, prefer: str) -> str:
    return base64.b64encode(binary_of(value, prefer)).decode("ascii")
