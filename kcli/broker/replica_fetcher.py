"""Replica fetchers: a follower copies its leaders' logs with Kafka's Fetch API (Kafka's ReplicaFetcherManager,
ReplicaFetcherThread and AbstractFetcherThread).

One fetcher per source broker (num.replica.fetchers = 1), an asyncio task on the broker's event loop holding one
connection to that leader. Each round sends one Fetch (v12, replica_id = this broker) for all its partitions
from their log end offsets, with the last fetched epoch so that the leader can say where a divergent tail starts
(truncation on fetch, KIP-595 / IBP 2.7-IV1), then appends the leader's batches unchanged (replicas stay
byte-identical) and keeps the high watermark the leader sent. A partition that errs backs off
replica.fetch.backoff.ms; a lost connection is re-opened after the same backoff.
"""

from __future__ import annotations

import asyncio
import datetime
import itertools
import logging
import struct
import time
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_request
from kio.static.primitive import i8, i32, i64

from kcli.broker.log_manager import LogManager
from kcli.broker.partition import Partition
from kcli.protocol import ApiKey
from kcli.protocol.codec import decode_response, encode_request

log = logging.getLogger("kcli.broker.replica")

FETCH_VERSION = 12  # the replica Fetch of IBP 2.7-IV1 .. 3.0 (LastFetchedEpoch / DivergingEpoch)
SIZE = struct.Struct(">i")


@dataclass
class FetchSettings:
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    partition_max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms


class ReplicaFetcher:
    """Fetches the partitions this broker follows from one leader."""

    def __init__(self, manager: ReplicaFetcherManager, leader_id: int) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.delayed_until: dict[tuple[str, int], float] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._correlation = itertools.count(1)
        self._connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.name = f"ReplicaFetcher-{manager.local_broker_id}-from-{leader_id}"

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    def add(self, partition: Partition) -> None:
        self.partitions[(partition.topic, partition.index)] = partition
        self.delayed_until.pop((partition.topic, partition.index), None)
        self._wake.set()

    def remove(self, tp: tuple[str, int]) -> None:
        self.partitions.pop(tp, None)
        self.delayed_until.pop(tp, None)

    async def stop(self) -> None:
        if self._task is not None:
            while not self._task.done():  # a cancel can be lost in a wait that completes at the same moment
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=1.0)
            self._task = None
        self._close()

    # -- the loop ----------------------------------------------------------------------------------
    async def _run(self) -> None:
        settings = self.manager.settings
        while True:
            ready = self._ready()
            if not ready:
                self._wake.clear()
                wait = self._next_ready_in()
                try:
                    # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that meets the
                    # event being set, and stop() would then wait for ever
                    async with asyncio.timeout(wait):
                        await self._wake.wait()
                except TimeoutError:
                    pass
                continue
            try:
                response = await self._fetch(ready)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # connection refused or dropped, a malformed answer: retry later
                log.warning("%s: fetch from broker %d failed: %s", self.name, self.leader_id, exc)
                self._close()
                await asyncio.sleep(settings.backoff_ms / 1000)
                continue
            self._process(ready, response)

    def _ready(self) -> dict[tuple[str, int], Partition]:
        now = time.monotonic()
        return {tp: p for tp, p in self.partitions.items() if self.delayed_until.get(tp, 0) <= now}

    def _next_ready_in(self) -> float | None:
        if not self.delayed_until:
            return None
        return max(0.0, min(self.delayed_until.values()) - time.monotonic())

    def _delay(self, tp: tuple[str, int]) -> None:
        self.delayed_until[tp] = time.monotonic() + self.manager.settings.backoff_ms / 1000

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._connection is None:
            endpoint = self.manager.endpoint(self.leader_id)
            if endpoint is None:
                raise ConnectionError(f"no endpoint known for broker {self.leader_id}")
            async with asyncio.timeout(self.manager.settings.socket_timeout_ms / 1000):
                self._connection = await asyncio.open_connection(*endpoint)
        return self._connection

    def _close(self) -> None:
        if self._connection is not None:
            self._connection[1].close()
            self._connection = None

    async def _fetch(self, ready: dict[tuple[str, int], Partition]) -> Any:
        settings = self.manager.settings
        topics: dict[str, list[Any]] = {}
        for (topic, index), partition in ready.items():
            latest = partition.log.leader_epochs.latest_epoch
            topics.setdefault(topic, []).append(fetch_request.FetchPartition(
                partition=i32(index), current_leader_epoch=i32(partition.leader_epoch),
                fetch_offset=i64(partition.log_end_offset),
                last_fetched_epoch=i32(latest if latest is not None else -1),
                log_start_offset=i64(partition.log_start_offset),
                partition_max_bytes=i32(settings.partition_max_bytes)))
        body = fetch_request.FetchRequest(
            replica_id=i32(self.manager.local_broker_id), max_wait=datetime.timedelta(milliseconds=settings.max_wait_ms),
            min_bytes=i32(settings.min_bytes), max_bytes=i32(settings.max_bytes), isolation_level=i8(0),
            session_id=i32(0), session_epoch=i32(-1),
            topics=tuple(fetch_request.FetchTopic(topic=name, partitions=tuple(parts)) for name, parts in topics.items()),
            forgotten_topics_data=(), rack_id="")
        reader, writer = await self._connect()
        correlation = next(self._correlation)
        writer.write(encode_request(ApiKey.FETCH, FETCH_VERSION, correlation, self.name, body))
        await writer.drain()
        timeout = (settings.max_wait_ms + settings.socket_timeout_ms) / 1000
        async with asyncio.timeout(timeout):
            size = SIZE.unpack(await reader.readexactly(4))[0]
        async with asyncio.timeout(timeout):
            frame = await reader.readexactly(size)
        got, response = decode_response(ApiKey.FETCH, FETCH_VERSION, frame)
        if got != correlation:
            raise ConnectionError(f"response correlation id {got}, expected {correlation}")
        return response

    def _process(self, sent: dict[tuple[str, int], Partition], response: Any) -> None:
        """Kafka's processPartitionData for each partition still fetched from this leader at this offset."""
        if response.error_code != ErrorCode.none:
            log.warning("%s: fetch error %s", self.name, response.error_code.name)
            for tp in sent:
                self._delay(tp)
            return
        for topic in response.responses:
            for data in topic.partitions:
                tp = (topic.topic, int(data.partition_index))
                partition = self.partitions.get(tp)
                if partition is None or partition is not sent.get(tp):
                    continue  # moved away meanwhile
                try:
                    self.manager.process_partition_data(partition, data)
                except Exception as exc:
                    log.error("%s: %s-%d: %s", self.name, tp[0], tp[1], exc)
                    self._delay(tp)
                    continue
                if data.error_code != ErrorCode.none:
                    self._delay(tp)


class ReplicaFetcherManager:
    """The fetchers of this broker, one per leader it follows partitions of."""

    def __init__(self, local_broker_id: int, log_manager: LogManager, settings: FetchSettings,
                 endpoints: Any, on_append: Any = None, on_high_watermark: Any = None) -> None:
        self.local_broker_id = local_broker_id
        self.log_manager = log_manager
        self.settings = settings
        self._endpoints = endpoints  # broker id -> (host, port) | None
        self.on_append = on_append  # (Partition) -> None: flush accounting
        # (Partition) -> None: the follower's high watermark rose (consumers' fetches parked here, KIP-392)
        self.on_high_watermark = on_high_watermark
        self.fetchers: dict[int, ReplicaFetcher] = {}

    def endpoint(self, broker_id: int) -> tuple[str, int] | None:
        return self._endpoints(broker_id)

    def add_fetchers(self, partitions: list[Partition]) -> None:
        """Follow each partition from its leader (moving it from any other fetcher first)."""
        for partition in partitions:
            self.remove_fetchers([(partition.topic, partition.index)])
            if partition.leader_id < 0 or partition.leader_id == self.local_broker_id:
                continue
            fetcher = self.fetchers.get(partition.leader_id)
            if fetcher is None:
                fetcher = self.fetchers[partition.leader_id] = ReplicaFetcher(self, partition.leader_id)
                fetcher.start()
            fetcher.add(partition)

    def remove_fetchers(self, tps: list[tuple[str, int]]) -> None:
        for fetcher in self.fetchers.values():
            for tp in tps:
                fetcher.remove(tp)

    async def shutdown_idle(self) -> None:
        for leader_id, fetcher in list(self.fetchers.items()):
            if not fetcher.partitions:
                del self.fetchers[leader_id]
                await fetcher.stop()

    async def shutdown(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)

    def following(self) -> dict[int, list[tuple[str, int]]]:
        return {leader: sorted(f.partitions) for leader, f in self.fetchers.items()}

    # -- one partition's answer ---------------------------------------------------------------------
    def process_partition_data(self, partition: Partition, data: Any) -> None:
        error = data.error_code
        managed = partition.managed
        if error == ErrorCode.none:
            diverging = getattr(data, "diverging_epoch", None)
            if diverging is not None and (diverging.epoch >= 0 or diverging.end_offset >= 0):
                self._truncate_on_divergence(partition, int(diverging.epoch), int(diverging.end_offset))
                return  # Kafka does not process this response's data after truncating
            high_watermark = partition.high_watermark
            records = data.records
            if records:
                self.log_manager.append_as_follower(managed, bytes(records))
                if self.on_append is not None:
                    self.on_append(partition)
            partition.update_follower_high_watermark(int(data.high_watermark))
            leader_start = int(data.log_start_offset)
            if leader_start > partition.log_start_offset:
                self.log_manager.delete_records_before(managed, min(leader_start, partition.log_end_offset))
            if partition.high_watermark != high_watermark and self.on_high_watermark is not None:
                self.on_high_watermark(partition)
        elif error == ErrorCode.offset_out_of_range:
            self._handle_out_of_range(partition, int(data.high_watermark), int(data.log_start_offset))
        else:
            log.info("ReplicaFetcher %d: %s-%d from leader %d: %s", self.local_broker_id, partition.topic,
                     partition.index, partition.leader_id, ErrorCode(error).name)

    def _truncate_on_divergence(self, partition: Partition, epoch: int, end_offset: int) -> None:
        """Truncate to where this replica and the leader agree (Kafka's getOffsetTruncationState): the end
        of the diverging epoch here, but not past the leader's end for it."""
        local_epoch, local_end = partition.log.leader_epochs.end_offset_for(epoch, partition.log_end_offset)
        target = end_offset if local_epoch < 0 else min(end_offset, local_end)
        target = max(0, target)
        before = partition.log_end_offset
        if target < before:
            after = self.log_manager.truncate_to(partition.managed, target)
            log.warning("%s-%d: truncated a divergent tail from %d to %d (leader epoch %d ends at %d on leader %d)",
                        partition.topic, partition.index, before, after, epoch, end_offset, partition.leader_id)

    def _handle_out_of_range(self, partition: Partition, leader_high_watermark: int, leader_start: int) -> None:
        """Kafka's handleOutOfRangeError: past the leader's end → truncate to what the leader surely has (its
        high watermark); before its start → start over at the leader's log start."""
        end = partition.log_end_offset
        if leader_start >= 0 and end < leader_start:
            self.log_manager.truncate_fully_and_start_at(partition.managed, leader_start)
            log.warning("%s-%d: log end %d is below leader %d's log start %d: starting over there",
                        partition.topic, partition.index, end, partition.leader_id, leader_start)
        elif leader_high_watermark >= 0 and end > leader_high_watermark:
            self.log_manager.truncate_to(partition.managed, leader_high_watermark)
            log.warning("%s-%d: log end %d is past leader %d's end: truncated to its high watermark %d",
                        partition.topic, partition.index, end, partition.leader_id, leader_high_watermark)
