"""Reading one SegmentSplit into columns: kcli's FileBatchReader and batch decoders, nothing new.

Records come out as dicts of column lists, ``CHUNK_ROWS`` rows at a time, in the order of
``kcli.spark.SCHEMA``; datasource.py turns each chunk into one Arrow RecordBatch. The rules follow
``kctl dump-log --deep-iteration`` (same batches, same records, same values) plus what a consumer applies:
control records hidden unless asked for, aborted transactions hidden under read_committed.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from pathlib import Path

from kcli.errors import CorruptRecordError, KcliError
from kcli.records.control import ControlRecordType, parse_control_type
from kcli.records.record_set import StopReason, make_batch
from kcli.records.types import NO_TIMESTAMP
from kcli.spark.plan import Bounds, ReadOptions, SegmentSplit
from kcli.storage.reader import PartitionReader
from kcli.storage.segment import FileBatchReader

CHUNK_ROWS = 8192
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


class _Chunk:
    def __init__(self, permissive: bool) -> None:
        self.names = COLUMNS + (("_corrupt",) if permissive else ())
        self.cols: dict[str, list] = {name: [] for name in self.names}
        self.rows = 0


class SplitReader:
    """Iterate column chunks of one split. ``bounds`` filter records exactly; pruning happened at planning."""

    def __init__(self, split: SegmentSplit, opts: ReadOptions, bounds: Bounds) -> None:
        self.split = split
        self.opts = opts
        self.bounds = bounds

    def chunks(self) -> Iterator[dict[str, list]]:
        self.chunk = _Chunk(self.opts.permissive)
        for _ in self._fill():
            yield self.chunk.cols
            self.chunk = _Chunk(self.opts.permissive)
        if self.chunk.rows:
            yield self.chunk.cols

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
        reader = FileBatchReader(split.segment, split.start, split.end)
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
            remaining = (split.end if split.end is not None else os.path.getsize(split.segment)) - reader.valid_bytes
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

    def _append(self, batch, records, position: int) -> None:
        chunk = self.chunk
        cols = chunk.cols
        n = len(records)
        split = self.split
        magic = batch.magic
        try:
            codec = _CODECS[batch.codec_id]
        except IndexError:
            codec = f"unknown({batch.codec_id})"
        cols["topic"].extend([split.topic] * n)
        cols["partition"].extend([split.partition] * n)
        cols["offset"].extend([r.offset for r in records])
        cols["timestamp"].extend([None if r.timestamp == NO_TIMESTAMP else r.timestamp * 1000 for r in records])
        cols["timestampType"].extend([int(batch.timestamp_type)] * n)
        cols["key"].extend([r.key for r in records])
        cols["value"].extend([r.value for r in records])
        cols["headers"].extend([[(_header_key(h.key), h.value) for h in r.headers] if r.headers else [] for r in records])
        cols["magic"].extend([magic] * n)
        cols["codec"].extend([codec] * n)
        cols["producer_id"].extend([batch.producer_id] * n)
        cols["producer_epoch"].extend([batch.producer_epoch] * n)
        cols["sequence"].extend([r.sequence for r in records])
        cols["is_transactional"].extend([batch.is_transactional] * n)
        cols["is_control"].extend([batch.is_control] * n)
        cols["segment"].extend([split.segment] * n)
        cols["position"].extend([position] * n)
        if "_corrupt" in cols:
            cols["_corrupt"].extend([None] * n)
        chunk.rows += n

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
        cols = chunk.cols
        for name in chunk.names:
            cols[name].append(None)
        cols["segment"][-1] = self.split.segment
        cols["position"][-1] = position
        cols["_corrupt"][-1] = exc.describe()
        chunk.rows += 1
        if chunk.rows >= CHUNK_ROWS:
            yield


def _is_abort(key: bytes | None) -> bool:
    try:
        return parse_control_type(key) is ControlRecordType.ABORT
    except KcliError:
        return False
