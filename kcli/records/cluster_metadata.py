"""KRaft ``__cluster_metadata`` records and the KRaft control records (snapshots included).

A metadata record value is framed by ``AbstractApiMessageSerde``: unsigned varint frame version
(always 1; 0 was KRaft's 2.8 preview and is rejected), unsigned varint record type (the spec's
``apiKey``), unsigned varint version, then the record struct.  Every metadata record is flexible
(KIP-482) from version 0.  KRaft control records (types 2-6 of the control-record key, KIP-595/630/
853) have no frame: their value is the struct read at version 0 whose first field is its own int16
``Version``, and kafka-dump-log renders them as JSON at that embedded version.

The record layouts are transcribed as data from apache/kafka
``metadata/src/main/resources/common/metadata/*.json`` at trunk 1eb7644349c (2024-10-25), plus
``ClearElrRecord`` (28) and ``UnregisterControllerRecord`` (29) from later trunk, and
``clients/src/main/resources/common/message/{LeaderChangeMessage,SnapshotHeaderRecord,
SnapshotFooterRecord,KRaftVersionRecord,VotersRecord}.json`` (Apache-2.0).  Type ids 6, 13 and 16
are unassigned in current Kafka (16 was RemoveFeatureLevelRecord in 3.0-3.2) and decode as unknown,
with the text current Kafka prints for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kcli.errors import CorruptRecordError
from kcli.records.api_message_serde import FRAME_VERSION, read_framed, schemas_by_api_key, write_framed
from kcli.records.schema import MessageSchema, UnknownRecordTypeError, message, upper_snake_case

__all__ = [
    "CONTROL_SCHEMAS",
    "FRAME_VERSION",
    "METADATA_SCHEMAS",
    "RECORD_TYPE_NAMES",
    "ControlRecord",
    "MetadataRecord",
    "UnknownRecordTypeError",
    "decode_control_record",
    "decode_metadata_record",
    "encode_control_record",
    "encode_metadata_record",
    "record_type_id",
]


# fmt: off
_METADATA_SPECS: tuple[dict[str, Any], ...] = (
    # RegisterBrokerRecord.json
    {
        "apiKey": 0,
        "name": "RegisterBrokerRecord",
        "validVersions": "0-3",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "BrokerId", "type": "int32", "versions": "0+"},
            {"name": "IsMigratingZkBroker", "type": "bool", "versions": "2+", "default": "false"},
            {"name": "IncarnationId", "type": "uuid", "versions": "0+"},
            {"name": "BrokerEpoch", "type": "int64", "versions": "0+"},
            {"name": "EndPoints", "type": "[]BrokerEndpoint", "versions": "0+", "fields": [
                {"name": "Name", "type": "string", "versions": "0+"},
                {"name": "Host", "type": "string", "versions": "0+"},
                {"name": "Port", "type": "uint16", "versions": "0+"},
                {"name": "SecurityProtocol", "type": "int16", "versions": "0+"},
            ]},
            {"name": "Features", "type": "[]BrokerFeature", "versions": "0+", "fields": [
                {"name": "Name", "type": "string", "versions": "0+"},
                {"name": "MinSupportedVersion", "type": "int16", "versions": "0+"},
                {"name": "MaxSupportedVersion", "type": "int16", "versions": "0+"},
            ]},
            {"name": "Rack", "type": "string", "versions": "0+", "nullableVersions": "0+"},
            {"name": "Fenced", "type": "bool", "versions": "0+", "default": "true"},
            {"name": "InControlledShutdown", "type": "bool", "versions": "1+", "default": "false"},
            {"name": "LogDirs", "type": "[]uuid", "versions": "3+", "taggedVersions": "3+", "tag": 0},
        ],
    },
    # UnregisterBrokerRecord.json
    {
        "apiKey": 1,
        "name": "UnregisterBrokerRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "BrokerId", "type": "int32", "versions": "0+"},
            {"name": "BrokerEpoch", "type": "int64", "versions": "0+"},
        ],
    },
    # TopicRecord.json
    {
        "apiKey": 2,
        "name": "TopicRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Name", "type": "string", "versions": "0+"},
            {"name": "TopicId", "type": "uuid", "versions": "0+"},
        ],
    },
    # PartitionRecord.json
    {
        "apiKey": 3,
        "name": "PartitionRecord",
        "validVersions": "0-2",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "PartitionId", "type": "int32", "versions": "0+", "default": "-1"},
            {"name": "TopicId", "type": "uuid", "versions": "0+"},
            {"name": "Replicas", "type": "[]int32", "versions": "0+"},
            {"name": "Isr", "type": "[]int32", "versions": "0+"},
            {"name": "RemovingReplicas", "type": "[]int32", "versions": "0+"},
            {"name": "AddingReplicas", "type": "[]int32", "versions": "0+"},
            {"name": "Leader", "type": "int32", "versions": "0+", "default": "-1"},
            {"name": "LeaderRecoveryState", "type": "int8", "versions": "0+", "taggedVersions": "0+", "tag": 0,
             "default": "0"},
            {"name": "LeaderEpoch", "type": "int32", "versions": "0+", "default": "-1"},
            {"name": "PartitionEpoch", "type": "int32", "versions": "0+", "default": "-1"},
            {"name": "Directories", "type": "[]uuid", "versions": "1+"},
            {"name": "EligibleLeaderReplicas", "type": "[]int32", "versions": "2+", "nullableVersions": "2+",
             "taggedVersions": "2+", "tag": 1, "default": "null"},
            {"name": "LastKnownElr", "type": "[]int32", "versions": "2+", "nullableVersions": "2+",
             "taggedVersions": "2+", "tag": 2, "default": "null"},
        ],
    },
    # ConfigRecord.json
    {
        "apiKey": 4,
        "name": "ConfigRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "ResourceType", "type": "int8", "versions": "0+"},
            {"name": "ResourceName", "type": "string", "versions": "0+"},
            {"name": "Name", "type": "string", "versions": "0+"},
            {"name": "Value", "type": "string", "versions": "0+", "nullableVersions": "0+"},
        ],
    },
    # PartitionChangeRecord.json
    {
        "apiKey": 5,
        "name": "PartitionChangeRecord",
        "validVersions": "0-2",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "PartitionId", "type": "int32", "versions": "0+", "default": "-1"},
            {"name": "TopicId", "type": "uuid", "versions": "0+"},
            {"name": "Isr", "type": "[]int32", "versions": "0+", "nullableVersions": "0+", "taggedVersions": "0+",
             "tag": 0, "default": "null"},
            {"name": "Leader", "type": "int32", "versions": "0+", "taggedVersions": "0+", "tag": 1, "default": "-2"},
            {"name": "Replicas", "type": "[]int32", "versions": "0+", "nullableVersions": "0+",
             "taggedVersions": "0+", "tag": 2, "default": "null"},
            {"name": "RemovingReplicas", "type": "[]int32", "versions": "0+", "nullableVersions": "0+",
             "taggedVersions": "0+", "tag": 3, "default": "null"},
            {"name": "AddingReplicas", "type": "[]int32", "versions": "0+", "nullableVersions": "0+",
             "taggedVersions": "0+", "tag": 4, "default": "null"},
            {"name": "LeaderRecoveryState", "type": "int8", "versions": "0+", "taggedVersions": "0+", "tag": 5,
             "default": "-1"},
            {"name": "Directories", "type": "[]uuid", "versions": "1+", "nullableVersions": "1+",
             "taggedVersions": "1+", "tag": 8, "default": "null"},
            {"name": "EligibleLeaderReplicas", "type": "[]int32", "versions": "2+", "nullableVersions": "2+",
             "taggedVersions": "2+", "tag": 6, "default": "null"},
            {"name": "LastKnownElr", "type": "[]int32", "versions": "2+", "nullableVersions": "2+",
             "taggedVersions": "2+", "tag": 7, "default": "null"},
        ],
    },
    # FenceBrokerRecord.json
    {
        "apiKey": 7,
        "name": "FenceBrokerRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Id", "type": "int32", "versions": "0+"},
            {"name": "Epoch", "type": "int64", "versions": "0+"},
        ],
    },
    # UnfenceBrokerRecord.json
    {
        "apiKey": 8,
        "name": "UnfenceBrokerRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Id", "type": "int32", "versions": "0+"},
            {"name": "Epoch", "type": "int64", "versions": "0+"},
        ],
    },
    # RemoveTopicRecord.json
    {
        "apiKey": 9,
        "name": "RemoveTopicRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "TopicId", "type": "uuid", "versions": "0+"},
        ],
    },
    # DelegationTokenRecord.json
    {
        "apiKey": 10,
        "name": "DelegationTokenRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Owner", "type": "string", "versions": "0+"},
            {"name": "Requester", "type": "string", "versions": "0+"},
            {"name": "Renewers", "type": "[]string", "versions": "0+"},
            {"name": "IssueTimestamp", "type": "int64", "versions": "0+"},
            {"name": "MaxTimestamp", "type": "int64", "versions": "0+"},
            {"name": "ExpirationTimestamp", "type": "int64", "versions": "0+"},
            {"name": "TokenId", "type": "string", "versions": "0+"},
        ],
    },
    # UserScramCredentialRecord.json
    {
        "apiKey": 11,
        "name": "UserScramCredentialRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Name", "type": "string", "versions": "0+"},
            {"name": "Mechanism", "type": "int8", "versions": "0+"},
            {"name": "Salt", "type": "bytes", "versions": "0+"},
            {"name": "StoredKey", "type": "bytes", "versions": "0+"},
            {"name": "ServerKey", "type": "bytes", "versions": "0+"},
            {"name": "Iterations", "type": "int32", "versions": "0+"},
        ],
    },
    # FeatureLevelRecord.json
    {
        "apiKey": 12,
        "name": "FeatureLevelRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Name", "type": "string", "versions": "0+"},
            {"name": "FeatureLevel", "type": "int16", "versions": "0+"},
        ],
    },
    # ClientQuotaRecord.json
    {
        "apiKey": 14,
        "name": "ClientQuotaRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Entity", "type": "[]EntityData", "versions": "0+", "fields": [
                {"name": "EntityType", "type": "string", "versions": "0+"},
                {"name": "EntityName", "type": "string", "versions": "0+", "nullableVersions": "0+"},
            ]},
            {"name": "Key", "type": "string", "versions": "0+"},
            {"name": "Value", "type": "float64", "versions": "0+"},
            {"name": "Remove", "type": "bool", "versions": "0+"},
        ],
    },
    # ProducerIdsRecord.json
    {
        "apiKey": 15,
        "name": "ProducerIdsRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "BrokerId", "type": "int32", "versions": "0+"},
            {"name": "BrokerEpoch", "type": "int64", "versions": "0+", "default": "-1"},
            {"name": "NextProducerId", "type": "int64", "versions": "0+"},
        ],
    },
    # BrokerRegistrationChangeRecord.json
    {
        "apiKey": 17,
        "name": "BrokerRegistrationChangeRecord",
        "validVersions": "0-2",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "BrokerId", "type": "int32", "versions": "0+"},
            {"name": "BrokerEpoch", "type": "int64", "versions": "0+"},
            {"name": "Fenced", "type": "int8", "versions": "0+", "taggedVersions": "0+", "tag": 0},
            {"name": "InControlledShutdown", "type": "int8", "versions": "1+", "taggedVersions": "1+", "tag": 1},
            {"name": "LogDirs", "type": "[]uuid", "versions": "2+", "taggedVersions": "2+", "tag": 2},
        ],
    },
    # AccessControlEntryRecord.json
    {
        "apiKey": 18,
        "name": "AccessControlEntryRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Id", "type": "uuid", "versions": "0+"},
            {"name": "ResourceType", "type": "int8", "versions": "0+"},
            {"name": "ResourceName", "type": "string", "versions": "0+"},
            {"name": "PatternType", "type": "int8", "versions": "0+"},
            {"name": "Principal", "type": "string", "versions": "0+"},
            {"name": "Host", "type": "string", "versions": "0+"},
            {"name": "Operation", "type": "int8", "versions": "0+"},
            {"name": "PermissionType", "type": "int8", "versions": "0+"},
        ],
    },
    # RemoveAccessControlEntryRecord.json
    {
        "apiKey": 19,
        "name": "RemoveAccessControlEntryRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Id", "type": "uuid", "versions": "0+"},
        ],
    },
    # NoOpRecord.json
    {
        "apiKey": 20,
        "name": "NoOpRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [],
    },
    # ZkMigrationRecord.json
    {
        "apiKey": 21,
        "name": "ZkMigrationStateRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "ZkMigrationState", "type": "int8", "versions": "0+"},
        ],
    },
    # RemoveUserScramCredentialRecord.json
    {
        "apiKey": 22,
        "name": "RemoveUserScramCredentialRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Name", "type": "string", "versions": "0+"},
            {"name": "Mechanism", "type": "int8", "versions": "0+"},
        ],
    },
    # BeginTransactionRecord.json
    {
        "apiKey": 23,
        "name": "BeginTransactionRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Name", "type": "string", "versions": "0+", "nullableVersions": "0+", "taggedVersions": "0+",
             "tag": 0, "default": "null"},
        ],
    },
    # EndTransactionRecord.json
    {
        "apiKey": 24,
        "name": "EndTransactionRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [],
    },
    # AbortTransactionRecord.json
    {
        "apiKey": 25,
        "name": "AbortTransactionRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Reason", "type": "string", "versions": "0+", "nullableVersions": "0+", "taggedVersions": "0+",
             "tag": 0, "default": "null"},
        ],
    },
    # RemoveDelegationTokenRecord.json
    {
        "apiKey": 26,
        "name": "RemoveDelegationTokenRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "TokenId", "type": "string", "versions": "0+"},
        ],
    },
    # RegisterControllerRecord.json
    {
        "apiKey": 27,
        "name": "RegisterControllerRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "ControllerId", "type": "int32", "versions": "0+"},
            {"name": "IncarnationId", "type": "uuid", "versions": "0+"},
            {"name": "ZkMigrationReady", "type": "bool", "versions": "0+"},
            {"name": "EndPoints", "type": "[]ControllerEndpoint", "versions": "0+", "fields": [
                {"name": "Name", "type": "string", "versions": "0+"},
                {"name": "Host", "type": "string", "versions": "0+"},
                {"name": "Port", "type": "uint16", "versions": "0+"},
                {"name": "SecurityProtocol", "type": "int16", "versions": "0+"},
            ]},
            {"name": "Features", "type": "[]ControllerFeature", "versions": "0+", "fields": [
                {"name": "Name", "type": "string", "versions": "0+"},
                {"name": "MinSupportedVersion", "type": "int16", "versions": "0+"},
                {"name": "MaxSupportedVersion", "type": "int16", "versions": "0+"},
            ]},
        ],
    },
    # ClearElrRecord.json
    {
        "apiKey": 28,
        "name": "ClearElrRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "TopicName", "type": "string", "versions": "0+"},
        ],
    },
    # UnregisterControllerRecord.json
    {
        "apiKey": 29,
        "name": "UnregisterControllerRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "ControllerId", "type": "int32", "versions": "0+"},
        ],
    },

)

# fmt: on
METADATA_SCHEMAS: dict[int, MessageSchema] = schemas_by_api_key(_METADATA_SPECS)

# MetadataRecordType enum constant names, e.g. 2 -> TOPIC_RECORD, 21 -> ZK_MIGRATION_STATE_RECORD.
RECORD_TYPE_NAMES: dict[int, str] = {key: upper_snake_case(s.name) for key, s in METADATA_SCHEMAS.items()}
_TYPE_IDS = {name: key for key, name in RECORD_TYPE_NAMES.items()}

# fmt: off
# clients/src/main/resources/common/message/LeaderChangeMessage.json
_LEADER_CHANGE_MESSAGE_SCHEMA = message({
    "name": "LeaderChangeMessage",
    "validVersions": "0-1",
    "flexibleVersions": "0+",
    "fields": [
        {"name": "Version", "type": "int16", "versions": "0+"},
        {"name": "LeaderId", "type": "int32", "versions": "0+"},
        {"name": "Voters", "type": "[]Voter", "versions": "0+"},
        {"name": "GrantingVoters", "type": "[]Voter", "versions": "0+"},
    ],
    "commonStructs": [
        {"name": "Voter", "versions": "0+", "fields": [
            {"name": "VoterId", "type": "int32", "versions": "0+"},
            {"name": "VoterDirectoryId", "type": "uuid", "versions": "1+"},
        ]},
    ],
})

# clients/src/main/resources/common/message/SnapshotHeaderRecord.json
_SNAPSHOT_HEADER_RECORD_SCHEMA = message({
    "name": "SnapshotHeaderRecord",
    "validVersions": "0",
    "flexibleVersions": "0+",
    "fields": [
        {"name": "Version", "type": "int16", "versions": "0+"},
        {"name": "LastContainedLogTimestamp", "type": "int64", "versions": "0+"},
    ],
})

# clients/src/main/resources/common/message/SnapshotFooterRecord.json
_SNAPSHOT_FOOTER_RECORD_SCHEMA = message({
    "name": "SnapshotFooterRecord",
    "validVersions": "0",
    "flexibleVersions": "0+",
    "fields": [
        {"name": "Version", "type": "int16", "versions": "0+"},
    ],
})

# clients/src/main/resources/common/message/KRaftVersionRecord.json
_KRAFT_VERSION_RECORD_SCHEMA = message({
    "name": "KRaftVersionRecord",
    "validVersions": "0",
    "flexibleVersions": "0+",
    "fields": [
        {"name": "Version", "type": "int16", "versions": "0+"},
        {"name": "KRaftVersion", "type": "int16", "versions": "0+"},
    ],
})

# clients/src/main/resources/common/message/VotersRecord.json
_VOTERS_RECORD_SCHEMA = message({
    "name": "VotersRecord",
    "validVersions": "0",
    "flexibleVersions": "0+",
    "fields": [
        {"name": "Version", "type": "int16", "versions": "0+"},
        {"name": "Voters", "type": "[]Voter", "versions": "0+", "fields": [
            {"name": "VoterId", "type": "int32", "versions": "0+"},
            {"name": "VoterDirectoryId", "type": "uuid", "versions": "0+"},
            {"name": "Endpoints", "type": "[]Endpoint", "versions": "0+", "fields": [
                {"name": "Name", "type": "string", "versions": "0+"},
                {"name": "Host", "type": "string", "versions": "0+"},
                {"name": "Port", "type": "uint16", "versions": "0+"},
            ]},
            {"name": "KRaftVersionFeature", "type": "KRaftVersionFeature", "versions": "0+", "fields": [
                {"name": "MinSupportedVersion", "type": "int16", "versions": "0+"},
                {"name": "MaxSupportedVersion", "type": "int16", "versions": "0+"},
            ]},
        ]},
    ],
})

# fmt: on
# Control record type id -> schema of its value (ControlRecordType 2-6; 0/1 are EndTxnMarkers).
CONTROL_SCHEMAS: dict[int, MessageSchema] = {
    2: _LEADER_CHANGE_MESSAGE_SCHEMA,
    3: _SNAPSHOT_HEADER_RECORD_SCHEMA,
    4: _SNAPSHOT_FOOTER_RECORD_SCHEMA,
    5: _KRAFT_VERSION_RECORD_SCHEMA,
    6: _VOTERS_RECORD_SCHEMA,
}
_CONTROL_NAMES = {2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER", 4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
# ControlRecordUtils reads every KRaft control value at its *_CURRENT_VERSION, which is 0 for all.
_CONTROL_READ_VERSION = 0


@dataclass(frozen=True, slots=True)
class MetadataRecord:
    """One decoded metadata record; ``data`` is keyed by the spec's camelCase names."""

    type_id: int
    type_name: str
    version: int
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """kafka-dump-log's ``--cluster-metadata-decoder`` object: type name, int version, data."""
        return {
            "type": self.type_name,
            "version": self.version,
            "data": METADATA_SCHEMAS[self.type_id].to_json(self.data, self.version),
        }


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """A KRaft control record value; ``version`` is the record's own ``Version`` field."""

    control_type: int
    type_name: str
    version: int
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """``<Message>JsonConverter.write(message, message.version())`` as kafka-dump-log calls it."""
        return CONTROL_SCHEMAS[self.control_type].to_json(self.data, self.version)


def record_type_id(name: str) -> int:
    """``TOPIC_RECORD`` -> 2."""
    try:
        return _TYPE_IDS[name]
    except KeyError:
        raise KeyError(f"unknown metadata record type {name}") from None


def decode_metadata_record(value: bytes | None) -> MetadataRecord:
    """Decode a metadata record value as ``MetadataRecordSerde.read`` does, with Kafka's error texts
    (the unknown-type text carries Java's exception class name, as the dump tool prints it)."""
    type_id, version, data = read_framed(
        value, METADATA_SCHEMAS, what="metadata record",
        unknown_type="org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id {type_id}",
        frame_zero="Could not deserialize metadata record with frame version 0. "
                   "Note that upgrades from the preview release of KRaft in 2.8 to newer versions are not supported.")
    return MetadataRecord(type_id, RECORD_TYPE_NAMES[type_id], version, data)


def encode_metadata_record(type_id: int | str, version: int, data: Mapping[str, Any]) -> bytes:
    """Frame + struct, as ``MetadataRecordSerde.write``; ``type_id`` may be a name like TOPIC_RECORD."""
    key = record_type_id(type_id) if isinstance(type_id, str) else type_id
    return write_framed(METADATA_SCHEMAS, key, version, data)


def decode_control_record(control_type: int, value: bytes | None) -> ControlRecord:
    """Decode a KRaft control record value (types 2-6). Trailing bytes are ignored, as in Kafka."""
    schema = CONTROL_SCHEMAS.get(control_type)
    if schema is None:
        raise UnknownRecordTypeError(
            f"control record type {control_type} has no KRaft schema", record_type=control_type
        )
    if value is None:
        raise CorruptRecordError(f"{_CONTROL_NAMES[control_type]} control record has no value")
    data, _ = schema.decode(value, _CONTROL_READ_VERSION)
    return ControlRecord(control_type, _CONTROL_NAMES[control_type], data["version"], data)


def encode_control_record(control_type: int, data: Mapping[str, Any]) -> bytes:
    """Value bytes of a KRaft control record; ``data["version"]`` is the embedded Version field."""
    return CONTROL_SCHEMAS[control_type].encode(data, _CONTROL_READ_VERSION)
