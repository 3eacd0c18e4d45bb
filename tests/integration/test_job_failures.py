"""The job when things go wrong: a schema registry or broker that is down stops it with one
clear error (not dead letters, not pages of client logs), pyspark missing, SIGINT/SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from debezium_bridge.clients.kafka import create_topics, produce
from debezium_bridge.errors import ServiceError
from debezium_bridge.model.records import RawRecord
from debezium_bridge.spark.job import load_job_config, run
from debezium_bridge.testing.corpus import bulk_corpus
from debezium_bridge.testing.simulator import demo

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
CLI = str(Path(sys.executable).with_name("debezium-bridge"))


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(tmp_path: Path, bootstrap: str, topic: str, **extra: Any) -> Path:
    config = {
        "source": {"provider": "python", "options": {
            "subscribe": topic, "startingOffsets": "earliest",
            "kafka.bootstrap.servers": bootstrap}},
        "sinks": [{"kind": "parquet", "rows": "all", "path": str(tmp_path / "out")}],
        "checkpoint": str(tmp_path / "checkpoint"),
        "trigger": "available_now",
        "master": "local[2]",
    } | extra
    path = tmp_path / "job.json"
    path.write_text(json.dumps(config))
    return path


def test_an_unreachable_schema_registry_stops_the_job_instead_of_dead_lettering(
        spark: Any, kafka_bootstrap: str, tmp_path: Path) -> None:
    records, _ = demo(partitions=3, encoding="avro")
    topic = f"avro.{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, {topic: 1})
    first = next(r for r in records if r.value)
    produce(kafka_bootstrap, [RawRecord(topic, 0, None, first.timestamp, first.key,
                                        first.value)])
    path = _config(tmp_path, kafka_bootstrap, topic, translate={
        "schema_registry": f"http://127.0.0.1:{_closed_port()}",
        "registry": {"max.retries": "0", "timeout": "2"}})
    started = time.monotonic()
    with pytest.raises(ServiceError, match="schema registry unreachable after retries"):
        run(load_job_config(str(path)), spark)
    assert time.monotonic() - started < 120
    assert not (tmp_path / "checkpoint" / "commits" / "0").exists(), "no batch was committed"
    out = tmp_path / "out"
    assert not out.exists() or not any(out.rglob("*.parquet")), "nothing was dead-lettered"


def test_an_unreachable_broker_fails_once_within_the_bound_with_client_logs_in_logging(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bootstrap = f"127.0.0.1:{_closed_port()}"
    path = _config(tmp_path, bootstrap, "nothing.here")
    config = load_job_config(str(path), ["kafka.request.timeout.ms=3000"])
    started = time.monotonic()
    with caplog.at_level(logging.DEBUG, logger="debezium_bridge.kafka.client"), \
            pytest.raises(ServiceError, match=f"Kafka broker {bootstrap} not reachable within 3"):
        run(config, spark)
    assert time.monotonic() - started < 30
    client = [r for r in caplog.records if r.name == "debezium_bridge.kafka.client"]
    assert len(client) < 20, [r.getMessage() for r in client]


def _without_pyspark(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python cannot import pyspark (as without the spark extra)."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pyspark' or name.startswith('pyspark.'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Block())\n")
    return os.environ | {"PYTHONPATH": f"{blocker}{os.pathsep}{ROOT}"}


def test_without_pyspark_the_help_and_the_error_say_which_extra_to_install(
        tmp_path: Path) -> None:
    env = _without_pyspark(tmp_path)
    probe = subprocess.run([sys.executable, "-c", "import pyspark"], env=env,
                           capture_output=True, text=True, check=False)
    assert probe.returncode == 1 and "No module named 'pyspark'" in probe.stderr
    shown = subprocess.run([CLI, "spark", "--help"], env=env, capture_output=True, text=True,
                           timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert "--config" in shown.stdout
    assert "pip install 'debezium-bridge[spark]'" in " ".join(shown.stdout.split())
    path = tmp_path / "job.json"
    path.write_text("{}")
    failed = subprocess.run([CLI, "spark", "--config", str(path)], env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert failed.returncode == 2
    assert "pip install 'debezium-bridge[spark]'" in failed.stderr
    assert "Traceback" not in failed.stderr and "ImportError" not in failed.stderr


SPARK_SUBMIT = str(Path(sys.executable).with_name("spark-submit"))
JOB = str(ROOT / "debezium_bridge" / "spark" / "job.py")


@pytest.mark.slow
@pytest.mark.parametrize(("entry_point", "signum", "to_group", "status"), [
    ("debezium-bridge spark", signal.SIGINT, True, 130),  # a terminal's Ctrl-C
    ("spark-submit", signal.SIGTERM, False, 143),         # a supervisor stopping the service
])
def test_a_signal_during_a_micro_batch_stops_the_query_cleanly_with_the_summary(
        entry_point: str, signum: signal.Signals, to_group: bool, status: int,
        kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"signal.{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, {topic: 3})
    records = [RawRecord(topic, r.partition, None, r.timestamp, r.key, r.value, r.headers)
               for r in bulk_corpus(12_000, "narrow", encoding="json", seed=5, partitions=3)]
    produce(kafka_bootstrap, records)
    path = _config(tmp_path, kafka_bootstrap, topic, trigger="processing_time",
                   trigger_interval="1 second")
    config = json.loads(path.read_text())
    config["source"]["options"]["maxOffsetsPerTrigger"] = "4000"
    path.write_text(json.dumps(config))
    if entry_point == "spark-submit":
        command = [SPARK_SUBMIT, "--master", "local[2]", JOB, "--config", str(path)]
    else:
        command = [CLI, "spark", "--config", str(path)]
    env = os.environ | {"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                        "PYTHONPATH": str(ROOT)}
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    checkpoint = tmp_path / "checkpoint"
    with out.open("w") as stdout, err.open("w") as stderr:
        job = subprocess.Popen(command, env=env, stdout=stdout, stderr=stderr,
                               start_new_session=True)
        planned = checkpoint / "offsets" / "1"  # micro-batch 1 is running
        deadline = time.monotonic() + 300
        while not planned.exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert planned.exists(), err.read_text()[-3000:]
        if to_group:
            os.killpg(job.pid, signum)
        else:
            os.kill(job.pid, signum)
        try:
            returncode = job.wait(timeout=300)
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
    text = out.read_text() + err.read_text()
    assert returncode == status, text[-3000:]
    assert "Traceback" not in text and "\tat " not in text and "Exception" not in text, \
        text[-3000:]
    summary = [line for line in text.splitlines()
               if line.startswith("debezium-bridge: records_in=")]
    assert len(summary) == 1 and "[balanced]" in summary[0], text[-3000:]
    assert f"debezium-bridge: stopped by {signum.name}" in text
    committed = sorted(int(p.name) for p in (checkpoint / "commits").iterdir()
                       if p.name.isdigit())
    # the micro-batch that was running when the signal came finished (or was not started):
    # nothing was cut short, and the summary counts what the committed batches read
    assert committed == list(range(len(committed))) and committed, committed
    assert "records_in=0 " not in summary[0]
