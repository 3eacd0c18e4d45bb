"""Inputs whose size once made a format reader quadratic: one CES event in many segments, an
incomplete one, a wide change-table row whose column names differ in case, a wide update whose
LOB columns were not sent, and a wide row image full of the unavailable placeholder.

Each was found by feeding one large input to both cores (these readers are Python on both):

- one CES event in 10,000 shuffled segments: 4 s (the held indices were sorted per segment);
- an incomplete CES event of 8,000 segments: a 511 MB DLQ (each of its dead letters listed
  every segment's index);
- a 20,000-column change-table row with its column names in upper case: 6 s (each column not
  found under its own name scanned the row);
- an update of 20,000 ``nvarchar(max)`` columns, none sent: 3 s (the new row's unavailable
  columns looked up in a tuple of the old row's, and both tuples grown a column at a time by
  the ``RowDecoder``, which the Debezium readers share).

As in tests/differential/test_scale.py, whose hang guard runs each case here, the sizes are
such that the quadratic code would run for a minute or more (measured: 84 s for the segments,
73 s for the rows, 103 s for the updates' tuple lookup alone, 72 s for the row decoder; the
incomplete event's message held all its indices); what is asserted is the output against what
the input says, not timings. Like every unit test, each case runs on both cores, except the two
whose code is the same Python on both (:data:`ONE_CORE`).
"""

from __future__ import annotations

import base64
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.core.pipeline import CdcPipeline, Pipeline
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.formats.canonical import to_dict
from debezium_bridge.formats.cdc import CdcSettings, load_capture_instances
from debezium_bridge.formats.cdc.catalog import CaptureInstance
from debezium_bridge.formats.ces.encode import CesEncoder
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.debezium.logical import RowDecoder
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.schema import Column, TableSchema
from debezium_bridge.testing.simulator import _DEMO_ROWS, CUSTOMERS, CdcSimulator, Insert
from tests.differential.test_scale import guarded
from tests.unit.cdc_support import json_lines, row
from tests.unit.ces_support import PROPAGATE, as_records, run

PLACEHOLDER = "__debezium_unavailable_value"  # the connector's default placeholder
SEGMENTS = 40_000
ONE_CORE = pytest.mark.parametrize("translation_core", ["python"], indirect=True)
"""For a case whose code is the same Python on both cores and that costs seconds at its size:
run it on the reference core only (instead of the conftest's both)."""


# --------------------------------------------------------------------------- CES segments


def ces_event(length: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """One whole CES JSON event whose ``data`` text is longer than ``length``, and its row."""
    inserted = _DEMO_ROWS[0] | {"id": 7, "notes": "n" * length}
    sim = CdcSimulator([CUSTOMERS], modes=PROPAGATE)
    sim.commit([Insert("customers", inserted)])
    (change,), _, pipeline = run(sim.records)
    (message,) = CesEncoder(catalog=pipeline.catalog).encode(change)
    return json.loads(message.value), inserted


def segmented(event: dict[str, Any], count: int, step: int = 1) -> list[bytes]:
    """``event``'s ``data`` cut into ``count`` segments, numbered 1, 1 + step, 1 + 2 * step...

    The first holds 64 characters, enough to show that it starts the document (base 1, not
    base 0 with segment 0 still to come); the rest is cut evenly."""
    text = event["data"]
    rest = len(text) - 64
    bounds = [0, *(64 + rest * k // (count - 1) for k in range(count))]
    return [json.dumps({**event, "segmentindex": 1 + k * step, "finalsegment": k == count - 1,
                        "data": text[bounds[k]:bounds[k + 1]]}).encode() for k in range(count)]


def ces_pipeline() -> Pipeline:
    return Pipeline(ces_options=CesOptions(max_pending_segments=10 * SEGMENTS))


def test_one_ces_event_in_many_shuffled_segments() -> None:
    """Reassembled, the segments are the event they were cut from."""
    event, inserted = ces_event(SEGMENTS)
    values = segmented(event, SEGMENTS)
    random.Random(7).shuffle(values)

    def case() -> None:
        (whole,), _, _ = run(as_records([json.dumps(event).encode()]), ces_pipeline())
        (change,), dead, pipeline = run(as_records(values), ces_pipeline())
        assert dead == []
        assert change.after == inserted
        assert {**to_dict(change), "lineage": None} == {**to_dict(whole), "lineage": None}
        counters = pipeline.assembler.counters
        assert (counters.assembled, counters.absorbed, counters.held) == (1, SEGMENTS - 1, 0)

    guarded(case)


@pytest.mark.parametrize("count", [20_000])
def test_an_incomplete_ces_event_names_its_segments_as_ranges(count: int) -> None:
    """Each of the dead letters names the held segments in a short message: listing every
    index made the DLQ grow with the square of the segments (here: several GB)."""
    event, _ = ces_event(count)
    values = segmented(event, count)
    missing = count // 2  # base 1: values[missing - 1] never arrives
    held = values[:missing - 1] + values[missing:]
    alternate = segmented(event, count, step=2)  # 1, 3, 5...: every other one missing
    prefix = f"CES logicalid {event['logicalid']}: segments ["
    suffix = "; input ended); a missing segment is reported, not guessed"

    def case() -> None:
        for values, listed, final in (
                (held, f"1-{missing - 1}, {missing + 1}-{count}", count),
                (alternate, ", ".join(str(i) for i in range(1, 40, 2))
                 + f", ... ({count} ranges, {count} segments)", 2 * count - 1)):
            changes, dead, _ = run(as_records(values), ces_pipeline())
            assert changes == [] and len(dead) == len(values)
            assert sorted(d.record.value or b"" for d in dead) == sorted(values)
            expected = (f"{prefix}{listed}] of an incomplete event (final index {final}"
                        f"{suffix}")
            assert {d.message for d in dead} == {expected}
            assert len(expected) < 400  # each dead letter's, not growing with the event
            assert max(sum(len(v or b"") for _, v in d.context_headers()) for d in dead) < 1000

    guarded(case)


# --------------------------------------------------------------------------- change-table rows


def capture_instances(tmp: Path, columns: list[list[str]]) -> dict[str, CaptureInstance]:
    path = tmp / "instances.json"
    path.write_text(json.dumps({"dbo_t": {"table": "db.dbo.t", "key": ["id"],
                                          "columns": columns}}))
    return load_capture_instances([str(path)])


def translate_rows(instances: dict[str, CaptureInstance],
                   rows: list[dict[str, Any]]) -> list[ChangeRecord]:
    """The change records of change-table rows (none may be a dead letter)."""
    pipeline = CdcPipeline(instances, CdcSettings(), TranslatorConfig())
    out = list(pipeline.translate_file(io.BytesIO(json_lines(rows)), "rows.jsonl"))
    assert all(isinstance(o, ChangeRecord) for o in out), [getattr(o, "message", o)
                                                           for o in out]
    assert pipeline.counters.balanced, pipeline.counters.summary()
    return out  # type: ignore[return-value]


def all_bits(width: int) -> str:
    return "0x" + ((1 << width) - 1).to_bytes((width + 7) // 8, "big").hex().upper()


@pytest.mark.parametrize(("width", "count"), [(25_000, 10)])
def test_wide_rows_whose_column_names_differ_in_case(tmp_path: Path, width: int,
                                                     count: int) -> None:
    """Names (the ``__$`` columns' too) are matched ignoring case, the first match in row
    order; absent columns are NULL."""
    names = [f"c{i}" for i in range(width)]
    instances = capture_instances(tmp_path, [["id", "int"], ["note", "int"],
                                             *([name, "int"] for name in names)])
    rows = []
    for key in range(count):
        shouted = {name.upper(): i for i, name in enumerate(names) if i % 2 == 0}
        rows.append({k.upper(): v for k, v in row(100 + key, 50, 2, all_bits(width + 2)).items()}
                    | {"ID": key, "NOTE": 1, "Note": 2} | shouted)

    def case() -> None:
        changes = translate_rows(instances, rows)
        assert [c.key for c in changes] == [{"id": key} for key in range(count)]
        for key, change in enumerate(changes):
            assert change.after == {"id": key, "note": 1,
                                    **{name: i if i % 2 == 0 else None
                                       for i, name in enumerate(names)}}

    guarded(case)


@ONE_CORE
@pytest.mark.parametrize(("width", "count"), [(30_000, 20)])
def test_wide_updates_whose_lob_columns_were_not_sent(tmp_path: Path, width: int,
                                                      count: int) -> None:
    """Rows 3 + 4 of updates whose mask sets the key column's bit only: every NULL
    ``nvarchar(max)`` column (its bit 0) is unavailable, listed once in column order."""
    names = [f"c{i}" for i in range(width)]
    instances = capture_instances(tmp_path, [["id", "int"],
                                             *([name, "nvarchar(max)"] for name in names)])
    id_bit = "0x" + (1).to_bytes((width + 1 + 7) // 8, "big").hex().upper()
    nulls = dict.fromkeys(names)
    rows = []
    for key in range(count):
        rows += [row(100 + key, 50, 3, id_bit, id=key, **nulls),
                 row(100 + key, 50, 4, id_bit, id=key, **nulls)]

    def case() -> None:
        changes = translate_rows(instances, rows)
        assert [(c.op, c.key) for c in changes] == [("update", {"id": key})
                                                   for key in range(count)]
        for change in changes:
            assert change.unavailable_columns == names
            assert change.before == change.after == {"id": change.key["id"], **nulls}

    guarded(case)


@ONE_CORE
@pytest.mark.parametrize(("width", "count"), [(30_000, 60)])
def test_wide_row_images_full_of_the_placeholder(width: int, count: int) -> None:
    """The generated row decoder lists the placeholder columns: text ones first, then binary
    ones, each in schema order; the other columns keep their values."""
    kinds = ["bytes" if i % 10 == 0 else "string" for i in range(width)]
    decoder = RowDecoder(TableSchema("t", tuple(Column(f"c{i}", kind)
                                               for i, kind in enumerate(kinds))))
    binary = (PLACEHOLDER.encode(), base64.b64encode(PLACEHOLDER.encode()).decode())
    sent = {i for i in range(width) if i % 7 == 6}
    image: dict[str, Any] = {}
    for i, kind in enumerate(kinds):
        if i in sent:
            image[f"c{i}"] = "text" if kind == "string" else b"bytes"
        else:  # a binary column's placeholder as bytes or as base64 text, alternately
            image[f"c{i}"] = PLACEHOLDER if kind == "string" else binary[i % 20 // 10]
    gone = [f"c{i}" for i, kind in enumerate(kinds) if i not in sent and kind == "string"] \
        + [f"c{i}" for i, kind in enumerate(kinds) if i not in sent and kind == "bytes"]
    expected = image | dict.fromkeys(gone) | {  # binary values become base64 text
        f"c{i}": "Ynl0ZXM=" for i, kind in enumerate(kinds) if i in sent and kind == "bytes"}

    def case() -> None:
        for _ in range(count):
            decoded, unavailable = decoder.decode(dict(image))
            assert unavailable == tuple(gone)
            assert decoded == expected

    guarded(case)
