"""Fetch from follower (KIP-392) in process: the ReplicaManager of a leader and of a follower of one partition
with three replicas on brokers in racks rack-0 (0, 2) and rack-1 (1), as Kafka's ReplicaManagerTest checks it
(testPreferredReplicaAsLeaderWhenSameRackFollowerIsOutOfIsr, testFetchFollowerNotAllowedForOlderClients, ...).
No sockets, no clocks: a fetch that parks in the purgatory is seen parked, not timed."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from kcli.broker.config import ConfigError, build_config
from kcli.broker.log_manager import LogManager
from kcli.broker.metadata_cache import BrokerEndpoint, MetadataCache
from kcli.broker.partition import LeaderAndIsrState, Partition
from kcli.broker.replica_fetcher import FetchSettings, ReplicaFetcherManager
from kcli.broker.replica_manager import FetchParams, FetchPartition, ReplicaManager
from kcli.broker.replica_selector import (
    LEADER,
    RACK_AWARE,
    RackAwareReplicaSelector,
    ReplicaView,
    create_replica_selector,
)
from kcli.records import Record, build_record_batch
from kcli.records.record_set import iter_batches
from kcli.storage.log import LogConfig

TOPIC, TOPIC_ID = "t", uuid.UUID(int=392)
RACKS = {0: "rack-0", 1: "rack-1", 2: "rack-0"}
RECORDS = 10
LEADER_EPOCH = 1


def _metadata(alive=(0, 1, 2)) -> MetadataCache:
    cache = MetadataCache()
    for broker_id in alive:
        cache.add_broker(BrokerEndpoint(broker_id, "127.0.0.1", 9092 + broker_id, RACKS[broker_id]))
    return cache


def _manager(tmp_path, broker_id: int, *, selector: str | None = RACK_AWARE) -> tuple[ReplicaManager, Partition]:
    logs = LogManager([tmp_path / f"broker-{broker_id}"], broker_id=broker_id, log_config=LogConfig())
    (tmp_path / f"broker-{broker_id}").mkdir()
    managed = logs.get_or_create_log(TOPIC, 0, TOPIC_ID, LogConfig())
    partition = Partition(TOPIC, 0, TOPIC_ID, managed, local_broker_id=broker_id)
    manager = ReplicaManager(logs, local_broker_id=broker_id, metadata=_metadata(),
                             replica_selector=create_replica_selector(selector))
    manager.add_partition(partition)
    return manager, partition


def _state(isr=(0, 1, 2), epoch=LEADER_EPOCH) -> LeaderAndIsrState:
    return LeaderAndIsrState(controller_epoch=1, leader=0, leader_epoch=epoch, isr=list(isr), partition_epoch=0,
                             replicas=[0, 1, 2])


def _batch(offset: int) -> bytes:
    return build_record_batch([Record(offset, 1_700_000_000_000 + offset, None, f"v{offset}".encode())],
                              partition_leader_epoch=LEADER_EPOCH)


def _fetch(manager: ReplicaManager, offset: int, *, replica_id: int = -1, client_rack: str | None = "rack-1",
           max_wait_ms: int = 0, current_leader_epoch: int = LEADER_EPOCH):
    params = FetchParams(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, read_committed=False,
                         replica_id=replica_id, client_rack=client_rack)
    info = FetchPartition(TOPIC, 0, offset, 1 << 20, TOPIC_ID, current_leader_epoch=current_leader_epoch)
    return manager.fetch_messages(params, [info])


def _run(coroutine):
    return asyncio.run(coroutine)


def _offsets(result) -> list[int]:
    records = result.read.records
    raw = records.read() if hasattr(records, "read") else bytes(records)
    if hasattr(records, "close"):
        records.close()
    return [b.base_offset for b in iter_batches(raw)]


@pytest.fixture
def leader(tmp_path):
    """Broker 0 leads with RECORDS records; followers 1 and 2 have fetched them all (high watermark RECORDS)."""
    manager, partition = _manager(tmp_path, 0)
    partition.make_leader(_state())
    for offset in range(RECORDS):
        appended = manager.append_records(1, {(TOPIC, 0): _batch(offset)})
        assert appended[(TOPIC, 0)].error == ErrorCode.none
    for follower in (1, 2):
        [result] = _run(_fetch(manager, RECORDS, replica_id=follower, client_rack=""))
        assert result.error == ErrorCode.none
    assert partition.high_watermark == RECORDS
    return manager, partition


@pytest.fixture
def follower(tmp_path):
    """Broker 1 follows broker 0: RECORDS records copied, but the leader's high watermark it knows is 6."""
    manager, partition = _manager(tmp_path, 1)
    partition.make_follower(_state())
    for offset in range(RECORDS):
        manager.log_manager.append_as_follower(partition.managed, _batch(offset))
    partition.update_follower_high_watermark(6)
    return manager, partition


# -- the leader: preferred read replica ------------------------------------------------------------------

def test_leader_sends_a_consumer_of_another_rack_to_its_in_sync_replica_at_once_without_records(leader):
    manager, partition = leader

    async def go():
        # From the log end with a long wait: without a preferred replica this fetch would park.
        task = asyncio.ensure_future(_fetch(manager, RECORDS, max_wait_ms=60_000))
        for _ in range(3):
            await asyncio.sleep(0)
        assert task.done(), "a preferred read replica is answered at once"
        return task.result()

    [result] = _run(go())
    assert result.error == ErrorCode.none
    assert result.preferred_read_replica == 1
    assert result.read.high_watermark == RECORDS and result.read.log_start_offset == 0
    [from_start] = _run(_fetch(manager, 0))
    assert from_start.preferred_read_replica == 1 and _offsets(from_start) == []


def test_leader_in_the_clients_rack_or_no_rack_reads_itself(leader):
    manager, _ = leader
    for rack in ("rack-0", "", "rack-9", None):
        [result] = _run(_fetch(manager, 0, client_rack=rack))
        assert result.preferred_read_replica == -1, rack
        assert _offsets(result) == list(range(RECORDS)), rack


def test_replica_fetches_never_get_a_preferred_replica(leader):
    manager, _ = leader
    [result] = _run(_fetch(manager, 0, replica_id=1, client_rack="rack-1"))
    assert result.preferred_read_replica == -1
    assert _offsets(result) == list(range(RECORDS))


def test_same_rack_follower_out_of_the_isr_is_not_preferred(leader):
    manager, partition = leader
    partition.isr = [0, 2]
    [result] = _run(_fetch(manager, 0))
    assert result.preferred_read_replica == -1
    assert _offsets(result) == list(range(RECORDS))


def test_same_rack_follower_without_the_fetch_offset_is_not_preferred(leader):
    manager, partition = leader
    partition.remote[1].log_end_offset = 4
    [result] = _run(_fetch(manager, 5))
    assert result.preferred_read_replica == -1 and _offsets(result) == list(range(5, RECORDS))
    [result] = _run(_fetch(manager, 4))
    assert result.preferred_read_replica == 1


def test_same_rack_follower_not_alive_in_the_metadata_cache_is_not_preferred(leader):
    manager, _ = leader
    manager.metadata = _metadata(alive=(0, 2))
    [result] = _run(_fetch(manager, 0))
    assert result.preferred_read_replica == -1


@pytest.mark.parametrize("selector", [None, LEADER])
def test_without_the_rack_aware_selector_consumers_read_the_leader(leader, selector):
    manager, _ = leader
    manager.replica_selector = create_replica_selector(selector)
    [result] = _run(_fetch(manager, 0))
    assert result.preferred_read_replica == -1 and _offsets(result) == list(range(RECORDS))


def test_rack_aware_selector_picks_the_most_caught_up_same_rack_replica():
    selector = RackAwareReplicaSelector()
    leader = ReplicaView(0, "a", 100, 0)
    lagging, caught_up, recent = ReplicaView(1, "b", 90, 0), ReplicaView(2, "b", 100, 500), ReplicaView(3, "b", 100, 10)
    assert selector.select("b", leader, [leader, lagging, caught_up, recent]) == recent
    assert selector.select("b", leader, [leader, lagging, caught_up]) == caught_up
    assert selector.select("a", leader, [leader, ReplicaView(4, "a", 200, 0)]) == leader
    assert selector.select("c", leader, [leader, lagging]) == leader
    assert selector.select("", leader, [leader, lagging]) == leader


def test_replica_selector_class_config():
    assert build_config({})["replica.selector.class"] is None
    assert build_config({"replica.selector.class": RACK_AWARE})["replica.selector.class"] == RACK_AWARE
    with pytest.raises(ConfigError, match="replica.selector.class"):
        build_config({"replica.selector.class": "com.example.Mine"})


# -- the follower: serving consumers -----------------------------------------------------------------------

def test_follower_refuses_consumers_below_fetch_v11(follower):
    manager, _ = follower
    [result] = _run(_fetch(manager, 0, client_rack=None))
    assert result.error == ErrorCode.not_leader_or_follower


def test_follower_serves_a_v11_consumer_up_to_its_high_watermark_and_never_redirects(follower):
    manager, partition = follower
    assert partition.log_end_offset == RECORDS
    for rack in ("rack-1", "rack-0", ""):
        [result] = _run(_fetch(manager, 0, client_rack=rack))
        assert result.error == ErrorCode.none and result.preferred_read_replica == -1, rack
        assert result.read.high_watermark == 6
        assert _offsets(result) == list(range(6)), rack


def test_follower_checks_the_consumers_leader_epoch(follower):
    manager, _ = follower
    [result] = _run(_fetch(manager, 0, current_leader_epoch=LEADER_EPOCH - 1))
    assert result.error == ErrorCode.fenced_leader_epoch
    [result] = _run(_fetch(manager, 0, current_leader_epoch=LEADER_EPOCH + 1))
    assert result.error == ErrorCode.unknown_leader_epoch


def test_consumer_fetch_parked_on_a_follower_completes_when_the_leader_raises_its_high_watermark(follower):
    manager, partition = follower
    fetchers = ReplicaFetcherManager(1, manager.log_manager, FetchSettings(), lambda broker_id: None,
                                     on_high_watermark=manager.follower_high_watermark_moved)

    async def go():
        task = asyncio.ensure_future(_fetch(manager, 6, max_wait_ms=60_000))
        for _ in range(3):
            await asyncio.sleep(0)
        assert not task.done() and manager.fetch_purgatory.watched() == 1, "nothing above the high watermark yet"
        # The leader's answer to the follower's own fetch: no new records, a higher high watermark.
        fetchers.process_partition_data(partition, SimpleNamespace(
            error_code=ErrorCode.none, diverging_epoch=None, records=b"", high_watermark=RECORDS,
            log_start_offset=0))
        for _ in range(3):
            await asyncio.sleep(0)
        assert task.done(), "the high watermark move completes the parked fetch"
        return task.result()

    [result] = _run(go())
    assert result.error == ErrorCode.none
    assert _offsets(result) == list(range(6, RECORDS))
