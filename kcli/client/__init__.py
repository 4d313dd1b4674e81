"""A small blocking Kafka client on kcli.protocol (kio message classes, the broker's own framing).

Enough for operations tools: bootstrap, Metadata, FindCoordinator, OffsetCommit/OffsetFetch, ListOffsets,
DescribeGroups, ListGroups, DeleteGroups. No asyncio, no consumer or producer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Imported on first use (PEP 562): kcli.client.client loads kio's message classes (most of a second), which
# kcli.client.metrics (`kctl metrics`, one HTTP GET) does not need.
_EXPORTS = {
    "BrokerAuthenticationError": "kcli.client.client",
    "BrokerUnreachableError": "kcli.client.client",
    "GroupDescription": "kcli.client.client",
    "KafkaClient": "kcli.client.client",
    "KafkaClientError": "kcli.client.client",
    "KafkaRequestError": "kcli.client.client",
    "TopicPartition": "kcli.client.client",
    "KafkaOffsetStore": "kcli.client.store",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kcli.client' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
