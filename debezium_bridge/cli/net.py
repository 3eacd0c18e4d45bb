"""``debezium-bridge net``: the net changes of a closed LSN window (docs/cdc.md), as
``cdc.fn_cdc_get_net_changes_<capture_instance>(from_lsn, to_lsn, mode)`` returns them, from
SQL Server change-table rows or from any Debezium or CES dump ``convert`` reads.

Consecutive windows: ``--after-lsn`` (the previous window's ``--to-lsn``) starts right after
it, as ``sys.fn_cdc_increment_lsn`` does; ``--state FILE`` keeps the last window's end between
runs, so that each run takes the next window and no change is counted twice or lost.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Literal

import msgspec

from debezium_bridge.cli.convert import Conversion, ConvertConfig
from debezium_bridge.cli.sink import FileSink
from debezium_bridge.core.net import NET_MODES, NetChanges, NetMode, Window, WindowState, net_rows
from debezium_bridge.core.pipeline import CdcPipeline
from debezium_bridge.errors import ConfigError
from debezium_bridge.model.change import ChangeRecord
from debezium_bridge.model.dead_letter import DeadLetter
from debezium_bridge.model.lsn import format_lsn
from debezium_bridge.output import OutputFormat, OutputRecord

log = logging.getLogger(__name__)
_JSON = msgspec.json.Encoder()


NetOutput = Literal["canonical", "exploded", "flat", "ces", "ces-avro", "debezium",
                    "debezium-avro", "rows"]


class NetConfig(ConvertConfig):
    """Settings of ``debezium-bridge net`` (the ``convert`` settings plus the window)."""

    to: NetOutput = "canonical"  # type: ignore[assignment]
    """Output: ``rows`` (what ``fn_cdc_get_net_changes`` returns: ``__$start_lsn``,
    ``__$operation``, ``__$update_mask`` and the columns, as JSON lines), or a view of the net
    change records (canonical, exploded, flat, CES, Debezium; ``all-with-merge`` writes
    ``upsert`` records, which Debezium and CES outputs skip)."""
    from_lsn: str | None = None
    """Low end of the window, included (``0x…``, ``xxxxxxxx:xxxxxxxx:xxxx`` or hex; default:
    the lowest)."""
    to_lsn: str | None = None
    """High end of the window, included (default: the highest in the input)."""
    after_lsn: str | None = None
    """Start right after this LSN (the previous window's ``to_lsn``):
    ``from_lsn = sys.fn_cdc_increment_lsn(after_lsn)``."""
    state: str | None = None
    """A JSON file keeping the last window's end: the window starts right after it and the file
    is updated when the run succeeds (consecutive windows across runs)."""
    mode: Literal["all", "all-with-mask", "all-with-merge"] = "all"
    """The row filter: ``all`` (1 delete, 2 insert, 4 update), ``all-with-mask`` (plus the
    update mask of the columns changed in the window), ``all-with-merge`` (1 delete, 5 insert
    or update)."""

    @property
    def format(self) -> OutputFormat:
        return OutputFormat.CANONICAL if self.to == "rows" else OutputFormat(self.to)

    @property
    def file_layout(self) -> Literal["values", "lossless"]:
        if self.to == "rows":
            if self.output_format == "lossless":
                raise ConfigError("--to rows writes JSON lines: use --output-format values")
            return "values"
        return super().file_layout


class NetRun(Conversion):
    """One run of ``net``: translate the inputs, then write the window's net changes."""

    needs_pairs = True  # a key change's net rows carry values across it

    def __init__(self, config: NetConfig) -> None:
        super().__init__(config)
        self.net_config = config
        if config.mode not in NET_MODES:  # pragma: no cover - pydantic checks it
            raise ConfigError(f"unknown mode {config.mode!r}")
        self.window_state: WindowState | None = None
        if config.state and Path(config.state).exists():
            self.window_state = WindowState.from_json(Path(config.state).read_bytes())
        if self.window_state is not None and self.window_state.last_to_lsn is not None:
            if config.from_lsn or config.after_lsn:
                raise ConfigError("--state gives the window's start: no --from-lsn/--after-lsn")
            window = self.window_state.next_window(config.to_lsn)
        else:
            window = Window.of(config.from_lsn, config.to_lsn, after_lsn=config.after_lsn)
        self.net = NetChanges(window, config.mode)

    @property
    def _writes_lines(self) -> bool:
        return False  # the output is the window's net changes, not the canonical records

    def _write(self, changes: list[ChangeRecord], dead: list[DeadLetter], sink: FileSink,
               dead_sink: FileSink | None) -> None:
        self.net.add_many(changes)
        super()._write([], dead, sink, dead_sink)

    def _translate(self, sink: FileSink, dead_sink: FileSink | None, progress: Any,
                   show: bool) -> None:
        super()._translate(sink, dead_sink, progress, show)
        self._drain(sink, dead_sink)
        result = self.net.result()
        if self.net_config.to == "rows":
            ordinals = None
            if isinstance(self.pipeline, CdcPipeline):
                ordinals = {t.table_id: t.ordinals for t in self.pipeline.decoder.tables.values()}
            rows = net_rows(result, self.net_config.mode, ordinals)
            sink.write(OutputRecord("change", "rows", "", "", None, _JSON.encode(row), (), None,
                                    None, None, None, None, "", 0, None) for row in rows)
        else:
            super()._write(result, [], sink, dead_sink)
        self._save_state()

    def _save_state(self) -> None:
        config = self.net_config
        if not config.state:
            return
        window = self.net.window
        end = window.to_lsn or self.net.max_commit_lsn
        if end is None:
            if self.window_state is not None and self.window_state.last_to_lsn is not None:
                return  # an empty window with no end: the next run starts at the same place
            log.warning("no change in the window and no --to-lsn: %s not written", config.state)
            return
        state = self.window_state or WindowState()
        state.last_to_lsn = format_lsn(end)
        done = {"from_lsn": format_lsn(window.from_lsn or b""), "to_lsn": format_lsn(end)}
        state.windows = [*state.windows, done][-100:]
        Path(config.state).write_bytes(state.to_json() + b"\n")

    def _report(self, elapsed: float) -> None:
        log.info("window %s, mode %s", self.net.window.describe(), self.net_config.mode)
        super()._report(elapsed)
        log.info("%s", self.net.counters.summary())

    def _extra_counters(self) -> dict[str, Any]:
        counters = self.net.counters
        return {"net": {name: getattr(counters, name) for name in counters.__slots__}}


def run_net(config: NetConfig) -> int:
    """Run one net-changes window; returns the process exit code."""
    return NetRun(config).run()


__all__ = ["NetConfig", "NetMode", "run_net"]
