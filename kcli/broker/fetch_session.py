"""Incremental fetch sessions (KIP-227): Kafka's FetchSession.scala (FetchSessionCache, FetchManager and the fetch
contexts) for the broker's Fetch handler.

A client (a follower's replica fetcher, a Java or kafka-python consumer) opens a session with a full Fetch
(session id 0, epoch 0); the broker caches the partitions it asked for with their fetch parameters and the
high watermark, log start offset and last stable offset it answered, and hands out a session id. Later Fetches
are incremental (that id, the next epoch): they carry only the partitions whose fetch parameters changed (and
the ones to forget), the broker reads every partition of the session, and the answer carries only the
partitions with records, an error, a diverging epoch, a preferred read replica or offsets that changed since
the last answer. Idle partitions cost neither side any encoding or decoding.

Errors are Kafka's: an unknown session id is FETCH_SESSION_ID_NOT_FOUND, an epoch other than the session's
INVALID_FETCH_SESSION_EPOCH (the client then starts over with a full fetch). The cache holds
``max.incremental.fetch.session.cache.slots`` sessions (1000); when full, a new session may evict one unused
for MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS (2 minutes), else a smaller or unprivileged one by Kafka's rules
(followers' sessions are privileged), else it is not cached and the client keeps sending full fetches
(session id 0 in the answer).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.partition import now_ms
from kcli.broker.replica_manager import FetchPartition, FetchPartitionResult

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0  # a full fetch that opens a session (closing the one named, if any)
FINAL_EPOCH = -1  # a full fetch that closes the session named and opens none (also every Fetch below v7)
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS = 120_000  # KafkaServer's: a session this idle may always be evicted
DEFAULT_CACHE_SLOTS = 1000  # max.incremental.fetch.session.cache.slots

PartitionKey = tuple[str, int, Any]  # (topic, partition, topic id or None): Kafka's TopicIdPartition


def next_epoch(epoch: int) -> int:
    """FetchMetadata.nextEpoch: after the final epoch stays final; wraps to 1, never back to 0."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == 0x7FFFFFFF else epoch + 1


def partition_key(info: FetchPartition) -> PartitionKey:
    return (info.topic, info.partition, info.topic_id)


@dataclass
class CachedPartition:
    """Kafka's CachedPartition: the partition's latest fetch parameters and what the last answer told the client."""

    info: FetchPartition
    high_watermark: int = -1
    log_start_offset: int = -1
    last_stable_offset: int = -1

    def must_respond(self, result: FetchPartitionResult, update: bool) -> bool:
        """CachedPartition.maybeUpdateResponseData: records, an error, a diverging epoch, a preferred read replica
        or an offset the client has not been told yet; errors reset the cached high watermark so that the
        partition is sent again once the error is gone. ``update``: remember what is sent."""
        read = result.read
        respond = read is not None and len(read.records) > 0
        hw = read.high_watermark if read is not None else -1
        start = read.log_start_offset if read is not None else -1
        stable = read.last_stable_offset if read is not None else -1
        if hw != self.high_watermark or start != self.log_start_offset or stable != self.last_stable_offset:
            respond = True
            if update:
                self.high_watermark, self.log_start_offset, self.last_stable_offset = hw, start, stable
        if result.preferred_read_replica >= 0 or (read is not None and read.diverging_epoch is not None):
            respond = True
        if result.error != ErrorCode.none:
            respond = True
            if update:
                self.high_watermark = -1
        return respond


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool  # a follower's
    partitions: dict[PartitionKey, CachedPartition]  # in fetch order (Kafka's ImplicitLinkedHashCollection)
    creation_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch of the next incremental request
    cached_size: int = -1  # the size the cache accounts it at (touch)

    @property
    def size(self) -> int:
        return len(self.partitions)

    def evictable_key(self) -> tuple[bool, int, int]:
        """EvictableKey: unprivileged before privileged, then smaller before larger, then by id."""
        return (self.privileged, self.cached_size, self.id)

    def update(self, infos: list[FetchPartition], forgotten: list[PartitionKey]) -> None:
        """FetchSession.update: new partitions join at the end, known ones take the new parameters; then the
        forgotten ones leave."""
        for info in infos:
            key = partition_key(info)
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(info)
            else:
                cached.info = info
        for key in forgotten:
            self.partitions.pop(key, None)


class FetchSessionCache:
    """Kafka's FetchSessionCache: at most ``max_entries`` sessions. Eviction (tryEvict): first a session unused for
    ``eviction_ms``; else the least valuable evictable one if the new session is worth more. A session older than
    ``eviction_ms`` is evictable by anyone; a younger one only by a privileged (follower) session, and only if it is
    unprivileged itself. The counts are the NumIncrementalFetchSessions, NumIncrementalFetchPartitionsCached and
    IncrementalFetchSessionEvictionsPerSec metrics."""

    def __init__(self, max_entries: int = DEFAULT_CACHE_SLOTS,
                 eviction_ms: int = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS,
                 clock: Callable[[], int] = now_ms) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self.num_partitions = 0

    def __len__(self) -> int:
        return len(self.sessions)

    def collect(self) -> Iterator[tuple[str, str, str, list[Any]]]:
        """kafka.server:type=FetchSessionCache metrics, as the JMX exporter names them (a metrics collector)."""
        yield ("kafka_server_fetchsessioncache_numincrementalfetchsessions", "gauge",
               "Incremental fetch sessions cached (NumIncrementalFetchSessions)", [({}, len(self.sessions))])
        yield ("kafka_server_fetchsessioncache_numincrementalfetchpartitionscached", "gauge",
               "Partitions in the cached fetch sessions (NumIncrementalFetchPartitionsCached)",
               [({}, self.num_partitions)])
        yield ("kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total", "counter",
               "Fetch sessions evicted (IncrementalFetchSessionEvictionsPerSec)", [({}, self.evictions)])

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None and session.cached_size >= 0:
            self.num_partitions -= session.cached_size
        return session

    def touch(self, session: FetchSession, now: int) -> None:
        session.last_used_ms = now
        if session.cached_size >= 0:
            self.num_partitions -= session.cached_size
        session.cached_size = session.size
        self.num_partitions += session.cached_size

    def maybe_create_session(self, now: int, privileged: bool, size: int,
                             partitions: Callable[[], dict[PartitionKey, CachedPartition]]) -> int:
        """A new session's id, or INVALID_SESSION_ID when there is no room for it."""
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, (privileged, size, 0), now):
            return INVALID_SESSION_ID
        session_id = self._new_session_id()
        session = FetchSession(session_id, privileged, partitions(), now, now, next_epoch(INITIAL_EPOCH))
        self.sessions[session_id] = session
        self.touch(session, now)
        return session_id

    def _new_session_id(self) -> int:
        while True:
            session_id = random.randint(1, 0x7FFFFFFF)
            if session_id not in self.sessions:
                return session_id

    def _evictable(self, session: FetchSession, privileged: bool, now: int) -> bool:
        old = now - session.creation_ms > self.eviction_ms
        return old or (privileged and not session.privileged)

    def _try_evict(self, privileged: bool, key: tuple[bool, int, int], now: int) -> bool:
        # a linear scan: sessions are created rarely (a full fetch), and there are at most max_entries of them
        stalest = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id), default=None)
        if stalest is not None and stalest.last_used_ms + self.eviction_ms < now:
            self.remove(stalest.id)
            self.evictions += 1
            return True
        candidates = [s for s in self.sessions.values() if self._evictable(s, privileged, now)]
        if not candidates:
            return False
        least = min(candidates, key=FetchSession.evictable_key)
        if key > least.evictable_key():
            self.remove(least.id)
            self.evictions += 1
            return True
        return False


@dataclass
class FetchContext:
    """What one Fetch request reads and how its answer is cut (Kafka's FetchContext): ``infos`` are the partitions
    to read; ``respond`` says, per result, whether it goes into the answer, and the answer's session id."""

    infos: list[FetchPartition]
    error: Any = ErrorCode.none  # SessionErrorContext: FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH
    session_id: int = INVALID_SESSION_ID  # what an answer says (a throttled one too)
    _cache: FetchSessionCache | None = None
    _session: FetchSession | None = None
    _expected_epoch: int = 0
    _new_session: bool = False  # FullFetchContext: the answer opens a session
    _privileged: bool = False
    _included: list[bool] = field(default_factory=list)

    def respond(self, results: list[FetchPartitionResult]) -> tuple[Any, int, list[bool]]:
        """(error, session id, include per partition) of the answer to ``results`` (one per ``infos``)."""
        if self._new_session and self._cache is not None:
            def cached() -> dict[PartitionKey, CachedPartition]:
                partitions: dict[PartitionKey, CachedPartition] = {}
                for info, result in zip(self.infos, results):
                    entry = partitions[partition_key(info)] = CachedPartition(info)
                    entry.must_respond(result, True)
                return partitions

            cache = self._cache
            session_id = cache.maybe_create_session(cache.clock(), self._privileged, len(self.infos), cached)
            return ErrorCode.none, session_id, [True] * len(results)
        session = self._session
        if session is None:
            return ErrorCode.none, INVALID_SESSION_ID, [True] * len(results)
        if session.epoch != self._expected_epoch:
            # another request of this session came in meanwhile (IncrementalFetchContext)
            return ErrorCode.invalid_fetch_session_epoch, session.id, [False] * len(results)
        include = []
        moved = []
        for info, result in zip(self.infos, results):
            key = partition_key(info)
            cached = session.partitions.get(key)
            if cached is None:  # forgotten by a later request meanwhile
                include.append(False)
                continue
            respond = cached.must_respond(result, True)
            include.append(respond)
            if respond and result.read is not None and len(result.read.records) > 0:
                moved.append(key)
        # partitions that brought records go to the end of the session, so the others are read first next time
        for key in moved:
            session.partitions[key] = session.partitions.pop(key)
        return ErrorCode.none, session.id, include


class FetchManager:
    """Kafka's FetchManager.newContext: which context a Fetch request gets from its session id and epoch."""

    def __init__(self, cache: FetchSessionCache | None = None) -> None:
        self.cache = cache if cache is not None else FetchSessionCache()

    def new_context(self, version: int, session_id: int, epoch: int, is_follower: bool,
                    infos: list[FetchPartition], forgotten: list[PartitionKey]) -> FetchContext:
        if version < 7:  # no sessions before Fetch v7 (FetchMetadata.LEGACY)
            session_id, epoch = INVALID_SESSION_ID, FINAL_EPOCH
        cache = self.cache
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch
            if session_id != INVALID_SESSION_ID:
                cache.remove(session_id)
            if epoch == FINAL_EPOCH or cache.max_entries <= 0:
                return FetchContext(infos)  # SessionlessFetchContext
            return FetchContext(infos, _cache=cache, _new_session=True, _privileged=is_follower)
        session = cache.get(session_id)
        if session is None:
            return FetchContext([], ErrorCode.fetch_session_id_not_found)
        if session.epoch != epoch:
            return FetchContext([], ErrorCode.invalid_fetch_session_epoch)
        session.update(infos, forgotten)
        if not session.partitions:  # nothing left: the session closes (a sessionless answer, id 0)
            cache.remove(session.id)
            return FetchContext([])
        cache.touch(session, cache.clock())
        session.epoch = next_epoch(session.epoch)
        return FetchContext([c.info for c in session.partitions.values()], session_id=session.id,
                            _cache=cache, _session=session, _expected_epoch=session.epoch)


def forgotten_keys(topics: Any, resolve: Callable[[Any], str | None]) -> list[Hashable]:
    """The (topic, partition, topic id) of a request's forgotten_topics_data: by name before Fetch v13, by topic id
    from v13 (``resolve`` names it)."""
    keys: list[Hashable] = []
    for topic in topics or ():
        name = getattr(topic, "topic", None)
        topic_id = getattr(topic, "topic_id", None)
        if name is None and topic_id is not None:
            name = resolve(topic_id) or ""
        for index in topic.partitions:
            keys.append((name or "", int(index), topic_id))
    return keys
