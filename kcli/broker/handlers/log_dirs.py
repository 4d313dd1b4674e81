"""DescribeLogDirs (35): each log directory of this broker, the partitions in it, their sizes and offset lags
(KIP-113; Kafka's KafkaApis.handleDescribeLogDirsRequest and LogManager/ReplicaManager.describeLogDirs).

Sizes are the sum of the partition's segment files; the offset lag of a current (not future) log is Kafka's
``max(high watermark - log end offset, 0)``, so 0 for every log this broker hosts (kctl has no future logs yet:
AlterReplicaLogDirs is not served). v4 adds the volume's total and usable bytes (KIP-827). A principal without
DESCRIBE on the cluster gets no directories, and from v3 on the top-level CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers import authz
from kcli.broker.handlers.common import ZERO, RequestContext, build, response_module
from kcli.protocol.acl import AclOperation


async def describe_log_dirs(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    if not authz.cluster(ctx, AclOperation.DESCRIBE):
        # v1-v2 have no top-level error code: no directories is the whole answer (build drops the field)
        return build(R, "DescribeLogDirsResponse", throttle_time=ZERO,
                     error_code=ErrorCode.cluster_authorization_failed, results=())
    wanted: dict[str, set[int]] | None = None
    if req.topics is not None:
        wanted = {}
        for topic in req.topics:
            wanted.setdefault(topic.topic, set()).update(int(p) for p in topic.partitions)
    # Inactive segments' sizes are stat calls: thousands of partitions stay off the event loop.
    dirs = await asyncio.to_thread(_describe, ctx, wanted)
    results = []
    for directory, (topics, total, usable) in dirs.items():
        results.append(build(
            R, "DescribeLogDirsResult", error_code=ErrorCode.none, log_dir=str(directory),
            total_bytes=total, usable_bytes=usable,
            topics=tuple(build(R, "DescribeLogDirsTopic", name=name, partitions=tuple(
                build(R, "DescribeLogDirsPartition", partition_index=index, partition_size=size, offset_lag=lag,
                      is_future_key=False) for index, size, lag in sorted(partitions)))
                for name, partitions in sorted(topics.items()))))
    return build(R, "DescribeLogDirsResponse", throttle_time=ZERO, error_code=ErrorCode.none,
                 results=tuple(results))


def _describe(ctx: RequestContext, wanted: dict[str, set[int]] | None
              ) -> dict[Path, tuple[dict[str, list[tuple[int, int, int]]], int, int]]:
    services = ctx.services
    out: dict[Path, tuple[dict[str, list[tuple[int, int, int]]], int, int]] = {}
    for directory in services.log_manager.log_dirs:
        absolute = directory.resolve()
        try:
            stat = os.statvfs(absolute)
            total, usable = stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize
        except OSError:
            total = usable = -1
        out[absolute] = ({}, total, usable)
    for managed in services.log_manager.all_partitions():
        if wanted is not None and managed.index not in wanted.get(managed.topic, ()):
            continue
        log = managed.log
        try:
            size = sum(segment.size for segment in list(log.log_segments))
        except OSError:  # a segment deleted meanwhile (retention, a topic deletion): the next answer has it right
            continue
        partition = services.replica_manager.find(managed.topic, managed.index)
        high_watermark = partition.high_watermark if partition is not None else log.log_end_offset
        lag = max(high_watermark - log.log_end_offset, 0)
        entry = out.get(log.directory.parent.resolve())
        if entry is not None:
            entry[0].setdefault(managed.topic, []).append((managed.index, size, lag))
    return out
