"""Consumer groups of a stopped broker, from its log dir: ``__consumer_offsets`` replayed as the group coordinator
loads it (group metadata, committed offsets, tombstones; aborted transactional commits skipped) and each partition's
log range from its segments. Results are kcli.records.groups' GroupDetails, the model the online describe fills.
Reads only; nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcli.errors import InputError, KcliError
from kcli.records.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    partition_for_group,
)
from kcli.records.groups import GroupDetails, MemberInfo, Offsets, TopicPartition, decode_member_assignment, lag_rows
from kcli.storage.checkpoint import OffsetCheckpointFile
from kcli.storage.files import RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT, parse_partition_dir_name
from kcli.storage.offsets_topic import iter_offsets_topic
from kcli.tools.inputs import log_dir_partitions
from kcli.tools.offsets import OFFSETS_TOPIC, log_range


@dataclass
class StoredGroup:
    """What ``__consumer_offsets`` holds for one group at the end of the log."""

    metadata: GroupMetadataValue | None = None
    deleted: bool = False  # the last GroupMetadata record was a tombstone
    offsets: Offsets = field(default_factory=dict)
    partitions: set[int] = field(default_factory=set)  # the __consumer_offsets partitions holding its records


@dataclass
class LogDirGroups:
    """Every group of a log dir's ``__consumer_offsets`` partitions."""

    log_dir: str
    offsets_topic_partitions: int | None  # offsets.topic.num.partitions as far as the log dir tells
    groups: dict[str, GroupDetails]
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"log_dir": self.log_dir, "offsets_topic_partitions": self.offsets_topic_partitions,
                "groups": [g.to_json() for g in self.groups.values()], "notes": self.notes}


def offsets_topic_partitions(log_dir: Path, dirs: dict[TopicPartition, Path]) -> int | None:
    """The partition count of ``__consumer_offsets``: the highest index among its directories and the log dir's
    checkpoints (which list every partition the broker hosted, also those whose directory was not kept), + 1."""
    indexes = {p for t, p in dirs if t == OFFSETS_TOPIC}
    for name in (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT):
        path = log_dir / name
        if path.is_file():
            try:
                indexes |= {p for t, p in OffsetCheckpointFile(path).read_offsets() if t == OFFSETS_TOPIC}
            except KcliError:
                continue
    return max(indexes) + 1 if indexes else None


def replay_groups(partition_dir: Path, stored: dict[str, StoredGroup], notes: list[str]) -> None:
    """Fold one ``__consumer_offsets`` partition into ``stored``, record by record in log order."""
    index = parse_partition_dir_name(partition_dir.name)[1]  # type: ignore[index]

    def undecodable(offset: int, exc: KcliError) -> None:
        notes.append(f"{partition_dir.name} offset {offset}: skipped: {exc.reason}")

    # checked: a damaged batch raises CorruptBatchError (file, byte position) instead of feeding the replay
    for _offset, key, value in iter_offsets_topic(partition_dir, undecodable, checked=True):
        group = stored.setdefault(key.group, StoredGroup())
        group.partitions.add(index)
        if isinstance(key, OffsetCommitKey):
            if isinstance(value, OffsetCommitValue):
                group.offsets[(key.topic, key.partition)] = value.offset
            else:
                group.offsets.pop((key.topic, key.partition), None)
        elif isinstance(key, GroupMetadataKey):
            group.metadata = value if isinstance(value, GroupMetadataValue) else None
            group.deleted = value is None


def _details(name: str, stored: StoredGroup, count: int | None,
             ranges: dict[TopicPartition, tuple[int, int]]) -> GroupDetails:
    meta = stored.metadata
    protocol_type = meta.protocol_type if meta is not None else ""
    members = []
    for m in meta.members if meta is not None else ():
        assignment, why = decode_member_assignment(protocol_type, m.assignment)
        members.append(MemberInfo(m.member_id, m.group_instance_id, m.client_id, m.client_host, assignment, why))
    # Kafka's GroupMetadata.loadGroup: Empty without members, else Stable; a group with only standalone commits
    # is Empty; a deleted group with no offsets left is Dead.
    state = "Stable" if members else ("Dead" if stored.deleted and not stored.offsets else "Empty")
    holder = sorted(stored.partitions)
    details = GroupDetails(name, state, protocol_type, (meta.protocol or "") if meta is not None else "", None, None,
                           holder[-1] if holder else (partition_for_group(name, count) if count else None), count,
                           members,
                           lag_rows(members, dict(sorted(stored.offsets.items())), ranges), source="log-dir")
    if meta is not None and members:
        details.notes.append(f"members as stored at generation {meta.generation}: the broker is stopped, so none is "
                             "connected (the coordinator expires them a session timeout after it loads the group)")
    if count is not None and holder and holder != [partition_for_group(name, count)]:
        details.notes.append(f"records in __consumer_offsets partition(s) {', '.join(map(str, holder))}, where "
                             f"partitionFor with {count} partitions gives {partition_for_group(name, count)}")
    missing = sorted({f"{p.topic}-{p.partition}" for p in details.partitions
                      if p.topic is not None and (p.topic, p.partition) not in ranges})
    if missing:
        details.notes.append(f"no directory in this log dir (log end unknown): {', '.join(missing)}")
    for m in members:
        if m.assignment_error:
            details.notes.append(f"member {m.member_id}: {m.assignment_error}")
    return details


def read_groups(log_dir: str | Path, *, groups: list[str] | None = None,
                offsets_partitions: int | None = None) -> LogDirGroups:
    """Every group of the log dir (or the named ones, in that order: a group the log dir does not hold comes back
    Dead), with committed offsets, log ends from the partitions' segments and lag."""
    directory = Path(log_dir)
    if not directory.is_dir():
        raise InputError("not a directory", path=str(directory))
    dirs = log_dir_partitions(directory)
    holders = sorted((p, d) for (t, p), d in dirs.items() if t == OFFSETS_TOPIC)
    if not holders:
        raise InputError(f"no {OFFSETS_TOPIC} partitions in this log dir (is it a broker's log.dirs entry?)",
                         path=str(directory))
    count = offsets_partitions or offsets_topic_partitions(directory, dirs)
    stored: dict[str, StoredGroup] = {}
    notes: list[str] = []
    if groups is not None and count is not None and offsets_partitions is None and len(holders) == count:
        # every partition is here: read only those holding the named groups
        wanted = {partition_for_group(g, count) for g in groups}
        holders = [(p, d) for p, d in holders if p in wanted]
    for _index, path in holders:
        replay_groups(path, stored, notes)
    names = list(dict.fromkeys(groups)) if groups is not None else sorted(
        g for g, s in stored.items() if s.metadata is not None or s.offsets)
    wanted_tps = {tp for g in names for tp in stored.get(g, StoredGroup()).offsets}
    for g in names:
        meta = stored.get(g, StoredGroup()).metadata
        for m in meta.members if meta is not None else ():
            assignment, _ = decode_member_assignment(meta.protocol_type, m.assignment)
            wanted_tps |= set(assignment or ())
    ranges = {tp: log_range(dirs[tp]) for tp in sorted(wanted_tps) if tp in dirs}
    found = {g: _details(g, stored.get(g, StoredGroup(deleted=True)), count, ranges) for g in names}
    return LogDirGroups(str(directory), count, found, notes)


__all__ = ["LogDirGroups", "StoredGroup", "offsets_topic_partitions", "read_groups", "replay_groups"]
