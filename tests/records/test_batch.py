"""v2 batches, legacy messages and control records: worked examples, round trips, corruption."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kcli.errors import CorruptRecordError
from kcli.records import (
    BatchReader,
    Codec,
    Header,
    LegacyMessage,
    Record,
    RecordBatch,
    StopReason,
    TimestampType,
    build_legacy_messages,
    build_record_batch,
)
from kcli.records.control import ControlRecordType, control_key, end_txn_marker_value, parse_control_type, parse_end_txn_marker
from kcli.records.varint import decode_varint, encode_varint

# kafka-formats.md 4.3 worked example: CRCs cross-checked there with the JDK's CRC32C.
WORKED_A = bytes.fromhex(
    "000000000000000000000049000000000291eb8e1d0000000000010000018bcfe568000000018bcfe56805ffffffffffffffffffffffffffff"
    "0000000214000000046b300476300018000a02046b31010202680278"
)
WORKED_B = bytes.fromhex(
    "0000000000000002000000420000000002a544cffa0030000000000000018bcfe5680a0000018bcfe5680a00000000000003e80000ffffffff"
    "000000012000000008000000010c00000000000300"
)
T0 = 1700000000000


def test_worked_example_decodes():
    batches = list(BatchReader(WORKED_A + WORKED_B))
    a, b = batches
    assert (a.base_offset, a.last_offset, a.size, a.crc, a.is_valid) == (0, 1, 85, 2448133661, True)
    r0, r1 = a.records()
    assert (r0.offset, r0.timestamp, r0.key, r0.value, r0.headers) == (0, T0, b"k0", b"v0", ())
    assert (r1.offset, r1.timestamp, r1.key, r1.value, r1.headers) == (1, T0 + 5, b"k1", None, (Header("h", b"x"),))
    assert (b.size, b.crc, b.is_control, b.is_transactional, b.producer_id) == (78, 2772750330, True, True, 1000)
    (marker,) = b.records()
    assert parse_control_type(marker.key) is ControlRecordType.COMMIT
    assert parse_end_txn_marker(ControlRecordType.COMMIT, marker.value).coordinator_epoch == 3


def test_worked_example_builds_byte_exact():
    a = build_record_batch(
        [Record(0, T0, b"k0", b"v0"), Record(1, T0 + 5, b"k1", None, (Header("h", b"x"),))], partition_leader_epoch=0
    )
    assert a == WORKED_A
    b = build_record_batch(
        [Record(2, T0 + 10, control_key(ControlRecordType.COMMIT), end_txn_marker_value(3))],
        producer_id=1000,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=0,
    )
    assert b == WORKED_B


@pytest.mark.parametrize("value", [0, -1, 1, 63, -64, 64, 300, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)])
def test_varint_examples(value):
    encoded = encode_varint(value)
    assert decode_varint(encoded, 0) == (value, len(encoded))


def test_varint_spec_bytes():
    assert [encode_varint(v).hex() for v in (0, -1, 1, 63, -64, 64, 300)] == ["00", "01", "02", "7e", "7f", "8001", "d804"]


def test_varint_too_long():
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\xff" * 6 + b"\x01", 0, 5)


headers_st = st.lists(st.builds(Header, st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3).map(tuple)
record_st = st.builds(
    lambda k, v, h, dt: (k, v, h, dt),
    st.none() | st.binary(max_size=40),
    st.none() | st.binary(max_size=200),
    headers_st,
    st.integers(min_value=-1000, max_value=10**6),
)


@settings(max_examples=150, deadline=None)
@given(
    specs=st.lists(record_st, min_size=1, max_size=12),
    codec=st.sampled_from(list(Codec)),
    base=st.integers(min_value=0, max_value=2**40),
    gaps=st.lists(st.integers(min_value=1, max_value=5), min_size=12, max_size=12),
    transactional=st.booleans(),
    pid=st.integers(min_value=-1, max_value=2**40),
)
def test_v2_round_trip(specs, codec, base, gaps, transactional, pid):
    offset = base
    records = []
    for i, (k, v, h, dt) in enumerate(specs):
        records.append(Record(offset, T0 + dt, k, v, h))
        offset += gaps[i]
    raw = build_record_batch(records, codec=codec, is_transactional=transactional, producer_id=pid, producer_epoch=3,
                             base_sequence=0 if pid >= 0 else -1)
    (batch,) = list(BatchReader(raw))
    assert isinstance(batch, RecordBatch) and batch.is_valid and batch.codec is codec
    assert batch.last_offset == records[-1].offset and batch.count == len(records)
    assert batch.max_timestamp == max(r.timestamp for r in records)
    got = batch.records()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in records
    ]
    if pid >= 0:
        assert [r.sequence for r in got] == [r.offset - base for r in records]


@settings(max_examples=100, deadline=None)
@given(
    specs=st.lists(record_st, min_size=1, max_size=8),
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from([Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]),
    base=st.integers(min_value=0, max_value=2**40),
    log_append=st.booleans(),
)
def test_legacy_round_trip(specs, magic, codec, base, log_append):
    records = [Record(base + i, T0 + max(dt, 0), k, v) for i, (k, v, _h, dt) in enumerate(specs)]
    ts_type = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
    raw = build_legacy_messages(records, magic=magic, codec=codec, timestamp_type=ts_type)
    batches = list(BatchReader(raw))
    assert all(isinstance(b, LegacyMessage) and b.is_valid for b in batches)
    got = [r for b in batches for r in b.records()]
    assert [(r.offset, r.key, r.value) for r in got] == [(r.offset, r.key, r.value) for r in records]
    if magic == 0:
        assert all(r.timestamp == -1 for r in got)
        assert batches[0].timestamp_type is TimestampType.NO_TIMESTAMP_TYPE
    elif codec != Codec.NONE and log_append:
        assert all(r.timestamp == batches[0].timestamp for r in got)
    else:
        assert [r.timestamp for r in got] == [r.timestamp for r in records]
    if codec != Codec.NONE:
        (wrapper,) = batches
        assert wrapper.last_offset == records[-1].offset and wrapper.base_offset == records[0].offset


def test_v1_wrapper_offset_zero_quirk():
    records = [Record(0, T0, b"a", b"1"), Record(1, T0, b"b", b"2")]
    raw = build_legacy_messages(records, magic=1, codec=Codec.GZIP, wrapper_offset=0)
    assert [r.offset for r in next(iter(BatchReader(raw))).records()] == [0, 1]


def test_v1_wrapper_offset_below_inner_is_rejected():
    records = [Record(0, T0, b"a", b"1"), Record(1, T0, b"b", b"2"), Record(2, T0, b"c", b"3")]
    raw = build_legacy_messages(records, magic=1, codec=Codec.GZIP, wrapper_offset=1)
    with pytest.raises(CorruptRecordError, match="invalid wrapper offset"):
        next(iter(BatchReader(raw))).records()


def test_lz4_magic0_broken_header_checksum_round_trips():
    from kcli.records.compression import compress, decompress, xxh32

    frame = compress(Codec.LZ4, b"x" * 1000, magic=0)
    assert frame[6] == (xxh32(frame[0:6]) >> 8) & 0xFF  # KAFKA-3160: over magic+FLG+BD
    assert decompress(Codec.LZ4, frame, magic=0) == b"x" * 1000
    with pytest.raises(CorruptRecordError):
        decompress(Codec.LZ4, frame, magic=1)  # magic 1+ verifies the header checksum


def test_snappy_raw_and_xerial_both_read():
    from kcli.records.compression import XERIAL_MAGIC, compress, decompress

    data = bytes(range(256)) * 300
    xerial = compress(Codec.SNAPPY, data)
    assert xerial.startswith(XERIAL_MAGIC)
    assert decompress(Codec.SNAPPY, xerial) == data
    assert decompress(Codec.SNAPPY, compress(Codec.SNAPPY, data, snappy_xerial=False)) == data


def test_crc_flip_is_detected():
    raw = bytearray(WORKED_A)
    raw[70] ^= 0x01
    (batch,) = list(BatchReader(bytes(raw)))
    assert not batch.is_valid
    assert "stored crc = 2448133661" in batch.invalid_reason()


def test_partition_leader_epoch_not_covered_by_crc():
    raw = bytearray(WORKED_A)
    struct.pack_into(">i", raw, 12, 77)
    (batch,) = list(BatchReader(bytes(raw)))
    assert batch.is_valid and batch.partition_leader_epoch == 77


def test_size_below_minimum_raises_with_position():
    data = WORKED_A + bytes(40)  # a zero-filled, preallocated tail
    reader = BatchReader(data, path="x.log")
    with pytest.raises(CorruptRecordError) as err:
        list(reader)
    assert err.value.position == len(WORKED_A) and "smaller than minimum record overhead (14)" in str(err.value)


@pytest.mark.parametrize("cut", range(1, len(WORKED_B)))
def test_truncated_tail_ends_iteration(cut):
    data = WORKED_A + WORKED_B[:cut]
    reader = BatchReader(data)
    assert len(list(reader)) == 1
    assert reader.valid_bytes == len(WORKED_A)
    assert reader.stop is (StopReason.SHORT_TAIL if cut <= 17 else StopReason.PARTIAL_BATCH)


def test_record_structure_errors():
    raw = bytearray(WORKED_A)
    raw[61] = 0x7E  # first record's length varint now says 63 bytes
    batch = RecordBatch(bytes(raw))
    with pytest.raises(CorruptRecordError) as err:
        batch.records()
    assert err.value.base_offset == 0 and err.value.position == 0


def test_empty_batch_keeps_last_offset():
    raw = build_record_batch([], base_offset=100, last_offset_delta=4, max_timestamp=T0, producer_id=7, producer_epoch=1,
                             base_sequence=10)
    (batch,) = list(BatchReader(raw))
    assert batch.size == 61 and batch.count == 0 and batch.last_offset == 104 and batch.last_sequence == 14
    assert batch.base_timestamp == -1 and batch.records() == []


def test_delete_horizon_makes_negative_deltas():
    records = [Record(5, T0, b"k", None)]
    raw = build_record_batch(records, delete_horizon_ms=T0 + 86_400_000)
    (batch,) = list(BatchReader(raw))
    assert batch.delete_horizon_ms == T0 + 86_400_000 and batch.records()[0].timestamp == T0


def test_sequence_wraps_at_int_max():
    raw = build_record_batch([Record(0, T0, b"a", b"1"), Record(1, T0, b"b", b"2")], producer_id=1, producer_epoch=0,
                             base_sequence=2**31 - 1)
    (batch,) = list(BatchReader(raw))
    assert [r.sequence for r in batch.records()] == [2**31 - 1, 0] and batch.last_sequence == 0


# -- retain_records: the cleaner's copy-through rewrite equals a rebuild of the kept records ---------------
_blobs = st.one_of(st.none(), st.binary(max_size=40))


@st.composite
def _batch_and_keep(draw):
    from kcli.records import Header, Record, TimestampType

    count = draw(st.integers(1, 12))
    base_offset = draw(st.integers(0, 2**40))
    base_ts = draw(st.integers(0, 2**41))
    records = [
        Record(base_offset + i, base_ts + draw(st.integers(-1000, 10**6)), draw(_blobs), draw(_blobs),
               tuple(Header(draw(st.text(max_size=5)), draw(_blobs)) for _ in range(draw(st.integers(0, 2)))))
        for i in range(count)
    ]
    codec = draw(st.sampled_from(list(Codec)))
    ts_type = draw(st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME]))
    old_horizon = draw(st.one_of(st.none(), st.integers(0, 2**41)))
    pid = draw(st.sampled_from([-1, 7]))
    raw = build_record_batch(records, codec=codec, timestamp_type=ts_type, delete_horizon_ms=old_horizon,
                             producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                             base_sequence=3 if pid >= 0 else -1, is_transactional=pid >= 0 and draw(st.booleans()),
                             partition_leader_epoch=draw(st.integers(-1, 5)))
    keep = sorted(draw(st.sets(st.integers(0, count - 1), min_size=1)))
    new_horizon = old_horizon if old_horizon is not None else draw(st.one_of(st.none(), st.integers(0, 2**41)))
    return RecordBatch(raw), keep, new_horizon


@given(_batch_and_keep())
@settings(max_examples=300)
def test_retain_records_equals_rebuilding_the_kept_records(case):
    from kcli.records.batch import retain_records

    batch, keep, horizon = case
    records = batch.records()
    expected = build_record_batch(
        [records[i] for i in keep], base_offset=batch.base_offset, codec=batch.codec,
        timestamp_type=batch.timestamp_type, producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence, is_transactional=batch.is_transactional, is_control=batch.is_control,
        partition_leader_epoch=batch.partition_leader_epoch, delete_horizon_ms=horizon,
        max_timestamp=batch.max_timestamp, last_offset_delta=batch.last_offset_delta)
    got = retain_records(batch, keep, delete_horizon_ms=horizon)
    assert RecordBatch(got).is_valid
    assert RecordBatch(got).records() == RecordBatch(expected).records()
    # Same records area before compression, same header but for the length and CRC (retain_records recompresses
    # gzip at Kafka's level through ISA-L, build_record_batch at level 9 through zlib: other bytes, another size).
    assert RecordBatch(got).payload() == RecordBatch(expected).payload()
    assert got[:8] == expected[:8] and got[12:17] == expected[12:17] and got[21:61] == expected[21:61]
    assert int.from_bytes(got[8:12], "big") == len(got) - 12


def test_retain_records_reports_bad_structure_with_position():
    from kcli.records.batch import retain_records

    raw = bytearray(build_record_batch([Record(0, 1, b"k", b"v"), Record(1, 2, b"k", b"w")]))
    raw[61] = 0x7E  # first record's length now runs past the batch
    with pytest.raises(CorruptRecordError, match="invalid record structure") as info:
        retain_records(RecordBatch(bytes(raw), position=4096), [1])
    assert info.value.position == 4096
