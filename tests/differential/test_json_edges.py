"""JSON edge cases of connector-shaped records, through both cores.

The native core reads Debezium JSON along each topic's layout with its own reader (escaped
member names, duplicates, whitespace, numbers out of range, bad text), so these cases reach
code the random fuzzers rarely do. Each case is one envelope that differs from a plain
schema-less insert in one way. Both cores must agree on every case (canonical lines, dead
letters, counters, state), and where JSON itself says what the record is, the output says
it too:

- RFC 8259 §2 and §4: whitespace between tokens and the order of members carry no meaning;
  §7: an escaped character is the character (``"\\u0061fter"`` is ``"after"``).
- RFC 8259 §2, §6, §7: ``NaN``, ``Infinity``, raw control characters, trailing text and an
  empty value are not JSON; §8.1: a byte order mark is not allowed at the start of JSON
  text a program sends; a lone surrogate has no UTF-8 form (§8.2 leaves it unpredictable),
  and the output is UTF-8 JSON: all are dead letters.
- Duplicate member names (RFC 8259 §4: unpredictable): the last one counts, as Python's
  ``json`` module documents and Jackson's default (the parser Kafka Connect uses) does.

The schema-ful part takes an insert as JsonConverter writes it, with a column of each Connect
type and each logical type of the SQL Server connector, and gives each column values of other
JSON types and out-of-range numbers, and other schemas (types, optionality, decimal
parameters, an unknown logical name). Most become dead letters, which the native core leaves
to the Python decoder; the plain row the native core reads itself.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from debezium_bridge.core import Translator, TranslatorConfig
from debezium_bridge.core import native as native_core
from debezium_bridge.formats.canonical import to_json
from debezium_bridge.formats.debezium.decode import DecodeOptions, Decoder, table_schema_of
from debezium_bridge.model.records import RawRecord
from tests.differential.streams import Stream
from tests.differential.test_cores import run_both

TOPIC = "srv.db.dbo.t"
SOURCE = ('{"version":"2.7.0.Final","connector":"sqlserver","name":"srv","ts_ms":1700000000067,'
          '"snapshot":"false","db":"db","sequence":null,"schema":"dbo","table":"t",'
          '"change_lsn":"00000025:00000d08:000f","commit_lsn":"00000025:00000d08:0015",'
          '"event_serial_no":1}')
AFTER = '{"id":1,"name":"a","amount":1.5}'


def envelope(before: str = "null", after: str = AFTER, op: str = '"c"', source: str = SOURCE,
             extra: str = "") -> str:
    return (f'{{"before":{before},"after":{after},"source":{source},"op":{op},'
            f'"ts_ms":1700000000267{extra}}}')


def in_source(old: str, new: str) -> str:
    assert old in SOURCE
    return envelope(source=SOURCE.replace(old, new))


PLAIN = envelope()
SCHEMA = ('{"type":"struct","optional":false,"name":"srv.db.dbo.t.Envelope","fields":[]}')

# Spellings of PLAIN that JSON says are the same value.
SAME_AS_PLAIN = {
    "indented": json.dumps(json.loads(PLAIN), indent=2),
    "spaces between tokens": json.dumps(json.loads(PLAIN), separators=(" , ", " : ")),
    "trailing whitespace": PLAIN + " \n\t",
    "members reordered": json.dumps(dict(reversed(list(json.loads(PLAIN).items())))),
    "escaped envelope name": PLAIN.replace('"after"', '"\\u0061fter"'),
    "escaped source name": PLAIN.replace('"commit_lsn"', '"commit\\u005flsn"'),
    "escaped table name": in_source('"table":"t"', '"table":"\\u0074"'),
    "escaped LSN character": in_source('"00000025:00000d08:0015"',
                                       '"00000025\\u003a00000d08:0015"'),
    "upper-case LSN digits": in_source("00000d08:0015", "00000D08:0015"),
    "schema null": f'{{"schema":null,"payload":{PLAIN}}}',
}

NOT_JSON = {
    "NaN": envelope(after='{"id":1,"x":NaN}'),
    "Infinity": envelope(after='{"id":1,"x":-Infinity}'),
    "raw line feed in a string": envelope(after='{"id":1,"x":"a\nb"}'),
    "raw NUL in a string": envelope(after='{"id":1,"x":"a\x00b"}'),
    "lone surrogate": envelope(after='{"id":1,"x":"\\ud800"}'),
    "byte order mark": "\ufeff" + PLAIN,
    "trailing text": PLAIN + "x",
    "a second value": PLAIN + "{}",
    "empty": "",
    "whitespace only": "   ",
}

DUPLICATES = {  # case: (value, the path of the member, its last value)
    "op": (envelope(extra=',"op":"d"'), ("op",), "delete"),
    "after": (envelope(extra=',"after":{"id":2}'), ("after",), {"id": 2}),
    "column": (envelope(after='{"id":1,"id":2,"name":"a"}'), ("after", "id"), 2),
    "source table": (in_source('"event_serial_no":1', '"event_serial_no":1,"table":"u"'),
                     ("table", "name"), "u"),
    "source commit_lsn": (in_source('"event_serial_no":1',
                                    '"event_serial_no":1,"commit_lsn":"00000026:00000d08:0015"'),
                          ("position", "commit_lsn"), "00000026:00000d08:0015"),
}

OTHER = {
    "integer beyond 64 bits": envelope(after='{"id":123456789012345678901234567890}'),
    "negative zero integer": envelope(after='{"id":-0}'),
    "number out of double range": envelope(after='{"id":1,"x":1E400}'),
    "number forms": envelope(after='{"id":1,"x":1e2,"y":1.0,"z":-0.0,"w":1.5e-7}'),
    "surrogate pair": envelope(after='{"id":1,"x":"\\ud83d\\ude00"}'),
    "every escape": envelope(after='{"id":1,"x":"\\/\\b\\f\\n\\r\\t\\"\\\\\\u0000\\u001f\\u00e9"}'),
    "serial as text": in_source('"event_serial_no":1', '"event_serial_no":"1"'),
    "serial as 1.0": in_source('"event_serial_no":1', '"event_serial_no":1.0'),
    "negative serial": in_source('"event_serial_no":1', '"event_serial_no":-1'),
    "serial beyond 64 bits": in_source('"event_serial_no":1',
                                       '"event_serial_no":99999999999999999999'),
    "null serial": in_source('"event_serial_no":1', '"event_serial_no":null'),
    "no serial": in_source(',"event_serial_no":1', ""),
    "null commit_lsn": in_source('"commit_lsn":"00000025:00000d08:0015"', '"commit_lsn":null'),
    "null change_lsn": in_source('"change_lsn":"00000025:00000d08:000f"', '"change_lsn":null'),
    "short LSN": in_source('"00000025:00000d08:0015"', '"25:d08:15"'),
    "long LSN": in_source('"00000025:00000d08:0015"', '"000000025:00000d08:0015"'),
    "LSN not hex": in_source('"00000025:00000d08:0015"', '"0000002g:00000d08:0015"'),
    "ts_ms as text": in_source('"ts_ms":1700000000067', '"ts_ms":"1700000000067"'),
    "ts_ms as float": in_source('"ts_ms":1700000000067', '"ts_ms":1.7e12'),
    "ts_ms out of range": in_source('"ts_ms":1700000000067', '"ts_ms":99999999999999999'),
    "snapshot as boolean": in_source('"snapshot":"false"', '"snapshot":false'),
    "no snapshot": in_source('"snapshot":"false",', ""),
    "null db": in_source('"db":"db"', '"db":null'),
    "truncate": envelope(after="null", op='"t"'),
    "unknown op": envelope(op='"x"'),
    "upper-case op": envelope(op='"C"'),
    "null op": envelope(op="null"),
    "numeric op": envelope(op="1"),
    "transaction block": envelope(extra=',"transaction":{"id":"00000025:00000d08:0015",'
                                        '"total_order":1,"data_collection_order":1}'),
    "transaction id a number": envelope(extra=',"transaction":{"id":5}'),
    "transaction a string": envelope(extra=',"transaction":"x"'),
    "after an array": envelope(after="[1,2]"),
    "after a string": envelope(after='"x"'),
    "after empty": envelope(after="{}"),
    "nested struct column": envelope(after='{"id":1,"g":{"wkb":"AQ==","srid":4326}}'),
    "non-ASCII column name": envelope(after='{"id":1,"naïve 日本":"x"}'),
    "empty column name": envelope(after='{"id":1,"":"x"}'),
    "arrays 50 deep": envelope(after='{"id":1,"x":' + "[" * 50 + "]" * 50 + "}"),
    "ts_us and ts_ns": envelope(extra=',"ts_us":1700000000267000,"ts_ns":1700000000267000000'),
    "payload without schema": f'{{"payload":{PLAIN}}}',
    "payload before schema": f'{{"payload":{PLAIN},"schema":{SCHEMA}}}',
    "null": "null",
    "a number": "1",
}

KEYS = {
    "key": b'{"id":1}',
    "no key": None,
    "escaped key": b'{"\\u0069d":1}',
    "key with whitespace": b' { "id" : 1 } ',
    "duplicate key member": b'{"id":1,"id":2}',
    "schema-ful key": (b'{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,'
                       b'"field":"id"}],"optional":false},"payload":{"id":1}}'),
    "key an array": b"[1]",
    "key cut short": b'{"id":',
}


@pytest.fixture(autouse=True)
def _no_forced_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(native_core.ENV, raising=False)


def records(value: str, key: bytes | None = b'{"id":1}') -> list[RawRecord]:
    """The value twice (a replay at the next offset), as one partition holds it."""
    data = value.encode("utf-8", "surrogatepass")
    return [RawRecord(topic=TOPIC, partition=0, offset=n, timestamp=1, key=key, value=data)
            for n in (0, 1)]


def both(value: str, key: bytes | None = b'{"id":1}', *, native_reads: bool = False,
         binary_mode: str = "bytes") -> tuple[Any, ...]:
    """Both cores' results; they must agree. ``native_reads``: the native core reads both
    records itself (declines none to the Python decoder)."""
    stream = Stream(records(value, key), [(TOPIC, 0)], {}, binary_mode)
    python, native = run_both(stream, batch=2)
    assert not native_reads or native[4] == 0, "the native core declined the records"
    return python


ALL = {**SAME_AS_PLAIN, **NOT_JSON, **{k: v for k, (v, _, _) in DUPLICATES.items()}, **OTHER}


@pytest.mark.parametrize("key_case", sorted(KEYS))
@pytest.mark.parametrize("case", sorted(ALL))
def test_the_cores_agree(case: str, key_case: str) -> None:
    both(ALL[case], KEYS[key_case])


def test_the_plain_envelope_is_one_insert() -> None:
    lines, dead, counters, _, _ = both(PLAIN, native_reads=True)
    assert not dead
    (line,) = lines.splitlines()  # the replay at offset 1 is dropped
    record = json.loads(line)
    assert (record["op"], record["after"], record["position"]["commit_lsn"]) == (
        "insert", {"id": 1, "name": "a", "amount": 1.5}, "00000025:00000d08:0015")
    assert counters["duplicates"] == 1


@pytest.mark.parametrize("case", sorted(SAME_AS_PLAIN))
def test_equivalent_spellings_give_the_same_record(case: str) -> None:
    """The native core reads each spelling along its own layout reader (none is declined)."""
    assert both(SAME_AS_PLAIN[case], native_reads=True)[:2] == both(PLAIN)[:2]


@pytest.mark.parametrize("case", sorted(NOT_JSON))
def test_text_that_is_not_json_is_a_dead_letter(case: str) -> None:
    lines, dead, counters, _, _ = both(NOT_JSON[case])
    assert lines == b""
    assert [d[2] for d in dead] == [0, 1]  # both records, each with its offset
    assert counters["dead_letters"] == 2 and counters["records_in"] == 2


@pytest.mark.parametrize("case", sorted(DUPLICATES))
def test_the_last_duplicate_member_counts(case: str) -> None:
    value, path, last = DUPLICATES[case]
    assert json.loads(value) != json.loads(PLAIN)  # Python's json: the last one counts
    lines, dead, _, _, _ = both(value)
    assert not dead
    found: Any = json.loads(lines.splitlines()[0])
    for name in path:
        found = found[name]
    assert found == last


# --------------------------------------------------------------------------- schema-ful values

def _field(kind: str, name: str, optional: bool = True, logical: str | None = None,
           parameters: dict[str, str] | None = None) -> dict[str, Any]:
    field: dict[str, Any] = {"type": kind, "optional": optional, "field": name}
    if logical:
        field.update(name=logical, version=1)
    if parameters:
        field["parameters"] = parameters
    return field


# JsonConverter's schema of a row with each Connect type and each logical type the SQL Server
# connector writes, and a row of values it would write for them.
COLUMNS = [
    _field("int32", "id", optional=False), _field("int8", "ti"), _field("int16", "si"),
    _field("int64", "bi"), _field("float", "r"), _field("double", "fl"), _field("boolean", "b"),
    _field("string", "s"), _field("bytes", "bin"),
    _field("bytes", "dec", logical="org.apache.kafka.connect.data.Decimal",
           parameters={"scale": "2", "connect.decimal.precision": "10"}),
    *(_field(kind, name, logical=logical) for kind, name, logical in (
        ("int32", "d", "io.debezium.time.Date"), ("int32", "t", "io.debezium.time.Time"),
        ("int64", "mt", "io.debezium.time.MicroTime"), ("int64", "nt", "io.debezium.time.NanoTime"),
        ("int64", "ts", "io.debezium.time.Timestamp"),
        ("int64", "mts", "io.debezium.time.MicroTimestamp"),
        ("int64", "nts", "io.debezium.time.NanoTimestamp"),
        ("string", "z", "io.debezium.time.ZonedTimestamp"),
        ("int32", "cd", "org.apache.kafka.connect.data.Date"),
        ("int64", "cts", "org.apache.kafka.connect.data.Timestamp"),
        ("int32", "ct", "org.apache.kafka.connect.data.Time"),
        ("string", "x", "io.debezium.data.Xml"), ("string", "u", "io.debezium.data.Uuid"))),
]
ROW = {"id": 1, "ti": 5, "si": 300, "bi": 1234567890123, "r": 1.5, "fl": 2.25, "b": True,
       "s": "x", "bin": "AQID", "dec": "MDk=", "d": 19000, "t": 3600000, "mt": 3600000000,
       "nt": 3600000000000, "ts": 1700000000000, "mts": 1700000000000000,
       "nts": 1700000000000000000, "z": "2023-11-14T22:13:20.123456Z", "cd": 19000,
       "cts": 1700000000000, "ct": 3600000, "x": "<a/>",
       "u": "6ba7b810-9dad-11d1-80b4-00c04fd430c8"}
OTHER_VALUES = [
    None, 0, -1, 127, 128, 256, 32768, 2**31 - 1, 2**31, -2**31 - 1, 2**63 - 1, 2**63,
    -2**63 - 1, 2**64, 1.0, 1.5, -0.0, 1e300, 1e-300, 3.5e38, 0.1, "", "x", "AQI", "AQ==",
    "!!!!", "1", "2023-11-14T22:13:20Z", True, [], {}, [1], {"a": 1}, "\u00e9",
]
SCHEMA_CHANGES: list[dict[str, Any]] = [
    {"type": "float64"}, {"type": "int"}, {"type": "array"}, {"type": "map"},
    {"type": "struct"}, {"optional": False}, {"parameters": {}}, {"parameters": {"scale": "x"}},
    {"parameters": {"scale": "-2"}}, {"name": "io.debezium.time.Unknown"},
]
_SOURCE_SCHEMA = {
    "type": "struct", "optional": False, "name": "io.debezium.connector.sqlserver.Source",
    "field": "source", "fields": [
        _field("string", "version", False), _field("string", "connector", False),
        _field("string", "name", False), _field("int64", "ts_ms", False),
        _field("string", "snapshot", True, "io.debezium.data.Enum",
               {"allowed": "true,last,false,incremental"}),
        _field("string", "db", False), _field("string", "sequence"),
        _field("string", "schema", False), _field("string", "table", False),
        _field("string", "change_lsn"), _field("string", "commit_lsn"),
        _field("int64", "event_serial_no")]}
SCHEMAFUL_KEY = json.dumps({
    "schema": {"type": "struct", "optional": False, "name": "srv.db.dbo.t.Key",
               "fields": [_field("int32", "id", False)]},
    "payload": {"id": 1}}, separators=(",", ":")).encode()


def schemaful(columns: list[dict[str, Any]], row: dict[str, Any]) -> str:
    """An insert as JsonConverter writes it with ``schemas.enable=true``."""
    image = {"type": "struct", "fields": columns, "optional": True, "name": "srv.db.dbo.t.Value"}
    schema = {"type": "struct", "optional": False, "name": "srv.db.dbo.t.Envelope", "version": 1,
              "fields": [dict(image, field="before"), dict(image, field="after"),
                         _SOURCE_SCHEMA, _field("string", "op", False),
                         _field("int64", "ts_ms")]}
    payload = {"before": None, "after": row, "source": json.loads(SOURCE), "op": "c",
               "ts_ms": 1700000000267}
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":"))


def test_the_schemaful_row_is_read() -> None:
    lines, dead, _, _, _ = both(schemaful(COLUMNS, ROW), SCHEMAFUL_KEY, native_reads=True)
    assert not dead and len(lines.splitlines()) == 1


@pytest.mark.parametrize("column", [c["field"] for c in COLUMNS])
def test_the_cores_agree_on_other_values_of_each_type(column: str) -> None:
    for value in OTHER_VALUES:
        both(schemaful(COLUMNS, {**ROW, column: value}), SCHEMAFUL_KEY)


@pytest.mark.parametrize("column", [c["field"] for c in COLUMNS])
def test_the_cores_agree_on_other_schemas_of_each_column(column: str) -> None:
    for change in SCHEMA_CHANGES:
        columns = [dict(c, **change) if c["field"] == column else c for c in COLUMNS]
        row = {**ROW, column: None} if change == {"optional": False} else ROW
        both(schemaful(columns, row), SCHEMAFUL_KEY)


# binary.handling.mode=hex: a binary column is a string of hex digits, two per byte (Debezium's
# BinaryHandlingMode.HEX). Python's bytes.fromhex, the reference, also skips whitespace between
# pairs; a sign, an odd digit count or a non-digit is bad input.
HEX_COLUMNS = [_field("int32", "id", optional=False), _field(
    "string", "bin", parameters={"__debezium.source.column.type": "VARBINARY",
                                 "__debezium.source.column.length": "16"})]
HEX_TEXTS = {"0f": "Dw==", "0F10": "DxA=", "": "", " 0f": "Dw==", "0f 10": "DxA=", "+f": None,
             "+f+f": None, "-f": None, "0x0f": None, "0f1": None, "zz": None, "\u0660f": None}


@pytest.mark.parametrize("text", sorted(HEX_TEXTS))
def test_hex_binary_columns_take_hex_digits_only(text: str) -> None:
    row = json.loads(f'{{"id":1,"bin":"{text}"}}')
    lines, dead, _, _, _ = both(schemaful(HEX_COLUMNS, row), SCHEMAFUL_KEY, binary_mode="hex")
    want = HEX_TEXTS[text]
    if want is None:
        assert len(dead) == 2 and not lines
    else:
        assert not dead and json.loads(lines.splitlines()[0])["after"]["bin"] == want


# decimal.handling.mode=string: a decimal is a string column; with the source type propagated
# the cores know it is one. Connectors before 1.9 wrote BigDecimal.toString(), E-notation for
# small magnitudes (DBZ-4730 moved to toPlainString()). The cases are BigDecimal.toString's
# own examples from its Javadoc, [unscaled value, scale] -> text; the canonical value is the
# plain decimal with that scale (docs/canonical.md: "exact strings with their scale").
def _plain(unscaled: int, scale: int) -> str:
    digits = str(abs(unscaled)).rjust(scale + 1, "0")
    return ("-" if unscaled < 0 else "") + (f"{digits[:-scale]}.{digits[-scale:]}" if scale
                                            else digits)


STRING_DECIMAL_TEXTS = {"123": _plain(123, 0), "-123": _plain(-123, 0), "12.3": _plain(123, 1),
                        "0.00123": _plain(123, 5), "1.23E-8": _plain(123, 10),
                        "-1.23E-10": _plain(-123, 12), "0E-10": _plain(0, 10),
                        "1.2345E-7": _plain(12345, 11), "1.23E+3": "1230", "1.23E+5": "123000",
                        "abc": None, "1.": None, ".5": None, "1E": None, "NaN": None,
                        "1E+9999": None, "\u0661": None}
STRING_DECIMAL_COLUMNS = [_field("int32", "id", optional=False), _field(
    "string", "dec", parameters={"__debezium.source.column.type": "DECIMAL",
                                 "__debezium.source.column.length": "38",
                                 "__debezium.source.column.scale": "12"})]


@pytest.mark.parametrize("text", sorted(STRING_DECIMAL_TEXTS))
def test_string_mode_decimals_are_plain(text: str) -> None:
    row = json.loads(f'{{"id":1,"dec":"{text}"}}')
    want = STRING_DECIMAL_TEXTS[text]
    lines, dead, _, _, _ = both(schemaful(STRING_DECIMAL_COLUMNS, row), SCHEMAFUL_KEY,
                                native_reads=want is not None)
    if want is None:
        assert len(dead) == 2 and not lines
    else:
        assert not dead and json.loads(lines.splitlines()[0])["after"]["dec"] == want


def test_string_columns_without_a_propagated_type_are_text() -> None:
    columns = [_field("int32", "id", optional=False), _field("string", "dec")]
    lines, dead, _, _, _ = both(schemaful(columns, {"id": 1, "dec": "0E-10"}), SCHEMAFUL_KEY)
    assert not dead and json.loads(lines.splitlines()[0])["after"]["dec"] == "0E-10"


# A key without a schema of its own (key.converter.schemas.enable=false, or schema-less JSON
# with a table schema file) holds the row's key columns: it is converted as the row is, so a
# record's key equals its row's key columns, as with a schema-ful key.
KEY_COLUMNS = [
    _field("bytes", "dec", optional=False, logical="org.apache.kafka.connect.data.Decimal",
           parameters={"scale": "2", "connect.decimal.precision": "10"}),
    _field("int64", "nts", optional=False, logical="io.debezium.time.NanoTimestamp"),
    _field("string", "s")]
KEY_ROW = {"dec": "MDk=", "nts": 1700000000123456700, "s": "x"}
BARE_KEY = b'{"dec":"MDk=","nts":1700000000123456700}'
CONVERTED_KEY = {"dec": "123.45", "nts": "2023-11-14T22:13:20.1234567"}


def test_a_bare_key_of_a_schemaful_value_is_converted_as_its_row() -> None:
    lines, dead, _, _, _ = both(schemaful(KEY_COLUMNS, KEY_ROW), BARE_KEY, native_reads=True)
    assert not dead
    assert json.loads(lines.splitlines()[0])["key"] == CONVERTED_KEY


def test_a_bare_key_of_a_value_with_a_table_schema_file_is_converted_as_its_row() -> None:
    """(Topics with a table schema file are the Python decoder's on both cores.)"""
    table = table_schema_of({"type": "struct", "name": "srv.db.dbo.t.Value",
                             "fields": KEY_COLUMNS})
    value = json.loads(schemaful(KEY_COLUMNS, KEY_ROW))["payload"]
    outputs = []
    for core in ("off", "on"):
        translator = Translator(TranslatorConfig(native=core),
                                Decoder(DecodeOptions(table_schemas={TOPIC: table})))
        translator.process_many(records(json.dumps(value), BARE_KEY))
        translator.flush()
        changes, dead = translator.drain()
        assert not dead and len(changes) == 1
        outputs.append(to_json(changes[0]))
    assert outputs[0] == outputs[1]
    record = json.loads(outputs[0])
    assert record["key"] == CONVERTED_KEY == {k: record["after"][k] for k in CONVERTED_KEY}


# FLOAT32 columns (SQL Server real): JsonConverter writes a float through Jackson's FloatNode,
# FLT_MAX as 3.4028235E38, which as a double lies above FLT_MAX but rounds back to it; only a
# value that rounds to infinity as a float32 is out of range.
REAL_TEXTS = {"3.4028235E38": 3.4028235e38, "-3.4028235E38": -3.4028235e38,
              "3.4028233E38": 3.4028233e38, "3.40282356E38": 3.4028235e38,
              "-3.402823567E38": -3.4028235e38, "3.4028236E38": None, "3.5E38": None}


@pytest.mark.parametrize("text", sorted(REAL_TEXTS))
def test_real_columns_take_every_float32_jackson_writes(text: str) -> None:
    value = schemaful(COLUMNS, {**ROW, "r": 0.0}).replace('"r":0.0', f'"r":{text}')
    lines, dead, _, _, _ = both(value, SCHEMAFUL_KEY)
    want = REAL_TEXTS[text]
    if want is None:
        assert len(dead) == 2 and not lines
    else:
        assert not dead and json.loads(lines.splitlines()[0])["after"]["r"] == want


# time.precision.mode=isostring (Debezium 3.1+): IsoTime/IsoTimestamp strings in UTC, written
# with Java's ISO formats, which drop trailing fraction zeros. With the source type propagated
# the fraction has the column's scale, as a NanoTimestamp of the same value has.
def _iso_column(name: str, logical: str, source: str, scale: str | None) -> dict[str, Any]:
    params = ({} if scale is None else {"__debezium.source.column.type": source,
                                        "__debezium.source.column.scale": scale})
    return _field("string", name, logical=logical, parameters=params or None)


ISO_COLUMNS = [_field("int32", "id", optional=False),
               _iso_column("ts", "io.debezium.time.IsoTimestamp", "DATETIME2", "7"),
               _iso_column("t", "io.debezium.time.IsoTime", "TIME", "3"),
               _iso_column("plain", "io.debezium.time.IsoTimestamp", "DATETIME2", None)]
ISO_TEXTS = {  # sent → (ts at scale 7, t at scale 3, plain: as sent, without the zone)
    "2020-01-01T10:00:00.5Z": ("2020-01-01T10:00:00.5000000", "2020-01-01T10:00:00.500",
                               "2020-01-01T10:00:00.5"),
    "2020-01-01T10:00:00Z": ("2020-01-01T10:00:00.0000000", "2020-01-01T10:00:00.000",
                             "2020-01-01T10:00:00"),
    "2020-01-01T10:00:00.1234567Z": ("2020-01-01T10:00:00.1234567",
                                     "2020-01-01T10:00:00.1234567",
                                     "2020-01-01T10:00:00.1234567"),
    "00:00:00Z": ("00:00:00.0000000", "00:00:00.000", "00:00:00"),
    "23:59:59.99Z": ("23:59:59.9900000", "23:59:59.990", "23:59:59.99"),
    "not a time": ("not a time", "not a time", "not a time"),
}


@pytest.mark.parametrize("text", sorted(ISO_TEXTS))
def test_isostring_times_have_the_propagated_scale(text: str) -> None:
    row = {"id": 1, "ts": text, "t": text, "plain": text}
    lines, dead, _, _, _ = both(schemaful(ISO_COLUMNS, row), SCHEMAFUL_KEY, native_reads=True)
    assert not dead
    after = json.loads(lines.splitlines()[0])["after"]
    assert (after["ts"], after["t"], after["plain"]) == ISO_TEXTS[text]


# Found by a mutation campaign over generated streams (each case on both cores).
def _both_records(records: list[RawRecord]) -> tuple[Any, ...]:
    stream = Stream(records, sorted({(r.topic, r.partition) for r in records}), {}, "bytes")
    return run_both(stream)[0]


@pytest.mark.parametrize(("partition", "offset"), [
    (2**31, 0), (-(2**31) - 1, 0), (0, 2**63), (0, -(2**63) - 1)])
def test_kafka_coordinates_outside_their_types_are_dead_letters(partition: int,
                                                                 offset: int) -> None:
    """A Kafka partition is an int32 and an offset an int64 (the protocol's types)."""
    record = RawRecord(TOPIC, partition, offset, 1, b'{"id":1}', PLAIN.encode())
    lines, dead, _, _, _ = _both_records([record])
    assert not lines and [d[6] for d in dead] == ["decode"]


@pytest.mark.parametrize("order", [2**63, -(2**63) - 1])
def test_transaction_orders_outside_int64_are_dead_letters(order: int) -> None:
    """``total_order`` and ``data_collection_order`` are INT64 (reference §1.3)."""
    tx = f',"transaction":{{"id":"1","total_order":{order},"data_collection_order":1}}'
    lines, dead, _, _, _ = _both_records(records(envelope(extra=tx)))
    assert not lines and [d[6] for d in dead] == ["envelope", "envelope"]


def test_a_malformed_schemaful_value_reads_alike_after_good_ones() -> None:
    """The schema part of a topic's values is cached; a value whose payload does not read
    after the cached prefix is read whole, so its outcome does not depend on the values
    before it (a duplicate ``payload`` member: the last counts, RFC 8259 §4 as above)."""
    good = schemaful(COLUMNS, ROW)
    twice = good[:-1] + ',"payload":' + json.dumps(
        {**json.loads(good)["payload"], "op": "r"}) + "}"
    alone = _both_records(records(twice)[:1])
    after_good = _both_records([*records(good)[:1], RawRecord(
        TOPIC, 0, 1, 1, SCHEMAFUL_KEY, twice.encode())])
    def without_lineage(lines: bytes) -> list[dict[str, Any]]:
        return [{k: v for k, v in json.loads(line).items() if k != "lineage"}
                for line in lines.splitlines()]

    assert without_lineage(alone[0]) == without_lineage(after_good[0])[1:]
    assert without_lineage(alone[0])[0]["op"] == "read"


def test_a_schema_that_lists_a_field_twice_is_a_schema_dead_letter() -> None:
    """Connect's SchemaBuilder refuses a struct with a field name twice."""
    columns = [*COLUMNS, _field("int32", "d", logical="io.debezium.time.Date")]
    lines, dead, _, _, _ = both(schemaful(columns, ROW), SCHEMAFUL_KEY)
    assert not lines and {d[6] for d in dead} == {"schema"}


def test_a_nul_in_a_schema_name_is_only_text() -> None:
    value = schemaful(COLUMNS, ROW).replace('"srv.db.dbo.t.Value"', '"srv.db.dbo.t\\u0000.Value"')
    lines, dead, _, _, _ = both(value, SCHEMAFUL_KEY, native_reads=True)
    assert not dead and len(lines.splitlines()) == 1
