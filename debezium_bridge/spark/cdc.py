"""SQL Server change-table rows and net changes as Spark batch functions (docs/cdc.md).

``translate_cdc(df, instances, config)`` takes any DataFrame with the columns of
``cdc.<capture_instance>_CT`` or ``cdc.fn_cdc_get_all_changes_<capture_instance>(…, N'all
update old')`` — read over JDBC (``spark.read.jdbc``), from CSV or JSON exports, or from a
table — and gives the output rows :func:`debezium_bridge.spark.translate` gives for Kafka input
(same columns: ``kind``, ``format``, ``event_id``, ``table``, ``op``, ``seq``, ``commit_ts``,
``topic``, ``key``, ``value``, ``headers``, ``source_*``), for every output format. Rows are
grouped by a hash of ``__$start_lsn`` (whole transactions stay together), then each group runs
the same code as the CLI: :class:`~debezium_bridge.core.pipeline.CdcPipeline` (sorting,
pairing, ``event_serial_no``, key changes, dead letters) and the output layer. Counters are
observed as ``debezium_bridge_cdc`` (``records_in = changes_out + merged + duplicates +
dead_letters``).

``net_changes(changes, window, mode, outputs)`` takes output rows with the ``canonical``
format (of :func:`translate_cdc` or of :func:`debezium_bridge.spark.translate`, so any Debezium
or CES input too) and gives the net changes of the LSN window as output rows (``rows``: the
``fn_cdc_get_net_changes`` shape as JSON values).

JDBC notes: read LSNs and masks as binary (the default), and temporal columns without a time
zone shift (``spark.sql.session.timeZone=UTC``, or the JDBC option ``preferTimestampNTZ``), so
that wall-clock ``datetime2`` values survive; ``datetimeoffset`` arrives as text.
"""

from __future__ import annotations

import datetime as dt
import decimal
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec
from pydantic import Field

from debezium_bridge.config import Settings
from debezium_bridge.core.net import NET_MODES, NetChanges, NetMode, Window, net_rows
from debezium_bridge.core.pipeline import CdcPipeline
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.errors import ConfigError
from debezium_bridge.formats.cdc.catalog import CaptureInstance, LsnTimes
from debezium_bridge.formats.cdc.rows import START_LSN, CdcRow
from debezium_bridge.formats.cdc.settings import CdcSettings
from debezium_bridge.formats.debezium.envelope import key_identity
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.output import Output, OutputFormat, OutputRecord, OutputSettings
from debezium_bridge.spark.translate import OUTPUT_COLUMNS, OUTPUT_SCHEMA, SparkOutput
from debezium_bridge.spark.workers import leave_sigint_to_the_driver

__all__ = ["CDC_COUNTERS", "CdcTranslateConfig", "net_changes", "translate_cdc"]

CDC_COUNTERS = ("records_in", "changes_out", "merged", "duplicates", "dead_letters",
                "encode_errors")
_JSON = msgspec.json.Encoder()


class CdcTranslateConfig(OutputSettings):
    """What :func:`translate_cdc` produces and how it reads the rows."""

    outputs: tuple[SparkOutput, ...] = ("canonical",)
    """Output formats to emit for every change."""
    cdc: CdcSettings = Field(default_factory=CdcSettings)
    """The capture instances, export spellings and connector version (docs/cdc.md)."""
    pair_key_changes: bool = True
    """Merge the delete + insert halves of a primary-key change into one update."""
    buckets: int = Field(64, ge=1, le=100_000)
    """Groups of transactions processed together (by a hash of ``__$start_lsn``)."""


class _Spec(msgspec.Struct, frozen=True):
    instances: dict[str, CaptureInstance]
    instance: str
    settings: CdcSettings
    lsn_times: dict[bytes, tuple[int | None, int | None]] | None


def _cell(value: Any) -> Any:
    """A Spark/Arrow value as an export spelling the row reader takes."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    return value


def _json(value: Any) -> bytes:
    """Compact JSON (a module function: Spark closures must not hold the encoder itself)."""
    return _JSON.encode(value)


def _raw(fields: Mapping[str, Any]) -> bytes:
    def plain(v: Any) -> Any:
        return "0x" + v.hex().upper() if isinstance(v, bytes) else v
    return _JSON.encode({k: plain(v) for k, v in fields.items()})


def _output_rows(records: Iterable[OutputRecord]) -> list[tuple[Any, ...]]:
    return [(r.kind, r.format, r.id, r.table_id, r.op, r.seq, r.commit_ts, r.topic, r.key,
             r.value, list(r.headers), r.source_topic, r.source_partition, r.source_offset)
            for r in records]


def _arrow_schema(counters: Sequence[str]) -> Any:
    import pyarrow as pa

    kinds = {"string": pa.string(), "binary": pa.binary(), "int": pa.int32(), "long": pa.int64(),
             "array<struct<key: string, value: binary>>": pa.list_(
                 pa.struct([("key", pa.string()), ("value", pa.binary())]))}
    return pa.schema([(name, kinds[kind]) for name, kind in OUTPUT_COLUMNS]
                     + [(f"n_{c}", pa.int64()) for c in counters])


def _table(rows: list[tuple[Any, ...]], counts: Sequence[int], names: Sequence[str]) -> Any:
    """Output rows plus one ``stats`` row carrying the group's counters."""
    import pyarrow as pa

    schema = _arrow_schema(names)
    width = len(OUTPUT_COLUMNS)
    stats = ("stats",) + (None,) * (width - 1)
    columns: list[list[Any]] = [[*(row[i] for row in rows), stats[i]] for i in range(width)]
    zeros = [0] * len(rows)
    columns += [[*zeros, count] for count in counts]
    return pa.Table.from_arrays([pa.array(c, f.type) for c, f in zip(columns, schema,
                                                                      strict=True)],
                                schema=schema)


def _counters_schema(names: Sequence[str]) -> str:
    return OUTPUT_SCHEMA + ", " + ", ".join(f"n_{c} long" for c in names)


def translate_cdc(df: Any, instances: Mapping[str, CaptureInstance],
                  config: CdcTranslateConfig | None = None, *,
                  capture_instance: str | None = None,
                  lsn_times: LsnTimes | None = None) -> Any:
    """Change-table rows (any DataFrame with their columns) → output rows (module docstring).

    ``capture_instance`` names the rows' capture instance (default: the only one in
    ``instances``, or ``config.cdc.capture_instance``)."""
    from pyspark.sql import functions as F

    config = config or CdcTranslateConfig()
    name = capture_instance or config.cdc.capture_instance
    if name is None:
        if len(instances) != 1:
            raise ConfigError("several capture instances described: name the rows' one "
                              "(capture_instance)")
        name = next(iter(instances))
    if name not in instances:
        raise ConfigError(f"capture instance {name!r} is not described")
    start = next((c for c in df.columns if c.lower() == START_LSN), None)
    if start is None:
        raise ConfigError(f"the DataFrame has no {START_LSN} column")
    spec = _Spec(dict(instances), name, config.cdc,
                 None if lsn_times is None else dict(lsn_times.times))
    buckets = config.buckets
    outputs = config.outputs
    output_settings = OutputSettings(**{k: getattr(config, k)
                                        for k in OutputSettings.model_fields})
    core = TranslatorConfig(pair_key_changes=config.pair_key_changes)
    source = f"cdc.{name}_CT"
    columns = list(df.columns)

    def release(table: Any) -> Any:
        leave_sigint_to_the_driver()
        settings = spec.settings.model_copy(update={"sort_input": True})
        pipeline = CdcPipeline(spec.instances, settings, core,
                               LsnTimes(spec.lsn_times) if spec.lsn_times else None)
        output = Output(outputs, output_settings, catalog=pipeline.catalog,
                        ledger=pipeline.ledger)
        data = {c: table.column(c).to_pylist() for c in columns if c != "__bucket"}
        rows = []
        for i in range(table.num_rows):
            fields = {c: _cell(values[i]) for c, values in data.items()}
            rows.append((CdcRow(fields, source, None, _raw(fields), False), spec.instance))
        out: list[OutputRecord] = []
        for item in pipeline.translate(rows):
            if isinstance(item, ChangeRecord):
                out.extend(output.encode(item))
            else:
                out.append(output.dead_letter(item))
        c = pipeline.counters
        counts = (c.records_in, c.changes_out, c.merged, c.duplicates, c.dead_letters,
                  output.counters.total_encode_errors)
        return _table(_output_rows(out), counts, CDC_COUNTERS)

    bucketed = df.withColumn("__bucket", F.pmod(F.crc32(F.col(f"`{start}`").cast("binary")),
                                                F.lit(buckets)))
    released = bucketed.groupBy("__bucket").applyInArrow(release,
                                                         _counters_schema(CDC_COUNTERS))
    observed = released.observe("debezium_bridge_cdc",
                                *(F.sum(f"n_{c}").alias(c) for c in CDC_COUNTERS))
    return observed.where(F.col("kind") != "stats").drop(*(f"n_{c}" for c in CDC_COUNTERS))


class NetConfig(Settings):
    """What :func:`net_changes` produces."""

    outputs: tuple[str, ...] = ("canonical",)
    """Output formats: ``rows`` (the ``fn_cdc_get_net_changes`` shape, JSON) or any of
    :func:`translate_cdc`'s."""
    buckets: int = Field(64, ge=1, le=100_000)
    """Groups of keys processed together."""
    ordinals: dict[str, dict[str, int]] = {}
    """Per ``table_id`` the captured columns' ``column_ordinal`` (for ``rows`` update masks;
    default: the image's column order)."""


NET_COUNTERS = ("net_out",)


def net_changes(changes: Any, window: Window | None = None, mode: NetMode = "all",
                config: NetConfig | None = None,
                output_settings: OutputSettings | None = None) -> Any:
    """Net changes of ``window`` from canonical output rows (module docstring)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if mode not in NET_MODES:
        raise ConfigError(f"unknown net mode {mode!r}")
    config = config or NetConfig()
    window = window or Window()
    settings = output_settings or OutputSettings()
    buckets = config.buckets
    formats = [f for f in config.outputs if f != "rows"]
    for f in formats:
        OutputFormat(f)
    want_rows = "rows" in config.outputs
    ordinals = config.ordinals

    def buckets_of(value):  # type: ignore[no-untyped-def]  # (no hints: Spark reads them)
        record = decode(value)
        keys = [record.key]
        if record.key_changed and record.old_key is not None:
            keys.append(record.old_key)
        return sorted({_bucket(record.table_id, k, buckets) for k in keys})

    buckets_udf = F.udf(buckets_of, T.ArrayType(T.IntegerType()))
    canonical = changes.where((F.col("kind") == "change") & (F.col("format") == "canonical"))
    pieces = canonical.select(F.explode(buckets_udf(F.col("value"))).alias("__bucket"),
                              F.col("seq"), F.col("value"))

    def reduce(table: Any) -> Any:
        leave_sigint_to_the_driver()
        bucket = table.column("__bucket")[0].as_py()
        records = sorted((decode(v) for v in table.column("value").to_pylist()),
                         key=lambda r: (r.seq, r.event_id))
        net = NetChanges(window, mode)
        net.add_many(records)
        mine = [r for r in net.result() if _bucket(r.table_id, r.key, buckets) == bucket]
        output = Output(formats, settings) if formats else None
        out: list[OutputRecord] = []
        for record in mine:
            if output is not None:
                out.extend(output.encode(record))
            if want_rows:
                for row in net_rows([record], mode, ordinals):
                    out.append(OutputRecord("change", "rows", record.event_id, "", None,
                                            _json(row), (), None, record.table_id,
                                            record.op, record.seq, record.commit_ts,
                                            record.lineage[-1].topic, record.lineage[-1].partition,
                                            record.lineage[-1].offset))
        return _table(_output_rows(out), (len(mine),), NET_COUNTERS)

    released = pieces.groupBy("__bucket").applyInArrow(reduce, _counters_schema(NET_COUNTERS))
    observed = released.observe("debezium_bridge_net",
                                *(F.sum(f"n_{c}").alias(c) for c in NET_COUNTERS))
    return observed.where(F.col("kind") != "stats").drop(*(f"n_{c}" for c in NET_COUNTERS))


def decode(value: bytes) -> ChangeRecord:
    """A canonical record from its JSON (output rows' ``value``)."""
    return _record_decoder.decode(value)


_record_decoder = msgspec.json.Decoder(ChangeRecord)


def _bucket(table_id: str, key: Mapping[str, Any], buckets: int) -> int:
    return zlib.crc32(table_id.encode() + b"\x00" + key_identity(key)) % buckets
