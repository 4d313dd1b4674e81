"""The classic group coordinator (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) and committed offsets.

Kafka's GroupCoordinator on one broker: groups move Empty -> PreparingRebalance -> CompletingRebalance
-> Stable along GroupState's table of valid transitions; a rebalance completes when every known member has
rejoined (or its rebalance timeout passed). Static members (group.instance.id, KIP-345) keep their
assignment across restarts without a rebalance, and older member ids of theirs are fenced.
Offsets and group metadata are written to ``__consumer_offsets`` in Kafka's record format
(OffsetCommitKey/Value, GroupMetadataKey/Value; partition = abs(groupId.hashCode) % partitions), kept in
memory, and reloaded from that topic at startup.
"""

from __future__ import annotations

import asyncio
import enum
import importlib
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from kcli.broker.errors import IllegalGroupStateError
from kcli.errors import KcliError
from kcli.records import Record, build_record_batch
from kcli.records.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_group_metadata,
    encode_group_metadata_tombstone,
    encode_offset_commit,
    encode_offset_commit_tombstone,
    partition_for_group,
)
from kcli.records.control import ControlRecordType
from kcli.storage.offsets_topic import OffsetsTopicEntry, replay_offsets_topic
from kcli.storage.producer_state import AppendOrigin

if TYPE_CHECKING:
    from kcli.broker.config import BrokerConfig
    from kcli.broker.log_manager import LogManager
    from kcli.broker.replica_manager import ReplicaManager
    from kcli.broker.topic_admin import TopicAdmin

log = logging.getLogger("kcli.broker.groups")

OFFSETS_TOPIC = "__consumer_offsets"


class GroupState(enum.StrEnum):
    """A classic group's state; the value is the name DescribeGroups and ListGroups report (Kafka's GroupState)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE,
                                              GroupState.COMPLETING_REBALANCE, GroupState.STABLE, GroupState.DEAD)

# The states each state may be entered from: Kafka's GroupState.validPreviousStates (GroupMetadata.scala).
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    PREPARING: frozenset({STABLE, COMPLETING, EMPTY}),
    COMPLETING: frozenset({PREPARING}),
    STABLE: frozenset({COMPLETING}),
    DEAD: frozenset(GroupState),
    EMPTY: frozenset({PREPARING}),
}


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_seen: float = field(default_factory=time.monotonic)  # the coordinator's clock: its last heartbeat
    join_waiter: asyncio.Future | None = None  # set while the member's JoinGroup waits for the rebalance
    sync_waiter: asyncio.Future | None = None  # set while a follower's SyncGroup waits for the leader's

    @property
    def awaiting_join(self) -> bool:
        return self.join_waiter is not None and not self.join_waiter.done()

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_waiter is not None and not self.sync_waiter.done()

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass
class Group:
    group_id: str
    state: GroupState = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id (KIP-345)
    pending: dict[str, float] = field(default_factory=dict)  # ids handed out by MEMBER_ID_REQUIRED -> expiry
    new_member_added: bool = False  # a member joined during the initial delay: extend it (InitialDelayedJoin)
    join_timer: asyncio.TimerHandle | None = None  # the rebalance's deadline (Kafka's DelayedJoin)
    initial_join: bool = False  # the deadline is the initial delay: only its expiry completes the join
    expiry_timer: asyncio.TimerHandle | None = None  # the next member session deadline (DelayedHeartbeat)

    def transition_to(self, state: GroupState) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalGroupStateError(
                f"group {self.group_id} should be in one of {sorted(VALID_PREVIOUS_STATES[state])} before moving "
                f"to {state}, but it is {self.state}")
        self.state = state

    @property
    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[PREPARING]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending and all(m.awaiting_join for m in self.members.values())

    def add(self, member: Member) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise IllegalGroupStateError(f"static member {member.group_instance_id} is already in group "
                                             f"{self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader is None:
            self.leader = member.member_id
        self.members[member.member_id] = member
        self.pending.pop(member.member_id, None)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None and member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self.pending.pop(member_id, None)

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """The member keeps its assignment under a new member id; requests still waiting under the old one
        are fenced at once (Kafka's GroupMetadata.replaceStaticMember)."""
        member = self.members.pop(old_id)
        for waiter in (member.join_waiter, member.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result({"error_code": ErrorCode.fenced_instance_id, "member_id": old_id})
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader == old_id:
            self.leader = new_id
        self.static_members[instance_id] = new_id
        return member

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state is EMPTY:
            return bool(protocol_type) and bool(names)
        # With no members left (all gone while it prepares), any protocol of the group's type will do.
        candidates = self.candidate_protocols() if self.members else names
        return protocol_type == self.protocol_type and bool(names & candidates)

    def candidate_protocols(self) -> set[str]:
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol all members support; the most votes win (ties go
        to the leader's preference, so the choice is deterministic)."""
        candidates = self.candidate_protocols()
        if not candidates:
            raise IllegalGroupStateError(f"group {self.group_id}: no protocol is supported by all members")
        votes = Counter(m.vote(candidates) for m in self.members.values())
        leader = self.members.get(self.leader or "")
        preference = [name for name, _ in leader.protocols] if leader is not None else []
        ordered = sorted(votes, key=lambda name: preference.index(name) if name in preference else len(preference))
        return max(ordered, key=lambda name: votes[name])  # max keeps the first of equals

    def member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        return [(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name)) for m in self.members.values()]


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    # the base offset of the batch that stored it in __consumer_offsets: a transactional commit settled by its
    # COMMIT marker replaces only an older one (Kafka's CommitRecordMetadataAndOffset.olderThan)
    batch_offset: int = -1


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, replica_manager: ReplicaManager,
                 admin: TopicAdmin, *, clustered: bool = False) -> None:
        self.config = config
        self.log_manager = log_manager
        self.replicas = replica_manager
        self.admin = admin
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.loading = True  # until load() has replayed __consumer_offsets: COORDINATOR_LOAD_IN_PROGRESS
        # Session deadlines are read on this clock (tests inject one); a timer per group fires at the next one
        # and every request first expires the members whose deadline has come, so a member is gone exactly at
        # last heartbeat + session timeout, as Kafka's heartbeat purgatory expires it (DelayedHeartbeat).
        self.clock: Callable[[], float] = time.monotonic
        # ZooKeeper mode: this broker coordinates the groups of the __consumer_offsets partitions it leads;
        # each is replayed when it becomes leader (Kafka's onElection) and forgotten when it stops.
        self.clustered = clustered
        self.loading_partitions: set[int] = set()
        # TxnOffsetCommits waiting for their transaction's marker: group -> producer id -> partition -> offset
        # (Kafka's GroupMetadata.pendingTransactionalOffsetCommits); invisible to OffsetFetch until COMMIT.
        self.pending_txn_offsets: dict[str, dict[int, dict[tuple[str, int], CommittedOffset]]] = {}

    # -- which groups are coordinated here -----------------------------------------------------------
    def coordinator_error(self, group_id: str) -> ErrorCode | None:
        """None when this broker coordinates ``group_id`` now; else COORDINATOR_LOAD_IN_PROGRESS (its
        partition is being replayed), NOT_COORDINATOR (another broker leads it) or COORDINATOR_NOT_AVAILABLE
        (no __consumer_offsets yet), as Kafka's GroupCoordinator answers."""
        if self.loading:
            return ErrorCode.coordinator_load_in_progress
        if not self.clustered:
            return None
        count = self.admin.metadata.partition_count(OFFSETS_TOPIC)
        if not count:
            return ErrorCode.coordinator_not_available
        index = partition_for_group(group_id, count)
        partition = self.replicas.find(OFFSETS_TOPIC, index)
        if partition is None or not partition.is_leader:
            return ErrorCode.not_coordinator
        if index in self.loading_partitions:
            return ErrorCode.coordinator_load_in_progress
        return None

    def on_leadership_change(self, leaders: list[Any], followers: list[Any]) -> list[int]:
        """LeaderAndIsr / StopReplica moved __consumer_offsets partitions: forget the groups of those no
        longer led here at once; returns the partitions to replay (the caller runs `load_partition` off the
        event loop, answering COORDINATOR_LOAD_IN_PROGRESS meanwhile)."""
        count = self.admin.metadata.partition_count(OFFSETS_TOPIC)
        for partition in followers:
            if partition.topic == OFFSETS_TOPIC:
                self._unload(partition.index, count)
        to_load = [p.index for p in leaders if p.topic == OFFSETS_TOPIC]
        self.loading_partitions.update(to_load)
        return to_load

    def _unload(self, index: int, count: int | None) -> None:
        self.loading_partitions.discard(index)
        if not count:
            return
        for group_id in [g for g in set(self.groups) | set(self.offsets) if partition_for_group(g, count) == index]:
            group = self.groups.pop(group_id, None)
            if group is not None:
                self._cancel_join_timer(group)
                self._disarm(group)
                for member in list(group.members.values()):
                    self._fail_waiters(member, ErrorCode.not_coordinator)
            self.offsets.pop(group_id, None)
            self.pending_txn_offsets.pop(group_id, None)
        log.info("resigned as coordinator of %s-%d", OFFSETS_TOPIC, index)

    def load_partition(self, index: int) -> list[OffsetsTopicEntry]:
        """Read one __consumer_offsets partition (in a worker thread); `finish_loading` applies it."""
        managed = self.log_manager.partition(OFFSETS_TOPIC, index)
        if managed is None:
            return []

        def undecodable(offset: int, exc: KcliError) -> None:
            log.warning("skipping undecodable %s-%d record at offset %d: %s", OFFSETS_TOPIC, index, offset, exc)

        return list(replay_offsets_topic(managed.directory, undecodable))

    def finish_loading(self, index: int, records: list[OffsetsTopicEntry]) -> None:
        if index not in self.loading_partitions:
            return  # resigned meanwhile
        self._replay(records)
        self.loading_partitions.discard(index)
        log.info("coordinator of %s-%d: loaded %d records", OFFSETS_TOPIC, index, len(records))

    def _replay(self, entries: Any) -> int:
        """Kafka's doLoadGroupsAndOffsets: transactional offset commits wait for their producer's marker (a
        COMMIT applies those newer than what is loaded, an ABORT drops them); those still open at the log end
        stay pending. Returns the number of records."""
        pending: dict[int, dict[tuple[str, str, int], CommittedOffset | None]] = {}
        count = 0
        for entry in entries:
            count += 1
            if entry.marker is not None:
                settled = pending.pop(entry.producer_id, {})
                if entry.marker is ControlRecordType.COMMIT:
                    for (group, topic, partition), value in settled.items():
                        committed = self.offsets.setdefault(group, {})
                        if value is None:
                            committed.pop((topic, partition), None)
                        else:
                            current = committed.get((topic, partition))
                            if current is None or current.batch_offset < value.batch_offset:
                                committed[(topic, partition)] = value
                continue
            key, value = entry.key, entry.value
            if entry.producer_id >= 0 and isinstance(key, OffsetCommitKey):
                pending.setdefault(entry.producer_id, {})[(key.group, key.topic, key.partition)] = (
                    None if value is None else CommittedOffset(value.offset, value.leader_epoch, value.metadata,
                                                               value.commit_timestamp, entry.batch_offset))
                continue
            self._apply(key, value, entry.batch_offset)
        for producer_id, settled in pending.items():
            for (group, topic, partition), value in settled.items():
                if value is not None:
                    self.pending_txn_offsets.setdefault(group, {}).setdefault(producer_id, {})[(topic, partition)] = value
        return count

    # -- startup: reload from __consumer_offsets ---------------------------------------------------
    def load(self) -> None:
        topic = self.log_manager.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return
        loaded = 0

        def undecodable(offset: int, exc: KcliError) -> None:
            log.warning("skipping undecodable %s record at offset %d: %s", OFFSETS_TOPIC, offset, exc)

        for partition in topic.partitions:
            loaded += self._replay(replay_offsets_topic(partition.directory, undecodable))
        log.info("loaded %d records of %s: %d groups", loaded, OFFSETS_TOPIC, len(self.groups))

    def _apply(self, key: Any, value: Any, batch_offset: int = -1) -> None:
        if isinstance(key, OffsetCommitKey):
            committed = self.offsets.setdefault(key.group, {})
            if value is None:
                committed.pop((key.topic, key.partition), None)
            else:
                assert isinstance(value, OffsetCommitValue)
                committed[(key.topic, key.partition)] = CommittedOffset(value.offset, value.leader_epoch,
                                                                        value.metadata, value.commit_timestamp,
                                                                        batch_offset)
        elif isinstance(key, GroupMetadataKey):
            if value is None:
                self.groups.pop(key.group, None)
                return
            assert isinstance(value, GroupMetadataValue)
            # Members must rejoin after a restart; what survives is the generation and protocol.
            self.groups[key.group] = Group(key.group, EMPTY, value.generation, value.protocol_type or None,
                                           value.protocol, None)

    def start(self) -> None:
        self.expire_sessions(self.clock())

    def stop(self) -> None:
        for group in self.groups.values():
            self._disarm(group)

    # -- persistence ---------------------------------------------------------------------------------
    def _write(self, group_id: str, pairs: list[tuple[bytes, bytes | None]]) -> None:
        partitions = self._offsets_partitions()
        index = partition_for_group(group_id, partitions)
        now = int(time.time() * 1000)
        records = [Record(i, now, key, value) for i, (key, value) in enumerate(pairs)]
        result = self.replicas.append_records(-1, {(OFFSETS_TOPIC, index): build_record_batch(records)},
                                              origin=AppendOrigin.COORDINATOR)[(OFFSETS_TOPIC, index)]
        if result.error:
            raise KcliError(f"cannot write to {OFFSETS_TOPIC}-{index}: error {result.error} {result.message or ''}")

    async def _write_and_wait(self, group_id: str, pairs: list[tuple[bytes, bytes | None]], *,
                              producer_id: int = -1, producer_epoch: int = -1) -> tuple[ErrorCode, int]:
        """An offset commit is answered only once the ISR has it (Kafka's storeOffsets: acks=-1 and
        offsets.commit.timeout.ms), so a commit acknowledged before a coordinator failover is never lost. The
        append's error becomes what a committing client can act on, by Kafka's table. A TxnOffsetCommit is a
        transactional batch of its producer (the partition checks its epoch). Returns (error, base offset)."""
        partitions = self._offsets_partitions()
        index = partition_for_group(group_id, partitions)
        now = int(time.time() * 1000)
        records = [Record(i, now, key, value) for i, (key, value) in enumerate(pairs)]
        tp = (OFFSETS_TOPIC, index)
        batch = build_record_batch(records) if producer_id < 0 else build_record_batch(
            records, producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=0, is_transactional=True)
        result = (await self.replicas.append_and_wait(
            -1, self.config["offsets.commit.timeout.ms"], {tp: batch}, origin=AppendOrigin.COORDINATOR))[tp]
        return _STORE_ERRORS.get(ErrorCode(result.error), ErrorCode(result.error)), result.base_offset

    def partition_for(self, group_id: str) -> int:
        """The group's __consumer_offsets partition (AddOffsetsToTxn), creating the topic on one broker as an
        offset commit would; in a cluster before it exists, by offsets.topic.num.partitions (Kafka's
        GroupMetadataManager.partitionFor)."""
        try:
            return partition_for_group(group_id, self._offsets_partitions())
        except KcliError:
            return partition_for_group(group_id, self.config["offsets.topic.num.partitions"])

    def _offsets_partitions(self) -> int:
        count = self.admin.metadata.partition_count(OFFSETS_TOPIC)
        if count is None and self.clustered:
            raise KcliError(f"{OFFSETS_TOPIC} does not exist yet")
        if count is None:
            self.admin.create_topic(OFFSETS_TOPIC, self.config["offsets.topic.num.partitions"], 1,
                                    configs={"cleanup.policy": "compact"})
            count = self.admin.metadata.partition_count(OFFSETS_TOPIC)
        return int(count or 0)

    def _write_group(self, group: Group) -> None:
        members = [MemberMetadata(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                                  client_host=m.client_host, session_timeout=m.session_timeout_ms,
                                  rebalance_timeout=m.rebalance_timeout_ms,
                                  subscription=m.metadata_for(group.protocol_name), assignment=m.assignment)
                   for m in group.members.values()]
        self._write(group.group_id, [encode_group_metadata(
            group.group_id, protocol_type=group.protocol_type or "", generation=group.generation,
            protocol=group.protocol_name, leader=group.leader, current_state_timestamp=int(time.time() * 1000),
            members=members)])

    # -- JoinGroup -----------------------------------------------------------------------------------
    async def join(self, req: Any, version: int, client_id: str, client_host: str) -> dict[str, Any]:
        """Kafka's handleJoinGroup: new members (dynamic ones after MEMBER_ID_REQUIRED, KIP-394), known
        static members coming back under a new member id (KIP-345), and current members rejoining."""
        member_id = req.member_id or ""
        instance_id = getattr(req, "group_instance_id", None)
        protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
        session_ms = int(req.session_timeout.total_seconds() * 1000)
        rebalance = getattr(req, "rebalance_timeout", None)  # v1+; v0 rebalances within the session timeout
        rebalance_ms = int(rebalance.total_seconds() * 1000) if rebalance is not None else session_ms
        group = self.group(req.group_id)
        if group is None:
            if member_id:
                return {"error_code": ErrorCode.unknown_member_id, "member_id": member_id}
            group = self.groups[req.group_id] = Group(req.group_id)
        if group.state is DEAD:
            return {"error_code": ErrorCode.coordinator_not_available, "member_id": member_id}
        if not group.supports_protocols(req.protocol_type, {name for name, _ in protocols}):
            return {"error_code": ErrorCode.inconsistent_group_protocol, "member_id": member_id}

        def new_member(new_id: str) -> Member:
            return Member(new_id, instance_id, client_id or "", client_host, session_ms, rebalance_ms,
                          req.protocol_type, protocols, last_seen=self.clock())

        if not member_id:
            new_id = f"{instance_id or client_id or 'member'}-{uuid.uuid4()}"
            if instance_id is not None:
                old_id = group.static_members.get(instance_id)
                if old_id is not None:
                    return await self._update_static_member(group, old_id, new_id, instance_id, protocols,
                                                            rebalance_ms, session_ms, skip_assignment=version >= 9)
                return await self._add_member_and_rebalance(group, new_member(new_id))
            if version >= 4:
                group.pending[new_id] = self.clock() + session_ms / 1000
                self._arm(group)
                return {"error_code": ErrorCode.member_id_required, "member_id": new_id}
            return await self._add_member_and_rebalance(group, new_member(new_id))
        if member_id in group.pending:
            if instance_id is not None:  # pending ids are only handed to dynamic members
                raise IllegalGroupStateError(f"group {group.group_id}: JoinGroup with group.instance.id "
                                             f"{instance_id} for pending member {member_id}")
            return await self._add_member_and_rebalance(group, new_member(member_id))
        error = self._validate_member(group, member_id, instance_id)
        if error != ErrorCode.none:
            return {"error_code": error, "member_id": member_id}
        member = group.members[member_id]
        if group.state is PREPARING:
            return await self._update_member_and_rebalance(group, member, protocols, rebalance_ms, session_ms)
        if group.state is COMPLETING:
            if member.matches(protocols):  # a retry of a join whose response was lost: the same answer
                return self._join_result(group, member_id, with_members=member_id == group.leader)
            return await self._update_member_and_rebalance(group, member, protocols, rebalance_ms, session_ms)
        if group.state is STABLE:
            # The leader's rejoin forces a rebalance (it saw a metadata change the others cannot see); a
            # follower with unchanged metadata is told the current generation and goes on to SyncGroup.
            if member_id == group.leader or not member.matches(protocols):
                return await self._update_member_and_rebalance(group, member, protocols, rebalance_ms, session_ms)
            self._heard_from(group, member)
            return self._join_result(group, member_id, with_members=False)
        return {"error_code": ErrorCode.unknown_member_id, "member_id": member_id}  # Empty: reset and rejoin

    @staticmethod
    def _join_result(group: Group, member_id: str, *, with_members: bool, leader: str | None = None,
                     skip_assignment: bool = False) -> dict[str, Any]:
        return {"error_code": ErrorCode.none, "generation_id": group.generation, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol_name, "leader": leader if leader is not None else group.leader,
                "member_id": member_id, "skip_assignment": skip_assignment,
                "members": group.member_metadata() if with_members else []}

    @staticmethod
    def _validate_member(group: Group, member_id: str, instance_id: str | None) -> ErrorCode:
        """Kafka's validateCurrentMember: a static member's request must carry its current member id (an
        older one is FENCED_INSTANCE_ID, KIP-345), and the member id must be in the group."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                log.info("group %s: member %s of static instance %s is fenced by %s", group.group_id, member_id,
                         instance_id, current)
                return ErrorCode.fenced_instance_id
            return ErrorCode.none
        return ErrorCode.none if member_id in group.members else ErrorCode.unknown_member_id

    @staticmethod
    def _await_join(member: Member) -> asyncio.Future:
        """The member's join future, created if it is not waiting already (a repeated JoinGroup shares it)."""
        if not member.awaiting_join:
            member.join_waiter = asyncio.get_running_loop().create_future()
        assert member.join_waiter is not None
        return member.join_waiter

    async def _add_member_and_rebalance(self, group: Group, member: Member) -> dict[str, Any]:
        if group.state is PREPARING and group.generation == 0:
            group.new_member_added = True  # lets the initial delay extend (InitialDelayedJoin)
        group.add(member)
        waiter = self._await_join(member)
        log.info("group %s: member %s (instance %s) joins in state %s", group.group_id, member.member_id,
                 member.group_instance_id, group.state)
        self._maybe_prepare_rebalance(group)
        self._try_complete_join(group)
        return await asyncio.shield(waiter)  # a dropped connection must not cancel the rebalance's future

    async def _update_member_and_rebalance(self, group: Group, member: Member, protocols: list[tuple[str, bytes]],
                                           rebalance_ms: int, session_ms: int) -> dict[str, Any]:
        member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = protocols, rebalance_ms, session_ms
        member.last_seen = self.clock()
        waiter = self._await_join(member)
        self._maybe_prepare_rebalance(group)
        self._try_complete_join(group)
        return await asyncio.shield(waiter)

    async def _update_static_member(self, group: Group, old_id: str, new_id: str, instance_id: str,
                                    protocols: list[tuple[str, bytes]], rebalance_ms: int, session_ms: int, *,
                                    skip_assignment: bool) -> dict[str, Any]:
        """A known static member joins without a member id (it restarted): it takes over its old membership
        under a new id, the old id is fenced, and in a Stable group whose protocol stays the same there is
        no rebalance: it gets its assignment back at SyncGroup (Kafka's updateStaticMemberAndRebalance)."""
        current_leader = group.leader
        member = group.replace_static_member(instance_id, old_id, new_id)
        member.last_seen = self.clock()
        old = (member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms)
        member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = protocols, rebalance_ms, session_ms
        waiter = self._await_join(member)
        log.info("group %s: static member %s rejoins in state %s as %s (was %s)", group.group_id, instance_id,
                 group.state, new_id, old_id)
        if group.state is STABLE:
            if group.protocol_name == group.select_protocol():
                error = self._store_group(group)
                if error != ErrorCode.none:  # the new member id is not persisted: undo the replacement
                    member.protocols, member.rebalance_timeout_ms, member.session_timeout_ms = old
                    group.replace_static_member(instance_id, new_id, old_id)  # answers this join's waiter
                    return {"error_code": error, "member_id": ""}
                if skip_assignment:
                    # JoinGroup v9+: a static leader learns it leads, but must not run the assignor again, as
                    # a Stable group would not hand out a new assignment.
                    is_leader = group.leader == new_id
                    result = self._join_result(group, new_id, with_members=is_leader, skip_assignment=is_leader)
                else:
                    # Before v9 the old leader id is returned, so a rejoining leader does not think it leads
                    # and assign partitions that a Stable group would not distribute.
                    result = self._join_result(group, new_id, with_members=False, leader=current_leader)
                waiter.set_result(result)
                self._arm(group)
                return result
            self._maybe_prepare_rebalance(group)
        elif group.state is COMPLETING:
            # The leader may be assigning with the old member id: rebalance, or this member gets nothing.
            self._prepare_rebalance(group)
        elif group.state is not PREPARING:
            raise IllegalGroupStateError(f"group {group.group_id}: static member {instance_id} rejoins in state "
                                         f"{group.state}")
        self._try_complete_join(group)
        return await asyncio.shield(waiter)

    # -- rebalance -------------------------------------------------------------------------------------
    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is COMPLETING:  # members waiting in SyncGroup rejoin
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        initial = group.state is EMPTY
        self._cancel_join_timer(group)
        group.transition_to(PREPARING)
        log.info("group %s: preparing to rebalance, generation %d, %d members", group.group_id, group.generation,
                 len(group.members))
        if initial:
            # The first rebalance of an empty group waits group.initial.rebalance.delay.ms so consumers
            # starting together land in one generation; joins during the delay extend it, up to the
            # rebalance timeout (Kafka's InitialDelayedJoin).
            delay = int(self.config["group.initial.rebalance.delay.ms"])
            self._schedule_initial_join(group, delay, delay, max(group.rebalance_timeout_ms - delay, 0))
        else:
            self._schedule_join(group, group.rebalance_timeout_ms)
            self._try_complete_join(group)

    def _schedule_join(self, group: Group, timeout_ms: int) -> None:
        group.initial_join = False
        group.join_timer = asyncio.get_running_loop().call_later(timeout_ms / 1000, self._on_join_expired, group)

    def _schedule_initial_join(self, group: Group, configured_ms: int, delay_ms: int, remaining_ms: int) -> None:
        group.initial_join = True
        group.join_timer = asyncio.get_running_loop().call_later(
            delay_ms / 1000, self._on_initial_join_expired, group, configured_ms, delay_ms, remaining_ms)

    @staticmethod
    def _cancel_join_timer(group: Group) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_join = False

    def _on_initial_join_expired(self, group: Group, configured_ms: int, delay_ms: int, remaining_ms: int) -> None:
        group.join_timer = None
        if group.state is not PREPARING:
            return
        if group.new_member_added and remaining_ms != 0:
            group.new_member_added = False
            self._schedule_initial_join(group, configured_ms, min(configured_ms, remaining_ms),
                                        max(remaining_ms - delay_ms, 0))
        else:
            self._complete_join(group)

    def _on_join_expired(self, group: Group) -> None:
        group.join_timer = None
        if group.state is PREPARING:
            self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        """A rebalance completes as soon as every known member has rejoined and no pending member is
        outstanding (Kafka's tryCompleteJoin); the initial delay always runs its course."""
        if group.state is PREPARING and not group.initial_join and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """Kafka's onCompleteJoin: dynamic members that did not rejoin are dropped (static ones stay until
        their session expires), then the next generation starts, or the group is Empty."""
        self._cancel_join_timer(group)
        for member_id in [mid for mid, m in group.members.items() if not m.awaiting_join and m.group_instance_id is None]:
            log.info("group %s: member %s did not rejoin in time", group.group_id, member_id)
            self._fail_waiters(group.members[member_id], ErrorCode.unknown_member_id)
            group.remove(member_id)
        if group.state is DEAD:
            return
        if group.members and not self._elect_joined_leader(group):
            # Nobody rejoined: wait another rebalance timeout while session expiry removes the silent ones.
            log.warning("group %s could not complete its rebalance: no member rejoined", group.group_id)
            self._schedule_join(group, group.rebalance_timeout_ms)
            return
        group.generation += 1
        group.new_member_added = False
        if not group.members:
            group.protocol_name = None
            group.transition_to(EMPTY)
            log.info("group %s generation %d is empty", group.group_id, group.generation)
            self._store_group(group)
            return
        group.protocol_name = group.select_protocol()
        group.transition_to(COMPLETING)
        now = self.clock()
        for member in group.members.values():
            if member.awaiting_join:
                assert member.join_waiter is not None
                member.join_waiter.set_result(self._join_result(group, member.member_id,
                                                                with_members=member.member_id == group.leader))
            member.last_seen = now  # every member's next heartbeat is due a session from now (onCompleteJoin)
        self._arm(group)
        log.info("group %s generation %d: %d members, leader %s, protocol %s", group.group_id, group.generation,
                 len(group.members), group.leader, group.protocol_name)

    @staticmethod
    def _elect_joined_leader(group: Group) -> bool:
        """Keep the leader if it rejoined, else pick any member that did; False when none did."""
        leader = group.members.get(group.leader or "")
        if leader is not None and leader.awaiting_join:
            return True
        joined = next((m.member_id for m in group.members.values() if m.awaiting_join), None)
        if joined is None:
            return False
        group.leader = joined
        return True

    @staticmethod
    def _fail_waiters(member: Member, error: ErrorCode) -> None:
        for waiter in (member.join_waiter, member.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result({"error_code": error, "member_id": ""})

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            if member.awaiting_sync:
                assert member.sync_waiter is not None
                member.sync_waiter.set_result({"error_code": error})
        self._arm(group)  # members no longer waiting in SyncGroup need heartbeats again

    def _store_group(self, group: Group) -> ErrorCode:
        try:
            self._write_group(group)
        except KcliError as exc:
            log.warning("cannot store group %s: %s", group.group_id, exc)
            return ErrorCode.coordinator_not_available
        return ErrorCode.none

    # -- SyncGroup / Heartbeat / LeaveGroup ----------------------------------------------------------
    async def sync(self, req: Any) -> dict[str, Any]:
        group = self.group(req.group_id)
        if group is None:
            return {"error_code": ErrorCode.unknown_member_id}
        if group.state is DEAD:
            return {"error_code": ErrorCode.coordinator_not_available}
        error = self._validate_member(group, req.member_id, getattr(req, "group_instance_id", None))
        if error == ErrorCode.none and req.generation_id != group.generation:
            error = ErrorCode.illegal_generation
        protocol_type, protocol_name = getattr(req, "protocol_type", None), getattr(req, "protocol_name", None)
        if error == ErrorCode.none and ((protocol_type is not None and protocol_type != group.protocol_type) or
                                        (protocol_name is not None and protocol_name != group.protocol_name)):
            error = ErrorCode.inconsistent_group_protocol
        if error != ErrorCode.none:
            return {"error_code": error}
        base = {"protocol_type": group.protocol_type, "protocol_name": group.protocol_name}
        member = group.members[req.member_id]
        self._heard_from(group, member)
        if group.state is EMPTY:
            return {"error_code": ErrorCode.unknown_member_id}
        if group.state is PREPARING:
            return {"error_code": ErrorCode.rebalance_in_progress, **base}
        if group.state is STABLE:
            return {"error_code": ErrorCode.none, "assignment": member.assignment, **base}
        if not member.awaiting_sync:
            member.sync_waiter = asyncio.get_running_loop().create_future()
        waiter = member.sync_waiter
        assert waiter is not None
        if req.member_id == group.leader:
            assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
            for m in group.members.values():  # members the leader left out get an empty assignment
                m.assignment = assignments.get(m.member_id, b"")
            error = self._store_group(group)
            if error != ErrorCode.none:
                self._reset_and_propagate_assignment_error(group, error)
                self._maybe_prepare_rebalance(group)
            else:
                group.transition_to(STABLE)
                now = self.clock()
                for m in group.members.values():
                    if m.awaiting_sync:
                        assert m.sync_waiter is not None
                        m.sync_waiter.set_result({"error_code": ErrorCode.none, "assignment": m.assignment, **base})
                        m.last_seen = now  # propagateAssignment: completeAndScheduleNextHeartbeatExpiration
                self._arm(group)
        return await asyncio.shield(waiter)

    def heartbeat(self, req: Any) -> ErrorCode:
        group = self.group(req.group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is DEAD:
            return ErrorCode.coordinator_not_available
        error = self._validate_member(group, req.member_id, getattr(req, "group_instance_id", None))
        if error != ErrorCode.none:
            return error
        if req.generation_id != group.generation:
            return ErrorCode.illegal_generation
        if group.state is EMPTY:
            return ErrorCode.unknown_member_id
        self._heard_from(group, group.members[req.member_id])
        return ErrorCode.rebalance_in_progress if group.state is PREPARING else ErrorCode.none

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """(member id, group instance id) pairs; a static member may leave by instance id alone (KIP-345)."""
        group = self.group(group_id)
        if group is None:
            return [ErrorCode.unknown_member_id] * len(members)
        if group.state is DEAD:
            return [ErrorCode.coordinator_not_available] * len(members)
        results = []
        for member_id, instance_id in members:
            if not member_id:
                current = group.static_members.get(instance_id) if instance_id is not None else None
                if current is None:
                    results.append(ErrorCode.unknown_member_id)
                    continue
                member_id = current
            elif member_id in group.pending:
                del group.pending[member_id]
                self._try_complete_join(group)
                results.append(ErrorCode.none)
                continue
            else:
                error = self._validate_member(group, member_id, instance_id)
                if error != ErrorCode.none:
                    results.append(error)
                    continue
            log.info("group %s: member %s leaves", group_id, member_id)
            self._remove_member(group, member_id)
            results.append(ErrorCode.none)
        return results

    def _remove_member(self, group: Group, member_id: str) -> None:
        """Kafka's removeMemberAndUpdateGroup: a Stable or CompletingRebalance group rebalances; a
        PreparingRebalance one may now complete."""
        self._fail_waiters(group.members[member_id], ErrorCode.unknown_member_id)
        group.remove(member_id)
        if group.state in (STABLE, COMPLETING):
            self._maybe_prepare_rebalance(group)
        elif group.state is PREPARING:
            self._try_complete_join(group)

    # -- session expiry (Kafka's heartbeat purgatory) ------------------------------------------------------
    def group(self, group_id: str) -> Group | None:
        """The group, after removing the members whose session ended by now: what every request sees."""
        group = self.groups.get(group_id)
        if group is not None:
            self._expire_due(group, self.clock())
        return group

    def expire_sessions(self, now: float) -> None:
        """Expire every group's members whose session ended by ``now`` (the coordinator's clock)."""
        for group in list(self.groups.values()):
            self._expire_due(group, now)

    def _heard_from(self, group: Group, member: Member) -> None:
        """A heartbeat (or any request of the member's): its session starts again (completeAndScheduleNext
        HeartbeatExpiration)."""
        member.last_seen = self.clock()
        self._arm(group)

    @staticmethod
    def _deadlines(group: Group) -> list[tuple[float, str, bool]]:
        """(deadline, member id, pending) of every member that owes a heartbeat: a member waiting in JoinGroup or
        SyncGroup does not (MemberMetadata.hasSatisfiedHeartbeat); a pending member id must join in time."""
        out = [(expiry, member_id, True) for member_id, expiry in group.pending.items()]
        out += [(m.last_seen + m.session_timeout_ms / 1000, member_id, False) for member_id, m in group.members.items()
                if not (m.awaiting_join or m.awaiting_sync)]
        return out

    def _expire_due(self, group: Group, now: float) -> None:
        """Kafka's onExpireHeartbeat for every deadline reached (at the deadline itself, not after it): pending
        members are forgotten, members removed, static ones too, as they send no LeaveGroup when they close."""
        expired = False
        for deadline, member_id, pending in sorted(self._deadlines(group)):
            if deadline > now:
                break
            if pending:  # each deadline is read again: an earlier removal may have completed a join
                if group.pending.get(member_id, now + 1) <= now:
                    del group.pending[member_id]
                    expired = True
                    log.info("group %s: pending member %s removed after its session timeout", group.group_id,
                             member_id)
                    self._try_complete_join(group)
                continue
            m = group.members.get(member_id)
            if m is None or m.awaiting_join or m.awaiting_sync or m.last_seen + m.session_timeout_ms / 1000 > now:
                continue
            log.info("group %s: member %s (instance %s) session expired", group.group_id, member_id,
                     m.group_instance_id)
            expired = True
            self._remove_member(group, member_id)
        if expired or group.expiry_timer is None:
            self._arm(group)

    def _arm(self, group: Group) -> None:
        """One timer per group at its next session deadline."""
        self._disarm(group)
        deadlines = self._deadlines(group)
        if not deadlines or group.state is DEAD:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not serving (tests driving the coordinator directly): requests expire lazily
        delay = max(0.0, min(deadlines)[0] - self.clock())
        group.expiry_timer = loop.call_later(delay, self._on_deadline, group)

    @staticmethod
    def _disarm(group: Group) -> None:
        if group.expiry_timer is not None:
            group.expiry_timer.cancel()
            group.expiry_timer = None

    def _on_deadline(self, group: Group) -> None:
        group.expiry_timer = None
        if self.groups.get(group.group_id) is group:
            self._expire_due(group, self.clock())  # re-arms for the next deadline (or this one, if early)

    # -- offsets -------------------------------------------------------------------------------------
    async def commit(self, group_id: str, generation: int, member_id: str,
               offsets: list[tuple[str, int, int, int, str | None]], *,
               group_instance_id: str | None = None) -> ErrorCode:
        """offsets: (topic, partition, offset, leader_epoch, metadata). Generation -1 is a standalone
        commit (admin tools, assign() consumers), allowed while the group is Empty (Kafka's
        validateOffsetCommit); a static member's commit must carry its current member id."""
        group = self.group(group_id)
        if group is None:
            if generation >= 0:  # a member of a generation this coordinator does not know
                return ErrorCode.illegal_generation
            group = self.groups[group_id] = Group(group_id)
        if group.state is DEAD:
            return ErrorCode.coordinator_not_available
        if not (generation < 0 and group.state is EMPTY):
            if generation >= 0 or member_id or group_instance_id is not None:
                error = self._validate_member(group, member_id, group_instance_id)
                if error != ErrorCode.none:
                    return error
                if generation != group.generation:
                    return ErrorCode.illegal_generation
            elif group.state is not EMPTY:
                return ErrorCode.unknown_member_id  # only members commit for a group that has them
            if group.state is COMPLETING:
                return ErrorCode.rebalance_in_progress
            if member_id in group.members:
                self._heard_from(group, group.members[member_id])
        now = int(time.time() * 1000)
        pairs = [encode_offset_commit(group_id, topic, partition, offset, leader_epoch=leader_epoch,
                                      metadata=metadata or "", commit_timestamp=now)
                 for topic, partition, offset, leader_epoch, metadata in offsets]
        base_offset = -1
        if pairs:
            try:
                error, base_offset = await self._write_and_wait(group_id, pairs)
            except KcliError as exc:
                log.warning("cannot store offsets of group %s: %s", group_id, exc)
                return ErrorCode.coordinator_not_available
            if error != ErrorCode.none:
                return error
        # the cache moves only once the commit is stored (Kafka's pendingOffsetCommits)
        committed = self.offsets.setdefault(group_id, {})
        for topic, partition, offset, leader_epoch, metadata in offsets:
            committed[(topic, partition)] = CommittedOffset(offset, leader_epoch, metadata or "", now, base_offset)
        return ErrorCode.none

    async def commit_transactional(self, group_id: str, producer_id: int, producer_epoch: int,
                                   offsets: list[tuple[str, int, int, int, str | None]], *, member_id: str = "",
                                   group_instance_id: str | None = None, generation: int = -1) -> ErrorCode:
        """TxnOffsetCommit (KIP-98; member checks of KIP-447): the offsets are written as a transactional batch
        of the producer and stay pending until its transaction's marker reaches this partition
        (``on_transaction_completed``). Kafka's doTxnCommitOffsets."""
        group = self.group(group_id)
        if group is None:
            group = self.groups[group_id] = Group(group_id)
        if group.state is DEAD:
            return ErrorCode.coordinator_not_available
        if group_instance_id is not None and group.static_members.get(group_instance_id, member_id) != member_id:
            return ErrorCode.fenced_instance_id
        if member_id and member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation >= 0 and generation != group.generation:
            return ErrorCode.illegal_generation
        now = int(time.time() * 1000)
        pairs = [encode_offset_commit(group_id, topic, partition, offset, leader_epoch=leader_epoch,
                                      metadata=metadata or "", commit_timestamp=now)
                 for topic, partition, offset, leader_epoch, metadata in offsets]
        if not pairs:
            return ErrorCode.none
        try:
            error, base_offset = await self._write_and_wait(group_id, pairs, producer_id=producer_id,
                                                            producer_epoch=producer_epoch)
        except KcliError as exc:
            log.warning("cannot store the transactional offsets of group %s: %s", group_id, exc)
            return ErrorCode.coordinator_not_available
        if error != ErrorCode.none:
            return error
        pending = self.pending_txn_offsets.setdefault(group_id, {}).setdefault(producer_id, {})
        for topic, partition, offset, leader_epoch, metadata in offsets:
            pending[(topic, partition)] = CommittedOffset(offset, leader_epoch, metadata or "", now, base_offset)
        return ErrorCode.none

    def on_transaction_completed(self, producer_id: int, offsets_partitions: set[int], commit: bool) -> None:
        """A COMMIT or ABORT marker of ``producer_id`` reached these __consumer_offsets partitions: its pending
        offsets of the groups there become committed (when newer than what the group has) or are dropped
        (Kafka's GroupMetadataManager.handleTxnCompletion)."""
        count = self.admin.metadata.partition_count(OFFSETS_TOPIC)
        if not count:
            return
        for group_id, by_producer in list(self.pending_txn_offsets.items()):
            if partition_for_group(group_id, count) not in offsets_partitions:
                continue
            settled = by_producer.pop(producer_id, None)
            if not by_producer:
                del self.pending_txn_offsets[group_id]
            if settled is None or not commit:
                continue
            committed = self.offsets.setdefault(group_id, {})
            for tp, value in settled.items():
                current = committed.get(tp)
                if current is None or current.batch_offset < value.batch_offset:
                    committed[tp] = value

    def has_pending_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """A transaction's offsets for the partition await their marker: OffsetFetch with require_stable
        answers UNSTABLE_OFFSET_COMMIT (KIP-447)."""
        return any((topic, partition) in by for by in self.pending_txn_offsets.get(group_id, {}).values())

    def fetch_offsets(self, group_id: str, topics: list[tuple[str, list[int]]] | None) -> dict[str, dict[int, CommittedOffset | None]]:
        committed = self.offsets.get(group_id, {})
        if topics is None:
            out: dict[str, dict[int, CommittedOffset | None]] = {}
            for (topic, partition), value in sorted(committed.items()):
                out.setdefault(topic, {})[partition] = value
            return out
        return {topic: {p: committed.get((topic, p)) for p in partitions} for topic, partitions in topics}

    def delete_offsets(self, group_id: str, wanted: list[tuple[str, int]]) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete (KIP-496): refused per partition for topics the group's consumers subscribe to."""
        group = self.group(group_id)
        committed = self.offsets.get(group_id)
        if group is None and committed is None:
            return ErrorCode.group_id_not_found, {}
        subscribed: set[str] = set()
        if group is not None and group.members:
            if group.protocol_type != "consumer":
                return ErrorCode.non_empty_group, {}
            for m in group.members.values():
                subscribed.update(_subscribed_topics(m.metadata_for(group.protocol_name)))
        errors: dict[tuple[str, int], ErrorCode] = {}
        tombstones = []
        for topic, partition in wanted:
            if topic in subscribed:
                errors[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                continue
            if committed is not None and committed.pop((topic, partition), None) is not None:
                tombstones.append(encode_offset_commit_tombstone(group_id, topic, partition))
        if tombstones:
            self._write(group_id, tombstones)
        return ErrorCode.none, errors

    def delete(self, group_id: str) -> ErrorCode:
        group = self.group(group_id)
        if group is None and group_id not in self.offsets:
            return ErrorCode.group_id_not_found
        if group is not None and (group.state is not EMPTY or group.members):
            return ErrorCode.non_empty_group
        if group is not None:
            group.transition_to(DEAD)
            self._cancel_join_timer(group)
            self._disarm(group)
        tombstones = [encode_offset_commit_tombstone(group_id, t, p) for (t, p) in self.offsets.pop(group_id, {})]
        tombstones.append(encode_group_metadata_tombstone(group_id))
        self.groups.pop(group_id, None)
        self._write(group_id, tombstones)
        return ErrorCode.none


def _subscribed_topics(subscription: bytes) -> list[str]:
    """Topics of a ConsumerProtocolSubscription: an int16 version, then that version's struct (kio reads
    it; a version newer than kio's reads as its newest, whose fields come first, as Kafka reads them)."""
    if len(subscription) < 2:
        return []
    version = min(max(int.from_bytes(subscription[:2], "big", signed=True), 0), _SUBSCRIPTION_VERSIONS - 1)
    schema = importlib.import_module(f"kio.schema.consumer_protocol_subscription.v{version}.data")
    try:
        return list(entity_reader(schema.ConsumerProtocolSubscription)(bytes(subscription), 2)[0].topics)
    except Exception:  # a malformed subscription from a client: it subscribes to nothing we can name
        return []


# Kafka's GroupMetadataManager.storeOffsets: an append error as the committing client sees it
_STORE_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.record_list_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.invalid_fetch_size: ErrorCode.invalid_commit_offset_size,
}

_SUBSCRIPTION_VERSIONS = 4  # kio knows ConsumerProtocolSubscription v0-v3
