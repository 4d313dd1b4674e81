"""Pre-flight walk of untrusted request bytes along kio's schema, before kio's native reader sees them.

Why: kio's reader (Rust) sizes each array with ``Vec::with_capacity(declared count)``,
so one forged count (``0x7fffffff``) makes it ask for tens of GiB and abort the whole
process, not raise. It also cannot skip unknown tagged fields (KIP-482 says skip) and
ignores a tagged field's declared size. The walk decodes nothing it does not have to:
it checks every count and length against the bytes left, reads strings, booleans and
timestamps with kio's own readers (which validate them), and names the field that fails.
It mirrors ``kio/rust/src/schema.rs``: fields in dataclass order, an int8 marker before
nullable structs (KIP-893), tagged fields after the regular ones of flexible structs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from functools import cache

from kio.serial import readers
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

# A step reads one field starting at ``pos`` and returns the position after it.
Step = Callable[[bytes, int], int]

_INT32 = struct.Struct(">i")

FIXED_WIDTH = {
    "int8": 1, "int16": 2, "int32": 4, "int64": 8,
    "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8,
    "float64": 8, "uuid": 16,
}


class Malformed(Exception):
    """Where and why a walk stopped; ``path`` is built innermost first while unwinding."""

    def __init__(self, reason: str, position: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.position = position
        self.path: list[str] = []

    @property
    def field(self) -> str | None:
        out = ""
        for part in reversed(self.path):
            out += part if part.startswith("[") or not out else "." + part
        return out or None


def walk(entity_type: type, data: bytes, pos: int) -> int:
    """Check one ``entity_type`` at ``pos``; return the position after it or raise ``Malformed``."""
    return _entity_step(entity_type, False)(data, pos)


def _left(data: bytes, pos: int) -> int:
    return len(data) - pos


def _need(data: bytes, pos: int, size: int, what: str) -> None:
    if size > len(data) - pos:
        raise Malformed(f"{what} needs {size} bytes, {max(len(data) - pos, 0)} left", pos)


def _uvarint(data: bytes, pos: int, what: str) -> tuple[int, int]:
    try:
        value, size = readers.read_unsigned_varint(data, pos)
    except Exception as e:  # kio raises BufferUnderflow or ValueError (varint too long)
        raise Malformed(f"bad {what} varint: {e}", pos) from None
    return value, pos + size


def _kio_step(reader: Callable[[bytes, int], tuple[object, int]], kafka_type: str) -> Step:
    def step(data: bytes, pos: int) -> int:
        try:
            _, size = reader(data, pos)
        except Exception as e:  # kio's DecodeError family, ValueError for bad bool/timestamps
            raise Malformed(f"invalid {kafka_type}: {e}", pos) from None
        return pos + size
    return step


def _fixed_step(size: int, kafka_type: str) -> Step:
    def step(data: bytes, pos: int) -> int:
        _need(data, pos, size, kafka_type)
        return pos + size
    return step


def _bytes_step(flexible: bool, nullable: bool) -> Step:
    # Skipped by length, not read: Produce records would otherwise be copied twice.
    def step(data: bytes, pos: int) -> int:
        if flexible:
            n, pos = _uvarint(data, pos, "compact bytes length")
            if n == 0:
                if not nullable:
                    raise Malformed("null where bytes are required", pos)
                return pos
            n -= 1
        else:
            _need(data, pos, 4, "bytes length")
            (n,) = _INT32.unpack_from(data, pos)
            pos += 4
            if n < 0:
                if n == -1 and nullable:
                    return pos
                raise Malformed(f"invalid bytes length {n}", pos - 4)
        _need(data, pos, n, "bytes")
        return pos + n
    return step


_STRING_READERS = {
    # (flexible, nullable)
    (True, False): readers.read_compact_string,
    (True, True): readers.read_compact_string_nullable,
    (False, False): readers.read_legacy_string,
    (False, True): readers.read_nullable_legacy_string,
}


def _primitive_step(kafka_type: str, flexible: bool, optional: bool) -> Step:
    if kafka_type in FIXED_WIDTH:
        return _fixed_step(FIXED_WIDTH[kafka_type], kafka_type)
    if kafka_type in ("bytes", "records"):
        return _bytes_step(flexible, optional)
    if kafka_type == "string":
        return _kio_step(_STRING_READERS[flexible, optional], kafka_type)
    simple = {
        "bool": readers.read_boolean,
        "error_code": readers.read_error_code,
        "timedelta_i32": readers.read_timedelta_i32,
        "timedelta_i64": readers.read_timedelta_i64,
        "datetime_i64": readers.read_nullable_datetime_i64 if optional else readers.read_datetime_i64,
    }
    if kafka_type not in simple:
        raise TypeError(f"kio type {kafka_type!r} has no walk step")  # schema drift: fail at compile time
    return _kio_step(simple[kafka_type], kafka_type)


def _array_step(element: Step, flexible: bool, fixed_width: int | None) -> Step:
    def step(data: bytes, pos: int) -> int:
        start = pos
        if flexible:
            n, pos = _uvarint(data, pos, "compact array length")
            if n == 0:
                return pos
            n -= 1
        else:
            _need(data, pos, 4, "array length")
            (n,) = _INT32.unpack_from(data, pos)
            pos += 4
            if n < 0:
                if n == -1:
                    return pos
                raise Malformed(f"invalid array length {n}", start)
        # Every element takes at least one byte: the count is bounded before kio allocates.
        if n * (fixed_width or 1) > _left(data, pos):
            raise Malformed(f"array of {n} elements cannot fit in the {_left(data, pos)} bytes left", start)
        if fixed_width is not None:
            return pos + n * fixed_width
        i = 0
        try:
            for i in range(n):
                pos = element(data, pos)
        except Malformed as e:
            e.path.append(f"[{i}]")
            raise
        return pos
    return step


@cache
def _entity_step(entity_type: type, nullable: bool) -> Step:
    flexible: bool = entity_type.__flexible__  # type: ignore[attr-defined]
    is_request_header = entity_type.__name__ == "RequestHeader"
    names: list[str] = []
    regular: list[Step] = []
    tagged: dict[int, tuple[str, Step]] = {}

    for f in fields(entity_type):
        tag = get_field_tag(f)
        kind = classify_field(f)
        if is_request_header and f.name == "client_id":
            # Always a legacy nullable string, even in header v2 (RequestHeader.json).
            step = _kio_step(readers.read_nullable_legacy_string, "string")
        elif isinstance(kind, PrimitiveField):
            step = _primitive_step(get_schema_field_type(f), flexible, is_optional(f) and tag is None)
        elif isinstance(kind, PrimitiveTupleField):
            kafka_type = get_schema_field_type(f)
            step = _array_step(_primitive_step(kafka_type, flexible, False), flexible,
                               FIXED_WIDTH.get(kafka_type))
        elif isinstance(kind, EntityField):
            step = _entity_step(kind.type_, is_optional(f))
        elif isinstance(kind, EntityTupleField):
            step = _array_step(_entity_step(kind.type_, False), flexible, None)
        else:
            raise TypeError(f"unknown kio field class {kind!r}")
        if tag is None:
            names.append(f.name)
            regular.append(step)
        else:
            tagged[int(tag)] = (f.name, step)

    def entity(data: bytes, pos: int) -> int:
        if nullable:
            _need(data, pos, 1, "nullable struct marker")
            marker = data[pos]
            pos += 1
            if marker == 0xFF:  # int8 -1
                return pos
        i = 0
        try:
            for i, read in enumerate(regular):
                pos = read(data, pos)
        except Malformed as e:
            e.path.append(names[i])
            raise
        if flexible:
            pos = _tagged_fields(tagged, data, pos)
        return pos

    return entity


def _tagged_fields(tagged: dict[int, tuple[str, Step]], data: bytes, pos: int) -> int:
    count, pos = _uvarint(data, pos, "tagged field count")
    if count > _left(data, pos):
        raise Malformed(f"{count} tagged fields cannot fit in the {_left(data, pos)} bytes left", pos)
    for _ in range(count):
        start = pos
        tag, pos = _uvarint(data, pos, "tag")
        size, pos = _uvarint(data, pos, "tagged field size")
        _need(data, pos, size, f"tagged field {tag}")
        if tag not in tagged:
            # kio would raise KeyError here rather than skip the field as KIP-482 asks.
            raise Malformed(f"unknown tagged field {tag}", start)
        name, step = tagged[tag]
        try:
            end = step(data, pos)
        except Malformed as e:
            e.path.append(name)
            raise
        if end - pos != size:
            err = Malformed(f"tagged field {tag} declares {size} bytes but holds {end - pos}", start)
            err.path.append(name)
            raise err
        pos = end
    return pos


__all__ = ["Malformed", "walk"]
