"""LogValidator: check a produced record set once and make it ready for the log.

``validate_records`` frames the record set, parses each batch header ONCE and checks its CRC ONCE, applies
the topic's rules (max.message.bytes, keys for compacted topics, CreateTime bounds, no control batches or
LogAppendTime from clients), checks idempotent/transactional producers against the partition's producer
state (duplicates of the last five batches, sequence gaps, fenced epochs), then stamps base offsets and
the leader epoch in place (fields outside the CRC) and, for message.timestamp.type=LogAppendTime, the max
timestamp (recomputing the CRC once, as Kafka does). Magic 0/1 message sets (Produce v0-v2) are converted
to one v2 batch, as Kafka converts them to the topic's format. Nothing here touches files: the result goes
to ``PartitionLog.append_validated``.

Kafka: storage/.../log/LogValidator.java, core/.../log/UnifiedLog.scala (analyzeAndValidateRecords,
analyzeAndValidateProducerState), 3.7.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kcli.errors import CorruptRecordError, KcliError
from kcli.records.batch import RecordBatch, set_max_timestamp, stamp_offsets
from kcli.records.compression import Codec
from kcli.records.control import ControlRecordType, parse_control_type, parse_end_txn_marker
from kcli.records.convert import upconvert_records
from kcli.records.legacy import LegacyMessage
from kcli.records.record_set import BatchReader, make_batch
from kcli.records.types import NO_SEQUENCE, NO_TIMESTAMP, Record, TimestampType
from kcli.storage.errors import (
    DuplicateSequence,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)
from kcli.storage.log_config import LONG_MAX, LogConfig
from kcli.storage.producer_state import AppendOrigin, ProducerAppendInfo, ProducerStateManager

_CODECS = {"uncompressed": Codec.NONE, "gzip": Codec.GZIP, "snappy": Codec.SNAPPY, "lz4": Codec.LZ4, "zstd": Codec.ZSTD}


@dataclass(slots=True)
class BatchInfo:
    """One batch of a validated record set, as the log and producer state need it (no second parse).
    ``position`` and ``size`` locate it in ``ValidationResult.records``; offsets are the assigned ones."""

    position: int
    size: int
    magic: int
    base_offset: int
    last_offset: int
    count: int
    max_timestamp: int
    offset_of_max_timestamp: int  # the shallow one: the batch's last offset (Kafka 3.x for v2)
    partition_leader_epoch: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    is_transactional: bool
    is_control: bool
    codec: int
    timestamp_type: TimestampType
    control: tuple[ControlRecordType, int] | None = None  # an end marker's type and coordinator epoch

    @property
    def first_offset(self) -> int:
        return self.base_offset

    @property
    def last_offset_delta(self) -> int:
        return self.last_offset - self.base_offset

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


@dataclass(slots=True)
class ValidationResult:
    """Kafka's ValidationResult + the LogAppendInfo fields known before the append.

    ``duplicate`` set: the request repeats a batch already in the log; nothing is to be appended and the
    producer is answered with ``duplicate.first_offset``. ``producer_updates`` are the checked producer
    entries (informational: ``append_validated`` replays the batches into the producer state)."""

    records: bytes
    batches: list[BatchInfo]
    first_offset: int
    last_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int
    log_append_time: int = NO_TIMESTAMP
    record_count: int = 0
    converted: bool = False  # magic 0/1 input rewritten as a v2 batch
    duplicate: DuplicateSequence | None = None
    origin: AppendOrigin = AppendOrigin.CLIENT
    producer_updates: dict[int, ProducerAppendInfo] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.records)

    @property
    def base_offset(self) -> int:
        """What the Produce response carries: the duplicate's original offset, else the first assigned one."""
        return self.duplicate.first_offset if self.duplicate is not None else self.first_offset


class RecordValidationError(InvalidRecordError):
    """A record-level rejection; ``record_errors`` are (batch index, message) for PartitionProduceResponse."""

    def __init__(self, reason: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(reason)
        self.record_errors = record_errors


class RecordTimestampError(InvalidTimestampError):
    def __init__(self, reason: str, record_errors: list[tuple[int, str]]) -> None:
        super().__init__(reason)
        self.record_errors = record_errors


def validate_records(raw: bytes, config: LogConfig, *, log_end_offset: int, leader_epoch: int,
                     producer_state: ProducerStateManager | None, now_ms: int,
                     origin: AppendOrigin = AppendOrigin.CLIENT, topic_partition: str = "") -> ValidationResult:
    """Validate a produced (``origin`` CLIENT) or replicated (REPLICATION: offsets and epochs kept) record
    set against the topic's ``config`` and the partition's producer state; returns the stamped bytes and
    per-batch info. Raises CorruptRecordError (CORRUPT_MESSAGE), RecordTooLargeError, InvalidRecordError,
    InvalidTimestampError, OutOfOrderSequenceError, InvalidProducerEpochError, InvalidTxnStateError."""
    return _Validator(config, log_end_offset, leader_epoch, producer_state, now_ms, origin, topic_partition).run(raw)


class _Validator:
    def __init__(self, config: LogConfig, log_end_offset: int, leader_epoch: int,
                 producer_state: ProducerStateManager | None, now_ms: int, origin: AppendOrigin, tp: str) -> None:
        self.config = config
        self.log_end_offset = log_end_offset
        self.leader_epoch = leader_epoch
        self.producer_state = producer_state or ProducerStateManager()
        self.now_ms = now_ms
        self.origin = origin
        self.tp = tp
        self.client = origin is not AppendOrigin.REPLICATION
        self.log_append_time = config.log_append_time
        self.updates: dict[int, ProducerAppendInfo] = {}

    # -- framing: Kafka analyzeAndValidateRecords ----------------------------------------------
    def run(self, raw: bytes) -> ValidationResult:
        reader = BatchReader(raw)
        spans = list(reader.spans())
        if not spans or reader.valid_bytes != len(raw):
            raise CorruptRecordError(f"record set of {len(raw)} bytes does not hold whole batches",
                                     position=reader.valid_bytes)
        max_bytes = self.config.max_message_bytes
        batches = []
        for position, size in spans:
            if size > max_bytes:
                raise RecordTooLargeError(
                    f"The record batch size in the append to {self.tp} is {size} bytes which exceeds the maximum "
                    f"configured value of {max_bytes}.", position=position)
            batch = make_batch(raw[position:position + size], position)  # the one parse of this batch
            batch.ensure_valid()  # the one CRC check
            if batches and batch.magic != batches[0].magic:
                raise InvalidRecordError(f"Batch magic {batch.magic} is not the same as the first batch's magic "
                                         f"byte {batches[0].magic} in topic partition {self.tp}.", position=position)
            batches.append(batch)
        if batches[0].magic < 2:
            if not self.client:
                raise InvalidRecordError("replicated batches must be magic 2 in a v2 log")
            return self._convert(batches)
        return self._v2(raw, batches)

    # -- magic 2 --------------------------------------------------------------------------------
    def _v2(self, raw: bytes, batches: list[RecordBatch]) -> ValidationResult:
        buf = bytearray(raw)
        infos: list[BatchInfo] = []
        next_offset = self.log_end_offset
        record_count = 0
        for index, batch in enumerate(batches):
            if self.client:
                if self.origin is AppendOrigin.CLIENT:  # the coordinators write control batches (LogValidator)
                    self._check_client_batch(batch)
                self._check_records(batch, index)
                base = next_offset
                stamp_offsets(buf, batch.position, base, self.leader_epoch)
                epoch = self.leader_epoch
            else:
                base = batch.base_offset
                if base < next_offset:
                    what = "Unexpected offset" if index == 0 else "Out of order offsets found"
                    raise InvalidRecordError(f"{what} in append to {self.tp}: first offset {base} is below "
                                             f"{next_offset}", position=batch.position)
                epoch = batch.partition_leader_epoch
            last = base + batch.last_offset_delta
            max_ts, ts_type = batch.max_timestamp, batch.timestamp_type
            if self.client and self.log_append_time:
                max_ts, ts_type = self.now_ms, TimestampType.LOG_APPEND_TIME
                set_max_timestamp(buf, batch.position, batch.size, ts_type, max_ts)  # the CRC recomputed once
            control = self._control(batch) if batch.is_control else None
            infos.append(BatchInfo(batch.position, batch.size, batch.magic, base, last, batch.records_count, max_ts,
                                   last, epoch, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                   batch.last_sequence, batch.is_transactional, batch.is_control, batch.codec_id,
                                   ts_type, control))
            record_count += batch.records_count
            next_offset = last + 1
        duplicate = self._producer_checks(infos)
        return self._result(bytes(buf), infos, record_count, duplicate=duplicate)

    def _check_client_batch(self, batch: RecordBatch) -> None:
        """Kafka `LogValidator.validateBatch` for client appends."""
        count = batch.records_count
        if batch.last_offset_delta < 0:
            raise InvalidRecordError(f"Batch has an invalid offset range: [{batch.base_offset}, {batch.last_offset}] "
                                     f"in topic partition {self.tp}.", position=batch.position)
        if count <= 0:
            raise InvalidRecordError(f"Invalid reported count for record batch: {count} in topic partition {self.tp}.",
                                     position=batch.position)
        if batch.last_offset_delta + 1 != count:
            raise InvalidRecordError(f"Inconsistent batch offset range [{batch.base_offset}, {batch.last_offset}] and "
                                     f"count of records {count} in topic partition {self.tp}.", position=batch.position)
        if batch.is_control:
            raise InvalidRecordError(f"Clients are not allowed to write control records in topic partition {self.tp}.",
                                     position=batch.position)
        if batch.producer_id >= 0 and batch.base_sequence < 0:
            raise InvalidRecordError(f"Invalid sequence number {batch.base_sequence} in record batch with producerId "
                                     f"{batch.producer_id} in topic partition {self.tp}.", position=batch.position)

    def _check_records(self, batch: RecordBatch, index: int) -> None:
        """Kafka `validateRecord`: keys for compacted topics and CreateTime bounds. Records are decoded only
        when a rule needs them (once)."""
        compact = self.config.compact
        before, after = self.config.timestamp_before_max_ms, self.config.timestamp_after_max_ms
        bounded = not self.log_append_time and (before != LONG_MAX or after != LONG_MAX)
        client_append_time = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
        if not (compact or bounded or client_append_time):
            return
        records = batch.records()
        self._check_record_list(records, batch.timestamp_type, index)

    def _check_record_list(self, records: list[Record], batch_ts_type: TimestampType, index: int) -> None:
        """Kafka `validateRecord` for every record of one batch: a key for a compacted topic, else the timestamp.
        Every bad record is collected before the batch is refused (LogValidator.processRecordErrors), so the
        producer learns each one's index (ProduceResponse record_errors, KIP-467) and fails only those."""
        compact = self.config.compact
        before, after = self.config.timestamp_before_max_ms, self.config.timestamp_after_max_ms
        now = self.now_ms
        errors: list[tuple[int, str]] = []
        bad_timestamp = False
        for i, record in enumerate(records):
            if compact and record.key is None:
                errors.append((i, f"Compacted topic cannot accept message without key in topic partition {self.tp}"))
            elif not self.log_append_time and record.timestamp != NO_TIMESTAMP:
                if record.timestamp < now - before or record.timestamp > now + after:
                    bad_timestamp = True
                    errors.append((i, f"Timestamp {record.timestamp} of message with offset {record.offset} is out of "
                                      f"range. The timestamp should be within [{now - before}, {now + after}]"))
            elif batch_ts_type == TimestampType.LOG_APPEND_TIME:
                bad_timestamp = True
                errors.append((i, f"Invalid timestamp type in message {record}. Producer should not set timestamp "
                                  "type to LogAppendTime."))
        if not errors:
            return
        if bad_timestamp:
            raise RecordTimestampError("One or more records have been rejected due to invalid timestamp", errors)
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        raise RecordValidationError(f"One or more records have been rejected due to {len(errors)} record errors in "
                                    f"total, and only showing the first three errors at most: [{shown}]", errors)

    def _control(self, batch: RecordBatch) -> tuple[ControlRecordType, int] | None:
        records = batch.records()
        if not records:
            return None
        kind = parse_control_type(records[0].key)
        if kind not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            return kind, -1
        return kind, parse_end_txn_marker(kind, records[0].value).coordinator_epoch

    # -- magic 0/1 -> v2 -------------------------------------------------------------------------
    def _convert(self, messages: list[LegacyMessage]) -> ValidationResult:
        """Kafka converts a v0/v1 message set to the log's format (v2) on append: one batch, new offsets."""
        for message in messages:
            if message.magic >= 1 and message.timestamp_type == TimestampType.LOG_APPEND_TIME:
                raise InvalidTimestampError(f"Invalid timestamp type in message {message}. Producer should not set "
                                            "timestamp type to LogAppendTime.")
        records = []
        for message in messages:
            inner = message.records()
            for record in inner:
                if not record.valid:
                    raise CorruptRecordError(f"Record is corrupt (stored crc = {record.crc})", position=message.position)
            records.extend(inner)
        ts_type = TimestampType.CREATE_TIME if messages[0].magic >= 1 else TimestampType.NO_TIMESTAMP_TYPE
        self._check_record_list(records, ts_type, 0)
        target = self.config.compression_type
        codec = None if target == "producer" else _CODECS[target]
        append_time = self.now_ms if self.log_append_time else None
        # Kafka's sourceCompression: the last compressed wrapper's codec (compression.type=producer keeps it)
        source = next((m.codec_id for m in reversed(messages) if m.codec_id), 0)
        raw = upconvert_records(records, source_codec=source, base_offset=self.log_end_offset, codec=codec,
                                timestamp_type=TimestampType.LOG_APPEND_TIME if append_time is not None
                                else TimestampType.CREATE_TIME,
                                log_append_time_ms=append_time, partition_leader_epoch=self.leader_epoch)
        if len(raw) > self.config.max_message_bytes:
            raise RecordTooLargeError(f"The record batch size in the append to {self.tp} is {len(raw)} bytes which "
                                      f"exceeds the maximum configured value of {self.config.max_message_bytes}.")
        count = len(records)
        last = self.log_end_offset + count - 1
        max_ts = append_time if append_time is not None else max(r.timestamp for r in records)
        info = BatchInfo(0, len(raw), 2, self.log_end_offset, last, count, max_ts, last, self.leader_epoch, -1, -1,
                         NO_SEQUENCE, NO_SEQUENCE, False, False, int(codec if codec is not None else source),
                         TimestampType.LOG_APPEND_TIME if append_time is not None else TimestampType.CREATE_TIME)
        return self._result(raw, [info], count, converted=True)

    # -- producers: Kafka analyzeAndValidateProducerState -----------------------------------------
    def _producer_checks(self, infos: list[BatchInfo]) -> DuplicateSequence | None:
        for info in infos:
            if info.producer_id < 0:
                continue
            update = self.updates.get(info.producer_id)
            if update is None:
                update = self.updates[info.producer_id] = self.producer_state.prepare_update(
                    info.producer_id, self.origin, self.tp)
            if info.is_control:
                if info.control is not None and info.control[0] in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
                    update.append_end_txn_marker(info.producer_epoch, info.control[1], info.base_offset,
                                                 info.max_timestamp)
                continue
            if self.origin is AppendOrigin.CLIENT:
                # "there will be up to 5 batches which could have been duplicated" (UnifiedLog)
                duplicate = update.find_duplicate(info.producer_epoch, info.base_sequence, info.last_sequence)
                if duplicate is not None:
                    return duplicate
            update.append_data_batch(info.producer_epoch, info.base_sequence, info.last_sequence, info.max_timestamp,
                                     info.base_offset, info.last_offset, info.is_transactional)
        return None

    def _result(self, records: bytes, infos: list[BatchInfo], count: int, *, converted: bool = False,
                duplicate: DuplicateSequence | None = None) -> ValidationResult:
        best = max(infos, key=lambda b: b.max_timestamp)  # the first of the largest, as Kafka's strict '>'
        return ValidationResult(
            records, infos, infos[0].base_offset, infos[-1].last_offset, best.max_timestamp,
            best.offset_of_max_timestamp, self.now_ms if (self.client and self.log_append_time) else NO_TIMESTAMP,
            count, converted, duplicate, self.origin, dict(self.updates))


class LogValidator:
    """Object form of ``validate_records`` for callers that keep the partition's settings around."""

    def __init__(self, config: LogConfig, *, topic_partition: str = "") -> None:
        self.config = config
        self.topic_partition = topic_partition

    def validate(self, raw: bytes, *, log_end_offset: int, leader_epoch: int,
                 producer_state: ProducerStateManager | None, now_ms: int,
                 origin: AppendOrigin = AppendOrigin.CLIENT) -> ValidationResult:
        return validate_records(raw, self.config, log_end_offset=log_end_offset, leader_epoch=leader_epoch,
                                producer_state=producer_state, now_ms=now_ms, origin=origin,
                                topic_partition=self.topic_partition)


__all__ = ["BatchInfo", "KcliError", "LogValidator", "RecordTimestampError", "RecordValidationError",
           "ValidationResult", "validate_records"]
