"""Helpers for the change-table row tests: run rows through the product, read the results."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from debezium_bridge.core.counters import Counters
from debezium_bridge.core.pipeline import CdcPipeline
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.formats.cdc import CdcSettings, load_capture_instances
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from tests.unit.cdc_model import DESCRIPTION


@dataclass
class Result:
    changes: list[ChangeRecord]
    dead: list[DeadLetter]
    counters: Counters
    pipeline: CdcPipeline

    @property
    def stages(self) -> list[str]:
        return [d.stage for d in self.dead]


def describe(tmp: Path, description: Mapping[str, Any] = DESCRIPTION) -> str:
    path = tmp / "instances.yaml"
    path.write_text(yaml.safe_dump(dict(description)))
    return str(path)


def json_lines(rows: Sequence[Mapping[str, Any]]) -> bytes:
    return b"".join(json.dumps(dict(r)).encode() + b"\n" for r in rows)


def run(rows: Sequence[Mapping[str, Any]] | bytes, tmp: Path, *,
        description: Mapping[str, Any] = DESCRIPTION, pairing: bool = True,
        source: str = "rows.jsonl", **settings: Any) -> Result:
    """Rows (dicts, written as JSON lines; or the bytes of an export) through
    :class:`CdcPipeline`."""
    instances = load_capture_instances([describe(tmp, description)])
    pipeline = CdcPipeline(instances, CdcSettings(**settings),
                           TranslatorConfig(pair_key_changes=pairing))
    data = rows if isinstance(rows, bytes) else json_lines(rows)
    changes, dead = [], []
    for item in pipeline.translate_file(io.BytesIO(data), source):
        (changes if isinstance(item, ChangeRecord) else dead).append(item)
    assert pipeline.counters.balanced, pipeline.counters.summary()
    return Result(changes, dead, pipeline.counters, pipeline)  # type: ignore[arg-type]


def row(start: int, seqval: int, op: int, mask: str | None, **values: Any) -> dict[str, Any]:
    """A change-table row with LSNs as ``0x…`` hex."""
    return {"__$start_lsn": f"0x{start:020X}", "__$seqval": f"0x{seqval:020X}",
            "__$operation": op, "__$update_mask": mask, **values}
