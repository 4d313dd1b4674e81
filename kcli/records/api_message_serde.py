"""Kafka's ``AbstractApiMessageSerde`` framing, shared by the KRaft metadata records (``MetadataRecordSerde``)
and the tiered-storage metadata records (``RemoteLogMetadataSerde``): unsigned varint frame version 1, unsigned
varint record type (the spec's ``apiKey``), unsigned varint version, then the flexible struct. Each varint must
fit a Java short (``readUnsignedVarint`` then a range check)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kcli.errors import CorruptRecordError
from kcli.records.schema import (
    MessageSchema,
    Reader,
    UnknownRecordTypeError,
    Writer,
    message,
)

__all__ = ["FRAME_VERSION", "read_framed", "schemas_by_api_key", "write_framed"]

FRAME_VERSION = 1  # AbstractApiMessageSerde.DEFAULT_FRAME_VERSION
_SHORT_MAX = 0x7FFF


def schemas_by_api_key(specs: Iterable[Mapping[str, Any]]) -> dict[int, MessageSchema]:
    """The specs (Kafka's message JSON, as data) built and keyed by their ``apiKey``."""
    schemas: dict[int, MessageSchema] = {}
    for spec in specs:
        schema = message(spec)
        assert schema.api_key is not None
        schemas[schema.api_key] = schema
    return schemas


def _short_uvarint(r: Reader, entity: str) -> int:
    start = r.pos
    try:
        value = r.uvarint(entity)
    except CorruptRecordError as exc:
        raise CorruptRecordError(f"Error while reading {entity}", position=start) from exc
    if value > _SHORT_MAX:
        raise CorruptRecordError(f"Value for {entity} was too large.", position=start)
    return value


def read_framed(value: bytes | None, schemas: Mapping[int, MessageSchema], *, what: str, unknown_type: str,
                frame_zero: str | None = None) -> tuple[int, int, dict[str, Any]]:
    """(type id, version, data) of a framed value, with Kafka's error texts and the byte position of what is
    wrong. ``unknown_type``: the text for an unknown type, ``{type_id}`` filled in; ``frame_zero``: the text for
    frame version 0 when the serde names it (MetadataRecordSerde: KRaft's 2.8 preview)."""
    if value is None:
        raise CorruptRecordError(f"{what} has no value")
    r = Reader(value)
    frame = _short_uvarint(r, "frame version")
    if frame == 0 and frame_zero is not None:
        raise CorruptRecordError(frame_zero, position=0)
    if frame != FRAME_VERSION:
        raise CorruptRecordError(f"Could not deserialize metadata record due to unknown frame version {frame}"
                                 f"(only frame version {FRAME_VERSION} is supported)", position=0)
    type_pos = r.pos
    type_id = _short_uvarint(r, "type")
    version = _short_uvarint(r, "version")
    schema = schemas.get(type_id)
    if schema is None:
        raise UnknownRecordTypeError(unknown_type.format(type_id=type_id), record_type=type_id, position=type_pos)
    try:
        data = schema.read(r, version)
    except CorruptRecordError as exc:
        # Kafka's message stops here; the codec's reason stays on __cause__ and in the position.
        raise CorruptRecordError(f"Failed to deserialize record with type {type_id}", position=exc.position) from exc
    if r.remaining > 0:
        raise CorruptRecordError(f"Found {r.remaining} byte(s) of garbage after {type_id}", position=r.pos)
    return type_id, version, data


def write_framed(schemas: Mapping[int, MessageSchema], type_id: int, version: int, data: Mapping[str, Any]) -> bytes:
    """Frame + struct, as ``AbstractApiMessageSerde.write``."""
    w = Writer()
    w.uvarint(FRAME_VERSION)
    w.uvarint(type_id)
    w.uvarint(version)
    return w.getvalue() + schemas[type_id].encode(data, version)
