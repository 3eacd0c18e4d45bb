"""Canonical change records as JSON lines, and their exploded (CDF) and flat (apply) views."""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Any

import msgspec

from debezium_bridge.model.change import ChangeRecord


class View(StrEnum):
    """The three views of the canonical feed (docs/canonical.md)."""

    CANONICAL = "canonical"
    EXPLODED = "exploded"
    FLAT = "flat"


_encoder = msgspec.json.Encoder()


def to_json(record: ChangeRecord) -> bytes:
    """One canonical record as compact JSON (no trailing newline)."""
    return _encoder.encode(record)


def to_dict(record: ChangeRecord) -> dict[str, Any]:
    """One canonical record as plain Python objects (JSON-ready)."""
    return msgspec.to_builtins(record)  # type: ignore[no-any-return]


_CHANGE_TYPES = {"insert": ("insert",), "read": ("insert",), "delete": ("delete",),
                 "update": ("update_preimage", "update_postimage"), "upsert": ("update_postimage",)}


def exploded_rows(record: ChangeRecord) -> Iterator[dict[str, Any]]:
    """Delta change-data-feed style rows: one per image, tagged with ``_change_type``."""
    types = _CHANGE_TYPES.get(record.op)
    if types is None:  # truncate has no row image
        return
    meta = {"_table_id": record.table_id, "_seq": record.seq, "_commit_ts": record.commit_ts,
            "_event_id": record.event_id}
    if len(types) == 2:
        yield {**(record.before or {}), "_change_type": types[0], **meta}
        yield {**(record.after or {}), "_change_type": types[1], **meta}
    elif types[0] == "delete":
        yield {**(record.before or record.key), "_change_type": "delete", **meta}
    else:
        yield {**(record.after or {}), "_change_type": types[0], **meta}


def flat_rows(record: ChangeRecord) -> Iterator[dict[str, Any]]:
    """Apply rows: key and ``after.*`` (``before.*`` for deletes) plus ``__op``, ``__seq``,
    ``__commit_ts``, ``__deleted``; ready for MERGE or ``create_auto_cdc_flow``.

    A key change becomes a delete of the old key and an upsert of the new one, so an applier
    keyed on the primary key stays correct.
    """
    meta = {"__table_id": record.table_id, "__seq": record.seq, "__commit_ts": record.commit_ts,
            "__unavailable": record.unavailable_columns, "__event_id": record.event_id}
    if record.op == "truncate":
        yield {"__op": "truncate", "__deleted": False, **meta}
        return
    if record.key_changed and record.old_key is not None:
        yield {**record.old_key, **(record.before or {}), **record.old_key, "__op": "delete",
               "__deleted": True, **meta}
    if record.op == "delete":
        yield {**record.key, **(record.before or {}), "__op": "delete", "__deleted": True, **meta}
    else:
        yield {**record.key, **(record.after or {}), "__op": record.op, "__deleted": False, **meta}


def encode_lines(records: list[ChangeRecord], view: View) -> bytes:
    """JSON lines (each ending in a newline) of ``records`` in the chosen view, in one buffer."""
    if view is View.CANONICAL:
        return _encoder.encode_lines(records)
    rows = exploded_rows if view is View.EXPLODED else flat_rows
    return _encoder.encode_lines([row for record in records for row in rows(record)])
