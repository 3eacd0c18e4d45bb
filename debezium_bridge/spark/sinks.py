"""Where the Spark job writes, and with which delivery guarantee.

Every sink runs inside one ``foreachBatch`` so changes and dead letters of a micro-batch are
written by one query, and every output row carries a deterministic ``event_id`` (the same for
a replayed micro-batch), so downstream consumers can deduplicate.

- **files** (``parquet``, ``json``, ``orc``, ``csv``, ``text``): exactly-once. Batch *n* is
  written to ``<path>/batch_id=<n>`` with mode overwrite, so the re-run of a batch after a
  crash replaces its partial output. Read the directory through Spark (or skip ``_``/``.``
  paths, as Spark does).
- **kafka**: at-least-once. Spark's built-in Kafka writer when spark-sql-kafka is on the
  classpath, else confluent-kafka producers per Spark partition (idempotent, ``acks=all``). A
  replayed batch is produced again; deduplicate on the ``debezium_bridge.event_id`` header.
- **console**: at-least-once, for humans: one line per output row.
- **foreach_batch**: what the hook does; ``module:function`` is called with
  ``(changes, dead_letters, batch_id)``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, Self

from pydantic import model_validator

from debezium_bridge.config import ClientSettings, Settings
from debezium_bridge.errors import ConfigError

SinkKind = Literal["parquet", "json", "orc", "csv", "text", "kafka", "console", "foreach_batch"]
Selects = Literal["changes", "dead_letters", "all"]
FILE_FORMATS = ("parquet", "json", "orc", "csv", "text")


class SinkConfig(Settings):
    """One output of the job (an item of ``sinks``)."""

    kind: SinkKind
    """Where to write: a file format (exactly-once), ``kafka`` (at-least-once), ``console`` or
    ``foreach_batch`` (your function)."""
    rows: Selects = "changes"
    """Which output rows: change rows, dead-letter rows, or both."""
    formats: list[str] | None = None
    """Only change rows in these output formats (``canonical``, ``ces``…); default all."""
    path: str | None = None
    """Directory for file sinks."""
    topic: str | None = None
    """Kafka sinks: a fixed topic instead of each row's ``topic`` column."""
    options: ClientSettings = {}
    """Writer options; for Kafka the client settings as ``kafka.<librdkafka name>``."""
    function: str | None = None
    """``module:function`` for ``foreach_batch``."""

    @model_validator(mode="after")
    def _complete(self) -> Self:
        if self.kind in FILE_FORMATS and not self.path:
            raise ValueError(f"a {self.kind} sink needs a path")
        if self.kind == "kafka" and not any(k == "kafka.bootstrap.servers" for k in self.options):
            raise ValueError("a kafka sink needs options.kafka.bootstrap.servers")
        if self.kind == "foreach_batch" and (not self.function or ":" not in self.function):
            raise ValueError("a foreach_batch sink needs function: 'module:function'")
        return self


def _file_sink(config: SinkConfig, frame: Any, batch_id: int) -> None:
    data = frame
    if config.kind in ("csv", "text"):
        from pyspark.sql import functions as F

        if config.kind == "text":
            data = frame.select(F.col("value").cast("string").alias("value"))
        else:
            data = frame.select(*(F.col(c).cast("string") if c in ("key", "value") else F.col(c)
                                  for c in frame.columns if c != "headers"))
    data.write.mode("overwrite").options(**config.options).format(config.kind) \
        .save(f"{config.path}/batch_id={batch_id}")


def _console_sink(frame: Any, batch_id: int) -> None:
    rows = frame.select("kind", "topic", "key", "value").collect()
    out = sys.stdout
    out.write(f"-- batch {batch_id}: {len(rows)} rows\n")
    for row in rows:
        key = row["key"].decode("utf-8", "replace") if row["key"] is not None else "null"
        value = row["value"].decode("utf-8", "replace") if row["value"] is not None else "null"
        out.write(f"{row['kind']}\t{row['topic']}\t{key}\t{value}\n")
    out.flush()


def _produce_partition(settings: Mapping[str, str], topic: str | None
                       ) -> Callable[[Iterator[Any]], None]:
    def write(rows: Iterator[Any]) -> None:
        from debezium_bridge.clients.kafka import produce
        from debezium_bridge.model.records import RawRecord

        records = (RawRecord(topic or row["topic"], 0, None, None, row["key"], row["value"],
                             tuple((h["key"], h["value"]) for h in row["headers"] or ()))
                   for row in rows)
        produce(settings["bootstrap.servers"], records,
                {"enable.idempotence": "true", "acks": "all"} | dict(settings),
                keep_partitions=False)

    return write


def _kafka_sink(config: SinkConfig, frame: Any, builtin: bool) -> None:
    if builtin:
        columns = ["key", "value", "headers"] + ([] if config.topic else ["topic"])
        writer = frame.select(*columns).write.format("kafka").options(**config.options)
        if config.topic:
            writer = writer.option("topic", config.topic)
        writer.save()
        return
    settings = {k[6:]: v for k, v in config.options.items() if k.startswith("kafka.")}
    frame.foreachPartition(_produce_partition(settings, config.topic))


def _hook(function: str) -> Callable[[Any, Any, int], None]:
    module, _, name = function.partition(":")
    try:
        hook: Callable[[Any, Any, int], None] = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"foreach_batch function {function!r} not found: {exc}") from exc
    return hook


class Stopping(Exception):
    """Raised by the ``foreachBatch`` function instead of starting a micro-batch once the job
    was asked to stop: the query ends without running or committing it."""


def batch_writer(sinks: list[SinkConfig], *, builtin_kafka: bool,
                 stopping: Callable[[], bool] | None = None) -> Callable[[Any, int], None]:
    """The ``foreachBatch`` function that writes one micro-batch to every sink; once
    ``stopping()`` is true it declines to start another (:class:`Stopping`)."""
    from pyspark.sql import functions as F

    hooks = {s.function: _hook(s.function) for s in sinks if s.function}

    def write(batch: Any, batch_id: int) -> None:
        if stopping is not None and stopping():
            raise Stopping(f"the job is stopping: micro-batch {batch_id} is left for the "
                           f"next run")
        batch = batch.persist()
        try:
            selected = {
                "changes": batch.where(F.col("kind") == "change"),
                "dead_letters": batch.where(F.col("kind") == "dead_letter"),
                "all": batch,
            }
            for sink in sinks:
                frame = selected[sink.rows]
                if sink.formats is not None and sink.rows != "dead_letters":
                    frame = frame.where(F.col("format").isin(sink.formats)
                                        | (F.col("kind") == "dead_letter"))
                if sink.kind in FILE_FORMATS:
                    _file_sink(sink, frame, batch_id)
                elif sink.kind == "console":
                    _console_sink(frame, batch_id)
                elif sink.kind == "kafka":
                    _kafka_sink(sink, frame, builtin_kafka)
                elif sink.function is not None:
                    hooks[sink.function](selected["changes"], selected["dead_letters"], batch_id)
        finally:
            batch.unpersist()

    return write
