"""The Structured Streaming job: Kafka → :func:`translate` → sinks, with a checkpoint.

Run it with the ``spark-submit`` that ships with pyspark::

    spark-submit --master 'local[*]' "$(python -c 'import debezium_bridge.spark.job as j;
    print(j.__file__)')" --config job.yaml

or ``debezium-bridge spark --config job.yaml``. Settings come from the config file (YAML, JSON or
properties), ``DEBEZIUM_BRIDGE_SPARK_*`` environment variables for the top-level keys and
``-X key=value`` for Kafka source options; unknown keys are rejected.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from debezium_bridge.config import ClientSettings, RunnerSettings, Settings, load_config_file
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


class SourceConfig(Settings):
    """The Kafka source: the provider and the options of Spark's ``kafka`` format."""

    provider: Literal["auto", "kafka", "python"] = "auto"
    """``kafka``: Spark's built-in source (spark-sql-kafka on the classpath); ``python``: this
    package's data source over confluent-kafka; ``auto``: the built-in one when available."""
    options: ClientSettings = {}
    """Options of Spark's ``kafka`` source: ``subscribe`` or ``subscribePattern``,
    ``startingOffsets``, ``endingOffsets``, ``maxOffsetsPerTrigger``, ``endOffsetProbe``
    (python provider), and client settings as ``kafka.<librdkafka name>`` (``-X``)."""

    @model_validator(mode="after")
    def _check_options(self) -> Self:
        lowered = {k.lower(): v for k, v in self.options.items()}
        if ("subscribe" in lowered) == ("subscribepattern" in lowered):
            raise ValueError("source.options needs exactly one of subscribe, subscribePattern")
        if "kafka.bootstrap.servers" not in lowered:
            raise ValueError("source.options needs kafka.bootstrap.servers")
        known = _PYTHON_SOURCE_OPTIONS | (_BUILTIN_ONLY_OPTIONS if self.provider != "python"
                                          else frozenset())
        unknown = sorted(k for k in self.options
                         if not k.lower().startswith("kafka.") and k.lower() not in known)
        if unknown:
            raise ValueError(f"unknown source option(s) {', '.join(unknown)} for provider "
                              f"{self.provider}; known: {', '.join(sorted(known))}, kafka.*")
        if self.provider == "python" and lowered.get("failondataloss", "true") != "true":
            raise ValueError("the python provider always fails on data loss "
                              "(failOnDataLoss must be true)")
        limit = lowered.get("maxoffsetspertrigger")
        if limit is not None and (not limit.isdigit() or int(limit) < 1):
            raise ValueError(f"maxOffsetsPerTrigger must be a positive integer, not {limit!r}")
        return self


class JobConfig(RunnerSettings):
    """The job's configuration (``job.yaml``; ``DEBEZIUM_BRIDGE_SPARK_<NAME>`` variables, nested
    groups with ``__``; flags; ``-X`` for Kafka source options)."""

    model_config = {"env_prefix": "DEBEZIUM_BRIDGE_SPARK_"}
    client_settings_field = "source.options"
    client_settings_help = ("Kafka source option, e.g. -X kafka.bootstrap.servers=host:9092 "
                            "(repeatable)")

    source: SourceConfig = Field(default_factory=SourceConfig)
    """The Kafka source."""
    translate: TranslateConfig = Field(default_factory=TranslateConfig)
    """What the job decodes and writes (see ``TranslateConfig``)."""
    sinks: list[SinkConfig] = []
    """Where the output rows go (at least one)."""
    checkpoint: str = ""
    """Checkpoint directory of the query (offsets, state): a restart resumes from it."""
    trigger: Literal["available_now", "processing_time"] = "processing_time"
    """``available_now``: process what the topics hold now, then stop; ``processing_time``:
    run continuously, one micro-batch every ``trigger_interval``."""
    trigger_interval: str = "10 seconds"
    """Micro-batch interval of the ``processing_time`` trigger (a Spark interval)."""
    query_name: str = "debezium-bridge"
    """Name of the streaming query (and of the Spark application the job creates)."""
    master: str = "local[*]"
    """Spark master when the job creates its own session (ignored under spark-submit
    --master)."""
    spark_conf: ClientSettings = {}
    """Spark settings for the session the job creates (``spark.sql.shuffle.partitions``, ...)."""
    spark_log_level: str = "WARN"
    """Log level of Spark's own logs."""
    counters_json: str | None = None
    """Write the run's counters here when the query stops."""
    log_level: str = "INFO"
    """Level of the job's own log lines."""

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if not self.sinks:
            raise ValueError("at least one sink is needed")
        if not self.checkpoint:
            raise ValueError("checkpoint is needed")
        if not self.source.options:
            raise ValueError("source.options are needed (subscribe, kafka.bootstrap.servers)")
        return self


def load_job_config(path: str | None, overrides: Sequence[str] = ()) -> JobConfig:
    """The job's configuration from a file, ``DEBEZIUM_BRIDGE_SPARK_*`` variables and ``-X``
    source options (library use; the command line goes through :func:`main`)."""
    data = load_config_file(path, JobConfig) if path else {}
    return JobConfig.build(data, overrides)


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
    try:
        config = JobConfig.from_args(
            sys.argv[1:] if argv is None else argv, prog="debezium-bridge spark",
            description="Run the Spark Structured Streaming translation job.")
    except ConfigError as exc:
        sys.stderr.write(f"debezium-bridge: configuration error: {exc}\n")
        return 2
    logging.basicConfig(level=config.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
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
