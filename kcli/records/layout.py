"""The byte layouts of a log entry's header, declared once: every struct format, field offset and size
that readers and writers use is derived here from a field table (kafka-python's ``default_records.py``
derives ``CRC_OFFSET = struct.calcsize(">qiib")`` the same way).

    RecordBatch (magic 2)  => BaseOffset:int64 BatchLength:int32 PartitionLeaderEpoch:int32 Magic:int8 CRC:uint32
                              Attributes:int16 LastOffsetDelta:int32 BaseTimestamp:int64 MaxTimestamp:int64
                              ProducerId:int64 ProducerEpoch:int16 BaseSequence:int32 RecordsCount:int32 Records
    LogEntry (magic 0/1)   => Offset:int64 MessageSize:int32 CRC:uint32 Magic:int8 Attributes:int8
                              [Timestamp:int64 (magic 1)] Key:int32-bytes Value:int32-bytes

Every magic starts with the same log overhead (offset int64, size int32: what FileLogInputStream frames
on), and keeps the magic byte at the same position (16), so a reader can dispatch before it knows the
format. The v2 CRC (CRC-32C) covers attributes..end: base offset, length and leader epoch are outside it,
which is why the leader may stamp them (``stamp_base_offset``, ``stamp_leader_epoch``). The magic 0/1 CRC
(CRC-32) covers magic..end.

Kafka: clients/.../record/DefaultRecordBatch.java, LegacyRecord.java, Records.java; kafka-formats.md 1.1-1.6.
Pure: no I/O, only ``struct``.
"""

from __future__ import annotations

import struct
from collections import namedtuple
from typing import Final

BYTE_ORDER: Final = ">"

# -- the declarations -------------------------------------------------------------------------------------
# (field name, struct code), in wire order.
BATCH_V2_FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("base_offset", "q"),
    ("batch_length", "i"),  # bytes after this field
    ("partition_leader_epoch", "i"),  # not covered by the CRC: the leader rewrites it
    ("magic", "b"),
    ("crc", "I"),  # CRC-32C of attributes..end
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),  # the delete horizon when ATTR_DELETE_HORIZON is set (KIP-534)
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("records_count", "i"),
)

# Magic 0/1: the log entry (offset, size) then the message header; ``timestamp`` exists in magic 1 only.
# The magic is read unsigned here (as LegacyRecord's ``magic()`` byte is compared, never sign-extended).
LEGACY_FIELDS: Final[tuple[tuple[str, str], ...]] = (
    ("offset", "q"),
    ("message_size", "i"),  # bytes after this field
    ("crc", "I"),  # CRC-32 of magic..end
    ("magic", "B"),
    ("attributes", "b"),
    ("timestamp", "q"),  # magic 1 only
)
LEGACY_LENGTH_FIELD: Final = "i"  # key and value are int32-length-prefixed bytes (-1: null)


def _codes(fields: tuple[tuple[str, str], ...]) -> str:
    return "".join(code for _name, code in fields)


def _offsets(fields: tuple[tuple[str, str], ...]) -> dict[str, int]:
    """Each field's offset: the size of the fields before it."""
    return {name: struct.calcsize(BYTE_ORDER + _codes(fields[:i])) for i, (name, _code) in enumerate(fields)}


def _through(fields: tuple[tuple[str, str], ...], name: str) -> tuple[tuple[str, str], ...]:
    """The fields from the first up to and including ``name``."""
    return fields[: [n for n, _code in fields].index(name) + 1]


def _field(fields: tuple[tuple[str, str], ...], name: str) -> struct.Struct:
    return struct.Struct(BYTE_ORDER + dict(fields)[name])


# -- magic 2: derived -------------------------------------------------------------------------------------
BATCH_V2_FORMAT: Final = BYTE_ORDER + _codes(BATCH_V2_FIELDS)
BATCH_HEADER: Final = struct.Struct(BATCH_V2_FORMAT)
BATCH_V2_OFFSETS: Final = _offsets(BATCH_V2_FIELDS)

RECORD_BATCH_OVERHEAD: Final = BATCH_HEADER.size  # 61: a v2 batch with no records
BASE_OFFSET_OFFSET: Final = BATCH_V2_OFFSETS["base_offset"]  # 0
BATCH_LENGTH_OFFSET: Final = BATCH_V2_OFFSETS["batch_length"]  # 8
PARTITION_LEADER_EPOCH_OFFSET: Final = BATCH_V2_OFFSETS["partition_leader_epoch"]  # 12
MAGIC_OFFSET: Final = BATCH_V2_OFFSETS["magic"]  # 16
CRC_OFFSET: Final = BATCH_V2_OFFSETS["crc"]  # 17
ATTRIBUTES_OFFSET: Final = BATCH_V2_OFFSETS["attributes"]  # 21: the CRC covers [21, end)
LAST_OFFSET_DELTA_OFFSET: Final = BATCH_V2_OFFSETS["last_offset_delta"]  # 23
BASE_TIMESTAMP_OFFSET: Final = BATCH_V2_OFFSETS["base_timestamp"]  # 27
MAX_TIMESTAMP_OFFSET: Final = BATCH_V2_OFFSETS["max_timestamp"]  # 35
PRODUCER_ID_OFFSET: Final = BATCH_V2_OFFSETS["producer_id"]  # 43
PRODUCER_EPOCH_OFFSET: Final = BATCH_V2_OFFSETS["producer_epoch"]  # 51
BASE_SEQUENCE_OFFSET: Final = BATCH_V2_OFFSETS["base_sequence"]  # 53
RECORDS_COUNT_OFFSET: Final = BATCH_V2_OFFSETS["records_count"]  # 57
CRC_COVERED_FROM: Final = ATTRIBUTES_OFFSET
# The codec bits are the low bits of the big-endian attributes field: its last byte.
ATTRIBUTES_LOW_BYTE: Final = ATTRIBUTES_OFFSET + struct.calcsize(BYTE_ORDER + dict(BATCH_V2_FIELDS)["attributes"]) - 1  # 22

# Common to every magic: the log overhead FileLogInputStream frames on, and the magic byte's position.
LOG_OVERHEAD_FORMAT: Final = BYTE_ORDER + _codes(_through(BATCH_V2_FIELDS, "batch_length"))
LOG_OVERHEAD_STRUCT: Final = struct.Struct(LOG_OVERHEAD_FORMAT)
LOG_OVERHEAD: Final = LOG_OVERHEAD_STRUCT.size  # 12
HEADER_SIZE_UP_TO_MAGIC: Final = MAGIC_OFFSET + 1  # 17: enough to frame and dispatch on the magic

BASE_OFFSET_FIELD: Final = _field(BATCH_V2_FIELDS, "base_offset")
BATCH_LENGTH_FIELD: Final = _field(BATCH_V2_FIELDS, "batch_length")
PARTITION_LEADER_EPOCH_FIELD: Final = _field(BATCH_V2_FIELDS, "partition_leader_epoch")
CRC_FIELD: Final = _field(BATCH_V2_FIELDS, "crc")
LAST_OFFSET_DELTA_FIELD: Final = _field(BATCH_V2_FIELDS, "last_offset_delta")
RECORDS_COUNT_FIELD: Final = _field(BATCH_V2_FIELDS, "records_count")

# Bytes that hold everything up to and including last_offset_delta: what a reader peeks to learn a v2
# batch's offset range without reading the batch.
HEADER_SIZE_UP_TO_LAST_OFFSET_DELTA: Final = LAST_OFFSET_DELTA_OFFSET + LAST_OFFSET_DELTA_FIELD.size  # 27
# base_offset, batch_length, partition_leader_epoch, magic, crc, attributes, last_offset_delta: a batch's
# offset range in one unpack (the fetch path's hot loop).
HEAD_THROUGH_LAST_OFFSET_DELTA: Final = struct.Struct(BYTE_ORDER + _codes(_through(BATCH_V2_FIELDS, "last_offset_delta")))
PEEK_FORMAT: Final = BYTE_ORDER + _codes(_through(BATCH_V2_FIELDS, "magic"))
PEEK_HEAD: Final = struct.Struct(PEEK_FORMAT)  # base_offset, batch_length, partition_leader_epoch, magic

BatchHeader = namedtuple("BatchHeader", [name for name, _code in BATCH_V2_FIELDS])  # type: ignore[misc]
BatchHeader.__doc__ = "The 13 header fields of a v2 batch, by name (``read_header``)."

# -- magic 0/1: derived -----------------------------------------------------------------------------------
LEGACY_OFFSETS: Final = _offsets(LEGACY_FIELDS)
LEGACY_LOG_ENTRY: Final = struct.Struct(BYTE_ORDER + _codes(_through(LEGACY_FIELDS, "message_size")))  # offset, message size
LEGACY_LOG_OVERHEAD: Final = LEGACY_LOG_ENTRY.size  # 12, the same as LOG_OVERHEAD
LEGACY_CRC_OFFSET: Final = LEGACY_OFFSETS["crc"]  # 12
LEGACY_MAGIC_OFFSET: Final = LEGACY_OFFSETS["magic"]  # 16, the same as MAGIC_OFFSET
LEGACY_ATTRIBUTES_OFFSET: Final = LEGACY_OFFSETS["attributes"]  # 17
LEGACY_TIMESTAMP_OFFSET: Final = LEGACY_OFFSETS["timestamp"]  # 18 (magic 1)
# The message header after the log entry: crc, magic, attributes (magic 0) and the timestamp (magic 1).
_LEGACY_MESSAGE = LEGACY_FIELDS[len(_through(LEGACY_FIELDS, "message_size")) :]
MESSAGE_V0: Final = struct.Struct(BYTE_ORDER + _codes(_through(_LEGACY_MESSAGE, "attributes")))
MESSAGE_V1: Final = struct.Struct(BYTE_ORDER + _codes(_through(_LEGACY_MESSAGE, "timestamp")))
LEGACY_CRC_FIELD: Final = _field(LEGACY_FIELDS, "crc")
LEGACY_TIMESTAMP_FIELD: Final = _field(LEGACY_FIELDS, "timestamp")
LEGACY_LENGTH: Final = struct.Struct(BYTE_ORDER + LEGACY_LENGTH_FIELD)
# The CRC-32 covers magic..end: the message minus its CRC field.
LEGACY_CRC_COVERED_FROM: Final = LEGACY_MAGIC_OFFSET
# LegacyRecord.RECORD_OVERHEAD_V0/V1: crc + magic + attributes (+ timestamp) + key length + value length.
RECORD_OVERHEAD_V0: Final = MESSAGE_V0.size + 2 * LEGACY_LENGTH.size  # 14
RECORD_OVERHEAD_V1: Final = MESSAGE_V1.size + 2 * LEGACY_LENGTH.size  # 22
RECORD_OVERHEAD: Final = {0: RECORD_OVERHEAD_V0, 1: RECORD_OVERHEAD_V1}
MIN_RECORD_OVERHEAD: Final = RECORD_OVERHEAD_V0  # the smallest valid unit of any magic (a size below it is corrupt)


# -- Kafka 0.7: derived -----------------------------------------------------------------------------------
# Kafka 0.7 (kafka/message/Message.scala, FileMessageSet.scala) has no per-message offset: a message's offset is
# its byte position in the partition's log, and each entry is ``MessageSize:int32 Message``. The CRC-32 covers
# the payload only (not the magic or attributes, a known 0.7 weakness), and magic 0 has no attributes byte.
#     Entry (0.7)            => MessageSize:int32 Magic:int8 [Attributes:int8 (magic 1)] CRC:uint32 Payload
KAFKA07_MESSAGE_FIELDS: Final[dict[int, tuple[tuple[str, str], ...]]] = {
    0: (("magic", "B"), ("crc", "I")),
    1: (("magic", "B"), ("attributes", "B"), ("crc", "I")),  # attributes: codec in bits 0-1
}
KAFKA07_SIZE_FIELD: Final = "i"  # the message's size: the bytes after this field
KAFKA07_SIZE: Final = struct.Struct(BYTE_ORDER + KAFKA07_SIZE_FIELD)
KAFKA07_ENTRY_OVERHEAD: Final = KAFKA07_SIZE.size  # 4: the next offset is offset + 4 + message size
KAFKA07_MESSAGE_HEADER: Final = {magic: struct.Struct(BYTE_ORDER + _codes(fields))
                                 for magic, fields in KAFKA07_MESSAGE_FIELDS.items()}
KAFKA07_MAGIC: Final = struct.Struct(BYTE_ORDER + dict(KAFKA07_MESSAGE_FIELDS[0])["magic"])
# Message.MinHeaderSize (magic 0's header): a size field below it ends a message set (FileMessageSet's iterator).
KAFKA07_MIN_HEADER_SIZE: Final = KAFKA07_MESSAGE_HEADER[0].size  # 5
KAFKA07_CODEC_MASK: Final = 0x03  # Message.CompressionCodeMask

# -- helpers ----------------------------------------------------------------------------------------------
def read_header(buf, pos: int = 0) -> BatchHeader:
    """The v2 header at ``buf[pos:]`` (bytes, bytearray, memoryview or mmap), fields by name."""
    return BatchHeader._make(BATCH_HEADER.unpack_from(buf, pos))


def read_log_overhead(buf, pos: int = 0) -> tuple[int, int]:
    """(offset, size) of the entry at ``pos``: any magic; the entry is ``LOG_OVERHEAD + size`` bytes."""
    return LOG_OVERHEAD_STRUCT.unpack_from(buf, pos)


def read_batch_length(buf, pos: int = 0) -> int:
    """The size field (bytes after it) of the entry at ``pos``: any magic."""
    return BATCH_LENGTH_FIELD.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)[0]


def entry_size(buf, pos: int = 0) -> int:
    """The whole entry's size, log overhead included, as its header declares it."""
    return LOG_OVERHEAD + BATCH_LENGTH_FIELD.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)[0]


def read_last_offset_delta(buf, pos: int = 0) -> int:
    return LAST_OFFSET_DELTA_FIELD.unpack_from(buf, pos + LAST_OFFSET_DELTA_OFFSET)[0]


def read_records_count(buf, pos: int = 0) -> int:
    return RECORDS_COUNT_FIELD.unpack_from(buf, pos + RECORDS_COUNT_OFFSET)[0]


def stamp_base_offset(buf: bytearray | memoryview, pos: int, offset: int) -> None:
    """Write a batch's (or legacy entry's) base offset in place; outside the CRC."""
    BASE_OFFSET_FIELD.pack_into(buf, pos + BASE_OFFSET_OFFSET, offset)


def stamp_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Write a v2 batch's partition leader epoch in place; outside the CRC."""
    PARTITION_LEADER_EPOCH_FIELD.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def stamp_crc(buf: bytearray | memoryview, pos: int, crc: int) -> None:
    """Write a v2 batch's CRC field in place (the CRC-32C of ``buf[pos + CRC_COVERED_FROM : end]``)."""
    CRC_FIELD.pack_into(buf, pos + CRC_OFFSET, crc)
