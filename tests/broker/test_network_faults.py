"""Availability under network faults (issue 23), in process: what a replica does when the network between brokers, or
between a broker and ZooKeeper, fails and heals. The leaders are ReplicaManagers behind real SocketServers on
loopback; the faults are fake transports (a TCP relay that swallows a connection's requests) and fake ZooKeeper
clients. The same faults between real brokers in network namespaces: test_network_partition.py and
bench/bench_partitions.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from kcli.broker.isr_manager import ZkIsrManager
from kcli.broker.kafka_apis import KafkaApis
from kcli.broker.log_manager import LogManager
from kcli.broker.metadata_cache import MetadataCache
from kcli.broker.partition import LeaderAndIsrState, Partition
from kcli.broker.replica_fetcher import FetchSettings, ReplicaFetcherManager
from kcli.broker.replica_manager import ReplicaManager
from kcli.broker.socket_server import SocketServer
from kcli.records import Record, build_record_batch
from kcli.storage.log import LogConfig
from kcli.zk.registration import ZooKeeperConnectionError

TOPIC, TOPIC_ID = "t", uuid.UUID(int=23)
TP = (TOPIC, 0)


def _replica(tmp_path, broker_id: int) -> tuple[ReplicaManager, Partition]:
    directory = tmp_path / f"broker-{broker_id}"
    directory.mkdir(exist_ok=True)
    logs = LogManager([directory], broker_id=broker_id, log_config=LogConfig())
    manager = ReplicaManager(logs, local_broker_id=broker_id, metadata=MetadataCache())
    managed = logs.get_or_create_log(TOPIC, 0, TOPIC_ID, LogConfig())
    partition = Partition(TOPIC, 0, TOPIC_ID, managed, local_broker_id=broker_id)
    manager.add_partition(partition)
    return manager, partition


def _state(leader: int, epoch: int, isr: list[int], replicas: list[int] | None = None) -> LeaderAndIsrState:
    return LeaderAndIsrState(controller_epoch=1, leader=leader, leader_epoch=epoch, isr=isr, partition_epoch=epoch,
                             replicas=replicas or [0, 1, 2])


def _batch(offset: int) -> bytes:
    return build_record_batch([Record(offset, 1_700_000_000_000 + offset, None, f"v{offset}".encode())])


def _append(manager: ReplicaManager, count: int) -> None:
    for _ in range(count):
        offset = manager.find(*TP).log_end_offset
        assert manager.append_records(-1, {TP: _batch(offset)})[TP].error == ErrorCode.none


# -- cause 1: a fetch connection that stalls is abandoned and re-opened ---------------------------------------------
class StallingRelay:
    """Relays TCP to ``upstream``, except the first connection: it takes the follower's requests and never
    answers, never closes (what a connection opened before a network partition looks like after the heal, while
    TCP's retransmission timer is backed off)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.connections = 0
        self.swallowed = 0  # bytes the stalled connection took
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self._server.sockets[0].getsockname()[:2]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            if self.connections == 1:
                while chunk := await reader.read(65536):
                    self.swallowed += len(chunk)
                return
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)

            async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
                while chunk := await source.read(65536):
                    sink.write(chunk)
                    await sink.drain()
                sink.close()
            await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def test_a_fetch_left_unanswered_is_abandoned_and_the_connection_reopened(tmp_path, caplog):
    """The leader answers a replica's Fetch within replica.fetch.wait.max.ms; one unanswered for
    replica.fetch.response.timeout.ms longer means a dead connection: the fetcher closes it and fetches over a new
    one, long before replica.socket.timeout.ms (30 s here)."""
    leader_manager, led = _replica(tmp_path, 0)
    led.make_leader(_state(0, 0, [0, 1], [0, 1]))
    leader_manager.append_records(1, {TP: _batch(0)})
    leader_manager.append_records(1, {TP: _batch(1)})
    manager, follower = _replica(tmp_path, 1)
    follower.make_follower(_state(0, 0, [0, 1], [0, 1]))
    settings = FetchSettings(max_wait_ms=20, backoff_ms=50, socket_timeout_ms=30_000)
    settings.response_timeout_ms = 300  # set as an attribute: the test then times out on a fetcher without it
    caplog.set_level(logging.WARNING, logger="kcli.broker.replica")

    async def go() -> StallingRelay:
        server = SocketServer(KafkaApis(SimpleNamespace(replica_manager=leader_manager, metadata=MetadataCache())),
                              max_frame_bytes=100 << 20)
        await server.start([("127.0.0.1", 0)])
        relay = StallingRelay(server.bound[0])
        endpoint = await relay.start()
        fetchers = ReplicaFetcherManager(1, manager.log_manager, settings, lambda broker_id: endpoint)
        fetchers.add_fetchers([follower])
        deadline = time.monotonic() + 10  # a third of replica.socket.timeout.ms
        try:
            while follower.log_end_offset < 2:
                assert time.monotonic() < deadline, (
                    f"still waiting on the stalled connection ({relay.connections} connection(s) made)")
                await asyncio.sleep(0.02)
        finally:
            await fetchers.shutdown()
            await relay.stop()
            leader_manager.shutdown()
            await server.stop()
        return relay

    relay = asyncio.run(go())
    assert relay.swallowed > 0 and relay.connections >= 2  # the request went out, went unanswered, and a new
    # connection brought the records
    assert follower.log_end_offset == led.log_end_offset == 2
    assert any("the connection is taken for dead" in r.getMessage() for r in caplog.records)


def test_a_leader_that_cannot_be_reached_is_tried_again_soon_and_the_outage_logged_once(tmp_path, caplog):
    """While a network is cut, connecting fails at once: the fetcher tries again every RECONNECT_BACKOFF_MS, so
    that a healed link is used at once, not replica.fetch.backoff.ms (60 s here) later. One warning for the outage,
    one line when the leader answers again."""
    from kcli.processes import free_port

    leader_manager, led = _replica(tmp_path, 0)
    led.make_leader(_state(0, 0, [0, 1], [0, 1]))
    leader_manager.append_records(1, {TP: _batch(0)})
    manager, follower = _replica(tmp_path, 1)
    follower.make_follower(_state(0, 0, [0, 1], [0, 1]))
    settings = FetchSettings(max_wait_ms=20, backoff_ms=60_000)
    port = free_port()
    caplog.set_level(logging.INFO, logger="kcli.broker.replica")

    async def go() -> float:
        server = SocketServer(KafkaApis(SimpleNamespace(replica_manager=leader_manager, metadata=MetadataCache())),
                              max_frame_bytes=100 << 20)
        fetchers = ReplicaFetcherManager(1, manager.log_manager, settings, lambda broker_id: ("127.0.0.1", port))
        fetchers.add_fetchers([follower])
        try:
            await asyncio.sleep(0.5)  # refused, over and over
            await server.start([("127.0.0.1", port)])
            listening = time.monotonic()
            while follower.log_end_offset < 1:
                assert time.monotonic() - listening < 20, "not fetched again before replica.fetch.backoff.ms"
                await asyncio.sleep(0.01)
            return time.monotonic() - listening
        finally:
            await fetchers.shutdown()
            leader_manager.shutdown()
            await server.stop()

    asyncio.run(go())
    lines = [r for r in caplog.records if r.name == "kcli.broker.replica"]
    warnings = [r.getMessage() for r in lines if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "cannot connect" in warnings[0], warnings
    assert any("answers again, after" in r.getMessage() for r in lines if r.levelno == logging.INFO)


class DelayingRelay(StallingRelay):
    """Relays TCP to ``upstream``; the first connection's answers are held until ``release`` is set."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(upstream)
        self.release = asyncio.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        first = self.connections == 1
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, hold: bool) -> None:
            while chunk := await source.read(65536):
                if hold:
                    await self.release.wait()
                sink.write(chunk)
                await sink.drain()
            sink.close()
        try:
            await asyncio.gather(pump(reader, up_writer, False), pump(up_reader, writer, first))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


def test_an_answer_for_an_older_leader_epoch_does_not_hold_the_new_one_back(tmp_path):
    """A fetch sent at leader epoch 0 is answered FENCED_LEADER_EPOCH (the leader is at 1) after the follower was
    told of epoch 1 (its LeaderAndIsr came first, as after a heal): the answer is ignored, not a reason to back
    the partition off replica.fetch.backoff.ms (60 s here); the follower fetches at epoch 1 at once (Kafka's
    processFetchRequest)."""
    leader_manager, led = _replica(tmp_path, 0)
    led.make_leader(_state(0, 1, [0, 1], [0, 1]))
    leader_manager.append_records(1, {TP: _batch(0)})
    manager, follower = _replica(tmp_path, 1)
    follower.make_follower(_state(0, 0, [0, 1], [0, 1]))
    settings = FetchSettings(max_wait_ms=20, backoff_ms=60_000)

    async def go() -> None:
        server = SocketServer(KafkaApis(SimpleNamespace(replica_manager=leader_manager, metadata=MetadataCache())),
                              max_frame_bytes=100 << 20)
        await server.start([("127.0.0.1", 0)])
        relay = DelayingRelay(server.bound[0])
        endpoint = await relay.start()
        fetchers = ReplicaFetcherManager(1, manager.log_manager, settings, lambda broker_id: endpoint)
        fetchers.add_fetchers([follower])
        try:
            while relay.connections == 0:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # the epoch-0 fetch is out, its answer held
            follower.make_follower(_state(0, 1, [0, 1], [0, 1]))
            fetchers.add_fetchers([follower])
            relay.release.set()
            released = time.monotonic()
            while follower.log_end_offset < 1:
                assert time.monotonic() - released < 20, "backed off by the answer meant for epoch 0"
                await asyncio.sleep(0.01)
        finally:
            await fetchers.shutdown()
            await relay.stop()
            leader_manager.shutdown()
            await server.stop()

    asyncio.run(go())
    assert follower.log_end_offset == 1


def test_the_response_timeout_is_a_broker_config():
    from kcli.broker.config import build_config

    assert build_config({})["replica.fetch.response.timeout.ms"] == 3000
    settings = FetchSettings(max_wait_ms=500, socket_timeout_ms=30_000, response_timeout_ms=3000)
    assert settings.request_timeout_s(500) == 3.5 and settings.request_timeout_s(0) == 3.0
    assert settings.connect_timeout_s == 3.0
    # replica.socket.timeout.ms still bounds both when it is the smaller
    short = FetchSettings(socket_timeout_ms=1000, response_timeout_ms=3000)
    assert short.request_timeout_s(500) == 1.5 and short.connect_timeout_s == 1.0


# -- cause 2: a re-elected leader keeps its followers' fetch state ----------------------------------------------
def _led_with_followers_at(tmp_path, positions: dict[int, int], end: int) -> tuple[ReplicaManager, Partition]:
    """Broker 0 leads at epoch 0 (ISR 0, 1, 2) with ``end`` records; each follower last fetched at its position."""
    manager, partition = _replica(tmp_path, 0)
    partition.make_leader(_state(0, 0, [0, 1, 2]))
    _append(manager, end)
    for replica, offset in positions.items():
        partition.update_follower_fetch_state(replica, offset, 0, partition.log_end_offset)
    return manager, partition


def test_a_leader_reelected_at_the_next_epoch_keeps_its_followers_fetch_state(tmp_path):
    """The controller drops dead follower 2 from the ISR with an epoch bump, the leader unchanged (kafka-cluster.md
    3.2). Follower 1 has every record already: the high watermark moves at once and the produce waiting on it
    completes, without waiting for follower 1's next fetch (Kafka's Replica.resetReplicaState, isNewLeader false)."""
    manager, partition = _led_with_followers_at(tmp_path, {1: 8, 2: 5}, 8)
    assert partition.high_watermark == 5  # follower 2 holds it

    async def go():
        waiting = asyncio.ensure_future(manager.append_and_wait(-1, 30_000, {TP: _batch(8)}))
        await asyncio.sleep(0)
        partition.update_follower_fetch_state(1, 9, 0, partition.log_end_offset)  # 1 has the new record too
        errors, leaders, _ = manager.become_leader_or_follower({TP: _state(0, 1, [0, 1])}, lambda *_: partition)
        assert errors == {TP: ErrorCode.none} and leaders == [partition]
        assert partition.high_watermark == 9
        result = await asyncio.wait_for(waiting, 5)
        return result[TP]

    appended = asyncio.run(go())
    assert appended.error == ErrorCode.none
    follower = partition.remote[1]
    assert (follower.log_end_offset, follower.log_start_offset) == (9, 0)
    assert partition.remote[2].last_caught_up_time_ms == 0  # out of the ISR: holds nothing back


def test_a_new_leader_or_an_epoch_gap_starts_from_unknown_follower_state(tmp_path):
    """A broker that becomes leader knows nothing of its followers (Kafka's isNewLeader); a leader told of an epoch
    two above its own missed one, in which another broker may have led: it forgets too (stricter than Kafka)."""
    manager, partition = _led_with_followers_at(tmp_path, {1: 8, 2: 8}, 8)
    assert partition.high_watermark == 8
    _append(manager, 2)
    partition.update_follower_fetch_state(1, 10, 0, partition.log_end_offset)
    partition.make_leader(_state(0, 2, [0, 1]))  # epoch 1 was never seen here
    assert partition.remote[1].log_end_offset == -1 and partition.high_watermark == 8

    other_manager, other = _replica(tmp_path, 1)
    other.make_follower(_state(0, 0, [0, 1, 2]))
    other_manager.log_manager.append_as_follower(other.managed, _batch(0))
    other.make_leader(_state(1, 1, [1, 2]))
    assert all(r.log_end_offset == -1 for r in other.remote.values())


# -- cause 3: a stopping broker does not fetch again --------------------------------------------------------------
def test_a_stopping_broker_becomes_follower_without_fetchers(tmp_path):
    """Kafka's makeFollowers skips the adding-fetcher step while the broker shuts down: a broker whose controlled
    shutdown moved its leaderships away must not fetch, or the new leaders take it back into their ISRs."""
    manager, partition = _replica(tmp_path, 0)
    partition.make_leader(_state(0, 0, [0, 1, 2]))
    added, removed = [], []
    manager.fetchers = SimpleNamespace(add_fetchers=lambda ps: added.extend(ps),
                                       remove_fetchers=lambda tps: removed.extend(tps))
    manager.shutting_down = True
    error, errors = manager.apply_leader_and_isr(1, -1, {TP: _state(1, 1, [1, 2])}, lambda *_: partition)
    assert error == ErrorCode.none and errors == {TP: ErrorCode.none}
    assert partition.leader_id == 1 and not partition.is_leader
    assert added == [] and TP in removed


# -- cause 4: an ISR write ZooKeeper never took names the connection loss ----------------------------------------
class _Unreachable:
    def update_leader_and_isr(self, *args, **kwargs):
        raise ZooKeeperConnectionError("lost the connection to ZooKeeper at zk:2181 while writing "
                                       "/brokers/topics/t/partitions/0/state (ConnectionLoss)")


class _Moved:
    def update_leader_and_isr(self, *args, **kwargs):
        return None  # BADVERSION, and the node holds another state


@pytest.mark.parametrize("zk,expected,not_expected", [
    (_Unreachable(), "ZooKeeper unreachable (lost the connection to ZooKeeper", "refused"),
    (_Moved(), "refused: the state znode is no longer at partition epoch 0", "unreachable"),
], ids=["connection-loss", "bad-version"])
def test_a_failed_isr_write_logs_its_real_cause(tmp_path, caplog, zk, expected, not_expected):
    manager, partition = _replica(tmp_path, 0)
    partition.make_leader(_state(0, 0, [0, 1], [0, 1]))
    caplog.set_level(logging.INFO, logger="kcli.broker.isr")

    async def go():
        isr = ZkIsrManager(zk, manager.isr_committed)
        manager.isr_listener = isr
        manager._change_isr(partition, [0])
        await asyncio.gather(*isr._writes)

    asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "kcli.broker.isr"]
    assert len(lines) == 1 and expected in lines[0], lines
    assert not_expected not in lines[0] and "changed in ZooKeeper" not in lines[0]
    # Either way the change is no longer pending: the next fetch or expiration check may propose it again.
    assert partition.pending_isr is None and partition.isr == [0, 1]


def test_an_answer_out_of_turn_is_a_connection_error_and_the_frame_limit_holds():
    """The inter-broker transport frames through kcli.protocol.ClientConnection: a response carrying another
    correlation id, or announcing a frame above the maximum, makes the connection unusable (ConnectionError, the
    fetcher closes it) instead of being taken for the answer."""
    from kcli.broker.network_client import BrokerConnection
    from kcli.protocol import ApiKey
    from kcli.protocol.codec import SIZE_PREFIX
    from kcli.protocol.schema import load_request_schema

    async def main() -> None:
        answers = [b"wrong-id", b"too-big"]

        async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            size = SIZE_PREFIX.unpack(await reader.readexactly(4))[0]
            await reader.readexactly(size)
            if answers.pop(0) == b"too-big":
                writer.write(SIZE_PREFIX.pack(200 * 1024 * 1024))
            else:  # ApiVersions v0 response body: error_code 0, no api keys; correlation id 999 (1 was due)
                body = (999).to_bytes(4, "big") + b"\x00\x00" + b"\x00\x00\x00\x00"
                writer.write(SIZE_PREFIX.pack(len(body)) + body)
            await writer.drain()

        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        host, port = server.sockets[0].getsockname()[:2]
        request = load_request_schema(ApiKey.API_VERSIONS, 0)()
        try:
            for expected in ("correlation id 999", "above the maximum"):
                connection = await BrokerConnection.open(host, port, client_id="t", timeout=5)
                with pytest.raises(ConnectionError, match=expected):
                    await connection.exchange(ApiKey.API_VERSIONS, 0, request, timeout=5)
                connection.close()
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(main())
