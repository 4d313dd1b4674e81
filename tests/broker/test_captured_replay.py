"""Request frames captured from real clients (tests/data/client_frames, see tests/protocol/capture_frames.py),
replayed byte for byte to a broker subprocess: each gets a response that decodes at its version, the connection
stays usable, and the broker logs no internal error. Then the symptom of the librdkafka stray bytes itself:
confluent-kafka's AdminClient.list_topics() against the broker."""

from __future__ import annotations

import base64
import json
import struct
import time
from pathlib import Path

import pytest

from broker_support import BrokerProcess, free_port, read_response
from kcli.protocol import ApiKey, decode_request, decode_response, encode_request, minimal_request

DATA = Path(__file__).resolve().parents[1] / "data" / "client_frames"
BAD_LOG_LINES = ("internal error", "Traceback")


def _rows():
    for path in sorted(DATA.glob("*.json")):
        for i, row in enumerate(json.loads(path.read_text())["frames"]):
            frame = base64.b64decode(row["frame"])
            if row["api_key"] == ApiKey.PRODUCE and not decode_request(frame).expects_response:
                continue  # acks=0: nothing comes back
            yield pytest.param(row["api_key"], row["version"], frame, id=f"{path.stem}-{row['api']}-v{row['version']}-{i}")


@pytest.fixture(scope="module")
def replay_broker(tmp_path_factory):
    broker = BrokerProcess(free_port(), tmp_path_factory.mktemp("replay") / "kafka-logs",
                           ["group.initial.rebalance.delay.ms=0"])
    broker.start()
    yield broker
    if broker.proc is not None:
        assert broker.stop() == 0, broker.log()


@pytest.mark.parametrize("api_key,version,frame", list(_rows()))
def test_captured_frame_is_answered(replay_broker, api_key, version, frame):
    import socket

    start = len(replay_broker.log())
    failure = None
    with socket.create_connection(("127.0.0.1", replay_broker.port), timeout=20) as sock:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        data = read_response(sock)
        if data is None:
            failure = "the broker closed the connection without a response"
        else:
            decode_version = version if api_key != ApiKey.API_VERSIONS or version <= 3 else 0  # KIP-511 fallback
            correlation_id, _ = decode_response(api_key, decode_version, data)
            assert correlation_id == struct.unpack_from(">i", frame, 4)[0]
            # The connection is still usable: an ApiVersions request on it is answered.
            sock.sendall(encode_request(ApiKey.API_VERSIONS, 3, 99, "replay", minimal_request(ApiKey.API_VERSIONS, 3)))
            after = read_response(sock)
            if after is None:
                failure = "the connection was closed after the response"
    time.sleep(0.05)
    log = replay_broker.log()[start:]
    bad = [line for line in log.splitlines() if any(b in line for b in BAD_LOG_LINES)]
    assert failure is None and not bad, f"{ApiKey(api_key).name} v{version}: {failure or 'internal error'}; log:\n{log}"


def test_confluent_kafka_admin_list_topics(replay_broker):
    """confluent-kafka 2.16 sends its all-topics Metadata v12 with 3 stray bytes after the body."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": replay_broker.bootstrap})
    for f in admin.create_topics([NewTopic("listed", num_partitions=1, replication_factor=1)]).values():
        f.result(30)
    metadata = admin.list_topics(timeout=15)
    assert "listed" in metadata.topics
    assert "stray" not in replay_broker.log() and "unexpected bytes" not in replay_broker.log()
