"""Differential tests of the state runners keep across restarts and of the input that is not a
Kafka record: the native core and the Python reference agree on

* resume points: with ``track_resume_points``, :meth:`Translator.pending_offsets` and
  :meth:`Translator.resume_marks` after every batch of a generated stream (partition
  interleavings, replays, key changes, transaction metadata, bad records; see
  :mod:`tests.differential.streams`);
* restarts: a fresh translator given those marks (``restore_marks``) and the records from the
  resume points on decides every replay the same way, and writes the same output, dead letters
  and counters, on both cores (the marks of each core given to each core);
* events handed over one by one (``process_event``, as the change-table pipeline does, with the
  ``changed`` columns of an update mask), ``drop_duplicate``, transaction ENDs
  (``end_transaction``, its return value too) and idle/active partitions (``mark_idle``,
  ``mark_active``) in random order;
* change-table exports (:class:`~debezium_bridge.formats.cdc.CdcPipeline`) of generated table
  histories, intact and damaged.

The Python core is the reference; replay-mismatch messages are compared up to the image hashes
(see ``test_cores``).
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debezium_bridge.core import Translator, TranslatorConfig
from debezium_bridge.core import native as native_core
from debezium_bridge.errors import RecordError
from debezium_bridge.formats.canonical import to_json
from debezium_bridge.model.change import ChangeEvent, SideKind, SideRecord
from debezium_bridge.model.lsn import parse_lsn
from debezium_bridge.model.records import RawRecord
from tests.differential.streams import Stream, generate
from tests.differential.test_cores import _HASHES, _decoder, configs
from tests.unit.cdc_model import CdcModel
from tests.unit.cdc_support import json_lines, run
from tests.unit.test_cdc_properties import histories

CORES = ("off", "on")


@pytest.fixture(autouse=True)
def _no_forced_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)


class _Out:
    """Everything a translator wrote, in order, as comparable values."""

    def __init__(self) -> None:
        self.lines = bytearray()
        self.dead: list[tuple[Any, ...]] = []

    def take(self, translator: Translator) -> None:
        changes, letters = translator.drain()
        for change in changes:
            self.lines.extend(to_json(change) + b"\n")
        for d in letters:
            r = d.record
            self.dead.append((r.topic, r.partition, r.offset, r.value, d.stage, d.error_class,
                              _HASHES.sub("(hashes)", d.message)))


def _translator(stream: Stream, core: str, config: dict[str, Any], expect: bool) -> Translator:
    translator = Translator(TranslatorConfig(native=core, **config), _decoder(stream))
    assert translator.is_native == (core == "on")
    translator.track_resume_points()
    if expect:
        translator.expect(stream.partitions)
    return translator


def _first_life(stream: Stream, core: str, config: dict[str, Any], batch: int,
                expect: bool) -> tuple[list[Any], _Out]:
    """Per batch: (pending offsets, resume marks, positions read); and the output."""
    translator = _translator(stream, core, config, expect)
    out = _Out()
    trace = []
    positions: dict[tuple[str, int], int] = {}
    records = stream.records
    for lo in range(0, len(records), batch):
        chunk = records[lo:lo + batch]
        translator.process_many(chunk)
        for r in chunk:
            positions[(r.topic, r.partition)] = (r.offset or 0) + 1
        out.take(translator)
        trace.append((translator.pending_offsets(), translator.resume_marks(), dict(positions)))
    translator.flush()
    out.take(translator)
    trace.append((translator.pending_offsets(), translator.resume_marks(), dict(positions)))
    return trace, out


def _second_life(stream: Stream, core: str, config: dict[str, Any], expect: bool,
                 point: tuple[dict[Any, int], dict[Any, Any], dict[Any, int]], from_start: bool
                 ) -> tuple[bytes, list[Any], dict[str, int], dict[str, int]]:
    """A restart from a resume point: marks restored, each partition read again from its
    lowest waiting offset (or where it stopped); or, ``from_start``, everything again (as if
    the connector re-sent all of it: the marks alone decide which events are replays)."""
    pending, marks, positions = point
    translator = _translator(stream, core, config, expect)
    translator.restore_marks(marks)
    assert translator.resume_marks() == marks, "restored marks read back differently"
    out = _Out()
    for r in stream.records:
        tp = (r.topic, r.partition)
        start = min(positions.get(tp, 0), pending.get(tp, positions.get(tp, 0)))
        if from_start or (r.offset or 0) >= start:
            translator.process(r)
            out.take(translator)
    translator.flush()
    out.take(translator)
    return bytes(out.lines), out.dead, translator.counters.as_dict(), translator.state_size()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32), n=st.integers(1, 60), config=configs,
       batch=st.sampled_from((1, 5, 1000)), expect=st.booleans(),
       encoding=st.sampled_from(("json", "json-schema", "avro")), data=st.data())
def test_resume_points_and_restarts_agree(seed: int, n: int, config: dict[str, Any],
                                          batch: int, expect: bool, encoding: str,
                                          data: st.DataObject) -> None:
    stream = generate(seed, encoding=encoding, n_changes=n)
    python_trace, python_out = _first_life(stream, "off", config, batch, expect)
    native_trace, native_out = _first_life(stream, "on", config, batch, expect)
    for i, (p, n_) in enumerate(zip(python_trace, native_trace, strict=True)):
        assert n_[0] == p[0], f"pending offsets differ after batch {i}"
        assert n_[1] == p[1], f"resume marks differ after batch {i}"
    assert bytes(native_out.lines) == bytes(python_out.lines)
    assert native_out.dead == python_out.dead
    # a restart from a point of either core's first life, on each core
    at = data.draw(st.integers(0, len(python_trace) - 1), label="restart after batch")
    from_start = data.draw(st.booleans(), label="everything re-sent")
    lives = [_second_life(stream, core, config, expect, trace[at], from_start)
             for trace in (python_trace, native_trace) for core in CORES]
    reference = lives[0]
    for life in lives[1:]:
        assert life[2] == reference[2], "counters differ after the restart"
        assert life[1] == reference[1], "dead letters differ after the restart"
        assert life[0] == reference[0], "output differs after the restart"
        assert life[3] == reference[3], "state sizes differ after the restart"


def _decoded(stream: Stream) -> list[ChangeEvent | SideRecord | None]:
    """Each record through one Python decoder (``None``: bad input)."""
    decoder = _decoder(stream)
    out: list[ChangeEvent | SideRecord | None] = []
    for record in stream.records:
        try:
            out.append(decoder.decode(record))
        except RecordError:
            out.append(None)
    return out


def _with_mask(event: ChangeEvent) -> ChangeEvent:
    """An update mask, as change-table rows carry (the same for both halves of one update:
    chosen by the position's commit and change LSNs)."""
    image = event.after or event.before or {}
    rng = random.Random(event.sort_key[0] + event.sort_key[1])
    names = tuple(name for name in image if rng.random() < 0.5)
    return msgspec.structs.replace(event, changed=names)


def _events_run(stream: Stream, core: str, config: dict[str, Any], expect: bool,
                seed: int) -> tuple[Any, ...]:
    translator = _translator(stream, core, config, expect)
    rng = random.Random(seed)
    out = _Out()
    answers: list[Any] = []
    partitions = sorted({(r.topic, r.partition) for r in stream.records
                         if not r.topic.endswith(".transaction")})
    for decoded in _decoded(stream):
        roll = rng.random()
        if roll < 0.05 and partitions:
            translator.mark_idle(rng.choice(partitions))
        elif roll < 0.15 and partitions:
            translator.mark_active(rng.choice(partitions))
        elif roll < 0.2:
            translator.drop_duplicate(rng.choice((1, 2)))
        if decoded is None:
            continue
        if isinstance(decoded, SideRecord):
            if decoded.kind is SideKind.TX_END and decoded.tx_id \
                    and decoded.event_count is not None:
                answers.append(translator.end_transaction(parse_lsn(decoded.tx_id),
                                                          decoded.event_count))
            continue
        if rng.random() < 0.5:
            decoded = _with_mask(decoded)
        translator.process_event(decoded, rng.choice((1, 1, 2)))
        out.take(translator)
        answers.append((translator.pending_offsets(), translator.resume_marks()))
    translator.flush()
    out.take(translator)
    return (bytes(out.lines), out.dead, translator.counters.as_dict(), answers,
            translator.state_size())


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32), n=st.integers(1, 60), config=configs, expect=st.booleans(),
       encoding=st.sampled_from(("json", "json-schema")))
def test_events_handed_over_one_by_one_agree(seed: int, n: int, config: dict[str, Any],
                                             expect: bool, encoding: str) -> None:
    stream = generate(seed, encoding=encoding, n_changes=n)
    python = _events_run(stream, "off", config, expect, seed)
    native = _events_run(stream, "on", config, expect, seed)
    assert native[2] == python[2], "counters differ"
    assert native[3] == python[3], "end_transaction answers / resume points differ"
    assert native[1] == python[1], "dead letters differ"
    assert native[0] == python[0], "output differs"
    assert native[4] == python[4], "state sizes differ"


def _cdc(rows: bytes, core: str, monkeypatch: pytest.MonkeyPatch, pairing: bool
         ) -> tuple[bytes, list[Any], dict[str, int]]:
    monkeypatch.setenv(native_core.ENV, "1" if core == "on" else "0")
    with tempfile.TemporaryDirectory() as tmp:
        result = run(rows, Path(tmp), pairing=pairing)
    assert result.pipeline.translator.is_native == (core == "on")
    dead = [(d.record.offset, d.record.value, d.stage, d.error_class, d.message)
            for d in result.dead]
    return (b"".join(to_json(c) + b"\n" for c in result.changes), dead,
            result.counters.as_dict())


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(model=histories(), pairing=st.booleans(), data=st.data())
def test_change_table_exports_agree(model: CdcModel, pairing: bool, data: st.DataObject,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [dict(r) for r in model.rows]
    if rows and data.draw(st.booleans(), label="damaged"):
        for _ in range(data.draw(st.integers(1, 3))):
            i = data.draw(st.integers(0, len(rows) - 1))
            kind = data.draw(st.sampled_from(["operation", "mask", "repeat", "order"]))
            if kind == "operation":
                rows[i]["__$operation"] = data.draw(st.sampled_from([0, 5, "x"]))
            elif kind == "mask":
                rows[i]["__$update_mask"] = data.draw(st.sampled_from(["0x1", "0xZZ"]))
            elif kind == "repeat":
                rows.insert(i, dict(rows[i]))  # an overlapping export: a duplicate row
            else:
                rows[i]["__$start_lsn"] = "0x" + "0" * 20
    data_bytes = json_lines(rows)
    python = _cdc(data_bytes, "off", monkeypatch, pairing)
    native = _cdc(data_bytes, "on", monkeypatch, pairing)
    assert native[2] == python[2], "counters differ"
    assert native[1] == python[1], "dead letters differ"
    assert native[0] == python[0], "output differs"


def test_replays_across_a_restart_point_are_decided_by_the_restored_marks() -> None:
    """A hand-made case: the restored marks alone tell a replay of a released event from a new
    one (the records before the resume point are not read again)."""
    stream = generate(7, encoding="json", n_changes=30)
    data = [r for r in stream.records if not r.topic.endswith(".transaction")]
    half = len(data) // 2
    written = []
    for core in CORES:
        first = _translator(stream, core, {}, False)
        first.process_many(data[:half])
        first.flush()
        first.drain()
        marks = first.resume_marks()
        assert marks, "every partition that delivered has a mark"
        second = _translator(stream, core, {}, False)
        second.restore_marks(marks)
        replayed = [msgspec.structs.replace(r, offset=(r.offset or 0) + 1000)
                    for r in data[:half] if isinstance(r, RawRecord)]
        second.process_many(replayed)
        second.flush()
        changes, _ = second.drain()
        # snapshot rows are recognised by a bounded set of recent identities, which is not part
        # of the marks (docs/sidecar.md): only they can come out again
        assert all(c.op == "read" for c in changes), \
            f"{core}: a replay of released events was written again"
        assert second.counters.records_in == len(replayed)
        assert second.counters.duplicates >= len(replayed) - len(changes) \
            - second.counters.dead_letters - second.counters.tombstones
        written.append([to_json(c) for c in changes])
    assert written[0] == written[1]
