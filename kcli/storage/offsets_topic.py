"""Reading a `__consumer_offsets` partition as the group coordinator does when it loads one.

``iter_offsets_topic``: every record a read_committed consumer sees (aborted TxnOffsetCommits skipped, markers
skipped), decoded. ``replay_offsets_topic``: every batch in log order, transactional offset commits tagged with
their producer id and the COMMIT/ABORT markers that settle them, as Kafka's GroupMetadataManager replays a
partition (pending transactional offsets per producer, materialised by a COMMIT, dropped by an ABORT).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcli.errors import KcliError
from kcli.records.consumer_offsets import decode_record
from kcli.records.control import ControlRecordType, parse_control_type
from kcli.storage.cleaner import iter_visible_records
from kcli.storage.files import FileKind, classify
from kcli.storage.segment import FileBatchReader


def iter_offsets_topic(partition_dir: str | os.PathLike[str],
                       on_undecodable: Callable[[int, KcliError], None] | None = None, *,
                       checked: bool = False) -> Iterator[tuple[int, Any, Any]]:
    """(offset, key, value) of each keyed record; ``on_undecodable(offset, error)`` hears about records of
    versions or types kcli cannot decode, which are skipped (as Kafka skips unknown key versions). ``checked``:
    through the checked reading path (the offline tools: a damaged batch raises, naming its file and position)."""
    for _batch, record in iter_visible_records(partition_dir, checked=checked):
        if record.key is None:
            continue
        try:
            key, value = decode_record(record.key, record.value)
        except KcliError as exc:
            if on_undecodable is not None:
                on_undecodable(record.offset, exc)
            continue
        yield record.offset, key, value


@dataclass(frozen=True, slots=True)
class OffsetsTopicEntry:
    """One decoded record, or (``marker`` set, ``key`` None) one transaction marker of ``producer_id``."""

    offset: int
    batch_offset: int  # the base offset of the batch: what Kafka compares to order commits (olderThan)
    key: Any
    value: Any
    producer_id: int = -1  # set for transactional batches (TxnOffsetCommit) and markers
    marker: ControlRecordType | None = None


def iter_partition_batches(partition_dir: str | os.PathLike[str]) -> Iterator[Any]:
    """Every complete batch of the partition's segments in offset order, up to the log end: a batch being
    written when the broker reads its own live log is not complete yet and ends the iteration."""
    directory = Path(partition_dir)
    for path in sorted(p for p in directory.iterdir() if classify(p) is FileKind.LOG):
        reader = FileBatchReader(path)
        yield from reader
        if reader.valid_bytes != path.stat().st_size:
            return


def replay_offsets_topic(partition_dir: str | os.PathLike[str],
                         on_undecodable: Callable[[int, KcliError], None] | None = None
                         ) -> Iterator[OffsetsTopicEntry]:
    """Every keyed record and every COMMIT/ABORT marker, in log order (Kafka's doLoadGroupsAndOffsets)."""
    for batch in iter_partition_batches(partition_dir):
        pid = batch.producer_id if getattr(batch, "is_transactional", False) else -1
        if getattr(batch, "is_control", False):
            records = batch.records()
            if not records:
                continue
            try:
                kind = parse_control_type(records[0].key)
            except KcliError as exc:
                if on_undecodable is not None:
                    on_undecodable(batch.base_offset, exc)
                continue
            if kind in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
                yield OffsetsTopicEntry(batch.base_offset, batch.base_offset, None, None, batch.producer_id, kind)
            continue
        for record in batch.records():
            if record.key is None:
                continue
            try:
                key, value = decode_record(record.key, record.value)
            except KcliError as exc:
                if on_undecodable is not None:
                    on_undecodable(record.offset, exc)
                continue
            yield OffsetsTopicEntry(record.offset, batch.base_offset, key, value, pid)


__all__ = ["OffsetsTopicEntry", "iter_offsets_topic", "iter_partition_batches", "replay_offsets_topic"]
