"""Incremental fetch sessions (KIP-227): the FetchSessionCache's eviction rules, the Fetch handler's full and
incremental contexts in process, the replica fetcher's FetchSessionHandler, and kafka-python's consumer (which
uses sessions) against a `kctl broker run` process."""

from __future__ import annotations

import datetime
import time
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_req

import inprocess_broker
from inprocess_broker import InProcessBroker, running_broker
from kcli.broker.fetch_session import (
    CachedPartition,
    FetchManager,
    FetchSessionCache,
    INVALID_SESSION_ID,
    next_epoch,
)
from kcli.broker.fetch_session_handler import FetchSessionHandler
from kcli.broker.replica_manager import FetchPartition
from kcli.protocol import ApiKey, minimal_request
from kcli.records import Record, build_record_batch
from kcli.records.record_set import iter_batches

run = inprocess_broker.run


# -- the cache ----------------------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _create(cache: FetchSessionCache, privileged: bool, size: int) -> int:
    def partitions() -> dict:
        return {(f"t{i}", 0, None): CachedPartition(FetchPartition(f"t{i}", 0, 0, 1)) for i in range(size)}

    return cache.maybe_create_session(cache.clock(), privileged, size, partitions)


def test_a_full_cache_evicts_a_stale_session_first_then_only_what_kafka_lets_a_newcomer_evict():
    clock = Clock()
    cache = FetchSessionCache(max_entries=2, eviction_ms=120_000, clock=clock)
    consumer = _create(cache, False, 5)
    follower = _create(cache, True, 5)
    assert consumer and follower and len(cache) == 2 and cache.num_partitions == 10
    # full and nothing stale: a consumer's session may not evict young sessions
    assert _create(cache, False, 50) == INVALID_SESSION_ID
    # a follower's (privileged) session may evict a young unprivileged one, never a young privileged one
    newer = _create(cache, True, 3)
    assert newer != INVALID_SESSION_ID and cache.get(consumer) is None and cache.get(follower) is not None
    assert _create(cache, True, 100) == INVALID_SESSION_ID
    assert cache.evictions == 1
    # a session unused for the eviction time goes first, whoever asks
    clock.now += 60_000
    cache.touch(cache.get(newer), clock.now)
    clock.now += 70_000
    third = _create(cache, False, 1)
    assert third != INVALID_SESSION_ID and cache.get(follower) is None and cache.get(newer) is not None
    # `newer` is now older than the eviction time, so anyone may evict it, but only for a session worth more: a
    # follower's is worth more than a consumer's; a follower's newcomer evicts the least valuable evictable one,
    # the young consumer session before the old follower one
    clock.now += 1
    cache.touch(cache.get(newer), clock.now)
    cache.touch(cache.get(third), clock.now)
    assert _create(cache, False, 2) == INVALID_SESSION_ID
    assert _create(cache, True, 4) != INVALID_SESSION_ID
    assert cache.get(third) is None and cache.get(newer) is not None and cache.evictions == 3
    assert _create(cache, True, 4) != INVALID_SESSION_ID  # (True, 4) > the old (True, 3)
    assert cache.get(newer) is None and cache.evictions == 4
    metrics = {name: samples[0][1] for name, _, _, samples in cache.collect()}
    assert metrics == {"kafka_server_fetchsessioncache_numincrementalfetchsessions": 2,
                       "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached": 8,
                       "kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total": 4}


def test_session_epochs_wrap_to_one_and_the_final_epoch_stays_final():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(0x7FFFFFFF) == 1
    assert next_epoch(-1) == -1


def _info(topic: str, offset: int) -> FetchPartition:
    return FetchPartition(topic, 0, offset, 1 << 20)


def test_the_manager_answers_kafkas_session_errors_and_closes_an_emptied_session():
    manager = FetchManager(FetchSessionCache(max_entries=10))
    assert manager.new_context(12, 12345, 1, False, [], []).error == ErrorCode.fetch_session_id_not_found
    full = manager.new_context(12, 0, 0, False, [_info("a", 0), _info("b", 0)], [])
    from kcli.broker.replica_manager import FetchPartitionResult
    from kcli.broker.partition import ReadResult
    error, session_id, include = full.respond([FetchPartitionResult(ErrorCode.none, ReadResult(b"", 0, 0, 0, 0))] * 2)
    assert error == ErrorCode.none and session_id != INVALID_SESSION_ID and include == [True, True]
    assert manager.new_context(12, session_id, 2, False, [], []).error == ErrorCode.invalid_fetch_session_epoch
    # Fetch below v7 has no sessions
    legacy = manager.new_context(6, session_id, 1, False, [_info("a", 0)], [])
    assert legacy.respond([FetchPartitionResult(ErrorCode.none, ReadResult(b"", 0, 0, 0, 0))])[1] == 0
    incremental = manager.new_context(12, session_id, 1, False, [], [("a", 0, None)])
    assert [i.topic for i in incremental.infos] == ["b"]
    emptied = manager.new_context(12, session_id, 2, False, [], [("b", 0, None)])
    assert emptied.infos == [] and manager.cache.get(session_id) is None


# -- the Fetch handler, in process ---------------------------------------------------------------------------
class Broker(InProcessBroker):
    async def produce(self, topic: str, *values: bytes) -> None:
        batch = build_record_batch([Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)])
        response = await self.call(ApiKey.PRODUCE, 9, minimal_request(ApiKey.PRODUCE, 9, topic=topic, records=batch,
                                                                        acks=1))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none

    async def fetch(self, session_id: int, epoch: int, offsets: dict[str, int], forgotten: tuple[str, ...] = ()) -> Any:
        request = fetch_req.FetchRequest(
            cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=0), min_bytes=1,
            max_bytes=1 << 20, isolation_level=0, session_id=session_id, session_epoch=epoch,
            topics=tuple(fetch_req.FetchTopic(topic=t, partitions=(fetch_req.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1, log_start_offset=-1,
                partition_max_bytes=1 << 20),)) for t, o in offsets.items()),
            forgotten_topics_data=tuple(fetch_req.ForgottenTopic(topic=t, partitions=(0,)) for t in forgotten),
            rack_id="")
        return await self.call(ApiKey.FETCH, 12, request)


def _answered(response: Any) -> dict[str, tuple[int, list[bytes]]]:
    out = {}
    for topic in response.responses:
        for p in topic.partitions:
            raw = p.records.read() if hasattr(p.records, "read") else bytes(p.records or b"")
            out[topic.topic] = (int(p.high_watermark), [r.value for b in iter_batches(raw) for r in b.records()])
    return out


def test_an_incremental_fetch_answers_only_partitions_that_changed(tmp_path):
    async def main() -> None:
        async with running_broker(str(tmp_path / "logs"), Broker) as b:
            for name in ("busy", "idle", "quiet"):
                b.server.admin.create_topic(name, 1, 1)
            await b.produce("quiet", b"q0")
            full = await b.fetch(0, 0, {"busy": 0, "idle": 0, "quiet": 0})
            assert full.error_code == ErrorCode.none and full.session_id != 0
            assert _answered(full) == {"busy": (0, []), "idle": (0, []), "quiet": (1, [b"q0"])}
            session = full.session_id

            # the client moved past q0 and nothing else changed: only that move is sent, and nothing comes back
            nothing = await b.fetch(session, 1, {"quiet": 1})
            assert (nothing.error_code, nothing.session_id, _answered(nothing)) == (ErrorCode.none, session, {})
            # a record on "busy": only it comes back, though the request named no partition
            await b.produce("busy", b"b0")
            data = await b.fetch(session, 2, {})
            assert _answered(data) == {"busy": (1, [b"b0"])}
            # the client moves its fetch offset: the session reads from there; forgetting a partition drops it
            await b.produce("quiet", b"q1")
            moved = await b.fetch(session, 3, {"busy": 1, "quiet": 1}, forgotten=("idle",))
            assert _answered(moved) == {"quiet": (2, [b"q1"])}
            # the partition that brought records goes last in the session (it is read after the others next time)
            assert [k[0] for k in b.server.services.fetch_manager.cache.get(session).partitions] == ["busy", "quiet"]

            # Kafka's errors: a stale epoch, an unknown session; a full fetch with the id closes and reopens
            stale = await b.fetch(session, 3, {})
            assert (stale.error_code, _answered(stale)) == (ErrorCode.invalid_fetch_session_epoch, {})
            unknown = await b.fetch(session + 1, 1, {})
            assert unknown.error_code == ErrorCode.fetch_session_id_not_found
            reopened = await b.fetch(session, 0, {"busy": 1, "quiet": 2})
            assert reopened.session_id not in (0, session) and b.server.services.fetch_manager.cache.get(session) is None
            assert set(_answered(reopened)) == {"busy", "quiet"}
            # epoch -1 closes the session and opens none
            closed = await b.fetch(reopened.session_id, -1, {"busy": 1})
            assert closed.session_id == 0 and len(b.server.services.fetch_manager.cache) == 0

    run(main())


def test_with_no_cache_slots_every_fetch_is_sessionless(tmp_path):
    async def main() -> None:
        async with running_broker(str(tmp_path / "logs"), Broker,
                                  **{"max.incremental.fetch.session.cache.slots": "0"}) as b:
            b.server.admin.create_topic("t", 1, 1)
            full = await b.fetch(0, 0, {"t": 0})
            assert (full.error_code, full.session_id, set(_answered(full))) == (ErrorCode.none, 0, {"t"})

    run(main())


def test_a_partition_error_stays_in_its_partition(tmp_path):
    """A partition's error (here OFFSET_OUT_OF_RANGE, last in the answer) is that partition's: the response's own
    error_code is the session's (NONE). A follower reads a top-level error as a failed fetch of every partition,
    so OFFSET_MOVED_TO_TIERED_STORAGE there kept a replaced tiered follower out of the ISR."""
    async def main() -> None:
        async with running_broker(str(tmp_path / "logs"), Broker) as b:
            for name in ("fine", "past-the-end"):
                b.server.admin.create_topic(name, 1, 1)
            await b.produce("fine", b"f0")
            answer = await b.fetch(0, 0, {"fine": 0, "past-the-end": 5})
            assert answer.error_code == ErrorCode.none
            errors = {t.topic: p.error_code for t in answer.responses for p in t.partitions}
            assert errors == {"fine": ErrorCode.none, "past-the-end": ErrorCode.offset_out_of_range}

    run(main())


# -- the replica fetcher's side ----------------------------------------------------------------------------
class _Response:
    def __init__(self, session_id: int, error: Any = ErrorCode.none) -> None:
        self.session_id, self.error_code = session_id, error


def test_the_session_handler_sends_only_changed_partitions_and_falls_back_to_a_full_fetch():
    handler = FetchSessionHandler()
    first = handler.build({("a", 0): (0, 10), ("b", 0): (0, 5)})
    assert first.full and first.session_id == 0 and sorted(first.to_send) == [("a", 0), ("b", 0)]
    assert handler.handle_response(first, _Response(77))
    second = handler.build({("a", 0): (0, 12), ("b", 0): (0, 5)})
    assert (second.session_id, second.epoch, second.to_send, second.forgotten) == (77, 1, [("a", 0)], [])
    assert handler.handle_response(second, _Response(77))
    third = handler.build({("a", 0): (0, 12)})
    assert (third.epoch, third.to_send, third.forgotten) == (2, [], [("b", 0)])
    # INVALID_FETCH_SESSION_EPOCH: a full fetch that closes the session; not found: a full fetch with id 0
    assert not handler.handle_response(third, _Response(0, ErrorCode.invalid_fetch_session_epoch))
    closing = handler.build({("a", 0): (0, 12)})
    assert (closing.session_id, closing.epoch, closing.to_send) == (77, 0, [("a", 0)])
    assert not handler.handle_response(closing, _Response(0, ErrorCode.fetch_session_id_not_found))
    assert handler.build({("a", 0): (0, 12)}).session_id == 0
    handler.handle_error()
    assert handler.build({("a", 0): (0, 12)}).full


# -- kafka-python's consumer (fetch sessions) against a broker process ----------------------------------------
@pytest.mark.broker_process
def test_kafka_python_consumes_through_incremental_fetch_sessions(make_broker):
    kafka = pytest.importorskip("kafka")
    broker = make_broker("max.incremental.fetch.session.cache.slots=1")
    bootstrap = f"127.0.0.1:{broker.port}"
    topics = [f"s-{uuid.uuid4().hex[:8]}-{i}" for i in range(3)]
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks=1)
    for topic in topics:
        producer.send(topic, b"warm-up").get(timeout=30)

    def consumer() -> Any:
        c = kafka.KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                                fetch_max_wait_ms=100, consumer_timeout_ms=500)
        c.assign([kafka.TopicPartition(t, 0) for t in topics])
        return c

    def read(c: Any, want: int) -> list[bytes]:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < want and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=200).values():
                got.extend(r.value for r in batch)
        return got

    first = consumer()
    try:
        assert sorted(read(first, 3)) == [b"warm-up"] * 3
        handler = next(iter(first._fetcher._session_handlers.values()))
        session = handler.next_metadata.session_id
        assert session != 0
        # only one topic gets records: incremental fetches carry it, and every record arrives once, in the same
        # session (no error made the consumer start over)
        for i in range(20):
            producer.send(topics[1], b"r%d" % i)
            producer.flush()
        assert read(first, 20) == [b"r%d" % i for i in range(20)]
        assert handler.next_metadata.session_id == session and handler.next_metadata.epoch > 1
        # a second consumer needs the one cache slot: unprivileged and young, the first keeps it and the second
        # fetches without a session; both keep reading
        second = consumer()
        try:
            assert sorted(read(second, 23)) == sorted([b"warm-up"] * 3 + [b"r%d" % i for i in range(20)])
            producer.send(topics[2], b"late").get(timeout=30)
            assert read(first, 1) == [b"late"] and read(second, 1) == [b"late"]
            assert next(iter(second._fetcher._session_handlers.values())).next_metadata.session_id == 0
        finally:
            second.close()
    finally:
        first.close()
        producer.close()


def test_a_parked_fetch_is_read_once_when_an_append_completes_it(tmp_path, monkeypatch):
    """Kafka's DelayedFetch: the read that finds min.bytes is the answer; nothing is read again to answer it."""
    import asyncio

    from kcli.broker.replica_manager import ReplicaManager

    reads: list[int] = []
    original = ReplicaManager.read_from_local_log

    def counted(self, params, infos):
        reads.append(len(infos))
        return original(self, params, infos)

    monkeypatch.setattr(ReplicaManager, "read_from_local_log", counted)

    async def main() -> None:
        async with running_broker(str(tmp_path / "logs"), Broker) as b:
            for name in ("busy", "idle"):
                b.server.admin.create_topic(name, 1, 1)
            request = fetch_req.FetchRequest(
                cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=60_000), min_bytes=1,
                max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=0,
                topics=tuple(fetch_req.FetchTopic(topic=t, partitions=(fetch_req.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                    partition_max_bytes=1 << 20),)) for t in ("busy", "idle")),
                forgotten_topics_data=(), rack_id="")
            reads.clear()
            waiting = asyncio.create_task(b.call(ApiKey.FETCH, 12, request))
            await asyncio.sleep(0.3)
            assert not waiting.done() and reads == [2]  # read once, nothing there: parked
            await b.produce("busy", b"b0")
            answer = await asyncio.wait_for(waiting, 30)
            assert _answered(answer)["busy"] == (1, [b"b0"])
            assert reads == [2, 2]  # one more read, at the append, and it is the answer

    run(main())
