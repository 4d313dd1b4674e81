"""Tiered storage on the broker (KIP-405): Kafka's RemoteLogManager and TopicBasedRemoteLogMetadataManager.

On each partition it leads whose topic has ``remote.storage.enable=true``, the RemoteLogManager copies every
rolled segment below the last stable offset, with its offset, time and transaction indexes, the producer
snapshot at its end and its leader epochs, to the remote store (kcli.storage.remote), and records each step
in ``__remote_log_metadata`` as Kafka's TopicBasedRemoteLogMetadataManager does: COPY_SEGMENT_STARTED before
the upload, COPY_SEGMENT_FINISHED after it. Only a finished segment counts: it is what the log's
``highest_offset_in_remote_storage`` follows, so local retention (local.retention.ms / .bytes) never deletes a
local segment before its copy is whole, and a copy killed midway leaves a STARTED segment that the next
leader deletes (its keys are new per upload, so nothing finished is overwritten). The total retention
(retention.ms / .bytes) then deletes remote segments (DELETE_SEGMENT_STARTED, the objects,
DELETE_SEGMENT_FINISHED) and moves the log start offset. Fetches below the local log start read the remote
segment holding the offset (Kafka's RemoteLogReader), starting at its offset index's position.

Followers do not copy; a new leader reads the partition's records back from its replica of the metadata
topic and resumes after the highest finished segment. A follower whose log ends below its leader's local log
start (a replaced broker) starts after the remote segment holding the offset before it, with that segment's
leader-epoch checkpoint and producer snapshot (``fetch_remote_log_aux_state``, Kafka's buildRemoteLogAuxState).
The metadata records are appended through the ReplicaManager when the metadata partition is led here (always
standalone), else produced to its leader; a broker with no replica of the metadata partition reads it from its
leader with Fetch (Kafka's RLMM producer and consumer).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

from kcli.broker.config_values import LONG_MAX
from kcli.broker.errors import OffsetOutOfRangeError, topic_exists
from kcli.broker.replication_quotas import ReplicationQuotaManager
from kcli.errors import KcliError
from kcli.records import Record
from kcli.records.batch import build_record_batch
from kcli.records.remote_log_metadata import (
    REMOTE_LOG_METADATA_TOPIC,
    RemoteLogMetadataRecord,
    RemoteLogSegmentState,
    RemotePartitionDeleteState,
    decode_remote_log_metadata,
    encode_remote_log_metadata,
    metadata_partition,
)
from kcli.records.layout import (
    HEADER_SIZE_UP_TO_LAST_OFFSET_DELTA,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    read_header,
    read_last_offset_delta,
    read_log_overhead,
)
from kcli.storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from kcli.storage.files import PRODUCER_SNAPSHOT_SUFFIX, segment_path
from kcli.storage.index import OFFSET_INDEX_ENTRY, TIME_INDEX_ENTRY
from kcli.storage.producer_state import AppendOrigin
from kcli.storage.remote import (
    FsspecRemoteStorageManager,
    RemoteSegmentRef,
    RemoteStorageError,
    copier_processes,
    copier_ready,
    copy_in_process,
    stop_copier_processes,
)
from kcli.storage.snapshot import ProducerStateEntry, decode_producer_snapshot

log = logging.getLogger("kcli.broker")

S = RemoteLogSegmentState
MIN_REMOTE_READ = 64 * 1024  # at least this much per remote read, so a first batch is usually whole
INDEX_CACHE_ENTRIES = 1024  # Kafka's RemoteIndexCache, in memory: offset indexes of remote segments
# Remote segment bytes are fetched in aligned chunks and the latest kept: a consumer reading from offset 0 asks for
# ~1 MiB per fetch, and one GET per chunk instead of per fetch is what keeps S3's per-request cost off its path
CHUNK_BYTES = 4 << 20
CHUNK_CACHE_ENTRIES = 16  # 64 MiB at most
NEXT_POSITION_ENTRIES = 4096  # where reads ended, per segment: one per partition read sequentially


@dataclass
class RemoteSegment:
    """Kafka's RemoteLogSegmentMetadata: one segment in the remote store and its state."""

    ref: RemoteSegmentRef
    end_offset: int
    max_timestamp: int
    size: int
    leader_epochs: list[tuple[int, int]]
    state: RemoteLogSegmentState
    broker_id: int
    event_timestamp: int
    txn_index_empty: bool = False  # TxnIndexEmpty: no aborted transaction to look for in this segment

    @property
    def start_offset(self) -> int:
        return self.ref.start_offset


@dataclass
class PartitionRemoteState:
    segments: dict[uuid.UUID, RemoteSegment] = field(default_factory=dict)
    version: int = 0  # bumped by every change of the segments: finished() is kept until the next one
    _finished: tuple[int, list[RemoteSegment]] | None = field(default=None, repr=False, compare=False)

    def finished(self) -> list[RemoteSegment]:
        """The finished copies by start offset, shared between calls (callers must not change it): every remote
        fetch asks, and sorting thousands of segments per fetch would cost more than the read."""
        version, kept = self.version, self._finished
        if kept is not None and kept[0] == version:
            return kept[1]
        found = sorted((s for s in list(self.segments.values()) if s.state is S.COPY_SEGMENT_FINISHED),
                       key=lambda s: s.start_offset)
        self._finished = (version, found)
        return found

    def highest_copied_offset(self) -> int:
        return max((s.end_offset for s in self.segments.values() if s.state is S.COPY_SEGMENT_FINISHED), default=-1)


class RemoteLogMetadataCache:
    """Kafka's RemotePartitionMetadataStore: every segment's latest state per user partition, built from the
    ``__remote_log_metadata`` records in order."""

    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], PartitionRemoteState] = {}
        self.lock = threading.Lock()

    def state(self, topic: str, partition: int) -> PartitionRemoteState:
        with self.lock:
            return self.partitions.setdefault((topic, partition), PartitionRemoteState())

    def view(self, topic: str, partition: int) -> PartitionRemoteState:
        """The partition's state for reading: an empty one, not kept, when it has none (a fetch or a size query
        racing a deletion must not bring a deleted partition's entry back)."""
        with self.lock:
            return self.partitions.get((topic, partition)) or PartitionRemoteState()

    def apply(self, record: RemoteLogMetadataRecord) -> None:
        d = record.data
        if record.type_id == 2:  # RemotePartitionDeleteMetadata: the partition's remote data is going
            tip = d["topicIdPartition"]
            with self.lock:
                self.partitions.pop((tip["name"], tip["partition"]), None)
            return
        sid = d["remoteLogSegmentId"]
        tip = sid["topicIdPartition"]
        state = self.state(tip["name"], tip["partition"])
        with self.lock:
            if record.type_id == 0:
                ref = RemoteSegmentRef(tip["name"], tip["id"], tip["partition"], sid["id"], d["startOffset"])
                state.segments[sid["id"]] = RemoteSegment(
                    ref, d["endOffset"], d["maxTimestampMs"], d["segmentSizeInBytes"],
                    [(e["leaderEpoch"], e["offset"]) for e in d["segmentLeaderEpochs"]],
                    S(d["remoteLogSegmentState"]), d["brokerId"], d["eventTimestampMs"],
                    bool(d.get("txnIndexEmpty")))
                state.version += 1
                return
            segment = state.segments.get(sid["id"])
            if segment is None:
                return  # an update of a segment never seen (its add was deleted with the topic): Kafka skips it
            segment.state = S(d["remoteLogSegmentState"])
            segment.event_timestamp = d["eventTimestampMs"]
            if segment.state is S.DELETE_SEGMENT_FINISHED:
                del state.segments[sid["id"]]
            state.version += 1

    def segment_for_epoch(self, topic: str, partition: int, epoch: int, offset: int) -> RemoteSegment | None:
        """The finished segment holding ``offset`` written in leader ``epoch`` (Kafka's
        RemoteLogMetadataCache.remoteLogSegmentMetadata(leaderEpoch, offset)): of the segments with that epoch,
        the one where it starts last at or below the offset, if the offset is within the epoch's range there
        (up to the next epoch's start, or the segment's end)."""
        floor: tuple[int, int, RemoteSegment] | None = None  # (the epoch's start in it, its end in it, segment)
        for segment in self.view(topic, partition).finished():
            epochs = sorted(segment.leader_epochs, key=lambda e: e[1])
            for i, (e, start) in enumerate(epochs):
                if e == epoch and start <= offset and (floor is None or start >= floor[0]):
                    end = epochs[i + 1][1] - 1 if i + 1 < len(epochs) else segment.end_offset
                    floor = (start, end, segment)
        return floor[2] if floor is not None and offset <= floor[1] else None


@dataclass(frozen=True)
class RemoteLogAuxState:
    """What a follower starting at its leader's local log start restores from the remote segment before it
    (Kafka's buildRemoteLogAuxState): where its log starts (the segment's end + 1), the leader epochs up to
    there and the producer state there (None: the segment has no producer snapshot)."""

    segment: RemoteSegment
    next_offset: int
    epochs: list[EpochEntry]
    producers: list[ProducerStateEntry] | None


class RemoteAuxStateUnavailable(KcliError):
    """No finished remote segment holds the offset before the leader's local log start for its epoch (yet):
    the follower's metadata is behind, or the segment was deleted. The fetcher retries (Kafka's
    RemoteStorageException there)."""


def fetch_remote_log_aux_state(cache: RemoteLogMetadataCache, rsm: FsspecRemoteStorageManager, topic: str,
                               partition: int, epoch: int, offset: int) -> RemoteLogAuxState:
    """The remote segment of leader ``epoch`` holding ``offset`` (the leader's local log start - 1) and its
    LEADER_EPOCH checkpoint and PRODUCER_SNAPSHOT (RemoteStorageManager.fetchIndex). Blocking: a worker
    thread's. RemoteAuxStateUnavailable without such a segment; RemoteResourceNotFoundError (with the object's
    key) when the store lost an object; RemoteStorageError when it cannot be read or parsed."""
    segment = cache.segment_for_epoch(topic, partition, epoch, offset)
    if segment is None:
        raise RemoteAuxStateUnavailable(
            f"{topic}-{partition}: no finished remote segment holds offset {offset} of leader epoch {epoch} in "
            f"this broker's remote log metadata ({REMOTE_LOG_METADATA_TOPIC} behind, or the segment deleted)")
    next_offset = segment.end_offset + 1
    epochs_key = rsm.display_key(segment.ref, "leader_epoch_checkpoint")
    raw = rsm.fetch_index(segment.ref, "leader_epoch_checkpoint")
    try:
        epochs = LeaderEpochCheckpointFile(epochs_key).parse(raw)
    except KcliError as exc:
        raise RemoteStorageError(f"{epochs_key}: {exc}", path=epochs_key) from exc
    snapshot_key = rsm.display_key(segment.ref, "snapshot")
    raw = rsm.fetch_index(segment.ref, "snapshot")
    producers: list[ProducerStateEntry] | None = None
    if raw:  # an empty object: the segment was copied without a snapshot (none existed at its end)
        snapshot = decode_producer_snapshot(raw, offset=next_offset, path=snapshot_key)
        if snapshot.problems:
            raise RemoteStorageError(f"{snapshot_key}: {snapshot.problems[0]}", path=snapshot_key)
        producers = list(snapshot.entries)
    return RemoteLogAuxState(segment, next_offset, epochs, producers)


def _user_partition(record: RemoteLogMetadataRecord) -> tuple[str, int]:
    """The user partition a metadata record is about."""
    d = record.data
    tip = d.get("topicIdPartition") or d["remoteLogSegmentId"]["topicIdPartition"]
    return tip["name"], tip["partition"]


def _about(record: RemoteLogMetadataRecord, topic: str, index: int) -> bool:
    return _user_partition(record) == (topic, index)


def segment_metadata_record(segment: RemoteSegment, *, txn_index_empty: bool | None = None) -> bytes:
    """RemoteLogSegmentMetadataRecord (apiKey 0) for a segment whose copy starts."""
    ref = segment.ref
    return encode_remote_log_metadata(0, {
        "remoteLogSegmentId": {"topicIdPartition": {"name": ref.topic, "id": ref.topic_id, "partition": ref.partition},
                               "id": ref.segment_id},
        "startOffset": ref.start_offset, "endOffset": segment.end_offset, "brokerId": segment.broker_id,
        "maxTimestampMs": segment.max_timestamp, "eventTimestampMs": segment.event_timestamp,
        "segmentLeaderEpochs": [{"leaderEpoch": e, "offset": o} for e, o in segment.leader_epochs],
        "segmentSizeInBytes": segment.size, "customMetadata": None,
        "remoteLogSegmentState": int(segment.state),
        "txnIndexEmpty": segment.txn_index_empty if txn_index_empty is None else txn_index_empty,
    })


def segment_update_record(ref: RemoteSegmentRef, state: RemoteLogSegmentState, broker_id: int, now_ms: int) -> bytes:
    """RemoteLogSegmentMetadataUpdateRecord (apiKey 1): a segment's new state."""
    return encode_remote_log_metadata(1, {
        "remoteLogSegmentId": {"topicIdPartition": {"name": ref.topic, "id": ref.topic_id, "partition": ref.partition},
                               "id": ref.segment_id},
        "brokerId": broker_id, "eventTimestampMs": now_ms, "customMetadata": None, "remoteLogSegmentState": int(state),
    })


def _epoch_checkpoint(epochs: list[tuple[int, int]]) -> bytes:
    """A leader-epoch-checkpoint file's text (version 0), what Kafka uploads as the LEADER_EPOCH index."""
    return ("0\n%d\n" % len(epochs) + "".join(f"{e} {o}\n" for e, o in epochs)).encode()


def segment_files(directory: Any, segment: Any, next_offset: int, epochs: list[Any]) -> dict[str, Any]:
    """What is uploaded of a local segment ending before ``next_offset``, by kind: its files, the producer
    snapshot at its end and, as the LEADER_EPOCH index, the whole leader-epoch cache up to its end, as Kafka
    uploads it (getLeaderEpochEntries(log, -1, nextSegmentBaseOffset)): what a follower starting after this
    segment restores (buildRemoteLogAuxState)."""
    txn = segment.txn_index_path
    snapshot = segment_path(directory, next_offset, PRODUCER_SNAPSHOT_SUFFIX)
    return {"log": segment.log_path, "index": segment.index_path, "timeindex": segment.time_index_path,
            "txnindex": txn if txn.exists() else None,
            "snapshot": snapshot if snapshot.exists() else None,
            "leader_epoch_checkpoint": _epoch_checkpoint([(e.epoch, e.start_offset) for e in epochs
                                                          if e.start_offset < next_offset])}


def _segment_epochs(entries: list[Any], start: int, end: int) -> list[tuple[int, int]]:
    """The leader epochs of the offsets [start, end]: the one in force at ``start``, then those starting inside."""
    out: list[tuple[int, int]] = []
    for entry in entries:
        if entry.start_offset > end:
            break
        if entry.start_offset <= start:
            out = [(entry.epoch, start)]
        else:
            out.append((entry.epoch, entry.start_offset))
    return out


def index_position(index: bytes, relative_offset: int) -> int:
    """The position of the largest entry of an ``.index`` at or below ``relative_offset`` (0 when none); a
    preallocated tail of zero entries ends the index."""
    position = 0
    size = OFFSET_INDEX_ENTRY.size
    for i in range(0, len(index) - len(index) % size, size):
        rel, pos = OFFSET_INDEX_ENTRY.unpack_from(index, i)
        if i > 0 and rel == 0 and pos == 0:
            break
        if rel > relative_offset:
            break
        position = pos
    return position


class RemoteStorageStats:
    """Kafka 3.7's RemoteStorageMetrics of BrokerTopicMetrics, per topic: counters of copies, fetches, deletes and
    follower aux-state builds (each with its errors) and the bytes copied and fetched, and the delete lag of the
    expiry pass that runs. Counted here, exported by kcli.broker.metrics (the copy lag is computed there, from
    the logs)."""

    COUNTERS = ("remote_copy_bytes", "remote_copy_requests", "remote_copy_errors", "remote_fetch_bytes",
                "remote_fetch_requests", "remote_fetch_errors", "remote_delete_requests", "remote_delete_errors",
                "build_remote_log_aux_state_requests", "build_remote_log_aux_state_errors")

    def __init__(self) -> None:
        self._lock = threading.Lock()  # the reader and copier pools count from their threads
        self.counters: dict[str, dict[str, int]] = {name: {} for name in self.COUNTERS}
        self.delete_lag: dict[tuple[str, int], tuple[int, int]] = {}  # partition -> (segments, bytes) to delete

    def count(self, name: str, topic: str, amount: int = 1) -> None:
        with self._lock:
            per_topic = self.counters[name]
            per_topic[topic] = per_topic.get(topic, 0) + amount

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {name: dict(v) for name, v in self.counters.items()}


def copy_candidates(segments: list[Any], highest: int, start: int, stable: int) -> Iterator[tuple[Any, Any]]:
    """Kafka's RLMTask copy rule: the rolled segments (each with the segment after it) past the highest remote
    offset, from the log start, whose end is below the last stable offset, oldest first. The copier takes the
    first; the copy lag (KIP-963) counts them all."""
    for segment, following in zip(segments, segments[1:]):
        if following.base_offset - 1 <= highest or segment.base_offset < start:
            continue
        if following.base_offset > stable:
            return
        yield segment, following


def _start_offset(segment: RemoteSegment) -> int:
    return segment.ref.start_offset


class _NotCached(Exception):
    """An answer needs an index GET: the caller moves to a reader thread."""


class RemoteLogManager:
    def __init__(self, config: Any, rsm: FsspecRemoteStorageManager, replica_manager: Any, admin: Any,
                 broker_id: int, *, endpoint: Any = None, security: Any = None) -> None:
        self.config = config
        self.endpoint = endpoint  # broker id -> (host, port): a metadata partition led by another broker
        self.security = security  # kcli.broker.security.inter_broker.InterBrokerSecurity (None: PLAINTEXT)
        self.rsm = rsm
        self.replica_manager = replica_manager
        self.admin = admin
        self.broker_id = broker_id
        self.cache = RemoteLogMetadataCache()
        self.metadata_partitions = int(config["rlmm.config.remote.log.metadata.topic.num.partitions"])
        self.metadata_replication = int(config["rlmm.config.remote.log.metadata.topic.replication.factor"])
        self.interval_s = int(config["remote.log.manager.task.interval.ms"]) / 1000
        self._loaded: dict[tuple[str, int], int] = {}  # partition -> the leader epoch its metadata was loaded at
        self._copying: set[uuid.UUID] = set()
        self._warned: set[tuple[str, int]] = set()
        self._cursors: dict[tuple[str, int], int] = {}  # a followed metadata partition: the next offset to read
        self._deletions: set[asyncio.Task] = set()
        self._deleting: dict[tuple[str, int], dict[uuid.UUID, RemoteSegment]] = {}
        self._index_cache: OrderedDict[tuple[uuid.UUID, str], bytes] = OrderedDict()
        self._index_lock = threading.Lock()
        self._chunks: OrderedDict[tuple[uuid.UUID, int], bytes] = OrderedDict()
        self._chunks_in_flight: dict[tuple[uuid.UUID, int], Future] = {}  # GETs running: a second read waits
        self.chunks_prefetched = 0  # chunk GETs started ahead of a sequential reader
        # where the last reads of each segment ended: (segment, next offset) -> byte position, so a consumer
        # reading on needs neither the offset index nor its GET
        self._next_positions: OrderedDict[tuple[uuid.UUID, int], int] = OrderedDict()
        self.copied_segments = 0
        self.stats = RemoteStorageStats()
        # KIP-956: the copier waits while its byte rate is over remote.log.manager.copy.max.bytes.per.second; a
        # consumer's remote read is skipped (empty, no error) while the readers' rate is over the fetch bound
        self.copy_quota = ReplicationQuotaManager(
            "RLMCopyQuota", window_num=int(config["remote.log.manager.copy.quota.window.num"]),
            window_size_seconds=int(config["remote.log.manager.copy.quota.window.size.seconds"]))
        self.fetch_quota = ReplicationQuotaManager(
            "RLMFetchQuota", window_num=int(config["remote.log.manager.fetch.quota.window.num"]),
            window_size_seconds=int(config["remote.log.manager.fetch.quota.window.size.seconds"]))
        self.copy_throttled_ms = 0  # time the copier waited for its quota (Kafka's remote-copy-throttle-time)
        self.fetches_throttled = 0  # remote reads skipped for the fetch quota
        self.quotas_changed({})
        # Kafka's remote.log.reader.threads and remote.log.manager.thread.pool.size: reads and copies in pools of
        # their own, so a consumer's remote read never queues behind flushes or uploads
        self.reader_pool = ThreadPoolExecutor(int(config["remote.log.reader.threads"]),
                                              thread_name_prefix="kcli-remote-reader")
        self.copier_pool = ThreadPoolExecutor(int(config["remote.log.manager.thread.pool.size"]),
                                              thread_name_prefix="kcli-remote-copier")
        # uploads to an object store in copier processes (one started as run() starts): botocore's signing and
        # request handling hold a GIL, theirs and not the broker's (issue 28: the producer's p99 while uploads run);
        # a local store's copies are file copies and renames, which release it, so they stay in the thread pool
        self._copier_workers = int(config["remote.log.manager.thread.pool.size"])
        self._closed = False
        self.copier_processes = None if rsm.local else copier_processes(rsm.config, self._copier_workers)

    def quotas_changed(self, dynamic: Mapping[str, str]) -> None:
        """The copy and fetch bounds: the dynamic broker configs over server.properties (Long.MAX: unbounded)."""
        for quota, key in ((self.copy_quota, "remote.log.manager.copy.max.bytes.per.second"),
                           (self.fetch_quota, "remote.log.manager.fetch.max.bytes.per.second")):
            value = int(dynamic.get(key) or self.config[key])
            quota.update_quota(None if value >= LONG_MAX else value)

    def fetch_throttled(self) -> bool:
        """RemoteLogManager.getFetchThrottleTimeMs() > 0: the readers' rate is over its bound (counted)."""
        if self.fetch_quota.is_quota_exceeded():
            self.fetches_throttled += 1
            return True
        return False

    async def _copy_quota_available(self, size: int) -> None:
        """Wait until the copier's rate is under its bound, then count the segment's bytes (Kafka records the
        whole segment before copying it, so a large segment makes the next ones wait)."""
        while self.copy_quota.is_quota_exceeded():
            started = time.monotonic()
            await asyncio.sleep(0.1)
            self.copy_throttled_ms += round((time.monotonic() - started) * 1000)
        self.copy_quota.record(size)

    def close(self) -> None:
        self._closed = True
        self.reader_pool.shutdown(wait=False, cancel_futures=True)
        self.copier_pool.shutdown(wait=False, cancel_futures=True)
        if self.copier_processes is not None:  # an upload cut short is a STARTED copy, deleted by the next leader
            stop_copier_processes(self.copier_processes)

    async def read_async(self, topic: str, index: int, offset: int, max_bytes: int, upper: int) -> bytes | memoryview:
        self.stats.count("remote_fetch_requests", topic)
        try:
            found = await asyncio.get_running_loop().run_in_executor(self.reader_pool, self.read, topic, index,
                                                                     offset, max_bytes, upper)
        except OffsetOutOfRangeError:
            raise  # the client's offset, not a failed read
        except Exception:
            self.stats.count("remote_fetch_errors", topic)
            raise
        self.stats.count("remote_fetch_bytes", topic, len(found))
        self.fetch_quota.record(len(found))
        return found

    async def _in_copier(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.copier_pool, fn, *args)

    async def copy_segment_data(self, ref: RemoteSegmentRef, files: Mapping[str, Any]) -> None:
        """RemoteStorageManager.copyLogSegmentData, in a copier process when there is a pool of them. A process
        that dies (killed, out of memory) fails this copy with a RemoteStorageError and the next copy gets a new
        pool: the copy is retried as any failed one (its STARTED segment is deleted, then copied anew)."""
        pool = self.copier_processes
        if pool is None:
            await self._in_copier(self.rsm.copy_log_segment_data, ref, files)
            return
        try:
            await asyncio.get_running_loop().run_in_executor(pool, copy_in_process, ref, files)
        except BrokenProcessPool as exc:
            if self.copier_processes is pool and not self._closed:
                self.copier_processes = copier_processes(self.rsm.config, self._copier_workers)
                stop_copier_processes(pool)
            raise RemoteStorageError(f"copying segment {ref.stem} of {ref.topic}-{ref.partition}: the copier "
                                     f"process died ({exc})", path=self.rsm.display_key(ref, "log")) from exc

    # -- the task ------------------------------------------------------------------------------------
    async def run(self) -> None:
        """Every remote.log.manager.task.interval.ms: copy, then expire, on each tiered partition led here."""
        if self.copier_processes is not None:  # the copier's start (an interpreter, s3fs) not on the first copy's path
            self.copier_processes.submit(copier_ready)
        self.reader_pool.submit(self._reader_ready)  # nor the read path's botocore client on the first remote fetch
        while True:
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("remote log manager: pass failed; retrying next round")
            await asyncio.sleep(self.interval_s)

    def _reader_ready(self) -> None:
        try:
            self.rsm.presigned  # noqa: B018 - made once: ~0.1 s of botocore's start the first consumer would wait
        except Exception as exc:  # the first read makes it again and reports what fails
            log.debug("tiered storage: the S3 read path could not be made yet: %s", exc)

    def tiered(self, partition: Any) -> bool:
        return bool(partition.log.config.remote_storage_enable) and not partition.topic.startswith("__")

    async def run_once(self) -> None:
        for partition in list(self.replica_manager.partitions.values()):
            if not self.tiered(partition):
                partition.log.remote_log_enabled = False
                continue
            partition.log.remote_log_enabled = True
            if not partition.is_leader:
                self._loaded.pop((partition.topic, partition.index), None)
                await self._follow(partition)
                continue
            if not await self._ensure_loaded(partition):
                continue
            await self._copy(partition)
            await self._expire(partition)

    # -- metadata ------------------------------------------------------------------------------------
    def _metadata_tp(self, partition: Any) -> tuple[str, int]:
        return REMOTE_LOG_METADATA_TOPIC, metadata_partition(partition.topic_id, partition.index,
                                                             self._metadata_partition_count())

    def _metadata_partition_count(self) -> int:
        count = self.admin.metadata.partition_count(REMOTE_LOG_METADATA_TOPIC)
        return int(count) if count else self.metadata_partitions

    async def _ensure_metadata_topic(self) -> bool:
        if self.admin.metadata.partition_count(REMOTE_LOG_METADATA_TOPIC):
            return True
        if self.admin.zk is not None:
            replication = min(self.metadata_replication, max(1, len(self.admin.metadata.alive_brokers())))
        else:
            replication = 1
        try:  # on the event loop, as the group coordinator creates __consumer_offsets: the admin is not thread-safe
            self.admin.create_topic(REMOTE_LOG_METADATA_TOPIC, self.metadata_partitions, replication,
                                    configs={"retention.ms": "-1", "cleanup.policy": "delete"})
        except KcliError as exc:
            if not topic_exists(exc):
                raise
        return bool(self.admin.metadata.partition_count(REMOTE_LOG_METADATA_TOPIC))

    async def _ensure_loaded(self, partition: Any) -> bool:
        """The partition's segments from the metadata topic, once per leader epoch (a new leader resumes from
        them). False when the metadata partition is not led here (cluster): the partition stays local."""
        key = (partition.topic, partition.index)
        if self._loaded.get(key) == partition.leader_epoch:
            return True
        if not await self._ensure_metadata_topic():
            return False
        meta_tp = self._metadata_tp(partition)
        meta = self.replica_manager.find(*meta_tp)
        if meta is None and self.endpoint is not None:
            # no replica of the metadata partition here (a cluster larger than its replication factor): read it
            # from its leader, as Kafka's RLMM consumer does
            try:
                found, _ = await self._fetch_metadata_remote(meta_tp, 0)
            except (OSError, TimeoutError, KcliError) as exc:
                if key not in self._warned:
                    self._warned.add(key)
                    log.warning("tiered storage: %s-%d waits: reading %s-%d from its leader failed: %s",
                                partition.topic, partition.index, *meta_tp, exc)
                return False
            records = [r for r in found if _about(r, partition.topic, partition.index)]
        elif meta is None or (not meta.is_leader and self.endpoint is None):
            if key not in self._warned:
                self._warned.add(key)
                log.warning("tiered storage: %s-%d stays local: broker %d has no replica of its metadata partition "
                            "%s-%d", partition.topic, partition.index, self.broker_id, *meta_tp)
            return False
        else:
            records = await asyncio.to_thread(self._read_metadata, meta, partition.topic, partition.index)
        self._warned.discard(key)
        with self.cache.lock:
            self.cache.partitions.pop(key, None)
        for record in records:
            self.cache.apply(record)
        state = self.cache.state(*key)
        finished = state.finished()
        with partition.managed.lock:
            partition.log.highest_offset_in_remote_storage = state.highest_copied_offset()
            if finished and finished[0].start_offset < partition.log.log_start_offset:
                # the loader starts a log at its first local segment; with tiered storage it starts remotely
                partition.log.log_start_offset = finished[0].start_offset
        self._loaded[key] = partition.leader_epoch
        log.info("tiered storage: %s-%d: %d remote segment(s), highest remote offset %d", partition.topic,
                 partition.index, len(finished), state.highest_copied_offset())
        return True

    async def _follow(self, partition: Any) -> None:
        """A follower learns what its leader copied from its own replica of the metadata partition (Kafka's
        RLMM on a follower): its highest remote offset, so local retention deletes what is safely remote here
        too, and the segments a consumer of this replica (or this broker as the next leader) needs."""
        if not self.admin.metadata.partition_count(REMOTE_LOG_METADATA_TOPIC):
            return
        meta_tp = self._metadata_tp(partition)
        meta = self.replica_manager.find(*meta_tp)
        key = meta_tp
        start = self._cursors.get(key, 0)
        records: list[RemoteLogMetadataRecord] = []
        if meta is None:
            if self.endpoint is None:
                return
            try:  # no replica here: from the metadata partition's leader (Kafka's RLMM consumer)
                records, end = await self._fetch_metadata_remote(meta_tp, start)
            except (OSError, TimeoutError, KcliError) as exc:
                log.debug("tiered storage: reading %s-%d from its leader failed: %s", *meta_tp, exc)
                return
            self._cursors[key] = end
        elif meta.high_watermark > start:
            end = meta.high_watermark
            records, _ = await asyncio.to_thread(self._read_metadata_range, meta, start, end)
            self._cursors[key] = end
        if records:
            led = {(p.topic, p.index) for p in self.replica_manager.partitions.values() if p.is_leader}
            for record in records:
                if _user_partition(record) not in led:  # a partition led here has it from its own writes
                    self.cache.apply(record)
        highest = self.cache.state(partition.topic, partition.index).highest_copied_offset()
        with partition.managed.lock:
            partition.log.highest_offset_in_remote_storage = highest

    def _read_metadata(self, meta: Any, topic: str, index: int) -> list[RemoteLogMetadataRecord]:
        """Every record of the metadata partition about this user partition, in order (blocking)."""
        with meta.managed.lock:
            offset, end = meta.log.log_start_offset, meta.log.log_end_offset
        records, _ = self._read_metadata_range(meta, offset, end)
        return [r for r in records if _about(r, topic, index)]

    async def _fetch_metadata_remote(self, tp: tuple[str, int], offset: int) -> tuple[list[RemoteLogMetadataRecord],
                                                                                        int]:
        """The metadata partition's records from ``offset`` to its high watermark, fetched from its leader as a
        consumer (replica id -1), and the offset after them. OSError/TimeoutError when the leader is unknown
        or unreachable; KcliError when it answers an error."""
        import datetime

        from kio.schema.fetch.v12 import request as req
        from kio.static.primitive import i8, i32, i64

        from kcli.broker.network_client import send_request
        from kcli.protocol import ApiKey
        from kcli.records import BatchReader

        state = self.admin.metadata.partition_state(*tp)
        endpoint = self.endpoint(state.leader) if state is not None and state.leader >= 0 else None
        if endpoint is None:
            raise OSError(f"no live leader for {tp[0]}-{tp[1]}")
        out: list[RemoteLogMetadataRecord] = []
        while True:
            body = req.FetchRequest(
                replica_id=i32(-1), max_wait=datetime.timedelta(0), min_bytes=i32(1), max_bytes=i32(1 << 20),
                isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
                topics=(req.FetchTopic(topic=tp[0], partitions=(req.FetchPartition(
                    partition=i32(tp[1]), current_leader_epoch=i32(-1), fetch_offset=i64(offset),
                    log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)),),
                forgotten_topics_data=(), rack_id="")
            response = await send_request(*endpoint, ApiKey.FETCH, 12, body,
                                          client_id=f"broker-{self.broker_id}-remote-log-metadata", timeout=30,
                                          **({} if self.security is None else {"security": self.security}))
            [data] = [p for t in response.responses for p in t.partitions]
            if data.error_code != 0:
                raise KcliError(f"fetching {tp[0]}-{tp[1]} from broker {state.leader}: error {int(data.error_code)}")
            before = offset
            for batch in BatchReader(bytes(data.records or b"")):
                for record in batch.records():
                    if record.offset < offset:
                        continue
                    try:
                        out.append(decode_remote_log_metadata(record.value))
                    except KcliError as exc:
                        log.warning("skipping undecodable %s record at offset %d: %s", REMOTE_LOG_METADATA_TOPIC,
                                    record.offset, exc)
                offset = max(offset, batch.next_offset)
            if offset >= int(data.high_watermark) or offset == before:
                return out, offset

    def _read_metadata_range(self, meta: Any, offset: int, end: int) -> tuple[list[RemoteLogMetadataRecord], int]:
        """The decodable records of the metadata partition in [offset, end), and where reading stopped."""
        out = []
        reader_log = meta.log
        from kcli.records import BatchReader

        while offset < end:
            with meta.managed.lock:
                found = reader_log.read(offset, 1 << 20, max_offset=end)
                raw = found.read() if found is not None else b""
            if not raw:
                break
            for batch in BatchReader(raw):
                for record in batch.records():
                    try:
                        decoded = decode_remote_log_metadata(record.value)
                    except KcliError as exc:
                        log.warning("skipping undecodable %s record at offset %d: %s", REMOTE_LOG_METADATA_TOPIC,
                                    record.offset, exc)
                        continue
                    if record.offset >= offset:
                        out.append(decoded)
                offset = batch.next_offset
        return out, offset

    async def _publish(self, partition: Any, value: bytes) -> None:
        """Append one record to the partition's metadata partition (acks=all), here when it is led here, else a
        Produce to its leader (Kafka's RLMM producer), then apply it to the cache."""
        tp = self._metadata_tp(partition)
        batch = build_record_batch([Record(0, int(time.time() * 1000), None, value)])
        timeout_ms = int(self.config["offsets.commit.timeout.ms"])
        meta = self.replica_manager.find(*tp)
        if meta is not None and meta.is_leader or self.endpoint is None:
            result = (await self.replica_manager.append_and_wait(-1, timeout_ms, {tp: batch},
                                                                 origin=AppendOrigin.COORDINATOR))[tp]
            error = int(result.error)
        else:
            error = await self._produce_remote(tp, batch, timeout_ms)
        if error != 0:
            raise KcliError(f"writing to {tp[0]}-{tp[1]} failed: error {error}")
        self.cache.apply(decode_remote_log_metadata(value))

    async def _produce_remote(self, tp: tuple[str, int], batch: bytes, timeout_ms: int) -> int:
        import datetime

        from kio.schema.produce.v9 import request as req
        from kio.static.primitive import i16, i32

        from kcli.broker.network_client import send_request
        from kcli.protocol import ApiKey

        state = self.admin.metadata.partition_state(*tp)
        endpoint = self.endpoint(state.leader) if state is not None and state.leader >= 0 else None
        if endpoint is None:
            return 6  # NOT_LEADER_OR_FOLLOWER: the next pass tries again
        body = req.ProduceRequest(transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(milliseconds=timeout_ms),
                                  topic_data=(req.TopicProduceData(name=tp[0], partition_data=(
                                      req.PartitionProduceData(index=i32(tp[1]), records=batch),)),))
        response = await send_request(*endpoint, ApiKey.PRODUCE, 9, body,
                                      client_id=f"broker-{self.broker_id}-remote-log-metadata",
                                      timeout=timeout_ms / 1000 + 5,
                                      **({} if self.security is None else {"security": self.security}))
        for topic in response.responses:
            for part in topic.partition_responses:
                return int(part.error_code)
        return 1

    # -- copy ----------------------------------------------------------------------------------------
    async def _copy(self, partition: Any) -> None:
        """Kafka's RLMTask.copyLogSegmentsToRemote: each rolled segment past the highest remote offset whose
        end is below the last stable offset, oldest first."""
        key = (partition.topic, partition.index)
        while partition.is_leader:
            state = self.cache.state(*key)
            highest = state.highest_copied_offset()
            with partition.managed.lock:
                log_ = partition.log
                segments = list(log_.log_segments)
                stable = partition.last_stable_offset
                start = log_.log_start_offset
                epochs = list(log_.leader_epochs.entries)
            candidate = next(copy_candidates(segments, highest, start, stable), None)
            if candidate is None:
                return
            await self._copy_quota_available(candidate[0].size)
            if not partition.is_leader:
                return
            await self._copy_segment(partition, log_, *candidate, epochs)

    async def _copy_segment(self, partition: Any, log_: Any, segment: Any, following: Any, epochs: list[Any]) -> None:
        end = following.base_offset - 1
        ref = RemoteSegmentRef(partition.topic, partition.topic_id, partition.index, uuid.uuid4(), segment.base_offset)
        now = int(time.time() * 1000)
        txn = segment.txn_index_path
        remote = RemoteSegment(ref, end, segment.largest_timestamp(), segment.size,
                               _segment_epochs(epochs, segment.base_offset, end),
                               S.COPY_SEGMENT_STARTED, self.broker_id, now,
                               txn_index_empty=not txn.exists() or txn.stat().st_size == 0)
        self._copying.add(ref.segment_id)
        self.stats.count("remote_copy_requests", partition.topic)
        try:
            await self._publish(partition, segment_metadata_record(remote))
            files = segment_files(log_.directory, segment, following.base_offset, epochs)
            await self.copy_segment_data(ref, files)
            await self._publish(partition, segment_update_record(ref, S.COPY_SEGMENT_FINISHED, self.broker_id,
                                                                 int(time.time() * 1000)))
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats.count("remote_copy_errors", partition.topic)
            raise
        finally:
            self._copying.discard(ref.segment_id)
        self.stats.count("remote_copy_bytes", partition.topic, remote.size)
        with partition.managed.lock:
            log_.highest_offset_in_remote_storage = max(log_.highest_offset_in_remote_storage, end)
        self.copied_segments += 1
        log.info("tiered storage: %s-%d: copied segment %d..%d (%d bytes) to %s", partition.topic, partition.index,
                 segment.base_offset, end, remote.size, self.rsm.display_key(ref, "log"))

    # -- retention -----------------------------------------------------------------------------------
    async def _expire(self, partition: Any) -> None:
        """Kafka's RLMTask.cleanupExpiredRemoteLogSegments: dangling copies (STARTED, not being copied: a
        copy killed midway) and half-done deletes go; then, oldest first, the finished segments below the
        log start offset or beyond retention.ms / retention.bytes (the total: remote plus local-only
        bytes). The log start offset follows."""
        key = (partition.topic, partition.index)
        state = self.cache.state(*key)
        with self.cache.lock:
            pending = [s for s in state.segments.values()
                       if (s.state is S.COPY_SEGMENT_STARTED and s.ref.segment_id not in self._copying)
                       or s.state is S.DELETE_SEGMENT_STARTED]
        for segment in pending:
            await self._delete_segment(partition, segment, "unfinished copy" if segment.state is S.COPY_SEGMENT_STARTED
                                       else "unfinished delete", move_start=False)
        finished = state.finished()
        if not finished:
            return
        with partition.managed.lock:
            log_ = partition.log
            config = log_.config
            log_start = log_.log_start_offset
            highest = log_.highest_offset_in_remote_storage
            local_only = sum(s.size for s in log_.log_segments if s.base_offset > highest)
        now = int(time.time() * 1000)
        remaining = -1
        if config.retention_bytes >= 0:
            remaining = sum(s.size for s in finished) + local_only - config.retention_bytes
        expired: list[tuple[RemoteSegment, str]] = []
        for segment in finished:
            if segment.end_offset < log_start:
                reason = "log start"
            elif config.retention_ms >= 0 and now - segment.max_timestamp > config.retention_ms:
                reason = "time"
            elif remaining >= 0 and remaining - segment.size >= 0:
                reason = "size"
            else:
                break
            remaining -= segment.size
            expired.append((segment, reason))
        # RemoteDeleteLagSegments/Bytes (KIP-963): what this pass still has to delete, down to none
        # (a failed delete leaves its lag standing until a pass gets through)
        segments, size = len(expired), sum(s.size for s, _ in expired)
        for segment, reason in expired:
            self.stats.delete_lag[key] = (segments, size)
            await self._delete_segment(partition, segment, reason, move_start=True)
            segments, size = segments - 1, size - segment.size
        self.stats.delete_lag.pop(key, None)

    async def _delete_segment(self, partition: Any, segment: RemoteSegment, reason: str, *, move_start: bool) -> None:
        self.stats.count("remote_delete_requests", partition.topic)
        try:
            await self._delete_segment_once(partition, segment, reason, move_start=move_start)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats.count("remote_delete_errors", partition.topic)
            raise

    async def _delete_segment_once(self, partition: Any, segment: RemoteSegment, reason: str, *,
                                   move_start: bool) -> None:
        ref = segment.ref
        if segment.state is not S.DELETE_SEGMENT_STARTED:
            await self._publish(partition, segment_update_record(ref, S.DELETE_SEGMENT_STARTED, self.broker_id,
                                                                 int(time.time() * 1000)))
        if move_start:  # before the objects go: a fetch below the new start is out of range, never a missing key
            with partition.managed.lock:
                log_ = partition.log
                log_.log_start_offset = max(log_.log_start_offset, segment.end_offset + 1)
                log_.leader_epochs.truncate_from_start(min(log_.log_start_offset, log_.log_end_offset))
        await self._in_copier(self.rsm.delete_log_segment_data, ref)
        with self._index_lock:
            for kind in ("index", "timeindex", "txnindex"):
                self._index_cache.pop((ref.segment_id, kind), None)
            for key in [k for k in self._chunks if k[0] == ref.segment_id]:
                del self._chunks[key]
        await self._publish(partition, segment_update_record(ref, S.DELETE_SEGMENT_FINISHED, self.broker_id,
                                                             int(time.time() * 1000)))
        log.info("tiered storage: %s-%d: deleted remote segment %d..%d (%s)", partition.topic, partition.index,
                 segment.start_offset, segment.end_offset, reason)

    # -- deletion ------------------------------------------------------------------------------------
    def partition_deleted(self, partition: Any) -> None:
        """A tiered partition's replica was deleted here (DeleteTopics, StopReplica with delete): its remote data
        goes too, as Kafka's RemoteLogManager.stopPartitions(deleteRemoteLog) does; every replica that knows
        segments deletes them (a second delete of an object is no error)."""
        if not self.tiered(partition) or not self.cache.view(partition.topic, partition.index).segments:
            return
        with self.cache.lock:
            self._deleting[(partition.topic, partition.index)] = dict(
                self.cache.partitions.get((partition.topic, partition.index), PartitionRemoteState()).segments)
        task = asyncio.get_running_loop().create_task(self._delete_partition(partition))
        self._deletions.add(task)
        task.add_done_callback(self._deletions.discard)

    async def _delete_partition(self, partition: Any) -> None:
        tip = {"name": partition.topic, "id": partition.topic_id, "partition": partition.index}

        def marker(state: RemotePartitionDeleteState) -> bytes:
            return encode_remote_log_metadata(2, {"topicIdPartition": tip, "brokerId": self.broker_id,
                                                  "eventTimestampMs": int(time.time() * 1000),
                                                  "remotePartitionDeleteState": int(state)})
        try:
            await self._publish(partition, marker(RemotePartitionDeleteState.DELETE_PARTITION_STARTED))
        except Exception as exc:  # the metadata topic unreachable: the objects still go
            log.warning("tiered storage: %s-%d: deleting the remote data unrecorded: %s", partition.topic,
                        partition.index, exc)
        # the STARTED marker dropped the partition's state from the cache: the segments as they were before it
        segments = list(self._deleting.pop((partition.topic, partition.index), {}).values())
        for segment in segments:
            try:
                await self._in_copier(self.rsm.delete_log_segment_data, segment.ref)
            except Exception as exc:
                log.warning("tiered storage: deleting %s failed: %s", self.rsm.display_key(segment.ref, "log"), exc)
        try:
            await self._publish(partition, marker(RemotePartitionDeleteState.DELETE_PARTITION_FINISHED))
        except Exception:
            pass
        log.info("tiered storage: %s-%d deleted: %d remote segment(s) removed", partition.topic, partition.index,
                 len(segments))

    # -- reads ---------------------------------------------------------------------------------------
    def read(self, topic: str, index: int, offset: int, max_bytes: int, upper: int) -> bytes | memoryview:
        """Kafka's RemoteLogReader: whole batches from the remote segment holding ``offset`` (at least one,
        at most ``max_bytes`` after it), none at or past ``upper``. Blocking: a worker thread's work."""
        finished = self.cache.view(topic, index).finished()
        i = bisect.bisect_right(finished, offset, key=_start_offset) - 1
        while 0 <= i < len(finished):
            segment = finished[i]
            if offset > segment.end_offset:
                i += 1
                if i < len(finished) and finished[i].start_offset > offset:
                    offset = finished[i].start_offset
                continue
            started = time.perf_counter()
            found, end = self._read_segment(segment, offset, max_bytes, upper)
            log.debug("tiered storage: %s-%d: %d bytes from offset %d read remotely in %.1f ms", topic, index,
                      len(found), offset, (time.perf_counter() - started) * 1000)
            if found:
                self._prefetch(finished, i, end)
                return found
            i += 1  # nothing at or after the offset in this segment (compacted away): the next one
            if i < len(finished):
                offset = max(offset, finished[i].start_offset)
        raise OffsetOutOfRangeError(f"offset {offset} of {topic}-{index} is not in any remote segment")

    def _offset_index(self, segment: RemoteSegment, kind: str = "index", *, cached_only: bool = False) -> bytes:
        """A remote segment's index of ``kind``, from the cache or by a GET (_NotCached instead with
        ``cached_only``: the caller is on the event loop)."""
        sid = (segment.ref.segment_id, kind)
        with self._index_lock:
            cached = self._index_cache.get(sid)
            if cached is not None:
                self._index_cache.move_to_end(sid)
                return cached
        if cached_only:
            raise _NotCached
        index = self.rsm.fetch_index(segment.ref, kind)
        with self._index_lock:
            self._index_cache[sid] = index
            while len(self._index_cache) > INDEX_CACHE_ENTRIES:
                self._index_cache.popitem(last=False)
        return index

    def _range(self, segment: RemoteSegment, start: int, end: int) -> bytes | memoryview:
        """Bytes [start, end) of a remote segment's .log, through the chunk cache: a view of the cached chunk when
        the range lies in one (no copy), else the pieces joined."""
        end = min(end, segment.size)
        if start >= end:
            return b""
        first = start // CHUNK_BYTES
        if (end - 1) // CHUNK_BYTES == first:
            return memoryview(self._chunk(segment, first))[start - first * CHUNK_BYTES:end - first * CHUNK_BYTES]
        parts = []
        pos = start
        while pos < end:
            index = pos // CHUNK_BYTES
            chunk = self._chunk(segment, index)
            piece = chunk[pos - index * CHUNK_BYTES:end - index * CHUNK_BYTES]
            if not piece:
                break  # the object is shorter than its metadata says
            parts.append(piece)
            pos += len(piece)
        return b"".join(parts)

    def _chunk(self, segment: RemoteSegment, index: int) -> bytes:
        """Chunk ``index`` of a remote segment's .log: from the cache, from a GET already running for it (a
        prefetch), or by a GET of its own."""
        key = (segment.ref.segment_id, index)
        with self._index_lock:
            cached = self._chunks.get(key)
            if cached is not None:
                self._chunks.move_to_end(key)
                return cached
            running = self._chunks_in_flight.get(key)
            if running is None:
                running = self._chunks_in_flight[key] = Future()
                mine = True
            else:
                mine = False
        if not mine:
            return running.result()  # a running GET's bytes, or its error: the same as doing it again
        try:
            data = self.rsm.fetch_log_segment(segment.ref, index * CHUNK_BYTES,
                                              min(segment.size, (index + 1) * CHUNK_BYTES))
        except BaseException as exc:
            with self._index_lock:
                del self._chunks_in_flight[key]
            running.set_exception(exc)
            raise
        with self._index_lock:
            self._chunks[key] = data
            while len(self._chunks) > CHUNK_CACHE_ENTRIES:
                self._chunks.popitem(last=False)
            del self._chunks_in_flight[key]
        running.set_result(data)
        return data

    def _prefetch(self, finished: list[RemoteSegment], i: int, position: int) -> None:
        """The next chunk a sequential reader of ``finished[i]`` needs after a read that ended at ``position``,
        fetched now in the reader pool, so the consumer's next fetches do not wait for its GET (the bench's remote
        reads spent a quarter of their time there). One chunk ahead at most: the one where the next read starts,
        the one after it, or the next segment's first. Kafka's own reader does not prefetch; Aiven's
        tiered-storage plugin does, the same way."""
        segment = finished[i]
        chunk = position // CHUNK_BYTES
        wanted = [(segment, chunk), (segment, chunk + 1)] if position < segment.size else []
        if i + 1 < len(finished):
            wanted.append((finished[i + 1], 0))
        with self._index_lock:
            target = next(((s, c) for s, c in wanted if c * CHUNK_BYTES < s.size
                           and (s.ref.segment_id, c) not in self._chunks
                           and (s.ref.segment_id, c) not in self._chunks_in_flight), None)
        if target is None or self._closed:
            return
        self.chunks_prefetched += 1
        try:
            self.reader_pool.submit(self._prefetch_chunk, *target)
        except RuntimeError:  # the pool is shut down: the broker is stopping
            pass

    def _prefetch_chunk(self, segment: RemoteSegment, index: int) -> None:
        try:
            self._chunk(segment, index)
        except Exception as exc:  # the read that needs it does the GET again and reports what fails
            log.debug("tiered storage: prefetching chunk %d of %s failed: %s", index, segment.ref.stem, exc)

    def _read_segment(self, segment: RemoteSegment, offset: int, max_bytes: int,
                      upper: int) -> tuple[bytes | memoryview, int]:
        """The whole batches from ``offset`` (the first one at least, then up to ``max_bytes``), none at or past
        ``upper``, and the position after them: they are contiguous in the segment, so the answer is one span,
        a view of the cached chunk when it lies in one."""
        sid = segment.ref.segment_id
        with self._index_lock:
            position = self._next_positions.get((sid, offset))
        if position is None:
            # the segment's start needs no index (its first batch holds the start offset, or a later one after
            # compaction); elsewhere the index gives a position at or before the offset's batch
            position = 0 if offset <= segment.start_offset else index_position(
                self._offset_index(segment), offset - segment.start_offset)
        want = max(max_bytes, MIN_REMOTE_READ)
        data = self._range(segment, position, position + want)
        first = -1  # where the first batch holding ``offset`` or later starts in ``data``
        total = pos = 0
        next_offset = offset
        while position + pos < segment.size and (total < max_bytes or first < 0):
            head = HEADER_SIZE_UP_TO_LAST_OFFSET_DELTA
            if pos + head > len(data):  # the next batch's header (through lastOffsetDelta) is not here yet
                data = bytes(data) + bytes(self._range(segment, position + len(data), position + pos + want))
                if pos + head > len(data):
                    break
            base, length = read_log_overhead(data, pos)
            size = LOG_OVERHEAD + length
            if base >= upper:
                break
            last = base + read_last_offset_delta(data, pos)
            if last >= offset and first >= 0 and total + size > max_bytes:
                break
            if pos + size > len(data):
                data = bytes(data) + bytes(self._range(segment, position + len(data), position + pos + size))
                if pos + size > len(data):
                    break  # the object is shorter than its metadata says
            if last >= offset:
                if first < 0:
                    first = pos
                total += size
                next_offset = last + 1
            pos += size
        if first < 0:
            return b"", position + pos
        end = position + first + total
        with self._index_lock:
            self._next_positions[(sid, next_offset)] = end
            while len(self._next_positions) > NEXT_POSITION_ENTRIES:
                self._next_positions.popitem(last=False)
        return memoryview(data)[first:first + total], end  # no copy: the socket edge sends it from the chunk

    async def offset_for_timestamp_async(self, topic: str, index: int, timestamp: int, log_start: int) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.reader_pool, self.offset_for_timestamp, topic,
                                                                index, timestamp, log_start)

    def offset_for_timestamp(self, topic: str, index: int, timestamp: int, log_start: int) -> Any:
        """ListOffsets by time in the remote segments (Kafka's RemoteLogManager.findOffsetByTimestamp): the first
        segment whose largest timestamp reaches ``timestamp``, its time index to start near it, then its batches
        and records: (offset, timestamp) of the first record at or after the time, None when no remote segment
        has one (the local log is searched then)."""
        from kcli.records import RecordBatch
        from kcli.records.types import TimestampType
        from kcli.storage.reader import TimestampMatch

        for segment in self.cache.view(topic, index).finished():
            if segment.end_offset < log_start or segment.max_timestamp < timestamp:
                continue
            relative = 0
            times = self._offset_index(segment, "timeindex")
            entry = TIME_INDEX_ENTRY.size
            for i in range(0, len(times) - len(times) % entry, entry):
                ts, rel = TIME_INDEX_ENTRY.unpack_from(times, i)
                if (i > 0 and ts == 0 and rel == 0) or ts >= timestamp:
                    break
                relative = rel
            position = index_position(self._offset_index(segment), relative)
            data = self._range(segment, position, segment.size)
            pos = 0
            while pos + RECORD_BATCH_OVERHEAD <= len(data):
                header = read_header(data, pos)
                size = LOG_OVERHEAD + header.batch_length
                if header.max_timestamp >= timestamp:
                    batch = RecordBatch(bytes(data[pos:pos + size]))
                    for record in batch.records():
                        if record.offset < log_start:
                            continue
                        if batch.timestamp_type is TimestampType.LOG_APPEND_TIME:
                            return TimestampMatch(record.offset, batch.max_timestamp)
                        if record.timestamp >= timestamp:
                            return TimestampMatch(record.offset, record.timestamp)
                pos += size
        return None

    async def aborted_transactions_async(self, topic: str, index: int, start: int, end: int, local: Any) -> list[Any]:
        try:  # on the event loop when no transaction index must be fetched (none, or all cached): no thread hop
            return self.aborted_transactions(topic, index, start, end, local, cached_only=True)
        except _NotCached:
            return await asyncio.get_running_loop().run_in_executor(self.reader_pool, self.aborted_transactions,
                                                                    topic, index, start, end, local)

    def aborted_transactions(self, topic: str, index: int, start: int, end: int, local: Any, *,
                             cached_only: bool = False) -> list[Any]:
        """A read_committed fetch from the remote store: the aborted transactions overlapping [start, end) from
        the remote segments' transaction indexes, from the one holding ``start`` on until one says it is
        complete, then the local log's (Kafka's RemoteLogManager.collectAbortedTransactions). With
        ``cached_only``, _NotCached instead of fetching an index."""
        from kcli.storage.index import ABORTED_TXN, AbortedTxn

        found: list[Any] = []
        finished = self.cache.view(topic, index).finished()
        holding_start = max(0, bisect.bisect_right(finished, start, key=_start_offset) - 1)
        for segment in finished[holding_start:]:
            if segment.end_offset < start or segment.txn_index_empty:
                continue
            raw = self._offset_index(segment, "txnindex", cached_only=cached_only)
            for i in range(0, len(raw) - len(raw) % ABORTED_TXN.size, ABORTED_TXN.size):
                version, producer_id, first, last, stable = ABORTED_TXN.unpack_from(raw, i)
                if last >= start and first < end:
                    found.append(AbortedTxn(producer_id, first, last, stable, version))
                if stable >= end:
                    return found
        found.extend(t for t in local.aborted_transactions(start, end) if t not in found)
        return found

    @staticmethod
    def records_end(data: bytes) -> int:
        """The offset after the last batch of a record set (-1 when empty): a read_committed fetch's upper bound
        for its aborted transactions (Kafka's RemoteLogManager.addAbortedTransactions)."""
        pos, end = 0, -1
        while pos + HEADER_SIZE_UP_TO_LAST_OFFSET_DELTA <= len(data):
            base, length = read_log_overhead(data, pos)
            end = base + read_last_offset_delta(data, pos) + 1
            pos += LOG_OVERHEAD + length
        return end

    def sizes(self, topic: str, index: int) -> tuple[int, int]:
        """(remote segments, remote bytes) of a partition, finished copies only."""
        finished = self.cache.view(topic, index).finished()
        return len(finished), sum(s.size for s in finished)
