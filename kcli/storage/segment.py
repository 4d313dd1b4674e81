"""LogSegment: a ``.log`` file plus its ``.index``, ``.timeindex`` and ``.txnindex``, named by base offset.

``FileBatchReader`` walks the batches of a .log file with their byte positions in bounded memory: segments
can be 1 GiB, so they are read through a sliding window of ``os.pread`` calls rather than an mmap.
``SegmentIndexer``/``SegmentIndexes`` hold the per-batch index rules that appends, recovery and the cleaner
share; ``LogSegment`` appends, reads (a ``FetchSlice`` region the broker sends with sendfile), flushes,
truncates and closes one segment. "This class is not thread-safe", as Kafka's.
Kafka: storage/.../log/{LogSegment,FileRecords}.java.
"""

from __future__ import annotations

import bisect
import collections
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, BinaryIO

from kcli.errors import CorruptBatchSizeError, InputError, KcliError
from kcli.records.batch import RECORD_BATCH_OVERHEAD, read_header_field
from kcli.records.record_set import (
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    LOG_OVERHEAD_STRUCT,
    MAGIC_OFFSET,
    MIN_RECORD_OVERHEAD,
    Batch,
    StopReason,
    make_batch,
)
from kcli.records.types import NO_TIMESTAMP
from kcli.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_from_filename,
    open_regular,
    segment_path,
)
from kcli.storage.index import AbortedTxn, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset, TransactionIndex
from kcli.storage.log_config import LogConfig

DEFAULT_WINDOW = 8 * 1024 * 1024


class FileBatchReader:
    """Iterate the batches of ``path[start:end]`` with Kafka's FileLogInputStream rules.

    Same contract as ``BatchReader``: after iteration ``valid_bytes`` is the file position after the
    last complete batch, ``stop`` says why iteration ended, ``declared_size`` the size of a partial one.
    ``reuse_buffer``: every window is read into one bytearray (no fresh 8 MiB allocation, and its page faults,
    per window): the chunk ``spans`` yields is then overwritten by the next window, for callers that are done
    with a batch's bytes before asking for the next one (verify, recovery).
    """

    def __init__(self, path: str | os.PathLike, start: int = 0, end: int | None = None, *, window: int = DEFAULT_WINDOW,
                 reuse_buffer: bool = False):
        self.path = str(path)
        self.start = start
        self._end = end
        self.window = window
        self.reuse_buffer = reuse_buffer
        self.valid_bytes = start
        self.stop = StopReason.END
        self.declared_size: int | None = None
        self.bytes_read = 0
        self.window_position = start

    def spans(self) -> Iterator[tuple[bytes, int, int]]:
        """(window, index in window, size) of each complete batch; the file position is
        ``window_position + index``, with ``window_position`` updated before each window. The framing is
        BatchReader's, inlined: one generator per file, not one per window and one per batch."""
        fd = open_regular(self.path)  # a FIFO named like a segment is refused, not waited on
        unpack = LOG_OVERHEAD_STRUCT.unpack_from
        overhead, up_to_magic, min_size = LOG_OVERHEAD, HEADER_SIZE_UP_TO_MAGIC, MIN_RECORD_OVERHEAD
        try:
            end = os.fstat(fd).st_size if self._end is None else self._end
            # sized to the file when it is smaller than a window: verify reads 10,000 small segments
            buffer = bytearray(max(0, min(self.window, end - self.start))) if self.reuse_buffer else None
            pos = self.start
            need = self.window
            while True:
                want = min(need, end - pos)
                if buffer is not None:
                    if len(buffer) < want:
                        buffer = bytearray(want)
                    with memoryview(buffer) as view:
                        length = os.preadv(fd, [view[:want]], pos) if want > 0 else 0
                    chunk = buffer
                else:
                    chunk = os.pread(fd, want, pos)
                    length = len(chunk)
                self.bytes_read += length
                self.window_position = pos
                local = 0
                declared = None
                while True:
                    remaining = length - local
                    if remaining <= up_to_magic:
                        stop = StopReason.END if remaining == 0 else StopReason.SHORT_TAIL
                        break
                    size = unpack(chunk, local)[1]
                    if size < min_size:
                        raise CorruptBatchSizeError(
                            f"Found record size {size} smaller than minimum record overhead ({min_size})",
                            path=self.path, position=pos + local)
                    total = overhead + size
                    if total > remaining:
                        stop = StopReason.PARTIAL_BATCH
                        declared = total
                        break
                    yield chunk, local, total
                    local += total
                self.valid_bytes = pos + local
                if pos + length >= end or length == 0:
                    self.stop = stop
                    self.declared_size = declared
                    return
                # Window boundary: re-read from the last complete batch, big enough for the next one.
                need = self.window
                if stop is StopReason.PARTIAL_BATCH and declared and declared > need:
                    need = declared
                if local == 0 and need <= length:
                    need = length + up_to_magic
                pos += local
        finally:
            os.close(fd)

    def __iter__(self) -> Iterator[Batch]:
        for chunk, local, total in self.spans():
            yield make_batch(bytes(chunk[local : local + total]), self.window_position + local)




# -- a region of a segment: what a Fetch sends -------------------------------------------------------

@dataclass(frozen=True, slots=True)
class FetchSlice:
    """Bytes [position, position + length) of ``path`` hold whole batches starting at or before the offset.

    ``file``, when set, is an open file object of the segment taken when the slice was read: reading or
    sending through it survives a rename (retention's ``.deleted``) or removal of the path meanwhile, as
    Kafka's FileRecords slice keeps its FileChannel ("Keep the open file for the response")."""

    path: Path
    position: int
    length: int
    file: BinaryIO | None = field(default=None, compare=False, repr=False)

    # A Fetch response carries this as its records field; the server sends it with sendfile (zero-copy).
    file_region = True

    def __len__(self) -> int:
        return self.length

    @contextmanager
    def opened(self) -> Iterator[BinaryIO]:
        """A file object to read or sendfile the region from: a duplicate of the kept one, else the path."""
        if self.file is not None and not self.file.closed:
            handle = os.fdopen(os.dup(self.file.fileno()), "rb")
        else:
            handle = open(self.path, "rb")
        try:
            yield handle
        finally:
            handle.close()

    def read(self) -> bytes:
        if self.length == 0:
            return b""
        with self.opened() as handle:
            return os.pread(handle.fileno(), self.length, self.position)

    def close(self) -> None:
        """Release the kept file (the region then reads through its path)."""
        if self.file is not None:
            self.file.close()


# -- the per-batch index rules shared by append, recovery and the cleaner -----------------------------

class SegmentIndexer:
    """Which offset/time index entries one batch adds to its segment (LogSegment.append and .recover).

    An entry is due when the bytes appended since the previous one *exceed* the interval, counted before
    the batch, so the batch at position 0 is never indexed; it is keyed by the batch's last offset. The
    time entry is (max timestamp so far, last offset of the batch holding it), only when it moved on.
    ``batch`` is anything with ``max_timestamp``, ``last_offset`` and ``size`` (a Batch, a BatchInfo).
    """

    __slots__ = ("base_offset", "index_interval_bytes", "bytes_since_last_index_entry", "max_timestamp",
                 "offset_of_max_timestamp", "last_time_entry_timestamp")

    def __init__(self, base_offset: int, index_interval_bytes: int = 4096, *,
                 bytes_since_last_index_entry: int = 0, last_time_entry: TimestampOffset | None = None) -> None:
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.bytes_since_last_index_entry = bytes_since_last_index_entry
        # Kafka loads the max timestamp so far from the time index's last entry when it opens a segment.
        last = last_time_entry or TimestampOffset(NO_TIMESTAMP, base_offset)
        self.max_timestamp = self.last_time_entry_timestamp = last.timestamp
        self.offset_of_max_timestamp = last.offset

    def append(self, batch: Any, position: int) -> tuple[OffsetPosition | None, TimestampOffset | None]:
        if batch.max_timestamp > self.max_timestamp:
            self.max_timestamp = batch.max_timestamp
            self.offset_of_max_timestamp = batch.last_offset
        entry = time_entry = None
        if self.bytes_since_last_index_entry > self.index_interval_bytes:
            entry = OffsetPosition(batch.last_offset, position)
            time_entry = self._time_entry()
            self.bytes_since_last_index_entry = 0
        self.bytes_since_last_index_entry += batch.size
        return entry, time_entry

    def final_time_entry(self) -> TimestampOffset | None:
        """The entry Kafka adds when a segment becomes inactive, is closed or recovered (None if a repeat)."""
        return self._time_entry()

    def _time_entry(self) -> TimestampOffset | None:
        if self.max_timestamp <= self.last_time_entry_timestamp:
            return None
        self.last_time_entry_timestamp = self.max_timestamp
        return TimestampOffset(self.max_timestamp, self.offset_of_max_timestamp)


class SegmentIndexes:
    """A segment's writable .index, .timeindex and .txnindex, fed one batch at a time.

    ``lazy`` (a new, empty segment): the .index and .timeindex files are created empty and opened, resized and
    mapped only when first used, as Kafka's LazyIndex does. An open writable index holds two file descriptors
    (its file and the map's); a broker hosting thousands of partitions that never received a record holds
    none of them (with 5 descriptors per partition, 10,000 partitions would pass a 20,000 `ulimit -n`). An
    index is first used once `index.interval.bytes` were appended, by a truncation, or at the close of a
    non-empty segment (its final time entry).
    """

    def __init__(self, base_offset: int, config: LogConfig, *, index_path: Path, time_index_path: Path,
                 txn_index_path: Path, lazy: bool = False) -> None:
        self.base_offset = base_offset
        self.index_path, self.time_index_path = index_path, time_index_path
        self._max_index_size = config.segment_index_bytes
        self._index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        if not (lazy and _created_empty(index_path) and _created_empty(time_index_path)):
            self._index = self.index
            self._time_index = self.time_index
        self.txn_index = TransactionIndex(txn_index_path, base_offset)  # the file appears with its first entry
        time_index = self._time_index
        self.indexer = SegmentIndexer(
            base_offset, config.index_interval_bytes,
            last_time_entry=time_index.last_entry if time_index is not None and time_index.entry_count else None,
        )

    @property
    def index(self) -> OffsetIndex:
        if self._index is None:
            self._index = OffsetIndex(self.index_path, self.base_offset, writable=True,
                                      max_index_size=self._max_index_size)
        return self._index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._time_index = TimeIndex(self.time_index_path, self.base_offset, writable=True,
                                         max_index_size=self._max_index_size)
        return self._time_index

    @property
    def is_full(self) -> bool:
        """Either index is full (a roll is due); an index not opened yet holds no entry."""
        return ((self._index is not None and self._index.is_full)
                or (self._time_index is not None and self._time_index.is_full))

    @classmethod
    def for_segment(cls, directory: Path, base_offset: int, config: LogConfig, *, suffix: str = "",
                    lazy: bool = False) -> SegmentIndexes:
        """The indexes of segment `base_offset`; `suffix` names temporary copies (`.index.tmp`)."""
        return cls(base_offset, config,
                   index_path=segment_path(directory, base_offset, INDEX_SUFFIX + suffix),
                   time_index_path=segment_path(directory, base_offset, TIME_INDEX_SUFFIX + suffix),
                   txn_index_path=segment_path(directory, base_offset, TXN_INDEX_SUFFIX + suffix), lazy=lazy)

    def append(self, batch: Any, position: int, aborted: AbortedTxn | None = None) -> None:
        entry, time_entry = self.indexer.append(batch, position)
        if entry is not None:
            self.index.append(entry.offset, entry.position)
        if time_entry is not None:
            self.time_index.maybe_append(time_entry.timestamp, time_entry.offset)
        if aborted is not None:
            self.txn_index.append(aborted)

    def flush(self) -> None:
        for index in (self._index, self._time_index):
            if index is not None:  # one never opened is the empty file it was created as
                index.flush()
        self.txn_index.flush()

    def close(self, *, sync: bool = True) -> None:
        """Final time-index entry, indexes trimmed to their entries, everything fsynced (unless ``sync`` is
        False)."""
        final = self.indexer.final_time_entry()
        if final is not None:
            self.time_index.maybe_append(final.timestamp, final.offset, skip_full_check=True)
        for index in (self._index, self._time_index):  # opened lazily: None when never used
            if index is not None:
                index.close(sync=sync)
        if sync:
            self.txn_index.flush()
        self.txn_index.close()

    def close_handlers(self) -> None:
        """Release every file and map, nothing trimmed or flushed (the segment is being deleted)."""
        for index in (self._index, self._time_index):
            if index is not None:
                index.close_handlers()
        self.txn_index.close()


def _created_empty(path: Path) -> bool:
    """Create ``path`` if absent (no descriptor kept); True when it is empty."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        return os.fstat(fd).st_size == 0
    finally:
        os.close(fd)


def batch_offsets(chunk: bytes, local: int, total: int) -> tuple[int, int]:
    """(first, last) offset of the batch at ``chunk[local:local + total]`` from its header alone (v2)."""
    if chunk[local + MAGIC_OFFSET] >= 2 and total >= RECORD_BATCH_OVERHEAD:
        base = read_header_field(chunk, local, "base_offset")
        return base, base + read_header_field(chunk, local, "last_offset_delta")
    batch = make_batch(chunk[local : local + total], local)  # legacy: a wrapper's first offset needs its inner set
    try:
        return batch.base_offset, batch.last_offset
    except KcliError:
        return batch.last_offset, batch.last_offset


def first_batch_max_timestamp(path: Path, size: int) -> int | None:
    """The max timestamp of the first batch of ``path`` (what segment.ms ages), reading its header (v2) or
    only that batch (legacy); None when the file holds no whole batch."""
    if size < HEADER_SIZE_UP_TO_MAGIC:
        return None
    with open(path, "rb") as file:
        head = os.pread(file.fileno(), RECORD_BATCH_OVERHEAD, 0)
        if len(head) >= RECORD_BATCH_OVERHEAD and head[MAGIC_OFFSET] >= 2:
            return read_header_field(head, 0, "max_timestamp")
    first = next(iter(FileBatchReader(path, 0, size, window=min(size, 1 << 20))), None)
    return None if first is None else first.max_timestamp


_RECENT_BATCHES = 256  # LogSegment._recent: more than index.interval.bytes (4 KiB) of the smallest batches
FETCH_SCAN_SLACK = 64 * 1024  # > index.interval.bytes: covers the scan from the index entry to the offset
_HEADER_WINDOW = 64 * 1024  # what a Fetch's scan reads at a time: the headers of small batches, one of a large one
_JUMP_WINDOW = 4096  # what it reads after jumping over a batch longer than the window: a header and some more
_V2_OFFSETS_END = 27  # a v2 header holds base offset, length, epoch, magic, CRC, attributes, last offset delta here


def _batch_headers(path: Path, start: int, end: int) -> Iterator[tuple[int, int, int, int]]:
    """(position, size, first offset, last offset) of each whole batch of ``path[start:end]``, by
    FileBatchReader's framing rules (a declared size below the minimum raises, a partial or short tail ends it),
    from the headers alone: 64 KiB windows, and past a batch that runs beyond its window straight to the next
    header (a 4 KiB window there). A Fetch of 1 MiB batches reads a few KiB instead of the megabytes. Legacy (magic 0/1) wrappers
    beyond the window are read whole, as batch_offsets needs their inner set."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror}", path=str(path)) from None
    try:
        chunk, at, pos = b"", start, start
        window = _HEADER_WINDOW
        while True:
            remaining = end - pos
            if remaining <= HEADER_SIZE_UP_TO_MAGIC:
                return
            local = pos - at
            if len(chunk) - local < min(_V2_OFFSETS_END, remaining):
                # past a batch larger than the window the next is likely large too: its header alone, not 64 KiB
                # of records (a Fetch of 1 MiB batches reads two headers); a small one there widens it again
                window = _HEADER_WINDOW if pos < at + len(chunk) + _HEADER_WINDOW else _JUMP_WINDOW
                chunk, at, local = os.pread(fd, min(window, remaining), pos), pos, 0
                if len(chunk) <= HEADER_SIZE_UP_TO_MAGIC:
                    return  # the file is shorter than ``end``
            size = LOG_OVERHEAD_STRUCT.unpack_from(chunk, local)[1]
            if size < MIN_RECORD_OVERHEAD:
                raise CorruptBatchSizeError(
                    f"Found record size {size} smaller than minimum record overhead ({MIN_RECORD_OVERHEAD})",
                    path=str(path), position=pos)
            total = LOG_OVERHEAD + size
            if total > remaining:
                return
            if (chunk[local + MAGIC_OFFSET] >= 2 and total >= RECORD_BATCH_OVERHEAD) or local + total <= len(chunk):
                first, last = batch_offsets(chunk, local, total)  # a v2 header is in the window (total >= 61)
            else:
                whole = os.pread(fd, total, pos)
                if len(whole) < total:
                    return
                first, last = batch_offsets(whole, 0, total)
            yield pos, total, first, last
            pos += total
    finally:
        os.close(fd)


# -- LogSegment ---------------------------------------------------------------------------------------

class LogSegment:
    """One segment: ``[base_offset].log`` plus its indexes. The base offset is <= every offset in the
    segment and > every offset of earlier segments.

    ``LogSegment(log_path)`` is the read side and opens nothing (verify, tools; the name may be any file).
    ``LogSegment.open(directory, base_offset, config)`` opens it for appending: the .log in append mode
    and the indexes writable (Kafka's active segment). Not thread-safe.
    """

    def __init__(self, log_path: str | os.PathLike, base_offset: int | None = None) -> None:
        self.log_path = Path(log_path)
        self.base_offset = offset_from_filename(self.log_path.name) if base_offset is None else base_offset
        self.log: BinaryIO | None = None  # the append handle, when open for appends
        self.indexes: SegmentIndexes | None = None
        self._size: int | None = None
        self.next_offset = self.base_offset
        self.first_timestamp: int | None = None  # the first batch's max timestamp: what segment.ms ages
        # (last offset, position) of the batches appended last: a read at the tail (followers, caught-up consumers)
        # starts at its batch instead of scanning the headers from the index entry before it (up to
        # index.interval.bytes of small batches)
        self._recent: collections.deque[tuple[int, int]] = collections.deque(maxlen=_RECENT_BATCHES)

    @classmethod
    def open(cls, directory: str | os.PathLike, base_offset: int, config: LogConfig, *,
             resume: bool = False) -> LogSegment:
        """Open (creating if absent) segment ``base_offset`` of ``directory`` for appends; ``resume``
        continues an existing one (next offset, bytes since the last index entry, first timestamp)."""
        segment = cls(segment_path(Path(directory), base_offset, LOG_SUFFIX), base_offset)
        segment.log = open(segment.log_path, "ab")
        segment._size = segment.log.tell()
        segment.indexes = SegmentIndexes.for_segment(Path(directory), base_offset, config, lazy=not resume)
        if resume:
            segment._resume()
        return segment

    def _resume(self) -> None:
        """The next offset from a scan after the last index entry (Kafka `readNextOffset`), the bytes since
        that entry, the first batch's max timestamp (its header only) and the max timestamp so far (the time
        index's last entry, then the batches after the last offset index entry: after a crash the time index
        lacks the entry a clean close adds)."""
        assert self.indexes is not None
        size = self.size
        last = self.indexes.index.last_entry  # (base offset, 0) when the index is empty
        self.first_timestamp = first_batch_max_timestamp(self.log_path, size)
        indexer = self.indexes.indexer
        reader = FileBatchReader(self.log_path, last.position, size)
        for batch in reader:
            self.next_offset = batch.last_offset + 1
            if batch.max_timestamp > indexer.max_timestamp:
                indexer.max_timestamp = batch.max_timestamp
                indexer.offset_of_max_timestamp = batch.last_offset
        if reader.valid_bytes != size:
            raise KcliError(f"invalid bytes after byte {reader.valid_bytes}: open the log with recovery",
                            path=str(self.log_path), position=reader.valid_bytes)
        indexer.bytes_since_last_index_entry = size - last.position

    # The index paths are built on first use: a broker's startup creates a LogSegment per segment (10,000 of
    # them) and most are never read before they are deleted.
    @cached_property
    def _stem(self) -> str:
        name = self.log_path.name
        return name[: -len(LOG_SUFFIX)] if name.endswith(LOG_SUFFIX) else self.log_path.stem

    @cached_property
    def index_path(self) -> Path:
        return self.log_path.with_name(self._stem + INDEX_SUFFIX)

    @cached_property
    def time_index_path(self) -> Path:
        return self.log_path.with_name(self._stem + TIME_INDEX_SUFFIX)

    @cached_property
    def txn_index_path(self) -> Path:
        return self.log_path.with_name(self._stem + TXN_INDEX_SUFFIX)

    # -- stats ---------------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return self._size if self._size is not None else self.log_path.stat().st_size

    @property
    def is_open(self) -> bool:
        return self.log is not None

    def largest_timestamp(self) -> int:
        """Kafka `largestTimestamp`: the max timestamp so far (an open segment), else the time index's last
        entry, which an inactive segment's final entry makes the max; the file's mtime when there is none."""
        if self.indexes is not None and self.indexes.indexer.max_timestamp != NO_TIMESTAMP:
            return self.indexes.indexer.max_timestamp
        if self.time_index_path.exists():
            with TimeIndex(self.time_index_path, self.base_offset) as tindex:
                if tindex.entry_count and not tindex.is_preallocated:
                    return tindex.last_entry.timestamp
        return int(self.log_path.stat().st_mtime * 1000)

    def batches(self, start_position: int = 0, end_position: int | None = None) -> FileBatchReader:
        return FileBatchReader(self.log_path, start_position, end_position)

    def should_roll(self, config: LogConfig, *, incoming_bytes: int, max_timestamp: int, last_offset: int,
                    jitter_ms: int = 0) -> bool:
        """Kafka `LogSegment.shouldRoll`: a non-empty segment rolls before an append that would pass
        segment.bytes, whose max timestamp is more than segment.ms (less jitter) after the segment's first
        batch, when an index is full, or when the last offset no longer fits a relative index entry."""
        size = self.size
        if size == 0:
            return False
        if size > config.segment_bytes - incoming_bytes:
            return True
        if self.first_timestamp is not None and self.first_timestamp >= 0 and \
                max_timestamp - self.first_timestamp > config.segment_ms - jitter_ms:
            return True
        if self.indexes is not None and self.indexes.is_full:
            return True
        return last_offset - self.base_offset > 2**31 - 1

    # -- appends -------------------------------------------------------------------------------
    def append(self, raw: bytes, batch: Any, aborted: AbortedTxn | None = None) -> int:
        """Append one batch's bytes; ``batch`` describes it (``last_offset``, ``max_timestamp``, ``size``: a
        Batch or a validator BatchInfo). Returns the file position it was written at."""
        if self.log is None or self.indexes is None:
            raise KcliError("segment is not open for appends", path=str(self.log_path))
        if self.first_timestamp is None:
            self.first_timestamp = batch.max_timestamp
        position = self.size
        self.log.write(raw)
        self._size = position + len(raw)
        self._recent.append((batch.last_offset, position))
        self.indexes.append(batch, position, aborted)
        self.next_offset = batch.last_offset + 1
        return position

    def flush_to_os(self) -> None:
        if self.log is not None:
            self.log.flush()

    def flush(self) -> None:
        """Kafka `LogSegment.flush`: the .log and its indexes made durable."""
        if self.log is not None:
            self.log.flush()
            os.fsync(self.log.fileno())
        if self.indexes is not None:
            self.indexes.flush()

    def close(self, *, sync: bool = True) -> None:
        """Final time-index entry, trimmed indexes, fsync (unless ``sync`` is False: the bytes are handed to
        the OS and the caller fsyncs the files later); the segment becomes read-only."""
        if self.log is not None:
            self.log.flush()
            if sync:
                os.fsync(self.log.fileno())
            self.log.close()
            self.log = None
        if self.indexes is not None:
            self.indexes.close(sync=sync)
            self.indexes = None
        self._size = None
        self._recent.clear()

    def close_handlers(self) -> None:
        """Kafka `LogSegment.closeHandlers`: release the files without flushing (the log is being deleted)."""
        if self.log is not None:
            self.log.close()
            self.log = None
        if self.indexes is not None:
            self.indexes.close_handlers()
            self.indexes = None
        self._size = None
        self._recent.clear()

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= ``offset`` (Kafka `LogSegment.truncateTo`): from the .log
        and, with their entries, from the indexes. Returns the bytes removed. The segment must be open."""
        if self.log is None or self.indexes is None:
            raise KcliError("segment is not open for appends", path=str(self.log_path))
        self.log.flush()
        position = self.size
        next_offset = self.base_offset
        first_timestamp = None
        for batch in FileBatchReader(self.log_path, 0, self.size):
            if batch.last_offset >= offset:
                position = batch.position
                break
            next_offset = batch.last_offset + 1
            if first_timestamp is None:
                first_timestamp = batch.max_timestamp
        removed = self.size - position
        self._recent.clear()
        indexes = self.indexes
        indexes.index.truncate_to(offset)
        indexes.time_index.truncate_to(offset)
        indexes.txn_index.truncate_to(offset)
        os.truncate(self.log_path, position)
        self._size = position
        self.next_offset = next_offset
        self.first_timestamp = first_timestamp
        last_time = indexes.time_index.last_entry if indexes.time_index.entry_count else None
        indexes.indexer = SegmentIndexer(self.base_offset, indexes.indexer.index_interval_bytes, last_time_entry=last_time,
                                         bytes_since_last_index_entry=position - indexes.index.last_entry.position)
        return removed

    # -- reads ---------------------------------------------------------------------------------
    def read(self, start_offset: int, max_bytes: int, *, max_position: int | None = None,
             max_offset: int | None = None, min_one_batch: bool = True, keep_open: bool = False) -> FetchSlice | None:
        """Whole batches from the one holding ``start_offset``, at most ``max_bytes`` (at least one batch
        with ``min_one_batch``, KIP-74), none at or past file position ``max_position`` or starting at or past
        ``max_offset`` (the high watermark / last stable offset). None when no batch qualifies.

        Kafka `LogSegment.read`: the offset index gives a position at or before the offset, a short forward
        scan finds the batch. ``keep_open`` keeps an open file in the slice (see FetchSlice)."""
        handle = open(self.log_path, "rb") if keep_open else None
        try:
            found = self._read(start_offset, max_bytes, max_position, max_offset, min_one_batch)
        except BaseException:
            if handle is not None:
                handle.close()
            raise
        if found is None:
            if handle is not None:
                handle.close()
            return None
        return FetchSlice(self.log_path, found[0], found[1], handle)

    def _read(self, offset: int, max_bytes: int, max_position: int | None, max_offset: int | None,
              min_one_batch: bool) -> tuple[int, int] | None:
        start = 0
        recent = self._recent
        if recent and recent[0][0] < offset <= recent[-1][0]:
            # the first recent batch ending at or past the offset holds it: the one before ends below it (the index
            # would give a position at or before it)
            start = recent[bisect.bisect_left(recent, (offset, -1))][1]
        elif offset > self.base_offset:
            if self.indexes is not None:
                start = self.indexes.index.lookup(offset).position
            elif self.index_path.exists():
                with OffsetIndex(self.index_path, self.base_offset) as index:
                    start = index.lookup(offset).position
        end = self.size if max_position is None else min(max_position, self.size)
        if start >= end:
            return None
        first_position = end_position = None
        # Batch headers only (_batch_headers): the records themselves go out with sendfile.
        headers = _batch_headers(self.log_path, start, end)
        try:
            for position, total, first, last in headers:
                if max_offset is not None and first >= max_offset:
                    break
                if first_position is None:
                    if last < offset:
                        continue
                    if not min_one_batch and total > max_bytes:
                        return None
                    first_position = position
                elif position + total - first_position > max_bytes:
                    break
                end_position = position + total
        finally:
            headers.close()
        if first_position is None or end_position is None:
            return None
        return first_position, end_position - first_position

    def __repr__(self) -> str:
        return f"LogSegment({str(self.log_path)!r}, base_offset={self.base_offset})"
