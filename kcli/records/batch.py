"""Record batch v2 (magic 2, KIP-98): header, attributes, records; reader and builder.

    RecordBatch => BaseOffset:int64 BatchLength:int32 PartitionLeaderEpoch:int32 Magic:int8 CRC:uint32
                   Attributes:int16 LastOffsetDelta:int32 BaseTimestamp:int64 MaxTimestamp:int64
                   ProducerId:int64 ProducerEpoch:int16 BaseSequence:int32 RecordsCount:int32 Records
    Record => Length:varint Attributes:int8 TimestampDelta:varlong OffsetDelta:varint
              Key:varint-bytes Value:varint-bytes Headers:[varint-string varint-bytes]

Kafka: clients/.../record/DefaultRecordBatch.java, DefaultRecord.java; shared/docs/kafka-formats.md 1.2-1.5.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from kcli.errors import CorruptRecordError
from kcli.records import accel
from kcli.records.compression import KAFKA_GZIP_LEVEL, Codec, compress, decompress
from kcli.records.control import ControlRecordType, parse_control_type
from kcli.records.crc import crc32c
from kcli.records.layout import (  # CRC_FIELD, CRC_OFFSET: re-exported for callers that know them from here
    ATTRIBUTES_OFFSET,
    BATCH_V2_FIELDS,
    BATCH_V2_OFFSETS,
    BATCH_HEADER,
    CRC_FIELD,  # noqa: F401
    CRC_OFFSET,  # noqa: F401
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    stamp_crc,
    stamp_leader_epoch,
)
from kcli.records.types import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    Header,
    Record,
    TimestampType,
    increment_sequence,
)
from kcli.records.varint import VARINT_MAX_BYTES, decode_varint, encode_varint

MAGIC_V2 = 2
HEADER = BATCH_HEADER  # the 61-byte header (kcli.records.layout declares it)
FIELD_OFFSETS: dict[str, int] = dict(BATCH_V2_OFFSETS)
FIELD_STRUCTS: dict[str, struct.Struct] = {name: struct.Struct(">" + code) for name, code in BATCH_V2_FIELDS}

ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40  # KIP-534: base_timestamp holds the delete horizon


class RecordBatch:
    """One v2 batch over its own bytes (``raw`` = the whole batch, 12-byte log overhead included).

    Header fields are parsed eagerly (one struct unpack); records are decoded on demand.
    """

    __slots__ = (
        "raw",
        "position",
        "base_offset",
        "batch_length",
        "partition_leader_epoch",
        "magic",
        "crc",
        "attributes",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records_count",
        "_valid",
    )

    def __init__(self, raw: bytes, position: int = 0) -> None:
        self.raw = raw
        self.position = position
        header = raw if len(raw) >= RECORD_BATCH_OVERHEAD else raw.ljust(RECORD_BATCH_OVERHEAD, b"\0")
        (
            self.base_offset,
            self.batch_length,
            self.partition_leader_epoch,
            self.magic,
            self.crc,
            self.attributes,
            self.last_offset_delta,
            self.base_timestamp,
            self.max_timestamp,
            self.producer_id,
            self.producer_epoch,
            self.base_sequence,
            self.records_count,
        ) = HEADER.unpack_from(header)
        self._valid: bool | None = None

    # -- derived header views -------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self.raw)

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def count(self) -> int:
        return self.records_count

    @property
    def codec(self) -> Codec:
        return Codec.from_id(self.attributes & ATTR_CODEC_MASK)

    @property
    def codec_id(self) -> int:
        return self.attributes & ATTR_CODEC_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & ATTR_TIMESTAMP_TYPE else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def delete_horizon_ms(self) -> int | None:
        return self.base_timestamp if self.attributes & ATTR_DELETE_HORIZON else None

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    # -- validation ----------------------------------------------------------------------
    def compute_crc(self) -> int:
        return crc32c(memoryview(self.raw)[ATTRIBUTES_OFFSET:]) if len(self.raw) > ATTRIBUTES_OFFSET else 0

    @property
    def is_valid(self) -> bool:
        """Kafka's ``isValid``: size >= 61 and the stored CRC-32C matches."""
        if self._valid is None:
            self._valid = len(self.raw) >= RECORD_BATCH_OVERHEAD and self.crc == self.compute_crc()
        return self._valid

    def invalid_reason(self) -> str | None:
        """Kafka's ``ensureValid`` message, or None when the batch is valid."""
        if len(self.raw) < RECORD_BATCH_OVERHEAD:
            return (
                f"Record batch is corrupt (the size {len(self.raw)} is smaller than the minimum "
                f"allowed overhead {RECORD_BATCH_OVERHEAD})"
            )
        computed = self.compute_crc()
        if computed != self.crc:
            return f"Record is corrupt (stored crc = {self.crc}, computed crc = {computed})"
        return None

    def ensure_valid(self) -> None:
        reason = self.invalid_reason()
        if reason is not None:
            raise CorruptRecordError(reason, position=self.position, base_offset=self.base_offset)

    # -- records ---------------------------------------------------------------------------
    def payload(self) -> bytes:
        """The records area, decompressed."""
        data = self.raw[RECORD_BATCH_OVERHEAD:]
        codec_id = self.attributes & ATTR_CODEC_MASK
        if codec_id == 0:
            return bytes(data)
        try:
            return decompress(Codec.from_id(codec_id), data, magic=MAGIC_V2)
        except CorruptRecordError as exc:
            raise exc.at(position=self.position) from None

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def records(self, *, strict: bool = False) -> list[Record]:
        """Decode every record; raises CorruptRecordError with Kafka's messages on bad structure.

        ``strict`` always uses the pure decoder, which also checks that nothing follows the last record.
        """
        count = self.records_count
        if count < 0:
            raise CorruptRecordError(
                f"Found invalid record count {count} in magic v2 batch", position=self.position, base_offset=self.base_offset
            )
        data = self.payload()
        if not strict:
            fast = accel.decode_records(self.raw[:RECORD_BATCH_OVERHEAD], data, self.base_offset, self.base_sequence)
            if fast is not None and len(fast) == count:
                return fast
        try:
            return _decode_records(self, data, count)
        except CorruptRecordError as exc:
            exc.base_offset = self.base_offset
            raise exc.at(position=self.position) from None
        except (IndexError, UnicodeDecodeError, struct.error):
            raise CorruptRecordError(
                "Found invalid record structure", position=self.position, base_offset=self.base_offset
            ) from None

    def key_entries(self, payload: bytes | None = None) -> list[tuple[int, bytes | None, bool]]:
        """(offset, key, is_tombstone) per record, decoded without building Records (the cleaner's hot path).

        ``payload``: the already decompressed records area, when the caller has it."""
        count = self.records_count
        if count >= 0:
            data = self.payload() if payload is None else payload
            fast = accel.decode_keys(self.raw[:RECORD_BATCH_OVERHEAD], data)
            if fast is not None and len(fast) == count:
                return fast
        return [(r.offset, r.key, r.value is None) for r in self.records()]

    def control_type(self, record: Record) -> ControlRecordType:
        return parse_control_type(record.key)

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, count={self.records_count}, "
            f"position={self.position}, size={self.size}, codec={self.codec_id})"
        )


def _decode_records(batch: RecordBatch, data: bytes, count: int) -> list[Record]:
    # Hot loop of deep iteration: locals only, one-byte varint fast paths inlined.
    base_offset = batch.base_offset
    base_ts = batch.base_timestamp
    log_append = batch.attributes & ATTR_TIMESTAMP_TYPE
    max_ts = batch.max_timestamp
    base_seq = batch.base_sequence
    dv = decode_varint
    out: list[Record] = []
    append = out.append
    pos = 0
    end = len(data)
    for _ in range(count):
        if pos >= end:
            raise CorruptRecordError("Incorrect declared batch size, premature EOF reached")
        b = data[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            length, pos = dv(data, pos, VARINT_MAX_BYTES)
        start = pos
        record_end = pos + length
        if length < 0 or record_end > end:
            raise CorruptRecordError("Incorrect declared batch size, premature EOF reached")
        pos += 1  # record attributes: unused
        ts_delta, pos = dv(data, pos)
        b = data[pos]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            offset_delta, pos = dv(data, pos, VARINT_MAX_BYTES)
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = dv(data, pos, VARINT_MAX_BYTES)
        if n < 0:
            key = None
        else:
            key = data[pos : pos + n]
            pos += n
        b = data[pos]
        if b < 0x80:
            n = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            n, pos = dv(data, pos, VARINT_MAX_BYTES)
        if n < 0:
            value = None
        else:
            value = data[pos : pos + n]
            pos += n
        hcount, pos = dv(data, pos, VARINT_MAX_BYTES)
        if hcount:
            if hcount < 0 or hcount > record_end - pos:
                raise CorruptRecordError(f"Found invalid number of record headers {hcount}")
            headers = []
            for _h in range(hcount):
                n, pos = dv(data, pos, VARINT_MAX_BYTES)
                if n < 0:
                    raise CorruptRecordError(f"Invalid negative header key size {n}")
                hkey = data[pos : pos + n].decode("utf-8", "surrogateescape")
                pos += n
                n, pos = dv(data, pos, VARINT_MAX_BYTES)
                if n < 0:
                    hval = None
                else:
                    hval = data[pos : pos + n]
                    pos += n
                headers.append(Header(hkey, hval))
            header_tuple: tuple[Header, ...] = tuple(headers)
        else:
            header_tuple = ()
        if pos != record_end:
            raise CorruptRecordError(
                f"Invalid record size: expected to read {length} bytes in record payload, but instead read {pos - start}"
            )
        append(
            Record(
                base_offset + offset_delta,
                max_ts if log_append else base_ts + ts_delta,
                key,
                value,
                header_tuple,
                NO_SEQUENCE if base_seq < 0 else increment_sequence(base_seq, offset_delta),
            )
        )
    if pos != end:
        raise CorruptRecordError("Incorrect declared batch size, records still remaining in file")
    return out


def encode_record(record: Record, offset_delta: int, timestamp_delta: int) -> bytes:
    """One v2 record, length prefix included."""
    parts = [b"\0", encode_varint(timestamp_delta), encode_varint(offset_delta)]
    for blob in (record.key, record.value):
        if blob is None:
            parts.append(b"\x01")  # varint -1
        else:
            parts.append(encode_varint(len(blob)))
            parts.append(blob)
    parts.append(encode_varint(len(record.headers)))
    for header in record.headers:
        hkey = header.key_bytes()
        parts.append(encode_varint(len(hkey)))
        parts.append(hkey)
        if header.value is None:
            parts.append(b"\x01")
        else:
            parts.append(encode_varint(len(header.value)))
            parts.append(header.value)
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def retain_records(batch: RecordBatch, keep: Sequence[int], *, payload: bytes | None = None,
                   delete_horizon_ms: int | None = None) -> bytes:
    """The batch with only the records at indices ``keep`` (ascending, not empty): what the log cleaner writes
    (MemoryRecords.filterTo), byte for byte what ``build_record_batch`` makes of the kept records.

    Kept records are copied as encoded; only their timestamp delta is rewritten when the base timestamp moves
    (the first record dropped, or a delete horizon set: KIP-534 keeps it in the base timestamp field, and
    record timestamps stay relative to that field). Other header fields are the original batch's.
    """
    data = batch.payload() if payload is None else payload
    try:
        spans = _record_spans(data, batch.records_count)
        old_base = batch.base_timestamp
        # LogAppendTime: every record reads as the batch's max timestamp, and Kafka's rebuild writes that.
        append_time = batch.max_timestamp if batch.attributes & ATTR_TIMESTAMP_TYPE else None
        if delete_horizon_ms is not None:
            new_base = delete_horizon_ms
        elif append_time is not None:
            new_base = append_time
        else:
            new_base = old_base + decode_varint(data, decode_varint(data, spans[keep[0]][0], 5)[1] + 1)[0]
        parts = []
        for i in keep:
            start, end = spans[i]
            body = decode_varint(data, start, 5)[1]
            delta, after = decode_varint(data, body + 1)
            timestamp = old_base + delta if append_time is None else append_time
            if timestamp - new_base == delta and data[body] == 0:
                parts.append(data[start:end])
                continue
            # Re-encode the head: attributes 0 (as Kafka's writer), the timestamp delta against the new base.
            new_delta = encode_varint(timestamp - new_base)
            rest = data[after:end]
            parts.append(encode_varint(1 + len(new_delta) + len(rest)) + b"\0" + new_delta + rest)
    except (IndexError, CorruptRecordError):
        raise CorruptRecordError("Found invalid record structure", position=batch.position,
                                 base_offset=batch.base_offset) from None
    records = b"".join(parts)
    codec = batch.attributes & ATTR_CODEC_MASK
    if codec:  # at Kafka's default gzip level, as its cleaner writes
        records = compress(Codec(codec), records, magic=MAGIC_V2, gzip_level=KAFKA_GZIP_LEVEL)
    attributes = batch.attributes & ~ATTR_DELETE_HORIZON
    if delete_horizon_ms is not None:
        attributes |= ATTR_DELETE_HORIZON
    header = bytearray(HEADER.pack(
        batch.base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(records), batch.partition_leader_epoch,
        MAGIC_V2, 0, attributes, batch.last_offset_delta, new_base, batch.max_timestamp, batch.producer_id,
        batch.producer_epoch, batch.base_sequence, len(keep)))
    stamp_crc(header, 0, crc32c(bytes(header[ATTRIBUTES_OFFSET:]) + records))
    return bytes(header) + records


def _record_spans(data: bytes, count: int) -> list[tuple[int, int]]:
    """(start, end) of each encoded record in a decompressed records area, length prefix included."""
    spans = []
    pos = 0
    size = len(data)
    for _ in range(count):
        length, body = decode_varint(data, pos, 5)
        end = body + length
        if length < 0 or end > size:
            raise CorruptRecordError("record length outside the batch")
        spans.append((pos, end))
        pos = end
    return spans


def build_record_batch(
    records: Sequence[Record] | Iterable[Record],
    *,
    base_offset: int | None = None,
    codec: Codec | int = Codec.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    delete_horizon_ms: int | None = None,
    max_timestamp: int | None = None,
    last_offset_delta: int | None = None,
    snappy_xerial: bool = True,
) -> bytes:
    """Build one v2 batch from records carrying absolute offsets (the MemoryRecordsBuilder rules).

    ``last_offset_delta`` may exceed the last record's delta: the cleaner keeps the original one so
    that last offset and last sequence survive (section 1.5). An empty batch needs it and ``max_timestamp``.
    """
    records = list(records)
    if base_offset is None:
        if not records:
            raise ValueError("an empty batch needs an explicit base_offset")
        base_offset = records[0].offset
    if delete_horizon_ms is not None:
        base_timestamp = delete_horizon_ms
    elif records:
        base_timestamp = records[0].timestamp
    else:
        base_timestamp = NO_TIMESTAMP
    if max_timestamp is None:
        if not records:
            raise ValueError("an empty batch needs an explicit max_timestamp")
        max_timestamp = max(r.timestamp for r in records)
    if last_offset_delta is None:
        last_offset_delta = records[-1].offset - base_offset if records else 0
    payload = b"".join(encode_record(r, r.offset - base_offset, r.timestamp - base_timestamp) for r in records)
    codec = Codec(int(codec))
    if codec != Codec.NONE and records:
        payload = compress(codec, payload, magic=MAGIC_V2, snappy_xerial=snappy_xerial)
    attributes = int(codec) if records else 0
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    if is_transactional:
        attributes |= ATTR_TRANSACTIONAL
    if is_control:
        attributes |= ATTR_CONTROL
    if delete_horizon_ms is not None:
        attributes |= ATTR_DELETE_HORIZON
    header = bytearray(
        HEADER.pack(
            base_offset,
            RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload),
            partition_leader_epoch,
            MAGIC_V2,
            0,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    crc = crc32c(bytes(header[ATTRIBUTES_OFFSET:]) + payload)
    stamp_crc(header, 0, crc)
    return bytes(header) + payload


def write_header_field(buf: bytearray | memoryview, position: int, name: str, value: int) -> None:
    """Overwrite one header field of the batch at ``position`` in ``buf`` (the CRC is not updated)."""
    FIELD_STRUCTS[name].pack_into(buf, position + FIELD_OFFSETS[name], value)


def read_header_field(buf: bytes | bytearray | memoryview, position: int, name: str) -> int:
    return FIELD_STRUCTS[name].unpack_from(buf, position + FIELD_OFFSETS[name])[0]


def stamp_offsets(buf: bytearray | memoryview, position: int, base_offset: int, leader_epoch: int) -> None:
    """What a leader writes into a produced batch: its base offset and the partition leader epoch.
    Neither field is covered by the CRC, so the batch stays valid (Kafka `setLastOffset`,
    `setPartitionLeaderEpoch`; record offsets are deltas and need no rewrite)."""
    write_header_field(buf, position, "base_offset", base_offset)
    write_header_field(buf, position, "partition_leader_epoch", leader_epoch)


def set_max_timestamp(buf: bytearray | memoryview, position: int, size: int, timestamp_type: TimestampType,
                      max_timestamp: int) -> int:
    """Kafka `DefaultRecordBatch.setMaxTimestamp`: the timestamp type attribute and max timestamp of the batch
    at ``buf[position:position + size]`` are rewritten and its CRC recomputed (once). Returns the new CRC."""
    attributes = read_header_field(buf, position, "attributes")
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= ATTR_TIMESTAMP_TYPE
    else:
        attributes &= ~ATTR_TIMESTAMP_TYPE
    write_header_field(buf, position, "attributes", attributes)
    write_header_field(buf, position, "max_timestamp", max_timestamp)
    crc = crc32c(memoryview(buf)[position + ATTRIBUTES_OFFSET : position + size])
    write_header_field(buf, position, "crc", crc)
    return crc


def set_partition_leader_epoch(raw: bytes | bytearray, epoch: int) -> bytes:
    """The leader stamps its epoch on append; the CRC does not cover the field."""
    buf = bytearray(raw)
    stamp_leader_epoch(buf, 0, epoch)
    return bytes(buf)
