"""The golden demo case through the topic-dump CLI."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from debezium_bridge.cli import main
from debezium_bridge.formats.dumps import write_lossless
from debezium_bridge.testing.simulator import demo
from tests.golden.demo_case import assert_demo_counters, assert_demo_dead_letters, assert_demo_feed


def test_demo_case_through_the_cli(tmp_path: Path) -> None:
    records, expected = demo()
    dump = tmp_path / "traffic.jsonl"
    with dump.open("wb") as handle:
        write_lossless(records, handle)
    out, dlq, counters = tmp_path / "out.jsonl", tmp_path / "dlq.jsonl", tmp_path / "c.json"
    assert main(["convert", str(dump), "-o", str(out), "--dlq", str(dlq),
                 "--counters-json", str(counters)]) == 0
    assert_demo_feed([json.loads(line) for line in out.read_text().splitlines()], expected)
    assert_demo_dead_letters(
        [{k: base64.b64decode(v).decode() for k, v in json.loads(line)["headers"]
          if k.startswith("__connect")} for line in dlq.read_text().splitlines()], expected)
    assert_demo_counters(json.loads(counters.read_text()), expected)
