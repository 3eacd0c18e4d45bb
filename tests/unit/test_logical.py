"""Connect values → canonical logical values (SPEC §5.1), checked against reference facts."""

from __future__ import annotations

import base64

import pytest

from debezium_bridge.errors import LsnFormatError, ValueConversionError
from debezium_bridge.formats.debezium.logical import (
    RowDecoder,
    SchemalessRowDecoder,
    converter_for,
    format_unscaled,
)
from debezium_bridge.model.lsn import format_lsn, parse_lsn
from debezium_bridge.model.schema import Column, TableSchema

DEC = "org.apache.kafka.connect.data.Decimal"


SCALE = "__debezium.source.column.scale"
TYPE = "__debezium.source.column.type"


def conv(connect_type: str, semantic: str | None = None, binary_mode="bytes", params=None,
         **connect_params):
    parameters = {**{k: str(v) for k, v in connect_params.items()}, **(params or {})}
    column = Column("c", connect_type, semantic, parameters=parameters)
    convert = converter_for(column, binary_mode)
    assert convert is not None
    return convert


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("unscaled,scale,text", [
    (2_000_000_000, 4, "200000.0000"),  # the real 1.6 sample: sal "dzWUAA=="
    (-1234, 2, "-12.34"), (5, 3, "0.005"), (-5, 3, "-0.005"), (0, 2, "0.00"), (7, 0, "7"),
    (12, -2, "1200"), (10**37 - 1, 10, "999999999999999999999999999.9999999999"),
])
def test_format_unscaled(unscaled, scale, text):
    assert format_unscaled(unscaled, scale) == text


def test_decimal_from_base64_bytes_and_numeric_forms():
    c = conv("bytes", DEC, scale=4)
    assert c("dzWUAA==") == "200000.0000" and c("AYag") == "10.0000"
    assert c(bytes([0xFF])) == "-0.0001"  # two's complement
    assert c(12.5) == "12.5000"  # JsonConverter decimal.format=NUMERIC
    with pytest.raises(ValueConversionError):
        c("not base64!")
    with pytest.raises(ValueConversionError):
        c("")


def test_variable_scale_decimal():
    c = conv("struct", "io.debezium.data.VariableScaleDecimal")
    assert c({"scale": 2, "value": b64((12345).to_bytes(2, "big"))}) == "123.45"


@pytest.mark.parametrize("semantic,value,text", [
    ("io.debezium.time.Timestamp", 1562630400000, "2019-07-09T00:00:00.000"),
    ("io.debezium.time.NanoTimestamp", 1289567655123456700, "2010-11-12T13:14:15.1234567"),
    ("io.debezium.time.MicroTimestamp", 1529507596945104, "2018-06-20T15:13:16.945104"),
    ("io.debezium.time.Timestamp", -2208948480000, "1900-01-01T11:12:00.000"),  # smalldatetime
    ("io.debezium.time.NanoTimestamp", -1, "1969-12-31T23:59:59.999999999"),
    ("org.apache.kafka.connect.data.Timestamp", 0, "1970-01-01T00:00:00.000"),
])
def test_timestamps(semantic, value, text):
    assert conv("int64", semantic)(value) == text


@pytest.mark.parametrize("semantic,value,params,text", [
    ("io.debezium.time.Time", 45296789, {}, "12:34:56.789"),
    ("io.debezium.time.MicroTime", 45296123456, {}, "12:34:56.123456"),
    ("io.debezium.time.NanoTime", 45296123456700, {}, "12:34:56.1234567"),
    ("io.debezium.time.Time", 45296000, {SCALE: "0"}, "12:34:56"),
    ("io.debezium.time.MicroTime", 45296120000, {SCALE: "4"},
     "12:34:56.1200"),
])
def test_times(semantic, value, params, text):
    assert conv("int64", semantic, params=params)(value) == text


def test_time_out_of_range_and_wrong_type():
    with pytest.raises(ValueConversionError):
        conv("int32", "io.debezium.time.Time")(-1)
    with pytest.raises(ValueConversionError):
        conv("int64", "io.debezium.time.NanoTimestamp")("2020-01-01")


def test_dates_and_iso_strings():
    assert conv("int32", "io.debezium.time.Date")(18000) == "2019-04-14"
    assert conv("int32", "io.debezium.time.Date")(-1) == "1969-12-31"
    assert conv("string", "io.debezium.time.IsoDate")("2023-11-21Z") == "2023-11-21"
    assert conv("string", "io.debezium.time.IsoTime")("10:15:30.5Z") == "10:15:30.5"
    assert conv("string", "io.debezium.time.IsoTimestamp")("2011-12-03T10:15:30Z") == \
        "2011-12-03T10:15:30"
    assert converter_for(Column("c", "string", "io.debezium.time.ZonedTimestamp")) is None


def test_binary_modes_become_standard_base64():
    raw = bytes([0xFB, 0xFF, 0x00])
    assert conv("bytes")(raw) == b64(raw)  # Avro bytes
    assert conv("bytes")(b64(raw)) == b64(raw)  # JsonConverter bytes
    params = {TYPE: "VARBINARY"}
    assert conv("string", binary_mode="hex", params=params)("fbff00") == b64(raw)
    url = base64.urlsafe_b64encode(raw).decode()
    assert conv("string", binary_mode="base64-url-safe", params=params)(url) == b64(raw)
    assert converter_for(Column("c", "string", parameters={
        "__debezium.source.column.type": "VARBINARY"}), "base64") is None


def test_float32_prints_like_jsonconverter():
    assert conv("float32")(1.100000023841858) == 1.1


def test_double_mode_decimal_rendered_at_the_source_scale():
    c = conv("float64", params={TYPE: "DECIMAL", SCALE: "2"})
    assert c(42.5) == "42.50"


def test_row_decoder_marks_unavailable_placeholder():
    schema = TableSchema("t", (Column("id", "int32"), Column("notes", "string"),
                               Column("blob", "bytes"),
                               Column("amount", "bytes", DEC, parameters={"scale": "2"})))
    rows = RowDecoder(schema)
    row, unavailable = rows.decode({"id": 1, "notes": "__debezium_unavailable_value",
                                    "blob": b64(b"__debezium_unavailable_value"),
                                    "amount": b64((4200).to_bytes(2, "big"))})
    assert row == {"id": 1, "notes": None, "blob": None, "amount": "42.00"}
    assert unavailable == ("notes", "blob")
    row, unavailable = SchemalessRowDecoder().decode({"id": 1, "n": "__debezium_unavailable_value"})
    assert row == {"id": 1, "n": None} and unavailable == ("n",)


def test_row_decoder_reports_text_before_binary_placeholders_and_names_a_bad_column():
    schema = TableSchema("t", (Column("blob", "bytes"), Column("notes", "string"),
                               Column("amount", "bytes", DEC, parameters={"scale": "2"})))
    row, unavailable = RowDecoder(schema).decode({"blob": b"__debezium_unavailable_value",
                                                  "notes": "__debezium_unavailable_value"})
    assert row == {"blob": None, "notes": None} and unavailable == ("notes", "blob")
    with pytest.raises(ValueConversionError, match="column 'amount': invalid base64"):
        RowDecoder(schema).decode({"amount": "not base64!"})
    assert RowDecoder(TableSchema("empty", ())).decode({"x": 1}) == ({"x": 1}, ())


PLACEHOLDER_B64 = "X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ=="


@pytest.mark.parametrize("row,expected,gone", [
    # unhashable values (structs, arrays) take the one-by-one comparison
    ({"id": 1, "s": {"value": "AQ==", "scale": 2}}, {"id": 1, "s": {"value": "AQ==", "scale": 2}},
     ()),
    ({"id": [1], "s": PLACEHOLDER_B64}, {"id": [1], "s": None}, ("s",)),
    ({"id": 1, "s": "__debezium_unavailable_value", "t": "x"}, {"id": 1, "s": None, "t": "x"},
     ("s",)),
    ({"b": b"__debezium_unavailable_value"}, {"b": b"__debezium_unavailable_value"}, ()),
])
def test_schemaless_rows_find_the_placeholder_next_to_any_value(row, expected, gone):
    assert SchemalessRowDecoder().decode(dict(row)) == (expected, gone)  # decode mutates


@pytest.mark.parametrize("text,expected", [
    ("00000027:00000758:0003", "00000027:00000758:0003"),
    ("00000027:00000758:000A", "00000027:00000758:000a"),
    ("0x000000270000075800AB", "00000027:00000758:00ab"),
    ("000000270000075800ab", "00000027:00000758:00ab"),
])
def test_lsn_forms(text, expected):
    assert format_lsn(parse_lsn(text)) == expected


def test_lsn_null_and_malformed():
    assert parse_lsn(None) == b"" and parse_lsn("NULL") == b""
    assert parse_lsn("00000001:00000000:0000") > parse_lsn("00000000:ffffffff:ffff") > b""
    for bad in ("zz:00000758:0003", "0000027:00000758:0003", "0x" + "f" * 22):
        with pytest.raises(LsnFormatError):
            parse_lsn(bad)


def test_numeric_format_decimal_keeps_all_38_digits():
    """decimal.format=NUMERIC: a decimal(38,0) value has more digits than the default decimal
    context (28) holds; it is still exact."""
    c = conv("bytes", DEC, scale=0, **{"connect.decimal.precision": 38})
    assert c(10**38 - 1) == "9" * 38
    with pytest.raises(ValueConversionError, match="precision 38"):
        c(10**38)
    assert conv("bytes", DEC, scale=4, **{"connect.decimal.precision": 19})(12.5) == "12.5000"
