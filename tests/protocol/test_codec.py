"""Requests framed by kafka-python decode into the right kio objects; our responses decode in kafka-python.

kafka-python (its own schema-driven codec) is the independent implementation on the other
side; kio is what we decode with. No sockets: see ``ConnectionPair`` in conftest.py.
"""

from __future__ import annotations

import dataclasses
import io
import struct
import uuid
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v4.response import FetchableTopicResponse, FetchResponse, PartitionData
from kio.schema.find_coordinator.v0.response import FindCoordinatorResponse
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse
from kio.schema.metadata.v12 import response as metadata_v12
from kio.schema.produce.v9 import response as produce_v9
from kio.serial import entity_writer

from kcli.protocol import (
    SUPPORTED_APIS,
    ApiKey,
    LocalProtocolError,
    ProtocolError,
    RemoteProtocolError,
    UnsupportedVersionError,
    api_versions_response,
    decode_request,
    encode_response,
)
from kcli.protocol.legacy import request_schema, response_schema, response_types

# Every advertised version, kio's schemas and kcli.protocol.legacy's declared ones alike.
SERVED = [(k, v) for k, a in SUPPORTED_APIS.items() for v in range(a.min_version, a.max_version + 1)]


def _frame(pair, request) -> bytes:
    """The request frame kafka-python would put on the wire, without its size prefix."""
    return pair.client_bytes(request)[4:]


# --- requests built by kafka-python, decoded by us ---------------------------------------

@pytest.mark.parametrize("version", [0, 1, 4, 8])
def test_metadata_request_legacy_versions(pair, kafka_python, version):
    request = pair.send(kafka_python[3, "request"][version](
        topics=[kafka_python[3, "request"].MetadataRequestTopic(name="orders")],
        allow_auto_topic_creation=True))
    assert request.api_key is ApiKey.METADATA and request.api_version == version
    assert request.client_id == "kcli-test"
    assert [t.name for t in request.body.topics] == ["orders"]
    assert type(request.body).__module__ == f"kio.schema.metadata.v{version}.request"
    if version >= 4:
        assert request.body.allow_auto_topic_creation is True


def test_metadata_request_v12_flexible_all_topics(pair, kafka_python):
    request = pair.send(kafka_python[3, "request"][12](
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=True))
    assert request.header.__version__ == 2
    assert request.body.topics is None
    assert request.body.include_topic_authorized_operations is True


@pytest.mark.parametrize("version", [3, 7, 9, 10])
def test_produce_request(pair, kafka_python, version):
    cls = kafka_python[0, "request"]
    records = bytes(range(256)) * 4
    request = pair.send(cls[version](
        transactional_id=None, acks=-1, timeout_ms=1500,
        topic_data=[cls.TopicProduceData(name="orders", partition_data=[
            cls.TopicProduceData.PartitionProduceData(index=2, records=records)])]))
    assert request.name == f"ProduceRequest v{version}"
    assert request.expects_response
    assert request.body.acks == -1
    assert request.body.timeout == timedelta(milliseconds=1500)
    [topic] = request.body.topic_data
    assert topic.name == "orders"
    [partition] = topic.partition_data
    assert (partition.index, partition.records) == (2, records)


def test_produce_acks_0_expects_no_response(pair, kafka_python):
    cls = kafka_python[0, "request"]
    request = pair.send(cls[9](transactional_id="tx", acks=0, timeout_ms=10, topic_data=[]))
    assert request.body.transactional_id == "tx"
    assert not request.expects_response
    assert pair.server.awaiting_response == 0


@pytest.mark.parametrize("version", [4, 10, 12, 16])
def test_fetch_request(pair, kafka_python, version):
    cls = kafka_python[1, "request"]
    topic_id = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
    fields = {"replica_id": -1} if version < 15 else {}
    request = pair.send(cls[version](
        max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=1, **fields,
        topics=[cls.FetchTopic(topic="orders", topic_id=topic_id, partitions=[
            cls.FetchTopic.FetchPartition(partition=0, fetch_offset=42, partition_max_bytes=1048576)])]))
    body = request.body
    assert body.max_wait == timedelta(milliseconds=500)
    assert (body.min_bytes, body.max_bytes, body.isolation_level) == (1, 52428800, 1)
    [topic] = body.topics
    if version >= 13:  # KIP-516: topic ids replace names
        assert topic.topic_id == topic_id
    else:
        assert topic.topic == "orders"
    [partition] = topic.partitions
    assert (partition.partition, partition.fetch_offset, partition.partition_max_bytes) == (0, 42, 1048576)


def test_fetch_request_v12_known_tagged_field(pair, kafka_python):
    cls = kafka_python[1, "request"]
    request = pair.send(cls[12](cluster_id="abc", replica_id=-1, max_wait_ms=1, min_bytes=1, topics=[]))
    assert request.body.cluster_id == "abc"


@pytest.mark.parametrize("version", [1, 6, 8])
def test_list_offsets_request(pair, kafka_python, version):
    cls = kafka_python[2, "request"]
    request = pair.send(cls[version](replica_id=-1, isolation_level=0, topics=[
        cls.ListOffsetsTopic(name="orders", partitions=[
            cls.ListOffsetsTopic.ListOffsetsPartition(partition_index=1, timestamp=-2)])]))
    [topic] = request.body.topics
    assert topic.partitions[0].timestamp == -2


@pytest.mark.parametrize("version", [0, 3, 4])
def test_find_coordinator_request(pair, kafka_python, version):
    cls = kafka_python[10, "request"]
    if version < 4:
        request = pair.send(cls[version](key="group-a", key_type=0))
        assert request.body.key == "group-a"
    else:  # KIP-699 batches the keys
        request = pair.send(cls[version](key_type=0, coordinator_keys=["group-a", "group-b"]))
        assert request.body.coordinator_keys == ("group-a", "group-b")


@pytest.mark.parametrize("version", [0, 5, 6, 9])
def test_join_group_request(pair, kafka_python, version):
    cls = kafka_python[11, "request"]
    request = pair.send(cls[version](
        group_id="g", session_timeout_ms=10000, rebalance_timeout_ms=30000, member_id="",
        protocol_type="consumer", protocols=[cls.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")]))
    assert request.body.group_id == "g"
    assert request.body.session_timeout == timedelta(seconds=10)
    assert request.body.protocols[0].metadata == b"\x00\x01"


@pytest.mark.parametrize("version", [2, 8, 9])
def test_offset_commit_request(pair, kafka_python, version):
    cls = kafka_python[8, "request"]
    request = pair.send(cls[version](
        group_id="g", generation_id_or_member_epoch=3, member_id="m", retention_time_ms=-1,
        topics=[cls.OffsetCommitRequestTopic(name="orders", partitions=[
            cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=17, committed_metadata="meta")])]))
    partition = request.body.topics[0].partitions[0]
    assert (partition.committed_offset, partition.committed_metadata) == (17, "meta")


@pytest.mark.parametrize("version", [0, 4])
def test_init_producer_id_request(pair, kafka_python, version):
    cls = kafka_python[22, "request"]
    request = pair.send(cls[version](transactional_id=None, transaction_timeout_ms=60000))
    assert request.body.transactional_id is None
    assert request.body.transaction_timeout == timedelta(minutes=1)


@pytest.mark.parametrize("version", [2, 5, 7])
def test_create_topics_request(pair, kafka_python, version):
    cls = kafka_python[19, "request"]
    request = pair.send(cls[version](timeout_ms=1000, validate_only=False, topics=[
        cls.CreatableTopic(name="orders", num_partitions=3, replication_factor=1, assignments=[],
                           configs=[cls.CreatableTopic.CreatableTopicConfig(name="cleanup.policy", value="compact")])]))
    [topic] = request.body.topics
    assert (topic.name, topic.num_partitions, topic.replication_factor) == ("orders", 3, 1)
    assert topic.configs[0].value == "compact"


@pytest.mark.parametrize(("api_key", "version"), SERVED, ids=str)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_request_from_kafka_python_decodes_to_the_same_message(
        api_key, version, data, kafka_python, random_kio, connection_pair):
    # Random kio message -> kio bytes -> kafka-python object -> kafka-python's own framing
    # -> ServerConnection: both codecs must agree on every field at every served version.
    body_type = request_schema(api_key, version)
    message = data.draw(random_kio(body_type))
    out = io.BytesIO()
    entity_writer(body_type)(out, message)
    theirs = kafka_python[api_key, "request"][version].decode(out.getvalue())
    assert connection_pair().send(theirs).body == message


# --- responses encoded by us, decoded by kafka-python ------------------------------------

def test_metadata_response_v12(pair, kafka_python):
    request = pair.send(kafka_python[3, "request"][12](topics=None, allow_auto_topic_creation=True))
    topic_id = uuid.uuid4()
    body = metadata_v12.MetadataResponse(
        throttle_time=timedelta(0), cluster_id="kcli-cluster", controller_id=1,
        brokers=(metadata_v12.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9092),),
        topics=(metadata_v12.MetadataResponseTopic(
            error_code=ErrorCode.none, name="orders", topic_id=topic_id, partitions=(
                metadata_v12.MetadataResponsePartition(
                    error_code=ErrorCode.none, partition_index=0, leader_id=1, leader_epoch=0,
                    replica_nodes=(1,), isr_nodes=(1,), offline_replicas=()),)),))
    response = pair.respond(request, body)
    assert response.cluster_id == "kcli-cluster"
    assert [(b.node_id, b.host, b.port) for b in response.brokers] == [(1, "127.0.0.1", 9092)]
    [topic] = response.topics
    assert (topic.name, topic.topic_id) == ("orders", topic_id)
    assert topic.partitions[0].isr_nodes == [1]


def test_produce_response_v9(pair, kafka_python):
    cls = kafka_python[0, "request"]
    request = pair.send(cls[9](transactional_id=None, acks=1, timeout_ms=100, topic_data=[]))
    body = produce_v9.ProduceResponse(throttle_time=timedelta(0), responses=(
        produce_v9.TopicProduceResponse(name="orders", partition_responses=(
            produce_v9.PartitionProduceResponse(
                index=0, error_code=ErrorCode.none, base_offset=100, log_append_time=None,
                log_start_offset=0, record_errors=()),)),))
    response = pair.respond(request, body)
    partition = response.responses[0].partition_responses[0]
    assert (partition.base_offset, partition.log_append_time_ms, partition.error_code) == (100, -1, 0)


def test_fetch_response_v4_carries_records(pair, kafka_python):
    cls = kafka_python[1, "request"]
    request = pair.send(cls[4](replica_id=-1, max_wait_ms=1, min_bytes=1, topics=[]))
    records = b"\x00" * 61 + b"batch"
    body = FetchResponse(throttle_time=timedelta(0), responses=(
        FetchableTopicResponse(topic="orders", partitions=(
            PartitionData(partition_index=0, error_code=ErrorCode.offset_out_of_range, high_watermark=5,
                          last_stable_offset=5, aborted_transactions=None, records=records),)),))
    response = pair.respond(request, body)
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.offset_out_of_range == 1
    assert bytes(partition.records) == records


def test_find_coordinator_and_init_producer_id_responses(pair, kafka_python):
    request = pair.send(kafka_python[10, "request"][0](key="g"))
    response = pair.respond(request, FindCoordinatorResponse(
        error_code=ErrorCode.none, node_id=1, host="localhost", port=9092))
    assert (response.node_id, response.host, response.port) == (1, "localhost", 9092)

    request = pair.send(kafka_python[22, "request"][4](transactional_id=None, transaction_timeout_ms=1))
    response = pair.respond(request, InitProducerIdResponse(
        throttle_time=timedelta(0), error_code=ErrorCode.none, producer_id=4000, producer_epoch=0))
    assert (response.producer_id, response.producer_epoch) == (4000, 0)


def test_flexible_response_uses_header_v1(pair, kafka_python):
    request = pair.send(kafka_python[22, "request"][4](transactional_id=None, transaction_timeout_ms=1))
    frame = encode_response(request, InitProducerIdResponse(
        throttle_time=timedelta(0), error_code=ErrorCode.none, producer_id=1, producer_epoch=0))
    size, correlation_id, tag_count = struct.unpack_from(">iiB", frame)
    assert (size, correlation_id, tag_count) == (len(frame) - 4, request.correlation_id, 0)


@pytest.mark.parametrize(("api_key", "version"), SERVED, ids=str)
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_response_we_encode_reads_back_in_kafka_python(
        api_key, version, data, kafka_python, random_kio, connection_pair):
    # Our frame -> kafka-python's client protocol (header, correlation, body) -> kafka-python
    # re-encodes the body: the bytes must be ours, so both codecs agree field by field.
    message = data.draw(random_kio(response_schema(api_key, version)))
    if api_key is ApiKey.API_VERSIONS:
        # kafka-python reads any ApiVersions answer with an error as v0 (the KIP-511 layout).
        message = dataclasses.replace(message, error_code=ErrorCode.none)
    pair = connection_pair()
    acks = {"acks": 1} if api_key is ApiKey.PRODUCE else {}  # kafka-python defaults to acks=0
    request = pair.send(kafka_python[api_key, "request"][version](**acks))
    frame = pair.server.send(request, message)
    [(_, theirs)] = pair.client.receive_bytes(frame)
    theirs._header = None
    header_size = 4 + (5 if request.header.__version__ == 2 and api_key is not ApiKey.API_VERSIONS else 4)
    assert bytes(theirs.encode(version=version)) == frame[header_size:]


# --- ApiVersions ---------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_answered_at_every_served_version(pair, kafka_python, version):
    cls = kafka_python[18, "request"]
    fields = {"client_software_name": "kafka-python", "client_software_version": "3.0.12"} if version >= 3 else {}
    request = pair.send(cls[version](**fields))
    if version >= 3:  # KIP-511
        assert request.header.__version__ == 2
        assert (request.body.client_software_name, request.body.client_software_version) == (
            "kafka-python", "3.0.12")
    frame = pair.server.send(request, api_versions_response(version=version))
    assert struct.unpack_from(">ii", frame)[1] == request.correlation_id  # header v0, even at v3
    [(_, response)] = pair.client.receive_bytes(frame)
    assert response.error_code == 0
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == {
        int(k): (a.min_version, a.max_version) for k, a in SUPPORTED_APIS.items()}


@pytest.mark.parametrize("version", [4, 5, 100])
def test_api_versions_too_new_gets_unsupported_version_in_v0_layout(pair, kafka_python, version):
    cls = kafka_python[18, "request"]
    frame = _frame(pair, cls[4](client_software_name="librdkafka", client_software_version="2.6.0"))
    frame = frame[:2] + struct.pack(">h", version) + frame[4:]  # ask for a version nobody knows
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(frame)
    error = caught.value
    assert (error.api_key, error.api_version, error.client_id) == (18, version, "kcli-test")
    response = error.response
    # Size, correlation id (header v0), ErrorCode 35, int32-counted ApiVersion entries (v0 body).
    size, correlation_id, error_code, count = struct.unpack_from(">iihi", response)
    assert (size, correlation_id, error_code, count) == (len(response) - 4, 1, 35, len(SUPPORTED_APIS))
    entries = [struct.unpack_from(">hhh", response, 14 + 6 * i) for i in range(count)]
    assert len(response) == 14 + 6 * count
    assert {k: (lo, hi) for k, lo, hi in entries} == {
        int(k): (a.min_version, a.max_version) for k, a in SUPPORTED_APIS.items()}
    # kafka-python, having asked v4, reads the answer in the v0 layout.
    pair.client.in_flight_requests[0].request_api_version = 4
    [(_, answer)] = pair.client.receive_bytes(response)
    assert answer.error_code == 35 and len(answer.api_keys) == len(SUPPORTED_APIS)


# --- what the peer may not send --------------------------------------------------------------

def test_unknown_api_key_is_refused_without_answer():
    for api_key in (35, 9999, -1):  # 35: DescribeLogDirs, not served
        with pytest.raises(UnsupportedVersionError) as caught:
            decode_request(struct.pack(">hhi", api_key, 0, 9) + b"\x00\x00")
        assert caught.value.response is None
        assert caught.value.correlation_id == 9


@pytest.mark.parametrize(("api_key", "version"), [(3, 13), (19, 1), (1, 17), (20, 0), (0, 11), (18, -1)])
def test_versions_outside_the_table_are_refused(api_key, version):
    with pytest.raises(UnsupportedVersionError) as caught:
        decode_request(struct.pack(">hhi", api_key, version, 1) + b"\x00\x00")
    assert (caught.value.api_key, caught.value.api_version) == (api_key, version)
    assert (caught.value.response is not None) == (api_key == 18)


def test_produce_v0_to_v2_are_served_from_declared_layouts():
    """Produce v0-v2 are v3 without transactional_id; answered without throttle_time (v0) and
    log_append_time (v0, v1), from kcli.protocol.legacy's declarations."""
    body = struct.pack(">hi", 1, 5000) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1) + \
        struct.pack(">i", 0) + struct.pack(">i", 3) + b"xyz"
    for version in range(3):
        frame = struct.pack(">hhi", 0, version, 7) + struct.pack(">h", 2) + b"cl" + body
        request = decode_request(frame)
        assert request.api_version == version and not hasattr(request.body, "transactional_id")
        assert request.body.acks == 1 and bytes(request.body.topic_data[0].partition_data[0].records) == b"xyz"
        assert request.body.timeout == timedelta(seconds=5)
        R = response_types(request.body)

        def build(module, class_name, **values):  # the fields this version has (as the broker's handlers build)
            cls = getattr(module, class_name)
            return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls)})

        response = build(R, "ProduceResponse", throttle_time=timedelta(0), responses=(
            build(R, "TopicProduceResponse", name="t", partition_responses=(
                build(R, "PartitionProduceResponse", index=0, error_code=ErrorCode.none, base_offset=42,
                      log_append_time=None),)),))
        out = encode_response(request, response)
        expected = struct.pack(">i", 7) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", 1) + \
            struct.pack(">ihq", 0, 0, 42) + (struct.pack(">q", -1) if version >= 2 else b"") + \
            (struct.pack(">i", 0) if version >= 1 else b"")
        assert out == struct.pack(">i", len(expected)) + expected


def _sample_request(kafka_python, api_key: int, version: int):
    cls = kafka_python[api_key, "request"]
    if api_key == 3:
        return cls[version](topics=[cls.MetadataRequestTopic(name="a")], allow_auto_topic_creation=True)
    if api_key == 0:
        return cls[version](acks=1, timeout_ms=5, topic_data=[cls.TopicProduceData(
            name="t", partition_data=[cls.TopicProduceData.PartitionProduceData(index=0, records=b"xyz")])])
    if api_key == 1:
        return cls[version](replica_id=-1, cluster_id="c", topics=[cls.FetchTopic(
            topic="t", partitions=[cls.FetchTopic.FetchPartition(partition=0, fetch_offset=1)])])
    return cls[version](client_software_name="x", client_software_version="1")


@pytest.mark.parametrize(("api_key", "version"), [(3, 4), (3, 12), (0, 3), (0, 9), (1, 4), (1, 12), (18, 3)])
def test_every_truncation_names_what_is_missing(pair, kafka_python, api_key, version):
    frame = _frame(pair, _sample_request(kafka_python, api_key, version))
    decode_request(frame)
    for cut in range(len(frame)):
        with pytest.raises(RemoteProtocolError) as caught:
            decode_request(frame[:cut])
        error = caught.value
        assert not isinstance(error, UnsupportedVersionError)
        assert error.field is not None or "tagged field" in error.reason, (cut, str(error))
        if cut >= 8:
            assert error.request is not None and error.correlation_id == 1


def test_forged_array_count_is_refused_not_allocated(pair, kafka_python):
    # kio's reader would reserve 0x7fffffff slots and abort the process (see guard.py).
    frame = _frame(pair, kafka_python[3, "request"][4](topics=[], allow_auto_topic_creation=True))
    header_end = 8 + 2 + len("kcli-test")
    forged = frame[:header_end] + struct.pack(">i", 0x7FFFFFFF) + frame[header_end + 4:]
    with pytest.raises(RemoteProtocolError, match="cannot fit") as caught:
        decode_request(forged)
    assert caught.value.field == "topics"
    assert caught.value.request == "MetadataRequest v4"


def test_forged_nested_count_names_the_path(pair, kafka_python):
    cls = kafka_python[0, "request"]
    frame = _frame(pair, cls[3](transactional_id=None, acks=1, timeout_ms=5, topic_data=[
        cls.TopicProduceData(name="t", partition_data=[])]))
    forged = frame[:-4] + struct.pack(">i", 0x10000000)  # partition_data count is the last field
    with pytest.raises(RemoteProtocolError) as caught:
        decode_request(forged)
    assert caught.value.field == "topic_data[0].partition_data"


def test_forged_compact_count_in_flexible_request(pair, kafka_python):
    frame = _frame(pair, kafka_python[3, "request"][12](topics=[], allow_auto_topic_creation=True))
    header_end = 8 + 2 + len("kcli-test") + 1
    forged = frame[:header_end] + b"\xff\xff\xff\xff\x0f" + frame[header_end + 1:]
    with pytest.raises(RemoteProtocolError, match="cannot fit") as caught:
        decode_request(forged)
    assert caught.value.field == "topics"


def test_negative_lengths(pair, kafka_python):
    frame = _frame(pair, kafka_python[3, "request"][1](topics=[]))
    with pytest.raises(RemoteProtocolError, match="invalid array length -2"):
        decode_request(frame[:-4] + struct.pack(">i", -2))
    cls = kafka_python[0, "request"]
    frame = _frame(pair, cls[3](transactional_id=None, acks=1, timeout_ms=5, topic_data=[
        cls.TopicProduceData(name="t", partition_data=[
            cls.TopicProduceData.PartitionProduceData(index=0, records=None)])]))
    with pytest.raises(RemoteProtocolError, match="invalid bytes length -7") as caught:
        decode_request(frame[:-4] + struct.pack(">i", -7))
    assert caught.value.field == "topic_data[0].partition_data[0].records"


def test_trailing_bytes_are_ignored_as_kafka_does(pair, kafka_python):
    frame = _frame(pair, kafka_python[18, "request"][0]())
    request = decode_request(frame + b"abc")
    assert request.trailing_bytes == 3
    assert dataclasses.replace(decode_request(frame), trailing_bytes=3) == request
    assert decode_request(frame).trailing_bytes == 0


def test_trailing_bytes_after_a_flexible_body_are_ignored(pair, kafka_python):
    # librdkafka's all-topics Metadata v12 (topics null): 3 stray bytes after the tagged fields.
    frame = _frame(pair, kafka_python[3, "request"][12](topics=None, allow_auto_topic_creation=False))
    request = decode_request(frame + b"\x00\x00\x00")
    assert (request.body.topics, request.trailing_bytes) == (None, 3)


def test_a_short_body_is_still_refused(pair, kafka_python):
    # Leniency is for bytes after the body only: one byte short is the peer's error, as in Kafka.
    frame = _frame(pair, kafka_python[3, "request"][12](topics=None, allow_auto_topic_creation=False))
    with pytest.raises(RemoteProtocolError):
        decode_request(frame[:-1])
    frame = _frame(pair, kafka_python[3, "request"][1](topics=[]))
    with pytest.raises(RemoteProtocolError):
        decode_request(frame[:-1])


def test_a_malformed_header_is_still_refused_with_trailing_bytes(pair, kafka_python):
    frame = _frame(pair, kafka_python[18, "request"][0]())
    with pytest.raises(RemoteProtocolError) as caught:
        decode_request(frame[:10] + b"\xff" + frame[11:] + b"abc")
    assert caught.value.field == "header.client_id"


def test_invalid_utf8_names_the_header_field(pair, kafka_python):
    frame = _frame(pair, kafka_python[18, "request"][0]())
    with pytest.raises(RemoteProtocolError) as caught:
        decode_request(frame[:10] + b"\xff" + frame[11:])
    assert caught.value.field == "header.client_id"


def test_unknown_tagged_field_is_refused(pair, kafka_python):
    frame = _frame(pair, kafka_python[18, "request"][3](client_software_name="x", client_software_version="1"))
    assert frame.endswith(b"\x00")
    with pytest.raises(RemoteProtocolError, match="unknown tagged field 5"):
        decode_request(frame[:-1] + b"\x01\x05\x01\x00")


def test_tagged_field_size_must_match(pair, kafka_python):
    frame = _frame(pair, kafka_python[1, "request"][12](cluster_id="abc", replica_id=-1, topics=[]))
    tags = b"\x01\x00\x04\x04abc"  # one tag: ClusterId (0), 4 bytes, compact string "abc"
    assert frame.endswith(tags)
    with pytest.raises(RemoteProtocolError, match="declares 5 bytes but holds 4") as caught:
        decode_request(frame[:-len(tags)] + b"\x01\x00\x05\x04abcX")
    assert caught.value.field == "cluster_id"


def test_buffers_other_than_bytes_decode(pair, kafka_python):
    frame = _frame(pair, kafka_python[18, "request"][0]())
    for buffer in (bytearray(frame), memoryview(bytearray(frame))):
        assert decode_request(buffer).api_key is ApiKey.API_VERSIONS


def test_header_shorter_than_its_fixed_part():
    for cut, field in [(0, "request_api_key"), (3, "request_api_version"), (7, "correlation_id")]:
        with pytest.raises(RemoteProtocolError) as caught:
            decode_request(b"\x00" * cut)
        assert caught.value.field == field


# --- what we may not send ----------------------------------------------------------------------

def test_response_must_answer_its_request(pair, kafka_python):
    request = pair.send(kafka_python[10, "request"][0](key="g"))
    with pytest.raises(LocalProtocolError, match="does not answer"):
        encode_response(request, api_versions_response(version=0))
    with pytest.raises(LocalProtocolError, match="does not answer"):
        encode_response(request, response_schema(10, 1)(
            throttle_time=timedelta(0), error_code=ErrorCode.none, error_message=None,
            node_id=1, host="h", port=1))
    with pytest.raises(LocalProtocolError, match="cannot encode"):
        encode_response(request, FindCoordinatorResponse(
            error_code=ErrorCode.none, node_id=2**40, host="h", port=1))


def test_protocol_errors_read_well():
    error = RemoteProtocolError("array too long", request="FetchRequest v12", field="topics[0].partitions",
                                position=40, correlation_id=7)
    assert str(error) == "FetchRequest v12, correlation id 7, field topics[0].partitions, byte 40: array too long"
    assert isinstance(error, ProtocolError)
