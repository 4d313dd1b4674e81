"""Moving a replica between this broker's log dirs (KIP-113): Kafka's ReplicaManager.alterReplicaLogDirs and its
ReplicaAlterLogDirsManager / ReplicaAlterLogDirsThread.

AlterReplicaLogDirs names a log dir per partition. For a partition hosted here whose log is elsewhere, the
LogManager creates a future log in that dir (`<topic>-<p>.<uuid>-future`) and the mover's thread copies the current
log into it as a follower fetches from its leader: whole batches as they are (offsets, leader epochs, producer
state follow the batches), the log start offset kept, the future log truncated when the current one was (found by
leader epochs, as a follower's truncation is). Once caught up, the last batches are copied and the logs swapped
under the current log's lock, so no append falls between (LogManager.replace_current_with_future_log). Appends
go on during the copy; they wait only for that last step.

A partition not hosted yet has the dir remembered for the creation of its log (preferredLogDirs) and answers
REPLICA_NOT_AVAILABLE, as Kafka's does. One thread moves every partition, in chunks, in turn (Kafka's
num.replica.alter.log.dirs.threads defaults to one per log dir; the copy here is bound by the GIL anyway). The
copy keeps to replica.alter.log.dirs.io.max.bytes.per.second (KIP-113's AlterLogDirsReplication quota,
kcli.broker.replication_quotas): no chunk is read while the rate is above it, as Kafka's thread builds no fetch
then; the final catch-up under the lock is never held back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import BrokerError, InvalidTopicError, error_code_for
from kcli.broker.log_manager import LogManager, ManagedLog, future_dir_name
from kcli.records import BatchReader

log = logging.getLogger("kcli.broker")

TopicPartition = tuple[str, int]
CHUNK_BYTES = 1 << 20  # read per partition per round (Kafka's replica.fetch.max.bytes default)
IDLE_WAIT_S = 0.05  # a caught-up copy looks again this often, unless woken
ERROR_BACKOFF_S = 1.0  # after a failed round of a partition (replica.fetch.backoff.ms: 1 s)
MAX_NAME_BYTES = 255


class LogDirNotFoundError(BrokerError):
    code = ErrorCode.log_dir_not_found


class ReplicaNotAvailableError(BrokerError):
    code = ErrorCode.replica_not_available


class ReplicaAlterLogDirsManager:
    """The moves in progress and the thread that makes them. ``hosted(topic, index)``: the ReplicaManager hosts
    the partition (it has a Partition for it)."""

    def __init__(self, log_manager: LogManager, hosted: Callable[[str, int], bool], *,
                 chunk_bytes: int = CHUNK_BYTES, background: bool = True, quota: Any = None) -> None:
        self.log_manager = log_manager
        self.hosted = hosted
        self.quota = quota  # kcli.broker.replication_quotas.ReplicationQuotaManager (AlterLogDirsReplication)
        self.chunk_bytes = chunk_bytes
        self.background = background  # False: no thread, the caller runs ``step`` (tests)
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._thread_lock = threading.Lock()
        self._backoff: dict[TopicPartition, float] = {}
        self.moved = 0  # swaps done (tests, metrics)

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        """After the logs are loaded: moves a restart interrupted resume (their `-future` dirs)."""
        if self.log_manager.future_logs:
            self._ensure_thread()

    def shutdown(self) -> None:
        self._stopped.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=30)

    def _ensure_thread(self) -> None:
        with self._thread_lock:
            if not self.background or self._stopped.is_set() or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(target=self._run, name="kcli-alter-log-dirs", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    # -- AlterReplicaLogDirs -------------------------------------------------------------------------
    def alter_replica_log_dirs(self, partition_dirs: Mapping[TopicPartition, str]) -> dict[TopicPartition, Any]:
        """Kafka's ReplicaManager.alterReplicaLogDirs: an error code per partition. Blocking (file work)."""
        manager = self.log_manager
        results: dict[TopicPartition, Any] = {}
        for tp, path in partition_dirs.items():
            try:
                if len(future_dir_name(*tp).encode()) > MAX_NAME_BYTES:  # KAFKA-4893
                    raise InvalidTopicError("The topic name is too long.")
                log_dir = manager.log_dir_of(path)
                if log_dir is None:
                    raise LogDirNotFoundError(f"Log dir {path} is not found in the config.")
                future = manager.future_log(*tp)
                if future is not None and future.directory.parent != log_dir:
                    # another destination (or back where it is): the move so far is given up
                    manager.delete_future_log(*tp)
                    log.info("%s-%d: the move to %s is given up for %s", tp[0], tp[1], future.directory.parent,
                             log_dir)
                manager.maybe_update_preferred_log_dir(tp[0], tp[1], log_dir)
                current = manager.partition(*tp)
                if current is None or not self.hosted(*tp):
                    raise ReplicaNotAvailableError(f"Replica of {tp[0]}-{tp[1]} is not hosted by this broker yet: "
                                                   f"its log will be created in {log_dir}")
                if current.directory.parent != log_dir and manager.future_log(*tp) is None:
                    manager.create_future_log(tp[0], tp[1], log_dir)
                    self._ensure_thread()
                    self._wake.set()
                results[tp] = ErrorCode.none
            except Exception as exc:
                code = error_code_for(exc)
                log.warning("Unable to alter log dirs for %s-%d: %s", tp[0], tp[1], exc)
                results[tp] = code
        return results

    # -- the thread ----------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopped.is_set():
            busy = False
            for tp, future in list(self.log_manager.future_logs.items()):
                if self._stopped.is_set():
                    return
                if self._backoff.get(tp, 0) > time.monotonic():
                    continue
                try:
                    busy = self.step(tp, future) or busy
                except Exception:
                    log.exception("moving %s-%d between log dirs failed; retrying", tp[0], tp[1])
                    self._backoff[tp] = time.monotonic() + ERROR_BACKOFF_S
            if not self.log_manager.future_logs and not busy:
                self._wake.wait(1.0)
            elif not busy:
                self._wake.wait(IDLE_WAIT_S)
            self._wake.clear()

    def step(self, tp: TopicPartition, future: ManagedLog) -> bool:
        """One round of one partition: truncate the future log if the current one was, copy up to one chunk,
        and swap once caught up. True when it did something. Called by the thread (tests call it directly)."""
        manager = self.log_manager
        current = manager.partition(*tp)
        if current is None:
            return False  # not hosted: a deletion takes the future log with it
        with future.lock:
            if manager.future_logs.get(tp) is not future:
                return False  # given up meanwhile
            with current.lock:
                target = _truncation_point(current, future)
                start = current.log.log_start_offset
                future.log.replace_config(current.log.config)
            did = False
            if target is not None:
                future.log.truncate_to(target)
                did = True
            if future.log.log_end_offset < start:  # retention passed what was copied: start again from there
                future.log.truncate_fully_and_start_at(start)
                did = True
            if self.quota is not None and self.quota.is_quota_exceeded():
                self.quota.held_back += 1
                return did  # over replica.alter.log.dirs.io.max.bytes.per.second: the next rounds copy
            copied, end = self._copy(current, future, self.chunk_bytes)
            did = did or copied > 0
            if copied and self.quota is not None:
                self.quota.record(copied)
            self._follow_log_start(current, future)
            if future.log.log_end_offset < end:
                return True  # more to copy next round
            future.log.fsync()  # the bulk made durable before appends wait on the swap
            with current.lock:
                # appends wait from here: the batches that came meanwhile, then the swap
                if _truncation_point(current, future) is not None:
                    return True
                while future.log.log_end_offset < current.log.log_end_offset:
                    if not self._copy_locked(current, future, self.chunk_bytes):
                        return True
                self._follow_log_start(current, future, locked=True)
                manager.replace_current_with_future_log(current, future)
            self.moved += 1
        self._backoff.pop(tp, None)
        manager.write_checkpoints()  # both dirs' recovery points and log starts without the old logs
        return True

    def _copy(self, current: ManagedLog, future: ManagedLog, max_bytes: int) -> tuple[int, int]:
        """Copy what the current log has from the future log's end on, up to ``max_bytes`` (at least one batch).
        Returns (bytes copied, the current log end offset when read)."""
        offset = future.log.log_end_offset
        with current.lock:
            end = current.log.log_end_offset
            found = current.log.read(offset, max_bytes, keep_open=True) if offset < end else None
        if found is None:
            return 0, end
        try:
            raw = found.read()
        finally:
            found.close()
        self._append(future, raw)
        return len(raw), end

    def _copy_locked(self, current: ManagedLog, future: ManagedLog, max_bytes: int) -> bool:
        found = current.log.read(future.log.log_end_offset, max_bytes, keep_open=True)
        if found is None:
            return False
        try:
            raw = found.read()
        finally:
            found.close()
        self._append(future, raw)
        return True

    def _append(self, future: ManagedLog, raw: bytes) -> None:
        """The batches as the current log holds them (a follower's appendAsFollower). An empty future log whose
        start falls inside the first batch (DeleteRecords moved the log start there) starts at that batch, as
        Kafka's Partition does on UnexpectedAppendOffsetException."""
        log_ = future.log
        first = next(iter(BatchReader(raw)), None)
        if first is None:
            return
        if first.base_offset < log_.log_end_offset:
            if log_.log_end_offset != log_.log_start_offset or first.last_offset < log_.log_end_offset:
                raise BrokerError(f"{future.directory.name}: batch at {first.base_offset} is below the future log's "
                                  f"end {log_.log_end_offset}")
            start = log_.log_start_offset
            log_.truncate_fully_and_start_at(first.base_offset)
            log_.log_start_offset = start
        log_.append_raw(raw)
        log_.flush_to_os()

    def _follow_log_start(self, current: ManagedLog, future: ManagedLog, *, locked: bool = False) -> None:
        """The future log's start follows the current one's (retention, DeleteRecords), its segments wholly below
        it going as the current log's do (Kafka's maybeIncrementLogStartOffset on the future log)."""
        if locked:
            start = current.log.log_start_offset
        else:
            with current.lock:
                start = current.log.log_start_offset
        log_ = future.log
        start = min(start, log_.log_end_offset)
        if start <= log_.log_start_offset:
            return
        log_.log_start_offset = start
        renamed = []
        while len(log_.log_segments) > 1 and log_.log_segments[1].base_offset <= start:
            renamed += log_.delete_oldest_segment()
        log_.leader_epochs.truncate_from_start(start)
        if renamed:
            self.log_manager._schedule_delete(renamed, log_.config.file_delete_delay_ms)

    def lag(self, tp: TopicPartition) -> int | None:
        """The future log's offset lag behind the current one (DescribeLogDirs' OffsetLag of a future replica)."""
        future = self.log_manager.future_log(*tp)
        current = self.log_manager.partition(*tp)
        if future is None or current is None:
            return None
        return current.log.log_end_offset - future.log.log_end_offset


def _truncation_point(current: ManagedLog, future: ManagedLog) -> int | None:
    """Where the future log must be cut because the current log was truncated (a follower's divergent tail, say),
    found as a follower finds it from its leader (KIP-101, KIP-279): the end of the future log's latest epoch in
    the current log, or past the current log's end. None when the future log is a prefix of the current one.
    Called with the current log's lock held."""
    cur, fut = current.log, future.log
    end = fut.log_end_offset
    if end > cur.log_end_offset:
        end = cur.log_end_offset
    latest = fut.leader_epochs.latest_epoch
    if latest is not None and fut.log_end_offset > fut.log_start_offset:
        epoch, epoch_end = cur.leader_epochs.end_offset_for(latest, cur.log_end_offset)
        if epoch < 0 or epoch_end < 0:
            end = min(end, fut.log_start_offset)  # nothing in common: everything goes
        elif epoch == latest:
            end = min(end, epoch_end)
        else:  # the current log never had our latest epoch: cut at the end of the epoch it has
            _, own_end = fut.leader_epochs.end_offset_for(epoch, fut.log_end_offset)
            end = min(end, epoch_end, own_end if own_end >= 0 else epoch_end)
    return end if end < fut.log_end_offset else None
