"""Log directories of a cluster's brokers: DescribeLogDirs (35) to each broker, as kafka-log-dirs --describe.

DescribeLogDirs answers for the broker it is sent to, so the client asks every broker (or the listed ones) and
keeps a broker it cannot reach as an error of that broker, not of the whole answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client.client import KafkaClient, KafkaClientError, _build, error_name
from kcli.client.topics import request_module
from kcli.protocol import ApiKey

EARLIEST_LOCAL = -4  # ListOffsets' EARLIEST_LOCAL_TIMESTAMP (KIP-1005): the local log start offset


@dataclass(frozen=True)
class LogDirPartition:
    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool
    # tiered storage (KIP-405), with remote sizes asked: the partition's finished remote copies (from
    # __remote_log_metadata) and its local log start offset (ListOffsets EARLIEST_LOCAL, KIP-1005); None: not asked
    # or not known
    remote_size: int | None = None
    remote_segments: int | None = None
    local_log_start_offset: int | None = None

    def to_json(self) -> dict[str, Any]:
        # kafka-log-dirs' keys ("partition" is topic-partition, as Kafka's TopicPartition prints)
        out: dict[str, Any] = {"partition": f"{self.topic}-{self.partition}", "size": self.size,
                               "offsetLag": self.offset_lag, "isFuture": self.is_future}
        if self.remote_size is not None:
            out["remoteSize"] = self.remote_size
            out["remoteSegments"] = self.remote_segments
        if self.local_log_start_offset is not None:
            out["localLogStartOffset"] = self.local_log_start_offset
        return out


@dataclass
class LogDir:
    path: str
    error: str | None
    partitions: list[LogDirPartition] = field(default_factory=list)
    total_bytes: int = -1  # the volume's, v4+ (-1: the broker did not say)
    usable_bytes: int = -1

    @property
    def size(self) -> int:
        return sum(p.size for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"logDir": self.path, "error": self.error,
                               "partitions": [p.to_json() for p in self.partitions]}
        if self.total_bytes >= 0:
            out["totalBytes"] = self.total_bytes
            out["usableBytes"] = self.usable_bytes
        return out


@dataclass
class BrokerLogDirs:
    broker: int
    error: str | None
    log_dirs: list[LogDir] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"broker": self.broker, "logDirs": [d.to_json() for d in self.log_dirs]}
        if self.error is not None:
            out["error"] = self.error
        return out


def describe_log_dirs(client: KafkaClient, *, brokers: Sequence[int] | None = None,
                      topics: Sequence[str] | None = None, remote_sizes: bool = False) -> list[BrokerLogDirs]:
    """Every (or each listed) broker's log dirs with the partitions in them (only ``topics``' when given).
    ``remote_sizes``: also each partition's remote size (tiered storage: a read of ``__remote_log_metadata``) and
    its local log start offset (ListOffsets EARLIEST_LOCAL to its leader)."""
    known = client.metadata(list(topics) if topics is not None else [])
    wanted_topics: dict[str, list[int]] | None = None
    if topics is not None:
        wanted_topics = {t: sorted(meta.partitions) for t, meta in known.topics.items() if t in set(topics)}
    ids = sorted(known.brokers) if brokers is None else list(brokers)
    out = []
    for broker in ids:
        if broker not in known.brokers:
            out.append(BrokerLogDirs(broker, f"broker {broker} is not in the cluster's metadata"))
            continue
        try:
            out.append(_describe_one(client, broker, wanted_topics))
        except KafkaClientError as exc:
            out.append(BrokerLogDirs(broker, exc.reason))
    if remote_sizes:
        add_remote_sizes(client, out)
    return out


def add_remote_sizes(client: KafkaClient, brokers: list[BrokerLogDirs]) -> None:
    """Fill in each partition's remote size and segment count (from ``__remote_log_metadata``: nothing when the
    cluster has no tiered storage) and its local log start offset (where the leader answers EARLIEST_LOCAL, -4)."""
    from kcli.client.offsets_time import offsets_for_time
    from kcli.client.remote_log import read_remote_sizes

    listed = sorted({(p.topic, p.partition) for b in brokers for d in b.log_dirs for p in d.partitions})
    if not listed:
        return
    sizes = read_remote_sizes(client, {t for t, _ in listed})
    local_start: dict[tuple[str, int], int] = {}
    if sizes.available:
        tiered = sorted({tp for tp in listed if tp in sizes.partitions})
        if tiered:
            try:
                for o in offsets_for_time(client, tiered, EARLIEST_LOCAL):
                    if o.error is None and o.offset >= 0:
                        local_start[(o.topic, o.partition)] = o.offset
            except KafkaClientError:
                pass  # an older broker without KIP-1005: no local start offsets, the sizes still shown
    for broker in brokers:
        for log_dir in broker.log_dirs:
            filled = []
            for p in log_dir.partitions:
                remote = sizes.get(p.topic, p.partition)
                filled.append(replace(p, remote_size=remote.size if remote else 0,
                                      remote_segments=remote.segments if remote else 0,
                                      local_log_start_offset=local_start.get((p.topic, p.partition)))
                              if sizes.available else p)
            log_dir.partitions = filled


def _describe_one(client: KafkaClient, broker: int, topics: dict[str, list[int]] | None) -> BrokerLogDirs:
    connection = client._node(broker)
    version, m = request_module(connection, ApiKey.DESCRIBE_LOG_DIRS)
    wanted = None if topics is None else tuple(
        _build(m, "DescribableLogDirTopic", topic=t, partitions=tuple(ps)) for t, ps in sorted(topics.items()))
    body = connection.call(ApiKey.DESCRIBE_LOG_DIRS, _build(m, "DescribeLogDirsRequest", topics=wanted))
    top = getattr(body, "error_code", ErrorCode.none)
    if top != ErrorCode.none:
        return BrokerLogDirs(broker, f"DescribeLogDirsResponse v{version} error_code: {error_name(top)}")
    result = BrokerLogDirs(broker, None)
    for entry in body.results:
        log_dir = LogDir(entry.log_dir, None if entry.error_code == ErrorCode.none else error_name(entry.error_code),
                         total_bytes=int(getattr(entry, "total_bytes", -1)),
                         usable_bytes=int(getattr(entry, "usable_bytes", -1)))
        for topic in entry.topics:
            for p in topic.partitions:
                log_dir.partitions.append(LogDirPartition(topic.name, int(p.partition_index), int(p.partition_size),
                                                          int(p.offset_lag), bool(p.is_future_key)))
        log_dir.partitions.sort(key=lambda p: (p.topic, p.partition))
        result.log_dirs.append(log_dir)
    return result
