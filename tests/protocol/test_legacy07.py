"""The Kafka 0.7 wire protocol's frames, byte for byte from the seed's layout, through the sans-io Connection07."""

from __future__ import annotations

import struct

import pytest

from kcli.protocol.legacy07 import (
    NEED_DATA,
    BadRequest07,
    Connection07,
    ErrorCode07,
    FetchRequest07,
    FetchResponse07,
    MultiFetchRequest07,
    MultiFetchResponse07,
    MultiProduceRequest07,
    OffsetsRequest07,
    OffsetsResponse07,
    ProduceRequest07,
    Protocol07Error,
    decode_response,
    encode_request,
    encode_response,
)


def _topic(name: bytes) -> bytes:
    return struct.pack(">h", len(name)) + name


def test_request_frames_follow_the_seed():
    body = _topic(b"t") + struct.pack(">iqi", 3, 1234, 1 << 20)
    assert encode_request(FetchRequest07("t", 3, 1234, 1 << 20)) == struct.pack(">ih", 2 + len(body), 1) + body
    body = _topic(b"t") + struct.pack(">iqi", 0, -2, 5)
    assert encode_request(OffsetsRequest07("t", 0, -2, 5)) == struct.pack(">ih", 2 + len(body), 4) + body
    body = _topic(b"t") + struct.pack(">ii", 1, 3) + b"abc"
    assert encode_request(ProduceRequest07("t", 1, b"abc")) == struct.pack(">ih", 2 + len(body), 0) + body
    multi = encode_request(MultiProduceRequest07((ProduceRequest07("t", 1, b"abc"),) * 2))
    assert multi == struct.pack(">ihh", 2 + 2 + 2 * len(body), 3, 2) + body + body
    fetch = _topic(b"t") + struct.pack(">iqi", 0, 0, 9)
    assert encode_request(MultiFetchRequest07((FetchRequest07("t", 0, 0, 9),))) == struct.pack(
        ">ihh", 2 + 2 + len(fetch), 2, 1) + fetch


def test_response_frames_follow_the_seed():
    assert encode_response(FetchResponse07(0, b"set")) == struct.pack(">ih", 5, 0) + b"set"
    assert encode_response(OffsetsResponse07(0, (7, 0))) == struct.pack(">ihiqq", 2 + 4 + 16, 0, 2, 7, 0)
    multi = encode_response(MultiFetchResponse07((FetchResponse07(0, b"ab"), FetchResponse07(1))))
    assert multi == struct.pack(">ih", 2 + 8 + 6, 0) + struct.pack(">ih", 4, 0) + b"ab" + struct.pack(">ih", 2, 1)


@pytest.mark.parametrize("request_", [
    ProduceRequest07("topic", -1, b"\x00\x00\x00\x05\x00abcd"),
    FetchRequest07("topic", 0, 2**40, 300 * 1024),
    MultiFetchRequest07((FetchRequest07("a", 0, 0, 1), FetchRequest07("b", 1, 2, 3))),
    MultiProduceRequest07((ProduceRequest07("a", 0, b""), ProduceRequest07("b", 1, b"x"))),
    OffsetsRequest07("topic", 2, -1, 10),
])
def test_requests_round_trip_through_a_connection_fed_one_byte_at_a_time(request_):
    connection = Connection07()
    frame = encode_request(request_)
    for byte in frame[:-1]:
        connection.receive_data(bytes([byte]))
        assert connection.next_request() is NEED_DATA
    connection.receive_data(frame[-1:])
    assert connection.next_request() == request_
    assert connection.next_request() is NEED_DATA


def test_responses_decode_as_a_client_reads_them():
    fetch = FetchRequest07("t", 0, 0, 10)
    assert decode_response(fetch, encode_response(FetchResponse07(1))) == FetchResponse07(ErrorCode07.OFFSET_OUT_OF_RANGE)
    multi = MultiFetchResponse07((FetchResponse07(0, b"x"), FetchResponse07(3)))
    assert decode_response(MultiFetchRequest07((fetch, fetch)), encode_response(multi)) == multi
    offsets = OffsetsResponse07(0, (100, 0))
    assert decode_response(OffsetsRequest07("t", 0, -1, 2), encode_response(offsets)) == offsets


@pytest.mark.parametrize("request_type, body, reason", [
    (9, b"", "no request type 9"),
    (1, _topic(b"t") + b"\x00", "truncated"),
    (0, _topic(b"t") + struct.pack(">ii", 0, 10) + b"abc", "does not fit"),
    (4, _topic(b"t") + struct.pack(">iqi", 0, -1, 1) + b"extra", "left over"),
    (2, struct.pack(">h", -1), "negative count"),
    (1, struct.pack(">h", 5) + b"\xff\xfe\xfd\xfc\xfb" + struct.pack(">iqi", 0, 0, 1), "not UTF-8"),
])
def test_bad_frames_are_bad_requests_not_exceptions(request_type, body, reason):
    connection = Connection07()
    connection.receive_data(struct.pack(">ih", 2 + len(body), request_type) + body)
    bad = connection.next_request()
    assert isinstance(bad, BadRequest07) and reason in bad.reason


@pytest.mark.parametrize("size", [1, -5, 2**31 - 1])
def test_an_unframable_size_raises(size):
    connection = Connection07(max_request_bytes=1000)
    connection.receive_data(struct.pack(">ih", size, 0))
    with pytest.raises(Protocol07Error):
        connection.next_request()
