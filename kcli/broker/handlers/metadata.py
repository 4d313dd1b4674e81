"""Metadata (key 3) and DescribeCluster (key 60)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import TopicExistsError, error_code_for
from kcli.protocol import requested_topics
from kcli.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from kcli.broker.handlers import authz
from kcli.broker.handlers.common import (
    NOT_REQUESTED,
    ZERO,
    ZERO_UUID,
    RequestContext,
    build,
    response_module,
)


async def metadata(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    services = ctx.services
    cache = services.metadata
    # None is "all topics": a null array from v1 on, an EMPTY array at v0 (kcli.protocol.requested_topics)
    requested = None if requested_topics(req, ctx.api_version) is None else list(req.topics)
    # Auto-creation: v4+ asks per request; earlier versions always allow it (broker config decides).
    auto_create = getattr(req, "allow_auto_topic_creation", True) and services.config["auto.create.topics.enable"]
    names: list[tuple[str | None, Any]]
    if requested is None:
        names = [(name, None) for name in cache.topic_names()]
    else:
        names = []
        for t in requested:
            name = getattr(t, "name", None)
            topic_id = getattr(t, "topic_id", None)
            if name is None and topic_id is not None and topic_id != ZERO_UUID:
                name = cache.topic_name(topic_id)
            names.append((name, topic_id))
    include_topic_ops = getattr(req, "include_topic_authorized_operations", False)
    # Authorization before existence (Kafka's handleTopicMetadataRequest): DESCRIBE on each topic; an all-topics
    # request leaves the others out silently (their denials are not logged), a named one answers
    # TOPIC_AUTHORIZATION_FAILED without the topic id, whether or not the topic exists. A topic named by id that
    # is denied keeps its id (ids are not secret) and loses its name.
    all_topics = requested is None
    described = authz.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, (n for n, _ in names),
                                       log_if_denied=not all_topics)
    creatable: set[str] | None = None  # None: every topic (CREATE on CLUSTER), checked on the first missing one
    # the endpoints of the listener the request came in on; a leader without that listener is LISTENER_NOT_FOUND
    # (v6+) or LEADER_NOT_AVAILABLE (ZkMetadataCache.getPartitionMetadata)
    alive = cache.alive_brokers_for(ctx.session.listener_name)
    reachable = {b.broker_id for b in alive}
    missing_listener = ErrorCode.listener_not_found if ctx.api_version >= 6 else ErrorCode.leader_not_available
    topics = []
    for name, topic_id in names:
        if name is not None and name not in described:
            if not all_topics:
                by_id = topic_id is not None and topic_id != ZERO_UUID
                topics.append(build(R, "MetadataResponseTopic", error_code=ErrorCode.topic_authorization_failed,
                                    name=None if by_id else name, topic_id=topic_id if by_id else ZERO_UUID,
                                    is_internal=False, partitions=(), topic_authorized_operations=NOT_REQUESTED))
            continue
        error = ErrorCode.none
        topic = cache.topic(name)
        if topic is None and name and requested is not None and auto_create and not name.startswith("__"):
            if creatable is None:
                creatable = ({n for n, _ in names if n is not None}
                             if authz.cluster(ctx, AclOperation.CREATE, log_if_denied=False) else
                             authz.authorized_names(ctx, AclOperation.CREATE, ResourceType.TOPIC,
                                                    {n for n, _ in names if n is not None and n in described
                                                     and cache.topic(n) is None}))
            if name not in creatable:
                # may see it but not create it: Kafka answers TOPIC_AUTHORIZATION_FAILED instead of creating it
                topics.append(build(R, "MetadataResponseTopic", error_code=ErrorCode.topic_authorization_failed,
                                    name=name, topic_id=ZERO_UUID, is_internal=False, partitions=(),
                                    topic_authorized_operations=NOT_REQUESTED))
                continue
            try:
                # Kafka's auto-creation: LEADER_NOT_AVAILABLE now, the logs created in a worker thread; the
                # client asks again and finds the topic once it takes produce requests
                services.admin.start_create_topic(services.admin.begin_create_topic(name, -1, -1))
                error = ErrorCode.leader_not_available
            except TopicExistsError:
                error = ErrorCode.leader_not_available  # being created (Kafka: "let it go")
            except Exception as exc:
                error = error_code_for(exc)
                if error == ErrorCode.topic_already_exists:
                    # created by an earlier request (or broker) but not in this broker's metadata yet: Kafka's
                    # AutoTopicCreationManager answers LEADER_NOT_AVAILABLE, which clients retry
                    error = ErrorCode.leader_not_available
            topic = None
        elif topic is None:
            error = ErrorCode.unknown_topic_id if name is None else ErrorCode.unknown_topic_or_partition
        partitions = []
        if topic is not None:
            for p in topic.partitions:
                partitions.append(build(
                    R, "MetadataResponsePartition", partition_index=p.index,
                    error_code=(ErrorCode.leader_not_available if p.leader < 0 else ErrorCode.none
                                if p.leader in reachable or p.leader not in cache.brokers else missing_listener),
                    leader_id=p.leader, leader_epoch=p.leader_epoch, replica_nodes=tuple(p.replicas),
                    isr_nodes=tuple(p.isr), offline_replicas=tuple(p.offline)))
        topics.append(build(
            R, "MetadataResponseTopic", error_code=error, name=name,
            topic_id=topic.topic_id if topic is not None else (topic_id or ZERO_UUID),
            is_internal=bool(topic is not None and topic.is_internal), partitions=tuple(partitions),
            topic_authorized_operations=authz.authorized_operations(ctx, ResourceType.TOPIC, name)
            if include_topic_ops and name is not None else NOT_REQUESTED))
    brokers = tuple(build(R, "MetadataResponseBroker", node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
                    for b in alive)
    include_cluster_ops = getattr(req, "include_cluster_authorized_operations", False)
    return build(R, "MetadataResponse", throttle_time=ZERO, brokers=brokers, cluster_id=cache.cluster_id,
                 controller_id=cache.advertised_controller_id(), topics=tuple(topics),
                 cluster_authorized_operations=_cluster_operations(ctx) if include_cluster_ops else NOT_REQUESTED)


def _cluster_operations(ctx: RequestContext) -> int:
    """Metadata v8-v10 and DescribeCluster: the CLUSTER bit field for a caller with DESCRIBE on it, else 0."""
    if not authz.cluster(ctx, AclOperation.DESCRIBE):
        return 0
    return authz.authorized_operations(ctx, ResourceType.CLUSTER, CLUSTER_NAME)


async def describe_cluster(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    cache = ctx.services.metadata
    brokers = tuple(build(R, "DescribeClusterBroker", broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
                    for b in cache.alive_brokers_for(ctx.session.listener_name))
    return build(R, "DescribeClusterResponse", throttle_time=ZERO, error_code=ErrorCode.none, error_message=None,
                 endpoint_type=1, cluster_id=cache.cluster_id or "", controller_id=cache.advertised_controller_id(),
                 brokers=brokers, cluster_authorized_operations=_cluster_operations(ctx)
                 if req.include_cluster_authorized_operations else NOT_REQUESTED)
