"""The sidecar beside Connect in docker/ (no Docker engine here, so the files are checked for
what they promise): the configuration is a valid sidecar configuration, it reads exactly the
topics the registered connector writes, and the container gets time for a clean SIGTERM exit.

Topic names are Debezium's documented ones for the SQL Server connector:
``<topic.prefix>.<database>.<schema>.<table>`` for data, ``<topic.prefix>.transaction`` with
``provide.transaction.metadata`` and ``__debezium-heartbeat.<topic.prefix>`` with
``heartbeat.interval.ms``."""

from __future__ import annotations

import json
import re

import yaml

from debezium_bridge.sidecar.config import SidecarConfig
from tests.paths import ROOT

DOCKER = ROOT / "docker"


def _config() -> SidecarConfig:
    return SidecarConfig.from_args(["--config", str(DOCKER / "sidecar.yaml")],
                                   prog="debezium-bridge sidecar", description="")


def test_sidecar_reads_the_connectors_topics_and_not_its_own() -> None:
    config = _config()
    connector = json.loads((DOCKER / "register-sqlserver.json").read_text())["config"]
    prefix, db = connector["topic.prefix"], connector["database.names"]
    assert connector["provide.transaction.metadata"] == "true"
    assert int(connector["heartbeat.interval.ms"]) > 0
    tables = [f"{prefix}.{db}.{t}" for t in connector["table.include.list"].split(",")]
    inputs = [*tables, f"{prefix}.transaction", f"__debezium-heartbeat.{prefix}"]
    outputs = [config.output_topic.format(topic=t, format=f)
               for t in tables for f in config.outputs] + [config.dlq_topic]

    def read(topic: str) -> bool:
        assert config.subscribe_pattern and config.exclude_pattern
        return (re.fullmatch(config.subscribe_pattern, topic) is not None
                and re.fullmatch(config.exclude_pattern, topic) is None)

    assert [t for t in inputs if not read(t)] == []
    assert [t for t in outputs if read(t)] == []


def test_compose_runs_the_sidecar_beside_connect_with_time_to_stop() -> None:
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    sidecar, services = compose["services"]["sidecar"], compose["services"]
    assert {"kafka", "connect"} <= set(sidecar["depends_on"])
    assert any(v.startswith("./sidecar.yaml:") for v in sidecar["volumes"])
    config = _config()
    kafka = services["kafka"]["environment"]
    listener = config.bootstrap_servers.split(":")[0]
    assert f"//{listener}:" in kafka["KAFKA_ADVERTISED_LISTENERS"]
    grace = int(sidecar["stop_grace_period"].removesuffix("s"))
    assert grace * 1000 > config.shutdown_timeout_ms
    assert str(config.http_port) in " ".join(map(str, sidecar["ports"]))
    assert f"{config.http_port}/healthz" in (DOCKER / "Dockerfile").read_text()
