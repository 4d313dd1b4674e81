"""KRaft metadata records and control records: a real Kafka 3.6 metadata log and snapshots, hand-built
records, round trips and damage."""

from __future__ import annotations

import collections
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from support import FIXTURES, fixture_records
from hypothesis import given
from hypothesis import strategies as st

from kcli.errors import CorruptRecordError
from kcli.records import cluster_metadata as cm
from kcli.records.schema import json_text, kafka_uuid_from_string, kafka_uuid_to_string

DATA = FIXTURES / "rjmfernandes__flink-on-prem" / "data"
METADATA_DIR = DATA / "__cluster_metadata-0"

needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="shared/kafka-fixtures not present")


def control_type(key: bytes | None) -> int:
    assert key is not None and len(key) >= 4
    return int.from_bytes(key[2:4], "big", signed=True)


def decode_file(path: Path) -> tuple[collections.Counter[str], list[cm.MetadataRecord], list[cm.ControlRecord]]:
    counts: collections.Counter[str] = collections.Counter()
    records: list[cm.MetadataRecord] = []
    controls: list[cm.ControlRecord] = []
    for is_control, _offset, key, value in fixture_records(path):
        if is_control:
            controls.append(cm.decode_control_record(control_type(key), value))
            continue
        assert key is None
        rec = cm.decode_metadata_record(value)
        # Byte-exact re-encoding: field order, tagged fields and compact lengths all match Kafka.
        assert cm.encode_metadata_record(rec.type_id, rec.version, rec.data) == value
        counts[rec.type_name] += 1
        records.append(rec)
    return counts, records, controls


# ---------------------------------------------------------------------------------------------
# Real files (INDEX.md counts)


@needs_fixtures
def test_metadata_log_decodes_completely() -> None:
    counts, records, controls = decode_file(METADATA_DIR / "00000000000000000000.log")
    assert dict(counts) == {
        "NO_OP_RECORD": 16277,
        "CONFIG_RECORD": 375,
        "PARTITION_RECORD": 151,
        "PARTITION_CHANGE_RECORD": 151,
        "TOPIC_RECORD": 63,
        "BROKER_REGISTRATION_CHANGE_RECORD": 3,
        "BEGIN_TRANSACTION_RECORD": 1,
        "FEATURE_LEVEL_RECORD": 1,
        "ZK_MIGRATION_STATE_RECORD": 1,
        "END_TRANSACTION_RECORD": 1,
        "REGISTER_BROKER_RECORD": 1,
        "PRODUCER_IDS_RECORD": 1,
    }
    (leader_change,) = controls
    assert leader_change.type_name == "LEADER_CHANGE"
    assert json_text(leader_change.to_json()) == (
        '{"version":0,"leaderId":1,"voters":[{"voterId":1}],"grantingVoters":[{"voterId":1}]}'
    )
    # The bootstrap transaction (KIP-868) opens the log.
    assert [r.type_name for r in records[:4]] == [
        "BEGIN_TRANSACTION_RECORD",
        "FEATURE_LEVEL_RECORD",
        "ZK_MIGRATION_STATE_RECORD",
        "END_TRANSACTION_RECORD",
    ]
    assert records[0].data == {"name": "Bootstrap records"}
    assert records[1].to_json() == {
        "type": "FEATURE_LEVEL_RECORD",
        "version": 0,
        "data": {"name": "metadata.version", "featureLevel": 14},
    }
    register = next(r for r in records if r.type_name == "REGISTER_BROKER_RECORD")
    assert register.version == 2 and register.data["brokerId"] == 1 and register.data["rack"] is None
    assert {e["name"]: e["port"] for e in register.data["endPoints"]} == {"PLAINTEXT": 9092, "PLAINTEXT_HOST": 29092}
    change_versions = {r.version for r in records if r.type_name == "BROKER_REGISTRATION_CHANGE_RECORD"}
    assert change_versions == {0, 1}


@needs_fixtures
def test_topic_records_match_partition_metadata_files() -> None:
    _, records, _ = decode_file(METADATA_DIR / "00000000000000000000.log")
    topics = {r.data["name"]: r.data["topicId"] for r in records if r.type_name == "TOPIC_RECORD"}
    for name in ("loyalty_levels", "promotions", "_schemas", "connect-offsets", "__consumer_offsets", "customers"):
        assert name in topics
    checked = 0
    for meta in DATA.glob("*/partition.metadata"):
        topic = meta.parent.name.rsplit("-", 1)[0]
        if topic == "__cluster_metadata":
            continue
        topic_id = re.search(r"topic_id: (\S+)", meta.read_text()).group(1)  # type: ignore[union-attr]
        assert kafka_uuid_to_string(topics[topic]) == topic_id
        checked += 1
    assert checked >= 10
    # Partitions point at topics that exist.
    ids = set(topics.values())
    assert all(r.data["topicId"] in ids for r in records if r.type_name == "PARTITION_RECORD")


@needs_fixtures
@pytest.mark.parametrize(
    ("name", "partitions", "topics", "timestamp"),
    [
        ("00000000000000007752-0000000001.checkpoint", 146, 58, 1713537222197),
        ("00000000000000014926-0000000001.checkpoint", 148, 60, 1713540822597),
    ],
)
def test_snapshots_decode(name: str, partitions: int, topics: int, timestamp: int) -> None:
    counts, records, controls = decode_file(METADATA_DIR / name)
    assert dict(counts) == {
        "CONFIG_RECORD": 375,
        "PARTITION_RECORD": partitions,
        "TOPIC_RECORD": topics,
        "FEATURE_LEVEL_RECORD": 1,
        "ZK_MIGRATION_STATE_RECORD": 1,
        "REGISTER_BROKER_RECORD": 1,
        "PRODUCER_IDS_RECORD": 1,
    }
    header, footer = controls
    assert header.to_json() == {"version": 0, "lastContainedLogTimestamp": timestamp}
    assert (footer.type_name, footer.to_json()) == ("SNAPSHOT_FOOTER", {"version": 0})
    producer_ids = next(r for r in records if r.type_name == "PRODUCER_IDS_RECORD")
    # Snapshots write the producer-id block without the broker that asked for it.
    assert producer_ids.data == {"brokerId": -1, "brokerEpoch": -1, "nextProducerId": 1000}


@needs_fixtures
def test_bootstrap_checkpoint() -> None:
    counts, _, controls = decode_file(DATA / "bootstrap.checkpoint")
    assert dict(counts) == {"FEATURE_LEVEL_RECORD": 1}
    assert [c.to_json() for c in controls] == [{"version": 0, "lastContainedLogTimestamp": 0}, {"version": 0}]


# ---------------------------------------------------------------------------------------------
# Hand-built records

TOPIC_ID = "qWNLiUNvR7eGR5czomqQJA"


def test_topic_record_bytes_and_json() -> None:
    raw = cm.encode_metadata_record("TOPIC_RECORD", 0, {"name": "orders", "topicId": TOPIC_ID})
    topic_bytes = kafka_uuid_from_string(TOPIC_ID).bytes
    assert raw == bytes.fromhex("01 02 00 07") + b"orders" + topic_bytes + b"\x00"
    rec = cm.decode_metadata_record(raw)
    assert (rec.type_id, rec.type_name, rec.version) == (2, "TOPIC_RECORD", 0)
    assert rec.data == {"name": "orders", "topicId": uuid.UUID(bytes=topic_bytes)}
    expected = '{"type":"TOPIC_RECORD","version":0,"data":{"name":"orders","topicId":"' + TOPIC_ID + '"}}'
    assert json_text(rec.to_json()) == expected


def test_partition_change_tagged_fields_json() -> None:
    data = {"partitionId": 3, "topicId": TOPIC_ID, "isr": [1, 2], "leader": 2, "eligibleLeaderReplicas": [3]}
    raw = cm.encode_metadata_record(5, 2, data)
    rec = cm.decode_metadata_record(raw)
    # Tagged fields print only when they differ from their defaults, in spec order (not tag order).
    assert json_text(rec.to_json()) == (
        '{"type":"PARTITION_CHANGE_RECORD","version":2,"data":{"partitionId":3,"topicId":"' + TOPIC_ID + '",'
        '"isr":[1,2],"leader":2,"eligibleLeaderReplicas":[3]}}'
    )
    assert rec.data["replicas"] is None and rec.data["leaderRecoveryState"] == -1 and rec.data["directories"] is None


def test_client_quota_double_and_names() -> None:
    data = {
        "entity": [{"entityType": "user", "entityName": None}],
        "key": "producer_byte_rate",
        "value": 1e7,
        "remove": False,
    }
    rec = cm.decode_metadata_record(cm.encode_metadata_record("CLIENT_QUOTA_RECORD", 0, data))
    assert json_text(rec.to_json()) == (
        '{"type":"CLIENT_QUOTA_RECORD","version":0,"data":{"entity":[{"entityType":"user","entityName":null}],'
        '"key":"producer_byte_rate","value":1.0E7,"remove":false}}'
    )
    assert cm.RECORD_TYPE_NAMES[21] == "ZK_MIGRATION_STATE_RECORD"
    assert cm.record_type_id("NO_OP_RECORD") == 20
    with pytest.raises(KeyError):
        cm.record_type_id("NOPE")


def test_user_scram_bytes_are_base64_in_json() -> None:
    data = {
        "name": "alice",
        "mechanism": 1,
        "salt": b"\x00\x01\xff",
        "storedKey": b"k",
        "serverKey": b"",
        "iterations": 4096,
    }
    rec = cm.decode_metadata_record(cm.encode_metadata_record(11, 0, data))
    assert rec.to_json()["data"] == {
        "name": "alice",
        "mechanism": 1,
        "salt": "AAH/",
        "storedKey": "aw==",
        "serverKey": "",
        "iterations": 4096,
    }


def test_kraft_control_records() -> None:
    voters = {
        "version": 0,
        "voters": [
            {
                "voterId": 1,
                "voterDirectoryId": "AAAAAAAAAAAAAAAAAAAAAQ",
                "endpoints": [{"name": "CONTROLLER", "host": "c1", "port": 9093}],
                "kRaftVersionFeature": {"minSupportedVersion": 0, "maxSupportedVersion": 1},
            }
        ],
    }
    rec = cm.decode_control_record(6, cm.encode_control_record(6, voters))
    assert rec.type_name == "KRAFT_VOTERS"
    assert json_text(rec.to_json()) == (
        '{"version":0,"voters":[{"voterId":1,"voterDirectoryId":"AAAAAAAAAAAAAAAAAAAAAQ","endpoints":'
        '[{"name":"CONTROLLER","host":"c1","port":9093}],"kRaftVersionFeature":{"minSupportedVersion":0,'
        '"maxSupportedVersion":1}}]}'
    )
    kraft = cm.decode_control_record(5, bytes.fromhex("0000 0001 00"))
    assert kraft.to_json() == {"version": 0, "kRaftVersion": 1}
    # A LeaderChange whose own Version field says 1 is read at version 0 but printed at 1 (as Kafka does),
    # so the voters' directory ids appear as the zero UUID.
    leader = cm.decode_control_record(2, bytes.fromhex("0001 00000002 02 00000002 00 01 00"))
    assert json_text(leader.to_json()) == (
        '{"version":1,"leaderId":2,"voters":[{"voterId":2,"voterDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA"}],'
        '"grantingVoters":[]}'
    )
    with pytest.raises(cm.UnknownRecordTypeError):
        cm.decode_control_record(1, b"\x00\x00\x00\x00\x00\x00")


# ---------------------------------------------------------------------------------------------
# Damage


def test_frame_and_type_errors_use_kafka_texts() -> None:
    with pytest.raises(CorruptRecordError, match=r"with frame version 0\. Note that upgrades"):
        cm.decode_metadata_record(bytes.fromhex("00 14 00 00"))
    with pytest.raises(CorruptRecordError, match=r"unknown frame version 2\(only frame version 1 is supported\)"):
        cm.decode_metadata_record(bytes.fromhex("02 14 00 00"))
    with pytest.raises(cm.UnknownRecordTypeError) as unknown:
        cm.decode_metadata_record(bytes.fromhex("01 63 00 00"))
    assert unknown.value.record_type == 99 and unknown.value.position == 1
    assert unknown.value.reason == "org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id 99"
    with pytest.raises(CorruptRecordError, match="Value for type was too large"):
        cm.decode_metadata_record(bytes.fromhex("01 808002 00"))
    with pytest.raises(CorruptRecordError, match="Error while reading frame version"):
        cm.decode_metadata_record(b"\x81\x82\x83\x84\x85\x86")
    with pytest.raises(CorruptRecordError, match=r"Found 2 byte\(s\) of garbage after 20") as garbage:
        cm.decode_metadata_record(bytes.fromhex("01 14 00 00 abcd"))
    assert garbage.value.position == 4
    with pytest.raises(CorruptRecordError, match="no value"):
        cm.decode_metadata_record(None)


def test_every_truncation_raises_with_position() -> None:
    raw = cm.encode_metadata_record(
        "REGISTER_BROKER_RECORD",
        3,
        {
            "brokerId": 1,
            "incarnationId": TOPIC_ID,
            "brokerEpoch": 6,
            "endPoints": [{"name": "PLAINTEXT", "host": "b", "port": 9092, "securityProtocol": 0}],
            "features": [{"name": "metadata.version", "minSupportedVersion": 1, "maxSupportedVersion": 20}],
            "rack": "r",
            "logDirs": [TOPIC_ID],
        },
    )
    assert cm.decode_metadata_record(raw).data["logDirs"] == [kafka_uuid_from_string(TOPIC_ID)]
    for cut in range(len(raw)):
        with pytest.raises(CorruptRecordError) as exc:
            cm.decode_metadata_record(raw[:cut])
        assert exc.value.position is not None and 0 <= exc.value.position <= cut
    with pytest.raises(CorruptRecordError, match="Failed to deserialize record with type 0") as exc:
        cm.decode_metadata_record(raw[:20])
    assert isinstance(exc.value.__cause__, CorruptRecordError)


# ---------------------------------------------------------------------------------------------
# Round trips

int32 = st.integers(-(2**31), 2**31 - 1)
uuids = st.uuids()
opt_ints = st.none() | st.lists(int32, max_size=4)


@given(
    version=st.integers(0, 2),
    partition=int32,
    topic=uuids,
    isr=opt_ints,
    leader=int32,
    replicas=opt_ints,
    recovery=st.integers(-128, 127),
    directories=st.none() | st.lists(uuids, max_size=3),
    elr=opt_ints,
)
def test_partition_change_round_trip(
    version: int,
    partition: int,
    topic: uuid.UUID,
    isr: Any,
    leader: int,
    replicas: Any,
    recovery: int,
    directories: Any,
    elr: Any,
) -> None:
    data = {
        "partitionId": partition,
        "topicId": topic,
        "isr": isr,
        "leader": leader,
        "replicas": replicas,
        "leaderRecoveryState": recovery,
    }
    if version >= 1:
        data["directories"] = directories
    if version >= 2:
        data["eligibleLeaderReplicas"] = elr
    rec = cm.decode_metadata_record(cm.encode_metadata_record("PARTITION_CHANGE_RECORD", version, data))
    assert rec.version == version
    assert {k: rec.data[k] for k in data} == data


@given(name=st.text(max_size=30), level=st.integers(-(2**15), 2**15 - 1))
def test_feature_level_round_trip(name: str, level: int) -> None:
    raw = cm.encode_metadata_record("FEATURE_LEVEL_RECORD", 0, {"name": name, "featureLevel": level})
    assert cm.decode_metadata_record(raw).data == {"name": name, "featureLevel": level}


@given(ts=st.integers(-(2**63), 2**63 - 1))
def test_snapshot_header_round_trip(ts: int) -> None:
    rec = cm.decode_control_record(3, cm.encode_control_record(3, {"version": 0, "lastContainedLogTimestamp": ts}))
    assert rec.to_json() == {"version": 0, "lastContainedLogTimestamp": ts}
