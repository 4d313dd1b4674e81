"""The checked reading path: a segment's batches with the per-batch checks of ``kctl verify``.

Kafka's LogSegment.recover trusts no batch it has not checked: ``ensureValid`` (the size and the CRC) and
``ensureOffsetInRange`` (the offsets fit the segment). The offline tools that answer from the log (offsets for
a time, topic summaries, consumer groups replayed from ``__consumer_offsets``, log ranges) read through
``CheckedBatchReader``, so the first batch that fails a check raises ``CorruptBatchError`` with the file, the
byte position and the code verify reports for it, instead of an answer computed from damaged bytes. verify
itself reports every failed check and goes on; it uses the same check functions.

Special files are refused when a segment is opened (``files.open_regular``). A torn tail (a partial batch, or
too few bytes for a header) ends the iteration as it ends Kafka's FileLogInputStream: ``valid_bytes`` and
``stop`` say where and why.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from kcli.errors import CorruptRecordError, KcliError
from kcli.records.batch import ATTRIBUTES_OFFSET, HEADER, RECORD_BATCH_OVERHEAD
from kcli.records.crc import crc32c
from kcli.records.layout import MAGIC_OFFSET
from kcli.records.record_set import Batch, make_batch
from kcli.records.types import INT32_MAX
from kcli.storage.files import offset_from_filename
from kcli.storage.segment import DEFAULT_WINDOW, FileBatchReader


class CorruptBatchError(CorruptRecordError):
    """A batch failed a check: ``code`` is verify's problem code for it (crc_mismatch, unknown_magic, ...)."""

    def __init__(self, reason: str, *, code: str, path: str | None = None, position: int | None = None,
                 base_offset: int | None = None) -> None:
        self.code = code
        super().__init__(reason, path=path, position=position, base_offset=base_offset)


def batch_integrity(batch: Batch) -> tuple[str, str] | None:
    """(code, reason) when nothing of the batch can be trusted: it fails Kafka's ``ensureValid`` (size, CRC), or
    its magic is one Kafka does not know (a v2 CRC does not cover the magic byte). None when it passes."""
    if not batch.is_valid:
        return "crc_mismatch", batch.invalid_reason() or "invalid batch"
    if batch.magic > 2:
        return "unknown_magic", f"unknown magic {batch.magic}"
    return None


def header_problem(batch: Batch) -> tuple[str, str] | None:
    """(code, reason) for a v2 header whose counts contradict each other (then its last offset is not to be
    believed): a negative lastOffsetDelta or recordsCount, or more records than offsets."""
    if batch.magic == 2 and (batch.last_offset_delta < 0 or batch.records_count < 0
                             or batch.records_count > batch.last_offset_delta + 1):
        return "bad_batch_header", (f"inconsistent header: lastOffsetDelta {batch.last_offset_delta}, "
                                    f"recordsCount {batch.records_count}")
    return None


def offset_problem(first: int, last: int, *, base_offset: int | None,
                   previous_last: int | None) -> tuple[str, str] | None:
    """(code, reason) for offsets that do not fit the segment (below its base offset, or a relative offset above
    Int.MAX: Kafka's ensureOffsetInRange) or do not follow the previous batch's."""
    if base_offset is not None:
        if first < base_offset:
            return "offset_below_segment_base", f"batch offset {first} is below the segment base offset {base_offset}"
        if last > base_offset + INT32_MAX:
            return "offset_overflow", f"offset {last} does not fit the segment (relative offset above Int.MAX)"
    if previous_last is not None and first <= previous_last:
        return "offset_not_increasing", f"offsets go backwards: batch starts at {first} after offset {previous_last}"
    return None


def _first_offset(batch: Batch) -> int:
    return batch.base_offset  # a magic 0/1 compressed wrapper decompresses for it (may raise KcliError)


class CheckedBatchReader(FileBatchReader):
    """``FileBatchReader`` whose batches have passed verify's per-batch checks: validity (size, CRC), magic, a
    consistent v2 header, offsets within the segment and above the previous batch's. The first failure raises
    ``CorruptBatchError`` (file, byte position, base offset as far as it can be read, code).

    ``base_offset``: the segment's, for the range check (default: from a segment file's name; None skips it).
    ``previous_last``: the last offset before ``start`` when known (a read continuing an earlier one).
    After iteration ``last_offset`` is the last offset of the last batch read.
    """

    def __init__(self, path: str | os.PathLike, start: int = 0, end: int | None = None, *,
                 base_offset: int | None = -1, previous_last: int | None = None, window: int = DEFAULT_WINDOW) -> None:
        super().__init__(path, start, end, window=window)
        if base_offset == -1:
            try:
                base_offset = offset_from_filename(os.path.basename(self.path))
            except (KcliError, ValueError):
                base_offset = None
        self.base_offset = base_offset
        self.last_offset = previous_last

    def check(self, batch: Batch) -> Batch:
        """``batch`` when it passes; else CorruptBatchError."""
        damage = batch_integrity(batch) or header_problem(batch)
        first = None
        if damage is None:
            try:
                first = _first_offset(batch)
            except KcliError as exc:
                damage = "corrupt_records", exc.reason
        if damage is None:
            damage = offset_problem(first, batch.last_offset, base_offset=self.base_offset,  # type: ignore[arg-type]
                                    previous_last=self.last_offset)
        if damage is not None:
            code, reason = damage
            raise CorruptBatchError(reason, code=code, path=self.path, position=batch.position,
                                    base_offset=first if first is not None else _header_base_offset(batch))
        self.last_offset = batch.last_offset
        return batch

    def checked_spans(self, *, batches: bool = True) -> Iterator[tuple[bytes, int, int, Batch | None]]:
        """(window, index in window, size, batch) of each batch, checked. ``batches=False``: a plain valid v2
        batch is checked straight from the window (header, CRC over a view, offsets) and comes with None."""
        spans = FileBatchReader.spans(self)
        while True:
            try:
                chunk, local, total = next(spans)
            except StopIteration:
                return
            except CorruptBatchError:
                raise
            except CorruptRecordError as exc:  # a declared size below the minimum (a zero-filled tail, usually)
                raise CorruptBatchError(exc.reason, code="corrupt_batch_size", path=exc.path,
                                        position=exc.position) from None
            position = self.window_position + local
            if not batches and total >= RECORD_BATCH_OVERHEAD and chunk[local + MAGIC_OFFSET] == 2:
                first, _, _, _, crc, _, delta, _, _, _, _, _, count = HEADER.unpack_from(chunk, local)
                last = first + delta
                with memoryview(chunk) as view:
                    valid = crc == crc32c(view[local + ATTRIBUTES_OFFSET: local + total])
                if valid and 0 <= count <= delta + 1 and delta >= 0 and offset_problem(
                        first, last, base_offset=self.base_offset, previous_last=self.last_offset) is None:
                    self.last_offset = last
                    yield chunk, local, total, None
                    continue
            try:
                batch = make_batch(bytes(chunk[local: local + total]), position)
            except KcliError as exc:  # a magic 0/1 message too short for its own header
                raise CorruptBatchError(exc.reason, code="corrupt_records", path=self.path, position=position) from None
            yield chunk, local, total, self.check(batch)

    def spans(self) -> Iterator[tuple[bytes, int, int]]:
        for chunk, local, total, _batch in self.checked_spans(batches=False):
            yield chunk, local, total

    def __iter__(self) -> Iterator[Batch]:
        for _chunk, _local, _total, batch in self.checked_spans():
            yield batch


def _header_base_offset(batch: Batch) -> int | None:
    """The base offset field as stored (of a damaged batch: as far as it can be believed)."""
    try:
        return batch.base_offset if batch.magic >= 2 else batch.last_offset
    except KcliError:
        return None


__all__ = ["CheckedBatchReader", "CorruptBatchError", "batch_integrity", "header_problem", "offset_problem"]
