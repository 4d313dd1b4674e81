"""The asyncio network edge of `kctl broker run`: the only module that touches sockets.

Per connection: bytes -> ServerConnection (sans-io framing and decoding) -> handler -> response frame.
Requests of one connection are answered in order, one at a time, as Kafka does (it mutes a channel
until its response is sent); a Fetch waiting for data parks on an asyncio.Condition woken by appends.
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

from kio.schema.errors import ErrorCode

from kcli.broker import handlers
from kcli.broker.config import BrokerConfig
from kcli.broker.groups import GroupCoordinator
from kcli.broker.logmanager import LogManager, TopicError
from kcli.errors import KcliError
from kcli.protocol import NEED_DATA, ApiKey, LocalProtocolError, ProtocolError, ServerConnection, UnsupportedVersionError, api_versions_response
from kcli.storage.log import LogConfig

log = logging.getLogger("kcli.broker")
CHECKPOINT_INTERVAL_S = 60.0

HANDLERS = {
    ApiKey.METADATA: handlers.metadata,
    ApiKey.PRODUCE: handlers.produce,
    ApiKey.FETCH: handlers.fetch,
    ApiKey.LIST_OFFSETS: handlers.list_offsets,
    ApiKey.CREATE_TOPICS: handlers.create_topics,
    ApiKey.DELETE_TOPICS: handlers.delete_topics,
    ApiKey.CREATE_PARTITIONS: handlers.create_partitions,
    ApiKey.FIND_COORDINATOR: handlers.find_coordinator,
    ApiKey.INIT_PRODUCER_ID: handlers.init_producer_id,
    ApiKey.DESCRIBE_CONFIGS: handlers.describe_configs,
    ApiKey.JOIN_GROUP: handlers.join_group,
    ApiKey.SYNC_GROUP: handlers.sync_group,
    ApiKey.HEARTBEAT: handlers.heartbeat,
    ApiKey.LEAVE_GROUP: handlers.leave_group,
    ApiKey.OFFSET_COMMIT: handlers.offset_commit,
    ApiKey.OFFSET_FETCH: handlers.offset_fetch,
    ApiKey.DESCRIBE_GROUPS: handlers.describe_groups,
    ApiKey.LIST_GROUPS: handlers.list_groups,
    ApiKey.DELETE_GROUPS: handlers.delete_groups,
}


class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        listener = config.advertised_listeners[0]
        self.advertised = (listener.host, listener.port)
        self.logs = LogManager(
            config.log_dirs,
            broker_id=self.broker_id,
            log_config=LogConfig(segment_bytes=config["log.segment.bytes"],
                                 index_interval_bytes=config["log.index.interval.bytes"],
                                 segment_index_bytes=config["log.index.size.max.bytes"]),
            flush_interval_messages=None if config["log.flush.interval.messages"] >= 2**62
            else config["log.flush.interval.messages"],
            flush_interval_ms=config["log.flush.interval.ms"],
            roll_ms=config.roll_ms,
            cleanup_policy=str(config["log.cleanup.policy"]),
        )
        self._housekeeping: asyncio.Task | None = None
        self._servers: list[asyncio.AbstractServer] = []
        self._appended = asyncio.Condition()
        self._stopping = asyncio.Event()
        self._next_producer_id = 0
        self.groups = GroupCoordinator(self)
        self.zk = None  # kcli.zk.registration.BrokerRegistration in ZooKeeper mode
        self._connections: set[asyncio.Task] = set()
        # (api, version) -> (requests, client software names): the version ledger's evidence
        self.served: dict[tuple[str, int], list] = {}
        self.bound: list[tuple[str, int]] = []

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
            self.logs.cluster_id = self.zk.start(None)
        try:
            self.logs.startup()
        except BaseException:
            if self.zk is not None:
                self.zk.stop()
            raise
        for line in self.logs.recovered:
            log.warning("recovered after an unclean shutdown: %s", line)
        for name in self.logs.topics:
            self._announce(name)  # topics already on disk are (re)written to ZooKeeper
        self.groups.load()
        self.groups.start()
        self._housekeeping = asyncio.get_running_loop().create_task(self._housekeep())
        self._next_producer_id = 1 + max(
            (pid for t in self.logs.topics.values() for p in t.partitions for pid in p.log.producers), default=-1)
        for listener in self.config.listeners:
            server = await asyncio.start_server(self._serve_connection, listener.host, listener.port,
                                                reuse_address=True)
            self._servers.append(server)
            for sock in server.sockets:
                self.bound.append(sock.getsockname()[:2])
        log.info("kctl broker %d serving %s (cluster %s, %d topics) in %.2fs", self.broker_id,
                 ", ".join(f"{h}:{p}" for h, p in self.bound), self.logs.cluster_id, len(self.logs.topics),
                 time.monotonic() - started)
        if self.config.unknown:
            log.warning("unknown configuration keys ignored: %s", ", ".join(sorted(self.config.unknown)))

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
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        for server in self._servers:
            await server.wait_closed()
        self.logs.shutdown()
        ledger = os.environ.get("KCTL_BROKER_API_LEDGER")
        if ledger:  # tests collect which API versions real clients used
            rows = [{"api": api, "version": v, "requests": n, "clients": sorted(c)}
                    for (api, v), (n, c) in sorted(self.served.items())]
            Path(ledger).write_text(json.dumps(rows, indent=1))
        if self.zk is not None:
            self.zk.stop()
        log.info("kctl broker %d stopped cleanly", self.broker_id)

    async def _housekeep(self) -> None:
        """Retention every log.retention.check.interval.ms, delayed deletes, time-based flushes, checkpoints."""
        interval = self.config["log.retention.check.interval.ms"] / 1000
        next_retention = time.monotonic() + interval
        next_checkpoint = time.monotonic() + CHECKPOINT_INTERVAL_S
        while True:
            await asyncio.sleep(min(1.0, interval))
            if time.monotonic() >= next_retention:
                next_retention = time.monotonic() + interval
                for line in self.logs.enforce_retention(self.config.retention_ms, self.config["log.retention.bytes"],
                                                        self.config["log.segment.delete.delay.ms"]):
                    log.info("retention: %s", line)
                for line in self.logs.compact_offsets_topic():
                    log.info("cleaner: %s", line)
            self.logs.purge_deleted()
            self.logs.flush_if_due()
            if time.monotonic() >= next_checkpoint:
                # Kafka's log.flush.offset.checkpoint.interval.ms: keep the root checkpoint files current.
                next_checkpoint = time.monotonic() + CHECKPOINT_INTERVAL_S
                self.logs.write_checkpoints()

    # -- connections -------------------------------------------------------------------------------
    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        peer = writer.get_extra_info("peername")
        conn = ServerConnection(max_frame_bytes=self.config["socket.request.max.bytes"])
        try:
            while True:
                data = await reader.read(256 * 1024)
                if not data:
                    return
                conn.receive_data(data)
                while True:
                    try:
                        request = conn.next_request()
                    except UnsupportedVersionError as exc:
                        if exc.response is None:
                            raise
                        writer.write(exc.response)  # ApiVersions too new: our ranges in the v0 layout (KIP-511)
                        continue
                    if request is NEED_DATA:
                        break
                    frame = await self._answer(conn, request, peer[0] if peer else "")
                    if frame is None:
                        continue
                    if isinstance(frame, list):
                        await self._send_parts(writer, frame)
                    else:
                        writer.write(frame)
                    await writer.drain()
        except ProtocolError as exc:
            # Malformed frames close this connection only; everyone else is served on.
            log.warning("closing connection from %s: %s", peer, exc)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:  # a handler bug must cost one connection, never the broker
            log.exception("internal error serving %s; closing the connection", peer)
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()

    async def _answer(self, conn: ServerConnection, request: Any, client_host: str) -> bytes | list[Any] | None:
        entry = self.served.setdefault((request.api_key.name, request.api_version), [0, set()])
        entry[0] += 1
        entry[1].add(_client_family(request.client_id))
        if request.api_key == ApiKey.API_VERSIONS:
            return conn.send(request, api_versions_response(version=request.api_version))
        handler = HANDLERS.get(request.api_key)
        if handler is None:  # advertised but unhandled would be a bug: cost the connection, not the broker
            raise LocalProtocolError(f"no handler for {request.name}", request=request.name,
                                     correlation_id=request.correlation_id)
        response = await handler(self, request.body, handlers.Call(request, client_host))
        if response is None:
            return None
        if request.api_key == ApiKey.FETCH:
            return conn.send_parts(request, response)
        return conn.send(request, response)

    async def _send_parts(self, writer: asyncio.StreamWriter, parts: list[Any]) -> None:
        """Bytes through the stream; segment regions with sendfile (os.sendfile on plaintext sockets)."""
        loop = asyncio.get_running_loop()
        for part in parts:
            if isinstance(part, bytes):
                writer.write(part)
                continue
            await writer.drain()
            with open(part.path, "rb") as segment:
                await loop.sendfile(writer.transport, segment, part.position, part.length)

    # -- services for handlers ---------------------------------------------------------------------
    def topic_name_by_id(self, topic_id: Any) -> str | None:
        for topic in self.logs.topics.values():
            if topic.topic_id == topic_id:
                return topic.name
        return None

    def auto_create(self, name: str) -> ErrorCode:
        error, _ = self.create_topic(name, self.config["num.partitions"])
        return ErrorCode.leader_not_available if error == ErrorCode.none else error

    def create_topic(self, name: str, partitions: int) -> tuple[ErrorCode, str | None]:
        try:
            self.logs.create_topic(name, partitions)
        except TopicError as exc:
            code = ErrorCode.topic_already_exists if "already exists" in exc.reason else ErrorCode.invalid_topic_exception
            return code, exc.reason
        log.info("created topic %s with %d partitions", name, partitions)
        self._announce(name)
        return ErrorCode.none, None

    def _announce(self, name: str) -> None:
        topic = self.logs.topics.get(name)
        if self.zk is not None and topic is not None:
            self.zk.topic_created(name, len(topic.partitions), topic.topic_id)

    def delete_topic(self, name: str) -> None:
        self.logs.delete_topic(name)
        if self.zk is not None:
            self.zk.topic_deleted(name)
        log.info("deleted topic %s", name)

    def log_start(self, topic: str, index: int) -> int:
        partition = self.logs.partition(topic, index)
        return -1 if partition is None else partition.log.log_start_offset

    def append(self, topic: str, index: int, raw: bytes) -> tuple[ErrorCode, int, str | None]:
        partition = self.logs.partition(topic, index)
        if partition is None:
            return ErrorCode.unknown_topic_or_partition, -1, None
        try:
            stamped, batches = handlers.assign_offsets(raw, partition.log.log_end_offset, self.config["message.max.bytes"])
        except handlers.ProduceError as exc:
            log.warning("rejected produce to %s-%d: %s", topic, index, exc.reason)
            return exc.code, -1, exc.reason
        for batch in batches:
            error, duplicate = handlers.check_sequence(partition.log.producers.get(batch.producer_id), batch)
            if error != ErrorCode.none:
                return error, -1, None
            if duplicate is not None:
                return ErrorCode.none, duplicate, None
        try:
            base, _count = self.logs.append(partition, stamped)
        except KcliError as exc:
            log.error("append to %s-%d failed: %s", topic, index, exc)
            return ErrorCode.kafka_storage_error, -1, exc.reason
        self._notify_append()
        return ErrorCode.none, base, None

    def _notify_append(self) -> None:
        async def notify() -> None:
            async with self._appended:
                self._appended.notify_all()

        asyncio.get_running_loop().create_task(notify())

    async def wait_for_append(self, timeout: float) -> None:
        if timeout <= 0:
            return
        async with self._appended:
            try:
                await asyncio.wait_for(self._appended.wait(), timeout)
            except asyncio.TimeoutError:
                pass

    def next_producer_id(self, transactional_id: str | None) -> tuple[int, int]:
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        return producer_id, 0

    def describe_config(self, resource_type: int, name: str) -> dict[str, str] | None:
        if resource_type == 2:  # TOPIC
            if name not in self.logs.topics:
                return None
            return {
                "cleanup.policy": str(self.config["log.cleanup.policy"]),
                "segment.bytes": str(self.config["log.segment.bytes"]),
                "retention.ms": str(self.config.retention_ms),
                "retention.bytes": str(self.config["log.retention.bytes"]),
                "max.message.bytes": str(self.config["message.max.bytes"]),
                "index.interval.bytes": str(self.config["log.index.interval.bytes"]),
                "segment.ms": str(self.config.roll_ms),
                "message.timestamp.type": "CreateTime",
            }
        if resource_type == 4:  # BROKER
            return {k: str(v) for k, v in self.config.values.items() if v is not None}
        return None


def _client_family(client_id: str | None) -> str:
    """librdkafka names clients rdkafka by default; kafka-python kafka-python-<version>; kcat 'rdkafka' too."""
    text = (client_id or "").lower()
    for family in ("kafka-python", "rdkafka", "kcat", "aiokafka", "console-consumer", "adminclient", "producer"):
        if family in text:
            return family
    return client_id or "(none)"
