"""ControllerChannelManager and ControllerBrokerRequestBatch (Kafka's ControllerChannelManager.scala).

One queue and sender thread per live broker, each with a blocking socket to the broker's inter-broker endpoint.
A failed send reconnects and resends the same request after 100 ms, until the broker is removed. Responses go
back to the controller as events. The batch collects one state change's requests and sends them in Kafka's
order: LeaderAndIsr, then UpdateMetadata, then StopReplica, only to live or shutting-down brokers; queuing a
LeaderAndIsr for a partition also queues UpdateMetadata for it to all of them.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kcli.broker.controller import requests
from kcli.broker.controller.context import ControllerContext, ReplicaAssignment
from kcli.broker.security.inter_broker import PLAINTEXT_INTER_BROKER, InterBrokerSecurity
from kcli.broker.controller.events import (
    ControllerEvent,
    LeaderAndIsrResponseReceived,
    TopicDeletionStopReplicaResponseReceived,
    UpdateMetadataResponseReceived,
)
from kcli.errors import KcliError
from kcli.protocol.codec import SIZE_PREFIX
from kcli.protocol.connection import ClientConnection
from kcli.protocol.errors import ProtocolError
from kcli.zk.kafka_zk_client import BrokerAndEpoch
from kcli.zk.models import LEADER_DURING_DELETE, LeaderAndIsr, LeaderIsrAndControllerEpoch, TopicPartition

log = logging.getLogger("kcli.controller")
state_change_log = logging.getLogger("kcli.controller.state_change")

RETRY_BACKOFF_S = 0.1  # RequestSendThread.backoff(): 100 ms between attempts
DEFAULT_SOCKET_TIMEOUT_S = 30.0  # controller.socket.timeout.ms and request.timeout.ms
MAX_RESPONSE_BYTES = 100 * 1024 * 1024
SHUTDOWN_WAIT_S = 1.0

ResponseCallback = Callable[[Any], None]


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int


def broker_endpoint(broker: BrokerAndEpoch, listener_name: str | None) -> Endpoint:
    """The endpoint the controller talks to: ``inter.broker.listener.name``'s if set, else the first listener."""
    listeners = broker.broker.listeners
    if listener_name is not None:
        for listener in listeners:
            if listener.listener == listener_name:
                return Endpoint(listener.host, listener.port)
        log.warning("broker %d has no %s listener; using its first one", broker.id, listener_name)
    if not listeners:
        raise KcliError(f"broker {broker.id} registered no endpoint")
    return Endpoint(listeners[0].host, listeners[0].port)


@dataclass
class _QueueItem:
    api_key: int
    body: Any
    callback: ResponseCallback | None


class RequestSendThread(threading.Thread):
    """Sends one broker's queued requests in order, each until it is answered or the broker is removed."""

    def __init__(self, controller_id: int, broker_id: int, endpoint: Endpoint, messages: queue.Queue[_QueueItem],
                 socket_timeout: float, security: InterBrokerSecurity = PLAINTEXT_INTER_BROKER) -> None:
        super().__init__(name=f"Controller-{controller_id}-to-broker-{broker_id}-send-thread", daemon=True)
        self.controller_id = controller_id
        self.broker_id = broker_id
        self.endpoint = endpoint
        self.messages = messages
        self.socket_timeout = socket_timeout
        self._stopped = threading.Event()
        self._sock: socket.socket | None = None
        self._sock_lock = threading.Lock()
        self._wire: ClientConnection | None = None
        self.security = security  # the inter-broker listener's TLS and SASL
        self._reauth_at: float | None = None

    def initiate_shutdown(self) -> None:
        """Stop after the current attempt; a blocked read is woken by closing the socket."""
        self._stopped.set()
        self._close()

    def shutdown(self) -> None:
        self.initiate_shutdown()
        if self.is_alive() and threading.current_thread() is not self:
            # A connect in progress can take the socket timeout; the thread is a daemon and, stopped, neither
            # sends nor calls back, so the controller does not wait for it.
            self.join(timeout=SHUTDOWN_WAIT_S)

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                item = self.messages.get(timeout=0.1)
            except queue.Empty:
                continue
            response = None
            while not self._stopped.is_set():
                try:
                    response = self._send_and_receive(item)
                    break
                except (OSError, ProtocolError, KcliError) as exc:
                    if self._stopped.is_set():
                        break
                    log.warning("controller %d failed to send %s to broker %d at %s:%d (%s); reconnecting",
                                self.controller_id, requests.NAMES[item.api_key], self.broker_id,
                                self.endpoint.host, self.endpoint.port, exc)
                    self._close()
                    self._stopped.wait(RETRY_BACKOFF_S)
            if response is not None and item.callback is not None and not self._stopped.is_set():
                try:
                    item.callback(response)
                except Exception:
                    log.exception("controller %d: handling the %s response of broker %d failed", self.controller_id,
                                  requests.NAMES[item.api_key], self.broker_id)
        self._close()

    def _send_and_receive(self, item: _QueueItem) -> Any:
        sock, wire = self._connect()
        if self._reauth_at is not None and time.monotonic() >= self._reauth_at:  # KIP-368, before the expiry
            self._reauth_at = self.security.authenticate(lambda *step: self._exchange(sock, wire, *step),
                                                         f"broker {self.broker_id}")
        return self._exchange(sock, wire, item.api_key, requests.VERSIONS[item.api_key], item.body)

    def _exchange(self, sock: socket.socket, wire: ClientConnection, api_key: int, version: int, body: Any) -> Any:
        _, frame = wire.send_request(api_key, version, body)
        sock.sendall(frame)
        size = wire.frame_size(self._read_exactly(sock, SIZE_PREFIX.size))
        return wire.receive_frame(self._read_exactly(sock, size)).body

    def _connect(self) -> tuple[socket.socket, ClientConnection]:
        with self._sock_lock:
            if self._sock is None:
                sock = socket.create_connection((self.endpoint.host, self.endpoint.port), timeout=self.socket_timeout)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self._stopped.is_set():
                    sock.close()
                    raise KcliError("shutting down")
                sock = self.security.wrap(sock, self.endpoint.host)  # TLS on an SSL / SASL_SSL listener
                # a new connection, a new protocol state: nothing in flight, correlation ids from 1
                wire = ClientConnection(str(self.controller_id), max_frame_bytes=MAX_RESPONSE_BYTES,
                                        peer=f"broker {self.broker_id}")
                try:
                    self._reauth_at = self.security.authenticate(
                        lambda *step: self._exchange(sock, wire, *step), f"broker {self.broker_id}")
                except BaseException:
                    sock.close()
                    raise
                self._sock, self._wire = sock, wire
                log.info("controller %d connected to broker %d at %s:%d for sending state change requests",
                         self.controller_id, self.broker_id, self.endpoint.host, self.endpoint.port)
            assert self._wire is not None
            return self._sock, self._wire

    def _close(self) -> None:
        with self._sock_lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv blocked in the sender thread
            except OSError:
                pass
            sock.close()

    def _read_exactly(self, sock: socket.socket, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = sock.recv(min(left, 1 << 20))
            if not chunk:
                raise KcliError(f"broker {self.broker_id} closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


@dataclass
class _BrokerState:
    endpoint: Endpoint
    messages: queue.Queue[_QueueItem]
    thread: RequestSendThread


class ControllerChannelManager:
    """The controller's connections: ``send_request`` queues for a broker; unknown brokers are skipped."""

    def __init__(self, controller_id: int, *, listener_name: str | None = None,
                 socket_timeout: float = DEFAULT_SOCKET_TIMEOUT_S, security: InterBrokerSecurity | None = None) -> None:
        self.controller_id = controller_id
        self.security = security or PLAINTEXT_INTER_BROKER
        self.listener_name = listener_name
        self.socket_timeout = socket_timeout
        self._brokers: dict[int, _BrokerState] = {}
        self._lock = threading.Lock()

    def startup(self, brokers: Iterable[BrokerAndEpoch]) -> None:
        for broker in brokers:
            self.add_broker(broker)

    def shutdown(self) -> None:
        with self._lock:
            states, self._brokers = list(self._brokers.values()), {}
        for state in states:
            state.thread.initiate_shutdown()
        for state in states:
            state.thread.shutdown()

    def add_broker(self, broker: BrokerAndEpoch) -> None:
        with self._lock:
            if broker.id in self._brokers:
                return
            endpoint = broker_endpoint(broker, self.listener_name)
            messages: queue.Queue[_QueueItem] = queue.Queue()
            thread = RequestSendThread(self.controller_id, broker.id, endpoint, messages, self.socket_timeout,
                                       self.security)
            self._brokers[broker.id] = _BrokerState(endpoint, messages, thread)
            thread.start()

    def remove_broker(self, broker_id: int) -> None:
        with self._lock:
            state = self._brokers.pop(broker_id, None)
        if state is not None:
            state.thread.shutdown()

    def send_request(self, broker_id: int, api_key: int, body: Any, callback: ResponseCallback | None = None) -> None:
        with self._lock:
            state = self._brokers.get(broker_id)
            if state is not None:
                state.messages.put(_QueueItem(api_key, body, callback))
                return
        log.warning("not sending %s to broker %d: it is offline", requests.NAMES[api_key], broker_id)

    def endpoint(self, broker_id: int) -> Endpoint | None:
        with self._lock:
            state = self._brokers.get(broker_id)
            return state.endpoint if state is not None else None


class ControllerBrokerRequestBatch:
    """One state change's requests, per broker, sent together by ``send_requests_to_brokers``."""

    def __init__(self, controller_id: int, ctx: ControllerContext, channel: ControllerChannelManager,
                 put_event: Callable[[ControllerEvent], None], *, listener_name: str | None = None) -> None:
        self.controller_id = controller_id
        self.ctx = ctx
        self.channel = channel
        self.put_event = put_event
        self.listener_name = listener_name
        self.leader_and_isr_requests: dict[int, dict[TopicPartition, requests.LeaderAndIsrPartitionState]] = {}
        self.stop_replica_requests: dict[int, dict[TopicPartition, requests.StopReplicaPartitionState]] = {}
        self.update_metadata_brokers: set[int] = set()
        self.update_metadata_partitions: dict[TopicPartition, requests.UpdateMetadataPartitionState] = {}

    def new_batch(self) -> None:
        if self.leader_and_isr_requests or self.stop_replica_requests or self.update_metadata_brokers:
            # A batch left over from a failed state change: its requests would go out with the next one.
            raise RuntimeError("controller-to-broker request batch is not empty while creating a new one: "
                               f"LeaderAndIsr {sorted(self.leader_and_isr_requests)}, StopReplica "
                               f"{sorted(self.stop_replica_requests)}, UpdateMetadata {sorted(self.update_metadata_brokers)}")

    def clear(self) -> None:
        self.leader_and_isr_requests.clear()
        self.stop_replica_requests.clear()
        self.update_metadata_brokers.clear()
        self.update_metadata_partitions.clear()

    def add_leader_and_isr_request_for_brokers(self, broker_ids: Iterable[int], partition: TopicPartition,
                                               leadership: LeaderIsrAndControllerEpoch, assignment: ReplicaAssignment,
                                               is_new: bool) -> None:
        state = leadership.leader_and_isr
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            states = self.leader_and_isr_requests.setdefault(broker_id, {})
            already_new = partition in states and states[partition].is_new
            states[partition] = requests.LeaderAndIsrPartitionState(
                topic_name=partition.topic, partition_index=partition.partition,
                controller_epoch=leadership.controller_epoch, leader=state.leader, leader_epoch=state.leader_epoch,
                isr=tuple(state.isr), partition_epoch=state.partition_epoch, replicas=tuple(assignment.replicas),
                adding_replicas=tuple(assignment.adding_replicas), removing_replicas=tuple(assignment.removing_replicas),
                is_new=is_new or already_new, leader_recovery_state=state.leader_recovery_state)
        self.add_update_metadata_request_for_brokers(self.ctx.live_or_shutting_down_broker_ids, [partition])

    def add_stop_replica_request_for_brokers(self, broker_ids: Iterable[int], partition: TopicPartition,
                                             delete_partition: bool) -> None:
        leader_epoch = self.ctx.leader_epoch(partition)
        for broker_id in broker_ids:
            if broker_id < 0:
                continue
            states = self.stop_replica_requests.setdefault(broker_id, {})
            already_delete = partition in states and states[partition].delete_partition
            states[partition] = requests.StopReplicaPartitionState(partition.partition, leader_epoch,
                                                                   already_delete or delete_partition)

    def add_update_metadata_request_for_brokers(self, broker_ids: Iterable[int],
                                                partitions: Iterable[TopicPartition] = ()) -> None:
        """UpdateMetadata to ``broker_ids``, with the current state of ``partitions`` (leader -2 while deleting)."""
        self.update_metadata_brokers.update(b for b in broker_ids if b >= 0)
        for partition in partitions:
            leadership = self.ctx.partition_leadership_info(partition)
            if leadership is None:
                log.info("leader not yet assigned for partition %s: no UpdateMetadata for it", partition)
                continue
            state = leadership.leader_and_isr
            if self.ctx.is_topic_queued_up_for_deletion(partition.topic):
                state = LeaderAndIsr(LEADER_DURING_DELETE, 0, state.isr)  # LeaderAndIsr.duringDelete
            replicas = self.ctx.partition_replica_assignment(partition)
            self.update_metadata_partitions[partition] = requests.UpdateMetadataPartitionState(
                topic_name=partition.topic, partition_index=partition.partition,
                controller_epoch=leadership.controller_epoch, leader=state.leader, leader_epoch=state.leader_epoch,
                isr=tuple(state.isr), zk_version=state.partition_epoch, replicas=tuple(replicas),
                offline_replicas=tuple(r for r in replicas if not self.ctx.is_replica_online(r, partition)))

    def send_requests_to_brokers(self, controller_epoch: int) -> None:
        try:
            self._send_leader_and_isr_requests(controller_epoch)
            self._send_update_metadata_requests(controller_epoch)
            self._send_stop_replica_requests(controller_epoch)
        except Exception:
            self.clear()
            raise

    # -- the three sends -------------------------------------------------------------------------------------
    def _send_leader_and_isr_requests(self, controller_epoch: int) -> None:
        live = self.ctx.live_or_shutting_down_broker_ids
        epochs = self.ctx.live_broker_id_and_epochs
        for broker_id, states in sorted(self.leader_and_isr_requests.items()):
            if broker_id not in live:
                continue
            leaders = {s.leader for s in states.values()}
            become_leader = sum(1 for s in states.values() if s.leader == broker_id)
            state_change_log.info("controller %d epoch %d sends LeaderAndIsr to broker %d with %d become-leader and "
                                  "%d become-follower partitions", self.controller_id, controller_epoch, broker_id,
                                  become_leader, len(states) - become_leader)
            live_leaders = []
            for broker in self.ctx.live_or_shutting_down_brokers:
                if broker.id in leaders:
                    endpoint = broker_endpoint(broker, self.listener_name)
                    live_leaders.append(requests.LiveLeader(broker.id, endpoint.host, endpoint.port))
            ordered = [states[tp] for tp in sorted(states)]
            body = requests.leader_and_isr_request(
                self.controller_id, controller_epoch, epochs[broker_id], ordered,
                {s.topic_name: self.ctx.topic_ids.get(s.topic_name) for s in ordered}, live_leaders)
            self.channel.send_request(broker_id, requests.LEADER_AND_ISR, body,
                                      _callback(self.put_event, LeaderAndIsrResponseReceived, broker_id))
        self.leader_and_isr_requests.clear()

    def _send_update_metadata_requests(self, controller_epoch: int) -> None:
        if not self.update_metadata_brokers:
            self.update_metadata_partitions.clear()
            return
        states = [self.update_metadata_partitions[tp] for tp in sorted(self.update_metadata_partitions)]
        state_change_log.info("controller %d epoch %d sends UpdateMetadata to brokers %s for %d partitions",
                              self.controller_id, controller_epoch, sorted(self.update_metadata_brokers), len(states))
        live_brokers = [_update_metadata_broker(b) for b in self.ctx.live_or_shutting_down_brokers]
        topic_ids = {s.topic_name: self.ctx.topic_ids.get(s.topic_name) for s in states}
        epochs = self.ctx.live_broker_id_and_epochs
        for broker_id in sorted(self.update_metadata_brokers & self.ctx.live_or_shutting_down_broker_ids):
            body = requests.update_metadata_request(self.controller_id, controller_epoch, epochs[broker_id], states,
                                                    topic_ids, live_brokers)
            self.channel.send_request(broker_id, requests.UPDATE_METADATA, body,
                                      _callback(self.put_event, UpdateMetadataResponseReceived, broker_id))
        self.update_metadata_brokers.clear()
        self.update_metadata_partitions.clear()

    def _send_stop_replica_requests(self, controller_epoch: int) -> None:
        live = self.ctx.live_or_shutting_down_broker_ids
        epochs = self.ctx.live_broker_id_and_epochs
        for broker_id, states in sorted(self.stop_replica_requests.items()):
            if broker_id not in live:
                continue
            state_change_log.info("controller %d epoch %d sends StopReplica for %d replicas to broker %d",
                                  self.controller_id, controller_epoch, len(states), broker_id)
            body = requests.stop_replica_request(self.controller_id, controller_epoch, epochs[broker_id], states)
            deleted = frozenset(tp for tp, s in states.items() if s.delete_partition)
            self.channel.send_request(broker_id, requests.STOP_REPLICA, body,
                                      _stop_replica_callback(self.put_event, broker_id, deleted))
        self.stop_replica_requests.clear()


def _update_metadata_broker(broker: BrokerAndEpoch) -> requests.UpdateMetadataBroker:
    registration = broker.broker
    return requests.UpdateMetadataBroker(
        id=broker.id, rack=registration.rack,
        endpoints=tuple(requests.UpdateMetadataEndpoint(
            port=e.port, host=e.host, listener=e.listener,
            security_protocol=requests.SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0))
            for e in registration.listeners))


def _callback(put_event: Callable[[ControllerEvent], None], event_type: Any, broker_id: int) -> ResponseCallback:
    return lambda response: put_event(event_type(broker_id, response))


def _stop_replica_callback(put_event: Callable[[ControllerEvent], None], broker_id: int,
                           deleted: frozenset[TopicPartition]) -> ResponseCallback:
    """Only the partitions this request deleted matter to topic deletion (Kafka's responseCallback)."""

    def handle(response: Any) -> None:
        errors = {tp: code for tp, code in requests.stop_replica_partition_errors(response).items() if tp in deleted}
        if errors:
            put_event(TopicDeletionStopReplicaResponseReceived(broker_id, requests.top_level_error(response), errors))

    return handle
