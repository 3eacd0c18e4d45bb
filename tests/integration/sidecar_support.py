"""Traffic, expectations and process handling for the sidecar's integration tests.

:func:`traffic` plays SQL Server + Debezium with :class:`CdcSimulator` (schema-less JSON values,
transaction metadata, snapshot rows, key changes of both kinds whose halves sit in different
partitions, connector restarts that re-send a partition's tail, corrupt records) and adds
Debezium heartbeats. The expected logical changes are derived from the operations fed to the
simulator (the rows as written, the LSNs it handed out), never from the program's output.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from debezium_bridge.formats.debezium.encode import TableSpec
from debezium_bridge.formats.debezium.sqltypes import SqlColumn
from debezium_bridge.model.records import RawRecord
from debezium_bridge.testing.simulator import (
    CUSTOMERS,
    CdcSimulator,
    Delete,
    Insert,
    KeyChange,
    Operation,
    Produced,
    Update,
)

PREFIX = "server1"
"""The connector's ``topic.prefix`` (tests that share the session's broker use their own)."""


def table(name: str) -> TableSpec:
    """An orders-like table (int key, int, decimal, datetime2(3), nvarchar, bit)."""
    return TableSpec(
        db="testDB", schema="dbo", table=name, key_columns=("id",),
        columns=(SqlColumn("id", "int", nullable=False), SqlColumn("customer", "int"),
                 SqlColumn("amount", "decimal(12,2)"), SqlColumn("placed", "datetime2(3)"),
                 SqlColumn("status", "nvarchar(20)"), SqlColumn("paid", "bit")))


def topic_of(spec: TableSpec, prefix: str = PREFIX) -> str:
    return f"{prefix}.{spec.db}.{spec.schema}.{spec.table}"


_WORDS = ("alpha", "beta", "gamma", "delta", "zürich", "日本", "naïve", "omega")


def _row(spec: TableSpec, row_id: int, rng: random.Random) -> dict[str, Any]:
    """A row in canonical form (decimal strings with their scale, ISO date-times)."""
    stamp = f"20{rng.randint(10, 29)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T" \
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    cents = rng.randint(-10**8, 10**8)
    amount = f"{'-' if cents < 0 else ''}{abs(cents) // 100}.{abs(cents) % 100:02d}"
    if spec.table == CUSTOMERS.table:
        return {"id": row_id, "name": " ".join(rng.sample(_WORDS, 2)),
                "email": f"u{row_id}@example.com", "balance": amount,
                "created": f"{stamp}.{rng.randint(0, 9_999_999):07d}",
                "notes": None if rng.random() < 0.3 else rng.choice(_WORDS)}
    return {"id": row_id, "customer": rng.randint(1, 10_000), "amount": amount,
            "placed": f"{stamp}.{rng.randint(0, 999):03d}", "status": rng.choice(_WORDS),
            "paid": rng.random() < 0.5}


Expected = tuple[str, str, int, int | None, str | None, str | None]
"""(topic, op, key id, old key id, commit_lsn, change_lsn)"""


@dataclass
class Traffic:
    tables: list[TableSpec]
    prefix: str = PREFIX
    chunks: list[list[RawRecord]] = field(default_factory=list)
    """Records in production order, cut at transaction boundaries."""
    expected: dict[Expected, tuple[dict[str, Any] | None, dict[str, Any] | None]] = \
        field(default_factory=dict)
    """Every logical change → (before, after) images."""
    records: Counter[str] = field(default_factory=Counter)
    duplicates: Counter[str] = field(default_factory=Counter)
    tombstones: Counter[str] = field(default_factory=Counter)
    corrupt: list[RawRecord] = field(default_factory=list)
    key_changes: Counter[str] = field(default_factory=Counter)
    events: int = 0

    @property
    def transaction_topic(self) -> str:
        return f"{self.prefix}.transaction"

    @property
    def heartbeat_topic(self) -> str:
        return f"__debezium-heartbeat.{self.prefix}"

    @property
    def topics(self) -> dict[str, int]:
        return {**{topic_of(t, self.prefix): 3 for t in self.tables},
                self.transaction_topic: 1, self.heartbeat_topic: 1}

    def changes(self, topic: str) -> int:
        return sum(1 for key in self.expected if key[0] == topic)


def traffic(tables: list[TableSpec], events: int, chunks: int, seed: int,
            replay_every: int = 6_000, corrupt_every: int = 15_000,
            heartbeat_every: int = 1_500, prefix: str = PREFIX) -> Traffic:
    """About ``events`` data events over ``tables`` (3 partitions each), in ``chunks``."""
    rng = random.Random(seed)
    sim = CdcSimulator(tables, topic_prefix=prefix, encoding="json", partitions=3,
                       transaction_metadata=True)
    out = Traffic(tables, prefix)
    live: dict[str, _Rows] = {t.table: _Rows() for t in tables}
    next_id = dict.fromkeys(live, 1)

    def new_id(name: str) -> int:
        row_id = next_id[name]
        next_id[name] += 1
        return row_id

    def expect(p: Produced, op: str, key: int, old_key: int | None,
               before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        out.expected[(p.record.topic, op, key, old_key, p.commit_lsn, p.change_lsn)] = \
            (before, after)

    snapshot = {t.table: [_row(t, new_id(t.table), rng) for _ in range(30)] for t in tables}
    for p in sim.snapshot(snapshot):
        assert p.key is not None and p.table is not None
        row = next(r for r in snapshot[p.table] if r["id"] == p.key["id"])
        live[p.table][row["id"]] = row
        expect(p, "read", row["id"], None, None, row)
    done = 0
    cut_at = events // chunks
    mark = 0
    since_heartbeat = 0
    heartbeats: list[tuple[int, RawRecord]] = []
    while done < events:
        ops: list[Operation] = []
        for _ in range(rng.randint(1, 4)):
            spec = rng.choice(tables)
            rows = live[spec.table]
            roll = rng.random()
            busy = set().union(*(_ids(o) for o in ops if o.table == spec.table))
            pick = rows.pick(rng, busy)
            if roll < 0.25 or pick is None:
                row = _row(spec, new_id(spec.table), rng)
                ops.append(Insert(spec.table, row))
            elif roll < 0.75:
                old = rows[pick]
                new = dict(_row(spec, old["id"], rng))
                ops.append(Update(spec.table, old, new))
            elif roll < 0.87:
                ops.append(Delete(spec.table, rows[pick]))
            else:
                old = rows[pick]
                partition = sim.partition_of(spec.table, {"id": old["id"]})
                fresh = new_id(spec.table)
                while sim.partition_of(spec.table, {"id": fresh}) == partition:
                    fresh = new_id(spec.table)
                ops.append(KeyChange(spec.table, old, dict(old, id=fresh),
                                     via_update=rng.random() < 0.5))
        produced = sim.commit(ops)
        i = 0
        for op in ops:
            rows = live[op.table]
            if isinstance(op, Insert):
                p = produced[i]
                i += 1
                rows[op.row["id"]] = dict(op.row)
                expect(p, "insert", op.row["id"], None, None, dict(op.row))
                done += 1
            elif isinstance(op, Update):
                p = produced[i]
                i += 1
                rows[op.after["id"]] = dict(op.after)
                expect(p, "update", op.after["id"], None, dict(op.before), dict(op.after))
                done += 1
            elif isinstance(op, Delete):
                p = produced[i]
                i += 2
                del rows[op.row["id"]]
                expect(p, "delete", op.row["id"], None, dict(op.row), None)
                done += 1
            else:
                d = produced[i]
                i += 3
                del rows[op.before["id"]]
                rows[op.after["id"]] = dict(op.after)
                expect(d, "update", op.after["id"], op.before["id"], dict(op.before),
                       dict(op.after))
                out.key_changes[d.record.topic] += 1
                done += 2
        since_heartbeat += len(produced)
        if done > 500 and rng.random() < len(ops) / replay_every * 4:
            # (not in the snapshot: a connector re-snapshots at a new LSN rather than
            # re-sending snapshot rows, see docs/sidecar.md)
            sim.replay(rng.randrange(3), rng.randint(5, 60))
        if rng.random() < len(ops) / corrupt_every * 4:
            spec = rng.choice(tables)
            if live[spec.table]:
                key = {"id": rng.choice(list(live[spec.table]))}
                sim.inject_corrupt(spec.table, key, b'{"before":null,"after":{"id":'
                                   + str(key["id"]).encode() + b',"name":"trunc')
        if since_heartbeat >= heartbeat_every:
            since_heartbeat = 0
            ts = 1_700_000_000_000 + len(sim.produced)
            heartbeats.append((len(sim.produced), RawRecord(
                out.heartbeat_topic, 0, None, ts, json.dumps({"serverName": prefix}).encode(),
                json.dumps({"ts_ms": ts}).encode())))
        if done - mark >= cut_at or done >= events:
            sim.finish() if done >= events else None
            mark = done
            heartbeats.append((len(sim.produced), None))  # type: ignore[arg-type]
    out.events = done
    # production order with heartbeats interleaved, cut into chunks
    produced_all = sim.produced
    position = 0
    chunk: list[RawRecord] = []
    for at, beat in heartbeats:
        chunk.extend(_records(produced_all[position:at], out))
        position = at
        if beat is None:
            out.chunks.append(chunk)
            chunk = []
        else:
            chunk.append(beat)
            out.records[out.heartbeat_topic] += 1
    chunk.extend(_records(produced_all[position:], out))
    if chunk:
        out.chunks.append(chunk)
    return out


class _Rows(dict[int, dict[str, Any]]):
    """Live rows with O(1) random choice."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[int] = []
        self.slot: dict[int, int] = {}

    def __setitem__(self, key: int, value: dict[str, Any]) -> None:
        if key not in self:
            self.slot[key] = len(self.order)
            self.order.append(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: int) -> None:
        super().__delitem__(key)
        i = self.slot.pop(key)
        last = self.order.pop()
        if last != key:
            self.order[i] = last
            self.slot[last] = i

    def pick(self, rng: random.Random, busy: set[int]) -> int | None:
        for _ in range(8):
            if not self.order:
                return None
            key = self.order[rng.randrange(len(self.order))]
            if key not in busy:
                return key
        return None


def _ids(op: Operation) -> set[int]:
    if isinstance(op, Insert | Delete):
        return {op.row["id"]}
    return {op.before["id"], op.after["id"]}


def _records(produced: list[Produced], out: Traffic) -> list[RawRecord]:
    records = []
    for p in produced:
        r = p.record
        records.append(RawRecord(r.topic, r.partition, None, r.timestamp, r.key, r.value,
                                 r.headers))
        out.records[r.topic] += 1
        if p.kind == "data" and p.replayed:
            out.duplicates[r.topic] += 1
        elif p.kind == "tombstone":
            out.tombstones[r.topic] += 1
        elif p.kind == "corrupt":
            out.corrupt.append(r)
    return records


def table_schemas(tables: list[TableSpec], path: Path, prefix: str = PREFIX) -> Path:
    """A table-schema file for the schema-less values: one schema-ful envelope schema per
    topic, as the JsonConverter writes it."""
    sim = CdcSimulator(tables, topic_prefix=prefix, encoding="json-schema", partitions=3)
    docs = {}
    for spec in tables:
        (p,) = sim.commit([Insert(spec.table, _row(spec, 1, random.Random(0)))])
        docs[topic_of(spec, prefix)] = json.loads(p.record.value or b"")["schema"]
    path.write_text(json.dumps(docs))
    return path


# -- reading the output --------------------------------------------------------------------
def read_all(bootstrap: str, topics: list[str], timeout: float = 60.0, *,
             committed: bool = False) -> list[Any]:
    """Every message of ``topics``, from the beginning to the end-of-partition event (with
    ``committed``: as a ``read_committed`` consumer sees them)."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "fetch.wait.max.ms": 10,
                         "isolation.level": "read_committed" if committed
                         else "read_uncommitted"})
    try:
        metadata = consumer.list_topics(timeout=timeout)
        assignment = [TopicPartition(t, p, 0) for t in topics if t in metadata.topics
                      for p in metadata.topics[t].partitions]
        if not assignment:
            return []
        consumer.assign(assignment)
        waiting = {(tp.topic, tp.partition) for tp in assignment}
        out = []
        deadline = time.monotonic() + timeout
        while waiting and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.2):
                if m.error() is None:
                    out.append(m)
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    waiting.discard((m.topic(), m.partition()))
        assert not waiting, f"no end of partition for {waiting}"
        return out
    finally:
        consumer.close()


def headers_of(message: Any) -> dict[str, str]:
    return {k: (v or b"").decode() for k, v in message.headers() or ()}


# -- the sidecar process -------------------------------------------------------------------
def group_settings(embedded: bool) -> dict[str, str]:
    """Consumer-group timeouts: short on the embedded broker (its first assignment takes about
    half the session timeout); real brokers reject sessions under 6 s."""
    if embedded:
        return {"session.timeout.ms": "1000", "heartbeat.interval.ms": "250"}
    return {"session.timeout.ms": "6000", "heartbeat.interval.ms": "1500"}


class Sidecar:
    """One ``debezium-bridge sidecar`` process, its standard error in ``log``."""

    def __init__(self, config: Path, log: Path, hooks: str | None = None) -> None:
        env = dict(os.environ)
        env.pop("DEBEZIUM_BRIDGE_TEST_HOOKS", None)
        if hooks:
            env["DEBEZIUM_BRIDGE_TEST_HOOKS"] = hooks
        self.log = log
        self.started = time.monotonic()
        with log.open("wb") as handle:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "debezium_bridge", "sidecar", "--config", str(config)],
                stdout=subprocess.DEVNULL, stderr=handle, env=env, start_new_session=True)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, count: int = 1, timeout: float = 60.0) -> bool:
        """Until ``needle`` appears ``count`` times in the log (False if the process ended or
        the time is up)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.text().count(needle) >= count:
                return True
            if self.process.poll() is not None:
                return self.text().count(needle) >= count
            time.sleep(0.01)
        return False

    def kill(self) -> None:
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def terminate(self, timeout: float) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)


def write_config(path: Path, **settings: Any) -> Path:
    path.write_text(json.dumps(settings))
    return path
