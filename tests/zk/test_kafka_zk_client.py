"""KafkaZkClient against a real ZooKeeper (Debian's package): fenced controller writes, partition-state CAS, the
topic creators' znodes and the ZK-direct ISR path, byte for byte as Kafka writes them."""

from __future__ import annotations

import json
import queue
from dataclasses import dataclass
import time
import uuid

import pytest

from kcli.zk import paths
from kcli.zk.kafka_zk_client import (
    ControllerMovedError,
    InvalidReplicaAssignmentError,
    KafkaZkClient,
    TopicAlreadyMarkedForDeletionError,
    TopicExistsError,
    UnknownTopicError,
)
from kcli.zk.models import LeaderAndIsr, LeaderIsrAndControllerEpoch, TopicPartition
from kcli.zk.registration import BrokerRegistration

pytestmark = pytest.mark.zookeeper

TOPIC_ID = "k-4sq6EMT1Wf8qPTKH7ljQ"


@pytest.fixture
def register(zookeeper, chroot):
    started: list[BrokerRegistration] = []

    def make(broker_id: int = 0, port: int = 9092) -> BrokerRegistration:
        registration = BrokerRegistration(zookeeper.connect + chroot, broker_id,
                                          endpoints=[("PLAINTEXT", "127.0.0.1", port)])
        started.append(registration)
        registration.start(None)
        return registration

    yield make
    for registration in started:
        registration.stop()


@dataclass(frozen=True)
class Election:
    controller_epoch: int
    controller_epoch_zk_version: int  # the fencing token of the controller's writes


@pytest.fixture
def controller(register):
    """Broker 0's election (the claim its controller makes over its session: epoch and zkVersion) and a
    KafkaZkClient over that session."""
    zk = KafkaZkClient.for_registration(register(0))
    return Election(*zk.register_controller_and_increment_controller_epoch(0)), zk


def read(root, chroot, path):
    data, stat = root.get(chroot + path)
    return data, stat


def wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


# -- the registration's side --------------------------------------------------------------------------------
def test_registration_records_broker_epoch(register, root, chroot):
    first = register(0)
    _, broker_stat = read(root, chroot, "/brokers/ids/0")
    assert first.broker_epoch == broker_stat.czxid
    second = register(1)
    assert second.broker_epoch == read(root, chroot, "/brokers/ids/1")[1].czxid > first.broker_epoch
    brokers = KafkaZkClient.for_registration(second).get_all_brokers_and_epochs()
    assert {b: (e.epoch, [l.port for l in e.broker.listeners]) for b, e in brokers.items()} == {
        0: (first.broker_epoch, [9092]), 1: (second.broker_epoch, [9092])}


# -- topic creators ---------------------------------------------------------------------------------------
def test_create_topic_writes_kafkas_layout(controller, root, chroot):
    _, zk = controller
    assert zk.create_topic("orders", {0: [1, 2], 1: [2, 0]}, TOPIC_ID, {"cleanup.policy": "compact"}) == TOPIC_ID
    data, _ = read(root, chroot, "/brokers/topics/orders")
    assert data == (b'{"version":3,"partitions":{"0":[1,2],"1":[2,0]},"adding_replicas":{},'
                    b'"removing_replicas":{},"topic_id":"k-4sq6EMT1Wf8qPTKH7ljQ"}')
    config, config_stat = read(root, chroot, "/config/topics/orders")
    assert config == b'{"version":1,"config":{"cleanup.policy":"compact"}}'
    # The config node comes first (AdminZkClient.createTopicWithAssignment).
    assert config_stat.czxid < read(root, chroot, "/brokers/topics/orders")[1].czxid
    with pytest.raises(TopicExistsError):
        zk.create_topic("orders", {0: [1]}, None, {})
    generated = zk.create_topic("payments", {0: [0]}, uuid.UUID(int=7))
    assert json.loads(read(root, chroot, "/brokers/topics/payments")[0])["topic_id"] == generated == \
        "AAAAAAAAAAAAAAAAAAAABw"


@pytest.mark.parametrize("assignment", [{}, {1: [0]}, {0: [0, 1], 1: [0]}, {0: [1, 1]}, {0: [-1]}, {0: []}])
def test_create_topic_refuses_bad_assignments(controller, assignment):
    _, zk = controller
    with pytest.raises(InvalidReplicaAssignmentError):
        zk.create_topic("bad", assignment)


def test_add_partitions_keeps_the_topic_id(controller, root, chroot):
    _, zk = controller
    zk.create_topic("orders", {0: [1, 2]}, TOPIC_ID)
    zk.add_partitions("orders", {0: [1, 2], 1: [2, 1], 2: [1, 2]})
    document = json.loads(read(root, chroot, "/brokers/topics/orders")[0])
    assert document["partitions"] == {"0": [1, 2], "1": [2, 1], "2": [1, 2]}
    assert document["topic_id"] == TOPIC_ID
    with pytest.raises(InvalidReplicaAssignmentError):
        zk.add_partitions("orders", {0: [2, 1], 1: [2, 1], 2: [1, 2], 3: [1, 2]})
    with pytest.raises(UnknownTopicError):
        zk.add_partitions("missing", {0: [1]})


def test_delete_topic_marks_it(controller, root, chroot):
    _, zk = controller
    zk.create_topic("orders", {0: [1]})
    zk.delete_topic("orders")
    assert read(root, chroot, "/admin/delete_topics/orders")[0] == b""
    with pytest.raises(TopicAlreadyMarkedForDeletionError):
        zk.delete_topic("orders")
    with pytest.raises(TopicExistsError):
        zk.create_topic("orders", {0: [1]})  # marked for deletion: not yet re-creatable
    with pytest.raises(UnknownTopicError):
        zk.delete_topic("missing")


# -- controller writes ------------------------------------------------------------------------------------
def leadership(leader, isr, epoch=0, version=0):
    return LeaderAndIsr(leader, epoch, tuple(isr), partition_epoch=version)


def test_partition_states_created_then_compared_and_set(controller, root, chroot):
    election, zk = controller
    zk.create_topic("orders", {0: [1, 2], 1: [2, 1]}, TOPIC_ID)
    epoch, ezv = election.controller_epoch, election.controller_epoch_zk_version
    p0, p1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
    created = zk.create_topic_partition_states(
        {p0: LeaderIsrAndControllerEpoch(leadership(1, [1, 2]), epoch),
         p1: LeaderIsrAndControllerEpoch(leadership(2, [2, 1]), epoch)}, ezv)
    assert created == {p0: None, p1: None}
    data, stat = read(root, chroot, "/brokers/topics/orders/partitions/0/state")
    assert data == b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":[1,2]}'
    assert stat.version == 0
    again = zk.create_topic_partition_states({p0: LeaderIsrAndControllerEpoch(leadership(1, [1]), epoch)}, ezv)
    assert type(again[p0]).__name__ == "NodeExistsError"

    states = zk.get_topic_partition_states([p0, p1, TopicPartition("orders", 7)])
    assert states[p0] == LeaderIsrAndControllerEpoch(leadership(1, [1, 2]), epoch)
    assert states[TopicPartition("orders", 7)] is None

    moved = states[p0].leader_and_isr.new_leader_and_isr(2, [2])
    result = zk.update_partition_states({p0: moved}, epoch, ezv)
    assert result.finished == {p0: moved.with_partition_epoch(1)} and result.retry == []
    stale = states[p1].leader_and_isr.with_partition_epoch(5).new_epoch()
    assert zk.update_partition_states({p1: stale}, epoch, ezv).retry == [p1]
    assert json.loads(read(root, chroot, "/brokers/topics/orders/partitions/0/state")[0])["leader_epoch"] == 1


def test_fenced_writes_fail_once_the_epoch_moved(controller, root, chroot):
    election, zk = controller
    zk.create_topic("orders", {0: [1]}, TOPIC_ID)
    p0 = TopicPartition("orders", 0)
    epoch, ezv = election.controller_epoch, election.controller_epoch_zk_version
    zk.create_topic_partition_states({p0: LeaderIsrAndControllerEpoch(leadership(1, [1]), epoch)}, ezv)
    # Another session elects itself: the epoch node moves on.
    root.set(chroot + "/controller_epoch", str(epoch + 1).encode())
    with pytest.raises(ControllerMovedError):
        zk.update_partition_states({p0: leadership(1, [1]).new_epoch()}, epoch, ezv)
    with pytest.raises(ControllerMovedError):
        zk.create_topic_partition_states({TopicPartition("orders", 1): LeaderIsrAndControllerEpoch(
            leadership(1, [1]), epoch)}, ezv)
    with pytest.raises(ControllerMovedError):
        zk.delete_topic_znode("orders", ezv)
    zk.propagate_isr_changes([("orders", 0)])
    with pytest.raises(ControllerMovedError):
        zk.delete_isr_change_notifications(ezv)
    assert json.loads(read(root, chroot, "/brokers/topics/orders/partitions/0/state")[0])["leader_epoch"] == 0
    assert not root.exists(chroot + "/brokers/topics/orders/partitions/1")


# -- partition leaders --------------------------------------------------------------------------------------
def test_leader_isr_update_is_a_cas_that_tolerates_its_own_retry(controller, root, chroot):
    election, zk = controller
    zk.create_topic("orders", {0: [1, 2]}, TOPIC_ID)
    p0 = TopicPartition("orders", 0)
    zk.create_topic_partition_states({p0: LeaderIsrAndControllerEpoch(leadership(1, [1, 2]), 1)},
                                     election.controller_epoch_zk_version)
    assert zk.update_leader_and_isr("orders", 0, 1, 0, [1], controller_epoch=1, expected_version=0) == 1
    assert read(root, chroot, "/brokers/topics/orders/partitions/0/state")[0] == \
        b'{"version":1,"leader":1,"leader_epoch":0,"controller_epoch":1,"isr":[1]}'
    # The same write again at the old version: the node holds exactly it, so it counts as done.
    assert zk.update_leader_and_isr("orders", 0, 1, 0, [1], controller_epoch=1, expected_version=0) == 1
    # A different state at a stale version fails.
    assert zk.update_leader_and_isr("orders", 0, 1, 0, [1, 2], controller_epoch=1, expected_version=0) is None
    assert zk.update_leader_and_isr("missing", 0, 1, 0, [1], controller_epoch=1, expected_version=0) is None


def test_isr_change_notifications(controller, root, chroot):
    election, zk = controller
    path = zk.propagate_isr_changes([("orders", 1), ("orders", 0), ("orders", 1)])
    name = path.rsplit("/", 1)[1]
    assert name.startswith("isr_change_") and len(name) == len("isr_change_") + 10
    assert read(root, chroot, path)[0] == \
        b'{"version":1,"partitions":[{"topic":"orders","partition":0},{"topic":"orders","partition":1}]}'
    zk.propagate_isr_changes([("payments", 3)])
    sequences = zk.get_all_isr_change_notifications()
    assert len(sequences) == 2
    assert zk.get_partitions_from_isr_change_notifications(sequences) == {
        TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("payments", 3)}
    zk.delete_isr_change_notifications(election.controller_epoch_zk_version, sequences[:1])
    assert zk.get_all_isr_change_notifications() == sequences[1:]


# -- watches --------------------------------------------------------------------------------------------------
def test_child_watch_fires_once_per_read_and_can_be_muted(controller, register):
    _, zk = controller
    fired: queue.Queue[str] = queue.Queue()
    zk.register_child_change_handler(paths.BROKER_IDS, lambda: fired.put("brokers"))
    assert zk.get_all_broker_ids(watch=True) == [0]
    register(1)
    assert fired.get(timeout=15) == "brokers"
    assert zk.get_all_broker_ids(watch=True) == [0, 1]
    zk.unregister_all_handlers()
    register(2)
    wait_for(lambda: zk.get_all_broker_ids() == [0, 1, 2])
    time.sleep(0.2)
    assert fired.empty()


def test_data_watch_on_a_topic(controller, root, chroot):
    from kcli.zk.kafka_zk_client import ZNodeChangeHandler

    _, zk = controller
    zk.create_topic("orders", {0: [1]}, TOPIC_ID)
    fired: queue.Queue[str] = queue.Queue()
    assert zk.register_change_handler_and_check_existence(
        paths.topic("orders"), ZNodeChangeHandler(on_data_change=lambda: fired.put("changed")))
    zk.add_partitions("orders", {0: [1], 1: [1]})
    assert fired.get(timeout=15) == "changed"
    assert zk.get_topic_assignments(["orders", "missing"])["orders"][0].partitions == {0: (1,), 1: (1,)}


def test_topic_configs_and_change_notifications(controller, root, chroot):
    _, zk = controller
    zk.create_topic("orders", {0: [1]}, TOPIC_ID, {"retention.ms": "1000"})
    zk.create_topic("payments", {0: [1]})
    assert zk.topic_configs() == {"orders": {"retention.ms": "1000"}, "payments": {}}
    zk.set_topic_config("payments", {"cleanup.policy": "compact"})
    assert zk.topic_config("payments") == {"cleanup.policy": "compact"}
    assert read(root, chroot, "/config/topics/payments")[0] == b'{"version":1,"config":{"cleanup.policy":"compact"}}'
    [change] = root.get_children(chroot + "/config/changes")
    assert change.startswith("config_change_") and len(change) == len("config_change_") + 10
    assert read(root, chroot, "/config/changes/" + change)[0] == b'{"version":2,"entity_path":"topics/payments"}'
    assert zk.topic_config("missing") == {}


def test_producer_id_blocks_are_unique_in_the_cluster(controller, root, chroot):
    """Kafka's /latest_producer_id_block: blocks of 1000, the next after the last one handed out, whichever
    broker asks; the JSON is Kafka's (block ends as strings)."""
    _, zk = controller
    assert zk.allocate_producer_id_block(0) == (0, 999)
    assert json.loads(read(root, chroot, "/latest_producer_id_block")[0]) == {
        "version": 1, "broker": 0, "block_start": "0", "block_end": "999"}
    assert zk.allocate_producer_id_block(1) == (1000, 1999)
    assert json.loads(read(root, chroot, "/latest_producer_id_block")[0])["broker"] == 1
