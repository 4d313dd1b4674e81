"""The old ZooKeeper consumer's range assignment (kafka.consumer.RangeAssignor, Kafka 0.8-1.1), and a check of
a group's owner registry (``/consumers/<group>/owners/<topic>/<partition>``) against it.

Per topic: the partitions sorted by number, the consumer thread ids ``<consumerId>-<n>`` (n < the stream count
in the consumer's ``/consumers/<group>/ids/<consumerId>`` subscription) sorted as strings
(ConsumerThreadId.compare compares toString); nPartsPerConsumer = nParts / nThreads, nConsumersWithExtraPart
= nParts % nThreads; thread i gets nPartsPerConsumer + (0 if i + 1 > nConsumersWithExtraPart else 1)
partitions starting at nPartsPerConsumer * i + min(i, nConsumersWithExtraPart). The first threads take the
extra partitions. Wildcard subscriptions (pattern white_list/black_list) match topic names with the regex.
pykafka's BalancedConsumer groups (their own layout, kcli.records.old_consumer) are checked against pykafka's
range assignment: per topic, its members' ids over the partitions sorted by ``b'topic'-<leader>-<partition>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kcli.records import old_consumer as oc
from kcli.zk import models, paths
from kcli.zk.registry import ZkRegistry, ZnodeMissingError

OK, UNOWNED, WRONG_OWNER, ORPHANED, DOUBLE_OWNED = "ok", "unowned", "wrong-owner", "orphaned", "double-owned"


thread_ids = oc.thread_ids
range_assign = oc.range_assign


def _subscription(member: models.ConsumerRegistration) -> oc.Subscription:
    return oc.Subscription(member.consumer_id, member.subscription, member.pattern)


def subscribed_topics(member: models.ConsumerRegistration, topics: list[str]) -> dict[str, int]:
    """Topic -> stream count for one member (static: as written; white_list/black_list: regex over topics)."""
    return oc.subscribed_topics(_subscription(member), topics)


def expected_assignment(members: list[models.ConsumerRegistration], partitions: dict[str, list[int]],
                        strategy: str = oc.RANGE) -> dict[tuple[str, int], str]:
    return oc.assign(strategy, [_subscription(m) for m in members], partitions)


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
    layout: str | None = oc.KAFKA_LAYOUT
    skipped: dict[str, str] = field(default_factory=dict)  # malformed ids nodes left out of the assignment

    @property
    def disagreements(self) -> list[OwnerCheck]:
        return [p for p in self.partitions if p.status != OK]

    @property
    def ok(self) -> bool:
        return not self.disagreements and self.layout != "mixed"

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "ok": self.ok, "layout": self.layout, "members": self.members,
                "threads": self.threads, "skipped_members": self.skipped,
                "disagreements": len(self.disagreements), "partitions": [p.to_json() for p in self.partitions]}


def check_owners(group: str, members: list[models.ConsumerRegistration], partitions: dict[str, list[int]],
                 owners: dict[tuple[str, int], list[str]], strategy: str = oc.RANGE) -> RebalanceCheck:
    """Compare the owner registry with the assignment (range by default) of the registered members."""
    expected = expected_assignment(members, partitions, strategy)
    threads = sorted({t for m in members for topic, n in subscribed_topics(m, sorted(partitions)).items()
                      for t in thread_ids(m.consumer_id, n)})
    return _compare(RebalanceCheck(group, sorted(m.consumer_id for m in members), threads), expected, partitions,
                    owners)


def check_pykafka_owners(group: str, members: dict[str, str], leaders: dict[str, dict[int, int]],
                         owners: dict[tuple[str, int], list[str]]) -> RebalanceCheck:
    """pykafka's layout: ``members`` id -> topic, ``leaders`` topic -> partition -> the leader its owner node
    names (else the current one); each topic's partitions over its members with pykafka's range."""
    expected: dict[tuple[str, int], str] = {}
    for topic in sorted(set(members.values())):
        ids = [m for m, t in members.items() if t == topic]
        for partition, member in oc.pykafka_range(topic, ids, leaders.get(topic, {})).items():
            expected[(topic, partition)] = member
    partitions = {t: sorted(ps) for t, ps in leaders.items()}
    return _compare(RebalanceCheck(group, sorted(members), sorted(members), layout=oc.PYKAFKA_LAYOUT), expected,
                    partitions, owners)


def _compare(result: RebalanceCheck, expected: dict[tuple[str, int], str], partitions: dict[str, list[int]],
             owners: dict[tuple[str, int], list[str]]) -> RebalanceCheck:
    known = set(result.threads)
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


def read_and_check(registry: ZkRegistry, group: str, strategy: str = oc.RANGE) -> RebalanceCheck:
    """Read the group's members and owners (either layout) and the topics' partitions, then check the owners;
    malformed ids nodes are left out and listed in ``skipped``."""
    view = registry.consumer_group(group)  # a missing group raises ZnodeMissingError
    owners = view.owner_nodes
    if view.layout == oc.PYKAFKA_LAYOUT:
        topics = set(view.pykafka_members.values()) | set(view.owners)
        current: dict[str, dict[int, int]] = {}
        for topic in sorted(topics):
            try:
                described = registry.topic(topic)
            except ZnodeMissingError:
                current[topic] = {}
                continue
            current[topic] = {p.partition: p.leader if p.leader is not None else -1 for p in described.partitions}
        # pykafka's members sort by the leaders they last saw, which ZooKeeper does not record: the leaders now,
        # and those the owner nodes were named after when claimed; the view the owners agree with more is theirs
        named = {t: {p: view.owner_leaders.get((t, p), leader) for p, leader in ps.items()}
                 for t, ps in current.items()}
        result = min((check_pykafka_owners(group, view.pykafka_members, leaders, owners)
                      for leaders in (current, named)), key=lambda r: len(r.disagreements))
    else:
        all_topics = registry.topic_names()
        wanted = {t for m in view.members for t in subscribed_topics(m, all_topics)} | set(view.owners)
        partitions: dict[str, list[int]] = {}
        for topic in sorted(wanted):
            path = paths.topic(topic)
            try:
                assignment = models.parse_topic(registry._where(path), registry._data(path), topic)
            except ZnodeMissingError:
                partitions[topic] = []
                continue
            partitions[topic] = sorted(assignment.partitions)
        result = check_owners(group, list(view.members), partitions, owners, strategy)
        result.layout = view.layout or oc.KAFKA_LAYOUT
    result.skipped = dict(view.malformed)
    return result
