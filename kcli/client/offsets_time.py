"""Offsets for a time, online (``kctl offsets for-time TIME --bootstrap-server B TOPIC[:PARTITION]``):
ListOffsets to each partition's leader, as kcat -Q and kafka-get-offsets --time ask it.

Per leader two pipelined ListOffsets requests: the timestamp asked (or EARLIEST -2 / LATEST -1) and LATEST,
so a partition without a record at or after the time (the broker answers offset -1, timestamp -1) also
reports its log end offset: ``seek_offset``, where a consumer reset to that time starts. Errors are per
partition, as messages naming the response, the field and the error code. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client.client import EARLIEST, LATEST, KafkaClient, KafkaRequestError, _build
from kcli.client.topics import cluster_view
from kcli.protocol.api import ApiKey

__all__ = ["EARLIEST", "LATEST", "PartitionOffsetForTime", "offsets_for_time"]


@dataclass(frozen=True)
class PartitionOffsetForTime:
    topic: str
    partition: int
    offset: int  # -1: no record at or after the time (ListOffsets' UNKNOWN_OFFSET)
    timestamp: int  # the found record's timestamp; -1 for EARLIEST/LATEST and when none
    log_end_offset: int | None
    error: str | None = None
    error_code: int | None = None  # the broker's code behind ``error`` (LEADER_NOT_AVAILABLE when none leads)

    @property
    def seek_offset(self) -> int | None:
        return self.offset if self.offset >= 0 else self.log_end_offset

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset,
                "timestamp": self.timestamp, "seek_offset": self.seek_offset if self.error is None else None,
                "log_end_offset": self.log_end_offset, "error": self.error}


def offsets_for_time(client: KafkaClient, targets: Sequence[tuple[str, int | None]] | None, timestamp: int, *,
                     read_committed: bool = False) -> list[PartitionOffsetForTime]:
    """Per partition of ``targets`` ((topic, partition) pairs, partition None: all of the topic's; None: every
    topic), the earliest offset whose timestamp is >= ``timestamp`` (or EARLIEST/LATEST)."""
    topics = None if targets is None else list(dict.fromkeys(t for t, _ in targets))
    view = cluster_view(client, topics)
    out: list[PartitionOffsetForTime] = []
    by_leader: dict[int, list[tuple[str, int]]] = {}
    wanted: list[tuple[str, int]] = []
    for topic, partition in (targets if targets is not None else [(t, None) for t in sorted(view.topics)]):
        described = view.topics.get(topic)
        if described is None or described.error is not None:
            error = described.error if described is not None else f"MetadataResponse: topics[{topic}]: missing"
            out.append(PartitionOffsetForTime(topic, -1 if partition is None else partition, -1, -1, None, error))
            continue
        known = {p.partition: p for p in described.partitions}
        for number in (sorted(known) if partition is None else [partition]):
            info = known.get(number)
            if info is None:
                out.append(PartitionOffsetForTime(topic, number, -1, -1, None,
                                                  f"MetadataResponse: topics[{topic}]: no partition {number}"))
            elif info.leader < 0:
                out.append(PartitionOffsetForTime(topic, number, -1, -1, None, info.error or
                                                  f"MetadataResponse: topics[{topic}].partitions[{number}]: no leader",
                                                  int(ErrorCode.leader_not_available)))
            elif (topic, number) not in wanted:
                wanted.append((topic, number))
                by_leader.setdefault(info.leader, []).append((topic, number))
    answers: dict[tuple[str, int], PartitionOffsetForTime] = {}
    for leader, tps in by_leader.items():
        connection = client._node(leader)
        version, m = connection.module(ApiKey.LIST_OFFSETS)
        label = f"ListOffsetsResponse v{version}"
        bodies = []
        for ts in (timestamp, LATEST):
            per: dict[str, list[Any]] = {}
            for topic, partition in tps:
                per.setdefault(topic, []).append(_build(m, "ListOffsetsPartition", partition_index=partition,
                                                        current_leader_epoch=-1, timestamp=ts, max_num_offsets=1))
            bodies.append(_build(m, "ListOffsetsRequest", replica_id=-1, isolation_level=int(read_committed),
                                 topics=tuple(_build(m, "ListOffsetsTopic", name=t, partitions=tuple(ps))
                                              for t, ps in per.items())))
        found: dict[tuple[str, int], list[Any]] = {}
        for which, body in enumerate(connection.call_many(ApiKey.LIST_OFFSETS, bodies)):
            for t in body.topics:
                for p in t.partitions:
                    slot = found.setdefault((t.name, int(p.partition_index)), [None, None, None, None])
                    if p.error_code != ErrorCode.none:
                        slot[3] = int(p.error_code)
                        slot[2] = KafkaRequestError("", request=label, field=f"topics[{t.name}].partitions"
                                                    f"[{p.partition_index}].error_code", error=p.error_code).describe()
                    elif which == 0:
                        slot[0] = (int(p.offset), int(getattr(p, "timestamp", -1)))
                    else:
                        slot[1] = int(p.offset)
        for tp in tps:
            at_time, end, error, code = found.get(tp) or (None, None, f"{label}: topics[{tp[0]}].partitions"
                                                          f"[{tp[1]}]: no answer", None)
            offset, ts = at_time if at_time is not None else (-1, -1)
            if timestamp in (EARLIEST, LATEST):
                ts = -1
            answers[tp] = PartitionOffsetForTime(tp[0], tp[1], offset, ts, end, error, code)
    out.extend(answers[tp] for tp in wanted)
    return sorted(out, key=lambda o: (o.topic, o.partition))
