"""The controller's pure parts: election algorithms, ISR removal, broker diff, state tables (Kafka's
PartitionLeaderElectionAlgorithmsTest and the rules of kafka-cluster.md section 9 items 10-11)."""

from __future__ import annotations

import pytest

from kcli.broker.controller import elections
from kcli.broker.controller.context import (
    VALID_PREVIOUS_PARTITION_STATES,
    VALID_PREVIOUS_REPLICA_STATES,
    ControllerContext,
    PartitionState,
    ReplicaAssignment,
    ReplicaState,
)
from kcli.zk.kafka_zk_client import BrokerAndEpoch
from kcli.zk.models import RECOVERING, LeaderAndIsr, TopicPartition, parse_broker

TP = TopicPartition("orders", 0)


def context(assignment, live, shutting_down=()):
    ctx = ControllerContext()
    ctx.set_live_brokers(BrokerAndEpoch(parse_broker("/brokers/ids/x", b'{"version":5,"endpoints":[]}', b), 10 + b)
                         for b in live)
    ctx.shutting_down_broker_ids.update(shutting_down)
    ctx.update_partition_full_replica_assignment(TP, ReplicaAssignment(tuple(assignment)))
    return ctx


# -- PartitionLeaderElectionAlgorithms ----------------------------------------------------------------------
def test_offline_election_follows_the_assignment_order_not_the_isr_order():
    assert elections.offline_partition_leader_election([2, 4], [4, 2], {2, 4}, False) == 2
    assert elections.offline_partition_leader_election([2, 4], [4], {2, 4}, False) == 4  # 2 is not in the ISR
    assert elections.offline_partition_leader_election([2, 4], [2], {4}, False) is None  # ISR all dead, clean
    assert elections.offline_partition_leader_election([2, 4], [2], {4}, True) == 4  # unclean: first live
    assert elections.offline_partition_leader_election([2, 4], [2], set(), True) is None


def test_reassign_election_uses_the_target_replicas():
    assert elections.reassign_partition_leader_election([2, 4], [4, 2], {2, 4}) == 2
    assert elections.reassign_partition_leader_election([2, 4], [4, 2], {4}) == 4
    assert elections.reassign_partition_leader_election([2, 4], [1], {2, 4}) is None


def test_preferred_election_takes_only_the_first_replica_live_and_in_sync():
    assert elections.preferred_replica_partition_leader_election([2, 4], [2, 4], {2, 4}) == 2
    assert elections.preferred_replica_partition_leader_election([2, 4], [4], {2, 4}) is None
    assert elections.preferred_replica_partition_leader_election([2, 4], [2, 4], {4}) is None


def test_controlled_shutdown_election_skips_stopping_brokers():
    assert elections.controlled_shutdown_partition_leader_election([2, 4], [2, 4], {2, 4}, {2}) == 4
    # Shutting down the whole ISR gives no leader.
    assert elections.controlled_shutdown_partition_leader_election([2, 4], [2, 4], {2, 4}, {2, 4}) is None
    assert elections.controlled_shutdown_partition_leader_election([2, 4, 6], [2, 4], {2, 4, 6}, {2, 4}) is None


# -- Election with the context ------------------------------------------------------------------------------
def test_offline_leader_keeps_the_live_isr_and_bumps_the_epoch():
    ctx = context([1, 2, 3], live=[2, 3])
    current = LeaderAndIsr(1, 5, (1, 3, 2), partition_epoch=7)
    [result] = elections.leader_for_offline(ctx, False, [(TP, current, False)])
    assert result.leader_and_isr == LeaderAndIsr(2, 6, (3, 2), partition_epoch=7)  # ISR order kept, 1 dropped
    assert result.live_replicas == (2, 3)


def test_unclean_offline_leader_gets_an_isr_of_itself():
    ctx = context([1, 2, 3], live=[3])
    current = LeaderAndIsr(1, 5, (1,))
    [clean] = elections.leader_for_offline(ctx, False, [(TP, current, False)])
    assert clean.leader_and_isr is None
    [unclean] = elections.leader_for_offline(ctx, False, [(TP, current, True)])
    assert unclean.leader_and_isr == LeaderAndIsr(3, 6, (3,))
    [recovering] = elections.leader_for_offline(ctx, True, [(TP, current, True)])
    assert recovering.leader_and_isr == LeaderAndIsr(3, 6, (3,), RECOVERING)


def test_controlled_shutdown_leader_drops_the_stopping_broker_from_the_isr():
    ctx = context([1, 2, 3], live=[1, 2, 3], shutting_down=[1])
    [result] = elections.leader_for_controlled_shutdown(ctx, [(TP, LeaderAndIsr(1, 3, (1, 2, 3)))])
    assert result.leader_and_isr == LeaderAndIsr(2, 4, (2, 3))
    assert result.live_replicas == (1, 2, 3)  # the stopping broker learns it follows now
    ctx = context([1, 2], live=[1, 2], shutting_down=[1, 2])
    [none] = elections.leader_for_controlled_shutdown(ctx, [(TP, LeaderAndIsr(1, 3, (1, 2)))])
    assert none.leader_and_isr is None


def test_preferred_and_reassign_keep_the_isr():
    ctx = context([2, 1], live=[1, 2])
    [preferred] = elections.leader_for_preferred_replica(ctx, [(TP, LeaderAndIsr(1, 3, (1, 2)))])
    assert preferred.leader_and_isr == LeaderAndIsr(2, 4, (1, 2)) and preferred.live_replicas == (2, 1)
    ctx.update_partition_full_replica_assignment(TP, ReplicaAssignment((1, 2), (), (2,)))
    [reassign] = elections.leader_for_reassign(ctx, [(TP, LeaderAndIsr(2, 3, (1, 2)))])
    assert reassign.leader_and_isr == LeaderAndIsr(1, 4, (1, 2)) and reassign.live_replicas == (1,)


def test_whole_isr_offline_leaves_no_leader_and_the_last_member():
    """Broker 1 then broker 2 fail, unclean off: leader 2 with ISR [2], then leader -1, epoch+1, ISR [2]."""
    ctx = context([1, 2], live=[2])
    state = LeaderAndIsr(1, 0, (1, 2))
    [first] = elections.leader_for_offline(ctx, False, [(TP, state, False)])
    assert first.leader_and_isr == LeaderAndIsr(2, 1, (2,))
    ctx = context([1, 2], live=[])
    [second] = elections.leader_for_offline(ctx, False, [(TP, first.leader_and_isr, False)])
    assert second.leader_and_isr is None
    assert elections.remove_replica_from_isr(first.leader_and_isr, 2) == LeaderAndIsr(-1, 2, (2,))


def test_isr_removal_bumps_the_epoch_even_with_the_same_leader():
    assert elections.remove_replica_from_isr(LeaderAndIsr(1, 4, (1, 2, 3)), 3) == LeaderAndIsr(1, 5, (1, 2))
    assert elections.remove_replica_from_isr(LeaderAndIsr(1, 4, (1, 2)), 1) == LeaderAndIsr(-1, 5, (2,))


# -- broker changes ----------------------------------------------------------------------------------------
def test_broker_diff_finds_new_dead_and_bounced_brokers():
    changes = elections.diff_brokers({1: 100, 2: 250, 4: 300}, {1: 100, 2: 200, 3: 150})
    assert (changes.new, changes.dead, changes.bounced) == ((4,), (3,), (2,))
    assert elections.diff_brokers({1: 100}, {1: 100}) == elections.BrokerChanges((), (), ())


# -- the state tables ----------------------------------------------------------------------------------------
def test_state_tables_are_kafkas():
    P = PartitionState
    assert {t: set(p) for t, p in VALID_PREVIOUS_PARTITION_STATES.items()} == {
        P.NEW: {P.NON_EXISTENT}, P.ONLINE: {P.NEW, P.ONLINE, P.OFFLINE}, P.OFFLINE: {P.NEW, P.ONLINE, P.OFFLINE},
        P.NON_EXISTENT: {P.OFFLINE}}
    R = ReplicaState
    assert VALID_PREVIOUS_REPLICA_STATES[R.DELETION_STARTED] == {R.OFFLINE}
    assert VALID_PREVIOUS_REPLICA_STATES[R.NON_EXISTENT] == {R.DELETION_SUCCESSFUL}
    assert VALID_PREVIOUS_REPLICA_STATES[R.ONLINE] == {R.NEW, R.ONLINE, R.OFFLINE, R.DELETION_INELIGIBLE}
    assert [int(s) for s in P] == [0, 1, 2, 3] and [int(s) for s in R] == [1, 2, 3, 4, 5, 6, 7]


def test_reassignment_arithmetic():
    """{1,2,3} -> {4,5,6}: RS = [4,5,6,1,2,3], AR = [4,5,6], RR = [1,2,3] (kafka-cluster.md 2.7)."""
    moving = ReplicaAssignment((1, 2, 3)).reassign_to([4, 5, 6])
    assert moving == ReplicaAssignment((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    assert moving.origin_replicas == (1, 2, 3) and moving.target_replicas == (4, 5, 6)
    assert moving.remove_replica(1) == ReplicaAssignment((4, 5, 6, 2, 3), (4, 5, 6), (2, 3))


# -- controlled shutdown's checks (no ZooKeeper reached: nothing to move) ----------------------------------------
@pytest.fixture
def controller():
    from kcli.broker.controller import KafkaController

    controller = KafkaController(0, zk=None)  # type: ignore[arg-type]
    controller.ctx.set_live_brokers([BrokerAndEpoch(parse_broker("/b", b'{"version":5,"endpoints":[]}', 1), 500)])
    return controller


def test_controlled_shutdown_checks(controller):
    from kcli.broker.controller import BrokerNotAvailableError, StaleBrokerEpochError
    from kcli.zk.kafka_zk_client import ControllerMovedError

    with pytest.raises(ControllerMovedError):
        controller._do_controlled_shutdown(1, 500)
    controller.active = True
    with pytest.raises(StaleBrokerEpochError):
        controller._do_controlled_shutdown(1, 499)
    with pytest.raises(BrokerNotAvailableError):
        controller._do_controlled_shutdown(2, 500)
    assert controller._do_controlled_shutdown(1, 501) == set()  # a larger epoch is accepted
    assert controller.ctx.shutting_down_broker_ids == {1}
    assert controller.ctx.live_broker_ids == set()  # it can no longer be elected
