"""ControllerContext: the controller's picture of the cluster (Kafka's ControllerContext, ReplicaAssignment and
the partition and replica state tables of PartitionStateMachine / ReplicaStateMachine).

Only the controller-event thread reads or changes it. State transitions are tables (valid previous states per
target); the machines in state_machines.py consult them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from kcli.zk.kafka_zk_client import BrokerAndEpoch
from kcli.zk.models import EPOCH_DURING_DELETE, NO_EPOCH, LeaderAndIsr, LeaderIsrAndControllerEpoch, TopicPartition

INITIAL_CONTROLLER_EPOCH = 0  # KafkaController.InitialControllerEpoch
INITIAL_CONTROLLER_EPOCH_ZK_VERSION = 0


class PartitionState(IntEnum):
    """Kafka's partition states, with their byte values."""

    NEW = 0
    ONLINE = 1
    OFFLINE = 2
    NON_EXISTENT = 3


class ReplicaState(IntEnum):
    """Kafka's replica states, with their byte values."""

    NEW = 1
    ONLINE = 2
    OFFLINE = 3
    DELETION_STARTED = 4
    DELETION_SUCCESSFUL = 5
    DELETION_INELIGIBLE = 6
    NON_EXISTENT = 7


# target state -> the states it may be entered from (PartitionState.validPreviousStates, ReplicaState's).
VALID_PREVIOUS_PARTITION_STATES: dict[PartitionState, frozenset[PartitionState]] = {
    PartitionState.NEW: frozenset({PartitionState.NON_EXISTENT}),
    PartitionState.ONLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}),
    PartitionState.OFFLINE: frozenset({PartitionState.NEW, PartitionState.ONLINE, PartitionState.OFFLINE}),
    PartitionState.NON_EXISTENT: frozenset({PartitionState.OFFLINE}),
}
VALID_PREVIOUS_REPLICA_STATES: dict[ReplicaState, frozenset[ReplicaState]] = {
    ReplicaState.NEW: frozenset({ReplicaState.NON_EXISTENT}),
    ReplicaState.ONLINE: frozenset({ReplicaState.NEW, ReplicaState.ONLINE, ReplicaState.OFFLINE,
                                    ReplicaState.DELETION_INELIGIBLE}),
    ReplicaState.OFFLINE: frozenset({ReplicaState.NEW, ReplicaState.ONLINE, ReplicaState.OFFLINE,
                                     ReplicaState.DELETION_INELIGIBLE}),
    ReplicaState.DELETION_STARTED: frozenset({ReplicaState.OFFLINE}),
    ReplicaState.DELETION_SUCCESSFUL: frozenset({ReplicaState.DELETION_STARTED}),
    ReplicaState.DELETION_INELIGIBLE: frozenset({ReplicaState.OFFLINE, ReplicaState.DELETION_STARTED}),
    ReplicaState.NON_EXISTENT: frozenset({ReplicaState.DELETION_SUCCESSFUL}),
}


class PartitionAndReplica(NamedTuple):
    topic_partition: TopicPartition
    replica: int

    @property
    def topic(self) -> str:
        return self.topic_partition.topic

    def __str__(self) -> str:
        return f"[Topic={self.topic_partition.topic},Partition={self.topic_partition.partition},Replica={self.replica}]"


@dataclass(frozen=True)
class ReplicaAssignment:
    """A partition's full replica set (RS), with the replicas a reassignment adds (AR) and removes (RR)."""

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    def reassign_to(self, target: Sequence[int]) -> ReplicaAssignment:
        origin = self.origin_replicas
        full = tuple(dict.fromkeys((*target, *origin)))
        return ReplicaAssignment(full, tuple(r for r in full if r not in origin),
                                 tuple(r for r in full if r not in target))

    def remove_replica(self, replica: int) -> ReplicaAssignment:
        return ReplicaAssignment(tuple(r for r in self.replicas if r != replica),
                                 tuple(r for r in self.adding_replicas if r != replica),
                                 tuple(r for r in self.removing_replicas if r != replica))


EMPTY_ASSIGNMENT = ReplicaAssignment(())


class ControllerContext:
    """Live brokers and their epochs, assignments, leadership (with zkVersions), topic ids, deletion and
    shutdown bookkeeping, and the two state tables."""

    def __init__(self) -> None:
        self.epoch = INITIAL_CONTROLLER_EPOCH
        self.epoch_zk_version = INITIAL_CONTROLLER_EPOCH_ZK_VERSION
        self.shutting_down_broker_ids: set[int] = set()
        self._live_brokers: dict[int, BrokerAndEpoch] = {}
        self.all_topics: set[str] = set()
        self.topic_ids: dict[str, str] = {}
        self.partition_assignments: dict[str, dict[int, ReplicaAssignment]] = {}
        self._leadership: dict[TopicPartition, LeaderIsrAndControllerEpoch] = {}
        self.partitions_being_reassigned: set[TopicPartition] = set()
        self.partition_states: dict[TopicPartition, PartitionState] = {}
        self.replica_states: dict[PartitionAndReplica, ReplicaState] = {}
        self.replicas_on_offline_dirs: dict[int, set[TopicPartition]] = {}
        self.topics_to_be_deleted: set[str] = set()
        self.topics_with_deletion_started: set[str] = set()
        self.topics_ineligible_for_deletion: set[str] = set()

    def reset(self) -> None:
        """resetContext: everything a resigned controller must forget."""
        self.__init__()  # type: ignore[misc]

    # -- brokers -------------------------------------------------------------------------------------------
    def set_live_brokers(self, brokers: Iterable[BrokerAndEpoch]) -> None:
        self._live_brokers = {}
        self.add_live_brokers(brokers)

    def add_live_brokers(self, brokers: Iterable[BrokerAndEpoch]) -> None:
        for broker in brokers:
            self._live_brokers[broker.id] = broker

    def remove_live_brokers(self, broker_ids: Iterable[int]) -> None:
        for broker_id in broker_ids:
            self._live_brokers.pop(broker_id, None)

    def update_broker_metadata(self, broker: BrokerAndEpoch) -> None:
        self._live_brokers[broker.id] = broker

    @property
    def live_broker_ids(self) -> set[int]:
        """Brokers that may lead or join an ISR: registered and not shutting down."""
        return set(self._live_brokers) - self.shutting_down_broker_ids

    @property
    def live_or_shutting_down_broker_ids(self) -> set[int]:
        return set(self._live_brokers)

    @property
    def live_or_shutting_down_brokers(self) -> list[BrokerAndEpoch]:
        return [self._live_brokers[i] for i in sorted(self._live_brokers)]

    def live_or_shutting_down_broker(self, broker_id: int) -> BrokerAndEpoch | None:
        return self._live_brokers.get(broker_id)

    @property
    def live_broker_id_and_epochs(self) -> dict[int, int]:
        return {i: b.epoch for i, b in self._live_brokers.items()}

    def is_replica_online(self, broker_id: int, partition: TopicPartition, *,
                          include_shutting_down_brokers: bool = False) -> bool:
        online = (broker_id in self._live_brokers if include_shutting_down_brokers
                  else broker_id in self.live_broker_ids)
        return online and partition not in self.replicas_on_offline_dirs.get(broker_id, set())

    # -- topics and assignments ----------------------------------------------------------------------------
    def set_all_topics(self, topics: Iterable[str]) -> None:
        self.all_topics = set(topics)

    def add_topic_id(self, topic: str, topic_id: str) -> None:
        self.topic_ids[topic] = topic_id

    def partition_replica_assignment(self, partition: TopicPartition) -> tuple[int, ...]:
        return self.partition_full_replica_assignment(partition).replicas

    def partition_full_replica_assignment(self, partition: TopicPartition) -> ReplicaAssignment:
        return self.partition_assignments.get(partition.topic, {}).get(partition.partition, EMPTY_ASSIGNMENT)

    def update_partition_full_replica_assignment(self, partition: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.partition_assignments.setdefault(partition.topic, {})[partition.partition] = assignment

    def partition_full_replica_assignment_for_topic(self, topic: str) -> dict[TopicPartition, ReplicaAssignment]:
        return {TopicPartition(topic, p): a for p, a in sorted(self.partition_assignments.get(topic, {}).items())}

    @property
    def all_partitions(self) -> list[TopicPartition]:
        return sorted(TopicPartition(t, p) for t, parts in self.partition_assignments.items() for p in parts)

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return [TopicPartition(topic, p) for p in sorted(self.partition_assignments.get(topic, {}))]

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions if broker_id in self.partition_replica_assignment(tp)]

    def replicas_on_brokers(self, broker_ids: Iterable[int]) -> list[PartitionAndReplica]:
        wanted = set(broker_ids)
        return [PartitionAndReplica(tp, r) for tp in self.all_partitions
                for r in self.partition_replica_assignment(tp) if r in wanted]

    def replicas_for_topic(self, topic: str) -> list[PartitionAndReplica]:
        return [PartitionAndReplica(tp, r) for tp in self.partitions_for_topic(topic)
                for r in self.partition_replica_assignment(tp)]

    def replicas_for_partitions(self, partitions: Iterable[TopicPartition]) -> list[PartitionAndReplica]:
        return [PartitionAndReplica(tp, r) for tp in sorted(set(partitions)) for r in self.partition_replica_assignment(tp)]

    def online_and_offline_replicas(self) -> tuple[list[PartitionAndReplica], list[PartitionAndReplica]]:
        online, offline = [], []
        for tp in self.all_partitions:
            for replica in self.partition_replica_assignment(tp):
                (online if self.is_replica_online(replica, tp) else offline).append(PartitionAndReplica(tp, replica))
        return online, offline

    def remove_topic(self, topic: str) -> None:
        self.topics_to_be_deleted.discard(topic)
        self.topics_with_deletion_started.discard(topic)
        self.all_topics.discard(topic)
        self.topic_ids.pop(topic, None)
        for partition in self.partition_assignments.pop(topic, {}):
            tp = TopicPartition(topic, partition)
            self._leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
        self.replica_states = {r: s for r, s in self.replica_states.items() if r.topic != topic}

    # -- leadership ----------------------------------------------------------------------------------------
    def put_partition_leadership_info(self, partition: TopicPartition, value: LeaderIsrAndControllerEpoch) -> None:
        self._leadership[partition] = value

    def partition_leadership_info(self, partition: TopicPartition) -> LeaderIsrAndControllerEpoch | None:
        return self._leadership.get(partition)

    def partition_leader_and_isr(self, partition: TopicPartition) -> LeaderAndIsr | None:
        info = self._leadership.get(partition)
        return info.leader_and_isr if info is not None else None

    def clear_partition_leadership_info(self) -> None:
        self._leadership.clear()

    @property
    def partitions_with_leaders(self) -> list[TopicPartition]:
        return sorted(tp for tp in self._leadership if not self.is_topic_queued_up_for_deletion(tp.topic))

    @property
    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        return sorted(tp for tp, info in self._leadership.items()
                      if not self.is_replica_online(info.leader_and_isr.leader, tp)
                      and not self.is_topic_queued_up_for_deletion(tp.topic))

    def partition_leaders_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return sorted(tp for tp, info in self._leadership.items()
                      if not self.is_topic_queued_up_for_deletion(tp.topic)
                      and info.leader_and_isr.leader == broker_id and len(self.partition_replica_assignment(tp)) > 1)

    def leader_epoch(self, partition: TopicPartition) -> int:
        """What StopReplica carries: the current leader epoch, -2 for a topic queued for deletion."""
        if self.is_topic_queued_up_for_deletion(partition.topic):
            return EPOCH_DURING_DELETE
        info = self._leadership.get(partition)
        return info.leader_and_isr.leader_epoch if info is not None else NO_EPOCH

    # -- partition and replica states ----------------------------------------------------------------------
    def partition_state(self, partition: TopicPartition) -> PartitionState:
        return self.partition_states.get(partition, PartitionState.NON_EXISTENT)

    def put_partition_state(self, partition: TopicPartition, state: PartitionState) -> None:
        self.partition_states[partition] = state

    def partitions_in_states(self, states: Iterable[PartitionState], topic: str | None = None) -> list[TopicPartition]:
        wanted = set(states)
        return sorted(tp for tp, s in self.partition_states.items()
                      if s in wanted and (topic is None or tp.topic == topic))

    def is_valid_partition_transition(self, partition: TopicPartition, target: PartitionState) -> bool:
        return self.partition_state(partition) in VALID_PREVIOUS_PARTITION_STATES[target]

    def replica_state(self, replica: PartitionAndReplica) -> ReplicaState:
        return self.replica_states.get(replica, ReplicaState.NON_EXISTENT)

    def put_replica_state(self, replica: PartitionAndReplica, state: ReplicaState) -> None:
        self.replica_states[replica] = state

    def remove_replica_state(self, replica: PartitionAndReplica) -> None:
        self.replica_states.pop(replica, None)

    def is_valid_replica_transition(self, replica: PartitionAndReplica, target: ReplicaState) -> bool:
        return self.replica_state(replica) in VALID_PREVIOUS_REPLICA_STATES[target]

    def replicas_in_state(self, topic: str, state: ReplicaState) -> list[PartitionAndReplica]:
        return [r for r in self.replicas_for_topic(topic) if self.replica_state(r) == state]

    def are_all_replicas_in_state(self, topic: str, state: ReplicaState) -> bool:
        return all(self.replica_state(r) == state for r in self.replicas_for_topic(topic))

    def is_any_replica_in_state(self, topic: str, state: ReplicaState) -> bool:
        return any(self.replica_state(r) == state for r in self.replicas_for_topic(topic))

    # -- topic deletion ------------------------------------------------------------------------------------
    def queue_topic_deletion(self, topics: Iterable[str]) -> None:
        self.topics_to_be_deleted.update(topics)

    def begin_topic_deletion(self, topics: Iterable[str]) -> None:
        self.topics_with_deletion_started.update(topics)

    def is_topic_deletion_in_progress(self, topic: str) -> bool:
        return topic in self.topics_with_deletion_started

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return topic in self.topics_to_be_deleted
