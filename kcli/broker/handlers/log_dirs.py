"""AlterReplicaLogDirs (34) and DescribeLogDirs (35): moving a replica between this broker's log dirs, and each
log directory with the partitions in it, their sizes and offset lags (KIP-113; Kafka's KafkaApis.
handleAlterReplicaLogDirsRequest / handleDescribeLogDirsRequest, ReplicaManager.alterReplicaLogDirs /
describeLogDirs).

AlterReplicaLogDirs needs ALTER on the cluster (else every partition is CLUSTER_AUTHORIZATION_FAILED); the move
itself is kcli.broker.alter_log_dirs'. Sizes are the sum of the partition's segment files; the offset lag of a
current log is Kafka's ``max(high watermark - log end offset, 0)``, of a future log (IsFutureKey, a move in
progress) the current log end offset minus its own. v4 adds the volume's total and usable bytes (KIP-827). A
principal without DESCRIBE on the cluster gets no directories, and from v3 on the top-level
CLUSTER_AUTHORIZATION_FAILED.
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


async def alter_replica_log_dirs(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    wanted: dict[tuple[str, int], str] = {}
    for entry in req.dirs:
        for topic in entry.topics:
            for p in topic.partitions:
                wanted[(topic.name, int(p))] = entry.path  # named twice: the last dir wins (Kafka's map)
    if not authz.cluster(ctx, AclOperation.ALTER):
        codes = dict.fromkeys(wanted, ErrorCode.cluster_authorization_failed)
    else:
        mover = ctx.services.replica_manager.alter_log_dirs
        codes = await asyncio.to_thread(mover.alter_replica_log_dirs, wanted)  # file work: off the event loop
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), code in codes.items():
        by_topic.setdefault(topic, []).append(
            build(R, "AlterReplicaLogDirPartitionResult", partition_index=index, error_code=code))
    return build(R, "AlterReplicaLogDirsResponse", throttle_time=ZERO, results=tuple(
        build(R, "AlterReplicaLogDirTopicResult", topic_name=topic, partitions=tuple(parts))
        for topic, parts in by_topic.items()))


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
                      is_future_key=future) for index, size, lag, future in sorted(partitions)))
                for name, partitions in sorted(topics.items()))))
    return build(R, "DescribeLogDirsResponse", throttle_time=ZERO, error_code=ErrorCode.none,
                 results=tuple(results))


def _describe(ctx: RequestContext, wanted: dict[str, set[int]] | None
              ) -> dict[Path, tuple[dict[str, list[tuple[int, int, int, bool]]], int, int]]:
    services = ctx.services
    out: dict[Path, tuple[dict[str, list[tuple[int, int, int, bool]]], int, int]] = {}
    for directory in services.log_manager.log_dirs:
        absolute = directory.resolve()
        try:
            stat = os.statvfs(absolute)
            total, usable = stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize
        except OSError:
            total = usable = -1
        out[absolute] = ({}, total, usable)
    # the future logs before the current ones: a swap in between shows the replica moving still, never back
    futures = list(services.log_manager.future_logs.items())
    for managed in services.log_manager.all_partitions():
        if wanted is not None and managed.index not in wanted.get(managed.topic, ()):
            continue
        try:
            log, size = managed.log, _size(managed.log)
        except OSError:
            # a segment deleted meanwhile (retention), or the log renamed by a swap between log dirs: the swap
            # holds the log's lock, and after it the log is the moved one (Kafka reads sizes kept in memory)
            with managed.lock:
                log = managed.log
                try:
                    size = _size(log)
                except OSError:  # deleted (a topic deletion): the next answer has it right
                    continue
        partition = services.replica_manager.find(managed.topic, managed.index)
        high_watermark = partition.high_watermark if partition is not None else log.log_end_offset
        lag = max(high_watermark - log.log_end_offset, 0)
        entry = out.get(log.directory.parent.resolve())
        if entry is not None:
            entry[0].setdefault(managed.topic, []).append((managed.index, size, lag, False))
    for (topic, index), future in futures:
        if wanted is not None and index not in wanted.get(topic, ()):
            continue
        current = services.log_manager.partition(topic, index)
        try:
            size = _size(future.log)
        except OSError:  # swapped in or given up meanwhile
            continue
        lag = current.log.log_end_offset - future.log.log_end_offset if current is not None else -1
        entry = out.get(future.directory.parent.resolve())
        if entry is not None:
            entry[0].setdefault(topic, []).append((index, size, lag, True))
    return out


def _size(log: Any) -> int:
    """The log's bytes: its inactive segments' sizes are stat calls (OSError when a file went away)."""
    return sum(segment.size for segment in list(log.log_segments))
