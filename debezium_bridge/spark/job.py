"""The Structured Streaming job: Kafka → :func:`translate` → sinks, with a checkpoint.

Run it with the ``spark-submit`` that ships with pyspark::

    spark-submit --master 'local[*]' "$(python -c 'import debezium_bridge.spark.job as j;
    print(j.__file__)')" --config job.yaml

or ``debezium-bridge spark --config job.yaml``. Settings come from the config file (YAML, JSON or
properties), ``DEBEZIUM_BRIDGE_SPARK_*`` environment variables for the top-level keys and
``-X key=value`` for Kafka source options; unknown keys are rejected.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import msgspec

from debezium_bridge.config import env_settings, load_config_file, mask, mask_url, parse_overrides
from debezium_bridge.errors import BridgeError, ConfigError
from debezium_bridge.spark.sinks import FILE_FORMATS, SinkConfig, batch_writer
from debezium_bridge.spark.translate import (
    DECODE_COUNTERS,
    INFORMATIONAL_COUNTERS,
    METRICS_NAME,
    RELEASE_COUNTERS,
    TranslateConfig,
    translate,
)

log = logging.getLogger("debezium_bridge.spark")


_PYTHON_SOURCE_OPTIONS = frozenset({
    "subscribe", "subscribepattern", "startingoffsets", "endingoffsets", "maxoffsetspertrigger",
    "endoffsetprobe", "failondataloss"})
_BUILTIN_ONLY_OPTIONS = frozenset({
    "assign", "includeheaders", "minpartitions", "groupidprefix", "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries", "fetchoffset.retryintervalms", "minoffsetspertrigger",
    "maxtriggerdelay", "startingtimestamp", "startingoffsetsbytimestamp", "endingtimestamp",
    "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "maxrecordsperpartition"})


class SourceConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The Kafka source: the provider and the options of Spark's ``kafka`` format."""

    provider: Literal["auto", "kafka", "python"] = "auto"
    options: dict[str, str] = msgspec.field(default_factory=dict)

    def __post_init__(self) -> None:
        lowered = {k.lower(): v for k, v in self.options.items()}
        if ("subscribe" in lowered) == ("subscribepattern" in lowered):
            raise ConfigError("source.options needs exactly one of subscribe, subscribePattern")
        if "kafka.bootstrap.servers" not in lowered:
            raise ConfigError("source.options needs kafka.bootstrap.servers")
        known = _PYTHON_SOURCE_OPTIONS | (_BUILTIN_ONLY_OPTIONS if self.provider != "python"
                                          else frozenset())
        unknown = sorted(k for k in self.options
                         if not k.lower().startswith("kafka.") and k.lower() not in known)
        if unknown:
            raise ConfigError(f"unknown source option(s) {', '.join(unknown)} for provider "
                              f"{self.provider}; known: {', '.join(sorted(known))}, kafka.*")
        if self.provider == "python" and lowered.get("failondataloss", "true") != "true":
            raise ConfigError("the python provider always fails on data loss "
                              "(failOnDataLoss must be true)")
        limit = lowered.get("maxoffsetspertrigger")
        if limit is not None and (not limit.isdigit() or int(limit) < 1):
            raise ConfigError(f"maxOffsetsPerTrigger must be a positive integer, not {limit!r}")


class JobConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """``job.yaml``."""

    source: SourceConfig
    translate: TranslateConfig = msgspec.field(default_factory=TranslateConfig)
    sinks: list[SinkConfig]
    checkpoint: str
    trigger: Literal["available_now", "processing_time"] = "processing_time"
    trigger_interval: str = "10 seconds"
    query_name: str = "debezium-bridge"
    master: str = "local[*]"
    """Used when the job creates its own session (ignored under spark-submit --master)."""
    spark_conf: dict[str, str] = msgspec.field(default_factory=dict)
    spark_log_level: str = "WARN"
    counters_json: str | None = None
    """Write the run's counters here when the query stops."""

    def __post_init__(self) -> None:
        if not self.sinks:
            raise ConfigError("at least one sink is needed")

    def masked(self) -> dict[str, Any]:
        """The config as builtins with secrets masked (for logs)."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        data["source"]["options"] = mask(self.source.options)
        data["translate"]["registry"] = mask(self.translate.registry)
        data["translate"]["schema_registry"] = mask_url(self.translate.schema_registry)
        data["spark_conf"] = mask(self.spark_conf)
        for sink in data["sinks"]:
            sink["options"] = mask(sink["options"])
        return data


def load_job_config(path: str | None, overrides: Sequence[str] = ()) -> JobConfig:
    """File, then ``DEBEZIUM_BRIDGE_SPARK_*`` env for top-level scalars, then ``-X`` options."""
    data: dict[str, Any] = load_config_file(path) if path else {}
    env = env_settings([f"spark_{k}" for k in ("checkpoint", "trigger", "trigger_interval",
                                                "master", "query_name", "counters_json")])
    data |= {k[6:]: v for k, v in env.items()}
    extra = parse_overrides(list(overrides))
    if extra:
        source = dict(data.get("source") or {})
        source["options"] = dict(source.get("options") or {}) | extra
        data["source"] = source
    try:
        return msgspec.convert(data, JobConfig, strict=False)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"invalid job configuration: {exc}") from exc


class RunCounters:
    """Counters of this run, summed over micro-batches from the observed metrics."""

    def __init__(self) -> None:
        self.values = dict.fromkeys(DECODE_COUNTERS + RELEASE_COUNTERS, 0)
        self.batches = 0
        self.state_rows = 0
        self.state_bytes = 0
        self.watermark: str | None = None

    def add(self, progress: dict[str, Any]) -> None:
        metrics = progress.get("observedMetrics") or {}
        for name in (f"{METRICS_NAME}_decode", f"{METRICS_NAME}_release"):
            row = metrics.get(name)
            if row is not None:
                for key, value in row.asDict().items():
                    self.values[key] += value or 0
        operators = progress.get("stateOperators") or []
        self.state_rows = sum(op.get("numRowsTotal", 0) for op in operators)
        self.state_bytes = sum(op.get("memoryUsedBytes", 0) for op in operators)
        self.watermark = (progress.get("eventTime") or {}).get("watermark", self.watermark)
        self.batches += 1

    @property
    def balanced(self) -> bool:
        v = self.values
        return v["records_in"] == sum(v[k] for k in DECODE_COUNTERS[1:] + RELEASE_COUNTERS
                                      if k not in INFORMATIONAL_COUNTERS)

    def as_dict(self) -> dict[str, Any]:
        return {**self.values, "balanced": self.balanced, "batches": self.batches,
                "state_buckets": self.state_rows, "state_bytes": self.state_bytes,
                "watermark": self.watermark}

    def summary(self) -> str:
        v = self.values
        return (f"records_in={v['records_in']} = changes_out={v['changes_out']} + merged="
                f"{v['merged']} + duplicates={v['duplicates']} + side_records={v['side_records']}"
                f" + tombstones={v['tombstones']} + dead_letters={v['dead_letters']} + skipped="
                f"{v['skipped']} + pending={v['pending']} "
                f"[{'balanced' if self.balanced else 'NOT BALANCED'}] late={v['late']} "
                f"encode_errors={v['encode_errors']}; "
                f"state {self.state_rows} buckets / {self.state_bytes} bytes, "
                f"watermark {self.watermark}")


def _session(config: JobConfig) -> Any:
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(config.query_name)
    if not SparkConf().contains("spark.master"):  # spark-submit --master wins
        builder = builder.master(config.master)
    conf = {"spark.sql.session.timeZone": "UTC", "spark.ui.showConsoleProgress": "false",
            "spark.sql.execution.pyspark.python": sys.executable} | config.spark_conf
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(config.spark_log_level)
    return session


def _local(path: str) -> Path | None:
    if "://" not in path:
        return Path(path)
    return Path(path[7:]) if path.startswith("file://") else None


def _check_sink_paths(config: JobConfig) -> None:
    """File sinks name their batches by batch id, so a new checkpoint must not write into a
    directory that holds another checkpoint's batches (they would be overwritten)."""
    checkpoint = _local(config.checkpoint)
    if checkpoint is None or any((checkpoint / "commits").glob("[0-9]*")):
        return
    for sink in config.sinks:
        path = _local(sink.path) if sink.path and sink.kind in FILE_FORMATS else None
        if path is not None and any(path.glob("batch_id=*")):
            raise ConfigError(f"sink path {path} holds batches of another checkpoint; "
                              f"{config.checkpoint} is new (use an empty path per checkpoint)")


def run(config: JobConfig, spark: Any = None) -> RunCounters:
    """Start the query, wait for it to stop (``available_now``) or be stopped; return counters."""
    from pyspark.errors import StreamingQueryException

    from debezium_bridge.spark.source import builtin_kafka_available, kafka_reader

    _check_sink_paths(config)
    spark = spark or _session(config)
    log.info("debezium-bridge spark job: %s", json.dumps(config.masked()))
    counters = RunCounters()
    frame = kafka_reader(spark, config.source.options, provider=config.source.provider).load()
    out = translate(frame, config.translate)
    builtin = builtin_kafka_available(spark)
    writer = out.writeStream.queryName(config.query_name) \
        .option("checkpointLocation", config.checkpoint) \
        .foreachBatch(batch_writer(config.sinks, builtin_kafka=builtin))
    if config.trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=config.trigger_interval)
    query = writer.start()
    seen = -1

    def collect() -> None:
        nonlocal seen
        for progress in query.recentProgress:
            if progress["batchId"] > seen:
                seen = progress["batchId"]
                counters.add(progress)
                log.info("batch %s: %s", seen, counters.summary())

    try:
        while query.isActive:
            try:
                query.awaitTermination(1)
            except StreamingQueryException as exc:
                raise BridgeError(f"streaming query failed: {exc}") from exc
            collect()
    finally:
        if query.isActive:
            query.stop()
        collect()
    log.info("done: %s", counters.summary())
    if config.counters_json:
        with open(config.counters_json, "w") as handle:
            json.dump(counters.as_dict(), handle)
            handle.write("\n")
    return counters


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="debezium-bridge spark",
                                     description="Run the Spark streaming translation job.")
    parser.add_argument("--config", required=True, help="job.yaml (YAML, JSON or properties)")
    parser.add_argument("-X", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="Kafka source option, e.g. "
                        "-X kafka.bootstrap.servers=host:9092 (repeatable)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        config = load_job_config(args.config, args.overrides)
        counters = run(config)
    except ConfigError as exc:
        sys.stderr.write(f"debezium-bridge: configuration error: {exc}\n")
        return 2
    except BridgeError as exc:
        sys.stderr.write(f"debezium-bridge: error: {exc}\n")
        return 1
    sys.stderr.write(f"debezium-bridge: {counters.summary()}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
