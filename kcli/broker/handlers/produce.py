"""Produce (key 0)."""

from __future__ import annotations

import datetime
from typing import Any

from kcli.broker.handlers.common import ZERO, RequestContext, build, build_all, ms, response_module


async def produce(ctx: RequestContext, req: Any) -> Any | None:
    R = response_module(req)
    entries = {(topic.name, pd.index): bytes(pd.records or b"") for topic in req.topic_data
               for pd in topic.partition_data}
    results = await ctx.services.replica_manager.append_and_wait(req.acks, ms(req.timeout), entries)
    if req.acks == 0:
        return None  # acks=0: the producer reads no response, so none is sent
    topics = []
    for topic in req.topic_data:
        parts = []
        for pd in topic.partition_data:
            r = results[(topic.name, pd.index)]
            parts.append(build(
                R, "PartitionProduceResponse", index=pd.index, error_code=r.error, base_offset=r.base_offset,
                log_append_time=None if r.log_append_time < 0 else
                datetime.datetime.fromtimestamp(r.log_append_time / 1000, tz=datetime.timezone.utc),
                log_start_offset=r.log_start_offset, error_message=r.message,
                record_errors=build_all(R, "BatchIndexAndErrorMessage", (
                    dict(batch_index=i, batch_index_error_message=m) for i, m in r.record_errors))))
        topics.append(build(R, "TopicProduceResponse", name=topic.name, partition_responses=tuple(parts)))
    return build(R, "ProduceResponse", responses=tuple(topics), throttle_time=ZERO)
