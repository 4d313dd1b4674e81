"""Reading one SegmentSplit into columns: kcli's FileBatchReader and batch decoders, nothing new.

Records come out as columnar ``Chunk``s of up to ``CHUNK_ROWS`` rows: per record only the fields that vary
per record, per batch ("run") the fields its records share; datasource.py turns each chunk into one Arrow
RecordBatch with bulk operations. v2 data batches are decoded by aiokafka's compiled reader straight into
the column lists (no Record objects); anything else - legacy and control batches, filtered reads, batches it
rejects, no extension - takes the Record path of ``batch.records()``. The rules follow
``kctl dump-log --deep-iteration`` (same batches, same records, same values) plus what a consumer applies:
control records hidden unless asked for, aborted transactions hidden under read_committed.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from kcli.errors import CorruptRecordError, KcliError
from kcli.records.control import ControlRecordType, parse_control_type
from kcli.records.record_set import StopReason, make_batch
from kcli.records import accel
from kcli.records.layout import RECORD_BATCH_OVERHEAD
from kcli.records.types import NO_SEQUENCE, NO_TIMESTAMP, increment_sequence
from kcli.spark.plan import Bounds, ReadOptions, SegmentSplit
from kcli.storage.reader import PartitionReader
from kcli.storage.segment import FileBatchReader

CHUNK_ROWS = 16384
COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers", "magic", "codec",
           "producer_id", "producer_epoch", "sequence", "is_transactional", "is_control", "segment", "position")
_NO_OFFSET = 2**63 - 1
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


class SplitCorruptError(CorruptRecordError):
    """FAILFAST: a corrupt batch, with the segment and byte position in its message."""


def _header_key(key: str) -> str:
    # Header keys are decoded with surrogateescape; Arrow strings must be valid UTF-8 (as dump-log's JSON).
    if key.isascii():
        return key
    try:
        key.encode("utf-8")
        return key
    except UnicodeEncodeError:
        return key.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def trace_open(trace_file: str | None, segment: str, start: int) -> None:
    """Append ``opened <segment>`` for tests that count what pruning left; one small O_APPEND write, so lines
    from concurrent executor processes do not interleave."""
    if trace_file:
        fd = os.open(trace_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"opened {segment} {start}\n".encode())
        finally:
            os.close(fd)


class Chunk:
    """Up to ``CHUNK_ROWS`` rows, columnar. Per record only what varies per record (offset, timestamp, key,
    value, headers, sequence); everything a batch shares is stored once per *run* (a batch's records, or one
    corrupt row) with the run's row count, and expanded in bulk when the Arrow batch is built
    (datasource.py). ``chunk[name]`` gives one column as a Python list (tests, small reads)."""

    __slots__ = ("permissive", "topic", "partition", "segment", "rows", "offset", "timestamp", "key", "value",
                 "header_rows", "header_lists", "sequence", "runs")

    def __init__(self, permissive: bool, topic: str, partition: int | None, segment: str) -> None:
        self.permissive = permissive
        self.topic, self.partition, self.segment = topic, partition, segment
        self.rows = 0
        self.offset: list[int | None] = []
        self.timestamp: list[int] = []  # ms as stored; NO_TIMESTAMP (and corrupt rows) -> null
        self.key: list[bytes | None] = []
        self.value: list[bytes | None] = []
        # Headers, sparse (most records have none, and a list per record would also keep the garbage
        # collector busy): the rows that have some, and their (key, value) lists.
        self.header_rows: list[int] = []
        self.header_lists: list[list[tuple[str, bytes | None]]] = []
        self.sequence: list[int | None] = []
        # one tuple per run: (rows, topic?, timestampType, magic, codec, producer_id, producer_epoch,
        # is_transactional, is_control, position, corrupt description or None)
        self.runs: list[tuple] = []

    @property
    def names(self) -> tuple[str, ...]:
        return COLUMNS + (("_corrupt",) if self.permissive else ())

    def __getitem__(self, name: str) -> list:
        if name in _PER_RECORD:
            if name == "timestamp":
                return [None if t == NO_TIMESTAMP else t * 1000 for t in self.timestamp]
            if name == "headers":
                out = [[] if data else None for run in self.runs for data in [run[1]] * run[0]]
                for row, hs in zip(self.header_rows, self.header_lists):
                    out[row] = list(hs)
                return out
            return list(getattr(self, name))
        out: list = []
        if name in _SPLIT_FIELDS:
            value = getattr(self, name)
            for run in self.runs:
                out.extend([value if run[1] or name == "segment" else None] * run[0])
            return out
        index = _RUN_FIELDS.index(name)
        for run in self.runs:
            out.extend([run[index]] * run[0])
        return out


_PER_RECORD = ("offset", "timestamp", "key", "value", "headers", "sequence")
# The fields of a run tuple, by column name (index 0 is the row count). topic, partition and segment are the
# split's: a run stores whether it is a data row (True) or a corrupt one (None: those columns are null).
_SPLIT_FIELDS = ("topic", "partition", "segment")
_RUN_FIELDS = ("rows", "data", "timestampType", "magic", "codec", "producer_id", "producer_epoch",
               "is_transactional", "is_control", "position", "_corrupt")


class SplitReader:
    """Iterate column chunks of one split. ``bounds`` filter records exactly; pruning happened at planning."""

    def __init__(self, split: SegmentSplit, opts: ReadOptions, bounds: Bounds) -> None:
        self.split = split
        self.opts = opts
        if split.below is not None:  # a remote segment: the offsets from the local log start on are read there
            bounds = replace(bounds, offset=bounds.offset.narrow(hi=split.below - 1))
        self.bounds = bounds
        self.path = split.segment

    def chunks(self) -> Iterator[Chunk]:
        if self.split.remote_options is not None:  # a remote segment (tiered storage): fetched to a temp file
            from kcli.spark.remote import fetched_segment

            with fetched_segment(self.split.segment, self.split.remote_options) as path:
                self.path = path
                yield from self._chunks()
            return
        yield from self._chunks()

    def _chunks(self) -> Iterator[Chunk]:
        self.chunk = self._new_chunk()
        for _ in self._fill():
            yield self.chunk
            self.chunk = self._new_chunk()
        if self.chunk.rows:
            yield self.chunk

    def _new_chunk(self) -> Chunk:
        split = self.split
        return Chunk(self.opts.permissive, split.topic, split.partition, split.segment)

    # -- the walk ---------------------------------------------------------------------------------
    def _fill(self) -> Iterator[None]:
        """Append rows to ``self.chunk`` (replaced by ``chunks`` after each yield), yielding when it is full."""
        split, opts, bounds = self.split, self.opts, self.bounds
        trace_open(opts.trace_file, split.segment, split.start)
        offsets, timestamps = bounds.offset, bounds.timestamp
        low, high = offsets.low, offsets.high
        filter_offsets = not offsets.unbounded
        filter_timestamps = not timestamps.unbounded
        ts_low_ms = None if timestamps.low is None else timestamps.low // 1000
        reader = FileBatchReader(self.path, split.start, split.end)
        # The columnar fast path: v2 data batches, no per-record filter (record filters and control batches
        # take the Record path, as do batches the compiled reader rejects).
        fast = not (filter_offsets or filter_timestamps) and accel.available()
        # ... or with offset bounds only, for batches wholly inside them
        whole_batches = not fast and not filter_timestamps and offsets.values is None and accel.available()
        # read_committed: Kafka's consumer-side filter (Fetcher): producers enter the aborted set when a batch
        # reaches their aborted transaction's first offset, and leave it at their ABORT marker.
        aborted_queue: list[tuple[int, int]] | None = None
        aborted: set[int] = set()
        try:
            for raw, local, total in reader.spans():
                position = reader.window_position + local
                try:
                    batch = make_batch(raw[local : local + total], position)
                except KcliError as exc:
                    yield from self._corrupt(exc, position)
                    continue
                legacy = batch.magic < 2
                # Checked before any header field steers the walk: a damaged offset must not end it silently.
                if opts.validate:
                    reason = batch.invalid_reason()
                    if reason is not None:
                        yield from self._corrupt(CorruptRecordError(reason, base_offset=batch.last_offset if
                                                                    legacy else batch.base_offset), position)
                        continue
                first = batch.offset if legacy and not batch.codec_id else (None if legacy else batch.base_offset)
                if high is not None and first is not None and first > high:
                    break  # offsets only grow within a segment
                if low is not None and batch.last_offset < low:
                    continue
                if opts.read_committed and not legacy:
                    if aborted_queue is None:
                        aborted_queue = self._aborted(batch.base_offset)
                    while aborted_queue and aborted_queue[0][0] <= batch.last_offset:
                        aborted.add(heapq.heappop(aborted_queue)[1])
                    if batch.is_transactional and not batch.is_control and batch.producer_id in aborted:
                        continue
                # A v2 batch's max timestamp bounds its records (control batches still feed read_committed).
                if ts_low_ms is not None and not legacy and batch.max_timestamp < ts_low_ms and not batch.is_control:
                    continue
                if batch.is_control and not opts.include_control and not opts.read_committed:
                    continue
                try:
                    if (not legacy and not batch.is_control and (fast or (
                            whole_batches and (low is None or batch.base_offset >= low)
                            and (high is None or batch.last_offset <= high)))
                            and self._append_fast(batch, position)):
                        if self.chunk.rows >= CHUNK_ROWS:
                            yield
                        continue
                    records = batch.records()
                except KcliError as exc:
                    yield from self._corrupt(exc, position)
                    continue
                if batch.is_control:
                    if opts.read_committed and batch.producer_id in aborted and records and _is_abort(records[0].key):
                        aborted.discard(batch.producer_id)
                    if not opts.include_control:
                        continue
                if filter_offsets or filter_timestamps:
                    records = [r for r in records
                               if (not filter_offsets or offsets.contains(r.offset))
                               and (not filter_timestamps
                                    or timestamps.contains(None if r.timestamp == NO_TIMESTAMP else r.timestamp * 1000))]
                if records:
                    self._append(batch, records, position)
                    if self.chunk.rows >= CHUNK_ROWS:
                        yield
        except SplitCorruptError:
            raise
        except CorruptRecordError as exc:  # framing: the next batch cannot be found, so the split ends here
            yield from self._corrupt(exc, exc.position if exc.position is not None else reader.valid_bytes)
            return
        if reader.stop is not StopReason.END:
            remaining = (split.end if split.end is not None else os.path.getsize(self.path)) - reader.valid_bytes
            reason = (f"truncated batch: declares {reader.declared_size} bytes, only {remaining} remain"
                      if reader.stop is StopReason.PARTIAL_BATCH else
                      f"{remaining} bytes at the end are too short for a batch header")
            yield from self._corrupt(CorruptRecordError(reason), reader.valid_bytes)

    def _aborted(self, start: int) -> list[tuple[int, int]]:
        split = self.split
        end = split.next_base_offset if split.next_base_offset is not None else _NO_OFFSET
        found = PartitionReader(Path(split.directory), list(split.segment_bases), 0).aborted_transactions(start, end)
        queue = [(txn.first_offset, txn.producer_id) for txn in found]
        heapq.heapify(queue)
        return queue

    def _run(self, batch, n: int, position: int) -> tuple:
        try:
            codec = _CODECS[batch.codec_id]
        except IndexError:
            codec = f"unknown({batch.codec_id})"
        timestamp_type = (batch.attributes >> 3) & 1 if batch.magic == 2 else int(batch.timestamp_type)
        return (n, True, timestamp_type, batch.magic, codec, batch.producer_id, batch.producer_epoch,
                batch.is_transactional, batch.is_control, position, None)

    def _append(self, batch, records, position: int) -> None:
        """The Record path: any magic, control batches, filtered records."""
        chunk = self.chunk
        n = len(records)
        chunk.offset.extend([r.offset for r in records])
        chunk.timestamp.extend([r.timestamp for r in records])
        chunk.key.extend([r.key for r in records])
        chunk.value.extend([r.value for r in records])
        rows = chunk.rows
        for i, r in enumerate(records):
            if r.headers:
                chunk.header_rows.append(rows + i)
                chunk.header_lists.append([(_header_key(h.key), h.value) for h in r.headers])
        chunk.sequence.extend([r.sequence for r in records])
        chunk.runs.append(self._run(batch, n, position))
        chunk.rows += n

    def _append_fast(self, batch, position: int) -> bool:
        """A v2 data batch straight into the columns with the compiled record reader (no Record objects);
        False (nothing appended) when it is unavailable or rejects the batch: the caller takes the Record path,
        whose errors carry kcli's messages and positions."""
        count = batch.records_count
        if count < 0:
            return False
        payload = batch.payload()  # raises CorruptRecordError with the position, as batch.records() would
        try:
            compiled = _compiled_batch(batch.raw[:RECORD_BATCH_OVERHEAD], payload)
        except Exception:  # noqa: BLE001 - rejected: the Record path reports it
            return False
        chunk = self.chunk
        offsets, stamps, keys, values = chunk.offset, chunk.timestamp, chunk.key, chunk.value
        header_rows, header_lists = chunk.header_rows, chunk.header_lists
        mark, header_mark = len(offsets), len(header_rows)
        try:
            for r in compiled:
                offsets.append(r.offset)
                stamps.append(r.timestamp)
                keys.append(r.key)
                values.append(r.value)
                hs = r.headers  # (str, bytes) pairs: aiokafka decodes keys as strict UTF-8, or rejects the batch
                if hs:
                    header_rows.append(len(offsets) - 1)
                    header_lists.append(hs)
        except Exception:  # noqa: BLE001 - rejected half way: undo, the Record path reports it
            ok = False
        else:
            ok = len(offsets) - mark == count
        if not ok:
            for column in (offsets, stamps, keys, values):
                del column[mark:]
            del header_rows[header_mark:], header_lists[header_mark:]
            return False
        base_sequence = batch.base_sequence
        if base_sequence < 0:
            chunk.sequence.extend([NO_SEQUENCE] * count)
        else:
            base = batch.base_offset
            chunk.sequence.extend([increment_sequence(base_sequence, o - base) for o in offsets[mark:]])
        chunk.runs.append(self._run(batch, count, position))
        chunk.rows += count
        return True

    def _corrupt(self, exc: KcliError, position: int) -> Iterator[None]:
        chunk = self.chunk
        exc.path = None  # kcli's describe() puts path and position first; set them here, once
        exc.position = None
        exc.at(path=self.split.segment, position=position)
        if not self.opts.permissive:
            raise SplitCorruptError(exc.reason + " (option mode=PERMISSIVE reads past corrupt batches)",
                                    path=self.split.segment, position=position, base_offset=exc.base_offset)
        if self.bounds.sql:
            return
        chunk.offset.append(None)
        chunk.timestamp.append(NO_TIMESTAMP)
        chunk.key.append(None)
        chunk.value.append(None)
        chunk.sequence.append(None)
        chunk.runs.append((1, None, None, None, None, None, None, None, None, position, exc.describe()))
        chunk.rows += 1
        if chunk.rows >= CHUNK_ROWS:
            yield


def _compiled_batch(header: bytes, payload: bytes):
    """aiokafka's compiled DefaultRecordBatch over a decompressed payload, as kcli.records.accel builds it
    (only called once ``accel.available()`` said yes); iterating it yields records without kcli Records."""
    return accel._CompiledBatch(accel._uncompressed(header) + payload)  # noqa: SLF001 - accel's own recipe


def _is_abort(key: bytes | None) -> bool:
    try:
        return parse_control_type(key) is ControlRecordType.ABORT
    except KcliError:
        return False
