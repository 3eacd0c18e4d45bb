"""Avro writer schemas without a network: the resolver and registrar protocols the Avro decoder
and the Debezium writer use, offline schema files, and an in-memory registry for offline ids.

The Confluent Schema Registry client behind the same protocols is
:mod:`debezium_bridge.clients.registry`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import msgspec

from debezium_bridge.errors import ConfigError, SchemaError

SchemaRegistrar = Callable[[str, dict[str, Any]], int]
"""``(subject, avro_schema) -> schema id``: a Schema Registry client or an in-memory registry."""
_JSON = msgspec.json.Encoder()


class SchemaResolver(Protocol):
    """Looks up Avro writer schemas by registry id (and optionally by subject)."""

    def by_id(self, schema_id: int) -> Mapping[str, Any]: ...
    def by_subject(self, subject: str) -> Mapping[str, Any] | None: ...


def _schema_json(value: Any) -> Mapping[str, Any]:
    """A schema given as an object, as JSON text, or as the registry's ``{"schema": "…"}``."""
    if isinstance(value, str):
        value = json.loads(value)
    if isinstance(value, Mapping) and isinstance(value.get("schema"), str) and "type" not in value:
        value = json.loads(value["schema"])
    if not isinstance(value, Mapping):
        raise ConfigError(f"not an Avro schema: {value!r:.80}")
    return value


class FileSchemaResolver:
    """Offline schemas: a JSON object mapping schema id (or subject name) → Avro schema."""

    def __init__(self, schemas: Mapping[str, Any]) -> None:
        self._by_id: dict[int, Mapping[str, Any]] = {}
        self._by_subject: dict[str, Mapping[str, Any]] = {}
        for name, schema in schemas.items():
            parsed = _schema_json(schema)
            if str(name).isdigit():
                self._by_id[int(name)] = parsed
            else:
                self._by_subject[str(name)] = parsed

    @classmethod
    def from_file(cls, path: str | Path) -> FileSchemaResolver:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read Avro schemas from {path}: {exc}") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object mapping schema id → schema")
        return cls(data)

    def add_subject(self, subject: str, schema: Any) -> None:
        self._by_subject[subject] = _schema_json(schema)

    def by_id(self, schema_id: int) -> Mapping[str, Any]:
        try:
            return self._by_id[schema_id]
        except KeyError:
            raise SchemaError(f"unknown Avro schema id {schema_id}") from None

    def by_subject(self, subject: str) -> Mapping[str, Any] | None:
        return self._by_subject.get(subject)


class InMemoryRegistry:
    """A :data:`SchemaRegistrar` keeping schemas in memory (same schema → same id)."""

    def __init__(self) -> None:
        self.schemas: dict[int, Any] = {}
        self.subjects: dict[str, list[int]] = {}
        self._ids: dict[bytes, int] = {}

    def __call__(self, subject: str, schema: dict[str, Any]) -> int:
        text = _JSON.encode(schema)
        schema_id = self._ids.get(text)
        if schema_id is None:
            schema_id = self._ids[text] = len(self._ids) + 1
            self.schemas[schema_id] = schema
        versions = self.subjects.setdefault(subject, [])
        if schema_id not in versions:
            versions.append(schema_id)
        return schema_id
