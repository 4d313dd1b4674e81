"""LogManager: the logs under log.dirs (Kafka's LogManager).

Owns the ``.lock`` of each log dir, ``meta.properties``, partition directories named ``<topic>-<n>``,
startup recovery after an unclean stop, the root checkpoint files, the clean-shutdown marker, and the
background work on logs: retention, the cleaner, flushes. Synchronous and thread-safe per log: the broker
calls appends from its event loop (they land in the page cache) and runs fsyncs, retention and cleaning in
worker threads, each log guarded by its own lock (held only for short, in-memory-speed steps).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcli.errors import InputError, KcliError
from kcli.storage.checkpoint import (
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    read_clean_shutdown,
    read_meta_properties,
    write_clean_shutdown,
    write_meta_properties,
    write_partition_metadata,
)
from kcli.storage.files import (
    CLEAN_SHUTDOWN,
    DELETE_DIR_SUFFIX,
    FUTURE_DIR_SUFFIX,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    fsync_dir,
    fsync_path,
    parse_partition_dir_name,
)
from kcli.storage.loader import LogDirCheckpoints
from kcli.storage.log import LogAppendInfo, LogConfig, PartitionLog
from kcli.storage.log_config import LONG_MAX
from kcli.storage.producer_state import AppendOrigin
from kcli.storage.recovery import ActionKind, QuarantineRun, RecoveryAction, RecoveryResult
from kcli.storage.validator import validate_records

log = logging.getLogger("kcli.broker")

MAX_TOPIC_NAME = 249  # Kafka's Topic.MAX_NAME_LENGTH: leaves room for "-<partition>" and ".<uuid>-delete"
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
SYNC_THREADS = 4  # fsyncs at once when many new files must be made durable (sync_files)


class TopicError(KcliError):
    """A topic name or partition count Kafka would refuse (INVALID_TOPIC_EXCEPTION and friends)."""

    error_code = "INVALID_TOPIC_EXCEPTION"


class LogDirError(KcliError):
    """A log dir refused file work (Kafka's KafkaStorageException: KAFKA_STORAGE_ERROR)."""

    error_code = "KAFKA_STORAGE_ERROR"


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
class ManagedLog:
    """One partition's log as the LogManager keeps it: the log, its lock and its flush bookkeeping."""

    topic: str
    index: int
    log: PartitionLog
    lock: threading.Lock = field(default_factory=threading.Lock)
    unflushed_messages: int = 0
    last_flush: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.log.leader_epochs.flush_on_change = True  # leader-epoch-checkpoint current on disk at every change
        self.log.sync_roll = False  # a roll must not fsync on the request path: flush() does it, in a thread

    @property
    def directory(self) -> Path:
        return self.log.directory


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[ManagedLog]


class LogManager:
    def __init__(self, log_dirs: list[Path], *, broker_id: int, log_config: LogConfig,
                 high_watermarks: Any = None) -> None:
        self.log_dirs = [Path(d) for d in log_dirs]
        self.broker_id = broker_id
        # The broker's defaults; each log gets its topic's LogConfig (TopicAdmin: replace_config).
        self.log_config = log_config
        self._pending_deletes: list[tuple[float, Path]] = []
        self._deletes_lock = threading.Lock()
        self.topics: dict[str, Topic] = {}
        self.cluster_id: str | None = None
        self._locks: list[int] = []
        self.recoveries: list[QuarantineRun] = []  # startup recovery: one run per log dir that needed one
        # replication-offset-checkpoint: each partition's high watermark, from the ReplicaManager (cluster
        # mode); standalone, the log end offset is the high watermark.
        self.high_watermarks: Any = high_watermarks  # () -> dict[(topic, index), int]
        self.checkpointed_high_watermarks: dict[tuple[str, int], int] = {}
        self._checkpoint_lock = threading.Lock()  # the root checkpoint files: one writer at a time
        self._topics_lock = threading.RLock()  # Kafka's logCreationOrDeletionLock: `topics` and the counts below
        self._creation_done = threading.Condition(self._topics_lock)
        self._creating: set[tuple[str, int]] = set()  # partitions whose logs a worker thread is creating
        # Kafka's nextLogDirs picks the dir with the fewest partitions: counted as logs come and go, since a
        # scan of every partition per new one made creation slow with thousands present
        self._dir_counts: dict[Path, int] = {d: 0 for d in self.log_dirs}
        self._pool: ThreadPoolExecutor | None = None
        # KIP-113: a replica being moved to another log dir has a future log there (`<topic>-<p>.<uuid>-future`),
        # copied from the current one by kcli.broker.alter_log_dirs and swapped in once caught up; the log dir
        # asked for a replica not hosted yet is remembered for its creation (Kafka's futureLogs, preferredLogDirs)
        self.future_logs: dict[tuple[str, int], ManagedLog] = {}
        self.preferred_log_dirs: dict[tuple[str, int], Path] = {}
        self._future_creation = threading.Lock()  # one future log per partition, whoever asks at once

    # -- startup / shutdown ------------------------------------------------------------------------
    def startup(self, cluster_id: str | None = None) -> None:
        """Lock and load the log dirs. ``cluster_id``: ZooKeeper's (/cluster/id), which meta.properties must agree
        with; None: the log dirs' own, or a new one."""
        if cluster_id is not None:
            self.cluster_id = cluster_id
        for directory in self.log_dirs:
            try:
                directory.mkdir(parents=True, exist_ok=True)
                self._lock(directory)
                self._meta(directory)
            except (FileExistsError, NotADirectoryError):
                raise InputError("log dir is not a directory", path=str(directory)) from None
            except OSError as exc:  # permission denied, read-only filesystem: exit 3, naming the log dir
                raise InputError(f"log dir cannot be used: {exc.strerror or exc}", path=str(directory)) from None
        for directory in self.log_dirs:
            if not (directory / REPLICATION_OFFSET_CHECKPOINT).exists():
                continue
            try:
                self.checkpointed_high_watermarks.update(
                    OffsetCheckpointFile(directory / REPLICATION_OFFSET_CHECKPOINT).read_offsets())
            except (OSError, ValueError, KcliError) as exc:
                log.warning("ignoring %s: %s", directory / REPLICATION_OFFSET_CHECKPOINT, exc)
        for directory in self.log_dirs:
            clean = read_clean_shutdown(directory / CLEAN_SHUTDOWN) is not None
            # Kafka deletes the marker at startup, so a crash while loading counts as unclean.
            (directory / CLEAN_SHUTDOWN).unlink(missing_ok=True)
            # One restart, one quarantine run per log dir (`kctl recover --restore <run>` undoes it whole);
            # nothing is written there unless a partition needs repairs.
            run = QuarantineRun.beside(directory)
            # Read once for every partition: after an unclean stop each recovers from its recovery point on.
            checkpoints = LogDirCheckpoints.read(directory)
            for child in sorted(directory.iterdir()):
                if child.is_dir() and child.name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(child, ignore_errors=True)  # a delete the last run did not finish
                    continue
                parsed = parse_partition_dir_name(child.name) if child.is_dir() else None
                if parsed is None:
                    continue
                if child.name.endswith(FUTURE_DIR_SUFFIX):  # a move between log dirs: it resumes (Kafka's loadLog)
                    self._load_future(child, parsed[0], parsed[1], recover=not clean, quarantine=run,
                                      checkpoints=checkpoints)
                    continue
                self._load_partition(child, parsed[0], parsed[1], recover=not clean, quarantine=run,
                                     checkpoints=checkpoints)
            if run.results:
                self.recoveries.append(run)
        for tp in [tp for tp in self.future_logs if self.partition(*tp) is None]:
            self._promote_orphan_future(tp)

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

    def _load_partition(self, directory: Path, topic: str, index: int, *, recover: bool,
                        quarantine: QuarantineRun, checkpoints: LogDirCheckpoints | None = None) -> None:
        partition_log = PartitionLog.open(directory, config=self.log_config, recover=recover, quarantine=quarantine,
                                          checkpoints=checkpoints)
        entry = self.topics.get(topic)
        if entry is None:
            entry = self.topics[topic] = Topic(topic, partition_log.topic_id or uuid.uuid4(), [])
        partitions = entry.partitions
        partitions.append(ManagedLog(topic, index, partition_log))
        if len(partitions) > 1 and partitions[-2].index > index:
            partitions.sort(key=lambda p: p.index)
        self._dir_counts[directory.parent] += 1

    def _load_future(self, directory: Path, topic: str, index: int, *, recover: bool, quarantine: QuarantineRun,
                     checkpoints: LogDirCheckpoints | None) -> None:
        if (topic, index) in self.future_logs:  # Kafka refuses to start with two future logs of one partition
            raise KcliError(f"Duplicate future log directories for {topic}-{index}: "
                            f"{self.future_logs[(topic, index)].directory} and {directory}", path=str(directory))
        partition_log = PartitionLog.open(directory, config=self.log_config, recover=recover, quarantine=quarantine,
                                          checkpoints=checkpoints)
        self.future_logs[(topic, index)] = _future(ManagedLog(topic, index, partition_log))
        self._dir_counts[directory.parent] += 1

    def _promote_orphan_future(self, tp: tuple[str, int]) -> None:
        """A future log without a current one: a swap renamed the current log `-delete` (removed above) and stopped
        before renaming the future; the future log was closed, so complete, before the renames: it is the log."""
        future = self.future_logs.pop(tp)
        target = future.directory.with_name(f"{tp[0]}-{tp[1]}")
        log.warning("%s: the move between log dirs was interrupted after the old log was let go; %s is the log now",
                    future.directory, target)
        future.log.close_handlers()
        future.directory.rename(target)
        fsync_dir(target.parent)
        self._dir_counts[target.parent] -= 1
        self._load_partition(target, tp[0], tp[1], recover=False, quarantine=QuarantineRun.beside(target.parent))

    def shutdown(self) -> None:
        """Clean shutdown: close every log (final index entries, snapshots), checkpoints, then the marker."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        self.purge_deleted(force=True)
        for partition in [*self.all_partitions(), *list(self.future_logs.values())]:
            with partition.lock:
                partition.log.close()
        self.write_checkpoints()
        for directory in self.log_dirs:
            write_clean_shutdown(directory / CLEAN_SHUTDOWN)
        for fd in self._locks:
            os.close(fd)
        self._locks.clear()

    def write_checkpoints(self) -> None:
        """The root checkpoints of every log dir: recovery points (each log's flushed offset, what a restart
        after a crash recovers from; the log end after a clean close), high watermarks, log start offsets."""
        watermarks = self.high_watermarks() if self.high_watermarks is not None else None
        with self._checkpoint_lock:
            for directory in self.log_dirs:
                ends = {}
                points = {}
                starts = {}
                for topic in list(self.topics.values()):
                    for p in list(topic.partitions):
                        if p.directory.parent == directory:
                            ends[(p.topic, p.index)] = p.log.log_end_offset
                            points[(p.topic, p.index)] = p.log.recovery_point
                            starts[(p.topic, p.index)] = p.log.log_start_offset
                hws = ends if watermarks is None else {tp: watermarks.get(tp, 0) for tp in ends}
                for p in list(self.future_logs.values()):  # a future log's dir holds no current log of it (Kafka's)
                    if p.directory.parent == directory:
                        points[(p.topic, p.index)] = p.log.recovery_point
                        starts[(p.topic, p.index)] = p.log.log_start_offset
                OffsetCheckpointFile(directory / RECOVERY_POINT_CHECKPOINT).write_offsets(points)
                OffsetCheckpointFile(directory / REPLICATION_OFFSET_CHECKPOINT).write_offsets(hws)
                OffsetCheckpointFile(directory / LOG_START_OFFSET_CHECKPOINT).write_offsets(starts)

    def write_recovery_points(self, directory: Path) -> None:
        """recovery-point-offset-checkpoint of one log dir now (Kafka checkpoints it after a truncation: a
        lowered recovery point must be on disk before data rewritten below the old one is)."""
        with self._checkpoint_lock:
            points = {(p.topic, p.index): p.log.recovery_point for topic in list(self.topics.values())
                      for p in list(topic.partitions) if p.directory.parent == directory}
            points.update({(p.topic, p.index): p.log.recovery_point for p in list(self.future_logs.values())
                           if p.directory.parent == directory})
            OffsetCheckpointFile(directory / RECOVERY_POINT_CHECKPOINT).write_offsets(points)

    # -- topics ------------------------------------------------------------------------------------
    # Creation and deletion do file work (directories, files, fsyncs), so the broker runs them in worker
    # threads (TopicAdmin.off_loop), never on its event loop; they take `_topics_lock` (Kafka's
    # logCreationOrDeletionLock) only for the in-memory steps. `topics` and each Topic's partition list are
    # replaced, never changed in place, so a reader's `list(...)` or reference stays a consistent snapshot.
    def create_topic(self, name: str, partitions: int, config: LogConfig | None = None,
                     topic_id: uuid.UUID | None = None) -> Topic:
        """A new topic's logs, every partition hosted here (standalone). Blocking: the broker's requests call it
        from a worker thread (internal topics created on first use, inline)."""
        validate_topic_name(name)
        if partitions < 1:
            raise TopicError(f"Number of partitions must be larger than 0, got {partitions}")
        topic = Topic(name, topic_id or uuid.uuid4(), [])
        with self._topics_lock:
            if name in self.topics or any(t == name for t, _ in self._creating):
                raise TopicError(f"Topic '{name}' already exists.")
            wanted = [(name, i) for i in range(partitions)]
            self._creating.update(wanted)
        try:
            created = self._create_logs(topic, wanted, config or self.log_config)
            with self._topics_lock:
                topic.partitions = created
                self.topics = {**self.topics, name: topic}
        finally:
            self._created(wanted)
        return topic

    def add_partitions(self, name: str, total: int, config: LogConfig | None = None) -> list[ManagedLog]:
        """CreatePartitions standalone: the logs of partitions ``len(partitions)`` to ``total - 1``. Blocking."""
        with self._topics_lock:
            topic = self.topics[name]
            current = len(topic.partitions)
            if total <= current:
                raise TopicError(f"Topic currently has {current} partitions, {total} would not be an increase.")
            wanted = [(name, i) for i in range(current, total)]
            if any(tp in self._creating for tp in wanted):
                raise TopicError(f"partitions of topic '{name}' are being created")
            self._creating.update(wanted)
        try:
            created = self._create_logs(topic, wanted, config or self.log_config)
            with self._topics_lock:
                topic.partitions = sorted(topic.partitions + created, key=lambda p: p.index)
        finally:
            self._created(wanted)
        return created

    def get_or_create_log(self, name: str, index: int, topic_id: uuid.UUID, config: LogConfig) -> ManagedLog:
        """A replica this broker was told to host (LeaderAndIsr): its log, created empty if absent."""
        return self.get_or_create_logs([(name, index)], {name: topic_id}, lambda _: config)[(name, index)]

    def get_or_create_logs(self, wanted: list[tuple[str, int]], topic_ids: dict[str, uuid.UUID],
                           config_of: Any) -> dict[tuple[str, int], ManagedLog]:
        """The logs of these replicas, those absent created empty (Kafka's getOrCreateLog as makeLeaders /
        makeFollowers meet new partitions). ``config_of(topic)`` gives a topic's LogConfig. Blocking: call it
        from a worker thread. A partition another thread is creating is waited for."""
        for name in {t for t, _ in wanted}:
            validate_topic_name(name)
        with self._creation_done:
            while any(tp in self._creating for tp in wanted):
                self._creation_done.wait()
            missing = [tp for tp in dict.fromkeys(wanted) if self.partition(*tp) is None]
            self._creating.update(missing)
        try:
            by_topic: dict[str, list[tuple[str, int]]] = {}
            for tp in missing:
                by_topic.setdefault(tp[0], []).append(tp)
            for name, tps in by_topic.items():
                existing = self.topics.get(name)
                topic = existing if existing is not None else Topic(name, topic_ids.get(name) or uuid.uuid4(), [])
                created = self._create_logs(topic, tps, config_of(name))
                with self._topics_lock:
                    current = self.topics.get(name)
                    if current is None:
                        topic.partitions = sorted(created, key=lambda p: p.index)
                        self.topics = {**self.topics, name: topic}
                    else:
                        current.partitions = sorted(current.partitions + created, key=lambda p: p.index)
        finally:
            self._created(missing)
        return {tp: managed for tp in wanted if (managed := self.partition(*tp)) is not None}

    def _created(self, done: list[tuple[str, int]]) -> None:
        with self._creation_done:
            self._creating.difference_update(done)
            self._creation_done.notify_all()

    def _create_logs(self, topic: Topic, wanted: list[tuple[str, int]], config: LogConfig) -> list[ManagedLog]:
        """Create these partitions' logs, each in the log dir with the fewest partitions, one after the other
        in this thread; then make their partition.metadata files durable together (sync_files). If one fails,
        those created are deleted again and KAFKA_STORAGE_ERROR is raised.

        Only the fsyncs run in parallel: every thread of this process that runs Python competes with the
        event loop for the GIL, and with several creating logs at once the event loop waited for it on most
        of its socket writes (a produce's p50 went from 3 to 170 ms)."""
        dirs = [self._log_dir_for(tp) for tp in wanted]
        created: list[ManagedLog] = []
        failure: tuple[tuple[str, int], Path, BaseException] | None = None
        for tp, log_dir in zip(wanted, dirs):
            directory = log_dir / f"{tp[0]}-{tp[1]}"
            try:
                if directory.exists():  # a leftover Kafka would refuse too (its log dir failure)
                    raise FileExistsError(errno.EEXIST, "a partition directory is already there", str(directory))
                partition_log = PartitionLog(directory, config=config, topic_id=topic.topic_id)
                created.append(ManagedLog(tp[0], tp[1], partition_log))
                write_partition_metadata(directory / PARTITION_METADATA, topic.topic_id, sync=False)
            except Exception as exc:
                failure = (tp, log_dir, exc)
                break
        if failure is None:
            try:
                self.sync_files([p for m in created for p in (m.directory / PARTITION_METADATA, m.directory)])
            except OSError as exc:
                failure = (wanted[0], dirs[0], exc)
        if failure is None:
            return created
        with self._topics_lock:
            for d in dirs[len(created):]:
                self._dir_counts[d] -= 1
        self._delete_logs(created, self.file_delete_delay_ms)
        (name, index), log_dir, error = failure
        log.error("creating the log of %s-%d in %s failed: %s", name, index, log_dir, error)
        raise LogDirError(f"creating the log of {name}-{index} in {log_dir} failed: {error}",
                          path=str(log_dir)) from error

    def sync_files(self, paths: list[Path]) -> None:
        """fsync these files and directories, several at a time (concurrent fsyncs share the file system's
        journal commits: one at a time, 100 new partitions took ~10x longer on ext4). Blocking."""
        if len(paths) <= 2:
            for path in paths:
                fsync_path(path)
            return
        for future in [self._sync_pool().submit(fsync_path, path) for path in paths]:
            future.result()

    def _sync_pool(self) -> ThreadPoolExecutor:
        with self._topics_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(SYNC_THREADS, thread_name_prefix="kcli-log-sync")
            return self._pool

    def next_log_dir(self) -> Path:
        """Kafka's LogManager.nextLogDirs: the log dir with the fewest partitions (the first of equals), from
        the counts kept per dir, not a scan of every partition; the new partition is counted at once."""
        with self._topics_lock:
            chosen = min(self.log_dirs, key=self._dir_counts.__getitem__)
            self._dir_counts[chosen] += 1
            return chosen

    def _log_dir_for(self, tp: tuple[str, int]) -> Path:
        """The log dir an AlterReplicaLogDirs named for this replica before it was hosted here (used once, as
        Kafka's preferredLogDirs), else nextLogDirs'."""
        with self._topics_lock:
            preferred = self.preferred_log_dirs.pop(tp, None)
            if preferred is None or preferred not in self._dir_counts:
                return self.next_log_dir()
            self._dir_counts[preferred] += 1
            return preferred

    def partition_counts(self) -> dict[Path, int]:
        """Partitions per log dir, those being created included."""
        with self._topics_lock:
            return dict(self._dir_counts)

    @property
    def file_delete_delay_ms(self) -> int:
        """log.segment.delete.delay.ms: how long a deleted log waits, renamed, before its files go."""
        return self.log_config.file_delete_delay_ms

    def delete_partition(self, name: str, index: int) -> None:
        """StopReplica with delete: the log goes (Kafka's asyncDelete). Blocking: a worker thread's work."""
        self.delete_partitions([(name, index)])

    def delete_partitions(self, partitions: list[tuple[str, int]]) -> None:
        """The logs of these partitions leave `topics` at once; each is closed without a flush, renamed to
        `<topic>-<p>.<uuid>-delete` and removed log.segment.delete.delay.ms later (purge_deleted; startup
        removes any left over). Blocking: a worker thread's work."""
        removed = []
        with self._creation_done:
            while any(tp in self._creating for tp in partitions):
                self._creation_done.wait()
            topics = dict(self.topics)
            for name, index in partitions:
                topic = topics.get(name)
                managed = next((p for p in topic.partitions if p.index == index), None) if topic else None
                if topic is None or managed is None:
                    continue
                topic.partitions = [p for p in topic.partitions if p is not managed]
                if not topic.partitions:
                    del topics[name]
                removed.append(managed)
            self.topics = topics
        self._delete_futures(partitions)
        self._delete_logs(removed, self.file_delete_delay_ms)

    def delete_topic(self, name: str) -> None:
        """DeleteTopics standalone: every log of the topic, as delete_partitions. Blocking."""
        with self._creation_done:
            while any(t == name for t, _ in self._creating):  # a CreatePartitions of it: its logs go too
                self._creation_done.wait()
            topics = dict(self.topics)
            topic = topics.pop(name)
            self.topics = topics
        self._delete_futures([(name, p.index) for p in topic.partitions])
        self._delete_logs(topic.partitions, self.file_delete_delay_ms)

    def _delete_logs(self, logs: list[ManagedLog], delay_ms: int) -> None:
        renamed = []
        try:
            for p in logs:
                with p.lock:
                    p.log.close_handlers()
                    # Kafka renames first, so a crash mid-delete is finished at startup (LocalLog.logDeleteDirName).
                    target = p.directory.with_name(delete_dir_name(p.topic, p.index))
                    p.directory.rename(target)
                    p.log.directory = target
                renamed.append(target)
        finally:
            with self._topics_lock:
                for p in logs:
                    parent = p.directory.parent
                    if parent in self._dir_counts:
                        self._dir_counts[parent] -= 1
            self._schedule_delete(renamed, delay_ms)

    # -- moves between log dirs (KIP-113) ---------------------------------------------------------------
    # Lock order: a future log's lock before its current log's, never the other way round (appends take only the
    # current's; the mover in kcli.broker.alter_log_dirs takes both to swap).
    def future_log(self, topic: str, index: int) -> ManagedLog | None:
        return self.future_logs.get((topic, index))

    def log_dir_of(self, path: str) -> Path | None:
        """The configured log dir an absolute path names (Kafka compares getAbsolutePath; symlinks resolved too)."""
        wanted = os.path.normpath(path)
        for directory in self.log_dirs:
            if wanted in (str(directory.absolute()), str(directory.resolve()), os.path.normpath(directory)):
                return directory
        return None

    def maybe_update_preferred_log_dir(self, topic: str, index: int, log_dir: Path) -> None:
        """Kafka's maybeUpdatePreferredLogDir: remembered unless the current or future log is there already."""
        for managed in (self.partition(topic, index), self.future_logs.get((topic, index))):
            if managed is not None and managed.directory.parent == log_dir:
                return
        with self._topics_lock:
            self.preferred_log_dirs[(topic, index)] = log_dir

    def create_future_log(self, topic: str, index: int, log_dir: Path) -> ManagedLog:
        """An empty future log of a hosted replica in ``log_dir`` (Kafka's getOrCreateLog(isFuture = true)),
        starting at the current log's start offset; its topic id and config are the current log's. Blocking."""
        with self._future_creation:
            return self._create_future_log(topic, index, log_dir)

    def _create_future_log(self, topic: str, index: int, log_dir: Path) -> ManagedLog:
        current = self.partition(topic, index)
        if current is None:
            raise LogDirError(f"the current log of {topic}-{index} is offline")
        with self._topics_lock:
            self.preferred_log_dirs.pop((topic, index), None)
            if (topic, index) in self.future_logs:
                return self.future_logs[(topic, index)]
            self._dir_counts[log_dir] += 1
        directory = log_dir / future_dir_name(topic, index)
        try:
            with current.lock:
                config, topic_id, start = current.log.config, current.log.topic_id, current.log.log_start_offset
            partition_log = PartitionLog(directory, config=config, topic_id=topic_id, base_offset=start)
            if topic_id is not None:
                write_partition_metadata(directory / PARTITION_METADATA, topic_id)
            fsync_dir(log_dir)
        except OSError as exc:
            with self._topics_lock:
                self._dir_counts[log_dir] -= 1
            shutil.rmtree(directory, ignore_errors=True)
            raise LogDirError(f"creating the future log of {topic}-{index} in {log_dir} failed: {exc}",
                              path=str(log_dir)) from exc
        managed = _future(ManagedLog(topic, index, partition_log))
        with self._topics_lock:
            self.future_logs[(topic, index)] = managed
        log.info("%s-%d: future log %s created, moving from %s", topic, index, directory, current.directory.parent)
        return managed

    def delete_future_log(self, topic: str, index: int) -> bool:
        """The move is given up (another destination, or back to the current dir): the future log goes as a
        deleted log does (Kafka's asyncDelete(isFuture = true)). Blocking."""
        return bool(self._delete_futures([(topic, index)]))

    def _delete_futures(self, partitions: list[tuple[str, int]]) -> list[ManagedLog]:
        removed = []
        for tp in partitions:
            future = self.future_logs.get(tp)
            if future is None:
                continue
            with future.lock:  # not while the mover swaps it in: it would be the current log by then
                with self._topics_lock:
                    if self.future_logs.get(tp) is not future:
                        continue
                    del self.future_logs[tp]
            removed.append(future)
        if removed:
            self._delete_logs(removed, self.file_delete_delay_ms)
        return removed

    def replace_current_with_future_log(self, current: ManagedLog, future: ManagedLog) -> Path:
        """Kafka's replaceCurrentWithFutureLog, called with both logs' locks held and the future log caught up
        (same log end offset): the future log takes the current one's place in ``current`` (the ManagedLog every
        Partition holds), and the old log is renamed `<topic>-<p>.<uuid>-delete` for the delayed delete. Returns
        the old log's renamed directory.

        The future log is closed first (fsynced, producer snapshot, the current log's leader epochs), so it is
        complete on disk before any rename. Then, unlike Kafka (which renames the future log first and stops at
        startup on two `<topic>-<p>` directories if it crashed in between), the old log is renamed `-delete`
        first: a crash before the second rename leaves a future log without a current one, which startup takes
        as the log (_promote_orphan_future)."""
        tp = (current.topic, current.index)
        old, new = current.log, future.log
        if old.log_end_offset != new.log_end_offset:
            raise KcliError(f"{tp[0]}-{tp[1]}: the future log ends at {new.log_end_offset}, the current one at "
                            f"{old.log_end_offset}: not caught up")
        new.leader_epochs.entries = list(old.leader_epochs.entries)  # epochs without batches yet included
        new.log_start_offset = max(new.log_start_offset, old.log_start_offset)
        new.close()
        source_dir, destination = old.directory.parent, new.directory.parent
        old.close_handlers()
        deleted = old.directory.with_name(delete_dir_name(*tp))
        old.directory.rename(deleted)
        old.directory = deleted
        fsync_dir(source_dir)
        final = destination / f"{tp[0]}-{tp[1]}"
        new.directory.rename(final)
        fsync_dir(destination)
        swapped = PartitionLog.open(final, config=old.config, recover=False)
        if swapped.segments[0] <= new.log_start_offset <= swapped.log_end_offset:
            swapped.log_start_offset = max(swapped.log_start_offset, new.log_start_offset)
        swapped.truncations = old.truncations + 1  # a flush of the old log in flight must not move this recovery point
        swapped.leader_epochs.flush_on_change = True
        swapped.sync_roll = False
        current.log = swapped
        current.unflushed_messages = 0
        with self._topics_lock:
            if self.future_logs.get(tp) is future:
                del self.future_logs[tp]
            self._dir_counts[source_dir] -= 1
        self._schedule_delete([deleted], old.config.file_delete_delay_ms)
        log.info("%s-%d: moved from %s to %s (log end offset %d)", tp[0], tp[1], source_dir, destination,
                 swapped.log_end_offset)
        return deleted

    @contextmanager
    def leader_epoch_checkpoints_deferred(self, logs: list[ManagedLog]) -> Iterator[list[ManagedLog]]:
        """Within the block, leader-epoch changes of these logs are not written at once (an fsync each on the
        caller's thread); the yielded list then holds the logs whose cache changed, for
        write_leader_epoch_checkpoints in a worker thread (as Kafka 3.7+ flushes an epoch assigned by a
        LeaderAndIsr asynchronously, KAFKA-15046). Truncations inside the block are written on its exit too."""
        before = {id(m): list(m.log.leader_epochs.entries) for m in logs}
        for m in logs:
            m.log.leader_epochs.flush_on_change = False
        changed: list[ManagedLog] = []
        try:
            yield changed
        finally:
            for m in logs:
                m.log.leader_epochs.flush_on_change = True
                if m.log.leader_epochs.entries != before[id(m)]:
                    changed.append(m)

    def write_leader_epoch_checkpoints(self, logs: list[ManagedLog]) -> None:
        """Write these logs' leader-epoch-checkpoint files, several at a time, without holding a log's lock
        during the write; a file overtaken by a newer change meanwhile is written again. Blocking."""
        def write(m: ManagedLog) -> None:
            while True:
                with m.lock:
                    entries = list(m.log.leader_epochs.entries)
                    path = m.log.leader_epochs.path
                if path is None:
                    return
                try:
                    LeaderEpochCheckpointFile(path).write(entries)
                except FileNotFoundError:
                    return  # the log was deleted meanwhile
                with m.lock:
                    if m.log.leader_epochs.entries == entries:
                        return

        if len(logs) == 1:
            write(logs[0])
        elif logs:
            for future in [self._sync_pool().submit(write, m) for m in logs]:
                future.result()

    def partition(self, topic: str, index: int) -> ManagedLog | None:
        entry = self.topics.get(topic)
        if entry is None:
            return None
        if 0 <= index < len(entry.partitions) and entry.partitions[index].index == index:
            return entry.partitions[index]  # every partition hosted here (standalone)
        return next((p for p in entry.partitions if p.index == index), None)

    # -- data --------------------------------------------------------------------------------------
    def append_as_leader(self, partition: ManagedLog, raw: bytes, *, leader_epoch: int,
                         origin: AppendOrigin = AppendOrigin.CLIENT) -> LogAppendInfo:
        """Kafka's UnifiedLog.appendAsLeader: validate against the topic's LogConfig and the producer state
        (kcli.storage.validator: one parse, one CRC; typed errors), then append, all under the log's lock. A
        retried duplicate appends nothing. The log rolls by segment.bytes / segment.ms first; the bytes reach
        the page cache here, durability is `flush` (flush.messages / flush.ms)."""
        with partition.lock:
            log_ = partition.log
            validated = validate_records(raw, log_.config, log_end_offset=log_.log_end_offset,
                                         leader_epoch=leader_epoch, producer_state=log_.producer_state,
                                         now_ms=int(time.time() * 1000), origin=origin,
                                         topic_partition=partition.directory.name)
            info = log_.append_validated(validated)
            if not info.duplicate:
                log_.flush_to_os()
                partition.unflushed_messages += info.record_count
        return info

    def append_as_follower(self, partition: ManagedLog, raw: bytes) -> int:
        """Kafka's appendAsFollower: the leader's batches as they are (offsets, epochs, CRCs kept, so the
        replicas stay byte-identical); the producer state and leader-epoch cache follow the batches. Returns
        the new log end offset."""
        with partition.lock:
            log_ = partition.log
            before = log_.log_end_offset
            log_.append_raw(raw)
            log_.flush_to_os()
            partition.unflushed_messages += log_.log_end_offset - before
            return log_.log_end_offset

    def truncate_to(self, partition: ManagedLog, offset: int) -> int:
        """A follower's divergent tail goes (Kafka's truncateTo); returns the new log end offset."""
        with partition.lock:
            before = partition.log.truncations
            renamed = partition.log.truncate_to(offset)
            end = partition.log.log_end_offset
        if partition.log.truncations != before:
            self.write_recovery_points(partition.directory.parent)
        if renamed:
            self._schedule_delete(renamed, partition.log.config.file_delete_delay_ms)
        return end

    def truncate_fully_and_start_at(self, partition: ManagedLog, offset: int) -> None:
        with partition.lock:
            renamed = partition.log.truncate_fully_and_start_at(offset)
        self.write_recovery_points(partition.directory.parent)
        self._schedule_delete(renamed, partition.log.config.file_delete_delay_ms)

    def flush_due(self, partition: ManagedLog) -> bool:
        """A segment rolled since the last flush (Kafka flushes it in the background after a roll), or
        flush.messages / flush.ms of the log's topic (log.flush.interval.* by default; LONG_MAX: never)."""
        if partition.log.segment.base_offset > partition.log.recovery_point:
            return True
        if not partition.unflushed_messages:
            return False
        config = partition.log.config
        if config.flush_messages < LONG_MAX and partition.unflushed_messages >= config.flush_messages:
            return True
        return config.flush_ms < LONG_MAX and (time.monotonic() - partition.last_flush) * 1000 >= config.flush_ms

    def flush(self, partition: ManagedLog) -> None:
        """fsync the active segment and its indexes, without holding the log's lock during the fsync: appends
        to this partition go on meanwhile (blocking, so call it from a worker thread, never the event loop)."""
        with partition.lock:
            segment = partition.log.segment
            indexes = segment.indexes  # a roll meanwhile sets the segment's to None (closing flushed them)
            fd = os.dup(segment.log.fileno())
            pending = partition.unflushed_messages
            end, truncations = partition.log.log_end_offset, partition.log.truncations
            inactive = partition.log.unflushed_inactive()
            snapshots = partition.log.take_unsynced_snapshots()
        try:
            PartitionLog.fsync_unflushed_inactive(inactive)
            for snapshot in snapshots:
                _fsync_file(snapshot)
            if snapshots:
                fsync_dir(partition.directory)  # their renames
            os.fsync(fd)
            try:
                if indexes is not None:
                    indexes.flush()
            except (ValueError, OSError):
                pass  # the segment rolled meanwhile: closing it flushed its indexes
        finally:
            os.close(fd)
        with partition.lock:
            partition.unflushed_messages = max(0, partition.unflushed_messages - pending)
            partition.last_flush = time.monotonic()
            partition.log.flushed(end, truncations)

    def due_flushes(self) -> list[ManagedLog]:
        return [p for p in self.all_partitions() if self.flush_due(p)]

    def all_partitions(self) -> list[ManagedLog]:
        """Every log hosted here, a snapshot (logs are created and deleted in worker threads meanwhile)."""
        return [p for t in list(self.topics.values()) for p in t.partitions]

    def enforce_retention(self) -> list[str]:
        """Kafka's retention for logs whose cleanup.policy has delete (PartitionLog.delete_retention_breached:
        retention.ms, retention.bytes, the log start); files go to ``.deleted`` and are removed
        file.delete.delay.ms later. Returns what was scheduled. Blocking: run it in a worker thread."""
        done = []
        now_ms = int(time.time() * 1000)
        for topic in list(self.topics.values()):
            for p in topic.partitions:
                with p.lock:
                    deleted = p.log.delete_retention_breached(now_ms)
                    start = p.log.log_start_offset
                    delay_ms = p.log.config.file_delete_delay_ms
                for base, reason, renamed in deleted:
                    self._schedule_delete(renamed, delay_ms)
                    done.append(f"{p.directory.name}: segment {base} ({reason}), log start now {start}")
        return done

    def clean_logs(self, enabled: bool = True) -> list[str]:
        """Kafka's log cleaner over every log whose cleanup.policy has compact, when log.cleaner.enable: a log
        is cleaned when its dirty ratio reaches min.cleanable.dirty.ratio or a record older than
        max.compaction.lag.ms waits; records newer than min.compaction.lag.ms and the active segment stay
        dirty. Planning reads inactive segments without the log's lock; only the swap of cleaned segments
        takes it. Blocking: run it in a worker thread."""
        from kcli.storage.cleaner import CleanerConfig, apply_compaction, plan_compaction

        done: list[str] = []
        if not enabled:
            return done
        now_ms = int(time.time() * 1000)
        for topic in list(self.topics.values()):
            for p in topic.partitions:
                config = p.log.config
                if not config.compact or len(p.log.segments) < 2:
                    continue  # the active segment is never cleaned
                if (p.topic, p.index) in self.future_logs:
                    continue  # moving between log dirs: cleaning waits (Kafka's abortAndPauseCleaning)
                try:
                    plan = plan_compaction(p.directory, now_ms=now_ms, config=CleanerConfig.from_log_config(config))
                except KcliError as exc:
                    log.warning("cleaner: skipping %s: %s", p.directory.name, exc)
                    continue
                if not plan.changed_groups or not _cleanable(plan, config, now_ms):
                    continue
                apply_compaction(plan, swap_guard=p.lock)
                with p.lock:
                    p.log.segments = sorted(int(f.name.split(".")[0]) for f in p.directory.glob("*.log"))
                done.append(f"{p.directory.name}: {plan.total('bytes_before')} -> {plan.total('bytes_after')} bytes")
        return done

    def delete_records_before(self, partition: ManagedLog, offset: int) -> int:
        """DeleteRecords: the log start offset moves up to ``offset``; segments wholly below it go to
        ``.deleted`` as retention's do (the next retention pass would; this does it now). Returns the new log
        start offset (the low watermark)."""
        with partition.lock:
            log_ = partition.log
            log_.log_start_offset = max(log_.log_start_offset, offset)
            start = log_.log_start_offset
            renamed = [path for base, reason, paths in log_.delete_retention_breached(int(time.time() * 1000))
                       if reason == "log start" for path in paths]
            delay_ms = log_.config.file_delete_delay_ms
        self._schedule_delete(renamed, delay_ms)
        return start

    def _schedule_delete(self, renamed: list[Path], delay_ms: int) -> None:
        due = time.monotonic() + delay_ms / 1000
        with self._deletes_lock:
            self._pending_deletes.extend((due, path) for path in renamed)

    def purge_deleted(self, *, force: bool = False) -> None:
        """Remove the ``.deleted`` files and ``-delete`` log directories whose delay has passed
        (file.delete.delay.ms, log.segment.delete.delay.ms). Blocking: run it in a worker thread."""
        now = time.monotonic()
        with self._deletes_lock:
            due = [path for when, path in self._pending_deletes if force or when <= now]
            self._pending_deletes = [(w, p) for w, p in self._pending_deletes if not (force or w <= now)]
        for path in due:
            if path.name.endswith(DELETE_DIR_SUFFIX):
                _remove_log_dir(path)  # a deleted log (delete_partitions)
            else:
                path.unlink(missing_ok=True)


def _remove_log_dir(path: Path) -> None:
    """Remove a deleted log's directory: its files, then itself, with as little Python per file as possible
    (shutil.rmtree's walk took twice the CPU, which the event loop's thread waits for: the GIL)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for name in os.listdir(fd):
                os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError:  # something unexpected inside (a subdirectory): the general walk
        shutil.rmtree(path, ignore_errors=True)


def future_dir_name(topic: str, index: int) -> str:
    """Kafka's UnifiedLog.logFutureDirName: `<topic>-<p>.<uuid>-future` (AlterReplicaLogDirs refuses a topic whose
    name would not fit 255 bytes)."""
    return f"{topic}-{index}.{uuid.uuid4().hex}{FUTURE_DIR_SUFFIX}"


def _future(managed: ManagedLog) -> ManagedLog:
    """A future log is written by the mover's thread only, never on the event loop: its rolls may fsync."""
    managed.log.sync_roll = True
    return managed


def delete_dir_name(topic: str, index: int) -> str:
    """Kafka's LocalLog.logDeleteDirName: `<topic>-<p>.<uuid>-delete`, the topic cut so the name fits 255
    bytes (a 249-character topic would not fit otherwise)."""
    suffix = f"-{index}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return topic[: 255 - len(suffix)] + suffix


def _cleanable(plan: Any, config: LogConfig, now_ms: int) -> bool:
    """min.cleanable.dirty.ratio (dirty bytes over cleanable bytes, as Kafka's LogToClean), overridden by
    max.compaction.lag.ms for a dirty segment whose records waited longer than that (KIP-354)."""
    segments = [s for s in plan.segments.values() if s.base_offset < plan.uncleanable_offset]
    total = sum(s.size for s in segments)
    dirty = [s for s in segments if s.next_offset > plan.first_dirty_offset]
    if total and sum(s.size for s in dirty) / total >= config.min_cleanable_dirty_ratio:
        return True
    max_lag = config.max_compaction_lag_ms
    return max_lag < LONG_MAX and any(s.max_timestamp >= 0 and now_ms - s.max_timestamp > max_lag for s in dirty)


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode("ascii").rstrip("=")


def recovery_log_lines(run: QuarantineRun) -> list[str]:
    """The broker's account of one log dir's startup recovery (what kctl-broker(1) promises): a line per
    action (partition, file, byte range, offsets lost, where the old bytes are kept), then a summary with
    the quarantine run and the command that undoes it."""
    lines = []
    cut = lost = 0
    at_least = False
    for result in run.results:
        partition = result.plan.partition_dir.name
        for i, action in enumerate(result.plan.actions):
            lines.append(f"{partition}: {_describe_action(action, result, i)}")
            if action.kind in (ActionKind.TRUNCATE, ActionKind.DELETE):
                cut += action.bytes
            if action.first_offset is not None:
                lost += action.offsets or 0
                at_least = at_least or action.lower_bound or action.last_offset is None
    actions = [a for r in run.results for a in r.plan.actions]
    kinds = ", ".join(f"{sum(a.kind is kind for a in actions)} {word}" for kind, word in (
        (ActionKind.TRUNCATE, "truncated"), (ActionKind.DELETE, "deleted"), (ActionKind.REBUILD, "rebuilt"),
        (ActionKind.RENAME, "renamed")))
    log_dir = run.results[0].plan.partition_dir.parent if run.results else run.root
    lines.append(f"{log_dir}: {len(run.results)} partition(s) recovered, {len(actions)} file(s) changed ({kinds}), "
                 f"{cut} bytes cut, {'at least ' if at_least else ''}{lost} offset(s) lost; quarantine run "
                 f"{run.directory} (undo: kctl recover --restore {run.directory})")
    return lines


def _describe_action(action: RecoveryAction, result: RecoveryResult, index: int) -> str:
    name = action.file.name
    if action.kind is ActionKind.RENAME:
        return f"rename {name} -> {action.target.name if action.target else '?'}: {action.reason}"
    if action.kind is ActionKind.REBUILD and not action.existed:
        return f"rebuild {name} (new file): {action.reason}"
    span = f"bytes {action.position}..{action.end}"
    if action.first_offset is None:
        offsets = "no offsets lost"
    elif action.last_offset is None:
        offsets = f"offsets from {action.first_offset} lost (an unknown number)"
    else:
        offsets = (f"offsets {action.first_offset}..{action.last_offset} lost "
                   f"({'at least ' if action.lower_bound else ''}{action.offsets} offsets)")
    verb = {ActionKind.TRUNCATE: "truncate", ActionKind.DELETE: "delete", ActionKind.REBUILD: "rebuild"}[action.kind]
    kept = result.kept_in(index)
    stored = result.records[index].get("stored_bytes", action.bytes)
    zeros = f" ({stored} bytes, then {action.bytes - stored} zeros)" if stored < action.bytes else ""
    where = f"old bytes kept in {kept}{zeros}" if kept is not None else "nothing to keep"
    return f"{verb} {name} {span} ({action.bytes} bytes, {offsets}): {action.reason}; {where}"


def _fsync_file(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:  # deleted meanwhile (retention, truncation): nothing to make durable
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
