"""Fetch (key 1)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers.common import ZERO, RequestContext, build, has_class, ms, response_module
from kcli.broker.replica_manager import FetchParams, FetchPartition


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
    params = FetchParams(max_wait_ms=ms(req.max_wait), min_bytes=req.min_bytes,
                         max_bytes=getattr(req, "max_bytes", 0x7FFFFFFF),
                         read_committed=getattr(req, "isolation_level", 0) == 1,
                         replica_id=getattr(req, "replica_id", -1))
    results = await ctx.services.replica_manager.fetch_messages(params, infos)
    by_topic: dict[tuple[str, Any], list[Any]] = {}
    order: list[tuple[str, Any]] = []
    for info, result in zip(infos, results):
        key = (info.topic, info.topic_id)
        if key not in by_topic:
            by_topic[key] = []
            order.append(key)
        error = result.error
        if info.topic_id in unknown_ids:
            error = ErrorCode.unknown_topic_id
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
            R, "PartitionData", partition_index=info.partition, error_code=error,
            high_watermark=read.high_watermark if read else -1,
            last_stable_offset=read.last_stable_offset if read else -1,
            log_start_offset=read.log_start_offset if read else -1,
            aborted_transactions=aborted, preferred_read_replica=-1,
            **({"diverging_epoch": diverging} if diverging is not None else {}),
            records=read.records if read is not None else b""))
    topics = tuple(build(R, "FetchableTopicResponse", topic=name, topic_id=topic_id, partitions=tuple(by_topic[(name, topic_id)]))
                   for name, topic_id in order)
    return build(R, "FetchResponse", throttle_time=ZERO, error_code=ErrorCode.none, session_id=0, responses=topics)
