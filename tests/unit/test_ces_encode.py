"""CES encoder: canonical records → CES CloudEvents (``debezium_bridge.formats.ces.encode``).

Expected values come from the CES message format on MS Learn
(https://learn.microsoft.com/en-us/sql/relational-databases/track-changes/change-event-streaming/message-format),
the reference ``ces.md`` built on it (§1.5 field spec, §6 resolutions, §7 mapping) and from the
simulation inputs of the demo traffic (``samples.demo`` expectation, the demo rows and the
``CUSTOMERS`` column declarations), never from the encoder's own output.
Every event produced here is validated against the JSON Schemas (``ces.schema``).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import msgspec
import pytest

from debezium_bridge.errors import EncodeError
from debezium_bridge.formats.ces.encode import ID_NAMESPACE, CesEncoder
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.ces.segments import safe_cut, split_content
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.testing.ces_schema import CesValidationError, validate_events
from debezium_bridge.testing.simulator import _DEMO_ROWS, CUSTOMERS, CdcSimulator, Insert, demo
from tests.unit.ces_support import PROPAGATE, ces_values, events, rows_of, run

ATTRIBUTES = ["specversion", "type", "source", "id", "logicalid", "time", "datacontenttype",
              "operation", "segmentindex", "finalsegment", "data"]
"""ces.md §1.5: the 11 attributes in MF-26 order (= Avro field order)."""
OPERATION = {"read": "INS", "insert": "INS", "update": "UPD", "delete": "DEL"}
DEMO_ROWS = {row["id"]: row for row in _DEMO_ROWS}


@pytest.fixture(scope="module")
def demo_run() -> tuple[list[ChangeRecord], Any, Any]:
    records, expected = demo()
    changes, dead, pipeline = run(records)
    assert len(dead) == expected.corrupt
    return changes, expected, pipeline


def encode(demo_run: tuple[list[ChangeRecord], Any, Any], **options: Any
           ) -> list[dict[str, Any]]:
    changes, _, pipeline = demo_run
    opts = CesOptions(**options)
    return events(ces_values(changes, pipeline, opts), opts)


def test_demo_events_are_valid_and_in_documented_shape(demo_run) -> None:
    changes, expected, pipeline = demo_run
    values = ces_values(changes, pipeline)
    for value in values:
        assert list(json.loads(value)) == ATTRIBUTES
        assert b"\n" not in value  # one Kafka value per line
    out = events(values)
    assert [e["operation"] for e in out] == [OPERATION[c.op] for c in expected.changes]
    for event, change in zip(out, expected.changes, strict=True):
        data = event["data"]
        source = data["eventsource"]
        assert (source["db"], source["schema"], source["tbl"]) == (
            CUSTOMERS.db, CUSTOMERS.schema, CUSTOMERS.table)
        assert source["transaction"]["commitlsn"] == change.commit_lsn.upper()  # ces.md §1.6
        assert source["transaction"]["finalevent"] is False
        guid, lsn20, seq20 = event["logicalid"].split(":")
        assert uuid.UUID(guid) and lsn20 == change.commit_lsn.replace(":", "").upper()
        assert int(seq20) == source["transaction"]["sequencenumber"]
        assert [p["value"] for p in source["pkkey"]] == [str(v) for v in change.key.values()]
        assert (event["source"], event["specversion"], event["type"]) == (
            "/", "1.0", "com.microsoft.SQL.CES.DML.V1")
        assert event["datacontenttype"] == "application/json"
        assert (event["segmentindex"], event["finalsegment"]) == (1, True)  # A2 default base 1


def test_envelope_escapes_slashes_like_the_examples(demo_run) -> None:
    value = ces_values(demo_run[0][:1], demo_run[2])[0]
    assert b'"source":"\\/"' in value and b'"datacontenttype":"application\\/json"' in value
    assert b"/" not in value.replace(b"\\/", b"")  # A7: escaped at every level


def test_primary_key_change_is_one_update(demo_run) -> None:
    _changes, expected, _ = demo_run
    (change,) = [c for c in expected.changes if c.old_key is not None]
    out = encode(demo_run)
    at_position = [e for e in out
                   if e["data"]["eventsource"]["transaction"]["commitlsn"]
                   == change.commit_lsn.upper()]
    assert [e["operation"] for e in at_position] == ["UPD"]  # A18 default
    event = at_position[0]
    old, current = rows_of(event)
    assert old["id"] == str(change.old_key["id"]) and current["id"] == str(change.key["id"])
    assert event["data"]["eventsource"]["pkkey"] == [
        {"columnname": "id", "value": str(change.key["id"])}]
    assert current["name"] == DEMO_ROWS[change.old_key["id"]]["name"]


def test_key_change_as_delete_plus_insert(demo_run) -> None:
    (change,) = [c for c in demo_run[1].changes if c.old_key is not None]
    out = encode(demo_run, key_changes="delete-insert")
    pair = [e for e in out if e["data"]["eventsource"]["transaction"]["commitlsn"]
            == change.commit_lsn.upper()]
    assert [e["operation"] for e in pair] == ["DEL", "INS"]
    assert [e["data"]["eventsource"]["pkkey"][0]["value"] for e in pair] == [
        str(change.old_key["id"]), str(change.key["id"])]
    seqs = [e["data"]["eventsource"]["transaction"]["sequencenumber"] for e in pair]
    assert seqs[1] == seqs[0] + 1
    assert rows_of(pair[0])[1] == {} and rows_of(pair[1])[0] == {}


def test_derived_sequence_numbers_count_within_a_commit(demo_run) -> None:
    expected = demo_run[1]
    out = encode(demo_run)
    ordinal: dict[str, int] = {}
    for event, change in zip(out, expected.changes, strict=True):
        ordinal[change.commit_lsn] = ordinal.get(change.commit_lsn, 0) + 1
        assert event["data"]["eventsource"]["transaction"]["sequencenumber"] == \
            ordinal[change.commit_lsn]
    assert max(ordinal.values()) == 3  # the snapshot shares one commit LSN: 1, 2, 3


def test_sequence_numbers_from_the_transaction_block_are_exact() -> None:
    records, expected = demo(transaction_metadata=True)
    changes, _, pipeline = run(records)
    total_order = {}  # Debezium's own numbers, read from the raw envelopes and keys
    for record in records:
        if not (record.value and record.topic.endswith("customers")):
            continue
        try:
            payload = json.loads(record.value)["payload"]
        except ValueError:
            continue  # the demo's corrupt record
        if payload.get("transaction") is not None:
            key = json.loads(record.key)["payload"]["id"]
            total_order[(payload["source"]["commit_lsn"], key)] = \
                payload["transaction"]["total_order"]
    out = events(ces_values(changes, pipeline))
    assert len(out) == len(expected.changes)
    checked = 0
    for event in out:
        transaction = event["data"]["eventsource"]["transaction"]
        key = int(event["data"]["eventsource"]["pkkey"][0]["value"])
        raw = total_order.get((transaction["commitlsn"].lower(), key))
        if raw is None:
            continue  # snapshot rows carry no transaction block
        assert transaction["sequencenumber"] == raw  # a merged key change: the create's number
        checked += 1
    assert checked == sum(c.op != "read" for c in expected.changes)
    assert any(n > 1 for n in total_order.values())


def test_lob_placeholder_columns_are_left_out(demo_run) -> None:
    (change,) = [c for c in demo_run[1].changes if c.unavailable_columns]
    out = encode(demo_run)
    event = next(e for e in out if e["data"]["eventsource"]["transaction"]["commitlsn"]
                 == change.commit_lsn.upper())
    old, current = rows_of(event)
    for column in change.unavailable_columns:
        assert column not in current and column not in old
    assert current["name"] == "Ada King"


def test_old_values_can_be_left_out(demo_run) -> None:
    out = encode(demo_run, include_old_values=False)
    for event in out:
        old, current = rows_of(event)
        assert old == {}
        assert (current == {}) == (event["operation"] == "DEL")


def test_snapshot_rows_can_be_dropped(demo_run) -> None:
    changes, expected, pipeline = demo_run
    encoder = CesEncoder(CesOptions(snapshot_rows="skip"), pipeline.catalog)
    out = events([m.value for c in changes for m in encoder.encode(c)])
    snapshot = sum(c.op == "read" for c in expected.changes)
    assert len(out) == len(expected.changes) - snapshot == encoder.counters.events_out
    assert encoder.counters.skipped_snapshot == snapshot == 3


def test_truncate_is_dropped_and_counted(demo_run) -> None:
    changes, _, pipeline = demo_run
    encoder = CesEncoder(catalog=pipeline.catalog)
    truncate = msgspec.structs.replace(changes[0], op="truncate", after=None, before=None)
    assert encoder.encode(truncate) == []
    assert encoder.counters.skipped_truncate == 1 and encoder.counters.encoded == 0


def test_ids_are_deterministic_per_logicalid_and_segment(demo_run) -> None:
    out = encode(demo_run)
    again = encode(demo_run)
    assert [e["id"] for e in out] == [e["id"] for e in again]
    for event in out:  # A11: uuid5(ns, logicalid + ":" + segmentindex)
        assert event["id"] == str(uuid.uuid5(ID_NAMESPACE,
                                             f"{event['logicalid']}:{event['segmentindex']}"))
    random_ids = [e["id"] for e in encode(demo_run, ids="random")]
    assert all(uuid.UUID(i).version == 4 for i in random_ids)
    assert not set(random_ids) & {e["id"] for e in out}


def test_logical_id_guid(demo_run) -> None:
    guids = {e["logicalid"].split(":")[0] for e in encode(demo_run)}
    # A10 default: one GUID per source database, uuid5(NAMESPACE_URL, mssql://<name>/<db>)
    assert guids == {str(uuid.uuid5(uuid.NAMESPACE_URL, "mssql://server1/testDB"))}
    given = "1bf2756a-c15f-4d2e-a2d5-7d3f9dbf85b0"
    assert {e["logicalid"].split(":")[0] for e in encode(demo_run, logical_id_guid=given)} == \
        {given}


def test_content_type_index_base_and_header(demo_run) -> None:
    out = encode(demo_run, datacontenttype="application/avro-json", segment_index_base=0)
    assert {(e["datacontenttype"], e["segmentindex"]) for e in out} == {
        ("application/avro-json", 0)}
    changes, _, pipeline = demo_run
    plain = CesEncoder(catalog=pipeline.catalog).encode(changes[0])[0]
    with_header = CesEncoder(CesOptions(content_type_header=True),
                             pipeline.catalog).encode(changes[0])[0]
    events([plain.value])
    events([with_header.value])
    assert plain.headers == ()
    assert with_header.headers == (("content-type",
                                    b"application/cloudevents+json; charset=UTF-8"),)


@pytest.mark.parametrize(("scheme", "extra", "expected"), [
    ("None", {}, None),
    ("Table", {}, b"dbo.customers"),
    ("StreamGroup", {"stream_group": "grp1"}, b"grp1"),
    ("Column", {"partition_key_column": "email"}, b"ada@example.com"),
])
def test_kafka_key_per_partition_scheme(demo_run, scheme: str, extra: dict[str, Any],
                                        expected: bytes | None) -> None:
    changes, _, pipeline = demo_run
    first = next(c for c in changes if c.key == {"id": 1})
    options = CesOptions(partition_key_scheme=scheme, **extra)  # type: ignore[arg-type]
    (message,) = CesEncoder(options, pipeline.catalog).encode(first)
    events([message.value])
    assert message.key == expected


def test_propagated_source_types_give_exact_cols_and_values() -> None:
    sim = CdcSimulator([CUSTOMERS], modes=PROPAGATE)
    sim.snapshot({"customers": [DEMO_ROWS[1], DEMO_ROWS[2]]})
    sim.commit([Insert("customers", DEMO_ROWS[3])])
    changes, dead, pipeline = run(sim.records)
    assert not dead
    out = events(ces_values(changes, pipeline))
    declared = [(c.name, c.sql_type) for c in CUSTOMERS.columns]
    for event in out:
        cols = event["data"]["eventsource"]["cols"]
        assert [(c["name"], c["type"]) for c in cols] == declared
        assert [c["index"] for c in cols] == list(range(len(declared)))  # A12
    _, current = rows_of(out[0])
    row = DEMO_ROWS[1]
    assert current == {"id": "1", "name": row["name"], "email": row["email"],
                       "balance": "100.00", "created": "2023-01-02 03:04:05.1234567",
                       "notes": row["notes"]}
    _, null_notes = rows_of(out[1])
    assert null_notes["notes"] is None  # A15 default: JSON null


def test_known_lob_columns_leave_old_unless_asked() -> None:
    sim = CdcSimulator([CUSTOMERS], modes=PROPAGATE)
    sim.commit([Insert("customers", DEMO_ROWS[1])])
    from debezium_bridge.testing.simulator import Update

    sim.commit([Update("customers", DEMO_ROWS[1], DEMO_ROWS[1] | {"name": "Ada King"})])
    changes, _, pipeline = run(sim.records)
    update = next(e for e in events(ces_values(changes, pipeline)) if e["operation"] == "UPD")
    old, current = rows_of(update)
    assert "notes" not in old and current["notes"] == DEMO_ROWS[1]["notes"]  # A13 default
    options = CesOptions(include_old_lob_values=True)
    update = next(e for e in events(ces_values(changes, pipeline, options))
              if e["operation"] == "UPD")
    assert rows_of(update)[0]["notes"] == DEMO_ROWS[1]["notes"]
    options = CesOptions(include_all_columns=False)
    update = next(e for e in events(ces_values(changes, pipeline, options))
              if e["operation"] == "UPD")
    assert [c["name"] for c in update["data"]["eventsource"]["cols"]] == ["id", "name"]
    assert rows_of(update)[1] == {"id": "1", "name": "Ada King"}


def test_value_styles_reach_the_rows(demo_run) -> None:
    out = encode(demo_run, nulls="omit")
    second = next(e for e in out if e["data"]["eventsource"]["pkkey"][0]["value"] == "2")
    assert "notes" not in rows_of(second)[1]  # DEMO_ROWS[2] notes is NULL


def test_non_ascii_slashes_and_pretty_styles(demo_run) -> None:
    changes, _, pipeline = demo_run
    record = msgspec.structs.replace(changes[0], after={**changes[0].after,
                                                        "name": 'Zoë "/\\ 日本 😀'})
    for options in (CesOptions(), CesOptions(ascii_only=True), CesOptions(inner_json="pretty"),
                    CesOptions(escape_slashes=False), CesOptions(envelope_indent=4)):
        (message,) = CesEncoder(options, pipeline.catalog).encode(record)
        events([message.value], options)
        if options.envelope_indent == 0:
            assert b"\n" not in message.value
        doc = json.loads(message.value)
        row = json.loads(json.loads(doc["data"])["eventrow"]["current"])
        assert row["name"] == 'Zoë "/\\ 日本 😀'
        if options.ascii_only:
            assert message.value.isascii()
        if not options.escape_slashes:
            assert b'"source":"/"' in message.value
        if options.inner_json == "pretty":
            assert doc["data"].startswith('{\n  "eventsource": {') and '", "' in \
                json.loads(doc["data"])["eventrow"]["current"]
        if options.envelope_indent == 4:
            assert message.value.startswith(b'{\n    "specversion": "1.0",\n')


def test_records_that_cannot_be_encoded_raise_encode_errors(demo_run) -> None:
    changes, _, pipeline = demo_run
    encoder = CesEncoder(catalog=pipeline.catalog)
    bad = [msgspec.structs.replace(changes[0], commit_ts=None, capture_ts=None),
           msgspec.structs.replace(changes[0], after={**changes[0].after, "id": "x"})]
    errors: list[tuple[ChangeRecord, Exception]] = []
    produced = encoder.encode_lines(bad + changes[1:2], errors)
    assert len(events(produced.splitlines())) == 1
    assert [type(e) for _, e in errors] == [EncodeError, EncodeError]
    assert encoder.counters.errors == 2 and encoder.counters.encoded == 1


def test_validator_rejects_what_the_format_forbids(demo_run) -> None:
    value = ces_values(demo_run[0][:1], demo_run[2])[0]
    doc = json.loads(value)
    for change in ({"operation": "MERGE"}, {"logicalid": "x"}, {"source": "/x"},
                   {"extra": 1}, {"segmentindex": -1}):
        with pytest.raises(CesValidationError):
            validate_events([json.dumps({**doc, **change}).encode()])
    data = json.loads(doc["data"])
    data["eventsource"]["transaction"]["commitlsn"] = "00000000:00000000:0001"
    with pytest.raises(CesValidationError, match="logicalid"):
        validate_events([json.dumps({**doc, "data": json.dumps(data)}).encode()])


# --------------------------------------------------------------------------- segments


def _content(text: str, ascii_only: bool = False) -> bytes:
    return json.dumps(text, ensure_ascii=ascii_only)[1:-1].encode()


@pytest.mark.parametrize("ascii_only", [False, True])
def test_safe_cut_never_breaks_a_character_or_an_escape(ascii_only: bool) -> None:
    text = 'a"\\/é日😀\n\u0001' * 7
    content = _content(text, ascii_only)
    for position in range(1, len(content)):
        cut = safe_cut(content, position)
        assert 0 <= cut <= position
        head, tail = content[:cut], content[cut:]
        # both halves are complete JSON string contents, and their texts join to the whole
        assert json.loads(b'"' + head + b'"') + json.loads(b'"' + tail + b'"') == text


def test_split_content_respects_the_budget() -> None:
    content = _content("x😀\"" * 1000, ascii_only=True)
    pieces = split_content(content, 100)
    assert b"".join(pieces) == content and all(len(p) <= 100 for p in pieces)
    with pytest.raises(EncodeError):
        split_content(content, 4)


def big_row(size: int) -> dict[str, Any]:
    """About ``size`` bytes of UTF-8 in two columns: ASCII, multi-byte and escaped characters."""
    unit = 'abc/"\\ é 日本 😀\n'
    n = size // (2 * len(unit.encode()))
    return {"id": 7, "name": "big", "email": unit * n, "balance": "1.00",
            "created": "2024-01-01T00:00:00.0000000", "notes": (unit[::-1]) * n}


@pytest.mark.parametrize(("size_kb", "base"), [(256, 1), (128, 0), (1024, 1)])
def test_large_row_is_split_into_valid_segments(size_kb: int, base: int) -> None:
    sim = CdcSimulator([CUSTOMERS], modes=PROPAGATE)
    row = big_row(1_500_000)
    sim.commit([Insert("customers", row)])
    changes, dead, pipeline = run(sim.records)
    assert not dead and len(changes) == 1
    options = CesOptions(max_message_size_kb=size_kb, segment_index_base=base)
    encoder = CesEncoder(options, pipeline.catalog)
    messages = encoder.encode(changes[0])
    values = [m.value for m in messages]
    assert len(values) >= 1_500_000 // (size_kb * 1024) + 1
    assert all(len(v) <= size_kb * 1024 for v in values)
    assert len(values[0]) > size_kb * 1024 * 0.9  # segments are filled, not merely small
    docs = [json.loads(v) for v in values]  # every segment is a complete JSON event
    assert [d["segmentindex"] for d in docs] == list(range(base, base + len(docs)))
    assert [d["finalsegment"] for d in docs] == [False] * (len(docs) - 1) + [True]
    assert len({d["logicalid"] for d in docs}) == 1 and len({d["id"] for d in docs}) == len(docs)
    (whole,) = events(values, options)
    assert whole["segments"] == len(values)
    current = json.loads(whole["data"]["eventrow"]["current"])
    assert current["email"] == row["email"] and current["notes"] == row["notes"]
    assert encoder.counters.split_events == 1 and encoder.counters.segments_out == len(values)


def test_segment_boundaries_fall_on_characters() -> None:
    sim = CdcSimulator([CUSTOMERS], modes=PROPAGATE)
    sim.commit([Insert("customers", big_row(600_000) | {"notes": None})])
    changes, _, pipeline = run(sim.records)
    for ascii_only in (False, True):
        encoder = CesEncoder(CesOptions(max_message_size_kb=128, ascii_only=ascii_only),
                             pipeline.catalog)
        values = [m.value for m in encoder.encode(changes[0])]
        assert len(values) > 3
        for value in values:
            value.decode("utf-8")  # never split inside a UTF-8 sequence
            fragment = json.loads(value)["data"]
            fragment.encode("utf-8")  # ... nor between the halves of a surrogate pair


def test_a_late_record_continues_its_transactions_numbering(demo_run) -> None:
    changes, _, pipeline = demo_run
    snapshot = [c for c in changes if c.op == "read"]
    inserts = [c for c in changes if c.op == "insert"]
    assert len(snapshot) == 3 and len({c.position.commit_lsn for c in snapshot}) == 1
    order = [snapshot[0], snapshot[1], inserts[0], snapshot[2]]  # the last snapshot row late
    out = events(ces_values(order, pipeline))
    assert [e["data"]["eventsource"]["transaction"]["sequencenumber"] for e in out] == \
        [1, 2, 1, 3]
    assert len({e["logicalid"] for e in out}) == 4
