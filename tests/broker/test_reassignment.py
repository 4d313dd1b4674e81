"""Partition reassignment on a real cluster: four `kctl broker run` processes on the session's ZooKeeper (brokers
0-2, then broker 3 joins), reassigned through AlterPartitionReassignments (kafka-python's admin client) and the
legacy /admin/reassign_partitions znode, while a confluent-kafka idempotent producer keeps writing with acks=all.
One cluster for the module; each test uses its own topic."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from cluster_support import Cluster, create_topic, metadata, running_cluster, wait_for

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with running_cluster(zookeeper, tmp_path_factory.mktemp("reassign")) as c:
        c.add_broker()  # broker 3: no replicas yet
        wait_for(lambda: len(metadata(c).brokers) == 4, 60, "four live brokers in Metadata")
        yield c


@pytest.fixture(scope="module")
def admin(cluster):
    from kafka.admin import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    yield client
    client.close()


class Writer(threading.Thread):
    """An idempotent acks=all producer writing unique values until stopped; it records what was acknowledged."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        from confluent_kafka import Producer

        super().__init__(daemon=True)
        self.topic = topic
        self.producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 60000})
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self._stopping = threading.Event()
        self.unflushed = -1

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.errors.append(str(err))

    def run(self) -> None:
        i = 0
        while not self._stopping.is_set():
            try:
                self.producer.produce(self.topic, value=b"v-%08d" % i, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.05)
                continue
            i += 1
            self.producer.poll(0)
            time.sleep(0.002)
        self.unflushed = self.producer.flush(60)

    def stop(self) -> None:
        self._stopping.set()
        self.join(90)


def high_watermark(consumer, topic: str, partition: int) -> int:
    """The leader's high watermark; a leader just elected answers OFFSET_NOT_AVAILABLE until its followers caught
    up with it (KIP-207), which librdkafka passes on: ask again."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    deadline = time.monotonic() + 30
    while True:
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=20)[1]
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.OFFSET_NOT_AVAILABLE or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def read_everything(cluster: Cluster, topic: str, partition: int = 0) -> list[bytes]:
    """Every record of the partition up to its high watermark, in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    try:
        high = high_watermark(consumer, topic, partition)
        consumer.assign([TopicPartition(topic, partition, 0)])
        values: dict[int, bytes] = {}
        deadline = time.monotonic() + 60
        while len(values) < high and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                values[msg.offset()] = msg.value()
        assert len(values) == high, f"read {len(values)} of {high} records"
        return [values[o] for o in sorted(values)]
    finally:
        consumer.close()


def log_bytes(broker, topic: str, partition: int = 0) -> bytes | None:
    directory = broker.log_dir / f"{topic}-{partition}"
    if not directory.is_dir():
        return None
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def assignment(cluster: Cluster, topic: str) -> dict:
    return cluster.read_json(f"/brokers/topics/{topic}")


def settled_at(cluster: Cluster, topic: str, partition: int, replicas: list[int]) -> bool:
    znode = assignment(cluster, topic)
    return (znode["partitions"][str(partition)] == replicas and not znode["adding_replicas"]
            and not znode["removing_replicas"])


def test_reorder_then_move_under_load_loses_nothing(cluster, admin):
    """[0,1,2] -> [1,2,0] (a reorder: the leader stays) -> [1,2,3] (broker 3 in, broker 0 out) while an idempotent
    producer writes: every acknowledged record is there once, broker 3's copy is the leader's byte for byte, and
    broker 0's replica directory is gone."""
    from kafka.structs import TopicPartition

    topic, tp = "moving", TopicPartition("moving", 0)
    create_topic(cluster, topic, assignment=[[0, 1, 2]])
    writer = Writer(cluster, topic)
    writer.start()
    try:
        wait_for(lambda: len(writer.acked) > 300, 30, "records acknowledged before the reassignment")
        before = cluster.state(topic, 0)
        assert admin.alter_partition_reassignments({tp: [1, 2, 0]}) == {tp: None}
        wait_for(lambda: settled_at(cluster, topic, 0, [1, 2, 0]), 30, "the reorder")
        reordered = cluster.state(topic, 0)
        # Kafka keeps a leader that is in the target and alive; only the leader epoch moves. (Broker 0 leads unless
        # it was not yet live to the controller when the topic was made, as once on a loaded machine: then 1 does.)
        assert before["leader"] in (0, 1)
        assert reordered["leader"] == before["leader"] and reordered["leader_epoch"] == before["leader_epoch"] + 1
        acked_then = len(writer.acked)
        wait_for(lambda: len(writer.acked) > acked_then + 300, 30, "records acknowledged after the reorder")

        assert admin.alter_partition_reassignments({tp: [1, 2, 3]}) == {tp: None}
        wait_for(lambda: settled_at(cluster, topic, 0, [1, 2, 3]), 60, "the move to broker 3")
        # 0 left TRS: B3 elects the first of TRS in the ISR, broker 1 unless it fell behind meanwhile (a follower
        # more than replica.lag.time.max.ms behind leaves the ISR, as on a loaded machine); they all catch up.
        assert cluster.state(topic, 0)["leader"] in (1, 2, 3)
        wait_for(lambda: sorted(cluster.state(topic, 0)["isr"]) == [1, 2, 3], 60, "brokers 1, 2 and 3 in the ISR")
        assert admin.list_partition_reassignments() == {}
        acked_then = len(writer.acked)
        wait_for(lambda: len(writer.acked) > acked_then + 300, 30, "records acknowledged after the move")
    finally:
        writer.stop()
    assert writer.unflushed == 0 and writer.errors == []
    wait_for(lambda: not (cluster.brokers[0].log_dir / f"{topic}-0").exists(), 30, "broker 0's replica deleted")
    records = read_everything(cluster, topic)
    assert len(records) == len(set(records)), "duplicates in the log"
    assert set(writer.acked) <= set(records), f"{len(set(writer.acked) - set(records))} acknowledged records lost"
    assert len(writer.acked) > 900
    wait_for(lambda: log_bytes(cluster.brokers[3], topic) == log_bytes(cluster.brokers[1], topic)
             == log_bytes(cluster.brokers[2], topic), 30, "byte-identical replicas on brokers 1, 2 and 3")


def test_legacy_znode_reassigns_and_is_deleted(cluster):
    """kafka-reassign-partitions.sh --zookeeper's way: the controller reads /admin/reassign_partitions, moves both
    partitions (new leaders where the old one left) and deletes the node when both are done."""
    from confluent_kafka import Producer

    topic = "legacy"
    create_topic(cluster, topic, assignment=[[0, 1, 2], [1, 2, 0]])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(200):
        producer.produce(topic, value=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    node = cluster.chroot + "/admin/reassign_partitions"
    cluster.zk.create(node, json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [3, 1, 2]},
        {"topic": topic, "partition": 1, "replicas": [2, 0, 3]}]}).encode(), makepath=True)
    wait_for(lambda: not cluster.zk.exists(node), 60, "the znode deleted once both partitions moved")
    assert assignment(cluster, topic)["partitions"] == {"0": [3, 1, 2], "1": [2, 0, 3]}
    assert settled_at(cluster, topic, 0, [3, 1, 2])
    p0, p1 = cluster.state(topic, 0), cluster.state(topic, 1)
    assert (p0["leader"], sorted(p0["isr"])) == (3, [1, 2, 3])
    assert (p1["leader"], sorted(p1["isr"])) == (2, [0, 2, 3])
    assert len(read_everything(cluster, topic, 0)) == len(read_everything(cluster, topic, 1)) == 100
    wait_for(lambda: not (cluster.brokers[0].log_dir / f"{topic}-0").exists()
             and not (cluster.brokers[1].log_dir / f"{topic}-1").exists(), 30, "the removed replicas deleted")


def test_list_while_in_progress_then_cancel(cluster):
    """Broker 3 is paused: the move cannot finish. ListPartitionReassignments and `kctl zk admin` show it with its
    adding and removing replicas; cancelling restores the original replicas and broker 3's replica is deleted
    once it runs again. (The requests go straight to the controller: a client might pick the paused broker.)"""
    topic = "cancelled"
    create_topic(cluster, topic, assignment=[[0, 1, 2]])
    before = cluster.state(topic, 0)
    controller = cluster.brokers[cluster.controller_id()]
    assert controller is not cluster.brokers[3]
    paused = cluster.brokers[3].proc
    paused.send_signal(signal.SIGSTOP)  # well below the ZooKeeper session timeout (at most 10 s here)
    try:
        assert _alter(controller, topic, {0: [1, 2, 3]}) == {0: 0}
        ongoing = {(topic, 0): ([1, 2, 3, 0], [3], [0])}
        assert _list(controller) == ongoing
        assert _list(controller, {topic: [0, 7], "nope": [0]}) == ongoing
        shown = subprocess.run([sys.executable, "-m", "kcli", "zk", "admin", "--zookeeper", cluster.connect, "--json"],
                               capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert json.loads(shown.stdout)["ongoing_reassignments"] == [
            {"topic": topic, "partition": 0, "replicas": [1, 2, 3, 0], "adding_replicas": [3],
             "removing_replicas": [0]}]
        assert _alter(controller, topic, {0: None}) == {0: 0}
        # Back to the original set (in the order Kafka keeps: targets first, so not [0, 1, 2]), leader unchanged.
        assert settled_at(cluster, topic, 0, [1, 2, 0])
        assert _list(controller) == {}
        after = cluster.state(topic, 0)
        # cancelling keeps the leader; the preferred replica of the restored set ([1, 2, 0]: 1) may take over
        # meanwhile through the auto leader rebalance: both are what Kafka does
        assert after["leader"] in (before["leader"], 1), (before, after)
        wait_for(lambda: sorted(cluster.state(topic, 0)["isr"]) == [0, 1, 2], 60, "the original replicas in the ISR")
        assert _alter(controller, topic, {0: None}) == {0: 85}  # NO_REASSIGNMENT_IN_PROGRESS
    finally:
        paused.send_signal(signal.SIGCONT)
    # Broker 3 gets LeaderAndIsr (its replica is created) then StopReplica with delete: nothing stays.
    time.sleep(1)
    wait_for(lambda: not (cluster.brokers[3].log_dir / f"{topic}-0").exists(), 30, "broker 3's replica deleted")
    assert settled_at(cluster, topic, 0, [1, 2, 0])


def test_invalid_requests_and_the_non_controller(cluster, admin):
    """Kafka's answers: duplicates, a broker that is not alive, an unknown partition; another broker than the
    controller answers NOT_CONTROLLER."""
    from kafka.errors import UnknownTopicOrPartitionError, for_code
    from kafka.structs import TopicPartition

    from kcli.protocol import ApiKey, minimal_request

    invalid_replica_assignment = for_code(39)
    create_topic(cluster, "refused", assignment=[[0, 1, 2]])
    assert admin.alter_partition_reassignments({
        TopicPartition("refused", 0): [1, 1, 2], TopicPartition("refused", 1): [1, 2, 3],
        TopicPartition("nope", 0): [1], TopicPartition("refused", 2): [1, 9]}) == {
        TopicPartition("refused", 0): invalid_replica_assignment,
        TopicPartition("refused", 1): UnknownTopicOrPartitionError,
        TopicPartition("nope", 0): UnknownTopicOrPartitionError,
        TopicPartition("refused", 2): invalid_replica_assignment}
    controller = metadata(cluster).controller_id
    other = cluster.brokers[(controller + 1) % 4]
    for key in (ApiKey.ALTER_PARTITION_REASSIGNMENTS, ApiKey.LIST_PARTITION_REASSIGNMENTS):
        response = _call(other, key, 0, minimal_request(key, 0, topic="refused"))
        assert response.error_code == 41  # NOT_CONTROLLER


def _call(broker, api_key, version, body):
    import socket

    from broker_support import read_response
    from kcli.protocol import decode_response, encode_request

    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        sock.sendall(encode_request(api_key, version, 7, "kctl-reassign", body))
        frame = read_response(sock)
    assert frame is not None, f"broker closed the connection on {api_key.name} v{version}"
    return decode_response(api_key, version, frame)[1]


def _alter(broker, topic: str, targets: dict) -> dict[int, int]:
    """AlterPartitionReassignments v0 for one topic: partition -> error code."""
    from kio.schema.alter_partition_reassignments.v0 import request as m
    from kio.static.primitive import i32

    from kcli.protocol import ApiKey

    body = m.AlterPartitionReassignmentsRequest(topics=(m.ReassignableTopic(name=topic, partitions=tuple(
        m.ReassignablePartition(partition_index=i32(p), replicas=None if r is None else tuple(i32(b) for b in r))
        for p, r in targets.items())),))
    response = _call(broker, ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, body)
    assert response.error_code == 0, response
    return {int(p.partition_index): int(p.error_code) for t in response.responses for p in t.partitions}


def _list(broker, partitions: dict | None = None) -> dict:
    """ListPartitionReassignments v0: (topic, partition) -> (replicas, adding, removing)."""
    from kio.schema.list_partition_reassignments.v0 import request as m
    from kio.static.primitive import i32

    from kcli.protocol import ApiKey

    topics = None if partitions is None else tuple(
        m.ListPartitionReassignmentsTopics(name=t, partition_indexes=tuple(i32(p) for p in ps))
        for t, ps in partitions.items())
    response = _call(broker, ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, m.ListPartitionReassignmentsRequest(topics=topics))
    assert response.error_code == 0, response
    return {(t.name, int(p.partition_index)): (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas))
            for t in response.topics for p in t.partitions}
