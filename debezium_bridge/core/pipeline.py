"""The translator with CES input and SQL column types: what the CLI and library users run when
they read CES events or write CES / Debezium output.

::

    pipeline = Pipeline()
    encoder = CesEncoder(catalog=pipeline.catalog)
    for item in pipeline.translate(records):          # Debezium and CES records, any mix
        if isinstance(item, ChangeRecord):
            messages = encoder.encode(item)
        else:
            ...                                       # a DeadLetter
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import IO

from debezium_bridge.core import Translator, native
from debezium_bridge.core.counters import Counters
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.core.translator import translate_stream
from debezium_bridge.errors import ConfigError
from debezium_bridge.formats.cdc.catalog import CaptureInstance, LsnTimes, load_lsn_times
from debezium_bridge.formats.cdc.decode import CdcDecoder
from debezium_bridge.formats.cdc.rows import CdcRow, RowReadError, read_rows
from debezium_bridge.formats.cdc.settings import CdcSettings
from debezium_bridge.formats.ces.assemble import CesAssembler
from debezium_bridge.formats.ces.decode import CesDecoder
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.columns import CatalogColumn, ColumnCatalog
from debezium_bridge.formats.debezium.decode import Decoder
from debezium_bridge.formats.debezium.writer import KeyChangeLedger
from debezium_bridge.formats.dumps import DumpFormat, record_of_line
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import KafkaRecord, RawRecord, as_raw_record
from debezium_bridge.model.sqltype import parse_type


class Pipeline:
    """:class:`CesAssembler` → :class:`Translator` (whose decoder reads Debezium and CES), with
    a :class:`ColumnCatalog` fed by every schema the decoder compiles and every CES ``cols``.

    Counters: ``translator.counters`` for the records the translator saw, and
    ``assembler.counters`` for the CES segments (see :class:`CesAssembler`).
    """

    def __init__(self, config: TranslatorConfig | None = None, decoder: Decoder | None = None,
                 ces_options: CesOptions | None = None,
                 catalog: ColumnCatalog | None = None) -> None:
        self.catalog = catalog if catalog is not None else ColumnCatalog()
        self.decoder = decoder or Decoder()
        self.decoder.add_schema_listener(self.catalog.add_schema)
        self.decoder.ces = CesDecoder(ces_options, self.catalog)
        self.translator = Translator(config, self.decoder)
        self.assembler = CesAssembler(ces_options)
        self._native_seen = 0
        if self.translator.is_native:
            # the native core reads what is not CES itself; the rest comes here, through the
            # assembler, to the Python decoder
            self.translator.native_fallback = self._declined

    def _declined(self, record: KafkaRecord) -> list[native.Result]:
        raw = record if record.__class__ is RawRecord else as_raw_record(record)
        decode = self.decoder.decode
        return [result for item in self.assembler.feed(raw)  # type: ignore[arg-type]
                for result in native.fallback_results(decode, item)]

    def _sync_assembler(self) -> None:
        """Records the native core read itself passed the assembler (they are not CES)."""
        seen = self.translator._core.native_records
        if seen != self._native_seen:
            counters = self.assembler.counters
            counters.records_in += seen - self._native_seen
            counters.passed += seen - self._native_seen
            self._native_seen = seen

    def process(self, record: KafkaRecord) -> None:
        self.process_many((record,))

    # -- dump files on the native core ----------------------------------------------------------
    def process_dump_chunk(self, chunk: bytes | bytearray | memoryview, fmt: DumpFormat,
                           path: str, line_no: int, last: bool) -> tuple[int, int]:
        """Translate the complete lines of a chunk of a lossless or kcat dump file on the
        native core (no Python object per line); returns the bytes consumed and the next line
        number. Lines it does not read go to the Python reader and decoder; a line that cannot
        be read is a dead letter (stage ``read``), as in :class:`~debezium_bridge.formats.dumps
        .DumpReader`."""
        core = self.translator._core

        def line_record(line: bytes, number: int) -> RawRecord:
            """Where a line that is no record stands: the file and its line number."""
            return RawRecord(topic=f"file:{path}", partition=0, offset=number, value=line)

        def line_fallback(line: bytes, number: int) -> list[native.Result]:
            try:
                raw = record_of_line(line, fmt)
            except ValueError as exc:
                return [("dead", DeadLetter(line_record(line, number), "read", "DumpLineError",
                                            str(exc),
                                            error_module="debezium_bridge.formats.dumps"))]
            return self._declined(raw)

        def mismatch_line(line: bytes, number: int, message: str) -> DeadLetter:
            try:
                raw = record_of_line(line, fmt)
            except ValueError:  # the native reader read what the Python one does not
                raw = line_record(line, number)
            return native.mismatch_letter(raw, message)

        try:
            consumed, next_line = core.process_dump(chunk, fmt.value, line_no, last,
                                                    line_fallback, mismatch_line)
        finally:
            self.translator._sync()
            self._sync_assembler()
        return consumed, next_line

    def process_many(self, records: Iterable[KafkaRecord]) -> None:
        """Translate records in order (the native core reads them in one call)."""
        if self.translator.is_native:
            try:
                self.translator.process_many(records)
            finally:
                self._sync_assembler()
            return
        process = self.translator.process
        for record in records:
            raw = record if record.__class__ is RawRecord else as_raw_record(record)
            for item in self.assembler.feed(raw):  # type: ignore[arg-type]
                process(item)

    def flush(self) -> None:
        """End of input: incomplete CES events become dead letters, waiting events are
        released."""
        self.assembler.flush()
        self.translator.flush()

    def drain(self) -> tuple[list[ChangeRecord], list[DeadLetter]]:
        changes, dead = self.translator.drain()
        assembler_dead = self.assembler.drain_dead()
        return changes, assembler_dead + dead if assembler_dead else dead

    def drain_json(self) -> tuple[bytes, int, list[DeadLetter]]:
        """As :meth:`Translator.drain_json`, with the assembler's dead letters first."""
        lines, count, dead = self.translator.drain_json()
        assembler_dead = self.assembler.drain_dead()
        return lines, count, assembler_dead + dead if assembler_dead else dead

    @property
    def has_output(self) -> bool:
        return self.translator.has_output or bool(self.assembler._dead)

    def translate(self, records: Iterable[KafkaRecord], *, flush: bool = True
                  ) -> Iterator[ChangeRecord | DeadLetter]:
        """Process ``records`` and yield dead letters and change records as they come."""
        return translate_stream(self, records, flush=flush)

    @property
    def dead_letters(self) -> int:
        return self.translator.counters.dead_letters + self.assembler.counters.dead_letters


class CdcPipeline:
    """SQL Server change-table rows → :class:`Translator` (docs/cdc.md).

    :class:`~debezium_bridge.formats.cdc.decode.CdcDecoder` turns rows into the connector's
    events and hands them to the translator, which orders, pairs key changes and counts as for
    any input; :attr:`catalog` holds the captured columns' SQL types and :attr:`ledger` the key
    changes written as one update, for the CES and Debezium encoders::

        pipeline = CdcPipeline(load_capture_instances(["instances.csv"]))
        output = Output(["debezium"], catalog=pipeline.catalog, ledger=pipeline.ledger)
        with open("dbo_customers_CT.csv", "rb") as handle:
            for item in pipeline.translate_file(handle, "dbo_customers_CT.csv"):
                ...  # ChangeRecord or DeadLetter

    Counters (``translator.counters``): every row is an input record; an update's old-values
    row counts as ``merged``, a repeated identical row as a duplicate, a bad row as a dead
    letter.
    """

    def __init__(self, instances: Mapping[str, CaptureInstance],
                 settings: CdcSettings | None = None, config: TranslatorConfig | None = None,
                 lsn_times: LsnTimes | None = None) -> None:
        self.settings = settings or CdcSettings()
        self.instances = dict(instances)
        # change-table rows are not Kafka records: they enter through process_event (on the
        # native core as flattened events, like the records its decoder declines)
        self.translator = Translator(config or TranslatorConfig())
        self.ledger = KeyChangeLedger()
        self.catalog = ColumnCatalog()
        if lsn_times is None and self.settings.lsn_time_mapping:
            lsn_times = load_lsn_times(self.settings.lsn_time_mapping,
                                       self.settings.offset_minutes)
        self.decoder = CdcDecoder(self.instances, self.translator, self.settings, lsn_times,
                                  self.ledger)
        for table in self.decoder.tables.values():
            by_name = {c.name: c for c in table.instance.columns}
            columns = []
            for index, name in enumerate(table.names):
                captured = by_name[name]
                nullable = (name not in table.key_columns if captured.nullable is None
                            else captured.nullable)  # key columns are NOT NULL
                columns.append(CatalogColumn(
                    name, parse_type(captured.sql_type or "nvarchar(max)").text, index,
                    nullable=nullable))
            self.catalog.add(table.table, columns)

    @property
    def counters(self) -> Counters:
        return self.translator.counters

    def feed(self, row: CdcRow, instance: str) -> None:
        """One row of capture instance ``instance``."""
        self.decoder.feed(row, instance)

    def read(self, handle: IO[bytes], source: str) -> None:
        """Every row of one exported file (CSV or JSON; rows that cannot be read are dead
        letters)."""
        for _ in self._read(handle, source):
            pass

    def _read(self, handle: IO[bytes], source: str) -> Iterator[None]:
        s = self.settings
        instance, rows = read_rows(handle, source, instances=self.instances,
                                   wanted=s.capture_instance, columns=s.columns,
                                   null_values=s.null_values)
        if instance is None:
            raise ConfigError(f"{source}: which capture instance? (set cdc.capture_instance; "
                              f"described: {', '.join(sorted(self.instances))})")
        feed, reject = self.decoder.feed, self.translator.reject
        for item in rows:
            if item.__class__ is RowReadError:
                bad: RowReadError = item  # type: ignore[assignment]
                reject(DeadLetter(RawRecord(bad.source, 0, bad.line, None, None, bad.raw),
                                  "cdc-read", "RowReadError", bad.message,
                                  error_module="debezium_bridge.formats.cdc.rows"))
            else:
                feed(item, instance.name)  # type: ignore[arg-type]
            yield None
        self.translator.mark_idle((source, 0))  # a file that ended holds back nothing

    def flush(self) -> None:
        """End of input: buffered rows are translated, waiting events released."""
        self.decoder.flush()
        self.translator.flush()

    def drain(self) -> tuple[list[ChangeRecord], list[DeadLetter]]:
        return self.translator.drain()

    @property
    def has_output(self) -> bool:
        return self.translator.has_output

    def translate_file(self, handle: IO[bytes], source: str, *, flush: bool = True
                       ) -> Iterator[ChangeRecord | DeadLetter]:
        """Read one file and yield dead letters and change records as they come out."""
        return self._translated(self._read(handle, source), flush)

    def translate(self, rows: Iterable[tuple[CdcRow, str]], *, flush: bool = True
                  ) -> Iterator[ChangeRecord | DeadLetter]:
        """Feed ``(row, capture instance)`` pairs; yield dead letters and change records."""
        def fed() -> Iterator[None]:
            for row, instance in rows:
                self.decoder.feed(row, instance)
                yield None

        return self._translated(fed(), flush)

    def _translated(self, steps: Iterable[object], flush: bool
                    ) -> Iterator[ChangeRecord | DeadLetter]:
        for _ in steps:
            if self.translator.has_output:
                yield from self._drained()
        if flush:
            self.flush()
            yield from self._drained()

    def _drained(self) -> Iterator[ChangeRecord | DeadLetter]:
        changes, dead = self.translator.drain()
        yield from dead
        yield from changes
