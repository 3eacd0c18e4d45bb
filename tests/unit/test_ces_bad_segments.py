"""CES segments that cannot be joined are dead letters, never the end of the run.

The segments are cut from a real CES event written by this project's encoder (MF-26 layout:
``segmentindex`` from 1, ``finalsegment`` on the last one, the ``data`` text cut in pieces), then
broken the way the bad-input campaign found: one piece with ``data`` as an object, a conflicting
copy of a segment, an Avro and a JSON segment under one ``logicalid``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.cli import EXIT_OK, main
from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.formats.ces.assemble import CesAssembler
from debezium_bridge.formats.dumps import read_dump, write_lossless
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord
from tests.unit.test_bad_input import TOPIC, envelope, schemaless, source
from tests.unit.test_fuzz_decoders import CES_AVRO, CES_JSON, check

EVENT = CES_JSON[0]
"""A whole CES JSON event (an insert) as a dict."""


def segment(index: int, final: bool, data: Any, event: dict[str, Any] = EVENT) -> bytes:
    return json.dumps({**event, "segmentindex": index, "finalsegment": final,
                       "data": data}).encode()


def cut(text: str, parts: int = 2) -> list[str]:
    step = -(-len(text) // parts)
    return [text[i:i + step] for i in range(0, len(text), step)]


def ces_record(value: bytes, offset: int) -> RawRecord:
    return RawRecord("ces", 0, offset, None, None, value)


def debezium_insert(key: int, commit: int, offset: int) -> RawRecord:
    position = f"00000030:{commit:08x}:0005"
    return RawRecord(TOPIC, 0, offset, None, schemaless({"id": key}), schemaless(envelope(
        after={"id": key, "amount": "AMg="},
        source=source(commit_lsn=position, change_lsn=position))))


def mixed_segments() -> list[bytes]:
    """One ``logicalid``: segment 1 with string ``data``, segment 2 (final) with object
    ``data``."""
    first, _ = cut(EVENT["data"])
    return [segment(1, False, first), segment(2, True, json.loads(EVENT["data"]))]


def run(values: list[bytes]) -> tuple[list[ChangeRecord], list[DeadLetter], Pipeline]:
    pipeline = Pipeline()
    out = list(pipeline.translate([ces_record(v, n) for n, v in enumerate(values)]))
    assert pipeline.assembler.counters.balanced, pipeline.assembler.counters.summary()
    assert pipeline.translator.counters.balanced, pipeline.translator.counters.summary()
    return ([o for o in out if isinstance(o, ChangeRecord)],  # type: ignore[misc]
            [o for o in out if isinstance(o, DeadLetter)], pipeline)


def test_the_cut_segments_reassemble() -> None:
    """The baseline: the same cut, all text, is one event."""
    changes, dead, pipeline = run([segment(n + 1, n == 1, piece)
                                   for n, piece in enumerate(cut(EVENT["data"]))])
    assert dead == [] and len(changes) == 1
    assert pipeline.assembler.counters.assembled == 1


def test_segments_mixing_text_and_object_data_are_dead_letters() -> None:
    values = mixed_segments()
    late = segment(3, False, "x")  # a segment of the same event after it was rejected
    changes, dead, pipeline = run([*values, late])
    assert changes == []
    assert sorted(d.record.value for d in dead) == sorted([*values, late])
    assert {d.stage for d in dead} == {"ces-assemble"}
    assert {d.error_class for d in dead} == {"SegmentError"}
    assert all(EVENT["logicalid"] in d.message and "mix" in d.message for d in dead)
    c = pipeline.assembler.counters
    assert (c.records_in, c.dead_letters, c.held, c.assembled) == (3, 3, 0, 0)


def test_avro_and_json_segments_of_one_logicalid_are_dead_letters() -> None:
    from debezium_bridge.formats.ces import avro as ces_avro

    avro = ces_avro.decode_envelope(CES_AVRO[0])
    avro_first = ces_avro.encode_envelope({**avro, "segmentindex": 1, "finalsegment": False,
                                           "data": avro["data"][:10]})
    json_last = segment(2, True, "tail", {**EVENT, "logicalid": avro["logicalid"]})
    changes, dead, _ = run([avro_first, json_last])
    assert changes == [] and len(dead) == 2
    assert {d.stage for d in dead} == {"ces-assemble"}


def test_a_conflicting_copy_of_a_held_segment_is_a_dead_letter_an_equal_one_a_duplicate() -> None:
    first, second = cut(EVENT["data"])
    values = [segment(1, False, first), segment(1, False, first),  # an equal copy: dropped
              segment(1, False, first[:-1] + "X"),  # a conflicting copy: rejected
              segment(2, True, second)]
    changes, dead, pipeline = run(values)
    assert len(changes) == 1  # the event, from the segments that agree
    (letter,) = dead
    assert letter.record.value == values[2] and letter.stage == "ces-assemble"
    assert "conflict" in letter.message and "segment 1" in letter.message
    c = pipeline.assembler.counters
    assert (c.duplicates, c.dead_letters, c.assembled, c.absorbed) == (1, 1, 1, 1)


def test_a_bug_in_the_assembler_is_a_logged_dead_letter(monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("assembler bug")

    monkeypatch.setattr(CesAssembler, "_join", broken)
    first, second = cut(EVENT["data"])
    with caplog.at_level(logging.ERROR, logger="debezium_bridge"):
        changes, dead, _ = run([segment(1, False, first), segment(2, True, second)])
    assert changes == [] and len(dead) == 2
    assert {d.stage for d in dead} == {"ces-assemble"}
    assert all("assembler bug" in d.message for d in dead)
    assert any(r.exc_info for r in caplog.records if r.name.endswith(".ces.assemble"))


def test_the_cli_writes_the_changes_around_segments_that_cannot_be_joined(tmp_path: Path) -> None:
    """Used to stop with exit code 2 (EnvelopeError escaping the assembler) and lose the change
    held for ordering."""
    records = [debezium_insert(1, 1, 0),
               *(ces_record(v, n) for n, v in enumerate(mixed_segments())),
               debezium_insert(2, 2, 1)]
    dump = tmp_path / "in.jsonl"
    with dump.open("wb") as out:
        write_lossless(records, out)
    changes, dlq = tmp_path / "changes.jsonl", tmp_path / "dlq.jsonl"
    code = main(["convert", str(dump), "-o", str(changes), "--dlq", str(dlq),
                 "--progress", "never"])
    assert code == EXIT_OK
    written = [json.loads(line) for line in changes.read_text().splitlines()]
    assert [(c["op"], c["key"]) for c in written] == [("insert", {"id": 1}), ("insert", {"id": 2})]
    rejected = list(read_dump(str(dlq)))
    assert len(rejected) == 2
    assert all(dict(r.headers)["__connect.errors.stage"] == b"ces-assemble"  # type: ignore[union-attr]
               for r in rejected)


@pytest.mark.parametrize("index,final", [(10**20, True), (-1, True), (1, "true"), (2**31, False)])
def test_odd_segment_attributes_are_classified(index: Any, final: Any) -> None:
    check([ces_record(segment(index, final, EVENT["data"]), 0)])
