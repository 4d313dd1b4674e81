"""`kctl offsets migrate/export/import` with a real ZooKeeper (Kafka's layout, one chroot per test), real
`kctl broker run` processes, and confluent-kafka / kafka-python consumers resuming from the migrated offsets."""

from __future__ import annotations

import json
import shutil
import os
import subprocess
import sys
import time
import uuid

import pytest
from kazoo.client import KazooClient

from broker_support import BrokerProcess, free_port
from kcli.client import KafkaClient
from kcli.records.consumer_offsets import decode_record, partition_for_group
from kcli.storage.segment import FileBatchReader

pytestmark = pytest.mark.zookeeper

ORDERS, PAYMENTS = "orders", "payments"  # 3 partitions x 10 records, 1 partition x 5 records


def kctl(*args: str, check: int | None = 0, subprocess_run: bool = False, env: dict | None = None):
    """`kctl offsets ...` in process (typer's runner: the same exit codes, stdout and stderr), or as a subprocess."""
    if subprocess_run:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KCTL_")}
        env["COLUMNS"] = "200"
        proc = subprocess.run([sys.executable, "-m", "kcli", "offsets", *args], capture_output=True, text=True,
                              env=env, timeout=120)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    else:
        from typer.testing import CliRunner

        from kcli.cli.app import app

        result = CliRunner().invoke(app, ["offsets", *args], env={"KCTL_ZOOKEEPER": None, "KCTL_BOOTSTRAP_SERVER": None,
                                                                  "KCTL_ZOOKEEPER_AUTH": None, "COLUMNS": "200",
                                                                  **(env or {})})
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        code, stdout, stderr = result.exit_code, result.stdout, result.stderr
    if check is not None:
        assert code == check, f"exit {code}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    return subprocess.CompletedProcess(args, code, stdout, stderr)


def as_json(*args: str, **kwargs) -> dict:
    return json.loads(kctl(*args, "--json", **kwargs).stdout)


def produce(bootstrap: str) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(ORDERS, 3, 1), NewTopic(PAYMENTS, 1, 1)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition in range(3):
        for i in range(10):
            producer.produce(ORDERS, key=b"k", value=b"o%d-%d" % (partition, i), partition=partition)
    for i in range(5):
        producer.produce(PAYMENTS, value=b"p%d" % i, partition=0)
    assert producer.flush(30) == 0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("broker") / "kafka-logs",
                            ["group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=false"])
    process.start()
    try:
        produce(process.bootstrap)
        yield process
    finally:
        if process.proc is not None:
            process.stop()


class Zk:
    """A fresh chroot seeded with Kafka's layout: brokers, topics, old consumers with ids/owners/offsets."""

    def __init__(self, server, chroot: str | None = None) -> None:
        self.chroot = chroot or f"/t-{uuid.uuid4().hex}"
        self.connect = server.connect + self.chroot
        self.client = KazooClient(hosts=server.connect, timeout=10)
        self.client.start(timeout=10)
        self.put("/brokers/ids/0", json.dumps({"version": 5, "host": "old", "port": 9092, "jmx_port": -1,
                                                "timestamp": "1700000000000", "endpoints": ["PLAINTEXT://old:9092"],
                                                "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
                                                "features": {}}).encode())
        for topic, count in ((ORDERS, 3), (PAYMENTS, 1)):
            self.put(f"/brokers/topics/{topic}", json.dumps({"version": 1, "partitions": {
                str(p): [0] for p in range(count)}}).encode())

    def put(self, path: str, data: bytes = b"", **kwargs) -> None:
        self.client.create(self.chroot + path, data, makepath=True, **kwargs)

    def offsets(self, group: str, offsets: dict[tuple[str, int], int | bytes]) -> None:
        for (topic, partition), offset in offsets.items():
            data = offset if isinstance(offset, bytes) else str(offset).encode()
            self.put(f"/consumers/{group}/offsets/{topic}/{partition}", data)

    def member(self, group: str, consumer_id: str, subscription: dict[str, int]) -> None:
        self.put(f"/consumers/{group}/ids/{consumer_id}", json.dumps({
            "version": 1, "subscription": subscription, "pattern": "static", "timestamp": "1700000002000"}).encode())

    def get(self, path: str) -> bytes:
        return self.client.get(self.chroot + path)[0]

    def close(self) -> None:
        self.client.stop()
        self.client.close()


@pytest.fixture
def zk(zookeeper):
    seeded = Zk(zookeeper)
    yield seeded
    seeded.close()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    with KafkaClient(bootstrap) as client:
        return client.offset_fetch(group)


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    with KafkaClient(bootstrap) as client:
        assert set(client.offset_commit(group, offsets).values()) == {0}


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:6]}"


# -- plan, execute, verify, re-run --------------------------------------------------------------------------
def test_dry_run_execute_verify_rerun_and_clients_resume(broker, zk, tmp_path):
    group, other = unique("app"), unique("kp")
    zk.offsets(group, {(ORDERS, 0): 3, (ORDERS, 1): 5, (ORDERS, 2): 10})
    zk.offsets(other, {(PAYMENTS, 0): 2})
    args = ("migrate", "--zookeeper", zk.connect, "--bootstrap-server", broker.bootstrap, "--group", group,
            "--group", other)

    plan = as_json(*args)
    assert plan["executed"] is False and plan["plan"]["ok"] is True
    by_group = {g["group"]: g for g in plan["plan"]["groups"]}
    assert by_group[group]["status"] == "commit"
    assert by_group[group]["partitions"][0] == {
        "topic": ORDERS, "partition": 0, "source_offset": 3, "target_offset": None, "log_start_offset": 0,
        "log_end_offset": 10, "planned_offset": 3, "action": "commit", "reason": None}
    assert plan["plan"]["summary"]["partitions_to_write"] == 4
    assert committed(broker.bootstrap, group) == {}  # a dry run writes nothing
    table = kctl(*args).stdout
    assert "dry run" in table and "commit" in table and group in table

    backup = tmp_path / "backup.csv"
    result = as_json(*args, "--execute", "--backup", str(backup))
    assert result["ok"] and result["verified"] and result["differences"] == []
    assert sorted(result["committed_groups"]) == sorted([group, other]) and result["partitions_written"] == 4
    assert result["backup"] is None and not backup.exists()  # nothing was committed before: no empty CSV
    assert committed(broker.bootstrap, group) == {(ORDERS, 0): 3, (ORDERS, 1): 5, (ORDERS, 2): 10}
    assert committed(broker.bootstrap, other) == {(PAYMENTS, 0): 2}

    again = as_json(*args, "--execute", "--backup", str(tmp_path / "again.csv"))
    assert [g["status"] for g in again["plan"]["groups"]] == ["unchanged", "unchanged"]
    assert again["committed_groups"] == [] and again["backup"] is None and again["ok"]
    assert not (tmp_path / "again.csv").exists()
    assert "unchanged" in kctl(*args).stdout

    # real clients in the group resume exactly there
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    try:
        positions = consumer.committed([TopicPartition(ORDERS, p) for p in range(3)], timeout=30)
        assert [tp.offset for tp in positions] == [3, 5, 10]
        consumer.subscribe([ORDERS])
        first: dict[int, int] = {}
        deadline = time.monotonic() + 30
        while len(first) < 2 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                first.setdefault(msg.partition(), msg.offset())
        assert first == {0: 3, 1: 5}
    finally:
        consumer.close()

    from kafka import KafkaConsumer

    kp = KafkaConsumer(PAYMENTS, bootstrap_servers=broker.bootstrap, group_id=other, enable_auto_commit=False,
                       auto_offset_reset="earliest", consumer_timeout_ms=20000)
    try:
        message = next(iter(kp))
        assert (message.offset, message.value) == (2, b"p2")
    finally:
        kp.close()


def test_all_groups_and_topic_filter(broker, zk):
    a, b = unique("all-a"), unique("all-b")
    zk.offsets(a, {(ORDERS, 0): 1, (PAYMENTS, 0): 1})
    zk.offsets(b, {(PAYMENTS, 0): 4})
    plan = as_json("migrate", "-z", zk.connect, "-b", broker.bootstrap, "--topic", PAYMENTS)["plan"]
    assert {g["group"]: [(p["topic"], p["source_offset"]) for p in g["partitions"]] for g in plan["groups"]} == {
        a: [(PAYMENTS, 1)], b: [(PAYMENTS, 4)]}


# -- backup and roll-back -------------------------------------------------------------------------------------
def test_backup_csv_and_rollback(broker, zk, tmp_path):
    group = unique("rb")
    commit(broker.bootstrap, group, {(ORDERS, 0): 1})
    zk.offsets(group, {(ORDERS, 0): 4, (ORDERS, 1): 6})
    backup = tmp_path / "b.csv"
    result = as_json("migrate", "-z", zk.connect, "-b", broker.bootstrap, "-g", group, "--execute",
                     "--backup", str(backup))
    assert result["ok"] and result["partitions_without_previous_offset"] == 1
    assert backup.read_text() == "orders,0,1\n"  # kafka-consumer-groups --from-file's single-group layout
    assert committed(broker.bootstrap, group) == {(ORDERS, 0): 4, (ORDERS, 1): 6}

    usage = kctl("migrate", "-b", broker.bootstrap, "--rollback", str(backup), "--execute", check=1)
    assert "--group" in usage.stderr
    rolled = as_json("migrate", "-b", broker.bootstrap, "--rollback", str(backup), "-g", group, "--execute",
                     "--backup", str(tmp_path / "undo.csv"))
    assert rolled["ok"] and rolled["plan"]["source"] == "file"
    assert committed(broker.bootstrap, group) == {(ORDERS, 0): 1, (ORDERS, 1): 6}
    assert (tmp_path / "undo.csv").read_text() == "orders,0,4\n"

    # several groups: group,topic,partition,offset
    g1, g2 = unique("m1"), unique("m2")
    commit(broker.bootstrap, g1, {(ORDERS, 2): 2})
    commit(broker.bootstrap, g2, {(PAYMENTS, 0): 1})
    zk.offsets(g1, {(ORDERS, 2): 7})
    zk.offsets(g2, {(PAYMENTS, 0): 3})
    multi = tmp_path / "multi.csv"
    as_json("migrate", "-z", zk.connect, "-b", broker.bootstrap, "-g", g1, "-g", g2, "--execute", "--backup",
            str(multi))
    assert sorted(multi.read_text().splitlines()) == sorted([f"{g1},orders,2,2", f"{g2},payments,0,1"])
    as_json("migrate", "-b", broker.bootstrap, "--rollback", str(multi), "--execute", "--backup",
            str(tmp_path / "u2.csv"))
    assert committed(broker.bootstrap, g1) == {(ORDERS, 2): 2} and committed(broker.bootstrap, g2) == {(PAYMENTS, 0): 1}


# -- refusals -----------------------------------------------------------------------------------------------
def test_out_of_range_refused_then_clamped(broker, zk, tmp_path):
    group = unique("oor")
    zk.offsets(group, {(ORDERS, 0): 50, (ORDERS, 1): 2})
    args = ("migrate", "-z", zk.connect, "-b", broker.bootstrap, "-g", group)
    refused = kctl(*args, "--execute", "--json", "--backup", str(tmp_path / "x.csv"), check=1)
    result = json.loads(refused.stdout)
    g = result["plan"]["groups"][0]
    assert g["status"] == "refused" and g["partitions"][0]["action"] == "refuse-out-of-range"
    assert "outside the log [0, 10]" in g["refusals"][0]
    assert result["committed_groups"] == [] and committed(broker.bootstrap, group) == {}  # not even partition 1
    clamped = as_json(*args, "--clamp", "--execute", "--backup", str(tmp_path / "y.csv"))
    assert clamped["ok"] and clamped["plan"]["groups"][0]["partitions"][0]["action"] == "clamp"
    assert committed(broker.bootstrap, group) == {(ORDERS, 0): 10, (ORDERS, 1): 2}


def test_unknown_topic_and_partition_refused(broker, zk):
    group = unique("unk")
    zk.offsets(group, {("gone", 0): 1, (PAYMENTS, 3): 1})
    proc = kctl("migrate", "-z", zk.connect, "-b", broker.bootstrap, "-g", group, check=1)
    assert "topic gone does not exist" in proc.stdout and "payments has 1 partitions" in proc.stdout
    actions = [p["action"] for p in as_json("migrate", "-z", zk.connect, "-b", broker.bootstrap, "-g", group,
                                            check=1)["plan"]["groups"][0]["partitions"]]
    assert actions == ["refuse-unknown-topic", "refuse-unknown-partition"]


def test_live_members_refused_unless_forced(broker, zk, tmp_path):
    group = unique("live")
    zk.offsets(group, {(ORDERS, 0): 2})
    zk.member(group, f"{group}_host-1700000000000-0a1b2c3d", {ORDERS: 1})
    args = ("migrate", "-z", zk.connect, "-b", broker.bootstrap, "-g", group)
    plan = as_json(*args, check=1)["plan"]["groups"][0]
    assert plan["status"] == "refused" and "registered in ZooKeeper" in plan["live"][0]
    assert f"{zk.chroot}/consumers/{group}/ids" in plan["live"][0]
    forced = as_json(*args, "--force", "--execute", "--backup", str(tmp_path / "f.csv"))
    assert forced["ok"] and committed(broker.bootstrap, group) == {(ORDERS, 0): 2}

    # a live group in Kafka: a confluent-kafka member holds the group
    from confluent_kafka import Consumer

    kafka_group = unique("klive")
    zk.offsets(kafka_group, {(PAYMENTS, 0): 1})
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": kafka_group, "enable.auto.commit": False,
                         "session.timeout.ms": 6000})
    try:
        consumer.subscribe([PAYMENTS])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment()
        plan = as_json("migrate", "-z", zk.connect, "-b", broker.bootstrap, "-g", kafka_group,
                       check=1)["plan"]["groups"][0]
        assert plan["status"] == "refused" and "Kafka group state Stable with 1 member" in plan["live"][0]
    finally:
        consumer.close()


# -- the other way: Kafka -> ZooKeeper -------------------------------------------------------------------------
def test_to_zookeeper(broker, zk, tmp_path):
    group = unique("back")
    zk.offsets(group, {(ORDERS, 0): 1})
    commit(broker.bootstrap, group, {(ORDERS, 0): 8, (ORDERS, 1): 9})
    args = ("migrate", "--to-zookeeper", "-z", zk.connect, "-b", broker.bootstrap, "-g", group)
    plan = as_json(*args)["plan"]
    assert plan["source"] == "kafka" and plan["target"] == "zookeeper"
    assert [(p["partition"], p["target_offset"], p["planned_offset"]) for p in plan["groups"][0]["partitions"]] == [
        (0, 1, 8), (1, None, 9)]
    backup = tmp_path / "zk.csv"
    result = as_json(*args, "--execute", "--backup", str(backup))
    assert result["ok"] and result["verified"]
    assert zk.get(f"/consumers/{group}/offsets/orders/0") == b"8" and zk.get(f"/consumers/{group}/offsets/orders/1") == b"9"
    assert backup.read_text() == "orders,0,1\n"
    # without --group: the groups under /consumers, not every group Kafka knows
    commit(broker.bootstrap, unique("kafka-only"), {(ORDERS, 0): 1})
    everything = as_json("migrate", "--to-zookeeper", "-z", zk.connect, "-b", broker.bootstrap)["plan"]
    assert [g["group"] for g in everything["groups"]] == [group] and everything["groups"][0]["status"] == "unchanged"


# -- bad input ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data", [b"abc", b"-3", b""], ids=["non-numeric", "negative", "empty"])
def test_malformed_offset_znode(broker, zk, data):
    group = unique("bad")
    zk.offsets(group, {(ORDERS, 0): 2, (ORDERS, 1): data})
    proc = kctl("migrate", "-z", zk.connect, "-b", broker.bootstrap, "-g", group, "--execute", check=1,
                subprocess_run=data == b"abc")
    assert f"{zk.chroot}/consumers/{group}/offsets/orders/1" in proc.stderr and "nothing was written" in proc.stderr
    assert committed(broker.bootstrap, group) == {}


def test_unreachable_and_usage(broker, zk):
    proc = kctl("migrate", "-z", f"127.0.0.1:{free_port()}", "-b", broker.bootstrap, check=3, subprocess_run=True)
    assert "unreachable" in proc.stderr or "cannot connect" in proc.stderr
    proc = kctl("migrate", "-z", zk.connect, "-b", f"127.0.0.1:{free_port()}", check=3)
    assert "cannot connect to the Kafka broker" in proc.stderr
    assert "--bootstrap-server" in kctl("migrate", "-z", zk.connect, check=2).stderr
    assert "KCTL_ZOOKEEPER" in kctl("migrate", "-b", broker.bootstrap, check=2).stderr


def test_zookeeper_stopped_mid_run(broker, tmp_path):
    """A separate ZooKeeper server, stopped while offsets are read, then while a roll-back writes to it."""
    from kcli.client import KafkaOffsetStore
    from kcli.tools.offsets import apply_plan, plan_transfer
    from kcli.zk.offsets import ZkOffsetStore
    from kcli.zk.registry import ZooKeeperConnectionError
    from zookeeper_support import ZooKeeperServer

    server = ZooKeeperServer(tmp_path / "zk")
    server.start()
    try:
        zk = Zk(server, "/kafka")
        groups = [f"mid-{i:02d}" for i in range(12)]
        for g in groups:
            zk.offsets(g, {(ORDERS, 0): 1})
            commit(broker.bootstrap, g, {(ORDERS, 0): 5})
        zk.close()

        # reading: nothing is committed, the error names ZooKeeper and a znode
        source = ZkOffsetStore(server.connect + "/kafka", timeout=3)
        kafka = KafkaOffsetStore(KafkaClient(broker.bootstrap))
        plan = plan_transfer(kafka, source, kafka, groups=groups, live_checks=[source])
        assert plan.count("commit") == 12

        def stop_after_first(group: str) -> None:
            if server.proc is not None:
                server.stop()

        result = apply_plan(plan, source, backup=tmp_path / "mid.csv", on_group=stop_after_first)
        assert result.committed == [groups[0]] and result.failed_group == groups[1]
        assert isinstance(result.exception, ZooKeeperConnectionError)
        assert f"/kafka/consumers/{groups[1]}/offsets/orders" in result.error
        assert result.not_attempted == groups[2:]
        assert not result.ok and result.to_json()["committed_groups"] == [groups[0]]
        source.close()

        with pytest.raises(ZooKeeperConnectionError):
            ZkOffsetStore(server.connect + "/kafka", timeout=3).read(groups)
        kafka.close()
    finally:
        server.stop()


# -- export / import ------------------------------------------------------------------------------------------------
def test_export_and_import(broker, zk, tmp_path):
    g1, g2 = unique("ex1"), unique("ex2")
    zk.offsets(g1, {(ORDERS, 0): 2, (ORDERS, 2): 3})
    zk.offsets(g2, {(PAYMENTS, 0): 4})
    single = kctl("export", "--from", "zookeeper", "-z", zk.connect, "-g", g1).stdout
    assert single == "orders,0,2\norders,2,3\n"
    out = tmp_path / "both.json"
    kctl("export", "--from", "zookeeper", "-z", zk.connect, "-g", g1, "-g", g2, "--format", "json", "-o", str(out))
    document = json.loads(out.read_text())
    assert document["source"] == "zookeeper"
    assert {g["group"]: g["offsets"] for g in document["groups"]}[g2] == [{"topic": PAYMENTS, "partition": 0,
                                                                         "offset": 4}]
    plan = as_json("import", str(out), "--to", "kafka", "-b", broker.bootstrap)
    assert plan["executed"] is False and plan["plan"]["source"] == "file"
    result = as_json("import", str(out), "--to", "kafka", "-b", broker.bootstrap, "--execute", "--backup",
                     str(tmp_path / "imp.csv"))
    assert result["ok"] and committed(broker.bootstrap, g2) == {(PAYMENTS, 0): 4}
    exported = kctl("export", "--from", "kafka", "-b", broker.bootstrap, "-g", g1, "-g", g2).stdout
    assert sorted(exported.splitlines()) == sorted([f"{g1},orders,0,2", f"{g1},orders,2,3", f"{g2},payments,0,4"])

    csv_file = tmp_path / "one.csv"
    csv_file.write_text("orders,1,7\n")
    g3 = unique("imp")
    as_json("import", str(csv_file), "--to", "zookeeper", "-z", zk.connect, "-b", broker.bootstrap, "-g", g3,
            "--execute", "--backup", str(tmp_path / "z.csv"))
    assert zk.get(f"/consumers/{g3}/offsets/orders/1") == b"7"
    bad = tmp_path / "bad.csv"
    bad.write_text("orders,x,7\n")
    assert "line 1" in kctl("import", str(bad), "-b", broker.bootstrap, "-g", g3, check=1).stderr


# -- offline: a stopped broker's log dir -----------------------------------------------------------------------
@pytest.mark.parametrize("group,partition", [("my-group", 12), ("test-group", 12),
                                             ("console-consumer-12345", 6), ("polygenelubricants", 0),
                                             ("", 0), ("\U0001F600", 49)])  # a non-BMP character: two UTF-16 units
def test_java_hashcode_partition(group, partition):
    assert partition_for_group(group, 50) == partition


@pytest.mark.broker_process
def test_offline_log_dir_then_broker_serves(zk, tmp_path):
    log_dir = tmp_path / "offline-logs"
    b = BrokerProcess(free_port(), log_dir, ["group.initial.rebalance.delay.ms=0"])
    b.start()
    try:
        produce(b.bootstrap)
        locked = kctl("migrate", "-z", zk.connect, "--log-dir", str(log_dir), "--offsets-partitions", "50",
                      "--execute", check=1)
        assert ".lock" in locked.stderr
    finally:
        assert b.stop() == 0

    zk.offsets("polygenelubricants", {(ORDERS, 0): 4, (ORDERS, 1): 7})  # hashCode MIN_VALUE: partition 0
    zk.offsets("my-group", {(PAYMENTS, 0): 3})
    args = ("migrate", "-z", zk.connect, "--log-dir", str(log_dir))
    assert "--offsets-partitions" in kctl(*args, check=1).stderr  # no __consumer_offsets yet
    plan = as_json(*args, "--offsets-partitions", "50")["plan"]
    assert plan["target"] == "log-dir" and plan["ok"]
    result = as_json(*args, "--execute", "--backup", str(tmp_path / "off.csv"))
    assert result["ok"] and result["verified"] and result["partitions_written"] == 3
    assert as_json(*args)["plan"]["summary"]["groups_unchanged"] == 2  # re-run: no-op

    def keys(partition: int) -> list:
        out = []
        for batch in FileBatchReader(log_dir / f"__consumer_offsets-{partition}" / "00000000000000000000.log"):
            out += [decode_record(r.key, r.value)[0] for r in batch.records()]
        return out

    assert {(k.group, k.topic, k.partition) for k in keys(0)} == {("polygenelubricants", ORDERS, 0),
                                                                   ("polygenelubricants", ORDERS, 1)}
    assert [(k.group, k.partition) for k in keys(12)] == [("my-group", 0)]

    b2 = BrokerProcess(b.port, log_dir, ["group.initial.rebalance.delay.ms=0"])
    b2.start()
    try:
        assert committed(b2.bootstrap, "polygenelubricants") == {(ORDERS, 0): 4, (ORDERS, 1): 7}
        from confluent_kafka import Consumer

        consumer = Consumer({"bootstrap.servers": b2.bootstrap, "group.id": "my-group", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest"})
        try:
            consumer.subscribe([PAYMENTS])
            deadline = time.monotonic() + 30
            msg = None
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    break
            assert msg is not None and (msg.offset(), msg.value()) == (3, b"p3")
        finally:
            consumer.close()
    finally:
        assert b2.stop() == 0, b2.log()
    proc = subprocess.run([sys.executable, "-m", "kcli", "verify", str(log_dir)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# -- typos that must not look like success --------------------------------------------------------------------
@pytest.fixture
def offline_log_dir(tmp_path):
    """A stopped broker's log dir holding orders (3 partitions) and payments (1): the offline target."""
    from builders import build_partition

    log_dir = tmp_path / "kafka-logs"
    for name in ("orders-0", "orders-1", "orders-2", "payments-0"):
        build_partition(log_dir / name, batches=10, records_per_batch=1, transactions=False)
    return log_dir


def test_unknown_group_is_not_found(zk, offline_log_dir):
    zk.offsets("real", {(ORDERS, 0): 2})
    args = ("migrate", "-z", zk.connect, "--log-dir", str(offline_log_dir), "--offsets-partitions", "1")
    proc = kctl(*args, "-g", "nosuch", check=1)
    assert "nosuch" in proc.stderr and "not found" in proc.stderr
    assert "not found" in proc.stdout  # the ACTION column
    plan = as_json(*args, "-g", "nosuch", "-g", "real", check=1)["plan"]
    assert {g["group"]: g["status"] for g in plan["groups"]} == {"nosuch": "not_found", "real": "commit"}
    assert plan["problems"] and plan["problems"][0]["code"] == "group_not_found"


def test_exported_bootstrap_server_gives_way_to_log_dir(zk, offline_log_dir, tmp_path):
    """-z with --log-dir is a ZooKeeper-to-log-dir migration whether or not KCTL_BOOTSTRAP_SERVER is exported (it
    used to be "give --bootstrap-server or --log-dir, not both"); -z before the subcommand is the same command."""
    zk.offsets("envgroup", {(ORDERS, 0): 2, (ORDERS, 1): 3})
    args = ("migrate", "-z", zk.connect, "--log-dir", str(offline_log_dir), "--offsets-partitions", "1")
    exported = {"KCTL_BOOTSTRAP_SERVER": f"127.0.0.1:{free_port()}"}
    alone = as_json(*args)
    assert alone["plan"]["target"] == "log-dir" and alone["plan"]["ok"]
    assert as_json(*args, env=exported) == alone
    assert as_json("-z", zk.connect, "migrate", *args[3:], env=exported) == alone
    assert kctl(*args, env=exported).stdout == kctl(*args).stdout
    done = as_json(*args, "--execute", "--backup", str(tmp_path / "env.csv"), env=exported)
    assert done["ok"] and done["verified"] and done["partitions_written"] == 2
    assert done["backup"] is None and not (tmp_path / "env.csv").exists()  # the log dir held no offsets before
    assert "not both" in kctl(*args, "-b", exported["KCTL_BOOTSTRAP_SERVER"], check=2).stderr  # a given -b is


def test_malformed_znode_refuses_its_group_only(zk, offline_log_dir):
    zk.offsets("good", {(ORDERS, 0): 2})
    zk.offsets("bad", {(ORDERS, 0): 1, (ORDERS, 1): b"x7"})
    args = ("migrate", "-z", zk.connect, "--log-dir", str(offline_log_dir), "--offsets-partitions", "1")
    plan = as_json(*args, check=1)["plan"]
    status = {g["group"]: g["status"] for g in plan["groups"]}
    assert status == {"bad": "refused", "good": "commit"}
    bad = next(g for g in plan["groups"] if g["group"] == "bad")
    assert f"{zk.chroot}/consumers/bad/offsets/orders/1" in bad["errors"][0]
    text = kctl(*args, check=1)
    row = next(line for line in text.stdout.splitlines() if line.split()[:1] == ["bad"])
    assert row.split()[-1] == "refused"
    assert f"{zk.chroot}/consumers/bad/offsets/orders/1" in text.stderr
    result = as_json(*args, "--execute", "--backup", str(offline_log_dir.parent / "b.csv"), check=1)
    assert result["committed_groups"] == ["good"]  # the good group is still migrated


@pytest.mark.parametrize("args", [["zk", "brokers"], ["zk", "topics"], ["zk", "consumers"],
                                  ["offsets", "export", "--from", "zookeeper"]], ids=lambda a: "-".join(a[:2]))
def test_missing_chroot_is_an_error(zookeeper, args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCTL_")}
    proc = subprocess.run([sys.executable, "-m", "kcli", *args, "-z", zookeeper.connect + "/no-such-chroot"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "/no-such-chroot" in proc.stderr and "chroot does not exist" in proc.stderr
    assert "UserWarning" not in proc.stderr and "warnings.warn" not in proc.stderr


def test_compact_reads_cleanup_policy_from_zookeeper(zk, offline_log_dir):
    """kctl compact -z: the policy each topic has in ZooKeeper decides, as the cluster's cleaners do: an override
    of delete, or none (Kafka's default, delete), is refused; compact is compacted; a cluster-wide default in
    /config/brokers/<default> applies to topics without an override."""
    zk.put("/config/topics/orders", json.dumps({"version": 1, "config": {"cleanup.policy": "delete"}}).encode())
    env = {k: v for k, v in os.environ.items() if not k.startswith("KCTL_")}

    def dry_run(*paths):
        return subprocess.run([sys.executable, "-m", "kcli", "compact", "--dry-run", "-j", "1", "-z", zk.connect,
                               *(str(offline_log_dir / p) for p in paths)],
                              capture_output=True, text=True, env=env, timeout=120)

    proc = dry_run("orders-0", "payments-0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    orders = next(line for line in proc.stderr.splitlines() if "orders-0" in line)
    payments = next(line for line in proc.stderr.splitlines() if "payments-0" in line)
    assert "cleanup.policy is delete (topic config in ZooKeeper" in orders
    assert "cleanup.policy is delete (no override in ZooKeeper" in payments and "Kafka's default" in payments
    zk.put("/config/topics/payments", json.dumps({"version": 1, "config": {"cleanup.policy": "compact"}}).encode())
    proc = dry_run("orders-0", "payments-0")
    assert proc.returncode == 1 and "orders-0" in proc.stderr and "payments-0" not in proc.stderr
    zk.client.delete(zk.chroot + "/config/topics/orders")
    zk.put("/config/brokers/<default>", json.dumps({"version": 1, "config": {
        "log.cleanup.policy": "compact,delete"}}).encode())
    proc = dry_run("orders-0", "payments-0")
    assert proc.returncode == 0, proc.stderr
    # a partition of a topic ZooKeeper does not know stays unknown: refused, the override named
    unknown = offline_log_dir / "ghost-0"
    shutil.copytree(offline_log_dir / "orders-0", unknown)
    proc = dry_run("ghost-0")
    assert proc.returncode == 1 and "[cleanup_policy_unknown]" in proc.stderr
