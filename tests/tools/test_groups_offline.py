"""`kctl groups list|describe|export --log-dir`: consumer groups read from a stopped broker's __consumer_offsets and
segments. A real `kctl broker run` with confluent-kafka consumers writes the log dir, its online describe is the
reference; real Kafka log dirs (Kafka 2.x ZooKeeper mode, Confluent 7.6 KRaft) check the decoding."""

from __future__ import annotations

import json
import time

import pytest

from broker_support import BrokerProcess, free_port
from kcli.client import KafkaClient
from kcli.records.consumer_offsets import partition_for_group
from kcli.records.groups import MemberInfo, lag_rows
from kcli.tools.groups import read_groups

TOPIC = "events"  # 2 partitions x 8 records
OFFSETS_PARTITIONS = 5


def kctl(*args: str, check: int | None = 0):
    from typer.testing import CliRunner

    from kcli.cli.app import app

    result = CliRunner().invoke(app, ["groups", *args], env={"KCTL_BOOTSTRAP_SERVER": None, "COLUMNS": "100"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if check is not None:
        assert result.exit_code == check, f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """The log dir of a stopped broker: group "live" stopped with its member in the group (the stored metadata
    keeps it), group "done" whose consumer left, group "standalone" with only an admin commit, group "gone"
    deleted. Yields (log dir, the online describe of live and done, taken just before the stop)."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("groups-offline") / "kafka-logs",
                            ["group.initial.rebalance.delay.ms=0", f"offsets.topic.num.partitions={OFFSETS_PARTITIONS}"])
    process.start()
    consumers = []
    try:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        for future in admin.create_topics([NewTopic(TOPIC, 2, 1)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": process.bootstrap})
        for i in range(16):
            producer.produce(TOPIC, value=b"e%d" % i, partition=i % 2)
        assert producer.flush(30) == 0
        for group, offsets in (("live", {0: 2, 1: 8}), ("done", {0: 8})):
            consumer = Consumer({"bootstrap.servers": process.bootstrap, "group.id": group, "client.id": f"{group}-c",
                                 "enable.auto.commit": False, "auto.offset.reset": "earliest"})
            consumers.append(consumer)
            consumer.subscribe([TOPIC])
            deadline = time.monotonic() + 30
            while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
                consumer.poll(0.2)
            consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
        consumers.pop().close()  # "done" leaves: Empty
        with KafkaClient(process.bootstrap) as client:
            assert set(client.offset_commit("standalone", {(TOPIC, 1): 5}).values()) == {0}
            assert set(client.offset_commit("gone", {(TOPIC, 1): 1}).values()) == {0}
            assert client.delete_groups(["gone"]) == {"gone": 0}
        online = {g["group"]: g for g in json.loads(kctl("describe", "live", "done", "-b", process.bootstrap,
                                                         "--json").stdout)["groups"]}
        process.stop()
        yield process.log_dir, online
    finally:
        if process.proc is not None:
            process.stop()
        for consumer in consumers:
            consumer.close()


def _rows(doc: dict) -> list[tuple]:
    return [(p["topic"], p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"]) for p in doc["partitions"]]


def test_describe_offline_matches_the_online_describe(stopped):
    log_dir, online = stopped
    doc = json.loads(kctl("describe", "live", "done", "standalone", "--log-dir", str(log_dir), "--json").stdout)
    found = {g["group"]: g for g in doc["groups"]}
    for group in ("live", "done"):
        assert _rows(found[group]) == _rows(online[group]), group
        assert found[group]["offsets_topic_partition"] == online[group]["offsets_topic_partition"] == \
            partition_for_group(group, OFFSETS_PARTITIONS)
        assert found[group]["offsets_topic_partitions"] == OFFSETS_PARTITIONS
    assert _rows(found["live"]) == [(TOPIC, 0, 2, 8, 6), (TOPIC, 1, 8, 8, 0)]
    live = found["live"]
    assert (live["state"], live["protocol_type"], live["protocol"], live["source"]) == (
        "Stable", "consumer", "range", "log-dir")
    assert [(m["member_id"], m["client_id"]) for m in live["members"]] == [
        (m["member_id"], m["client_id"]) for m in online["live"]["members"]]
    assert live["members"][0]["assignment"] == [{"topic": TOPIC, "partition": p} for p in range(2)]
    assert found["done"]["state"] == "Empty" and found["done"]["members"] == []
    assert found["standalone"]["state"] == "Empty" and _rows(found["standalone"]) == [(TOPIC, 1, 5, 8, 3)]

    text = kctl("describe", "live", "--log-dir", str(log_dir), "--verbose").stdout
    assert "group live: Stable, consumer/range, 1 members, total lag 6" in text and "offline" in text
    assert "members as stored at generation" in text


def test_list_export_and_missing_groups_offline(stopped):
    log_dir, _ = stopped
    listed = json.loads(kctl("list", "--log-dir", str(log_dir), "--json").stdout)["groups"]
    assert {g["group"]: g["state"] for g in listed} == {"live": "Stable", "done": "Empty", "standalone": "Empty"}
    assert [g["group"] for g in json.loads(kctl("list", "--log-dir", str(log_dir), "--state", "stable",
                                                "--json").stdout)["groups"]] == ["live"]
    assert sorted(kctl("list", "--log-dir", str(log_dir)).stdout.split()) == ["done", "live", "standalone"]
    assert "standalone" in kctl("list", "--log-dir", str(log_dir), "--table").stdout
    assert kctl("export", "live", "--log-dir", str(log_dir)).stdout == f"{TOPIC},0,2\n{TOPIC},1,8\n"
    missing = kctl("describe", "gone", "--log-dir", str(log_dir), check=1)
    assert "consumer group 'gone' does not exist" in missing.stderr
    assert "give --bootstrap-server or --log-dir, not both" in kctl(
        "describe", "live", "--log-dir", str(log_dir), "-b", "127.0.0.1:1", check=2).stderr
    assert kctl("describe", "x", "--log-dir", str(log_dir / "nope"), check=3).stderr.startswith("kctl: ")


def test_real_kafka_log_dirs(fixtures_dir):
    zk_mode = read_groups(fixtures_dir / "VolodymyrZee__kafka")
    assert zk_mode.offsets_topic_partitions == 50  # from the checkpoints: only 6 directories were kept
    assert sorted(zk_mode.groups) == ["my-first-application", "my-firstd-application", "my-second-application"]
    for group in zk_mode.groups.values():
        assert group.state == "Empty" and group.protocol_type == "consumer"
        assert group.offsets_topic_partition == partition_for_group(group.group, 50)
        assert [(p.topic, p.partition, p.committed_offset, p.log_end_offset, p.lag) for p in group.partitions] == [
            ("first_topic", 0, 11, 11, 0), ("first_topic", 1, 12, 12, 0), ("first_topic", 2, 18, 18, 0)]

    kraft = read_groups(fixtures_dir / "rjmfernandes__flink-on-prem" / "data",
                        groups=["_confluent-controlcenter-7-6-0-1-command"])
    (streams,) = kraft.groups.values()
    assert (streams.state, streams.protocol_type, streams.protocol, streams.offsets_topic_partition) == (
        "Stable", "consumer", "stream", 28)
    (member,) = streams.members
    assert member.client_host == "/172.31.0.7" and member.assignment == (("_confluent-command", 0),)
    assert [(p.committed_offset, p.log_end_offset, p.lag) for p in streams.partitions] == [(2, 2, 0)]
    text = kctl("describe", "--all-groups", "--log-dir", str(fixtures_dir / "rjmfernandes__flink-on-prem" / "data"),
                "--members", "--verbose").stdout
    assert "_confluent-command-0" in text


def test_lag_rows_members_without_partitions_and_commits_without_members():
    busy = MemberInfo("m1", None, "c1", "/h", (("t", 0),))
    idle = MemberInfo("m2", None, "c2", "/h", ())
    rows = lag_rows([busy, idle], {("t", 1): 4}, {("t", 0): (0, 10), ("t", 1): (2, 9)})
    assert [(r.topic, r.partition, r.committed_offset, r.lag, r.member_id) for r in rows] == [
        ("t", 0, None, None, "m1"), ("t", 1, 4, 5, None), (None, None, None, None, "m2")]


def test_parsers():
    from kcli.client.groups import parse_duration, parse_topic_partitions
    from kcli.errors import KcliError

    assert parse_duration("PT1H30M") == 5_400_000 and parse_duration("P1DT0.5S") == 86_400_500
    assert parse_duration("-PT10S") == -10_000
    with pytest.raises(KcliError, match="ISO-8601"):
        parse_duration("1h")
    assert parse_topic_partitions("t") == ("t", None) and parse_topic_partitions("t:2,0") == ("t", (0, 2))
    with pytest.raises(KcliError, match="integers"):
        parse_topic_partitions("t:x")
