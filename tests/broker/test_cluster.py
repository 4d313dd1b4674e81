"""Three `kctl broker run` processes on the session's real ZooKeeper form one cluster: a controller, replica
assignment, replication with an ISR, acks=all and min.insync.replicas, used by real clients (confluent-kafka,
kafka-python, kcat). One cluster for the module; each test uses its own topics."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

import kctl_fork
from broker_support import kcat
from cluster_support import running_cluster, wait_for
from cluster_support import consume_all as _consume_all
from cluster_support import create_topic as _create
from cluster_support import metadata as _metadata
from cluster_support import produce as _produce

pytestmark = pytest.mark.cluster

BROKERS = 3


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with running_cluster(zookeeper, tmp_path_factory.mktemp("cluster"), brokers=BROKERS) as c:
        yield c


def test_three_brokers_and_a_controller(cluster):
    metadata = _metadata(cluster)
    assert sorted(metadata.brokers) == [0, 1, 2]
    assert metadata.controller_id in (0, 1, 2)
    assert cluster.read_json("/controller")["brokerid"] == metadata.controller_id
    listed = kcat("-L", "-b", cluster.bootstrap, "-J")
    assert listed.returncode == 0, listed.stderr
    assert sorted(b["id"] for b in json.loads(listed.stdout)["brokers"]) == [0, 1, 2]


def test_replicated_topic_is_assigned_and_led(cluster):
    topic = _create(cluster, "replicated", partitions=6, rf=3)
    assignment = cluster.read_json("/brokers/topics/replicated")
    assert assignment["version"] == 3 and assignment["topic_id"]
    leaders = []
    for p in range(6):
        replicas = assignment["partitions"][str(p)]
        assert sorted(replicas) == [0, 1, 2]
        state = cluster.state("replicated", p)
        # the controller's choice: the first live replica in assignment order, every replica in the ISR. A
        # follower that a loaded machine held back replica.lag.time.max.ms leaves the ISR (the leader's right)
        # and rejoins once caught up: what is certain is that it does.
        assert state["leader"] == replicas[0] and state["leader"] in state["isr"]
        wait_for(lambda p=p: sorted(cluster.state("replicated", p)["isr"]) == [0, 1, 2], 60,
                 f"every replica of replicated-{p} in its ISR")
        assert state["leader_epoch"] == 0
        assert state["controller_epoch"] >= 1
        assert topic.partitions[p].leader == replicas[0]
        leaders.append(replicas[0])
    assert sorted(set(leaders)) == [0, 1, 2], "leaders spread over the brokers"


def test_explicit_assignment_is_honoured(cluster):
    _create(cluster, "explicit", assignment=[[2, 0], [1, 2]])
    assert cluster.read_json("/brokers/topics/explicit")["partitions"] == {"0": [2, 0], "1": [1, 2]}
    assert cluster.state("explicit", 0)["leader"] == 2
    assert cluster.state("explicit", 1)["leader"] == 1


def test_replication_factor_above_the_broker_count_is_refused(cluster):
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka import KafkaError

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    future = admin.create_topics([NewTopic("too-many", num_partitions=1, replication_factor=4)])["too-many"]
    with pytest.raises(Exception) as raised:
        future.result(30)
    assert raised.value.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR


def test_acks_all_records_reach_every_replica_byte_identical(cluster):
    _create(cluster, "durable", partitions=3, rf=3)
    outcomes = _produce(cluster, "durable", 3000)
    assert outcomes.count(None) == 3000
    got = _consume_all(cluster, "durable", 3000)
    assert len(got) == 3000

    def identical():
        per_partition = []
        for p in range(3):
            contents = set()
            for broker in cluster.brokers:
                segment = broker.log_dir / f"durable-{p}" / "00000000000000000000.log"
                contents.add(segment.read_bytes() if segment.exists() else None)
            per_partition.append(len(contents) == 1 and None not in contents)
        return all(per_partition)
    wait_for(identical, 30, "byte-identical replicas")
    for broker in cluster.brokers:
        verified = kctl_fork.run("verify", str(broker.log_dir / "durable-0"))  # forked: tests/kctl_fork.py
        assert verified.returncode == 0, verified.stdout + verified.stderr


def test_consumer_group_commits_on_a_replicated_offsets_topic(cluster):
    _create(cluster, "grouped", partitions=2, rf=3)
    _produce(cluster, "grouped", 200)
    got = _consume_all(cluster, "grouped", 200, group="cluster-group")
    assert len(got) == 200
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "cluster-group"})
    committed = consumer.committed([TopicPartition("grouped", 0), TopicPartition("grouped", 1)], timeout=30)
    consumer.close()
    assert sum(tp.offset for tp in committed) == 200
    offsets = cluster.read_json("/brokers/topics/__consumer_offsets")["partitions"]
    assert all(len(r) == 3 for r in offsets.values())


def test_kafka_python_produces_and_consumes(cluster):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    _create(cluster, "kp", partitions=2, rf=2)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(50):
        producer.send("kp", f"m{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer("kp", bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=30_000)
    try:
        got = []
        for m in consumer:  # the 50 records, not a wait for consumer_timeout_ms after the last
            got.append(m.value)
            if len(got) == 50:
                break
        assert sorted(got) == sorted(f"m{i}".encode() for i in range(50))
        ends = consumer.end_offsets([TopicPartition("kp", p) for p in (0, 1)])
        assert sum(ends.values()) == 50  # and nothing after them
    finally:
        consumer.close()


def test_paused_followers_leave_the_isr_and_min_insync_replicas_holds(cluster):
    from confluent_kafka import KafkaError, Producer

    # The controller leads, so that pausing followers pauses no controller (whose failover is the next issue's);
    # the sessions (30 s) outlive the pauses.
    controller = cluster.read_json("/controller")["brokerid"]
    others = [b for b in range(BROKERS) if b != controller]
    _create(cluster, "minisr", assignment=[[controller, *others]], config={"min.insync.replicas": "2"})
    leader = cluster.state("minisr", 0)["leader"]
    assert leader == controller
    followers = [b for b in range(BROKERS) if b != leader]
    paused = []
    try:
        cluster.brokers[followers[0]].proc.send_signal(signal.SIGSTOP)
        paused.append(followers[0])
        assert _produce(cluster, "minisr", 20).count(None) == 20
        wait_for(lambda: followers[0] not in cluster.state("minisr", 0)["isr"], 30, "the paused follower leaves")
        assert _produce(cluster, "minisr", 20).count(None) == 20
        cluster.brokers[followers[1]].proc.send_signal(signal.SIGSTOP)
        paused.append(followers[1])
        wait_for(lambda: cluster.state("minisr", 0)["isr"] == [leader], 30, "both paused followers leave")
        producer = Producer({"bootstrap.servers": cluster.brokers[leader].bootstrap, "acks": "all",
                             "message.timeout.ms": 5000, "retries": 0})
        errors: list = []
        producer.produce("minisr", b"refused", on_delivery=lambda err, msg: errors.append(err))
        producer.flush(20)
        assert errors and errors[0] is not None
        # ZooKeeper shows the ISR [leader] as the leader writes it; the leader's own ISR follows when the write
        # returns. Before: NOT_ENOUGH_REPLICAS (refused, not appended); between: appended, then
        # NOT_ENOUGH_REPLICAS_AFTER_APPEND once the shrink lets the high watermark pass it (Kafka's DelayedProduce).
        assert errors[0].code() in (KafkaError.NOT_ENOUGH_REPLICAS, KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                                    KafkaError._MSG_TIMED_OUT), errors[0]
    finally:
        for b in paused:
            cluster.brokers[b].proc.send_signal(signal.SIGCONT)
    wait_for(lambda: sorted(cluster.state("minisr", 0)["isr"]) == [0, 1, 2], 60, "the followers rejoin the ISR")
    assert _produce(cluster, "minisr", 10).count(None) == 10


def test_kctl_zk_topic_shows_the_controllers_state(cluster):
    _create(cluster, "shown", partitions=2, rf=3)
    out = subprocess.run([sys.executable, "-m", "kcli", "zk", "topic", "shown", "--zookeeper", cluster.connect,
                          "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    text = json.dumps(document)
    assert "isr" in text and "leader" in text



# -- fetch from follower (KIP-392): racks rack-0 = brokers 0 and 2, rack-1 = broker 1 ----------------------

def _call(broker, api_key, version, body):
    import socket

    from broker_support import read_response
    from kcli.protocol import decode_response, encode_request

    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        sock.sendall(encode_request(api_key, version, 7, "kctl-ffr", body))
        frame = read_response(sock)
    assert frame is not None, f"broker closed the connection on {api_key.name} v{version}"
    return decode_response(api_key, version, frame)[1]


def _fetch_partition(broker, version, topic, partition=0, offset=0, rack_id=None):
    """One consumer Fetch (replica id -1, no wait) of ``version`` for one partition: its PartitionData."""
    import datetime
    import importlib

    from kio.static.primitive import i8, i32, i64

    from kcli.protocol import ApiKey

    m = importlib.import_module(f"kio.schema.fetch.v{version}.request")
    body = m.FetchRequest(
        replica_id=i32(-1), max_wait=datetime.timedelta(0), min_bytes=i32(1), max_bytes=i32(1 << 20),
        isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
        topics=(m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
            partition=i32(partition), current_leader_epoch=i32(-1), fetch_offset=i64(offset),
            log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)),),
        forgotten_topics_data=(), **({"rack_id": rack_id} if rack_id is not None else {}))
    [topic_response] = _call(broker, ApiKey.FETCH, version, body).responses
    [data] = topic_response.partitions
    return data


def _batch_offsets(records) -> list[int]:
    from kcli.records.record_set import iter_batches

    offsets = []
    for batch in iter_batches(bytes(records or b"")):
        offsets.extend(range(batch.base_offset, batch.last_offset + 1))
    return offsets


def test_fetch_from_follower_on_the_wire(cluster):
    """Leader 0 (rack-0), follower 1 (rack-1): a v11 consumer in rack-1 is sent to 1 with no records; 1 serves
    it up to its high watermark; 1 refuses Fetch v10 and ListOffsets (leader only)."""
    from kio.schema.errors import ErrorCode
    from kio.schema.list_offsets.v7 import request as list_offsets
    from kio.static.primitive import i8, i32, i64

    from kcli.protocol import ApiKey

    _create(cluster, "ffr-wire", assignment=[[0, 1]])
    assert _produce(cluster, "ffr-wire", 50, idempotent=False).count(None) == 50
    leader, follower = cluster.brokers[0], cluster.brokers[1]

    redirected = _fetch_partition(leader, 11, "ffr-wire", rack_id="rack-1")
    assert redirected.error_code == ErrorCode.none
    assert redirected.preferred_read_replica == 1
    assert _batch_offsets(redirected.records) == [] and redirected.high_watermark == 50
    same_rack = _fetch_partition(leader, 11, "ffr-wire", rack_id="rack-0")
    assert same_rack.preferred_read_replica == -1 and _batch_offsets(same_rack.records) == list(range(50))

    assert _fetch_partition(follower, 10, "ffr-wire").error_code == ErrorCode.not_leader_or_follower
    served = wait_for(lambda: (d := _fetch_partition(follower, 11, "ffr-wire", rack_id="rack-1")).high_watermark == 50
                      and d, 30, "the follower learns the high watermark")
    assert served.error_code == ErrorCode.none and served.preferred_read_replica == -1
    assert _batch_offsets(served.records) == list(range(50))

    def latest(broker):
        body = list_offsets.ListOffsetsRequest(replica_id=i32(-1), isolation_level=i8(0), topics=(
            list_offsets.ListOffsetsTopic(name="ffr-wire", partitions=(list_offsets.ListOffsetsPartition(
                partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(-1)),)),))
        [topic] = _call(broker, ApiKey.LIST_OFFSETS, 7, body).topics
        return topic.partitions[0]
    assert latest(follower).error_code == ErrorCode.not_leader_or_follower
    assert (latest(leader).error_code, latest(leader).offset) == (ErrorCode.none, 50)


def test_confluent_kafka_consumer_fetches_from_the_follower_in_its_rack(cluster):
    """client.rack=rack-1: partition 0 (leader 0 in rack-0, follower 1 in rack-1) is read from broker 1;
    partition 1 from its leader 1 (in the rack); partition 2 (brokers 2 and 0, none in rack-1) from its leader.
    librdkafka's statistics name the broker each partition is fetched from, and its fetch debug log the broker
    whose fetch responses brought each partition's records."""
    import logging
    import re

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    _create(cluster, "ffr-client", assignment=[[0, 1], [1, 2], [2, 0]])
    assert _produce(cluster, "ffr-client", 300, idempotent=False).count(None) == 300
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    logger = logging.getLogger("kctl-test-ffr")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Collect())
    stats: list[dict] = []
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ffr-client", "client.rack": "rack-1",
                         "enable.auto.commit": False, "debug": "fetch", "statistics.interval.ms": 200,
                         "stats_cb": lambda text: stats.append(json.loads(text))}, logger=logger)
    try:
        consumer.assign([TopicPartition("ffr-client", p, OFFSET_BEGINNING) for p in range(3)])
        got: dict = {}
        deadline = time.monotonic() + 30
        while len(got) < 300 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                got[(msg.partition(), msg.offset())] = msg.value()
        assert len(got) == 300
        counts = {p: sum(1 for (q, _) in got if q == p) for p in range(3)}

        def fetched_from():
            if not stats:
                return None
            partitions = stats[-1]["topics"].get("ffr-client", {}).get("partitions", {})
            return {p: (partitions[str(p)]["leader"], partitions[str(p)]["broker"]) for p in range(3)
                    if str(p) in partitions}
        # statistics come on poll(): wait for one taken after the records arrived
        stats.clear()
        wait_for(lambda: consumer.poll(0.1) is None and fetched_from(), 10, "consumer statistics")
        assert fetched_from() == {0: (0, 1), 1: (1, 1), 2: (2, 2)}
    finally:
        consumer.close()

    # "[thrd:127.0.0.1:<port>/<broker id>]: ... Enqueue N message(s) ... on ffr-client [P] fetch queue"
    enqueued: dict = {}
    for line in lines:
        match = re.search(r"thrd:[^/\]]+/(\d+)\].*Enqueue (\d+) message\(s\).* on ffr-client \[(\d+)\] fetch queue", line)
        if match:
            key = (int(match.group(3)), int(match.group(1)))
            enqueued[key] = enqueued.get(key, 0) + int(match.group(2))
    assert enqueued == {(0, 1): counts[0], (1, 1): counts[1], (2, 2): counts[2]}, enqueued
    assert any("preferred replica" in line and "ffr-client [0]" in line for line in lines)


def test_topic_config_changes_reach_every_broker(cluster):
    """`kctl topics alter-config` through broker 0 of a topic led by broker 1: broker 1 learns it from the
    /config/changes notification (DescribeConfigs there shows it) and its log rolls at the new segment.bytes."""
    _create(cluster, "dyncfg", assignment=[[1]])
    b0, b1 = cluster.brokers[0].bootstrap, cluster.brokers[1].bootstrap

    def kctl_topics(*args):
        proc = kctl_fork.run("topics", *args)  # forked: tests/kctl_fork.py
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def segment_bytes_on(bootstrap):
        doc = json.loads(kctl_topics("-b", bootstrap, "describe", "dyncfg", "--json"))
        entries = doc["topics"][0]["configs"]
        return next(e["value"] for e in entries if e["name"] == "segment.bytes")

    assert segment_bytes_on(b1) != "2048"
    kctl_topics("-b", b0, "alter-config", "dyncfg", "--add-config", "segment.bytes=2048")
    wait_for(lambda: segment_bytes_on(b1) == "2048", 30, "broker 1 to apply the new segment.bytes")
    for _ in range(6):  # six produce rounds: batches of ~2 KiB, each one past the new segment size
        _produce(cluster, "dyncfg", 10, value=b"x" * 200)
    segments = list((cluster.brokers[1].log_dir / "dyncfg-0").glob("*.log"))
    assert len(segments) > 3, f"the leader did not roll at segment.bytes=2048: {segments}"


def _incremental(broker, kind, name, *ops):
    from kio.schema.incremental_alter_configs.v1 import request as r

    from kcli.protocol import ApiKey

    response = _call(broker, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, r.IncrementalAlterConfigsRequest(
        validate_only=False, resources=(r.AlterConfigsResource(resource_type=kind, resource_name=name, configs=tuple(
            r.AlterableConfig(name=k, config_operation=op, value=v) for k, op, v in ops)),)))
    return [(x.error_code, x.error_message) for x in response.responses]


def _describe_result(broker, kind, name):
    from kio.schema.describe_configs.v4 import request as r

    from kcli.protocol import ApiKey

    return _call(broker, ApiKey.DESCRIBE_CONFIGS, 4, r.DescribeConfigsRequest(resources=(
        r.DescribeConfigsResource(resource_type=kind, resource_name=name, configuration_keys=None),))).results[0]


def _described(broker, kind, name):
    result = _describe_result(broker, kind, name)
    assert result.error_code == 0, result
    return {c.name: (c.value, c.config_source) for c in result.configs}


def test_describe_configs_right_after_alter_configs_on_another_broker(cluster):
    """Read-your-writes across brokers: a topic config altered through broker 0 is what broker 1 describes at
    once, before the /config/changes notification reaches it (Kafka's describeConfigs reads ZooKeeper)."""
    _create(cluster, "ryw", assignment=[[1]])
    b0, b1 = cluster.brokers[0], cluster.brokers[1]
    # a broker answers for a topic once its metadata has it (UNKNOWN_TOPIC_OR_PARTITION before, as Kafka's does)
    wait_for(lambda: _describe_result(b1, 2, "ryw").error_code == 0, 30, "broker 1 to know the new topic")
    for value in ("3600001", "3600002", "3600003"):
        assert _incremental(b0, 2, "ryw", ("retention.ms", 0, value)) == [(0, None)]
        assert _described(b1, 2, "ryw")["retention.ms"] == (value, 1)  # DYNAMIC_TOPIC_CONFIG


def test_dynamic_broker_configs_live_in_zookeeper(cluster):
    """IncrementalAlterConfigs on BROKER resources: broker 1's own config in /config/brokers/1, the cluster default
    ("" resource) in /config/brokers/<default>, which every broker applies from its change notification."""
    b1, b2 = cluster.brokers[1], cluster.brokers[2]
    assert _incremental(b1, 4, "1", ("background.threads", 0, "7")) == [(0, None)]
    assert cluster.read_json("/config/brokers/1") == {"version": 1, "config": {"background.threads": "7"}}
    assert _described(b1, 4, "1")["background.threads"] == ("7", 2)  # DYNAMIC_BROKER_CONFIG
    assert _incremental(b1, 4, "", ("log.cleaner.io.max.bytes.per.second", 0, "1.0E8")) == [(0, None)]
    assert cluster.read_json("/config/brokers/<default>")["config"] == {"log.cleaner.io.max.bytes.per.second": "1.0E8"}
    wait_for(lambda: _described(b2, 4, "2").get("log.cleaner.io.max.bytes.per.second") == ("1.0E8", 3), 30,
             "broker 2 to apply the new cluster default")  # DYNAMIC_DEFAULT_BROKER_CONFIG
    assert "background.threads" not in _described(b2, 4, "2")  # broker 1's own config stays broker 1's
    assert _incremental(b1, 4, "1", ("background.threads", 1, None)) == [(0, None)]
    assert _incremental(b1, 4, "", ("log.cleaner.io.max.bytes.per.second", 1, None)) == [(0, None)]
    wait_for(lambda: "log.cleaner.io.max.bytes.per.second" not in _described(b2, 4, "2"), 30, "the default removed")
