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
        isr = ZkIsrManager(zk, manager)
        manager.isr_listener = isr
        manager._change_isr(partition, [0])
        await asyncio.gather(*isr._writes)

    asyncio.run(go())
    lines = [r.getMessage() for r in caplog.records if r.name == "kcli.broker.isr"]
    assert len(lines) == 1 and expected in lines[0], lines
    assert not_expected not in lines[0] and "changed in ZooKeeper" not in lines[0]
    # Either way the change is no longer pending: the next fetch or expiration check may propose it again.
    assert partition.pending_isr is None and partition.isr == [0, 1]
