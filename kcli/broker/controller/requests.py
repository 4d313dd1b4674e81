"""The controller's requests on the wire: LeaderAndIsr v5, UpdateMetadata v7, StopReplica v3 (IBP 2.8-IV1) built
from controller state, and their responses read back (kafka-cluster.md section 5). The only module of the
controller that knows the schema classes.

The batch (channel_manager.py) collects the dataclasses below; the functions here turn them into request bodies
of ``kcli.protocol.schema`` (kio's layout: snake_case fields, nested entity classes) by field name.
"""

from __future__ import annotations

import dataclasses
import typing
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from kcli.errors import KcliError
from kcli.protocol.api import ApiKey
from kcli.protocol.schema import load_request_schema, load_response_schema
from kcli.storage.checkpoint import uuid_from_base64, uuid_to_base64
from kcli.zk.models import TopicPartition

LEADER_AND_ISR = 4
STOP_REPLICA = 5
UPDATE_METADATA = 6

LEADER_AND_ISR_VERSION = 5
UPDATE_METADATA_VERSION = 7
STOP_REPLICA_VERSION = 3
VERSIONS = {LEADER_AND_ISR: LEADER_AND_ISR_VERSION, UPDATE_METADATA: UPDATE_METADATA_VERSION,
            STOP_REPLICA: STOP_REPLICA_VERSION}
NAMES = {LEADER_AND_ISR: "LeaderAndIsr", UPDATE_METADATA: "UpdateMetadata", STOP_REPLICA: "StopReplica"}

# Kafka's SecurityProtocol ids, as UpdateMetadata carries them.
SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
LEADER_AND_ISR_TYPE_UNKNOWN = 0  # AbstractControlRequest.Type: what a ZooKeeper controller sends

ZERO_UUID = uuid.UUID(int=0)


class ControllerRequestError(KcliError):
    """A controller request could not be built, encoded or decoded."""


# -- what the batch collects (Kafka's LeaderAndIsrPartitionState and friends) -----------------------------------
@dataclass(frozen=True)
class LeaderAndIsrPartitionState:
    topic_name: str
    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int  # the state node's zkVersion
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()
    is_new: bool = False
    leader_recovery_state: int = 0  # sent from LeaderAndIsr v6 on only


@dataclass(frozen=True)
class UpdateMetadataPartitionState:
    topic_name: str
    partition_index: int
    controller_epoch: int
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    zk_version: int
    replicas: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class StopReplicaPartitionState:
    partition_index: int
    leader_epoch: int
    delete_partition: bool


@dataclass(frozen=True)
class LiveLeader:
    broker_id: int
    host_name: str
    port: int


@dataclass(frozen=True)
class UpdateMetadataEndpoint:
    port: int
    host: str
    listener: str
    security_protocol: int


@dataclass(frozen=True)
class UpdateMetadataBroker:
    id: int
    endpoints: tuple[UpdateMetadataEndpoint, ...]
    rack: str | None


# -- request bodies ------------------------------------------------------------------------------------------------
def leader_and_isr_request(controller_id: int, controller_epoch: int, broker_epoch: int,
                           states: Sequence[LeaderAndIsrPartitionState], topic_ids: Mapping[str, str | None],
                           live_leaders: Sequence[LiveLeader]) -> Any:
    """LeaderAndIsrRequest v5: partition states grouped by topic, each topic with its id (zero if none)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    # v5 groups the states by topic (no topic_name in a state) and has no leader_recovery_state (v6+)
    omit = ("topic_name",) if VERSIONS[LEADER_AND_ISR] >= 6 else ("topic_name", "leader_recovery_state")
    for state in states:
        topics.setdefault(state.topic_name, []).append(_fields_but(state, omit))
    return build(request_schema(LEADER_AND_ISR), {
        "controller_id": controller_id, "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
        "type_": LEADER_AND_ISR_TYPE_UNKNOWN,
        "topic_states": [{"topic_name": t, "topic_id": topic_uuid(topic_ids.get(t)), "partition_states": p}
                         for t, p in topics.items()],
        "live_leaders": [dataclasses.asdict(l) for l in live_leaders]})


def update_metadata_request(controller_id: int, controller_epoch: int, broker_epoch: int,
                            states: Sequence[UpdateMetadataPartitionState], topic_ids: Mapping[str, str | None],
                            live_brokers: Sequence[UpdateMetadataBroker]) -> Any:
    """UpdateMetadataRequest v7: the partition states (a delta) and the full live broker list."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for state in states:  # grouped by topic: v7's states carry no topic_name
        topics.setdefault(state.topic_name, []).append(_fields_but(state, ("topic_name",)))
    return build(request_schema(UPDATE_METADATA), {
        "controller_id": controller_id, "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
        "topic_states": [{"topic_name": t, "topic_id": topic_uuid(topic_ids.get(t)), "partition_states": p}
                         for t, p in topics.items()],
        "live_brokers": [dataclasses.asdict(b) for b in live_brokers]})


def stop_replica_request(controller_id: int, controller_epoch: int, broker_epoch: int,
                         states: Mapping[TopicPartition, StopReplicaPartitionState]) -> Any:
    """StopReplicaRequest v3: per-partition leader epoch and delete flag, grouped by topic."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, state in sorted(states.items()):
        topics.setdefault(tp.topic, []).append(dataclasses.asdict(state))
    return build(request_schema(STOP_REPLICA), {
        "controller_id": controller_id, "controller_epoch": controller_epoch, "broker_epoch": broker_epoch,
        "topic_states": [{"topic_name": t, "partition_states": p} for t, p in topics.items()]})


def _fields_but(state: Any, omit: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in dataclasses.asdict(state).items() if k not in omit}


# -- responses -------------------------------------------------------------------------------------------------------
def top_level_error(body: Any) -> int:
    return int(body.error_code)


def leader_and_isr_partition_errors(body: Any, topic_names: Mapping[str, str]) -> dict[TopicPartition, int]:
    """Per-partition error codes of a LeaderAndIsr response; v5 names topics by id (``topic_names``: id text ->
    name), older versions by name. Topics the controller cannot name are left out."""
    out: dict[TopicPartition, int] = {}
    for topic in getattr(body, "topics", ()) or ():
        name = topic_names.get(_uuid_text(topic.topic_id))
        if name is not None:
            for error in topic.partition_errors:
                out[TopicPartition(name, int(error.partition_index))] = int(error.error_code)
    for error in getattr(body, "partition_errors", ()) or ():
        out[TopicPartition(str(error.topic_name), int(error.partition_index))] = int(error.error_code)
    return out


def stop_replica_partition_errors(body: Any) -> dict[TopicPartition, int]:
    return {TopicPartition(str(e.topic_name), int(e.partition_index)): int(e.error_code) for e in body.partition_errors}


# -- frames ------------------------------------------------------------------------------------------------------------
@cache
def request_schema(api_key: int) -> type:
    return load_request_schema(api_key, VERSIONS[api_key])


@cache
def response_schema(api_key: int) -> type:
    return load_response_schema(api_key, VERSIONS[api_key])


# -- a kio-style entity from a dict, by field name ------------------------------------------------------------------
def build(cls: type, values: Mapping[str, Any]) -> Any:
    """``cls(**...)`` from ``values`` (missing fields keep their defaults, a name the class does not declare raises
    ControllerRequestError); lists of dicts become tuples of the nested entity class the field's type names."""
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
    if unknown:  # the versions here are fixed (VERSIONS): a name the class lacks is a bug, not another version's
        raise ControllerRequestError(f"{cls.__name__} has no field {', '.join(unknown)}")
    for field in dataclasses.fields(cls):
        if field.name not in values:
            if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                raise ControllerRequestError(f"{cls.__name__}.{field.name} has no value")
            continue
        kwargs[field.name] = _convert(hints.get(field.name), values[field.name])
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ControllerRequestError(f"cannot build {cls.__name__}: {exc}") from None


def _convert(hint: Any, value: Any) -> Any:
    nested = _nested_entity(hint)
    if nested is not None and isinstance(value, Iterable) and not isinstance(value, (str, bytes)):
        return tuple(build(nested, v) if isinstance(v, Mapping) else v for v in value)
    if isinstance(value, list):
        return tuple(value)
    return value


def _nested_entity(hint: Any) -> type | None:
    if typing.get_origin(hint) is tuple:
        args = typing.get_args(hint)
        if args and dataclasses.is_dataclass(args[0]) and isinstance(args[0], type):
            return args[0]
    return None


@cache
def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # unresolvable annotations: no nested conversion for this class
        return {}


def topic_uuid(topic_id: str | None) -> uuid.UUID:
    if not topic_id:
        return ZERO_UUID
    try:
        return uuid_from_base64(topic_id)
    except ValueError:
        return ZERO_UUID


def _uuid_text(value: uuid.UUID | None) -> str:
    return uuid_to_base64(value if value is not None else ZERO_UUID)
