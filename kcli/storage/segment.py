"""LogSegment reading: the batches of a .log file with their byte positions, in bounded memory.

Segments can be 1 GiB; they are read through a sliding window of ``os.pread`` calls rather than an
mmap, so resident memory stays at the window size however large the file is.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from kcli.errors import InputError
from kcli.records.record_set import HEADER_SIZE_UP_TO_MAGIC, Batch, BatchReader, StopReason, make_batch

DEFAULT_WINDOW = 8 * 1024 * 1024


class FileBatchReader:
    """Iterate the batches of ``path[start:end]`` with Kafka's FileLogInputStream rules.

    Same contract as ``BatchReader``: after iteration ``valid_bytes`` is the file position after the
    last complete batch, ``stop`` says why iteration ended, ``declared_size`` the size of a partial one.
    """

    def __init__(self, path: str | os.PathLike, start: int = 0, end: int | None = None, *, window: int = DEFAULT_WINDOW):
        self.path = str(path)
        self.start = start
        self._end = end
        self.window = window
        self.valid_bytes = start
        self.stop = StopReason.END
        self.declared_size: int | None = None
        self.bytes_read = 0
        self.window_position = start

    def spans(self) -> Iterator[tuple[bytes, int, int]]:
        """(window, index in window, size) of each complete batch; the file position is
        ``window_position + index``, with ``window_position`` updated before each window."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror}", path=self.path) from None
        try:
            end = os.fstat(fd).st_size if self._end is None else self._end
            pos = self.start
            need = self.window
            while True:
                chunk = os.pread(fd, min(need, end - pos), pos)
                self.bytes_read += len(chunk)
                self.window_position = pos
                reader = BatchReader(chunk, path=self.path, base_position=pos)
                for local, total in reader.spans():
                    yield chunk, local, total
                self.valid_bytes = reader.valid_bytes
                if pos + len(chunk) >= end or len(chunk) == 0:
                    self.stop = reader.stop
                    self.declared_size = reader.declared_size
                    return
                # Window boundary: re-read from the last complete batch, big enough for the next one.
                need = self.window
                if reader.stop is StopReason.PARTIAL_BATCH and reader.declared_size and reader.declared_size > need:
                    need = reader.declared_size
                if reader.valid_bytes == pos and need <= len(chunk):
                    need = len(chunk) + HEADER_SIZE_UP_TO_MAGIC
                pos = reader.valid_bytes
        finally:
            os.close(fd)

    def __iter__(self) -> Iterator[Batch]:
        for chunk, local, total in self.spans():
            yield make_batch(chunk[local : local + total], self.window_position + local)


class LogSegment:
    """A segment's files, named by base offset in one partition directory (read side)."""

    def __init__(self, log_path: str | os.PathLike, base_offset: int | None = None) -> None:
        from kcli.storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, offset_from_filename

        self.log_path = Path(log_path)
        self.base_offset = offset_from_filename(self.log_path.name) if base_offset is None else base_offset
        stem = self.log_path.name[: -len(LOG_SUFFIX)] if self.log_path.name.endswith(LOG_SUFFIX) else self.log_path.stem
        self.index_path = self.log_path.with_name(stem + INDEX_SUFFIX)
        self.time_index_path = self.log_path.with_name(stem + TIME_INDEX_SUFFIX)
        self.txn_index_path = self.log_path.with_name(stem + TXN_INDEX_SUFFIX)

    @property
    def size(self) -> int:
        return self.log_path.stat().st_size

    def batches(self, start_position: int = 0, end_position: int | None = None) -> FileBatchReader:
        return FileBatchReader(self.log_path, start_position, end_position)

    def __repr__(self) -> str:
        return f"LogSegment({str(self.log_path)!r}, base_offset={self.base_offset})"
