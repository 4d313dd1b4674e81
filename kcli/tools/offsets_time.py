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

from kcli.errors import KcliError
from kcli.storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, parse_partition_dir_name, segment_path
from kcli.storage.index import OffsetIndex, TimeIndex
from kcli.storage.segment import FileBatchReader
from kcli.tools.report import Problem, Severity, code_for_error, os_problem
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


def find_offset_by_timestamp(directory: Path, bases: list[int], timestamp: int, log_start: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after ``log_start`` with a timestamp >= ``timestamp``."""
    for base in bases:
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
        for batch in FileBatchReader(log_path, start):
            if batch.max_timestamp < timestamp or batch.last_offset < log_start:
                continue
            for record in batch.records():
                if record.offset >= log_start and record.timestamp >= timestamp:
                    return record.offset, record.timestamp
    return None


def offsets_for_time(paths: list[str], timestamp: int, *, topics: list[str] | None = None) -> OffsetsForTimeReport:
    """Per partition directory under ``paths``: the offset for ``timestamp`` (ms, or EARLIEST/LATEST)."""
    report = OffsetsForTimeReport(timestamp, ", ".join(str(p) for p in paths))
    for directory in partition_dirs(paths, report.problems):
        topic, partition = parse_partition_dir_name(directory.name) or (directory.name, -1)
        if topics and topic not in topics:
            continue
        # The log start and end offsets come from the fast path of `kctl topics` (indexes and the tail).
        known = len(report.problems)
        bounds = summarize_partition(directory, problems=report.problems)
        if any(p.unreadable for p in report.problems[known:]):
            continue  # already reported once; an answer from the readable rest would be wrong in silence
        start, end = bounds.log_start_offset, bounds.log_end_offset
        if timestamp == EARLIEST:
            found: tuple[int, int] | None = (start if start is not None else UNKNOWN_OFFSET, -1)
        elif timestamp == LATEST:
            found = (end if end is not None else UNKNOWN_OFFSET, -1)
        else:
            try:
                found = find_offset_by_timestamp(directory, segment_bases(directory), timestamp, start or 0)
            except OSError as exc:
                report.problems.append(os_problem(directory, exc))
                continue
            except KcliError as exc:
                report.problems.append(Problem(exc.path or str(directory), exc.position, None, exc.reason,
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
