"""CES Avro (``@encoding = Binary``): envelope ``ChangeEvent`` with ``data`` = Avro binary of
``Data`` (the CES message format on MS Learn,
https://learn.microsoft.com/en-us/sql/relational-databases/track-changes/change-event-streaming/message-format,
as summarized in the reference ``ces.md`` §1.5, A5; schemas from MS Learn in ``avro/``, checked
against the transcriptions in ``tests/data/ces/schemas``).

Events are read back with fastavro and the published ``.avsc`` files (not the package's copy),
and must say what the JSON encoding of the same records says.
"""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import fastavro
import pytest

from debezium_bridge.formats.ces import avro as ces_avro
from debezium_bridge.formats.ces.encode import CesEncoder
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.testing.simulator import _DEMO_ROWS, CUSTOMERS, CdcSimulator, Insert, demo
from tests.paths import DATA, ROOT
from tests.unit.ces_support import PROPAGATE, as_records, ces_values, events, run

AVRO = ROOT / "avro"
NAMES = {"ces_changeevent_v1.avsc": ces_avro.CHANGE_EVENT_SCHEMA,
         "ces_data_v1_2026-08.avsc": ces_avro.data_schema("2026-08"),
         "ces_data_v1_2025.avsc": ces_avro.data_schema("2025")}


def published(name: str) -> Any:
    return fastavro.parse_schema(json.loads((AVRO / name).read_text()))


def read(schema: Any, raw: bytes) -> Any:
    buffer = io.BytesIO(raw)
    datum = fastavro.schemaless_reader(buffer, schema, None)
    assert buffer.tell() == len(raw)
    return datum


@pytest.mark.parametrize("name", sorted(NAMES))
def test_schemas_are_the_published_ones(name: str) -> None:
    ours = json.loads((AVRO / name).read_text())
    assert ours == NAMES[name]
    # the schema as transcribed from MS Learn (tests/data/ces/PROVENANCE.md)
    assert json.loads((DATA / "ces" / "schemas" / name).read_text()) == ours


@pytest.fixture(scope="module")
def demo_run() -> Any:
    records, expected = demo()
    changes, _, pipeline = run(records)
    return changes, pipeline, expected


def avro_values(demo_run: Any, **options: Any) -> list[bytes]:
    changes, pipeline, _ = demo_run
    encoder = CesEncoder(CesOptions(**options), pipeline.catalog, encoding="avro")
    values = [m.value for c in changes for m in encoder.encode(c)]
    events(values, CesOptions(**options))
    return values


@pytest.mark.parametrize("revision", ["2026-08", "2025"])
def test_avro_events_match_the_json_events(demo_run, revision: str) -> None:
    changes, pipeline, expected = demo_run
    envelope_schema = published("ces_changeevent_v1.avsc")
    data_schema = published(f"ces_data_v1_{revision}.avsc")
    json_events = events(ces_values(changes, pipeline))
    values = avro_values(demo_run, avro_data_schema=revision)
    assert len(values) == len(json_events) == len(expected.changes)
    for value, json_event in zip(values, json_events, strict=True):
        envelope = read(envelope_schema, value)
        data = read(data_schema, envelope["data"])
        assert envelope["datacontenttype"] == "application/avro"  # A3 default
        for attribute in ("specversion", "type", "source", "id", "logicalid", "time",
                          "operation", "segmentindex", "finalsegment"):
            assert envelope[attribute] == json_event[attribute]
        json_data = json_event["data"]
        if revision == "2025":
            assert "finalevent" not in data["eventsource"]["transaction"]
            del json_data["eventsource"]["transaction"]["finalevent"]
        assert data == json_data
    events(values)  # the validator accepts Avro events too


def test_avro_round_trip_equals_json_round_trip(demo_run) -> None:
    for revision in ("2026-08", "2025"):
        back, dead, _ = run(as_records(avro_values(demo_run, avro_data_schema=revision)))
        assert dead == []
        json_back, _, _ = run(as_records(ces_values(demo_run[0], demo_run[1])))
        assert [(r.op, r.key, r.before, r.after, r.tx) for r in back] == \
            [(r.op, r.key, r.before, r.after, r.tx) for r in json_back]


@pytest.mark.parametrize("base", [0, 1])
def test_avro_segments(base: int) -> None:
    unit = "avro é 日本 😀 "
    half = unit * (750_000 // len(unit.encode()))  # two columns: none above the 1 MB cut
    row = _DEMO_ROWS[0] | {"id": 7, "email": half, "notes": half[::-1]}
    sim = CdcSimulator([CUSTOMERS], modes=PROPAGATE)
    sim.commit([Insert("customers", row)])
    (change,), _, pipeline = run(sim.records)
    options = CesOptions(max_message_size_kb=256, segment_index_base=base)
    values = [m.value for m in CesEncoder(options, pipeline.catalog,
                                          encoding="avro").encode(change)]
    events(values, options)
    limit = 256 * 1024
    assert len(values) >= 1_500_000 // limit + 1 and all(len(v) <= limit for v in values)
    assert all(len(v) > 0.99 * limit for v in values[:-1])
    envelope_schema = published("ces_changeevent_v1.avsc")
    envelopes = [read(envelope_schema, v) for v in values]
    n = len(values)
    assert [e["segmentindex"] for e in envelopes] == list(range(base, base + n))
    assert [e["finalsegment"] for e in envelopes] == [False] * (n - 1) + [True]
    data = read(published("ces_data_v1_2026-08.avsc"), b"".join(e["data"] for e in envelopes))
    current = json.loads(data["eventrow"]["current"])
    assert (current["email"], current["notes"]) == (row["email"], row["notes"])
    shuffled = values[1:]
    random.Random(3).shuffle(shuffled)
    (back,), dead, _ = run(as_records([*shuffled, values[0]]))  # the first segment last
    assert dead == [] and back.after == row


def test_avro_content_type_option(demo_run) -> None:
    values = avro_values(demo_run, avro_datacontenttype="avro/binary")
    envelope = read(published("ces_changeevent_v1.avsc"), values[0])
    assert envelope["datacontenttype"] == "avro/binary"


def test_corrupt_avro_is_a_dead_letter(demo_run) -> None:
    value = avro_values(demo_run)[0]
    changes, dead, _ = run(as_records([value[: len(value) // 2]]))
    assert changes == [] and len(dead) == 1 and dead[0].stage == "decode"


def test_schema_files_exist() -> None:
    assert sorted(p.name for p in Path(AVRO).glob("ces_*.avsc")) == sorted(NAMES)
