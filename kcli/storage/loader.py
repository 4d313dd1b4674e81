"""LogLoader: open a partition directory as a broker does at startup.

Kafka's LogLoader, on the directory: interrupted operations are finished or undone (``.swap`` files take
their names, ``.cleaned``/``.tmp``/``.deleted`` leftovers go), segments are recovered after an unclean
shutdown, producer state is loaded from the latest snapshot plus a replay of the batches after it, and the
leader epochs are read. The directory work is kcli.storage.recovery's plan and apply (every byte it cuts
goes to a quarantine first); this module decides when to run it and builds the in-memory state.

As Kafka's, a load reads little: after a clean shutdown no segment is scanned (the active one from its last
offset index entry on, to find the log end), the inactive segments' indexes stay unopened until a read needs
them, and producer state comes from the snapshot at the log end. After an unclean one, given the log dir's
recovery-point-offset-checkpoint (``LogDirCheckpoints``), only the segments from the one holding the
partition's recovery point on are validated: everything below it was flushed before the checkpoint was
written. Without a checkpoint entry every segment is validated.
Kafka: storage/.../log/LogLoader.java, ProducerStateManager.loadProducerState.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from kcli.errors import CorruptSnapshotError, KcliError
from kcli.storage.checkpoint import OffsetCheckpointFile, TopicPartition, read_partition_entry, read_partition_metadata
from kcli.storage.files import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    SWAP_SUFFIX,
    TMP_SUFFIX,
    FileKind,
    classify,
    offset_from_filename,
    parse_partition_dir_name,
    segment_path,
)
from kcli.storage.index import OffsetIndex
from kcli.storage.leader_epoch import LeaderEpochCache
from kcli.storage.log_config import LogConfig
from kcli.storage.producer_state import ProducerStateManager
from kcli.storage.recovery import QuarantineRun, RecoveryResult, apply_recovery, plan_recovery
from kcli.storage.segment import FileBatchReader, LogSegment
from kcli.storage.snapshot import read_producer_snapshot


@dataclass(frozen=True)
class LogDirCheckpoints:
    """A log dir's recovery-point-offset-checkpoint and log-start-offset-checkpoint, read once for all its
    partitions (an unreadable or missing file counts as empty, as at Kafka's startup)."""

    recovery_points: dict[TopicPartition, int]
    log_start_offsets: dict[TopicPartition, int]

    @classmethod
    def read(cls, log_dir: str | os.PathLike) -> LogDirCheckpoints:
        return cls(_read_offsets(Path(log_dir) / RECOVERY_POINT_CHECKPOINT),
                   _read_offsets(Path(log_dir) / LOG_START_OFFSET_CHECKPOINT))

    def recovery_point(self, partition_dir: Path) -> int:
        """The partition's recovery point; 0 (recover every segment) without an entry."""
        parsed = parse_partition_dir_name(partition_dir.name)
        return self.recovery_points.get(parsed, 0) if parsed is not None else 0

    def log_start_offset(self, partition_dir: Path) -> int | None:
        parsed = parse_partition_dir_name(partition_dir.name)
        return self.log_start_offsets.get(parsed) if parsed is not None else None


def _read_offsets(path: Path) -> dict[TopicPartition, int]:
    try:
        return OffsetCheckpointFile(path).read_offsets() if path.is_file() else {}
    except (KcliError, OSError, ValueError):
        return {}


@dataclass
class LoadedLog:
    """What PartitionLog is built from (Kafka's LoadedLogOffsets plus the state LogLoader fills in)."""

    directory: Path
    config: LogConfig
    topic_id: uuid.UUID | None
    segment_bases: list[int]  # ascending; the last one is ``active``
    active: LogSegment  # open for appends
    log_start_offset: int
    producer_state: ProducerStateManager
    leader_epochs: LeaderEpochCache
    recovery: RecoveryResult | None = None
    # Offsets below it are on disk (flushed): a clean load's log end, else the checkpointed point, at most the end
    recovery_point: int = 0

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset


class LogLoader:
    """Load one partition directory. ``recover``: the shutdown was not clean, so segments are validated: with
    ``checkpoints`` (the log dir's, see LogDirCheckpoints) from the one holding the partition's recovery point
    on, as Kafka does; without, every segment (what tools and tests opening one directory get). Without
    ``recover`` only leftovers of interrupted swaps and writes are dealt with, from the active segment on, as
    Kafka does after a clean shutdown. The active segment's preallocated index tail that a crash leaves is
    not a reason to rebuild its indexes (the writable open trims and resizes it, as Kafka's does).

    ``quarantine``: the QuarantineRun this partition's recovery joins (a broker's startup passes one per log dir,
    so one restart is one run), or a directory of its own; by default a new run beside the log dir."""

    def __init__(self, directory: str | os.PathLike, config: LogConfig | None = None, *, recover: bool = True,
                 quarantine: QuarantineRun | str | os.PathLike | None = None,
                 checkpoints: LogDirCheckpoints | None = None) -> None:
        self.directory = Path(directory)
        self.config = config or LogConfig()
        self.recover = recover
        self.quarantine = quarantine if isinstance(quarantine, QuarantineRun) or not quarantine else Path(quarantine)
        self.checkpoints = checkpoints

    def load(self) -> LoadedLog:
        directory = self.directory
        if not directory.is_dir():
            raise KcliError("not a partition directory", path=str(directory))
        names = os.listdir(directory)
        checkpointed_recovery = self.checkpoints.recovery_point(directory) if self.checkpoints is not None else 0
        recovery = self._recover_directory(names, checkpointed_recovery)
        if recovery is not None:
            names = os.listdir(directory)
        topic_id = read_partition_metadata(directory / PARTITION_METADATA).topic_id \
            if PARTITION_METADATA in names else None
        bases = _segment_bases(names) or [0]  # Kafka creates an empty segment when none is left
        active = LogSegment.open(directory, bases[-1], self.config, resume=True)
        leader_epochs = LeaderEpochCache.load(directory)
        snapshots = sorted((offset_from_filename(n), directory / n) for n in names
                           if classify(n) is FileKind.PRODUCER_SNAPSHOT)
        producer_state = load_producer_state(directory, bases, active.next_offset, snapshots=snapshots,
                                             active=active)
        if self.checkpoints is not None:
            checkpointed = self.checkpoints.log_start_offset(directory)
        else:
            checkpointed = read_partition_entry(directory, LOG_START_OFFSET_CHECKPOINT)
        log_start = bases[0]
        if checkpointed is not None and bases[0] < checkpointed <= active.next_offset:
            log_start = checkpointed
        # Kafka: a clean load's recovery point is the log end; after recovery it stays where it was (at most the
        # log end), so that a crash before the next flush validates the same segments again.
        recovery_point = active.next_offset if not self.recover else min(checkpointed_recovery, active.next_offset)
        return LoadedLog(directory, self.config, topic_id, bases, active, log_start, producer_state, leader_epochs,
                         recovery, recovery_point)

    def _recover_directory(self, names: list[str], checkpointed_recovery: int) -> RecoveryResult | None:
        if self.recover:
            recovery_point = checkpointed_recovery if self.checkpoints is not None and checkpointed_recovery > 0 \
                else None
            plan = plan_recovery(self.directory, config=self.config, recovery_point=recovery_point,
                                 keep_preallocated_active=True)
        elif _has_leftovers(names):
            bases = _segment_bases(names)
            plan = plan_recovery(self.directory, config=self.config, recovery_point=bases[-1] if bases else None,
                                 keep_preallocated_active=True)
        else:
            return None
        if not plan.actions:
            return None
        if isinstance(self.quarantine, Path):
            return apply_recovery(plan, quarantine=self.quarantine)
        run = self.quarantine or QuarantineRun.beside(self.directory.resolve().parent)
        return run.apply(plan)


def segment_bases(directory: Path) -> list[int]:
    return _segment_bases(os.listdir(directory))


def _segment_bases(names: list[str]) -> list[int]:
    return sorted(offset_from_filename(n) for n in names if classify(n) is FileKind.LOG)


def _has_leftovers(names: list[str]) -> bool:
    return any(n.endswith((SWAP_SUFFIX, CLEANED_SUFFIX, TMP_SUFFIX)) for n in names)


def load_producer_state(directory: Path, bases: list[int], log_end_offset: int, *,
                        snapshots: list[tuple[int, Path]] | None = None,
                        active: LogSegment | None = None) -> ProducerStateManager:
    """The latest readable snapshot at or below the log end, then the batches after it (Kafka
    `loadProducerState`); without one, a replay of the whole log. The replay starts in the segment holding the
    snapshot's offset at the position its offset index gives (``active``: the open active segment, whose
    index is already mapped), so a snapshot at the log end (a clean shutdown) reads no batch at all.
    ``snapshots``: (offset, path) of the directory's snapshot files, if already listed."""
    if snapshots is None:
        snapshots = sorted((offset_from_filename(p.name), p) for p in directory.iterdir()
                           if classify(p) is FileKind.PRODUCER_SNAPSHOT)
    start, state = bases[0], ProducerStateManager()
    for offset, path in reversed(snapshots):
        if offset > log_end_offset:
            continue
        try:
            state = ProducerStateManager(read_producer_snapshot(path).entries)
        except CorruptSnapshotError:
            continue  # Kafka deletes it and falls back to an older one
        start = offset
        break
    if start >= log_end_offset:
        return state
    for i, base in enumerate(bases):
        if i + 1 < len(bases) and bases[i + 1] <= start:
            continue
        log_path = segment_path(directory, base, LOG_SUFFIX)
        if not log_path.exists():
            continue
        position = _index_position(directory, base, start, active) if base < start else 0
        for batch in FileBatchReader(log_path, position):
            if batch.magic >= 2 and batch.base_offset >= start:
                state.update(batch)
    return state


def _index_position(directory: Path, base: int, offset: int, active: LogSegment | None) -> int:
    """A file position at or before the first batch holding offsets >= ``offset`` (0 when unsure)."""
    try:
        if active is not None and active.base_offset == base and active.indexes is not None:
            return active.indexes.index.lookup(offset).position
        path = segment_path(directory, base, INDEX_SUFFIX)
        if not path.exists():
            return 0
        with OffsetIndex(path, base) as index:
            return index.lookup(offset).position
    except (KcliError, OSError, ValueError):
        return 0
