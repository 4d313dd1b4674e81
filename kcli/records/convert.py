"""Magic conversion for the protocol versions that predate record batches v2 (pure: bytes in, bytes out).

* ``upconvert_to_v2``: a Produce v0-v2 message set (magic 0/1 messages, compressed wrappers included) to
  the one v2 batch Kafka's ``LogValidator`` appends in its place (``convertAndAssignOffsetsNonCompressed``
  and ``buildRecordsAndAssignOffsets``).
* ``downconvert``: stored v2 batches to a magic 0/1 message set for Fetch v0-v3, as ``RecordsUtil.downConvert``
  (behind ``LazyDownConversionRecords``) writes it; Fetch v0/v1 want magic 0, v2/v3 magic 1.

Magic 0/1 offsets: uncompressed messages and magic 0 inner messages carry absolute offsets; magic 1 inner
messages carry offsets relative to the first one, and the wrapper holds the absolute offset of the last
(KIP-31; ``kcli.records.legacy`` reads both).

Kafka: clients/.../record/RecordsUtil.java, MemoryRecordsBuilder.java, LegacyRecord.java;
storage/.../internals/log/LogValidator.java.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kcli.errors import CorruptRecordError, UnsupportedCompressionTypeError
from kcli.records.batch import MAGIC_V2, build_record_batch
from kcli.records.compression import Codec, compress
from kcli.records.legacy import ATTR_TIMESTAMP_TYPE, encode_message
from kcli.records.record_set import Batch, BatchReader
from kcli.records.types import NO_PARTITION_LEADER_EPOCH, NO_TIMESTAMP, Record, TimestampType

__all__ = ["DOWNCONVERT_MAGICS", "downconvert", "encode_legacy_batch", "upconvert_records", "upconvert_to_v2"]

DOWNCONVERT_MAGICS = (0, 1)


def _complete_batches(buf: bytes) -> list[Batch]:
    """The whole batches of ``buf``; a partial tail is left out (as FileRecords' batch iterator and
    the produce path's ``trimInvalidBytes`` leave it out)."""
    return list(BatchReader(buf))


# -- up-conversion --------------------------------------------------------------------------------------
def upconvert_to_v2(
    message_set: bytes,
    *,
    base_offset: int = 0,
    codec: Codec | int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time_ms: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """One v2 batch holding every record of a magic 0/1 message set, offsets from ``base_offset`` on
    (0: relative, for the log to stamp), as Kafka's LogValidator converts a Produce v0-v2 request.

    Keys, values and timestamps are kept; magic 0 messages have none (``NO_TIMESTAMP``, -1), and the inner
    messages of a magic 1 LogAppendTime wrapper read as the wrapper's. ``codec`` is the topic's
    ``compression.type``; None means ``producer``: the codec of the last compressed wrapper (Kafka's
    ``sourceCompression``), else none. ``timestamp_type`` is the topic's ``message.timestamp.type``;
    LogAppendTime needs ``log_append_time_ms`` (the batch's max timestamp becomes it). Producer id, epoch,
    sequence and the transactional flag are the first batch's (none for magic 0/1).

    A set whose batches are all magic 2 already is returned unchanged. Raises CorruptRecordError for a
    message whose CRC or structure is bad (Kafka answers CORRUPT_MESSAGE), UnsupportedCodecError for a
    codec a magic 0/1 message cannot hold, and ValueError for an empty set.
    """
    batches = _complete_batches(message_set)
    if not batches:
        raise ValueError("nothing to convert: the message set holds no complete message")
    if all(batch.magic >= MAGIC_V2 for batch in batches):
        return bytes(message_set)
    if timestamp_type == TimestampType.LOG_APPEND_TIME and log_append_time_ms is None:
        raise ValueError("LogAppendTime needs log_append_time_ms")
    source = Codec.NONE
    records: list[Record] = []
    for batch in batches:
        batch.ensure_valid()
        if batch.codec_id:
            source = batch.codec
        for record in batch.records():
            if not record.valid:  # an inner message of a wrapper (LogValidator's record.ensureValid())
                raise CorruptRecordError(f"Record is corrupt (stored crc = {record.crc})", position=batch.position,
                                         base_offset=record.offset)
            records.append(record)
    first = batches[0]
    return upconvert_records(records, source_codec=source, base_offset=base_offset, codec=codec,
                             timestamp_type=timestamp_type, log_append_time_ms=log_append_time_ms,
                             partition_leader_epoch=partition_leader_epoch, producer_id=first.producer_id,
                             producer_epoch=first.producer_epoch, base_sequence=first.base_sequence,
                             is_transactional=first.is_transactional)


def upconvert_records(
    records: Sequence[Record],
    *,
    source_codec: Codec | int = Codec.NONE,
    base_offset: int = 0,
    codec: Codec | int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time_ms: int | None = None,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
) -> bytes:
    """The v2 batch of ``upconvert_to_v2`` from records already read and checked (the produce validator
    reads a message set once): offsets renumbered from ``base_offset``, ``codec`` None keeps
    ``source_codec`` (compression.type=producer)."""
    if timestamp_type == TimestampType.LOG_APPEND_TIME and log_append_time_ms is None:
        raise ValueError("LogAppendTime needs log_append_time_ms")
    target = Codec(int(source_codec)) if codec is None else Codec(int(codec))
    renumbered = [Record(base_offset + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)]
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        max_timestamp = log_append_time_ms
    else:
        max_timestamp = max(NO_TIMESTAMP, *(r.timestamp for r in renumbered))
    return build_record_batch(
        renumbered,
        base_offset=base_offset,
        codec=target,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        partition_leader_epoch=partition_leader_epoch,
        max_timestamp=max_timestamp,
    )


# -- down-conversion ------------------------------------------------------------------------------------
def downconvert(batches: bytes, to_magic: int, first_offset: int) -> bytes:
    """A magic 0/1 message set of ``batches`` (stored log bytes), as ``RecordsUtil.downConvert`` writes it.

    * control batches are skipped; a zstd batch raises UnsupportedCompressionTypeError (Kafka answers
      UNSUPPORTED_COMPRESSION_TYPE: zstd needs Fetch v10);
    * batches already at or below ``to_magic`` are copied as they are;
    * an uncompressed batch becomes one message per record, and loses its records below ``first_offset``
      (v0/v1 cannot start mid-batch; librdkafka relies on it). A compressed batch becomes one wrapper of the
      same codec and keeps them all, as Kafka does (clients skip them);
    * headers, producer ids, sequences and leader epochs are dropped; timestamps are kept for magic 1
      (LogAppendTime batches: the batch's max timestamp), dropped for magic 0;
    * offsets are absolute (magic 1 wrappers: inner offsets relative to the first, wrapper = last).

    A partial batch at the end is left out. Raises ValueError for a ``to_magic`` other than 0 or 1.
    """
    if to_magic not in DOWNCONVERT_MAGICS:
        raise ValueError(f"down-conversion is to magic 0 or 1, not {to_magic}")
    out = []
    for batch in _complete_batches(batches):
        if batch.is_control:
            continue
        if batch.codec_id == Codec.ZSTD:
            raise UnsupportedCompressionTypeError("Down-conversion of zstandard-compressed batches is not supported",
                                                  position=batch.position, base_offset=batch.base_offset)
        if batch.magic <= to_magic:
            out.append(bytes(batch.raw))
            continue
        compressed = batch.codec_id != Codec.NONE
        records = [r for r in batch.records() if compressed or r.offset >= first_offset]
        if not records:
            continue
        log_append_time = batch.max_timestamp if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else None
        out.append(encode_legacy_batch(records, magic=to_magic, codec=batch.codec_id, log_append_time_ms=log_append_time))
    return b"".join(out)


def encode_legacy_batch(
    records: Iterable[Record], *, magic: int, codec: Codec | int = Codec.NONE, log_append_time_ms: int | None = None
) -> bytes:
    """Records (absolute offsets) as Kafka's MemoryRecordsBuilder writes them in magic 0/1: one message each,
    or one compressed wrapper. ``log_append_time_ms`` set: LogAppendTime, the timestamp of every message
    (magic 1; the timestamp type bit is set on the wrapper and on each inner message, as
    ``LegacyRecord.computeAttributes`` does). Otherwise CreateTime, a wrapper's timestamp the largest inner one.
    """
    if magic not in DOWNCONVERT_MAGICS:
        raise ValueError("legacy messages are magic 0 or 1")
    records = list(records)
    codec = Codec(int(codec))
    if codec == Codec.ZSTD:
        raise UnsupportedCompressionTypeError("zstd is not allowed in magic 0/1 messages")
    log_append = magic >= 1 and log_append_time_ms is not None
    attributes = ATTR_TIMESTAMP_TYPE if log_append else 0

    def timestamp(record: Record) -> int:
        if magic == 0:
            return NO_TIMESTAMP
        return log_append_time_ms if log_append else record.timestamp

    if codec == Codec.NONE:
        return b"".join(encode_message(r.offset, magic, attributes, timestamp(r), r.key, r.value) for r in records)
    if not records:
        raise ValueError("a compressed wrapper needs at least one record")
    first = records[0].offset
    inner = b"".join(
        encode_message(r.offset if magic == 0 else r.offset - first, magic, attributes, timestamp(r), r.key, r.value)
        for r in records
    )
    if magic == 0:
        wrapper_timestamp = NO_TIMESTAMP
    elif log_append:
        wrapper_timestamp = log_append_time_ms
    else:
        wrapper_timestamp = max(NO_TIMESTAMP, *(r.timestamp for r in records))
    return encode_message(records[-1].offset, magic, int(codec) | attributes, wrapper_timestamp, None,
                          compress(codec, inner, magic=magic))

