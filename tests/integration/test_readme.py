"""The README's examples run as written: its ``sh`` blocks in order in one shell (the embedded
broker started by the first one on 127.0.0.1:9092), its ``job.yaml`` block as the job's file,
and its Python block; then the outputs are checked against the demo traffic's expectation.
The change-table section's three examples run from a directory that sees the checkout's
``docs/`` (as from the checkout itself); their outputs are checked against the transactions the
sample export records (docs/examples/cdc/README.md). The sidecar section's ``bash`` block (its
quick start, also in docs/sidecar.md) runs on a broker of its own."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.testing.simulator import demo_expectation
from tests.golden.demo_case import assert_demo_dead_letters, assert_demo_feed
from tests.paths import ROOT

pytestmark = [pytest.mark.integration]
README = (ROOT / "README.md").read_text()
_CDC = re.compile(r"<!-- example: cdc-([\w-]+) -->\s*```[a-z]*\n(.*?)```\s*<!-- /example -->",
                  re.S)
CDC_EXAMPLES = dict(_CDC.findall(README))
"""The change-table section's examples (``cli``, ``spark``, ``net``), run from the checkout."""


def _blocks(language: str) -> list[str]:
    """The code blocks of the runner examples (the change-table section's aside)."""
    text = _CDC.sub("", README)
    return re.findall(rf"^```{language}\n(.*?)^```", text, flags=re.S | re.M)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
def test_readme_examples_run_as_written(tmp_path: Path) -> None:
    if not _port_free(9092):
        pytest.fail("port 9092 is taken: the README's broker example needs it")
    shell = _blocks("sh")
    jobs = [b for b in _blocks("yaml") if b.startswith("# job.yaml")]
    python = _blocks("python")
    assert len(shell) == 2 and len(jobs) == 1 and len(python) == 1
    (tmp_path / "job.yaml").write_text(jobs[0])
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    script = "set -e\n" + "\n".join(shell) + "\nkill %1\nwait\n"
    run = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    try:
        stdout, stderr = run.communicate(timeout=900)
    finally:  # leave no broker behind, whatever happened
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGTERM)
    assert run.returncode == 0, stdout[-3000:] + stderr[-3000:]
    expected = demo_expectation()
    # the job: every change of the demo traffic, pending 0
    assert "pending=0" in stderr and "NOT BALANCED" not in stderr
    from pyarrow import parquet

    changes = parquet.read_table(tmp_path / "out" / "changes").to_pylist()
    canonical = [json.loads(r["value"]) for r in changes if r["format"] == "canonical"]
    assert sorted(r["event_id"] for r in canonical) == sorted(
        {r["event_id"] for r in canonical})
    assert len(canonical) == len(expected.changes)
    # the CLI: the same changes, and the dead letter
    cli = [json.loads(line) for line in (tmp_path / "changes.jsonl").read_text().splitlines()]
    assert sorted(r["event_id"] for r in cli) == sorted(r["event_id"] for r in canonical)
    assert len((tmp_path / "rejected.jsonl").read_text().splitlines()) == expected.corrupt
    assert (tmp_path / "dbz.jsonl").stat().st_size > 0
    # the library example
    lib = subprocess.run([sys.executable, "-c", python[0]], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert lib.returncode == 0, lib.stderr
    kinds = [line.split()[0] for line in lib.stdout.splitlines()[:-1]]
    assert kinds.count("change") == len(expected.changes)
    assert kinds.count("dead_letter") == expected.corrupt
    assert "balanced" in lib.stdout.splitlines()[-1]


def test_readme_sidecar_quick_start_runs_as_written(tmp_path: Path) -> None:
    """The sidecar section: ten lines that start a broker, produce the sample traffic, run the
    sidecar and print the translated topic and the DLQ, then stop both with SIGTERM. The sample
    traffic is the demo's (``debezium-bridge samples``), so the expectation is the traffic
    generator's: every logical change once, the primary-key change as one update, the corrupt
    record in the DLQ with Kafka Connect's error headers."""
    if not _port_free(19092):
        pytest.fail("port 19092 is taken: the README's sidecar quick start needs it")
    [commands] = _blocks("bash")
    docs = (ROOT / "docs" / "sidecar.md").read_text().split("## Quick start", 1)[1]
    assert re.search(r"```bash\n(.*?)```", docs, re.S)[1] == commands
    assert len(commands.strip().splitlines()) <= 10
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    run = subprocess.Popen(["bash", "-c", commands], cwd=tmp_path, env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    try:
        stdout, stderr = run.communicate(timeout=180)
    finally:  # leave no broker or sidecar behind, whatever happened
        with contextlib.suppress(ProcessLookupError):
            os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 0, stdout[-3000:] + stderr[-3000:]
    expected = demo_expectation()
    lines = stdout.splitlines()
    assert_demo_feed([json.loads(line) for line in lines if line.startswith('{"op"')],
                     expected)
    dead = [line for line in lines if line.startswith("debezium-bridge.dlq[")]
    assert_demo_dead_letters(
        [dict(re.findall(r"(__connect\.errors\.[\w.]+)=(.*?)(?= __connect\.errors\.|$)", d))
         for d in dead], expected)
    assert "stopped" in stderr  # the sidecar's clean SIGTERM exit


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def checkout_like(tmp_path: Path) -> Path:
    """A directory where ``docs/`` is the checkout's, so outputs land outside the repository."""
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    return tmp_path


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "SPARK_LOCAL_IP": "127.0.0.1"}


# The sample's four transactions (docs/examples/cdc/README.md): insert 1 and 2; update 1
# (name ann -> anna, notes unchanged); key 2 -> 7 as a delete + an insert; delete 1.
_FLAT = [("insert", 1), ("insert", 2), ("update", 1), ("delete", 2), ("update", 7),
         ("delete", 1)]


@pytest.mark.slow
def test_readme_change_table_cli_and_net_examples_run_as_written(checkout_like: Path) -> None:
    assert set(CDC_EXAMPLES) == {"cli", "spark", "net"}
    for name in ("cli", "net"):
        run = subprocess.run(["bash", "-c", "set -e\n" + CDC_EXAMPLES[name]], cwd=checkout_like,
                             env=_env(), capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, name + run.stdout[-3000:] + run.stderr[-3000:]
    d = checkout_like
    changes = _lines(d / "orders.jsonl")
    assert [(c["op"], c["key"]["id"]) for c in changes] == [
        ("insert", 1), ("insert", 2), ("update", 1), ("update", 7), ("delete", 1)]
    assert changes[3]["key_changed"] and changes[3]["old_key"] == {"id": 2}
    assert changes[2]["changed_columns"] == ["name"] and "notes" in changes[2][
        "unavailable_columns"]  # nvarchar(max) NULL in the 3 row: not sent
    assert not (d / "orders-rejected.jsonl").read_text()
    assert [(r["__op"], r["id"]) for r in _lines(d / "orders-flat.jsonl")] == _FLAT
    again = _lines(d / "orders-again.jsonl")  # the envelopes decode to the same records
    for record in (*changes, *again):
        del record["lineage"]
        record["source"]["name"] = None
    assert again == changes
    # fn_cdc_get_net_changes over [first commit, key change], N'all with mask': id 1 inserted
    # and updated -> one insert with its final values; 2 inserted then moved away -> nothing;
    # 7 -> an insert; inserts and deletes carry no mask
    net = _lines(d / "orders-net.jsonl")
    assert [(r["__$operation"], r["id"], r["name"], r["__$update_mask"]) for r in net] == [
        (2, 1, "anna", None), (2, 7, "bob", None)]
    first, second = _lines(d / "window-1.jsonl"), _lines(d / "window-2.jsonl")
    assert sorted((r["__op"], r["id"]) for r in first) == [("insert", 1), ("insert", 2)]
    assert sorted((r["__op"], r["id"]) for r in second) == [
        ("delete", 1), ("delete", 2), ("insert", 7)]
    state = json.loads((d / "orders-window.json").read_text())
    assert state["windows"][1]["from_lsn"] == "00000025:00000d08:0011"  # increment of 0x…10


@pytest.mark.slow
def test_readme_change_table_spark_example_runs_as_written(checkout_like: Path) -> None:
    env = {k: v for k, v in _env().items() if k != "PYSPARK_PYTHON"}
    run = subprocess.run([sys.executable, "-c", CDC_EXAMPLES["spark"]], cwd=checkout_like,
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    printed = [line.split(" ", 1) for line in run.stdout.splitlines()]
    assert {kind for kind, _ in printed} == {"change"}
    rows = [json.loads(value) for _, value in printed]
    assert sorted((r["__op"], r["id"]) for r in rows) == sorted(_FLAT)
