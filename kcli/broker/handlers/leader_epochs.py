"""OffsetForLeaderEpoch (key 23): where a leader epoch ends on this partition's leader.

Followers ask it to find where their log diverged from the leader's (KIP-101, KIP-279); consumers ask it to
validate their position after a leader change (KIP-320). v2 added CurrentLeaderEpoch (fencing), v3 ReplicaId.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers import authz
from kcli.broker.handlers.common import ZERO, RequestContext, attempt, build, response_module
from kcli.protocol.acl import AclOperation, ResourceType
from kcli.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET


async def offset_for_leader_epoch(ctx: RequestContext, req: Any) -> Any:
    """Kafka's handleOffsetForLeaderEpochRequest → ReplicaManager.lastOffsetForLeaderEpoch, per partition.
    An unknown epoch answers NONE with epoch and end offset -1 (UNDEFINED_EPOCH_OFFSET)."""
    R = response_module(req)
    replicas = ctx.services.replica_manager
    # First an inter-broker API (CLUSTER_ACTION); consumers use it since KIP-320 with DESCRIBE on the topic.
    if authz.cluster(ctx, AclOperation.CLUSTER_ACTION, log_if_denied=False):
        described = {t.topic for t in req.topics}
    else:
        described = authz.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                           (t.topic for t in req.topics))
    topics = []
    for topic in req.topics:
        parts = []
        for p in topic.partitions:
            if topic.topic not in described:
                parts.append(build(R, "EpochEndOffset", error_code=ErrorCode.topic_authorization_failed,
                                   partition=p.partition, leader_epoch=UNDEFINED_EPOCH,
                                   end_offset=UNDEFINED_EPOCH_OFFSET))
                continue
            found, error, _ = attempt(lambda: replicas.last_offset_for_leader_epoch(
                topic.topic, p.partition, getattr(p, "current_leader_epoch", -1), p.leader_epoch))
            epoch, end = found if found is not None else (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
            parts.append(build(R, "EpochEndOffset", error_code=error, partition=p.partition, leader_epoch=epoch,
                               end_offset=end))
        topics.append(build(R, "OffsetForLeaderTopicResult", topic=topic.topic, partitions=tuple(parts)))
    return build(R, "OffsetForLeaderEpochResponse", throttle_time=ZERO, topics=tuple(topics))
