"""Verify a log: segments, indexes, transaction indexes, producer snapshots and checkpoint files.

One streaming pass per segment checks what the broker's recovery checks (framing, size, CRC, offsets
increasing) and what kafka-dump-log's index checks report, plus offset continuity across segments and
the .txnindex against the ABORT markers. Returns a ``VerifyReport``; never prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcli.errors import CorruptIndexError, InputError, KcliError
from kcli.records import Batch, LegacyMessage, RecordBatch, StopReason, make_batch
from kcli.records.batch import ATTRIBUTES_OFFSET, HEADER, RECORD_BATCH_OVERHEAD
from kcli.records.crc import crc32c
from kcli.records.control import ControlRecordType, parse_control_type
from kcli.records.layout import MAGIC_OFFSET
from kcli.records.types import INT32_MAX
from kcli.storage.checked import batch_integrity, header_problem, offset_problem
from kcli.storage.files import FileKind, offset_from_filename
from kcli.storage.index import OffsetIndex, TimeIndex, TransactionIndex
from kcli.storage.index_check import NEVER, IndexFinding, OffsetIndexMatcher, TimeIndexMatcher
from kcli.storage.segment import FileBatchReader, LogSegment
from kcli.storage.snapshot import inspect_producer_snapshot
from kcli.tools.inputs import InputFile, Inputs, collect_inputs, file_size
from kcli.tools.report import UNREADABLE, Problem, Severity, os_problem


@dataclass
class VerifyReport:
    paths: list[str]
    files: int = 0
    segments: int = 0
    bytes: int = 0
    batches: int = 0
    records: int = 0
    problems: list[Problem] = field(default_factory=list)
    seconds: float = 0.0
    deep: bool = False
    strict: bool = False  # warnings fail too (``ok``)
    preallocated_active: int = 0  # active segments' indexes still zero-filled to their maximum size

    @property
    def notes(self) -> list[str]:
        """Facts that are not problems, said once for the whole run."""
        if not self.preallocated_active:
            return []
        return [f"{self.preallocated_active} index files of active segments are preallocated (zero-filled to their "
                "maximum size): normal for a running broker, which trims them when it rolls the segment or stops "
                "cleanly; only their entries are counted as data"]

    @property
    def ok(self) -> bool:
        return self.is_clean(strict=self.strict)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity is Severity.ERROR]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity is Severity.WARNING]

    def is_clean(self, *, strict: bool = False) -> bool:
        return not (self.problems if strict else self.errors)

    def to_json(self, *, strict: bool | None = None) -> dict[str, Any]:
        return {
            "ok": self.is_clean(strict=self.strict if strict is None else strict),
            "paths": self.paths,
            "deep": self.deep,
            "files": self.files,
            "segments": self.segments,
            "bytes": self.bytes,
            "batches": self.batches,
            "records": self.records,
            "errors": len(self.errors),
            "warnings": len(self.warnings),
            "preallocated_active_indexes": self.preallocated_active,
            "notes": self.notes,
            "seconds": round(self.seconds, 3),
            "problems": [p.to_json() for p in self.problems],
        }


@dataclass
class _SegmentResult:
    base_offset: int
    first_offset: int | None = None
    last_offset: int | None = None
    valid_bytes: int = 0
    size: int = 0
    last_epoch: int = -1
    damaged_head: bool = False  # bytes that cannot be trusted before the first batch that can
    damaged_tail: bool = False  # ... after the last one


@dataclass
class _TxnState:
    """Per partition: open transactions (producer -> first data offset) and the aborts they must index."""

    open_first_offset: dict[int, int] = field(default_factory=dict)
    expected_aborts: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)  # txnindex path -> entries
    # every ABORT marker per txnindex path, (producer, offset): after compaction removed an aborted transaction's
    # data its marker and entry stay (Kafka's CleanedTransactionMetadata keeps both for a pass)
    abort_markers: dict[str, set[tuple[int, int]]] = field(default_factory=dict)


class _Verifier:
    def __init__(self, report: VerifyReport, deep: bool, progress: Callable[[int], None] | None) -> None:
        self.report = report
        self.deep = deep
        self.progress = progress or (lambda _n: None)
        self.active = False  # checking the last (active) segment of a partition
        self.preallocated_data: int | None = None  # bytes of entries in the index just opened, if preallocated

    def problem(self, file: Path | str, reason: str, code: str, *, position: int | None = None,
                base_offset: int | None = None, severity: Severity = Severity.ERROR) -> None:
        self.report.problems.append(Problem(str(file), position, base_offset, reason, code, severity))

    # -- partitions --------------------------------------------------------------------------
    def verify_partition(self, files: list[InputFile]) -> None:
        if any(f.kind is FileKind.KAFKA07_LOG for f in files):  # Kafka 0.7 segments: byte offsets, no indexes
            self.verify_kafka07([f for f in files if f.kind is FileKind.KAFKA07_LOG])
            files = [f for f in files if f.kind is not FileKind.KAFKA07_LOG]
        logs = [f for f in files if f.kind is FileKind.LOG]
        others = [f for f in files if f.kind is not FileKind.LOG]
        by_name = {f.path.name for f in files}
        txn = _TxnState()
        previous: _SegmentResult | None = None
        log_end_offset = None
        for log in logs:
            self.report.files += 1
            self.active = log is logs[-1]
            try:
                segment = LogSegment(log.path)
                result = self._verify_log(segment, by_name, txn)
            except (OSError, InputError) as exc:  # unreadable, or deleted since listed (a live broker's retention)
                self.report.problems.append(_unreadable(log.path, exc))
                continue
            if previous is not None and result.first_offset is not None and previous.last_offset is not None:
                if segment.base_offset <= previous.last_offset:
                    self.problem(log.path, f"segment base offset {segment.base_offset} overlaps the previous segment, "
                                 f"which ends at offset {previous.last_offset}", "segment_overlap", position=0,
                                 base_offset=segment.base_offset)
                elif result.first_offset > previous.last_offset + 1 and not (previous.damaged_tail or result.damaged_head):
                    self.problem(log.path, f"offsets {previous.last_offset + 1}..{result.first_offset - 1} are missing "
                                 "between segments (normal after compaction or retention)", "offset_gap", position=0,
                                 base_offset=result.first_offset, severity=Severity.WARNING)
            if result.last_offset is not None:
                previous = result
                log_end_offset = result.last_offset + 1
            elif log_end_offset is None or segment.base_offset > log_end_offset:
                log_end_offset = segment.base_offset
            if segment.txn_index_path.name in by_name or txn.expected_aborts.get(str(segment.txn_index_path)):
                self.report.files += segment.txn_index_path.name in by_name
                try:
                    self.verify_txn_index(segment, txn)
                except (OSError, InputError) as exc:
                    self.report.problems.append(_unreadable(segment.txn_index_path, exc))
        log_names = {segment_base(f.path) for f in logs}
        for other in others:
            if other.kind in (FileKind.INDEX, FileKind.TIME_INDEX, FileKind.TXN_INDEX):
                if segment_base(other.path) not in log_names:
                    self.report.files += 1
                    if logs:
                        self.problem(other.path, "index file without its .log segment (the broker deletes it)",
                                     "orphan_index", severity=Severity.WARNING)
                    else:
                        try:
                            self.verify_lone_index(other)
                        except (OSError, InputError) as exc:
                            self.report.problems.append(_unreadable(other.path, exc))
                continue
            self.report.files += 1
            try:
                self.verify_other(other, log_end_offset)
            except (OSError, InputError) as exc:
                self.report.problems.append(_unreadable(other.path, exc))

    def verify_kafka07(self, files: list[InputFile]) -> None:
        from kcli.tools.kafka07 import verify_segments

        counts = verify_segments([f.path for f in files], deep=self.deep)
        self.report.files += counts.files
        self.report.segments += counts.files
        self.report.bytes += counts.bytes
        self.report.batches += counts.messages
        self.report.records += counts.records
        self.report.problems.extend(counts.problems)
        self.progress(counts.bytes)

    def _verify_log(self, segment: LogSegment, by_name: set[str], txn: _TxnState) -> _SegmentResult:
        index = time_index = None
        if segment.index_path.name in by_name:
            self.report.files += 1
            index = self.open_offset_index(segment)
        elif segment.size > 0:
            self.problem(segment.index_path, "offset index is missing: the broker rebuilds it by recovering the "
                         "segment", "missing_index", severity=Severity.WARNING, base_offset=segment.base_offset)
        if segment.time_index_path.name in by_name:
            self.report.files += 1
            time_index = self.open_time_index(segment)
        return self.verify_segment(segment, txn, index, time_index)

    # -- one .log ------------------------------------------------------------------------------
    def verify_segment(self, segment: LogSegment, txn: _TxnState, index: OffsetIndexMatcher | None = None,
                       time_index: TimeIndexMatcher | None = None) -> _SegmentResult:
        report = self.report
        path = segment.log_path
        result = _SegmentResult(segment.base_offset, size=path.stat().st_size)
        report.segments += 1
        # One window buffer for the whole segment (no fresh allocation per 8 MiB), CRCs over memoryview slices
        # of it: the bytes are copied once, from the page cache, as the read+CRC ceiling's are.
        reader = FileBatchReader(path, reuse_buffer=True)
        prev_last: int | None = None
        base = segment.base_offset
        progressed = 0
        unpack = HEADER.unpack_from
        magic_at, crc_from, min_size = MAGIC_OFFSET, ATTRIBUTES_OFFSET, RECORD_BATCH_OVERHEAD
        deep = self.deep
        view_of: bytes | None = None
        view = memoryview(b"")
        index_next = index.next_position if index is not None else NEVER
        # The offset index check's common case inline (an entry at this batch's start, keyed by its last offset,
        # above the previous one): the matcher's state in locals, handed back before any other feed.
        index_positions = index.positions if index is not None else []
        index_offsets = index.offsets if index is not None else []
        index_count = len(index_positions)
        index_slot = index.slot if index is not None else 0
        index_prev = index.prev_offset if index is not None else None
        inline_index = index is not None and index.pending is None
        time_next = time_index.next_offset if time_index is not None else NEVER
        top = base + INT32_MAX
        batches = records = 0
        first_offset = last_offset = None
        # A batch that cannot be trusted since the last one that could: the offsets between them are in damaged
        # bytes (reported as such), not a gap compaction left.
        damaged = False
        try:
            # Hot loop: a plain valid v2 batch with offsets in order is checked straight from the window (one
            # header unpack, one CRC over a memoryview, a few comparisons); anything else takes the slow path
            # (a batch object; each check reported).
            for chunk, local, total in reader.spans():
                batches += 1
                if chunk is not view_of:
                    view_of, view = chunk, memoryview(chunk)
                pos = reader.window_position + local
                if total >= min_size and chunk[local + magic_at] == 2 and not deep:
                    first, _, _, _, crc, attrs, delta, _, max_ts, _, _, _, count = unpack(chunk, local)
                    last = first + delta
                    if (not attrs & 0x37 or attrs & 0x37 <= 4) and 0 <= count <= delta + 1 and (
                            crc == crc32c(view[local + crc_from : local + total])):
                        records += count
                        if (prev_last is not None and first == prev_last + 1 and not damaged and base <= first
                                and last <= top
                                and last < time_next and pos - progressed <= 4194304):
                            if pos < index_next:
                                prev_last = last_offset = last  # in order, nothing to feed the index checks
                                continue
                            if (inline_index and index_positions[index_slot] == pos
                                    and index_offsets[index_slot] == last and (index_prev is None or last > index_prev)
                                    and (index_slot + 1 == index_count or index_positions[index_slot + 1] > pos)):
                                index_slot += 1  # the entry Kafka writes for this batch
                                index_prev = last
                                index_next = index_positions[index_slot] if index_slot < index_count else NEVER
                                prev_last = last_offset = last
                                continue
                    else:
                        checked = self._check_batch(path, make_batch(bytes(chunk[local : local + total]), pos),
                                                    segment, txn)
                        if checked is None:
                            damaged = True
                            continue
                        first, last, max_ts = checked
                else:
                    checked = self._check_batch(path, make_batch(bytes(chunk[local : local + total]), pos),
                                                segment, txn)
                    if checked is None:
                        damaged = True
                        continue
                    first, last, max_ts = checked
                if index is not None and pos >= index_next:
                    index.slot, index.prev_offset, index.next_position = index_slot, index_prev, index_next
                    index.feed(pos, first, last)
                    index_slot, index_prev, index_next = index.slot, index.prev_offset, index.next_position
                    inline_index = index.pending is None
                if time_index is not None and last >= time_next:
                    time_index.feed(first, last, max_ts)
                    time_next = time_index.next_offset
                # The checks of the checked reading path (kcli.storage.checked), each reported here.
                for found in (offset_problem(first, last, base_offset=base, previous_last=None),
                              offset_problem(first, last, base_offset=None, previous_last=prev_last)):
                    if found is not None:
                        self.problem(path, found[1], found[0], position=pos, base_offset=first)
                if prev_last is not None and first > prev_last + 1 and not damaged:
                    self.problem(path, f"offsets {prev_last + 1}..{first - 1} are missing (normal after compaction)",
                                 "offset_gap", position=pos, base_offset=first, severity=Severity.WARNING)
                if first_offset is None:
                    result.damaged_head = damaged
                damaged = False
                if prev_last is None or last > prev_last:
                    prev_last = last
                if first_offset is None:
                    first_offset = first
                last_offset = last
                if pos - progressed > 4 * 1024 * 1024:
                    self.progress(pos - progressed)
                    progressed = pos
        except InputError:
            raise  # cannot be read at all: the caller reports it as unreadable, not as damage
        except KcliError as exc:
            # A size below 14 (a zero-filled tail, usually): recovery truncates here.
            self.problem(path, exc.reason, "corrupt_batch_size", position=exc.position)
            result.valid_bytes = exc.position or 0
            damaged = True
        else:
            result.valid_bytes = reader.valid_bytes
            trailing = result.size - reader.valid_bytes
            if trailing:
                if reader.stop is StopReason.PARTIAL_BATCH:
                    reason = (f"truncated batch: declares {reader.declared_size} bytes, only {trailing} remain "
                              f"(Found {trailing} invalid bytes at the end of {path.name})")
                    code = "truncated_batch"
                else:
                    reason = f"Found {trailing} invalid bytes at the end of {path.name}"
                    code = "invalid_bytes_at_end"
                self.problem(path, reason, code, position=reader.valid_bytes)
                damaged = True
        finally:
            view.release()
            if index is not None:
                index.slot, index.prev_offset, index.next_position = index_slot, index_prev, index_next
            report.batches += batches
            report.records += records
            if first_offset is not None:
                result.first_offset = first_offset
            result.last_offset = last_offset
            result.damaged_tail = damaged
        self.progress(result.size - progressed)
        report.bytes += result.size
        if index is not None:
            index.finish(result.valid_bytes)
        if time_index is not None:
            time_index.finish()
        return result

    def _check_batch(self, path: Path, batch: Batch, segment: LogSegment, txn: _TxnState) -> tuple[int, int, int] | None:
        """Everything but the plain valid v2 batch: returns (first, last offset, max timestamp) for the checks,
        or None when the batch cannot be trusted for them."""
        pos = batch.position
        untrusted = batch_integrity(batch)  # the checked reading path's checks (kcli.storage.checked)
        if untrusted is not None:
            self.problem(path, untrusted[1], untrusted[0], position=pos, base_offset=batch.base_offset)
            return None
        magic = batch.magic
        if batch.codec_id > 4:
            self.problem(path, f"Unknown compression type id: {batch.codec_id}", "unknown_codec", position=pos,
                         base_offset=batch.base_offset)
        inconsistent = header_problem(batch)
        if inconsistent is not None:
            self.problem(path, inconsistent[1], inconsistent[0], position=pos, base_offset=batch.base_offset)
        if magic == 2:
            self._track_transactions(batch, segment, txn)
        if self.deep:
            self._verify_records(path, batch)
        else:
            self.report.records += batch.records_count if magic == 2 else 1
        return batch.base_offset, batch.last_offset, batch.max_timestamp

    def _verify_records(self, path: Path, batch: Batch) -> None:
        try:
            records = batch.records(strict=True)
        except KcliError as exc:
            self.problem(path, exc.reason, "corrupt_records", position=batch.position, base_offset=batch.base_offset)
            return
        self.report.records += len(records)
        if isinstance(batch, RecordBatch) and len(records) != batch.records_count:
            self.problem(path, f"batch declares {batch.records_count} records, holds {len(records)}",
                         "record_count_mismatch", position=batch.position, base_offset=batch.base_offset)
        prev = None
        for record in records:
            if record.offset < batch.base_offset or record.offset > batch.last_offset or (prev is not None and record.offset <= prev):
                self.problem(path, f"record offset {record.offset} is out of order or outside the batch "
                             f"[{batch.base_offset}, {batch.last_offset}]", "record_offset_out_of_range",
                             position=batch.position, base_offset=batch.base_offset)
                break
            prev = record.offset
            if isinstance(batch, LegacyMessage) and not record.valid:
                self.problem(path, f"inner message at offset {record.offset} fails its CRC", "crc_mismatch",
                             position=batch.position, base_offset=batch.base_offset)

    def _track_transactions(self, batch: RecordBatch, segment: LogSegment, txn: _TxnState) -> None:
        if not batch.is_transactional:
            return
        pid = batch.producer_id
        if not batch.is_control:
            txn.open_first_offset.setdefault(pid, batch.base_offset)
            return
        records = batch.records()
        if not records:
            return
        try:
            kind = parse_control_type(records[0].key)
        except KcliError as exc:
            self.problem(segment.log_path, exc.reason, "bad_control_record", position=batch.position, base_offset=batch.base_offset)
            return
        first = txn.open_first_offset.pop(pid, None)
        if kind is ControlRecordType.ABORT:
            txn.abort_markers.setdefault(str(segment.txn_index_path), set()).add((pid, batch.base_offset))
        if kind is ControlRecordType.ABORT and first is not None:
            txn.expected_aborts.setdefault(str(segment.txn_index_path), []).append((pid, first, batch.base_offset))

    # -- indexes -------------------------------------------------------------------------------
    def _report_index(self, finding: IndexFinding) -> None:
        if finding.code == "index_preallocated":
            self.preallocated_data = finding.position or 0
            if self.active:  # a live broker's active segment: normal, said once in the report's notes
                self.report.preallocated_active += 1
                return
        self.problem(finding.path, finding.reason, finding.code, position=finding.position,
                     base_offset=finding.base_offset, severity=Severity.WARNING if finding.warning else Severity.ERROR)

    def open_offset_index(self, segment: LogSegment) -> OffsetIndexMatcher:
        self.preallocated_data = None
        matcher = OffsetIndexMatcher(segment.index_path, segment.base_offset, self._report_index)
        self.report.bytes += matcher.length if self.preallocated_data is None else self.preallocated_data
        return matcher

    def open_time_index(self, segment: LogSegment) -> TimeIndexMatcher:
        self.preallocated_data = None
        matcher = TimeIndexMatcher(segment.time_index_path, segment.base_offset, self._report_index)
        self.report.bytes += matcher.length if self.preallocated_data is None else self.preallocated_data
        return matcher

    def verify_txn_index(self, segment: LogSegment, txn: _TxnState) -> None:
        path = segment.txn_index_path
        expected = txn.expected_aborts.pop(str(path), [])
        markers = txn.abort_markers.pop(str(path), set())
        entries = []
        if path.exists():
            try:
                with TransactionIndex(path, segment.base_offset) as tindex:
                    self.report.bytes += tindex.length
                    if tindex.trailing_bytes:
                        self.problem(path, f"{tindex.trailing_bytes} trailing bytes after the last 34-byte entry",
                                     "txn_index_partial_entry", position=tindex.length - tindex.trailing_bytes,
                                     severity=Severity.WARNING)
                    try:
                        tindex.sanity_check()
                    except CorruptIndexError as exc:
                        self.problem(path, exc.reason, "txn_index_corrupt", position=exc.position)
                    entries = list(tindex.entries())
            except KcliError as exc:
                self.problem(path, exc.reason, "txn_index_corrupt", position=exc.position)
                return
        have = {(e.producer_id, e.last_offset): (slot, e) for slot, e in enumerate(entries)}
        prev_last = None
        for slot, e in enumerate(entries):
            if prev_last is not None and e.last_offset <= prev_last:
                self.problem(path, f"entry {slot}: lastOffset {e.last_offset} not above the previous {prev_last}",
                             "txn_index_not_increasing", position=slot * 34, base_offset=e.last_offset)
            prev_last = e.last_offset
            if e.first_offset > e.last_offset:
                self.problem(path, f"entry {slot}: firstOffset {e.first_offset} after lastOffset {e.last_offset}",
                             "txn_index_bad_range", position=slot * 34, base_offset=e.first_offset)
        expected_keys = {(pid, marker) for pid, _first, marker in expected}
        for pid, first, marker in expected:
            got = have.get((pid, marker))
            if got is None:
                self.problem(path, f"ABORT marker at offset {marker} (producer {pid}, first offset {first}) has no "
                             ".txnindex entry: read_committed consumers would see aborted data",
                             "txn_index_missing_entry", base_offset=marker)
            elif got[1].first_offset > first:
                # An earlier firstOffset is fine: compaction may have removed the transaction's first batches
                # (Kafka keeps the entry as written); a later one would expose aborted data.
                self.problem(path, f"entry {got[0]}: firstOffset {got[1].first_offset}, but producer {pid}'s aborted "
                             f"transaction starts at {first}", "txn_index_mismatch", position=got[0] * 34,
                             base_offset=marker)
        for (pid, last), (slot, _e) in have.items():
            if (pid, last) not in expected_keys and (pid, last) not in markers:
                self.problem(path, f"entry {slot}: no ABORT marker of producer {pid} at offset {last} in the segment",
                             "txn_index_without_marker", position=slot * 34, base_offset=last)

    def verify_lone_index(self, item: InputFile) -> None:
        """An index given without its segment: structural checks only."""
        try:
            if item.kind is FileKind.INDEX:
                with OffsetIndex(item.path) as index:
                    self.report.bytes += index.entry_count * index.ENTRY.size if index.is_preallocated else index.length
                    index.sanity_check()
            elif item.kind is FileKind.TIME_INDEX:
                with TimeIndex(item.path) as tindex:
                    self.report.bytes += tindex.entry_count * tindex.ENTRY.size if tindex.is_preallocated else tindex.length
                    if not tindex.is_preallocated:
                        tindex.sanity_check()
            else:
                with TransactionIndex(item.path) as txn_index:
                    txn_index.sanity_check()
                    list(txn_index.entries())
        except KcliError as exc:
            self.problem(item.path, exc.reason, "index_corrupt", position=exc.position)

    # -- everything else -----------------------------------------------------------------------
    def verify_other(self, item: InputFile, log_end_offset: int | None) -> None:
        path = item.path
        kind = item.kind
        self.report.bytes += path.stat().st_size
        if kind is FileKind.PRODUCER_SNAPSHOT:
            snapshot = inspect_producer_snapshot(path)
            for p in snapshot.problems:
                self.problem(path, p.reason, "snapshot_corrupt", position=p.position)
            if log_end_offset is not None and snapshot.offset > log_end_offset:
                self.problem(path, f"snapshot offset {snapshot.offset} is beyond the log end offset {log_end_offset} "
                             "(a stray snapshot: the broker deletes it)", "snapshot_beyond_log_end",
                             severity=Severity.WARNING)
        elif kind is FileKind.KRAFT_CHECKPOINT:
            self.verify_segment(LogSegment(path, base_offset=0), _TxnState())
        elif kind in (FileKind.DELETED, FileKind.CLEANED, FileKind.SWAP):
            self.problem(path, f"leftover {kind.value} file of an interrupted operation (kctl recover finishes or "
                         "discards it, as the broker's LogLoader does)", "leftover_temp_file", severity=Severity.WARNING)
        elif kind in (FileKind.LEADER_EPOCH_CHECKPOINT, FileKind.OFFSET_CHECKPOINT, FileKind.PARTITION_METADATA,
                      FileKind.META_PROPERTIES, FileKind.QUORUM_STATE):
            from kcli.tools.metadata_files import check_metadata_file

            for reason, position in check_metadata_file(path, kind, log_end_offset):
                self.problem(path, reason, "checkpoint_corrupt" if position is not None else "checkpoint_inconsistent",
                             position=position)
        elif kind is FileKind.LOG:
            self.verify_segment(LogSegment(path), _TxnState())


def _unreadable(path: Path, exc: OSError | InputError) -> Problem:
    if isinstance(exc, OSError):
        return os_problem(path, exc)
    return Problem(str(exc.path or path), exc.position, None, exc.reason, UNREADABLE)


def skipped_problems(inputs: Inputs) -> list[Problem]:
    """Entries that look like Kafka data but could not be read: errors with code ``unreadable`` (exit 3)."""
    return [Problem(s.path, None, None, s.reason, UNREADABLE) for s in inputs.unreadable]


def segment_base(path: Path) -> int | None:
    try:
        return offset_from_filename(path.name)
    except (KcliError, ValueError):
        return None


def verify(paths: list[str], *, deep: bool = False, strict: bool = False,
           progress: Callable[[int], None] | None = None) -> VerifyReport:
    """Verify files, partition directories or log directories; see ``Problem.code`` for the checks."""
    started = time.perf_counter()
    report = VerifyReport(list(paths), deep=deep, strict=strict)
    inputs = collect_inputs(paths)
    report.problems.extend(skipped_problems(inputs))
    report.problems.extend(inputs.warnings)  # directories Kafka would not load as partitions
    verifier = _Verifier(report, deep, progress)
    groups: dict[Path, list[InputFile]] = {}
    for item in inputs.files:
        groups.setdefault(item.path.parent, []).append(item)
    for files in groups.values():
        verifier.verify_partition(files)
    report.seconds = time.perf_counter() - started
    return report


# -- pieces of ``verify`` for engines that spread the partitions over workers (kcli.spark.verify) ------------
def group_inputs(paths: list[str]) -> list[list[InputFile]]:
    """The inputs of ``verify(paths)`` grouped as it checks them: one group per directory, in its order."""
    return plan_groups(paths)[0]


def plan_groups(paths: list[str]) -> tuple[list[list[InputFile]], list[Problem]]:
    """``group_inputs`` and the problems ``verify`` reports before the groups' own: entries skipped or unreadable,
    directories Kafka would not load as partitions (warnings)."""
    inputs = collect_inputs(paths)
    groups: dict[Path, list[InputFile]] = {}
    for item in inputs.files:
        groups.setdefault(item.path.parent, []).append(item)
    return list(groups.values()), [*skipped_problems(inputs), *inputs.warnings]


def verify_group(files: list[InputFile], *, deep: bool = False) -> VerifyReport:
    """Verify one group of ``group_inputs`` (a partition directory, or a log dir's own files) on its own."""
    report = VerifyReport([], deep=deep)
    _Verifier(report, deep, None).verify_partition(files)
    return report


def merge_reports(paths: list[str], parts: list[VerifyReport], *, deep: bool = False, seconds: float = 0.0,
                  notes: list[Problem] | None = None) -> VerifyReport:
    """Reports of the groups, in ``group_inputs`` order, as the one report ``verify(paths)`` returns (``notes``:
    the problems ``plan_groups`` found before them)."""
    report = VerifyReport(list(paths), deep=deep, seconds=seconds)
    report.problems.extend(notes or ())
    for part in parts:
        report.files += part.files
        report.segments += part.segments
        report.bytes += part.bytes
        report.batches += part.batches
        report.records += part.records
        report.preallocated_active += part.preallocated_active
        report.problems.extend(part.problems)
    return report


def total_bytes(paths: list[str]) -> int:
    return sum(file_size(f.path) for f in collect_inputs(paths).files)
