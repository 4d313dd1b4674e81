"""ControllerRunner: runs a broker's KafkaController alongside its BrokerRegistration.

The controller runs the election itself, on its event thread (KafkaController.elect); the registration keeps the
broker's own node and its session, whose events the runner turns into controller events: an expired session into
Expire, a new one (the broker registered again in it) into RegisterBrokerAndReelect, a reconnection within the
same session into Reelect. Once shut down, the runner gives up /controller if this broker still holds it, at
once or on the next reconnection, and this broker bids no more.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from kcli.broker.controller.channel_manager import DEFAULT_SOCKET_TIMEOUT_S
from kcli.broker.controller.context import ReplicaAssignment
from kcli.broker.controller.controller import KafkaController
from kcli.broker.controller.elections import ElectionType
from kcli.broker.controller.events import Expire, Reelect, RegisterBrokerAndReelect
from kcli.errors import KcliError
from kcli.broker.errors import NotControllerError
from kcli.zk import paths
from kcli.zk.kafka_zk_client import ControllerMovedError, KafkaZkClient
from kcli.zk.models import TopicPartition
from kcli.zk.registration import RECONNECTED, SESSION_EXPIRED, SESSION_REESTABLISHED, BrokerRegistration

log = logging.getLogger("kcli.controller")


def _not_running() -> Future[Any]:
    result: Future[Any] = Future()
    result.set_exception(ControllerMovedError("the controller is not running on this broker"))
    return result


def _config_value(config: Any, key: str, default: Any) -> Any:
    values = getattr(config, "values", None)
    if isinstance(values, dict) and values.get(key) is not None:
        return values[key]
    return default


class ControllerRunner:
    """``start()`` after the registration's ``start()``; ``shutdown()`` before its ``stop()``.

    ``config`` is the broker's BrokerConfig (``delete.topic.enable``, ``unclean.leader.election.enable``,
    ``inter.broker.listener.name``, ``auto.leader.rebalance.enable``, ``leader.imbalance.check.interval.seconds``
    and ``leader.imbalance.per.broker.percentage`` are read from it) or None for Kafka's defaults."""

    def __init__(self, config: Any, broker_id: int, registration: BrokerRegistration, *,
                 socket_timeout: float = DEFAULT_SOCKET_TIMEOUT_S, security: Any = None) -> None:
        self.broker_id = broker_id
        self.registration = registration
        self.delete_topic_enable = bool(_config_value(config, "delete.topic.enable", True))
        self.unclean_leader_election_enable = bool(_config_value(config, "unclean.leader.election.enable", False))
        self.inter_broker_listener_name = _config_value(config, "inter.broker.listener.name", None)
        # kcli.broker.security.inter_broker.InterBrokerSecurity: the listener (also when only
        # security.inter.broker.protocol names it) and its TLS and SASL for the request threads
        self.security = security
        if security is not None and security.listener_name is not None:
            self.inter_broker_listener_name = security.listener_name
        self.auto_leader_rebalance_enable = bool(_config_value(config, "auto.leader.rebalance.enable", True))
        self.leader_imbalance_check_interval_seconds = int(
            _config_value(config, "leader.imbalance.check.interval.seconds", 300))
        self.leader_imbalance_per_broker_percentage = int(
            _config_value(config, "leader.imbalance.per.broker.percentage", 10))
        self.socket_timeout = socket_timeout
        self.controller: KafkaController | None = None
        self._lock = threading.Lock()
        self._resigned = False  # shut down: never a candidate again; /controller is given up when seen ours
        self._zk: KafkaZkClient | None = None
        self._listening = False
        self._controller_id_listeners: list[Callable[[int], None]] = []

    def on_controller_id(self, callback: Callable[[int], None]) -> None:
        """``callback(controller_id)`` (-1: none) each time the controller's election learns who holds
        /controller, on the controller's event thread (the broker's MetadataCache follows it)."""
        self._controller_id_listeners.append(callback)

    def _controller_id_changed(self, controller_id: int) -> None:
        for callback in list(self._controller_id_listeners):
            callback(controller_id)

    def start(self) -> None:
        with self._lock:
            if self.controller is not None:
                return
            zk = KafkaZkClient.for_registration(self.registration)
            self._zk = zk
            self._resigned = False
            self.controller = KafkaController(
                self.broker_id, zk, delete_topic_enable=self.delete_topic_enable,
                unclean_leader_election_enable=self.unclean_leader_election_enable,
                inter_broker_listener_name=self.inter_broker_listener_name, socket_timeout=self.socket_timeout,
                security=self.security,
                auto_leader_rebalance_enable=self.auto_leader_rebalance_enable,
                leader_imbalance_check_interval_seconds=self.leader_imbalance_check_interval_seconds,
                leader_imbalance_per_broker_percentage=self.leader_imbalance_per_broker_percentage,
                on_controller_id=self._controller_id_changed)
            # listening first: no session change between the Startup election and the listener is missed
            if not self._listening:
                self.registration.on_session_event(self._on_session_event)
                self._listening = True
            elected = self.controller.startup()
        # Kafka queues Startup and goes on; waiting for the first election (bounded by the session timeout) has the
        # broker know its controller once started, as its registration did when it held the election.
        try:
            elected.result(timeout=self.registration.session_timeout_ms / 1000)
        except Exception as exc:  # a timeout: the election goes on on the event thread
            log.warning("controller %d: the first election is not over yet (%r)", self.broker_id, exc)

    def shutdown(self) -> None:
        """Resign (if active), stop the controller's threads, then give up /controller at once so that another
        broker takes over while this one finishes stopping (Kafka holds it until its session closes, the last
        step); safe to call twice. Without a connection now, the next reconnection gives it up (if the session
        outlived the outage); the broker bids no more."""
        with self._lock:
            controller, self.controller = self.controller, None
            self._resigned = True
        if controller is not None:
            controller.shutdown()
        # After the resignation: this broker sends no controller request once another one may be elected.
        self._give_up_controller()

    def _give_up_controller(self) -> None:
        zk = self._zk
        if zk is None:
            return
        try:
            if self.registration.zk_client.connected and zk.delete_controller_if_ours():
                log.info("broker %d gave up %s", self.broker_id, self.registration.connect.absolute(paths.CONTROLLER))
        except KcliError as exc:
            # closing the session removes it anyway; only the timing is lost
            log.warning("controller %d: could not give up /controller: %s", self.broker_id, exc)

    def _on_session_event(self, event: str) -> None:
        """The registration's session events (kazoo's threads): enqueued for the controller, or, once shut down,
        /controller given up if this session still holds it."""
        with self._lock:
            controller, resigned = self.controller, self._resigned
        if resigned:
            if event != SESSION_EXPIRED:
                self._give_up_controller()
            return
        if controller is None:
            return
        if event == SESSION_EXPIRED:
            controller.put(Expire())
        elif event == SESSION_REESTABLISHED:
            controller.put(RegisterBrokerAndReelect())
        elif event == RECONNECTED:
            controller.put(Reelect())

    def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> Future[set[TopicPartition]]:
        """A ControlledShutdown request (v2+ carries the broker epoch, -1 before): the future gets the partitions
        the broker still leads (it may stop once that is empty) or raises ControllerMovedError (NOT_CONTROLLER),
        StaleBrokerEpochError (STALE_BROKER_EPOCH) or BrokerNotAvailableError (BROKER_NOT_AVAILABLE)."""
        controller = self.controller
        if controller is None:
            result: Future[set[TopicPartition]] = Future()
            result.set_exception(ControllerMovedError("the controller is not running on this broker"))
            return result
        return controller.controlled_shutdown(broker_id, broker_epoch)

    # -- reassignment ----------------------------------------------------------------------------------------
    def alter_partition_reassignments(self, reassignments: Mapping[TopicPartition, Sequence[int] | None]
                                      ) -> Future[dict[TopicPartition, Exception | None]]:
        """AlterPartitionReassignments (target replicas, None to cancel): the future gets the outcome per partition
        (None: accepted) or raises ControllerMovedError (NOT_CONTROLLER)."""
        controller = self.controller
        if controller is None:
            return _not_running()
        return controller.alter_partition_reassignments(reassignments)

    def list_partition_reassignments(self, partitions: Iterable[TopicPartition] | None = None
                                     ) -> Future[dict[TopicPartition, ReplicaAssignment]]:
        """ListPartitionReassignments: the ongoing ones (all, or among ``partitions``), or ControllerMovedError."""
        controller = self.controller
        if controller is None:
            return _not_running()
        return controller.list_partition_reassignments(partitions)

    # -- preferred replica election --------------------------------------------------------------------------
    def elect_leaders(self, partitions: Iterable[TopicPartition], election_type: ElectionType
                      ) -> Future[dict[TopicPartition, int | Exception]]:
        """An ElectLeaders request: the future gets, per partition, the leader elected or a kcli.broker.errors
        error; every partition gets NOT_CONTROLLER when this broker is not the controller."""
        controller = self.controller
        if controller is None:
            result: Future[dict[TopicPartition, int | Exception]] = Future()
            result.set_result({tp: NotControllerError("the controller is not running on this broker")
                               for tp in partitions})
            return result
        return controller.elect_leaders(partitions, election_type)

    @property
    def is_active(self) -> bool:
        controller = self.controller
        return controller is not None and controller.active

    @property
    def epoch(self) -> int:
        controller = self.controller
        return controller.epoch if controller is not None else 0

    @property
    def controller_id(self) -> int | None:
        """Who holds /controller as this broker's controller last saw it; None when unknown or shut down."""
        controller = self.controller
        if controller is None or controller.active_controller_id < 0:
            return None
        return controller.active_controller_id
