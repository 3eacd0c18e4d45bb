"""``debezium-bridge convert --to ces|ces-avro|debezium|debezium-avro``: flags, settings, writers.

Every field of :class:`~debezium_bridge.formats.ces.options.CesOptions` is a ``--ces-<name>`` flag and
every field of :class:`~debezium_bridge.formats.debezium.encode.DebeziumOutOptions` a
``--debezium-<name>`` flag (booleans also as ``--no-…``); in config files and
``DEBEZIUM_BRIDGE_*`` variables they are ``ces_<name>`` / ``debezium_<name>``.

Output files: ``--to ces`` writes one CES JSON event (the Kafka value) per line; the other
targets write our lossless JSON lines (topic, partition, offset, timestamp, key, value, headers)
so that binary values, keys, headers and tombstones survive — ``convert`` reads them back.
``--output-format values|lossless`` overrides this where it makes sense.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import textwrap
import typing
from collections.abc import Mapping
from typing import Any, BinaryIO, Literal, Protocol

import msgspec

from debezium_bridge.clients.registry import registry_registrar
from debezium_bridge.errors import ConfigError
from debezium_bridge.formats.ces.encode import CesEncoder
from debezium_bridge.formats.ces.envelope import is_ces
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.columns import ColumnCatalog
from debezium_bridge.formats.debezium.registry import InMemoryRegistry, SchemaRegistrar
from debezium_bridge.formats.debezium.writer import DebeziumOutOptions, DebeziumWriter
from debezium_bridge.formats.dumps import write_lossless
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord

TARGETS = ("ces", "ces-avro", "debezium", "debezium-avro")
__all__ = ["TARGETS", "add_arguments", "is_ces", "make_writer", "nest_settings",
           "setting_names"]
OutputFormat = Literal["auto", "values", "lossless"]
_GROUPS: tuple[tuple[str, str, type[msgspec.Struct]], ...] = (
    ("ces", "ces", CesOptions), ("debezium", "debezium_out", DebeziumOutOptions))
"""(flag/key prefix, ConvertConfig field, options struct)."""


def _field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a Struct (the string right after each field)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) \
                and isinstance(after.value.value, str):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _argument(parser: argparse.ArgumentParser | Any, flag: str, dest: str, annotation: Any,
              default: Any, doc: str) -> None:
    help_text = f"{doc} (default: {default})".replace("%", "%%")
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    unset = argparse.SUPPRESS  # absent from the namespace unless given: file/env values stay
    if annotation is bool:
        parser.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction,
                            default=unset, help=help_text)
    elif origin is Literal:
        kind = type(args[0])
        parser.add_argument(flag, dest=dest, choices=list(args), type=kind, default=unset,
                            help=help_text)
    else:
        kind = int if annotation is int else str
        parser.add_argument(flag, dest=dest, type=kind, default=unset, help=help_text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the output flags to the ``convert`` parser."""
    group = parser.add_argument_group("output (ces, ces-avro, debezium, debezium-avro)")
    group.add_argument("--output-format", choices=["auto", "values", "lossless"], default=None,
                       help="auto: CES JSON values one per line for --to ces, lossless JSON "
                            "lines (key, value, headers, tombstones) for the other targets")
    group.add_argument("--output-partitions", type=int, default=None,
                       help="partitions of the output topics (Kafka's default partitioner "
                            "on the key; default 1)")
    group.add_argument("--output-topic", default=None,
                       help="topic of CES output records (default: the stream group name)")
    group.add_argument("--output-avro-schemas", default=None,
                       help="--to debezium-avro without --schema-registry: register the "
                            "schemas in memory and write {id: schema} to this file")
    for prefix, _, cls in _GROUPS:
        docs = _field_docs(cls)
        hints = typing.get_type_hints(cls)
        sub = parser.add_argument_group(f"--{prefix}-* options")
        for field in msgspec.structs.fields(cls):
            _argument(sub, f"--{prefix}-{field.name.replace('_', '-')}",
                      f"{prefix}_{field.name}", hints[field.name], field.default,
                      docs.get(field.name, ""))


def setting_names() -> list[str]:
    """Config keys of the output options (for ``DEBEZIUM_BRIDGE_*`` environment variables)."""
    names = ["output_format", "output_partitions", "output_topic", "output_avro_schemas"]
    for prefix, _, cls in _GROUPS:
        names += [f"{prefix}_{f.name}" for f in msgspec.structs.fields(cls)]
    return names


def nest_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """Flat ``ces_<name>`` / ``debezium_<name>`` keys → nested ``ces`` / ``debezium_out`` dicts
    (which may also be given nested in a config file)."""
    out = dict(settings)
    for prefix, field, cls in _GROUPS:
        nested = dict(out.pop(field, None) or {})
        names = {f.name for f in msgspec.structs.fields(cls)}
        for key in [k for k in out if k.startswith(prefix + "_")]:
            name = key[len(prefix) + 1:]
            if name in names:
                nested[name] = out.pop(key)
        if nested:
            out[field] = nested
    return out


# --------------------------------------------------------------------------- writers


class Writer(Protocol):
    """Writes released canonical records; returns dead letters for those it cannot encode."""

    def write(self, changes: list[ChangeRecord], out: BinaryIO) -> list[DeadLetter]: ...
    def finish(self) -> None: ...
    def summary(self) -> str | None: ...


class CesWriter:
    """CES events, as JSON values (one per line) or as lossless Kafka records."""

    def __init__(self, options: CesOptions, catalog: ColumnCatalog, *,
                 encoding: Literal["json", "avro"], lossless: bool, topic: str,
                 partitions: int) -> None:
        self.encoder = CesEncoder(options, catalog, encoding=encoding)
        self.lossless = lossless
        self.topic = topic
        self.partitions = partitions
        self._offsets: dict[int, int] = {}
        self._round_robin = 0

    def write(self, changes: list[ChangeRecord], out: BinaryIO) -> list[DeadLetter]:
        errors: list[tuple[ChangeRecord, Exception]] = []
        if not self.lossless:
            out.write(self.encoder.encode_lines(changes, errors))
        else:
            from debezium_bridge.partitioner import partition_for

            records = []
            for change in changes:
                try:
                    messages = self.encoder.encode(change)
                except Exception as exc:
                    errors.append((change, exc))
                    continue
                timestamp = _epoch_ms(change.commit_ts)
                for message in messages:
                    if message.key is not None:
                        partition = partition_for(message.key, self.partitions)
                    else:
                        partition = self._round_robin % self.partitions
                        self._round_robin += 1
                    offset = self._offsets.get(partition, 0)
                    self._offsets[partition] = offset + 1
                    records.append(RawRecord(self.topic, partition, offset, timestamp,
                                             message.key, message.value, message.headers))
            write_lossless(records, out)
        return [DeadLetter.of_change(change, exc) for change, exc in errors]

    def finish(self) -> None:
        pass

    def summary(self) -> str | None:
        return self.encoder.counters.summary()


class DebeziumFileWriter:
    """Debezium envelopes as lossless Kafka records (or values, ``null`` for tombstones)."""

    def __init__(self, writer: DebeziumWriter, *, lossless: bool,
                 schemas_out: str | None, registry: InMemoryRegistry | None) -> None:
        self.writer = writer
        self.lossless = lossless
        self.schemas_out = schemas_out
        self.registry = registry

    def write(self, changes: list[ChangeRecord], out: BinaryIO) -> list[DeadLetter]:
        records: list[RawRecord] = []
        dead = []
        for change in changes:
            try:
                records += self.writer.encode(change)
            except Exception as exc:
                dead.append(DeadLetter.of_change(change, exc))
        if self.lossless:
            write_lossless(records, out)
        else:
            out.write(b"".join((r.value if r.value is not None else b"null") + b"\n"
                                    for r in records))
        return dead

    def finish(self) -> None:
        if self.schemas_out and self.registry is not None:
            with open(self.schemas_out, "wb") as handle:
                handle.write(msgspec.json.encode(
                    {str(k): v for k, v in self.registry.schemas.items()}))

    def summary(self) -> str | None:
        return self.writer.counters.summary()


def _epoch_ms(iso: str | None) -> int | None:
    from debezium_bridge.formats.debezium.writer import _epoch_ms as parse

    return parse(iso)


def make_writer(config: Any, catalog: ColumnCatalog) -> Writer:
    """The writer of ``config.to`` (one of :data:`TARGETS`); raises :class:`ConfigError`."""
    target, fmt = config.to, config.output_format
    binary = target in ("ces-avro", "debezium-avro")
    if binary and fmt == "values":
        raise ConfigError(f"--to {target} writes binary values: use --output-format lossless")
    lossless = fmt == "lossless" or (fmt == "auto" and target != "ces")
    if config.output_partitions < 1:
        raise ConfigError("--output-partitions must be at least 1")
    if target in ("ces", "ces-avro"):
        options: CesOptions = config.ces
        return CesWriter(options, catalog,
                         encoding="avro" if target == "ces-avro" else "json",
                         lossless=lossless, topic=config.output_topic or options.stream_group,
                         partitions=config.output_partitions)
    registrar: SchemaRegistrar | None = None
    registry = None
    if target == "debezium-avro":
        if config.schema_registry:
            registrar = registry_registrar({**config.registry, "url": config.schema_registry})
        elif config.output_avro_schemas:
            registrar = registry = InMemoryRegistry()
        else:
            raise ConfigError("--to debezium-avro needs --schema-registry (or "
                              "--output-avro-schemas FILE for offline schema ids)")
    writer = DebeziumWriter(config.debezium_out, catalog,
                            encoding="avro" if target == "debezium-avro" else "json",
                            registrar=registrar, partitions=config.output_partitions)
    return DebeziumFileWriter(writer, lossless=lossless,
                              schemas_out=config.output_avro_schemas, registry=registry)
