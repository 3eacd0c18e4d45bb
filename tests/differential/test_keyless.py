"""Rows of a keyless table read in a snapshot, on both cores and both Spark steps.

A table without a primary key gets a null Kafka key (Debezium SQL Server reference §1:
the key schema is the primary key's columns), so its snapshot rows share their table, their
(empty) key and their commit LSN (§5: snapshot rows have no change LSN or serial), and the rows
of an incremental snapshot share the last streamed position (§5.6). A keyless table may also
hold the same row twice. None of them is a replay of another: each is one ``read`` record
(docs/canonical.md: ``key`` is ``{}`` for keyless tables), with an event id of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.core import native as native_core
from debezium_bridge.model.records import RawRecord
from tests.differential.streams import Stream
from tests.differential.test_cores import run_both
from tests.differential.test_spark_cores import compare

TOPIC = "server1.testDB.dbo.log"


def _value(op: str, row: dict[str, Any], snapshot: str, commit: str,
           change: str | None = None, serial: int | None = None) -> bytes:
    source = {"version": "2.7.3.Final", "connector": "sqlserver", "name": "server1",
              "ts_ms": 1700000000000, "snapshot": snapshot, "db": "testDB", "sequence": None,
              "schema": "dbo", "table": "log", "change_lsn": change, "commit_lsn": commit,
              "event_serial_no": serial}
    return json.dumps({"before": None, "after": row, "source": source, "op": op,
                       "ts_ms": 1700000000100}).encode()


SNAPSHOT = "00000025:00000010:0001"
STREAMED = ("00000025:00000020:0003", "00000025:00000020:0002")
VALUES = [
    _value("r", {"msg": "a"}, "first", SNAPSHOT),
    _value("r", {"msg": "b"}, "true", SNAPSHOT),
    _value("r", {"msg": "same"}, "true", SNAPSHOT),
    _value("r", {"msg": "same"}, "last", SNAPSHOT),  # the same row twice
    _value("c", {"msg": "streamed"}, "false", *STREAMED, serial=1),
    *(_value("r", {"msg": m}, "incremental", *STREAMED, serial=1) for m in ("x", "y", "x")),
]
READS = 7


@pytest.fixture(autouse=True)
def _no_forced_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)


def _stream() -> Stream:
    records = [RawRecord(TOPIC, 0, offset, 1, None, value)
               for offset, value in enumerate(VALUES)]
    return Stream(records, [(TOPIC, 0)], {}, "bytes")


@pytest.mark.parametrize("batch", [1, 1000])
def test_every_snapshot_row_of_a_keyless_table_is_a_record(batch: int) -> None:
    python, native = run_both(_stream(), batch=batch, expect=True)
    assert native[4] == 0, "the native core declined records"
    records = [json.loads(line) for line in python[0].splitlines()]
    assert not python[1]
    assert sorted(r["after"]["msg"] for r in records if r["op"] == "read") == \
        ["a", "b", "same", "same", "x", "x", "y"]
    assert len({r["event_id"] for r in records}) == len(records) == READS + 1


def test_the_spark_steps_read_every_snapshot_row_of_a_keyless_table(tmp_path: Path) -> None:
    result = compare(_stream(), tmp_path, cuts=2)
    assert result["counters"]["changes_out"] == READS + 1
    assert result["counters"]["duplicates"] == result["counters"]["replay_mismatches"] == 0


@pytest.mark.parametrize("cuts", [0, 3])
def test_the_streaming_steps_read_every_snapshot_row_of_a_keyless_table(
        tmp_path: Path, cuts: int) -> None:
    from tests.differential.test_spark_stream_cores import compare as compare_streaming

    totals = compare_streaming(_stream(), tmp_path, seed=cuts, cuts=cuts)
    assert totals["duplicates"] == totals["replay_mismatches"] == 0
    assert totals["changes_out"] + totals["pending"] == READS + 1  # (the insert may wait)
