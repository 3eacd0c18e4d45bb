"""The Kafka record as the core sees it: a small Protocol plus one concrete implementation.

Every runner adapts its own message type (a Spark row, a confluent-kafka ``Message``, a line of a
dump file) to :class:`KafkaRecord`; the translation core never imports a Kafka client or Spark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Protocol

import msgspec

Header = tuple[str, bytes | None]
"""One Kafka header: name and raw value (``None`` for a null-valued header)."""


class KafkaRecord(Protocol):
    """What the core needs to know about one consumed Kafka record."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int | None: ...
    @property
    def timestamp(self) -> int | None:
        """Kafka record timestamp in epoch milliseconds, when known."""
        ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> Sequence[Header]: ...


Partition = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
"""A Kafka partition: int32 (the protocol's type)."""
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
"""A Kafka offset or timestamp: int64."""


def fits_kafka_types(record: RawRecord) -> bool:
    """Whether the record's partition is an int32 and its offset an int64, as Kafka's are (a
    record built by hand or read from a file may hold others)."""
    offset = record.offset
    return -(2**31) <= record.partition < 2**31 and (offset is None or -(2**63) <= offset < 2**63)


class RawRecord(msgspec.Struct, frozen=True, gc=False):
    """An immutable Kafka record (topic, partition, offset, timestamp, key, value, headers).

    ``msgspec.Struct`` gives a frozen, slotted record that is about six times cheaper to build than
    a frozen dataclass, which matters on the hot path.
    """

    topic: str
    partition: int = 0
    offset: int | None = None
    timestamp: int | None = None
    key: bytes | None = None
    value: bytes | None = None
    headers: tuple[Header, ...] = ()

    def header(self, name: str) -> bytes | None:
        """The value of the last header called ``name`` (``None`` if absent or null)."""
        for header_name, header_value in reversed(self.headers):
            if header_name == name:
                return header_value
        return None


def as_raw_record(record: KafkaRecord) -> RawRecord:
    """Copy any :class:`KafkaRecord` into a :class:`RawRecord`."""
    if isinstance(record, RawRecord):
        return record
    return RawRecord(
        topic=record.topic,
        partition=record.partition,
        offset=record.offset,
        timestamp=record.timestamp,
        key=record.key,
        value=record.value,
        headers=tuple(record.headers or ()),
    )


def coordinates(record: KafkaRecord) -> str:
    """``topic[partition]@offset`` for messages and logs."""
    return f"{record.topic}[{record.partition}]@{record.offset}"
