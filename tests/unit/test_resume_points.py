"""Resuming the translator from committed offsets: a run stopped at any point and restarted
from each partition's lowest waiting offset, with the replay-dedupe marks it had there, writes
exactly what one uninterrupted run writes (nothing twice, nothing lost), even when connector
restarts re-send events across the restart point. Every test runs on both translation cores
(tests/unit/conftest.py); the differential suite also checks that the two keep the same resume
points."""

from __future__ import annotations

import random

import msgspec
import pytest

from debezium_bridge.core import Translator
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.model.lsn import parse_lsn
from debezium_bridge.model.records import RawRecord
from debezium_bridge.testing.simulator import CUSTOMERS
from tests.integration.sidecar_support import table, topic_of, traffic


def test_each_core_keeps_its_own_resume_points(translation_core: str) -> None:
    """The run below is on the core the suite selected (no silent fallback)."""
    assert Translator(TranslatorConfig()).is_native == (translation_core == "native")


def _stream(seed: int) -> list[RawRecord]:
    """Two tables' records in production order with per-partition offsets."""
    data = traffic([CUSTOMERS, table("orders")], 3_000, chunks=1, seed=seed,
                   replay_every=300, corrupt_every=1_000)
    offsets: dict[tuple[str, int], int] = {}
    out = []
    for r in data.chunks[0]:
        if r.topic.startswith("__"):
            continue
        offset = offsets.get((r.topic, r.partition), 0)
        offsets[(r.topic, r.partition)] = offset + 1
        out.append(msgspec.structs.replace(r, offset=offset))
    return out


def _translator(records: list[RawRecord]) -> Translator:
    translator = Translator(TranslatorConfig())
    translator.track_resume_points()
    translator.expect({(r.topic, r.partition) for r in records
                       if r.topic in (topic_of(CUSTOMERS), topic_of(table("orders")))})
    return translator


def _ids(translator: Translator) -> list[str]:
    changes, dead = translator.drain()
    return [c.event_id for c in changes] + [f"dlq:{d.record.topic}:{d.record.partition}:"
                                             f"{d.record.offset}" for d in dead]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_restart_from_resume_points_writes_exactly_what_one_run_writes(seed: int) -> None:
    records = _stream(seed)
    whole = _translator(records)
    whole.process_many(records)
    whole.flush()
    expected = _ids(whole)
    assert len(expected) == len(set(expected)) > 1000
    rng = random.Random(seed)
    for _ in range(12):
        stop = rng.randrange(len(records))
        first = _translator(records)
        written = []
        for record in records[:stop]:
            first.process(record)
            written += _ids(first)
        positions: dict[tuple[str, int], int] = {}
        for r in records[:stop]:
            positions[(r.topic, r.partition)] = (r.offset or 0) + 1
        pending = first.pending_offsets()
        resume = {tp: min(pos, pending.get(tp, pos)) for tp, pos in positions.items()}
        # dead letters of re-read records were written before the checkpoint
        reread = {tp: pos for tp, pos in positions.items()}
        second = _translator(records)
        second.restore_marks(first.resume_marks())
        for r in records:
            tp = (r.topic, r.partition)
            if (r.offset or 0) >= resume.get(tp, 0):
                second.process(r)
        second.flush()
        changes, dead = second.drain()
        again = [c.event_id for c in changes] + [
            f"dlq:{d.record.topic}:{d.record.partition}:{d.record.offset}" for d in dead
            if (d.record.offset or 0) >= reread.get((d.record.topic, d.record.partition), 0)]
        assert not set(written) & set(again), f"stopped after {stop}: written twice"
        assert sorted(written + again) == sorted(expected), f"stopped after {stop}"


def test_resume_marks_need_tracking() -> None:
    with pytest.raises(RuntimeError):
        Translator().resume_marks()


def test_end_transaction_waits_for_its_events() -> None:
    records = _stream(4)
    translator = _translator(records)
    first = next(r for r in records if r.value and b'"commit_lsn"' in r.value)
    commit = msgspec.json.decode(first.value)["source"]["commit_lsn"]
    assert translator.end_transaction(parse_lsn(commit), 1) is False
    translator.process(first)
    assert translator.end_transaction(parse_lsn(commit), 99) is True
