"""Spark runner: the Kafka source, ``translate`` and the streaming job (needs ``.[spark]``).

The Kafka source (which subclasses pyspark's data source classes) is imported on first use, so
``debezium-bridge spark --help`` (which imports :mod:`debezium_bridge.spark.job`) works, and says
what to install, without pyspark.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from debezium_bridge.spark.rows import canonical_schema, parse_canonical
from debezium_bridge.spark.translate import TranslateConfig, translate

if TYPE_CHECKING:
    from debezium_bridge.spark.source import KAFKA_SCHEMA, kafka_reader, kafka_rows

__all__ = ["KAFKA_SCHEMA", "TranslateConfig", "canonical_schema", "kafka_reader", "kafka_rows",
           "parse_canonical", "translate"]
_FROM_SOURCE = frozenset({"KAFKA_SCHEMA", "kafka_reader", "kafka_rows"})


def __getattr__(name: str) -> Any:
    if name not in _FROM_SOURCE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from debezium_bridge.spark import source

    return getattr(source, name)
