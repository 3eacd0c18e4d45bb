"""The CLI's sink: output records into a file, as values or as lossless dump lines.

``values`` writes each record's value on its own line (text formats only; a tombstone is
``null``). ``lossless`` writes our lossless JSON lines (topic, partition, offset, timestamp,
headers, key and value in base64), which ``convert`` reads back: the partition is Kafka's
default partitioner over the topic's partitions (murmur2 of the key; keyless records
round-robin) and offsets count per topic partition, as a topic would hold them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import BinaryIO, Literal

from debezium_bridge.errors import ConfigError
from debezium_bridge.formats.dumps import write_lossless
from debezium_bridge.model.records import RawRecord
from debezium_bridge.output import OutputRecord
from debezium_bridge.partitioner import partition_for

FileLayout = Literal["values", "lossless"]


class FileSink:
    """Writes :class:`OutputRecord` s to one binary stream."""

    def __init__(self, out: BinaryIO, layout: FileLayout, partitions: int = 1) -> None:
        if partitions < 1:
            raise ConfigError("output_partitions must be at least 1")
        self.out = out
        self.layout = layout
        self.partitions = partitions
        self.written = 0
        self._offsets: dict[tuple[str, int], int] = {}
        self._round_robin = 0

    def write(self, records: Iterable[OutputRecord]) -> None:
        if self.layout == "values":
            lines = [(r.value if r.value is not None else b"null") + b"\n" for r in records]
            self.out.write(b"".join(lines))
            self.written += len(lines)
        else:
            self.written += write_lossless((self._placed(r) for r in records), self.out)

    def write_lines(self, lines: bytes, count: int) -> None:
        """``count`` values already joined as lines (the canonical JSON lines of the native
        core); values layout only."""
        self.out.write(lines)
        self.written += count

    def _placed(self, record: OutputRecord) -> RawRecord:
        if record.key is not None:
            partition = partition_for(record.key, self.partitions)
        else:
            partition = self._round_robin % self.partitions
            self._round_robin += 1
        where = (record.topic, partition)
        offset = self._offsets.get(where, 0)
        self._offsets[where] = offset + 1
        return RawRecord(record.topic, partition, offset, record.timestamp, record.key,
                         record.value, record.headers)

    def flush(self) -> None:
        self.out.flush()
