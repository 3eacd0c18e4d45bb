"""Hand-built Debezium SQL Server events (schema-less JsonConverter), shaped per reference §1."""

from __future__ import annotations

import json
from typing import Any

from debezium_bridge.model.records import RawRecord

TOPIC = "server1.testDB.dbo.customers"


def lsn(n: int, slot: int = 0) -> str:
    """A Debezium-form LSN ``xxxxxxxx:xxxxxxxx:xxxx``."""
    return f"{0x27:08x}:{n:08x}:{slot:04x}"


def event(op: str, key: int | dict[str, Any] | None, *, commit: str | None, change: str | None,
          serial: int | str | None, before: dict[str, Any] | None = None,
          after: dict[str, Any] | None = None, partition: int = 0, offset: int = 0,
          topic: str = TOPIC, snapshot: Any = "false", ts_ms: int = 1_700_000_000_000,
          headers: tuple[tuple[str, bytes | None], ...] = (), tx: dict[str, Any] | None = None,
          table: str = "customers") -> RawRecord:
    key_doc = {"id": key} if isinstance(key, int) else key
    value = {
        "before": before,
        "after": after,
        "source": {"version": "3.6.3.Final", "connector": "sqlserver", "name": "server1",
                   "ts_ms": 1_699_999_999_000, "snapshot": snapshot, "db": "testDB",
                   "sequence": None, "schema": "dbo", "table": table, "change_lsn": change,
                   "commit_lsn": commit, "event_serial_no": serial},
        "transaction": tx,
        "op": op,
        "ts_ms": ts_ms,
    }
    return RawRecord(topic=topic, partition=partition, offset=offset, timestamp=ts_ms,
                     key=None if key_doc is None else json.dumps(key_doc).encode(),
                     value=json.dumps(value).encode(), headers=headers)


def tombstone(key: int, *, partition: int = 0, offset: int = 0, topic: str = TOPIC) -> RawRecord:
    return RawRecord(topic=topic, partition=partition, offset=offset,
                     key=json.dumps({"id": key}).encode(), value=None)


def row(id_: int, name: str = "a", notes: str | None = "n") -> dict[str, Any]:
    return {"id": id_, "name": name, "notes": notes}


def insert(id_: int, n: int, *, name: str = "a", **kw: Any) -> RawRecord:
    return event("c", id_, commit=lsn(n), change=lsn(n, 2), serial=1, after=row(id_, name), **kw)


def update(id_: int, n: int, old: str, new: str, **kw: Any) -> RawRecord:
    return event("u", id_, commit=lsn(n), change=lsn(n, 2), serial=2,
                 before=row(id_, old), after=row(id_, new), **kw)


def delete(id_: int, n: int, **kw: Any) -> RawRecord:
    return event("d", id_, commit=lsn(n), change=lsn(n, 2), serial=1, before=row(id_), **kw)
