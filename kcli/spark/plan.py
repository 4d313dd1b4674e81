"""Planning a ``kafka-log`` read without Spark: options, pushed-down bounds, and segment splits.

A read becomes one split per LogSegment, and a segment larger than ``maxBytesPerPartition`` is cut at
offset-index positions (each one the start of a batch) so no task holds a whole 1 GiB segment. Bounds on
topic, partition, offset and timestamp prune partition directories and segments by name (the base offset
in a segment's file name bounds its offsets) and move each split's start with the ``.index``/``.timeindex``.
Nothing here imports pyspark or pyarrow: the planner is plain Python and tested as such.
"""

from __future__ import annotations

import bisect
import glob
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from kcli.errors import InputError, KcliError
from kcli.records.layout import (
    HEADER_SIZE_UP_TO_LAST_OFFSET_DELTA,
    LOG_OVERHEAD,
    MIN_RECORD_OVERHEAD,
    PEEK_HEAD,
    read_last_offset_delta,
)
from kcli.storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    FileKind,
    classify,
    offset_from_filename,
    parse_partition_dir_name,
    partition_dir_marker,
    segment_path,
)
from kcli.storage.index import OffsetIndex, TimeIndex
from kcli.tools.inputs import NOT_KAFKA_DIRS

DEFAULT_MAX_BYTES_PER_PARTITION = 128 * 1024 * 1024
MIN_SPLIT_BYTES = 4 * 1024 * 1024  # minPartitions never cuts splits smaller than this
TRACE_ENV = "KCLI_SPARK_TRACE"  # names a file readers append "opened <segment>" lines to (tests count them)

# The first 27 bytes every magic shares the offsets of: offset/base_offset, size, (v2: leader epoch), magic;
# for v2 also crc, attributes and last_offset_delta.
_HEAD = PEEK_HEAD
_PEEK = HEADER_SIZE_UP_TO_LAST_OFFSET_DELTA


class OptionError(KcliError):
    """An invalid ``kafka-log`` option (raised at planning, before any task runs)."""


# -- options -----------------------------------------------------------------------------------------


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name}: expected true or false, got {text!r}")


def _int(name: str, text: str, minimum: int | None = None) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise OptionError(f"option {name}: expected an integer, got {text!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"option {name}: must be >= {minimum}, got {value}")
    return value


@dataclass(frozen=True)
class ReadOptions:
    """The ``kafka-log`` options (names as Spark users write them; matched case-insensitively)."""

    paths: tuple[str, ...] = ()
    starting_offset: int | None = None  # inclusive
    ending_offset: int | None = None  # exclusive, as Spark's Kafka source
    starting_timestamp: int | None = None  # ms since the epoch; a record filter: timestamp >= it
    include_control: bool = False
    read_committed: bool = False
    validate: bool = True
    permissive: bool = False
    max_bytes_per_partition: int = DEFAULT_MAX_BYTES_PER_PARTITION
    min_partitions: int | None = None  # as Spark's Kafka source: cut splits smaller until there are this many
    trace_file: str | None = None
    # tiered storage (KIP-405, kcli.spark.remote): the remote store's fsspec URL and storage options
    remote_storage: str | None = None
    remote_storage_options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReadOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        paths = _split_paths(opts.get("path"), opts.get("paths"))
        isolation = opts.get("isolation", "read_uncommitted").strip().lower()
        if isolation not in ("read_uncommitted", "read_committed"):
            raise OptionError(f"option isolation: expected read_uncommitted or read_committed, got {isolation!r}")
        mode = opts.get("mode", "FAILFAST").strip().upper()
        if mode not in ("FAILFAST", "PERMISSIVE"):
            raise OptionError(f"option mode: expected FAILFAST or PERMISSIVE, got {mode!r}")
        remote = opts.get("remotestorage") or None
        remote_settings = tuple(sorted((k[len("remotestorage."):], v) for k, v in opts.items()
                                       if k.startswith("remotestorage.")))
        if remote is not None and isolation == "read_committed":
            raise OptionError("option remoteStorage: isolation read_committed is not supported with remote segments "
                              "yet (their .txnindex objects are not read)")
        return cls(
            paths=paths,
            starting_offset=_int("startingOffset", opts["startingoffset"], 0) if "startingoffset" in opts else None,
            ending_offset=_int("endingOffset", opts["endingoffset"], 0) if "endingoffset" in opts else None,
            starting_timestamp=_int("startingTimestamp", opts["startingtimestamp"]) if "startingtimestamp" in opts else None,
            include_control=_bool("includeControl", opts.get("includecontrol", "false")),
            read_committed=isolation == "read_committed",
            validate=_bool("validate", opts.get("validate", "true")),
            permissive=mode == "PERMISSIVE",
            max_bytes_per_partition=_int("maxBytesPerPartition",
                                         opts.get("maxbytesperpartition", str(DEFAULT_MAX_BYTES_PER_PARTITION)), 1),
            min_partitions=_int("minPartitions", opts["minpartitions"], 1) if "minpartitions" in opts else None,
            trace_file=opts.get("tracefile") or os.environ.get(TRACE_ENV) or None,
            remote_storage=remote,
            remote_storage_options=remote_settings,
        )


def _split_paths(path: str | None, paths: str | None) -> tuple[str, ...]:
    out: list[str] = []
    if paths:  # DataFrameReader.load([...]) hands Spark a JSON list under "paths"
        import json

        try:
            listed = json.loads(paths)
        except ValueError:
            listed = paths.split(",")
        out.extend(str(p) for p in (listed if isinstance(listed, list) else [listed]))
    if path:
        out.extend(p for p in path.split(","))
    out = [p.strip() for p in out if p.strip()]
    if not out:
        raise OptionError("no path: use spark.read.format('kafka-log').load(<log dir | partition dir | glob>)")
    return tuple(out)


# -- bounds (pushed-down filters and options, merged) -----------------------------------------------


@dataclass(frozen=True)
class Range:
    """Integers ``lo <= x <= hi`` (None: unbounded), optionally restricted to a set of values."""

    lo: int | None = None
    hi: int | None = None
    values: frozenset[int] | None = None

    def narrow(self, lo: int | None = None, hi: int | None = None, values: Iterable[int] | None = None) -> Range:
        new_lo = self.lo if lo is None else (lo if self.lo is None else max(self.lo, lo))
        new_hi = self.hi if hi is None else (hi if self.hi is None else min(self.hi, hi))
        new_values = self.values
        if values is not None:
            values = frozenset(values)
            new_values = values if self.values is None else self.values & values
        return Range(new_lo, new_hi, new_values)

    @property
    def low(self) -> int | None:
        """The smallest admissible value (where a seek may start); None when unbounded below."""
        if self.values is not None:
            return min((v for v in self.values if self.contains(v)), default=None)
        return self.lo

    @property
    def high(self) -> int | None:
        if self.values is not None:
            return max((v for v in self.values if self.contains(v)), default=None)
        return self.hi

    @property
    def empty(self) -> bool:
        if self.lo is not None and self.hi is not None and self.lo > self.hi:
            return True
        return self.values is not None and not any(self.contains(v) for v in self.values)

    @property
    def unbounded(self) -> bool:
        return self.lo is None and self.hi is None and self.values is None

    def contains(self, x: int | None) -> bool:
        if x is None:
            return self.unbounded  # SQL: a comparison with null is not true
        if self.lo is not None and x < self.lo:
            return False
        if self.hi is not None and x > self.hi:
            return False
        return self.values is None or x in self.values


@dataclass(frozen=True)
class Bounds:
    """What a read may return. Timestamps are in microseconds (Spark's resolution; records carry ms)."""

    topics: frozenset[str] | None = None
    partition: Range = field(default_factory=Range)
    offset: Range = field(default_factory=Range)
    timestamp: Range = field(default_factory=Range)
    # Set by pushed-down SQL filters: a corrupt row (those columns null) cannot satisfy them, so PERMISSIVE
    # drops it, exactly as Spark would have; options (startingOffset...) are not SQL and keep it.
    sql: bool = False

    @classmethod
    def from_options(cls, opts: ReadOptions) -> Bounds:
        offset = Range(opts.starting_offset, None if opts.ending_offset is None else opts.ending_offset - 1)
        timestamp = Range(None if opts.starting_timestamp is None else opts.starting_timestamp * 1000)
        return cls(offset=offset, timestamp=timestamp)

    @property
    def empty(self) -> bool:
        return (self.topics is not None and not self.topics) or self.partition.empty or self.offset.empty or (
            self.timestamp.empty)

    def with_topics(self, topics: Iterable[str]) -> Bounds:
        topics = frozenset(topics)
        return replace(self, topics=topics if self.topics is None else self.topics & topics)


# -- inputs: partition directories -------------------------------------------------------------------


@dataclass(frozen=True)
class PartitionDir:
    """One partition directory: its topic-partition (from the name) and the base offsets of its .log files."""

    path: str
    topic: str
    partition: int | None
    bases: tuple[int, ...]  # every segment of the directory, sorted
    selected: tuple[int, ...]  # the segments to read (all, unless single .log files were named)


def expand_paths(paths: Iterable[str]) -> list[PartitionDir]:
    """Log dirs, partition dirs, .log files or globs of them -> partition dirs, each once, sorted."""
    dirs: dict[str, set[int] | None] = {}  # abs dir -> selected bases (None: all)

    def add_dir(directory: Path) -> None:
        dirs[str(directory)] = None

    def add_file(file: Path) -> None:
        key = str(file.parent)
        if key in dirs and dirs[key] is None:
            return
        dirs.setdefault(key, set()).add(offset_from_filename(file.name))  # type: ignore[union-attr]

    def walk(directory: Path, named: bool) -> None:
        children = sorted(directory.iterdir(), key=lambda p: p.name)
        has_segments = any(c.is_file() and classify(c) is FileKind.LOG for c in children)
        subdirs = [c for c in children if c.is_dir()]
        if has_segments or (not subdirs and parse_partition_dir_name(directory.name) is not None):
            # Renamed dirs (-delete, -future, -stray) are not part of the live log: read them only when named;
            # nor is a directory of a log dir not named <topic>-<partition> (Kafka refuses to load it), as in
            # kcli.tools.inputs
            if named or (partition_dir_marker(directory.name) is None
                         and parse_partition_dir_name(directory.name) is not None):
                add_dir(directory)
            return
        if directory.name in NOT_KAFKA_DIRS and not named:
            return
        for sub in subdirs:
            walk(sub, False)

    for given in paths:
        matches = sorted(glob.glob(given)) if glob.has_magic(given) else [given]
        if not matches:
            raise InputError("no file or directory matches", path=given)
        for match in matches:
            path = Path(os.path.abspath(match))
            if not path.exists():
                raise InputError("No such file or directory", path=given)
            if path.is_file():
                if classify(path) is not FileKind.LOG:
                    raise InputError("not a .log segment, a partition dir or a log dir", path=match)
                add_file(path)
            else:
                walk(path, True)

    out = []
    for directory, selected in dirs.items():
        bases = sorted(offset_from_filename(p.name) for p in Path(directory).iterdir()
                       if p.is_file() and classify(p) is FileKind.LOG)
        name = Path(directory).name
        parsed = parse_partition_dir_name(name)
        topic, partition = parsed if parsed else (name, None)
        chosen = tuple(bases) if selected is None else tuple(sorted(selected))
        out.append(PartitionDir(directory, topic, partition, tuple(bases), chosen))
    out.sort(key=lambda d: (d.topic, -1 if d.partition is None else d.partition, d.path))
    return out


# -- splits -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentSplit:
    """Bytes [start, end) of one segment (end None: to the end of the file); start is a batch start."""

    topic: str
    partition: int | None
    directory: str
    segment: str
    base_offset: int
    next_base_offset: int | None  # the next segment's base offset: an upper bound on this one's offsets
    segment_bases: tuple[int, ...]  # of the whole partition, for the .txnindex walk of read_committed
    start: int
    end: int | None
    # a remote segment (tiered storage): ``segment`` is the object's URL, fetched with these storage options, and
    # offsets from ``below`` on are left to the local segments
    remote_options: tuple[tuple[str, str], ...] | None = None
    below: int | None = None


def plan(dirs: Iterable[PartitionDir], bounds: Bounds, max_bytes: int,
         min_partitions: int | None = None) -> list[SegmentSplit]:
    """The splits of a read. ``min_partitions`` (the cluster's parallelism) lowers ``max_bytes`` to the bytes
    to read over that many, not below MIN_SPLIT_BYTES, so a few large segments still keep every core busy."""
    if bounds.empty:
        return []
    chosen = [pdir for pdir in dirs
              if (bounds.topics is None or pdir.topic in bounds.topics)
              and (bounds.partition.unbounded or bounds.partition.contains(pdir.partition))]
    if min_partitions and min_partitions > 1:
        total = 0
        for pdir in chosen:
            for base in pdir.selected:
                try:
                    total += segment_path(pdir.path, base, LOG_SUFFIX).stat().st_size
                except OSError:
                    pass
        max_bytes = min(max_bytes, max(MIN_SPLIT_BYTES, -(-total // min_partitions)))
    out: list[SegmentSplit] = []
    for pdir in chosen:
        for base in pdir.selected:
            out.extend(_plan_segment(pdir, base, bounds, max_bytes))
    return out


def _plan_segment(pdir: PartitionDir, base: int, bounds: Bounds, max_bytes: int) -> list[SegmentSplit]:
    i = bisect.bisect_left(pdir.bases, base)
    next_base = pdir.bases[i + 1] if i + 1 < len(pdir.bases) else None
    log_path = segment_path(pdir.path, base, LOG_SUFFIX)
    size = log_path.stat().st_size
    if size == 0:
        return []
    # Pruned by name: offsets of this segment lie in [base, next_base).
    low, high = bounds.offset.low, bounds.offset.high
    if (high is not None and base > high) or (low is not None and next_base is not None and next_base <= low):
        return []
    if bounds.offset.values is not None and low is None:
        return []  # no admissible offset at all
    ts_low = bounds.timestamp.low
    ts_low_ms = None if ts_low is None else -(-ts_low // 1000)  # ceil: records carry ms
    time_index_path = segment_path(pdir.path, base, TIME_INDEX_SUFFIX)
    index_path = segment_path(pdir.path, base, INDEX_SUFFIX)
    target = low if low is not None and low > base else None
    if ts_low_ms is not None and time_index_path.is_file():
        try:
            with TimeIndex(time_index_path, base) as tindex:
                # The last entry of a rolled segment is its max timestamp (Kafka's ListOffsets relies on it too);
                # the active (last) one may lag.
                if next_base is not None and tindex.entry_count and tindex.last_entry.timestamp < ts_low_ms:
                    return []
                found = tindex.lookup_by_timestamp(ts_low_ms)
            if found.timestamp >= 0 and found.offset > base:
                target = max(target or 0, found.offset)
        except KcliError:
            pass  # a damaged time index only costs the seek
    start = 0
    fd = os.open(log_path, os.O_RDONLY) if (target is not None or size > max_bytes) and index_path.is_file() else None
    if fd is None:
        return [_split(pdir, base, next_base, log_path, 0, None)]
    try:
        with OffsetIndex(index_path, base) as index:
            if target is not None:
                entry = index.lookup(target)
                head = _peek(fd, entry.position, size)
                # Trust the index only when it points at a batch starting at or before the target.
                if entry.position > 0 and head is not None and head[0] <= target:
                    start = entry.position
            cuts = _cuts(index, fd, size, start, max_bytes) if size - start > max_bytes else []
    except KcliError:
        start, cuts = 0, []
    finally:
        os.close(fd)
    edges = [start, *(position for position, _ in cuts)]
    firsts = [None, *(first for _, first in cuts)]
    splits = []
    for k, position in enumerate(edges):
        if k > 0 and high is not None and firsts[k] is not None and firsts[k] > high:
            break  # this split and the rest start past the last wanted offset
        end = edges[k + 1] if k + 1 < len(edges) else None
        splits.append(_split(pdir, base, next_base, log_path, position, end))
    return splits


def _split(pdir: PartitionDir, base: int, next_base: int | None, log_path: Path, start: int, end: int | None):
    return SegmentSplit(pdir.topic, pdir.partition, pdir.path, str(log_path), base, next_base, pdir.bases, start, end)


def _peek(fd: int, position: int, size: int) -> tuple[int, int, int, int | None] | None:
    """(offset field, size field, magic, v2 last offset delta) of the batch header at ``position``."""
    if position < 0 or position + _PEEK > size:
        return None
    head = os.pread(fd, _PEEK, position)
    if len(head) < _PEEK:
        return None
    offset, batch_size, _epoch, magic = _HEAD.unpack_from(head)
    if magic not in (0, 1, 2) or batch_size < MIN_RECORD_OVERHEAD or position + LOG_OVERHEAD + batch_size > size:
        return None
    delta = read_last_offset_delta(head) if magic == 2 else None
    return offset, batch_size, magic, delta


def _cuts(index: OffsetIndex, fd: int, size: int, start: int, max_bytes: int) -> list[tuple[int, int]]:
    """(position, base offset) of the cut points: index entries at least ``max_bytes`` apart whose position
    holds a v2 batch containing the entry's offset. Anything else is not cut at, so a stale or damaged
    index can make splits larger, never lose or repeat a batch."""
    cuts: list[tuple[int, int]] = []
    last = start
    for entry in index.entries():
        if entry.position - last < max_bytes or entry.position >= size:
            continue
        head = _peek(fd, entry.position, size)
        if head is None or head[2] != 2 or head[3] is None:
            continue
        first, _size, _magic, delta = head
        if not first <= entry.offset <= first + delta:
            continue
        if cuts and first <= cuts[-1][1]:
            continue
        cuts.append((entry.position, first))
        last = entry.position
    return cuts
