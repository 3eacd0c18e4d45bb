"""Every switch of the CES encoder and decoder.

SQL Server 2025 Change Event Streaming documents its wire format only partly. Each choice the
documentation leaves open is an option here, with the default explained in ``docs/ces.md``
(which also gives the field-by-field mapping). Nothing here changes what a documented field
means.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, model_validator

from debezium_bridge.config import Settings

MIN_MESSAGE_KB, MAX_MESSAGE_KB = 128, 1024
"""``@max_message_size_kb`` bounds of ``sys.sp_create_event_stream_group``."""

PartitionKeyScheme = Literal["None", "Table", "Column", "StreamGroup"]


def _number_text(value: Any) -> Any:
    """Flags and environment variables arrive as text: ``"1"`` stands for the number 1 where
    the choices are numbers (pydantic compares a ``Literal`` choice without converting)."""
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return value


class CesOptions(Settings):
    """How CES events are written (encoder) and read (decoder) — the ``ces`` settings group:
    flags ``--ces.<name>``, file keys ``ces: {<name>: …}``."""

    # -- envelope and segmentation -------------------------------------------------------------
    max_message_size_kb: int = 256
    """Largest event (whole serialized envelope, UTF-8 bytes) before it is split into segments;
    128 to 1024 like ``@max_message_size_kb`` (default 256)."""
    segment_index_base: Annotated[Literal[0, 1], BeforeValidator(_number_text)] = 1
    """Index of the first (or only) segment: 1 as observed in the field (the documentation's
    example shows 0)."""
    datacontenttype: Literal["application/json", "application/avro-json"] = "application/json"
    """``datacontenttype`` of JSON-encoded events."""
    avro_datacontenttype: str = "application/avro"
    """``datacontenttype`` of Avro-encoded (``@encoding = Binary``) events (undocumented)."""
    avro_data_schema: Literal["2026-08", "2025"] = "2026-08"
    """Avro ``Data`` schema the encoder writes: the 2026-08 revision with ``finalevent`` or the
    2025 one without. The decoder recognises both."""
    inner_json: Literal["compact", "pretty"] = "compact"
    """Style of the ``data`` text and the row texts: compact (current revision) or the legacy
    pretty style of the 2025 revision (``data`` indented by 2, rows with ``", "`` / ``": "``)."""
    envelope_indent: int = 0
    """Indentation of the envelope JSON; 0 writes one line (a Kafka value), 2 reproduces the
    MS Learn examples byte for byte."""
    escape_slashes: bool = True
    """Write ``/`` as ``\\/`` at every JSON level (the documentation's examples do it in the
    envelope)."""
    ascii_only: bool = False
    """Escape non-ASCII characters as ``\\uXXXX`` (undocumented; default: raw UTF-8)."""
    logical_id_guid: str | None = None
    """First part of ``logicalid`` (undocumented). Default: per source database,
    ``uuid5(NAMESPACE_URL, "mssql://<source.name>/<db>")``."""
    ids: Literal["deterministic", "random"] = "deterministic"
    """``id`` per segment: ``uuid5`` of ``logicalid:segmentindex`` (replays give the same
    ids), or random ``uuid4`` like the examples."""
    content_type_header: bool = False
    """Add the Kafka header ``content-type: application/cloudevents+json; charset=UTF-8``
    (JSON encoding only; the CloudEvents Kafka binding, structured mode)."""

    # -- which events and which columns --------------------------------------------------------
    key_changes: Literal["update", "delete-insert"] = "update"
    """A merged primary-key change: one ``UPD`` (default) or ``DEL`` + ``INS`` with
    consecutive sequence numbers."""
    snapshot_rows: Literal["insert", "skip"] = "insert"
    """Debezium snapshot rows (``op r``): ``INS`` events, or dropped (CES never snapshots)."""
    include_old_values: bool = True
    """``@include_old_values`` (SQL Server's default 1): ``old`` holds the before image of
    UPD/DEL; false writes ``"{}"``."""
    include_old_lob_values: bool = False
    """``@include_old_lob_values`` (SQL Server's default 0): LOB columns of a *known* ``(max)``
    type are left out of ``old``. Columns whose type was guessed are never treated as LOBs."""
    include_all_columns: bool = True
    """``@include_all_columns`` (SQL Server's default 1); false lists and writes only the changed
    columns (and the key columns) of updates."""
    unsupported_columns: Literal["omit", "include"] = "omit"
    """Columns of types CES does not stream (xml, text, ntext, image, rowversion, sql_variant,
    geography, geometry, json, vector, UDTs) are left out as CES does, or written as text anyway."""
    max_column_kb: int = 1024
    """CES truncates column values above 1 MB; the limit applies to the UTF-8 text of the
    value (binary: to the bytes), cut at a character boundary. 0 turns truncation off."""
    begin_lsn: Literal["first-change", "change", "commit"] = "first-change"
    """``transaction.beginlsn`` when the record does not carry it (Debezium has no begin LSN):
    the lowest ``change_lsn`` seen for the commit, the record's own ``change_lsn``, or the
    commit LSN. Snapshot rows (no ``change_lsn``) always use the commit LSN."""

    # -- value strings (only int, (n)varchar, datetime and datetime2 are documented) ---------
    nulls: Literal["null", "omit"] = "null"
    """SQL NULL in ``old``/``current``: JSON ``null``, or the column left out."""
    bit: Literal["numeric", "boolean"] = "numeric"
    """``bit`` as ``"1"``/``"0"`` (CAST) or ``"true"``/``"false"``."""
    binary: Literal["hex", "base64"] = "hex"
    """(var)binary as ``0x`` + upper-case hex (CONVERT style 1) or standard base64."""
    uniqueidentifier: Literal["upper", "as-is"] = "upper"
    """``uniqueidentifier`` upper-case like SQL Server's CAST, or as the record has it."""
    floats: Literal["shortest", "plain"] = "shortest"
    """float/real as the shortest text that round-trips (``1e+16``), or without exponent."""
    money_scale: Annotated[Literal[4, 2], BeforeValidator(_number_text)] = 4
    """money/smallmoney fraction digits: 4 (exact) or 2 (CONVERT style 0, rounded; lossy)."""
    smalldatetime: Literal["seconds", "milliseconds"] = "seconds"
    """smalldatetime as ``yyyy-MM-dd HH:mm:ss`` (style 120) or with ``.000`` (style 121)."""
    datetimeoffset: Literal["sql", "iso"] = "sql"
    """datetimeoffset as ``2025-03-14 16:45:01.1234567 +01:00`` (CAST) or ISO 8601
    (``2025-03-14T16:45:01.1234567+01:00``)."""

    # -- Kafka record key ---------------------------------------------------------------------
    partition_key_scheme: PartitionKeyScheme = "None"
    """``@partition_key_scheme``: ``None`` (null key, round-robin), ``Table``
    (``<schema>.<table>``; CES uses an internal id), ``Column`` (the value of
    ``partition_key_column``), ``StreamGroup`` (the ``stream_group`` name)."""
    partition_key_column: str | None = None
    """Column whose value is the key with the ``Column`` scheme."""
    stream_group: str = "ces"
    """Stream group name: the key with ``StreamGroup``, and the default output topic."""

    # -- decoder -------------------------------------------------------------------------------
    source_name: str = "ces"
    """``source.name`` of canonical records decoded from CES (CES has no connector name)."""
    absent_columns: Literal["unavailable", "null"] = "unavailable"
    """A column listed in ``cols`` but absent from ``old``/``current``: not sent (reported in
    ``unavailable_columns``, like Debezium's LOB placeholder) or NULL."""
    max_pending_segments: int = 10_000
    """Segments held while their event is incomplete; beyond this the oldest incomplete event
    is reported (dead letters) instead of waiting."""
    completed_memory: int = 100_000
    """``logicalid``s of assembled events remembered, so late duplicate segments are dropped."""

    @model_validator(mode="after")
    def _check(self) -> Self:
        if not MIN_MESSAGE_KB <= self.max_message_size_kb <= MAX_MESSAGE_KB:
            raise ValueError(f"max_message_size_kb must be {MIN_MESSAGE_KB}..{MAX_MESSAGE_KB}"
                              f", got {self.max_message_size_kb}")
        if not 0 <= self.envelope_indent <= 8:
            raise ValueError("envelope_indent must be 0..8")
        if self.max_column_kb < 0:
            raise ValueError("max_column_kb must not be negative")
        if self.logical_id_guid is not None:
            try:
                uuid.UUID(self.logical_id_guid)
            except ValueError as exc:
                raise ValueError(f"logical_id_guid is not a GUID: "
                                  f"{self.logical_id_guid!r}") from exc
        if self.partition_key_scheme == "Column" and not self.partition_key_column:
            raise ValueError("partition_key_scheme Column needs partition_key_column")
        if self.max_pending_segments < 1 or self.completed_memory < 0:
            raise ValueError("max_pending_segments must be >= 1, completed_memory >= 0")
        if not self.avro_datacontenttype or not self.stream_group or not self.source_name:
            raise ValueError("avro_datacontenttype, stream_group and source_name "
                             "must not be empty")
        return self

    @property
    def max_message_bytes(self) -> int:
        return self.max_message_size_kb * 1024


DEFAULT_OPTIONS = CesOptions()
