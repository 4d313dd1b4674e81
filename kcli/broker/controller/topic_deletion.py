"""TopicDeletionManager: the topic deletion state machine (Kafka's TopicDeletionManager, kafka-cluster.md 2.6).

A topic named under /admin/delete_topics is queued. It is ineligible while a replica is offline or a
reassignment runs. Deletion: partitions -> Offline -> NonExistent; UpdateMetadata with leader -2 so brokers
drop them; live replicas -> Offline -> DeletionStarted (StopReplica delete=true, leader epoch -2); each
StopReplica answer moves them to DeletionSuccessful or DeletionIneligible (retried later). When all are
successful the replicas go NonExistent and the topic's znodes go (/brokers/topics/T, /config/topics/T,
/admin/delete_topics/T), each delete fenced by the controller epoch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kcli.broker.controller.context import ControllerContext, PartitionAndReplica, PartitionState, ReplicaState
from kcli.broker.controller.state_machines import PartitionStateMachine, ReplicaStateMachine
from kcli.zk.kafka_zk_client import KafkaZkClient
from kcli.zk.models import TopicPartition

log = logging.getLogger("kcli.controller")


class TopicDeletionManager:
    def __init__(self, ctx: ControllerContext, zk: KafkaZkClient, replica_state_machine: ReplicaStateMachine,
                 partition_state_machine: PartitionStateMachine, *, delete_topic_enable: bool,
                 send_metadata_update: Callable[[list[TopicPartition]], None],
                 mute_partition_modifications: Callable[[str], None]) -> None:
        self.ctx = ctx
        self.zk = zk
        self.replica_state_machine = replica_state_machine
        self.partition_state_machine = partition_state_machine
        self.delete_topic_enable = delete_topic_enable
        self._send_metadata_update = send_metadata_update
        self._mute_partition_modifications = mute_partition_modifications

    def init(self, topics_to_be_deleted: set[str], topics_ineligible_for_deletion: set[str]) -> None:
        if self.delete_topic_enable:
            self.ctx.queue_topic_deletion(topics_to_be_deleted)
            self.ctx.topics_ineligible_for_deletion.update(topics_ineligible_for_deletion & self.ctx.topics_to_be_deleted)
        elif topics_to_be_deleted:
            log.info("removing %s from /admin/delete_topics since delete.topic.enable is false",
                     sorted(topics_to_be_deleted))
            self.zk.delete_topic_deletions(sorted(topics_to_be_deleted), self.ctx.epoch_zk_version)

    def try_topic_deletion(self) -> None:
        if self.delete_topic_enable:
            self._resume_deletions()

    def enqueue_topics_for_deletion(self, topics: set[str]) -> None:
        if self.delete_topic_enable:
            self.ctx.queue_topic_deletion(topics)
            self._resume_deletions()

    def resume_deletion_for_topics(self, topics: Iterable[str]) -> None:
        if self.delete_topic_enable:
            resumed = set(topics) & self.ctx.topics_to_be_deleted
            if resumed:
                self.ctx.topics_ineligible_for_deletion -= resumed
                self._resume_deletions()

    def fail_replica_deletion(self, replicas: Iterable[PartitionAndReplica]) -> None:
        if self.delete_topic_enable:
            failed = [r for r in replicas if self.is_topic_queued_up_for_deletion(r.topic)]
            if failed:
                topics = {r.topic for r in failed}
                log.debug("deletion failed for replicas %s; halting deletion of %s", [str(r) for r in failed],
                          sorted(topics))
                self.replica_state_machine.handle_state_changes(failed, ReplicaState.DELETION_INELIGIBLE)
                self.mark_topic_ineligible_for_deletion(topics, "replica deletion failure")
                self._resume_deletions()

    def mark_topic_ineligible_for_deletion(self, topics: Iterable[str], reason: str) -> None:
        if self.delete_topic_enable:
            halted = self.ctx.topics_to_be_deleted & set(topics)
            self.ctx.topics_ineligible_for_deletion |= halted
            if halted:
                log.info("halted deletion of topics %s due to %s", sorted(halted), reason)

    def is_topic_queued_up_for_deletion(self, topic: str) -> bool:
        return self.delete_topic_enable and self.ctx.is_topic_queued_up_for_deletion(topic)

    def complete_replica_deletion(self, replicas: Iterable[PartitionAndReplica]) -> None:
        deleted = [r for r in replicas if self.is_topic_queued_up_for_deletion(r.topic)]
        self.replica_state_machine.handle_state_changes(deleted, ReplicaState.DELETION_SUCCESSFUL)
        self._resume_deletions()

    # -- internals -------------------------------------------------------------------------------------------
    def _is_topic_ineligible_for_deletion(self, topic: str) -> bool:
        return not self.delete_topic_enable or topic in self.ctx.topics_ineligible_for_deletion

    def _is_topic_deletion_in_progress(self, topic: str) -> bool:
        return self.delete_topic_enable and self.ctx.is_any_replica_in_state(topic, ReplicaState.DELETION_STARTED)

    def _is_topic_eligible_for_deletion(self, topic: str) -> bool:
        return (self.ctx.is_topic_queued_up_for_deletion(topic) and not self._is_topic_deletion_in_progress(topic)
                and not self._is_topic_ineligible_for_deletion(topic))

    def _retry_deletion_for_ineligible_replicas(self, topics: set[str]) -> None:
        failed = [r for t in sorted(topics) for r in self.ctx.replicas_in_state(t, ReplicaState.DELETION_INELIGIBLE)]
        self.replica_state_machine.handle_state_changes(failed, ReplicaState.OFFLINE)

    def _complete_delete_topic(self, topic: str) -> None:
        self._mute_partition_modifications(topic)
        self.replica_state_machine.handle_state_changes(
            self.ctx.replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL), ReplicaState.NON_EXISTENT)
        self.zk.delete_topic_znode(topic, self.ctx.epoch_zk_version)
        self.zk.delete_topic_configs([topic], self.ctx.epoch_zk_version)
        self.zk.delete_topic_deletions([topic], self.ctx.epoch_zk_version)
        self.ctx.remove_topic(topic)

    def _on_topic_deletion(self, topics: set[str]) -> None:
        unseen = topics - self.ctx.topics_with_deletion_started
        if unseen:
            partitions = [tp for t in sorted(unseen) for tp in self.ctx.partitions_for_topic(t)]
            self.partition_state_machine.handle_state_changes(partitions, PartitionState.OFFLINE)
            self.partition_state_machine.handle_state_changes(partitions, PartitionState.NON_EXISTENT)
            self.ctx.begin_topic_deletion(unseen)
        self._send_metadata_update([tp for t in sorted(topics) for tp in self.ctx.partitions_for_topic(t)])
        self._on_partition_deletion(topics)

    def _on_partition_deletion(self, topics: set[str]) -> None:
        dead: list[PartitionAndReplica] = []
        retry: list[PartitionAndReplica] = []
        ineligible: set[str] = set()
        for topic in sorted(topics):
            replicas = self.ctx.replicas_for_topic(topic)
            alive = [r for r in replicas if self.ctx.is_replica_online(r.replica, r.topic_partition)]
            topic_dead = [r for r in replicas if r not in alive]
            successful = set(self.ctx.replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL))
            dead.extend(topic_dead)
            retry.extend(r for r in alive if r not in successful)
            if topic_dead:
                ineligible.add(topic)
        self.replica_state_machine.handle_state_changes(dead, ReplicaState.DELETION_INELIGIBLE)
        self.replica_state_machine.handle_state_changes(retry, ReplicaState.OFFLINE)
        self.replica_state_machine.handle_state_changes(retry, ReplicaState.DELETION_STARTED)
        if ineligible:
            self.mark_topic_ineligible_for_deletion(ineligible, "offline replicas")

    def _resume_deletions(self) -> None:
        queued = set(self.ctx.topics_to_be_deleted)
        eligible_for_retry: set[str] = set()
        eligible: set[str] = set()
        if queued:
            log.info("handling deletion for topics %s", sorted(queued))
        for topic in sorted(queued):
            if self.ctx.are_all_replicas_in_state(topic, ReplicaState.DELETION_SUCCESSFUL):
                self._complete_delete_topic(topic)
                log.info("deletion of topic %s successfully completed", topic)
            elif not self.ctx.is_any_replica_in_state(topic, ReplicaState.DELETION_STARTED):
                if self.ctx.is_any_replica_in_state(topic, ReplicaState.DELETION_INELIGIBLE):
                    eligible_for_retry.add(topic)
            if self._is_topic_eligible_for_deletion(topic):
                log.info("deletion of topic %s (re)started", topic)
                eligible.add(topic)
        if eligible_for_retry:
            self._retry_deletion_for_ineligible_replicas(eligible_for_retry)
        if eligible:
            self._on_topic_deletion(eligible)
