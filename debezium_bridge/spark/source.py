"""Spark's Kafka source, twice: the built-in ``kafka`` format when its connector is on the
classpath, else this package's Python data source over confluent-kafka (``debezium_bridge_kafka``).

Both give exactly the built-in columns (``key, value, topic, partition, offset, timestamp,
timestampType, headers``) and take the same options (``subscribe``, ``subscribePattern``,
``startingOffsets`` / ``endingOffsets`` incl. per-partition JSON with -2 = earliest and
-1 = latest, ``maxOffsetsPerTrigger``, ``kafka.*`` passed to the client), so everything after
``load()`` is one code path. Offsets are Spark's own JSON, ``{"topic": {"0": next_offset}}``, and
Spark checkpoints them; the Python source supports ``Trigger.AvailableNow``.

Brokers whose reported end offset lags (Tansu reports the base offset of the last record batch
+ 1) are handled by ``endOffsetProbe`` (default ``true``): the source fetches the last batch from
the reported end - 1 and takes the offset after its last record as the true end.

The client's own log lines (librdkafka) go through Python :mod:`logging` (logger
``debezium_bridge.kafka.client``, each distinct message once a minute), and a broker that does
not answer within ``kafka.request.timeout.ms`` (default 30 s) fails with one
:class:`~debezium_bridge.errors.ServiceError`. :func:`stream_topology` tells ``translate`` the
partitions of every topic and, for ``Trigger.AvailableNow``, where this run ends.
"""

from __future__ import annotations

import functools
import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from debezium_bridge.clients.kafka import client_logger
from debezium_bridge.core.windowed import Topology
from debezium_bridge.errors import BridgeError, ConfigError, ServiceError
from debezium_bridge.spark.workers import leave_sigint_to_the_driver

SOURCE_NAME = "debezium_bridge_kafka"
KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key: string, value: binary>>"
)
EARLIEST, LATEST = -2, -1
Offsets = dict[str, dict[str, int]]

_POLL_SECONDS = 1.0
_FETCH_BATCH = 5000


class DataLossError(BridgeError):
    """Offsets the query must read no longer exist (Spark's ``failOnDataLoss`` behaviour)."""


AVAILABLE_NOW_END = "availablenowendingoffsets"
"""Internal option (set by the job): the offsets a ``Trigger.AvailableNow`` run reads up to,
computed on the driver before the query starts, so ``translate`` knows them too."""
_CONSUMER_IGNORES = frozenset({"request.timeout.ms"})
"""Java-client settings that librdkafka's consumer does not take (it would warn on every
client): ``request.timeout.ms`` bounds this source's own waits instead."""
def client_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options, without the prefix, as librdkafka settings."""
    return {k[6:]: v for k, v in options.items() if k.startswith("kafka.")}


def _consumer_settings(options: Mapping[str, str], group: str) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "group.id": group, "enable.auto.commit": "false", "enable.partition.eof": "true",
        "auto.offset.reset": "error", "logger": client_logger()}
    settings |= {k: v for k, v in client_settings(options).items() if k not in _CONSUMER_IGNORES}
    return settings


def _timeout_s(options: Mapping[str, str]) -> float:
    return float(options.get("kafka.request.timeout.ms", "30000")) / 1000


def _json_offsets(text: str, what: str) -> Offsets:
    try:
        data = json.loads(text)
        return {str(t): {str(p): int(o) for p, o in parts.items()} for t, parts in data.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        raise ConfigError(f"{what}: expected 'earliest', 'latest' or JSON like "
                          f'{{"topic":{{"0":23,"1":-2}}}}, got {text!r}') from exc


class _Topology:
    """Topic/partition discovery and offset lookups on the driver (one long-lived consumer)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        from confluent_kafka import Consumer

        self.options = options
        subscribe = options.get("subscribe")
        pattern = options.get("subscribepattern")
        if bool(subscribe) == bool(pattern):
            raise ConfigError("set exactly one of 'subscribe' and 'subscribePattern'")
        self.probe = options.get("endoffsetprobe", "true").lower() == "true"
        self.timeout = _timeout_s(options)
        self.bootstrap = options.get("kafka.bootstrap.servers", "")
        try:
            self.consumer = Consumer(_consumer_settings(options, "debezium-bridge-offsets"))
        except Exception as exc:  # KafkaException: invalid client settings
            raise ConfigError(f"Kafka client settings: {exc}") from exc
        self.topics = [t.strip() for t in subscribe.split(",") if t.strip()] if subscribe else []
        self.pattern = re.compile(pattern) if pattern else None

    def partitions(self) -> list[tuple[str, int]]:
        from confluent_kafka import KafkaException

        try:
            metadata = self.consumer.list_topics(timeout=self.timeout)
        except KafkaException as exc:
            raise ServiceError(
                f"Kafka broker {self.bootstrap} not reachable within {self.timeout:g} s "
                f"(kafka.request.timeout.ms): {exc.args[0] if exc.args else exc}") from exc
        names = self.topics or sorted(t for t in metadata.topics
                                      if self.pattern is not None and self.pattern.fullmatch(t))
        out: list[tuple[str, int]] = []
        for name in names:
            topic = metadata.topics.get(name)
            if topic is None or topic.error is not None:
                continue  # not created yet; picked up by a later trigger
            out.extend((name, p) for p in sorted(topic.partitions))
        return out

    def _watermarks(self, partitions: Sequence[tuple[str, int]]
                    ) -> dict[tuple[str, int], tuple[int, int]]:
        from confluent_kafka import TopicPartition

        return {(topic, part): self.consumer.get_watermark_offsets(
                    TopicPartition(topic, part), timeout=self.timeout, cached=False)
                for topic, part in partitions}

    def ends(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        marks = self._watermarks(partitions)
        reported = {tp: high for tp, (_, high) in marks.items()}
        if not self.probe:
            return reported
        return reported | self._probe({tp: high for tp, (low, high) in marks.items()
                                       if high > low})  # empty partitions have nothing to probe

    def beginnings(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: low for tp, (low, _) in self._watermarks(partitions).items()}

    def _probe(self, reported: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
        """Fetch from ``reported - 1`` and keep reading until each partition reports its end
        (or goes quiet: a transaction marker or a compacted record has no message)."""
        from confluent_kafka import KafkaError, TopicPartition

        todo = dict(reported)
        if not todo:
            return reported
        ends = dict(reported)
        self.consumer.assign([TopicPartition(t, p, high - 1) for (t, p), high in todo.items()])
        waiting = set(todo)
        deadline = time.monotonic() + self.timeout
        quiet_since = None
        while time.monotonic() < deadline:
            messages = self.consumer.consume(_FETCH_BATCH, timeout=0.05)
            for m in messages:
                error = m.error()
                tp = (str(m.topic()), int(m.partition() or 0))
                if error is None:
                    ends[tp] = max(ends[tp], int(m.offset() or 0) + 1)
                if error is None or error.code() == KafkaError._PARTITION_EOF:
                    waiting.discard(tp)
            if messages:
                quiet_since = None
            elif not waiting:
                quiet_since = quiet_since or time.monotonic()
                if time.monotonic() - quiet_since > 0.1:
                    break
        self.consumer.unassign()
        return ends

    def last_messages(self, ranges: Mapping[tuple[str, int], tuple[int, int]]
                      ) -> dict[tuple[str, int], int | None]:
        """The offset of the last message in each ``[start, end)`` range (``None``: the range
        holds no message, e.g. only transaction markers). Reads back from ``end - 1`` in widening
        windows; a range not settled within the timeout counts ``end - 1`` (wait for it all)."""
        from confluent_kafka import KafkaError, TopicPartition

        found: dict[tuple[str, int], int | None] = {}
        todo = {tp: (start, end) for tp, (start, end) in ranges.items() if end > start}
        window = 1
        deadline = time.monotonic() + self.timeout
        while todo and time.monotonic() < deadline:
            begin = {tp: max(start, end - window) for tp, (start, end) in todo.items()}
            self.consumer.assign([TopicPartition(t, p, o) for (t, p), o in begin.items()])
            last: dict[tuple[str, int], int] = {}
            waiting = set(todo)
            while waiting and time.monotonic() < deadline:
                for m in self.consumer.consume(_FETCH_BATCH, timeout=0.05):
                    tp = (str(m.topic()), int(m.partition() or 0))
                    if tp not in waiting:
                        continue
                    end = todo[tp][1]
                    error = m.error()
                    offset = int(m.offset() or 0)
                    if error is None:
                        if offset < end:
                            last[tp] = max(last.get(tp, -1), offset)
                        if offset >= end - 1:
                            waiting.discard(tp)
                    elif error.code() == KafkaError._PARTITION_EOF:
                        waiting.discard(tp)
            self.consumer.unassign()
            for tp in list(todo):
                if tp in waiting:
                    continue
                if tp in last:
                    found[tp] = last[tp]
                elif begin[tp] <= todo[tp][0]:
                    found[tp] = None  # no message at all in the range
                else:
                    continue  # only markers in this window: look further back
                del todo[tp]
            window *= 16
        for tp, (_, end) in todo.items():
            found[tp] = end - 1
        return found

    def close(self) -> None:
        self.consumer.close()


class KafkaPartition(InputPartition):
    """One Kafka partition's offset range [start, end) for one micro-batch."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


def read_partition(options: Mapping[str, str], split: KafkaPartition) -> Iterator[Any]:
    """The records of ``split`` as Arrow record batches in the built-in source's columns (runs
    on executors), one per fetch: Spark takes them as they are, where rows yielded as tuples
    are converted value by value in Python (a datetime and a list of header tuples per row)."""
    import pyarrow as pa
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    leave_sigint_to_the_driver()
    consumer = Consumer(_consumer_settings(options, "debezium-bridge-reader"))
    timeout = _timeout_s(options)
    schema = arrow_schema()
    try:
        consumer.assign([TopicPartition(split.topic, split.partition, split.start)])
        position = split.start
        idle_since = time.monotonic()
        while position < split.end:
            messages = consumer.consume(min(_FETCH_BATCH, split.end - position), _POLL_SECONDS)
            if not messages and time.monotonic() - idle_since > timeout:
                raise TimeoutError(f"{split.topic}[{split.partition}]: no records at offset "
                                   f"{position} (expected up to {split.end}) within {timeout}s")
            keys: list[bytes | None] = []
            values: list[bytes | None] = []
            offsets: list[int] = []
            stamps: list[int | None] = []
            stamp_types: list[int] = []
            headers: list[Any] = []
            for m in messages:
                error = m.error()
                if error is not None:
                    code = error.code()
                    if code == KafkaError._PARTITION_EOF:
                        if int(m.offset() or 0) >= split.end:  # the rest are no messages
                            position = split.end          # (transaction markers, compacted)
                            break
                        continue
                    if code == KafkaError._AUTO_OFFSET_RESET or error.fatal():
                        raise DataLossError(
                            f"{split.topic}[{split.partition}]: cannot read offsets {position}.."
                            f"{split.end - 1} ({error}); records deleted by retention are lost")
                    continue
                offset = int(m.offset() or 0)
                if offset < position:
                    continue
                if offset >= split.end:
                    position = split.end
                    break
                idle_since = time.monotonic()
                ts_type, ts = m.timestamp()  # type: ignore[misc]
                keys.append(m.key())
                values.append(m.value())
                offsets.append(offset)
                stamps.append(ts * 1000 if ts_type else None)
                stamp_types.append(1 if ts_type == 2 else 0)
                headers.append(m.headers() or [])
                position = offset + 1
            if offsets:
                n = len(offsets)
                yield pa.RecordBatch.from_arrays([
                    pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
                    pa.array([split.topic] * n, pa.string()),
                    pa.array([split.partition] * n, pa.int32()), pa.array(offsets, pa.int64()),
                    pa.array(stamps, pa.int64()).cast(schema.field("timestamp").type),
                    pa.array(stamp_types, pa.int32()),
                    pa.array(headers, schema.field("headers").type)], schema=schema)
    finally:
        consumer.close()


@functools.cache
def arrow_schema() -> Any:
    """:data:`KAFKA_SCHEMA` as Spark hands Arrow data to and from Python (UTC timestamps)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    return to_arrow_schema(StructType([
        StructField("key", BinaryType()), StructField("value", BinaryType()),
        StructField("topic", StringType()), StructField("partition", IntegerType()),
        StructField("offset", LongType()), StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField("headers", ArrayType(header))]), timezone="UTC")


def _resolve(spec: str | None, default: str, partitions: list[tuple[str, int]],
             topology: _Topology, what: str) -> dict[tuple[str, int], int]:
    text = (spec or default).strip()
    if text == "earliest":
        return topology.beginnings(partitions)
    if text == "latest":
        return topology.ends(partitions)
    wanted = _from_offsets(_json_offsets(text, what))
    missing = sorted(set(partitions) - set(wanted))
    if missing:
        raise ConfigError(f"{what} names specific offsets, so it must name every partition; "
                          f"missing {', '.join(f'{t}[{p}]' for t, p in missing)}")
    earliest = topology.beginnings(partitions)
    latest = topology.ends(partitions) if LATEST in wanted.values() else {}
    return {tp: earliest[tp] if wanted[tp] == EARLIEST else latest[tp]
            if wanted[tp] == LATEST else wanted[tp] for tp in partitions}


def _as_offsets(positions: Mapping[tuple[str, int], int]) -> Offsets:
    out: Offsets = {}
    for (topic, part), offset in sorted(positions.items()):
        out.setdefault(topic, {})[str(part)] = offset
    return out


def _from_offsets(offsets: Mapping[str, Mapping[str, int]]) -> dict[tuple[str, int], int]:
    return {(t, int(p)): o for t, parts in offsets.items() for p, o in parts.items()}


def _limit(start: Mapping[tuple[str, int], int], end: dict[tuple[str, int], int],
           max_rows: int) -> dict[tuple[str, int], int]:
    """Cap a trigger at ``max_rows`` records, shared in proportion to each partition's lag."""
    lags = {tp: end[tp] - start.get(tp, end[tp]) for tp in end}
    total = sum(lags.values())
    if total <= max_rows:
        return end
    shares = {tp: lag * max_rows // total for tp, lag in lags.items()}
    if not any(shares.values()):  # fewer rows than partitions: the most behind goes first
        shares[max(lags, key=lambda tp: lags[tp])] = 1
    # shares round down, so a partition with little lag does not race ahead of the others
    return {tp: start.get(tp, end[tp]) + share for tp, share in shares.items()}


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch planning on the driver; :func:`read_partition` on executors."""

    def __init__(self, options: Mapping[str, str]) -> None:
        leave_sigint_to_the_driver()  # (runs in the Python process that plans micro-batches)
        self.options = dict(options)
        max_rows = self.options.get("maxoffsetspertrigger")
        self.max_rows = int(max_rows) if max_rows else None
        self._topology: _Topology | None = None
        self._target: dict[tuple[str, int], int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "max_rows": self.max_rows, "_topology": None,
                "_target": None}

    @property
    def topology(self) -> _Topology:
        if self._topology is None:
            self._topology = _Topology(self.options)
        return self._topology

    def initialOffset(self) -> Offsets:
        partitions = self.topology.partitions()
        return _as_offsets(_resolve(self.options.get("startingoffsets"), "latest", partitions,
                                    self.topology, "startingOffsets"))

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_rows) if self.max_rows else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        given = self.options.get(AVAILABLE_NOW_END)
        self._target = _from_offsets(_json_offsets(given, AVAILABLE_NOW_END)) if given \
            else self._available()

    def _available(self) -> dict[tuple[str, int], int]:
        topology = self.topology
        return topology.ends(topology.partitions())

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        begin = _from_offsets(start)
        end = dict(self._target) if self._target is not None else self._available()
        fresh = [tp for tp in end if tp not in begin]
        if fresh:  # partitions that appeared after the query started are read from the start
            begin |= self.topology.beginnings(fresh)
        for tp, offset in begin.items():
            end[tp] = max(offset, end.get(tp, offset))
        if isinstance(limit, ReadMaxRows):
            end = _limit(begin, end, limit.max_rows)
        return _as_offsets(end)

    def reportLatestOffset(self) -> Offsets | None:
        return None

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        begin = _from_offsets(start)
        stop = _from_offsets(end)
        fresh = [tp for tp in stop if tp not in begin]
        if fresh:  # appeared after the query started: read from their earliest offset
            begin |= self.topology.beginnings(fresh)
        return [KafkaPartition(t, p, begin[(t, p)], o)
                for (t, p), o in sorted(stop.items()) if o > begin[(t, p)]]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaPartition)
        return read_partition(self.options, partition)

    def commit(self, end: Offsets) -> None:
        """Offsets live in Spark's checkpoint; nothing to commit to Kafka."""

    def stop(self) -> None:
        if self._topology is not None:
            self._topology.close()
            self._topology = None


class KafkaBatchReader(DataSourceReader):
    """``spark.read`` between ``startingOffsets`` (default earliest) and ``endingOffsets``
    (default latest)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = dict(options)
        topology = _Topology(self.options)
        try:
            partitions = topology.partitions()
            begin = _resolve(self.options.get("startingoffsets"), "earliest", partitions,
                             topology, "startingOffsets")
            end = _resolve(self.options.get("endingoffsets"), "latest", partitions, topology,
                           "endingOffsets")
        finally:
            topology.close()
        self.splits = [KafkaPartition(t, p, begin[(t, p)], end[(t, p)])
                       for t, p in partitions if end[(t, p)] > begin[(t, p)]]

    def partitions(self) -> Sequence[InputPartition]:
        return self.splits

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, KafkaPartition)
        return read_partition(self.options, partition)


class KafkaDataSource(DataSource):
    """``spark.readStream.format("debezium_bridge_kafka")``: the Kafka source in Python."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return KAFKA_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self.options)


def stream_topology(options: Mapping[str, str], *, available_now: bool = False,
                    committed: Offsets | None = None) -> tuple[Topology, Offsets | None]:
    """What ``translate`` should know about the partitions it reads, from the broker.

    Always the partition count of every subscribed topic (the position watermark waits for every
    partition). With ``available_now``, also the run's end: the offsets it reads up to (returned,
    to hand to the Python source as its target) and, per partition with something to read, the
    offset of its last message (``Topology.ends``). The run starts at ``committed`` (the offsets
    of the checkpoint's last committed batch; partitions it lacks start at their earliest
    offset) or, for a new checkpoint, at ``startingOffsets``.
    """
    lowered = {k.lower(): v for k, v in options.items()}
    topology = _Topology(lowered)
    try:
        partitions = topology.partitions()
        counts: dict[str, int] = {}
        for topic, partition in partitions:
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        if not available_now:
            return Topology(partitions=counts), None
        target = topology.ends(partitions)
        if committed is None:
            start = _resolve(lowered.get("startingoffsets"), "latest", partitions, topology,
                             "startingOffsets")
        else:
            start = _from_offsets(committed)
            fresh = [tp for tp in partitions if tp not in start]
            if fresh:
                start |= topology.beginnings(fresh)
        for tp, offset in start.items():
            target[tp] = max(offset, target.get(tp, offset))
        last = topology.last_messages({tp: (start[tp], end) for tp, end in target.items()
                                       if tp in start and end > start[tp]})
        ends: dict[str, dict[int, int]] = {}
        for (topic, partition), last_offset in sorted(last.items()):
            if last_offset is not None:
                ends.setdefault(topic, {})[partition] = last_offset
        return Topology(partitions=counts, ends=ends), _as_offsets(target)
    finally:
        topology.close()


def builtin_kafka_available(spark: Any) -> bool:
    """Whether Spark's own Kafka connector (spark-sql-kafka) is on the classpath."""
    try:
        spark._jvm.java.lang.Class.forName(
            "org.apache.spark.sql.kafka010.KafkaSourceProvider")
        return True
    except Exception:
        return False


def kafka_reader(spark: Any, options: Mapping[str, str], *, provider: str = "auto",
                 streaming: bool = True) -> Any:
    """A ``DataStreamReader``/``DataFrameReader`` for Kafka with ``options`` applied.

    ``provider``: ``kafka`` (built-in, needs spark-sql-kafka), ``python`` (this package's
    source) or ``auto`` (built-in when available).
    """
    if provider not in ("auto", "kafka", "python"):
        raise ConfigError(f"source provider must be auto, kafka or python, not {provider!r}")
    builtin = provider == "kafka" or (provider == "auto" and builtin_kafka_available(spark))
    if not builtin:
        spark.dataSource.register(KafkaDataSource)
    reader = spark.readStream if streaming else spark.read
    reader = reader.format("kafka" if builtin else SOURCE_NAME)
    if builtin:
        reader = reader.option("includeHeaders", "true")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader


def kafka_rows(records: Iterator[Any] | Sequence[Any]) -> list[tuple[Any, ...]]:
    """:class:`~debezium_bridge.model.records.RawRecord`-like records as rows of the Kafka
    schema (for ``spark.createDataFrame(rows, KAFKA_SCHEMA)``)."""
    return [(r.key, r.value, r.topic, r.partition, r.offset,
             datetime.fromtimestamp(r.timestamp / 1000, UTC) if r.timestamp is not None else None,
             0, [(k, v) for k, v in r.headers]) for r in records]
