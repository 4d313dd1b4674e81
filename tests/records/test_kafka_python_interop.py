"""kafka-python's record builders and readers as an independent implementation of the same formats."""

from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from kcli.records import BatchReader, Codec, Header, Record, build_legacy_messages, build_record_batch

T0 = 1700000000000
# kafka-python's codec attribute ids match Kafka's
CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


def _records(n: int) -> list[Record]:
    return [
        Record(i, T0 + i, None if i % 5 == 0 else f"key-{i}".encode(), None if i % 7 == 3 else (b"v" * (i * 13)),
               (Header("h", f"{i}".encode()),) if i % 2 else ())
        for i in range(n)
    ]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.label)
def test_we_read_kafka_python_v2(codec):
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec), is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    records = _records(40)
    for r in records:
        builder.append(r.offset, timestamp=r.timestamp, key=r.key, value=r.value,
                       headers=[(h.key, h.value) for h in r.headers])
    raw = bytes(builder.build())
    (batch,) = list(BatchReader(raw))
    assert batch.is_valid
    got = batch.records()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in got] == [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in records
    ]
    if codec == Codec.NONE:
        # byte-exact agreement with an independent writer (kafka-python stamps leader epoch 0)
        assert build_record_batch(records, partition_leader_epoch=0) == raw


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.label)
def test_kafka_python_reads_ours_v2(codec):
    records = _records(40)
    raw = build_record_batch(records, codec=codec)
    batch = MemoryRecords(raw).next_batch()
    batch.validate_crc()
    got = list(batch)
    assert [(r.offset, r.timestamp, r.key, r.value, [(k, v) for k, v in r.headers]) for r in got] == [
        (r.offset, r.timestamp, r.key, r.value, [(h.key, h.value) for h in r.headers]) for r in records
    ]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4], ids=lambda c: c.label)
def test_legacy_both_ways(magic, codec):
    records = [Record(i, T0 + i, f"k{i}".encode(), f"value-{i}".encode()) for i in range(10)]
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=int(codec), batch_size=1 << 20)
    for r in records:
        builder.append(r.offset, timestamp=r.timestamp, key=r.key, value=r.value)
    theirs = bytes(builder.build())
    got = [r for b in BatchReader(theirs) for r in b.records()]
    assert [(r.offset, r.key, r.value) for r in got] == [(r.offset, r.key, r.value) for r in records]
    ours = build_legacy_messages(records, magic=magic, codec=codec)
    mr = MemoryRecords(ours)
    read_back = []
    while mr.has_next():
        read_back.extend((r.offset, r.key, r.value) for r in mr.next_batch())
    assert read_back == [(r.offset, r.key, r.value) for r in records]
    if codec == Codec.NONE:
        assert ours == theirs
