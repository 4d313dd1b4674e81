"""ReplicaManager: the partitions this broker holds, appends and reads on them, and the delayed operations
waiting on them (Kafka's ReplicaManager).

Handlers call `append_records` and `fetch_messages` with decoded request data and get per-partition results
or typed errors; nothing here knows wire formats beyond the record bytes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from kcli.broker.errors import (
    FencedLeaderEpochError,
    InvalidRequiredAcksError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
    error_code_for,
    error_message_for,
)
from kcli.broker.log_manager import LogManager
from kcli.broker.partition import LeaderAndIsrState, Partition, ReadResult, now_ms
from kcli.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from kcli.broker.replica_selector import ReplicaView
from kcli.errors import KcliError
from kcli.storage.log import LogAppendInfo
from kcli.storage.producer_state import AppendOrigin

log = logging.getLogger("kcli.broker")

TopicPartition = tuple[str, int]


@dataclass
class PartitionAppend:
    error: Any  # ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    last_offset: int = -1
    record_errors: list[tuple[int, str]] = field(default_factory=list)  # (batch index, message)


@dataclass
class FetchPartition:
    """One partition of a Fetch request, as the ReplicaManager needs it."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    topic_id: Any = None
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # a follower's


@dataclass
class FetchPartitionResult:
    error: Any
    read: ReadResult | None = None
    preferred_read_replica: int = -1  # KIP-392: the leader sends the consumer to this broker (no records)


@dataclass
class FetchParams:
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    read_committed: bool
    replica_id: int = -1
    # Fetch v11+ (Kafka's clientMetadata): the consumer's rack, "" when it gave none; None below v11
    client_rack: str | None = None

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def is_from_consumer(self) -> bool:
        return self.replica_id < 0

    @property
    def fetch_only_leader(self) -> bool:
        """Kafka's FetchParams.fetchOnlyLeader: replicas fetch from leaders; so do consumers below Fetch v11,
        which cannot be sent elsewhere. A v11+ consumer may be served by a follower (KIP-392)."""
        return self.is_from_follower or (self.is_from_consumer and self.client_rack is None)


class IsrChangeListener(Protocol):
    """Where a leader sends the ISR changes it decides (Kafka's AlterPartitionManager): in ZooKeeper mode the
    state znode's conditional update plus an ISR change notification (kafka-cluster.md 6.4,
    kcli.broker.isr_manager.ZkIsrManager). The outcome comes back through `ReplicaManager.isr_committed`."""

    def submit(self, partition: Partition, new_isr: list[int]) -> None: ...


@dataclass
class ReplicaManager:
    log_manager: LogManager
    local_broker_id: int = 0
    replica_lag_time_max_ms: int = 30_000
    partitions: dict[TopicPartition, Partition] = field(default_factory=dict)
    fetch_purgatory: DelayedOperationPurgatory = field(default_factory=lambda: DelayedOperationPurgatory("Fetch"))
    produce_purgatory: DelayedOperationPurgatory = field(
        default_factory=lambda: DelayedOperationPurgatory("Produce"))
    on_flush_due: Callable[[Any], None] | None = None  # schedules an fsync off the event loop
    isr_listener: IsrChangeListener | None = None  # cluster mode: persists the leader's ISR changes
    fetchers: Any = None  # cluster mode: kcli.broker.replica_fetcher.ReplicaFetcherManager
    broker_epoch: int = -1  # cluster mode: the czxid of this broker's registration (KIP-380)
    # cluster mode: the registration's current czxid; a broker whose session expired registers again with a
    # newer one, and requests the controller addressed to the old registration are then stale
    broker_epoch_source: Callable[[], int | None] | None = None
    metadata: Any = None  # the MetadataCache: live brokers and their racks (KIP-392 replica selection)
    replica_selector: Any = None  # replica.selector.class (kcli.broker.replica_selector); None: leader only
    controller_epoch: int = -1  # the newest controller epoch seen in LeaderAndIsr / StopReplica
    # the broker is stopping (Kafka's isShuttingDown, set before the controlled shutdown): no new fetchers
    shutting_down: bool = False
    # (new leaders, new followers) -> None: the coordinators take over or resign their partitions
    on_leadership_change: Callable[[list[Partition], list[Partition]], None] | None = None
    stats: Any = None  # kcli.broker.metrics.BrokerMetrics when metrics.http.listener is set: BrokerTopicMetrics
    # KIP-73: the LeaderReplication quota (kcli.broker.replication_quotas.ReplicationQuotaManager); None: unthrottled
    leader_quota: Any = None
    # moves between this broker's log dirs (KIP-113): kcli.broker.alter_log_dirs.ReplicaAlterLogDirsManager
    alter_log_dirs: Any = None
    remote_log_manager: Any = None  # tiered storage (KIP-405): kcli.broker.remote_log_manager.RemoteLogManager

    # -- partitions --------------------------------------------------------------------------------
    def add_partition(self, partition: Partition) -> None:
        self.partitions[(partition.topic, partition.index)] = partition

    def remove_topic(self, topic: str) -> None:
        for key in [k for k in self.partitions if k[0] == topic]:
            removed = self.partitions.pop(key)
            if self.remote_log_manager is not None:  # a tiered partition's remote data goes with it (KIP-405)
                self.remote_log_manager.partition_deleted(removed)
            self.fetch_purgatory.check_and_complete(key)
        if self.stats is not None:
            self.stats.topic_deleted(topic)

    def get_partition(self, topic: str, index: int) -> Partition:
        partition = self.partitions.get((topic, index))
        if partition is None:
            raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: {topic}-{index}")
        return partition

    def find(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def last_offset_for_leader_epoch(self, topic: str, index: int, current_leader_epoch: int,
                                     leader_epoch: int) -> tuple[int, int]:
        """Kafka's ReplicaManager.lastOffsetForLeaderEpoch: only the leader answers (fetchOnlyFromLeader is
        always true there, for followers' and consumers' requests alike); a partition not hosted here is
        NOT_LEADER_OR_FOLLOWER when the metadata cache knows it, else UNKNOWN_TOPIC_OR_PARTITION."""
        partition = self.find(topic, index)
        if partition is None:
            if self.metadata is not None and self.metadata.partition_state(topic, index) is not None:
                raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} does not host {topic}-{index}")
            raise UnknownTopicOrPartitionError(f"This server does not host this topic-partition: {topic}-{index}")
        return partition.last_offset_for_leader_epoch(current_leader_epoch, leader_epoch,
                                                      fetch_only_from_leader=True)

    # -- produce -----------------------------------------------------------------------------------
    def append_records(self, acks: int, entries: dict[TopicPartition, bytes], *,
                       origin: AppendOrigin = AppendOrigin.CLIENT) -> dict[TopicPartition, PartitionAppend]:
        """Validate and append each partition's record set (Kafka's appendRecords; acks 0, 1 and -1 are
        served alike on one broker, the ISR being this broker). Magic 0/1 message sets (Produce v0-v2) are
        converted to v2 by the validator, as Kafka converts them on append."""
        if acks not in (0, 1, -1):
            error = InvalidRequiredAcksError(f"acks must be 0, 1 or -1, not {acks}")
            return {tp: PartitionAppend(error.code, message=error.reason) for tp in entries}
        results: dict[TopicPartition, PartitionAppend] = {}
        for tp, raw in entries.items():
            try:
                partition = self.get_partition(*tp)
                appended = self._append_to_leader(partition, raw, origin, acks)
                results[tp] = PartitionAppend(ErrorCode.none, appended.first_offset, appended.log_append_time,
                                              appended.log_start_offset, last_offset=appended.last_offset)
                if self.stats is not None:  # Kafka's appendToLocalLog marks BytesIn and MessagesIn
                    self.stats.appended(tp[0], len(raw), appended.last_offset - appended.first_offset + 1)
            except Exception as exc:  # typed errors become codes; anything else is a bug, logged once there
                code = error_code_for(exc)
                if isinstance(exc, KcliError):
                    log.warning("rejected produce to %s-%d: %s", tp[0], tp[1], exc.reason)
                partition = self.find(*tp)
                if self.stats is not None:
                    self.stats.produce_failed(tp[0])
                results[tp] = PartitionAppend(code, log_start_offset=partition.log_start_offset if partition else -1,
                                              message=error_message_for(exc),
                                              record_errors=list(getattr(exc, "record_errors", ())))
        return results

    def _append_to_leader(self, partition: Partition, raw: bytes, origin: AppendOrigin,
                          required_acks: int = 1) -> LogAppendInfo:
        """Kafka's Partition.appendRecordsToLeader: only the leader appends, and acks=all needs at least
        min.insync.replicas in the ISR before the append (NOT_ENOUGH_REPLICAS)."""
        if not partition.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.local_broker_id} is not the leader of "
                                           f"{partition.topic}-{partition.index}")
        min_isr = partition.log.config.min_insync_replicas
        if required_acks == -1 and len(partition.isr) < min_isr:
            raise NotEnoughReplicasError(
                f"The size of the current ISR {partition.isr} is insufficient to satisfy the min.isr requirement "
                f"of {min_isr} for partition {partition.topic}-{partition.index}")
        info = self.log_manager.append_as_leader(partition.managed, raw, leader_epoch=partition.leader_epoch,
                                                 origin=origin)
        if not info.duplicate:
            key = (partition.topic, partition.index)
            if partition.maybe_increment_high_watermark():
                self.produce_purgatory.check_and_complete(key)
            self.fetch_purgatory.check_and_complete(key)
            if self.on_flush_due is not None and self.log_manager.flush_due(partition.managed):
                self.on_flush_due(partition.managed)
        return info

    async def append_and_wait(self, acks: int, timeout_ms: int, entries: dict[TopicPartition, bytes], *,
                              origin: AppendOrigin = AppendOrigin.CLIENT) -> dict[TopicPartition, PartitionAppend]:
        """Append, then for acks=all wait in the purgatory until the ISR has every appended batch (the high
        watermark passed it) or ``timeout_ms`` passes: REQUEST_TIMED_OUT (Kafka's DelayedProduce)."""
        results = self.append_records(acks, entries, origin=origin)
        if acks != -1 or not any(r.error == ErrorCode.none for r in results.values()):
            return results
        delayed = DelayedProduce(self, timeout_ms, results)
        return await self.produce_purgatory.try_complete_else_watch(delayed, list(results))

    def delete_records(self, topic: str, index: int, offset: int) -> int:
        """Kafka's deleteRecords on the leader: -1 means the high watermark; beyond it is out of range."""
        partition = self.get_partition(topic, index)
        target = partition.high_watermark if offset == -1 else offset
        if target < 0 or target > partition.high_watermark:
            raise OffsetOutOfRangeError(f"Cannot increment the log start offset to {offset} of partition "
                                        f"{topic}-{index} since it is larger than the high watermark "
                                        f"{partition.high_watermark}")
        low = self.log_manager.delete_records_before(partition.managed, target)
        self.fetch_purgatory.check_and_complete((topic, index))
        return low

    # -- fetch -------------------------------------------------------------------------------------
    def read_from_local_log(self, params: FetchParams, infos: list[FetchPartition]) -> list[FetchPartitionResult]:
        """Kafka's readFromLocalLog: the first partition with data may return one batch beyond the limits
        (min one message); the others stay within both the partition's and the request's remaining bytes."""
        remaining = params.max_bytes
        min_one = True
        out = []
        for info in infos:
            try:
                partition = self.get_partition(info.topic, info.partition)
                preferred = self.preferred_read_replica(partition, params, info.fetch_offset)
                if preferred is not None:
                    # Kafka skips the read: no records, the leader's offsets, and where to fetch from instead.
                    partition.check_epoch(info.current_leader_epoch, require_leader=False)
                    out.append(FetchPartitionResult(ErrorCode.none, _error_read(partition), preferred))
                    continue
                partition.check_epoch(info.current_leader_epoch, require_leader=params.fetch_only_leader)
                if params.is_from_follower:
                    diverging = partition.diverging_epoch(info.last_fetched_epoch, info.fetch_offset)
                    if diverging is not None:
                        out.append(FetchPartitionResult(ErrorCode.none, _error_read(partition, diverging)))
                        continue
                # KIP-73 (shouldLeaderThrottle): a throttled partition's follower outside the ISR gets no records
                # while the leader's replication rate is above its bound (read with no bytes: offsets checked)
                throttled = (params.is_from_follower and self.leader_quota is not None
                             and self.leader_quota.should_throttle(info.topic, info.partition,
                                                                   params.replica_id in partition.isr))
                limit = 0 if throttled else max(0, min(info.max_bytes, remaining))
                read = partition.read(info.fetch_offset, limit, read_committed=params.read_committed,
                                      min_one_message=min_one and not throttled,
                                      log_end_isolation=params.is_from_follower)
                size = len(read.records)
                if size:
                    min_one = False
                remaining = max(0, remaining - size)
                out.append(FetchPartitionResult(ErrorCode.none, read))
            except Exception as exc:
                out.append(FetchPartitionResult(error_code_for(exc), _error_read(self.find(info.topic, info.partition))))
        return out

    def preferred_read_replica(self, partition: Partition, params: FetchParams, fetch_offset: int) -> int | None:
        """Kafka's findPreferredReadReplica: only a leader with a replica.selector.class, only for a consumer's
        Fetch v11+. Candidates are the leader and the ISR followers whose log holds ``fetch_offset``, each
        with the rack of its broker in the metadata cache; the selector's choice is returned unless it is the
        leader or a broker not alive in the cache (None: read here)."""
        if (self.replica_selector is None or params.client_rack is None or params.is_from_follower
                or not partition.is_leader):
            return None
        brokers = self.metadata.brokers if self.metadata is not None else {}

        def rack(broker_id: int) -> str | None:
            endpoint = brokers.get(broker_id)
            return endpoint.rack if endpoint is not None else None

        now = now_ms()
        leader = ReplicaView(self.local_broker_id, rack(self.local_broker_id), partition.log_end_offset, 0)
        candidates = [leader]
        for replica in partition.remote.values():
            if (replica.broker_id in partition.isr
                    and replica.log_start_offset <= fetch_offset <= replica.log_end_offset):
                candidates.append(ReplicaView(replica.broker_id, rack(replica.broker_id), replica.log_end_offset,
                                              now - replica.last_caught_up_time_ms))
        chosen = self.replica_selector.select(params.client_rack, leader, candidates)
        if chosen is None or chosen.broker_id == self.local_broker_id or chosen.broker_id not in brokers:
            return None
        return chosen.broker_id

    async def fetch_messages(self, params: FetchParams, infos: list[FetchPartition]) -> list[FetchPartitionResult]:
        """Answer at once when there is an error, enough data, no wait or a preferred read replica; else park
        in the purgatory until an append to one of the partitions (or, on a follower serving a consumer, its
        high watermark) brings min_bytes, or max_wait passes (Kafka's DelayedFetch). A follower's fetch also
        tells the leader how far that follower got (its fetch offset)."""
        first = self.read_from_local_log(params, infos)
        if params.is_from_follower:
            self._update_followers(params.replica_id, infos, first)
        if any(r.read is not None and r.read.remote_fetch is not None for r in first):
            return await self._read_remote(infos, first)  # data below the local start: answered at once
        total = sum(len(r.read.records) for r in first if r.read is not None)
        if (params.max_wait_ms <= 0 or total >= params.min_bytes or any(r.error for r in first) or not infos
                or any(r.preferred_read_replica >= 0 for r in first)):
            return self._record_replication(params, infos, first)
        _close_all(first)
        delayed = DelayedFetch(self, params, infos)
        keys = {(i.topic, i.partition) for i in infos}
        results = await self.fetch_purgatory.try_complete_else_watch(delayed, keys)
        if any(r.read is not None and r.read.remote_fetch is not None for r in results):
            return await self._read_remote(infos, results)
        return self._record_replication(params, infos, results)

    def _record_replication(self, params: FetchParams, infos: list[FetchPartition],
                            results: list[FetchPartitionResult]) -> list[FetchPartitionResult]:
        """KIP-73: the record bytes a follower's fetch answer carries for throttled partitions, in sync or not, go
        into the LeaderReplication rate (KafkaApis: quotas.leader.record(sizeOfThrottledPartitions), which also
        counts those partitions' few dozen bytes of response fields)."""
        quota = self.leader_quota
        if params.is_from_follower and quota is not None and quota.throttled:
            size = sum(len(r.read.records) for i, r in zip(infos, results)
                       if r.read is not None and quota.is_throttled(i.topic, i.partition))
            if size:
                quota.record(size)
        return results

    async def _read_remote(self, infos: list[FetchPartition],
                           results: list[FetchPartitionResult]) -> list[FetchPartitionResult]:
        """Kafka's RemoteLogReader: the partitions whose fetch offset is below the local log start read from
        the remote store, in a worker thread (the store may be S3 over the network)."""
        for info, result in zip(infos, results):
            read = result.read
            if read is None or read.remote_fetch is None:
                continue
            offset, max_bytes, upper, read_committed = read.remote_fetch
            read.remote_fetch = None
            try:
                if self.remote_log_manager is None:
                    raise OffsetOutOfRangeError(f"offset {offset} of {info.topic}-{info.partition} is in the "
                                                "remote store and this broker has none")
                if self.remote_log_manager.fetch_throttled():
                    # KIP-956: over remote.log.manager.fetch.max.bytes.per.second the remote part is skipped for
                    # now (no records, no error): the consumer asks again
                    read.records = b""
                    continue
                read.records = await self.remote_log_manager.read_async(info.topic, info.partition, offset,
                                                                        max_bytes, upper)
                partition = self.find(info.topic, info.partition)
                if read_committed and read.records and partition is not None:  # KIP-98 over KIP-405
                    end = min(read.last_stable_offset, self.remote_log_manager.records_end(read.records))
                    read.aborted = await self.remote_log_manager.aborted_transactions_async(
                        info.topic, info.partition, offset, end, partition.reader())
            except Exception as exc:
                result.error = error_code_for(exc)
                read.records = b""
        return results

    def follower_high_watermark_moved(self, partition: Partition) -> None:
        """A follower learnt a higher high watermark from its leader: consumers' fetches parked here may read
        further now (Kafka's ReplicaFetcherThread completeDelayedFetchRequests)."""
        self.fetch_purgatory.check_and_complete((partition.topic, partition.index))

    def shutdown(self) -> None:
        self.fetch_purgatory.cancel_all()
        self.produce_purgatory.cancel_all()

    # -- replication: the leader's side --------------------------------------------------------------
    def _update_followers(self, replica_id: int, infos: list[FetchPartition],
                          results: list[FetchPartitionResult]) -> None:
        """Kafka's updateFollowerFetchState after a follower's read: its log end is its fetch offset; the
        high watermark may advance (completing acks=all produces and consumer fetches) and the ISR grow."""
        for info, result in zip(infos, results):
            if result.error != ErrorCode.none or result.read is None or result.read.diverging_epoch is not None:
                continue
            partition = self.find(info.topic, info.partition)
            if partition is None or not partition.is_leader:
                continue
            key = (info.topic, info.partition)
            if partition.update_follower_fetch_state(replica_id, info.fetch_offset, info.log_start_offset,
                                                     result.read.log_end_offset):
                self.produce_purgatory.check_and_complete(key)
                self.fetch_purgatory.check_and_complete(key)
            expanded = partition.isr_to_expand(replica_id)
            if expanded is not None:
                self._change_isr(partition, expanded)

    def shrink_isrs(self) -> None:
        """Kafka's isr-expiration task: drop followers that have not caught up for replica.lag.time.max.ms."""
        for partition in list(self.partitions.values()):
            shrunk = partition.isr_to_shrink(self.replica_lag_time_max_ms)
            if shrunk is not None:
                self._change_isr(partition, shrunk)

    def _change_isr(self, partition: Partition, new_isr: list[int]) -> None:
        if self.isr_listener is None:
            return
        log.info("%s-%d: ISR %s -> %s (leader epoch %d)", partition.topic, partition.index, partition.isr, new_isr,
                 partition.leader_epoch)
        partition.pending_isr = new_isr
        self.isr_listener.submit(partition, new_isr)

    def isr_committed(self, partition: Partition, new_isr: list[int] | None, partition_epoch: int | None) -> None:
        """The outcome of an ISR change: committed with the state znode's new version, or refused (None),
        in which case the partition waits for the controller's next LeaderAndIsr (Kafka)."""
        if partition.pending_isr is None:
            return
        partition.pending_isr = None
        if new_isr is not None and partition_epoch is not None:
            if self.stats is not None:  # IsrShrinksPerSec / IsrExpandsPerSec, marked once committed
                if len(new_isr) < len(partition.isr):
                    self.stats.isr_shrinks += 1
                elif len(new_isr) > len(partition.isr):
                    self.stats.isr_expands += 1
            partition.isr = new_isr
            partition.partition_epoch = partition_epoch
        key = (partition.topic, partition.index)
        if partition.maybe_increment_high_watermark():
            self.fetch_purgatory.check_and_complete(key)
        self.produce_purgatory.check_and_complete(key)

    # -- replication: LeaderAndIsr and StopReplica -----------------------------------------------------
    def become_leader_or_follower(self, states: dict[TopicPartition, LeaderAndIsrState],
                                  ensure_partition: Callable[[str, int, LeaderAndIsrState], Partition],
                                  ) -> tuple[dict[TopicPartition, Any], list[Partition], list[Partition]]:
        """Kafka's becomeLeaderOrFollower for one request: per partition, a higher leader epoch makes this
        broker leader or follower (creating the log if needed); an equal or lower one is
        STALE_CONTROLLER_EPOCH. Returns the per-partition errors, the new leaders and the new followers."""
        errors: dict[TopicPartition, Any] = {}
        leaders: list[Partition] = []
        followers: list[Partition] = []
        for tp, state in states.items():
            partition = self.find(*tp)
            if partition is not None and state.leader_epoch <= partition.leader_epoch and partition.leader_id != -1:
                errors[tp] = ErrorCode.stale_controller_epoch
                continue
            if self.local_broker_id not in state.replicas:
                errors[tp] = ErrorCode.unknown_topic_or_partition
                continue
            try:
                partition = ensure_partition(tp[0], tp[1], state)
            except Exception as exc:
                errors[tp] = error_code_for(exc)
                continue
            errors[tp] = ErrorCode.none
            if state.leader == self.local_broker_id:
                partition.make_leader(state)
                leaders.append(partition)
            else:
                partition.make_follower(state)
                followers.append(partition)
            # Parked produces and fetches answer now: NOT_LEADER_OR_FOLLOWER for a former leader.
            self.produce_purgatory.check_and_complete(tp)
            self.fetch_purgatory.check_and_complete(tp)
        return errors, leaders, followers

    def check_controller(self, controller_epoch: int, broker_epoch: int) -> ErrorCode:
        """KIP-380 and split-brain fencing: a request for an older registration of this broker is
        STALE_BROKER_EPOCH, one from an older controller STALE_CONTROLLER_EPOCH."""
        if self.broker_epoch_source is not None:
            self.broker_epoch = max(self.broker_epoch, self.broker_epoch_source() or -1)
        if broker_epoch != -1 and broker_epoch < self.broker_epoch:
            return ErrorCode.stale_broker_epoch
        if controller_epoch < self.controller_epoch:
            return ErrorCode.stale_controller_epoch
        self.controller_epoch = controller_epoch
        return ErrorCode.none

    def apply_leader_and_isr(self, controller_epoch: int, broker_epoch: int,
                             states: dict[TopicPartition, LeaderAndIsrState],
                             ensure_partition: Callable[[str, int, LeaderAndIsrState], Partition],
                             ) -> tuple[ErrorCode, dict[TopicPartition, Any]]:
        """One LeaderAndIsr request: fencing, the leader and follower transitions, then the fetchers follow
        the new followers' leaders and stop for new leaders, and the coordinators are told."""
        error = self.check_controller(controller_epoch, broker_epoch)
        if error != ErrorCode.none:
            return error, {}
        errors, leaders, followers = self.become_leader_or_follower(states, ensure_partition)
        if self.fetchers is not None:
            self.fetchers.remove_fetchers([(p.topic, p.index) for p in leaders])
            if self.shutting_down:
                # Kafka's makeFollowers skips "the adding-fetcher step ... since it is shutting down": a stopping
                # broker that fetched would be taken back into the ISRs its controlled shutdown just left, and
                # acks=all would wait for it until it is gone.
                self.fetchers.remove_fetchers([(p.topic, p.index) for p in followers])
            else:
                self.fetchers.add_fetchers(followers)
        for partition in leaders:
            log.info("%s-%d: leader at epoch %d, ISR %s, replicas %s", partition.topic, partition.index,
                     partition.leader_epoch, partition.isr, partition.replicas)
        for partition in followers:
            log.info("%s-%d: follower of %d at epoch %d", partition.topic, partition.index, partition.leader_id,
                     partition.leader_epoch)
        if self.on_leadership_change is not None and (leaders or followers):
            self.on_leadership_change(leaders, followers)
        return ErrorCode.none, errors

    def high_watermarks(self) -> dict[TopicPartition, int]:
        return {tp: p.high_watermark for tp, p in self.partitions.items()}

    def stop_replica(self, topic: str, index: int, leader_epoch: int) -> Partition | None:
        """Kafka's stopReplicas for one partition: an older leader epoch is FENCED_LEADER_EPOCH; -1, -2 and an
        equal or newer one stop it. Returns the removed partition (the caller deletes its log if asked)."""
        partition = self.find(topic, index)
        if partition is None:
            return None
        if leader_epoch >= 0 and leader_epoch < partition.leader_epoch:
            raise FencedLeaderEpochError(f"StopReplica with leader epoch {leader_epoch} below the current "
                                         f"{partition.leader_epoch} of {topic}-{index}")
        del self.partitions[(topic, index)]
        if self.fetchers is not None:
            self.fetchers.remove_fetchers([(topic, index)])
        if self.on_leadership_change is not None:
            self.on_leadership_change([], [partition])
        self.produce_purgatory.check_and_complete((topic, index))
        self.fetch_purgatory.check_and_complete((topic, index))
        return partition


class DelayedProduce(DelayedOperation):
    """acks=all: complete when, for every partition appended, the high watermark passed its last offset (or
    the partition errs or moved away); then fewer ISR members than min.insync.replicas is
    NOT_ENOUGH_REPLICAS_AFTER_APPEND. At the deadline the rest get REQUEST_TIMED_OUT (Kafka's DelayedProduce)."""

    def __init__(self, manager: ReplicaManager, timeout_ms: int, results: dict[TopicPartition, PartitionAppend]) -> None:
        super().__init__(timeout_ms)
        self.manager, self.results = manager, results
        self.pending = {tp for tp, r in results.items() if r.error == ErrorCode.none}

    def try_complete(self) -> bool:
        for tp in list(self.pending):
            partition = self.manager.find(*tp)
            result = self.results[tp]
            if partition is None:
                result.error, self.pending = ErrorCode.unknown_topic_or_partition, self.pending - {tp}
            elif not partition.is_leader:
                result.error, self.pending = ErrorCode.not_leader_or_follower, self.pending - {tp}
            elif partition.high_watermark > result.last_offset:
                if len(partition.isr) < partition.log.config.min_insync_replicas:
                    result.error = ErrorCode.not_enough_replicas_after_append
                self.pending = self.pending - {tp}
        if not self.pending:
            return self.force_complete()
        return False

    def on_expiration(self) -> None:
        for tp in self.pending:
            self.results[tp].error = ErrorCode.request_timed_out

    def on_complete(self) -> dict[TopicPartition, PartitionAppend]:
        return self.results


class DelayedFetch(DelayedOperation):
    def __init__(self, manager: ReplicaManager, params: FetchParams, infos: list[FetchPartition]) -> None:
        super().__init__(params.max_wait_ms)
        self.manager, self.params, self.infos = manager, params, infos
        self._ready: list[FetchPartitionResult] | None = None  # the read that completed it

    def try_complete(self) -> bool:
        available = 0
        for info in self.infos:
            partition = self.manager.find(info.topic, info.partition)
            if partition is None:
                return self.force_complete()  # deleted meanwhile: answer with the error now
            try:  # no longer leader (for those that read only there), or the leader epoch moved on
                partition.check_epoch(info.current_leader_epoch, require_leader=self.params.fetch_only_leader)
            except Exception:
                return self.force_complete()
            if self.params.is_from_follower:
                end = partition.log_end_offset
            else:
                end = partition.last_stable_offset if self.params.read_committed else partition.high_watermark
            if info.fetch_offset > partition.log_end_offset or info.fetch_offset < partition.log_start_offset:
                return self.force_complete()
            if end > info.fetch_offset:
                available += 1  # some bytes: the read below counts them exactly
        if available == 0:
            return False
        result = self.manager.read_from_local_log(self.params, self.infos)
        total = sum(len(r.read.records) for r in result if r.read is not None)
        if total >= self.params.min_bytes:
            self._ready = result  # the answer: on_complete runs at once, on the same state
            return self.force_complete()
        _close_all(result)
        return False

    def on_complete(self) -> list[FetchPartitionResult]:
        ready, self._ready = self._ready, None
        return ready if ready is not None else self.manager.read_from_local_log(self.params, self.infos)


def _close_all(results: list[FetchPartitionResult]) -> None:
    for r in results:
        if r.read is not None and hasattr(r.read.records, "close"):
            r.read.records.close()


def _error_read(partition: Partition | None, diverging: tuple[int, int] | None = None) -> ReadResult:
    if partition is None:
        return ReadResult(b"", -1, -1, -1, -1)
    return ReadResult(b"", partition.high_watermark, partition.last_stable_offset, partition.log_start_offset,
                      partition.log_end_offset, diverging_epoch=diverging)
