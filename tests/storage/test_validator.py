"""LogValidator: one parse and one CRC check per batch; topic rules; producer checks; magic 0/1 conversion."""

from __future__ import annotations

from pathlib import Path

import pytest

from kcli.errors import CorruptRecordError
from kcli.records import BatchReader, Codec, Record, RecordBatch, TimestampType, build_legacy_messages, build_record_batch
from kcli.records.batch import FIELD_OFFSETS, RecordBatch as _RecordBatch
from kcli.records.control import ControlRecordType, control_key, end_txn_marker_value
from kcli.storage import validator as validator_module
from kcli.storage.errors import (
    DuplicateSequence,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTimestampError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from kcli.storage.log import PartitionLog
from kcli.storage.log_config import LogConfig
from kcli.storage.producer_state import AppendOrigin
from kcli.storage.segment import FileBatchReader
from kcli.storage.validator import validate_records
from support import FIXTURES

NOW = 1_700_000_000_000
RSKAFKA = FIXTURES / "influxdata__rskafka" / "_extracted"
PROMOTIONS = FIXTURES / "rjmfernandes__flink-on-prem" / "data" / "promotions-0" / "00000000000000000000.log"
KAFKA_GO = FIXTURES / "segmentio__kafka-go" / "_extracted"
KAFKAJS = FIXTURES / "tulios__kafkajs" / "_extracted"


def needs(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"fixture {path} not available")
    return path


def batch(records=1, *, pid=-1, epoch=-1, seq=-1, key=b"k", ts=NOW, **options) -> bytes:
    return build_record_batch([Record(i, ts, key, b"v%d" % i) for i in range(records)], base_offset=0,
                              producer_id=pid, producer_epoch=epoch, base_sequence=seq, **options)


def validate(raw, config=None, *, leo=0, state=None, epoch=3, origin=AppendOrigin.CLIENT, now=NOW):
    return validate_records(raw, config or LogConfig(), log_end_offset=leo, leader_epoch=epoch, producer_state=state,
                            now_ms=now, origin=origin, topic_partition="t-0")


class Spy:
    """Counts batch parses (make_batch in the validator) and CRC computations (RecordBatch.compute_crc)."""

    def __init__(self, monkeypatch):
        self.parses = self.crcs = self.decodes = 0
        real_make, real_crc, real_records = validator_module.make_batch, _RecordBatch.compute_crc, _RecordBatch.records

        def make(raw, position):
            self.parses += 1
            return real_make(raw, position)

        def crc(batch):
            self.crcs += 1
            return real_crc(batch)

        def records(batch, **kw):
            self.decodes += 1
            return real_records(batch, **kw)

        monkeypatch.setattr(validator_module, "make_batch", make)
        monkeypatch.setattr(_RecordBatch, "compute_crc", crc)
        monkeypatch.setattr(_RecordBatch, "records", records)


# -- real fixture batches ------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["record_batch_nocompression.bin", "record_batch_gzip.bin", "record_batch_lz4.bin",
                                  "record_batch_snappy.bin", "record_batch_snappy_java.bin", "record_batch_zstd.bin"])
def test_client_batches_from_real_producers_are_parsed_once_and_stamped(name, monkeypatch):
    raw = needs(RSKAFKA / name).read_bytes()
    spy = Spy(monkeypatch)
    result = validate(raw, leo=100, epoch=7)
    assert (spy.parses, spy.crcs, spy.decodes) == (1, 1, 0)
    stamped = RecordBatch(result.records)
    assert (stamped.base_offset, stamped.partition_leader_epoch) == (100, 7)
    assert stamped.is_valid and stamped.crc == RecordBatch(raw).crc  # neither field is under the CRC
    info = result.batches[0]
    assert (info.base_offset, info.last_offset, info.count) == (100, 100 + stamped.last_offset_delta, stamped.records_count)
    assert result.first_offset == 100 and result.max_timestamp == stamped.max_timestamp


def test_a_real_segment_replayed_as_produce_requests(tmp_path):
    """promotions-0: 19 idempotent batches of one producer, appended through the validator into a new log."""
    batches = list(FileBatchReader(needs(PROMOTIONS)))
    log = PartitionLog(tmp_path / "promotions-0")
    for b in batches:
        result = validate(b.raw, leo=log.log_end_offset, state=log.producer_state)
        info = log.append_validated(result)
        assert not info.duplicate and info.first_offset == b.base_offset  # the source log started at 0 too
    log.close()
    copied = list(FileBatchReader(tmp_path / "promotions-0" / "00000000000000000000.log"))
    assert [c.raw[FIELD_OFFSETS["magic"]:] for c in copied] == [b.raw[FIELD_OFFSETS["magic"]:] for b in batches]
    entry = log.producers[46]
    assert entry.last_sequence == batches[-1].last_sequence and len(entry.batches) == 5


def test_kafka_go_record_sets_with_several_v2_batches(monkeypatch):
    raw = needs(KAFKA_GO / "v2c-v2-v2c.records.bin").read_bytes()
    spy = Spy(monkeypatch)
    result = validate(raw, leo=10)
    assert (spy.parses, spy.crcs) == (3, 3)
    assert [(b.base_offset, b.last_offset) for b in result.batches] == [(10, 11), (12, 13), (14, 15)]
    assert [b.base_offset for b in BatchReader(result.records)] == [10, 12, 14]


def test_corrupt_crc_is_corrupt_message():
    raw = bytearray(needs(RSKAFKA / "record_batch_gzip.bin").read_bytes())
    raw[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="Record is corrupt"):
        validate(bytes(raw))
    with pytest.raises(CorruptRecordError, match="whole batches"):
        validate(bytes(raw[:-3]))


def test_keyless_record_to_a_compacted_topic_is_invalid_record():
    raw = needs(RSKAFKA / "record_batch_null_key.bin").read_bytes()
    validate(raw)  # fine for cleanup.policy=delete
    config = LogConfig.from_props({"cleanup.policy": "compact,delete"}, {})
    with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key in topic partition t-0") as e:
        validate(raw, config)
    assert e.value.error_code == "INVALID_RECORD" and e.value.record_errors[0][0] == 0


def test_every_keyless_record_of_a_batch_is_reported_for_a_compacted_topic():
    """Kafka's LogValidator collects every record error of a batch (processRecordErrors): librdkafka then fails
    exactly those records with INVALID_RECORD and the others of the batch with _INVALID_DIFFERENT_RECORD."""
    records = [Record(i, NOW, None if i % 10 == 0 else b"k%d" % i, b"v") for i in range(100)]
    with pytest.raises(InvalidRecordError) as e:
        validate(build_record_batch(records), LogConfig(cleanup_policy="compact"))
    message = "Compacted topic cannot accept message without key in topic partition t-0"
    assert e.value.record_errors == [(i, message) for i in range(0, 100, 10)]
    assert e.value.reason == (
        "One or more records have been rejected due to 10 record errors in total, and only showing the first three "
        f"errors at most: [RecordError(batchIndex=0, message='{message}'), RecordError(batchIndex=10, "
        f"message='{message}'), RecordError(batchIndex=20, message='{message}')]")


def test_too_large_batch():
    raw = batch(3)
    with pytest.raises(RecordTooLargeError, match=f"is {len(raw)} bytes which exceeds the maximum configured value of 50"):
        validate(raw, LogConfig(max_message_bytes=50))


def test_control_batches_from_clients_are_refused_and_replicas_keep_offsets():
    marker = build_record_batch([Record(5, NOW, control_key(ControlRecordType.COMMIT), end_txn_marker_value(9))],
                                producer_id=1, producer_epoch=0, is_transactional=True, is_control=True,
                                partition_leader_epoch=2)
    with pytest.raises(InvalidRecordError, match="Clients are not allowed to write control records"):
        validate(marker)
    result = validate(marker, leo=5, origin=AppendOrigin.REPLICATION)
    assert result.records == marker and result.batches[0].control == (ControlRecordType.COMMIT, 9)
    assert result.batches[0].partition_leader_epoch == 2
    with pytest.raises(InvalidRecordError, match="Unexpected offset"):
        validate(marker, leo=6, origin=AppendOrigin.REPLICATION)


def test_magic_mismatch_is_invalid_record():
    raw = batch(1) + build_legacy_messages([Record(1, NOW, b"k", b"v")], magic=1)
    with pytest.raises(InvalidRecordError, match="is not the same as the first batch's magic"):
        validate(raw)


# -- timestamps --------------------------------------------------------------------------------------

def test_log_append_time_sets_max_timestamp_and_recomputes_the_crc_once(monkeypatch):
    raw = needs(RSKAFKA / "record_batch_snappy_java.bin").read_bytes()
    config = LogConfig.from_props({"message.timestamp.type": "LogAppendTime"}, {})
    spy = Spy(monkeypatch)
    result = validate(raw, config, now=NOW + 5)
    assert (spy.parses, spy.crcs, spy.decodes) == (1, 1, 0)  # + one CRC written by set_max_timestamp
    stamped = RecordBatch(result.records)
    assert stamped.is_valid and stamped.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert stamped.max_timestamp == NOW + 5 == result.log_append_time
    assert {r.timestamp for r in stamped.records()} == {NOW + 5}


def test_create_time_outside_the_allowed_difference():
    config = LogConfig.from_props({"message.timestamp.difference.max.ms": "1000"}, {})
    validate(batch(ts=NOW - 1000), config)
    with pytest.raises(InvalidTimestampError, match="rejected due to invalid timestamp") as e:
        validate(batch(ts=NOW - 1001), config)
    assert e.value.record_errors == [(0, "Timestamp 1699999998999 of message with offset 0 is out of range. The "
                                         "timestamp should be within [1699999999000, 1700000001000]")]
    after = LogConfig.from_props({"message.timestamp.after.max.ms": "10"}, {})
    validate(batch(ts=NOW - 10**9), after)
    with pytest.raises(InvalidTimestampError):
        validate(batch(ts=NOW + 11), after)


def test_log_append_time_batches_from_clients_are_refused_for_log_append_time_topics():
    raw = batch(timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(InvalidTimestampError) as e:
        validate(raw, LogConfig.from_props({"message.timestamp.type": "LogAppendTime"}, {}))
    assert "Producer should not set timestamp type to LogAppendTime" in e.value.record_errors[0][1]


# -- producers ---------------------------------------------------------------------------------------

def produce(log, raw, origin=AppendOrigin.CLIENT):
    result = validate(raw, leo=log.log_end_offset, state=log.producer_state, origin=origin)
    return log.append_validated(result), result


def test_duplicates_of_each_of_the_last_five_batches_get_their_original_offsets(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    sent = []
    for i in range(7):
        raw = batch(2, pid=9, epoch=0, seq=2 * i)
        info, _ = produce(log, raw)
        sent.append((raw, info.first_offset))
    end = log.log_end_offset
    for raw, offset in sent[-5:]:
        info, result = produce(log, raw)
        assert result.duplicate == DuplicateSequence(9, offset, offset + 1, NOW)
        assert info.duplicate and info.first_offset == offset and result.base_offset == offset
        assert log.log_end_offset == end  # nothing appended
    with pytest.raises(OutOfOrderSequenceError, match=r"at offset 14 in partition t-0: 2 \(incoming seq. number\), 13 \(current end sequence number\)"):
        produce(log, sent[-6][0])  # sixth back: no longer retained
    log.close()


def test_sequence_gap_and_wrap(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    produce(log, batch(1, pid=1, epoch=0, seq=0))
    with pytest.raises(OutOfOrderSequenceError, match="Out of order sequence number for producer 1"):
        validate(batch(1, pid=1, epoch=0, seq=2), leo=1, state=log.producer_state)
    # The sequence wraps from Int.MAX to 0.
    produce(log, batch(1, pid=2, epoch=0, seq=2**31 - 1))  # an unknown producer: any sequence (Kafka 3.x)
    info, result = produce(log, batch(1, pid=2, epoch=0, seq=0))
    assert not info.duplicate and log.producers[2].last_sequence == 0
    log.close()


def test_stale_epoch_and_epoch_bump(tmp_path):
    log = PartitionLog(tmp_path / "t-0")
    produce(log, batch(1, pid=5, epoch=3, seq=0))
    produce(log, batch(1, pid=5, epoch=3, seq=1))
    with pytest.raises(InvalidProducerEpochError, match="is 2, which is smaller than the last seen epoch 3") as e:
        produce(log, batch(1, pid=5, epoch=2, seq=2))
    assert e.value.error_code == "INVALID_PRODUCER_EPOCH"
    with pytest.raises(OutOfOrderSequenceError, match="Invalid sequence number for new epoch of producer 5"):
        produce(log, batch(1, pid=5, epoch=4, seq=2))
    info, _ = produce(log, batch(1, pid=5, epoch=4, seq=0))  # a new epoch starts at 0
    assert log.producers[5].producer_epoch == 4 and len(log.producers[5].batches) == 1
    # A retry of an old-epoch batch is not a duplicate any more: it is fenced.
    with pytest.raises(InvalidProducerEpochError):
        produce(log, batch(1, pid=5, epoch=3, seq=1))
    log.close()


def test_replicas_are_not_sequence_checked(tmp_path):
    raw = build_record_batch([Record(0, NOW, b"k", b"v")], producer_id=4, producer_epoch=0, base_sequence=7)
    result = validate(raw, origin=AppendOrigin.REPLICATION)
    assert result.records == raw and result.duplicate is None


def test_invalid_sequence_with_producer_id():
    with pytest.raises(InvalidRecordError, match="Invalid sequence number -1 in record batch with producerId 4"):
        validate(batch(1, pid=4, epoch=0, seq=-1))


# -- magic 0/1 -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("path,codec", [
    (KAFKA_GO / "v1-v1.records.bin", Codec.NONE),
    (KAFKA_GO / "v1c-v1c.records.bin", Codec.GZIP),
    (KAFKAJS / "messages_v0_uncompressed.msgset.bin", Codec.NONE),
    (KAFKAJS / "messages_v0_GZIP.msgset.bin", Codec.GZIP),
])
def test_magic_0_and_1_message_sets_are_converted_to_one_v2_batch(path, codec):
    raw = needs(path).read_bytes()
    source = [r for m in BatchReader(raw) for r in m.records()]
    result = validate(raw, leo=40, epoch=2)
    assert result.converted and len(result.batches) == 1
    (converted,) = list(BatchReader(result.records))
    assert converted.magic == 2 and converted.is_valid and converted.codec_id == codec
    assert (converted.base_offset, converted.partition_leader_epoch) == (40, 2)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in converted.records()] == \
        [(40 + i, r.key, r.value, r.timestamp) for i, r in enumerate(source)]
    assert (result.first_offset, result.last_offset) == (40, 40 + len(source) - 1)


def test_converted_message_set_appends_and_uses_the_topic_codec(tmp_path):
    raw = build_legacy_messages([Record(i, NOW + i, b"k%d" % i, b"v") for i in range(3)], magic=1)
    config = LogConfig(compression_type="lz4", message_timestamp_type="LogAppendTime")
    result = validate(raw, config, now=NOW + 100)
    (converted,) = list(BatchReader(result.records))
    assert converted.codec_id == Codec.LZ4 and converted.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert {r.timestamp for r in converted.records()} == {NOW + 100}
    with PartitionLog(tmp_path / "t-0", config=config) as log:
        info = log.append_validated(result)
        assert (info.first_offset, info.last_offset, log.log_end_offset) == (0, 2, 3)


def test_keyless_legacy_message_to_a_compacted_topic():
    raw = build_legacy_messages([Record(0, NOW, None, b"v")], magic=1)
    with pytest.raises(InvalidRecordError, match="Compacted topic cannot accept message without key"):
        validate(raw, LogConfig(cleanup_policy="compact"))


# -- coordinator appends: markers and transactional offset commits (KIP-98) -----------------------------------
def marker(kind: ControlRecordType, *, pid: int, epoch: int, coordinator_epoch: int) -> bytes:
    return build_record_batch([Record(0, NOW, control_key(kind), end_txn_marker_value(coordinator_epoch))],
                              producer_id=pid, producer_epoch=epoch, is_transactional=True, is_control=True)


def test_coordinator_markers_close_transactions_and_stale_coordinators_are_fenced(tmp_path):
    """A coordinator writes markers (LogValidator checks control batches only for clients); the marker of a
    coordinator epoch older than the producer's last is TRANSACTION_COORDINATOR_FENCED; an ABORT indexes the
    aborted transaction and the LSO waits for the high watermark to pass the marker (unreplicated txns)."""
    from kcli.storage.errors import TransactionCoordinatorFencedError

    log = PartitionLog(tmp_path / "t-0")
    coordinator = AppendOrigin.COORDINATOR
    produce(log, batch(2, pid=7, epoch=0, seq=0, is_transactional=True))
    assert log.producer_state.first_unstable_offset() == 0
    produce(log, marker(ControlRecordType.ABORT, pid=7, epoch=0, coordinator_epoch=3), origin=coordinator)
    assert log.producers[7].coordinator_epoch == 3 and log.producers[7].current_txn_first_offset == -1
    assert log.producer_state.first_unstable_offset(high_watermark=2) == 0  # the marker is not replicated yet
    assert log.producer_state.first_unstable_offset(high_watermark=3) is None
    assert log.reader().aborted_transactions(0, 3)[0].first_offset == 0
    with pytest.raises(TransactionCoordinatorFencedError) as fenced:
        produce(log, marker(ControlRecordType.COMMIT, pid=7, epoch=0, coordinator_epoch=2), origin=coordinator)
    assert fenced.value.error_code == "TRANSACTION_COORDINATOR_FENCED"
    with pytest.raises(InvalidRecordError, match="Clients are not allowed to write control records"):
        produce(log, marker(ControlRecordType.COMMIT, pid=7, epoch=0, coordinator_epoch=3))
    # TxnOffsetCommit batches all start at sequence 0: never "duplicates" of each other for a coordinator
    first, _ = produce(log, batch(1, pid=8, epoch=0, seq=0, is_transactional=True), origin=coordinator)
    second, _ = produce(log, batch(1, pid=8, epoch=0, seq=0, is_transactional=True), origin=coordinator)
    assert second.first_offset == first.first_offset + 1 and not second.duplicate
    log.close()
