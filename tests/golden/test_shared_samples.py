"""Golden tests on the public samples in ``tests/data`` (each directory has a PROVENANCE.md).

Expected values come from the PROVENANCE files, the Debezium SQL Server connector documentation
(https://debezium.io/documentation/reference/stable/connectors/sqlserver.html, summarized in the
reference ``debezium-sqlserver.md``) and SPEC §3.1/§4/§5.1/§5.4, never from the translator's own
output.

Samples, whether each is a valid Debezium value as printed, and what the tests assert
("DL" = exactly one dead letter, never an exception; "repaired" = minimal edits, each explained
in a comment next to the code that makes it):

+--------------------------------+----------------------+------------------------------------------+
| sample                         | valid as printed?    | asserted                                 |
+================================+======================+==========================================+
| redis: real Debezium 1.6       | yes                  | one `delete`: key {"empno": 11}, sal     |
| delete, key + value            |                      | "200000.0000", comm "10.0000", hiredate  |
|                                |                      | "2019-07-09T00:00:00.000", LSNs,         |
|                                |                      | commit_ts from source.ts_ms; compact     |
|                                |                      | JSON: identical; schema-less: identical  |
|                                |                      | except raw sal/comm/hiredate             |
|                                |                      | ("dzWUAA==", "AYag", 1562630400000);     |
|                                |                      | schema-less + table schema: decoded      |
+--------------------------------+----------------------+------------------------------------------+
| docs v1.9, v2.7:               | no: `// <n>`         | as printed (as the Kafka key): DL stage  |
| change_event_key               | callouts             | `decode-key`; repaired (callouts         |
|                                |                      | stripped): {"id": 1004}                  |
+--------------------------------+----------------------+------------------------------------------+
| docs v3dev: change_event_key   | yes                  | decodes to {"id": 1004}                  |
+--------------------------------+----------------------+------------------------------------------+
| docs v1.9, v2.7:               | no: callouts         | as printed: DL `decode`; repaired: one   |
| create_event_value_with_schema |                      | `insert`, serial "1" → 1, snapshot false |
|                                |                      | → "false"                                |
+--------------------------------+----------------------+------------------------------------------+
| docs v3dev:                    | JSON syntax yes, but | as printed: translates (last `ts_ms`     |
| create_event_value_with_schema | `ts_ms` 3 times,     | wins, a ns value, so capture_ts null);   |
|                                | boolean snapshot,    | repaired (ts_us/ts_ns, version): as      |
|                                | string serial,       | v1.9/v2.7                                |
|                                | `{debezium-version}` |                                          |
+--------------------------------+----------------------+------------------------------------------+
| docs (all): update_event_value | no: `"schema": { ... | DL `decode`; repaired (elided schema =   |
|                                | }`, callouts         | the create sample's): one `update`,      |
|                                |                      | serial "2" → 2, changed ["email"]        |
+--------------------------------+----------------------+------------------------------------------+
| docs (all): delete_event_value | no: `{ ... }`, stray | DL `decode`; repaired: one `delete`,     |
|                                | `},` (v1.9), bare    | after null                               |
|                                | `<2>` callouts       |                                          |
+--------------------------------+----------------------+------------------------------------------+
| docs (all):                    | no: `...` as the     | DL `decode`; repaired (schema dropped):  |
| schema_change_message          | schema, callouts     | one side record, no output               |
+--------------------------------+----------------------+------------------------------------------+
| docs (all):                    | no: two JSON         | DL `decode` (trailing data); repaired    |
| transaction_boundary_begin_end | documents in one     | (split in two): two side records, no     |
|                                | block                | output                                   |
+--------------------------------+----------------------+------------------------------------------+
| docs (all):                    | no: `...` as the     | DL `decode`; repaired (source filled     |
| transaction_enriched_event     | source block;        | in): one `insert` with tx {id, 1, 1},    |
|                                | numbers as strings   | with BEGIN/END as side records           |
+--------------------------------+----------------------+------------------------------------------+
| materialize:                   | not messages (SQL    | schema-ful JSON and Confluent Avro       |
| 20-populate-types,             | and expected rows)   | events built from them decode to         |
| 40-check-types                 |                      | "123.45", the datetimeoffset with its    |
|                                |                      | offset, "2010-11-12T13:14:15.1234567",   |
|                                |                      | "1900-01-01T11:12:00.000", true          |
+--------------------------------+----------------------+------------------------------------------+
| materialize: 40-check-update   | not messages         | d(key2, serial 1) + tombstone +          |
|                                |                      | c(key_new, serial 2) in two partitions,  |
|                                |                      | either order: ONE update, key_changed,   |
|                                |                      | old_key {"key_col": "key2"}; applying    |
|                                |                      | the feed ends with key1 value_new /      |
|                                |                      | key_new value2                           |
+--------------------------------+----------------------+------------------------------------------+
| risingwave: Avro-JSON dumps    | yes, but Postgres    | DL `envelope` "no commit_lsn" for each   |
| (compact and not)              |                      | event, tombstone line counted;           |
|                                |                      | `unwrap_avro_json` unwraps union         |
|                                |                      | branches; with a SQL Server source the   |
|                                |                      | update translates                        |
+--------------------------------+----------------------+------------------------------------------+
| risingwave:                    | yes (MySQL source)   | `envelope_row_schema` columns; Confluent |
| debezium_avro_msg_schema.avsc  |                      | Avro datum with the MySQL source: DL;    |
|                                |                      | with the SQL Server Source record: one   |
|                                |                      | insert via `FileSchemaResolver`          |
+--------------------------------+----------------------+------------------------------------------+
| flink: debezium-json streams   | yes, but Postgres    | every event DL `envelope` (no            |
| (both)                         |                      | commit_lsn; the keyless `d` with both    |
|                                |                      | images null: "no before or key"); as SQL |
|                                |                      | Server: `u` with before null → update;   |
|                                |                      | keyless `d` without images → DL; keyed → |
|                                |                      | delete                                   |
+--------------------------------+----------------------+------------------------------------------+
| cloudevents: JSON data         | yes, but Postgres    | DL "no commit_lsn"; with SQL Server      |
|                                |                      | attributes, plain and {schema,payload}   |
|                                |                      | `data`: one `read`                       |
+--------------------------------+----------------------+------------------------------------------+
| cloudevents: Avro data         | yes, but Postgres,   | DL that names the Avro data              |
|                                | `data` base64 Avro   |                                          |
+--------------------------------+----------------------+------------------------------------------+
"""

from __future__ import annotations

import base64
import copy
import decimal
import io
import json
import re
import struct
from typing import Any

import fastavro
import pytest

from debezium_bridge.core.translator import Translator
from debezium_bridge.formats.canonical import flat_rows, to_dict
from debezium_bridge.formats.debezium.avro import AvroDecoder, envelope_row_schema, unwrap_avro_json
from debezium_bridge.formats.debezium.decode import DecodeOptions, Decoder
from debezium_bridge.formats.debezium.registry import FileSchemaResolver
from debezium_bridge.model.change import ChangeEvent, ChangeRecord, SideKind, SideRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.records import RawRecord
from debezium_bridge.model.schema import table_from_connect
from tests.paths import DATA

REDIS = DATA / "debezium-server-redis-sqlserver"
DOCS = DATA / "debezium-docs-sqlserver"
MZ = DATA / "materialize-sqlserver-testdrive"
RW = DATA / "risingwave-debezium"
FLINK = DATA / "flink-debezium-json"
CE = DATA / "debezium-docs-cloudevents"


# --- helpers ---------------------------------------------------------------------------------


def run(records: list[RawRecord], translator: Translator | None = None
        ) -> tuple[list[ChangeRecord], list[DeadLetter], Translator]:
    """Process, flush and drain; every run must keep the counters balanced."""
    t = translator or Translator()
    for r in records:
        t.process(r)
    t.flush()
    changes, dead = t.drain()
    assert t.counters.balanced, t.counters.summary()
    assert t.counters.pending == 0
    return changes, dead, t


def one_change(records: list[RawRecord], translator: Translator | None = None
               ) -> dict[str, Any]:
    changes, dead, _ = run(records, translator)
    assert dead == [], [d.describe() for d in dead]
    assert len(changes) == 1
    return to_dict(changes[0])


def one_dead_letter(records: list[RawRecord], translator: Translator | None = None
                    ) -> DeadLetter:
    changes, dead, t = run(records, translator)
    assert changes == []
    assert len(dead) == 1
    assert t.counters.dead_letters == 1
    return dead[0]


def compact(data: bytes) -> bytes:
    return json.dumps(json.loads(data), separators=(",", ":")).encode()


def strip_callouts(text: str) -> str:
    """Remove AsciiDoc callouts: ``// <1>`` and bare ``<2>`` / ``<>`` after a value."""
    return re.sub(r"[ \t]*(//[ \t]*)?<\d*>", "", text)


SQLSERVER_SOURCE_AVRO: dict[str, Any] = {
    # io.debezium.connector.sqlserver.Source as Confluent's AvroConverter writes it (reference §1.2)
    "type": "record",
    "name": "Source",
    "namespace": "io.debezium.connector.sqlserver",
    "fields": [
        {"name": "version", "type": "string"},
        {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"},
        {"name": "ts_ms", "type": "long"},
        {"name": "snapshot", "type": [
            {"type": "string", "connect.version": 1,
             "connect.parameters": {"allowed": "true,last,false,incremental"},
             "connect.default": "false", "connect.name": "io.debezium.data.Enum"}, "null"],
         "default": "false"},
        {"name": "db", "type": "string"},
        {"name": "sequence", "type": ["null", "string"], "default": None},
        {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "change_lsn", "type": ["null", "string"], "default": None},
        {"name": "commit_lsn", "type": ["null", "string"], "default": None},
        {"name": "event_serial_no", "type": ["null", "long"], "default": None},
    ],
    "connect.name": "io.debezium.connector.sqlserver.Source",
}


def confluent(schema_id: int, schema: dict[str, Any], datum: Any) -> bytes:
    """Confluent wire format: magic byte 0, big-endian schema id, Avro binary body."""
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(copy.deepcopy(schema)), datum)
    return b"\x00" + struct.pack(">I", schema_id) + body.getvalue()


# === 1. Real Debezium 1.6 SQL Server delete (Debezium Server / Redis docs) ===================

REDIS_TOPIC = "redislabs.dbo.emp"  # 1.x naming: <server>.<schema>.<table>, no database part


def redis_record(key: bytes | None, value: bytes | None, offset: int = 0) -> RawRecord:
    return RawRecord(topic=REDIS_TOPIC, partition=0, offset=offset, timestamp=1639304527499,
                     key=key, value=value)


REDIS_KEY = (REDIS / "delete_event_key.decoded.json").read_bytes()
REDIS_VALUE = (REDIS / "delete_event_value.decoded.json").read_bytes()

# Facts from PROVENANCE.md / the reference; only row values differ between schema-ful and
# schema-less forms.
REDIS_EXPECTED_BEFORE = {
    "empno": 11, "fname": "Yossi", "lname": "Mague", "job": "PFE", "mgr": 1,
    "hiredate": "2019-07-09T00:00:00.000",  # io.debezium.time.Timestamp 1562630400000 ms
    "sal": "200000.0000",  # Decimal scale 4, "dzWUAA==" = 2000000000 unscaled
    "comm": "10.0000",  # "AYag" = 100000 unscaled
    "dept": 3,
}


def assert_redis_delete(rec: dict[str, Any], before: dict[str, Any]) -> None:
    assert rec["op"] == "delete"
    assert rec["table"] == {"db": "RedisConnect", "schema": "dbo", "name": "emp"}
    assert rec["table_id"] == "RedisConnect.dbo.emp"
    assert rec["key"] == {"empno": 11}
    assert rec["old_key"] is None and rec["key_changed"] is False
    assert rec["before"] == before
    assert rec["after"] is None
    assert rec["changed_columns"] == list(REDIS_EXPECTED_BEFORE)  # delete: all, schema order
    assert rec["unavailable_columns"] == []
    assert rec["position"] == {"commit_lsn": "0000003a:00002f50:0005",
                               "change_lsn": "0000003a:00002f50:0002", "event_serial_no": 1}
    # seq: fixed width, sorts like (commit_lsn, change_lsn, event_serial_no)
    assert rec["seq"].startswith("0000003a00002f500005")
    assert "0000003a00002f500002" in rec["seq"]
    assert rec["commit_ts"] == "2021-11-25T17:02:44.960Z"  # source.ts_ms 1637859764960
    assert rec["capture_ts"] == "2021-11-25T17:02:49.370Z"  # envelope ts_ms 1637859769370
    assert rec["tx"] is None  # transaction: null
    assert rec["snapshot"] == "false"
    assert rec["source"] == {"connector": "sqlserver", "name": "redislabs",
                             "version": "1.6.0.Final"}
    assert rec["lineage"] == [{"topic": REDIS_TOPIC, "partition": 0, "offset": 0}]
    assert rec["format_version"] == 1


def test_redis_real_delete_schemaful_as_saved() -> None:
    rec = one_change([redis_record(REDIS_KEY, REDIS_VALUE)])
    assert_redis_delete(rec, REDIS_EXPECTED_BEFORE)


def test_redis_real_delete_compact_json_is_identical() -> None:
    pretty = one_change([redis_record(REDIS_KEY, REDIS_VALUE)])
    # JsonConverter itself writes compact JSON: '{"schema":{...},"payload":{...}}'
    small = one_change([redis_record(compact(REDIS_KEY), compact(REDIS_VALUE))])
    assert small == pretty


def test_redis_real_delete_extended_block_strings_decode_to_the_saved_files() -> None:
    block = (REDIS / "redis_stream_extended_format_block.txt").read_text()
    quoted = re.findall(r'^\s+\d\) ("\{.*\}")$', block, flags=re.M)
    assert len(quoted) == 2
    key, value = (json.loads(q).encode() for q in quoted)
    assert json.loads(key) == json.loads(REDIS_KEY)
    assert json.loads(value) == json.loads(REDIS_VALUE)
    assert_redis_delete(one_change([redis_record(key, value)]), REDIS_EXPECTED_BEFORE)


def test_redis_real_delete_schemaless() -> None:
    key = json.dumps(json.loads(REDIS_KEY)["payload"]).encode()
    value = json.dumps(json.loads(REDIS_VALUE)["payload"]).encode()
    rec = one_change([redis_record(key, value)])
    # Without a schema the logical types are unknown: values pass through as JSON (SPEC §3.1)
    assert_redis_delete(rec, {**REDIS_EXPECTED_BEFORE, "hiredate": 1562630400000,
                              "sal": "dzWUAA==", "comm": "AYag"})
    schemaful = one_change([redis_record(REDIS_KEY, REDIS_VALUE)])
    differing = {k for k in rec if rec[k] != schemaful[k]}
    assert differing == {"before"}
    assert rec["event_id"] == schemaful["event_id"]  # same input position → same id
    # compact schema-less too
    assert one_change([redis_record(compact(key), compact(value))]) == rec


def test_redis_schemaless_with_table_schema_decodes_like_schemaful() -> None:
    # SPEC §3.1: schema-less values are decoded when a table schema is given
    envelope_schema = json.loads(REDIS_VALUE)["schema"]
    row = next(f for f in envelope_schema["fields"] if f["field"] == "before")
    decoder = Decoder(DecodeOptions(table_schemas={REDIS_TOPIC: table_from_connect(row)}))
    key = json.dumps(json.loads(REDIS_KEY)["payload"]).encode()
    value = json.dumps(json.loads(REDIS_VALUE)["payload"]).encode()
    rec = one_change([redis_record(key, value)], Translator(decoder=decoder))
    assert_redis_delete(rec, REDIS_EXPECTED_BEFORE)


def test_redis_delete_then_tombstone_and_replay() -> None:
    # Debezium follows every delete with a tombstone (same key, null value); a restart re-sends
    # the delete with the same source block (only Kafka offset differs) → one output (SPEC §4).
    changes, dead, t = run([
        redis_record(REDIS_KEY, REDIS_VALUE, offset=0),
        redis_record(REDIS_KEY, None, offset=1),
        redis_record(REDIS_KEY, REDIS_VALUE, offset=2),
        redis_record(REDIS_KEY, None, offset=3),
    ])
    assert dead == []
    assert len(changes) == 1
    assert t.counters.tombstones == 2
    assert t.counters.duplicates == 1


# === 2. Debezium SQL Server documentation samples =============================================

VERSIONS = ("v1.9", "v2.7", "v3dev")
DOC_TOPIC = {"v1.9": "server1.dbo.customers", "v2.7": "server1.testDB.dbo.customers",
             "v3dev": "server1.testDB.dbo.customers"}
PLACEHOLDER_VERSION = {"v1.9": "1.9.7.Final", "v2.7": "2.7.0.Final", "v3dev": "3.7.0-SNAPSHOT"}


def doc_text(version: str, name: str) -> str:
    return (DOCS / f"{version}_{name}.json.txt").read_text()


def repair_placeholders(text: str, version: str) -> str:
    # Repair: the AsciiDoc attribute "{debezium-version}" → the release the sample comes from
    return text.replace("{debezium-version}", PLACEHOLDER_VERSION[version])


def repaired_key(version: str) -> bytes:
    # Repair: strip callouts. The key sample shows row 1004 while the value samples show row
    # 1005; the key of the value samples is therefore {"id": 1005}.
    doc = json.loads(strip_callouts(doc_text(version, "change_event_key")))
    doc["payload"]["id"] = 1005
    return json.dumps(doc).encode()


def repaired_create(version: str) -> str:
    text = strip_callouts(repair_placeholders(doc_text(version, "create_event_value_with_schema"),
                                              version))
    # Repair: the 2.x/3.x samples repeat "ts_ms" three times at the top level; the second and
    # third are ts_us and ts_ns (the schema lists ts_ms, ts_us, ts_ns).
    text = re.sub(r'"ts_ms": (\d{16}),', r'"ts_us": \1,', text)
    text = re.sub(r'"ts_ms": (\d{19})', r'"ts_ns": \1', text)
    # Deliberately NOT repaired: "snapshot": false (boolean) and "event_serial_no": "1"
    # (string); SPEC §3.1 says to tolerate both.
    return text


def repaired_with_create_schema(version: str, name: str) -> str:
    text = strip_callouts(repair_placeholders(doc_text(version, name), version))
    # Repair: the v1.9 delete sample has a stray "}," line after the elided schema
    text = re.sub(r'("schema": \{ \.\.\. \},)\n\s*\},\n', r"\1\n", text)
    # Repair: the elided schema "{ ... }" is the create sample's schema (same table)
    schema = json.loads(repaired_create(version))["schema"]
    return text.replace('"schema": { ... },', '"schema": ' + json.dumps(schema) + ",")


def doc_record(value: str | bytes | None, key: bytes | None = None, topic: str | None = None,
               offset: int = 0, version: str = "v2.7") -> RawRecord:
    data = value.encode() if isinstance(value, str) else value
    return RawRecord(topic=topic or DOC_TOPIC[version], partition=0, offset=offset, key=key,
                     value=data)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["create_event_value_with_schema", "update_event_value",
                                  "delete_event_value", "schema_change_message",
                                  "transaction_boundary_begin_end",
                                  "transaction_enriched_event"])
def test_doc_value_as_printed_is_dead_lettered(version: str, name: str) -> None:
    text = doc_text(version, name).encode()
    try:
        json.loads(text)
        valid_json = True
    except ValueError:
        valid_json = False
    if version == "v3dev" and name == "create_event_value_with_schema":
        # No callouts left in the 3.x create sample: it is JSON syntax (RFC 8259 allows repeated
        # names); covered by test_doc_v3dev_create_as_printed_translates.
        assert valid_json
        return
    assert not valid_json
    record = doc_record(text, key=repaired_key(version), version=version)
    dead = one_dead_letter([record])
    assert dead.stage == "decode"
    assert dead.error_class == "DecodeError"
    assert "JSON" in dead.message
    out = dead.to_record()
    assert out.value == text and out.key == record.key
    headers = dict(out.headers)
    assert headers["__connect.errors.stage"] == b"decode"
    assert headers["__connect.errors.exception.class.name"] == \
        b"debezium_bridge.errors.DecodeError"


@pytest.mark.parametrize("version", ["v1.9", "v2.7"])
def test_doc_key_as_printed_is_dead_lettered(version: str) -> None:
    key = doc_text(version, "change_event_key").encode()
    value = repaired_create(version).encode()
    dead = one_dead_letter([doc_record(value, key=key, version=version)])
    assert dead.stage == "decode-key"
    assert dead.error_class == "KeyDecodeError"
    assert "key" in dead.message
    assert dead.to_record().key == key


@pytest.mark.parametrize("version", VERSIONS)
def test_doc_key_repaired(version: str) -> None:
    text = doc_text(version, "change_event_key")
    if version == "v3dev":
        json.loads(text)  # valid as printed (no callouts in the 3.x sample)
    key = strip_callouts(text).encode()
    decoder = Decoder()
    record = doc_record(b"{}", key=key, version=version)
    assert decoder.decode_key(record, key) == {"id": 1004}
    assert decoder.decode_key(record, compact(key)) == {"id": 1004}


# Expected canonical records of the repaired samples (values copied from the doc text)
DOC_ROW_1005 = {"id": 1005, "first_name": "john", "last_name": "doe",
                "email": "john.doe@example.org"}


def assert_doc_common(rec: dict[str, Any], version: str) -> None:
    assert rec["table"] == {"db": "testDB", "schema": "dbo", "name": "customers"}
    assert rec["table_id"] == "testDB.dbo.customers"
    assert rec["key"] == {"id": 1005}
    assert rec["old_key"] is None and rec["key_changed"] is False
    assert rec["snapshot"] == "false"  # boolean false in the doc → the string "false"
    assert rec["source"] == {"connector": "sqlserver", "name": "server1",
                             "version": PLACEHOLDER_VERSION[version]}
    assert rec["tx"] is None
    assert rec["unavailable_columns"] == []


@pytest.mark.parametrize("version", VERSIONS)
def test_doc_create_repaired(version: str) -> None:
    value = repaired_create(version)
    json.loads(value)
    rec = one_change([doc_record(value, key=repaired_key(version), version=version)])
    assert_doc_common(rec, version)
    assert rec["op"] == "insert"
    assert rec["before"] is None
    assert rec["after"] == DOC_ROW_1005
    assert rec["changed_columns"] == ["id", "first_name", "last_name", "email"]
    assert rec["position"] == {"commit_lsn": "00000027:00000758:0005",
                               "change_lsn": "00000027:00000758:0003",
                               "event_serial_no": 1}  # doc wrote "1"
    assert isinstance(rec["position"]["event_serial_no"], int)
    assert rec["commit_ts"] == "2019-06-05T10:11:08.470Z"  # source.ts_ms 1559729468470
    assert rec["capture_ts"] == "2019-06-05T10:11:11.739Z"  # ts_ms 1559729471739
    # compact and schema-less forms of the same repaired value
    assert one_change([doc_record(compact(value.encode()), key=compact(repaired_key(version)),
                                  version=version)]) == rec
    payload = json.dumps(json.loads(value)["payload"]).encode()
    key_payload = json.dumps(json.loads(repaired_key(version))["payload"]).encode()
    assert one_change([doc_record(payload, key=key_payload, version=version)]) == rec


def test_doc_v3dev_create_as_printed_translates() -> None:
    """Valid JSON syntax despite three ``ts_ms`` members; the last one wins.

    The last ``ts_ms`` is the nanosecond value 1559729471739876149, which is no epoch-millisecond
    instant (year > 9999), so the record is rejected as an envelope error instead of a capture
    time being made up from it; with the millisecond value restored it translates.
    """
    text = doc_text("v3dev", "create_event_value_with_schema")
    key = doc_text("v3dev", "change_event_key").encode()
    [dead] = [o for o in Translator().translate([doc_record(text, key=key, version="v3dev")])
              if isinstance(o, DeadLetter)]
    assert dead.stage == "envelope" and "ts_ms" in dead.message
    repaired = text.replace("1559729471739876149", "1559729471739")  # the ms value
    rec = one_change([doc_record(repaired, key=key, version="v3dev")])
    assert rec["op"] == "insert"
    assert rec["key"] == {"id": 1004}  # the doc's own key sample
    assert rec["after"] == DOC_ROW_1005
    assert rec["position"]["event_serial_no"] == 1
    assert rec["snapshot"] == "false"
    assert rec["source"]["version"] == "{debezium-version}"  # placeholder passes through
    assert rec["commit_ts"] == "2019-06-05T10:11:08.470Z"
    assert rec["capture_ts"] == "2019-06-05T10:11:11.739Z"


@pytest.mark.parametrize("version", VERSIONS)
def test_doc_update_repaired(version: str) -> None:
    value = repaired_with_create_schema(version, "update_event_value")
    rec = one_change([doc_record(value, key=repaired_key(version), version=version)])
    assert_doc_common(rec, version)
    assert rec["op"] == "update"
    assert rec["before"] == DOC_ROW_1005
    assert rec["after"] == {**DOC_ROW_1005, "email": "noreply@example.org"}
    assert rec["changed_columns"] == ["email"]
    assert rec["position"] == {"commit_lsn": "00000027:00000ac0:0007",
                               "change_lsn": "00000027:00000ac0:0002",
                               "event_serial_no": 2}  # doc wrote "2": 3+4 pair counts two rows
    assert rec["commit_ts"] == "2019-06-05T10:19:55.937Z"
    assert rec["capture_ts"] == "2019-06-05T10:19:58.706Z"


@pytest.mark.parametrize("version", VERSIONS)
def test_doc_delete_repaired(version: str) -> None:
    value = repaired_with_create_schema(version, "delete_event_value")
    rec = one_change([doc_record(value, key=repaired_key(version), version=version)])
    assert_doc_common(rec, version)
    assert rec["op"] == "delete"
    assert rec["before"] == {**DOC_ROW_1005, "email": "noreply@example.org"}
    assert rec["after"] is None
    assert rec["changed_columns"] == ["id", "first_name", "last_name", "email"]
    assert rec["position"] == {"commit_lsn": "00000027:00000db0:0007",
                               "change_lsn": "00000027:00000db0:0005", "event_serial_no": 1}
    assert rec["commit_ts"] == "2019-06-05T10:27:25.243Z"
    assert rec["capture_ts"] == "2019-06-05T10:27:30.205Z"


@pytest.mark.parametrize("version", VERSIONS)
def test_doc_update_then_delete_with_tombstone_stream(version: str) -> None:
    """create, update, delete, tombstone of row 1005 in one partition: three records in order."""
    key = repaired_key(version)
    records = [
        doc_record(repaired_create(version), key=key, offset=0, version=version),
        doc_record(repaired_with_create_schema(version, "update_event_value"), key=key,
                   offset=1, version=version),
        doc_record(repaired_with_create_schema(version, "delete_event_value"), key=key,
                   offset=2, version=version),
        doc_record(None, key=key, offset=3, version=version),
    ]
    changes, dead, t = run(records)
    assert dead == []
    assert [c.op for c in changes] == ["insert", "update", "delete"]
    assert [c.seq for c in changes] == sorted(c.seq for c in changes)
    assert t.counters.tombstones == 1


@pytest.mark.parametrize("version", VERSIONS)
def test_doc_schema_change_repaired_is_a_side_record(version: str) -> None:
    text = strip_callouts(repair_placeholders(doc_text(version, "schema_change_message"),
                                              version))
    # Repair: the schema is elided as "{ ... }"; drop it and send the payload alone, as the
    # connector does with value.converter.schemas.enable=false.
    text = re.sub(r'"schema": \{\s*\.\.\.\s*\},', '"schema": null,', text)
    payload = json.loads(text)["payload"]
    assert payload["source"]["change_lsn"] is None  # snapshot source, no op
    key = json.dumps({"databaseName": "testDB"}).encode()
    for value in (json.dumps(payload).encode(), json.dumps(payload, separators=(",", ":")).encode(),
                  json.dumps({"schema": None, "payload": payload}).encode()):
        changes, dead, t = run([doc_record(value, key=key, topic="server1")])
        assert changes == [] and dead == []
        assert t.counters.side_records == 1
        assert t.counters.changes_out == 0


def transaction_values(version: str) -> list[bytes]:
    # Repair: the block holds the BEGIN and the END value one after the other; split them into
    # the two records they are on the transaction topic.
    text = doc_text(version, "transaction_boundary_begin_end")
    begin, end = (part.strip() for part in text.split("\n\n"))
    return [begin.encode(), end.encode()]


@pytest.mark.parametrize("version", VERSIONS)
def test_doc_transaction_begin_end_repaired_are_side_records(version: str) -> None:
    begin, end = transaction_values(version)
    assert json.loads(begin)["status"] == "BEGIN"
    assert json.loads(end)["event_count"] == 2
    key = json.dumps({"id": "00000025:00000d08:0025"}).encode()
    changes, dead, t = run([doc_record(v, key=key, topic="server1.transaction", offset=i)
                            for i, v in enumerate((begin, end))])
    assert changes == [] and dead == []
    assert t.counters.side_records == 2
    # schema-ful form too
    wrapped = [json.dumps({"schema": {"type": "struct", "fields": [], "optional": False,
                                      "name": "io.debezium.connector.common."
                                              "TransactionMetadataValue"},
                           "payload": json.loads(v)}).encode() for v in (begin, end)]
    changes, dead, t = run([doc_record(v, key=key, topic="server1.transaction", offset=i)
                            for i, v in enumerate(wrapped)])
    assert changes == [] and dead == []
    assert t.counters.side_records == 2


def repaired_enriched(version: str) -> str:
    text = doc_text(version, "transaction_enriched_event")
    # Repair: the source block is elided as "..."; fill it in as the connector would for table
    # testDB.dbo.tablea. commit_lsn = the transaction id (reference §1.4); change_lsn made up.
    # Strings where numbers belong ("ts_ms", "total_order") are left as printed (tolerated).
    source = {"version": PLACEHOLDER_VERSION[version], "connector": "sqlserver",
              "name": "server1", "ts_ms": 1580390884000, "snapshot": "false", "db": "testDB",
              "sequence": None, "schema": "dbo", "table": "tablea",
              "change_lsn": "00000025:00000d08:0002", "commit_lsn": "00000025:00000d08:0025",
              "event_serial_no": 1}
    return re.sub(r'"source": \{\n\.\.\.\n\s*\},', '"source": ' + json.dumps(source) + ",", text)


@pytest.mark.parametrize("version", VERSIONS)
def test_doc_transaction_enriched_event_repaired(version: str) -> None:
    value = repaired_enriched(version)
    key = json.dumps({"pk": "2"}).encode()
    begin, end = transaction_values(version)
    tx_key = json.dumps({"id": "00000025:00000d08:0025"}).encode()
    changes, dead, t = run([
        doc_record(begin, key=tx_key, topic="server1.transaction", offset=0),
        doc_record(value, key=key, topic="server1.testDB.dbo.tablea", offset=0),
        doc_record(end, key=tx_key, topic="server1.transaction", offset=1),
    ])
    assert dead == []
    assert t.counters.side_records == 2
    assert len(changes) == 1
    rec = to_dict(changes[0])
    assert rec["op"] == "insert"
    assert rec["table_id"] == "testDB.dbo.tablea"
    assert rec["key"] == {"pk": "2"}
    assert rec["after"] == {"pk": "2", "aa": "1"}
    assert rec["tx"] == {"id": "00000025:00000d08:0025", "total_order": 1,
                         "data_collection_order": 1}
    assert rec["position"] == {"commit_lsn": "00000025:00000d08:0025",
                               "change_lsn": "00000025:00000d08:0002", "event_serial_no": 1}
    assert rec["capture_ts"] == "2020-01-30T13:28:04.335Z"  # "ts_ms": "1580390884335"


# === 3. Materialize SQL Server testdrive expectations =========================================

MZ_TYPES_TOPIC = "sql-server.test.dbo.types_table"  # topic.prefix sql-server, database test

# Connect schema of types_table per reference §5 (20-populate-types.td column types)
MZ_TYPES_ROW = {
    "type": "struct", "optional": True, "name": "sql-server.test.dbo.types_table.Value",
    "fields": [
        {"type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
         "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "5"},
         "field": "decimal_col"},  # DECIMAL(5,2)
        {"type": "string", "optional": True, "name": "io.debezium.time.ZonedTimestamp",
         "version": 1, "field": "datetimeoffset_col"},  # DATETIMEOFFSET(4)
        {"type": "int64", "optional": True, "name": "io.debezium.time.NanoTimestamp",
         "version": 1, "field": "datetime2_col"},  # DATETIME2(7)
        {"type": "int64", "optional": True, "name": "io.debezium.time.Timestamp",
         "version": 1, "field": "smalldatetime_col"},  # SMALLDATETIME
        {"type": "boolean", "optional": True, "field": "bit_col"},  # BIT
    ],
}

# Values as Materialize observed them (40-check-types.td)
MZ_SMALLDATETIME_MS = -2208948480000  # 1900-01-01 11:12:00 (11:12:13 rounded to the minute)
MZ_TYPES_AFTER = {
    "decimal_col": base64.b64encode((12345).to_bytes(2, "big", signed=True)).decode(),
    "datetimeoffset_col": "2025-12-10T12:32:10+01:00",
    "datetime2_col": 1289567655123456700,
    "smalldatetime_col": MZ_SMALLDATETIME_MS,
    "bit_col": True,
}
MZ_TYPES_EXPECTED = {
    "decimal_col": "123.45",
    "datetimeoffset_col": "2025-12-10T12:32:10+01:00",  # offset kept
    "datetime2_col": "2010-11-12T13:14:15.1234567",
    "smalldatetime_col": "1900-01-01T11:12:00.000",
    "bit_col": True,
}


def sqlserver_source(db: str, table: str, *, commit: str | None, change: str | None,
                     serial: int | None, name: str = "sql-server", ts_ms: int = 1765366330000,
                     snapshot: str = "false") -> dict[str, Any]:
    """A SQL Server source block shaped like reference §1.2 (2.x field order)."""
    return {"version": "2.7.3.Final", "connector": "sqlserver", "name": name, "ts_ms": ts_ms,
            "snapshot": snapshot, "db": db, "sequence": None, "schema": "dbo", "table": table,
            "change_lsn": change, "commit_lsn": commit, "event_serial_no": serial}


def connect_envelope_schema(row: dict[str, Any], name: str) -> dict[str, Any]:
    source_fields = [
        {"type": "string", "optional": False, "field": "version"},
        {"type": "string", "optional": False, "field": "connector"},
        {"type": "string", "optional": False, "field": "name"},
        {"type": "int64", "optional": False, "field": "ts_ms"},
        {"type": "string", "optional": True, "name": "io.debezium.data.Enum", "version": 1,
         "parameters": {"allowed": "true,last,false,incremental"}, "default": "false",
         "field": "snapshot"},
        {"type": "string", "optional": False, "field": "db"},
        {"type": "string", "optional": True, "field": "sequence"},
        {"type": "string", "optional": False, "field": "schema"},
        {"type": "string", "optional": False, "field": "table"},
        {"type": "string", "optional": True, "field": "change_lsn"},
        {"type": "string", "optional": True, "field": "commit_lsn"},
        {"type": "int64", "optional": True, "field": "event_serial_no"},
    ]
    return {
        "type": "struct", "optional": False, "name": f"{name}.Envelope", "version": 1,
        "fields": [
            {**row, "field": "before"},
            {**row, "field": "after"},
            {"type": "struct", "fields": source_fields, "optional": False,
             "name": "io.debezium.connector.sqlserver.Source", "field": "source"},
            {"type": "struct", "optional": True, "name": "event.block", "version": 1,
             "field": "transaction",
             "fields": [{"type": "string", "optional": False, "field": "id"},
                        {"type": "int64", "optional": False, "field": "total_order"},
                        {"type": "int64", "optional": False, "field": "data_collection_order"}]},
            {"type": "string", "optional": False, "field": "op"},
            {"type": "int64", "optional": True, "field": "ts_ms"},
        ],
    }


def test_materialize_samples_hold_the_facts_used_here() -> None:
    populate = (MZ / "20-populate-types.td").read_text()
    assert ("CREATE TABLE types_table (decimal_col DECIMAL(5,2), datetimeoffset_col "
            "DATETIMEOFFSET(4), datetime2_col DATETIME2(7), smalldatetime_col SMALLDATETIME, "
            "bit_col BIT);") in populate
    observed = (MZ / "40-check-types.td").read_text()
    assert ('123.45 "2025-12-10T12:32:10+01:00" "1289567655123456700" "1900-01-01 11:12:00" '
            "true") in observed
    assert "CREATE TABLE update_table_pk (key_col VARCHAR(20) PRIMARY KEY, value_col " \
        "VARCHAR(20));" in (MZ / "20-populate-update.td").read_text()
    update = (MZ / "40-check-update.td").read_text()
    assert "UPDATE update_table_pk SET key_col = 'key_new' WHERE key_col = 'key2';" in update
    assert "key1 value_new\nkey_new value2" in update


def test_materialize_types_schemaful_json() -> None:
    payload = {"before": None, "after": MZ_TYPES_AFTER,
               "source": sqlserver_source("test", "types_table", commit="00000026:00000410:0003",
                                          change="00000026:00000410:0002", serial=1),
               "transaction": None, "op": "c", "ts_ms": 1765366331000}
    value = json.dumps({"schema": connect_envelope_schema(MZ_TYPES_ROW, MZ_TYPES_TOPIC),
                        "payload": payload}, separators=(",", ":")).encode()
    # types_table has no primary key: Kafka key null → key {} (keyless table)
    rec = one_change([RawRecord(topic=MZ_TYPES_TOPIC, partition=0, offset=0, key=None,
                                value=value)])
    assert rec["op"] == "insert"
    assert rec["key"] == {}
    assert rec["after"] == MZ_TYPES_EXPECTED
    assert rec["table_id"] == "test.dbo.types_table"
    assert rec["changed_columns"] == list(MZ_TYPES_EXPECTED)


def test_materialize_types_confluent_avro() -> None:
    """The same row as Confluent's AvroConverter writes it (Materialize reads Avro)."""
    dec_type = {"type": "bytes", "scale": 2, "precision": 5, "connect.version": 1,
                "connect.parameters": {"scale": "2", "connect.decimal.precision": "5"},
                "connect.name": "org.apache.kafka.connect.data.Decimal",
                "logicalType": "decimal"}
    value_row = {
        "type": "record", "name": "Value", "connect.name": "sql_server.test.dbo.types_table.Value",
        "fields": [
            {"name": "decimal_col", "type": ["null", dec_type], "default": None},
            {"name": "datetimeoffset_col", "type": ["null", {
                "type": "string", "connect.version": 1,
                "connect.name": "io.debezium.time.ZonedTimestamp"}], "default": None},
            {"name": "datetime2_col", "type": ["null", {
                "type": "long", "connect.version": 1,
                "connect.name": "io.debezium.time.NanoTimestamp"}], "default": None},
            {"name": "smalldatetime_col", "type": ["null", {
                "type": "long", "connect.version": 1,
                "connect.name": "io.debezium.time.Timestamp"}], "default": None},
            {"name": "bit_col", "type": ["null", "boolean"], "default": None},
        ],
    }
    envelope = {
        "type": "record", "name": "Envelope", "namespace": "sql_server.test.dbo.types_table",
        "connect.name": "sql_server.test.dbo.types_table.Envelope",
        "fields": [
            {"name": "before", "type": ["null", value_row], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": SQLSERVER_SOURCE_AVRO},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }
    datum = {
        "before": None,
        "after": {**MZ_TYPES_AFTER, "decimal_col": decimal.Decimal("123.45")},
        "source": sqlserver_source("test", "types_table", commit="00000026:00000410:0003",
                                   change="00000026:00000410:0002", serial=1),
        "op": "c", "ts_ms": 1765366331000,
    }
    decoder = Decoder(avro=AvroDecoder(FileSchemaResolver({"7": envelope})))
    rec = one_change([RawRecord(topic=MZ_TYPES_TOPIC, partition=0, offset=0, key=None,
                                value=confluent(7, envelope, datum))],
                     Translator(decoder=decoder))
    assert rec["after"] == MZ_TYPES_EXPECTED
    assert rec["key"] == {}


# 20-populate-update.td: update_table_pk (key_col VARCHAR(20) PRIMARY KEY, value_col VARCHAR(20))
MZ_UPD_TOPIC = "sql_server.test.dbo.update_table_pk"  # as written in 40-check-update.td
MZ_UPD_ROW = {"type": "struct", "optional": True, "name": f"{MZ_UPD_TOPIC}.Value",
              "fields": [{"type": "string", "optional": False, "field": "key_col"},
                         {"type": "string", "optional": True, "field": "value_col"}]}
MZ_UPD_KEY_SCHEMA = {"type": "struct", "optional": False, "name": f"{MZ_UPD_TOPIC}.Key",
                     "fields": [{"type": "string", "optional": False, "field": "key_col"}]}


def mz_update_event(op: str, key: str, before: dict[str, Any] | None,
                    after: dict[str, Any] | None, commit: str, change: str, serial: int,
                    partition: int, offset: int) -> RawRecord:
    payload = {"before": before, "after": after,
               "source": sqlserver_source("test", "update_table_pk", commit=commit,
                                          change=change, serial=serial, name="sql_server"),
               "transaction": None, "op": op, "ts_ms": 1765366400000 + offset}
    value = json.dumps({"schema": connect_envelope_schema(MZ_UPD_ROW, MZ_UPD_TOPIC),
                        "payload": payload}, separators=(",", ":")).encode()
    return RawRecord(topic=MZ_UPD_TOPIC, partition=partition, offset=offset,
                     key=mz_key(key), value=value)


def mz_key(key: str) -> bytes:
    return json.dumps({"schema": MZ_UPD_KEY_SCHEMA, "payload": {"key_col": key}},
                      separators=(",", ":")).encode()


def row(key: str, value: str) -> dict[str, str]:
    return {"key_col": key, "value_col": value}


def mz_update_stream(pk_change_c_first: bool) -> list[RawRecord]:
    ins1 = mz_update_event("c", "key1", None, row("key1", "value1"),
                           "00000030:00000100:0004", "00000030:00000100:0002", 1, 0, 0)
    ins2 = mz_update_event("c", "key2", None, row("key2", "value2"),
                           "00000030:00000108:0004", "00000030:00000108:0002", 1, 1, 0)
    # UPDATE ... SET value_col = 'value_new' WHERE key_col = 'key1': one u (3+4 → serial 2)
    upd = mz_update_event("u", "key1", row("key1", "value1"), row("key1", "value_new"),
                          "00000031:00000200:0005", "00000031:00000200:0003", 2, 0, 1)
    # UPDATE ... SET key_col = 'key_new' WHERE key_col = 'key2': CDC logs delete (1) + insert (2)
    # at the same (commit_lsn, change_lsn) → d (serial 1), tombstone, c (serial 2); the halves
    # have different keys and land in different partitions (reference §3, Case A).
    commit, change = "00000031:00000300:0005", "00000031:00000300:0003"
    delete = mz_update_event("d", "key2", row("key2", "value2"), None, commit, change, 1, 1, 1)
    tombstone = RawRecord(topic=MZ_UPD_TOPIC, partition=1, offset=2, key=mz_key("key2"),
                          value=None)
    create = mz_update_event("c", "key_new", None, row("key_new", "value2"), commit, change, 2,
                             2, 0)
    pk_change = [create, delete, tombstone] if pk_change_c_first else [delete, tombstone, create]
    return [ins1, ins2, upd, *pk_change]


@pytest.mark.parametrize("c_first", [False, True])
def test_materialize_primary_key_update_becomes_one_update(c_first: bool) -> None:
    changes, dead, t = run(mz_update_stream(c_first))
    assert dead == []
    assert t.counters.tombstones == 1
    assert t.counters.merged == 1
    assert t.counters.key_changes_paired == 1
    assert [c.op for c in changes] == ["insert", "insert", "update", "update"]
    pk = to_dict(changes[-1])
    assert pk["op"] == "update"
    assert pk["key_changed"] is True
    assert pk["old_key"] == {"key_col": "key2"}
    assert pk["key"] == {"key_col": "key_new"}
    assert pk["before"] == row("key2", "value2")
    assert pk["after"] == row("key_new", "value2")
    assert pk["changed_columns"] == ["key_col"]
    assert pk["position"] == {"commit_lsn": "00000031:00000300:0005",
                              "change_lsn": "00000031:00000300:0003", "event_serial_no": 2}
    assert sorted((x["partition"], x["offset"]) for x in pk["lineage"]) == [(1, 1), (2, 0)]
    plain = to_dict(changes[2])
    assert plain["key_changed"] is False and plain["changed_columns"] == ["value_col"]

    # 40-check-update.td: applying the feed must end with key1 value_new / key_new value2
    table: dict[str, str] = {}
    for change_record in changes:
        for flat in flat_rows(change_record):
            if flat["__deleted"]:
                table.pop(flat["key_col"], None)
            else:
                table[flat["key_col"]] = flat["value_col"]
    assert table == {"key1": "value_new", "key_new": "value2"}


def test_materialize_primary_key_update_unpaired_when_pairing_off() -> None:
    from debezium_bridge.core.settings import TranslatorConfig

    changes, dead, t = run(mz_update_stream(False),
                           Translator(TranslatorConfig(pair_key_changes=False)))
    assert dead == []
    assert [c.op for c in changes][-2:] == ["delete", "insert"]  # d before c at one position
    assert t.counters.merged == 0


# === 4. RisingWave: Avro-JSON dumps (Postgres) and a Debezium envelope .avsc ==================


def rw_lines(name: str) -> tuple[tuple[dict[str, Any], dict[str, Any]], list[RawRecord]]:
    """``keyschema^valueschema`` then ``key^value`` lines; an empty value is a tombstone."""
    lines = (RW / name).read_bytes().splitlines()
    key_schema, value_schema = (json.loads(p) for p in lines[0].split(b"^", 1))
    records = []
    for offset, line in enumerate(lines[1:]):
        key, _, value = line.partition(b"^")
        records.append(RawRecord(topic="postgres.public.orders", partition=0, offset=offset,
                                 key=key, value=value or None))
    return (key_schema, value_schema), records


@pytest.mark.parametrize("name", ["debezium_non_compact_avro_json.1",
                                  "debezium_compact_avro_json.1"])
def test_risingwave_avro_json_postgres_events_are_dead_lettered(name: str) -> None:
    _, records = rw_lines(name)
    changes, dead, t = run(records)
    assert changes == []
    data_records = records[:-1]
    assert len(dead) == len(data_records)
    for d, r in zip(dead, data_records, strict=True):
        assert d.stage == "envelope"
        assert "commit_lsn" in d.message  # Postgres: source has lsn/txId, no commit_lsn
        assert d.record == r
    assert t.counters.tombstones == 1


@pytest.mark.parametrize("name", ["debezium_non_compact_avro_json.1",
                                  "debezium_compact_avro_json.1"])
def test_risingwave_avro_json_unwrap(name: str) -> None:
    _, records = rw_lines(name)
    doc, wrapped = unwrap_avro_json(json.loads(records[0].value or b""))
    assert wrapped is True
    assert doc["after"] == {"order_id": 1, "order_date": 1558430840000, "customer_name": "Bob",
                           "price": None, "product_id": 1, "order_status": 1}
    assert doc["source"]["snapshot"] == "true"
    assert doc["source"]["sequence"] == '[null,"23911624"]'
    assert doc["source"]["lsn"] == 23911624
    assert doc["ts_ms"] == 1685975424096
    assert doc["op"] == "r"
    # the last line is "{"order_id": 1}^": a tombstone
    last = records[-1]
    assert last.key == b'{"order_id": 1}' and last.value is None
    side = Decoder().decode(last)
    assert isinstance(side, SideRecord) and side.kind is SideKind.TOMBSTONE


def test_risingwave_avro_json_delete_before_has_key_only() -> None:
    _, records = rw_lines("debezium_non_compact_avro_json.1")
    doc, _ = unwrap_avro_json(json.loads(records[4].value or b""))
    assert doc["op"] == "d" and doc["after"] is None
    assert doc["before"] == {"order_id": 1, "order_date": None, "customer_name": None,
                             "price": None, "product_id": None, "order_status": None}


def test_risingwave_avro_json_as_sqlserver_translates() -> None:
    """The update line with its Postgres source swapped for a SQL Server one (made-up LSNs)."""
    _, records = rw_lines("debezium_non_compact_avro_json.1")
    value = json.loads(records[3].value or b"")
    assert value["op"] == "u"
    value["source"] = {"version": "1.9.7.Final", "connector": "sqlserver", "name": "postgres",
                       "ts_ms": 1686029203809, "snapshot": {"string": "false"}, "db": "mydb",
                       "sequence": None, "schema": "public", "table": "orders",
                       "change_lsn": {"string": "00000040:00000100:0002"},
                       "commit_lsn": {"string": "00000040:00000100:0005"},
                       "event_serial_no": {"long": 2}}
    value["before"] = {"postgres.public.orders.Value": {
        "order_id": 1, "order_date": {"long": 1558430840000}, "customer_name": {"string": "Bob"},
        "price": None, "product_id": {"int": 1}, "order_status": {"int": 1}}}
    rec = one_change([RawRecord(topic="postgres.public.orders", partition=0, offset=0,
                                key=records[3].key, value=json.dumps(value).encode())])
    assert rec["op"] == "update"
    assert rec["key"] == {"order_id": 1}
    assert rec["after"]["product_id"] == 3 and rec["after"]["customer_name"] == "Bob"
    assert rec["changed_columns"] == ["product_id"]
    assert rec["position"] == {"commit_lsn": "00000040:00000100:0005",
                               "change_lsn": "00000040:00000100:0002", "event_serial_no": 2}
    assert rec["snapshot"] == "false"


def test_risingwave_avro_json_value_schema_columns() -> None:
    (_, value_schema), _ = rw_lines("debezium_non_compact_avro_json.1")
    table = envelope_row_schema(value_schema)
    assert table is not None
    assert table.name == "postgres.public.orders.Value"
    cols = {c.name: c for c in table.columns}
    assert list(cols) == ["order_id", "order_date", "customer_name", "price", "product_id",
                          "order_status"]
    assert cols["order_id"].connect_type == "int32" and cols["order_id"].optional is False
    assert cols["order_date"].connect_type == "int64" and cols["order_date"].optional is True
    assert cols["price"].semantic == "io.debezium.data.VariableScaleDecimal"
    assert cols["order_status"].connect_type == "int16"  # connect.type on an Avro int


AVSC = json.loads((RW / "debezium_avro_msg_schema.avsc").read_text())


def test_avsc_envelope_row_schema() -> None:
    table = envelope_row_schema(AVSC)
    assert table is not None
    assert table.name == "dbserver1.inventory.customers.Value"
    assert [(c.name, c.connect_type, c.semantic, c.optional) for c in table.columns] == [
        ("id", "int32", None, False),
        ("first_name", "string", None, False),
        ("last_name", "string", None, False),
        ("email", "string", None, False),
    ]


def first_mysql_event() -> dict[str, Any]:
    """The first event of debezium_log.1 (MySQL, same table as the .avsc)."""
    line = (RW / "debezium_log.1").read_bytes().splitlines()[0]
    payload: dict[str, Any] = json.loads(line)["payload"]
    assert payload["source"]["connector"] == "mysql"
    return payload


def test_avsc_confluent_avro_mysql_event_is_dead_lettered() -> None:
    schema = AVSC
    datum = first_mysql_event()
    decoder = Decoder(avro=AvroDecoder(FileSchemaResolver({"1": schema})))
    dead = one_dead_letter([RawRecord(topic="dbserver1.inventory.customers", partition=0,
                                      offset=0, key=b'{"id": 1001}',
                                      value=confluent(1, schema, datum))],
                           Translator(decoder=decoder))
    # MySQL source: no 'schema' field and no commit_lsn → not a SQL Server envelope
    assert dead.stage == "envelope"
    assert "schema" in dead.message or "commit_lsn" in dead.message


def test_avsc_confluent_avro_with_sqlserver_source() -> None:
    # Change: the MySQL Source record of the .avsc is replaced by the SQL Server Source record
    # (reference §1.2), and the datum's source values by SQL Server ones (made-up LSNs); the row
    # schema and values are the file's.
    schema = copy.deepcopy(AVSC)
    for field in schema["fields"]:
        if field["name"] == "source":
            field["type"] = SQLSERVER_SOURCE_AVRO
    key_schema = {"type": "record", "name": "Key", "namespace": "dbserver1.inventory.customers",
                  "fields": [{"name": "id", "type": "int"}],
                  "connect.name": "dbserver1.inventory.customers.Key"}
    datum = first_mysql_event()
    datum["op"] = "c"
    datum["source"] = {"version": "2.7.3.Final", "connector": "sqlserver", "name": "dbserver1",
                       "ts_ms": 1661327688868, "snapshot": "false", "db": "inventory",
                       "sequence": None, "schema": "dbo", "table": "customers",
                       "change_lsn": "00000027:00000758:0003",
                       "commit_lsn": "00000027:00000758:0005", "event_serial_no": 1}
    datum["transaction"] = {"id": "00000027:00000758:0005", "total_order": 1,
                            "data_collection_order": 1}
    decoder = Decoder(avro=AvroDecoder(FileSchemaResolver({"1": schema, "2": key_schema})))
    record = RawRecord(topic="dbserver1.inventory.customers", partition=0, offset=0,
                       key=confluent(2, key_schema, {"id": 1001}),
                       value=confluent(1, schema, datum))
    event = decoder.decode(record)
    assert isinstance(event, ChangeEvent)
    assert event.column_order == ("id", "first_name", "last_name", "email")
    rec = one_change([record], Translator(decoder=decoder))
    assert rec["op"] == "insert"
    assert rec["key"] == {"id": 1001}
    assert rec["after"] == {"id": 1001, "first_name": "Sally", "last_name": "Thomas",
                            "email": "sally.thomas@acme.com"}
    assert rec["table_id"] == "inventory.dbo.customers"
    assert rec["tx"] == {"id": "00000027:00000758:0005", "total_order": 1,
                         "data_collection_order": 1}
    assert rec["position"]["event_serial_no"] == 1
    assert rec["commit_ts"] == "2022-08-24T07:54:48.868Z"


# === 5. Flink debezium-json (Postgres) with missing images ====================================


def flink_records(name: str) -> list[RawRecord]:
    lines = (FLINK / name).read_bytes().splitlines()
    return [RawRecord(topic="fullfillment.inventory.products", partition=0, offset=i, value=ln)
            for i, ln in enumerate(lines)]


@pytest.mark.parametrize("name", ["debezium-postgres-data-schema-exclude.txt",
                                  "debezium-postgres-data-replica-identity.txt"])
def test_flink_postgres_streams_are_dead_lettered(name: str) -> None:
    records = flink_records(name)
    assert len(records) == 16
    changes, dead, t = run(records)
    assert changes == []
    assert len(dead) == 16 and t.counters.dead_letters == 16
    assert all(d.stage == "envelope" for d in dead)
    messages = [d.message for d in dead]
    if name.endswith("replica-identity.txt"):
        # last line: op d with before AND after null and no Kafka key: nothing identifies the
        # deleted row, so it is rejected for that before its missing commit_lsn is noticed
        assert "before" in messages[-1] and "key" in messages[-1]
        messages = messages[:-1]
    assert all("commit_lsn" in m for m in messages)


def as_sqlserver(line: bytes, serial: int) -> bytes:
    """A Flink line with its Postgres source replaced by a SQL Server one (LSN from pg lsn)."""
    doc = json.loads(line)
    pg = doc["source"]
    lsn = f"{pg['lsn']:08x}:{pg['txId']:08x}:0005"
    snapshot = doc["op"] == "r"  # snapshot rows: no change_lsn, no event_serial_no
    doc["source"] = sqlserver_source(pg["db"], pg["table"], commit=lsn,
                                     change=None if snapshot else lsn[:-4] + "0002",
                                     serial=None if snapshot else serial, name=pg["name"],
                                     ts_ms=pg["ts_ms"], snapshot=pg["snapshot"])
    doc["source"]["schema"] = pg["schema"]
    return json.dumps(doc).encode()


def test_flink_update_without_before_translates_as_update() -> None:
    """envelope.py: ``u`` requires ``after`` only; a null ``before`` is kept as null.

    SQL Server updates always carry both images (reference, pitfall 1), but the translator
    must not crash on a missing ``before`` (peers' users ask for it); it emits the update with
    ``before: null`` and, lacking a before image, lists every after column as changed.
    """
    line = (FLINK / "debezium-postgres-data-replica-identity.txt").read_bytes().splitlines()[9]
    assert json.loads(line)["before"] is None and json.loads(line)["op"] == "u"
    rec = one_change([RawRecord(topic="fullfillment.inventory.products", partition=0, offset=9,
                                key=b'{"id":106}', value=as_sqlserver(line, 2))])
    assert rec["op"] == "update"
    assert rec["before"] is None
    assert rec["after"] == {"id": 106, "name": "hammer", "description": "18oz carpenter hammer",
                            "weight": 1.0}
    assert rec["changed_columns"] == ["id", "name", "description", "weight"]


def test_flink_delete_without_images() -> None:
    """envelope.py: ``d`` needs a ``before`` image or a key.

    Without a key it is a dead letter; with the Kafka key it is a delete of that key with
    ``before: null``.
    """
    line = (FLINK / "debezium-postgres-data-replica-identity.txt").read_bytes().splitlines()[15]
    doc = json.loads(line)
    assert doc["op"] == "d" and doc["before"] is None and doc["after"] is None
    value = as_sqlserver(line, 1)
    dead = one_dead_letter([RawRecord(topic="fullfillment.inventory.products", partition=0,
                                      offset=15, key=None, value=value)])
    assert dead.stage == "envelope"
    assert "before" in dead.message and "key" in dead.message
    rec = one_change([RawRecord(topic="fullfillment.inventory.products", partition=0,
                                offset=15, key=b'{"id":111}', value=value)])
    assert rec["op"] == "delete"
    assert rec["key"] == {"id": 111}
    assert rec["before"] is None and rec["after"] is None
    assert rec["changed_columns"] == []


def test_flink_full_stream_as_sqlserver() -> None:
    lines = (FLINK / "debezium-postgres-data-schema-exclude.txt").read_bytes().splitlines()
    records = []
    for i, line in enumerate(lines):
        doc = json.loads(line)
        image = doc["after"] or doc["before"]
        records.append(RawRecord(topic="fullfillment.inventory.products", partition=0, offset=i,
                                 key=json.dumps({"id": image["id"]}).encode(),
                                 value=as_sqlserver(line, 2 if doc["op"] == "u" else 1)))
    changes, dead, _ = run(records)
    assert dead == []
    ops = [json.loads(line)["op"] for line in lines]
    canonical = {"r": "read", "c": "insert", "u": "update", "d": "delete"}
    assert [c.op for c in changes] == [canonical[o] for o in ops]
    # snapshot rows keep their marker; streaming rows are "false"
    assert [c.snapshot for c in changes] == ["true" if o == "r" else "false" for o in ops]


# === 6. Debezium CloudEvents (Postgres examples, converted to SQL Server attributes) ==========


def ce_sample(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((CE / name).read_text())  # valid JSON as printed
    return doc


def test_cloudevent_postgres_as_printed_is_dead_lettered() -> None:
    doc = ce_sample("cloudevent_json_envelope_json_data_postgres.json.txt")
    dead = one_dead_letter([RawRecord(topic="test_server.s1.a", partition=0, offset=0,
                                      key=b'{"pk":1}', value=json.dumps(doc).encode())])
    assert dead.stage == "envelope"
    assert "commit_lsn" in dead.message


def test_cloudevent_with_avro_data_is_dead_lettered() -> None:
    doc = ce_sample("cloudevent_json_envelope_avro_data_postgres.json.txt")
    assert doc["datacontenttype"] == "application/avro"
    dead = one_dead_letter([RawRecord(topic="test_server.s1.a", partition=0, offset=0,
                                      key=b'{"pk":1}', value=json.dumps(doc).encode())])
    assert dead.stage == "envelope"
    assert "Avro" in dead.message


def sqlserver_cloudevent(data_with_schema: bool) -> dict[str, Any]:
    # Conversion of the JSON/JSON example to what SqlServerCloudEventsMaker writes (reference §7):
    # id format, source, type, connector; the Postgres attributes iodebeziumlsn/xmin/txId are
    # replaced by iodebeziumchangelsn/commitlsn/eventserialno; INT64 attributes are strings;
    # the transaction id is the commit LSN. The event stays a snapshot read (op r) as printed.
    doc = ce_sample("cloudevent_json_envelope_json_data_postgres.json.txt")
    for name in ("iodebeziumlsn", "iodebeziumxmin"):
        del doc[name]
    commit = "00000025:00000d98:00a2"
    doc.update({
        "id": f"name:test_server;change_lsn:null;commit_lsn:{commit};event_serial_no:null",
        "source": "/debezium/sqlserver/test_server",
        "type": "io.debezium.connector.sqlserver.DataChangeEvent",
        "iodebeziumversion": "2.7.0.Final",
        "iodebeziumconnector": "sqlserver",
        "iodebeziumdb": "testDB",
        "iodebeziumschema": "dbo",
        "iodebeziumchangelsn": None,
        "iodebeziumcommitlsn": commit,
        "iodebeziumeventserialno": None,
        "iodebeziumtxid": commit,
    })
    if data_with_schema:
        row = {"type": "struct", "optional": True, "name": "test_server.testDB.dbo.a.Value",
               "fields": [{"type": "int32", "optional": False, "field": "pk"},
                          {"type": "string", "optional": True, "field": "name"}]}
        doc["data"] = {"schema": {"type": "struct", "optional": False,
                                  "name": "io.debezium.connector.sqlserver.Data",
                                  "fields": [{**row, "field": "before"},
                                             {**row, "field": "after"}]},
                       "payload": doc["data"]}
    return doc


@pytest.mark.parametrize("data_with_schema", [False, True])
def test_cloudevent_sqlserver_attributes(data_with_schema: bool) -> None:
    doc = sqlserver_cloudevent(data_with_schema)
    record = RawRecord(topic="test_server.testDB.dbo.a", partition=0, offset=0, key=b'{"pk":1}',
                       value=json.dumps(doc).encode())
    event = Decoder().decode(record)
    assert isinstance(event, ChangeEvent)
    assert event.op == "r"
    rec = one_change([record])
    assert rec["op"] == "read"
    assert rec["table_id"] == "testDB.dbo.a"
    assert rec["key"] == {"pk": 1}
    assert rec["before"] is None
    assert rec["after"] == {"pk": 1, "name": "Bob"}
    assert rec["snapshot"] == "true"
    assert rec["position"] == {"commit_lsn": "00000025:00000d98:00a2", "change_lsn": None,
                               "event_serial_no": None}
    assert rec["commit_ts"] == "2020-01-13T13:55:39.738Z"  # iodebeziumtsms "1578923739738"
    assert rec["tx"] == {"id": "00000025:00000d98:00a2", "total_order": 1,
                         "data_collection_order": 1}
    assert rec["source"] == {"connector": "sqlserver", "name": "test_server",
                             "version": "2.7.0.Final"}


def test_cloudevent_streaming_sqlserver_event_equals_envelope() -> None:
    """A streaming CloudEvent and the plain envelope it was made from give the same record."""
    commit, change = "00000027:00000758:0005", "00000027:00000758:0003"
    after = {"pk": 1, "name": "Bob"}
    envelope = {"before": None, "after": after,
                "source": sqlserver_source("testDB", "a", commit=commit, change=change,
                                           serial=1, name="test_server",
                                           ts_ms=1578923739738),
                "op": "c", "ts_ms": None, "transaction": None}
    envelope["source"]["version"] = "2.7.0.Final"
    doc = sqlserver_cloudevent(False)
    doc.update({"id": f"name:test_server;change_lsn:{change};commit_lsn:{commit};"
                      "event_serial_no:1",
                "iodebeziumop": "c", "iodebeziumsnapshot": "false",
                "iodebeziumchangelsn": change, "iodebeziumcommitlsn": commit,
                "iodebeziumeventserialno": "1", "data": {"before": None, "after": after}})
    for name in ("iodebeziumtxid", "iodebeziumtxtotalorder", "iodebeziumtxdatacollectionorder"):
        del doc[name]
    from_ce = one_change([RawRecord(topic="test_server.testDB.dbo.a", partition=0, offset=0,
                                    key=b'{"pk":1}', value=json.dumps(doc).encode())])
    from_env = one_change([RawRecord(topic="test_server.testDB.dbo.a", partition=0, offset=0,
                                     key=b'{"pk":1}', value=json.dumps(envelope).encode())])
    assert from_ce == from_env
    assert from_ce["position"]["event_serial_no"] == 1
