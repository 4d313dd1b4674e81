"""KafkaServer: builds the broker's services, starts and stops them, and runs the background work
(Kafka's KafkaServer). `kctl broker run` is `asyncio.run(KafkaServer(config).run())`.

Start-up order follows Kafka's: log dirs are locked and loaded (with recovery after an unclean stop), the
services are built, the listeners open at once, and the group coordinator loads `__consumer_offsets` in the
background, answering group requests with COORDINATOR_LOAD_IN_PROGRESS meanwhile. Disk work that can take
time (fsyncs, retention, the cleaner, checkpoints, creating and deleting logs) runs in worker threads, never
on the event loop.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

from kcli.broker.config import BrokerConfig
from kcli.broker.group_coordinator import GroupCoordinator
from kcli.broker.kafka_apis import KafkaApis
from kcli.broker.log_manager import LogManager, ManagedLog, recovery_log_lines
from kcli.broker.metadata_cache import BrokerEndpoint, MetadataCache
from kcli.broker.replica_manager import ReplicaManager
from kcli.broker.replica_selector import create_replica_selector
from kcli.broker.services import BrokerServices, ProducerIdManager
from kcli.broker.socket_server import SocketServer
from kcli.broker.topic_admin import TopicAdmin
from kcli.broker.transaction_coordinator import TransactionCoordinator
from kcli.broker.transaction_markers import TransactionMarkerChannelManager, write_txn_markers
from kcli.storage.log import LogConfig

log = logging.getLogger("kcli.broker")
CHECKPOINT_INTERVAL_S = 60.0
LOGS_PER_FREEZE = 500


def _freeze_long_lived(*, full: bool = False) -> None:
    """Keep CPython's full garbage collections short as partitions pile up. A hosted partition is ~30 objects
    the collector tracks for as long as the log lives, and a full collection traverses every tracked object
    while holding the GIL: with 5,000 partitions one took ~190 ms (every client waited). After the logs are
    loaded, and after every LOGS_PER_FREEZE new logs, the garbage is collected and what is left moved to the
    permanent generation (gc.freeze), which later collections skip. Frozen objects are still freed by
    reference counting when their log is deleted (logs and partitions hold no reference cycles). Only the
    start-up freeze collects every generation first (a full pass then is what this avoids later); the others
    collect the young ones, where a request's short-lived cycles are."""
    gc.collect() if full else gc.collect(1)
    gc.freeze()


class KafkaServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        listener = config.advertised_listeners[0]
        self.advertised = (listener.host, listener.port)
        self.log_manager = LogManager(
            config.log_dirs, broker_id=self.broker_id,
            log_config=LogConfig(segment_bytes=config["log.segment.bytes"],
                                 index_interval_bytes=config["log.index.interval.bytes"],
                                 segment_index_bytes=config["log.index.size.max.bytes"],
                                 file_delete_delay_ms=config["log.segment.delete.delay.ms"]))
        self.replica_manager = ReplicaManager(self.log_manager, local_broker_id=self.broker_id,
                                              replica_lag_time_max_ms=config["replica.lag.time.max.ms"],
                                              on_flush_due=self._schedule_flush)
        self.metadata = MetadataCache()
        self.replica_manager.metadata = self.metadata
        self.replica_manager.replica_selector = create_replica_selector(config["replica.selector.class"])
        self.metadata.add_broker(BrokerEndpoint(self.broker_id, listener.host, listener.port,
                                                self.config.values.get("broker.rack")))  # type: ignore[arg-type]
        self.metadata.controller_id = self.broker_id
        self.zk: Any = None  # kcli.zk.registration.BrokerRegistration in ZooKeeper mode
        self.controller: Any = None  # kcli.broker.controller.ControllerRunner in ZooKeeper mode
        self.isr_manager: Any = None
        self.config_changes: Any = None  # kcli.broker.config_change.ConfigChangeListener in ZooKeeper mode
        self.admin = TopicAdmin(config, self.log_manager, self.replica_manager, self.metadata)
        self.admin.logs_created = self._logs_created
        self._logs_since_freeze = 0
        self.groups = GroupCoordinator(config, self.log_manager, self.replica_manager, self.admin)
        self.producer_ids = ProducerIdManager()
        self.services = BrokerServices(config, self.broker_id, self.advertised, self.log_manager,
                                       self.replica_manager, self.metadata, self.admin, self.groups,
                                       self.producer_ids)
        self.transactions = TransactionCoordinator(config, self.replica_manager, self.admin, self.log_manager,
                                                   self.producer_ids)
        self.transactions.markers = TransactionMarkerChannelManager(
            self.transactions, local_broker_id=self.broker_id, leader_of=self._leader_of,
            endpoint=self.services.endpoint,
            write_local=lambda markers: write_txn_markers(self.replica_manager, self.groups, markers,
                                                          config["request.timeout.ms"]),
            request_timeout_ms=config["request.timeout.ms"])
        self.services.transactions = self.transactions
        self.socket_server = SocketServer(KafkaApis(self.services),
                                          max_frame_bytes=config["socket.request.max.bytes"])
        self._stopping = asyncio.Event()
        self._background: list[asyncio.Task] = []
        self._flushing: set[int] = set()

    @property
    def bound(self) -> list[tuple[str, int]]:
        return self.socket_server.bound

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        started = time.monotonic()
        if self.config["zookeeper.connect"]:
            from kcli.zk.registration import BrokerRegistration

            self.zk = BrokerRegistration(
                str(self.config["zookeeper.connect"]), self.broker_id,
                endpoints=[(l.name, l.host, l.port) for l in self.config.advertised_listeners],
                security_protocols={l.name: self.config.security_protocol(l) for l in self.config.advertised_listeners},
                session_timeout_ms=self.config["zookeeper.session.timeout.ms"],
                rack=self.config.values.get("broker.rack"))  # type: ignore[arg-type]
            # The cluster id lives in ZooKeeper (/cluster/id); the log dirs' meta.properties must agree.
            self.log_manager.cluster_id = self.zk.start(None, register=False)  # registered once serving
            self.services.zk = self.zk
            self._join_cluster()
        try:
            await asyncio.to_thread(self.log_manager.startup)
        except BaseException:
            if self.zk is not None:
                self.zk.stop()
            raise
        for run in self.log_manager.recoveries:
            for line in recovery_log_lines(run):
                log.warning("startup recovery: %s", line)
        self.metadata.cluster_id = self.log_manager.cluster_id
        self.admin.load()
        _freeze_long_lived(full=True)
        self.producer_ids.next_producer_id = 1 + max(
            (pid for p in self.replica_manager.partitions.values() for pid in p.log.producers), default=-1)
        if self.zk is None:  # standalone: every __transaction_state partition is led here; loaded below
            self.transactions.begin_standalone_load()
        await self.socket_server.start([(l.host, l.port) for l in self.config.listeners])
        loop = asyncio.get_running_loop()
        if self.zk is not None:
            # Kafka's order: logs loaded and listeners bound, then /brokers/ids (the controller's requests can
            # be served from the moment it sees us), then the controller bid
            # (the fetchers exist first: the controller's LeaderAndIsr can arrive the moment we are registered)
            self._start_replication(loop)
            await asyncio.to_thread(self.zk.register)
            self._registered()
            self._start_controller()
            # topic configs other brokers change (Kafka starts its dynamic config manager after the controller)
            from kcli.broker.config_change import ConfigChangeListener

            self.config_changes = ConfigChangeListener(self.admin.zk, self.admin, loop)
            self.config_changes.start()
        self._background.append(loop.create_task(self._load_groups()))
        self._background.append(loop.create_task(self._load_transactions()))
        self._background.append(loop.create_task(self._housekeep()))
        log.info("kctl broker %d serving %s (cluster %s, %d topics) in %.2fs", self.broker_id,
                 ", ".join(f"{h}:{p}" for h, p in self.bound), self.log_manager.cluster_id,
                 len(self.metadata.topics), time.monotonic() - started)
        if self.config.unknown:
            log.warning("unknown configuration keys ignored: %s", ", ".join(sorted(self.config.unknown)))

    # -- ZooKeeper mode: a member of a cluster ---------------------------------------------------------
    def _join_cluster(self) -> None:
        """Topics now live in ZooKeeper and replicas come from the controller's LeaderAndIsr; the high
        watermarks go to replication-offset-checkpoint."""
        from kcli.zk.kafka_zk_client import KafkaZkClient

        zk_client = KafkaZkClient.for_registration(self.zk)
        self.admin.zk = zk_client
        self.producer_ids.allocate_block = lambda: zk_client.allocate_producer_id_block(self.broker_id)
        self.replica_manager.broker_epoch_source = lambda: self.zk.broker_epoch
        self.log_manager.high_watermarks = self.replica_manager.high_watermarks
        self.groups.clustered = True
        self.transactions.clustered = True
        self.replica_manager.on_leadership_change = self._leadership_changed

    def _registered(self) -> None:
        self.replica_manager.broker_epoch = self.zk.broker_epoch if self.zk.broker_epoch is not None else -1
        # Until the controller's first UpdateMetadata says who is alive, Metadata answers list this broker
        # alone and name the controller only if that is this broker (MetadataCache.advertised_controller_id).
        self.metadata.controller_id = self.zk.controller_id if self.zk.controller_id is not None else -1

    def _leadership_changed(self, leaders: list[Any], followers: list[Any]) -> None:
        """The group coordinator takes over the __consumer_offsets partitions led here now (replayed off the
        event loop) and forgets the others (Kafka's onLeadershipChange: onElection / onResignation)."""
        loop = asyncio.get_running_loop()
        for index in self.groups.on_leadership_change(leaders, followers):
            async def load(index: int = index) -> None:
                try:
                    records = await asyncio.to_thread(self.groups.load_partition, index)
                except Exception:
                    log.exception("loading __consumer_offsets-%d failed", index)
                    records = []
                self.groups.finish_loading(index, records)
            self._background.append(loop.create_task(load()))
        for index in self.transactions.on_leadership_change(leaders, followers):
            epoch = self.transactions.loading[index]

            async def load_txns(index: int = index, epoch: int = epoch) -> None:
                try:
                    values = await asyncio.to_thread(self.transactions.load_partition, index)
                except Exception:
                    log.exception("loading __transaction_state-%d failed", index)
                    values = {}
                self.transactions.finish_loading(index, epoch, values)
            self._background.append(loop.create_task(load_txns()))

    def _leader_of(self, topic: str, index: int) -> int | None:
        """The partition's leader for the transaction markers: -1 without one, None when it is gone."""
        state = self.metadata.partition_state(topic, index)
        return None if state is None else state.leader

    def _start_replication(self, loop: asyncio.AbstractEventLoop) -> None:
        """Replica fetchers, the ISR manager and the ISR expiration task (Kafka's ReplicaManager.startup, before
        the registration). The controller runs in threads of its own, as Kafka's controller-event thread."""
        from kcli.broker.isr_manager import ZkIsrManager
        from kcli.broker.replica_fetcher import FetchSettings, ReplicaFetcherManager

        c = self.config
        settings = FetchSettings(max_wait_ms=c["replica.fetch.wait.max.ms"], min_bytes=c["replica.fetch.min.bytes"],
                                 max_bytes=c["replica.fetch.response.max.bytes"],
                                 partition_max_bytes=c["replica.fetch.max.bytes"],
                                 backoff_ms=c["replica.fetch.backoff.ms"],
                                 socket_timeout_ms=c["replica.socket.timeout.ms"],
                                 response_timeout_ms=c["replica.fetch.response.timeout.ms"])
        self.replica_manager.fetchers = ReplicaFetcherManager(
            self.broker_id, self.log_manager, settings, self.services.endpoint, on_append=self._follower_appended,
            on_high_watermark=self.replica_manager.follower_high_watermark_moved)
        self.isr_manager = ZkIsrManager(self.admin.zk, self.replica_manager)
        self.isr_manager.start()
        self.replica_manager.isr_listener = self.isr_manager
        self._background.append(loop.create_task(self._replication_housekeeping()))

    def _start_controller(self) -> None:
        """This broker's controller candidacy (the registration made the bid; the runner acts on it)."""
        from kcli.broker.controller import ControllerRunner

        self.controller = ControllerRunner(self.config, self.broker_id, self.zk)
        self.controller.start()
        self.services.controller = self.controller

    def _follower_appended(self, partition: Any) -> None:
        if self.log_manager.flush_due(partition.managed):
            self._schedule_flush(partition.managed)

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

    async def _load_groups(self) -> None:
        """The port is open already; group requests get COORDINATOR_LOAD_IN_PROGRESS until this is done.
        In a cluster each __consumer_offsets partition is loaded when it is led here (_leadership_changed)."""
        try:
            if not self.groups.clustered:
                await asyncio.to_thread(self.groups.load)
        finally:
            self.groups.loading = False
        self.groups.start()

    async def _load_transactions(self) -> None:
        """Standalone: replay __transaction_state (COORDINATOR_LOAD_IN_PROGRESS meanwhile); producer ids handed
        out afterwards are above every id it holds. In a cluster partitions load as they are led here."""
        try:
            if not self.transactions.clustered:
                loaded = await asyncio.to_thread(self.transactions.load_all)
                for index, (epoch, values) in loaded.items():
                    self.transactions.finish_loading(index, epoch, values)
                    self.producer_ids.next_producer_id = max(
                        [self.producer_ids.next_producer_id, *(v.producer_id + 1 for v in values.values())])
        except Exception:
            log.exception("loading __transaction_state failed")
        finally:
            self.transactions.loaded.set()
        self.transactions.start()

    async def run(self) -> None:
        """Start, serve until SIGTERM/SIGINT, then shut down cleanly. The handlers come first: the port opens
        before start() returns, and a SIGTERM then must stop the broker cleanly too."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        loop.add_signal_handler(signal.SIGQUIT, self._dump_stacks)  # as `kill -3` makes a JVM print its threads
        await self.start()
        try:
            await self._stopping.wait()
            self.replica_manager.shutting_down = True  # before the controlled shutdown, as Kafka's isShuttingDown
            if self.zk is not None and self.config["controlled.shutdown.enable"]:
                await self.controlled_shutdown()
        finally:
            await self.stop()

    def _dump_stacks(self) -> None:
        """Every thread's stack and every asyncio task's, to the log (what is the broker waiting on?)."""
        import io
        import sys
        import threading
        import traceback

        out = io.StringIO()
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, frame in sys._current_frames().items():
            out.write(f"--- thread {names.get(ident, ident)}\n{''.join(traceback.format_stack(frame))}")
        for task in asyncio.all_tasks():
            out.write(f"--- task {task.get_name()} ({task.get_coro()!r})\n")
            task.print_stack(limit=12, file=out)
        log.warning("SIGQUIT: threads and tasks\n%s", out.getvalue())

    async def controlled_shutdown(self) -> bool:
        """Ask the controller to move this broker's leaderships away before stopping (Kafka's
        KafkaServer.controlledShutdown): up to controlled.shutdown.max.retries attempts, each to the controller
        of the moment, controlled.shutdown.retry.backoff.ms apart; it succeeds when the controller answers with
        no partition left led here. The broker keeps serving meanwhile, so clients move with the leaders and see
        only NOT_LEADER_OR_FOLLOWER. After the last failed attempt the broker stops anyway (an unclean
        shutdown: the controller then elects leaders when the broker's ZooKeeper node goes)."""
        from kcli.broker.network_client import send_request
        from kcli.protocol import ApiKey
        from kcli.protocol.schema import load_request_schema

        started = time.monotonic()
        attempts = self.config["controlled.shutdown.max.retries"]
        timeout = self.config["request.timeout.ms"] / 1000
        epoch = self.zk.broker_epoch if self.zk.broker_epoch is not None else -1
        request = load_request_schema(ApiKey.CONTROLLED_SHUTDOWN, 3)(broker_id=self.broker_id, broker_epoch=epoch)
        for attempt in range(1, attempts + 1):
            controller = self.zk.controller_id if self.zk.controller_id is not None else self.metadata.controller_id
            endpoint = self.services.endpoint(controller) if controller is not None and controller >= 0 else None
            reason: str
            if endpoint is None:
                reason = "no controller is known"
            else:
                try:
                    response = await send_request(*endpoint, ApiKey.CONTROLLED_SHUTDOWN, 3, request,
                                                  client_id=f"broker-{self.broker_id}-controlled-shutdown",
                                                  timeout=timeout)
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

    async def stop(self) -> None:
        self.replica_manager.shutting_down = True
        if self.config_changes is not None:
            self.config_changes.stop()
        if self.controller is not None:
            # First: the controller resigns and gives up /controller, so that another broker controls the
            # cluster while this one closes its logs (which can take seconds).
            await asyncio.to_thread(self.controller.shutdown)
        if self.replica_manager.fetchers is not None:
            await self.replica_manager.fetchers.shutdown()
        if self.isr_manager is not None:
            await self.isr_manager.stop()
        self.groups.stop()
        self.transactions.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self.replica_manager.shutdown()
        await self.socket_server.stop()
        await self.admin.drain()  # topics still being created or deleted in worker threads
        self.log_manager.shutdown()
        ledger = os.environ.get("KCTL_BROKER_API_LEDGER")
        if ledger:  # tests collect which API versions real clients used
            rows = [{"api": api, "version": v, "requests": n, "clients": sorted(c)}
                    for (api, v), (n, c) in sorted(self.socket_server.served.items())]
            Path(ledger).write_text(json.dumps(rows, indent=1))
        if self.zk is not None:
            self.zk.stop()
        log.info("kctl broker %d stopped cleanly", self.broker_id)

    def _logs_created(self, count: int) -> None:
        self._logs_since_freeze += count
        if self._logs_since_freeze >= LOGS_PER_FREEZE:
            self._logs_since_freeze = 0
            _freeze_long_lived()

    # -- background work -----------------------------------------------------------------------------
    def _schedule_flush(self, managed: ManagedLog) -> None:
        """log.flush.interval.messages reached: fsync in a worker thread; appends go on meanwhile."""
        key = id(managed)
        if key in self._flushing:
            return
        self._flushing.add(key)

        async def flush() -> None:
            try:
                await asyncio.to_thread(self.log_manager.flush, managed)
            except Exception:
                log.exception("flush of %s failed", managed.directory.name)
            finally:
                self._flushing.discard(key)

        self._background.append(asyncio.get_running_loop().create_task(flush()))
        self._background = [t for t in self._background if not t.done()]

    async def _housekeep(self) -> None:
        """Retention every log.retention.check.interval.ms, the cleaner every log.cleaner.backoff.ms, delayed
        deletes, time-based flushes and checkpoints: each pass in a worker thread."""
        retention_every = self.config["log.retention.check.interval.ms"] / 1000
        cleaner_every = self.config["log.cleaner.backoff.ms"] / 1000
        next_retention = time.monotonic() + retention_every
        next_clean = time.monotonic() + min(cleaner_every, retention_every)
        next_checkpoint = time.monotonic() + CHECKPOINT_INTERVAL_S
        while True:
            await asyncio.sleep(min(1.0, retention_every, cleaner_every))
            now = time.monotonic()
            try:
                if now >= next_retention:
                    next_retention = now + retention_every
                    for line in await asyncio.to_thread(self.log_manager.enforce_retention):
                        log.info("retention: %s", line)
                if now >= next_clean:
                    next_clean = now + cleaner_every
                    for line in await asyncio.to_thread(self.log_manager.clean_logs,
                                                        bool(self.config["log.cleaner.enable"])):
                        log.info("cleaner: %s", line)
                await asyncio.to_thread(self.log_manager.purge_deleted)
                for managed in self.log_manager.due_flushes():
                    self._schedule_flush(managed)
                if now >= next_checkpoint:
                    # Kafka's log.flush.offset.checkpoint.interval.ms: keep the root checkpoint files current.
                    next_checkpoint = now + CHECKPOINT_INTERVAL_S
                    await asyncio.to_thread(self.log_manager.write_checkpoints)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background log work failed; retrying next round")
