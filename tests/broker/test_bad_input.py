"""Bad input over a real socket: the offending connection is closed (or the request refused) with a log
line, nothing bad is appended, and everyone else is served on."""

from __future__ import annotations

import datetime
import io
import socket
import struct

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v7 import request as produce_req
from kio.schema.produce.v7 import response as produce_resp
from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from broker_support import kcat
from kcli.records import Record, build_record_batch
from kcli.records.batch import set_partition_leader_epoch


def _produce_frame(topic: str, records: bytes, correlation_id: int = 7) -> bytes:
    body = produce_req.ProduceRequest(
        transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
        topic_data=(produce_req.TopicProduceData(name=topic, partition_data=(
            produce_req.PartitionProduceData(index=0, records=records),)),))
    buf = io.BytesIO()
    entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=0, request_api_version=7,
                                                    correlation_id=correlation_id, client_id="bad-input-test"))
    entity_writer(produce_req.ProduceRequest)(buf, body)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def _roundtrip(port: int, frame: bytes) -> bytes | None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(frame)
        head = sock.recv(4)
        if len(head) < 4:
            return None  # the broker closed the connection
        (size,) = struct.unpack(">i", head)
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                break
            data += chunk
        return data


def _produce_error(port: int, topic: str, records: bytes) -> ErrorCode:
    data = _roundtrip(port, _produce_frame(topic, records))
    assert data is not None
    response, _ = entity_reader(produce_resp.ProduceResponse)(data, 4)  # after the correlation id
    return response.responses[0].partition_responses[0].error_code


def _create(broker, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)


def _healthy(broker) -> bool:
    return kcat("-b", broker.bootstrap, "-L").returncode == 0


def test_corrupt_batch_is_refused_and_not_appended(broker):
    good = build_record_batch([Record(0, 1_700_000_000_000, b"k", b"v")])
    _create(broker, "bad-crc")
    assert _produce_error(broker.port, "bad-crc", good) == ErrorCode.none
    corrupt = bytearray(good)
    corrupt[-1] ^= 0xFF
    assert _produce_error(broker.port, "bad-crc", bytes(corrupt)) == ErrorCode.corrupt_message
    truncated = good[:-3]
    assert _produce_error(broker.port, "bad-crc", truncated) == ErrorCode.corrupt_message
    log = next((broker.log_dir / "bad-crc-0").glob("*.log")).read_bytes()
    assert log == set_partition_leader_epoch(good, 0)  # only the good batch is on disk, epoch stamped
    assert "rejected produce" in broker.log()


def test_oversized_batch_is_refused(broker):
    big = build_record_batch([Record(0, 1, b"k", b"x" * (1024 * 1024 + 100))])
    _create(broker, "too-big")
    assert _produce_error(broker.port, "too-big", big) == ErrorCode.message_too_large


@pytest.mark.parametrize("frame", [
    struct.pack(">i", -5),                                      # negative size
    struct.pack(">i", 2**31 - 1),                               # absurd size
    struct.pack(">i", 8) + struct.pack(">hhi", 9999, 0, 1),     # unknown API key
    struct.pack(">i", 8) + struct.pack(">hhi", 0, 99, 1),       # Produce v99
    struct.pack(">i", 12) + b"\x00\x03\x00\x0c" + b"\xff" * 8,  # Metadata with a garbage header/body
], ids=["negative", "absurd", "unknown-api", "unknown-version", "garbage"])
def test_malformed_frames_close_only_that_connection(broker, frame):
    assert _roundtrip(broker.port, frame) is None
    assert _healthy(broker)


def test_topic_names_cannot_escape_the_log_dir(broker):
    good = build_record_batch([Record(0, 1, b"k", b"v")])
    for name in ("../evil", "a/b", ".", "..", "x" * 250):
        error = _produce_error(broker.port, name, good)
        assert error in (ErrorCode.invalid_topic_exception, ErrorCode.unknown_topic_or_partition), (name, error)
    assert not any(p.name.startswith("evil") for p in broker.log_dir.parent.iterdir())
    assert _healthy(broker)
