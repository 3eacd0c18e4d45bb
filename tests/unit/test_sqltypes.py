"""SQL Server → Connect schemas and values, checked against real captures and documented facts.

Facts used (never this code's own output):
* the real Debezium 1.6 SQL Server delete event in ``tests/data/debezium-server-redis-sqlserver``;
* Materialize's testdrive expectations (``tests/data/materialize-sqlserver-testdrive``);
* the reference ``debezium-sqlserver.md`` §1 and §5 and the Debezium sources it cites;
* a real Debezium 3.1.3 JsonConverter capture (Postgres connector, public tutorial log) for the
  2.6+/3.1+ version numbers of the envelope, ``event.block`` and ``Source`` structs;
* Java ``BigInteger.toByteArray`` / ``DateTimeFormatter.ISO_*`` behaviour and Confluent
  ``AvroData#fromConnectSchema``.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from debezium_bridge.errors import SchemaError, ValueConversionError
from debezium_bridge.formats.debezium.connect_schema import avro_schema_for, connect_struct_schema
from debezium_bridge.formats.debezium.encode import (
    Change,
    DebeziumEncoder,
    TableSpec,
    TransactionTopicEncoder,
    features,
)
from debezium_bridge.formats.debezium.registry import InMemoryRegistry
from debezium_bridge.formats.debezium.sqltypes import (
    UNAVAILABLE_VALUE,
    ConnectorModes,
    SqlColumn,
    connect_column,
    decimal_bytes,
    encode_value,
    float32,
    json_value,
    sql_value_encoder,
)
from debezium_bridge.model.schema import table_from_connect
from tests.paths import DATA

REDIS = DATA / "debezium-server-redis-sqlserver"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def col(sql_type: str, modes: ConnectorModes | None = None, **kw: Any) -> Any:
    return connect_column(SqlColumn("c", sql_type, **kw), modes or ConnectorModes())


def avro_decode(registry: InMemoryRegistry, message: bytes) -> Any:
    """Decode a Confluent wire-format message with the writer schema from the registry."""
    schema = fastavro.parse_schema(registry.schemas[int.from_bytes(message[1:5], "big")])
    return fastavro.schemaless_reader(io.BytesIO(message[5:]), schema, schema)


def load(path: Path) -> Any:
    return json.loads(path.read_text())


EMP = TableSpec(
    db="RedisConnect", schema="dbo", table="emp", key_columns=("empno",),
    columns=(
        SqlColumn("empno", "int", nullable=False), SqlColumn("fname", "varchar(50)"),
        SqlColumn("lname", "varchar(50)"), SqlColumn("job", "varchar(50)"),
        SqlColumn("mgr", "int"), SqlColumn("hiredate", "datetime"), SqlColumn("sal", "money"),
        SqlColumn("comm", "money"), SqlColumn("dept", "int"),
    ),
)
EMP_ROW = {"empno": 11, "fname": "Yossi", "lname": "Mague", "job": "PFE", "mgr": 1,
           "hiredate": "2019-07-09T00:00:00", "sal": "200000.0000", "comm": "10.0000", "dept": 3}
EMP_DELETE = Change(op="d", before=EMP_ROW, commit_lsn="0000003a:00002f50:0005",
                    change_lsn="0000003a:00002f50:0002", event_serial_no=1,
                    source_ts_ms=1637859764960, ts_ms=1637859769370)


# --------------------------------------------------------------------------- values: real samples


def test_money_values_of_the_real_redis_capture() -> None:
    money = col("money")
    assert json_value(encode_value(money, "200000.0000")) == "dzWUAA=="
    assert json_value(encode_value(money, "10.0000")) == "AYag"


def test_datetime_value_of_the_real_redis_capture() -> None:
    hiredate = col("datetime")
    assert (hiredate.connect_type, hiredate.semantic, hiredate.version) == (
        "int64", "io.debezium.time.Timestamp", 1)
    assert encode_value(hiredate, "2019-07-09T00:00:00") == 1562630400000


def test_materialize_types_table() -> None:
    # 20-populate-types.td / 40-check-types.td
    assert encode_value(col("datetime2(7)"), "2010-11-12T13:14:15.1234567") == 1289567655123456700
    assert col("datetime2(7)").semantic == "io.debezium.time.NanoTimestamp"
    assert encode_value(col("datetimeoffset(4)"),
                        "2025-12-10 12:32:10.0000 +01:00") == "2025-12-10T12:32:10+01:00"
    unscaled = int.from_bytes(encode_value(col("decimal(5,2)"), "123.45"), "big", signed=True)
    assert decimal.Decimal(unscaled).scaleb(-2) == decimal.Decimal("123.45")
    small = encode_value(col("smalldatetime"), "1900-01-01T11:12:00")
    smalldatetime = dt.datetime(1900, 1, 1, 11, 12, tzinfo=dt.UTC)
    assert small == (smalldatetime - EPOCH) // dt.timedelta(milliseconds=1)
    assert encode_value(col("bit"), True) is True


def test_documented_microtimestamp_example() -> None:
    # DOC "Timestamp values": 2018-06-20 15:13:16.945104 → 1529507596945104
    assert encode_value(col("datetime2(6)"), "2018-06-20T15:13:16.945104") == 1529507596945104


def test_datetimeoffset_keeps_the_stored_offset() -> None:
    # AbstractSqlServerDatatypesTest expects "2018-07-13T12:23:45.456+11:00"
    zoned = col("datetimeoffset(7)")
    assert (zoned.connect_type, zoned.semantic) == ("string", "io.debezium.time.ZonedTimestamp")
    assert encode_value(zoned, "2018-07-13T12:23:45.4560000+11:00") == \
        "2018-07-13T12:23:45.456+11:00"
    assert encode_value(zoned, "2018-07-13T12:23:45+00:00") == "2018-07-13T12:23:45Z"


def test_timestamps_before_1970_are_exact_and_floored() -> None:
    value = "1969-12-31T23:59:59.9999999"
    assert encode_value(col("datetime2(7)"), value) == -100
    assert encode_value(col("datetime2(5)"), "1969-12-31T23:59:59.99999") == -10
    assert encode_value(col("datetime2(2)"), "1969-12-31T23:59:59.99") == -10
    # connect mode's millisecond types cut finer digits as the connector does: floor like Instant
    connect = ConnectorModes(time_precision_mode="connect")
    assert encode_value(col("datetime2(7)", connect), value) == -1
    with pytest.raises(ValueConversionError, match="more fraction digits"):
        encode_value(col("datetime2(5)"), value)  # a value of another column type: not cut
    moon = dt.datetime(1969, 7, 20, 20, 17, 40, 500000, tzinfo=dt.UTC)
    assert encode_value(col("datetime2(7)"), "1969-07-20T20:17:40.5000000") == \
        (moon - EPOCH) // dt.timedelta(microseconds=1) * 1000


def test_nano_timestamp_outside_int64_is_refused() -> None:
    # DOC: datetime2(7) only fits 1677..2262; the connector throws for 9999-12-31
    with pytest.raises(ValueConversionError):
        encode_value(col("datetime2(7)"), "9999-12-31T23:59:59.9999999")
    assert encode_value(col("datetime2(3)"), "9999-12-31T23:59:59.997") == 253402300799997


def test_dates_and_times() -> None:
    assert encode_value(col("date"), "2019-07-09") == 18086
    assert encode_value(col("date"), "1969-12-31") == -1
    assert encode_value(col("time(3)"), "01:02:03.456") == 3723456
    assert encode_value(col("time(6)"), "01:02:03.456789") == 3723456789
    assert encode_value(col("time(7)"), "23:59:59.9999999") == 86399999999900
    assert encode_value(col("time", ConnectorModes(time_precision_mode="connect")),
                        "01:02:03.4567891") == 3723456


def test_isostring_mode_uses_java_iso_offset_formats() -> None:
    iso = ConnectorModes(time_precision_mode="isostring")
    # IsoDate: ISO_OFFSET_DATE, IsoTime: ISO_OFFSET_TIME, IsoTimestamp: ISO_OFFSET_DATE_TIME (UTC)
    assert encode_value(col("date", iso), "2023-11-21") == "2023-11-21Z"
    assert encode_value(col("time(0)", iso), "10:15:30") == "10:15:30Z"
    assert encode_value(col("time(7)", iso), "10:15:30.1200000") == "10:15:30.12Z"
    assert encode_value(col("datetime2(7)", iso), "2011-12-03T10:15:30.0000000") == \
        "2011-12-03T10:15:30Z"
    assert encode_value(col("datetime", iso), "2011-12-03T10:15:30.007") == \
        "2011-12-03T10:15:30.007Z"
    assert encode_value(col("datetimeoffset(2)", iso), "2011-12-03T10:15:30.10-05:00") == \
        "2011-12-03T10:15:30.1-05:00"


def test_decimal_bytes_match_java_biginteger() -> None:
    # BigInteger.valueOf(n).toByteArray()
    assert decimal_bytes(0) == b"\x00"
    assert decimal_bytes(127) == b"\x7f"
    assert decimal_bytes(128) == b"\x00\x80"
    assert decimal_bytes(-1) == b"\xff"
    assert decimal_bytes(-128) == b"\x80"
    assert decimal_bytes(-129) == b"\xff\x7f"
    assert decimal_bytes(2_000_000_000) == base64.b64decode("dzWUAA==")


def test_decimal_scale_is_exact() -> None:
    dec = col("decimal(10,2)")
    assert encode_value(dec, "42") == encode_value(dec, "42.00") == decimal_bytes(4200)
    assert encode_value(dec, "-0.5") == decimal_bytes(-50)
    with pytest.raises(ValueConversionError):
        encode_value(dec, "1.234")
    with pytest.raises(ValueConversionError):
        encode_value(dec, "1e3")


def test_decimal_handling_modes() -> None:
    as_string = sql_value_encoder(SqlColumn("c", "decimal(10,2)"),
                                  ConnectorModes(decimal_handling_mode="string"))
    as_double = sql_value_encoder(SqlColumn("c", "money"),
                                  ConnectorModes(decimal_handling_mode="double"))
    assert as_string("42.5") == "42.50"
    assert as_double("10.0000") == 10.0
    assert as_string(None) is None


def test_binary_handling_modes() -> None:
    raw = "AQID/w=="  # 01 02 03 ff
    for mode, expected in [("bytes", b"\x01\x02\x03\xff"), ("base64", "AQID/w=="),
                           ("base64-url-safe", "AQID_w=="), ("hex", "010203ff")]:
        modes = ConnectorModes(binary_handling_mode=mode)  # type: ignore[arg-type]
        column = connect_column(SqlColumn("c", "varbinary(16)"), modes)
        assert column.connect_type == ("bytes" if mode == "bytes" else "string")
        assert sql_value_encoder(SqlColumn("c", "varbinary(16)"), modes)(raw) == expected


def test_unavailable_lob_placeholder() -> None:
    assert encode_value(col("nvarchar(max)"), UNAVAILABLE_VALUE) == UNAVAILABLE_VALUE
    assert encode_value(col("varbinary(max)"), UNAVAILABLE_VALUE) == \
        b"__debezium_unavailable_value"
    hex_mode = sql_value_encoder(SqlColumn("c", "varbinary(max)"),
                                 ConnectorModes(binary_handling_mode="hex"))
    assert hex_mode(UNAVAILABLE_VALUE) == b"__debezium_unavailable_value".hex()


def test_uniqueidentifier_is_upper_case_text() -> None:
    guid = sql_value_encoder(SqlColumn("c", "uniqueidentifier"))
    assert guid("6f9619ff-8b86-d011-b42d-00c04fc964ff") == "6F9619FF-8B86-D011-B42D-00C04FC964FF"
    assert col("uniqueidentifier").semantic is None


def test_real_values_are_float32_shortest() -> None:
    assert encode_value(col("real"), 3.14) == 3.14  # not 3.140000104904175
    assert float32(16777217.0) == 16777216.0
    assert float32(3.4028234663852886e38) == 3.4028235e38  # Float.toString(Float.MAX_VALUE)


def test_integers_are_range_checked() -> None:
    assert encode_value(col("tinyint"), 255) == 255
    with pytest.raises(ValueConversionError):
        encode_value(col("smallint"), 40000)
    with pytest.raises(ValueConversionError):
        encode_value(col("int"), True)


# --------------------------------------------------------------------------- schemas: §5 facts


@pytest.mark.parametrize(
    ("sql_type", "connect_type", "semantic"),
    [
        ("bit", "boolean", None),
        ("tinyint", "int16", None),  # 0..255 does not fit INT8
        ("smallint", "int16", None),
        ("int", "int32", None),
        ("bigint", "int64", None),
        ("real", "float32", None),
        ("float(24)", "float32", None),
        ("float(25)", "float64", None),
        ("float", "float64", None),
        ("char(3)", "string", None),
        ("nvarchar(max)", "string", None),
        ("text", "string", None),
        ("ntext", "string", None),
        ("xml", "string", "io.debezium.data.Xml"),
        ("uniqueidentifier", "string", None),
        ("binary(8)", "bytes", None),
        ("image", "bytes", None),
        ("date", "int32", "io.debezium.time.Date"),
        ("time(0)", "int32", "io.debezium.time.Time"),
        ("time(3)", "int32", "io.debezium.time.Time"),
        ("time(4)", "int64", "io.debezium.time.MicroTime"),
        ("time(6)", "int64", "io.debezium.time.MicroTime"),
        ("time", "int64", "io.debezium.time.NanoTime"),
        ("datetime", "int64", "io.debezium.time.Timestamp"),
        ("smalldatetime", "int64", "io.debezium.time.Timestamp"),
        ("datetime2(3)", "int64", "io.debezium.time.Timestamp"),
        ("datetime2(4)", "int64", "io.debezium.time.MicroTimestamp"),
        ("datetime2", "int64", "io.debezium.time.NanoTimestamp"),
        ("datetimeoffset(3)", "string", "io.debezium.time.ZonedTimestamp"),
    ],
)
def test_adaptive_type_mapping(sql_type: str, connect_type: str, semantic: str | None) -> None:
    column = col(sql_type)
    assert (column.connect_type, column.semantic) == (connect_type, semantic)
    assert column.version == (1 if semantic else None)


def test_money_and_decimal_parameters() -> None:
    assert col("money").parameters == {"scale": "4", "connect.decimal.precision": "19"}
    assert col("smallmoney").parameters == {"scale": "4", "connect.decimal.precision": "10"}
    assert col("numeric").parameters == {"scale": "0", "connect.decimal.precision": "18"}
    assert col("decimal", precision=12, scale=3).parameters == {
        "scale": "3", "connect.decimal.precision": "12"}
    double = col("money", ConnectorModes(decimal_handling_mode="double"))
    text = col("decimal(5,2)", ConnectorModes(decimal_handling_mode="string"))
    assert (double.connect_type, double.semantic) == ("float64", None)
    assert (text.connect_type, text.semantic) == ("string", None)


def test_connect_and_other_time_modes() -> None:
    connect = ConnectorModes(time_precision_mode="connect")
    assert (col("date", connect).connect_type, col("date", connect).semantic) == (
        "int32", "org.apache.kafka.connect.data.Date")
    # Kafka's Time logical type is INT32 (the DOC table's INT64 is a doc error)
    assert (col("time(7)", connect).connect_type, col("time(7)", connect).semantic) == (
        "int32", "org.apache.kafka.connect.data.Time")
    for sql_type in ("datetime", "smalldatetime", "datetime2(7)"):
        assert col(sql_type, connect).semantic == "org.apache.kafka.connect.data.Timestamp"
    assert col("datetimeoffset", connect).semantic == "io.debezium.time.ZonedTimestamp"
    micro = ConnectorModes(time_precision_mode="adaptive_time_microseconds")
    assert col("time(2)", micro).semantic == col("time(7)", micro).semantic == \
        "io.debezium.time.MicroTime"
    assert col("datetime2(7)", micro).semantic == "io.debezium.time.NanoTimestamp"
    iso = ConnectorModes(time_precision_mode="isostring")
    assert [col(t, iso).semantic for t in ("date", "time", "datetime2")] == [
        "io.debezium.time.IsoDate", "io.debezium.time.IsoTime", "io.debezium.time.IsoTimestamp"]


def test_propagated_source_type_parameters_follow_the_decimal_ones() -> None:
    column = col("decimal(10,2)", ConnectorModes(propagate_source_types=True))
    assert list(column.parameters.items()) == [
        ("scale", "2"), ("connect.decimal.precision", "10"),
        ("__debezium.source.column.type", "DECIMAL"),
        ("__debezium.source.column.length", "10"), ("__debezium.source.column.scale", "2")]
    assert column.source_type == "DECIMAL" and column.source_scale == 2
    text = col("nvarchar(255)", ConnectorModes(propagate_source_types=True))
    assert text.parameters == {"__debezium.source.column.type": "NVARCHAR",
                               "__debezium.source.column.length": "255"}
    assert col("datetime2(3)", ConnectorModes(propagate_source_types=True)).source_scale == 3


def test_unknown_types_are_schema_errors() -> None:
    with pytest.raises(SchemaError):
        col("geography")
    with pytest.raises(SchemaError):
        col("char(max)")


def test_struct_schema_key_order_is_jsonconverters() -> None:
    money = col("money")
    number = connect_column(SqlColumn("n", "int", nullable=False), ConnectorModes())
    schema = connect_struct_schema([money, number], "a.b.Value", field="after")
    assert list(schema) == ["type", "fields", "optional", "name", "field"]
    assert list(schema["fields"][0]) == ["type", "optional", "name", "version", "parameters",
                                         "field"]
    assert list(schema["fields"][1]) == ["type", "optional", "field"]
    assert table_from_connect(schema).columns == (money, number)


# --------------------------------------------------------------------------- envelopes


def test_1x_envelope_is_byte_identical_to_the_real_redis_capture() -> None:
    encoder = DebeziumEncoder(EMP, "redislabs", version="1.6.0.Final")
    key, value = encoder.encode(EMP_DELETE)
    def compact(doc: Any) -> bytes:
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()

    assert value == compact(load(REDIS / "delete_event_value.decoded.json"))
    assert key == compact(load(REDIS / "delete_event_key.decoded.json"))


def test_3x_source_schema_against_the_1x_capture_and_reference() -> None:
    real = load(REDIS / "delete_event_value.decoded.json")["schema"]
    real_source = next(f for f in real["fields"] if f["field"] == "source")
    encoder = DebeziumEncoder(EMP, "server1", version="3.4.0.Final")
    ours = next(f for f in encoder.value_schema["fields"] if f["field"] == "source")
    # reference §1.2: ts_us/ts_ns (optional INT64) after sequence; struct versioned from 3.1
    assert [f["field"] for f in ours["fields"]] == [
        "version", "connector", "name", "ts_ms", "snapshot", "db", "sequence", "ts_us", "ts_ns",
        "schema", "table", "change_lsn", "commit_lsn", "event_serial_no"]
    unchanged = [f for f in ours["fields"] if f["field"] not in ("ts_us", "ts_ns", "snapshot")]
    assert unchanged == [f for f in real_source["fields"] if f["field"] != "snapshot"]
    assert [f for f in ours["fields"] if f["field"] == "ts_us"] == [
        {"type": "int64", "optional": True, "field": "ts_us"}]
    snapshot = next(f for f in ours["fields"] if f["field"] == "snapshot")
    assert snapshot["parameters"]["allowed"] == (
        "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental")
    assert {k: v for k, v in ours.items() if k != "fields"} == {
        "type": "struct", "optional": False, "name": "io.debezium.connector.sqlserver.Source",
        "version": 1, "field": "source"}


def test_envelope_layout_by_version() -> None:
    def layout(version: str) -> list[Any]:
        schema = DebeziumEncoder(EMP, "server1", version=version).value_schema
        return [schema.get("version"), [f["field"] for f in schema["fields"]],
                next(f for f in schema["fields"] if f["field"] == "transaction").get("name")]

    # real captures: 2.4.2/2.5.4 (version 1, transaction last), 2.6.2 (version 2, ts_us/ts_ns,
    # transaction last), 2.7.x/3.x (transaction after source)
    assert layout("1.9.7.Final") == [
        None, ["before", "after", "source", "op", "ts_ms", "transaction"], None]
    assert layout("2.5.4.Final") == [
        1, ["before", "after", "source", "op", "ts_ms", "transaction"], "event.block"]
    assert layout("2.6.2.Final") == [
        2, ["before", "after", "source", "op", "ts_ms", "ts_us", "ts_ns", "transaction"],
        "event.block"]
    assert layout("3.1.3.Final") == [
        2, ["before", "after", "source", "transaction", "op", "ts_ms", "ts_us", "ts_ns"],
        "event.block"]
    assert features("2.6.0.Final").source_ts_us == "required"
    assert features("2.6.2.Final").source_ts_us == "optional"
    assert features("3.0.0.Final").snapshot_allowed == "true,last,false,incremental"
    assert DebeziumEncoder(EMP, "p", version="1.9.7.Final").topic == "p.dbo.emp"
    assert DebeziumEncoder(EMP, "p").topic == "p.RedisConnect.dbo.emp"


def test_3x_payload_follows_schema_order() -> None:
    _, value = DebeziumEncoder(EMP, "server1").encode(EMP_DELETE)
    doc = json.loads(value)
    assert list(doc["payload"]) == ["before", "after", "source", "transaction", "op", "ts_ms",
                                    "ts_us", "ts_ns"]
    assert doc["payload"]["ts_ns"] == 1637859769370 * 10**6
    assert doc["payload"]["source"]["ts_us"] == 1637859764960 * 1000
    assert doc["schema"]["name"] == "server1.RedisConnect.dbo.emp.Envelope"
    schemaless = DebeziumEncoder(EMP, "server1", encoding="json").encode(EMP_DELETE)
    assert schemaless == (b'{"empno":11}', json.dumps(doc["payload"], separators=(",", ":"))
                          .encode())


def test_transaction_topic_records() -> None:
    tx = TransactionTopicEncoder("server1", encoding="json")
    assert tx.topic == "server1.transaction"
    key, begin = tx.begin("00000025:00000d08:0025", 1486500577125)
    assert json.loads(key) == {"id": "00000025:00000d08:0025"}
    assert json.loads(begin) == {"status": "BEGIN", "id": "00000025:00000d08:0025",
                                 "event_count": None, "data_collections": None,
                                 "ts_ms": 1486500577125}
    _, end = tx.end("00000025:00000d08:0025", 1486500577691, 2,
                    [("testDB.dbo.tablea", 1), ("testDB.dbo.tableb", 1)])
    assert json.loads(end)["data_collections"] == [
        {"data_collection": "testDB.dbo.tablea", "event_count": 1},
        {"data_collection": "testDB.dbo.tableb", "event_count": 1}]
    old = TransactionTopicEncoder("server1", encoding="json", version="1.9.7.Final")
    assert "ts_ms" not in json.loads(old.begin("x", 1)[1])  # 1.x BEGIN/END have no ts_ms


# --------------------------------------------------------------------------- Avro


def test_avro_schema_follows_avrodata() -> None:
    schema = DebeziumEncoder(EMP, "server1").value_schema
    avro = avro_schema_for(schema)
    assert (avro["type"], avro["name"], avro["namespace"]) == (
        "record", "Envelope", "server1.RedisConnect.dbo.emp")
    assert avro["connect.version"] == 2
    assert avro["connect.name"] == "server1.RedisConnect.dbo.emp.Envelope"
    before, after = avro["fields"][0], avro["fields"][1]
    assert before["type"][0] == "null" and before["default"] is None
    value = before["type"][1]
    assert (value["name"], "namespace" in value) == ("Value", False)  # same as the enclosing one
    assert after == {"name": "after", "type": ["null", "Value"], "default": None}
    fields = {f["name"]: f for f in value["fields"]}
    assert fields["empno"] == {"name": "empno", "type": "int"}
    assert fields["sal"]["type"][1] == {
        "type": "bytes", "scale": 4, "precision": 19, "connect.version": 1,
        "connect.parameters": {"scale": "4", "connect.decimal.precision": "19"},
        "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}
    assert fields["hiredate"]["type"][1] == {
        "type": "long", "connect.version": 1, "connect.name": "io.debezium.time.Timestamp"}
    source = avro["fields"][2]["type"]
    assert (source["name"], source["namespace"]) == ("Source", "io.debezium.connector.sqlserver")
    snapshot = next(f for f in source["fields"] if f["name"] == "snapshot")
    # a field with a Connect default: [T, "null"] and the default, plus connect.default
    assert snapshot["type"][1] == "null" and snapshot["default"] == "false"
    assert snapshot["type"][0]["connect.default"] == "false"
    tx = avro["fields"][3]["type"][1]
    assert (tx["name"], tx["namespace"], tx["connect.name"]) == ("block", "event", "event.block")


def test_avro_logical_types_and_int16() -> None:
    connect = ConnectorModes(time_precision_mode="connect")
    columns = [connect_column(SqlColumn(n, t, nullable=False), connect) for n, t in
               [("d", "date"), ("t", "time"), ("ts", "datetime2"), ("ti", "tinyint")]]
    avro = avro_schema_for(connect_struct_schema(columns, "x.Value", optional=False))
    types = {f["name"]: f["type"] for f in avro["fields"]}
    assert types["d"]["logicalType"] == "date" and types["d"]["type"] == "int"
    assert types["t"]["logicalType"] == "time-millis" and types["t"]["type"] == "int"
    assert types["ts"]["logicalType"] == "timestamp-millis" and types["ts"]["type"] == "long"
    assert types["ti"] == {"type": "int", "connect.type": "int16"}


def test_avro_round_trip_through_fastavro() -> None:
    registry = InMemoryRegistry()
    encoder = DebeziumEncoder(EMP, "server1", encoding="avro", registrar=registry)
    key, value = encoder.encode(EMP_DELETE)
    assert value[0] == 0 and key is not None and key[0] == 0
    value_id = int.from_bytes(value[1:5], "big")
    assert registry.subjects["server1.RedisConnect.dbo.emp-value"] == [value_id]
    decoded = avro_decode(registry, value)
    assert decoded["before"]["sal"] == decimal.Decimal("200000.0000")
    assert decoded["before"]["hiredate"] == 1562630400000
    assert decoded["source"]["commit_lsn"] == "0000003a:00002f50:0005"
    assert decoded["source"]["snapshot"] == "false"
    assert (decoded["after"], decoded["op"], decoded["transaction"]) == (None, "d", None)
    assert avro_decode(registry, key) == {"empno": 11}
