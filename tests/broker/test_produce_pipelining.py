"""Produce pipelining at the socket edge (kcli.broker.socket_server): while an acks=all Produce waits in the
purgatory for the ISR, the connection reads its next request, and a Produce is appended at once; responses still go
out in request order, any other request waits for every earlier response, and a request that fails closes the
connection after the earlier ones are answered. A leader's ReplicaManager of a three-replica partition behind a real
SocketServer; the followers are played by calling fetch_messages with their replica ids, so that the high watermark
moves exactly when a test says; the client is a raw socket on the same event loop. Nothing is timed: the tests
wait for states (the log end offset, a response) and assert orders and contents."""

from __future__ import annotations

import asyncio
import datetime
import logging
import struct
import uuid
from types import SimpleNamespace

from kio.schema.api_versions.v0 import request as api_versions_request
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_request

from kcli.broker.kafka_apis import KafkaApis
from kcli.broker.log_manager import LogManager
from kcli.broker.metadata_cache import MetadataCache
from kcli.broker.partition import LeaderAndIsrState, Partition
from kcli.broker.replica_manager import FetchParams, FetchPartition, ReplicaManager
from kcli.broker.socket_server import SocketServer
from kcli.protocol import ApiKey, ClientConnection
from kcli.records import Record, build_record_batch
from kcli.storage.log import LogConfig

TOPIC, TOPIC_ID = "t", uuid.UUID(int=42)
TP = (TOPIC, 0)


def _leader(tmp_path) -> tuple[ReplicaManager, Partition]:
    logs = LogManager([tmp_path], broker_id=0, log_config=LogConfig())
    manager = ReplicaManager(logs, local_broker_id=0, metadata=MetadataCache())
    partition = Partition(TOPIC, 0, TOPIC_ID, logs.get_or_create_log(TOPIC, 0, TOPIC_ID, LogConfig()),
                          local_broker_id=0)
    manager.add_partition(partition)
    partition.make_leader(LeaderAndIsrState(controller_epoch=1, leader=0, leader_epoch=0, isr=[0, 1, 2],
                                            partition_epoch=0, replicas=[0, 1, 2]))
    return manager, partition


def _produce(acks: int, topic: str = TOPIC) -> produce_request.ProduceRequest:
    batch = build_record_batch([Record(0, 1_700_000_000_000, None, b"v")])
    return produce_request.ProduceRequest(
        transactional_id=None, acks=acks, timeout=datetime.timedelta(minutes=10),
        topic_data=(produce_request.TopicProduceData(name=topic, partition_data=(
            produce_request.PartitionProduceData(index=0, records=batch),)),))


class Client:
    """Requests written back to back on one connection; responses read one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = ClientConnection("pipelining-test")

    def send(self, api_key: ApiKey, version: int, body, *, expects_response: bool = True) -> None:
        self.writer.write(self.conn.send_request(api_key, version, body, expects_response=expects_response)[1])

    async def response(self):
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        return self.conn.receive_frame(await self.reader.readexactly(size))


async def _served(tmp_path, depth: int | None = None):
    manager, partition = _leader(tmp_path)
    server = SocketServer(KafkaApis(SimpleNamespace(replica_manager=manager, metadata=MetadataCache())),
                          max_frame_bytes=100 << 20)
    if depth is not None:
        server.produce_pipeline_depth = depth
    await server.start([("127.0.0.1", 0)])
    reader, writer = await asyncio.open_connection(*server.bound[0])
    return manager, partition, server, Client(reader, writer)


async def _until(condition, what: str) -> None:
    for _ in range(20_000):  # event-loop turns, not seconds: an in-process server needs a handful
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never happened: {what}")


async def _followers_reach(manager: ReplicaManager, offset: int) -> None:
    for replica_id in (1, 2):
        params = FetchParams(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, read_committed=False,
                             replica_id=replica_id)
        await manager.fetch_messages(params, [FetchPartition(TOPIC, 0, offset, 1 << 20, TOPIC_ID)])


async def _close(server: SocketServer, manager: ReplicaManager, client: Client) -> None:
    client.writer.close()
    manager.shutdown()
    await server.stop()


def test_pipelined_produces_are_appended_at_once_and_answered_in_order(tmp_path):
    async def main():
        manager, partition, server, client = await _served(tmp_path)
        try:
            for _ in range(3):
                client.send(ApiKey.PRODUCE, 9, _produce(acks=-1))
            # all three appended while the first still waits for the ISR (Kafka would append one per round trip)
            await _until(lambda: partition.log_end_offset == 3, "three pipelined produces appended")
            assert partition.high_watermark == 0
            await _followers_reach(manager, 3)
            answers = [await client.response() for _ in range(3)]
            assert [a.request.correlation_id for a in answers] == [1, 2, 3]
            parts = [a.body.responses[0].partition_responses[0] for a in answers]
            assert [p.error_code for p in parts] == [ErrorCode.none] * 3
            assert [p.base_offset for p in parts] == [0, 1, 2]
        finally:
            await _close(server, manager, client)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_responses_keep_request_order_when_a_later_produce_completes_first(tmp_path):
    """acks=1 behind a waiting acks=all: appended at once, answered only after the earlier response."""
    async def main():
        manager, partition, server, client = await _served(tmp_path)
        try:
            client.send(ApiKey.PRODUCE, 9, _produce(acks=-1))
            client.send(ApiKey.PRODUCE, 9, _produce(acks=1))
            await _until(lambda: partition.log_end_offset == 2, "both produces appended")
            await _followers_reach(manager, 1)  # the high watermark passes the first batch only
            first, second = await client.response(), await client.response()
            assert (first.request.correlation_id, second.request.correlation_id) == (1, 2)
            assert first.body.responses[0].partition_responses[0].base_offset == 0
            assert second.body.responses[0].partition_responses[0].base_offset == 1
        finally:
            await _close(server, manager, client)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_another_request_waits_for_the_produces_before_it(tmp_path):
    async def main():
        manager, partition, server, client = await _served(tmp_path)
        try:
            client.send(ApiKey.PRODUCE, 9, _produce(acks=-1))
            client.send(ApiKey.API_VERSIONS, 0, api_versions_request.ApiVersionsRequest())
            client.send(ApiKey.PRODUCE, 9, _produce(acks=-1))
            await _until(lambda: partition.log_end_offset == 1, "the first produce appended")
            # the ApiVersions request is not served while the produce before it waits, so the produce after it is not
            # read either: the log stays at one batch until the followers acknowledge the first
            for _ in range(200):
                await asyncio.sleep(0)
            assert partition.log_end_offset == 1
            await _followers_reach(manager, 1)
            answers = [await client.response() for _ in range(2)]
            assert [a.request.correlation_id for a in answers] == [1, 2]
            await _until(lambda: partition.log_end_offset == 2, "the produce after the ApiVersions request appended")
            await _followers_reach(manager, 2)
            assert (await client.response()).request.correlation_id == 3
        finally:
            await _close(server, manager, client)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_a_failing_pipelined_request_closes_the_connection_after_the_earlier_answers(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="kcli.broker")
    """An acks=0 produce that fails closes the connection (Kafka's closeConnection); the acks=all produce before it
    is still answered first, as Kafka would have answered it before reading the next request."""
    async def main():
        manager, partition, server, client = await _served(tmp_path)
        try:
            client.send(ApiKey.PRODUCE, 9, _produce(acks=-1))
            client.send(ApiKey.PRODUCE, 9, _produce(acks=0, topic="no-such-topic"), expects_response=False)
            await _until(lambda: partition.log_end_offset == 1, "the first produce appended")
            await _followers_reach(manager, 1)
            answer = await client.response()
            assert answer.request.correlation_id == 1
            assert answer.body.responses[0].partition_responses[0].error_code == ErrorCode.none
            assert await client.reader.read() == b""  # then the connection closes
        finally:
            await _close(server, manager, client)

    asyncio.run(asyncio.wait_for(main(), 60))
    assert "acks=0 produce failed" in caplog.text


def test_depth_one_answers_one_produce_at_a_time(tmp_path):
    """produce_pipeline_depth 1 is Kafka's one request at a time: the next produce is read only after the
    previous response is sent, so each waits for its own acknowledgement."""
    async def main():
        manager, partition, server, client = await _served(tmp_path, depth=1)
        try:
            client.send(ApiKey.PRODUCE, 9, _produce(acks=-1))
            client.send(ApiKey.PRODUCE, 9, _produce(acks=-1))
            await _until(lambda: partition.log_end_offset == 1, "the first produce appended")
            for _ in range(200):
                await asyncio.sleep(0)
            assert partition.log_end_offset == 1
            await _followers_reach(manager, 1)
            assert (await client.response()).request.correlation_id == 1
            await _until(lambda: partition.log_end_offset == 2, "the second produce appended")
            await _followers_reach(manager, 2)
            assert (await client.response()).request.correlation_id == 2
        finally:
            await _close(server, manager, client)

    asyncio.run(asyncio.wait_for(main(), 60))
