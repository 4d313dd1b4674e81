"""Consumer groups on `kctl broker run`: real group members, rebalances and commits that survive restarts."""

from __future__ import annotations

import time
import uuid

from kcli.tools.dump import Decoder, DumpOptions, DumpRun
from kcli.tools.verify import verify


def _produce(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(count):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % partitions)
    assert producer.flush(30) == 0


def _consume(consumer, want: int, timeout: float = 60.0) -> list:
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg)
    return got


def test_confluent_group_commits_survive_restart(make_broker):
    from confluent_kafka import Consumer

    b = make_broker("group.initial.rebalance.delay.ms=0")
    topic, group = f"g-{uuid.uuid4().hex[:6]}", "orders-app"
    _produce(b.bootstrap, topic, 100)
    conf = {"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": 6000}
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    first = _consume(consumer, 60)
    assert [m.offset() for m in first][:60] == list(range(60))
    consumer.commit(message=first[59], asynchronous=False)
    consumer.close()
    assert b.stop() == 0

    b2 = make_broker("group.initial.rebalance.delay.ms=0", log_dir=b.log_dir, port=b.port)
    consumer = Consumer(conf)
    consumer.subscribe([topic])
    rest = _consume(consumer, 40)
    consumer.close()
    assert [m.offset() for m in rest] == list(range(60, 100))
    assert b2.stop() == 0
    # what the coordinator wrote is Kafka's own record format
    run = DumpRun([str(b.log_dir)], DumpOptions(decoder=Decoder.OFFSETS))
    texts = [getattr(i, "key_text", None) or "" for i in run]
    assert any(f'"group":"{group}","topic":"{topic}","partition":0' in t for t in texts)
    assert verify([str(b.log_dir)]).is_clean()


def test_two_members_rebalance(make_broker):
    from confluent_kafka import Consumer

    b = make_broker("group.initial.rebalance.delay.ms=0")
    topic = f"r-{uuid.uuid4().hex[:6]}"
    _produce(b.bootstrap, topic, 400, partitions=4)
    conf = {"bootstrap.servers": b.bootstrap, "group.id": "pair", "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    a = Consumer({**conf, "client.id": "a"})
    a.subscribe([topic])
    got_a = _consume(a, 50, timeout=30)
    assert got_a
    c = Consumer({**conf, "client.id": "c"})
    c.subscribe([topic])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        a.poll(0.2)
        c.poll(0.2)
        if a.assignment() and c.assignment() and len(a.assignment()) + len(c.assignment()) == 4:
            break
    parts_a = {tp.partition for tp in a.assignment()}
    parts_c = {tp.partition for tp in c.assignment()}
    assert parts_a and parts_c and parts_a | parts_c == {0, 1, 2, 3} and not parts_a & parts_c
    a.close()
    c.close()


def test_kafka_python_group_consumer(make_broker):
    from kafka import KafkaConsumer
    from kafka.admin import KafkaAdminClient

    b = make_broker("group.initial.rebalance.delay.ms=0")
    topic = f"kp-{uuid.uuid4().hex[:6]}"
    _produce(b.bootstrap, topic, 30)
    consumer = KafkaConsumer(topic, bootstrap_servers=b.bootstrap, group_id="kp-group", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=15000)
    got = []
    for msg in consumer:
        got.append(msg.offset)
        if len(got) == 30:
            break
    consumer.commit()
    consumer.close()
    assert got == list(range(30))
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    listed = admin.list_groups()
    assert any(_field(g, "group_id", 0) == "kp-group" for g in listed), listed
    offsets = admin.list_group_offsets({"kp-group": None})
    offsets = offsets.get("kp-group", offsets)
    assert {tp.partition: meta.offset for tp, meta in offsets.items()} == {0: 30}
    described = admin.describe_groups(["kp-group"])
    assert "Empty" in repr(described)
    admin.delete_groups(["kp-group"])
    assert not any(_field(g, "group_id", 0) == "kp-group" for g in admin.list_groups())
    admin.close()


def _field(obj, name, index):
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None) if hasattr(obj, name) else obj[index]


def test_broker_compacts_consumer_offsets_and_serves_them(make_broker):
    """Many commits roll __consumer_offsets segments; the broker's cleaner keeps the latest per key, and after
    a restart the group resumes from exactly its last commit."""
    from confluent_kafka import Consumer, TopicPartition

    b = make_broker("group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=1",
                    "log.segment.bytes=2000", "log.retention.check.interval.ms=300")
    topic = f"c-{uuid.uuid4().hex[:6]}"
    _produce(b.bootstrap, topic, 10)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "compacted", "enable.auto.commit": False})
    for offset in range(1, 200):
        consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    consumer.close()
    offsets_dir = b.log_dir / "__consumer_offsets-0"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            size = sum(p.stat().st_size for p in offsets_dir.glob("*.log"))
        except FileNotFoundError:  # the cleaner swapped a segment between the listing and the stat
            continue
        if size < 8000 and "cleaner:" in b.log():
            break
        time.sleep(0.3)
    assert "cleaner:" in b.log()
    assert b.stop() == 0
    assert verify([str(b.log_dir)]).is_clean()
    b2 = make_broker("group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=1", log_dir=b.log_dir,
                     port=b.port)
    consumer = Consumer({"bootstrap.servers": b2.bootstrap, "group.id": "compacted"})
    (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
    consumer.close()
    assert tp.offset == 199
