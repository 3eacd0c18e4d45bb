"""Differential tests of the Spark job's *streaming* ``translate`` steps: the native steps (the
decode step staging native events with progress and transaction END rows, the release step on
the native window ``StreamRelease``) against the Python reference (``_decode_batch`` with
:class:`~debezium_bridge.core.windowed.ProgressTracker`, ``_streaming_release`` with
:class:`~debezium_bridge.core.windowed.WindowState`).

The steps run as Spark runs a streaming query, without a session so that hypothesis can try many
micro-batch sequences: each micro-batch's records are read by one task per Kafka partition, the
staged rows are grouped by bucket (in a shuffled order), each bucket's function gets its rows
and its state from the previous micro-batch — as bytes, as Spark's state store keeps them — and
the watermark of the micro-batch (the highest clock of the earlier ones minus the delay);
buckets whose timeout the watermark passed are called with no rows, as Spark does. The streams
(:mod:`tests.differential.streams`) interleave partitions, replay events after restarts (so
replays cross micro-batches), split primary-key changes across partitions and micro-batches and
send transaction END records before or after their events. Both cores must give the same
output rows, counters, state timeouts and dead letters after every micro-batch.
"""

from __future__ import annotations

import itertools
import json
import random
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debezium_bridge.core import native as native_core
from debezium_bridge.core.windowed import Topology
from debezium_bridge.model.records import RawRecord
from tests.differential.streams import Stream, generate
from tests.differential.test_spark_cores import T, _config, arrow_batch, jvm_headers


class GroupState:
    """The part of Spark's ``GroupState`` the release step uses (state kept between calls)."""

    def __init__(self, stored: tuple[bytes, Any] | None, watermark: int) -> None:
        self._stored = stored
        self.watermark = watermark
        self.timeout: int | None = None

    @property
    def exists(self) -> bool:
        return self._stored is not None

    @property
    def get(self) -> tuple[bytes, Any]:
        assert self._stored is not None
        return self._stored

    def update(self, value: tuple[bytes, Any]) -> None:
        assert isinstance(value[0], bytes)  # what the state store keeps
        self._stored = value

    def setTimeoutTimestamp(self, ms: int) -> None:
        self.timeout = ms

    def getCurrentWatermarkMs(self) -> int:
        return self.watermark


class Query:
    """One streaming query of ``translate`` on one core: its state store and watermark."""

    def __init__(self, config: Any, on_native: bool, topology: Topology, delay_ms: int,
                 rng: random.Random) -> None:
        spec = T._decoder_spec(config)
        self.token = spec.token
        T._decoders.pop(spec.token, None)  # fresh workers
        T._spark_decoders.pop(spec.token, None)
        self.decode = T.decode_task(config, streaming=True, native=on_native)
        step = T._native_streaming_release if on_native else T._streaming_release
        self.release = step(config, topology)
        self.states: dict[int, tuple[bytes, Any]] = {}
        self.timeouts: dict[int, int] = {}
        self.clock: int | None = None
        self.delay_ms = delay_ms
        self.rng = rng

    def micro_batch(self, records: list[RawRecord]) -> tuple[list[dict[str, Any]],
                                                             dict[str, int], dict[int, int]]:
        watermark = max(0, self.clock - self.delay_ms) if self.clock is not None else 0
        tasks: dict[tuple[str, int], list[RawRecord]] = {}
        for r in records:  # one task per Kafka partition, in offset order
            tasks.setdefault((r.topic, r.partition), []).append(r)
        staged = []
        for part in tasks.values():
            cut = self.rng.randint(1, len(part))  # one or two Arrow batches per task
            chunks = [c for c in (part[:cut], part[cut:]) if c]
            staged += list(self.decode(iter([arrow_batch(c) for c in chunks])))
        table = pa.Table.from_batches(staged)
        self.marks = _progress(table)
        clock = pc.max(table.column("clock").cast(pa.int64())).as_py()
        if clock is not None:
            self.clock = max(self.clock or 0, clock // 1000)
        out = []
        buckets = sorted(set(table.column("bucket").to_pylist()))
        timed_out = sorted(b for b, t in self.timeouts.items() if t < watermark
                           and b not in buckets)
        for bucket in buckets + timed_out:
            part = table.filter(pc.equal(table.column("bucket"), bucket))
            order = list(range(part.num_rows))
            self.rng.shuffle(order)
            frames = [part.take(pa.array(order, pa.int64())).to_pandas()] if order else []
            state = GroupState(self.states.get(bucket), watermark)
            out += list(self.release((bucket,), iter(frames), state))
            if state.exists:
                self.states[bucket] = state.get
            if state.timeout is not None:
                self.timeouts[bucket] = state.timeout
            else:
                self.timeouts.pop(bucket, None)
        rows = _spark_rows(out, self.rng.randint(0, 3))
        counters = {name: int(sum(r[f"n_{name}"] for r in rows)) for name in T.RELEASE_COUNTERS}
        output = [{k: _plain(v) for k, v in jvm_headers(r).items() if not k.startswith("n_")}
                  for r in rows if r["kind"] != "stats"]
        output.sort(key=lambda r: (r["kind"], r["event_id"] or "", r["source_topic"] or "",
                                   r["source_partition"] or 0, r["source_offset"] or -1))
        return output, counters, dict(self.timeouts)


def _spark_rows(frames: list[Any], padding: int) -> list[dict[str, Any]]:
    """The rows Spark gets from one Python worker's output frames: joined and converted to
    Arrow as PySpark's ``applyInPandasWithState`` worker does (``pyspark/worker.py``: the
    frames, then ``padding`` all-null rows when it holds more states than rows, through
    ``PandasToArrowConversion``), then read back as the JVM would see them."""
    import pandas as pd
    from pyspark.sql.conversion import PandasToArrowConversion
    from pyspark.sql.pandas.types import from_arrow_schema

    frames = [f for f in frames if len(f)]
    if not frames:
        return []
    schema = from_arrow_schema(T._arrow_release_schema())
    empty = pd.DataFrame(dict.fromkeys(schema.names), index=list(range(padding)))
    with warnings.catch_warnings():  # pandas on PySpark's all-null padding, as in translate
        warnings.filterwarnings("ignore", category=FutureWarning,
                                message=T.PANDAS_CONCAT_NOTICE)
        joined = pd.concat([*frames, empty], ignore_index=True)
    batch = PandasToArrowConversion.convert(
        joined, schema, timezone="UTC", safecheck=True, arrow_cast=True,
        assign_cols_by_name=False, int_to_decimal_coercion_enabled=False)
    rows = batch.to_pandas(integer_object_nulls=True).to_dict("records")
    return rows[:len(rows) - padding]


def _progress(table: Any) -> list[Any]:
    """The partition marks of a micro-batch's progress rows (one copy per task), the replay
    marks at the high-water position as a set (their order is the order events were read)."""
    rows = table.filter(pc.equal(table.column("kind"), T.PROGRESS_ROW))
    rows = rows.filter(pc.equal(rows.column("bucket"), 0))
    return sorted((t, p, m.commit, m.position, frozenset(m.at_position), m.offset)
                  for data in rows.column("payload").to_pylist()
                  for t, p, m in T.marks_from_bytes(data))


def _plain(value: Any) -> Any:
    """A pandas cell as a comparable Python value (headers: (key, value) pairs)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, list):
        return [tuple(h.values()) if isinstance(h, dict) else tuple(h) for h in value]
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _micro_batches(stream: Stream, cuts: int, rng: random.Random) -> list[list[RawRecord]]:
    n = len(stream.records)
    points = sorted(rng.sample(range(1, n), min(cuts, n - 1))) if n > 1 else []
    return [stream.records[a:b] for a, b in itertools.pairwise([0, *points, n])]


def _topology(stream: Stream, kind: str) -> Topology:
    if kind == "none":
        return Topology()
    counts: dict[str, int] = {}
    for topic, partition in stream.partitions:
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    if kind == "partitions":
        return Topology(partitions=counts)
    ends: dict[str, dict[int, int]] = {}
    for r in stream.records:  # AvailableNow: the run reads everything there is
        last = ends.setdefault(r.topic, {})
        last[r.partition] = max(last.get(r.partition, -1), r.offset or 0)
    return Topology(partitions=counts, ends=ends)


def compare(stream: Stream, tmp: Path, *, seed: int, pair: bool = True, cuts: int = 3,
            topology: str = "partitions", delay_ms: int = 60_000,
            **output: Any) -> dict[str, int]:
    rng = random.Random(seed)
    batches = _micro_batches(stream, cuts, rng)
    top = _topology(stream, topology)
    python = Query(_config(stream, tmp, pair, "off", **output), False, top, delay_ms,
                   random.Random(seed))
    native = Query(_config(stream, tmp, pair, "on", **output), True, top, delay_ms,
                   random.Random(seed))
    totals: dict[str, int] = {"declined": 0, "not_data": 0}
    for i, records in enumerate(batches):
        rows_p, counters_p, timeouts_p = python.micro_batch(records)
        rows_n, counters_n, timeouts_n = native.micro_batch(records)
        assert counters_n == counters_p, f"micro-batch {i}"
        assert len(rows_n) == len(rows_p), f"micro-batch {i}"
        for a, b in zip(rows_n, rows_p, strict=True):
            assert a == b, f"micro-batch {i}"
        assert timeouts_n == timeouts_p, f"micro-batch {i}: state timeouts"
        assert native.marks == python.marks, f"micro-batch {i}: progress rows"
        for name, value in counters_n.items():
            totals[name] = totals.get(name, 0) + value
    if T._spark_decoders.get(native.token) is not None:
        totals["declined"] = T._spark_decoders[native.token].declined_records
        totals["not_data"] = sum(r.value is None or r.topic.endswith(".transaction")
                                 for r in stream.records)
    return totals


@pytest.fixture(autouse=True)
def _no_forced_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)


@pytest.mark.parametrize("encoding", ["json", "json-schema", "avro"])
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32), n=st.integers(1, 60), pair=st.booleans(),
       cuts=st.integers(0, 6), topology=st.sampled_from(["none", "partitions", "ends"]),
       delay_ms=st.sampled_from([0, 1, 60_000, 10**12]))
def test_native_and_python_streaming_steps_agree(encoding: str, seed: int, n: int, pair: bool,
                                                 cuts: int, topology: str, delay_ms: int,
                                                 tmp_path_factory: pytest.TempPathFactory
                                                 ) -> None:
    stream = generate(seed, encoding=encoding, n_changes=n)
    compare(stream, tmp_path_factory.mktemp("s"), seed=seed, pair=pair, cuts=cuts,
            topology=topology, delay_ms=delay_ms)


@pytest.mark.parametrize("seed", range(3))
def test_long_streams_release_by_every_rule_and_agree(seed: int, tmp_path: Path) -> None:
    """Hundreds of changes over many micro-batches: the release rules all take part, replays
    are dropped across micro-batches, and both cores agree on every micro-batch."""
    totals: dict[str, int] = {}
    for topology, delay in (("partitions", 60_000), ("ends", 60_000), ("none", 0)):
        stream = generate(4000 + seed, encoding="json", n_changes=250)
        for name, value in compare(stream, tmp_path, seed=seed, cuts=8, topology=topology,
                                   delay_ms=delay).items():
            totals[name] = totals.get(name, 0) + value
    assert totals["changes_out"] >= 250 * 3
    assert totals["duplicates"] > 0
    # the native decoder read the data events itself (it declines side and bad records)
    assert totals["declined"] < 250, totals
    for rule in ("position", "end", "watermark"):
        assert totals[f"released_by_{rule}"] > 0, (rule, totals)


@pytest.mark.parametrize("output", [
    {"outputs": ("canonical", "flat", "exploded")},
    {"output_topic": "out.{db}.{table}.{format}", "output_tombstones": True},
])
def test_other_outputs_agree_in_streaming(output: dict[str, Any], tmp_path: Path) -> None:
    stream = generate(6001, encoding="json-schema", n_changes=80)
    compare(stream, tmp_path, seed=1, cuts=4, **output)


@pytest.mark.parametrize("cuts", [0, 1])
def test_replays_with_other_images_are_the_same_dead_letters_in_streaming(tmp_path: Path,
                                                                         cuts: int) -> None:
    """A copy of a waiting insert (its position, op and key) whose image differs: in the
    micro-batch of the original a dead letter (stage ``replay-mismatch``), in a later one a
    duplicate (below its partition's mark); alike on both cores."""
    topic = "server1.testDB.dbo.t"
    source = {"version": "2.7.3.Final", "connector": "sqlserver", "name": "server1",
              "ts_ms": 1700000000000, "snapshot": "false", "db": "testDB", "sequence": None,
              "schema": "dbo", "table": "t", "change_lsn": "00000025:00000020:0002",
              "commit_lsn": "00000025:00000020:0003", "event_serial_no": 1}

    def insert(name: str) -> bytes:
        return json.dumps({"before": None, "after": {"id": 1, "name": name}, "source": source,
                           "op": "c", "ts_ms": 1700000000100}).encode()

    records = [RawRecord(topic, 0, offset, 1, b'{"id":1}', insert(name))
               for offset, name in enumerate(("a", "b"))]
    totals = compare(Stream(records, [(topic, 0)], {}, "bytes"), tmp_path, seed=0, cuts=cuts)
    assert (totals["replay_mismatches"], totals["duplicates"]) == ((1, 0) if cuts == 0 else
                                                                   (0, 1))


@pytest.mark.parametrize("seed", [5001, 5002])
def test_transaction_ends_release_what_waits_and_agree(seed: int, tmp_path: Path) -> None:
    """No partitions known and a watermark that never passes: only the transaction END records
    (before or after their events, in other micro-batches) release what waits."""
    stream = generate(seed, encoding="json", n_changes=120)
    totals = compare(stream, tmp_path, seed=seed, cuts=5, topology="none", delay_ms=10**12)
    assert totals["released_by_transaction"] > 0, totals


def test_the_native_release_frames_keep_their_arrow_arrays() -> None:
    """With the pandas the package installs, the native streaming release hands PySpark
    Arrow-backed frames (the fallback to Python objects is for other pandas versions), and
    a worker's frames joined as PySpark joins them still give one Arrow array per column."""
    import pandas as pd

    backed = T._arrow_backed()
    assert backed is not None
    table = pa.table({"value": pa.array([b"x", None], pa.binary()),
                      "topic": pa.array([None, None], pa.string())})
    frame = T._arrow_frame(table)
    assert all(isinstance(frame[c].array, backed) for c in frame.columns)
    joined = pd.concat([frame, frame], ignore_index=True)
    assert all(isinstance(pa.Array.from_pandas(joined[c]), pa.Array) for c in frame.columns)
