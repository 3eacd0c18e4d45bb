"""The Kafka sidecar: ``debezium-bridge sidecar --config sidecar.yaml``.

A long-running process beside Kafka Connect: it reads the Debezium SQL Server topics (plus the
transaction and heartbeat topics) in a consumer group, translates them with the same core as
the CLI and the Spark job, and writes the chosen output formats, dead letters and checkpoints,
exactly once on any broker (docs/sidecar.md).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence

from debezium_bridge.sidecar.config import SidecarConfig
from debezium_bridge.sidecar.runner import Sidecar, run

__all__ = ["Sidecar", "SidecarConfig", "main", "run"]

_EPILOG = ("environment: DEBEZIUM_BRIDGE_SIDECAR_<OPTION> for any option (nested groups with a "
           "double underscore)\nexit codes: 0 stopped by SIGTERM/SIGINT after a clean "
           "shutdown, 1 the shutdown bound was exceeded, 2 usage or configuration, 4 Kafka or "
           "the schema registry unreachable")


class JsonLines(logging.Formatter):
    """One JSON object per log line: time, level, logger, message."""

    def format(self, record: logging.LogRecord) -> str:
        doc = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
               + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def main(argv: Sequence[str]) -> int:
    """``debezium-bridge sidecar``: parse the settings and run until stopped."""
    config = SidecarConfig.from_args(
        argv, prog="debezium-bridge sidecar",
        description="Consume Debezium SQL Server topics, translate, produce the translated "
                    "topics: exactly once, beside Kafka Connect.", epilog=_EPILOG)
    if config.log_format == "json":
        root = logging.getLogger("debezium_bridge")
        if not root.handlers:
            root.addHandler(logging.StreamHandler(sys.stderr))
        for handler in root.handlers:
            handler.setFormatter(JsonLines())
    return run(config)
