"""Hostile bytes: only ProtocolError subclasses may escape the decoder and the connection.

The first version of these properties found that kio's native reader aborts the whole
process on a forged array count (see kcli/protocol/guard.py).
"""

from __future__ import annotations

import io
import os
import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from kcli.protocol import (
    NEED_DATA,
    SUPPORTED_APIS,
    LocalProtocolError,
    ProtocolError,
    ServerConnection,
    UnsupportedVersionError,
    decode_request,
)
from kcli.protocol.legacy import request_schema

SERVED = sorted((int(k), v) for k, a in SUPPORTED_APIS.items() for v in range(a.min_version, a.max_version + 1))

# Bytes that make lengths and counts interesting: null markers, sign bits, varint continuations.
edgy_bytes = st.lists(
    st.sampled_from([0x00, 0x01, 0x02, 0x7F, 0x80, 0xFE, 0xFF]) | st.integers(0, 255), max_size=300,
).map(bytes)

# KCLI_FUZZ_EXAMPLES=100000 for a long hunt; the default keeps the suite quick.
FUZZ = settings(max_examples=int(os.environ.get("KCLI_FUZZ_EXAMPLES", "500")), deadline=None,
                suppress_health_check=list(HealthCheck))


def _decodes_or_refuses(frame: bytes) -> None:
    try:
        decode_request(frame)
    except ProtocolError:
        pass


@FUZZ
@given(st.binary(max_size=400))
def test_decode_request_random_bytes(frame):
    _decodes_or_refuses(frame)


@FUZZ
@given(st.sampled_from(SERVED), st.booleans(), edgy_bytes)
def test_decode_request_served_header_random_body(api, with_client_id, body):
    api_key, version = api
    header = struct.pack(">hhi", api_key, version, 1)
    if with_client_id:
        header += b"\x00\x04fuzz"
        if version >= SUPPORTED_APIS[api_key].flexible_since:
            header += b"\x00"  # empty header tag buffer
    _decodes_or_refuses(header + body)


@FUZZ
@given(api=st.sampled_from(SERVED), data=st.data())
def test_decode_request_mutated_valid_frames(api, data, random_kio):
    api_key, version = api
    body_type = request_schema(api_key, version)
    out = io.BytesIO()
    out.write(struct.pack(">hhi", api_key, version, 1) + b"\x00\x04fuzz")
    if version >= SUPPORTED_APIS[api_key].flexible_since:
        out.write(b"\x00")
    entity_writer(body_type)(out, data.draw(random_kio(body_type)))
    frame = bytearray(out.getvalue())
    assert decode_request(bytes(frame)).body is not None
    for _ in range(data.draw(st.integers(1, 4))):
        where = data.draw(st.integers(8, len(frame)))
        how = data.draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
        value = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]) | st.integers(0, 255))
        if how == "set" and where < len(frame):
            frame[where] = value
        elif how == "insert":
            frame[where:where] = bytes([value]) * data.draw(st.integers(1, 5))
        elif how == "delete":
            del frame[where:where + data.draw(st.integers(1, 5))]
        else:
            del frame[where:]
    _decodes_or_refuses(bytes(frame))


@FUZZ
@given(st.lists(st.binary(max_size=64) | edgy_bytes, max_size=12), st.sampled_from([64, 1024, 104857600]))
def test_connection_random_chunks(chunks, max_frame_bytes):
    connection = ServerConnection(max_frame_bytes)
    for chunk in chunks:
        connection.receive_data(chunk)
        try:
            while connection.next_request() is not NEED_DATA:
                pass
        except UnsupportedVersionError as e:
            if e.response is not None:
                continue
            assert connection.error is e
            break
        except ProtocolError as e:
            assert connection.error is e
            break
    if connection.error is not None:
        try:
            connection.next_request()
        except LocalProtocolError:
            pass
        else:
            raise AssertionError("an errored connection returned a request")


@FUZZ
@given(st.sampled_from(SERVED), edgy_bytes, st.integers(1, 50))
def test_connection_framed_garbage_split_anywhere(api, body, step):
    api_key, version = api
    frame = struct.pack(">hhi", api_key, version, 1) + body
    data = struct.pack(">i", len(frame)) + frame
    connection = ServerConnection()
    try:
        for i in range(0, len(data), step):
            connection.receive_data(data[i:i + step])
            connection.next_request()
    except ProtocolError:
        pass
