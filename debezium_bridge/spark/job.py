"""The Structured Streaming job: Kafka → :func:`translate` → sinks, with a checkpoint.

Run it with the ``spark-submit`` that ships with pyspark::

    spark-submit --master 'local[*]' "$(python -c 'import debezium_bridge.spark.job as j;
    print(j.__file__)')" --config job.yaml

or ``debezium-bridge spark --config job.yaml``. Settings come from the config file (YAML, JSON or
properties), ``DEBEZIUM_BRIDGE_SPARK_*`` environment variables for the top-level keys and
``-X key=value`` for Kafka source options; unknown keys are rejected.

Before the query starts, the driver asks the broker for the partitions of every subscribed topic
(and, for ``Trigger.AvailableNow``, where this run ends) and hands that to ``translate``
(:func:`~debezium_bridge.spark.source.stream_topology`). SIGINT and SIGTERM stop the query
cleanly: the current micro-batch is abandoned (its offsets are not committed, so a restart
re-runs it), the counters summary is printed and the exit status is 130 / 143.

Exit status: 0 done, 1 the query failed, 2 configuration error (or pyspark missing), 4 a service
(Kafka broker, schema registry) unreachable after retries, 130 / 143 stopped by SIGINT / SIGTERM.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Self

from pydantic import BeforeValidator, Field, model_validator

from debezium_bridge.config import (
    ClientSettings,
    LogLevel,
    RunnerSettings,
    Settings,
    load_config_file,
)
from debezium_bridge.errors import BridgeError, ConfigError, ServiceError
from debezium_bridge.spark.sinks import FILE_FORMATS, SinkConfig, batch_writer
from debezium_bridge.spark.translate import (
    DECODE_COUNTERS,
    INFORMATIONAL_COUNTERS,
    METRICS_NAME,
    RELEASE_COUNTERS,
    TranslateConfig,
    run_with_known_end,
    translate,
)

if TYPE_CHECKING:
    from debezium_bridge.core.windowed import Topology

log = logging.getLogger("debezium_bridge.spark")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_SERVICE = 0, 1, 2, 4
EXIT_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}
SPARK_EXTRA = "pip install 'debezium-bridge[spark]'"
SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"


_PYTHON_SOURCE_OPTIONS = frozenset({
    "subscribe", "subscribepattern", "startingoffsets", "endingoffsets", "maxoffsetspertrigger",
    "endoffsetprobe", "failondataloss"})
_BUILTIN_ONLY_OPTIONS = frozenset({
    "assign", "includeheaders", "minpartitions", "groupidprefix", "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries", "fetchoffset.retryintervalms", "minoffsetspertrigger",
    "maxtriggerdelay", "startingtimestamp", "startingoffsetsbytimestamp", "endingtimestamp",
    "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy", "maxrecordsperpartition"})


SparkLogLevel = Annotated[
    Literal["ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"],
    BeforeValidator(lambda value: value.upper() if isinstance(value, str) else value)]
"""A level of Spark's own logs (``SparkContext.setLogLevel``, any case)."""


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
    """Spark settings for the session the job creates. Without ``spark.sql.shuffle.partitions``
    here or in ``spark-submit --conf``, the job uses min(``translate.buckets``, the session's
    default parallelism, i.e. the cores of ``local[*]``) instead of Spark's 200; a checkpoint
    keeps the value its query started with (its state is partitioned by it)."""
    spark_log_level: SparkLogLevel = "WARN"
    """Log level of Spark's own logs."""
    counters_json: str | None = None
    """Write the run's counters here when the query stops."""
    log_level: LogLevel = "INFO"
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
                f" + tombstones={v['tombstones']} + dead_letters={v['dead_letters']}"
                f" + replay_mismatches={v['replay_mismatches']} + skipped={v['skipped']}"
                f" + pending={v['pending']} "
                f"[{'balanced' if self.balanced else 'NOT BALANCED'}] late={v['late']} "
                f"encode_errors={v['encode_errors']}; released by position="
                f"{v['released_by_position']} transaction={v['released_by_transaction']} "
                f"end={v['released_by_end']} watermark={v['released_by_watermark']}; "
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
    if SHUFFLE_PARTITIONS not in config.spark_conf and not SparkConf().contains(SHUFFLE_PARTITIONS):
        session.conf.set(SHUFFLE_PARTITIONS, str(default_shuffle_partitions(
            config.translate.buckets, session.sparkContext.defaultParallelism)))
        log.info("%s=%s (min of translate.buckets and the default parallelism; a checkpoint "
                 "keeps the value it started with)", SHUFFLE_PARTITIONS,
                 session.conf.get(SHUFFLE_PARTITIONS))
    return session


def default_shuffle_partitions(buckets: int, parallelism: int) -> int:
    """State partitions for the release step: more than the state buckets would only add empty
    tasks, more than the cores only scheduling (each costs a state store load per batch)."""
    return max(1, min(buckets, parallelism))


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


def committed_offsets(spark: Any, checkpoint: str) -> dict[str, dict[str, int]] | None:
    """The source offsets of the checkpoint's last committed micro-batch (where a restarted
    query resumes), or ``None`` for a new checkpoint. Read through Hadoop's FileSystem, so any
    checkpoint location Spark can use works."""
    jvm = spark._jvm
    hadoop = jvm.org.apache.hadoop.fs
    root = hadoop.Path(checkpoint)
    fs = root.getFileSystem(spark._jsc.hadoopConfiguration())
    commits = hadoop.Path(root, "commits")
    if not fs.exists(commits):
        return None
    batches = sorted((int(status.getPath().getName()) for status in fs.listStatus(commits)
                      if status.getPath().getName().isdigit()), reverse=True)
    for batch in batches:
        path = hadoop.Path(root, f"offsets/{batch}")
        if not fs.exists(path):
            continue
        stream = fs.open(path)
        try:
            text = jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()
        lines = text.splitlines()  # "v1", the batch metadata, one line per source
        if len(lines) < 3 or lines[2] in ("", "-"):
            return None
        offsets = json.loads(lines[2])
        return {str(t): {str(p): int(o) for p, o in parts.items()}
                for t, parts in offsets.items()}
    return None


def _topology(spark: Any, config: JobConfig, builtin: bool
              ) -> tuple[Topology | None, dict[str, str]]:
    """The partitions ``translate`` waits for (and the run's end for ``available_now``), and the
    source options (the Python source gets the same end as its target)."""
    from debezium_bridge.spark.source import AVAILABLE_NOW_END, stream_topology

    options = dict(config.source.options)
    available_now = config.trigger == "available_now"
    committed = None
    if available_now:
        try:
            committed = committed_offsets(spark, config.checkpoint)
        except Exception as exc:  # unreadable: assume every partition starts at its earliest
            log.warning("could not read the checkpoint's committed offsets (%s): this run "
                        "waits for every partition's last message", str(exc).splitlines()[0])
            committed = {}
    try:
        topology, target = stream_topology(options, available_now=available_now,
                                           committed=committed)
    except (ConfigError, ServiceError) as exc:
        if not builtin:
            raise
        log.warning("partitions not known to the driver (%s): waiting deletes and creates are "
                    "released by transaction END records and the watermark only", exc)
        return None, options
    if target is not None and not builtin:
        options[AVAILABLE_NOW_END] = json.dumps(target)
    log.info("partitions: %s%s", json.dumps(topology.partitions),
             f"; this run reads up to {json.dumps(target)}" if target is not None else "")
    return topology, options


class _Stop:
    """SIGINT/SIGTERM while the job runs. The first asks for a graceful stop: the micro-batch
    that is running finishes (and is committed), the next one does not start. A second one
    (a second Ctrl-C) stops the query at once (the running batch is abandoned uncommitted; a
    restart re-runs it); a third ends the process."""

    SAME_SIGNAL_S = 1.0
    """Copies of one signal (a terminal's Ctrl-C reaches the driver and, under spark-submit,
    the JVM, which forwards it) arrive within this; they count once."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.now = False
        self._at = 0.0

    def __call__(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.request(signum)
        elif time.monotonic() - self._at < self.SAME_SIGNAL_S:
            return
        elif not self.now:
            self.now = True
            self._at = time.monotonic()
            sys.stderr.write("debezium-bridge: stopping at once (the running micro-batch is "
                             "abandoned, a restart re-runs it)\n")
        elif _in_main_thread():
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        else:  # forwarded by the JVM (a py4j thread)
            os._exit(128 + signum)

    def request(self, signum: int) -> None:
        """A graceful stop (idempotent)."""
        if self.signum is None:
            self.signum = signum
            self._at = time.monotonic()
            sys.stderr.write(f"debezium-bridge: {signal.Signals(signum).name}: stopping after "
                             f"the running micro-batch (again to stop at once)\n")


class _JvmSignalHandler:
    """``sun.misc.SignalHandler`` in Python (a py4j callback): the JVM hands SIGINT/SIGTERM to
    the driver instead of shutting Spark down under the running query."""

    def __init__(self, stop: _Stop) -> None:
        self.stop = stop

    def handle(self, sig: Any) -> None:
        self.stop(signal.Signals[f"SIG{sig.getName()}"], None)

    class Java:
        implements: ClassVar[list[str]] = ["sun.misc.SignalHandler"]


@contextmanager
def _jvm_signals_to(stop: _Stop, spark: Any) -> Iterator[None]:
    """Under spark-submit the JVM is the Python driver's parent: a terminal's Ctrl-C reaches
    both and a supervisor's SIGTERM only the JVM, whose shutdown hooks would stop Spark under
    the running query (pages of Java stack traces, no summary). Inside the block the JVM
    forwards both signals to ``stop`` (its previous handlers are restored afterwards)."""
    from pyspark.java_gateway import ensure_callback_server_started

    jvm = spark._jvm
    previous: dict[str, Any] = {}
    handler = _JvmSignalHandler(stop)
    try:
        ensure_callback_server_started(spark.sparkContext._gateway)
        for name in ("INT", "TERM"):
            previous[name] = jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), handler)
    except Exception as exc:  # a JVM without sun.misc.Signal: Spark's own shutdown then
        log.debug("the JVM keeps its signal handlers: %s", exc)
    try:
        yield
    finally:
        for name, old in previous.items():
            try:
                jvm.sun.misc.Signal.handle(jvm.sun.misc.Signal(name), old)
            except Exception as exc:  # the JVM is going down
                log.debug("could not restore the JVM's SIG%s handler: %s", name, exc)


@contextmanager
def _signals_stop(stop: _Stop) -> Iterator[None]:
    """SIGINT and SIGTERM go to ``stop`` inside the block (main thread only). Installed again
    once the session exists: pyspark's SparkContext installs its own SIGINT handler."""
    if not _in_main_thread():
        yield
        return
    previous = {s: signal.signal(s, stop) for s in EXIT_SIGNAL}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


_SERVICE_ERROR = re.compile(r"debezium_bridge\.errors\.ServiceError: (.*)")


def _query_failure(exc: BaseException) -> BridgeError:
    """A failed query as one of the package's errors: a worker's ServiceError (a service that
    is down) keeps its message; anything else says what failed first."""
    text = str(exc)
    found = _SERVICE_ERROR.search(text)
    if found:
        return ServiceError(found.group(1).strip())
    return BridgeError(f"streaming query failed: {text}")


def run(config: JobConfig, spark: Any = None, *, stop: _Stop | None = None) -> RunCounters:
    """Start the query, wait for it to stop (``available_now``) or be stopped; return counters.

    ``stop``: SIGINT/SIGTERM (main thread) set it while the job runs; the query is then
    stopped and the counters so far returned."""
    _check_sink_paths(config)
    stop = stop or _Stop()
    with _signals_stop(stop):
        spark = spark or _session(config)
    with _signals_stop(stop):
        if not _in_main_thread():
            return _run(config, spark, stop)
        with _jvm_signals_to(stop, spark):
            return _run(config, spark, stop)


def _run(config: JobConfig, spark: Any, stop: _Stop) -> RunCounters:
    from debezium_bridge.spark.source import builtin_kafka_available, kafka_reader

    log.info("debezium-bridge spark job: %s", json.dumps(config.masked()))
    counters = RunCounters()
    if stop.signum is not None:
        return counters
    builtin = config.source.provider == "kafka" or (config.source.provider == "auto"
                                                    and builtin_kafka_available(spark))

    def declines() -> bool:
        """``foreachBatch`` asks before it starts a batch (in py4j's callback thread)."""
        if stop.signum is None:
            return False
        _quiet(spark)
        return True

    topology, options = _topology(spark, config, builtin)
    frame = kafka_reader(spark, options, provider="kafka" if builtin else "python").load()
    out = translate(frame, config.translate, topology)
    writer = out.writeStream.queryName(config.query_name) \
        .option("checkpointLocation", config.checkpoint) \
        .foreachBatch(batch_writer(config.sinks, builtin_kafka=builtin, stopping=declines))
    if config.trigger == "available_now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=config.trigger_interval)
    with run_with_known_end(spark, topology):
        _watch(writer.start(), spark, stop, counters)
    log.info("done: %s", counters.summary())
    if config.counters_json:
        with open(config.counters_json, "w") as handle:
            json.dump(counters.as_dict(), handle)
            handle.write("\n")
    return counters


def _watch(query: Any, spark: Any, stop: _Stop, counters: RunCounters) -> None:
    """Wait for ``query`` to end (``available_now``) or a stop signal, adding each
    micro-batch's progress to ``counters``; stop it in the end."""
    from py4j.protocol import Py4JError
    from pyspark.errors import StreamingQueryException

    seen = -1

    def collect() -> None:
        nonlocal seen
        for progress in query.recentProgress:
            if progress["batchId"] > seen:
                seen = progress["batchId"]
                counters.add(progress)
                log.info("batch %s (%s ms, %s records): %s", seen,
                         (progress.get("durationMs") or {}).get("triggerExecution"),
                         progress.get("numInputRows"), counters.summary())

    try:
        while query.isActive and stop.signum is None:
            try:
                query.awaitTermination(1)
            except StreamingQueryException as exc:
                if stop.signum is None:
                    raise _query_failure(exc) from exc
            collect()
        if stop.signum is not None:
            _quiet(spark)
            _let_the_running_batch_finish(query, stop)
    except Py4JError as exc:
        if stop.signum is None:  # the JVM went away
            raise BridgeError(f"lost the Spark JVM: {str(exc).splitlines()[0]}") from exc
    finally:
        _stop_query(query, collect)


STOP_GRACE_S = 600.0
"""How long a graceful stop waits for the running micro-batch (then it is abandoned)."""


def _quiet(spark: Any) -> None:
    """Once a stop was asked for, Spark's complaints about the batch it cuts short (and
    py4j's about the ``foreachBatch`` call that declines to start one) are noise."""
    logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)
    try:
        spark.sparkContext.setLogLevel("OFF")
    except Exception as exc:  # the JVM is going down
        log.debug("could not silence Spark's log: %s", exc)


def _let_the_running_batch_finish(query: Any, stop: _Stop) -> None:
    """Wait until the query is between micro-batches (or ended: ``foreachBatch`` declines to
    start a batch once a stop was asked for), a second signal, or :data:`STOP_GRACE_S`."""
    from pyspark.errors import StreamingQueryException

    deadline = time.monotonic() + STOP_GRACE_S
    while query.isActive and not stop.now and time.monotonic() < deadline:
        if not query.status["isTriggerActive"]:
            return
        try:
            query.awaitTermination(0.05)
        except StreamingQueryException:
            return  # foreachBatch declined the next batch: the query ended uncommitted


def _stop_query(query: Any, collect: Callable[[], None]) -> None:
    """Stop the query (waits for its thread) and take the last progress reports; the JVM may
    already be going down (spark-submit forwards a terminal's Ctrl-C to it too)."""
    try:
        if query.isActive:
            query.stop()
        collect()
    except Exception as exc:  # py4j errors once the JVM has gone: nothing more to collect
        log.warning("could not stop the query cleanly: %s", str(exc).splitlines()[0])


def _pyspark_available() -> bool:
    try:
        return importlib.util.find_spec("pyspark") is not None
    except (ImportError, ValueError):
        return False


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    available = _pyspark_available()
    if not available and not {"-h", "--help"} & set(args):
        sys.stderr.write(f"debezium-bridge: the Spark job needs pyspark, which is not "
                         f"installed: {SPARK_EXTRA}\n")
        return EXIT_CONFIG
    missing = "" if available else f" pyspark is not installed here: {SPARK_EXTRA}."
    try:
        config = JobConfig.from_args(
            args, prog="debezium-bridge spark",
            description="Run the Spark Structured Streaming translation job (needs the spark "
                        f"extra: {SPARK_EXTRA}).{missing}",
            epilog="Exit status: 0 done, 1 the query failed, 2 configuration error or pyspark "
                   "missing, 4 Kafka broker or schema registry unreachable, 130/143 stopped by "
                   "SIGINT/SIGTERM (the query is stopped cleanly; a restart resumes from the "
                   "checkpoint).")
    except ConfigError as exc:
        sys.stderr.write(f"debezium-bridge: configuration error: {exc}\n")
        return EXIT_CONFIG
    logging.basicConfig(level=config.log_level, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("py4j").setLevel(max(logging.WARNING, logging.getLogger().level))
    stop = _Stop()
    with _signals_stop(stop):
        try:
            counters = run(config, stop=stop)
        except ConfigError as exc:
            sys.stderr.write(f"debezium-bridge: configuration error: {exc}\n")
            return EXIT_CONFIG
        except ServiceError as exc:
            sys.stderr.write(f"debezium-bridge: error: {exc}\n")
            return EXIT_SERVICE
        except BridgeError as exc:
            sys.stderr.write(f"debezium-bridge: error: {exc}\n")
            return EXIT_FAILED
    sys.stderr.write(f"debezium-bridge: {counters.summary()}\n")
    if stop.signum is not None:
        sys.stderr.write(f"debezium-bridge: stopped by {signal.Signals(stop.signum).name}\n")
        return EXIT_SIGNAL[signal.Signals(stop.signum)]
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
