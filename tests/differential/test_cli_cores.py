"""The CLI end to end on both cores: the same dumps (lossless and ``kcat -J`` lines, with bad
lines mixed in) give byte-identical output, dead-letter files and counters, whether the native
core reads the dump itself or the Python reader and reference core do."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debezium_bridge.cli import main
from debezium_bridge.formats.dumps import write_lossless
from debezium_bridge.model.records import RawRecord
from tests.differential.streams import generate


def _kcat_line(r: RawRecord) -> bytes:
    headers: list[str | None] = []
    for name, value in r.headers:
        headers += [name, None if value is None else value.decode()]
    return json.dumps({"topic": r.topic, "partition": r.partition, "offset": r.offset,
                       "tstype": "create", "ts": r.timestamp, "broker": 1,
                       "headers": headers or None,
                       "key": None if r.key is None else r.key.decode("utf-8", "replace"),
                       "payload": None if r.value is None else r.value.decode("utf-8",
                                                                              "replace")},
                      ensure_ascii=False).encode() + b"\n"


def _write(records: list[RawRecord], path: Path, fmt: str, bad: list[bytes]) -> None:
    with path.open("wb") as out:
        if fmt == "lossless":
            write_lossless(records, out)
        else:
            out.write(b"".join(_kcat_line(r) for r in records))
        for line in bad:
            out.write(line + b"\n")


def _convert(monkeypatch: pytest.MonkeyPatch, tmp: Path, dump: Path, core: str,
             extra: list[str]) -> tuple[bytes, bytes, dict[str, object]]:
    monkeypatch.setenv("DEBEZIUM_BRIDGE_NATIVE", core)
    out, dlq, counters = tmp / f"out-{core}", tmp / f"dlq-{core}", tmp / f"counters-{core}"
    main(["convert", str(dump), "-o", str(out), "--dlq", str(dlq), "--counters-json",
          str(counters), "--progress", "never", *extra])
    return out.read_bytes(), dlq.read_bytes(), json.loads(counters.read_text())


BAD_LINES = [b"{not json", b'{"topic":"x"}', b"   ", b'{"topic":"t","partition":0,"offset":1,'
             b'"key_b64":"%%%","value_b64":null}',
             b'{"topic":"server1.testDB.dbo.t1","partition":0,"offset":9,"key_b64":null,'
             b'"value_b64":"' + base64.b64encode(b'{"op":"c"}') + b'"}']


@pytest.mark.parametrize("fmt", ["lossless", "kcat"])
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**32), n=st.integers(1, 60),
       options=st.sampled_from(([], ["--no-pair-key-changes"], ["--max-pending", "2"],
                                ["--to", "flat"])))
def test_cli_on_both_cores(monkeypatch: pytest.MonkeyPatch,
                           tmp_path_factory: pytest.TempPathFactory, fmt: str, seed: int, n: int,
                           options: list[str]) -> None:
    tmp = tmp_path_factory.mktemp("cli")
    stream = generate(seed, encoding="json-schema" if seed % 2 else "json", n_changes=n)
    dump = tmp / f"dump.{fmt}.jsonl"
    _write(stream.records, dump, fmt, BAD_LINES if seed % 3 == 0 else [])
    python = _convert(monkeypatch, tmp, dump, "0", options)
    native = _convert(monkeypatch, tmp, dump, "1", options)
    assert native[2] == python[2]
    assert _dead(native[1]) == _dead(python[1])
    assert native[0] == python[0]


_HASHES = re.compile(rb"\(image hash [0-9a-f]+, original [0-9a-f]+\)")


def _dead(dlq: bytes) -> list[object]:
    """DLQ lines with the image hashes of replay-mismatch messages left out (each core
    computes its own; see ``test_cores``)."""
    out = []
    for line in dlq.splitlines():
        doc = json.loads(line)
        doc["headers"] = [
            [name, _HASHES.sub(b"(hashes)", base64.b64decode(value)).decode()
             if name == "__connect.errors.exception.message" else value]
            for name, value in doc["headers"]]
        out.append(doc)
    return out
