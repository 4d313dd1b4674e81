"""ListOffsets (key 2)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import error_code_for
from kcli.broker.handlers.common import ZERO, RequestContext, build, response_module
from kcli.broker.partition import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP


async def list_offsets(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    replicas = ctx.services.replica_manager
    read_committed = getattr(req, "isolation_level", 0) == 1
    topics = []
    for topic in req.topics:
        parts = []
        for lp in topic.partitions:
            values: dict[str, Any] = dict(partition_index=lp.partition_index, timestamp=-1, offset=-1,
                                          leader_epoch=-1, old_style_offsets=())
            try:
                partition = replicas.get_partition(topic.name, lp.partition_index)
                if lp.timestamp == LATEST_TIMESTAMP and read_committed:
                    values["offset"] = partition.last_stable_offset  # KIP-98: the LSO for read_committed
                else:
                    match = partition.offset_for_timestamp(lp.timestamp)
                    if match is not None:
                        values.update(offset=match.offset, timestamp=match.timestamp)
                values["leader_epoch"] = partition.leader_epoch
                if lp.timestamp in (LATEST_TIMESTAMP, EARLIEST_TIMESTAMP):
                    values["timestamp"] = -1
                values["old_style_offsets"] = (values["offset"],) if values["offset"] >= 0 else ()
                error = ErrorCode.none
            except Exception as exc:
                error = error_code_for(exc)
            parts.append(build(R, "ListOffsetsPartitionResponse", error_code=error, **values))
        topics.append(build(R, "ListOffsetsTopicResponse", name=topic.name, partitions=tuple(parts)))
    return build(R, "ListOffsetsResponse", throttle_time=ZERO, topics=tuple(topics))
