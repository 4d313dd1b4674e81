"""A consumer group as kafka-consumer-groups --describe shows it: members with their assignment (decoded from
the consumer protocol's MemberAssignment), and per partition the committed offset, log range and lag.

The one model of both paths: kcli.client.groups fills it from a cluster (DescribeGroups, OffsetFetch,
ListOffsets), kcli.tools.groups from a stopped broker's ``__consumer_offsets`` and segments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kcli.errors import KcliError
from kcli.records.consumer_offsets import CONSUMER_PROTOCOL_TYPE, decode_assignment

TopicPartition = tuple[str, int]
Offsets = dict[TopicPartition, int]


@dataclass(frozen=True)
class MemberInfo:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: tuple[TopicPartition, ...] | None  # None: not the consumer protocol, or undecodable
    assignment_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "assignment": None if self.assignment is None else
                [{"topic": t, "partition": p} for t, p in self.assignment],
                "assignment_error": self.assignment_error}


@dataclass(frozen=True)
class PartitionLag:
    """One row of kafka-consumer-groups --describe: a partition (assigned, committed, or both), or (topic None)
    a member without partitions."""

    topic: str | None
    partition: int | None
    committed_offset: int | None
    log_start_offset: int | None
    log_end_offset: int | None
    member_id: str | None
    client_id: str | None
    client_host: str | None

    @property
    def lag(self) -> int | None:
        if self.committed_offset is None or self.log_end_offset is None:
            return None
        return max(0, self.log_end_offset - self.committed_offset)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "committed_offset": self.committed_offset,
                "log_start_offset": self.log_start_offset, "log_end_offset": self.log_end_offset, "lag": self.lag,
                "member_id": self.member_id, "client_id": self.client_id, "client_host": self.client_host}


@dataclass
class GroupDetails:
    group: str
    state: str
    protocol_type: str
    protocol: str
    coordinator_id: int | None
    coordinator: str | None
    offsets_topic_partition: int | None  # the __consumer_offsets partition holding the group
    offsets_topic_partitions: int | None  # its partition count (offsets.topic.num.partitions)
    members: list[MemberInfo] = field(default_factory=list)
    partitions: list[PartitionLag] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    source: str = "kafka"  # "log-dir" when read offline

    @property
    def exists(self) -> bool:
        return self.state != "Dead" or any(p.committed_offset is not None for p in self.partitions)

    @property
    def total_lag(self) -> int | None:
        lags = [p.lag for p in self.partitions if p.lag is not None]
        return sum(lags) if lags else None

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "exists": self.exists, "state": self.state,
                "protocol_type": self.protocol_type, "protocol": self.protocol,
                "coordinator_id": self.coordinator_id, "coordinator": self.coordinator,
                "offsets_topic_partition": self.offsets_topic_partition,
                "offsets_topic_partitions": self.offsets_topic_partitions, "total_lag": self.total_lag,
                "members": [m.to_json() for m in self.members],
                "partitions": [p.to_json() for p in self.partitions], "notes": self.notes, "source": self.source}


def decode_member_assignment(protocol_type: str, data: bytes | None) -> tuple[tuple[TopicPartition, ...] | None,
                                                                              str | None]:
    """A member's partitions from the consumer protocol's MemberAssignment bytes; (None, why) for other protocols
    (Kafka Connect's workers, ...) and undecodable bytes."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return None, None
    if not data:
        return (), None
    try:
        assignment = decode_assignment(bytes(data))
    except (KcliError, ValueError, IndexError) as exc:
        return None, f"undecodable MemberAssignment: {exc}"
    return tuple(sorted((tp.topic, p) for tp in assignment.assigned_partitions for p in tp.partitions)), None


def lag_rows(members: Sequence[MemberInfo], committed: Offsets,
             ranges: dict[TopicPartition, tuple[int, int]]) -> list[PartitionLag]:
    """kafka-consumer-groups --describe's rows: each assigned partition with its member, each committed partition
    nobody is assigned, and each member without partitions (topic None)."""
    rows: dict[TopicPartition, PartitionLag] = {}
    idle = []
    for m in members:
        for tp in m.assignment or ():
            start, end = ranges.get(tp, (None, None))
            rows[tp] = PartitionLag(tp[0], tp[1], committed.get(tp), start, end, m.member_id, m.client_id,
                                    m.client_host)
        if not m.assignment:
            idle.append(PartitionLag(None, None, None, None, None, m.member_id, m.client_id, m.client_host))
    for tp, offset in committed.items():
        if tp not in rows:
            start, end = ranges.get(tp, (None, None))
            rows[tp] = PartitionLag(tp[0], tp[1], offset, start, end, None, None, None)
    return [rows[tp] for tp in sorted(rows)] + idle
