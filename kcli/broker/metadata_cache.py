"""MetadataCache: what this broker tells clients about the cluster (Kafka's MetadataCache).

Live brokers with their endpoints and racks, the controller, and per topic its id and each partition's
leader, leader epoch, replicas, ISR and offline replicas. Standalone, the broker fills it itself as topics
come and go; in a cluster, UpdateMetadata from the controller will.
"""

from __future__ import annotations

import dataclasses
import uuid
from dataclasses import dataclass, field


LEADER_DURING_DELETE = -2  # UpdateMetadata's leader for a partition whose topic is being deleted


@dataclass(frozen=True)
class BrokerEndpoint:
    """A live broker: ``host``/``port`` of the inter-broker listener (replicas and the controller use it), and every
    advertised listener's endpoint as (name, host, port) (clients get the one of the listener they came in on)."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def for_listener(self, listener: str) -> tuple[str, int] | None:
        """The endpoint of ``listener``; None when the broker lacks it (without the list: host and port)."""
        if not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return None


@dataclass
class PartitionState:
    index: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int] = field(default_factory=list)


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionState]

    @property
    def is_internal(self) -> bool:
        return self.name in ("__consumer_offsets", "__transaction_state")


@dataclass
class MetadataCache:
    cluster_id: str | None = None
    controller_id: int = -1
    brokers: dict[int, BrokerEndpoint] = field(default_factory=dict)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)

    controller_epoch: int = -1  # the newest controller epoch seen (older requests are fenced)

    def update_metadata(self, controller_id: int, controller_epoch: int, brokers: list[BrokerEndpoint],
                        states: list[tuple[str, uuid.UUID | None, PartitionState]]) -> list[str]:
        """Kafka's ZkMetadataCache.updateMetadata: the live brokers are replaced, partition states merged (a
        leader of -2 deletes the partition: its topic is being deleted). Returns the topics removed."""
        self.controller_id, self.controller_epoch = controller_id, controller_epoch
        self.brokers = {b.broker_id: b for b in brokers}
        touched: set[str] = set()
        # merged per topic, once: one UpdateMetadata may carry thousands of partitions of one topic
        merged: dict[str, dict[int, PartitionState | None]] = {}
        for name, topic_id, state in states:
            topic = self.topics.get(name)
            if state.leader == LEADER_DURING_DELETE:
                if topic is not None:
                    merged.setdefault(name, {})[state.index] = None
                    touched.add(name)
                continue
            if topic is None:
                topic = self.topics[name] = TopicMetadata(name, topic_id or uuid.UUID(int=0), [])
            elif topic_id is not None and topic_id.int:
                topic.topic_id = topic_id
            merged.setdefault(name, {})[state.index] = state
        for name, changes in merged.items():
            topic = self.topics[name]
            by_index: dict[int, PartitionState | None] = {p.index: p for p in topic.partitions}
            by_index.update(changes)
            topic.partitions = [p for _, p in sorted(by_index.items()) if p is not None]
        removed = [name for name in touched if not self.topics[name].partitions]
        for name in removed:
            del self.topics[name]
        return removed

    def partition_state(self, name: str, index: int) -> PartitionState | None:
        topic = self.topics.get(name)
        if topic is None:
            return None
        return next((p for p in topic.partitions if p.index == index), None)

    def add_broker(self, endpoint: BrokerEndpoint) -> None:
        self.brokers[endpoint.broker_id] = endpoint

    def alive_brokers(self) -> list[BrokerEndpoint]:
        return [self.brokers[b] for b in sorted(self.brokers)]

    def alive_brokers_for(self, listener: str) -> list[BrokerEndpoint]:
        """Kafka's getAliveBrokerNodes(listenerName): the live brokers with that listener, at its endpoint; a broker
        without it is left out (kafka-security.md §1.2)."""
        out = []
        for broker_id in sorted(self.brokers):
            broker = self.brokers[broker_id]
            endpoint = broker.for_listener(listener)
            if endpoint is None:
                continue
            out.append(broker if endpoint == (broker.host, broker.port)
                       else dataclasses.replace(broker, host=endpoint[0], port=endpoint[1]))
        return out

    def advertised_controller_id(self) -> int:
        """The controller id a Metadata answer gives: -1 unless that broker is in the same answer's broker list.
        A broker that just started knows who the controller is (ZooKeeper) before the controller's first
        UpdateMetadata lists the live brokers; an id a client cannot resolve makes librdkafka's admin client
        wait for the controller until it times out, while -1 makes it ask again (Kafka answers -1 then too)."""
        return self.controller_id if self.controller_id in self.brokers else -1

    def put_topic(self, topic: TopicMetadata) -> None:
        self.topics[topic.name] = topic

    def remove_topic(self, name: str) -> None:
        self.topics.pop(name, None)

    def topic(self, name: str | None) -> TopicMetadata | None:
        return self.topics.get(name) if name else None

    def topic_name(self, topic_id: uuid.UUID | None) -> str | None:
        if topic_id is None:
            return None
        return next((t.name for t in self.topics.values() if t.topic_id == topic_id), None)

    def topic_names(self) -> list[str]:
        return sorted(self.topics)

    def partition_count(self, name: str) -> int | None:
        topic = self.topics.get(name)
        return None if topic is None else len(topic.partitions)
