"""LeaderEpochCache: (epoch, start offset) entries of a partition, kept in ``leader-epoch-checkpoint``.

Kafka: storage/.../epoch/LeaderEpochFileCache.java. The cache answers OffsetForLeaderEpoch (a follower,
or a consumer after a leader change, asks where an epoch ended) and is truncated with the log.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from kcli.records.types import NO_PARTITION_LEADER_EPOCH
from kcli.storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from kcli.storage.files import LEADER_EPOCH_CHECKPOINT

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """leader-epoch-checkpoint entries as Kafka's LeaderEpochFileCache keeps them, in memory; ``path``
    (optional) is where ``flush`` writes them."""

    def __init__(self, entries: Iterable[EpochEntry] = (), *, path: str | os.PathLike | None = None) -> None:
        self.entries: list[EpochEntry] = list(entries)
        self.path = Path(path) if path is not None else None
        # A live broker's replicas write the checkpoint on every change, as Kafka's LeaderEpochFileCache does,
        # so a kill -9 leaves it current; offline readers (verify, dump) never write.
        self.flush_on_change = False

    def _changed(self, before: list[EpochEntry]) -> None:
        if self.flush_on_change and self.entries != before:
            self.flush()

    @classmethod
    def load(cls, partition_dir: str | os.PathLike) -> LeaderEpochCache:
        """The partition's checkpoint (empty when the file is missing)."""
        path = Path(partition_dir) / LEADER_EPOCH_CHECKPOINT
        return cls(LeaderEpochCheckpointFile(path).read() if path.exists() else (), path=path)

    def flush(self) -> None:
        if self.path is not None:
            LeaderEpochCheckpointFile(self.path).write(self.entries)

    # -- updates --------------------------------------------------------------------------------
    def assign(self, epoch: int, start_offset: int) -> bool:
        """A batch of a newer epoch starts that epoch at its base offset; entries that would break
        monotonicity are dropped first (Kafka `maybeTruncateNonMonotonicEntries`). A batch of the latest or
        an older epoch changes nothing (the rule of LogSegment.recover and of a leader's appends)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1].epoch):
            return False
        before = list(self.entries)
        while self.entries and self.entries[-1].start_offset >= start_offset:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        self._changed(before)
        return True

    def truncate_from_end(self, end_offset: int, *, keep_at_end: bool = True) -> None:
        """Drop epochs starting beyond the log end (the log was truncated to ``end_offset``). Kafka also
        drops one starting *at* it (``keep_at_end=False``, what replication's truncation does), but a leader
        that has not appended yet legitimately has such an entry, so recovery of an intact partition keeps it."""
        before = list(self.entries)
        while self.entries and (self.entries[-1].start_offset > end_offset or
                                (not keep_at_end and self.entries[-1].start_offset >= end_offset)):
            self.entries.pop()
        self._changed(before)

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved up (retention, DeleteRecords): epochs wholly before it go, and the epoch
        holding it now starts there (Kafka `truncateFromStart`)."""
        keep = [e for e in self.entries if e.start_offset >= start_offset]
        before = [e for e in self.entries if e.start_offset < start_offset]
        if before and (not keep or keep[0].start_offset > start_offset):
            keep.insert(0, EpochEntry(before[-1].epoch, start_offset))
        old, self.entries = self.entries, keep
        self._changed(old)

    def clear(self) -> None:
        old, self.entries = self.entries, []
        self._changed(old)

    # -- queries --------------------------------------------------------------------------------
    @property
    def latest_epoch(self) -> int | None:
        return self.entries[-1].epoch if self.entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self.entries[0] if self.entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch holding ``offset`` (the latest entry starting at or before it)."""
        found = None
        for entry in self.entries:
            if entry.start_offset > offset:
                break
            found = entry.epoch
        return found

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch (Kafka `endOffsetFor`): the largest epoch <= the
        requested one and the start offset of the first epoch after it, or the log end offset when the
        requested epoch is the latest. (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) when nothing qualifies."""
        if requested_epoch == NO_PARTITION_LEADER_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        latest = self.entries[-1]
        if requested_epoch == latest.epoch:
            return latest.epoch, log_end_offset
        higher = next((e for e in self.entries if e.epoch > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET  # newer than anything we know
        floor = [e for e in self.entries if e.epoch <= requested_epoch]
        if not floor:
            # Older than the earliest epoch: the follower truncates to the earliest epoch's start.
            return requested_epoch, higher.start_offset
        return floor[-1].epoch, higher.start_offset
