"""Partition leader election, as pure functions (Kafka's PartitionLeaderElectionAlgorithms and Election).

The order is always the assignment order, never the ISR's. Every election bumps the leader epoch. "live" means
registered, not shutting down, and not on an offline log dir (``ControllerContext.is_replica_online``).
Also here: the ISR removal of the OfflineReplica transition and the broker-change diff, pure as well, and
the election types, triggers and per-broker leader imbalance of preferred replica elections.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum

from kcli.broker.controller.context import ControllerContext
from kcli.zk.models import NO_LEADER, LeaderAndIsr, TopicPartition


# -- strategies ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OfflinePartitionLeaderElectionStrategy:
    """New and offline partitions, broker failures; unclean only if allowed (admin UNCLEAN or topic config)."""

    allow_unclean: bool = False


@dataclass(frozen=True)
class ReassignPartitionLeaderElectionStrategy:
    pass


@dataclass(frozen=True)
class PreferredReplicaPartitionLeaderElectionStrategy:
    pass


@dataclass(frozen=True)
class ControlledShutdownPartitionLeaderElectionStrategy:
    pass


PartitionLeaderElectionStrategy = (OfflinePartitionLeaderElectionStrategy | ReassignPartitionLeaderElectionStrategy
                                   | PreferredReplicaPartitionLeaderElectionStrategy
                                   | ControlledShutdownPartitionLeaderElectionStrategy)


# -- the algorithms ------------------------------------------------------------------------------------------------
def offline_partition_leader_election(assignment: Sequence[int], isr: Collection[int], live_replicas: Collection[int],
                                      unclean_leader_election_enabled: bool) -> int | None:
    """The first live ISR member in assignment order; failing that, if unclean is allowed, the first live one."""
    for replica in assignment:
        if replica in live_replicas and replica in isr:
            return replica
    if unclean_leader_election_enabled:
        return next((r for r in assignment if r in live_replicas), None)
    return None


def reassign_partition_leader_election(reassignment: Sequence[int], isr: Collection[int],
                                       live_replicas: Collection[int]) -> int | None:
    return next((r for r in reassignment if r in live_replicas and r in isr), None)


def preferred_replica_partition_leader_election(assignment: Sequence[int], isr: Collection[int],
                                                live_replicas: Collection[int]) -> int | None:
    """Only the preferred (first) replica, and only if it is live and in the ISR."""
    if assignment and assignment[0] in live_replicas and assignment[0] in isr:
        return assignment[0]
    return None


def controlled_shutdown_partition_leader_election(assignment: Sequence[int], isr: Collection[int],
                                                  live_replicas: Collection[int],
                                                  shutting_down_brokers: Collection[int]) -> int | None:
    return next((r for r in assignment if r in live_replicas and r in isr and r not in shutting_down_brokers), None)


# -- per partition, with the new state and the LeaderAndIsr recipients (Election.scala) -------------------------
@dataclass(frozen=True)
class ElectionResult:
    topic_partition: TopicPartition
    leader_and_isr: LeaderAndIsr | None  # None: no eligible leader
    live_replicas: tuple[int, ...]  # who gets the LeaderAndIsr


def leader_for_offline(ctx: ControllerContext, is_leader_recovery_supported: bool,
                       partitions: Sequence[tuple[TopicPartition, LeaderAndIsr | None, bool]]) -> list[ElectionResult]:
    """``partitions``: (partition, its current leadership, unclean election allowed for it)."""
    results = []
    for tp, current, unclean in partitions:
        assignment = ctx.partition_replica_assignment(tp)
        live = tuple(r for r in assignment if ctx.is_replica_online(r, tp))
        new: LeaderAndIsr | None = None
        if current is not None:
            leader = offline_partition_leader_election(assignment, current.isr, live, unclean)
            if leader is not None:
                if leader in current.isr:
                    new = current.new_leader_and_isr(leader, [r for r in current.isr if ctx.is_replica_online(r, tp)])
                elif is_leader_recovery_supported:  # unclean: the new leader was not in the ISR (KIP-704)
                    new = current.new_recovering_leader_and_isr(leader, [leader])
                else:
                    new = current.new_leader_and_isr(leader, [leader])
        results.append(ElectionResult(tp, new, live))
    return results


def leader_for_reassign(ctx: ControllerContext,
                        partitions: Sequence[tuple[TopicPartition, LeaderAndIsr]]) -> list[ElectionResult]:
    results = []
    for tp, current in partitions:
        target = ctx.partition_full_replica_assignment(tp).target_replicas
        live = [r for r in target if ctx.is_replica_online(r, tp)]
        leader = reassign_partition_leader_election(target, current.isr, live)
        results.append(ElectionResult(tp, current.new_leader(leader) if leader is not None else None, target))
    return results


def leader_for_preferred_replica(ctx: ControllerContext,
                                 partitions: Sequence[tuple[TopicPartition, LeaderAndIsr]]) -> list[ElectionResult]:
    results = []
    for tp, current in partitions:
        assignment = ctx.partition_replica_assignment(tp)
        live = [r for r in assignment if ctx.is_replica_online(r, tp)]
        leader = preferred_replica_partition_leader_election(assignment, current.isr, live)
        results.append(ElectionResult(tp, current.new_leader(leader) if leader is not None else None, assignment))
    return results


def leader_for_controlled_shutdown(ctx: ControllerContext,
                                   partitions: Sequence[tuple[TopicPartition, LeaderAndIsr]]) -> list[ElectionResult]:
    """The stopping brokers leave the ISR; they still get the LeaderAndIsr, so they learn they follow."""
    shutting_down = set(ctx.shutting_down_broker_ids)
    results = []
    for tp, current in partitions:
        assignment = ctx.partition_replica_assignment(tp)
        live = tuple(r for r in assignment if ctx.is_replica_online(r, tp, include_shutting_down_brokers=True))
        leader = controlled_shutdown_partition_leader_election(assignment, current.isr, live, shutting_down)
        new_isr = [r for r in current.isr if r not in shutting_down]
        results.append(ElectionResult(tp, current.new_leader_and_isr(leader, new_isr) if leader is not None else None,
                                      live))
    return results


# -- the OfflineReplica transition's ISR removal (ReplicaStateMachine.doRemoveReplicasFromIsr) -----------------------
def remove_replica_from_isr(current: LeaderAndIsr, replica: int) -> LeaderAndIsr:
    """Leader -1 if it was the leader; the ISR loses it unless it is the last member (an ISR is never emptied,
    so the last member is the one a clean election waits for); the leader epoch goes up in any case."""
    leader = NO_LEADER if current.leader == replica else current.leader
    isr = current.isr if len(current.isr) == 1 else tuple(r for r in current.isr if r != replica)
    return current.new_leader_and_isr(leader, isr)


# -- the broker-change diff (KafkaController.processBrokerChange) ----------------------------------------------------
@dataclass(frozen=True)
class BrokerChanges:
    new: tuple[int, ...]
    dead: tuple[int, ...]
    bounced: tuple[int, ...]  # same id, larger broker epoch (czxid): a failure then a startup


def diff_brokers(registered: Mapping[int, int], known: Mapping[int, int]) -> BrokerChanges:
    """``registered``: id -> epoch now in /brokers/ids; ``known``: the controller's live-or-shutting-down ones."""
    return BrokerChanges(
        new=tuple(sorted(set(registered) - set(known))),
        dead=tuple(sorted(set(known) - set(registered))),
        bounced=tuple(sorted(b for b in set(registered) & set(known) if registered[b] > known[b])))


# -- replica leader elections on request: ElectLeaders, /admin/preferred_replica_election, auto rebalance ----------
class ElectionType(IntEnum):
    """ElectLeaders' ElectionType (KIP-460): the preferred replica, or any live replica if no ISR member is."""

    PREFERRED = 0
    UNCLEAN = 1


class ElectionTrigger(Enum):
    """Who asked (Kafka's ElectionTrigger): only an admin's UNCLEAN election may elect out of sync."""

    ZK = "ZkTriggered"  # /admin/preferred_replica_election
    AUTO = "AutoTriggered"  # auto.leader.rebalance.enable's periodic check
    ADMIN = "AdminClientTriggered"  # ElectLeaders

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class LeaderImbalance:
    """One broker's share of the partitions it is the preferred replica of, led by someone else."""

    broker_id: int
    preferred: int  # partitions whose first assigned replica is this broker
    not_led: tuple[TopicPartition, ...]  # ... that have a leader other than it (no state node: not counted)

    @property
    def ratio(self) -> float:
        return len(self.not_led) / self.preferred if self.preferred else 0.0


def leader_imbalance(assignments: Mapping[TopicPartition, Sequence[int]],
                     leaders: Mapping[TopicPartition, int]) -> list[LeaderImbalance]:
    """Per preferred broker, in broker order (checkAndTriggerAutoLeaderRebalance's grouping by
    ``assignment.head``); ``leaders`` holds the partitions that have leadership information."""
    by_broker: dict[int, list[TopicPartition]] = {}
    for tp, assignment in assignments.items():
        if assignment:
            by_broker.setdefault(assignment[0], []).append(tp)
    return [LeaderImbalance(broker, len(tps), tuple(sorted(tp for tp in tps if tp in leaders
                                                           and leaders[tp] != broker)))
            for broker, tps in sorted(by_broker.items())]
