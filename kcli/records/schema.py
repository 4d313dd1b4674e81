"""One generic codec for Kafka's generated messages, driven by schemas declared as data.

Each schema is a Python dict in the shape of Kafka's JSON message specs (``name``, ``validVersions``,
``flexibleVersions``, ``fields`` with ``type``/``versions``/``nullableVersions``/``taggedVersions``/
``tag``/``default``/``ignorable``, nested ``fields`` or ``commonStructs``) and is compiled once by
:func:`message`.  Decoding gives dicts keyed by the spec's camelCase field names (Java's
``FieldSpec.camelCaseName``), with every field of the struct present (defaults for fields the version
lacks), exactly like the Java objects the generated code builds.  :meth:`MessageSchema.to_json` then
gives the tree that Kafka's generated ``*JsonConverter.write`` prints, and :func:`json_text` prints
it the way Jackson's ``JsonNode.toString`` does.

Wire rules follow ``generator/src/main/java/org/apache/kafka/message/MessageDataGenerator.java``:
non-flexible versions use int16-length strings, int32-length bytes and arrays; flexible versions
(KIP-482) use unsigned-varint "length + 1" compact forms and end every struct with a tagged-field
section.  Like the generated ``read``, a message is parsed at whatever version it is given: a version
beyond ``validVersions`` parses (and prints) like the nearest valid one.
"""

from __future__ import annotations

import base64
import math
import struct
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kcli.errors import CorruptRecordError

__all__ = [
    "ZERO_UUID",
    "CoordinatorRecord",
    "CoordinatorSerde",
    "Field",
    "FieldType",
    "MessageSchema",
    "Reader",
    "StructSchema",
    "UnknownRecordTypeError",
    "Versions",
    "Writer",
    "java_double_to_string",
    "json_text",
    "kafka_uuid_from_string",
    "kafka_uuid_to_string",
    "message",
    "snake_case",
    "upper_snake_case",
]

SHORT_MAX = 0x7FFF
ZERO_UUID = uuid.UUID(int=0)

_INT8 = struct.Struct(">b")
_INT16 = struct.Struct(">h")
_UINT16 = struct.Struct(">H")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_INT64 = struct.Struct(">q")
_FLOAT64 = struct.Struct(">d")

_FIXED: dict[str, struct.Struct] = {
    "int8": _INT8,
    "int16": _INT16,
    "uint16": _UINT16,
    "int32": _INT32,
    "uint32": _UINT32,
    "int64": _INT64,
    "float64": _FLOAT64,
}
_PRIMITIVES = frozenset(_FIXED) | {"bool", "uuid", "string", "bytes", "records"}


class UnknownRecordTypeError(CorruptRecordError):
    """The record type (key version, or metadata apiKey) has no schema; ``record_type`` is it."""

    def __init__(self, reason: str, *, record_type: int, position: int | None = None) -> None:
        self.record_type = record_type
        super().__init__(reason, position=position)


# ---------------------------------------------------------------------------------------------
# Names


def snake_case(name: str) -> str:
    """Kafka's ``MessageGenerator.toSnakeCase``: ``commitTimestamp`` -> ``commit_timestamp``.

    A run of capitals is not split (``KRaftVersion`` -> ``kraft_version``), as in Kafka.
    """
    out: list[str] = []
    prev_upper = True
    for ch in name:
        if ch.isupper():
            if not prev_upper:
                out.append("_")
            out.append(ch.lower())
            prev_upper = True
        else:
            out.append(ch)
            prev_upper = False
    return "".join(out)


def upper_snake_case(name: str) -> str:
    """Enum constant names of generated types, e.g. ``TopicRecord`` -> ``TOPIC_RECORD``."""
    return snake_case(name).upper()


def _camel_case(name: str) -> str:
    return name[:1].lower() + name[1:]


# ---------------------------------------------------------------------------------------------
# UUIDs: Kafka prints org.apache.kafka.common.Uuid as URL-safe base64 without padding (22 chars).


def kafka_uuid_to_string(value: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def kafka_uuid_from_string(text: str) -> uuid.UUID:
    if len(text) != 22:
        raise ValueError(f"Input string with prefix `{text[:22]}` is not a 22 character base64 Kafka Uuid")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def _as_uuid(value: Any, name: str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        return kafka_uuid_from_string(value)
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        return uuid.UUID(bytes=bytes(value))
    raise ValueError(f"field {name} needs a UUID, got {value!r}")


# ---------------------------------------------------------------------------------------------
# Versions


@dataclass(frozen=True, slots=True)
class Versions:
    """An inclusive version range as in the specs: ``"0+"``, ``"1-3"``, ``"2"``, ``"none"``."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | int | None, default: Versions | None = None) -> Versions:
        if text is None or text == "":
            if default is None:
                raise ValueError("missing version range")
            return default
        text = str(text).strip()
        if text == "none":
            return NO_VERSIONS
        if text.endswith("+"):
            return cls(int(text[:-1]), SHORT_MAX)
        if "-" in text:
            low, high = text.split("-", 1)
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        return self.low > self.high


NO_VERSIONS = Versions(0, -1)


# ---------------------------------------------------------------------------------------------
# Byte reader / writer


class Reader:
    """Big-endian cursor over ``buf[pos:end]`` that raises CorruptRecordError (with the byte
    position) instead of underflowing."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None) -> None:
        self.buf = bytes(buf) if not isinstance(buf, bytes) else buf
        self.pos = pos
        self.end = len(self.buf) if end is None else end

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, what: str) -> None:
        if n > self.end - self.pos:
            raise CorruptRecordError(
                f"truncated {what}: needs {n} byte(s), only {self.end - self.pos} left", position=self.pos
            )

    def take(self, n: int, what: str = "bytes") -> bytes:
        self._need(n, what)
        start = self.pos
        self.pos += n
        return self.buf[start : self.pos]

    def unpack(self, st: struct.Struct, what: str) -> Any:
        self._need(st.size, what)
        (value,) = st.unpack_from(self.buf, self.pos)
        self.pos += st.size
        return value

    def int16(self, what: str = "int16") -> int:
        return self.unpack(_INT16, what)

    def int32(self, what: str = "int32") -> int:
        return self.unpack(_INT32, what)

    def uvarint(self, what: str = "unsigned varint") -> int:
        """Kafka's ByteUtils.readUnsignedVarint: at most 5 bytes, 32 bits."""
        start = self.pos
        value = 0
        for i in range(5):
            if self.pos >= self.end:
                raise CorruptRecordError(f"truncated {what}", position=start)
            b = self.buf[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << (7 * i)
            if b < 0x80:
                return value
        raise CorruptRecordError(f"{what} is longer than 5 bytes", position=start)


class Writer:
    __slots__ = ("out",)

    def __init__(self) -> None:
        self.out = bytearray()

    def pack(self, st: struct.Struct, value: Any, name: str) -> None:
        try:
            self.out += st.pack(value)
        except struct.error as exc:
            raise ValueError(f"field {name}: {value!r} does not fit: {exc}") from None

    def uvarint(self, value: int) -> None:
        if not 0 <= value <= 0xFFFFFFFF:
            raise ValueError(f"unsigned varint out of range: {value}")
        while value >= 0x80:
            self.out.append((value & 0x7F) | 0x80)
            value >>= 7
        self.out.append(value)

    def getvalue(self) -> bytes:
        return bytes(self.out)


# ---------------------------------------------------------------------------------------------
# Compiled schemas


@dataclass(frozen=True, slots=True)
class FieldType:
    """``kind`` is a primitive name, ``"array"`` (with ``element``) or ``"struct"`` (with ``struct``)."""

    kind: str
    element: FieldType | None = None
    struct: StructSchema | None = None


@dataclass(frozen=True, slots=True)
class Field:
    name: str  # camelCase, as Java's generated code and JSON converters spell it
    type: FieldType
    versions: Versions
    nullable_versions: Versions
    tagged_versions: Versions
    tag: int | None
    default_spec: str
    ignorable: bool

    def default(self) -> Any:
        """A fresh default value, as ``FieldSpec.fieldDefault`` would construct it."""
        spec = self.default_spec
        kind = self.type.kind
        if spec == "null":
            return None
        if kind in ("int8", "int16", "uint16", "int32", "uint32", "int64"):
            return int(spec, 0) if spec else 0
        if kind == "float64":
            return float(spec) if spec else 0.0
        if kind == "bool":
            return spec == "true"
        if kind == "string":
            return spec
        if kind in ("bytes", "records"):
            return b""
        if kind == "uuid":
            return kafka_uuid_from_string(spec) if spec else ZERO_UUID
        if kind == "array":
            return []
        assert self.type.struct is not None
        return self.type.struct.defaults()

    def is_default(self, value: Any) -> bool:
        """Java's ``generateNonDefaultValueCheck``, negated: tagged fields equal to this are not
        written on the wire nor in JSON."""
        kind = self.type.kind
        if self.default_spec == "null":
            return value is None
        if value is None:
            return False
        if kind in ("array", "bytes", "records"):
            return len(value) == 0
        if kind == "float64":
            return value == self.default() and math.copysign(1.0, value) == math.copysign(1.0, self.default())
        return value == self.default()


@dataclass(frozen=True, slots=True)
class StructSchema:
    name: str
    fields: tuple[Field, ...]
    tags: Mapping[int, Field] = field(default_factory=dict)

    def defaults(self) -> dict[str, Any]:
        return {f.name: f.default() for f in self.fields}

    def nested(self, name: str) -> StructSchema:
        """The struct of field ``name`` (a struct or an array of structs)."""
        for f in self.fields:
            if f.name == name:
                t = f.type.element if f.type.kind == "array" else f.type
                if t is not None and t.struct is not None:
                    return t.struct
        raise KeyError(f"{self.name} has no struct field {name}")

    # -- decoding ------------------------------------------------------------------------------

    def read(self, r: Reader, version: int, flexible: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in self.fields:
            if version in f.versions and version not in f.tagged_versions:
                out[f.name] = _read_value(f.type, r, version, flexible, version in f.nullable_versions, f.name)
            else:
                out[f.name] = f.default()
        if flexible:
            count = r.uvarint("tagged field count")
            for _ in range(count):
                tag = r.uvarint("tag")
                size = r.uvarint("tagged field size")
                start = r.pos
                r.take(size, f"tagged field {tag}")
                tagged = self.tags.get(tag)
                if tagged is None:
                    continue  # unknown tagged fields are kept opaque by Java; nothing to print
                if version not in tagged.versions or version not in tagged.tagged_versions:
                    raise CorruptRecordError(f"Tag {tag} is not valid for version {version}", position=start)
                # Tagged values always use the flexible encoding; bound them by their declared size.
                sub = Reader(r.buf, start, start + size)
                nullable = version in tagged.nullable_versions
                out[tagged.name] = _read_value(tagged.type, sub, version, True, nullable, tagged.name, tagged=True)
        return out

    # -- encoding ------------------------------------------------------------------------------

    def write(self, w: Writer, data: Mapping[str, Any], version: int, flexible: bool) -> None:
        tagged: list[tuple[int, Field, Any]] = []
        for f in self.fields:
            value = data[f.name] if f.name in data else f.default()
            if version not in f.versions:
                if not f.ignorable and not f.is_default(value):
                    raise ValueError(f"Attempted to write a non-default {f.name} at version {version}")
                continue
            if version in f.tagged_versions:
                if not flexible:
                    raise ValueError(f"tagged field {f.name} at non-flexible version {version}")
                if not f.is_default(value):
                    assert f.tag is not None
                    tagged.append((f.tag, f, value))
                continue
            _write_value(f.type, w, value, version, flexible, version in f.nullable_versions, f.name)
        if flexible:
            tagged.sort(key=lambda item: item[0])
            w.uvarint(len(tagged))
            for tag, f, value in tagged:
                sub = Writer()
                _write_value(f.type, sub, value, version, True, version in f.nullable_versions, f.name, tagged=True)
                w.uvarint(tag)
                w.uvarint(len(sub.out))
                w.out += sub.out

    # -- JSON ----------------------------------------------------------------------------------

    def to_json(self, data: Mapping[str, Any], version: int) -> dict[str, Any]:
        """What the generated ``*JsonConverter.write(obj, version)`` builds: fields of this version in
        spec order; tagged fields only when not default; bytes as base64, UUIDs in Kafka form."""
        out: dict[str, Any] = {}
        for f in self.fields:
            if version not in f.versions:
                continue
            value = data[f.name] if f.name in data else f.default()
            if version in f.tagged_versions and f.is_default(value):
                continue
            out[f.name] = _json_value(f.type, value, version)
        return out


def _read_length(r: Reader, t: FieldType, flexible: bool, name: str) -> int:
    if flexible:
        return r.uvarint(f"length of {name}") - 1
    if t.kind == "string":
        return r.int16(f"length of {name}")
    return r.int32(f"length of {name}")


def _read_value(
    t: FieldType, r: Reader, version: int, flexible: bool, nullable: bool, name: str, *, tagged: bool = False
) -> Any:
    kind = t.kind
    st = _FIXED.get(kind)
    if st is not None:
        return r.unpack(st, name)
    if kind == "bool":
        return r.unpack(_INT8, name) != 0
    if kind == "uuid":
        return uuid.UUID(bytes=r.take(16, name))
    if kind == "struct":
        assert t.struct is not None
        if nullable:
            # A nullable struct is preceded by a presence marker: int8 (-1 = null), or a varint when tagged.
            marker = f"null marker of {name}"
            present = r.uvarint(marker) > 0 if tagged else r.unpack(_INT8, marker) >= 0
            if not present:
                return None
        return t.struct.read(r, version, flexible)
    start = r.pos
    length = _read_length(r, t, flexible, name)
    if length < 0:
        if nullable:
            return None
        raise CorruptRecordError(f"non-nullable field {name} was serialized as null", position=start)
    if kind == "string":
        if length > SHORT_MAX:
            raise CorruptRecordError(f"string field {name} had invalid length {length}", position=start)
        # Java's new String(bytes, UTF_8) replaces malformed input with U+FFFD.
        return r.take(length, name).decode("utf-8", "replace")
    if kind in ("bytes", "records"):
        return r.take(length, name)
    assert t.element is not None
    if length > r.remaining:
        raise CorruptRecordError(
            f"Tried to allocate a collection of size {length}, but there are only {r.remaining} bytes remaining.",
            position=start,
        )
    element_name = f"{name} element"
    return [_read_value(t.element, r, version, flexible, False, element_name) for _ in range(length)]


def _write_length(w: Writer, t: FieldType, length: int, flexible: bool, name: str) -> None:
    if flexible:
        w.uvarint(length + 1)
    elif t.kind == "string":
        w.pack(_INT16, length, name)
    else:
        w.pack(_INT32, length, name)


def _write_value(
    t: FieldType,
    w: Writer,
    value: Any,
    version: int,
    flexible: bool,
    nullable: bool,
    name: str,
    *,
    tagged: bool = False,
) -> None:
    kind = t.kind
    st = _FIXED.get(kind)
    if st is not None:
        if isinstance(value, bool) or not isinstance(value, (int, float) if kind == "float64" else int):
            raise ValueError(f"field {name} needs a number, got {value!r}")
        w.pack(st, value, name)
        return
    if kind == "bool":
        w.pack(_INT8, 1 if value else 0, name)
        return
    if kind == "uuid":
        w.out += _as_uuid(value, name).bytes
        return
    if value is None:
        if not nullable:
            raise ValueError(f"non-nullable field {name} was null")
        if kind == "struct":
            if tagged:
                w.uvarint(0)
            else:
                w.pack(_INT8, -1, name)
        else:
            _write_length(w, t, -1, flexible, name)
        return
    if kind == "struct":
        assert t.struct is not None
        if nullable:
            if tagged:
                w.uvarint(1)
            else:
                w.pack(_INT8, 1, name)
        t.struct.write(w, value, version, flexible)
        return
    if kind == "string":
        if not isinstance(value, str):
            raise ValueError(f"field {name} needs a str, got {value!r}")
        data = value.encode("utf-8")
        if len(data) > SHORT_MAX:
            raise ValueError(f"'{name}' field is too long to be serialized")
        _write_length(w, t, len(data), flexible, name)
        w.out += data
        return
    if kind in ("bytes", "records"):
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise ValueError(f"field {name} needs bytes, got {value!r}")
        _write_length(w, t, len(value), flexible, name)
        w.out += value
        return
    assert t.element is not None
    items = list(value)
    _write_length(w, t, len(items), flexible, name)
    element_name = f"{name} element"
    for item in items:
        _write_value(t.element, w, item, version, flexible, False, element_name)


def _json_value(t: FieldType, value: Any, version: int) -> Any:
    if value is None:
        return None
    kind = t.kind
    if kind == "uuid":
        return kafka_uuid_to_string(value)
    if kind in ("bytes", "records"):
        # Jackson's BinaryNode: standard base64 with padding (Base64Variants.MIME_NO_LINEFEEDS).
        return base64.b64encode(bytes(value)).decode("ascii")
    if kind == "struct":
        assert t.struct is not None
        return t.struct.to_json(value, version)
    if kind == "array":
        assert t.element is not None
        return [_json_value(t.element, item, version) for item in value]
    return value


@dataclass(frozen=True, slots=True)
class MessageSchema:
    """A compiled top-level message spec."""

    name: str
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    struct: StructSchema

    def effective_version(self, version: int) -> int:
        """The version whose layout the generated Java code uses for ``version``.

        Java emits a version test only where a field's range cuts into ``validVersions``, so a
        version above (below) the valid range behaves exactly like the highest (lowest) one.
        """
        return min(max(version, self.valid_versions.low), self.valid_versions.high)

    def is_flexible(self, version: int) -> bool:
        return self.effective_version(version) in self.flexible_versions

    def read(self, r: Reader, version: int) -> dict[str, Any]:
        effective = self.effective_version(version)
        return self.struct.read(r, effective, effective in self.flexible_versions)

    def decode(self, data: bytes | bytearray | memoryview, version: int) -> tuple[dict[str, Any], int]:
        """Decode one message at ``version``; return ``(fields, bytes consumed)``."""
        r = Reader(data)
        values = self.read(r, version)
        return values, r.pos

    def encode(self, data: Mapping[str, Any], version: int) -> bytes:
        if version not in self.valid_versions:
            raise ValueError(
                f"{self.name} has no version {version} (valid: {self.valid_versions.low}-{self.valid_versions.high})"
            )
        w = Writer()
        self.struct.write(w, data, version, self.is_flexible(version))
        return w.getvalue()

    def to_json(self, data: Mapping[str, Any], version: int) -> dict[str, Any]:
        return self.struct.to_json(data, self.effective_version(version))

    def defaults(self) -> dict[str, Any]:
        return self.struct.defaults()


def _parse_type(
    type_text: str,
    sub_fields: Iterable[Mapping[str, Any]] | None,
    common: Mapping[str, Mapping[str, Any]],
    cache: dict[str, StructSchema],
) -> FieldType:
    if type_text.startswith("[]"):
        return FieldType("array", element=_parse_type(type_text[2:], sub_fields, common, cache))
    if type_text in _PRIMITIVES:
        return FieldType(type_text)
    if sub_fields is not None:
        return FieldType("struct", struct=_compile_struct(type_text, sub_fields, common, cache))
    if type_text in cache:
        return FieldType("struct", struct=cache[type_text])
    if type_text in common:
        return FieldType("struct", struct=_compile_struct(type_text, common[type_text]["fields"], common, cache))
    raise ValueError(f"unknown field type {type_text}")


def _compile_struct(
    name: str,
    specs: Iterable[Mapping[str, Any]],
    common: Mapping[str, Mapping[str, Any]],
    cache: dict[str, StructSchema],
) -> StructSchema:
    fields: list[Field] = []
    for spec in specs:
        tagged = Versions.parse(spec.get("taggedVersions"), NO_VERSIONS)
        versions = Versions.parse(spec.get("versions"), None if tagged.empty else tagged)
        default = spec.get("default", "")
        if default is None:
            default_text = "null"
        elif isinstance(default, bool):
            default_text = "true" if default else "false"
        else:
            default_text = str(default)
        tag = spec.get("tag")
        fields.append(
            Field(
                name=_camel_case(spec["name"]),
                type=_parse_type(spec["type"], spec.get("fields"), common, cache),
                versions=versions,
                nullable_versions=Versions.parse(spec.get("nullableVersions"), NO_VERSIONS),
                tagged_versions=tagged,
                tag=None if tag is None else int(tag),
                default_spec=default_text,
                ignorable=bool(spec.get("ignorable", False)),
            )
        )
    schema = StructSchema(name, tuple(fields), {f.tag: f for f in fields if f.tag is not None})
    cache[name] = schema
    return schema


def message(spec: Mapping[str, Any]) -> MessageSchema:
    """Compile a spec dict (the JSON message spec, transcribed as Python data)."""
    common = {c["name"]: c for c in spec.get("commonStructs", ())}
    cache: dict[str, StructSchema] = {}
    struct_schema = _compile_struct(spec["name"], spec["fields"], common, cache)
    return MessageSchema(
        name=spec["name"],
        api_key=spec.get("apiKey"),
        valid_versions=Versions.parse(spec["validVersions"]),
        flexible_versions=Versions.parse(spec.get("flexibleVersions", "none")),
        struct=struct_schema,
    )


# ---------------------------------------------------------------------------------------------
# Coordinator records (__consumer_offsets, __transaction_state): int16 version prefix + message.


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """A decoded coordinator record. ``record_type`` is the key's version prefix (KIP-915 calls it
    the record type); ``value`` is None for a tombstone."""

    record_type: int
    key: dict[str, Any]
    value_version: int | None
    value: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class CoordinatorSerde:
    """Kafka's ``CoordinatorRecordSerde``: key = int16 record type + key message read at that version,
    value = int16 version + value message (null value = tombstone). Trailing bytes are ignored, as in
    Kafka. Error texts are Kafka's, so dump output can quote them."""

    keys: Mapping[int, MessageSchema]
    values: Mapping[int, MessageSchema]

    @staticmethod
    def _version(r: Reader, which: str) -> int:
        if r.remaining < 2:
            raise CorruptRecordError(f"Could not read version from {which}'s buffer.", position=r.pos)
        return r.int16()

    @staticmethod
    def _read(schema: MessageSchema, r: Reader, version: int, which: str) -> dict[str, Any]:
        try:
            return schema.read(r, version)
        except CorruptRecordError as exc:
            raise CorruptRecordError(
                f"Could not read record with version {version} from {which}'s buffer due to: {exc.reason}.",
                position=exc.position,
            ) from exc

    def record_type(self, key: bytes) -> int:
        return self._version(Reader(key), "key")

    def decode_key(self, key: bytes) -> tuple[int, dict[str, Any]]:
        r = Reader(key)
        record_type = self._version(r, "key")
        schema = self.keys.get(record_type)
        if schema is None:
            raise UnknownRecordTypeError(f"Unknown record type {record_type}", record_type=record_type, position=0)
        return record_type, self._read(schema, r, record_type, "key")

    def decode_value(self, record_type: int, value: bytes | None) -> tuple[int | None, dict[str, Any] | None]:
        if value is None:
            return None, None
        schema = self.values.get(record_type)
        if schema is None:
            raise UnknownRecordTypeError(f"Unknown record type {record_type}", record_type=record_type)
        r = Reader(value)
        version = self._version(r, "value")
        return version, self._read(schema, r, version, "value")

    def decode(self, key: bytes, value: bytes | None) -> CoordinatorRecord:
        record_type, key_data = self.decode_key(key)
        value_version, value_data = self.decode_value(record_type, value)
        return CoordinatorRecord(record_type, key_data, value_version, value_data)

    def encode_key(self, record_type: int, data: Mapping[str, Any]) -> bytes:
        return _INT16.pack(record_type) + self.keys[record_type].encode(data, record_type)

    def encode_value(self, record_type: int, version: int, data: Mapping[str, Any] | None) -> bytes | None:
        if data is None:
            return None
        return _INT16.pack(version) + self.values[record_type].encode(data, version)


# ---------------------------------------------------------------------------------------------
# JSON text as Jackson prints it


def java_double_to_string(value: float) -> str:
    """``Double.toString``: plain notation in [1e-3, 1e7), else ``d.dddE±n``; shortest digits."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits_tuple = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digits_tuple.digits))
    exponent = int(digits_tuple.exponent) + len(digits) - 1  # scientific exponent of the first digit
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        if exponent >= 0:
            whole = digits[: exponent + 1].ljust(exponent + 1, "0")
            frac = digits[exponent + 1 :] or "0"
        else:
            whole = "0"
            frac = "0" * (-exponent - 1) + digits
        return f"{sign}{whole}.{frac}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exponent}"


_JSON_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _json_string(text: str) -> str:
    out = ['"']
    for ch in text:
        esc = _JSON_ESCAPES.get(ch)
        if esc is not None:
            out.append(esc)
        elif ch < " ":
            out.append(f"\\u{ord(ch):04X}")  # Jackson escapes other controls with upper-case hex
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def json_text(value: Any) -> str:
    """Compact JSON exactly as Jackson's ``JsonNode.toString`` writes it: no spaces, non-ASCII left
    as is, controls escaped, doubles in Java's notation (NaN/Infinity quoted)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        text = java_double_to_string(value)
        return f'"{text}"' if not math.isfinite(value) else text
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_json_string(str(k))}:{json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(json_text(v) for v in value) + "]"
    if isinstance(value, uuid.UUID):
        return _json_string(kafka_uuid_to_string(value))
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _json_string(base64.b64encode(bytes(value)).decode("ascii"))
    raise TypeError(f"cannot render {type(value).__name__} as JSON")
