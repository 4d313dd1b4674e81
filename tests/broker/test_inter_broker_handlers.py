"""The broker's LeaderAndIsr handler in process, on the wire both ways: the request the controller builds (v5), the
handler's answer encoded and read back as the controller reads it. The in-process controller tests answer with
their own recording brokers, so only a cluster ever ran this handler's response through the encoder."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from kcli.broker.controller import requests
from kcli.broker.handlers.common import RequestContext
from kcli.broker.handlers.inter_broker import leader_and_isr
from kcli.broker.log_manager import LogManager
from kcli.broker.partition import Partition
from kcli.broker.replica_manager import ReplicaManager
from kcli.protocol import ApiKey, decode_request, decode_response, encode_request, encode_response
from kcli.storage.checkpoint import uuid_to_base64
from kcli.storage.log import LogConfig
from kcli.zk.models import TopicPartition

TOPIC_ID = uuid.UUID(int=4)
TOPIC_ID_TEXT = uuid_to_base64(TOPIC_ID)  # as the topic znode holds it
BROKER = 1


def _services(tmp_path) -> SimpleNamespace:
    (tmp_path / "logs").mkdir()
    logs = LogManager([tmp_path / "logs"], broker_id=BROKER, log_config=LogConfig())
    manager = ReplicaManager(logs, local_broker_id=BROKER)

    def ensure_replica(name: str, index: int, topic_id: uuid.UUID, *, create: bool = True) -> Partition:
        partition = manager.find(name, index)
        if partition is None:
            partition = Partition(name, index, topic_id, logs.get_or_create_log(name, index, topic_id, LogConfig()),
                                  local_broker_id=BROKER)
            manager.add_partition(partition)
        return partition

    async def prepare_replicas(wanted, topic_ids) -> None:
        pass  # ensure_replica creates the logs here

    return SimpleNamespace(replica_manager=manager, log_manager=logs,
                           admin=SimpleNamespace(ensure_replica=ensure_replica, prepare_replicas=prepare_replicas),
                           remember_endpoint=lambda *endpoint: None)


def _round_trip(services, controller_epoch: int) -> tuple[int, dict[TopicPartition, int]]:
    states = [requests.LeaderAndIsrPartitionState("orders", p, controller_epoch, leader, 0, (1, 2), 0, (1, 2),
                                                  is_new=True) for p, leader in ((0, 1), (1, 2))]
    body = requests.leader_and_isr_request(0, controller_epoch, -1, states, {"orders": TOPIC_ID_TEXT},
                                           [requests.LiveLeader(b, "127.0.0.1", 9092 + b) for b in (1, 2)])
    version = requests.VERSIONS[ApiKey.LEADER_AND_ISR]
    request = decode_request(encode_request(ApiKey.LEADER_AND_ISR, version, 5, "controller", body)[4:])
    ctx = RequestContext(services, version, "controller", "127.0.0.1", 5)
    answer = asyncio.run(leader_and_isr(ctx, request.body))
    _, decoded = decode_response(ApiKey.LEADER_AND_ISR, version, encode_response(request, answer)[4:])
    return (requests.top_level_error(decoded),
            requests.leader_and_isr_partition_errors(decoded, {TOPIC_ID_TEXT: "orders"}))


def test_leader_and_isr_answers_per_topic_id_and_the_controller_reads_it(tmp_path):
    services = _services(tmp_path)
    assert _round_trip(services, 3) == (ErrorCode.none, {TopicPartition("orders", 0): ErrorCode.none,
                                                         TopicPartition("orders", 1): ErrorCode.none})
    manager = services.replica_manager
    assert manager.find("orders", 0).is_leader and manager.find("orders", 1).leader_id == 2
    # An older controller: refused as a whole, no partition errors.
    assert _round_trip(services, 2) == (ErrorCode.stale_controller_epoch, {})
