"""Counters that prove conservation: every input record is accounted for exactly once."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class Counters:
    """records_in = changes_out + merged + duplicates + side_records + tombstones + dead_letters
    + skipped + pending.

    ``merged`` counts input events absorbed into another output (the second half of a paired
    primary-key change or of a folded delete+create). ``skipped`` counts ``op=m`` messages.
    ``late`` (informational) counts events that arrived after their position was released.
    ``replay_mismatches`` (informational, **part of** ``dead_letters``, not a term of its own)
    counts replays whose images differ from the original's: dead letters with stage
    ``replay-mismatch``, where an identical replay counts in ``duplicates``.
    """

    records_in: int = 0
    changes_out: int = 0
    merged: int = 0
    duplicates: int = 0
    side_records: int = 0
    tombstones: int = 0
    dead_letters: int = 0
    skipped: int = 0
    pending: int = 0
    late: int = 0
    key_changes_paired: int = 0
    released_by_pressure: int = 0
    replay_mismatches: int = 0

    @property
    def accounted(self) -> int:
        return (self.changes_out + self.merged + self.duplicates + self.side_records
                + self.tombstones + self.dead_letters + self.skipped + self.pending)

    @property
    def balanced(self) -> bool:
        return self.records_in == self.accounted

    def as_dict(self) -> dict[str, int | bool]:
        return {**asdict(self), "balanced": self.balanced}

    def summary(self) -> str:
        return (
            f"records_in={self.records_in} = changes_out={self.changes_out} + merged={self.merged}"
            f" + duplicates={self.duplicates} + side_records={self.side_records}"
            f" + tombstones={self.tombstones} + dead_letters={self.dead_letters}"
            f" + skipped={self.skipped} + pending={self.pending}"
            f" [{'balanced' if self.balanced else 'NOT BALANCED'}]"
            f" late={self.late} key_changes_paired={self.key_changes_paired}"
            f" replay_mismatches={self.replay_mismatches} (of dead_letters)"
        )
