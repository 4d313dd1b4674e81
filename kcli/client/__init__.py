"""A small blocking Kafka client on kcli.protocol (kio message classes, the broker's own framing).

Enough for operations tools: bootstrap, Metadata, FindCoordinator, OffsetCommit/OffsetFetch, ListOffsets,
DescribeGroups, ListGroups, DeleteGroups. No asyncio, no consumer or producer.
"""

from __future__ import annotations

from kcli.client.client import (
    BrokerAuthenticationError,
    BrokerUnreachableError,
    GroupDescription,
    KafkaClient,
    KafkaClientError,
    KafkaRequestError,
    TopicPartition,
)
from kcli.client.store import KafkaOffsetStore

__all__ = [
    "BrokerAuthenticationError",
    "BrokerUnreachableError",
    "GroupDescription",
    "KafkaClient",
    "KafkaClientError",
    "KafkaOffsetStore",
    "KafkaRequestError",
    "TopicPartition",
]
