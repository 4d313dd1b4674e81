"""OffsetForLeaderEpoch (key 23) in process: the handler on a leader and a follower at every version (Kafka's
ReplicaManager / Partition.lastOffsetForLeaderEpoch, OffsetsForLeaderEpochRequestTest), and a follower's fetcher
that settles its truncation point with it before it fetches (AbstractFetcherThread's Truncating state,
getOffsetTruncationState; KIP-101, KIP-279). The leader is a ReplicaManager behind a real SocketServer on loopback.
Last, the wire against a `kctl broker run` subprocess, and a confluent-kafka consumer validating its position
(KIP-320). The cluster case (a restarted ex-leader truncating its unreplicated tail) is tests/broker/test_truncation.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
import time
import typing
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from broker_support import read_response, seek_with_leader_epoch
from kcli.broker.kafka_apis import KafkaApis
from kcli.broker.log_manager import LogManager
from kcli.broker.metadata_cache import MetadataCache, PartitionState, TopicMetadata
from kcli.broker.partition import LeaderAndIsrState, Partition
from kcli.broker.replica_fetcher import (
    FETCHING,
    TRUNCATING,
    FetchSettings,
    ReplicaFetcherManager,
    offset_truncation_state,
)
from kcli.broker.replica_manager import ReplicaManager
from kcli.broker.socket_server import SocketServer
from kcli.protocol import ApiKey, decode_response, encode_request, request_schema
from kcli.records import Record, build_record_batch
from kcli.records.types import NO_PARTITION_LEADER_EPOCH
from kcli.storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from kcli.storage.leader_epoch import LeaderEpochCache
from kcli.storage.log import LogConfig

TOPIC, TOPIC_ID = "t", uuid.UUID(int=101)
VERSIONS = range(0, 5)


# -- building replicas ----------------------------------------------------------------------------------------
def _replica(tmp_path, broker_id: int, *, index: int = 0, metadata: MetadataCache | None = None,
             manager: ReplicaManager | None = None) -> tuple[ReplicaManager, Partition]:
    directory = tmp_path / f"broker-{broker_id}"
    directory.mkdir(exist_ok=True)
    if manager is None:
        logs = LogManager([directory], broker_id=broker_id, log_config=LogConfig())
        manager = ReplicaManager(logs, local_broker_id=broker_id, metadata=metadata or MetadataCache())
    managed = manager.log_manager.get_or_create_log(TOPIC, index, TOPIC_ID, LogConfig())
    partition = Partition(TOPIC, index, TOPIC_ID, managed, local_broker_id=broker_id)
    manager.add_partition(partition)
    return manager, partition


def _state(leader: int, epoch: int) -> LeaderAndIsrState:
    return LeaderAndIsrState(controller_epoch=1, leader=leader, leader_epoch=epoch, isr=[0, 1], partition_epoch=epoch,
                             replicas=[0, 1])


def _batch(offset: int, epoch: int, tag: str = "") -> bytes:
    return build_record_batch([Record(offset, 1_700_000_000_000 + offset, None, f"v{offset}{tag}".encode())],
                              partition_leader_epoch=epoch)


def _write(manager: ReplicaManager, partition: Partition, epochs: list[int], tag: str = "") -> None:
    """One single-record batch per entry of ``epochs``, each stamped with that leader epoch, appended as a
    follower appends the leader's batches (offsets continue from the log end)."""
    for epoch in epochs:
        offset = partition.log_end_offset
        manager.log_manager.append_as_follower(partition.managed, _batch(offset, epoch, tag if epoch >= 0 else ""))


def _entries(partition: Partition) -> list[tuple[int, int]]:
    return [(e.epoch, e.start_offset) for e in partition.log.leader_epochs.entries]


@pytest.fixture
def leader(tmp_path):
    """Broker 0 leads at epoch 2: epoch 0 holds offsets 0-4, epoch 2 offsets 5-9 (epoch 1 never wrote)."""
    manager, partition = _replica(tmp_path, 0)
    partition.make_leader(_state(0, 0))
    for offset in range(5):
        assert manager.append_records(1, {(TOPIC, 0): _batch(offset, 0)})[(TOPIC, 0)].error == ErrorCode.none
    partition.make_leader(_state(0, 2))
    for offset in range(5, 10):
        assert manager.append_records(1, {(TOPIC, 0): _batch(offset, 0)})[(TOPIC, 0)].error == ErrorCode.none
    assert _entries(partition) == [(0, 0), (2, 5)] and partition.log_end_offset == 10
    return manager, partition


# -- the handler ------------------------------------------------------------------------------------------------
def _element(cls: type, name: str) -> type:
    """The struct class an array field of ``cls`` holds (kio's classes and kcli.protocol.legacy's alike)."""
    return typing.get_args({f.name: f.type for f in dataclasses.fields(cls)}[name])[0]


def _request(version: int, asks: dict[tuple[str, int], tuple[int, int]], replica_id: int = -1):
    """asks: (topic, partition) -> (current leader epoch, leader epoch asked about)."""
    cls = request_schema(ApiKey.OFFSET_FOR_LEADER_EPOCH, version)
    topic_cls = _element(cls, "topics")
    partition_cls = _element(topic_cls, "partitions")
    topics: dict[str, list] = {}
    for (topic, index), (current, epoch) in asks.items():
        values = dict(partition=index, leader_epoch=epoch)
        if version >= 2:
            values["current_leader_epoch"] = current
        topics.setdefault(topic, []).append(partition_cls(**values))
    extra = {"replica_id": replica_id} if version >= 3 else {}
    return cls(topics=tuple(topic_cls(topic=t, partitions=tuple(ps)) for t, ps in topics.items()), **extra)


def _ask(manager: ReplicaManager, version: int, asks, replica_id: int = -1) -> dict[tuple[str, int], tuple]:
    apis = KafkaApis(SimpleNamespace(replica_manager=manager, metadata=manager.metadata))
    response = asyncio.run(apis.handle(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, _request(version, asks, replica_id),
                                       client_id="test", client_host="127.0.0.1"))
    assert type(response).__version__ == version
    out = {}
    for topic in response.topics:
        for p in topic.partitions:
            out[(topic.topic, int(p.partition))] = (p.error_code, int(getattr(p, "leader_epoch", -1)),
                                                    int(p.end_offset))
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_leader_answers_the_end_of_each_epoch_at_every_version(leader, version):
    manager, _ = leader
    cases = {
        0: (0, 5),  # an older epoch ends where the next one starts
        1: (0, 5),  # an epoch this leader never had: the largest one below it, ending at the next start
        2: (2, 10),  # the latest epoch ends at the log end offset
        3: (-1, -1),  # newer than any epoch here: UNDEFINED_EPOCH_OFFSET, with no error
        -1: (-1, -1),  # UNDEFINED_EPOCH
    }
    for asked, (epoch, end) in cases.items():
        [(error, got_epoch, got_end)] = _ask(manager, version, {(TOPIC, 0): (-1, asked)}).values()
        assert error == ErrorCode.none, asked
        assert got_end == end, asked
        assert got_epoch == (epoch if version >= 1 else -1), asked  # v0's answer has no LeaderEpoch


def test_an_epoch_older_than_the_earliest_answers_the_earliest_start(tmp_path):
    manager, partition = _replica(tmp_path, 0)
    _write(manager, partition, [3, 3, 5])
    partition.make_leader(_state(0, 5))
    assert _ask(manager, 4, {(TOPIC, 0): (5, 1)})[(TOPIC, 0)] == (ErrorCode.none, 1, 0)  # (requested, start of epoch 3)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_current_leader_epoch_fences_from_v2(leader, version):
    manager, _ = leader
    assert _ask(manager, version, {(TOPIC, 0): (1, 0)})[(TOPIC, 0)][0] == ErrorCode.fenced_leader_epoch
    assert _ask(manager, version, {(TOPIC, 0): (3, 0)})[(TOPIC, 0)][0] == ErrorCode.unknown_leader_epoch
    assert _ask(manager, version, {(TOPIC, 0): (2, 0)})[(TOPIC, 0)] == (ErrorCode.none, 0, 5)
    assert _ask(manager, version, {(TOPIC, 0): (-1, 0)})[(TOPIC, 0)] == (ErrorCode.none, 0, 5)
    fenced = _ask(manager, version, {(TOPIC, 0): (1, 0)})[(TOPIC, 0)]
    assert fenced[1:] == (-1, -1)


@pytest.mark.parametrize("version", [0, 1])
def test_v0_and_v1_carry_no_current_epoch_and_are_never_fenced(leader, version):
    manager, _ = leader
    assert _ask(manager, version, {(TOPIC, 0): (1, 0)})[(TOPIC, 0)][0] == ErrorCode.none


@pytest.mark.parametrize("version", VERSIONS)
def test_a_follower_refuses_even_a_follower_asking_with_its_replica_id(tmp_path, version):
    # Kafka's ReplicaManager.lastOffsetForLeaderEpoch passes fetchOnlyFromLeader = true whoever asks.
    manager, partition = _replica(tmp_path, 1)
    _write(manager, partition, [0, 0, 2])
    partition.make_follower(_state(0, 2))
    for replica_id in (-1, -2, 0, 2):
        got = _ask(manager, version, {(TOPIC, 0): (2 if version >= 2 else -1, 0)}, replica_id)[(TOPIC, 0)]
        assert got == (ErrorCode.not_leader_or_follower, -1, -1), replica_id
    if version >= 2:  # the epoch is checked first, as getLocalLog does
        assert _ask(manager, version, {(TOPIC, 0): (1, 0)})[(TOPIC, 0)][0] == ErrorCode.fenced_leader_epoch


def test_partitions_not_hosted_here(leader):
    manager, _ = leader
    manager.metadata.put_topic(TopicMetadata("elsewhere", uuid.UUID(int=7), [PartitionState(0, 2, 4, [2], [2])]))
    got = _ask(manager, 4, {(TOPIC, 0): (2, 2), ("elsewhere", 0): (4, 4), ("nowhere", 0): (-1, 0),
                            (TOPIC, 9): (-1, 0)})
    assert got == {
        (TOPIC, 0): (ErrorCode.none, 2, 10),
        ("elsewhere", 0): (ErrorCode.not_leader_or_follower, -1, -1),  # in the metadata cache: led elsewhere
        ("nowhere", 0): (ErrorCode.unknown_topic_or_partition, -1, -1),
        (TOPIC, 9): (ErrorCode.unknown_topic_or_partition, -1, -1),
    }


def test_standalone_leader_answers_at_its_latest_epoch(tmp_path):
    manager, partition = _replica(tmp_path, 0)
    _write(manager, partition, [0, 0, 0, 4, 4])
    partition.make_standalone_leader()
    assert partition.leader_epoch == 4
    assert _ask(manager, 4, {(TOPIC, 0): (4, 0)})[(TOPIC, 0)] == (ErrorCode.none, 0, 3)
    assert _ask(manager, 4, {(TOPIC, 0): (4, 4)})[(TOPIC, 0)] == (ErrorCode.none, 4, 5)


# -- getOffsetTruncationState -------------------------------------------------------------------------------------
def _fake(entries: list[tuple[int, int]], log_end: int) -> SimpleNamespace:
    cache = LeaderEpochCache(EpochEntry(e, o) for e, o in entries)
    return SimpleNamespace(log_end_offset=log_end, log=SimpleNamespace(leader_epochs=cache))


@pytest.mark.parametrize(("local", "log_end", "leader_answer", "fetch_offset", "expected"), [
    ([(0, 0), (1, 5)], 8, (-1, -1), 3, (3, True)),  # UNDEFINED_EPOCH_OFFSET: the fetch offset (KIP-279)
    ([(0, 0), (1, 5)], 8, (-1, 6), 3, (6, True)),  # v0 answer (no epoch): the leader's end offset
    ([(0, 0), (1, 5)], 8, (-1, 12), 3, (8, True)),  # ... never past the log end
    ([(0, 0), (1, 5)], 8, (1, 6), 3, (6, True)),  # the same epoch: the smaller end
    ([(0, 0), (1, 5)], 8, (0, 4), 3, (4, True)),  # the leader's epoch 0 ends earlier
    ([(0, 0), (1, 5)], 8, (0, 7), 3, (5, True)),  # ours ends earlier
    ([(0, 0), (1, 3), (3, 6)], 9, (2, 7), 0, (6, False)),  # epoch 2 unknown here: to our epoch 3's start, ask again
    ([(3, 2)], 8, (1, 4), 0, (2, True)),  # below every local epoch: where the earliest one starts here
    ([(0, 0)], 8, (2, 4), 0, (4, True)),  # newer than every local epoch: the leader's end offset
    ([], 8, (1, 4), 0, (4, True)),  # no local epochs at all
])
def test_offset_truncation_state(local, log_end, leader_answer, fetch_offset, expected):
    assert offset_truncation_state(_fake(local, log_end), *leader_answer, fetch_offset) == expected


# -- the follower's fetcher: Truncating, then Fetching ----------------------------------------------------------
class RecordingLeader:
    """A leader's ReplicaManager served by a real SocketServer; ``seen`` lists (api, version, body) in order."""

    def __init__(self, manager: ReplicaManager) -> None:
        self.apis = KafkaApis(SimpleNamespace(replica_manager=manager, metadata=manager.metadata))
        self.seen: list[tuple[ApiKey, int, object]] = []
        handle = self.apis.handle

        async def recording(api_key, api_version, body, **kwargs):
            self.seen.append((api_key, api_version, body))
            return await handle(api_key, api_version, body, **kwargs)

        self.apis.handle = recording  # type: ignore[method-assign]
        self.server = SocketServer(self.apis, max_frame_bytes=100 << 20)

    def apis_seen(self) -> list[tuple[str, int]]:
        return [(key.name, version) for key, version, _ in self.seen]


def _follow(leader_manager: ReplicaManager, follower_manager: ReplicaManager, follower: Partition, until,
            timeout: float = 10.0) -> tuple[RecordingLeader, ReplicaFetcherManager]:
    """Run broker 1's fetcher against the leader until ``until(fetchers)`` holds."""
    recorder = RecordingLeader(leader_manager)
    settings = FetchSettings(max_wait_ms=20, backoff_ms=50, socket_timeout_ms=5000)

    async def go() -> ReplicaFetcherManager:
        await recorder.server.start([("127.0.0.1", 0)])
        endpoint = recorder.server.bound[0]
        fetchers = ReplicaFetcherManager(1, follower_manager.log_manager, settings, lambda broker_id: endpoint)
        fetchers.add_fetchers([follower])
        deadline = time.monotonic() + timeout
        try:
            while not until(fetchers):
                assert time.monotonic() < deadline, f"not reached; the leader saw {recorder.apis_seen()}"
                await asyncio.sleep(0.01)
        finally:
            await fetchers.shutdown()
            leader_manager.shutdown()
            await recorder.server.stop()
        return fetchers

    return recorder, asyncio.run(go())


def _segment(partition: Partition) -> bytes:
    return (partition.managed.directory / "00000000000000000000.log").read_bytes()


def _identical(leader: Partition, follower: Partition):
    return lambda _: (follower.log_end_offset == leader.log_end_offset and _segment(follower) == _segment(leader))


def test_a_divergent_tail_is_truncated_via_offset_for_leader_epoch_before_the_first_fetch(tmp_path, leader, caplog):
    leader_manager, led = leader
    manager, follower = _replica(tmp_path, 1)
    _write(manager, follower, [0] * 5)  # what the leader has at epoch 0
    _write(manager, follower, [1, 1, 1], tag="-lost")  # epoch 1: appended here as leader, never replicated
    follower.make_follower(_state(0, 2))
    assert _entries(follower) == [(0, 0), (1, 5)] and follower.log_end_offset == 8
    caplog.set_level(logging.INFO, logger="kcli.broker.replica")

    recorder, _ = _follow(leader_manager, manager, follower, _identical(led, follower))

    first, second = recorder.seen[0], recorder.seen[1]
    assert (first[0], first[1]) == (ApiKey.OFFSET_FOR_LEADER_EPOCH, 4)
    asked = first[2]
    assert asked.replica_id == 1
    [topic] = asked.topics
    [p] = topic.partitions
    assert (topic.topic, p.partition, p.current_leader_epoch, p.leader_epoch) == (TOPIC, 0, 2, 1)
    assert second[0] == ApiKey.FETCH and second[2].topics[0].partitions[0].fetch_offset == 5
    assert _entries(follower) == _entries(led) == [(0, 0), (2, 5)]
    lines = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert lines == [f"{TOPIC}-0: truncated from offset 8 to 5 (OffsetForLeaderEpoch: leader epoch 1 ends at 5 "
                     "(epoch 0) on leader 0)"]
    # The producer state went back with the log: nothing of the lost tail is remembered.
    assert follower.log.producer_state.first_unstable_offset() is None


def test_an_epoch_unknown_to_the_follower_truncates_step_by_step(tmp_path):
    leader_manager, led = _replica(tmp_path, 0)
    _write(leader_manager, led, [0, 0, 0, 0, 2, 2, 2, 4, 4, 4])
    led.make_leader(_state(0, 4))
    manager, follower = _replica(tmp_path, 1)
    _write(manager, follower, [0, 0, 0])
    _write(manager, follower, [1, 1, 1, 3, 3, 3], tag="-lost")
    follower.make_follower(_state(0, 4))

    recorder, _ = _follow(leader_manager, manager, follower, _identical(led, follower))

    asks = [(b.topics[0].partitions[0].leader_epoch, b) for k, _, b in recorder.seen
            if k == ApiKey.OFFSET_FOR_LEADER_EPOCH]
    # Epoch 3 ends at 7 in the leader's epoch 2, unknown here: cut to 6 (our epoch 3's start) and ask for epoch 1,
    # which ends at 4 there (epoch 0) and at 3 here: 3 is where both agree.
    assert [epoch for epoch, _ in asks] == [3, 1]
    assert recorder.apis_seen()[:3] == [("OFFSET_FOR_LEADER_EPOCH", 4)] * 2 + [("FETCH", 12)]
    assert _entries(follower) == _entries(led)


def test_without_local_epochs_the_follower_truncates_to_its_high_watermark(tmp_path):
    leader_manager, led = _replica(tmp_path, 0)
    _write(leader_manager, led, [NO_PARTITION_LEADER_EPOCH] * 3 + [1, 1, 1])
    led.make_leader(_state(0, 1))
    manager, follower = _replica(tmp_path, 1)
    _write(manager, follower, [NO_PARTITION_LEADER_EPOCH] * 3)
    _write(manager, follower, [NO_PARTITION_LEADER_EPOCH] * 4, tag="-lost")
    follower.initialize_high_watermark(3)
    follower.make_follower(_state(0, 1))
    assert _entries(follower) == []

    recorder, _ = _follow(leader_manager, manager, follower, _identical(led, follower))
    assert "OFFSET_FOR_LEADER_EPOCH" not in {k for k, _ in recorder.apis_seen()}
    assert recorder.seen[0][2].topics[0].partitions[0].fetch_offset == 3


def test_an_undefined_answer_truncates_to_the_high_watermark(tmp_path, leader):
    leader_manager, led = leader
    led.log.leader_epochs.clear()  # a leader whose log predates leader epochs (message format v1)
    manager, follower = _replica(tmp_path, 1)
    _write(manager, follower, [0] * 5)
    _write(manager, follower, [1, 1], tag="-lost")
    follower.initialize_high_watermark(4)
    follower.make_follower(_state(0, 2))

    def truncated(fetchers):
        return fetchers.fetchers[0].state((TOPIC, 0)) == FETCHING

    recorder, _ = _follow(leader_manager, manager, follower, truncated)
    assert recorder.apis_seen()[0] == ("OFFSET_FOR_LEADER_EPOCH", 4)
    assert b"-lost" not in _segment(follower)  # cut at the high watermark, 4, then refetched from the leader


def test_a_fenced_follower_waits_for_the_next_leader_and_isr(tmp_path, leader, caplog):
    leader_manager, _ = leader
    manager, follower = _replica(tmp_path, 1)
    _write(manager, follower, [0] * 5)
    follower.make_follower(_state(0, 1))  # the leader is at epoch 2 already
    caplog.set_level(logging.INFO, logger="kcli.broker.replica")

    recorder, fetchers = _follow(leader_manager, manager, follower, lambda f: not f.fetchers[0].partitions)
    assert {k for k, _ in recorder.apis_seen()} == {"OFFSET_FOR_LEADER_EPOCH"}
    assert follower.log_end_offset == 5
    assert any("awaiting the next LeaderAndIsr" in r.getMessage() for r in caplog.records)


def test_readding_at_the_same_leader_epoch_keeps_the_fetch_state(tmp_path):
    manager, follower = _replica(tmp_path, 1)
    follower.make_follower(_state(0, 2))
    fetchers = ReplicaFetcherManager(1, manager.log_manager, FetchSettings(), lambda broker_id: None)

    async def go():
        fetchers.add_fetchers([follower])
        fetcher = fetchers.fetchers[0]
        assert fetcher.state((TOPIC, 0)) == TRUNCATING
        fetcher.states[(TOPIC, 0)].state = FETCHING
        fetchers.add_fetchers([follower])
        assert fetcher.state((TOPIC, 0)) == FETCHING  # same leader, same epoch
        follower.make_follower(_state(0, 3))
        fetchers.add_fetchers([follower])
        assert fetcher.state((TOPIC, 0)) == TRUNCATING  # a new epoch truncates again
        await fetchers.shutdown()

    asyncio.run(go())


def test_diverging_epoch_in_a_fetch_uses_the_same_truncation(tmp_path, caplog):
    manager, follower = _replica(tmp_path, 1)
    _write(manager, follower, [0] * 5)
    _write(manager, follower, [1, 1, 1], tag="-lost")
    follower.make_follower(_state(0, 2))
    fetchers = ReplicaFetcherManager(1, manager.log_manager, FetchSettings(), lambda broker_id: None)
    caplog.set_level(logging.INFO, logger="kcli.broker.replica")
    fetchers.process_partition_data(follower, SimpleNamespace(
        error_code=ErrorCode.none, diverging_epoch=SimpleNamespace(epoch=0, end_offset=5), records=b"",
        high_watermark=10, log_start_offset=0))
    assert follower.log_end_offset == 5 and _entries(follower) == [(0, 0)]
    assert [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()] == [
        f"{TOPIC}-0: truncated from offset 8 to 5 (DivergingEpoch: leader epoch 0 ends at 5 on leader 0)"]


# -- every replica keeps its leader epochs ------------------------------------------------------------------------
def test_a_follower_records_each_batch_epoch_in_its_cache_and_checkpoint(tmp_path, leader):
    leader_manager, led = leader
    manager, follower = _replica(tmp_path, 1)
    follower.make_follower(_state(0, 2))
    _follow(leader_manager, manager, follower, _identical(led, follower))
    assert _entries(follower) == _entries(led) == [(0, 0), (2, 5)]
    manager.log_manager.shutdown()
    leader_manager.log_manager.shutdown()
    checkpoints = [LeaderEpochCheckpointFile(p.managed.directory / "leader-epoch-checkpoint").read()
                   for p in (follower, led)]
    assert checkpoints[0] == checkpoints[1] == [EpochEntry(0, 0), EpochEntry(2, 5)]


# -- on the wire: a `kctl broker run` subprocess (standalone: every partition led there) --------------------------
def _wire(broker, version: int, asks, replica_id: int = -1) -> dict[tuple[str, int], tuple]:
    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        sock.sendall(encode_request(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, 7, "kctl-test",
                                    _request(version, asks, replica_id)))
        frame = read_response(sock)
    assert frame is not None, broker.log()
    correlation, response = decode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, version, frame)
    assert correlation == 7
    return {(t.topic, int(p.partition)): (p.error_code, int(getattr(p, "leader_epoch", -1)), int(p.end_offset))
            for t in response.topics for p in t.partitions}


def test_a_standalone_broker_answers_on_the_wire_at_every_version(broker):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(7):
        producer.produce("epochs-wire", b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    for version in VERSIONS:
        no_current = -1
        got = _wire(broker, version, {("epochs-wire", 0): (no_current, 0), ("epochs-wire", 5): (no_current, 0),
                                      ("nowhere-wire", 0): (no_current, 0)}, replica_id=-2)
        assert got == {("epochs-wire", 0): (ErrorCode.none, 0 if version >= 1 else -1, 7),
                       ("epochs-wire", 5): (ErrorCode.unknown_topic_or_partition, -1, -1),
                       ("nowhere-wire", 0): (ErrorCode.unknown_topic_or_partition, -1, -1)}, version
        assert _wire(broker, version, {("epochs-wire", 0): (-1, 1)})[("epochs-wire", 0)] == (ErrorCode.none, -1, -1)
        if version >= 2:
            assert _wire(broker, version, {("epochs-wire", 0): (1, 0)})[("epochs-wire", 0)][0] == \
                ErrorCode.unknown_leader_epoch
    bad = [line for line in broker.log().splitlines() if "internal error" in line or "Traceback" in line]
    assert not bad, broker.log()


def test_a_confluent_kafka_consumer_validates_its_position_and_reads_on(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        producer.produce("epochs-ck", b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "epochs-ck",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("epochs-ck", 0, 0)])
        first = None
        for _ in range(100):
            first = consumer.poll(0.2)
            if first is not None and first.error() is None:
                break
        assert first is not None and first.error() is None and first.leader_epoch() == 0
        seek_with_leader_epoch(consumer, "epochs-ck")  # KIP-320: OffsetForLeaderEpoch v2, then fetches from 1
        values = [consumer.poll(5).value() for _ in range(3)]
        assert values == [b"2", b"3", b"4"]
    finally:
        consumer.close()
