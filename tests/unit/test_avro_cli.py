"""``debezium-bridge convert`` on Confluent Avro traffic, against a local schema registry.

The registry is :class:`tests.support.registry.SchemaRegistryServer` (standard library HTTP on
127.0.0.1), so this is a unit-tier test. The Avro demo traffic is produced with the server's
``register`` as the samples' registrar, so its records carry ids the server knows. Expected values
come from :class:`~debezium_bridge.testing.simulator.DemoExpectation` (derived from the simulation
inputs) and from converting the json-schema encoding of the same demo, never from hard-coded
output.

The two encodings partition differently (Kafka's partitioner hashes the key *bytes*, which differ
between Avro and JSON), so the demo picks a different new id for its primary-key change and the
records sit at different partitions/offsets. Both demos produce their records in the same order,
so lineage is compared by the index of the record it names, and the new id of the key change is
taken from each run's own expectation.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

from debezium_bridge.cli import EXIT_SERVICE, main
from debezium_bridge.formats.dumps import write_lossless
from debezium_bridge.model.records import RawRecord
from debezium_bridge.testing.simulator import _DEMO_ROWS, DemoExpectation, demo
from tests.support.registry import (
    SchemaRegistryServer,
    schema_registry_fixture,  # noqa: F401  (fixture ``schema_registry``)
    schema_registry_server_fixture,  # noqa: F401  (fixture ``schema_registry_server``)
)

USER, PASSWORD = "user", "pass"
AUTH = ["-X", f"basic.auth.user.info={USER}:{PASSWORD}"]
DEMO_ROWS = {row["id"]: row for row in _DEMO_ROWS}
"""The demo's source rows (the simulation inputs): the logical values every encoding must
decode to."""


class Demo:
    """One encoding of the demo: its records, expectation, dump file and converted output."""

    def __init__(self, records: list[RawRecord], expected: DemoExpectation, dump: Path) -> None:
        self.records = records
        self.expected = expected
        self.dump = dump
        with dump.open("wb") as out:
            write_lossless(records, out)
        self.index = {(r.topic, r.partition, r.offset): i for i, r in enumerate(records)}

    @property
    def new_key(self) -> dict[str, Any]:
        (change,) = [c for c in self.expected.changes if c.old_key is not None]
        return dict(change.key)


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistryServer]:
    with SchemaRegistryServer(credentials=(USER, PASSWORD)) as server:
        yield server


@pytest.fixture(scope="module")
def avro(registry: SchemaRegistryServer, tmp_path_factory: pytest.TempPathFactory) -> Demo:
    records, expected = demo("avro", registrar=registry.register)
    return Demo(records, expected, tmp_path_factory.mktemp("avro") / "avro.jsonl")


@pytest.fixture(scope="module")
def json_demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    records, expected = demo("json-schema")
    return Demo(records, expected, tmp_path_factory.mktemp("json") / "json.jsonl")


class Run:
    """The files of one ``convert`` run."""

    def __init__(self, tmp: Path, code: int) -> None:
        self.code = code
        self.out = read_lines(tmp / "out.jsonl")
        self.dead = read_lines(tmp / "dlq.jsonl")
        self.counters = json.loads((tmp / "counters.json").read_text())


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def convert(tmp: Path, dump: Path, *options: str) -> Run:
    tmp.mkdir(parents=True, exist_ok=True)
    code = main(["convert", str(dump), *options, "-o", str(tmp / "out.jsonl"),
                 "--dlq", str(tmp / "dlq.jsonl"), "--counters-json", str(tmp / "counters.json"),
                 "--progress", "never"])
    return Run(tmp, code)


@pytest.fixture(scope="module")
def json_run(json_demo: Demo, tmp_path_factory: pytest.TempPathFactory) -> Run:
    return convert(tmp_path_factory.mktemp("json-run"), json_demo.dump)


@pytest.fixture(scope="module")
def registry_run(avro: Demo, registry: SchemaRegistryServer,
                 tmp_path_factory: pytest.TempPathFactory) -> Run:
    return convert(tmp_path_factory.mktemp("registry-run"), avro.dump,
                   "--schema-registry", registry.url, *AUTH)


def headers(letter: dict[str, Any]) -> dict[str, str]:
    return {name: base64.b64decode(value).decode() for name, value in letter["headers"]
            if value is not None}


def letters_by_stage(run: Run) -> dict[str, list[dict[str, str]]]:
    stages: dict[str, list[dict[str, str]]] = {}
    for letter in run.dead:
        h = headers(letter)
        stages.setdefault(h["__connect.errors.stage"], []).append(h)
    return stages


def aligned(lines: Sequence[dict[str, Any]], run_demo: Demo) -> list[dict[str, Any]]:
    """Output lines with lineage as record indexes and the key change's new id abstracted."""
    out = []
    new_key = run_demo.new_key
    for line in lines:
        line = json.loads(json.dumps(line))
        line["lineage"] = [run_demo.index[(x["topic"], x["partition"], x["offset"])]
                           for x in line["lineage"]]
        if line["key_changed"]:
            assert line["key"] == new_key and line["after"]["id"] == new_key["id"]
            line["key"] = line["after"]["id"] = "<new key>"
            line["event_id"] = "<depends on the new key>"
        out.append(line)
    return out


def assert_matches_expectation(run: Run, expected: DemoExpectation) -> None:
    assert run.code == 0
    got = [(r["op"], r["table_id"], r["key"], r["old_key"], r["key_changed"],
            r["position"]["commit_lsn"], r["position"]["change_lsn"],
            tuple(r["unavailable_columns"])) for r in run.out]
    want = [(c.op, c.table, dict(c.key), dict(c.old_key) if c.old_key is not None else None,
             c.old_key is not None, c.commit_lsn, c.change_lsn, tuple(c.unavailable_columns))
            for c in expected.changes]
    assert got == want
    for line, change in zip(run.out, expected.changes, strict=True):
        assert line["position"]["event_serial_no"] in change.event_serial_nos
    c = run.counters
    assert c["balanced"] is True
    assert (c["records_in"], c["changes_out"], c["merged"], c["duplicates"], c["tombstones"],
            c["dead_letters"], c["side_records"]) == (
        expected.records, len(expected.changes), 1, expected.duplicates, expected.tombstones,
        expected.corrupt, expected.side_records)
    assert len(run.dead) == expected.corrupt
    assert set(letters_by_stage(run)) == {"decode"}


def assert_logical_values(run: Run, new_key: dict[str, Any]) -> None:
    """Snapshot rows and inserts carry exactly the demo's source values (decimal strings with
    their scale, datetime2(7) with 7 fraction digits, nulls)."""
    images = {(r["op"], r["key"]["id"]): r["after"] for r in run.out if r["op"] != "delete"}
    for row_id in (1, 2, 3):
        assert images[("read", row_id)] == DEMO_ROWS[row_id]
    for row_id in (4, 5):
        assert images[("insert", row_id)] == DEMO_ROWS[row_id]
    assert images[("update", new_key["id"])] == DEMO_ROWS[4] | new_key
    assert images[("update", 2)]["balance"] == "300.00"
    assert images[("read", 2)]["balance"] == "250.50"
    assert images[("insert", 4)]["created"] == "2024-05-06T07:08:09.0000001"


# --------------------------------------------------------------------------- the stand-in


def test_registry_stand_in_speaks_the_client_protocol(schema_registry_server: SchemaRegistryServer,
                                                      schema_registry: str):
    assert schema_registry == schema_registry_server.url
    client = SchemaRegistryClient({"url": schema_registry})
    first = {"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]}
    second = {"type": "record", "name": "B", "fields": []}
    schema_id = schema_registry_server.register("t-value", first)
    assert client.register_schema("t-value", Schema(json.dumps(first), "AVRO")) == schema_id
    other = client.register_schema("t-value", Schema(json.dumps(second), "AVRO"))
    assert other != schema_id
    assert json.loads(client.get_schema(schema_id).schema_str) == first
    assert client.get_latest_version("t-value").schema_id == other
    assert client.get_version("t-value", 1).schema_id == schema_id
    assert client.lookup_schema("t-value", Schema(json.dumps(second), "AVRO")).version == 2
    assert client.get_subjects() == ["t-value"]
    assert client.get_compatibility() == "BACKWARD"
    client.set_compatibility(level="FULL")
    assert client.get_compatibility() == "FULL"
    with pytest.raises(SchemaRegistryError) as unknown:
        client.get_schema(999)
    assert (unknown.value.http_status_code, unknown.value.error_code) == (404, 40403)
    with pytest.raises(SchemaRegistryError) as no_subject:
        client.get_latest_version("nope")
    assert no_subject.value.error_code == 40401


def test_registry_stand_in_basic_auth():
    with SchemaRegistryServer(credentials=(USER, PASSWORD)) as registry:
        check_basic_auth(registry)


def check_basic_auth(registry: SchemaRegistryServer) -> None:
    schema_id = registry.register("auth-check", {"type": "string"})
    good = SchemaRegistryClient({"url": registry.url, "basic.auth.user.info": f"{USER}:{PASSWORD}"})
    assert json.loads(good.get_schema(schema_id).schema_str) == {"type": "string"}
    for conf in ({"url": registry.url},
                 {"url": registry.url, "basic.auth.user.info": f"{USER}:wrong"}):
        with pytest.raises(SchemaRegistryError) as denied:
            SchemaRegistryClient(conf).get_schema(schema_id)
        assert denied.value.http_status_code == 401


# --------------------------------------------------------------------------- convert


def test_the_two_demos_differ_only_by_partitioning(avro: Demo, json_demo: Demo):
    a, j = avro.expected, json_demo.expected
    assert (a.records, a.data_records, a.duplicates, a.tombstones, a.corrupt, a.side_records) == (
        j.records, j.data_records, j.duplicates, j.tombstones, j.corrupt, j.side_records)
    assert [c for c in a.changes if c.old_key is None] == [
        c for c in j.changes if c.old_key is None]
    assert [r.topic for r in avro.records] == [r.topic for r in json_demo.records]
    assert all(r.value is None or r.value[:1] == b"\x00" for r in avro.records)


def test_json_schema_reference_run(json_run: Run, json_demo: Demo):
    assert_matches_expectation(json_run, json_demo.expected)
    assert_logical_values(json_run, json_demo.new_key)


def test_convert_with_schema_registry_and_basic_auth(registry_run: Run, avro: Demo,
                                                     json_run: Run, json_demo: Demo):
    assert_matches_expectation(registry_run, avro.expected)
    assert_logical_values(registry_run, avro.new_key)
    assert aligned(registry_run.out, avro) == aligned(json_run.out, json_demo)


@pytest.mark.parametrize("shape", ["object", "json-text", "registry-body"])
def test_convert_with_avro_schemas_file(shape: str, avro: Demo, registry: SchemaRegistryServer,
                                        registry_run: Run, tmp_path: Path):
    assert registry.schemas, "the demo registered its schemas with the server"

    def as_shape(text: str) -> Any:
        if shape == "object":
            return json.loads(text)
        if shape == "json-text":
            return text
        return {"schema": text}

    schemas = tmp_path / "schemas.json"
    schemas.write_text(json.dumps({str(i): as_shape(t) for i, t in registry.schemas.items()}))
    run = convert(tmp_path / "run", avro.dump, "--avro-schemas", str(schemas))
    assert_matches_expectation(run, avro.expected)
    assert run.out == registry_run.out


def test_samples_command_avro_schemas_out_round_trip(tmp_path: Path, json_run: Run,
                                                     json_demo: Demo):
    dump, schemas = tmp_path / "dump.jsonl", tmp_path / "schemas.json"
    assert main(["samples", "--encoding", "avro", "-o", str(dump),
                 "--avro-schemas-out", str(schemas)]) == 0
    records, expected = demo("avro")  # what the command writes: a fresh in-memory registry
    fresh = Demo(records, expected, tmp_path / "fresh.jsonl")
    assert dump.read_bytes() == fresh.dump.read_bytes()
    run = convert(tmp_path / "run", dump, "--avro-schemas", str(schemas))
    assert_matches_expectation(run, expected)
    assert aligned(run.out, fresh) == aligned(json_run.out, json_demo)


@pytest.mark.parametrize("settings", [[*AUTH[:1], f"basic.auth.user.info={USER}:wrong"], []],
                         ids=["wrong-credentials", "no-credentials"])
def test_registry_refusing_access_stops_the_run(settings: list[str], avro: Demo,
                                                registry: SchemaRegistryServer, tmp_path: Path):
    """A registry that refuses access (HTTP 401) says nothing about the records: the run stops
    with the service exit code and dead-letters none of them."""
    run = convert(tmp_path / "run", avro.dump, "--schema-registry", registry.url, *settings)
    assert run.code == EXIT_SERVICE
    assert run.dead == []
    assert run.counters["dead_letters"] == 0


def _with_unknown_value_id(records: list[RawRecord], unknown: int) -> tuple[list[RawRecord], int]:
    """The records with the first insert's value pointing at schema id ``unknown``."""
    for i, r in enumerate(records):
        if r.value and r.key and b"Barbara Liskov" in r.value:  # insert of id 5, never replayed
            patched = RawRecord(r.topic, r.partition, r.offset, r.timestamp, r.key,
                                r.value[:1] + unknown.to_bytes(4, "big") + r.value[5:], r.headers)
            return [*records[:i], patched, *records[i + 1:]], i
    raise AssertionError("the demo has no insert of customer 5")


@pytest.mark.parametrize("source", ["registry", "file"])
def test_unknown_schema_id_dead_letters_naming_the_id(source: str, avro: Demo,
                                                      registry: SchemaRegistryServer,
                                                      registry_run: Run, tmp_path: Path):
    unknown = 4242
    assert unknown not in registry.schemas
    records, index = _with_unknown_value_id(avro.records, unknown)
    dump = tmp_path / "dump.jsonl"
    with dump.open("wb") as out:
        write_lossless(records, out)
    if source == "registry":
        options = ["--schema-registry", registry.url, *AUTH]
    else:
        schemas = tmp_path / "schemas.json"
        schemas.write_text(json.dumps({str(i): t for i, t in registry.schemas.items()}))
        options = ["--avro-schemas", str(schemas)]
    run = convert(tmp_path / "run", dump, *options)
    assert run.code == 0
    stages = letters_by_stage(run)
    assert len(stages.get("decode", [])) == avro.expected.corrupt
    (letter,) = stages["schema"]
    assert str(unknown) in letter["__connect.errors.exception.message"]
    patched = records[index]
    assert (letter["__connect.errors.topic"], letter["__connect.errors.partition"],
            letter["__connect.errors.offset"]) == (patched.topic, str(patched.partition),
                                                   str(patched.offset))
    dropped = {"topic": patched.topic, "partition": patched.partition, "offset": patched.offset}
    assert run.out == [r for r in registry_run.out if dropped not in r["lineage"]]
    assert run.counters["balanced"] is True
    assert convert(tmp_path / "strict", dump, *options, "--fail-on-error").code == 1


@pytest.mark.parametrize("setting", ["basic.auth.user.info=no-colon", "no.such.setting=1"])
def test_invalid_registry_setting_is_a_configuration_error(setting: str, avro: Demo,
                                                           registry: SchemaRegistryServer,
                                                           tmp_path: Path, capsys):
    code = main(["convert", str(avro.dump), "--schema-registry", registry.url, "-X", setting,
                 "-o", str(tmp_path / "out.jsonl")])
    assert code == 2
    assert "configuration error" in capsys.readouterr().err
