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
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from debezium_bridge.core import native as native_core
from debezium_bridge.model.records import RawRecord
from tests.differential.streams import Stream
from tests.differential.test_cores import _run

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


def both(value: str, key: bytes | None = b'{"id":1}') -> tuple[Any, ...]:
    """Both cores' results; they must agree."""
    stream = Stream(records(value, key), [(TOPIC, 0)], {}, "bytes")
    python = _run(stream, "off", {}, 2, expect=False)
    native = _run(stream, "on", {}, 2, expect=False)
    assert native[2] == python[2], "counters differ"
    assert native[1] == python[1], "dead letters differ"
    assert native[0] == python[0], "canonical lines differ"
    assert native[3] == python[3], "state sizes differ"
    return python


ALL = {**SAME_AS_PLAIN, **NOT_JSON, **{k: v for k, (v, _, _) in DUPLICATES.items()}, **OTHER}


@pytest.mark.parametrize("key_case", sorted(KEYS))
@pytest.mark.parametrize("case", sorted(ALL))
def test_the_cores_agree(case: str, key_case: str) -> None:
    both(ALL[case], KEYS[key_case])


def test_the_plain_envelope_is_one_insert() -> None:
    lines, dead, counters, _, _ = both(PLAIN)
    assert not dead
    (line,) = lines.splitlines()  # the replay at offset 1 is dropped
    record = json.loads(line)
    assert (record["op"], record["after"], record["position"]["commit_lsn"]) == (
        "insert", {"id": 1, "name": "a", "amount": 1.5}, "00000025:00000d08:0015")
    assert counters["duplicates"] == 1


@pytest.mark.parametrize("case", sorted(SAME_AS_PLAIN))
def test_equivalent_spellings_give_the_same_record(case: str) -> None:
    assert both(SAME_AS_PLAIN[case])[:2] == both(PLAIN)[:2]


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
