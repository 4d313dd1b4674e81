"""Request frames captured from real clients decode with ServerConnection, exactly as Kafka would read them.

The frames (tests/data/client_frames/<client>.json) were recorded by tests/protocol/capture_frames.py, a
loopback proxy in front of a kctl broker, from librdkafka 2.16 (confluent-kafka), kcat (librdkafka 2.0.2),
kafka-python 3.0 and aiokafka: every (api, version) these clients sent in their producer, consumer-group and
admin workloads. Kafka's Java client is not on this machine (no Maven access): none of its frames are here.
"""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import pytest

from kcli.protocol import (
    NEED_DATA,
    SUPPORTED_APIS,
    ApiKey,
    RemoteProtocolError,
    ServerConnection,
    UnsupportedVersionError,
    decode_request,
    requested_topics,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "client_frames"
CLIENTS = sorted(p.stem for p in DATA.glob("*.json"))
LEDGER = Path(__file__).resolve().parents[2] / "kcli" / "protocol" / "version_ledger.json"


def _frames(client: str) -> list[dict]:
    rows = json.loads((DATA / f"{client}.json").read_text())["frames"]
    return [{**row, "bytes": base64.b64decode(row["frame"])} for row in rows]


ALL = [(client, row) for client in CLIENTS for row in _frames(client)]


def _sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def test_every_client_was_captured():
    assert CLIENTS == ["aiokafka", "kafka-python", "kcat", "librdkafka"]


@pytest.mark.parametrize("client,row", ALL, ids=[f"{c}-{r['api']}-v{r['version']}-{i}" for i, (c, r) in enumerate(ALL)])
def test_captured_frame_decodes(client, row):
    conn = ServerConnection()
    conn.receive_data(_sized(row["bytes"]))
    if row["version"] not in SUPPORTED_APIS[ApiKey(row["api_key"])]:
        # ApiVersions above our maximum (kafka-python asks v4 first): the KIP-511 answer, connection usable.
        assert row["api_key"] == ApiKey.API_VERSIONS
        with pytest.raises(UnsupportedVersionError) as caught:
            conn.next_request()
        assert caught.value.response is not None and conn.error is None
        return
    request = conn.next_request()
    assert request is not NEED_DATA
    assert (int(request.api_key), request.api_version) == (row["api_key"], row["version"])
    assert request.trailing_bytes == row["trailing_bytes"]
    assert conn.buffered_bytes == 0


@pytest.mark.parametrize("client", CLIENTS)
def test_a_clients_frames_pipelined_on_one_connection(client):
    rows = _frames(client)
    conn = ServerConnection()
    conn.receive_data(b"".join(_sized(row["bytes"]) for row in rows))
    decoded = []
    for _ in rows:
        try:
            decoded.append(conn.next_request().api_key)
        except UnsupportedVersionError as e:
            assert e.response is not None
            decoded.append(ApiKey(e.api_key))
    assert decoded == [ApiKey(row["api_key"]) for row in rows]
    assert conn.next_request() is NEED_DATA and conn.error is None


def _librdkafka_all_topics() -> bytes:
    [row] = [row for row in _frames("librdkafka") if row["api"] == "Metadata" and row["trailing_bytes"]]
    return row["bytes"]


def test_librdkafka_all_topics_metadata_v12_has_3_stray_bytes_and_is_accepted():
    frame = _librdkafka_all_topics()
    request = decode_request(frame)
    assert (request.api_key, request.api_version, request.trailing_bytes) == (ApiKey.METADATA, 12, 3)
    assert request.body.topics is None and requested_topics(request) is None  # all topics


def test_a_short_body_is_still_an_error_after_the_lenient_end():
    frame = _librdkafka_all_topics()
    with pytest.raises(RemoteProtocolError):
        decode_request(frame[:-4])  # the 3 stray bytes and the body's tagged-field count


def test_only_librdkafka_2_16_sends_stray_bytes():
    stray = {(client, row["api"], row["version"]) for client, row in ALL if row["trailing_bytes"]}
    assert stray == {("librdkafka", "Metadata", 12)}


def test_captures_cover_the_version_ledger():
    # Every (api, version) a real client used in the ledger workload has a captured frame here.
    captured = {(ApiKey(row["api_key"]).name, row["version"]) for _, row in ALL
                if row["version"] in SUPPORTED_APIS[ApiKey(row["api_key"])]}
    ledger = {(row["api"], row["version"]) for row in json.loads(LEDGER.read_text())}
    # The admin APIs added with the broker-core work (ACLs, configs, DeleteRecords, OffsetDelete, SCRAM,
    # DescribeCluster), the reassignment APIs and ElectLeaders (issue 13) and the transaction APIs (issue 14) are in
    # the ledger's workload but not yet in the capture script's: recapture them next.
    not_yet_captured = {"DELETE_RECORDS", "DESCRIBE_ACLS", "CREATE_ACLS", "DELETE_ACLS", "ALTER_CONFIGS",
                        "INCREMENTAL_ALTER_CONFIGS", "OFFSET_DELETE", "DESCRIBE_USER_SCRAM_CREDENTIALS",
                        "ALTER_USER_SCRAM_CREDENTIALS", "DESCRIBE_CLUSTER", "ALTER_PARTITION_REASSIGNMENTS",
                        "LIST_PARTITION_REASSIGNMENTS", "ELECT_LEADERS",
                        "ADD_PARTITIONS_TO_TXN", "ADD_OFFSETS_TO_TXN", "END_TXN", "WRITE_TXN_MARKERS",
                        "TXN_OFFSET_COMMIT", "DESCRIBE_PRODUCERS", "DESCRIBE_TRANSACTIONS", "LIST_TRANSACTIONS",
                        "DESCRIBE_LOG_DIRS", "ALTER_REPLICA_LOG_DIRS",  # issue 27
                        "SASL_HANDSHAKE", "SASL_AUTHENTICATE",  # issue 25
                        "DESCRIBE_CLIENT_QUOTAS", "ALTER_CLIENT_QUOTAS"}  # issue 26
    assert {(api, v) for api, v in ledger - captured if api not in not_yet_captured} == set()
