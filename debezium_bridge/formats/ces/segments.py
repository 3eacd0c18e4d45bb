"""Cutting a CES event's escaped ``data`` text into segments: never inside a UTF-8 sequence, a
JSON escape or a surrogate pair."""

from __future__ import annotations

import re

from debezium_bridge.errors import EncodeError

_HIGH_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")


def _starts_escape(text: bytes, j: int) -> bool:
    """Whether the backslash at ``j`` starts an escape (an odd run of backslashes ends at j)."""
    k = j
    while k >= 0 and text[k] == 0x5C:
        k -= 1
    return (j - k) % 2 == 1


def safe_cut(text: bytes, position: int) -> int:
    """The largest cut <= ``position`` in JSON string content ``text`` that is not inside a UTF-8
    sequence, an escape sequence or between the two escapes of a UTF-16 surrogate pair."""
    p = position
    while p > 0 and 0x80 <= text[p] < 0xC0:
        p -= 1
    j = p - 1
    low = max(0, p - 6)
    while j >= low:
        if text[j] == 0x5C:  # the nearest backslash before p: does its escape cover p?
            if _starts_escape(text, j):
                length = 6 if j + 1 < len(text) and text[j + 1] == 0x75 else 2
                if p < j + length:
                    p = j
            break
        j -= 1
    if p >= 6 and _HIGH_SURROGATE_ESCAPE.fullmatch(text, p - 6, p) \
            and _starts_escape(text, p - 6):
        p -= 6  # a high-surrogate escape: keep it with its low half
    return p


def split_content(content: bytes, budget: int) -> list[bytes]:
    """Cut JSON string content into pieces of at most ``budget`` bytes (see :func:`safe_cut`)."""
    if budget < 16:
        raise EncodeError(f"segment budget of {budget} bytes is too small for the envelope")
    pieces = []
    start, end = 0, len(content)
    while end - start > budget:
        cut = safe_cut(content, start + budget)
        if cut <= start:  # pragma: no cover - budget >= 16 always leaves room
            raise EncodeError("cannot cut the data of a segment")
        pieces.append(content[start:cut])
        start = cut
    pieces.append(content[start:])
    return pieces
