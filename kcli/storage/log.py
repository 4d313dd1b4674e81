"""PartitionLog: append batches to a partition directory exactly as a Kafka broker lays them out.

Segments roll by size, the offset and time indexes get an entry every ``index_interval_bytes`` (the
LogSegment.append rule), ABORT markers add ``.txnindex`` entries, and closing writes the final time-index
entry, trims the indexes, and writes the producer ``.snapshot``, ``leader-epoch-checkpoint`` and
``partition.metadata``. Kafka: storage/.../log/{LogSegment,LocalLog,ProducerStateManager}.java.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, replace
from pathlib import Path

from kcli.errors import KcliError
from kcli.records import Batch, BatchReader, Record, RecordBatch
from kcli.records.batch import build_record_batch
from kcli.records.control import ControlRecordType, control_key, end_txn_marker_value, parse_control_type, parse_end_txn_marker
from kcli.records.types import NO_TIMESTAMP, TimestampType
from kcli.storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile, write_partition_metadata
from kcli.storage.files import (
    INDEX_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    PARTITION_METADATA,
    PRODUCER_SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    segment_path,
)
from kcli.storage.index import AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex
from kcli.storage.snapshot import ProducerStateEntry, write_producer_snapshot

DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024 * 1024


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES


class _ActiveSegment:
    def __init__(self, directory: Path, base_offset: int, config: LogConfig) -> None:
        self.base_offset = base_offset
        self.log_path = segment_path(directory, base_offset, LOG_SUFFIX)
        self.log = open(self.log_path, "ab")
        self.size = self.log.tell()
        self.index = OffsetIndex(segment_path(directory, base_offset, INDEX_SUFFIX), base_offset, writable=True,
                                 max_index_size=config.segment_index_bytes)
        self.time_index = TimeIndex(segment_path(directory, base_offset, TIME_INDEX_SUFFIX), base_offset, writable=True,
                                    max_index_size=config.segment_index_bytes)
        self.txn_index_path = segment_path(directory, base_offset, TXN_INDEX_SUFFIX)
        self.txn_index: TransactionIndex | None = None
        self.bytes_since_last_index_entry = 0
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.next_offset = base_offset

    def close(self) -> None:
        # The final time-index entry Kafka adds when a segment becomes inactive (skipped if a repeat).
        if self.max_timestamp > NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp, skip_full_check=True)
        self.log.flush()
        os.fsync(self.log.fileno())
        self.log.close()
        self.index.trim_to_valid_size()
        self.index.close()
        self.time_index.trim_to_valid_size()
        self.time_index.close()
        if self.txn_index is not None:
            self.txn_index.flush()
            self.txn_index.close()


class PartitionLog:
    """Append-only writer for one ``<topic>-<partition>`` directory (a new one, or one it created)."""

    def __init__(self, directory: str | os.PathLike, *, config: LogConfig | None = None, base_offset: int = 0,
                 topic_id: uuid.UUID | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config = config or LogConfig()
        self.producers: dict[int, ProducerStateEntry] = {}
        self.epochs: list[EpochEntry] = []
        self.topic_id = topic_id
        self.segment = _ActiveSegment(self.directory, base_offset, self.config)
        self.segments: list[int] = [base_offset]

    @property
    def log_end_offset(self) -> int:
        return self.segment.next_offset

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
        raw = batch.raw
        if batch.base_offset < self.log_end_offset:
            raise KcliError(f"batch base offset {batch.base_offset} is below the log end offset {self.log_end_offset}")
        seg = self.segment
        if seg.size > 0 and seg.size + len(raw) > self.config.segment_bytes:
            self.roll(batch.base_offset)
            seg = self.segment
        position = seg.size
        seg.log.write(raw)
        seg.size += len(raw)
        if batch.max_timestamp > seg.max_timestamp:
            seg.max_timestamp = batch.max_timestamp
            seg.offset_of_max_timestamp = batch.last_offset
        # LogSegment.append: index the append when the bytes since the last entry exceed the interval.
        if seg.bytes_since_last_index_entry > self.config.index_interval_bytes:
            seg.index.append(batch.last_offset, position)
            seg.time_index.maybe_append(seg.max_timestamp, seg.offset_of_max_timestamp)
            seg.bytes_since_last_index_entry = 0
        seg.bytes_since_last_index_entry += len(raw)
        seg.next_offset = batch.last_offset + 1
        if isinstance(batch, RecordBatch):
            self._track_epoch(batch)
            self._track_producer(batch)

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

    def _track_epoch(self, batch: RecordBatch) -> None:
        epoch = batch.partition_leader_epoch
        if epoch >= 0 and (not self.epochs or epoch > self.epochs[-1].epoch):
            self.epochs.append(EpochEntry(epoch, batch.base_offset))

    def _track_producer(self, batch: RecordBatch) -> None:
        pid = batch.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid) or ProducerStateEntry(pid, batch.producer_epoch, -1, -1, 0, NO_TIMESTAMP, -1)
        if batch.is_control:
            (record,) = batch.records()
            kind = parse_control_type(record.key)
            marker = parse_end_txn_marker(kind, record.value)
            if kind is ControlRecordType.ABORT and entry.current_txn_first_offset >= 0:
                self._index_abort(pid, entry.current_txn_first_offset, batch.base_offset)
            self.producers[pid] = replace(entry, producer_epoch=batch.producer_epoch, coordinator_epoch=marker.coordinator_epoch,
                                          current_txn_first_offset=-1, timestamp=batch.max_timestamp)
            return
        txn_first = entry.current_txn_first_offset
        if batch.is_transactional and txn_first < 0:
            txn_first = batch.base_offset
        self.producers[pid] = replace(
            entry, producer_epoch=batch.producer_epoch, last_sequence=batch.last_sequence, last_offset=batch.last_offset,
            offset_delta=batch.last_offset_delta, timestamp=batch.max_timestamp, current_txn_first_offset=txn_first,
        )

    def _index_abort(self, pid: int, first_offset: int, marker_offset: int) -> None:
        others = [e.current_txn_first_offset for p, e in self.producers.items() if p != pid and e.current_txn_first_offset >= 0]
        lso = min(others) if others else marker_offset + 1
        seg = self.segment
        if seg.txn_index is None:
            seg.txn_index = TransactionIndex(seg.txn_index_path, seg.base_offset)
        seg.txn_index.append(AbortedTxn(pid, first_offset, marker_offset, lso))

    # -- segments and files --------------------------------------------------------------------
    def roll(self, new_base_offset: int | None = None) -> None:
        base = self.log_end_offset if new_base_offset is None else new_base_offset
        self.segment.close()
        self.write_producer_snapshot(base)
        self.segment = _ActiveSegment(self.directory, base, self.config)
        self.segments.append(base)

    def write_producer_snapshot(self, offset: int) -> None:
        path = segment_path(self.directory, offset, PRODUCER_SNAPSHOT_SUFFIX)
        write_producer_snapshot(path, sorted(self.producers.values(), key=lambda e: e.producer_id))

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
