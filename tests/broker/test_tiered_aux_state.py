"""A follower's state from the remote store (Kafka's ReplicaFetcherTierStateMachine.buildRemoteLogAuxState,
KIP-405), in process against a ``file://`` store: the remote segment of the right epoch before the leader's local
log start is chosen, its leader-epoch checkpoint and producer snapshot fetched, and an empty log restarted there
with both; a missing segment or object is an error naming what is missing."""

from __future__ import annotations

import time
import uuid

import pytest

from kcli.broker.remote_log_manager import (
    RemoteAuxStateUnavailable,
    RemoteStorageStats,
    RemoteLogMetadataCache,
    RemoteSegment,
    _segment_epochs,
    fetch_remote_log_aux_state,
    segment_files,
    segment_metadata_record,
    segment_update_record,
)
from kcli.records import Record
from kcli.records.remote_log_metadata import RemoteLogSegmentState, decode_remote_log_metadata
from kcli.storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from kcli.storage.log import PartitionLog
from kcli.storage.remote import FsspecRemoteStorageManager, RemoteResourceNotFoundError, RemoteSegmentRef

PID = 4242
TOPIC_ID = uuid.UUID(int=7)


def batch(log: PartitionLog, epoch: int, count: int = 5) -> None:
    """``count`` records of idempotent producer PID at leader epoch ``epoch``, its sequence following the log."""
    seq = log.log_end_offset
    log.append([Record(i, int(time.time() * 1000), b"k", b"v") for i in range(count)], producer_id=PID,
               producer_epoch=0, base_sequence=seq, partition_leader_epoch=epoch)


@pytest.fixture
def tiered(tmp_path):
    """A leader's log 0..39 in epochs 0 (0..9), 1 (10..19, 20..24), 3 (25..39), rolled at 10, 20 and 30; the
    three closed segments copied to the store as the RemoteLogManager copies them, and finished in the cache."""
    leader = PartitionLog(tmp_path / "leader" / "t-0")
    for epochs in ((0, 0), (1, 1), (1, 3)):  # two batches a segment, then a roll
        for epoch in epochs:
            batch(leader, epoch)
        leader.roll()
    batch(leader, 3)
    assert leader.segments == [0, 10, 20, 30]
    assert [(e.epoch, e.start_offset) for e in leader.epochs] == [(0, 0), (1, 10), (3, 25)]
    rsm = FsspecRemoteStorageManager((tmp_path / "remote").as_uri())
    cache = RemoteLogMetadataCache()
    refs = {}
    for segment, following in zip(leader.log_segments, leader.log_segments[1:]):
        end = following.base_offset - 1
        ref = RemoteSegmentRef("t", TOPIC_ID, 0, uuid.uuid4(), segment.base_offset)
        remote = RemoteSegment(ref, end, 0, segment.size, _segment_epochs(leader.epochs, segment.base_offset, end),
                               RemoteLogSegmentState.COPY_SEGMENT_STARTED, 1, 0)
        cache.apply(decode_remote_log_metadata(segment_metadata_record(remote)))
        rsm.copy_log_segment_data(ref, segment_files(leader.directory, segment, following.base_offset, leader.epochs))
        cache.apply(decode_remote_log_metadata(segment_update_record(ref, RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                                     1, 0)))
        refs[segment.base_offset] = ref
    return leader, rsm, cache, refs


def test_the_segment_of_the_epoch_holding_the_offset_is_chosen(tiered):
    _, _, cache, refs = tiered
    # Kafka's remoteLogSegmentMetadata(epoch, offset): the segment where the epoch covers the offset
    assert cache.segment_for_epoch("t", 0, 1, 19).ref == refs[10]
    assert cache.segment_for_epoch("t", 0, 1, 24).ref == refs[20]
    assert cache.segment_for_epoch("t", 0, 3, 29).ref == refs[20]
    assert cache.segment_for_epoch("t", 0, 0, 9).ref == refs[0]
    assert cache.segment_for_epoch("t", 0, 0, 15) is None  # epoch 0 ended at 9
    assert cache.segment_for_epoch("t", 0, 1, 27) is None  # epoch 3 from 25
    assert cache.segment_for_epoch("t", 0, 2, 27) is None  # an epoch that wrote nothing
    assert cache.segment_for_epoch("t", 0, 3, 35) is None  # local only


def test_an_empty_follower_starts_after_the_segment_with_its_epochs_and_producers(tiered, tmp_path):
    _, rsm, cache, refs = tiered
    # the leader's local log starts at 30: the offset before it, 29, is in epoch 3's part of segment 20..29
    aux = fetch_remote_log_aux_state(cache, rsm, "t", 0, 3, 29)
    assert aux.segment.ref == refs[20] and aux.next_offset == 30
    assert aux.epochs == [EpochEntry(0, 0), EpochEntry(1, 10), EpochEntry(3, 25)]  # the whole history to 29
    assert [(p.producer_id, p.last_sequence) for p in aux.producers] == [(PID, 29)]

    follower = PartitionLog(tmp_path / "follower" / "t-0")  # a replaced replica with something stale
    follower.leader_epochs.flush_on_change = True
    batch(follower, 0)
    follower.truncate_fully_and_start_at(aux.next_offset)
    follower.restore_aux_state(aux.epochs, aux.producers)
    assert follower.log_end_offset == 30 and follower.segments == [30]
    assert LeaderEpochCheckpointFile(follower.directory / "leader-epoch-checkpoint").read() == aux.epochs
    assert (follower.directory / "00000000000000000030.snapshot").exists()
    assert follower.producers[PID].last_sequence == 29
    # what it replicates next goes on top: the producer's sequence continues, a new epoch joins the history
    batch(follower, 4)
    assert follower.producers[PID].last_sequence == 34
    assert [(e.epoch, e.start_offset) for e in follower.epochs] == [(0, 0), (1, 10), (3, 25), (4, 30)]
    # and after a restart, the snapshot at the start still gives the producer state
    follower.close()
    reopened = PartitionLog.open(follower.directory)
    assert reopened.producers[PID].last_sequence == 34
    assert [(e.epoch, e.start_offset) for e in reopened.epochs] == [(0, 0), (1, 10), (3, 25), (4, 30)]


def test_missing_segment_or_object_is_a_clear_error(tiered):
    _, rsm, cache, refs = tiered
    with pytest.raises(RemoteAuxStateUnavailable, match="no finished remote segment holds offset 35 of leader epoch 3"):
        fetch_remote_log_aux_state(cache, rsm, "t", 0, 3, 35)
    key = rsm.key(refs[20], "snapshot")
    rsm.fs.rm_file(key)
    with pytest.raises(RemoteResourceNotFoundError, match="00000000000000000020-.*snapshot is not in the remote store"):
        fetch_remote_log_aux_state(cache, rsm, "t", 0, 3, 29)
    rsm.fs.pipe_file(rsm.key(refs[10], "leader_epoch_checkpoint"), b"0\n2\n0 0\n")
    with pytest.raises(Exception, match="leader_epoch_checkpoint"):
        fetch_remote_log_aux_state(cache, rsm, "t", 0, 1, 19)


def test_the_fetcher_asks_the_epoch_before_the_local_start_retries_then_restores(tiered, tmp_path, caplog):
    """The replica fetcher's TIERED step (Kafka's fetchOffsetAndBuildRemoteLogAuxState) against a fake leader:
    ListOffsets says the local log starts at 30 in epoch 4 (3 wrote last before it), OffsetForLeaderEpoch(3)
    that epoch 3 ends at 30, so the segment of epoch 3 holding 29 is used; while the metadata does not know it
    the partition waits and retries (logged, the fetcher goes on), then starts at 30 with its state."""
    import asyncio
    import logging
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace as NS

    from kcli.broker.log_manager import ManagedLog
    from kcli.broker.replica_fetcher import FETCHING, TIERED, FetchSettings, PartitionFetchState, ReplicaFetcher
    from kcli.storage.log_config import LogConfig

    _, rsm, full_cache, refs = tiered
    cache = RemoteLogMetadataCache()  # the follower's metadata: behind at first
    managed = ManagedLog("t", 0, PartitionLog(tmp_path / "replaced" / "t-0",
                                              config=LogConfig.from_props({"remote.storage.enable": "true"})))
    partition = NS(topic="t", index=0, leader_epoch=5, leader_id=1, managed=managed, log=managed.log,
                   log_end_offset=0)
    partition.log_start_offset = 0
    log_manager = NS(truncate_fully_and_start_at=lambda m, offset: m.log.truncate_fully_and_start_at(offset))
    pool = ThreadPoolExecutor(1)
    manager = NS(local_broker_id=2, settings=FetchSettings(backoff_ms=10), log_manager=log_manager,
                 remote_log_manager=NS(cache=cache, rsm=rsm, reader_pool=pool, stats=RemoteStorageStats()),
                 endpoint=lambda _: None)
    fetcher = ReplicaFetcher(manager, 1)
    asked = []

    def answer(api_key, version, body, max_wait_ms):
        if body.__class__.__name__ == "ListOffsetsRequest":
            parts = [NS(partition_index=0, error_code=0, offset=30 if p.timestamp == -4 else 0,
                        leader_epoch=4 if p.timestamp == -4 else 5) for p in body.topics[0].partitions]
            return NS(topics=[NS(name="t", partitions=parts)])
        asked.append(int(body.topics[0].partitions[0].leader_epoch))
        return NS(topics=[NS(topic="t", partitions=[NS(partition=0, error_code=0, leader_epoch=3, end_offset=30)])])

    async def roundtrip(*args):
        return answer(*args)

    fetcher._roundtrip = roundtrip
    fetcher.partitions[("t", 0)] = partition
    fetcher.states[("t", 0)] = PartitionFetchState(5, 0, state=TIERED)

    async def step():
        partition.log_end_offset = managed.log.log_end_offset
        await fetcher._start_at_leader_local_start({("t", 0): partition})

    with caplog.at_level(logging.WARNING, logger="kcli.broker.replica"):
        asyncio.run(step())
    assert fetcher.state(("t", 0)) == TIERED and ("t", 0) in fetcher.delayed_until  # retried later
    assert "no finished remote segment holds offset 29 of leader epoch 3" in caplog.text
    assert asked == [3] and managed.log.segments == [0]  # nothing touched before the remote state is in hand
    cache.partitions = full_cache.partitions  # the metadata caught up
    asyncio.run(step())
    pool.shutdown()
    assert fetcher.state(("t", 0)) == FETCHING
    log = managed.log
    assert log.log_end_offset == 30 and log.log_start_offset == 0
    assert [(e.epoch, e.start_offset) for e in log.epochs] == [(0, 0), (1, 10), (3, 25)]
    assert log.producers[PID].last_sequence == 29
    # BuildRemoteLogAuxStateRequestsPerSec / ErrorsPerSec: the retry and the restore, one failed
    counters = manager.remote_log_manager.stats.snapshot()
    assert counters["build_remote_log_aux_state_requests"] == {"t": 2}
    assert counters["build_remote_log_aux_state_errors"] == {"t": 1}
