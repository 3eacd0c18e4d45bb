"""The tools beside the runners, as a user runs them: ``broker`` starts the embedded broker,
``samples`` writes the demo traffic, ``produce`` loads it into Kafka (partitions, keys, values
and headers kept), and an unreachable broker gives one clear error."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from debezium_bridge.cli import EXIT_SERVICE
from debezium_bridge.formats.dumps import read_dump

COMMAND = [sys.executable, "-m", "debezium_bridge"]


def _consume_all(bootstrap: str, topic: str, partitions: int, count: int) -> list[tuple]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-tools",
                         "enable.auto.commit": "false"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    for _ in range(200):
        for message in consumer.consume(500, 0.2):
            if message.error() is None:
                got.append((message.partition(), message.offset(), message.key(),
                            message.value(), tuple(message.headers() or ())))
        if len(got) >= count:
            break
    consumer.close()
    return got


def test_broker_samples_and_produce(tmp_path: Path) -> None:
    broker = subprocess.Popen([*COMMAND, "broker", "--port", "0"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert broker.stdout is not None
        line = broker.stdout.readline().strip()
        assert line.startswith("bootstrap.servers=127.0.0.1:"), line
        bootstrap = line.split("=", 1)[1]
        dump = tmp_path / "traffic.jsonl"
        subprocess.run([*COMMAND, "samples", "-o", str(dump)], check=True)
        subprocess.run([*COMMAND, "produce", str(dump), "--bootstrap-servers", bootstrap],
                       check=True, timeout=120)
        sent = list(read_dump(dump))
        data = [r for r in sent if r.topic == "server1.testDB.dbo.customers"]
        partitions = max(r.partition for r in data) + 1
        got = _consume_all(bootstrap, "server1.testDB.dbo.customers", partitions, len(data))
        expected = sorted(((r.partition, r.key, r.value, tuple(r.headers)) for r in data),
                          key=repr)
        assert sorted(((p, k, v, h) for p, _, k, v, h in got), key=repr) == expected
    finally:
        broker.send_signal(signal.SIGTERM)
        assert broker.wait(30) == 0


def test_produce_to_an_unreachable_broker_is_one_clear_error(tmp_path: Path) -> None:
    dump = tmp_path / "traffic.jsonl"
    subprocess.run([*COMMAND, "samples", "-o", str(dump)], check=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    run = subprocess.run([*COMMAND, "produce", str(dump), "--bootstrap-servers",
                          f"127.0.0.1:{closed}", "--timeout", "3"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == EXIT_SERVICE
    lines = run.stderr.strip().splitlines()
    assert len(lines) <= 4, run.stderr  # not hundreds of librdkafka lines
    assert f"127.0.0.1:{closed}" in lines[-1] and "Traceback" not in run.stderr
