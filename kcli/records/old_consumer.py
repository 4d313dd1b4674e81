"""The ZooKeeper-era consumer's group protocol as data: the ids node a member registers, its topic filter, and the
deterministic assignments every member computes for itself (Kafka 0.8.2's kafka.consumer.RangeAssignor and
RoundRobinAssignor, pykafka 2.8's decide_partitions_range). Pure: kcli.zk reads and writes the znodes,
kcli.client runs the member; both compute the same assignment from here.

Kafka's layout: ``/consumers/<g>/ids/<consumerId>`` holds ``{"version":1,"subscription":{topic or regex: streams},
"pattern":"static"|"white_list"|"black_list","timestamp":"<ms>"}``; the owner of a partition is one of the
member's threads, ``<consumerId>-<n>`` (n < streams). pykafka's BalancedConsumer keeps its own layout: the ids
node holds the bare topic name, owner nodes are named ``<leader id>-<partition>`` and hold the member id, and on
Python 3 the owners directory is named after the topic's bytes repr (``b'topic'``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kcli.records.consumer_offsets import java_string_hashcode

STATIC, WHITE_LIST, BLACK_LIST = "static", "white_list", "black_list"
PATTERNS = (STATIC, WHITE_LIST, BLACK_LIST)
RANGE, ROUNDROBIN = "range", "roundrobin"
STRATEGIES = (RANGE, ROUNDROBIN)
KAFKA_LAYOUT, PYKAFKA_LAYOUT = "kafka", "pykafka"
# kafka.common.Topic.InternalTopics (0.8.2-1.1): exclude.internal.topics keeps wildcards off it
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


@dataclass(frozen=True)
class Subscription:
    """What one member registered: topic (static) or regex (wildcard) -> stream count, and the pattern."""

    consumer_id: str
    topics: Mapping[str, int]
    pattern: str = STATIC


def encode_registration(topics: Mapping[str, int], pattern: str, timestamp_ms: int) -> bytes:
    """ZookeeperConsumerConnector.registerConsumerInZK's JSON (the timestamp is a string, as Kafka wrote it)."""
    if pattern not in PATTERNS:
        raise ValueError(f"unknown subscription pattern {pattern!r}")
    return json.dumps({"version": 1, "subscription": dict(topics), "pattern": pattern,
                       "timestamp": str(timestamp_ms)}, separators=(",", ":")).encode()


def filter_regex(raw: str) -> str:
    """kafka.consumer.TopicFilter's regex: trimmed, "," meaning "|", spaces and surrounding quotes dropped."""
    regex = raw.strip().replace(",", "|").replace(" ", "")
    return re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", regex))


def topic_allowed(pattern: str, regex: str, topic: str, *, exclude_internal: bool = True) -> bool:
    """Whitelist/Blacklist.isTopicAllowed: the whole name must match (Java's String.matches)."""
    if exclude_internal and topic in INTERNAL_TOPICS:
        return False
    matches = re.fullmatch(filter_regex(regex), topic) is not None
    return matches if pattern == WHITE_LIST else not matches


def subscribed_topics(member: Subscription, all_topics: Iterable[str], *, exclude_internal: bool = True
                      ) -> dict[str, int]:
    """Topic -> stream count for one member: static as registered, wildcards over the cluster's topics."""
    if member.pattern == STATIC:
        return dict(member.topics)
    out: dict[str, int] = {}
    for regex, streams in member.topics.items():
        for topic in all_topics:
            if topic_allowed(member.pattern, regex, topic, exclude_internal=exclude_internal):
                out[topic] = streams
    return out


def thread_ids(consumer_id: str, streams: int) -> list[str]:
    return [f"{consumer_id}-{n}" for n in range(streams)]


def consumers_per_topic(members: Sequence[Subscription], all_topics: Iterable[str]) -> dict[str, list[str]]:
    """ZkUtils.getConsumersPerTopic: topic -> the thread ids subscribed to it, sorted as strings
    (ConsumerThreadId.compare compares toString)."""
    topics = sorted(all_topics)
    out: dict[str, list[str]] = {}
    for member in members:
        for topic, streams in subscribed_topics(member, topics).items():
            out.setdefault(topic, []).extend(thread_ids(member.consumer_id, streams))
    return {t: sorted(threads) for t, threads in sorted(out.items())}


def range_assign(partitions: Sequence[int], threads: Sequence[str]) -> dict[int, str]:
    """One topic's partitions over its consumer threads, exactly as RangeAssignor.assign: partitions in numeric
    order, threads in string order; the first nParts % nThreads threads take one extra partition."""
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


def roundrobin_assign(partitions: Mapping[str, Sequence[int]], consumers: Mapping[str, Sequence[str]]
                      ) -> dict[tuple[str, int], str]:
    """RoundRobinAssignor.assign: every thread id of the group sorted, one circular cursor; the partitions of
    all subscribed topics ordered by the hashCode of TopicAndPartition.toString (``[topic,partition]``, a stable
    sort); each partition goes to the next thread (from the cursor on) that subscribes to its topic."""
    threads = sorted({t for ts in consumers.values() for t in ts})
    if not threads:
        return {}
    members = {topic: set(ts) for topic, ts in consumers.items()}
    ordered = sorted(((t, p) for t in consumers for p in sorted(partitions.get(t, ()))),
                     key=lambda tp: java_string_hashcode(f"[{tp[0]},{tp[1]}]"))
    out = {}
    cursor = 0
    for topic, partition in ordered:
        for _ in range(len(threads)):
            thread = threads[cursor % len(threads)]
            cursor += 1
            if thread in members[topic]:
                out[(topic, partition)] = thread
                break
    return out


def assign(strategy: str, members: Sequence[Subscription], partitions: Mapping[str, Sequence[int]]
           ) -> dict[tuple[str, int], str]:
    """The whole group's assignment, (topic, partition) -> owning thread id; every member computes the same.
    ``partitions``: every topic of the cluster (wildcards match against its keys) -> its partition numbers."""
    consumers = {t: ts for t, ts in consumers_per_topic(members, partitions).items() if t in partitions}
    if strategy == ROUNDROBIN:
        return roundrobin_assign(partitions, consumers)
    if strategy != RANGE:
        raise ValueError(f"unknown partition.assignment.strategy {strategy!r}")
    out = {}
    for topic, threads in consumers.items():
        for partition, thread in range_assign(partitions[topic], threads).items():
            out[(topic, partition)] = thread
    return out


def owner_of_thread(thread_id: str) -> str:
    """The consumer id of a thread id ``<consumerId>-<n>``."""
    return thread_id.rpartition("-")[0]


# -- pykafka's BalancedConsumer ------------------------------------------------------------------------------------
def is_topic_name(text: str) -> bool:
    return _LEGAL_TOPIC.fullmatch(text) is not None and text not in (".", "..")


def pykafka_owners_dir(topic: str) -> str:
    """The owners directory pykafka 2.8 names on Python 3: '/consumers/{group}/owners/{topic}'.format() of the
    topic's bytes gives their repr."""
    return repr(topic.encode())


def pykafka_topic_of_owners_dir(name: str) -> str | None:
    """The topic of an owners directory pykafka named from bytes (``b'topic'``), else None."""
    if len(name) > 3 and name.startswith("b'") and name.endswith("'"):
        return name[2:-1]
    return None


def parse_pykafka_owner_name(name: str) -> tuple[int, int] | None:
    """(leader id, partition) of an owner node pykafka names ``<leader id>-<partition>``, else None."""
    leader, dash, partition = name.partition("-")
    if dash and leader.isascii() and leader.isdigit() and partition.isascii() and partition.isdigit():
        return int(leader), int(partition)
    return None


def pykafka_range(topic: str, members: Sequence[str], leaders: Mapping[int, int]) -> dict[int, str]:
    """pykafka's decide_partitions_range for every member of one topic: partitions sorted by the string
    ``"<str(topic bytes)>-<leader id>-<partition>"`` (so the leaders matter, and "10" sorts before "2"), the
    member ids sorted, then Kafka's range arithmetic. ``leaders``: partition -> the leader the members saw."""
    prefix = str(topic.encode())
    parts = sorted(leaders, key=lambda p: f"{prefix}-{leaders[p]}-{p}")
    participants = sorted(members, key=lambda m: m.encode())
    if not participants:
        return {}
    per, extra = divmod(len(parts), len(participants))
    out = {}
    for index, member in enumerate(participants):
        start = per * index + min(index, extra)
        for p in parts[start:start + per + (0 if index + 1 > extra else 1)]:
            out[p] = member
    return out
