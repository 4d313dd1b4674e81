"""Partition: this broker's replica of one topic-partition (Kafka's cluster.Partition).

It holds the log (through the LogManager's ManagedLog), the leader epoch and the high watermark, appends a
client's records as leader (validation in storage, then the LogManager's append) and serves reads bounded by
the high watermark or, for read_committed, the last stable offset. Standalone, every partition is led here and
the high watermark is the log end offset.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any

from kcli.broker.errors import OffsetOutOfRangeError
from kcli.broker.log_manager import LogManager, ManagedLog
from kcli.storage.index import AbortedTxn
from kcli.storage.reader import FetchSlice, PartitionReader, TimestampMatch

LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP = -1, -2, -3


class OpenRegion:
    """Bytes of an open segment file: a Fetch response holds the file open, so a retention delete or a
    cleaner swap between building the response and sending it (sendfile) cannot take the bytes away."""

    file_region = True
    __slots__ = ("fd", "position", "length")

    def __init__(self, fd: int, position: int, length: int) -> None:
        self.fd, self.position, self.length = fd, position, length

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        return os.pread(self.fd, self.length, self.position)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


@dataclass
class ReadResult:
    records: Any  # b"" or an OpenRegion
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    aborted: list[AbortedTxn] | None = None


@dataclass
class AppendResult:
    base_offset: int
    last_offset: int
    log_append_time: int = -1
    log_start_offset: int = 0
    duplicate: bool = False


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
        open_txns = [e.current_txn_first_offset for e in self.log.producers.values() if e.current_txn_first_offset >= 0]
        return min(min(open_txns, default=self.high_watermark), self.high_watermark)

    def reader(self) -> PartitionReader:
        with self.managed.lock:
            return PartitionReader(self.managed.directory, list(self.log.segments), self.log.log_end_offset)

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
        reader = self.reader()
        for _attempt in range(3):
            found = reader.read(fetch_offset, max_bytes, upper_bound=upper, min_one_message=min_one_message)
            if found is None:
                return result
            region = _open(found)
            if region is not None:
                result.records = region
                break
            reader = self.reader()  # the segment was deleted or swapped since the lookup: look again
        if read_committed:
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


def _open(found: FetchSlice) -> OpenRegion | None:
    try:
        fd = os.open(found.path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    return OpenRegion(fd, found.position, found.length)


def managed_logs(log_manager: LogManager) -> list[ManagedLog]:
    return [p for t in log_manager.topics.values() for p in t.partitions]
