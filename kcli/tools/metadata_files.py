"""Checkpoint and metadata text files as dump entries and verify findings (beyond kafka-dump-log,
which cannot read files without a dot in their name)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kcli.errors import KcliError
from kcli.storage.checkpoint import (
    LeaderEpochCheckpointFile,
    OffsetCheckpointFile,
    read_clean_shutdown,
    read_meta_properties,
    read_partition_metadata,
    read_quorum_state,
    uuid_to_base64,
)
from kcli.storage.files import FileKind


def read_metadata_file(path: Path, kind: FileKind) -> Iterator[tuple[dict[str, Any], str]]:
    """(JSON fields, text line) per entry; raises KcliError (with file and byte position) when malformed."""
    if kind is FileKind.LEADER_EPOCH_CHECKPOINT:
        for e in LeaderEpochCheckpointFile(path).read():
            yield {"epoch": e.epoch, "start_offset": e.start_offset}, f"epoch: {e.epoch} startOffset: {e.start_offset}"
    elif kind is FileKind.OFFSET_CHECKPOINT:
        for (topic, partition), offset in OffsetCheckpointFile(path).read():
            yield (
                {"topic": topic, "partition": partition, "offset": offset},
                f"topic: {topic} partition: {partition} offset: {offset}",
            )
    elif kind is FileKind.PARTITION_METADATA:
        meta = read_partition_metadata(path)
        topic_id = uuid_to_base64(meta.topic_id)
        yield {"version": meta.version, "topic_id": topic_id}, f"version: {meta.version} topicId: {topic_id}"
    elif kind is FileKind.META_PROPERTIES:
        meta = read_meta_properties(path)
        fields = {
            "version": meta.version,
            "node_id": meta.node_id,
            "cluster_id": meta.cluster_id,
            "directory_id": None if meta.directory_id is None else uuid_to_base64(meta.directory_id),
        }
        text = " ".join(f"{k}: {v}" for k, v in fields.items() if v is not None)
        yield fields, text
    elif kind is FileKind.QUORUM_STATE:
        state = dataclasses.asdict(read_quorum_state(path))
        yield state, " ".join(f"{k}: {v}" for k, v in state.items())
    elif kind is FileKind.CLEAN_SHUTDOWN:
        marker = read_clean_shutdown(path)
        epoch = None if marker is None else marker.broker_epoch
        yield {"broker_epoch": epoch}, f"clean shutdown marker, broker epoch: {epoch if epoch is not None else 'unknown'}"


def check_metadata_file(path: Path, kind: FileKind, log_end_offset: int | None) -> list[tuple[str, int | None]]:
    """Problems as (reason, byte position or None for a consistency finding)."""
    try:
        entries = list(read_metadata_file(path, kind))
    except KcliError as exc:
        return [(exc.reason, exc.position if exc.position is not None else 0)]
    problems: list[tuple[str, int | None]] = []
    if kind is FileKind.LEADER_EPOCH_CHECKPOINT:
        prev = None
        for fields, _text in entries:
            if prev is not None and (fields["epoch"] <= prev["epoch"] or fields["start_offset"] < prev["start_offset"]):
                problems.append((f"leader epoch entry ({fields['epoch']}, {fields['start_offset']}) does not follow "
                                 f"({prev['epoch']}, {prev['start_offset']}): epochs and offsets must increase", None))
            if log_end_offset is not None and fields["start_offset"] > log_end_offset:
                problems.append((f"leader epoch {fields['epoch']} starts at offset {fields['start_offset']}, beyond the "
                                 f"log end offset {log_end_offset}", None))
            prev = fields
    return problems
