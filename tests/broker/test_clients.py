"""Real clients against a real `kctl broker run`: kcat (librdkafka 2.0), confluent-kafka, kafka-python."""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid

import pytest

from broker_support import (
    create_topics_body,
    kcat,
    produce_body,
    receive_response,
    send_request,
    whole_or_absent_topics,
)
from kcli.storage.files import parse_partition_dir_name
from kcli.tools.dump import DumpOptions, DumpRun
from kcli.tools.verify import verify

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
needs_kcat = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (scripts/setup.sh installs it)")


def _topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@needs_kcat
def test_kcat_metadata(broker):
    out = kcat("-b", broker.bootstrap, "-L", "-J")
    assert out.returncode == 0, out.stderr
    meta = json.loads(out.stdout)
    assert [b["id"] for b in meta["brokers"]] == [0]
    assert meta["brokers"][0]["name"] == f"127.0.0.1:{broker.port}"


@needs_kcat
@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce_consume(broker, codec):
    topic = _topic(f"kcat-{codec}")
    lines = [f"key-{i}:value {i} " + "x" * (i % 50) for i in range(200)]
    out = kcat("-b", broker.bootstrap, "-P", "-t", topic, "-K:", "-z", codec, input="\n".join(lines).encode())
    assert out.returncode == 0, out.stderr
    out = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%k:%s\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().splitlines() == lines


def test_confluent_produce_codecs_headers(broker):
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka import Consumer

    for codec in CODECS:
        topic = _topic(f"ck-{codec}")
        producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec, "linger.ms": 5})
        delivered = []
        for i in range(300):
            producer.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode() * 10,
                             headers=[("h", f"{i}".encode())], on_delivery=lambda err, msg: delivered.append(err))
        assert producer.flush(30) == 0
        assert delivered == [None] * 300
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused", "enable.auto.commit": False})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        while len(got) < 300:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None, msg and msg.error()
            got.append((msg.offset(), msg.key(), msg.value(), msg.headers()))
        consumer.close()
        assert got == [(i, f"k{i}".encode(), f"v{i}".encode() * 10, [("h", f"{i}".encode())]) for i in range(300)]


def test_confluent_idempotent_producer(broker):
    from confluent_kafka import Producer

    topic = _topic("idem")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2})
    errors = []
    for i in range(1000):
        producer.produce(topic, value=str(i).encode(), on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(30) == 0 and set(errors) == {None}
    partition_dir = broker.log_dir / f"{topic}-0"
    batches = [i for i in DumpRun([str(partition_dir)], DumpOptions()) if type(i).__name__ == "DumpBatch"]
    assert batches and all(b.batch.producer_id >= 0 and b.batch.base_sequence >= 0 for b in batches)


def test_kafka_python_round_trip(broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = _topic("kp")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="gzip")
    for i in range(100):
        producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("n", b"%d" % i)])
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=10000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = []
    for m in consumer:
        got.append((m.offset, m.key, m.value, m.headers))
        if len(got) == 100:
            break
    consumer.close()
    assert got == [(i, b"k%d" % i, b"v%d" % i, [("n", b"%d" % i)]) for i in range(100)]


def test_admin_create_delete_topics(broker):
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = _topic("admin")
    for future in admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)]).values():
        future.result(30)
    assert sorted(p.name for p in broker.log_dir.iterdir() if p.name.startswith(topic)) == [
        f"{topic}-0", f"{topic}-1", f"{topic}-2"]
    for future in admin.create_partitions([NewPartitions(topic, 5)]).values():
        future.result(30)
    assert len(admin.list_topics(topic, timeout=30).topics[topic].partitions) == 5
    for future in admin.delete_topics([topic]).values():
        future.result(30)
    assert topic not in admin.list_topics(timeout=30).topics
    # Kafka's asyncDelete: each log renamed <topic>-<p>.<uuid>-delete before the answer, its files removed
    # log.segment.delete.delay.ms (60 s here) later
    left = sorted(p.name for p in broker.log_dir.iterdir() if p.name.startswith(topic + "-"))
    assert all(name.endswith("-delete") for name in left), left
    assert sorted(parse_partition_dir_name(name) for name in left) == [(topic, i) for i in range(5)]
    with pytest.raises(Exception, match="INVALID_TOPIC|illegal|invalid"):
        admin.create_topics([NewTopic("../escape", num_partitions=1, replication_factor=1)])["../escape"].result(30)


def _first_offset_after_reset(broker, topic: str, start: int) -> int:
    """A librdkafka consumer assigned at ``start`` with auto.offset.reset=earliest: the offset of its first record."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": _topic("reset"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                return msg.offset()
        raise AssertionError(f"no record from {topic} after assigning offset {start}: the consumer never reset")
    finally:
        consumer.close()


def test_out_of_range_consumers_reset_by_auto_offset_reset(broker):
    # OFFSET_OUT_OF_RANGE comes with an empty record set: librdkafka then applies auto.offset.reset (a null
    # one it cannot parse, and it retries the same fetch forever).
    from confluent_kafka import Producer, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = _topic("reset")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        assert future.result(30).low_watermark == 5
    assert _first_offset_after_reset(broker, topic, 2) == 5  # behind retention: to the log start
    # past the end, as a consumer of a topic that was deleted and created again is
    assert _first_offset_after_reset(broker, topic, 1000) == 5


def test_offsets_for_times(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = _topic("times")
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    base = 1_700_000_000_000
    for i in range(50):
        producer.produce(topic, value=b"x", timestamp=base + i * 1000)
        producer.flush(10)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "t"})
    (tp,) = consumer.offsets_for_times([TopicPartition(topic, 0, base + 20_500)], timeout=30)
    assert tp.offset == 21
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    assert (low, high) == (0, 50)
    consumer.close()


def test_log_dir_is_clean_and_dumpable_after_clean_stop(make_broker, tmp_path):
    from confluent_kafka import Producer

    b = make_broker("log.segment.bytes=20000")
    producer = Producer({"bootstrap.servers": b.bootstrap, "compression.type": "lz4", "batch.num.messages": 20})
    for i in range(2000):
        producer.produce("orders", key=b"k%d" % (i % 10), value=os.urandom(100))
    assert producer.flush(30) == 0
    assert b.stop() == 0
    assert (b.log_dir / ".kafka_cleanshutdown").exists()
    report = verify([str(b.log_dir)], deep=True)
    assert report.is_clean(), report.problems
    assert len(list((b.log_dir / "orders-0").glob("*.log"))) > 3
    run = DumpRun([str(b.log_dir)], DumpOptions(deep_iteration=True))
    assert sum(1 for _ in run) and run.summary.errors == 0 and run.summary.records == 2000


def test_kill_9_loses_no_acknowledged_record(make_broker):
    """Flush every message (log.flush.interval.messages=1), SIGKILL mid-stream, restart: every
    acknowledged record is there, and startup recovery leaves a clean log."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = make_broker("log.flush.interval.messages=1", "log.segment.bytes=50000")
    producer = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 0,
                         "message.timeout.ms": 5000, "retries": 0})
    acked: list[int] = []

    def delivered(err, msg):
        if err is None:
            acked.append(int(msg.value()))

    for i in range(1501):
        producer.produce("crash", value=str(i).encode(), on_delivery=delivered)
        if i % 20 == 0 and i < 1500:
            producer.flush(10)  # a steady stream of acknowledged appends, each fsynced
        if i == 1500:
            b.kill()  # mid-stream: what was in flight may be lost, what was acknowledged may not
            break
    producer.flush(6)
    assert 1400 <= len(acked) <= 1501
    b2 = make_broker(log_dir=b.log_dir, port=b.port)
    consumer = Consumer({"bootstrap.servers": b2.bootstrap, "group.id": "x", "enable.auto.commit": False})
    consumer.assign([TopicPartition("crash", 0, 0)])
    seen = set()
    while True:
        msg = consumer.poll(5)
        if msg is None:
            break
        assert msg.error() is None
        seen.add(int(msg.value()))
    consumer.close()
    assert set(acked) <= seen
    assert b2.stop() == 0
    assert verify([str(b.log_dir)]).is_clean()


def test_retention_by_size_and_time_deletes_whole_segments(make_broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = make_broker("log.segment.bytes=10000", "log.retention.bytes=30000", "log.retention.check.interval.ms=300",
                    "log.segment.delete.delay.ms=200")
    producer = Producer({"bootstrap.servers": b.bootstrap, "batch.num.messages": 10})
    for i in range(1000):
        producer.produce("ret", value=os.urandom(200))
    assert producer.flush(30) == 0
    partition = b.log_dir / "ret-0"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        logs = sorted(partition.glob("*.log"))
        try:
            size = sum(p.stat().st_size for p in logs)
        except FileNotFoundError:  # retention renamed a segment between the listing and the stat: look again
            continue
        if size <= 30000 + 10000 and not list(partition.glob("*.deleted")):
            break
        time.sleep(0.2)
    logs = sorted(partition.glob("*.log"))
    first_base = int(logs[0].name.split(".")[0])
    assert first_base > 0 and len(logs) >= 2
    consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "r"})
    low, high = consumer.get_watermark_offsets(TopicPartition("ret", 0), timeout=30)
    consumer.close()
    assert (low, high) == (first_base, 1000)
    assert b.stop() == 0
    assert verify([str(b.log_dir)]).is_clean()


def test_acks_0_large_messages_and_verify_while_running(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = _topic("acks0")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": 0, "linger.ms": 1})
    for i in range(50):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(30) == 0
    big = Producer({"bootstrap.servers": broker.bootstrap, "message.max.bytes": 2_000_000})
    near_limit = os.urandom(1024 * 1024 - 200)  # a batch just under message.max.bytes (1048588)
    errors = []
    big.produce(topic, value=near_limit, on_delivery=lambda err, msg: errors.append(err))
    big.produce(topic, value=os.urandom(1024 * 1024 + 100), on_delivery=lambda err, msg: errors.append(err))
    big.flush(30)
    assert errors[0] is None and errors[1] is not None and "MSG_SIZE_TOO_LARGE" in str(errors[1])
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "a0", "fetch.max.bytes": 2_000_000})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    while len(values) < 51:
        msg = consumer.poll(10)
        assert msg is not None and msg.error() is None
        values.append(msg.value())
    consumer.close()
    assert values[:50] == [b"%d" % i for i in range(50)] and values[50] == near_limit
    report = verify([str(broker.log_dir)])  # while the broker runs: preallocated active indexes are warnings
    assert report.is_clean(), [(p.file, p.code, p.reason) for p in report.errors]


def test_aiokafka_round_trip(broker):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = _topic("aio")

    async def main():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, compression_type="lz4")
        await producer.start()
        try:
            for i in range(50):
                await producer.send_and_wait(topic, b"v%d" % i, key=b"k%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id="aio-group",
                                    auto_offset_reset="earliest")
        await consumer.start()
        got = []
        try:
            async for msg in consumer:
                got.append((msg.offset, msg.key, msg.value))
                if len(got) == 50:
                    break
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(asyncio.wait_for(main(), 60))
    assert got == [(i, b"k%d" % i, b"v%d" % i) for i in range(50)]


def test_segments_roll_by_time(make_broker):
    from confluent_kafka import Producer

    b = make_broker("log.roll.ms=500")
    producer = Producer({"bootstrap.servers": b.bootstrap})
    for round_ in range(3):
        producer.produce("rolling", value=b"r%d" % round_)
        assert producer.flush(10) == 0
        time.sleep(0.7)
    assert len(list((b.log_dir / "rolling-0").glob("*.log"))) == 3
    assert b.stop() == 0
    assert verify([str(b.log_dir)]).is_clean(strict=True)


def test_serves_sample_logs_and_read_committed_hides_aborted(make_broker, tmp_path):
    """The broker serves a log dir it did not write (sample-logs/, made by kcli's writer): every magic,
    codec and the transactional partition, where read_committed hides the aborted transactions."""
    from confluent_kafka import Consumer, TopicPartition

    from support import REPO

    log_dir = tmp_path / "served"
    shutil.copytree(REPO / "sample-logs" / "kafka-logs", log_dir)
    b = make_broker(log_dir=log_dir)

    def values(topic: str, isolation: str) -> list[bytes]:
        from confluent_kafka import KafkaError

        # read to the end of the partition (librdkafka's EOF event at the last stable offset for read_committed),
        # however long a loaded machine takes to get there
        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": f"rc-{isolation}",
                             "isolation.level": isolation, "enable.auto.commit": False,
                             "enable.partition.eof": True})
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error() is not None and msg.error().code() == KafkaError._PARTITION_EOF:
                break
            assert msg.error() is None, msg.error()
            got.append(msg.value())
        else:
            raise AssertionError(f"{topic} not read to its end ({isolation}) in 60 s: {got}")
        consumer.close()
        return got

    committed = values("payments", "read_committed")
    everything = values("payments", "read_uncommitted")
    assert not any(v.startswith(b"abort-me") or v == b"also" for v in committed)
    assert sum(v.startswith(b"commit-me") for v in committed) == 3
    assert sum(v.startswith(b"abort-me") for v in everything) == 3
    assert len(values("orders", "read_uncommitted")) == 373  # every record of orders-0, all codecs
    assert len(values("legacy-v0", "read_uncommitted")) == 18


def test_keyless_records_in_a_batch_to_a_compacted_topic_fail_one_by_one(broker):
    """librdkafka's 0011: one batch of 100 records, every tenth without a key, to a compacted topic. The broker
    names each keyless record (record_errors), so exactly those fail with INVALID_RECORD and the other 90 with
    _INVALID_DIFFERENT_RECORD (the batch is refused whole, as Kafka does)."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = _topic("compacted-keyless")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={"cleanup.policy": "compact"})])[topic].result(30)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000, "batch.num.messages": 1000,
                         "retries": 0})
    outcomes: dict[int, int] = {}
    for i in range(100):
        producer.produce(topic, value=b"v%d" % i, key=None if i % 10 == 0 else b"k%d" % i, partition=0,
                         on_delivery=lambda err, msg, i=i: outcomes.__setitem__(i, err.code() if err else 0))
    assert producer.flush(30) == 0
    assert {i for i, code in outcomes.items() if code == KafkaError.INVALID_RECORD} == set(range(0, 100, 10))
    assert {i for i, code in outcomes.items() if code == KafkaError._INVALID_DIFFERENT_RECORD} == \
        set(range(100)) - set(range(0, 100, 10))


def test_authorized_operations_seen_by_confluent_admin(broker):
    """describe_cluster / describe_topics / describe_consumer_groups with include_authorized_operations: without
    an authorizer Kafka reports every operation the resource type supports (AclEntry.supportedOperations)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation as Op
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = _topic("acl-ops")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert set(cluster.authorized_operations) == {Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                                  Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}
    described = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    assert set(described.authorized_operations) == {Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                                    Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}
    group = admin.describe_consumer_groups([topic], include_authorized_operations=True)[topic].result(30)
    assert set(group.authorized_operations) == {Op.READ, Op.DESCRIBE, Op.DELETE}
    assert admin.describe_cluster().result(30).authorized_operations is None  # not asked: not sent


def test_broker_resource_configs_through_confluent_admin(broker):
    """librdkafka's 0081 on a BROKER resource: alter_configs and incremental_alter_configs succeed for the keys
    Kafka updates dynamically, describe_configs shows them as DYNAMIC_BROKER_CONFIG, a static key is refused."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def described() -> dict:
        [future] = admin.describe_configs([ConfigResource("broker", "0")]).values()
        return future.result(30)

    for future in admin.alter_configs([ConfigResource(
            "broker", "0", set_config={"sasl.kerberos.min.time.before.relogin": "58000"})]).values():
        future.result(30)
    assert described()["sasl.kerberos.min.time.before.relogin"].value == "58000"
    for future in admin.incremental_alter_configs([ConfigResource("broker", "0", incremental_configs=[
            ConfigEntry("background.threads", "9", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("sasl.kerberos.min.time.before.relogin", None,
                        incremental_operation=AlterConfigOpType.DELETE)])]).values():
        future.result(30)
    entries = described()
    assert (entries["background.threads"].value, entries["background.threads"].source) == (
        "9", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert "sasl.kerberos.min.time.before.relogin" not in entries
    with pytest.raises(KafkaException, match="Cannot update these configs dynamically"):
        for future in admin.alter_configs([ConfigResource("broker", "0", set_config={"log.dirs": "/x"})]).values():
            future.result(30)
    for future in admin.incremental_alter_configs([ConfigResource("broker", "0", incremental_configs=[
            ConfigEntry("background.threads", None, incremental_operation=AlterConfigOpType.DELETE)])]).values():
        future.result(30)
    assert "background.threads" not in described()


def test_remote_storage_topic_is_refused_as_kafka_refuses_it(broker):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = _topic("tiered")
    with pytest.raises(KafkaException) as raised:
        admin.create_topics([NewTopic(topic, 1, 1, config={"remote.storage.enable": "true"})])[topic].result(30)
    error = raised.value.args[0]
    assert error.code() == KafkaError.INVALID_CONFIG
    assert "Tiered Storage functionality is disabled in the broker" in error.str()
    assert topic not in admin.list_topics(timeout=30).topics


# -- topic administration off the request path (issue 23.1) ------------------------------------------------
def test_other_connections_are_served_while_a_large_create_topics_runs(broker):
    """The logs of a CreateTopics are created in worker threads: ApiVersions, Metadata and Produce on another
    connection are answered before the CreateTopics answer (on the old code the event loop created every log
    first). Meanwhile a topic is all or nothing: Metadata shows a topic only with every partition led, and a
    produce to a topic Metadata does not show yet is UNKNOWN_TOPIC_OR_PARTITION (retriable), never another
    error. After the answer every topic takes produce requests; the topics are deleted again."""
    import select
    import socket

    from kio.schema.errors import ErrorCode

    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    from kcli.protocol import ApiKey

    existing = _topic("served")
    _send_and_wait_create(broker, [existing], 1)
    names = [_topic("bulk") for _ in range(20)]
    with socket.create_connection(("127.0.0.1", broker.port), timeout=120) as admin, \
            socket.create_connection(("127.0.0.1", broker.port), timeout=60) as other:
        send_request(admin, ApiKey.CREATE_TOPICS, 7, create_topics_body(names, 100))
        deadline = time.monotonic() + 60
        while not (broker.log_dir / f"{names[0]}-0").exists():  # the broker is at it
            assert time.monotonic() < deadline, "CreateTopics did not start"
            time.sleep(0.002)
        send_request(other, ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                client_software_version="1"))
        assert receive_response(other, ApiKey.API_VERSIONS, 3).error_code == ErrorCode.none
        shown = whole_or_absent_topics(other, names)
        send_request(other, ApiKey.PRODUCE, 9, produce_body([(existing, 0)] + [(n, 99) for n in names]))
        produced = {(t.name, p.index): p.error_code for t in receive_response(other, ApiKey.PRODUCE, 9).responses
                    for p in t.partition_responses}
        # all three answered while the CreateTopics answer is still to come
        assert select.select([admin], [], [], 0)[0] == [], "the CreateTopics answer came first"
        assert produced[(existing, 0)] == ErrorCode.none
        for n in names:
            if n in shown:
                assert produced[(n, 99)] == ErrorCode.none, n
            else:
                assert produced[(n, 99)] in (ErrorCode.none, ErrorCode.unknown_topic_or_partition), n
        created = receive_response(admin, ApiKey.CREATE_TOPICS, 7)
        assert {(t.name, t.error_code, t.num_partitions) for t in created.topics} == {
            (n, ErrorCode.none, 100) for n in names}
        assert set(whole_or_absent_topics(other, names)) == set(names)
        send_request(other, ApiKey.PRODUCE, 9, produce_body([(n, 99) for n in names]))
        assert {p.error_code for t in receive_response(other, ApiKey.PRODUCE, 9).responses
                for p in t.partition_responses} == {ErrorCode.none}
    _delete(broker, names + [existing])


def _send_and_wait_create(broker, names: list[str], partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(n, partitions, 1) for n in names]).values():
        future.result(60)


def _delete(broker, names: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_topics(names, operation_timeout=60).values():
        future.result(90)


def test_new_partitions_go_to_the_log_dir_with_fewest_and_deleted_logs_go_later(make_broker, tmp_path):
    """Kafka's nextLogDirs with two log.dirs: each new partition goes to the dir holding fewer partitions (the
    first on a tie), counting those loaded at startup and forgetting deleted ones. A deleted topic leaves
    Metadata at once; its logs are renamed <topic>-<p>.<uuid>-delete in their dir, then removed after
    log.segment.delete.delay.ms."""
    from confluent_kafka.admin import AdminClient, NewTopic

    first, second = tmp_path / "first", tmp_path / "second"
    broker = make_broker(f"log.dirs={first},{second}", "log.segment.delete.delay.ms=1000")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def create(name: str, partitions: int) -> None:
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(30)

    def placed(name: str) -> dict[int, str]:
        return {int(p.name.rsplit("-", 1)[1]): d.name for d in (first, second) for p in d.iterdir()
                if p.is_dir() and p.name.rsplit("-", 1)[0] == name}

    create("five", 5)  # 0 first, 1 second, 2 first, 3 second, 4 first
    assert placed("five") == {0: "first", 1: "second", 2: "first", 3: "second", 4: "first"}
    create("one", 1)  # first holds 3, second 2
    assert placed("one") == {0: "second"}
    for future in admin.delete_topics(["five"], operation_timeout=30).values():
        future.result(30)
    assert "five" not in admin.list_topics(timeout=30).topics
    assert placed("five") == {}
    renamed = sorted(p.name.split(".")[0] for d in (first, second) for p in d.iterdir() if p.name.endswith("-delete"))
    assert renamed == ["five-0", "five-1", "five-2", "five-3", "five-4"]
    create("three", 3)  # now first holds 0, second 1
    assert placed("three") == {0: "first", 1: "first", 2: "second"}
    deadline = time.monotonic() + 60
    while any(p.name.endswith("-delete") for d in (first, second) for p in d.iterdir()):
        assert time.monotonic() < deadline, "the deleted logs were not removed"
        time.sleep(0.1)
    # a restart counts the partitions it loads: first 2, second 2 -> the next goes to first
    broker.stop()
    broker.start()
    create("after", 1)
    assert placed("after") == {0: "first"}
