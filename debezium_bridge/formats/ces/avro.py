"""CES Avro (``@encoding = Binary``): the ``ChangeEvent`` envelope and the ``Data`` record.

The schemas are the ones published on MS Learn (message-format.md, "CES CloudEvent Avro schema"
and "CES data attribute Avro schema"); ``avro/ces_*.avsc`` hold the same text and a test checks
that they are identical. An event is the Avro binary of ``ChangeEvent`` whose ``data`` is the Avro
binary of ``Data`` (or a fragment of it, when the event is split into segments). There is no
schema id or registry framing: CES writes plain Avro binary.

``Data`` exists in two revisions: the 2026-08 one has ``transaction.finalevent``, the 2025 one
has not. Readers tell them apart by decoding with both (see :func:`decode_data`).
"""

from __future__ import annotations

import io
from typing import Any, Literal

import fastavro

from debezium_bridge.errors import DecodeError

DataRevision = Literal["2026-08", "2025"]


def _record(name: str, fields: list[tuple[str, Any]]) -> dict[str, Any]:
    return {"name": name, "type": "record",
            "fields": [{"name": n, "type": t} for n, t in fields]}


CHANGE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "ChangeEvent",
    "fields": [{"name": n, "type": t} for n, t in (
        ("specversion", "string"), ("type", "string"), ("source", "string"), ("id", "string"),
        ("logicalid", "string"), ("time", "string"), ("datacontenttype", "string"),
        ("operation", "string"), ("segmentindex", "int"), ("finalsegment", "boolean"),
        ("data", "bytes"))],
}


def data_schema(revision: DataRevision = "2026-08") -> dict[str, Any]:
    """The ``Data`` record schema of a documentation revision."""
    transaction = [("commitlsn", "string"), ("beginlsn", "string"), ("sequencenumber", "int")]
    if revision == "2026-08":
        transaction.append(("finalevent", "boolean"))
    transaction.append(("committime", "string"))
    return _record("Data", [
        ("eventsource", _record("EventSource", [
            ("db", "string"), ("schema", "string"), ("tbl", "string"),
            ("cols", {"type": "array", "items": _record(
                "Column", [("name", "string"), ("type", "string"), ("index", "int")])}),
            ("pkkey", {"type": "array", "items": _record(
                "PkKey", [("columnname", "string"), ("value", "string")])}),
            ("transaction", _record("Transaction", transaction)),
        ])),
        ("eventrow", _record("EventRow", [("old", "string"), ("current", "string")])),
    ])


_ENVELOPE = fastavro.parse_schema(CHANGE_EVENT_SCHEMA)
_DATA = {revision: fastavro.parse_schema(data_schema(revision))
         for revision in ("2026-08", "2025")}


def write(schema: Any, datum: Any) -> bytes:
    buffer = io.BytesIO()
    fastavro.schemaless_writer(buffer, schema, datum)
    return buffer.getvalue()


def encode_envelope(envelope: dict[str, Any]) -> bytes:
    """Avro binary of a ``ChangeEvent`` dict (``data`` as bytes)."""
    return write(_ENVELOPE, envelope)


def encode_data(data: dict[str, Any], revision: DataRevision = "2026-08") -> bytes:
    """Avro binary of a ``Data`` dict."""
    return write(_DATA[revision], data)


def _read_exact(schema: Any, raw: bytes) -> Any:
    buffer = io.BytesIO(raw)
    datum = fastavro.schemaless_reader(buffer, schema, None)
    if buffer.tell() != len(raw):
        raise ValueError(f"{len(raw) - buffer.tell()} trailing bytes")
    return datum


def decode_envelope(raw: bytes) -> dict[str, Any]:
    """A ``ChangeEvent`` dict from Avro binary; raises :class:`DecodeError`."""
    try:
        datum = _read_exact(_ENVELOPE, raw)
    except Exception as exc:
        raise DecodeError(f"not a CES Avro ChangeEvent: {type(exc).__name__}: {exc}") from exc
    return datum  # type: ignore[no-any-return]


def decode_data(raw: bytes) -> tuple[dict[str, Any], DataRevision]:
    """A ``Data`` dict from Avro binary, trying the 2026-08 revision, then 2025. A revision is
    accepted only if it consumes every byte and its ``committime`` is a timestamp text."""
    errors = []
    for revision in ("2026-08", "2025"):
        try:
            datum = _read_exact(_DATA[revision], raw)
        except Exception as exc:
            errors.append(f"{revision}: {type(exc).__name__}: {exc}")
            continue
        committime = datum["eventsource"]["transaction"]["committime"]
        if len(committime) >= 19 and committime[4] == "-" and committime[10] in "T ":
            return datum, revision  # type: ignore[return-value]
        errors.append(f"{revision}: committime {committime[:30]!r} is not a timestamp")
    raise DecodeError("CES Avro data matches neither Data revision (" + "; ".join(errors) + ")")


AVRO_MAGIC = b"\x061.0"
"""Every CES Avro event starts with ``specversion`` = ``"1.0"``: length 3 (zigzag 6), then
the text. No JSON text starts with byte 0x06."""
