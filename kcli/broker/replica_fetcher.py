"""Replica fetchers: a follower copies its leaders' logs with Kafka's Fetch API (Kafka's ReplicaFetcherManager,
ReplicaFetcherThread and AbstractFetcherThread).

One fetcher per source broker (num.replica.fetchers = 1), an asyncio task on the broker's event loop holding one
connection to that leader. Each partition is Truncating or Fetching (Kafka's PartitionFetchState). A partition
added with a new leader epoch (it became follower, a restarted ex-leader, a leader change) starts Truncating:
the fetcher asks the leader OffsetForLeaderEpoch (v4, replica_id = this broker) where its latest local epoch
ends there and truncates a divergent tail before it fetches anything (KIP-101, KIP-279); without local epochs it
truncates to its high watermark. Each round then sends one Fetch (v12) for the Fetching partitions from their
log end offsets, with the last fetched epoch so that the leader can still say where a divergent tail starts
(truncation on fetch, KIP-595 / IBP 2.7-IV1), appends the leader's batches unchanged (replicas stay
byte-identical; their epochs go into this replica's leader-epoch cache) and keeps the high watermark the leader
sent. A partition that errs backs off replica.fetch.backoff.ms; a lost connection is re-opened after the same
backoff, and a connection that cannot be made is tried again every RECONNECT_BACKOFF_MS (100 ms). A leader
answers a replica's Fetch within replica.fetch.wait.max.ms, so a request left unanswered
replica.fetch.response.timeout.ms longer (or a connection not made within it) means a dead connection, such as
one opened before a network partition, which stays stalled long after the partition heals: it is closed and a
new one opened (Kafka waits for request.timeout.ms, 30 s). An outage is logged once, and once more when the
leader answers again. Replication throttles (KIP-73, kcli.broker.replication_quotas): a partition the
FollowerReplication quota throttles is left out of a round while this replica is not caught up and the quota's
rate is above its bound; a round with nothing left to fetch waits replica.fetch.backoff.ms, as Kafka's empty fetch.

Kafka at IBP >= 2.7-IV1 skips the Truncating state when the local epoch cache is not empty and leaves the
divergence to the first fetch's DivergingEpoch; kctl asks first, so the truncation point is settled before any
fetch (one request per leader change), and keeps truncation on fetch for later rounds.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_request
from kio.schema.list_offsets.v7 import request as offsets_request
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_request
from kio.static.primitive import i8, i32, i64

from kcli.broker.fetch_session_handler import FetchSessionHandler
from kcli.broker.log_manager import LogManager
from kcli.broker.network_client import BrokerConnection
from kcli.broker.security.inter_broker import PLAINTEXT_INTER_BROKER, InterBrokerSecurity
from kcli.broker.partition import Partition
from kcli.protocol import ApiKey
from kcli.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

log = logging.getLogger("kcli.broker.replica")

FETCH_VERSION = 12  # the replica Fetch of IBP 2.7-IV1 .. 3.0 (LastFetchedEpoch / DivergingEpoch)
EPOCH_VERSION = 4  # OffsetForLeaderEpoch of IBP >= 2.8-IV0 (v3+ carries the follower's replica_id)
TRUNCATING, FETCHING = "Truncating", "Fetching"
# KIP-405: the leader answered OFFSET_MOVED_TO_TIERED_STORAGE; the follower starts over at the leader's local log
# start (Kafka's fetchOffsetAndBuildRemoteLogAuxState) before it fetches again
TIERED = "MovedToTieredStorage"
LIST_OFFSETS_VERSION = 7
EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP = -4, -2
RECONNECT_BACKOFF_MS = 100  # between attempts to connect to a leader, at most replica.fetch.backoff.ms
_SESSION_ERRORS = (ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch)


class _ConnectFailed(ConnectionError):
    """The connection to the leader could not be made (refused, unreachable, cut, or not within the timeout)."""


@dataclass
class PartitionFetchState:
    """Kafka's PartitionFetchState: the leader epoch the partition was added at and whether it still has to
    settle its truncation point (Truncating) before it fetches (Fetching)."""

    current_leader_epoch: int
    initial_offset: int  # the high watermark when added: the truncation point without epochs (KIP-279)
    state: str = TRUNCATING
    # the leader's high watermark minus this replica's log end after the last fetch that brought records; None
    # before one (Kafka's lag: isReplicaInSync when 0, and then exempt from the follower throttle, KIP-73)
    lag: int | None = None

    @property
    def in_sync(self) -> bool:
        return self.lag is not None and self.lag <= 0


@dataclass
class FetchSettings:
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    partition_max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms
    # replica.fetch.response.timeout.ms (kctl's): how long past replica.fetch.wait.max.ms a leader may leave a
    # request unanswered, or a connection unmade, before the connection is taken for dead
    response_timeout_ms: int = 3000

    @property
    def connect_timeout_s(self) -> float:
        return min(self.socket_timeout_ms, self.response_timeout_ms) / 1000

    def request_timeout_s(self, max_wait_ms: int) -> float:
        """A leader answers a replica's Fetch within its MaxWaitMs (DelayedFetch) and an OffsetForLeaderEpoch at
        once, so silence well past that is a stalled connection, not a slow leader. Kafka waits for
        request.timeout.ms (30 s) there, and a link that healed meanwhile stays stalled until TCP's next
        retransmission, seconds to tens of seconds later; a new connection works at once."""
        return min(max_wait_ms + self.response_timeout_ms, max_wait_ms + self.socket_timeout_ms) / 1000


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.states: dict[tuple[str, int], PartitionFetchState] = {}
        self.delayed_until: dict[tuple[str, int], float] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._connection: BrokerConnection | None = None
        self._failures = 0  # requests failed in a row (connection outages are logged once)
        self._failing_since = 0.0
        self.name = f"ReplicaFetcher-{manager.local_broker_id}-from-{leader_id}"
        self._session = FetchSessionHandler(self.name)  # KIP-227: only changed partitions after the first fetch

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    def add(self, partition: Partition) -> None:
        """Follow ``partition``: Truncating first, unless it is here already at the same leader epoch (Kafka's
        addPartitions keeps that state)."""
        tp = (partition.topic, partition.index)
        current = self.states.get(tp)
        if (current is None or current.current_leader_epoch != partition.leader_epoch
                or self.partitions.get(tp) is not partition):
            self.states[tp] = PartitionFetchState(partition.leader_epoch, partition.high_watermark)
        self.partitions[tp] = partition
        self.delayed_until.pop(tp, None)
        self._wake.set()

    def remove(self, tp: tuple[str, int]) -> None:
        self.partitions.pop(tp, None)
        self.states.pop(tp, None)
        self.delayed_until.pop(tp, None)

    def state(self, tp: tuple[str, int]) -> str | None:
        fetch_state = self.states.get(tp)
        return fetch_state.state if fetch_state is not None else None

    async def stop(self) -> None:
        if self._task is not None:
            # Cancelled until it ends: Python 3.11's wait_for returns the result instead of raising when the
            # cancellation arrives as the awaited read completes (gh-86296), and the loop would go on.
            while not self._task.done():
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=1.0)
            self._task = None
        self._close()

    # -- the loop ----------------------------------------------------------------------------------
    async def _run(self) -> None:
        settings = self.manager.settings
        while True:
            ready = self._ready()
            if not ready:
                if not self.partitions:
                    self._failures = 0  # nothing fetched from this leader now: a later outage is a new one
                self._wake.clear()
                wait = self._next_ready_in()
                try:
                    # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that meets the
                    # event being set, and stop() would then wait for ever
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            try:
                truncating = {tp: p for tp, p in ready.items() if self.state(tp) == TRUNCATING}
                if truncating:
                    await self._maybe_truncate(truncating)
                tiered = {tp: p for tp, p in ready.items() if self.state(tp) == TIERED}
                if tiered:
                    await self._start_at_leader_local_start(tiered)
                fetching = {tp: p for tp, p in self._ready().items() if self.state(tp) == FETCHING}
                held_back = self._throttled(fetching)
                if not fetching:
                    if held_back:  # only throttled partitions: Kafka's empty fetch backs off replica.fetch.backoff.ms
                        await self._wait_woken(settings.backoff_ms / 1000)
                    continue
                # what each partition is fetched at: built into the request below, before anything awaits
                requested = {tp: (p.leader_epoch, p.log_end_offset) for tp, p in fetching.items()}
                response = await self._fetch(fetching)
                if response is None:
                    continue  # a fetch session error: the next fetch is full (FetchSessionHandler)
            except asyncio.CancelledError:
                raise
            except _ConnectFailed as exc:
                self._failed(f"cannot connect: {exc}")
                # A connection that cannot be made costs the leader nothing and fails at once while the network
                # is cut: tried again soon, so that a healed link is used within RECONNECT_BACKOFF_MS, not up
                # to replica.fetch.backoff.ms later (Kafka's replica fetcher NetworkClient has no reconnect
                # backoff of its own; its thread delays the partitions replica.fetch.backoff.ms).
                await asyncio.sleep(min(settings.backoff_ms, RECONNECT_BACKOFF_MS) / 1000)
                continue
            except TimeoutError:
                self._failed(f"no answer within replica.fetch.wait.max.ms + replica.fetch.response.timeout.ms "
                             f"({settings.max_wait_ms} + {settings.response_timeout_ms} ms): the connection is "
                             "taken for dead")
                self._close()
                await asyncio.sleep(settings.backoff_ms / 1000)
                continue
            except Exception as exc:  # connection dropped, a malformed answer: retry later
                self._failed(f"request failed: {exc!r}")
                self._close()
                await asyncio.sleep(settings.backoff_ms / 1000)
                continue
            self._process(fetching, requested, response)

    def _throttled(self, fetching: dict[tuple[str, int], Partition]) -> bool:
        """KIP-73 (shouldFollowerThrottle): leave out of this fetch the throttled partitions not in sync while the
        follower's replication rate is above its bound; whether any was left out."""
        quota = self.manager.quota
        if quota is None or not quota.throttled:
            return False
        held = [tp for tp in fetching if quota.should_throttle(tp[0], tp[1], self.states[tp].in_sync)]
        for tp in held:
            del fetching[tp]
        return bool(held)

    async def _wait_woken(self, seconds: float) -> None:
        """Sleep up to ``seconds``, less when a partition is added (Kafka's partitionMapCond.await)."""
        self._wake.clear()
        try:
            async with asyncio.timeout(seconds):
                await self._wake.wait()
        except TimeoutError:
            pass

    def _ready(self) -> dict[tuple[str, int], Partition]:
        now = time.monotonic()
        return {tp: p for tp, p in self.partitions.items() if self.delayed_until.get(tp, 0) <= now}

    def _next_ready_in(self) -> float | None:
        if not self.delayed_until:
            return None
        return max(0.0, min(self.delayed_until.values()) - time.monotonic())

    def _failed(self, reason: str) -> None:
        """One line when requests to the leader start failing, then quiet (DEBUG) until one works again."""
        self._failures += 1
        if self._failures == 1:
            self._failing_since = time.monotonic()
            log.warning("%s: broker %d at %s: %s; reconnecting (until it answers again, further failures are "
                        "logged at DEBUG)", self.name, self.leader_id, self._where(), reason)
        else:
            log.debug("%s: broker %d: %s (failure %d)", self.name, self.leader_id, reason, self._failures)

    def _answered(self) -> None:
        if self._failures:
            log.info("%s: broker %d answers again, after %d failed attempts in %.1fs", self.name, self.leader_id,
                     self._failures, time.monotonic() - self._failing_since)
            self._failures = 0

    def _where(self) -> str:
        endpoint = self.manager.endpoint(self.leader_id)
        return f"{endpoint[0]}:{endpoint[1]}" if endpoint is not None else "an unknown endpoint"

    def _delay(self, tp: tuple[str, int]) -> None:
        self.delayed_until[tp] = time.monotonic() + self.manager.settings.backoff_ms / 1000

    async def _connect(self) -> BrokerConnection:
        if self._connection is None:
            endpoint = self.manager.endpoint(self.leader_id)
            if endpoint is None:
                raise _ConnectFailed(f"no endpoint known for broker {self.leader_id}")
            timeout = self.manager.settings.connect_timeout_s
            try:
                self._connection = await BrokerConnection.open(*endpoint, client_id=self.name, timeout=timeout,
                                                               security=self.manager.security)
            except TimeoutError:
                raise _ConnectFailed(f"no connection within {timeout * 1000:.0f} ms") from None
            except OSError as exc:
                raise _ConnectFailed(exc.strerror or repr(exc)) from None
        return self._connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    # -- Truncating: where does this replica's log agree with the leader's? ---------------------------
    async def _maybe_truncate(self, truncating: dict[tuple[str, int], Partition]) -> None:
        """Kafka's maybeTruncate: partitions with a local leader epoch ask the leader OffsetForLeaderEpoch for
        it (truncateToEpochEndOffsets); those without truncate to their high watermark (truncateToHighWatermark)."""
        requested: dict[tuple[str, int], tuple[int, int]] = {}  # tp -> (current leader epoch, latest local epoch)
        for tp, partition in truncating.items():
            fetch_state = self.states[tp]
            latest = partition.log.leader_epochs.latest_epoch
            if latest is None:
                try:
                    self.manager.truncate(partition, fetch_state.initial_offset,
                                          "no local leader epochs: to the high watermark")
                except Exception as exc:
                    log.error("%s: %s-%d: %s", self.name, tp[0], tp[1], exc)
                    self._delay(tp)
                    continue
                fetch_state.state = FETCHING
            else:
                requested[tp] = (fetch_state.current_leader_epoch, latest)
        if not requested:
            return
        response = await self._offsets_for_leader_epoch(requested)
        answered: set[tuple[str, int]] = set()
        for topic in response.topics:
            for answer in topic.partitions:
                tp = (topic.topic, int(answer.partition))
                answered.add(tp)
                partition, fetch_state = self.partitions.get(tp), self.states.get(tp)
                # Dropped when the partition left this fetcher or its leader epoch changed meanwhile (Kafka).
                if (tp not in requested or partition is not truncating.get(tp) or fetch_state is None
                        or fetch_state.current_leader_epoch != requested[tp][0]):
                    continue
                self._truncate_to_epoch_end(tp, partition, fetch_state, requested[tp][1], answer)
        for tp in requested.keys() - answered:
            self._delay(tp)

    def _truncate_to_epoch_end(self, tp: tuple[str, int], partition: Partition, fetch_state: PartitionFetchState,
                               asked_epoch: int, answer: Any) -> None:
        """One partition of the leader's OffsetForLeaderEpoch answer (Kafka's maybeTruncateToEpochEndOffsets):
        FENCED_LEADER_EPOCH for our current epoch parks the partition until the next LeaderAndIsr; other
        errors retry after the backoff."""
        error = answer.error_code
        if error == ErrorCode.none:
            try:
                done = self.manager.truncate_to_epoch_end(
                    partition, int(answer.leader_epoch), int(answer.end_offset), fetch_state.initial_offset,
                    f"OffsetForLeaderEpoch: leader epoch {asked_epoch} ends at {int(answer.end_offset)} "
                    f"(epoch {int(answer.leader_epoch)}) on leader {self.leader_id}")
            except Exception as exc:
                log.error("%s: %s-%d: %s", self.name, tp[0], tp[1], exc)
                self._delay(tp)
                return
            if done:
                fetch_state.state = FETCHING
        elif error == ErrorCode.fenced_leader_epoch:
            log.info("%s: %s-%d: leader epoch %d is older than the leader's: awaiting the next LeaderAndIsr",
                     self.name, tp[0], tp[1], fetch_state.current_leader_epoch)
            self.remove(tp)
        else:
            log.info("%s: %s-%d: OffsetForLeaderEpoch answered %s: retrying", self.name, tp[0], tp[1],
                     ErrorCode(error).name)
            self._delay(tp)

    async def _offsets_for_leader_epoch(self, requested: dict[tuple[str, int], tuple[int, int]]) -> Any:
        topics: dict[str, list[Any]] = {}
        for (topic, index), (current_epoch, latest) in requested.items():
            topics.setdefault(topic, []).append(epoch_request.OffsetForLeaderPartition(
                partition=i32(index), current_leader_epoch=i32(current_epoch), leader_epoch=i32(latest)))
        body = epoch_request.OffsetForLeaderEpochRequest(
            replica_id=i32(self.manager.local_broker_id),
            topics=tuple(epoch_request.OffsetForLeaderTopic(topic=name, partitions=tuple(parts))
                         for name, parts in topics.items()))
        return await self._roundtrip(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, body, 0)

    async def _start_at_leader_local_start(self, partitions: dict[tuple[str, int], Partition]) -> None:
        """Kafka's fetchOffsetAndBuildRemoteLogAuxState: the leader's earliest-local offset and its epoch
        (ListOffsets -4, KIP-1005) and its log start (-2); a replica whose log ends below the first rebuilds
        its state from the remote segment before it (``_build_remote_log_aux_state``) and fetches on from
        there. A remote segment or object not found (yet) is logged and tried again after
        replica.fetch.backoff.ms, the partition staying in this state, as Kafka's follower retries."""
        topics: dict[str, list[Any]] = {}
        for (topic, index), partition in partitions.items():
            for timestamp in (EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP):
                topics.setdefault(topic, []).append(offsets_request.ListOffsetsPartition(
                    partition_index=i32(index), current_leader_epoch=i32(partition.leader_epoch),
                    timestamp=i64(timestamp)))
        body = offsets_request.ListOffsetsRequest(
            replica_id=i32(self.manager.local_broker_id), isolation_level=i8(0),
            topics=tuple(offsets_request.ListOffsetsTopic(name=name, partitions=tuple(parts))
                         for name, parts in topics.items()))
        requested = {tp: p.leader_epoch for tp, p in partitions.items()}
        response = await self._roundtrip(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body, 0)
        answers: dict[tuple[str, int], list[Any]] = {}
        for topic in response.topics:
            for part in topic.partitions:
                answers.setdefault((topic.name, int(part.partition_index)), []).append(part)
        for tp, partition in partitions.items():
            found = answers.get(tp, [])
            if len(found) != 2 or any(p.error_code != ErrorCode.none for p in found):
                self._delay(tp)
                continue
            if not self._still_tiered(tp, partition, requested[tp]):
                continue
            local_start, local_epoch, log_start = int(found[0].offset), int(found[0].leader_epoch), int(found[1].offset)
            if partition.log_end_offset < local_start:
                try:
                    built = await self._build_remote_log_aux_state(tp, partition, local_start, local_epoch, log_start)
                except (_ConnectFailed, TimeoutError, ConnectionError):
                    raise  # the connection's trouble: the loop reconnects
                except Exception as exc:
                    log.warning("%s: %s-%d: cannot build the replica's state before leader %d's local log start %d "
                                "from the remote store: %s; retrying in %d ms", self.name, tp[0], tp[1],
                                self.leader_id, local_start, exc, self.manager.settings.backoff_ms)
                    self._delay(tp)
                    continue
                if not built:
                    continue
            fetch_state = self.states.get(tp)
            if fetch_state is not None:
                fetch_state.state = FETCHING

    def _still_tiered(self, tp: tuple[str, int], partition: Partition, leader_epoch: int) -> bool:
        """The partition is still fetched here, at the leader epoch asked at, and waits for its remote state."""
        fetch_state = self.states.get(tp)
        return (self.partitions.get(tp) is partition and fetch_state is not None and fetch_state.state == TIERED
                and fetch_state.current_leader_epoch == leader_epoch == partition.leader_epoch)

    async def _build_remote_log_aux_state(self, tp: tuple[str, int], partition: Partition, local_start: int,
                                          local_epoch: int, log_start: int) -> bool:
        """Kafka's ReplicaFetcherTierStateMachine.buildRemoteLogAuxState (3.6+): the epoch of the offset before
        the leader's local log start (the leader's epoch there, or the one before it when OffsetForLeaderEpoch
        says that one ends past the offset: epochs that wrote nothing leave gaps), the remote segment of that
        epoch holding it, and from the store its leader-epoch checkpoint and producer snapshot; then the log
        starts over empty after that segment, the leader epochs up to there and the producer state there
        restored (the snapshot written as ``<start>.snapshot``). False when the partition moved on meanwhile."""
        from kcli.broker.remote_log_manager import fetch_remote_log_aux_state

        remote = self.manager.remote_log_manager
        if remote is None or not partition.log.config.remote_storage_enable:
            raise RuntimeError("tiered storage is not enabled here (remote.log.storage.system.enable and the "
                               "topic's remote.storage.enable): the remote part cannot be skipped")
        asked_at = partition.leader_epoch
        previous = local_start - 1
        target_epoch = local_epoch
        if local_epoch > 0:
            response = await self._offsets_for_leader_epoch({tp: (asked_at, local_epoch - 1)})
            answer = next((p for t in response.topics if t.topic == tp[0] for p in t.partitions
                           if int(p.partition) == tp[1]), None)
            if answer is None:
                raise RuntimeError(f"no OffsetForLeaderEpoch answer for epoch {local_epoch - 1}")
            if answer.error_code != ErrorCode.none:
                raise RuntimeError(f"OffsetForLeaderEpoch for epoch {local_epoch - 1}: "
                                   f"{ErrorCode(answer.error_code).name}")
            if int(answer.end_offset) > previous:  # the earlier epoch (or the one below a gap) holds the offset
                target_epoch = int(answer.leader_epoch)
        remote.stats.count("build_remote_log_aux_state_requests", tp[0])
        try:
            aux = await asyncio.get_running_loop().run_in_executor(
                remote.reader_pool, fetch_remote_log_aux_state, remote.cache, remote.rsm, tp[0], tp[1], target_epoch,
                previous)
        except Exception:
            remote.stats.count("build_remote_log_aux_state_errors", tp[0])
            raise
        if not self._still_tiered(tp, partition, asked_at):
            return False
        managed = partition.managed
        self.manager.log_manager.truncate_fully_and_start_at(managed, aux.next_offset)
        with managed.lock:
            partition.log.log_start_offset = min(log_start, aux.next_offset)
            partition.log.restore_aux_state(aux.epochs, aux.producers)
            producers = len(partition.log.producers)
        log.info("%s-%d: leader %d's log below %d is in the remote store: this replica starts there, with the leader "
                 "epochs (%d) and producer state (%d producers) of remote segment %d..%d (%s)", tp[0], tp[1],
                 partition.leader_id, aux.next_offset, len(aux.epochs), producers, aux.segment.start_offset,
                 aux.segment.end_offset, remote.rsm.display_key(aux.segment.ref, "log"))
        return True

    # -- Fetching -------------------------------------------------------------------------------------
    async def _fetch(self, ready: dict[tuple[str, int], Partition]) -> Any:
        settings = self.manager.settings
        wanted = {}
        for tp, partition in ready.items():
            latest = partition.log.leader_epochs.latest_epoch
            wanted[tp] = (partition.leader_epoch, partition.log_end_offset, latest if latest is not None else -1,
                          partition.log_start_offset, settings.partition_max_bytes)
        # KIP-227: a full fetch names every partition; an incremental one only those whose parameters changed
        sending = self._session.build(wanted)
        topics: dict[str, list[Any]] = {}
        for tp in sending.to_send:
            epoch, offset, last_fetched, start, max_bytes = wanted[tp]
            topics.setdefault(tp[0], []).append(fetch_request.FetchPartition(
                partition=i32(tp[1]), current_leader_epoch=i32(epoch), fetch_offset=i64(offset),
                last_fetched_epoch=i32(last_fetched), log_start_offset=i64(start), partition_max_bytes=i32(max_bytes)))
        forgotten: dict[str, list[i32]] = {}
        for topic, index in sending.forgotten:
            forgotten.setdefault(topic, []).append(i32(index))
        body = fetch_request.FetchRequest(
            replica_id=i32(self.manager.local_broker_id), max_wait=datetime.timedelta(milliseconds=settings.max_wait_ms),
            min_bytes=i32(settings.min_bytes), max_bytes=i32(settings.max_bytes), isolation_level=i8(0),
            session_id=i32(sending.session_id), session_epoch=i32(sending.epoch),
            topics=tuple(fetch_request.FetchTopic(topic=name, partitions=tuple(parts)) for name, parts in topics.items()),
            forgotten_topics_data=tuple(fetch_request.ForgottenTopic(topic=name, partitions=tuple(parts))
                                        for name, parts in forgotten.items()),
            rack_id="")
        try:
            response = await self._roundtrip(ApiKey.FETCH, FETCH_VERSION, body, settings.max_wait_ms)
        except BaseException:
            self._session.handle_error()
            raise
        if self._session.handle_response(sending, response):
            return response
        # a session error: fetch again at once, in full; any other top-level error delays the partitions (_process)
        return None if response.error_code in _SESSION_ERRORS else response

    async def _roundtrip(self, api_key: ApiKey, version: int, body: Any, max_wait_ms: int) -> Any:
        connection = await self._connect()
        response = await connection.exchange(api_key, version, body,
                                             timeout=self.manager.settings.request_timeout_s(max_wait_ms))
        self._answered()
        return response

    def _process(self, sent: dict[tuple[str, int], Partition], requested: dict[tuple[str, int], tuple[int, int]],
                 response: Any) -> None:
        """Kafka's processPartitionData for each partition still fetched from this leader, at the leader epoch and
        offset it was fetched at: one re-added at a new leader epoch (or truncated) while the request was out
        ignores the answer, so an error meant for the old epoch (FENCED_LEADER_EPOCH from a leader that moved on
        during a network partition, say) does not hold the new one back replica.fetch.backoff.ms (Kafka's
        processFetchRequest: only partitions ready for fetch at the requested offset)."""
        current = {tp for tp, partition in sent.items() if self._still_at(tp, partition, requested[tp])}
        if response.error_code != ErrorCode.none:
            log.warning("%s: fetch error %s", self.name, response.error_code.name)
            for tp in current:
                self._delay(tp)
            return
        for topic in response.responses:
            for data in topic.partitions:
                tp = (topic.topic, int(data.partition_index))
                if tp not in current:
                    continue  # moved away, re-added or truncated meanwhile
                partition = sent[tp]
                try:
                    self.manager.process_partition_data(partition, data)
                except Exception as exc:
                    log.error("%s: %s-%d: %s", self.name, tp[0], tp[1], exc)
                    self._delay(tp)
                    continue
                if data.error_code == ErrorCode.offset_moved_to_tiered_storage and tp in self.states:
                    self.states[tp].state = TIERED  # the next round asks the leader where its local log starts
                    self._wake.set()
                elif data.error_code != ErrorCode.none:
                    self._delay(tp)
                elif data.records and tp in self.states:
                    self.states[tp].lag = max(0, int(data.high_watermark) - partition.log_end_offset)

    def _still_at(self, tp: tuple[str, int], partition: Partition, requested: tuple[int, int]) -> bool:
        fetch_state = self.states.get(tp)
        return (self.partitions.get(tp) is partition and fetch_state is not None and fetch_state.state == FETCHING
                and (partition.leader_epoch, partition.log_end_offset) == requested)


class ReplicaFetcherManager:
    """The fetchers of this broker, one per leader it follows partitions of."""

    def __init__(self, local_broker_id: int, log_manager: LogManager, settings: FetchSettings,
                 endpoints: Any, on_append: Any = None, on_high_watermark: Any = None,
                 security: InterBrokerSecurity = PLAINTEXT_INTER_BROKER, quota: Any = None) -> None:
        self.local_broker_id = local_broker_id
        # KIP-73: the FollowerReplication quota (kcli.broker.replication_quotas.ReplicationQuotaManager); None: none
        self.quota = quota
        self.security = security  # the inter-broker listener's TLS and SASL
        self.log_manager = log_manager
        self.settings = settings
        self._endpoints = endpoints  # broker id -> (host, port) | None
        self.on_append = on_append  # (Partition) -> None: flush accounting
        # (Partition) -> None: the follower's high watermark rose (consumers' fetches parked here, KIP-392)
        self.on_high_watermark = on_high_watermark
        self.fetchers: dict[int, ReplicaFetcher] = {}
        # tiered storage (KIP-405): kcli.broker.remote_log_manager.RemoteLogManager, set by the server when
        # remote.log.storage.system.enable; a replica starting at its leader's local log start restores its state
        # from the remote store through it
        self.remote_log_manager: Any = None

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        return self._endpoints(broker_id)

    def add_fetchers(self, partitions: list[Partition]) -> None:
        """Follow each partition from its leader (moving it from any other fetcher first); a partition its
        leader's fetcher already has keeps its fetch state when the leader epoch did not change."""
        for partition in partitions:
            tp = (partition.topic, partition.index)
            for leader_id, other in self.fetchers.items():
                if leader_id != partition.leader_id:
                    other.remove(tp)
            if partition.leader_id < 0 or partition.leader_id == self.local_broker_id:
                continue
            fetcher = self.fetchers.get(partition.leader_id)
            if fetcher is None:
                fetcher = self.fetchers[partition.leader_id] = ReplicaFetcher(self, partition.leader_id)
                fetcher.start()
            fetcher.add(partition)

    def remove_fetchers(self, tps: list[tuple[str, int]]) -> None:
        for fetcher in self.fetchers.values():
            for tp in tps:
                fetcher.remove(tp)

    async def shutdown_idle(self) -> None:
        for leader_id, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions:
                del self.fetchers[leader_id]
                await fetcher.stop()

    async def shutdown(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)

    def following(self) -> dict[int, list[tuple[str, int]]]:
        return {leader: sorted(f.partitions) for leader, f in self.fetchers.items()}

    # -- one partition's answer ---------------------------------------------------------------------
    def process_partition_data(self, partition: Partition, data: Any) -> None:
        error = data.error_code
        managed = partition.managed
        if error == ErrorCode.none:
            diverging = getattr(data, "diverging_epoch", None)
            if diverging is not None and (diverging.epoch >= 0 or diverging.end_offset >= 0):
                epoch, end_offset = int(diverging.epoch), int(diverging.end_offset)
                self.truncate_to_epoch_end(partition, epoch, end_offset, partition.log_end_offset,
                                           f"DivergingEpoch: leader epoch {epoch} ends at {end_offset} on leader "
                                           f"{partition.leader_id}")
                return  # Kafka does not process this response's data after truncating
            high_watermark = partition.high_watermark
            records = data.records
            if records:
                self.log_manager.append_as_follower(managed, bytes(records))
                if self.on_append is not None:
                    self.on_append(partition)
                # KIP-73: every throttled partition's bytes count, in sync or not (processPartitionData)
                if self.quota is not None and self.quota.is_throttled(partition.topic, partition.index):
                    self.quota.record(len(records))
            partition.update_follower_high_watermark(int(data.high_watermark))
            leader_start = int(data.log_start_offset)
            if leader_start > partition.log_start_offset:
                self.log_manager.delete_records_before(managed, min(leader_start, partition.log_end_offset))
            if partition.high_watermark != high_watermark and self.on_high_watermark is not None:
                self.on_high_watermark(partition)
        elif error == ErrorCode.offset_out_of_range:
            self._handle_out_of_range(partition, int(data.high_watermark), int(data.log_start_offset))
        elif error == ErrorCode.offset_moved_to_tiered_storage:
            pass  # the fetcher asks the leader for its local log start next (ReplicaFetcher, TIERED)
        else:
            log.info("ReplicaFetcher %d: %s-%d from leader %d: %s", self.local_broker_id, partition.topic,
                     partition.index, partition.leader_id, ErrorCode(error).name)

    def truncate_to_epoch_end(self, partition: Partition, leader_epoch: int, leader_end: int, fetch_offset: int,
                              reason: str) -> bool:
        """Truncate to where this replica and the leader agree, given the leader's (epoch, end offset) from an
        OffsetForLeaderEpoch answer or a fetch's DivergingEpoch. True when the truncation point is settled;
        False when the leader's epoch is unknown here and the leader must be asked again with the new latest
        local epoch."""
        offset, done = offset_truncation_state(partition, leader_epoch, leader_end, fetch_offset)
        self.truncate(partition, offset, reason)
        return done

    def truncate(self, partition: Partition, offset: int, reason: str) -> None:
        """Kafka's ReplicaFetcherThread.truncate: the log, its leader-epoch cache and producer state go back to
        ``offset`` (LogManager.truncate_to); one line when anything was cut."""
        before = partition.log_end_offset
        after = self.log_manager.truncate_to(partition.managed, max(0, offset))
        if after < before:
            log.info("%s-%d: truncated from offset %d to %d (%s)", partition.topic, partition.index, before, after,
                     reason)

    def _handle_out_of_range(self, partition: Partition, leader_high_watermark: int, leader_start: int) -> None:
        """Kafka's handleOutOfRangeError: past the leader's end → truncate to what the leader surely has (its
        high watermark); before its start → start over at the leader's log start."""
        end = partition.log_end_offset
        if leader_start >= 0 and end < leader_start:
            self.log_manager.truncate_fully_and_start_at(partition.managed, leader_start)
            log.warning("%s-%d: log end %d is below leader %d's log start %d: starting over there",
                        partition.topic, partition.index, end, partition.leader_id, leader_start)
        elif leader_high_watermark >= 0 and end > leader_high_watermark:
            self.log_manager.truncate_to(partition.managed, leader_high_watermark)
            log.warning("%s-%d: log end %d is past leader %d's end: truncated to its high watermark %d",
                        partition.topic, partition.index, end, partition.leader_id, leader_high_watermark)


def offset_truncation_state(partition: Partition, leader_epoch: int, leader_end: int,
                            fetch_offset: int) -> tuple[int, bool]:
    """Kafka's AbstractFetcherThread.getOffsetTruncationState: (offset to truncate to, settled?) from the
    leader's (epoch, end offset) for the epoch this replica asked about.

    * end offset undefined (the leader does not know the epoch): the fetch offset, the high watermark of a
      partition added Truncating (KIP-279);
    * epoch undefined (an OffsetForLeaderEpoch v0 answer): the leader's end offset;
    * the leader's epoch unknown here: the end of the largest local epoch below it, not settled: ask again;
    * else the smaller of both replicas' ends of that epoch (KIP-279). Never past the local log end."""
    end = partition.log_end_offset
    if leader_end == UNDEFINED_EPOCH_OFFSET:
        return fetch_offset, True
    if leader_epoch == UNDEFINED_EPOCH:
        return min(leader_end, end), True
    local_epoch, local_end = partition.log.leader_epochs.end_offset_for(leader_epoch, end)
    if local_end == UNDEFINED_EPOCH_OFFSET:  # no local epochs, or none after it: the leader's answer stands
        return min(leader_end, end), True
    if local_epoch != leader_epoch:
        return min(local_end, end), False
    return min(local_end, leader_end, end), True
