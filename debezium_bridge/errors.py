"""One exception root for the package. Errors carry the raw record and its coordinates.

Bad input never travels through the hot path as an exception: decoders raise these inside a
record's processing, the translator catches them at the record boundary and turns them into
:class:`~debezium_bridge.model.dead_letter.DeadLetter` data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from debezium_bridge.model.records import KafkaRecord


class BridgeError(Exception):
    """Root of every error raised by debezium-bridge."""


class ConfigError(BridgeError, ValueError):
    """Invalid or unknown configuration."""


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
    """A schema is missing, unknown (e.g. schema registry id) or does not match the data."""

    stage = "schema"


class ValueConversionError(RecordError):
    """A column value does not fit its logical type (bad base64 decimal, out-of-range time, ...)."""

    stage = "convert"
