"""Confluent Schema Registry over confluent-kafka's ``SchemaRegistryClient``.

A schema id the registry does not know is bad input (the record becomes a dead letter); a
registry that does not answer is not: lookups are retried with exponential backoff and then
raise :class:`~debezium_bridge.errors.ServiceError`, which stops the run.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from debezium_bridge.errors import ConfigError, SchemaError, ServiceError
from debezium_bridge.formats.debezium.registry import SchemaRegistrar

log = logging.getLogger(__name__)

DEFAULT_RETRIES = {"max.retries": 6, "retries.wait.ms": 500, "retries.max.wait.ms": 10_000}
"""confluent-kafka's own retry settings (exponential backoff with jitter over network errors and
HTTP 408/429/5xx), raised from its 3 retries: a registry restart should not stop the run.
Override them like any client setting (``-X max.retries=…``)."""
_NUMERIC = frozenset(DEFAULT_RETRIES) | {"timeout", "cache.capacity", "cache.latest.ttl.sec"}


def client_config(conf: Mapping[str, Any]) -> dict[str, Any]:
    """``SchemaRegistryClient`` settings: the retry defaults, then ``conf`` (numbers given as
    text, as from ``-X`` or a properties file, become numbers)."""
    out: dict[str, Any] = dict(DEFAULT_RETRIES)
    for key, value in conf.items():
        if key in _NUMERIC and isinstance(value, str):
            try:
                value = float(value) if "." in value else int(value)
            except ValueError as exc:
                raise ConfigError(f"schema registry setting {key} must be a number") from exc
        out[key] = value
    return out


def _client(conf: Mapping[str, Any]) -> Any:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    try:
        return SchemaRegistryClient(client_config(conf))
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"schema registry settings: {exc}") from exc


def _failure(what: str, exc: Exception) -> SchemaError | ServiceError:
    """A 4xx answer with the registry's own error code (40401 subject not found, 40403 schema
    not found, 42201 invalid schema, …) is about the request: bad input. Anything else — network
    errors, 5xx after the client's retries, a 4xx without an error code (a wrong URL, a proxy in
    front of a registry that is restarting: the body is no registry answer) — means the registry
    cannot be asked."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    if isinstance(exc, SchemaRegistryError) and 400 <= exc.http_status_code < 500 \
            and exc.http_status_code not in (401, 403, 408, 429) \
            and isinstance(exc.error_code, int) and exc.error_code // 100 == exc.http_status_code:
        return SchemaError(f"schema registry: {what}: {exc}")
    log.error("schema registry unreachable (%s): %s", what, exc)
    return ServiceError(f"schema registry unreachable after retries ({what}): "
                        f"{type(exc).__name__}: {exc}")


class RegistrySchemaResolver:
    """Writer schemas by id from a Confluent Schema Registry (cached; a schema id never
    changes). An unknown id raises :class:`SchemaError` (a dead letter); a registry that is
    down raises :class:`ServiceError` once the client's retries are spent."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._client = _client(conf)
        self._cache: dict[int, Mapping[str, Any]] = {}

    def by_id(self, schema_id: int) -> Mapping[str, Any]:
        cached = self._cache.get(schema_id)
        if cached is None:
            try:
                schema = self._client.get_schema(schema_id)
            except Exception as exc:
                raise _failure(f"schema id {schema_id}", exc) from exc
            cached = self._cache[schema_id] = json.loads(schema.schema_str or "null")
        return cached

    def by_subject(self, subject: str) -> Mapping[str, Any] | None:
        """The latest schema of ``subject`` (``None`` when the registry has no such subject)."""
        try:
            registered = self._client.get_latest_version(subject)
        except Exception as exc:
            failure = _failure(f"subject {subject}", exc)
            if isinstance(failure, ServiceError):
                raise failure from exc
            return None
        return json.loads(registered.schema.schema_str or "null")  # type: ignore[no-any-return]


def registry_registrar(conf: Mapping[str, Any]) -> SchemaRegistrar:
    """A :data:`~debezium_bridge.formats.debezium.registry.SchemaRegistrar` over
    confluent-kafka's ``SchemaRegistryClient`` (``conf`` holds ``url`` and client settings such
    as ``basic.auth.user.info``)."""
    from confluent_kafka.schema_registry import Schema

    client = _client(conf)

    def register(subject: str, schema: dict[str, Any]) -> int:
        try:
            return int(client.register_schema(subject, Schema(json.dumps(schema), "AVRO")))
        except Exception as exc:
            raise _failure(f"register {subject}", exc) from exc

    return register
