"""How the input was produced: the decoder settings every runner's configuration shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Self

from pydantic import model_validator

from debezium_bridge.config import ClientSettings, Settings, Url
from debezium_bridge.formats.debezium.decode import DecodeOptions, load_table_schemas
from debezium_bridge.formats.debezium.logical import DEFAULT_PLACEHOLDER, BinaryHandlingMode
from debezium_bridge.model.schema import TableSchema


class DecodeSettings(Settings):
    """How the connector and its converters were configured, where that changes what the bytes
    mean (file keys and flags of every runner)."""

    schema_registry: Url | None = None
    """Confluent Schema Registry URL, for Confluent Avro keys and values (AvroConverter)."""
    registry: ClientSettings = {}
    """Schema registry client settings under Confluent's names (``-X basic.auth.user.info=u:p``,
    ``-X max.retries=6``)."""
    avro_schemas: str | None = None
    """Offline Avro writer schemas instead of a registry: a JSON file mapping schema id (or
    subject) to schema."""
    table_schemas: str | None = None
    """Schemas for schema-less JSON (``schemas.enable=false``): a JSON/YAML file mapping topic or
    ``db.schema.table`` to a Connect (JsonConverter) or Avro schema; without it values of
    schema-less JSON pass through as JSON."""
    binary_handling_mode: BinaryHandlingMode = "bytes"
    """The connector's ``binary.handling.mode``."""
    unavailable_value_placeholder: str = DEFAULT_PLACEHOLDER
    """The connector's ``unavailable.value.placeholder`` (unchanged LOB columns)."""

    @model_validator(mode="after")
    def _registry_settings_need_a_registry(self) -> Self:
        if self.registry and not self.schema_registry:
            raise ValueError("schema registry client settings given without schema_registry")
        return self

    def decode_options(self, table_schemas: Mapping[str, TableSchema] | None = None
                       ) -> DecodeOptions:
        """The decoder options (reads the table-schema file unless ``table_schemas`` given)."""
        if table_schemas is None:
            table_schemas = load_table_schemas(self.table_schemas) if self.table_schemas else {}
        return DecodeOptions(unavailable_value_placeholder=self.unavailable_value_placeholder,
                             binary_handling_mode=self.binary_handling_mode,
                             table_schemas=table_schemas)
