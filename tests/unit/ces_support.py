"""Helpers of the CES and Debezium-output tests: canonical records from simulated traffic."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.formats.canonical import to_dict
from debezium_bridge.formats.ces.encode import CesEncoder
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.debezium.encode import DebeziumEncoder, TableSpec
from debezium_bridge.formats.debezium.sqltypes import ConnectorModes, SqlColumn
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import KafkaRecord, RawRecord
from debezium_bridge.testing.ces_schema import validate_events

PROPAGATE = ConnectorModes(propagate_source_types=True)


def run(records: Iterable[KafkaRecord], pipeline: Pipeline | None = None
        ) -> tuple[list[ChangeRecord], list[DeadLetter], Pipeline]:
    """Translate with CES input support; the counters must balance."""
    pipeline = pipeline or Pipeline()
    changes: list[ChangeRecord] = []
    dead: list[DeadLetter] = []
    for item in pipeline.translate(records):
        (changes if isinstance(item, ChangeRecord) else dead).append(item)  # type: ignore[arg-type]
    assert pipeline.translator.counters.balanced, pipeline.translator.counters.summary()
    assert pipeline.assembler.counters.balanced, pipeline.assembler.counters.summary()
    return changes, dead, pipeline


def ces_values(changes: Sequence[ChangeRecord], pipeline: Pipeline,
               options: CesOptions | None = None) -> list[bytes]:
    """CES JSON values of ``changes``, every one validated (JSON Schemas + cross-field rules)."""
    encoder = CesEncoder(options, pipeline.catalog)
    values = [m.value for record in changes for m in encoder.encode(record)]
    events(values, options)
    return values


def events(values: Sequence[bytes], options: CesOptions | None = None) -> list[dict[str, Any]]:
    """Validate (JSON Schema + cross-field rules) and return the whole events."""
    options = options or CesOptions()
    return validate_events(values, max_bytes=options.max_message_bytes,
                           index_base=options.segment_index_base)


def rows_of(event: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    rows = event["data"]["eventrow"]
    return json.loads(rows["old"]), json.loads(rows["current"])


def as_records(values: Sequence[bytes], topic: str = "ces", partition: int = 0) -> list[RawRecord]:
    return [RawRecord(topic, partition, offset, None, None, value)
            for offset, value in enumerate(values)]


def comparable(record: ChangeRecord, *drop: str) -> dict[str, Any]:
    """A canonical record as a dict without the fields named in ``drop`` (dotted for nested)."""
    out = to_dict(record)
    for path in drop:
        head, _, tail = path.partition(".")
        if tail and isinstance(out.get(head), dict):
            out[head] = {k: v for k, v in out[head].items() if k != tail}
        else:
            out.pop(head, None)
    return out


def single_table(columns: Sequence[SqlColumn], key: Sequence[str] = ("id",),
                 table: str = "t") -> TableSpec:
    return TableSpec(db="db", schema="dbo", table=table, key_columns=tuple(key),
                     columns=tuple(columns))


def insert_record(encoder: DebeziumEncoder, row: dict[str, Any], *, commit: str,
                  change: str, serial: int = 1, offset: int = 0, partition: int = 0,
                  ts_ms: int = 1_700_000_000_000) -> RawRecord:
    """A Debezium ``c`` record of ``encoder``'s table with canonical ``row``."""
    source = encoder.source(ts_ms=ts_ms, commit_lsn=commit, change_lsn=change,
                            event_serial_no=serial)
    after = encoder.row(row)
    value = encoder.encode_envelope("c", None, after, source, None, ts_ms + 5)
    return RawRecord(encoder.topic, partition, offset, ts_ms, encoder.encode_key(
        encoder.key_of(row)), value)


def config(**kw: Any) -> TranslatorConfig:
    return TranslatorConfig(**kw)
