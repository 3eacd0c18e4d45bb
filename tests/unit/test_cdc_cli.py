"""``debezium-bridge convert`` on change-table exports and ``debezium-bridge net`` (in-process).

Expected values follow from the rows written here and the documents' rules (see
test_cdc_rows.py and test_cdc_net.py for the sources)."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from debezium_bridge.cli import EXIT_REJECTED, EXIT_USAGE, main
from debezium_bridge.formats.dumps import read_dump
from debezium_bridge.model.records import RawRecord
from tests.unit.cdc_model import CdcModel, Change
from tests.unit.cdc_support import describe

HEADER = ("__$start_lsn,__$end_lsn,__$seqval,__$operation,__$update_mask,id,name,amount,"
          "notes,flag,__$command_id,__$commit_time")


def _csv(model: CdcModel, extra: list[str] | None = None) -> str:
    lines = [HEADER]
    for r in model.rows:
        values = [r["__$start_lsn"], "NULL", r["__$seqval"], str(r["__$operation"]),
                  r["__$update_mask"], str(r["id"]), r["name"], r["amount"],
                  "NULL" if r["notes"] is None else r["notes"], "1" if r["flag"] else "0",
                  "1", r["__$commit_time"]]
        lines.append(",".join(values))
    return "\n".join(lines + (extra or [])) + "\n"


def _model() -> CdcModel:
    model = CdcModel()
    model.commit([Change("insert", 1, {"name": "ann", "amount": "1.50", "notes": "hello",
                                       "flag": True}),
                  Change("insert", 2, {"name": "bob", "amount": "2.00", "notes": None,
                                       "flag": False})])
    model.commit([Change("update", 1, {"name": "anna"})])
    model.commit([Change("key-delete-insert", 2, {"id": 7})])
    model.commit([Change("delete", 1)])
    return model


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_convert_detects_a_csv_export(tmp_path: Path) -> None:
    model = _model()
    export = tmp_path / "dbo_orders_CT.csv"
    export.write_text(_csv(model))
    out, counters = tmp_path / "out.jsonl", tmp_path / "counters.json"
    code = main(["convert", str(export), "--cdc.capture-instances", describe(tmp_path),
                 "-o", str(out), "--counters-json", str(counters)])
    assert code == 0
    records = _lines(out)
    assert [(r["op"], r["key"], r["key_changed"]) for r in records] == [
        ("insert", {"id": 1}, False), ("insert", {"id": 2}, False), ("update", {"id": 1}, False),
        ("update", {"id": 7}, True), ("delete", {"id": 1}, False)]
    # the unchanged nvarchar(max) is NULL in row 3: not sent, and not changed
    assert records[2]["unavailable_columns"] == ["notes"]
    assert records[2]["changed_columns"] == ["name"]
    assert records[0]["commit_ts"] == "2024-01-02T03:04:06.126Z"
    assert records[0]["source"] == {"connector": "sqlserver", "name": "server1",
                                    "version": "3.6.0.Final"}
    c = json.loads(counters.read_text())
    assert (c["records_in"], c["changes_out"], c["merged"], c["balanced"]) == (7, 5, 2, True)


def test_convert_to_debezium_envelopes(tmp_path: Path) -> None:
    """Debezium output of a key change logged as rows 1 + 2: d (serial 1) + tombstone + c
    (serial 2); topic <prefix>.<db>.<schema>.<table>; source.ts_ms the commit time."""
    model = _model()
    export = tmp_path / "rows.csv"
    export.write_text(_csv(model))
    out = tmp_path / "dbz.jsonl"
    assert main(["convert", str(export), "--cdc.capture-instances", describe(tmp_path),
                 "--cdc.topic-prefix", "shop", "--to", "debezium", "-o", str(out)]) == 0
    with read_dump(str(out)) as reader:
        records = [r for r in reader if isinstance(r, RawRecord)]
    assert {r.topic for r in records} == {"shop.testDB.dbo.orders"}
    payloads = [json.loads(r.value)["payload"] if r.value else None for r in records]
    ops = [(p["op"], p["source"]["event_serial_no"]) if p else "tombstone" for p in payloads]
    assert ops == [("c", 1), ("c", 1), ("u", 2), ("d", 1), "tombstone", ("c", 2), ("d", 1),
                   "tombstone"]
    first = payloads[0]
    assert first["source"]["ts_ms"] == 1704164646126  # 2024-01-02 03:04:06.126 at UTC
    assert first["source"]["commit_lsn"] == f"{model.states[0][0]:020x}"[:8] + ":" \
        + f"{model.states[0][0]:020x}"[8:16] + ":" + f"{model.states[0][0]:020x}"[16:]
    # Connect Decimal: BigInteger.toByteArray of the unscaled 150 (two's complement: 00 96)
    assert first["after"]["amount"] == base64.b64encode(bytes([0x00, 0x96])).decode()


def _envelopes(path: Path) -> list[tuple[Any, ...]]:
    """(op, event_serial_no, key, __debezium.* header names) of each record; tombstones as
    ("tombstone", None, key, headers)."""
    with read_dump(str(path)) as reader:
        records = [r for r in reader if isinstance(r, RawRecord)]
    out = []
    for r in records:
        key = json.loads(r.key)["payload"] if r.key else None
        names = sorted(n for n, _ in r.headers if n.startswith("__debezium."))
        if r.value is None:
            out.append(("tombstone", None, key, names))
        else:
            p = json.loads(r.value)["payload"]
            out.append((p["op"], p["source"]["event_serial_no"], key, names))
    return out


def test_equal_key_delete_and_insert_are_written_as_the_connector_writes_them(
        tmp_path: Path) -> None:
    """Reference §3 Case A and §2.2: a delete row and an insert row at one __$seqval (MERGE,
    a deferred update; MS-CT) are emitted by the connector as d (serial 1) + tombstone + c
    (serial 2), also when the key is the same; a 3 + 4 pair whose keys differ (Case B) as d +
    tombstone + c at serial 2 with __debezium.newkey / oldkey headers. Canonical output folds
    the equal-key pair into a plain update (SPEC §4), and an explicit --pair-key-changes does so
    for Debezium output too."""
    lines = [HEADER]
    for op, key, name in ((1, 1, "a"), (2, 1, "b")):  # same-key delete + insert
        lines.append(f"0x0000002500000D080010,NULL,0x0000002500000D080011,{op},0x1F,{key},"
                     f"{name},1.00,NULL,0,1,2024-01-02 03:04:05.000")
    for op, key in ((3, 1), (4, 8)):  # an update of the key column: Case B
        lines.append(f"0x0000002500000D080020,NULL,0x0000002500000D080021,{op},0x01,{key},"
                     "b,1.00,NULL,0,1,2024-01-02 03:04:06.000")
    export = tmp_path / "rows.csv"
    export.write_text("\n".join(lines) + "\n")
    args = ["convert", str(export), "--cdc.capture-instances", describe(tmp_path)]
    dbz = tmp_path / "dbz.jsonl"
    assert main([*args, "--to", "debezium", "-o", str(dbz)]) == 0
    assert _envelopes(dbz) == [
        ("d", 1, {"id": 1}, []), ("tombstone", None, {"id": 1}, []), ("c", 2, {"id": 1}, []),
        ("d", 2, {"id": 1}, ["__debezium.newkey"]),
        ("tombstone", None, {"id": 1}, ["__debezium.newkey"]),
        ("c", 2, {"id": 8}, ["__debezium.oldkey"])]
    assert main([*args, "--to", "debezium", "--pair-key-changes", "-o", str(dbz)]) == 0
    assert [e[:2] for e in _envelopes(dbz)][:1] == [("u", 2)]
    out = tmp_path / "out.jsonl"
    assert main([*args, "-o", str(out)]) == 0
    assert [(r["op"], r["key"], r["key_changed"]) for r in _lines(out)] == [
        ("update", {"id": 1}, False), ("update", {"id": 8}, True)]


def test_bad_rows_go_to_the_dlq_and_fail_on_error(tmp_path: Path) -> None:
    model = _model()
    export = tmp_path / "rows.csv"
    export.write_text(_csv(model, ["0x0000002500000D0800FF,NULL,0x0000002500000D0800F0,9,0x1F,"
                                   "3,x,1.00,NULL,0,1,2024-01-02 03:04:05.000",
                                   "not,enough,fields"]))
    out, dlq = tmp_path / "out.jsonl", tmp_path / "dlq.jsonl"
    code = main(["convert", str(export), "--cdc.capture-instances", describe(tmp_path),
                 "-o", str(out), "--dlq", str(dlq), "--fail-on-error"])
    assert code == EXIT_REJECTED
    with read_dump(str(dlq)) as reader:
        letters = [r for r in reader if isinstance(r, RawRecord)]
    stages = [dict(r.headers)["__connect.errors.stage"].decode() for r in letters]
    assert sorted(stages) == ["cdc-read", "cdc-row"]
    offsets = sorted(int(dict(r.headers)["__connect.errors.offset"]) for r in letters)
    assert offsets == [9, 10]
    assert len(_lines(out)) == 5


def test_change_table_rows_need_a_description(tmp_path: Path) -> None:
    export = tmp_path / "rows.csv"
    export.write_text(_csv(_model()))
    assert main(["convert", str(export)]) == EXIT_USAGE


def test_net_command_modes_and_rows(tmp_path: Path) -> None:
    model = _model()
    export = tmp_path / "rows.csv"
    export.write_text(_csv(model))
    out = tmp_path / "net.jsonl"
    args = ["net", str(export), "--cdc.capture-instances", describe(tmp_path), "-o", str(out)]
    assert main([*args, "--to", "rows"]) == 0
    assert [(r["id"], r["__$operation"]) for r in _lines(out)] == [(7, 2)]
    second = f"0x{model.states[1][0]:020X}"
    assert main([*args, "--to", "rows", "--from-lsn", second, "--mode", "all-with-mask"]) == 0
    rows = {r["id"]: r for r in _lines(out)}
    assert {k: r["__$operation"] for k, r in rows.items()} == {1: 1, 2: 1, 7: 2}
    assert main([*args, "--from-lsn", second, "--mode", "all-with-merge"]) == 0
    assert sorted((r["op"], r["key"]["id"]) for r in _lines(out)) == [
        ("delete", 1), ("delete", 2), ("upsert", 7)]



def test_net_command_refuses_an_invalid_window_rather_than_answer_nothing(tmp_path: Path) -> None:
    """WORK ("Query functions"): a bound that is invalid or out of range, or an invalid row
    filter option, makes the query function fail (Msg 313) rather than return an empty result
    set, which could not be told from a valid query without changes."""
    model = _model()
    export = tmp_path / "rows.csv"
    export.write_text(_csv(model))
    out = tmp_path / "net.jsonl"
    args = ["net", str(export), "--cdc.capture-instances", describe(tmp_path), "-o", str(out)]
    first, last = (f"0x{lsn:020X}" for lsn in (model.states[0][0], model.states[-1][0]))
    assert main([*args, "--from-lsn", last, "--to-lsn", first]) == EXIT_USAGE  # from > to
    assert main([*args, "--from-lsn", "0xZZ"]) == EXIT_USAGE  # not an LSN
    assert main([*args, "--mode", "all update old"]) == EXIT_USAGE  # not a net row filter
    assert not out.exists() or not out.read_text()
    assert main([*args, "--from-lsn", last, "--to-lsn", last]) == 0  # one LSN is a window
    assert [(r["op"], r["key"]["id"]) for r in _lines(out)] == [("delete", 1)]

def test_net_command_walks_consecutive_windows_with_a_state_file(tmp_path: Path) -> None:
    """WORK: each query starts at sys.fn_cdc_increment_lsn of the previous upper bound; over
    the runs every change is counted once."""
    model = _model()
    export = tmp_path / "rows.csv"
    export.write_text(_csv(model))
    out, state = tmp_path / "net.jsonl", tmp_path / "state.json"
    args = ["net", str(export), "--cdc.capture-instances", describe(tmp_path), "-o", str(out),
            "--state", str(state), "--to", "rows"]
    seen = []
    for commit, _ in model.states:
        assert main([*args, "--to-lsn", f"0x{commit:020X}"]) == 0
        seen.append(sorted((r["id"], r["__$operation"]) for r in _lines(out)))
        saved = json.loads(state.read_text())
        assert saved["last_to_lsn"].replace(":", "") == f"{commit:020x}"
    assert seen == [[(1, 2), (2, 2)], [(1, 4)], [(2, 1), (7, 2)], [(1, 1)]]
    windows = json.loads(state.read_text())["windows"]
    assert [w["from_lsn"] for w in windows[1:]] == [
        f"{model.states[i][0] + 1:020x}"[:8] + ":" + f"{model.states[i][0] + 1:020x}"[8:16]
        + ":" + f"{model.states[i][0] + 1:020x}"[16:] for i in range(3)]


def test_net_from_a_debezium_dump(tmp_path: Path) -> None:
    """Net changes from any Debezium input the product reads: the samples command's traffic."""
    dump = tmp_path / "traffic.jsonl"
    assert main(["samples", "-o", str(dump)]) == 0
    out = tmp_path / "net.jsonl"
    assert main(["net", str(dump), "-o", str(out), "--mode", "all"]) == 0
    ops = sorted(r["op"] for r in _lines(out))
    assert ops and set(ops) <= {"insert", "update", "delete"}
