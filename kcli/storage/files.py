"""File naming in a Kafka log directory: suffixes, 20-digit base-offset names, partition dir names.

The only module that knows how Kafka names things on disk (Kafka `LogFileUtils`, `LocalLog`,
`raft/.../snapshot/Snapshots`), plus the `.tmp` + rename convention Kafka uses for atomic rewrites.
"""

from __future__ import annotations

import enum
import os
import re
import stat
from pathlib import Path

from kcli.errors import InputError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"
# Kafka 0.7's segments (kafka/log/Log.scala): <20-digit byte offset>.kafka, named by the byte position of their first
# message in the partition's log, with no index beside them.
KAFKA07_SUFFIX = ".kafka"
# Transient suffixes are appended *after* the normal one: 00000000000000000000.log.swap.
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# Checkpoint-style files are rewritten as `<file>.tmp`, fsynced, then renamed over the original.
TMP_SUFFIX = ".tmp"

KRAFT_CHECKPOINT_SUFFIX = ".checkpoint"
KRAFT_PARTIAL_SUFFIX = ".part"
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"
QUORUM_STATE = "quorum-state"

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
OFFSET_CHECKPOINTS = frozenset(
    {RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT}
)
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
META_PROPERTIES = "meta.properties"
CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"

# kcli's own layout (not Kafka's): <log dir>.kctl-quarantine/<UTC timestamp>/<partition>/manifest.json
QUARANTINE_DIR_SUFFIX = ".kctl-quarantine"
MANIFEST_NAME = "manifest.json"
RUN_MANIFEST_NAME = "run.json"  # marks <timestamp>/ as one quarantine run (one kctl recover, one broker startup)

# Partition dirs renamed to `<topic>-<partition>.<32-hex uuid><suffix>`.
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"
_MARKED_DIR = re.compile(r"^(\S+)-(\S+)\.(\S+)(-delete|-future|-stray)$")

_SEGMENT_FILE = re.compile(r"^\d+\.[a-z]+$")
_KRAFT_SNAPSHOT = re.compile(r"^(\d{20})-(\d{10})\.checkpoint(?:\.part|\.deleted)?$")


class FileKind(enum.Enum):
    LOG = "log"
    INDEX = "index"
    TIME_INDEX = "timeindex"
    TXN_INDEX = "txnindex"
    PRODUCER_SNAPSHOT = "snapshot"
    KRAFT_CHECKPOINT = "kraft-checkpoint"
    LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
    OFFSET_CHECKPOINT = "offset-checkpoint"
    PARTITION_METADATA = "partition-metadata"
    META_PROPERTIES = "meta-properties"
    CLEAN_SHUTDOWN = "clean-shutdown"
    QUORUM_STATE = "quorum-state"
    LOCK = "lock"
    DELETED = "deleted"
    CLEANED = "cleaned"
    SWAP = "swap"
    KAFKA07_LOG = "kafka07-log"  # a 0.7 segment: byte offsets, no index
    QUARANTINED_LOG = "quarantined-log"  # bytes of a .log kept by kctl recover (known from its manifest, not its name)
    UNKNOWN = "unknown"


_SEGMENT_KINDS = {
    LOG_SUFFIX: FileKind.LOG,
    INDEX_SUFFIX: FileKind.INDEX,
    TIME_INDEX_SUFFIX: FileKind.TIME_INDEX,
    TXN_INDEX_SUFFIX: FileKind.TXN_INDEX,
    PRODUCER_SNAPSHOT_SUFFIX: FileKind.PRODUCER_SNAPSHOT,
    KAFKA07_SUFFIX: FileKind.KAFKA07_LOG,
}
_TEMP_KINDS = {DELETED_SUFFIX: FileKind.DELETED, CLEANED_SUFFIX: FileKind.CLEANED, SWAP_SUFFIX: FileKind.SWAP}
_NAMED_KINDS = {
    CLEAN_SHUTDOWN: FileKind.CLEAN_SHUTDOWN,
    META_PROPERTIES: FileKind.META_PROPERTIES,
    LEADER_EPOCH_CHECKPOINT: FileKind.LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA: FileKind.PARTITION_METADATA,
    QUORUM_STATE: FileKind.QUORUM_STATE,
    BOOTSTRAP_CHECKPOINT: FileKind.KRAFT_CHECKPOINT,
    LOCK_FILE: FileKind.LOCK,
    **{name: FileKind.OFFSET_CHECKPOINT for name in OFFSET_CHECKPOINTS},
}


def filename_prefix_from_offset(offset: int) -> str:
    """Base offset as Kafka names files: at least 20 digits, zero padded, no grouping."""
    if offset < 0:
        raise ValueError(f"offsets in file names are non-negative, got {offset}")
    return f"{offset:020d}"


def offset_from_filename(name: str) -> int:
    """The offset encoded in a segment/snapshot file name: the text before the *first* `.`."""
    prefix = name.split(".", 1)[0]
    if not prefix.isascii() or not prefix.isdigit():
        raise InputError("file name does not start with a base offset", path=name)
    return int(prefix)


def segment_path(directory: str | os.PathLike[str], base_offset: int, suffix: str) -> Path:
    """`<dir>/<20-digit base offset><suffix>`; suffix may carry a temp suffix too (`.log.swap`)."""
    return Path(directory) / (filename_prefix_from_offset(base_offset) + suffix)


def strip_temp_suffix(name: str) -> str:
    """`00000000000000000000.log.swap` -> `00000000000000000000.log`; other names unchanged."""
    for suffix in _TEMP_KINDS:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def kraft_snapshot_name(offset: int, epoch: int) -> str:
    return f"{filename_prefix_from_offset(offset)}-{epoch:010d}{KRAFT_CHECKPOINT_SUFFIX}"


def kraft_snapshot_offset_epoch(name: str) -> tuple[int, int] | None:
    """(end offset, epoch) of a KRaft snapshot name `<20d>-<10d>.checkpoint[.part|.deleted]`."""
    match = _KRAFT_SNAPSHOT.match(name)
    return (int(match[1]), int(match[2])) if match else None


def partition_dir_marker(name: str) -> str | None:
    """`-delete`, `-future` or `-stray` for a renamed partition dir, else None."""
    match = _MARKED_DIR.match(name)
    return match[4] if match else None


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """(topic, partition) from `<topic>-<partition>[.<uuid>-delete|-future|-stray]`, else None.

    Split at the *last* `-` as Kafka's `LocalLog.parseTopicPartitionName` does; for marked dirs the topic
    may have been truncated to keep the name within 255 characters.
    """
    if name.endswith((DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, STRAY_DIR_SUFFIX)):
        if partition_dir_marker(name) is None:
            return None
        name = name[: name.rindex(".")]
    topic, dash, partition = name.rpartition("-")
    if not dash or not topic or not partition.isascii() or not partition.isdigit():
        return None
    number = int(partition)
    return (topic, number) if number <= 0x7FFFFFFF else None


def classify(path: str | os.PathLike[str]) -> FileKind:
    """What a file in a log dir or partition dir is, judged by its name only."""
    name = os.path.basename(os.fspath(path)) or Path(path).name  # no Path object per call: startup lists 40,000
    if name in _NAMED_KINDS:
        return _NAMED_KINDS[name]
    # Temp suffixes win: `.checkpoint.deleted` is DELETED too (LogLoader skips those; check
    # kraft_snapshot_offset_epoch() to tell them apart).
    for suffix, kind in _TEMP_KINDS.items():
        if name.endswith(suffix):
            return kind
    if _KRAFT_SNAPSHOT.match(name) and name.endswith(KRAFT_CHECKPOINT_SUFFIX):
        return FileKind.KRAFT_CHECKPOINT
    if _SEGMENT_FILE.match(name):
        return _SEGMENT_KINDS.get(name[name.index(".") :], FileKind.UNKNOWN)
    return FileKind.UNKNOWN


def is_partition_dir(path: str | os.PathLike[str]) -> bool:
    path = Path(path)
    return path.is_dir() and parse_partition_dir_name(path.name) is not None


def is_log_dir(path: str | os.PathLike[str]) -> bool:
    """A broker log dir: holds meta.properties or a root checkpoint, or at least one partition dir."""
    path = Path(path)
    if not path.is_dir():
        return False
    if any((path / name).is_file() for name in (META_PROPERTIES, *OFFSET_CHECKPOINTS)):
        return True
    return any(is_partition_dir(child) for child in path.iterdir())


def holds_log_dir_metadata(path: str | os.PathLike[str]) -> bool:
    """A broker's log dir by its own files (meta.properties or an offset checkpoint), not merely by holding
    directories named like partitions: where a tool may write a log dir's checkpoint files."""
    path = Path(path)
    return any((path / name).is_file() for name in (META_PROPERTIES, *OFFSET_CHECKPOINTS))


def special_file_reason(mode: int) -> str:
    """Why an entry of this ``st_mode`` is not read: only regular files hold Kafka data."""
    kind = "FIFO" if stat.S_ISFIFO(mode) else "socket" if stat.S_ISSOCK(mode) else "device" \
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "directory" if stat.S_ISDIR(mode) else "special file"
    return f"a {kind}, not a regular file"


def open_regular(path: str | os.PathLike[str]) -> int:
    """A read-only descriptor of ``path``, refusing anything but a regular file (InputError).

    Opened non-blocking, so a FIFO named like a segment is refused at once instead of blocking the reader until
    some process writes to it; the flag is cleared again for the regular file (where it changes nothing)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"cannot open: {exc.strerror or exc}", path=str(path)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InputError(special_file_reason(mode), path=str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_atomically(path: str | os.PathLike[str], data: bytes, *, sync: bool = True) -> None:
    """Kafka's checkpoint write: `<path>.tmp`, fsync, rename over `path`, fsync the directory. Without ``sync``
    the two fsyncs are left to the caller (a roll, or many files made durable at once)."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        if sync:
            os.fsync(out.fileno())
    os.replace(tmp, path)
    if sync:
        fsync_dir(path.parent)


def fsync_path(path: str | os.PathLike[str]) -> None:
    """fsync a file or a directory by its path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make a rename durable (Kafka `Utils.flushDir`); a no-op where directories cannot be opened."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
