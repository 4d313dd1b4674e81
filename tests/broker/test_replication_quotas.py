"""Replication throttles (KIP-73) in process, with a fake clock: Kafka's ReplicationQuotaManager (SimpleRate over
11 samples of 1 s), the leader's answer to a follower's fetch (ReplicaManager.shouldLeaderThrottle) and the replica
fetcher's choice of partitions (ReplicaFetcherThread.shouldFollowerThrottle), as Kafka's ReplicationQuotaManagerTest,
ReplicaManagerQuotasTest and ReplicaFetcherThreadTest check them. No sockets, no sleeps."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from kcli.broker.log_manager import LogManager
from kcli.broker.metadata_cache import MetadataCache
from kcli.broker.partition import LeaderAndIsrState, Partition
from kcli.broker.replica_fetcher import (
    FETCHING,
    FetchSettings,
    PartitionFetchState,
    ReplicaFetcher,
    ReplicaFetcherManager,
)
from kcli.broker.replica_manager import FetchParams, FetchPartition, ReplicaManager
from kcli.broker.replication_quotas import (
    ALL,
    FOLLOWER,
    LEADER,
    ReplicationQuotaManager,
    ReplicationQuotas,
    parse_throttled_partitions,
)
from kcli.records import Record, build_record_batch
from kcli.storage.log import LogConfig

TOPIC, TOPIC_ID = "moving", uuid.UUID(int=73)
THROTTLED, FREE = 0, 1  # partition 0 is throttled, partition 1 is not
RATE = 1000  # bytes/s


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _manager(kind: str = LEADER, bound: int | None = RATE) -> tuple[ReplicationQuotaManager, Clock]:
    clock = Clock()
    manager = ReplicationQuotaManager(kind, clock=clock)
    manager.update_quota(bound)
    return manager, clock


# -- the quota manager ----------------------------------------------------------------------------------------
def test_rate_is_a_simple_rate_over_at_least_one_window():
    manager, clock = _manager()
    manager.record(500)
    assert manager.rate() == 500  # the window is one sample long at first: 500 B over 1 s
    clock.advance(0.5)
    assert manager.rate() == 500
    clock.advance(1.5)  # 2 s since the sample began
    assert manager.rate() == 250
    manager.record(500)
    assert manager.rate() == 500  # 1000 B over 2 s


def test_quota_exceeded_until_the_window_brings_the_rate_back_under_the_bound():
    """With a bound of R and N > R bytes recorded at once, the quota is exceeded until N / R seconds have
    passed, then not; after the 11 samples' age the bytes are forgotten altogether."""
    manager, clock = _manager()
    assert not manager.is_quota_exceeded()
    manager.record(3 * RATE)
    assert manager.is_quota_exceeded()
    clock.advance(2.9)
    assert manager.is_quota_exceeded()  # 3000 B / 2.9 s > 1000 B/s
    clock.advance(0.1)
    assert not manager.is_quota_exceeded()  # 3000 B / 3 s: at the bound, acceptable
    manager.record(100 * RATE)
    assert manager.is_quota_exceeded()
    clock.advance(11)
    assert not manager.is_quota_exceeded() and manager.rate() == 0  # the samples expired


def test_unbounded_and_zero_bounds():
    unbounded, _ = _manager(bound=None)
    unbounded.record(10 ** 12)
    assert not unbounded.is_quota_exceeded()
    zero, _ = _manager(bound=0)
    assert not zero.is_quota_exceeded()
    zero.record(1)
    assert zero.is_quota_exceeded()


def test_throttled_partitions_and_should_throttle():
    manager, _ = _manager()
    manager.mark_throttled("a", frozenset({0, 2}))
    manager.mark_throttled("b", ALL)
    assert [manager.is_throttled("a", p) for p in range(3)] == [True, False, True]
    assert manager.is_throttled("b", 99) and not manager.is_throttled("c", 0)
    assert not manager.should_throttle("a", 0, in_sync=False)  # under the bound
    manager.record(2 * RATE)
    assert manager.should_throttle("a", 0, in_sync=False)
    assert not manager.should_throttle("a", 0, in_sync=True)  # an in-sync replica is never held back
    assert not manager.should_throttle("a", 1, in_sync=False)  # nor an unthrottled partition
    assert manager.held_back == 1
    manager.remove_throttle("a")
    assert not manager.should_throttle("a", 0, in_sync=False)


@pytest.mark.parametrize("value, broker, expected", [
    ("*", 1, ALL),
    (" * ", 1, ALL),
    ("0:1,1:2,2:1", 1, frozenset({0, 2})),
    ("0:1, 1:2 ,2:1", 2, frozenset({1})),
    ("0:1,1:2", 3, frozenset()),
    ("0:1,", 1, frozenset({0})),
])
def test_parse_throttled_partitions(value, broker, expected):
    assert parse_throttled_partitions(value, broker) == expected


def test_broker_and_topic_configs_reach_the_managers():
    quotas = ReplicationQuotas.create(1)
    quotas.broker_config_changed({}, {"leader.replication.throttled.rate": "100"})
    assert (quotas.leader.bound, quotas.follower.bound, quotas.alter_log_dirs.bound) == (100, None, None)
    quotas.broker_config_changed({"leader.replication.throttled.rate": "10",
                                  "follower.replication.throttled.rate": "20",
                                  "replica.alter.log.dirs.io.max.bytes.per.second": "30"},
                                 {"leader.replication.throttled.rate": "100"})
    assert (quotas.leader.bound, quotas.follower.bound, quotas.alter_log_dirs.bound) == (10, 20, 30)
    quotas.topic_config_changed("t", {"leader.replication.throttled.replicas": "0:0,0:1",
                                      "follower.replication.throttled.replicas": "0:2,1:1"})
    assert quotas.leader.throttled == {"t": frozenset({0})} and quotas.follower.throttled == {"t": frozenset({1})}
    quotas.topic_config_changed("t", {"leader.replication.throttled.replicas": "*",
                                      "follower.replication.throttled.replicas": ""})
    assert quotas.leader.throttled == {"t": ALL} and quotas.follower.throttled == {}
    quotas.topic_config_changed("t", {})
    assert quotas.leader.throttled == {} and quotas.follower.throttled == {}


def test_metrics_name_kafkas_byte_rates():
    from kcli.broker.metrics import BrokerMetrics

    quotas = ReplicationQuotas.create(1)
    quotas.leader.update_quota(RATE)
    families = {name: samples for name, _, _, samples in quotas.collect()}
    assert families["kafka_server_leaderreplication_byte_rate"] == [({}, 0.0)]
    assert families["kafka_server_followerreplication_byte_rate"] == [({}, 0.0)]
    assert families["kctl_replication_throttled_rate"][0] == ({"type": "LeaderReplication"}, RATE)
    metrics = BrokerMetrics()
    metrics.registry.collectors.append(quotas.collect)
    text = metrics.render()
    assert "# TYPE kafka_server_leaderreplication_byte_rate gauge" in text
    assert 'kctl_replication_throttled_rate{type="FollowerReplication"} -1' in text


# -- the leader's side ------------------------------------------------------------------------------------------
def _batch(offset: int, size: int = 400) -> bytes:
    return build_record_batch([Record(offset, 1_700_000_000_000 + offset, None, bytes(size))],
                              partition_leader_epoch=1)


@pytest.fixture
def leader(tmp_path):
    """Broker 0 leads both partitions (replicas 0, 1; ISR 0 alone) with 3 batches each, throttled on partition 0
    (leader.replication.throttled.replicas=0:0)."""
    logs = LogManager([tmp_path], broker_id=0, log_config=LogConfig())
    quota, clock = _manager()
    manager = ReplicaManager(logs, local_broker_id=0, metadata=MetadataCache(), leader_quota=quota)
    for index in (THROTTLED, FREE):
        managed = logs.get_or_create_log(TOPIC, index, TOPIC_ID, LogConfig())
        partition = Partition(TOPIC, index, TOPIC_ID, managed, local_broker_id=0)
        manager.add_partition(partition)
        partition.make_leader(LeaderAndIsrState(controller_epoch=1, leader=0, leader_epoch=1, isr=[0],
                                                partition_epoch=0, replicas=[0, 1]))
        for offset in range(3):
            assert manager.append_records(1, {(TOPIC, index): _batch(offset)})[(TOPIC, index)].error == ErrorCode.none
    quota.mark_throttled(TOPIC, parse_throttled_partitions("0:0", 0))
    return manager, quota, clock


def _fetch(manager: ReplicaManager, *, replica_id: int = 1) -> dict[int, int]:
    """A fetch from offset 0 of both partitions; the record bytes answered per partition."""
    params = FetchParams(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, read_committed=False, replica_id=replica_id)
    infos = [FetchPartition(TOPIC, index, 0, 1 << 20, TOPIC_ID, current_leader_epoch=1) for index in (0, 1)]
    results = asyncio.run(manager.fetch_messages(params, infos))
    out = {}
    for info, result in zip(infos, results):
        assert result.error == ErrorCode.none
        records = result.read.records
        out[info.partition] = len(records)
        if hasattr(records, "close"):
            records.close()
    return out


def test_leader_answers_a_throttled_partition_empty_once_over_the_rate_and_again_after_the_window(leader):
    manager, quota, clock = leader
    first = _fetch(manager)
    size = first[THROTTLED]
    assert size > RATE and first[FREE] == size  # under the bound: both read, all three batches
    assert quota.rate() == size  # only the throttled partition's bytes are recorded
    second = _fetch(manager)
    assert second == {THROTTLED: 0, FREE: size}  # over the bound: no records for it, no error; the other unaffected
    assert quota.held_back == 1
    clock.advance(size / RATE - 0.01)
    assert _fetch(manager)[THROTTLED] == 0
    clock.advance(0.01)  # size / RATE seconds after: the rate is back at the bound
    assert _fetch(manager)[THROTTLED] == size
    assert quota.rate() == pytest.approx(2 * size / (size / RATE))


def test_leader_never_throttles_an_in_sync_follower_or_a_consumer(leader):
    manager, quota, _ = leader
    quota.record(100 * RATE)
    assert quota.is_quota_exceeded()
    size = _fetch(manager, replica_id=-1)[THROTTLED]
    assert size > 0  # a consumer: client quotas only
    manager.find(TOPIC, THROTTLED).isr = [0, 1]
    assert _fetch(manager)[THROTTLED] == size  # follower 1 in the ISR
    assert quota.held_back == 0


def test_leader_without_a_bound_never_throttles(leader):
    manager, quota, _ = leader
    quota.update_quota(None)
    quota.record(100 * RATE)
    assert _fetch(manager)[THROTTLED] > 0


# -- the follower's side ----------------------------------------------------------------------------------------
@pytest.fixture
def follower(tmp_path):
    """Broker 1's fetcher from leader 0, both partitions Fetching, its FollowerReplication quota throttling
    partition 0 (follower.replication.throttled.replicas=0:1)."""
    logs = LogManager([tmp_path], broker_id=1, log_config=LogConfig())
    quota, clock = _manager(FOLLOWER)
    quota.mark_throttled(TOPIC, parse_throttled_partitions("0:1,1:2", 1))
    fetchers = ReplicaFetcherManager(1, logs, FetchSettings(), lambda broker_id: None, quota=quota)
    fetcher = ReplicaFetcher(fetchers, 0)
    for index in (THROTTLED, FREE):
        managed = logs.get_or_create_log(TOPIC, index, TOPIC_ID, LogConfig())
        partition = Partition(TOPIC, index, TOPIC_ID, managed, local_broker_id=1)
        partition.make_follower(LeaderAndIsrState(controller_epoch=1, leader=0, leader_epoch=1, isr=[0],
                                                  partition_epoch=0, replicas=[0, 1]))
        fetcher.partitions[(TOPIC, index)] = partition
        fetcher.states[(TOPIC, index)] = PartitionFetchState(1, 0, FETCHING)
    return fetcher, quota, clock


def _chosen(fetcher: ReplicaFetcher) -> list[int]:
    fetching = dict(fetcher.partitions)
    fetcher._throttled(fetching)
    return sorted(index for _, index in fetching)


def _answer(fetcher: ReplicaFetcher, index: int, records: bytes, high_watermark: int) -> None:
    """The leader's answer for one partition, processed as the fetcher processes it."""
    partition = fetcher.partitions[(TOPIC, index)]
    data = SimpleNamespace(partition_index=index, error_code=ErrorCode.none, diverging_epoch=None, records=records,
                           high_watermark=high_watermark, log_start_offset=0)
    response = SimpleNamespace(error_code=ErrorCode.none, responses=[SimpleNamespace(topic=TOPIC, partitions=[data])])
    fetcher._process({(TOPIC, index): partition}, {(TOPIC, index): (1, partition.log_end_offset)}, response)


def test_follower_leaves_a_throttled_partition_out_while_over_the_rate(follower):
    fetcher, quota, clock = follower
    assert _chosen(fetcher) == [THROTTLED, FREE]  # under the bound
    records = _batch(0, size=3 * RATE)
    _answer(fetcher, THROTTLED, records, high_watermark=3)
    assert quota.rate() == len(records)  # the throttled partition's bytes are recorded
    _answer(fetcher, FREE, _batch(0), high_watermark=3)
    assert quota.rate() == len(records)  # the other's are not
    assert _chosen(fetcher) == [FREE]  # over the bound: left out of the fetch
    clock.advance(len(records) / RATE - 0.01)
    assert _chosen(fetcher) == [FREE]
    clock.advance(0.01)
    assert _chosen(fetcher) == [THROTTLED, FREE]


def test_follower_in_sync_is_never_left_out(follower):
    fetcher, quota, _ = follower
    quota.record(100 * RATE)
    assert _chosen(fetcher) == [FREE]
    _answer(fetcher, THROTTLED, _batch(0), high_watermark=1)  # caught up with the leader's high watermark: lag 0
    assert fetcher.states[(TOPIC, THROTTLED)].in_sync
    assert _chosen(fetcher) == [THROTTLED, FREE]
    _answer(fetcher, THROTTLED, _batch(1), high_watermark=5)  # behind again
    assert _chosen(fetcher) == [FREE]


def test_fetcher_with_only_throttled_partitions_backs_off_instead_of_spinning(tmp_path):
    """All its partitions held back: the fetcher sends nothing and waits replica.fetch.backoff.ms (or until a
    partition is added), as Kafka's empty fetch request does; it never asks the leader meanwhile."""
    logs = LogManager([tmp_path], broker_id=1, log_config=LogConfig())
    quota, _ = _manager(FOLLOWER)
    quota.mark_throttled(TOPIC, ALL)
    quota.record(100 * RATE)
    asked = []
    fetchers = ReplicaFetcherManager(1, logs, FetchSettings(backoff_ms=60_000), lambda broker_id: asked.append(
        broker_id), quota=quota)
    managed = logs.get_or_create_log(TOPIC, 0, TOPIC_ID, LogConfig())
    partition = Partition(TOPIC, 0, TOPIC_ID, managed, local_broker_id=1)
    partition.make_follower(LeaderAndIsrState(controller_epoch=1, leader=0, leader_epoch=1, isr=[0],
                                              partition_epoch=0, replicas=[0, 1]))

    async def go() -> None:
        fetchers.add_fetchers([partition])
        fetcher = fetchers.fetchers[0]
        fetcher.states[(TOPIC, 0)].state = FETCHING  # no truncation to settle: straight to fetching
        for _ in range(50):
            await asyncio.sleep(0)
        assert quota.held_back >= 1 and asked == [], "held back, and no request to the leader"
        held = quota.held_back
        for _ in range(50):
            await asyncio.sleep(0)
        assert quota.held_back == held, "backing off, not spinning"
        await fetchers.shutdown()

    asyncio.run(go())
