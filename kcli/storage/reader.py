"""Reading a partition for consumers: whole batches from an offset, and offsets by timestamp.

Kafka's LogSegment.read / UnifiedLog.fetchOffsetByTimestamp: the offset index gives a position at or
before the target, a short forward scan finds the batch holding it, and whole batches are returned (a
client filters records below its fetch offset; the first batch is returned even if larger than the limit,
KIP-74) so a consumer never stalls on a big batch.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path

from kcli.storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, segment_path
from kcli.storage.index import AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex
from kcli.storage.segment import FETCH_SCAN_SLACK, FetchSlice, FileBatchReader, LogSegment

__all__ = ["FETCH_SCAN_SLACK", "FetchSlice", "PartitionReader", "TimestampMatch"]


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

    def read(self, offset: int, max_bytes: int, *, upper_bound: int | None = None) -> FetchSlice | None:
        """Whole batches from the one holding ``offset``, at most ``max_bytes`` (but at least one batch);
        None when ``offset`` is beyond the log end. ``upper_bound`` caps reads (e.g. at the high watermark)."""
        end_offset = self.log_end_offset if upper_bound is None else upper_bound
        if offset >= end_offset:
            return None
        # A segment can be empty (rolled, or emptied by recovery): move on to the next one.
        start_index = max(bisect.bisect_right(self.bases, offset) - 1, 0)
        for base in self.bases[start_index:]:
            found = LogSegment(segment_path(self.directory, base, LOG_SUFFIX), base).read(
                offset, max_bytes, max_offset=end_offset)
            if found is not None:
                return found
        return None

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
