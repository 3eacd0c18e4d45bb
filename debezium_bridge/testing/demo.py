"""The README demo: the Spark streaming job on the embedded default.

Starts the embedded Tansu broker, produces the sample Debezium SQL Server traffic of
:func:`debezium_bridge.testing.simulator.demo` (3 partitions, a snapshot, inserts, an update, a
delete + tombstone, a primary-key change whose halves sit in different partitions with the create
first, a replayed tail after a simulated connector restart, a corrupt record), runs the job with
``spark-submit`` and ``Trigger.AvailableNow`` on local Spark, and prints the translated feed, the
dead letters and the counters. No heartbeat is needed: the run knows where the topics end, so
the inserts and the delete that wait for a possible key-change partner come out at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from debezium_bridge.clients.kafka import create_topics, produce
from debezium_bridge.model.records import RawRecord
from debezium_bridge.testing.broker import EmbeddedKafka
from debezium_bridge.testing.simulator import demo

HEARTBEAT_TOPIC = "__debezium-heartbeat.server1"
WATERMARK_DELAY_S = 5


def _heartbeat(after_ms: int) -> RawRecord:
    """What Debezium's heartbeat emits (``heartbeat.interval.ms``): with
    ``heartbeat_watermark`` it moves the event-time watermark on (used by tests)."""
    ts = after_ms + 2 * WATERMARK_DELAY_S * 1000
    key = b'{"serverName":"server1"}'
    return RawRecord(HEARTBEAT_TOPIC, 0, None, ts, key, json.dumps({"ts_ms": ts}).encode())


def job_config(out: Path, bootstrap: str) -> dict[str, Any]:
    return {
        "source": {"provider": "auto", "options": {
            "subscribePattern": r"server1\.[^.]+\.[^.]+\.[^.]+",
            "startingOffsets": "earliest", "kafka.bootstrap.servers": bootstrap}},
        "translate": {"outputs": ["canonical", "ces"],
                      "watermark_delay": f"{WATERMARK_DELAY_S} seconds", "buckets": 8},
        "sinks": [
            {"kind": "parquet", "rows": "changes", "formats": ["canonical"],
             "path": str(out / "changes")},
            {"kind": "parquet", "rows": "changes", "formats": ["ces"], "path": str(out / "ces")},
            {"kind": "parquet", "rows": "dead_letters", "path": str(out / "dead_letters")},
            {"kind": "kafka", "rows": "all", "options": {"kafka.bootstrap.servers": bootstrap}},
        ],
        "checkpoint": str(out / "checkpoint"),
        "trigger": "available_now",
        "master": "local[2]",
        "counters_json": str(out / "counters.json"),
    }


def _read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of an exactly-once file sink directory (skipping ``_``/``.`` paths, as Spark does)."""
    import pyarrow.dataset as ds

    if not path.exists():
        return []
    dataset = ds.dataset(str(path), format="parquet", partitioning="hive",
                         exclude_invalid_files=True, ignore_prefixes=["_", "."])
    rows: list[dict[str, Any]] = dataset.to_table().to_pylist()
    return rows


def _print_feed(out: Path) -> None:
    changes = sorted(_read_rows(out / "changes"), key=lambda r: (r["seq"], r["event_id"]))
    print(f"\n== canonical change feed ({out}/changes, Parquet), one row per logical change:")
    for row in changes:
        print(row["value"].decode())
    print("\n== the same feed, summarised:")
    for row in changes:
        record = msgspec.json.decode(row["value"])
        key = json.dumps(record["key"])
        if record["key_changed"]:
            key = f'{json.dumps(record["old_key"])} -> {key}  (primary-key change merged)'
        src = ", ".join(f'p{x["partition"]}@{x["offset"]}' for x in record["lineage"])
        print(f'  {record["op"]:<7} {record["seq"][:41]}  key {key}  '
              f'changed={record["changed_columns"]}  from {src}')
    ces = sorted(_read_rows(out / "ces"), key=lambda r: (r["seq"], r["event_id"]))
    print(f"\n== CES CloudEvents ({out}/ces; snapshot rows are not CES events):")
    for row in ces:
        print(row["value"].decode())
    print(f"\n== dead letters ({out}/dead_letters):")
    for row in _read_rows(out / "dead_letters"):
        headers = {h["key"]: (h["value"] or b"").decode() for h in row["headers"]}
        print(f'  {headers["__connect.errors.topic"]}[{headers["__connect.errors.partition"]}]@'
              f'{headers["__connect.errors.offset"]} stage={headers["__connect.errors.stage"]}:'
              f' {headers["__connect.errors.exception.message"]}')
    counters = json.loads((out / "counters.json").read_text())
    print("\n== counters (summed over the micro-batches' observed metrics):")
    print(f'  records_in {counters["records_in"]} = changes_out {counters["changes_out"]}'
          f' + merged {counters["merged"]} + duplicates {counters["duplicates"]}'
          f' + side_records {counters["side_records"]} + tombstones {counters["tombstones"]}'
          f' + dead_letters {counters["dead_letters"]} + skipped {counters["skipped"]}'
          f' + pending {counters["pending"]}  ->  '
          f'{"balanced" if counters["balanced"] else "NOT BALANCED"}')
    print(f'  {counters["batches"]} micro-batches, state {counters["state_buckets"]} buckets, '
          f'watermark {counters["watermark"]}, late {counters["late"]}; waiting events released '
          f'by the position watermark {counters["released_by_position"]}, transaction END '
          f'{counters["released_by_transaction"]}, end of input {counters["released_by_end"]}, '
          f'event time {counters["released_by_watermark"]}')


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=".demo/spark", help="work directory (recreated)")
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args(argv)
    out = Path(args.dir).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    with EmbeddedKafka(log_path=str(out / "tansu.log")) as kafka:
        records, expectation = demo(partitions=args.partitions)
        topics: dict[str, int] = {}
        for r in records:
            topics[r.topic] = max(topics.get(r.topic, 0), r.partition + 1)
        create_topics(kafka.bootstrap_servers, topics)
        produced = produce(kafka.bootstrap_servers, records)
        print(f"== embedded Kafka (Tansu) at {kafka.bootstrap_servers}: produced {len(produced)} "
              f"records to {', '.join(f'{t} ({n} partitions)' for t, n in topics.items())}")
        print(f"   the PK change's halves are in partitions {expectation.pk_change_partitions}, "
              f"partition {expectation.replay_partition} has a replayed tail, one record is "
              f"corrupt")
        config_path = out / "job.yaml"
        config_path.write_text(json.dumps(job_config(out, kafka.bootstrap_servers), indent=2))
        submit = Path(sys.executable).with_name("spark-submit")
        job = Path(__file__).parents[1] / "spark" / "job.py"
        command = [str(submit), "--master", "local[2]", str(job), "--config", str(config_path)]
        print(f"== running: {' '.join(command)}")
        env = os.environ | {"PYSPARK_PYTHON": sys.executable,
                            "PYSPARK_DRIVER_PYTHON": sys.executable,
                            "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
        with open(out / "job.log", "w") as log:
            result = subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    check=False)
        if result.returncode:
            print(f"job failed ({result.returncode}); see {out / 'job.log'}:")
            print((out / "job.log").read_text()[-4000:])
            return result.returncode
    _print_feed(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
