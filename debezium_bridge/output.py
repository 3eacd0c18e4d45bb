"""The one output layer every runner writes through.

A runner hands change records and dead letters to an :class:`Output`; it gets back
:class:`OutputRecord` s, Kafka-ready (topic, key, value, headers) whatever the sink is (a dump
file, a Kafka producer, Spark rows):

* **Fan-out** to the output formats (:class:`OutputFormat`): the canonical record and its
  exploded and flat views (JSON), SQL Server CES CloudEvents (JSON or Avro, segmented),
  Debezium envelopes (JsonConverter with or without schema, Confluent Avro).
* **Topics** from one template (:attr:`OutputSettings.output_topic`) with ``{topic}`` (the
  source topic), ``{prefix}`` (the connector's ``source.name``), ``{db}``, ``{schema}``,
  ``{table}``, ``{table_id}`` and ``{format}``; by default the format's natural topic.
* **Keys per format**: the primary key as JSON for the canonical views (the flat view's rows are
  keyed by their own key, so a key change's delete goes to the old key), the partition-key
  scheme for CES, the Debezium key for envelopes. Partitions are left to the sink, which uses
  Kafka's murmur2 of the key (:mod:`debezium_bridge.partitioner`) like the Java producer.
* **Headers** on every change record: ``debezium_bridge.event_id`` (deterministic: a replayed
  input gives the same id), ``debezium_bridge.seq`` (sorts like the position) and
  ``debezium_bridge.lineage`` (the input records it was made from, JSON
  ``[[topic, partition, offset], …]``).
* **Encode failures are dead letters**: a change one format cannot hold (a value that does not
  fit its CES column type, ...) becomes a dead-letter record for that format (stage
  ``encode-<format>``) and is counted in ``encode_errors``; the other formats still get it.
* **One counting rule**: the core counts input records (``records_in = changes_out + merged +
  duplicates + side_records + tombstones + dead_letters + skipped + pending``); the output
  counts, per format, the records written, the tombstones and the encode errors
  (:class:`OutputCounters`), so every released change is in ``changes_out`` whether or not a
  format could hold it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

import msgspec
from pydantic import Field

from debezium_bridge.config import Settings
from debezium_bridge.errors import ConfigError, RecordError
from debezium_bridge.formats.canonical import exploded_rows, flat_rows
from debezium_bridge.formats.ces.encode import CesEncoder
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.columns import ColumnCatalog
from debezium_bridge.formats.debezium.registry import SchemaRegistrar
from debezium_bridge.formats.debezium.writer import (
    DebeziumOutOptions,
    DebeziumWriter,
    KeyChangeLedger,
)
from debezium_bridge.model.change import ChangeRecord, epoch_ms
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import Header

EVENT_ID_HEADER = "debezium_bridge.event_id"
SEQ_HEADER = "debezium_bridge.seq"
LINEAGE_HEADER = "debezium_bridge.lineage"
VALUE_REMOVED_HEADER = "debezium_bridge.value_removed"
"""On a record written without its value (larger than the producer takes): the value's size."""


class OutputFormat(StrEnum):
    """What a change becomes."""

    CANONICAL = "canonical"
    EXPLODED = "exploded"
    FLAT = "flat"
    CES = "ces"
    CES_AVRO = "ces-avro"
    DEBEZIUM = "debezium"
    DEBEZIUM_AVRO = "debezium-avro"

    @property
    def binary(self) -> bool:
        """Values are bytes that are not text (Avro)."""
        return self in (OutputFormat.CES_AVRO, OutputFormat.DEBEZIUM_AVRO)


_CANONICAL_VIEWS = frozenset((OutputFormat.CANONICAL, OutputFormat.EXPLODED, OutputFormat.FLAT))


class OutputSettings(Settings):
    """Where and how changes are written (file keys and flags of every runner)."""

    output_topic: str | None = None
    """Topic template of the output records: ``{topic}`` (source topic), ``{prefix}``
    (``source.name``), ``{db}``, ``{schema}``, ``{table}``, ``{table_id}``, ``{format}``.
    Default: ``{topic}.{format}`` for the canonical views, the stream group (``ces.stream_group``)
    for CES, ``<prefix>.<db>.<schema>.<table>`` for Debezium envelopes."""
    dlq_topic: str = "debezium-bridge.dlq"
    """Topic of dead-letter records (original key, value and headers plus
    ``__connect.errors.*`` headers)."""
    output_tombstones: bool = False
    """After each delete, a tombstone (the key, a null value) in the canonical, exploded and
    flat outputs, for compacted topics (Debezium envelopes: ``debezium.tombstones``)."""
    ces: CesOptions = Field(default_factory=CesOptions)
    """CES CloudEvents output (and input) switches; see docs/ces.md."""
    debezium: DebeziumOutOptions = Field(default_factory=DebeziumOutOptions)
    """Debezium envelope output switches."""


class OutputRecord(msgspec.Struct, frozen=True, gc=False):
    """One record to write: a change in one format, or a dead letter."""

    kind: Literal["change", "dead_letter"]
    format: str
    """The output format, or ``dead_letter``."""
    id: str
    """Deterministic id of this record (``debezium_bridge.event_id`` header)."""
    topic: str
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int | None
    """Epoch milliseconds: the commit time of the change (``None`` for dead letters)."""
    table_id: str | None
    op: str | None
    seq: str | None
    commit_ts: str | None
    source_topic: str
    """Coordinates of the (last) input record it came from."""
    source_partition: int
    source_offset: int | None


@dataclass(slots=True)
class OutputCounters:
    """Per format: records written, tombstones among them, changes it could not hold."""

    records: dict[str, int] = field(default_factory=dict)
    tombstones: dict[str, int] = field(default_factory=dict)
    encode_errors: dict[str, int] = field(default_factory=dict)
    dead_letters: int = 0
    """Dead-letter records written (rejected input + encode errors)."""

    @property
    def total_encode_errors(self) -> int:
        return sum(self.encode_errors.values())

    def as_dict(self) -> dict[str, object]:
        return {"records": dict(self.records), "tombstones": dict(self.tombstones),
                "encode_errors": dict(self.encode_errors), "dead_letters": self.dead_letters}

    def summary(self) -> str:
        parts = [f"{name} {count}" + (f" ({self.tombstones[name]} tombstones)"
                                      if self.tombstones.get(name) else "")
                 for name, count in self.records.items()]
        errors = self.total_encode_errors
        return (f"output: {', '.join(parts) or 'nothing'}; encode_errors={errors}"
                f"; dead_letter_records={self.dead_letters}")


_JSON = msgspec.json.Encoder()
_Item = tuple[str, bytes | None, bytes | None, tuple[Header, ...]]


def _record_id(*parts: object) -> str:
    text = "\x00".join(str(p) for p in parts)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


class Output:
    """Encodes changes into every chosen format and dead letters into DLQ records.

    Stateful (CES sequence numbers, schema ids, topic cache): one per stream. Not thread-safe.
    """

    def __init__(self, formats: Sequence[OutputFormat | str],
                 settings: OutputSettings | None = None, *,
                 catalog: ColumnCatalog | None = None,
                 registrar: SchemaRegistrar | None = None,
                 ledger: KeyChangeLedger | None = None) -> None:
        """``ledger``: key changes the input wrote as one update (change-table rows), so that
        Debezium envelopes are written as the connector writes those."""
        self.formats = tuple(OutputFormat(f) for f in formats)
        if not self.formats or len(set(self.formats)) != len(self.formats):
            raise ConfigError("name each output format once")
        self.settings = settings or OutputSettings()
        self.catalog = catalog if catalog is not None else ColumnCatalog()
        self.counters = OutputCounters()
        s = self.settings
        self._ces = {f: CesEncoder(s.ces, self.catalog,
                                   encoding="avro" if f.binary else "json")
                     for f in self.formats if f in (OutputFormat.CES, OutputFormat.CES_AVRO)}
        self._debezium: dict[OutputFormat, DebeziumWriter] = {}
        for f in self.formats:
            if f in (OutputFormat.DEBEZIUM, OutputFormat.DEBEZIUM_AVRO):
                if f.binary and registrar is None:
                    raise ConfigError("Debezium Avro output needs a schema registry (or "
                                      "offline schema ids)")
                self._debezium[f] = DebeziumWriter(s.debezium, self.catalog,
                                                   encoding="avro" if f.binary else "json",
                                                   registrar=registrar, ledger=ledger)
        self._topics: dict[tuple[str, str, str], str] = {}

    # -- changes ---------------------------------------------------------------------------
    def encode(self, change: ChangeRecord) -> list[OutputRecord]:
        """The records of one change in every format (dead-letter records for the formats that
        cannot hold it)."""
        out: list[OutputRecord] = []
        for fmt in self.formats:
            try:
                items = self._items(change, fmt)
            except RecordError as exc:
                self.counters.encode_errors[fmt] = self.counters.encode_errors.get(fmt, 0) + 1
                out.append(self.dead_letter(DeadLetter.of_change(change, exc,
                                                                 f"encode-{fmt}")))
                continue
            records = self.counters.records
            records[fmt] = records.get(fmt, 0) + len(items)
            out.extend(self._change_record(change, fmt, index, topic, key, value, headers)
                       for index, (topic, key, value, headers) in enumerate(items))
        return out

    def encode_many(self, changes: Iterable[ChangeRecord]) -> list[OutputRecord]:
        return [record for change in changes for record in self.encode(change)]

    def _change_record(self, change: ChangeRecord, fmt: OutputFormat, index: int, topic: str,
                       key: bytes | None, value: bytes | None,
                       headers: tuple[Header, ...]) -> OutputRecord:
        record_id = change.event_id if fmt is OutputFormat.CANONICAL and index == 0 \
            else f"{change.event_id}:{fmt}:{index}"
        lineage = change.lineage
        where = lineage[-1]
        ours = ((EVENT_ID_HEADER, record_id.encode()), (SEQ_HEADER, change.seq.encode()),
                (LINEAGE_HEADER, _JSON.encode([(r.topic, r.partition, r.offset)
                                               for r in lineage])))
        if value is None:
            tombstones = self.counters.tombstones
            tombstones[fmt] = tombstones.get(fmt, 0) + 1
        return OutputRecord("change", fmt, record_id, topic, key, value, headers + ours,
                            epoch_ms(change.commit_ts), change.table_id, change.op, change.seq,
                            change.commit_ts, where.topic, where.partition, where.offset)

    def _items(self, change: ChangeRecord, fmt: OutputFormat) -> list[_Item]:
        """(topic, key, value, headers) of one format."""
        if fmt in _CANONICAL_VIEWS:
            topic = self.topic(change, fmt)
            key = _JSON.encode(change.key)
            if fmt is OutputFormat.CANONICAL:
                items: list[_Item] = [(topic, key, _JSON.encode(change), ())]
            elif fmt is OutputFormat.EXPLODED:
                items = [(topic, key, _JSON.encode(row), ()) for row in exploded_rows(change)]
            else:
                items = [(topic, _JSON.encode({k: row[k] for k in change.key if k in row}),
                          _JSON.encode(row), ()) for row in flat_rows(change)]
            if self.settings.output_tombstones:
                items += self._tombstones(change, topic)
            return items
        if fmt in self._ces:
            topic = self.topic(change, fmt) if self.settings.output_topic \
                else self.settings.ces.stream_group
            return [(topic, m.key, m.value, m.headers) for m in self._ces[fmt].encode(change)]
        writer = self._debezium[fmt]
        return [(self.topic(change, fmt) if self.settings.output_topic else r.topic,
                 r.key, r.value, r.headers) for r in writer.encode(change)]

    def _tombstones(self, change: ChangeRecord, topic: str) -> list[_Item]:
        if change.op == "delete":
            return [(topic, _JSON.encode(change.key), None, ())]
        if change.key_changed and change.old_key is not None:
            return [(topic, _JSON.encode(change.old_key), None, ())]
        return []

    def topic(self, change: ChangeRecord, fmt: OutputFormat) -> str:
        """The output topic of ``change`` in ``fmt`` (the template, or ``{topic}.{format}``)."""
        source = change.lineage[-1].topic if change.lineage else ""
        cache_key = (source, change.table_id, fmt)
        topic = self._topics.get(cache_key)
        if topic is None:
            template = self.settings.output_topic or "{topic}.{format}"
            table = change.table
            try:
                topic = template.format(topic=source, prefix=change.source.name or "",
                                        db=table.db, schema=table.schema, table=table.name,
                                        table_id=change.table_id, format=fmt.value)
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(f"output_topic {template!r}: unknown or malformed "
                                  f"placeholder {exc}") from None
            if len(self._topics) > 65_536:
                self._topics.clear()
            self._topics[cache_key] = topic
        return topic

    # -- dead letters ----------------------------------------------------------------------
    def dead_letter(self, letter: DeadLetter) -> OutputRecord:
        """The DLQ record of a dead letter: original key, value and headers plus the
        ``__connect.errors.*`` headers, to :attr:`OutputSettings.dlq_topic`."""
        self.counters.dead_letters += 1
        record = letter.to_record(self.settings.dlq_topic)
        r = letter.record
        record_id = _record_id(r.topic, r.partition, r.offset, letter.stage)
        return OutputRecord("dead_letter", "dead_letter", record_id, record.topic, record.key,
                            record.value, (*record.headers, (EVENT_ID_HEADER, record_id.encode())),
                            r.timestamp, None, None, None, None, r.topic, r.partition, r.offset)

    # -- end of stream ---------------------------------------------------------------------
    def summary(self) -> str:
        lines = [self.counters.summary()]
        lines += [encoder.counters.summary() for encoder in self._ces.values()]
        lines += [writer.counters.summary() for writer in self._debezium.values()]
        return "\n".join(lines)
