"""Inputs whose size once made a core quadratic: very wide row images, many events at one
position (in the translator and in the streaming job's state), a bulk key update, many
partitions, many unavailable columns, images that list their columns in two orders, and a key
changed many times in one net-changes window.

Each was found by feeding one large record (or stream) to both cores:

- a 100,000-column image: 18 s on the native core (its duplicate-name check compared every
  name with every earlier one);
- 40,000 inserts at one position: 2.7 s (the replay mark's pairs were scanned);
- a bulk key update of 32,000 rows (deletes and creates at one position, partners named by
  the ``__debezium.newkey``/``oldkey`` headers): 32 s on the Python core, 18 s on the native
  one (each delete's partner looked for by a scan);
- 40,000 unavailable columns: 5.6 s on the Python core, 4 s on the native one (lists scanned
  for each column);
- a 100,000-column update with its columns in another order: 7 s;
- 20,000 updates of one key: 7.3 s of net changes (the key's lineage list scanned per change);
- many partitions: the watermark was the minimum over every partition, taken again whenever
  the lowest one moved (nearly every record of round-robin traffic) and on every idle mark:
  16,000 partitions took 51 s (Python) and 3.9 s (native) per 160,000 records, marking them
  idle one by one 12 s and 1.6 s;
- the Spark streaming state with 40,000 events at one position: 5.4 s in the Python window
  (its groups' ``seen`` lists and partition marks scanned per event), 80,000 up to 4.7 s per
  step in the native one.

Fixed, each takes a fraction of a second. These are not timings: the sizes are such that the
quadratic code would run for a minute or more, so each case runs in a forked process that a
hang guard (:func:`guarded`, far above the linear cost on a slow machine) kills, failing the
test instead of stalling CI (a signal would not stop native code). What is asserted is the
output, on both cores, against what the input says (each column, each event, each change
once).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from debezium_bridge.core import Translator, TranslatorConfig
from debezium_bridge.core import native as native_core
from debezium_bridge.core import translator as translator_module
from debezium_bridge.core.net import net_changes
from debezium_bridge.core.settings import TranslatorConfig as WindowConfig
from debezium_bridge.core.windowed import ProgressTracker, Topology, WindowState
from debezium_bridge.core.windowed_native import NativeWindowState
from debezium_bridge.formats.debezium.decode import Decoder
from debezium_bridge.model.change import ChangeEvent, ChangeRecord, LineageRef
from debezium_bridge.model.records import RawRecord

TOPIC = "srv.db.dbo.t"
PLACEHOLDER = "__debezium_unavailable_value"  # the connector's default placeholder
GUARD_SECONDS = 30


@pytest.fixture(autouse=True)
def _no_forced_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)


def _child(case: Callable[[], None]) -> None:
    try:
        case()
    except BaseException:
        traceback.print_exc()
        os._exit(1)
    os._exit(0)


def guarded(case: Callable[[], None], seconds: int = GUARD_SECONDS) -> None:
    """Run ``case`` in a forked process; fail when it fails or is still running after
    ``seconds`` (then it is killed)."""
    process = multiprocessing.get_context("fork").Process(target=_child, args=(case,))
    process.start()
    process.join(seconds)
    if process.is_alive():
        process.kill()
        process.join()
        pytest.fail(f"still running after {seconds} s: quadratic again?")
    assert process.exitcode == 0, "the case failed (its traceback is in the captured stderr)"


def source(n: int, serial: int = 1) -> dict[str, Any]:
    lsn = f"{n + 1:08x}:00000d08:0015"
    return {"version": "2.7.0.Final", "connector": "sqlserver", "name": "srv",
            "ts_ms": 1700000000067, "snapshot": "false", "db": "db", "sequence": None,
            "schema": "dbo", "table": "t", "change_lsn": lsn, "commit_lsn": lsn,
            "event_serial_no": serial}


def record(offset: int, op: str, before: dict[str, Any] | None, after: dict[str, Any] | None,
           src: dict[str, Any], key: int = 1, partition: int = 0,
           headers: tuple[tuple[str, bytes], ...] = ()) -> RawRecord:
    value = {"before": before, "after": after, "source": src, "op": op, "ts_ms": 1700000000267}
    return RawRecord(topic=TOPIC, partition=partition, offset=offset, timestamp=1,
                     key=b'{"id":%d}' % key, value=json.dumps(value).encode(), headers=headers)


def translate(records: list[RawRecord], partitions: int = 0,
              idle: Sequence[int] = ()) -> list[ChangeRecord]:
    """Both cores' change records (they must agree): with ``partitions`` expected, and the
    ``idle`` partitions marked idle after the records, without a flush."""
    results = []
    for core in ("off", "on"):
        translator = Translator(TranslatorConfig(native=core))
        assert translator.is_native == (core == "on")
        translator.expect([(TOPIC, p) for p in range(partitions)])
        translator.process_many(records)
        for p in idle:
            translator.mark_idle((TOPIC, p))
        if not idle:
            translator.flush()
        changes, dead = translator.drain()
        assert not dead
        results.append(changes)
    python, native = results
    assert native == python
    return python


@pytest.mark.parametrize("width", [200_000])
def test_a_very_wide_image(width: int) -> None:
    def case() -> None:
        after = {f"c{i}": i for i in range(width)}
        (change,) = translate([record(0, "c", None, after, source(0))])
        assert change.after == after
        assert change.changed_columns == list(after)  # an insert names every column

    guarded(case)


@pytest.mark.parametrize("events", [100_000])
def test_many_events_at_one_position(events: int) -> None:
    """Distinct keys at one (commit, change, serial) position are distinct events, each
    released once; their replays are duplicates."""
    def case() -> None:
        at = source(0)
        records = [record(i, "c", None, {"id": i}, at, key=i) for i in range(events)]
        replays = [record(events + i, "c", None, {"id": i}, at, key=i) for i in range(events)]
        changes = translate(records + replays)
        assert sorted(c.after["id"] for c in changes if c.after) == list(range(events))

    guarded(case)


@pytest.mark.parametrize("partitions", [40_000])
def test_many_partitions(partitions: int) -> None:
    """Round-robin traffic over many expected partitions: everything comes out, in position
    order."""
    def case() -> None:
        records = [record(n // partitions, "c", None, {"id": n}, source(n), key=n,
                          partition=n % partitions) for n in range(3 * partitions)]
        changes = translate(records, partitions)
        assert [c.after for c in changes] == [{"id": n} for n in range(3 * partitions)]

    guarded(case)


@pytest.mark.parametrize("partitions", [64_000])
def test_many_partitions_marked_idle(partitions: int) -> None:
    """Partition p holds one insert at commit p + 1; every partition but the middle one is
    marked idle: the watermark is then the middle one's mark, so exactly the inserts below it
    are released."""
    def case() -> None:
        middle = partitions // 2
        records = [record(0, "c", None, {"id": p}, source(p), key=p, partition=p)
                   for p in range(partitions)]
        idle = [p for p in range(partitions) if p != middle]
        changes = translate(records, partitions, idle=idle)
        assert [c.after for c in changes] == [{"id": p} for p in range(middle)]

    guarded(case)


@pytest.mark.parametrize("rows", [50_000])
def test_a_bulk_key_update(rows: int) -> None:
    """Keys i -> i + rows in one statement: every delete (partition 0) and create (partition
    1) at one position, serials 2/2, each half naming its partner in the
    ``__debezium.newkey``/``oldkey`` header (the connector's documented form): one update
    per row, from its old key to its new one."""
    def case() -> None:
        records = []
        for i in range(rows):
            new = i + rows
            records.append(record(i, "d", {"id": i, "v": 1}, None, source(0, serial=2), key=i,
                                  headers=(("__debezium.newkey", b'{"id":%d}' % new),)))
            records.append(record(i, "c", None, {"id": new, "v": 2}, source(0, serial=2),
                                  key=new, partition=1,
                                  headers=(("__debezium.oldkey", b'{"id":%d}' % i),)))
        changes = translate(records)
        assert sorted((c.op, c.old_key["id"], c.key["id"], c.key_changed) for c in changes
                      if c.old_key) == [("update", i, i + rows, True) for i in range(rows)]
        assert len(changes) == rows

    guarded(case)


@pytest.mark.parametrize("width", [100_000])
def test_many_unavailable_columns(width: int) -> None:
    """An update that did not send its LOB columns: each is null in ``after``, listed as
    unavailable and never as changed (the connector's placeholder, SPEC)."""
    def case() -> None:
        before = {"id": 1, **{f"c{i}": f"v{i}" for i in range(width)}}
        after = {"id": 1, **{f"c{i}": PLACEHOLDER for i in range(width)}}
        (change,) = translate([record(0, "u", before, after, source(0))])
        names = [f"c{i}" for i in range(width)]
        assert change.unavailable_columns == names
        assert change.after == {"id": 1, **dict.fromkeys(names)}
        assert change.changed_columns == []

    guarded(case)


@pytest.mark.parametrize("width", [200_000])
def test_an_update_whose_images_list_columns_in_two_orders(width: int) -> None:
    def case() -> None:
        before = {f"c{i}": i for i in range(width)}
        after = {f"c{i}": i + (i % 2) for i in reversed(range(width))}
        (change,) = translate([record(0, "u", before, after, source(0))])
        assert change.changed_columns == [f"c{i}" for i in reversed(range(width)) if i % 2]

    guarded(case)


@pytest.mark.parametrize("updates", [100_000])
def test_a_key_changed_many_times_in_one_net_window(updates: int) -> None:
    """``cdc.fn_cdc_get_net_changes``: one row per key, with its final content; the lineage
    names every change once, in order."""
    def case() -> None:
        changes = translate([record(i, "u", {"id": 1, "v": i}, {"id": 1, "v": i + 1},
                                    source(i)) for i in range(updates)])
        (net,) = net_changes(changes)
        assert (net.op, net.before, net.after) == ("update", {"id": 1, "v": 0},
                                                  {"id": 1, "v": updates})
        assert net.lineage == [LineageRef(TOPIC, 0, i) for i in range(updates)]

    guarded(case)


@pytest.mark.parametrize("seed", range(6))
def test_the_watermark_heap_releases_as_the_pass_over_partitions(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past 64 partitions the watermark comes from a heap of their marks: on random traffic
    over 150 partitions, with partitions marked idle and active between batches, what is
    released after each batch is what the pass over every partition releases (the Python core
    with the pass forced), on both cores."""
    rng = random.Random(seed)
    partitions = 150
    commits = [0] * partitions
    steps: list[tuple[list[RawRecord], list[int], list[int]]] = []
    offset = 0
    for _ in range(40):
        batch = []
        for _ in range(rng.randrange(1, 60)):
            p = rng.randrange(partitions)
            commits[p] += rng.randrange(1, 400)
            batch.append(record(offset, "c", None, {"id": offset}, source(commits[p]),
                                key=offset, partition=p))
            offset += 1
        steps.append((batch, rng.sample(range(partitions), rng.randrange(0, 30)),
                      rng.sample(range(partitions), rng.randrange(0, 10))))

    def run(core: str) -> list[list[ChangeRecord]]:
        translator = Translator(TranslatorConfig(native=core))
        translator.expect([(TOPIC, p) for p in range(partitions)])
        released = []
        for batch, idle, active in steps:
            translator.process_many(batch)
            for p in idle:
                translator.mark_idle((TOPIC, p))
            for p in active:
                translator.mark_active((TOPIC, p))
            changes, dead = translator.drain()
            assert not dead
            released.append(changes)
        return released

    heap, native = run("off"), run("on")
    monkeypatch.setattr(translator_module, "_SCAN_PARTITIONS", 10**9)
    assert run("off") == heap == native
    assert sum(map(len, heap)) > 0


def change_event(raw: RawRecord) -> ChangeEvent:
    decoded = Decoder().decode(raw)
    assert isinstance(decoded, ChangeEvent)
    return decoded


@pytest.mark.parametrize("events", [200_000])
def test_the_spark_streaming_state_with_many_events_at_one_position(events: int) -> None:
    """The streaming job's state (both windows): a first micro-batch holds half the events at
    one position, each twice (a replay in the same batch); the next holds the other half and
    a replay of the first half, which the first batch's partition mark drops. Every event
    comes out once."""
    def case() -> None:
        at = source(0)
        decoded = [change_event(record(i, "c", None, {"id": i}, at, key=i))
                   for i in range(events)]
        replays = [change_event(record(events + i, "c", None, {"id": i}, at, key=i))
                   for i in range(events // 2)]
        first, second = decoded[:events // 2], decoded[events // 2:]
        outputs = []
        for window_type in (WindowState, NativeWindowState):
            window = window_type(WindowConfig(), None, Topology({TOPIC: 1}))
            tracker = ProgressTracker()
            for e in first:
                tracker.record(TOPIC, 0, e.record.offset)
                tracker.event(e)
            window.add([(e, 1) for e in first + first], 0)
            window.observe(tracker.marks())
            window.release(2)
            window.add([(e, 1) for e in second + replays], 0)
            window.release(2)
            released = window.drain()
            assert sorted(c.after["id"] for c in released if c.after) == list(range(events))
            assert window.counters.duplicates == events
            outputs.append(released)
        assert outputs[0] == outputs[1]

    guarded(case)
