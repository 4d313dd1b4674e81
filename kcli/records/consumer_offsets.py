"""``__consumer_offsets`` records: offset commits and classic group metadata, plus the consumer
protocol's Subscription/Assignment that group members carry.

Layouts are Kafka's JSON message specs transcribed as data (Apache-2.0) and run through the generic
codec in :mod:`kcli.records.schema`.  Key bytes = int16 key version (doubling as record type,
KIP-915) + key struct; value bytes = int16 value version + value struct; a null value is a
tombstone.  Record types 3-8 (KIP-848 consumer groups) decode as dicts through :data:`SERDE` only;
9+ (share groups, still changing upstream) are unknown here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kcli.errors import CorruptRecordError
from kcli.records.schema import CoordinatorSerde, MessageSchema, Reader, UnknownRecordTypeError, message, snake_case

__all__ = [
    "ASSIGNMENT_SCHEMA",
    "CONSUMER_PROTOCOL_TYPE",
    "GROUP_METADATA_KEY_SCHEMA",
    "GROUP_METADATA_VALUE_SCHEMA",
    "OFFSET_COMMIT_KEY_SCHEMA",
    "OFFSET_COMMIT_VALUE_SCHEMA",
    "RECORD_TYPE_NAMES",
    "SERDE",
    "SUBSCRIPTION_SCHEMA",
    "Assignment",
    "GroupMetadataKey",
    "GroupMetadataValue",
    "MemberMetadata",
    "OffsetCommitKey",
    "OffsetCommitValue",
    "Subscription",
    "TopicPartitions",
    "UnknownRecordTypeError",
    "decode_assignment",
    "decode_key",
    "decode_record",
    "decode_subscription",
    "decode_value",
    "encode_assignment",
    "encode_group_metadata",
    "encode_group_metadata_tombstone",
    "encode_key",
    "encode_offset_commit",
    "encode_offset_commit_tombstone",
    "encode_subscription",
    "encode_value",
    "java_string_hashcode",
    "partition_for_group",
]

CONSUMER_PROTOCOL_TYPE = "consumer"  # ConsumerProtocol.PROTOCOL_TYPE
DEFAULT_OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions

# fmt: off
# group-coordinator/src/main/resources/common/message/OffsetCommitKey.json
OFFSET_COMMIT_KEY_SCHEMA = message({
    "name": "OffsetCommitKey",
    "validVersions": "0-1",
    "flexibleVersions": "none",
    "fields": [
        {"name": "group", "type": "string", "versions": "0-1"},
        {"name": "topic", "type": "string", "versions": "0-1"},
        {"name": "partition", "type": "int32", "versions": "0-1"},
    ],
})

# group-coordinator/src/main/resources/common/message/OffsetCommitValue.json
OFFSET_COMMIT_VALUE_SCHEMA = message({
    "name": "OffsetCommitValue",
    "validVersions": "0-4",
    "flexibleVersions": "4+",  # KIP-915: v4 is flexible so later fields can be tagged
    "fields": [
        {"name": "offset", "type": "int64", "versions": "0+"},
        {"name": "leaderEpoch", "type": "int32", "versions": "3+", "default": -1, "ignorable": True},
        {"name": "metadata", "type": "string", "versions": "0+"},
        {"name": "commitTimestamp", "type": "int64", "versions": "0+"},
        {"name": "expireTimestamp", "type": "int64", "versions": "1", "default": -1, "ignorable": True},
    ],
})

# group-coordinator/src/main/resources/common/message/GroupMetadataKey.json
GROUP_METADATA_KEY_SCHEMA = message({
    "name": "GroupMetadataKey",
    "validVersions": "2",
    "flexibleVersions": "none",
    "fields": [{"name": "group", "type": "string", "versions": "2"}],
})

# group-coordinator/src/main/resources/common/message/GroupMetadataValue.json
GROUP_METADATA_VALUE_SCHEMA = message({
    "name": "GroupMetadataValue",
    "validVersions": "0-4",
    "flexibleVersions": "4+",
    "fields": [
        {"name": "protocolType", "versions": "0+", "type": "string"},
        {"name": "generation", "versions": "0+", "type": "int32"},
        {"name": "protocol", "versions": "0+", "type": "string", "nullableVersions": "0+"},
        {"name": "leader", "versions": "0+", "type": "string", "nullableVersions": "0+"},
        {"name": "currentStateTimestamp", "versions": "2+", "type": "int64", "default": -1, "ignorable": True},
        {"name": "members", "versions": "0+", "type": "[]MemberMetadata"},
    ],
    "commonStructs": [{
        "name": "MemberMetadata",
        "versions": "0+",
        "fields": [
            {"name": "memberId", "versions": "0+", "type": "string"},
            {"name": "groupInstanceId", "versions": "3+", "type": "string", "default": "null",
             "nullableVersions": "3+", "ignorable": True},  # KIP-345 static membership
            {"name": "clientId", "versions": "0+", "type": "string"},
            {"name": "clientHost", "versions": "0+", "type": "string"},
            {"name": "rebalanceTimeout", "versions": "1+", "type": "int32", "default": -1, "ignorable": True},
            {"name": "sessionTimeout", "versions": "0+", "type": "int32"},
            {"name": "subscription", "versions": "0+", "type": "bytes"},
            {"name": "assignment", "versions": "0+", "type": "bytes"},
        ],
    }],
})

# clients/src/main/resources/common/message/ConsumerProtocolSubscription.json
SUBSCRIPTION_SCHEMA = message({
    "name": "ConsumerProtocolSubscription",
    "validVersions": "0-3",
    "flexibleVersions": "none",
    "fields": [
        {"name": "Topics", "type": "[]string", "versions": "0+"},
        {"name": "UserData", "type": "bytes", "versions": "0+", "nullableVersions": "0+", "default": "null"},
        {"name": "OwnedPartitions", "type": "[]TopicPartition", "versions": "1+", "ignorable": True,  # KIP-429
         "fields": [
             {"name": "Topic", "type": "string", "versions": "1+"},
             {"name": "Partitions", "type": "[]int32", "versions": "1+"},
         ]},
        {"name": "GenerationId", "type": "int32", "versions": "2+", "default": "-1", "ignorable": True},  # KIP-792
        {"name": "RackId", "type": "string", "versions": "3+", "nullableVersions": "3+", "default": "null",
         "ignorable": True},  # KIP-881
    ],
})

# clients/src/main/resources/common/message/ConsumerProtocolAssignment.json
ASSIGNMENT_SCHEMA = message({
    "name": "ConsumerProtocolAssignment",
    "validVersions": "0-3",
    "flexibleVersions": "none",
    "fields": [
        {"name": "AssignedPartitions", "type": "[]TopicPartition", "versions": "0+", "fields": [
            {"name": "Topic", "type": "string", "versions": "0+"},
            {"name": "Partitions", "type": "[]int32", "versions": "0+"},
        ]},
        {"name": "UserData", "type": "bytes", "versions": "0+", "nullableVersions": "0+", "default": "null"},
    ],
})

# KIP-848 consumer group records (types 3-8), group-coordinator/src/main/resources/common/message/
# ConsumerGroup*{Key,Value}.json at apache/kafka trunk 1eb7644349c (2024-10). Decoded as dicts only.
_KIP848_SPECS: tuple[tuple[int, dict[str, Any], dict[str, Any]], ...] = (
    (
        3,
        {
            "name": "ConsumerGroupMetadataKey",
            "validVersions": "3",
            "flexibleVersions": "none",
            "fields": [
                {"name": "GroupId", "type": "string", "versions": "3"},
            ],
        },
        {
            "name": "ConsumerGroupMetadataValue",
            "validVersions": "0",
            "flexibleVersions": "0+",
            "fields": [
                {"name": "Epoch", "type": "int32", "versions": "0+"},
            ],
        },
    ),
    (
        4,
        {
            "name": "ConsumerGroupPartitionMetadataKey",
            "validVersions": "4",
            "flexibleVersions": "none",
            "fields": [
                {"name": "GroupId", "type": "string", "versions": "4"},
            ],
        },
        {
            "name": "ConsumerGroupPartitionMetadataValue",
            "validVersions": "0",
            "flexibleVersions": "0+",
            "fields": [
                {"name": "Topics", "type": "[]TopicMetadata", "versions": "0+", "fields": [
                    {"name": "TopicId", "type": "uuid", "versions": "0+"},
                    {"name": "TopicName", "type": "string", "versions": "0+"},
                    {"name": "NumPartitions", "type": "int32", "versions": "0+"},
                    {"name": "PartitionMetadata", "type": "[]PartitionMetadata", "versions": "0+", "fields": [
                        {"name": "Partition", "type": "int32", "versions": "0+"},
                        {"name": "Racks", "type": "[]string", "versions": "0+"},
                    ]},
                ]},
            ],
        },
    ),
    (
        5,
        {
            "name": "ConsumerGroupMemberMetadataKey",
            "validVersions": "5",
            "flexibleVersions": "none",
            "fields": [
                {"name": "GroupId", "type": "string", "versions": "5"},
                {"name": "MemberId", "type": "string", "versions": "5"},
            ],
        },
        {
            "name": "ConsumerGroupMemberMetadataValue",
            "validVersions": "0",
            "flexibleVersions": "0+",
            "fields": [
                {"name": "InstanceId", "type": "string", "versions": "0+", "nullableVersions": "0+"},
                {"name": "RackId", "type": "string", "versions": "0+", "nullableVersions": "0+"},
                {"name": "ClientId", "type": "string", "versions": "0+"},
                {"name": "ClientHost", "type": "string", "versions": "0+"},
                {"name": "SubscribedTopicNames", "type": "[]string", "versions": "0+"},
                {"name": "SubscribedTopicRegex", "type": "string", "versions": "0+", "nullableVersions": "0+"},
                {"name": "RebalanceTimeoutMs", "type": "int32", "versions": "0+", "default": -1},
                {"name": "ServerAssignor", "type": "string", "versions": "0+", "nullableVersions": "0+"},
                {"name": "ClassicMemberMetadata", "type": "ClassicMemberMetadata", "versions": "0+",
                 "nullableVersions": "0+", "taggedVersions": "0+", "tag": 0, "default": "null", "fields": [
                    {"name": "SessionTimeoutMs", "type": "int32", "versions": "0+"},
                    {"name": "SupportedProtocols", "type": "[]ClassicProtocol", "versions": "0+", "fields": [
                        {"name": "Name", "type": "string", "versions": "0+"},
                        {"name": "Metadata", "type": "bytes", "versions": "0+"},
                    ]},
                ]},
            ],
        },
    ),
    (
        6,
        {
            "name": "ConsumerGroupTargetAssignmentMetadataKey",
            "validVersions": "6",
            "flexibleVersions": "none",
            "fields": [
                {"name": "GroupId", "type": "string", "versions": "6"},
            ],
        },
        {
            "name": "ConsumerGroupTargetAssignmentMetadataValue",
            "validVersions": "0",
            "flexibleVersions": "0+",
            "fields": [
                {"name": "AssignmentEpoch", "type": "int32", "versions": "0+"},
            ],
        },
    ),
    (
        7,
        {
            "name": "ConsumerGroupTargetAssignmentMemberKey",
            "validVersions": "7",
            "flexibleVersions": "none",
            "fields": [
                {"name": "GroupId", "type": "string", "versions": "7"},
                {"name": "MemberId", "type": "string", "versions": "7"},
            ],
        },
        {
            "name": "ConsumerGroupTargetAssignmentMemberValue",
            "validVersions": "0",
            "flexibleVersions": "0+",
            "fields": [
                {"name": "TopicPartitions", "type": "[]TopicPartition", "versions": "0+", "fields": [
                    {"name": "TopicId", "type": "uuid", "versions": "0+"},
                    {"name": "Partitions", "type": "[]int32", "versions": "0+"},
                ]},
            ],
        },
    ),
    (
        8,
        {
            "name": "ConsumerGroupCurrentMemberAssignmentKey",
            "validVersions": "8",
            "flexibleVersions": "none",
            "fields": [
                {"name": "GroupId", "type": "string", "versions": "8"},
                {"name": "MemberId", "type": "string", "versions": "8"},
            ],
        },
        {
            "name": "ConsumerGroupCurrentMemberAssignmentValue",
            "validVersions": "0",
            "flexibleVersions": "0+",
            "fields": [
                {"name": "MemberEpoch", "type": "int32", "versions": "0+"},
                {"name": "PreviousMemberEpoch", "type": "int32", "versions": "0+"},
                {"name": "State", "type": "int8", "versions": "0+"},
                {"name": "AssignedPartitions", "type": "[]TopicPartitions", "versions": "0+"},
                {"name": "PartitionsPendingRevocation", "type": "[]TopicPartitions", "versions": "0+"},
            ],
            "commonStructs": [
                {"name": "TopicPartitions", "versions": "0+", "fields": [
                    {"name": "TopicId", "type": "uuid", "versions": "0+"},
                    {"name": "Partitions", "type": "[]int32", "versions": "0+"},
                ]},
            ],
        },
    ),
)

# fmt: on
_MEMBER_FIELDS = GROUP_METADATA_VALUE_SCHEMA.struct.nested("members").fields

# Record type (key version) -> key/value schemas, as GroupCoordinatorRecordSerde maps them.
SERDE = CoordinatorSerde(
    keys={
        0: OFFSET_COMMIT_KEY_SCHEMA,
        1: OFFSET_COMMIT_KEY_SCHEMA,
        2: GROUP_METADATA_KEY_SCHEMA,
        **{record_type: message(key) for record_type, key, _ in _KIP848_SPECS},
    },
    values={
        0: OFFSET_COMMIT_VALUE_SCHEMA,
        1: OFFSET_COMMIT_VALUE_SCHEMA,
        2: GROUP_METADATA_VALUE_SCHEMA,
        **{record_type: message(value) for record_type, _, value in _KIP848_SPECS},
    },
)

# Kafka 4.x CoordinatorRecordType names for the group coordinator's record types (key versions).
RECORD_TYPE_NAMES: dict[int, str] = {
    0: "LEGACY_OFFSET_COMMIT",
    1: "OFFSET_COMMIT",
    2: "GROUP_METADATA",
    3: "CONSUMER_GROUP_METADATA",
    4: "CONSUMER_GROUP_PARTITION_METADATA",
    5: "CONSUMER_GROUP_MEMBER_METADATA",
    6: "CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA",
    7: "CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER",
    8: "CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT",
}


# ---------------------------------------------------------------------------------------------
# Typed views (field names are the snake_case of the spec names; layouts stay in the specs above)


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int
    version: int = 1  # 0 was written only by 0.8.2


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataKey:
    group: str
    version: int = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class OffsetCommitValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = 0
    leader_epoch: int = -1  # v3+ (KIP-320)
    expire_timestamp: int = -1  # v1 only
    version: int = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None
    rebalance_timeout: int = -1  # absent in v0, where Kafka uses the session timeout


@dataclass(frozen=True, slots=True, kw_only=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    members: tuple[MemberMetadata, ...] = ()
    current_state_timestamp: int = -1
    version: int = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicPartitions:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartitions, ...] = ()
    generation_id: int = -1
    rack_id: str | None = None
    version: int = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class Assignment:
    assigned_partitions: tuple[TopicPartitions, ...]
    user_data: bytes | None = None
    version: int = 3


Key = OffsetCommitKey | GroupMetadataKey
Value = OffsetCommitValue | GroupMetadataValue


def _kwargs(data: dict[str, Any]) -> dict[str, Any]:
    return {snake_case(name): value for name, value in data.items()}


def _fields(obj: Any, schema_fields: Iterable[Any]) -> dict[str, Any]:
    return {f.name: getattr(obj, snake_case(f.name)) for f in schema_fields}


def _topic_partitions(items: Iterable[dict[str, Any]]) -> tuple[TopicPartitions, ...]:
    return tuple(TopicPartitions(topic=i["topic"], partitions=tuple(i["partitions"])) for i in items)


def _tp_fields(items: Iterable[TopicPartitions]) -> list[dict[str, Any]]:
    return [{"topic": tp.topic, "partitions": list(tp.partitions)} for tp in items]


# ---------------------------------------------------------------------------------------------
# Decoding


def decode_key(key: bytes) -> Key:
    """Decode the key of a classic record (types 0-2); UnknownRecordTypeError for any other type."""
    record_type, data = SERDE.decode_key(key)
    if record_type > 2:
        raise UnknownRecordTypeError(
            f"record type {record_type} ({RECORD_TYPE_NAMES.get(record_type, 'unknown')}) has no typed view",
            record_type=record_type,
            position=0,
        )
    if record_type == 2:
        return GroupMetadataKey(group=data["group"])
    return OffsetCommitKey(version=record_type, **data)


def decode_value(record_type: int, value: bytes | None) -> Value | None:
    """Decode the value of a record whose key had ``record_type`` (0-2); None for a tombstone."""
    if not 0 <= record_type <= 2:
        raise UnknownRecordTypeError(f"record type {record_type} has no typed view", record_type=record_type)
    version, data = SERDE.decode_value(record_type, value)
    if data is None:
        return None
    assert version is not None
    if record_type == 2:
        members = tuple(MemberMetadata(**_kwargs(m)) for m in data.pop("members"))
        return GroupMetadataValue(version=version, members=members, **_kwargs(data))
    return OffsetCommitValue(version=version, **_kwargs(data))


def decode_record(key: bytes | None, value: bytes | None) -> tuple[Key, Value | None]:
    if key is None:
        raise CorruptRecordError("__consumer_offsets record has no key")
    decoded_key = decode_key(key)
    return decoded_key, decode_value(decoded_key.version, value)


def _embedded_version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise CorruptRecordError(f"{what} is shorter than its int16 version", position=0)
    version = int.from_bytes(data[:2], "big", signed=True)
    if version < 0:  # ConsumerProtocol.deserializeVersion
        raise CorruptRecordError(f"Unsupported {what} version: {version}", position=0)
    return version


def _decode_embedded(schema: MessageSchema, data: bytes, what: str) -> tuple[int, dict[str, Any]]:
    version = _embedded_version(data, what)
    # Later versions parse with the newest layout known: the consumer protocol only ever appends fields.
    return version, schema.read(Reader(data, 2), version)


def decode_subscription(data: bytes) -> Subscription:
    """ConsumerProtocol subscription bytes (a member's ``subscription`` in GroupMetadataValue)."""
    version, v = _decode_embedded(SUBSCRIPTION_SCHEMA, data, "subscription")
    return Subscription(
        version=version,
        topics=tuple(v["topics"]),
        user_data=v["userData"],
        owned_partitions=_topic_partitions(v["ownedPartitions"]),
        generation_id=v["generationId"],
        rack_id=v["rackId"],
    )


def decode_assignment(data: bytes) -> Assignment:
    version, v = _decode_embedded(ASSIGNMENT_SCHEMA, data, "assignment")
    return Assignment(
        version=version, assigned_partitions=_topic_partitions(v["assignedPartitions"]), user_data=v["userData"]
    )


# ---------------------------------------------------------------------------------------------
# Encoding


def encode_key(key: Key) -> bytes:
    if isinstance(key, GroupMetadataKey):
        return SERDE.encode_key(2, {"group": key.group})
    return SERDE.encode_key(key.version, {"group": key.group, "topic": key.topic, "partition": key.partition})


def encode_value(value: Value | None) -> bytes | None:
    """Value bytes at ``value.version``; None (tombstone) stays None."""
    if value is None:
        return None
    if isinstance(value, GroupMetadataValue):
        data = _fields(value, GROUP_METADATA_VALUE_SCHEMA.struct.fields)
        data["members"] = [_fields(m, _MEMBER_FIELDS) for m in value.members]
        return SERDE.encode_value(2, value.version, data)
    return SERDE.encode_value(1, value.version, _fields(value, OFFSET_COMMIT_VALUE_SCHEMA.struct.fields))


def encode_subscription(sub: Subscription) -> bytes:
    data = {
        "topics": list(sub.topics),
        "userData": sub.user_data,
        "ownedPartitions": _tp_fields(sub.owned_partitions),
        "generationId": sub.generation_id,
        "rackId": sub.rack_id,
    }
    return sub.version.to_bytes(2, "big") + SUBSCRIPTION_SCHEMA.encode(data, sub.version)


def encode_assignment(assignment: Assignment) -> bytes:
    data = {"assignedPartitions": _tp_fields(assignment.assigned_partitions), "userData": assignment.user_data}
    return assignment.version.to_bytes(2, "big") + ASSIGNMENT_SCHEMA.encode(data, assignment.version)


def encode_offset_commit(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    *,
    leader_epoch: int = -1,
    metadata: str = "",
    commit_timestamp: int,
    expire_timestamp: int | None = None,
) -> tuple[bytes, bytes]:
    """Key v1 + value v3, or value v1 when an explicit expire timestamp is given (which, as in
    Kafka's GroupCoordinatorRecordHelpers, drops the leader epoch: v1 cannot hold it)."""
    key = encode_key(OffsetCommitKey(group=group, topic=topic, partition=partition))
    value = OffsetCommitValue(
        version=3 if expire_timestamp is None else 1,
        offset=offset,
        leader_epoch=leader_epoch,
        metadata=metadata,
        commit_timestamp=commit_timestamp,
        expire_timestamp=-1 if expire_timestamp is None else expire_timestamp,
    )
    encoded = encode_value(value)
    assert encoded is not None
    return key, encoded


def encode_offset_commit_tombstone(group: str, topic: str, partition: int) -> tuple[bytes, None]:
    return encode_key(OffsetCommitKey(group=group, topic=topic, partition=partition)), None


def encode_group_metadata(
    group: str,
    *,
    protocol_type: str,
    generation: int,
    protocol: str | None,
    leader: str | None,
    current_state_timestamp: int,
    members: Iterable[MemberMetadata] = (),
) -> tuple[bytes, bytes]:
    """Key v2 + value v3 (what brokers with IBP >= 2.3 write)."""
    value = GroupMetadataValue(
        version=3,
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_timestamp=current_state_timestamp,
        members=tuple(members),
    )
    encoded = encode_value(value)
    assert encoded is not None
    return encode_key(GroupMetadataKey(group=group)), encoded


def encode_group_metadata_tombstone(group: str) -> tuple[bytes, None]:
    return encode_key(GroupMetadataKey(group=group)), None


# ---------------------------------------------------------------------------------------------
# Partitioning


def java_string_hashcode(text: str) -> int:
    """Java ``String.hashCode``: 31*h + c over UTF-16 code units with int32 wrap-around."""
    units = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def partition_for_group(group_id: str, num_partitions: int = DEFAULT_OFFSETS_PARTITIONS) -> int:
    """``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``; Utils.abs(MIN_VALUE) is 0."""
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, got {num_partitions}")
    h = java_string_hashcode(group_id)
    return (0 if h == -0x8000_0000 else abs(h)) % num_partitions
