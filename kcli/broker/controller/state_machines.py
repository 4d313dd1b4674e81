"""The partition and replica state machines (Kafka's ZkPartitionStateMachine and ZkReplicaStateMachine).

A transition from a state not in the target's valid previous states (context.py's tables) is logged and
skipped. Each ``handle_state_changes`` call is one request batch: the leadership decisions are written to
ZooKeeper (CAS on the state node, fenced by the controller epoch), then the requests go out.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kcli.broker.controller import elections
from kcli.broker.controller.channel_manager import ControllerBrokerRequestBatch
from kcli.broker.controller.context import ControllerContext, PartitionAndReplica, PartitionState, ReplicaState
from kcli.broker.controller.elections import (
    ControlledShutdownPartitionLeaderElectionStrategy,
    ElectionResult,
    OfflinePartitionLeaderElectionStrategy,
    PartitionLeaderElectionStrategy,
    PreferredReplicaPartitionLeaderElectionStrategy,
    ReassignPartitionLeaderElectionStrategy,
)
from kcli.errors import KcliError
from kcli.zk.kafka_zk_client import ControllerMovedError, KafkaZkClient
from kcli.zk.models import LeaderAndIsr, LeaderIsrAndControllerEpoch, TopicPartition

log = logging.getLogger("kcli.controller")
state_change_log = logging.getLogger("kcli.controller.state_change")

ElectionOutcome = LeaderAndIsr | Exception


class StateChangeFailedError(KcliError):
    """A partition or replica could not make a transition (Kafka's StateChangeFailedException)."""


class PartitionStateMachine:
    def __init__(self, controller_id: int, ctx: ControllerContext, zk: KafkaZkClient,
                 batch: ControllerBrokerRequestBatch, *, unclean_leader_election_enable: bool = False,
                 is_leader_recovery_supported: bool = False) -> None:
        self.controller_id = controller_id
        self.ctx = ctx
        self.zk = zk
        self.batch = batch
        self.unclean_leader_election_enable = unclean_leader_election_enable  # the broker default
        self.is_leader_recovery_supported = is_leader_recovery_supported  # IBP >= 3.2-IV0

    def startup(self) -> None:
        """Initial states from the leadership read at failover, then elections for New/Offline partitions."""
        for tp in self.ctx.all_partitions:
            info = self.ctx.partition_leadership_info(tp)
            if info is None:
                self.ctx.put_partition_state(tp, PartitionState.NEW)
            elif self.ctx.is_replica_online(info.leader_and_isr.leader, tp):
                self.ctx.put_partition_state(tp, PartitionState.ONLINE)
            else:
                self.ctx.put_partition_state(tp, PartitionState.OFFLINE)
        self.trigger_online_partition_state_change()

    def trigger_online_partition_state_change(self, topic: str | None = None) -> dict[TopicPartition, ElectionOutcome]:
        """Every New/Offline partition not queued for deletion -> Online (Offline strategy, clean)."""
        partitions = [tp for tp in self.ctx.partitions_in_states({PartitionState.OFFLINE, PartitionState.NEW}, topic)
                      if not self.ctx.is_topic_queued_up_for_deletion(tp.topic)]
        return self.handle_state_changes(partitions, PartitionState.ONLINE, OfflinePartitionLeaderElectionStrategy(False))

    def handle_state_changes(self, partitions: Sequence[TopicPartition], target: PartitionState,
                             strategy: PartitionLeaderElectionStrategy | None = None
                             ) -> dict[TopicPartition, ElectionOutcome]:
        if not partitions:
            return {}
        try:
            self.batch.new_batch()
            result = self._do_handle_state_changes(list(partitions), target, strategy)
            self.batch.send_requests_to_brokers(self.ctx.epoch)
            return result
        except ControllerMovedError:
            self.batch.clear()
            raise
        except Exception as exc:
            self.batch.clear()
            log.exception("error while moving some partitions to %s", target.name)
            return {tp: exc for tp in partitions}

    def _do_handle_state_changes(self, partitions: list[TopicPartition], target: PartitionState,
                                 strategy: PartitionLeaderElectionStrategy | None) -> dict[TopicPartition, ElectionOutcome]:
        valid = []
        for tp in partitions:
            if self.ctx.is_valid_partition_transition(tp, target):
                valid.append(tp)
            else:
                self._log_failed(tp, target, f"it should be in one of the states "
                                 f"{sorted(s.name for s in _valid_previous(target))}, not "
                                 f"{self.ctx.partition_state(tp).name}")
        if target == PartitionState.NEW:
            for tp in valid:
                state_change_log.info("partition %s %s -> NEW with assigned replicas %s", tp,
                                      self.ctx.partition_state(tp).name, list(self.ctx.partition_replica_assignment(tp)))
                self.ctx.put_partition_state(tp, PartitionState.NEW)
            return {}
        if target == PartitionState.ONLINE:
            uninitialized = [tp for tp in valid if self.ctx.partition_state(tp) == PartitionState.NEW]
            to_elect = [tp for tp in valid if self.ctx.partition_state(tp) in (PartitionState.OFFLINE,
                                                                                PartitionState.ONLINE)]
            for tp in self._initialize_leader_and_isr(uninitialized):
                state_change_log.info("partition %s NEW -> ONLINE with %s", tp, self.ctx.partition_leader_and_isr(tp))
                self.ctx.put_partition_state(tp, PartitionState.ONLINE)
            if not to_elect:
                return {}
            if strategy is None:
                raise ValueError("an election strategy is required to move partitions to ONLINE")
            results = self._elect_leader_for_partitions(to_elect, strategy)
            for tp, outcome in results.items():
                if isinstance(outcome, LeaderAndIsr):
                    state_change_log.info("partition %s %s -> ONLINE with %s", tp, self.ctx.partition_state(tp).name,
                                          outcome)
                    self.ctx.put_partition_state(tp, PartitionState.ONLINE)
            return results
        for tp in valid:  # OFFLINE, NON_EXISTENT: marks only
            self.ctx.put_partition_state(tp, target)
        return {}

    def _initialize_leader_and_isr(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """New -> Online: leader = first live replica in assignment order, ISR = the live replicas, epoch 0."""
        states: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        for tp in partitions:
            live = [r for r in self.ctx.partition_replica_assignment(tp) if self.ctx.is_replica_online(r, tp)]
            if not live:
                self._log_failed(tp, PartitionState.ONLINE, f"no assigned replica is alive (assigned replicas "
                                 f"{list(self.ctx.partition_replica_assignment(tp))}, live brokers "
                                 f"{sorted(self.ctx.live_broker_ids)})")
                continue
            states[tp] = LeaderIsrAndControllerEpoch(LeaderAndIsr(live[0], 0, tuple(live)), self.ctx.epoch)
        if not states:
            return []
        try:
            created = self.zk.create_topic_partition_states(states, self.ctx.epoch_zk_version)
        except ControllerMovedError:
            raise
        except KcliError as exc:
            for tp in states:
                self._log_failed(tp, PartitionState.ONLINE, str(exc))
            return []
        done = []
        for tp, error in sorted(created.items()):
            if error is not None:
                self._log_failed(tp, PartitionState.ONLINE, f"creating its state node failed: {error!r}")
                continue
            self.ctx.put_partition_leadership_info(tp, states[tp])
            self.batch.add_leader_and_isr_request_for_brokers(states[tp].leader_and_isr.isr, tp, states[tp],
                                                              self.ctx.partition_full_replica_assignment(tp),
                                                              is_new=True)
            done.append(tp)
        return done

    def _elect_leader_for_partitions(self, partitions: list[TopicPartition], strategy: PartitionLeaderElectionStrategy
                                     ) -> dict[TopicPartition, ElectionOutcome]:
        """Elect until no partition is left to retry (BADVERSION: its state changed between read and write)."""
        remaining = partitions
        finished: dict[TopicPartition, ElectionOutcome] = {}
        while remaining:
            done, remaining = self._do_elect_leader_for_partitions(remaining, strategy)
            for tp, outcome in done.items():
                if isinstance(outcome, Exception):
                    self._log_failed(tp, PartitionState.ONLINE, str(outcome))
            finished.update(done)
            if remaining:
                log.info("retrying leader election with %s for partitions %s", strategy, [str(p) for p in remaining])
        return finished

    def _do_elect_leader_for_partitions(self, partitions: list[TopicPartition], strategy: PartitionLeaderElectionStrategy
                                        ) -> tuple[dict[TopicPartition, ElectionOutcome], list[TopicPartition]]:
        try:
            current = self.zk.get_topic_partition_states(partitions)
        except KcliError as exc:
            return {tp: exc for tp in partitions}, []
        failed: dict[TopicPartition, ElectionOutcome] = {}
        valid: list[tuple[TopicPartition, LeaderAndIsr]] = []
        for tp in partitions:
            info = current.get(tp)
            if info is None:
                failed[tp] = StateChangeFailedError(f"LeaderAndIsr information doesn't exist for partition {tp} in "
                                                    f"{self.ctx.partition_state(tp).name} state")
            elif info.controller_epoch > self.ctx.epoch:
                failed[tp] = StateChangeFailedError(
                    f"aborted leader election for partition {tp}: its state was written by a controller with epoch "
                    f"{info.controller_epoch}, above ours ({self.ctx.epoch})")
            else:
                valid.append((tp, info.leader_and_isr))
        if not valid:
            return failed, []
        results = self._run_election(valid, strategy)
        with_leader = [r for r in results if r.leader_and_isr is not None]
        for result in results:
            if result.leader_and_isr is None:
                failed[result.topic_partition] = StateChangeFailedError(
                    f"failed to elect leader for partition {result.topic_partition} under strategy {strategy}")
        if not with_leader:
            return failed, []
        old_isr = dict((tp, state.isr) for tp, state in valid)
        for r in with_leader:
            assert r.leader_and_isr is not None
            if r.leader_and_isr.leader not in old_isr[r.topic_partition]:
                # Kafka's "Unclean leader election. Partition ... has been elected as leader ... which may result
                # in data loss" (the new leader's log ends where it stopped following)
                log.warning("controller %d: unclean leader election for %s: broker %d was not in the ISR %s; "
                            "records acknowledged after it fell behind are lost", self.controller_id,
                            r.topic_partition, r.leader_and_isr.leader, list(old_isr[r.topic_partition]))
        recipients = {r.topic_partition: r.live_replicas for r in with_leader}
        update = self.zk.update_partition_states({r.topic_partition: r.leader_and_isr for r in with_leader
                                                  if r.leader_and_isr is not None},
                                                 self.ctx.epoch, self.ctx.epoch_zk_version)
        for tp, outcome in update.finished.items():
            if isinstance(outcome, LeaderAndIsr):
                leadership = LeaderIsrAndControllerEpoch(outcome, self.ctx.epoch)
                self.ctx.put_partition_leadership_info(tp, leadership)
                self.batch.add_leader_and_isr_request_for_brokers(recipients[tp], tp, leadership,
                                                                  self.ctx.partition_full_replica_assignment(tp),
                                                                  is_new=False)
        return {**update.finished, **failed}, update.retry

    def _run_election(self, valid: list[tuple[TopicPartition, LeaderAndIsr]],
                      strategy: PartitionLeaderElectionStrategy) -> list[ElectionResult]:
        if isinstance(strategy, OfflinePartitionLeaderElectionStrategy):
            return elections.leader_for_offline(self.ctx, self.is_leader_recovery_supported,
                                                self._collect_unclean_leader_election_state(valid, strategy.allow_unclean))
        if isinstance(strategy, ReassignPartitionLeaderElectionStrategy):
            return elections.leader_for_reassign(self.ctx, valid)
        if isinstance(strategy, PreferredReplicaPartitionLeaderElectionStrategy):
            return elections.leader_for_preferred_replica(self.ctx, valid)
        if isinstance(strategy, ControlledShutdownPartitionLeaderElectionStrategy):
            return elections.leader_for_controlled_shutdown(self.ctx, valid)
        raise ValueError(f"unknown election strategy {strategy!r}")

    def _collect_unclean_leader_election_state(self, valid: list[tuple[TopicPartition, LeaderAndIsr]],
                                               allow_unclean: bool
                                               ) -> list[tuple[TopicPartition, LeaderAndIsr | None, bool]]:
        """Unclean election is considered only for partitions with no live ISR member: allowed by the caller
        (an admin UNCLEAN election), else by the topic's unclean.leader.election.enable over the broker's."""
        out: list[tuple[TopicPartition, LeaderAndIsr | None, bool]] = []
        configs: dict[str, bool | Exception] = {}
        for tp, state in valid:
            if any(self.ctx.is_replica_online(r, tp) for r in state.isr):
                out.append((tp, state, False))
            elif allow_unclean:
                out.append((tp, state, True))
            else:
                if tp.topic not in configs:
                    try:
                        value = self.zk.get_topic_configs(tp.topic).get("unclean.leader.election.enable")
                        configs[tp.topic] = (value.strip().lower() == "true" if value is not None
                                             else self.unclean_leader_election_enable)
                    except KcliError as exc:
                        configs[tp.topic] = exc
                unclean = configs[tp.topic]
                if isinstance(unclean, Exception):
                    self._log_failed(tp, PartitionState.ONLINE, str(unclean))
                    out.append((tp, None, False))
                else:
                    out.append((tp, state, unclean))
        return out

    def _log_failed(self, partition: TopicPartition, target: PartitionState, reason: str) -> None:
        state_change_log.error("controller %d epoch %d failed to change state for partition %s from %s to %s: %s",
                               self.controller_id, self.ctx.epoch, partition, self.ctx.partition_state(partition).name,
                               target.name, reason)


class ReplicaStateMachine:
    def __init__(self, controller_id: int, ctx: ControllerContext, zk: KafkaZkClient,
                 batch: ControllerBrokerRequestBatch) -> None:
        self.controller_id = controller_id
        self.ctx = ctx
        self.zk = zk
        self.batch = batch

    def startup(self) -> None:
        """Replicas on live brokers -> Online (LeaderAndIsr with the current state), the others -> Offline."""
        for tp in self.ctx.all_partitions:
            for replica in self.ctx.partition_replica_assignment(tp):
                self.ctx.put_replica_state(PartitionAndReplica(tp, replica),
                                           ReplicaState.ONLINE if self.ctx.is_replica_online(replica, tp)
                                           else ReplicaState.DELETION_INELIGIBLE)
        online, offline = self.ctx.online_and_offline_replicas()
        self.handle_state_changes(online, ReplicaState.ONLINE)
        self.handle_state_changes(offline, ReplicaState.OFFLINE)

    def handle_state_changes(self, replicas: Sequence[PartitionAndReplica], target: ReplicaState) -> None:
        if not replicas:
            return
        try:
            self.batch.new_batch()
            by_broker: dict[int, list[PartitionAndReplica]] = {}
            for replica in replicas:
                by_broker.setdefault(replica.replica, []).append(replica)
            for broker_id, on_broker in sorted(by_broker.items()):
                self._do_handle_state_changes(broker_id, on_broker, target)
            self.batch.send_requests_to_brokers(self.ctx.epoch)
        except ControllerMovedError:
            self.batch.clear()
            raise
        except Exception:
            self.batch.clear()
            log.exception("error while moving some replicas to %s", target.name)

    def _do_handle_state_changes(self, replica_id: int, replicas: list[PartitionAndReplica],
                                 target: ReplicaState) -> None:
        valid = []
        for replica in replicas:
            if self.ctx.is_valid_replica_transition(replica, target):
                valid.append(replica)
            else:
                self._log_failed(replica, target, f"it should be in one of the states "
                                 f"{sorted(s.name for s in _valid_previous(target))}, not "
                                 f"{self.ctx.replica_state(replica).name}")
        if target == ReplicaState.NEW:
            for replica in valid:
                tp = replica.topic_partition
                info = self.ctx.partition_leadership_info(tp)
                if info is not None:
                    if info.leader_and_isr.leader == replica_id:
                        self._log_failed(replica, target, "it is requested to become leader")
                        continue
                    self.batch.add_leader_and_isr_request_for_brokers(
                        [replica_id], tp, info, self.ctx.partition_full_replica_assignment(tp), is_new=True)
                self.ctx.put_replica_state(replica, ReplicaState.NEW)
        elif target == ReplicaState.ONLINE:
            for replica in valid:
                tp = replica.topic_partition
                if self.ctx.replica_state(replica) == ReplicaState.NEW:
                    assignment = self.ctx.partition_full_replica_assignment(tp)
                    if replica_id not in assignment.replicas:
                        log.error("adding replica %d that is not part of the assignment %s", replica_id, assignment)
                        self.ctx.update_partition_full_replica_assignment(
                            tp, type(assignment)((*assignment.replicas, replica_id), assignment.adding_replicas,
                                                 assignment.removing_replicas))
                else:
                    info = self.ctx.partition_leadership_info(tp)
                    if info is not None:
                        self.batch.add_leader_and_isr_request_for_brokers(
                            [replica_id], tp, info, self.ctx.partition_full_replica_assignment(tp), is_new=False)
                self.ctx.put_replica_state(replica, ReplicaState.ONLINE)
        elif target == ReplicaState.OFFLINE:
            for replica in valid:
                self.batch.add_stop_replica_request_for_brokers([replica_id], replica.topic_partition,
                                                                delete_partition=False)
            with_leadership = [r for r in valid if self.ctx.partition_leadership_info(r.topic_partition) is not None]
            without_leadership = [r for r in valid if self.ctx.partition_leadership_info(r.topic_partition) is None]
            updated = self._remove_replicas_from_isr(replica_id, [r.topic_partition for r in with_leadership])
            for tp, leadership in sorted(updated.items()):
                state_change_log.info("partition %s state changed to %s after removing replica %d from the ISR as "
                                      "part of its transition to OFFLINE", tp, leadership, replica_id)
                if not self.ctx.is_topic_queued_up_for_deletion(tp.topic):
                    recipients = [r for r in self.ctx.partition_replica_assignment(tp) if r != replica_id]
                    self.batch.add_leader_and_isr_request_for_brokers(
                        recipients, tp, leadership, self.ctx.partition_full_replica_assignment(tp), is_new=False)
                self.ctx.put_replica_state(PartitionAndReplica(tp, replica_id), ReplicaState.OFFLINE)
            for replica in without_leadership:
                self.batch.add_update_metadata_request_for_brokers(self.ctx.live_or_shutting_down_broker_ids,
                                                                   [replica.topic_partition])
                self.ctx.put_replica_state(replica, ReplicaState.OFFLINE)
        elif target == ReplicaState.DELETION_STARTED:
            for replica in valid:
                self.ctx.put_replica_state(replica, ReplicaState.DELETION_STARTED)
                self.batch.add_stop_replica_request_for_brokers([replica_id], replica.topic_partition,
                                                                delete_partition=True)
        elif target in (ReplicaState.DELETION_INELIGIBLE, ReplicaState.DELETION_SUCCESSFUL):
            for replica in valid:
                self.ctx.put_replica_state(replica, target)
        elif target == ReplicaState.NON_EXISTENT:
            for replica in valid:
                tp = replica.topic_partition
                self.ctx.update_partition_full_replica_assignment(
                    tp, self.ctx.partition_full_replica_assignment(tp).remove_replica(replica_id))
                self.ctx.remove_replica_state(replica)

    def _remove_replicas_from_isr(self, replica_id: int, partitions: list[TopicPartition]
                                  ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch]:
        results: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        remaining = partitions
        while remaining:
            finished, remaining = self._do_remove_replicas_from_isr(replica_id, remaining)
            for tp, outcome in finished.items():
                if isinstance(outcome, Exception):
                    self._log_failed(PartitionAndReplica(tp, replica_id), ReplicaState.OFFLINE, str(outcome))
                else:
                    results[tp] = outcome
        return results

    def _do_remove_replicas_from_isr(self, replica_id: int, partitions: list[TopicPartition]
                                     ) -> tuple[dict[TopicPartition, LeaderIsrAndControllerEpoch | Exception],
                                                list[TopicPartition]]:
        try:
            current = self.zk.get_topic_partition_states(partitions)
        except KcliError as exc:
            return {tp: exc for tp in partitions}, []
        finished: dict[TopicPartition, LeaderIsrAndControllerEpoch | Exception] = {}
        unchanged: dict[TopicPartition, LeaderAndIsr] = {}
        adjusted: dict[TopicPartition, LeaderAndIsr] = {}
        for tp in partitions:
            info = current.get(tp)
            if info is None:
                if not self.ctx.is_topic_queued_up_for_deletion(tp.topic):
                    finished[tp] = StateChangeFailedError(f"failed to change state of replica {replica_id} for "
                                                          f"partition {tp}: its state node is missing")
            elif info.controller_epoch > self.ctx.epoch:
                finished[tp] = StateChangeFailedError(
                    f"the state of {tp} was written by a controller with epoch {info.controller_epoch}, above ours "
                    f"({self.ctx.epoch}); aborting the state change")
            elif replica_id in info.leader_and_isr.isr:
                adjusted[tp] = elections.remove_replica_from_isr(info.leader_and_isr, replica_id)
            else:
                unchanged[tp] = info.leader_and_isr
        update = self.zk.update_partition_states(adjusted, self.ctx.epoch, self.ctx.epoch_zk_version)
        for tp, outcome in {**unchanged, **update.finished}.items():
            if isinstance(outcome, Exception):
                finished[tp] = outcome
            else:
                leadership = LeaderIsrAndControllerEpoch(outcome, self.ctx.epoch)
                self.ctx.put_partition_leadership_info(tp, leadership)
                finished[tp] = leadership
        return finished, update.retry

    def _log_failed(self, replica: PartitionAndReplica, target: ReplicaState, reason: str) -> None:
        state_change_log.error("controller %d epoch %d failed to change state of replica %d for partition %s from %s "
                               "to %s: %s", self.controller_id, self.ctx.epoch, replica.replica, replica.topic_partition,
                               self.ctx.replica_state(replica).name, target.name, reason)


def _valid_previous(target: PartitionState | ReplicaState) -> frozenset:
    from kcli.broker.controller.context import VALID_PREVIOUS_PARTITION_STATES, VALID_PREVIOUS_REPLICA_STATES

    if isinstance(target, PartitionState):
        return VALID_PREVIOUS_PARTITION_STATES[target]
    return VALID_PREVIOUS_REPLICA_STATES[target]
