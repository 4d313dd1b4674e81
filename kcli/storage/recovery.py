"""Log recovery as Kafka's LogLoader and LogSegment.recover do it: a plan first, then a crash-safe apply.

``plan_recovery`` reads a partition directory and says what recovery would do; ``apply_recovery`` first
copies every byte it will cut, drop or replace into a quarantine directory with a manifest, then changes
the partition in an order that leaves it recoverable by another run after a crash at any step;
``restore_quarantine`` undoes it. Kafka: storage/.../log/{LogLoader,LogSegment}.java (kafka-formats.md 5).
"""

from __future__ import annotations

import base64
import bisect
import hashlib
import json
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

from kcli.errors import CorruptRecordError, InputError, KcliError
from kcli.records import StopReason, make_batch
from kcli.records.batch import RECORD_BATCH_OVERHEAD
from kcli.records.layout import LAST_OFFSET_DELTA_FIELD, LAST_OFFSET_DELTA_OFFSET, LOG_OVERHEAD_STRUCT
from kcli.records.record_set import HEADER_SIZE_UP_TO_MAGIC, LOG_OVERHEAD, MAGIC_OFFSET, MIN_RECORD_OVERHEAD
from kcli.records.types import INT32_MAX
from kcli.storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from kcli.storage.files import (
    MANIFEST_NAME,
    RUN_MANIFEST_NAME,
    QUARANTINE_DIR_SUFFIX,
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    KRAFT_CHECKPOINT_SUFFIX,
    LEADER_EPOCH_CHECKPOINT,
    LOG_SUFFIX,
    PRODUCER_SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TMP_SUFFIX,
    TXN_INDEX_SUFFIX,
    FileKind,
    classify,
    fsync_dir,
    offset_from_filename,
    segment_path,
    strip_temp_suffix,
    write_atomically,
)
from kcli.storage.index_check import IndexFinding, OffsetIndexMatcher, TimeIndexMatcher
from kcli.storage.index import AbortedTxn, TransactionIndex
from kcli.storage.leader_epoch import LeaderEpochCache
from kcli.storage.log_config import LogConfig
from kcli.storage.producer_state import ProducerStateManager, track_batch
from kcli.storage.segment import FileBatchReader, SegmentIndexes
from kcli.storage.snapshot import ProducerSnapshot, inspect_producer_snapshot, write_producer_snapshot

MANIFEST_FORMAT = "kctl-recover-quarantine"
# 2: quarantined copies without their trailing zeros ("stored_bytes"), results' SHA-256;
# 3: a rebuilt file's small old content "inline" (base64) in the manifest instead of a file of its own
MANIFEST_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)
RUN_FORMAT = "kctl-recover-run"
# Test hook: SIGKILL this process after N mutating steps of apply_recovery (crash-safety tests).
CRASH_AFTER_ENV = "KCLI_TEST_CRASH_AFTER"

_INDEX_KINDS = (FileKind.INDEX, FileKind.TIME_INDEX, FileKind.TXN_INDEX)
_INDEX_SUFFIXES = {FileKind.INDEX: INDEX_SUFFIX, FileKind.TIME_INDEX: TIME_INDEX_SUFFIX, FileKind.TXN_INDEX: TXN_INDEX_SUFFIX}
_OFFSET_SIZE = LOG_OVERHEAD_STRUCT
_LAST_OFFSET_DELTA = LAST_OFFSET_DELTA_FIELD
_LAST_OFFSET_DELTA_AT = LAST_OFFSET_DELTA_OFFSET
_COPY_CHUNK = 1 << 20
# A rebuilt file whose old content (trailing zeros aside) is this small is kept inside the manifest: a file of
# its own costs a whole filesystem block, and a broker's restart rebuilds two nearly empty indexes per partition.
_INLINE_LIMIT = 1024
_PROGRESS_EVERY = 4 << 20


class ActionKind(Enum):
    DELETE = "delete"  # the whole file goes to quarantine, then away
    TRUNCATE = "truncate"  # bytes [position, end) of a .log go to quarantine, then the file is cut there
    RENAME = "rename"  # a completed .swap file takes its final name (LogLoader finishing a swap)
    REBUILD = "rebuild"  # an index, snapshot or checkpoint is rewritten; the old file goes to quarantine


@dataclass(frozen=True, slots=True)
class RecoveryAction:
    kind: ActionKind
    file: Path  # as named when the action runs
    reason: str
    position: int = 0  # first byte cut (TRUNCATE), else 0
    end: int = 0  # file size when planned: [position, end) is what quarantine keeps
    first_offset: int | None = None  # offsets the cut batch headers claim
    last_offset: int | None = None
    source: Path | None = None  # where the bytes are when planned, if not at `file` (a .swap renamed first)
    target: Path | None = None  # RENAME: the new name
    existed: bool = True  # REBUILD: False when the file is new
    log_bytes: int | None = None  # REBUILD of .index/.timeindex/.txnindex: built from the .log's first bytes
    entries: tuple = ()  # REBUILD: AbortedTxn (.txnindex), ProducerStateEntry (.snapshot), EpochEntry (checkpoint)
    lower_bound: bool = False  # TRUNCATE: more offsets than first..last may be lost (unreadable bytes after them)

    @property
    def bytes(self) -> int:
        return self.end - self.position

    @property
    def origin(self) -> Path:
        return self.source or self.file

    @property
    def offsets(self) -> int | None:
        """How many offsets first..last spans (what the action removes; at least this with ``lower_bound``)."""
        if self.first_offset is None or self.last_offset is None:
            return None
        return self.last_offset - self.first_offset + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "action": self.kind.value,
            "file": str(self.file),
            "position": self.position,
            "end": self.end,
            "bytes": self.bytes,
            "first_offset": self.first_offset,
            "last_offset": self.last_offset,
            "offsets": self.offsets,
            "lower_bound": self.lower_bound,
            "target": None if self.target is None else str(self.target),
            "reason": self.reason,
        }


@dataclass
class RecoveryPlan:
    partition_dir: Path
    config: LogConfig
    recovery_point: int | None = None
    rebuild_indexes_only: bool = False
    actions: list[RecoveryAction] = field(default_factory=list)
    log_end_offset: int | None = None  # after recovery
    problems: list[str] = field(default_factory=list)  # damage this plan leaves (--rebuild-indexes keeps the log)
    segments: int = 0  # segments validated
    bytes: int = 0  # .log bytes read
    # The active (last) segment's indexes may end in their preallocated zeros (what a crash leaves): they are
    # kept when their entries agree with the log, as Kafka's broker does; the broker's writable open trims them
    keep_preallocated_active: bool = False


@dataclass
class RecoveryResult:
    plan: RecoveryPlan
    quarantine: Path
    manifest: Path
    records: list[dict[str, Any]] = field(default_factory=list)  # the manifest's entries, one per plan action

    def kept_in(self, index: int) -> Path | None:
        """Where action ``index``'s old bytes are kept: its quarantine file, the manifest (small old content of
        a rebuilt file, inline), or None (nothing to keep: a rename, a file that did not exist)."""
        record = self.records[index]
        if record.get("quarantine_file"):
            return self.quarantine / record["quarantine_file"]
        return self.manifest if record.get("inline") is not None else None


@dataclass
class RestoreResult:
    manifest: Path
    partition_dir: Path
    restored: list[dict[str, Any]]  # manifest entries undone
    skipped: list[dict[str, Any]]  # already in their original state


# -- planning ----------------------------------------------------------------------------------------

def plan_recovery(partition_dir: str | os.PathLike[str], *, recovery_point: int | None = None,
                  rebuild_indexes_only: bool = False, config: LogConfig | None = None,
                  progress: Callable[[int], None] | None = None,
                  keep_preallocated_active: bool = False) -> RecoveryPlan:
    """What LogLoader would do to this partition: temp files, orphaned indexes, then every segment from the one
    holding ``recovery_point`` (default: all) validated batch by batch. Changes nothing.

    ``rebuild_indexes_only`` leaves the .log files, temp files, snapshots and checkpoints as they are and only
    rebuilds the .index/.timeindex/.txnindex files that disagree with the log (damage to the log is reported).
    ``keep_preallocated_active``: see RecoveryPlan (the broker's startup; `kctl recover` trims them).
    """
    directory = Path(partition_dir)
    if not directory.is_dir():
        raise InputError("not a partition directory", path=str(directory))
    plan = RecoveryPlan(directory, config or LogConfig(), recovery_point, rebuild_indexes_only,
                        keep_preallocated_active=keep_preallocated_active)
    _Planner(plan, progress or (lambda _n: None)).run()
    return plan


@dataclass
class _SegmentScan:
    base: int
    size: int
    valid_bytes: int
    last_offset: int | None = None  # of the last valid batch
    cut_reason: str | None = None
    aborted: list[AbortedTxn] = field(default_factory=list)


class _Planner:
    def __init__(self, plan: RecoveryPlan, progress: Callable[[int], None]) -> None:
        self.plan = plan
        self.dir = plan.partition_dir
        self.progress = progress
        # The directory as it will be once earlier actions ran: final name -> where the bytes are now.
        with os.scandir(self.dir) as entries:  # names and types only: no stat, no Path per entry to sort
            names = sorted(e.name for e in entries if e.is_file())
        self.files = {name: self.dir / name for name in names}
        self.first: list[RecoveryAction] = []  # temp files, orphans, corrupt snapshots, dropped segments
        self.truncate: list[RecoveryAction] = []
        self.rebuild: list[RecoveryAction] = []
        self.last: list[RecoveryAction] = []  # snapshots past the end, new snapshot, leader epochs

    def run(self) -> None:
        plan = self.plan
        if not plan.rebuild_indexes_only:
            self.remove_temp_files()
            self.remove_orphaned_indexes()
        bases = sorted(b for name in self.files if classify(name) is FileKind.LOG and (b := _base(name)) is not None)
        start = 0 if plan.recovery_point is None else max(0, bisect.bisect_right(bases, plan.recovery_point) - 1)
        snapshots = self.inspect_snapshots(bases[start] if plan.recovery_point is not None and bases else None)
        producers = self.producer_state_at(bases, start, snapshots)
        batch_epochs = LeaderEpochCache()
        prev_last: int | None = None
        changed = False
        leo = bases[-1] if bases else None
        for i in range(start, len(bases)):
            scan = self.recover_segment(bases[i], prev_last, producers, batch_epochs,
                                        active=i == len(bases) - 1)
            plan.segments += 1
            if scan.last_offset is not None:
                prev_last = scan.last_offset
            leo = max(bases[i], prev_last + 1) if prev_last is not None else bases[i]
            if scan.cut_reason is None:
                continue
            log_name = _name(bases[i], LOG_SUFFIX)
            if plan.rebuild_indexes_only:
                plan.problems.append(f"{self.dir / log_name}: bytes {scan.valid_bytes}..{scan.size} are invalid "
                                     f"({scan.cut_reason}); not repaired when only rebuilding indexes")
                continue
            changed = True
            first, last, lower_bound = _lost_offsets(
                self.files[log_name], scan.valid_bytes, scan.size, leo, bases[i],
                self.files.get(_name(bases[i], INDEX_SUFFIX)), self.files.get(_name(bases[i], TIME_INDEX_SUFFIX)))
            self.truncate.append(RecoveryAction(
                ActionKind.TRUNCATE, self.dir / log_name, scan.cut_reason, scan.valid_bytes, scan.size, first, last,
                source=self.source(log_name), lower_bound=lower_bound))
            for later in reversed(bases[i + 1:]):
                self.drop_segment(later, bases[i])
            break
        plan.log_end_offset = leo
        if not plan.rebuild_indexes_only and leo is not None:
            self.plan_snapshots(snapshots, leo, producers, changed)
            self.plan_leader_epochs(leo, batch_epochs)
        plan.actions = self.first + self.truncate + self.rebuild + self.last

    # -- LogLoader: temp files, swaps, orphans -------------------------------------------------------
    def remove_temp_files(self) -> None:
        """kafka-formats.md 5.2 steps 1-2: *.deleted go, *.cleaned go, a .swap at or above the lowest .cleaned
        base offset is an unfinished split (KAFKA-6264) and goes; the other swaps replace the files whose base
        offsets they cover and take their names. Our own `.tmp` leftovers of write-then-rename go too."""
        cleaned: list[str] = []
        swaps: list[str] = []
        for name in list(self.files):
            if name.endswith(DELETED_SUFFIX) and not name.endswith(KRAFT_CHECKPOINT_SUFFIX + DELETED_SUFFIX):
                self.delete(name, "stray file scheduled for deletion (LogLoader deletes *.deleted)")
            elif name.endswith(CLEANED_SUFFIX):
                cleaned.append(name)
            elif name.endswith(SWAP_SUFFIX):
                swaps.append(name)
            elif name.endswith(TMP_SUFFIX):
                self.delete(name, "leftover of an interrupted write-then-rename")
        min_cleaned = min((b for n in cleaned if (b := _base(n)) is not None), default=None)
        valid_swaps = []
        for name in swaps:
            base = _base(name)
            if min_cleaned is not None and base is not None and base >= min_cleaned:
                self.delete(name, f"swap file of an unfinished segment split (at or above the first .cleaned base "
                                  f"offset {min_cleaned}, KAFKA-6264)")
            else:
                valid_swaps.append(name)
        for name in cleaned:
            self.delete(name, "output of an unfinished log cleaning")
        ranges = [(base, _next_offset(self.files[name], base)) for name in valid_swaps
                  if strip_temp_suffix(name).endswith(LOG_SUFFIX) and (base := _base(name)) is not None]
        if ranges:
            low, high = min(r[0] for r in ranges), max(r[1] for r in ranges)
            for name in list(self.files):
                base = _base(name)
                if not name.endswith(SWAP_SUFFIX) and base is not None and low <= base < high:
                    self.delete(name, f"replaced by the .swap files for offsets {low}..{high - 1} (LogLoader finishes "
                                      "an interrupted compaction or split)")
        for name in valid_swaps:
            final = strip_temp_suffix(name)
            if final in self.files:
                self.delete(final, f"replaced by {name}")
            self.files[final] = self.files.pop(name)
            self.first.append(RecoveryAction(ActionKind.RENAME, self.dir / name, "completes an interrupted swap",
                                             target=self.dir / final))

    def remove_orphaned_indexes(self) -> None:
        logs = {_base(n) for n in self.files if classify(n) is FileKind.LOG}
        for name in list(self.files):
            if classify(name) in _INDEX_KINDS and _base(name) not in logs:
                self.delete(name, "index file without its .log segment (LogLoader deletes orphaned indexes)")

    def drop_segment(self, base: int, truncated: int) -> None:
        reason = f"follows segment {truncated}, which recovery truncates (Kafka drops every later segment)"
        log_name = _name(base, LOG_SUFFIX)
        first, last = _claimed_offsets(self.files[log_name], 0, self.files[log_name].stat().st_size, base)
        self.delete(log_name, reason, first, last)  # the .log first: a crash leaves orphans, which a rerun removes
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            if _name(base, suffix) in self.files:
                self.delete(_name(base, suffix), reason)

    def delete(self, name: str, reason: str, first: int | None = None, last: int | None = None, *,
               bucket: list[RecoveryAction] | None = None) -> None:
        source = self.source(name)
        path = self.files.pop(name)
        (self.first if bucket is None else bucket).append(RecoveryAction(
            ActionKind.DELETE, self.dir / name, reason, 0, path.stat().st_size, first, last, source=source))

    def source(self, name: str) -> Path | None:
        path = self.files[name]
        return None if path == self.dir / name else path

    # -- LogSegment.recover ----------------------------------------------------------------------------
    def producer_state_at(self, bases: list[int], start: int, snapshots: dict[int, tuple[str, ProducerSnapshot]]
                          ) -> ProducerStateManager:
        """Producer state before the first validated segment: the latest intact snapshot at or below its
        base offset, then a replay of the batches in between (as LogLoader rebuilds it per segment)."""
        if not bases:
            return ProducerStateManager()
        target = bases[start]
        usable = [o for o, (_n, s) in snapshots.items() if o <= target and not s.problems]
        offset = max(usable, default=None)
        state = ProducerStateManager(snapshots[offset][1].entries if offset is not None else ())
        replay_from = bases[0] if offset is None else offset
        for i in range(start):
            if i + 1 < len(bases) and bases[i + 1] <= replay_from:
                continue
            try:
                for batch in FileBatchReader(self.files[_name(bases[i], LOG_SUFFIX)]):
                    if batch.last_offset >= replay_from and batch.is_valid:
                        track_batch(batch, state, LeaderEpochCache())
            except KcliError:
                continue  # below the recovery point the log is trusted; an unreadable one adds nothing
        return state

    def recover_segment(self, base: int, prev_last: int | None, producers: ProducerStateManager,
                        epochs: LeaderEpochCache, *, active: bool = False) -> _SegmentScan:
        """Validate one segment batch by batch as LogSegment.recover does, replaying producer state and
        leader epochs, and check its indexes against the batches as they pass."""
        plan = self.plan
        log_path = self.files[_name(base, LOG_SUFFIX)]
        size = log_path.stat().st_size
        scan = _SegmentScan(base, size, 0)
        keep_preallocated = active and plan.keep_preallocated_active
        index_check = _IndexCheck.offset_index(self.files.get(_name(base, INDEX_SUFFIX)), base, keep_preallocated)
        time_check = _IndexCheck.time_index(self.files.get(_name(base, TIME_INDEX_SUFFIX)), base, keep_preallocated)
        txn_check = _TxnIndexCheck(self.files.get(_name(base, TXN_INDEX_SUFFIX)), base)
        if prev_last is not None and base <= prev_last and size > 0:
            scan.cut_reason = f"segment base offset {base} overlaps the previous segment, which ends at {prev_last}"
        reader = FileBatchReader(log_path)
        spans = reader.spans()
        reported = 0
        try:
            for chunk, local, total in ([] if scan.cut_reason else spans):
                position = reader.window_position + local
                try:
                    batch = make_batch(chunk[local : local + total], position)
                    scan.cut_reason = _invalid_reason(batch, base, prev_last)
                    aborted = None if scan.cut_reason else track_batch(batch, producers, epochs)
                except KcliError as exc:  # a control record or legacy wrapper that does not decode
                    scan.cut_reason = exc.reason
                if scan.cut_reason:
                    scan.valid_bytes = position
                    break
                first, last = batch.base_offset, batch.last_offset
                index_check.feed(position, first, last, batch.max_timestamp)
                time_check.feed(position, first, last, batch.max_timestamp)
                if aborted is not None:
                    scan.aborted.append(aborted)
                prev_last = scan.last_offset = last
                scan.valid_bytes = position + total
                if scan.valid_bytes - reported >= _PROGRESS_EVERY:
                    self.progress(scan.valid_bytes - reported)
                    reported = scan.valid_bytes
        except CorruptRecordError as exc:  # a declared size below 14: a zero-filled (preallocated) tail
            scan.cut_reason = exc.reason
            scan.valid_bytes = exc.position or 0
        finally:
            spans.close()
        if scan.cut_reason is None and scan.valid_bytes < size:
            scan.valid_bytes = reader.valid_bytes
            if reader.stop is StopReason.PARTIAL_BATCH:
                scan.cut_reason = (f"truncated batch: declares {reader.declared_size} bytes, only "
                                   f"{size - reader.valid_bytes} remain")
            else:
                scan.cut_reason = f"{size - reader.valid_bytes} bytes at the end are too short for a batch"
        self.progress(size - reported)
        plan.bytes += size
        truncated = scan.cut_reason is not None and not plan.rebuild_indexes_only
        index_problem = "the segment is truncated" if truncated else index_check.finish(scan.valid_bytes)
        time_problem = "the segment is truncated" if truncated else time_check.finish(scan.valid_bytes)
        txn_problem = txn_check.finish(scan.aborted)
        if truncated and (txn_check.exists or scan.aborted):
            txn_problem = "the segment is truncated"
        for suffix, problem in ((INDEX_SUFFIX, index_problem), (TIME_INDEX_SUFFIX, time_problem),
                                (TXN_INDEX_SUFFIX, txn_problem)):
            if problem is None:
                continue
            name = _name(base, suffix)
            path = self.files.get(name)
            self.rebuild.append(RecoveryAction(
                ActionKind.REBUILD, self.dir / name, problem, 0, path.stat().st_size if path else 0,
                source=self.source(name) if path else None, existed=path is not None, log_bytes=scan.valid_bytes,
                entries=tuple(scan.aborted) if suffix == TXN_INDEX_SUFFIX else ()))
        return scan

    # -- producer snapshots and leader epochs ------------------------------------------------------------
    def inspect_snapshots(self, target: int | None = None) -> dict[int, tuple[str, ProducerSnapshot]]:
        """The producer snapshots, read and checked. With ``target`` (recovery from a recovery point) those at or
        below it are read newest first only until an intact one is found, as Kafka loads producer state: the
        older ones are never used (nor checked, nor deleted when corrupt)."""
        found = sorted(((offset, name) for name in self.files
                        if classify(name) is FileKind.PRODUCER_SNAPSHOT and (offset := _base(name)) is not None),
                       reverse=True)
        out = {}
        usable_below = False
        for offset, name in found:
            if target is not None and offset <= target:
                if usable_below:
                    continue
                out[offset] = (name, inspect_producer_snapshot(self.files[name]))
                usable_below = not out[offset][1].problems
            else:
                out[offset] = (name, inspect_producer_snapshot(self.files[name]))
        if not self.plan.rebuild_indexes_only:
            for offset, (name, snapshot) in sorted(out.items()):
                if snapshot.problems:
                    self.delete(name, f"corrupt producer snapshot ({snapshot.problems[0].reason}); Kafka deletes it")
        return out

    def plan_snapshots(self, snapshots: dict[int, tuple[str, ProducerSnapshot]], leo: int,
                       producers: ProducerStateManager, changed: bool) -> None:
        """Snapshots past the new log end go (Kafka deletes stray snapshots); when the end moved, one at the
        new end keeps the next startup from replaying the log."""
        kept_at_end = False
        for offset, (name, snapshot) in sorted(snapshots.items()):
            if snapshot.problems or name not in self.files:
                continue
            if offset > leo:
                changed = True
                self.delete(name, f"producer snapshot at offset {offset} is beyond the log end offset {leo}",
                            bucket=self.last)
            elif offset == leo:
                kept_at_end = True
        if changed and not kept_at_end:
            self.last.append(RecoveryAction(
                ActionKind.REBUILD, segment_path(self.dir, leo, PRODUCER_SNAPSHOT_SUFFIX),
                f"producer state at the new log end offset {leo}", existed=False, entries=tuple(producers.entries())))

    def plan_leader_epochs(self, leo: int, batch_epochs: LeaderEpochCache) -> None:
        """Epochs starting past the log end go; epochs of recovered batches newer than the cache's latest are
        added at the batch's base offset (LogSegment.recover's rule)."""
        path = self.files.get(LEADER_EPOCH_CHECKPOINT)
        on_disk: list[EpochEntry] = []
        unreadable = None
        if path is not None:
            try:
                on_disk = LeaderEpochCheckpointFile(path).read()
            except KcliError as exc:
                unreadable = exc.reason
        cache = LeaderEpochCache(on_disk)
        cache.truncate_from_end(leo)
        for entry in batch_epochs.entries:
            cache.assign(entry.epoch, entry.start_offset)
        if unreadable is None and cache.entries == on_disk:
            return
        if path is None and not cache.entries:
            return
        if unreadable is not None:
            reason = f"unreadable ({unreadable}): rebuilt from the batches' leader epochs"
        elif len(cache.entries) < len(on_disk) or any(e.start_offset > leo for e in on_disk):
            reason = f"epochs starting beyond the log end offset {leo} removed"
        else:
            reason = "leader epochs of the recovered batches added"
        self.last.append(RecoveryAction(ActionKind.REBUILD, self.dir / LEADER_EPOCH_CHECKPOINT, reason, 0,
                                        path.stat().st_size if path else 0, source=self.source(LEADER_EPOCH_CHECKPOINT)
                                        if path else None, existed=path is not None, entries=tuple(cache.entries)))


def _invalid_reason(batch, base: int, prev_last: int | None) -> str | None:
    """LogSegment.recover's per-batch checks (CRC, size, relative offset range), plus offsets increasing within
    and across batches: Kafka notices those only when an index append fails and then empties the whole segment;
    cutting at the first offending batch keeps more and still leaves a log whose offsets only grow."""
    if not batch.is_valid:
        return batch.invalid_reason() or "invalid batch"
    if batch.magic > 2:
        return f"unknown magic {batch.magic}"
    first, last = batch.base_offset, batch.last_offset
    if last < first:
        return f"last offset {last} is below the base offset {first}"
    if first < base:
        return f"batch offset {first} is below the segment base offset {base}"
    if last - base > INT32_MAX:
        return f"offset {last} does not fit the segment (relative offset above Int.MAX)"
    if prev_last is not None and first <= prev_last:
        return f"offsets go backwards: batch starts at {first} after offset {prev_last}"
    return None


# -- index checks ------------------------------------------------------------------------------------

class _IndexCheck:
    """Does an .index/.timeindex agree with the log? The checks are kcli.storage.index_check's (shared with
    verify); recovery rebuilds on the first error or a preallocated tail, while the layouts Kafka itself has
    written (first-offset keys, multi-batch entries) pass, so intact partitions are left alone."""

    def __init__(self, missing: str | None, keep_preallocated: bool = False) -> None:
        self.problem = missing
        self.keep_preallocated = keep_preallocated
        self.matcher: OffsetIndexMatcher | TimeIndexMatcher | None = None

    @classmethod
    def offset_index(cls, path: Path | None, base: int, keep_preallocated: bool = False) -> _IndexCheck:
        check = cls(None if path else "offset index is missing", keep_preallocated)
        if path is not None:
            check.matcher = OffsetIndexMatcher(path, base, check._note)
        return check

    @classmethod
    def time_index(cls, path: Path | None, base: int, keep_preallocated: bool = False) -> _IndexCheck:
        check = cls(None if path else "time index is missing", keep_preallocated)
        if path is not None:
            check.matcher = TimeIndexMatcher(path, base, check._note)
        return check

    def _note(self, finding: IndexFinding) -> None:
        if finding.code == "index_preallocated" and self.keep_preallocated:
            return
        if self.problem is None and (not finding.warning or finding.code == "index_preallocated"):
            self.problem = finding.reason

    def feed(self, position: int, first: int, last: int, max_timestamp: int) -> None:
        if isinstance(self.matcher, OffsetIndexMatcher):
            self.matcher.feed(position, first, last)
        elif self.matcher is not None:
            self.matcher.feed(first, last, max_timestamp)

    def finish(self, valid_bytes: int) -> str | None:
        if isinstance(self.matcher, OffsetIndexMatcher):
            self.matcher.finish(valid_bytes)
        elif self.matcher is not None:
            self.matcher.finish()
        return self.problem


class _TxnIndexCheck:
    """Does a .txnindex hold exactly the segment's aborted transactions (producer, first and last offset)?"""

    def __init__(self, path: Path | None, base: int) -> None:
        self.exists = path is not None
        self.problem: str | None = None
        self.entries: list[AbortedTxn] = []
        if path is None:
            return
        try:
            index = TransactionIndex(path, base)
            if index.trailing_bytes:
                self.problem = f"{index.trailing_bytes} bytes of a partial entry at the end"
            index.sanity_check()
            self.entries = list(index.entries())
        except KcliError as exc:
            self.problem = f"unreadable ({exc.reason})"

    def finish(self, expected: list[AbortedTxn]) -> str | None:
        if self.problem is not None:
            return self.problem
        # Not the last stable offsets: they depend on what was in flight when the broker wrote them.
        found = [(e.producer_id, e.first_offset, e.last_offset) for e in self.entries]
        if found != [(e.producer_id, e.first_offset, e.last_offset) for e in expected]:
            return (f"holds {len(self.entries)} aborted transactions, the log's ABORT markers give {len(expected)}"
                    if len(self.entries) != len(expected) else "differs from the aborted transactions in the log")
        return None


# -- applying ----------------------------------------------------------------------------------------

def apply_recovery(plan: RecoveryPlan, *, quarantine: str | os.PathLike[str]) -> RecoveryResult:
    """Carry out a plan. Everything that will be cut, dropped or replaced is first copied to ``quarantine``
    (fsynced, with ``manifest.json``); only then does the partition change, in plan order: temp files and
    dropped segments, the truncation, rebuilt indexes (written to `.tmp` and renamed), snapshots, epochs.
    A crash at any step leaves a partition that another recovery finishes."""
    directory = plan.partition_dir
    quarantine = Path(quarantine).absolute()
    log_dir = directory.resolve().parent
    if quarantine.resolve().is_relative_to(log_dir):
        raise KcliError(f"quarantine {quarantine} lies inside the log dir {log_dir}: a broker takes every "
                        "sub-directory there for a partition", path=str(quarantine))
    if quarantine.exists() and any(quarantine.iterdir()):
        raise KcliError("quarantine directory is not empty", path=str(quarantine))
    crash = _CrashPoints()
    quarantine.mkdir(parents=True, exist_ok=True)
    records = []
    for seq, action in enumerate(plan.actions):
        records.append(_quarantine(action, seq, quarantine))
        crash.step()
    manifest = quarantine / MANIFEST_NAME
    write_atomically(manifest, json.dumps({
        "format": MANIFEST_FORMAT,
        "version": MANIFEST_VERSION,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "partition_dir": str(directory.absolute()),
        "log_end_offset": plan.log_end_offset,
        "actions": records,
    }, indent=2).encode())
    for parent in (quarantine, *list(quarantine.parents)[:3]):
        fsync_dir(parent)
    crash.step()
    rebuilt: set[int] = set()
    for action in plan.actions:
        kind = classify(action.file)
        if action.kind is ActionKind.DELETE:
            action.file.unlink()
            fsync_dir(directory)
        elif action.kind is ActionKind.RENAME:
            os.replace(action.file, action.target)
            fsync_dir(directory)
        elif action.kind is ActionKind.TRUNCATE:
            with open(action.file, "r+b") as log:
                log.truncate(action.position)
                os.fsync(log.fileno())
        elif kind in _INDEX_KINDS:
            base = offset_from_filename(action.file.name)
            if base in rebuilt:
                continue
            rebuilt.add(base)
            group = [a for a in plan.actions if a.kind is ActionKind.REBUILD and classify(a.file) in _INDEX_KINDS
                     and offset_from_filename(a.file.name) == base]
            _rebuild_segment_indexes(plan, base, group, crash)
            continue
        elif kind is FileKind.PRODUCER_SNAPSHOT:
            write_producer_snapshot(action.file, action.entries)
        elif kind is FileKind.LEADER_EPOCH_CHECKPOINT:
            LeaderEpochCheckpointFile(action.file).write(action.entries)
        crash.step()
    # What recovery left in place, so that a restore can first check that nobody has changed it since.
    document = json.loads(manifest.read_text())
    for action, record in zip(plan.actions, document["actions"]):
        if action.kind is ActionKind.REBUILD and action.file.exists():
            record["result_sha256"] = _file_sha256(action.file)
    document["applied"] = True
    write_atomically(manifest, json.dumps(document, indent=2).encode())
    return RecoveryResult(plan, quarantine, manifest, document["actions"])


def _quarantine(action: RecoveryAction, seq: int, quarantine: Path) -> dict[str, Any]:
    """Copy the bytes an action removes into the quarantine (fsynced); the manifest entry for it."""
    record = {
        "action": action.kind.value,
        "file": action.file.name,
        "position": action.position,
        "end": action.end,
        "bytes": action.bytes,
        "first_offset": action.first_offset,
        "last_offset": action.last_offset,
        "reason": action.reason,
        "target": None if action.target is None else action.target.name,
        "existed": action.existed,
        "sha256": None,
        "quarantine_file": None,
    }
    if action.kind is ActionKind.RENAME or not action.existed:
        return record
    origin = action.origin
    size = origin.stat().st_size
    if size != action.end:
        raise KcliError(f"is {size} bytes, {action.end} when recovery was planned: plan again", path=str(origin))
    if action.kind is ActionKind.REBUILD:
        digest, stored = _measure_without_trailing_zeros(origin, action.bytes)
        if stored <= _INLINE_LIMIT:
            with open(origin, "rb") as src:
                data = src.read(stored)
            if len(data) != stored:
                raise KcliError("file shrank while being quarantined", path=str(origin))
            record.update(sha256=digest, stored_bytes=stored, inline=base64.b64encode(data).decode("ascii"))
            return record
    name = f"{seq:04d}-{action.file.name}"
    if action.kind is ActionKind.TRUNCATE:
        name += f".{action.position}-{action.end}"
    digest, stored = _copy_without_trailing_zeros(origin, action.position, action.bytes, quarantine / name)
    record.update(sha256=digest, quarantine_file=name, stored_bytes=stored)
    return record


def _copy_without_trailing_zeros(origin: Path, position: int, length: int, target: Path) -> tuple[str, int]:
    """Copy ``origin[position:position+length]`` to ``target`` (fsynced) without its trailing zeros, and with
    all-zero chunks as holes: a 10 MiB preallocated index holding 80 bytes of entries costs 80 bytes. Returns
    the SHA-256 of the whole range and the bytes stored; restoring pads with zeros to ``length``."""
    digest = hashlib.sha256()
    stored = 0
    with open(origin, "rb") as src, open(target, "wb") as out:
        src.seek(position)
        done = 0
        while done < length:
            chunk = src.read(min(_COPY_CHUNK, length - done))
            if not chunk:
                raise KcliError("file shrank while being quarantined", path=str(origin))
            digest.update(chunk)
            kept = len(chunk.rstrip(b"\0"))
            if kept:
                out.seek(done)  # a hole over any all-zero chunks before this one
                out.write(chunk[:kept] if kept < len(chunk) else chunk)
                stored = done + kept
            done += len(chunk)
        out.truncate(stored)
        out.flush()
        os.fsync(out.fileno())
    return digest.hexdigest(), stored


def _measure_without_trailing_zeros(origin: Path, length: int) -> tuple[str, int]:
    """SHA-256 of ``origin[:length]`` and its length without trailing zeros (what a copy would store)."""
    digest = hashlib.sha256()
    stored = done = 0
    with open(origin, "rb") as src:
        while done < length:
            chunk = src.read(min(_COPY_CHUNK, length - done))
            if not chunk:
                raise KcliError("file shrank while being quarantined", path=str(origin))
            digest.update(chunk)
            kept = len(chunk.rstrip(b"\0"))
            if kept:
                stored = done + kept
            done += len(chunk)
    return digest.hexdigest(), stored


def _padded_sha256(data: bytes, length: int) -> str:
    digest = hashlib.sha256(data)
    zeros = length - len(data)
    block = bytes(min(zeros, _COPY_CHUNK))
    while zeros > 0:
        digest.update(block[: min(zeros, len(block))])
        zeros -= len(block)
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(_COPY_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _write_padded(path: Path, data: bytes, length: int) -> None:
    """``data`` then zeros up to ``length`` (a sparse tail), atomically: `.tmp`, fsync, rename."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "wb") as out:
        out.write(data)
        out.truncate(length)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _rebuild_segment_indexes(plan: RecoveryPlan, base: int, group: list[RecoveryAction], crash: _CrashPoints) -> None:
    """Rebuild a segment's indexes from its .log with the append-time rules into `.tmp` files, then rename the
    planned ones into place: a crash leaves either the old or the new index."""
    directory = plan.partition_dir
    log_bytes = group[0].log_bytes or 0
    temps = {kind: segment_path(directory, base, suffix + TMP_SUFFIX) for kind, suffix in _INDEX_SUFFIXES.items()}
    for path in temps.values():
        path.unlink(missing_ok=True)  # our own leftovers; a plan quarantines any that existed
    aborted = {txn.last_offset: txn for a in group if classify(a.file) is FileKind.TXN_INDEX for txn in a.entries}
    indexes = SegmentIndexes.for_segment(directory, base, plan.config, suffix=TMP_SUFFIX)
    try:
        for batch in FileBatchReader(segment_path(directory, base, LOG_SUFFIX), 0, log_bytes):
            indexes.append(batch, batch.position, aborted.get(batch.last_offset))
    finally:
        indexes.close()
    temps[FileKind.TXN_INDEX].touch()  # an empty .txnindex replaces one with stray entries
    crash.step()
    wanted = {classify(a.file): a.file for a in group}
    for kind, tmp in temps.items():
        if kind in wanted:
            os.replace(tmp, wanted[kind])
            fsync_dir(directory)
            crash.step()
        else:
            tmp.unlink()


class _CrashPoints:
    """Counts mutating steps; with KCLI_TEST_CRASH_AFTER=N the process dies by SIGKILL after step N."""

    def __init__(self) -> None:
        value = os.environ.get(CRASH_AFTER_ENV, "")
        self.limit = int(value) if value.isdigit() else None
        self.count = 0

    def step(self) -> None:
        self.count += 1
        if self.limit is not None and self.count >= self.limit:
            os.kill(os.getpid(), signal.SIGKILL)


# -- restoring ---------------------------------------------------------------------------------------

class RestoreRefusedError(KcliError):
    """A file recovery changed has changed again since (a broker appended, an operator edited): restoring would
    overwrite that, so nothing is restored."""


@dataclass
class _Restore:
    manifest_path: Path
    directory: Path
    records: list[dict[str, Any]]
    saved: dict[int, bytes]  # record index -> quarantined bytes (without their trailing zeros)
    done: list[bool]  # record index -> already undone (a second restore changes nothing)


def _load_manifest(manifest_path: Path) -> dict[str, Any]:
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read quarantine manifest: {exc}", path=str(manifest_path)) from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise InputError("not a kctl recover quarantine manifest", path=str(manifest_path))
    if manifest.get("version") not in _READABLE_VERSIONS:
        raise InputError(f"unsupported manifest version {manifest.get('version')}", path=str(manifest_path))
    return manifest


def _check_restore(manifest_path: Path) -> _Restore:
    """Read a manifest and its quarantined bytes, and check that every file it would touch is still as
    recovery left it (or already restored); raise before anything changes otherwise."""
    manifest = _load_manifest(manifest_path)
    quarantine = manifest_path.parent
    directory = Path(manifest["partition_dir"])
    records = manifest["actions"]
    saved: dict[int, bytes] = {}
    for i, r in enumerate(records):
        if r.get("inline") is not None:
            source = manifest_path
            try:
                data = base64.b64decode(r["inline"], validate=True)
            except ValueError:
                raise InputError(f"entry {i}: inline content is not base64", path=str(source)) from None
        elif r["quarantine_file"] is None:
            continue
        else:
            source = quarantine / r["quarantine_file"]
            try:
                data = source.read_bytes()
            except OSError as exc:
                raise InputError(f"cannot read quarantined bytes: {exc.strerror or exc}", path=str(source)) from None
        if len(data) != r.get("stored_bytes", r["bytes"]) or _padded_sha256(data, r["bytes"]) != r["sha256"]:
            raise KcliError("quarantined bytes do not match their SHA-256 in the manifest", path=str(source))
        saved[i] = data
    # Checked in the order restore undoes them (reverse), against the directory as the earlier undos leave it:
    # a swap renamed back frees the name a deleted file comes back to.
    view = _View(directory)
    done = [False] * len(records)
    for i in reversed(range(len(records))):
        r = records[i]
        state = _entry_state(r, view, saved.get(i, b""))
        if state is None:
            raise RestoreRefusedError(_moved_on(r), path=str(directory / r["file"]))
        done[i] = state == "restored"
        if not done[i]:
            view.undo(r)
    return _Restore(manifest_path, directory, records, saved, done)


class _View:
    """The partition directory as a restore will have changed it so far (names only; nothing is written)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.over: dict[str, Path | str | None] = {}  # name -> real file holding its content | SHA-256 | absent

    def exists(self, name: str) -> bool:
        if name in self.over:
            return self.over[name] is not None
        return (self.dir / name).exists()

    def is_file(self, name: str) -> bool:
        if name in self.over:
            return self.over[name] is not None
        return (self.dir / name).is_file()

    def sha256(self, name: str) -> str:
        value = self.over.get(name, self.dir / name)
        return value if isinstance(value, str) else _file_sha256(value)  # type: ignore[arg-type]

    def real(self, name: str) -> Path | None:
        """The real file while the name is untouched so far (byte-level checks need it)."""
        return None if name in self.over else self.dir / name

    def undo(self, r: dict[str, Any]) -> None:
        action = ActionKind(r["action"])
        if action is ActionKind.RENAME:
            self.over[r["file"]] = self.over.get(r["target"], self.dir / r["target"])
            self.over[r["target"]] = None
        elif action is ActionKind.REBUILD and not r["existed"]:
            self.over[r["file"]] = None
        elif action is ActionKind.TRUNCATE:
            self.over[r["file"]] = "(tail restored)"
        else:
            self.over[r["file"]] = r["sha256"]


def _moved_on(r: dict[str, Any]) -> str:
    action = ActionKind(r["action"])
    if action is ActionKind.TRUNCATE:
        return f"file no longer ends at byte {r['position']}, where recovery cut it: not restoring"
    if action is ActionKind.RENAME:
        return f"neither {r['file']} nor {r['target']} is where recovery left it: not restoring"
    if action is ActionKind.DELETE:
        return "exists with other content than the quarantined copy: not overwriting"
    return "changed since recovery rebuilt it: not overwriting"


def _entry_state(r: dict[str, Any], view: _View, data: bytes) -> str | None:
    """'recovered' (as recovery left it), 'restored' (as it was before), or None (changed since)."""
    name = r["file"]
    action = ActionKind(r["action"])
    if action is ActionKind.TRUNCATE:
        real = view.real(name)
        return None if real is None else _truncation_state(real, r, data)
    if action is ActionKind.RENAME:
        if view.exists(r["target"]) and not view.exists(name):
            return "recovered"
        if view.exists(name) and not view.exists(r["target"]):
            return "restored"
        return None
    exists = view.exists(name)
    if exists and not view.is_file(name):
        return None
    if action is ActionKind.DELETE:
        if not exists:
            return "recovered"
        return "restored" if view.sha256(name) == r["sha256"] else None
    # REBUILD: recovery wrote a new file (over the old one, if any)
    if not exists:
        return "restored" if not r["existed"] else None
    current = view.sha256(name)
    if r["existed"] and current == r["sha256"]:
        return "restored"
    if r.get("result_sha256") is not None and current != r["result_sha256"]:
        return None
    return "recovered"


def restore_quarantine(manifest_path: str | os.PathLike[str]) -> RestoreResult:
    """Undo one partition's applied recovery from its quarantine (see ``restore_run`` for a whole run)."""
    return restore_run([Path(manifest_path)])[0]


def restore_run(manifests: list[Path]) -> list[RestoreResult]:
    """Undo applied recoveries, all or nothing: every manifest and quarantined byte is read and every file
    they touch checked first (truncated files must still end at the cut, rebuilt and deleted files must hold
    what recovery left); only then are truncated tails appended back, dropped and replaced files restored
    byte-exact (preallocated length included), swaps renamed back and created files removed, in reverse
    order. Running it again changes nothing."""
    checked = [_check_restore(Path(m)) for m in manifests]
    results = []
    for plan in checked:
        result = RestoreResult(plan.manifest_path, plan.directory, [], [])
        for i in reversed(range(len(plan.records))):
            r = plan.records[i]
            if plan.done[i]:
                result.skipped.append(r)
                continue
            _undo(r, plan.directory / r["file"], plan.directory, plan.saved.get(i, b""))
            result.restored.append(r)
        fsync_dir(plan.directory)
        results.append(result)
    return results


def run_manifests(path: str | os.PathLike[str]) -> list[Path]:
    """The partition manifests of ONE quarantine run, given its directory, its run.json, or one partition's
    manifest.json or directory. Anything else (a tree holding several runs, an unrelated directory) is refused."""
    path = Path(path)
    if not path.exists():
        raise InputError("No such file or directory", path=str(path))
    if path.is_file():
        if path.name == RUN_MANIFEST_NAME:
            path = path.parent
        else:
            return [path]
    if (path / MANIFEST_NAME).is_file():
        return [path / MANIFEST_NAME]
    children = sorted(c for c in path.iterdir() if c.is_dir())
    found = [c / MANIFEST_NAME for c in children if (c / MANIFEST_NAME).is_file()]
    is_run = (path / RUN_MANIFEST_NAME).is_file() or (found and len(found) == len(children))
    if is_run and found:
        return found
    runs = sorted({m.parent.parent for m in path.rglob(MANIFEST_NAME)})
    hint = ("; it holds these runs: " + ", ".join(str(r) for r in runs[:5]) + (" ..." if len(runs) > 5 else "")
            if runs else "")
    raise InputError("not a quarantine run: give one run's directory (<log dir>.kctl-quarantine/<time>) or one "
                     f"partition's {MANIFEST_NAME}{hint}", path=str(path))


def _truncation_state(path: Path, r: dict[str, Any], data: bytes) -> str | None:
    if not path.is_file():
        return None
    size = path.stat().st_size
    if size == r["position"]:
        return "recovered"
    if size == r["end"]:
        with open(path, "rb") as file:
            file.seek(r["position"])
            tail = file.read()
        if tail[: len(data)] == data and not tail[len(data):].strip(b"\0"):
            return "restored"
    return None


def _undo(r: dict[str, Any], path: Path, directory: Path, data: bytes) -> None:
    """Undo one manifest entry that ``_entry_state`` found as recovery left it."""
    action = ActionKind(r["action"])
    if action is ActionKind.TRUNCATE:
        with open(path, "r+b") as file:
            file.seek(r["position"])
            file.write(data)
            file.truncate(r["end"])
            file.flush()
            os.fsync(file.fileno())
    elif action is ActionKind.RENAME:
        os.replace(directory / r["target"], path)
    elif action is ActionKind.REBUILD and not r["existed"]:
        path.unlink()
    else:
        _write_padded(path, data, r["bytes"])


# -- quarantine location -----------------------------------------------------------------------------

def quarantine_root(log_dir: str | os.PathLike[str]) -> Path:
    """`<log dir>.kctl-quarantine` beside the log dir: never inside it, where a broker takes every
    sub-directory for a partition (and refuses to start on one that is not)."""
    log_dir = Path(log_dir).resolve()
    return log_dir.with_name(log_dir.name + QUARANTINE_DIR_SUFFIX)


def new_quarantine_run(root: str | os.PathLike[str], now: datetime | None = None) -> Path:
    """`<root>/<UTC timestamp>` that does not exist yet (not created)."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    root = Path(root)
    candidate, n = root / stamp, 2
    while candidate.exists():
        candidate, n = root / f"{stamp}-{n}", n + 1
    return candidate


class QuarantineRun:
    """ONE quarantine run for several partitions recovered together (one `kctl recover`, one broker startup):
    ``<root>/<UTC timestamp>/run.json`` and a ``<partition>/manifest.json`` per partition recovered. Nothing is
    created until a partition needs changes (and a run started in the same second by another process takes
    the next free name); ``kctl recover --restore <run dir>`` undoes the whole run.

        run = QuarantineRun.beside(log_dir)          # <log dir>.kctl-quarantine/<UTC timestamp>
        for partition_dir in partitions:
            run.recover(partition_dir, config=config)   # plan + apply; None when nothing to do
    """

    def __init__(self, root: str | os.PathLike[str], now: datetime | None = None) -> None:
        self.root = Path(root).absolute()
        self._now = now
        self.directory = new_quarantine_run(self.root, now)
        self.results: list[RecoveryResult] = []
        self._used: set[str] = set()
        self._created = False

    @classmethod
    def beside(cls, log_dir: str | os.PathLike[str], now: datetime | None = None) -> QuarantineRun:
        return cls(quarantine_root(log_dir), now)

    def partition_dir(self, partition_dir: str | os.PathLike[str]) -> Path:
        """A new sub-directory of the run for this partition (``<name>-2`` for a second partition so named)."""
        name = Path(partition_dir).name
        candidate, n = name, 2
        while candidate in self._used or (self.directory / candidate).exists():
            candidate, n = f"{name}-{n}", n + 1
        self._used.add(candidate)
        return self.directory / candidate

    def _create(self) -> None:
        """Make the run directory and its run.json; mkdir fails on a name taken since this run chose it, so
        two runs never share a directory."""
        if self._created:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                self.directory.mkdir()
                break
            except FileExistsError:
                self.directory = new_quarantine_run(self.root, self._now)
        write_atomically(self.directory / RUN_MANIFEST_NAME, json.dumps({
            "format": RUN_FORMAT, "version": 1,
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds")}).encode())
        self._created = True

    def apply(self, plan: RecoveryPlan) -> RecoveryResult:
        """``apply_recovery`` with this run's quarantine (the run directory and run.json made on first use)."""
        self._create()
        target = self.partition_dir(plan.partition_dir)
        result = apply_recovery(plan, quarantine=target)
        self.results.append(result)
        return result

    def recover(self, partition_dir: str | os.PathLike[str], *, config: LogConfig | None = None,
                recovery_point: int | None = None) -> RecoveryResult | None:
        """Plan and apply recovery of one partition into this run; None when the partition needs nothing."""
        plan = plan_recovery(partition_dir, config=config, recovery_point=recovery_point)
        return self.apply(plan) if plan.actions else None



# -- helpers -----------------------------------------------------------------------------------------

def _name(base: int, suffix: str) -> str:
    return segment_path(".", base, suffix).name


def _base(name: str) -> int | None:
    try:
        return offset_from_filename(name)
    except KcliError:
        return None


def _next_offset(path: Path, base: int) -> int:
    """Kafka `readNextOffset` of a segment file: one past the last batch, or its base offset when empty."""
    next_offset = base
    try:
        for batch in FileBatchReader(path):
            next_offset = batch.last_offset + 1
    except KcliError:
        pass
    return next_offset


def _claimed_offsets(path: Path, start: int, end: int, expected: int) -> tuple[int | None, int | None]:
    """First and last offsets that the batch headers in bytes [start, end) claim, following declared sizes
    (CRCs unchecked); claims outside [expected, expected + Int.MAX] are noise and ignored."""
    first = last = None
    with open(path, "rb") as file:
        position = start
        while end - position > HEADER_SIZE_UP_TO_MAGIC:
            file.seek(position)
            head = file.read(min(RECORD_BATCH_OVERHEAD, end - position))
            offset, size = _OFFSET_SIZE.unpack_from(head)
            if size < MIN_RECORD_OVERHEAD or not expected <= offset <= expected + INT32_MAX:
                break
            claimed = offset
            if head[MAGIC_OFFSET] == 2 and len(head) >= _LAST_OFFSET_DELTA_AT + 4:
                claimed = offset + _LAST_OFFSET_DELTA.unpack_from(head, _LAST_OFFSET_DELTA_AT)[0]
            first = offset if first is None else first
            if claimed >= offset and (last is None or claimed > last):
                last = claimed
            position += LOG_OVERHEAD + size
    return first, last


def _lost_offsets(path: Path, start: int, end: int, first: int, base: int, index: Path | None,
                  time_index: Path | None) -> tuple[int | None, int | None, bool]:
    """Offsets a truncation at ``start`` removes: from ``first`` (one past the last valid offset) to the last
    offset found after the cut, by the batch headers at the cut, a forward scan for intact batches (CRC-checked)
    and the segment's index entries. The third value says the count is a lower bound: the last offset found
    does not come from an intact batch chain that ends the file (a zeroed or torn region hides the rest)."""
    if end <= start:
        return None, None, False
    _claimed_first, claimed_last = _claimed_offsets(path, start, end, first)
    found = find_intact_batches(path, start, end, first)
    indexed = _indexed_offsets_after(index, time_index, base, start, end, first)
    candidates = [x for x in (claimed_last, found[-1][2] if found else None, indexed) if x is not None]
    if not candidates:
        # Nothing readable after the cut: offsets may have been there (a zeroed tail), none can be named.
        return (first, None, True) if end - start >= RECORD_BATCH_OVERHEAD else (None, None, False)
    last = max(candidates)
    chained = bool(found) and found[-1][0] + found[-1][3] == end and last == found[-1][2] and all(
        a[0] + a[3] == b[0] for a, b in zip(found, found[1:]))
    return first, last, not chained


def find_intact_batches(path: Path, start: int, end: int, first: int) -> list[tuple[int, int, int, int]]:
    """(position, base offset, last offset, size) of the v2 batches whose CRC holds in ``path[start:end]``,
    found by scanning forward byte by byte past damage, offsets increasing from ``first`` (recovery's loss
    estimate; dump-log's salvage of quarantined bytes)."""
    import mmap

    from kcli.records.batch import ATTRIBUTES_OFFSET, CRC_FIELD, CRC_OFFSET
    from kcli.records.crc import crc32c

    out: list[tuple[int, int, int, int]] = []
    if end - start < RECORD_BATCH_OVERHEAD:
        return out
    with open(path, "rb") as file:
        mm = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(mm)
        try:
            candidate = start
            while True:
                magic_at = mm.find(b"\x02", candidate + MAGIC_OFFSET, end)
                if magic_at < 0:
                    break
                q = magic_at - MAGIC_OFFSET
                candidate = q + 1
                if end - q < RECORD_BATCH_OVERHEAD:
                    break
                offset, size = _OFFSET_SIZE.unpack_from(mm, q)
                total = LOG_OVERHEAD + size
                if size < RECORD_BATCH_OVERHEAD - LOG_OVERHEAD or q + total > end:
                    continue
                if not first <= offset <= first + INT32_MAX or (out and offset <= out[-1][2]):
                    continue
                if CRC_FIELD.unpack_from(mm, q + CRC_OFFSET)[0] != crc32c(view[q + ATTRIBUTES_OFFSET: q + total]):
                    continue
                last = offset + _LAST_OFFSET_DELTA.unpack_from(mm, q + _LAST_OFFSET_DELTA_AT)[0]
                out.append((q, offset, max(last, offset), total))
                candidate = q + total
        finally:
            view.release()
            mm.close()
    return out


def _indexed_offsets_after(index: Path | None, time_index: Path | None, base: int, start: int, end: int,
                           first: int) -> int | None:
    """The highest offset the .index (entries at or past the cut) or the .timeindex names at or after ``first``."""
    from kcli.storage.index import OffsetIndex, TimeIndex

    best: int | None = None
    for path, cls in ((index, OffsetIndex), (time_index, TimeIndex)):
        if path is None:
            continue
        try:
            with cls(path, base) as idx:
                for entry in idx.entries():
                    if cls is OffsetIndex and not start <= entry.position < end:
                        continue
                    if first <= entry.offset <= first + INT32_MAX and (best is None or entry.offset > best):
                        best = entry.offset
        except (KcliError, OSError, ValueError):
            continue  # a damaged index names nothing
    return best
