"""Remote (tiered storage, KIP-405) sizes of a cluster's partitions, read from ``__remote_log_metadata``.

The metadata topic holds every remote segment's life in Kafka's own records (kcli.records.remote_log_metadata),
so reading it from the beginning to its high watermark and replaying the records gives each user partition's
finished copies: what Kafka's RemotePartitionMetadataStore keeps. This needs no metrics endpoint and works
against real Kafka (3.6+ with TopicBasedRemoteLogMetadataManager) too. It costs one read of the metadata
topic, hence an option of the commands that show it. Nothing here prints.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kcli.client.client import KafkaClient
from kcli.errors import CorruptRecordError
from kcli.records.remote_log_metadata import (
    REMOTE_LOG_METADATA_TOPIC,
    RemoteLogMetadataRecord,
    RemoteLogSegmentState,
    decode_remote_log_metadata,
)

__all__ = ["RemotePartitionSize", "RemoteSizes", "read_remote_sizes", "remote_sizes_from_records"]

_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


@dataclass
class RemotePartitionSize:
    """One user partition's segments whose copy finished and whose deletion has not (Kafka's
    RemoteLogSizeBytes and RemoteLogMetadataCount of the partition)."""

    topic: str
    partition: int
    segments: int = 0
    size: int = 0
    start_offset: int = -1  # the first remote offset (-1: nothing remote)
    end_offset: int = -1  # the last remote offset

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "remoteSegments": self.segments,
                "remoteSize": self.size, "remoteStartOffset": self.start_offset,
                "remoteEndOffset": self.end_offset}


@dataclass
class RemoteSizes:
    """Per (topic, partition); ``available`` is False when the cluster has no ``__remote_log_metadata``."""

    available: bool
    partitions: dict[tuple[str, int], RemotePartitionSize] = field(default_factory=dict)
    undecodable: int = 0  # records that are not Kafka's remote log metadata (skipped)

    def get(self, topic: str, partition: int) -> RemotePartitionSize | None:
        return self.partitions.get((topic, partition))

    def topic_size(self, topic: str) -> int:
        return sum(p.size for (t, _), p in self.partitions.items() if t == topic)


def remote_sizes_from_records(records: Iterable[RemoteLogMetadataRecord]) -> RemoteSizes:
    """Replay metadata records in order (per metadata partition is enough: a user partition's records all go to
    one) into each partition's finished, undeleted segments."""
    # (topic, partition) -> segment id -> [state, start, end, size]
    segments: dict[tuple[str, int], dict[uuid.UUID, list[Any]]] = {}
    for record in records:
        d = record.data
        if record.type_id == 2:  # RemotePartitionDeleteMetadata: the partition's remote data is going
            tip = d["topicIdPartition"]
            segments.pop((tip["name"], tip["partition"]), None)
            continue
        sid = d["remoteLogSegmentId"]
        tip = sid["topicIdPartition"]
        per = segments.setdefault((tip["name"], tip["partition"]), {})
        if record.type_id == 0:
            per[sid["id"]] = [d["remoteLogSegmentState"], d["startOffset"], d["endOffset"], d["segmentSizeInBytes"]]
            continue
        entry = per.get(sid["id"])
        if entry is None:
            continue  # an update of a segment never seen: Kafka skips it too
        entry[0] = d["remoteLogSegmentState"]
        if entry[0] == _DELETE_FINISHED:
            del per[sid["id"]]
    out = RemoteSizes(True)
    for (topic, partition), per in sorted(segments.items()):
        finished = [e for e in per.values() if e[0] == _FINISHED]
        size = RemotePartitionSize(topic, partition)
        if finished:
            size.segments = len(finished)
            size.size = sum(e[3] for e in finished)
            size.start_offset = min(e[1] for e in finished)
            size.end_offset = max(e[2] for e in finished)
        out.partitions[(topic, partition)] = size
    return out


def read_remote_sizes(client: KafkaClient, topics: Iterable[str] | None = None) -> RemoteSizes:
    """Read ``__remote_log_metadata`` from the beginning to its high watermark and sum each partition's finished
    copies (of ``topics`` only when given). A cluster without the topic answers ``available=False``."""
    from kcli.client.consume import ConsumeOptions, Consumer, EndOfPartition, Fetched

    known = client.metadata([REMOTE_LOG_METADATA_TOPIC])
    meta = known.topics.get(REMOTE_LOG_METADATA_TOPIC)
    if meta is None or int(getattr(meta, "error", 0) or 0) != 0 or not meta.partitions:
        return RemoteSizes(False)
    consumer = Consumer(client, REMOTE_LOG_METADATA_TOPIC, ConsumeOptions(max_wait_ms=0))
    records: list[RemoteLogMetadataRecord] = []
    undecodable = 0
    ended: set[int] = set()
    wanted = len(meta.partitions)
    for item in consumer.items():
        if isinstance(item, Fetched):
            for record in item.records:
                if record.value is None:
                    continue
                try:
                    records.append(decode_remote_log_metadata(record.value))
                except CorruptRecordError:
                    undecodable += 1
        elif isinstance(item, EndOfPartition):
            ended.add(item.partition)
            if len(ended) >= wanted:
                break
    sizes = remote_sizes_from_records(records)
    sizes.undecodable = undecodable
    if topics is not None:
        keep = set(topics)
        sizes.partitions = {tp: p for tp, p in sizes.partitions.items() if tp[0] in keep}
    return sizes
