"""LogManager: the logs under log.dirs (Kafka's LogManager).

Owns the ``.lock`` of each log dir, ``meta.properties``, partition directories named ``<topic>-<n>``,
startup recovery after an unclean stop, the root checkpoint files, the clean-shutdown marker, and the
background work on logs: retention, the cleaner, flushes. Synchronous and thread-safe per log: the broker
calls appends from its event loop (they land in the page cache) and runs fsyncs, retention and cleaning in
worker threads, each log guarded by its own lock (held only for short, in-memory-speed steps).
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
from typing import Any

from kcli.errors import InputError, KcliError
from kcli.storage.checkpoint import (
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
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    META_PROPERTIES,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    fsync_dir,
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


class TopicError(KcliError):
    """A topic name or partition count Kafka would refuse (INVALID_TOPIC_EXCEPTION and friends)."""

    error_code = "INVALID_TOPIC_EXCEPTION"


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
    def __init__(self, log_dirs: list[Path], *, broker_id: int, log_config: LogConfig) -> None:
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
        self.high_watermarks: Any = None  # () -> dict[(topic, index), int]
        self.checkpointed_high_watermarks: dict[tuple[str, int], int] = {}
        self._checkpoint_lock = threading.Lock()  # the root checkpoint files: one writer at a time

    # -- startup / shutdown ------------------------------------------------------------------------
    def startup(self) -> None:
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
                self._load_partition(child, parsed[0], parsed[1], recover=not clean, quarantine=run,
                                     checkpoints=checkpoints)
            if run.results:
                self.recoveries.append(run)

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
                OffsetCheckpointFile(directory / RECOVERY_POINT_CHECKPOINT).write_offsets(points)
                hws = ends if watermarks is None else {tp: watermarks.get(tp, 0) for tp in ends}
                OffsetCheckpointFile(directory / REPLICATION_OFFSET_CHECKPOINT).write_offsets(hws)
                OffsetCheckpointFile(directory / LOG_START_OFFSET_CHECKPOINT).write_offsets(starts)

    def write_recovery_points(self, directory: Path) -> None:
        """recovery-point-offset-checkpoint of one log dir now (Kafka checkpoints it after a truncation: a
        lowered recovery point must be on disk before data rewritten below the old one is)."""
        with self._checkpoint_lock:
            points = {(p.topic, p.index): p.log.recovery_point for topic in list(self.topics.values())
                      for p in list(topic.partitions) if p.directory.parent == directory}
            OffsetCheckpointFile(directory / RECOVERY_POINT_CHECKPOINT).write_offsets(points)

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
            topic.partitions.append(ManagedLog(name, index, partition_log))

    def get_or_create_log(self, name: str, index: int, topic_id: uuid.UUID, config: LogConfig) -> ManagedLog:
        """A replica this broker was told to host (LeaderAndIsr): its log, created empty if absent."""
        managed = self.partition(name, index)
        if managed is not None:
            return managed
        validate_topic_name(name)
        topic = self.topics.setdefault(name, Topic(name, topic_id, []))
        directory = self._least_loaded_dir() / f"{name}-{index}"
        partition_log = PartitionLog(directory, config=config, topic_id=topic.topic_id)
        write_partition_metadata(directory / PARTITION_METADATA, topic.topic_id)
        managed = ManagedLog(name, index, partition_log)
        topic.partitions.append(managed)
        topic.partitions.sort(key=lambda p: p.index)
        return managed

    def delete_partition(self, name: str, index: int) -> None:
        """StopReplica with delete: the log goes (renamed first, as Kafka does, then removed)."""
        topic = self.topics.get(name)
        managed = self.partition(name, index)
        if topic is None or managed is None:
            return
        topic.partitions.remove(managed)
        if not topic.partitions:
            del self.topics[name]
        self._remove_log(managed)

    def _remove_log(self, p: ManagedLog) -> None:
        with p.lock:
            p.log.close()
            # Kafka renames to <tp>.<uuid>-delete first, so a crash mid-delete is finished at startup.
            target = p.directory.with_name(f"{p.directory.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
            p.directory.rename(target)
            shutil.rmtree(target, ignore_errors=True)

    def delete_topic(self, name: str) -> None:
        topic = self.topics.pop(name)
        for p in topic.partitions:
            self._remove_log(p)

    def _least_loaded_dir(self) -> Path:
        counts = {d: 0 for d in self.log_dirs}
        for topic in self.topics.values():
            for p in topic.partitions:
                if p.directory.parent in counts:
                    counts[p.directory.parent] += 1
        return min(self.log_dirs, key=lambda d: counts[d])

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
        return [p for t in self.topics.values() for p in t.partitions if self.flush_due(p)]

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
        """Remove ``.deleted`` files whose delay has passed (file.delete.delay.ms)."""
        now = time.monotonic()
        with self._deletes_lock:
            due = [path for when, path in self._pending_deletes if force or when <= now]
            self._pending_deletes = [(w, p) for w, p in self._pending_deletes if not (force or w <= now)]
        for path in due:
            path.unlink(missing_ok=True)


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
