"""Transactions on a ZooKeeper-mode cluster of three `kctl broker run` processes: the coordinator is the leader of
the transactional id's `__transaction_state` partition (RF 3, min.isr 2), a transaction spans partitions led by
each broker, so the COMMIT/ABORT markers of the others go out as WriteTxnMarkers over the wire; when the
coordinator shuts down with a transaction open, the new leader loads the partition and the commit goes on."""

from __future__ import annotations

import time
import uuid

import pytest

from cluster_support import create_topic, running_cluster, wait_for

pytestmark = pytest.mark.cluster

EXTRA = ("transaction.state.log.replication.factor=3", "transaction.state.log.min.isr=2",
         "transaction.state.log.num.partitions=3", "controlled.shutdown.retry.backoff.ms=500")


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with running_cluster(zookeeper, tmp_path_factory.mktemp("txn-cluster"), extra=EXTRA) as c:
        yield c


def _read(cluster, topic: str, isolation: str, expected: int, timeout: float = 30) -> dict[int, list[bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, -2) for p in range(3)])
    got: dict[int, list[bytes]] = {}
    deadline = time.monotonic() + timeout
    while sum(map(len, got.values())) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.3)
        if msg is not None and msg.error() is None:
            got.setdefault(msg.partition(), []).append(msg.value())
    consumer.close()
    return got


def _coordinator(cluster, transactional_id: str) -> int:
    from kcli.client import KafkaClient
    from kcli.client.transactions import describe_transactions

    with KafkaClient(cluster.bootstrap) as client:
        return describe_transactions(client, [transactional_id])[transactional_id].coordinator_id


def test_a_transaction_across_three_leaders_and_a_coordinator_failover(cluster):
    from confluent_kafka import Producer

    topic = f"txn-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic, assignment=[[0, 1, 2], [1, 2, 0], [2, 0, 1]])  # partition p led by broker p
    txn_id = f"cluster-{topic}"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(9):
        producer.produce(topic, value=b"c-%d" % i, partition=i % 3)
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(9):
        producer.produce(topic, value=b"a-%d" % i, partition=i % 3)
    producer.flush(60)
    producer.abort_transaction(60)
    # read_committed sees a partition's records only once its leader has the marker: every broker led one
    committed = _read(cluster, topic, "read_committed", 9)
    assert committed == {p: [b"c-%d" % i for i in range(p, 9, 3)] for p in range(3)}
    assert sum(map(len, _read(cluster, topic, "read_uncommitted", 18).values())) == 18

    # the coordinator goes (controlled shutdown) with a transaction open: another broker loads the partition
    coordinator = _coordinator(cluster, txn_id)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=b"across-%d" % i, partition=i)
    producer.flush(60)
    assert cluster.brokers[coordinator].stop() == 0
    try:
        wait_for(lambda: _coordinator(cluster, txn_id) != coordinator, 60, "a new transaction coordinator")
        producer.commit_transaction(60)
        after = _read(cluster, topic, "read_committed", 12)
        assert sorted(v for vs in after.values() for v in vs if v.startswith(b"across")) == \
            [b"across-%d" % i for i in range(3)]
    finally:
        cluster.brokers[coordinator].start()
    logs = cluster.logs()
    assert "Traceback" not in logs and "internal error" not in logs, logs
