"""A ZooKeeper-mode kctl cluster for tests: N `kctl broker run` processes on the session's real ZooKeeper, each
in its own chroot, plus the client helpers the cluster test modules share (confluent-kafka for admin, produce and
consume). One cluster per module; each test uses its own topics."""

from __future__ import annotations

import json
import signal
import time
import uuid
from pathlib import Path

from kazoo.client import KazooClient

from broker_support import BrokerProcess, free_port

LAG_MS = 2000  # replica.lag.time.max.ms: a paused follower leaves the ISR within about 1.5x this; the test
# ZooKeeper caps sessions at 10 s (tickTime 500), so a pause must stay well below that or the broker "fails"


def wait_for(condition, timeout: float = 30.0, what: str = "condition", interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not met within {timeout}s"
        time.sleep(interval)


class Cluster:
    """``brokers`` processes with ids 0..n-1 (racks rack-{id % 2}); ``extra`` overrides go to every broker."""

    def __init__(self, zookeeper, base: Path, *, brokers: int = 3, session_timeout_ms: int = 30000,
                 extra: tuple[str, ...] = ()) -> None:
        self.chroot = f"/cluster-{uuid.uuid4().hex[:10]}"
        self.connect = f"{zookeeper.connect}{self.chroot}"
        self.base = base
        self.session_timeout_ms = session_timeout_ms
        self.extra = tuple(extra)
        self.brokers: list[BrokerProcess] = [self._process(broker_id) for broker_id in range(brokers)]
        self.zk = KazooClient(hosts=zookeeper.connect, timeout=10)

    def _process(self, broker_id: int) -> BrokerProcess:
        return BrokerProcess(free_port(), self.base / f"broker-{broker_id}", [
            f"broker.id={broker_id}", f"zookeeper.connect={self.connect}",
            f"zookeeper.session.timeout.ms={self.session_timeout_ms}",
            f"replica.lag.time.max.ms={LAG_MS}", "offsets.topic.replication.factor=3",
            "offsets.topic.num.partitions=3", "group.initial.rebalance.delay.ms=0",
            "replica.fetch.wait.max.ms=200", "replica.fetch.backoff.ms=200",
            f"broker.rack=rack-{broker_id % 2}",
            "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector", *self.extra])

    def add_broker(self) -> BrokerProcess:
        """One more broker (id = the next index), started."""
        process = self._process(len(self.brokers))
        self.brokers.append(process)
        process.start()
        return process

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def start(self) -> None:
        self.zk.start(timeout=10)
        for broker in self.brokers:
            broker.start()

    def stop(self) -> None:
        for broker in self.brokers:
            if broker.proc is not None:
                broker.proc.send_signal(signal.SIGCONT)
                broker.stop()
        self.zk.stop()
        self.zk.close()

    def read_json(self, path: str):
        data, _ = self.zk.get(self.chroot + path)
        return json.loads(data)

    def state(self, topic: str, partition: int) -> dict:
        return self.read_json(f"/brokers/topics/{topic}/partitions/{partition}/state")

    def controller_id(self) -> int:
        return int(self.read_json("/controller")["brokerid"])

    def controller_epoch(self) -> int:
        data, _ = self.zk.get(self.chroot + "/controller_epoch")
        return int(data)

    def live_broker_ids(self) -> list[int]:
        return sorted(int(b) for b in self.zk.get_children(self.chroot + "/brokers/ids"))

    def logs(self) -> str:
        return "\n".join(f"--- broker {i}\n{b.log()[-4000:]}" for i, b in enumerate(self.brokers))


def metadata(cluster, topic=None):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    return admin.list_topics(topic=topic, timeout=10)


def create_topic(cluster, name, partitions=3, rf=3, assignment=None, config=None):
    """Create through a real admin client and wait for leaders and full ISRs on every partition."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    if assignment is not None:
        new = NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment, config=config or {})
    else:
        new = NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config or {})
    futures = admin.create_topics([new], operation_timeout=30)
    futures[name].result(60)

    def ready():
        topic = metadata(cluster, name).topics.get(name)
        return topic is not None and topic.error is None and topic.partitions and all(
            p.leader >= 0 and len(p.isrs) == len(p.replicas) for p in topic.partitions.values())
    wait_for(ready, 60, f"leaders and full ISRs for {name}")
    return metadata(cluster, name).topics[name]


def produce(cluster, topic, count, *, acks="all", idempotent=True, value=b"v" * 100):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": acks,
                         "enable.idempotence": idempotent, "linger.ms": 5, "message.timeout.ms": 30000})
    outcomes: list = []
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=value + str(i).encode(),
                         on_delivery=lambda err, msg: outcomes.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    return outcomes


def consume_all(cluster, topic, expected, group=None, timeout: float = 60):
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group or f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = {}
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None or msg.error():
            continue
        got[(msg.partition(), msg.offset())] = msg.value()
    if group:
        consumer.commit(asynchronous=False)
    consumer.close()
    return got
