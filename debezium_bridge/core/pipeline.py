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

from collections.abc import Iterable, Iterator

from debezium_bridge.core import Translator, native
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.core.translator import translate_stream
from debezium_bridge.formats.ces.assemble import CesAssembler
from debezium_bridge.formats.ces.decode import CesDecoder
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.columns import ColumnCatalog
from debezium_bridge.formats.debezium.decode import Decoder
from debezium_bridge.formats.dumps import DumpFormat, record_of_line
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import KafkaRecord, RawRecord, as_raw_record


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
    def process_dump_chunk(self, chunk: bytes, fmt: DumpFormat, path: str, line_no: int,
                           last: bool) -> tuple[int, int]:
        """Translate the complete lines of a chunk of a lossless or kcat dump file on the
        native core (no Python object per line); returns the bytes consumed and the next line
        number. Lines it does not read go to the Python reader and decoder; a line that cannot
        be read is a dead letter (stage ``read``), as in :class:`~debezium_bridge.formats.dumps
        .DumpReader`."""
        core = self.translator._core

        def line_fallback(line: bytes, number: int) -> list[native.Result]:
            try:
                raw = record_of_line(line, fmt)
            except ValueError as exc:
                where = RawRecord(topic=f"file:{path}", partition=0, offset=number, value=line)
                return [("dead", DeadLetter(where, "read", "DumpLineError", str(exc),
                                            error_module="debezium_bridge.formats.dumps"))]
            return self._declined(raw)

        def mismatch_line(line: bytes, number: int, message: str) -> DeadLetter:
            return native.mismatch_letter(record_of_line(line, fmt), message)

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
