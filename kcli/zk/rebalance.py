"""The old ZooKeeper consumer's range assignment (kafka.consumer.RangeAssignor, Kafka 0.8-1.1), and a check of
a group's owner registry (``/consumers/<group>/owners/<topic>/<partition>``) against it.

Per topic: the partitions sorted by number, the consumer thread ids ``<consumerId>-<n>`` (n < the stream count
in the consumer's ``/consumers/<group>/ids/<consumerId>`` subscription) sorted as strings
(ConsumerThreadId.compare compares toString); nPartsPerConsumer = nParts / nThreads, nConsumersWithExtraPart
= nParts % nThreads; thread i gets nPartsPerConsumer + (0 if i + 1 > nConsumersWithExtraPart else 1)
partitions starting at nPartsPerConsumer * i + min(i, nConsumersWithExtraPart). The first threads take the
extra partitions. Wildcard subscriptions (pattern white_list/black_list) match topic names with the regex.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kcli.zk import models, paths
from kcli.zk.registry import CONSUMERS, ZkRegistry, ZnodeMissingError

OK, UNOWNED, WRONG_OWNER, ORPHANED, DOUBLE_OWNED = "ok", "unowned", "wrong-owner", "orphaned", "double-owned"


def thread_ids(consumer_id: str, streams: int) -> list[str]:
    return [f"{consumer_id}-{n}" for n in range(streams)]


def range_assign(partitions: list[int], threads: list[str]) -> dict[int, str]:
    """One topic's partitions over its consumer threads, exactly as RangeAssignor.assign."""
    parts = sorted(partitions)
    consumers = sorted(threads)
    if not consumers:
        return {}
    per, extra = divmod(len(parts), len(consumers))
    out = {}
    for position, thread in enumerate(consumers):
        start = per * position + min(position, extra)
        count = per + (0 if position + 1 > extra else 1)
        for i in range(start, start + count):
            out[parts[i]] = thread
    return out


def subscribed_topics(member: models.ConsumerRegistration, topics: list[str]) -> dict[str, int]:
    """Topic -> stream count for one member (static: as written; white_list/black_list: regex over topics)."""
    if member.pattern == "static":
        return dict(member.subscription)
    out: dict[str, int] = {}
    for regex, streams in member.subscription.items():
        # kafka.consumer.TopicFilter: "," means "|" and spaces are dropped; internal topics are excluded.
        pattern = re.compile(regex.replace(",", "|").replace(" ", ""))
        for topic in topics:
            if topic.startswith("__"):
                continue
            matches = pattern.fullmatch(topic) is not None
            if matches == (member.pattern == "white_list"):
                out[topic] = streams
    return out


def expected_assignment(members: list[models.ConsumerRegistration], partitions: dict[str, list[int]]
                        ) -> dict[tuple[str, int], str]:
    threads_per_topic: dict[str, list[str]] = {}
    for member in members:
        for topic, streams in subscribed_topics(member, sorted(partitions)).items():
            threads_per_topic.setdefault(topic, []).extend(thread_ids(member.consumer_id, streams))
    out = {}
    for topic, threads in threads_per_topic.items():
        for partition, thread in range_assign(partitions.get(topic, []), threads).items():
            out[(topic, partition)] = thread
    return out


@dataclass(frozen=True)
class OwnerCheck:
    topic: str
    partition: int
    expected_owner: str | None
    owners: tuple[str, ...]  # what /consumers/G/owners/T/P says (more than one: several znodes name P)
    status: str
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "expected_owner": self.expected_owner,
                "owner": self.owners[0] if len(self.owners) == 1 else (list(self.owners) or None),
                "status": self.status, "reason": self.reason}


@dataclass
class RebalanceCheck:
    group: str
    members: list[str]
    threads: list[str]
    partitions: list[OwnerCheck] = field(default_factory=list)

    @property
    def disagreements(self) -> list[OwnerCheck]:
        return [p for p in self.partitions if p.status != OK]

    @property
    def ok(self) -> bool:
        return not self.disagreements

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "ok": self.ok, "members": self.members, "threads": self.threads,
                "disagreements": len(self.disagreements), "partitions": [p.to_json() for p in self.partitions]}


def check_owners(group: str, members: list[models.ConsumerRegistration], partitions: dict[str, list[int]],
                 owners: dict[tuple[str, int], list[str]]) -> RebalanceCheck:
    """Compare the owner registry with the range assignment of the registered members over the partitions."""
    expected = expected_assignment(members, partitions)
    threads = sorted({t for m in members for topic, n in subscribed_topics(m, sorted(partitions)).items()
                      for t in thread_ids(m.consumer_id, n)})
    known = set(threads)
    result = RebalanceCheck(group, sorted(m.consumer_id for m in members), threads)
    for topic, partition in sorted(set(expected) | set(owners)):
        want = expected.get((topic, partition))
        have = tuple(owners.get((topic, partition), ()))
        if len(have) > 1:
            status, reason = DOUBLE_OWNED, f"{len(have)} owner znodes name partition {partition}"
        elif not have:
            status, reason = UNOWNED, f"{want} should own it"
        elif have[0] not in known:
            status, reason = ORPHANED, f"{have[0]} is not a registered consumer thread"
        elif want is None:
            status, reason = ORPHANED, ("the partition does not exist" if partition not in partitions.get(topic, [])
                                        else "no registered consumer is assigned this partition")
        elif have[0] != want:
            status, reason = WRONG_OWNER, f"{want} should own it"
        else:
            status, reason = OK, None
        result.partitions.append(OwnerCheck(topic, partition, want, have, status, reason))
    return result


def read_and_check(registry: ZkRegistry, group: str) -> RebalanceCheck:
    """Read the group's members and owners and the subscribed topics' partitions, then check_owners."""
    base = paths.child(CONSUMERS, group)
    view = registry.consumer_group(group)  # members (parsed); a missing group raises ZnodeMissingError
    owners: dict[tuple[str, int], list[str]] = {}
    owners_dir = f"{base}/owners"
    for topic in registry._children_or_empty(owners_dir):
        topic_dir = paths.child(owners_dir, topic)
        for name in registry._children_or_empty(topic_dir):
            path = paths.child(topic_dir, name)
            if not name.isascii() or not name.isdigit():
                raise models.ZnodeFormatError(f"{name!r} is not a partition number", path=registry._where(path))
            data = registry._data_or_none(path)
            if data is not None:
                owners.setdefault((topic, int(name)), []).append(models.parse_owner(registry._where(path), data))
    all_topics = registry.topic_names()
    wanted = {t for m in view.members for t in subscribed_topics(m, all_topics)} | {t for t, _ in owners}
    partitions: dict[str, list[int]] = {}
    for topic in sorted(wanted):
        path = paths.topic(topic)
        try:
            assignment = models.parse_topic(registry._where(path), registry._data(path), topic)
        except ZnodeMissingError:
            partitions[topic] = []
            continue
        partitions[topic] = sorted(assignment.partitions)
    return check_owners(group, list(view.members), partitions, owners)
