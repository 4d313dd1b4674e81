"""In-process controller harness: each "broker" is a BrokerRegistration plus a ControllerRunner (as kctl's broker
runs them) on the session's real ZooKeeper, whose registered endpoint is a small TCP server that decodes the
inter-broker requests with kcli's codec, records them and answers NONE. The tests drive the controller through
ZooKeeper (and the runner's API entry points) and look at the znodes it writes and the requests each broker got.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from broker_support import read_exactly
from kcli.broker.controller import ControllerRunner
from kcli.protocol import ApiKey, decode_request, encode_response
from kcli.protocol.schema import load_payload_module
from kcli.zk.registration import BrokerRegistration


@dataclass
class Received:
    api_key: ApiKey
    body: object


class RecordingBroker:
    """A TCP endpoint that records LeaderAndIsr / UpdateMetadata / StopReplica and answers them with NONE."""

    def __init__(self, port: int = 0) -> None:
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port = self._listener.getsockname()[1]
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._stopped = False
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            self._connections.append(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        with sock:
            while True:
                try:
                    size_bytes = read_exactly(sock, 4)
                    if size_bytes is None:
                        return
                    frame = read_exactly(sock, int.from_bytes(size_bytes, "big"))
                except OSError:
                    return
                if frame is None:
                    return
                request = decode_request(frame)
                with self._lock:
                    self.received.append(Received(request.api_key, request.body))
                try:
                    sock.sendall(encode_response(request, _answer(request)))
                except OSError:
                    return

    def requests(self, api_key: ApiKey | None = None) -> list[object]:
        with self._lock:
            return [r.body for r in self.received if api_key is None or r.api_key == api_key]

    def kinds(self) -> list[ApiKey]:
        with self._lock:
            return [r.api_key for r in self.received]

    def clear(self) -> None:
        with self._lock:
            self.received.clear()

    def stop(self) -> None:
        self._stopped = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() of the thread above
        except OSError:
            pass
        self._listener.close()
        for sock in self._connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _answer(request):
    module = load_payload_module(request.api_key, request.api_version, EntityType.response)
    body = request.body
    if request.api_key == ApiKey.LEADER_AND_ISR:
        return module.LeaderAndIsrResponse(error_code=ErrorCode.none, topics=tuple(
            module.LeaderAndIsrTopicError(topic_id=t.topic_id, partition_errors=tuple(
                module.LeaderAndIsrPartitionError(partition_index=p.partition_index, error_code=ErrorCode.none)
                for p in t.partition_states)) for t in body.topic_states))
    if request.api_key == ApiKey.STOP_REPLICA:
        return module.StopReplicaResponse(error_code=ErrorCode.none, partition_errors=tuple(
            module.StopReplicaPartitionError(topic_name=t.topic_name, partition_index=p.partition_index,
                                             error_code=ErrorCode.none)
            for t in body.topic_states for p in t.partition_states))
    return module.UpdateMetadataResponse(error_code=ErrorCode.none)


@dataclass
class Broker:
    id: int
    server: RecordingBroker
    registration: BrokerRegistration
    runner: ControllerRunner
    stopped: bool = field(default=False)

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.runner.shutdown()
            self.registration.stop()
            self.server.stop()


def start_broker(connect: str, broker_id: int, config: dict | None = None) -> Broker:
    """``config``: broker config keys the runner reads (e.g. auto.leader.rebalance.enable); None: Kafka's defaults."""
    server = RecordingBroker()
    registration = BrokerRegistration(connect, broker_id, endpoints=[("PLAINTEXT", "127.0.0.1", server.port)],
                                      rack=f"r{broker_id}")
    registration.start(None)
    runner = ControllerRunner(None if config is None else SimpleNamespace(values=dict(config)), broker_id,
                              registration, socket_timeout=5)
    runner.start()
    return Broker(broker_id, server, registration, runner)


def wait_for(condition, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} not met in time"
        time.sleep(0.02)


def wait_for_metadata_delivered(brokers, controller, partitions) -> None:
    """Each broker gets the controller's requests in the order they were queued (one queue and sender thread per
    broker): once it got an UpdateMetadata with the controller's current leader, leader epoch and ISR of each of
    ``partitions``, what was queued for it before has arrived too. Wait for this before clearing the recorded
    requests, or late ones from the step before land in the next (as they do on a loaded machine)."""
    def current(tp):
        leader_and_isr = controller.ctx.partition_leader_and_isr(tp)  # None until the controller elected one
        return None if leader_and_isr is None else (leader_and_isr.leader, leader_and_isr.leader_epoch,
                                                    list(leader_and_isr.isr))

    def delivered(broker) -> bool:
        seen = {}
        for update in broker.server.requests(ApiKey.UPDATE_METADATA):
            for key, s in partitions_of(update).items():
                seen.setdefault(key, []).append((s.leader, s.leader_epoch, list(s.isr)))
        return all((now := current(tp)) is not None and now in seen.get((tp.topic, tp.partition), [])
                   for tp in partitions)

    for broker in brokers:
        wait_for(lambda b=broker: delivered(b), what=f"broker {broker.id} up to date with the controller")


def read_json(root, path: str):
    data, stat = root.get(path)
    return json.loads(data), stat.version


def live_ids(update_metadata) -> set[int]:
    return {b.id for b in update_metadata.live_brokers}


def partitions_of(body) -> dict[tuple[str, int], object]:
    return {(t.topic_name, p.partition_index): p for t in body.topic_states for p in t.partition_states}
