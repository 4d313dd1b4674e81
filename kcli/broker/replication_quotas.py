"""Replication quotas (KIP-73): Kafka's ReplicationQuotaManager, its BrokerConfigHandler and TopicConfigHandler parts.

A broker has three: LeaderReplication (the bytes its leaders send to followers), FollowerReplication (the bytes its
replica fetchers copy) and AlterLogDirsReplication (moves between its own log dirs). Each has a bound in bytes/s,
``leader.replication.throttled.rate``, ``follower.replication.throttled.rate`` and
``replica.alter.log.dirs.io.max.bytes.per.second`` (dynamic broker configs: this broker's own value, else the
cluster default's, else unbounded, as KAFKA-10190 made it), and the set of throttled partitions, from the topics'
``leader.replication.throttled.replicas`` and ``follower.replication.throttled.replicas`` (``*`` or
``partition:brokerId,...``; a partition is throttled here when this broker's id is listed with it).

Only throttled partitions are ever held back, and only for a replica outside the ISR: a leader answers a follower's
fetch for such a partition with no records (no error) while its rate is above the bound (ReplicaManager's
shouldLeaderThrottle); a follower leaves such a partition out of its fetch while its own rate is above the bound
(ReplicaFetcherThread's shouldFollowerThrottle). Both record the bytes of every throttled partition, in sync or not,
so the total replication traffic of the moving partitions stays under the bound. Client quotas never apply to
replication, and these never apply to clients.

The rate is Kafka's SimpleRate over ``replication.quota.window.num`` samples of
``replication.quota.window.size.seconds`` (11 x 1 s): kcli.broker.quotas' Rate, with its window no shorter than one
sample rather than ten, so that a move starts at once and then averages the bound.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kcli.broker.quotas import Rate

log = logging.getLogger("kcli.broker")

LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
ALTER_LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
BROKER_RATES = (LEADER_RATE, FOLLOWER_RATE, ALTER_LOG_DIRS_RATE)  # ReassignPartitionsCommand.brokerLevelThrottles
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
TOPIC_REPLICAS = (LEADER_REPLICAS, FOLLOWER_REPLICAS)  # ReassignPartitionsCommand.topicLevelThrottles

LEADER, FOLLOWER, ALTER_LOG_DIRS = "LeaderReplication", "FollowerReplication", "AlterLogDirsReplication"  # QuotaType
ALL = "*"  # ReplicationQuotaManager.AllReplicas: every partition of the topic
REPLICATION_QUOTA_WINDOW_NUM = 11  # replication.quota.window.num
REPLICATION_QUOTA_WINDOW_SIZE_SECONDS = 1  # replication.quota.window.size.seconds


def parse_throttled_partitions(value: str, broker_id: int) -> frozenset[int] | str:
    """TopicConfigHandler.parseThrottledPartitions: ``*`` (ALL), or the partitions listed with ``broker_id``
    (the value passed kcli.storage.log_config's ThrottledReplicaListValidator when it was set)."""
    text = value.strip()
    if text == ALL:
        return ALL
    out = set()
    for item in text.split(","):
        partition, _, broker = item.strip().partition(":")
        if broker and int(broker) == broker_id:
            out.add(int(partition))
    return frozenset(out)


class SimpleRate(Rate):
    """Kafka's SimpleRate: the window is the time since the oldest sample began, at least one sample long."""

    def window_size(self, now_ms: int) -> int:
        self._purge(now_ms)
        self._current_sample(now_ms)  # one sample at least
        return max(now_ms - min(s.start_ms for s in self._samples), self.window_ms)


class ReplicationQuotaManager:
    """One quota type's bound, rate and throttled partitions (Kafka's ReplicationQuotaManager)."""

    def __init__(self, kind: str, *, window_num: int = REPLICATION_QUOTA_WINDOW_NUM,
                 window_size_seconds: int = REPLICATION_QUOTA_WINDOW_SIZE_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kind = kind
        self.clock = clock
        self.bound: int | None = None  # bytes/s; None: unbounded (Kafka's Long.MaxValue default)
        self.throttled: dict[str, frozenset[int] | str] = {}  # topic -> its throttled partitions, or ALL
        self._rate = SimpleRate(window_num, window_size_seconds * 1000)
        self.held_back = 0  # partitions left out of a fetch or a fetch answer (kctl's metric)

    def now_ms(self) -> int:
        return round(self.clock() * 1000)

    def update_quota(self, bound: int | None) -> None:
        if bound != self.bound:
            log.info("%s quota now %s", self.kind, "unbounded" if bound is None else f"{bound} B/s")
        self.bound = bound

    def is_quota_exceeded(self, now_ms: int | None = None) -> bool:
        """Sensor.checkQuotas: the measured rate above the bound."""
        if self.bound is None:
            return False
        return self._rate.measure(self.now_ms() if now_ms is None else now_ms) > self.bound

    def is_throttled(self, topic: str, partition: int) -> bool:
        partitions = self.throttled.get(topic)
        return partitions is not None and (partitions == ALL or partition in partitions)

    def record(self, value: float, now_ms: int | None = None) -> None:
        self._rate.record(value, self.now_ms() if now_ms is None else now_ms)

    def rate(self, now_ms: int | None = None) -> float:
        """The measured byte rate (the byte-rate metric)."""
        return self._rate.measure(self.now_ms() if now_ms is None else now_ms)

    def mark_throttled(self, topic: str, partitions: frozenset[int] | str) -> None:
        self.throttled[topic] = partitions

    def remove_throttle(self, topic: str) -> None:
        self.throttled.pop(topic, None)

    def should_throttle(self, topic: str, partition: int, in_sync: bool, now_ms: int | None = None) -> bool:
        """shouldLeaderThrottle / shouldFollowerThrottle: a throttled partition of a replica outside the ISR,
        while the rate is above the bound."""
        if in_sync or not self.is_throttled(topic, partition) or not self.is_quota_exceeded(now_ms):
            return False
        self.held_back += 1
        return True


def _bound(text: str | None) -> int | None:
    try:
        return None if text is None else int(text.strip())
    except ValueError:  # validated when set; a hand-written znode: unbounded, as if absent
        log.error("ignoring a replication throttle rate that is not a number: %r", text)
        return None


@dataclass
class ReplicationQuotas:
    """A broker's three replication quota managers (Kafka's QuotaManagers leader, follower, alterLogDirs)."""

    broker_id: int
    leader: ReplicationQuotaManager
    follower: ReplicationQuotaManager
    alter_log_dirs: ReplicationQuotaManager

    @classmethod
    def create(cls, broker_id: int, *, window_num: int = REPLICATION_QUOTA_WINDOW_NUM,
               window_size_seconds: int = REPLICATION_QUOTA_WINDOW_SIZE_SECONDS,
               clock: Callable[[], float] = time.monotonic) -> ReplicationQuotas:
        def make(kind: str) -> ReplicationQuotaManager:
            return ReplicationQuotaManager(kind, window_num=window_num, window_size_seconds=window_size_seconds,
                                           clock=clock)
        return cls(broker_id, make(LEADER), make(FOLLOWER), make(ALTER_LOG_DIRS))

    def managers(self) -> tuple[ReplicationQuotaManager, ...]:
        return self.leader, self.follower, self.alter_log_dirs

    def broker_config_changed(self, per_broker: Mapping[str, str], cluster_default: Mapping[str, str]) -> None:
        """BrokerConfigHandler: each bound from this broker's dynamic config, else the cluster default's, else
        unbounded (KAFKA-10190: before it, Kafka ignored the cluster default here)."""
        for manager, key in zip(self.managers(), BROKER_RATES):
            manager.update_quota(_bound(per_broker.get(key, cluster_default.get(key))))

    def topic_config_changed(self, topic: str, overrides: Mapping[str, str]) -> None:
        """TopicConfigHandler's updateThrottledList for both lists: a non-empty value marks the partitions listed
        with this broker, an absent or empty one removes the topic's throttle."""
        for manager, key in ((self.leader, LEADER_REPLICAS), (self.follower, FOLLOWER_REPLICAS)):
            value = overrides.get(key) or ""
            before = manager.throttled.get(topic)
            if value:
                try:
                    manager.mark_throttled(topic, parse_throttled_partitions(value, self.broker_id))
                except ValueError:  # validated when set; a hand-written znode: no throttle
                    log.error("topic %s: ignoring %s=%r", topic, key, value)
                    manager.remove_throttle(topic)
            else:
                manager.remove_throttle(topic)
            after = manager.throttled.get(topic)
            if after != before:
                shown = "none" if after is None else after if after == ALL else ",".join(map(str, sorted(after)))
                log.info("topic %s: %s throttled partitions on broker %d: %s", topic, manager.kind, self.broker_id,
                         shown or "none")

    # -- metrics (kcli.broker.metrics collectors) ------------------------------------------------------------------
    def collect(self) -> Iterator[tuple[str, str, str, list[Any]]]:
        """kafka.server:type=LeaderReplication,name=byte-rate (and FollowerReplication, AlterLogDirsReplication),
        as the JMX exporter names them; kctl's bound and held-back partition counts."""
        for manager in self.managers():
            yield (f"kafka_server_{manager.kind.lower()}_byte_rate", "gauge", f"{manager.kind} bytes/s (byte-rate)",
                   [({}, manager.rate())])
        yield ("kctl_replication_throttled_rate", "gauge", "Replication quota bound in bytes/s (-1: unbounded)",
               [({"type": m.kind}, -1 if m.bound is None else m.bound) for m in self.managers()])
        yield ("kctl_replication_throttled_partitions_total", "counter",
               "Times a throttled partition was held back (left out of a fetch, or read as empty for a follower)",
               [({"type": m.kind}, m.held_back) for m in self.managers()])


__all__ = ["ALL", "BROKER_RATES", "FOLLOWER_RATE", "FOLLOWER_REPLICAS", "LEADER_RATE", "LEADER_REPLICAS",
           "ALTER_LOG_DIRS_RATE", "ReplicationQuotaManager", "ReplicationQuotas", "SimpleRate", "TOPIC_REPLICAS",
           "parse_throttled_partitions"]