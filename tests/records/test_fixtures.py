"""Every record batch in ../shared/kafka-fixtures decodes to what its INDEX.md says."""

from __future__ import annotations

import pytest

from fixture_index import Expectation, load_expectations
from kcli.errors import CorruptRecordError
from kcli.records import BatchReader, RecordBatch, StopReason
from kcli.records.batch import build_record_batch
from support import FIXTURES

EXPECTATIONS = load_expectations(FIXTURES) if FIXTURES.is_dir() else []


def _ids(exp: Expectation) -> str:
    return str(exp.path.relative_to(FIXTURES))


def _render(blob: bytes | None) -> str | None:
    """INDEX.md's rendering: text, or 0x-hex when not printable UTF-8."""
    if blob is None:
        return None
    try:
        text = blob.decode("utf-8")
        if text.isprintable():
            return text
    except UnicodeDecodeError:
        pass
    return "0x" + blob.hex()


def _matches(actual: str | None, expected: str | None) -> bool:
    if expected is None or actual is None:
        return actual == expected
    if expected.endswith("..."):
        return actual.startswith(expected[:-3])
    return actual == expected


def test_index_lists_fixtures():
    if not FIXTURES.is_dir():
        pytest.skip("no fixtures")
    assert len(EXPECTATIONS) >= 70


@pytest.mark.parametrize("exp", EXPECTATIONS, ids=_ids)
def test_fixture_decodes_as_index_says(exp: Expectation):
    data = exp.path.read_bytes()
    reader = BatchReader(data)
    batches = list(reader)
    assert len(batches) == exp.batches
    assert all(b.is_valid for b in batches), [b for b in batches if not b.is_valid]
    if exp.undecodable:
        with pytest.raises(CorruptRecordError) as err:
            [r for b in batches for r in b.records()]
        assert err.value.position == 0
        return
    records = [r for b in batches for r in b.records()]
    assert len(records) == exp.records
    if records:
        assert records[0].offset == exp.first_offset
        assert records[-1].offset == exp.last_offset
        offsets = [r.offset for r in records]
        assert offsets == sorted(offsets)
    if exp.layout:
        # INDEX.md lists a legacy wrapper's own offset (= its last inner offset) as "baseOffset"
        got = [(b.base_offset if b.magic == 2 else b.last_offset, b.magic, b.codec.label, len(b.records())) for b in batches]
        assert got == exp.layout
    if exp.keys is not None:
        assert [r.key.decode() for r in records] == exp.keys
    by_offset = {r.offset: r for r in records}
    for offset, key, value in exp.first_records:
        record = by_offset[offset]
        assert _matches(_render(record.key), key), (offset, record.key, key)
        assert _matches(_render(record.value), value), (offset, record.value, value)
    if exp.truncated_tail:
        assert reader.stop is StopReason.SHORT_TAIL and reader.valid_bytes < len(data)
    elif exp.batches == 0:
        assert reader.stop is StopReason.PARTIAL_BATCH
    else:
        assert reader.valid_bytes == len(data)


@pytest.mark.parametrize("exp", [e for e in EXPECTATIONS if e.records and not e.undecodable], ids=_ids)
def test_uncompressed_v2_batches_rebuild_byte_for_byte(exp: Expectation):
    """Our builder is an exact inverse of the reader for every uncompressed v2 batch Kafka wrote."""
    for batch in BatchReader(exp.path.read_bytes()):
        if not isinstance(batch, RecordBatch) or batch.codec_id != 0:
            continue
        rebuilt = build_record_batch(
            batch.records(),
            base_offset=batch.base_offset,
            timestamp_type=batch.timestamp_type,
            producer_id=batch.producer_id,
            producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence,
            is_transactional=batch.is_transactional,
            is_control=batch.is_control,
            partition_leader_epoch=batch.partition_leader_epoch,
            delete_horizon_ms=batch.delete_horizon_ms,
            max_timestamp=batch.max_timestamp,
            last_offset_delta=batch.last_offset_delta,
        )
        if batch.timestamp_type.name == "LOG_APPEND_TIME":
            continue  # record deltas are the producer's, which the reader replaces by max_timestamp
        assert rebuilt == batch.raw, batch


def test_zstd_anomaly_decodes_when_codec_forced(fixtures_dir):
    """kafkajs' v0_recordbatch_zstd: attributes say none but the payload is a zstd frame."""
    from kcli.records.compression import Codec, decompress
    from kcli.records.batch import RECORD_BATCH_OVERHEAD, _decode_records

    batch = next(iter(BatchReader((fixtures_dir / "tulios__kafkajs/_extracted/v0_recordbatch_zstd.bin").read_bytes())))
    assert batch.codec_id == 0 and batch.partition_leader_epoch == 911
    payload = decompress(Codec.ZSTD, batch.raw[RECORD_BATCH_OVERHEAD:])
    (record,) = _decode_records(batch, payload, batch.records_count)
    assert record.key == b"lorem" and len(record.value) == 445
