"""KafkaOffsetStore: a cluster's committed offsets (``__consumer_offsets``) as kcli.tools.offsets sees a store.

read/write/live_members/list_groups for committed offsets, topic_partitions/log_offsets for the log ranges.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kio.schema.errors import ErrorCode

from kcli.client.client import KafkaClient, TopicPartition, error_name

FETCH_CHUNK = 256  # groups per pipelined burst of OffsetFetch requests


class KafkaOffsetStore:
    kind = "kafka"

    def __init__(self, client: KafkaClient) -> None:
        self.client = client
        self.location = client.bootstrap

    def list_groups(self) -> list[str]:
        return self.client.list_groups()

    def read(self, groups: Sequence[str], progress: Callable[[int], None] | None = None
             ) -> dict[str, dict[TopicPartition, int]]:
        out: dict[str, dict[TopicPartition, int]] = {}
        for start in range(0, len(groups), FETCH_CHUNK):
            chunk = list(groups[start:start + FETCH_CHUNK])
            out.update(self.client.offset_fetch_many(chunk))
            if progress is not None:
                progress(len(chunk))
        return out

    def write(self, group: str, offsets: dict[TopicPartition, int]) -> dict[TopicPartition, str | None]:
        result = self.client.offset_commit(group, offsets)
        return {tp: None if result.get(tp) == ErrorCode.none else
                f"OffsetCommitResponse: {error_name(result[tp])}" if tp in result else "not in the OffsetCommit response"
                for tp in offsets}

    def live_members(self, groups: Sequence[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for start in range(0, len(groups), FETCH_CHUNK):
            described = self.client.describe_groups(list(groups[start:start + FETCH_CHUNK]))
            for group, d in described.items():
                out[group] = (f"Kafka group state {d.state} with {len(d.members)} member(s)" if d.live else None)
        return out

    def topic_partitions(self, topics: Sequence[str]) -> dict[str, int | None]:
        return self.client.topic_partitions(topics)

    def log_offsets(self, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        return self.client.log_offsets(partitions)

    def close(self) -> None:
        self.client.close()
