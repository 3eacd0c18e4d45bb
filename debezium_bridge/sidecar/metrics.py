"""Prometheus metrics and the HTTP endpoint: ``/metrics``, ``/healthz`` (liveness: the main
loop is turning) and ``/readyz`` (readiness: slots assigned, not rebalancing, broker
reachable)."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)

_TRANSLATOR = ("records_in", "changes_out", "merged", "duplicates", "side_records",
               "tombstones", "dead_letters", "skipped", "late", "key_changes_paired",
               "released_by_pressure")


class Metrics:
    """The sidecar's metrics in their own registry (``prometheus-client``)."""

    def __init__(self) -> None:
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        except ImportError:
            from debezium_bridge.errors import ConfigError

            raise ConfigError("the sidecar needs prometheus-client: pip install "
                              "'debezium-bridge[sidecar]'") from None

        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        p = "debezium_bridge_sidecar_"
        self.translator = {
            name: Counter(f"{p}{name}", f"translator counter {name} (this process)", ["topic"],
                          registry=r)
            for name in _TRANSLATOR}
        self.output_records = Counter(f"{p}output_records", "records written, per format",
                                      ["format"], registry=r)
        self.output_dead_letters = Counter(f"{p}output_dead_letters",
                                           "dead-letter records written", registry=r)
        self.output_skipped = Counter(
            f"{p}output_skipped", "records not written again after a restart, by reason "
            "(already_written: found in the output tail; reread_dead_letter: a dead letter "
            "written before the checkpoint)", ["reason"], registry=r)
        self.divergent = Counter(f"{p}divergent_releases",
                                 "changes written although part of their input had gone out "
                                 "in another shape before a restart (see docs/sidecar.md)",
                                 registry=r)
        self.pending = Gauge(f"{p}pending_events", "events waiting for ordering and pairing",
                             ["topic"], registry=r)
        self.state = Gauge(f"{p}state_entries", "size of the translator state", ["topic", "kind"],
                           registry=r)
        self.lag = Gauge(f"{p}consumer_lag", "high watermark minus position (a lower bound "
                         "on brokers whose high watermark lags)", ["topic", "partition"],
                         registry=r)
        self.batch = Histogram(f"{p}batch_seconds", "time to translate and hand one batch to "
                               "the producer", registry=r,
                               buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5))
        self.checkpoint = Histogram(f"{p}checkpoint_seconds", "flush + checkpoint + commit",
                                    registry=r,
                                    buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10))
        self.checkpoints = Counter(f"{p}checkpoints", "checkpoints written", registry=r)
        self.slots = Gauge(f"{p}slots", "coordination slots owned", registry=r)
        self.units = Gauge(f"{p}topics", "input topics owned", registry=r)
        self.rebalances = Counter(f"{p}rebalances", "slot assignments received", registry=r)
        self.recovered = Counter(f"{p}recovery_index_records",
                                 "output records read back during recovery", registry=r)
        self.ready = Gauge(f"{p}ready", "1 when ready", registry=r)
        self._seen: dict[tuple[str, str], int] = {}

    def count_translator(self, topic: str, counters: Any) -> None:
        """Add what the translator counted since the last call."""
        for name in _TRANSLATOR:
            value = getattr(counters, name)
            key = (topic, name)
            delta = value - self._seen.get(key, 0)
            if delta > 0:
                self.translator[name].labels(topic).inc(delta)
            self._seen[key] = value

    def forget(self, topic: str) -> None:
        for name in _TRANSLATOR:
            self._seen.pop((topic, name), None)

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class Health:
    """Liveness and readiness, updated by the main loop."""

    def __init__(self, stall_after_s: float) -> None:
        self.stall_after_s = stall_after_s
        self.beat = time.monotonic()
        self.started = False
        self.rebalancing = True
        self.broker_down_since: float | None = None
        self.detail: dict[str, Any] = {}

    def alive(self) -> bool:
        return time.monotonic() - self.beat < self.stall_after_s

    def ready(self) -> bool:
        return (self.started and not self.rebalancing and self.broker_down_since is None
                and self.alive())

    def report(self) -> dict[str, Any]:
        return {"alive": self.alive(), "ready": self.ready(), "started": self.started,
                "rebalancing": self.rebalancing,
                "broker_reachable": self.broker_down_since is None, **self.detail}


def serve(host: str, port: int, metrics: Metrics, health: Health) -> tuple[ThreadingHTTPServer,
                                                                          int]:
    """Start the endpoint in a daemon thread; returns the server and its port."""

    def respond(handler: BaseHTTPRequestHandler, code: int, body: bytes, kind: str) -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    routes: dict[str, Callable[[], tuple[int, bytes, str]]] = {
        "/metrics": lambda: (200, metrics.render(), "text/plain; version=0.0.4"),
        "/healthz": lambda: (200 if health.alive() else 503,
                             json.dumps(health.report()).encode(), "application/json"),
        "/readyz": lambda: (200 if health.ready() else 503,
                            json.dumps(health.report()).encode(), "application/json"),
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            route = routes.get(self.path.split("?", 1)[0])
            if route is None:
                respond(self, 404, b"not found\n", "text/plain")
                return
            code, body, kind = route()
            respond(self, code, body, kind)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http: " + format, *args)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="sidecar-http", daemon=True)
    thread.start()
    return server, server.server_address[1]
