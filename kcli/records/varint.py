"""Zigzag varints (Kafka's ByteUtils.readVarint/readVarlong): protobuf-style LEB128 of the zigzag value."""

from __future__ import annotations

from kcli.errors import CorruptRecordError

VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10


def decode_varint(buf: bytes, pos: int, max_bytes: int = VARLONG_MAX_BYTES) -> tuple[int, int]:
    """Decode one zigzag varint/varlong at ``pos``; return ``(value, next_pos)``.

    ``max_bytes`` is 5 for a varint and 10 for a varlong, as Kafka enforces.
    """
    b = buf[pos]
    if b < 0x80:  # one-byte fast path: most lengths and deltas
        return (b >> 1) ^ -(b & 1), pos + 1
    raw = b & 0x7F
    shift = 7
    start = pos
    pos += 1
    while True:
        b = buf[pos]
        raw |= (b & 0x7F) << shift
        pos += 1
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if pos - start >= max_bytes:
            raise CorruptRecordError(f"varint longer than {max_bytes} bytes", position=start)


def encode_varint(value: int) -> bytes:
    """Zigzag-encode ``value`` (int32 or int64 range) as LEB128 bytes."""
    raw = (value << 1) ^ (value >> 63)
    if 0 <= raw < 0x80:
        return bytes((raw,))
    out = bytearray()
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def size_of_varint(value: int) -> int:
    raw = (value << 1) ^ (value >> 63)
    size = 1
    while raw >= 0x80:
        raw >>= 7
        size += 1
    return size
