"""A ZooKeeper-era consumer group member (``kctl consume --zookeeper``): Kafka 0.8.2's ZookeeperConsumerConnector.

The member registers under ``/consumers/<group>/ids``; on every change of the group's members or of a subscribed
topic's partitions (a watch) it commits what it consumed, releases its owner nodes, computes the group's
assignment (range or round-robin, kcli.records.old_consumer: every member computes the same) and claims its
partitions, retrying ``rebalance.max.retries`` times ``rebalance.backoff.ms`` apart while an owner has not let go.
It fetches from each partition's leader (Fetch, following leader changes) and commits the offsets of what was
processed to ZooKeeper (``offsets.storage=zookeeper``) or to Kafka (``kafka``, with ``dual.commit.enabled``).

The ZooKeeper side comes in as a GroupRegistry (kcli.zk.consumer_group.ZkGroupMember): kcli.client keeps no
ZooKeeper client of its own. Nothing here prints.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from kcli.client.client import KafkaClient, KafkaClientError, KafkaRequestError, _build
from kcli.client.consume import ConsumeNotice, Fetched, _ms
from kcli.client.produce import versioned_module
from kcli.errors import CorruptRecordError, KcliError, UsageError
from kcli.protocol.api import ApiKey
from kcli.records import iter_batches
from kcli.records import old_consumer as oc

TopicPartition = tuple[str, int]


class ConsumerRebalanceFailedError(KcliError):
    """kafka.common.ConsumerRebalanceFailedException: no assignment could be claimed within the retries."""


# -- settings: the old consumer's own names (kafka.consumer.ConsumerConfig, 0.8.2) -----------------------------------
@dataclass
class OldConsumerConfig:
    group: str
    consumer_id: str | None = None  # consumer.id: by default <group>_<host>-<ms>-<8 hex>
    partition_assignment_strategy: str = oc.RANGE
    rebalance_max_retries: int = 4
    rebalance_backoff_ms: int = 2000  # default zookeeper.sync.time.ms
    zookeeper_session_timeout_ms: int = 6000
    offsets_storage: str = "zookeeper"
    dual_commit_enabled: bool | None = None  # None: offsets.storage == kafka
    auto_commit_enable: bool = True
    auto_commit_interval_ms: int = 60000
    consumer_timeout_ms: int = -1  # -1: wait for ever
    auto_offset_reset: str = "smallest"  # kctl's default (kctl consume -G starts at the beginning); Kafka: largest
    exclude_internal_topics: bool = True
    fetch_message_max_bytes: int = 1 << 20
    fetch_wait_max_ms: int = 100
    fetch_min_bytes: int = 1
    refresh_leader_backoff_ms: int = 200
    offsets_commit_max_retries: int = 5

    @property
    def dual_commit(self) -> bool:
        if self.offsets_storage != "kafka":
            return False
        return True if self.dual_commit_enabled is None else self.dual_commit_enabled


PROPERTY_NAMES = {f.name.replace("_", "."): f.name for f in fields(OldConsumerConfig) if f.name != "group"}


def parse_properties(group: str, pairs: Sequence[str]) -> OldConsumerConfig:
    """``KEY=VALUE`` settings with the old consumer's names (UsageError naming a bad one)."""
    config = OldConsumerConfig(group)
    types = {f.name: f.type for f in fields(OldConsumerConfig)}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or key not in PROPERTY_NAMES:
            known = ", ".join(sorted(PROPERTY_NAMES))
            raise UsageError(f"--consumer-property {pair!r}: expected KEY=VALUE with KEY one of {known}")
        name = PROPERTY_NAMES[key]
        kind = str(types[name])
        try:
            if "bool" in kind:
                if value.lower() not in ("true", "false"):
                    raise ValueError
                parsed: Any = value.lower() == "true"
            elif "int" in kind:
                parsed = int(value)
            else:
                parsed = value
        except ValueError:
            raise UsageError(f"--consumer-property {key}: {value!r} is not a {kind.split(' ')[0]}") from None
        setattr(config, name, parsed)
    if config.partition_assignment_strategy not in oc.STRATEGIES:
        raise UsageError("partition.assignment.strategy must be range or roundrobin")
    if config.offsets_storage not in ("zookeeper", "kafka"):
        raise UsageError("offsets.storage must be zookeeper or kafka")
    if config.auto_offset_reset not in ("smallest", "largest"):
        raise UsageError("auto.offset.reset must be smallest or largest")
    if config.rebalance_max_retries < 1:
        raise UsageError("rebalance.max.retries must be at least 1")
    return config


def new_consumer_id(group: str) -> str:
    """ZookeeperConsumerConnector.consumerIdString: ``<group>_<hostname>-<ms>-<first 8 hex of a UUID's high
    bits>``."""
    high = uuid.uuid4().int >> 64
    return f"{group}_{socket.gethostname()}-{int(time.time() * 1000)}-{format(high, 'x')[:8]}"


# -- the ZooKeeper side, as this module uses it ----------------------------------------------------------------------
class GroupSnapshotLike(Protocol):
    members: list[oc.Subscription]
    malformed: dict[str, str]
    foreign: dict[str, str]
    topics: list[str]
    partitions: dict[str, list[int]]


class GroupRegistry(Protocol):
    """What the member needs of ZooKeeper (kcli.zk.consumer_group.ZkGroupMember implements it)."""

    group: str

    def register(self, consumer_id: str, data: bytes) -> None: ...
    def reregister(self) -> None: ...
    def take_rebalance(self) -> bool: ...
    def request_rebalance(self) -> None: ...
    def take_session_loss(self) -> bool: ...
    def snapshot(self, own: oc.Subscription) -> GroupSnapshotLike: ...
    def claim(self, topic: str, partition: int, thread_id: str) -> bool: ...
    def release(self, topic: str, partition: int) -> None: ...
    def read_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]: ...
    def write_offsets(self, offsets: Mapping[TopicPartition, int]) -> None: ...
    def close(self) -> None: ...


# -- what the member yields besides records ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Rebalanced:
    """A rebalance completed: this member now owns ``partitions`` (topic, partition) -> thread id."""

    partitions: dict[TopicPartition, str]
    attempt: int


@dataclass
class _Position:
    topic: str
    partition: int
    fetch: int  # the next offset to fetch
    consumed: int  # the next offset after what the caller has processed (what a commit writes)
    leader: int = -1


@dataclass
class ZookeeperConsumer:
    """One member of an old consumer group. ``subscription``: topic -> streams (``pattern`` static), or one
    regex -> streams (white_list/black_list). ``start()`` registers; ``items()`` yields Fetched records,
    Rebalanced and ConsumeNotice items; ``close()`` commits (auto.commit.enable), deregisters and ends the
    session. A record counts as processed when the caller asks for the next item."""

    client: KafkaClient
    registry: GroupRegistry
    config: OldConsumerConfig
    topics: Mapping[str, int]
    pattern: str = oc.STATIC
    consumer_id: str = ""
    owned: dict[TopicPartition, str] = field(default_factory=dict)
    positions: dict[TopicPartition, _Position] = field(default_factory=dict)
    committed: dict[TopicPartition, int] = field(default_factory=dict)  # checkpointedZkOffsets
    timed_out: bool = False
    _notices: list[str] = field(default_factory=list)
    _reported: set[str] = field(default_factory=set)
    _last_commit: float = 0.0
    _rebalanced: Rebalanced | None = None

    def __post_init__(self) -> None:
        if self.pattern not in oc.PATTERNS:
            raise UsageError(f"unknown subscription pattern {self.pattern!r}")
        if not self.topics or any(n < 1 for n in self.topics.values()):
            raise UsageError("subscribe to at least one topic, each with at least one stream")
        self.consumer_id = self.consumer_id or self.config.consumer_id or new_consumer_id(self.config.group)
        self.subscription = oc.Subscription(self.consumer_id, dict(self.topics), self.pattern)

    # -- membership ----------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Register and run the first rebalance (its failure is the caller's: ConsumerRebalanceFailedError)."""
        data = oc.encode_registration(self.topics, self.pattern, int(time.time() * 1000))
        self.registry.register(self.consumer_id, data)
        self.registry.take_rebalance()
        self._synced_rebalance()
        self._last_commit = time.monotonic()

    def close(self) -> None:
        try:
            if self.config.auto_commit_enable:
                self.commit()
        finally:
            self.registry.close()

    def _synced_rebalance(self) -> None:
        for attempt in range(self.config.rebalance_max_retries):
            try:
                if self._rebalance(attempt):
                    return
            except KafkaClientError as exc:
                # syncedRebalance: an attempt that fails (a partition just added to ZooKeeper and not yet in the
                # brokers' metadata, a broker unreachable) is logged and tried again after the backoff; the next
                # attempt releases what this one claimed
                self._notices.append(f"rebalance attempt {attempt + 1} failed: {exc.describe()}; retrying")
            time.sleep(self.config.rebalance_backoff_ms / 1000)
        raise ConsumerRebalanceFailedError(f"{self.consumer_id} can't rebalance after "
                                           f"{self.config.rebalance_max_retries} retries")

    def _rebalance(self, attempt: int) -> bool:
        snapshot = self.registry.snapshot(self.subscription)
        if snapshot.foreign:
            member, topic = next(iter(sorted(snapshot.foreign.items())))
            raise KcliError(f"pykafka's BalancedConsumer {member} (topic {topic}) joined group "
                            f"{self.config.group}: its registry layout is not Kafka's; leaving the group")
        for member, reason in sorted(snapshot.malformed.items()):
            if member not in self._reported:
                self._reported.add(member)
                self._notices.append(f"group {self.config.group}: skipping member {member}: its ids node is "
                                     f"malformed ({reason})")
        # closeFetchers: what was processed is committed before the partitions are let go
        if self.config.auto_commit_enable:
            self.commit()
        for topic, partition in sorted(self.owned):
            self.registry.release(topic, partition)
        self.owned.clear()
        self.positions.clear()
        if not any(m.consumer_id == self.consumer_id for m in snapshot.members):
            self.registry.reregister()  # our ids node is gone (a new session): the others cannot count us yet
            return False
        partitions = {t: snapshot.partitions.get(t, []) for t in snapshot.topics}
        assignment = oc.assign(self.config.partition_assignment_strategy, snapshot.members, partitions)
        mine = {tp: thread for tp, thread in sorted(assignment.items())
                if oc.owner_of_thread(thread) == self.consumer_id}
        offsets = self._fetch_offsets(sorted(mine))
        claimed = []
        for (topic, partition), thread in mine.items():
            if not self.registry.claim(topic, partition, thread):
                for t, p in claimed:  # reflectPartitionOwnershipDecision: all or nothing
                    self.registry.release(t, p)
                self._notices.append(f"rebalance attempt {attempt + 1}: {topic}-{partition} is still owned by "
                                     "another member; retrying")
                return False
            claimed.append((topic, partition))
        self.owned = mine
        self.committed = dict(offsets)
        resets = self._resets([tp for tp in mine if tp not in offsets])
        for tp in mine:
            start = offsets.get(tp, resets.get(tp, 0))
            self.positions[tp] = _Position(tp[0], tp[1], start, start)
        self._refresh_leaders()
        self._rebalanced = Rebalanced(dict(mine), attempt + 1)
        return True

    def _resets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        """auto.offset.reset for partitions without a committed offset: smallest (log start) or largest (end)."""
        if not partitions:
            return {}
        ranges = self.client.log_offsets(partitions)
        which = 0 if self.config.auto_offset_reset == "smallest" else 1
        return {tp: r[which] for tp, r in ranges.items()}

    # -- offsets -------------------------------------------------------------------------------------------------
    def _fetch_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
        if not partitions:
            return {}
        if self.config.offsets_storage == "zookeeper":
            return self.registry.read_offsets(partitions)
        found = self.client.offset_fetch(self.config.group, partitions)
        if self.config.dual_commit:
            # a group migrating its offsets to Kafka: the newer of the two (ZookeeperConsumerConnector.fetchOffsets)
            for tp, offset in self.registry.read_offsets(partitions).items():
                found[tp] = max(found.get(tp, -1), offset)
        return found

    def mark(self, topic: str, partition: int, offset: int) -> None:
        """The caller processed the records before ``offset`` (the next commit writes it)."""
        position = self.positions.get((topic, partition))
        if position is not None:
            position.consumed = offset

    def commit(self) -> None:
        """commitOffsets: the consumed offset of every owned partition that changed since the last commit."""
        pending = {tp: p.consumed for tp, p in self.positions.items() if self.committed.get(tp) != p.consumed}
        if not pending:
            return
        if self.config.offsets_storage == "zookeeper":
            self.registry.write_offsets(pending)
            self.committed.update(pending)
            return
        for attempt in range(self.config.offsets_commit_max_retries + 1):
            errors = self.client.offset_commit(self.config.group, pending)
            done = {tp: o for tp, o in pending.items() if errors.get(tp, ErrorCode.none) == ErrorCode.none}
            if self.config.dual_commit and done:
                self.registry.write_offsets(done)
            self.committed.update(done)
            pending = {tp: o for tp, o in pending.items() if tp not in done}
            if not pending:
                return
            time.sleep(1.0)  # offsets.channel.backoff.ms
        tp = next(iter(pending))
        self._notices.append(f"commit of {tp[0]}-{tp[1]} for group {self.config.group} failed: "
                             f"{errors[tp].name}")

    # -- fetching ------------------------------------------------------------------------------------------------
    def _refresh_leaders(self) -> None:
        topics = sorted({t for t, _ in self.positions})
        if not topics:
            return
        try:
            meta = self.client.metadata(topics)
        except KafkaClientError as exc:
            self._notices.append(f"metadata refresh failed: {exc.describe()}")
            return
        for (topic, partition), position in self.positions.items():
            t = meta.topics.get(topic)
            position.leader = t.partitions.get(partition, -1) if t is not None else -1

    def items(self) -> Iterator[Fetched | Rebalanced | ConsumeNotice]:
        last_record = time.monotonic()
        while True:
            notices, self._notices = self._notices, []
            for text in notices:
                yield ConsumeNotice(text)
            if self._rebalanced is not None:
                rebalanced, self._rebalanced = self._rebalanced, None
                yield rebalanced
            if self.registry.take_session_loss():
                # ZKSessionExpireListener.handleNewSession: our ephemerals are gone; register again, rebalance
                self._notices.append(f"ZooKeeper session expired: {self.consumer_id} registers again")
                self.owned.clear()
                self.registry.reregister()
                self.registry.request_rebalance()
            if self.registry.take_rebalance():
                try:
                    self._synced_rebalance()
                except ConsumerRebalanceFailedError as exc:
                    # Kafka's watcher thread logged this and waited for the next event: kctl tries again
                    self._notices.append(f"{exc.describe()}; trying again")
                    self.registry.request_rebalance()
                continue
            now = time.monotonic()
            if self.config.auto_commit_enable and now - self._last_commit >= self.config.auto_commit_interval_ms / 1000:
                self.commit()
                self._last_commit = now
            if 0 <= self.config.consumer_timeout_ms <= (now - last_record) * 1000:
                self.timed_out = True  # ConsumerTimeoutException
                return
            if not self.positions:
                time.sleep(min(0.1, self.config.fetch_wait_max_ms / 1000))
                continue
            by_leader: dict[int, list[_Position]] = {}
            for position in self.positions.values():
                by_leader.setdefault(position.leader, []).append(position)
            refresh = -1 in by_leader
            for leader, positions in sorted(by_leader.items()):
                if leader < 0:
                    continue
                try:
                    for fetched in self._fetch(leader, positions):
                        if isinstance(fetched, Fetched):
                            last_record = time.monotonic()
                        yield fetched
                        if isinstance(fetched, Fetched):  # resumed: the caller processed it
                            self.mark(fetched.topic, fetched.partition, fetched.next_offset)
                except KafkaClientError as exc:  # unreachable, an error code, a leader not in the metadata
                    refresh = True
                    for position in positions:
                        position.leader = -1
                    self._notices.append(f"fetch from broker {leader} failed ({exc.describe()}); looking for "
                                         "the leaders again")
            if refresh:
                time.sleep(self.config.refresh_leader_backoff_ms / 1000)
                self._refresh_leaders()

    def _fetch(self, leader: int, positions: list[_Position]) -> Iterator[Fetched | ConsumeNotice]:
        connection = self.client._node(leader)
        version, m = versioned_module(connection, ApiKey.FETCH)
        per_topic: dict[str, list[Any]] = {}
        for p in positions:
            per_topic.setdefault(p.topic, []).append(_build(
                m, "FetchPartition", partition=p.partition, current_leader_epoch=-1, fetch_offset=p.fetch,
                last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=self.config.fetch_message_max_bytes))
        body = connection.call(ApiKey.FETCH, _build(
            m, "FetchRequest", replica_id=-1, max_wait=_ms(self.config.fetch_wait_max_ms),
            min_bytes=self.config.fetch_min_bytes, max_bytes=max(self.config.fetch_message_max_bytes, 50 << 20),
            isolation_level=0, session_id=0, session_epoch=-1,
            topics=tuple(_build(m, "FetchTopic", topic=t, topic_id=None, partitions=tuple(ps))
                         for t, ps in per_topic.items()),
            forgotten_topics_data=(), rack_id=""))
        label = f"FetchResponse v{version}"
        if getattr(body, "error_code", ErrorCode.none) != ErrorCode.none:
            raise KafkaRequestError("", request=label, field="error_code", error=body.error_code)
        wanted = {(p.topic, p.partition): p for p in positions}
        for t in body.responses:
            for data in t.partitions:
                position = wanted.get((t.topic, int(data.partition_index)))
                if position is not None and self.positions.get((position.topic, position.partition)) is position:
                    yield from self._partition(position, data, label)

    def _partition(self, position: _Position, data: Any, label: str) -> Iterator[Fetched | ConsumeNotice]:
        error = ErrorCode(data.error_code)
        name = f"{position.topic}-{position.partition}"
        if error == ErrorCode.offset_out_of_range:
            # ConsumerFetcherThread.handleOffsetOutOfRange: auto.offset.reset
            start, end = self.client.log_offsets([(position.topic, position.partition)])[
                (position.topic, position.partition)]
            target = start if self.config.auto_offset_reset == "smallest" else end
            yield ConsumeNotice(f"{name}: offset {position.fetch} is out of range (the log holds {start}-{end}); "
                                f"auto.offset.reset={self.config.auto_offset_reset} starts at {target}")
            position.fetch = position.consumed = target
            return
        if error != ErrorCode.none:
            raise KafkaRequestError(name, request=label,
                                    field=f"responses[{position.topic}].partitions[{position.partition}].error_code",
                                    error=error)
        records_bytes = bytes(data.records or b"")
        for batch in iter_batches(records_bytes):
            if batch.next_offset <= position.fetch:
                continue  # a batch before the position (a fetch inside a batch returns the whole batch)
            if getattr(batch, "is_control", False):
                position.fetch = batch.next_offset
                continue
            try:
                records = [r for r in batch.records() if r.offset >= position.fetch]
            except CorruptRecordError as exc:  # not retried: the same bytes would come back
                raise KcliError(f"{name}: a corrupt batch at offset {batch.base_offset} from the broker: "
                                f"{exc.describe()}") from None
            position.fetch = batch.next_offset
            if records:
                yield Fetched(position.topic, position.partition, batch, records, batch.next_offset)


def default_client_id() -> str:
    return f"kctl-zk-consumer-{os.getpid()}"
