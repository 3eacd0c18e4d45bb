"""Property tests of change-table rows and net changes (hypothesis).

The histories come from :mod:`tests.unit.cdc_model`, a model of a CDC-enabled table that writes
the change-table rows the documents describe and keeps the table's state after every commit —
the truth the properties compare with:

(a) applying the net changes of ``[a, b]`` to the state before ``a`` gives the state at ``b``;
(b) the net changes of ``[a, b]`` and then of ``[increment_lsn(b), c]``, applied in turn, give
    what those of ``[a, c]`` give (and both the state at ``c``);
(c) change-table rows → Debezium envelopes (this product's writer; JSON with and without
    schemas, Confluent Avro) → this product's Debezium decoder gives the same canonical records
    as the rows directly (lineage aside: it names the input records);
(d) rows damaged in the ways exports go wrong (an unknown operation, an odd mask, a 3 without
    its 4, a 4 without its 3, a row out of LSN order) become dead letters that name them; the
    counters balance.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from debezium_bridge.core.net import NetChanges, Window, apply_net_changes
from debezium_bridge.core.pipeline import Pipeline
from debezium_bridge.formats.canonical import to_dict
from debezium_bridge.formats.debezium.avro import AvroDecoder
from debezium_bridge.formats.debezium.decode import DecodeOptions, Decoder, load_table_schemas
from debezium_bridge.formats.debezium.envelope import key_identity
from debezium_bridge.formats.debezium.registry import FileSchemaResolver, InMemoryRegistry
from debezium_bridge.formats.debezium.writer import DebeziumOutOptions
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.records import RawRecord
from debezium_bridge.model.schema import TableSchema
from debezium_bridge.output import Output, OutputSettings
from tests.unit.cdc_model import CdcModel, Change, as_state
from tests.unit.cdc_support import json_lines, run

TABLE_ID = "testDB.dbo.orders"
KEYS = range(1, 9)
NAMES = st.sampled_from(["ann", "bob", "cy", "dee"])
AMOUNTS = st.sampled_from(["0.00", "1.50", "-2.25", "99999999.99"])
NOTES = st.one_of(st.none(), st.sampled_from(["short", "a much longer text", ""]))


@st.composite
def histories(draw: st.DrawFn, max_transactions: int = 10) -> CdcModel:
    """A model table after random transactions of inserts, updates, deletes and both kinds of
    key change."""
    model = CdcModel()
    for _ in range(draw(st.integers(1, max_transactions))):
        changes: list[Change] = []
        present = set(model.state)
        for _ in range(draw(st.integers(1, 4))):
            free = [k for k in KEYS if k not in present]
            kinds = (["insert"] if free else []) + (
                ["update", "delete"] + (["key-delete-insert", "key-update"] if free else [])
                if present else [])
            kind = draw(st.sampled_from(kinds))
            if kind == "insert":
                key = draw(st.sampled_from(free))
                changes.append(Change("insert", key, {"name": draw(NAMES),
                                                      "amount": draw(AMOUNTS),
                                                      "notes": draw(NOTES),
                                                      "flag": draw(st.booleans())}))
                present.add(key)
            elif kind == "update":
                key = draw(st.sampled_from(sorted(present)))
                new = draw(st.fixed_dictionaries({}, optional={
                    "name": NAMES, "amount": AMOUNTS, "notes": NOTES, "flag": st.booleans()}))
                changes.append(Change("update", key, new))
            elif kind == "delete":
                key = draw(st.sampled_from(sorted(present)))
                changes.append(Change("delete", key))
                present.discard(key)
            else:
                key = draw(st.sampled_from(sorted(present)))
                new_key = draw(st.sampled_from(free))
                extra = draw(st.fixed_dictionaries({}, optional={"name": NAMES}))
                changes.append(Change(kind, key, {"id": new_key, **extra}))
                present.discard(key)
                present.add(new_key)
        _replay(model, changes)
    return model


def _replay(model: CdcModel, changes: list[Change]) -> None:
    """Commit ``changes``, dropping those that do not apply to the state reached (an update
    that changes nothing is still an update, as SQL Server logs it)."""
    state = {k: dict(v) for k, v in model.state.items()}
    kept = []
    for change in changes:
        if change.kind == "insert" and change.key not in state:
            state[change.key] = {"id": change.key, **(change.row or {})}
        elif change.kind in ("update", "delete") and change.key in state:
            if change.kind == "delete":
                del state[change.key]
            else:
                state[change.key].update(change.row or {})
        elif change.kind.startswith("key-") and change.key in state and change.row \
                and change.row["id"] not in state:
            state[change.row["id"]] = {**state.pop(change.key), **change.row}
        else:
            continue
        kept.append(change)
    if kept:
        model.commit(kept)


def _translate(model: CdcModel) -> tuple[list[ChangeRecord], Any]:
    with tempfile.TemporaryDirectory() as tmp:
        result = run(model.rows, Path(tmp))
    assert not result.dead, [d.message for d in result.dead]
    return result.changes, result.pipeline


def _state(model_state: dict[int, dict[str, Any]]) -> dict[tuple[str, bytes], dict[str, Any]]:
    return {(TABLE_ID, key_identity({"id": k})): v for k, v in as_state(model_state).items()}


def _net(changes: list[ChangeRecord], window: Window, mode: str = "all") -> list[ChangeRecord]:
    net = NetChanges(window, mode)  # type: ignore[arg-type]
    net.add_many(changes)
    assert net.counters.balanced
    return net.result()


def _commits(model: CdcModel) -> list[int]:
    return [lsn for lsn, _ in model.states]


def _lsn_bytes(value: int) -> bytes:
    return value.to_bytes(10, "big")


PROFILE = settings(max_examples=200, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@PROFILE
@given(histories(), st.data(), st.sampled_from(["all", "all-with-mask", "all-with-merge"]))
def test_a_net_changes_applied_to_the_state_before_give_the_state_after(
        model: CdcModel, data: st.DataObject, mode: str) -> None:
    commits = _commits(model)
    changes, _ = _translate(model)
    a = data.draw(st.integers(0, len(commits) - 1))
    b = data.draw(st.integers(a, len(commits) - 1))
    window = Window(_lsn_bytes(commits[a]), _lsn_bytes(commits[b]))
    before = _state(model.state_at(commits[a - 1] if a else None))
    applied = apply_net_changes(before, _net(changes, window, mode))
    assert applied == _state(model.state_at(commits[b]))


@PROFILE
@given(histories(), st.data())
def test_b_consecutive_windows_compose(model: CdcModel, data: st.DataObject) -> None:
    commits = _commits(model)
    changes, _ = _translate(model)
    a = data.draw(st.integers(0, len(commits) - 1))
    b = data.draw(st.integers(a, len(commits) - 1))
    c = data.draw(st.integers(b, len(commits) - 1))
    # the boundaries may fall between commits too (any LSN is a valid bound)
    b_lsn = commits[b] + (data.draw(st.sampled_from([0, 1])) if c > b else 0)
    first = Window(_lsn_bytes(commits[a]), _lsn_bytes(b_lsn))
    whole = Window(_lsn_bytes(commits[a]), _lsn_bytes(commits[c]))
    start = _state(model.state_at(commits[a - 1] if a else None))
    in_turn = apply_net_changes(dict(start), _net(changes, first))
    if c > b:  # [increment_lsn(b), c] is a window (empty when c == b)
        in_turn = apply_net_changes(in_turn, _net(changes, first.next(_lsn_bytes(commits[c]))))
    at_once = apply_net_changes(dict(start), _net(changes, whole))
    expected = _state(model.state_at(commits[c]))
    assert at_once == expected
    assert in_turn == expected


def _without_lineage(record: ChangeRecord) -> dict[str, Any]:
    out = to_dict(record)
    del out["lineage"]
    return out


def _records(outputs: list[Any]) -> list[RawRecord]:
    out = []
    for offset, record in enumerate(outputs):
        assert record.kind == "change"
        out.append(RawRecord(record.topic, 0, offset, record.timestamp, record.key,
                             record.value, record.headers))
    return out


def _envelope_schemas(records: list[RawRecord]) -> dict[str, TableSchema]:
    """What a user of schema-less JSON gives the decoder (``--table-schemas``): the envelope
    schema copied from one schema-ful message of each topic."""
    schemas: dict[str, Any] = {}
    for record in records:
        if record.value is not None:
            schemas.setdefault(record.topic, {"schema": json.loads(record.value)["schema"]})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "schemas.json"
        path.write_text(json.dumps(schemas))
        return load_table_schemas(str(path))


def _through_debezium(changes: list[ChangeRecord], pipeline: Any, fmt: str) -> list[Any]:
    """Write ``changes`` as the connector's Kafka records in ``fmt`` (``debezium`` JSON with
    schemas, ``debezium-schemaless`` JSON with ``schemas.enable=false``, ``debezium-avro``),
    then read them with the product's Debezium decoder."""
    registry = InMemoryRegistry() if fmt == "debezium-avro" else None
    options = DecodeOptions()
    if fmt == "debezium-schemaless":
        def encode(json_schemas: bool) -> list[RawRecord]:
            settings = OutputSettings(debezium=DebeziumOutOptions(json_schemas=json_schemas))
            output = Output(["debezium"], settings, catalog=pipeline.catalog,
                            ledger=pipeline.ledger)
            return _records([r for change in changes for r in output.encode(change)])
        records = encode(json_schemas=False)
        assert all(r.value is None or b'"schema"' not in r.value[:12] for r in records)
        options = DecodeOptions(table_schemas=_envelope_schemas(encode(json_schemas=True)))
    else:
        output = Output([fmt], catalog=pipeline.catalog, ledger=pipeline.ledger,
                        registrar=registry)
        records = _records([r for change in changes for r in output.encode(change)])
    avro = AvroDecoder(FileSchemaResolver(registry.schemas) if registry is not None else None)
    decoded = Pipeline(decoder=Decoder(options, avro=avro)).translate(records)
    return [item for item in decoded if isinstance(item, ChangeRecord)]


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories(), st.sampled_from(["debezium", "debezium-schemaless", "debezium-avro"]))
def test_c_rows_to_debezium_envelopes_decode_to_the_same_records(model: CdcModel,
                                                                 fmt: str) -> None:
    changes, pipeline = _translate(model)
    back = _through_debezium(changes, pipeline, fmt)
    assert [_without_lineage(r) for r in back] == [_without_lineage(r) for r in changes]


Damage = tuple[str, int]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(histories(), st.data())
def test_d_damaged_rows_are_dead_letters_and_counters_balance(model: CdcModel,
                                                              data: st.DataObject) -> None:
    rows = [dict(r) for r in model.rows]
    damaged: set[int] = set()  # indexes into ``rows``
    dropped: set[int] = set()  # rows an export lost
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(rows) - 1))
        kind = data.draw(st.sampled_from(["operation", "mask", "lone-3", "lone-4", "order"]))
        if kind == "operation":
            rows[i]["__$operation"] = data.draw(st.sampled_from([0, 5, 7, "x"]))
        elif kind == "mask":
            rows[i]["__$update_mask"] = data.draw(st.sampled_from(["0x1", "0xZZ", "0xFF"]))
        elif kind == "lone-3":
            threes = [j for j, r in enumerate(rows) if r["__$operation"] == 3
                      and j + 1 < len(rows) and rows[j + 1]["__$operation"] == 4
                      and not {j, j + 1} & (damaged | dropped)]
            if not threes:
                continue
            i = data.draw(st.sampled_from(threes))
            # its 4 moves away from it, each to a position of its own (two rows equal in
            # position and content would be one row exported twice: a duplicate)
            rows[i + 1]["__$seqval"] = f"0x{'F' * 18}{len(damaged):02X}"
            damaged.add(i + 1)
        elif kind == "lone-4":
            pairs = [j for j, r in enumerate(rows) if r["__$operation"] == 3
                     and j + 1 < len(rows) and rows[j + 1]["__$operation"] == 4
                     and j not in damaged | dropped and j + 1 not in damaged | dropped]
            if not pairs:
                continue
            j = data.draw(st.sampled_from(pairs))
            dropped.add(j)  # the 3 is lost: its 4 is alone
            i = j + 1
        else:
            later = [j for j, r in enumerate(rows)
                     if r["__$start_lsn"] > rows[0]["__$start_lsn"]]
            if not later:
                continue
            i = data.draw(st.sampled_from(later))
            rows[i]["__$start_lsn"] = "0x" + "0" * 20  # below every transaction
            # a row before every transaction read so far: out of order unless it comes first
        damaged.add(i)
    kept = [j for j in range(len(rows)) if j not in dropped]
    damaged = {kept.index(j) for j in damaged if j not in dropped}
    rows = [rows[j] for j in kept]
    with tempfile.TemporaryDirectory() as tmp:
        result = run(json_lines(rows), Path(tmp))
    c = result.counters
    assert c.balanced and c.records_in == len(rows)
    dead_lines = {d.record.offset for d in result.dead}
    used = {ref.offset for change in result.changes for ref in change.lineage}
    for i in damaged:
        line = i + 1
        # a row moved below every LSN is out of order only after a row that was read
        moved = rows[i]["__$start_lsn"] == "0x" + "0" * 20 \
            and all(j in damaged for j in range(i))
        if not moved:
            assert line in dead_lines, (line, rows[i], [d.message for d in result.dead])
        assert line not in used or moved
    assert all(json.loads(d.record.value or b"{}") for d in result.dead)


def test_histories_are_realistic() -> None:
    """The model writes the documented shapes (a sanity check of the test's own generator)."""
    model = CdcModel()
    model.commit([Change("insert", 1, {"name": "a", "amount": "1.00", "notes": "n",
                                       "flag": True})])
    model.commit([Change("update", 1, {"name": "b"})])
    assert [r["__$operation"] for r in model.rows] == [2, 3, 4]
    assert model.rows[1]["notes"] is None and model.rows[2]["notes"] == "n"
    assert model.rows[1]["__$update_mask"] == "0x02" == model.rows[2]["__$update_mask"]
    assert msgspec.json.decode(json_lines(model.rows).splitlines()[0])["__$operation"] == 2
