"""The legacy Kafka 0.7 listener: Kafka 0.7's five request types over its own port, for topics in the 0.7 layout,
registered in a 0.7-layout ZooKeeper chroot (off unless ``kafka07.listeners`` is set).

Kafka 0.7's answers: produce and multi-produce have no response; a produce that fails (invalid message, wrong
partition) or a frame that does not parse (unknown request type, truncated body) closes the connection, as 0.7's
SocketServer did on the handler's exception; fetch, multi-fetch and offsets answer with 0.7's error codes. The
listener serves only 0.7 topics: a 0.7 client cannot read or write a modern topic (no byte-offset map over
modern batches is kept). Kafka 0.7: kafka/server/{KafkaServer,KafkaRequestHandlers}.scala, kafka/network/.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcli.broker.kafka07_config import kafka07_value, listener_address
from kcli.protocol.legacy07 import (
    NEED_DATA,
    BadRequest07,
    Connection07,
    ErrorCode07,
    FetchRequest07,
    FetchResponse07,
    MultiFetchRequest07,
    MultiFetchResponse07,
    MultiProduceRequest07,
    OffsetsRequest07,
    OffsetsResponse07,
    ProduceRequest07,
    Protocol07Error,
    Request07,
    Response07,
)
from kcli.storage.log07 import (
    InvalidFetchSizeError07,
    InvalidMessageError07,
    Log07Config,
    Log07Error,
    LogManager07,
    LogManager07Config,
    OffsetOutOfRangeError07,
    WrongPartitionError07,
)

log = logging.getLogger("kcli.broker.kafka07")

RANDOM_PARTITION = -1  # ProducerRequest.RandomPartition
READ_SIZE = 64 * 1024
# ErrorMapping.codeFor: the exception of a failed request and the code its answer carries.
ERROR_CODES: dict[type[Log07Error], ErrorCode07] = {
    OffsetOutOfRangeError07: ErrorCode07.OFFSET_OUT_OF_RANGE,
    InvalidMessageError07: ErrorCode07.INVALID_MESSAGE,
    WrongPartitionError07: ErrorCode07.WRONG_PARTITION,
    InvalidFetchSizeError07: ErrorCode07.INVALID_FETCH_SIZE,
}


def error_code(exc: Log07Error) -> ErrorCode07:
    return ERROR_CODES.get(type(exc), ErrorCode07.UNKNOWN)


class CloseConnection(Exception):
    """The request cannot be answered: 0.7 closes the connection (its produce has no response to carry an error)."""


@dataclass(frozen=True)
class Kafka07Settings:
    host: str
    port: int
    advertised_host: str
    broker_id: int
    log_dir: Path
    manager: LogManager07Config
    flush_scheduler_ms: int
    cleanup_interval_ms: int
    max_request_bytes: int
    zookeeper_connect: str | None
    zookeeper_timeout_s: float

    @classmethod
    def from_config(cls, config: Any) -> Kafka07Settings:
        """The settings of a kcli.broker.config.BrokerConfig whose kafka07.listeners is set."""

        def value(key: str) -> Any:
            return kafka07_value(config, "kafka07." + key)

        host, port = listener_address(str(value("listeners")))
        log_dir = value("log.dir")
        if not log_dir:
            first = Path(config.log_dirs[0])
            log_dir = first.parent / (first.name + "-kafka07")
        hours_ms = 3_600_000
        manager = LogManager07Config(
            num_partitions=value("num.partitions"),
            topic_partitions=dict(value("topic.partition.count.map")),
            log=Log07Config(segment_bytes=value("log.file.size"),
                            flush_interval_messages=value("log.flush.interval"),
                            flush_interval_ms=value("log.default.flush.interval.ms"),
                            retention_ms=value("log.retention.hours") * hours_ms,
                            retention_bytes=value("log.retention.size")),
            topic_flush_ms=dict(value("topic.flush.intervals.ms")),
            topic_retention_ms={t: h * hours_ms for t, h in value("topic.log.retention.hours").items()},
        )
        return cls(host, port, "127.0.0.1" if host in ("0.0.0.0", "") else host, config.broker_id, Path(log_dir),
                   manager, value("log.default.flush.scheduler.interval.ms"),
                   value("log.cleanup.interval.mins") * 60_000, value("max.socket.request.bytes"),
                   value("zookeeper.connect") or None, value("zookeeper.session.timeout.ms") / 1000)


class Kafka07Handlers:
    """KafkaRequestHandlers: one request in, its response (or None) out. Synchronous: called from worker threads."""

    def __init__(self, logs: LogManager07) -> None:
        self.logs = logs

    def handle(self, request: Request07) -> Response07 | None:
        if isinstance(request, ProduceRequest07):
            self.produce(request)
            return None
        if isinstance(request, MultiProduceRequest07):
            for produce in request.produces:
                self.produce(produce)
            return None
        if isinstance(request, FetchRequest07):
            return self.fetch(request)
        if isinstance(request, MultiFetchRequest07):
            return MultiFetchResponse07(tuple(self.fetch(f) for f in request.fetches))
        return self.offsets(request)

    def produce(self, request: ProduceRequest07) -> None:
        partition = request.partition
        if partition == RANDOM_PARTITION:
            partition = random.randrange(self.logs.partition_count(request.topic))
        try:
            self.logs.get_or_create(request.topic, partition).append(request.messages)
        except Log07Error as exc:
            raise CloseConnection(f"produce to {request.topic}-{partition}: {exc}") from None
        except OSError as exc:  # 0.7 halted the broker on an IOException here; the modern listeners go on
            log.error("kafka07: cannot write to %s-%d: %s", request.topic, partition, exc)
            raise CloseConnection(f"produce to {request.topic}-{partition}: {exc}") from None

    def fetch(self, request: FetchRequest07) -> FetchResponse07:
        try:
            log_ = self.logs.get_or_create(request.topic, request.partition)
            return FetchResponse07(ErrorCode07.NO_ERROR, log_.read(request.offset, request.max_size))
        except Log07Error as exc:
            log.debug("kafka07: fetch %s-%d at %d: %s", request.topic, request.partition, request.offset, exc)
            return FetchResponse07(error_code(exc))

    def offsets(self, request: OffsetsRequest07) -> OffsetsResponse07:
        try:
            log_ = self.logs.get_or_create(request.topic, request.partition)
            return OffsetsResponse07(ErrorCode07.NO_ERROR,
                                     tuple(log_.offsets_before(request.time, request.max_num_offsets)))
        except Log07Error as exc:
            return OffsetsResponse07(error_code(exc))


class Kafka07Server:
    """The listener, its logs, their flusher and cleaner, and the ZooKeeper registration."""

    def __init__(self, settings: Kafka07Settings) -> None:
        self.settings = settings
        self.registry: Any = None
        self.logs = LogManager07(settings.log_dir, settings.manager, topic_created=self._topic_created)
        self.handlers = Kafka07Handlers(self.logs)
        self.server: asyncio.AbstractServer | None = None
        self.tasks: list[asyncio.Task] = []
        self.connections: set[asyncio.Task] = set()
        self.bound: tuple[str, int] | None = None

    async def start(self) -> None:
        await asyncio.to_thread(self.logs.startup)
        for recovery in self.logs.recoveries:
            log.warning("kafka07: recovered %s: kept %d bytes, truncated %d (%s)", recovery.segment,
                        recovery.kept_bytes, recovery.truncated_bytes, recovery.reason or "an incomplete message")
        self.server = await asyncio.start_server(self._serve, self.settings.host, self.settings.port,
                                                 reuse_address=True)
        self.bound = self.server.sockets[0].getsockname()[:2]
        if self.settings.zookeeper_connect:
            try:
                await self._register(self.settings.zookeeper_connect, self.bound[1])
            except BaseException:  # ZooKeeper refused or unreachable: the broker does not start
                self.server.close()
                if self.registry is not None:
                    await asyncio.to_thread(self.registry.close)
                    self.registry = None
                await asyncio.to_thread(self.logs.shutdown)
                raise
        self.tasks.append(asyncio.create_task(self._every(self.settings.flush_scheduler_ms, self.logs.flush_due)))
        self.tasks.append(asyncio.create_task(self._every(self.settings.cleanup_interval_ms, self._cleanup)))
        log.info("kafka07: serving Kafka 0.7 clients on %s:%d (logs in %s)", *self.bound, self.settings.log_dir)

    async def _register(self, connect: str, port: int) -> None:
        from kcli.zk.registry07 import Registry07

        registry = Registry07(connect, self.settings.broker_id, self.settings.advertised_host, port,
                              timeout=self.settings.zookeeper_timeout_s)
        await asyncio.to_thread(registry.start)
        self.registry = registry
        for topic in self.logs.topics():
            await asyncio.to_thread(registry.register_topic, topic, self.logs.partition_count(topic))

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in [*self.tasks, *self.connections]:
            task.cancel()
        await asyncio.gather(*self.tasks, *self.connections, return_exceptions=True)
        if self.registry is not None:
            await asyncio.to_thread(self.registry.close)
        await asyncio.to_thread(self.logs.shutdown)

    def _topic_created(self, topic: str) -> None:
        # LogManager.registerNewTopicInZK; called from a worker thread
        if self.registry is not None:
            try:
                self.registry.register_topic(topic, self.logs.partition_count(topic))
            except Exception as exc:  # 0.7 logs it and lets it go: the topic is served either way
                log.warning("kafka07: could not register topic %s in ZooKeeper: %s", topic, exc)

    def _cleanup(self) -> None:
        for name in self.logs.cleanup():
            log.info("kafka07: deleted log segment %s (retention)", name)

    async def _every(self, interval_ms: int, work: Any) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await asyncio.to_thread(work)
            except Exception:
                log.exception("kafka07: background %s failed", getattr(work, "__name__", work))

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.connections.add(task)
        peer = writer.get_extra_info("peername")
        connection = Connection07(self.settings.max_request_bytes)
        try:
            while True:
                data = await reader.read(READ_SIZE)
                if not data:
                    return
                connection.receive_data(data)
                while True:
                    request = connection.next_request()
                    if request is NEED_DATA:
                        break
                    if isinstance(request, BadRequest07):
                        log.warning("kafka07: closing the connection from %s: %s", peer, request.reason)
                        return
                    response = await asyncio.to_thread(self.handlers.handle, request)  # type: ignore[arg-type]
                    if response is not None:
                        writer.write(Connection07.send(response))
                        await writer.drain()
        except CloseConnection as exc:
            log.warning("kafka07: closing the connection from %s: %s", peer, exc)
        except Protocol07Error as exc:
            log.warning("kafka07: closing the connection from %s: %s", peer, exc)
        except (ConnectionError, OSError) as exc:
            log.debug("kafka07: connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass  # the listener stops: the connection ends here (asyncio's server callback logs a cancelled task)
        except Exception as exc:  # a bug of ours: one line, the connection closed, the listener serving on
            log.error("kafka07: closing the connection from %s after an internal error: %s: %s", peer,
                      type(exc).__name__, exc)
        finally:
            writer.close()
            if task is not None:
                self.connections.discard(task)
