"""Per-topic rollup of log directories (``kctl topics DIR``): partitions, bytes, offsets, times, codecs, configs.

Fast by default: it reads each segment's size, its indexes, its first batch and the batches after its last
offset-index entry, never the whole log. What that gives, per partition:

* ``log_start_offset``: Kafka's rule at load time, max(the log dir's ``log-start-offset-checkpoint`` entry,
  the first segment's base offset) - what ListOffsets(EARLIEST) answers.
* ``log_end_offset``: one past the last batch of the last segment (the tail after its last offset-index
  entry is scanned); an empty last segment's base offset (a segment is named by the log end at its roll).
* ``first_timestamp``: the first record's timestamp in log order (its first batch is decoded);
  ``max_timestamp``: the largest timestamp - each segment's last time-index entry (Kafka writes the
  segment's maximum there when it rolls) and the batches after its last offset-index entry.
* ``codecs``: the codecs of the batches read (each segment's first batch and its tail), a sample.
* ``records``: ``None`` unless ``exact``; ``offsets`` (log end - log start) is its upper bound (compaction,
  transaction markers and aborted batches leave offsets without records).

With ``exact`` (``--records``) every batch header is read: ``records`` counts data records (v2 headers' record
counts; magic 0/1 compressed wrappers are decompressed to count their inner messages), control records apart,
and ``codecs`` is complete. ``kctl scan`` decodes every record for keys, sizes and anomalies.

Topic configs: in ZooKeeper mode Kafka keeps them in ZooKeeper (``/config/topics/<t>``), not in the log dir;
a KRaft node that holds the metadata log (``__cluster_metadata-0``, a combined or controller node) has them
there (replayed from its latest snapshot and log); a standalone ``kctl broker`` keeps its overrides in
``kctl-topic-configs.json`` in its first log dir. Otherwise a topic's config is unknown (``None``).
Never prints; the CLI renders ``TopicsReport``.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcli.errors import InputError, KcliError
from kcli.records.record_set import MAGIC_OFFSET, StopReason, make_batch
from kcli.records.layout import read_header
from kcli.records.batch import ATTR_CODEC_MASK, ATTR_CONTROL
from kcli.storage.checkpoint import read_partition_entry, read_partition_metadata
from kcli.storage.files import (
    INDEX_SUFFIX,
    LOG_START_OFFSET_CHECKPOINT,
    TIME_INDEX_SUFFIX,
    FileKind,
    classify,
    offset_from_filename,
    parse_partition_dir_name,
    segment_path,
    special_file_reason,
)
from kcli.storage.index import OffsetIndex, TimeIndex
from kcli.storage.checked import CheckedBatchReader
from kcli.tools.inputs import collect_inputs
from kcli.tools.report import UNREADABLE, Problem, Severity, code_for_error, os_problem, tail_code
from kcli.tools.scan import codec_name

# The standalone kctl broker's topic-config file (kcli/broker/topic_admin.py TOPIC_CONFIGS_FILE; tools may not
# import the broker, a test keeps the two names equal).
TOPIC_CONFIGS_FILE = "kctl-topic-configs.json"
HEAD_BYTES = 1 << 20  # the first batch of a segment is read through a window of this size (it grows if needed)


@dataclass
class PartitionSummary:
    topic: str
    partition: int
    directory: str
    segments: int = 0
    bytes: int = 0
    log_start_offset: int | None = None
    log_end_offset: int | None = None
    first_timestamp: int | None = None
    max_timestamp: int | None = None
    codecs: set[str] = field(default_factory=set)
    records: int | None = None  # exact count (--records) or None
    control_records: int | None = None
    topic_id: str | None = None

    @property
    def offsets(self) -> int:
        if self.log_start_offset is None or self.log_end_offset is None:
            return 0
        return max(self.log_end_offset - self.log_start_offset, 0)

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "directory": self.directory,
                "segments": self.segments, "bytes": self.bytes, "log_start_offset": self.log_start_offset,
                "log_end_offset": self.log_end_offset, "offsets": self.offsets, "records": self.records,
                "control_records": self.control_records, "first_timestamp": self.first_timestamp,
                "max_timestamp": self.max_timestamp, "codecs": sorted(self.codecs), "topic_id": self.topic_id}


@dataclass
class TopicSummary:
    topic: str
    partitions: list[PartitionSummary] = field(default_factory=list)
    config: dict[str, str] | None = None  # topic-level overrides; None: unknown (not in the log dir)
    config_source: str | None = None  # the file the config came from

    @property
    def segments(self) -> int:
        return sum(p.segments for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    @property
    def offsets(self) -> int:
        return sum(p.offsets for p in self.partitions)

    @property
    def records(self) -> int | None:
        counts = [p.records for p in self.partitions]
        return None if any(c is None for c in counts) else sum(c for c in counts if c is not None)

    @property
    def first_timestamp(self) -> int | None:
        found = [p.first_timestamp for p in self.partitions if p.first_timestamp is not None and p.first_timestamp >= 0]
        return min(found) if found else None

    @property
    def max_timestamp(self) -> int | None:
        found = [p.max_timestamp for p in self.partitions if p.max_timestamp is not None and p.max_timestamp >= 0]
        return max(found) if found else None

    @property
    def codecs(self) -> list[str]:
        return sorted(set().union(*(p.codecs for p in self.partitions))) if self.partitions else []

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partitions": len(self.partitions), "segments": self.segments,
                "bytes": self.bytes, "offsets": self.offsets, "records": self.records,
                "first_timestamp": self.first_timestamp, "max_timestamp": self.max_timestamp,
                "codecs": self.codecs, "config": self.config, "config_source": self.config_source,
                "partition_details": [p.to_json() for p in self.partitions]}


@dataclass
class TopicsReport:
    paths: list[str]
    exact_records: bool
    topics: list[TopicSummary] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(p.severity is Severity.ERROR for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "paths": self.paths, "exact_records": self.exact_records,
                "topics": [t.to_json() for t in self.topics], "problems": [p.to_json() for p in self.problems]}


# -- finding partitions --------------------------------------------------------------------------------
def partition_dirs(paths: list[str], problems: list[Problem] | None = None) -> list[Path]:
    """The partition directories under ``paths`` (log dirs, partition dirs, trees of log dirs), found as every
    offline tool finds them (``kcli.tools.inputs``), sorted by topic and partition. Renamed ones (``-delete``,
    ``-future``, ``-stray``) are left out with a warning; so are directories Kafka would not load as partitions.
    One holding an entry that cannot be read (a FIFO named like a segment, say) is left out: ``problems`` gets
    that entry as ``unreadable``."""
    problems = problems if problems is not None else []
    for text in paths:
        try:
            mode = os.stat(text).st_mode
        except FileNotFoundError:
            raise InputError("No such file or directory", path=text) from None
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", path=text) from None
        if stat.S_ISDIR(mode):
            continue
        if not stat.S_ISREG(mode):
            raise InputError(special_file_reason(mode), path=text)
        raise InputError("not a directory: give a log dir or a partition dir", path=text)
    inputs = collect_inputs(paths)
    problems.extend(Problem(s.path, None, None, s.reason, UNREADABLE) for s in inputs.unreadable)
    problems.extend(inputs.warnings)
    blocked = {Path(s.path).parent for s in inputs.unreadable}
    found: list[Path] = []
    for partition in inputs.partitions:
        if partition.marker is not None:
            problems.append(Problem(str(partition.path), None, None, f"left out: a {partition.marker} partition dir",
                                    "marked_dir", Severity.WARNING))
        elif partition.path not in blocked:  # its segments cannot all be read: no answer from part of them
            found.append(partition.path)
    if not found and not inputs.unreadable:
        raise InputError("no partition directories (<topic>-<n>) found", path=", ".join(paths))
    return sorted(found, key=lambda p: (parse_partition_dir_name(p.name) or (p.name, -1)))


def segment_bases(directory: Path) -> list[int]:
    return sorted(offset_from_filename(p.name) for p in directory.iterdir() if classify(p) is FileKind.LOG)


def log_start_offset(directory: Path, bases: list[int]) -> int | None:
    """Kafka's log start offset at load: max(checkpointed log start, first segment base offset)."""
    checkpointed = read_partition_entry(directory, LOG_START_OFFSET_CHECKPOINT)
    if not bases:
        return checkpointed
    return max(checkpointed or 0, bases[0])


# -- one segment ---------------------------------------------------------------------------------------
@dataclass
class _SegmentFacts:
    size: int
    first_timestamp: int | None = None
    max_timestamp: int | None = None
    next_offset: int | None = None  # one past the last batch read from the tail
    codecs: set[str] = field(default_factory=set)
    records: int = 0
    control_records: int = 0


def _tail_position(directory: Path, base: int, size: int) -> int:
    path = segment_path(directory, base, INDEX_SUFFIX)
    if not path.is_file():
        return 0
    try:
        with OffsetIndex(path, base) as index:
            position = index.last_entry.position
    except (KcliError, OSError, ValueError):
        return 0
    return position if 0 <= position < size else 0


def _time_index_max(directory: Path, base: int) -> int | None:
    path = segment_path(directory, base, TIME_INDEX_SUFFIX)
    if not path.is_file():
        return None
    try:
        with TimeIndex(path, base) as index:
            return index.last_entry.timestamp if index.entry_count else None
    except (KcliError, OSError, ValueError):
        return None


def _batch_facts(facts: _SegmentFacts, chunk: bytes, local: int, total: int, *, count: bool) -> int:
    """Fold one batch into ``facts``; returns its next offset."""
    if chunk[local + MAGIC_OFFSET] >= 2:
        header = read_header(chunk, local)
        facts.codecs.add(codec_name(header.attributes & ATTR_CODEC_MASK))
        if facts.max_timestamp is None or header.max_timestamp > facts.max_timestamp:
            facts.max_timestamp = header.max_timestamp
        if count:
            if header.attributes & ATTR_CONTROL:
                facts.control_records += header.records_count
            else:
                facts.records += header.records_count
        return header.base_offset + header.last_offset_delta + 1
    batch = make_batch(chunk[local: local + total], local)
    facts.codecs.add(batch.codec.label)
    if facts.max_timestamp is None or batch.max_timestamp > facts.max_timestamp:
        facts.max_timestamp = batch.max_timestamp
    if count:
        facts.records += len(batch.records()) if batch.codec_id else 1
    return batch.last_offset + 1


def _first_record_timestamp(chunk: bytes, local: int, total: int) -> int | None:
    batch = make_batch(chunk[local: local + total], local)
    try:
        records = batch.records()
    except KcliError:
        return batch.max_timestamp
    return records[0].timestamp if records else None


def _segment_facts(directory: Path, base: int, *, exact: bool, want_first: bool,
                   problems: list[Problem]) -> _SegmentFacts:
    log_path = segment_path(directory, base, ".log")
    size = log_path.stat().st_size
    facts = _SegmentFacts(size)
    if size == 0:
        return facts
    facts.max_timestamp = _time_index_max(directory, base)
    start = 0 if exact else _tail_position(directory, base, size)
    if not exact and (want_first or start > 0):
        head = CheckedBatchReader(log_path, 0, min(size, HEAD_BYTES))
        for chunk, local, total in head.spans():
            if want_first:
                facts.first_timestamp = _first_record_timestamp(chunk, local, total)
            _batch_facts(facts, chunk, local, total, count=False)
            break
    reader = CheckedBatchReader(log_path, start)  # each batch read is checked as verify checks it
    first = exact and want_first
    for chunk, local, total in reader.spans():
        if first:
            facts.first_timestamp = _first_record_timestamp(chunk, local, total)
            first = False
        facts.next_offset = _batch_facts(facts, chunk, local, total, count=exact)
    if reader.valid_bytes != size:
        problems.append(Problem(str(log_path), reader.valid_bytes, None,
                                f"{size - reader.valid_bytes} bytes after the last complete batch "
                                f"({reader.stop.value}): a torn write, `kctl recover` cuts it",
                                tail_code(reader.stop is StopReason.PARTIAL_BATCH),
                                Severity.WARNING))
    return facts


# -- one partition -------------------------------------------------------------------------------------
def summarize_partition(directory: Path, *, exact: bool = False,
                        problems: list[Problem] | None = None) -> PartitionSummary:
    """Bytes, offsets, times and codecs of one partition directory (see the module docstring)."""
    problems = problems if problems is not None else []
    topic, partition = parse_partition_dir_name(directory.name) or (directory.name, -1)
    summary = PartitionSummary(topic, partition, str(directory))
    try:
        bases = segment_bases(directory)
    except OSError as exc:
        problems.append(os_problem(directory, exc))
        return summary
    summary.segments = len(bases)
    summary.log_start_offset = log_start_offset(directory, bases)
    metadata = directory / "partition.metadata"
    if metadata.is_file():
        try:
            summary.topic_id = str(read_partition_metadata(metadata).topic_id)
        except (KcliError, OSError):
            pass
    if exact:
        summary.records = summary.control_records = 0
    want_first = True
    end: int | None = bases[-1] if bases else summary.log_start_offset
    for base in bases:
        log_path = segment_path(directory, base, ".log")
        try:
            facts = _segment_facts(directory, base, exact=exact, want_first=want_first, problems=problems)
        except OSError as exc:
            problems.append(os_problem(log_path, exc))
            continue
        except InputError as exc:  # permission denied, not a regular file, gone since listed: exit 3
            problems.append(Problem(exc.path or str(log_path), None, None, exc.reason, UNREADABLE))
            continue
        except KcliError as exc:  # damage: the batch's file, byte position and verify's code for it
            problems.append(Problem(exc.path or str(log_path), exc.position, exc.base_offset, exc.reason,
                                    code_for_error(exc)))
            continue
        summary.bytes += facts.size
        summary.codecs |= facts.codecs
        if facts.size and want_first:
            summary.first_timestamp = facts.first_timestamp
            want_first = False
        if facts.max_timestamp is not None and facts.max_timestamp >= 0 and (
                summary.max_timestamp is None or facts.max_timestamp > summary.max_timestamp):
            summary.max_timestamp = facts.max_timestamp
        if facts.next_offset is not None:
            end = max(end or 0, facts.next_offset)
        if exact:
            summary.records = (summary.records or 0) + facts.records
            summary.control_records = (summary.control_records or 0) + facts.control_records
    summary.log_end_offset = end
    if summary.log_start_offset is not None and end is not None and summary.log_start_offset > end:
        summary.log_start_offset = end  # a checkpoint past the data (the log was truncated): nothing is readable
    return summary


# -- topic configs -------------------------------------------------------------------------------------
def read_topic_configs(log_dir: Path) -> tuple[dict[str, dict[str, str]], str] | None:
    """Topic overrides held in a log dir and where they came from: a standalone kctl broker's
    ``kctl-topic-configs.json``, else a KRaft node's ``__cluster_metadata``; None when neither is there."""
    path = log_dir / TOPIC_CONFIGS_FILE
    if not path.is_file():
        try:
            kraft = read_kraft_topic_configs(log_dir)
        except (KcliError, OSError) as exc:
            raise InputError(f"unreadable KRaft metadata: {exc}", path=str(log_dir / CLUSTER_METADATA_DIR)) from None
        return None if kraft is None else (kraft, str(log_dir / CLUSTER_METADATA_DIR))
    try:
        data = json.loads(path.read_text())
        return ({str(t): {str(k): str(v) for k, v in c.items()} for t, c in data.get("topics", {}).items()},
                str(path))
    except (OSError, ValueError, AttributeError) as exc:
        raise InputError(f"unreadable topic configs: {exc}", path=str(path)) from None


CLUSTER_METADATA_DIR = "__cluster_metadata-0"
TOPIC_RECORD, CONFIG_RECORD, REMOVE_TOPIC_RECORD = "TOPIC_RECORD", "CONFIG_RECORD", "REMOVE_TOPIC_RECORD"


def read_kraft_topic_configs(log_dir: Path) -> dict[str, dict[str, str]] | None:
    """Topic overrides from a KRaft log dir's ``__cluster_metadata-0`` (a combined or controller node): the latest
    snapshot (``<offset>-<epoch>.checkpoint``), then the log's records from its end offset on, replaying
    TopicRecord, ConfigRecord (resource type 2; a null value removes the key) and RemoveTopicRecord, as the
    brokers' metadata image does. None without that directory."""
    from kcli.records.cluster_metadata import decode_metadata_record
    from kcli.storage.files import KRAFT_CHECKPOINT_SUFFIX, kraft_snapshot_offset_epoch

    directory = log_dir / CLUSTER_METADATA_DIR
    if not directory.is_dir():
        return None
    snapshots = sorted((offset, p) for p in directory.iterdir() if p.name.endswith(KRAFT_CHECKPOINT_SUFFIX)
                       and (offset := (kraft_snapshot_offset_epoch(p.name) or (None,))[0]) is not None)
    start = 0
    files: list[Path] = []
    if snapshots:
        start, latest = snapshots[-1]
        files.append(latest)
    files += [segment_path(directory, base, ".log") for base in segment_bases(directory)]
    names: dict[Any, str] = {}
    configs: dict[str, dict[str, str]] = {}
    for path in files:
        snapshot = path.name.endswith(KRAFT_CHECKPOINT_SUFFIX)
        for batch in CheckedBatchReader(path):
            if batch.is_control or (not snapshot and batch.last_offset < start):
                continue
            for record in batch.records():
                if not snapshot and record.offset < start:
                    continue
                try:
                    item = decode_metadata_record(record.value)
                except KcliError:
                    continue
                data = item.data
                if item.type_name == TOPIC_RECORD:
                    names[data["topicId"]] = data["name"]
                    configs.setdefault(data["name"], {})
                elif item.type_name == CONFIG_RECORD and data.get("resourceType") == 2:
                    topic = configs.setdefault(data["resourceName"], {})
                    if data.get("value") is None:
                        topic.pop(data["name"], None)
                    else:
                        topic[data["name"]] = data["value"]
                elif item.type_name == REMOVE_TOPIC_RECORD:
                    configs.pop(names.pop(data["topicId"], ""), None)
    return configs


# -- the rollup ----------------------------------------------------------------------------------------
def summarize_topics(paths: list[str], *, exact: bool = False, topics: list[str] | None = None) -> TopicsReport:
    """The per-topic rollup of the partition directories under ``paths`` (log dirs or partition dirs)."""
    report = TopicsReport([str(p) for p in paths], exact)
    dirs = partition_dirs(paths, report.problems)
    by_topic: dict[str, TopicSummary] = {}
    configs: dict[Path, tuple[dict[str, dict[str, str]], str] | None] = {}
    for directory in dirs:
        topic, _ = parse_partition_dir_name(directory.name) or (directory.name, -1)
        if topics and topic not in topics:
            continue
        summary = by_topic.setdefault(topic, TopicSummary(topic))
        log_dir = directory.parent
        if log_dir not in configs:
            try:
                configs[log_dir] = read_topic_configs(log_dir)
            except InputError as exc:
                report.problems.append(Problem(exc.path or str(log_dir), None, None, exc.reason, UNREADABLE,
                                               Severity.WARNING))
                configs[log_dir] = None
        found = configs[log_dir]
        if found is not None and summary.config is None:
            # kctl broker's file lists only topics with overrides; the KRaft metadata has every topic it knows
            kraft = found[1].endswith(CLUSTER_METADATA_DIR)
            summary.config = found[0].get(topic) if kraft else found[0].get(topic, {})
            summary.config_source = found[1] if summary.config is not None else None
        summary.partitions.append(summarize_partition(directory, exact=exact, problems=report.problems))
    if topics:
        for name in topics:
            if name not in by_topic:
                report.problems.append(Problem(", ".join(paths), None, None, f"topic {name!r} has no partition "
                                               "directory here", "not_found"))
    report.topics = [by_topic[t] for t in sorted(by_topic)]
    return report
