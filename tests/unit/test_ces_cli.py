"""``debezium-bridge convert --to ces|ces-avro|debezium|debezium-avro`` end to end.

The issue's "done when" checks: the demo traffic prints valid CES events with one merged UPD for
the primary-key change; a 1.5 MB row comes out as validated segments that the reader reassembles
to the same row; CES → Debezium output decodes with the core's own Debezium decoder to the same
canonical records. Expected values: the demo's expectation (simulation inputs) and the
canonical output of the same input, never the CES output itself.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.cli import main
from debezium_bridge.formats.dumps import write_lossless
from debezium_bridge.testing.simulator import _DEMO_ROWS, CUSTOMERS, CdcSimulator, Insert, demo
from tests.support.registry import SchemaRegistryServer
from tests.unit.ces_support import PROPAGATE, events

CARRIED = ("op", "table", "table_id", "key", "old_key", "key_changed", "before", "after",
           "changed_columns", "unavailable_columns", "commit_ts")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def values_of(path: Path) -> list[bytes]:
    """Kafka values of a lossless dump."""
    return [base64.b64decode(r["value_b64"]) for r in lines(path) if r["value_b64"]]


def convert(tmp: Path, name: str, *args: str) -> tuple[int, Path]:
    out = tmp / name
    code = main(["convert", *args, "-o", str(out), "--progress", "never"])
    return code, out


@pytest.fixture(scope="module")
def demo_dump(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    records, expected = demo()
    path = tmp_path_factory.mktemp("demo") / "demo.jsonl"
    with path.open("wb") as out:
        write_lossless(records, out)
    return path, expected


def carried(record: dict[str, Any]) -> dict[str, Any]:
    out = {k: record[k] for k in CARRIED}
    out["op"] = "insert" if out["op"] == "read" else out["op"]
    out["commit_lsn"] = record["position"]["commit_lsn"]
    return out


def test_demo_to_ces_prints_valid_events_with_one_merged_update(demo_dump, tmp_path) -> None:
    dump, expected = demo_dump
    code, out = convert(tmp_path, "ces.jsonl", str(dump), "--to", "ces")
    assert code == 0
    values = out.read_bytes().splitlines()
    whole = events(values)
    assert len(whole) == len(expected.changes)
    (change,) = [c for c in expected.changes if c.old_key is not None]
    at = [e for e in whole if e["data"]["eventsource"]["transaction"]["commitlsn"]
          == change.commit_lsn.upper()]
    assert [e["operation"] for e in at] == ["UPD"]
    old = json.loads(at[0]["data"]["eventrow"]["old"])
    assert old["id"] == str(change.old_key["id"])


def test_subprocess_prints_ces_to_stdout(demo_dump) -> None:
    dump, expected = demo_dump
    proc = subprocess.run([sys.executable, "-m", "debezium_bridge", "convert", str(dump),
                           "--to", "ces", "--progress", "never"], capture_output=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert len(events(proc.stdout.splitlines())) == len(expected.changes)
    assert b"ces: records_in=" in proc.stderr


def test_full_round_trip_through_ces_and_debezium(demo_dump, tmp_path) -> None:
    dump, _ = demo_dump
    assert convert(tmp_path, "canonical.jsonl", str(dump))[0] == 0
    assert convert(tmp_path, "ces.jsonl", str(dump), "--to", "ces")[0] == 0
    ces = tmp_path / "ces.jsonl"
    code, dbz = convert(tmp_path, "dbz.jsonl", str(ces), "--topic", "ces", "--to", "debezium")
    assert code == 0
    code, final = convert(tmp_path, "final.jsonl", str(dbz))
    assert code == 0
    original = lines(tmp_path / "canonical.jsonl")
    assert [carried(r) for r in lines(final)] == [carried(r) for r in original]
    # and CES → canonical directly gives the records the Debezium detour gives
    code, direct = convert(tmp_path, "direct.jsonl", str(ces), "--topic", "ces")
    assert code == 0

    def without(record: dict[str, Any]) -> dict[str, Any]:
        record = {k: v for k, v in record.items() if k not in ("lineage", "source")}
        record["tx"] = {k: v for k, v in record["tx"].items() if k != "begin_lsn"}
        return record

    assert [without(r) for r in lines(final)] == [without(r) for r in lines(direct)]


def test_ces_avro_output_is_lossless_and_reads_back(demo_dump, tmp_path) -> None:
    dump, expected = demo_dump
    code, out = convert(tmp_path, "avro.jsonl", str(dump), "--to", "ces-avro")
    assert code == 0
    values = values_of(out)
    assert all(v[:4] == b"\x061.0" for v in values)
    assert len(events(values)) == len(expected.changes)
    code, back = convert(tmp_path, "back.jsonl", str(out))
    code2, json_back = convert(tmp_path, "jback.jsonl", str(dump), "--to", "ces")
    code3, json_canonical = convert(tmp_path, "jc.jsonl", str(json_back), "--topic", "ces")
    assert (code, code2, code3) == (0, 0, 0)
    assert [carried(r) for r in lines(back)] == [carried(r) for r in lines(json_canonical)]


def test_large_row_segments_and_reassembly(tmp_path) -> None:
    unit = 'row/"\\ é 日本 😀\n'
    n = 1_500_000 // (2 * len(unit.encode()))
    row = _DEMO_ROWS[0] | {"id": 7, "email": unit * n, "notes": unit[::-1] * n}
    sim = CdcSimulator([CUSTOMERS], modes=PROPAGATE)
    sim.commit([Insert("customers", row)])
    dump = tmp_path / "big.jsonl"
    with dump.open("wb") as out:
        write_lossless(sim.records, out)
    code, ces = convert(tmp_path, "ces.jsonl", str(dump), "--to", "ces", "--output-format",
                        "lossless", "--ces.max-message-size-kb", "256")
    assert code == 0
    values = values_of(ces)
    limit = 256 * 1024
    assert all(len(v) <= limit for v in values)
    assert len(values) >= 1_500_000 // limit + 1  # ("/", '"', "\\" and newlines are escaped
    assert all(len(v) > 0.95 * limit for v in values[:-1])  # at 3 levels: more bytes) full
    (whole,) = events(values)
    assert json.loads(whole["data"]["eventrow"]["current"])["email"] == row["email"]
    reordered = tmp_path / "reordered.jsonl"
    records = lines(ces)
    reordered.write_text("".join(json.dumps(r) + "\n" for r in records[::-1]))
    code, back = convert(tmp_path, "back.jsonl", str(reordered), "--counters-json",
                         str(tmp_path / "c.json"))
    assert code == 0
    (record,) = lines(back)
    assert record["after"] == row
    counters = json.loads((tmp_path / "c.json").read_text())
    assert counters["ces_input"]["assembled"] == 1 and counters["ces_input"]["balanced"]


def test_missing_segment_goes_to_the_dlq(tmp_path) -> None:
    row = _DEMO_ROWS[0] | {"notes": "x" * 400_000}
    sim = CdcSimulator([CUSTOMERS])
    sim.commit([Insert("customers", row)])
    dump = tmp_path / "big.jsonl"
    with dump.open("wb") as out:
        write_lossless(sim.records, out)
    _, ces = convert(tmp_path, "ces.jsonl", str(dump), "--to", "ces", "--output-format",
                     "lossless", "--ces.max-message-size-kb", "128")
    records = lines(ces)
    assert len(records) == 4
    holed = tmp_path / "holed.jsonl"
    holed.write_text("".join(json.dumps(r) + "\n" for i, r in enumerate(records) if i != 1))
    dlq = tmp_path / "dlq.jsonl"
    code, out = convert(tmp_path, "out.jsonl", str(holed), "--dlq", str(dlq), "--fail-on-error")
    assert code == 1 and out.read_text() == ""
    letters = lines(dlq)
    assert len(letters) == 3
    stages = {base64.b64decode(v).decode() for letter in letters for k, v in letter["headers"]
              if k == "__connect.errors.stage"}
    assert stages == {"ces-assemble"}


def test_debezium_avro_with_schema_registry(demo_dump, tmp_path) -> None:
    dump, _ = demo_dump
    with SchemaRegistryServer(credentials=("u", "p")) as server:
        auth = ["--schema-registry", server.url, "-X", "basic.auth.user.info=u:p"]
        code, out = convert(tmp_path, "avro.jsonl", str(dump), "--to", "debezium-avro", *auth)
        assert code == 0 and server.subjects
        code, back = convert(tmp_path, "back.jsonl", str(out), *auth)
        assert code == 0
    assert convert(tmp_path, "canonical.jsonl", str(dump))[0] == 0
    original = lines(tmp_path / "canonical.jsonl")
    assert [{k: v for k, v in r.items() if k != "lineage"} for r in lines(back)] == \
        [{k: v for k, v in r.items() if k != "lineage"} for r in original]


def test_debezium_avro_offline_schemas(demo_dump, tmp_path) -> None:
    dump, _ = demo_dump
    schemas = tmp_path / "schemas.json"
    code, out = convert(tmp_path, "avro.jsonl", str(dump), "--to", "debezium-avro",
                        "--output-avro-schemas", str(schemas))
    assert code == 0 and json.loads(schemas.read_text())
    code, back = convert(tmp_path, "back.jsonl", str(out), "--avro-schemas", str(schemas))
    assert code == 0 and len(lines(back)) == 9
    assert main(["convert", str(dump), "--to", "debezium-avro", "-o",
                 str(tmp_path / "x")]) == 2  # no registry: a configuration error


def test_ces_options_from_flags_file_and_environment(demo_dump, tmp_path, monkeypatch) -> None:
    dump, _ = demo_dump
    config = tmp_path / "c.yaml"
    config.write_text(f"inputs: ['{dump}']\nto: ces\nces:\n  segment_index_base: 0\n"
                      "  datacontenttype: application/avro-json\n")
    monkeypatch.setenv("DEBEZIUM_BRIDGE_CES__KEY_CHANGES", "delete-insert")
    code, out = convert(tmp_path, "o.jsonl", "--config", str(config), "--ces.ids", "random")
    assert code == 0
    whole = events(out.read_bytes().splitlines(), _options(segment_index_base=0))
    assert {(e["segmentindex"], e["datacontenttype"]) for e in whole} == {
        (0, "application/avro-json")}
    assert [e["operation"] for e in whole].count("DEL") == 2  # the key change as DEL + INS
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"inputs: ['{dump}']\nces: {{max_message_size_kb: 64}}\n")
    assert main(["convert", "--config", str(bad)]) == 2
    assert main(["convert", str(dump), "--to", "ces-avro", "--output-format", "values",
                 "-o", str(tmp_path / "y")]) == 2


def test_numeric_ces_choices_from_flags_and_environment(demo_dump, tmp_path,
                                                       monkeypatch) -> None:
    """Flags and environment variables are text; ``{0,1}`` and ``{4,2}`` are number choices."""
    dump, _ = demo_dump
    monkeypatch.setenv("DEBEZIUM_BRIDGE_CES__MONEY_SCALE", "2")
    code, out = convert(tmp_path, "n.jsonl", str(dump), "--to", "ces",
                        "--ces.segment-index-base", "0")
    assert code == 0
    whole = events(out.read_bytes().splitlines(), _options(segment_index_base=0))
    assert {e["segmentindex"] for e in whole} == {0}
    assert main(["convert", str(dump), "--to", "ces", "--ces.segment-index-base", "2",
                 "-o", str(tmp_path / "z")]) == 2


def test_debezium_flags_and_value_output(demo_dump, tmp_path) -> None:
    dump, _ = demo_dump
    code, out = convert(tmp_path, "v.jsonl", str(dump), "--to", "debezium", "--output-format",
                        "values", "--no-debezium.tombstones", "--debezium.topic-prefix", "srv9",
                        "--no-debezium.json-schemas")
    assert code == 0
    payloads = lines(out)
    assert all(p is not None for p in payloads) and len(payloads) == 10  # 9 + the key change's c
    assert {p["source"]["name"] for p in payloads} == {"srv9"} and "schema" not in payloads[0]


def _options(**kw: Any) -> Any:
    from debezium_bridge.formats.ces.options import CesOptions

    return CesOptions(**kw)


def test_ces_and_debezium_inputs_in_one_run(demo_dump, tmp_path) -> None:
    dump, expected = demo_dump
    assert convert(tmp_path, "ces.jsonl", str(dump), "--to", "ces", "--output-format",
                   "lossless", "--output-topic", "ces-events")[0] == 0
    # CES events of the demo, then the demo's Debezium records themselves: one stream
    code, out = convert(tmp_path, "mixed.jsonl", str(tmp_path / "ces.jsonl"), str(dump))
    assert code == 0
    mixed = lines(out)
    by_source = {}
    for record in mixed:
        by_source.setdefault(record["source"]["name"], []).append(record)
    assert sorted(by_source) == ["ces", "server1"]  # CES input, and the Debezium records
    assert len(by_source["ces"]) == len(by_source["server1"]) == len(expected.changes)
    assert [carried(r) for r in by_source["ces"]] == [carried(r) for r in by_source["server1"]]
