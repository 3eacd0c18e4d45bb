"""The sidecar's settings (``sidecar.yaml``, ``DEBEZIUM_BRIDGE_SIDECAR_*`` variables, flags,
``-X`` librdkafka settings); every key is listed in docs/configuration.md."""

from __future__ import annotations

import re
from typing import Any, Literal, Self

from pydantic import Field, model_validator

from debezium_bridge.config import ClientSettings, RunnerSettings
from debezium_bridge.core.settings import TranslatorConfig
from debezium_bridge.formats.debezium.settings import DecodeSettings
from debezium_bridge.output import OutputSettings

Guarantee = Literal["idempotent", "transactions", "at-least-once"]
FormatName = Literal["canonical", "exploded", "flat", "ces", "ces-avro", "debezium",
                     "debezium-avro"]
_TOPIC_CHARS = re.compile(r"[^a-zA-Z0-9._-]")


def _topic_safe(text: str) -> str:
    return _TOPIC_CHARS.sub("_", text)


# mypy sees several model_config types; pydantic merges them (RunnerSettings' wins)
class SidecarConfig(RunnerSettings, DecodeSettings, TranslatorConfig,  # type: ignore[misc]
                    OutputSettings):
    """Settings of ``debezium-bridge sidecar`` (``--config`` file keys, flags,
    ``DEBEZIUM_BRIDGE_SIDECAR_<NAME>`` variables; ``-X`` for librdkafka settings)."""

    model_config = {"env_prefix": "DEBEZIUM_BRIDGE_SIDECAR_"}
    client_settings_field = "kafka"
    client_settings_help = ("librdkafka setting for every client the sidecar opens, under its "
                            "own name, e.g. -X security.protocol=SASL_SSL (repeatable)")

    bootstrap_servers: str = "127.0.0.1:9092"
    """Kafka ``bootstrap.servers``."""
    group_id: str = "debezium-bridge-sidecar"
    """Consumer group: instances with the same group share the tables; its committed offsets
    show the lag of the table partitions."""
    subscribe: list[str] = []
    """Topics to read: Debezium table topics, the transaction topic (``<prefix>.transaction``)
    and the heartbeat topic (``__debezium-heartbeat.<prefix>``)."""
    subscribe_pattern: str | None = None
    """Instead of ``subscribe``: a regular expression (whole topic name) over the topics;
    matching topics that appear later are picked up too."""
    exclude_pattern: str | None = None
    """Topics matching this expression are never read (e.g. the output topics, when
    ``subscribe_pattern`` would match them). The DLQ, checkpoint and coordination topics are
    always excluded."""
    outputs: list[FormatName] = ["canonical"]
    """Output formats, each written to ``output_topic`` (``{format}`` tells them apart)."""
    guarantee: Guarantee = "idempotent"
    """``idempotent``: exactly-once output on any broker (idempotent producer, checkpoints and
    recovery from the tail of the output topics); ``transactions``: Kafka transactions (the
    broker must isolate them; downstream consumers use ``isolation.level=read_committed``);
    ``at-least-once``: no recovery scan (a restart may repeat output; every record carries a
    deterministic ``debezium_bridge.event_id`` header)."""
    instance_id: str | None = None
    """A name of this instance that is stable across restarts (e.g. the pod name; default: the
    host name). With ``transactions`` it makes the ``transactional.id``, so a restarted
    instance fences its previous self."""
    checkpoint_topic: str | None = None
    """Topic of the sidecar's checkpoints (default ``<group_id>.debezium-bridge.checkpoints``,
    created with one partition)."""
    coordination_topic: str | None = None
    """Topic whose partitions are the slots the instances of the group share (default
    ``<group_id>.debezium-bridge.slots``, created with ``slots`` partitions). A table topic
    belongs to slot ``murmur2(topic) % slots``: every partition of a table is read by one
    instance, so the two halves of a key change always meet."""
    slots: int = Field(12, ge=1)
    """Number of slots when the coordination topic is created (an existing topic keeps its
    partition count; every instance must see the same)."""
    commit_interval_ms: int = Field(1000, ge=10)
    """How often the output is flushed, a checkpoint written and the input offsets committed
    (with ``transactions``: how long one transaction lasts)."""
    batch_size: int = Field(2000, ge=1)
    """Records consumed per batch."""
    poll_timeout_ms: int = Field(100, ge=1)
    """How long one poll waits for records."""
    idle_timeout_ms: int = Field(10_000, ge=0)
    """A partition that has delivered everything it holds for this long stops holding back the
    release of other partitions' events (it rejoins when it delivers again); 0 = never."""
    start_offsets: Literal["earliest", "latest"] = "earliest"
    """Where a table partition starts when there is neither a checkpoint nor a committed
    offset."""
    create_topics: bool = True
    """Create missing output, DLQ, checkpoint and coordination topics."""
    output_partitions: int = Field(3, ge=1)
    """Partitions of the output and DLQ topics the sidecar creates (with the broker's default
    replication factor; create the topics beforehand for other settings)."""
    topic_refresh_interval_ms: int = Field(30_000, ge=100)
    """How often the topic list is read again (``subscribe_pattern``, new partitions)."""
    http_port: int | None = None
    """Port of the HTTP endpoint (``/metrics`` Prometheus, ``/healthz`` liveness, ``/readyz``
    readiness); 0 = any free port (logged); unset = no endpoint."""
    http_host: str = "0.0.0.0"
    """Address the HTTP endpoint listens on."""
    shutdown_timeout_ms: int = Field(30_000, ge=100)
    """On SIGTERM/SIGINT: finish the batch, flush, checkpoint, commit and exit 0 within this
    bound (exit 1 when it cannot)."""
    service_timeout_ms: int = Field(60_000, ge=100)
    """A broker unreachable for this long (or records undelivered this long) stops the sidecar
    with exit code 4."""
    counters_json: str | None = None
    """On exit, write the counters per input topic (cumulative over restarts) here as JSON."""
    log_format: Literal["text", "json"] = "text"
    """``json``: one JSON object per log line (time, level, logger, message, fields)."""
    kafka: ClientSettings = {}
    """librdkafka settings for every client (``-X``), e.g. ``security.protocol``,
    ``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ``ssl.ca.location``."""
    consumer: ClientSettings = {}
    """librdkafka settings for the consumers only (e.g. ``session.timeout.ms``)."""
    producer: ClientSettings = {}
    """librdkafka settings for the producer only (e.g. ``compression.type``, ``linger.ms``)."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        if bool(self.subscribe) == bool(self.subscribe_pattern):
            raise ValueError("set exactly one of subscribe and subscribe_pattern")
        for name in ("subscribe_pattern", "exclude_pattern"):
            pattern = getattr(self, name)
            if pattern:
                try:
                    re.compile(pattern)
                except re.error as exc:
                    raise ValueError(f"{name}: not a regular expression: {exc}") from None
        if not self.outputs or len(set(self.outputs)) != len(self.outputs):
            raise ValueError("name each output format once")
        given = self.kafka.get("bootstrap.servers")
        if given is not None and given != self.bootstrap_servers \
                and "bootstrap_servers" in self.model_fields_set:
            raise ValueError("bootstrap.servers given twice (bootstrap_servers and -X)")
        for group in ("kafka", "consumer", "producer"):
            for key in ("group.id", "enable.auto.commit", "transactional.id",
                        "enable.partition.eof", "isolation.level"):
                if key in getattr(self, group):
                    raise ValueError(f"{group}: {key} is set by the sidecar (see group_id, "
                                     f"guarantee, instance_id)")
        return self

    # -- derived --------------------------------------------------------------------------
    @property
    def servers(self) -> str:
        return self.kafka.get("bootstrap.servers", self.bootstrap_servers)

    @property
    def checkpoint_topic_name(self) -> str:
        return self.checkpoint_topic or f"{_topic_safe(self.group_id)}.debezium-bridge.checkpoints"

    @property
    def coordination_topic_name(self) -> str:
        return self.coordination_topic or f"{_topic_safe(self.group_id)}.debezium-bridge.slots"

    def client(self, role: Literal["consumer", "producer", "admin"]) -> dict[str, Any]:
        """librdkafka settings of one client: common ``kafka`` settings, then the role's."""
        settings: dict[str, Any] = {**self.kafka, "bootstrap.servers": self.servers}
        if role == "consumer":
            settings.update(self.consumer)
        elif role == "producer":
            settings.update(self.producer)
        return settings
