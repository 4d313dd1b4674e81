"""The inter-broker schemas kio lacks (LeaderAndIsr v5, StopReplica v3, UpdateMetadata v7, ControlledShutdown v1-v3).

Golden frames are written here field by field with ``struct`` from Kafka 3.7.0's JSON specs (the comments name
each field), so they check our declarations against the spec, not against themselves. Round trips go through
the codec (``encode_request`` / ``decode_request``, ``encode_response`` / ``decode_response``) with the APIs
served, as the broker will serve them; the guard must refuse truncated frames naming the field.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from types import MappingProxyType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import KioIndexError
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.serial._introspect import EntityField, EntityTupleField, classify_field
from kio.static.constants import EntityType

from kcli.protocol import (
    SUPPORTED_APIS,
    ApiKey,
    RemoteProtocolError,
    UnsupportedVersionError,
    codec,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    is_flexible,
    request_header_version,
    response_header_version,
)
from kcli.protocol.api import INTER_BROKER_APIS
from kcli.protocol.minimal import minimal_request
from kcli.protocol.schema import (
    DECLARED_VERSIONS,
    api_key_map,
    load_payload_module,
    load_request_schema,
    load_response_schema,
)
from kcli.protocol.schema.controlled_shutdown import v2 as cs_v2
from kcli.protocol.schema.controlled_shutdown.v3 import request as cs_v3_req
from kcli.protocol.schema.controlled_shutdown.v3 import response as cs_v3_resp
from kcli.protocol.schema.leader_and_isr.v5 import request as lai_req
from kcli.protocol.schema.leader_and_isr.v5 import response as lai_resp
from kcli.protocol.schema.stop_replica.v3 import request as sr_req
from kcli.protocol.schema.stop_replica.v3 import response as sr_resp
from kcli.protocol.schema.update_metadata.v7 import request as um_req
from kcli.protocol.schema.update_metadata.v7 import response as um_resp

DECLARED = [(ApiKey(k), v) for k, a in INTER_BROKER_APIS.items() for v in range(a.min_version, a.max_version + 1)]
CLIENT_ID = "kctl-controller"
TOPIC_ID = uuid.UUID("5c6e0d1a-8f1b-4a55-9d3e-0123456789ab")


@pytest.fixture
def served(monkeypatch):
    """The codec as it will be once the broker serves the inter-broker APIs (it advertises them then)."""
    monkeypatch.setattr(codec, "SUPPORTED_APIS", MappingProxyType({**SUPPORTED_APIS, **INTER_BROKER_APIS}))


# --- wire primitives, straight from https://kafka.apache.org/protocol#protocol_types ------------------------

def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def boolean(v: bool) -> bytes:
    return struct.pack(">?", v)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def compact_string(s: str | None) -> bytes:  # COMPACT_(NULLABLE_)STRING: length+1 as uvarint, 0 = null
    if s is None:
        return uvarint(0)
    data = s.encode()
    return uvarint(len(data) + 1) + data


def string(s: str | None) -> bytes:  # (NULLABLE_)STRING: int16 length, -1 = null
    if s is None:
        return i16(-1)
    data = s.encode()
    return i16(len(data)) + data


def compact_array(items: list[bytes]) -> bytes:  # COMPACT_ARRAY: count+1 as uvarint
    return uvarint(len(items) + 1) + b"".join(items)


def array(items: list[bytes]) -> bytes:  # ARRAY: int32 count
    return i32(len(items)) + b"".join(items)


def int32s(values: list[int], *, flexible: bool = True) -> bytes:
    items = [i32(v) for v in values]
    return compact_array(items) if flexible else array(items)


NO_TAGS = uvarint(0)  # TAG_BUFFER with no tagged fields


def request_frame(api_key: int, version: int, correlation_id: int, body: bytes, *, header: int) -> bytes:
    head = i16(api_key) + i16(version) + i32(correlation_id) + string(CLIENT_ID)  # client_id: always int16-length
    if header == 2:
        head += NO_TAGS
    payload = head + body
    return i32(len(payload)) + payload


def response_frame(correlation_id: int, body: bytes, *, header: int) -> bytes:
    payload = i32(correlation_id) + (NO_TAGS if header == 1 else b"") + body
    return i32(len(payload)) + payload


# --- golden frames ---------------------------------------------------------------------------------------

def lai_request() -> tuple[object, bytes]:
    body = lai_req.LeaderAndIsrRequest(
        controller_id=1, controller_epoch=7, broker_epoch=0x100000025, type_=0,
        topic_states=(lai_req.LeaderAndIsrTopicState(
            topic_name="orders", topic_id=TOPIC_ID,
            partition_states=(
                lai_req.LeaderAndIsrPartitionState(
                    partition_index=0, controller_epoch=7, leader=1, leader_epoch=3, isr=(1, 2),
                    partition_epoch=5, replicas=(1, 2, 3), adding_replicas=(3,), removing_replicas=(),
                    is_new=False),
                lai_req.LeaderAndIsrPartitionState(
                    partition_index=1, controller_epoch=6, leader=2, leader_epoch=0, isr=(2,),
                    partition_epoch=0, replicas=(2, 1), is_new=True),
            )),),
        live_leaders=(lai_req.LeaderAndIsrLiveLeader(broker_id=1, host_name="broker-1", port=9092),
                      lai_req.LeaderAndIsrLiveLeader(broker_id=2, host_name="broker-2", port=9093)),
    )
    partitions = [
        i32(0)              # PartitionIndex
        + i32(7)            # ControllerEpoch
        + i32(1)            # Leader
        + i32(3)            # LeaderEpoch
        + int32s([1, 2])    # Isr
        + i32(5)            # PartitionEpoch (ZkVersion in 2.8)
        + int32s([1, 2, 3])  # Replicas
        + int32s([3])       # AddingReplicas (v3+)
        + int32s([])        # RemovingReplicas (v3+)
        + boolean(False)    # IsNew (v1+)
        + NO_TAGS,
        i32(1) + i32(6) + i32(2) + i32(0) + int32s([2]) + i32(0) + int32s([2, 1]) + int32s([]) + int32s([])
        + boolean(True) + NO_TAGS,
    ]
    wire = (
        i32(1)                      # ControllerId
        + i32(7)                    # ControllerEpoch
        + i64(0x100000025)          # BrokerEpoch (v2+)
        + i8(0)                     # Type (v5+)
        + compact_array([           # TopicStates (v2+)
            compact_string("orders")  # TopicName
            + TOPIC_ID.bytes          # TopicId (v5+)
            + compact_array(partitions)  # PartitionStates
            + NO_TAGS])
        + compact_array([           # LiveLeaders
            i32(1) + compact_string("broker-1") + i32(9092) + NO_TAGS,  # BrokerId, HostName, Port
            i32(2) + compact_string("broker-2") + i32(9093) + NO_TAGS])
        + NO_TAGS
    )
    return body, request_frame(4, 5, 11, wire, header=2)


def lai_response() -> tuple[object, bytes]:
    body = lai_resp.LeaderAndIsrResponse(error_code=ErrorCode.none, topics=(lai_resp.LeaderAndIsrTopicError(
        topic_id=TOPIC_ID, partition_errors=(
            lai_resp.LeaderAndIsrPartitionError(partition_index=0, error_code=ErrorCode.none),
            lai_resp.LeaderAndIsrPartitionError(partition_index=1, error_code=ErrorCode.kafka_storage_error))),))
    wire = (
        i16(0)                      # ErrorCode
        + compact_array([           # Topics (v5+)
            TOPIC_ID.bytes          # TopicId
            + compact_array([       # PartitionErrors: PartitionIndex, ErrorCode
                i32(0) + i16(0) + NO_TAGS,
                i32(1) + i16(56) + NO_TAGS])  # KAFKA_STORAGE_ERROR
            + NO_TAGS])
        + NO_TAGS
    )
    return body, response_frame(11, wire, header=1)


def um_request() -> tuple[object, bytes]:
    body = um_req.UpdateMetadataRequest(
        controller_id=1, controller_epoch=7, broker_epoch=42,
        topic_states=(
            um_req.UpdateMetadataTopicState(topic_name="orders", topic_id=TOPIC_ID, partition_states=(
                um_req.UpdateMetadataPartitionState(
                    partition_index=0, controller_epoch=7, leader=1, leader_epoch=3, isr=(1, 2), zk_version=5,
                    replicas=(1, 2, 3), offline_replicas=(3,)),)),
            um_req.UpdateMetadataTopicState(topic_name="gone", topic_id=None, partition_states=(
                um_req.UpdateMetadataPartitionState(
                    partition_index=0, controller_epoch=7, leader=-2, leader_epoch=4, isr=(), zk_version=9,
                    replicas=(2,)),)),
        ),
        live_brokers=(
            um_req.UpdateMetadataBroker(id=1, endpoints=(
                um_req.UpdateMetadataEndpoint(port=9092, host="h1", listener="PLAINTEXT", security_protocol=0),),
                rack="rack-a"),
            um_req.UpdateMetadataBroker(id=2, endpoints=(
                um_req.UpdateMetadataEndpoint(port=9093, host="h2", listener="PLAINTEXT", security_protocol=0),
                um_req.UpdateMetadataEndpoint(port=9094, host="h2", listener="SSL", security_protocol=1)),
                rack=None),
        ),
    )
    wire = (
        i32(1)                      # ControllerId
        + i32(7)                    # ControllerEpoch
        + i64(42)                   # BrokerEpoch (v5+)
        + compact_array([           # TopicStates (v5+)
            compact_string("orders")  # TopicName
            + TOPIC_ID.bytes          # TopicId (v7+)
            + compact_array([         # PartitionStates
                i32(0)                # PartitionIndex
                + i32(7)              # ControllerEpoch
                + i32(1)              # Leader
                + i32(3)              # LeaderEpoch
                + int32s([1, 2])      # Isr
                + i32(5)              # ZkVersion
                + int32s([1, 2, 3])   # Replicas
                + int32s([3])         # OfflineReplicas (v4+)
                + NO_TAGS])
            + NO_TAGS,
            compact_string("gone") + bytes(16)  # the zero UUID: no topic id
            + compact_array([i32(0) + i32(7) + i32(-2) + i32(4) + int32s([]) + i32(9) + int32s([2]) + int32s([])
                             + NO_TAGS])
            + NO_TAGS])
        + compact_array([           # LiveBrokers
            i32(1)                  # Id
            + compact_array([       # Endpoints (v1+): Port, Host, Listener (v3+), SecurityProtocol
                i32(9092) + compact_string("h1") + compact_string("PLAINTEXT") + i16(0) + NO_TAGS])
            + compact_string("rack-a")  # Rack (v2+, nullable)
            + NO_TAGS,
            i32(2)
            + compact_array([
                i32(9093) + compact_string("h2") + compact_string("PLAINTEXT") + i16(0) + NO_TAGS,
                i32(9094) + compact_string("h2") + compact_string("SSL") + i16(1) + NO_TAGS])
            + compact_string(None)
            + NO_TAGS])
        + NO_TAGS
    )
    return body, request_frame(6, 7, 12, wire, header=2)


def um_response() -> tuple[object, bytes]:
    body = um_resp.UpdateMetadataResponse(error_code=ErrorCode.stale_controller_epoch)
    return body, response_frame(12, i16(11) + NO_TAGS, header=1)  # ErrorCode: STALE_CONTROLLER_EPOCH


def sr_request() -> tuple[object, bytes]:
    body = sr_req.StopReplicaRequest(
        controller_id=1, controller_epoch=7, broker_epoch=42,
        topic_states=(sr_req.StopReplicaTopicState(topic_name="orders", partition_states=(
            sr_req.StopReplicaPartitionState(partition_index=0, leader_epoch=3, delete_partition=False),
            sr_req.StopReplicaPartitionState(partition_index=1, leader_epoch=-2, delete_partition=True))),),
    )
    wire = (
        i32(1)                      # ControllerId
        + i32(7)                    # ControllerEpoch
        + i64(42)                   # BrokerEpoch (v1+)
        + compact_array([           # TopicStates (v3+)
            compact_string("orders")  # TopicName
            + compact_array([         # PartitionStates: PartitionIndex, LeaderEpoch, DeletePartition
                i32(0) + i32(3) + boolean(False) + NO_TAGS,
                i32(1) + i32(-2) + boolean(True) + NO_TAGS])  # -2: the topic is being deleted
            + NO_TAGS])
        + NO_TAGS
    )
    return body, request_frame(5, 3, 13, wire, header=2)


def sr_response() -> tuple[object, bytes]:
    body = sr_resp.StopReplicaResponse(error_code=ErrorCode.none, partition_errors=(
        sr_resp.StopReplicaPartitionError(topic_name="orders", partition_index=0, error_code=ErrorCode.none),
        sr_resp.StopReplicaPartitionError(topic_name="orders", partition_index=1,
                                          error_code=ErrorCode.fenced_leader_epoch)))
    wire = (
        i16(0)                      # ErrorCode
        + compact_array([           # PartitionErrors: TopicName, PartitionIndex, ErrorCode
            compact_string("orders") + i32(0) + i16(0) + NO_TAGS,
            compact_string("orders") + i32(1) + i16(74) + NO_TAGS])  # FENCED_LEADER_EPOCH
        + NO_TAGS
    )
    return body, response_frame(13, wire, header=1)


def cs_request(version: int) -> tuple[object, bytes]:
    flexible = version >= 3
    module = load_payload_module(7, version, EntityType.request)
    values = {"broker_id": 2}
    wire = i32(2)                   # BrokerId
    if version >= 2:
        values["broker_epoch"] = 0x100000025
        wire += i64(0x100000025)    # BrokerEpoch (v2+)
    if flexible:
        wire += NO_TAGS
    return module.ControlledShutdownRequest(**values), request_frame(7, version, 14, wire, header=2 if flexible else 1)


def cs_response(version: int) -> tuple[object, bytes]:
    flexible = version >= 3
    module = load_payload_module(7, version, EntityType.response)
    body = module.ControlledShutdownResponse(error_code=ErrorCode.none, remaining_partitions=(
        module.RemainingPartition(topic_name="orders", partition_index=1),))
    if flexible:
        wire = i16(0) + compact_array([compact_string("orders") + i32(1) + NO_TAGS]) + NO_TAGS
    else:
        wire = i16(0) + array([string("orders") + i32(1)])  # ErrorCode, RemainingPartitions [TopicName, Index]
    return body, response_frame(14, wire, header=1 if flexible else 0)


GOLDEN = {
    (ApiKey.LEADER_AND_ISR, 5): (lai_request, lai_response),
    (ApiKey.UPDATE_METADATA, 7): (um_request, um_response),
    (ApiKey.STOP_REPLICA, 3): (sr_request, sr_response),
    **{(ApiKey.CONTROLLED_SHUTDOWN, v): (lambda v=v: cs_request(v), lambda v=v: cs_response(v)) for v in (1, 2, 3)},
}


def test_every_declared_version_has_a_golden_frame():
    assert set(GOLDEN) == set(DECLARED)


@pytest.mark.parametrize(("api_key", "version"), DECLARED, ids=str)
def test_golden_request_frame(api_key, version, served):
    body, frame = GOLDEN[api_key, version][0]()
    correlation_id = struct.unpack_from(">i", frame, 8)[0]
    assert encode_request(api_key, version, correlation_id, CLIENT_ID, body) == frame
    request = decode_request(frame[4:])
    assert request.api_key is api_key and request.api_version == version
    assert request.client_id == CLIENT_ID and request.correlation_id == correlation_id
    assert request.header.__version__ == request_header_version(api_key, version)
    assert request.body == body and request.trailing_bytes == 0


@pytest.mark.parametrize(("api_key", "version"), DECLARED, ids=str)
def test_golden_response_frame(api_key, version, served):
    _, request_frame_ = GOLDEN[api_key, version][0]()
    body, frame = GOLDEN[api_key, version][1]()
    request = decode_request(request_frame_[4:])
    assert encode_response(request, body) == frame
    assert decode_response(api_key, version, frame[4:]) == (request.correlation_id, body)


@pytest.mark.parametrize(("api_key", "version"), DECLARED, ids=str)
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_random_messages_round_trip(api_key, version, data, random_kio, monkeypatch):
    monkeypatch.setattr(codec, "SUPPORTED_APIS", MappingProxyType({**SUPPORTED_APIS, **INTER_BROKER_APIS}))
    body = data.draw(random_kio(load_request_schema(api_key, version)))
    request = decode_request(encode_request(api_key, version, 5, CLIENT_ID, body)[4:])
    assert request.body == body
    answer = data.draw(random_kio(load_response_schema(api_key, version)))
    assert decode_response(api_key, version, encode_response(request, answer)[4:]) == (5, answer)


@pytest.mark.parametrize(("api_key", "version"), DECLARED, ids=str)
def test_minimal_request_round_trips(api_key, version, served):
    body = minimal_request(api_key, version)
    assert type(body) is load_request_schema(api_key, version)
    assert decode_request(encode_request(api_key, version, 1, None, body)[4:]).body == body


@pytest.mark.parametrize(("api_key", "version"), DECLARED, ids=str)
def test_schema_classes_are_kio_style(api_key, version):
    for entity_type, kind, header in ((load_request_schema(api_key, version), "request", request_header_version),
                                      (load_response_schema(api_key, version), "response", response_header_version)):
        assert entity_type.__type__.name == kind
        assert entity_type.__api_key__ == api_key and entity_type.__version__ == version
        assert entity_type.__flexible__ is is_flexible(api_key, version) is (version >= INTER_BROKER_APIS[api_key]
                                                                              .flexible_since)
        assert entity_type.__header_schema__.__version__ == header(api_key, version)
        assert dataclasses.is_dataclass(entity_type) and entity_type.__dataclass_params__.frozen
        _check_fields(entity_type)


def _check_fields(entity_type: type) -> None:
    for f in dataclasses.fields(entity_type):
        kind = classify_field(f)
        if isinstance(kind, (EntityField, EntityTupleField)):
            assert kind.type_.__type__ is EntityType.nested and kind.type_.__version__ == entity_type.__version__
            assert kind.type_.__flexible__ is entity_type.__flexible__
            assert kind.type_.__header_schema__ is entity_type.__header_schema__
            _check_fields(kind.type_)
        else:
            assert "kafka_type" in f.metadata, f.name


def test_header_versions():
    assert request_header_version(ApiKey.LEADER_AND_ISR, 5) == 2
    assert response_header_version(ApiKey.LEADER_AND_ISR, 5) == 1
    assert request_header_version(ApiKey.UPDATE_METADATA, 7) == 2
    assert request_header_version(ApiKey.STOP_REPLICA, 3) == 2
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 3) == 2
    assert response_header_version(ApiKey.CONTROLLED_SHUTDOWN, 3) == 1
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 2) == 1
    assert response_header_version(ApiKey.CONTROLLED_SHUTDOWN, 2) == 0
    assert request_header_version(ApiKey.CONTROLLED_SHUTDOWN, 0) == 0  # no client_id (v0 is not declared)
    # Flexible from the spec's "flexibleVersions", also for versions not declared here.
    assert is_flexible(ApiKey.LEADER_AND_ISR, 4) and not is_flexible(ApiKey.LEADER_AND_ISR, 3)
    assert is_flexible(ApiKey.UPDATE_METADATA, 6) and not is_flexible(ApiKey.UPDATE_METADATA, 5)
    assert is_flexible(ApiKey.STOP_REPLICA, 2) and not is_flexible(ApiKey.STOP_REPLICA, 1)


def test_served_but_not_advertised():
    """The controller's requests decode (the broker serves them) but stay out of ApiVersions, which is for
    clients; a version outside the declared one is refused like any unsupported version."""
    assert not set(INTER_BROKER_APIS) & set(SUPPORTED_APIS)
    _, frame = lai_request()
    decoded = decode_request(frame[4:])
    assert decoded.api_key == ApiKey.LEADER_AND_ISR and decoded.correlation_id == 11
    other = bytearray(frame[4:])
    other[2:4] = (4).to_bytes(2, "big")  # LeaderAndIsr v4: not declared
    with pytest.raises(UnsupportedVersionError) as info:
        decode_request(bytes(other))
    assert "LeaderAndIsr is served at v5-v5" in str(info.value)


def test_lookup_falls_back_to_kio():
    assert load_request_schema(ApiKey.METADATA, 12) is MetadataRequest
    assert load_request_schema(ApiKey.LEADER_AND_ISR, 5) is lai_req.LeaderAndIsrRequest
    assert load_response_schema(ApiKey.STOP_REPLICA, 3) is sr_resp.StopReplicaResponse
    assert load_request_schema(ApiKey.CONTROLLED_SHUTDOWN, 2) is cs_v2.ControlledShutdownRequest
    assert load_response_schema(ApiKey.CONTROLLED_SHUTDOWN, 3) is cs_v3_resp.ControlledShutdownResponse
    assert load_request_schema(ApiKey.UPDATE_METADATA, 7) is um_req.UpdateMetadataRequest
    assert load_response_schema(ApiKey.UPDATE_METADATA, 7) is um_resp.UpdateMetadataResponse
    assert load_request_schema(ApiKey.CONTROLLED_SHUTDOWN, 3) is cs_v3_req.ControlledShutdownRequest
    assert load_response_schema(ApiKey.LEADER_AND_ISR, 5) is lai_resp.LeaderAndIsrResponse
    for api_key, version in ((4, 4), (4, 6), (7, 0), (5, 4), (6, 8), (17, 99)):
        with pytest.raises(KioIndexError):
            load_request_schema(api_key, version)
    assert {k: api_key_map[k] for k in (3, 4, 5, 6, 7)} == {
        3: "metadata", 4: "leader_and_isr", 5: "stop_replica", 6: "update_metadata", 7: "controlled_shutdown"}
    assert {k: tuple(range(a.min_version, a.max_version + 1)) for k, a in INTER_BROKER_APIS.items()} == \
        {k: v for k, v in DECLARED_VERSIONS.items() if k in INTER_BROKER_APIS}
    assert codec.api_name(4) == "LeaderAndIsr" and codec.api_name(7) == "ControlledShutdown"


# --- the guard: truncated and forged frames --------------------------------------------------------------

def test_truncated_leader_and_isr_names_the_field(served):
    _, frame = lai_request()
    frame = frame[4:]
    # Cut inside partition 0's Isr array: header 2+2+4+(2+15)+1, body 4+4+8+1, topics count 1,
    # name 1+6, topic id 16, partitions count 1, then index, controller epoch, leader, leader epoch (16).
    header = 2 + 2 + 4 + 2 + len(CLIENT_ID) + 1
    isr = header + 17 + 1 + 7 + 16 + 1 + 16
    assert frame[isr:isr + 9] == int32s([1, 2])
    with pytest.raises(RemoteProtocolError) as info:
        decode_request(frame[:isr + 5])
    assert info.value.field == "topic_states[0].partition_states[0].isr"
    assert info.value.request == "LeaderAndIsrRequest v5"
    assert "topic_states[0].partition_states[0].isr" in str(info.value)
    with pytest.raises(RemoteProtocolError) as info:
        decode_request(frame[:-3])  # inside live_leaders[1].port
    assert info.value.field == "live_leaders[1].port"


@pytest.mark.parametrize(("api_key", "version"), DECLARED, ids=str)
def test_every_truncation_is_a_remote_protocol_error(api_key, version, served):
    _, frame = GOLDEN[api_key, version][0]()
    frame = frame[4:]
    header_end = 2 + 2 + 4 + 2 + len(CLIENT_ID) + (1 if request_header_version(api_key, version) == 2 else 0)
    for cut in range(header_end, len(frame)):
        with pytest.raises(RemoteProtocolError) as info:
            decode_request(frame[:cut])
        # Every field is named; only the top-level tag buffer (the last byte) is nobody's field.
        assert info.value.field or (cut == len(frame) - 1 and is_flexible(api_key, version)), (cut, info.value)
    _, answer = GOLDEN[api_key, version][1]()
    answer = answer[4:]
    for cut in range(4, len(answer)):
        with pytest.raises(RemoteProtocolError):
            decode_response(api_key, version, answer[:cut])


def test_truncated_responses_name_the_field():
    _, frame = lai_response()
    with pytest.raises(RemoteProtocolError) as info:
        decode_response(ApiKey.LEADER_AND_ISR, 5, frame[4:-4])  # inside partition 1's error code
    assert info.value.field == "topics[0].partition_errors[1].error_code"
    with pytest.raises(RemoteProtocolError) as info:
        decode_response(ApiKey.UPDATE_METADATA, 7, i32(12) + NO_TAGS + i8(0))  # half an ErrorCode
    assert info.value.field == "error_code"


def test_forged_array_count_is_refused_before_allocation(served):
    body = (i32(1) + i32(7) + i64(42) + i8(0)
            + uvarint(0x7FFFFFFF)  # TopicStates: two billion topics in a few bytes
            + b"\x00" * 8)
    payload = i16(4) + i16(5) + i32(99) + string(CLIENT_ID) + NO_TAGS + body
    with pytest.raises(RemoteProtocolError) as info:
        decode_request(payload)
    assert info.value.field == "topic_states"
    assert "cannot fit" in str(info.value)


def test_building_a_message_with_an_unknown_field_raises():
    """A misspelt field fails loudly: the admin client's builder (a field no version of the message has) and the
    controller's (its versions are fixed); a field of another version of the message is left out."""
    from kio.static.constants import EntityType

    from kcli.broker.controller.requests import ControllerRequestError, build, request_schema
    from kcli.protocol import LocalProtocolError
    from kcli.protocol import build_entity
    from kcli.protocol.schema import load_payload_module

    metadata = load_payload_module(3, 8, EntityType.request)
    assert build_entity(metadata, "MetadataRequestTopic", name="t", topic_id=None).name == "t"  # topic_id: v10+
    with pytest.raises(LocalProtocolError, match="no field topc_id"):
        build_entity(metadata, "MetadataRequestTopic", name="t", topc_id=None)
    with pytest.raises(ControllerRequestError, match="no field delete_partitions"):
        build(request_schema(5), {"controller_id": 1, "controller_epoch": 1, "broker_epoch": 1,
                                  "delete_partitions": True, "topic_states": []})


def test_build_entity_decides_once_per_names_and_still_raises_on_every_misspelt_call():
    """build_entity remembers, per class and names given, which values the version keeps (a Fetch response of many
    partitions decides once); the values themselves are the call's, and a misspelt name raises every time."""
    from kio.static.constants import EntityType

    from kcli.protocol import LocalProtocolError, build_entity
    from kcli.protocol.schema import load_payload_module

    v8, v10 = (load_payload_module(3, v, EntityType.request) for v in (8, 10))
    for name in ("a", "b"):
        assert build_entity(v8, "MetadataRequestTopic", name=name, topic_id=None).name == name
    topic_id = build_entity(v10, "MetadataRequestTopic", name="c", topic_id=None)
    assert (topic_id.name, topic_id.topic_id) == ("c", None)
    assert build_entity(v8, "MetadataRequestTopic", topic_id=None, name="d").name == "d"  # other order, same answer
    for _ in range(2):
        with pytest.raises(LocalProtocolError, match="no field topc_id"):
            build_entity(v8, "MetadataRequestTopic", name="t", topc_id=None)
