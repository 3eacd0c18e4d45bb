"""Kafka clients (confluent-kafka) as the runners and tools use them.

* librdkafka's own log lines go through Python :mod:`logging` (logger
  ``debezium_bridge.kafka.client``, each distinct line once a minute) instead of standard
  error;
* records are partitioned like Kafka's Java producer and Spark's Kafka writer (librdkafka's
  ``murmur2_random``: murmur2 of the key, random for keyless records), not librdkafka's default
  ``consistent_random``, so a key lands in the same partition whoever writes it;
* a broker that cannot be reached or a record that cannot be delivered raises
  :class:`~debezium_bridge.errors.ServiceError` with one clear message;
* a setting librdkafka rejects (unknown name, invalid value) raises
  :class:`~debezium_bridge.errors.ConfigError` naming it (:func:`open_client`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from debezium_bridge.config import is_secret
from debezium_bridge.errors import ConfigError, ServiceError
from debezium_bridge.model.records import RawRecord

CLIENT_LOGGER = "debezium_bridge.kafka.client"
"""The logger every confluent-kafka client of the package logs through (``logger`` setting)."""


class _OncePerMessage(logging.Filter):
    """Let each distinct client message (numbers ignored) through once a minute: librdkafka
    repeats a failing connection attempt every few hundred milliseconds. The next copy that is
    let through says how many were held back."""

    PERIOD_S = 60.0

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        text = re.sub(r"\d+", "#", record.getMessage())  # times, counts, addresses
        now = time.monotonic()
        last = self.seen.get(text)
        if last is not None and now - last[0] < self.PERIOD_S:
            self.seen[text] = (last[0], last[1] + 1)
            return False
        if len(self.seen) > 1000:
            self.seen.clear()
        self.seen[text] = (now, 0)
        if last is not None and last[1]:
            record.msg = f"{record.msg} ({last[1]} similar messages held back)"
        return True


def client_logger() -> logging.Logger:
    """The logger of librdkafka's own log lines, with its once-a-minute filter."""
    logger = logging.getLogger(CLIENT_LOGGER)
    if not any(isinstance(f, _OncePerMessage) for f in logger.filters):
        logger.addFilter(_OncePerMessage())
    return logger
_ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: let the partitioner choose
PRODUCER_DEFAULTS = {"enable.idempotence": "true", "linger.ms": "5",
                     "partitioner": "murmur2_random"}


def client_config(settings: Mapping[str, Any]) -> dict[str, Any]:
    """librdkafka settings plus the Python logger for its log lines."""
    return {**settings, "logger": client_logger()}


def open_client(kind: Callable[[dict[str, Any]], Any], settings: Mapping[str, Any]) -> Any:
    """``kind(settings)`` (a confluent-kafka ``Producer``, ``Consumer`` or ``AdminClient``) with
    the Python logger; a setting librdkafka rejects raises :class:`ConfigError` naming it."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        return kind(client_config(settings))
    except TypeError as exc:  # a callback setting (stats_cb, …) given a value that is none
        raise ConfigError(f"Kafka settings: {exc}") from None
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() != KafkaError._INVALID_ARG:
            raise
        key = _rejected_key(settings, error.str())
        if key is None:
            raise ConfigError(f"Kafka settings: {error.str()}") from None
        unknown = error.str().startswith("No such configuration property")
        reason = "invalid value" if is_secret(key) and not unknown else error.str()
        raise ConfigError(f"Kafka setting {key}: {reason}") from None


def _rejected_key(settings: Mapping[str, Any], message: str) -> str | None:
    """The setting librdkafka's ``message`` is about: the first one it names, else (it names
    the canonical name of an alias, e.g. ``queue.buffering.max.ms`` for ``linger.ms``) the one
    a client of its own rejects."""
    from confluent_kafka import KafkaException, Producer

    named = {}
    for key in settings:
        found = re.search(rf"(?<![\w.]){re.escape(key)}(?![\w.])", message)
        if found:
            named[key] = found.start()
    if named:
        return min(named, key=named.__getitem__)
    for key, value in settings.items():
        if not isinstance(value, str | int | float | bool) or key == "bootstrap.servers":
            continue
        try:
            Producer({key: value, "log_level": 0})
        except KafkaException:
            return key
    return None


def create_topics(bootstrap_servers: str, partitions: Mapping[str, int],
                  settings: Mapping[str, str] | None = None, timeout: float = 30.0) -> None:
    """Create topics with the given partition counts (existing topics are left alone)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = open_client(AdminClient, {"bootstrap.servers": bootstrap_servers, **(settings or {})})
    futures = admin.create_topics([NewTopic(name, count) for name, count in partitions.items()],
                                  request_timeout=timeout)
    for name, future in futures.items():
        try:
            future.result(timeout)
        except TimeoutError:
            raise ServiceError(f"Kafka at {bootstrap_servers}: no answer within {timeout:.0f} s "
                               f"(creating topic {name})") from None
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise ServiceError(f"cannot create topic {name} on {bootstrap_servers}: "
                                   f"{exc.args[0].str()}") from None


def produce(bootstrap_servers: str, records: Iterable[RawRecord],
            settings: Mapping[str, str] | None = None, *, keep_partitions: bool = True,
            timeout: float = 60.0) -> list[RawRecord]:
    """Produce ``records`` to their own topic, in order, and to their own partition (or, with
    ``keep_partitions=False``, Kafka's default partitioner's); returns them with the partitions,
    offsets and timestamps the broker assigned (from delivery reports)."""
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_error(error: Any) -> None:
        if error.fatal() or error.code() in _UNREACHABLE:
            errors.append(error.str())

    producer = open_client(Producer, {"bootstrap.servers": bootstrap_servers,
                                      **PRODUCER_DEFAULTS, **(settings or {}),
                                      "error_cb": on_error})
    delivered: list[RawRecord] = []
    failures: list[str] = []

    def reporter(sent: RawRecord) -> Callable[[Any, Any], None]:
        def report(error: Any, message: Any) -> None:
            if error is not None:
                failures.append(error.str())
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
    deadline = time.monotonic() + timeout
    while len(producer) and time.monotonic() < deadline:
        producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
    if len(producer):
        reason = f" ({errors[-1]})" if errors else ""
        raise ServiceError(f"Kafka at {bootstrap_servers}: records still undelivered after "
                           f"{timeout:.0f} s{reason}")
    if failures:
        raise ServiceError(f"Kafka at {bootstrap_servers}: delivery failed: {failures[0]}")
    return delivered


def _unreachable_codes() -> frozenset[int]:
    from confluent_kafka import KafkaError

    return frozenset({KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT,
                      KafkaError._RESOLVE, KafkaError._AUTHENTICATION})


_UNREACHABLE = _unreachable_codes()
