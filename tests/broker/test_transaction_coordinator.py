"""The transaction coordinator in process: a KafkaServer over a temp dir, its handlers called with decoded
requests. Kafka's state table (TransactionState.validPreviousStates), InitProducerId's epoch bumps and fencing
(KIP-360 retries, epoch exhaustion, a fence whose write failed), EndTxn's table, timeouts, loading after a
restart (a PrepareCommit is completed), the marker channel's retries, and transactional offsets that stay
invisible until their marker (kafka-cluster.md §8, and §9 item 12)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import itertools
from pathlib import Path
from typing import Any

import pytest
from kio.schema.add_offsets_to_txn.v3 import request as add_offsets_req
from kio.schema.add_partitions_to_txn.v1 import request as add_v1
from kio.schema.add_partitions_to_txn.v3 import request as add_v3
from kio.schema.add_partitions_to_txn.v4 import request as add_v4
from kio.schema.end_txn.v1 import request as end_v1
from kio.schema.end_txn.v3 import request as end_v3
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as init_req
from kio.schema.list_transactions.v0 import request as list_req
from kio.schema.offset_fetch.v7 import request as fetch_req
from kio.schema.txn_offset_commit.v3 import request as txn_commit_req

import inprocess_broker
from inprocess_broker import InProcessBroker, running_broker
from kcli.broker.server import KafkaServer
from kcli.broker.transaction_coordinator import (
    STATE_NAMES,
    TRANSACTION_STATE_TOPIC,
    VALID_PREVIOUS_STATES,
    IllegalTransactionStateError,
    TransactionMetadata,
    partition_for_transactional_id,
)
from kcli.broker.transaction_markers import TransactionMarkerChannelManager
from kcli.protocol import ApiKey
from kcli.records.control import parse_control_type
from kcli.records.transaction_log import TransactionState as S
from kcli.storage.offsets_topic import iter_partition_batches

TXN = "txn-app"
TOPIC = "t"
TIMEOUT = datetime.timedelta(seconds=60)


class Broker(InProcessBroker):
    def __init__(self, server: KafkaServer) -> None:
        super().__init__(server)
        self.coordinator = server.transactions

    async def init(self, txn: str = TXN, *, timeout: datetime.timedelta = TIMEOUT, pid: int = -1,
                   epoch: int = -1, version: int = 4) -> Any:
        return await self.call(ApiKey.INIT_PRODUCER_ID, version, init_req.InitProducerIdRequest(
            transactional_id=txn, transaction_timeout=timeout, producer_id=pid, producer_epoch=epoch))

    async def add(self, pid: int, epoch: int, partitions: tuple[int, ...] = (0, 1), *, txn: str = TXN,
                  version: int = 3, topic: str = TOPIC) -> ErrorCode:
        schema = add_v3 if version == 3 else add_v1
        response = await self.call(ApiKey.ADD_PARTITIONS_TO_TXN, version, schema.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=txn, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(schema.AddPartitionsToTxnTopic(name=topic, partitions=partitions),)))
        errors = {p.partition_error_code for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}
        assert len(errors) == 1, errors
        return errors.pop()

    async def end(self, pid: int, epoch: int, commit: bool, *, txn: str = TXN, version: int = 3) -> ErrorCode:
        schema = end_v3 if version == 3 else end_v1
        response = await self.call(ApiKey.END_TXN, version, schema.EndTxnRequest(
            transactional_id=txn, producer_id=pid, producer_epoch=epoch, committed=commit))
        return response.error_code

    def metadata(self, txn: str = TXN) -> TransactionMetadata:
        error, found = self.coordinator.get_transaction_state(txn)
        assert error is None and found is not None, error
        return found[1]

    async def settled(self, txn: str = TXN) -> TransactionMetadata:
        """Wait until the markers are written and the Complete state is (no pending transition)."""
        for _ in range(500):
            metadata = self.metadata(txn)
            if metadata.pending_state is None and metadata.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                return metadata
            await asyncio.sleep(0.01)
        raise AssertionError(f"{txn} never settled: {self.metadata(txn)}")

    def markers(self, topic: str = TOPIC, partition: int = 0) -> list[tuple[str, int, int]]:
        """(COMMIT|ABORT, producer id, epoch) of the partition's control batches."""
        managed = self.server.log_manager.partition(topic, partition)
        out = []
        for batch in iter_partition_batches(managed.directory):
            if batch.is_control:
                out.append((parse_control_type(batch.records()[0].key).name, batch.producer_id, batch.producer_epoch))
        return out


@contextlib.asynccontextmanager
async def running(log_dir: Path, **overrides: str):
    options = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "3", **overrides}
    async with running_broker(log_dir, Broker, transactions_loaded=True, **options) as broker:
        if broker.server.metadata.partition_count(TOPIC) is None:
            broker.server.admin.create_topic(TOPIC, 2, 1)
        assert broker.server.transactions.ensure_topic() is None
        yield broker


run = inprocess_broker.run


# -- the state table -------------------------------------------------------------------------------------
def test_state_table_is_kafkas():
    assert VALID_PREVIOUS_STATES == {
        S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_COMMIT: {S.ONGOING},
        S.PREPARE_ABORT: {S.ONGOING, S.PREPARE_EPOCH_FENCE},
        S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
        S.COMPLETE_ABORT: {S.PREPARE_ABORT},
        S.DEAD: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
        S.PREPARE_EPOCH_FENCE: {S.ONGOING},
    }
    assert [STATE_NAMES[s] for s in S] == ["Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                                          "CompleteAbort", "Dead", "PrepareEpochFence"]
    for source, target in itertools.product(S, (S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.DEAD)):
        metadata = TransactionMetadata("x", 1, -1, 0, -1, 1000, source)
        if source in VALID_PREVIOUS_STATES[target]:
            metadata._prepare(target, 1, 0, -1, 1000, frozenset(), 0, 0)
            assert metadata.pending_state is target
        else:
            with pytest.raises(IllegalTransactionStateError):
                metadata._prepare(target, 1, 0, -1, 1000, frozenset(), 0, 0)
    metadata = TransactionMetadata("x", 1, -1, 0, -1, 1000, S.ONGOING)
    metadata.prepare_abort_or_commit(S.PREPARE_COMMIT, 1)
    with pytest.raises(IllegalTransactionStateError, match="pending"):  # one transition at a time
        metadata.prepare_abort_or_commit(S.PREPARE_ABORT, 2)


def test_partition_for_is_javas_hash_rule():
    # Utils.abs("".hashCode) % n, and the MIN_VALUE case ("polygenelubricants".hashCode == Integer.MIN_VALUE)
    assert partition_for_transactional_id("", 50) == 0
    assert partition_for_transactional_id("polygenelubricants", 50) == 0
    assert partition_for_transactional_id("my-txn", 50) == 1061187895 % 50  # "my-txn".hashCode() == -1061187895


# -- InitProducerId ----------------------------------------------------------------------------------------
def test_init_producer_id_bumps_the_epoch_and_fences(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            first = await b.init()
            assert (first.error_code, first.producer_epoch) == (ErrorCode.none, 0)
            second = await b.init()
            assert (second.error_code, second.producer_id, second.producer_epoch) == (0, first.producer_id, 1)
            assert await b.add(first.producer_id, 0) == ErrorCode.producer_fenced
            assert await b.add(first.producer_id, 0, version=1) == ErrorCode.invalid_producer_epoch  # < v2
            assert await b.add(first.producer_id + 99, 1) == ErrorCode.invalid_producer_id_mapping
            assert await b.add(first.producer_id, 1, txn="unknown") == ErrorCode.invalid_producer_id_mapping
            # KIP-360: the producer's own (pid, epoch) bumps; a retry of that bump gets the same epoch
            recovered = await b.init(pid=first.producer_id, epoch=1)
            assert recovered.producer_epoch == 2
            assert (await b.init(pid=first.producer_id, epoch=1)).producer_epoch == 2
            assert (await b.init(pid=first.producer_id, epoch=0)).error_code == ErrorCode.producer_fenced
            assert (await b.init(pid=first.producer_id, epoch=0, version=3)).error_code == \
                ErrorCode.invalid_producer_epoch
            assert (await b.init(timeout=datetime.timedelta(hours=1))).error_code == \
                ErrorCode.invalid_transaction_timeout
            assert (await b.init(timeout=datetime.timedelta(0))).error_code == ErrorCode.invalid_transaction_timeout
            assert (await b.init("")).error_code == ErrorCode.invalid_request
            assert (await b.init(pid=first.producer_id)).error_code == ErrorCode.invalid_request
            # idempotent producers get ids of their own, above the transactional one
            plain = await b.call(ApiKey.INIT_PRODUCER_ID, 4, init_req.InitProducerIdRequest(
                transactional_id=None, transaction_timeout=TIMEOUT, producer_id=-1, producer_epoch=-1))
            assert plain.producer_id > first.producer_id and plain.producer_epoch == 0
    run(main())


def test_exhausted_epoch_rotates_the_producer_id(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            first = await b.init()
            b.metadata().producer_epoch = 32766  # Short.MaxValue - 1: exhausted
            rotated = await b.init()
            assert rotated.producer_id != first.producer_id and rotated.producer_epoch == 0
            assert b.metadata().last_producer_id == first.producer_id
    run(main())


def test_init_during_an_open_transaction_aborts_it_under_a_bumped_epoch(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            pid = (await b.init()).producer_id
            assert await b.add(pid, 0) == ErrorCode.none
            assert b.metadata().state is S.ONGOING
            assert (await b.init()).error_code == ErrorCode.concurrent_transactions
            settled = await b.settled()
            assert (settled.state, settled.producer_epoch) == (S.COMPLETE_ABORT, 1)
            assert b.markers(partition=0) == [("ABORT", pid, 1)] and b.markers(partition=1) == [("ABORT", pid, 1)]
            assert (await b.init()).producer_epoch == 2  # the retry bumps again
            assert await b.end(pid, 0, commit=True) == ErrorCode.producer_fenced
    run(main())


def test_a_failed_fence_does_not_bump_twice(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            pid = (await b.init()).producer_id
            assert await b.add(pid, 0) == ErrorCode.none
            replicas = b.server.replica_manager
            original = replicas.append_and_wait

            async def refuse(acks, timeout_ms, entries, **kwargs):
                results = await original(acks, timeout_ms, {}, **kwargs)
                from kcli.broker.replica_manager import PartitionAppend
                return {tp: PartitionAppend(ErrorCode.not_enough_replicas) for tp in entries} | results

            replicas.append_and_wait = refuse
            assert (await b.init()).error_code == ErrorCode.coordinator_not_available
            metadata = b.metadata()
            assert (metadata.state, metadata.producer_epoch, metadata.has_failed_epoch_fence) == (S.ONGOING, 1, True)
            assert metadata.pending_state is None
            replicas.append_and_wait = original
            assert (await b.init()).error_code == ErrorCode.concurrent_transactions
            settled = await b.settled()
            assert (settled.state, settled.producer_epoch, settled.has_failed_epoch_fence) == (S.COMPLETE_ABORT, 1,
                                                                                              False)
    run(main())


# -- AddPartitionsToTxn / EndTxn ------------------------------------------------------------------------------
def test_end_txn_follows_kafkas_table(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            pid = (await b.init()).producer_id
            assert await b.end(pid, 0, commit=True) == ErrorCode.invalid_txn_state  # Empty
            assert await b.end(pid + 1, 0, commit=True) == ErrorCode.invalid_producer_id_mapping
            assert await b.end(pid, 0, commit=True, txn="unknown") == ErrorCode.invalid_producer_id_mapping
            assert await b.add(pid, 0, (0,)) == ErrorCode.none
            records = b.server.log_manager.partition(TRANSACTION_STATE_TOPIC, b.coordinator.partition_for(TXN))
            written = records.log.log_end_offset
            assert await b.add(pid, 0, (0,)) == ErrorCode.none  # nothing new: no write
            assert records.log.log_end_offset == written
            assert await b.add(pid, 0, (0, 1)) == ErrorCode.none
            assert b.metadata().topic_partitions == {(TOPIC, 0), (TOPIC, 1)}
            assert await b.end(pid, 1, commit=True) == ErrorCode.producer_fenced  # a client's epoch must equal
            assert await b.end(pid, 1, commit=True, version=1) == ErrorCode.invalid_producer_epoch
            assert await b.end(pid, 0, commit=True) == ErrorCode.none
            settled = await b.settled()
            assert (settled.state, settled.topic_partitions) == (S.COMPLETE_COMMIT, set())
            assert b.markers(partition=1) == [("COMMIT", pid, 0)]
            assert await b.end(pid, 0, commit=True) == ErrorCode.none  # a retry
            assert await b.end(pid, 0, commit=False) == ErrorCode.invalid_txn_state  # crossed outcome
            assert await b.add(pid, 0, (1,)) == ErrorCode.none  # Complete* + partitions: a new transaction
            assert b.metadata().state is S.ONGOING
            assert await b.end(pid, 0, commit=False) == ErrorCode.none
            assert (await b.settled()).state is S.COMPLETE_ABORT
            assert await b.end(pid, 0, commit=False) == ErrorCode.none
            assert await b.end(pid, 0, commit=True) == ErrorCode.invalid_txn_state
            # unknown partitions fail the whole call; the others are not attempted
            response = await b.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_v3.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=TXN, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=0,
                v3_and_below_topics=(add_v3.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0, 7)),)))
            assert {p.partition_index: p.partition_error_code for p in
                    response.results_by_topic_v3_and_below[0].results_by_partition} == {
                0: ErrorCode.operation_not_attempted, 7: ErrorCode.unknown_topic_or_partition}
    run(main())


def test_add_partitions_v4_batches_and_verifies(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            pid = (await b.init()).producer_id
            response = await b.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, add_v4.AddPartitionsToTxnRequest(transactions=(
                add_v4.AddPartitionsToTxnTransaction(transactional_id=TXN, producer_id=pid, producer_epoch=0,
                                                     verify_only=False, topics=(add_v4.AddPartitionsToTxnTopic(
                                                         name=TOPIC, partitions=(0,)),)),)))
            assert response.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code == 0
            verified = await b.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, add_v4.AddPartitionsToTxnRequest(transactions=(
                add_v4.AddPartitionsToTxnTransaction(transactional_id=TXN, producer_id=pid, producer_epoch=0,
                                                     verify_only=True, topics=(add_v4.AddPartitionsToTxnTopic(
                                                         name=TOPIC, partitions=(0, 1)),)),)))
            codes = {p.partition_index: p.partition_error_code
                     for p in verified.results_by_transaction[0].topic_results[0].results_by_partition}
            assert codes == {0: ErrorCode.none, 1: ErrorCode.invalid_txn_state}
            assert b.metadata().topic_partitions == {(TOPIC, 0)}
    run(main())


def test_timed_out_transaction_is_fenced_and_aborted(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            pid = (await b.init(timeout=datetime.timedelta(seconds=1))).producer_id
            assert await b.add(pid, 0, (0,)) == ErrorCode.none
            assert await b.coordinator.abort_timed_out_transactions() == 0  # not yet
            b.metadata().txn_start_timestamp -= 5000
            assert await b.coordinator.abort_timed_out_transactions() == 1
            settled = await b.settled()
            assert (settled.state, settled.producer_epoch) == (S.COMPLETE_ABORT, 1)
            assert await b.end(pid, 0, commit=True) == ErrorCode.producer_fenced
            assert await b.end(pid, 0, commit=True, version=1) == ErrorCode.invalid_producer_epoch
            assert b.markers(partition=0) == [("ABORT", pid, 1)]
    run(main())


# -- loading ---------------------------------------------------------------------------------------------------
def test_a_prepare_commit_found_at_load_is_completed(tmp_path):
    """The broker stops with PrepareCommit written and no marker sent; the restarted coordinator reads it,
    writes the COMMIT markers and then CompleteCommit; while it loads, requests wait."""
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            pid = (await b.init()).producer_id
            assert await b.add(pid, 0, (0, 1)) == ErrorCode.none
            sent = []
            b.coordinator.markers.add_markers_to_send = lambda *args: sent.append(args)  # the broker "dies" here
            assert await b.end(pid, 0, commit=True) == ErrorCode.none
            assert b.metadata().state is S.PREPARE_COMMIT and len(sent) == 1
            assert b.markers(partition=0) == []
        async with running(tmp_path / "logs") as b:
            settled = await b.settled()
            assert (settled.state, settled.producer_id, settled.producer_epoch) == (S.COMPLETE_COMMIT, pid, 0)
            assert b.markers(partition=0) == [("COMMIT", pid, 0)] and b.markers(partition=1) == [("COMMIT", pid, 0)]
            index = b.coordinator.partition_for(TXN)
            b.coordinator.on_election(index, 5)
            assert b.coordinator.get_transaction_state(TXN)[0] == ErrorCode.coordinator_load_in_progress
            assert (await b.init()).error_code == ErrorCode.coordinator_load_in_progress
            listed = await b.call(ApiKey.LIST_TRANSACTIONS, 0, list_req.ListTransactionsRequest(
                state_filters=(), producer_id_filters=()))
            assert listed.error_code == ErrorCode.coordinator_load_in_progress
            b.coordinator.finish_loading(index, 5, await asyncio.to_thread(b.coordinator.load_partition, index))
            assert b.coordinator.get_transaction_state(TXN)[1][0] == 5  # the new coordinator epoch
            b.coordinator.on_resignation(index)
            assert b.coordinator.get_transaction_state(TXN)[0] == ErrorCode.not_coordinator
    run(main())


def test_list_and_describe(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            pid = (await b.init()).producer_id
            await b.init("other")
            assert await b.add(pid, 0, (1,)) == ErrorCode.none
            listed = await b.call(ApiKey.LIST_TRANSACTIONS, 0, list_req.ListTransactionsRequest(
                state_filters=("Ongoing", "Bogus"), producer_id_filters=()))
            assert [(t.transactional_id, t.producer_id, t.transaction_state) for t in listed.transaction_states] == \
                [(TXN, pid, "Ongoing")]
            assert listed.unknown_state_filters == ("Bogus",)
            everything = b.coordinator.list_transactions()[1]
            assert {t.transactional_id: t.state for t in everything} == {TXN: "Ongoing", "other": "Empty"}
            described = b.coordinator.describe(TXN)
            assert (described.state, described.partitions, described.timeout_ms) == ("Ongoing", ((TOPIC, 1),), 60000)
            assert b.coordinator.describe("nope").error == ErrorCode.transactional_id_not_found
            assert b.coordinator.describe("other").start_timestamp == -1
    run(main())


# -- the marker channel --------------------------------------------------------------------------------------
def test_marker_channel_retries_until_every_partition_has_its_marker(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            pid = (await b.init()).producer_id
            assert await b.add(pid, 0, (0, 1)) == ErrorCode.none
            attempts: list[tuple] = []
            real = b.coordinator.markers

            async def flaky(markers):
                attempts.append(markers[0].partitions)
                if len(attempts) == 1:  # the leader moved: retried
                    return [{tp: ErrorCode.not_leader_or_follower for tp in markers[0].partitions}]
                if len(attempts) == 2:  # one partition done, one not yet replicated
                    first, *rest = markers[0].partitions
                    return [{first: ErrorCode.none, **{tp: ErrorCode.not_enough_replicas for tp in rest}}]
                return await real.write_local(markers)

            b.coordinator.markers = TransactionMarkerChannelManager(
                b.coordinator, local_broker_id=0, leader_of=lambda t, p: 0, endpoint=lambda n: None,
                write_local=flaky, request_timeout_ms=1000)
            assert await b.end(pid, 0, commit=True) == ErrorCode.none
            settled = await b.settled()
            assert settled.state is S.COMPLETE_COMMIT
            assert attempts == [((TOPIC, 0), (TOPIC, 1)), ((TOPIC, 0), (TOPIC, 1)), ((TOPIC, 1),)]
            assert b.markers(partition=0) == [] and b.markers(partition=1) == [("COMMIT", pid, 0)]
    run(main())


# -- transactional offsets -----------------------------------------------------------------------------------
def test_transactional_offsets_are_invisible_until_the_commit_marker(tmp_path):
    group = "txn-group"

    async def fetch(b: Broker, require_stable: bool) -> tuple[int, ErrorCode]:
        response = await b.call(ApiKey.OFFSET_FETCH, 7, fetch_req.OffsetFetchRequest(
            group_id=group, topics=(fetch_req.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=(0,)),),
            require_stable=require_stable))
        p = response.topics[0].partitions[0]
        return p.committed_offset, p.error_code

    async def commit_offsets(b: Broker, pid: int, epoch: int, offset: int) -> ErrorCode:
        response = await b.call(ApiKey.TXN_OFFSET_COMMIT, 3, txn_commit_req.TxnOffsetCommitRequest(
            transactional_id=TXN, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None, topics=(txn_commit_req.TxnOffsetCommitRequestTopic(
                name=TOPIC, partitions=(txn_commit_req.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                    committed_metadata=""),)),)))
        return response.topics[0].partitions[0].error_code

    async def add_offsets(b: Broker, pid: int, epoch: int) -> ErrorCode:
        return (await b.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, add_offsets_req.AddOffsetsToTxnRequest(
            transactional_id=TXN, producer_id=pid, producer_epoch=epoch, group_id=group))).error_code

    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            pid = (await b.init()).producer_id
            assert await add_offsets(b, pid, 0) == ErrorCode.none
            assert ("__consumer_offsets", 0) in b.metadata().topic_partitions
            assert await commit_offsets(b, pid, 0, 10) == ErrorCode.none
            assert await fetch(b, False) == (-1, ErrorCode.none)
            assert await fetch(b, True) == (-1, ErrorCode.unstable_offset_commit)
            assert await b.end(pid, 0, commit=True) == ErrorCode.none
            await b.settled()
            assert await fetch(b, True) == (10, ErrorCode.none)
            # aborted: dropped
            assert await add_offsets(b, pid, 0) == ErrorCode.none
            assert await commit_offsets(b, pid, 0, 20) == ErrorCode.none
            assert await b.end(pid, 0, commit=False) == ErrorCode.none
            await b.settled()
            assert await fetch(b, True) == (10, ErrorCode.none)
            # left open across a restart: still pending after the reload
            assert await add_offsets(b, pid, 0) == ErrorCode.none
            assert await commit_offsets(b, pid, 0, 30) == ErrorCode.none
        async with running(tmp_path / "logs") as b:
            assert await fetch(b, False) == (10, ErrorCode.none)
            assert await fetch(b, True) == (-1, ErrorCode.unstable_offset_commit)
            fenced = await b.init()  # a new instance: the open transaction is aborted first
            assert fenced.error_code == ErrorCode.concurrent_transactions
            await b.settled()
            assert await fetch(b, True) == (10, ErrorCode.none)
            new = await b.init()
            assert new.producer_epoch == 2
            assert await commit_offsets(b, pid, 0, 40) == ErrorCode.invalid_producer_epoch  # the zombie's
            assert await add_offsets(b, pid, 2) == ErrorCode.none
            assert await commit_offsets(b, pid, 2, 40) == ErrorCode.none
            assert await b.end(pid, 2, commit=True) == ErrorCode.none
            await b.settled()
        async with running(tmp_path / "logs") as b:  # committed by its marker, replayed from the log
            assert await fetch(b, True) == (40, ErrorCode.none)
    run(main())
