"""One exception root for the package. Errors about one record carry it and its coordinates.

Bad input never travels through the hot path as an exception: decoders raise a
:class:`RecordError` inside one record's processing, the translator catches it at the record
boundary and turns it into :class:`~debezium_bridge.model.dead_letter.DeadLetter` data (stage =
the error's ``stage``). A service that is down (schema registry, broker) is not bad input: it
raises :class:`ServiceError` after its retries, and the run stops with a non-zero exit.

::

    BridgeError
    ├── ConfigError (also ValueError)        invalid or unknown settings
    ├── ServiceError                         schema registry / Kafka unreachable after retries
    ├── LsnFormatError (also ValueError)     text that is not an LSN
    └── RecordError                          one input record cannot be translated
        ├── DecodeError ── KeyDecodeError    bytes are not a valid encoding
        ├── EnvelopeError                    well-formed, but not a valid Debezium envelope
        ├── SchemaError                      schema missing, unknown or invalid
        ├── ValueConversionError             a value does not fit its column's type
        ├── ReplayMismatchError              a replay whose image differs from the original
        ├── SegmentError                     CES segments that cannot be reassembled
        ├── RowError                         a change-table row that cannot be translated
        └── EncodeError                      a change the output format cannot hold
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from debezium_bridge.model.records import KafkaRecord


class BridgeError(Exception):
    """Root of every error raised by debezium-bridge."""


class ConfigError(BridgeError, ValueError):
    """Invalid or unknown configuration."""


class ServiceError(BridgeError):
    """A service the run depends on (schema registry, Kafka broker) failed after retries."""


class LsnFormatError(BridgeError, ValueError):
    """The text is not an LSN."""


class RecordError(BridgeError):
    """An error about one input record; knows the record and where it came from."""

    stage = "translate"

    def __init__(self, message: str, record: KafkaRecord | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.record = record

    def __str__(self) -> str:
        if self.record is None:
            return self.message
        r = self.record
        return f"{r.topic}[{r.partition}]@{r.offset}: {self.message}"


class DecodeError(RecordError):
    """The bytes are not a valid encoding (JSON, Avro, base64, ...)."""

    stage = "decode"


class KeyDecodeError(DecodeError):
    """The Kafka key could not be decoded."""

    stage = "decode-key"


class EnvelopeError(RecordError):
    """Well-formed bytes, but not a valid Debezium envelope (missing source/op, bad LSN, ...)."""

    stage = "envelope"


class SchemaError(RecordError):
    """A schema is missing, unknown (e.g. schema registry id), invalid, or the data does not
    match it."""

    stage = "schema"


class ValueConversionError(RecordError):
    """A column value does not fit its type (bad base64 decimal, int32 out of range, ...)."""

    stage = "convert"


class ReplayMismatchError(RecordError):
    """An event with the identity of one already seen (table, position, op, key) but a
    different image: Debezium's replays are identical, so this is corruption or a different
    event, never a duplicate to drop."""

    stage = "replay-mismatch"


class SegmentError(RecordError):
    """A CES event whose segments cannot be reassembled (missing or conflicting segments)."""

    stage = "ces-assemble"


class RowError(RecordError):
    """A SQL Server change-table row that cannot be translated: a malformed LSN or update mask,
    an unknown ``__$operation``, an update half without its other half, a row out of LSN order,
    a conflicting copy of a row. ``stage`` names the rule (``cdc-row``, ``cdc-mask``,
    ``cdc-pairing``, ``cdc-order``, ``cdc-duplicate``)."""

    stage = "cdc-row"

    def __init__(self, message: str, record: KafkaRecord | None = None,
                 stage: str | None = None) -> None:
        super().__init__(message, record)
        if stage is not None:
            self.stage = stage


class EncodeError(RecordError):
    """A change record cannot be written in an output format (a value that does not fit its
    column's SQL type, a missing commit time, ...)."""

    stage = "encode"
