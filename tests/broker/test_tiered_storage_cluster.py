"""Tiered storage in a ZooKeeper-mode cluster (KIP-405): the leader copies, its follower learns the copies from
its replica of ``__remote_log_metadata`` and keeps only the local tail too; the leader killed -9, the follower
leads and serves the remote part to a consumer from offset 0; the old leader back with an empty disk, it starts
over at the new leader's local log start (OFFSET_MOVED_TO_TIERED_STORAGE) instead of fetching the remote part
again, with the leader epochs and producer state of the remote part (Kafka's buildRemoteLogAuxState): made the
leader, it answers for the old epochs and an idempotent producer that wrote only the remote part goes on."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cluster_support import create_topic, metadata, read_assigned, running_cluster, wait_for
from kcli.records import BatchReader
from kcli.storage.checkpoint import EpochEntry, LeaderEpochCheckpointFile
from kcli.storage.snapshot import read_producer_snapshot

pytestmark = pytest.mark.cluster

SEGMENT = 16 * 1024
RECORDS = 600
EARLY = 100  # the first records, by a producer that writes nothing else until the replaced broker leads
LATER = 50  # written after the first failover (a new leader epoch), and again by the early producer at the end
TIERED = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT), "local.retention.bytes": str(2 * SEGMENT),
          "file.delete.delay.ms": "0"}


def local_logs(broker, topic: str) -> list[Path]:
    return sorted((broker.log_dir / f"{topic}-0").glob("*.log"))


def test_leadership_moves_to_a_follower_that_serves_the_remote_part(zookeeper, tmp_path):
    from confluent_kafka import Producer

    store = tmp_path / "remote"
    extra = ("remote.log.storage.system.enable=true", f"rsm.config.url={store.as_uri()}",
             "remote.log.manager.task.interval.ms=100", "log.retention.check.interval.ms=100",
             "rlmm.config.remote.log.metadata.topic.num.partitions=1",
             "rlmm.config.remote.log.metadata.topic.replication.factor=2")
    (tmp_path / "cluster").mkdir()
    with running_cluster(zookeeper, tmp_path / "cluster", brokers=2, extra=extra) as cluster:
        topic = "tiered-moves"
        create_topic(cluster, topic, partitions=1, rf=2, config=TIERED)
        begun = time.monotonic()
        delivered: list = []

        def producer():
            return Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "batch.size": 4000,
                             "linger.ms": 1, "log_level": 0, "enable.idempotence": True,
                             "error_cb": lambda err: assert_not_fatal(err, cluster)})

        def send(producer, keys) -> None:
            for i in keys:
                producer.produce(topic, key=str(i).encode(), value=b"x" * 600, partition=0,
                                 on_delivery=lambda err, msg: delivered.append(
                                     (int(msg.key()), msg.offset()) if err is None else (int(msg.key()), err.name())))
                producer.poll(0)
            assert producer.flush(60) == 0

        # the first records by an idempotent producer that then waits: its state is in the remote part only
        early = producer()
        send(early, range(EARLY))
        main = producer()
        send(main, range(EARLY, RECORDS))
        # every record acknowledged, at the offset of its key (a failed first batch would shift them all)
        assert sorted(delivered) == [(i, i) for i in range(RECORDS)], (
            [d for d in sorted(delivered) if d[0] != d[1]][:10], cluster.logs())
        leader_id = metadata(cluster, topic).topics[topic].partitions[0].leader
        leader, follower = cluster.brokers[leader_id], cluster.brokers[1 - leader_id]
        remote = lambda: [p for p in store.rglob("*.log") if p.parent.name.startswith(f"{topic}-0-")]  # noqa: E731
        # both replicas keep only the tail: the follower knows what the leader copied from the metadata topic
        wait_for(lambda: len(remote()) >= 15 and len(local_logs(leader, topic)) <= 4
                 and len(local_logs(follower, topic)) <= 4, 90, "the remote part copied, both local tails short")
        marks = {"tiered_s": time.monotonic() - begun}
        leader.kill()
        wait_for(lambda: metadata(cluster, topic).topics[topic].partitions[0].leader == follower_id(cluster, leader_id),
                 60, "the follower leads")
        assert read_from_start(cluster, topic, RECORDS) == [(i, i) for i in range(RECORDS)], cluster.logs()
        # the new leader's epoch gets records too
        send(main, range(RECORDS, RECORDS + LATER))
        assert sorted(delivered)[RECORDS:] == [(i, i) for i in range(RECORDS, RECORDS + LATER)]
        # the old leader back with an empty disk (a replaced broker): fetching from 0 it is told
        # OFFSET_MOVED_TO_TIERED_STORAGE and starts at the new leader's local start, never copying the remote part
        import shutil

        shutil.rmtree(leader.log_dir)
        started = time.monotonic()
        leader.start()
        wait_for(lambda: len(metadata(cluster, topic).topics[topic].partitions[0].isrs) == 2, 90,
                 "the replaced broker back in the ISR")
        marks["rejoin_s"] = time.monotonic() - started
        assert "in the remote store: this replica starts there" in leader.log(), leader.log()[-3000:]
        assert local_logs(leader, topic)[0].name != "00000000000000000000.log"
        # ... with the epochs of the remote part (epoch 0 from offset 0, not from its local start) ...
        replica = leader.log_dir / f"{topic}-0"
        epochs = LeaderEpochCheckpointFile(replica / "leader-epoch-checkpoint").read()
        # (the new leader's epoch is 1 or more: an election may have come in between)
        assert epochs[0] == EpochEntry(0, 0) and epochs[1].start_offset == RECORDS, (epochs, leader.log()[-3000:])
        # ... and the producer state: the early producer, which wrote nothing it fetched, is known
        early_pid = first_producer_id(store, topic)
        known = {e.producer_id for path in replica.glob("*.snapshot") for e in read_producer_snapshot(path).entries}
        assert early_pid in known, (early_pid, known, leader.log()[-3000:])
        # made the leader (the other broker stops: controlled shutdown moves its leadership), it takes the early
        # producer's next sequence: no OUT_OF_ORDER_SEQUENCE_NUMBER / UNKNOWN_PRODUCER_ID, nothing twice
        follower.stop()
        wait_for(lambda: metadata(cluster, topic).topics[topic].partitions[0].leader == leader_id, 60,
                 "the replaced broker leads")
        send(early, range(RECORDS + LATER, RECORDS + 2 * LATER))
        total = RECORDS + 2 * LATER
        assert sorted(delivered) == [(i, i) for i in range(total)], (
            [d for d in sorted(delivered) if d[0] != d[1]][:10], leader.log()[-3000:])
        keys = [key for _, key in read_from_start(cluster, topic, total)]
        assert keys == list(range(total)), (len(keys), leader.log()[-3000:])  # every acknowledged record once


def assert_not_fatal(err, cluster) -> None:
    """A broker going away is expected here; an idempotence error (fatal to the producer) is not."""
    assert not err.fatal(), (err, cluster.logs())


def first_producer_id(store: Path, topic: str) -> int:
    """The producer id of the first batch, from the remote store's first segment."""
    [first] = [p for p in store.rglob("00000000000000000000-*.log") if p.parent.name.startswith(f"{topic}-0-")]
    return next(iter(BatchReader(first.read_bytes()))).producer_id


def read_from_start(cluster, topic: str, count: int) -> list[tuple[int, int]]:
    """(offset, key) of partition 0's records from offset 0."""
    return [(m.offset(), int(m.key())) for m in read_assigned(cluster, topic, count)]


def follower_id(cluster, leader_id: int) -> int:
    return 1 - leader_id


def test_a_leader_without_a_replica_of_its_metadata_partition_reads_it_from_the_leader(zookeeper, tmp_path):
    """``__remote_log_metadata`` on broker 0 alone (replication factor 1), the tiered partition on broker 1 alone:
    broker 1 writes the metadata with Produce and reads it with Fetch from broker 0 (Kafka's RLMM producer and
    consumer), and still tiers: the remote part copied, the local tail short, every record read back from 0."""
    from confluent_kafka import Producer

    store = tmp_path / "remote"
    extra = ("remote.log.storage.system.enable=true", f"rsm.config.url={store.as_uri()}",
             "remote.log.manager.task.interval.ms=100", "log.retention.check.interval.ms=100")
    (tmp_path / "cluster").mkdir()
    with running_cluster(zookeeper, tmp_path / "cluster", brokers=2, extra=extra) as cluster:
        create_topic(cluster, "__remote_log_metadata", assignment=[[0]],
                     config={"retention.ms": "-1", "cleanup.policy": "delete"})
        topic, count = "far-from-metadata", 200
        create_topic(cluster, topic, assignment=[[1]], config=TIERED)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 1,
                             "batch.size": 4000, "log_level": 0})  # small batches: many segments
        delivered: list = []
        for i in range(count):
            producer.produce(topic, key=str(i).encode(), value=b"x" * 600, partition=0,
                             on_delivery=lambda err, msg: delivered.append(err is None))
            producer.poll(0)
        assert producer.flush(60) == 0 and delivered.count(True) == count
        remote = lambda: [p for p in store.rglob("*.log") if p.parent.name.startswith(f"{topic}-0-")]  # noqa: E731
        wait_for(lambda: len(remote()) >= 4 and len(local_logs(cluster.brokers[1], topic)) <= 4, 90,
                 "the remote part copied by the broker without a metadata replica")
        assert not (cluster.brokers[1].log_dir / "__remote_log_metadata-0").exists()
        assert "stays local" not in cluster.brokers[1].log()
        assert [offset for offset, _ in read_from_start(cluster, topic, count)] == list(range(count)), cluster.logs()
