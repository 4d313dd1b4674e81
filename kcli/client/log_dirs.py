"""Log directories of a cluster's brokers: DescribeLogDirs (35) to each broker, as kafka-log-dirs --describe.

DescribeLogDirs answers for the broker it is sent to, so the client asks every broker (or the listed ones) and
keeps a broker it cannot reach as an error of that broker, not of the whole answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client.client import KafkaClient, KafkaClientError, _build, error_name
from kcli.client.topics import request_module
from kcli.protocol import ApiKey


@dataclass(frozen=True)
class LogDirPartition:
    topic: str
    partition: int
    size: int
    offset_lag: int
    is_future: bool

    def to_json(self) -> dict[str, Any]:
        # kafka-log-dirs' keys ("partition" is topic-partition, as Kafka's TopicPartition prints)
        return {"partition": f"{self.topic}-{self.partition}", "size": self.size, "offsetLag": self.offset_lag,
                "isFuture": self.is_future}


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
                      topics: Sequence[str] | None = None) -> list[BrokerLogDirs]:
    """Every (or each listed) broker's log dirs with the partitions in them (only ``topics``' when given)."""
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
    return out


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
