"""A ZooKeeper-mode kctl cluster for tests: N `kctl broker run` processes on the session's real ZooKeeper, each
in its own chroot, plus the client helpers the cluster test modules share (confluent-kafka for admin, produce and
consume). One cluster per module; each test uses its own topics."""

from __future__ import annotations

import contextlib
import json
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from kazoo.client import KazooClient

import tiers
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
        # a secured cluster's client settings (librdkafka's names), given to every client the helpers make
        self.client_config: dict[str, str] = {}

    def _process(self, broker_id: int) -> BrokerProcess:
        return BrokerProcess(free_port(), self.base / f"broker-{broker_id}", [
            f"broker.id={broker_id}", f"zookeeper.connect={self.connect}",
            f"zookeeper.session.timeout.ms={self.session_timeout_ms}",
            f"replica.lag.time.max.ms={LAG_MS}", "offsets.topic.replication.factor=3",
            "offsets.topic.num.partitions=3", "group.initial.rebalance.delay.ms=0",
            "replica.fetch.wait.max.ms=200", "replica.fetch.backoff.ms=200",
            # the last broker of a stopping cluster has nowhere to move its leaderships: retry quickly
            "controlled.shutdown.retry.backoff.ms=500",
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
        tiers.require("cluster", f"a cluster of {len(self.brokers)} brokers")
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

    def controller_id(self) -> int | None:
        """The broker id in /controller; None between controllers (the node may go between two reads)."""
        from kazoo.exceptions import NoNodeError

        try:
            return int(self.read_json("/controller")["brokerid"])
        except NoNodeError:
            return None

    def controller_epoch(self) -> int:
        data, _ = self.zk.get(self.chroot + "/controller_epoch")
        return int(data)

    def live_broker_ids(self) -> list[int]:
        return sorted(int(b) for b in self.zk.get_children(self.chroot + "/brokers/ids"))

    def logs(self) -> str:
        return "\n".join(f"--- broker {i}\n{b.log()[-4000:]}" for i, b in enumerate(self.brokers))


@contextlib.contextmanager
def running_cluster(zookeeper, base: Path, *, brokers: int = 3, live: int | None = None,
                    env: Callable[[int], dict[str, str]] | None = None,
                    before_start: Callable[[Cluster], None] | None = None, **options) -> Iterator[Cluster]:
    """The module fixtures' one factory: a started cluster of ``brokers`` (``Cluster`` options), yielded once
    ``live`` brokers (default all) are in Metadata, stopped on exit. ``env`` gives a broker's extra environment;
    ``before_start`` may change the brokers' overrides (their ports are known) and the client settings."""
    cluster = Cluster(zookeeper, base, brokers=brokers, **options)
    if env is not None:
        for broker_id, broker in enumerate(cluster.brokers):
            broker.env = env(broker_id)
    if before_start is not None:
        before_start(cluster)
    try:
        cluster.start()
        wait_for(lambda: len(metadata(cluster).brokers) == (live or brokers), 60,
                 f"{live or brokers} live brokers in Metadata")
        yield cluster
    finally:
        cluster.stop()


def client_config(cluster) -> dict[str, str]:
    """The cluster's client security settings (none for a PLAINTEXT cluster, or an object without them)."""
    return dict(getattr(cluster, "client_config", None) or {})


def metadata(cluster, topic=None):
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **client_config(cluster)})
    return admin.list_topics(topic=topic, timeout=30)


def create_topic(cluster, name, partitions=3, rf=3, assignment=None, config=None):
    """Create through a real admin client and wait for leaders and full ISRs on every partition."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **client_config(cluster)})
    if assignment is not None:
        new = NewTopic(name, num_partitions=len(assignment), replica_assignment=assignment, config=config or {})
    else:
        new = NewTopic(name, num_partitions=partitions, replication_factor=rf, config=config or {})
    # Generous: the broker answers once the controller elected every leader, which a loaded machine can make slow.
    futures = admin.create_topics([new], operation_timeout=120, request_timeout=150)
    futures[name].result(180)

    seen = {}

    def ready():
        topic = metadata(cluster, name).topics.get(name)
        seen["topic"] = topic
        return topic is not None and topic.error is None and topic.partitions and all(
            p.leader >= 0 and len(p.isrs) == len(p.replicas) for p in topic.partitions.values())
    wait_for(ready, 120, f"leaders and full ISRs for {name}")
    # the answer that was ready: asking again may reach a broker whose metadata cache has not caught up yet
    return seen["topic"]


def produce(cluster, topic, count, *, acks="all", idempotent=True, value=b"v" * 100):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": cluster.bootstrap, **client_config(cluster), "acks": acks,
                         "enable.idempotence": idempotent, "linger.ms": 5, "message.timeout.ms": 30000})
    outcomes: list = []
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=value + str(i).encode(),
                         # the error's name, not the KafkaError: comparing a KafkaError with None (list.count(None))
                         # raises SystemError inside confluent-kafka instead of showing which error it was
                         on_delivery=lambda err, msg: outcomes.append(None if err is None else err.name()))
        producer.poll(0)
    assert producer.flush(60) == 0
    return outcomes


def consume_all(cluster, topic, expected, group=None, timeout: float = 60):
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, **client_config(cluster),
                         "group.id": group or f"g-{uuid.uuid4().hex[:6]}",
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


def read_assigned(cluster, topic: str, count: int, timeout: float = 60) -> list:
    """confluent-kafka's messages of partition 0 from offset 0, assigned (no group: __consumer_offsets may need
    brokers that are down), until ``count`` came or ``timeout`` passed."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, **client_config(cluster), "group.id": "unused",
                         "log_level": 0, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg)
    finally:
        consumer.close()
    return got


class Workload:
    """A confluent-kafka idempotent acks=all producer writing continuously (``rate`` records/s, round robin over
    the partitions, values "<partition>:<seq>") and a consumer group reading, each in a thread. It counts what
    was acknowledged and what came back, so a fault test can say that nothing acknowledged was lost, nothing
    was duplicated and every partition kept its order."""

    def __init__(self, cluster, topic: str, partitions: int, *, rate: int = 300) -> None:
        import threading

        self.cluster, self.topic, self.partitions, self.rate = cluster, topic, partitions, rate
        self.acked: dict[tuple[int, int], int] = {}  # (partition, seq) -> offset
        self.errors: list = []  # delivery errors (each a KafkaError)
        self.fatal: list = []  # producer errors that are not retriable
        self.consumed: dict[tuple[int, int], bytes] = {}  # (partition, offset) -> value
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads = [threading.Thread(target=self._produce, daemon=True),
                         threading.Thread(target=self._consume, daemon=True)]
        self.sent = 0

    def start(self) -> Workload:
        for thread in self._threads:
            thread.start()
        return self

    def _produce(self) -> None:
        from confluent_kafka import Producer

        def on_error(err):
            if err.fatal():
                self.fatal.append(err)

        producer = Producer({"bootstrap.servers": self.cluster.bootstrap, **client_config(self.cluster),
                             "acks": "all", "enable.idempotence": True,
                             "linger.ms": 5, "message.timeout.ms": 120000, "error_cb": on_error,
                             "retry.backoff.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
                             # a SIGSTOPped leader never answers: give up on its in-flight requests sooner
                             "request.timeout.ms": 10000, "socket.timeout.ms": 10000})
        seq = [0] * self.partitions
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        p = 0
        while not self._stop_producing.is_set():
            value = f"{p}:{seq[p]}".encode()

            def delivered(err, msg, p=p, s=seq[p]):
                if err is None:
                    self.acked[(p, s)] = msg.offset()
                else:
                    self.errors.append(err)
            producer.produce(self.topic, value=value, partition=p, on_delivery=delivered)
            self.sent += 1
            seq[p] += 1
            p = (p + 1) % self.partitions
            producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        producer.flush(120)

    def _consume(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": self.cluster.bootstrap, **client_config(self.cluster),
                             "group.id": f"wl-{uuid.uuid4().hex[:6]}",
                             "auto.offset.reset": "earliest", "enable.auto.commit": True,
                             "auto.commit.interval.ms": 500, "topic.metadata.refresh.interval.ms": 1000})
        consumer.subscribe([self.topic])
        while not self._stop_consuming.is_set():
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            self.consumed[(msg.partition(), msg.offset())] = msg.value()
        consumer.close()

    def acked_count(self) -> int:
        return len(self.acked)

    def wait_acked(self, more: int, timeout: float = 60) -> None:
        """Wait until ``more`` further records are acknowledged (progress after a fault)."""
        target = len(self.acked) + more
        wait_for(lambda: len(self.acked) >= target, timeout, f"{more} more acknowledged records")

    def stop(self, timeout: float = 120) -> None:
        """Stop producing, wait until every acknowledged record has been consumed, stop consuming."""
        self._stop_producing.set()
        self._threads[0].join(timeout)

        def caught_up():
            values = set(self.consumed.values())
            return all(f"{p}:{s}".encode() in values for p, s in self.acked)
        try:
            wait_for(caught_up, timeout, "the consumer group reads every acknowledged record", interval=0.5)
        finally:
            self._stop_consuming.set()
            self._threads[1].join(30)

    def check(self) -> dict:
        """Zero acknowledged records lost, no duplicates, per-partition order kept; returns the counts."""
        seen: dict[bytes, int] = {}
        by_partition: dict[int, list[tuple[int, int]]] = {}
        duplicates = []
        for (partition, offset), value in sorted(self.consumed.items()):
            if value in seen and seen[value] != offset:
                duplicates.append((value, seen[value], offset))
            seen[value] = offset
            p, s = (int(x) for x in value.decode().split(":"))
            assert p == partition, f"value {value!r} consumed from partition {partition}"
            by_partition.setdefault(partition, []).append((offset, s))
        lost = sorted((p, s) for p, s in self.acked if f"{p}:{s}".encode() not in seen)
        assert not lost, f"{len(lost)} acknowledged records lost, first {lost[:10]}"
        assert not duplicates, f"{len(duplicates)} duplicates, first {duplicates[:10]}"
        for partition, rows in by_partition.items():
            seqs = [s for _, s in rows]
            assert seqs == sorted(seqs), f"partition {partition} out of order"
        for (p, s), offset in self.acked.items():
            # None: librdkafka could not tell the offset (its idempotent producer may infer a delivery)
            assert offset is None or seen[f"{p}:{s}".encode()] == offset, (
                f"{p}:{s} acknowledged at {offset}, read elsewhere")
        assert not self.fatal, f"fatal producer errors: {self.fatal}"
        return {"sent": self.sent, "acked": len(self.acked), "consumed": len(seen), "errors": len(self.errors)}


def replica_bytes(cluster, topic: str, partition: int) -> dict[int, bytes]:
    """Each live replica's log bytes for a partition (the segments concatenated in offset order)."""
    out = {}
    for broker_id, broker in enumerate(cluster.brokers):
        directory = broker.log_dir / f"{topic}-{partition}"
        if broker.proc is None or not directory.is_dir():
            continue
        out[broker_id] = b"".join(segment.read_bytes() for segment in sorted(directory.glob("*.log")))
    return out
