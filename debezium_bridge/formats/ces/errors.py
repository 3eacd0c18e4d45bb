"""Errors of the output encoders (CES and Debezium envelopes from canonical records)."""

from __future__ import annotations

import msgspec

from debezium_bridge.errors import RecordError
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord


class EncodeError(RecordError):
    """A canonical record cannot be written in the output format (e.g. a value that does not
    fit its column's SQL type, a missing commit time)."""

    stage = "encode"


_JSON = msgspec.json.Encoder()


def dead_letter_for(record: ChangeRecord, error: Exception) -> DeadLetter:
    """A dead letter for a canonical record that could not be encoded: the record's canonical
    JSON as the value, at the coordinates of the (last) input record that made it."""
    where = record.lineage[-1] if record.lineage else None
    raw = RawRecord(topic=where.topic if where else f"canonical:{record.table_id}",
                    partition=where.partition if where else 0,
                    offset=where.offset if where else None,
                    value=_JSON.encode(record))
    return DeadLetter.of(error, raw, stage="encode")
