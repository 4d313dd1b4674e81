"""Partition: this broker's replica of one topic-partition (Kafka's cluster.Partition).

It holds the log (through the LogManager's ManagedLog), the leadership this broker was told about (leader,
leader epoch, partition epoch = the state znode's version, replicas, ISR), and the high watermark. As leader it
appends clients' records (validation in storage, then the LogManager's append), tracks each follower's fetch
state, expands and shrinks the ISR and advances the high watermark; as follower it keeps the high watermark
the leader sends. Reads are bounded by the high watermark for consumers, the last stable offset for
read_committed, and the log end for followers (Kafka's FetchIsolation).

Standalone, every partition is led here with this broker as its only replica, so the high watermark is the
log end offset.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kcli.broker.errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetNotAvailableError,
    OffsetOutOfRangeError,
    UnknownLeaderEpochError,
)
from kcli.broker.log_manager import ManagedLog
from kcli.storage.index import AbortedTxn
from kcli.storage.reader import PartitionReader, TimestampMatch

LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP = -1, -2, -3
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-1005: the local log start offset (tiered storage)
NO_LEADER = -1


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ReadResult:
    records: Any  # b"" or a FetchSlice holding its segment file open until the response is sent
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    log_end_offset: int
    aborted: list[AbortedTxn] | None = None
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) for a follower whose log diverged
    # tiered storage: (fetch offset, max bytes, upper bound, read_committed) below the local log start, for the
    # RemoteLogManager
    # to read from the remote store off the event loop (Kafka's RemoteStorageFetchInfo)
    remote_fetch: tuple[int, int, int, bool] | None = None


@dataclass
class ReplicaState:
    """What the leader knows of one follower (Kafka's Replica): updated on each of its fetches."""

    broker_id: int
    log_end_offset: int = -1  # unknown until it fetches
    log_start_offset: int = -1
    last_fetch_time_ms: int = 0
    last_fetch_leader_log_end_offset: int = 0
    last_caught_up_time_ms: int = 0

    def update_fetch_state(self, fetch_offset: int, log_start_offset: int, leader_end: int, at_ms: int) -> None:
        """Kafka's Replica.updateFetchStateOrThrow: caught up when the fetch reached the leader's end of the
        time, or the end the leader had at the previous fetch (so a steady stream does not look lagging)."""
        if fetch_offset >= leader_end:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, at_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_start_offset = log_start_offset
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_log_end_offset = max(leader_end, self.last_fetch_leader_log_end_offset)
        self.last_fetch_time_ms = at_ms


def _reset_replica_state(previous: ReplicaState | None, broker_id: int, now: int, leader_end: int,
                         in_sync: bool) -> ReplicaState:
    """Kafka's Replica.resetReplicaState at a new leader epoch: caught up now if in the ISR, else never (so a
    follower out of the ISR does not hold the high watermark back). ``previous`` is the follower's state under
    the epoch before, kept by a re-elected leader; None for a new leader, which waits for a fetch."""
    caught_up = now if in_sync else 0
    if previous is None:
        return ReplicaState(broker_id, last_caught_up_time_ms=caught_up)
    return ReplicaState(broker_id, log_end_offset=previous.log_end_offset, log_start_offset=previous.log_start_offset,
                        last_fetch_time_ms=now if in_sync else 0, last_fetch_leader_log_end_offset=leader_end,
                        last_caught_up_time_ms=caught_up)


@dataclass
class LeaderAndIsrState:
    """One partition's state in a LeaderAndIsr request (the controller's decision)."""

    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int
    replicas: list[int]
    is_new: bool = False


@dataclass
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    managed: ManagedLog
    local_broker_id: int = 0
    leader_id: int = NO_LEADER
    leader_epoch: int = 0
    partition_epoch: int = 0
    controller_epoch: int = 0
    replicas: list[int] = field(default_factory=list)
    isr: list[int] = field(default_factory=list)
    remote: dict[int, ReplicaState] = field(default_factory=dict)
    leader_epoch_start_offset: int = 0
    pending_isr: list[int] | None = None  # an ISR change sent and not yet committed (one at a time)
    _high_watermark: int = 0

    # -- state -------------------------------------------------------------------------------------
    @property
    def log(self):
        return self.managed.log

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def high_watermark(self) -> int:
        if self.is_leader and len(self.replicas) <= 1:
            return self.log.log_end_offset  # the only replica: everything appended is replicated
        return min(max(self._high_watermark, self.log.log_start_offset), self.log.log_end_offset)

    @property
    def maximal_isr(self) -> list[int]:
        """The ISR including a pending expansion (Kafka's maximalIsr): the high watermark waits for it."""
        if self.pending_isr is not None and len(self.pending_isr) > len(self.isr):
            return self.pending_isr
        return self.isr

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest transaction still open, or completed by a marker the high watermark has
        not passed, if below the high watermark; else the high watermark (KIP-98, Kafka's UnifiedLog)."""
        hw = self.high_watermark
        first_unstable = self.log.producer_state.first_unstable_offset(hw)
        return hw if first_unstable is None else min(first_unstable, hw)

    def initialize_high_watermark(self, checkpointed: int | None) -> None:
        """From replication-offset-checkpoint, clamped to [log start, log end] (Kafka: the log's HW on load)."""
        hw = self.log.log_end_offset if checkpointed is None else checkpointed
        self._high_watermark = min(max(hw, self.log.log_start_offset), self.log.log_end_offset)

    # -- leadership (LeaderAndIsr) -------------------------------------------------------------------
    def make_leader(self, state: LeaderAndIsrState) -> bool:
        """Kafka's Partition.makeLeader: True when this broker became leader anew (the epoch rose)."""
        if state.partition_epoch < self.partition_epoch and state.leader_epoch <= self.leader_epoch:
            return False  # an older partition epoch: ignored
        was_leader = self.is_leader
        epoch_rose = state.leader_epoch > self.leader_epoch or self.leader_id == NO_LEADER
        self.controller_epoch = state.controller_epoch
        self.replicas = list(state.replicas)
        self.isr = list(state.isr)
        self.pending_isr = None
        now = now_ms()
        if epoch_rose:
            with self.managed.lock:
                self.log.leader_epochs.assign(state.leader_epoch, self.log.log_end_offset)
                self.leader_epoch_start_offset = self.log.log_end_offset
            # Kafka's Replica.resetReplicaState: a new leader knows nothing of its followers yet; a re-elected one
            # (the controller bumped the epoch to drop a dead follower from the ISR, say) keeps each follower's
            # log start and end, so the high watermark does not wait for every follower's next fetch.
            # Stricter than Kafka: only when the new epoch directly follows ours. Across a gap some epoch was
            # never seen here, another broker may have led in it, and a follower may have appended what this
            # broker does not have below the end it last fetched from here (a zombie leader re-elected).
            kept = self.remote if was_leader and state.leader_epoch == self.leader_epoch + 1 else {}
            self.remote = {r: _reset_replica_state(kept.get(r), r, now, self.log.log_end_offset, r in self.isr)
                           for r in self.replicas if r != self.local_broker_id}
        else:
            for r in self.replicas:
                if r != self.local_broker_id and r not in self.remote:
                    self.remote[r] = ReplicaState(r)
            for r in list(self.remote):
                if r not in self.replicas:
                    del self.remote[r]
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.leader_id = self.local_broker_id
        self.maybe_increment_high_watermark()
        return epoch_rose or not was_leader

    def make_follower(self, state: LeaderAndIsrState) -> bool:
        """Kafka's Partition.makeFollower: True when the leader epoch rose (the fetcher must restart)."""
        if state.partition_epoch < self.partition_epoch and state.leader_epoch <= self.leader_epoch:
            return False
        changed = state.leader_epoch > self.leader_epoch or self.leader_id != state.leader
        if self.is_leader:
            # A leader's high watermark is what it knows replicated; as follower it waits for the leader's.
            self._high_watermark = self.high_watermark
        self.controller_epoch = state.controller_epoch
        self.replicas = list(state.replicas)
        self.isr = []  # followers hold no ISR (Kafka)
        self.pending_isr = None
        self.remote = {}
        self.leader_epoch = state.leader_epoch
        self.partition_epoch = state.partition_epoch
        self.leader_id = state.leader
        return changed

    def make_standalone_leader(self) -> None:
        """A standalone broker leads every partition alone, at the log's latest leader epoch."""
        latest = self.log.leader_epochs.latest_epoch
        self.replicas, self.isr = [self.local_broker_id], [self.local_broker_id]
        self.leader_id = self.local_broker_id
        self.leader_epoch = max(self.leader_epoch, latest if latest is not None else 0)

    def check_epoch(self, current_leader_epoch: int, *, require_leader: bool) -> None:
        """A fetch or produce with the client's known leader epoch (KIP-320): older is FENCED_LEADER_EPOCH,
        newer UNKNOWN_LEADER_EPOCH; not the leader is NOT_LEADER_OR_FOLLOWER."""
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise FencedLeaderEpochError(f"leader epoch {current_leader_epoch} is older than the current "
                                             f"{self.leader_epoch} of {self.topic}-{self.index}")
            if current_leader_epoch > self.leader_epoch:
                raise UnknownLeaderEpochError(f"leader epoch {current_leader_epoch} is newer than the current "
                                              f"{self.leader_epoch} of {self.topic}-{self.index}")
        if require_leader and not self.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of "
                                           f"{self.topic}-{self.index} (leader {self.leader_id})")

    # -- the leader's view of its followers ------------------------------------------------------------
    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, log_start_offset: int,
                                    leader_end: int) -> bool:
        """A follower fetched from ``fetch_offset``: True when the high watermark moved."""
        replica = self.remote.get(replica_id)
        if replica is None:
            return False
        replica.update_fetch_state(fetch_offset, log_start_offset, leader_end, now_ms())
        return self.maybe_increment_high_watermark()

    def isr_to_expand(self, replica_id: int) -> list[int] | None:
        """The ISR with ``replica_id`` added when it caught up (Kafka's canAddReplicaToIsr): not in the ISR,
        log end >= high watermark and >= the start offset of this leader's epoch; None otherwise."""
        if not self.is_leader or self.pending_isr is not None or replica_id in self.isr:
            return None
        replica = self.remote.get(replica_id)
        if replica is None or replica.log_end_offset < 0:
            return None
        if replica.log_end_offset >= self.high_watermark and replica.log_end_offset >= self.leader_epoch_start_offset:
            return [*self.isr, replica_id]
        return None

    def isr_to_shrink(self, lag_time_max_ms: int) -> list[int] | None:
        """The ISR without the followers that have not caught up for replica.lag.time.max.ms (Kafka's
        getOutOfSyncReplicas); None when nothing changes."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        end, now = self.log_end_offset, now_ms()
        out = [r for r in self.isr if r != self.local_broker_id and (replica := self.remote.get(r)) is not None
               and replica.log_end_offset != end and now - replica.last_caught_up_time_ms > lag_time_max_ms]
        if not out:
            return None
        return [r for r in self.isr if r not in out]

    def maybe_increment_high_watermark(self) -> bool:
        """HW = min over the leader and each ISR member's log end (Kafka also counts caught-up followers
        outside the ISR; kctl waits for them to join). The high watermark never moves back on the leader."""
        if not self.is_leader:
            return False
        ends = [self.log_end_offset]
        for r in self.maximal_isr:
            if r == self.local_broker_id:
                continue
            replica = self.remote.get(r)
            ends.append(replica.log_end_offset if replica is not None else -1)
        candidate = min(ends)
        if candidate > self._high_watermark:
            self._high_watermark = candidate
            return True
        return False

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        self._high_watermark = min(leader_high_watermark, self.log_end_offset)

    # -- reads ---------------------------------------------------------------------------------------
    def reader(self) -> PartitionReader:
        with self.managed.lock:
            return self.log.reader()

    def read(self, fetch_offset: int, max_bytes: int, *, read_committed: bool, min_one_message: bool,
             max_offset: int | None = None, log_end_isolation: bool = False) -> ReadResult:
        """Kafka's Partition.readRecords: OffsetOutOfRangeError outside [log start, log end]. Followers
        (``log_end_isolation``) read up to the log end, consumers to the high watermark or the LSO."""
        start, end, hw = self.log_start_offset, self.log_end_offset, self.high_watermark
        stable = self.last_stable_offset
        if fetch_offset < start or fetch_offset > end:
            raise OffsetOutOfRangeError(f"offset {fetch_offset} is outside [{start}, {end}] of {self.topic}-{self.index}")
        upper = end if log_end_isolation else stable if read_committed else hw
        if max_offset is not None:
            upper = min(upper, max_offset)
        result = ReadResult(b"", hw, stable, start, end)
        if max_bytes <= 0 and not min_one_message or fetch_offset >= upper:
            return result
        # Under the log's lock, so no retention delete or cleaner swap runs between finding the bytes and
        # opening their file; the slice keeps the file open until the response is sent (sendfile). The local
        # start is read under it too: a local delete just before would otherwise send the reader to the next
        # local segment, past the deleted offsets (Kafka's LocalLog.read raises OffsetOutOfRange there).
        with self.managed.lock:
            local_start = self.log.local_log_start_offset
            if fetch_offset < local_start:
                if not self.log.remote_log_enabled:
                    raise OffsetOutOfRangeError(f"offset {fetch_offset} is below the log start {local_start} of "
                                                f"{self.topic}-{self.index}")
                if log_end_isolation:  # Kafka: a follower builds its log from the leader's local start instead
                    raise OffsetMovedToTieredStorageError(
                        f"offset {fetch_offset} of {self.topic}-{self.index} is below the local log start "
                        f"{local_start}: it is in the remote store")
                result.remote_fetch = (fetch_offset, max_bytes, upper, read_committed)
                return result
            found = self.log.read(fetch_offset, max_bytes, max_offset=upper, keep_open=True,
                                  min_one_batch=min_one_message)
            reader = self.log.reader() if read_committed and found is not None else None
        if found is None:
            return result
        result.records = found
        if reader is not None:
            result.aborted = reader.aborted_transactions(fetch_offset, stable)
        return result

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """Truncation on fetch (KIP-595, Fetch v12+): the (epoch, end offset) a follower must truncate to when
        its last fetched epoch ends earlier here than its fetch offset, or is unknown here."""
        if last_fetched_epoch < 0:
            return None
        if last_fetched_epoch == self.log.leader_epochs.latest_epoch and fetch_offset <= self.log.log_end_offset:
            return None  # the latest epoch ends at the log end, not before the fetch offset (no lock needed)
        with self.managed.lock:
            epoch, end = self.log.leader_epochs.end_offset_for(last_fetched_epoch, self.log.log_end_offset)
        if epoch < 0 or end < 0:
            raise OffsetOutOfRangeError(f"Could not determine the end offset of the last fetched epoch "
                                        f"{last_fetched_epoch} of {self.topic}-{self.index}")
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def check_offsets_available(self) -> None:
        """A client's ListOffsets for the latest offset, on a leader whose high watermark still lags the start of
        its leader epoch (just elected, followers not heard from yet): OFFSET_NOT_AVAILABLE, not a stale answer
        (KIP-207; Kafka's Partition.fetchOffsetForTimestamp)."""
        if self.is_leader and self.leader_epoch_start_offset > self.high_watermark:
            raise OffsetNotAvailableError(f"the high watermark {self.high_watermark} of {self.topic}-{self.index} "
                                          f"is below the start offset {self.leader_epoch_start_offset} of leader "
                                          f"epoch {self.leader_epoch}")

    def last_offset_for_leader_epoch(self, current_leader_epoch: int, leader_epoch: int, *,
                                     fetch_only_from_leader: bool = True) -> tuple[int, int]:
        """OffsetForLeaderEpoch (KIP-101; consumers since KIP-320), Kafka's Partition.lastOffsetForLeaderEpoch:
        (epoch, end offset) of the largest epoch <= ``leader_epoch`` here (``LeaderEpochCache.end_offset_for``),
        (-1, -1) when it is unknown (UNDEFINED_EPOCH_OFFSET). Fenced by the current leader epoch as a fetch is."""
        self.check_epoch(current_leader_epoch, require_leader=fetch_only_from_leader)
        with self.managed.lock:
            return self.log.leader_epochs.end_offset_for(leader_epoch, self.log.log_end_offset)

    def offset_for_timestamp(self, timestamp: int) -> TimestampMatch | None:
        """ListOffsets: LATEST / EARLIEST / MAX_TIMESTAMP or the earliest offset whose timestamp >= timestamp."""
        if timestamp == LATEST_TIMESTAMP:
            return TimestampMatch(self.high_watermark, -1)
        if timestamp == EARLIEST_TIMESTAMP:
            return TimestampMatch(self.log_start_offset, -1)
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return TimestampMatch(self.log.local_log_start_offset, -1)
        reader = self.reader()
        match = reader.max_timestamp() if timestamp == MAX_TIMESTAMP else reader.offset_for_timestamp(timestamp)
        if match is not None and match.offset < self.log_start_offset:
            return TimestampMatch(self.log_start_offset, match.timestamp)
        return match

    def legacy_offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0 (Kafka's Partition.legacyFetchOffsetsForTimestamp): the log's offsets before a time,
        newest first (``PartitionLog.legacy_offsets_before``). Kafka caps a consumer's answer at the high
        watermark; standalone that is the log end, which no answer passes."""
        with self.managed.lock:
            return self.log.legacy_offsets_before(timestamp, max_num_offsets, int(time.time() * 1000))
