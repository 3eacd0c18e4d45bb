"""Differential tests of the Spark job's ``translate`` steps: the native decode and release
steps (``SparkDecoder``, ``release_batch``) against the Python reference (``_decode_batch`` with
``WindowState``), on the same Arrow batches of Kafka rows.

The steps run here as Spark runs them on a batch DataFrame — each Spark partition's Arrow
batches through the decode step, the staged rows grouped by bucket (in a shuffled order, as a
shuffle delivers them), each bucket through the release step — without a Spark session, so that
hypothesis can try many generated streams (:mod:`tests.differential.streams`: partition
interleavings, replays identical and with differing images, primary-key changes in every
serial form, snapshot rows, logical types and handling modes, three encodings, bad records).
Both must give the same output rows (byte for byte: keys, values, headers, topics,
coordinates, dead letters with their ``__connect.errors.*`` headers), the same counters, and
put every event in the same state bucket. The same comparison through a real Spark session is
in ``tests/integration/test_spark_cores.py``.
"""

from __future__ import annotations

import importlib
import itertools
import json
import random
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debezium_bridge.core import native as native_core
from debezium_bridge.model.records import RawRecord
from debezium_bridge.spark.source import kafka_rows
from tests.differential.streams import Stream, generate

T = importlib.import_module("debezium_bridge.spark.translate")
"""The module (``debezium_bridge.spark.translate`` the attribute is the function)."""


def arrow_batch(records: list[RawRecord]) -> Any:
    """``records`` as one Arrow batch of the Kafka source's columns (what ``mapInArrow`` gets)."""
    rows = kafka_rows(records)
    names = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType",
             "headers"]
    header = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    types = [pa.binary(), pa.binary(), pa.string(), pa.int32(), pa.int64(),
             pa.timestamp("us", tz="UTC"), pa.int32(), header]
    columns = [pa.array([r[i] for r in rows], t) for i, t in enumerate(types)]
    return pa.RecordBatch.from_arrays(columns, names=names)


def _config(stream: Stream, tmp: Path, pair: bool, native: str, **output: Any) -> Any:
    avro = None
    if stream.schemas:
        avro = tmp / "schemas.json"
        avro.write_text(json.dumps({str(i): s for i, s in stream.schemas.items()}))
    return T.TranslateConfig(native=native, pair_key_changes=pair, buckets=5,
                             binary_handling_mode=stream.binary_mode,
                             avro_schemas=str(avro) if avro else None, **output)


def _stage(stream: Stream, config: Any, splits: list[int], on_native: bool) -> tuple[Any, int]:
    """The decode step over the stream cut into Spark partitions at ``splits``."""
    spec = T._decoder_spec(config)
    T._decoders.pop(spec.token, None)  # a fresh worker per run
    T._spark_decoders.pop(spec.token, None)
    decoder, catalog = T._decoder(spec)
    staged = []
    declined = 0
    bounds = [0, *splits, len(stream.records)]
    for start, end in itertools.pairwise(bounds):
        batch = arrow_batch(stream.records[start:end])
        if on_native:
            spark_decoder = T._spark_decoder(spec, decoder)
            staged += T._decode_batch_native(batch, spark_decoder, decoder, config.buckets)
            declined = spark_decoder.declined_records
        else:
            staged.append(T._decode_batch(batch, decoder, config.buckets, catalog))
    return pa.Table.from_batches(staged), declined


def _release(staged: Any, config: Any, on_native: bool, rng: random.Random) -> Any:
    """The release step per bucket, each bucket's rows in a shuffled order."""
    step = T._native_batch_release(config) if on_native else T._batch_release(config)
    out = []
    for bucket in sorted(set(staged.column("bucket").to_pylist())):
        part = staged.filter(pc.equal(staged.column("bucket"), bucket))
        order = list(range(part.num_rows))
        rng.shuffle(order)
        out.append(step(part.take(pa.array(order, pa.int64()))))
    return pa.concat_tables(out)


def jvm_headers(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` of the release step as :func:`translate` finishes it in the JVM: a native
    change row (``lineage`` set, ``headers`` null) gets the :data:`~T.NATIVE_HEADERS` (its
    event id, seq and lineage); ``lineage`` goes."""
    lineage = row.pop("lineage")
    if lineage is not None:
        assert row["headers"] is None
        values = (row["event_id"].encode(), row["seq"].encode(), lineage)
        row["headers"] = [{"key": k, "value": v} for k, v in zip(T.NATIVE_HEADERS, values,
                                                                  strict=True)]
    return row


def _rows(released: Any) -> tuple[list[dict[str, Any]], dict[str, int]]:
    rows = released.to_pylist()
    counters = {name: sum(r[f"n_{name}"] for r in rows) for name in T.RELEASE_COUNTERS}
    output = [jvm_headers({k: v for k, v in r.items() if not k.startswith("n_")})
              for r in rows if r["kind"] != "stats"]
    output.sort(key=lambda r: (r["kind"], r["event_id"], r["source_topic"],
                               r["source_partition"], r["source_offset"] or -1))
    return output, counters


def _packed_events(packed: bytes) -> Iterator[tuple[bytes, int]]:
    """The events of a native :data:`~T.PACKED_ROW` value, read by its documented layout
    (``wire::pack``: a little-endian ``u32`` length, ``i64`` commit time, the bytes)."""
    at = 0
    while at < len(packed):
        length, ms = struct.unpack_from("<Iq", packed, at)
        yield packed[at + 12:at + 12 + length], ms
        at += 12 + length
    assert at == len(packed)


def _buckets(staged: Any) -> list[tuple[int, int]]:
    """The bucket and commit time of every staged event (Python: one row each; native: packed
    per bucket)."""
    events = staged.filter(pc.greater_equal(staged.column("bucket"), 0))
    out = []
    for row in events.select(["bucket", "kind", "commit_ms", "payload"]).to_pylist():
        if row["kind"] == T.EVENT_ROW:
            out.append((row["bucket"], row["commit_ms"]))
        elif row["kind"] == T.PACKED_ROW:
            out += [(row["bucket"], ms) for _, ms in _packed_events(row["payload"])]
    return sorted(out)


def _decode_counters(staged: Any) -> dict[str, int]:
    return {name: pc.sum(staged.column(f"n_{name}")).as_py() for name in T.DECODE_COUNTERS}


def compare(stream: Stream, tmp: Path, *, pair: bool = True, cuts: int = 2,
            seed: int = 0, **output: Any) -> dict[str, Any]:
    rng = random.Random(seed)
    n = len(stream.records)
    splits = sorted(rng.sample(range(1, n), min(cuts, n - 1))) if n > 1 else []
    python_config = _config(stream, tmp, pair, "off", **output)
    native_config = _config(stream, tmp, pair, "on", **output)
    staged_p, _ = _stage(stream, python_config, splits, False)
    staged_n, declined = _stage(stream, native_config, splits, True)
    assert _decode_counters(staged_n) == _decode_counters(staged_p)
    assert _buckets(staged_n) == _buckets(staged_p), "events staged in other buckets"
    rows_p, counters_p = _rows(_release(staged_p, python_config, False, rng))
    rows_n, counters_n = _rows(_release(staged_n, native_config, True, rng))
    assert counters_n == counters_p
    assert len(rows_n) == len(rows_p)
    for a, b in zip(rows_n, rows_p, strict=True):
        assert a == b
    return {"declined": declined, "records": n, "counters": counters_n,
            "decode": _decode_counters(staged_n)}


@pytest.fixture(autouse=True)
def _no_forced_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)


def test_the_native_steps_are_built() -> None:
    assert native_core.available(), "debezium_bridge._native is not built"
    assert hasattr(native_core.module(), "SparkDecoder")


@pytest.mark.parametrize("encoding", ["json", "json-schema", "avro"])
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32), n=st.integers(1, 80), pair=st.booleans(),
       cuts=st.integers(0, 4))
def test_native_and_python_steps_agree(encoding: str, seed: int, n: int, pair: bool, cuts: int,
                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    stream = generate(seed, encoding=encoding, n_changes=n)
    compare(stream, tmp_path_factory.mktemp("s"), pair=pair, cuts=cuts, seed=seed)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("encoding", ["json", "json-schema", "avro"])
def test_long_streams_agree_and_stay_native(encoding: str, seed: int, tmp_path: Path) -> None:
    """Hundreds of changes; the native decoder reads every data event itself: it declines
    only records that are no change event (bad records, transaction metadata), which the Python
    decoder reads."""
    stream = generate(2000 + seed, encoding=encoding, n_changes=300)
    result = compare(stream, tmp_path, cuts=3, seed=seed)
    decoded = result["decode"]
    assert result["declined"] <= decoded["dead_letters"] + decoded["side_records"] \
        + decoded["skipped"], result
    assert result["counters"]["changes_out"] >= 300


@pytest.mark.parametrize("output", [
    {"outputs": ("canonical", "flat", "exploded")},
    {"output_topic": "out.{db}.{table}.{format}", "output_tombstones": True},
    {"outputs": ("flat",), "dlq_topic": "dead"},
])
@pytest.mark.parametrize("seed", range(3))
def test_other_outputs_go_through_the_output_layer(output: dict[str, Any], seed: int,
                                                   tmp_path: Path) -> None:
    """Formats, topic templates and tombstones that the native release does not write itself:
    the output layer on its canonical records gives the reference's rows."""
    stream = generate(5000 + seed, encoding="json-schema", n_changes=80)
    compare(stream, tmp_path, cuts=2, seed=seed, **output)


def test_replays_with_other_images_are_the_same_dead_letters(tmp_path: Path) -> None:
    """Streams whose replays repeat an event with different images: the release step's
    replay-mismatch dead letters (coordinates, stage, message) are the reference's."""
    mismatches = 0
    for seed in range(40):
        stream = generate(3000 + seed, encoding="json", n_changes=60)
        mismatches += compare(stream, tmp_path, cuts=2, seed=seed)["counters"][
            "replay_mismatches"]
    assert mismatches > 0, "the generated streams should hold replays with other images"


def test_unreadable_staged_bytes_fail_the_release_loudly(tmp_path: Path) -> None:
    """Staged bytes are written by the decode step, never input: bytes the native release
    cannot read are a bug, raised as the package's error (no panic, nothing dropped)."""
    from debezium_bridge.errors import BridgeError

    stream = generate(7, encoding="json", n_changes=5)
    config = _config(stream, tmp_path, True, "on")
    staged, _ = _stage(stream, config, [], True)
    events = staged.filter(pc.greater_equal(staged.column("bucket"), 0))
    first = next(_packed_events(events.column("payload")[0].as_py()))[0]
    leaning = bytes([first[0], 0b1111]) + first[2:]  # the first event of a value names parts
    # "as the event before it": there is none
    for payload in (b"\x01broken", struct.pack("<Iq", len(leaning), 5) + leaning,
                    struct.pack("<Iq", 1000, 5) + first):  # a length past the value's end
        broken = events.set_column(events.schema.get_field_index("payload"), "payload",
                                   pa.array([payload] * events.num_rows, pa.binary()))
        with pytest.raises(BridgeError, match="native release step"):
            T._native_batch_release(config)(broken)
    events_row = events.set_column(events.schema.get_field_index("kind"), "kind",
                                   pa.array([T.EVENT_ROW] * events.num_rows, pa.int8()))
    with pytest.raises(BridgeError, match="not the native decode step's packed events"):
        T._native_batch_release(config)(events_row)


def test_a_bucket_past_16_mib_in_one_batch_is_packed_into_several_values() -> None:
    """A packed value is closed at 16 MiB (its next event starts a new one, with nothing to
    lean on): 300 creates of ~60 KB in one bucket make two values, and every create comes out
    of the release step."""
    text = "x" * 60_000
    records = [RawRecord(
        "srv.db.dbo.t", 0, i, 1_700_000_000_000, json.dumps({"id": i}).encode(), json.dumps({
            "before": None, "after": {"id": i, "v": text}, "op": "c", "ts_ms": 1_700_000_000_001,
            "transaction": None, "source": {
                "version": "2.5.0.Final", "connector": "sqlserver", "name": "srv",
                "ts_ms": 1_700_000_000_000, "snapshot": "false", "db": "db", "schema": "dbo",
                "table": "t", "change_lsn": f"0000002a:{i:08x}:0001",
                "commit_lsn": f"0000002a:{i:08x}:0002", "event_serial_no": 1}}).encode())
        for i in range(300)]
    config = T.TranslateConfig(native="on", buckets=1)
    spec = T._decoder_spec(config)
    T._decoders.pop(spec.token, None)
    T._spark_decoders.pop(spec.token, None)
    decoder, _ = T._decoder(spec)
    staged = pa.Table.from_batches(T._decode_batch_native(
        arrow_batch(records), T._spark_decoder(spec, decoder), decoder, 1))
    values = staged.filter(pc.equal(staged.column("kind"), T.PACKED_ROW))
    sizes = [len(v) for v in values.column("payload").to_pylist()]
    assert len(sizes) == 2 and sizes[0] >= 16 << 20 > sizes[0] - 61_000, sizes
    assert sum(len(list(_packed_events(v))) for v in values.column("payload").to_pylist()) == 300
    rows, counters = _rows(T._native_batch_release(config)(values))
    assert counters["changes_out"] == 300
    assert sorted(json.loads(r["key"])["id"] for r in rows) == list(range(300))
