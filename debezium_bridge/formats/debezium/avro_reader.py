"""Avro binary decoding by Python source generated once per writer schema.

fastavro interprets the schema for every datum, which for a Debezium envelope (about 30 fields)
costs more than all the rest of the translation. :func:`compile_reader` turns a schema parsed by
``fastavro.parse_schema`` into straight-line Python (records inline, a function only for a
recursive record) that yields the same values as ``fastavro.schemaless_reader``, optionally
leaving out fields the caller does not use.

The generated reader only accepts input it decodes exactly like fastavro (varints within 64 bits,
booleans 0/1, union and enum indexes in range, lengths inside the data). Anything else raises, and
the caller hands that datum to fastavro, which stays the reference for odd and broken input —
except arrays announcing more items than the datum has bytes (plus :data:`EMPTY_ITEMS`, for
items that take none, like ``null``): a few bytes can announce billions of items, which fastavro
builds (minutes and gigabytes for a 5-byte record, measured), so such a datum raises
:class:`TooManyItems`, which callers treat as bad data.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from typing import Any

Reader = Callable[[bytes, int], tuple[Any, int]]
"""``reader(data, pos) -> (datum, end)``: one datum from ``data[pos:]`` and where it ended."""
Projection = Mapping[str, "Projection | None"]
"""The fields of a record to materialise, each with the projection of its own value (``None``:
all of it). Other fields are read past (and still checked) but left out of the datum."""

_PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


class Unsupported(Exception):
    """Input the generated reader does not decode itself (fastavro decides)."""


class TooManyItems(ValueError):
    """A datum whose arrays announce more items than it can plausibly hold (bad data: not
    handed to fastavro)."""


EMPTY_ITEMS = 4096
"""Array items a datum may hold beyond its length in bytes (items that take no bytes)."""


_SHIFTS = tuple(range(7, 64, 7))


def read_varint(data: bytes, pos: int, first: int) -> tuple[int, int]:
    """The zigzag varint whose first byte ``first`` (>= 0x80) was read; (value, new pos)."""
    n = first & 0x7F
    for shift in _SHIFTS:
        byte = data[pos]
        pos += 1
        if byte < 0x80:
            n |= byte << shift
            if n >> 64:
                raise Unsupported("varint beyond 64 bits")
            return (n >> 1) ^ -(n & 1), pos
        n |= (byte & 0x7F) << shift
    raise Unsupported("varint longer than 10 bytes")


_skip_varint = re.compile(rb"[\x80-\xff]*[\x00-\x7f]").match
"""Past a varint whose value is not kept (no match at the end of the data)."""


def _projection_key(keep: Projection | None) -> Any:
    if keep is None:
        return None
    return frozenset((name, _projection_key(sub)) for name, sub in keep.items())


def _unsupported(data: bytes, pos: int) -> tuple[Any, int]:
    raise Unsupported("schema not compiled")


_ZIGZAG = tuple((b >> 1) ^ -(b & 1) for b in range(128))
"""Values of the one-byte varints."""
_LENGTHS = tuple(n if n >= 0 else None for n in _ZIGZAG)
"""Byte counts of the one-byte varint lengths (``None``, which fails, for negative ones)."""


class _Generator:
    """Emits the source of a reader: records inline, a function only per recursive record.

    Spans (bytes, strings, fixed) are sliced without a bounds check each; a span past the end
    leaves ``pos`` beyond the data, which fails the next read or the reader's final check.
    """

    def __init__(self, named: dict[str, Any]) -> None:
        self.named = named
        self.names: dict[tuple[str, Any], str] = {}
        """(record full name, projection) → its function name (recursive records only)."""
        self.active: set[tuple[str, Any]] = set()
        """Records being generated: a reference to one of them is a recursion."""
        self.functions: list[str] = []
        self.constants: dict[str, Any] = {
            "varint": read_varint, "skip_varint": _skip_varint, "Unsupported": Unsupported,
            "ZIGZAG": _ZIGZAG, "LENGTHS": _LENGTHS, "TooManyItems": TooManyItems,
            "unpack_float": struct.Struct("<f").unpack_from,
            "unpack_double": struct.Struct("<d").unpack_from,
        }
        self._count = 0

    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def read_record(self, schema: dict[str, Any], keep: Projection | None, target: str,
                    out: list[str], ind: str) -> None:
        key = (schema["name"], _projection_key(keep))
        if key in self.active:
            function = self.record_function(key, schema, keep)
            out.append(f"{ind}{target}, pos = {function}(data, pos, budget)")
            return
        self.active.add(key)
        fields = []
        for field in schema["fields"]:
            if keep is not None and field["name"] not in keep:
                self.skip(field["type"], out, ind)
                continue
            value = self.fresh("f")
            self.read(field["type"], value, out, ind, keep and keep[field["name"]])
            fields.append(f"{field['name']!r}: {value}")
        self.active.discard(key)
        out.append(f"{ind}{target} = {{{', '.join(fields)}}}")

    def record_function(self, key: tuple[str, Any], schema: dict[str, Any],
                        keep: Projection | None) -> str:
        name = self.names.get(key)
        if name is None:
            name = self.names[key] = self.fresh("record")
            body: list[str] = []
            self.active.discard(key)
            self.read_record(schema, keep, "datum", body, "    ")
            self.active.add(key)
            self.functions.append("\n".join([f"def {name}(data, pos, budget):", *body,
                                             "    return datum, pos", ""]))
        return name

    def skip(self, schema: Any, out: list[str], ind: str) -> None:
        """Read past a value that is not kept (longs without decoding them)."""
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            schema = self.named[schema]
        kind = schema["type"] if isinstance(schema, dict) else schema
        if isinstance(schema, list):
            self.read_union(schema, None, out, ind, None)
        elif kind in ("int", "long"):
            out.append(f"{ind}pos = skip_varint(data, pos).end()")
        else:
            self.read(schema, "_", out, ind)

    def read_long(self, target: str, out: list[str], ind: str) -> None:
        out += [f"{ind}b = data[pos]", f"{ind}pos += 1",
                f"{ind}if b < 128:", f"{ind}    {target} = ZIGZAG[b]",
                f"{ind}else:", f"{ind}    {target}, pos = varint(data, pos, b)"]

    def read_span(self, target: str, out: list[str], ind: str, convert: str = "",
                  size: int | None = None) -> None:
        """Bytes (``.decode()`` for strings) of a length read first, or of a fixed ``size``."""
        end = self.fresh("end")
        if size is None:
            out += [f"{ind}b = data[pos]", f"{ind}pos += 1",
                    f"{ind}if b < 128:", f"{ind}    {end} = pos + LENGTHS[b]",
                    f"{ind}else:", f"{ind}    {end}, pos = varint(data, pos, b)",
                    f"{ind}    if {end} < 0:", f"{ind}        raise Unsupported('negative length')",
                    f"{ind}    {end} += pos"]
        else:
            out.append(f"{ind}{end} = pos + {size}")
        out += [f"{ind}{target} = data[pos:{end}]{convert}", f"{ind}pos = {end}"]

    def read(self, schema: Any, target: str, out: list[str], ind: str,
             keep: Projection | None = None) -> None:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            schema = self.named[schema]
        if isinstance(schema, list):
            self.read_union(schema, target, out, ind, keep)
            return
        kind = schema["type"] if isinstance(schema, dict) else schema
        if isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind not in _PRIMITIVES
                                              and kind in self.named):
            self.read(kind, target, out, ind, keep)  # {"type": <another schema>}
        elif kind == "null":
            out.append(f"{ind}{target} = None")
        elif kind == "boolean":
            out += [f"{ind}b = data[pos]", f"{ind}pos += 1", f"{ind}if b > 1:",
                    f"{ind}    raise Unsupported('boolean byte')", f"{ind}{target} = b == 1"]
        elif kind in ("int", "long"):
            self.read_long(target, out, ind)
        elif kind in ("float", "double"):
            width = 4 if kind == "float" else 8
            out += [f"{ind}{target} = unpack_{kind}(data, pos)[0]", f"{ind}pos += {width}"]
        elif kind in ("bytes", "string"):
            self.read_span(target, out, ind, ".decode()" if kind == "string" else "")
        elif kind == "fixed":
            self.read_span(target, out, ind, size=int(schema["size"]))
        elif kind == "enum":
            symbols = self.fresh("symbols")
            self.constants[symbols] = tuple(schema["symbols"])
            index = self.fresh("i")
            self.read_long(index, out, ind)
            out += [f"{ind}if not 0 <= {index} < {len(schema['symbols'])}:",
                    f"{ind}    raise Unsupported('enum index')",
                    f"{ind}{target} = {symbols}[{index}]"]
        elif kind in ("array", "map"):
            self.read_blocks(schema, kind, target, out, ind)
        elif kind in ("record", "error"):
            self.read_record(schema, keep, target, out, ind)
        else:
            raise Unsupported(f"Avro type {kind!r}")

    def read_union(self, branches: list[Any], target: str | None, out: list[str], ind: str,
                   keep: Projection | None) -> None:
        """A union into ``target`` (skipped when ``target`` is None)."""
        if not branches or len(branches) > 63:  # indexes above 63 take more than one byte
            raise Unsupported(f"union of {len(branches)} branches")
        out += [f"{ind}b = data[pos]", f"{ind}pos += 1"]
        for index, branch in enumerate(branches):
            out.append(f"{ind}{'if' if index == 0 else 'elif'} b == {2 * index}:")
            if target is None:
                if branch == "null":
                    out.append(f"{ind}    pass")
                else:
                    self.skip(branch, out, ind + "    ")
            else:
                self.read(branch, target, out, ind + "    ", keep)
        out += [f"{ind}else:", f"{ind}    raise Unsupported('union index')"]

    def read_blocks(self, schema: dict[str, Any], kind: str, target: str, out: list[str],
                    ind: str) -> None:
        count, skipped, item = self.fresh("count"), self.fresh("skip"), self.fresh("item")
        out.append(f"{ind}{target} = {'[]' if kind == 'array' else '{}'}")
        out.append(f"{ind}while True:")
        inner = ind + "    "
        self.read_long(count, out, inner)
        out += [f"{inner}if {count} == 0:", f"{inner}    break",
                f"{inner}if {count} < 0:", f"{inner}    {count} = -{count}"]
        self.read_long(skipped, out, inner + "    ")
        if kind == "array":  # (a map's items hold a key: they take bytes)
            out += [f"{inner}budget[0] -= {count}", f"{inner}if budget[0] < 0:",
                    f"{inner}    raise TooManyItems('arrays announce more items than the "
                    f"data holds')"]
        out.append(f"{inner}for _ in range({count}):")
        body = inner + "    "
        if kind == "array":
            self.read(schema["items"], item, out, body)
            out.append(f"{body}{target}.append({item})")
        else:
            key = self.fresh("key")
            self.read("string", key, out, body)
            self.read(schema["values"], item, out, body)
            out.append(f"{body}{target}[{key}] = {item}")


def compile_reader(parsed: Any, keep: Projection | None = None) -> Reader:
    """The reader of a schema parsed by ``fastavro.parse_schema`` (with ``__named_schemas``),
    materialising only ``keep`` of a top-level record.

    A schema it cannot compile gets a reader that always raises :class:`Unsupported`.
    """
    named = parsed.get("__named_schemas", {}) if isinstance(parsed, dict) else {}
    generator = _Generator(named)
    body: list[str] = []
    try:
        generator.read(parsed, "datum", body, "    ", keep)
    except (Unsupported, KeyError, TypeError, ValueError):
        return _unsupported
    source = "\n".join([*generator.functions, "def read(data, pos):",
                        f"    budget = [len(data) + {EMPTY_ITEMS}]", *body,
                        "    if pos > len(data):", "        raise Unsupported('past the end')",
                        "    return datum, pos", ""])
    namespace = dict(generator.constants)
    exec(compile(source, "<avro reader>", "exec"), namespace)
    return namespace["read"]  # type: ignore[no-any-return]


_OBJECT_REPR = re.compile(r"\s*(?:from\s+)?<[\w.]+ object at 0x[0-9a-fA-F]+>")
"""A Python object's default repr in an error message (``from <_io.BytesIO object at 0x…>``):
an address, different in every process, so the same record would get another message."""


def fastavro_reason(exc: BaseException) -> str:
    """What an error of ``fastavro.schemaless_reader`` on bad data says about the data."""
    detail = _OBJECT_REPR.sub("", str(exc)) or type(exc).__name__
    if isinstance(exc, EOFError | struct.error):
        return f"the data ends early: {detail}"
    if isinstance(exc, IndexError):  # a union branch, enum symbol or length past its end
        return f"an index or length in the data is out of range: {detail}"
    if isinstance(exc, UnicodeDecodeError):
        return f"a string is not UTF-8: {exc.reason} at byte {exc.start}"
    return detail
