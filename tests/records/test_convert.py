"""Magic conversion (kcli.records.convert): v2 -> magic 0/1 for old fetches, magic 0/1 -> v2 for old produces.

kafka-python's legacy reader is the independent check of what old clients see.
"""

from __future__ import annotations

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kcli.errors import CorruptRecordError, UnsupportedCodecError, UnsupportedCompressionTypeError
from kcli.records import (
    BatchReader,
    Codec,
    Header,
    LegacyMessage,
    Record,
    RecordBatch,
    TimestampType,
    build_legacy_messages,
    build_record_batch,
    downconvert,
    upconvert_to_v2,
)
from kcli.records.control import ControlRecordType, control_key, end_txn_marker_value
from kcli.records.convert import encode_legacy_batch
from kcli.records.layout import LEGACY_ATTRIBUTES_OFFSET, LEGACY_MAGIC_OFFSET, stamp_base_offset
from kcli.records.types import NO_TIMESTAMP
from support import FIXTURES

T0 = 1_700_000_000_000
LEGACY_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4]


def _records(n: int, first: int = 0) -> list[Record]:
    return [
        Record(first + i, T0 + i * 7, None if i % 5 == 0 else f"key-{i}".encode(),
               None if i % 7 == 3 else b"v" * (i * 13 + 1), (Header("h", b"%d" % i),) if i % 2 else ())
        for i in range(n)
    ]


def _kafka_python(raw: bytes) -> list[tuple[int, int, int | None, bytes | None, bytes | None, int]]:
    """(magic, offset, timestamp, key, value, codec of the outer message) as kafka-python reads a message set."""
    out = []
    records = MemoryRecords(raw)
    while records.has_next():
        batch = records.next_batch()
        for r in batch:
            out.append((batch.magic, r.offset, r.timestamp, None if r.key is None else bytes(r.key),
                        None if r.value is None else bytes(r.value), batch.compression_type))
    return out


def _triples(records) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in records]


def _fixture(rel: str) -> bytes:
    path = FIXTURES / rel
    if not path.is_file():
        pytest.skip(f"fixture {rel} not found")
    return path.read_bytes()


# -- down-conversion ------------------------------------------------------------------------------------
@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.label)
def test_downconvert_round_trip_through_kafka_python(codec, magic):
    records = _records(30, first=1000)
    v2 = build_record_batch(records, codec=codec, partition_leader_epoch=3)
    converted = downconvert(v2, magic, 1000)
    theirs = _kafka_python(converted)
    assert [(m, o, k, v) for m, o, _t, k, v, _c in theirs] == [(magic, r.offset, r.key, r.value) for r in records]
    assert {c for *_rest, c in theirs} == {int(codec)}
    if magic == 1:
        assert [t for _m, _o, t, *_rest in theirs] == [r.timestamp for r in records]
    else:
        assert all(t is None for _m, _o, t, *_rest in theirs)  # magic 0 has no timestamp
    ours = list(BatchReader(converted))
    assert all(isinstance(b, LegacyMessage) and b.magic == magic and b.is_valid for b in ours)
    assert len(ours) == (len(records) if codec == Codec.NONE else 1)
    got = [r for b in ours for r in b.records()]
    assert _triples(got) == _triples(records)
    assert all(r.headers == () for r in got)  # magic 0/1 cannot carry headers
    if codec != Codec.NONE:
        wrapper = ours[0]
        assert wrapper.offset == records[-1].offset  # the wrapper holds the last offset
        assert wrapper.timestamp == (max(r.timestamp for r in records) if magic else NO_TIMESTAMP)
        if magic == 1:  # inner offsets relative to the first
            inner = list(BatchReader(_inner_payload(wrapper)))
            assert [m.offset for m in inner] == list(range(len(records)))


def _inner_payload(wrapper: LegacyMessage) -> bytes:
    from kcli.records.compression import decompress

    return decompress(wrapper.codec, wrapper.value, magic=wrapper.magic)


def test_downconvert_drops_records_before_first_offset_only_when_uncompressed():
    records = _records(5, first=10)
    plain = downconvert(build_record_batch(records), 1, 12)
    assert [o for _m, o, *_rest in _kafka_python(plain)] == [12, 13, 14]
    # RecordsUtil keeps a compressed batch whole: the client skips the offsets it did not ask for
    packed = downconvert(build_record_batch(records, codec=Codec.GZIP), 1, 12)
    assert [o for _m, o, *_rest in _kafka_python(packed)] == [10, 11, 12, 13, 14]
    # a batch wholly below first_offset converts to nothing
    assert downconvert(build_record_batch(records), 0, 15) == b""


def test_downconvert_skips_control_batches_and_later_batches_keep_going():
    data = build_record_batch(_records(2, first=0), producer_id=7, producer_epoch=0, base_sequence=0,
                              is_transactional=True)
    marker = build_record_batch([Record(2, T0, control_key(ControlRecordType.COMMIT), end_txn_marker_value(0))],
                                producer_id=7, producer_epoch=0, is_transactional=True, is_control=True)
    after = build_record_batch(_records(2, first=3), codec=Codec.SNAPPY)
    converted = downconvert(data + marker + after, 1, 0)
    assert [o for _m, o, *_rest in _kafka_python(converted)] == [0, 1, 3, 4]


def test_downconvert_zstd_is_a_typed_error():
    v2 = build_record_batch(_records(3), codec=Codec.ZSTD)
    with pytest.raises(UnsupportedCompressionTypeError) as info:
        downconvert(v2, 1, 0)
    assert isinstance(info.value, UnsupportedCodecError)
    assert "zstandard" in info.value.reason


def test_downconvert_log_append_time():
    records = _records(4)
    for codec in (Codec.NONE, Codec.LZ4):
        v2 = build_record_batch(records, codec=codec, timestamp_type=TimestampType.LOG_APPEND_TIME,
                                max_timestamp=T0 + 99_000)
        converted = downconvert(v2, 1, 0)
        assert [t for _m, _o, t, *_rest in _kafka_python(converted)] == [T0 + 99_000] * 4
        for message in BatchReader(converted):
            assert message.timestamp_type == TimestampType.LOG_APPEND_TIME
            assert message.raw[LEGACY_ATTRIBUTES_OFFSET] & 0x08
        if codec != Codec.NONE:  # Kafka's builder sets the timestamp type bit on the inner messages too
            inner = list(BatchReader(_inner_payload(next(iter(BatchReader(converted))))))
            assert all(m.attributes & 0x08 and m.timestamp == T0 + 99_000 for m in inner)


def test_downconvert_copies_batches_already_at_the_magic_and_converts_higher_ones():
    v0 = build_legacy_messages(_records(2, first=0), magic=0)
    v1 = build_legacy_messages(_records(2, first=2), magic=1, codec=Codec.GZIP)
    v2 = build_record_batch(_records(2, first=4))
    assert downconvert(v0 + v1 + v2, 1, 0)[: len(v0) + len(v1)] == v0 + v1
    to_v0 = downconvert(v0 + v1 + v2, 0, 0)
    assert to_v0.startswith(v0)
    assert [(m, o) for m, o, *_rest in _kafka_python(to_v0)] == [(0, i) for i in range(6)]


def test_downconvert_leaves_out_a_partial_tail_and_rejects_other_magics():
    v2 = build_record_batch(_records(3)) + build_record_batch(_records(3, first=3))
    assert [o for _m, o, *_rest in _kafka_python(downconvert(v2[:-5], 1, 0))] == [0, 1, 2]
    with pytest.raises(ValueError):
        downconvert(v2, 2, 0)


@pytest.mark.parametrize("rel", [
    "influxdata__rskafka/_extracted/record_batch_nocompression.bin",
    "influxdata__rskafka/_extracted/record_batch_gzip.bin",
    "influxdata__rskafka/_extracted/record_batch_snappy.bin",
    "influxdata__rskafka/_extracted/record_batch_snappy_java.bin",
    "influxdata__rskafka/_extracted/record_batch_lz4.bin",
    "influxdata__rskafka/_extracted/record_batch_null_key.bin",
    "tulios__kafkajs/_extracted/v4_response_gzip.records.bin",
    "tulios__kafkajs/_extracted/v4_response_mixed_formats.records.bin",
    "segmentio__kafka-go/_extracted/v1-v1c-v2-v2c-v2b-v2b-v2b-v2bc-v1b-v1bc.records.bin",
    "rjmfernandes__flink-on-prem/data/_schemas-0/00000000000000000000.log",
    "rjmfernandes__flink-on-prem/data/__cluster_metadata-0/00000000000000000000.log",
])
@pytest.mark.parametrize("magic", [0, 1])
def test_downconvert_real_batches(rel, magic):
    raw = _fixture(rel)
    batches = list(BatchReader(raw))
    expected = [r for b in batches if not b.is_control for r in b.records()]
    converted = downconvert(raw, magic, 0)
    theirs = _kafka_python(converted)
    assert [(o, k, v) for _m, o, _t, k, v, _c in theirs] == _triples(expected)
    assert {m for m, *_rest in theirs} <= {0, magic}
    codecs = {b.codec_id for b in batches if not b.is_control}
    assert {c for *_rest, c in theirs} == codecs


def test_downconvert_real_zstd_batch():
    raw = _fixture("influxdata__rskafka/_extracted/record_batch_zstd.bin")
    with pytest.raises(UnsupportedCompressionTypeError):
        downconvert(raw, 1, 0)


# -- up-conversion --------------------------------------------------------------------------------------
def _kafka_python_message_set(records: list[Record], magic: int, codec: Codec) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    for r in records:
        builder.append(r.offset, timestamp=r.timestamp if magic else None, key=r.key, value=r.value)
    return bytes(builder.build())


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.label)
@pytest.mark.parametrize("writer", ["kcli", "kafka-python"])
def test_upconvert_keeps_keys_values_timestamps_and_codec(writer, codec, magic):
    records = _records(25, first=40)
    if writer == "kcli":
        message_set = build_legacy_messages(records, magic=magic, codec=codec)
    else:
        message_set = _kafka_python_message_set(records, magic, codec)
    raw = upconvert_to_v2(message_set)
    (batch,) = list(BatchReader(raw))
    assert isinstance(batch, RecordBatch) and batch.is_valid and batch.magic == 2
    assert batch.codec == codec
    assert batch.base_offset == 0 and batch.records_count == len(records)  # relative: the log assigns offsets
    got = batch.records()
    assert [(r.offset, r.key, r.value) for r in got] == [(i, r.key, r.value) for i, r in enumerate(records)]
    assert [r.timestamp for r in got] == ([r.timestamp for r in records] if magic else [NO_TIMESTAMP] * len(records))
    assert batch.max_timestamp == (max(r.timestamp for r in records) if magic else NO_TIMESTAMP)
    assert batch.producer_id == -1 and not batch.is_transactional
    # and back: what an old consumer fetches is what the old producer sent (offsets aside)
    back = downconvert(raw, magic, 0)
    assert [(k, v) for *_rest, k, v, _c in _kafka_python(back)] == [(r.key, r.value) for r in records]


def test_upconvert_mixed_set_takes_the_last_wrappers_codec_unless_the_topic_sets_one():
    first = build_legacy_messages(_records(2), magic=1)
    gzip = build_legacy_messages(_records(2, first=2), magic=1, codec=Codec.GZIP)
    lz4 = build_legacy_messages(_records(2, first=4), magic=1, codec=Codec.LZ4)
    message_set = first + gzip + lz4 + build_legacy_messages(_records(1, first=6), magic=1)
    assert RecordBatch(upconvert_to_v2(message_set)).codec == Codec.LZ4  # Kafka's sourceCompression
    assert RecordBatch(upconvert_to_v2(message_set, codec=Codec.ZSTD)).codec == Codec.ZSTD
    batch = RecordBatch(upconvert_to_v2(message_set, base_offset=100, partition_leader_epoch=4))
    assert [r.offset for r in batch.records()] == list(range(100, 107))
    assert batch.partition_leader_epoch == 4


def test_upconvert_log_append_time_wrapper_and_topic():
    records = _records(3)
    wrapper = build_legacy_messages(records, magic=1, codec=Codec.GZIP, timestamp_type=TimestampType.LOG_APPEND_TIME)
    got = RecordBatch(upconvert_to_v2(wrapper)).records()
    assert [r.timestamp for r in got] == [max(r.timestamp for r in records)] * 3  # inner read as the wrapper's
    batch = RecordBatch(upconvert_to_v2(build_legacy_messages(records, magic=1), timestamp_type=TimestampType.LOG_APPEND_TIME,
                                        log_append_time_ms=T0 + 5))
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [T0 + 5] * 3
    with pytest.raises(ValueError):
        upconvert_to_v2(wrapper, timestamp_type=TimestampType.LOG_APPEND_TIME)


def test_upconvert_rejects_corrupt_messages():
    message_set = bytearray(build_legacy_messages(_records(2), magic=1))
    message_set[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        upconvert_to_v2(bytes(message_set))
    with pytest.raises(ValueError):
        upconvert_to_v2(b"")


def test_upconvert_leaves_v2_alone():
    v2 = build_record_batch(_records(2))
    assert upconvert_to_v2(v2) == v2


@pytest.mark.parametrize("rel", [
    "segmentio__kafka-go/_extracted/v1-v1.records.bin",
    "segmentio__kafka-go/_extracted/v1c-v1-v1c.records.bin",
    "segmentio__kafka-go/_extracted/v1c-v1c.records.bin",
    "tulios__kafkajs/_extracted/v0_response.records.bin",
    "tulios__kafkajs/_extracted/v0_response_gzip.records.bin",
    "tulios__kafkajs/_extracted/v1_response_gzip.records.bin",
    "tulios__kafkajs/_extracted/v2_response.records.bin",
    "tulios__kafkajs/_extracted/v2_response_gzip.records.bin",
    "tulios__kafkajs/_extracted/messages_v0_GZIP.msgset.bin",
    "tulios__kafkajs/_extracted/messages_v0_uncompressed.msgset.bin",
])
def test_upconvert_real_message_sets(rel):
    raw = _fixture(rel)
    messages = list(BatchReader(raw))
    assert messages and all(isinstance(m, LegacyMessage) for m in messages)
    expected = [r for m in messages for r in m.records()]
    batch = RecordBatch(upconvert_to_v2(raw))
    assert batch.is_valid
    got = batch.records()
    assert [(r.key, r.value, r.timestamp) for r in got] == [(r.key, r.value, r.timestamp) for r in expected]
    codecs = [m.codec for m in messages if m.codec_id]
    assert batch.codec == (codecs[-1] if codecs else Codec.NONE)
    # the batch a Kafka 3.7 broker would store, down-converted for the same client, reads as it was sent
    magic = messages[0].magic
    assert [(k, v) for *_rest, k, v, _c in _kafka_python(downconvert(bytes(batch.raw), magic, 0))] == [
        (r.key, r.value) for r in expected]


def test_encode_legacy_batch_matches_the_magic_byte_layout():
    raw = encode_legacy_batch(_records(2), magic=1, codec=Codec.SNAPPY)
    assert raw[LEGACY_MAGIC_OFFSET] == 1
    shifted = bytearray(raw)
    stamp_base_offset(shifted, 0, 77)  # outside the CRC
    assert LegacyMessage(bytes(shifted)).is_valid
    with pytest.raises(UnsupportedCompressionTypeError):
        encode_legacy_batch(_records(1), magic=1, codec=Codec.ZSTD)
