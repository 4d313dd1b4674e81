"""Moving a replica between a broker's log dirs (KIP-113, AlterReplicaLogDirs), in process: the LogManager and the
mover (kcli.broker.alter_log_dirs) with its rounds run by the test instead of its thread, so each step can be
interleaved with appends, truncations, DeleteRecords and restarts; then the AlterReplicaLogDirs and DescribeLogDirs
handlers of an in-process broker with two log dirs."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

import inprocess_broker
from inprocess_broker import running_broker
from kcli.broker.alter_log_dirs import ReplicaAlterLogDirsManager
from kcli.broker.log_manager import LogManager
from kcli.client import KafkaClient
from kcli.client.reassign import ReassignmentPlan, cancel, log_dir_move_states
from kcli.protocol import ApiKey, minimal_request
from kcli.records import BatchReader, Record, build_record_batch
from kcli.storage.files import DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX
from kcli.storage.log import LogConfig, PartitionLog

TOPIC = "moving"
SEGMENT_BYTES = 4096  # several segments, so rolls, retention and the log start are exercised


def _manager(root: Path) -> LogManager:
    manager = LogManager([root / "a", root / "b"], broker_id=0,
                         log_config=LogConfig(segment_bytes=SEGMENT_BYTES, file_delete_delay_ms=0))
    manager.startup("cluster-x")
    return manager


def _mover(manager: LogManager, chunk_bytes: int = 2048) -> ReplicaAlterLogDirsManager:
    return ReplicaAlterLogDirsManager(manager, hosted=lambda t, i: manager.partition(t, i) is not None,
                                      chunk_bytes=chunk_bytes, background=False)


def _produce(manager: LogManager, start: int, count: int, *, epoch: int = 0, producer_id: int = 7) -> None:
    """``count`` idempotent batches of two records each, sequences going on from ``start``."""
    partition = manager.partition(TOPIC, 0)
    now = int(time.time() * 1000)  # within retention.ms
    for n in range(start, start + count):
        raw = build_record_batch([Record(0, now + n, b"k%d" % n, b"v%d" % n * 20),
                                  Record(1, now + n, b"k%d" % n, b"w%d" % n)], base_offset=0,
                                 producer_id=producer_id, producer_epoch=0, base_sequence=2 * n,
                                 partition_leader_epoch=epoch)
        assert not manager.append_as_leader(partition, raw, leader_epoch=epoch).duplicate


def _batches(log: Any) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every batch from the one holding the log start on."""
    out: list[tuple[int, bytes]] = []
    offset = log.log_start_offset
    while (found := log.read(offset, 1 << 20)) is not None:
        batches = list(BatchReader(found.read()))
        out += [(b.base_offset, bytes(b.raw)) for b in batches]
        offset = batches[-1].last_offset + 1
    return out


def _state(log: Any) -> tuple[Any, ...]:
    return (log.log_start_offset, log.log_end_offset, list(log.leader_epochs.entries),
            {pid: (e.last_sequence, e.last_offset) for pid, e in log.producers.items()})


def _finish(mover: ReplicaAlterLogDirsManager, rounds: int = 200) -> None:
    for _ in range(rounds):
        future = mover.log_manager.future_log(TOPIC, 0)
        if future is None:
            return
        mover.step((TOPIC, 0), future)
    raise AssertionError("the move did not finish")


def test_a_replica_moves_under_appends_with_its_epochs_producer_state_and_log_start(tmp_path):
    manager = _manager(tmp_path)
    try:
        manager.create_topic(TOPIC, 1)
        assert manager.partition(TOPIC, 0).directory.parent == tmp_path / "a"
        _produce(manager, 0, 30, epoch=1)
        _produce(manager, 30, 10, epoch=3)
        current = manager.partition(TOPIC, 0)
        manager.delete_records_before(current, 25)  # the log start inside a batch (24-25) of a later segment
        mover = _mover(manager, chunk_bytes=400)
        assert mover.alter_replica_log_dirs({(TOPIC, 0): str(tmp_path / "b")}) == {(TOPIC, 0): ErrorCode.none}
        future = manager.future_log(TOPIC, 0)
        assert future.directory.parent == tmp_path / "b" and future.directory.name.endswith(FUTURE_DIR_SUFFIX)
        old_dir = current.directory
        mover.step((TOPIC, 0), future)  # one chunk: not caught up yet
        assert manager.future_log(TOPIC, 0) is future and mover.lag((TOPIC, 0)) > 0
        _produce(manager, 40, 10, epoch=4)  # appends go on during the copy, in a new leader epoch
        manager.partition(TOPIC, 0).log.leader_epochs.assign(5, current.log.log_end_offset)  # an epoch, no batch
        before_batches, before_state = _batches(current.log), _state(current.log)
        _finish(mover)
        assert manager.partition(TOPIC, 0) is current  # the same ManagedLog: every Partition holding it follows
        assert current.directory == tmp_path / "b" / f"{TOPIC}-0"
        assert _batches(current.log) == before_batches and _state(current.log) == before_state
        assert before_state[0] == 25 and before_state[2][-1].epoch == 5
        assert not old_dir.exists() and len(list((tmp_path / "a").glob(f"{TOPIC}-0.*{DELETE_DIR_SUFFIX}"))) == 1
        _produce(manager, 50, 3, epoch=5)  # the moved log takes appends; the producer's sequences go on
        manager.purge_deleted(force=True)
        assert not list((tmp_path / "a").glob(f"{TOPIC}-0*"))
        assert manager.partition_counts() == {tmp_path / "a": 0, tmp_path / "b": 1}
    finally:
        manager.shutdown()
    reopened = _manager(tmp_path)
    try:
        log = reopened.partition(TOPIC, 0).log
        assert log.directory == tmp_path / "b" / f"{TOPIC}-0" and log.log_start_offset == 25
        assert log.log_end_offset == 106 and not reopened.future_logs
    finally:
        reopened.shutdown()


def test_the_future_log_follows_a_truncation_of_the_current_log(tmp_path):
    """A follower's current log truncated to its leader's (a new leader epoch) while the copy runs: the future log
    is cut where the epochs part, as a follower's would be, and ends identical."""
    manager = _manager(tmp_path)
    try:
        manager.create_topic(TOPIC, 1)
        _produce(manager, 0, 20, epoch=1)
        _produce(manager, 20, 10, epoch=2)
        mover = _mover(manager, chunk_bytes=1 << 20)
        mover.alter_replica_log_dirs({(TOPIC, 0): str(tmp_path / "b")})
        future = manager.future_log(TOPIC, 0)
        current = manager.partition(TOPIC, 0)
        while future.log.log_end_offset < current.log.log_end_offset:  # copied, not swapped: the log moves on
            mover._copy(current, future, 1 << 20)
        assert future.log.log_end_offset == current.log.log_end_offset == 60
        manager.truncate_to(current, 44)  # epoch 2 lost from 44 on (batch boundary), then epoch 3 there
        _produce(manager, 22, 5, epoch=3, producer_id=8)
        _finish(mover)
        assert current.directory.parent == tmp_path / "b"
        assert [e.epoch for e in current.log.leader_epochs.entries] == [1, 2, 3]
        assert [b for b, _ in _batches(current.log)] == list(range(0, 54, 2))
    finally:
        manager.shutdown()


@pytest.mark.parametrize("clean", [True, False])
def test_a_restart_resumes_the_copy_from_the_future_dir(tmp_path, clean):
    manager = _manager(tmp_path)
    manager.create_topic(TOPIC, 1)
    _produce(manager, 0, 40, epoch=1)
    mover = _mover(manager)
    mover.alter_replica_log_dirs({(TOPIC, 0): str(tmp_path / "b")})
    mover.step((TOPIC, 0), manager.future_log(TOPIC, 0))
    copied = manager.future_log(TOPIC, 0).log.log_end_offset
    assert 0 < copied < 80
    expected = _batches(manager.partition(TOPIC, 0).log)
    if clean:
        manager.shutdown()
    else:  # a kill -9: no close, no checkpoints, no clean-shutdown marker; the OS has the appended bytes
        for fd in manager._locks:
            os.close(fd)
    restarted = _manager(tmp_path)
    try:
        future = restarted.future_log(TOPIC, 0)
        assert future is not None and future.directory.parent == tmp_path / "b"
        assert future.log.log_end_offset == copied
        assert restarted.partition(TOPIC, 0).directory.parent == tmp_path / "a"
        _finish(_mover(restarted))
        moved = restarted.partition(TOPIC, 0)
        assert moved.directory == tmp_path / "b" / f"{TOPIC}-0" and _batches(moved.log) == expected
    finally:
        restarted.shutdown()


def test_a_crash_between_the_swaps_renames_leaves_the_future_log_as_the_log(tmp_path):
    """The old log renamed `-delete` but the future one not renamed yet: startup removes the first and takes the
    second (complete: it was closed before the renames) as the partition's log."""
    manager = _manager(tmp_path)
    manager.create_topic(TOPIC, 1)
    _produce(manager, 0, 20, epoch=1)
    expected = _batches(manager.partition(TOPIC, 0).log)
    mover = _mover(manager, chunk_bytes=1 << 20)
    mover.alter_replica_log_dirs({(TOPIC, 0): str(tmp_path / "b")})
    future = manager.future_log(TOPIC, 0)
    current = manager.partition(TOPIC, 0)
    while future.log.log_end_offset < current.log.log_end_offset:
        mover._copy(current, future, 1 << 20)
    future.log.close()
    manager.shutdown()
    current.directory.rename(current.directory.with_name(f"{TOPIC}-0.0123456789abcdef0123456789abcdef-delete"))
    restarted = _manager(tmp_path)
    try:
        moved = restarted.partition(TOPIC, 0)
        assert moved.directory == tmp_path / "b" / f"{TOPIC}-0" and not restarted.future_logs
        assert _batches(moved.log) == expected
        assert sorted(p.name for p in (tmp_path / "a").iterdir() if p.is_dir()) == []
    finally:
        restarted.shutdown()


def test_errors_cancelling_and_a_replica_not_hosted_yet(tmp_path):
    manager = _manager(tmp_path)
    try:
        manager.create_topic(TOPIC, 1)
        _produce(manager, 0, 5)
        mover = _mover(manager)
        a, b = str(tmp_path / "a"), str(tmp_path / "b")
        assert mover.alter_replica_log_dirs({(TOPIC, 0): str(tmp_path / "c"), (TOPIC, 1): b, (TOPIC, 0): a}) == {
            (TOPIC, 0): ErrorCode.none, (TOPIC, 1): ErrorCode.replica_not_available}
        assert mover.alter_replica_log_dirs({(TOPIC, 0): str(tmp_path / "c")}) == {
            (TOPIC, 0): ErrorCode.log_dir_not_found}
        assert mover.alter_replica_log_dirs({("x" * 240, 0): b}) == {("x" * 240, 0): ErrorCode.invalid_topic_exception}
        assert not manager.future_logs
        # a move given up: back to the dir it is in, the future log goes
        mover.alter_replica_log_dirs({(TOPIC, 0): b})
        future_dir = manager.future_log(TOPIC, 0).directory
        assert mover.alter_replica_log_dirs({(TOPIC, 0): a + "/"}) == {(TOPIC, 0): ErrorCode.none}
        assert not manager.future_logs and not future_dir.exists()
        # the partition not hosted yet is created in the dir asked for (Kafka's preferredLogDirs), once
        manager.add_partitions(TOPIC, 2)
        assert manager.partition(TOPIC, 1).directory.parent == tmp_path / "b"
        assert not manager.preferred_log_dirs
        # a deleted partition takes its future log with it
        mover.alter_replica_log_dirs({(TOPIC, 0): b})
        future_dir = manager.future_log(TOPIC, 0).directory
        manager.delete_topic(TOPIC)
        manager.purge_deleted(force=True)
        assert not manager.future_logs and not future_dir.exists()
        assert manager.partition_counts() == {tmp_path / "a": 0, tmp_path / "b": 0}
    finally:
        manager.shutdown()


def test_a_future_log_that_cannot_be_created_is_a_storage_error(tmp_path, monkeypatch):
    manager = _manager(tmp_path)
    try:
        manager.create_topic(TOPIC, 1)
        name = f"{TOPIC}-0.{'0' * 32}{FUTURE_DIR_SUFFIX}"
        monkeypatch.setattr("kcli.broker.log_manager.future_dir_name", lambda topic, index: name)
        (tmp_path / "b" / name).write_bytes(b"")  # a file where the directory would go
        assert _mover(manager).alter_replica_log_dirs({(TOPIC, 0): str(tmp_path / "b")}) == {
            (TOPIC, 0): ErrorCode.kafka_storage_error}
        assert not manager.future_logs and manager.partition_counts() == {tmp_path / "a": 1, tmp_path / "b": 0}
    finally:
        manager.shutdown()


class Broker(inprocess_broker.InProcessBroker):
    async def alter(self, path: str, version: int = 2) -> list[Any]:
        request = minimal_request(ApiKey.ALTER_REPLICA_LOG_DIRS, version, topic=TOPIC)
        (entry,) = request.dirs
        (topic,) = entry.topics
        request = dataclasses.replace(request, dirs=(dataclasses.replace(
            entry, path=path, topics=(dataclasses.replace(topic, partitions=(0,)),)),))
        answer = await self.call(ApiKey.ALTER_REPLICA_LOG_DIRS, version, request)
        return [(t.topic_name, p.partition_index, p.error_code) for t in answer.results for p in t.partitions]

    async def describe(self) -> dict[str, list[tuple[str, int, bool]]]:
        request = minimal_request(ApiKey.DESCRIBE_LOG_DIRS, 4, topic=TOPIC)
        request = dataclasses.replace(request, topics=None)
        answer = await self.call(ApiKey.DESCRIBE_LOG_DIRS, 4, request)
        return {Path(r.log_dir).name: [(t.name, int(p.offset_lag), bool(p.is_future_key))
                                       for t in r.topics if t.name == TOPIC for p in t.partitions]
                for r in answer.results}


@contextlib.asynccontextmanager
async def _moving_broker(tmp_path: Path) -> Any:
    """An in-process broker with log dirs a and b, the topic's replica in one (``where``), and the mover's rounds
    run by the test (``stepped``): yields (broker, where, other dir, stepped)."""
    dirs = f"{tmp_path / 'a'},{tmp_path / 'b'}"
    async with running_broker(dirs, Broker, **{"offsets.topic.num.partitions": "1"}) as b:
        server = b.server
        manager = server.log_manager
        server.admin.create_topic(TOPIC, 1, 1)
        where = manager.partition(TOPIC, 0).directory.parent
        other = next(d for d in manager.log_dirs if d != where)
        stepped = _mover(manager)
        stepped.hosted = lambda t, i: server.replica_manager.find(t, i) is not None
        server.replica_manager.alter_log_dirs = stepped
        yield b, where, other, stepped


def test_the_handlers_move_a_replica_and_describe_the_future_one(tmp_path):
    """AlterReplicaLogDirs through the handler: the future replica shows in DescribeLogDirs (isFuture, its lag)
    until the swap; produce and fetch go on throughout."""
    async def main() -> None:
        async with _moving_broker(tmp_path) as (b, where, other, stepped):
            server = b.server
            manager = server.log_manager
            _produce(manager, 0, 10)
            assert await b.alter(str(tmp_path / "nowhere")) == [(TOPIC, 0, ErrorCode.log_dir_not_found)]
            assert await b.alter(str(other.absolute())) == [(TOPIC, 0, ErrorCode.none)]
            described = await b.describe()
            assert described[where.name] == [(TOPIC, 0, False)]
            assert described[other.name] == [(TOPIC, 20, True)]  # nothing copied yet: all 20 offsets to go
            # kctl reassign's view of it (the client in a thread: the broker serves on this event loop)
            host, port = server.bound[0]
            plan = ReassignmentPlan({(TOPIC, 0): [0]}, {(TOPIC, 0, 0): str(other.resolve())})

            def states() -> list[str]:
                with KafkaClient(f"{host}:{port}") as client:
                    return [m.status for m in log_dir_move_states(client, plan.log_dirs)]

            assert await asyncio.to_thread(states) == ["in_progress"]
            _finish(stepped)
            described = await b.describe()
            assert described[where.name] == [] and described[other.name] == [(TOPIC, 0, False)]
            assert server.replica_manager.find(TOPIC, 0).log.directory.parent == other
            assert await asyncio.to_thread(states) == ["completed"]
    inprocess_broker.run(main())


def test_describe_log_dirs_during_the_swap_finds_the_replica(tmp_path, monkeypatch):
    """DescribeLogDirs answered while the swap renames the logs: the replica is still in one of the dirs (a CI run
    once read 'cannot be found in any live log directory': both logs' files were renamed under the stat calls)."""
    async def main() -> None:
        async with _moving_broker(tmp_path) as (b, where, other, stepped):
            server = b.server
            manager = server.log_manager
            _produce(manager, 0, 30)  # inactive segments: their sizes are stat calls
            assert await b.alter(str(other.absolute())) == [(TOPIC, 0, ErrorCode.none)]
            # the swap stopped after both renames, before the moved log is opened (both logs' locks held)
            renamed, go = threading.Event(), threading.Event()
            opened = PartitionLog.open

            def open_after_a_pause(*args: Any, **kwargs: Any) -> Any:
                renamed.set()
                assert go.wait(30)
                return opened(*args, **kwargs)

            monkeypatch.setattr(PartitionLog, "open", open_after_a_pause)
            mover = threading.Thread(target=_finish, args=(stepped,))
            mover.start()
            try:
                assert await asyncio.to_thread(renamed.wait, 30)
                describing = asyncio.ensure_future(b.describe())
                await asyncio.sleep(0.3)  # the describe waits for the swap (no answer without the replica)
                go.set()
                described = await describing
            finally:
                go.set()
                await asyncio.to_thread(mover.join, 30)
            monkeypatch.undo()
            assert described[where.name] == [] and described[other.name] == [(TOPIC, 0, False)]
    inprocess_broker.run(main())

def test_kctl_reassign_cancel_gives_up_a_move(tmp_path):
    """--cancel sends a replica still moving back to the dir it is in (Kafka's cancelAssignment): the broker
    deletes the future log."""
    async def main() -> None:
        async with running_broker(f"{tmp_path / 'a'},{tmp_path / 'b'}", Broker,
                                  **{"offsets.topic.num.partitions": "1"}) as b:
            manager = b.server.log_manager
            b.server.admin.create_topic(TOPIC, 1, 1)
            _produce(manager, 0, 5)
            b.server.replica_manager.alter_log_dirs = _mover(manager)  # the move stays in progress
            other = next(d for d in manager.log_dirs if d != manager.partition(TOPIC, 0).directory.parent)
            assert await b.alter(str(other)) == [(TOPIC, 0, ErrorCode.none)]
            future_dir = manager.future_log(TOPIC, 0).directory
            host, port = b.server.bound[0]
            plan = ReassignmentPlan({(TOPIC, 0): [0]}, {(TOPIC, 0, 0): str(other.resolve())})

            def cancelled() -> Any:
                with KafkaClient(f"{host}:{port}") as client:
                    return cancel(client, plan)

            result = await asyncio.to_thread(cancelled)
            assert result.moves_cancelled == [(TOPIC, 0, 0)] and result.cancelled == []
            assert not manager.future_logs
            manager.purge_deleted(force=True)
            assert not future_dir.exists()
    inprocess_broker.run(main())


def test_a_restarted_broker_resumes_the_move(tmp_path):
    """A broker stopped mid-move finds the `-future` dir when it loads its logs and its mover finishes the move."""
    dirs = f"{tmp_path / 'a'},{tmp_path / 'b'}"
    options = {"offsets.topic.num.partitions": "1", "log.segment.bytes": str(SEGMENT_BYTES),
               "log.segment.delete.delay.ms": "0"}

    async def first() -> tuple[Path, list[tuple[int, bytes]]]:
        async with running_broker(dirs, Broker, **options) as b:
            manager = b.server.log_manager
            b.server.admin.create_topic(TOPIC, 1, 1)
            _produce(manager, 0, 40)
            stepped = _mover(manager, chunk_bytes=400)
            b.server.replica_manager.alter_log_dirs = stepped
            where = manager.partition(TOPIC, 0).directory.parent
            other = next(d for d in manager.log_dirs if d != where)
            assert await b.alter(str(other)) == [(TOPIC, 0, ErrorCode.none)]
            stepped.step((TOPIC, 0), manager.future_log(TOPIC, 0))
            assert 0 < manager.future_log(TOPIC, 0).log.log_end_offset < 80
            return other, _batches(manager.partition(TOPIC, 0).log)

    async def second(other: Path, expected: list[tuple[int, bytes]]) -> None:
        async with running_broker(dirs, Broker, **options) as b:
            manager = b.server.log_manager
            for _ in range(500):
                if not manager.future_logs:
                    break
                await asyncio.sleep(0.02)
            current = manager.partition(TOPIC, 0)
            assert not manager.future_logs and current.directory == other / f"{TOPIC}-0"
            assert _batches(current.log) == expected
            assert b.server.replica_manager.alter_log_dirs.moved == 1

    other, expected = inprocess_broker.run(first())
    inprocess_broker.run(second(other, expected))


def test_the_copy_keeps_to_the_alter_log_dirs_quota(tmp_path):
    """replica.alter.log.dirs.io.max.bytes.per.second (the AlterLogDirsReplication quota): once the copy's rate
    is above the bound, no chunk is read until the rate falls again."""
    from kcli.broker.replication_quotas import ALTER_LOG_DIRS, ReplicationQuotaManager

    now = [1000.0]
    quota = ReplicationQuotaManager(ALTER_LOG_DIRS, clock=lambda: now[0])
    quota.update_quota(1000)  # bytes/s: one 400-byte chunk a second or so
    manager = _manager(tmp_path)
    try:
        manager.create_topic(TOPIC, 1)
        _produce(manager, 0, 20)
        mover = _mover(manager, chunk_bytes=400)
        mover.quota = quota
        mover.alter_replica_log_dirs({(TOPIC, 0): str(tmp_path / "b")})
        future = manager.future_log(TOPIC, 0)
        for _ in range(5):
            mover.step((TOPIC, 0), future)
        copied = future.log.log_end_offset
        assert 0 < copied < 40 and quota.held_back > 0 and quota.is_quota_exceeded()
        mover.step((TOPIC, 0), future)
        assert future.log.log_end_offset == copied  # held back
        now[0] += 30  # the window passes: the rate falls below the bound
        mover.step((TOPIC, 0), future)
        assert future.log.log_end_offset > copied
        quota.update_quota(None)  # unbounded: the move finishes
        _finish(mover)
        assert manager.partition(TOPIC, 0).directory.parent == tmp_path / "b"
    finally:
        manager.shutdown()
