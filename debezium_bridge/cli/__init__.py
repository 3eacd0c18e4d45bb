"""``debezium-bridge`` command line: ``convert`` translates topic dumps.

Exit codes: 0 success; 1 input was rejected (dead letters) and ``--fail-on-error`` was given;
2 usage or configuration error; 3 an input or output file could not be read or written.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Iterator, Sequence
from typing import IO, Any, BinaryIO, Literal

import msgspec

from debezium_bridge import __version__
from debezium_bridge.cli import writers as ces_convert
from debezium_bridge.clients.registry import RegistrySchemaResolver
from debezium_bridge.config import (
    build,
    env_settings,
    load_config_file,
    mask,
    parse_overrides,
)
from debezium_bridge.core import TranslatorConfig
from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.errors import BridgeError, ConfigError, ServiceError
from debezium_bridge.formats.canonical import View, encode_lines
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.debezium.avro import AvroDecoder
from debezium_bridge.formats.debezium.decode import Decoder, DecodeSettings, load_table_schemas
from debezium_bridge.formats.debezium.logical import DEFAULT_PLACEHOLDER
from debezium_bridge.formats.debezium.registry import FileSchemaResolver
from debezium_bridge.formats.debezium.writer import DebeziumOutOptions
from debezium_bridge.formats.dumps import DumpFormat, DumpLineError, read_dump, write_lossless
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord

EXIT_OK, EXIT_REJECTED, EXIT_USAGE, EXIT_IO, EXIT_SERVICE = 0, 1, 2, 3, 4


class ConvertConfig(DecodeSettings, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Settings of ``debezium-bridge convert`` (file keys = long flag names with ``_``)."""

    inputs: tuple[str, ...]
    input_format: Literal["auto", "lossless", "kcat", "text"] = "auto"
    topic: str | None = None
    key_separator: str | None = None
    to: Literal["canonical", "exploded", "flat", "ces", "ces-avro", "debezium",
                "debezium-avro"] = "canonical"
    output: str = "-"
    dlq: str | None = None
    pair_key_changes: bool = True
    max_pending: int = 100_000
    dedupe_capacity: int = 1_000_000
    fail_on_error: bool = False
    progress: Literal["auto", "always", "never"] = "auto"
    counters_json: str | None = None
    output_format: Literal["auto", "values", "lossless"] = "auto"
    output_partitions: int = 1
    output_topic: str | None = None
    output_avro_schemas: str | None = None
    ces: CesOptions = msgspec.field(default_factory=CesOptions)
    """``--ces-*`` (file keys ``ces_*``): CES input and output switches."""
    debezium_out: DebeziumOutOptions = msgspec.field(default_factory=DebeziumOutOptions)
    """``--debezium-*`` (file keys ``debezium_*``): Debezium envelope output switches."""

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ConfigError("no input files given")
        if self.max_pending < 1:
            raise ConfigError("max_pending must be at least 1")

    def __repr__(self) -> str:
        fields = {f: getattr(self, f) for f in self.__struct_fields__}
        fields["registry"] = mask(self.registry)
        return f"ConvertConfig({', '.join(f'{k}={v!r}' for k, v in fields.items())})"


_ENV_KEYS = ["schema_registry", "avro_schemas", "table_schemas", "dlq", "binary_handling_mode",
             "unavailable_value_placeholder", "max_pending", "dedupe_capacity",
             *ces_convert.setting_names()]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="debezium-bridge",
        description="Translate Debezium SQL Server change events exactly: ordering by "
                    "(commit_lsn, change_lsn, event_serial_no), replay dedupe, PK-change pairing.",
    )
    parser.add_argument("--version", action="version", version=f"debezium-bridge {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    conv = commands.add_parser(
        "convert", help="convert topic dumps (kcat -J, console consumer, lossless JSON lines)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Environment: DEBEZIUM_BRIDGE_SCHEMA_REGISTRY, DEBEZIUM_BRIDGE_AVRO_SCHEMAS, "
               "DEBEZIUM_BRIDGE_TABLE_SCHEMAS, DEBEZIUM_BRIDGE_DLQ, ... (any long option). "
               "Exit codes: 0 ok, 1 rejected input with --fail-on-error, 2 usage/config, 3 I/O.")
    add = conv.add_argument
    add("inputs", nargs="*", metavar="INPUT", help="dump files, read as one stream ('-' = stdin)")
    add("--config", help="YAML/JSON/properties file with the same settings")
    add("--format", dest="input_format", choices=["auto", "lossless", "kcat", "text"],
        default=None, help="input format (default: auto-detect per file)")
    add("--topic", default=None, help="topic of text dumps (default: the file name)")
    add("--key-separator", default=None, help="key separator of console-consumer text dumps")
    add("--to", choices=["canonical", "exploded", "flat", *ces_convert.TARGETS], default=None,
        help="output: a canonical view, CES CloudEvents (JSON or Avro) or Debezium envelopes "
             "(JsonConverter or Confluent Avro) (default: canonical)")
    add("-o", "--output", default=None, help="output file (default: stdout)")
    add("--dlq", default=None, help="write rejected records (lossless JSON lines) to this file")
    add("--schema-registry", default=None, help="Confluent Schema Registry URL for Avro")
    add("--avro-schemas", default=None,
        help="offline Avro schemas: JSON object of schema id (or subject) -> schema")
    add("--table-schemas", default=None,
        help="schemas for schema-less JSON: {topic or db.schema.table: Connect/Avro schema}")
    add("-X", dest="registry_settings", action="append", metavar="KEY=VALUE",
        help="schema registry client setting (e.g. basic.auth.user.info=u:p)")
    add("--binary-handling-mode", choices=["bytes", "base64", "base64-url-safe", "hex"],
        default=None, help="the connector's binary.handling.mode (default: bytes)")
    add("--unavailable-value-placeholder", default=None,
        help=f"the connector's unavailable.value.placeholder (default: {DEFAULT_PLACEHOLDER})")
    add("--no-pairing", dest="pair_key_changes", action="store_false", default=None,
        help="emit the delete and create halves of a key change separately")
    add("--max-pending", type=int, default=None,
        help="events held for ordering/pairing before the oldest are released (default 100000)")
    add("--dedupe-capacity", type=int, default=None,
        help="remembered identities of keyless-table and snapshot events (default 1000000)")
    add("--fail-on-error", action="store_true", default=None,
        help="exit 1 when any record was rejected")
    add("--progress", choices=["auto", "always", "never"], default=None,
        help="progress bar on stderr (auto: when stderr is a terminal)")
    add("--counters-json", default=None, help="also write the counters as JSON to this file")
    ces_convert.add_arguments(conv)
    samples = commands.add_parser(
        "samples", help="write sample Debezium SQL Server traffic as a lossless dump",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    samples.add_argument("-o", "--output", default="-", help="dump file ('-' = stdout)")
    samples.add_argument("--encoding", choices=["json-schema", "json", "avro"],
                         default="json-schema", help="value/key converter to imitate")
    samples.add_argument("--partitions", type=int, default=3, help="partitions of the topic")
    samples.add_argument("--avro-schemas-out", default=None,
                         help="with --encoding avro: write the {id: schema} file here")
    commands.add_parser(
        "spark", add_help=False,
        help="run the Spark streaming job (needs .[spark]); see 'debezium-bridge spark --help'")
    return parser


def run_samples(args: argparse.Namespace) -> int:
    """Write the demo traffic (see :func:`debezium_bridge.testing.simulator.demo`)."""
    from debezium_bridge.formats.debezium.registry import InMemoryRegistry
    from debezium_bridge.testing.simulator import demo_traffic

    registry = InMemoryRegistry()
    records = demo_traffic(args.encoding, args.partitions, registry)
    with _open_out(args.output) as out:
        assert out is not None
        write_lossless(records, out)
    if args.avro_schemas_out:
        with open(args.avro_schemas_out, "wb") as handle:
            handle.write(msgspec.json.encode({str(k): v for k, v in registry.schemas.items()}))
    sys.stderr.write(f"debezium-bridge: wrote {len(records)} sample records\n")
    return EXIT_OK


def config_from_args(args: argparse.Namespace) -> ConvertConfig:
    """Defaults < config file < environment < flags."""
    settings: dict[str, Any] = {}
    if args.config:
        settings.update(load_config_file(args.config))
    settings.update(env_settings(_ENV_KEYS))
    flags = {k: v for k, v in vars(args).items()
             if v is not None and k not in ("command", "config", "registry_settings", "inputs")}
    settings.update(flags)
    if args.inputs:
        settings["inputs"] = tuple(args.inputs)
    registry = dict(settings.get("registry") or {})
    registry.update(parse_overrides(args.registry_settings))
    settings["registry"] = registry
    settings = ces_convert.nest_settings(settings)
    return build(ConvertConfig, settings)  # type: ignore[no-any-return]


class _Progress:
    """A one-line progress display on a terminal."""

    def __init__(self, enabled: bool, total_bytes: int | None) -> None:
        self.enabled = enabled
        self.total = total_bytes
        self.start = time.monotonic()
        self._next = self.start

    def update(self, records: int, done_bytes: int) -> None:
        now = time.monotonic()
        if not self.enabled or now < self._next:
            return
        self._next = now + 0.2
        rate = records / max(now - self.start, 1e-9)
        pct = f" {100 * done_bytes / self.total:5.1f}%" if self.total else ""
        sys.stderr.write(f"\r{records:>12,} records{pct} {rate:>10,.0f}/s")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 60 + "\r")


def _resolver(config: ConvertConfig, inputs_schemas: dict[str, Any]) -> Any:
    if config.schema_registry:
        return RegistrySchemaResolver({**config.registry, "url": config.schema_registry})
    if config.avro_schemas or inputs_schemas:
        resolver = (FileSchemaResolver.from_file(config.avro_schemas) if config.avro_schemas
                    else FileSchemaResolver({}))
        for subject, schema in inputs_schemas.items():
            resolver.add_subject(subject, schema)
        return resolver
    if config.registry:
        raise ConfigError("-X registry settings given without --schema-registry")
    return None


def _is_data_topic(topic: str) -> bool:
    """Side topics: ``<prefix>``, ``<prefix>.transaction``, ``__debezium-heartbeat.*``."""
    return (not topic.startswith("__") and not topic.endswith(".transaction")
            and topic.count(".") >= 2)


@contextlib.contextmanager
def _open_out(path: str | None) -> Iterator[BinaryIO | None]:
    if path is None:
        yield None
    elif path == "-":
        yield sys.stdout.buffer
    else:
        with open(path, "wb") as handle:
            yield handle


def _reader_kwargs(config: ConvertConfig) -> dict[str, Any]:
    fmt = None if config.input_format == "auto" else DumpFormat(config.input_format)
    return {"fmt": fmt, "topic": config.topic, "key_separator": config.key_separator}


def run_convert(config: ConvertConfig, *, stderr: IO[str] | None = None) -> int:
    """Run one conversion; returns the process exit code."""
    stderr = stderr or sys.stderr
    kwargs = _reader_kwargs(config)
    partitions: set[tuple[str, int]] = set()
    avro_subjects: dict[str, Any] = {}
    total_bytes = 0
    if "-" not in config.inputs:  # learn the partitions first, so ordering waits for all
        for path in config.inputs:
            reader = read_dump(path, **kwargs)
            for item in reader:
                if isinstance(item, RawRecord) and (_is_data_topic(item.topic)
                                                    or ces_convert.is_ces(item.value)):
                    partitions.add((item.topic, item.partition))
            avro_subjects.update(reader.avro_schemas)
            total_bytes += reader.total_bytes or 0
    table_schemas = load_table_schemas(config.table_schemas) if config.table_schemas else {}
    decoder = Decoder(
        config.decode_options(table_schemas),
        AvroDecoder(_resolver(config, avro_subjects)),
    )
    # the pipeline adds CES input (segments, key-changing updates) and the SQL column types
    pipeline = Pipeline(TranslatorConfig(pair_key_changes=config.pair_key_changes,
                                         max_pending=config.max_pending,
                                         dedupe_capacity=config.dedupe_capacity), decoder,
                        config.ces)
    for name, schema in table_schemas.items():
        pipeline.catalog.add_schema(schema, name)
    translator = pipeline.translator
    translator.expect(partitions)
    writer = (ces_convert.make_writer(config, pipeline.catalog)
              if config.to in ces_convert.TARGETS else None)
    view = View(config.to) if writer is None else View.CANONICAL
    show = config.progress == "always" or (config.progress == "auto" and stderr.isatty())
    progress = _Progress(show, total_bytes or None)
    started = time.monotonic()
    done_bytes = 0
    with _open_out(config.output) as out, _open_out(config.dlq) as dlq:
        assert out is not None

        def emit() -> None:
            changes, dead = pipeline.drain()
            if changes and writer is not None:
                failed = writer.write(changes, out)
                if failed:  # records the output format cannot hold: out of changes_out
                    translator.counters.changes_out -= len(failed)
                    translator.counters.dead_letters += len(failed)
                    dead = dead + failed
            elif changes:
                out.write(encode_lines(changes, view))
            for letter in dead:
                stderr.write(f"debezium-bridge: rejected {letter.describe()}\n")
                if dlq is not None:
                    write_lossless([letter.to_record()], dlq)

        for path in config.inputs:
            reader = read_dump(path, **kwargs)
            for item in reader:
                if item.__class__ is DumpLineError:
                    bad: DumpLineError = item  # type: ignore[assignment]
                    raw = RawRecord(topic=f"file:{bad.path}", partition=0,
                                    offset=bad.line_no, value=bad.raw)
                    translator.reject(DeadLetter(raw, "read", "DumpLineError", bad.message,
                                                 error_module="debezium_bridge.formats.dumps"))
                else:
                    pipeline.process(item)  # type: ignore[arg-type]
                if pipeline.has_output:
                    emit()
                if show and translator.counters.records_in % 4096 == 0:
                    progress.update(translator.counters.records_in,
                                    done_bytes + (reader.bytes_read or 0))
            done_bytes += reader.bytes_read or 0
        pipeline.flush()
        emit()
        if writer is not None:
            writer.finish()
        out.flush()
    progress.close()
    counters = translator.counters
    elapsed = time.monotonic() - started
    stderr.write(f"debezium-bridge: {counters.summary()}\n")
    segments = pipeline.assembler.counters
    if segments.records_in != segments.passed or segments.split_updates:
        stderr.write(f"debezium-bridge: {segments.summary()}\n")
    if writer is not None and writer.summary():
        stderr.write(f"debezium-bridge: {writer.summary()}\n")
    stderr.write(f"debezium-bridge: {counters.records_in} records in {elapsed:.2f} s; "
                 f"state {translator.state_size()}\n")
    if config.counters_json:
        with open(config.counters_json, "w") as handle:
            handle.write(msgspec.json.encode(
                {**counters.as_dict(), "ces_input": segments.as_dict()}).decode() + "\n")
    if (counters.dead_letters or segments.dead_letters) and config.fail_on_error:
        return EXIT_REJECTED
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["spark"]:
        from debezium_bridge.spark.job import main as spark_main

        return spark_main(argv[1:])
    args = _parser().parse_args(argv)
    try:
        if args.command == "convert":
            return run_convert(config_from_args(args))
        if args.command == "samples":
            return run_samples(args)
    except ConfigError as exc:
        sys.stderr.write(f"debezium-bridge: configuration error: {exc}\n")
        return EXIT_USAGE
    except ServiceError as exc:
        sys.stderr.write(f"debezium-bridge: error: {exc}\n")
        return EXIT_SERVICE
    except BridgeError as exc:
        sys.stderr.write(f"debezium-bridge: error: {exc}\n")
        return EXIT_USAGE
    except OSError as exc:
        sys.stderr.write(f"debezium-bridge: I/O error: {exc}\n")
        return EXIT_IO
    except KeyboardInterrupt:
        return 130
    return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
