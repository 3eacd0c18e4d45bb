"""End-to-end tests of ``debezium-bridge convert`` (in-process and as a subprocess)."""

from __future__ import annotations

import base64
import json
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from debezium_bridge.cli import EXIT_INTERRUPTED, EXIT_SERVICE, main
from debezium_bridge.cli.convert import ConvertConfig
from debezium_bridge.formats.dumps import write_lossless
from debezium_bridge.model.records import RawRecord
from tests.unit.envelopes import TOPIC, delete, event, insert, lsn, row, tombstone, update


def _pk_change_records() -> list[RawRecord]:
    commit, change = lsn(5), lsn(5, 3)
    return [
        insert(1, 1, partition=0, offset=0),
        event("c", 8, commit=commit, change=change, serial=2, after=row(8, "x"), partition=1,
              offset=0),
        update(1, 2, "a", "b", partition=0, offset=1),
        event("d", 7, commit=commit, change=change, serial=1, before=row(7, "x"), partition=0,
              offset=2),
        tombstone(7, partition=0, offset=3),
        delete(1, 6, partition=0, offset=4),
        tombstone(1, partition=0, offset=5),
        update(1, 2, "a", "b", partition=0, offset=6),  # replayed after a restart
        RawRecord(TOPIC, 1, 1, None, b'{"id":9}', b'{"before":null,"after":{"id":9'),  # corrupt
    ]


@pytest.fixture
def dump(tmp_path: Path) -> Path:
    path = tmp_path / "dump.jsonl"
    with path.open("wb") as out:
        write_lossless(_pk_change_records(), out)
    return path


@pytest.mark.parametrize("chunk", [None, 16, 300])
def test_convert_canonical_with_dlq_and_counters(dump: Path, tmp_path: Path, capsys,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 chunk: int | None):
    """``chunk``: the dump read in chunks smaller than a line (each chunk grows to hold one)
    or holding a few lines (the incomplete last line carried into the next)."""
    if chunk is not None:
        monkeypatch.setattr("debezium_bridge.cli.convert._CHUNK", chunk)
    out, dlq, counters = tmp_path / "out.jsonl", tmp_path / "dlq.jsonl", tmp_path / "c.json"
    code = main(["convert", str(dump), "-o", str(out), "--dlq", str(dlq),
                 "--counters-json", str(counters)])
    assert code == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["op"], r["key"], r["key_changed"]) for r in records] == [
        ("insert", {"id": 1}, False), ("update", {"id": 1}, False),
        ("update", {"id": 8}, True), ("delete", {"id": 1}, False)]
    assert records[2]["old_key"] == {"id": 7}
    letters = [json.loads(line) for line in dlq.read_text().splitlines()]
    assert len(letters) == 1
    bad = letters[0]
    assert base64.b64decode(bad["value_b64"]) == b'{"before":null,"after":{"id":9'
    headers = {k: base64.b64decode(v).decode() for k, v in bad["headers"]}
    assert headers["__connect.errors.topic"] == TOPIC
    assert headers["__connect.errors.partition"] == "1"
    assert headers["__connect.errors.offset"] == "1"
    assert headers["__connect.errors.stage"] == "decode"
    c = json.loads(counters.read_text())
    assert c["records_in"] == 9 and c["balanced"] is True
    assert (c["changes_out"], c["merged"], c["duplicates"], c["tombstones"],
            c["dead_letters"]) == (4, 1, 1, 2, 1)
    err = capsys.readouterr().err
    assert "balanced" in err and "rejected" in err and f"{TOPIC}[1]@1" in err


def test_fail_on_error_exit_code(dump: Path, tmp_path: Path):
    assert main(["convert", str(dump), "-o", str(tmp_path / "o"), "--fail-on-error"]) == 1


def test_flat_view_splits_a_key_change(dump: Path, tmp_path: Path):
    out = tmp_path / "flat.jsonl"
    assert main(["convert", str(dump), "--to", "flat", "-o", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["__op"], r["__deleted"]) for r in rows] == [
        (1, "insert", False), (1, "update", False), (7, "delete", True), (8, "update", False),
        (1, "delete", True)]
    assert rows[2]["__seq"] == rows[3]["__seq"]


def test_exploded_view(dump: Path, tmp_path: Path):
    out = tmp_path / "x.jsonl"
    assert main(["convert", str(dump), "--to", "exploded", "-o", str(out)]) == 0
    kinds = [json.loads(line)["_change_type"] for line in out.read_text().splitlines()]
    assert kinds == ["insert", "update_preimage", "update_postimage", "update_preimage",
                     "update_postimage", "delete"]


def test_usage_and_io_errors(tmp_path: Path, dump: Path):
    assert main(["convert", str(tmp_path / "missing.jsonl")]) == 3
    assert main(["convert", str(dump), "--max-pending", "0"]) == 2
    assert main(["convert", str(dump), "-X", "nonsense"]) == 2
    bad_config = tmp_path / "c.yaml"
    bad_config.write_text("inputs: [x]\nno_such_setting: 1\n")
    assert main(["convert", "--config", str(bad_config)]) == 2


def test_config_file_and_env(tmp_path: Path, dump: Path, monkeypatch):
    out = tmp_path / "o.jsonl"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"inputs: ['{dump}']\noutput: '{out}'\nto: flat\n")
    monkeypatch.setenv("DEBEZIUM_BRIDGE_MAX_PENDING", "5")
    assert main(["convert", "--config", str(cfg)]) == 0
    assert json.loads(out.read_text().splitlines()[0])["__op"] == "insert"


def test_secrets_are_masked_in_config_repr(dump: Path):
    config = ConvertConfig.from_args([str(dump), "--schema-registry", "http://bob:pw@r:1",
                                      "-X", "basic.auth.user.info=alice:s3cret"], prog="t")
    assert config.registry == {"basic.auth.user.info": "alice:s3cret"}
    assert config.schema_registry == "http://bob:pw@r:1"
    for shown in (repr(config), str(config), str(config.masked())):
        assert "s3cret" not in shown and "bob:pw" not in shown


def test_python_dash_m_subprocess(dump: Path):
    proc = subprocess.run([sys.executable, "-m", "debezium_bridge", "convert", str(dump)],
                          capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 4


def test_several_inputs_form_one_stream(tmp_path: Path):
    records = _pk_change_records()[:5]
    first, second = tmp_path / "p0.jsonl", tmp_path / "p1.jsonl"
    with first.open("wb") as out:  # partition 0 only, then partition 1 only
        write_lossless([r for r in records if r.partition == 0], out)
    with second.open("wb") as out:
        write_lossless([r for r in records if r.partition == 1], out)
    out = tmp_path / "o.jsonl"
    assert main(["convert", str(first), str(second), "-o", str(out)]) == 0
    ops = [json.loads(line)["op"] for line in out.read_text().splitlines()]
    assert ops == ["insert", "update", "update"]  # the key change still merged


def test_every_setting_can_come_from_the_environment(dump: Path, tmp_path: Path,
                                                     monkeypatch) -> None:
    """The settings the README promised as DEBEZIUM_BRIDGE_<NAME> and that were silently
    ignored: TO, OUTPUT, FAIL_ON_ERROR and the pairing switch."""
    out = tmp_path / "env.jsonl"
    monkeypatch.setenv("DEBEZIUM_BRIDGE_TO", "flat")
    monkeypatch.setenv("DEBEZIUM_BRIDGE_OUTPUT", str(out))
    monkeypatch.setenv("DEBEZIUM_BRIDGE_FAIL_ON_ERROR", "true")
    monkeypatch.setenv("DEBEZIUM_BRIDGE_PAIR_KEY_CHANGES", "false")
    assert main(["convert", str(dump)]) == 1  # the corrupt record, with fail_on_error
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert "__op" in rows[0]  # flat
    # without pairing the key change comes out as its delete and create halves
    assert [(r["id"], r["__op"]) for r in rows if r["id"] in (7, 8)] == [
        (7, "delete"), (8, "insert")]


def test_config_file_keys_are_the_flag_names(dump: Path, tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"inputs: ['{dump}']\noutput: '{out}'\npair_key_changes: false\n")
    assert main(["convert", "--config", str(cfg)]) == 0
    assert [json.loads(line)["op"] for line in out.read_text().splitlines()].count(
        "insert") == 2  # the key change's create half is an insert of its own


def test_properties_file_with_continued_lines(dump: Path, tmp_path: Path) -> None:
    """Java .properties: a sasl.jaas.config value continued with a backslash is one setting."""
    cfg = tmp_path / "c.properties"
    cfg.write_text(f"inputs={dump}\nschema_registry=http://127.0.0.1:1\n"
                   "registry.sasl.jaas.config=org.apache.kafka.common.security.plain."
                   "PlainLoginModule required \\\n    username=\"u\" password=\"p\";\n"
                   "ces.bit=boolean\nmax_pending=7\n")
    config = ConvertConfig.from_args(["--config", str(cfg)], prog="t")
    assert config.registry == {"sasl.jaas.config": "org.apache.kafka.common.security.plain."
                               "PlainLoginModule required username=\"u\" password=\"p\";"}
    assert (config.ces.bit, config.max_pending, config.inputs) == ("boolean", 7, [str(dump)])
    assert "password" not in repr(config)


def test_unknown_keys_are_rejected_everywhere(dump: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"inputs: ['{dump}']\nces: {{no_such_switch: 1}}\n")
    assert main(["convert", "--config", str(cfg)]) == 2
    assert main(["convert", str(dump), "--no-such-flag"]) == 2


def test_unreachable_registry_stops_the_run_instead_of_rejecting_records(tmp_path: Path,
                                                                         capsys) -> None:
    """An Avro record whose schema cannot be fetched because the registry is down: exit 4 with
    a clear error, the counters, and no dead letter."""
    records = [RawRecord(TOPIC, 0, 0, None, b'{"id":1}', b"\x00\x00\x00\x00\x01\x02")]
    dump = tmp_path / "avro.jsonl"
    with dump.open("wb") as out:
        write_lossless(records, out)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    dlq = tmp_path / "dlq.jsonl"
    code = main(["convert", str(dump), "-o", str(tmp_path / "o"), "--dlq", str(dlq),
                 "--schema-registry", f"http://127.0.0.1:{closed}", "-X", "max.retries=1",
                 "-X", "retries.wait.ms=10"])
    assert code == EXIT_SERVICE
    assert dlq.read_bytes() == b""
    err = capsys.readouterr().err
    assert "schema registry unreachable" in err and "records_in=0" in err


def test_ctrl_c_stops_cleanly_with_the_counters(dump: Path) -> None:
    """SIGINT while reading standard input: exit 130, the counters, no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "debezium_bridge", "convert", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    lines = dump.read_bytes().splitlines(keepends=True)[:3]  # insert, create half, update
    proc.stdin.write(b"".join(lines))
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], 60)  # the insert is out: it is running
    assert ready, "no output from the CLI"
    first = proc.stdout.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert json.loads(first)["op"] == "insert"
    text = err.decode()
    assert "Traceback" not in text
    assert "interrupted" in text and "records_in=3" in text and "balanced" in text


def test_broker_on_a_taken_port_says_so(capsys) -> None:
    """Tansu exits with status 0 when its port is taken; the broker command names the port."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["broker", "--port", str(port)]) != 0
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
