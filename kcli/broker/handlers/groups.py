"""The classic group protocol and committed offsets: FindCoordinator (10), JoinGroup (11), Heartbeat (12),
LeaveGroup (13), SyncGroup (14), DescribeGroups (15), ListGroups (16), OffsetCommit (8), OffsetFetch (9),
DeleteGroups (42), OffsetDelete (47)."""

from __future__ import annotations

import asyncio
from typing import Any

import logging

from kio.schema.errors import ErrorCode

from kcli.broker.group_coordinator import OFFSETS_TOPIC
from kcli.broker.transaction_coordinator import TRANSACTION_STATE_TOPIC
from kcli.protocol.acl import AclOperation, ResourceType
from kcli.records.consumer_offsets import partition_for_group
from kcli.broker.errors import error_code_for, topic_exists
from kcli.broker.handlers import authz
from kcli.broker.handlers.common import (
    NOT_REQUESTED,
    ZERO,
    RequestContext,
    build,
    has_class,
    response_module,
)

LOADING = ErrorCode.coordinator_load_in_progress
GROUP_DENIED = ErrorCode.group_authorization_failed
TOPIC_DENIED = ErrorCode.topic_authorization_failed
READ, DESCRIBE, DELETE = AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE
GROUP, TOPIC, TRANSACTIONAL_ID = ResourceType.GROUP, ResourceType.TOPIC, ResourceType.TRANSACTIONAL_ID
log = logging.getLogger("kcli.broker")


def _member_error(ctx: RequestContext, group_id: str) -> ErrorCode | None:
    """JoinGroup, SyncGroup, Heartbeat, LeaveGroup: READ on the group first (GROUP_AUTHORIZATION_FAILED), then
    the coordinator's availability."""
    if not ctx.authorize(READ, GROUP, group_id):
        return GROUP_DENIED
    return _unavailable(ctx, group_id)


def _unavailable(ctx: RequestContext, group_id: str) -> ErrorCode | None:
    """COORDINATOR_LOAD_IN_PROGRESS while the group's __consumer_offsets partition is replayed, NOT_COORDINATOR
    when another broker coordinates it (clients look it up again), else None."""
    return ctx.services.groups.coordinator_error(group_id)


def _coordinator(ctx: RequestContext, key: str) -> tuple[ErrorCode, int, str, int]:
    """(error, node id, host, port) of the group's coordinator: standalone this broker; in a cluster the
    leader of the group's __consumer_offsets partition, created on the first lookup as Kafka does (with
    offsets.topic.replication.factor; COORDINATOR_NOT_AVAILABLE until it has a leader)."""
    services = ctx.services
    listener = ctx.session.listener_name
    if not services.clustered:
        return _local_coordinator(ctx)
    count = services.metadata.partition_count(OFFSETS_TOPIC)
    if not count:
        try:
            services.admin.create_topic(OFFSETS_TOPIC, services.config["offsets.topic.num.partitions"],
                                        services.config["offsets.topic.replication.factor"],
                                        configs={"cleanup.policy": "compact"})
        except Exception as exc:  # already being created by another broker, or too few brokers yet
            if not topic_exists(exc):  # Kafka lets an existing one go: its leaders are coming
                log.warning("cannot create %s yet: %s (offsets.topic.replication.factor is %d)", OFFSETS_TOPIC,
                            getattr(exc, "reason", exc), services.config["offsets.topic.replication.factor"])
        return ErrorCode.coordinator_not_available, -1, "", -1
    state = services.metadata.partition_state(OFFSETS_TOPIC, partition_for_group(key, count))
    endpoint = services.client_endpoint(state.leader, listener) if state is not None and state.leader >= 0 else None
    if endpoint is None:
        return ErrorCode.coordinator_not_available, -1, "", -1
    return ErrorCode.none, state.leader, endpoint[0], endpoint[1]


def _local_coordinator(ctx: RequestContext) -> tuple[ErrorCode, int, str, int]:
    """Standalone: this broker, at the endpoint of the listener the request came in on."""
    services = ctx.services
    endpoint = services.client_endpoint(services.broker_id, ctx.session.listener_name)
    host, port = endpoint if endpoint is not None else services.advertised
    return ErrorCode.none, services.broker_id, host, port


def _transaction_coordinator(ctx: RequestContext, key: str) -> tuple[ErrorCode, int, str, int]:
    """(error, node id, host, port) of a transactional id's coordinator: ``__transaction_state`` is created on
    first use (COORDINATOR_NOT_AVAILABLE until it has leaders in a cluster)."""
    services = ctx.services
    coordinator = services.transactions
    if coordinator is None or coordinator.ensure_topic() is not None:
        return ErrorCode.coordinator_not_available, -1, "", -1
    if not services.clustered:
        return _local_coordinator(ctx)
    state = services.metadata.partition_state(TRANSACTION_STATE_TOPIC, coordinator.partition_for(key))
    endpoint = (services.client_endpoint(state.leader, ctx.session.listener_name)
                if state is not None and state.leader >= 0 else None)
    if endpoint is None:
        return ErrorCode.coordinator_not_available, -1, "", -1
    return ErrorCode.none, state.leader, endpoint[0], endpoint[1]


async def find_coordinator(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    key_type = getattr(req, "key_type", 0)
    keys = getattr(req, "coordinator_keys", None) or (getattr(req, "key", ""),)
    found = []
    for key in keys:
        if key_type == 0 and not ctx.authorize(DESCRIBE, GROUP, key):
            found.append((key, GROUP_DENIED, -1, "", -1))
        elif key_type == 1 and not ctx.authorize(DESCRIBE, TRANSACTIONAL_ID, key):
            found.append((key, ErrorCode.transactional_id_authorization_failed, -1, "", -1))
        elif key_type not in (0, 1):
            found.append((key, ErrorCode.invalid_request, -1, "", -1))
        elif key_type == 1:  # KIP-98: the leader of the id's __transaction_state partition
            found.append((key, *_transaction_coordinator(ctx, key)))
        else:
            found.append((key, *_coordinator(ctx, key)))
    coordinators = tuple(build(R, "Coordinator", key=k, node_id=node, host=host, port=port, error_code=error,
                               error_message=None) for k, error, node, host, port in found
                         ) if has_class(R, "Coordinator") else ()  # v4+ (KIP-699) batches keys
    _, error, node, host, port = found[0]
    return build(R, "FindCoordinatorResponse", throttle_time=ZERO, error_code=error, error_message=None,
                 node_id=node, host=host, port=port, coordinators=coordinators)


async def join_group(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    if (unavailable := _member_error(ctx, req.group_id)) is not None:
        result: dict[str, Any] = {"error_code": unavailable}
    else:
        result = await ctx.services.groups.join(req, ctx.api_version, ctx.client_id, ctx.client_host)
    members = tuple(build(R, "JoinGroupResponseMember", member_id=mid, group_instance_id=instance, metadata=meta)
                    for mid, instance, meta in result.get("members", ()))
    return build(R, "JoinGroupResponse", throttle_time=ZERO, error_code=result["error_code"],
                 generation_id=result.get("generation_id", -1), protocol_type=result.get("protocol_type"),
                 protocol_name=result.get("protocol_name") or ("" if ctx.api_version < 7 else None),
                 leader=result.get("leader") or "",
                 skip_assignment=result.get("skip_assignment", False), member_id=result.get("member_id", ""),
                 members=members)


async def sync_group(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    unavailable = _member_error(ctx, req.group_id)
    result = {"error_code": unavailable} if unavailable is not None else await ctx.services.groups.sync(req)
    return build(R, "SyncGroupResponse", throttle_time=ZERO, error_code=result["error_code"],
                 protocol_type=result.get("protocol_type"), protocol_name=result.get("protocol_name"),
                 assignment=result.get("assignment", b""))


async def heartbeat(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    error = _member_error(ctx, req.group_id) or ctx.services.groups.heartbeat(req)
    return build(R, "HeartbeatResponse", throttle_time=ZERO, error_code=error)


async def leave_group(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    identities = list(getattr(req, "members", None) or ())  # v3+ (KIP-345): a batch of members
    unavailable = _member_error(ctx, req.group_id)
    if unavailable == GROUP_DENIED and has_class(R, "MemberResponse"):
        # Kafka's LeaveGroupRequest.getErrorResponse: the top-level error, no members
        return build(R, "LeaveGroupResponse", throttle_time=ZERO, error_code=GROUP_DENIED, members=())
    if unavailable is not None:
        errors = [unavailable] * max(1, len(identities))
    elif identities:
        errors = ctx.services.groups.leave(req.group_id, [(m.member_id, m.group_instance_id) for m in identities])
    else:
        errors = ctx.services.groups.leave(req.group_id, [(req.member_id, None)])
    if not has_class(R, "MemberResponse"):  # v0-v2: one member, one top-level error
        return build(R, "LeaveGroupResponse", throttle_time=ZERO, error_code=errors[0])
    members = tuple(build(R, "MemberResponse", member_id=m.member_id, group_instance_id=m.group_instance_id,
                          error_code=err) for m, err in zip(identities, errors))
    top = unavailable if unavailable is not None else ErrorCode.none
    return build(R, "LeaveGroupResponse", throttle_time=ZERO, error_code=top, members=members)


async def offset_commit(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    generation = getattr(req, "generation_id_or_member_epoch", getattr(req, "generation_id", -1))
    member_id = getattr(req, "member_id", "")  # v0 has no group membership: a standalone commit
    offsets = [(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata) for t in req.topics for p in t.partitions]
    # Authorization before existence: READ on the group (the whole request), then READ on each topic.
    group_allowed = ctx.authorize(READ, GROUP, req.group_id)
    readable = authz.authorized_names(ctx, READ, TOPIC, (t.name for t in req.topics)) if group_allowed else set()
    denied = {(t, p) for t, p, *_ in offsets if t not in readable}
    # Kafka checks the metadata cache: in a cluster the coordinator need not host the partitions committed.
    unknown = {(t, p) for t, p, *_ in offsets
               if (t, p) not in denied and ctx.services.metadata.partition_state(t, p) is None}
    known = [o for o in offsets if (o[0], o[1]) not in unknown and (o[0], o[1]) not in denied]
    if not group_allowed:
        error = GROUP_DENIED
    elif not known:
        error = ErrorCode.none  # nothing to commit: the per-partition errors are the answer
    elif ctx.api_version == 0 and ctx.services.zk is not None:
        # Kafka's commitOffsetsToZookeeper: v0 commits of a ZooKeeper-mode broker go to /consumers/<group>/offsets
        # (the offset only; the metadata is not kept), where old consumers and tools read them.
        error = ErrorCode.none
        if known:
            _, error = await _in_zookeeper(ctx.services.zk.set_consumer_offsets, req.group_id,
                                           {(t, p): offset for t, p, offset, *_ in known})
    elif (unavailable := _unavailable(ctx, req.group_id)) is not None:
        error = unavailable
    else:
        # v1's per-partition commit_timestamp is not kept: the commit time is the broker's (Kafka uses it only
        # for the expiry of the stored offset).
        error = await ctx.services.groups.commit(req.group_id, generation, member_id, known,
                                           group_instance_id=getattr(req, "group_instance_id", None))
    topics = tuple(build(R, "OffsetCommitResponseTopic", name=t.name, partitions=tuple(
        build(R, "OffsetCommitResponsePartition", partition_index=p.partition_index,
              error_code=GROUP_DENIED if not group_allowed else
              TOPIC_DENIED if (t.name, p.partition_index) in denied else
              ErrorCode.unknown_topic_or_partition if (t.name, p.partition_index) in unknown else error)
        for p in t.partitions)) for t in req.topics)
    return build(R, "OffsetCommitResponse", throttle_time=ZERO, topics=topics)


async def offset_fetch(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    groups = ctx.services.groups
    if ctx.api_version == 0 and ctx.services.zk is not None:
        return await _offset_fetch_from_zookeeper(ctx, R, req)

    require_stable = bool(getattr(req, "require_stable", False))

    def partitions_of(cls: str, committed: dict[int, Any], error: ErrorCode, group_id: str = "",
                      topic: str = "") -> tuple[Any, ...]:
        def unstable(p: int) -> bool:  # KIP-447: a transaction's offsets for it await their marker
            return require_stable and error == ErrorCode.none and groups.has_pending_offsets(group_id, topic, p)

        return tuple(build(R, cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                           error_code=ErrorCode.unstable_offset_commit) if unstable(p) else
                     build(R, cls, partition_index=p, committed_offset=c.offset if c else -1,
                           committed_leader_epoch=c.leader_epoch if c else -1, metadata=c.metadata if c else "",
                           error_code=error) for p, c in sorted(committed.items()))

    def lookup(group_id: str, topics: Any) -> tuple[dict[str, dict[int, Any]], ErrorCode, dict[str, list[int]]]:
        """(offsets by topic, the group's error, the named topics denied DESCRIBE). Authorization before
        existence: DESCRIBE on the group, then on each topic; an all-partitions request leaves out the topics
        the caller may not describe."""
        wanted = None if topics is None else [(t.name, list(t.partition_indexes)) for t in topics]
        if not ctx.authorize(DESCRIBE, GROUP, group_id):
            # the partitions carry it before v2 (below); later versions answer the group's error alone
            return ({t: {p: None for p in parts} for t, parts in wanted}
                    if wanted and ctx.api_version < 2 else {}), GROUP_DENIED, {}
        if (unavailable := _unavailable(ctx, group_id)) is not None:
            return ({t: {p: None for p in parts} for t, parts in wanted} if wanted else {}), unavailable, {}
        if wanted is None:
            found = groups.fetch_offsets(group_id, None)
            described = authz.authorized_names(ctx, DESCRIBE, TOPIC, found)
            return {t: parts for t, parts in found.items() if t in described}, ErrorCode.none, {}
        described = authz.authorized_names(ctx, DESCRIBE, TOPIC, (t for t, _ in wanted))
        allowed = [(t, parts) for t, parts in wanted if t in described]
        found = groups.fetch_offsets(group_id, allowed) if allowed else {}
        return found, ErrorCode.none, {t: parts for t, parts in wanted if t not in described}

    def denied_partitions(cls: str, parts: list[int]) -> tuple[Any, ...]:
        return tuple(build(R, cls, partition_index=p, committed_offset=-1, committed_leader_epoch=-1, metadata="",
                           error_code=TOPIC_DENIED) for p in parts)

    if hasattr(req, "groups"):  # v8+: several groups per request
        out = []
        for g in req.groups:
            found, error, denied = lookup(g.group_id, g.topics)
            topics = tuple(build(R, "OffsetFetchResponseTopics", name=t,
                                 partitions=partitions_of("OffsetFetchResponsePartitions", parts, ErrorCode.none,
                                                          g.group_id, t))
                           for t, parts in found.items()) + tuple(
                build(R, "OffsetFetchResponseTopics", name=t,
                      partitions=denied_partitions("OffsetFetchResponsePartitions", parts))
                for t, parts in denied.items())
            out.append(build(R, "OffsetFetchResponseGroup", group_id=g.group_id, topics=topics, error_code=error))
        return build(R, "OffsetFetchResponse", throttle_time=ZERO, groups=tuple(out))
    found, error, denied = lookup(req.group_id, req.topics)
    # Before v2 there is no top-level error: the partitions carry it.
    per_partition = error if ctx.api_version < 2 else ErrorCode.none
    topics = tuple(build(R, "OffsetFetchResponseTopic", name=t,
                         partitions=partitions_of("OffsetFetchResponsePartition", parts, per_partition, req.group_id,
                                                  t))
                   for t, parts in found.items()) + tuple(
        build(R, "OffsetFetchResponseTopic", name=t,
              partitions=denied_partitions("OffsetFetchResponsePartition", parts))
        for t, parts in denied.items())
    return build(R, "OffsetFetchResponse", throttle_time=ZERO, topics=topics, error_code=error)


async def describe_groups(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    include_ops = getattr(req, "include_authorized_operations", False)
    described = []
    for group_id in req.groups:
        if not ctx.authorize(DESCRIBE, GROUP, group_id):
            described.append(build(R, "DescribedGroup", error_code=GROUP_DENIED, group_id=group_id, group_state="",
                                   protocol_type="", protocol_data="", members=(),
                                   authorized_operations=NOT_REQUESTED))
            continue
        ops = authz.authorized_operations(ctx, GROUP, group_id) if include_ops else NOT_REQUESTED
        if (unavailable := _unavailable(ctx, group_id)) is not None:
            # Kafka sets the operations only on groups described without error
            described.append(build(R, "DescribedGroup", error_code=unavailable, group_id=group_id, group_state="",
                                   protocol_type="", protocol_data="", members=(),
                                   authorized_operations=NOT_REQUESTED))
            continue
        group = ctx.services.groups.group(group_id)
        if group is None:
            described.append(build(R, "DescribedGroup", error_code=ErrorCode.none, group_id=group_id,
                                   group_state="Dead", protocol_type="", protocol_data="", members=(),
                                   authorized_operations=ops))
            continue
        members = tuple(build(R, "DescribedGroupMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
                              client_id=m.client_id, client_host=m.client_host,
                              member_metadata=m.metadata_for(group.protocol_name), member_assignment=m.assignment)
                        for m in group.members.values())
        described.append(build(R, "DescribedGroup", error_code=ErrorCode.none, group_id=group_id,
                               group_state=str(group.state), protocol_type=group.protocol_type or "",
                               protocol_data=group.protocol_name or "", members=members, authorized_operations=ops))
    return build(R, "DescribeGroupsResponse", throttle_time=ZERO, groups=tuple(described))


async def list_groups(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    if ctx.services.groups.loading or ctx.services.groups.loading_partitions:
        return build(R, "ListGroupsResponse", throttle_time=ZERO, error_code=LOADING, groups=())
    wanted = {s.lower() for s in (getattr(req, "states_filter", None) or ())}
    coordinator = ctx.services.groups
    coordinator.expire_sessions(coordinator.clock())  # states as of now: ended sessions are gone
    # DESCRIBE on the cluster lists every group; otherwise only the groups the caller may describe (the checks
    # filter: their denials are not logged)
    everything = authz.cluster(ctx, DESCRIBE, log_if_denied=False)
    groups = tuple(build(R, "ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type or "",
                         group_state=str(g.state), group_type="classic")
                   for g in list(coordinator.groups.values()) if (not wanted or str(g.state).lower() in wanted)
                   and (everything or ctx.authorize(DESCRIBE, GROUP, g.group_id, log_if_denied=False)))
    return build(R, "ListGroupsResponse", throttle_time=ZERO, error_code=ErrorCode.none, groups=groups)


async def delete_groups(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    deletable = authz.authorized_names(ctx, DELETE, GROUP, req.groups_names)
    results = tuple(build(R, "DeletableGroupResult", group_id=g,
                          error_code=GROUP_DENIED if g not in deletable else
                          _unavailable(ctx, g) or ctx.services.groups.delete(g))
                    for g in req.groups_names)
    return build(R, "DeleteGroupsResponse", throttle_time=ZERO, results=results)


async def offset_delete(ctx: RequestContext, req: Any) -> Any:
    """KIP-496: delete a group's committed offsets for partitions it no longer consumes."""
    R = response_module(req)
    if not ctx.authorize(DELETE, GROUP, req.group_id):
        return build(R, "OffsetDeleteResponse", error_code=GROUP_DENIED, throttle_time=ZERO, topics=())
    readable = authz.authorized_names(ctx, READ, TOPIC, (t.name for t in req.topics))
    wanted = [(t.name, p.partition_index) for t in req.topics for p in t.partitions if t.name in readable]
    if (unavailable := _unavailable(ctx, req.group_id)) is not None:
        top, per = unavailable, {}
    else:
        top, per = ctx.services.groups.delete_offsets(req.group_id, wanted) if wanted else (ErrorCode.none, {})
    per = {**per, **{(t.name, p.partition_index): TOPIC_DENIED for t in req.topics if t.name not in readable
                     for p in t.partitions}}
    topics = tuple(build(R, "OffsetDeleteResponseTopic", name=t.name, partitions=tuple(
        build(R, "OffsetDeleteResponsePartition", partition_index=p.partition_index,
              error_code=per.get((t.name, p.partition_index), ErrorCode.none)) for p in t.partitions))
        for t in req.topics)
    return build(R, "OffsetDeleteResponse", error_code=top, throttle_time=ZERO, topics=topics if top == 0 else ())


async def _offset_fetch_from_zookeeper(ctx: RequestContext, R: Any, req: Any) -> Any:
    """OffsetFetch v0 on a ZooKeeper-mode broker (Kafka's handleOffsetFetchRequestFromZookeeper): each partition's
    offset from /consumers/<group>/offsets, no metadata; a partition the broker does not have, or without a stored
    offset, answers -1 with UNKNOWN_TOPIC_OR_PARTITION, as Kafka does."""
    group_allowed = ctx.authorize(DESCRIBE, GROUP, req.group_id)
    described = authz.authorized_names(ctx, DESCRIBE, TOPIC, (t.name for t in req.topics)) if group_allowed else set()
    wanted = [(t.name, p) for t in req.topics for p in t.partition_indexes if t.name in described]
    present = [tp for tp in wanted if ctx.services.replica_manager.find(*tp) is not None]
    stored, error = {}, ErrorCode.none if group_allowed else GROUP_DENIED
    if present:
        stored, error = await _in_zookeeper(ctx.services.zk.consumer_offsets, req.group_id, present)

    def partition(topic: str, index: int) -> Any:
        if group_allowed and topic not in described:
            offset, code = -1, TOPIC_DENIED
        elif error != ErrorCode.none:
            offset, code = -1, error
        else:
            offset = stored.get((topic, index))
            offset, code = (-1, ErrorCode.unknown_topic_or_partition) if offset is None else (offset, ErrorCode.none)
        return build(R, "OffsetFetchResponsePartition", partition_index=index, committed_offset=offset, metadata="",
                     error_code=code)

    topics = tuple(build(R, "OffsetFetchResponseTopic", name=t.name,
                         partitions=tuple(partition(t.name, p) for p in t.partition_indexes)) for t in req.topics)
    return build(R, "OffsetFetchResponse", topics=topics)


async def _in_zookeeper(call: Any, *args: Any) -> tuple[Any, ErrorCode]:
    """(result, NONE) of a blocking ZooKeeper call run off the event loop, or (None, its error's code)."""
    try:
        return await asyncio.to_thread(call, *args), ErrorCode.none
    except Exception as exc:
        return None, error_code_for(exc)
