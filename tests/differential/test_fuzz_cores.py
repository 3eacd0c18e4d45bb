"""Differential fuzzing: the bad-input fuzzers' records (:mod:`tests.unit.test_fuzz_decoders`:
connector-shaped records with fields of other JSON types or removed, truncated, bit-flipped,
Confluent Avro with random writer schemas, encodings mixed in one stream) give the same
canonical lines, dead letters (stage, class, message) and counters on both cores, and the
native core never panics on them (a panic declines the record, so the outputs would still
agree: Rust prints the panic on standard error, which is checked here). No dead-letter message
holds a Python object's address.

Found this way: a schema-ful key whose payload is a JSON string with escapes made the native
decoder slice the input at an address sonic-rs's own copy of the string had (a panic), and a
fastavro error message carried a Python object's address, so the same record got another
message on each decoder.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.unit.test_fuzz_decoders as fuzz
from debezium_bridge.core import native as native_core
from debezium_bridge.model.records import RawRecord
from tests.differential.streams import Stream
from tests.differential.test_cores import _run

EXAMPLES = max(20, fuzz.EXAMPLES // 2)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(autouse=True)
def _no_forced_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)


def compare(records: list[RawRecord], capfd: pytest.CaptureFixture[str],
            extra_schemas: dict[int, Any] | None = None) -> None:
    schemas = {fuzz.AVRO_ID: fuzz.AVRO_ENVELOPE, fuzz.AVRO_KEY_ID: fuzz.AVRO_KEY,
               **(extra_schemas or {})}
    stream = Stream(records, [], schemas, "bytes")
    capfd.readouterr()
    python = _run(stream, "off", {}, len(records), expect=False)
    native = _run(stream, "on", {}, len(records), expect=False)
    assert "panicked" not in capfd.readouterr().err, records
    # a message names the record's fault, never a Python object's address (another per run)
    assert not any(" at 0x" in letter[-1] for letter in python[1]), python[1]
    assert native[2] == python[2], "counters differ"
    assert native[1] == python[1], "dead letters differ"
    assert native[0] == python[0], "canonical lines differ"


@FUZZ
@given(value=fuzz.schemaless_values.flatmap(fuzz.damaged), key=fuzz.keys, hdrs=fuzz.headers)
def test_schemaless_json(value: bytes, key: bytes | None, hdrs: tuple[Any, ...],
                         capfd: pytest.CaptureFixture[str]) -> None:
    compare([fuzz.one(value, key, hdrs)], capfd)


@FUZZ
@given(value=fuzz.schemaful_values.flatmap(fuzz.damaged), key=fuzz.keys, hdrs=fuzz.headers)
def test_json_with_schema(value: bytes, key: bytes | None, hdrs: tuple[Any, ...],
                          capfd: pytest.CaptureFixture[str]) -> None:
    compare([fuzz.one(value, key, hdrs)], capfd)


@FUZZ
@given(case=fuzz.avro_records(), key=fuzz.keys, hdrs=fuzz.headers)
def test_confluent_avro_with_random_writer_schemas(
        case: tuple[bytes, dict[str, Any]], key: bytes | None, hdrs: tuple[Any, ...],
        capfd: pytest.CaptureFixture[str]) -> None:
    value, schema = case
    compare([fuzz.one(value, key, hdrs)], capfd, {fuzz.AVRO_ID + 100: schema})


@FUZZ
@given(stream=st.lists(st.tuples(fuzz.any_value, fuzz.keys, st.integers(0, 2)), min_size=1,
                       max_size=6))
def test_mixed_streams(stream: list[tuple[bytes | None, bytes | None, int]],
                       capfd: pytest.CaptureFixture[str]) -> None:
    compare([fuzz.one(value, key, offset=n, partition=p)
             for n, (value, key, p) in enumerate(stream)], capfd)


def test_a_schemaful_key_with_an_escaped_string_payload(
        capfd: pytest.CaptureFixture[str]) -> None:
    """The record the fuzzing found: a dead letter on both cores (the payload of a key must be
    a JSON object), no panic."""
    key = (b'{"schema":{"type":"struct","optional":false,"fields":[{"type":"int32",'
           b'"optional":false,"field":"id"}]},"payload":"{\\"id\\": 1}"}')
    value = fuzz.schemaless(fuzz.ENVELOPES[0])
    compare([fuzz.one(value, key)], capfd)


def test_an_avro_record_that_ends_early(capfd: pytest.CaptureFixture[str]) -> None:
    """The other: a Confluent Avro value cut short (fastavro's error names the stream it
    reads from, ``<_io.BytesIO object at 0x…>``)."""
    schema = {"type": "record", "name": "r", "fields": [{"name": "f", "type": "float"}]}
    compare([fuzz.one(b"\x00\x00\x00\x00e\x01", b'{"id":1}')], capfd, {101: schema})
