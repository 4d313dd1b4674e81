"""Preferred replica election, unclean election on request and auto rebalance, in process: the controller
against the session's real ZooKeeper and recording brokers (tests/controller_support.py), driven through
ControllerRunner.elect_leaders (ElectLeaders), /admin/preferred_replica_election and the rebalance timer."""

from __future__ import annotations

import logging

import pytest

from controller_support import (
    Broker,
    live_ids,
    partitions_of,
    read_json,
    start_broker,
    wait_for,
    wait_for_metadata_delivered,
)
from kcli.broker.controller import elections
from kcli.broker.controller.elections import ElectionType
from kcli.broker.errors import (
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from kcli.protocol import ApiKey
from kcli.zk.kafka_zk_client import ElectionInProgressError, KafkaZkClient
from kcli.zk.models import TopicPartition

pytestmark = pytest.mark.zookeeper

ORDERS = {0: [1, 2], 1: [2, 1], 2: [0, 2]}  # broker 1 is the preferred leader of p0 only
P0, P1, P2 = (TopicPartition("orders", p) for p in range(3))
NO_AUTO = {"auto.leader.rebalance.enable": False}
ELECTION_NODE = "/admin/preferred_replica_election"


@pytest.fixture
def cluster(zookeeper, chroot):
    """start(broker_id, config) -> Broker; the brokers stop at the end, the controller last."""
    brokers: dict[int, Broker] = {}

    def start(broker_id: int, config: dict) -> Broker:
        brokers[broker_id] = start_broker(zookeeper.connect + chroot, broker_id, config)
        return brokers[broker_id]

    yield start, brokers
    for broker in sorted(brokers.values(), key=lambda b: b.runner.is_active):  # no failovers
        broker.stop()


def state(root, chroot, partition: int, topic: str = "orders"):
    return read_json(root, f"{chroot}/brokers/topics/{topic}/partitions/{partition}/state")


def start_three(cluster, config: dict) -> dict[int, Broker]:
    start, brokers = cluster
    start(0, config)
    wait_for(lambda: brokers[0].runner.is_active, what="broker 0 controlling")
    start(1, config)
    start(2, config)
    for broker in brokers.values():
        wait_for(lambda b=broker: any(live_ids(u) == {0, 1, 2} for u in b.server.requests(ApiKey.UPDATE_METADATA)),
                 what=f"broker {broker.id} learning the live brokers")
    return brokers


def bounce_preferred_leader(cluster, root, chroot, config: dict, *, rejoin: bool = True) -> dict[int, Broker]:
    """orders created; broker 1 (preferred leader of p0) stops, so broker 2 leads p0, and comes back; with
    ``rejoin``, broker 2 (the leader) puts it back in p0's ISR on the ZK-direct path, as a caught-up follower."""
    start, brokers = cluster
    start_three(cluster, config)
    KafkaZkClient.for_registration(brokers[2].registration).create_topic("orders", ORDERS)
    wait_for(lambda: all(root.exists(f"{chroot}/brokers/topics/orders/partitions/{p}/state") for p in ORDERS))
    brokers[1].stop()
    wait_for(lambda: state(root, chroot, 0)[0]["leader"] == 2, what="broker 2 leading p0")
    controller = brokers[0].runner.controller
    start(1, config)
    wait_for(lambda: 1 in controller.ctx.live_broker_ids, what="broker 1 back")
    if rejoin:
        current, version = state(root, chroot, 0)
        leader_zk = KafkaZkClient.for_registration(brokers[2].registration)
        assert leader_zk.update_leader_and_isr("orders", 0, 2, current["leader_epoch"], [2, 1],
                                               controller_epoch=current["controller_epoch"],
                                               expected_version=version) == version + 1
        leader_zk.propagate_isr_changes([("orders", 0)])
        wait_for(lambda: controller.ctx.partition_leader_and_isr(P0).isr == (2, 1), what="p0's ISR [2, 1]")
    # Broker 1's restart sent it LeaderAndIsr: cleared before it arrives, it would count as the next step's.
    wait_for_metadata_delivered(brokers.values(), controller, [TopicPartition("orders", p) for p in ORDERS])
    for broker in brokers.values():
        broker.server.clear()
    return brokers


def elect(broker: Broker, partitions, election_type=ElectionType.PREFERRED) -> dict:
    return broker.runner.elect_leaders(set(partitions), election_type).result(timeout=20)


def test_elect_leaders_preferred(cluster, root, chroot):
    brokers = bounce_preferred_leader(cluster, root, chroot, NO_AUTO, rejoin=False)
    # Broker 1 is live but not in the ISR: the preferred replica cannot lead yet.
    [error] = elect(brokers[0], [P0]).values()
    assert isinstance(error, PreferredLeaderNotAvailableError)
    before, _ = state(root, chroot, 0)

    current, version = state(root, chroot, 0)
    leader_zk = KafkaZkClient.for_registration(brokers[2].registration)
    leader_zk.update_leader_and_isr("orders", 0, 2, current["leader_epoch"], [2, 1],
                                    controller_epoch=current["controller_epoch"], expected_version=version)
    leader_zk.propagate_isr_changes([("orders", 0)])
    controller = brokers[0].runner.controller
    wait_for(lambda: controller.ctx.partition_leader_and_isr(P0).isr == (2, 1), what="p0's ISR [2, 1]")
    for broker in brokers.values():
        broker.server.clear()

    results = elect(brokers[0], [P0, P1, TopicPartition("orders", 9), TopicPartition("nope", 0)])
    assert results[P0] == 1
    assert isinstance(results[P1], ElectionNotNeededError)  # broker 2 is p1's preferred leader and leads it
    assert isinstance(results[TopicPartition("orders", 9)], UnknownTopicOrPartitionError)
    assert isinstance(results[TopicPartition("nope", 0)], UnknownTopicOrPartitionError)
    # The Preferred strategy: leader = the first replica, ISR unchanged, leader epoch + 1.
    assert state(root, chroot, 0)[0] == {"version": 1, "leader": 1, "leader_epoch": before["leader_epoch"] + 1,
                                         "controller_epoch": 1, "isr": [2, 1]}
    # LeaderAndIsr to the whole assignment, then UpdateMetadata to every broker.
    for broker in brokers.values():
        wait_for(lambda b=broker: any(partitions_of(u).get(("orders", 0)) is not None
                                      and partitions_of(u)[("orders", 0)].leader == 1
                                      for u in b.server.requests(ApiKey.UPDATE_METADATA)),
                 what=f"broker {broker.id} learning p0's new leader")
        sent = [partitions_of(r)[("orders", 0)] for r in broker.server.requests(ApiKey.LEADER_AND_ISR)
                if ("orders", 0) in partitions_of(r)]
        assert [(s.leader, list(s.isr), s.is_new) for s in sent] == ([(1, [2, 1], False)] if broker.id in (1, 2)
                                                                     else [])
    # Asked again: nothing to do. Asked of a broker that is not the controller: NOT_CONTROLLER.
    assert isinstance(elect(brokers[0], [P0])[P0], ElectionNotNeededError)
    assert {tp: type(e) for tp, e in elect(brokers[1], [P0, P2]).items()} == {P0: NotControllerError,
                                                                               P2: NotControllerError}
    assert not root.exists(chroot + ELECTION_NODE)  # an admin election leaves the ZooKeeper trigger alone


def test_zookeeper_trigger(cluster, root, chroot):
    brokers = bounce_preferred_leader(cluster, root, chroot, NO_AUTO)
    writer = KafkaZkClient.for_registration(brokers[1].registration)
    writer.create_preferred_replica_election([("orders", 0), ("orders", 1), ("nope", 3)])
    # The controller elects, then deletes the node (the unknown partition is skipped, p1 needs nothing).
    wait_for(lambda: not root.exists(chroot + ELECTION_NODE), what="the election node deleted")
    assert state(root, chroot, 0)[0]["leader"] == 1
    assert state(root, chroot, 1)[0]["leader"] == 2

    # The exists watch is armed again: a second request (nothing to do) and a malformed one also go.
    writer.create_preferred_replica_election([("orders", 0)])
    wait_for(lambda: not root.exists(chroot + ELECTION_NODE), what="the second node deleted")
    root.create(chroot + ELECTION_NODE, b"not json")
    wait_for(lambda: not root.exists(chroot + ELECTION_NODE), what="the malformed node deleted")
    assert brokers[0].runner.is_active
    assert state(root, chroot, 0)[0]["leader"] == 1


def test_zookeeper_trigger_pending_at_failover(cluster, root, chroot):
    """A node left by a controller that died is taken by the next one when it fails over."""
    brokers = bounce_preferred_leader(cluster, root, chroot, NO_AUTO)
    brokers[0].runner.controller.zk.unregister_all_handlers()  # this controller no longer sees the node
    writer = KafkaZkClient.for_registration(brokers[1].registration)
    writer.create_preferred_replica_election([("orders", 0)])
    with pytest.raises(ElectionInProgressError):  # as the legacy tool: one request at a time
        writer.create_preferred_replica_election([("orders", 1)])
    brokers[0].stop()
    wait_for(lambda: not root.exists(chroot + ELECTION_NODE), what="the new controller taking the node")
    assert state(root, chroot, 0)[0]["leader"] == 1
    assert brokers[1].runner.is_active or brokers[2].runner.is_active


def test_unclean_election_on_request(cluster, root, chroot, caplog):
    start, brokers = cluster
    start_three(cluster, NO_AUTO)
    zk = KafkaZkClient.for_registration(brokers[1].registration)
    zk.create_topic("u", {0: [1, 2]})
    zk.create_topic("gone", {0: [1]})
    wait_for(lambda: root.exists(f"{chroot}/brokers/topics/u/partitions/0/state"))
    wait_for(lambda: root.exists(f"{chroot}/brokers/topics/gone/partitions/0/state"))
    assert zk.update_leader_and_isr("u", 0, 1, 0, [1], controller_epoch=1, expected_version=0) == 1  # 2 fell behind
    brokers[1].stop()
    wait_for(lambda: state(root, chroot, 0, "u")[0]["leader"] == -1, what="u-0 without a leader")
    wait_for(lambda: state(root, chroot, 0, "gone")[0]["leader"] == -1, what="gone-0 without a leader")
    u0, gone0 = TopicPartition("u", 0), TopicPartition("gone", 0)

    assert isinstance(elect(brokers[0], [u0])[u0], PreferredLeaderNotAvailableError)
    with caplog.at_level(logging.WARNING, logger="kcli.controller"):
        results = elect(brokers[0], [u0, gone0], ElectionType.UNCLEAN)
    assert results[u0] == 2
    assert isinstance(results[gone0], EligibleLeadersNotAvailableError)  # no live replica at all
    # The only live replica, out of sync, leads with an ISR of itself; the controller says it may lose data.
    assert state(root, chroot, 0, "u")[0] == {"version": 1, "leader": 2, "leader_epoch": 2, "controller_epoch": 1,
                                              "isr": [2]}
    assert any("unclean leader election for u-0" in r.getMessage() and "lost" in r.getMessage()
               for r in caplog.records)
    # The leader is alive now: an unclean election is not needed.
    assert isinstance(elect(brokers[0], [u0], ElectionType.UNCLEAN)[u0], ElectionNotNeededError)


def test_auto_rebalance_moves_leadership_back(cluster, root, chroot):
    config = {"leader.imbalance.check.interval.seconds": 1, "leader.imbalance.per.broker.percentage": 10}
    brokers = bounce_preferred_leader(cluster, root, chroot, config)
    controller = brokers[0].runner.controller
    # Broker 1 prefers one partition and leads none of it: 100% > 10%. The first check runs 5 s after
    # failover, then every second.
    wait_for(lambda: state(root, chroot, 0)[0]["leader"] == 1, timeout=15, what="broker 1 leading p0 again")
    assert state(root, chroot, 0)[0]["isr"] == [2, 1]
    assert not root.exists(chroot + ELECTION_NODE)
    assert controller._auto_rebalance_timer is not None
    brokers[0].stop()
    assert controller._auto_rebalance_timer is None  # resigning stops the timer


def test_auto_rebalance_leaves_a_balanced_enough_broker(cluster, root, chroot):
    """With the threshold at 100% no ratio is above it: nothing moves."""
    config = {"leader.imbalance.check.interval.seconds": 1, "leader.imbalance.per.broker.percentage": 100}
    brokers = bounce_preferred_leader(cluster, root, chroot, config)
    controller = brokers[0].runner.controller
    checks: list[int] = []
    original = controller._check_and_trigger_auto_leader_rebalance
    controller._check_and_trigger_auto_leader_rebalance = lambda: (checks.append(1), original())[1]
    wait_for(lambda: len(checks) >= 2, timeout=15, what="two rebalance checks")
    assert state(root, chroot, 0)[0]["leader"] == 2


# -- the per-broker imbalance (checkAndTriggerAutoLeaderRebalance's ratio) ----------------------------------
def test_leader_imbalance_ratio():
    t = [TopicPartition("t", p) for p in range(5)]
    assignments = {t[0]: [1, 2], t[1]: [1, 2], t[2]: [1, 3], t[3]: [2, 1], t[4]: [1, 2]}
    # t4 has no state node yet: it counts in the denominator only.
    leaders = {t[0]: 2, t[1]: 1, t[2]: 3, t[3]: 2}
    by_broker = {i.broker_id: i for i in elections.leader_imbalance(assignments, leaders)}
    assert set(by_broker) == {1, 2}
    assert (by_broker[1].preferred, by_broker[1].not_led, by_broker[1].ratio) == (4, (t[0], t[2]), 0.5)
    assert (by_broker[2].preferred, by_broker[2].not_led, by_broker[2].ratio) == (1, (), 0.0)
    assert elections.leader_imbalance({}, {}) == []
