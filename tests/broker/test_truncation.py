"""A replica with a divergent tail truncates it via OffsetForLeaderEpoch before it fetches (KIP-101, KIP-279), on a
real three-broker ZooKeeper-mode cluster.

The divergent tail is made deterministically: broker X leads a partition replicated on X and Y (the controller is
neither, so no controller fails over); Y is paused (SIGSTOP) long enough for its parked fetch to be answered, X
takes records with acks=1 that Y never sees, X is killed (SIGKILL) and Y resumes. The controller elects Y at a new
leader epoch when X's ZooKeeper session expires; more records go to Y; X restarts. X holds offsets Y never had at an
epoch Y knows to end earlier: it must ask Y where that epoch ends, cut its tail there, and end byte-identical to Y.
A confluent-kafka consumer reads across the leader change, validating its position on the new leader (KIP-320).
"""

from __future__ import annotations

import json
import signal
import time

import pytest

import kctl_fork
from cluster_support import consume_all, create_topic, produce, running_cluster, wait_for
from kcli.storage.checkpoint import LeaderEpochCheckpointFile

pytestmark = pytest.mark.cluster

SESSION_MS = 6000  # X's death is noticed when its session expires
TOPIC = "diverge"
COMMITTED, LOST, AFTER = 10, 5, 10


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    base = tmp_path_factory.mktemp("truncation")
    # the APIs each broker served, written when it stops cleanly
    with running_cluster(zookeeper, base, session_timeout_ms=SESSION_MS,
                         env=lambda broker_id: {"KCTL_BROKER_API_LEDGER": str(base / f"served-{broker_id}.json")}) as c:
        yield c


def _segment(cluster, broker_id: int) -> bytes:
    return (cluster.brokers[broker_id].log_dir / f"{TOPIC}-0" / "00000000000000000000.log").read_bytes()


def _served(cluster, broker_id: int) -> list[dict]:
    return json.loads((cluster.base / f"served-{broker_id}.json").read_text())


def test_a_restarted_ex_leader_truncates_its_unreplicated_tail_before_fetching(cluster):
    from confluent_kafka import Consumer, Producer, TopicPartition

    controller = cluster.controller_id()
    x, y = [b for b in range(3) if b != controller]
    # Unclean election only as a safety net: should X drop Y from the ISR during the pause, Y is still elected.
    create_topic(cluster, TOPIC, assignment=[[x, y]], config={"unclean.leader.election.enable": "true"})
    assert cluster.state(TOPIC, 0)["leader"] == x
    assert produce(cluster, TOPIC, COMMITTED).count(None) == COMMITTED  # acks=all: on X and Y, epoch 0

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "diverge-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    read: dict[int, bytes] = {}

    def read_up_to(count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(read) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                read[msg.offset()] = msg.value()

    try:
        read_up_to(COMMITTED, 30)
        assert sorted(read) == list(range(COMMITTED))

        # X's unreplicated tail: Y paused once its parked fetch has been answered, acks=1 to X, X killed.
        paused = cluster.brokers[y].proc
        paused.send_signal(signal.SIGSTOP)
        try:
            time.sleep(0.5)  # > replica.fetch.wait.max.ms: Y has no fetch parked on X that X could answer now
            lost = Producer({"bootstrap.servers": cluster.brokers[x].bootstrap, "acks": 1,
                             "enable.idempotence": False, "linger.ms": 0, "message.timeout.ms": 5000})
            outcomes: list = []
            for i in range(LOST):
                lost.produce(TOPIC, value=b"lost-%d" % i, partition=0,
                             on_delivery=lambda err, msg: outcomes.append(err))
            assert lost.flush(10) == 0 and outcomes == [None] * LOST
            cluster.brokers[x].kill()
        finally:
            paused.send_signal(signal.SIGCONT)

        # The controller elects Y at a new epoch once X's session expires; Y takes more records.
        wait_for(lambda: cluster.state(TOPIC, 0)["leader"] == y, 30, "Y leads")
        new_epoch = cluster.state(TOPIC, 0)["leader_epoch"]
        assert new_epoch > 0
        assert produce(cluster, TOPIC, AFTER).count(None) == AFTER
        read_up_to(COMMITTED + AFTER, 30)  # the consumer validates its position on Y and reads on
        assert sorted(read) == list(range(COMMITTED + AFTER))
        assert not any(v.startswith(b"lost-") for v in read.values())
    finally:
        consumer.close()

    # X restarts with offsets COMMITTED .. COMMITTED+LOST-1 at epoch 0, which ends at COMMITTED on Y.
    cluster.brokers[x].start()
    wait_for(lambda: sorted(cluster.state(TOPIC, 0)["isr"]) == sorted([x, y]), 30, "X back in the ISR")
    wait_for(lambda: _segment(cluster, x) == _segment(cluster, y), 30, "byte-identical replicas")
    log = cluster.brokers[x].log()
    expected = (f"{TOPIC}-0: truncated from offset {COMMITTED + LOST} to {COMMITTED} (OffsetForLeaderEpoch: leader "
                f"epoch 0 ends at {COMMITTED} (epoch 0) on leader {y})")
    assert expected in log, cluster.logs()
    assert "DivergingEpoch" not in log  # settled before the first fetch
    for broker_id in (x, y):
        verified = kctl_fork.run("verify", str(cluster.brokers[broker_id].log_dir / f"{TOPIC}-0"))
        assert verified.returncode == 0, verified.stdout + verified.stderr
    got = consume_all(cluster, TOPIC, COMMITTED + AFTER)
    assert sorted(offset for _, offset in got) == list(range(COMMITTED + AFTER))
    assert not any(v.startswith(b"lost-") for v in got.values())

    # Stopped cleanly, the follower's leader-epoch-checkpoint is the leader's; the ledgers show who asked what.
    # (X stops first: the controller then drops it from the ISR at a new leader epoch, which Y alone records.)
    for broker_id in (x, y):
        assert cluster.brokers[broker_id].stop() == 0, cluster.brokers[broker_id].log()
    follower, leader = [[(e.epoch, e.start_offset) for e in LeaderEpochCheckpointFile(
        cluster.brokers[b].log_dir / f"{TOPIC}-0" / "leader-epoch-checkpoint").read()] for b in (x, y)]
    assert follower == [(0, 0), (new_epoch, COMMITTED)]
    assert leader[:2] == follower and all(start == COMMITTED + AFTER for _, start in leader[2:])
    asked = {(row["version"], client) for row in _served(cluster, y) if row["api"] == "OFFSET_FOR_LEADER_EPOCH"
             for client in row["clients"]}
    assert (4, f"ReplicaFetcher-{x}-from-{y}") in asked, asked  # the restarted follower
    assert (2, "rdkafka") in asked, asked  # the consumer after the leader change (KIP-320)
