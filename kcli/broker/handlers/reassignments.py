"""AlterPartitionReassignments (45) and ListPartitionReassignments (46), KIP-455.

In ZooKeeper mode the controller serves them (kafka-cluster.md 2.7): the request becomes an event on the
controller-event thread and the answer waits for its outcome; any other broker answers NOT_CONTROLLER, and clients
go to the controller the metadata names. A standalone broker is a cluster of one that controls itself: nothing is
ever being reassigned there, and the only valid target of a partition is the broker itself.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.controller.context import ReplicaAssignment
from kcli.broker.controller.reassignment import build_reassignment, validate_replicas
from kcli.broker.errors import (
    NoReassignmentInProgressError,
    NotControllerError,
    UnknownTopicOrPartitionError,
    error_code_for,
    error_message_for,
)
from kcli.broker.handlers import authz
from kcli.broker.handlers.common import ZERO, RequestContext, build, response_module
from kcli.protocol.acl import AclOperation
from kcli.zk.kafka_zk_client import ControllerMovedError
from kcli.zk.models import TopicPartition


_CLUSTER_DENIED = "Cluster authorization failed."  # Kafka's answer carries its exception's message


def _top_level_error(exc: BaseException) -> tuple[ErrorCode, str | None]:
    if isinstance(exc, ControllerMovedError):
        exc = NotControllerError(exc.reason)
    return error_code_for(exc), error_message_for(exc)


async def alter_partition_reassignments(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    if not authz.cluster(ctx, AclOperation.ALTER):
        return build(R, "AlterPartitionReassignmentsResponse", throttle_time=ZERO,
                     error_code=ErrorCode.cluster_authorization_failed, error_message=_CLUSTER_DENIED, responses=())
    wanted: dict[TopicPartition, tuple[int, ...] | None] = {}
    for topic in req.topics:
        for p in topic.partitions:
            replicas = None if p.replicas is None else tuple(int(b) for b in p.replicas)
            wanted[TopicPartition(topic.name, int(p.partition_index))] = replicas  # a repeated partition: the last
    try:
        outcome = await _alter(ctx, wanted)
    except Exception as exc:
        code, message = _top_level_error(exc)
        return build(R, "AlterPartitionReassignmentsResponse", throttle_time=ZERO, error_code=code,
                     error_message=message, responses=())
    by_topic: dict[str, list[Any]] = {}
    for tp in wanted:
        error = outcome.get(tp)
        by_topic.setdefault(tp.topic, []).append(build(
            R, "ReassignablePartitionResponse", partition_index=tp.partition,
            error_code=ErrorCode.none if error is None else error_code_for(error),
            error_message=None if error is None else error_message_for(error)))
    return build(R, "AlterPartitionReassignmentsResponse", throttle_time=ZERO, error_code=ErrorCode.none,
                 error_message=None, responses=tuple(build(R, "ReassignableTopicResponse", name=name,
                                                           partitions=tuple(parts))
                                                     for name, parts in by_topic.items()))


async def list_partition_reassignments(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    if not authz.cluster(ctx, AclOperation.DESCRIBE):
        return build(R, "ListPartitionReassignmentsResponse", throttle_time=ZERO,
                     error_code=ErrorCode.cluster_authorization_failed, error_message=_CLUSTER_DENIED, topics=())
    partitions = None if req.topics is None else [TopicPartition(t.name, int(i))
                                                  for t in req.topics for i in t.partition_indexes]
    try:
        ongoing = await _list(ctx, partitions)
    except Exception as exc:
        code, message = _top_level_error(exc)
        return build(R, "ListPartitionReassignmentsResponse", throttle_time=ZERO, error_code=code,
                     error_message=message, topics=())
    by_topic: dict[str, list[Any]] = {}
    for tp, assignment in sorted(ongoing.items()):
        by_topic.setdefault(tp.topic, []).append(build(
            R, "OngoingPartitionReassignment", partition_index=tp.partition, replicas=assignment.replicas,
            adding_replicas=assignment.adding_replicas, removing_replicas=assignment.removing_replicas))
    return build(R, "ListPartitionReassignmentsResponse", throttle_time=ZERO, error_code=ErrorCode.none,
                 error_message=None, topics=tuple(build(R, "OngoingTopicReassignment", name=name,
                                                        partitions=tuple(parts)) for name, parts in by_topic.items()))


async def _alter(ctx: RequestContext, wanted: dict[TopicPartition, tuple[int, ...] | None]
                 ) -> dict[TopicPartition, Exception | None]:
    services = ctx.services
    if not services.clustered:
        return {tp: _standalone_alter(ctx, tp, target) for tp, target in wanted.items()}
    controller = services.controller
    if controller is None:
        raise NotControllerError("the controller is not running on this broker yet")
    return await asyncio.wrap_future(controller.alter_partition_reassignments(wanted))  # type: ignore[attr-defined]


async def _list(ctx: RequestContext, partitions: list[TopicPartition] | None) -> dict[TopicPartition, ReplicaAssignment]:
    services = ctx.services
    if not services.clustered:
        return {}  # nothing is ever being reassigned on a standalone broker
    controller = services.controller
    if controller is None:
        raise NotControllerError("the controller is not running on this broker yet")
    return await asyncio.wrap_future(controller.list_partition_reassignments(partitions))  # type: ignore[attr-defined]


def _standalone_alter(ctx: RequestContext, tp: TopicPartition, target: tuple[int, ...] | None) -> Exception | None:
    """The controller's checks against a cluster of this one broker: a target of just this broker is done at
    once (the partition is there already), anything else names a broker that is not alive."""
    topic = ctx.services.metadata.topic(tp.topic)
    partition = None if topic is None else next((p for p in topic.partitions if p.index == tp.partition), None)
    current = ReplicaAssignment(tuple(partition.replicas) if partition is not None else ())
    if target is not None:
        error = validate_replicas(current, target, {ctx.services.broker_id})
        if error is not None:
            return error
    if build_reassignment(current, target) is None:
        return NoReassignmentInProgressError(f"no reassignment of {tp} is in progress")
    if partition is None:
        return UnknownTopicOrPartitionError("The partition does not exist.")
    return None
