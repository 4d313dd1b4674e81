"""Partition: this broker's replica of one topic-partition (Kafka's cluster.Partition).

It holds the log (through the LogManager's ManagedLog), the leader epoch and the high watermark, appends a
client's records as leader (validation in storage, then the LogManager's append) and serves reads bounded by
the high watermark or, for read_committed, the last stable offset. Standalone, every partition is led here and
the high watermark is the log end offset.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kcli.broker.errors import OffsetOutOfRangeError
from kcli.broker.log_manager import ManagedLog
from kcli.storage.index import AbortedTxn
from kcli.storage.reader import PartitionReader, TimestampMatch

LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP = -1, -2, -3


@dataclass
class ReadResult:
    records: Any  # b"" or a FetchSlice holding its segment file open until the response is sent
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    aborted: list[AbortedTxn] | None = None


@dataclass
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    managed: ManagedLog
    leader_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)

    @property
    def log(self):
        return self.managed.log

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset  # standalone: every replica is this one

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the high watermark (KIP-98)."""
        first_unstable = self.log.producer_state.first_unstable_offset()
        return self.high_watermark if first_unstable is None else min(first_unstable, self.high_watermark)

    def reader(self) -> PartitionReader:
        with self.managed.lock:
            return self.log.reader()

    def read(self, fetch_offset: int, max_bytes: int, *, read_committed: bool, min_one_message: bool,
             max_offset: int | None = None) -> ReadResult:
        """Kafka's Partition.readRecords: OffsetOutOfRangeError outside [log start, log end]."""
        start, end, hw = self.log_start_offset, self.log_end_offset, self.high_watermark
        stable = self.last_stable_offset
        if fetch_offset < start or fetch_offset > end:
            raise OffsetOutOfRangeError(f"offset {fetch_offset} is outside [{start}, {end}] of {self.topic}-{self.index}")
        upper = stable if read_committed else hw
        if max_offset is not None:
            upper = min(upper, max_offset)
        result = ReadResult(b"", hw, stable, start, end)
        if max_bytes <= 0 and not min_one_message or fetch_offset >= upper:
            return result
        # Under the log's lock, so no retention delete or cleaner swap runs between finding the bytes and
        # opening their file; the slice keeps the file open until the response is sent (sendfile).
        with self.managed.lock:
            found = self.log.read(fetch_offset, max_bytes, max_offset=upper, keep_open=True,
                                  min_one_batch=min_one_message)
            reader = self.log.reader() if read_committed and found is not None else None
        if found is None:
            return result
        result.records = found
        if reader is not None:
            result.aborted = reader.aborted_transactions(fetch_offset, stable)
        return result

    def offset_for_timestamp(self, timestamp: int) -> TimestampMatch | None:
        """ListOffsets: LATEST / EARLIEST / MAX_TIMESTAMP or the earliest offset whose timestamp >= timestamp."""
        if timestamp == LATEST_TIMESTAMP:
            return TimestampMatch(self.high_watermark, -1)
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampMatch(self.log_start_offset, -1)
        reader = self.reader()
        match = reader.max_timestamp() if timestamp == MAX_TIMESTAMP else reader.offset_for_timestamp(timestamp)
        if match is not None and match.offset < self.log_start_offset:
            return TimestampMatch(self.log_start_offset, match.timestamp)
        return match

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0 (Kafka's Partition.legacyFetchOffsetsForTimestamp): the log's offsets before a time,
        newest first (``PartitionLog.legacy_offsets_before``). Kafka caps a consumer's answer at the high
        watermark; standalone that is the log end, which no answer passes."""
        with self.managed.lock:
            return self.log.legacy_offsets_before(timestamp, max_num_offsets, int(time.time() * 1000))
