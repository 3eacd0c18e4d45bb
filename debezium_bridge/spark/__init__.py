"""Spark runner: the Kafka source, ``translate`` and the streaming job (needs ``.[spark]``)."""

from debezium_bridge.spark.rows import canonical_schema, parse_canonical
from debezium_bridge.spark.source import KAFKA_SCHEMA, kafka_reader, kafka_rows
from debezium_bridge.spark.translate import TranslateConfig, translate

__all__ = ["KAFKA_SCHEMA", "TranslateConfig", "canonical_schema", "kafka_reader", "kafka_rows",
           "parse_canonical", "translate"]
