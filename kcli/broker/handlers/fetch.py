"""Fetch (key 1)."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import error_code_for
from kcli.broker.fetch_session import FetchContext, forgotten_keys
from kcli.broker.handlers import authz
from kcli.broker.handlers.common import ZERO, RequestContext, build, has_class, ms, response_module
from kcli.broker.quotas import CONSUMER_BYTE_RATE
from kcli.broker.replica_manager import FetchParams, FetchPartition, FetchPartitionResult, ReplicaManager
from kcli.protocol import fetch_record_magic
from kcli.protocol.acl import AclOperation, ResourceType
from kcli.records.convert import downconvert


async def fetch(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    cache = ctx.services.metadata
    infos: list[FetchPartition] = []
    unknown_ids: set[Any] = set()
    for topic in req.topics:
        name = getattr(topic, "topic", None)
        topic_id = getattr(topic, "topic_id", None)
        if name is None and topic_id is not None:
            name = cache.topic_name(topic_id)
            if name is None:
                unknown_ids.add(topic_id)
        for fp in topic.partitions:
            infos.append(FetchPartition(name or "", fp.partition, fp.fetch_offset, fp.partition_max_bytes, topic_id,
                                        current_leader_epoch=getattr(fp, "current_leader_epoch", -1),
                                        last_fetched_epoch=getattr(fp, "last_fetched_epoch", -1),
                                        log_start_offset=getattr(fp, "log_start_offset", -1)))
    replica_id = getattr(req, "replica_id", -1)
    # KIP-227: an incremental fetch names only what changed; the session knows the rest (kcli.broker.fetch_session)
    manager = getattr(ctx.services, "fetch_manager", None)
    session = FetchContext(infos) if manager is None else manager.new_context(
        ctx.api_version, getattr(req, "session_id", 0), getattr(req, "session_epoch", -1), replica_id >= 0, infos,
        forgotten_keys(getattr(req, "forgotten_topics_data", ()), cache.topic_name))
    if session.error != ErrorCode.none:
        return build(R, "FetchResponse", throttle_time=ZERO, error_code=session.error, session_id=0, responses=())
    if session.infos is not infos:
        infos = session.infos
        unknown_ids = {i.topic_id for i in infos if not i.topic and i.topic_id is not None}
    max_bytes, min_bytes = getattr(req, "max_bytes", 0x7FFFFFFF), req.min_bytes
    # client quotas apply to consumers only: follower fetches are replication traffic
    quotas = getattr(ctx.services, "quotas", None) if replica_id < 0 and ctx.charge is not None else None
    if replica_id >= 0 and ctx.charge is not None:
        ctx.charge.request_quota_recorded = True  # a follower's fetch is exempt from the request quota too
    user = ctx.session.principal.name
    if quotas is not None:
        # Kafka caps a consumer's fetch at 10 windows' worth of its quota, so that one fetch is not always
        # throttled (getMaxValueInQuotaWindow)
        cap = quotas.max_value_in_window(CONSUMER_BYTE_RATE, user, ctx.client_id)
        if cap is not None:
            max_bytes = min(max_bytes, int(cap))
            min_bytes = min(min_bytes, max_bytes)
    params = FetchParams(max_wait_ms=ms(req.max_wait), min_bytes=min_bytes, max_bytes=max_bytes,
                         read_committed=getattr(req, "isolation_level", 0) == 1,
                         replica_id=replica_id,
                         # Kafka's clientMetadata (KIP-392): present from v11, which carries the consumer's rack
                         client_rack=(getattr(req, "rack_id", None) or "") if ctx.api_version >= 11 else None)
    # Authorization before existence: a follower (replica_id >= 0) needs CLUSTER_ACTION, a consumer READ on each
    # topic; a denied partition is answered TOPIC_AUTHORIZATION_FAILED and never read (Kafka's "erroneous").
    if params.replica_id >= 0:
        readable = {i.topic for i in infos} if authz.cluster(ctx, AclOperation.CLUSTER_ACTION) else set()
    else:
        readable = authz.authorized_names(ctx, AclOperation.READ, ResourceType.TOPIC,
                                          (i.topic for i in infos if i.topic_id not in unknown_ids))
    denied = [i.topic not in readable and i.topic_id not in unknown_ids for i in infos]
    if any(denied):
        allowed = [i for i, no in zip(infos, denied) if not no]
        fetched = iter(await ctx.services.replica_manager.fetch_messages(params, allowed) if allowed else ())
        results = [FetchPartitionResult(ErrorCode.topic_authorization_failed) if no else next(fetched)
                   for no in denied]
    else:
        results = await ctx.services.replica_manager.fetch_messages(params, infos)
    if quotas is not None:
        throttle = _quota_throttle(ctx, quotas, user, results)
        if throttle > 0:
            # KafkaApis.handleFetchRequest: a fetch whose response would violate the quota (or whose request
            # does) is answered with no data and the throttle time; its bytes come off the rate again
            for result in results:
                close = getattr(result.read.records if result.read is not None else None, "close", None)
                if close is not None:
                    close()
            return build(R, "FetchResponse", throttle_time=datetime.timedelta(milliseconds=throttle),
                         error_code=ErrorCode.none, session_id=session.session_id, responses=())
    magic = fetch_record_magic(ctx.api_version)
    if magic < 2:  # Fetch v0-v3: the stored v2 batches as magic 0/1 message sets (reads files, compresses)
        results = await asyncio.to_thread(_down_convert_all, ctx.services.replica_manager, params, infos, results,
                                          magic)
    error, session_id, include = session.respond(results)
    if not all(include):  # an incremental answer: only what the client has not been told
        _close_all([r for r, keep in zip(results, include) if not keep])
        infos = [i for i, keep in zip(infos, include) if keep]
        results = [r for r, keep in zip(results, include) if keep]
    stats = getattr(ctx.services, "metrics", None)
    if stats is not None:  # Kafka's updateBytesOut: BytesOut for consumers, ReplicationBytesOut for followers
        follower = params.replica_id >= 0
        for info, result in zip(infos, results):
            stats.fetched(info.topic, len(result.read.records) if result.read is not None else 0,
                          follower=follower, failed=result.error != ErrorCode.none)
    by_topic: dict[tuple[str, Any], list[Any]] = {}
    order: list[tuple[str, Any]] = []
    for info, result in zip(infos, results):
        key = (info.topic, info.topic_id)
        if key not in by_topic:
            by_topic[key] = []
            order.append(key)
        partition_error = result.error  # not `error`: that is the session's, the response's top-level code
        if info.topic_id in unknown_ids:
            partition_error = ErrorCode.unknown_topic_id
        read = result.read
        aborted = None
        if read is not None and read.aborted is not None:
            aborted = tuple(build(R, "AbortedTransaction", producer_id=t.producer_id, first_offset=t.first_offset)
                            for t in read.aborted)
        diverging = None
        if read is not None and read.diverging_epoch is not None and has_class(R, "EpochEndOffset"):
            diverging = build(R, "EpochEndOffset", epoch=read.diverging_epoch[0], end_offset=read.diverging_epoch[1])
        # Records are never null: librdkafka cannot parse a null record set ("invalid MessageSetSize -1") and
        # would retry forever instead of applying auto.offset.reset; Kafka sends an empty one with errors.
        by_topic[key].append(build(
            R, "PartitionData", partition_index=info.partition, error_code=partition_error,
            high_watermark=read.high_watermark if read else -1,
            last_stable_offset=read.last_stable_offset if read else -1,
            log_start_offset=read.log_start_offset if read else -1,
            aborted_transactions=aborted, preferred_read_replica=result.preferred_read_replica,
            **({"diverging_epoch": diverging} if diverging is not None else {}),
            records=read.records if read is not None else b""))
    # A topic is named up to v12 and by id from v13: only the version's field, so build() has nothing to drop
    # (which would load every version of the message once, a quarter second, on the broker's first Fetch)
    topics = tuple(build(R, "FetchableTopicResponse", partitions=tuple(by_topic[(name, topic_id)]),
                         **({"topic": name} if ctx.api_version < 13 else {"topic_id": topic_id}))
                   for name, topic_id in order)
    return build(R, "FetchResponse", throttle_time=ZERO, error_code=error, session_id=session_id, responses=topics)


_PARTITION_OVERHEAD = 40  # a partition's fields in a Fetch response, about (FetchResponse.sizeOf)


def _quota_throttle(ctx: RequestContext, quotas: Any, user: str, results: list[FetchPartitionResult]) -> int:
    """The response's size into the fetch quota, the handler time into the request quota; the larger throttle.
    A throttled fetch's bytes are unrecorded (it is answered empty)."""
    size = 16 + sum(_PARTITION_OVERHEAD + (len(r.read.records) if r.read is not None else 0) for r in results)
    bandwidth = quotas.record(CONSUMER_BYTE_RATE, user, ctx.client_id, size)
    request = quotas.record_request_time(user, ctx.client_id, ctx.charge.thread_ns)
    ctx.charge.request_quota_recorded = True
    throttle = max(bandwidth, request)
    if throttle > 0:
        quotas.unrecord(CONSUMER_BYTE_RATE, user, ctx.client_id, size)
        ctx.charge.throttle(throttle)
    return throttle


def _close_all(results: list[FetchPartitionResult]) -> None:
    for result in results:
        close = getattr(result.read.records if result.read is not None else None, "close", None)
        if close is not None:
            close()


def _down_convert_all(replicas: ReplicaManager, params: FetchParams, infos: list[FetchPartition],
                      results: list[FetchPartitionResult], magic: int) -> list[FetchPartitionResult]:
    """Kafka's KafkaApis.maybeConvertFetchedData for Fetch v0-v3 (message format v2 on disk, so always): each
    partition's records become a magic ``magic`` message set (``kcli.records.convert.downconvert``: offsets kept,
    compressed batches as one wrapper of the same codec). Instead, with no records and the high watermark -1 as
    Kafka's ``FetchResponse.partitionResponse`` has them: UNSUPPORTED_COMPRESSION_TYPE for a zstd topic (zstd needs
    Fetch v10) or a zstd batch, UNSUPPORTED_VERSION for a client's fetch where message.downconversion.enable is
    false. The segment file each read kept open is closed here."""
    return [_down_convert(replicas, params, info, result, magic) for info, result in zip(infos, results)]


def _down_convert(replicas: ReplicaManager, params: FetchParams, info: FetchPartition, result: FetchPartitionResult,
                  magic: int) -> FetchPartitionResult:
    if result.error == ErrorCode.topic_authorization_failed:
        return result  # nothing read, and nothing about the topic (its compression) may show
    read = result.read
    records = read.records if read is not None else b""
    try:
        raw = records.read() if hasattr(records, "read") else bytes(records)
    finally:
        if hasattr(records, "close"):
            records.close()
    partition = replicas.find(info.topic, info.partition)
    config = partition.log.config if partition is not None else None
    if config is not None and config.compression_type == "zstd":
        return FetchPartitionResult(ErrorCode.unsupported_compression_type)
    if config is not None and params.replica_id < 0 and not config.message_downconversion_enable:
        return FetchPartitionResult(ErrorCode.unsupported_version)
    if read is None or not raw:
        return result
    try:
        read.records = downconvert(raw, magic, info.fetch_offset)
    except Exception as exc:  # UnsupportedCompressionTypeError: a zstd batch of compression.type=producer
        return FetchPartitionResult(error_code_for(exc))
    return result
