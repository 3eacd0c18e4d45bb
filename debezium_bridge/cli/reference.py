"""The configuration reference (docs/configuration.md), generated from the runners' settings
models by scripts/docs; a test checks it is current."""

from __future__ import annotations

from debezium_bridge.cli.convert import ConvertConfig
from debezium_bridge.cli.net import NetConfig
from debezium_bridge.cli.tools import BrokerConfig, ConsumeConfig, ProduceConfig, SamplesConfig
from debezium_bridge.config import reference
from debezium_bridge.sidecar.config import SidecarConfig
from debezium_bridge.spark.job import JobConfig

HEADER = """# Configuration reference

Generated from the settings models by `scripts/docs`; do not edit by hand.

Every runner takes its settings from, lowest to highest precedence: the defaults below, a
config file (`--config FILE`: YAML, JSON or Java `.properties`; keys as in the first column,
nested groups as mappings — or dotted keys in `.properties`), environment variables and
command-line flags (`-X` included). Unknown keys are rejected. Client settings for Kafka and
the schema registry keep their own (librdkafka / Confluent) names and are given with
`-X key=value`; secrets among them, and credentials inside URLs, are masked wherever settings
are shown.

Lists are comma-separated in flags, `.properties` files and environment variables (a variable
may also hold a JSON array); mappings and lists of groups are JSON in a variable. A value that
cannot be parsed is a configuration error (exit code 2). `DEBEZIUM_BRIDGE_LOG_LEVEL` (`DEBUG`,
`INFO`, `WARNING`, `ERROR` or `CRITICAL`; default `INFO`) sets the level of every command's
log lines.
"""

RUNNERS = (
    (ConvertConfig, "convert: topic dumps and change-table rows",
     "debezium-bridge convert [INPUT ...]"),
    (NetConfig, "net: net changes of an LSN window", "debezium-bridge net [INPUT ...]"),
    (JobConfig, "spark: the Spark streaming job",
     "debezium-bridge spark --config job.yaml (or spark-submit …/debezium_bridge/spark/job.py)"),
    (SidecarConfig, "sidecar: the Kafka sidecar", "debezium-bridge sidecar --config sidecar.yaml"),
    (SamplesConfig, "samples: sample traffic", "debezium-bridge samples"),
    (BrokerConfig, "broker: the embedded Kafka broker", "debezium-bridge broker"),
    (ProduceConfig, "produce: a dump file into Kafka", "debezium-bridge produce INPUT ..."),
    (ConsumeConfig, "consume: print topics", "debezium-bridge consume TOPIC ..."),
)


def configuration_reference() -> str:
    """``docs/configuration.md``."""
    return "\n".join([HEADER, *(reference(model, title, command)
                                for model, title, command in RUNNERS)])
