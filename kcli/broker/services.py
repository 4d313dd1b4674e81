"""The services a request handler may use, gathered once per broker (Kafka's KafkaApis constructor arguments).

Handlers receive them through RequestContext.services and reach nothing else: no handler touches the socket
edge, the server's lifecycle or another service's private state.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
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
    """Hands out producer ids (Kafka's ProducerIdManager), standalone: one above the largest id in any log or in
    ``__transaction_state`` (``reserve``, as they are loaded)."""

    next_producer_id: int = 0
    allocate_block: Callable[[], tuple[int, int]] | None = None
    block_end: int = -1
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def may_block(self) -> bool:
        """``next_id`` may wait for ZooKeeper (call it off the event loop)."""
        return self.allocate_block is not None

    def reserve(self, taken: Iterable[int]) -> None:
        """Ids in use (in the logs, in __transaction_state): the next one handed out is above them."""
        with self._lock:
            self.next_producer_id = max([self.next_producer_id, *(pid + 1 for pid in taken)])

    def next_id(self) -> int:
        with self._lock:
            if self.allocate_block is not None and self.next_producer_id > self.block_end:
                self.next_producer_id, self.block_end = self.allocate_block()
            producer_id = self.next_producer_id
            self.next_producer_id += 1
            return producer_id


class ZkProducerIdManager(ProducerIdManager):
    """In a cluster (Kafka's ZkProducerIdManager): ids from blocks of 1000 taken from ZooKeeper's
    /latest_producer_id_block, so that no two brokers give the same id."""

    def __init__(self, broker_id: int, zk: Any) -> None:  # zk: kcli.zk.kafka_zk_client.KafkaZkClient
        super().__init__(allocate_block=lambda: zk.allocate_producer_id_block(broker_id))


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
    listener_name: str = "PLAINTEXT"  # the listener whose endpoints clients and replicas use
    controller: object | None = None  # ZooKeeper mode: kcli.broker.controller's runner (is_active)
    leader_endpoints: dict[int, tuple[str, int]] = field(default_factory=dict)  # from LeaderAndIsr
    transactions: Any = None  # kcli.broker.transaction_coordinator.TransactionCoordinator
    authorizer: Any = None  # kcli.broker.security.Authorizer; None: every check passes (authorizer.class.name unset)
    # SCRAM credentials (kcli.broker.security.credentials.CredentialCache): the SASL authenticator's
    # scram_credential(user, mechanism), and the store Describe/AlterUserScramCredentials use
    credentials: Any = None
    # the client side of the inter-broker listener (kcli.broker.security.inter_broker.InterBrokerSecurity): TLS and
    # SASL for this broker's requests to the others (controlled shutdown here; fetchers, markers, controller too)
    inter_broker_security: Any = None
    # ACLs and credentials: kcli.zk.acl_store.ZkMetadataStore in a cluster, else local_store.LocalMetadataStore
    metadata_store: Any = None
    # client quotas (kcli.broker.quotas.ClientQuotaManager, KIP-13/55/124); None: no quota is ever applied
    quotas: Any = None
    metrics: Any = None  # kcli.broker.metrics.BrokerMetrics when metrics.http.listener is set, else None (off)
    # KIP-227 fetch sessions (kcli.broker.fetch_session.FetchManager); None: every Fetch is sessionless
    fetch_manager: Any = None
    _metadata_event: asyncio.Event | None = None

    @property
    def clustered(self) -> bool:
        return self.admin.zk is not None

    def remember_endpoint(self, broker_id: int, host: str, port: int) -> None:
        self.leader_endpoints[broker_id] = (host, port)

    def client_endpoint(self, broker_id: int, listener: str) -> tuple[str, int] | None:
        """A broker's endpoint on the listener a client came in on (Metadata, FindCoordinator: §1.2 of
        kafka-security.md); None when that broker is not known alive with that listener."""
        broker = self.metadata.brokers.get(broker_id)
        if broker is not None:
            return broker.for_listener(listener)
        return self.leader_endpoints.get(broker_id) if listener == self.listener_name else None

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        broker = self.metadata.brokers.get(broker_id)
        if broker is not None:
            return broker.host, broker.port
        return self.leader_endpoints.get(broker_id)

    def metadata_updated(self) -> None:
        """An UpdateMetadata was applied: admin answers waiting on the metadata cache look again."""
        if self._metadata_event is not None:
            self._metadata_event.set()
            self._metadata_event = None

    async def await_metadata(self, ready: Callable[[], bool], timeout_ms: int) -> bool:
        """Wait until ``ready()`` holds after UpdateMetadata requests, at most ``timeout_ms`` (Kafka's
        DelayedCreatePartitions / DelayedDeleteTopics: the admin answer waits for the controller's work)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0, timeout_ms) / 1000
        while not ready():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            if self._metadata_event is None:
                self._metadata_event = asyncio.Event()
            try:
                async with asyncio.timeout(remaining):
                    await self._metadata_event.wait()
            except TimeoutError:
                return ready()
        return True

    def topic_ready(self, name: str, partitions: int | None = None) -> bool:
        """Every partition of the topic (at least ``partitions`` of them) has a leader in the metadata cache."""
        topic = self.metadata.topic(name)
        if topic is None or (partitions is not None and len(topic.partitions) < partitions):
            return False
        return all(p.leader >= 0 for p in topic.partitions)
