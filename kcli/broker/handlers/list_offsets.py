"""ListOffsets (key 2)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import error_code_for
from kcli.broker.handlers import authz
from kcli.broker.handlers.common import ZERO, RequestContext, build, response_module
from kcli.broker.partition import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from kcli.protocol.acl import AclOperation, ResourceType

DEBUGGING_REPLICA_ID = -2  # ListOffsetsRequest.DEBUGGING_REPLICA_ID: the only requester a follower answers
CONSUMER_REPLICA_ID = -1  # a client's request (Kafka's isClientRequest)


def _partition(replicas: Any, req: Any, topic: str, index: int, current_leader_epoch: int = -1) -> Any:
    """Kafka's fetchOffsetForTimestamp: the partition's log here, with the leader epoch checked (KIP-320) and,
    except for the debugging replica id, only on the leader (NOT_LEADER_OR_FOLLOWER): a follower's offsets
    may lag, and consumers that fetch from followers (KIP-392) still ask the leader for offsets."""
    partition = replicas.get_partition(topic, index)
    partition.check_epoch(current_leader_epoch,
                          require_leader=getattr(req, "replica_id", -1) != DEBUGGING_REPLICA_ID)
    return partition


async def list_offsets(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    replicas = ctx.services.replica_manager
    described = authz.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in req.topics))
    if ctx.api_version == 0:
        return _offsets_before(R, replicas, req, described)
    read_committed = getattr(req, "isolation_level", 0) == 1
    topics = []
    for topic in req.topics:
        parts = []
        for lp in topic.partitions:
            values: dict[str, Any] = dict(partition_index=lp.partition_index, timestamp=-1, offset=-1,
                                          leader_epoch=-1)
            if topic.name not in described:
                parts.append(build(R, "ListOffsetsPartitionResponse",
                                   error_code=ErrorCode.topic_authorization_failed, **values))
                continue
            try:
                partition = _partition(replicas, req, topic.name, lp.partition_index,
                                       getattr(lp, "current_leader_epoch", -1))
                if lp.timestamp == LATEST_TIMESTAMP and getattr(req, "replica_id", -1) == CONSUMER_REPLICA_ID:
                    partition.check_offsets_available()
                if lp.timestamp == LATEST_TIMESTAMP and read_committed:
                    values["offset"] = partition.last_stable_offset  # KIP-98: the LSO for read_committed
                else:
                    match = None
                    remote = getattr(replicas, "remote_log_manager", None)
                    if lp.timestamp >= 0 and remote is not None and partition.log.remote_log_enabled:
                        # KIP-405: the remote segments first, then the local log (Kafka's fetchOffsetByTimestamp)
                        match = await remote.offset_for_timestamp_async(topic.name, lp.partition_index, lp.timestamp,
                                                                        partition.log_start_offset)
                    if match is None:
                        match = partition.offset_for_timestamp(lp.timestamp)
                    if match is not None:
                        values.update(offset=match.offset, timestamp=match.timestamp)
                values["leader_epoch"] = partition.leader_epoch
                if lp.timestamp == EARLIEST_LOCAL_TIMESTAMP and values["offset"] >= 0:
                    # KIP-1005: the epoch of the local log start's batch (a follower starting there restores the
                    # remote state before it from the segment of that epoch, buildRemoteLogAuxState)
                    with partition.managed.lock:
                        epoch = partition.log.leader_epochs.epoch_for_offset(values["offset"])
                    if epoch is not None:
                        values["leader_epoch"] = epoch
                elif lp.timestamp == EARLIEST_TIMESTAMP and values["offset"] >= 0:
                    # UnifiedLog.fetchOffsetByTimestamp: the first cached epoch if it covers the log start
                    # (it may not, after a message format bump), else none. An empty cache (a standalone
                    # partition never written) is the current epoch, which Kafka's makeLeader would have cached.
                    with partition.managed.lock:
                        first = partition.log.leader_epochs.earliest_entry
                    if first is not None:
                        values["leader_epoch"] = first.epoch if first.start_offset <= values["offset"] else -1
                if lp.timestamp in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                    values["timestamp"] = -1
                error = ErrorCode.none
            except Exception as exc:
                error = error_code_for(exc)
            parts.append(build(R, "ListOffsetsPartitionResponse", error_code=error, **values))
        topics.append(build(R, "ListOffsetsTopicResponse", name=topic.name, partitions=tuple(parts)))
    return build(R, "ListOffsetsResponse", throttle_time=ZERO, topics=tuple(topics))


def _offsets_before(R: Any, replicas: Any, req: Any, described: set[str]) -> Any:
    """ListOffsets v0 (Kafka's handleListOffsetRequestV0): per partition up to ``max_num_offsets`` offsets before
    the time (-1 latest: the log end first; -2 earliest: the log start), newest first, in ``old_style_offsets``.
    A negative ``max_num_offsets`` asks for none (Kafka fails to size its array and answers UNKNOWN_SERVER_ERROR)."""
    topics = []
    for topic in req.topics:
        parts = []
        for lp in topic.partitions:
            if topic.name not in described:
                parts.append(build(R, "ListOffsetsPartitionResponse", partition_index=lp.partition_index,
                                   error_code=ErrorCode.topic_authorization_failed, old_style_offsets=()))
                continue
            try:
                partition = _partition(replicas, req, topic.name, lp.partition_index)
                offsets = tuple(partition.legacy_offsets_before(lp.timestamp, max(0, lp.max_num_offsets)))
                error = ErrorCode.none
            except Exception as exc:
                offsets, error = (), error_code_for(exc)
            parts.append(build(R, "ListOffsetsPartitionResponse", partition_index=lp.partition_index, error_code=error,
                               old_style_offsets=offsets))
        topics.append(build(R, "ListOffsetsTopicResponse", name=topic.name, partitions=tuple(parts)))
    return build(R, "ListOffsetsResponse", topics=tuple(topics))
