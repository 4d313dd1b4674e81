"""Walk concatenated batches in a buffer with Kafka's FileLogInputStream rules (kafka-formats.md 1.1).

The reader never raises for a short or partial tail: it stops and says why, so dump and verify can
report "invalid bytes at the end" while recovery truncates there. A declared size below 14 raises,
as Kafka does (a zero-filled preallocated tail reads as size 0).
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from typing import Union

from kcli.errors import CorruptBatchSizeError
from kcli.records.batch import RecordBatch
from kcli.records.layout import (  # re-exported: the framing constants callers know this module by
    HEADER_SIZE_UP_TO_MAGIC,
    LOG_OVERHEAD,
    LOG_OVERHEAD_STRUCT,
    MAGIC_OFFSET,
    MIN_RECORD_OVERHEAD,
)
from kcli.records.legacy import LegacyMessage

__all__ = [
    "HEADER_SIZE_UP_TO_MAGIC", "LOG_OVERHEAD", "MAGIC_OFFSET", "MIN_RECORD_OVERHEAD",
    "Batch", "BatchReader", "StopReason", "iter_batches", "make_batch",
]

Batch = Union[RecordBatch, LegacyMessage]


class StopReason(Enum):
    END = "end"  # consumed exactly to the end
    SHORT_TAIL = "short_tail"  # 17 or fewer bytes left: not even a header up to magic
    PARTIAL_BATCH = "partial_batch"  # a header declares a size that runs past the end


def make_batch(raw: bytes, position: int) -> Batch:
    """Dispatch on the magic byte: 0/1 legacy message, anything else a v2 batch (as Kafka does)."""
    if raw[MAGIC_OFFSET] < 2:
        return LegacyMessage(raw, position)
    return RecordBatch(raw, position)


class BatchReader:
    """Iterate the batches of ``buf[start:end]`` (bytes or mmap); positions are ``base_position`` + index in ``buf``.

    After iteration, ``valid_bytes`` is the end of the last complete batch and ``stop`` why it ended;
    ``declared_size`` is set for PARTIAL_BATCH.
    """

    def __init__(
        self, buf, start: int = 0, end: int | None = None, *, path: str | None = None, base_position: int = 0
    ) -> None:
        self.buf = buf
        self.start = start
        self.end = len(buf) if end is None else end
        self.path = path
        self.base_position = base_position  # where buf[0] sits in the file, for windowed reads
        self.valid_bytes = base_position + start
        self.stop = StopReason.END
        self.declared_size: int | None = None

    def spans(self) -> Iterator[tuple[int, int]]:
        """(index in buf, size) of each complete batch: the framing alone, for callers that parse
        headers themselves (verify's hot loop)."""
        buf = self.buf
        end = self.end
        pos = self.start
        unpack = LOG_OVERHEAD_STRUCT.unpack_from
        base = self.base_position
        while True:
            remaining = end - pos
            if remaining <= HEADER_SIZE_UP_TO_MAGIC:
                self.stop = StopReason.END if remaining == 0 else StopReason.SHORT_TAIL
                return
            _offset, size = unpack(buf, pos)
            if size < MIN_RECORD_OVERHEAD:
                raise CorruptBatchSizeError(
                    f"Found record size {size} smaller than minimum record overhead ({MIN_RECORD_OVERHEAD})",
                    path=self.path,
                    position=base + pos,
                )
            total = LOG_OVERHEAD + size
            if total > remaining:
                self.stop = StopReason.PARTIAL_BATCH
                self.declared_size = total
                return
            yield pos, total
            pos += total
            self.valid_bytes = base + pos

    def __iter__(self) -> Iterator[Batch]:
        buf = self.buf
        base = self.base_position
        for pos, total in self.spans():
            yield make_batch(buf[pos : pos + total], base + pos)


def iter_batches(buf, start: int = 0, end: int | None = None) -> Iterator[Batch]:
    """Convenience: the batches of an in-memory record set (wire captures, fetch responses)."""
    return iter(BatchReader(buf, start, end))
