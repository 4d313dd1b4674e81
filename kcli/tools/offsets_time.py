"""Offsets for a time, offline (``kctl offsets for-time TIME DIR``): what ListOffsets answers, from the files.

Per partition, the earliest offset whose record has a timestamp >= TIME, found as Kafka's
``UnifiedLog.fetchOffsetByTimestamp`` / ``LogSegment.findOffsetByTimestamp`` find it: in each segment (in
order) the time index gives the last entry at or below TIME, the offset index the position of the batch
holding that entry's offset (never below the log start offset), and the batches from there are read until
a record's timestamp is >= TIME. EARLIEST (-2) is the log start offset, LATEST (-1) the log end offset.

A partition without such a record answers offset -1 and timestamp -1, as ListOffsets does (Kafka's
consumer maps it to null, kcat prints -1); ``seek_offset`` is then the log end offset, where a consumer
reset to that time starts (kafka-consumer-groups --to-datetime). Never prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcli.errors import InputError, KcliError
from kcli.storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, parse_partition_dir_name, segment_path
from kcli.storage.index import OffsetIndex, TimeIndex
from kcli.storage.checked import CheckedBatchReader, CorruptBatchError
from kcli.tools.report import UNREADABLE, Problem, Severity, code_for_error, os_problem
from kcli.tools.topics import partition_dirs, segment_bases, summarize_partition

EARLIEST, LATEST = -2, -1  # ListOffsets' special timestamps
UNKNOWN_OFFSET = -1


@dataclass(frozen=True)
class OffsetForTime:
    """One partition's answer. ``offset``/``timestamp``: the record found (-1/-1 when none, as ListOffsets);
    for EARLIEST/LATEST the log start/end offset with timestamp -1."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    log_start_offset: int | None
    log_end_offset: int | None

    @property
    def seek_offset(self) -> int | None:
        """Where a consumer reset to the time starts: the offset found, else the log end offset."""
        return self.offset if self.offset >= 0 else self.log_end_offset

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset,
                "timestamp": self.timestamp, "seek_offset": self.seek_offset,
                "log_start_offset": self.log_start_offset, "log_end_offset": self.log_end_offset}


@dataclass
class OffsetsForTimeReport:
    timestamp: int
    source: str  # the log dirs, or the bootstrap servers
    offsets: list[OffsetForTime] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(p.severity is Severity.ERROR for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "timestamp": self.timestamp, "source": self.source,
                "offsets": [o.to_json() for o in self.offsets], "problems": [p.to_json() for p in self.problems]}


def find_offset_by_timestamp(directory: Path, bases: list[int], timestamp: int, log_start: int,
                             problems: list[Problem] | None = None) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after ``log_start`` with a timestamp >= ``timestamp``.

    Batches are read through the checked path (kcli.storage.checked): a damaged one raises CorruptBatchError with
    its file and byte position. The batch after the answer's is read too, so that the answer's offsets are known
    to precede it (a base offset damaged outside the CRC would otherwise be the answer)."""
    for i, base in enumerate(bases):
        log_path = segment_path(directory, base, LOG_SUFFIX)
        start = 0
        time_index = segment_path(directory, base, TIME_INDEX_SUFFIX)
        floor_offset = base
        if time_index.is_file():
            with TimeIndex(time_index, base) as tindex:
                floor_offset = tindex.lookup_by_timestamp(timestamp).offset
        target = max(floor_offset, log_start)
        index = segment_path(directory, base, INDEX_SUFFIX)
        if target > base and index.is_file():
            with OffsetIndex(index, base) as oindex:
                start = oindex.lookup(target).position
        if start >= log_path.stat().st_size:
            start = 0  # an index past the data (a torn segment): read the segment from its start
        try:
            found = _find_in_segment(log_path, start, timestamp, log_start)
        except CorruptBatchError as exc:
            if start == 0 or exc.position != start:
                raise
            # The index points into the middle of a batch: Kafka would misread there too; read from the start.
            if problems is not None:
                problems.append(Problem(str(index), None, None, f"entry for offset {target} points at byte {start}, "
                                        f"not at a batch of {log_path.name}: read from its start instead",
                                        "index_position_not_batch_start", Severity.WARNING))
            found = _find_in_segment(log_path, 0, timestamp, log_start)
        if found is None:
            continue
        offset, ts, batch_last, was_last = found
        if was_last and i + 1 < len(bases) and bases[i + 1] <= batch_last:
            raise CorruptBatchError(f"segment base offset {bases[i + 1]} overlaps the previous segment, which holds "
                                    f"offset {batch_last}", code="segment_overlap",
                                    path=str(segment_path(directory, bases[i + 1], LOG_SUFFIX)), position=0,
                                    base_offset=bases[i + 1])
        return offset, ts
    return None


def _find_in_segment(log_path: Path, start: int, timestamp: int,
                     log_start: int) -> tuple[int, int, int, bool] | None:
    """(offset, timestamp, last offset of its batch, whether that batch is the segment's last) of the answer."""
    found: tuple[int, int, int] | None = None
    for batch in CheckedBatchReader(log_path, start):
        if found is not None:
            return (*found, False)  # the next batch passed its checks: it follows the answer's batch
        if batch.max_timestamp < timestamp or batch.last_offset < log_start:
            continue
        try:
            records = batch.records()
        except KcliError as exc:
            raise CorruptBatchError(exc.reason, code="corrupt_records", path=str(log_path), position=batch.position,
                                    base_offset=batch.base_offset) from None
        for record in records:
            if record.offset >= log_start and record.timestamp >= timestamp:
                found = record.offset, record.timestamp, batch.last_offset
                break
    return None if found is None else (*found, True)


def offsets_for_time(paths: list[str], timestamp: int, *, topics: list[str] | None = None) -> OffsetsForTimeReport:
    """Per partition directory under ``paths``: the offset for ``timestamp`` (ms, or EARLIEST/LATEST)."""
    report = OffsetsForTimeReport(timestamp, ", ".join(str(p) for p in paths))
    for directory in partition_dirs(paths, report.problems):
        topic, partition = parse_partition_dir_name(directory.name) or (directory.name, -1)
        if topics and topic not in topics:
            continue
        # The log start and end offsets come from the fast path of `kctl topics` (indexes and the tail).
        errors = sum(p.severity is Severity.ERROR for p in report.problems)
        bounds = summarize_partition(directory, problems=report.problems)
        if sum(p.severity is Severity.ERROR for p in report.problems) > errors:
            continue  # damaged or unreadable: no answer from what is left (the problem says where, once)
        start, end = bounds.log_start_offset, bounds.log_end_offset
        if timestamp == EARLIEST:
            found: tuple[int, int] | None = (start if start is not None else UNKNOWN_OFFSET, -1)
        elif timestamp == LATEST:
            found = (end if end is not None else UNKNOWN_OFFSET, -1)
        else:
            try:
                found = find_offset_by_timestamp(directory, segment_bases(directory), timestamp, start or 0,
                                                 report.problems)
            except OSError as exc:
                report.problems.append(os_problem(directory, exc))
                continue
            except InputError as exc:  # not a regular file, or gone since listed
                report.problems.append(Problem(exc.path or str(directory), None, None, exc.reason, UNREADABLE))
                continue
            except KcliError as exc:  # damage: the batch's file, byte position and verify's code for it
                report.problems.append(Problem(exc.path or str(directory), exc.position, exc.base_offset, exc.reason,
                                               code_for_error(exc)))
                continue
        offset, ts = found if found is not None else (UNKNOWN_OFFSET, -1)
        report.offsets.append(OffsetForTime(topic, partition, offset, ts, start, end))
    if topics:
        seen = {o.topic for o in report.offsets}
        for name in topics:
            if name not in seen:
                report.problems.append(Problem(report.source, None, None,
                                               f"topic {name!r} has no partition directory here", "not_found"))
    return report
