"""The sidecar's quick start (docs/sidecar.md, and the README section) runs as written: the
embedded broker, sample traffic, the sidecar, then the translated topic and the DLQ."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

pytestmark = [pytest.mark.integration]


def quick_start() -> str:
    text = (ROOT / "docs" / "sidecar.md").read_text()
    section = text.split("## Quick start", 1)[1]
    return re.search(r"```bash\n(.*?)```", section, re.S)[1]


def test_quick_start_runs_as_written(tmp_path: Path) -> None:
    commands = quick_start()
    assert len(commands.strip().splitlines()) <= 10
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    run = subprocess.run(["bash", "-c", commands], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=180, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    changes = [json.loads(line) for line in lines if line.startswith('{"op"')]
    assert [c["op"] for c in changes].count("read") == 3
    assert len(changes) == 9 and sum(c["key_changed"] for c in changes) == 1
    dead = [line for line in lines if line.startswith("debezium-bridge.dlq[")]
    assert len(dead) == 1 and "__connect.errors.stage=" in dead[0]
    assert "stopped" in run.stderr  # the sidecar's clean SIGTERM exit
