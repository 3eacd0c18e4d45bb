"""SQL Server 2025 Change Event Streaming (CES) CloudEvents, both ways.

* :class:`CesEncoder`: canonical change records → CES events (JSON or Avro), segmented.
* :class:`CesAssembler` + :class:`CesDecoder`: CES events → the core's change events (and so
  canonical records); the Debezium decoder hands CES values to a :class:`CesDecoder`.
* :class:`ColumnCatalog`: SQL column types per table version, fed by the decoder's schemas.
* :class:`CesOptions`: every switch, see docs/ces.md.
* :mod:`debezium_bridge.testing.ces_schema`: JSON Schemas of the format and a validator.
"""

from debezium_bridge.errors import EncodeError
from debezium_bridge.formats.ces.assemble import CesAssembler
from debezium_bridge.formats.ces.decode import CesDecoder
from debezium_bridge.formats.ces.encode import CesCounters, CesEncoder, CesMessage
from debezium_bridge.formats.ces.options import CesOptions
from debezium_bridge.formats.columns import CatalogColumn, ColumnCatalog

__all__ = [
    "CatalogColumn",
    "CesAssembler",
    "CesCounters",
    "CesDecoder",
    "CesEncoder",
    "CesMessage",
    "CesOptions",
    "ColumnCatalog",
    "EncodeError",
]
