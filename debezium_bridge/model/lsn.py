"""SQL Server log sequence numbers (LSNs) as Debezium writes them.

An LSN is ``binary(10)``; Debezium renders it as lower-case hex ``xxxxxxxx:xxxxxxxx:xxxx``
(``sqlserver/Lsn.java``). LSNs compare as unsigned bytes; a missing LSN sorts lowest. Accepted
input forms: any case, with or without colons, ``0x…`` hex, and the string ``NULL``.
"""

from __future__ import annotations

import re

from debezium_bridge.errors import LsnFormatError

LSN_BYTES = 10
NULL_LSN = b""
"""The sort key of a missing LSN: the empty byte string sorts below every 10-byte LSN."""

_CANONICAL = re.compile(r"[0-9a-f]{8}:[0-9a-f]{8}:[0-9a-f]{4}")
_HEX = re.compile(r"[0-9a-fA-F]{1,20}")


def parse_lsn(text: str | None) -> bytes:
    """The 10 bytes of an LSN (``b""`` for a missing one), from any accepted text form."""
    if text is None:
        return NULL_LSN
    if _CANONICAL.fullmatch(text):
        return bytes.fromhex(text.replace(":", ""))
    stripped = text.strip()
    if stripped.upper() == "NULL" or stripped == "":
        return NULL_LSN
    if stripped[:2] in ("0x", "0X"):
        stripped = stripped[2:]
    if ":" in stripped:
        parts = stripped.split(":")
        if len(parts) != 3 or [len(p) for p in parts] != [8, 8, 4]:
            raise LsnFormatError(f"malformed LSN {text!r}: expected xxxxxxxx:xxxxxxxx:xxxx")
        stripped = "".join(parts)
    if not _HEX.fullmatch(stripped):
        raise LsnFormatError(f"malformed LSN {text!r}: not hexadecimal or longer than 10 bytes")
    return bytes.fromhex(stripped.rjust(20, "0"))


def format_lsn(lsn: bytes) -> str | None:
    """Debezium's lower-case form ``xxxxxxxx:xxxxxxxx:xxxx`` (``None`` for a missing LSN)."""
    if not lsn:
        return None
    h = lsn.hex()
    return f"{h[:8]}:{h[8:16]}:{h[16:]}"


def normalize_lsn(text: str | None) -> tuple[bytes, str | None]:
    """Sort key and canonical text of an LSN; the fast path is Debezium's own form."""
    if text is not None and _CANONICAL.fullmatch(text):
        return bytes.fromhex(text.replace(":", "")), text
    lsn = parse_lsn(text)
    return lsn, format_lsn(lsn)


def lsn_hex20(lsn: bytes) -> str:
    """The LSN as 20 hex digits (zeros for a missing LSN); sorts like the LSN."""
    return lsn.hex() if lsn else "0" * 20


_LSN_TOP = (1 << (8 * LSN_BYTES)) - 1


def increment_lsn(lsn: bytes) -> bytes:
    """The next LSN (``sys.fn_cdc_increment_lsn``): the 10 bytes as one unsigned number, plus
    one. No LSN lies strictly between ``lsn`` and the result, so the closed windows
    ``[a, b]`` and ``[increment_lsn(b), c]`` share no LSN and leave none out."""
    if len(lsn) != LSN_BYTES:
        raise LsnFormatError("cannot increment a missing LSN")
    value = int.from_bytes(lsn, "big")
    if value == _LSN_TOP:
        raise LsnFormatError("ffffffff:ffffffff:ffff has no next LSN")
    return (value + 1).to_bytes(LSN_BYTES, "big")


def decrement_lsn(lsn: bytes) -> bytes:
    """The previous LSN (``sys.fn_cdc_decrement_lsn``): the 10 bytes as one unsigned number,
    minus one."""
    if len(lsn) != LSN_BYTES:
        raise LsnFormatError("cannot decrement a missing LSN")
    value = int.from_bytes(lsn, "big")
    if value == 0:
        raise LsnFormatError("00000000:00000000:0000 has no previous LSN")
    return (value - 1).to_bytes(LSN_BYTES, "big")
