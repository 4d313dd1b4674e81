"""ReplicaManager: the partitions this broker holds, appends and reads on them, and the delayed operations
waiting on them (Kafka's ReplicaManager).

Handlers call `append_records` and `fetch_messages` with decoded request data and get per-partition results
or typed errors; nothing here knows wire formats beyond the record bytes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import (
    InvalidRequiredAcksError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    error_code_for,
    error_message_for,
)
from kcli.broker.log_manager import LogManager
from kcli.broker.partition import Partition, ReadResult
from kcli.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from kcli.errors import KcliError
from kcli.storage.log import LogAppendInfo
from kcli.storage.producer_state import AppendOrigin

log = logging.getLogger("kcli.broker")

TopicPartition = tuple[str, int]


@dataclass
class PartitionAppend:
    error: Any  # ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    record_errors: list[tuple[int, str]] = field(default_factory=list)  # (batch index, message)


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
                       origin: AppendOrigin = AppendOrigin.CLIENT) -> dict[TopicPartition, PartitionAppend]:
        """Validate and append each partition's record set (Kafka's appendRecords; acks 0, 1 and -1 are
        served alike on one broker, the ISR being this broker). Magic 0/1 message sets (Produce v0-v2) are
        converted to v2 by the validator, as Kafka converts them on append."""
        if acks not in (0, 1, -1):
            error = InvalidRequiredAcksError(f"acks must be 0, 1 or -1, not {acks}")
            return {tp: PartitionAppend(error.code, message=error.reason) for tp in entries}
        results: dict[TopicPartition, PartitionAppend] = {}
        for tp, raw in entries.items():
            try:
                partition = self.get_partition(*tp)
                appended = self._append_to_leader(partition, raw, origin)
                results[tp] = PartitionAppend(ErrorCode.none, appended.first_offset, appended.log_append_time,
                                              appended.log_start_offset)
            except Exception as exc:  # typed errors become codes; anything else is a bug, logged once there
                code = error_code_for(exc)
                if isinstance(exc, KcliError):
                    log.warning("rejected produce to %s-%d: %s", tp[0], tp[1], exc.reason)
                partition = self.find(*tp)
                results[tp] = PartitionAppend(code, log_start_offset=partition.log_start_offset if partition else -1,
                                              message=error_message_for(exc),
                                              record_errors=list(getattr(exc, "record_errors", ())))
        return results

    def _append_to_leader(self, partition: Partition, raw: bytes, origin: AppendOrigin) -> LogAppendInfo:
        info = self.log_manager.append_as_leader(partition.managed, raw, leader_epoch=partition.leader_epoch,
                                                 origin=origin)
        if not info.duplicate:
            self.fetch_purgatory.check_and_complete((partition.topic, partition.index))
            if self.on_flush_due is not None and self.log_manager.flush_due(partition.managed):
                self.on_flush_due(partition.managed)
        return info

    def delete_records(self, topic: str, index: int, offset: int) -> int:
        """Kafka's deleteRecords on the leader: -1 means the high watermark; beyond it is out of range."""
        partition = self.get_partition(topic, index)
        target = partition.high_watermark if offset == -1 else offset
        if target < 0 or target > partition.high_watermark:
            raise OffsetOutOfRangeError(f"Cannot increment the log start offset to {offset} of partition "
                                        f"{topic}-{index} since it is larger than the high watermark "
                                        f"{partition.high_watermark}")
        low = self.log_manager.delete_records_before(partition.managed, target)
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
