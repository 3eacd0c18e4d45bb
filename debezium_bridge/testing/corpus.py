"""Deterministic corpora for the benchmarks: large streams of Debezium records for a narrow
(4-column) and a wide (20-column) table, generated lazily."""

from __future__ import annotations

import base64
import datetime as dt
import random
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Literal

from debezium_bridge.formats.debezium.encode import DebeziumEncoder, Encoding, TableSpec
from debezium_bridge.formats.debezium.registry import InMemoryRegistry, SchemaRegistrar
from debezium_bridge.formats.debezium.sqltypes import SqlColumn, format_decimal
from debezium_bridge.model.records import RawRecord
from debezium_bridge.partitioner import partition_for
from debezium_bridge.testing.simulator import LsnClock, SerialCounter, format_lsn

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
    if digits != 7:
        return f"{text}.{rng.randrange(10**digits):0{digits}d}"
    return f"{text}.{rng.getrandbits(23):07d}"


def _value_maker(column: SqlColumn, rng: random.Random) -> Callable[[], Any]:
    t = column.sql_type.split("(")[0]
    sizes = [int(n) for n in re.findall(r"\d+", column.sql_type)]
    precision, scale = [*sizes, 18, 0][:2]
    bits = (10**precision - 1).bit_length()
    bounded = 10**precision - 1
    bits_of = rng.getrandbits
    declared = re.search(r"\((\d+)\)", column.sql_type)
    fraction_digits = int(declared.group(1)) if declared else 7

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
        "datetime2": lambda: _timestamp_text(rng, fraction_digits),
        "date": lambda: _timestamp_text(rng, 0)[:10],
        "time": lambda: _timestamp_text(rng, fraction_digits)[11:],
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
