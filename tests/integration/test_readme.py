"""The README's examples run as written: its shell blocks in order in one shell (the embedded
broker started by the first one on 127.0.0.1:9092), its ``job.yaml`` block as the job's file,
and its Python block; then the outputs are checked against the demo traffic's expectation."""

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

import pytest

from debezium_bridge.testing.simulator import demo_expectation
from tests.paths import ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]
README = (ROOT / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", README, flags=re.S | re.M)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


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
