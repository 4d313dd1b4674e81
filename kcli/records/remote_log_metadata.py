"""``__remote_log_metadata`` records: tiered storage's segment metadata (KIP-405).

Kafka's TopicBasedRemoteLogMetadataManager writes one record per event to the ``__remote_log_metadata``
topic, its value framed by ``RemoteLogMetadataSerde`` (an ``AbstractApiMessageSerde``, like the KRaft
metadata records): unsigned varint frame version 1, unsigned varint record type (the spec's ``apiKey``),
unsigned varint version, then the flexible struct. The record key is null; the partition is
``RemoteLogMetadataTopicPartitioner.metadataPartition`` of the user partition (``metadata_partition``).

The layouts are transcribed as data from apache/kafka 3.7
``storage/src/main/resources/message/RemoteLogSegmentMetadataRecord.json``,
``RemoteLogSegmentMetadataUpdateRecord.json`` and ``RemotePartitionDeleteMetadataRecord.json``
(Apache-2.0), version 0 (Kafka 3.6-3.9 write version 0; later versions add tagged fields only).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from kcli.records.api_message_serde import read_framed, schemas_by_api_key, write_framed
from kcli.records.schema import MessageSchema, kafka_uuid_to_string

__all__ = [
    "REMOTE_LOG_METADATA_SCHEMAS",
    "REMOTE_LOG_METADATA_TOPIC",
    "RemoteLogMetadataRecord",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteState",
    "decode_remote_log_metadata",
    "encode_remote_log_metadata",
    "metadata_partition",
]

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"


class RemoteLogSegmentState(IntEnum):
    """RemoteLogSegmentState.id(): a segment's life in the remote store."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class RemotePartitionDeleteState(IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


_TOPIC_ID_PARTITION = {
    "name": "TopicIdPartition", "type": "TopicIdPartitionEntry", "versions": "0+", "fields": [
        {"name": "Name", "type": "string", "versions": "0+"},
        {"name": "Id", "type": "uuid", "versions": "0+"},
        {"name": "Partition", "type": "int32", "versions": "0+"},
    ]}
_SEGMENT_ID = {
    "name": "RemoteLogSegmentId", "type": "RemoteLogSegmentIdEntry", "versions": "0+", "fields": [
        _TOPIC_ID_PARTITION,
        {"name": "Id", "type": "uuid", "versions": "0+"},
    ]}

# fmt: off
_SPECS: tuple[dict[str, Any], ...] = (
    {
        "apiKey": 0,
        "name": "RemoteLogSegmentMetadataRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            _SEGMENT_ID,
            {"name": "StartOffset", "type": "int64", "versions": "0+"},
            {"name": "EndOffset", "type": "int64", "versions": "0+"},
            {"name": "BrokerId", "type": "int32", "versions": "0+"},
            {"name": "MaxTimestampMs", "type": "int64", "versions": "0+"},
            {"name": "EventTimestampMs", "type": "int64", "versions": "0+"},
            {"name": "SegmentLeaderEpochs", "type": "[]SegmentLeaderEpochEntry", "versions": "0+", "fields": [
                {"name": "LeaderEpoch", "type": "int32", "versions": "0+"},
                {"name": "Offset", "type": "int64", "versions": "0+"},
            ]},
            {"name": "SegmentSizeInBytes", "type": "int32", "versions": "0+"},
            {"name": "CustomMetadata", "type": "bytes", "default": "null", "versions": "0+",
             "nullableVersions": "0+"},
            {"name": "RemoteLogSegmentState", "type": "int8", "versions": "0+"},
            {"name": "TxnIndexEmpty", "type": "bool", "versions": "0+", "taggedVersions": "0+", "tag": 0},
        ],
    },
    {
        "apiKey": 1,
        "name": "RemoteLogSegmentMetadataUpdateRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            _SEGMENT_ID,
            {"name": "BrokerId", "type": "int32", "versions": "0+"},
            {"name": "EventTimestampMs", "type": "int64", "versions": "0+"},
            {"name": "CustomMetadata", "type": "bytes", "default": "null", "versions": "0+",
             "nullableVersions": "0+"},
            {"name": "RemoteLogSegmentState", "type": "int8", "versions": "0+"},
        ],
    },
    {
        "apiKey": 2,
        "name": "RemotePartitionDeleteMetadataRecord",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            _TOPIC_ID_PARTITION,
            {"name": "BrokerId", "type": "int32", "versions": "0+"},
            {"name": "EventTimestampMs", "type": "int64", "versions": "0+"},
            {"name": "RemotePartitionDeleteState", "type": "int8", "versions": "0+"},
        ],
    },
)
# fmt: on

REMOTE_LOG_METADATA_SCHEMAS: dict[int, MessageSchema] = schemas_by_api_key(_SPECS)


@dataclass(frozen=True, slots=True)
class RemoteLogMetadataRecord:
    """One decoded record; ``data`` keyed by the spec's camelCase names (uuids as uuid.UUID)."""

    type_id: int
    type_name: str
    version: int
    data: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type_name, "version": self.version,
                "data": REMOTE_LOG_METADATA_SCHEMAS[self.type_id].to_json(self.data, self.version)}

    def text(self) -> str:
        """The object's toString, as kafka-dump-log --remote-log-metadata-decoder prints it."""
        d = self.data
        if self.type_id == 0:
            return (f"RemoteLogSegmentMetadata{{remoteLogSegmentId={_segment_id_text(d['remoteLogSegmentId'])}, "
                    f"startOffset={d['startOffset']}, endOffset={d['endOffset']}, brokerId={d['brokerId']}, "
                    f"maxTimestampMs={d['maxTimestampMs']}, eventTimestampMs={d['eventTimestampMs']}, "
                    f"segmentLeaderEpochs={_epochs_text(d['segmentLeaderEpochs'])}, "
                    f"segmentSizeInBytes={d['segmentSizeInBytes']}, customMetadata=Optional.empty, "
                    f"state={_state_name(d['remoteLogSegmentState'])}}}")
        if self.type_id == 1:
            return (f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId="
                    f"{_segment_id_text(d['remoteLogSegmentId'])}, customMetadata=Optional.empty, "
                    f"state={_state_name(d['remoteLogSegmentState'])}, eventTimestampMs={d['eventTimestampMs']}, "
                    f"brokerId={d['brokerId']}}}")
        state = d["remotePartitionDeleteState"]
        name = RemotePartitionDeleteState(state).name if state in iter(RemotePartitionDeleteState) else str(state)
        return (f"RemotePartitionDeleteMetadata{{topicPartition={_tip_text(d['topicIdPartition'])}, "
                f"state={name}, eventTimestampMs={d['eventTimestampMs']}, brokerId={d['brokerId']}}}")


def _tip_text(tip: Mapping[str, Any]) -> str:
    return f"{kafka_uuid_to_string(tip['id'])}:{tip['name']}-{tip['partition']}"


def _segment_id_text(segment_id: Mapping[str, Any]) -> str:
    return (f"RemoteLogSegmentId{{topicIdPartition={_tip_text(segment_id['topicIdPartition'])}, "
            f"id={kafka_uuid_to_string(segment_id['id'])}}}")


def _epochs_text(entries: list[Mapping[str, Any]]) -> str:
    return "{" + ", ".join(f"{e['leaderEpoch']}={e['offset']}" for e in entries) + "}"


def _state_name(state: int) -> str:
    try:
        return RemoteLogSegmentState(state).name
    except ValueError:
        return str(state)


def decode_remote_log_metadata(value: bytes | None) -> RemoteLogMetadataRecord:
    """A record value as ``RemoteLogMetadataSerde.deserialize`` reads it; CorruptRecordError with the byte
    position of what is wrong."""
    type_id, version, data = read_framed(value, REMOTE_LOG_METADATA_SCHEMAS, what="remote log metadata record",
                                         unknown_type="Unknown remote log metadata record type {type_id}")
    return RemoteLogMetadataRecord(type_id, REMOTE_LOG_METADATA_SCHEMAS[type_id].name, version, data)


def encode_remote_log_metadata(type_id: int, data: Mapping[str, Any], version: int = 0) -> bytes:
    return write_framed(REMOTE_LOG_METADATA_SCHEMAS, type_id, version, data)


def _java_long_hash(value: int) -> int:
    value &= (1 << 64) - 1
    return _int32(value ^ (value >> 32))


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _murmur2(data: bytes) -> int:
    """Kafka's Utils.murmur2 (the default partitioner's hash), as a signed int32."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    tail = length % 4
    base = length - tail
    if tail == 3:
        h ^= data[base + 2] << 16
    if tail >= 2:
        h ^= data[base + 1] << 8
    if tail >= 1:
        h ^= data[base]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return _int32(h)


def metadata_partition(topic_id: uuid.UUID, partition: int, partitions: int) -> int:
    """RemoteLogMetadataTopicPartitioner.metadataPartition: murmur2 of the big-endian int
    ``Objects.hash(topicId.leastSignificantBits, topicId.mostSignificantBits, partition)``."""
    lsb, msb = topic_id.int & ((1 << 64) - 1), topic_id.int >> 64
    h = 1
    for element in (_java_long_hash(lsb), _java_long_hash(msb), partition):
        h = _int32(31 * h + element)
    return (_murmur2((h & 0xFFFFFFFF).to_bytes(4, "big")) & 0x7FFFFFFF) % partitions
