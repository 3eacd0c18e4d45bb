"""The translation core: order, deduplicate and pair decoded events (no Spark, no Kafka client)."""

from debezium_bridge.core.counters import Counters
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.core.translator import Translator

__all__ = ["Counters", "Translator", "TranslatorConfig"]
