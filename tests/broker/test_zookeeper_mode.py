"""`kctl broker run` with zookeeper.connect, against the session's real ZooKeeper (a chroot per test)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kazoo.client import KazooClient

from broker_support import BrokerProcess, free_port
from kcli.storage.checkpoint import uuid_from_base64

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def chroot() -> str:
    return f"/kafka-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def zk_override(zookeeper, chroot) -> str:
    return f"zookeeper.connect={zookeeper.connect}{chroot}"


@pytest.fixture
def zk(zookeeper, chroot):
    """A kazoo client looking at the test's chroot from ZooKeeper's root."""
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)

    def read(path: str):
        data, _ = client.get(chroot + path)
        return json.loads(data)

    client.read_json = read
    client.under = lambda path: chroot + path
    yield client
    client.stop()
    client.close()


def wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def meta_properties(log_dir) -> dict[str, str]:
    lines = (log_dir / "meta.properties").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


def test_broker_registers_itself(make_broker, zk_override, zk, tmp_path):
    broker = make_broker(zk_override)
    info = zk.read_json("/brokers/ids/0")
    assert info["version"] == 5
    assert info["endpoints"] == [f"PLAINTEXT://127.0.0.1:{broker.port}"]
    assert (info["host"], info["port"]) == ("127.0.0.1", broker.port)
    assert info["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert zk.exists(zk.under("/brokers/ids/0")).ephemeralOwner != 0
    assert zk.read_json("/controller")["brokerid"] == 0
    assert zk.get(zk.under("/controller_epoch"))[0] == b"1"
    # The broker adopted the cluster id it found (or created) in ZooKeeper for its log dir.
    cluster_id = zk.read_json("/cluster/id")["id"]
    assert meta_properties(broker.log_dir)["cluster.id"] == cluster_id


def test_broker_adopts_existing_cluster_id(make_broker, zk_override, zk):
    zk.create(zk.under("/cluster/id"), b'{"version":"1","id":"AAAAAAAAAAAAAAAAAAAAAQ"}', makepath=True)
    broker = make_broker(zk_override)
    assert meta_properties(broker.log_dir)["cluster.id"] == "AAAAAAAAAAAAAAAAAAAAAQ"


@pytest.mark.interop
def test_auto_created_topic_is_registered(make_broker, zk_override, zk):
    from confluent_kafka import Producer

    broker = make_broker(zk_override, "num.partitions=2")
    topic = f"zk-auto-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    delivered = []
    producer.produce(topic, value=b"hello", partition=1, on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None]
    assignment = zk.read_json(f"/brokers/topics/{topic}")
    assert assignment["version"] == 3
    assert assignment["partitions"] == {"0": [0], "1": [0]}
    assert (assignment["adding_replicas"], assignment["removing_replicas"]) == ({}, {})
    metadata = (broker.log_dir / f"{topic}-1" / "partition.metadata").read_text()
    assert f"topic_id: {assignment['topic_id']}" in metadata
    assert uuid_from_base64(assignment["topic_id"])
    for index in (0, 1):
        state = zk.read_json(f"/brokers/topics/{topic}/partitions/{index}/state")
        assert state == {"version": 1, "leader": 0, "leader_epoch": 0, "controller_epoch": 1, "isr": [0]}


@pytest.mark.interop
def test_admin_create_grow_delete_topic(make_broker, zk_override, zk):
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    broker = make_broker(zk_override)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic = f"zk-admin-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    assert sorted(zk.get_children(zk.under(f"/brokers/topics/{topic}/partitions"))) == ["0", "1"]
    admin.create_partitions([NewPartitions(topic, 4)])[topic].result(30)
    assert zk.read_json(f"/brokers/topics/{topic}")["partitions"] == {str(p): [0] for p in range(4)}
    assert zk.read_json(f"/brokers/topics/{topic}/partitions/3/state")["leader"] == 0
    admin.delete_topics([topic])[topic].result(30)
    wait_for(lambda: zk.exists(zk.under(f"/brokers/topics/{topic}")) is None)


def test_second_broker_with_same_id_exits(make_broker, zk_override, zk, chroot, tmp_path):
    first = make_broker(zk_override)
    second = BrokerProcess(free_port(), tmp_path / "second" / "kafka-logs", [zk_override])
    second.log_dir.parent.mkdir()
    try:  # it binds its listeners before it registers, as Kafka does: it may be listening when it exits
        second.start()
    except RuntimeError as exc:
        assert "broker exited" in str(exc)
    assert second.proc.wait(30) != 0
    stderr = " ".join(second.log().split())  # the CLI wraps its message to the terminal width
    expected = f"broker id 0 is already registered in ZooKeeper at {chroot}/brokers/ids/0 by 127.0.0.1:{first.port}"
    assert expected in stderr
    # The first broker is untouched: still registered, still the controller, still serving.
    assert zk.read_json("/brokers/ids/0")["port"] == first.port
    assert zk.read_json("/controller")["brokerid"] == 0
    assert first.proc.poll() is None


def test_sigterm_removes_the_registration(make_broker, zk_override, zk):
    broker = make_broker(zk_override)
    cluster_id = zk.read_json("/cluster/id")["id"]
    assert zk.exists(zk.under("/brokers/ids/0")) is not None
    assert broker.stop() == 0, broker.log()
    # Gone at once, not after the 18 s session timeout.
    assert zk.exists(zk.under("/brokers/ids/0")) is None
    assert zk.exists(zk.under("/controller")) is None
    assert zk.read_json("/cluster/id")["id"] == cluster_id
    # A restart registers again as the next controller generation, in the same cluster.
    restarted = make_broker(zk_override, log_dir=broker.log_dir, port=broker.port)
    assert zk.read_json("/brokers/ids/0")["port"] == restarted.port
    assert zk.get(zk.under("/controller_epoch"))[0] == b"2"
    assert meta_properties(restarted.log_dir)["cluster.id"] == cluster_id


def test_offset_commit_v0_is_kept_in_zookeeper(make_broker, zk_override, zk):
    """OffsetCommit/OffsetFetch v0 (kafka-python as a 0.8.1 client) keep the offset under
    /consumers/<group>/offsets/<topic>/<partition>, as a ZooKeeper-mode Kafka does (offsets.storage=zookeeper);
    v1 (a 0.8.2 client) commits to the group coordinator, apart from it."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    # One broker: __consumer_offsets needs a replication factor of 1, as Kafka's own server.properties sets it.
    broker = make_broker(zk_override, "offsets.topic.replication.factor=1")
    topic = f"zk-old-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=(0, 8, 1))
    producer.send(topic, b"x", partition=0).get(30)
    producer.close()
    old = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 8, 1), group_id="old-group",
                        enable_auto_commit=False)
    newer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=(0, 8, 2), group_id="old-group",
                          enable_auto_commit=False)
    try:
        assert old.committed(tp) is None
        old.commit({tp: OffsetAndMetadata(1, "not kept", -1)})
        znode = zk.under(f"/consumers/old-group/offsets/{topic}/0")
        assert zk.get(znode)[0] == b"1"
        zk.set(znode, b"7")  # an old consumer or tool writing ZooKeeper directly
        assert old.committed(tp) == 7
        assert newer.committed(tp) is None  # v1 reads the coordinator, which has nothing
        newer.commit({tp: OffsetAndMetadata(5, "", -1)})
        assert (newer.committed(tp), old.committed(tp)) == (5, 7)
        assert zk.get(znode)[0] == b"7"
    finally:
        old.close()
        newer.close()
    assert "internal error" not in broker.log() and "Traceback" not in broker.log()


def test_leader_and_isr_creates_logs_off_the_event_loop_and_stop_replica_deletes_later(make_broker, zk_override):
    """ZooKeeper mode: one LeaderAndIsr makes this broker create 1,000 logs; it does that in worker threads,
    so ApiVersions and Metadata on another connection are answered while the logs are still being created
    (on the old code, once all were). Metadata shows the topic only once every log exists. DeleteTopics: the
    topic leaves Metadata, StopReplica renames its logs <topic>-<p>.<uuid>-delete, and they are removed
    log.segment.delete.delay.ms later."""
    import socket

    from confluent_kafka.admin import AdminClient
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.errors import ErrorCode

    from broker_support import create_topics_body, receive_response, send_request, whole_or_absent_topics
    from kcli.protocol import ApiKey

    broker = make_broker(zk_override, "log.segment.delete.delay.ms=3000")
    topic = f"zk-bulk-{uuid.uuid4().hex[:8]}"

    def logs(suffix: str = "") -> list[str]:
        return [p.name for p in broker.log_dir.iterdir() if p.name.startswith(topic + "-") and p.name.endswith(suffix)]

    with socket.create_connection(("127.0.0.1", broker.port), timeout=120) as admin, \
            socket.create_connection(("127.0.0.1", broker.port), timeout=60) as other:
        send_request(admin, ApiKey.CREATE_TOPICS, 7, create_topics_body([topic], 1000))
        wait_for(lambda: (broker.log_dir / f"{topic}-0").exists(), 60)  # the LeaderAndIsr is being applied
        send_request(other, ApiKey.API_VERSIONS, 3, ApiVersionsRequest(client_software_name="t",
                                                                       client_software_version="1"))
        assert receive_response(other, ApiKey.API_VERSIONS, 3).error_code == ErrorCode.none
        assert len(logs()) < 1000, "ApiVersions was answered only once every log existed"
        whole_or_absent_topics(other, [topic], 1000)
        created = receive_response(admin, ApiKey.CREATE_TOPICS, 7)
        assert [(t.name, t.error_code) for t in created.topics] == [(topic, ErrorCode.none)]
        assert whole_or_absent_topics(other, [topic], 1000) == {topic}
    assert len(logs()) == 1000
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    client.delete_topics([topic], operation_timeout=60)[topic].result(90)
    assert topic not in client.list_topics(timeout=30).topics
    wait_for(lambda: len(logs("-delete")) == 1000, 60)
    assert len(logs()) == 1000  # all renamed, none removed yet ...
    wait_for(lambda: logs() == [], 60)  # ... then removed
