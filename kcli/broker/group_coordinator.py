"""The classic group coordinator (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) and committed offsets.

Kafka's GroupCoordinator on one broker: groups move Empty -> PreparingRebalance -> CompletingRebalance
-> Stable; a rebalance completes when every known member has rejoined (or its rebalance timeout passed).
Offsets and group metadata are written to ``__consumer_offsets`` in Kafka's record format
(OffsetCommitKey/Value, GroupMetadataKey/Value; partition = abs(groupId.hashCode) % partitions), kept in
memory, and reloaded from that topic at startup.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

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
from kcli.storage.offsets_topic import iter_offsets_topic
from kcli.storage.producer_state import AppendOrigin

if TYPE_CHECKING:
    from kcli.broker.config import BrokerConfig
    from kcli.broker.log_manager import LogManager
    from kcli.broker.replica_manager import ReplicaManager
    from kcli.broker.topic_admin import TopicAdmin

log = logging.getLogger("kcli.broker.groups")

OFFSETS_TOPIC = "__consumer_offsets"
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"


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
    last_seen: float = field(default_factory=time.monotonic)
    join_waiter: asyncio.Future | None = None
    sync_waiter: asyncio.Future | None = None

    def metadata_for(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")


@dataclass
class Group:
    group_id: str
    state: str = EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    pending: set[str] = field(default_factory=set)  # member ids handed out by MEMBER_ID_REQUIRED (KIP-394)
    rebalance: asyncio.Task | None = None


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, replica_manager: ReplicaManager,
                 admin: TopicAdmin) -> None:
        self.config = config
        self.log_manager = log_manager
        self.replicas = replica_manager
        self.admin = admin
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        self.loading = True  # until load() has replayed __consumer_offsets: COORDINATOR_LOAD_IN_PROGRESS
        self._expiry: asyncio.Task | None = None

    # -- startup: reload from __consumer_offsets ---------------------------------------------------
    def load(self) -> None:
        topic = self.log_manager.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return
        loaded = 0

        def undecodable(offset: int, exc: KcliError) -> None:
            log.warning("skipping undecodable %s record at offset %d: %s", OFFSETS_TOPIC, offset, exc)

        for partition in topic.partitions:
            for _offset, key, value in iter_offsets_topic(partition.directory, undecodable):
                self._apply(key, value)
                loaded += 1
        log.info("loaded %d records of %s: %d groups", loaded, OFFSETS_TOPIC, len(self.groups))

    def _apply(self, key: Any, value: Any) -> None:
        if isinstance(key, OffsetCommitKey):
            committed = self.offsets.setdefault(key.group, {})
            if value is None:
                committed.pop((key.topic, key.partition), None)
            else:
                assert isinstance(value, OffsetCommitValue)
                committed[(key.topic, key.partition)] = CommittedOffset(value.offset, value.leader_epoch,
                                                                        value.metadata, value.commit_timestamp)
        elif isinstance(key, GroupMetadataKey):
            if value is None:
                self.groups.pop(key.group, None)
                return
            assert isinstance(value, GroupMetadataValue)
            # Members must rejoin after a restart; what survives is the generation and protocol.
            self.groups[key.group] = Group(key.group, EMPTY, value.generation, value.protocol_type or None,
                                           value.protocol, None)

    def start(self) -> None:
        self._expiry = asyncio.get_running_loop().create_task(self._expire_sessions())

    def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()

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

    def _offsets_partitions(self) -> int:
        count = self.admin.metadata.partition_count(OFFSETS_TOPIC)
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
        group = self.groups.setdefault(req.group_id, Group(req.group_id))
        protocols = [(p.name, bytes(p.metadata)) for p in req.protocols]
        if group.protocol_type is not None and group.members and req.protocol_type != group.protocol_type:
            return {"error_code": ErrorCode.inconsistent_group_protocol}
        member_id = req.member_id
        if not member_id:
            member_id = f"{client_id or 'member'}-{uuid.uuid4()}"
            if version >= 4:
                group.pending.add(member_id)
                return {"error_code": ErrorCode.member_id_required, "member_id": member_id}
        elif member_id not in group.members and member_id not in group.pending:
            return {"error_code": ErrorCode.unknown_member_id, "member_id": member_id}
        group.pending.discard(member_id)
        rebalance_ms = getattr(req, "rebalance_timeout", None)
        rebalance_ms = int(rebalance_ms.total_seconds() * 1000) if rebalance_ms is not None else \
            int(req.session_timeout.total_seconds() * 1000)
        member = group.members.get(member_id)
        if member is None:
            member = Member(member_id, getattr(req, "group_instance_id", None), client_id or "", client_host,
                            int(req.session_timeout.total_seconds() * 1000), rebalance_ms, req.protocol_type, protocols)
            group.members[member_id] = member
        else:
            member.protocols, member.last_seen = protocols, time.monotonic()
        group.protocol_type = req.protocol_type
        loop = asyncio.get_running_loop()
        member.join_waiter = loop.create_future()
        self._prepare_rebalance(group)
        return await member.join_waiter

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state == PREPARING:
            self._maybe_complete(group)
            return
        initial = group.state == EMPTY
        group.state = PREPARING
        for m in group.members.values():
            if m.sync_waiter is not None and not m.sync_waiter.done():
                m.sync_waiter.set_result({"error_code": ErrorCode.rebalance_in_progress})
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0) / 1000
        delay = self.config["group.initial.rebalance.delay.ms"] / 1000 if initial else 0.0
        group.rebalance = asyncio.get_running_loop().create_task(self._run_rebalance(group, delay, timeout))

    async def _run_rebalance(self, group: Group, delay: float, timeout: float) -> None:
        # Kafka delays a group's first rebalance so consumers starting together join one generation.
        if delay:
            await asyncio.sleep(min(delay, timeout))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._all_joined(group):
            await asyncio.sleep(0.05)
        self._complete_join(group)

    def _maybe_complete(self, group: Group) -> None:
        if group.rebalance is not None and group.rebalance.done() and self._all_joined(group):
            self._complete_join(group)

    @staticmethod
    def _all_joined(group: Group) -> bool:
        return all(m.join_waiter is not None and not m.join_waiter.done() for m in group.members.values())

    def _complete_join(self, group: Group) -> None:
        if group.state != PREPARING:
            return
        for member_id in [mid for mid, m in group.members.items() if m.join_waiter is None or m.join_waiter.done()]:
            del group.members[member_id]  # did not rejoin in time
        group.generation += 1
        if not group.members:
            group.state, group.leader, group.protocol_name = EMPTY, None, None
            self._write_group(group)
            return
        if group.leader not in group.members:
            group.leader = next(iter(group.members))
        common = set.intersection(*(set(n for n, _ in m.protocols) for m in group.members.values()))
        leader = group.members[group.leader]
        group.protocol_name = next((n for n, _ in leader.protocols if n in common), None)
        group.state = COMPLETING
        for member in group.members.values():
            response = {
                "error_code": ErrorCode.none, "generation_id": group.generation, "protocol_type": group.protocol_type,
                "protocol_name": group.protocol_name, "leader": group.leader, "member_id": member.member_id,
                "members": [(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                            for m in group.members.values()] if member.member_id == group.leader else [],
            }
            member.last_seen = time.monotonic()
            assert member.join_waiter is not None
            member.join_waiter.set_result(response)
        log.info("group %s generation %d: %d members, leader %s", group.group_id, group.generation,
                 len(group.members), group.leader)

    # -- SyncGroup / Heartbeat / LeaveGroup ----------------------------------------------------------
    def _check_member(self, group_id: str, member_id: str, generation: int) -> tuple[Group | None, ErrorCode]:
        group = self.groups.get(group_id)
        if group is None or member_id not in group.members:
            return group, ErrorCode.unknown_member_id
        if generation != group.generation:
            return group, ErrorCode.illegal_generation
        return group, ErrorCode.none

    async def sync(self, req: Any) -> dict[str, Any]:
        group, error = self._check_member(req.group_id, req.member_id, req.generation_id)
        if error != ErrorCode.none:
            return {"error_code": error}
        assert group is not None
        member = group.members[req.member_id]
        member.last_seen = time.monotonic()
        base = {"protocol_type": group.protocol_type, "protocol_name": group.protocol_name}
        if group.state == PREPARING:
            return {"error_code": ErrorCode.rebalance_in_progress, **base}
        if group.state == STABLE:
            return {"error_code": ErrorCode.none, "assignment": member.assignment, **base}
        if req.member_id == group.leader:
            assignments = {a.member_id: bytes(a.assignment) for a in req.assignments}
            for m in group.members.values():
                m.assignment = assignments.get(m.member_id, b"")
            group.state = STABLE
            self._write_group(group)
            for m in group.members.values():
                if m.sync_waiter is not None and not m.sync_waiter.done():
                    m.sync_waiter.set_result({"error_code": ErrorCode.none, "assignment": m.assignment, **base})
            return {"error_code": ErrorCode.none, "assignment": member.assignment, **base}
        member.sync_waiter = asyncio.get_running_loop().create_future()
        return await member.sync_waiter

    def heartbeat(self, req: Any) -> ErrorCode:
        group, error = self._check_member(req.group_id, req.member_id, req.generation_id)
        if error != ErrorCode.none:
            return error
        assert group is not None
        group.members[req.member_id].last_seen = time.monotonic()
        return ErrorCode.rebalance_in_progress if group.state == PREPARING else ErrorCode.none

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """(member id, group instance id) pairs; a static member may leave by instance id alone (KIP-345)."""
        group = self.groups.get(group_id)
        results = []
        for member_id, instance_id in members:
            if group is not None and instance_id is not None and not member_id:
                member_id = next((m.member_id for m in group.members.values()
                                  if m.group_instance_id == instance_id), "")
            if group is None or member_id not in group.members:
                results.append(ErrorCode.unknown_member_id)
                continue
            self._remove(group, member_id)
            results.append(ErrorCode.none)
        return results

    def _remove(self, group: Group, member_id: str) -> None:
        member = group.members.pop(member_id)
        for waiter in (member.join_waiter, member.sync_waiter):
            if waiter is not None and not waiter.done():
                waiter.set_result({"error_code": ErrorCode.unknown_member_id})
        if group.members:
            self._prepare_rebalance(group)
        elif group.state != PREPARING:
            group.state, group.leader = EMPTY, None
            group.generation += 1
            self._write_group(group)
        else:
            self._maybe_complete(group)

    async def _expire_sessions(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for group in list(self.groups.values()):
                for member_id, m in list(group.members.items()):
                    waiting = m.join_waiter is not None and not m.join_waiter.done()
                    if not waiting and (now - m.last_seen) * 1000 > m.session_timeout_ms:
                        log.info("group %s: member %s session expired", group.group_id, member_id)
                        self._remove(group, member_id)

    # -- offsets -------------------------------------------------------------------------------------
    def commit(self, group_id: str, generation: int, member_id: str,
               offsets: list[tuple[str, int, int, int, str | None]], *,
               group_instance_id: str | None = None) -> ErrorCode:
        """offsets: (topic, partition, offset, leader_epoch, metadata). Generation -1 is a standalone
        commit (admin tools, assign() consumers), allowed while the group has no members."""
        group = self.groups.get(group_id)
        if generation >= 0:
            group, error = self._check_member(group_id, member_id, generation)
            if error != ErrorCode.none:
                return error
            if group is not None and group.state == COMPLETING:
                return ErrorCode.rebalance_in_progress
        elif group is not None and group.members:
            return ErrorCode.unknown_member_id
        if group is None:
            self.groups[group_id] = Group(group_id)
        now = int(time.time() * 1000)
        committed = self.offsets.setdefault(group_id, {})
        pairs = []
        for topic, partition, offset, leader_epoch, metadata in offsets:
            committed[(topic, partition)] = CommittedOffset(offset, leader_epoch, metadata or "", now)
            pairs.append(encode_offset_commit(group_id, topic, partition, offset, leader_epoch=leader_epoch,
                                              metadata=metadata or "", commit_timestamp=now))
        if pairs:
            self._write(group_id, pairs)
        return ErrorCode.none

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
        group = self.groups.get(group_id)
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
        group = self.groups.get(group_id)
        if group is None and group_id not in self.offsets:
            return ErrorCode.group_id_not_found
        if group is not None and group.members:
            return ErrorCode.non_empty_group
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


_SUBSCRIPTION_VERSIONS = 4  # kio knows ConsumerProtocolSubscription v0-v3
