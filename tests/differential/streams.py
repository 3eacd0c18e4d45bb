"""Generated Debezium streams for the differential tests of the two translation cores.

A stream is a table (random SQL Server columns), connector modes (time precision, decimal and
binary handling, propagated source types), an encoding (JsonConverter with or without schema,
Confluent Avro) and a history written as Debezium writes it: snapshot rows, inserts, updates,
deletes with tombstones, primary-key changes in each serial form (1/2 at one seqval, 2/2 from a
3/4 pair with ``__debezium.newkey``/``oldkey`` headers, 1/1 in bulk updates), unchanged LOBs sent
as the placeholder, transaction blocks and END records, replays after a restart (identical, or
with differing images), and bad records. Partitions are interleaved in any order that keeps each
partition's own order.
"""

from __future__ import annotations

import base64
import json
import random
from dataclasses import dataclass, field
from typing import Any

from debezium_bridge.formats.debezium.encode import (
    DebeziumEncoder,
    TableSpec,
    TransactionBlock,
    TransactionTopicEncoder,
)
from debezium_bridge.formats.debezium.registry import InMemoryRegistry
from debezium_bridge.formats.debezium.sqltypes import ConnectorModes, SqlColumn
from debezium_bridge.model.records import RawRecord
from debezium_bridge.partitioner import partition_for
from debezium_bridge.testing.corpus import _value_maker
from debezium_bridge.testing.simulator import LsnClock, SerialCounter, format_lsn

SQL_TYPES = (
    "int", "bigint", "smallint", "tinyint", "bit", "decimal(12,2)", "decimal(38,10)",
    "numeric(10,0)", "money", "smallmoney", "real", "float", "varchar(50)", "nvarchar(100)",
    "nvarchar(max)", "date", "time(7)", "time(3)", "time(0)", "datetime", "datetime2(7)",
    "datetime2(3)", "datetime2(0)", "uniqueidentifier", "varbinary(64)", "varbinary(max)",
)
# the types of a second key column: besides text and numbers, the logical types a key can
# hold (a key is converted as the row's columns are)
KEY_TYPES = ("nvarchar(20)", "bigint", "decimal(12,2)", "datetime2(7)", "date", "time(3)",
             "uniqueidentifier", "varbinary(64)")
PLACEHOLDER = "__debezium_unavailable_value"


@dataclass
class Stream:
    records: list[RawRecord]
    partitions: list[tuple[str, int]]
    schemas: dict[int, Any]
    binary_mode: str
    notes: list[str] = field(default_factory=list)


_ODD_TEXT = ('quote " here', "back\\slash", "line\nbreak\r\n", "tab\tand\u0001ctl",
             "slash / é 😀 日本", "\u2028sep", "")


def _maker(column: SqlColumn, rng: random.Random) -> Any:
    if "varchar" in column.sql_type and not column.sql_type.endswith("(max)"):
        plain = _value_maker(column, rng)
        return lambda: rng.choice(_ODD_TEXT) if rng.random() < 0.3 else plain()
    if column.sql_type.endswith("(max)"):
        base = SqlColumn(column.name, column.sql_type.replace("(max)", "(100)"))
        make = _value_maker(base, rng)
        return lambda: None if rng.random() < 0.1 else make()
    if column.sql_type.startswith("time("):
        digits = int(column.sql_type[5:-1])
        make = _value_maker(SqlColumn(column.name, "time(7)"), rng)

        def timed() -> Any:
            text = make()
            if text is None:
                return None
            return text[:8] + (("." + text[9:9 + digits]) if digits else "")
        return timed
    if column.sql_type == "datetime2(0)":
        make = _value_maker(SqlColumn(column.name, "datetime"), rng)
        return lambda: None if (v := make()) is None else v[:19]
    return _value_maker(column, rng)


def generate(seed: int, *, encoding: str, n_changes: int, partitions: int = 3) -> Stream:
    rng = random.Random(seed)
    n_columns = rng.randint(1, 6)
    columns = [SqlColumn("id", "int", nullable=False)]
    if rng.random() < 0.3:
        columns.append(SqlColumn("k2", rng.choice(KEY_TYPES), nullable=False))
    for i in range(n_columns):
        columns.append(SqlColumn(f"c{i}", rng.choice(SQL_TYPES)))
    keyless = rng.random() < 0.15
    key_columns = () if keyless else tuple(c.name for c in columns if c.name in ("id", "k2"))
    spec = TableSpec(db="testDB", schema="dbo", table=f"t{seed % 7}", key_columns=key_columns,
                     columns=tuple(columns))
    binary_mode = rng.choice(("bytes", "base64", "base64-url-safe", "hex"))
    modes = ConnectorModes(
        time_precision_mode=rng.choice(("adaptive", "connect")),
        decimal_handling_mode=rng.choice(("precise", "precise", "string", "double")),
        binary_handling_mode=binary_mode,  # type: ignore[arg-type]
        propagate_source_types=rng.random() < 0.5,
    )
    registry = InMemoryRegistry() if encoding == "avro" else None
    version = rng.choice(("3.6.3.Final", "2.7.3.Final", "1.9.7.Final"))
    enc = DebeziumEncoder(spec, "server1", modes=modes, encoding=encoding,  # type: ignore[arg-type]
                          version=version, registrar=registry)
    # keys as the value is written, or (a key converter of its own) as schema-less JSON
    key_enc = enc if encoding == "json" or rng.random() < 0.75 else DebeziumEncoder(
        spec, "server1", modes=modes, encoding="json", version=version)
    tx_enc = TransactionTopicEncoder("server1", encoding="json")
    encoders = enc.encoders
    makers = {c.name: _maker(c, rng) for c in columns if c.name not in ("id", "k2")}
    key_maker = _value_maker(columns[1], rng) if len(columns) > 1 else None

    def key_value() -> Any:
        value = None
        while value is None and key_maker is not None:
            value = key_maker()
        return value

    lob = [c.name for c in columns if c.sql_type.endswith("(max)")]
    binary = {c.name: c.connect_type == "bytes" for c in enc.columns}
    lsn = LsnClock()
    serials = SerialCounter()
    clock = 1_700_000_000_000
    rows: dict[int, dict[str, Any]] = {}
    next_id = 1
    per_partition: list[list[tuple[bytes | None, bytes | None, tuple[Any, ...]]]] = [
        [] for _ in range(partitions)]
    round_robin = 0
    metadata = rng.random() < 0.3
    tx_records: list[tuple[bytes, bytes]] = []
    notes: list[str] = []

    def canonical_row(row_id: int) -> dict[str, Any]:
        row: dict[str, Any] = {"id": row_id}
        if "k2" in {c.name for c in columns}:
            sql_type = columns[1].sql_type
            row["k2"] = (str(row_id) if sql_type.startswith("nvarchar") else
                         row_id * 7 if sql_type == "bigint" else encoders["k2"](key_value()))
        for name, make in makers.items():
            row[name] = encoders[name](make())
        return row

    def put(key_row: dict[str, Any] | None, value: bytes | None,
            headers: tuple[Any, ...] = ()) -> None:
        nonlocal round_robin
        key = key_enc.encode_key(enc.key_of(key_row)) if key_row is not None else None
        if key is None:
            p = round_robin % partitions
            round_robin += 1
        else:
            p = partition_for(key, partitions)
        per_partition[p].append((key, value, headers))

    def source(commit: str | None, change: str | None, serial: int | None,
               snapshot: str = "false") -> dict[str, Any]:
        return enc.source(ts_ms=clock, commit_lsn=commit, change_lsn=change,
                          event_serial_no=serial, snapshot=snapshot)

    # snapshot rows
    snap_commit = format_lsn(lsn.next(5))
    for _ in range(rng.randint(0, 3)):
        row = canonical_row(next_id)
        rows[next_id] = row
        next_id += 1
        marker = rng.choice(("true", "first", "last", "true"))
        put(row, enc.encode_envelope("r", None, row, source(snap_commit, None, None, marker),
                                     None, clock))
    done = 0
    while done < n_changes:
        commit = format_lsn(lsn.next(3))
        clock += rng.randint(1, 50)
        size = rng.randint(1, 3)
        tx_id = commit
        order = 0
        for _ in range(size):
            change = format_lsn(lsn.next(1) - 2**40)
            order += 1
            block = TransactionBlock(tx_id, order, order) if metadata else None
            kinds = ["insert"] + (["update", "update", "delete", "pk", "incremental"]
                                  if rows else [])
            kind = rng.choice(kinds)
            if kind == "insert":
                row = canonical_row(next_id)
                rows[next_id] = row
                next_id += 1
                put(row, enc.encode_envelope("c", None, row,
                                             source(commit, change,
                                                    serials.next(commit, change, 1)),
                                             block, clock))
            elif kind == "incremental":
                row_id = rng.choice(sorted(rows))
                put(rows[row_id], enc.encode_envelope(
                    "r", None, rows[row_id], source(commit, change, 1, "incremental"), block,
                    clock))
            elif kind == "update":
                row_id = rng.choice(sorted(rows))
                before = rows[row_id]
                after = dict(before)
                for name in rng.sample(sorted(makers), min(2, len(makers))):
                    after[name] = encoders[name](makers[name]())
                for name in lob:  # an unchanged LOB: the placeholder in both images (3.6+)
                    if rng.random() < 0.5 and after[name] == before[name]:
                        placeholder = (PLACEHOLDER.encode() if binary[name] else PLACEHOLDER)
                        after[name] = placeholder
                rows[row_id] = {**after, **{n: before[n] for n in lob
                                            if after[n] in (PLACEHOLDER, PLACEHOLDER.encode())}}
                put(before, enc.encode_envelope("u", before, after,
                                                source(commit, change,
                                                       serials.next(commit, change, 2)),
                                                block, clock))
            elif kind == "delete":
                row_id = rng.choice(sorted(rows))
                before = rows.pop(row_id)
                put(before, enc.encode_envelope("d", before, None,
                                                source(commit, change,
                                                       serials.next(commit, change, 1)),
                                                block, clock))
                put(before, None)
            else:  # a primary-key change, in one of its serial forms
                row_id = rng.choice(sorted(rows))
                before = rows.pop(row_id)
                after = dict(before, id=next_id)
                rows[next_id] = after
                next_id += 1
                form = rng.choice(("1/2", "2/2", "1/1"))
                if form == "1/2":
                    s_d = serials.next(commit, change, 1)
                    s_c = serials.next(commit, change, 1)
                    h_d: tuple[Any, ...] = ()
                    h_c: tuple[Any, ...] = ()
                elif form == "2/2":
                    s_d = s_c = serials.next(commit, change, 2)
                    h_d = (("__debezium.newkey", key_enc.key_header(enc.key_of(after))),)
                    h_c = (("__debezium.oldkey", key_enc.key_header(enc.key_of(before))),)
                else:
                    s_d = s_c = 1
                    h_d = h_c = ()
                d = enc.encode_envelope("d", before, None, source(commit, change, s_d), block,
                                        clock)
                c = enc.encode_envelope("c", None, after, source(commit, change, s_c), block,
                                        clock)
                if rng.random() < 0.5:
                    put(before, d, h_d)
                    put(before, None, h_d)
                    put(after, c, h_c)
                else:
                    put(after, c, h_c)
                    put(before, d, h_d)
                    put(before, None, h_d)
            done += 1
        if metadata:
            tx_records.append(tx_enc.end(tx_id, clock, order, [(spec.table_id, order)]))
    # replays: a partition re-sends a suffix after a "restart" (sometimes with a changed image)
    for p in range(partitions):
        if per_partition[p] and rng.random() < 0.4:
            start = rng.randrange(len(per_partition[p]))
            suffix = list(per_partition[p][start:])
            if rng.random() < 0.3:
                for i, (k, v, h) in enumerate(suffix):
                    if v is not None and b'"op":"u"' in v and encoding != "avro":
                        suffix[i] = (k, v.replace(b'"after":{', b'"after":{"zz":1,', 1), h)
                        notes.append("changed replay")
                        break
            per_partition[p].extend(suffix)
    # bad records
    for p in range(partitions):
        for _ in range(rng.randint(0, 2)):
            bad = rng.choice((b"{not json", b"\x00\x00\x00\x00\x63", b"[]", b'{"op":"c"}',
                              b'{"before":null,"after":{"id":1},"source":{"schema":"dbo",'
                              b'"table":"t","commit_lsn":"zz"},"op":"c"}',
                              json.dumps({"payload": {"op": "c"}, "schema": None}).encode(),
                              base64.b64encode(rng.randbytes(12)), rng.randbytes(20)))
            at = rng.randint(0, len(per_partition[p]))
            per_partition[p].insert(at, (b'{"id":1}', bad, ()))
    # interleave the partitions
    topic = enc.topic
    offsets = [0] * partitions
    cursors = [0] * partitions
    records: list[RawRecord] = []
    while any(cursors[p] < len(per_partition[p]) for p in range(partitions)):
        p = rng.choice([q for q in range(partitions) if cursors[q] < len(per_partition[q])])
        key, value, headers = per_partition[p][cursors[p]]
        cursors[p] += 1
        records.append(RawRecord(topic, p, offsets[p], clock, key, value, headers))
        offsets[p] += 1
        if tx_records and rng.random() < 0.2:
            k, v = tx_records.pop(0)
            records.append(RawRecord("server1.transaction", 0, len(records), clock, k, v))
    for k, v in tx_records:
        records.append(RawRecord("server1.transaction", 0, len(records), clock, k, v))
    return Stream(records, [(topic, p) for p in range(partitions)],
                  dict(registry.schemas) if registry is not None else {}, binary_mode, notes)
