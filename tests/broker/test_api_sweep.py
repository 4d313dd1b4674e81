"""Every (api, version) the broker advertises, sent once over a real socket to a `kctl broker run` subprocess.

Each request is ``kcli.protocol.minimal_request`` (one topic that exists, one partition, a group of its own),
framed by ``encode_request``. The test wants a response that decodes at that version with the request's
correlation id and no UNKNOWN_SERVER_ERROR in it (other error codes are the expected answers to a probe:
MEMBER_ID_REQUIRED, UNKNOWN_MEMBER_ID, ...), and a broker log with no internal error or Traceback while it was served. The
versions kio has no schema of (Produce v0-v2, Fetch v0-v3, ListOffsets v0, OffsetCommit v0-v1, OffsetFetch v0) are
framed from kcli.protocol.legacy's declarations; Produce v0-v2 carry message format v0/v1 records.
"""

from __future__ import annotations

import dataclasses
import socket
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from broker_support import BrokerProcess, free_port, read_response
from kcli.protocol import ApiKey, ProtocolError, advertised_versions, decode_response, encode_request, minimal_request
from kcli.records import Record, build_record_batch
from kcli.records.consumer_offsets import Subscription, encode_subscription
from kcli.records.legacy import build_legacy_messages

TOPIC = "sweep"
BAD_LOG_LINES = ("internal error", "Traceback")


class Wire:
    """One client connection: frames out, one response frame back (None when the broker closed)."""

    def __init__(self, port: int, timeout: float = 20.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)

    def roundtrip(self, frame: bytes) -> bytes | None:
        self.sock.sendall(frame)
        return read_response(self.sock)

    def close(self) -> None:
        self.sock.close()


def _call(port: int, api_key: ApiKey, version: int, body, correlation_id: int = 41):
    wire = Wire(port)
    try:
        data = wire.roundtrip(encode_request(api_key, version, correlation_id, "kctl-sweep", body))
    finally:
        wire.close()
    assert data is not None, f"{api_key.name} v{version}: the broker closed the connection without a response"
    got_id, response = decode_response(api_key, version, data)
    assert got_id == correlation_id
    return response


@pytest.fixture(scope="module")
def sweep_broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("sweep")
    broker = BrokerProcess(free_port(), base / "kafka-logs", ["group.initial.rebalance.delay.ms=0"])
    broker.start()
    created = _call(broker.port, ApiKey.CREATE_TOPICS, 7, minimal_request(ApiKey.CREATE_TOPICS, 7, topic=TOPIC))
    assert created.topics[0].error_code == 0, created
    batch = build_record_batch([Record(0, 1_700_000_000_000, b"k", b"v")])
    produced = _call(broker.port, ApiKey.PRODUCE, 9, minimal_request(ApiKey.PRODUCE, 9, topic=TOPIC, records=batch))
    assert produced.responses[0].partition_responses[0].error_code == 0, produced
    metadata = _call(broker.port, ApiKey.METADATA, 12, minimal_request(ApiKey.METADATA, 12, topic=TOPIC))
    broker.topic_id = metadata.topics[0].topic_id
    yield broker
    if broker.proc is not None:
        assert broker.stop() == 0, broker.log()


def _request(api_key: ApiKey, version: int, topic_id: uuid.UUID):
    """The minimal request of the sweep, on names that make sense for each API."""
    group = f"sweep-{api_key.name.lower()}-v{version}"  # a group of its own: no rebalance waits on another
    topic = TOPIC
    extra = {}
    if api_key is ApiKey.CREATE_TOPICS:
        topic = f"sweep-created-v{version}"
    elif api_key is ApiKey.DELETE_TOPICS:
        topic = f"sweep-missing-v{version}"  # never the topic the other requests use
        topic_id = None
    elif api_key is ApiKey.PRODUCE and version < 3:  # message format v0 (Produce v0-v1) or v1 (v2)
        extra["records"] = build_legacy_messages([Record(0, 1_700_000_000_000, b"k", b"legacy")],
                                                 magic=1 if version == 2 else 0)
    elif api_key is ApiKey.PRODUCE:
        extra["records"] = build_record_batch([Record(0, 1_700_000_000_000, b"k", b"v%d" % version)])
    elif api_key is ApiKey.JOIN_GROUP:
        extra["protocol_metadata"] = encode_subscription(Subscription(topics=(TOPIC,), version=0))
    return minimal_request(api_key, version, topic=topic, group_id=group, topic_id=topic_id, **extra)


def _error_codes(obj, path: str = "") -> list[tuple[str, int]]:
    """Every error_code in a kio response, with its field path."""
    if dataclasses.is_dataclass(obj):
        found = []
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            found += [(path + f.name, value)] if f.name == "error_code" else _error_codes(value, f"{path}{f.name}.")
        return found
    if isinstance(obj, tuple):
        return [hit for i, item in enumerate(obj) for hit in _error_codes(item, f"{path[:-1]}[{i}].")]
    return []


def _log_since(broker: BrokerProcess, start: int) -> str:
    time.sleep(0.05)  # the broker writes its log line before it closes the socket; let the file catch up
    return broker.log()[start:]


@pytest.mark.parametrize("api_key,version", advertised_versions(),
                         ids=lambda x: x.name if isinstance(x, ApiKey) else f"v{x}")
def test_every_advertised_version_is_served(sweep_broker, api_key, version):
    start = len(sweep_broker.log())
    failure = None
    try:
        response = _call(sweep_broker.port, api_key, version, _request(api_key, version, sweep_broker.topic_id))
    except (AssertionError, ProtocolError, OSError) as e:
        failure = str(e).splitlines()[0]
    else:
        unknown = [path for path, code in _error_codes(response) if code == ErrorCode.unknown_server_error]
        if unknown:
            failure = f"UNKNOWN_SERVER_ERROR at {', '.join(unknown)}"
    log = _log_since(sweep_broker, start)
    bad = [line for line in log.splitlines() if any(b in line for b in BAD_LOG_LINES)]
    assert failure is None and not bad, f"{api_key.name} v{version}: {failure or 'internal error'}; broker log:\n{log}"


def test_api_versions_advertises_exactly_the_table(sweep_broker):
    for version in range(0, 4):
        response = _call(sweep_broker.port, ApiKey.API_VERSIONS, version, minimal_request(ApiKey.API_VERSIONS, version))
        assert response.error_code == 0
        advertised = sorted((ApiKey(int(a.api_key)), v) for a in response.api_keys
                            for v in range(a.min_version, a.max_version + 1))
        assert advertised == advertised_versions()


def test_no_internal_error_in_the_whole_log(sweep_broker):
    log = sweep_broker.log()
    assert not any(b in log for b in BAD_LOG_LINES), log


# AclOperation codes (clients/.../acl/AclOperation.java) and what AclEntry.supportedOperations gives each resource
# type: with no authorizer, Kafka's AuthHelper.authorizedOperations answers all of them (KIP-430).
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE = (
    3, 4, 5, 6, 7, 8, 9, 10, 11, 12)
KAFKA_TOPIC_OPS = {READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS}
KAFKA_CLUSTER_OPS = {CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE}
KAFKA_GROUP_OPS = {READ, DESCRIBE, DELETE}
NOT_REQUESTED = -2147483648


def _operations(bits: int) -> set[int]:
    return {op for op in range(32) if bits & (1 << op)}


def test_authorized_operations_are_kafkas_bit_sets(sweep_broker):
    port = sweep_broker.port
    for asked in (True, False):
        request = dataclasses.replace(minimal_request(ApiKey.METADATA, 10, topic=TOPIC),
                                      include_cluster_authorized_operations=asked,
                                      include_topic_authorized_operations=asked)
        response = _call(port, ApiKey.METADATA, 10, request)
        cluster_ops, topic_ops = response.cluster_authorized_operations, response.topics[0].topic_authorized_operations
        if asked:
            assert (_operations(cluster_ops), _operations(topic_ops)) == (KAFKA_CLUSTER_OPS, KAFKA_TOPIC_OPS)
        else:
            assert (cluster_ops, topic_ops) == (NOT_REQUESTED, NOT_REQUESTED)
        request = dataclasses.replace(minimal_request(ApiKey.DESCRIBE_CLUSTER, 0),
                                      include_cluster_authorized_operations=asked)
        ops = _call(port, ApiKey.DESCRIBE_CLUSTER, 0, request).cluster_authorized_operations
        assert (_operations(ops) == KAFKA_CLUSTER_OPS) if asked else ops == NOT_REQUESTED
        request = dataclasses.replace(minimal_request(ApiKey.DESCRIBE_GROUPS, 5, group_id="sweep-acl-ops"),
                                      include_authorized_operations=asked)
        ops = _call(port, ApiKey.DESCRIBE_GROUPS, 5, request).groups[0].authorized_operations
        assert (_operations(ops) == KAFKA_GROUP_OPS) if asked else ops == NOT_REQUESTED
