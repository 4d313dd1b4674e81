"""KafkaServer: builds the broker's services, starts and stops them, and runs the background work
(Kafka's KafkaServer). `kctl broker run` is `asyncio.run(KafkaServer(config).run())`.

Start-up order follows Kafka's: log dirs are locked and loaded (with recovery after an unclean stop), the
services are built, the listeners open at once, and the group coordinator loads `__consumer_offsets` in the
background, answering group requests with COORDINATOR_LOAD_IN_PROGRESS meanwhile. Disk work that can take
time (fsyncs, retention, the cleaner, checkpoints) runs in worker threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
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
from kcli.broker.log_manager import LogManager, ManagedLog
from kcli.broker.metadata_cache import BrokerEndpoint, MetadataCache
from kcli.broker.replica_manager import ReplicaManager
from kcli.broker.services import BrokerServices, ProducerIdManager
from kcli.broker.socket_server import SocketServer
from kcli.broker.topic_admin import TopicAdmin
from kcli.storage.log import LogConfig

log = logging.getLogger("kcli.broker")
CHECKPOINT_INTERVAL_S = 60.0


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
                                 segment_index_bytes=config["log.index.size.max.bytes"]))
        self.replica_manager = ReplicaManager(self.log_manager, on_flush_due=self._schedule_flush)
        self.metadata = MetadataCache()
        self.metadata.add_broker(BrokerEndpoint(self.broker_id, listener.host, listener.port,
                                                self.config.values.get("broker.rack")))  # type: ignore[arg-type]
        self.metadata.controller_id = self.broker_id
        self.zk: Any = None  # kcli.zk.registration.BrokerRegistration in ZooKeeper mode
        self.admin = TopicAdmin(config, self.log_manager, self.replica_manager, self.metadata)
        self.groups = GroupCoordinator(config, self.log_manager, self.replica_manager, self.admin)
        self.producer_ids = ProducerIdManager()
        self.services = BrokerServices(config, self.broker_id, self.advertised, self.log_manager,
                                       self.replica_manager, self.metadata, self.admin, self.groups,
                                       self.producer_ids)
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
                session_timeout_ms=self.config["zookeeper.session.timeout.ms"])
            # The cluster id lives in ZooKeeper (/cluster/id); the log dirs' meta.properties must agree.
            self.log_manager.cluster_id = self.zk.start(None)
            self.admin.registry = self.zk
            self.services.zk = self.zk
        try:
            await asyncio.to_thread(self.log_manager.startup)
        except BaseException:
            if self.zk is not None:
                self.zk.stop()
            raise
        for line in self.log_manager.recovered:
            log.warning("recovered after an unclean shutdown: %s", line)
        if self.log_manager.recovered:
            log.warning("startup recovery: %d partition(s) recovered", len(self.log_manager.recovered))
        self.metadata.cluster_id = self.log_manager.cluster_id
        self.admin.load()
        self.producer_ids.next_producer_id = 1 + max(
            (pid for p in self.replica_manager.partitions.values() for pid in p.log.producers), default=-1)
        await self.socket_server.start([(l.host, l.port) for l in self.config.listeners])
        loop = asyncio.get_running_loop()
        self._background.append(loop.create_task(self._load_groups()))
        self._background.append(loop.create_task(self._housekeep()))
        log.info("kctl broker %d serving %s (cluster %s, %d topics) in %.2fs", self.broker_id,
                 ", ".join(f"{h}:{p}" for h, p in self.bound), self.log_manager.cluster_id,
                 len(self.metadata.topics), time.monotonic() - started)
        if self.config.unknown:
            log.warning("unknown configuration keys ignored: %s", ", ".join(sorted(self.config.unknown)))

    async def _load_groups(self) -> None:
        """The port is open already; group requests get COORDINATOR_LOAD_IN_PROGRESS until this is done."""
        try:
            await asyncio.to_thread(self.groups.load)
        finally:
            self.groups.loading = False
        self.groups.start()

    async def run(self) -> None:
        """Start, serve until SIGTERM/SIGINT, then shut down cleanly."""
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._stopping.set)
        try:
            await self._stopping.wait()
        finally:
            await self.stop()

    async def stop(self) -> None:
        self.groups.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self.replica_manager.shutdown()
        await self.socket_server.stop()
        self.log_manager.shutdown()
        ledger = os.environ.get("KCTL_BROKER_API_LEDGER")
        if ledger:  # tests collect which API versions real clients used
            rows = [{"api": api, "version": v, "requests": n, "clients": sorted(c)}
                    for (api, v), (n, c) in sorted(self.socket_server.served.items())]
            Path(ledger).write_text(json.dumps(rows, indent=1))
        if self.zk is not None:
            self.zk.stop()
        log.info("kctl broker %d stopped cleanly", self.broker_id)

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
