"""Tools beside the runners: ``samples`` writes sample Debezium traffic, ``broker`` runs the
embedded Kafka broker, ``produce`` loads a dump file into Kafka, ``consume`` prints topics. The
demo, the tests and users share them."""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

import msgspec
from pydantic_settings import CliPositionalArg

from debezium_bridge.clients.kafka import create_topics
from debezium_bridge.clients.kafka import produce as produce_records
from debezium_bridge.config import ClientSettings, RunnerSettings
from debezium_bridge.errors import ConfigError, ServiceError
from debezium_bridge.formats.debezium.registry import InMemoryRegistry
from debezium_bridge.formats.dumps import DumpLineError, read_dumps, write_lossless
from debezium_bridge.model.records import RawRecord

log = logging.getLogger(__name__)


class SamplesConfig(RunnerSettings):
    """Settings of ``debezium-bridge samples``."""

    model_config = {"env_prefix": "DEBEZIUM_BRIDGE_SAMPLES_"}
    cli_shortcuts = {"output": "o"}

    output: str = "-"
    """Dump file to write (``-`` = standard output), as lossless JSON lines."""
    encoding: Literal["json-schema", "json", "avro"] = "json-schema"
    """Converter to imitate: JsonConverter with or without schemas, or Confluent Avro."""
    partitions: int = 3
    """Partitions of the table topic."""
    avro_schemas_out: str | None = None
    """With the Avro encoding: write the ``{id: schema}`` file here (for ``--avro-schemas``)."""


def samples(argv: Sequence[str]) -> int:
    """Write the demo traffic (see :func:`debezium_bridge.testing.simulator.demo`)."""
    from debezium_bridge.testing.simulator import demo_traffic

    config = SamplesConfig.from_args(
        argv, prog="debezium-bridge samples",
        description="Write sample Debezium SQL Server traffic (snapshot, inserts, an update, a "
                    "delete, a primary-key change split across partitions, a replayed tail, a "
                    "corrupt record) as a lossless dump.")
    registry = InMemoryRegistry()
    records = demo_traffic(config.encoding, config.partitions, registry)
    if config.output == "-":
        write_lossless(records, sys.stdout.buffer)
    else:
        with open(config.output, "wb") as out:
            write_lossless(records, out)
    if config.avro_schemas_out:
        with open(config.avro_schemas_out, "wb") as handle:
            handle.write(msgspec.json.encode({str(k): v for k, v in registry.schemas.items()}))
    log.info("wrote %d sample records", len(records))
    return 0


class BrokerConfig(RunnerSettings):
    """Settings of ``debezium-bridge broker``."""

    model_config = {"env_prefix": "DEBEZIUM_BRIDGE_BROKER_"}

    port: int = 9092
    """Loopback port to listen on (0: a free one)."""
    log_file: str | None = None
    """Where the broker writes its own log (default: nowhere)."""


def broker(argv: Sequence[str]) -> int:
    """Run the embedded broker until Ctrl-C or SIGTERM."""
    from debezium_bridge.testing.broker import EmbeddedKafka

    config = BrokerConfig.from_args(
        argv, prog="debezium-bridge broker",
        description="Run the embedded Kafka broker (Tansu, memory storage) on 127.0.0.1 for "
                    "local development; needs pip install 'debezium-bridge[embedded]'.")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with EmbeddedKafka(config.port or None, log_path=config.log_file) as kafka:
        sys.stdout.write(f"bootstrap.servers={kafka.bootstrap_servers}\n")
        sys.stdout.flush()
        log.info("embedded broker on %s; Ctrl-C stops it", kafka.bootstrap_servers)
        try:
            while not stop.wait(0.5):
                if not kafka.running:
                    raise ConfigError("the broker exited (is the port in use?)")
        except KeyboardInterrupt:
            pass
    return 0


class ProduceConfig(RunnerSettings):
    """Settings of ``debezium-bridge produce``."""

    model_config = {"env_prefix": "DEBEZIUM_BRIDGE_PRODUCE_"}
    client_settings_field = "kafka"
    client_settings_help = ("librdkafka producer setting under its own name, e.g. "
                            "-X security.protocol=SASL_SSL (repeatable)")

    inputs: CliPositionalArg[list[str]] = []
    """Dump files (lossless JSON lines, kcat -J, console-consumer text)."""
    bootstrap_servers: str = "127.0.0.1:9092"
    """Kafka ``bootstrap.servers``."""
    kafka: ClientSettings = {}
    """Producer settings under their librdkafka names."""
    topic: str | None = None
    """Produce every record to this topic instead of its own."""
    keep_partitions: bool = True
    """Produce each record to the partition the dump names (else Kafka's partitioner)."""
    create_topics: bool = True
    """Create missing topics with as many partitions as the dump uses."""
    timeout: float = 30.0
    """Seconds to wait for the broker before giving up (exit 4)."""

    def model_post_init(self, context: Any) -> None:
        if not self.inputs:
            raise ConfigError("no dump files given")


def produce(argv: Sequence[str]) -> int:
    """Load dump files into Kafka, in order, keeping keys, headers and timestamps."""
    config = ProduceConfig.from_args(
        argv, prog="debezium-bridge produce",
        description="Load dump files into Kafka topics (keys, values, headers, timestamps and, "
                    "by default, partitions kept).")
    records: list[RawRecord] = []
    for item in read_dumps(config.inputs):
        if isinstance(item, DumpLineError):
            raise ConfigError(f"{item.path}:{item.line_no}: {item.message}")
        records.append(item if config.topic is None
                       else msgspec.structs.replace(item, topic=config.topic))
    if config.create_topics:
        counts: dict[str, int] = {}
        for r in records:
            counts[r.topic] = max(counts.get(r.topic, 1), r.partition + 1)
        create_topics(config.bootstrap_servers, counts, config.kafka, config.timeout)
    delivered = produce_records(config.bootstrap_servers, records, config.kafka,
                                keep_partitions=config.keep_partitions, timeout=config.timeout)
    log.info("produced %d records to %s", len(delivered),
             ", ".join(sorted({r.topic for r in delivered})))
    return 0


class ConsumeConfig(RunnerSettings):
    """Settings of ``debezium-bridge consume``."""

    model_config = {"env_prefix": "DEBEZIUM_BRIDGE_CONSUME_"}
    client_settings_field = "kafka"
    client_settings_help = ("librdkafka consumer setting under its own name, e.g. "
                            "-X security.protocol=SASL_SSL (repeatable)")

    topics: CliPositionalArg[list[str]] = []
    """Topics to print, each from its beginning to its current end."""
    bootstrap_servers: str = "127.0.0.1:9092"
    """Kafka ``bootstrap.servers``."""
    kafka: ClientSettings = {}
    """Consumer settings under their librdkafka names."""
    format: Literal["values", "text", "lossless"] = "values"
    """``values``: each value on a line (``null`` for tombstones); ``text``: coordinates, key,
    value and headers on a line; ``lossless``: our lossless JSON lines (readable by
    ``convert`` and ``produce``)."""
    timeout: float = 30.0
    """Seconds to wait for the broker before giving up (exit 4), and at most for ``wait_for``."""
    wait_for: int = 0
    """Wait until the topics exist and hold at least this many records (a topic another process
    is still writing), then print them; fewer after ``timeout`` seconds is exit 1."""

    def model_post_init(self, context: Any) -> None:
        if not self.topics:
            raise ConfigError("no topics given")


def _text(data: bytes | None) -> str:
    return "null" if data is None else data.decode("utf-8", "replace")


def _read_topics(client: Any, config: ConsumeConfig) -> list[Any]:
    """Every record of the topics, in (topic, partition, offset) order; a topic that does not
    exist is an error unless records are awaited (``wait_for``)."""
    from debezium_bridge.sidecar.reading import read_ranges

    try:
        metadata = client.list_topics(timeout=config.timeout)
    except Exception as exc:
        raise ServiceError(f"Kafka at {config.bootstrap_servers}: {exc}") from None
    ranges: dict[tuple[str, int], tuple[int, int | None]] = {}
    for topic in config.topics:
        meta = metadata.topics.get(topic)
        if meta is None or meta.error is not None:
            if config.wait_for:
                return []
            raise ConfigError(f"no topic {topic!r} on {config.bootstrap_servers}")
        ranges.update({(topic, p): (0, None) for p in sorted(meta.partitions)})
    return sorted(read_ranges(client, ranges, config.timeout),
                  key=lambda m: (m.topic(), m.partition(), m.offset()))


def consume(argv: Sequence[str]) -> int:
    """Print topics from their beginning to their current end, then stop."""
    from debezium_bridge.sidecar.reading import reader

    config = ConsumeConfig.from_args(
        argv, prog="debezium-bridge consume",
        description="Print Kafka topics from their beginning to their current end.")
    client = reader({**config.kafka, "bootstrap.servers": config.bootstrap_servers},
                    "debezium-bridge-consume")
    deadline = time.monotonic() + config.timeout
    try:
        while True:
            messages = _read_topics(client, config)
            if len(messages) >= config.wait_for:
                break
            if time.monotonic() >= deadline:
                log.error("%d of the %d records awaited after %.0f s", len(messages),
                          config.wait_for, config.timeout)
                return 1
            time.sleep(0.5)
    finally:
        client.close()
    out = sys.stdout
    count = 0
    records = []
    for m in messages:
        ts_type, ts = m.timestamp()
        records.append(RawRecord(m.topic(), m.partition(), m.offset(), ts if ts_type else None,
                                 m.key(), m.value(), tuple(m.headers() or ())))
    if config.format == "lossless":
        write_lossless(records, sys.stdout.buffer)
        count = len(records)
    for r in records if config.format != "lossless" else ():
        if config.format == "values":
            out.write(_text(r.value) + "\n")
        else:
            headers = " ".join(f"{name}={_text(value)}" for name, value in r.headers)
            out.write(f"{r.topic}[{r.partition}]@{r.offset} key={_text(r.key)} "
                      f"value={_text(r.value)}" + (f" headers: {headers}" if headers else "")
                      + "\n")
        count += 1
    out.flush()
    log.info("%d records from %s", count, ", ".join(config.topics))
    return 0
