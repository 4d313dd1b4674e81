"""kafka-dump-log decoder texts (newest Kafka) and the matching --json dicts."""

from __future__ import annotations

import base64
import json

import pytest

from support import FIXTURES, fixture_records
from hypothesis import given
from hypothesis import strategies as st

from kcli.errors import CorruptRecordError
from kcli.records import cluster_metadata as cm
from kcli.records import consumer_offsets as co
from kcli.records import decoders
from kcli.records import transaction_log as tl
from kcli.records.schema import java_double_to_string, json_text

OFFSETS_DIRS = sorted(FIXTURES.glob("*/__consumer_offsets-*")) + sorted(FIXTURES.glob("*/data/__consumer_offsets-*"))
METADATA_LOG = FIXTURES / "rjmfernandes__flink-on-prem" / "data" / "__cluster_metadata-0" / "00000000000000000000.log"

needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="shared/kafka-fixtures not present")


def member(protocol_subscription: bytes, protocol_assignment: bytes) -> co.MemberMetadata:
    return co.MemberMetadata(
        member_id="m",
        client_id="c",
        client_host="/h",
        session_timeout=10,
        rebalance_timeout=20,
        subscription=protocol_subscription,
        assignment=protocol_assignment,
    )


# ---------------------------------------------------------------------------------------------
# --offsets-decoder


def test_offset_commit_text() -> None:
    key, value = co.encode_offset_commit("g", "t", 0, 42, commit_timestamp=1700000000000)
    assert decoders.offsets_decoder(key, value, 5) == (
        '{"type":"1","data":{"group":"g","topic":"t","partition":0}}',
        '{"version":"3","data":{"offset":42,"leaderEpoch":-1,"metadata":"","commitTimestamp":1700000000000}}',
    )
    key, value = co.encode_offset_commit("g", "t", 1, 7, metadata="x", commit_timestamp=1, expire_timestamp=2)
    assert decoders.offsets_decoder(key, value, 5)[1] == (
        '{"version":"1","data":{"offset":7,"metadata":"x","commitTimestamp":1,"expireTimestamp":2}}'
    )
    legacy_key = co.encode_key(co.OffsetCommitKey(version=0, group="g", topic="t", partition=2))
    assert decoders.offsets_decoder(legacy_key, None, 9) == (
        '{"type":"0","data":{"group":"g","topic":"t","partition":2}}',
        "<DELETE>",
    )


def test_group_metadata_text_expands_consumer_protocol() -> None:
    sub = co.encode_subscription(
        co.Subscription(
            topics=("foo",), owned_partitions=(co.TopicPartitions(topic="foo", partitions=(0,)),), generation_id=3
        )
    )
    assignment = co.encode_assignment(
        co.Assignment(assigned_partitions=(co.TopicPartitions(topic="foo", partitions=(0,)),))
    )
    key, value = co.encode_group_metadata(
        "grp",
        protocol_type="consumer",
        generation=3,
        protocol="range",
        leader="m",
        current_state_timestamp=1700000000000,
        members=[member(sub, assignment)],
    )
    key_text, payload = decoders.offsets_decoder(key, value, 0)
    assert key_text == '{"type":"2","data":{"group":"grp"}}'
    assert payload == (
        '{"version":"3","data":{"protocolType":"consumer","generation":3,"protocol":"range","leader":"m",'
        '"currentStateTimestamp":1700000000000,"members":[{"memberId":"m","groupInstanceId":null,"clientId":"c",'
        '"clientHost":"/h","rebalanceTimeout":20,"sessionTimeout":10,'
        '"subscription":{"topics":["foo"],"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
        '"generationId":3,"rackId":null},'
        '"assignment":{"assignedPartitions":[{"topic":"foo","partitions":[0]}],"userData":null}}]}}'
    )


def test_group_metadata_keeps_base64_for_other_protocols_and_garbage() -> None:
    key, value = co.encode_group_metadata(
        "grp",
        protocol_type="connect",
        generation=1,
        protocol="sessioned",
        leader=None,
        current_state_timestamp=-1,
        members=[member(b"\x00\x01\x02", b"")],
    )
    payload = decoders.offsets_decoder(key, value, 0)[1]
    assert payload is not None and '"subscription":"AAEC","assignment":""' in payload
    # Consumer protocol whose bytes do not parse: Kafka swallows the error and keeps the bytes.
    key, value = co.encode_group_metadata(
        "grp",
        protocol_type="consumer",
        generation=1,
        protocol=None,
        leader=None,
        current_state_timestamp=-1,
        members=[member(b"\x00", b"\x00\x00\x00\x00\x00\x09")],
    )
    payload = decoders.offsets_decoder(key, value, 0)[1]
    assert payload is not None and '"subscription":"AA==","assignment":"AAAAAAAJ"' in payload


def test_out_of_range_value_version_text() -> None:
    key = co.encode_key(co.OffsetCommitKey(group="g", topic="t", partition=0))
    value = bytes.fromhex("ffff 0000000000000005 0000 0000000000000009")
    assert decoders.offsets_decoder(key, value, 0)[1] == (
        '{"version":"-1","data":{"offset":5,"metadata":"","commitTimestamp":9}}'
    )


def test_offsets_error_texts() -> None:
    assert decoders.offsets_decoder(b"\x00\x10\x00\x01g", None, 12) == (
        "Unknown record type 16 at offset 12, skipping.",
        None,
    )
    key, value = co.encode_offset_commit("g", "t", 0, 1, commit_timestamp=0)
    key_text, payload = decoders.offsets_decoder(key, value[:10], 7)
    assert payload is None
    assert key_text is not None and key_text.startswith(
        "Error at offset 7, skipping. Could not read record with version 3 from value's buffer due to: "
    )
    assert decoders.offsets_decoder(b"\x00", None, 3) == (
        "Error at offset 3, skipping. Could not read version from key's buffer.",
        None,
    )
    with pytest.raises(CorruptRecordError) as exc:
        decoders.offsets_decoder(None, value, 44)
    assert (
        exc.value.reason
        == "Failed to decode message at offset 44 using the specified decoder (message had a missing key)"
    )


def test_kip848_records_render_as_json() -> None:
    key = co.SERDE.encode_key(3, {"groupId": "new-group"})
    value = co.SERDE.encode_value(3, 0, {"epoch": 5})
    assert decoders.offsets_decoder(key, value, 0) == (
        '{"type":"3","data":{"groupId":"new-group"}}',
        '{"version":"0","data":{"epoch":5}}',
    )


# ---------------------------------------------------------------------------------------------
# --transaction-log-decoder


def test_transaction_log_text() -> None:
    value = tl.TransactionLogValue(
        version=1,
        producer_id=1000,
        producer_epoch=0,
        transaction_timeout_ms=60000,
        transaction_status=tl.TransactionState.COMPLETE_COMMIT,
        transaction_partitions=(tl.TxnPartitions(topic="t", partition_ids=(0, 1)),),
        transaction_last_update_timestamp_ms=1700000000010,
        transaction_start_timestamp_ms=1700000000000,
        client_transaction_version=2,
    )
    key, raw = tl.encode_transaction("my-txn", value)
    assert decoders.transaction_log_decoder(key, raw, 0) == (
        '{"type":"0","data":{"transactionalId":"my-txn"}}',
        '{"version":"1","data":{"producerId":1000,"producerEpoch":0,"transactionTimeoutMs":60000,'
        '"transactionStatus":4,"transactionPartitions":[{"topic":"t","partitionIds":[0,1]}],'
        '"transactionLastUpdateTimestampMs":1700000000010,"transactionStartTimestampMs":1700000000000,'
        '"clientTransactionVersion":2}}',
    )
    assert decoders.transaction_log_decoder(key, None, 1) == (
        '{"type":"0","data":{"transactionalId":"my-txn"}}',
        "<DELETE>",
    )
    assert decoders.transaction_log_decoder(b"\x00\x05", None, 2) == (
        "Unknown record type 5 at offset 2, skipping.",
        None,
    )
    record = decoders.decode_transaction_log_record(key, raw)
    assert record["state"] == "COMPLETE_COMMIT" and record["record_type_name"] == "TRANSACTION_LOG"
    with pytest.raises(CorruptRecordError, match="missing key"):
        decoders.transaction_log_decoder(None, raw, 0)


# ---------------------------------------------------------------------------------------------
# --cluster-metadata-decoder


def test_cluster_metadata_text() -> None:
    raw = cm.encode_metadata_record("NO_OP_RECORD", 0, {})
    assert raw == b"\x01\x14\x00\x00"
    assert decoders.cluster_metadata_decoder(None, raw, 5) == (None, '{"type":"NO_OP_RECORD","version":0,"data":{}}')
    assert decoders.cluster_metadata_decoder(None, b"\x01\x63\x00\x00", 8) == (
        None,
        "Error at 8, skipping. org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id 99",
    )
    assert decoders.cluster_metadata_decoder(None, b"\x01\x02\x00\x05ab", 9) == (
        None,
        "Error at 9, skipping. Failed to deserialize record with type 2",
    )
    assert decoders.cluster_metadata_decoder(None, None, 10) == (None, "Error at 10, skipping. null")


# ---------------------------------------------------------------------------------------------
# Control records


@pytest.mark.parametrize(
    ("control_type", "value", "text"),
    [
        (1, bytes.fromhex("000000000003"), "endTxnMarker: COMMIT coordinatorEpoch: 3"),
        (0, bytes.fromhex("0000000000070000"), "endTxnMarker: ABORT coordinatorEpoch: 7"),
        (
            2,
            bytes.fromhex("00000000000102000000010002000000010000"),
            'LeaderChange: {"version":0,"leaderId":1,"voters":[{"voterId":1}],"grantingVoters":[{"voterId":1}]}',
        ),
        (
            3,
            bytes.fromhex("00000000018ef6c7063500"),
            'SnapshotHeader {"version":0,"lastContainedLogTimestamp":1713537222197}',
        ),
        (4, bytes.fromhex("000000"), 'SnapshotFooter {"version":0}'),
        (5, bytes.fromhex("0000000100"), 'KRaftVersion {"version":0,"kRaftVersion":1}'),
        (6, bytes.fromhex("0000 01 00"), 'KRaftVoters {"version":0,"voters":[]}'),
        (7, b"", "controlType: UNKNOWN(7)"),
        (-3, b"", "controlType: UNKNOWN(-3)"),
    ],
)
def test_render_control_record(control_type: int, value: bytes, text: str) -> None:
    assert decoders.render_control_record(control_type, value) == text


def test_render_control_record_damage() -> None:
    with pytest.raises(CorruptRecordError):
        decoders.render_control_record(1, b"\x00\x00\x00")
    with pytest.raises(CorruptRecordError) as exc:
        decoders.render_control_record(3, bytes.fromhex("0000000000"))
    assert exc.value.position == 2


def test_control_value_dicts() -> None:
    assert decoders.decode_control_value(1, bytes.fromhex("000000000003")) == {
        "control_type": 1,
        "control_type_name": "COMMIT",
        "version": 0,
        "value": {"coordinatorEpoch": 3},
    }
    assert decoders.decode_control_value(4, b"\x00\x00\x00") == {
        "control_type": 4,
        "control_type_name": "SNAPSHOT_FOOTER",
        "version": 0,
        "value": {"version": 0},
    }
    assert decoders.decode_control_value(9, b"")["control_type_name"] == "UNKNOWN"


# ---------------------------------------------------------------------------------------------
# Real files


@needs_fixtures
def test_every_fixture_offsets_record_renders() -> None:
    seen = 0
    for directory in OFFSETS_DIRS:
        log = directory / "00000000000000000000.log"
        if not log.stat().st_size:
            continue
        for _, offset, key, value in fixture_records(log):
            key_text, payload = decoders.offsets_decoder(key, value, offset)
            assert key_text is not None and payload is not None, key_text
            key_json = json.loads(key_text)
            assert key_json["type"] in ("1", "2")
            if payload != "<DELETE>":
                payload_json = json.loads(payload)
                assert payload_json["version"] == "3"
                if key_json["type"] == "2":
                    # The consumer protocol was expanded for every member.
                    assert all(isinstance(m["subscription"], dict) for m in payload_json["data"]["members"])
            record = decoders.decode_offsets_record(key, value)
            assert record["key"] == key_json["data"]
            assert record["value"] == (None if payload == "<DELETE>" else json.loads(payload)["data"])
            json.dumps(record)
            seen += 1
    assert seen == 470 + 3 + 499 + 50 + 3 + 4 + 1564


@needs_fixtures
def test_first_fixture_group_text() -> None:
    path = FIXTURES / "VolodymyrZee__kafka" / "__consumer_offsets-12" / "00000000000000000000.log"
    _, offset, key, value = next(iter(fixture_records(path)))
    key_text, payload = decoders.offsets_decoder(key, value, offset)
    assert key_text == '{"type":"2","data":{"group":"my-second-application"}}'
    assert payload is not None and payload.startswith(
        '{"version":"3","data":{"protocolType":"consumer","generation":1,"protocol":"range",'
        '"leader":"consumer-my-second-application-1-812fd943-86f2-4c4f-aee6-ceee35f6c00d",'
        '"currentStateTimestamp":1587580798818,"members":[{"memberId":'
    )
    assert payload.endswith(
        '"clientId":"consumer-my-second-application-1","clientHost":"/192.168.1.69","rebalanceTimeout":300000,'
        '"sessionTimeout":10000,"subscription":{"topics":["first_topic"],"userData":null,"ownedPartitions":[]},'
        '"assignment":{"assignedPartitions":[{"topic":"first_topic","partitions":[0,1,2]}],"userData":null}}]}}'
    )


@needs_fixtures
def test_every_fixture_metadata_record_renders() -> None:
    types = set()
    for is_control, offset, key, value in fixture_records(METADATA_LOG):
        if is_control:
            assert key is not None
            assert decoders.render_control_record(int.from_bytes(key[2:4], "big"), value).startswith("LeaderChange: {")
            continue
        key_text, payload = decoders.cluster_metadata_decoder(key, value, offset)
        assert key_text is None and payload is not None and not payload.startswith("Error")
        parsed = json.loads(payload)
        types.add(parsed["type"])
        record = decoders.decode_cluster_metadata_record(value)
        assert record["record_type_name"] == parsed["type"] and record["value"] == parsed["data"]
    assert {"TOPIC_RECORD", "PARTITION_RECORD", "REGISTER_BROKER_RECORD", "NO_OP_RECORD"} <= types


# ---------------------------------------------------------------------------------------------
# JSON text as Jackson writes it


def test_json_text_matches_jackson() -> None:
    assert json_text({"a": [1, None, True], "b": 'é"\\\n\x01\x7f', "c": {}}) == (
        '{"a":[1,null,true],"b":"é\\"\\\\\\n\\u0001\x7f","c":{}}'
    )
    assert json_text(float("nan")) == '"NaN"'


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1.0"),
        (0.5, "0.5"),
        (100.0, "100.0"),
        (1e7, "1.0E7"),
        (12345678.9, "1.23456789E7"),
        (0.001, "0.001"),
        (0.0001, "1.0E-4"),
        (-2.5e-10, "-2.5E-10"),
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (9999999.0, "9999999.0"),
        (1.7976931348623157e308, "1.7976931348623157E308"),
    ],
)
def test_java_double_to_string(value: float, text: str) -> None:
    assert java_double_to_string(value) == text


@given(st.text())
def test_json_text_is_valid_json(text: str) -> None:
    assert json.loads(json_text({"s": text})) == {"s": text}


def test_string_decoder_and_registry() -> None:
    assert decoders.string_decoder(b"k0", b"v\xff", 0) == ("k0", "v\ufffd")
    assert decoders.string_decoder(None, None, 0) == (None, None)
    assert set(decoders.DECODERS) == {"string", "offsets", "transaction-log", "cluster-metadata", "remote-log-metadata"}
    assert decoders.DECODERS["offsets"] is decoders.offsets_decoder


def test_dicts_are_json_able() -> None:
    key, value = co.encode_group_metadata(
        "g",
        protocol_type="x",
        generation=1,
        protocol=None,
        leader=None,
        current_state_timestamp=5,
        members=[member(b"\x01", b"\x02")],
    )
    record = decoders.decode_offsets_record(key, value)
    assert record["record_type"] == 2 and record["record_type_name"] == "GROUP_METADATA"
    assert record["value_version"] == 3
    assert record["value"]["members"][0]["subscription"] == base64.b64encode(b"\x01").decode()
    json.dumps(record)
    tombstone = decoders.decode_offsets_record(key, None)
    assert (tombstone["value_version"], tombstone["value"]) == (None, None)
    with pytest.raises(co.UnknownRecordTypeError):
        decoders.decode_offsets_record(b"\x00\x20\x00\x00", None)
    with pytest.raises(CorruptRecordError):
        decoders.decode_offsets_record(None, None)
    meta = decoders.decode_cluster_metadata_record(
        cm.encode_metadata_record("TOPIC_RECORD", 0, {"name": "t", "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"})
    )
    assert meta == {
        "record_type": 2,
        "record_type_name": "TOPIC_RECORD",
        "version": 0,
        "key": None,
        "value": {"name": "t", "topicId": "AAAAAAAAAAAAAAAAAAAAAQ"},
    }


def test_remote_log_metadata_decoder() -> None:
    """__remote_log_metadata values (KIP-405) round-trip and print as Kafka's objects print themselves."""
    import uuid

    from kcli.records import remote_log_metadata as rlm

    topic_id, segment_id = uuid.UUID(int=1), uuid.UUID(int=2)
    tip = {"name": "orders", "id": topic_id, "partition": 3}
    value = rlm.encode_remote_log_metadata(0, {
        "remoteLogSegmentId": {"topicIdPartition": tip, "id": segment_id}, "startOffset": 0, "endOffset": 99,
        "brokerId": 1, "maxTimestampMs": 5, "eventTimestampMs": 6, "segmentLeaderEpochs": [{"leaderEpoch": 0, "offset": 0}],
        "segmentSizeInBytes": 1024, "customMetadata": None, "remoteLogSegmentState": 0, "txnIndexEmpty": True})
    assert value[:3] == b"\x01\x00\x00"  # frame version 1, apiKey 0, version 0 (AbstractApiMessageSerde)
    decoded = rlm.decode_remote_log_metadata(value)
    assert decoded.data["endOffset"] == 99 and decoded.data["remoteLogSegmentId"]["id"] == segment_id
    key, text = decoders.remote_log_metadata_decoder(None, value, 7)
    assert key is None
    assert text.startswith("RemoteLogSegmentMetadata{remoteLogSegmentId=RemoteLogSegmentId{topicIdPartition="
                           "AAAAAAAAAAAAAAAAAAAAAQ:orders-3, id=AAAAAAAAAAAAAAAAAAAAAg}, startOffset=0, endOffset=99")
    assert text.endswith("segmentSizeInBytes=1024, customMetadata=Optional.empty, state=COPY_SEGMENT_STARTED}")
    update = rlm.encode_remote_log_metadata(1, {"remoteLogSegmentId": {"topicIdPartition": tip, "id": segment_id},
                                                "brokerId": 1, "eventTimestampMs": 7, "customMetadata": None,
                                                "remoteLogSegmentState": 1})
    assert "state=COPY_SEGMENT_FINISHED" in decoders.remote_log_metadata_decoder(None, update, 8)[1]
    assert decoders.remote_log_metadata_decoder(None, value[:10], 9)[1].startswith("Error at offset 9, skipping.")
    # the metadata partition of a user partition: deterministic, within range
    assert 0 <= rlm.metadata_partition(topic_id, 3, 50) < 50
    assert rlm.metadata_partition(topic_id, 3, 50) == rlm.metadata_partition(topic_id, 3, 50)
