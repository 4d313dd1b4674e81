"""LogLoader: open a partition directory as a broker does at startup.

Kafka's LogLoader, on the directory: interrupted operations are finished or undone (``.swap`` files take
their names, ``.cleaned``/``.tmp``/``.deleted`` leftovers go), segments are recovered after an unclean
shutdown, producer state is loaded from the latest snapshot plus a replay of the batches after it, and the
leader epochs are read. The directory work is kcli.storage.recovery's plan and apply (every byte it cuts
goes to a quarantine first); this module decides when to run it and builds the in-memory state.
Kafka: storage/.../log/LogLoader.java, ProducerStateManager.loadProducerState.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from kcli.errors import CorruptSnapshotError, KcliError
from kcli.storage.checkpoint import read_partition_entry, read_partition_metadata
from kcli.storage.files import (
    CLEANED_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    PARTITION_METADATA,
    SWAP_SUFFIX,
    TMP_SUFFIX,
    FileKind,
    classify,
    offset_from_filename,
    segment_path,
)
from kcli.storage.leader_epoch import LeaderEpochCache
from kcli.storage.log_config import LogConfig
from kcli.storage.producer_state import ProducerStateManager
from kcli.storage.recovery import QuarantineRun, RecoveryResult, apply_recovery, plan_recovery
from kcli.storage.segment import FileBatchReader, LogSegment
from kcli.storage.snapshot import read_producer_snapshot


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

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset


class LogLoader:
    """Load one partition directory. ``recover``: the shutdown was not clean, so every segment is validated
    (Kafka recovers from the recovery point; kcli from the start). Without it only leftovers of interrupted
    swaps and writes are dealt with, from the active segment on, as Kafka does after a clean shutdown.

    ``quarantine``: the QuarantineRun this partition's recovery joins (a broker's startup passes one per log dir,
    so one restart is one run), or a directory of its own; by default a new run beside the log dir."""

    def __init__(self, directory: str | os.PathLike, config: LogConfig | None = None, *, recover: bool = True,
                 quarantine: QuarantineRun | str | os.PathLike | None = None) -> None:
        self.directory = Path(directory)
        self.config = config or LogConfig()
        self.recover = recover
        self.quarantine = quarantine if isinstance(quarantine, QuarantineRun) or not quarantine else Path(quarantine)

    def load(self) -> LoadedLog:
        directory = self.directory
        if not directory.is_dir():
            raise KcliError("not a partition directory", path=str(directory))
        recovery = self._recover_directory()
        meta = directory / PARTITION_METADATA
        topic_id = read_partition_metadata(meta).topic_id if meta.exists() else None
        bases = segment_bases(directory) or [0]  # Kafka creates an empty segment when none is left
        active = LogSegment.open(directory, bases[-1], self.config, resume=True)
        leader_epochs = LeaderEpochCache.load(directory)
        producer_state = load_producer_state(directory, bases, active.next_offset)
        checkpointed = read_partition_entry(directory, LOG_START_OFFSET_CHECKPOINT)
        log_start = bases[0]
        if checkpointed is not None and bases[0] < checkpointed <= active.next_offset:
            log_start = checkpointed
        return LoadedLog(directory, self.config, topic_id, bases, active, log_start, producer_state, leader_epochs,
                         recovery)

    def _recover_directory(self) -> RecoveryResult | None:
        if self.recover:
            plan = plan_recovery(self.directory, config=self.config)
        elif _has_leftovers(self.directory):
            bases = segment_bases(self.directory)
            plan = plan_recovery(self.directory, config=self.config, recovery_point=bases[-1] if bases else None)
        else:
            return None
        if not plan.actions:
            return None
        if isinstance(self.quarantine, Path):
            return apply_recovery(plan, quarantine=self.quarantine)
        run = self.quarantine or QuarantineRun.beside(self.directory.resolve().parent)
        return run.apply(plan)


def segment_bases(directory: Path) -> list[int]:
    return sorted(offset_from_filename(p.name) for p in directory.iterdir() if classify(p) is FileKind.LOG)


def _has_leftovers(directory: Path) -> bool:
    return any(p.name.endswith((SWAP_SUFFIX, CLEANED_SUFFIX, TMP_SUFFIX)) for p in directory.iterdir())


def load_producer_state(directory: Path, bases: list[int], log_end_offset: int) -> ProducerStateManager:
    """The latest readable snapshot at or below the log end, then the batches after it (Kafka
    `loadProducerState`); without one, a replay of the whole log."""
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
    for i, base in enumerate(bases):
        if i + 1 < len(bases) and bases[i + 1] <= start:
            continue
        log_path = segment_path(directory, base, LOG_SUFFIX)
        if not log_path.exists():
            continue
        for batch in FileBatchReader(log_path):
            if batch.magic >= 2 and batch.base_offset >= start:
                state.update(batch)
    return state
