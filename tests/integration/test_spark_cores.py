"""``translate`` on local Spark with the native core against the Python reference: the same
Kafka rows (generated streams, :mod:`tests.differential.streams`) through both, the same output
rows, byte for byte (changes and dead letters, keys, values, headers, coordinates)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.core import native as native_core
from debezium_bridge.spark import KAFKA_SCHEMA, TranslateConfig, kafka_rows, translate
from debezium_bridge.spark.translate import native_translate
from tests.differential.streams import generate

pytestmark = pytest.mark.integration


def _rows(spark: Any, records: list[Any], config: TranslateConfig) -> list[tuple[Any, ...]]:
    df = spark.createDataFrame(kafka_rows(records), KAFKA_SCHEMA).repartition(3)
    rows = translate(df, config).collect()
    return sorted((tuple(r) for r in rows), key=lambda r: (r[0], r[2], r[11], r[12], r[13] or -1))


@pytest.mark.parametrize(("encoding", "seed"), [("json", 1), ("json-schema", 2), ("avro", 3)])
def test_batch_translate_is_the_same_on_both_cores(spark: Any, encoding: str, seed: int,
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)
    stream = generate(4000 + seed, encoding=encoding, n_changes=200)
    avro = None
    if stream.schemas:
        avro = tmp_path / "schemas.json"
        avro.write_text(json.dumps({str(i): s for i, s in stream.schemas.items()}))
    common = {"buckets": 4, "binary_handling_mode": stream.binary_mode,
              "avro_schemas": str(avro) if avro else None}
    python, native = TranslateConfig(native="off", **common), TranslateConfig(native="on", **common)
    frame = spark.createDataFrame(kafka_rows(stream.records[:1]), KAFKA_SCHEMA)
    assert native_translate(frame, native) and not native_translate(frame, python)
    expected = _rows(spark, stream.records, python)
    got = _rows(spark, stream.records, native)
    assert len(got) == len(expected) and sum(r[0] == "change" for r in got) >= 200
    assert got == expected


def test_jobs_the_native_steps_do_not_cover_run_the_reference(
        spark: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)
    frame = spark.createDataFrame(kafka_rows([]), KAFKA_SCHEMA)
    for config in (TranslateConfig(outputs=("canonical", "flat")),
                   TranslateConfig(output_topic="x.{table}", output_tombstones=True)):
        assert native_translate(frame, config)
    for config in (TranslateConfig(outputs=("canonical", "ces")),
                   TranslateConfig(outputs=("debezium",)), TranslateConfig(native="off")):
        assert not native_translate(frame, config)
    monkeypatch.setenv(native_core.ENV, "0")
    assert not native_translate(frame, TranslateConfig(native="on"))
