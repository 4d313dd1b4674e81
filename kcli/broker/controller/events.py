"""Controller events and the controller-event thread (Kafka's ControllerEventManager).

ZooKeeper watches (/controller's among them), the registration's session events, broker responses and API calls only put
events here; one thread takes them in FIFO order and runs the controller's handler for each.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from kcli.broker.controller.elections import ElectionTrigger, ElectionType
from kcli.broker.errors import NotControllerError
from kcli.zk.models import TopicPartition

log = logging.getLogger("kcli.controller")


class ControllerEvent:
    """Base of every event; ``preempt`` answers a drained event's caller (clear_and_put)."""

    def preempt(self) -> None:
        pass

    def __str__(self) -> str:
        return type(self).__name__


@dataclass(frozen=True, eq=False)
class Startup(ControllerEvent):
    """The controller starts: watch /controller and elect (Kafka's Startup). ``result`` gets the controller id
    the election found (-1: none) once it is over."""

    result: Future[int] | None = None

    def preempt(self) -> None:
        if self.result is not None and not self.result.done():
            self.result.set_result(-1)


@dataclass(frozen=True)
class ControllerChange(ControllerEvent):
    """/controller was created or changed: resign if another broker holds it now (Kafka's ControllerChange)."""


@dataclass(frozen=True)
class Reelect(ControllerEvent):
    """/controller was deleted, or the connection came back: resign if needed, then bid (Kafka's Reelect)."""


@dataclass(frozen=True)
class Expire(ControllerEvent):
    """The ZooKeeper session expired, /controller with it: resign (Kafka's Expire)."""


@dataclass(frozen=True)
class RegisterBrokerAndReelect(ControllerEvent):
    """A new session is open and the broker registered again in it (by the registration): bid again (Kafka's
    RegisterBrokerAndReelect)."""


@dataclass(frozen=True)
class ShutdownEventThread(ControllerEvent):
    """Last event: resign and stop the thread."""


@dataclass(frozen=True)
class BrokerChange(ControllerEvent):
    pass


@dataclass(frozen=True)
class BrokerModifications(ControllerEvent):
    broker_id: int


@dataclass(frozen=True)
class TopicChange(ControllerEvent):
    pass


@dataclass(frozen=True)
class PartitionModifications(ControllerEvent):
    topic: str


@dataclass(frozen=True)
class TopicDeletion(ControllerEvent):
    pass


@dataclass(frozen=True)
class IsrChangeNotification(ControllerEvent):
    pass


@dataclass(frozen=True)
class LogDirEventNotification(ControllerEvent):
    pass


@dataclass(frozen=True)
class LeaderAndIsrResponseReceived(ControllerEvent):
    broker_id: int
    response: Any = field(repr=False)


@dataclass(frozen=True)
class UpdateMetadataResponseReceived(ControllerEvent):
    broker_id: int
    response: Any = field(repr=False)


@dataclass(frozen=True)
class TopicDeletionStopReplicaResponseReceived(ControllerEvent):
    broker_id: int
    error_code: int
    partition_errors: dict[TopicPartition, int]


@dataclass(frozen=True, eq=False)
class ControlledShutdown(ControllerEvent):
    """A broker asks to stop; the future gets the partitions it still leads, or the error."""

    broker_id: int
    broker_epoch: int
    result: Future[set[TopicPartition]]

    def preempt(self) -> None:
        from kcli.zk.kafka_zk_client import ControllerMovedError

        if not self.result.done():
            self.result.set_exception(ControllerMovedError("the controller moved to another broker"))


# -- preferred replica election and auto rebalance --
@dataclass(frozen=True, eq=False)
class ReplicaLeaderElection(ControllerEvent):
    """Elect leaders for ``partitions`` (None: the ones /admin/preferred_replica_election names, if it exists).
    An ElectLeaders request's ``result`` gets each partition's new leader or its error (kcli.broker.errors)."""

    partitions: frozenset[TopicPartition] | None
    election_type: ElectionType
    trigger: ElectionTrigger
    result: Future[dict[TopicPartition, int | Exception]] | None = None

    def preempt(self) -> None:
        if self.result is not None and not self.result.done():
            self.result.set_result({tp: NotControllerError("this broker is no longer the controller")
                                    for tp in self.partitions or ()})


@dataclass(frozen=True)
class AutoPreferredReplicaLeaderElection(ControllerEvent):
    """The auto-rebalance timer fired (auto.leader.rebalance.enable); ``epoch``: the controller epoch that armed
    it, so a timer left over from an earlier term does nothing."""

    epoch: int


class ControllerEventManager:
    """The controller-event thread: a FIFO queue drained by one thread calling ``process(event)``."""

    def __init__(self, process: Callable[[ControllerEvent], None], *, name: str) -> None:
        self._process = process
        self._queue: queue.Queue[ControllerEvent] = queue.Queue()
        self._lock = threading.RLock()  # a preempted event's caller may put another event
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._closed = False

    def start(self) -> None:
        self._thread.start()

    def put(self, event: ControllerEvent) -> None:
        with self._lock:
            if self._closed:
                event.preempt()
                return
            self._queue.put(event)

    def clear_and_put(self, event: ControllerEvent) -> None:
        """Drop what is queued (answering each drained event's caller), then queue ``event``."""
        with self._lock:
            while True:
                try:
                    self._queue.get_nowait().preempt()
                except queue.Empty:
                    break
            self._queue.put(event)

    def close(self, timeout: float | None = None) -> None:
        """Resign and stop the thread (the queued events are dropped)."""
        with self._lock:
            if self._closed:
                return
        self.clear_and_put(ShutdownEventThread())
        with self._lock:
            self._closed = True
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def is_running(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            try:
                self._process(event)
            except Exception:  # the handler logs what it knows; the thread must survive
                log.exception("controller: uncaught error processing %s", event)
            if isinstance(event, ShutdownEventThread):
                return


# -- reassignment ------------------------------------------------------------------------------------------------
def _not_controller(result: Future[Any]) -> None:
    from kcli.zk.kafka_zk_client import ControllerMovedError

    if not result.done():
        result.set_exception(ControllerMovedError("the controller moved to another broker"))


@dataclass(frozen=True)
class ZkPartitionReassignment(ControllerEvent):
    """/admin/reassign_partitions was created, or its watch must be set again (Kafka's ZkPartitionReassignment)."""


@dataclass(frozen=True)
class PartitionReassignmentIsrChange(ControllerEvent):
    """The state node of a partition being reassigned changed: its target replicas may all be in sync now."""

    partition: TopicPartition


@dataclass(frozen=True, eq=False)
class ApiPartitionReassignment(ControllerEvent):
    """AlterPartitionReassignments: the target replicas per partition, None to cancel. The future gets the outcome
    per partition (None: accepted, else the error), or ControllerMovedError."""

    reassignments: dict[TopicPartition, tuple[int, ...] | None]
    result: Future[dict[TopicPartition, Exception | None]]

    def preempt(self) -> None:
        _not_controller(self.result)


@dataclass(frozen=True, eq=False)
class ListPartitionReassignments(ControllerEvent):
    """ListPartitionReassignments: the ongoing ones among ``partitions`` (None: all of them). The future gets
    partition -> ReplicaAssignment, or ControllerMovedError."""

    partitions: frozenset[TopicPartition] | None
    result: Future[dict[TopicPartition, Any]]

    def preempt(self) -> None:
        _not_controller(self.result)
