"""Do a segment's .index and .timeindex agree with its log? Checked while the log is scanned once.

Shared by `kctl verify` (which reports every finding) and recovery (which rebuilds an index on any error).
Layouts Kafka itself has written are warnings, not errors: first-offset keys (Kafka <= 1.1), entries
covering a multi-batch append (before KAFKA-806), preallocated zero tails (an active segment, or a
crash before trimming).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kcli.errors import KcliError
from kcli.storage.index import OFFSET_INDEX_ENTRY, TIME_INDEX_ENTRY, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset

NEVER = 1 << 63


@dataclass(frozen=True, slots=True)
class IndexFinding:
    path: Path
    reason: str
    code: str
    position: int | None = None  # byte position in the index file
    base_offset: int | None = None
    warning: bool = False


Report = Callable[[IndexFinding], None]


class OffsetIndexMatcher:
    """Feed it every batch (position, first and last offset) in log order; entries are in position order.
    The entries are held as two lists of ints (offsets, positions), read in bulk: verify feeds one batch in
    two or so, so this is per-batch work."""

    def __init__(self, path: Path, base_offset: int, report: Report) -> None:
        self.path = path
        self.report = report
        self.offsets: list[int] = []
        self.positions: list[int] = []
        self.length = 0
        try:
            with OffsetIndex(path, base_offset) as index:
                self.length = index.length
                if index.trailing_bytes:
                    self._find(f"index length {index.length} is not a multiple of 8", "index_bad_length",
                               index.length - index.trailing_bytes)
                offsets, positions = index.columns()
                if index.is_preallocated:
                    self._find(f"zero-filled preallocated tail after {index.entry_count} entries (active segment or "
                               "unclean shutdown; the broker trims it)", "index_preallocated",
                               index.entry_count * OFFSET_INDEX_ENTRY.size, warning=True)
                    if offsets == [base_offset] and positions == [0]:
                        offsets, positions = [], []  # an all-zero first slot is padding: Kafka never indexes position 0
                elif index.entry_count != index.file_entry_slots:
                    self._find(f"a zero entry follows entry {index.entry_count - 1}; later entries are unreachable",
                               "index_zero_entry", index.entry_count * OFFSET_INDEX_ENTRY.size)
                self.offsets, self.positions = offsets, positions
        except KcliError as exc:
            self._find(exc.reason, "unreadable_index", exc.position)
        self.slot = 0
        self.prev_offset: int | None = None
        self.pending: tuple[int, OffsetPosition] | None = None  # an entry keyed past its batch (multi-batch append)
        self.next_position = self.positions[0] if self.positions else NEVER

    @property
    def entries(self) -> list[OffsetPosition]:
        return [OffsetPosition(o, p) for o, p in zip(self.offsets, self.positions)]

    def _find(self, reason: str, code: str, position: int | None, base_offset: int | None = None, *,
              warning: bool = False) -> None:
        self.report(IndexFinding(self.path, reason, code, position, base_offset, warning))

    def feed(self, pos: int, first: int, last: int) -> None:
        if self.pending is not None:
            pslot, pentry = self.pending
            if last == pentry.offset:
                self._find(f"entry {pslot} (offset {pentry.offset}) covers a multi-batch append: it points at the "
                           "chunk start (Kafka before KAFKA-806)", "index_multi_batch_entry",
                           pslot * OFFSET_INDEX_ENTRY.size, pentry.offset, warning=True)
                self.pending = None
            elif last > pentry.offset:
                self._mismatch(pslot, pentry, None)
                self.pending = None
        offsets, positions = self.offsets, self.positions
        count = len(positions)
        slot, prev_offset = self.slot, self.prev_offset
        while slot < count and positions[slot] <= pos:
            offset, position = offsets[slot], positions[slot]
            if position == pos and offset == last and (prev_offset is None or offset > prev_offset):
                prev_offset = offset  # the entry Kafka writes: the batch's last offset at its start
                slot += 1
                continue
            at = slot * OFFSET_INDEX_ENTRY.size
            if prev_offset is not None and offset <= prev_offset:
                self._find(f"entry {slot}: offset {offset} is not above the previous entry's {prev_offset}",
                           "index_not_increasing", at, offset)
            prev_offset = offset
            if position < pos:
                self._find(f"entry {slot}: position {position} is not the start of a batch",
                           "index_position_not_batch_start", at, offset)
            elif offset != last:
                if offset == first and first != last:
                    self._find(f"entry {slot} keys the batch by its first offset {offset} (Kafka 1.1 and older)",
                               "index_first_offset_key", at, offset, warning=True)
                elif offset > last:
                    self.pending = (slot, OffsetPosition(offset, position))
                else:
                    self._mismatch(slot, OffsetPosition(offset, position), last)
            slot += 1
        self.slot, self.prev_offset = slot, prev_offset
        self.next_position = 0 if self.pending is not None else (positions[slot] if slot < count else NEVER)

    def _mismatch(self, slot: int, entry: OffsetPosition, log_offset: int | None) -> None:
        found = "no batch" if log_offset is None else f"the batch there ends at offset {log_offset}"
        self._find(f"entry {slot}: index offset {entry.offset} at position {entry.position}, but {found}",
                   "index_mismatch", slot * OFFSET_INDEX_ENTRY.size, entry.offset)

    def finish(self, valid_bytes: int) -> None:
        if self.pending is not None:
            self._mismatch(self.pending[0], self.pending[1], None)
        for slot in range(self.slot, len(self.positions)):
            offset, position = self.offsets[slot], self.positions[slot]
            self._find(f"entry {slot}: position {position} (offset {offset}) lies past the last valid "
                       f"batch (log valid up to byte {valid_bytes})", "index_past_log_end",
                       slot * OFFSET_INDEX_ENTRY.size, offset)


class TimeIndexMatcher:
    """Entry (T, O) says T is the max timestamp up to offset O. Kafka <= 3.x recorded the offset of the
    record holding T, later ones the batch's last offset: O must fall in a batch whose max timestamp is T."""

    def __init__(self, path: Path, base_offset: int, report: Report) -> None:
        self.path = path
        self.report = report
        self.entries: list[TimestampOffset] = []
        self.length = 0
        try:
            with TimeIndex(path, base_offset) as tindex:
                self.length = tindex.length
                if tindex.trailing_bytes:
                    self._find(f"time index length {tindex.length} is not a multiple of 12", "index_bad_length",
                               tindex.length - tindex.trailing_bytes)
                entries = list(tindex.entries())
                if tindex.is_preallocated:
                    self._find(f"zero-filled preallocated tail after {tindex.entry_count} entries (active segment or "
                               "unclean shutdown; the broker's sanity check rejects it until trimmed)",
                               "index_preallocated", tindex.entry_count * TIME_INDEX_ENTRY.size, warning=True)
                    if entries == [TimestampOffset(0, base_offset)]:
                        entries = []  # an all-zero first slot is padding, as for the offset index
                elif tindex.entry_count != tindex.file_entry_slots:
                    self._find(f"a zero entry follows entry {tindex.entry_count - 1}; later entries are unreachable",
                               "index_zero_entry", tindex.entry_count * TIME_INDEX_ENTRY.size)
                self.entries = entries
        except KcliError as exc:
            self._find(exc.reason, "unreadable_index", exc.position)
        for slot in range(1, len(self.entries)):
            prev, entry = self.entries[slot - 1], self.entries[slot]
            if entry.timestamp < prev.timestamp or entry.offset < prev.offset:
                self._find(f"entry {slot} ({entry.timestamp}, {entry.offset}) goes backwards after "
                           f"({prev.timestamp}, {prev.offset})", "time_index_out_of_order",
                           slot * TIME_INDEX_ENTRY.size, entry.offset)
        self.slot = 0
        self.next_offset = self.entries[0].offset if self.entries else NEVER

    def _find(self, reason: str, code: str, position: int | None, base_offset: int | None = None, *,
              warning: bool = False) -> None:
        self.report(IndexFinding(self.path, reason, code, position, base_offset, warning))

    def feed(self, first: int, last: int, max_timestamp: int) -> None:
        entries = self.entries
        while self.slot < len(entries) and entries[self.slot].offset <= last:
            slot, entry = self.slot, entries[self.slot]
            at = slot * TIME_INDEX_ENTRY.size
            if entry.offset < first:
                self._find(f"entry {slot}: offset {entry.offset} is in no batch (the next batch starts at {first})",
                           "time_index_offset_not_found", at, entry.offset)
            elif entry.timestamp != max_timestamp:
                self._find(f"entry {slot}: timestamp {entry.timestamp} but the batch holding offset {entry.offset} "
                           f"has max timestamp {max_timestamp}", "time_index_timestamp_mismatch", at, entry.offset)
            self.slot += 1
        self.next_offset = entries[self.slot].offset if self.slot < len(entries) else NEVER

    def finish(self) -> None:
        for slot in range(self.slot, len(self.entries)):
            entry = self.entries[slot]
            self._find(f"entry {slot}: offset {entry.offset} lies past the end of the log", "time_index_past_log_end",
                       slot * TIME_INDEX_ENTRY.size, entry.offset)
