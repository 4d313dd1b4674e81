"""The services a request handler may use, gathered once per broker (Kafka's KafkaApis constructor arguments).

Handlers receive them through RequestContext.services and reach nothing else: no handler touches the socket
edge, the server's lifecycle or another service's private state.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from kcli.broker.config import BrokerConfig
from kcli.broker.group_coordinator import GroupCoordinator
from kcli.broker.log_manager import LogManager
from kcli.broker.metadata_cache import MetadataCache
from kcli.broker.replica_manager import ReplicaManager
from kcli.broker.topic_admin import TopicAdmin


@dataclass
class ProducerIdManager:
    """Hands out producer ids (Kafka's ProducerIdManager): standalone, one above the largest id in any log."""

    next_producer_id: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def next_id(self) -> int:
        with self._lock:
            producer_id = self.next_producer_id
            self.next_producer_id += 1
            return producer_id


@dataclass
class BrokerServices:
    config: BrokerConfig
    broker_id: int
    advertised: tuple[str, int]
    log_manager: LogManager
    replica_manager: ReplicaManager
    metadata: MetadataCache
    admin: TopicAdmin
    groups: GroupCoordinator
    producer_ids: ProducerIdManager
    # kcli.zk.registration.BrokerRegistration in ZooKeeper mode (zookeeper.connect): OffsetCommit/OffsetFetch v0
    # keep the old consumers' offsets there, as a ZooKeeper-mode Kafka does. None otherwise.
    zk: Any = None
