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

from debezium_bridge.core import Translator
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.core.translator import translate_stream
from debezium_bridge.formats.ces.assemble import CesAssembler
from debezium_bridge.formats.ces.decode import CesDecoder
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.columns import ColumnCatalog
from debezium_bridge.formats.debezium.decode import Decoder
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

    def process(self, record: KafkaRecord) -> None:
        raw = record if record.__class__ is RawRecord else as_raw_record(record)
        process = self.translator.process
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
