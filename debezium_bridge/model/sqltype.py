"""SQL Server column types as parsed values: ``decimal(10,2)`` → base ``decimal``, precision 10,
scale 2.

One parser for every place that reads a SQL type name: CES ``cols[].type``, Debezium's
propagated ``__debezium.source.column.type`` parameters, table-schema files and the column types
the output encoders write.
"""

from __future__ import annotations

import re

import msgspec

from debezium_bridge.errors import ValueConversionError

INTEGER_TYPES = frozenset({"tinyint", "smallint", "int", "bigint"})
DECIMAL_TYPES = frozenset({"decimal", "numeric"})
MONEY_TYPES = frozenset({"money", "smallmoney"})
FLOAT_TYPES = frozenset({"float", "real"})
TEXT_TYPES = frozenset({"char", "varchar", "nchar", "nvarchar", "sysname"})
BINARY_TYPES = frozenset({"binary", "varbinary"})
SIZED_TYPES = TEXT_TYPES | BINARY_TYPES
FRACTION_TYPES = frozenset({"time", "datetime2", "datetimeoffset"})
UNSUPPORTED_TYPES = frozenset({
    "xml", "text", "ntext", "image", "rowversion", "timestamp", "sql_variant", "geography",
    "geometry", "json", "vector", "hierarchyid",
})
"""Column types CES does not stream (documented column-level limitations; UDTs too)."""
KNOWN_TYPES = (INTEGER_TYPES | DECIMAL_TYPES | MONEY_TYPES | FLOAT_TYPES | TEXT_TYPES
               | BINARY_TYPES | FRACTION_TYPES | UNSUPPORTED_TYPES
               | {"bit", "uniqueidentifier", "date", "datetime", "smalldatetime"})

MAX = -1
"""``SqlType.length`` of a ``(max)`` type."""
_MAX_LENGTHS = frozenset({2147483647, 1073741823})
"""mssql-jdbc column sizes of ``varchar(max)``/``varbinary(max)`` and ``nvarchar(max)``."""

_TYPE_RE = re.compile(
    r"\s*([A-Za-z_][A-Za-z0-9_ ]*?)\s*(?:\(\s*(max|-1|\d+)\s*(?:,\s*(\d+)\s*)?\))?\s*", re.I)


class SqlType(msgspec.Struct, frozen=True, gc=False):
    """A parsed SQL Server column type: ``decimal(10,2)`` → base ``decimal``, precision 10,
    scale 2. ``length`` is the character/byte length of sized types (:data:`MAX` for max);
    ``scale`` is also the fraction-second precision of time/datetime2/datetimeoffset."""

    base: str
    length: int | None = None
    precision: int | None = None
    scale: int | None = None

    @property
    def text(self) -> str:
        """The lower-case type name CES writes in ``cols[].type`` (``nvarchar(50)``,
        ``decimal(10,2)``, ``datetime2(7)``, ``nvarchar(max)``, ``int``)."""
        base = self.base
        if base in SIZED_TYPES and self.length is not None:
            return f"{base}({'max' if self.length == MAX else self.length})"
        if base in DECIMAL_TYPES and self.precision is not None:
            return f"{base}({self.precision},{self.scale or 0})"
        if base in FRACTION_TYPES and self.scale is not None:
            return f"{base}({self.scale})"
        return base

    @property
    def fraction_digits(self) -> int:
        """Fraction-second digits of a temporal type (7 when not given, SQL Server's default)."""
        base = self.base
        if base == "datetime":
            return 3
        if base == "smalldatetime" or base == "date":
            return 0
        return 7 if self.scale is None else self.scale

    @property
    def is_lob(self) -> bool:
        return self.length == MAX and self.base in ("varchar", "nvarchar", "varbinary")

    @property
    def supported(self) -> bool:
        return self.base not in UNSUPPORTED_TYPES


def _strip_identity(name: str) -> str:
    name = name.strip().lower()
    return name[:-9].rstrip() if name.endswith(" identity") else name


def parse_type(text: str) -> SqlType:
    """Parse a type name as CES writes it (``nvarchar(50)``, ``decimal(10,2)``, ``datetime2(7)``,
    ``varbinary(max)``; also mssql-jdbc's ``int identity``)."""
    m = _TYPE_RE.fullmatch(text)
    if m is None:
        raise ValueConversionError(f"unparsable SQL type {text!r}")
    base = _strip_identity(m.group(1))
    first, second = m.group(2), m.group(3)
    if first is None:
        return SqlType(base)
    size = MAX if first.lower() in ("max", "-1") else int(first)
    if base in SIZED_TYPES:
        return SqlType(base, length=size)
    if base in DECIMAL_TYPES:
        return SqlType(base, precision=size, scale=int(second or 0))
    if base in FRACTION_TYPES:
        return SqlType(base, scale=size)
    if base == "float":
        return SqlType("real" if 0 < size <= 24 else "float")
    return SqlType(base)


def type_from_source(name: str, length: int | None, scale: int | None) -> SqlType:
    """The SQL type from Debezium's ``__debezium.source.column.type``/``length``/``scale``
    parameters (``column.propagate.source.type``)."""
    base = _strip_identity(name)
    if base in SIZED_TYPES:
        if length is None:
            return SqlType(base)
        return SqlType(base, length=MAX if length in _MAX_LENGTHS or length < 0 else length)
    if base in DECIMAL_TYPES:
        return SqlType(base, precision=length, scale=scale or 0)
    if base in FRACTION_TYPES:
        return SqlType(base, scale=scale)
    return SqlType(base)
