"""``debezium-bridge convert``: translate topic dumps (kcat ``-J``, console-consumer text, our
lossless JSON lines, Avro-JSON, CES) into a canonical feed, CES CloudEvents or Debezium
envelopes, with every rejected record in a dead-letter file and counters that add up.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from typing import IO, Any, BinaryIO, Literal

import msgspec
from pydantic import Field
from pydantic_settings import CliPositionalArg

from debezium_bridge.cli.sink import FileSink
from debezium_bridge.clients.registry import RegistrySchemaResolver, registry_registrar
from debezium_bridge.config import RunnerSettings
from debezium_bridge.core import native
from debezium_bridge.core.pipeline import CdcPipeline, Pipeline
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.errors import ConfigError
from debezium_bridge.formats.cdc.catalog import load_capture_instances
from debezium_bridge.formats.cdc.rows import is_cdc_export
from debezium_bridge.formats.cdc.settings import CdcSettings
from debezium_bridge.formats.ces.envelope import is_ces
from debezium_bridge.formats.debezium.avro import AvroDecoder
from debezium_bridge.formats.debezium.decode import Decoder, load_table_schemas
from debezium_bridge.formats.debezium.registry import (
    FileSchemaResolver,
    InMemoryRegistry,
    SchemaRegistrar,
    SchemaResolver,
)
from debezium_bridge.formats.debezium.settings import DecodeSettings
from debezium_bridge.formats.dumps import DumpFormat, DumpLineError, read_dump, record_of_line
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord
from debezium_bridge.output import Output, OutputFormat, OutputSettings

log = logging.getLogger(__name__)

EXIT_OK, EXIT_REJECTED, EXIT_USAGE, EXIT_IO, EXIT_SERVICE, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
_CHUNK = 4 << 20
"""Bytes of a dump file handed to the native core at once."""
_LOGGED_REJECTIONS = 20
"""Dead letters named one by one in the log; the rest are counted (they are all in --dlq)."""


# mypy sees two model_config types; pydantic merges them (RunnerSettings' wins)
class ConvertConfig(RunnerSettings, DecodeSettings, TranslatorConfig,  # type: ignore[misc]
                    OutputSettings):
    """Settings of ``debezium-bridge convert`` (flags, ``DEBEZIUM_BRIDGE_<NAME>`` variables,
    ``--config`` file keys)."""

    client_settings_help = ("schema registry client setting under Confluent's name, e.g. "
                            "-X basic.auth.user.info=user:password (repeatable)")
    client_settings_field = "registry"
    cli_shortcuts = {"output": "o"}

    inputs: CliPositionalArg[list[str]] = []
    """Dump files, read in order as one stream (``-`` = standard input)."""
    input_format: Literal["auto", "lossless", "kcat", "text", "cdc"] = "auto"
    """Format of the input files (auto: detected per file; ``cdc``: SQL Server change-table
    rows, CSV or JSON, see the ``cdc`` settings)."""
    topic: str | None = None
    """Topic of console-consumer text dumps (default: the file name)."""
    key_separator: str | None = None
    """Key separator of console-consumer text dumps (``print.key=true``)."""
    to: Literal["canonical", "exploded", "flat", "ces", "ces-avro", "debezium",
                "debezium-avro"] = "canonical"
    """Output: a canonical view (canonical, exploded, flat), CES CloudEvents (ces, ces-avro) or
    Debezium envelopes (debezium, debezium-avro)."""
    output: str = "-"
    """Output file (``-`` = standard output)."""
    output_format: Literal["auto", "values", "lossless"] = "auto"
    """``values``: one value per line; ``lossless``: our lossless JSON lines with topic,
    partition, offset, key, value and headers (readable by ``convert``). ``auto``: values for
    the JSON formats, lossless for the binary ones and for Debezium envelopes (keys and
    tombstones matter there)."""
    output_partitions: int = 1
    """Partitions of the output topics in lossless output (Kafka's murmur2 partitioner on the
    key)."""
    output_avro_schemas: str | None = None
    """``--to debezium-avro`` without a registry: register schemas in memory and write them to
    this file as ``{id: schema}`` (readable with ``--avro-schemas``)."""
    dlq: str | None = None
    """Write rejected records (and changes a format cannot hold) to this file, as lossless JSON
    lines with ``__connect.errors.*`` headers."""
    fail_on_error: bool = False
    """Exit 1 when any record was rejected."""
    progress: Literal["auto", "always", "never"] = "auto"
    """Progress line on standard error (auto: when it is a terminal)."""
    counters_json: str | None = None
    """Also write the counters as JSON to this file."""
    cdc: CdcSettings = Field(default_factory=CdcSettings)
    """SQL Server change-table rows as input (docs/cdc.md): capture-instance description,
    export format, the connector version to imitate."""

    def model_post_init(self, context: Any) -> None:
        if not self.inputs:
            raise ConfigError("no input files given")
        if self.output_partitions < 1:
            raise ConfigError("output_partitions must be at least 1")

    @property
    def format(self) -> OutputFormat:
        return OutputFormat(self.to)

    @property
    def file_layout(self) -> Literal["values", "lossless"]:
        if self.output_format == "values":
            if self.format.binary:
                raise ConfigError(f"--to {self.to} writes binary values: use --output-format "
                                  "lossless")
            return "values"
        if self.output_format == "lossless":
            return "lossless"
        keyed = self.format.binary or self.format is OutputFormat.DEBEZIUM
        return "lossless" if keyed else "values"


def _is_data_topic(topic: str) -> bool:
    """Side topics: ``<prefix>``, ``<prefix>.transaction``, ``__debezium-heartbeat.*``."""
    return (not topic.startswith("__") and not topic.endswith(".transaction")
            and topic.count(".") >= 2)


class _DumpChunks:
    """A dump file in chunks of at least ``_CHUNK`` bytes, each with whether it is the last,
    read into one buffer that is reused: the reader sets :attr:`consumed` (its complete lines)
    before taking the next chunk, and the rest is carried over.

    One buffer rather than a bytes object per chunk: every new 4 MB object is fresh memory, a
    page fault per 4 KB page (measured on a 0.5 GB dump: ~155k faults, about a third of the
    native conversion's CPU time)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.consumed = 0
        self.size = 0
        """Bytes read so far."""

    def __iter__(self) -> Iterator[tuple[memoryview, bool]]:
        buffer = bytearray(_CHUNK)
        held = 0
        with open(self.path, "rb", buffering=0) as handle:
            while True:
                view = memoryview(buffer)
                while held < len(buffer):
                    n = handle.readinto(view[held:])
                    if not n:
                        break
                    held += n
                    self.size += n
                last = held < len(buffer)
                self.consumed = 0
                yield view[:held], last
                if last:
                    return
                if self.consumed == 0:  # a line longer than the buffer
                    grown = bytearray(2 * len(buffer))
                    grown[:held] = view[:held]
                    buffer = grown
                    continue
                held -= self.consumed
                buffer[:held] = bytes(view[self.consumed:self.consumed + held])


class _Progress:
    """A one-line progress display on a terminal (a display, not a log)."""

    def __init__(self, stream: IO[str], enabled: bool, total_bytes: int | None) -> None:
        self.stream, self.enabled, self.total = stream, enabled, total_bytes
        self.start = self._next = time.monotonic()

    def update(self, records: int, done_bytes: int) -> None:
        now = time.monotonic()
        if not self.enabled or now < self._next:
            return
        self._next = now + 0.2
        rate = records / max(now - self.start, 1e-9)
        pct = f" {100 * done_bytes / self.total:5.1f}%" if self.total else ""
        self.stream.write(f"\r{records:>12,} records{pct} {rate:>10,.0f}/s")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 60 + "\r")


@contextlib.contextmanager
def _open_in(path: str) -> Iterator[BinaryIO]:
    if path == "-":
        yield sys.stdin.buffer
    else:
        with open(path, "rb") as handle:
            yield handle


@contextlib.contextmanager
def _open_out(path: str | None) -> Iterator[BinaryIO | None]:
    if path is None:
        yield None
    elif path == "-":
        yield sys.stdout.buffer
    else:
        with open(path, "wb") as handle:
            yield handle


def _check_readable(config: ConvertConfig) -> None:
    """The auxiliary input files open for reading; else an :class:`OSError` naming the option
    (exit 3, as for an input that cannot be read)."""
    files = [("--table-schemas", config.table_schemas), ("--avro-schemas", config.avro_schemas),
             ("--cdc.lsn-time-mapping", config.cdc.lsn_time_mapping),
             *(("--cdc.capture-instances", path) for path in config.cdc.capture_instances)]
    for option, path in files:
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                raise OSError(f"cannot read {option} file {path}: {exc.strerror}") from None


def _resolver(config: ConvertConfig, dump_schemas: dict[str, Any]) -> SchemaResolver | None:
    if config.schema_registry:
        return RegistrySchemaResolver({**config.registry, "url": str(config.schema_registry)})
    if config.avro_schemas or dump_schemas:
        resolver = (FileSchemaResolver.from_file(config.avro_schemas) if config.avro_schemas
                    else FileSchemaResolver({}))
        for subject, schema in dump_schemas.items():
            resolver.add_subject(subject, schema)
        return resolver
    return None


def _registrar(config: ConvertConfig) -> tuple[SchemaRegistrar | None, InMemoryRegistry | None]:
    if config.format is not OutputFormat.DEBEZIUM_AVRO:
        return None, None
    if config.schema_registry:
        return registry_registrar({**config.registry, "url": str(config.schema_registry)}), None
    if config.output_avro_schemas:
        registry = InMemoryRegistry()
        return registry, registry
    raise ConfigError("--to debezium-avro needs --schema-registry (or --output-avro-schemas "
                      "FILE for offline schema ids)")


class Conversion:
    """One run of ``convert``; :meth:`run` returns the exit code. Interrupted or stopped by a
    service error, it still writes what was released and reports the counters."""

    needs_pairs = False
    """Whether the run needs key changes paired whatever it writes (``net`` does)."""

    def __init__(self, config: ConvertConfig, progress_stream: IO[str] | None = None) -> None:
        _check_readable(config)
        self.config = config
        self.progress_stream = progress_stream or sys.stderr
        fmt = config.input_format
        self.reader_options: dict[str, Any] = {
            "fmt": None if fmt in ("auto", "cdc") else DumpFormat(fmt),
            "topic": config.topic, "key_separator": config.key_separator}
        self.rejected_logged = 0
        self.cdc = self._cdc_inputs()
        self.pipeline: Pipeline | CdcPipeline

    def _cdc_inputs(self) -> bool:
        """Whether the inputs are change-table rows (all of them, or none)."""
        config = self.config
        if config.input_format == "cdc":
            return True
        if config.input_format != "auto":
            return False
        kinds = set()
        for path in config.inputs:
            if path == "-":
                kinds.add(False)
                continue
            try:
                with open(path, "rb") as handle:
                    kinds.add(is_cdc_export(handle.read(4096)))
            except OSError:
                kinds.add(False)  # reported when the file is read
        if len(kinds) > 1:
            raise ConfigError("change-table rows and Kafka dumps cannot be converted in one run")
        return kinds == {True}

    def _native_format(self, path: str) -> DumpFormat | None:
        """The line format of a dump the native core reads itself (lossless, kcat), when the
        native core runs; ``None`` otherwise."""
        if path == "-" or not native.available() or not native.use_native(self.config.native):
            return None
        with read_dump(path, **self.reader_options) as reader:
            fmt = reader.format
        return fmt if fmt in (DumpFormat.LOSSLESS, DumpFormat.KCAT) else None

    def _learn_native(self, path: str, fmt: DumpFormat, partitions: set[tuple[str, int]]
                      ) -> int:
        scanner = native.module().NativeCore(
            pair_key_changes=True, max_pending=1, dedupe_capacity=0, placeholder="",
            binary_mode="bytes", fallback=None, mismatch=None)
        chunks = _DumpChunks(path)
        for chunk, last in chunks:
            consumed, seen, declined = scanner.scan_dump(chunk, fmt.value, last)
            chunks.consumed = consumed
            for topic, partition, ces in seen:
                if ces or _is_data_topic(topic):
                    partitions.add((topic, partition))
            for line in declined:
                try:
                    item = record_of_line(line, fmt)
                except ValueError:
                    continue
                if _is_data_topic(item.topic) or is_ces(item.value):
                    partitions.add((item.topic, item.partition))
        return chunks.size

    def _learn_inputs(self) -> tuple[set[tuple[str, int]], dict[str, Any], int]:
        """Partitions of the data topics (so ordering waits for all), Avro schemas embedded in
        the dumps, and the input size."""
        partitions: set[tuple[str, int]] = set()
        schemas: dict[str, Any] = {}
        total = 0
        if "-" in self.config.inputs:
            return partitions, schemas, total
        for path in self.config.inputs:
            fmt = self._native_format(path)
            if fmt is not None:
                total += self._learn_native(path, fmt, partitions)
                continue
            with read_dump(path, **self.reader_options) as reader:
                for item in reader:
                    if isinstance(item, RawRecord) and (_is_data_topic(item.topic)
                                                        or is_ces(item.value)):
                        partitions.add((item.topic, item.partition))
                schemas.update(reader.avro_schemas)
                total += reader.total_bytes or 0
        return partitions, schemas, total

    def _cdc_pipeline(self) -> CdcPipeline:
        config = self.config
        if not config.cdc.capture_instances:
            raise ConfigError("change-table rows need a capture-instance description: "
                              "--cdc.capture-instances FILE (see docs/cdc.md)")
        instances = load_capture_instances(config.cdc.capture_instances, config.cdc.database)
        return CdcPipeline(instances, config.cdc,
                           TranslatorConfig(pair_key_changes=self._cdc_pairing(),
                                            max_pending=config.max_pending,
                                            dedupe_capacity=config.dedupe_capacity))

    def _cdc_pairing(self) -> bool:
        """``pair_key_changes`` for change-table rows: as set, else off when the records are
        written as Debezium envelopes. The connector keeps a delete and an insert at one
        position apart (``d`` + tombstone + ``c``, even with equal keys), and the unpaired
        halves are written so, key-change headers included (docs/cdc.md)."""
        config = self.config
        if "pair_key_changes" in config.model_fields_set or self.needs_pairs:
            return config.pair_key_changes
        return config.format not in (OutputFormat.DEBEZIUM, OutputFormat.DEBEZIUM_AVRO)

    def run(self) -> int:
        config = self.config
        if self.cdc:
            cdc = self._cdc_pipeline()
            registrar, offline = _registrar(config)
            self.pipeline = cdc
            self.output = self._make_output(cdc.catalog, registrar, cdc.ledger)
            return self._run(offline, 0)
        partitions, dump_schemas, total_bytes = self._learn_inputs()
        table_schemas = load_table_schemas(config.table_schemas) if config.table_schemas \
            else {}
        decoder = Decoder(config.decode_options(table_schemas),
                          AvroDecoder(_resolver(config, dump_schemas)))
        pipeline = Pipeline(TranslatorConfig(pair_key_changes=config.pair_key_changes,
                                             max_pending=config.max_pending,
                                             dedupe_capacity=config.dedupe_capacity,
                                             native=config.native),
                            decoder, config.ces)
        for name, schema in table_schemas.items():
            pipeline.catalog.add_schema(schema, name)
        pipeline.translator.expect(partitions)
        registrar, offline = _registrar(config)
        self.pipeline = pipeline
        self.output = self._make_output(pipeline.catalog, registrar, None)
        return self._run(offline, total_bytes)

    def _make_output(self, catalog: Any, registrar: SchemaRegistrar | None,
                     ledger: Any) -> Any:
        return Output([self.config.format], self.config, catalog=catalog, registrar=registrar,
                      ledger=ledger)

    def _run(self, offline: InMemoryRegistry | None, total_bytes: int) -> int:
        config, pipeline, output = self.config, self.pipeline, self.output
        show = config.progress == "always" or (config.progress == "auto"
                                               and self.progress_stream.isatty())
        progress = _Progress(self.progress_stream, show, total_bytes or None)
        started = time.monotonic()
        code = EXIT_OK
        with _open_out(config.output) as out, _open_out(config.dlq) as dlq:
            assert out is not None
            sink = FileSink(out, config.file_layout, config.output_partitions)
            dead_sink = FileSink(dlq, "lossless") if dlq is not None else None
            try:
                self._translate(sink, dead_sink, progress, show)
            except KeyboardInterrupt:
                log.warning("interrupted: %d events still waiting were not written",
                            pipeline.translator.counters.pending)
                code = EXIT_INTERRUPTED
            finally:
                self._drain(sink, dead_sink)
                sink.flush()
                if dead_sink is not None:
                    dead_sink.flush()
                progress.close()
                self._report(time.monotonic() - started)
        if offline is not None and config.output_avro_schemas:
            with open(config.output_avro_schemas, "wb") as handle:
                handle.write(msgspec.json.encode({str(k): v
                                                  for k, v in offline.schemas.items()}))
        if code == EXIT_OK and config.fail_on_error and (
                self._rejected() or output.counters.total_encode_errors):
            code = EXIT_REJECTED
        return code

    @property
    def _writes_lines(self) -> bool:
        """Whether the output is exactly the canonical JSON lines (then the native core's
        buffer is written as it is; change-table exports come out of ``CdcPipeline`` as
        records)."""
        config = self.config
        return (config.format is OutputFormat.CANONICAL and config.file_layout == "values"
                and not config.output_tombstones and not self.cdc)

    def _translate_native(self, path: str, fmt: DumpFormat, sink: FileSink,
                          dead_sink: FileSink | None, progress: _Progress, done_bytes: int) -> int:
        """One lossless/kcat dump through the native core, chunk by chunk."""
        pipeline, counters = self.pipeline, self.pipeline.translator.counters
        assert isinstance(pipeline, Pipeline)  # dumps, not change-table rows
        line_no = 1
        chunks = _DumpChunks(path)
        for chunk, last in chunks:
            chunks.consumed, line_no = pipeline.process_dump_chunk(chunk, fmt, path, line_no,
                                                                   last)
            self._drain(sink, dead_sink)
            progress.update(counters.records_in, done_bytes + chunks.size)
        return chunks.size

    def _translate(self, sink: FileSink, dead_sink: FileSink | None, progress: _Progress,
                   show: bool) -> None:
        if isinstance(self.pipeline, CdcPipeline):
            self._translate_cdc(self.pipeline, sink, dead_sink, progress, show)
            return
        pipeline, counters = self.pipeline, self.pipeline.translator.counters
        done_bytes = 0
        for path in self.config.inputs:
            fmt = self._native_format(path) if pipeline.translator.is_native else None
            if fmt is not None:
                done_bytes += self._translate_native(path, fmt, sink, dead_sink, progress,
                                                     done_bytes)
                continue
            with read_dump(path, **self.reader_options) as reader:
                for item in reader:
                    if item.__class__ is DumpLineError:
                        bad: DumpLineError = item  # type: ignore[assignment]
                        raw = RawRecord(topic=f"file:{bad.path}", partition=0,
                                        offset=bad.line_no, value=bad.raw)
                        pipeline.translator.reject(DeadLetter(
                            raw, "read", "DumpLineError", bad.message,
                            error_module="debezium_bridge.formats.dumps"))
                    else:
                        pipeline.process(item)  # type: ignore[arg-type]
                    if pipeline.has_output:
                        self._drain(sink, dead_sink)
                    if show and counters.records_in % 4096 == 0:
                        progress.update(counters.records_in,
                                        done_bytes + (reader.bytes_read or 0))
                done_bytes += reader.bytes_read or 0
        pipeline.flush()

    def _translate_cdc(self, pipeline: CdcPipeline, sink: FileSink, dead_sink: FileSink | None,
                       progress: _Progress, show: bool) -> None:
        counters = pipeline.counters
        changes: list[ChangeRecord] = []
        dead: list[DeadLetter] = []
        for path in self.config.inputs:
            with _open_in(path) as handle:
                for item in pipeline.translate_file(handle, path, flush=False):
                    if isinstance(item, ChangeRecord):
                        changes.append(item)
                    else:
                        dead.append(item)
                    if len(changes) + len(dead) >= 4096:
                        self._write(changes, dead, sink, dead_sink)
                        changes, dead = [], []
                    if show and counters.records_in % 4096 == 0:
                        progress.update(counters.records_in, 0)
        self._write(changes, dead, sink, dead_sink)
        pipeline.flush()

    def _drain(self, sink: FileSink, dead_sink: FileSink | None) -> None:
        if self._writes_lines and isinstance(self.pipeline, Pipeline):
            lines, count, rejected = self.pipeline.drain_json()
            if count:
                sink.write_lines(lines, count)
                written = self.output.counters.records
                written[self.config.format] = written.get(self.config.format, 0) + count
            self._write_dead([self.output.dead_letter(d) for d in rejected], dead_sink)
            return
        changes, dead = self.pipeline.drain()
        self._write(changes, dead, sink, dead_sink)

    def _write(self, changes: list[ChangeRecord], dead: list[DeadLetter], sink: FileSink,
               dead_sink: FileSink | None) -> None:
        records = self.output.encode_many(changes)
        letters = [self.output.dead_letter(d) for d in dead]
        failed = [r for r in records if r.kind == "dead_letter"]
        if failed:
            records = [r for r in records if r.kind == "change"]
            letters += failed
        sink.write(records)
        self._write_dead(letters, dead_sink)

    def _write_dead(self, letters: list[Any], dead_sink: FileSink | None) -> None:
        for letter in letters:
            self._log_rejection(letter)
        if dead_sink is not None and letters:
            dead_sink.write(letters)

    def _log_rejection(self, letter: Any) -> None:
        self.rejected_logged += 1
        if self.rejected_logged <= _LOGGED_REJECTIONS:
            h = {k: (v or b"").decode("utf-8", "replace") for k, v in letter.headers}
            log.warning("rejected %s[%s]@%s %s: %s", h.get("__connect.errors.topic"),
                        h.get("__connect.errors.partition"), h.get("__connect.errors.offset"),
                        h.get("__connect.errors.stage"),
                        h.get("__connect.errors.exception.message"))
        elif self.rejected_logged == _LOGGED_REJECTIONS + 1:
            log.warning("more records rejected; every one is in the dead-letter file (--dlq)")

    def _report(self, elapsed: float) -> None:
        pipeline = self.pipeline
        counters = pipeline.translator.counters
        log.info("%s", counters.summary())
        extra: dict[str, Any] = {}
        if isinstance(pipeline, Pipeline):
            segments = pipeline.assembler.counters
            if segments.records_in != segments.passed or segments.split_updates:
                log.info("%s", segments.summary())
            extra["ces_input"] = segments.as_dict()
        extra.update(self._extra_counters())
        log.info("%s", self.output.summary())
        log.info("%d records in %.2f s; state %s", counters.records_in, elapsed,
                 pipeline.translator.state_size())
        if self.config.counters_json:
            with open(self.config.counters_json, "w") as handle:
                handle.write(msgspec.json.encode(
                    {**counters.as_dict(), **extra,
                     "output": self.output.counters.as_dict()}).decode() + "\n")

    def _extra_counters(self) -> dict[str, Any]:
        return {}

    def _rejected(self) -> int:
        pipeline = self.pipeline
        if isinstance(pipeline, Pipeline):
            return pipeline.dead_letters
        return pipeline.counters.dead_letters


def run_convert(config: ConvertConfig) -> int:
    """Run one conversion; returns the process exit code."""
    return Conversion(config).run()
