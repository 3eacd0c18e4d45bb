"""Dump-file readers and writers (debezium_bridge.formats.dumps)."""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import sys
import types
from collections.abc import Iterable
from pathlib import Path

import pytest

from debezium_bridge.errors import ConfigError
from debezium_bridge.formats.dumps import (
    DumpFormat,
    DumpLineError,
    detect_format,
    read_dump,
    read_dumps,
    to_lossless_line,
    write_lossless,
)
from debezium_bridge.model.records import RawRecord
from tests.paths import DATA

RISINGWAVE = DATA / "risingwave-debezium"

# A real `kcat -C -J` line, quoted in edenhill/kcat PR #281 ("Before"): headers are a flat array
# of alternating names and values, a null header value is JSON null, names may repeat.
KCAT_LINE = (
    b'{"topic":"test","partition":0,"offset":4,"tstype":"create","ts":1603987358147,"broker":1,'
    b'"headers":["header1","header value","nullheader",null,"emptyheader","","header1",'
    b'"duplicateIsOk"],"key":null,"payload":"toto"}'
)


def lossless_line(**fields: object) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def only_records(items: Iterable[RawRecord | DumpLineError]) -> list[RawRecord]:
    out = list(items)
    records = [i for i in out if isinstance(i, RawRecord)]
    assert records == out
    return records


# --- lossless ------------------------------------------------------------------------------


def test_lossless_round_trip_is_byte_exact() -> None:
    records = [
        RawRecord(
            topic="server1.testDB.dbo.customers",
            partition=3,
            offset=42,
            timestamp=1_700_000_000_123,
            key=bytes(range(256)),
            value=b'{"op":"c"}',
            headers=(("h", b"\x00\xff"), ("h", None), ("h", b""), ("ünï", b"\n")),
        ),
        RawRecord(topic="t", partition=0, offset=None, timestamp=None, key=None, value=None),
        RawRecord(topic="t", partition=1, offset=0, key=b"", value=b""),
        RawRecord(topic="t", value=b"\r\n\x00 null"),
    ]
    out = io.BytesIO()
    assert write_lossless(records, out) == len(records)
    data = out.getvalue()
    assert data == b"".join(to_lossless_line(r) for r in records)
    assert list(read_dump(io.BytesIO(data))) == records


def test_lossless_line_layout_follows_the_spec() -> None:
    record = RawRecord("t", 1, 7, 9, b"\xfe", None, (("a", None), ("b", b"x")))
    line = to_lossless_line(record)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {
        "topic": "t",
        "partition": 1,
        "offset": 7,
        "timestamp": 9,
        "headers": [["a", None], ["b", base64.b64encode(b"x").decode()]],
        "key_b64": base64.b64encode(b"\xfe").decode(),
        "value_b64": None,
    }


def test_lossless_optional_fields_may_be_omitted() -> None:
    line = b'{"topic":"t","partition":2,"key_b64":null,"value_b64":"eyJhIjoxfQ=="}\n'
    assert list(read_dump(io.BytesIO(line))) == [
        RawRecord("t", 2, None, None, None, b'{"a":1}', ())
    ]


def test_lossless_bad_lines_become_errors_and_reading_continues() -> None:
    good = lossless_line(topic="t", partition=0, offset=1, key_b64=None, value_b64="YQ==")
    lines = [
        good,
        b"\n",
        b'{"topic":"t","partition":0,"key_b64":null,"value_b64":"YQ=\n',  # truncated
        lossless_line(topic="t", partition=0, key_b64=None, value_b64="not base64!"),
        lossless_line(topic="t", partition="0", key_b64=None, value_b64=None),
        lossless_line(topic="t", partition=0, key_b64=None),  # value_b64 missing
        good,
    ]
    items = list(read_dump(io.BytesIO(b"".join(lines))))
    assert [type(i) for i in items] == [
        RawRecord,
        DumpLineError,
        DumpLineError,
        DumpLineError,
        DumpLineError,
        RawRecord,
    ]
    errors = [i for i in items if isinstance(i, DumpLineError)]
    assert [e.line_no for e in errors] == [3, 4, 5, 6]
    assert errors[0].raw == lines[2].rstrip(b"\n")
    assert "base64" in errors[1].message
    assert all(e.path == "<stream>" for e in errors)


def test_lossless_detected_past_a_corrupt_first_line() -> None:
    data = b'{"topic":"t","key_b64":\n' + lossless_line(
        topic="t", partition=0, key_b64=None, value_b64="YQ=="
    )
    reader = read_dump(io.BytesIO(data))
    assert reader.format is DumpFormat.LOSSLESS
    first, second = list(reader)
    assert isinstance(first, DumpLineError) and first.line_no == 1
    assert second == RawRecord("t", 0, None, None, None, b"a")


# --- kcat -J -------------------------------------------------------------------------------


def test_kcat_line_with_headers() -> None:
    reader = read_dump(io.BytesIO(KCAT_LINE + b"\n"))
    assert reader.format is DumpFormat.KCAT
    assert list(reader) == [
        RawRecord(
            topic="test",
            partition=0,
            offset=4,
            timestamp=1603987358147,
            key=None,
            value=b"toto",
            headers=(
                ("header1", b"header value"),
                ("nullheader", None),
                ("emptyheader", b""),
                ("header1", b"duplicateIsOk"),
            ),
        )
    ]


def test_kcat_without_headers_or_timestamp_and_escaped_payload() -> None:
    # json.c omits "headers" when a message has none, and "tstype"/"ts" when no timestamp.
    value = '{"before":null,"after":{"id":1,"name":"Zoë\\t\\"q\\""},"op":"c"}'
    line = json.dumps(
        {
            "topic": "s.db.dbo.t",
            "partition": 2,
            "offset": 0,
            "broker": 1,
            "key": '{"id":1}',
            "payload": value,
        },
        ensure_ascii=False,
    ).encode()
    assert list(read_dump(io.BytesIO(line))) == [
        RawRecord("s.db.dbo.t", 2, 0, None, b'{"id":1}', value.encode())
    ]


def test_kcat_non_utf8_bytes_pass_through() -> None:
    # yajl's string encoder only escapes '"', '\\' and bytes < 0x20; other bytes (even invalid
    # UTF-8) are copied verbatim into the JSON line.
    line = (
        b'{"topic":"t","partition":0,"offset":1,"tstype":"logappend","ts":5,"broker":0,'
        b'"headers":["bin","\xc3\x28\\u0000"],"key":"\xff\\n","payload":"\x80\\u0001\\"x"}'
    )
    assert list(read_dump(io.BytesIO(line), fmt=DumpFormat.KCAT)) == [
        RawRecord("t", 0, 1, 5, b"\xff\n", b'\x80\x01"x', (("bin", b"\xc3\x28\x00"),))
    ]


def test_kcat_header_map_form() -> None:
    line = (
        b'{"topic":"t","partition":0,"offset":1,"headers":{"a":["1",null],"b":"2"},'
        b'"key":null,"payload":null}'
    )
    assert list(read_dump(io.BytesIO(line), fmt=DumpFormat.KCAT)) == [
        RawRecord("t", 0, 1, None, None, None, (("a", b"1"), ("a", None), ("b", b"2")))
    ]


def test_kcat_bad_lines_become_errors() -> None:
    avro_failed = (
        b'{"topic":"t","partition":0,"offset":2,"broker":1,"key":null,"payload":null,'
        b'"payload_error":"Invalid CP1 magic byte 123, expected 0"}'
    )
    odd_headers = b'{"topic":"t","partition":0,"offset":3,"headers":["a"],"key":null,"payload":"x"}'
    no_payload = b'{"topic":"t","partition":0,"offset":4,"key":null}'
    data = b"\n".join([KCAT_LINE, avro_failed, odd_headers, b"{oops", no_payload, KCAT_LINE])
    items = list(read_dump(io.BytesIO(data)))
    assert [type(i).__name__ for i in items] == [
        "RawRecord",
        "DumpLineError",
        "DumpLineError",
        "DumpLineError",
        "DumpLineError",
        "RawRecord",
    ]
    errors = [i for i in items if isinstance(i, DumpLineError)]
    assert [e.line_no for e in errors] == [2, 3, 4, 5]
    assert "Invalid CP1 magic byte" in errors[0].message
    assert errors[2].raw == b"{oops"


# --- console-consumer text -------------------------------------------------------------------


def test_text_value_only_with_null_tombstones(tmp_path: Path) -> None:
    path = tmp_path / "server1.testDB.dbo.customers.txt"
    path.write_bytes(b'{"op":"c"}\n\nnull\n{"op":"d"}\r\n')
    reader = read_dump(path)
    assert reader.format is DumpFormat.TEXT
    assert list(reader) == [
        RawRecord("server1.testDB.dbo.customers", 0, 0, None, None, b'{"op":"c"}'),
        RawRecord("server1.testDB.dbo.customers", 0, 1, None, None, None),
        RawRecord("server1.testDB.dbo.customers", 0, 2, None, None, b'{"op":"d"}'),
    ]
    assert reader.bytes_read == reader.total_bytes == path.stat().st_size


def test_text_topic_keeps_dots_of_an_extensionless_name(tmp_path: Path) -> None:
    path = tmp_path / "server1.testDB.dbo.customers"
    path.write_bytes(b"x\n")
    assert [r.topic for r in only_records(read_dump(path))] == ["server1.testDB.dbo.customers"]


def test_text_with_default_tab_separator() -> None:
    data = b'{"id":1}\t{"op":"c"}\n{"id":1}\tnull\nnull\t{"op":"r"}\n'
    reader = read_dump(io.BytesIO(data), topic="t", key_separator="\t", partition=5)
    assert list(reader) == [
        RawRecord("t", 5, 0, None, b'{"id":1}', b'{"op":"c"}'),
        RawRecord("t", 5, 1, None, b'{"id":1}', None),
        RawRecord("t", 5, 2, None, None, b'{"op":"r"}'),
    ]


def test_text_separator_splits_at_first_occurrence() -> None:
    data = b"k|v|w\nk|\n"
    assert list(read_dump(io.BytesIO(data), topic="t", key_separator="|")) == [
        RawRecord("t", 0, 0, None, b"k", b"v|w"),
        RawRecord("t", 0, 1, None, b"k", None),
    ]


def test_text_avro_json_lines_are_not_mistaken_for_json_dumps() -> None:
    line = b'{"before":null,"after":{"Value":{"id":1,"name":{"string":"x"}}},"op":"c"}\n'
    reader = read_dump(io.BytesIO(line), topic="t")
    assert reader.format is DumpFormat.TEXT
    assert list(reader) == [RawRecord("t", 0, 0, None, None, line.rstrip(b"\n"))]


def test_text_stream_needs_a_topic() -> None:
    with pytest.raises(ConfigError):
        read_dump(io.BytesIO(b"x\n"))


def test_dash_reads_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", types.SimpleNamespace(buffer=io.BytesIO(KCAT_LINE)))
    reader = read_dump("-")
    assert reader.path == "<stdin>" and reader.total_bytes is None
    assert [r.offset for r in only_records(reader)] == [4]


def test_risingwave_avro_json_file() -> None:
    path = RISINGWAVE / "debezium_non_compact_avro_json.1"
    reader = read_dump(path, topic="orders")
    assert reader.format is DumpFormat.TEXT
    assert set(reader.avro_schemas) == {"orders-key", "orders-value"}
    assert reader.avro_schemas["orders-key"]["name"] == "Key"
    assert reader.avro_schemas["orders-value"]["name"] == "Envelope"
    assert reader.avro_schemas["orders-value"]["namespace"] == "postgres.public.orders"
    records = only_records(reader)
    # 7 lines: the schema line, then r, r, r, u, d and a `{"order_id": 1}^` tombstone.
    assert len(records) == 6
    assert [r.offset for r in records] == list(range(6))
    assert [r.key for r in records] == [b'{"order_id": %d}' % i for i in (1, 2, 3, 1, 1, 1)]
    assert [json.loads(r.value or b"")["op"] for r in records[:5]] == ["r", "r", "r", "u", "d"]
    assert records[5].value is None
    assert reader.bytes_read == path.stat().st_size


def test_risingwave_topic_from_file_name() -> None:
    reader = read_dump(RISINGWAVE / "debezium_compact_avro_json.1")
    assert reader.topic == "debezium_compact_avro_json"
    assert set(reader.avro_schemas) == {
        "debezium_compact_avro_json-key",
        "debezium_compact_avro_json-value",
    }
    assert len(list(reader)) == 5  # schema line + r, r, r, u, tombstone


# --- detection, forcing, several files ---------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b'{"topic":"t","partition":0,"key_b64":null,"value_b64":null}', DumpFormat.LOSSLESS),
        (KCAT_LINE, DumpFormat.KCAT),
        # Debezium JSON with schemas has "payload", but no partition/offset: a text value.
        (b'{"schema":{"type":"struct"},"payload":{"op":"c"}}', DumpFormat.TEXT),
        (b'{"before":null,"after":{"Value":{"name":{"string":"x"}}}}', DumpFormat.TEXT),
        (b'{"id":1}\t{"op":"c"}', DumpFormat.TEXT),
        (b"null", DumpFormat.TEXT),
        (b"[1, 2]", DumpFormat.TEXT),
        (b"  " + KCAT_LINE + b"\n", DumpFormat.KCAT),
    ],
)
def test_detect_format(line: bytes, expected: DumpFormat) -> None:
    assert detect_format(line) is expected


def test_forced_format_wins() -> None:
    reader = read_dump(io.BytesIO(KCAT_LINE), fmt=DumpFormat.TEXT, topic="raw")
    assert reader.format is DumpFormat.TEXT
    assert list(reader) == [RawRecord("raw", 0, 0, None, None, KCAT_LINE)]


def test_several_files_form_one_stream(tmp_path: Path) -> None:
    a = tmp_path / "a.jsonl"
    with a.open("wb") as out:
        write_lossless([RawRecord("t", 0, 0, value=b"1"), RawRecord("t", 0, 1, value=b"2")], out)
    b = tmp_path / "b.json"
    b.write_bytes(KCAT_LINE + b"\n{broken\n")
    c = tmp_path / "s.db.dbo.c.txt"
    c.write_bytes(b"null\n")
    items = list(read_dumps([a, b, str(c)]))
    assert [(type(i).__name__, getattr(i, "topic", None)) for i in items] == [
        ("RawRecord", "t"),
        ("RawRecord", "t"),
        ("RawRecord", "test"),
        ("DumpLineError", None),
        ("RawRecord", "s.db.dbo.c"),
    ]
    error = items[3]
    assert isinstance(error, DumpLineError)
    assert (error.path, error.line_no, error.raw) == (str(b), 2, b"{broken")


def test_reader_closes_its_file(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_bytes(b"a\n")
    with read_dump(path) as reader:
        list(reader)
    assert reader._file.closed


def test_any_kafka_record_can_be_written() -> None:
    @dataclasses.dataclass
    class Message:  # e.g. an adapter over a client's message type, headers as a list
        topic: str = "t"
        partition: int = 1
        offset: int | None = 5
        timestamp: int | None = None
        key: bytes | None = b"k"
        value: bytes | None = b"v"
        headers: list[tuple[str, bytes | None]] = dataclasses.field(
            default_factory=lambda: [("a", None)]
        )

    (record,) = only_records(read_dump(io.BytesIO(to_lossless_line(Message()))))
    assert record == RawRecord("t", 1, 5, None, b"k", b"v", (("a", None),))


def test_line_numbers_count_blank_and_peeked_lines() -> None:
    good = lossless_line(topic="t", partition=0, key_b64=None, value_b64=None)
    data = b"\n\n" + good + b"\n" + good * 8 + b"[]\n"
    items = list(read_dump(io.BytesIO(data)))
    assert len(items) == 10
    error = items[-1]
    assert isinstance(error, DumpLineError)
    assert (error.line_no, error.raw) == (13, b"[]")


def test_empty_key_separator_is_rejected() -> None:
    with pytest.raises(ConfigError):
        read_dump(io.BytesIO(b"x\n"), topic="t", key_separator="")


def test_blank_file_has_no_records(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"\n  \n")
    reader = read_dump(path)
    assert reader.format is DumpFormat.TEXT
    assert list(reader) == []
