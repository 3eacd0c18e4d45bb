"""Sample Debezium SQL Server traffic for the demo, the tests and the benchmarks.

:class:`CdcSimulator` plays a tiny SQL Server with CDC and a Debezium connector in front of Kafka:
monotonically increasing LSNs, transactions whose changes share ``commit_lsn``, one ``change_lsn``
per change, ``event_serial_no`` computed as ``SqlServerOffsetContext#setChangePosition`` does,
snapshot rows, tombstones after deletes, both kinds of primary-key change, optional transaction
metadata, and Kafka's default partitioner (murmur2 of the key bytes).

:func:`demo_traffic` is the README demo; :func:`bulk_corpus` streams large deterministic corpora.
"""

from __future__ import annotations

import base64
import datetime as dt
import random
import re
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    format_decimal,
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


# --------------------------------------------------------------------------- benchmark corpora

NARROW = TableSpec(
    db="benchdb", schema="dbo", table="narrow", key_columns=("id",),
    columns=(
        SqlColumn("id", "int", nullable=False),
        SqlColumn("name", "nvarchar(100)"),
        SqlColumn("amount", "decimal(12,2)"),
        SqlColumn("updated", "datetime2(7)"),
    ),
)
WIDE = TableSpec(
    db="benchdb", schema="dbo", table="wide", key_columns=("id",),
    columns=(
        SqlColumn("id", "int", nullable=False),
        SqlColumn("c_bigint", "bigint"),
        SqlColumn("c_smallint", "smallint"),
        SqlColumn("c_tinyint", "tinyint"),
        SqlColumn("c_decimal", "decimal(18,4)"),
        SqlColumn("c_numeric", "numeric(10,2)"),
        SqlColumn("c_money", "money"),
        SqlColumn("c_smallmoney", "smallmoney"),
        SqlColumn("c_varchar", "varchar(100)"),
        SqlColumn("c_nvarchar", "nvarchar(200)"),
        SqlColumn("c_datetime", "datetime"),
        SqlColumn("c_datetime2", "datetime2(7)"),
        SqlColumn("c_datetime2_3", "datetime2(3)"),
        SqlColumn("c_date", "date"),
        SqlColumn("c_time", "time(7)"),
        SqlColumn("c_bit", "bit"),
        SqlColumn("c_uuid", "uniqueidentifier"),
        SqlColumn("c_varbinary", "varbinary(64)"),
        SqlColumn("c_float", "float"),
        SqlColumn("c_real", "real"),
    ),
)

_BASE_TIME = dt.datetime(2020, 1, 1, tzinfo=dt.UTC)
_WORDS = ("alpha", "beta", "gamma", "delta", "zürich", "日本", "ölçü", "naïve")


def _timestamp_text(rng: random.Random, digits: int) -> str:
    moment = _BASE_TIME + dt.timedelta(seconds=rng.getrandbits(31) - 16 * 10**8)
    text = moment.isoformat()[:19]
    if digits == 0:
        return text
    if digits == 3:  # datetime ticks end in 0, 3 or 7 ms
        return f"{text}.{rng.getrandbits(6) * 10 + (0, 3, 7, 0)[rng.getrandbits(2)]:03d}"
    return f"{text}.{rng.getrandbits(23):07d}"


def _value_maker(column: SqlColumn, rng: random.Random) -> Callable[[], Any]:
    t = column.sql_type.split("(")[0]
    sizes = [int(n) for n in re.findall(r"\d+", column.sql_type)]
    precision, scale = [*sizes, 18, 0][:2]
    bits = (10**precision - 1).bit_length()
    bounded = 10**precision - 1
    bits_of = rng.getrandbits

    def decimal_text() -> str:
        return format_decimal((bits_of(bits) % bounded) * (1 - 2 * bits_of(1)), scale)

    makers: dict[str, Callable[[], Any]] = {
        "int": lambda: bits_of(32) - 2**31,
        "bigint": lambda: bits_of(64) - 2**63,
        "smallint": lambda: bits_of(16) - 2**15,
        "tinyint": lambda: bits_of(8),
        "decimal": decimal_text,
        "numeric": decimal_text,
        "money": lambda: format_decimal(bits_of(50) - 2**49, 4),
        "smallmoney": lambda: format_decimal(bits_of(32) - 2**31, 4),
        "varchar": lambda: "-".join(_WORDS[bits_of(2)] for _ in range(1 + bits_of(2))),
        "nvarchar": lambda: " ".join(_WORDS[bits_of(3)] for _ in range(1 + bits_of(3))),
        "datetime": lambda: _timestamp_text(rng, 3),
        "datetime2": lambda: _timestamp_text(rng, 3 if "(3)" in column.sql_type else 7),
        "date": lambda: _timestamp_text(rng, 0)[:10],
        "time": lambda: _timestamp_text(rng, 7)[11:],
        "bit": lambda: bool(bits_of(1)),
        "uniqueidentifier": lambda: str(uuid.UUID(int=bits_of(128))).upper(),
        "varbinary": lambda: base64.b64encode(rng.randbytes(bits_of(6))).decode(),
        "float": lambda: (bits_of(53) - 2**52) / 1024,
        "real": lambda: (bits_of(20) - 2**19) / 8,
    }
    make = makers[t]
    if not column.nullable:
        return make
    return lambda: None if bits_of(5) == 0 else make()


def bulk_corpus(
    n_events: int,
    table: Literal["narrow", "wide"] = "narrow",
    encoding: Encoding = "json-schema",
    seed: int = 0,
    partitions: int = 3,
    registrar: SchemaRegistrar | None = None,
) -> Iterator[RawRecord]:
    """A deterministic benchmark stream of ``n_events`` operations on one table.

    Operations: 20 % inserts, 60 % updates, 15 % deletes (each followed by its tombstone) and 5 %
    primary-key changes (Case A: ``d`` serial 1, tombstone, ``c`` serial 2 at one position), in
    transactions of 1 to 4 operations. An update or delete on an empty table becomes an insert.
    Records come in production order with per-partition offsets.
    """
    spec = NARROW if table == "narrow" else WIDE
    if encoding == "avro" and registrar is None:
        registrar = InMemoryRegistry()
    enc = DebeziumEncoder(spec, "bench", encoding=encoding, registrar=registrar,
                          avro_row_cache=4096)
    rng = random.Random(seed)
    encoders = enc.encoders
    makers = {c.name: _value_maker(c, rng) for c in spec.columns if c.name != "id"}
    names = list(makers)
    topic = enc.topic
    lsn = LsnClock()
    serials = SerialCounter()
    rows: dict[int, dict[str, Any]] = {}
    live: list[int] = []
    slot: dict[int, int] = {}
    keys: dict[int, tuple[bytes, int]] = {}
    offsets = [0] * partitions
    next_id = 1
    clock = 1_700_000_000_000
    emitted = clock

    def new_row(row_id: int) -> dict[str, Any]:
        row = {"id": row_id}
        for name in names:
            row[name] = encoders[name](makers[name]())
        return row

    def key_of(row_id: int) -> tuple[bytes, int]:
        found = keys.get(row_id)
        if found is None:
            key_bytes = enc.encode_key({"id": row_id})
            assert key_bytes is not None
            found = keys[row_id] = (key_bytes, partition_for(key_bytes, partitions))
        return found

    def add(row_id: int, row: dict[str, Any]) -> None:
        rows[row_id] = row
        slot[row_id] = len(live)
        live.append(row_id)

    def remove(row_id: int) -> dict[str, Any]:
        i = slot.pop(row_id)
        last = live.pop()
        if last != row_id:
            live[i] = last
            slot[last] = i
        keys.pop(row_id, None)
        return rows.pop(row_id)

    def record(key: tuple[bytes, int], value: bytes | None, ts: int) -> RawRecord:
        key_bytes, partition = key
        offset = offsets[partition]
        offsets[partition] = offset + 1
        return RawRecord(topic, partition, offset, ts, key_bytes, value)

    done = 0
    while done < n_events:
        size = min(rng.randint(1, 4), n_events - done)
        change_lsns = [format_lsn(lsn.next(rng.randint(1, 3))) for _ in range(size)]
        commit_lsn = format_lsn(lsn.next(2))
        clock += rng.randint(1, 40)
        for change_lsn in change_lsns:
            roll = rng.random()
            if roll < 0.20 or not live:
                kind = "insert"
            elif roll < 0.80:
                kind = "update"
            elif roll < 0.95:
                kind = "delete"
            else:
                kind = "key"
            emitted = max(emitted + 1, clock + 200)
            if kind == "insert":
                row_id, next_id = next_id, next_id + 1
                after = new_row(row_id)
                add(row_id, after)
                src = enc.source(ts_ms=clock, commit_lsn=commit_lsn, change_lsn=change_lsn,
                                 event_serial_no=serials.next(commit_lsn, change_lsn, 1))
                yield record(key_of(row_id),
                             enc.encode_envelope("c", None, after, src, None, emitted), emitted)
            elif kind == "update":
                row_id = live[rng.randrange(len(live))]
                before = rows[row_id]
                after = dict(before)
                for name in rng.sample(names, min(3, len(names))):
                    after[name] = encoders[name](makers[name]())
                rows[row_id] = after
                src = enc.source(ts_ms=clock, commit_lsn=commit_lsn, change_lsn=change_lsn,
                                 event_serial_no=serials.next(commit_lsn, change_lsn, 2))
                yield record(key_of(row_id),
                             enc.encode_envelope("u", before, after, src, None, emitted), emitted)
            else:
                row_id = live[rng.randrange(len(live))]
                old_key = key_of(row_id)
                before = remove(row_id)
                src = enc.source(ts_ms=clock, commit_lsn=commit_lsn, change_lsn=change_lsn,
                                 event_serial_no=serials.next(commit_lsn, change_lsn, 1))
                yield record(old_key, enc.encode_envelope("d", before, None, src, None, emitted),
                             emitted)
                emitted += 1
                yield record(old_key, None, emitted)
                if kind == "key":
                    new_id, next_id = next_id, next_id + 1
                    after = dict(before, id=new_id)
                    add(new_id, after)
                    emitted += 1
                    src = enc.source(ts_ms=clock, commit_lsn=commit_lsn, change_lsn=change_lsn,
                                     event_serial_no=serials.next(commit_lsn, change_lsn, 1))
                    yield record(key_of(new_id),
                                 enc.encode_envelope("c", None, after, src, None, emitted), emitted)
            done += 1
