"""Per topic-partition statistics of Kafka logs (``kctl scan``): the report both engines fill, and the local engine.

The local engine walks every ``.log`` segment in its own process (``ProcessPoolExecutor``, one task per
segment), decodes every record and returns partial aggregates that are merged per partition directory.
``kcli.spark.scan`` computes the same report with DataFrame aggregations over the ``kafka-log`` data
source. Both follow these definitions (man/kctl-scan.1 repeats them), so they give the same numbers:

* Input: the ``.log`` segments under the paths (files, partition directories, log directories, walked
  recursively). A partition is one directory; topic and partition come from its ``<topic>-<n>`` name
  (``partition`` is -1 when the name has no such suffix). Other files (indexes, snapshots, KRaft
  ``.checkpoint`` files) are not read.
* ``records``: data records after deep iteration (the inner messages of a magic 0/1 compressed wrapper
  count one by one). Control records (transaction COMMIT/ABORT markers) are not records: they are counted
  in ``control_records`` only. Aborted transactional data is counted (the log holds it).
* ``batches`` / ``bytes``: batches holding at least one data record and the sum of their on-disk sizes
  (12-byte log overhead included, compressed as stored); ``codecs`` breaks them down by codec with the
  data records they hold. ``segment_bytes`` is the size of the ``.log`` files.
* Record size (``largest_records``): key bytes + value bytes (null counts 0; headers not counted); ties are
  broken by offset, then segment, then byte position.
* Keys: ``distinct_keys`` is the exact number of distinct non-null keys (compared as bytes) of the
  partition; ``null_keys`` the records without a key. ``tombstones``: records with a null value;
  ``tombstone_ratio`` = tombstones / records (0 without records), rounded to 6 decimals.
* Timestamps are epoch milliseconds. A negative timestamp (magic 0, or -1 "no timestamp") counts in
  ``no_timestamp`` and in nothing else. Anomalies, among timestamped records: ``out_of_order`` - below the
  largest timestamp of the earlier records of the partition in log order (segment, byte position, record);
  ``future`` - later than the reference time (``reference_time``: when the scan started, unless given);
  ``before_2000`` - before 2000-01-01T00:00:00Z.
* Damage: a batch failing verify's checks of its bytes (kcli.storage.checked: CRC, magic, header) or whose
  records do not decode is skipped and reported (file, byte position, verify's code: ``crc_mismatch``,
  ``unknown_magic``, ``bad_batch_header``, ``corrupt_records``); offsets outside the segment or going backwards
  are reported as verify reports them (the batch is counted); a torn or zero-filled tail ends the segment
  (``truncated_batch``, ``invalid_bytes_at_end``, ``corrupt_batch_size``). Everything before and after a
  skipped batch is counted.

Never prints; the CLI renders ``ScanReport``.
"""

from __future__ import annotations

import base64
import bisect
import heapq
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from kcli.errors import CorruptRecordError, InputError, KcliError, UsageError
from kcli.records import StopReason, make_batch
from kcli.records.compression import Codec
from kcli.records.layout import entry_size
from kcli.records.record_set import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MIN_RECORD_OVERHEAD
from kcli.storage.checked import batch_integrity, header_problem, offset_problem
from kcli.storage.files import FileKind, offset_from_filename, parse_partition_dir_name
from kcli.storage.segment import FileBatchReader
from kcli.tools.inputs import collect_inputs, file_size
from kcli.tools.render import encode_bytes
from kcli.tools.report import UNREADABLE, Problem, Severity, os_problem

DEFAULT_TOP = 5
YEAR_2000_MS = 946_684_800_000  # 2000-01-01T00:00:00Z
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
CANDIDATE_CAP = 65_536  # run-length entries of a segment's new-maximum timestamps kept for the merge

# The `records` view and the Parquet output: the kafka-log data source's schema (kcli.spark.datasource).
RECORD_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers", "magic",
                  "codec", "producer_id", "producer_epoch", "sequence", "is_transactional", "is_control", "segment",
                  "position")


def codec_name(codec_id: int) -> str:
    try:
        return Codec(codec_id).label
    except ValueError:
        return f"unknown-{codec_id}"


# -- what is scanned -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SegmentFile:
    directory: str
    topic: str
    partition: int
    path: str
    base_offset: int
    size: int


def topic_partition(directory: str | os.PathLike[str]) -> tuple[str, int]:
    """(topic, partition) of a partition directory; (directory name, -1) for any other directory."""
    name = Path(directory).name
    parsed = parse_partition_dir_name(name)
    return parsed if parsed is not None else (name, -1)


def list_segments(paths: list[str], skipped: list[Problem] | None = None) -> list[SegmentFile]:
    """The ``.log`` segments under ``paths`` in Kafka's order (directory, then base offset); entries that
    look like Kafka data but cannot be read are appended to ``skipped`` as ``unreadable`` problems, directories
    Kafka would not load as partitions as warnings."""
    out = []
    # Absolute, normalised names: the same strings the kafka-log data source gives its `segment` column.
    inputs = collect_inputs([os.path.abspath(p) for p in paths])
    if skipped is not None:
        skipped.extend(Problem(s.path, None, None, s.reason, UNREADABLE) for s in inputs.unreadable)
        skipped.extend(inputs.warnings)  # directories Kafka would not load as partitions
    for item in inputs.files:
        if item.kind is not FileKind.LOG:
            continue
        directory = str(item.path.parent)
        topic, partition = topic_partition(directory)
        try:
            base = offset_from_filename(item.path.name)
        except (InputError, ValueError):
            base = 0
        out.append(SegmentFile(directory, topic, partition, str(item.path), base, file_size(item.path)))
    if not out:
        raise InputError("no .log segments found", path=", ".join(paths))
    return out


# -- the report ------------------------------------------------------------------------------------
@dataclass
class CodecStats:
    batches: int = 0
    records: int = 0
    bytes: int = 0

    def to_json(self) -> dict[str, int]:
        return {"batches": self.batches, "records": self.records, "bytes": self.bytes}


@dataclass(frozen=True, slots=True)
class LargestRecord:
    offset: int
    size: int
    key_size: int  # -1: null key
    value_size: int  # -1: null value
    timestamp: int
    segment: str
    position: int

    def sort_key(self) -> tuple:
        return (-self.size, self.offset, self.segment, self.position)

    def to_json(self) -> dict[str, Any]:
        return {"offset": self.offset, "size": self.size, "key_size": self.key_size, "value_size": self.value_size,
                "timestamp": self.timestamp, "segment": self.segment, "position": self.position}


@dataclass
class PartitionStats:
    directory: str
    topic: str
    partition: int
    segments: int = 0
    segment_bytes: int = 0
    batches: int = 0
    bytes: int = 0
    records: int = 0
    control_records: int = 0
    key_bytes: int = 0
    value_bytes: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    min_timestamp: int | None = None
    max_timestamp: int | None = None
    no_timestamp: int = 0
    distinct_keys: int = 0
    null_keys: int = 0
    tombstones: int = 0
    codecs: dict[str, CodecStats] = field(default_factory=dict)
    largest_records: list[LargestRecord] = field(default_factory=list)
    out_of_order: int = 0
    future: int = 0
    before_2000: int = 0

    @property
    def tombstone_ratio(self) -> float:
        return round(self.tombstones / self.records, 6) if self.records else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "directory": self.directory,
            "segments": self.segments,
            "segment_bytes": self.segment_bytes,
            "batches": self.batches,
            "bytes": self.bytes,
            "records": self.records,
            "control_records": self.control_records,
            "key_bytes": self.key_bytes,
            "value_bytes": self.value_bytes,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "min_timestamp": self.min_timestamp,
            "max_timestamp": self.max_timestamp,
            "no_timestamp": self.no_timestamp,
            "distinct_keys": self.distinct_keys,
            "null_keys": self.null_keys,
            "tombstones": self.tombstones,
            "tombstone_ratio": self.tombstone_ratio,
            "codecs": {name: self.codecs[name].to_json() for name in sorted(self.codecs)},
            "largest_records": [r.to_json() for r in self.largest_records],
            "timestamp_anomalies": {"out_of_order": self.out_of_order, "future": self.future,
                                    "before_2000": self.before_2000},
        }


_TOTALS = ("segments", "segment_bytes", "batches", "bytes", "records", "control_records", "tombstones", "null_keys",
           "no_timestamp", "out_of_order", "future", "before_2000")


@dataclass
class ScanReport:
    paths: list[str]
    engine: str
    reference_time: int
    top: int = DEFAULT_TOP
    partitions: list[PartitionStats] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0
    parallelism: int | None = None  # local workers, or Spark's default parallelism
    output: str | None = None

    def is_ok(self) -> bool:
        return not any(p.severity is Severity.ERROR for p in self.problems)

    @property
    def ok(self) -> bool:
        return self.is_ok()

    def total(self, name: str) -> int:
        return sum(getattr(p, name) for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ok": self.is_ok(), "engine": self.engine, "paths": self.paths,
                               "reference_time": self.reference_time, "top": self.top}
        out["partition_count"] = len(self.partitions)
        for name in ("segments", "segment_bytes", "batches", "bytes", "records", "control_records"):
            out[name] = self.total(name)
        out["partitions"] = [p.to_json() for p in self.partitions]
        out["problems"] = [p.to_json() for p in self.problems]
        out["output"] = self.output
        out["parallelism"] = self.parallelism
        out["seconds"] = round(self.seconds, 3)
        return out


@dataclass
class QueryResult:
    """``--sql``: the columns and rows of the query over the ``records`` view."""

    engine: str
    sql: str
    columns: list[str]
    rows: list[tuple]
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0

    def is_ok(self) -> bool:
        return not any(p.severity is Severity.ERROR for p in self.problems)

    @property
    def ok(self) -> bool:
        return self.is_ok()

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "sql": self.sql, "columns": self.columns,
                "rows": [[json_value(v) for v in row] for row in self.rows],
                "problems": [p.to_json() for p in self.problems], "ok": self.is_ok(), "seconds": round(self.seconds, 3)}


def json_value(value: Any) -> Any:
    """A query cell as JSON: bytes by the dump convention (string or {"base64"}), times as ISO-8601."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return encode_bytes(bytes(value))
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if hasattr(value, "asDict"):  # a Spark Row (struct column): a tuple with names
        return json_value(value.asDict())
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    return value


# -- partial aggregates: one per segment, merged per partition -------------------------------------
@dataclass
class SegmentPartial:
    """What one segment task returns. ``candidates`` are run-length (timestamp, count) pairs of the records
    at or above the running maximum timestamp within the segment: non-decreasing, so the merge counts those
    below the maximum of the earlier segments by bisection (``candidates_truncated``: only the first
    ``CANDIDATE_CAP`` runs are kept)."""

    path: str
    batches: int = 0
    bytes: int = 0
    records: int = 0
    control_records: int = 0
    key_bytes: int = 0
    value_bytes: int = 0
    first_offset: int | None = None
    last_offset: int | None = None
    min_timestamp: int | None = None
    max_timestamp: int | None = None
    no_timestamp: int = 0
    null_keys: int = 0
    tombstones: int = 0
    keys: set = field(default_factory=set)
    codecs: dict[str, list[int]] = field(default_factory=dict)  # name -> [batches, records, bytes]
    largest: list[LargestRecord] = field(default_factory=list)
    out_of_order: int = 0  # below the running maximum of the same segment
    future: int = 0
    before_2000: int = 0
    candidates: list[tuple[int, int]] = field(default_factory=list)
    candidates_truncated: bool = False
    problems: list[Problem] = field(default_factory=list)
    rows_written: int = 0


@dataclass(frozen=True, slots=True)
class _SegmentTask:
    segment: SegmentFile
    top: int
    now_ms: int
    parquet_path: str | None = None
    prefix_max: int | None = None  # rescan: count only the candidates below this
    sqlite_path: str | None = None  # --sql: the `records` rows of this segment into this SQLite file


def scan_segment(task: _SegmentTask) -> SegmentPartial:
    """The local engine's unit of work (runs in a worker process): one segment, every record decoded."""
    seg = task.segment
    path = seg.path
    part = SegmentPartial(path)
    top = task.top
    now = task.now_ms
    heap: list[tuple[int, int, int, int, int, int, int]] = []  # (size, -offset, -position, offset, ks, vs, ts)
    threshold = -1 if top > 0 else 1 << 62
    keys = part.keys
    codecs = part.codecs
    candidates = part.candidates
    cap_left = CANDIDATE_CAP
    last_candidate = None
    runmax = -1
    first_offset = last_offset = None
    min_ts = max_ts = None
    records = key_bytes = value_bytes = null_keys = tombstones = no_ts = ooo = future = before = 0
    prefix_max = task.prefix_max
    below_prefix = 0
    writer: _ParquetSegmentWriter | _SqliteSegmentWriter | None = None
    if task.parquet_path:
        writer = _ParquetSegmentWriter(task.parquet_path, seg)
    elif task.sqlite_path:
        writer = _SqliteSegmentWriter(task.sqlite_path, seg)
    reader = FileBatchReader(path)
    previous_last: int | None = None
    try:
        for chunk, local, total in reader.spans():
            pos = reader.window_position + local
            try:
                batch = make_batch(chunk[local: local + total], pos)
            except KcliError as exc:  # a magic 0/1 message too short for its own header
                part.problems.append(Problem(path, pos, None, exc.reason, "corrupt_records"))
                continue
            damage = batch_integrity(batch) or header_problem(batch)  # the checked reading path's checks
            if damage is not None:
                part.problems.append(Problem(path, pos, _safe_base(batch), damage[1], damage[0]))
                continue
            first = _safe_base(batch)
            # Offsets out of the segment or going backwards: reported (as verify does), the batch still counted.
            order = None if first is None else offset_problem(first, batch.last_offset, base_offset=seg.base_offset,
                                                              previous_last=previous_last)
            if order is not None:
                part.problems.append(Problem(path, pos, first, order[1], order[0]))
            if previous_last is None or batch.last_offset > previous_last:
                previous_last = batch.last_offset
            magic = batch.magic
            try:
                decoded = batch.records()
            except KcliError as exc:
                part.problems.append(Problem(path, pos, _safe_base(batch), exc.reason, "corrupt_records"))
                continue
            if magic >= 2 and batch.is_control:
                part.control_records += len(decoded)
                if writer is not None:
                    writer.add_batch(batch, decoded, pos, control=True)
                continue
            if not decoded:
                continue
            name = codec_name(batch.codec_id)
            stats = codecs.get(name)
            if stats is None:
                stats = codecs[name] = [0, 0, 0]
            n = len(decoded)
            stats[0] += 1
            stats[1] += n
            stats[2] += total
            part.batches += 1
            part.bytes += total
            records += n
            if writer is not None:
                writer.add_batch(batch, decoded, pos, control=False)
            for r in decoded:
                off = r.offset
                key = r.key
                value = r.value
                ts = r.timestamp
                if key is None:
                    ks = -1
                    null_keys += 1
                else:
                    ks = len(key)
                    key_bytes += ks
                    keys.add(key)
                if value is None:
                    vs = -1
                    tombstones += 1
                    size = ks if ks > 0 else 0
                else:
                    vs = len(value)
                    value_bytes += vs
                    size = vs + ks if ks > 0 else vs
                if first_offset is None or off < first_offset:
                    first_offset = off
                if last_offset is None or off > last_offset:
                    last_offset = off
                if ts < 0:
                    no_ts += 1
                else:
                    if ts < runmax:
                        ooo += 1
                    else:
                        runmax = ts
                        if prefix_max is not None:
                            if ts < prefix_max:
                                below_prefix += 1
                        elif last_candidate is not None and last_candidate[0] == ts:
                            last_candidate[1] += 1
                        elif cap_left:
                            last_candidate = [ts, 1]
                            candidates.append(last_candidate)
                            cap_left -= 1
                        else:
                            part.candidates_truncated = True
                    if min_ts is None or ts < min_ts:
                        min_ts = ts
                    if max_ts is None or ts > max_ts:
                        max_ts = ts
                    if ts > now:
                        future += 1
                    if ts < YEAR_2000_MS:
                        before += 1
                if size >= threshold:
                    item = (size, -off, -pos, off, ks, vs, ts)
                    if len(heap) < top:
                        heapq.heappush(heap, item)
                        if len(heap) == top:
                            threshold = heap[0][0]
                    elif item > heap[0]:
                        heapq.heapreplace(heap, item)
                        threshold = heap[0][0]
    except InputError as exc:  # cannot be opened
        part.problems.append(Problem(path, None, None, exc.reason, UNREADABLE))
    except OSError as exc:  # EIO, or deleted since listed (a live broker's retention)
        part.problems.append(os_problem(path, exc))
    except CorruptRecordError as exc:
        part.problems.append(Problem(path, exc.position, None, exc.reason, "corrupt_batch_size"))
    else:
        trailing = seg.size - reader.valid_bytes
        if trailing > 0:
            if reader.stop is StopReason.PARTIAL_BATCH:
                reason = (f"truncated batch: declares {reader.declared_size} bytes, only {trailing} remain "
                          f"(Found {trailing} invalid bytes at the end of {Path(path).name})")
                code = "truncated_batch"
            else:
                reason = f"Found {trailing} invalid bytes at the end of {Path(path).name}"
                code = "invalid_bytes_at_end"
            part.problems.append(Problem(path, reader.valid_bytes, None, reason, code))
    finally:
        if writer is not None:
            part.rows_written = writer.close()
    part.records = records
    part.key_bytes, part.value_bytes = key_bytes, value_bytes
    part.first_offset, part.last_offset = first_offset, last_offset
    part.min_timestamp, part.max_timestamp = min_ts, max_ts
    part.no_timestamp, part.null_keys, part.tombstones = no_ts, null_keys, tombstones
    part.out_of_order, part.future, part.before_2000 = ooo, future, before
    part.candidates = [(ts, count) for ts, count in candidates]
    if prefix_max is not None:
        part.candidates = [(prefix_max - 1, below_prefix)] if below_prefix else []
        part.candidates_truncated = False
    part.largest = [LargestRecord(off, size, ks, vs, ts, path, -npos) for size, _no, npos, off, ks, vs, ts in heap]
    return part


def scan_segment_file(seg: SegmentFile, top: int, now_ms: int, prefix_max: int | None = None) -> SegmentPartial:
    """``scan_segment`` of one listed segment, without Parquet output: the unit the Spark engine runs as a task."""
    return scan_segment(_SegmentTask(seg, top, now_ms, None, prefix_max))


def describe_damage(path: str, position: int) -> Problem:
    """The problem the local engine reports for the damage at ``path:position`` (a batch start, or where the
    framing broke): how the Spark engine, told only where its reader failed, reports the same problem."""
    name = Path(path).name
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(position)
        head = f.read(HEADER_SIZE_UP_TO_MAGIC)
        remaining = size - position
        if remaining <= HEADER_SIZE_UP_TO_MAGIC:
            return Problem(path, position, None, f"Found {remaining} invalid bytes at the end of {name}",
                           "invalid_bytes_at_end")
        declared = entry_size(head)
        if declared - LOG_OVERHEAD < MIN_RECORD_OVERHEAD:
            return Problem(path, position, None, f"Found record size {declared - LOG_OVERHEAD} smaller than minimum "
                           f"record overhead ({MIN_RECORD_OVERHEAD})", "corrupt_batch_size")
        if declared > remaining:
            return Problem(path, position, None, f"truncated batch: declares {declared} bytes, only {remaining} remain "
                           f"(Found {remaining} invalid bytes at the end of {name})", "truncated_batch")
        f.seek(position)
        raw = f.read(declared)
    try:
        batch = make_batch(raw, position)
    except KcliError as exc:
        return Problem(path, position, None, exc.reason, "corrupt_records")
    if not batch.is_valid:
        return Problem(path, position, _safe_base(batch), batch.invalid_reason() or "invalid batch", "crc_mismatch")
    try:
        batch.records()
    except KcliError as exc:
        return Problem(path, position, _safe_base(batch), exc.reason, "corrupt_records")
    return Problem(path, position, _safe_base(batch), "the reader failed here; the batch now reads back clean",
                   "corrupt_records")


def _safe_base(batch) -> int | None:
    try:
        return batch.base_offset
    except KcliError:
        return None


def merge_partition(stats: PartitionStats, partials: list[SegmentPartial], top: int,
                    rescan: Callable[[int, int], SegmentPartial]) -> list[Problem]:
    """Fold the partials of one partition (in segment order) into ``stats``; returns their problems.
    ``rescan(i, prefix_max)`` re-reads segment ``i`` when its kept candidates cannot decide (rare)."""
    problems: list[Problem] = []
    keys: set = set()
    largest: list[LargestRecord] = []
    prefix_max: int | None = None
    for i, part in enumerate(partials):
        problems.extend(part.problems)
        stats.batches += part.batches
        stats.bytes += part.bytes
        stats.records += part.records
        stats.control_records += part.control_records
        stats.key_bytes += part.key_bytes
        stats.value_bytes += part.value_bytes
        stats.no_timestamp += part.no_timestamp
        stats.null_keys += part.null_keys
        stats.tombstones += part.tombstones
        stats.future += part.future
        stats.before_2000 += part.before_2000
        stats.out_of_order += part.out_of_order
        if part.first_offset is not None:
            stats.first_offset = part.first_offset if stats.first_offset is None else min(stats.first_offset, part.first_offset)
            stats.last_offset = part.last_offset if stats.last_offset is None else max(stats.last_offset, part.last_offset)
        if part.min_timestamp is not None:
            stats.min_timestamp = part.min_timestamp if stats.min_timestamp is None else min(stats.min_timestamp, part.min_timestamp)
            stats.max_timestamp = part.max_timestamp if stats.max_timestamp is None else max(stats.max_timestamp, part.max_timestamp)
        for name, (b, r, n) in part.codecs.items():
            c = stats.codecs.setdefault(name, CodecStats())
            c.batches += b
            c.records += r
            c.bytes += n
        keys |= part.keys
        largest.extend(part.largest)
        if prefix_max is not None and part.candidates:
            cands = part.candidates
            if part.candidates_truncated and cands[-1][0] < prefix_max:
                cands = rescan(i, prefix_max).candidates
            stamps = [ts for ts, _count in cands]
            stats.out_of_order += sum(count for _ts, count in cands[: bisect.bisect_left(stamps, prefix_max)])
        if part.max_timestamp is not None:
            prefix_max = part.max_timestamp if prefix_max is None else max(prefix_max, part.max_timestamp)
    stats.distinct_keys = len(keys)
    stats.largest_records = sorted(largest, key=LargestRecord.sort_key)[:top]
    return problems


# -- Parquet output of the records ------------------------------------------------------------------
PARQUET_EXTRA = "pip install 'kcli[parquet]'"


class ParquetUnavailableError(UsageError):
    """--output writes Parquet, which needs pyarrow: an optional extra, not installed (a usage error, exit 2:
    nothing was read)."""


def require_pyarrow() -> None:
    """Raise ParquetUnavailableError (naming the extra) unless pyarrow can be imported. pyarrow is not a core
    dependency: it installs ~170 MB for --output alone, while --sql needs only the standard library."""
    try:
        import pyarrow  # noqa: F401
        import pyarrow.parquet  # noqa: F401
    except ImportError as exc:
        raise ParquetUnavailableError(f"--output writes Parquet, which needs pyarrow: {PARQUET_EXTRA} ({exc})") \
            from None


def records_arrow_schema():
    import pyarrow as pa

    return pa.schema([
        ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
        ("key", pa.binary()), ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        ("magic", pa.int32()), ("codec", pa.string()), ("producer_id", pa.int64()), ("producer_epoch", pa.int32()),
        ("sequence", pa.int32()), ("is_transactional", pa.bool_()), ("is_control", pa.bool_()),
        ("segment", pa.string()), ("position", pa.int64()),
    ])


class _ParquetSegmentWriter:
    """The data records of one segment (control records excluded, as in ``records``) into one Parquet file."""

    FLUSH_ROWS = 65_536

    def __init__(self, path: str, seg: SegmentFile) -> None:
        self.path = path
        self.seg = seg
        self.columns: dict[str, list] = {name: [] for name in RECORD_COLUMNS}
        self.rows = 0
        self.writer = None

    def add_batch(self, batch, records, position: int, *, control: bool) -> None:
        if control:
            return
        c = self.columns
        magic = batch.magic
        ts_type = int(batch.timestamp_type)
        codec = codec_name(batch.codec_id)
        pid, epoch = batch.producer_id, batch.producer_epoch
        txn = bool(batch.is_transactional)
        for r in records:
            c["topic"].append(self.seg.topic)
            c["partition"].append(self.seg.partition)
            c["offset"].append(r.offset)
            c["timestamp"].append(None if r.timestamp < 0 else EPOCH + timedelta(milliseconds=r.timestamp))
            c["timestampType"].append(ts_type)
            c["key"].append(r.key)
            c["value"].append(r.value)
            c["headers"].append([{"key": h.key_bytes().decode("utf-8", "replace"), "value": h.value} for h in r.headers])
            c["magic"].append(magic)
            c["codec"].append(codec)
            c["producer_id"].append(pid)
            c["producer_epoch"].append(epoch)
            c["sequence"].append(r.sequence)
            c["is_transactional"].append(txn)
            c["is_control"].append(False)
            c["segment"].append(self.seg.path)
            c["position"].append(position)
        if len(c["offset"]) >= self.FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        n = len(self.columns["offset"])
        if n == 0:
            return
        schema = records_arrow_schema()
        table = pa.table({name: pa.array(self.columns[name], type=schema.field(name).type) for name in RECORD_COLUMNS},
                         schema=schema)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, schema)
        self.writer.write_table(table)
        self.rows += n
        self.columns = {name: [] for name in RECORD_COLUMNS}

    def close(self) -> int:
        self.flush()
        if self.writer is not None:
            self.writer.close()
        return self.rows


# -- the local engine --------------------------------------------------------------------------------
def default_workers() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _run_tasks(tasks: list[_SegmentTask], workers: int, progress: Callable[[int], None]) -> Iterator[SegmentPartial]:
    """Partials in task order; one process per worker (none when one worker or one task)."""
    if workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            part = scan_segment(task)
            progress(task.segment.size)
            yield part
        return
    # forkserver: workers start from a clean process, not a fork of a caller holding threads (a JVM gateway).
    # fork: workers inherit the imported modules and need no `if __name__ == "__main__"` guard in the caller.
    context = get_context("fork")
    with ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context) as pool:
        futures = [pool.submit(scan_segment, task) for task in tasks]
        for task, future in zip(tasks, futures):
            part = future.result()
            progress(task.segment.size)
            yield part


def prepare_output(output: str | os.PathLike[str] | None) -> Path | None:
    """``--output DIR`` must be new or empty: a scan never mixes its Parquet files with others."""
    if output is None:
        return None
    out = Path(output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--output {out}: exists and is not an empty directory")
    return out


def scan(paths: list[str], *, workers: int | None = None, top: int = DEFAULT_TOP, now_ms: int | None = None,
         output: str | os.PathLike[str] | None = None, progress: Callable[[int], None] | None = None) -> ScanReport:
    """Statistics per partition directory with the local engine (see the module docstring for definitions).

    ``output``: also write the data records as Parquet files (one per segment) into this new directory.
    """
    started = time.perf_counter()
    if top < 0:
        raise ValueError("top must be >= 0")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if output is not None:
        require_pyarrow()
    unreadable: list[Problem] = []
    segments = list_segments(paths, unreadable)
    out_dir = prepare_output(output)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
    n_workers = workers or default_workers()
    report = ScanReport(list(paths), "local", now, top, parallelism=n_workers,
                        output=None if out_dir is None else str(out_dir))
    tasks = [_SegmentTask(seg, top, now, None if out_dir is None else str(out_dir / _part_name(i, seg)))
             for i, seg in enumerate(segments)]
    partials = list(_run_tasks(tasks, n_workers, progress or (lambda _n: None)))
    fill_report(report, segments, partials, lambda seg, prefix: scan_segment(_SegmentTask(seg, top, now, None, prefix)))
    report.problems[:0] = unreadable
    report.seconds = time.perf_counter() - started
    return report


def _part_name(i: int, seg: SegmentFile) -> str:
    return f"part-{i:05d}-{seg.topic}-{seg.partition}-{seg.base_offset:020d}.parquet"


def fill_report(report: ScanReport, segments: list[SegmentFile], partials: list[SegmentPartial],
                rescan: Callable[[SegmentFile, int], SegmentPartial]) -> None:
    """Group segments by partition directory (listing order) and merge their partials."""
    groups: dict[str, list[int]] = {}
    for i, seg in enumerate(segments):
        groups.setdefault(seg.directory, []).append(i)
    for directory, indexes in groups.items():
        first = segments[indexes[0]]
        stats = PartitionStats(directory, first.topic, first.partition, segments=len(indexes),
                               segment_bytes=sum(segments[i].size for i in indexes))
        report.problems.extend(merge_partition(stats, [partials[i] for i in indexes], report.top,
                                               lambda j, prefix, idx=indexes: rescan(segments[idx[j]], prefix)))
        report.partitions.append(stats)
    report.partitions.sort(key=lambda p: (p.topic, p.partition, p.directory))


# -- --sql: the `records` view, the same in both engines -----------------------------------------------
# The data source's columns in its order, then three more. Where a column's type differs from the data source:
# key, value: the bytes as text when they are valid UTF-8 (NULL for a null key/value and for bytes that are not
#   valid UTF-8), so `WHERE key = 'customer-4'` compares text with text in SQLite and in Spark alike;
# headers: JSON text (``headers_json``), byte for byte what Spark's to_json writes;
# key_bytes, value_bytes: the raw bytes (BLOB / BINARY; NULL only for a null key/value): Spark's Kafka source
#   calls these `key`/`value`, the data source too;
# timestamp_ms: epoch milliseconds (NULL without a timestamp) in both engines. `timestamp` itself is epoch
#   milliseconds in SQLite and a TIMESTAMP in Spark.
SQL_COLUMNS = (
    ("topic", "TEXT"), ("partition", "INTEGER"), ("offset", "INTEGER"), ("timestamp", "INTEGER"),
    ("timestampType", "INTEGER"), ("key", "TEXT"), ("value", "TEXT"), ("headers", "TEXT"), ("magic", "INTEGER"),
    ("codec", "TEXT"), ("producer_id", "INTEGER"), ("producer_epoch", "INTEGER"), ("sequence", "INTEGER"),
    ("is_transactional", "INTEGER"), ("is_control", "INTEGER"), ("segment", "TEXT"), ("position", "INTEGER"),
    ("key_bytes", "BLOB"), ("value_bytes", "BLOB"), ("timestamp_ms", "INTEGER"),
)
SQL_COLUMN_NAMES = tuple(name for name, _kind in SQL_COLUMNS)


def utf8_text(data: bytes | None) -> str | None:
    """``data`` as text when it is valid UTF-8 (strict: no overlong forms, surrogates or code points above
    U+10FFFF, as Spark's ``try_validate_utf8``), else None."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


# JSON string escapes as Jackson (Spark's to_json) writes them: the short forms, other control characters as
# \u00XX with upper-case hex, nothing else (not DEL, not U+2028, not "/").
_JSON_ESCAPES = {i: f"\\u{i:04X}" for i in range(0x20)}
_JSON_ESCAPES.update({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r", 0x22: '\\"', 0x5C: "\\\\"})


def _json_string(text: str) -> str:
    return '"' + text.translate(_JSON_ESCAPES) + '"'


def headers_json(headers: list[tuple[str, bytes | None]]) -> str:
    """The ``headers`` column of ``--sql``: ``[{"key":"k","value":"v"},...]`` without spaces; a value is its
    text when valid UTF-8, ``{"base64":"..."}`` otherwise (the --json convention), ``null`` when null."""
    parts = []
    for key, value in headers:
        if value is None:
            rendered = "null"
        else:
            text = utf8_text(value)
            rendered = (_json_string(text) if text is not None
                        else '{"base64":"' + base64.b64encode(value).decode("ascii") + '"}')
        parts.append('{"key":' + _json_string(key) + ',"value":' + rendered + "}")
    return "[" + ",".join(parts) + "]"


def records_database(paths: list[str], *, workers: int | None = None,
                     progress: Callable[[int], None] | None = None):
    """An in-memory SQLite database with the ``records`` table (``SQL_COLUMNS``; booleans 0/1) of the data
    records under ``paths``, and the problems met reading them. LIKE is case-sensitive there, as in Spark.
    The records are decoded in parallel, each segment into a temporary SQLite file (the standard library
    only), then copied in segment order."""
    import sqlite3

    unreadable: list[Problem] = []
    segments = list_segments(paths, unreadable)
    tmp = Path(tempfile.mkdtemp(prefix="kctl-scan-sql-"))
    try:
        tasks = [_SegmentTask(seg, 0, 0, sqlite_path=str(tmp / f"part-{i:05d}.sqlite")) for i, seg in enumerate(segments)]
        problems = unreadable + [p for part in _run_tasks(tasks, workers or default_workers(), progress or (lambda _n: None))
                                 for p in part.problems]
        db = sqlite3.connect(":memory:")
        db.execute("PRAGMA case_sensitive_like = ON")  # Spark's LIKE is case-sensitive; SQLite's is not by default
        db.execute(_create_records_table("records"))
        for task in tasks:
            if Path(task.sqlite_path).exists():
                db.execute("ATTACH DATABASE ? AS part", (task.sqlite_path,))
                db.execute("INSERT INTO records SELECT * FROM part.records ORDER BY rowid")
                db.commit()
                db.execute("DETACH DATABASE part")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return db, problems


def _create_records_table(name: str) -> str:
    return f"CREATE TABLE {name} ({', '.join(f'{column!r} {kind}' for column, kind in SQL_COLUMNS)})"


class _SqliteSegmentWriter:
    """The data records of one segment as rows of the ``records`` table (``SQL_COLUMNS``), in one SQLite file."""

    FLUSH_ROWS = 65_536
    INSERT = f"INSERT INTO records VALUES ({', '.join('?' * len(SQL_COLUMNS))})"

    def __init__(self, path: str, seg: SegmentFile) -> None:
        import sqlite3

        self.seg = seg
        self.rows: list[tuple] = []
        self.written = 0
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA journal_mode = OFF")  # a scratch file: no crash safety needed
        self.db.execute("PRAGMA synchronous = OFF")
        self.db.execute(_create_records_table("records"))

    def add_batch(self, batch, records, position: int, *, control: bool) -> None:
        if control:
            return
        topic, partition, segment = self.seg.topic, self.seg.partition, self.seg.path
        magic = batch.magic
        ts_type = int(batch.timestamp_type)
        codec = codec_name(batch.codec_id)
        pid, epoch = batch.producer_id, batch.producer_epoch
        txn = int(bool(batch.is_transactional))
        rows = self.rows
        for r in records:
            key, value = r.key, r.value
            ms = None if r.timestamp < 0 else r.timestamp
            headers = headers_json([(h.key_bytes().decode("utf-8", "replace"), h.value) for h in r.headers])
            rows.append((topic, partition, r.offset, ms, ts_type, utf8_text(key), utf8_text(value), headers, magic,
                         codec, pid, epoch, r.sequence, txn, 0, segment, position, key, value, ms))
        if len(rows) >= self.FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.db.executemany(self.INSERT, self.rows)
            self.written += len(self.rows)
            self.rows = []

    def close(self) -> int:
        try:
            self.flush()
            self.db.commit()
        finally:
            self.db.close()
        return self.written


def run_sql(db, sql: str) -> tuple[list[str], list[tuple]]:
    """The column names and rows of ``sql`` on ``db``; ``ValueError`` for SQL errors."""
    import sqlite3

    try:
        cursor = db.execute(sql)
        return [d[0] for d in cursor.description or ()], [tuple(r) for r in cursor.fetchall()]
    except sqlite3.Error as exc:
        raise ValueError(f"--sql: {exc}") from None


def query(paths: list[str], sql: str, *, workers: int | None = None,
          progress: Callable[[int], None] | None = None) -> QueryResult:
    """Run ``sql`` (SQLite's dialect) over the ``records`` table of the data records under ``paths``
    (``records_database``). Raises ``ValueError`` for SQL errors."""
    started = time.perf_counter()
    db, problems = records_database(paths, workers=workers, progress=progress)
    try:
        columns, rows = run_sql(db, sql)
    finally:
        db.close()
    return QueryResult("local", sql, columns, rows, problems, time.perf_counter() - started)
