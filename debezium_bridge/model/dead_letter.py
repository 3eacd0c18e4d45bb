"""Dead letters: input that cannot be translated, kept with its bytes and the reason."""

from __future__ import annotations

import msgspec

from debezium_bridge.errors import RecordError
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.records import Header, RawRecord

ERROR_HEADER_PREFIX = "__connect.errors."
_JSON = msgspec.json.Encoder()


class DeadLetter(msgspec.Struct, frozen=True, gc=False):
    """One rejected input record and why (stage, exception class, message)."""

    record: RawRecord
    stage: str
    error_class: str
    message: str
    error_module: str = "debezium_bridge.errors"

    @classmethod
    def of(cls, error: Exception, record: RawRecord, stage: str | None = None) -> DeadLetter:
        """A dead letter for ``error``; ``error_class`` is the exception's qualified name."""
        kind = type(error)
        message = error.message if isinstance(error, RecordError) else f"unexpected: {error}"
        return cls(record=record,
                   stage=stage or (error.stage if isinstance(error, RecordError) else "decode"),
                   error_class=kind.__qualname__, message=message, error_module=kind.__module__)

    @classmethod
    def of_change(cls, change: ChangeRecord, error: Exception, stage: str = "encode"
                  ) -> DeadLetter:
        """A dead letter for a change record an output format cannot hold: the record's
        canonical JSON as the value, at the coordinates of the (last) input record that made
        it."""
        where = change.lineage[-1] if change.lineage else None
        raw = RawRecord(topic=where.topic if where else f"canonical:{change.table_id}",
                        partition=where.partition if where else 0,
                        offset=where.offset if where else None,
                        key=_JSON.encode(change.key), value=_JSON.encode(change))
        return cls.of(error, raw, stage=stage)

    def context_headers(self) -> tuple[Header, ...]:
        """Kafka Connect-style ``__connect.errors.*`` headers describing the failure."""
        r = self.record
        fields = (
            ("topic", r.topic),
            ("partition", str(r.partition)),
            ("offset", "" if r.offset is None else str(r.offset)),
            ("stage", self.stage),
            ("class.name", "debezium_bridge"),
            ("exception.class.name", f"{self.error_module}.{self.error_class}"),
            ("exception.message", self.message),
        )
        return tuple((ERROR_HEADER_PREFIX + name, value.encode()) for name, value in fields)

    def to_record(self, topic: str | None = None) -> RawRecord:
        """The DLQ record: original key, value and headers plus the context headers."""
        r = self.record
        return RawRecord(topic=topic or r.topic, partition=r.partition, offset=r.offset,
                         timestamp=r.timestamp, key=r.key, value=r.value,
                         headers=tuple(r.headers) + self.context_headers())

    def describe(self) -> str:
        r = self.record
        return f"{r.topic}[{r.partition}]@{r.offset} {self.stage}: {self.message}"
