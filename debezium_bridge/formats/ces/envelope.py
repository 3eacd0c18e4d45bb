"""The CES envelope as data: detection, parsing of the envelope, its ``data`` and row images,
and the segment attributes (shared by the assembler and the decoder)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from debezium_bridge.errors import DecodeError, EnvelopeError, RecordError
from debezium_bridge.formats.ces import avro as ces_avro
from debezium_bridge.formats.debezium.avro_reader import fastavro_reason

HALF_HEADER = "debezium-bridge.ces.half"
"""Header :class:`CesAssembler` puts on the two halves of a key-changing ``UPD``
(``delete`` / ``create``)."""


CES_TYPE = "com.microsoft.SQL.CES.DML.V1"
"""The one event type CES documents ("current latest schema version is 1"; no DDL events)."""
SPEC_VERSION = "1.0"


json_decode = msgspec.json.decode


json_encode = msgspec.json.Encoder().encode


def is_ces(value: bytes | None) -> bool:
    """Cheap test: does this Kafka value look like a CES event (JSON or Avro)?"""
    if not value:
        return False
    first = value[0]
    if first == 0x06:
        return value[:4] == ces_avro.AVRO_MAGIC
    if first != 0x7B and first not in b" \t\r\n":  # "{" or leading whitespace
        return False
    return value.find(b"com.microsoft.SQL.CES.", 0, 600) >= 0  # "type" is the 2nd attribute


def parse_envelope(value: bytes) -> dict[str, Any]:
    """The envelope of a CES event as a dict (``data``: str, bytes or, non-conformant, an
    object). Raises :class:`DecodeError`."""
    if value[:4] == ces_avro.AVRO_MAGIC:
        try:
            return ces_avro.decode_envelope(value)
        except DecodeError as exc:
            cause = exc.__cause__
            if cause is None:
                raise
            raise DecodeError(f"not a CES Avro ChangeEvent ({fastavro_reason(cause)})") from cause
    try:
        doc = json_decode(value)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise DecodeError(f"invalid CES JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise DecodeError("CES event is not a JSON object")
    return doc  # type: ignore[no-any-return]


def segment_info(doc: Mapping[str, Any]) -> tuple[int, bool, int | None]:
    """(index, final, legacy total or None) of an event or segment."""
    if "segmentindex" in doc or "finalsegment" in doc:
        index = doc.get("segmentindex")
        final = doc.get("finalsegment")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0 \
                or not isinstance(final, bool):
            raise EnvelopeError("CES segmentindex/finalsegment missing or not int/boolean")
        return index, final, None
    if "splitindex" in doc or "splittotalcnt" in doc:  # the 2025 revision
        index = doc.get("splitindex", 0)
        total = doc.get("splittotalcnt", 0)
        if not isinstance(index, int) or not isinstance(total, int) or index < 0 or total < 0:
            raise EnvelopeError("CES splitindex/splittotalcnt not non-negative integers")
        return index, total <= 1, (None if total <= 1 else total)
    return 0, True, None


def data_text(doc: Mapping[str, Any]) -> Any:
    return doc.get("data")


def starts_document(fragment: Any) -> bool:
    """Is this ``data`` (text or Avro bytes) the start of a whole ``Data`` document?"""
    if isinstance(fragment, str):
        head = fragment.lstrip()[:40]
        return head.startswith("{") and '"eventsource"' in head
    if isinstance(fragment, bytes | bytearray):
        try:
            ces_avro.decode_data(bytes(fragment))
        except RecordError:
            return False
        return True
    return isinstance(fragment, dict)


def parse_data(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The ``data`` of a whole event as a dict (JSON text, Avro bytes or an object)."""
    data = doc.get("data")
    if isinstance(data, str):
        try:
            parsed = json_decode(data)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise DecodeError(f"CES data is not JSON (an incomplete segment?): {exc}") from exc
    elif isinstance(data, bytes | bytearray):
        parsed, _ = ces_avro.decode_data(bytes(data))
    elif isinstance(data, dict):
        parsed = data  # non-conformant: an object instead of a string
    else:
        raise EnvelopeError("CES event without data")
    if not isinstance(parsed, dict) or not isinstance(parsed.get("eventsource"), dict) \
            or not isinstance(parsed.get("eventrow"), dict):
        raise EnvelopeError("CES data lacks eventsource/eventrow")
    return parsed  # type: ignore[no-any-return]


def parse_row(text: Any) -> dict[str, Any] | None:
    """``old``/``current`` → ``{column: text | None}``; ``"{}"`` and null → ``None``."""
    if text is None:
        return None
    row = text
    if isinstance(text, str):
        if text == "{}":
            return None
        try:
            row = json_decode(text)
        except (msgspec.DecodeError, RecursionError) as exc:
            raise DecodeError(f"CES row is not JSON: {exc}") from exc
    if not isinstance(row, dict):
        raise EnvelopeError("CES row image is not a JSON object")
    return row or None


def text_of(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return repr(value)
    return json_encode(value).decode()
