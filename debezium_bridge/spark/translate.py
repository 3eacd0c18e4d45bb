"""``translate(df, config, topology)``: the core's decode → dedupe/pair → encode as Spark
operations.

The input is any DataFrame with the Kafka source schema (``key, value, topic, partition, offset,
timestamp, timestampType, headers``), streaming or batch. Two steps:

1. **Decode** (``mapInArrow``, per Spark partition, no shuffle): every Kafka row becomes a
   decoded event (carried as bytes), a dead letter, or is counted (tombstones, side records).
   Each event is assigned a state bucket by hashing its commit LSN (snapshot rows: table and
   key); each Arrow batch also yields one *clock* row carrying the highest commit time it saw
   (and heartbeat times, with ``heartbeat_watermark``). Streaming only: a transaction END
   becomes a row of its commit LSN's bucket, and each task ends with one *progress* row per
   bucket carrying the :class:`~debezium_bridge.core.windowed.PartitionMark` of every Kafka
   partition it read (highest commit LSN and position, last offset). A schema registry that is
   down (:class:`~debezium_bridge.errors.ServiceError`) fails the task; every other decoding
   failure is a dead letter.
2. **Release** (``applyInPandasWithState`` keyed by bucket, streaming; ``applyInArrow``, batch):
   :class:`~debezium_bridge.core.windowed.WindowState` drops replays (below their partition's
   mark, or seen in their group), pairs key-change halves across partitions and micro-batches,
   and releases what waits as soon as every partition of its topic passed its commit LSN
   (``topology`` names the partitions), its transaction END and all its events were seen, every
   partition reached the run's end (``Trigger.AvailableNow``, ``topology.ends``) or Spark's
   event-time watermark (highest commit time - ``watermark_delay``) passed it. Only clock rows
   carry the watermark column, so Spark never drops a late *event*: the core sees it, emits it
   unpaired and counts it ``late``. Every bucket keeps its partition marks; its size is in the
   query progress (``stateOperators``) and the counters in ``observedMetrics``
   (``debezium_bridge_decode``, ``debezium_bridge_release``). A batch DataFrame is the whole
   input: everything is released.

**Cores.** On a DataFrame (batch or streaming) whose outputs need no SQL column types, both
steps run on the native core (:func:`native_translate`; ``TranslateConfig.native``,
``DEBEZIUM_BRIDGE_NATIVE``): the decode step hands each Arrow batch's Kafka columns to
``SparkDecoder`` in one call (rows it declines go through the Python decoder as above) and
stages events in the native core's own form, packed: one row per bucket and Arrow batch
(:data:`PACKED_ROW`, a new one past 16 MiB), each event leaving out the table, topic, snapshot
marker and source texts it shares with the event before it, so the shuffle moves a few large
values, not a row per event; streaming, it also tracks each partition's progress (merged with
the Python tracker's offsets and declined rows). The release step hands each bucket's events to
``release_batch`` (batch: the rules of :class:`~debezium_bridge.core.windowed.WindowState` for a
whole input) or to ``StreamRelease`` (streaming: all of its rules, its state as bytes in Spark's
state store), which write the output rows as one Arrow batch (``canonical``; other formats
through the output layer from its canonical records). Their change rows leave ``headers`` null
and carry a ``lineage`` column: the last step writes the :data:`NATIVE_HEADERS` in the JVM, so
no nested values cross between Python and the JVM for them. Typed outputs run the Python steps.
A streaming checkpoint written by the Python steps is taken over by the native ones (its waiting
events, marks and transaction records); one written by the native steps stops the Python steps
with an error naming ``translate.native``.

The result has one row per output record, Kafka-ready, for changes and dead letters alike:
``kind`` (``change`` | ``dead_letter``), ``format`` (the output format, or ``dead_letter``),
``event_id``, ``table``, ``op``, ``seq``, ``commit_ts``,
``topic`` (the target topic), ``key``, ``value``, ``headers``, and the source coordinates
``source_topic``, ``source_partition``, ``source_offset``.
"""

from __future__ import annotations

import functools
import gc
import hashlib
import logging
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Self

import msgspec
from pydantic import Field, field_validator, model_validator

from debezium_bridge.clients.registry import RegistrySchemaResolver
from debezium_bridge.core import native
from debezium_bridge.core.settings import NativeMode, TranslatorConfig, native_mode
from debezium_bridge.core.windowed import (
    RELEASE_RULES,
    PartitionMark,
    ProgressTracker,
    Topology,
    WindowState,
    event_bytes,
    event_from_bytes,
    group_key,
    marks_bytes,
    marks_from_bytes,
)
from debezium_bridge.core.windowed_native import (
    adopt_reference_state,
    is_native_state,
    mark_of,
    mark_tuples,
    mismatch_letter,
    topology_args,
)
from debezium_bridge.errors import BridgeError, ConfigError, LsnFormatError, ServiceError
from debezium_bridge.formats.ces.decode import CesDecoder
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.columns import CatalogColumn, ColumnCatalog
from debezium_bridge.formats.debezium.avro import AvroDecoder
from debezium_bridge.formats.debezium.decode import DecodeOptions, Decoder
from debezium_bridge.formats.debezium.registry import FileSchemaResolver
from debezium_bridge.formats.debezium.settings import DecodeSettings
from debezium_bridge.model.change import ChangeEvent, ChangeRecord, SideKind, SideRecord, TableRef
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.lsn import parse_lsn
from debezium_bridge.model.records import RawRecord
from debezium_bridge.output import (
    EVENT_ID_HEADER,
    LINEAGE_HEADER,
    SEQ_HEADER,
    Output,
    OutputRecord,
    OutputSettings,
)
from debezium_bridge.spark.workers import leave_sigint_to_the_driver

KAFKA_HEADERS = "array<struct<key: string, value: binary>>"
"""The type of the Kafka source's ``headers`` column (``spark.source.KAFKA_SCHEMA``)."""
OUTPUT_COLUMNS = (
    ("kind", "string"), ("format", "string"), ("event_id", "string"), ("table", "string"),
    ("op", "string"), ("seq", "string"), ("commit_ts", "string"), ("topic", "string"),
    ("key", "binary"), ("value", "binary"),
    ("headers", KAFKA_HEADERS),
    ("source_topic", "string"), ("source_partition", "int"), ("source_offset", "long"),
)
OUTPUT_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in OUTPUT_COLUMNS)
DECODE_COUNTERS = ("records_in", "tombstones", "side_records", "skipped", "dead_letters")
RELEASED_COUNTERS = tuple(f"released_by_{rule}" for rule in RELEASE_RULES)
RELEASE_COUNTERS = ("changes_out", "merged", "duplicates", "replay_mismatches", "late",
                    "pending", "encode_errors", *RELEASED_COUNTERS)
INFORMATIONAL_COUNTERS = ("late", "encode_errors", *RELEASED_COUNTERS)
"""Not part of the conservation sum: ``late`` events are also in ``changes_out``; an
``encode_errors`` row is a change that one output format could not hold (a dead-letter row for
that format; the change itself is counted in ``changes_out``); ``released_by_<rule>`` counts the
waiting events each release rule let go (:data:`~debezium_bridge.core.windowed.RELEASE_RULES`).
``replay_mismatches`` (events repeating a waiting event's identity with a different image, each
a dead-letter row) is a term of the sum: the decode step's ``dead_letters`` does not hold them."""
_STAGE_SCHEMA = ("bucket int, kind tinyint, commit_ms long, clock timestamp, payload binary, "
                 "columns binary, " + ", ".join(f"n_{name} long" for name in DECODE_COUNTERS))
NATIVE_HEADERS = (EVENT_ID_HEADER, SEQ_HEADER, LINEAGE_HEADER)
"""The headers of a change row the native release writes (canonical format), in order: its
``event_id`` and ``seq`` columns' text and its ``lineage`` column. The native release leaves
``headers`` null and :func:`translate` writes them in the JVM, so no nested values cross
between Python and the JVM for these rows (streaming, PySpark converts them in a Python loop
per row)."""
_RELEASE_SCHEMA = (OUTPUT_SCHEMA + ", lineage binary, "
                   + ", ".join(f"n_{n} long" for n in RELEASE_COUNTERS))
_RELEASE_COLUMNS = ([name for name, _ in OUTPUT_COLUMNS] + ["lineage"]
                    + [f"n_{n}" for n in RELEASE_COUNTERS])
DEAD_BUCKET, CLOCK_BUCKET = -1, -2
EVENT_ROW, PROGRESS_ROW, TX_END_ROW, PACKED_ROW = 0, 1, 2, 3
"""``kind`` of a staged row: a decoded event; the progress of the partitions one task read (one
copy per bucket); a transaction END (in the bucket of its commit LSN); the native core's events
of one bucket from one Arrow batch, packed into one value with their commit times (the shuffle
then moves one row per bucket and batch, not one per event)."""
# PySpark's own applyInPandasWithState plumbing concatenates all-NA padding frames; pandas 2.x
# warns about that on every micro-batch. Not ours to fix, and only noise in the job's log.
PANDAS_CONCAT_NOTICE = "The behavior of DataFrame concatenation with empty or all-NA"
warnings.filterwarnings("ignore", category=FutureWarning, message=PANDAS_CONCAT_NOTICE)
METRICS_NAME = "debezium_bridge"
log = logging.getLogger(__name__)


SparkOutput = Literal["canonical", "exploded", "flat", "ces", "ces-avro", "debezium"]
"""The output formats of the job (Debezium envelopes as JsonConverter JSON)."""
_TYPED_OUTPUTS = frozenset(("ces", "ces-avro", "debezium"))


class SparkCesOptions(CesOptions):
    """The CES switches of the Spark job: as :class:`CesOptions`, with snapshot rows skipped."""

    snapshot_rows: Literal["insert", "skip"] = "skip"
    """Debezium snapshot rows (``op r``): dropped (CES never snapshots); the Spark job cannot
    write them as ``INS`` events (see ``translate.ces``)."""


# mypy sees two model_config types; pydantic merges them
class TranslateConfig(DecodeSettings, OutputSettings):  # type: ignore[misc]
    """What :func:`translate` produces and how it decodes (the job file's ``translate:``)."""

    outputs: tuple[SparkOutput, ...] = ("canonical",)
    """Output formats to emit for every change (each row says which in ``format``)."""
    watermark_delay: str = "1 minute"
    """How far (in commit time) halves and replays may trail the newest event (Spark interval)."""
    heartbeat_watermark: bool = False
    """Let Debezium heartbeats (``__debezium-heartbeat.*``, subscribe to them) move the watermark
    while tables are idle. Their ``ts_ms`` is the connector's clock, not a commit time: while a
    connector catches up after downtime it runs ahead of the commit times being read, and
    waiting halves and replays would then come out as ``late``. Enable it for connectors that
    keep up."""
    buckets: int = Field(64, ge=1, le=100_000)
    """State buckets (fixed for the life of a checkpoint)."""
    pair_key_changes: bool = True
    """Merge the delete + create halves of a primary-key change into one update."""
    native: NativeMode = "auto"
    """The translation core of ``translate``: ``auto`` = the native (Rust) core where the
    extension is built and the job is one it covers (a DataFrame, batch or streaming, without
    ``ces``, ``ces-avro`` or ``debezium`` output; ``canonical`` rows are written natively, other
    formats through the output layer), else the Python reference;
    ``on`` = native where it covers the job, an error if the extension is not built; ``off`` =
    the Python reference. ``DEBEZIUM_BRIDGE_NATIVE=0`` forces the Python reference."""
    ces: SparkCesOptions = Field(default_factory=SparkCesOptions)
    """CES CloudEvents switches (see docs/ces.md). Snapshot rows must be skipped here: they are
    spread over state buckets by key, so they cannot be numbered within their snapshot
    "transaction" and their ``logicalid`` s would collide (use the CLI to turn a snapshot into
    CES events). Without Debezium's transaction metadata, ``sequencenumber`` is derived per
    micro-batch (exact when a transaction is released in one micro-batch)."""

    @field_validator("native", mode="before")
    @classmethod
    def _native_switch(cls, value: Any) -> Any:
        return native_mode(value)

    @field_validator("ces", mode="before")
    @classmethod
    def _spark_ces_options(cls, value: Any) -> Any:
        """Plain :class:`CesOptions` keep what they set; the rest takes the job's defaults."""
        if isinstance(value, CesOptions) and not isinstance(value, SparkCesOptions):
            return value.model_dump(exclude_unset=True)
        return value

    @property
    def needs_column_types(self) -> bool:
        return not _TYPED_OUTPUTS.isdisjoint(self.outputs)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if not self.outputs or len(set(self.outputs)) != len(self.outputs):
            raise ValueError("outputs must name each output format once")
        if {"ces", "ces-avro"} & set(self.outputs) and self.ces.snapshot_rows != "skip":
            raise ValueError("ces.snapshot_rows must be 'skip' in the Spark job (snapshot rows "
                             "cannot be numbered within their transaction across buckets)")
        return self


class _DecoderSpec(msgspec.Struct, frozen=True):
    """Everything a worker needs to build its decoder (files are read on the driver)."""

    options: DecodeOptions
    avro_schemas: dict[str, Any] | None
    registry: dict[str, str] | None
    column_types: bool
    """Collect the SQL column types of every table version (for CES and Debezium output)."""
    token: str


def _decoder_spec(config: TranslateConfig) -> _DecoderSpec:
    avro = None
    if config.avro_schemas:
        avro = msgspec.json.decode(open(config.avro_schemas, "rb").read())  # noqa: SIM115
    registry = {**config.registry, "url": str(config.schema_registry)} if config.schema_registry \
        else None
    options = config.decode_options()
    typed = config.needs_column_types
    token = hashlib.sha256(msgspec.msgpack.encode([options, avro, registry, typed])).hexdigest()
    return _DecoderSpec(options, avro, registry, typed, token)


_decoders: dict[str, tuple[Decoder, ColumnCatalog | None]] = {}


def _decoder(spec: _DecoderSpec) -> tuple[Decoder, ColumnCatalog | None]:
    """One decoder per worker process and configuration (schema caches persist across tasks),
    with the catalog of column types it has seen when the outputs need them."""
    found = _decoders.get(spec.token)
    if found is None:
        if spec.registry is not None:
            resolver: Any = RegistrySchemaResolver(spec.registry)
        elif spec.avro_schemas is not None:
            resolver = FileSchemaResolver(spec.avro_schemas)
        else:
            resolver = None
        catalog = ColumnCatalog() if spec.column_types else None
        decoder = Decoder(spec.options, AvroDecoder(resolver), CesDecoder(catalog=catalog))
        if catalog is not None:
            decoder.add_schema_listener(catalog.add_schema)
        found = _decoders[spec.token] = (decoder, catalog)
    return found


_spark_decoders: dict[str, Any] = {}


def _spark_decoder(spec: _DecoderSpec, decoder: Decoder) -> Any:
    """The native decoder of the decode step (one per worker process and configuration; its
    Avro writer schemas come from ``decoder``, which reads the rows it declines)."""
    found = _spark_decoders.get(spec.token)
    if found is None:
        options = spec.options
        found = native.module().SparkDecoder(
            placeholder=options.unavailable_value_placeholder,
            binary_mode=options.binary_handling_mode,
            table_schemas=list(options.table_schemas))
        avro = decoder.avro
        if avro.__class__ is AvroDecoder and avro.resolver is not None:
            found.configure_avro(native.avro_schemas(decoder))
        _spark_decoders[spec.token] = found
    return found


def _native_columns(batch: Any) -> Any:
    """The Kafka columns of ``batch`` as the native decoder reads them (a struct array; the
    timestamp in epoch ms as the Python decoder gets it)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    arrays = [batch.column("key").cast(pa.binary()), batch.column("value").cast(pa.binary()),
              batch.column("topic").cast(pa.string()), batch.column("partition").cast(pa.int32()),
              batch.column("offset").cast(pa.int64()),
              pc.divide(batch.column("timestamp").cast(pa.int64()), 1000),
              batch.column("headers").cast(pa.list_(header))]
    return pa.StructArray.from_arrays(arrays, names=["key", "value", "topic", "partition",
                                                     "offset", "timestamp", "headers"])


def _decode_batch_native(batch: Any, spark_decoder: Any, decoder: Decoder, buckets: int,
                         heartbeats: bool = False, progress: ProgressTracker | None = None
                         ) -> list[Any]:
    """:func:`_decode_batch` with the native decoder: the batch's Kafka columns in one call,
    events staged as native bytes, packed per bucket (:data:`PACKED_ROW`); the rows it declines
    go through the Python decoder (dead letters, side records and their events exactly as
    there, the events then staged natively).
    With ``progress`` (streaming): every row's offset goes to the tracker, the declined rows'
    events and transaction END rows as on the Python path; the native events' progress is
    tracked by ``spark_decoder`` (``track_progress``/``take_progress``)."""
    import numpy as np
    import pyarrow as pa

    if not batch.num_rows:
        return [_decode_batch(batch, decoder, buckets, heartbeats=heartbeats, progress=progress)]
    if progress is not None:
        _record_offsets(batch, progress)
    try:
        staged, declined, (records, tombstones), clock = spark_decoder.decode(
            _native_columns(batch), buckets)
    except ValueError as exc:  # columns of other types than the Kafka source's: a bug
        raise BridgeError(f"native decode step: {exc}") from exc
    rows = pa.record_batch(staged)  # one row per packed value: bucket, payload
    n = rows.num_rows
    schema = _arrow_stage_schema()
    zeros = pa.array(np.zeros(n + 1, dtype=np.int64))
    columns = [pa.concat_arrays([rows.column(0), pa.array([CLOCK_BUCKET], pa.int32())]),
               pa.array(np.append(np.full(n, PACKED_ROW, dtype=np.int8), np.int8(EVENT_ROW))),
               pa.nulls(n + 1, pa.int64()),
               pa.concat_arrays([pa.nulls(n, schema.field("clock").type),
                                 pa.array([clock * 1000 if clock is not None else None],
                                          schema.field("clock").type)]),
               pa.concat_arrays([rows.column(1), pa.nulls(1, pa.binary())]),
               pa.nulls(n + 1, pa.binary())]
    for name in DECODE_COUNTERS:
        value = records if name == "records_in" else tombstones if name == "tombstones" else 0
        columns.append(pa.concat_arrays([zeros.slice(0, n), pa.array([value], pa.int64())])
                       if value else zeros)
    out = [pa.RecordBatch.from_arrays(columns, schema=schema)]
    if declined:
        encode = functools.partial(_wire, spark_decoder, buckets)
        out.append(_decode_batch(batch.take(pa.array(declined, pa.uint32())), decoder, buckets,
                                 heartbeats=heartbeats, progress=progress, encode=encode))
    return out


def _record_offsets(batch: Any, progress: ProgressTracker) -> None:
    """The highest offset read per partition in ``batch`` (any record)."""
    import pyarrow as pa

    read = pa.Table.from_batches([batch.select(["topic", "partition", "offset"])]) \
        .group_by(["topic", "partition"]).aggregate([("offset", "max")]).to_pydict()
    for topic, partition, offset in zip(read["topic"], read["partition"], read["offset_max"],
                                        strict=True):
        progress.record(topic, partition, offset)


def _merged_marks(progress: ProgressTracker, native_marks: list[tuple[Any, ...]]
                  ) -> list[tuple[str, int, PartitionMark]]:
    """The marks of a task whose events were decoded by both decoders: the Python tracker's
    (every offset, the declined rows' events) merged with the native decoder's."""
    theirs = {(t, p): mark_of(*native) for t, p, *native in native_marks}
    out = []
    for topic, partition, mark in progress.marks():
        other = theirs.get((topic, partition))
        out.append((topic, partition, mark if other is None else mark.merged(other)))
    return out


def _wire(spark_decoder: Any, buckets: int, event: ChangeEvent, stamp: int | None, ms: int
          ) -> tuple[int, bytes]:
    """The bucket and staged bytes of an event the Python decoder read, packed as the native
    decoder packs its events (a :data:`PACKED_ROW` of one event)."""
    bucket, data = spark_decoder.wire(native.flatten(event), stamp, buckets, ms)
    return int(bucket), data


def bucket_of(event: ChangeEvent, buckets: int) -> int:
    """The state bucket: by commit LSN, so one transaction's events are released (and numbered
    for CES) together; snapshot rows by table and key. Stable across processes (Python's
    ``hash`` of str is salted per process)."""
    if event.op == "r" and event.snapshot != "incremental":
        return zlib.crc32(msgspec.msgpack.encode(group_key(event))) % buckets
    return zlib.crc32(event.sort_key[0]) % buckets


def _event_columns(event: ChangeEvent, catalog: ColumnCatalog,
                   cache: dict[int, bytes]) -> bytes | None:
    """The event's table version's SQL column types, as bytes (``None`` when unknown)."""
    after, before = event.after, event.before
    image = after if after is not None else before if before is not None else event.key
    names = tuple(image) if before is None or after is None or len(before) == len(after) \
        else tuple(after) + tuple(c for c in before if c not in after)
    columns = catalog.lookup(event.table, names)
    if columns is None:
        return None
    data = cache.get(id(columns))
    if data is None:
        data = cache[id(columns)] = msgspec.msgpack.encode(columns)
    return data


def _decode_batch(batch: Any, decoder: Decoder, buckets: int,
                  catalog: ColumnCatalog | None = None, heartbeats: bool = False,
                  progress: ProgressTracker | None = None,
                  encode: Callable[[ChangeEvent, int | None, int], tuple[int, bytes]] | None = None
                  ) -> Any:
    """One Arrow batch of Kafka rows as staged rows; with ``progress`` (streaming), the read
    positions go to the tracker and transaction END records become rows of their bucket.
    ``encode`` (the native path): an event's bucket and its :data:`PACKED_ROW` bytes, from the
    event, its record's Kafka timestamp and its commit time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = batch.column("key").to_pylist()
    values = batch.column("value").to_pylist()
    topics = batch.column("topic").to_pylist()
    partitions = batch.column("partition").to_pylist()
    offsets = batch.column("offset").to_pylist()
    stamps = pc.divide(batch.column("timestamp").cast(pa.int64()), 1000).to_pylist()
    headers = batch.column("headers").to_pylist()
    bucket: list[int] = []
    kinds: list[int] = []
    commit_ms: list[int | None] = []
    payload: list[bytes] = []
    types: list[bytes | None] = []
    type_cache: dict[int, bytes] = {}
    tombstones = side = skipped = dead = 0
    clock: int | None = None
    note = progress.event if progress is not None else None
    for i in range(len(values)):
        h = headers[i]
        record = RawRecord(topics[i], partitions[i], offsets[i], stamps[i], keys[i], values[i],
                           tuple((x["key"], x["value"]) for x in h) if h else ())
        try:
            decoded = decoder.decode(record)
        except ServiceError:
            raise  # a service that is down (schema registry) is not bad input: fail the batch
        except Exception as exc:  # every other failure is data on the dead-letter output
            dead += 1
            bucket.append(DEAD_BUCKET)
            kinds.append(EVENT_ROW)
            commit_ms.append(None)
            payload.append(msgspec.msgpack.encode(DeadLetter.of(exc, record)))
            types.append(None)
            continue
        if decoded.__class__ is SideRecord:
            side_record: SideRecord = decoded  # type: ignore[assignment]
            kind = side_record.kind
            if kind is SideKind.TOMBSTONE:
                tombstones += 1
            elif kind is SideKind.MESSAGE:
                skipped += 1
            else:
                side += 1
                if heartbeats and kind is SideKind.HEARTBEAT:
                    beat = side_record.ts_ms
                    if beat is not None and (clock is None or beat > clock):
                        clock = beat
                elif progress is not None and kind is SideKind.TX_END:
                    row = _tx_end_row(side_record, buckets, stamps[i])
                    if row is not None:
                        bucket.append(row[0])
                        kinds.append(TX_END_ROW)
                        commit_ms.append(row[1])
                        payload.append(row[2])
                        types.append(None)
            continue
        event: ChangeEvent = decoded  # type: ignore[assignment]
        if note is not None:
            note(event)
        ms = event.source_ts_ms if event.source_ts_ms is not None else stamps[i] or 0
        if clock is None or ms > clock:
            clock = ms
        if encode is None:
            bucket.append(bucket_of(event, buckets))
            payload.append(event_bytes(event))
            kinds.append(EVENT_ROW)
            commit_ms.append(ms)
        else:
            where, data = encode(event, stamps[i], ms)
            bucket.append(where)
            payload.append(data)
            kinds.append(PACKED_ROW)
            commit_ms.append(None)
        types.append(_event_columns(event, catalog, type_cache) if catalog is not None else None)
    if progress is not None and len(values):
        _record_offsets(batch, progress)
    n = len(bucket)
    zeros = [0] * n
    counts = (len(values), tombstones, side, skipped, dead)
    columns = {
        "bucket": [*bucket, CLOCK_BUCKET],
        "kind": [*kinds, EVENT_ROW],
        "commit_ms": [*commit_ms, None],
        "clock": pa.array([None] * n + [clock * 1000 if clock is not None else None],
                          pa.timestamp("us", tz="UTC")),
        "payload": [*payload, None],
        "columns": [*types, None],
    } | {f"n_{name}": [*zeros, count] for name, count in zip(DECODE_COUNTERS, counts,
                                                              strict=True)}
    return pa.RecordBatch.from_pydict(columns, schema=_arrow_stage_schema())


_tx_encoder = msgspec.msgpack.Encoder()
_tx_decoder = msgspec.msgpack.Decoder(tuple[bytes, int])


def _tx_end_row(side: SideRecord, buckets: int, stamp: int | None
                ) -> tuple[int, int, bytes] | None:
    """(bucket, ms, payload) of a transaction END: SQL Server's transaction id is the commit
    LSN, so the END goes to the bucket of its events (see :func:`bucket_of`)."""
    if not side.tx_id or side.event_count is None:
        return None
    try:
        commit = parse_lsn(side.tx_id)
    except LsnFormatError:
        return None  # not a commit LSN (another connector): the END cannot name its bucket
    ms = side.ts_ms if side.ts_ms is not None else stamp or 0
    return (zlib.crc32(commit) % buckets, ms, _tx_encoder.encode((commit, side.event_count)))


def _progress_batch(marks: list[tuple[str, int, PartitionMark]], buckets: int) -> Any:
    """The marks of the partitions one task read, one copy per bucket."""
    import pyarrow as pa

    data = marks_bytes(marks)
    n = buckets
    columns = {"bucket": list(range(buckets)), "kind": [PROGRESS_ROW] * n,
               "commit_ms": [None] * n, "clock": pa.nulls(n, pa.timestamp("us", tz="UTC")),
               "payload": [data] * n, "columns": [None] * n} \
        | {f"n_{name}": [0] * n for name in DECODE_COUNTERS}
    return pa.RecordBatch.from_pydict(columns, schema=_arrow_stage_schema())


def _arrow_stage_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("bucket", pa.int32()), ("kind", pa.int8()), ("commit_ms", pa.int64()),
                      ("clock", pa.timestamp("us", tz="UTC")), ("payload", pa.binary()),
                      ("columns", pa.binary())]
                     + [(f"n_{name}", pa.int64()) for name in DECODE_COUNTERS])


class _Encoder:
    """Output rows (tuples in :data:`OUTPUT_SCHEMA` order) through the output layer, with the
    SQL column types the decode step found (kept in state with the events that wait)."""

    def __init__(self, config: TranslateConfig) -> None:
        self.catalog = ColumnCatalog()
        self.output = Output(config.outputs, config, catalog=self.catalog)
        self.learned: dict[tuple[TableRef, bytes], None] = {}

    def learn(self, event: ChangeEvent, columns: Any) -> None:
        """Register the SQL column types the decode step found for ``event``'s table."""
        if isinstance(columns, bytes):
            self._learn(event.table, columns)

    def _learn(self, table: TableRef, columns: bytes) -> None:
        self.learned[(table, columns)] = None
        self.catalog.add(table, _columns_decoder.decode(columns))

    def learned_bytes(self) -> bytes | None:
        """The table versions learned so far, to keep in state with the events that wait."""
        return msgspec.msgpack.encode(list(self.learned)) if self.learned else None

    def learn_stored(self, stored: bytes | None) -> None:
        for table, columns in _learned_decoder.decode(stored) if stored else ():
            self._learn(table, columns)

    @property
    def encode_errors(self) -> int:
        return self.output.counters.total_encode_errors

    def change_rows(self, record: ChangeRecord) -> list[tuple[Any, ...]]:
        return [_row(r) for r in self.output.encode(record)]

    def dead_row(self, dead: DeadLetter) -> tuple[Any, ...]:
        return _row(self.output.dead_letter(dead))


def _row(r: OutputRecord) -> tuple[Any, ...]:
    return (r.kind, r.format, r.id, r.table_id, r.op, r.seq, r.commit_ts, r.topic, r.key,
            r.value, list(r.headers), r.source_topic, r.source_partition, r.source_offset)


_dead_decoder = msgspec.msgpack.Decoder(DeadLetter)
_NO_COUNTS = (0,) * len(RELEASE_COUNTERS)
_columns_decoder = msgspec.msgpack.Decoder(tuple[CatalogColumn, ...])
_learned_decoder = msgspec.msgpack.Decoder(list[tuple[TableRef, bytes]])


def _columns(rows: list[tuple[Any, ...]], counts: tuple[int, ...]) -> list[Sequence[Any]]:
    """Output rows plus the counters row, column by column (in :data:`_RELEASE_COLUMNS` order;
    ``lineage`` null: the rows carry their headers)."""
    n = len(rows)
    stats = ("stats",) + (None,) * (len(OUTPUT_COLUMNS) - 1)
    if n:
        transposed = zip(*rows, strict=True)
        columns: list[Sequence[Any]] = [[*column, last]
                                        for column, last in zip(transposed, stats, strict=True)]
    else:
        columns = [[last] for last in stats]
    zeros = [0] * n
    return columns + [[None] * (n + 1)] + [[*zeros, count] for count in counts]


def _pandas(columns: list[Sequence[Any]]) -> Any:
    import pandas as pd

    return pd.DataFrame(dict(zip(_RELEASE_COLUMNS, columns, strict=True)))


@functools.cache
def _arrow_backed() -> type | None:
    """A pandas extension array over Arrow data, for :func:`_arrow_frame`, with its own dtype
    so that pandas builds the same kind of array when it concatenates frames (PySpark joins a
    worker's output frames, all-null columns included); ``None`` where this pandas does not
    keep it through such a join (it builds on pandas' ``ArrowExtensionArray``)."""
    import pandas as pd
    import pyarrow as pa

    class ArrowBacked(pd.arrays.ArrowExtensionArray):  # type: ignore[misc]
        """Hands PySpark (``pyarrow.Array.from_pandas``) one Arrow array, not the chunked
        array of pandas' own ``ArrowExtensionArray``, which PySpark cannot put in a batch."""

        def __init__(self, values: Any) -> None:
            super().__init__(values)
            self._dtype = ArrowBackedDtype(self._pa_array.type)

        def __arrow_array__(self, type: Any = None) -> Any:
            array = self._pa_array.combine_chunks()
            return array if type is None or array.type == type else array.cast(type)

    class ArrowBackedDtype(pd.ArrowDtype):  # type: ignore[misc]
        @classmethod
        def construct_array_type(cls) -> type:
            return ArrowBacked

    try:  # two frames (the first all null) and PySpark's padding, joined as its worker does
        frames = [pd.DataFrame({"c": pd.Series(ArrowBacked(pa.chunked_array([values])))})
                  for values in (pa.nulls(1, pa.string()), pa.array(["a"]))]
        with warnings.catch_warnings():  # pytest resets the module's filter
            warnings.filterwarnings("ignore", category=FutureWarning,
                                    message=PANDAS_CONCAT_NOTICE)
            joined = pd.concat([*frames, pd.DataFrame({"c": [None]})], ignore_index=True)
        chunked = not isinstance(pa.Array.from_pandas(joined["c"]), pa.Array)
        problem = "a chunked array after the join" if chunked else None
    except Exception as exc:  # another pandas
        problem = str(exc)
    if problem is None:
        return ArrowBacked
    log.warning("pandas %s: the streaming release's output frames hold Python objects (%s)",
                pd.__version__, problem)
    return None


def _arrow_frame(table: Any) -> Any:
    """An Arrow table as the pandas frame ``applyInPandasWithState`` must return, its flat
    columns still Arrow arrays: PySpark's conversion back to Arrow then copies buffers instead
    of making a Python object of every value both ways (measured, 65k canonical rows: 0.33 to
    0.47 s → 0.05 to 0.13 s). Nested columns (``headers``) are Python values, as PySpark's
    converter of them expects."""
    import pandas as pd
    import pyarrow as pa

    backed = _arrow_backed()
    if backed is None:
        return table.to_pandas(integer_object_nulls=True)
    return pd.DataFrame({
        name: column.to_pandas() if pa.types.is_nested(column.type)
        else pd.Series(backed(column), copy=False)
        for name, column in zip(table.column_names, table.columns, strict=True)})


def _arrow(columns: list[Sequence[Any]]) -> Any:
    import pyarrow as pa

    schema = _arrow_release_schema()
    return pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, schema,
                                                                      strict=True)],
                                schema=schema)


@functools.cache
def _arrow_release_schema() -> Any:
    """:data:`_RELEASE_SCHEMA` as an Arrow schema."""
    import pyarrow as pa

    kinds = {"string": pa.string(), "binary": pa.binary(), "int": pa.int32(), "long": pa.int64(),
             "array<struct<key: string, value: binary>>": pa.list_(
                 pa.struct([("key", pa.string()), ("value", pa.binary())]))}
    return pa.schema([(name, kinds[kind]) for name, kind in OUTPUT_COLUMNS]
                     + [("lineage", pa.binary())]
                     + [(f"n_{name}", pa.int64()) for name in RELEASE_COUNTERS])


def _release(window: WindowState, encoder: _Encoder) -> list[Sequence[Any]]:
    released = sorted(window.drain(), key=lambda record: (record.seq, record.event_id))
    rows = [row for record in released for row in encoder.change_rows(record)]
    rows += [encoder.dead_row(letter) for letter in window.drain_mismatches()]
    c = window.counters
    return _columns(rows, (c.changes_out, c.merged, c.duplicates, c.replay_mismatches, c.late,
                           c.pending, encoder.encode_errors,
                           *(window.released[rule] for rule in RELEASE_RULES)))


def _events(payloads: Iterable[tuple[bytes, int, bytes | None]], encoder: _Encoder
            ) -> list[tuple[ChangeEvent, int]]:
    events = []
    learn = encoder.learn
    for payload, ms, columns in payloads:
        event = event_from_bytes(payload)
        if columns is not None:
            learn(event, columns)
        events.append((event, ms))
    return events


def _arrow_payloads(table: Any) -> Iterator[tuple[bytes, int, bytes | None]]:
    return zip(table.column("payload").to_pylist(), table.column("commit_ms").to_pylist(),
               table.column("columns").to_pylist(), strict=True)


def _dead_rows(payloads: Iterable[bytes], encoder: _Encoder) -> list[Sequence[Any]]:
    return _columns([encoder.dead_row(_dead_decoder.decode(p)) for p in payloads], _NO_COUNTS)


@dataclass(slots=True)
class _BucketRows:
    """One bucket's rows of a streaming micro-batch, by kind."""

    events: list[tuple[bytes, int, bytes | None]] = field(default_factory=list)
    """Staged event bytes, commit time (ms) and the SQL column types of its table."""
    packed: list[bytes] = field(default_factory=list)
    """The native core's staged events (:data:`PACKED_ROW` values)."""
    marks: list[tuple[str, int, PartitionMark]] = field(default_factory=list)
    """The partition marks of the progress rows."""
    ends: list[tuple[bytes, int, int]] = field(default_factory=list)
    """Transaction END rows: commit LSN, event count, ms."""


def _split_frames(frames: Iterator[Any]) -> _BucketRows:
    """One bucket's frames (``applyInPandasWithState``) by kind of row."""
    rows = _BucketRows()
    for frame in frames:
        for kind, payload, ms, columns in zip(frame["kind"].tolist(), frame["payload"],
                                              frame["commit_ms"].tolist(), frame["columns"],
                                              strict=True):
            if kind == PACKED_ROW:
                rows.packed.append(payload)
            elif kind == EVENT_ROW:
                rows.events.append((payload, int(ms), columns))
            elif kind == PROGRESS_ROW:
                rows.marks += marks_from_bytes(payload)
            else:
                commit, count = _tx_decoder.decode(payload)
                rows.ends.append((commit, count, int(ms)))
    return rows


def _learned(encoder: _Encoder, window: WindowState) -> bytes | None:
    """The column types of the tables whose events wait (kept in state with them)."""
    waiting = window.waiting_tables()
    if not waiting:
        return None
    kept = [(table, columns) for table, columns in encoder.learned if table in waiting]
    return msgspec.msgpack.encode(kept) if kept else None


def _streaming_release(config: TranslateConfig, topology: Topology | None
                       ) -> Callable[..., Iterator[Any]]:
    core = TranslatorConfig(pair_key_changes=config.pair_key_changes)

    def release(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        leave_sigint_to_the_driver()
        encoder = _Encoder(config)
        bucket = int(key[0])
        if bucket == CLOCK_BUCKET:
            for _ in frames:
                pass
            return
        with _collector_paused():
            if bucket == DEAD_BUCKET:
                columns = _dead_rows((p for f in frames for p in f["payload"]), encoder)
            else:
                watermark = state.getCurrentWatermarkMs()
                stored, learned = state.get if state.exists else (None, None)
                # a state the native core wrote raises BridgeError naming translate.native
                window = WindowState(core, stored, topology)
                encoder.learn_stored(learned)  # the column types of the events that waited
                rows = _split_frames(frames)
                if rows.packed:
                    raise BridgeError(f"release step: bucket {bucket} holds the native decode "
                                      "step's packed events")
                window.observe(rows.marks)
                window.add_transactions(rows.ends)
                window.add(_events(rows.events, encoder), watermark)
                window.release(watermark)
                # the partition marks stay even when nothing waits (replays, the watermark)
                state.update((window.dump(), _learned(encoder, window)))
                timeout = window.next_timeout_ms()
                if timeout is not None:
                    state.setTimeoutTimestamp(max(timeout, watermark))
                columns = _release(window, encoder)
        yield _pandas(columns)

    return release


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while one batch or state group is processed.

    The objects built per event are acyclic and freed by reference counting, but with tens of
    thousands of them alive at once the collector's passes over them cost about a fifth of the
    release step (measured: 51k -> 62k rows/s). It is back on as soon as the group is done.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _batch_release(config: TranslateConfig) -> Callable[[Any], Any]:
    core = TranslatorConfig(pair_key_changes=config.pair_key_changes)

    def release(table: Any) -> Any:
        leave_sigint_to_the_driver()
        encoder = _Encoder(config)
        bucket = table.column("bucket")[0].as_py()
        if bucket == CLOCK_BUCKET:
            return _arrow_release_schema().empty_table()
        with _collector_paused():
            if bucket == DEAD_BUCKET:
                return _arrow(_dead_rows(table.column("payload").to_pylist(), encoder))
            window = WindowState(core)
            window.add(_events(_arrow_payloads(table), encoder), -(2**62))
            window.release(2**62)  # a batch is the whole input: everything goes
            return _arrow(_release(window, encoder))

    return release


def _native_batch_release(config: TranslateConfig) -> Callable[[Any], Any]:
    """The release step of a batch DataFrame on the native core: a bucket's staged events in,
    its canonical output rows out as one Arrow table (replay mismatches and the counters row
    through the Python output layer; other formats, output topic templates and tombstones
    through the output layer from the native canonical records)."""
    pair = config.pair_key_changes
    direct = _native_output_direct(config)

    def release(table: Any) -> Any:
        import pyarrow.compute as pc

        leave_sigint_to_the_driver()
        bucket = table.column("bucket")[0].as_py()
        if bucket == CLOCK_BUCKET:
            return _arrow_release_schema().empty_table()
        encoder = _Encoder(config)
        if bucket == DEAD_BUCKET:
            with _collector_paused():
                return _arrow(_dead_rows(table.column("payload").to_pylist(), encoder))
        if not pc.all(pc.equal(table.column("kind"), PACKED_ROW)).as_py():
            raise BridgeError(f"native release step: bucket {bucket} holds rows that are not "
                              "the native decode step's packed events")
        payload = table.column("payload").combine_chunks()
        try:
            out, counts, mismatches = native.module().release_batch(payload, pair)
        except ValueError as exc:  # staged bytes it cannot read: a bug, never bad input
            raise BridgeError(f"native release step: {exc}") from exc
        return _native_rows(out, counts, mismatches, encoder, direct)

    return release


def _native_rows(out: Any, counts: Sequence[int], mismatches: list[Any], encoder: _Encoder,
                 direct: bool) -> Any:
    """The output rows of a native release (an Arrow batch of canonical rows) and its counters
    (changes_out, merged, duplicates, replay_mismatches, late, pending, then released per
    rule of :data:`RELEASE_RULES`) as one Arrow table of :data:`_RELEASE_SCHEMA`; other
    formats, topics and tombstones through the output layer on the canonical records."""
    import numpy as np
    import pyarrow as pa

    rows = pa.record_batch(out)
    schema = _arrow_release_schema()
    changes_out, merged, duplicates, mismatched, late, pending, *released = counts
    if direct:
        zeros = pa.array(np.zeros(rows.num_rows, dtype=np.int64))
        parts = [pa.Table.from_batches([pa.RecordBatch.from_arrays(
            [*rows.columns, *([zeros] * len(RELEASE_COUNTERS))], schema=schema)])]
        extra = []
    else:  # other formats, topics or tombstones: the output layer on the canonical records
        with _collector_paused():
            records = native.decode_lines(b"\n".join(rows.column("value").to_pylist()))
            extra = [row for record in records for row in encoder.change_rows(record)]
        parts = []
    extra += [encoder.dead_row(mismatch_letter(m)) for m in mismatches]
    parts.append(_arrow(_columns(extra, (changes_out, merged, duplicates, mismatched, late,
                                         pending, encoder.encode_errors, *released))))
    return pa.concat_tables(parts)


def _native_streaming_release(config: TranslateConfig, topology: Topology | None
                              ) -> Callable[..., Iterator[Any]]:
    """The release step of a streaming DataFrame on the native core
    (``applyInPandasWithState``): a bucket's staged events, progress and transaction END rows
    into the native window (``StreamRelease``; :class:`WindowState`'s rules), its state bytes
    in Spark's state store, its rows out as :func:`_native_rows` writes them. A state the
    Python reference wrote (the query ran with ``translate.native: off`` before) is taken
    over (:func:`~debezium_bridge.core.windowed_native.adopt_reference_state`)."""
    pair = config.pair_key_changes
    direct = _native_output_direct(config)
    partitions, ends = topology_args(topology)

    def release(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pyarrow as pa

        leave_sigint_to_the_driver()
        bucket = int(key[0])
        if bucket == CLOCK_BUCKET:
            for _ in frames:
                pass
            return
        encoder = _Encoder(config)
        if bucket == DEAD_BUCKET:
            with _collector_paused():
                columns = _dead_rows((p for f in frames for p in f["payload"]), encoder)
            yield _arrow_frame(_arrow(columns))
            return
        watermark = state.getCurrentWatermarkMs()
        stored = state.get[0] if state.exists else None
        rows = _split_frames(frames)
        if rows.events:
            raise BridgeError(f"native release step: bucket {bucket} holds events that are not "
                              "the native decode step's packed events")
        try:
            if stored is not None and not is_native_state(stored):
                window = adopt_reference_state(bytes(stored), pair, topology)
            else:
                window = native.module().StreamRelease(
                    None if stored is None else bytes(stored), pair, partitions, ends)
            window.push(pa.array(rows.packed, pa.binary()))
            window.observe(mark_tuples(rows.marks))
            window.add_transactions(rows.ends)
            window.run(watermark)
            out, counts, mismatches = window.output()
            state.update((bytes(window.dump()), None))
        except ValueError as exc:  # staged or state bytes it cannot read: a bug, not input
            raise BridgeError(f"native release step: {exc}") from exc
        timeout = window.next_timeout_ms()
        if timeout is not None:
            state.setTimeoutTimestamp(max(timeout, watermark))
        yield _arrow_frame(_native_rows(out, counts, mismatches, encoder, direct))

    return release


def _native_output_direct(config: TranslateConfig) -> bool:
    """Whether the native release writes the output rows itself (``canonical`` only, default
    topics, no tombstones)."""
    return (config.outputs == ("canonical",) and config.output_topic is None
            and not config.output_tombstones)


def native_translate(df: Any, config: TranslateConfig | None = None) -> bool:
    """Whether :func:`translate` runs ``df`` with ``config`` on the native core: where the
    extension is built and allowed (``config.native``, ``DEBEZIUM_BRIDGE_NATIVE``) and the
    job is one it covers: a DataFrame (batch or streaming) whose outputs need no SQL column
    types (``ces``, ``ces-avro`` and ``debezium`` do). Everything else runs the Python
    reference. Output rows are written natively for ``canonical`` alone (no ``output_topic``
    template, no ``output_tombstones``); other formats go through the output layer from the
    native canonical records."""
    config = config or TranslateConfig()
    if not native.use_native(config.native):
        return False
    return not config.needs_column_types


NO_DATA_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"


@contextmanager
def run_with_known_end(spark: Any, topology: Topology | None) -> Iterator[None]:
    """Start and run a streaming query of :func:`translate` inside this block: when
    ``topology`` knows the run's end (``Trigger.AvailableNow``, ``topology.ends``), Spark runs
    no micro-batch without data (:data:`NO_DATA_BATCHES`) while the block runs.

    Spark runs such a batch after every batch that moved the event-time watermark, so that
    state timeouts fire. In a run whose end is known, the last batch with data releases every
    waiting event (every partition reached its end), so that extra batch has nothing to do; it
    cost about 0.7 s of a 6 s run over 249k records (state stores of every shuffle partition
    loaded and committed). Spark reads the setting when the query starts and does not keep it
    in the checkpoint; the session's own value is back when the block ends (end it after the
    query stopped). Without a known end nothing changes.
    """
    if topology is None or topology.ends is None:
        yield
        return
    before = spark.conf.get(NO_DATA_BATCHES, None)
    spark.conf.set(NO_DATA_BATCHES, "false")
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(NO_DATA_BATCHES)
        else:
            spark.conf.set(NO_DATA_BATCHES, before)


def translate(df: Any, config: TranslateConfig | None = None,
              topology: Topology | None = None) -> Any:
    """Translate a Kafka-schema DataFrame (streaming or batch) into output rows.

    ``topology`` (streaming): the partition count of every topic read, so a waiting delete or
    create is released as soon as every partition of its topic has passed its commit LSN, and
    for ``Trigger.AvailableNow`` the offsets where this run ends
    (:func:`debezium_bridge.spark.source.stream_topology` builds it; the job passes it). Without
    it, waiting events are released by transaction END records and the event-time watermark.

    Counters are observed per batch as ``debezium_bridge_decode`` and
    ``debezium_bridge_release``; together ``records_in = changes_out + merged + duplicates +
    side_records + tombstones + dead_letters + skipped + pending``, with ``pending`` the change
    in waiting events (:class:`debezium_bridge.spark.job.RunCounters` sums them per run).
    """
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    config = config or TranslateConfig()
    df = with_kafka_columns(df)
    on_native = native_translate(df, config)
    staged = decode_stage(df, config, native=on_native)
    if df.isStreaming:
        step = _native_streaming_release if on_native else _streaming_release
        staged = staged.withWatermark("clock", config.watermark_delay)
        released = staged.groupBy("bucket").applyInPandasWithState(
            step(config, topology), _RELEASE_SCHEMA, "state binary, columns binary",
            "append", GroupStateTimeout.EventTimeTimeout)
    elif on_native:
        released = staged.groupBy("bucket").applyInArrow(_native_batch_release(config),
                                                         _RELEASE_SCHEMA)
    else:
        released = staged.groupBy("bucket").applyInArrow(_batch_release(config), _RELEASE_SCHEMA)
    return output_rows(released.observe(
        f"{METRICS_NAME}_release", *(F.sum(f"n_{c}").alias(c) for c in RELEASE_COUNTERS)))


KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
"""The columns of Spark's Kafka source that :func:`translate` reads, besides ``headers``."""


def with_kafka_columns(df: Any) -> Any:
    """``df`` with the Kafka source's columns :func:`translate` reads: ``headers`` added, empty,
    where the source left it out (Spark's ``kafka`` format without ``includeHeaders=true``);
    any other one missing is a :class:`ConfigError`."""
    from pyspark.sql import functions as F

    missing = [c for c in KAFKA_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(f"translate reads the Kafka source's columns; missing: "
                          f"{', '.join(missing)} (has: {', '.join(df.columns)})")
    if "headers" in df.columns:
        return df
    return df.withColumn("headers", F.lit(None).cast(KAFKA_HEADERS))


def output_rows(released: Any) -> Any:
    """The last step of :func:`translate`: the release step's rows (:data:`_RELEASE_SCHEMA`)
    without the counter rows and columns, with the :data:`NATIVE_HEADERS` of the native
    change rows."""
    from pyspark.sql import functions as F

    rows = released.where(F.col("kind") != "stats").drop(*(f"n_{c}" for c in RELEASE_COUNTERS))
    return rows.withColumn("headers", _headers_column()).drop("lineage")


def _headers_column() -> Any:
    """``headers``, and for the native release's change rows (``lineage`` set) the
    :data:`NATIVE_HEADERS`."""
    from pyspark.sql import functions as F

    values = (F.col("event_id").cast("binary"), F.col("seq").cast("binary"), F.col("lineage"))
    native = F.array(*(F.struct(F.lit(name).alias("key"), value.alias("value"))
                       for name, value in zip(NATIVE_HEADERS, values, strict=True)))
    return F.when(F.col("lineage").isNull(), F.col("headers")).otherwise(native)


def decode_stage(df: Any, config: TranslateConfig, *, native: bool = False) -> Any:
    """Step 1 of :func:`translate` on its own: one row per decoded event (``bucket``, ``kind``,
    ``commit_ms``, ``payload`` = the event as bytes, ``columns``), dead letter and clock row;
    for a streaming ``df`` also the progress rows (per task, one per bucket) and transaction END
    rows (benchmarks measure the cost of the steps with it). ``native``: decode with the native
    core, events staged as its bytes (what the native release steps read), packed into one row
    per bucket and Arrow batch (:data:`PACKED_ROW`, ``commit_ms`` null: the commit times travel
    in the packed value)."""
    from pyspark.sql import functions as F

    decode = decode_task(config, streaming=df.isStreaming, native=native)
    return df.mapInArrow(decode, _STAGE_SCHEMA).observe(
        f"{METRICS_NAME}_decode", *(F.sum(f"n_{c}").alias(c) for c in DECODE_COUNTERS))


def decode_task(config: TranslateConfig, *, streaming: bool, native: bool
                ) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function :func:`decode_stage` runs per Spark task (``mapInArrow``): the task's Arrow
    batches of Kafka rows in, staged rows out."""
    spec = _decoder_spec(config)
    buckets = config.buckets
    heartbeats = config.heartbeat_watermark
    on_native = native

    def decode(batches: Iterator[Any]) -> Iterator[Any]:
        leave_sigint_to_the_driver()
        decoder, catalog = _decoder(spec)
        if on_native and streaming:
            spark_decoder = _spark_decoder(spec, decoder)
            spark_decoder.track_progress()
            tracker = ProgressTracker()
            for batch in batches:
                with _collector_paused():
                    staged = _decode_batch_native(batch, spark_decoder, decoder, buckets,
                                                  heartbeats, tracker)
                yield from staged
            marks = _merged_marks(tracker, spark_decoder.take_progress())
            if marks:
                yield _progress_batch(marks, buckets)
            return
        if on_native:
            spark_decoder = _spark_decoder(spec, decoder)
            for batch in batches:
                with _collector_paused():
                    staged = _decode_batch_native(batch, spark_decoder, decoder, buckets,
                                                  heartbeats)
                yield from staged
            return
        progress = ProgressTracker() if streaming else None
        for batch in batches:
            with _collector_paused():
                staged = _decode_batch(batch, decoder, buckets, catalog, heartbeats, progress)
            yield staged
        if progress is not None and progress.marks():
            yield _progress_batch(progress.marks(), buckets)

    return decode
