"""LogManager: the broker's partitions under log.dirs (Kafka's LogManager, one broker, no replication).

Owns the ``.lock`` of each log dir, ``meta.properties``, partition directories named ``<topic>-<n>``,
startup recovery after an unclean stop, the root checkpoint files and the clean-shutdown marker.
Synchronous; the asyncio server calls it from its event loop (appends land in the page cache) and
pushes fsyncs to a thread.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kcli.errors import KcliError
from kcli.storage.checkpoint import (
    MetaProperties,
    OffsetCheckpointFile,
    read_clean_shutdown,
    read_meta_properties,
    read_partition_metadata,
    write_clean_shutdown,
    write_meta_properties,
    write_partition_metadata,
)
from kcli.storage.files import (
    CLEAN_SHUTDOWN,
    DELETE_DIR_SUFFIX,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    parse_partition_dir_name,
)
from kcli.storage.log import LogConfig, PartitionLog
from kcli.storage.reader import PartitionReader
from kcli.storage.segment import FileBatchReader

log = logging.getLogger("kcli.broker")

MAX_TOPIC_NAME = 249  # Kafka's Topic.MAX_NAME_LENGTH: leaves room for "-<partition>" and ".<uuid>-delete"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")


class TopicError(KcliError):
    """A topic name or partition count Kafka would refuse (INVALID_TOPIC_EXCEPTION and friends)."""


class LogDirLockedError(KcliError):
    """Another process holds a log dir's .lock: two brokers must never share a log dir."""


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: this is what keeps a request from naming a path outside log.dirs."""
    if not name:
        raise TopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise TopicError("Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME:
        raise TopicError(f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters, topic name: {name}")
    if not _LEGAL_TOPIC.match(name):
        raise TopicError(f"Topic name \"{name}\" is illegal, it contains a character other than ASCII alphanumerics, "
                         "'.', '_' and '-'")


@dataclass
class Partition:
    topic: str
    index: int
    log: PartitionLog
    lock: threading.Lock = field(default_factory=threading.Lock)
    unflushed_messages: int = 0
    last_flush: float = field(default_factory=time.monotonic)

    @property
    def directory(self) -> Path:
        return self.log.directory

    def reader(self) -> PartitionReader:
        return PartitionReader(self.directory, list(self.log.segments), self.log.log_end_offset)


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[Partition]


class LogManager:
    def __init__(self, log_dirs: list[Path], *, broker_id: int, log_config: LogConfig,
                 flush_interval_messages: int | None = None, flush_interval_ms: int | None = None,
                 roll_ms: int | None = None, cleanup_policy: str = "delete") -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self.broker_id = broker_id
        self.log_config = log_config
        self.flush_interval_messages = flush_interval_messages
        self.flush_interval_ms = flush_interval_ms
        self.roll_ms = roll_ms
        self.cleanup_policy = cleanup_policy  # log.cleanup.policy: retention deletes only under "delete"
        self._pending_deletes: list[tuple[float, Path]] = []
        self.topics: dict[str, Topic] = {}
        self.cluster_id: str | None = None
        self._locks: list[int] = []
        self.recovered: list[str] = []  # what startup recovery did, for the log

    # -- startup / shutdown ------------------------------------------------------------------------
    def startup(self) -> None:
        for directory in self.log_dirs:
            directory.mkdir(parents=True, exist_ok=True)
            self._lock(directory)
            self._meta(directory)
        for directory in self.log_dirs:
            clean = read_clean_shutdown(directory / CLEAN_SHUTDOWN) is not None
            # Kafka deletes the marker at startup, so a crash while loading counts as unclean.
            (directory / CLEAN_SHUTDOWN).unlink(missing_ok=True)
            for child in sorted(directory.iterdir()):
                if child.is_dir() and child.name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(child, ignore_errors=True)  # a delete the last run did not finish
                    continue
                parsed = parse_partition_dir_name(child.name) if child.is_dir() else None
                if parsed is None:
                    continue
                self._load_partition(child, parsed[0], parsed[1], recover=not clean)

    def _lock(self, directory: Path) -> None:
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise LogDirLockedError(f"another broker or tool holds {directory / LOCK_FILE}: a log dir serves one "
                                    "process at a time", path=str(directory)) from None
        self._locks.append(fd)

    def _meta(self, directory: Path) -> None:
        path = directory / META_PROPERTIES
        if path.exists():
            meta = read_meta_properties(path)
            if meta.node_id != self.broker_id:
                raise KcliError(f"meta.properties says broker.id {meta.node_id}, but this broker is "
                                f"{self.broker_id}: refusing to serve another broker's data", path=str(path))
            if self.cluster_id and meta.cluster_id and meta.cluster_id != self.cluster_id:
                raise KcliError(f"The Cluster ID {self.cluster_id} doesn't match stored clusterId {meta.cluster_id} in "
                                "meta.properties: this log dir belongs to another cluster", path=str(path))
            self.cluster_id = self.cluster_id or meta.cluster_id
        else:
            self.cluster_id = self.cluster_id or _new_cluster_id()
            write_meta_properties(path, MetaProperties(0, self.broker_id, self.cluster_id))

    def _load_partition(self, directory: Path, topic: str, index: int, *, recover: bool) -> None:
        before = _log_end_from_disk(directory) if recover else None
        partition_log = PartitionLog.open(directory, config=self.log_config, recover=recover)
        if recover and before is not None and before != partition_log.log_end_offset:
            self.recovered.append(f"{directory.name}: log end offset {before} -> {partition_log.log_end_offset}")
        meta_path = directory / PARTITION_METADATA
        topic_id = read_partition_metadata(meta_path).topic_id if meta_path.exists() else uuid.uuid4()
        entry = self.topics.setdefault(topic, Topic(topic, topic_id, []))
        entry.partitions.append(Partition(topic, index, partition_log))
        entry.partitions.sort(key=lambda p: p.index)

    def shutdown(self) -> None:
        """Clean shutdown: close every log (final index entries, snapshots), checkpoints, then the marker."""
        self.purge_deleted(force=True)
        for topic in self.topics.values():
            for partition in topic.partitions:
                with partition.lock:
                    partition.log.close()
        self.write_checkpoints()
        for directory in self.log_dirs:
            write_clean_shutdown(directory / CLEAN_SHUTDOWN)
        for fd in self._locks:
            os.close(fd)
        self._locks.clear()

    def write_checkpoints(self) -> None:
        for directory in self.log_dirs:
            ends = {}
            starts = {}
            for topic in self.topics.values():
                for p in topic.partitions:
                    if p.directory.parent == directory:
                        ends[(p.topic, p.index)] = p.log.log_end_offset
                        starts[(p.topic, p.index)] = p.log.log_start_offset
            for name in (RECOVERY_POINT_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT):
                OffsetCheckpointFile(directory / name).write_offsets(ends)
            OffsetCheckpointFile(directory / LOG_START_OFFSET_CHECKPOINT).write_offsets(starts)

    # -- topics ------------------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int) -> Topic:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError(f"Topic '{name}' already exists.")
        if partitions < 1:
            raise TopicError(f"Number of partitions must be larger than 0, got {partitions}")
        topic = Topic(name, uuid.uuid4(), [])
        self.topics[name] = topic
        self.add_partitions(name, partitions)
        return topic

    def add_partitions(self, name: str, total: int) -> None:
        topic = self.topics[name]
        if total <= len(topic.partitions):
            raise TopicError(f"Topic currently has {len(topic.partitions)} partitions, {total} would not be an increase.")
        for index in range(len(topic.partitions), total):
            directory = self._least_loaded_dir() / f"{name}-{index}"
            partition_log = PartitionLog(directory, config=self.log_config, topic_id=topic.topic_id)
            write_partition_metadata(directory / PARTITION_METADATA, topic.topic_id)
            topic.partitions.append(Partition(name, index, partition_log))

    def delete_topic(self, name: str) -> None:
        topic = self.topics.pop(name)
        for p in topic.partitions:
            with p.lock:
                p.log.close()
                # Kafka renames to <tp>.<uuid>-delete first, so a crash mid-delete is finished at startup.
                target = p.directory.with_name(f"{p.directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
                p.directory.rename(target)
                shutil.rmtree(target, ignore_errors=True)

    def _least_loaded_dir(self) -> Path:
        counts = {d: 0 for d in self.log_dirs}
        for topic in self.topics.values():
            for p in topic.partitions:
                if p.directory.parent in counts:
                    counts[p.directory.parent] += 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def partition(self, topic: str, index: int) -> Partition | None:
        entry = self.topics.get(topic)
        if entry is None or not 0 <= index < len(entry.partitions):
            return None
        return entry.partitions[index]

    # -- data --------------------------------------------------------------------------------------
    def append(self, partition: Partition, records: bytes) -> tuple[int, int]:
        """Append a producer's record set as given (offsets already assigned by the caller): returns
        (base offset, records appended). Flushes per log.flush.interval.messages/ms."""
        with partition.lock:
            base = partition.log.log_end_offset
            segment = partition.log.segment
            # log.roll.ms: a segment whose first batch is older than the limit is rolled before the append.
            if self.roll_ms is not None and segment.size > 0 and segment.first_timestamp is not None and \
                    time.time() * 1000 - segment.first_timestamp > self.roll_ms:
                partition.log.roll()
            partition.log.append_raw(records)
            appended = partition.log.log_end_offset - base
            partition.log.flush_to_os()
            partition.unflushed_messages += appended
            if self._flush_due(partition):
                partition.log.fsync()
                partition.unflushed_messages = 0
                partition.last_flush = time.monotonic()
        return base, appended

    def enforce_retention(self, retention_ms: int, retention_bytes: int, delete_delay_ms: int) -> list[str]:
        """Kafka's retention: delete whole segments (never the active one) whose largest timestamp is older
        than retention.ms, then the oldest while the log exceeds retention.bytes; files go to ``.deleted``
        and are removed ``delete_delay_ms`` later. Returns a description of what was scheduled."""
        done = []
        now_ms = time.time() * 1000
        for topic in list(self.topics.values()):
            # __consumer_offsets is always compacted (Kafka creates it with cleanup.policy=compact).
            if "delete" not in self.cleanup_policy or topic.name == "__consumer_offsets":
                continue
            for p in topic.partitions:
                with p.lock:
                    log_ = p.log
                    while len(log_.segments) > 1:
                        size, largest = log_.segment_stats(log_.segments[0])
                        total = sum(log_.segment_stats(b)[0] for b in log_.segments)
                        expired = retention_ms >= 0 and now_ms - largest > retention_ms
                        too_big = retention_bytes >= 0 and total - size >= retention_bytes
                        if not (expired or too_big):
                            break
                        base = log_.segments[0]
                        renamed = log_.delete_oldest_segment()
                        due = time.monotonic() + delete_delay_ms / 1000
                        self._pending_deletes.extend((due, path) for path in renamed)
                        done.append(f"{p.directory.name}: segment {base} ({'time' if expired else 'size'}), "
                                    f"log start now {log_.log_start_offset}")
        return done

    def compact_offsets_topic(self) -> list[str]:
        """Kafka's log cleaner for ``__consumer_offsets`` (cleanup.policy=compact): the inactive segments
        keep only the latest commit per key. Runs on the event loop, so no Fetch reads a segment mid-swap."""
        from kcli.storage.cleaner import CleanerConfig, apply_compaction, plan_compaction

        topic = self.topics.get("__consumer_offsets")
        done: list[str] = []
        if topic is None:
            return done
        config = CleanerConfig(segment_bytes=self.log_config.segment_bytes,
                               index_interval_bytes=self.log_config.index_interval_bytes,
                               segment_index_bytes=self.log_config.segment_index_bytes)
        for p in topic.partitions:
            if len(p.log.segments) < 2:
                continue  # the active segment is never cleaned
            with p.lock:
                plan = plan_compaction(p.directory, now_ms=int(time.time() * 1000), config=config)
                if not plan.changed_groups:
                    continue
                apply_compaction(plan)
                p.log.segments = sorted(int(f.name.split(".")[0]) for f in p.directory.glob("*.log"))
                done.append(f"{p.directory.name}: {plan.total('bytes_before')} -> {plan.total('bytes_after')} bytes")
        return done

    def purge_deleted(self, *, force: bool = False) -> None:
        """Remove ``.deleted`` files whose delay has passed (log.segment.delete.delay.ms)."""
        now = time.monotonic()
        keep = []
        for due, path in self._pending_deletes:
            if force or due <= now:
                path.unlink(missing_ok=True)
            else:
                keep.append((due, path))
        self._pending_deletes = keep

    def flush_if_due(self) -> None:
        """log.flush.interval.ms for partitions that saw no append since their last flush."""
        if self.flush_interval_ms is None:
            return
        for topic in self.topics.values():
            for p in topic.partitions:
                if p.unflushed_messages and self._flush_due(p):
                    with p.lock:
                        p.log.fsync()
                        p.unflushed_messages = 0
                        p.last_flush = time.monotonic()

    def _flush_due(self, partition: Partition) -> bool:
        if self.flush_interval_messages is not None and partition.unflushed_messages >= self.flush_interval_messages:
            return True
        if self.flush_interval_ms is not None:
            return (time.monotonic() - partition.last_flush) * 1000 >= self.flush_interval_ms
        return False


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def _log_end_from_disk(directory: Path) -> int | None:
    """The log end offset as the files say before recovery (for the startup log line)."""
    logs = sorted(directory.glob("*.log"))
    if not logs:
        return None
    end = None
    try:
        for batch in FileBatchReader(logs[-1]):
            end = batch.last_offset + 1
    except KcliError:
        pass
    return end
