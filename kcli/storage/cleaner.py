"""Cleaner: offline log compaction of one partition directory with Kafka's cleaner semantics.

An offset map (MD5 of the key -> last offset, 24 bytes an entry as Kafka's SkimpyOffsetMap counts, bounded by
``max_memory``) is built over the dirty section; segments below its end are grouped up to segment.bytes, each
group filtered (latest record per key, tombstones until their delete horizon, aborted transactional data and
obsolete markers removed, a producer's last batch kept empty) into ``<base>.log.cleaned`` with indexes from the
shared ``SegmentIndexes``, then swapped in crash-safely (``.cleaned`` -> ``.swap``, old files -> ``.deleted``,
``.swap`` -> final names) and ``cleaner-offset-checkpoint`` updated. When the dirty section does not fit in the
map, ``apply_compaction`` cleans in several passes, each up to the last fully mapped offset.

The per-record work (walking a batch's records, hashing keys, the map itself, the keep/drop decisions and the
copy of kept records) runs in the optional C extension ``kcli.storage._cleaner`` when it is built: a map of
24-byte slots, each batch decompressed once a pass and walked once in C. The pure-Python path stays the
reference: ``KCLI_NO_EXTENSIONS=1`` forces it, anything the extension rejects falls back to it, and
tests/tools/test_compact_accel.py holds the two byte-identical.
Kafka: storage/.../log/{Cleaner,CleanedTransactionMetadata,SkimpyOffsetMap}.java, MemoryRecords.filterTo.
"""

from __future__ import annotations

import hashlib
from contextlib import AbstractContextManager, nullcontext
import multiprocessing
import os
import signal
import sys
import threading
from concurrent.futures import ProcessPoolExecutor
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcli.errors import InputError, KcliError
from kcli.records import Record, RecordBatch
from kcli.records.batch import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    HEADER,
    MAGIC_V2,
    build_record_batch,
    retain_records,
)
from kcli.records.compression import KAFKA_GZIP_LEVEL, Codec, compress, decompress_v2
from kcli.records.crc import crc32c
from kcli.records.layout import ATTRIBUTES_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET, RECORD_BATCH_OVERHEAD, stamp_crc
from kcli.records.legacy import build_legacy_messages
from kcli.records.record_set import Batch, make_batch
from kcli.records.control import ControlRecordType, parse_control_type
from kcli.storage.checked import CheckedBatchReader
from kcli.storage.checkpoint import read_partition_entry, write_partition_entry
from kcli.storage.files import (
    CLEANED_SUFFIX,
    CLEANER_OFFSET_CHECKPOINT,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    FileKind,
    classify,
    fsync_dir,
    offset_from_filename,
    segment_path,
)
from kcli.storage.index import AbortedTxn, TransactionIndex
from kcli.storage.log_config import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_SEGMENT_BYTES,
    DEFAULT_SEGMENT_INDEX_BYTES,
    LogConfig,
)
from kcli.storage.producer_state import ProducerStateManager
from kcli.storage.recovery import CRASH_AFTER_ENV
from kcli.storage.segment import FileBatchReader, SegmentIndexes

OFFSET_MAP_ENTRY_BYTES = 24  # MD5 (16) + offset (8), as SkimpyOffsetMap
OFFSET_MAP_LOAD_FACTOR = 0.9
DEFAULT_MAX_MEMORY = 128 * 1024 * 1024  # log.cleaner.dedupe.buffer.size
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_CONFIG_KEYS = {
    "delete.retention.ms": "delete_retention_ms",
    "min.compaction.lag.ms": "min_compaction_lag_ms",
    "segment.bytes": "segment_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "segment.index.bytes": "segment_index_bytes",
}


@dataclass(frozen=True)
class CleanerConfig:
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES

    @classmethod
    def from_overrides(cls, overrides: dict[str, str]) -> CleanerConfig:
        """Topic configs by their Kafka names (`delete.retention.ms=0`); unknown names or non-integers refused."""
        values: dict[str, int] = {}
        for key, text in overrides.items():
            if key not in _CONFIG_KEYS:
                raise ValueError(f"unsupported config {key!r} (supported: {', '.join(sorted(_CONFIG_KEYS))})")
            try:
                value = int(str(text).strip())
            except ValueError:
                raise ValueError(f"{key} must be an integer, got {text!r}") from None
            if value < 0:
                raise ValueError(f"{key} must not be negative, got {value}")
            values[_CONFIG_KEYS[key]] = value
        return cls(**values)

    @classmethod
    def from_log_config(cls, config: LogConfig) -> CleanerConfig:
        """The cleaner's settings of a topic's LogConfig (a broker cleaning its compacted topics)."""
        return cls(**{attribute: config.get(name) for name, attribute in _CONFIG_KEYS.items()})

    @property
    def log_config(self) -> LogConfig:
        return LogConfig(segment_bytes=self.segment_bytes, index_interval_bytes=self.index_interval_bytes,
                         segment_index_bytes=self.segment_index_bytes)

    def to_json(self) -> dict[str, int]:
        return {name: getattr(self, attr) for name, attr in _CONFIG_KEYS.items()}


_EXACT_KEY_BYTES = 16  # keys shorter than an MD5 digest are their own map key: exact, and no hashing cost
_SLOT_KEY_BYTES = 16  # a compiled map slot's key part: an MD5 digest, or a shorter key with its length in byte 15


def map_key(key: bytes, _md5: Any = hashlib.md5) -> bytes:
    """The offset map's key: the key itself when shorter than 16 bytes, else its MD5 digest (16 bytes, so the
    two kinds never meet). Kafka hashes every key; short keys here are exact, which only removes collisions."""
    return key if len(key) < _EXACT_KEY_BYTES else _md5(key).digest()


_UNLOADED: Any = object()
_native_module: Any = _UNLOADED


def native_cleaner() -> Any | None:
    """The compiled ``kcli.storage._cleaner``, or None: not built, or ``KCLI_NO_EXTENSIONS`` set (read once)."""
    global _native_module
    if _native_module is _UNLOADED:
        _native_module = None
        if not os.environ.get("KCLI_NO_EXTENSIONS"):
            try:
                from kcli.storage import _cleaner
            except ImportError:  # not built (no compiler at install time): the pure path
                _cleaner = None
            _native_module = _cleaner
    return _native_module


class OffsetMap:
    """Key -> last offset with Kafka's capacity: memory / 24 slots, 90 % of them usable.

    Compiled: ``native`` holds the entries in 24-byte slots (Kafka's SkimpyOffsetMap layout, grown by
    doubling up to ``max_memory``). Pure: ``entries``, a dict keyed by ``map_key``."""

    def __init__(self, max_memory: int) -> None:
        slots = max_memory // OFFSET_MAP_ENTRY_BYTES
        self.capacity = int(slots * OFFSET_MAP_LOAD_FACTOR)
        self.entries: dict[bytes, int] = {}
        self.latest_offset = -1
        self.max_memory = max_memory
        module = native_cleaner()
        self.native: Any = module.OffsetMap(max_memory) if module is not None else None

    def __getstate__(self) -> dict[str, Any]:
        """Picklable (a plan shipped to Spark executors): the compiled map travels as its ``dump``."""
        state = self.__dict__.copy()
        native = state.pop("native")
        state["native_dump"] = None if native is None else native.dump()
        state["native_keyless"] = None if native is None else native.keyless
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        dump = state.pop("native_dump", None)
        keyless = state.pop("native_keyless", None)
        self.__dict__.update(state)
        module = native_cleaner()
        self.native = module.OffsetMap(self.max_memory) if module is not None and dump is not None else None
        if dump is None:
            return
        if self.native is not None:
            self.native.merge(dump)
            self.native.keyless = keyless if keyless is not None else 1  # unknown: as if keyless records were met
            return
        for i in range(0, len(dump), OFFSET_MAP_ENTRY_BYTES):  # unpickled where the extension is missing
            slot, length = dump[i:i + _SLOT_KEY_BYTES], dump[i + _SLOT_KEY_BYTES - 1]
            short = length < _EXACT_KEY_BYTES and not slot[length:_SLOT_KEY_BYTES - 1].strip(b"\0")
            self.entries[slot[:length] if short else slot] = int.from_bytes(
                dump[i + _SLOT_KEY_BYTES:i + OFFSET_MAP_ENTRY_BYTES], sys.byteorder, signed=True)

    @classmethod
    def unbounded(cls) -> OffsetMap:
        """A map that never fills up (a worker's share of a map, checked against the real one when merged)."""
        return cls(1 << 62)

    @staticmethod
    def hash(key: bytes) -> bytes:
        return map_key(key)

    def get(self, key: bytes) -> int:
        if self.native is not None:
            return self.native.get(key)
        return self.entries.get(map_key(key), -1)

    def put(self, key: bytes, offset: int) -> None:
        """Map ``key`` to ``offset``; the caller checks ``len(self) < capacity`` first."""
        if self.native is not None:
            self.native.put(key, offset)
        else:
            self.entries[key if len(key) < _EXACT_KEY_BYTES else map_key(key)] = offset

    def export(self) -> bytes | dict[bytes, int]:
        """The entries, to ``update`` another map with (what a worker process sends back)."""
        return self.native.dump() if self.native is not None else self.entries

    @staticmethod
    def exported_len(entries: bytes | dict[bytes, int]) -> int:
        return len(entries) if isinstance(entries, dict) else len(entries) // OFFSET_MAP_ENTRY_BYTES

    def update(self, entries: bytes | dict[bytes, int]) -> None:
        """Put every entry ``export`` gave (of a map of the same kind); the caller checks capacity."""
        if self.native is not None:
            assert isinstance(entries, bytes)
            self.native.merge(entries)
        else:
            assert isinstance(entries, dict)
            self.entries.update(entries)

    @property
    def memory_bytes(self) -> int:
        """Bytes the map takes: the slot table (compiled), or the dict with its key and offset objects (pure)."""
        if self.native is not None:
            return self.native.memory_bytes
        size = sys.getsizeof(self.entries)
        return size + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in self.entries.items())

    def __len__(self) -> int:
        if self.native is not None:
            return len(self.native)
        return len(self.entries)


@dataclass(frozen=True)
class Segment:
    base_offset: int
    size: int
    next_offset: int  # base offset when empty
    max_timestamp: int
    batches: int = -1  # -1: not counted
    transactional: bool = True  # holds a transactional or control batch (True: not known)


@dataclass
class GroupPlan:
    """One group of segments rewritten into one segment named after the first."""

    base_offset: int
    segments: list[int]
    end_offset: int  # next offset of the group's last segment
    bytes_before: int = 0
    bytes_after: int = 0
    batches_before: int = 0
    batches_after: int = 0
    records_before: int = 0
    records_kept: int = 0
    records_dropped: int = 0
    keyless_dropped: int = 0
    tombstones_kept: int = 0
    tombstones_dropped: int = 0
    aborted_dropped: int = 0
    markers_dropped: int = 0
    empty_batches_kept: int = 0
    horizons_set: int = 0
    changed: bool = False
    counted: bool = True  # False: planned without the counting pass; apply finds out while rewriting

    @property
    def to_rewrite(self) -> bool:
        return self.changed or not self.counted

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class CompactionPlan:
    partition_dir: Path
    now_ms: int
    config: CleanerConfig
    include_active: bool
    max_memory: int
    log_start_offset: int
    log_end_offset: int
    first_dirty_offset: int
    uncleanable_offset: int  # the dirty section is [first_dirty_offset, uncleanable_offset)
    end_offset: int  # this pass cleans [log start, end_offset); the new cleaner checkpoint
    keys_mapped: int
    offset_map: OffsetMap | SupersededOffsets
    aborted: list[AbortedTxn]
    last_batches: dict[int, tuple[int, int]]  # producer -> (last data offset or -1, epoch)
    groups: list[GroupPlan] = field(default_factory=list)
    segments: dict[int, Segment] = field(default_factory=dict)  # base offset -> segment, as planned
    legacy_delete_horizon_ms: int = 0  # magic 0/1 tombstones in segments modified up to this go

    @property
    def complete(self) -> bool:
        """False when the map filled up: further passes are needed for the rest of the dirty section."""
        return self.end_offset >= self.uncleanable_offset

    @property
    def offset_map_bytes(self) -> int:
        """Memory of the offset map (0 for verdicts computed elsewhere); divided by keys_mapped: bytes a key."""
        return self.offset_map.memory_bytes if isinstance(self.offset_map, OffsetMap) else 0

    @property
    def changed_groups(self) -> list[GroupPlan]:
        return [g for g in self.groups if g.changed]

    def total(self, name: str) -> int:
        return sum(getattr(g, name) for g in self.groups)

    def to_json(self) -> dict[str, Any]:
        totals = ("bytes_before", "bytes_after", "records_before", "records_kept", "records_dropped", "keyless_dropped",
                  "tombstones_kept", "tombstones_dropped", "aborted_dropped", "markers_dropped", "empty_batches_kept")
        return {
            "partition": str(self.partition_dir),
            "log_start_offset": self.log_start_offset,
            "log_end_offset": self.log_end_offset,
            "first_dirty_offset": self.first_dirty_offset,
            "uncleanable_offset": self.uncleanable_offset,
            "end_offset": self.end_offset,
            "complete": self.complete,
            "keys_mapped": self.keys_mapped,
            **{name: self.total(name) for name in totals},
            "groups": [g.to_json() for g in self.groups],
        }


@dataclass
class CompactionResult:
    partition_dir: Path
    passes: list[CompactionPlan]
    checkpoint: int | None

    def total(self, name: str) -> int:
        return sum(p.total(name) for p in self.passes)

    @property
    def groups_rewritten(self) -> int:
        return sum(len(p.changed_groups) for p in self.passes)


# -- planning ------------------------------------------------------------------------------------------

def list_segments(directory: Path, state: ProducerStateManager | None = None, *,
                  checked: bool = False) -> list[Segment]:
    """The partition's segments (every batch header read); ``state`` is fed every batch on the way.
    ``checked``: through the checked reading path (a damaged batch raises CorruptBatchError)."""
    segments = []
    unpack = HEADER.unpack_from
    for path in sorted(p for p in directory.iterdir() if classify(p) is FileKind.LOG):
        base = offset_from_filename(path.name)
        reader = CheckedBatchReader(path) if checked else FileBatchReader(path)
        next_offset, max_ts = base, -1
        batches, transactional = 0, False
        # Checked: a plain valid v2 batch is checked straight from the window and comes without a Batch; its
        # header fields are all the listing needs (a Batch is built only for a producer's batches and others).
        spans = reader.checked_spans(batches=False) if checked else (
            (chunk, local, total, None) for chunk, local, total in reader.spans())
        for chunk, local, total, batch in spans:
            if batch is None and total >= RECORD_BATCH_OVERHEAD and chunk[local + MAGIC_OFFSET] == MAGIC_V2:
                first, _, _, _, _, attributes, delta, _, max_timestamp, pid, _, _, _ = unpack(chunk, local)
                if pid >= 0 and state is not None:
                    state.update(RecordBatch(bytes(chunk[local:local + total]), reader.window_position + local))
                next_offset = first + delta + 1
                if max_timestamp > max_ts:
                    max_ts = max_timestamp
                batches += 1
                if attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL):
                    transactional = True
                continue
            if batch is None:
                batch = make_batch(bytes(chunk[local:local + total]), reader.window_position + local)
            if state is not None and isinstance(batch, RecordBatch):  # magic 0/1 messages have no producer
                state.update(batch)
            next_offset = batch.last_offset + 1
            max_ts = max(max_ts, batch.max_timestamp)
            batches += 1
            transactional = transactional or batch.is_transactional or batch.is_control
        if reader.valid_bytes != path.stat().st_size:
            raise KcliError(f"invalid bytes after byte {reader.valid_bytes}: run `kctl recover` first",
                            path=str(path), position=reader.valid_bytes)
        segments.append(Segment(base, path.stat().st_size, next_offset, max_ts, batches, transactional))
    return segments


def _batches(directory: Path, segment: Segment) -> Iterator[Batch]:
    return iter(FileBatchReader(segment_path(directory, segment.base_offset, LOG_SUFFIX)))


def _key_entries(batch: Batch, payload: bytes | None = None) -> list[tuple[int, bytes | None, bool]]:
    if isinstance(batch, RecordBatch):
        return batch.key_entries(payload)
    return [(r.offset, r.key, r.value is None) for r in batch.records()]  # magic 0/1: deep iteration


def write_cleaner_checkpoint(directory: Path, offset: int) -> bool:
    """Set the partition's entry in its log dir's ``cleaner-offset-checkpoint``; False if the directory is not
    named like a partition (then there is no entry to keep)."""
    return write_partition_entry(directory, CLEANER_OFFSET_CHECKPOINT, offset)


def _aborted_transactions(directory: Path, segments: list[Segment]) -> list[AbortedTxn]:
    found = []
    for segment in segments:
        path = segment_path(directory, segment.base_offset, TXN_INDEX_SUFFIX)
        if path.exists():
            with TransactionIndex(path, segment.base_offset) as index:
                found.extend(index.entries())
    return sorted(found, key=lambda t: (t.first_offset, t.last_offset))


class _AbortedTracker:
    """Which transactional batches belong to aborted transactions, fed in offset order (buildOffsetMap)."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self.pending = list(aborted)
        self.ongoing: dict[int, AbortedTxn] = {}

    def is_aborted(self, batch: RecordBatch) -> bool:
        while self.pending and self.pending[0].first_offset <= batch.last_offset:
            txn = self.pending.pop(0)
            self.ongoing[txn.producer_id] = txn
        pid = batch.producer_id
        if batch.is_control:
            self.ongoing.pop(pid, None) if _is_abort(batch) else None
            return False
        return batch.is_transactional and pid in self.ongoing


def _is_abort(batch: RecordBatch) -> bool:
    records = batch.records()
    return bool(records) and parse_control_type(records[0].key) is ControlRecordType.ABORT


def iter_visible_records(partition_dir: str | os.PathLike[str], *,
                         checked: bool = False) -> Iterator[tuple[RecordBatch, Record]]:
    """Every data record a read_committed consumer sees: control batches and aborted transactions skipped.
    ``checked``: every batch through the checked reading path (a damaged one raises CorruptBatchError with its
    file and byte position), for the offline tools that answer from the records."""
    directory = Path(partition_dir)
    segments = list_segments(directory, checked=checked)
    tracker = _AbortedTracker(_aborted_transactions(directory, segments))
    for segment in segments:
        batches = (CheckedBatchReader(segment_path(directory, segment.base_offset, LOG_SUFFIX)) if checked
                   else _batches(directory, segment))
        for batch in batches:
            if tracker.is_aborted(batch) or batch.is_control:
                continue
            for record in batch.records():
                yield batch, record


def plan_compaction(partition_dir: str | os.PathLike[str], *, now_ms: int, config: CleanerConfig | None = None,
                    include_active: bool = False, max_memory: int = DEFAULT_MAX_MEMORY,
                    first_dirty_offset: int | None = None, count: bool = True, jobs: int = 1) -> CompactionPlan:
    """One cleaning pass: what it would keep and drop, per group. Changes nothing.

    ``first_dirty_offset`` defaults to the partition's ``cleaner-offset-checkpoint`` entry (reset to the log start
    when outside the log, as Kafka does). ``count=False`` skips filtering every group to count (a full decode
    of the log): ``apply_compaction`` then counts while it rewrites, so plan-and-apply reads the log once less.
    """
    plan = prepare_compaction(partition_dir, now_ms=now_ms, config=config, include_active=include_active,
                              max_memory=max_memory, first_dirty_offset=first_dirty_offset)
    offset_map = _build_offset_map(plan.partition_dir, list(plan.segments.values()), plan.first_dirty_offset,
                                   plan.uncleanable_offset, plan.aborted, max_memory, jobs)
    return _finish_plan(plan, offset_map, count=count, jobs=jobs)


def prepare_compaction(partition_dir: str | os.PathLike[str], *, now_ms: int, config: CleanerConfig | None = None,
                       include_active: bool = False, max_memory: int = DEFAULT_MAX_MEMORY,
                       first_dirty_offset: int | None = None) -> CompactionPlan:
    """Everything of a plan but the offset map and groups (one pass over batch headers): the dirty section
    [first_dirty_offset, uncleanable_offset), aborted transactions, producers' last batches."""
    directory = Path(partition_dir)
    if not directory.is_dir():
        raise InputError("not a partition directory", path=str(directory))
    config = config or CleanerConfig()
    # Producers' last batches over the whole log (ProducerStateManager.activeProducers), gathered in the same
    # pass that lists the segments.
    state = ProducerStateManager()
    # Checked (CRC, magic, header, offsets): a damaged batch stops the plan before anything is rewritten; the
    # rewrite would otherwise drop it as superseded or copy its records under a fresh CRC, hiding the damage.
    segments = list_segments(directory, state, checked=True)
    if not segments:
        raise InputError("no .log segments in this directory", path=str(directory))
    log_start, log_end = segments[0].base_offset, segments[-1].next_offset
    dirty = read_partition_entry(directory, CLEANER_OFFSET_CHECKPOINT) if first_dirty_offset is None else first_dirty_offset
    if dirty is None or dirty < log_start or dirty > log_end:
        dirty = log_start
    # firstUncleanableOffset: the active segment, and the first segment younger than min.compaction.lag.ms.
    uncleanable = log_end if include_active else segments[-1].base_offset
    if config.min_compaction_lag_ms > 0:
        for segment in segments:
            if segment.next_offset > dirty and segment.max_timestamp > now_ms - config.min_compaction_lag_ms:
                uncleanable = min(uncleanable, segment.base_offset)
                break
    last_batches = {e.producer_id: (e.last_offset, e.producer_epoch) for e in state.entries()}
    # The last stable offset: an open transaction's data is never cleaned.
    open_txns = [e.current_txn_first_offset for e in state.entries() if e.current_txn_first_offset >= 0]
    if open_txns:
        lso = min(open_txns)
        uncleanable = min(uncleanable, max((s.base_offset for s in segments if s.base_offset <= lso), default=log_start))
    uncleanable = max(uncleanable, dirty)
    aborted = _aborted_transactions(directory, segments)
    plan = CompactionPlan(directory, now_ms, config, include_active, max_memory, log_start, log_end, dirty,
                          uncleanable, dirty, 0, OffsetMap(0), aborted, last_batches)
    plan.segments = {s.base_offset: s for s in segments}
    clean = [s for s in segments if s.next_offset <= dirty]  # logSegments(0, firstDirtyOffset).lastOption
    if clean:
        plan.legacy_delete_horizon_ms = _mtime_ms(directory, clean[-1]) - config.delete_retention_ms
    return plan


def _mtime_ms(directory: Path, segment: Segment) -> int:
    return int(segment_path(directory, segment.base_offset, LOG_SUFFIX).stat().st_mtime * 1000)


def _finish_plan(plan: CompactionPlan, offset_map: OffsetMap | SupersededOffsets, *, count: bool,
                 jobs: int) -> CompactionPlan:
    dirty = plan.first_dirty_offset
    end = offset_map.latest_offset + 1 if offset_map.latest_offset >= dirty else dirty
    offset_map.latest_offset = end - 1  # an empty dirty section still cleans [log start, end) of expired tombstones
    plan.end_offset, plan.keys_mapped, plan.offset_map = end, len(offset_map), offset_map
    to_clean = [s for s in plan.segments.values() if s.base_offset < end]
    plan.groups = [GroupPlan(group[0].base_offset, [s.base_offset for s in group], group[-1].next_offset,
                             counted=count) for group in _group_segments(to_clean, plan.config.segment_bytes)]
    if count:
        for i, counted in _run_groups(plan, range(len(plan.groups)), jobs, write=False):
            plan.groups[i] = counted
    return plan


class SupersededOffsets:
    """The offset map's verdicts computed elsewhere (e.g. by Spark for a key space no single map holds): the
    offsets, ascending, of records whose key has a later record in the dirty section. Consumed once, in order,
    so it may stream from a sorted source of any size."""

    def __init__(self, offsets: Iterable[int], latest_offset: int, keys: int = 0) -> None:
        self._offsets = iter(offsets)
        self._next = -1
        self._asked = -1
        self.latest_offset = latest_offset
        self.keys = keys

    def __len__(self) -> int:
        return self.keys

    def superseded(self, offset: int) -> bool:
        if offset < self._asked:
            raise RuntimeError("superseded offsets are consumed once, in ascending order: plan again to re-read")
        self._asked = offset
        while self._next < offset:
            self._next = next(self._offsets, 1 << 63)
        return self._next == offset


def plan_with_superseded(plan: CompactionPlan, superseded: SupersededOffsets, *, count: bool = True) -> CompactionPlan:
    """Complete a ``prepare_compaction`` plan whose map verdicts come from ``superseded`` (covering the whole
    dirty section: ``superseded.latest_offset`` is ``uncleanable_offset - 1``)."""
    return _finish_plan(plan, superseded, count=count, jobs=1)


def _build_offset_map(directory: Path, segments: list[Segment], start: int, stop: int, aborted: list[AbortedTxn],
                      max_memory: int, jobs: int = 1) -> OffsetMap:
    """Kafka's buildOffsetMap over [start, stop): stops at the last batch that fits when the map fills up.

    With ``jobs`` > 1 each segment's map is built by a worker process and merged here in offset order; a
    segment whose keys might not fit is redone here record by record, so the result is the sequential one.
    """
    offset_map = OffsetMap(max_memory)
    wanted = [s for s in segments if s.next_offset > start and s.base_offset < stop]
    if min(jobs, len(wanted)) > 1 and "fork" in multiprocessing.get_all_start_methods():
        with _worker_pool(min(jobs, len(wanted))) as pool:
            futures = [pool.submit(_segment_map, directory, s, start, stop, aborted) for s in wanted]
            for n, (segment, future) in enumerate(zip(wanted, futures)):
                entries, latest, keyless = future.result()
                if len(offset_map) + OffsetMap.exported_len(entries) > offset_map.capacity:
                    for later in futures[n + 1:]:
                        later.cancel()
                    _map_segments(offset_map, directory, wanted[n:], start, stop, aborted)
                    return offset_map
                offset_map.update(entries)
                offset_map.latest_offset = max(offset_map.latest_offset, latest)
                if offset_map.native is not None:
                    offset_map.native.keyless += keyless
        return offset_map
    _map_segments(offset_map, directory, wanted, start, stop, aborted)
    return offset_map


def _segment_map(directory: Path, segment: Segment, start: int, stop: int,
                 aborted: list[AbortedTxn]) -> tuple[bytes | dict[bytes, int], int, int]:
    """One segment's map, unbounded (a worker's share of _build_offset_map), with its count of keyless records
    (compiled map only)."""
    offset_map = OffsetMap.unbounded()
    _map_segments(offset_map, directory, [segment], start, stop, aborted)
    native = offset_map.native
    return offset_map.export(), offset_map.latest_offset, 0 if native is None else native.keyless


def _map_segments(offset_map: OffsetMap, directory: Path, segments: list[Segment], start: int, stop: int,
                  aborted: list[AbortedTxn]) -> None:
    if not segments:
        return
    # Transactions whose ABORT marker lies before these segments cannot affect them.
    tracker = _AbortedTracker([t for t in aborted if t.last_offset >= segments[0].base_offset])
    entries = offset_map.entries
    native = offset_map.native
    capacity = offset_map.capacity
    if native is not None:
        _map_segments_native(offset_map, directory, segments, start, stop, tracker)
        return
    for segment in segments:
        for batch in _batches(directory, segment):
            if batch.last_offset < start:
                tracker.is_aborted(batch)
                continue
            if batch.base_offset >= stop:
                return
            if not batch.is_control and not tracker.is_aborted(batch):
                # Compiled: the batch's records walked and mapped in one call (-1: rejected, decided below).
                status = -1
                if native is not None and isinstance(batch, RecordBatch):
                    status = native.add_batch(batch.payload(), batch.records_count, batch.base_offset, start)
                if status == 1:
                    _check_progress(offset_map, start)
                    return  # full: stop at the last fully mapped batch
                if status < 0:
                    for offset, key, _ in _key_entries(batch):
                        if key is not None and offset >= start:
                            if len(offset_map) >= capacity:
                                _check_progress(offset_map, start)
                                return  # full: stop at the last fully mapped batch
                            if native is not None:
                                native.put(key, offset)
                            else:
                                entries[key if len(key) < _EXACT_KEY_BYTES else map_key(key)] = offset
            elif batch.is_control:
                tracker.is_aborted(batch)
            offset_map.latest_offset = max(offset_map.latest_offset, batch.last_offset)
        offset_map.latest_offset = max(offset_map.latest_offset, min(segment.next_offset, stop) - 1)


def _map_segments_native(offset_map: OffsetMap, directory: Path, segments: list[Segment], start: int, stop: int,
                         tracker: _AbortedTracker) -> None:
    """_map_segments with the compiled map: plain v2 batches (neither control nor transactional) go from the
    segment's window to ``add_batch`` without a Batch object (an uncompressed records area as a view of the
    window); every other batch, and any the compiled map rejects, takes the general path of one batch."""
    native = offset_map.native
    unpack = HEADER.unpack_from
    skip = ATTR_CONTROL | ATTR_TRANSACTIONAL
    latest = offset_map.latest_offset
    for segment in segments:
        reader = FileBatchReader(segment_path(directory, segment.base_offset, LOG_SUFFIX))
        window = view = None
        for chunk, local, total in reader.spans():
            if total >= RECORD_BATCH_OVERHEAD and chunk[local + MAGIC_OFFSET] == MAGIC_V2:
                base, _, _, _, _, attributes, delta, _, _, _, _, _, count = unpack(chunk, local)
                if not attributes & skip:
                    if chunk is not window:  # a new window (bytes: the view stays valid while it is used)
                        window, view = chunk, memoryview(chunk)
                    # Not transactional: never aborted (the tracker catches up on its pending transactions at
                    # the next transactional or control batch, in the same order).
                    last = base + delta
                    if last < start:
                        continue
                    if base >= stop:
                        offset_map.latest_offset = latest
                        return
                    codec = attributes & ATTR_CODEC_MASK
                    try:
                        payload = (decompress_v2(codec, chunk[local + RECORD_BATCH_OVERHEAD:local + total]) if codec
                                   else view[local + RECORD_BATCH_OVERHEAD:local + total])
                    except KcliError:
                        payload = None  # the general path raises it with the batch's position
                    status = -1 if payload is None else native.add_batch(payload, count, base, start)
                    if status == 0:
                        if last > latest:
                            latest = last
                        continue
                    if status == 1:
                        offset_map.latest_offset = latest
                        _check_progress(offset_map, start)
                        return  # full: stop at the last fully mapped batch
            batch = make_batch(bytes(chunk[local:local + total]), reader.window_position + local)
            offset_map.latest_offset = latest
            if _map_batch(offset_map, batch, start, stop, tracker):
                return
            latest = offset_map.latest_offset
        latest = max(latest, min(segment.next_offset, stop) - 1)
    offset_map.latest_offset = latest


def _map_batch(offset_map: OffsetMap, batch: Batch, start: int, stop: int, tracker: _AbortedTracker) -> bool:
    """One batch of _map_segments with the compiled map; True: stop (past ``stop``, or the map is full)."""
    native = offset_map.native
    if batch.last_offset < start:
        tracker.is_aborted(batch)
        return False
    if batch.base_offset >= stop:
        return True
    if not batch.is_control and not tracker.is_aborted(batch):
        status = -1
        if isinstance(batch, RecordBatch):
            status = native.add_batch(batch.payload(), batch.records_count, batch.base_offset, start)
        if status == 1:
            _check_progress(offset_map, start)
            return True
        if status < 0:
            for offset, key, _ in _key_entries(batch):
                if key is None:
                    native.keyless += offset >= start
                elif offset >= start:
                    if len(offset_map) >= offset_map.capacity:
                        _check_progress(offset_map, start)
                        return True
                    native.put(key, offset)
    elif batch.is_control:
        tracker.is_aborted(batch)
    offset_map.latest_offset = max(offset_map.latest_offset, batch.last_offset)
    return False


def _check_progress(offset_map: OffsetMap, start: int) -> None:
    if offset_map.latest_offset < start:
        raise KcliError(f"the offset map ({offset_map.capacity} entries) cannot hold the keys of one batch: "
                        "raise --max-memory")


def _group_segments(segments: list[Segment], max_size: int) -> list[list[Segment]]:
    groups: list[list[Segment]] = []
    rest = list(segments)
    while rest:
        group = [rest.pop(0)]
        size = group[0].size
        while rest and size + rest[0].size <= max_size and rest[0].next_offset - 1 - group[0].base_offset <= 0x7FFFFFFF:
            size += rest[0].size
            group.append(rest.pop(0))
        groups.append(group)
    return groups


# -- filtering (MemoryRecords.filterTo with the cleaner's RecordFilter) --------------------------------

class _TxnMetadata:
    """CleanedTransactionMetadata: aborted transactions of the group, and which markers have become obsolete."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self.pending = list(aborted)
        self.ongoing_aborted: dict[int, list[Any]] = {}  # pid -> [AbortedTxn, last observed batch offset]
        self.ongoing_committed: set[int] = set()

    def _consume_up_to(self, offset: int) -> None:
        while self.pending and self.pending[0].first_offset <= offset:
            txn = self.pending.pop(0)
            self.ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_control(self, batch: RecordBatch) -> tuple[bool, AbortedTxn | None]:
        """(can discard, txnindex entry to write)."""
        self._consume_up_to(batch.last_offset)
        records = batch.records()
        if not records:
            return False, None
        kind = parse_control_type(records[0].key)
        pid = batch.producer_id
        if kind is ControlRecordType.ABORT:
            meta = self.ongoing_aborted.pop(pid, None)
            if meta is not None and meta[1] is not None:
                return False, meta[0]
            return True, None
        if kind is ControlRecordType.COMMIT:
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False, None
            return True, None
        return False, None

    def on_data(self, batch: RecordBatch) -> bool:
        self._consume_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        meta = self.ongoing_aborted.get(batch.producer_id)
        if meta is not None:
            meta[1] = batch.last_offset
            return True
        self.ongoing_committed.add(batch.producer_id)
        return False


# (output batch, txnindex entry) or, from the plain-batch path, (output batch, None, last offset, max timestamp):
# the index entries then come from those without parsing the output batch again.
Sink = Callable[..., None]


def _filter_group(plan: CompactionPlan, group: list[Segment], stats: GroupPlan, sink: Sink | None,
                  txns: _TxnMetadata | None = None) -> None:
    """Decide every batch of the group; ``sink`` receives each output batch (None: count only).

    Decisions need only each record's offset, key and whether it is a tombstone (``key_entries``); whole
    records are decoded and re-encoded only for batches that lose some records but not all.
    """
    directory, now = plan.partition_dir, plan.now_ms
    horizon = now + plan.config.delete_retention_ms
    offset_map = plan.offset_map
    latest = offset_map.latest_offset
    if isinstance(offset_map, OffsetMap):
        mapped, superseded, native = offset_map.entries, None, offset_map.native
    else:
        mapped, superseded, native = {}, offset_map.superseded, None
    if txns is None:
        txns = _txn_metadata(plan, group)
    unpack = HEADER.unpack_from
    plain_skip = ATTR_CONTROL | ATTR_TRANSACTIONAL
    # A plain batch wholly inside the mapped section [first dirty, latest] that holds none of the map's offsets
    # keeps no record (each keyed one is superseded by its key's mapped offset; keyless ones are dropped, and
    # the map met none): dropped from its header alone, its payload never decompressed. Most batches of a
    # first cleaning's older segments are such. Off when the map met keyless records (their counts need the
    # records) and for verdicts computed elsewhere.
    drop_from = plan.first_dirty_offset if native is not None and native.keyless == 0 else latest + 1
    next_kept = -1  # the smallest mapped offset >= the last batch's base (native.next_value), cached
    for segment in group:
        # Magic 0/1 tombstones have no delete horizon of their own: Kafka keeps them while the segment was
        # modified after the last clean segment's mtime minus delete.retention.ms (Cleaner.cleanSegments).
        legacy_deletes_expired = (_mtime_ms(directory, segment) <= plan.legacy_delete_horizon_ms)
        reader = FileBatchReader(segment_path(directory, segment.base_offset, LOG_SUFFIX))
        for chunk, local, total in reader.spans():
            if native is not None and total >= RECORD_BATCH_OVERHEAD and chunk[local + MAGIC_OFFSET] == MAGIC_V2:
                # A plain batch (v2, neither control nor transactional, no producer id: never the last batch of a
                # producer) decided from its header fields and the compiled map, without a Batch object. The
                # transaction state catches up at the next transactional or control batch, in the same order.
                header = unpack(chunk, local)
                attributes = header[5]
                if not attributes & plain_skip and header[9] < 0:
                    codec = attributes & ATTR_CODEC_MASK
                    base, count, last = header[0], header[12], header[0] + header[6]
                    if drop_from <= base and last <= latest and last + 1 != plan.end_offset:
                        if next_kept < base:
                            next_kept = native.next_value(base)
                        if next_kept > last:
                            stats.batches_before += 1
                            stats.bytes_before += total
                            stats.records_before += count
                            stats.records_dropped += count
                            continue
                    try:
                        payload = (decompress_v2(codec, chunk[local + RECORD_BATCH_OVERHEAD:local + total]) if codec
                                   else chunk[local + RECORD_BATCH_OVERHEAD:local + total])
                    except KcliError:
                        payload = None  # the general path raises it with the batch's position
                    batch_horizon = header[7] if attributes & ATTR_DELETE_HORIZON else None
                    decided = None if payload is None else native.filter_batch(
                        payload, count, base, latest, batch_horizon is not None and now >= batch_horizon)
                    if decided is not None:
                        mask, kept, keyless, dropped_tombstones, tombstones = decided
                        stats.batches_before += 1
                        stats.bytes_before += total
                        stats.records_before += count
                        stats.keyless_dropped += keyless
                        stats.tombstones_dropped += dropped_tombstones
                        stats.records_kept += kept
                        stats.records_dropped += count - kept
                        stats.tombstones_kept += tombstones
                        needs_horizon = tombstones > 0 and batch_horizon is None and kept > 0
                        if mask is None and not needs_horizon and count > 0:
                            raw = chunk[local:local + total]
                        elif kept:
                            stats.horizons_set += needs_horizon
                            keep_mask = b"\x01" * count if mask is None else mask
                            new_horizon = horizon if needs_horizon else batch_horizon
                            raw = _retain_fields(header, payload, keep_mask, kept, new_horizon)
                            if raw is None:
                                raw = retain_records(make_batch(chunk[local:local + total], reader.window_position + local),
                                                     [i for i, m in enumerate(keep_mask) if m], payload=payload,
                                                     delete_horizon_ms=new_horizon)
                            stats.changed = True
                        elif last + 1 == plan.end_offset:  # kept empty: the log's last offset survives
                            if count == 0:
                                raw = chunk[local:local + total]
                            else:
                                raw = _empty_batch(RecordBatch(chunk[local:local + total]))
                                stats.changed = True
                            stats.empty_batches_kept += 1
                        else:
                            continue
                        stats.batches_after += 1
                        stats.bytes_after += len(raw)
                        if sink is not None:
                            sink(raw, None, last, header[8])
                        continue
            batch = make_batch(bytes(chunk[local:local + total]), reader.window_position + local)
            legacy = None if isinstance(batch, RecordBatch) else batch.records()
            count = batch.records_count if legacy is None else len(legacy)
            stats.batches_before += 1
            stats.bytes_before += batch.size
            stats.records_before += count
            index_entry = None
            if batch.is_control:
                can_discard, index_entry = txns.on_control(batch)
                discard_records = can_discard and batch.delete_horizon_ms is not None and batch.delete_horizon_ms <= now
                marker_of_empty_txn = can_discard
            else:
                can_discard = txns.on_data(batch)
                discard_records = can_discard
                marker_of_empty_txn = False
            pid = batch.producer_id
            last = plan.last_batches.get(pid) if pid >= 0 else None
            is_last_of_producer = last is not None and (
                batch.last_offset == last[0] if last[0] >= 0 else batch.is_control and batch.producer_epoch == last[1])
            # Only v2 batches can be kept empty (MemoryRecords.filterTo refuses it below magic 2).
            retain_empty = legacy is None and (is_last_of_producer or batch.next_offset == plan.end_offset)
            keep: list[int] | None = None  # indices of kept records; None: all of them
            mask: bytes | None = None  # compiled decisions: 1 per kept record; None with keep: all of them
            tombstones = 0
            payload = None
            decided = None
            if discard_records:
                keep = []
                if batch.is_control:
                    stats.markers_dropped += count
                else:
                    stats.aborted_dropped += count
            elif not batch.is_control:
                keep = []
                batch_horizon = batch.delete_horizon_ms
                if legacy is not None and legacy_deletes_expired:
                    batch_horizon = now
                payload = batch.payload() if legacy is None else None
                if native is not None and payload is not None:
                    decided = native.filter_batch(payload, count, batch.base_offset, latest,
                                                  batch_horizon is not None and now >= batch_horizon)
                if decided is not None:
                    mask, kept, keyless, dropped_tombstones, tombstones = decided
                    stats.keyless_dropped += keyless
                    stats.tombstones_dropped += dropped_tombstones
                    keep = None if mask is None else []
                else:
                    for i, (offset, key, tombstone) in enumerate(_key_entries(batch, payload)):
                        if offset <= latest:  # records past the mapped section are kept as they are
                            if key is None:
                                stats.keyless_dropped += 1
                                continue
                            if superseded is None:
                                if native is not None:
                                    if offset < native.get(key):
                                        continue
                                elif offset < mapped.get(key if len(key) < _EXACT_KEY_BYTES else map_key(key), -1):
                                    continue
                            elif superseded(offset):
                                continue
                            if tombstone and batch_horizon is not None and now >= batch_horizon:
                                stats.tombstones_dropped += 1
                                continue
                        keep.append(i)
                        tombstones += tombstone
                    if len(keep) == count:
                        keep = None
            if decided is None:
                kept = count if keep is None else len(keep)
            stats.records_kept += kept
            stats.records_dropped += count - kept
            stats.tombstones_kept += tombstones
            needs_horizon = (legacy is None and (tombstones > 0 or marker_of_empty_txn)
                             and batch.delete_horizon_ms is None and kept > 0)
            if keep is None and not needs_horizon and count > 0:
                raw = batch.raw
            elif kept and legacy is not None:
                # A wrapper keeps its magic and codec; v1 inner offsets become relative to the first kept record.
                raw = build_legacy_messages([legacy[i] for i in keep], magic=batch.magic, codec=batch.codec_id,
                                            timestamp_type=batch.timestamp_type)
            elif kept and decided is not None:
                stats.horizons_set += needs_horizon
                raw = _retain_native(batch, payload, b"\x01" * count if mask is None else mask, kept,
                                     horizon if needs_horizon else batch.delete_horizon_ms)
            elif kept:
                stats.horizons_set += needs_horizon
                raw = retain_records(batch, range(count) if keep is None else keep, payload=payload,
                                     delete_horizon_ms=horizon if needs_horizon else batch.delete_horizon_ms)
            elif retain_empty:
                raw = batch.raw if count == 0 else _empty_batch(batch)
                stats.empty_batches_kept += 1
            else:
                continue
            if raw is not batch.raw:
                stats.changed = True
            stats.batches_after += 1
            stats.bytes_after += len(raw)
            if sink is not None:
                sink(raw, index_entry)
    if stats.batches_after != stats.batches_before:
        stats.changed = True


_zstd = threading.local()


def _zstd_compressor() -> Any:
    """A compressor reused per thread (compression.compress's settings, so the same bytes): creating one per
    batch cost ~10 us, 5 % of cleaning a zstd batch."""
    compressor = getattr(_zstd, "compressor", None)
    if compressor is None:
        import zstandard

        compressor = _zstd.compressor = zstandard.ZstdCompressor(write_content_size=False)
    return compressor


def _retain_native(batch: RecordBatch, payload: bytes, mask: bytes, kept: int, delete_horizon_ms: int | None) -> bytes:
    """``retain_records`` of the records ``mask`` keeps, the records area built in C: the same bytes."""
    raw = _retain_fields(HEADER.unpack_from(batch.raw), payload, mask, kept, delete_horizon_ms)
    if raw is None:  # rejected: the pure path decides (or reports the batch's bad structure)
        return retain_records(batch, [i for i, m in enumerate(mask) if m], payload=payload,
                              delete_horizon_ms=delete_horizon_ms)
    return raw


def _retain_fields(fields: tuple[Any, ...], payload: bytes, mask: bytes, kept: int,
                   delete_horizon_ms: int | None) -> bytes | None:
    """_retain_native of a batch given as its header's fields (``HEADER.unpack_from``); None: the compiled
    records builder rejected the records area."""
    (base_offset, _, leader_epoch, _, _, attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id,
     producer_epoch, base_sequence, count) = fields
    append_time = max_timestamp if attributes & ATTR_TIMESTAMP_TYPE else None
    module = native_cleaner()
    built = None if module is None else module.retain(payload, count, mask, base_timestamp, delete_horizon_ms,
                                                      append_time)
    if built is None:  # rejected: the caller's pure path decides (or reports the batch's bad structure)
        return None
    records, new_base = built
    codec = attributes & ATTR_CODEC_MASK
    if codec == Codec.ZSTD:
        records = _zstd_compressor().compress(records)
    elif codec:
        records = compress(codec, records, magic=MAGIC_V2, gzip_level=KAFKA_GZIP_LEVEL)
    attributes &= ~ATTR_DELETE_HORIZON
    if delete_horizon_ms is not None:
        attributes |= ATTR_DELETE_HORIZON
    header = bytearray(HEADER.pack(
        base_offset, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(records), leader_epoch, MAGIC_V2, 0, attributes,
        last_offset_delta, new_base, max_timestamp, producer_id, producer_epoch, base_sequence, kept))
    stamp_crc(header, 0, crc32c(records, crc32c(memoryview(header)[ATTRIBUTES_OFFSET:])))
    return bytes(header) + records


def _txn_metadata(plan: CompactionPlan, group: list[Segment], *, replay: int = 0) -> _TxnMetadata:
    """The group's transaction state, advanced past its first ``replay`` segments (headers and markers only):
    what filtering segment ``replay`` on its own starts from."""
    start, end = group[0].base_offset, group[-1].next_offset
    txns = _TxnMetadata([t for t in plan.aborted if t.last_offset >= start and t.first_offset < end])
    for segment in group[:replay]:
        if not segment.transactional and segment.batches >= 0:
            # Only plain batches: replaying them only consumes the aborted transactions that start up to
            # the segment's last offset (the last batch's).
            if segment.batches > 0:
                txns._consume_up_to(segment.next_offset - 1)
            continue
        for batch in _batches(plan.partition_dir, segment):
            if batch.is_control:
                txns.on_control(batch)
            else:
                txns.on_data(batch)
    return txns


def _empty_batch(batch: RecordBatch) -> bytes:
    """The 61-byte header the cleaner keeps so a producer's last offset and sequence survive (section 1.5)."""
    return build_record_batch(
        [], base_offset=batch.base_offset, producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
        base_sequence=batch.base_sequence, is_transactional=batch.is_transactional, is_control=batch.is_control,
        partition_leader_epoch=batch.partition_leader_epoch, max_timestamp=batch.max_timestamp,
        last_offset_delta=batch.last_offset_delta, timestamp_type=batch.timestamp_type)


# -- applying ------------------------------------------------------------------------------------------

def apply_compaction(plan: CompactionPlan, *, crash_hook: Callable[[], None] | None = None,
                     jobs: int = 1, write_checkpoint: bool = True,
                     swap_guard: AbstractContextManager[Any] | None = None) -> CompactionResult:
    """Rewrite and swap in every changed group, update the checkpoint, and run further passes until the dirty
    section is done (when the offset map could not hold it at once).

    With ``jobs`` > 1, forked worker processes write groups' ``.cleaned`` files in parallel (they inherit the
    offset map instead of receiving a copy); this process swaps each group in, in offset order, so the crash
    states are exactly those of a sequential run.

    ``write_checkpoint=False`` leaves ``cleaner-offset-checkpoint`` (shared by the log dir's partitions) to the
    caller, e.g. a driver collecting results from concurrent tasks (``write_cleaner_checkpoint``); only valid
    for a plan that completes in one pass.

    ``swap_guard`` (a lock) is held around each swap only, so a live broker keeps appending to the log while
    its cleaned segments are written (Kafka's cleaner takes the log's lock for replaceSegments alone).
    """
    if not write_checkpoint and not plan.complete:
        raise ValueError("a multi-pass compaction must write its checkpoint after each pass")
    if crash_hook is None:
        crash_hook = _crash_points()
    passes = []
    current = plan
    while True:
        todo = [i for i, group in enumerate(current.groups) if group.to_rewrite]
        for i, stats in _run_groups(current, todo, jobs, write=True):
            if stats.changed:
                with swap_guard or nullcontext():
                    _swap_in(current, stats, crash_hook)
            else:  # planned without counting, and nothing to clean after all
                _discard_cleaned(current.partition_dir, stats.base_offset)
            current.groups[i] = stats
        passes.append(current)
        checkpoint = current.end_offset
        written = write_checkpoint and write_cleaner_checkpoint(current.partition_dir, checkpoint)
        if current.complete:
            break
        current = plan_compaction(current.partition_dir, now_ms=plan.now_ms, config=plan.config,
                                  include_active=plan.include_active, max_memory=plan.max_memory,
                                  first_dirty_offset=checkpoint, count=False, jobs=jobs)
    return CompactionResult(plan.partition_dir, passes, checkpoint if written else None)


def _crash_points() -> Callable[[], None]:
    """Test hook shared with recovery: with KCLI_TEST_CRASH_AFTER=N the process dies by SIGKILL at step N."""
    value = os.environ.get(CRASH_AFTER_ENV, "")
    if not value.isdigit():
        return lambda: None
    count = 0

    def step() -> None:
        nonlocal count
        count += 1
        if count >= int(value):
            os.kill(os.getpid(), signal.SIGKILL)

    return step


_FORKED_PLAN: CompactionPlan | None = None  # what forked workers inherit (see _run_groups)


def _worker_pool(jobs: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("fork"),
                               initializer=_die_with_parent, initargs=(os.getpid(),))


def _die_with_parent(parent: int) -> None:
    """Workers must not outlive a killed parent (they would hold its pipes open and write on): on Linux the
    kernel sends them SIGKILL when it dies (prctl PR_SET_PDEATHSIG). A parent killed between the fork and
    this call sends nothing: then the worker is already an orphan and goes at once."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # not Linux: a killed run may leave idle workers until they exit
        pass
    if os.getppid() != parent:
        os._exit(1)


def _run_groups(plan: CompactionPlan, todo: Sequence[int], jobs: int, *,
                write: bool) -> Iterator[tuple[int, GroupPlan]]:
    """(index, counts) of each group in ``todo``, in order: with ``write`` once its ``.cleaned`` files are
    written and synced, else only counted (a dry run).

    With ``jobs`` > 1 forked workers take whole groups when there are enough of them, else the segments of
    one group at a time (each from the transaction state its predecessors leave, replayed from headers),
    whose outputs this process joins into the group's ``.cleaned`` segment."""
    if "fork" not in multiprocessing.get_all_start_methods():
        jobs = 1
    if jobs <= 1 or not todo:
        for i in todo:
            yield i, _group_work(plan, i, write)
        return
    if isinstance(plan.offset_map, OffsetMap) and plan.offset_map.native is not None:
        plan.offset_map.native.next_value(0)  # the sorted offsets built once, before the fork, for every worker
    global _FORKED_PLAN
    _FORKED_PLAN = plan
    try:
        with _worker_pool(jobs) as pool:
            if len(todo) >= jobs:
                futures = [(i, pool.submit(_group_work_forked, i, write)) for i in todo]
                for i, future in futures:
                    yield i, future.result()
                return
            for i in todo:
                group = plan.groups[i]
                parts = [pool.submit(_segment_work_forked, i, k, write) for k in range(len(group.segments))]
                yield i, _join_parts(plan, group, [part.result() for part in parts], write)
    finally:
        _FORKED_PLAN = None


def _group_work_forked(index: int, write: bool) -> GroupPlan:
    assert _FORKED_PLAN is not None
    return _group_work(_FORKED_PLAN, index, write)


def _group_work(plan: CompactionPlan, index: int, write: bool) -> GroupPlan:
    group = plan.groups[index]
    if write:
        return _write_cleaned(plan, group)
    counted = GroupPlan(group.base_offset, group.segments, group.end_offset)
    _filter_group(plan, [plan.segments[base] for base in group.segments], counted, None)
    return counted


_Part = tuple[GroupPlan, str | None, dict[int, AbortedTxn]]  # counts, output file, txnindex entries by position


def _segment_work_forked(index: int, k: int, write: bool) -> _Part:
    """Segment ``k`` of group ``index`` filtered on its own, into ``<base>.log.part<k>.cleaned`` when writing
    (a name recovery discards, as any ``.cleaned`` file, if the process dies)."""
    plan = _FORKED_PLAN
    assert plan is not None
    group = plan.groups[index]
    segments = [plan.segments[base] for base in group.segments]
    stats = GroupPlan(group.base_offset, group.segments, group.end_offset)
    txns = _txn_metadata(plan, segments, replay=k)
    if not write:
        _filter_group(plan, [segments[k]], stats, None, txns)
        return stats, None, {}
    path = segment_path(plan.partition_dir, group.base_offset, f"{LOG_SUFFIX}.part{k}{CLEANED_SUFFIX}")
    aborted: dict[int, AbortedTxn] = {}
    with open(path, "wb") as out:
        position = 0

        def sink(raw: bytes, entry: AbortedTxn | None, *_header: int) -> None:
            nonlocal position
            out.write(raw)
            if entry is not None:
                aborted[position] = entry
            position += len(raw)

        _filter_group(plan, [segments[k]], stats, sink, txns)
    return stats, str(path), aborted


def _join_parts(plan: CompactionPlan, group: GroupPlan, parts: list[_Part], write: bool) -> GroupPlan:
    stats = GroupPlan(group.base_offset, group.segments, group.end_offset)
    for part, _path, _aborted in parts:
        for name, value in part.__dict__.items():
            if isinstance(value, bool):
                setattr(stats, name, getattr(stats, name) or value)
            elif isinstance(value, int) and name not in ("base_offset", "end_offset"):
                setattr(stats, name, getattr(stats, name) + value)
    stats.counted = True
    if not write:
        return stats
    with _CleanedSegment(plan, group.base_offset) as cleaned:
        for _part, path, aborted in parts:
            assert path is not None
            for batch in FileBatchReader(path):
                cleaned.append(batch.raw, aborted.get(batch.position))
            os.unlink(path)
    return stats


def _discard_cleaned(directory: Path, base: int) -> None:
    for suffix in _SEGMENT_SUFFIXES:
        segment_path(directory, base, suffix + CLEANED_SUFFIX).unlink(missing_ok=True)
    for part in directory.glob(f"{base:020d}{LOG_SUFFIX}.part*{CLEANED_SUFFIX}"):
        part.unlink()


_WRITE_BUFFER = 1 << 20  # batches are written through a 1 MiB buffer: one write call per MiB, not per batch


class _Appended:
    """What the index rules read of an appended batch (SegmentIndexer.append)."""

    __slots__ = ("last_offset", "max_timestamp", "size")

    def __init__(self, last_offset: int, max_timestamp: int, size: int) -> None:
        self.last_offset, self.max_timestamp, self.size = last_offset, max_timestamp, size


class _CleanedSegment:
    """``<base>.log.cleaned`` and its indexes being written; synced on a clean exit."""

    def __init__(self, plan: CompactionPlan, base: int) -> None:
        self.directory, self.base = plan.partition_dir, base
        self.log_path = segment_path(self.directory, base, LOG_SUFFIX + CLEANED_SUFFIX)
        self.config = plan.config.log_config
        self.position = 0

    def __enter__(self) -> _CleanedSegment:
        for suffix in _SEGMENT_SUFFIXES:
            segment_path(self.directory, self.base, suffix + CLEANED_SUFFIX).unlink(missing_ok=True)
        self.out = open(self.log_path, "wb", buffering=_WRITE_BUFFER)
        self.indexes = SegmentIndexes.for_segment(self.directory, self.base, self.config, suffix=CLEANED_SUFFIX)
        return self

    def append(self, raw: bytes, aborted: AbortedTxn | None, last_offset: int | None = None,
               max_timestamp: int = -1) -> None:
        """Write ``raw``; ``last_offset`` and ``max_timestamp``, when given, are its header's (for the indexes)."""
        self.out.write(raw)
        position = self.position
        self.indexes.append(make_batch(raw, position) if last_offset is None else
                            _Appended(last_offset, max_timestamp, len(raw)), position, aborted)
        self.position = position + len(raw)

    def __exit__(self, *exc: object) -> None:
        try:
            if exc[0] is None:
                self.out.flush()
                os.fsync(self.out.fileno())
        finally:
            self.out.close()
            self.indexes.close()


def _write_cleaned(plan: CompactionPlan, group: GroupPlan) -> GroupPlan:
    """Filter the group into ``<base>.log.cleaned`` and its indexes, synced; returns the counts."""
    _discard_cleaned(plan.partition_dir, group.base_offset)
    stats = GroupPlan(group.base_offset, group.segments, group.end_offset)
    with _CleanedSegment(plan, group.base_offset) as cleaned:
        _filter_group(plan, [plan.segments[base] for base in group.segments], stats, cleaned.append)
    return stats


def _swap_in(plan: CompactionPlan, group: GroupPlan, crash: Callable[[], None]) -> None:
    """LocalLog.replaceSegments for a group whose ``.cleaned`` files are written."""
    directory = plan.partition_dir
    base = group.base_offset
    log_path = segment_path(directory, base, LOG_SUFFIX + CLEANED_SUFFIX)
    last_mtime = segment_path(directory, group.segments[-1], LOG_SUFFIX).stat().st_mtime
    os.utime(log_path, (last_mtime, last_mtime))
    fsync_dir(directory)
    crash()
    # LocalLog.replaceSegments: .cleaned -> .swap (the .log first), old files -> .deleted, .swap -> final names.
    swapped = []
    for suffix in _SEGMENT_SUFFIXES:
        cleaned = segment_path(directory, base, suffix + CLEANED_SUFFIX)
        if cleaned.exists():
            target = segment_path(directory, base, suffix + SWAP_SUFFIX)
            cleaned.rename(target)
            swapped.append((target, segment_path(directory, base, suffix)))
    fsync_dir(directory)
    crash()
    deleted = []
    for old in reversed(group.segments):  # highest first: a crash leaves only segments the swap range covers
        for suffix in _SEGMENT_SUFFIXES:
            path = segment_path(directory, old, suffix)
            if path.exists():
                target = path.with_name(path.name + DELETED_SUFFIX)
                path.rename(target)
                deleted.append(target)
        crash()
    fsync_dir(directory)
    for swap, final in swapped:
        swap.rename(final)
    fsync_dir(directory)
    crash()
    for path in deleted:
        path.unlink(missing_ok=True)
    fsync_dir(directory)


__all__ = ["CleanerConfig", "CompactionPlan", "CompactionResult", "GroupPlan", "OffsetMap", "SupersededOffsets",
           "apply_compaction", "plan_compaction", "plan_with_superseded", "prepare_compaction",
           "write_cleaner_checkpoint", "iter_visible_records", "DEFAULT_MAX_MEMORY"]
