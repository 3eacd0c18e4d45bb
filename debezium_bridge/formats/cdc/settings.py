"""How change-table rows were exported and which connector they are translated as: the ``cdc``
settings group (flags ``--cdc.<name>``, file keys ``cdc: {<name>: …}``)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import field_validator

from debezium_bridge.config import Settings

RowFilter = Literal["all-update-old", "all"]
SourceTime = Literal["tran_end_time", "tran_begin_time"]
BinaryText = Literal["auto", "hex", "base64"]
MaskOrder = Literal["sql-server", "debezium"]

_OFFSET = re.compile(r"[+-](0\d|1[0-4]):[0-5]\d")


class CdcSettings(Settings):
    """Change-table rows as input (docs/cdc.md): the capture-instance description, the export
    format and the connector whose output the rows are translated to."""

    capture_instances: list[str] = []
    """Files describing the capture instances: dumps of ``cdc.change_tables`` +
    ``cdc.captured_columns`` (+ ``cdc.index_columns``), the result sets of
    ``sys.sp_cdc_help_change_data_capture`` / ``sys.sp_cdc_get_captured_columns``, a
    hand-written YAML/JSON description, or a table-schema file (CSV, JSON, JSON lines or
    YAML)."""
    capture_instance: str | None = None
    """The capture instance every row file belongs to (default: the only one described, else
    the one named by the file name or matched by the file's columns)."""
    database: str | None = None
    """Database name of the captured tables (``source.db``; default: the description's)."""
    topic_prefix: str = "server1"
    """The connector's ``topic.prefix`` (``source.name``, topics ``<prefix>.<db>.<schema>.
    <table>``)."""
    connector_version: str = "3.6.0.Final"
    """The SQL Server connector version whose events the rows become (``source.version``; 3.6
    and later send unchanged LOB columns as the unavailable placeholder)."""
    row_filter: RowFilter = "all-update-old"
    """How updates were exported: ``all-update-old`` (two rows, 3 = before and 4 = after: the
    change table itself and ``fn_cdc_get_all_changes_<ci>(…, N'all update old')``) or ``all``
    (``fn_cdc_get_all_changes_<ci>(…, N'all')``: one row 4 per update, no before image)."""
    source_time: SourceTime = "tran_end_time"
    """Which ``cdc.lsn_time_mapping`` time becomes ``source.ts_ms``: ``tran_end_time`` (the
    commit time; ``sys.fn_cdc_map_lsn_to_time``, the connector's function mode and direct mode
    before 3.6) or ``tran_begin_time`` (direct mode from 3.6)."""
    lsn_time_mapping: str | None = None
    """A dump of ``cdc.lsn_time_mapping`` (``start_lsn``, ``tran_begin_time``,
    ``tran_end_time``) for rows without a time column."""
    server_utc_offset: str = "+00:00"
    """UTC offset of the SQL Server's clock: ``cdc.lsn_time_mapping`` times are server-local
    ``datetime`` values (the connector applies ``SYSDATETIMEOFFSET()``'s offset the same
    way)."""
    columns: list[str] = []
    """Column names of row files without a header line (bcp), in file order (default: the
    change table's own order, told apart by the number of fields)."""
    null_values: list[str] = ["NULL", ""]
    """CSV fields that mean NULL (sqlcmd writes ``NULL``; bcp and pandas an empty field)."""
    binary_text: BinaryText = "auto"
    """How LSNs, masks and binary values are written: ``hex`` (``0x…`` or bare hex), ``base64``
    (``FOR JSON``), or ``auto`` (``0x…`` and Debezium's ``xxxxxxxx:xxxxxxxx:xxxx`` are hex
    everywhere; otherwise hex in CSV and base64 in JSON)."""
    sort_input: bool = False
    """Read every row first and sort them all (exports without ``ORDER BY``); otherwise rows
    must come in ``__$start_lsn`` order (any order within one transaction) and a row whose
    ``__$start_lsn`` goes back is a dead letter."""
    lob_mask_order: MaskOrder = "sql-server"
    """How the update mask is read when deciding that a NULL ``(max)`` column of an update row
    was not sent: ``sql-server`` (``sys.fn_cdc_is_bit_set``: bit 1 is the lowest bit of the
    last byte) or ``debezium`` (as ``SqlServerChangeTablePointer#isColumnChanged`` reads it,
    from the first byte; differs for more than 8 captured columns)."""
    transaction_metadata: bool = False
    """Fill the ``transaction`` block (id, total_order, data_collection_order) as the connector
    does with ``provide.transaction.metadata=true``."""

    @field_validator("server_utc_offset")
    @classmethod
    def _offset(cls, value: str) -> str:
        if value in ("Z", "z"):
            return "+00:00"
        if not _OFFSET.fullmatch(value):
            raise ValueError(f"server_utc_offset {value!r} is not ±HH:MM")
        return value

    @property
    def offset_minutes(self) -> int:
        """:attr:`server_utc_offset` in minutes east of UTC."""
        sign = -1 if self.server_utc_offset[0] == "-" else 1
        hours, minutes = self.server_utc_offset[1:].split(":")
        return sign * (int(hours) * 60 + int(minutes))
