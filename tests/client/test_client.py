"""kcli.client against a real `kctl broker run`: every request it speaks, and errors that name the request,
the field and the error code."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from broker_support import BrokerProcess, free_port
from kcli.client import BrokerUnreachableError, KafkaClient, KafkaOffsetStore
from kcli.client.client import KafkaRequestError, _build, parse_bootstrap
from kcli.protocol.api import ApiKey
from kcli.errors import KcliError


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("client") / "kafka-logs",
                            ["auto.create.topics.enable=false"])
    process.start()
    try:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        for future in admin.create_topics([NewTopic("t", 2, 1)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": process.bootstrap})
        for i in range(6):
            producer.produce("t", value=b"v", partition=i % 2)
        assert producer.flush(30) == 0
        yield process
    finally:
        process.stop()


def test_metadata_and_log_offsets(broker):
    with KafkaClient(broker.bootstrap) as client:
        meta = client.metadata(["t", "missing"])
        assert meta.cluster_id and list(meta.brokers) == [0]
        assert meta.topics["t"].partitions == {0: 0, 1: 0}
        assert meta.topics["missing"].error == ErrorCode.unknown_topic_or_partition
        assert client.topic_partitions(["t", "missing"]) == {"t": 2, "missing": None}
        assert client.log_offsets([("t", 0), ("t", 1)]) == {("t", 0): (0, 3), ("t", 1): (0, 3)}
        with pytest.raises(KcliError, match="t-5 is not in the cluster's metadata"):
            client.log_offsets([("t", 5)])


def test_one_connection_shared_by_two_threads_gives_each_its_own_answers(broker):
    """Answers are matched to requests in order: two threads on one connection (a group member's loop and a
    commit from another thread) must not read each other's (an OffsetCommit once got a JoinGroup answer)."""
    import threading

    with KafkaClient(broker.bootstrap) as client:
        wrong: list[str] = []

        def hammer(call, expected: str) -> None:
            for _ in range(150):
                got = call()
                if type(got).__name__ != expected:
                    wrong.append(type(got).__name__)

        connection = client._any()
        _, metadata_m = connection.module(ApiKey.METADATA)
        _, coordinator_m = connection.module(ApiKey.FIND_COORDINATOR)
        metadata_body = _build(metadata_m, "MetadataRequest", topics=(), allow_auto_topic_creation=False,
                               include_cluster_authorized_operations=False, include_topic_authorized_operations=False)
        coordinator_body = _build(coordinator_m, "FindCoordinatorRequest", key="g", key_type=0, coordinator_keys=("g",))
        threads = [threading.Thread(target=hammer, args=(lambda: connection.call(ApiKey.METADATA, metadata_body),
                                                         "MetadataResponse")),
                   threading.Thread(target=hammer, args=(lambda: connection.call(ApiKey.FIND_COORDINATOR,
                                                                                 coordinator_body),
                                                         "FindCoordinatorResponse"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not wrong


def test_commit_fetch_describe_list_delete(broker):
    with KafkaClient(broker.bootstrap, client_id="kcli-test") as client:
        assert client.find_coordinator("cg") == 0
        assert client.offset_fetch("cg") == {}
        result = client.offset_commit("cg", {("t", 0): 2, ("t", 1): 3, ("nope", 0): 1})
        assert result == {("t", 0): ErrorCode.none, ("t", 1): ErrorCode.none,
                          ("nope", 0): ErrorCode.unknown_topic_or_partition}
        assert client.offset_fetch("cg") == {("t", 0): 2, ("t", 1): 3}
        assert client.offset_fetch("cg", [("t", 1)]) == {("t", 1): 3}
        described = client.describe_groups(["cg", "never"])
        assert described["cg"].state == "Empty" and not described["cg"].live
        assert described["never"].state == "Dead"
        assert "cg" in client.list_groups()
        store = KafkaOffsetStore(client)
        assert store.read(["cg"]) == {"cg": {("t", 0): 2, ("t", 1): 3}}
        assert store.write("cg", {("nope", 0): 1}) == {
            ("nope", 0): "OffsetCommitResponse: UNKNOWN_TOPIC_OR_PARTITION (3)"}
        assert store.live_members(["cg"]) == {"cg": None}
        assert client.delete_groups(["cg"]) == {"cg": ErrorCode.none}
        assert client.offset_fetch("cg") == {}
        assert client.delete_groups(["cg"]) == {"cg": ErrorCode.group_id_not_found}


def test_errors_name_the_request_and_code():
    error = KafkaRequestError("group 'g'", request="OffsetFetchResponse v7", field="topics[t].partitions[0].error_code",
                              error=ErrorCode.not_coordinator)
    assert error.describe() == ("OffsetFetchResponse v7: topics[t].partitions[0].error_code = NOT_COORDINATOR (16): "
                                "group 'g'")
    with pytest.raises(BrokerUnreachableError, match="cannot connect to the Kafka broker at 127.0.0.1"):
        KafkaClient(f"127.0.0.1:{free_port()}").connect()
    with pytest.raises(KcliError, match="is not host:port"):
        parse_bootstrap("localhost")


def test_response_codec_round_trip_and_malformed_answers():
    from kio.schema.find_coordinator.v3.response import FindCoordinatorResponse

    from kcli.protocol import decode_request, decode_response, encode_request
    from kcli.protocol.codec import encode_response
    from kcli.protocol.errors import LocalProtocolError, RemoteProtocolError
    from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest

    frame = encode_request(10, 3, 42, "kctl", FindCoordinatorRequest(key="g", key_type=0))
    request = decode_request(frame[4:])
    assert (request.correlation_id, request.client_id, request.body.key) == (42, "kctl", "g")
    import datetime

    answer = FindCoordinatorResponse(throttle_time=datetime.timedelta(0), error_code=ErrorCode.none,
                                     error_message=None, node_id=1, host="h", port=9092)
    correlation, body = decode_response(10, 3, encode_response(request, answer)[4:])
    assert correlation == 42 and body == answer
    with pytest.raises(RemoteProtocolError, match="FindCoordinatorResponse v3"):
        decode_response(10, 3, encode_response(request, answer)[4:-3])
    with pytest.raises(LocalProtocolError, match="is not MetadataRequest v8"):
        encode_request(3, 8, 1, None, FindCoordinatorRequest(key="g", key_type=0))


@pytest.mark.broker_process
def test_broker_going_away(tmp_path):
    process = BrokerProcess(free_port(), tmp_path / "logs", [])
    process.start()
    client = KafkaClient(process.bootstrap)
    try:
        client.metadata([])
        process.stop()
        with pytest.raises(BrokerUnreachableError, match="Metadata"):
            client.metadata([])
    finally:
        client.close()
        if process.proc is not None:
            process.stop()
