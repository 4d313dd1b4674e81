"""Producer state of a partition: Kafka's ProducerStateManager, ProducerStateEntry and ProducerAppendInfo.

Every idempotent or transactional producer that wrote to the partition has an entry: its epoch, the
metadata of its last five batches (Kafka ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``: a producer has at
most five requests in flight, so a retry repeats one of those), its open transaction and the coordinator
epoch of its last marker. Appends from clients are checked first (``ProducerAppendInfo``: epoch, then
sequence, then transaction state); replays of the log (recovery, loading, the cleaner) are not.

The ``.snapshot`` file keeps only the last batch of each producer (schema version 1, kcli.storage.snapshot),
as Kafka's does, so after a restart only the last batch is recognised as a duplicate, as in Kafka.

Kafka: storage/.../log/{ProducerStateManager,ProducerStateEntry,ProducerAppendInfo,BatchMetadata}.java (3.7).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from kcli.records.control import ControlRecordType, parse_control_type, parse_end_txn_marker
from kcli.records.types import INT32_MAX, NO_PRODUCER_EPOCH, NO_SEQUENCE, NO_TIMESTAMP
from kcli.storage.errors import (
    DuplicateSequence,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from kcli.storage.index import AbortedTxn
from kcli.storage.snapshot import NO_OFFSET, ProducerStateEntry, decrement_sequence

NUM_BATCHES_TO_RETAIN = 5


class AppendOrigin(Enum):
    """Kafka AppendOrigin: who wrote the batch. Only CLIENT appends get sequence checks and new offsets."""

    CLIENT = "client"
    REPLICATION = "replication"
    COORDINATOR = "coordinator"


class ProducerBatch(Protocol):
    """What producer state reads of a batch: a RecordBatch, or the validator's BatchInfo."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_offset: int
    max_timestamp: int

    @property
    def last_sequence(self) -> int: ...
    @property
    def last_offset(self) -> int: ...
    @property
    def is_transactional(self) -> bool: ...
    @property
    def is_control(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """Kafka BatchMetadata: one retained batch of a producer."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerEntry:
    """Kafka ProducerStateEntry. Read like a snapshot entry (``last_sequence``, ``first_offset`` ...: those
    of the last batch), plus ``batches``: up to five, oldest first."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    batches: list[BatchMetadata] = field(default_factory=list)
    coordinator_epoch: int = -1
    current_txn_first_offset: int = NO_OFFSET
    last_timestamp: int = NO_TIMESTAMP

    @classmethod
    def from_snapshot(cls, entry: ProducerStateEntry) -> ProducerEntry:
        batches = [BatchMetadata(entry.last_sequence, entry.last_offset, entry.offset_delta, entry.timestamp)] \
            if entry.last_offset >= 0 else []
        return cls(entry.producer_id, entry.producer_epoch, batches, entry.coordinator_epoch,
                   entry.current_txn_first_offset, entry.timestamp)

    def to_snapshot(self) -> ProducerStateEntry:
        """What Kafka's writeSnapshot keeps: the last batch only."""
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.last_sequence, self.last_offset,
                                  self.offset_delta, self.last_timestamp, self.coordinator_epoch,
                                  self.current_txn_first_offset)

    def copy(self) -> ProducerEntry:
        return ProducerEntry(self.producer_id, self.producer_epoch, list(self.batches), self.coordinator_epoch,
                             self.current_txn_first_offset, self.last_timestamp)

    # -- the last batch, as the snapshot entry spells it --------------------------------------
    @property
    def has_batch_metadata(self) -> bool:
        return bool(self.batches)

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_sequence(self) -> int:
        return self.batches[-1].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else NO_OFFSET

    @property
    def first_offset(self) -> int:
        return self.batches[-1].first_offset if self.batches else NO_OFFSET

    @property
    def offset_delta(self) -> int:
        return self.batches[-1].offset_delta if self.batches else 0

    @property
    def timestamp(self) -> int:
        return self.last_timestamp

    # -- updates -----------------------------------------------------------------------------
    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        """Kafka `addBatch`: a new epoch forgets the old epoch's batches; at most five are kept."""
        self.maybe_update_epoch(epoch)
        self.batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        if len(self.batches) > NUM_BATCHES_TO_RETAIN:
            del self.batches[0]
        self.last_timestamp = timestamp

    def maybe_update_epoch(self, epoch: int) -> None:
        if self.producer_epoch != epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def find_duplicate_batch(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """Kafka `findDuplicateBatch`: a retained batch of the same epoch with the same sequence range."""
        if epoch != self.producer_epoch:
            return None
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Kafka `ProducerAppendInfo.inSequence`: the next sequence, wrapping from Int.MAX to 0."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerAppendInfo:
    """Kafka ProducerAppendInfo: the checks and the new entry for one producer's batches of one append.

    Works on a copy of the producer's entry; ``ProducerStateManager.update`` applies the batches once they
    are in the log. ``topic_partition`` only decorates messages (Kafka's wording, ``in partition t-0``)."""

    def __init__(self, producer_id: int, current: ProducerEntry | None, origin: AppendOrigin,
                 topic_partition: str = "") -> None:
        self.producer_id = producer_id
        self.origin = origin
        self.topic_partition = topic_partition
        self.current = current or ProducerEntry(producer_id)
        self.updated = self.current.copy()

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> DuplicateSequence | None:
        meta = self.updated.find_duplicate_batch(epoch, first_seq, last_seq)
        if meta is None:
            return None
        return DuplicateSequence(self.producer_id, meta.first_offset, meta.last_offset, meta.timestamp)

    def check_producer_epoch(self, epoch: int, offset: int) -> None:
        current = self.updated.producer_epoch
        if epoch < current and self.origin is not AppendOrigin.REPLICATION:
            # Since 2.7 InvalidProducerEpoch replaces ProducerFenced in the produce response (KIP-588).
            raise InvalidProducerEpochError(
                f"Epoch of producer {self.producer_id} at offset {offset} in {self.topic_partition} is {epoch}, "
                f"which is smaller than the last seen epoch {current}")

    def check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        """Kafka 3.x `ProducerAppendInfo.checkSequence`. A producer the log does not know (no entry, or its
        batches were all removed by retention) is accepted at any sequence: since 2.x UNKNOWN_PRODUCER_ID is
        only answered when the log start moved past the producer's state, which kcli does not track."""
        entry = self.updated
        if epoch != entry.producer_epoch:
            if first_seq != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at offset {offset} in "
                    f"partition {self.topic_partition}: {epoch} (request epoch), {first_seq} (seq. number), "
                    f"{entry.producer_epoch} (current producer epoch)")
            return
        current_last_seq = entry.last_sequence
        if not (entry.producer_epoch == NO_PRODUCER_EPOCH or in_sequence(current_last_seq, first_seq)):
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {self.producer_id} at offset {offset} in partition "
                f"{self.topic_partition}: {first_seq} (incoming seq. number), {current_last_seq} "
                f"(current end sequence number)")

    def append_data_batch(self, epoch: int, first_seq: int, last_seq: int, last_timestamp: int, first_offset: int,
                          last_offset: int, is_transactional: bool) -> None:
        """Kafka `appendDataBatch`: epoch and (client appends) sequence checks, then the batch is retained."""
        self.check_producer_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self.check_sequence(epoch, first_seq, first_offset)
        self.updated.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp)
        if self.updated.current_txn_first_offset >= 0 and not is_transactional:
            raise InvalidTxnStateError(f"Expected transactional write from producer {self.producer_id} at offset "
                                       f"{first_offset} in partition {self.topic_partition}")
        if self.updated.current_txn_first_offset < 0 and is_transactional:
            self.updated.current_txn_first_offset = first_offset

    def append_end_txn_marker(self, epoch: int, coordinator_epoch: int, offset: int, timestamp: int) -> None:
        """Kafka `appendEndTxnMarker`: the producer epoch and coordinator epoch checks; the marker closes the
        open transaction."""
        self.check_producer_epoch(epoch, offset)
        if self.updated.coordinator_epoch > coordinator_epoch and self.origin is not AppendOrigin.REPLICATION:
            raise TransactionCoordinatorFencedError(
                f"Invalid coordinator epoch for producer {self.producer_id} at offset {offset} in partition "
                f"{self.topic_partition}: {coordinator_epoch} (zombie), {self.updated.coordinator_epoch} (current)")
        self.updated.maybe_update_epoch(epoch)
        self.updated.coordinator_epoch = coordinator_epoch
        self.updated.current_txn_first_offset = NO_OFFSET
        self.updated.last_timestamp = timestamp


class ProducerStateManager:
    """The producers of one partition (Kafka ProducerStateManager without the timers and snapshot files,
    which PartitionLog and the loader own).

    ``producers`` maps producer id -> ProducerEntry; ``entries()`` gives the snapshot entries.
    ``update(batch)`` applies a batch already in the log, unchecked (replay, and appends after validation);
    ``prepare_update(pid, origin)`` starts the checks of a new append (kcli.storage.validator does)."""

    def __init__(self, entries: Iterable[ProducerStateEntry | ProducerEntry] = ()) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        # Completed transactions whose marker the high watermark has not passed yet, (first offset, marker
        # offset): they stay unstable until it does (Kafka's unreplicatedTxns).
        self.unreplicated: list[tuple[int, int]] = []
        for e in entries:
            self.producers[e.producer_id] = e.copy() if isinstance(e, ProducerEntry) else ProducerEntry.from_snapshot(e)

    def entries(self) -> list[ProducerStateEntry]:
        """Snapshot entries, by producer id (what a ``.snapshot`` file holds)."""
        return [self.producers[pid].to_snapshot() for pid in sorted(self.producers)]

    def last_entry(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def prepare_update(self, producer_id: int, origin: AppendOrigin = AppendOrigin.CLIENT,
                       topic_partition: str = "") -> ProducerAppendInfo:
        return ProducerAppendInfo(producer_id, self.producers.get(producer_id), origin, topic_partition)

    def open_transactions(self) -> list[int]:
        """First offsets of the open transactions (what the last stable offset is computed from)."""
        return sorted(e.current_txn_first_offset for e in self.producers.values() if e.current_txn_first_offset >= 0)

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """Kafka's firstUnstableOffset: the first offset of the oldest open transaction or of a completed one
        whose marker is not below ``high_watermark`` yet (those below it are forgotten here)."""
        if high_watermark is not None and self.unreplicated:
            self.unreplicated = [t for t in self.unreplicated if t[1] >= high_watermark]
        firsts = self.open_transactions() + [first for first, _ in self.unreplicated]
        return min(firsts) if firsts else None

    def truncate(self) -> None:
        self.producers.clear()
        self.unreplicated.clear()

    def update(self, batch: Any, control: tuple[ControlRecordType, int] | None = None) -> AbortedTxn | None:
        """Apply one batch already in the log (no checks). For a control batch, the marker's type and
        coordinator epoch come from ``control`` or are decoded from the batch. Returns the AbortedTxn an ABORT
        completes, for the ``.txnindex`` of the segment holding the marker."""
        pid = batch.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, batch.producer_epoch)
        if not batch.is_control:
            last_offset = batch.last_offset
            entry.add_batch(batch.producer_epoch, batch.last_sequence, last_offset, last_offset - batch.base_offset,
                            batch.max_timestamp)
            if batch.is_transactional and entry.current_txn_first_offset < 0:
                entry.current_txn_first_offset = batch.base_offset
            return None
        if control is None:
            records = batch.records()
            if not records:
                return None  # an empty control batch: the cleaner removed the whole transaction
            kind = parse_control_type(records[0].key)
            control = (kind, parse_end_txn_marker(kind, records[0].value).coordinator_epoch)
        kind, coordinator_epoch = control
        aborted = None
        if kind is ControlRecordType.ABORT and entry.current_txn_first_offset >= 0:
            aborted = AbortedTxn(pid, entry.current_txn_first_offset, batch.base_offset,
                                 self._last_stable_offset(pid, batch.base_offset))
        if entry.current_txn_first_offset >= 0 and kind in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            self.unreplicated.append((entry.current_txn_first_offset, batch.base_offset))
        entry.maybe_update_epoch(batch.producer_epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = NO_OFFSET
        entry.last_timestamp = batch.max_timestamp
        return aborted

    def _last_stable_offset(self, pid: int, marker_offset: int) -> int:
        """Kafka `lastStableOffset(completedTxn)`: the first offset of the earliest other open transaction."""
        others = [e.current_txn_first_offset for p, e in self.producers.items() if p != pid and e.current_txn_first_offset >= 0]
        return min(others) if others else marker_offset + 1


def track_batch(batch: Any, producers: ProducerStateManager, epochs: Any) -> AbortedTxn | None:
    """The partition-level half of appending or recovering one batch: its leader epoch (``epochs``: a
    LeaderEpochCache) and producer state. Returns the aborted transaction it completes, for the .txnindex
    of the segment holding the batch. Magic 0/1 batches carry neither epochs nor producer ids."""
    if getattr(batch, "magic", 2) < 2:
        return None
    aborted = producers.update(batch)  # first: it may find the batch undecodable
    epochs.assign(batch.partition_leader_epoch, batch.base_offset)
    return aborted
