"""Kafka's ZooKeeper znodes parsed from their bytes (shared/docs/kafka-formats.md section 8). No kazoo here.

Every parser takes the znode's path (for messages) and its data. JSON is parsed, never compared as text: key
order is not guaranteed. Unknown versions and malformed content raise ZnodeFormatError naming the path.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from kcli.errors import KcliError
from kcli.storage.checkpoint import uuid_to_base64


class ZnodeFormatError(KcliError):
    """A znode's data is not what Kafka writes there: malformed JSON, a missing field, an unknown version."""


# -- helpers ---------------------------------------------------------------------------------------------
def load_json(path: str, data: bytes | None) -> dict[str, Any]:
    """The JSON object a znode holds; anything else raises ZnodeFormatError."""
    if not data:
        raise ZnodeFormatError("the znode is empty where Kafka writes JSON", path=path)
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ZnodeFormatError(f"malformed JSON ({exc})", path=path) from None
    if not isinstance(document, dict):
        raise ZnodeFormatError(f"expected a JSON object, found {type(document).__name__}", path=path)
    return document


def _version(path: str, document: dict[str, Any], supported: range, *, as_string: bool = False) -> int:
    value = document.get("version")
    if as_string and isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ZnodeFormatError(f"no valid \"version\" field (found {value!r})", path=path)
    if value not in supported:
        raise ZnodeFormatError(f"unknown version {value} (kcli reads versions {supported.start}-{supported.stop - 1})",
                               path=path)
    return value


def _int(path: str, document: dict[str, Any], key: str, *, default: Any = ..., string_ok: bool = False) -> Any:
    if key not in document:
        if default is ...:
            raise ZnodeFormatError(f"missing field {key!r}", path=path)
        return default
    value = document[key]
    if string_ok and isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            raise ZnodeFormatError(f"field {key!r} is not an integer: {value!r}", path=path) from None
    if value is None and default is not ...:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise ZnodeFormatError(f"field {key!r} is not an integer: {value!r}", path=path)
    return value


def _str(path: str, document: dict[str, Any], key: str, *, optional: bool = False) -> str | None:
    value = document.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ZnodeFormatError(f"field {key!r} is not a string: {value!r}", path=path)
    return value


def _int_list(path: str, value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ZnodeFormatError(f"{what} is not a list of broker ids: {value!r}", path=path)
    return tuple(value)


def _partition_map(path: str, value: Any, what: str) -> dict[int, tuple[int, ...]]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ZnodeFormatError(f"{what} is not a JSON object: {value!r}", path=path)
    result = {}
    for key, replicas in value.items():
        if not (isinstance(key, str) and key.isdigit()):
            raise ZnodeFormatError(f"{what}: {key!r} is not a partition number", path=path)
        result[int(key)] = _int_list(path, replicas, f"{what} of partition {key}")
    return dict(sorted(result.items()))


def _text(path: str, data: bytes | None, what: str) -> str:
    try:
        return (data or b"").decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ZnodeFormatError(f"{what} is not UTF-8 text", path=path) from None


# -- /brokers/ids/<id> -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int
    security_protocol: str


@dataclass(frozen=True)
class BrokerRegistration:
    id: int
    version: int
    host: str | None
    port: int
    endpoints: tuple[str, ...]
    listeners: tuple[Endpoint, ...]
    listener_security_protocol_map: dict[str, str]
    rack: str | None
    jmx_port: int
    timestamp: int | None
    features: dict[str, Any] = field(default_factory=dict)


def _endpoint(path: str, text: Any, protocols: dict[str, str]) -> Endpoint:
    if not isinstance(text, str) or "://" not in text:
        raise ZnodeFormatError(f"endpoint {text!r} is not LISTENER://host:port", path=path)
    listener, _, address = text.partition("://")
    host, _, port_text = address.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise ZnodeFormatError(f"endpoint {text!r} has no port", path=path) from None
    return Endpoint(listener, host, port, protocols.get(listener, listener))


def parse_broker(path: str, data: bytes | None, broker_id: int) -> BrokerRegistration:
    document = load_json(path, data)
    version = _version(path, document, range(1, 6))
    protocols = document.get("listener_security_protocol_map") or {}
    if not isinstance(protocols, dict) or not all(isinstance(v, str) for v in protocols.values()):
        raise ZnodeFormatError(f"listener_security_protocol_map is not an object of strings: {protocols!r}",
                               path=path)
    endpoints = document.get("endpoints") or []
    if not isinstance(endpoints, list):
        raise ZnodeFormatError(f"endpoints is not a list: {endpoints!r}", path=path)
    host = _str(path, document, "host", optional=True)
    port = _int(path, document, "port", default=-1)
    if not endpoints and host is not None:  # version 1 has host/port only
        endpoints = [f"PLAINTEXT://{host}:{port}"]
    features = document.get("features") or {}
    return BrokerRegistration(
        id=broker_id, version=version, host=host, port=port, endpoints=tuple(endpoints),
        listeners=tuple(_endpoint(path, e, protocols) for e in endpoints),
        listener_security_protocol_map=dict(protocols), rack=_str(path, document, "rack", optional=True),
        jmx_port=_int(path, document, "jmx_port", default=-1),
        timestamp=_int(path, document, "timestamp", default=None, string_ok=True),
        features=features if isinstance(features, dict) else {})


# -- /brokers/topics/<t> and its partition states ----------------------------------------------------------
@dataclass(frozen=True)
class TopicAssignment:
    name: str
    version: int
    partitions: dict[int, tuple[int, ...]]
    topic_id: str | None = None
    adding_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing_replicas: dict[int, tuple[int, ...]] = field(default_factory=dict)


def parse_topic(path: str, data: bytes | None, name: str) -> TopicAssignment:
    document = load_json(path, data)
    version = _version(path, document, range(1, 4))
    if "partitions" not in document:
        raise ZnodeFormatError("missing field 'partitions'", path=path)
    return TopicAssignment(
        name=name, version=version, partitions=_partition_map(path, document["partitions"], "partitions"),
        topic_id=_str(path, document, "topic_id", optional=True),
        adding_replicas=_partition_map(path, document.get("adding_replicas"), "adding_replicas"),
        removing_replicas=_partition_map(path, document.get("removing_replicas"), "removing_replicas"))


@dataclass(frozen=True)
class PartitionState:
    version: int
    leader: int
    leader_epoch: int
    controller_epoch: int
    isr: tuple[int, ...]
    leader_recovery_state: int = 0


def parse_partition_state(path: str, data: bytes | None) -> PartitionState:
    document = load_json(path, data)
    return PartitionState(
        version=_version(path, document, range(1, 2)), leader=_int(path, document, "leader"),
        leader_epoch=_int(path, document, "leader_epoch"), controller_epoch=_int(path, document, "controller_epoch"),
        isr=_int_list(path, document.get("isr"), "isr"),
        leader_recovery_state=_int(path, document, "leader_recovery_state", default=0))


class TopicPartition(NamedTuple):
    """Kafka's TopicPartition; sorts by topic, then partition."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


# -- leadership as the controller and the partition leaders handle it (kafka.api.LeaderAndIsr) ------------
NO_LEADER = -1  # LeaderAndIsr.NoLeader: the whole ISR is offline
LEADER_DURING_DELETE = -2  # LeaderAndIsr.LeaderDuringDelete: UpdateMetadata drops the partition from caches
NO_EPOCH = -1  # LeaderAndIsr.NoEpoch
EPOCH_DURING_DELETE = -2  # LeaderAndIsr.EpochDuringDelete: StopReplica for a topic queued for deletion
RECOVERED, RECOVERING = 0, 1  # LeaderRecoveryState (KIP-704)


@dataclass(frozen=True)
class LeaderAndIsr:
    """One partition's leadership; ``partition_epoch`` is the zkVersion of its state node (the CAS token)."""

    leader: int
    leader_epoch: int = 0
    isr: tuple[int, ...] = ()
    leader_recovery_state: int = RECOVERED
    partition_epoch: int = 0

    def new_leader_and_isr(self, leader: int, isr: Sequence[int]) -> LeaderAndIsr:
        """Every leadership decision bumps the leader epoch, even with the same leader."""
        return replace(self, leader=leader, leader_epoch=self.leader_epoch + 1, isr=tuple(isr))

    def new_recovering_leader_and_isr(self, leader: int, isr: Sequence[int]) -> LeaderAndIsr:
        return replace(self.new_leader_and_isr(leader, isr), leader_recovery_state=RECOVERING)

    def new_leader(self, leader: int) -> LeaderAndIsr:
        return self.new_leader_and_isr(leader, self.isr)

    def new_epoch(self) -> LeaderAndIsr:
        return self.new_leader_and_isr(self.leader, self.isr)

    def with_partition_epoch(self, partition_epoch: int) -> LeaderAndIsr:
        return replace(self, partition_epoch=partition_epoch)


@dataclass(frozen=True)
class LeaderIsrAndControllerEpoch:
    """A state node's content: the leadership and the epoch of the controller that decided it."""

    leader_and_isr: LeaderAndIsr
    controller_epoch: int


def decode_leader_isr_and_controller_epoch(path: str, data: bytes | None, zk_version: int) -> LeaderIsrAndControllerEpoch:
    """TopicPartitionStateZNode.decode: the node's JSON plus its zkVersion as the partition epoch."""
    state = parse_partition_state(path, data)
    return LeaderIsrAndControllerEpoch(
        LeaderAndIsr(state.leader, state.leader_epoch, state.isr, state.leader_recovery_state, zk_version),
        state.controller_epoch)


def encode_partition_state(value: LeaderIsrAndControllerEpoch) -> bytes:
    """TopicPartitionStateZNode.encode: ``leader_recovery_state`` only when RECOVERING, as Kafka writes it."""
    leadership = value.leader_and_isr
    document: dict[str, Any] = {"version": 1, "leader": leadership.leader, "leader_epoch": leadership.leader_epoch,
                                "controller_epoch": value.controller_epoch, "isr": list(leadership.isr)}
    if leadership.leader_recovery_state == RECOVERING:
        document["leader_recovery_state"] = RECOVERING
    return _compact(document)


def encode_topic(partitions: dict[int, Sequence[int]], topic_id: str | None, *,
                 adding_replicas: dict[int, Sequence[int]] | None = None,
                 removing_replicas: dict[int, Sequence[int]] | None = None) -> bytes:
    """TopicZNode.encode (version 3): adding/removing hold only non-empty lists; ``topic_id`` only if known."""
    document: dict[str, Any] = {
        "version": 3,
        "partitions": {str(p): list(r) for p, r in sorted(partitions.items())},
        "adding_replicas": {str(p): list(r) for p, r in sorted((adding_replicas or {}).items()) if r},
        "removing_replicas": {str(p): list(r) for p, r in sorted((removing_replicas or {}).items()) if r},
    }
    if topic_id is not None:
        document["topic_id"] = topic_id
    return _compact(document)


def encode_config(config: dict[str, str]) -> bytes:
    """ConfigEntityZNode.encode: ``{"version":1,"config":{...}}`` with string values."""
    return _compact({"version": 1, "config": {str(k): str(v) for k, v in config.items()}})


def encode_config_change(entity_type: str, name: str) -> bytes:
    """ConfigEntityChangeNotificationSequenceZNode.encode (version 2): ``{"version":2,"entity_path":"topics/T"}``."""
    return _compact({"version": 2, "entity_path": f"{entity_type}/{name}"})


def parse_config_change(path: str, data: bytes | None) -> tuple[str, str]:
    """(entity type, entity name) of a /config/changes notification: version 2 ``entity_path`` "topics/T"
    (or "users/U/clients/C", kept whole as the name), version 1 ``entity_type``/``entity_name``."""
    document = load_json(path, data)
    version = _version(path, document, range(1, 3))
    if version == 1:
        kind, name = document.get("entity_type"), document.get("entity_name")
    else:
        entity = document.get("entity_path")
        kind, _, name = entity.partition("/") if isinstance(entity, str) else (None, "", None)
    if not isinstance(kind, str) or not isinstance(name, str) or not kind or not name:
        raise ZnodeFormatError(f"no entity in the config change notification: {document!r}", path=path)
    return kind, name


def encode_isr_change_notification(partitions: Iterable[tuple[str, int]]) -> bytes:
    """IsrChangeNotificationSequenceZNode.encode."""
    return _compact({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


def parse_isr_change_notification(path: str, data: bytes | None) -> tuple[tuple[str, int], ...]:
    document = load_json(path, data)
    _version(path, document, range(1, 2))
    items = document.get("partitions")
    if not isinstance(items, list):
        raise ZnodeFormatError("partitions is not a list", path=path)
    result = []
    for item in items:
        if not isinstance(item, dict):
            raise ZnodeFormatError(f"partition entry {item!r} is not a JSON object", path=path)
        result.append((_str(path, item, "topic") or "", _int(path, item, "partition")))
    return tuple(result)


def parse_log_dir_event(path: str, data: bytes | None) -> int:
    """LogDirEventNotificationSequenceZNode: ``{"version":1,"broker":N,"event":1}``; the broker id."""
    document = load_json(path, data)
    _version(path, document, range(1, 2))
    return _int(path, document, "broker")


def _compact(document: Any) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode("utf-8")


# -- /controller, /controller_epoch, /cluster/id ---------------------------------------------------------
@dataclass(frozen=True)
class Controller:
    broker_id: int
    version: int
    timestamp: int | None
    kraft_controller_epoch: int | None = None  # version 2 (3.4+): -1 for a ZooKeeper controller


def parse_controller(path: str, data: bytes | None) -> Controller:
    document = load_json(path, data)
    version = _version(path, document, range(1, 3))
    return Controller(broker_id=_int(path, document, "brokerid"), version=version,
                      timestamp=_int(path, document, "timestamp", default=None, string_ok=True),
                      kraft_controller_epoch=_int(path, document, "kraftControllerEpoch", default=None))


def parse_controller_epoch(path: str, data: bytes | None) -> int:
    text = _text(path, data, "the controller epoch")
    if not text.isdigit():
        raise ZnodeFormatError(f"the controller epoch is not a decimal number: {text!r}", path=path)
    return int(text)


@dataclass(frozen=True)
class ClusterId:
    id: str
    version: int


def parse_cluster_id(path: str, data: bytes | None) -> ClusterId:
    document = load_json(path, data)
    version = _version(path, document, range(1, 2), as_string=True)  # Kafka writes "version":"1"
    return ClusterId(id=_str(path, document, "id") or "", version=version)


# -- /config/<type>/<name> -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ConfigEntity:
    entity_type: str
    name: str
    version: int
    config: dict[str, str]


def parse_config(path: str, data: bytes | None, entity_type: str, name: str) -> ConfigEntity:
    document = load_json(path, data)
    version = _version(path, document, range(1, 2))
    config = document.get("config", {})
    if not isinstance(config, dict):
        raise ZnodeFormatError(f"config is not a JSON object: {config!r}", path=path)
    return ConfigEntity(entity_type, name, version, {str(k): str(v) for k, v in sorted(config.items())})


# -- /admin ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionRequest:
    topic: str
    partition: int
    replicas: tuple[int, ...] | None = None


def parse_partition_list(path: str, data: bytes | None, *, with_replicas: bool) -> tuple[PartitionRequest, ...]:
    """/admin/reassign_partitions (with replicas) and /admin/preferred_replica_election (without)."""
    document = load_json(path, data)
    _version(path, document, range(1, 2))
    items = document.get("partitions")
    if not isinstance(items, list):
        raise ZnodeFormatError("partitions is not a list", path=path)
    result = []
    for item in items:
        if not isinstance(item, dict):
            raise ZnodeFormatError(f"partition entry {item!r} is not a JSON object", path=path)
        replicas = _int_list(path, item.get("replicas"), "replicas") if with_replicas else None
        result.append(PartitionRequest(_str(path, item, "topic") or "", _int(path, item, "partition"), replicas))
    return tuple(sorted(result, key=lambda r: (r.topic, r.partition)))


def encode_partition_reassignment(reassignment: Iterable[tuple[str, int, Sequence[int]]]) -> bytes:
    """ReassignPartitionsZNode.encode: ``{"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}``."""
    return _compact({"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": list(r)}
                                                  for t, p, r in reassignment]})


def encode_preferred_replica_election(partitions: Iterable[tuple[str, int]]) -> bytes:
    """PreferredReplicaElectionZNode.encode: what kafka-preferred-replica-election.sh --zookeeper writes."""
    return _compact({"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]})


# -- old consumers: /consumers/<group>/{ids,owners,offsets} ----------------------------------------------
@dataclass(frozen=True)
class ConsumerRegistration:
    consumer_id: str
    version: int
    subscription: dict[str, int]
    pattern: str
    timestamp: int | None


def parse_consumer(path: str, data: bytes | None, consumer_id: str) -> ConsumerRegistration:
    document = load_json(path, data)
    version = _version(path, document, range(1, 2))
    subscription = document.get("subscription", {})
    if not isinstance(subscription, dict) or not all(isinstance(v, int) for v in subscription.values()):
        raise ZnodeFormatError(f"subscription is not an object of stream counts: {subscription!r}", path=path)
    return ConsumerRegistration(consumer_id, version, dict(sorted(subscription.items())),
                                _str(path, document, "pattern", optional=True) or "static",
                                _int(path, document, "timestamp", default=None, string_ok=True))


def parse_owner(path: str, data: bytes | None) -> str:
    """The owning thread id ``<consumerId>-<threadIndex>``, plain text."""
    return _text(path, data, "the owner")


def parse_offset(path: str, data: bytes | None) -> int:
    """The next offset to consume, plain decimal text; anything else (incl. negative numbers) raises."""
    text = _text(path, data, "the stored offset")
    if not text.isascii() or not text.isdigit():
        raise ZnodeFormatError(f"the stored offset is not a non-negative decimal number: {text!r}", path=path)
    return int(text)


# -- generic -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Decoded:
    """A znode's data for people and scripts: JSON when it parses, else UTF-8 text, else raw bytes."""

    kind: str  # "json", "text", "bytes" or "empty"
    value: Any  # the JSON value, the text, or base64 of the bytes
    hex: str | None = None


def decode(data: bytes | None) -> Decoded:
    if data is None or data == b"":
        return Decoded("empty", None)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Decoded("bytes", base64.b64encode(data).decode("ascii"), data.hex())
    try:
        return Decoded("json", json.loads(text))
    except ValueError:
        pass
    if any(ord(c) < 32 and c not in "\t\n\r" for c in text):  # control characters: show the bytes safely
        return Decoded("bytes", base64.b64encode(data).decode("ascii"), data.hex())
    return Decoded("text", text)


def new_cluster_id() -> str:
    """A random UUID as Kafka prints it; never with a leading "-", which command lines take for an option."""
    while True:
        text = uuid_to_base64(uuid.uuid4())
        if not text.startswith("-"):
            return text
