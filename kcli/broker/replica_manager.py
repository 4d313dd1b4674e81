"""ReplicaManager: the partitions this broker holds, appends and reads on them, and the delayed operations
waiting on them (Kafka's ReplicaManager).

Handlers call `append_records` and `fetch_messages` with decoded request data and get per-partition results
or typed errors; nothing here knows wire formats beyond the record bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import (
    InvalidRequiredAcksError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    error_code_for,
    error_message_for,
)
from kcli.broker.log_manager import LogManager
from kcli.broker.partition import AppendResult, Partition, ReadResult
from kcli.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from kcli.errors import KcliError
from kcli.records import BatchReader, RecordBatch, upconvert_to_v2
from kcli.records.layout import stamp_base_offset, stamp_leader_epoch
from kcli.records.types import NO_SEQUENCE, increment_sequence

log = logging.getLogger("kcli.broker")

TopicPartition = tuple[str, int]


@dataclass
class PartitionAppend:
    error: Any  # ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None


@dataclass
class FetchPartition:
    """One partition of a Fetch request, as the ReplicaManager needs it."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    topic_id: Any = None


@dataclass
class FetchPartitionResult:
    error: Any
    read: ReadResult | None = None


@dataclass
class FetchParams:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    read_committed: bool
    replica_id: int = -1


@dataclass
class ReplicaManager:
    log_manager: LogManager
    topic_config: Callable[[str], Any]  # topic -> LogConfig-like mapping (max.message.bytes, cleanup.policy, ...)
    partitions: dict[TopicPartition, Partition] = field(default_factory=dict)
    fetch_purgatory: DelayedOperationPurgatory = field(default_factory=lambda: DelayedOperationPurgatory("Fetch"))
    on_flush_due: Callable[[Any], None] | None = None  # schedules an fsync off the event loop

    # -- partitions --------------------------------------------------------------------------------
    def add_partition(self, partition: Partition) -> None:
        self.partitions[(partition.topic, partition.index)] = partition

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self.partitions if k[0] == topic]:
            del self.partitions[key]
            self.fetch_purgatory.check_and_complete(key)

    def get_partition(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: {topic}-{index}")
        return partition

    def find(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    # -- produce -----------------------------------------------------------------------------------
    def append_records(self, acks: int, entries: dict[TopicPartition, bytes], *,
                       origin_client: bool = True, legacy: bool = False) -> dict[TopicPartition, PartitionAppend]:
        """Validate and append each partition's record set (Kafka's appendRecords; acks 0, 1 and -1 are
        served alike on one broker, the ISR being this broker)."""
        if acks not in (0, 1, -1):
            error = InvalidRequiredAcksError(f"acks must be 0, 1 or -1, not {acks}")
            return {tp: PartitionAppend(error.code, message=error.reason) for tp in entries}
        results: dict[TopicPartition, PartitionAppend] = {}
        for tp, raw in entries.items():
            try:
                partition = self.get_partition(*tp)
                if legacy:  # Produce v0-v2: magic 0/1 message sets become one v2 batch, as Kafka converts
                    raw = upconvert_to_v2(raw)
                appended = self._append_to_leader(partition, raw)
                results[tp] = PartitionAppend(ErrorCode.none, appended.base_offset, appended.log_append_time,
                                              partition.log_start_offset)
            except Exception as exc:  # typed errors become codes; anything else is a bug, logged once there
                code = error_code_for(exc)
                if isinstance(exc, KcliError):
                    log.warning("rejected produce to %s-%d: %s", tp[0], tp[1], exc.reason)
                partition = self.find(*tp)
                results[tp] = PartitionAppend(code, log_start_offset=partition.log_start_offset if partition else -1,
                                              message=error_message_for(exc))
        return results

    def _append_to_leader(self, partition: Partition, raw: bytes) -> AppendResult:
        config = self.topic_config(partition.topic)
        managed = partition.managed
        with managed.lock:  # validation reads producer state; the append below takes the lock again
            validated = _validate(raw, config, partition.log_end_offset, partition.leader_epoch,
                                  partition.log.producers)
        if validated.duplicate_of is not None:
            return AppendResult(validated.duplicate_of, validated.duplicate_of, duplicate=True,
                                log_start_offset=partition.log_start_offset)
        try:
            base, _count = self.log_manager.append(managed, validated.records)
        except KcliError as exc:
            log.error("append to %s-%d failed: %s", partition.topic, partition.index, exc)
            raise KafkaStorageError(exc.reason) from exc
        key = (partition.topic, partition.index)
        self.fetch_purgatory.check_and_complete(key)
        if self.on_flush_due is not None and self.log_manager.flush_due(managed):
            self.on_flush_due(managed)
        return AppendResult(base, partition.log_end_offset - 1, validated.log_append_time,
                            partition.log_start_offset)

    def delete_records(self, topic: str, index: int, offset: int) -> int:
        """Kafka's deleteRecords on the leader: -1 means the high watermark; beyond it is out of range."""
        partition = self.get_partition(topic, index)
        target = partition.high_watermark if offset == -1 else offset
        if target < 0 or target > partition.high_watermark:
            raise OffsetOutOfRangeError(f"Cannot increment the log start offset to {offset} of partition "
                                        f"{topic}-{index} since it is larger than the high watermark "
                                        f"{partition.high_watermark}")
        delay = self.topic_config(topic).get("file.delete.delay.ms", 60_000)
        low = self.log_manager.delete_records_before(partition.managed, target, delay)
        self.fetch_purgatory.check_and_complete((topic, index))
        return low

    # -- fetch -------------------------------------------------------------------------------------
    def read_from_local_log(self, params: FetchParams, infos: list[FetchPartition]) -> list[FetchPartitionResult]:
        """Kafka's readFromLocalLog: the first partition with data may return one batch beyond the limits
        (min one message); the others stay within both the partition's and the request's remaining bytes."""
        remaining = params.max_bytes
        min_one = True
        out = []
        for info in infos:
            try:
                partition = self.get_partition(info.topic, info.partition)
                limit = max(0, min(info.max_bytes, remaining))
                read = partition.read(info.fetch_offset, limit, read_committed=params.read_committed,
                                      min_one_message=min_one)
                size = len(read.records)
                if size:
                    min_one = False
                remaining = max(0, remaining - size)
                out.append(FetchPartitionResult(ErrorCode.none, read))
            except Exception as exc:
                out.append(FetchPartitionResult(error_code_for(exc), _error_read(self.find(info.topic, info.partition))))
        return out

    async def fetch_messages(self, params: FetchParams, infos: list[FetchPartition]) -> list[FetchPartitionResult]:
        """Answer at once when there is an error, enough data or no wait; else park in the purgatory until an
        append to one of the partitions brings min_bytes, or max_wait passes (Kafka's DelayedFetch)."""
        first = self.read_from_local_log(params, infos)
        total = sum(len(r.read.records) for r in first if r.read is not None)
        if params.max_wait_ms <= 0 or total >= params.min_bytes or any(r.error for r in first) or not infos:
            return first
        _close_all(first)
        delayed = DelayedFetch(self, params, infos)
        keys = {(i.topic, i.partition) for i in infos}
        return await self.fetch_purgatory.try_complete_else_watch(delayed, keys)

    def shutdown(self) -> None:
        self.fetch_purgatory.cancel_all()


class DelayedFetch(DelayedOperation):
    def __init__(self, manager: ReplicaManager, params: FetchParams, infos: list[FetchPartition]) -> None:
        super().__init__(params.max_wait_ms)
        self.manager, self.params, self.infos = manager, params, infos

    def try_complete(self) -> bool:
        available = 0
        for info in self.infos:
            partition = self.manager.find(info.topic, info.partition)
            if partition is None:
                return self.force_complete()  # deleted meanwhile: answer with the error now
            end = partition.last_stable_offset if self.params.read_committed else partition.high_watermark
            if info.fetch_offset > partition.log_end_offset or info.fetch_offset < partition.log_start_offset:
                return self.force_complete()
            if end > info.fetch_offset:
                available += 1  # some bytes: the read below counts them exactly
        if available == 0:
            return False
        result = self.manager.read_from_local_log(self.params, self.infos)
        total = sum(len(r.read.records) for r in result if r.read is not None)
        _close_all(result)
        if total >= self.params.min_bytes:
            return self.force_complete()
        return False

    def on_complete(self) -> list[FetchPartitionResult]:
        return self.manager.read_from_local_log(self.params, self.infos)


def _close_all(results: list[FetchPartitionResult]) -> None:
    for r in results:
        if r.read is not None and hasattr(r.read.records, "close"):
            r.read.records.close()


def _error_read(partition: Partition | None) -> ReadResult:
    if partition is None:
        return ReadResult(b"", -1, -1, -1, -1)
    return ReadResult(b"", partition.high_watermark, partition.last_stable_offset, partition.log_start_offset,
                      partition.log_end_offset)


async def run_blocking(function: Callable[..., Any], *args: Any) -> Any:
    """Disk work (fsync, retention, cleaning) runs in a worker thread, never on the event loop."""
    return await asyncio.to_thread(function, *args)


# -- interim validation (to be replaced by storage's LogValidator) -------------------------------------
@dataclass
class _Validated:
    records: bytes
    duplicate_of: int | None = None
    log_append_time: int = -1


class _ProduceError(KcliError):
    pass


def _validate(raw: bytes, config: Any, log_end_offset: int, leader_epoch: int, producers: dict) -> _Validated:
    from kcli.broker.errors import BrokerError

    def fail(code: ErrorCode, reason: str) -> BrokerError:
        error = BrokerError(reason)
        error.code = code
        return error

    max_bytes = int(config.get("max.message.bytes", 1048588))
    compacted = "compact" in str(config.get("cleanup.policy", "delete"))
    reader = BatchReader(raw)
    batches = list(reader)
    if not batches or reader.valid_bytes != len(raw):
        raise fail(ErrorCode.corrupt_message, "record set does not hold whole batches")
    out = bytearray(raw)
    next_offset = log_end_offset
    for batch in batches:
        if not isinstance(batch, RecordBatch) or batch.magic != 2:
            raise fail(ErrorCode.invalid_record, "Produce v3+ requires record batches of magic 2")
        if not batch.is_valid:
            raise fail(ErrorCode.corrupt_message, batch.invalid_reason() or "invalid batch")
        if batch.size > max_bytes:
            raise fail(ErrorCode.message_too_large,
                       f"batch of {batch.size} bytes exceeds max.message.bytes {max_bytes}")
        if compacted and any(r.key is None for r in batch.records()):
            raise fail(ErrorCode.invalid_record, "Compacted topic cannot accept message without key")
        state = producers.get(batch.producer_id)
        if batch.producer_id >= 0 and batch.base_sequence != NO_SEQUENCE and state is not None:
            if batch.producer_epoch < state.producer_epoch:
                raise fail(ErrorCode.invalid_producer_epoch, "stale producer epoch")
            if batch.producer_epoch == state.producer_epoch:
                if state.last_sequence >= 0 and batch.base_sequence == state.first_sequence and \
                        batch.last_sequence == state.last_sequence:
                    return _Validated(b"", state.first_offset)
                expected = increment_sequence(state.last_sequence, 1) if state.last_sequence >= 0 else 0
                if batch.base_sequence != expected:
                    raise fail(ErrorCode.out_of_order_sequence_number, "out of order sequence")
            elif batch.base_sequence != 0:
                raise fail(ErrorCode.out_of_order_sequence_number, "new epoch must start at sequence 0")
        stamp_base_offset(out, batch.position, next_offset)
        stamp_leader_epoch(out, batch.position, leader_epoch)
        next_offset += batch.last_offset_delta + 1
    return _Validated(bytes(out))
