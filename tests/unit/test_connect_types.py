"""Connect type names as the real connector and converters write them (float/real columns).

Kafka's JsonConverter names two Connect types differently from ``Schema.Type``
(``connect/json/.../JsonSchema.java``: ``FLOAT_TYPE_NAME = "float"``, ``DOUBLE_TYPE_NAME =
"double"``; ``JsonConverter#asJsonSchema`` writes FLOAT32 as ``"float"`` and FLOAT64 as
``"double"``, ``#asConnectSchema`` reads only those, anything else is "Unknown schema type").
Debezium's SQL Server connector maps ``real`` → FLOAT32, ``float`` → FLOAT64, ``tinyint`` →
INT16 (``SqlServerValueConverters#schemaBuilder``, ``JdbcValueConverters#schemaBuilder``; the
connector documentation's type table). Confluent's ``AvroData#fromConnectSchema`` writes FLOAT32
as Avro ``float``, FLOAT64 as ``double``, INT8/INT16 as ``int`` with ``connect.type``.

The input below is written literally, field by field, as that connector + converter pair writes
it for one table; expected values come from those sources, SPEC §5.1 (canonical values) and
``ces.md`` §1.7/§7 (CES strings and the Connect-type fallbacks), never from this program's output.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.cli import main
from debezium_bridge.errors import SchemaError
from debezium_bridge.formats.columns import columns_of
from debezium_bridge.formats.debezium.avro import AvroNames, table_from_avro
from debezium_bridge.model.schema import column_from_connect, table_from_connect
from debezium_bridge.testing.corpus import bulk_corpus

TOPIC = "server1.testDB.dbo.measurements"

KAFKA_JSON_TYPE_NAMES = frozenset({"boolean", "int8", "int16", "int32", "int64", "float", "double",
                                   "bytes", "string", "array", "map", "struct"})
"""Every ``type`` ``JsonConverter#asConnectSchema`` accepts (``JsonSchema.*_TYPE_NAME``)."""


def _f(ctype: str, field: str, optional: bool = True, **extra: Any) -> dict[str, Any]:
    """A field schema in JsonConverter's key order: type, optional, name, version, parameters,
    default, field (``JsonConverter#asJsonSchema``)."""
    return {"type": ctype, "optional": optional, **extra, "field": field}


DECIMAL = "org.apache.kafka.connect.data.Decimal"
ROW_FIELDS = [
    _f("int32", "id", False),                                       # int
    _f("double", "f_float"),                                        # float(53): FLOAT64
    _f("float", "f_real"),                                          # real: FLOAT32
    _f("int16", "f_tinyint"),                                       # tinyint: INT16
    _f("int16", "f_smallint"),
    _f("int32", "f_int"),
    _f("int64", "f_bigint"),
    _f("boolean", "f_bit"),
    _f("bytes", "f_decimal", name=DECIMAL, version=1,               # decimal(10,2)
       parameters={"scale": "2", "connect.decimal.precision": "10"}),
    _f("bytes", "f_money", name=DECIMAL, version=1,                 # money
       parameters={"scale": "4", "connect.decimal.precision": "19"}),
    _f("string", "f_nvarchar"),                                     # nvarchar(50)
    _f("bytes", "f_varbinary"),                                     # varbinary(16)
    _f("int32", "f_date", name="io.debezium.time.Date", version=1),
    _f("int64", "f_datetime2", name="io.debezium.time.NanoTimestamp", version=1),  # datetime2(7)
    _f("string", "f_datetimeoffset", name="io.debezium.time.ZonedTimestamp", version=1),
    _f("string", "f_uniqueidentifier"),
]
ROW_STRUCT = {"type": "struct", "fields": ROW_FIELDS, "optional": True, "name": f"{TOPIC}.Value"}
KEY_SCHEMA = {"type": "struct", "fields": [_f("int32", "id", False)], "optional": False,
              "name": f"{TOPIC}.Key"}
SOURCE_SCHEMA = {
    "type": "struct",
    "fields": [
        _f("string", "version", False), _f("string", "connector", False),
        _f("string", "name", False), _f("int64", "ts_ms", False),
        _f("string", "snapshot", True, name="io.debezium.data.Enum", version=1,
           parameters={"allowed": "true,first,first_in_data_collection,"
                                  "last_in_data_collection,last,false,incremental"},
           default="false"),
        _f("string", "db", False), _f("string", "sequence"), _f("int64", "ts_us"),
        _f("int64", "ts_ns"), _f("string", "schema", False), _f("string", "table", False),
        _f("string", "change_lsn"), _f("string", "commit_lsn"), _f("int64", "event_serial_no"),
    ],
    "optional": False, "name": "io.debezium.connector.sqlserver.Source", "version": 1,
    "field": "source",
}
TX_SCHEMA = {"type": "struct", "fields": [
    _f("string", "id", False), _f("int64", "total_order", False),
    _f("int64", "data_collection_order", False)],
    "optional": True, "name": "event.block", "version": 1, "field": "transaction"}


def envelope_schema(row: dict[str, Any], topic: str = TOPIC) -> dict[str, Any]:
    """A Debezium 3.x envelope schema (reference §1.1/§1.2 field order, versions 2 and 1)."""
    return {"type": "struct", "fields": [
        {**row, "field": "before"}, {**row, "field": "after"}, SOURCE_SCHEMA, TX_SCHEMA,
        _f("string", "op", False), _f("int64", "ts_ms"), _f("int64", "ts_us"),
        _f("int64", "ts_ns")],
        "optional": False, "name": f"{topic}.Envelope", "version": 2}


# The connector's Connect values as JsonConverter prints them: Jackson writes a Float with
# Float.toString (real 1.1 → 1.1), decimals as BigInteger.toByteArray in base64 (12345.67 at
# scale 2 = 1234567 = 0x12D687; money 200000.0000 is the real 1.6 capture's "dzWUAA=="), dates as
# days since 1970-01-01 (2024-02-29 = 19782), NanoTimestamp as epoch nanoseconds
# (2024-02-29T12:34:56.1234567 = 1709210096123456700), ZonedTimestamp keeping the offset.
ROW = {
    "id": 1, "f_float": 42.5, "f_real": 1.1, "f_tinyint": 255, "f_smallint": -32768,
    "f_int": 2147483647, "f_bigint": 9223372036854775807, "f_bit": True, "f_decimal": "EtaH",
    "f_money": "dzWUAA==", "f_nvarchar": "h\u00e9llo", "f_varbinary": "3q2+7w==",
    "f_date": 19782, "f_datetime2": 1709210096123456700,
    "f_datetimeoffset": "2024-02-29T12:34:56.1234567+01:00",
    "f_uniqueidentifier": "6F9619FF-8B86-D011-B42D-00C04FC964FF",
}
UPDATED = {**ROW, "f_float": -0.25, "f_real": 0.1}
# SPEC §5.1: decimals/money exact strings with their scale, floats as numbers, bit a boolean,
# date YYYY-MM-DD, datetime2 without zone (7 digits: NanoTimestamp), offset kept, binary base64.
CANONICAL = {
    "id": 1, "f_float": 42.5, "f_real": 1.1, "f_tinyint": 255, "f_smallint": -32768,
    "f_int": 2147483647, "f_bigint": 9223372036854775807, "f_bit": True,
    "f_decimal": "12345.67", "f_money": "200000.0000", "f_nvarchar": "h\u00e9llo",
    "f_varbinary": "3q2+7w==", "f_date": "2024-02-29",
    "f_datetime2": "2024-02-29T12:34:56.1234567",
    "f_datetimeoffset": "2024-02-29T12:34:56.1234567+01:00",
    "f_uniqueidentifier": "6F9619FF-8B86-D011-B42D-00C04FC964FF",
}
CANONICAL_UPDATED = {**CANONICAL, "f_float": -0.25, "f_real": 0.1}


def _source(n: int, table: str = "measurements") -> dict[str, Any]:
    ts_ms = 1_709_210_096_000 + n
    return {"version": "3.4.0.Final", "connector": "sqlserver", "name": "server1",
            "ts_ms": ts_ms, "snapshot": "false", "db": "testDB", "sequence": None,
            "ts_us": ts_ms * 1000, "ts_ns": ts_ms * 1_000_000, "schema": "dbo", "table": table,
            "change_lsn": f"00000027:{n:08x}:0002", "commit_lsn": f"00000027:{n:08x}:0005",
            "event_serial_no": 1 if n == 1 else 2}


def _payload(op: str, before: Any, after: Any, n: int, table: str = "measurements"
             ) -> dict[str, Any]:
    ts_ms = 1_709_210_097_000 + n
    return {"before": before, "after": after, "source": _source(n, table), "transaction": None,
            "op": op, "ts_ms": ts_ms, "ts_us": ts_ms * 1000, "ts_ns": ts_ms * 1_000_000}


def _line(topic: str, offset: int, key: Any, value: Any) -> str:
    """One lossless dump line (README: topic, partition, offset, timestamp, headers, key_b64,
    value_b64)."""
    def b64(doc: Any) -> str | None:
        if doc is None:
            return None
        return base64.b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode()
    return json.dumps({"topic": topic, "partition": 0, "offset": offset,
                       "timestamp": 1_709_210_097_000 + offset, "headers": [],
                       "key_b64": b64(key), "value_b64": b64(value)})


def _with_schema(schema: Any, payload: Any) -> dict[str, Any]:
    return {"schema": schema, "payload": payload}


def connector_dump(path: Path) -> Path:
    """An insert and an update of the table, schema-ful JsonConverter key and value."""
    schema = envelope_schema(ROW_STRUCT)
    key = _with_schema(KEY_SCHEMA, {"id": 1})
    lines = [_line(TOPIC, 0, key, _with_schema(schema, _payload("c", None, ROW, 1))),
             _line(TOPIC, 1, key, _with_schema(schema, _payload("u", ROW, UPDATED, 2)))]
    path.write_text("\n".join(lines) + "\n")
    return path


def convert(*args: str) -> int:
    return main(["convert", *args, "--progress", "never"])


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def value_of(line: dict[str, Any]) -> Any:
    return json.loads(base64.b64decode(line["value_b64"])) if line["value_b64"] else None


def schema_types(schema: Any) -> set[str]:
    """Every ``type`` in a JsonConverter schema (struct fields, array items, map keys/values)."""
    found = {schema["type"]}
    for child in [*schema.get("fields", ()), *(schema[k] for k in ("items", "keys", "values")
                                                if k in schema)]:
        found |= schema_types(child)
    return found


# --------------------------------------------------------------------------- reading schemas


def test_jsonconverter_names_are_read_as_connect_types() -> None:
    from debezium_bridge.model.schema import connect_type_from_json, json_type_name

    assert column_from_connect(_f("double", "x")).connect_type == "float64"
    assert column_from_connect(_f("float", "x")).connect_type == "float32"
    # the bridge's own output before this fix wrote the Schema.Type names: still read
    assert column_from_connect(_f("float64", "x")).connect_type == "float64"
    assert column_from_connect(_f("float32", "x")).connect_type == "float32"
    for name in KAFKA_JSON_TYPE_NAMES:
        assert json_type_name(connect_type_from_json(name)) == name
    with pytest.raises(SchemaError, match="f_money"):
        column_from_connect(_f("decimal", "f_money"))  # not a JsonConverter type name


def test_sql_types_of_the_connector_schema() -> None:
    """ces.md §7 fallbacks without propagated source types (lossy where the Connect type is)."""
    types = {c.name: c.type for c in columns_of(table_from_connect(ROW_STRUCT))}
    assert types == {
        "id": "int", "f_float": "float", "f_real": "real", "f_tinyint": "smallint",
        "f_smallint": "smallint", "f_int": "int", "f_bigint": "bigint", "f_bit": "bit",
        "f_decimal": "decimal(10,2)", "f_money": "decimal(19,4)", "f_nvarchar": "nvarchar(max)",
        "f_varbinary": "varbinary(max)", "f_date": "date", "f_datetime2": "datetime2(7)",
        "f_datetimeoffset": "datetimeoffset(7)", "f_uniqueidentifier": "nvarchar(max)"}


def test_unknown_type_name_is_a_dead_letter(tmp_path: Path) -> None:
    bad = {**ROW_STRUCT, "fields": [*ROW_FIELDS[:1], _f("decimal128", "f_float")]}
    dump = tmp_path / "bad.jsonl"
    dump.write_text(_line(TOPIC, 0, _with_schema(KEY_SCHEMA, {"id": 1}), _with_schema(
        envelope_schema(bad), _payload("c", None, {"id": 1, "f_float": 42.5}, 1))) + "\n")
    out, dlq = tmp_path / "out.jsonl", tmp_path / "dlq.jsonl"
    assert convert(str(dump), "-o", str(out), "--dlq", str(dlq), "--fail-on-error") == 1
    assert jsonl(out) == []
    (dead,) = jsonl(dlq)
    headers = {name: base64.b64decode(v).decode() for name, v in dead["headers"] if v}
    assert headers["__connect.errors.stage"] == "schema"
    assert "decimal128" in headers["__connect.errors.exception.message"]


def test_avro_types_as_avrodata_writes_them() -> None:
    """``AvroData#fromConnectSchema``: float/double, int + connect.type for INT16, long."""
    record = {"type": "record", "name": "Value", "namespace": "server1.testDB.dbo.measurements",
              "fields": [
                  {"name": "id", "type": "int"},
                  {"name": "f_float", "type": ["null", "double"], "default": None},
                  {"name": "f_real", "type": ["null", "float"], "default": None},
                  {"name": "f_tinyint", "type": ["null", {"type": "int", "connect.type": "int16"}],
                   "default": None},
                  {"name": "f_bigint", "type": ["null", "long"], "default": None}],
              "connect.name": f"{TOPIC}.Value"}
    table = table_from_avro(record, AvroNames(record))
    assert [c.connect_type for c in table.columns] == [
        "int32", "float64", "float32", "int16", "int64"]
    assert [c.type for c in columns_of(table)] == ["int", "float", "real", "smallint", "bigint"]
    odd = {**record, "fields": [{"name": "n", "type": {"type": "int", "connect.type": "uint8"}}]}
    with pytest.raises(SchemaError, match="uint8"):  # AvroData: DataException, no guess
        table_from_avro(odd, AvroNames(odd))


# --------------------------------------------------------------------------- end to end (CLI)


def test_cli_canonical_values(tmp_path: Path) -> None:
    """Float and real values were already read right (the bug was in their SQL types); this pins
    the canonical row of every column type the other tests build on."""
    dump = connector_dump(tmp_path / "in.jsonl")
    out, dlq = tmp_path / "out.jsonl", tmp_path / "dlq.jsonl"
    assert convert(str(dump), "-o", str(out), "--dlq", str(dlq), "--fail-on-error") == 0
    insert, update = jsonl(out)
    assert (insert["op"], insert["after"]) == ("insert", CANONICAL)
    assert (update["op"], update["before"], update["after"]) == (
        "update", CANONICAL, CANONICAL_UPDATED)
    assert update["changed_columns"] == ["f_float", "f_real"]


def test_cli_canonical_double_mode_money_keeps_its_scale(tmp_path: Path) -> None:
    """``decimal.handling.mode=double`` + ``column.propagate.source.type``: a money column is a
    FLOAT64 (``"double"``) with MONEY/19/4 parameters; SPEC §5.1 wants money as an exact decimal
    string with its scale, and CES ``cols[].type`` ``money`` (the propagated type)."""
    topic = "server1.testDB.dbo.prices"
    row = {"type": "struct", "fields": [
        _f("int32", "id", False),
        _f("double", "price", parameters={"__debezium.source.column.type": "MONEY",
                                          "__debezium.source.column.length": "19",
                                          "__debezium.source.column.scale": "4"})],
        "optional": True, "name": f"{topic}.Value"}
    key = {**KEY_SCHEMA, "name": f"{topic}.Key"}
    dump = tmp_path / "prices.jsonl"
    dump.write_text(_line(topic, 0, _with_schema(key, {"id": 7}), _with_schema(
        envelope_schema(row, topic), _payload("c", None, {"id": 7, "price": 42.5}, 1,
                                              "prices"))) + "\n")
    out, ces = tmp_path / "out.jsonl", tmp_path / "ces.jsonl"
    assert convert(str(dump), "-o", str(out), "--fail-on-error") == 0
    assert jsonl(out)[0]["after"] == {"id": 7, "price": "42.5000"}
    assert convert(str(dump), "--to", "ces", "-o", str(ces), "--fail-on-error") == 0
    (data,) = (_ces_data(e) for e in jsonl(ces))
    assert [(c["name"], c["type"]) for c in data["eventsource"]["cols"]] == [
        ("id", "int"), ("price", "money")]
    assert json.loads(data["eventrow"]["current"]) == {"id": "7", "price": "42.5000"}


def _ces_data(event: dict[str, Any]) -> dict[str, Any]:
    data = event["data"]
    return data if isinstance(data, dict) else json.loads(data)  # type: ignore[no-any-return]


# ces.md §1.7: documented ints and datetime2 (style 121), the recommended defaults elsewhere
# (shortest round-trip floats, bit 1/0, decimals at their scale, 0x + upper hex, upper GUIDs)
CES_CURRENT = {
    "id": "1", "f_float": "42.5", "f_real": "1.1", "f_tinyint": "255", "f_smallint": "-32768",
    "f_int": "2147483647", "f_bigint": "9223372036854775807", "f_bit": "1",
    "f_decimal": "12345.67", "f_money": "200000.0000", "f_nvarchar": "h\u00e9llo",
    "f_varbinary": "0xDEADBEEF", "f_date": "2024-02-29",
    "f_datetime2": "2024-02-29 12:34:56.1234567",
    "f_datetimeoffset": "2024-02-29 12:34:56.1234567 +01:00",
    "f_uniqueidentifier": "6F9619FF-8B86-D011-B42D-00C04FC964FF",
}


def test_cli_to_ces_types_and_values(tmp_path: Path) -> None:
    dump = connector_dump(tmp_path / "in.jsonl")
    out, dlq = tmp_path / "ces.jsonl", tmp_path / "dlq.jsonl"
    code = convert(str(dump), "--to", "ces", "-o", str(out), "--dlq", str(dlq), "--fail-on-error")
    assert not dlq.exists() or dlq.read_text() == ""  # before the fix: "cannot render 42.5 as text"
    assert code == 0
    insert, update = (_ces_data(e) for e in jsonl(out))
    cols = {c["name"]: c["type"] for c in insert["eventsource"]["cols"]}
    assert (cols["f_float"], cols["f_real"]) == ("float", "real")
    assert (cols["f_tinyint"], cols["f_bigint"], cols["f_bit"]) == ("smallint", "bigint", "bit")
    assert json.loads(insert["eventrow"]["current"]) == CES_CURRENT
    assert json.loads(update["eventrow"]["old"]) == CES_CURRENT
    assert json.loads(update["eventrow"]["current"]) == {
        **CES_CURRENT, "f_float": "-0.25", "f_real": "0.1"}


def _row_fields(envelope: dict[str, Any]) -> dict[str, dict[str, Any]]:
    after = next(f for f in envelope["fields"] if f["field"] == "after")
    return {f["field"]: f for f in after["fields"]}


def test_cli_to_debezium_writes_jsonconverter_names_and_reads_back(tmp_path: Path) -> None:
    dump = connector_dump(tmp_path / "in.jsonl")
    out, back = tmp_path / "dbz.jsonl", tmp_path / "back.jsonl"
    assert convert(str(dump), "--to", "debezium", "-o", str(out), "--fail-on-error") == 0
    written = [value_of(line) for line in jsonl(out)]
    assert [w["payload"]["op"] for w in written] == ["c", "u"]
    schema = written[0]["schema"]
    assert schema_types(schema) <= KAFKA_JSON_TYPE_NAMES  # what JsonConverter can read
    fields = _row_fields(schema)
    assert (fields["f_float"]["type"], fields["f_real"]["type"]) == ("double", "float")
    assert (fields["f_tinyint"]["type"], fields["f_bigint"]["type"]) == ("int16", "int64")
    assert fields["f_bit"]["type"] == "boolean"
    assert written[0]["payload"]["after"]["f_float"] == 42.5
    assert written[0]["payload"]["after"]["f_real"] == 1.1
    key_schema = json.loads(base64.b64decode(jsonl(out)[0]["key_b64"]))["schema"]
    assert schema_types(key_schema) <= KAFKA_JSON_TYPE_NAMES
    # this project's own decoder reads it back to the same canonical rows
    assert convert(str(out), "-o", str(back), "--fail-on-error") == 0
    insert, update = jsonl(back)
    assert insert["after"] == CANONICAL
    assert (update["before"], update["after"]) == (CANONICAL, CANONICAL_UPDATED)


def test_cli_to_debezium_avro_types_and_round_trip(tmp_path: Path) -> None:
    dump = connector_dump(tmp_path / "in.jsonl")
    out, schemas, back = tmp_path / "avro.jsonl", tmp_path / "ids.json", tmp_path / "back.jsonl"
    assert convert(str(dump), "--to", "debezium-avro", "-o", str(out),
                   "--output-avro-schemas", str(schemas), "--fail-on-error") == 0
    registered = json.loads(schemas.read_text())
    envelope = next(s for s in registered.values() if s.get("name") == "Envelope")
    before = next(f for f in envelope["fields"] if f["name"] == "before")
    row = before["type"][1]  # ["null", record]; "after" refers to it by name
    # the writer adds the propagated SQL types as connect.parameters; compare the rest
    types = {f["name"]: f["type"] for f in row["fields"]}
    types = {name: [t if isinstance(t, str) else
                    {k: v for k, v in t.items() if k != "connect.parameters"} for t in union]
             for name, union in types.items()}
    assert types["f_float"] == ["null", {"type": "double"}]
    assert types["f_real"] == ["null", {"type": "float"}]
    assert types["f_tinyint"] == ["null", {"type": "int", "connect.type": "int16"}]
    assert types["f_bigint"] == ["null", {"type": "long"}]
    assert types["f_bit"] == ["null", {"type": "boolean"}]
    assert convert(str(out), "--avro-schemas", str(schemas), "-o", str(back),
                   "--fail-on-error") == 0
    insert, update = jsonl(back)
    assert insert["after"] == CANONICAL
    assert update["after"] == CANONICAL_UPDATED


def test_cli_schemaless_with_a_table_schema_copied_from_a_message(tmp_path: Path) -> None:
    """``--table-schemas`` with the ``schema`` of a real message (``"double"``/``"float"``)."""
    dump = tmp_path / "plain.jsonl"
    dump.write_text(_line(TOPIC, 0, {"id": 1}, _payload("c", None, ROW, 1)) + "\n")
    table_schemas = tmp_path / "tables.json"
    table_schemas.write_text(json.dumps({TOPIC: {"schema": envelope_schema(ROW_STRUCT)}}))
    out = tmp_path / "ces.jsonl"
    assert convert(str(dump), "--table-schemas", str(table_schemas), "--to", "ces",
                   "-o", str(out), "--fail-on-error") == 0
    (event,) = (_ces_data(e) for e in jsonl(out))
    cols = {c["name"]: c["type"] for c in event["eventsource"]["cols"]}
    assert (cols["f_float"], cols["f_real"]) == ("float", "real")
    assert json.loads(event["eventrow"]["current"]) == CES_CURRENT


# --------------------------------------------------------------------------- generators, Spark


def test_corpus_writes_schemas_as_jsonconverter_does() -> None:
    record = next(iter(bulk_corpus(1, table="wide")))
    schema = json.loads(record.value or b"")["schema"]
    assert schema_types(schema) <= KAFKA_JSON_TYPE_NAMES
    fields = _row_fields(schema)
    assert (fields["c_float"]["type"], fields["c_real"]["type"]) == ("double", "float")
    assert fields["c_tinyint"]["type"] == "int16"


def test_spark_typed_rows_of_the_connector_schema() -> None:
    pytest.importorskip("pyspark")
    from debezium_bridge.spark.rows import canonical_schema

    ddl = canonical_schema(table_from_connect(ROW_STRUCT), ("id",))
    after = ddl.split("after struct<", 1)[1].split(">", 1)[0]
    assert after == (
        "`id`: int, `f_float`: double, `f_real`: float, `f_tinyint`: smallint, "
        "`f_smallint`: smallint, `f_int`: int, `f_bigint`: bigint, `f_bit`: boolean, "
        "`f_decimal`: string, `f_money`: string, `f_nvarchar`: string, `f_varbinary`: string, "
        "`f_date`: string, `f_datetime2`: string, `f_datetimeoffset`: string, "
        "`f_uniqueidentifier`: string")
    assert "key struct<`id`: int>" in ddl


def test_simulator_writes_what_the_connector_writes() -> None:
    """The simulated connector's schema and payload for the same table and row are the literal
    connector output above (Debezium 3.4 defaults, no propagated source types)."""
    from debezium_bridge.formats.debezium.encode import TableSpec
    from debezium_bridge.formats.debezium.sqltypes import SqlColumn
    from debezium_bridge.testing.simulator import CdcSimulator, Insert

    table = TableSpec(db="testDB", schema="dbo", table="measurements", key_columns=("id",),
                      columns=(
                          SqlColumn("id", "int", nullable=False), SqlColumn("f_float", "float"),
                          SqlColumn("f_real", "real"), SqlColumn("f_tinyint", "tinyint"),
                          SqlColumn("f_smallint", "smallint"), SqlColumn("f_int", "int"),
                          SqlColumn("f_bigint", "bigint"), SqlColumn("f_bit", "bit"),
                          SqlColumn("f_decimal", "decimal(10,2)"), SqlColumn("f_money", "money"),
                          SqlColumn("f_nvarchar", "nvarchar(50)"),
                          SqlColumn("f_varbinary", "varbinary(16)"), SqlColumn("f_date", "date"),
                          SqlColumn("f_datetime2", "datetime2(7)"),
                          SqlColumn("f_datetimeoffset", "datetimeoffset(7)"),
                          SqlColumn("f_uniqueidentifier", "uniqueidentifier")))
    sim = CdcSimulator([table], version="3.4.0.Final", partitions=1)
    (produced,) = sim.commit([Insert("measurements", CANONICAL)])
    value = json.loads(produced.record.value or b"")
    assert value["schema"] == envelope_schema(ROW_STRUCT)
    assert value["payload"]["after"] == ROW
    assert json.loads(produced.record.key or b"") == _with_schema(KEY_SCHEMA, {"id": 1})
