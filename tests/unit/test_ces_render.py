"""SQL type names and value strings of CES (``debezium_bridge.formats.ces.render`` / ``.columns``).

Expected values: the documented examples of the CES message format on MS Learn
(https://learn.microsoft.com/en-us/sql/relational-databases/track-changes/change-event-streaming/message-format:
the MF-25 and MF-26 samples, as collected in the reference ``ces.md`` §1.5/§1.7), the mapping
table of §7, and for undocumented types the defaults the reference recommends in §1.7 / §6
(asserted as *our documented defaults*, not as CES truth, and each switchable).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from debezium_bridge.errors import ConfigError, ValueConversionError
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.ces.render import RenderStats, parser, renderer
from debezium_bridge.formats.columns import (
    GUESSED_COLUMNS,
    ColumnCatalog,
    column_type,
    columns_of,
)
from debezium_bridge.formats.debezium.sqltypes import SqlColumn, connect_column
from debezium_bridge.model.change import TableRef
from debezium_bridge.model.schema import Column, TableSchema
from debezium_bridge.model.sqltype import SqlType, parse_type, type_from_source

DEFAULT = CesOptions()


def render(type_text: str, value: object, options: CesOptions = DEFAULT) -> str:
    return renderer(parse_type(type_text), options)(value)


# --------------------------------------------------------------------------- type names


@pytest.mark.parametrize("text", ["int", "nvarchar(50)", "datetime2(7)", "varchar(100)",
                                  "datetime", "smallint", "varchar(50)"])
def test_documented_type_names_parse_and_print_back(text: str) -> None:
    # every cols[].type in the MS Learn samples and the ACE capture (ces.md §1.5)
    assert parse_type(text).text == text


def test_type_name_parsing_details() -> None:
    assert parse_type("DECIMAL(10, 2)") == SqlType("decimal", precision=10, scale=2)
    assert parse_type("nvarchar(max)").text == "nvarchar(max)"
    assert parse_type("int identity").text == "int"  # mssql-jdbc's name of an identity column
    assert parse_type("float(24)").text == "real" and parse_type("float(53)").text == "float"
    with pytest.raises(ValueConversionError):
        parse_type("decimal(")


@pytest.mark.parametrize(("name", "length", "scale", "expected"), [
    # ces.md §7: name(len) with max for the mssql-jdbc max sizes; decimal(len,scale);
    # datetime2/time/datetimeoffset(scale); others bare
    ("NVARCHAR", 50, None, "nvarchar(50)"),
    ("NVARCHAR", 1073741823, None, "nvarchar(max)"),
    ("VARCHAR", 2147483647, None, "varchar(max)"),
    ("VARBINARY", 2147483647, None, "varbinary(max)"),
    ("CHAR", 10, None, "char(10)"),
    ("DECIMAL", 10, 2, "decimal(10,2)"),
    ("NUMERIC", 18, 0, "numeric(18,0)"),
    ("DATETIME2", 27, 7, "datetime2(7)"),
    ("TIME", 16, 7, "time(7)"),
    ("DATETIMEOFFSET", 34, 7, "datetimeoffset(7)"),
    ("DATETIME", 23, 3, "datetime"),
    ("INT", 10, 0, "int"),
    ("BIT", 1, None, "bit"),
    ("UNIQUEIDENTIFIER", 36, None, "uniqueidentifier"),
    ("MONEY", 19, 4, "money"),
    ("FLOAT", 53, None, "float"),
    ("INT IDENTITY", 10, 0, "int"),
])
def test_type_from_propagated_source_parameters(name: str, length: int | None,
                                                scale: int | None, expected: str) -> None:
    assert type_from_source(name, length, scale).text == expected


@pytest.mark.parametrize(("declared", "expected"), [
    # the parameters Debezium's PropagateSourceTypeToSchemaParameter writes (sqltypes
    # reproduces them) must give the declared type back
    ("int", "int"), ("bigint", "bigint"), ("smallint", "smallint"), ("tinyint", "tinyint"),
    ("bit", "bit"), ("decimal(10,2)", "decimal(10,2)"), ("numeric(5,0)", "numeric(5,0)"),
    ("money", "money"), ("smallmoney", "smallmoney"), ("float", "float"), ("real", "real"),
    ("char(3)", "char(3)"), ("varchar(100)", "varchar(100)"), ("nvarchar(50)", "nvarchar(50)"),
    ("nvarchar(max)", "nvarchar(max)"), ("varchar(max)", "varchar(max)"),
    ("varbinary(max)", "varbinary(max)"), ("binary(16)", "binary(16)"),
    ("uniqueidentifier", "uniqueidentifier"), ("date", "date"), ("time(3)", "time(3)"),
    ("datetime", "datetime"), ("smalldatetime", "smalldatetime"),
    ("datetime2(7)", "datetime2(7)"), ("datetime2(0)", "datetime2(0)"),
    ("datetimeoffset(7)", "datetimeoffset(7)"), ("xml", "xml"),
])
def test_connect_column_with_propagated_type_gives_the_declared_type(declared: str,
                                                                      expected: str) -> None:
    from debezium_bridge.formats.debezium.sqltypes import ConnectorModes

    column = connect_column(SqlColumn("c", declared), ConnectorModes(propagate_source_types=True))
    sql_type, exact = column_type(column)
    assert (sql_type.text, exact) == (expected, True)


@pytest.mark.parametrize(("declared", "expected"), [
    # ces.md §7 fallback from Connect types (no column.propagate.source.type)
    ("int", "int"), ("smallint", "smallint"), ("tinyint", "smallint"), ("bigint", "bigint"),
    ("bit", "bit"), ("datetime2(7)", "datetime2(7)"), ("datetime2(6)", "datetime2(6)"),
    ("datetime2(3)", "datetime2(3)"), ("datetime", "datetime2(3)"), ("date", "date"),
    ("nvarchar(50)", "nvarchar(max)"), ("decimal(10,2)", "decimal(10,2)"),
    ("float", "float"), ("real", "real"), ("varbinary(16)", "varbinary(max)"),
    ("time(7)", "time(7)"), ("datetimeoffset(7)", "datetimeoffset(7)"),
])
def test_connect_type_fallback(declared: str, expected: str) -> None:
    sql_type, exact = column_type(connect_column(SqlColumn("c", declared)))
    assert (sql_type.text, exact) == (expected, False)


def test_catalog_matches_table_and_column_names() -> None:
    columns = tuple(connect_column(SqlColumn(n, t)) for n, t in (("id", "int"), ("x", "bit")))
    catalog = ColumnCatalog()
    catalog.add_schema(TableSchema("server1.db1.dbo.t.Value", columns))
    catalog.add_schema(TableSchema("server1.db1.dbo.t.Key", columns[:1]))  # ignored
    found = catalog.lookup(TableRef("db1", "dbo", "t"), ("id", "x"))
    assert found is not None and [(c.name, c.type, c.index) for c in found] == [
        ("id", "int", 0), ("x", "bit", 1)]
    assert catalog.lookup(TableRef("db1", "dbo", "other"), ("id", "x")) is None
    assert catalog.lookup(TableRef("db1", "dbo", "t"), ("id",)) is None
    # a newer version with other columns does not hide the first one
    wider = (*columns, Column("y", "string"))
    catalog.add_schema(TableSchema("server1.db1.dbo.t.Value", wider))
    assert catalog.lookup(TableRef("db1", "dbo", "t"), ("id", "x")) == found
    assert [c.type for c in columns_of(TableSchema("n", wider))] == ["int", "bit",
                                                                      "nvarchar(max)"]


def test_guessed_types_stick_per_column() -> None:
    catalog = ColumnCatalog()
    table = TableRef("db", "dbo", "t")
    first = catalog.guess(table, [{"id": 1, "n": None, "f": True}], ("id", "n", "f"))
    assert [(c.type, c.exact) for c in first] == [("bigint", False), ("nvarchar(max)", False),
                                                  ("bit", False)]
    later = catalog.guess(table, [{"id": 2, "n": 1.5, "f": None}], ("id", "n", "f"))
    assert [c.type for c in later] == ["bigint", "float", "bit"]


def test_the_guesses_kept_are_bounded_by_whole_tables() -> None:
    """Past the bound, the least recently guessed tables are forgotten, never columns of the
    table at hand: a record wider than the bound keeps every guess, and a table guessed again
    after another was forgotten still has its own."""
    catalog = ColumnCatalog()
    wide = {f"c{i}": i for i in range(GUESSED_COLUMNS + 10)}
    found = catalog.guess(TableRef("db", "dbo", "wide"), [wide], tuple(wide))
    assert {c.type for c in found} == {"bigint"}
    tables = [TableRef("db", "dbo", f"t{n}") for n in range(GUESSED_COLUMNS // 100 + 2)]
    row = {f"c{i}": i % 2 == 0 for i in range(100)}
    for table in tables:
        assert {c.type for c in catalog.guess(table, [row], tuple(row))} == {"bit"}
    # "wide" was forgotten first; the oldest small tables followed it, the newest are kept
    assert catalog.guess(TableRef("db", "dbo", "wide"), [], ("c0",))[0].type == "nvarchar(max)"
    assert catalog.guess(tables[-1], [], ("c0",))[0].type == "bit"


# --------------------------------------------------------------------------- values


def test_documented_value_strings() -> None:
    # MF-26: datetime2(7) "2026-08-07 16:25:00.8833333", ints "8"; MF-25: datetime
    # "2025-03-14 16:45:01.000", ints "105", varchar "Anna Doe". Inputs are the canonical forms
    # the core decodes Debezium values to (SPEC §5.1).
    assert render("datetime2(7)", "2026-08-07T16:25:00.8833333") == "2026-08-07 16:25:00.8833333"
    assert render("datetime", "2025-03-14T16:45:01.000") == "2025-03-14 16:45:01.000"
    assert render("int", 105) == "105"
    assert render("smallint", 8) == "8"
    assert render("varchar(100)", "Anna Doe") == "Anna Doe"


def test_undocumented_value_strings_follow_the_reference_defaults() -> None:
    # ces.md §1.7 recommended defaults (A15): each is an option, tested below
    assert render("bit", True) == "1" and render("bit", False) == "0"
    assert render("decimal(10,2)", "150.00") == "150.00"
    assert render("decimal(10,2)", "150") == "150.00"  # exactly s fraction digits
    assert render("decimal(10,2)", "-12.3") == "-12.30"
    assert render("numeric(5,0)", "42") == "42"
    assert render("money", "42.0000") == "42.0000"
    assert render("float", 0.1) == "0.1"  # shortest round-trip text
    assert render("uniqueidentifier", "6e10c210-20ed-469f-beee-d022dfad13c4") == \
        "6E10C210-20ED-469F-BEEE-D022DFAD13C4"
    assert render("varbinary(16)", base64.b64encode(b"\x01\xab\xff").decode()) == "0x01ABFF"
    assert render("date", "2025-03-14") == "2025-03-14"
    assert render("time(7)", "16:45:01.1234567") == "16:45:01.1234567"
    assert render("time(0)", "16:45:01") == "16:45:01"
    assert render("smalldatetime", "2025-03-14T16:45:00.000") == "2025-03-14 16:45:00"
    assert render("datetimeoffset(7)", "2025-03-14T16:45:01.1234567+01:00") == \
        "2025-03-14 16:45:01.1234567 +01:00"
    assert render("datetimeoffset(3)", "2025-03-14T16:45:01.5Z") == \
        "2025-03-14 16:45:01.500 +00:00"


def test_every_undocumented_choice_is_switchable() -> None:
    assert render("bit", True, CesOptions(bit="boolean")) == "true"
    assert render("money", "42.0050", CesOptions(money_scale=2)) == "42.01"
    assert render("float", 1e16) == "1e+16"
    assert render("float", 1e16, CesOptions(floats="plain")) == "10000000000000000"
    guid = "6e10c210-20ed-469f-beee-d022dfad13c4"
    assert render("uniqueidentifier", guid, CesOptions(uniqueidentifier="as-is")) == guid
    b64 = base64.b64encode(b"\x01\xab").decode()
    assert render("varbinary(8)", b64, CesOptions(binary="base64")) == b64
    assert render("smalldatetime", "2025-03-14T16:45:00.000",
                  CesOptions(smalldatetime="milliseconds")) == "2025-03-14 16:45:00.000"
    assert render("datetimeoffset(7)", "2025-03-14T16:45:01.1234567-05:00",
                  CesOptions(datetimeoffset="iso")) == "2025-03-14T16:45:01.1234567-05:00"


def test_fraction_digits_follow_the_type_but_never_lose_a_digit() -> None:
    assert render("datetime2(3)", "2025-01-02T03:04:05.1") == "2025-01-02 03:04:05.100"
    assert render("datetime2(7)", "2025-01-02T03:04:05.120") == "2025-01-02 03:04:05.1200000"
    assert render("datetime2(0)", "2025-01-02T03:04:05.000") == "2025-01-02 03:04:05"
    assert render("datetime2(2)", "2025-01-02T03:04:05.1234") == "2025-01-02 03:04:05.1234"


def test_wrong_values_are_errors_not_guesses() -> None:
    for type_text, value in (("int", "abc"), ("decimal(5,2)", "AYag"), ("bit", 7),
                             ("date", 5), ("varbinary(4)", "not base64!"), ("float", "x"),
                             ("datetime2(7)", "yesterday")):
        with pytest.raises(ValueConversionError):
            render(type_text, value)


def test_max_column_kb_truncates_at_a_character_boundary() -> None:
    stats = RenderStats()
    text = "a" + "日" * 400_000  # 1 + 1.2 MB of UTF-8
    out = renderer(parse_type("nvarchar(max)"), DEFAULT, stats)(text)
    raw = out.encode()
    assert len(raw) <= 1024 * 1024 and len(raw) > 1024 * 1024 - 3
    assert text.startswith(out) and stats.truncated_values == 1
    assert renderer(parse_type("nvarchar(max)"), CesOptions(max_column_kb=0))(text) == text
    blob = base64.b64encode(b"\x00" * (1024 * 1024 + 10)).decode()
    assert len(renderer(parse_type("varbinary(max)"), DEFAULT, stats)(blob)) == \
        2 + 2 * 1024 * 1024
    assert stats.truncated_values == 2


def test_options_are_validated() -> None:
    for bad in ({"max_message_size_kb": 127}, {"max_message_size_kb": 1025},
                {"logical_id_guid": "nope"}, {"partition_key_scheme": "Column"},
                {"max_column_kb": -1}):
        with pytest.raises(ConfigError):
            CesOptions(**bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- back again


@pytest.mark.parametrize(("type_text", "text", "canonical"), [
    ("int", "105", 105), ("bigint", "-9223372036854775808", -9223372036854775808),
    ("bit", "1", True), ("bit", "false", False),
    ("decimal(10,2)", "150.00", "150.00"), ("decimal(10,2)", "7", "7.00"),
    ("money", "42.00", "42.0000"),
    ("float", "1e+16", 1e16), ("real", "0.1", 0.1),
    ("nvarchar(50)", "Nikola", "Nikola"),
    ("datetime2(7)", "2026-08-07 16:25:00.8833333", "2026-08-07T16:25:00.8833333"),
    ("datetime", "2025-03-14 16:45:01.000", "2025-03-14T16:45:01.000"),
    ("smalldatetime", "2025-03-14 16:45:00", "2025-03-14T16:45:00"),
    ("date", "2025-03-14", "2025-03-14"),
    ("time(3)", "16:45:01.5", "16:45:01.500"),
    ("datetimeoffset(7)", "2025-03-14 16:45:01.1234567 +01:00",
     "2025-03-14T16:45:01.1234567+01:00"),
    ("datetimeoffset(7)", "2025-03-14 16:45:01.1000000 +00:00", "2025-03-14T16:45:01.1Z"),
    ("varbinary(8)", "0x01ABFF", base64.b64encode(b"\x01\xab\xff").decode()),
    ("uniqueidentifier", "6E10C210-20ED-469F-BEEE-D022DFAD13C4",
     "6E10C210-20ED-469F-BEEE-D022DFAD13C4"),
])
def test_strings_parse_to_canonical_values(type_text: str, text: str, canonical: object) -> None:
    # canonical forms: SPEC §5.1 (datetimeoffset as Debezium's ZonedTimestamp writes it)
    assert parser(parse_type(type_text))(text) == canonical


_DT = st.datetimes(min_value=dt.datetime(1753, 1, 1),  # noqa: DTZ001 - naive on purpose
                   max_value=dt.datetime(9999, 12, 31))  # noqa: DTZ001 - (SQL datetime2)


@given(st.integers(-(2**63), 2**63 - 1), st.integers(0, 10**12 - 1), st.integers(0, 4),
       _DT, st.integers(0, 7), st.binary(max_size=40), st.booleans(),
       st.floats(allow_nan=False, allow_infinity=False))
def test_render_then_parse_is_the_identity(big: int, unscaled: int, scale: int,
                                           moment: dt.datetime, digits: int, blob: bytes,
                                           flag: bool, number: float) -> None:
    fraction = f"{moment.microsecond:06d}0"[:digits]
    stamp = moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if digits else "")
    decimal_text = format(decimal.Decimal(unscaled).scaleb(-scale), "f")
    cases = [
        ("bigint", big), (f"decimal(18,{scale})", decimal_text),
        (f"datetime2({digits})", stamp), (f"time({digits})", stamp[11:]),
        ("varbinary(max)", base64.b64encode(blob).decode()), ("bit", flag),
        ("float", number), ("date", stamp[:10]),
    ]
    for type_text, value in cases:
        sql_type = parse_type(type_text)
        assert parser(sql_type)(renderer(sql_type, DEFAULT)(value)) == value, type_text


def test_decimal_digits_beyond_the_scale_survive_both_ways() -> None:
    sql_type = parse_type("decimal(10,2)")
    text = renderer(sql_type, DEFAULT)("1.234")  # never cut (a value is not made less precise)
    assert text == "1.234" and parser(sql_type)(text) == "1.234"
    with pytest.raises(ValueConversionError):
        parser(sql_type)("1.2.3")
