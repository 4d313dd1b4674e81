"""How a broker is put together, once: its services, each given its collaborators in its constructor (Kafka's
KafkaServer.startup), and the mode that differs between a standalone broker and a member of a ZooKeeper-mode
cluster.

Standalone, the broker leads every partition and keeps topics and configs in its log dirs. In ZooKeeper mode the
assembly adds a BrokerRegistration, the KafkaZkClient over its session that the admin, ISR, producer-id and config
managers write through (Kafka's ZkAdminManager, ZkIsrManager, ZkProducerIdManager), the replica fetchers and the
controller. KafkaServer then runs the same start and stop sequence in both modes, asking its mode for the steps
that differ: no service is rewired after it is built.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from kcli.broker.security.inter_broker import PLAINTEXT_INTER_BROKER, InterBrokerSecurity
from kcli.broker.alter_log_dirs import ReplicaAlterLogDirsManager
from kcli.broker.config import BrokerConfig
from kcli.broker.connection_quotas import ConnectionQuotas, connection_limits
from kcli.broker.fetch_session import FetchManager, FetchSessionCache
from kcli.broker.group_coordinator import GroupCoordinator
from kcli.broker.kafka_apis import KafkaApis
from kcli.broker.log_manager import LogManager
from kcli.broker.metadata_cache import BrokerEndpoint, MetadataCache
from kcli.broker.replica_manager import ReplicaManager
from kcli.broker.replica_selector import create_replica_selector
from kcli.broker.services import BrokerServices, ProducerIdManager, ZkProducerIdManager
from kcli.broker.socket_server import SocketServer
from kcli.broker.topic_admin import TopicAdmin
from kcli.broker.transaction_coordinator import TransactionCoordinator
from kcli.broker.transaction_markers import TransactionMarkerChannelManager, write_txn_markers
from kcli.errors import KcliError
from kcli.storage.log import LogConfig

log = logging.getLogger("kcli.broker")

Spawn = Callable[[Coroutine[Any, Any, Any]], None]  # the server runs a coroutine as a background task


@dataclass(frozen=True)
class ServerHooks:
    """The server's own work that the services call back into."""

    schedule_flush: Callable[[Any], None]  # (ManagedLog) log.flush.interval.messages reached: fsync off the loop
    logs_created: Callable[[int], None]  # (count) new logs: the collector's freeze (KafkaServer._logs_created)
    follower_appended: Callable[[Any], None]  # (Partition) a follower appended: flush accounting
    leadership_changed: Callable[[list[Any], list[Any]], None]  # (leaders, followers): the coordinators' partitions


@dataclass
class Broker:
    """What `kctl broker run` serves with, built by ``assemble``."""

    log_manager: LogManager
    replica_manager: ReplicaManager
    metadata: MetadataCache
    admin: TopicAdmin
    groups: GroupCoordinator
    producer_ids: ProducerIdManager
    transactions: TransactionCoordinator
    services: BrokerServices
    socket_server: SocketServer
    mode: StandaloneMode | ZooKeeperMode


def assemble(config: BrokerConfig, hooks: ServerHooks) -> Broker:
    """The broker's services for ``config``: a member of the cluster at ``zookeeper.connect``, else standalone.
    The mode is decided here, once; the services are told what they need to know in their constructors."""
    broker_id = config.broker_id
    # host/port of a broker in the metadata cache are its inter-broker listener's (replicas and the controller
    # use them); clients get the listener they came in on (MetadataCache.alive_brokers_for)
    inter_broker = config.inter_broker_listener_name
    listener = next(l for l in config.advertised_listeners if l.name == inter_broker)
    endpoints = tuple((l.name, l.host, l.port) for l in config.advertised_listeners)
    # Some collaborators are built before the ReplicaManager or the BrokerServices they call back into (those need
    # them at construction): the lambdas resolve `replica_manager` and `services` when called, once both exist.
    replica_manager: ReplicaManager
    services: BrokerServices
    clustered = bool(config["zookeeper.connect"])
    # the client side of the inter-broker listener (TLS, SASL) for this broker's requests to the others
    inter_broker_security = InterBrokerSecurity.from_config(config) if clustered else PLAINTEXT_INTER_BROKER
    log_manager = LogManager(
        config.log_dirs, broker_id=broker_id,
        log_config=LogConfig(segment_bytes=config["log.segment.bytes"],
                             index_interval_bytes=config["log.index.interval.bytes"],
                             segment_index_bytes=config["log.index.size.max.bytes"],
                             file_delete_delay_ms=config["log.segment.delete.delay.ms"]),
        # replication-offset-checkpoint: in a cluster the ReplicaManager's high watermarks; standalone the log ends
        high_watermarks=(lambda: replica_manager.high_watermarks()) if clustered else None)
    replication_quotas = _replication_quotas(config)
    zk = None if not clustered else _zookeeper_parts(
        config, log_manager, hooks, high_watermark_moved=lambda p: replica_manager.follower_high_watermark_moved(p),
        isr_committed=lambda *a: replica_manager.isr_committed(*a), endpoint=lambda b: services.endpoint(b),
        inter_broker=inter_broker_security, follower_quota=replication_quotas.follower)
    # Until the controller's first UpdateMetadata says who is alive, Metadata answers list this broker alone
    # (MetadataCache.advertised_controller_id); standalone, it is its own controller.
    metadata = MetadataCache(controller_id=broker_id)
    metadata.add_broker(BrokerEndpoint(broker_id, listener.host, listener.port,
                                       config.values.get("broker.rack"), endpoints))  # type: ignore[arg-type]
    replica_manager = ReplicaManager(
        log_manager, local_broker_id=broker_id, replica_lag_time_max_ms=config["replica.lag.time.max.ms"],
        on_flush_due=hooks.schedule_flush, metadata=metadata,
        replica_selector=create_replica_selector(config["replica.selector.class"]),
        leader_quota=replication_quotas.leader, **({} if zk is None else zk.replication(hooks)))
    replica_manager.alter_log_dirs = ReplicaAlterLogDirsManager(
        log_manager, hosted=lambda topic, index: replica_manager.find(topic, index) is not None,
        quota=replication_quotas.alter_log_dirs)
    admin = TopicAdmin(config, log_manager, replica_manager, metadata, zk=None if zk is None else zk.client,
                       logs_created=hooks.logs_created, replication_quotas=replication_quotas)
    groups = GroupCoordinator(config, log_manager, replica_manager, admin, clustered=clustered)
    producer_ids = ProducerIdManager() if zk is None else ZkProducerIdManager(broker_id, zk.client)
    timeout_ms = config["request.timeout.ms"]
    transactions = TransactionCoordinator(
        config, replica_manager, admin, log_manager, producer_ids, clustered=clustered,
        markers=lambda coordinator: TransactionMarkerChannelManager(
            coordinator, local_broker_id=broker_id, leader_of=_leader_of(metadata),
            endpoint=lambda b: services.endpoint(b),
            write_local=lambda markers: write_txn_markers(replica_manager, groups, markers, timeout_ms),
            request_timeout_ms=timeout_ms, security=inter_broker_security))
    services = BrokerServices(config, broker_id, (listener.host, listener.port), log_manager, replica_manager,
                              metadata, admin, groups, producer_ids,
                              zk=None if zk is None else zk.registration,
                              controller=None if zk is None else zk.controller, transactions=transactions,
                              listener_name=inter_broker, inter_broker_security=inter_broker_security)
    services.metadata_store = _metadata_store(config)
    services.authorizer = _authorizer(config, services.metadata_store)
    services.credentials = _credential_cache(zk, services.metadata_store)
    services.quotas = _quota_manager(config, zk, services.metadata_store)
    services.metrics = replica_manager.stats = _metrics(config)
    services.fetch_manager = FetchManager(FetchSessionCache(config["max.incremental.fetch.session.cache.slots"]))
    if services.metrics is not None:
        services.metrics.registry.collectors.append(replication_quotas.collect)
        services.metrics.registry.collectors.append(services.fetch_manager.cache.collect)
    names = [l.name for l in config.listeners]
    quotas = ConnectionQuotas(connection_limits(config, {}, names), names, inter_broker)  # dynamic ones: at start
    socket_server = SocketServer(KafkaApis(services), max_frame_bytes=config["socket.request.max.bytes"],
                                 produce_pipeline_depth=config["kctl.produce.pipeline.depth"], quotas=quotas,
                                 metrics=services.metrics)
    mode = (StandaloneMode(replica_manager, groups, producer_ids, transactions, services) if zk is None else
            ZooKeeperMode(config, zk, log_manager, replica_manager, metadata, admin, services))
    return Broker(log_manager, replica_manager, metadata, admin, groups, producer_ids, transactions, services,
                  socket_server, mode)


def _metrics(config: BrokerConfig) -> Any:
    """The broker's metrics when metrics.http.listener is set (KafkaServer serves them), else None: off, nothing
    counted."""
    if not config["metrics.http.listener"]:
        return None
    from kcli.broker.metrics import BrokerMetrics

    return BrokerMetrics()


def _replication_quotas(config: BrokerConfig) -> Any:
    """KIP-73's leader, follower and log-dir replication throttles; TopicAdmin keeps their bounds and throttled
    partitions current (dynamic broker and topic configs)."""
    from kcli.broker.replication_quotas import ReplicationQuotas

    return ReplicationQuotas.create(config.broker_id, window_num=config["replication.quota.window.num"],
                                    window_size_seconds=config["replication.quota.window.size.seconds"])


def _credential_cache(zk: ZooKeeperParts | None, store: Any) -> Any:
    """SCRAM credentials from /config/users: in a cluster through the broker's own ZooKeeper session (Kafka's
    broker zkClient, whose /config/changes listener refreshes them), standalone in the broker's one local
    metadata store (shared with the ACLs: one instance per file). Loaded by the mode's logs_loaded, before the
    listeners open."""
    from kcli.broker.security.credentials import CredentialCache

    if zk is not None:
        from kcli.zk.scram import ZkNodes

        return CredentialCache(ZkNodes(zk.client))
    return CredentialCache(store)


def _quota_manager(config: BrokerConfig, zk: ZooKeeperParts | None, store: Any) -> Any:
    """Client quotas (KIP-13/55/124) from /config/users and /config/clients: in a cluster through the broker's own
    ZooKeeper session (the /config/changes listener applies changes), standalone in the local metadata store.
    Loaded by the mode's logs_loaded."""
    from kcli.broker.quotas import ClientQuotaManager

    if zk is not None:
        from kcli.zk.scram import ZkNodes

        store = ZkNodes(zk.client)
    return ClientQuotaManager(window_num=config["quota.window.num"],
                              window_size_seconds=config["quota.window.size.seconds"], store=store)


def _metadata_store(config: BrokerConfig) -> Any:
    """Where ACLs (and SCRAM credentials) live: ZooKeeper's nodes in a cluster (a session of their own, opened
    when the authorizer starts, as Kafka's AclAuthorizer has its own ZooKeeper client), else the same paths and
    JSON in a file of the first log dir. One instance per broker: every user of the store shares it."""
    if config["zookeeper.connect"]:
        from kcli.zk.acl_store import ZkMetadataStore

        return ZkMetadataStore(str(config["zookeeper.connect"]),
                               timeout=config["zookeeper.session.timeout.ms"] / 1000)
    from kcli.broker.security.local_store import LocalMetadataStore

    return LocalMetadataStore(config.log_dirs[0])


def _authorizer(config: BrokerConfig, store: Any) -> Any:
    """Kafka's AclAuthorizer when authorizer.class.name names it (checked by the config), else None; started by
    KafkaServer.start once the log dirs exist, closed by stop."""
    if not config["authorizer.class.name"]:
        return None
    from kcli.broker.security.authorizer import AclAuthorizer, parse_super_users

    changes = None
    if config["zookeeper.connect"]:
        from kcli.zk.acl_store import ZkAclChangeChannel

        changes = ZkAclChangeChannel(store)
    return AclAuthorizer(store, super_users=parse_super_users(config["super.users"]),
                         allow_everyone_if_no_acl_found=config["allow.everyone.if.no.acl.found"], changes=changes)


def _leader_of(metadata: MetadataCache) -> Callable[[str, int], int | None]:
    def leader_of(topic: str, index: int) -> int | None:
        """The partition's leader for the transaction markers: -1 without one, None when it is gone."""
        state = metadata.partition_state(topic, index)
        return None if state is None else state.leader
    return leader_of


def _load_quotas(services: BrokerServices | None) -> None:
    quotas = getattr(services, "quotas", None)
    if quotas is None:
        return
    try:
        quotas.load()
    except KcliError as exc:  # a damaged store: no quota applies (and the log says why), the rest serves
        log.error("client quotas not loaded: %s", exc.describe())


# -- standalone ---------------------------------------------------------------------------------------------------
class StandaloneMode:
    """One broker: it leads every partition, its log dirs hold the topics and the cluster id, and the coordinators
    replay all of __consumer_offsets and __transaction_state at startup."""

    def __init__(self, replica_manager: ReplicaManager, groups: GroupCoordinator, producer_ids: ProducerIdManager,
                 transactions: TransactionCoordinator, services: BrokerServices | None = None) -> None:
        self.replica_manager = replica_manager
        self.groups = groups
        self.producer_ids = producer_ids
        self.transactions = transactions
        self.services = services

    def connect(self) -> str | None:
        """The cluster id the log dirs must carry: theirs (None)."""
        return None

    def logs_loaded(self) -> None:
        """Producer ids handed out are above every id in the logs; every __transaction_state partition is led
        here (loaded by load_transactions)."""
        self.producer_ids.reserve(pid for p in self.replica_manager.partitions.values() for pid in p.log.producers)
        self.transactions.begin_standalone_load()
        if self.services is not None and self.services.credentials is not None:
            try:  # SCRAM credentials of the local store, before the listeners open
                self.services.credentials.load()
            except KcliError as exc:  # a damaged store: SCRAM logins fail (and say why here), the rest serves
                log.error("SCRAM credentials not loaded: %s", exc.describe())
        _load_quotas(self.services)

    async def join(self, spawn: Spawn) -> None:
        """Nothing to join."""

    async def load_groups(self) -> None:
        await asyncio.to_thread(self.groups.load)

    async def load_transactions(self) -> None:
        """Replay __transaction_state (COORDINATOR_LOAD_IN_PROGRESS meanwhile); producer ids handed out
        afterwards are above every id it holds."""
        loaded = await asyncio.to_thread(self.transactions.load_all)
        for index, (epoch, values) in loaded.items():
            self.transactions.finish_loading(index, epoch, values)
            self.producer_ids.reserve(v.producer_id for v in values.values())

    async def controlled_shutdown(self) -> bool:
        return True  # no other broker to hand leaderships to

    async def leave(self) -> None:
        """Nothing to leave."""

    def close(self) -> None:
        pass


# -- ZooKeeper mode -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ZooKeeperParts:
    """What a member of a ZooKeeper-mode cluster adds to a broker."""

    registration: Any  # kcli.zk.registration.BrokerRegistration (connected by ZooKeeperMode.connect)
    client: Any  # kcli.zk.kafka_zk_client.KafkaZkClient over its session
    fetchers: Any  # kcli.broker.replica_fetcher.ReplicaFetcherManager
    isr_manager: Any  # kcli.broker.isr_manager.ZkIsrManager
    controller: Any  # kcli.broker.controller.ControllerRunner: its threads are Kafka's controller-event thread

    def replication(self, hooks: ServerHooks) -> dict[str, Any]:
        """The ReplicaManager's cluster collaborators (Kafka's ReplicaManager is given its ZkIsrManager)."""
        registration = self.registration
        return dict(isr_listener=self.isr_manager, fetchers=self.fetchers,
                    # a broker whose session expired registers again with a newer czxid (KIP-380)
                    broker_epoch_source=lambda: registration.broker_epoch,
                    on_leadership_change=hooks.leadership_changed)


def _zookeeper_parts(config: BrokerConfig, log_manager: LogManager, hooks: ServerHooks, *, high_watermark_moved: Callable[[Any], None],
                     isr_committed: Callable[..., None],
                     endpoint: Callable[[int], tuple[str, int] | None],
                     inter_broker: InterBrokerSecurity = PLAINTEXT_INTER_BROKER,
                     follower_quota: Any = None) -> ZooKeeperParts:
    from kcli.broker.controller import ControllerRunner
    from kcli.broker.isr_manager import ZkIsrManager
    from kcli.broker.replica_fetcher import FetchSettings, ReplicaFetcherManager
    from kcli.zk.kafka_zk_client import KafkaZkClient
    from kcli.zk.registration import BrokerRegistration

    c = config
    registration = BrokerRegistration(
        str(c["zookeeper.connect"]), c.broker_id,
        endpoints=[(l.name, l.host, l.port) for l in c.advertised_listeners],
        security_protocols={l.name: c.security_protocol(l) for l in c.advertised_listeners},
        session_timeout_ms=c["zookeeper.session.timeout.ms"],
        rack=c.values.get("broker.rack"))  # type: ignore[arg-type]
    client = KafkaZkClient.for_registration(registration)  # usable once ZooKeeperMode.connect has run
    settings = FetchSettings(max_wait_ms=c["replica.fetch.wait.max.ms"], min_bytes=c["replica.fetch.min.bytes"],
                             max_bytes=c["replica.fetch.response.max.bytes"],
                             partition_max_bytes=c["replica.fetch.max.bytes"],
                             backoff_ms=c["replica.fetch.backoff.ms"],
                             socket_timeout_ms=c["replica.socket.timeout.ms"],
                             response_timeout_ms=c["replica.fetch.response.timeout.ms"])
    fetchers = ReplicaFetcherManager(c.broker_id, log_manager, settings, endpoint,
                                     on_append=hooks.follower_appended, on_high_watermark=high_watermark_moved,
                                     security=inter_broker, quota=follower_quota)
    return ZooKeeperParts(registration, client, fetchers, ZkIsrManager(client, isr_committed),
                          ControllerRunner(c, c.broker_id, registration, security=inter_broker))


class ZooKeeperMode:
    """A member of a ZooKeeper-mode cluster: the cluster id, topics and configs live in ZooKeeper, the controller
    says which replicas this broker serves, and the coordinators load the partitions led here as they come."""

    def __init__(self, config: BrokerConfig, zk: ZooKeeperParts, log_manager: LogManager,
                 replica_manager: ReplicaManager, metadata: MetadataCache, admin: TopicAdmin,
                 services: BrokerServices) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.registration = zk.registration
        self.zk_client = zk.client
        self.fetchers = zk.fetchers
        self.isr_manager = zk.isr_manager
        self.controller = zk.controller
        self.log_manager = log_manager
        self.replica_manager = replica_manager
        self.metadata = metadata
        self.admin = admin
        self.services = services
        self.config_changes: Any = None  # kcli.broker.config_change.ConfigChangeListener, from join() on
        # Metadata names the controller the election found until the controller's UpdateMetadata says it
        self.controller.on_controller_id(self._controller_elected)

    def _controller_elected(self, controller_id: int) -> None:
        if controller_id >= 0:
            self.metadata.controller_id = controller_id

    def connect(self) -> str | None:
        """Open the session; the cluster id lives in ZooKeeper (/cluster/id) and the log dirs' meta.properties
        must agree. The broker registers once it serves (join)."""
        return self.registration.start(None, register=False)

    def logs_loaded(self) -> None:
        """The controller's LeaderAndIsr says which replicas are served here; producer ids come in blocks. SCRAM
        credentials are read from /config/users before the listeners open (Kafka's dynamic config manager
        startup); the config change listener keeps them current from join() on."""
        if self.services.credentials is not None:
            self.services.credentials.load()
        _load_quotas(self.services)

    async def join(self, spawn: Spawn) -> None:
        """Kafka's order: logs loaded and listeners bound, then /brokers/ids (the controller's requests can be
        served from the moment it sees us), then the controller's Startup (its election, on its event thread). The fetchers exist first: the controller's
        LeaderAndIsr can arrive the moment we are registered."""
        self.isr_manager.start()
        spawn(self._replication_housekeeping())
        await asyncio.to_thread(self.registration.register)
        # Until the controller's first UpdateMetadata says who is alive, Metadata answers list this broker
        # alone and name the controller only if that is this broker (MetadataCache.advertised_controller_id).
        await asyncio.to_thread(self.controller.start)  # returns once the first election is over
        controller_id = self.controller.controller_id
        self.metadata.controller_id = controller_id if controller_id is not None else -1
        # topic configs other brokers change (Kafka starts its dynamic config manager after the controller)
        from kcli.broker.config_change import ConfigChangeListener

        self.config_changes = ConfigChangeListener(self.zk_client, self.admin, asyncio.get_running_loop(),
                                                   credentials=self.services.credentials,
                                                   quotas=self.services.quotas)
        self.config_changes.start()

    async def _replication_housekeeping(self) -> None:
        """The ISR expiration check every replica.lag.time.max.ms / 2 and the high-watermark checkpoint every
        replica.high.watermark.checkpoint.interval.ms (Kafka's isr-expiration and highwatermark-checkpoint)."""
        isr_every = self.config["replica.lag.time.max.ms"] / 2000
        checkpoint_every = self.config["replica.high.watermark.checkpoint.interval.ms"] / 1000
        next_isr = next_checkpoint = time.monotonic()
        while True:
            await asyncio.sleep(min(isr_every, checkpoint_every, 1.0))
            now = time.monotonic()
            try:
                if now >= next_isr:
                    next_isr = now + isr_every
                    self.replica_manager.shrink_isrs()
                if now >= next_checkpoint:
                    next_checkpoint = now + checkpoint_every
                    await asyncio.to_thread(self.log_manager.write_checkpoints)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("replication housekeeping failed; retrying")

    async def load_groups(self) -> None:
        """Each __consumer_offsets partition is loaded when it is led here (KafkaServer._leadership_changed)."""

    async def load_transactions(self) -> None:
        """Each __transaction_state partition is loaded when it is led here."""

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away before stopping (Kafka's
        KafkaServer.controlledShutdown): up to controlled.shutdown.max.retries attempts, each to the controller
        of the moment, controlled.shutdown.retry.backoff.ms apart; it succeeds when the controller answers with
        no partition left led here. The broker keeps serving meanwhile, so clients move with the leaders and see
        only NOT_LEADER_OR_FOLLOWER. After the last failed attempt the broker stops anyway (an unclean
        shutdown: the controller then elects leaders when the broker's ZooKeeper node goes)."""
        if not self.config["controlled.shutdown.enable"]:
            return False
        from kcli.broker.network_client import send_request
        from kcli.protocol import ApiKey
        from kcli.protocol.schema import load_request_schema

        started = time.monotonic()
        attempts = self.config["controlled.shutdown.max.retries"]
        timeout = self.config["request.timeout.ms"] / 1000
        epoch = self.registration.broker_epoch if self.registration.broker_epoch is not None else -1
        request = load_request_schema(ApiKey.CONTROLLED_SHUTDOWN, 3)(broker_id=self.broker_id, broker_epoch=epoch)
        for attempt in range(1, attempts + 1):
            elected = self.controller.controller_id  # who the election last found, else who UpdateMetadata named
            controller = elected if elected is not None else self.metadata.controller_id
            endpoint = self.services.endpoint(controller) if controller is not None and controller >= 0 else None
            reason: str
            if endpoint is None:
                reason = "no controller is known"
            else:
                try:
                    response = await send_request(*endpoint, ApiKey.CONTROLLED_SHUTDOWN, 3, request,
                                                  client_id=f"broker-{self.broker_id}-controlled-shutdown",
                                                  timeout=timeout,
                                                  security=self.services.inter_broker_security or PLAINTEXT_INTER_BROKER)
                except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
                    reason = f"controller {controller} at {endpoint[0]}:{endpoint[1]} unreachable ({exc!r})"
                else:
                    remaining = [f"{p.topic_name}-{p.partition_index}" for p in response.remaining_partitions]
                    if response.error_code == 0 and not remaining:
                        log.info("controlled shutdown succeeded in %.2fs (controller %d, attempt %d)",
                                 time.monotonic() - started, controller, attempt)
                        return True
                    reason = (f"controller {controller} answered {response.error_code.name}"
                              if response.error_code != 0 else
                              f"{len(remaining)} partitions still led here: {', '.join(remaining[:10])}")
            if attempt < attempts:
                log.warning("controlled shutdown attempt %d of %d failed: %s; retrying in %d ms", attempt, attempts,
                            reason, self.config["controlled.shutdown.retry.backoff.ms"])
                await asyncio.sleep(self.config["controlled.shutdown.retry.backoff.ms"] / 1000)
            else:
                log.warning("controlled shutdown attempt %d of %d failed: %s", attempt, attempts, reason)
        log.warning("proceeding to an unclean shutdown: every controlled shutdown attempt failed")
        return False

    async def leave(self) -> None:
        """The first steps of a stop: the config listener, then the controller resigns and gives up /controller,
        so that another broker controls the cluster while this one closes its logs (which can take seconds);
        then the fetchers and the ISR manager stop."""
        if self.config_changes is not None:
            self.config_changes.stop()
        await asyncio.to_thread(self.controller.shutdown)
        await self.fetchers.shutdown()
        await self.isr_manager.stop()

    def close(self) -> None:
        """The last step: the session closes (its ephemeral nodes go)."""
        self.registration.stop()
