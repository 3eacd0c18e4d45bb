"""The documented change-table examples run as written (docs/cdc.md; the README's section reads
the sample export in docs/examples/cdc and runs in tests/integration/test_readme.py). The
``sqlcmd`` lines are replaced by the files they write (made from the CDC model); every
``debezium-bridge`` line runs as is. The Spark example runs in
tests/integration/test_spark_cdc.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.cli import main
from debezium_bridge.formats.dumps import read_dump
from debezium_bridge.model.records import RawRecord
from tests.paths import ROOT
from tests.unit.cdc_examples_support import (
    commands,
    examples,
    model,
    write_sqlcmd_exports,
)


def _run(line: str) -> None:
    argv = shlex.split(line, comments=True)
    assert argv[0] == "debezium-bridge"
    assert main(argv[1:]) == 0, line


def _lines(path: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


@pytest.fixture
def exported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    write_sqlcmd_exports(tmp_path, model())
    assert main(["samples", "-o", "customers-dump.jsonl"]) == 0
    return tmp_path


def test_the_documents_have_the_three_examples() -> None:
    blocks = examples()
    assert set(blocks) == {"cli", "spark", "net"}
    for name, block in blocks.items():
        assert len(block.strip().splitlines()) <= 12, name


def test_the_sample_export_is_what_the_model_writes(tmp_path: Path) -> None:
    """docs/examples/cdc (read by the README's examples) holds the model's sqlcmd export."""
    write_sqlcmd_exports(tmp_path, model())
    sample = ROOT / "docs" / "examples" / "cdc"
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(p.name for p in sample.glob("*.csv"))
    for name in written:
        assert (sample / name).read_text() == (tmp_path / name).read_text(), name


def test_cli_example(exported: Path) -> None:
    for line in commands(examples()["cli"]):
        _run(line)
    changes = _lines("changes.jsonl")
    assert [(c["op"], c["key"]["id"]) for c in changes] == [
        ("insert", 1), ("insert", 2), ("update", 1), ("update", 7), ("delete", 1)]
    assert not Path("rejected.jsonl").read_text()
    flat = _lines("apply.jsonl")
    assert [(r["__op"], r["id"]) for r in flat] == [
        ("insert", 1), ("insert", 2), ("update", 1), ("delete", 2), ("update", 7),
        ("delete", 1)]
    with read_dump("dbz.jsonl") as reader:
        topics = {r.topic for r in reader if isinstance(r, RawRecord)}
    assert topics == {"shop.testDB.dbo.orders"}
    again = _lines("same-changes.jsonl")
    assert {r["source"]["name"] for r in again} == {"shop"}  # --cdc.topic-prefix
    for record in (*changes, *again):
        del record["lineage"]
        record["source"]["name"] = None
    assert again == changes


def test_net_example(exported: Path) -> None:
    for line in commands(examples()["net"]):
        _run(line)
    rows = _lines("net.jsonl")
    assert rows and all({"__$start_lsn", "__$operation", "__$update_mask"} <= set(r)
                        for r in rows)
    first, second = _lines("window-1.jsonl"), _lines("window-2.jsonl")
    state = json.loads(Path("orders-window.json").read_text())
    assert len(state["windows"]) == 2
    assert state["windows"][1]["from_lsn"] == "00000025:00000d08:0013"
    seen = {(r["__seq"], r["id"]) for r in (*first, *second)}
    assert len(seen) == len(first) + len(second)  # no change in both windows
    assert _lines("upserts.jsonl")
