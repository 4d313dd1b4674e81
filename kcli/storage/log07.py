"""Kafka 0.7's log layout: a partition directory of ``<20-digit byte offset>.kafka`` segments whose offsets are byte
positions, appended, rolled, flushed, recovered and deleted as Kafka 0.7's ``Log`` and ``LogManager`` do.

Kafka 0.7: kafka/log/{Log,LogManager,SegmentList}.scala, kafka/message/FileMessageSet.scala. The facts kept:

* a segment is named by the byte offset of its first message; segments are contiguous (start + size = next start),
* an append is validated whole (every message complete, CRC-32 of its payload), then written as sent (a wrapper
  stays compressed); the active segment rolls once it has grown past ``log.file.size``,
* readers see a segment up to its *flushed* size (FileMessageSet's high water mark): data is readable once flushed,
  after ``log.flush.interval`` messages or by the time-based flusher,
* at start the last segment is recovered (truncated after its last valid message) unless the clean shutdown file
  is there; retention deletes whole segments by age (file mtime) or by the log's size, keeping one.

Unlike 0.7, a fetch answers whole messages only and refuses an offset that does not start a valid message (0.7
served the raw bytes and left its consumer to fail on them).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kcli.errors import KcliError
from kcli.records.message07 import Stop, StopKind, read_message, scan_message_set
from kcli.storage.files import (
    CLEAN_SHUTDOWN,
    KAFKA07_SUFFIX,
    filename_prefix_from_offset,
    fsync_dir,
    offset_from_filename,
    parse_partition_dir_name,
)

LATEST_TIME = -1  # OffsetRequest.LatestTime
EARLIEST_TIME = -2  # OffsetRequest.EarliestTime
READ_CHUNK = 1 << 20


class Log07Error(KcliError):
    """A request a 0.7 log cannot serve; the broker answers it with the error code of the subclass."""


class OffsetOutOfRangeError07(Log07Error):
    pass


class InvalidMessageError07(Log07Error):
    pass


class WrongPartitionError07(Log07Error):
    pass


class InvalidFetchSizeError07(Log07Error):
    pass


class InvalidTopicError07(Log07Error):
    """0.7's InvalidTopicException, which ErrorMapping has no code for: the answer is UnknownCode (-1)."""


class CorruptLog07Error(KcliError):
    """Segments that do not add up (0.7's ``validateSegments``): the log cannot be opened."""


def segment_name(offset: int) -> str:
    return filename_prefix_from_offset(offset) + KAFKA07_SUFFIX


def list_segments(directory: Path) -> list[tuple[int, Path]]:
    """(start byte offset, path) of the directory's .kafka segments, in order."""
    found = []
    for entry in os.scandir(directory):
        if entry.is_file() and entry.name.endswith(KAFKA07_SUFFIX):
            found.append((offset_from_filename(entry.name), Path(entry.path)))
    return sorted(found)


@dataclass
class Segment07:
    path: Path
    start: int
    size: int  # bytes written
    flushed: int  # bytes readers may see (0.7's high water mark)
    fd: int = -1

    @property
    def end(self) -> int:
        return self.start + self.size

    def pread(self, position: int, length: int) -> bytes:
        fd = self.fd if self.fd >= 0 else os.open(self.path, os.O_RDONLY)
        try:
            return os.pread(fd, length, position)
        finally:
            if fd != self.fd:
                os.close(fd)


@dataclass(frozen=True, slots=True)
class Recovery07:
    """What opening a log did to its last segment."""

    segment: str
    kept_bytes: int
    truncated_bytes: int
    reason: str | None


@dataclass
class Log07Config:
    segment_bytes: int = 1024 * 1024 * 1024  # log.file.size
    flush_interval_messages: int = 500  # log.flush.interval
    flush_interval_ms: int = 3000  # log.default.flush.interval.ms (or topic.flush.intervals.ms)
    retention_ms: int = 168 * 3_600_000  # log.retention.hours (or topic.log.retention.hours)
    retention_bytes: int = -1  # log.retention.size


class Log07:
    """One partition's 0.7 log (Kafka 0.7 ``Log``). Thread-safe: the broker calls it from worker threads."""

    def __init__(self, directory: Path, config: Log07Config, *, recover: bool = True,
                 clock: Callable[[], float] = time.time) -> None:
        self.directory = Path(directory)
        self.config = config
        self.clock = clock
        self.lock = threading.RLock()
        self.unflushed = 0
        self.last_flushed = clock()
        self.recovery: Recovery07 | None = None
        self.segments: list[Segment07] = self._load(recover)

    @property
    def name(self) -> str:
        return self.directory.name

    # -- loading -------------------------------------------------------------------------------------------
    def _load(self, recover: bool) -> list[Segment07]:
        self.directory.mkdir(parents=True, exist_ok=True)
        segments = [Segment07(path, start, path.stat().st_size, path.stat().st_size)
                    for start, path in list_segments(self.directory)]
        if not segments:
            path = self.directory / segment_name(0)
            path.touch()
            fsync_dir(self.directory)
            segments = [Segment07(path, 0, 0, 0)]
        for curr, nxt in zip(segments, segments[1:]):
            if curr.end != nxt.start:
                raise CorruptLog07Error(f"segments do not validate: {curr.path.name} ends at byte offset {curr.end} "
                                        f"but the next one, {nxt.path.name}, starts at {nxt.start}",
                                        path=str(self.directory))
        last = segments[-1]
        if recover:
            self.recovery = self._recover(last)
        last.fd = os.open(last.path, os.O_RDWR)
        return segments

    @staticmethod
    def _recover(segment: Segment07) -> Recovery07:
        """FileMessageSet.recover: keep the messages up to the first incomplete or invalid one, truncate the rest."""
        valid, reason, pos = 0, None, 0
        fd = os.open(segment.path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            carry = b""
            while True:
                read = os.pread(fd, READ_CHUNK, pos) if pos < size else b""
                chunk = carry + read
                if not chunk:
                    break
                pos += len(read)
                scan = scan_message_set(chunk)
                valid += scan.valid_bytes
                carry = chunk[scan.valid_bytes :]
                if scan.stop is None:
                    continue
                if scan.stop.kind is StopKind.PARTIAL and read:
                    continue  # the rest of the message is in the next chunk
                reason = f"byte {valid}: {scan.stop.reason}"
                break
            if valid < size:
                os.ftruncate(fd, valid)
                os.fsync(fd)
        finally:
            os.close(fd)
        segment.size = segment.flushed = valid
        return Recovery07(segment.path.name, valid, size - valid, reason)

    def close(self) -> None:
        with self.lock:
            self.flush()
            for segment in self.segments:
                if segment.fd >= 0:
                    os.close(segment.fd)
                    segment.fd = -1

    # -- offsets -------------------------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self.segments[0].start

    @property
    def high_watermark(self) -> int:
        """The end of what readers may see: the flushed end of the last segment."""
        last = self.segments[-1]
        return last.start + last.flushed

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].end

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- append --------------------------------------------------------------------------------------------
    def append(self, message_set: bytes) -> int:
        """Validate then append a message set as sent; returns the byte offset of its first message."""
        scan = scan_message_set(message_set)
        if scan.stop is not None:
            raise InvalidMessageError07(f"message set of {len(message_set)} bytes: {scan.stop.reason}",
                                        position=scan.stop.position)
        for message in scan.messages:
            try:
                message.inner()  # a wrapper that does not decompress is as invalid as a bad CRC
            except KcliError as exc:
                raise InvalidMessageError07(exc.reason, position=message.position) from None
        with self.lock:
            segment = self.segments[-1]
            offset = segment.end
            if message_set:
                written = os.pwrite(segment.fd, message_set, segment.size)
                if written != len(message_set):
                    raise OSError(f"short write to {segment.path}: {written} of {len(message_set)} bytes")
                segment.size += written
            self.unflushed += len(scan.messages)
            if self.unflushed >= self.config.flush_interval_messages:
                self.flush()
            if segment.size > self.config.segment_bytes:
                self.roll()
            return offset

    def roll(self) -> None:
        with self.lock:
            self.flush()
            last = self.segments[-1]
            path = self.directory / segment_name(last.end)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            fsync_dir(self.directory)
            os.close(last.fd)
            last.fd = -1
            self.segments.append(Segment07(path, last.end, 0, 0, fd))

    def flush(self) -> None:
        with self.lock:
            last = self.segments[-1]
            if last.fd >= 0 and last.flushed != last.size:
                os.fsync(last.fd)
            last.flushed = last.size
            self.unflushed = 0
            self.last_flushed = self.clock()

    # -- read ----------------------------------------------------------------------------------------------
    def read(self, offset: int, max_size: int) -> bytes:
        """The whole messages from byte offset ``offset`` that fit in ``max_size`` bytes, within one segment."""
        if max_size < 0:
            raise InvalidFetchSizeError07(f"fetch size {max_size} is negative")
        with self.lock:  # a roll closes the active segment's descriptor, retention deletes files: read under it
            segments = self.segments
            end = self.high_watermark
            if offset < segments[0].start or offset > end:
                raise OffsetOutOfRangeError07(f"offset {offset} is out of range [{segments[0].start}, {end}]")
            if offset == end:
                return b""
            segment = next(s for s in reversed(segments) if s.start <= offset)
            visible = (segment.flushed if segment is segments[-1] else segment.size) - (offset - segment.start)
            data = segment.pread(offset - segment.start, min(max_size, visible))
        first = read_message(data)
        if isinstance(first, Stop):  # nothing whole at this offset
            if first.kind is StopKind.PARTIAL and visible > len(data):
                # (0.7: the consumer finds no whole message and raises InvalidMessageSizeException)
                raise InvalidFetchSizeError07(f"the message at offset {offset} is larger than the fetch size "
                                              f"{max_size}", position=offset)
            raise InvalidMessageError07(f"no valid message starts at offset {offset}: {first.reason}",
                                        position=offset)
        if not first.is_valid:
            raise InvalidMessageError07(f"no valid message starts at offset {offset}: CRC mismatch", position=offset)
        scan = scan_message_set(data, check_crc=False)
        return data[: scan.valid_bytes]

    def offsets_before(self, timestamp: int, max_count: int) -> list[int]:
        """Log.getOffsetsBefore: segment starts (and the end) whose time is at or before ``timestamp``, newest
        first; -1 latest, -2 earliest."""
        with self.lock:
            points = [(s.start, int(s.path.stat().st_mtime * 1000)) for s in self.segments]
            last = self.segments[-1]
            if last.flushed > 0:
                points.append((last.start + last.flushed, int(self.clock() * 1000)))
        if timestamp == LATEST_TIME:
            index = len(points) - 1
        elif timestamp == EARLIEST_TIME:
            index = 0
        else:
            index = len(points) - 1
            while index >= 0 and points[index][1] > timestamp:
                index -= 1
        count = max(0, min(max_count, index + 1))
        return [points[index - j][0] for j in range(count)]

    # -- retention -----------------------------------------------------------------------------------------
    def delete_old_segments(self, now_ms: int | None = None) -> list[str]:
        """LogManager.cleanupLogs: delete leading segments older than the retention time, then (0.7.1's
        log.retention.size) while the log is over its size; a fresh segment replaces the last one deleted."""
        now_ms = int(self.clock() * 1000) if now_ms is None else now_ms
        deleted = []
        with self.lock:
            while self.segments:
                head = self.segments[0]
                too_old = now_ms - int(head.path.stat().st_mtime * 1000) > self.config.retention_ms
                too_big = (self.config.retention_bytes >= 0
                           and self.size_in_bytes - head.size >= self.config.retention_bytes and head.size > 0)
                if not (too_old or too_big):
                    break
                if len(self.segments) == 1:
                    if head.size == 0:
                        break
                    self.roll()
                self.segments.pop(0)
                if head.fd >= 0:
                    os.close(head.fd)
                head.path.unlink(missing_ok=True)
                deleted.append(head.path.name)
        return deleted


@dataclass
class LogManager07Config:
    num_partitions: int = 1  # num.partitions
    topic_partitions: dict[str, int] = field(default_factory=dict)  # topic.partition.count.map
    log: Log07Config = field(default_factory=Log07Config)
    topic_flush_ms: dict[str, int] = field(default_factory=dict)  # topic.flush.intervals.ms
    topic_retention_ms: dict[str, int] = field(default_factory=dict)  # topic.log.retention.hours (in ms)


class LogManager07:
    """Kafka 0.7's LogManager: one directory of ``<topic>-<partition>`` logs, created on first use."""

    def __init__(self, directory: Path, config: LogManager07Config, *,
                 topic_created: Callable[[str], None] | None = None, clock: Callable[[], float] = time.time) -> None:
        self.directory = Path(directory)
        self.config = config
        self.topic_created = topic_created
        self.clock = clock
        self.lock = threading.Lock()
        self.logs: dict[str, dict[int, Log07]] = {}
        self.recoveries: list[Recovery07] = []

    def startup(self) -> None:
        """Open every log; recover the last segments unless the previous shutdown was clean."""
        self.directory.mkdir(parents=True, exist_ok=True)
        marker = self.directory / CLEAN_SHUTDOWN
        recover = not marker.exists()
        for entry in sorted(os.scandir(self.directory), key=lambda e: e.name):
            parsed = parse_partition_dir_name(entry.name) if entry.is_dir() else None
            if parsed is None:
                continue
            topic, partition = parsed
            log = Log07(Path(entry.path), self._log_config(topic), recover=recover, clock=self.clock)
            if log.recovery is not None and log.recovery.truncated_bytes:
                self.recoveries.append(log.recovery)
            self.logs.setdefault(topic, {})[partition] = log
        marker.unlink(missing_ok=True)

    def shutdown(self) -> None:
        for log in self.all_logs():
            log.close()
        (self.directory / CLEAN_SHUTDOWN).touch()
        fsync_dir(self.directory)

    def _log_config(self, topic: str) -> Log07Config:
        base = self.config.log
        return Log07Config(base.segment_bytes, base.flush_interval_messages,
                           self.config.topic_flush_ms.get(topic, base.flush_interval_ms),
                           self.config.topic_retention_ms.get(topic, base.retention_ms), base.retention_bytes)

    def partition_count(self, topic: str) -> int:
        return self.config.topic_partitions.get(topic, self.config.num_partitions)

    def topics(self) -> list[str]:
        with self.lock:
            return sorted(self.logs)

    def all_logs(self) -> Iterator[Log07]:
        with self.lock:
            logs = [log for parts in self.logs.values() for log in parts.values()]
        return iter(logs)

    def get_or_create(self, topic: str, partition: int) -> Log07:
        if not topic or topic in (".", "..") or "/" in topic or "\0" in topic:
            raise InvalidTopicError07(f"invalid topic name {topic!r}")
        count = self.partition_count(topic)
        if not 0 <= partition < count:
            raise WrongPartitionError07(f"wrong partition {partition} of topic {topic!r}: valid partitions are "
                                        f"0 to {count - 1}")
        created_topic = False
        with self.lock:
            parts = self.logs.get(topic)
            if parts is None:
                parts = self.logs[topic] = {}
                created_topic = True
            log = parts.get(partition)
            if log is None:
                log = parts[partition] = Log07(self.directory / f"{topic}-{partition}", self._log_config(topic),
                                               recover=False, clock=self.clock)
        if created_topic and self.topic_created is not None:
            self.topic_created(topic)
        return log

    def flush_due(self) -> None:
        """The time-based flusher: each log whose last flush is older than its flush interval."""
        now = self.clock()
        for log in self.all_logs():
            if (now - log.last_flushed) * 1000 >= log.config.flush_interval_ms:
                log.flush()

    def cleanup(self) -> list[str]:
        deleted = []
        for log in self.all_logs():
            deleted += [f"{log.name}/{name}" for name in log.delete_old_segments()]
        return deleted
