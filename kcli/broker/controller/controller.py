"""KafkaController: the ZooKeeper-mode controller (Kafka's KafkaController, kafka-cluster.md section 2).

Everything runs on the controller-event thread (events.py), the election too (``elect``, Kafka's elect): at
Startup the controller watches /controller and bids through KafkaZkClient.register_controller_and_increment_
controller_epoch; the winner fails over with the new epoch and its zkVersion, the others record who won. When
/controller changes (ControllerChange) a controller that lost it resigns; when it goes (Reelect) every broker
bids again. The registration (kcli.zk.registration) keeps the broker's own node and tells of the session: an
expired one (Expire) resigns, a new one (RegisterBrokerAndReelect) bids again; after a reconnection within the
session (Reelect too) a controller still active reads its watched paths again, kazoo having dropped every watch
with the connection. While active, the controller watches brokers, topics, topic deletions and ISR/log-dir
notifications, keeps ControllerContext in step, makes the leadership decisions through the two state machines and
sends LeaderAndIsr / UpdateMetadata / StopReplica through the channel manager.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future

from kcli.broker.controller import requests
from kcli.broker.controller.channel_manager import (
    DEFAULT_SOCKET_TIMEOUT_S,
    ControllerBrokerRequestBatch,
    ControllerChannelManager,
)
from kcli.broker.controller.context import (
    ControllerContext,
    PartitionAndReplica,
    PartitionState,
    ReplicaAssignment,
    ReplicaState,
)
from kcli.broker.controller import elections
from kcli.broker.controller.elections import (
    ControlledShutdownPartitionLeaderElectionStrategy,
    ElectionTrigger,
    ElectionType,
    OfflinePartitionLeaderElectionStrategy,
    PreferredReplicaPartitionLeaderElectionStrategy,
    diff_brokers,
)
from kcli.broker.controller.elections import ReassignPartitionLeaderElectionStrategy
from kcli.broker.controller.events import (
    AutoPreferredReplicaLeaderElection,
    BrokerChange,
    BrokerModifications,
    ControlledShutdown,
    ControllerEvent,
    ControllerChange,
    ControllerEventManager,
    Expire,
    IsrChangeNotification,
    LeaderAndIsrResponseReceived,
    LogDirEventNotification,
    PartitionModifications,
    Reelect,
    RegisterBrokerAndReelect,
    ReplicaLeaderElection,
    ShutdownEventThread,
    Startup,
    TopicChange,
    TopicDeletion,
    TopicDeletionStopReplicaResponseReceived,
    UpdateMetadataResponseReceived,
)
from kcli.broker.controller.events import (
    ApiPartitionReassignment,
    ListPartitionReassignments,
    PartitionReassignmentIsrChange,
    ZkPartitionReassignment,
)
from kcli.broker.controller.reassignment import ReassignmentFailedError, build_reassignment, validate_replicas
from kcli.broker.controller.state_machines import PartitionStateMachine, ReplicaStateMachine, StateChangeFailedError
from kcli.broker.controller.topic_deletion import TopicDeletionManager
from kcli.broker.errors import (
    BrokerError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidTopicError,
    NoReassignmentInProgressError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    UnknownTopicOrPartitionError,
)
from kcli.errors import KcliError
from kcli.zk import models, paths
from kcli.zk.kafka_zk_client import BrokerAndEpoch, ControllerMovedError, KafkaZkClient, ZNodeChangeHandler
from kcli.zk.models import NO_LEADER, LeaderAndIsr, LeaderIsrAndControllerEpoch, TopicPartition, ZnodeFormatError
from kcli.zk.registration import new_cluster_id

log = logging.getLogger("kcli.controller")

NONE, KAFKA_STORAGE_ERROR = 0, 56  # Kafka's error codes the controller acts on
AUTO_REBALANCE_FIRST_DELAY_S = 5.0  # the first auto-rebalance check after failover (Kafka: 5 s, then the interval)


class StaleBrokerEpochError(KcliError):
    """A ControlledShutdown carried a broker epoch older than the registration's (STALE_BROKER_EPOCH)."""

    error_code = "STALE_BROKER_EPOCH"


class BrokerNotAvailableError(KcliError):
    """A ControlledShutdown for a broker the controller does not know (BROKER_NOT_AVAILABLE)."""

    error_code = "BROKER_NOT_AVAILABLE"


class KafkaController:
    """One broker's controller: inactive until it wins an election (``elect``), active until another broker holds
    /controller, the session expires, a fenced write fails or it shuts down."""

    def __init__(self, broker_id: int, zk: KafkaZkClient, *, delete_topic_enable: bool = True,
                 unclean_leader_election_enable: bool = False, inter_broker_listener_name: str | None = None,
                 socket_timeout: float = DEFAULT_SOCKET_TIMEOUT_S,
                 on_resign: Callable[[], None] | None = None,
                 on_controller_id: Callable[[int], None] | None = None,
                 auto_leader_rebalance_enable: bool = True, leader_imbalance_check_interval_seconds: float = 300,
                 leader_imbalance_per_broker_percentage: int = 10, security: Any = None) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.delete_topic_enable = delete_topic_enable
        self.ctx = ControllerContext()
        self.active = False
        self.active_controller_id = -1  # who holds /controller as last seen (Kafka's activeControllerId)
        self._on_resign = on_resign
        self._on_controller_id = on_controller_id
        self._controller_change_handler = ZNodeChangeHandler(
            on_created=lambda: self.put(ControllerChange()), on_data_change=lambda: self.put(ControllerChange()),
            on_deleted=lambda: self.put(Reelect()))
        self.event_manager = ControllerEventManager(self.process, name=f"controller-event-thread-{broker_id}")
        self.channel_manager = ControllerChannelManager(broker_id, listener_name=inter_broker_listener_name,
                                                        security=security,
                                                        socket_timeout=socket_timeout)
        self.batch = ControllerBrokerRequestBatch(broker_id, self.ctx, self.channel_manager, self.put,
                                                  listener_name=inter_broker_listener_name)
        self.replica_state_machine = ReplicaStateMachine(broker_id, self.ctx, zk, self.batch)
        self.partition_state_machine = PartitionStateMachine(
            broker_id, self.ctx, zk, self.batch, unclean_leader_election_enable=unclean_leader_election_enable)
        self.topic_deletion_manager = TopicDeletionManager(
            self.ctx, zk, self.replica_state_machine, self.partition_state_machine,
            delete_topic_enable=delete_topic_enable, send_metadata_update=self._send_metadata_update_to_all,
            mute_partition_modifications=lambda topic: self.zk.unregister_change_handler(paths.topic(topic)))
        self._broker_modification_handlers: set[int] = set()
        self._partition_modification_handlers: set[str] = set()
        self.auto_leader_rebalance_enable = auto_leader_rebalance_enable
        self.leader_imbalance_check_interval_seconds = leader_imbalance_check_interval_seconds
        self.leader_imbalance_per_broker_percentage = leader_imbalance_per_broker_percentage
        self._auto_rebalance_timer: threading.Timer | None = None  # touched on the event thread only

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def startup(self) -> Future[int]:
        """Start the event thread and queue Startup (watch /controller, elect); the future gets the controller id
        the first election found (-1: none)."""
        result: Future[int] = Future()
        self.event_manager.start()
        self.put(Startup(result))
        return result

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Resign if active and stop the event thread."""
        self.event_manager.close(timeout)

    def put(self, event: ControllerEvent) -> None:
        self.event_manager.put(event)

    @property
    def epoch(self) -> int:
        return self.ctx.epoch

    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> Future[set[TopicPartition]]:
        """A broker's ControlledShutdown: the future gets the partitions it still leads (done when empty), or
        ControllerMovedError / StaleBrokerEpochError / BrokerNotAvailableError."""
        result: Future[set[TopicPartition]] = Future()
        self.put(ControlledShutdown(broker_id, broker_epoch, result))
        return result

    # -- dispatch ----------------------------------------------------------------------------------------------
    def process(self, event: ControllerEvent) -> None:
        try:
            handler = self._handlers.get(type(event))
            if handler is None:
                log.error("controller %d: no handler for %s", self.broker_id, event)
                return
            handler(event)
        except ControllerMovedError as exc:
            log.info("controller %d: controller moved to another broker while processing %s (%s); resigning",
                     self.broker_id, event, exc)
            try:
                self._maybe_resign()
            except KcliError as error:
                log.warning("controller %d: could not read %s: %s", self.broker_id, paths.CONTROLLER, error)
                self._resign()
        except Exception:
            log.exception("controller %d: error processing %s", self.broker_id, event)

    @functools.cached_property
    def _handlers(self) -> dict[type, Callable[[ControllerEvent], None]]:
        return {
            **self._reassignment_handlers,
            **self._preferred_election_handlers,
            Startup: self._process_startup,  # type: ignore[dict-item]
            ControllerChange: lambda _: self._maybe_resign(),
            Reelect: lambda _: self._process_reelect(),
            RegisterBrokerAndReelect: lambda _: self._process_reelect(),
            Expire: lambda _: self._process_expire(),
            ShutdownEventThread: lambda _: self._resign(),
            BrokerChange: lambda _: self._process_broker_change(),
            BrokerModifications: self._process_broker_modification,  # type: ignore[dict-item]
            TopicChange: lambda _: self._process_topic_change(),
            PartitionModifications: self._process_partition_modifications,  # type: ignore[dict-item]
            TopicDeletion: lambda _: self._process_topic_deletion(),
            IsrChangeNotification: lambda _: self._process_isr_change_notification(),
            LogDirEventNotification: lambda _: self._process_log_dir_event_notification(),
            LeaderAndIsrResponseReceived: self._process_leader_and_isr_response,  # type: ignore[dict-item]
            UpdateMetadataResponseReceived: self._process_update_metadata_response,  # type: ignore[dict-item]
            TopicDeletionStopReplicaResponseReceived: self._process_stop_replica_response,  # type: ignore[dict-item]
            ControlledShutdown: self._process_controlled_shutdown,  # type: ignore[dict-item]
        }

    # -- the election (Kafka's elect, maybeResign and the Startup/ControllerChange/Reelect/Expire events) ---------
    def _process_startup(self, event: Startup) -> None:
        try:
            self.zk.register_change_handler_and_check_existence(paths.CONTROLLER, self._controller_change_handler)
            self.elect()
        finally:
            if event.result is not None and not event.result.done():
                event.result.set_result(self.active_controller_id)

    def _process_reelect(self) -> None:
        """Kafka's processReelect (maybeResign, elect); RegisterBrokerAndReelect too, the registration having
        registered the broker again in its new session. A controller still active after it (its /controller
        survived a reconnection) sets its watches again (``_rewatch``)."""
        was_active, epoch = self.active, self.ctx.epoch
        self._maybe_resign()
        self.elect()
        if was_active and self.active and self.ctx.epoch == epoch:  # no resignation, no new failover in between
            self._rewatch()

    def _rewatch(self) -> None:
        """The connection came back within the session and this broker is still the controller. ZooKeeper's Java
        client, which Kafka's ZooKeeperClient runs on, sets its watches again on a reconnection (SetWatches, the
        server firing those whose node changed meanwhile), so Kafka's controller never does this; kazoo drops
        every watch when the connection drops and sets none again. So: read again, with their watches, the paths
        onControllerFailover and the handlers watch, through the events that read them (each compares with the
        context and acts on what changed, notifications missed meanwhile included), and finish partitions that
        an event cut short by the dropped connection left New or Offline."""
        log.info("controller %d: reconnected to ZooKeeper; reading the watched paths again", self.broker_id)
        self.partition_state_machine.trigger_online_partition_state_change()
        for event in (BrokerChange(), TopicChange(), TopicDeletion(), IsrChangeNotification(),
                      LogDirEventNotification()):
            self.put(event)
        for broker_id in sorted(self._broker_modification_handlers):
            self.put(BrokerModifications(broker_id))
        for topic in sorted(self._partition_modification_handlers):
            self.put(PartitionModifications(topic))
        for tp in sorted(self.ctx.partitions_being_reassigned):
            self.put(PartitionReassignmentIsrChange(tp))
        self.put(ReplicaLeaderElection(None, ElectionType.PREFERRED, ElectionTrigger.ZK))
        # /admin/reassign_partitions: watched again; processed only if it asks for what is not under way (each
        # processing starts its entries over: a leader epoch bump per partition)
        if self.zk.register_change_handler_and_check_existence(
                paths.REASSIGN_PARTITIONS, ZNodeChangeHandler(on_created=lambda: self.put(ZkPartitionReassignment()))):
            pending = self.zk.get_partition_reassignment()
            if any(tp not in self.ctx.partitions_being_reassigned
                   or self.ctx.partition_full_replica_assignment(tp).target_replicas != tuple(target)
                   for tp, target in pending.items()):
                self.put(ZkPartitionReassignment())

    def _process_expire(self) -> None:
        self._set_active_controller_id(-1)
        self._resign()

    def elect(self) -> None:
        """Bid for /controller unless somebody holds it (on the event thread): the winner bumps /controller_epoch
        in the same transaction and fails over; a loser records the winner (Kafka's KafkaController.elect)."""
        claim = self.zk.get_controller_claim()
        if claim is not None:
            holder, ours = claim
            if ours and not self.active:
                # This session's claim that no controller acts on (a failover cut short): give it up, and the
                # deletion's watch has every broker bid again.
                log.info("controller %d: giving up a /controller claim it does not act on", self.broker_id)
                self.zk.delete_controller_if_ours()
                return
            self._set_active_controller_id(holder if holder is not None else -1)
            log.debug("controller %d: broker %s holds /controller", self.broker_id, holder)
            return
        try:
            epoch, epoch_zk_version = self.zk.register_controller_and_increment_controller_epoch(self.broker_id)
        except ControllerMovedError:
            self._maybe_resign()
            if self.active_controller_id != -1:
                log.info("controller %d: broker %d was elected as the controller instead", self.broker_id,
                         self.active_controller_id)
            else:
                log.warning("controller %d: a controller was elected but went away meanwhile; waiting for the "
                            "next election", self.broker_id)
            return
        self._set_active_controller_id(self.broker_id)
        log.info("controller %d: elected with epoch %d (zkVersion %d)", self.broker_id, epoch, epoch_zk_version)
        self._become_controller(epoch, epoch_zk_version)

    def _maybe_resign(self) -> None:
        """Watch /controller again and learn who holds it; resign if it was this broker and is no longer
        (Kafka's maybeResign)."""
        was_active = self.active
        self.zk.register_change_handler_and_check_existence(paths.CONTROLLER, self._controller_change_handler)
        try:
            holder = self.zk.get_controller_id()
        except ZnodeFormatError:
            holder = None
        self._set_active_controller_id(holder if holder is not None else -1)
        if was_active and self.active_controller_id != self.broker_id:
            self._resign()

    def _set_active_controller_id(self, controller_id: int) -> None:
        if controller_id == self.active_controller_id:
            return
        self.active_controller_id = controller_id
        if self._on_controller_id is not None:
            try:
                self._on_controller_id(controller_id)
            except Exception:
                log.exception("controller %d: controller id listener failed", self.broker_id)

    # -- failover and resignation ------------------------------------------------------------------------------
    def _become_controller(self, epoch: int, epoch_zk_version: int) -> None:
        """Kafka's onControllerFailover, with the epoch and its zkVersion the election left."""
        if self.active:
            if self.ctx.epoch == epoch:
                return  # told twice about the same election
            self._resign()
        self.ctx.epoch, self.ctx.epoch_zk_version = epoch, epoch_zk_version
        self.active = True
        log.info("controller %d: becoming the controller with epoch %d", self.broker_id, epoch)
        try:
            self._on_controller_failover()
        except ControllerMovedError:
            raise
        except Exception:
            log.exception("controller %d: error while becoming the controller; giving up /controller",
                          self.broker_id)
            self._trigger_controller_move()

    def _on_controller_failover(self) -> None:
        """Kafka's order (kafka-cluster.md 2.2); /feature is not done."""
        self.zk.register_child_change_handler(paths.BROKER_IDS, lambda: self.put(BrokerChange()))
        self.zk.register_child_change_handler(paths.BROKER_TOPICS, lambda: self.put(TopicChange()))
        self.zk.register_child_change_handler(paths.ADMIN_DELETE_TOPICS, lambda: self.put(TopicDeletion()))
        self.zk.register_child_change_handler(paths.LOG_DIR_EVENT_NOTIFICATION,
                                              lambda: self.put(LogDirEventNotification()))
        self.zk.register_child_change_handler(paths.ISR_CHANGE_NOTIFICATION, lambda: self.put(IsrChangeNotification()))
        self.zk.delete_log_dir_event_notifications(self.ctx.epoch_zk_version)
        self.zk.delete_isr_change_notifications(self.ctx.epoch_zk_version)
        self._initialize_controller_context()
        to_delete, ineligible = self._fetch_topic_deletions_in_progress()
        self.topic_deletion_manager.init(to_delete, ineligible)
        # Brokers learn the live set before any LeaderAndIsr (they look up leaders in it).
        self._send_update_metadata_request(self.ctx.live_or_shutting_down_broker_ids)
        self.replica_state_machine.startup()
        self.partition_state_machine.startup()
        log.info("controller %d: ready to serve as the new controller with epoch %d", self.broker_id, self.ctx.epoch)
        self._initialize_partition_reassignments()
        self.topic_deletion_manager.try_topic_deletion()
        self._start_replica_elections()

    def _resign(self) -> None:
        if not self.active:
            return
        log.info("controller %d: resigning (epoch %d)", self.broker_id, self.ctx.epoch)
        self.active = False
        self._cancel_auto_leader_rebalance()
        self.zk.unregister_all_handlers()
        # /controller stays watched: a resigned controller bids again when it goes (Kafka's controllerChangeHandler
        # is registered at Startup and never unregistered)
        self.zk.register_change_handler(paths.CONTROLLER, self._controller_change_handler)
        self._broker_modification_handlers.clear()
        self._partition_modification_handlers.clear()
        self.channel_manager.shutdown()
        self.batch.clear()
        self.ctx.reset()
        if self._on_resign is not None:
            self._on_resign()

    def _trigger_controller_move(self) -> None:
        epoch_zk_version = self.ctx.epoch_zk_version
        self._resign()
        try:
            self.zk.delete_controller(epoch_zk_version)
        except KcliError as exc:
            log.warning("controller %d: could not delete /controller: %s", self.broker_id, exc)

    def _initialize_controller_context(self) -> None:
        brokers = self.zk.get_all_brokers_and_epochs(watch=True)
        self.ctx.set_live_brokers(brokers.values())
        log.info("controller %d: broker epochs %s", self.broker_id, self.ctx.live_broker_id_and_epochs)
        self.ctx.set_all_topics(self.zk.get_all_topics(watch=True))
        self._register_partition_modifications_handlers(self.ctx.all_topics)
        assignments = self.zk.get_topic_assignments(self.ctx.all_topics)
        self._process_topic_ids(assignments)
        for topic, (assignment, _) in assignments.items():
            for tp, replica_assignment in _full_assignment(topic, assignment).items():
                self.ctx.update_partition_full_replica_assignment(tp, replica_assignment)
                if replica_assignment.is_being_reassigned:
                    self.ctx.partitions_being_reassigned.add(tp)
        self.ctx.clear_partition_leadership_info()
        self.ctx.shutting_down_broker_ids.clear()
        self._register_broker_modifications_handlers(self.ctx.live_or_shutting_down_broker_ids)
        self._update_leader_and_isr_cache()
        self.channel_manager.startup(self.ctx.live_or_shutting_down_brokers)
        log.info("controller %d: live brokers %s, topics %s", self.broker_id, sorted(self.ctx.live_broker_ids),
                 sorted(self.ctx.all_topics))

    def _fetch_topic_deletions_in_progress(self) -> tuple[set[str], set[str]]:
        to_delete = self.zk.get_topic_deletions(watch=True)
        with_offline_replicas = {t for t in self.ctx.all_topics
                                 if any(not self.ctx.is_replica_online(r.replica, r.topic_partition)
                                        for r in self.ctx.replicas_for_topic(t))}
        reassigning = {tp.topic for tp in self.ctx.partitions_being_reassigned}
        return to_delete, with_offline_replicas | reassigning

    def _update_leader_and_isr_cache(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        wanted = list(partitions) if partitions is not None else self.ctx.all_partitions
        for tp, info in self.zk.get_topic_partition_states(wanted).items():
            if info is not None:
                self.ctx.put_partition_leadership_info(tp, info)

    def _process_topic_ids(self, assignments: dict[str, tuple[models.TopicAssignment, int]]) -> None:
        """Topics without an id get one written (IBP >= 2.8), fenced; the context learns every id."""
        for topic, (assignment, version) in sorted(assignments.items()):
            if assignment.topic_id is None:
                assignment = models.TopicAssignment(assignment.name, 3, assignment.partitions, new_cluster_id(),
                                                    assignment.adding_replicas, assignment.removing_replicas)
                self.zk.set_topic_assignment(topic, assignment, self.ctx.epoch_zk_version, expected_version=version)
                assignments[topic] = (assignment, version + 1)
                log.info("controller %d: topic %s had no topic id; assigned %s", self.broker_id, topic,
                         assignment.topic_id)
            if topic in self.ctx.all_topics and assignment.topic_id is not None:
                self.ctx.add_topic_id(topic, assignment.topic_id)

    # -- watch registration ------------------------------------------------------------------------------------
    def _register_broker_modifications_handlers(self, broker_ids: Iterable[int]) -> None:
        for broker_id in broker_ids:
            self.zk.register_change_handler_and_check_existence(
                paths.broker(broker_id),
                ZNodeChangeHandler(on_data_change=lambda b=broker_id: self.put(BrokerModifications(b))))
            self._broker_modification_handlers.add(broker_id)

    def _unregister_broker_modifications_handlers(self, broker_ids: Iterable[int]) -> None:
        for broker_id in broker_ids:
            if broker_id in self._broker_modification_handlers:
                self._broker_modification_handlers.discard(broker_id)
                self.zk.unregister_change_handler(paths.broker(broker_id))

    def _register_partition_modifications_handlers(self, topics: Iterable[str]) -> None:
        for topic in topics:
            self.zk.register_change_handler(
                paths.topic(topic), ZNodeChangeHandler(on_data_change=lambda t=topic: self.put(PartitionModifications(t))))
            self._partition_modification_handlers.add(topic)

    # -- requests ---------------------------------------------------------------------------------------------
    def _send_update_metadata_request(self, brokers: Iterable[int], partitions: Iterable[TopicPartition] = ()) -> None:
        self.batch.new_batch()
        self.batch.add_update_metadata_request_for_brokers(brokers, partitions)
        self.batch.send_requests_to_brokers(self.ctx.epoch)

    def _send_metadata_update_to_all(self, partitions: list[TopicPartition]) -> None:
        self._send_update_metadata_request(self.ctx.live_or_shutting_down_broker_ids, partitions)

    # -- brokers --------------------------------------------------------------------------------------------------
    def _process_broker_change(self) -> None:
        if not self.active:
            return
        registered = self.zk.get_all_brokers_and_epochs(watch=True)
        changes = diff_brokers({b: r.epoch for b, r in registered.items()}, self.ctx.live_broker_id_and_epochs)
        log.info("controller %d: newly added brokers %s, deleted brokers %s, bounced brokers %s, all live brokers %s",
                 self.broker_id, list(changes.new), list(changes.dead), list(changes.bounced), sorted(registered))
        for broker_id in changes.new:
            self.channel_manager.add_broker(registered[broker_id])
        for broker_id in changes.bounced:
            self.channel_manager.remove_broker(broker_id)
            self.channel_manager.add_broker(registered[broker_id])
        for broker_id in changes.dead:
            self.channel_manager.remove_broker(broker_id)
        if changes.new:
            self.ctx.add_live_brokers(registered[b] for b in changes.new)
            self._on_broker_startup(changes.new)
        if changes.bounced:
            self.ctx.remove_live_brokers(changes.bounced)
            self._on_broker_failure(changes.bounced)
            self.ctx.add_live_brokers(registered[b] for b in changes.bounced)
            self._on_broker_startup(changes.bounced)
        if changes.dead:
            self.ctx.remove_live_brokers(changes.dead)
            self._on_broker_failure(changes.dead)

    def _on_broker_startup(self, new_brokers: tuple[int, ...]) -> None:
        log.info("controller %d: new broker startup callback for %s", self.broker_id, list(new_brokers))
        for broker_id in new_brokers:
            self.ctx.replicas_on_offline_dirs.pop(broker_id, None)
        existing = self.ctx.live_or_shutting_down_broker_ids - set(new_brokers)
        self._send_update_metadata_request(existing)
        self._send_update_metadata_request(new_brokers, self.ctx.partitions_with_leaders)
        replicas = self.ctx.replicas_on_brokers(new_brokers)
        self.replica_state_machine.handle_state_changes(replicas, ReplicaState.ONLINE)
        self.partition_state_machine.trigger_online_partition_state_change()
        self._maybe_resume_reassignments(lambda _, assignment: any(r in new_brokers
                                                                   for r in assignment.target_replicas))
        deleting = {r.topic for r in replicas if self.topic_deletion_manager.is_topic_queued_up_for_deletion(r.topic)}
        if deleting:
            self.topic_deletion_manager.resume_deletion_for_topics(deleting)
        self._register_broker_modifications_handlers(new_brokers)

    def _on_broker_failure(self, dead_brokers: tuple[int, ...]) -> None:
        log.info("controller %d: broker failure callback for %s", self.broker_id, list(dead_brokers))
        for broker_id in dead_brokers:
            self.ctx.replicas_on_offline_dirs.pop(broker_id, None)
            self.ctx.shutting_down_broker_ids.discard(broker_id)
        self._on_replicas_become_offline(self.ctx.replicas_on_brokers(dead_brokers))
        self._unregister_broker_modifications_handlers(dead_brokers)

    def _on_replicas_become_offline(self, replicas: list[PartitionAndReplica]) -> None:
        for_deletion = [r for r in replicas if self.topic_deletion_manager.is_topic_queued_up_for_deletion(r.topic)]
        not_for_deletion = [r for r in replicas if r not in for_deletion]
        self.partition_state_machine.handle_state_changes(self.ctx.partitions_with_offline_leader,
                                                          PartitionState.OFFLINE)
        results = self.partition_state_machine.trigger_online_partition_state_change()
        self.replica_state_machine.handle_state_changes(not_for_deletion, ReplicaState.OFFLINE)
        if for_deletion:
            self.topic_deletion_manager.fail_replica_deletion(for_deletion)
        # Nothing changed leader or ISR: the brokers still have to learn that these brokers are gone.
        if not not_for_deletion and all(isinstance(r, Exception) for r in results.values()):
            self._send_update_metadata_request(self.ctx.live_or_shutting_down_broker_ids)

    def _process_broker_modification(self, event: BrokerModifications) -> None:
        if not self.active:
            return
        new = self.zk.get_broker(event.broker_id)
        old = self.ctx.live_or_shutting_down_broker(event.broker_id)
        if new is not None and old is not None and (new.broker.listeners != old.broker.listeners
                                                    or new.broker.features != old.broker.features):
            log.info("controller %d: broker %d changed its registration", self.broker_id, event.broker_id)
            self.ctx.update_broker_metadata(BrokerAndEpoch(new.broker, old.epoch))
            self._send_update_metadata_request(self.ctx.live_or_shutting_down_broker_ids)

    # -- topics ---------------------------------------------------------------------------------------------------
    def _process_topic_change(self) -> None:
        if not self.active:
            return
        topics = self.zk.get_all_topics(watch=True)
        # A known topic without partitions is one whose TopicChange a dropped connection cut short: new again.
        new_topics = {t for t in topics if t not in self.ctx.all_topics or not self.ctx.partitions_for_topic(t)}
        deleted_topics = self.ctx.all_topics - topics
        self._register_partition_modifications_handlers(new_topics)  # before the read that arms their watches
        added = self.zk.get_topic_assignments(new_topics)  # before the context changes, which a failure leaves
        self.ctx.set_all_topics(topics)
        for topic in deleted_topics:
            self.ctx.remove_topic(topic)
        self._process_topic_ids(added)
        new_partitions: list[TopicPartition] = []
        for topic, (assignment, _) in sorted(added.items()):
            for tp, replica_assignment in _full_assignment(topic, assignment).items():
                self.ctx.update_partition_full_replica_assignment(tp, replica_assignment)
                new_partitions.append(tp)
        log.info("controller %d: new topics %s, deleted topics %s", self.broker_id, sorted(new_topics),
                 sorted(deleted_topics))
        if new_partitions:
            self._on_new_partition_creation(new_partitions)

    def _on_new_partition_creation(self, partitions: list[TopicPartition]) -> None:
        log.info("controller %d: new partition creation callback for %s", self.broker_id, [str(p) for p in partitions])
        self.partition_state_machine.handle_state_changes(partitions, PartitionState.NEW)
        self.replica_state_machine.handle_state_changes(self.ctx.replicas_for_partitions(partitions), ReplicaState.NEW)
        self.partition_state_machine.handle_state_changes(partitions, PartitionState.ONLINE,
                                                          OfflinePartitionLeaderElectionStrategy(False))
        self.replica_state_machine.handle_state_changes(self.ctx.replicas_for_partitions(partitions),
                                                        ReplicaState.ONLINE)

    def _process_partition_modifications(self, event: PartitionModifications) -> None:
        if not self.active:
            return
        topic = event.topic
        found = self.zk.get_topic_assignments([topic]).get(topic)
        if found is None:
            return
        full = _full_assignment(topic, found[0])
        to_add = {tp: a for tp, a in full.items() if not self.ctx.partition_replica_assignment(tp)}
        if self.topic_deletion_manager.is_topic_queued_up_for_deletion(topic):
            if to_add:
                log.warning("controller %d: skipping adding partitions %s of topic %s: it is being deleted",
                            self.broker_id, sorted(tp.partition for tp in to_add), topic)
                self._restore_partition_replica_assignment(topic, found[0], found[1])
            return
        if to_add:
            log.info("controller %d: new partitions to be added %s", self.broker_id, [str(tp) for tp in to_add])
            for tp, assignment in to_add.items():
                self.ctx.update_partition_full_replica_assignment(tp, assignment)
            self._on_new_partition_creation(sorted(to_add))

    def _restore_partition_replica_assignment(self, topic: str, current: models.TopicAssignment, version: int) -> None:
        existing = {int(p) for p in self.zk.get_children(paths.topic_partitions(topic)) if p.isdigit()}
        kept = {tp.partition: a for tp, a in self.ctx.partition_full_replica_assignment_for_topic(topic).items()
                if tp.partition in existing}
        restored = models.TopicAssignment(
            topic, 3, {p: a.replicas for p, a in kept.items()}, self.ctx.topic_ids.get(topic, current.topic_id),
            {p: a.adding_replicas for p, a in kept.items() if a.adding_replicas},
            {p: a.removing_replicas for p, a in kept.items() if a.removing_replicas})
        self.zk.set_topic_assignment(topic, restored, self.ctx.epoch_zk_version)

    def _process_topic_deletion(self) -> None:
        if not self.active:
            return
        topics = self.zk.get_topic_deletions(watch=True)
        non_existent = topics - self.ctx.all_topics
        if non_existent:
            log.warning("controller %d: ignoring the deletion of non-existing topics %s", self.broker_id,
                        sorted(non_existent))
            self.zk.delete_topic_deletions(sorted(non_existent), self.ctx.epoch_zk_version)
        topics -= non_existent
        if not self.delete_topic_enable:
            if topics:
                log.info("controller %d: removing %s since delete.topic.enable is false", self.broker_id, sorted(topics))
                self.zk.delete_topic_deletions(sorted(topics), self.ctx.epoch_zk_version)
            return
        if topics:
            log.info("controller %d: starting topic deletion for topics %s", self.broker_id, sorted(topics))
            reassigning = {tp.topic for tp in self.ctx.partitions_being_reassigned}
            self.topic_deletion_manager.mark_topic_ineligible_for_deletion(topics & reassigning,
                                                                           "topic reassignment in progress")
            self.topic_deletion_manager.enqueue_topics_for_deletion(topics)

    # -- notifications --------------------------------------------------------------------------------------------
    def _process_isr_change_notification(self) -> None:
        if not self.active:
            return
        sequence_numbers = self.zk.get_all_isr_change_notifications(watch=True)
        try:
            partitions = sorted(self.zk.get_partitions_from_isr_change_notifications(sequence_numbers))
            known = [tp for tp in partitions if self.ctx.partition_replica_assignment(tp)]
            if known:
                self._update_leader_and_isr_cache(known)
                self._send_update_metadata_request(self.ctx.live_or_shutting_down_broker_ids, known)
                for tp in known:  # reassignments complete here too (the state-node watch may be late or gone)
                    if tp in self.ctx.partitions_being_reassigned:
                        self._maybe_complete_reassignment(tp)
        finally:
            self.zk.delete_isr_change_notifications(self.ctx.epoch_zk_version, sequence_numbers)

    def _process_log_dir_event_notification(self) -> None:
        if not self.active:
            return
        sequence_numbers = self.zk.get_all_log_dir_event_notifications(watch=True)
        try:
            broker_ids = self.zk.get_broker_ids_from_log_dir_events(sequence_numbers)
            log.info("controller %d: handling log directory failure for brokers %s", self.broker_id, broker_ids)
            self.replica_state_machine.handle_state_changes(self.ctx.replicas_on_brokers(broker_ids),
                                                            ReplicaState.ONLINE)
        finally:
            self.zk.delete_log_dir_event_notifications(self.ctx.epoch_zk_version, sequence_numbers)

    # -- broker responses -----------------------------------------------------------------------------------------
    def _process_leader_and_isr_response(self, event: LeaderAndIsrResponseReceived) -> None:
        if not self.active:
            return
        error = requests.top_level_error(event.response)
        if error != NONE:
            log.error("controller %d: error %d in the LeaderAndIsr response of broker %d", self.broker_id, error,
                      event.broker_id)
            return
        names = {topic_id: topic for topic, topic_id in self.ctx.topic_ids.items()}
        errors = requests.leader_and_isr_partition_errors(event.response, names)
        offline = {tp for tp, code in errors.items() if code == KAFKA_STORAGE_ERROR}
        online = {tp for tp, code in errors.items() if code == NONE}
        previous = self.ctx.replicas_on_offline_dirs.get(event.broker_id, set())
        current = (previous - online) | offline
        self.ctx.replicas_on_offline_dirs[event.broker_id] = current
        newly_offline = current - previous
        if newly_offline:
            log.info("controller %d: marking replicas %s on broker %d offline (KAFKA_STORAGE_ERROR)", self.broker_id,
                     sorted(str(tp) for tp in newly_offline), event.broker_id)
            self._on_replicas_become_offline([PartitionAndReplica(tp, event.broker_id) for tp in sorted(newly_offline)])

    def _process_update_metadata_response(self, event: UpdateMetadataResponseReceived) -> None:
        if self.active and (error := requests.top_level_error(event.response)) != NONE:
            log.error("controller %d: error %d in the UpdateMetadata response of broker %d", self.broker_id, error,
                      event.broker_id)

    def _process_stop_replica_response(self, event: TopicDeletionStopReplicaResponseReceived) -> None:
        if not self.active:
            return
        errors = {tp: code for tp, code in event.partition_errors.items()
                  if self.ctx.is_topic_deletion_in_progress(tp.topic)}
        in_error = set(errors) if event.error_code != NONE else {tp for tp, code in errors.items() if code != NONE}
        self.topic_deletion_manager.fail_replica_deletion([PartitionAndReplica(tp, event.broker_id)
                                                           for tp in sorted(in_error)])
        deleted = sorted(set(errors) - in_error)
        if deleted:
            self.topic_deletion_manager.complete_replica_deletion([PartitionAndReplica(tp, event.broker_id)
                                                                   for tp in deleted])

    # -- reassignment (KIP-455; kafka-cluster.md 2.7) ------------------------------------------------------------
    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, Sequence[int] | None]
                                      ) -> Future[dict[TopicPartition, Exception | None]]:
        """AlterPartitionReassignments: target replicas per partition, None to cancel. The future gets None (accepted)
        or the error per partition (InvalidReplicaAssignmentError, UnknownTopicOrPartitionError,
        NoReassignmentInProgressError, ReassignmentFailedError), or raises ControllerMovedError (NOT_CONTROLLER)."""
        result: Future[dict[TopicPartition, Exception | None]] = Future()
        self.put(ApiPartitionReassignment({tp: None if r is None else tuple(r) for tp, r in reassignments.items()},
                                          result))
        return result

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                     ) -> Future[dict[TopicPartition, ReplicaAssignment]]:
        """ListPartitionReassignments: the ongoing reassignments (all, or among ``partitions``) with their full
        replica set and adding/removing replicas; raises ControllerMovedError when not the controller."""
        result: Future[dict[TopicPartition, ReplicaAssignment]] = Future()
        self.put(ListPartitionReassignments(None if partitions is None else frozenset(partitions), result))
        return result

    @property
    def _reassignment_handlers(self) -> dict[type, Callable[[ControllerEvent], None]]:
        return {
            ZkPartitionReassignment: lambda _: self._process_zk_partition_reassignment(),
            ApiPartitionReassignment: self._process_api_partition_reassignment,  # type: ignore[dict-item]
            ListPartitionReassignments: self._process_list_partition_reassignments,  # type: ignore[dict-item]
            PartitionReassignmentIsrChange: self._process_partition_reassignment_isr_change,  # type: ignore[dict-item]
        }

    def _initialize_partition_reassignments(self) -> None:
        """At failover: /admin/reassign_partitions first (it supplants API reassignments of the same partitions),
        then the reassignments the topic znodes record (adding/removing replicas) resume."""
        resumed = self._process_zk_partition_reassignment()
        self._maybe_resume_reassignments(lambda tp, _: tp not in resumed)

    def _maybe_resume_reassignments(self, should_resume: Callable[[TopicPartition, ReplicaAssignment], bool]) -> None:
        for tp in sorted(self.ctx.partitions_being_reassigned):
            assignment = self.ctx.partition_full_replica_assignment(tp)
            if should_resume(tp, assignment):
                try:
                    self._on_partition_reassignment(tp, assignment)
                except ControllerMovedError:
                    raise
                except Exception:  # Kafka lets it fail the failover; one partition should not cost the controller
                    log.exception("controller %d: error resuming the reassignment of %s", self.broker_id, tp)

    def _process_zk_partition_reassignment(self) -> set[TopicPartition]:
        """/admin/reassign_partitions: watch its creation; if it is there, start each entry (not validated, as in
        Kafka) and drop the entries that failed. Returns the partitions started.

        Only a creation enqueues this event, as in Kafka: deleting the node, the controller enqueues it itself. A
        deletion watch as well made two events, and a node written again before both ran was reassigned twice
        (phase A twice: two leader epoch bumps where Kafka makes one)."""
        if not self.active or not self.zk.register_change_handler_and_check_existence(
                paths.REASSIGN_PARTITIONS, ZNodeChangeHandler(on_created=lambda: self.put(ZkPartitionReassignment()))):
            return set()
        results: dict[TopicPartition, Exception | None] = {}
        to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in sorted(self.zk.get_partition_reassignment().items()):
            built = build_reassignment(self.ctx.partition_full_replica_assignment(tp), target)
            if built is None:
                results[tp] = NoReassignmentInProgressError(f"no reassignment of {tp} is in progress")
            else:
                to_reassign[tp] = built
        results.update(self._maybe_trigger_partition_reassignment(to_reassign))
        failed = {tp: exc for tp, exc in results.items() if exc is not None}
        if failed:
            log.warning("controller %d: failed reassignments through ZooKeeper: %s", self.broker_id,
                        {str(tp): str(exc) for tp, exc in sorted(failed.items())})
            self._maybe_remove_from_zk_reassignment(lambda tp, _: tp in failed)
        return {tp for tp, exc in results.items() if exc is None}

    def _process_api_partition_reassignment(self, event: ApiPartitionReassignment) -> None:
        try:
            if not self.active:
                raise ControllerMovedError("this broker is not the controller")
            results: dict[TopicPartition, Exception | None] = {}
            to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
            for tp, target in event.reassignments.items():
                current = self.ctx.partition_full_replica_assignment(tp)
                error = validate_replicas(current, target, self.ctx.live_broker_ids) if target is not None else None
                built = build_reassignment(current, target) if error is None else None
                if error is None and built is None:
                    error = NoReassignmentInProgressError(f"no reassignment of {tp} is in progress")
                if error is not None:
                    results[tp] = error
                elif built is not None:
                    to_reassign[tp] = built
            # The latest reassignment wins: these partitions leave /admin/reassign_partitions.
            self._maybe_remove_from_zk_reassignment(lambda tp, _: tp in to_reassign)
            results.update(self._maybe_trigger_partition_reassignment(to_reassign))
        except Exception as exc:
            event.result.set_exception(exc)
            if isinstance(exc, ControllerMovedError) and self.active:
                raise
            return
        event.result.set_result(results)

    def _process_list_partition_reassignments(self, event: ListPartitionReassignments) -> None:
        if not self.active:
            event.result.set_exception(ControllerMovedError("this broker is not the controller"))
            return
        wanted = event.partitions if event.partitions is not None else self.ctx.partitions_being_reassigned
        ongoing = {tp: self.ctx.partition_full_replica_assignment(tp) for tp in sorted(wanted)}
        event.result.set_result({tp: a for tp, a in ongoing.items() if a.is_being_reassigned})

    def _process_partition_reassignment_isr_change(self, event: PartitionReassignmentIsrChange) -> None:
        if self.active and event.partition in self.ctx.partitions_being_reassigned:
            self._maybe_complete_reassignment(event.partition)

    def _maybe_complete_reassignment(self, tp: TopicPartition) -> None:
        reassignment = self.ctx.partition_full_replica_assignment(tp)
        if self._is_reassignment_complete(tp, reassignment):
            log.info("controller %d: target replicas %s have all caught up with the leader of reassigning partition "
                     "%s", self.broker_id, list(reassignment.target_replicas), tp)
            self._on_partition_reassignment(tp, reassignment)

    def _maybe_trigger_partition_reassignment(self, reassignments: Mapping[TopicPartition, ReplicaAssignment]
                                              ) -> dict[TopicPartition, Exception | None]:
        results: dict[TopicPartition, Exception | None] = {}
        for tp, reassignment in reassignments.items():
            if self.topic_deletion_manager.is_topic_queued_up_for_deletion(tp.topic):
                log.info("controller %d: skipping the reassignment of %s: the topic is being deleted",
                         self.broker_id, tp)
                results[tp] = UnknownTopicOrPartitionError("The partition does not exist.")
            elif not self.ctx.partition_replica_assignment(tp):
                results[tp] = UnknownTopicOrPartitionError("The partition does not exist.")
            else:
                try:
                    self._on_partition_reassignment(tp, reassignment)
                    results[tp] = None
                except ControllerMovedError:
                    log.info("controller %d: failed completing the reassignment of %s: the controller moved",
                             self.broker_id, tp)
                    raise
                except Exception as exc:
                    log.exception("controller %d: error completing the reassignment of %s", self.broker_id, tp)
                    results[tp] = ReassignmentFailedError(f"reassigning {tp} failed: {exc}")
        return results

    def _on_partition_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        """KafkaController.onPartitionReassignment. Phase U: RS, AR and RR to ZooKeeper, then memory. Phase A (the
        target replicas are not all in the ISR): bump the leader epoch, LeaderAndIsr to RS, start AR. Phase B: AR
        online, RS = TRS, move the leader if it is not in TRS or dead, take RR offline and delete them, RS = TRS
        in ZooKeeper, drop the partition from /admin/reassign_partitions, UpdateMetadata to all."""
        self.topic_deletion_manager.mark_topic_ineligible_for_deletion({tp.topic}, "topic reassignment in progress")
        self._update_current_reassignment(tp, reassignment)
        if not self._is_reassignment_complete(tp, reassignment):
            self._update_leader_epoch_and_send_request(tp, reassignment)  # A1
            for replica in reassignment.adding_replicas:  # A2
                self.replica_state_machine.handle_state_changes([PartitionAndReplica(tp, replica)], ReplicaState.NEW)
            return
        self.replica_state_machine.handle_state_changes(  # B1
            [PartitionAndReplica(tp, r) for r in reassignment.adding_replicas], ReplicaState.ONLINE)
        completed = ReplicaAssignment(reassignment.target_replicas)
        self.ctx.update_partition_full_replica_assignment(tp, completed)  # B2
        self._move_reassigned_partition_leader_if_required(tp, completed)  # B3
        self._stop_removed_replicas_of_reassigned_partition(tp, reassignment.removing_replicas)  # B4, B5
        self._update_replica_assignment_for_partition(tp, completed)  # B6
        self._remove_partition_from_reassigning_partitions(tp, completed)  # B7
        self._send_update_metadata_request(self.ctx.live_or_shutting_down_broker_ids, [tp])  # B8
        self.topic_deletion_manager.resume_deletion_for_topics({tp.topic})
        log.info("controller %d: reassignment of %s to %s completed", self.broker_id, tp, list(completed.replicas))

    def _update_current_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        """U1-U3: a changed assignment goes to ZooKeeper before memory (ORS survives only there); replicas of a
        superseded reassignment that left RS are stopped and deleted. The partition's state node is watched
        (the ISR growing completes the reassignment, as before IBP 2.7-IV2)."""
        current = self.ctx.partition_full_replica_assignment(tp)
        if current != reassignment:
            log.info("controller %d: updating the assignment of %s from %s to %s", self.broker_id, tp, current,
                     reassignment)
            self._update_replica_assignment_for_partition(tp, reassignment)
            self.ctx.update_partition_full_replica_assignment(tp, reassignment)
            unneeded = [r for r in current.replicas if r not in reassignment.replicas]
            if unneeded:
                self._stop_removed_replicas_of_reassigned_partition(tp, unneeded)
        self.zk.register_change_handler(
            paths.partition_state(tp.topic, tp.partition),
            ZNodeChangeHandler(on_data_change=lambda: self.put(PartitionReassignmentIsrChange(tp))))
        self.ctx.partitions_being_reassigned.add(tp)

    def _is_reassignment_complete(self, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
        """Not being reassigned, or every target replica in the ISR read from ZooKeeper (which arms the watch)."""
        if not assignment.is_being_reassigned:
            return True
        info = self.zk.get_topic_partition_states([tp]).get(tp)
        return info is not None and set(assignment.target_replicas) <= set(info.leader_and_isr.isr)

    def _move_reassigned_partition_leader_if_required(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        info = self.ctx.partition_leadership_info(tp)
        leader = info.leader_and_isr.leader if info is not None else -1
        if leader in assignment.replicas and self.ctx.is_replica_online(leader, tp):
            log.info("controller %d: leader %d of reassigned partition %s is in the new replicas %s and alive",
                     self.broker_id, leader, tp, list(assignment.replicas))
            self._update_leader_epoch_and_send_request(tp, assignment)
            return
        log.info("controller %d: leader %d of reassigned partition %s is %s; electing one of %s", self.broker_id,
                 leader, tp, "dead" if leader in assignment.replicas else "not in the new replicas",
                 list(assignment.replicas))
        self.partition_state_machine.handle_state_changes([tp], PartitionState.ONLINE,
                                                          ReassignPartitionLeaderElectionStrategy())

    def _stop_removed_replicas_of_reassigned_partition(self, tp: TopicPartition, removed: Sequence[int]) -> None:
        """Offline (StopReplica, out of the ISR), then deleted (StopReplica delete=true); not waiting for it."""
        replicas = [PartitionAndReplica(tp, r) for r in removed]
        for target in (ReplicaState.OFFLINE, ReplicaState.DELETION_STARTED, ReplicaState.DELETION_SUCCESSFUL,
                       ReplicaState.NON_EXISTENT):
            self.replica_state_machine.handle_state_changes(replicas, target)

    def _update_replica_assignment_for_partition(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """The topic znode with this partition's RS/AR/RR and the others' from memory, fenced."""
        full = {**self.ctx.partition_full_replica_assignment_for_topic(tp.topic), tp: assignment}
        topic_assignment = models.TopicAssignment(
            tp.topic, 3, {p.partition: a.replicas for p, a in full.items()}, self.ctx.topic_ids.get(tp.topic),
            {p.partition: a.adding_replicas for p, a in full.items() if a.adding_replicas},
            {p.partition: a.removing_replicas for p, a in full.items() if a.removing_replicas})
        self.zk.set_topic_assignment(tp.topic, topic_assignment, self.ctx.epoch_zk_version)
        log.info("controller %d: updated the assignment of %s to %s", self.broker_id, tp, assignment)

    def _update_leader_epoch(self, tp: TopicPartition) -> LeaderIsrAndControllerEpoch:
        """Leader and ISR unchanged, leader epoch + 1, so the replicas take the new replica set (updateLeaderEpoch)."""
        while True:
            info = self.zk.get_topic_partition_states([tp]).get(tp)
            if info is None:
                raise StateChangeFailedError(f"cannot update the leader epoch of {tp}: its state node is missing")
            if info.controller_epoch > self.ctx.epoch:
                raise StateChangeFailedError(
                    f"the state of {tp} was written by a controller with epoch {info.controller_epoch}, above ours "
                    f"({self.ctx.epoch}); aborting the state change")
            update = self.zk.update_partition_states({tp: info.leader_and_isr.new_epoch()}, self.ctx.epoch,
                                                     self.ctx.epoch_zk_version)
            outcome = update.finished.get(tp)
            if isinstance(outcome, Exception):
                raise outcome
            if outcome is not None:
                leadership = LeaderIsrAndControllerEpoch(outcome, self.ctx.epoch)
                self.ctx.put_partition_leadership_info(tp, leadership)
                log.info("controller %d: updated the leader epoch of %s to %d (partition epoch %d)", self.broker_id,
                         tp, outcome.leader_epoch, outcome.partition_epoch)
                return leadership

    def _update_leader_epoch_and_send_request(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """LeaderAndIsr with the bumped epoch and the assignment to ORS (isNew=false) and AR (isNew=true)."""
        leadership = self._update_leader_epoch(tp)
        try:
            self.batch.new_batch()
            self.batch.add_leader_and_isr_request_for_brokers(assignment.origin_replicas, tp, leadership, assignment,
                                                              is_new=False)
            self.batch.add_leader_and_isr_request_for_brokers(assignment.adding_replicas, tp, leadership, assignment,
                                                              is_new=True)
            self.batch.send_requests_to_brokers(self.ctx.epoch)
        except Exception:
            self.batch.clear()
            raise

    def _remove_partition_from_reassigning_partitions(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        if tp not in self.ctx.partitions_being_reassigned:
            raise StateChangeFailedError(f"cannot remove reassigning partition {tp}: it is not being reassigned")
        self.zk.unregister_change_handler(paths.partition_state(tp.topic, tp.partition))
        self._maybe_remove_from_zk_reassignment(lambda p, replicas: p == tp and tuple(replicas) == assignment.replicas)
        self.ctx.partitions_being_reassigned.discard(tp)

    def _maybe_remove_from_zk_reassignment(self, should_remove: Callable[[TopicPartition, Sequence[int]], bool]
                                           ) -> None:
        """Drop entries from /admin/reassign_partitions; delete the node once empty (and watch for the next)."""
        if not self.zk.reassign_partitions_in_progress():
            return
        current = self.zk.get_partition_reassignment()
        remaining = {tp: r for tp, r in current.items() if not should_remove(tp, r)}
        if len(remaining) == len(current) and current:
            return
        log.info("controller %d: removing partitions %s from %s", self.broker_id,
                 sorted(str(tp) for tp in current if tp not in remaining), paths.REASSIGN_PARTITIONS)
        if not remaining:
            log.info("controller %d: no more partitions need to be reassigned; deleting %s", self.broker_id,
                     paths.REASSIGN_PARTITIONS)
            self.zk.delete_partition_reassignment(self.ctx.epoch_zk_version)
            self.put(ZkPartitionReassignment())  # watch for the next one
        else:
            self.zk.set_or_create_partition_reassignment(remaining, self.ctx.epoch_zk_version)

    # -- controlled shutdown ----------------------------------------------------------------------------------
    def _process_controlled_shutdown(self, event: ControlledShutdown) -> None:
        try:
            remaining = self._do_controlled_shutdown(event.broker_id, event.broker_epoch)
        except Exception as exc:
            event.result.set_exception(exc)
            if isinstance(exc, ControllerMovedError) and self.active:
                raise
            return
        event.result.set_result(remaining)

    def _do_controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        if not self.active:
            raise ControllerMovedError("this broker is not the controller")
        cached = self.ctx.live_broker_id_and_epochs.get(broker_id)
        if broker_epoch != -1 and cached is not None and broker_epoch < cached:
            raise StaleBrokerEpochError(f"broker {broker_id}'s epoch {broker_epoch} is older than {cached}")
        if broker_id not in self.ctx.live_or_shutting_down_broker_ids:
            raise BrokerNotAvailableError(f"broker {broker_id} is not alive")
        self.ctx.shutting_down_broker_ids.add(broker_id)
        log.info("controller %d: shutting down brokers %s", self.broker_id, sorted(self.ctx.shutting_down_broker_ids))
        to_act_on = [tp for tp in self.ctx.partitions_on_broker(broker_id)
                     if len(self.ctx.partition_replica_assignment(tp)) > 1
                     and self.ctx.partition_leadership_info(tp) is not None
                     and not self.topic_deletion_manager.is_topic_queued_up_for_deletion(tp.topic)]
        led = [tp for tp in to_act_on if self.ctx.partition_leader_and_isr(tp).leader == broker_id]  # type: ignore[union-attr]
        followed = [tp for tp in to_act_on if tp not in led]
        self.partition_state_machine.handle_state_changes(led, PartitionState.ONLINE,
                                                          ControlledShutdownPartitionLeaderElectionStrategy())
        self.batch.new_batch()
        for tp in followed:
            self.batch.add_stop_replica_request_for_brokers([broker_id], tp, delete_partition=False)
        self.batch.send_requests_to_brokers(self.ctx.epoch)
        self.replica_state_machine.handle_state_changes([PartitionAndReplica(tp, broker_id) for tp in followed],
                                                        ReplicaState.OFFLINE)
        return set(self.ctx.partition_leaders_on_broker(broker_id))

    # -- preferred replica election and auto rebalance ------------------------------------------------------
    @functools.cached_property
    def _preferred_election_handlers(self) -> dict[type, Callable[[ControllerEvent], None]]:
        return {
            ReplicaLeaderElection: self._process_replica_leader_election,  # type: ignore[dict-item]
            AutoPreferredReplicaLeaderElection: self._process_auto_preferred_replica_leader_election,  # type: ignore[dict-item]
        }

    def elect_leaders(self, partitions: Iterable[TopicPartition], election_type: ElectionType
                      ) -> Future[dict[TopicPartition, int | Exception]]:
        """An ElectLeaders request (Kafka's KafkaController.electLeaders): the future gets, per partition, the
        leader it elected or a kcli.broker.errors error (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE,
        ELIGIBLE_LEADERS_NOT_AVAILABLE, INVALID_TOPIC_EXCEPTION, UNKNOWN_TOPIC_OR_PARTITION, NOT_CONTROLLER)."""
        result: Future[dict[TopicPartition, int | Exception]] = Future()
        self.put(ReplicaLeaderElection(frozenset(partitions), election_type, ElectionTrigger.ADMIN, result))
        return result

    def _start_replica_elections(self) -> None:
        """End of failover: a pending /admin/preferred_replica_election (the exists watch armed either way), then
        the first auto-rebalance check 5 s later."""
        self._process_replica_leader_election(
            ReplicaLeaderElection(None, ElectionType.PREFERRED, ElectionTrigger.ZK))
        if self.auto_leader_rebalance_enable:
            self._schedule_auto_leader_rebalance(AUTO_REBALANCE_FIRST_DELAY_S)

    def _process_replica_leader_election(self, event: ReplicaLeaderElection) -> None:
        """Kafka's processReplicaLeaderElection; an ElectLeaders caller always gets an answer."""
        def answer(outcome: Callable[[TopicPartition], Exception]) -> None:
            if event.result is not None and not event.result.done():
                event.result.set_result({tp: outcome(tp) for tp in event.partitions or ()})

        if not self.active:
            answer(lambda _: NotControllerError("this broker is not the controller"))
            return
        try:
            results = self._replica_leader_election(event.partitions, event.election_type, event.trigger)
        except ControllerMovedError:
            answer(lambda _: NotControllerError("the controller moved to another broker"))
            raise
        except Exception as exc:
            message = f"the election failed: {exc}"
            answer(lambda _: BrokerError(message))
            raise
        if event.result is not None and not event.result.done():
            event.result.set_result(results)

    def _replica_leader_election(self, partitions: frozenset[TopicPartition] | None, election_type: ElectionType,
                                 trigger: ElectionTrigger) -> dict[TopicPartition, int | Exception]:
        if trigger is not ElectionTrigger.ADMIN:
            # The exists watch is (re-)armed here, and the check comes free with it.
            handler = ZNodeChangeHandler(on_created=lambda: self.put(
                ReplicaLeaderElection(None, ElectionType.PREFERRED, ElectionTrigger.ZK)))
            if not self.zk.register_change_handler_and_check_existence(paths.PREFERRED_REPLICA_ELECTION, handler):
                return {}
            partitions = self._read_preferred_replica_election()
        wanted = set(partitions or ())
        known = wanted & set(self.ctx.all_partitions)
        unknown = wanted - known
        for tp in sorted(unknown):
            log.info("controller %d: skipping replica leader election (%s) for partition %s by %s since it doesn't "
                     "exist", self.broker_id, election_type.name, tp, trigger)
        being_deleted = {tp for tp in known if self.topic_deletion_manager.is_topic_queued_up_for_deletion(tp.topic)}
        if being_deleted:
            log.warning("controller %d: skipping replica leader election (%s) for partitions %s by %s since the "
                        "respective topics are being deleted", self.broker_id, election_type.name,
                        sorted(str(tp) for tp in being_deleted), trigger)
        electable = {tp for tp in known - being_deleted if self._needs_election(tp, election_type)}
        already_valid = known - being_deleted - electable
        results: dict[TopicPartition, int | Exception] = {}
        for tp, outcome in self._on_replica_election(electable, election_type, trigger).items():
            if isinstance(outcome, LeaderAndIsr):
                results[tp] = outcome.leader
            elif isinstance(outcome, StateChangeFailedError):
                results[tp] = (PreferredLeaderNotAvailableError(outcome.reason)
                               if election_type is ElectionType.PREFERRED
                               else EligibleLeadersNotAvailableError(outcome.reason))
            elif isinstance(outcome, BrokerError):
                results[tp] = outcome
            else:  # a ZooKeeper failure and the like: UNKNOWN_SERVER_ERROR, as ApiError.fromThrowable gives
                results[tp] = BrokerError(str(outcome))
        for tp in already_valid:
            results[tp] = ElectionNotNeededError("Leader election not needed for topic partition.")
        for tp in being_deleted:
            results[tp] = InvalidTopicError("The topic is being deleted")
        for tp in unknown:
            results[tp] = UnknownTopicOrPartitionError("The partition does not exist.")
        return results

    def _read_preferred_replica_election(self) -> set[TopicPartition]:
        try:
            return self.zk.get_preferred_replica_election()
        except ZnodeFormatError as exc:
            # Kafka would fail the event and leave the node, which then blocks every later request: drop it.
            log.error("controller %d: ignoring the malformed %s: %s", self.broker_id,
                      paths.PREFERRED_REPLICA_ELECTION, exc)
            return set()

    def _needs_election(self, tp: TopicPartition, election_type: ElectionType) -> bool:
        """PREFERRED: the leader is not the first assigned replica. UNCLEAN: no leader, or a dead one."""
        current = self.ctx.partition_leader_and_isr(tp)
        leader = current.leader if current is not None else NO_LEADER
        if election_type is ElectionType.PREFERRED:
            assignment = self.ctx.partition_replica_assignment(tp)
            return not assignment or leader != assignment[0]
        return leader == NO_LEADER or leader not in self.ctx.live_broker_ids

    def _on_replica_election(self, partitions: set[TopicPartition], election_type: ElectionType,
                             trigger: ElectionTrigger) -> dict[TopicPartition, LeaderAndIsr | Exception]:
        """Kafka's onReplicaElection: PREFERRED -> Online with the Preferred strategy; UNCLEAN -> Online with the
        Offline strategy, unclean allowed only when an admin asked. The ZooKeeper trigger's node goes after."""
        log.info("controller %d: starting replica leader election (%s) for partitions %s triggered by %s",
                 self.broker_id, election_type.name, ",".join(str(tp) for tp in sorted(partitions)), trigger)
        try:
            strategy: elections.PartitionLeaderElectionStrategy = (
                PreferredReplicaPartitionLeaderElectionStrategy() if election_type is ElectionType.PREFERRED
                else OfflinePartitionLeaderElectionStrategy(allow_unclean=trigger is ElectionTrigger.ADMIN))
            # (an unclean outcome is logged as possible data loss by the partition state machine)
            results = self.partition_state_machine.handle_state_changes(sorted(partitions), PartitionState.ONLINE,
                                                                        strategy)
            for tp, outcome in sorted(results.items()):
                if not isinstance(outcome, LeaderAndIsr) and trigger is not ElectionTrigger.ADMIN:
                    log.error("controller %d: error completing replica leader election (%s) for partition %s: %s",
                              self.broker_id, election_type.name, tp, outcome)
            return results
        finally:
            if trigger is not ElectionTrigger.ADMIN:
                self._remove_partitions_from_preferred_replica_election(partitions, trigger is ElectionTrigger.AUTO)

    def _remove_partitions_from_preferred_replica_election(self, partitions: set[TopicPartition],
                                                           auto: bool) -> None:
        for tp in sorted(partitions):
            current = self.ctx.partition_leader_and_isr(tp)
            assignment = self.ctx.partition_replica_assignment(tp)
            leader = current.leader if current is not None else NO_LEADER
            if assignment and leader == assignment[0]:
                log.info("controller %d: partition %s completed preferred replica leader election; the leader is %d",
                         self.broker_id, tp, leader)
            else:
                log.warning("controller %d: partition %s failed to complete preferred replica leader election to %s; "
                            "the leader is still %d", self.broker_id, tp, assignment[0] if assignment else None,
                            leader)
        if not auto:
            self.zk.delete_preferred_replica_election(self.ctx.epoch_zk_version)
            # Re-arm the exists watch (and take a node created meanwhile).
            self.put(ReplicaLeaderElection(None, ElectionType.PREFERRED, ElectionTrigger.ZK))

    def _process_auto_preferred_replica_leader_election(self, event: AutoPreferredReplicaLeaderElection) -> None:
        if not self.active or event.epoch != self.ctx.epoch:
            return  # a timer of an earlier term: the current one has its own
        try:
            log.info("controller %d: processing automatic preferred replica leader election", self.broker_id)
            self._check_and_trigger_auto_leader_rebalance()
        finally:
            self._schedule_auto_leader_rebalance(self.leader_imbalance_check_interval_seconds)

    def _check_and_trigger_auto_leader_rebalance(self) -> None:
        """For each broker whose share of not-led preferred partitions is above
        leader.imbalance.per.broker.percentage, a preferred election for those whose preferred replica is live
        and in the ISR. Partitions of topics being deleted are left out; shutting-down brokers are not live."""
        assignments = {tp: self.ctx.partition_replica_assignment(tp) for tp in self.ctx.all_partitions
                       if not self.topic_deletion_manager.is_topic_queued_up_for_deletion(tp.topic)}
        leaders = {tp: info.leader for tp in assignments
                   if (info := self.ctx.partition_leader_and_isr(tp)) is not None}
        for imbalance in elections.leader_imbalance(assignments, leaders):
            log.debug("controller %d: leader imbalance ratio for broker %d is %.3f (%s)", self.broker_id,
                      imbalance.broker_id, imbalance.ratio, [str(tp) for tp in imbalance.not_led])
            if imbalance.ratio > self.leader_imbalance_per_broker_percentage / 100:
                candidates = {tp for tp in imbalance.not_led
                              if not self.topic_deletion_manager.is_topic_queued_up_for_deletion(tp.topic)
                              and tp.topic in self.ctx.all_topics and self._can_preferred_replica_be_leader(tp)}
                if candidates:
                    self._on_replica_election(candidates, ElectionType.PREFERRED, ElectionTrigger.AUTO)

    def _can_preferred_replica_be_leader(self, tp: TopicPartition) -> bool:
        current = self.ctx.partition_leader_and_isr(tp)
        assignment = self.ctx.partition_replica_assignment(tp)
        live = [r for r in assignment if self.ctx.is_replica_online(r, tp)]
        return current is not None and elections.preferred_replica_partition_leader_election(
            assignment, current.isr, live) is not None

    def _schedule_auto_leader_rebalance(self, delay_s: float) -> None:
        self._cancel_auto_leader_rebalance()
        event = AutoPreferredReplicaLeaderElection(self.ctx.epoch)
        timer = threading.Timer(delay_s, self.put, args=(event,))
        timer.name = f"auto-leader-rebalance-task-{self.broker_id}"
        timer.daemon = True
        self._auto_rebalance_timer = timer
        timer.start()

    def _cancel_auto_leader_rebalance(self) -> None:
        timer, self._auto_rebalance_timer = self._auto_rebalance_timer, None
        if timer is not None:
            timer.cancel()


def _full_assignment(topic: str, assignment: models.TopicAssignment) -> dict[TopicPartition, ReplicaAssignment]:
    return {TopicPartition(topic, p): ReplicaAssignment(tuple(replicas), tuple(assignment.adding_replicas.get(p, ())),
                                                        tuple(assignment.removing_replicas.get(p, ())))
            for p, replicas in sorted(assignment.partitions.items())}
