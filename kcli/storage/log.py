"""PartitionLog: one ``<topic>-<partition>`` directory as an ordered list of LogSegments (Kafka's LocalLog).

The log has a start offset (retention moves it), an end offset (appends move it) and one active segment,
open for appends; segments roll by size. Appends come validated (``append_validated`` with a
kcli.storage.validator result) or as whole batches with their offsets (``append_raw``: tools, tests, the
transaction coordinator's markers). Closing writes the final time-index entry, trims the indexes and
writes the producer ``.snapshot``, ``leader-epoch-checkpoint`` and ``partition.metadata``.
Opening an existing directory is kcli.storage.loader's job (LogLoader).

The pieces this module used to hold live in their own modules; the names stay importable from here:
``LogConfig`` (log_config), ``ProducerStateManager`` (producer_state), ``LeaderEpochCache`` (leader_epoch),
``SegmentIndexer``/``SegmentIndexes`` (segment).
Kafka: storage/.../log/{LocalLog,LogSegments,UnifiedLog}.java.
"""

from __future__ import annotations

import bisect
import os
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from kcli.errors import KcliError
from kcli.records import Batch, BatchReader, Record, RecordBatch
from kcli.records.batch import build_record_batch
from kcli.records.control import ControlRecordType, control_key, end_txn_marker_value
from kcli.records.types import NO_TIMESTAMP, TimestampType
from kcli.storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile, write_partition_metadata
from kcli.storage.files import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    PARTITION_METADATA,
    PRODUCER_SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    FileKind,
    classify,
    offset_from_filename,
    segment_path,
)
from kcli.storage.leader_epoch import LeaderEpochCache
from kcli.storage.loader import LogDirCheckpoints, LogLoader, QuarantineRun, RecoveryResult, load_producer_state
from kcli.storage.log_config import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_INDEX_BYTES,
    LogConfig,
)
from kcli.storage.producer_state import ProducerEntry, ProducerStateManager, track_batch
from kcli.storage.reader import PartitionReader
from kcli.storage.segment import FetchSlice, LogSegment, SegmentIndexer, SegmentIndexes
from kcli.storage.snapshot import ProducerStateEntry, write_producer_snapshot
from kcli.storage.validator import ValidationResult

__all__ = [
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "DEFAULT_SEGMENT_BYTES",
    "DEFAULT_SEGMENT_INDEX_BYTES",
    "LeaderEpochCache",
    "LogAppendInfo",
    "LogConfig",
    "PartitionLog",
    "ProducerStateManager",
    "SegmentIndexer",
    "SegmentIndexes",
    "track_batch",
]

_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    """Kafka LogAppendInfo, what a Produce response needs: offsets, LogAppendTime, the log start offset.
    ``duplicate``: nothing was appended, the offsets are the original batch's."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    valid_bytes: int
    duplicate: bool = False


class PartitionLog:
    """Append-only writer for one ``<topic>-<partition>`` directory: a new one, or (``open``) an existing one.

    ``log_segments`` are the LogSegments by base offset (the last, ``segment``, is active and open);
    ``segments`` their base offsets.

    ``sync_roll``: a roll fsyncs the segment it closes and its producer snapshot. A broker sets it False, as
    Kafka's roll does no fsync under the log's lock since 3.6 (KAFKA-15046): appends would wait on the disk.
    Its flush (``unflushed_inactive``, ``take_unsynced_snapshots``) then makes them durable in the background,
    and the recovery point moves only then."""

    sync_roll = True
    _unsynced_snapshots: tuple[Path, ...] = ()
    # Tiered storage (KIP-405): set by the broker's RemoteLogManager. With it on, the log start offset is the
    # whole log's (remote segments included) and local segments go only once remote and beyond
    # local.retention.ms / local.retention.bytes (Kafka's UnifiedLog.remoteLogEnabled).
    remote_log_enabled = False
    highest_offset_in_remote_storage = -1

    def __init__(self, directory: str | os.PathLike, *, config: LogConfig | None = None, base_offset: int = 0,
                 topic_id: uuid.UUID | None = None) -> None:
        self._setup(Path(directory), config, topic_id)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_start_offset = base_offset
        self.recovery_point = base_offset
        self.segment = LogSegment.open(self.directory, base_offset, self.config)
        self.log_segments: list[LogSegment] = [self.segment]

    def _setup(self, directory: Path, config: LogConfig | None, topic_id: uuid.UUID | None) -> None:
        self.directory = directory
        self.config = config or LogConfig()
        self.topic_id = topic_id
        self.producer_state = ProducerStateManager()
        self.leader_epochs = LeaderEpochCache(path=directory / LEADER_EPOCH_CHECKPOINT)
        self.recovery: RecoveryResult | None = None  # what opening the directory repaired (``open``)
        # Kafka's recovery point: every offset below it is flushed to disk (fsynced), so a restart after a crash
        # validates only the segments from the one holding it (recovery-point-offset-checkpoint). It moves up when
        # segments are flushed (roll, close, ``flushed``) and down with truncations (``truncations`` counts them).
        self.recovery_point = 0
        self.truncations = 0

    @classmethod
    def open(cls, directory: str | os.PathLike, *, config: LogConfig | None = None, recover: bool = True,
             quarantine: QuarantineRun | str | os.PathLike | None = None,
             checkpoints: LogDirCheckpoints | None = None) -> PartitionLog:
        """Open an existing partition directory for appending, as a broker does at startup (LogLoader).

        With ``recover`` the directory is first recovered (kcli.storage.recovery; whatever is cut goes to
        ``quarantine``: a QuarantineRun shared with the other partitions of a restart, a directory, or by
        default a new run beside the log dir; ``recovery`` then holds the result). The active segment's
        indexes are resized for appends; producer state comes from the latest snapshot plus a replay of the
        batches after it. ``checkpoints``: the log dir's recovery points and log start offsets, read once by the
        caller (LogManager); with them recovery starts at the partition's recovery point, without them it
        validates every segment.
        """
        loaded = LogLoader(directory, config, recover=recover, quarantine=quarantine, checkpoints=checkpoints).load()
        log = cls.__new__(cls)
        log._setup(loaded.directory, loaded.config, loaded.topic_id)
        log.log_segments = [LogSegment(segment_path(loaded.directory, b, LOG_SUFFIX), b)
                            for b in loaded.segment_bases[:-1]] + [loaded.active]
        log.segment = loaded.active
        log.leader_epochs = loaded.leader_epochs
        log.producer_state = loaded.producer_state
        log.log_start_offset = loaded.log_start_offset
        log.recovery = loaded.recovery
        log.recovery_point = loaded.recovery_point
        return log

    def replace_config(self, config: LogConfig) -> PartitionLog:
        """Use a new topic config from now on (an AlterConfigs); the segments keep their files. Returns self."""
        self.config = config
        return self

    # -- views -------------------------------------------------------------------------------
    @property
    def segments(self) -> list[int]:
        """Base offsets of the segments, ascending (a copy)."""
        return [s.base_offset for s in self.log_segments]

    @segments.setter
    def segments(self, bases: list[int]) -> None:
        """Re-read the segment list after files changed underneath (the cleaner swapped segments in)."""
        known = {s.base_offset: s for s in self.log_segments}
        self.log_segments = [known.get(b) or LogSegment(segment_path(self.directory, b, LOG_SUFFIX), b)
                             for b in sorted(bases)]

    @property
    def log_end_offset(self) -> int:
        return self.segment.next_offset

    @property
    def local_log_start_offset(self) -> int:
        """The first offset on local disk (Kafka's localLogStartOffset, KIP-405); the log start offset unless
        tiered storage moved the local start past it."""
        return max(self.log_start_offset, self.log_segments[0].base_offset)

    @property
    def producers(self) -> dict[int, ProducerEntry]:
        return self.producer_state.producers

    @property
    def epochs(self) -> list[EpochEntry]:
        return self.leader_epochs.entries

    def reader(self) -> PartitionReader:
        return PartitionReader(self.directory, self.segments, self.log_end_offset)

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None,
             keep_open: bool = False, min_one_batch: bool = True) -> FetchSlice | None:
        """Whole batches from the one holding ``offset`` (Kafka `LocalLog.read`): at most ``max_bytes`` but
        at least one batch (without ``min_one_batch``, KIP-74's rule for all but a Fetch's first partition
        with data, none when the first does not fit), none starting at or past ``max_offset`` (default: the
        log end). None when there is nothing to read. ``keep_open``: the slice keeps the segment file open
        (see FetchSlice)."""
        end = self.log_end_offset if max_offset is None else min(max_offset, self.log_end_offset)
        if offset >= end:
            return None
        bases = self.segments
        start = max(bisect.bisect_right(bases, offset) - 1, 0)
        for segment in self.log_segments[start:]:
            found = segment.read(offset, max_bytes, max_offset=end, keep_open=keep_open, min_one_batch=min_one_batch)
            if found is not None or not min_one_batch:
                return found
        return None

    # -- appends -------------------------------------------------------------------------------
    def append_validated(self, result: ValidationResult) -> LogAppendInfo:
        """Append what kcli.storage.validator made of a produced record set (no parse, no CRC check: the
        validator did both). A duplicate appends nothing and answers with the original offsets. The record
        set goes into one segment, rolled first if it would not fit (Kafka `maybeRoll`)."""
        if result.duplicate is not None:
            d = result.duplicate
            return LogAppendInfo(d.first_offset, d.last_offset, d.timestamp, d.last_offset, NO_TIMESTAMP,
                                 self.log_start_offset, 0, 0, duplicate=True)
        if result.first_offset < self.log_end_offset:
            raise KcliError(f"validated first offset {result.first_offset} is below the log end offset "
                            f"{self.log_end_offset}: the log moved since validation")
        if self.segment.should_roll(self.config, incoming_bytes=result.size, max_timestamp=result.max_timestamp,
                                    last_offset=result.last_offset):
            self.roll(result.first_offset)
        records = memoryview(result.records)
        for info in result.batches:
            aborted = None
            if info.producer_id >= 0:
                aborted = self.producer_state.update(info, info.control)
            self.leader_epochs.assign(info.partition_leader_epoch, info.base_offset)
            self.segment.append(records[info.position:info.position + info.size], info, aborted)
        return LogAppendInfo(result.first_offset, result.last_offset, result.max_timestamp,
                             result.shallow_offset_of_max_timestamp, result.log_append_time, self.log_start_offset,
                             result.record_count, result.size)

    def append_raw(self, raw: bytes) -> Batch:
        """Append a record set (one or more whole batches) as given; offsets must start at the log end.

        Index entries are considered per batch, as Kafka does since KAFKA-806. Returns the last batch.
        """
        reader = BatchReader(raw)
        batches = list(reader)
        if not batches or reader.valid_bytes != len(raw):
            raise KcliError(f"record set of {len(raw)} bytes does not hold whole batches", position=reader.valid_bytes)
        for batch in batches:
            self._append_batch(batch)
        return batches[-1]

    def _append_batch(self, batch: Batch) -> None:
        batch.ensure_valid()
        if batch.base_offset < self.log_end_offset:
            raise KcliError(f"batch base offset {batch.base_offset} is below the log end offset {self.log_end_offset}")
        if self.segment.size > 0 and self.segment.size + batch.size > self.config.segment_bytes:
            self.roll(batch.base_offset)
        aborted = track_batch(batch, self.producer_state, self.leader_epochs)
        self.segment.append(batch.raw, batch, aborted)

    def append(self, records: list[Record], **batch_options) -> RecordBatch:
        """Build a v2 batch at the log end offset (record offsets are reassigned in order) and append it."""
        base = self.log_end_offset
        placed = [replace(r, offset=base + i) for i, r in enumerate(records)]
        return self.append_raw(build_record_batch(placed, base_offset=base, **batch_options))  # type: ignore[return-value]

    def append_marker(self, control_type: ControlRecordType, *, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int = 0, timestamp: int, partition_leader_epoch: int = 0) -> RecordBatch:
        """A COMMIT or ABORT transaction marker batch (what the transaction coordinator writes)."""
        marker = Record(self.log_end_offset, timestamp, control_key(control_type), end_txn_marker_value(coordinator_epoch))
        return self.append_raw(build_record_batch(
            [marker], producer_id=producer_id, producer_epoch=producer_epoch, is_transactional=True, is_control=True,
            partition_leader_epoch=partition_leader_epoch, timestamp_type=TimestampType.CREATE_TIME,
        ))  # type: ignore[return-value]

    def flush_to_os(self) -> None:
        """Hand buffered appends to the OS (readers of the file see them; not yet durable)."""
        self.segment.flush_to_os()

    def fsync(self) -> None:
        """Make the log durable up to its end (Kafka `UnifiedLog.flush`): the active segment and its indexes,
        and any segment between the recovery point and it; the recovery point moves to the log end."""
        end = self.log_end_offset
        self.fsync_unflushed_inactive(self.unflushed_inactive())
        self.segment.flush()
        self.recovery_point = max(self.recovery_point, end)

    def unflushed_inactive(self) -> list[Path]:
        """The .log files of inactive segments that may hold offsets at or above the recovery point (none
        normally: a roll flushes the segment it closes; after recovery from an unclean shutdown, the recovered
        ones until the next flush)."""
        active = self.segment.base_offset
        start = max(bisect.bisect_right(self.segments, self.recovery_point) - 1, 0)
        return [s.log_path for s in self.log_segments[start:] if s.base_offset < active and not s.is_open]

    def take_unsynced_snapshots(self) -> list[Path]:
        """Producer snapshots written by rolls without fsync since the last call (``sync_roll`` False)."""
        taken, self._unsynced_snapshots = list(self._unsynced_snapshots), ()
        return taken

    @staticmethod
    def fsync_unflushed_inactive(paths: list[Path]) -> None:
        """fsync these segments' .log and index files (Kafka `LogSegment.flush` of an inactive segment)."""
        for path in paths:
            stem = path.name[: -len(LOG_SUFFIX)]
            for suffix in _SEGMENT_SUFFIXES:
                try:
                    fd = os.open(path.with_name(stem + suffix), os.O_RDONLY)
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)

    def flushed(self, offset: int, truncations: int) -> None:
        """Everything below ``offset`` was made durable by a flush that began when ``truncations`` was the
        truncation count: the recovery point moves up to it, unless a truncation happened meanwhile."""
        if truncations == self.truncations:
            self.recovery_point = max(self.recovery_point, min(offset, self.log_end_offset))

    # -- segments and files --------------------------------------------------------------------
    def roll(self, new_base_offset: int | None = None) -> None:
        base = self.log_end_offset if new_base_offset is None else new_base_offset
        end = self.log_end_offset
        if self.sync_roll:
            self.fsync_unflushed_inactive(self.unflushed_inactive())
            self.segment.close()  # fsyncs it
            self.recovery_point = max(self.recovery_point, end)  # Kafka flushes up to the new segment on a roll
            self.write_producer_snapshot(base)
        else:  # the owner's background flush fsyncs both (unflushed_inactive lists the closed segment)
            self.segment.close(sync=False)
            snapshot = segment_path(self.directory, base, PRODUCER_SNAPSHOT_SUFFIX)
            write_producer_snapshot(snapshot, self.producer_state.entries(), sync=False)
            self._unsynced_snapshots = (*self._unsynced_snapshots, snapshot)
        self.segment = LogSegment.open(self.directory, base, self.config)
        self.log_segments.append(self.segment)

    def segment_stats(self, base: int) -> tuple[int, int]:
        """(size in bytes, largest timestamp) of a segment (Kafka `size`, `largestTimestamp`)."""
        segment = next(s for s in self.log_segments if s.base_offset == base)
        return segment.size, segment.largest_timestamp()

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int, now_ms: int) -> list[int]:
        """ListOffsets v0's answer, Kafka's ``UnifiedLog.legacyFetchOffsetsBefore``: up to ``max_num_offsets``
        segment base offsets (never below the log start), newest first, of the segments last modified at or
        before ``timestamp``; the log end offset counts as one more, modified ``now_ms``, when the active
        segment holds data. -1 (latest) starts from the newest entry, -2 (earliest) answers the oldest only.
        A time older than every segment answers nothing."""
        entries = [(max(s.base_offset, self.log_start_offset), _mtime_ms(s.log_path)) for s in self.log_segments]
        if self.log_segments[-1].size > 0:
            entries.append((self.log_end_offset, now_ms))
        if timestamp == -1:
            start = len(entries) - 1
        elif timestamp == -2:
            start = 0
        else:
            start = len(entries) - 1
            while start >= 0 and entries[start][1] > timestamp:
                start -= 1
        count = max(0, min(max_num_offsets, start + 1))
        return sorted((entries[start - j][0] for j in range(count)), reverse=True)

    def _rename_deleted(self, base: int) -> list[Path]:
        renamed = []
        for suffix in _SEGMENT_SUFFIXES:
            path = segment_path(self.directory, base, suffix)
            if path.exists():
                target = path.with_name(path.name + DELETED_SUFFIX)
                path.rename(target)
                renamed.append(target)
        return renamed

    def delete_oldest_segment(self, *, local_only: bool = False) -> list[Path]:
        """Retention: the oldest segment (never the active one) is renamed to ``.deleted`` for a delayed
        delete (Kafka `asyncDeleteSegment`) and the log start moves up. Returns the renamed files. A reader
        holding a FetchSlice with its file kept open still reads the old bytes. ``local_only``: the segment is
        in the remote store, so only the local log start moves (tiered storage)."""
        if len(self.log_segments) < 2:
            return []
        oldest = self.log_segments.pop(0)
        renamed = self._rename_deleted(oldest.base_offset)
        if not local_only:
            self.log_start_offset = max(self.log_start_offset, self.log_segments[0].base_offset)
            self.leader_epochs.truncate_from_start(self.log_start_offset)
        return renamed

    def delete_retention_breached(self, now_ms: int) -> list[tuple[int, str, list[Path]]]:
        """Kafka `UnifiedLog.deleteOldSegments`: oldest segments first (never the active one) while they end
        below the log start offset (DeleteRecords, any policy), or under cleanup.policy=delete while their
        largest timestamp is older than retention.ms or the log without them still holds retention.bytes. Returns
        (base offset, "time" | "size" | "log start", renamed files) per segment sent to ``.deleted``."""
        done: list[tuple[int, str, list[Path]]] = []
        # Kafka deletes segments below the log start whatever the policy (deleteLogStartOffsetBreachedSegments);
        # time and size retention only under cleanup.policy=delete.
        by_retention = self.config.delete
        retention_ms, retention_bytes = self.config.retention_ms, self.config.retention_bytes
        tiered = self.remote_log_enabled
        if tiered:  # KIP-405: locally, local.retention.* (-2: the total's), and only what is safely remote
            local_ms, local_bytes = self.config.local_retention_ms, self.config.local_retention_bytes
            retention_ms = retention_ms if local_ms == -2 else local_ms
            retention_bytes = retention_bytes if local_bytes == -2 else local_bytes
        while len(self.log_segments) > 1:
            oldest, following = self.log_segments[0], self.log_segments[1]
            total = sum(s.size for s in self.log_segments)
            if following.base_offset <= self.log_start_offset:
                reason = "log start"
            elif tiered and following.base_offset - 1 > self.highest_offset_in_remote_storage:
                break  # Kafka's isSegmentEligibleForDeletion: not copied yet
            elif by_retention and retention_ms >= 0 and now_ms - oldest.largest_timestamp() > retention_ms:
                reason = "time"
            elif by_retention and retention_bytes >= 0 and total - oldest.size >= retention_bytes:
                reason = "size"
            else:
                break
            if tiered and reason != "log start":
                done.append((oldest.base_offset, f"local {reason}", self.delete_oldest_segment(local_only=True)))
                continue
            done.append((oldest.base_offset, reason, self.delete_oldest_segment()))
        return done

    def truncate_to(self, offset: int) -> list[Path]:
        """Remove every batch at or after ``offset`` (Kafka `UnifiedLog.truncateTo`, what a follower does
        when its log diverged): later segments go to ``.deleted`` (returned, for the delayed delete), the
        segment holding ``offset`` is cut and becomes active, leader epochs from ``offset`` on are dropped,
        producer snapshots past it removed and producer state reloaded. A batch straddling ``offset`` is
        removed whole, so the log end may end up below it. Truncating below the log start empties the log
        and starts it at ``offset`` (Kafka `truncateFullyAndStartAt`). At or past the log end only epochs
        starting at the log end go: an ex-leader's epoch that never got a batch (Kafka's truncateTo)."""
        if offset >= self.log_end_offset:
            self.leader_epochs.truncate_from_end(self.log_end_offset, keep_at_end=False)
            return []
        self.truncations += 1
        self.recovery_point = min(self.recovery_point, offset)
        renamed: list[Path] = []
        keep = [s for s in self.log_segments if s.base_offset <= offset]
        drop = [s for s in self.log_segments if s.base_offset > offset]
        if offset < self.log_start_offset or not keep:
            keep, drop = [], list(self.log_segments)
        if self.segment in drop:
            self.segment.close()
        for segment in drop:
            renamed += self._rename_deleted(segment.base_offset)
        if keep:
            active = keep[-1]
            if not active.is_open:
                active = keep[-1] = LogSegment.open(self.directory, active.base_offset, self.config, resume=True)
            active.truncate_to(offset)
        else:
            active = LogSegment.open(self.directory, offset, self.config)
            keep = [active]
            self.log_start_offset = offset
        self.log_segments = keep
        self.segment = active
        end = active.next_offset
        for path in self.directory.iterdir():
            if classify(path) is FileKind.PRODUCER_SNAPSHOT and offset_from_filename(path.name) > end:
                path.unlink()
        self.recovery_point = min(self.recovery_point, end)
        self.producer_state = load_producer_state(self.directory, self.segments, end)
        self.leader_epochs.truncate_from_end(end, keep_at_end=False)
        return renamed

    def truncate_fully_and_start_at(self, offset: int) -> list[Path]:
        """Every segment goes and the log starts empty at ``offset`` (Kafka `truncateFullyAndStartAt`, a
        follower whose log end is below the leader's log start). Returns the renamed files."""
        renamed: list[Path] = []
        self.truncations += 1
        self.recovery_point = min(self.recovery_point, offset)
        if self.segment.is_open:
            self.segment.close()
        for segment in self.log_segments:
            renamed += self._rename_deleted(segment.base_offset)
        for path in self.directory.iterdir():
            if classify(path) is FileKind.PRODUCER_SNAPSHOT:
                path.unlink()
        self.segment = LogSegment.open(self.directory, offset, self.config)
        self.log_segments = [self.segment]
        self.log_start_offset = offset
        self.producer_state = load_producer_state(self.directory, self.segments, offset)
        self.leader_epochs.clear()
        return renamed

    def restore_aux_state(self, epochs: list[EpochEntry], producers: list[ProducerStateEntry] | None) -> None:
        """The state a log started empty (``truncate_fully_and_start_at``) needs from before its start, taken
        from the remote segment ending there (Kafka's ReplicaFetcherTierStateMachine.buildRemoteLogAuxState,
        KIP-405): ``epochs`` (that segment's leader-epoch checkpoint) become the leader-epoch cache, entries at
        or past the start left out; ``producers`` (its producer snapshot) are written as ``<start>.snapshot``
        and the producer state loaded from it. None: no snapshot, the producer state stays empty."""
        start = self.log_end_offset
        if len(self.log_segments) != 1 or self.segment.base_offset != start:
            raise KcliError(f"{self.directory.name}: the remote state before offset {start} goes into an empty "
                            "log only")
        self.leader_epochs.clear()
        for entry in epochs:
            if entry.start_offset < start:
                self.leader_epochs.assign(entry.epoch, entry.start_offset)
        if producers is not None:
            write_producer_snapshot(segment_path(self.directory, start, PRODUCER_SNAPSHOT_SUFFIX), producers)
        self.producer_state = load_producer_state(self.directory, self.segments, start)

    def write_producer_snapshot(self, offset: int) -> None:
        write_producer_snapshot(segment_path(self.directory, offset, PRODUCER_SNAPSHOT_SUFFIX), self.producer_state.entries())

    def close(self) -> None:
        """Clean close: final index entries, trimmed indexes, snapshot at the log end, checkpoints."""
        end = self.log_end_offset
        self.fsync_unflushed_inactive(self.unflushed_inactive())
        self.segment.close()
        self.recovery_point = max(self.recovery_point, end)
        self.write_producer_snapshot(self.log_end_offset)
        LeaderEpochCheckpointFile(self.directory / LEADER_EPOCH_CHECKPOINT).write(self.epochs)
        if self.topic_id is not None:
            write_partition_metadata(self.directory / PARTITION_METADATA, self.topic_id)

    def close_handlers(self) -> None:
        """Kafka `UnifiedLog.closeHandlers`: release the files, nothing flushed or written (the log is being
        deleted: a clean close's fsyncs, snapshot and checkpoints would be wasted on it)."""
        for segment in self.log_segments:
            segment.close_handlers()

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _mtime_ms(path: Path) -> int:
    """A segment file's last modification (Kafka's ``LogSegment.lastModified``); 0 when it is gone meanwhile."""
    try:
        return int(path.stat().st_mtime * 1000)
    except FileNotFoundError:
        return 0
