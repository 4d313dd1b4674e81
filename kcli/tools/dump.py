"""kafka-dump-log as a library: walk files and yield typed dump items; never prints.

``iter_dump`` follows Kafka's DumpLogSegments file by file (kafka-formats.md section 4) and records the
same summaries (index mismatches, time-index problems, non-consecutive offsets). Rendering to
kafka-dump-log text lives in ``dump_text``; to NDJSON in each item's ``to_json``.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from kcli.errors import InputError, KcliError, UsageError
from kcli.records import Batch, Record, StopReason, make_batch
from kcli.records.accel import BatchRecords
from kcli.records.control import ControlRecordType, control_type_id, parse_control_type
from kcli.records.record_set import BatchReader
from kcli.storage.files import (
    BOOTSTRAP_CHECKPOINT,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    FileKind,
    kraft_snapshot_offset_epoch,
    offset_from_filename,
    parse_partition_dir_name,
)
from kcli.storage.index import AbortedTxn, OffsetIndex, TimeIndex, TransactionIndex
from kcli.storage.segment import FileBatchReader
from kcli.tools.inputs import InputFile, collect_inputs, file_size
from kcli.tools.report import CRC_MISMATCH, code_for_error, os_problem, tail_code
from kcli.tools.render import BytesEncoding, encode_bytes

DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
# The files of one segment: an offset range skips them together.
_SEGMENT_KINDS = frozenset({FileKind.LOG, FileKind.INDEX, FileKind.TIME_INDEX, FileKind.TXN_INDEX})
_RECORD_KINDS = frozenset({FileKind.LOG, FileKind.KRAFT_CHECKPOINT, FileKind.QUARANTINED_LOG})


class Decoder(Enum):
    NONE = "none"
    OFFSETS = "offsets"
    TRANSACTION_LOG = "transaction-log"
    CLUSTER_METADATA = "cluster-metadata"
    REMOTE_LOG_METADATA = "remote-log-metadata"


@dataclass
class DumpOptions:
    """kafka-dump-log's options plus kctl's range filters."""

    deep_iteration: bool = False
    print_data: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_bytes: int | None = None
    decoder: Decoder = Decoder.NONE
    skip_record_metadata: bool = False
    start_offset: int | None = None
    end_offset: int | None = None  # inclusive
    start_timestamp: int | None = None
    end_timestamp: int | None = None  # inclusive
    # record filters (all must match; control records never match a key, header or value filter)
    key: bytes | None = None  # exact key bytes
    key_regex: str | None = None  # Python bytes regex, searched in the key
    headers: tuple[tuple[str, bytes | None], ...] = ()  # (name, exact value or None: the header is present)
    grep: str | None = None  # Python bytes regex, searched in the value
    count: int | None = None  # stop after this many records are selected
    skip_control: bool = False  # leave control records out (kcat's view: --format)
    logs_only: bool = False  # read only the files that hold records (kctl cat): no index, snapshot, checkpoint

    def __post_init__(self) -> None:
        # As kafka-dump-log: any decoder implies printing data, printing implies deep iteration.
        if self.decoder is not Decoder.NONE:
            self.print_data = True
        self.key_pattern = _compile("--key-regex", self.key_regex)
        self.value_pattern = _compile("--grep", self.grep)
        if self.count is not None and self.count < 1:
            raise UsageError(f"--count {self.count}: give a number of records of at least 1")
        # content filters look inside records; selecting (with --count or skipping control records) too
        self.matching = bool(self.key is not None or self.key_pattern or self.value_pattern or self.headers)
        self.selecting = self.matching or self.count is not None or self.skip_control
        if self.print_data or self.selecting:
            self.deep_iteration = True

        self.filtered = any(
            v is not None for v in (self.start_offset, self.end_offset, self.start_timestamp, self.end_timestamp)
        )
        if self.start_offset is not None and self.end_offset is not None and self.start_offset > self.end_offset:
            raise UsageError(f"--start-offset {self.start_offset} is after --end-offset {self.end_offset}")
        if self.start_timestamp is not None and self.end_timestamp is not None and \
                self.start_timestamp > self.end_timestamp:
            raise UsageError(f"--start-time {self.start_timestamp} is after --end-time {self.end_timestamp}")


def _compile(option: str, pattern: str | None) -> re.Pattern[bytes] | None:
    if pattern is None:
        return None
    try:
        return re.compile(pattern.encode("utf-8", "surrogateescape"))
    except re.error as exc:
        raise UsageError(f"{option} {pattern!r} is not a valid regular expression: {exc}") from None


def record_matcher(options: DumpOptions) -> Callable[[Record], bool] | None:
    """A predicate for --key, --key-regex, --header and --grep (all must hold), or None without them."""
    tests: list[Callable[[Record], bool]] = []
    if options.key is not None:
        key = options.key
        tests.append(lambda r: r.key == key)
    if options.key_pattern is not None:
        search_key = options.key_pattern.search
        tests.append(lambda r: r.key is not None and search_key(r.key) is not None)
    for name, value in options.headers:
        if value is None:
            tests.append(lambda r, n=name: any(h.key == n for h in r.headers))
        else:
            tests.append(lambda r, n=name, v=value: any(h.key == n and h.value == v for h in r.headers))
    if options.value_pattern is not None:
        search_value = options.value_pattern.search
        tests.append(lambda r: r.value is not None and search_value(r.value) is not None)
    if not tests:
        return None
    if len(tests) == 1:
        return tests[0]
    return lambda r: all(t(r) for t in tests)


def topic_partition_of(path: Path) -> tuple[str | None, int | None]:
    """(topic, partition) from a segment's directory name (``orders-3``), else (None, None)."""
    parsed = parse_partition_dir_name(path.parent.name)
    return parsed if parsed is not None else (None, None)


# -- dump items ----------------------------------------------------------------------------------


@dataclass(slots=True)
class DumpFile:
    """Start of one file: ``Dumping <path>`` and the log header line."""

    path: str
    kind: FileKind
    base_offset: int | None = None
    snapshot_offset: int | None = None
    snapshot_epoch: int | None = None
    bootstrap: bool = False

    def to_json(self, enc: Encodings) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "file", "file": self.path, "kind": self.kind.value}
        if self.base_offset is not None:
            out["base_offset"] = self.base_offset
        if self.snapshot_offset is not None:
            out["snapshot_end_offset"] = self.snapshot_offset
            out["snapshot_epoch"] = self.snapshot_epoch
        return out


@dataclass(slots=True)
class DumpBatch:
    file: str
    batch: Batch

    def to_json(self, enc: Encodings) -> dict[str, Any]:
        return batch_json(self.file, self.batch)


@dataclass(slots=True)
class DumpRecord:
    file: str
    batch: Batch
    record: Record
    control_type: ControlRecordType | None = None
    control_type_id: int | None = None
    key_text: str | None = None  # decoder output (kafka-dump-log's key/payload text)
    payload_text: str | None = None
    decoded: dict[str, Any] | None = None  # decoder output for --json
    topic: str | None = None  # from the partition directory's name
    partition: int | None = None

    def to_json(self, enc: Encodings) -> dict[str, Any]:
        r = self.record
        out: dict[str, Any] = {
            "type": "record",
            "file": self.file,
            "topic": self.topic,
            "partition": self.partition,
            "offset": r.offset,
            "timestamp": r.timestamp,
            "timestamp_type": self.batch.timestamp_type.label,
            "key_size": -1 if r.key is None else len(r.key),
            "value_size": -1 if r.value is None else len(r.value),
            "key": encode_bytes(r.key, enc.key),
            "value": encode_bytes(r.value, enc.value),
            "headers": [{"key": h.key, "value": encode_bytes(h.value, enc.value)} for h in r.headers],
            "is_control": self.control_type is not None,
            "batch_base_offset": self.batch.base_offset,
        }
        if self.batch.magic >= 2:
            out["sequence"] = r.sequence
        else:
            out["crc"] = r.crc
            out["is_valid"] = r.valid
        if self.control_type is not None:
            out["control_type"] = self.control_type.name if self.control_type is not ControlRecordType.UNKNOWN else None
            out["control_type_id"] = self.control_type_id
            if self.decoded is not None:
                out["marker"] = self.decoded
        elif self.decoded is not None:
            out["decoded"] = self.decoded
        return out


@dataclass(slots=True)
class DumpRecords:
    """The plain (non-control, undecoded) records of one batch: deep dumps yield one item per batch
    rather than per record, and render them in bulk."""

    file: str
    batch: Batch
    records: list[Record]
    topic: str | None = None
    partition: int | None = None

    def to_json(self, enc: Encodings) -> list[dict[str, Any]]:
        return [DumpRecord(self.file, self.batch, r, topic=self.topic, partition=self.partition).to_json(enc)
                for r in self.records]


@dataclass(slots=True)
class DumpIndexEntry:
    file: str
    offset: int
    position: int

    def to_json(self, enc: Encodings) -> dict[str, Any]:
        return {"type": "index_entry", "file": self.file, "offset": self.offset, "position": self.position}


@dataclass(slots=True)
class DumpTimeIndexEntry:
    file: str
    timestamp: int
    offset: int

    def to_json(self, enc: Encodings) -> dict[str, Any]:
        return {"type": "time_index_entry", "file": self.file, "timestamp": self.timestamp, "offset": self.offset}


@dataclass(slots=True)
class DumpTxnIndexEntry:
    file: str
    entry: AbortedTxn

    def to_json(self, enc: Encodings) -> dict[str, Any]:
        e = self.entry
        return {
            "type": "txn_index_entry",
            "file": self.file,
            "version": e.version,
            "producer_id": e.producer_id,
            "first_offset": e.first_offset,
            "last_offset": e.last_offset,
            "last_stable_offset": e.last_stable_offset,
        }


@dataclass(slots=True)
class DumpSnapshotEntry:
    file: str
    entry: Any  # kcli.storage.snapshot.ProducerStateEntry

    def to_json(self, enc: Encodings) -> dict[str, Any]:
        e = self.entry
        return {
            "type": "producer_snapshot_entry",
            "file": self.file,
            "producer_id": e.producer_id,
            "producer_epoch": e.producer_epoch,
            "coordinator_epoch": e.coordinator_epoch,
            "current_txn_first_offset": None if e.current_txn_first_offset < 0 else e.current_txn_first_offset,
            "last_timestamp": e.timestamp,
            "first_sequence": e.first_sequence,
            "last_sequence": e.last_sequence,
            "last_offset": e.last_offset,
            "offset_delta": e.offset_delta,
        }


@dataclass(slots=True)
class DumpTextEntry:
    """One entry of a text file kctl dumps beyond kafka-dump-log (checkpoints, metadata)."""

    file: str
    kind: FileKind
    fields: dict[str, Any]
    text: str

    def to_json(self, enc: Encodings) -> dict[str, Any]:
        return {"type": self.kind.value.replace("-", "_") + "_entry", "file": self.file, **self.fields}


class NoticeLevel(Enum):
    INFO = "info"  # kafka-dump-log prints it on stdout
    WARNING = "warning"  # stderr
    ERROR = "error"  # stderr; the dump exits non-zero


@dataclass(slots=True)
class DumpNotice:
    file: str
    level: NoticeLevel
    text: str
    position: int | None = None
    base_offset: int | None = None
    code: str = ""

    def to_json(self, enc: Encodings) -> dict[str, Any]:
        return {
            "type": "notice",
            "file": self.file,
            "level": self.level.value,
            "code": self.code,
            "message": self.text,
            "position": self.position,
            "base_offset": self.base_offset,
        }


@dataclass
class DumpSummary:
    """kafka-dump-log's closing sections, keyed by absolute file path."""

    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    timestamp_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    out_of_order_timestamps: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    shallow_offset_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    files: int = 0
    batches: int = 0
    records: int = 0  # records output (selected by the filters)
    records_scanned: int = 0  # records read within the offset and time ranges (the filters' input)
    errors: int = 0
    unreadable: int = 0  # of the errors: inputs that could not be read at all (exit status 3)

    def add(self, table: dict[str, list[tuple[int, int]]], path: Path, pair: tuple[int, int]) -> None:
        table.setdefault(str(path.resolve()), []).append(pair)

    def to_json(self, enc: Encodings | None = None) -> dict[str, Any]:
        def pairs(table, a, b):
            return [{"file": f, a: x, b: y} for f, items in table.items() for x, y in items]

        return {
            "type": "summary",
            "files": self.files,
            "batches": self.batches,
            "records": self.records,
            "records_scanned": self.records_scanned,
            "errors": self.errors,
            "unreadable": self.unreadable,
            "index_mismatches": pairs(self.index_mismatches, "index_offset", "log_offset"),
            "timestamp_mismatches": pairs(self.timestamp_mismatches, "index_timestamp", "log_timestamp"),
            "out_of_order_timestamps": pairs(self.out_of_order_timestamps, "index_timestamp", "previous_timestamp"),
            "indexed_offsets_not_found": pairs(self.shallow_offset_not_found, "indexed_offset", "found_log_offset"),
            "non_consecutive_offsets": pairs(self.non_consecutive, "offset", "followed_by"),
        }


@dataclass(frozen=True, slots=True)
class Encodings:
    key: BytesEncoding = BytesEncoding.AUTO
    value: BytesEncoding = BytesEncoding.AUTO


DumpItem = (
    DumpFile | DumpBatch | DumpRecord | DumpRecords | DumpIndexEntry | DumpTimeIndexEntry | DumpTxnIndexEntry | DumpSnapshotEntry
    | DumpTextEntry | DumpNotice
)


def batch_json(file: str, batch: Batch) -> dict[str, Any]:
    """The stable NDJSON batch object (documented in man/kctl-dump-log.1)."""
    return {
        "type": "batch",
        "file": file,
        "base_offset": batch.base_offset,
        "last_offset": batch.last_offset,
        "count": batch.count,
        "position": batch.position,
        "size": batch.size,
        "magic": batch.magic,
        "codec": _codec_label(batch),
        "crc": batch.crc,
        "is_valid": batch.is_valid,
        "is_transactional": batch.is_transactional,
        "is_control": batch.is_control,
        "producer_id": batch.producer_id,
        "producer_epoch": batch.producer_epoch,
        "base_sequence": batch.base_sequence,
        "last_sequence": batch.last_sequence,
        "partition_leader_epoch": batch.partition_leader_epoch,
        "timestamp_type": batch.timestamp_type.label,
        "max_timestamp": batch.max_timestamp,
        "delete_horizon_ms": batch.delete_horizon_ms,
    }


def _codec_label(batch: Batch) -> str:
    try:
        return batch.codec.label
    except KcliError:
        return f"unknown({batch.codec_id})"


# -- the walk ------------------------------------------------------------------------------------


class _Cursor:
    """Per-file reading state: the last offset seen (non-consecutive offsets) and where the file is."""

    __slots__ = ("given", "path", "last_offset", "topic", "partition", "track")

    def __init__(self, given: str, path: Path, topic: str | None = None, partition: int | None = None,
                 track: bool = True):
        self.track = track  # look for non-consecutive offsets (not in quarantined fragments: gaps are expected)
        self.given = given
        self.path = path
        self.last_offset: int | None = None
        self.topic = topic
        self.partition = partition


class DumpRun:
    """One dump over many inputs. Iterate it for items; ``summary`` is complete afterwards."""

    def __init__(self, paths: list[str], options: DumpOptions, *, progress: Callable[[int], None] | None = None):
        collected = collect_inputs(paths)
        self.inputs = collected.files
        self.skipped = collected.unreadable
        self.warnings = collected.warnings  # directories Kafka would not load as partitions
        self._setup(options, progress)
        # Base offsets of the segments of each walked partition dir: an offset range skips the segments
        # (and their indexes) that cannot hold it.
        self._segment_bases: dict[Path, list[int]] = {}
        if options.start_offset is not None or options.end_offset is not None:
            for f in self.inputs:
                if f.from_dir and f.kind is FileKind.LOG:
                    self._segment_bases.setdefault(f.path.parent, []).append(offset_from_filename(f.path.name))
            for bases in self._segment_bases.values():
                bases.sort()

    def _setup(self, options: DumpOptions, progress: Callable[[int], None] | None) -> None:
        self.options = options
        self.summary = DumpSummary()
        self.progress = progress
        self._decode = None if options.decoder is Decoder.NONE else _decoder_for(options.decoder)
        self._match = record_matcher(options)
        self._remaining = options.count  # records still to select with --count
        self.done = False  # --count reached: nothing more is read
        self.past_end = False  # a batch past --end-offset was met (in the file last read)

    @property
    def total_bytes(self) -> int:
        return sum(file_size(f.path) for f in self.inputs)

    def __iter__(self) -> Iterator[DumpItem]:
        for skipped in self.skipped:  # named like Kafka data, but not a readable file
            self.summary.errors += 1
            self.summary.unreadable += 1
            yield DumpNotice(skipped.path, NoticeLevel.ERROR, f"{skipped.path}: {skipped.reason}", code="unreadable")
        for warning in self.warnings:
            yield DumpNotice(warning.file, NoticeLevel.WARNING, f"{warning.file}: {warning.reason}", code=warning.code)
        for item in self.inputs:
            if self.done:
                break
            if self._segment_bases and self._outside_offset_range(item):
                continue
            if self.options.logs_only and item.kind not in _RECORD_KINDS:
                if not item.from_dir:  # named on purpose: say why nothing comes out of it
                    yield DumpNotice(item.given, NoticeLevel.WARNING, f"{item.given} holds no records: skipped",
                                     code="no_records")
                continue
            self.summary.files += 1
            yield from self._dump_file(item)
            if self.progress:
                self.progress(file_size(item.path))

    def _outside_offset_range(self, item: InputFile) -> bool:
        """A segment file of a walked partition dir whose offsets [base, next base) miss the offset range."""
        if not item.from_dir or item.kind not in _SEGMENT_KINDS:
            return False
        bases = self._segment_bases.get(item.path.parent)
        if not bases:
            return False
        try:
            base = offset_from_filename(item.path.name)
        except (ValueError, KcliError):
            return False
        opts = self.options
        if opts.end_offset is not None and base > opts.end_offset:
            return True
        following = bisect_right(bases, base)
        return opts.start_offset is not None and following < len(bases) and bases[following] <= opts.start_offset

    def _dump_file(self, item: InputFile) -> Iterator[DumpItem]:
        kind = item.kind
        handler = {
            FileKind.LOG: self._dump_log,
            FileKind.QUARANTINED_LOG: self._dump_quarantined,
            FileKind.KRAFT_CHECKPOINT: self._dump_log,
            FileKind.INDEX: self._dump_offset_index,
            FileKind.TIME_INDEX: self._dump_time_index,
            FileKind.TXN_INDEX: self._dump_txn_index,
            FileKind.PRODUCER_SNAPSHOT: self._dump_snapshot,
            FileKind.LEADER_EPOCH_CHECKPOINT: self._dump_text_file,
            FileKind.OFFSET_CHECKPOINT: self._dump_text_file,
            FileKind.PARTITION_METADATA: self._dump_text_file,
            FileKind.META_PROPERTIES: self._dump_text_file,
            FileKind.QUORUM_STATE: self._dump_text_file,
            FileKind.CLEAN_SHUTDOWN: self._dump_text_file,
        }.get(kind)
        if handler is None:
            yield DumpNotice(item.given, NoticeLevel.WARNING, f"Ignoring unknown file {item.given}", code="unknown_file")
            return
        try:
            yield from handler(item)
        except InputError as exc:  # cannot be opened
            self.summary.errors += 1
            self.summary.unreadable += 1
            yield DumpNotice(item.given, NoticeLevel.ERROR, f"{item.given}: {exc.reason}", code="unreadable")
        except KcliError as exc:
            self.summary.errors += 1
            exc.at(path=item.given)
            yield DumpNotice(item.given, NoticeLevel.ERROR, exc.describe(), exc.position, exc.base_offset,
                             code=code_for_error(exc))
        except OSError as exc:  # EIO, or deleted since it was listed (a running broker's retention)
            self.summary.errors += 1
            self.summary.unreadable += 1
            problem = os_problem(item.given, exc)
            yield DumpNotice(item.given, NoticeLevel.ERROR, f"{item.given}: {problem.reason}", code=problem.code)

    # .log and KRaft .checkpoint --------------------------------------------------------------
    def _log_header(self, item: InputFile) -> DumpFile:
        path = item.path
        header = DumpFile(item.given, item.kind)
        if item.kind is FileKind.KRAFT_CHECKPOINT:
            if path.name == BOOTSTRAP_CHECKPOINT:
                header.bootstrap = True
            else:
                header.snapshot_offset, header.snapshot_epoch = kraft_snapshot_offset_epoch(path.name) or (None, None)
        else:
            header.base_offset = offset_from_filename(path.name)
        return header

    def _dump_log(self, item: InputFile) -> Iterator[DumpItem]:
        opts = self.options
        path = item.path
        yield self._log_header(item)
        size = path.stat().st_size
        end = size if opts.max_bytes is None else min(size, opts.max_bytes)
        start = self._seek_position(path) if opts.filtered and item.kind is FileKind.LOG else 0
        reader = FileBatchReader(path, start, end)
        cursor = _Cursor(item.given, path, *topic_partition_of(path))
        self.past_end = False
        try:
            yield from self._batches(reader, cursor)
        except InputError:
            raise  # cannot be read at all: _dump_file says so (code unreadable)
        except KcliError as exc:
            # Kafka aborts the whole run here; kctl reports where and carries on with the next file.
            self.summary.errors += 1
            exc.at(path=item.given)
            yield DumpNotice(item.given, NoticeLevel.ERROR, exc.describe(), exc.position, exc.base_offset,
                             code=code_for_error(exc))
            return
        if self.done:
            return  # stopped early (--count): the rest of the file was not read
        trailing = end - reader.valid_bytes
        if trailing > 0 and opts.max_bytes is None and not opts.filtered:
            yield from self._trailing_notices(item.given, path, reader, trailing)

    def _trailing_notices(self, given: str, path: Path, reader: FileBatchReader, trailing: int) -> Iterator[DumpItem]:
        self.summary.errors += 1
        reason = (
            f"batch at byte {reader.valid_bytes} declares {reader.declared_size} bytes, only {trailing} remain"
            if reader.stop is StopReason.PARTIAL_BATCH
            else f"{trailing} bytes are too short for a batch header"
        )
        yield DumpNotice(
            given, NoticeLevel.INFO, f"Found {trailing} invalid bytes at the end of {path.name}",
            reader.valid_bytes, code="invalid_bytes_at_end",
        )
        yield DumpNotice(given, NoticeLevel.ERROR, reason, reader.valid_bytes,
                         code=tail_code(reader.stop is StopReason.PARTIAL_BATCH))

    def _batches(self, batches, cursor: _Cursor) -> Iterator[DumpItem]:
        """Items for the batches of one file (a reader, or a list): range filters, record filters,
        summaries. Sets ``done`` when --count is reached, ``past_end`` when a batch lies past --end-offset."""
        opts = self.options
        given = cursor.given
        decode = self._decode
        selecting = opts.selecting
        summary = self.summary
        bulk = not opts.filtered and decode is None
        whole = bulk and not opts.matching and opts.count is None  # selecting keeps every plain record
        for batch in batches:
            if opts.filtered and not self._batch_in_range(batch):
                if opts.end_offset is not None and batch.base_offset > opts.end_offset:
                    self.past_end = True
                    break
                continue
            if selecting:  # the batch is printed only when a record in it is selected
                # no content filter or --count (kctl cat): as below, the payload for the compiled formatter
                records = (BatchRecords.of(batch) if whole and not batch.is_control and batch.magic >= 2
                           else None)
                if records is None:
                    records = batch.records()
                    if opts.filtered:
                        records = [r for r in records if self._record_in_range(r)]
                if records and cursor.track:
                    self._track_offsets(cursor, records)
                summary.records_scanned += len(records)
                records = self._select(batch, records)
                if not records and batch.is_valid:
                    continue
                summary.batches += 1
                yield DumpBatch(given, batch)
                if not batch.is_valid:
                    yield self._invalid_batch(given, batch)
            else:
                summary.batches += 1
                yield DumpBatch(given, batch)
                if not batch.is_valid:
                    yield self._invalid_batch(given, batch)
                if not opts.deep_iteration:
                    continue
                # plain records of a whole batch: kept as the payload when the compiled formatter can render it
                records = BatchRecords.of(batch) if bulk and not batch.is_control and batch.magic >= 2 else None
                if records is None:
                    records = batch.records()
                    if opts.filtered:
                        records = [r for r in records if self._record_in_range(r)]
                summary.records_scanned += len(records)
                if records and cursor.track:
                    self._track_offsets(cursor, records)
            if not records:
                continue
            summary.records += len(records)
            if batch.is_control or decode is not None:
                for record in records:
                    yield self._record_item(cursor, batch, record, decode)
            else:
                yield DumpRecords(given, batch, records, cursor.topic, cursor.partition)
            if self._remaining == 0:
                self.done = True
                break

    def _invalid_batch(self, given: str, batch: Batch) -> DumpNotice:
        self.summary.errors += 1
        return DumpNotice(given, NoticeLevel.ERROR, batch.invalid_reason() or "invalid batch", batch.position,
                          batch.base_offset, code=CRC_MISMATCH)

    def _track_offsets(self, cursor: _Cursor, records: list[Record]) -> None:
        """Non-consecutive offsets, over the records read (before the record filters)."""
        last_offset = cursor.last_offset
        if isinstance(records, BatchRecords):  # no Records built
            first, last = records.first_offset, records.last_offset
        else:
            first, last = records[0].offset, records[-1].offset
        if last_offset is not None and first != last_offset + 1:
            self.summary.add(self.summary.non_consecutive, cursor.path, (last_offset, first))
        if last - first != len(records) - 1:  # else consecutive: offsets increase
            prev = records[0].offset
            for record in records[1:]:
                if record.offset != prev + 1:
                    self.summary.add(self.summary.non_consecutive, cursor.path, (prev, record.offset))
                prev = record.offset
        cursor.last_offset = last

    def _select(self, batch: Batch, records: list[Record]) -> list[Record]:
        """The records the filters keep (control records never match a content filter), up to --count."""
        if batch.is_control and (self.options.matching or self.options.skip_control):
            return []
        if self._match is not None:
            records = [r for r in records if self._match(r)]
        if self._remaining is not None:
            if len(records) > self._remaining:
                records = records[: self._remaining]
            self._remaining -= len(records)
        return records

    def _dump_quarantined(self, item: InputFile) -> Iterator[DumpItem]:
        """Salvage from bytes kctl recover cut: the batches in the fragment whose CRC still holds, at their
        positions in the original segment, with their records, so that an operator can produce them again."""
        from kcli.storage.recovery import find_intact_batches

        entry = item.quarantined or {}
        original = str(entry.get("file", ""))
        position = int(entry.get("position") or 0)
        base = offset_from_filename(original)
        first = entry.get("first_offset")
        yield DumpFile(item.given, FileKind.LOG, base_offset=base)
        yield DumpNotice(item.given, NoticeLevel.INFO,
                         f"Quarantined by kctl recover: bytes {position}..{entry.get('end')} of {original} "
                         f"({entry.get('reason')}); the batches that still parse follow, at their positions in "
                         f"{original}", position, first, code="quarantined")
        size = item.path.stat().st_size
        found = find_intact_batches(item.path, 0, size, base if first is None else min(first, base))
        batches = []
        with open(item.path, "rb") as fragment:
            for local, _base, _last, total in found:
                fragment.seek(local)
                batches.append(make_batch(fragment.read(total), position + local))
        cursor = _Cursor(item.given, item.path, *topic_partition_of(Path(original)), track=False)
        yield from self._batches(batches, cursor)
        if not found:
            yield DumpNotice(item.given, NoticeLevel.INFO, "no intact batch in these bytes", position, first,
                             code="quarantined")

    def _record_item(self, cursor: _Cursor, batch: Batch, record: Record, decode) -> DumpRecord:
        item = DumpRecord(cursor.given, batch, record, topic=cursor.topic, partition=cursor.partition)
        if batch.is_control:
            item.control_type = parse_control_type(record.key)
            item.control_type_id = control_type_id(record.key)
            from kcli.records.decoders import decode_control_value, render_control_record

            item.payload_text = render_control_record(item.control_type_id, record.value)
            try:
                control = decode_control_value(item.control_type_id, record.value)
                item.decoded = {"version": control.get("version"), **(control.get("value") or {})}
            except KcliError as exc:
                item.decoded = {"error": exc.reason}
        else:
            item.key_text, item.payload_text, item.decoded = decode(record)
        return item

    def _seek_position(self, log_path: Path) -> int:
        """Use the offset and time indexes to skip to the first batch that can match the filters."""
        opts = self.options
        index_path = log_path.with_name(log_path.name[: -len(LOG_SUFFIX)] + INDEX_SUFFIX)
        time_index_path = index_path.with_suffix(".timeindex")
        target = opts.start_offset
        if opts.start_timestamp is not None and time_index_path.exists():
            with TimeIndex(time_index_path) as tindex:
                found = tindex.lookup_by_timestamp(opts.start_timestamp)
                # The entry says "max timestamp up to this offset"; the first match lies after the previous one.
                target = max(target or 0, found.offset) if found.timestamp >= 0 else target
        if target is None or not index_path.exists():
            return 0
        with OffsetIndex(index_path) as index:
            return index.lookup(target).position

    def _batch_in_range(self, batch: Batch) -> bool:
        opts = self.options
        if opts.start_offset is not None and batch.last_offset < opts.start_offset:
            return False
        if opts.end_offset is not None and batch.base_offset > opts.end_offset:
            return False
        if opts.start_timestamp is not None and batch.max_timestamp < opts.start_timestamp:
            return False
        if opts.end_timestamp is not None:
            # Record timestamps need not grow (CreateTime), so no batch header bounds them from below: a batch is
            # past --end-time when none of its records is at or before it.
            if all(r.timestamp > opts.end_timestamp for r in batch.records()):
                return False
        return True

    def _record_in_range(self, record: Record) -> bool:
        opts = self.options
        if opts.start_offset is not None and record.offset < opts.start_offset:
            return False
        if opts.end_offset is not None and record.offset > opts.end_offset:
            return False
        if opts.start_timestamp is not None and record.timestamp < opts.start_timestamp:
            return False
        if opts.end_timestamp is not None and record.timestamp > opts.end_timestamp:
            return False
        return True

    # indexes ---------------------------------------------------------------------------------
    def _index_entries_in_range(self, entries: list) -> list:
        """With an offset range: the entries from the one a lookup of --start-offset returns (the last at or
        below it) to the first at or after --end-offset, i.e. those that locate the range's batches."""
        opts = self.options
        return _bracket(entries, [e.offset for e in entries], opts.start_offset, opts.end_offset)

    def _time_index_entries_in_range(self, entries: list) -> list:
        """The offset range as for the offset index, and the time range the same way on the timestamps."""
        opts = self.options
        entries = _bracket(entries, [e.offset for e in entries], opts.start_offset, opts.end_offset)
        return _bracket(entries, [e.timestamp for e in entries], opts.start_timestamp, opts.end_timestamp)

    def _dump_offset_index(self, item: InputFile) -> Iterator[DumpItem]:
        opts = self.options
        yield DumpFile(item.given, item.kind, base_offset=offset_from_filename(item.path.name))
        log_path = _sibling_log(item.path)
        with OffsetIndex(item.path) as index:
            if index.file_entry_slots == 0:
                yield DumpNotice(item.given, NoticeLevel.INFO, f"{item.given} is empty.", code="empty_index")
                return
            if opts.index_sanity_check:
                index.sanity_check()
                yield DumpNotice(item.given, NoticeLevel.INFO, f"{item.given} passed sanity check.", code="sanity_ok")
                return
            with open(log_path, "rb") as log:
                for entry in self._index_entries_in_range(list(index.entries())):
                    log.seek(entry.position)
                    chunk = log.read(opts.max_message_size)
                    first = next(iter(BatchReader(chunk, base_position=entry.position)), None)
                    if first is None:
                        raise KcliError(
                            f"no complete batch within --max-message-size {opts.max_message_size} bytes at position "
                            f"{entry.position} of {log_path}",
                            position=entry.position,
                        )
                    if first.last_offset != entry.offset:
                        self.summary.add(self.summary.index_mismatches, item.path, (entry.offset, first.last_offset))
                    if not opts.verify_index_only:
                        yield DumpIndexEntry(item.given, entry.offset, entry.position)

    def _dump_time_index(self, item: InputFile) -> Iterator[DumpItem]:
        opts = self.options
        yield DumpFile(item.given, item.kind, base_offset=offset_from_filename(item.path.name))
        log_path = _sibling_log(item.path)
        index_path = log_path.with_name(log_path.name[: -len(LOG_SUFFIX)] + INDEX_SUFFIX)
        with TimeIndex(item.path) as tindex:
            if opts.index_sanity_check:
                tindex.sanity_check()
                yield DumpNotice(item.given, NoticeLevel.INFO, f"{item.given} passed sanity check.", code="sanity_ok")
                return
            index = OffsetIndex(index_path) if index_path.exists() else None
            try:
                log_size = log_path.stat().st_size
                prev_ts = -1
                for entry in self._time_index_entries_in_range(list(tindex.entries())):
                    start = index.lookup(entry.offset).position if index is not None else 0
                    found = None
                    for batch in FileBatchReader(log_path, start, log_size):
                        if batch.last_offset >= entry.offset:
                            found = batch
                            break
                    if found is None:
                        self.summary.add(self.summary.shallow_offset_not_found, item.path, (entry.offset, -1))
                    elif found.last_offset != entry.offset:
                        self.summary.add(self.summary.shallow_offset_not_found, item.path, (entry.offset, found.last_offset))
                    else:
                        max_ts = max((r.timestamp for r in found.records()), default=-1)
                        if max_ts != entry.timestamp:
                            self.summary.add(self.summary.timestamp_mismatches, item.path, (entry.timestamp, max_ts))
                        if prev_ts >= entry.timestamp:
                            self.summary.add(self.summary.out_of_order_timestamps, item.path, (entry.timestamp, prev_ts))
                    prev_ts = entry.timestamp
                    if not opts.verify_index_only:
                        yield DumpTimeIndexEntry(item.given, entry.timestamp, entry.offset)
            finally:
                if index is not None:
                    index.close()

    def _dump_txn_index(self, item: InputFile) -> Iterator[DumpItem]:
        yield DumpFile(item.given, item.kind, base_offset=offset_from_filename(item.path.name))
        opts = self.options
        with TransactionIndex(item.path) as tindex:
            for entry in tindex.entries():
                if opts.end_offset is not None and entry.first_offset > opts.end_offset:
                    continue
                if opts.start_offset is not None and entry.last_offset < opts.start_offset:
                    continue
                yield DumpTxnIndexEntry(item.given, entry)

    def _dump_snapshot(self, item: InputFile) -> Iterator[DumpItem]:
        from kcli.storage.snapshot import read_producer_snapshot

        yield DumpFile(item.given, item.kind, base_offset=offset_from_filename(item.path.name))
        snapshot = read_producer_snapshot(item.path)
        for entry in snapshot.entries:
            yield DumpSnapshotEntry(item.given, entry)

    def _dump_text_file(self, item: InputFile) -> Iterator[DumpItem]:
        from kcli.tools.metadata_files import read_metadata_file

        yield DumpFile(item.given, item.kind)
        for fields, text in read_metadata_file(item.path, item.kind):
            yield DumpTextEntry(item.given, item.kind, fields, text)


def _bracket(entries: list, keys: list[int], low: int | None, high: int | None) -> list:
    """The entries from the last whose key is at or below ``low`` to the first at or above ``high``
    (keys ascending); all of them without bounds."""
    if low is None and high is None:
        return entries
    first = 0 if low is None else max(bisect_right(keys, low) - 1, 0)
    last = len(entries) if high is None else bisect_left(keys, high) + 1
    return entries[first:last]


def _sibling_log(path: Path) -> Path:
    name = path.name
    log = path.with_name(name[: name.index(".")] + LOG_SUFFIX)
    if not log.exists():
        raise KcliError(f"the matching log segment {log.name} is missing: index entries cannot be checked", path=str(path))
    return log


def _decoder_for(decoder: Decoder):
    """A function record -> (key_text, payload_text, decoded_json) for the chosen internal-topic decoder."""
    from kcli.records import decoders

    text_fn, json_fn = {
        Decoder.OFFSETS: (decoders.offsets_decoder, decoders.decode_offsets_record),
        Decoder.TRANSACTION_LOG: (decoders.transaction_log_decoder, decoders.decode_transaction_log_record),
        Decoder.CLUSTER_METADATA: (
            decoders.cluster_metadata_decoder,
            lambda _key, value: decoders.decode_cluster_metadata_record(value),
        ),
        Decoder.REMOTE_LOG_METADATA: (
            decoders.remote_log_metadata_decoder,
            lambda _key, value: decoders.decode_remote_log_metadata_record(value),
        ),
    }[decoder]

    def decode(record: Record) -> tuple[str | None, str | None, dict[str, Any] | None]:
        key_text, payload_text = text_fn(record.key, record.value, record.offset)
        try:
            decoded = json_fn(record.key, record.value)
        except KcliError as exc:
            decoded = {"error": exc.reason}
        return key_text, payload_text, decoded

    return decode
