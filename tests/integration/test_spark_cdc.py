"""Change-table rows and net changes in Spark (real local Spark, batch).

The DataFrame is typed as a JDBC read of ``cdc.dbo_orders_CT`` gives it (binary LSNs and masks,
DECIMAL, BIT as boolean, ``datetime`` as a timestamp without time zone). Expectations come from
the CDC model's operations and its table states (tests/unit/cdc_model.py), not from the program.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.core.net import Window
from debezium_bridge.formats.cdc import load_capture_instances
from tests.paths import ROOT
from tests.unit.cdc_model import CdcModel, Change
from tests.unit.cdc_support import describe

pytestmark = pytest.mark.integration


def _model() -> CdcModel:
    model = CdcModel()
    model.commit([Change("insert", 1, {"name": "ann", "amount": "1.50", "notes": "hello",
                                       "flag": True}),
                  Change("insert", 2, {"name": "bob", "amount": "2.00", "notes": None,
                                       "flag": False})])
    model.commit([Change("update", 1, {"name": "anna"}), Change("key-update", 2, {"id": 5})])
    model.commit([Change("key-delete-insert", 1, {"id": 7}), Change("insert", 3, {
        "name": "cy", "amount": "3.25", "notes": "x", "flag": True})])
    model.commit([Change("delete", 3)])
    return model


def _frame(spark: Any, model: CdcModel, extra: list[dict[str, Any]] | None = None) -> Any:
    from pyspark.sql import types as T

    schema = T.StructType([
        T.StructField("__$start_lsn", T.BinaryType()), T.StructField("__$seqval", T.BinaryType()),
        T.StructField("__$operation", T.IntegerType()),
        T.StructField("__$update_mask", T.BinaryType()), T.StructField("id", T.IntegerType()),
        T.StructField("name", T.StringType()), T.StructField("amount", T.DecimalType(10, 2)),
        T.StructField("notes", T.StringType()), T.StructField("flag", T.BooleanType()),
        T.StructField("tran_end_time", T.TimestampNTZType())])
    rows = []
    for r in [*model.rows, *(extra or [])]:
        rows.append((bytes.fromhex(r["__$start_lsn"][2:]), bytes.fromhex(r["__$seqval"][2:]),
                     r["__$operation"], bytes.fromhex(r["__$update_mask"][2:]), r["id"],
                     r["name"], decimal.Decimal(r["amount"]), r["notes"], r["flag"],
                     dt.datetime.fromisoformat(r["__$commit_time"])))
    return spark.createDataFrame(rows, schema)


def test_translate_cdc_over_a_jdbc_shaped_dataframe(spark: Any, tmp_path: Path) -> None:
    from debezium_bridge.spark.cdc import CdcTranslateConfig, translate_cdc

    model = _model()
    bad = dict(model.rows[0], **{"__$operation": 9, "id": 99})
    df = _frame(spark, model, [bad])
    instances = load_capture_instances([describe(tmp_path)])
    out = translate_cdc(df, instances, CdcTranslateConfig(outputs=("canonical", "debezium"),
                                                          buckets=3))
    rows = out.collect()
    canonical = sorted((json.loads(r.value) for r in rows if r.format == "canonical"),
                       key=lambda c: c["seq"])
    summary = [(c["op"], c["key"]["id"], c["old_key"] and c["old_key"]["id"],
                c["position"]["event_serial_no"]) for c in canonical]
    assert summary == [("insert", 1, None, 1), ("insert", 2, None, 1), ("update", 1, None, 2),
                       ("update", 5, 2, 2), ("update", 7, 1, 2), ("insert", 3, None, 1),
                       ("delete", 3, None, 1)]
    update = canonical[2]
    assert update["unavailable_columns"] == ["notes"] and update["changed_columns"] == ["name"]
    assert update["commit_ts"] == "2024-01-02T03:04:07.129Z"
    assert update["after"]["amount"] == "1.50"
    dead = [r for r in rows if r.kind == "dead_letter"]
    assert len(dead) == 1
    assert dict(dead[0].headers)["__connect.errors.stage"] == b"cdc-row"
    # the update-written key change 2 -> 5: d and c share serial 2 with the key headers
    dbz = [r for r in rows if r.format == "debezium" and r.seq == canonical[3]["seq"]]
    names = sorted(h.key for r in dbz for h in r.headers if h.key.startswith("__debezium."))
    assert names == ["__debezium.newkey", "__debezium.newkey", "__debezium.oldkey"]


def test_net_changes_in_spark(spark: Any, tmp_path: Path) -> None:
    from debezium_bridge.spark.cdc import CdcTranslateConfig, NetConfig, net_changes, translate_cdc

    model = _model()
    instances = load_capture_instances([describe(tmp_path)])
    changes = translate_cdc(_frame(spark, model), instances, CdcTranslateConfig(buckets=2))
    first, last = model.states[1][0], model.states[-1][0]
    window = Window(first.to_bytes(10, "big"), last.to_bytes(10, "big"))
    net = net_changes(changes, window, "all", NetConfig(outputs=("rows", "flat"), buckets=4))
    rows = net.collect()
    got = {json.loads(r.value)["id"]: json.loads(r.value)["__$operation"]
           for r in rows if r.format == "rows"}
    # the truth: states before and after the window
    before, after = model.state_at(model.states[0][0]), model.state_at(last)
    expected = {k: 1 for k in before if k not in after}
    expected |= {k: 2 for k in after if k not in before}
    expected |= {k: 4 for k in after if k in before and after[k] != before[k]}
    assert got == expected
    assert {r.format for r in rows} == {"rows", "flat"}


def test_the_documented_spark_example(spark: Any, tmp_path: Path) -> None:
    """docs/cdc.md's Spark example, run as written over the sqlcmd export of the CLI example, in
    a Spark session started in the example's directory (Spark resolves relative paths against
    the JVM's working directory)."""
    from tests.unit.cdc_examples_support import examples, model, write_sqlcmd_exports

    write_sqlcmd_exports(tmp_path, model())
    (tmp_path / "example.py").write_text(examples()["spark"])
    script = (
        "import os, sys\n"
        "os.environ['PYSPARK_PYTHON'] = sys.executable\n"
        "from pyspark.sql import SparkSession\n"
        "spark = (SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')"
        ".config('spark.sql.shuffle.partitions', '2')"
        ".config('spark.sql.session.timeZone', 'UTC').getOrCreate())\n"
        "spark.sparkContext.setLogLevel('ERROR')\n"
        "exec(compile(open('example.py').read(), 'docs/cdc.md (spark example)', 'exec'))\n"
        "spark.stop()\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    flat = [json.loads(line) for line in spark.read.text(str(tmp_path / "orders_flat"))
            .toPandas()["value"]]
    assert sorted((r["__op"], r["id"]) for r in flat) == sorted([
        ("insert", 1), ("insert", 2), ("update", 1), ("delete", 2), ("update", 7),
        ("delete", 1)])
    assert spark.read.parquet(str(tmp_path / "orders_rejected")).count() == 0
