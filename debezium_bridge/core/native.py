"""The native (Rust) core behind :class:`~debezium_bridge.core.Translator`: when it is used, and
the glue between it and the Python reference.

The extension ``debezium_bridge._native`` (crate ``debezium_bridge/native``, built by
setuptools-rust with the package) holds the translator state — replay marks, waiting groups,
watermarks, pairing — and decodes the common encodings itself (JsonConverter values and keys
with and without schema). Whatever it does not decode exactly like the reference (Avro,
CloudEvents, CES, Avro-JSON, side records, and every record that is bad input) it *declines*:
the record is handed to :func:`fallback_results`, i.e. to the Python decoder, and the result
re-enters the same native state in input order. So there is one ordering/dedupe/pairing state,
whichever decoder read a record, and dead letters of bad input are the reference's own.

Selection (:func:`use_native`): ``TranslatorConfig.native`` (``auto``/``on``/``off``) and the
environment variable ``DEBEZIUM_BRIDGE_NATIVE`` (``0``/``off`` forces the Python reference,
``1``/``on`` requires the extension).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any

import msgspec

from debezium_bridge.core.settings import native_mode
from debezium_bridge.errors import ConfigError, RecordError, ReplayMismatchError, ServiceError
from debezium_bridge.model.change import ChangeEvent, ChangeRecord, SideKind, SideRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import KafkaRecord, RawRecord, as_raw_record

if TYPE_CHECKING:
    from debezium_bridge.formats.debezium.decode import Decoder

log = logging.getLogger(__name__)

_native: ModuleType | None
try:
    from debezium_bridge import _native as _loaded
except ImportError:  # not built on this platform: the Python reference only
    _native = None
else:
    _native = _loaded

ENV = "DEBEZIUM_BRIDGE_NATIVE"

Result = tuple[Any, ...]
"""One decoded result for the native core: ``("event", fields, record)``, ``("dead",
letter)``, ``("tombstone",)``, ``("message",)``, ``("side",)``, ``("tx_end", id, count)``."""


def available() -> bool:
    """Whether the extension is built and importable."""
    return _native is not None


def module() -> ModuleType:
    """The extension module (raises :class:`ConfigError` when it is not built)."""
    if _native is None:
        raise ConfigError("the native core (debezium_bridge._native) is not built: install "
                          "the package with a Rust toolchain, or set native: off")
    return _native


def use_native(mode: str) -> bool:
    """Whether a translator configured with ``mode`` runs on the native core."""
    env = os.environ.get(ENV)
    if env is not None and env.strip():
        forced = native_mode(env)
        if forced == "off":
            return False
        if forced == "on":
            module()
            return mode != "off"
    if mode == "off":
        return False
    if mode == "on":
        module()
        return True
    return _native is not None


_encode = msgspec.json.Encoder().encode
_decode_record = msgspec.json.Decoder(ChangeRecord).decode


def flatten(event: ChangeEvent) -> tuple[Any, ...]:
    """A :class:`ChangeEvent` as the tuple ``NativeCore`` reads (images as canonical JSON)."""
    record = event.record
    table = event.table
    position = event.position
    tx = event.tx
    source = event.source
    return (
        record.topic, record.partition, record.offset,
        table.db, table.schema, table.name,
        event.op, event.key_id,
        None if event.before is None else _encode(event.before),
        None if event.after is None else _encode(event.after),
        list(event.unavailable),
        position.commit_lsn, position.change_lsn,
        event.sort_key[0], event.sort_key[1], position.event_serial_no,
        event.source_ts_ms, event.ts_ms, event.snapshot,
        None if tx is None else (tx.id, tx.total_order, tx.data_collection_order, tx.begin_lsn),
        (source.connector, source.name, source.version),
        None if event.column_order is None else list(event.column_order),
        event.partner_key_id,
        event.seq,
        None if event.changed is None else list(event.changed),
        event.unordered,
    )


def result_of(decoded: ChangeEvent | SideRecord, raw: RawRecord) -> Result:
    """What the native core takes for one record the Python decoder read."""
    if decoded.__class__ is SideRecord:
        side: SideRecord = decoded  # type: ignore[assignment]
        if side.kind is SideKind.TOMBSTONE:
            return ("tombstone",)
        if side.kind is SideKind.MESSAGE:
            return ("message",)
        if side.kind is SideKind.TX_END and side.tx_id and side.event_count is not None:
            return ("tx_end", side.tx_id, side.event_count)
        return ("side",)
    return ("event", flatten(decoded), raw)  # type: ignore[arg-type]


def fallback_results(decode: Callable[[RawRecord], ChangeEvent | SideRecord],
                     record: KafkaRecord) -> tuple[Result, ...]:
    """The Python decoder on one record, exactly as ``Translator.process_many`` handles it:
    bad input is a dead letter, a service that is down stops the run, a decoder bug is logged
    and dead-lettered."""
    raw = record if record.__class__ is RawRecord else as_raw_record(record)
    try:
        decoded = decode(raw)  # type: ignore[arg-type]
    except RecordError as exc:
        return (("dead", DeadLetter.of(exc, raw)),)  # type: ignore[arg-type]
    except ServiceError:
        raise
    except Exception as exc:
        log.exception("decoder bug on %s[%s]@%s (dead-lettered): %s: %s", raw.topic,
                      raw.partition, raw.offset, type(exc).__name__, exc)
        return (("dead", DeadLetter.of(exc, raw)),)  # type: ignore[arg-type]
    return (result_of(decoded, raw),)  # type: ignore[arg-type]


def mismatch_letter(record: KafkaRecord, message: str) -> DeadLetter:
    """The dead letter of a replay whose images differ (message written by the native core)."""
    raw = record if record.__class__ is RawRecord else as_raw_record(record)
    return DeadLetter.of(ReplayMismatchError(message, raw), raw)  # type: ignore[arg-type]


def decode_lines(lines: bytes) -> list[ChangeRecord]:
    """Canonical JSON lines back into :class:`ChangeRecord` objects (for API callers that want
    objects; the runners write the lines as they are)."""
    return [_decode_record(line) for line in lines.splitlines()]


def avro_schemas(decoder: Decoder) -> Callable[[int, bool], str | None]:
    """The native core's source of Confluent Avro writer schemas: ``(schema_id, is_key) ->``
    the schema JSON, after the Python decoder compiled that id itself (so a schema the reference
    refuses is never read natively: ``None``, and its records stay with the Python decoder).
    A service that is down raises: the record is declined and the Python decoder raises again."""
    avro = decoder.avro

    def schema_json(schema_id: int, key: bool) -> str | None:
        try:
            schema = avro.prepare(schema_id, decoder, key=key)
        except RecordError:
            return None
        return json.dumps(schema)

    return schema_json


def make_core(*, pair_key_changes: bool, max_pending: int, dedupe_capacity: int,
              placeholder: str, binary_mode: str,
              fallback: Callable[[Any], Iterable[Result]]) -> Any:
    """A new ``NativeCore``."""
    return module().NativeCore(
        pair_key_changes=pair_key_changes, max_pending=max_pending,
        dedupe_capacity=dedupe_capacity, placeholder=placeholder, binary_mode=binary_mode,
        fallback=fallback, mismatch=mismatch_letter)
