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

    # log.cleaner.backoff.ms: the cleaner looks again 200 ms after finding nothing to clean, not 15 s later
    b = make_broker("group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=1",
                    "log.segment.bytes=2000", "log.retention.check.interval.ms=300", "log.cleaner.backoff.ms=200")
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


def _poll_until(consumers, done, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.1)
        if done():
            return True
    return False


def _partitions(consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def test_static_member_restart_keeps_its_assignment_without_a_rebalance(make_broker):
    """KIP-345 with librdkafka: a static member that closes (static members send no LeaveGroup) and comes back
    with the same group.instance.id within its session timeout gets its partitions back, and the other
    member sees no revoke and no new assignment: the generation did not change."""
    from confluent_kafka import Consumer, ConsumerGroupState
    from confluent_kafka.admin import AdminClient

    b = make_broker("group.initial.rebalance.delay.ms=0")
    topic, group = f"s-{uuid.uuid4().hex[:6]}", "static-members"
    _produce(b.bootstrap, topic, 40, partitions=4)
    conf = {"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 300, "partition.assignment.strategy": "range"}
    events: list[tuple[str, list[int]]] = []
    one = Consumer({**conf, "group.instance.id": "one", "client.id": "one"})
    one.subscribe([topic], on_assign=lambda c, ps: events.append(("assign", [p.partition for p in ps])),
                   on_revoke=lambda c, ps: events.append(("revoke", [p.partition for p in ps])))
    two = Consumer({**conf, "group.instance.id": "two", "client.id": "two"})
    two.subscribe([topic])
    assert _poll_until([one, two], lambda: len(_partitions(one)) + len(_partitions(two)) == 4 and
                       _partitions(one) and _partitions(two), 30), (events, b.log())
    before, old_member_id = _partitions(two), two.memberid()
    assert _consume(two, 1, timeout=10)
    events.clear()
    two.close()

    two = Consumer({**conf, "group.instance.id": "two", "client.id": "two"})
    two.subscribe([topic])
    assert _poll_until([one, two], lambda: bool(_partitions(two)), 20), b.log()
    assert _partitions(two) == before
    assert two.memberid() != old_member_id
    _poll_until([one, two], lambda: False, 1.5)  # heartbeats of both: a rebalance would show now
    assert events == [] and _partitions(one) | before == {0, 1, 2, 3}
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(20)
    assert described.state == ConsumerGroupState.STABLE
    assert sorted((m.group_instance_id, m.member_id == two.memberid()) for m in described.members) == \
        [("one", False), ("two", True)]
    one.close()
    two.close()


def test_cooperative_sticky_second_consumer_completes_both_rounds(make_broker):
    """KIP-429: a second cooperative-sticky consumer joins; the first revokes only the partitions that move
    (round one) and the group rebalances again to hand them over (round two)."""
    from confluent_kafka import Consumer

    b = make_broker("group.initial.rebalance.delay.ms=0")
    topic = f"co-{uuid.uuid4().hex[:6]}"
    _produce(b.bootstrap, topic, 40, partitions=4)
    conf = {"bootstrap.servers": b.bootstrap, "group.id": "cooperative", "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "cooperative-sticky"}
    revoked: list[int] = []
    a = Consumer({**conf, "client.id": "a"})
    a.subscribe([topic], on_revoke=lambda c, ps: revoked.extend(p.partition for p in ps))
    assert _poll_until([a], lambda: _partitions(a) == {0, 1, 2, 3}, 30), b.log()
    c = Consumer({**conf, "client.id": "c"})
    c.subscribe([topic])
    assert _poll_until([a, c], lambda: len(_partitions(a)) == 2 and len(_partitions(c)) == 2, 45), \
        (_partitions(a), _partitions(c), b.log())
    assert _partitions(a) | _partitions(c) == {0, 1, 2, 3}
    assert sorted(revoked) == sorted(_partitions(c))  # only what moved was revoked
    a.close()
    c.close()


def test_offset_commit_metadata_round_trips_with_real_clients(make_broker):
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.structs import OffsetAndMetadata

    b = make_broker("group.initial.rebalance.delay.ms=0")
    topic = f"m-{uuid.uuid4().hex[:6]}"
    _produce(b.bootstrap, topic, 10, partitions=2)
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "meta-ck", "enable.auto.commit": False})
    consumer.commit(offsets=[TopicPartition(topic, 0, 5, metadata="ck;pos=5"), TopicPartition(topic, 1, 7)],
                    asynchronous=False)
    committed = consumer.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
    consumer.close()
    assert [(tp.offset, tp.metadata) for tp in committed] == [(5, "ck;pos=5"), (7, None)]
    kp = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id="meta-kp", enable_auto_commit=False)
    kp.commit({KafkaTopicPartition(topic, 0): OffsetAndMetadata(3, "kafka-python metadata", -1)})
    assert kp.committed(KafkaTopicPartition(topic, 0), metadata=True).metadata == "kafka-python metadata"
    kp.close()
