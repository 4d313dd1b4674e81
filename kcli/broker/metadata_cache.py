"""MetadataCache: what this broker tells clients about the cluster (Kafka's MetadataCache).

Live brokers with their endpoints and racks, the controller, and per topic its id and each partition's
leader, leader epoch, replicas, ISR and offline replicas. Standalone, the broker fills it itself as topics
come and go; in a cluster, UpdateMetadata from the controller will.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BrokerEndpoint:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


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

    def add_broker(self, endpoint: BrokerEndpoint) -> None:
        self.brokers[endpoint.broker_id] = endpoint

    def alive_brokers(self) -> list[BrokerEndpoint]:
        return [self.brokers[b] for b in sorted(self.brokers)]

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
