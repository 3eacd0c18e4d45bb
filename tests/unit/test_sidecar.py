"""The sidecar's parts that need no broker: settings, the written-output index, the per-topic
unit (re-read accounting, resume points, transaction ENDs), checkpoints, metrics and health."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from typing import Any

import msgspec
import pytest

from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.errors import ConfigError
from debezium_bridge.model.change import LineageRef
from debezium_bridge.model.records import RawRecord
from debezium_bridge.sidecar import JsonLines
from debezium_bridge.sidecar.checkpoint import (
    Checkpoint,
    Mark,
    PartitionState,
    UnitState,
    decode,
    encode,
    merge_frontiers,
)
from debezium_bridge.sidecar.config import SidecarConfig
from debezium_bridge.sidecar.metrics import Health, Metrics, serve
from debezium_bridge.sidecar.recovery import Decision, WrittenIndex, index_outputs, split_id
from debezium_bridge.sidecar.runner import Sidecar, _Hooks
from debezium_bridge.sidecar.units import Unit, kind_of, table_of, transaction_ends
from debezium_bridge.testing.simulator import CUSTOMERS
from tests.integration.sidecar_support import table, topic_of, traffic

# -- settings --------------------------------------------------------------------------------


def test_settings_from_flags_file_environment_and_x(tmp_path, monkeypatch) -> None:
    path = tmp_path / "sidecar.yaml"
    path.write_text("subscribe: [a.b.c.d]\ngroup_id: g1\nconsumer: {session.timeout.ms: '6000'}\n"
                    "ces: {max_message_size_kb: 512}\n")
    monkeypatch.setenv("DEBEZIUM_BRIDGE_SIDECAR_COMMIT_INTERVAL_MS", "250")
    config = SidecarConfig.from_args(["--config", str(path), "-X", "security.protocol=SASL_SSL",
                                      "-X", "sasl.password=hunter2", "--group-id", "g2"],
                                     prog="sidecar")
    assert config.group_id == "g2"  # flags beat the file
    assert config.commit_interval_ms == 250
    assert config.ces.max_message_size_kb == 512
    assert config.client("consumer") == {"security.protocol": "SASL_SSL",
                                         "sasl.password": "hunter2",
                                         "bootstrap.servers": "127.0.0.1:9092",
                                         "session.timeout.ms": "6000"}
    assert "session.timeout.ms" not in config.client("producer")
    shown = json.dumps(config.masked())
    assert "hunter2" not in shown and "hunter2" not in repr(config)
    assert config.checkpoint_topic_name == "g2.debezium-bridge.checkpoints"


@pytest.mark.parametrize("data, message", [
    ({"subscribe": ["t"], "subscrbe_pattern": "x"}, "subscrbe_pattern"),
    ({}, "exactly one of subscribe and subscribe_pattern"),
    ({"subscribe": ["t"], "subscribe_pattern": "t.*"}, "exactly one"),
    ({"subscribe_pattern": "(unclosed"}, "not a regular expression"),
    ({"subscribe": ["t"], "outputs": ["canonical", "canonical"]}, "once"),
    ({"subscribe": ["t"], "outputs": ["parquet"]}, "outputs"),
    ({"subscribe": ["t"], "kafka": {"group.id": "x"}}, "set by the sidecar"),
    ({"subscribe": ["t"], "producer": {"transactional.id": "x"}}, "set by the sidecar"),
    ({"subscribe": ["t"], "guarantee": "maybe"}, "guarantee"),
])
def test_bad_settings_are_rejected(data, message) -> None:
    with pytest.raises(ConfigError, match=message):
        SidecarConfig.build(data)


def test_outputs_flag_takes_several_formats() -> None:
    config = SidecarConfig.from_args(["--subscribe", "a.b.c.d", "--outputs", "canonical,ces"],
                                     prog="sidecar")
    assert config.outputs == ["canonical", "ces"]


def test_test_hooks_are_off_unless_named(capsys) -> None:
    _Hooks(None)("after-produce")
    _Hooks("after-produce=0")("after-produce")
    assert capsys.readouterr().err == "debezium-bridge test hook: after-produce\n"


def test_output_topic_may_not_be_an_input_topic() -> None:
    config = SidecarConfig.build({"subscribe": ["server1.testDB.dbo.customers"],
                                  "output_topic": "{topic}"})
    sidecar = Sidecar(config)
    sidecar.topics = {"server1.testDB.dbo.customers": [0]}
    with pytest.raises(ConfigError, match="input or internal topic"):
        sidecar._register({"server1.testDB.dbo.customers"})


def test_shipped_configurations_are_valid() -> None:
    import re

    import yaml

    from tests.paths import ROOT

    SidecarConfig.build(yaml.safe_load((ROOT / "docker" / "sidecar.yaml").read_text()))
    example = re.search(r"```yaml\n(.*?)```", (ROOT / "docs" / "sidecar.md").read_text(), re.S)
    assert example is not None
    config = SidecarConfig.build(yaml.safe_load(example[1]))
    assert config.kafka["sasl.password"] == "secret" and "secret" not in repr(config)


def test_json_log_lines() -> None:
    record = logging.LogRecord("debezium_bridge.sidecar", logging.WARNING, __file__, 1,
                               "lag %d", (3,), None)
    doc = json.loads(JsonLines().format(record))
    assert doc["level"] == "WARNING" and doc["message"] == "lag 3" and doc["time"].endswith("Z")


# -- topics ----------------------------------------------------------------------------------


def test_topic_kinds() -> None:
    assert kind_of("server1.transaction") == "transaction"
    assert kind_of("__debezium-heartbeat.server1") == "heartbeat"
    assert kind_of("server1.testDB.dbo.customers") == "data"
    assert kind_of("dc1.server1.transaction") == "transaction"  # a prefix with a dot
    # Debezium's topic of table dbo.[transaction]: <prefix>.<db>.<schema>.<table>
    assert kind_of("server1.testDB.dbo.transaction") == "data"
    assert table_of("server1.testDB.dbo.customers") == "testDB.dbo.customers"
    assert table_of("customers") is None


def test_transaction_end_counts_per_table() -> None:
    value = json.dumps({"schema": {}, "payload": {
        "status": "END", "id": "00000025:00000d08:0005", "event_count": 3,
        "data_collections": [{"data_collection": "testDB.dbo.customers", "event_count": 2},
                             {"data_collection": "testDB.dbo.orders", "event_count": 1}]}})
    end = transaction_ends(RawRecord("server1.transaction", value=value.encode()), 3,
                           "00000025:00000d08:0005")
    assert end is not None
    commit, total, per_table = end
    assert commit.hex() == "0000002500000d080005" and total == 3
    assert per_table == {"testDB.dbo.customers": 2, "testDB.dbo.orders": 1}


# -- the written-output index -----------------------------------------------------------------


class _Message:
    def __init__(self, headers: list[tuple[str, bytes]]) -> None:
        self._headers = headers

    def headers(self) -> list[tuple[str, bytes]]:
        return self._headers


def test_split_ids() -> None:
    assert split_id("abc") == ("abc", "canonical")
    assert split_id("abc:ces-avro:2") == ("abc", "ces-avro")


def test_index_reads_lineage_and_dead_letters() -> None:
    messages = [
        _Message([("debezium_bridge.event_id", b"e1"),
                  ("debezium_bridge.lineage", b'[["t",0,5],["t",1,9]]')]),
        _Message([("debezium_bridge.event_id", b"e2:flat:1"),
                  ("debezium_bridge.lineage", b'[["other",0,1]]')]),
        _Message([("__connect.errors.topic", b"t"), ("__connect.errors.partition", b"2"),
                  ("__connect.errors.offset", b"7"), ("debezium_bridge.event_id", b"d1")]),
    ]
    index = index_outputs(messages, {"t"})["t"]
    assert index.ids == {"e1", "d1"}
    assert index.highest == {0: 5, 1: 9, 2: 7}
    assert index.owners == {("canonical", 0, 5): "e1", ("canonical", 1, 9): "e1"}


def test_decisions_for_changes_released_in_another_shape() -> None:
    index = WrittenIndex()
    index.add_change("merged", [(0, 5), (1, 9)])  # a key change written merged
    index.add_change("single-d", [(2, 3)])  # a delete written on its own
    lineage = [LineageRef("t", 0, 5)]
    assert index.decide("half", "canonical", lineage) is Decision.WRITTEN
    assert index.decide("merged", "canonical", [LineageRef("t", 0, 5),
                                                LineageRef("t", 1, 9)]) is Decision.WRITE
    assert index.decide("pair", "canonical", [LineageRef("t", 2, 3),
                                              LineageRef("t", 0, 11)]) is Decision.DIVERGENT
    assert index.decide("new", "canonical", [LineageRef("t", 0, 12)]) is Decision.WRITE
    assert index.decide("half", "flat", lineage) is Decision.WRITE  # per format


# -- units -----------------------------------------------------------------------------------


def _records(seed: int = 5) -> list[RawRecord]:
    data = traffic([CUSTOMERS, table("orders")], 2_000, chunks=1, seed=seed,
                   replay_every=200, corrupt_every=500)
    offsets: dict[tuple[str, int], int] = {}
    out = []
    for r in data.chunks[0]:
        if r.topic != topic_of(CUSTOMERS):
            continue
        offset = offsets.get((r.topic, r.partition), 0)
        offsets[(r.topic, r.partition)] = offset + 1
        out.append(msgspec.structs.replace(r, offset=offset))
    return out


def _go_idle(unit: Unit, partitions: list[int], timeout: float, now: float) -> None:
    """The runner's idle protocol: partitions quiet for ``timeout`` are sought (``reprobe``),
    and the end reported after that seek makes them idle."""
    unit.check_idle(timeout, now)
    assert set(partitions) <= unit.reprobe and not set(partitions) & unit.idle
    unit.reprobe.clear()  # the runner seeks them
    for p in partitions:
        unit.reached_end(p, unit.position[p])
    unit.check_idle(timeout, now)
    assert set(partitions) <= unit.idle


def _unit(state: UnitState | None = None) -> Unit:
    from debezium_bridge.core.pipeline import Pipeline

    start = {p: 0 for p in range(3)}
    return Unit(topic_of(CUSTOMERS), range(3), Pipeline(TranslatorConfig()), start,
                state)


def test_counters_add_up_across_a_restart_from_a_checkpoint() -> None:
    records = _records()
    whole = _unit()
    whole.process(records)
    for p in range(3):
        whole.reached_end(p, 10**9)
    _go_idle(whole, [0, 1, 2], 0.0001, 1e12)
    assert whole.drain()[0]
    expected = whole.counters()
    assert expected.pending == 0 and expected.balanced
    for stop in (150, 700, 1333):
        first = _unit()
        first.process(records[:stop])
        first.drain()
        state = decode(encode(Checkpoint("g", "i", "l", 1, 0, [first.state()], {}))).units[0]
        assert any(p.reread > p.resume for p in state.partitions)
        second = _unit(state)
        second.process([r for r in records
                        if (r.offset or 0) >= second.position[r.partition]])
        for p in range(3):
            second.reached_end(p, 10**9)
        _go_idle(second, [0, 1, 2], 0.0001, 1e12)
        second.drain()
        got = second.counters()
        assert got.as_dict() == expected.as_dict(), stop


def test_dead_letters_of_reread_records_are_known_written() -> None:
    from debezium_bridge.model.dead_letter import DeadLetter

    state = UnitState(topic_of(CUSTOMERS), [PartitionState(0, 10, 20, None)], {})
    unit = _unit(state)
    assert unit.already_written_dead_letter(DeadLetter(
        RawRecord(topic_of(CUSTOMERS), 0, 15), "decode", "E", "m"))
    assert not unit.already_written_dead_letter(DeadLetter(
        RawRecord(topic_of(CUSTOMERS), 0, 20), "decode", "E", "m"))


def test_transaction_ends_wait_for_the_watermark_horizon() -> None:
    unit = _unit()
    commit = bytes.fromhex("0000002500000d080005")
    unit.offer_end(commit, None, {"testDB.dbo.customers": 2})
    unit.offer_end(commit, None, {"testDB.dbo.orders": 1})  # not this table: ignored
    assert list(unit.held_ends.items()) == [(commit, 2)]
    unit.apply_ends()  # nothing released yet: the horizon is not passed
    assert unit.held_ends


def test_checkpoint_codec_and_frontiers() -> None:
    cp = Checkpoint("g", "i", "life", 3, 1, [UnitState("t", [PartitionState(
        0, 5, 9, Mark(b"\x01" * 10, b"\x02" * 10, 2, [("d", b'{"id":1}')]))], {"records_in": 4})],
        {"out": {0: 7, 1: 8}})
    assert decode(encode(cp)) == cp
    assert merge_frontiers([{"out": {0: 7, 1: 8}}, {"out": {0: 3}, "b": {0: 1}}]) == {
        ("out", 0): 3, ("out", 1): 8, ("b", 0): 1}


# -- metrics and health ----------------------------------------------------------------------


def test_metrics_and_health_endpoints() -> None:
    metrics = Metrics()
    health = Health(stall_after_s=60)
    server, port = serve("127.0.0.1", 0, metrics, health)
    try:
        metrics.output_records.labels("canonical").inc(3)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
        assert 'debezium_bridge_sidecar_output_records_total{format="canonical"} 3.0' in body
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz").status == 200
        with pytest.raises(urllib.error.HTTPError) as not_ready:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz")
        assert not_ready.value.code == 503
        health.started, health.rebalancing = True, False
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz").status == 200
        health.broker_down_since = 1.0
        with pytest.raises(urllib.error.HTTPError):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz")
    finally:
        server.shutdown()


def test_a_partition_waking_up_makes_the_others_confirm_their_end_afresh() -> None:
    records = _records()
    unit = _unit()
    first = [r for r in records if r.partition == 0][:5]
    unit.process(first)
    for p in range(3):
        unit.reached_end(p, unit.position[p])
    unit.last_seen.update({1: 0.0, 2: 0.0})  # 1 and 2 have been quiet for long
    _go_idle(unit, [1, 2], 10, time.monotonic())
    assert unit.idle == {1, 2}  # partition 0 delivered just now
    unit.process([r for r in records if r.partition == 0][5:6])  # 0 delivers again
    assert unit.reprobe == {1, 2} and not unit.idle and not unit.at_end
    unit.reached_end(1, unit.position[1])  # a report from before the seek: not fresh
    assert 1 not in unit.at_end
    unit.reprobe.clear()  # the runner seeks them
    unit.reached_end(1, unit.position[1])
    now = time.monotonic()
    unit.check_idle(10, now)
    assert not unit.idle and not unit.reprobe  # at its end again, but not for the timeout
    _go_idle(unit, [1], 10, now + 10)  # at its end for the timeout once more (docs/sidecar.md)


# The two tests below replay one production burst the way a loaded machine can deliver it. Every
# key change of the traffic has its halves in different partitions (the generator picks the new
# key so), and the watermark may release a change only after every partition has passed it: so
# nothing may be late and every key change must come out merged (docs/sidecar.md, "Exactly
# once"; the generator's count of key changes is the independent reference).


def _burst() -> tuple[list[RawRecord], int]:
    data = traffic([CUSTOMERS, table("orders")], 2_000, chunks=1, seed=5,
                   replay_every=200, corrupt_every=500)
    return _records(), data.key_changes[topic_of(CUSTOMERS)]


def _finish(unit: Unit, records: list[RawRecord], now: float) -> None:
    for p in range(3):
        unit.reached_end(p, unit.position[p])
    _go_idle(unit, [p for p in range(3) if p not in unit.idle], 10, now)
    unit.drain()
    counters = unit.counters()
    assert counters.pending == 0 and counters.balanced


def _idle_before_a_burst() -> tuple[list[RawRecord], int, Unit, list[RawRecord]]:
    """The first third of the traffic taken, then every partition idle for long: the rest of
    the traffic is the burst that wakes the topic."""
    records, key_changes = _burst()
    unit = _unit()
    cut = len(records) // 3
    unit.process(records[:cut])
    for p in range(3):
        unit.reached_end(p, unit.position[p])
    unit.last_seen.update(dict.fromkeys(range(3), 0.0))
    _go_idle(unit, [0, 1, 2], 10, time.monotonic())  # all quiet for long
    unit.drain()
    return records, key_changes, unit, records[cut:]


def _assert_all_paired_in_time(unit: Unit, key_changes: int) -> None:
    """No event arrived after its position was released; every key change was merged."""
    counters = unit.translator.counters
    assert counters.late == 0
    assert counters.key_changes_paired == key_changes


def test_an_old_end_report_does_not_make_a_partition_idle() -> None:
    """The consumer reported partition 1's end long ago; meanwhile it fetched partition 1's new
    records, but this process was busy for longer than the idle timeout (a slow batch, a
    checkpoint, a rebalance on a loaded machine) and has not taken them yet. The stale report
    must not make partition 1 idle: the others would be released past its waiting records."""
    records, key_changes = _burst()
    unit = _unit()
    lagging = [r for r in records if r.partition == 1]
    unit.process([r for r in records if r.partition != 1] + lagging[:3])
    unit.reached_end(1, unit.position[1])  # partition 1 was at its end back then
    now = time.monotonic()
    unit.last_seen[1] = now - 60  # ... and that is long ago
    unit.check_idle(10, now)
    assert 1 not in unit.idle and 1 in unit.reprobe  # its end is to be confirmed by a seek
    unit.drain()
    unit.reprobe.clear()  # the runner seeks: the records fetched meanwhile come again
    unit.process(lagging[3:])
    _finish(unit, records, now + 60)
    _assert_all_paired_in_time(unit, key_changes)


def test_partitions_woken_by_another_wait_the_idle_timeout_again() -> None:
    """After an idle period the producer writes a burst; partition 0's part of it is fetched
    first, partitions 1 and 2 report their end afresh before their part is written (a producer
    sends each partition's batches on their own). Their last records are old, but they must
    not be idle at once: the idle timeout covers the skew from the wake-up on."""
    records, key_changes, unit, burst = _idle_before_a_burst()
    unit.process([r for r in burst if r.partition == 0])  # partition 0 wakes the topic
    assert unit.reprobe == {1, 2}
    unit.reprobe.clear()  # the runner seeks them; their part of the burst is not written yet
    for p in (1, 2):
        unit.reached_end(p, unit.position[p])
    unit.check_idle(10, time.monotonic())
    assert not unit.idle
    unit.drain()
    unit.process([r for r in burst if r.partition != 0])  # now it is
    _finish(unit, records, time.monotonic() + 60)
    _assert_all_paired_in_time(unit, key_changes)


def test_idle_partitions_delivering_in_one_batch_all_count_before_its_first_record() -> None:
    """After an idle period a burst reaches every partition, and one consumer batch holds all
    of it, one partition after the other (as the consumer hands out what it fetched). The
    partitions later in the batch must hold back the release of the first one's records."""
    records, key_changes, unit, burst = _idle_before_a_burst()
    unit.process(sorted(burst, key=lambda r: r.partition))  # one batch, partition by partition
    _finish(unit, records, time.monotonic() + 60)
    _assert_all_paired_in_time(unit, key_changes)


def test_a_change_too_large_is_replaced_by_a_dead_letter_a_restart_finds_written() -> None:
    """A change larger than the producer takes is written as a dead letter in its place
    (docs/sidecar.md, Output). The dead letter carries its own id only, so the recovery index
    of a restart holds it, and the same change released again is replaced by the same dead
    letter, which is then known as written (exactly once, idempotent guarantee)."""
    import types

    from debezium_bridge.core.pipeline import Pipeline
    from debezium_bridge.output import EVENT_ID_HEADER, Output
    from tests.unit.envelopes import TOPIC, event, lsn, row

    pipeline = Pipeline()
    pipeline.process(event("c", 1, commit=lsn(5), change=lsn(5, 1), serial=1,
                           after=row(1, "x" * 2_000), offset=7))
    pipeline.flush()
    (change,), _ = pipeline.translator.drain()

    def life() -> Any:
        return types.SimpleNamespace(output=Output(["debezium"]), max_message_bytes=1_000)

    first = life()
    (record,) = [r for r in first.output.encode(change) if r.value is not None]
    assert not Sidecar._fits(first, record)  # type: ignore[arg-type]
    letter = Sidecar._without_value(first, record)  # type: ignore[arg-type]
    assert letter.kind == "dead_letter" and letter.value is None
    assert [v for k, v in letter.headers if k == EVENT_ID_HEADER] == [letter.id.encode()]

    class Message:
        def headers(self) -> list[Any]:
            return list(letter.headers)

    index = index_outputs([Message()], {TOPIC})[TOPIC]
    second = life()
    (again,) = [r for r in second.output.encode(change) if r.value is not None]
    assert Sidecar._without_value(second, again).id in index.ids  # type: ignore[arg-type]
