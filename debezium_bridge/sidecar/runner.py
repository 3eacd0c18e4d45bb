"""The sidecar's main loop: consume → translate → produce, checkpoint, recover.

One process ("instance") runs:

* a **coordination consumer**, a member of the consumer group ``group_id`` subscribed to the
  coordination topic, whose partitions are *slots*. The group hands the slots out among the
  instances; a table topic belongs to slot ``murmur2(topic) % slots``, so every partition of a
  table is read by the same instance (the halves of a key change meet). It also commits the
  input offsets (for lag tools) and, with ``transactions``, fences stale instances;
* a **reading consumer** assigned, by hand, every partition of the topics in its slots;
* one **pipeline per input topic** (:class:`~debezium_bridge.sidecar.units.Unit`);
* one **producer** (idempotent; transactional with ``guarantee: transactions``) for output,
  dead letters and checkpoints;
* a **checkpoint** every ``commit_interval_ms`` (:mod:`debezium_bridge.sidecar.checkpoint`)
  and **recovery** whenever topics are adopted (start, rebalance, a new topic).

docs/sidecar.md explains why no output is lost or written twice at any kill point.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

import msgspec

from debezium_bridge.clients.kafka import PRODUCER_DEFAULTS, create_topics, open_client
from debezium_bridge.clients.registry import RegistrySchemaResolver, registry_registrar
from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.errors import ConfigError, ServiceError
from debezium_bridge.formats.columns import ColumnCatalog
from debezium_bridge.formats.debezium.avro import AvroDecoder
from debezium_bridge.formats.debezium.decode import Decoder, load_table_schemas
from debezium_bridge.formats.debezium.registry import (
    FileSchemaResolver,
    SchemaRegistrar,
    SchemaResolver,
)
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord
from debezium_bridge.output import (
    EVENT_ID_HEADER,
    LINEAGE_HEADER,
    SEQ_HEADER,
    VALUE_REMOVED_HEADER,
    Output,
    OutputFormat,
    OutputRecord,
)
from debezium_bridge.partitioner import partition_for
from debezium_bridge.sidecar import checkpoint as checkpoints
from debezium_bridge.sidecar.checkpoint import Checkpoint, merge_frontiers
from debezium_bridge.sidecar.config import SidecarConfig
from debezium_bridge.sidecar.metrics import Health, Metrics, serve
from debezium_bridge.sidecar.reading import end_offsets, read_ranges, reader
from debezium_bridge.sidecar.recovery import Decision, WrittenIndex, index_outputs
from debezium_bridge.sidecar.units import Unit

log = logging.getLogger("debezium_bridge.sidecar")
_MESSAGE_MAX_BYTES = 1_000_000
"""librdkafka's default ``message.max.bytes``."""
_RECORD_MARGIN = 512
"""Bytes allowed for a record's framing beside its key, value and headers."""
_CHANGE_HEADERS = frozenset((EVENT_ID_HEADER, SEQ_HEADER, LINEAGE_HEADER))

TEST_HOOKS_ENV = "DEBEZIUM_BRIDGE_TEST_HOOKS"
"""Test only: ``point=seconds,...`` makes the sidecar announce each named point on standard
error and sleep there (points: ``after-produce``, between the output flush and the checkpoint;
``after-checkpoint``, between the checkpoint and the offset commit), so a test can kill it
exactly there."""
_SUMMARY_EVERY_S = 30.0


def _unreachable(error: Any) -> bool:
    from confluent_kafka import KafkaError

    return error.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT,
                            KafkaError._RESOLVE, KafkaError._AUTHENTICATION)


class _Hooks:
    def __init__(self, spec: str | None) -> None:
        self.points: dict[str, float] = {}
        for item in (spec or "").split(","):
            name, sep, seconds = item.partition("=")
            if name.strip():
                self.points[name.strip()] = float(seconds) if sep else 0.0

    def __call__(self, point: str) -> None:
        seconds = self.points.get(point)
        if seconds is None:
            return
        sys.stderr.write(f"debezium-bridge test hook: {point}\n")
        sys.stderr.flush()
        if seconds:
            time.sleep(seconds)


class Sidecar:
    """One sidecar instance; :meth:`run` returns the exit code (see the module docstring)."""

    def __init__(self, config: SidecarConfig) -> None:
        self.config = config
        self.instance = config.instance_id or socket.gethostname()
        self.life = uuid.uuid4().hex[:12]
        self.sequence = 0
        self.hooks = _Hooks(os.environ.get(TEST_HOOKS_ENV))
        self.stopping = threading.Event()
        self.metrics = Metrics()
        stall = max(60.0, 3 * config.commit_interval_ms / 1000)
        self.health = Health(stall)
        self.transactions = config.guarantee == "transactions"
        self.idempotent = config.guarantee == "idempotent"
        self.catalog = ColumnCatalog()
        self.table_schemas = load_table_schemas(config.table_schemas) \
            if config.table_schemas else {}
        for name, schema in self.table_schemas.items():
            self.catalog.add_schema(schema, name)
        self.resolver = self._resolver()
        self.output = Output([OutputFormat(f) for f in config.outputs], config,
                             catalog=self.catalog, registrar=self._registrar())
        self.units: dict[str, Unit] = {}
        self.slots: set[int] = set()
        self.slot_count = config.slots
        self.topics: dict[str, list[int]] = {}
        """Input topics (matching the subscription) and their partitions, from metadata."""
        self.ends: dict[tuple[str, int], int] = {}
        """Per output partition: an offset at or after its end (delivery reports)."""
        self.registered: set[str] = set()
        self.recovery_frontier: dict[tuple[str, int], int] | None = None
        self.last_checkpoint: Checkpoint | None = None
        self.delivery_errors: list[str] = []
        self.in_transaction = False
        self.dirty = False
        self.callback_error: BaseException | None = None
        self.failed = False
        """Set when the run stops on an error: no checkpoint may be written after that."""
        self.shutdown_deadline = float("inf")
        self.started = time.monotonic()
        self.next_checkpoint = 0.0
        self.next_refresh = 0.0
        self.next_summary = time.monotonic() + _SUMMARY_EVERY_S
        self.timeout = config.service_timeout_ms / 1000
        self.written = 0
        self.skipped = 0
        self.max_message_bytes = _MESSAGE_MAX_BYTES
        """The producer's ``message.max.bytes`` (set with the producer)."""
        self.divergent = 0
        self._exclude = re.compile(config.exclude_pattern) if config.exclude_pattern else None
        self._pattern = re.compile(config.subscribe_pattern) if config.subscribe_pattern \
            else None
        self._internal = {config.dlq_topic, config.checkpoint_topic_name,
                          config.coordination_topic_name}

    # -- setup ------------------------------------------------------------------------------
    def _resolver(self) -> SchemaResolver | None:
        c = self.config
        if c.schema_registry:
            return RegistrySchemaResolver({**c.registry, "url": str(c.schema_registry)})
        if c.avro_schemas:
            return FileSchemaResolver.from_file(c.avro_schemas)
        return None

    def _registrar(self) -> SchemaRegistrar | None:
        c = self.config
        if "debezium-avro" not in c.outputs:
            return None
        if not c.schema_registry:
            raise ConfigError("output debezium-avro needs schema_registry")
        return registry_registrar({**c.registry, "url": str(c.schema_registry)})

    def _pipeline(self) -> Pipeline:
        c = self.config
        decoder = Decoder(c.decode_options(self.table_schemas), AvroDecoder(self.resolver))
        return Pipeline(TranslatorConfig(pair_key_changes=c.pair_key_changes,
                                         max_pending=c.max_pending,
                                         dedupe_capacity=c.dedupe_capacity, native=c.native),
                        decoder, c.ces, catalog=self.catalog)

    def _on_error(self, error: Any) -> None:
        if error.fatal():
            self.callback_error = ServiceError(f"Kafka: fatal error: {error.str()}")
        elif _unreachable(error) and self.health.broker_down_since is None:
            self.health.broker_down_since = time.monotonic()
            log.warning("Kafka unreachable: %s", error.str())

    def _broker_answered(self) -> None:
        if self.health.broker_down_since is not None:
            log.info("Kafka reachable again")
            self.health.broker_down_since = None

    def _open(self) -> None:
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient

        c = self.config
        self.admin = open_client(AdminClient, {**c.client("admin"), "error_cb": self._on_error})
        if c.create_topics:
            create_topics(c.servers, {c.coordination_topic_name: c.slots,
                                      c.checkpoint_topic_name: 1},
                          c.client("admin"), self.timeout)
        metadata = self._metadata()
        slot_topic = metadata.topics.get(c.coordination_topic_name)
        if slot_topic is None or slot_topic.error is not None or not slot_topic.partitions:
            raise ServiceError(f"coordination topic {c.coordination_topic_name} does not exist "
                               "(create it, or set create_topics)")
        self.slot_count = len(slot_topic.partitions)
        checkpoint_topic = metadata.topics.get(c.checkpoint_topic_name)
        if checkpoint_topic is None or checkpoint_topic.error is not None:
            raise ServiceError(f"checkpoint topic {c.checkpoint_topic_name} does not exist "
                               "(create it with one partition, or set create_topics)")
        producer = {**PRODUCER_DEFAULTS, "acks": "all", **c.client("producer"),
                    "error_cb": self._on_error}
        self.max_message_bytes = int(producer.get("message.max.bytes", _MESSAGE_MAX_BYTES))
        if self.transactions:
            producer["transactional.id"] = f"debezium-bridge.{c.group_id}.{self.instance}"
        self.producer = open_client(Producer, producer)
        if self.transactions:
            try:
                self.producer.init_transactions(self.timeout)
            except Exception as exc:
                raise ServiceError(f"Kafka: cannot initialise transactions: {exc}") from None
        isolation = {"isolation.level": "read_committed"}
        self.data = open_client(Consumer, {
            **c.client("consumer"), **isolation, "group.id": f"{c.group_id}.reader",
            "enable.auto.commit": "false", "enable.partition.eof": "true",
            "auto.offset.reset": "earliest", "error_cb": self._on_error})
        self.reader = reader({**c.client("consumer"), "error_cb": self._on_error,
                              **(isolation if self.transactions else {})},
                             f"{c.group_id}.recovery")
        self.coord = open_client(Consumer, {
            "session.timeout.ms": "10000", "heartbeat.interval.ms": "3000",
            **c.client("consumer"), "group.id": c.group_id, "enable.auto.commit": "false",
            "error_cb": self._on_error})
        self.coord.subscribe([c.coordination_topic_name], on_assign=self._guard(self._assigned),
                             on_revoke=self._guard(self._revoked),
                             on_lost=self._guard(self._lost))

    def _guard(self, handler: Any) -> Any:
        def call(consumer: Any, partitions: Any) -> None:
            try:
                handler(partitions)
            except BaseException as exc:  # re-raised by the main loop after poll returns
                self.callback_error = exc
        return call

    def _metadata(self, topic: str | None = None) -> Any:
        try:
            metadata = self.admin.list_topics(topic=topic, timeout=self.timeout)
        except Exception as exc:
            raise ServiceError(f"Kafka at {self.config.servers}: no metadata within "
                               f"{self.timeout:.0f} s ({exc})") from None
        self._broker_answered()
        return metadata

    # -- topics -----------------------------------------------------------------------------
    def _is_input(self, topic: str) -> bool:
        if topic in self._internal or (self._exclude and self._exclude.fullmatch(topic)):
            return False
        if self._pattern is not None:
            if topic.startswith("__") and not topic.startswith("__debezium-heartbeat"):
                return False
            return self._pattern.fullmatch(topic) is not None
        return topic in self.config.subscribe

    def slot_of(self, topic: str) -> int:
        return partition_for(topic.encode(), self.slot_count)

    def _refresh_topics(self) -> None:
        metadata = self._metadata()
        topics: dict[str, list[int]] = {}
        for name, topic in metadata.topics.items():
            if topic.error is None and topic.partitions and self._is_input(name):
                topics[name] = sorted(topic.partitions)
        self.topics = topics
        self.next_refresh = time.monotonic() + self.config.topic_refresh_interval_ms / 1000
        if self.health.rebalancing:
            return
        new = [t for t in topics if t not in self.units and self.slot_of(t) in self.slots]
        if new:
            self._adopt(new)
        grown = []
        for topic, unit in self.units.items():
            for partition in topics.get(topic, []):
                if partition not in unit.position:
                    unit.add_partition(partition, 0)
                    grown.append((topic, partition, 0))
        if grown:
            from confluent_kafka import TopicPartition

            log.info("new partitions: %s", ", ".join(f"{t}[{p}]" for t, p, _ in grown))
            self.data.incremental_assign([TopicPartition(t, p, o) for t, p, o in grown])

    # -- rebalance --------------------------------------------------------------------------
    def _revoked(self, partitions: Any) -> None:
        log.info("slots revoked: %s", sorted(p.partition for p in partitions))
        self.health.rebalancing = True
        if self.units and not self.failed:
            self.checkpoint()  # hand over: everything delivered, state checkpointed
        self.slots = set()

    def _lost(self, partitions: Any) -> None:
        log.warning("slots lost (session expired): dropping every topic without a checkpoint")
        self.health.rebalancing = True
        if self.in_transaction:
            with contextlib.suppress(Exception):
                self.producer.abort_transaction(self.timeout)
            self.in_transaction = False
        self._drop(list(self.units))
        self.slots = set()

    def _assigned(self, partitions: Any) -> None:
        self.metrics.rebalances.inc()
        self.slots = {p.partition for p in partitions}
        self.metrics.slots.set(len(self.slots))
        gone = [t for t in self.units if self.slot_of(t) not in self.slots]
        self._drop(gone)
        if not self.topics:
            self._refresh_topics()
        new = [t for t in self.topics if t not in self.units and self.slot_of(t) in self.slots]
        log.info("slots assigned: %s; topics kept: %d, to adopt: %d", sorted(self.slots),
                 len(self.units), len(new))
        if new:
            self._adopt(new)
        self.health.rebalancing = False
        self.health.detail["topics"] = sorted(self.units)

    def _drop(self, topics: Iterable[str]) -> None:
        from confluent_kafka import TopicPartition

        topics = list(topics)
        if not topics:
            return
        partitions = [TopicPartition(t, p) for t in topics for p in self.units[t].position]
        with contextlib.suppress(Exception):
            self.data.incremental_unassign(partitions)
        for topic in topics:
            del self.units[topic]
            self.metrics.forget(topic)
        if self.last_checkpoint is not None:  # never name a topic again once it is gone
            self.last_checkpoint = msgspec.structs.replace(
                self.last_checkpoint,
                units=[u for u in self.last_checkpoint.units if u.topic in self.units])
        log.info("handed over: %s", ", ".join(sorted(topics)))
        self.metrics.units.set(len(self.units))

    # -- recovery ---------------------------------------------------------------------------
    def _adopt(self, topics: list[str]) -> None:
        """Start reading ``topics``: from their latest checkpoint (state, marks, counters),
        else from the group's committed offsets, else from ``start_offsets``; with the
        idempotent guarantee, first learn from the output what an earlier life wrote after
        that checkpoint."""
        from confluent_kafka import TopicPartition

        c = self.config
        started = time.monotonic()
        if not self.transactions:
            self._flush()  # our own records in flight are in the output before it is read
        found = checkpoints.find(self.reader, c.checkpoint_topic_name, c.group_id,
                                 set(topics), self.timeout)
        starts: dict[tuple[str, int], int] = {}
        fresh = [TopicPartition(t, p) for t in topics if t not in found
                 for p in self.topics.get(t, [])]
        if fresh:
            try:
                committed = self.coord.committed(fresh, timeout=self.timeout)
            except Exception as exc:
                raise ServiceError(f"Kafka: committed offsets unavailable ({exc})") from None
            unknown = []
            for tp in committed:
                if tp.offset >= 0:
                    starts[(tp.topic, tp.partition)] = tp.offset
                else:
                    unknown.append((tp.topic, tp.partition))
            if unknown:
                starts.update(self._start_offsets(unknown))
        indexes: dict[str, WrittenIndex] = {}
        if self.idempotent and found:
            indexes = self._scan_outputs(found)
        for topic in topics:
            cp = found.get(topic)
            state = cp.unit(topic) if cp is not None else None
            start = {p: starts.get((topic, p), 0) for p in self.topics.get(topic, [])}
            unit = Unit(topic, self.topics.get(topic, []), self._pipeline(), start, state)
            unit.start_recovery(indexes.get(topic))
            self.units[topic] = unit
            if cp is not None:
                log.info("%s: resuming from checkpoint %s/%d: %s%s", topic, cp.life,
                         cp.sequence, {p: o for p, o in sorted(unit.position.items())},
                         f"; re-reading up to {unit.reread_until}" if unit.reread_until else "")
            else:
                log.info("%s: no checkpoint; starting at %s", topic, start)
        self.data.incremental_assign([TopicPartition(t, p, self.units[t].position[p])
                                      for t in topics for p in self.units[t].position])
        self.metrics.units.set(len(self.units))
        self.dirty = True
        self.checkpoint(force=True)
        core = next((u.translator.is_native for u in self.units.values()), None)
        log.info("adopted %d topic(s) in %.2f s%s", len(topics), time.monotonic() - started,
                 "" if core is None else f"; translation core: {'native' if core else 'Python'}")

    def _start_offsets(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        from confluent_kafka import TopicPartition

        if self.config.start_offsets == "latest":
            return end_offsets(self.reader, partitions, self.timeout)
        out = {}
        for topic, partition in partitions:
            low, _ = self.reader.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=self.timeout, cached=False)
            out[(topic, partition)] = max(low, 0)
        return out

    def _scan_outputs(self, found: dict[str, Checkpoint]) -> dict[str, WrittenIndex]:
        """Read the output from the checkpoints' frontier to the end."""
        distinct = {(cp.life, cp.sequence): cp for cp in found.values()}
        frontier = merge_frontiers([cp.frontier for cp in distinct.values()])
        if not frontier:
            return {}
        ends: dict[tuple[str, int], int] = {}
        read = 0

        def messages() -> Iterable[Any]:
            nonlocal read
            for message in read_ranges(self.reader, {tp: (o, None)
                                                     for tp, o in frontier.items()},
                                       self.timeout):
                read += 1
                tp = (message.topic(), message.partition())
                ends[tp] = max(ends.get(tp, 0), message.offset() + 1)
                yield message

        indexes = index_outputs(messages(), set(found))
        self.metrics.recovered.inc(read)
        log.info("recovery: read %d output records after the checkpoint frontier; %s", read,
                 ", ".join(f"{t}: {len(i)} written" for t, i in sorted(indexes.items()))
                 or "nothing of these topics")
        merged = dict(self.recovery_frontier or {})
        for tp, offset in frontier.items():
            merged[tp] = min(merged.get(tp, offset), offset)
            self.registered.add(tp[0])
            self.ends[tp] = max(self.ends.get(tp, 0), ends.get(tp, offset))
        self.recovery_frontier = merged
        return indexes

    # -- output -----------------------------------------------------------------------------
    def _encode(self, unit: Unit, changes: list[ChangeRecord], dead: list[DeadLetter]
                ) -> list[OutputRecord]:
        out: list[OutputRecord] = []
        encode = self.output.encode
        index = unit.index
        metrics = self.metrics
        for change in changes:
            # a record too large for the producer is replaced here, before the index is asked,
            # so that a restart finds the dead letter written in its place
            records = [r if self._fits(r) else self._without_value(r) for r in encode(change)]
            if index is None:
                out.extend(records)
                continue
            decisions: dict[str, Decision] = {}
            for record in records:
                if record.id in index.ids:
                    metrics.output_skipped.labels("already_written").inc()
                    self.skipped += 1
                    unit.not_rewritten += 1
                    continue
                if record.kind == "dead_letter":
                    out.append(record)
                    continue
                decision = decisions.get(record.format)
                if decision is None:
                    decision = decisions[record.format] = index.decide(
                        change.event_id, record.format, change.lineage)
                    if decision is Decision.DIVERGENT:
                        self.divergent += 1
                        metrics.divergent.inc()
                        log.warning("%s: change %s (%s %s) is written although part of its input "
                                    "already went out in another change before the restart",
                                    unit.topic, change.event_id, change.op, change.seq)
                if decision is Decision.WRITTEN:
                    metrics.output_skipped.labels("already_written").inc()
                    self.skipped += 1
                    unit.not_rewritten += 1
                    continue
                out.append(record)
        for letter in dead:
            if unit.already_written_dead_letter(letter):
                metrics.output_skipped.labels("reread_dead_letter").inc()
                self.skipped += 1
                unit.not_rewritten += 1
                continue
            record = self.output.dead_letter(letter)
            if index is not None and record.id in index.ids:
                metrics.output_skipped.labels("already_written").inc()
                self.skipped += 1
                unit.not_rewritten += 1
                continue
            out.append(record)
        return out

    def _register(self, topics: set[str]) -> None:
        """Before the first write to an output topic: know its partitions' ends and, with the
        idempotent guarantee, put them in a checkpoint (the frontier), so recovery reads what
        this life writes there."""
        c = self.config
        for topic in topics:
            if topic in self.topics or topic in self.units or self._is_input(topic) \
                    or topic in (c.checkpoint_topic_name, c.coordination_topic_name):
                raise ConfigError(f"output topic {topic!r} is an input or internal topic "
                                  "(check output_topic / dlq_topic)")
        if c.create_topics:
            create_topics(c.servers, dict.fromkeys(topics, c.output_partitions),
                          c.client("admin"), self.timeout)
        partitions: list[tuple[str, int]] = []
        metadata = self._metadata()
        for topic in sorted(topics):
            meta = metadata.topics.get(topic)
            if meta is None or meta.error is not None or not meta.partitions:
                raise ServiceError(f"output topic {topic} does not exist (create it, or set "
                                   "create_topics)")
            partitions.extend((topic, p) for p in sorted(meta.partitions))
        for tp, end in end_offsets(self.reader, partitions, self.timeout).items():
            self.ends[tp] = max(self.ends.get(tp, 0), end)
        self.registered |= topics
        if self.idempotent and self.last_checkpoint is not None:
            last = self.last_checkpoint
            frontier = {t: dict(ps) for t, ps in last.frontier.items()}
            for topic, partition in partitions:
                frontier.setdefault(topic, {})[partition] = self.ends[(topic, partition)]
            self._write_checkpoint(msgspec.structs.replace(
                last, sequence=self._next_sequence(), time_ms=int(time.time() * 1000),
                frontier=frontier))

    def _produce(self, records: list[OutputRecord]) -> None:
        if not records:
            return
        from confluent_kafka import KafkaError, KafkaException
        new = {r.topic for r in records} - self.registered
        if new:
            self._register(new)
        producer = self.producer
        if self.transactions and not self.in_transaction:
            self._begin()
        delivered = self._delivered
        counts: dict[str, int] = {}
        for r in records:
            while True:
                try:
                    producer.produce(r.topic, r.value, r.key, headers=list(r.headers),
                                     timestamp=r.timestamp or 0, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.05)
                    self._check_service()
                except KafkaException as exc:
                    if r.value is None or exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                        raise
                    r = self._without_value(r)
            counts[r.format] = counts.get(r.format, 0) + 1
        producer.poll(0)
        for fmt, n in counts.items():
            if fmt == "dead_letter":
                self.metrics.output_dead_letters.inc(n)
            else:
                self.metrics.output_records.labels(fmt).inc(n)
        self.written += len(records)
        self.dirty = True

    def _fits(self, r: OutputRecord) -> bool:
        """Whether the producer takes ``r`` (``message.max.bytes``, counted with a margin for
        the record's framing; a record the estimate lets through and the producer refuses is
        replaced in :meth:`_produce`)."""
        size = len(r.value or b"") + len(r.key or b"") + _RECORD_MARGIN + sum(
            len(k) + len(v or b"") for k, v in r.headers)
        return r.value is None or size <= self.max_message_bytes

    def _without_value(self, r: OutputRecord) -> OutputRecord:
        """What goes in place of a record larger than the producer takes
        (``message.max.bytes``): the stream goes on. A change becomes its format's encode error,
        a dead letter loses its value; both keep their key, headers and input coordinates and
        name the size of the value left out."""
        assert r.value is not None
        size = len(r.value)
        removed = (VALUE_REMOVED_HEADER, str(size).encode())
        log.warning("%s record from %s[%d]@%s: %d bytes, larger than the producer takes "
                    "(message.max.bytes); written as a dead letter without its value", r.format,
                    r.source_topic, r.source_partition, r.source_offset, size)
        if r.kind == "dead_letter":
            return msgspec.structs.replace(r, value=None, headers=(*r.headers, removed))
        counters = self.output.counters
        counters.records[r.format] -= 1
        counters.encode_errors[r.format] = counters.encode_errors.get(r.format, 0) + 1
        # the change's own id, seq and lineage headers stay out: the dead letter has its own id
        kept = tuple(h for h in r.headers if h[0] not in _CHANGE_HEADERS)
        source = RawRecord(r.source_topic, r.source_partition, r.source_offset, r.timestamp,
                           r.key, None, (*kept, removed))
        return self.output.dead_letter(DeadLetter(
            source, f"encode-{r.format}", "EncodeError",
            f"{size} bytes of {r.format}: larger than the producer takes (message.max.bytes)"))

    def _delivered(self, error: Any, message: Any) -> None:
        if error is not None:
            self.delivery_errors.append(f"{message.topic()}: {error.str()}")
            return
        key = (message.topic(), message.partition())
        end = message.offset() + 1
        if end > self.ends.get(key, 0):
            self.ends[key] = end

    def _begin(self) -> None:
        try:
            self.producer.begin_transaction()
        except Exception as exc:
            raise ServiceError(f"Kafka: cannot begin a transaction: {exc}") from None
        self.in_transaction = True

    def _flush(self) -> None:
        deadline = time.monotonic() + self.timeout
        while len(self.producer) and time.monotonic() < deadline:
            self.producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
            if self.stopping.is_set() and time.monotonic() > self.shutdown_deadline:
                break
        if len(self.producer):
            raise ServiceError(f"Kafka: {len(self.producer)} records undelivered after "
                               f"{self.timeout:.0f} s")
        if self.delivery_errors:
            raise ServiceError(f"Kafka: delivery failed: {self.delivery_errors[0]}")

    # -- checkpoints ------------------------------------------------------------------------
    def _next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    def _frontier(self) -> dict[str, dict[int, int]]:
        if not self.idempotent:
            return {}
        recovery = self.recovery_frontier or {}
        frontier: dict[str, dict[int, int]] = {}
        for (topic, partition), end in self.ends.items():
            if topic in self.registered:
                low = recovery.get((topic, partition))
                frontier.setdefault(topic, {})[partition] = end if low is None else min(end, low)
        for (topic, partition), low in recovery.items():
            frontier.setdefault(topic, {}).setdefault(partition, low)
        return frontier

    def _write_checkpoint(self, cp: Checkpoint) -> None:
        value = checkpoints.encode(cp)
        topic = self.config.checkpoint_topic_name
        if self.transactions:
            self.producer.produce(topic, value, self.config.group_id.encode())
            return
        self.producer.produce(topic, value, self.config.group_id.encode(),
                              on_delivery=self._delivered)
        self._flush()
        self.last_checkpoint = cp

    def checkpoint(self, force: bool = False) -> None:
        """Flush the output, write a checkpoint, commit the input offsets."""
        from confluent_kafka import TopicPartition

        if not self.dirty and not force:
            return
        started = time.perf_counter()
        if self.transactions and not self.in_transaction:
            self._begin()
        if not self.transactions:
            self._flush()
        self.hooks("after-produce")
        states = [unit.state() for _, unit in sorted(self.units.items())]
        self._end_recoveries(states)  # before the frontier: a finished recovery lets it move
        cp = Checkpoint(self.config.group_id, self.instance, self.life, self._next_sequence(),
                        int(time.time() * 1000), states, self._frontier())
        offsets = [TopicPartition(s.topic, p.partition, p.resume)
                   for s in states for p in s.partitions]
        if self.transactions:
            self._write_checkpoint(cp)
            try:
                if offsets:
                    self.producer.send_offsets_to_transaction(
                        offsets, self.coord.consumer_group_metadata(), self.timeout)
                self.hooks("after-checkpoint")
                self.producer.commit_transaction(self.timeout)
            except Exception as exc:
                raise ServiceError(f"Kafka: transaction not committed: {exc}") from None
            self.in_transaction = False
            if self.delivery_errors:
                raise ServiceError(f"Kafka: delivery failed: {self.delivery_errors[0]}")
            self.last_checkpoint = cp
        else:
            self._write_checkpoint(cp)
            self.hooks("after-checkpoint")
            if offsets:
                try:
                    self.coord.commit(offsets=offsets, asynchronous=True)
                except Exception as exc:  # informational: the checkpoint is what counts
                    log.warning("offset commit failed: %s", exc)
        self.dirty = False
        self.metrics.checkpoint.observe(time.perf_counter() - started)
        self.metrics.checkpoints.inc()
        self.next_checkpoint = time.monotonic() + self.config.commit_interval_ms / 1000
        self._observe(states)

    def _end_recoveries(self, states: list[Any]) -> None:
        """Units whose every partition resumes past what an earlier life wrote need the
        written index no more; once none does, the frontier follows the output again."""
        done = True
        for state in states:
            unit = self.units[state.topic]
            if unit.recovering:
                if unit.end_recovery_if_done({p.partition: p.resume for p in state.partitions}):
                    log.info("%s: recovery complete; %d record(s) found already written, not "
                             "written again", state.topic, unit.not_rewritten)
                else:
                    done = False
        if done and self.recovery_frontier is not None:
            self.recovery_frontier = None

    def _observe(self, states: list[Any]) -> None:
        from confluent_kafka import TopicPartition

        for unit in self.units.values():
            self.metrics.count_translator(unit.topic, unit.translator.counters)
            self.metrics.pending.labels(unit.topic).set(unit.translator.counters.pending)
            for kind, size in unit.translator.state_size().items():
                self.metrics.state.labels(unit.topic, kind).set(size)
            for partition, position in unit.position.items():
                with contextlib.suppress(Exception):
                    _, high = self.data.get_watermark_offsets(TopicPartition(unit.topic,
                                                                             partition),
                                                              cached=True)
                    if high >= 0:
                        self.metrics.lag.labels(unit.topic, str(partition)).set(
                            max(0, high - position))

    # -- main loop --------------------------------------------------------------------------
    def _check_service(self) -> None:
        if self.callback_error is not None:
            error, self.callback_error = self.callback_error, None
            raise error
        since = self.health.broker_down_since
        if since is not None and time.monotonic() - since > self.timeout:
            raise ServiceError(f"Kafka at {self.config.servers} unreachable for "
                               f"{self.timeout:.0f} s")

    def _step(self) -> None:
        now = time.monotonic()
        self.health.beat = now
        self.metrics.ready.set(1 if self.health.ready() else 0)
        self.coord.poll(0)
        self._check_service()
        if self.health.rebalancing or not self.units:
            if now >= self.next_refresh and not self.health.rebalancing:
                self._refresh_topics()
            self.producer.poll(0)
            time.sleep(self.config.poll_timeout_ms / 1000)
            return
        if now >= self.next_refresh:
            self._refresh_topics()
        messages = self.data.consume(self.config.batch_size, self.config.poll_timeout_ms / 1000)
        started = time.perf_counter()
        batches: dict[str, list[RawRecord]] = {}
        ends: list[Any] = []
        if messages:
            self._broker_answered()
        for m in messages:
            error = m.error()
            if error is not None:
                if self._consume_error(m, error):
                    ends.append(m)
                continue
            ts_type, ts = m.timestamp()
            topic: str = m.topic()  # type: ignore[assignment]
            batch = batches.get(topic)
            if batch is None:
                batch = batches[topic] = []
            batch.append(RawRecord(topic, m.partition(), m.offset(),  # type: ignore[arg-type]
                                   ts if ts_type else None, m.key(), m.value(),  # type: ignore[arg-type]
                                   tuple(m.headers() or ())))  # type: ignore[arg-type]
        units = self.units
        for topic, records in batches.items():
            unit = units.get(topic)
            if unit is not None:
                unit.process(records, self._on_transaction_end)
                self.metrics.count_translator(topic, unit.translator.counters)
                self.dirty = True
        for m in ends:  # after the records that came before them
            unit = units.get(m.topic())
            if unit is not None:
                unit.reached_end(m.partition(), m.offset())
        for unit in units.values():
            if unit.reprobe:
                self._reprobe(unit)
        idle = self.config.idle_timeout_ms / 1000
        out: list[OutputRecord] = []
        for unit in units.values():
            unit.check_idle(idle, now)
            if unit.held_ends:
                unit.apply_ends()
            if unit.pipeline.has_output:
                changes, dead = unit.drain()
                out.extend(self._encode(unit, changes, dead))
        self._produce(out)
        if messages or out:
            self.metrics.batch.observe(time.perf_counter() - started)
        if time.monotonic() >= self.next_checkpoint:
            self.checkpoint()
        if now >= self.next_summary:
            self.next_summary = now + _SUMMARY_EVERY_S
            self._summary()

    def _reprobe(self, unit: Unit) -> None:
        """Seek partitions to their position: the consumer fetches them again and reports
        their end afresh (or their new records)."""
        from confluent_kafka import TopicPartition

        for partition in sorted(unit.reprobe):
            try:
                self.data.seek(TopicPartition(unit.topic, partition, unit.position[partition]))
            except Exception as exc:  # not fetching yet: the end will be reported anyway
                log.debug("seek %s[%d]: %s", unit.topic, partition, exc)
        unit.reprobe.clear()

    def _consume_error(self, message: Any, error: Any) -> bool:
        """Handle a consumer event; ``True`` for an end-of-partition event."""
        from confluent_kafka import KafkaError

        code = error.code()
        if code == KafkaError._PARTITION_EOF:
            self._broker_answered()
            return True
        if error.fatal():
            raise ServiceError(f"Kafka: {error.str()}")
        if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            log.error("%s[%s]: offset out of range (records deleted by retention before they "
                      "were read are lost): %s", message.topic(), message.partition(),
                      error.str())
            return False
        log.warning("consumer: %s", error.str())
        return False

    def _on_transaction_end(self, commit: bytes, total: int | None,
                            per_table: dict[str, int]) -> None:
        for unit in self.units.values():
            if unit.kind == "data":
                unit.offer_end(commit, total, per_table)

    def _summary(self) -> None:
        for topic, unit in sorted(self.units.items()):
            log.info("%s: %s", topic, unit.counters().summary())
        log.info("written %d records (skipped %d already written, %d divergent); %s",
                 self.written, self.skipped, self.divergent, self.output.counters.summary())

    # -- run --------------------------------------------------------------------------------
    def _signal(self, signum: int, frame: Any) -> None:
        if self.stopping.is_set():
            if signum == signal.SIGINT:
                log.error("second interrupt: exiting at once")
                os._exit(130)
            return
        log.info("%s: finishing the batch, flushing, checkpointing (at most %.1f s)",
                 signal.Signals(signum).name, self.config.shutdown_timeout_ms / 1000)
        self.shutdown_deadline = time.monotonic() + self.config.shutdown_timeout_ms / 1000
        self.stopping.set()
        watchdog = threading.Timer(self.config.shutdown_timeout_ms / 1000, self._too_slow)
        watchdog.daemon = True
        watchdog.start()

    def _too_slow(self) -> None:
        log.error("shutdown took longer than %.1f s: exiting without a final checkpoint "
                  "(the next start recovers)", self.config.shutdown_timeout_ms / 1000)
        logging.shutdown()
        os._exit(1)

    def run(self) -> int:
        """Run until SIGTERM/SIGINT; returns the exit code (raises ServiceError/ConfigError)."""
        c = self.config
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._signal)
            signal.signal(signal.SIGINT, self._signal)
        log.info("debezium-bridge sidecar %s (life %s): %s", self.instance, self.life,
                 msgspec.json.encode(c.masked()).decode())
        if c.http_port is not None:
            self.http, port = serve(c.http_host, c.http_port, self.metrics, self.health)
            log.info("http endpoint on %s:%d (/metrics, /healthz, /readyz)", c.http_host, port)
        self._open()
        self.health.started = True
        try:
            while not self.stopping.is_set():
                self._step()
            if self.units and not self.health.rebalancing:
                self.checkpoint()
            self._write_counters()
            self._summary()
        except BaseException:
            self.failed = True
            raise
        finally:
            self._close()
        log.info("stopped")
        return 0

    def _write_counters(self) -> None:
        path = self.config.counters_json
        if not path:
            return
        doc = {"instance": self.instance, "life": self.life,
               "topics": {t: u.counters().as_dict() for t, u in sorted(self.units.items())},
               "output": self.output.counters.as_dict(), "written": self.written,
               "skipped": self.skipped, "divergent": self.divergent}
        with open(path, "wb") as handle:
            handle.write(msgspec.json.encode(doc) + b"\n")

    def _close(self) -> None:
        self.health.started = False
        for name in ("coord", "data", "reader"):
            client = getattr(self, name, None)
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()
        producer = getattr(self, "producer", None)
        if producer is not None:
            with contextlib.suppress(Exception):
                producer.flush(min(5.0, self.timeout))
        http = getattr(self, "http", None)
        if http is not None:
            http.shutdown()


def run(config: SidecarConfig) -> int:
    """Run a sidecar until it is stopped; returns the exit code."""
    return Sidecar(config).run()
