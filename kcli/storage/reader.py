"""Reading a partition for consumers: whole batches from an offset, and offsets by timestamp.

Kafka's LogSegment.read / UnifiedLog.fetchOffsetByTimestamp: the offset index gives a position at or
before the target, a short forward scan finds the batch holding it, and whole batches are returned (a
client filters records below its fetch offset; the first batch is returned even if larger than the limit,
KIP-74) so a consumer never stalls on a big batch.
"""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from pathlib import Path

from kcli.errors import KcliError
from kcli.records.layout import HEAD_THROUGH_LAST_OFFSET_DELTA, MAGIC_OFFSET, RECORD_BATCH_OVERHEAD
from kcli.records.record_set import make_batch
from kcli.storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, segment_path
from kcli.storage.index import AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex
from kcli.storage.segment import DEFAULT_WINDOW, FileBatchReader

FETCH_SCAN_SLACK = 64 * 1024  # > index.interval.bytes: covers the scan from the index entry to the offset


@dataclass(frozen=True, slots=True)
class FetchSlice:
    """Bytes [position, position + length) of ``path`` hold whole batches starting at or before the offset."""

    path: Path
    position: int
    length: int

    # A Fetch response carries this as its records field; the server sends it with sendfile (zero-copy).
    file_region = True

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        if self.length == 0:
            return b""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            return os.pread(fd, self.length, self.position)
        finally:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class TimestampMatch:
    offset: int
    timestamp: int


class PartitionReader:
    """Read side of one partition directory, given its sorted segment base offsets and log end offset."""

    def __init__(self, directory: Path, segment_bases: list[int], log_end_offset: int) -> None:
        self.directory = Path(directory)
        self.bases = segment_bases
        self.log_end_offset = log_end_offset

    def _segment_for(self, offset: int) -> int:
        i = bisect.bisect_right(self.bases, offset) - 1
        return self.bases[max(i, 0)]

    def read(self, offset: int, max_bytes: int, *, upper_bound: int | None = None,
             min_one_message: bool = True) -> FetchSlice | None:
        """Whole batches from the one holding ``offset``, at most ``max_bytes``; None when ``offset`` is beyond
        the log end. ``upper_bound`` caps reads (e.g. at the high watermark). With ``min_one_message`` the first
        batch is returned whole even when larger than ``max_bytes``; without it (every partition of a Fetch but
        the first with data) the slice is cut at ``max_bytes``, possibly mid-batch, as Kafka's LogSegment.read
        does: clients drop a partial trailing batch."""
        end_offset = self.log_end_offset if upper_bound is None else upper_bound
        if offset >= end_offset:
            return None
        # A segment can be empty (rolled, or emptied by recovery): move on to the next one.
        start_index = max(bisect.bisect_right(self.bases, offset) - 1, 0)
        for base in self.bases[start_index:]:
            found = self._read_segment(base, offset, max_bytes, end_offset)
            if found is not None:
                if not min_one_message and found.length > max_bytes:
                    return FetchSlice(found.path, found.position, max_bytes) if max_bytes > 0 else None
                return found
        return None

    def _read_segment(self, base: int, offset: int, max_bytes: int, end_offset: int) -> FetchSlice | None:
        log_path = segment_path(self.directory, base, LOG_SUFFIX)
        start = 0
        index_path = segment_path(self.directory, base, INDEX_SUFFIX)
        if offset > base and index_path.exists():
            with OffsetIndex(index_path, base) as index:
                start = index.lookup(offset).position
        first_position = None
        end_position = None
        # Read about what the fetch may return (plus the scan from the index entry), not a whole window:
        # librdkafka asks for 1 MiB per partition, and an 8 MiB read per Fetch was the consume hot spot.
        reader = FileBatchReader(log_path, start, window=min(DEFAULT_WINDOW, max_bytes + FETCH_SCAN_SLACK))
        for chunk, local, total in reader.spans():
            position = reader.window_position + local
            first, last = _offsets(chunk, local, total)
            if first >= end_offset:
                break
            if first_position is None:
                if last < offset:
                    continue
                first_position = position
            elif position + total - first_position > max_bytes:
                break
            end_position = position + total
        if first_position is None or end_position is None:
            return None
        return FetchSlice(log_path, first_position, end_position - first_position)

    def aborted_transactions(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, end), from the .txnindex files (read_committed fetches,
        Kafka `collectAbortedTransactions`): from the segment holding ``start`` until an index says it is complete."""
        found: list[AbortedTxn] = []
        first = max(bisect.bisect_right(self.bases, start) - 1, 0)
        for base in self.bases[first:]:
            path = segment_path(self.directory, base, TXN_INDEX_SUFFIX)
            if not path.exists():
                continue
            with TransactionIndex(path, base) as index:
                result = index.collect_aborted(start, end)
            found.extend(result.aborted_transactions)
            if result.is_complete:
                break
        return found

    def offset_for_timestamp(self, timestamp: int) -> TimestampMatch | None:
        """The first record with a timestamp >= ``timestamp`` (ListOffsets by time), via the time index."""
        for base in self.bases:
            time_index_path = segment_path(self.directory, base, TIME_INDEX_SUFFIX)
            start = 0
            if time_index_path.exists():
                with TimeIndex(time_index_path, base) as tindex:
                    if tindex.entry_count and tindex.last_entry.timestamp < timestamp and base != self.bases[-1]:
                        continue  # every record of this segment is older
                    floor = tindex.lookup_by_timestamp(timestamp)
                index_path = segment_path(self.directory, base, INDEX_SUFFIX)
                if floor.offset > base and index_path.exists():
                    with OffsetIndex(index_path, base) as index:
                        start = index.lookup(floor.offset).position
            for batch in FileBatchReader(segment_path(self.directory, base, LOG_SUFFIX), start):
                if batch.max_timestamp < timestamp:
                    continue
                for record in batch.records():
                    if record.timestamp >= timestamp:
                        return TimestampMatch(record.offset, record.timestamp)
        return None

    def max_timestamp(self) -> TimestampMatch | None:
        """The record with the largest timestamp (ListOffsets MAX_TIMESTAMP, KIP-734)."""
        best: TimestampMatch | None = None
        for base in self.bases:
            for batch in FileBatchReader(segment_path(self.directory, base, LOG_SUFFIX)):
                if best is None or batch.max_timestamp > best.timestamp:
                    for record in batch.records():
                        if best is None or record.timestamp > best.timestamp:
                            best = TimestampMatch(record.offset, record.timestamp)
        return best


def _offsets(chunk: bytes, local: int, total: int) -> tuple[int, int]:
    if chunk[local + MAGIC_OFFSET] >= 2 and total >= RECORD_BATCH_OVERHEAD:
        base_offset, _size, _epoch, _magic, _crc, _attributes, last_offset_delta = (
            HEAD_THROUGH_LAST_OFFSET_DELTA.unpack_from(chunk, local))
        return base_offset, base_offset + last_offset_delta
    batch = make_batch(chunk[local : local + total], local)  # legacy: a wrapper's first offset needs its inner set
    try:
        return batch.base_offset, batch.last_offset
    except KcliError:
        return batch.last_offset, batch.last_offset
