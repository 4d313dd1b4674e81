"""Legacy message sets, magic 0 (Kafka 0.8-0.9) and magic 1 (0.10, KIP-32), incl. compressed wrappers.

    LogEntry => Offset:int64 MessageSize:int32 Message
    Message  => CRC:uint32 Magic:int8 Attributes:int8 [Timestamp:int64 (v1)] Key:int32-bytes Value:int32-bytes

Kafka: clients/.../record/LegacyRecord.java, AbstractLegacyRecordBatch.java; kafka-formats.md 1.6.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from kcli.errors import CorruptRecordError, UnsupportedCodecError
from kcli.records.compression import Codec, compress, decompress
from kcli.records.crc import crc32
from kcli.records.layout import (
    LEGACY_CRC_FIELD,
    LEGACY_LENGTH,
    LEGACY_LOG_ENTRY,
    LEGACY_LOG_OVERHEAD,
    LEGACY_MAGIC_OFFSET,
    LEGACY_TIMESTAMP_FIELD,
    MESSAGE_V0,
    MESSAGE_V1,
    RECORD_OVERHEAD,
)
from kcli.records.types import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Record,
    TimestampType,
)

LOG_ENTRY = LEGACY_LOG_ENTRY  # offset, message size (kcli.records.layout declares the layouts)
INT32 = LEGACY_LENGTH
LOG_OVERHEAD = LEGACY_LOG_OVERHEAD
__all__ = ["MESSAGE_V0", "MESSAGE_V1", "RECORD_OVERHEAD", "LegacyMessage", "build_legacy_messages", "encode_message"]
ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08  # magic 1 only


class LegacyMessage:
    """One shallow magic 0/1 message (possibly a compressed wrapper) over its own bytes.

    The batch-level view Kafka gives it: ``last_offset`` is the entry offset; for a wrapper,
    ``base_offset`` is the first inner message's absolute offset.
    """

    __slots__ = ("raw", "position", "offset", "crc", "magic", "attributes", "timestamp", "key", "value", "_valid", "_inner")

    producer_id = NO_PRODUCER_ID
    producer_epoch = NO_PRODUCER_EPOCH
    base_sequence = NO_SEQUENCE
    last_sequence = NO_SEQUENCE
    partition_leader_epoch = NO_PARTITION_LEADER_EPOCH
    is_transactional = False
    is_control = False
    delete_horizon_ms = None
    has_delete_horizon = False

    def __init__(self, raw: bytes, position: int = 0) -> None:
        self.raw = raw
        self.position = position
        self._valid: bool | None = None
        self._inner: list[Record] | None = None
        (self.offset, _size) = LOG_ENTRY.unpack_from(raw)
        if len(raw) < LOG_OVERHEAD + MESSAGE_V0.size:
            raise CorruptRecordError(f"message of {len(raw)} bytes is too short for a magic 0/1 header", position=position)
        self.crc, self.magic, self.attributes = MESSAGE_V0.unpack_from(raw, LOG_OVERHEAD)
        pos = LOG_OVERHEAD + MESSAGE_V0.size
        self.timestamp = NO_TIMESTAMP
        self.key: bytes | None = None
        self.value: bytes | None = None
        try:
            if self.magic >= 1:
                (self.timestamp,) = LEGACY_TIMESTAMP_FIELD.unpack_from(raw, pos)
                pos += LEGACY_TIMESTAMP_FIELD.size
            self.key, pos = _read_bytes(raw, pos)
            self.value, pos = _read_bytes(raw, pos)
        except (struct.error, CorruptRecordError):
            self._valid = False  # the CRC check reports it; fields stay partial
            return
        if pos != len(raw):
            self._valid = False

    # -- batch-level view ------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def codec(self) -> Codec:
        return Codec.from_id(self.attributes & ATTR_CODEC_MASK)

    @property
    def codec_id(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        return TimestampType.LOG_APPEND_TIME if self.attributes & ATTR_TIMESTAMP_TYPE else TimestampType.CREATE_TIME

    @property
    def max_timestamp(self) -> int:
        return self.timestamp

    @property
    def last_offset(self) -> int:
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        if self.attributes & ATTR_CODEC_MASK == 0:
            return self.offset
        inner = self.records()
        return inner[0].offset if inner else self.offset

    @property
    def count(self) -> int | None:
        """Kafka's ``countOrNull`` is null for legacy batches."""
        return None

    def compute_crc(self) -> int:
        return crc32(self.raw[LEGACY_MAGIC_OFFSET:])

    @property
    def is_valid(self) -> bool:
        if self._valid is None:
            self._valid = len(self.raw) - LOG_OVERHEAD >= RECORD_OVERHEAD[0] and self.crc == self.compute_crc()
        return self._valid

    def invalid_reason(self) -> str | None:
        size = len(self.raw) - LOG_OVERHEAD
        if size < RECORD_OVERHEAD[0]:
            return f"Record is corrupt (the size {size} is smaller than the minimum record overhead {RECORD_OVERHEAD[0]})"
        computed = self.compute_crc()
        if computed != self.crc:
            return f"Record is corrupt (stored crc = {self.crc}, computed crc = {computed})"
        if not self.is_valid:
            return "Found invalid record structure: key and value lengths do not match the message size"
        return None

    def ensure_valid(self) -> None:
        reason = self.invalid_reason()
        if reason is not None:
            raise CorruptRecordError(reason, position=self.position, base_offset=self.offset)

    # -- records ---------------------------------------------------------------------------
    def __iter__(self):
        return iter(self.records())

    def records(self, *, strict: bool = False) -> list[Record]:
        """Deep iteration: the message itself, or the inner messages of a compressed wrapper."""
        if self._inner is None:
            try:
                self._inner = self._deep_records()
            except CorruptRecordError as exc:
                exc.base_offset = self.offset
                raise exc.at(position=self.position) from None
        return self._inner

    def _deep_records(self) -> list[Record]:
        codec_id = self.attributes & ATTR_CODEC_MASK
        if codec_id == 0:
            return [Record(self.offset, self.timestamp, self.key, self.value, (), NO_SEQUENCE, self.crc, self.is_valid)]
        if self.value is None:
            raise CorruptRecordError("Found invalid compressed record set with null value")
        try:
            data = decompress(Codec.from_id(codec_id), self.value, magic=self.magic)
        except UnsupportedCodecError as exc:
            raise CorruptRecordError(exc.reason) from None
        inner = [LegacyMessage(data[p : p + n], p) for p, n in _split_entries(data)]
        if not inner:
            raise CorruptRecordError("Found invalid compressed record set with no inner records")
        for message in inner:
            if message.attributes & ATTR_CODEC_MASK:
                raise CorruptRecordError("Compressed message has a compressed inner message: Inner messages must not be compressed")
        base = -1
        if self.magic >= 1:
            # v1 inner offsets are relative; the wrapper holds the absolute offset of the last one.
            last_inner = inner[-1].offset
            if self.offset == 0:  # some librdkafka versions leave the wrapper offset 0
                base = 0
            elif self.offset < last_inner:
                raise CorruptRecordError(
                    f"Found invalid wrapper offset in compressed v1 message set, wrapper offset '{self.offset}' is less "
                    f"than the last inner message offset '{last_inner}' and it is not zero."
                )
            else:
                base = self.offset - last_inner
        log_append = self.magic >= 1 and self.attributes & ATTR_TIMESTAMP_TYPE
        out = []
        for message in inner:
            offset = base + message.offset if base >= 0 else message.offset
            timestamp = self.timestamp if log_append else (message.timestamp if self.magic >= 1 else NO_TIMESTAMP)
            out.append(Record(offset, timestamp, message.key, message.value, (), NO_SEQUENCE, message.crc, message.is_valid))
        return out

    def __repr__(self) -> str:
        return f"LegacyMessage(offset={self.offset}, magic={self.magic}, position={self.position}, size={self.size})"


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    (n,) = INT32.unpack_from(buf, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise CorruptRecordError("message key/value runs past the message end")
    return buf[pos : pos + n], pos + n


def _split_entries(data: bytes):
    pos = 0
    end = len(data)
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            raise CorruptRecordError("truncated inner message header in compressed wrapper", position=pos)
        _offset, size = LOG_ENTRY.unpack_from(data, pos)
        if size < RECORD_OVERHEAD[0] or pos + LOG_OVERHEAD + size > end:
            raise CorruptRecordError(f"inner message of size {size} does not fit the compressed wrapper", position=pos)
        yield pos, LOG_OVERHEAD + size
        pos += LOG_OVERHEAD + size


def encode_message(offset: int, magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None) -> bytes:
    """One log entry (offset, size, message) with its CRC-32."""
    header = MESSAGE_V1 if magic >= 1 else MESSAGE_V0
    body = bytearray(header.pack(0, magic, attributes, timestamp) if magic >= 1 else header.pack(0, magic, attributes))
    for blob in (key, value):
        if blob is None:
            body += INT32.pack(-1)
        else:
            body += INT32.pack(len(blob))
            body += blob
    # The CRC-32 covers magic..end: everything after the CRC field.
    crc_size = LEGACY_CRC_FIELD.size
    LEGACY_CRC_FIELD.pack_into(body, 0, crc32(memoryview(body)[crc_size:]))
    return LOG_ENTRY.pack(offset, len(body)) + bytes(body)


def build_legacy_messages(
    records: Iterable[Record],
    *,
    magic: int,
    codec: Codec | int = Codec.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    wrapper_offset: int | None = None,
) -> bytes:
    """Write records as magic 0/1 messages: one entry each, or one compressed wrapper.

    In a wrapper, v0 inner offsets are absolute and v1 inner offsets relative (KIP-31); the wrapper's
    offset is the last inner offset unless ``wrapper_offset`` overrides it (0: the librdkafka quirk).
    """
    if magic not in (0, 1):
        raise ValueError("legacy messages are magic 0 or 1")
    records = list(records)
    codec = Codec(int(codec))
    ts_attr = ATTR_TIMESTAMP_TYPE if (magic == 1 and timestamp_type == TimestampType.LOG_APPEND_TIME) else 0
    if codec == Codec.NONE:
        return b"".join(
            encode_message(r.offset, magic, ts_attr, r.timestamp if magic else NO_TIMESTAMP, r.key, r.value) for r in records
        )
    if not records:
        raise ValueError("a compressed wrapper needs at least one record")
    first = records[0].offset
    inner = b"".join(
        encode_message(r.offset if magic == 0 else r.offset - first, magic, 0, r.timestamp if magic else NO_TIMESTAMP, r.key, r.value)
        for r in records
    )
    outer_ts = max(r.timestamp for r in records) if magic else NO_TIMESTAMP
    outer_offset = records[-1].offset if wrapper_offset is None else wrapper_offset
    return encode_message(outer_offset, magic, int(codec) | ts_attr, outer_ts, None, compress(codec, inner, magic=magic))

