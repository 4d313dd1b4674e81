"""Partition reassignment in the controller (KIP-455 as Kafka 2.8-3.x's ZooKeeper-mode controller does it;
kafka-cluster.md 2.7), in process against a real ZooKeeper and recording brokers (tests/controller_support.py).

The brokers here do not replicate: a test plays the partition leader when it adds a caught-up replica to the ISR,
writing the state node on the ZK-direct path as a leader does; the controller's watch on that node completes the
reassignment.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import Future

import pytest

from controller_support import (
    live_ids,
    partitions_of,
    read_json,
    start_broker,
    wait_for,
    wait_for_metadata_delivered,
)
from kcli.broker.controller.context import ReplicaAssignment
from kcli.broker.controller.events import ListPartitionReassignments, ZkPartitionReassignment
from kcli.broker.errors import InvalidReplicaAssignmentError, NoReassignmentInProgressError, UnknownTopicOrPartitionError
from kcli.protocol import ApiKey
from kcli.zk.kafka_zk_client import ControllerMovedError, KafkaZkClient
from kcli.zk.models import TopicPartition

pytestmark = pytest.mark.zookeeper

TOPIC_ID = "k-4sq6EMT1Wf8qPTKH7ljQ"
ORDERS = {0: [1, 2], 1: [2, 1]}
P0, P1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
REASSIGN = "/admin/reassign_partitions"


@pytest.fixture
def brokers(zookeeper, chroot, root):
    """Brokers 0 (the controller) to 3, all known to the controller, and topic orders {0: [1, 2], 1: [2, 1]}."""
    started = {}
    try:
        started[0] = start_broker(zookeeper.connect + chroot, 0)
        wait_for(lambda: started[0].runner.is_active, what="broker 0 controlling")
        for broker_id in (1, 2, 3):
            started[broker_id] = start_broker(zookeeper.connect + chroot, broker_id)
        for broker in started.values():
            wait_for(lambda b=broker: any(live_ids(u) == {0, 1, 2, 3}
                                          for u in b.server.requests(ApiKey.UPDATE_METADATA)),
                     what=f"broker {broker.id} learning the live brokers")
        KafkaZkClient.for_registration(started[1].registration).create_topic("orders", ORDERS, TOPIC_ID)
        wait_for(lambda: all(root.exists(f"{chroot}/brokers/topics/orders/partitions/{p}/state") for p in ORDERS),
                 what="the partition states")
        wait_for_metadata_delivered(started.values(), started[0].runner.controller, [P0, P1])
        for broker in started.values():
            broker.server.clear()
        yield started
    finally:
        for broker in sorted(started.values(), key=lambda b: b.runner.is_active):  # the controller last
            broker.stop()


def topic_znode(root, chroot) -> dict:
    return read_json(root, f"{chroot}/brokers/topics/orders")[0]


def state(root, chroot, partition: int) -> tuple[dict, int]:
    return read_json(root, f"{chroot}/brokers/topics/orders/partitions/{partition}/state")


def add_to_isr(brokers, root, chroot, partition: int, replica: int) -> None:
    """The leader's ZK-direct ISR expansion (ReplicationUtils.updateLeaderAndIsr), as a caught-up follower joins."""
    current, version = state(root, chroot, partition)
    leader = current["leader"]
    written = KafkaZkClient.for_registration(brokers[leader].registration).update_leader_and_isr(
        "orders", partition, leader, current["leader_epoch"], [*current["isr"], replica],
        controller_epoch=current["controller_epoch"], expected_version=version)
    assert written == version + 1


def leader_and_isr_for(broker, partition: int) -> list:
    return [partitions_of(r)[("orders", partition)] for r in broker.server.requests(ApiKey.LEADER_AND_ISR)
            if ("orders", partition) in partitions_of(r)]


def stop_replicas_for(broker, partition: int) -> list[tuple[bool, int]]:
    return [(s.delete_partition, s.leader_epoch) for r in broker.server.requests(ApiKey.STOP_REPLICA)
            for t in r.topic_states if t.topic_name == "orders" for s in t.partition_states
            if s.partition_index == partition]


def settled(root, chroot) -> bool:
    znode = topic_znode(root, chroot)
    return not znode["adding_replicas"] and not znode["removing_replicas"]


def test_api_reassignment_adds_the_new_replica_then_removes_the_old(brokers, root, chroot):
    """{1,2} -> {2,3}: RS = [2,3,1] with AR [3] / RR [1] until 3 is in the ISR; then leader 1 (not in TRS) hands
    over to 2, broker 1 is stopped and deleted, RS = [2,3]."""
    runner = brokers[0].runner
    assert runner.alter_partition_reassignments({P0: [2, 3]}).result(20) == {P0: None}

    # Phase U and A, done when the answer comes: the topic znode first, then a leader epoch bump (leader, ISR kept).
    znode = topic_znode(root, chroot)
    assert (znode["partitions"], znode["adding_replicas"], znode["removing_replicas"], znode["topic_id"]) == (
        {"0": [2, 3, 1], "1": [2, 1]}, {"0": [3]}, {"0": [1]}, TOPIC_ID)
    assert state(root, chroot, 0) == ({"version": 1, "leader": 1, "leader_epoch": 1, "controller_epoch": 1,
                                       "isr": [1, 2]}, 1)
    # A1: LeaderAndIsr with the full set to the original replicas and (isNew) to the new one; A2: the new replica's
    # NewReplica transition sends it the same once more.
    for broker_id, is_new, count in ((1, False, 1), (2, False, 1), (3, True, 2)):
        wait_for(lambda b=broker_id, n=count: len(leader_and_isr_for(brokers[b], 0)) == n,
                 what=f"LeaderAndIsr to broker {broker_id}")
        for sent in leader_and_isr_for(brokers[broker_id], 0):
            assert (sent.leader, sent.leader_epoch, list(sent.isr), list(sent.replicas), list(sent.adding_replicas),
                    list(sent.removing_replicas), sent.is_new, sent.partition_epoch) == (
                1, 1, [1, 2], [2, 3, 1], [3], [1], is_new, 1), broker_id
    assert runner.list_partition_reassignments().result(20) == {P0: ReplicaAssignment((2, 3, 1), (3,), (1,))}
    assert runner.list_partition_reassignments([P1]).result(20) == {}
    assert brokers[0].runner.controller.ctx.partitions_being_reassigned == {P0}
    for broker in brokers.values():
        broker.server.clear()

    # Broker 3 caught up: leader 1 adds it to the ISR. The controller watches the state node: phase B.
    add_to_isr(brokers, root, chroot, 0, 3)
    wait_for(lambda: settled(root, chroot), what="the reassignment completing")
    assert topic_znode(root, chroot)["partitions"] == {"0": [2, 3], "1": [2, 1]}
    # B3: the Reassign election (first of TRS live and in the ISR), epoch 2; B4: broker 1 leaves the ISR, epoch 3.
    assert state(root, chroot, 0) == ({"version": 1, "leader": 2, "leader_epoch": 3, "controller_epoch": 1,
                                       "isr": [2, 3]}, 4)
    wait_for(lambda: len(stop_replicas_for(brokers[1], 0)) == 2, what="StopReplica twice to broker 1")
    assert stop_replicas_for(brokers[1], 0) == [(False, 2), (True, 3)]
    assert not stop_replicas_for(brokers[2], 0) and not stop_replicas_for(brokers[3], 0)
    wait_for(lambda: len(leader_and_isr_for(brokers[2], 0)) == 2)
    assert [(s.leader, s.leader_epoch, list(s.isr), list(s.replicas), list(s.adding_replicas))
            for s in leader_and_isr_for(brokers[2], 0)] == [(2, 2, [1, 2, 3], [2, 3], []), (2, 3, [2, 3], [2, 3], [])]
    assert runner.list_partition_reassignments().result(20) == {}
    controller = runner.controller
    assert controller.ctx.partitions_being_reassigned == set()
    assert controller.ctx.partition_full_replica_assignment(P0) == ReplicaAssignment((2, 3))


def test_zookeeper_trigger_is_consumed_entry_by_entry_and_watched_again(brokers, root, chroot):
    """/admin/reassign_partitions as kafka-reassign-partitions.sh --zookeeper writes it: a reorder completes at
    once (the leader stays), an unknown partition fails and leaves the node, the node goes when empty, and the
    next one is seen again."""
    node = chroot + REASSIGN
    root.create(node, json.dumps({"version": 1, "partitions": [
        {"topic": "orders", "partition": 1, "replicas": [1, 2]},
        {"topic": "nope", "partition": 0, "replicas": [1]}]}).encode(), makepath=True)
    wait_for(lambda: not root.exists(node), what="the node deleted")
    assert topic_znode(root, chroot)["partitions"] == {"0": [1, 2], "1": [1, 2]}
    # A pure reorder: nothing to add or remove, the leader (2) is in the target and alive: only the epoch moves.
    assert state(root, chroot, 1)[0] == {"version": 1, "leader": 2, "leader_epoch": 1, "controller_epoch": 1,
                                         "isr": [2, 1]}

    # Replication factor 2 -> 3: stays in the node until broker 3 is in the ISR.
    root.create(node, b'{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1,2,3]}]}')
    wait_for(lambda: topic_znode(root, chroot)["adding_replicas"] == {"0": [3]}, what="the reassignment starting")
    assert topic_znode(root, chroot)["partitions"]["0"] == [1, 2, 3] and root.exists(node)
    assert brokers[0].runner.list_partition_reassignments().result(20) == {P0: ReplicaAssignment((1, 2, 3), (3,))}
    add_to_isr(brokers, root, chroot, 0, 3)
    wait_for(lambda: not root.exists(node), what="the node deleted after completion")
    assert settled(root, chroot) and topic_znode(root, chroot)["partitions"]["0"] == [1, 2, 3]
    assert state(root, chroot, 0)[0] == {"version": 1, "leader": 1, "leader_epoch": 2, "controller_epoch": 1,
                                         "isr": [1, 2, 3]}


class HeldController:
    """Holds the controller-event thread inside one event (the answer callback of a ListPartitionReassignments,
    which runs on that thread) until released: what is put meanwhile lines up behind it, in a chosen order."""

    def __init__(self, controller) -> None:
        self.entered, self._released = threading.Event(), threading.Event()
        answer: Future = Future()
        answer.add_done_callback(lambda _: (self.entered.set(), self._released.wait(60)))
        controller.put(ListPartitionReassignments(None, answer))

    def release(self) -> None:
        self._released.set()


def test_a_trigger_written_again_before_the_controller_looks_is_reassigned_once(brokers, root, chroot, monkeypatch):
    """Kafka enqueues ZkPartitionReassignment once as the controller deletes /admin/reassign_partitions (and once
    per creation seen by its watch, which only that event sets again): a node written again before the event
    runs is read once, so phase A bumps the leader epoch once. The event thread is held while the node goes and
    comes back, the interleaving a loaded machine produced (leader epoch 3 where Kafka writes 2)."""
    controller = brokers[0].runner.controller
    put, seen = controller.put, []
    monkeypatch.setattr(controller, "put", lambda event: (seen.append(event), put(event))[1])
    node = chroot + REASSIGN
    held: list[HeldController] = []
    try:
        first = HeldController(controller)
        held.append(first)
        assert first.entered.wait(20)
        root.create(node, b'{"version":1,"partitions":[{"topic":"orders","partition":1,"replicas":[1,2]}]}',
                    makepath=True)
        wait_for(lambda: any(isinstance(e, ZkPartitionReassignment) for e in seen), what="the creation seen")
        second = HeldController(controller)
        held.append(second)
        first.release()
        assert second.entered.wait(20)
        assert not root.exists(node)  # the reorder completed at once, the node went: its event waits behind `second`
        # kazoo runs watch callbacks in order on one thread: once ours for the next creation ran, the controller's for
        # the deletion (if it had one) has run too. (The broker's client is chrooted.)
        created = threading.Event()
        brokers[0].registration.zk_client.exists(REASSIGN, watch=lambda _: created.set())
        root.create(node, b'{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1,2,3]}]}')
        assert created.wait(20)
    finally:
        for each in held:  # a failure above must not leave the controller's thread held
            each.release()
    # A round trip on the event thread: every event put before it has run.
    assert brokers[0].runner.list_partition_reassignments().result(20) == {P0: ReplicaAssignment((1, 2, 3), (3,))}
    assert state(root, chroot, 0)[0]["leader_epoch"] == 1  # phase A, once
    wait_for(lambda: len(leader_and_isr_for(brokers[3], 0)) == 2, what="A1 and A2's LeaderAndIsr to broker 3")
    assert [s.leader_epoch for s in leader_and_isr_for(brokers[3], 0)] == [1, 1]
    add_to_isr(brokers, root, chroot, 0, 3)
    wait_for(lambda: not root.exists(node), what="the node deleted after completion")
    assert state(root, chroot, 0)[0] == {"version": 1, "leader": 1, "leader_epoch": 2, "controller_epoch": 1,
                                         "isr": [1, 2, 3]}


def test_validation_supersede_and_cancel(brokers, root, chroot):
    runner = brokers[0].runner
    with pytest.raises(ControllerMovedError):
        brokers[1].runner.alter_partition_reassignments({P0: [1, 2]}).result(20)
    with pytest.raises(ControllerMovedError):
        brokers[1].runner.list_partition_reassignments().result(20)
    outcome = runner.alter_partition_reassignments({
        P0: [1, 1], P1: [2, 7], TopicPartition("orders", 5): [1], TopicPartition("nope", 0): None,
        TopicPartition("orders", 9): [], TopicPartition("orders", 8): [-1, 2]}).result(20)
    assert {str(tp): type(e) for tp, e in outcome.items()} == {
        "orders-0": InvalidReplicaAssignmentError,  # duplicates
        "orders-1": InvalidReplicaAssignmentError,  # broker 7 is not alive
        "orders-5": UnknownTopicOrPartitionError,
        "nope-0": NoReassignmentInProgressError,  # cancelling nothing
        "orders-9": InvalidReplicaAssignmentError,  # empty
        "orders-8": InvalidReplicaAssignmentError}  # negative id
    assert topic_znode(root, chroot)["partitions"] == {"0": [1, 2], "1": [2, 1]}
    assert not root.exists(chroot + REASSIGN)

    assert runner.alter_partition_reassignments({P0: [2, 3]}).result(20) == {P0: None}
    # The latest request wins: {2,3} -> {2,0} before 3 caught up. Broker 3 is not needed any more: stopped, deleted.
    assert runner.alter_partition_reassignments({P0: [2, 0]}).result(20) == {P0: None}
    znode = topic_znode(root, chroot)
    assert (znode["partitions"]["0"], znode["adding_replicas"], znode["removing_replicas"]) == (
        [2, 0, 1], {"0": [0]}, {"0": [1]})
    wait_for(lambda: [d for d, _ in stop_replicas_for(brokers[3], 0)] == [False, True], what="broker 3 stopped")
    # Cancel: back to the original replicas (in the order RS kept them: Kafka cannot restore [1, 2]).
    assert runner.alter_partition_reassignments({P0: None}).result(20) == {P0: None}
    znode = topic_znode(root, chroot)
    assert (znode["partitions"]["0"], znode["adding_replicas"], znode["removing_replicas"]) == ([2, 1], {}, {})
    wait_for(lambda: [d for d, _ in stop_replicas_for(brokers[0], 0)] == [False, True], what="broker 0 stopped")
    assert state(root, chroot, 0)[0]["leader"] == 1 and state(root, chroot, 0)[0]["isr"] == [1, 2]
    assert runner.list_partition_reassignments().result(20) == {}
    [again] = runner.alter_partition_reassignments({P0: None}).result(20).values()
    assert isinstance(again, NoReassignmentInProgressError)


def test_api_request_supersedes_the_zookeeper_entry(brokers, root, chroot):
    node = chroot + REASSIGN
    root.create(node, b'{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[1,2,3]},'
                      b'{"topic":"orders","partition":1,"replicas":[2,1,3]}]}', makepath=True)
    wait_for(lambda: topic_znode(root, chroot)["adding_replicas"] == {"0": [3], "1": [3]})
    assert brokers[0].runner.alter_partition_reassignments({P0: None}).result(20) == {P0: None}
    assert read_json(root, node)[0] == {"version": 1, "partitions": [
        {"topic": "orders", "partition": 1, "replicas": [2, 1, 3]}]}
    assert topic_znode(root, chroot)["adding_replicas"] == {"1": [3]}


def test_a_new_controller_resumes_the_reassignment(brokers, root, chroot):
    assert brokers[0].runner.alter_partition_reassignments({P0: [2, 3]}).result(20) == {P0: None}
    brokers[0].stop()
    wait_for(lambda: any(b.runner.is_active for b in brokers.values() if not b.stopped), what="a new controller")
    [new] = [b for b in brokers.values() if not b.stopped and b.runner.is_active]
    # Failover: the topic znode says {1,2} -> {2,3} is under way; phase A runs again (another epoch bump).
    wait_for(lambda: state(root, chroot, 0)[0]["controller_epoch"] == 2, what="the new controller's epoch bump")
    assert new.runner.list_partition_reassignments().result(20) == {P0: ReplicaAssignment((2, 3, 1), (3,), (1,))}
    add_to_isr(brokers, root, chroot, 0, 3)
    wait_for(lambda: settled(root, chroot), what="the new controller completing the reassignment")
    assert topic_znode(root, chroot)["partitions"]["0"] == [2, 3]
    final = state(root, chroot, 0)[0]
    assert (final["leader"], final["isr"], final["controller_epoch"]) == (2, [2, 3], 2)
