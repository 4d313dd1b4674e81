"""Segment indexes: OffsetIndex (.index), TimeIndex (.timeindex) and TransactionIndex (.txnindex).

Ports Kafka's `AbstractIndex`, `OffsetIndex`, `TimeIndex`, `TransactionIndex` and `AbortedTxn`
(storage/.../internals/log). Every public API speaks absolute offsets; relative offsets exist only on disk.
Offset and time indexes are read through mmap, so a 10 MiB preallocated file costs only the pages touched.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from abc import ABC, abstractmethod
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, ClassVar, Generic, Self, TypeVar

from kcli.errors import CorruptIndexError, InputError
from kcli.storage.files import offset_from_filename, open_regular

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024  # segment.index.bytes
NO_TIMESTAMP = -1  # RecordBatch.NO_TIMESTAMP
_INT32_MAX = 0x7FFFFFFF

OFFSET_INDEX_ENTRY = struct.Struct(
    ">"
    "i"  # relativeOffset: offset - segment base offset (since 2.0 the last offset of the indexed batch)
    "i"  # position: byte position of the batch start in the .log
)
TIME_INDEX_ENTRY = struct.Struct(
    ">"
    "q"  # timestamp: max timestamp seen up to and including the offset
    "i"  # relativeOffset: last offset of the batch holding that max timestamp, minus the base offset
)
ABORTED_TXN = struct.Struct(
    ">"
    "h"  # version = 0 (Kafka reads only the high byte; identical for every version it ever wrote)
    "q"  # producerId
    "q"  # firstOffset: may lie in an earlier segment
    "q"  # lastOffset: offset of the ABORT marker, which lives in this segment
    "q"  # lastStableOffset: LSO at the time of the abort
)
ABORTED_TXN_VERSION = 0
_TXN_READ_CHUNK = ABORTED_TXN.size * 4096
_LITTLE_ENDIAN = sys.byteorder == "little"
_COUNT_CHUNK_SLOTS = 65536  # at most this many slots compared per step when counting valid entries


class InvalidOffsetError(CorruptIndexError):
    """Kafka's InvalidOffsetException: an append that would not move the index forward.

    Recovery reacts to it differently from other corruption (segment truncated to its base offset).
    """


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    offset: int
    position: int


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    timestamp: int
    offset: int


E = TypeVar("E", OffsetPosition, TimestampOffset)


class AbstractIndex(ABC, Generic[E]):
    """Fixed-width index mechanics shared by OffsetIndex and TimeIndex (Kafka `AbstractIndex`).

    A writable index is preallocated to `floor(max_index_size / entry) * entry` bytes of zeros, like
    Kafka's, and trimmed to its valid entries by `close()`.
    """

    ENTRY: ClassVar[struct.Struct]
    _OFFSET_FIELD: ClassVar[int]  # position of relativeOffset in ENTRY
    _OFFSET_INT: ClassVar[int]  # position of relativeOffset in ENTRY as 4-byte words

    def __init__(
        self,
        path: str | os.PathLike[str],
        base_offset: int | None = None,
        *,
        writable: bool = False,
        max_index_size: int = DEFAULT_MAX_INDEX_SIZE,
    ) -> None:
        """Open read-only, or with `writable=True` (creating the file if absent) to append after the
        existing valid entries; a writable index is resized to `max_index_size` like an active segment's."""
        if writable and max_index_size < self.ENTRY.size:
            raise ValueError(f"Invalid max index size: {max_index_size}")
        self.path = Path(path)
        self.base_offset = offset_from_filename(self.path.name) if base_offset is None else base_offset
        self._writable = writable
        self._mm: mmap.mmap | None = None
        self._entries: int | None = None  # valid entries; counted lazily when read-only
        try:
            if writable:
                self._file = os.fdopen(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644), "r+b", buffering=0)
            else:
                self._file = os.fdopen(open_regular(self.path), "rb")  # a FIFO is refused, not waited on
        except InputError as error:
            raise InputError(f"cannot open index: {error.reason.removeprefix('cannot open: ')}",
                             path=str(self.path)) from error
        except OSError as error:
            raise InputError(f"cannot open index: {error.strerror or error}", path=str(self.path)) from error
        self.length = os.fstat(self._file.fileno()).st_size
        self._map()
        if writable:
            self._entries = self._count_valid()
            self.resize(max(max_index_size, self._entries * self.ENTRY.size))
        else:
            self._file.close()  # the map keeps its own reference to the file
            self._file = None

    # -- reading ---------------------------------------------------------------------------------

    @property
    def file_entry_slots(self) -> int:
        """Entries Kafka sees when it opens the file: length // entry size, zero padding included."""
        return self.length // self.ENTRY.size

    @property
    def trailing_bytes(self) -> int:
        return self.length % self.ENTRY.size

    @property
    def entry_count(self) -> int:
        """Valid entries: up to the first slot i > 0 whose relative offset is 0 (DumpLogSegments' rule)."""
        if self._entries is None:
            self._entries = self._count_valid()
        return self._entries

    @property
    def is_preallocated(self) -> bool:
        """The valid entries are followed by a zero-filled tail (active segment, or a crash before trim)."""
        if self._mm is None or self.entry_count == self.file_entry_slots:
            return False
        return _all_zero(self.path, self._mm, self.entry_count * self.ENTRY.size, self.length)

    @property
    def max_entries(self) -> int:
        return self.file_entry_slots

    @property
    def is_full(self) -> bool:
        return self.entry_count >= self.max_entries

    def entries(self) -> Iterator[E]:
        for slot in range(self.entry_count):
            yield self._entry_at(slot)

    def entry(self, n: int) -> E:
        if not 0 <= n < self.entry_count:
            raise IndexError(
                f"Attempt to fetch the {n}th entry from index {self._abspath()}, which has size {self.entry_count}"
            )
        return self._entry_at(n)

    @property
    def last_entry(self) -> E:
        """Last valid entry, or the empty-index sentinel that `lookup` returns below the first entry."""
        return self._entry_at(self.entry_count - 1) if self.entry_count else self._empty_entry()

    def lookup(self, offset: int) -> E:
        """Entry with the largest offset <= `offset`; below the first entry, the empty-index sentinel."""
        slot = self._floor_slot(offset, lambda entry: entry.offset)
        return self._entry_at(slot) if slot >= 0 else self._empty_entry()

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _INT32_MAX

    # -- writing ---------------------------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= `offset` (Kafka `truncateTo`)."""
        self._require_writable()
        slot = self._floor_slot(offset, lambda entry: entry.offset)
        if slot < 0:
            keep = 0
        elif self._entry_at(slot).offset == offset:
            keep = slot
        else:
            keep = slot + 1
        if self._mm is not None:
            # Kafka only moves its write position; zeroing keeps a later crash from resurrecting the entries.
            start, end = keep * self.ENTRY.size, self.entry_count * self.ENTRY.size
            self._mm[start:end] = bytes(end - start)
        self._entries = keep

    def resize(self, new_size: int) -> bool:
        """Set the file length to `floor(new_size / entry) * entry` bytes; True if it changed."""
        self._require_writable()
        new_length = new_size // self.ENTRY.size * self.ENTRY.size
        if new_length < self.entry_count * self.ENTRY.size:
            raise ValueError(f"cannot resize {self.path} below its {self.entry_count} entries")
        if new_length == self.length:
            return False
        self._unmap()
        os.ftruncate(self._file.fileno(), new_length)
        self.length = new_length
        self._map()
        return True

    def trim_to_valid_size(self) -> None:
        self.resize(self.entry_count * self.ENTRY.size)

    def close_handlers(self) -> None:
        """Release the map and the file without trimming or flushing (Kafka `closeHandler`): the index is
        being deleted with its log."""
        self._unmap()
        if self._file is not None:
            self._file.close()
            self._file = None

    def flush(self) -> None:
        if self._mm is not None and self._writable:
            self._mm.flush()
        if self._file is not None:
            os.fsync(self._file.fileno())

    def close(self, *, sync: bool = True) -> None:
        """Trim a writable index to its valid entries (Kafka `close`), flush (unless ``sync`` is False: the
        caller fsyncs the file later) and release the file."""
        if self._writable and self._file is not None:
            self.trim_to_valid_size()
            if sync:
                self.flush()
        self._unmap()
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- internals ---------------------------------------------------------------------------------

    @abstractmethod
    def sanity_check(self) -> None:
        """Raise CorruptIndexError with Kafka's message if Kafka's `sanityCheck` would fail."""

    @abstractmethod
    def _parse(self, fields: tuple[int, ...]) -> E: ...

    @abstractmethod
    def _empty_entry(self) -> E: ...

    def _fields_at(self, slot: int) -> tuple[int, ...]:
        return self.ENTRY.unpack_from(self._mm, slot * self.ENTRY.size)

    def _entry_at(self, slot: int) -> E:
        return self._parse(self._fields_at(slot))

    def _count_valid(self) -> int:
        """Slots up to the first one after slot 0 whose relative offset is 0, compared a chunk of slots at a
        time in C (array.index), not slot by slot: a trimmed index of 100,000 entries is counted at every
        start, a preallocated one is 10 MiB of which only the entries and about one page are read."""
        slots = self.file_entry_slots
        if slots <= 1 or self._mm is None:
            return slots
        size = self.ENTRY.size
        if not any(self._mm[: 2 * size]):
            # zeros from the start: a preallocated index with no entry yet (what a crash before the first
            # index.interval.bytes leaves). Read by the rule below it would hold one entry, (base offset,
            # position 0 / timestamp 0), which the log does not back; Kafka never writes that entry.
            return 0
        per_slot, field = size // 4, self._OFFSET_INT
        start = 0
        # the first page's entries first: a preallocated index is a hole after its entries, and a read fault in a
        # hole maps a whole read-around window of zero pages (milliseconds per index on a 1,000-partition start)
        step = mmap.PAGESIZE // size
        while start < slots:
            end = min(slots, start + step)
            step = min(step * 2, _COUNT_CHUNK_SLOTS)
            ints = array("i")
            ints.frombytes(self._mm[start * size : end * size])
            column = ints[field::per_slot]  # the relative offsets of slots start..end-1 (0 in either byte order)
            try:
                return start + column.index(0, 1 if start == 0 else 0)
            except ValueError:
                start = end
        return slots

    def _floor_slot(self, target: int, key: Callable[[E], int]) -> int:
        """Largest valid slot whose key is <= target, or -1 (Kafka `largestLowerBoundSlotFor`)."""
        lo, hi = -1, self.entry_count - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if key(self._entry_at(mid)) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _sanity_slots(self) -> int:
        # Kafka's view: a file opened from disk has length // entry entries, zero padding included.
        return self.entry_count if self._writable else self.file_entry_slots

    def _relative_offset(self, offset: int) -> int:
        if not self.can_append_offset(offset):
            raise ValueError(f"Integer overflow for offset: {offset} ({self._abspath()})")
        return offset - self.base_offset

    def _append_fields(self, *fields: int) -> None:
        self.ENTRY.pack_into(self._mm, self._entries * self.ENTRY.size, *fields)
        self._entries += 1

    def _check_not_full(self, what: str) -> None:
        if self.is_full:
            raise ValueError(f"Attempt to append to a full {what} (size = {self.entry_count}).")

    def _require_writable(self) -> None:
        if not self._writable or self._file is None:
            raise ValueError(f"{self.path} is not open for append")

    def _map(self) -> None:
        if self.length:
            access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_READ
            self._mm = mmap.mmap(self._file.fileno(), self.length, access=access)

    def _unmap(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None

    def _abspath(self) -> str:
        return os.path.abspath(self.path)

    def _corrupt(self, reason: str, slot: int, error: type[CorruptIndexError] = CorruptIndexError) -> CorruptIndexError:
        return error(reason, path=str(self.path), position=slot * self.ENTRY.size, base_offset=self.base_offset)


class OffsetIndex(AbstractIndex[OffsetPosition]):
    """`.index`: sparse map from offset to the byte position of a batch in the `.log`."""

    ENTRY = OFFSET_INDEX_ENTRY
    _OFFSET_FIELD = 0
    _OFFSET_INT = 0  # the relative offset is the entry's 1st 4-byte word

    def sanity_check(self) -> None:
        """Kafka `OffsetIndex.sanityCheck`; a zero-padded file passes (its last slot reads as the base offset)."""
        slots = self._sanity_slots()
        if slots and (last_offset := self._entry_at(slots - 1).offset) < self.base_offset:
            raise self._corrupt(
                f"Corrupt index found, index file {self._abspath()} has non-zero size but the last offset "
                f"is {last_offset} which is less than the base offset {self.base_offset}",
                slots - 1,
            )
        if self.trailing_bytes:
            raise self._corrupt(
                f"Index file {self._abspath()} is corrupt, found {self.length} bytes which is neither positive "
                f"nor a multiple of {self.ENTRY.size}",
                self.file_entry_slots,
            )

    def append(self, offset: int, position: int) -> None:
        """Append (offset, position); offsets must strictly increase (else InvalidOffsetError)."""
        self._require_writable()
        self._check_not_full("index")
        if self.entry_count and offset <= self.last_entry.offset:
            raise self._corrupt(
                f"Attempt to append an offset {offset} to position {self.entry_count} no larger than the last "
                f"offset appended ({self.last_entry.offset}) to {self._abspath()}",
                self.entry_count,
                InvalidOffsetError,
            )
        self._append_fields(self._relative_offset(offset), position)

    def columns(self) -> tuple[list[int], list[int]]:
        """(offsets, positions) of the valid entries as two lists of ints, unpacked in bulk (verify and
        recovery compare every entry with the log: no OffsetPosition object per entry)."""
        count = self.entry_count
        if self._mm is None or not count:
            return [], []
        ints = array("i")
        ints.frombytes(self._mm[: count * self.ENTRY.size])
        if _LITTLE_ENDIAN:
            ints.byteswap()
        base = self.base_offset
        return [base + relative for relative in ints[0::2]], ints[1::2].tolist()

    def _parse(self, fields: tuple[int, ...]) -> OffsetPosition:
        relative_offset, position = fields
        return OffsetPosition(self.base_offset + relative_offset, position)

    def _empty_entry(self) -> OffsetPosition:
        return OffsetPosition(self.base_offset, 0)


class TimeIndex(AbstractIndex[TimestampOffset]):
    """`.timeindex`: (max timestamp so far, offset) pairs, both non-decreasing."""

    ENTRY = TIME_INDEX_ENTRY
    _OFFSET_FIELD = 1
    _OFFSET_INT = 2  # ... the 3rd, after the 8-byte timestamp

    @property
    def is_full(self) -> bool:
        # Kafka reserves the last slot for the entry written when the segment becomes inactive.
        return self.entry_count >= self.max_entries - 1

    def lookup_by_timestamp(self, timestamp: int) -> TimestampOffset:
        """Kafka `TimeIndex.lookup`: entry with the largest timestamp <= target, else (NO_TIMESTAMP, base)."""
        slot = self._floor_slot(timestamp, lambda entry: entry.timestamp)
        return self._entry_at(slot) if slot >= 0 else self._empty_entry()

    def sanity_check(self) -> None:
        """Kafka `TimeIndex.sanityCheck`; a zero-padded file fails, its last slot reading timestamp 0."""
        slots = self._sanity_slots()
        if slots:
            first, last = self._entry_at(0), self._entry_at(slots - 1)
            if last.timestamp < first.timestamp:
                raise self._corrupt(
                    f"Corrupt time index found, time index file ({self._abspath()}) has non-zero size but the "
                    f"last timestamp is {last.timestamp} which is less than the first timestamp {first.timestamp}",
                    slots - 1,
                )
            if last.offset < self.base_offset:
                raise self._corrupt(
                    f"Corrupt time index found, time index file ({self._abspath()}) has non-zero size but the "
                    f"last offset is {last.offset} which is less than the first offset {self.base_offset}",
                    slots - 1,
                )
        if self.trailing_bytes:
            raise self._corrupt(
                f"Time index file {self._abspath()} is corrupt, found {self.length} bytes which is neither "
                f"positive nor a multiple of {self.ENTRY.size}",
                self.file_entry_slots,
            )

    def maybe_append(self, timestamp: int, offset: int, *, skip_full_check: bool = False) -> None:
        """Kafka `maybeAppend`: append only if `timestamp` exceeds the last one; offsets may not go back.

        A repeat of the last entry is ignored (it is re-offered on roll and close); an empty index treats
        the last timestamp as NO_TIMESTAMP, so a v0-only segment keeps an empty time index.
        """
        self._require_writable()
        if not skip_full_check:
            self._check_not_full("time index")
        last = self.last_entry
        if self.entry_count and offset < last.offset:
            raise self._corrupt(
                f"Attempt to append an offset ({offset}) to slot {self.entry_count} no larger than the last "
                f"offset appended ({last.offset}) to {self._abspath()}",
                self.entry_count,
                InvalidOffsetError,
            )
        if self.entry_count and timestamp < last.timestamp:
            raise self._corrupt(
                f"Attempt to append a timestamp ({timestamp}) to slot {self.entry_count} no larger than the last "
                f"timestamp appended ({last.timestamp}) to {self._abspath()}",
                self.entry_count,
            )
        if timestamp > last.timestamp:
            self._append_fields(timestamp, self._relative_offset(offset))

    def _parse(self, fields: tuple[int, ...]) -> TimestampOffset:
        timestamp, relative_offset = fields
        return TimestampOffset(timestamp, self.base_offset + relative_offset)

    def _empty_entry(self) -> TimestampOffset:
        return TimestampOffset(NO_TIMESTAMP, self.base_offset)


def _all_zero(path: Path, mm: mmap.mmap, start: int, end: int) -> bool:
    """Are bytes [start, end) of the mapped file all zero? Only the parts the filesystem reports as data
    (SEEK_DATA/SEEK_HOLE) are read: the preallocated tail of a default index is a 10 MiB hole, which used to be
    compared byte by byte on every start. Where seeking is not supported, every byte is compared."""
    regions = [(start, end)]
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        fd = None
    if fd is not None:
        try:
            regions = []
            position = start
            while position < end:
                try:
                    data = os.lseek(fd, position, os.SEEK_DATA)
                except OSError:  # ENXIO: nothing but a hole from here on
                    break
                if data >= end:
                    break
                hole = min(os.lseek(fd, data, os.SEEK_HOLE), end)
                regions.append((data, hole))
                position = hole
        except (OSError, AttributeError):
            regions = [(start, end)]
        finally:
            os.close(fd)
    step = 1 << 20  # compare in bounded chunks
    for low, high in regions:
        for position in range(low, high, step):
            chunk = mm[position : min(position + step, high)]
            if chunk.count(0) != len(chunk):
                return False
    return True


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = ABORTED_TXN_VERSION


@dataclass(frozen=True, slots=True)
class TxnIndexSearchResult:
    aborted_transactions: tuple[AbortedTxn, ...]
    is_complete: bool  # False: the fetch range may continue into the next segment's index


class TransactionIndex:
    """`.txnindex`: append-only AbortedTxn entries ordered by lastOffset; not preallocated.

    A missing file is an empty index; it is created on the first append (as Kafka does).
    """

    def __init__(self, path: str | os.PathLike[str], base_offset: int | None = None) -> None:
        self.path = Path(path)
        self.base_offset = offset_from_filename(self.path.name) if base_offset is None else base_offset
        self._file: BinaryIO | None = None
        # Kafka forgets the last offset of an existing file and checks only its own appends; we read it
        # before the first append.
        self._last_offset: int | None = None
        self._last_offset_known = False

    @property
    def length(self) -> int:
        try:
            return os.path.getsize(self.path)
        except FileNotFoundError:
            return 0

    @property
    def entry_count(self) -> int:
        return self.length // ABORTED_TXN.size

    @property
    def trailing_bytes(self) -> int:
        """Bytes of a trailing partial entry, which readers ignore."""
        return self.length % ABORTED_TXN.size

    def entries(self) -> Iterator[AbortedTxn]:
        for _, txn in self._positions():
            yield txn

    def append(self, txn: AbortedTxn) -> None:
        if not self._last_offset_known:
            count = self.entry_count
            self._last_offset = self._read_at((count - 1) * ABORTED_TXN.size).last_offset if count else None
            self._last_offset_known = True
        if self._last_offset is not None and self._last_offset >= txn.last_offset:
            raise self._corrupt(
                f"The last offset of appended transactions must increase sequentially, but {txn.last_offset} "
                f"is not greater than current last offset {self._last_offset} of index {os.path.abspath(self.path)}",
                self.entry_count * ABORTED_TXN.size,
                InvalidOffsetError,
            )
        handle = self._handle()
        handle.seek(0, os.SEEK_END)
        handle.write(
            ABORTED_TXN.pack(txn.version, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)
        )
        self._last_offset = txn.last_offset

    def truncate_to(self, offset: int) -> None:
        """Drop the first entry whose lastOffset >= `offset` and everything after it."""
        previous = None
        for position, txn in self._positions():
            if txn.last_offset >= offset:
                self._handle().truncate(position)
                self._last_offset, self._last_offset_known = previous, True
                return
            previous = txn.last_offset

    def sanity_check(self) -> None:
        for position, txn in self._positions():
            if txn.last_offset < self.base_offset:
                raise self._corrupt(
                    f"Last offset of aborted transaction AbortedTxn(version={txn.version}, "
                    f"producerId={txn.producer_id}, firstOffset={txn.first_offset}, lastOffset={txn.last_offset}, "
                    f"lastStableOffset={txn.last_stable_offset}) in index {os.path.abspath(self.path)} is less than "
                    f"start offset {self.base_offset}",
                    position,
                )

    def collect_aborted(self, fetch_start: int, fetch_end: int) -> TxnIndexSearchResult:
        """Aborted transactions overlapping [fetch_start, fetch_end) (Kafka `collectAbortedTxns`)."""
        found = []
        for txn in self.entries():
            if txn.last_offset >= fetch_start and txn.first_offset < fetch_end:
                found.append(txn)
            if txn.last_stable_offset >= fetch_end:
                return TxnIndexSearchResult(tuple(found), True)
        return TxnIndexSearchResult(tuple(found), False)

    def flush(self) -> None:
        if self._file is not None:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _handle(self) -> BinaryIO:
        if self._file is None:
            self._file = os.fdopen(os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644), "r+b", buffering=0)
        return self._file

    def _read_at(self, position: int) -> AbortedTxn:
        with open(self.path, "rb") as file:
            file.seek(position)
            return self._decode(file.read(ABORTED_TXN.size), position)

    def _positions(self) -> Iterator[tuple[int, AbortedTxn]]:
        end = self.entry_count * ABORTED_TXN.size
        if not end:
            return
        with open(self.path, "rb") as file:
            position = 0
            while position < end:
                chunk = file.read(min(_TXN_READ_CHUNK, end - position))
                if not chunk:
                    return
                for start in range(0, len(chunk) - ABORTED_TXN.size + 1, ABORTED_TXN.size):
                    yield position + start, self._decode(chunk[start : start + ABORTED_TXN.size], position + start)
                position += len(chunk)

    def _decode(self, data: bytes, position: int) -> AbortedTxn:
        version, producer_id, first_offset, last_offset, last_stable_offset = ABORTED_TXN.unpack(data)
        if version > ABORTED_TXN_VERSION:
            raise self._corrupt(
                f"Unexpected aborted transaction version {version} in transaction index "
                f"{os.path.abspath(self.path)}, current version is {ABORTED_TXN_VERSION}",
                position,
            )
        return AbortedTxn(producer_id, first_offset, last_offset, last_stable_offset, version)

    def _corrupt(
        self, reason: str, position: int, error: type[CorruptIndexError] = CorruptIndexError
    ) -> CorruptIndexError:
        return error(reason, path=str(self.path), position=position, base_offset=self.base_offset)
