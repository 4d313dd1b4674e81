"""__consumer_offsets codecs: Java hashing, real Kafka 2.x/3.6 partitions, hand-built bytes, round trips."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from support import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from kcli.errors import CorruptRecordError
from kcli.records import consumer_offsets as co
from kcli.records.schema import MessageSchema, StructSchema, Versions

VZ = FIXTURES / "VolodymyrZee__kafka"
FLINK = FIXTURES / "rjmfernandes__flink-on-prem" / "data"

# From INDEX.md: key versions per non-empty partition (record counts include tombstones).
EXPECTED_KEY_VERSIONS = {
    VZ / "__consumer_offsets-12": {1: 462, 2: 8},
    VZ / "__consumer_offsets-17": {2: 3},
    VZ / "__consumer_offsets-18": {1: 483, 2: 16},
    VZ / "__consumer_offsets-32": {1: 48, 2: 2},
    VZ / "__consumer_offsets-33": {2: 3},
    FLINK / "__consumer_offsets-28": {1: 2, 2: 2},
    FLINK / "__consumer_offsets-36": {1: 1561, 2: 3},
}

needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="shared/kafka-fixtures not present")


def fixture_records(directory: Path) -> Iterator[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record of the partition's first segment, via kafka-python."""
    memory_records = pytest.importorskip("kafka.record").MemoryRecords
    records = memory_records((directory / "00000000000000000000.log").read_bytes())
    while records.has_next():
        batch = records.next_batch()
        assert not batch.is_control_batch
        for record in batch:
            yield record.offset, bytes(record.key), None if record.value is None else bytes(record.value)


# ---------------------------------------------------------------------------------------------
# Partition for a group (section 7.1)


@pytest.mark.parametrize(
    ("group", "hashcode", "partition"),
    [
        ("my-group", -1906497762, 12),
        ("test-group", 627841412, 12),
        ("console-consumer-12345", 158455506, 6),
        ("polygenelubricants", -(2**31), 0),  # Utils.abs(MIN_VALUE) = 0, not MIN_VALUE
        ("", 0, 0),
        # U+1F600 is two UTF-16 code units (D83D DE00): 0xD83D * 31 + 0xDE00, not the code point.
        ("\U0001f600", 0xD83D * 31 + 0xDE00, (0xD83D * 31 + 0xDE00) % 50),
    ],
)
def test_java_hashcode_and_partition(group: str, hashcode: int, partition: int) -> None:
    assert co.java_string_hashcode(group) == hashcode
    assert co.partition_for_group(group) == partition


def test_non_bmp_differs_from_code_point_hash() -> None:
    assert co.java_string_hashcode("g\U0001f600") == ((ord("g") * 31 + 0xD83D) * 31 + 0xDE00)
    assert co.java_string_hashcode("\U0001f600") != 0x1F600


def test_hashcode_wraps_to_int32() -> None:
    h = co.java_string_hashcode("a" * 40)
    assert -(2**31) <= h < 2**31
    expected = 0
    for _ in range(40):
        expected = (expected * 31 + 97) & 0xFFFFFFFF
    assert h == expected - 2**32 if expected >= 2**31 else expected


def test_partition_count_is_honoured() -> None:
    assert co.partition_for_group("my-group", 1) == 0
    assert co.partition_for_group("test-group", 7) == 627841412 % 7
    with pytest.raises(ValueError):
        co.partition_for_group("g", 0)


# ---------------------------------------------------------------------------------------------
# Real partitions


@needs_fixtures
@pytest.mark.parametrize("directory", list(EXPECTED_KEY_VERSIONS), ids=lambda p: f"{p.parent.name[:12]}/{p.name}")
def test_fixture_partition_decodes_and_reencodes(directory: Path) -> None:
    partition = int(directory.name.rsplit("-", 1)[1])
    versions: collections.Counter[int] = collections.Counter()
    for _offset, key, value in fixture_records(directory):
        decoded_key, decoded_value = co.decode_record(key, value)
        versions[decoded_key.version] += 1
        # Every group lives in the partition Kafka's hash assigns it (50 partitions).
        assert co.partition_for_group(decoded_key.group) == partition
        # Re-encoding what we decoded gives the broker's bytes back exactly.
        assert co.encode_key(decoded_key) == key
        assert co.encode_value(decoded_value) == value
        if isinstance(decoded_value, co.GroupMetadataValue):
            assert decoded_value.protocol_type == "consumer"
            for member in decoded_value.members:
                sub = co.decode_subscription(member.subscription)
                assignment = co.decode_assignment(member.assignment)
                assert sub.topics and assignment.assigned_partitions
                assert co.encode_subscription(sub) == member.subscription
                assert co.encode_assignment(assignment) == member.assignment
        elif isinstance(decoded_value, co.OffsetCommitValue):
            assert decoded_value.version == 3 and decoded_value.offset >= 0
            assert isinstance(decoded_key, co.OffsetCommitKey) and decoded_key.topic
    assert dict(versions) == EXPECTED_KEY_VERSIONS[directory]


@needs_fixtures
def test_fixture_first_records_of_partition_12() -> None:
    records = list(fixture_records(VZ / "__consumer_offsets-12"))
    key0, value0 = co.decode_record(records[0][1], records[0][2])
    assert key0 == co.GroupMetadataKey(group="my-second-application")
    assert isinstance(value0, co.GroupMetadataValue)
    assert (value0.version, value0.protocol_type, value0.generation, value0.protocol) == (3, "consumer", 1, "range")
    assert value0.current_state_timestamp == 1587580798818
    (member,) = value0.members
    assert member.member_id == value0.leader == "consumer-my-second-application-1-812fd943-86f2-4c4f-aee6-ceee35f6c00d"
    assert (member.client_id, member.client_host) == ("consumer-my-second-application-1", "/192.168.1.69")
    assert (member.session_timeout, member.rebalance_timeout, member.group_instance_id) == (10000, 300000, None)
    sub = co.decode_subscription(member.subscription)
    assert sub == co.Subscription(version=1, topics=("first_topic",), user_data=None, owned_partitions=())
    assignment = co.decode_assignment(member.assignment)
    assert assignment.version == 1
    assert assignment.assigned_partitions == (co.TopicPartitions(topic="first_topic", partitions=(0, 1, 2)),)

    key1, value1 = co.decode_record(records[1][1], records[1][2])
    assert key1 == co.OffsetCommitKey(group="my-second-application", topic="first_topic", partition=0)
    assert value1 == co.OffsetCommitValue(
        version=3, offset=9, leader_epoch=0, metadata="", commit_timestamp=1587580803833
    )


@needs_fixtures
def test_fixture_group_removal_tombstone() -> None:
    records = list(fixture_records(VZ / "__consumer_offsets-17"))
    assert [co.decode_key(k).group for _, k, _ in records] == ["console-consumer-48266"] * 3
    empty = co.decode_value(2, records[1][2])
    assert isinstance(empty, co.GroupMetadataValue)
    assert (empty.generation, empty.protocol, empty.leader, empty.members) == (2, None, None, ())
    assert records[2][2] is None and co.decode_value(2, None) is None


@needs_fixtures
def test_fixture_kafka_streams_group_has_user_data() -> None:
    # Kafka 3.6 (Confluent 7.6) Streams app: protocol "stream", subscription v3 with Streams userData.
    _, key, value = next(iter(fixture_records(FLINK / "__consumer_offsets-28")))
    group_value = co.decode_value(co.decode_key(key).version, value)
    assert isinstance(group_value, co.GroupMetadataValue) and group_value.protocol == "stream"
    sub = co.decode_subscription(group_value.members[0].subscription)
    assert sub.version == 3 and sub.topics == ("_confluent-command",)
    assert sub.user_data  # Streams' SubscriptionInfo
    assignment = co.decode_assignment(group_value.members[0].assignment)
    assert assignment.assigned_partitions[0].topic == "_confluent-command"


# ---------------------------------------------------------------------------------------------
# Hand-built bytes and encoders


def test_encode_offset_commit_current_versions() -> None:
    key, value = co.encode_offset_commit("g", "t", 0, 42, commit_timestamp=1700000000000)
    assert key == bytes.fromhex("0001 0001 67 0001 74 00000000")
    assert value == bytes.fromhex("0003 000000000000002a ffffffff 0000 0000018bcfe56800")
    assert co.decode_record(key, value) == (
        co.OffsetCommitKey(group="g", topic="t", partition=0),
        co.OffsetCommitValue(version=3, offset=42, commit_timestamp=1700000000000),
    )


def test_encode_offset_commit_with_expire_timestamp_writes_v1() -> None:
    key, value = co.encode_offset_commit(
        "g", "t", 3, 7, leader_epoch=5, metadata="m", commit_timestamp=10, expire_timestamp=20
    )
    assert value == bytes.fromhex("0001 0000000000000007 0001 6d 000000000000000a 0000000000000014")
    decoded = co.decode_value(co.decode_key(key).version, value)
    # v1 has no leader epoch: it is dropped, as Kafka does.
    assert decoded == co.OffsetCommitValue(version=1, offset=7, metadata="m", commit_timestamp=10, expire_timestamp=20)


def test_encode_group_metadata_and_tombstones() -> None:
    sub = co.encode_subscription(co.Subscription(topics=("t",), generation_id=4, rack_id="r1"))
    assignment = co.encode_assignment(
        co.Assignment(assigned_partitions=(co.TopicPartitions(topic="t", partitions=(0, 1)),))
    )
    member = co.MemberMetadata(
        member_id="m-1",
        client_id="c",
        client_host="/h",
        session_timeout=45000,
        rebalance_timeout=300000,
        subscription=sub,
        assignment=assignment,
        group_instance_id="static-1",
    )
    key, value = co.encode_group_metadata(
        "g",
        protocol_type="consumer",
        generation=5,
        protocol="range",
        leader="m-1",
        current_state_timestamp=1700000000000,
        members=[member],
    )
    assert key == bytes.fromhex("0002 0001 67")
    assert value[:2] == b"\x00\x03"
    decoded = co.decode_value(2, value)
    assert decoded == co.GroupMetadataValue(
        version=3,
        protocol_type="consumer",
        generation=5,
        protocol="range",
        leader="m-1",
        current_state_timestamp=1700000000000,
        members=(member,),
    )
    assert co.decode_subscription(sub) == co.Subscription(version=3, topics=("t",), generation_id=4, rack_id="r1")
    assert co.encode_group_metadata_tombstone("g") == (key, None)
    assert co.encode_offset_commit_tombstone("g", "t", 0) == (
        co.encode_offset_commit("g", "t", 0, 1, commit_timestamp=0)[0],
        None,
    )


def test_group_metadata_v0_has_no_rebalance_timeout() -> None:
    value = co.GroupMetadataValue(
        version=0,
        protocol_type="connect",
        generation=1,
        protocol=None,
        leader=None,
        members=(
            co.MemberMetadata(
                member_id="a", client_id="b", client_host="c", session_timeout=7, subscription=b"\x01", assignment=b""
            ),
        ),
    )
    data = co.encode_value(value)
    assert data is not None
    assert co.decode_value(2, data) == value
    # v0 member = memberId, clientId, clientHost, sessionTimeout, subscription, assignment.
    assert data.endswith(bytes.fromhex("0001 61 0001 62 0001 63 00000007 0000000101 00000000"))


def test_writing_a_field_the_version_lacks_is_refused() -> None:
    member = co.MemberMetadata(
        member_id="a",
        client_id="b",
        client_host="c",
        session_timeout=1,
        subscription=b"",
        assignment=b"",
        group_instance_id="x",
    )
    value = co.GroupMetadataValue(
        version=2, protocol_type="consumer", generation=1, protocol=None, leader=None, members=(member,)
    )
    # groupInstanceId is ignorable (v3+), so Kafka drops it at v2 ...
    data = co.encode_value(value)
    assert data is not None
    decoded = co.decode_value(2, data)
    assert isinstance(decoded, co.GroupMetadataValue) and decoded.members[0].group_instance_id is None
    # ... but a key field outside its versions is not.
    with pytest.raises(ValueError, match="no version 5"):
        co.encode_value(co.OffsetCommitValue(version=5, offset=1))


def test_flexible_v4_value_skips_unknown_tagged_fields() -> None:
    # offset, leaderEpoch, compact metadata "m", commitTimestamp, then one unknown tag 9 of 2 bytes.
    raw = bytes.fromhex("0004 0000000000000001 00000002 026d 0000000000000003 01 09 02 abcd")
    assert co.decode_value(1, raw) == co.OffsetCommitValue(
        version=4, offset=1, leader_epoch=2, metadata="m", commit_timestamp=3
    )
    assert (
        co.encode_value(co.OffsetCommitValue(version=4, offset=1, leader_epoch=2, metadata="m", commit_timestamp=3))
        == raw[:-5] + b"\x00"
    )


# ---------------------------------------------------------------------------------------------
# Damage


def test_short_key_and_value_report_kafka_texts() -> None:
    with pytest.raises(CorruptRecordError, match=r"Could not read version from key's buffer\.") as exc:
        co.decode_key(b"\x00")
    assert exc.value.position == 0
    with pytest.raises(CorruptRecordError, match=r"Could not read version from value's buffer\."):
        co.decode_value(1, b"\x03")


def test_unknown_record_type() -> None:
    with pytest.raises(co.UnknownRecordTypeError) as exc:
        co.decode_key(b"\x00\x10\x00\x01g")
    assert exc.value.record_type == 16
    # KIP-848 types decode through SERDE but have no typed view.
    with pytest.raises(co.UnknownRecordTypeError):
        co.decode_key(b"\x00\x03\x00\x01g")
    assert co.SERDE.decode_key(b"\x00\x03\x00\x01g") == (3, {"groupId": "g"})


def test_null_group_and_bad_string_length() -> None:
    with pytest.raises(CorruptRecordError, match="non-nullable field group was serialized as null") as exc:
        co.decode_key(bytes.fromhex("0001 ffff"))
    assert exc.value.position == 2
    with pytest.raises(CorruptRecordError, match="truncated group: needs 80 byte") as exc:
        co.decode_key(bytes.fromhex("0002 0050") + b"g" * 10)
    assert exc.value.position == 4
    # Only compact (flexible) lengths can exceed Short.MAX_VALUE: varint 0x10000 - 1 = 65535.
    with pytest.raises(CorruptRecordError, match="string field metadata had invalid length 65535"):
        co.decode_value(1, bytes.fromhex("0004 0000000000000001 00000002 808004"))


def test_huge_member_count_is_rejected_before_allocating() -> None:
    value = co.encode_value(
        co.GroupMetadataValue(version=3, protocol_type="c", generation=1, protocol=None, leader=None)
    )
    assert value is not None
    damaged = value[:-4] + b"\x7f\xff\xff\xff"
    with pytest.raises(CorruptRecordError, match="Tried to allocate a collection of size 2147483647"):
        co.decode_value(2, damaged)


@needs_fixtures
def test_every_truncation_of_real_values_raises_with_position() -> None:
    records = list(fixture_records(VZ / "__consumer_offsets-12"))
    for _, key, value in records[:2]:
        assert value is not None
        record_type = co.decode_key(key).version
        for cut in range(len(value)):
            with pytest.raises(CorruptRecordError) as exc:
                co.decode_value(record_type, value[:cut])
            assert exc.value.position is not None and 0 <= exc.value.position <= cut
        for cut in range(len(key)):
            with pytest.raises(CorruptRecordError):
                co.decode_key(key[:cut])


def test_embedded_protocol_damage() -> None:
    with pytest.raises(CorruptRecordError):
        co.decode_subscription(b"\x00")
    with pytest.raises(CorruptRecordError, match="Unsupported subscription version: -1"):
        co.decode_subscription(b"\xff\xff\x00\x00\x00\x00")
    with pytest.raises(CorruptRecordError) as exc:
        co.decode_assignment(bytes.fromhex("0000 00000001 0005 61"))
    assert exc.value.position is not None


def test_out_of_range_value_versions_parse_like_the_nearest_valid_one() -> None:
    v0_body = bytes.fromhex("0000000000000005 0000 0000000000000009")
    # Kafka's generated reader has no range check: -1 reads the v0 fields, 9 reads the v4 layout.
    assert co.decode_value(1, b"\xff\xff" + v0_body) == co.OffsetCommitValue(version=-1, offset=5, commit_timestamp=9)
    v4 = co.encode_value(co.OffsetCommitValue(version=4, offset=5, leader_epoch=1, commit_timestamp=9))
    assert v4 is not None
    assert co.decode_value(1, b"\x00\x09" + v4[2:]) == co.OffsetCommitValue(
        version=9, offset=5, leader_epoch=1, commit_timestamp=9
    )


def test_newer_subscription_version_parses_with_newest_layout() -> None:
    raw = co.encode_subscription(co.Subscription(topics=("a",), rack_id="r", generation_id=2))
    newer = b"\x00\x07" + raw[2:] + b"\x01\x02"  # trailing fields of a future version are ignored
    decoded = co.decode_subscription(newer)
    assert (decoded.version, decoded.topics, decoded.rack_id, decoded.generation_id) == (7, ("a",), "r", 2)


# ---------------------------------------------------------------------------------------------
# Transcription check against the JSON specs kafka-python ships


def _versions_text(v: Versions) -> str:
    if v.empty:
        return "none"
    if v.high == 0x7FFF:
        return f"{v.low}+"
    return str(v.low) if v.low == v.high else f"{v.low}-{v.high}"


def _spec_shape(fields: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """(camelCase name, type, versions, nullableVersions, nested) per field of a JSON spec."""
    return [
        (
            f["name"][:1].lower() + f["name"][1:],
            f["type"],
            f["versions"],
            f.get("nullableVersions", "none"),
            _spec_shape(f.get("fields", [])),
        )
        for f in fields
    ]


def _schema_shape(struct: StructSchema) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for f in struct.fields:
        element = f.type.element if f.type.kind == "array" else None
        nested = element.struct if element is not None else None
        type_name = f"[]{nested.name if nested else element.kind}" if element is not None else f.type.kind
        nested_shape = _schema_shape(nested) if nested is not None else []
        out.append((f.name, type_name, _versions_text(f.versions), _versions_text(f.nullable_versions), nested_shape))
    return out


@pytest.mark.parametrize(
    ("resource", "schema"),
    [("ConsumerProtocolSubscription", co.SUBSCRIPTION_SCHEMA), ("ConsumerProtocolAssignment", co.ASSIGNMENT_SCHEMA)],
)
def test_consumer_protocol_schemas_match_kafka_python_resources(resource: str, schema: MessageSchema) -> None:
    resources = pytest.importorskip("kafka.protocol.schemas.resources")
    path = Path(resources.__file__).parent / f"{resource}.json"
    text = "\n".join(line.split("//", 1)[0] for line in path.read_text().splitlines())
    spec = json.loads(text)
    assert spec["validVersions"] == f"{schema.valid_versions.low}-{schema.valid_versions.high}"
    assert _spec_shape(spec["fields"]) == _schema_shape(schema.struct)


# ---------------------------------------------------------------------------------------------
# Round trips

names = st.text(max_size=20)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
topic_partitions = st.builds(co.TopicPartitions, topic=names, partitions=st.lists(int32, max_size=5).map(tuple))


@st.composite
def offset_commit_values(draw: st.DrawFn) -> co.OffsetCommitValue:
    version = draw(st.integers(0, 4))
    return co.OffsetCommitValue(
        version=version,
        offset=draw(int64),
        metadata=draw(names),
        commit_timestamp=draw(int64),
        leader_epoch=draw(int32) if version >= 3 else -1,
        expire_timestamp=draw(int64) if version == 1 else -1,
    )


@st.composite
def group_metadata_values(draw: st.DrawFn) -> co.GroupMetadataValue:
    version = draw(st.integers(0, 4))
    members = draw(
        st.lists(
            st.builds(
                co.MemberMetadata,
                member_id=names,
                client_id=names,
                client_host=names,
                session_timeout=int32,
                subscription=st.binary(max_size=20),
                assignment=st.binary(max_size=20),
                group_instance_id=st.none() | names if version >= 3 else st.none(),
                rebalance_timeout=int32 if version >= 1 else st.just(-1),
            ),
            max_size=3,
        )
    )
    return co.GroupMetadataValue(
        version=version,
        protocol_type=draw(names),
        generation=draw(int32),
        protocol=draw(st.none() | names),
        leader=draw(st.none() | names),
        current_state_timestamp=draw(int64) if version >= 2 else -1,
        members=tuple(members),
    )


@given(
    key=st.builds(co.OffsetCommitKey, group=names, topic=names, partition=int32, version=st.sampled_from([0, 1])),
    value=offset_commit_values(),
)
def test_offset_commit_round_trip(key: co.OffsetCommitKey, value: co.OffsetCommitValue) -> None:
    key_bytes = co.encode_key(key)
    assert co.decode_record(key_bytes, co.encode_value(value)) == (key, value)


@given(group=names, value=group_metadata_values())
def test_group_metadata_round_trip(group: str, value: co.GroupMetadataValue) -> None:
    key = co.GroupMetadataKey(group=group)
    assert co.decode_record(co.encode_key(key), co.encode_value(value)) == (key, value)
    assert co.decode_record(co.encode_key(key), None) == (key, None)


@given(
    group=names,
    topic=names,
    partition=int32,
    offset=int64,
    epoch=int32,
    metadata=names,
    ts=int64,
    expire=st.none() | int64,
)
def test_encode_offset_commit_round_trip(
    group: str, topic: str, partition: int, offset: int, epoch: int, metadata: str, ts: int, expire: int | None
) -> None:
    key, value = co.encode_offset_commit(
        group,
        topic,
        partition,
        offset,
        leader_epoch=epoch,
        metadata=metadata,
        commit_timestamp=ts,
        expire_timestamp=expire,
    )
    decoded_key, decoded_value = co.decode_record(key, value)
    assert decoded_key == co.OffsetCommitKey(group=group, topic=topic, partition=partition)
    assert isinstance(decoded_value, co.OffsetCommitValue)
    assert (decoded_value.offset, decoded_value.metadata, decoded_value.commit_timestamp) == (offset, metadata, ts)
    if expire is None:
        assert (decoded_value.version, decoded_value.leader_epoch) == (3, epoch)
    else:
        assert (decoded_value.version, decoded_value.expire_timestamp, decoded_value.leader_epoch) == (1, expire, -1)


@st.composite
def subscriptions(draw: st.DrawFn) -> co.Subscription:
    version = draw(st.integers(0, 3))
    return co.Subscription(
        version=version,
        topics=tuple(draw(st.lists(names, max_size=4))),
        user_data=draw(st.none() | st.binary(max_size=16)),
        owned_partitions=tuple(draw(st.lists(topic_partitions, max_size=3))) if version >= 1 else (),
        generation_id=draw(int32) if version >= 2 else -1,
        rack_id=draw(st.none() | names) if version >= 3 else None,
    )


@given(
    sub=subscriptions(),
    assignment=st.builds(
        co.Assignment,
        assigned_partitions=st.lists(topic_partitions, max_size=3).map(tuple),
        user_data=st.none() | st.binary(max_size=16),
        version=st.integers(0, 3),
    ),
)
def test_consumer_protocol_round_trip(sub: co.Subscription, assignment: co.Assignment) -> None:
    assert co.decode_subscription(co.encode_subscription(sub)) == sub
    assert co.decode_assignment(co.encode_assignment(assignment)) == assignment
