"""The controller's requests to brokers: LeaderAndIsr (key 4), StopReplica (key 5), UpdateMetadata (key 6);
and a stopping broker's ControlledShutdown (key 7) to the controller.

Each carries the controller's epoch and the destination's broker epoch; the ReplicaManager fences older ones
(kafka-cluster.md 5.2-5.4). Field names follow Kafka 3.7's message specs (kcli.protocol.schema).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import error_code_for
from kcli.broker.handlers import authz
from kcli.broker.handlers.common import ZERO_UUID, RequestContext, build, response_module
from kcli.broker.metadata_cache import BrokerEndpoint, PartitionState
from kcli.broker.partition import LeaderAndIsrState
from kcli.protocol.acl import AclOperation

DENIED = ErrorCode.cluster_authorization_failed


def _controller_allowed(ctx: RequestContext) -> bool:
    """The controller's requests and ControlledShutdown need CLUSTER_ACTION on the cluster (brokers' principals
    usually are super users); a denial is the whole request's CLUSTER_AUTHORIZATION_FAILED, nothing applied."""
    return authz.cluster(ctx, AclOperation.CLUSTER_ACTION)


def _partition_epoch(state: Any) -> int:
    # PartitionEpoch from 3.3 on; ZkVersion in the 2.8-3.2 schemas (the same field)
    return int(getattr(state, "partition_epoch", getattr(state, "zk_version", 0)))


async def leader_and_isr(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    if not _controller_allowed(ctx):
        return build(R, "LeaderAndIsrResponse", error_code=DENIED, topics=())
    services = ctx.services
    states: dict[tuple[str, int], LeaderAndIsrState] = {}
    topic_ids: dict[str, uuid.UUID] = {}
    for topic in req.topic_states:
        topic_ids[topic.topic_name] = getattr(topic, "topic_id", None) or ZERO_UUID
        for p in topic.partition_states:
            states[(topic.topic_name, int(p.partition_index))] = LeaderAndIsrState(
                controller_epoch=int(p.controller_epoch), leader=int(p.leader), leader_epoch=int(p.leader_epoch),
                isr=[int(b) for b in p.isr], partition_epoch=_partition_epoch(p),
                replicas=[int(b) for b in p.replicas], is_new=bool(getattr(p, "is_new", False)))
    for leader in getattr(req, "live_leaders", ()):
        services.remember_endpoint(int(leader.broker_id), leader.host_name, int(leader.port))

    def ensure(topic: str, index: int, state: LeaderAndIsrState):
        return services.admin.ensure_replica(topic, index, topic_ids.get(topic, ZERO_UUID), create=False)

    controller_epoch, broker_epoch = int(req.controller_epoch), int(getattr(req, "broker_epoch", -1))
    replicas = services.replica_manager
    if replicas.check_controller(controller_epoch, broker_epoch) == ErrorCode.none:
        # The file work first, in worker threads: the logs of replicas new here. Then the transitions, on the
        # event loop (they only change memory); the leader-epoch checkpoints they change are written in worker
        # threads before the answer. The event loop serves every other client meanwhile.
        local = [tp for tp, s in states.items() if replicas.local_broker_id in s.replicas]
        await services.admin.prepare_replicas(local, topic_ids)
    logs = [m for tp in states if (m := services.log_manager.partition(*tp)) is not None]
    with services.log_manager.leader_epoch_checkpoints_deferred(logs) as changed:
        error, errors = replicas.apply_leader_and_isr(controller_epoch, broker_epoch, states, ensure)
    if changed:
        await services.admin.off_loop(lambda: services.log_manager.write_leader_epoch_checkpoints(changed))
    # v5 (the one version served) groups the errors by topic id; v0-v4's flat list with names is not served
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), code in errors.items():
        by_topic.setdefault(topic, []).append(
            build(R, "LeaderAndIsrPartitionError", partition_index=index, error_code=code))
    if error != ErrorCode.none:
        return build(R, "LeaderAndIsrResponse", error_code=error, topics=())
    return build(R, "LeaderAndIsrResponse", error_code=ErrorCode.none,
                 topics=tuple(build(R, "LeaderAndIsrTopicError", topic_id=topic_ids.get(t, ZERO_UUID),
                                    partition_errors=tuple(parts)) for t, parts in by_topic.items()))


async def update_metadata(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    if not _controller_allowed(ctx):
        return build(R, "UpdateMetadataResponse", error_code=DENIED)
    services = ctx.services
    error = services.replica_manager.check_controller(int(req.controller_epoch), int(getattr(req, "broker_epoch", -1)))
    if error != ErrorCode.none:
        return build(R, "UpdateMetadataResponse", error_code=error)
    listener = services.listener_name
    brokers = []
    for broker in req.live_brokers:
        endpoints = list(broker.endpoints)
        chosen = next((e for e in endpoints if e.listener == listener), endpoints[0] if endpoints else None)
        if chosen is None:
            continue
        brokers.append(BrokerEndpoint(int(broker.id), chosen.host, int(chosen.port), broker.rack,
                                      tuple((e.listener, e.host, int(e.port)) for e in endpoints)))
    states = []
    for topic in req.topic_states:
        topic_id = getattr(topic, "topic_id", None)
        for p in topic.partition_states:
            states.append((topic.topic_name, topic_id if topic_id and topic_id != ZERO_UUID else None, PartitionState(
                int(p.partition_index), int(p.leader), int(p.leader_epoch), [int(b) for b in p.replicas],
                [int(b) for b in p.isr], [int(b) for b in getattr(p, "offline_replicas", ())])))
    services.metadata.update_metadata(int(req.controller_id), int(req.controller_epoch), brokers, states)
    services.metadata_updated()
    return build(R, "UpdateMetadataResponse", error_code=ErrorCode.none)


async def stop_replica(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    if not _controller_allowed(ctx):
        return build(R, "StopReplicaResponse", error_code=DENIED, partition_errors=())
    services = ctx.services
    error = services.replica_manager.check_controller(int(req.controller_epoch), int(getattr(req, "broker_epoch", -1)))
    if error != ErrorCode.none:
        return build(R, "StopReplicaResponse", error_code=error, partition_errors=())
    codes: dict[tuple[str, int], Any] = {}
    deletes: list[tuple[str, int]] = []
    for topic in req.topic_states:
        for p in topic.partition_states:
            tp = (topic.topic_name, int(p.partition_index))
            try:
                stopped = services.replica_manager.stop_replica(tp[0], tp[1], int(p.leader_epoch))
                if p.delete_partition:
                    deletes.append(tp)
                    remote = services.replica_manager.remote_log_manager
                    if stopped is not None and remote is not None:  # its remote data too (KIP-405)
                        remote.partition_deleted(stopped)
                codes[tp] = ErrorCode.none
            except Exception as exc:
                codes[tp] = error_code_for(exc)
    if deletes:
        # Kafka's asyncDelete: closed and renamed `-delete` in a worker thread before the answer, the files
        # removed log.segment.delete.delay.ms later; the event loop serves on meanwhile.
        try:
            await services.admin.delete_replicas(deletes)
        except Exception as exc:
            for tp in deletes:
                codes[tp] = error_code_for(exc)
    results = [build(R, "StopReplicaPartitionError", topic_name=t, partition_index=i, error_code=code)
               for (t, i), code in codes.items()]
    return build(R, "StopReplicaResponse", error_code=ErrorCode.none, partition_errors=tuple(results))


async def controlled_shutdown(ctx: RequestContext, req: Any) -> Any:
    """A broker about to stop asks the controller to move its leaderships away (Kafka's
    KafkaApis.handleControlledShutdownRequest). The answer lists the partitions it still leads; the broker
    retries until that is empty. Only the active controller answers; any other broker says NOT_CONTROLLER."""
    R = response_module(req)
    if not _controller_allowed(ctx):
        return build(R, "ControlledShutdownResponse", error_code=DENIED, remaining_partitions=())
    controller = ctx.services.controller
    if controller is None or not getattr(controller, "is_active", False):
        return build(R, "ControlledShutdownResponse", error_code=ErrorCode.not_controller, remaining_partitions=())
    try:
        remaining = await asyncio.wrap_future(
            controller.controlled_shutdown(int(req.broker_id), int(getattr(req, "broker_epoch", -1))))
    except Exception as exc:
        return build(R, "ControlledShutdownResponse", error_code=error_code_for(exc), remaining_partitions=())
    return build(R, "ControlledShutdownResponse", error_code=ErrorCode.none, remaining_partitions=tuple(
        build(R, "RemainingPartition", topic_name=tp.topic, partition_index=tp.partition) for tp in sorted(remaining)))
