"""The purgatory and its delayed operations in process (Kafka's DelayedOperationPurgatory, DelayedProduce and
DelayedFetch; DelayedOperationTest, ReplicaManagerTest): a leader's ReplicaManager with partitions of three
replicas, whose followers are played by calling fetch_messages with their replica ids, so that the high watermark
moves exactly when a test says. Nothing is started and nothing is timed: an operation is seen parked or done, and
a deadline is either far away or already past (1 ms); outcomes are asserted, never durations."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from kcli.broker.log_manager import LogManager
from kcli.broker.partition import LeaderAndIsrState, Partition
from kcli.broker.purgatory import DelayedOperation, DelayedOperationPurgatory
from kcli.broker.replica_manager import FetchParams, FetchPartition, ReplicaManager
from kcli.records import Record, build_record_batch
from kcli.records.record_set import iter_batches
from kcli.storage.log import LogConfig

TOPIC = "t"
LEADER, FOLLOWERS = 0, (1, 2)
EPOCH = 1
LONG_MS = 600_000  # a deadline no test reaches: operations here complete on a state change or not at all
PAST_MS = 1  # a deadline already passed when the loop next looks


def run(coroutine):
    return asyncio.run(coroutine)


async def settle() -> None:
    """Let every task that can run do so (a parked operation stays parked)."""
    for _ in range(5):
        await asyncio.sleep(0)


# -- the purgatory ------------------------------------------------------------------------------------------
class Operation(DelayedOperation):
    """Completes when ``ready``; records the order of its callbacks."""

    def __init__(self, delay_ms: float, ready: bool = False) -> None:
        super().__init__(delay_ms)
        self.ready = ready
        self.calls: list[str] = []

    def try_complete(self) -> bool:
        self.calls.append("try_complete")
        return self.force_complete() if self.ready else False

    def on_expiration(self) -> None:
        self.calls.append("on_expiration")

    def on_complete(self) -> str:
        self.calls.append("on_complete")
        return "expired" if "on_expiration" in self.calls else "done"


def test_an_operation_that_can_complete_at_once_is_never_watched():
    purgatory = DelayedOperationPurgatory("test")
    operation = Operation(LONG_MS, ready=True)
    assert run(purgatory.try_complete_else_watch(operation, ["a"])) == "done"
    assert operation.calls == ["try_complete", "on_complete"]
    assert purgatory.watched() == 0


def test_check_and_complete_on_a_watched_key_completes_once_and_unwatches_every_key():
    purgatory = DelayedOperationPurgatory("test")
    operation = Operation(LONG_MS)

    async def main():
        task = asyncio.ensure_future(purgatory.try_complete_else_watch(operation, ["a", "b"]))
        await settle()
        assert not task.done() and purgatory.watched() == 2
        assert purgatory.check_and_complete("a") == 0  # not ready: tried, still watched
        assert purgatory.check_and_complete("other") == 0
        operation.ready = True
        assert purgatory.check_and_complete("b") == 1
        assert purgatory.check_and_complete("a") == 0  # completed already: not tried again
        assert operation.force_complete() is False
        return await task

    assert run(main()) == "done"
    assert operation.calls == ["try_complete", "try_complete", "try_complete", "on_complete"]
    assert purgatory.watched() == 0


def test_at_its_deadline_an_operation_expires_then_completes_once():
    purgatory = DelayedOperationPurgatory("test")
    operation = Operation(PAST_MS)
    assert run(purgatory.try_complete_else_watch(operation, ["a"])) == "expired"
    assert operation.calls == ["try_complete", "on_expiration", "on_complete"]
    assert purgatory.watched() == 0
    assert purgatory.check_and_complete("a") == 0 and operation.calls[-1] == "on_complete"


@pytest.mark.parametrize("delay_ms,keys", [(0, ["a"]), (LONG_MS, [])], ids=["no-wait", "no-keys"])
def test_no_wait_or_nothing_to_watch_expires_at_once(delay_ms, keys):
    purgatory = DelayedOperationPurgatory("test")
    operation = Operation(delay_ms)
    assert run(purgatory.try_complete_else_watch(operation, keys)) == "expired"
    assert operation.calls == ["try_complete", "on_expiration", "on_complete"]
    assert purgatory.watched() == 0


def test_completed_as_its_deadline_passes_it_is_not_expired_too():
    """The completion and the timeout land in the same turn of the loop: one of them wins, once."""
    purgatory = DelayedOperationPurgatory("test")
    operation = Operation(PAST_MS)

    async def main():
        task = asyncio.ensure_future(purgatory.try_complete_else_watch(operation, ["a"]))
        await asyncio.sleep(0)  # parked, its timeout armed
        operation.ready = True
        assert purgatory.check_and_complete("a") == 1
        time.sleep(PAST_MS / 1000 * 10)  # the loop held past the deadline: its next turn sees both
        return await task

    assert run(main()) == "done"
    assert operation.calls.count("on_complete") == 1 and "on_expiration" not in operation.calls
    assert purgatory.watched() == 0


def test_a_cancelled_wait_leaves_no_watcher_and_nothing_completed():
    purgatory = DelayedOperationPurgatory("test")
    operation = Operation(LONG_MS)

    async def main():
        task = asyncio.ensure_future(purgatory.try_complete_else_watch(operation, ["a", "b"]))
        await settle()
        assert purgatory.watched() == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert purgatory.watched() == 0
        operation.ready = True
        assert purgatory.check_and_complete("a") == 0

    run(main())
    assert not operation.is_completed and "on_complete" not in operation.calls


def test_cancel_all_cancels_the_waiting_callers():
    purgatory = DelayedOperationPurgatory("test")

    async def main():
        tasks = [asyncio.ensure_future(purgatory.try_complete_else_watch(Operation(LONG_MS), [key]))
                 for key in ("a", "b")]
        await settle()
        purgatory.cancel_all()
        assert purgatory.watched() == 0
        return await asyncio.gather(*tasks, return_exceptions=True)

    assert [type(outcome) for outcome in run(main())] == [asyncio.CancelledError] * 2


# -- a leader of partitions with three replicas ------------------------------------------------------------
def batch(values: list[bytes]) -> bytes:
    return build_record_batch([Record(i, 1_700_000_000_000 + i, None, v) for i, v in enumerate(values)],
                              partition_leader_epoch=EPOCH)


def leader_state(isr=(LEADER, *FOLLOWERS), replicas=(LEADER, *FOLLOWERS), epoch=EPOCH, leader=LEADER):
    return LeaderAndIsrState(controller_epoch=1, leader=leader, leader_epoch=epoch, isr=list(isr),
                             partition_epoch=epoch, replicas=list(replicas))


class IsrChanges:
    """What the leader submits to ZooKeeper (ZkIsrManager); the test commits them as the znode write would."""

    def __init__(self) -> None:
        self.submitted: list[tuple[Partition, list[int]]] = []

    def submit(self, partition: Partition, new_isr: list[int]) -> None:
        self.submitted.append((partition, new_isr))


@pytest.fixture
def leader(tmp_path):
    """Broker 0's ReplicaManager leading t-0 and t-1 (replicas 0, 1, 2, all in the ISR, min.insync.replicas 2) and
    t-2 (its only replica)."""
    (tmp_path / "logs").mkdir()
    logs = LogManager([tmp_path / "logs"], broker_id=LEADER, log_config=LogConfig())
    manager = ReplicaManager(logs, local_broker_id=LEADER, isr_listener=IsrChanges())
    for index in range(3):
        config = LogConfig() if index == 2 else LogConfig(min_insync_replicas=2)
        managed = logs.get_or_create_log(TOPIC, index, uuid.UUID(int=24), config)
        partition = Partition(TOPIC, index, uuid.UUID(int=24), managed, local_broker_id=LEADER)
        partition.make_leader(leader_state(isr=(LEADER,), replicas=(LEADER,)) if index == 2 else leader_state())
        manager.add_partition(partition)
    return manager


def follower_fetch(manager: ReplicaManager, follower: int, offsets: dict[int, int]) -> None:
    """Follower ``follower`` fetches partition -> offset: the leader learns its log end (no wait)."""
    params = FetchParams(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, read_committed=False, replica_id=follower)
    infos = [FetchPartition(TOPIC, p, offset, 1 << 20, current_leader_epoch=EPOCH) for p, offset in offsets.items()]
    results = run_now(manager.fetch_messages(params, infos))
    assert [r.error for r in results] == [ErrorCode.none] * len(infos)
    for r in results:
        if hasattr(r.read.records, "close"):
            r.read.records.close()


def run_now(coroutine):
    """Run a coroutine that does not wait (max_wait 0) inside the running loop's turn."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    raise AssertionError("the coroutine waited")


def produce(manager: ReplicaManager, entries: dict[int, list[bytes]], timeout_ms: int = LONG_MS):
    return manager.append_and_wait(-1, timeout_ms, {(TOPIC, p): batch(values) for p, values in entries.items()})


def errors(results) -> dict[int, ErrorCode]:
    return {p: r.error for (_, p), r in results.items()}


def test_acks_all_completes_when_the_high_watermark_passed_the_last_offset_of_every_partition(leader):
    async def main():
        task = asyncio.ensure_future(produce(leader, {0: [b"a", b"b", b"c"], 1: [b"d"]}))
        await settle()
        assert not task.done() and leader.produce_purgatory.watched() == 2
        follower_fetch(leader, 1, {0: 3, 1: 1})
        follower_fetch(leader, 2, {0: 2})  # t-0's high watermark 2: its last offset (2) is not below it yet
        await settle()
        assert leader.partitions[(TOPIC, 0)].high_watermark == 2 and not task.done()
        follower_fetch(leader, 2, {0: 3})  # t-0 done; t-1 still waits for follower 2
        await settle()
        assert not task.done()
        follower_fetch(leader, 2, {1: 1})
        await settle()
        assert task.done()
        return task.result()

    results = run(main())
    assert errors(results) == {0: ErrorCode.none, 1: ErrorCode.none}
    assert (results[(TOPIC, 0)].base_offset, results[(TOPIC, 1)].base_offset) == (0, 0)
    assert leader.produce_purgatory.watched() == 0


def test_the_isr_shrinking_below_min_insync_replicas_answers_not_enough_replicas_after_append(leader):
    """The records were appended with the ISR at 3; both followers then fall out of it. The high watermark passes
    them (the ISR is the leader alone), and the answer is NOT_ENOUGH_REPLICAS_AFTER_APPEND (Kafka's
    DelayedProduce, Partition.checkEnoughReplicasReachOffset); the next acks=all produce is refused before the
    append, NOT_ENOUGH_REPLICAS. Which of the two a client sees depends on when the shrink lands."""
    partition = leader.partitions[(TOPIC, 0)]

    async def main():
        task = asyncio.ensure_future(produce(leader, {0: [b"a"]}))
        await settle()
        for follower in FOLLOWERS:  # not caught up for longer than replica.lag.time.max.ms
            partition.remote[follower].last_caught_up_time_ms = 0
        leader.shrink_isrs()
        assert [(p.index, isr) for p, isr in leader.isr_listener.submitted] == [(0, [LEADER])]
        await settle()
        assert not task.done()  # submitted, not committed: the ISR is still 3
        leader.isr_committed(partition, [LEADER], partition.partition_epoch + 1)
        await settle()
        assert task.done()
        return task.result()

    assert errors(run(main())) == {0: ErrorCode.not_enough_replicas_after_append}
    assert partition.high_watermark == 1
    refused = run(produce(leader, {0: [b"b"]}))
    assert errors(refused) == {0: ErrorCode.not_enough_replicas}
    assert partition.log_end_offset == 1  # not appended


def test_leadership_moving_away_answers_not_leader_or_follower(leader):
    async def main():
        task = asyncio.ensure_future(produce(leader, {0: [b"a"], 1: [b"b"]}))
        await settle()
        follower_fetch(leader, 1, {1: 1})
        follower_fetch(leader, 2, {1: 1})  # t-1 replicated
        errors_by_partition, leaders, followers = leader.become_leader_or_follower(
            {(TOPIC, 0): leader_state(epoch=EPOCH + 1, leader=1)}, lambda topic, index, state: leader.partitions[
                (topic, index)])
        assert errors_by_partition == {(TOPIC, 0): ErrorCode.none} and [p.index for p in followers] == [0]
        await settle()
        assert task.done()
        return task.result()

    assert errors(run(main())) == {0: ErrorCode.not_leader_or_follower, 1: ErrorCode.none}
    assert leader.produce_purgatory.watched() == 0


def test_the_partition_going_answers_unknown_topic_or_partition(leader):
    async def main():
        task = asyncio.ensure_future(produce(leader, {0: [b"a"]}))
        await settle()
        assert leader.stop_replica(TOPIC, 0, EPOCH + 1) is not None  # StopReplica: reassigned away, or deleted
        await settle()
        assert task.done()
        return task.result()

    assert errors(run(main())) == {0: ErrorCode.unknown_topic_or_partition}


def test_at_the_deadline_what_is_pending_times_out_and_the_rest_keeps_its_answer(leader):
    """t-2 (one replica) is replicated at once, t-0 is not, and t-9 does not exist: one answer per partition."""
    entries = {(TOPIC, p): batch([b"x"]) for p in (0, 2, 9)}
    results = run(leader.append_and_wait(-1, PAST_MS, entries))
    assert errors(results) == {0: ErrorCode.request_timed_out, 2: ErrorCode.none,
                               9: ErrorCode.unknown_topic_or_partition}
    assert results[(TOPIC, 0)].base_offset == 0 and results[(TOPIC, 2)].base_offset == 0
    assert leader.produce_purgatory.watched() == 0
    # The timed-out records stay in the log; replicated later, they are committed like any other.
    follower_fetch(leader, 1, {0: 1})
    follower_fetch(leader, 2, {0: 1})
    assert leader.partitions[(TOPIC, 0)].high_watermark == 1


def test_acks_1_and_an_append_error_never_wait(leader):
    async def main():
        acks_1 = leader.append_and_wait(1, LONG_MS, {(TOPIC, 0): batch([b"a"])})
        all_failed = leader.append_and_wait(-1, LONG_MS, {(TOPIC, 9): batch([b"a"])})
        return await asyncio.gather(acks_1, all_failed)

    acks_1, all_failed = run(main())
    assert errors(acks_1) == {0: ErrorCode.none} and errors(all_failed) == {9: ErrorCode.unknown_topic_or_partition}
    assert leader.produce_purgatory.watched() == 0


def test_a_cancelled_produce_leaves_no_watcher(leader):
    async def main():
        task = asyncio.ensure_future(produce(leader, {0: [b"a"], 1: [b"b"]}))
        await settle()
        assert leader.produce_purgatory.watched() == 2
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert leader.produce_purgatory.watched() == 0
        follower_fetch(leader, 1, {0: 1, 1: 1})
        follower_fetch(leader, 2, {0: 1, 1: 1})  # nothing left to complete

    run(main())


# -- DelayedFetch: min.bytes and max.wait ------------------------------------------------------------------
def consumer_fetch(manager: ReplicaManager, index: int, offset: int, *, min_bytes: int, max_wait_ms: int,
                   current_leader_epoch: int = EPOCH):
    params = FetchParams(max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20, read_committed=False)
    return manager.fetch_messages(params, [FetchPartition(TOPIC, index, offset, 1 << 20,
                                                          current_leader_epoch=current_leader_epoch)])


def offsets(result) -> list[int]:
    records = result.read.records
    raw = records.read() if hasattr(records, "read") else bytes(records)
    if hasattr(records, "close"):
        records.close()
    return [b.base_offset for b in iter_batches(raw)]


def test_a_consumer_fetch_waits_for_min_bytes_below_the_high_watermark(leader):
    """min.bytes above one batch: the append alone completes nothing (the consumer reads below the high
    watermark), a high watermark over one batch is not enough, over two it is."""
    one = len(batch([b"a" * 100]))

    async def main():
        task = asyncio.ensure_future(consumer_fetch(leader, 0, 0, min_bytes=one + 1, max_wait_ms=LONG_MS))
        await settle()
        assert not task.done() and leader.fetch_purgatory.watched() == 1
        for _ in range(2):
            assert errors(leader.append_records(1, {(TOPIC, 0): batch([b"a" * 100])})) == {0: ErrorCode.none}
        await settle()
        assert not task.done()  # on the log, not yet replicated
        for follower in FOLLOWERS:
            follower_fetch(leader, follower, {0: 1})
        await settle()
        assert not task.done()  # one batch below the high watermark: fewer bytes than min.bytes
        for follower in FOLLOWERS:
            follower_fetch(leader, follower, {0: 2})
        await settle()
        assert task.done()
        return task.result()

    [result] = run(main())
    assert result.error == ErrorCode.none and offsets(result) == [0, 1]
    assert result.read.high_watermark == 2
    assert leader.fetch_purgatory.watched() == 0


def test_at_max_wait_a_fetch_answers_with_what_there_is(leader):
    assert errors(leader.append_records(1, {(TOPIC, 2): batch([b"a"])})) == {2: ErrorCode.none}
    [short] = run(consumer_fetch(leader, 2, 0, min_bytes=1 << 20, max_wait_ms=PAST_MS))
    assert short.error == ErrorCode.none and offsets(short) == [0]
    [empty] = run(consumer_fetch(leader, 2, 1, min_bytes=1, max_wait_ms=PAST_MS))
    assert empty.error == ErrorCode.none and offsets(empty) == []
    assert leader.fetch_purgatory.watched() == 0


@pytest.mark.parametrize("current_leader_epoch,expected", [
    (-1, ErrorCode.not_leader_or_follower),  # a client that sends no epoch (Fetch below v9)
    (EPOCH, ErrorCode.fenced_leader_epoch),  # KIP-320: the epoch is checked first
])
def test_a_parked_fetch_answers_at_once_when_leadership_moves(leader, current_leader_epoch, expected):
    async def main():
        task = asyncio.ensure_future(consumer_fetch(leader, 0, 0, min_bytes=1, max_wait_ms=LONG_MS,
                                                    current_leader_epoch=current_leader_epoch))
        await settle()
        assert not task.done()
        leader.become_leader_or_follower({(TOPIC, 0): leader_state(epoch=EPOCH + 1, leader=1)},
                                         lambda topic, index, state: leader.partitions[(topic, index)])
        await settle()
        assert task.done()
        return task.result()

    [result] = run(main())
    assert result.error == expected
    assert leader.fetch_purgatory.watched() == 0
