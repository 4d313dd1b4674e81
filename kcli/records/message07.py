"""Kafka 0.7 message sets: messages with magic 0 (``[crc][payload]``) or magic 1 (``[attributes][crc][payload]``),
compressed wrappers (gzip, snappy), and the reader that walks a set and says where and why it stops.

    MessageSet (0.7) => (MessageSize:int32 Message)*
    Message          => Magic:int8 [Attributes:int8 (magic 1)] CRC:uint32 Payload

A message's offset is its byte position in the partition's log; the next one is ``offset + 4 + size``. A
compressed wrapper's payload is a compressed message set; its inner messages all share the wrapper's offsets
(a 0.7 consumer resumes after the whole wrapper). Kafka 0.7: kafka/message/{Message,ByteBufferMessageSet,
FileMessageSet,CompressionUtils}.scala. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum

from kcli.errors import CorruptRecordError, KcliError
from kcli.records.compression import Codec, compress, decompress
from kcli.records.crc import crc32
from kcli.records.layout import (
    KAFKA07_CODEC_MASK,
    KAFKA07_ENTRY_OVERHEAD,
    KAFKA07_MAGIC,
    KAFKA07_MESSAGE_HEADER,
    KAFKA07_MIN_HEADER_SIZE,
    KAFKA07_SIZE,
)

CODECS_07 = (Codec.NONE, Codec.GZIP, Codec.SNAPPY)  # 0.7 knows no lz4 or zstd


@dataclass(frozen=True, slots=True)
class Message07:
    """One shallow 0.7 message (possibly a compressed wrapper) at ``position`` of its set."""

    position: int  # byte position of the entry (its size field) in the set it was read from
    size: int  # the size field: magic through payload
    magic: int
    attributes: int  # 0 for magic 0
    crc: int
    payload: bytes

    @property
    def entry_size(self) -> int:
        return KAFKA07_ENTRY_OVERHEAD + self.size

    @property
    def next_position(self) -> int:
        return self.position + self.entry_size

    @property
    def codec(self) -> Codec:
        return Codec(self.attributes & KAFKA07_CODEC_MASK) if self.magic == 1 else Codec.NONE

    @property
    def computed_crc(self) -> int:
        return crc32(self.payload)

    @property
    def is_valid(self) -> bool:
        """Message.isValid: the CRC-32 of the payload matches (the header is not covered)."""
        return self.crc == self.computed_crc

    def inner(self) -> list[Message07]:
        """The messages inside a compressed wrapper (positions relative to the decompressed set); [self] if none."""
        if self.codec == Codec.NONE:
            return [self]
        try:
            data = decompress(self.codec, self.payload, magic=0)
        except KcliError as exc:
            raise CorruptRecordError(f"compressed 0.7 message does not decompress: {exc.reason}",
                                     position=self.position) from None
        scan = scan_message_set(data)
        if scan.stop is not None and scan.stop.kind is not StopKind.END:
            raise CorruptRecordError(f"inside a {self.codec.label} wrapper: {scan.stop.reason}",
                                     position=self.position)
        return scan.messages


class StopKind(Enum):
    """Why a reader stopped before the end of a message set."""

    END = "end"  # every byte read
    PARTIAL = "partial"  # the last entry runs past the end: a fetch's cut, or a crash mid-write
    BAD_SIZE = "bad_size"  # a size field below Message.MinHeaderSize
    BAD_MAGIC = "bad_magic"
    BAD_CRC = "bad_crc"
    BAD_CODEC = "bad_codec"


@dataclass(frozen=True, slots=True)
class Stop:
    kind: StopKind
    position: int
    reason: str


@dataclass(frozen=True, slots=True)
class MessageSetScan:
    """The complete valid messages of a set, the bytes they cover and why reading stopped there."""

    messages: list[Message07]
    valid_bytes: int
    stop: Stop | None  # None: every byte read


def read_message(buf: bytes | memoryview, pos: int = 0) -> Message07 | Stop:
    """The message whose size field is at ``buf[pos]``, or why there is none (CRC not checked here)."""
    end = len(buf)
    if end - pos < KAFKA07_ENTRY_OVERHEAD:
        return Stop(StopKind.PARTIAL, pos, f"{end - pos} bytes left, too few for a message size")
    (size,) = KAFKA07_SIZE.unpack_from(buf, pos)
    if size < KAFKA07_MIN_HEADER_SIZE:
        return Stop(StopKind.BAD_SIZE, pos, f"message size {size} is below the minimum header size "
                                            f"{KAFKA07_MIN_HEADER_SIZE}")
    start = pos + KAFKA07_ENTRY_OVERHEAD
    if start + size > end:
        return Stop(StopKind.PARTIAL, pos, f"message of {size} bytes runs past the end ({end - start} bytes left)")
    (magic,) = KAFKA07_MAGIC.unpack_from(buf, start)
    header = KAFKA07_MESSAGE_HEADER.get(magic)
    if header is None:
        return Stop(StopKind.BAD_MAGIC, pos, f"unknown magic byte {magic} (0.7 knows 0 and 1)")
    if size < header.size:
        return Stop(StopKind.BAD_SIZE, pos, f"message size {size} is below magic {magic}'s header size {header.size}")
    fields = header.unpack_from(buf, start)
    attributes = fields[1] if magic == 1 else 0
    crc = fields[-1]
    if magic == 1 and (attributes & KAFKA07_CODEC_MASK) not in CODECS_07:
        return Stop(StopKind.BAD_CODEC, pos, f"unknown compression codec {attributes & KAFKA07_CODEC_MASK}")
    payload = bytes(buf[start + header.size : start + size])
    return Message07(pos, size, magic, attributes, crc, payload)


def iter_message_set(buf: bytes | memoryview, *, check_crc: bool = True) -> Iterator[Message07 | Stop]:
    """Each complete message, then (if reading stopped early) one Stop saying why."""
    pos, end = 0, len(buf)
    while pos < end:
        item = read_message(buf, pos)
        if isinstance(item, Stop):
            yield item
            return
        if check_crc and not item.is_valid:
            yield Stop(StopKind.BAD_CRC, pos, f"CRC mismatch: stored {item.crc}, computed {item.computed_crc}")
            return
        yield item
        pos = item.next_position


def scan_message_set(buf: bytes | memoryview, *, check_crc: bool = True) -> MessageSetScan:
    """FileMessageSet.recover's walk: the valid prefix of a set, and why it ends where it does."""
    messages: list[Message07] = []
    stop: Stop | None = None
    for item in iter_message_set(buf, check_crc=check_crc):
        if isinstance(item, Stop):
            stop = item
        else:
            messages.append(item)
    valid = messages[-1].next_position if messages else 0
    return MessageSetScan(messages, valid, stop)


def encode_message(payload: bytes, *, magic: int = 1, codec: Codec = Codec.NONE, crc: int | None = None) -> bytes:
    """One entry, size field included: what a 0.7 producer writes (``crc`` overrides, for tests of bad input)."""
    if magic not in KAFKA07_MESSAGE_HEADER:
        raise ValueError(f"0.7 messages have magic 0 or 1, not {magic}")
    if magic == 0 and codec != Codec.NONE:
        raise ValueError("a magic 0 message has no attributes, so no codec")
    if codec not in CODECS_07:
        raise ValueError(f"0.7 has no {codec.label} codec")
    crc = crc32(payload) if crc is None else crc
    fields = (magic, crc) if magic == 0 else (magic, int(codec) & KAFKA07_CODEC_MASK, crc)
    header = KAFKA07_MESSAGE_HEADER[magic].pack(*fields)
    return KAFKA07_SIZE.pack(len(header) + len(payload)) + header + payload


def build_message_set(payloads: Iterable[bytes], *, magic: int = 1, codec: Codec = Codec.NONE) -> bytes:
    """A message set of one message per payload, or (with a codec) one magic 1 wrapper holding them, compressed as
    the 0.7 Scala producer does (gzip; snappy in snappy-java's stream framing)."""
    inner = b"".join(encode_message(p, magic=magic) for p in payloads)
    if codec == Codec.NONE:
        return inner
    return encode_message(compress(codec, inner, magic=0), magic=1, codec=codec)


def deep_payloads(messages: Iterable[Message07]) -> Iterator[tuple[Message07, bytes]]:
    """(the shallow message, each payload inside it): what a 0.7 consumer hands its application."""
    for message in messages:
        for inner in message.inner():
            yield message, inner.payload
