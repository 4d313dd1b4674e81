"""PartitionLog: append batches to a partition directory exactly as a Kafka broker lays them out.

Segments roll by size; closing writes the final time-index entry, trims the indexes, and writes the
producer ``.snapshot``, ``leader-epoch-checkpoint`` and ``partition.metadata``. The per-batch rules that
Kafka's LogSegment.append and LogSegment.recover share live here once and are used by recovery too:
``SegmentIndexer`` (offset/time index entries every ``index_interval_bytes``), ``ProducerStateManager``
(producer table, ABORT markers -> ``.txnindex`` entries) and ``LeaderEpochCache``.
Kafka: storage/.../log/{LogSegment,LocalLog,ProducerStateManager,LeaderEpochFileCache}.java.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from kcli.errors import CorruptSnapshotError, KcliError
from kcli.records import Batch, BatchReader, Record, RecordBatch
from kcli.records.batch import build_record_batch
from kcli.records.control import ControlRecordType, control_key, end_txn_marker_value, parse_control_type, parse_end_txn_marker
from kcli.records.types import NO_TIMESTAMP, TimestampType
from kcli.storage.checkpoint import (
    EpochEntry,
    LeaderEpochCheckpointFile,
    read_partition_entry,
    read_partition_metadata,
    write_partition_metadata,
)
from kcli.storage.files import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
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
from kcli.storage.index import AbortedTxn, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset, TransactionIndex
from kcli.storage.segment import FileBatchReader
from kcli.storage.snapshot import ProducerStateEntry, read_producer_snapshot, write_producer_snapshot

DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES


# -- the per-batch rules shared by append and recovery -----------------------------------------------

class SegmentIndexer:
    """Which offset/time index entries one batch adds to its segment (LogSegment.append and .recover).

    An entry is due when the bytes appended since the previous one *exceed* the interval, counted before
    the batch, so the batch at position 0 is never indexed; it is keyed by the batch's last offset. The
    time entry is (max timestamp so far, last offset of the batch holding it), only when it moved on.
    """

    __slots__ = ("base_offset", "index_interval_bytes", "bytes_since_last_index_entry", "max_timestamp",
                 "offset_of_max_timestamp", "last_time_entry_timestamp")

    def __init__(self, base_offset: int, index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES, *,
                 bytes_since_last_index_entry: int = 0, last_time_entry: TimestampOffset | None = None) -> None:
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.bytes_since_last_index_entry = bytes_since_last_index_entry
        # Kafka loads the max timestamp so far from the time index's last entry when it opens a segment.
        last = last_time_entry or TimestampOffset(NO_TIMESTAMP, base_offset)
        self.max_timestamp = self.last_time_entry_timestamp = last.timestamp
        self.offset_of_max_timestamp = last.offset

    def append(self, batch: Batch, position: int) -> tuple[OffsetPosition | None, TimestampOffset | None]:
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


class ProducerStateManager:
    """Kafka's ProducerStateManager as a log replay needs it: the last batch of every producer, its open
    transaction, and for each ABORT that completes one the AbortedTxn its segment's .txnindex records."""

    def __init__(self, entries: Iterable[ProducerStateEntry] = ()) -> None:
        self.producers: dict[int, ProducerStateEntry] = {e.producer_id: e for e in entries}

    def entries(self) -> list[ProducerStateEntry]:
        return sorted(self.producers.values(), key=lambda e: e.producer_id)

    def update(self, batch: RecordBatch) -> AbortedTxn | None:
        pid = batch.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid) or ProducerStateEntry(pid, batch.producer_epoch, -1, -1, 0, NO_TIMESTAMP, -1)
        if not batch.is_control:
            txn_first = entry.current_txn_first_offset
            if batch.is_transactional and txn_first < 0:
                txn_first = batch.base_offset
            self.producers[pid] = replace(
                entry, producer_epoch=batch.producer_epoch, last_sequence=batch.last_sequence,
                last_offset=batch.last_offset, offset_delta=batch.last_offset_delta, timestamp=batch.max_timestamp,
                current_txn_first_offset=txn_first,
            )
            return None
        records = batch.records()
        if not records:
            return None  # an empty control batch: the cleaner removed the whole transaction
        kind = parse_control_type(records[0].key)
        marker = parse_end_txn_marker(kind, records[0].value)
        aborted = None
        if kind is ControlRecordType.ABORT and entry.current_txn_first_offset >= 0:
            aborted = AbortedTxn(pid, entry.current_txn_first_offset, batch.base_offset,
                                 self._last_stable_offset(pid, batch.base_offset))
        self.producers[pid] = replace(entry, producer_epoch=batch.producer_epoch, coordinator_epoch=marker.coordinator_epoch,
                                      current_txn_first_offset=-1, timestamp=batch.max_timestamp)
        return aborted

    def _last_stable_offset(self, pid: int, marker_offset: int) -> int:
        """Kafka `lastStableOffset(completedTxn)`: the first offset of the earliest other open transaction."""
        others = [e.current_txn_first_offset for p, e in self.producers.items() if p != pid and e.current_txn_first_offset >= 0]
        return min(others) if others else marker_offset + 1


class LeaderEpochCache:
    """leader-epoch-checkpoint entries as Kafka's LeaderEpochFileCache keeps them."""

    def __init__(self, entries: Iterable[EpochEntry] = ()) -> None:
        self.entries: list[EpochEntry] = list(entries)

    def assign(self, epoch: int, start_offset: int) -> bool:
        """A batch of a newer epoch starts that epoch at its base offset; entries that would break
        monotonicity are dropped first (Kafka `maybeTruncateNonMonotonicEntries`)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1].epoch):
            return False
        while self.entries and self.entries[-1].start_offset >= start_offset:
            self.entries.pop()
        self.entries.append(EpochEntry(epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs starting beyond the log end. Kafka also drops one starting *at* it, but a leader that
        has not appended yet legitimately has such an entry, so an intact partition keeps it."""
        while self.entries and self.entries[-1].start_offset > end_offset:
            self.entries.pop()


def track_batch(batch: Batch, producers: ProducerStateManager, epochs: LeaderEpochCache) -> AbortedTxn | None:
    """The partition-level half of appending or recovering one batch: its leader epoch and producer state.
    Returns the aborted transaction it completes, for the .txnindex of the segment holding the batch."""
    if not isinstance(batch, RecordBatch):
        return None  # magic 0/1 carry neither epochs nor producer ids
    aborted = producers.update(batch)  # first: it may find the batch undecodable
    epochs.assign(batch.partition_leader_epoch, batch.base_offset)
    return aborted


class SegmentIndexes:
    """A segment's writable .index, .timeindex and .txnindex, fed one batch at a time."""

    def __init__(self, base_offset: int, config: LogConfig, *, index_path: Path, time_index_path: Path,
                 txn_index_path: Path) -> None:
        self.base_offset = base_offset
        self.index = OffsetIndex(index_path, base_offset, writable=True, max_index_size=config.segment_index_bytes)
        self.time_index = TimeIndex(time_index_path, base_offset, writable=True, max_index_size=config.segment_index_bytes)
        self.txn_index = TransactionIndex(txn_index_path, base_offset)  # the file appears with its first entry
        self.indexer = SegmentIndexer(
            base_offset, config.index_interval_bytes,
            last_time_entry=self.time_index.last_entry if self.time_index.entry_count else None,
        )

    @classmethod
    def for_segment(cls, directory: Path, base_offset: int, config: LogConfig, *, suffix: str = "") -> SegmentIndexes:
        """The indexes of segment `base_offset`; `suffix` names temporary copies (`.index.tmp`)."""
        return cls(base_offset, config,
                   index_path=segment_path(directory, base_offset, INDEX_SUFFIX + suffix),
                   time_index_path=segment_path(directory, base_offset, TIME_INDEX_SUFFIX + suffix),
                   txn_index_path=segment_path(directory, base_offset, TXN_INDEX_SUFFIX + suffix))

    def append(self, batch: Batch, position: int, aborted: AbortedTxn | None = None) -> None:
        entry, time_entry = self.indexer.append(batch, position)
        if entry is not None:
            self.index.append(entry.offset, entry.position)
        if time_entry is not None:
            self.time_index.maybe_append(time_entry.timestamp, time_entry.offset)
        if aborted is not None:
            self.txn_index.append(aborted)

    def flush(self) -> None:
        self.index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Final time-index entry, indexes trimmed to their entries, everything fsynced."""
        final = self.indexer.final_time_entry()
        if final is not None:
            self.time_index.maybe_append(final.timestamp, final.offset, skip_full_check=True)
        self.index.close()
        self.time_index.close()
        self.txn_index.flush()
        self.txn_index.close()


# -- the writer --------------------------------------------------------------------------------------

class _ActiveSegment:
    def __init__(self, directory: Path, base_offset: int, config: LogConfig) -> None:
        self.base_offset = base_offset
        self.log_path = segment_path(directory, base_offset, LOG_SUFFIX)
        self.log = open(self.log_path, "ab")
        self.size = self.log.tell()
        self.indexes = SegmentIndexes.for_segment(directory, base_offset, config)
        self.next_offset = base_offset
        self.first_timestamp: int | None = None  # the first batch's max timestamp: what log.roll.ms ages

    def resume(self) -> None:
        """Continue an existing segment: the next offset from a scan after the last index entry (Kafka
        `readNextOffset`), and the bytes since that entry."""
        last = self.indexes.index.last_entry  # (base offset, 0) when the index is empty
        first = next(iter(FileBatchReader(self.log_path, 0, min(self.size, 1 << 20))), None)
        self.first_timestamp = None if first is None else first.max_timestamp
        reader = FileBatchReader(self.log_path, last.position)
        for batch in reader:
            self.next_offset = batch.last_offset + 1
        if reader.valid_bytes != self.size:
            raise KcliError(f"invalid bytes after byte {reader.valid_bytes}: open the log with recovery",
                            path=str(self.log_path), position=reader.valid_bytes)
        self.indexes.indexer.bytes_since_last_index_entry = self.size - last.position

    def append(self, batch: Batch, aborted: AbortedTxn | None) -> None:
        if self.first_timestamp is None:
            self.first_timestamp = batch.max_timestamp
        position = self.size
        self.log.write(batch.raw)
        self.size += batch.size
        self.indexes.append(batch, position, aborted)
        self.next_offset = batch.last_offset + 1

    def flush(self) -> None:
        self.log.flush()
        os.fsync(self.log.fileno())
        self.indexes.flush()

    def close(self) -> None:
        self.log.flush()
        os.fsync(self.log.fileno())
        self.log.close()
        self.indexes.close()


class PartitionLog:
    """Append-only writer for one ``<topic>-<partition>`` directory: a new one, or (``open``) an existing one."""

    def __init__(self, directory: str | os.PathLike, *, config: LogConfig | None = None, base_offset: int = 0,
                 topic_id: uuid.UUID | None = None) -> None:
        self._setup(Path(directory), config, topic_id)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log_start_offset = base_offset
        self.segment = _ActiveSegment(self.directory, base_offset, self.config)
        self.segments: list[int] = [base_offset]

    def _setup(self, directory: Path, config: LogConfig | None, topic_id: uuid.UUID | None) -> None:
        self.directory = directory
        self.config = config or LogConfig()
        self.topic_id = topic_id
        self.producer_state = ProducerStateManager()
        self.leader_epochs = LeaderEpochCache()

    @classmethod
    def open(cls, directory: str | os.PathLike, *, config: LogConfig | None = None, recover: bool = True,
             quarantine: str | os.PathLike | None = None) -> PartitionLog:
        """Open an existing partition directory for appending, as a broker does at startup (LogLoader).

        With ``recover`` the directory is first recovered (kcli.storage.recovery; whatever is cut goes to
        ``quarantine``, by default beside the log dir). The active segment's indexes are resized for
        appends; producer state comes from the latest snapshot plus a replay of the batches after it.
        """
        directory = Path(directory)
        if not directory.is_dir():
            raise KcliError("not a partition directory", path=str(directory))
        config = config or LogConfig()
        if recover:
            from kcli.storage.recovery import apply_recovery, new_quarantine_dir, plan_recovery

            plan = plan_recovery(directory, config=config)
            if plan.actions:
                apply_recovery(plan, quarantine=Path(quarantine) if quarantine else new_quarantine_dir(directory))
        meta = directory / PARTITION_METADATA
        log = cls.__new__(cls)
        log._setup(directory, config, read_partition_metadata(meta).topic_id if meta.exists() else None)
        bases = sorted(offset_from_filename(p.name) for p in directory.iterdir() if classify(p) is FileKind.LOG)
        log.segments = bases or [0]  # Kafka creates an empty segment when none is left
        log.segment = _ActiveSegment(directory, log.segments[-1], config)
        log.segment.resume()
        epochs = directory / LEADER_EPOCH_CHECKPOINT
        log.leader_epochs = LeaderEpochCache(LeaderEpochCheckpointFile(epochs).read() if epochs.exists() else ())
        log.producer_state = log._load_producer_state()
        checkpointed = read_partition_entry(directory, LOG_START_OFFSET_CHECKPOINT)
        log.log_start_offset = log.segments[0]
        if checkpointed is not None and log.segments[0] < checkpointed <= log.log_end_offset:
            log.log_start_offset = checkpointed
        return log

    def _load_producer_state(self) -> ProducerStateManager:
        """The latest readable snapshot at or below the log end, then the batches after it (Kafka
        `loadProducerState`); without one, a replay of the whole log."""
        snapshots = sorted((offset_from_filename(p.name), p) for p in self.directory.iterdir()
                           if classify(p) is FileKind.PRODUCER_SNAPSHOT)
        start, state = self.segments[0], ProducerStateManager()
        for offset, path in reversed(snapshots):
            if offset > self.log_end_offset:
                continue
            try:
                state = ProducerStateManager(read_producer_snapshot(path).entries)
            except CorruptSnapshotError:
                continue  # Kafka deletes it and falls back to an older one
            start = offset
            break
        for i, base in enumerate(self.segments):
            if i + 1 < len(self.segments) and self.segments[i + 1] <= start:
                continue
            for batch in FileBatchReader(segment_path(self.directory, base, LOG_SUFFIX)):
                if isinstance(batch, RecordBatch) and batch.base_offset >= start:
                    state.update(batch)
        return state

    @property
    def log_end_offset(self) -> int:
        return self.segment.next_offset

    @property
    def producers(self) -> dict[int, ProducerStateEntry]:
        return self.producer_state.producers

    @property
    def epochs(self) -> list[EpochEntry]:
        return self.leader_epochs.entries

    # -- appends -------------------------------------------------------------------------------
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
        self.segment.append(batch, aborted)

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
        self.segment.log.flush()

    def fsync(self) -> None:
        """Make the active segment and its indexes durable (Kafka `LogSegment.flush`)."""
        self.segment.flush()

    # -- segments and files --------------------------------------------------------------------
    def roll(self, new_base_offset: int | None = None) -> None:
        base = self.log_end_offset if new_base_offset is None else new_base_offset
        self.segment.close()
        self.write_producer_snapshot(base)
        self.segment = _ActiveSegment(self.directory, base, self.config)
        self.segments.append(base)

    def segment_stats(self, base: int) -> tuple[int, int]:
        """(size in bytes, largest timestamp) of a segment: the time index's last entry, which an inactive
        segment's final entry makes the max (Kafka `largestTimestamp`); file mtime when there is none."""
        log_path = segment_path(self.directory, base, LOG_SUFFIX)
        size = log_path.stat().st_size
        with TimeIndex(segment_path(self.directory, base, TIME_INDEX_SUFFIX), base) as tindex:
            if tindex.entry_count and not tindex.is_preallocated:
                return size, tindex.last_entry.timestamp
        return size, int(log_path.stat().st_mtime * 1000)

    def delete_oldest_segment(self) -> list[Path]:
        """Retention: the oldest segment (never the active one) is renamed to ``.deleted`` for a delayed
        delete (Kafka `asyncDeleteSegment`) and the log start moves up. Returns the renamed files."""
        if len(self.segments) < 2:
            return []
        base = self.segments.pop(0)
        renamed = []
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            path = segment_path(self.directory, base, suffix)
            if path.exists():
                target = path.with_name(path.name + DELETED_SUFFIX)
                path.rename(target)
                renamed.append(target)
        self.log_start_offset = max(self.log_start_offset, self.segments[0])
        return renamed

    def write_producer_snapshot(self, offset: int) -> None:
        write_producer_snapshot(segment_path(self.directory, offset, PRODUCER_SNAPSHOT_SUFFIX), self.producer_state.entries())

    def close(self) -> None:
        """Clean close: final index entries, trimmed indexes, snapshot at the log end, checkpoints."""
        self.segment.close()
        self.write_producer_snapshot(self.log_end_offset)
        LeaderEpochCheckpointFile(self.directory / LEADER_EPOCH_CHECKPOINT).write(self.epochs)
        if self.topic_id is not None:
            write_partition_metadata(self.directory / PARTITION_METADATA, self.topic_id)

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
