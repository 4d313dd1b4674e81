"""KafkaServer: starts and stops the broker's services (built once by kcli.broker.assembly, standalone or as a
member of a ZooKeeper-mode cluster) and runs the background work (Kafka's KafkaServer). `kctl broker run` is
`asyncio.run(KafkaServer(config).run())`.

Start-up order follows Kafka's: log dirs are locked and loaded (with recovery after an unclean stop), the
listeners open at once, a cluster member then registers and bids for controller, and the group coordinator loads `__consumer_offsets` in the
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
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from kcli.broker.assembly import ServerHooks, assemble
from kcli.broker.config import BrokerConfig
from kcli.broker.log_manager import ManagedLog, recovery_log_lines

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
        broker = assemble(config, ServerHooks(schedule_flush=self._schedule_flush, logs_created=self._logs_created,
                                              follower_appended=self._follower_appended,
                                              leadership_changed=self._leadership_changed))
        self.log_manager = broker.log_manager
        self.replica_manager = broker.replica_manager
        self.metadata = broker.metadata
        self.admin = broker.admin
        self.groups = broker.groups
        self.producer_ids = broker.producer_ids
        self.transactions = broker.transactions
        self.services = broker.services
        self.socket_server = broker.socket_server
        self.mode = broker.mode  # standalone, or a member of a ZooKeeper-mode cluster (kcli.broker.assembly)
        self._logs_since_freeze = 0
        self._stopping = asyncio.Event()
        self._background: list[asyncio.Task] = []
        self._flushing: set[int] = set()
        self.metrics_endpoint: Any = None  # kcli.broker.metrics_endpoint.MetricsEndpoint with metrics.http.listener
        self.kafka07: Any = None  # kcli.broker.kafka07.Kafka07Server with kafka07.listeners
        self.remote_log_manager: Any = None  # tiered storage (KIP-405) with remote.log.storage.system.enable
        if config["remote.log.storage.system.enable"]:
            from kcli.broker.remote_log_manager import RemoteLogManager
            from kcli.storage.remote import remote_storage_manager

            props = {k: v for k, v in config.values.items() if k.startswith("remote.log.storage.manager.")}
            rsm = remote_storage_manager({**props, **config.remote_storage})
            self.remote_log_manager = RemoteLogManager(
                config, rsm, self.replica_manager, self.admin, self.broker_id,
                endpoint=self.services.endpoint if config["zookeeper.connect"] else None,
                security=getattr(self.services, "inter_broker_security", None))
            self.replica_manager.remote_log_manager = self.remote_log_manager
            if self.replica_manager.fetchers is not None:  # a follower's remote state (buildRemoteLogAuxState)
                self.replica_manager.fetchers.remote_log_manager = self.remote_log_manager

    @property
    def bound(self) -> list[tuple[str, int]]:
        return self.socket_server.bound

    # -- lifecycle ---------------------------------------------------------------------------------
    async def start(self) -> None:
        started = time.monotonic()
        cluster_id = self.mode.connect()  # ZooKeeper mode: /cluster/id, which the log dirs must carry
        try:
            if self.services.authorizer is not None:  # ACLs loaded (and their changes watched) before serving
                await asyncio.to_thread(self.services.authorizer.start)
            await asyncio.to_thread(self.log_manager.startup, cluster_id)
        except BaseException:
            if self.services.authorizer is not None:
                self.services.authorizer.close()
            if self.services.metadata_store is not None:
                self.services.metadata_store.close()
            self.mode.close()
            raise
        for run in self.log_manager.recoveries:
            for line in recovery_log_lines(run):
                log.warning("startup recovery: %s", line)
        self.metadata.cluster_id = self.log_manager.cluster_id
        self.admin.load()
        self._connection_limits_changed()  # the dynamic max.connections & co. (KIP-226), now loaded
        self.admin.dynamic.reconfigurables.append(self._connection_limits_changed)
        if self.remote_log_manager is not None:  # KIP-956's copy and fetch bounds are dynamic too
            remote, dynamic = self.remote_log_manager, self.admin.dynamic
            remote.quotas_changed(dynamic.merged())
            dynamic.reconfigurables.append(lambda: remote.quotas_changed(dynamic.merged()))
        _freeze_long_lived(full=True)
        self.mode.logs_loaded()
        self.replica_manager.alter_log_dirs.start()  # moves between log dirs a restart interrupted resume
        from kcli.broker.security.listener_config import all_listener_security

        security = all_listener_security(self.config)
        for name, listener_security in security.items():  # KIP-684, as Kafka warns
            if (listener_security.security_protocol == "SASL_SSL" and str(self.config["ssl.client.auth"]) != "none"
                    and not self.config.listener_has(name, "ssl.client.auth")):
                log.warning("ssl.client.auth=%s is ignored on SASL_SSL listener %s: set listener.name.%s."
                            "ssl.client.auth to ask its clients for certificates", self.config["ssl.client.auth"],
                            name, name.lower())
        if self.config.values.get("sasl.jaas.config"):
            log.warning("sasl.jaas.config without a listener prefix is ignored by a broker: use "
                        "listener.name.<listener>.<mechanism>.sasl.jaas.config")
        await self.socket_server.start([(l.host, l.port, security[l.name]) for l in self.config.listeners])
        if self.services.metrics is not None:
            await self._start_metrics()
        if self.config["kafka07.listeners"]:  # the legacy Kafka 0.7 listener (issue 30), off by default
            from kcli.broker.kafka07 import Kafka07Server, Kafka07Settings

            self.kafka07 = Kafka07Server(Kafka07Settings.from_config(self.config))
            await self.kafka07.start()
        # ZooKeeper mode: Kafka's order, logs loaded and listeners bound, then /brokers/ids, the controller bid and
        # the config change listener (ZooKeeperMode.join)
        await self.mode.join(self._spawn)
        self._spawn(self._load_groups())
        self._spawn(self._load_transactions())
        self._spawn(self._housekeep())
        if self.remote_log_manager is not None:
            self._spawn(self.remote_log_manager.run())
        log.info("kctl broker %d serving %s (cluster %s, %d topics) in %.2fs", self.broker_id,
                 ", ".join(f"{h}:{p}" for h, p in self.bound), self.log_manager.cluster_id,
                 len(self.metadata.topics), time.monotonic() - started)
        if self.config.unknown:
            log.warning("unknown configuration keys ignored: %s", ", ".join(sorted(self.config.unknown)))

    async def _start_metrics(self) -> None:
        """GET /metrics on metrics.http.listener, reading the socket edge, the partitions, the controller and the
        connection counts at each scrape."""
        from kcli.broker.metrics_endpoint import MetricsEndpoint

        metrics = self.services.metrics
        metrics.bind(served=self.socket_server.served, replica_manager=self.replica_manager,
                     controller=self.services.controller, standalone=not self.config["zookeeper.connect"],
                     quotas=self.socket_server.quotas, remote_log_manager=self.remote_log_manager)
        self.metrics_endpoint = MetricsEndpoint(str(self.config["metrics.http.listener"]), metrics.render)
        await self.metrics_endpoint.start()

    def _connection_limits_changed(self) -> None:
        """The connection limits of server.properties with the dynamic broker configs over them."""
        from kcli.broker.config_error import ConfigError
        from kcli.broker.connection_quotas import connection_limits

        quotas = self.socket_server.quotas
        if quotas is None:
            return
        try:
            limits = connection_limits(self.config, self.admin.dynamic.merged(), list(quotas.listeners))
        except ConfigError as exc:
            log.error("connection limits unchanged: %s", exc.describe())
            return
        if limits != quotas.limits:
            log.info("connection limits now %s", limits)
            self.socket_server.update_limits(limits)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        self._background.append(asyncio.get_running_loop().create_task(work))

    def _leadership_changed(self, leaders: list[Any], followers: list[Any]) -> None:
        """The group coordinator takes over the __consumer_offsets partitions led here now (replayed off the
        event loop) and forgets the others (Kafka's onLeadershipChange: onElection / onResignation)."""
        for index in self.groups.on_leadership_change(leaders, followers):
            async def load(index: int = index) -> None:
                try:
                    records = await asyncio.to_thread(self.groups.load_partition, index)
                except Exception:
                    log.exception("loading __consumer_offsets-%d failed", index)
                    records = []
                self.groups.finish_loading(index, records)
            self._spawn(load())
        for index in self.transactions.on_leadership_change(leaders, followers):
            epoch = self.transactions.loading[index]

            async def load_txns(index: int = index, epoch: int = epoch) -> None:
                try:
                    values = await asyncio.to_thread(self.transactions.load_partition, index)
                except Exception:
                    log.exception("loading __transaction_state-%d failed", index)
                    values = {}
                self.transactions.finish_loading(index, epoch, values)
            self._spawn(load_txns())

    def _follower_appended(self, partition: Any) -> None:
        if self.log_manager.flush_due(partition.managed):
            self._schedule_flush(partition.managed)

    async def _load_groups(self) -> None:
        """The port is open already; group requests get COORDINATOR_LOAD_IN_PROGRESS until this is done.
        In a cluster each __consumer_offsets partition is loaded when it is led here (_leadership_changed)."""
        try:
            await self.mode.load_groups()
        finally:
            self.groups.loading = False
        self.groups.start()

    async def _load_transactions(self) -> None:
        """Standalone: replay __transaction_state (COORDINATOR_LOAD_IN_PROGRESS meanwhile); producer ids handed
        out afterwards are above every id it holds. In a cluster partitions load as they are led here."""
        try:
            await self.mode.load_transactions()
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
            await self.mode.controlled_shutdown()  # ZooKeeper mode, with controlled.shutdown.enable
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

    async def stop(self) -> None:
        self.replica_manager.shutting_down = True
        # First (ZooKeeper mode): the controller resigns and gives up /controller, so that another broker controls
        # the cluster while this one closes its logs (which can take seconds); the fetchers stop.
        await self.mode.leave()
        self.groups.stop()
        self.transactions.stop()
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        if self.remote_log_manager is not None:
            self.remote_log_manager.close()
        self.replica_manager.shutdown()
        await self.socket_server.stop()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()
        if self.kafka07 is not None:
            await self.kafka07.stop()
        await self.admin.drain()  # topics still being created or deleted in worker threads
        await asyncio.to_thread(self.replica_manager.alter_log_dirs.shutdown)
        self.log_manager.shutdown()
        ledger = os.environ.get("KCTL_BROKER_API_LEDGER")
        if ledger:  # tests collect which API versions real clients used
            rows = [{"api": api, "version": v, "requests": n, "clients": sorted(c)}
                    for (api, v), (n, c) in sorted(self.socket_server.served.items())]
            Path(ledger).write_text(json.dumps(rows, indent=1))
        if self.services.authorizer is not None:
            await asyncio.to_thread(self.services.authorizer.close)
        if self.services.metadata_store is not None:  # the authorizer's (and credentials') ZooKeeper session
            await asyncio.to_thread(self.services.metadata_store.close)
        self.mode.close()
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
                started = time.monotonic()
                await asyncio.to_thread(self.log_manager.flush, managed)
                if self.services.metrics is not None:  # LogFlushStats.LogFlushRateAndTimeMs
                    self.services.metrics.log_flushed((time.monotonic() - started) * 1000)
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
