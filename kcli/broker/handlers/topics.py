"""CreateTopics (19), DeleteTopics (20), CreatePartitions (37), DeleteRecords (21)."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import error_code_for, error_message_for
from kcli.broker.handlers import authz
from kcli.broker.handlers.common import ZERO, ZERO_UUID, RequestContext, attempt, build, build_all, ms, response_module
from kcli.protocol.acl import AclOperation, ResourceType

TOPIC_DENIED = ErrorCode.topic_authorization_failed


async def create_topics(ctx: RequestContext, req: Any) -> Any:
    """Every topic is checked at once; the file work (standalone: the logs; ZooKeeper mode: the znodes) runs in
    worker threads, so the broker serves other requests meanwhile. Standalone, a topic's answer comes when its
    logs exist and Metadata shows it (it takes produce requests); in ZooKeeper mode when the controller gave
    every partition a leader. Past ``timeout_ms`` it is REQUEST_TIMED_OUT and the creation goes on; with
    ``timeout_ms`` <= 0 the answer comes after the checks, as Kafka's (ZkAdminManager.createTopics)."""
    R = response_module(req)
    admin = ctx.services.admin
    loop = asyncio.get_running_loop()
    timeout = ms(req.timeout)
    deadline = loop.time() + max(0, timeout) / 1000
    results = []
    running: list[tuple[dict[str, Any], asyncio.Task]] = []
    seen: dict[str, int] = {}
    for t in req.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    # Authorization before existence (a denied caller never learns TOPIC_ALREADY_EXISTS): CREATE on the cluster,
    # else on each topic; the answer's configs need DESCRIBE_CONFIGS on the topic (TopicConfigErrorCode).
    creatable = (set(seen) if authz.cluster(ctx, AclOperation.CREATE, log_if_denied=False)
                 else authz.authorized_names(ctx, AclOperation.CREATE, ResourceType.TOPIC, seen))
    hidden = set(seen) - authz.authorized_names(ctx, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, seen,
                                                log_if_denied=False)
    for t in req.topics:
        assignments = {a.partition_index: list(a.broker_ids) for a in (t.assignments or ())}
        configs = {c.name: c.value for c in (t.configs or ())}
        values: dict[str, Any] = dict(name=t.name, topic_id=ZERO_UUID, error_code=ErrorCode.none, error_message=None,
                                      topic_config_error_code=ErrorCode.none, num_partitions=-1,
                                      replication_factor=-1, configs=())
        try:
            if seen[t.name] > 1:
                values.update(error_code=ErrorCode.invalid_request,
                              error_message=f"Create topics request from client contains duplicate topic {t.name}")
            elif t.name not in creatable:
                values.update(error_code=TOPIC_DENIED, error_message="Authorization failed.",
                              topic_config_error_code=TOPIC_DENIED if t.name in hidden else ErrorCode.none)
            else:
                creation = admin.begin_create_topic(t.name, t.num_partitions, t.replication_factor,
                                                    assignments or None, configs, validate_only=req.validate_only)
                created = creation.result
                values.update(topic_id=created.topic_id, num_partitions=created.num_partitions,
                              replication_factor=created.replication_factor, configs=build_all(
                                  R, "CreatableTopicConfigs", (dict(name=d.name, value=d.value, read_only=d.read_only,
                                                                    config_source=d.source.value,
                                                                    is_sensitive=d.sensitive)
                                                               for d in created.configs)))
                if not creation.done:
                    running.append((values, admin.start_create_topic(creation)))
        except Exception as exc:
            values.update(error_code=error_code_for(exc), error_message=error_message_for(exc))
        results.append(values)
    if running and timeout > 0:
        done, _ = await asyncio.wait([task for _, task in running], timeout=max(0.0, deadline - loop.time()))
        for values, task in running:
            if task not in done:
                values.update(error_code=ErrorCode.request_timed_out,
                              error_message="the topic's logs are still being created" if not ctx.services.clustered
                              else "the topic is still being written to ZooKeeper")
            elif task.exception() is not None:
                exc = task.exception()
                values.update(topic_id=ZERO_UUID, num_partitions=-1, replication_factor=-1, configs=(),
                              error_code=error_code_for(exc), error_message=error_message_for(exc))
    if ctx.services.clustered and running and timeout > 0:
        # As Kafka: the answer waits until the controller gave every new partition a leader.
        created = [v for v, _ in running if v["error_code"] == ErrorCode.none]
        ready = await ctx.services.await_metadata(
            lambda: all(ctx.services.topic_ready(v["name"], v["num_partitions"]) for v in created),
            int(max(0.0, deadline - loop.time()) * 1000))
        if not ready:
            for v in created:
                if not ctx.services.topic_ready(v["name"], v["num_partitions"]):
                    v.update(error_code=ErrorCode.request_timed_out,
                             error_message="the controller has not elected leaders for every partition yet")
    for v in results:
        if v["name"] in hidden and v["error_code"] == ErrorCode.none:
            # created, but the caller may not read its configs (Kafka's includeConfigsAndMetadata)
            v.update(num_partitions=-1, replication_factor=-1, configs=(), topic_config_error_code=TOPIC_DENIED)
    return build(R, "CreateTopicsResponse", throttle_time=ZERO,
                 topics=tuple(build(R, "CreatableTopicResult", **v) for v in results))


async def delete_topics(ctx: RequestContext, req: Any) -> Any:
    """Every named topic leaves the metadata at once (standalone) or is marked for deletion (ZooKeeper mode,
    the answer then waits until the controller removed it from the metadata, at most ``timeout_ms``); the logs
    are closed and renamed `-delete` in worker threads and their files removed later (Kafka's asyncDelete)."""
    R = response_module(req)
    cache = ctx.services.metadata
    wanted: list[tuple[str | None, Any]] = [(n, None) for n in (getattr(req, "topic_names", ()) or ())]
    for state in getattr(req, "topics", ()) or ():
        wanted.append((state.name or cache.topic_name(state.topic_id), state.topic_id))
    # Authorization before existence: DELETE on each topic; one named by id also needs DESCRIBE, or its name
    # is left out of the answer (ids are not secret, names are).
    by_id = {name for name, topic_id in wanted if name is not None and topic_id not in (None, ZERO_UUID)}
    describable = authz.authorized_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                         (n for n, _ in wanted if n in by_id))
    deletable = authz.authorized_names(ctx, AclOperation.DELETE, ResourceType.TOPIC, (n for n, _ in wanted))

    def denied(name: str, topic_id: Any) -> bool:
        return name not in deletable or (topic_id not in (None, ZERO_UUID) and name not in describable)

    named = [name for name, topic_id in wanted if name is not None and not denied(name, topic_id)]
    outcomes = iter(await ctx.services.admin.delete_topics_async(named) if named else ())
    results = []
    for name, topic_id in wanted:
        values: dict[str, Any] = dict(name=name, topic_id=topic_id or ZERO_UUID, error_code=ErrorCode.none,
                                      error_message=None)
        if name is None:
            values.update(error_code=ErrorCode.unknown_topic_id)
        elif denied(name, topic_id):
            hide = topic_id not in (None, ZERO_UUID) and name not in describable
            values.update(error_code=TOPIC_DENIED, name=None if hide else name)
        else:
            outcome = next(outcomes)
            if isinstance(outcome, Exception):
                values.update(error_code=error_code_for(outcome), error_message=error_message_for(outcome))
            else:
                values.update(topic_id=outcome)
        results.append(values)
    if ctx.services.clustered:
        # As Kafka: the answer waits until the topics left the metadata cache (the controller deleted them).
        deleted = [v for v in results if v["error_code"] == ErrorCode.none]
        if not await ctx.services.await_metadata(lambda: all(cache.topic(v["name"]) is None for v in deleted),
                                                 ms(req.timeout)):
            for v in deleted:
                if cache.topic(v["name"]) is not None:
                    v.update(error_code=ErrorCode.request_timed_out)
    return build(R, "DeleteTopicsResponse", throttle_time=ZERO,
                 responses=tuple(build(R, "DeletableTopicResult", **v) for v in results))


async def create_partitions(ctx: RequestContext, req: Any) -> Any:
    """The new partitions' logs (standalone) or assignment (ZooKeeper mode) are written in a worker thread;
    standalone they reach the metadata once their logs exist. Past ``timeout_ms`` the answer is
    REQUEST_TIMED_OUT and the growth goes on (Kafka's DelayedCreatePartitions)."""
    R = response_module(req)
    admin = ctx.services.admin
    loop = asyncio.get_running_loop()
    timeout = ms(req.timeout)
    deadline = loop.time() + max(0, timeout) / 1000
    results = []
    alterable = authz.authorized_names(ctx, AclOperation.ALTER, ResourceType.TOPIC, (t.name for t in req.topics))
    for t in req.topics:
        if t.name not in alterable:  # before existence: the same answer whether or not the topic exists
            results.append(dict(name=t.name, error_code=TOPIC_DENIED,
                                error_message="The topic authorization is failed.", count=t.count))
            continue
        assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
        task = admin.start(admin.create_partitions_async(t.name, t.count, assignments,
                                                         validate_only=req.validate_only))
        await asyncio.sleep(0)  # its checks run now: they fail before any file work
        if timeout > 0:
            await asyncio.wait([task], timeout=max(0.0, deadline - loop.time()))
        if task.done() and task.exception() is not None:
            error, message = error_code_for(task.exception()), error_message_for(task.exception())
        elif task.done() or timeout <= 0:  # Kafka: with no timeout the answer follows the checks
            error, message = ErrorCode.none, None
        else:
            error, message = ErrorCode.request_timed_out, "the new partitions' logs are still being created"
        results.append(dict(name=t.name, error_code=error, error_message=message, count=t.count))
    if ctx.services.clustered and not req.validate_only and timeout > 0:
        grown = [v for v in results if v["error_code"] == ErrorCode.none]
        if not await ctx.services.await_metadata(
                lambda: all(ctx.services.topic_ready(v["name"], v["count"]) for v in grown),
                int(max(0.0, deadline - loop.time()) * 1000)):
            for v in grown:
                if not ctx.services.topic_ready(v["name"], v["count"]):
                    v.update(error_code=ErrorCode.request_timed_out)
    return build(R, "CreatePartitionsResponse", throttle_time=ZERO,
                 results=tuple(build(R, "CreatePartitionsTopicResult", name=v["name"], error_code=v["error_code"],
                                     error_message=v["error_message"]) for v in results))


async def delete_records(ctx: RequestContext, req: Any) -> Any:
    """Move each partition's log start offset up to the given offset (-1: the high watermark)."""
    R = response_module(req)
    replicas = ctx.services.replica_manager
    deletable = authz.authorized_names(ctx, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in req.topics))
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if t.name not in deletable:
                parts.append(build(R, "DeleteRecordsPartitionResult", partition_index=p.partition_index,
                                   low_watermark=-1, error_code=TOPIC_DENIED))
                continue
            low, error, _ = attempt(lambda t=t, p=p: replicas.delete_records(t.name, p.partition_index, p.offset))
            parts.append(build(R, "DeleteRecordsPartitionResult", partition_index=p.partition_index,
                               low_watermark=-1 if low is None else low, error_code=error))
        topics.append(build(R, "DeleteRecordsTopicResult", name=t.name, partitions=tuple(parts)))
    return build(R, "DeleteRecordsResponse", throttle_time=ZERO, topics=tuple(topics))
