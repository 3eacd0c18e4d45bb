"""Sample Debezium SQL Server traffic for the demo, the tests and the benchmarks.

:class:`CdcSimulator` plays a tiny SQL Server with CDC and a Debezium connector in front of Kafka:
monotonically increasing LSNs, transactions whose changes share ``commit_lsn``, one ``change_lsn``
per change, ``event_serial_no`` computed as ``SqlServerOffsetContext#setChangePosition`` does,
snapshot rows, tombstones after deletes, both kinds of primary-key change, optional transaction
metadata, and Kafka's default partitioner (murmur2 of the key bytes). Records are encoded by
:class:`~debezium_bridge.formats.debezium.encode.DebeziumEncoder`, so JSON schemas name the types
as Kafka's JsonConverter does (FLOAT64 ``"double"``, FLOAT32 ``"float"``).

:func:`demo_traffic` is the README demo; :func:`bulk_corpus` streams large deterministic corpora.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import msgspec

from debezium_bridge.formats.debezium.encode import (
    DEFAULT_VERSION,
    DebeziumEncoder,
    Encoding,
    TableSpec,
    TransactionBlock,
    TransactionTopicEncoder,
    features,
)
from debezium_bridge.formats.debezium.registry import InMemoryRegistry, SchemaRegistrar
from debezium_bridge.formats.debezium.sqltypes import (
    DEFAULT_MODES,
    UNAVAILABLE_VALUE,
    ConnectorModes,
    SqlColumn,
)
from debezium_bridge.model.records import Header, RawRecord
from debezium_bridge.partitioner import partition_for


def format_lsn(value: int) -> str:
    """An 80-bit LSN as Debezium writes it: ``xxxxxxxx:xxxxxxxx:xxxx`` (lower-case hex)."""
    h = f"{value:020x}"
    return f"{h[:8]}:{h[8:16]}:{h[16:]}"


class LsnClock:
    """Hands out strictly increasing LSNs."""

    def __init__(self, start: int = 0x0000002500000D080001) -> None:
        self.last = start

    def next(self, step: int = 1) -> int:
        """A new LSN ``step`` above the last one."""
        self.last += step
        return self.last


class SerialCounter:
    """``event_serial_no`` as ``SqlServerOffsetContext#setChangePosition`` computes it."""

    def __init__(self) -> None:
        self._position: tuple[str | None, str | None] | None = None
        self._serial = 0

    def next(self, commit_lsn: str | None, change_lsn: str | None, cdc_rows: int) -> int:
        """Serial of an event made of ``cdc_rows`` CDC rows (2 for a 3+4 update pair)."""
        position = (commit_lsn, change_lsn)
        self._serial = self._serial + cdc_rows if position == self._position else cdc_rows
        self._position = position
        return self._serial


# --------------------------------------------------------------------------- simulator


class Insert(msgspec.Struct, frozen=True):
    """An INSERT (CDC operation 2) with its canonical row."""

    table: str
    row: Mapping[str, Any]


class Update(msgspec.Struct, frozen=True):
    """An UPDATE that keeps the key (CDC operations 3+4)."""

    table: str
    before: Mapping[str, Any]
    after: Mapping[str, Any]


class Delete(msgspec.Struct, frozen=True):
    """A DELETE (CDC operation 1)."""

    table: str
    row: Mapping[str, Any]


class KeyChange(msgspec.Struct, frozen=True):
    """An UPDATE of key columns: Case A (CDC rows 1+2 at one ``__$seqval``) unless ``via_update``
    (Case B, a 3+4 pair whose keys differ)."""

    table: str
    before: Mapping[str, Any]
    after: Mapping[str, Any]
    via_update: bool = False


Operation = Insert | Update | Delete | KeyChange
RecordKind = Literal["data", "tombstone", "transaction", "corrupt"]


class Produced(msgspec.Struct, frozen=True):
    """One record the simulated connector produced, with what it stands for."""

    record: RawRecord
    kind: RecordKind
    table: str | None = None
    op: str | None = None
    key: Mapping[str, Any] | None = None
    commit_lsn: str | None = None
    change_lsn: str | None = None
    event_serial_no: int | None = None
    unavailable: tuple[str, ...] = ()
    replayed: bool = False


class _OpenTx(msgspec.Struct):
    id: str
    ts_ms: int
    total: int = 0
    per_table: dict[str, int] = msgspec.field(default_factory=dict)


class CdcSimulator:
    """A SQL Server + Debezium + Kafka producer in miniature (see the module docstring)."""

    def __init__(
        self,
        tables: Sequence[TableSpec],
        *,
        topic_prefix: str = "server1",
        encoding: Encoding = "json-schema",
        version: str = DEFAULT_VERSION,
        modes: ConnectorModes = DEFAULT_MODES,
        partitions: int = 3,
        registrar: SchemaRegistrar | None = None,
        transaction_metadata: bool = False,
        start_ms: int = 1_700_000_000_000,
        capture_lag_ms: int = 350,
    ) -> None:
        if encoding == "avro" and registrar is None:
            registrar = InMemoryRegistry()
        self.encoders = {t.table: DebeziumEncoder(t, topic_prefix, modes=modes, encoding=encoding,
                                                  version=version, registrar=registrar)
                         for t in tables}
        self.tx_encoder = (TransactionTopicEncoder(topic_prefix, encoding=encoding,
                                                   version=version, registrar=registrar)
                           if transaction_metadata else None)
        self.partitions = partitions
        self.produced: list[Produced] = []
        self.lsn = LsnClock()
        self._serial = SerialCounter()
        self._clock_ms = start_ms
        self._lag_ms = capture_lag_ms
        self._emitted_ms = start_ms
        self._offsets: dict[tuple[str, int], int] = {}
        self._round_robin = 0
        self._open_tx: _OpenTx | None = None
        self._reencoders: dict[int, Callable[[int], bytes]] = {}
        self._simple_markers = features(version).envelope_version is None  # 1.x: true/last

    @property
    def records(self) -> list[RawRecord]:
        """Every produced record, in production order."""
        return [p.record for p in self.produced]

    def partition_of(self, table: str, key: Mapping[str, Any]) -> int:
        """The partition the default partitioner picks for a canonical key of ``table``."""
        enc = self.encoders[table]
        key_bytes = enc.encode_key(enc.key_of(enc.row(key)))
        if key_bytes is None:
            raise ValueError(f"{table} has no key")
        return partition_for(key_bytes, self.partitions)

    def _next_emit_ms(self, at_least: int) -> int:
        self._emitted_ms = max(self._emitted_ms + 1, at_least)
        return self._emitted_ms

    def _produce(self, topic: str, key_bytes: bytes | None, value: bytes | None,
                 headers: tuple[Header, ...], ts_ms: int, kind: RecordKind,
                 partition: int | None = None, **meta: Any) -> Produced:
        if partition is None:
            if key_bytes is not None:
                partition = partition_for(key_bytes, self.partitions)
            else:
                partition = self._round_robin % self.partitions
                self._round_robin += 1
        offset = self._offsets.get((topic, partition), 0)
        self._offsets[(topic, partition)] = offset + 1
        produced = Produced(RawRecord(topic, partition, offset, ts_ms, key_bytes, value, headers),
                            kind, **meta)
        self.produced.append(produced)
        return produced

    def _data(self, enc: DebeziumEncoder, op: str, before: dict[str, Any] | None,
              after: dict[str, Any] | None, source: dict[str, Any],
              tx: TransactionBlock | None, headers: tuple[Header, ...],
              canonical_key: Mapping[str, Any] | None, unavailable: tuple[str, ...]) -> Produced:
        ts_ms = self._next_emit_ms(source["ts_ms"] + self._lag_ms)
        image = after if after is not None else before
        assert image is not None
        key = enc.encode_key(enc.key_of(image))

        def reencode(new_ts_ms: int) -> bytes:
            return enc.encode_envelope(op, before, after, source, tx, new_ts_ms)

        produced = self._produce(
            enc.topic, key, reencode(ts_ms), headers, ts_ms, "data", table=enc.table.table,
            op=op, key=canonical_key, commit_lsn=source["commit_lsn"],
            change_lsn=source["change_lsn"], event_serial_no=source["event_serial_no"],
            unavailable=unavailable)
        self._reencoders[len(self.produced) - 1] = reencode
        return produced

    def _tombstone(self, data: Produced) -> Produced:
        rec = data.record
        return self._produce(rec.topic, rec.key, None, rec.headers,
                             self._next_emit_ms(rec.timestamp or 0), "tombstone",
                             partition=rec.partition, table=data.table, key=data.key,
                             commit_lsn=data.commit_lsn, change_lsn=data.change_lsn,
                             event_serial_no=data.event_serial_no)

    def _marker(self, first_table: bool, last_table: bool, first_row: bool,
                last_row: bool) -> str:
        # RelationalSnapshotChangeEventSource#setSnapshotMarker
        if last_table and last_row:
            return "last"
        if self._simple_markers:
            return "true"
        if first_table and first_row:
            return "first"
        if last_row:
            return "last_in_data_collection"
        if first_row:
            return "first_in_data_collection"
        return "true"

    def snapshot(self, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Produced]:
        """Initial snapshot: ``op r`` rows, ``commit_lsn`` = the max LSN when it starts."""
        commit_lsn = format_lsn(self.lsn.last)
        tables = [name for name, table_rows in rows.items() if table_rows]
        out = []
        for ti, name in enumerate(tables):
            enc = self.encoders[name]
            table_rows = rows[name]
            for ri, canonical in enumerate(table_rows):
                self._clock_ms += 1
                marker = self._marker(ti == 0, ti == len(tables) - 1, ri == 0,
                                      ri == len(table_rows) - 1)
                source = enc.source(ts_ms=self._clock_ms, commit_lsn=commit_lsn, change_lsn=None,
                                    event_serial_no=None, snapshot=marker)
                after = enc.row(canonical)
                out.append(self._data(enc, "r", None, after, source, None, (),
                                      enc.key_of(canonical), ()))
        return out

    def _close_tx(self) -> None:
        tx, self._open_tx = self._open_tx, None
        if tx is None or self.tx_encoder is None:
            return
        key, value = self.tx_encoder.end(tx.id, tx.ts_ms, tx.total, list(tx.per_table.items()))
        self._produce(self.tx_encoder.topic, key, value, (), self._next_emit_ms(0),
                      "transaction", partition=0, commit_lsn=tx.id, op="END")

    def _tx_block(self, table: TableSpec) -> TransactionBlock | None:
        tx = self._open_tx
        if tx is None:
            return None
        tx.total += 1
        tx.per_table[table.table_id] = tx.per_table.get(table.table_id, 0) + 1
        return TransactionBlock(tx.id, tx.total, tx.per_table[table.table_id])

    def commit(self, operations: Sequence[Operation], *, clock_step_ms: int = 25) -> list[Produced]:
        """One committed transaction: a ``change_lsn`` per operation, then one ``commit_lsn``."""
        change_lsns = [format_lsn(self.lsn.next()) for _ in operations]
        commit_lsn = format_lsn(self.lsn.next(3))
        self._clock_ms += clock_step_ms
        ts_ms = self._clock_ms
        if self.tx_encoder is not None:
            self._close_tx()
            self._open_tx = _OpenTx(commit_lsn, ts_ms)
            key, value = self.tx_encoder.begin(commit_lsn, ts_ms)
            self._produce(self.tx_encoder.topic, key, value, (),
                          self._next_emit_ms(ts_ms + self._lag_ms), "transaction",
                          partition=0, commit_lsn=commit_lsn, op="BEGIN")
        out: list[Produced] = []
        for op, change_lsn in zip(operations, change_lsns, strict=True):
            out += self._apply(op, commit_lsn, change_lsn, ts_ms)
        return out

    def _apply(self, op: Operation, commit_lsn: str, change_lsn: str,
               ts_ms: int) -> list[Produced]:
        enc = self.encoders[op.table]
        table = enc.table

        def source(serial: int) -> dict[str, Any]:
            return enc.source(ts_ms=ts_ms, commit_lsn=commit_lsn, change_lsn=change_lsn,
                              event_serial_no=serial)

        if isinstance(op, Insert):
            serial = self._serial.next(commit_lsn, change_lsn, 1)
            return [self._data(enc, "c", None, enc.row(op.row), source(serial),
                               self._tx_block(table), (), enc.key_of(op.row), ())]
        if isinstance(op, Update):
            serial = self._serial.next(commit_lsn, change_lsn, 2)
            unavailable = tuple(k for k, v in op.after.items() if v == UNAVAILABLE_VALUE)
            return [self._data(enc, "u", enc.row(op.before), enc.row(op.after), source(serial),
                               self._tx_block(table), (), enc.key_of(op.after), unavailable)]
        if isinstance(op, Delete):
            serial = self._serial.next(commit_lsn, change_lsn, 1)
            data = self._data(enc, "d", enc.row(op.row), None, source(serial),
                              self._tx_block(table), (), enc.key_of(op.row), ())
            return [data, self._tombstone(data)]
        before, after = enc.row(op.before), enc.row(op.after)
        old_key, new_key = enc.key_of(before), enc.key_of(after)
        if op.via_update:
            serial = self._serial.next(commit_lsn, change_lsn, 2)
            d_headers: tuple[Header, ...] = (("__debezium.newkey", enc.key_header(new_key)),)
            c_headers: tuple[Header, ...] = (("__debezium.oldkey", enc.key_header(old_key)),)
            d_source = c_source = source(serial)
        else:
            d_headers = c_headers = ()
            d_source = source(self._serial.next(commit_lsn, change_lsn, 1))
            c_source = source(self._serial.next(commit_lsn, change_lsn, 1))
        d = self._data(enc, "d", before, None, d_source, self._tx_block(table), d_headers,
                       enc.key_of(op.before), ())
        tombstone = self._tombstone(d)
        c = self._data(enc, "c", None, after, c_source, self._tx_block(table), c_headers,
                       enc.key_of(op.after), ())
        return [d, tombstone, c]

    def finish(self) -> None:
        """Close the open transaction (emit its END record)."""
        self._close_tx()

    def inject_corrupt(self, table: str, key: Mapping[str, Any], value: bytes) -> Produced:
        """A record the translator cannot decode, keyed like a real one of ``table``."""
        enc = self.encoders[table]
        key_bytes = enc.encode_key(enc.key_of(enc.row(key)))
        return self._produce(enc.topic, key_bytes, value, (), self._next_emit_ms(0), "corrupt",
                             table=table, key=dict(key))

    def replay(self, partition: int, count: int, *, delay_ms: int = 60_000) -> list[Produced]:
        """A connector restart: re-send the last ``count`` data/tombstone records of
        ``partition`` with new offsets and envelope times, identical ``source`` blocks.

        A tombstone is never re-sent without its delete (both carry the delete's offset).
        """
        candidates = [i for i, p in enumerate(self.produced)
                      if p.kind in ("data", "tombstone") and not p.replayed
                      and p.record.partition == partition]
        start = max(len(candidates) - count, 0)
        while start > 0 and self.produced[candidates[start]].kind == "tombstone":
            start -= 1
        picks = candidates[start:]
        out = []
        for i in picks:
            p = self.produced[i]
            rec = p.record
            ts_ms = self._next_emit_ms((rec.timestamp or 0) + delay_ms)
            value = self._reencoders[i](ts_ms) if p.kind == "data" else None
            out.append(self._produce(
                rec.topic, rec.key, value, rec.headers, ts_ms, p.kind, partition=rec.partition,
                table=p.table, op=p.op, key=p.key, commit_lsn=p.commit_lsn,
                change_lsn=p.change_lsn, event_serial_no=p.event_serial_no,
                unavailable=p.unavailable, replayed=True))
        return out


# --------------------------------------------------------------------------- README demo

CUSTOMERS = TableSpec(
    db="testDB", schema="dbo", table="customers", key_columns=("id",),
    columns=(
        SqlColumn("id", "int", nullable=False),
        SqlColumn("name", "nvarchar(255)"),
        SqlColumn("email", "nvarchar(255)"),
        SqlColumn("balance", "decimal(10,2)"),
        SqlColumn("created", "datetime2(7)"),
        SqlColumn("notes", "nvarchar(max)"),
    ),
)
"""The demo table."""

_DEMO_ROWS = [
    {"id": 1, "name": "Ada Lovelace", "email": "ada@example.com", "balance": "100.00",
     "created": "2023-01-02T03:04:05.1234567", "notes": "first customer"},
    {"id": 2, "name": "Alan Turing", "email": "alan@example.com", "balance": "250.50",
     "created": "2023-02-03T04:05:06.0000000", "notes": None},
    {"id": 3, "name": "Grace Hopper", "email": "grace@example.com", "balance": "-12.34",
     "created": "1969-07-20T20:17:40.5000000", "notes": "likes COBOL"},
    {"id": 4, "name": "Edsger Dijkstra", "email": "ewd@example.com", "balance": "0.00",
     "created": "2024-05-06T07:08:09.0000001", "notes": "goto considered harmful"},
    {"id": 5, "name": "Barbara Liskov", "email": "liskov@example.com", "balance": "9999.99",
     "created": "2024-06-07T08:09:10.9999999", "notes": None},
]


class ExpectedChange(msgspec.Struct, frozen=True):
    """One canonical change the translator must produce (canonical op names, canonical keys).

    A merged primary-key change lists the serials of both halves in ``event_serial_nos``.
    """

    op: str
    table: str
    key: Mapping[str, Any]
    old_key: Mapping[str, Any] | None
    commit_lsn: str | None
    change_lsn: str | None
    event_serial_nos: tuple[int | None, ...]
    unavailable_columns: tuple[str, ...] = ()


class DemoExpectation(msgspec.Struct, frozen=True):
    """What the demo traffic contains, derived from the simulation inputs."""

    changes: tuple[ExpectedChange, ...]
    """Logical changes in position order (PK change merged into one ``update``)."""
    records: int
    data_records: int
    duplicates: int
    tombstones: int
    corrupt: int
    side_records: int
    pk_change_partitions: tuple[int, int]
    """Partitions of the PK change's ``d`` and ``c`` halves (always different)."""
    replay_partition: int


_CANONICAL_OPS = {"c": "insert", "u": "update", "d": "delete", "r": "read"}


def _lsn_key(text: str | None) -> bytes:
    return bytes.fromhex(text.replace(":", "")) if text else b""


def _expected_changes(produced: Sequence[Produced],
                      key_change: tuple[Produced, Produced]) -> tuple[ExpectedChange, ...]:
    d_half, c_half = key_change
    changes = []
    for p in produced:
        if p.kind != "data" or p.replayed or p is c_half:
            continue
        assert p.table is not None and p.op is not None and p.key is not None
        table_id = f"{CUSTOMERS.db}.{CUSTOMERS.schema}.{p.table}"
        if p is d_half:
            assert c_half.key is not None
            changes.append(ExpectedChange(
                "update", table_id, c_half.key, p.key, p.commit_lsn, p.change_lsn,
                (p.event_serial_no, c_half.event_serial_no)))
            continue
        changes.append(ExpectedChange(_CANONICAL_OPS[p.op], table_id, p.key, None, p.commit_lsn,
                                      p.change_lsn, (p.event_serial_no,), p.unavailable))
    changes.sort(key=lambda c: (_lsn_key(c.commit_lsn), _lsn_key(c.change_lsn),
                                c.event_serial_nos[0] or 0))
    return tuple(changes)


def demo(encoding: Encoding = "json-schema", partitions: int = 3,
         registrar: SchemaRegistrar | None = None, *, version: str = DEFAULT_VERSION,
         transaction_metadata: bool = False) -> tuple[list[RawRecord], DemoExpectation]:
    """The README demo traffic and its expected outcome.

    Snapshot of three customers, two inserts, an update, a delete (+ tombstone), a PK change
    (Case A) whose halves land in different partitions with the ``c`` record listed before the
    ``d`` record, an update whose ``nvarchar(max)`` column is the unavailable placeholder, one
    corrupt (truncated) record and a connector restart re-sending the tail of one partition.
    """
    sim = CdcSimulator([CUSTOMERS], encoding=encoding, partitions=partitions,
                       registrar=registrar, version=version,
                       transaction_metadata=transaction_metadata)
    rows = {r["id"]: r for r in _DEMO_ROWS}
    sim.snapshot({"customers": [rows[1], rows[2], rows[3]]})
    sim.commit([Insert("customers", rows[4]), Insert("customers", rows[5])])
    updated = rows[2] | {"balance": "300.00"}
    sim.commit([Update("customers", rows[2], updated)])
    enc = sim.encoders["customers"]
    whole = enc.encode_envelope("u", enc.row(updated), enc.row(updated | {"balance": "1.00"}),
                                enc.source(ts_ms=0, commit_lsn=None, change_lsn=None,
                                           event_serial_no=None), None, 0)
    sim.inject_corrupt("customers", {"id": 2}, whole[: len(whole) // 2])
    sim.commit([Delete("customers", rows[3])])
    old_partition = sim.partition_of("customers", {"id": 4})
    new_id = next(i for i in range(40, 10_000)
                  if sim.partition_of("customers", {"id": i}) != old_partition)
    d_half, _, c_half = sim.commit([KeyChange("customers", rows[4], rows[4] | {"id": new_id})])
    lob = rows[1] | {"notes": UNAVAILABLE_VALUE}
    sim.commit([Update("customers", lob, lob | {"name": "Ada King"})])
    sim.finish()
    replay_partition = next(p.record.partition for p in reversed(sim.produced)
                            if p.kind == "data")
    sim.replay(replay_partition, 3)

    records = sim.records
    records.remove(c_half.record)
    records.insert(records.index(d_half.record), c_half.record)
    produced = sim.produced
    expectation = DemoExpectation(
        changes=_expected_changes(produced, (d_half, c_half)),
        records=len(records),
        data_records=sum(p.kind == "data" for p in produced),
        duplicates=sum(p.kind == "data" and p.replayed for p in produced),
        tombstones=sum(p.kind == "tombstone" for p in produced),
        corrupt=sum(p.kind == "corrupt" for p in produced),
        side_records=sum(p.kind == "transaction" for p in produced),
        pk_change_partitions=(d_half.record.partition, c_half.record.partition),
        replay_partition=replay_partition,
    )
    return records, expectation


def demo_traffic(encoding: Encoding = "json-schema", partitions: int = 3,
                 registrar: SchemaRegistrar | None = None) -> list[RawRecord]:
    """The README demo records (see :func:`demo`)."""
    return demo(encoding, partitions, registrar)[0]


def demo_expectation(encoding: Encoding = "json-schema", partitions: int = 3) -> DemoExpectation:
    """The expected outcome of :func:`demo_traffic` with the same arguments (a fresh registry for
    avro)."""
    return demo(encoding, partitions)[1]




