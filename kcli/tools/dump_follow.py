"""``kctl dump-log --follow``: tail a live partition directory like ``tail -F``.

The active segment is read as it grows; only complete batches are yielded (a batch still being written at
the tail is waited for). When a newer segment appears (a roll), the current one is read to its end and the
next one follows; when the segment being read disappears (retention), reading goes on with the next one.
Ranges and record filters apply as in ``DumpRun``; --count and --end-offset end the follow.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from kcli.errors import InputError, KcliError, UsageError
from kcli.storage.files import (
    LOG_SUFFIX,
    FileKind,
    classify,
    offset_from_filename,
    parse_partition_dir_name,
    segment_path,
)
from kcli.storage.segment import FileBatchReader
from kcli.tools.dump import DumpItem, DumpNotice, DumpOptions, DumpRun, NoticeLevel, _Cursor
from kcli.tools.inputs import InputFile
from kcli.tools.report import code_for_error

DEFAULT_POLL_INTERVAL = 0.3  # seconds between looks at a partition that has not grown


class FollowRun(DumpRun):
    """Iterate for items until --count or --end-offset is reached, or forever; ``sleep(seconds)`` is called
    whenever there is nothing new (a test or the CLI may flush output there, or raise to stop)."""

    def __init__(self, directory: str, options: DumpOptions, *, poll_interval: float = DEFAULT_POLL_INTERVAL,
                 sleep: Callable[[float], None] = time.sleep):
        path = Path(directory)
        if not path.is_dir():
            raise UsageError(f"--follow takes one partition directory; {directory} is not a directory")
        if parse_partition_dir_name(path.resolve().name) is None and not any(path.glob("*" + LOG_SUFFIX)):
            raise UsageError(f"--follow takes one partition directory (<topic>-<partition>, holding .log segments); "
                             f"{directory} is neither")
        if options.max_bytes is not None:
            raise UsageError("--follow reads segments as they grow; --max-bytes does not apply")
        self.directory = path
        self.given = directory
        self.inputs = []
        self.skipped = []
        self.warnings = []
        self._segment_bases = {}
        self._setup(options, None)
        self.poll_interval = poll_interval
        self.sleep = sleep
        self.topic, self.partition = parse_partition_dir_name(path.resolve().name) or (None, None)

    @property
    def total_bytes(self) -> int:
        return 0

    def _segments(self) -> list[int]:
        """Base offsets of the directory's .log segments, ascending."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise InputError(f"cannot list directory: {exc.strerror or exc}", path=self.given) from None
        return sorted(offset_from_filename(n) for n in names
                      if n.endswith(LOG_SUFFIX) and classify(n) is FileKind.LOG)

    def _first_segment(self, bases: list[int]) -> int:
        start = self.options.start_offset
        if start is None:
            return bases[0]
        holding = [b for b in bases if b <= start]
        return holding[-1] if holding else bases[0]

    def _open(self, base: int, first: bool) -> tuple[InputFile, _Cursor, int]:
        path = segment_path(self.directory, base, LOG_SUFFIX)
        given = str(path)
        item = InputFile(path, FileKind.LOG, given)
        self.summary.files += 1
        position = self._seek_position(path) if first and self.options.filtered else 0
        return item, _Cursor(given, path, self.topic, self.partition), position

    def __iter__(self) -> Iterator[DumpItem]:
        base: int | None = None
        position = 0
        item = cursor = None
        while not self.done:
            bases = self._segments()
            if base is None:
                if not bases:
                    self.sleep(self.poll_interval)
                    continue
                base = self._first_segment(bases)
                item, cursor, position = self._open(base, True)
                yield self._log_header(item)
            newer = [b for b in bases if b > base]  # listed before reading: a rolled segment is complete
            try:
                size = os.stat(item.path).st_size
                reader = FileBatchReader(item.path, position, size) if size > position else None
                if reader is not None:
                    yield from self._batches(reader, cursor)
                    position = reader.valid_bytes
            except (FileNotFoundError, InputError):
                if item.path.exists():
                    raise
                # deleted by retention (or renamed to .deleted) while being followed
                following = [b for b in self._segments() if b > base]
                if not following:
                    base = None  # the whole partition went: wait for a segment to appear
                    continue
                yield DumpNotice(item.given, NoticeLevel.WARNING,
                                 f"{item.given} was deleted while being followed; continuing with the next segment",
                                 code="segment_deleted")
                base = following[0]
                item, cursor, position = self._open(base, False)
                yield self._log_header(item)
                continue
            except KcliError as exc:
                self.summary.errors += 1
                exc.at(path=item.given)
                yield DumpNotice(item.given, NoticeLevel.ERROR, exc.describe(), exc.position, exc.base_offset,
                                 code=code_for_error(exc))
                return
            if self.done or self.past_end:
                return
            if newer:
                if reader is not None and position < size:  # a rolled segment never completes its tail
                    yield from self._trailing_notices(item.given, item.path, reader, size - position)
                base = newer[0]
                item, cursor, position = self._open(base, False)
                yield self._log_header(item)
                continue
            # A partial batch at the tail is still being written: wait for it (a roll reports what never completes).
            self.sleep(self.poll_interval)
