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
    _convert_both(monkeypatch, tmp, dump, options)


def _convert_both(monkeypatch: pytest.MonkeyPatch, tmp: Path, dump: Path,
                  extra: list[str]) -> tuple[bytes, bytes, dict[str, object]]:
    """The Python core's ``convert`` of ``dump``, after checking that the native core gives
    the same output, dead letters and counters."""
    python = _convert(monkeypatch, tmp, dump, "0", extra)
    native = _convert(monkeypatch, tmp, dump, "1", extra)
    assert native[2] == python[2]
    assert _dead(native[1]) == _dead(python[1])
    assert native[0] == python[0]
    return python


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


def _variant(line: bytes, **members: object) -> bytes:
    """A dump line with members replaced or added (JSON text given as ``bytes``: as is)."""
    doc = json.loads(line)
    raw = {k: v for k, v in members.items() if isinstance(v, bytes)}
    doc.update({k: v for k, v in members.items() if not isinstance(v, bytes)})
    text = json.dumps(doc, separators=(",", ":")).encode()
    for name, value in raw.items():
        text = text[:-1] + b',"' + name.encode() + b'":' + value + b"}"
    return text


# Lines a reader must take apart from the rest: Kafka partitions are int32 and offsets int64
# (the protocol's types); a lone surrogate escape has no UTF-8 form and msgspec refuses it,
# nesting deeper than it reads too (each a dead letter of the line, stage "read"); an unknown
# member the reader ignores otherwise; line terminators are not part of a line.
ODD_LINES = {
    "partition beyond int32": ({"partition": 2**31}, 1),
    "partition below int32": ({"partition": -(2**31) - 1}, 1),
    "offset beyond int64": ({"offset": 2**63}, 1),
    "lone surrogate in an unknown member": ({"x": b'"\\ud800"'}, 1),
    "surrogate pair in an unknown member": ({"x": b'"\\ud83d\\ude00"'}, 0),
    "unknown member nested 100 deep": ({"x": b"[" * 100 + b"]" * 100}, 0),
    "unknown member nested 5000 deep": ({"x": b"[" * 5000 + b"]" * 5000}, 1),
}


@pytest.mark.parametrize("fmt", ["lossless", "kcat"])
@pytest.mark.parametrize("case", sorted(ODD_LINES))
def test_odd_dump_lines_on_both_cores(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                      fmt: str, case: str) -> None:
    stream = generate(7, encoding="json", n_changes=4)
    good = tmp_path / "good.jsonl"
    _write(stream.records, good, fmt, [])
    lines = good.read_bytes().splitlines()
    members, dead = ODD_LINES[case]
    odd = _variant(lines[0], **members)
    # the odd line, then the same record again as a replay (or a mismatch, if read)
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(b"\n".join([odd, *lines]) + b"\n")
    python = _convert_both(monkeypatch, tmp_path, dump, [])
    stages = [dict((n, base64.b64decode(v)) for n, v in json.loads(d)["headers"])
              .get("__connect.errors.stage") for d in python[1].splitlines()]
    assert stages.count(b"read") == dead


@pytest.mark.parametrize("fmt", ["lossless", "kcat"])
@pytest.mark.parametrize("ending", [b"\r\r\n", b"\r\n", b"\n"])
def test_a_bad_line_is_the_same_dead_letter_whatever_its_ending(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fmt: str, ending: bytes) -> None:
    stream = generate(7, encoding="json", n_changes=2)
    good = tmp_path / "good.jsonl"
    _write(stream.records, good, fmt, [])
    dump = tmp_path / "dump.jsonl"
    dump.write_bytes(good.read_bytes() + b'{"topic":"t","partition":' + ending)
    python = _convert_both(monkeypatch, tmp_path, dump, [])
    (letter,) = [d for d in map(json.loads, python[1].splitlines())
                 if ["__connect.errors.stage", base64.b64encode(b"read").decode()]
                 in d["headers"]]
    assert base64.b64decode(letter["value_b64"]) == b'{"topic":"t","partition":'
