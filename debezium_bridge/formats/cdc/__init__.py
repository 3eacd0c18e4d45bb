"""SQL Server change-table rows as input (docs/cdc.md): rows of ``cdc.<capture_instance>_CT``
and of ``cdc.fn_cdc_get_all_changes_<capture_instance>``, exported as CSV or JSON or read from
any table, become the events the Debezium SQL Server connector emits for them."""

from debezium_bridge.formats.cdc.catalog import (
    CapturedColumn,
    CaptureInstance,
    LsnTimes,
    load_capture_instances,
    load_lsn_times,
)
from debezium_bridge.formats.cdc.decode import CdcDecoder, mask_columns, mask_of
from debezium_bridge.formats.cdc.rows import CdcRow, is_cdc_export, read_rows
from debezium_bridge.formats.cdc.settings import CdcSettings

__all__ = ["CaptureInstance", "CapturedColumn", "CdcDecoder", "CdcRow", "CdcSettings",
           "LsnTimes", "is_cdc_export", "load_capture_instances", "load_lsn_times",
           "mask_columns", "mask_of", "read_rows"]
