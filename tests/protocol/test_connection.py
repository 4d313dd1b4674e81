"""ServerConnection paired with kafka-python's client protocol: framing, limits, response order."""

from __future__ import annotations

import dataclasses
import struct
import uuid
from datetime import timedelta

import pytest
from kio.index import load_payload_module, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.static.constants import EntityType

from kcli.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    NEED_DATA,
    FrameTooLargeError,
    LocalProtocolError,
    RemoteProtocolError,
    ServerConnection,
    UnsupportedVersionError,
    api_versions_response,
    encode_response,
)


def _mixed_requests(kafka_python):
    produce = kafka_python[0, "request"]
    fetch = kafka_python[1, "request"]
    return [
        kafka_python[18, "request"][3](client_software_name="kcli", client_software_version="0.1"),
        kafka_python[3, "request"][12](topics=None, allow_auto_topic_creation=True),
        produce[9](acks=1, timeout_ms=5, topic_data=[produce.TopicProduceData(
            name="t", partition_data=[produce.TopicProduceData.PartitionProduceData(index=0, records=b"r" * 300)])]),
        produce[3](acks=0, timeout_ms=5, topic_data=[]),
        fetch[16](max_wait_ms=500, min_bytes=1, topics=[]),
        kafka_python[12, "request"][0](group_id="g", generation_id=1, member_id="m"),
    ]


def _stream(pair, requests) -> bytes:
    return b"".join(pair.client_bytes(r) for r in requests)


def _drain(connection: ServerConnection) -> list:
    out = []
    while (request := connection.next_request()) is not NEED_DATA:
        out.append(request)
    return out


def _summary(requests) -> list[tuple]:
    return [(r.api_key, r.api_version, r.correlation_id, r.body) for r in requests]


def test_pipelined_frames_in_one_chunk(pair, kafka_python):
    pair.server.receive_data(_stream(pair, _mixed_requests(kafka_python)))
    got = _drain(pair.server)
    assert [(int(r.api_key), r.api_version) for r in got] == [(18, 3), (3, 12), (0, 9), (0, 3), (1, 16), (12, 0)]
    assert [r.correlation_id for r in got] == [1, 2, 3, 4, 5, 6]
    assert pair.server.buffered_bytes == 0
    assert pair.server.awaiting_response == 5  # not the acks=0 Produce


def test_frames_split_at_every_byte_boundary(pair, kafka_python, connection_pair):
    data = _stream(pair, _mixed_requests(kafka_python))
    whole = ServerConnection()
    whole.receive_data(data)
    expected = _summary(_drain(whole))
    for cut in range(len(data) + 1):
        connection = ServerConnection()
        connection.receive_data(data[:cut])
        got = _drain(connection)
        connection.receive_data(data[cut:])
        got += _drain(connection)
        assert _summary(got) == expected, cut


def test_frames_fed_one_byte_at_a_time(pair, kafka_python):
    data = _stream(pair, _mixed_requests(kafka_python))
    connection = ServerConnection()
    got = []
    for i in range(len(data)):
        connection.receive_data(data[i:i + 1])
        got += _drain(connection)
        assert connection.buffered_bytes < len(data)
    assert len(got) == 6


def test_partial_frame_is_visible_as_buffered_bytes(pair, kafka_python):
    data = pair.client_bytes(kafka_python[18, "request"][0]())
    pair.server.receive_data(data[:-1])
    assert pair.server.next_request() is NEED_DATA
    assert pair.server.buffered_bytes == len(data) - 1


def test_many_small_frames_and_one_large_frame(pair, kafka_python):
    heartbeat = kafka_python[12, "request"][4]
    data = b"".join(pair.client_bytes(heartbeat(group_id="g", generation_id=1, member_id="m"))
                    for _ in range(5000))
    produce = kafka_python[0, "request"]
    big = b"v" * (3 * 1024 * 1024)
    data += pair.client_bytes(produce[9](acks=-1, timeout_ms=5, topic_data=[produce.TopicProduceData(
        name="t", partition_data=[produce.TopicProduceData.PartitionProduceData(index=0, records=big)])]))
    got = []
    for i in range(0, len(data), 65536):
        pair.server.receive_data(data[i:i + 65536])
        got += _drain(pair.server)
    assert len(got) == 5001
    assert [r.correlation_id for r in got] == list(range(1, 5002))
    assert got[-1].body.topic_data[0].partition_data[0].records == big
    assert pair.server.buffered_bytes == 0


def test_responses_follow_request_order(pair, kafka_python):
    heartbeat = kafka_python[12, "request"][4]
    first = pair.send(heartbeat(group_id="g", generation_id=1, member_id="m"))
    second = pair.send(heartbeat(group_id="g", generation_id=2, member_id="m"))
    answer = HeartbeatResponse(throttle_time=timedelta(0), error_code=ErrorCode.rebalance_in_progress)
    with pytest.raises(LocalProtocolError, match="request order"):
        pair.server.send(second, answer)
    assert pair.respond(first, answer).error_code == 27
    assert pair.respond(second, answer).error_code == 27
    with pytest.raises(LocalProtocolError, match="no such request"):
        pair.server.send(second, answer)
    assert pair.server.awaiting_response == 0


def test_acks_0_produce_gets_no_response(pair, kafka_python):
    request = pair.send(kafka_python[0, "request"][9](acks=0, timeout_ms=5, topic_data=[]))
    assert not request.expects_response
    assert not pair.client.in_flight_requests  # kafka-python does not wait either
    with pytest.raises(LocalProtocolError, match="acks=0"):
        pair.server.send(request, None)


def test_frame_too_large_is_refused_from_its_size_prefix():
    connection = ServerConnection(max_frame_bytes=1000)
    connection.receive_data(struct.pack(">i", 1001))
    with pytest.raises(FrameTooLargeError) as caught:
        connection.next_request()
    assert (caught.value.size, caught.value.max_frame_bytes) == (1001, 1000)
    assert connection.error is caught.value
    connection.receive_data(b"\x00" * 2000)  # ignored from now on
    assert connection.buffered_bytes == 0
    with pytest.raises(LocalProtocolError, match="unusable"):
        connection.next_request()


def test_default_limit_is_socket_request_max_bytes():
    assert DEFAULT_MAX_FRAME_BYTES == 104857600
    connection = ServerConnection()
    connection.receive_data(struct.pack(">i", 104857601))
    with pytest.raises(FrameTooLargeError):
        connection.next_request()
    connection = ServerConnection()
    connection.receive_data(struct.pack(">i", 104857600))
    assert connection.next_request() is NEED_DATA


def test_frame_of_exactly_the_limit_is_accepted(pair, kafka_python):
    data = pair.client_bytes(kafka_python[18, "request"][0]())
    connection = ServerConnection(max_frame_bytes=len(data) - 4)
    connection.receive_data(data)
    assert connection.next_request() is not NEED_DATA


@pytest.mark.parametrize("size", [-1, -2**31])
def test_negative_frame_size(size):
    connection = ServerConnection()
    connection.receive_data(struct.pack(">i", size))
    with pytest.raises(RemoteProtocolError, match="negative frame size"):
        connection.next_request()
    with pytest.raises(LocalProtocolError):
        connection.next_request()


def test_malformed_frame_makes_the_connection_unusable(pair, kafka_python):
    good = pair.client_bytes(kafka_python[18, "request"][0]())
    pair.server.receive_data(struct.pack(">i", 9) + b"\x00\x03\x00\x01\x00\x00\x00\x07\xff" + good)
    with pytest.raises(RemoteProtocolError) as caught:
        pair.server.next_request()
    assert caught.value.request == "MetadataRequest v1" and caught.value.correlation_id == 7
    with pytest.raises(LocalProtocolError):
        pair.server.next_request()


def test_unknown_api_key_makes_the_connection_unusable():
    connection = ServerConnection()
    body = struct.pack(">hhih", 38, 1, 3, -1) + b"\x00\x00\x00\x00"  # CreateDelegationToken: not served
    connection.receive_data(struct.pack(">i", len(body)) + body)
    with pytest.raises(UnsupportedVersionError) as caught:
        connection.next_request()
    assert caught.value.response is None
    with pytest.raises(LocalProtocolError):
        connection.next_request()


def test_api_versions_fallback_keeps_the_connection(pair, kafka_python):
    # A v4 client (KIP-511) hears UNSUPPORTED_VERSION in the v0 layout, then retries lower.
    cls = kafka_python[18, "request"]
    pair.server.receive_data(pair.client_bytes(cls[4](client_software_name="x", client_software_version="1")))
    with pytest.raises(UnsupportedVersionError) as caught:
        pair.server.next_request()
    [(_, answer)] = pair.client.receive_bytes(caught.value.response)
    assert answer.error_code == 35
    ours = {k.api_key: k.max_version for k in answer.api_keys}
    assert pair.server.error is None
    retry = pair.send(cls[ours[18]](client_software_name="x", client_software_version="1"))
    response = pair.respond(retry, api_versions_response(version=retry.api_version))
    assert response.error_code == 0 and len(response.api_keys) == len(answer.api_keys)


class _Region:
    """Stands in for storage's FetchSlice: segment bytes the server sends with sendfile."""

    file_region = True

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)


@pytest.mark.parametrize("version", [4, 12, 16])
def test_send_parts_keeps_file_regions_whole(pair, kafka_python, version):
    module = load_payload_module(1, version, EntityType.response)
    fetch = kafka_python[1, "request"]
    first = pair.send(fetch[version](max_wait_ms=1, min_bytes=1, topics=[]))
    second = pair.send(fetch[version](max_wait_ms=1, min_bytes=1, topics=[]))
    records = b"\x00" * 61 + b"batch-bytes"

    def body(value):
        wanted = {"partition_index": 0, "error_code": ErrorCode.none, "high_watermark": 1,
                  "last_stable_offset": 1, "log_start_offset": 0, "aborted_transactions": (),
                  "preferred_read_replica": -1, "records": value}
        partition = module.PartitionData(**{f.name: wanted[f.name] for f in dataclasses.fields(
            module.PartitionData) if f.name in wanted})
        topic_key = {"topic_id": uuid.UUID(int=7)} if version >= 13 else {"topic": "t"}
        fields = {"session_id": 0, "error_code": ErrorCode.none} if version >= 7 else {}
        return load_response_schema(1, version)(
            throttle_time=timedelta(0), **fields,
            responses=(module.FetchableTopicResponse(**topic_key, partitions=(partition,)),))

    region = _Region(records)
    parts = pair.server.send_parts(first, body(region))
    assert any(part is region for part in parts)
    assert all(isinstance(part, bytes) or part is region for part in parts)
    joined = b"".join(part if isinstance(part, bytes) else part.data for part in parts)
    assert joined == encode_response(first, body(records))
    [(_, response)] = pair.client.receive_bytes(joined)
    assert bytes(response.responses[0].partitions[0].records) == records
    with pytest.raises(LocalProtocolError, match="no such request"):
        pair.server.send_parts(first, body(region))
    assert pair.respond(second, body(records)).responses[0].partitions[0].high_watermark == 1


def test_send_parts_passes_large_record_buffers_through_uncopied(pair, kafka_python):
    """A remote read's records (a view of a cached chunk, issue 28) are a part of their own, the same object:
    no copy into the frame. Small ones are copied into the frame as before."""
    from kcli.protocol.codec import PASS_THROUGH_BYTES

    module = load_payload_module(1, 12, EntityType.response)
    fetch = kafka_python[1, "request"]
    chunk = bytes(range(256)) * (PASS_THROUGH_BYTES // 128)
    for records, whole in ((memoryview(chunk)[7:PASS_THROUGH_BYTES + 7], True), (chunk[:100], False)):
        request = pair.send(fetch[12](max_wait_ms=1, min_bytes=1, topics=[]))
        partition = module.PartitionData(partition_index=0, error_code=ErrorCode.none, high_watermark=1,
                                         last_stable_offset=1, log_start_offset=0, aborted_transactions=(),
                                         preferred_read_replica=-1, records=records)
        response = load_response_schema(1, 12)(throttle_time=timedelta(0), session_id=0, error_code=ErrorCode.none,
                                               responses=(module.FetchableTopicResponse(topic="t",
                                                                                        partitions=(partition,)),))
        parts = pair.server.send_parts(request, response)
        assert any(part is records for part in parts) is whole
        [(_, decoded)] = pair.client.receive_bytes(b"".join(parts))
        assert bytes(decoded.responses[0].partitions[0].records) == bytes(records)


# -- ClientConnection: the client side, paired with the broker side (h11's ConnectionPair) --------------------

def _client_server():
    from kcli.protocol import ClientConnection

    return ClientConnection("kctl-test", peer="broker 1"), ServerConnection()


def _heartbeat(version: int = 4):
    module = load_payload_module(12, version, EntityType.request)
    return module.HeartbeatRequest(group_id="g", generation_id=1, member_id="m", group_instance_id=None)


def test_client_requests_round_trip_through_a_server_connection_in_order():
    client, server = _client_server()
    sent = [client.send_request(12, 4, _heartbeat()) for _ in range(3)]
    assert [r.correlation_id for r, _ in sent] == [1, 2, 3] and client.in_flight == 3
    server.receive_data(b"".join(frame for _, frame in sent))
    requests = _drain(server)
    assert [r.correlation_id for r in requests] == [1, 2, 3] and requests[0].body.group_id == "g"
    answers = b"".join(server.send(r, HeartbeatResponse(throttle_time=timedelta(0), error_code=ErrorCode.none))
                       for r in requests)
    for cut in range(len(answers)):  # split anywhere: the client waits for whole frames
        client2, _ = _client_server()
        for _ in range(3):
            client2.send_request(12, 4, _heartbeat())
        client2.receive_data(answers[:cut])
        got = []
        while (response := client2.next_response()) is not NEED_DATA:
            got.append(response)
        client2.receive_data(answers[cut:])
        while (response := client2.next_response()) is not NEED_DATA:
            got.append(response)
        assert [r.request.correlation_id for r in got] == [1, 2, 3]
        assert all(r.body.error_code == ErrorCode.none for r in got) and client2.in_flight == 0


def test_client_refuses_a_response_for_another_correlation_id():
    client, server = _client_server()
    _, frame = client.send_request(12, 4, _heartbeat())
    server.receive_data(frame)
    request = _drain(server)[0]
    wrong = dataclasses.replace(request, correlation_id=request.correlation_id + 5)
    client.receive_data(encode_response(wrong, HeartbeatResponse(throttle_time=timedelta(0),
                                                                 error_code=ErrorCode.none)))
    with pytest.raises(RemoteProtocolError, match="broker 1 answered correlation id 6 where 1 was due"):
        client.next_response()
    with pytest.raises(LocalProtocolError, match="unusable"):
        client.send_request(12, 4, _heartbeat())


@pytest.mark.parametrize("size", [-1, DEFAULT_MAX_FRAME_BYTES + 1])
def test_client_refuses_a_bad_frame_size_before_reading_it(size):
    client, _ = _client_server()
    client.send_request(12, 4, _heartbeat())
    client.receive_data(struct.pack(">i", size))
    with pytest.raises(RemoteProtocolError, match="frame"):
        client.next_response()


def test_client_refuses_a_response_to_nothing_and_acks_0_awaits_none():
    client, _ = _client_server()
    module = load_payload_module(0, 9, EntityType.request)
    _, frame = client.send_request(0, 9, module.ProduceRequest(transactional_id=None, acks=0,
                                                                timeout=timedelta(seconds=1), topic_data=()),
                                   expects_response=False)
    assert frame and client.in_flight == 0
    client.receive_data(struct.pack(">i", 4) + b"\0\0\0\1")
    with pytest.raises(RemoteProtocolError, match="no request in flight"):
        client.next_response()


def test_client_refuses_a_body_that_does_not_match_the_request():
    client, _ = _client_server()
    with pytest.raises(LocalProtocolError, match="is not FetchRequest v4"):
        client.send_request(1, 4, _heartbeat())
    assert client.in_flight == 0 and client.error is None
