"""kctl topics list/describe/create/delete/alter-config and kctl offsets for-time against one real
`kctl broker run`, checked with confluent-kafka's AdminClient and Consumer.offsets_for_times (librdkafka)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from broker_support import BrokerProcess, free_port
from kcli.cli.app import app

T0 = 1_700_000_000_000
RECORDS = 30  # into orders, partition i % 3, timestamp T0 + i * 1000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("topics") / "kafka-logs",
                            ["auto.create.topics.enable=false", "num.partitions=2"])
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def admin(broker):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": broker.bootstrap})


def kctl(broker, *args: str, code: int = 0):
    result = CliRunner().invoke(app, ["topics", "-b", broker.bootstrap, *args] if args[0] != "offsets" else list(args),
                                env={"COLUMNS": "200"})
    assert result.exit_code == code, f"exit {result.exit_code}\n{result.output}"
    return result


def topic_configs(admin, topic: str) -> dict:
    from confluent_kafka.admin import ConfigResource, ResourceType

    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return future.result(30)


def test_create(broker, admin):
    out = kctl(broker, "create", "orders", "--partitions", "3", "--replication-factor", "1",
               "--config", "retention.ms=3600000", "--config", "cleanup.policy=[compact,delete]").stdout
    assert out == "Created topic orders.\n"
    kctl(broker, "create", "keyed", "--replica-assignment", "0,0")
    assert "is valid" in kctl(broker, "create", "ghost", "--partitions", "4", "--validate-only").stdout
    doc = json.loads(kctl(broker, "create", "defaults", "--json").stdout)
    assert doc["results"][0]["action"] == "created" and doc["results"][0]["partitions"] == 2  # num.partitions
    assert "already exists (--if-not-exists)" in kctl(broker, "create", "orders", "--if-not-exists").stdout
    again = kctl(broker, "create", "orders", code=1).output
    assert "create orders: CreateTopicsResponse v" in again and "TOPIC_ALREADY_EXISTS (36)" in again
    bad = kctl(broker, "create", "wide", "--replication-factor", "3", code=1).output
    assert "topics[wide].error_code = INVALID_REPLICATION_FACTOR (38)" in bad
    assert "expected key=value" in kctl(broker, "create", "x", "--config", "nope", code=2).output

    meta = admin.list_topics(timeout=30).topics
    assert len(meta["orders"].partitions) == 3 and len(meta["keyed"].partitions) == 2
    assert "ghost" not in meta and "wide" not in meta
    configs = topic_configs(admin, "orders")
    assert configs["retention.ms"].value == "3600000" and configs["cleanup.policy"].value == "compact,delete"


def test_list_and_describe(broker, admin):
    listed = kctl(broker, "list").stdout.split()
    assert listed == sorted(admin.list_topics(timeout=30).topics)
    assert json.loads(kctl(broker, "list", "--json").stdout) == {"topics": listed}
    out = kctl(broker, "describe", "orders").stdout.splitlines()
    head = out[0].split("\t")
    assert head[0] == "Topic: orders" and head[2:4] == ["PartitionCount: 3", "ReplicationFactor: 1"]
    assert head[4] == "Configs: cleanup.policy=compact,delete,retention.ms=3600000"
    meta = admin.list_topics("orders", timeout=30).topics["orders"]
    from confluent_kafka import TopicCollection

    [described] = admin.describe_topics(TopicCollection(["orders"])).values()
    # Kafka's Uuid.toString: 22 characters of URL-safe base64 (librdkafka prints the standard alphabet)
    theirs = str(described.result(30).topic_id).replace("+", "-").replace("/", "_")
    assert head[1] == f"TopicId: {theirs}"
    assert len(head[1].split()[1]) == 22
    for line, p in zip(out[1:], sorted(meta.partitions.values(), key=lambda p: p.id)):
        assert line == (f"\tTopic: orders\tPartition: {p.id}\tLeader: {p.leader}\tReplicas: "
                        f"{','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isrs))}")
    doc = json.loads(kctl(broker, "describe", "orders", "keyed", "--json").stdout)
    assert [t["topic"] for t in doc["topics"]] == ["orders", "keyed"] and doc["brokers"] == [0]
    assert [p["replicas"] for p in doc["topics"][1]["partitions"]] == [[0], [0]]
    sources = {c["name"]: c["source"] for c in doc["topics"][0]["configs"]}
    assert sources["retention.ms"] == "DYNAMIC_TOPIC_CONFIG" and sources["segment.bytes"] != "DYNAMIC_TOPIC_CONFIG"
    assert kctl(broker, "describe", "--under-replicated-partitions").stdout == ""
    assert kctl(broker, "describe", "--unavailable-partitions").stdout == ""
    assert kctl(broker, "describe", "orders", "--at-min-isr-partitions").stdout.count("\tPartition: ") == 3
    missing = kctl(broker, "describe", "orders", "nope", code=1)
    assert "nope: MetadataResponse v" in missing.output and "UNKNOWN_TOPIC_OR_PARTITION (3)" in missing.output


def test_alter_config(broker, admin):
    out = kctl(broker, "alter-config", "orders", "--add-config", "segment.ms=600000",
               "--delete-config", "retention.ms").stdout
    assert out == "Updated the configs of topic orders.\n"
    configs = topic_configs(admin, "orders")
    assert configs["segment.ms"].value == "600000" and configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "compact,delete"  # untouched
    # AlterConfigs replaces the whole set: the other overrides are read and written back
    kctl(broker, "alter-config", "orders", "--add-config", "max.message.bytes=200000", "--use-alter-configs")
    configs = topic_configs(admin, "orders")
    assert configs["max.message.bytes"].value == "200000" and configs["segment.ms"].value == "600000"
    doc = json.loads(kctl(broker, "alter-config", "orders", "--add-config", "segment.ms=1", "--validate-only",
                          "--json").stdout)
    assert doc["results"][0]["action"] == "validated" and topic_configs(admin, "orders")["segment.ms"].value == "600000"
    bad = kctl(broker, "alter-config", "orders", "nope", "--add-config", "no.such.key=1", code=1).output
    assert "responses[orders].error_code = INVALID_CONFIG (40)" in bad and "no.such.key" in bad
    assert "UNKNOWN_TOPIC_OR_PARTITION (3)" in bad
    kctl(broker, "alter-config", "orders", code=2)


def test_offsets_for_time_against_librdkafka(broker, tmp_path):
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": broker.bootstrap})
    failed = []
    for i in range(RECORDS):  # orders is compacted (cleanup.policy=compact,delete): records need keys
        producer.produce("orders", key=b"k%d" % i, value=b"v%d" % i, partition=i % 3, timestamp=T0 + i * 1000,
                         on_delivery=lambda err, msg: err is not None and failed.append(err))
    assert producer.flush(30) == 0 and not failed
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "for-time"})
    try:
        for ts in (T0 - 1, T0, T0 + 4500, T0 + 17_000, T0 + (RECORDS - 1) * 1000, T0 + RECORDS * 1000):
            doc = json.loads(kctl(broker, "offsets", "for-time", str(ts), "-b", broker.bootstrap, "orders",
                                  "--json").stdout)
            ours = {o["partition"]: o for o in doc["offsets"]}
            theirs = consumer.offsets_for_times([TopicPartition("orders", p, ts) for p in range(3)], timeout=30)
            for tp in theirs:
                assert ours[tp.partition]["offset"] == tp.offset, (ts, tp)  # -1 when no record is that late
                assert ours[tp.partition]["log_end_offset"] == RECORDS // 3
                if tp.offset >= 0:
                    assert ours[tp.partition]["timestamp"] >= ts
                else:
                    assert ours[tp.partition]["seek_offset"] == RECORDS // 3
            # offline, from the running broker's log dir: the same answers
            offline = json.loads(kctl(broker, "offsets", "for-time", str(ts), str(broker.log_dir), "--topic", "orders",
                                      "--json").stdout)
            assert [(o["partition"], o["offset"], o["timestamp"]) for o in offline["offsets"]] == [
                (o["partition"], o["offset"], o["timestamp"]) for o in doc["offsets"]]
        for word, pick in (("earliest", 0), ("latest", 1)):
            doc = json.loads(kctl(broker, "offsets", "for-time", word, "-b", broker.bootstrap, "orders:1",
                                  "--json").stdout)
            assert [o["offset"] for o in doc["offsets"]] == [
                consumer.get_watermark_offsets(TopicPartition("orders", 1), timeout=30)[pick]]
    finally:
        consumer.close()
    lines = kctl(broker, "offsets", "for-time", str(T0 + 4500), "-b", broker.bootstrap, "orders", "keyed").stdout
    assert lines.splitlines() == ["keyed:0:-1", "keyed:1:-1", "orders:0:2", "orders:1:2", "orders:2:1"]  # i = 6, 7, 5
    text = kctl(broker, "offsets", "for-time", str(T0 + 4500), "-b", broker.bootstrap, "orders:2", "keyed",
                "--table").stdout
    assert "orders  2          1       2023-11-14T22:13:25.000Z  10       1" in text  # i = 5
    assert "offset -1: no record" in text  # keyed is empty
    missing = kctl(broker, "offsets", "for-time", "now", "-b", broker.bootstrap, "nope", "orders:9", code=1).output
    assert "UNKNOWN_TOPIC_OR_PARTITION (3)" in missing and "no partition 9" in missing


def test_offline_rollup_of_the_brokers_log_dir(broker):
    out = kctl(broker, "offsets", "for-time", "latest", str(broker.log_dir), "--json").stdout
    assert {(o["topic"], o["partition"]): o["offset"] for o in json.loads(out)["offsets"]}[("orders", 0)] == 10
    result = CliRunner().invoke(app, ["topics", str(broker.log_dir), "--records"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("orders"))
    assert row.split()[1:2] == ["3"] and row.split()[4] == str(RECORDS)
    # kctl broker keeps its topic overrides in the log dir: the rollup shows them
    assert "config orders: cleanup.policy=compact,delete, max.message.bytes=200000, segment.ms=600000" in result.stdout


def test_log_dirs_describe_against_the_files_and_kafka_python(broker):
    """kctl log-dirs describe (DescribeLogDirs to each broker): sizes are the segment files' sizes in the log dir,
    and kafka-python's describe_log_dirs reads the same answer from the broker."""
    from kafka.admin import KafkaAdminClient

    result = CliRunner().invoke(app, ["log-dirs", "describe", "-b", broker.bootstrap, "--topic-list", "orders",
                                      "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    [entry] = doc["brokers"]
    [log_dir] = entry["logDirs"]
    assert log_dir["logDir"] == str(broker.log_dir.resolve()) and log_dir["error"] is None
    assert log_dir["totalBytes"] >= log_dir["usableBytes"] > 0
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    on_disk = {f"orders-{i}": sum(f.stat().st_size for f in (broker.log_dir / f"orders-{i}").glob("*.log"))
               for i in range(3)}
    assert sizes == on_disk and all(on_disk.values())
    assert {p["offsetLag"] for p in log_dir["partitions"]} == {0}

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30_000)
    try:
        answers = admin.describe_log_dirs()
    finally:
        admin.close()
    text = str(answers)
    assert str(broker.log_dir.resolve()) in text and "orders" in text

    table = CliRunner().invoke(app, ["log-dirs", "-b", broker.bootstrap, "describe", "--partitions"])
    assert table.exit_code == 0, table.output
    assert f"broker 0\t{broker.log_dir.resolve()}" in table.stdout and "orders-1\tsize " in table.stdout
    bad = CliRunner().invoke(app, ["log-dirs", "describe", "-b", broker.bootstrap, "--broker-list", "x"])
    assert bad.exit_code == 2 and "--broker-list" in bad.output
    missing = CliRunner().invoke(app, ["log-dirs", "describe", "-b", broker.bootstrap, "--broker-list", "7"])
    assert missing.exit_code == 1 and "broker 7 is not in the cluster's metadata" in missing.stdout


def test_delete(broker, admin):
    from kcli.client import KafkaClient

    with KafkaClient(broker.bootstrap) as client:
        assert set(client.offset_commit("g", {("orders", 0): 1}).values()) == {0}  # creates __consumer_offsets
    refused = kctl(broker, "delete", "__consumer_offsets", code=1).output
    assert "internal topic" in refused and "--force" in refused
    assert kctl(broker, "delete", "keyed", "defaults").stdout == "Deleted topic keyed.\nDeleted topic defaults.\n"
    assert "does not exist (--if-exists)" in kctl(broker, "delete", "keyed", "--if-exists").stdout
    assert "UNKNOWN_TOPIC_OR_PARTITION (3)" in kctl(broker, "delete", "keyed", code=1).output
    doc = json.loads(kctl(broker, "delete", "orders", "--json").stdout)
    assert doc == {"results": [{"topic": "orders", "action": "deleted", "ok": True, "error": None}]}
    remaining = admin.list_topics(timeout=30).topics
    assert not {"orders", "keyed", "defaults"} & set(remaining) and "__consumer_offsets" in remaining


def test_no_broker_and_no_bootstrap():
    result = CliRunner().invoke(app, ["topics", "list"], env={"KCTL_BOOTSTRAP_SERVER": ""})
    assert result.exit_code == 2 and "no Kafka given" in result.output
    result = CliRunner().invoke(app, ["topics", "-b", f"127.0.0.1:{free_port()}", "list"])
    assert result.exit_code == 3 and "cannot connect" in result.output
