"""JSON Schemas (draft 2020-12) of the CES events this package writes, and a validator.

:data:`ENVELOPE_SCHEMA` describes one Kafka value of the JSON encoding (an event or a segment):
the 11 attributes of the current revision (docs/ces.md), nothing else, with their
CloudEvents types and value rules. :data:`DATA_SCHEMA` describes the parsed ``data`` of a whole
event (after segments are joined) and :data:`ROW_SCHEMA` the parsed ``old``/``current`` texts.
These describe the *current* revision as written by the encoder; the decoder is more lenient
(legacy ``splitindex``, pretty data, ...).

:func:`validate_events` checks a sequence of Kafka values: each against the envelope schema,
segments joined by ``logicalid`` (contiguous indices, one final segment, equal attributes except
``id``/``segmentindex``/``finalsegment``), the joined ``data`` against the data schema, rows
against the row schema, and the cross-field rules a JSON Schema cannot state (``logicalid`` =
guid : commit LSN : sequence number; ``time`` = ``committime``; ``pkkey`` columns are columns;
``"{}"`` exactly where the operation has no image).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import jsonschema

from debezium_bridge.errors import BridgeError
from debezium_bridge.formats.ces import avro as ces_avro

_LSN = r"^[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{4}$"
_TIME = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z$"
_UUID = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_SQL_TYPE = r"^[a-z][a-z0-9_ ]*(\((max|[0-9]+)(,[0-9]+)?\))?$"
_INT32_MAX = 2**31 - 1

ENVELOPE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:debezium-bridge:ces:envelope",
    "title": "CES CloudEvent (com.microsoft.SQL.CES.DML.V1), JSON encoding",
    "type": "object",
    "required": ["specversion", "type", "source", "id", "logicalid", "time", "datacontenttype",
                 "operation", "segmentindex", "finalsegment", "data"],
    "additionalProperties": False,
    "properties": {
        "specversion": {"const": "1.0"},
        "type": {"const": "com.microsoft.SQL.CES.DML.V1"},
        "source": {"const": "/"},
        "id": {"type": "string", "pattern": _UUID},
        "logicalid": {"type": "string",
                      "pattern": r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
                                 r":[0-9A-F]{20}:[0-9]{20}$"},
        "time": {"type": "string", "pattern": _TIME, "format": "date-time"},
        "datacontenttype": {"enum": ["application/json", "application/avro-json"]},
        "operation": {"enum": ["INS", "UPD", "DEL"]},
        "segmentindex": {"type": "integer", "minimum": 0, "maximum": _INT32_MAX},
        "finalsegment": {"type": "boolean"},
        "data": {"type": "string", "minLength": 1},
    },
}

DATA_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:debezium-bridge:ces:data",
    "title": "CES data (record Data, 2026-08 revision), parsed",
    "type": "object",
    "required": ["eventsource", "eventrow"],
    "additionalProperties": False,
    "properties": {
        "eventsource": {
            "type": "object",
            "required": ["db", "schema", "tbl", "cols", "pkkey", "transaction"],
            "additionalProperties": False,
            "properties": {
                "db": {"type": "string", "minLength": 1},
                "schema": {"type": "string", "minLength": 1},
                "tbl": {"type": "string", "minLength": 1},
                "cols": {"type": "array", "items": {
                    "type": "object", "required": ["name", "type", "index"],
                    "additionalProperties": False,
                    "properties": {"name": {"type": "string", "minLength": 1},
                                   "type": {"type": "string", "pattern": _SQL_TYPE},
                                   "index": {"type": "integer", "minimum": 0,
                                             "maximum": _INT32_MAX}}}},
                "pkkey": {"type": "array", "items": {
                    "type": "object", "required": ["columnname", "value"],
                    "additionalProperties": False,
                    "properties": {"columnname": {"type": "string", "minLength": 1},
                                   "value": {"type": "string"}}}},
                "transaction": {
                    "type": "object",
                    "required": ["commitlsn", "beginlsn", "sequencenumber", "finalevent",
                                 "committime"],
                    "additionalProperties": False,
                    "properties": {
                        "commitlsn": {"type": "string", "pattern": _LSN},
                        "beginlsn": {"type": "string", "pattern": _LSN},
                        "sequencenumber": {"type": "integer", "minimum": 1,
                                           "maximum": _INT32_MAX},
                        "finalevent": {"const": False},
                        "committime": {"type": "string", "pattern": _TIME},
                    }},
            }},
        "eventrow": {
            "type": "object", "required": ["old", "current"], "additionalProperties": False,
            "properties": {"old": {"type": "string", "minLength": 2},
                           "current": {"type": "string", "minLength": 2}}},
    },
}

ROW_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:debezium-bridge:ces:row",
    "title": "CES eventrow.old / eventrow.current, parsed",
    "type": "object",
    "additionalProperties": {"type": ["string", "null"]},
}

_CHECKER = jsonschema.FormatChecker()
_ENVELOPE = jsonschema.Draft202012Validator(ENVELOPE_SCHEMA, format_checker=_CHECKER)
_DATA = jsonschema.Draft202012Validator(DATA_SCHEMA)
_ROW = jsonschema.Draft202012Validator(ROW_SCHEMA)
for _schema in (ENVELOPE_SCHEMA, DATA_SCHEMA, ROW_SCHEMA):
    jsonschema.Draft202012Validator.check_schema(_schema)


class CesValidationError(BridgeError, AssertionError):
    """A CES event does not follow the format."""


def _check(validator: jsonschema.Draft202012Validator, doc: Any, what: str) -> None:
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    if errors:
        details = "; ".join(f"{'/'.join(map(str, e.path)) or '(root)'}: {e.message}"
                            for e in errors[:5])
        raise CesValidationError(f"{what}: {details}")


def _event_dict(value: bytes) -> dict[str, Any]:
    if value[:4] == ces_avro.AVRO_MAGIC:
        doc = ces_avro.decode_envelope(value)
        if doc["datacontenttype"] in ("application/json", "application/avro-json"):
            raise CesValidationError("Avro event with a JSON datacontenttype")
        return doc
    try:
        doc = json.loads(value)
    except ValueError as exc:
        raise CesValidationError(f"not JSON: {exc}") from exc
    _check(_ENVELOPE, doc, f"envelope {doc.get('id') if isinstance(doc, dict) else ''}")
    return doc  # type: ignore[no-any-return]


def validate_data(data: dict[str, Any], envelope: dict[str, Any]) -> None:
    """Data schema, row schemas and the cross-field rules of one whole event."""
    _check(_DATA, data, f"data of {envelope.get('logicalid')}")
    source, rows = data["eventsource"], data["eventrow"]
    transaction = source["transaction"]
    _, lsn20, seq20 = envelope["logicalid"].rsplit(":", 2) if envelope["logicalid"].count(
        ":") >= 2 else ("", "", "")
    if lsn20 != transaction["commitlsn"].replace(":", "") or int(seq20 or -1) != \
            transaction["sequencenumber"]:
        raise CesValidationError(f"logicalid {envelope['logicalid']} does not match commitlsn "
                                 f"{transaction['commitlsn']} / sequencenumber "
                                 f"{transaction['sequencenumber']}")
    if transaction["committime"] != envelope["time"]:
        raise CesValidationError("time != transaction.committime")
    names = [c["name"] for c in source["cols"]]
    if len(set(names)) != len(names):
        raise CesValidationError(f"duplicate column names in cols: {names}")
    indexes = [c["index"] for c in source["cols"]]
    if indexes != sorted(set(indexes)):
        raise CesValidationError(f"cols indexes not increasing: {indexes}")
    for pk in source["pkkey"]:
        if pk["columnname"] not in names:
            raise CesValidationError(f"pkkey column {pk['columnname']!r} not in cols")
    parsed = {}
    for side in ("old", "current"):
        try:
            row = json.loads(rows[side])
        except ValueError as exc:
            raise CesValidationError(f"eventrow.{side} is not JSON: {exc}") from exc
        _check(_ROW, row, f"eventrow.{side}")
        extra = [c for c in row if c not in names]
        if extra:
            raise CesValidationError(f"eventrow.{side} has columns not in cols: {extra}")
        parsed[side] = row
    operation = envelope["operation"]
    if operation == "INS" and parsed["old"]:
        raise CesValidationError("INS with a non-empty old row")
    if operation == "DEL" and parsed["current"]:
        raise CesValidationError("DEL with a non-empty current row")
    if operation in ("INS", "UPD") and not parsed["current"]:
        raise CesValidationError(f"{operation} without a current row")


_SEGMENT_FIELDS = ("id", "segmentindex", "finalsegment", "data")


def validate_events(values: Iterable[bytes], *, max_bytes: int | None = None,
                    index_base: int | None = None) -> list[dict[str, Any]]:
    """Validate Kafka values (events and segments, JSON or Avro) and return the whole events
    (envelope dicts with ``data`` parsed). Raises :class:`CesValidationError`."""
    groups: dict[str, list[dict[str, Any]]] = {}
    order: list[str] = []
    ids: set[str] = set()
    for value in values:
        if max_bytes is not None and len(value) > max_bytes:
            raise CesValidationError(f"event of {len(value)} bytes > {max_bytes}")
        doc = _event_dict(value)
        if doc["id"] in ids:
            raise CesValidationError(f"id {doc['id']} used twice")
        ids.add(doc["id"])
        if doc["logicalid"] not in groups:
            order.append(doc["logicalid"])
        groups.setdefault(doc["logicalid"], []).append(doc)
    out = []
    for logical_id in order:
        parts = sorted(groups[logical_id], key=lambda d: d["segmentindex"])
        indexes = [p["segmentindex"] for p in parts]
        base = indexes[0]
        if (index_base is not None and base != index_base) or base not in (0, 1):
            raise CesValidationError(f"{logical_id}: first segment index {base}")
        if indexes != list(range(base, base + len(parts))):
            raise CesValidationError(f"{logical_id}: segment indexes {indexes} not contiguous")
        finals = [p["finalsegment"] for p in parts]
        if finals != [False] * (len(parts) - 1) + [True]:
            raise CesValidationError(f"{logical_id}: finalsegment flags {finals}")
        for p in parts[1:]:
            differing = [k for k in p if k not in _SEGMENT_FIELDS and p[k] != parts[0][k]]
            if differing or set(p) != set(parts[0]):
                raise CesValidationError(f"{logical_id}: segments differ in {differing}")
        fragments = [p["data"] for p in parts]
        whole = dict(parts[0])
        if isinstance(fragments[0], bytes):
            data, revision = ces_avro.decode_data(b"".join(fragments))
            if revision == "2025":
                data["eventsource"]["transaction"]["finalevent"] = False
        else:
            try:
                data = json.loads("".join(fragments))
            except ValueError as exc:
                raise CesValidationError(f"{logical_id}: joined data is not JSON: {exc}") \
                    from exc
        validate_data(data, whole)
        whole["data"] = data
        whole["segments"] = len(parts)
        out.append(whole)
    return out
