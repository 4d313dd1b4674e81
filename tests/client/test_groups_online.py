"""`kctl groups` against one real `kctl broker run` process, with live confluent-kafka and kafka-python consumers:
describe with lag, the refusals of an active group, reset-offsets plan/execute/backup/verify and its --from-file
round trip, delete-offsets and delete."""

from __future__ import annotations

import json
import time

import pytest

from broker_support import BrokerProcess, free_port
from kcli.client import KafkaClient
from kcli.records.consumer_offsets import partition_for_group

ORDERS, PAYMENTS = "orders", "payments"  # 3 partitions x 10 records, 1 partition x 5 records
OFFSETS_PARTITIONS = 7


def kctl(*args: str, check: int | None = 0):
    from typer.testing import CliRunner

    from kcli.cli.app import app

    result = CliRunner().invoke(app, ["groups", *args], env={"KCTL_BOOTSTRAP_SERVER": None, "COLUMNS": "100"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if check is not None:
        assert result.exit_code == check, f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def as_json(*args: str, check: int | None = 0) -> dict:
    return json.loads(kctl(*args, "--json", check=check).stdout)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("groups") / "kafka-logs",
                            ["group.initial.rebalance.delay.ms=0", "auto.create.topics.enable=false",
                             f"offsets.topic.num.partitions={OFFSETS_PARTITIONS}"])
    process.start()
    try:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        for future in admin.create_topics([NewTopic(ORDERS, 3, 1), NewTopic(PAYMENTS, 1, 1)]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": process.bootstrap})
        for partition in range(3):
            for i in range(10):
                producer.produce(ORDERS, key=b"k", value=b"o%d-%d" % (partition, i), partition=partition,
                                 timestamp=1_700_000_000_000 + i * 1000)
        for i in range(5):
            producer.produce(PAYMENTS, value=b"p%d" % i, partition=0)
        assert producer.flush(30) == 0
        yield process
    finally:
        if process.proc is not None:
            process.stop()


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    with KafkaClient(bootstrap) as client:
        return client.offset_fetch(group)


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    with KafkaClient(bootstrap) as client:
        assert set(client.offset_commit(group, offsets).values()) == {0}


def join(bootstrap: str, group: str, offsets: dict[int, int]):
    """A confluent-kafka consumer in ``group`` on ORDERS, assigned every partition, that committed ``offsets``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "cg-client",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe([ORDERS])
    deadline = time.monotonic() + 30
    while len(consumer.assignment()) < 3 and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert len(consumer.assignment()) == 3
    consumer.commit(offsets=[TopicPartition(ORDERS, p, o) for p, o in offsets.items()], asynchronous=False)
    return consumer


def test_live_group_describe_and_refusals_then_reset_round_trip(broker, tmp_path):
    group, b = "app", broker.bootstrap
    commit(b, group, {(PAYMENTS, 0): 2})  # a commit no member is assigned
    consumer = join(b, group, {0: 3, 1: 5, 2: 10})
    try:
        doc = as_json("describe", group, "-b", b)["groups"][0]
        assert (doc["state"], doc["protocol_type"], doc["protocol"]) == ("Stable", "consumer", "range")
        assert doc["coordinator_id"] == 0 and doc["coordinator"] == b
        assert doc["offsets_topic_partitions"] == OFFSETS_PARTITIONS
        assert doc["offsets_topic_partition"] == partition_for_group(group, OFFSETS_PARTITIONS)
        (member,) = doc["members"]
        assert member["client_id"] == "cg-client" and member["client_host"]
        assert member["assignment"] == [{"topic": ORDERS, "partition": p} for p in range(3)]
        rows = {(p["topic"], p["partition"]): p for p in doc["partitions"]}
        assert [(rows[(ORDERS, p)]["committed_offset"], rows[(ORDERS, p)]["log_end_offset"], rows[(ORDERS, p)]["lag"])
                for p in range(3)] == [(3, 10, 7), (5, 10, 5), (10, 10, 0)]
        assert rows[(ORDERS, 0)]["member_id"] == member["member_id"]
        assert (rows[(PAYMENTS, 0)]["lag"], rows[(PAYMENTS, 0)]["member_id"]) == (3, None)
        assert doc["total_lag"] == 15

        # kafka-consumer-groups --describe's layout: a header row, then one row per partition, GROUP first
        lines = kctl("describe", group, "-b", b).stdout.splitlines()
        assert lines[0].split() == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                                    "CONSUMER-ID", "HOST", "CLIENT-ID"]
        assert sorted(tuple(line.split()[:6]) for line in lines[1:]) == [
            (group, ORDERS, "0", "3", "10", "7"), (group, ORDERS, "1", "5", "10", "5"),
            (group, ORDERS, "2", "10", "10", "0"), (group, PAYMENTS, "0", "2", "5", "3")]
        text = kctl("describe", group, "-b", b, "--verbose").stdout
        assert "group app: Stable, consumer/range, 1 members, total lag 15" in text
        assert f"__consumer_offsets-{doc['offsets_topic_partition']}" in text
        assert max(len(line.rstrip()) for line in text.splitlines()) <= 100
        members = kctl("describe", group, "-b", b, "--members").stdout.splitlines()
        assert members[0].split()[:2] == ["GROUP", "CONSUMER-ID"] and members[1].split()[0] == group
        assert "cg-client" in members[1] and "ASSIGNMENT" not in members[0]
        assert f"{ORDERS}-0,{ORDERS}-1" in kctl("describe", group, "-b", b, "--members", "--verbose").stdout
        assert "Stable" in kctl("describe", "--all-groups", "-b", b, "--state").stdout
        # kafka-consumer-groups --list: bare names; --list --state: GROUP and STATE columns
        assert group in kctl("list", "-b", b).stdout.splitlines()
        with_state = kctl("list", "-b", b, "--state", "stable").stdout.splitlines()
        assert with_state[0].split() == ["GROUP", "STATE"] and [group, "Stable"] in [l.split() for l in with_state]
        assert "COORDINATOR" in kctl("list", "-b", b, "--table").stdout
        listed = {g["group"]: g for g in as_json("list", "-b", b)["groups"]}
        assert listed[group]["state"] == "Stable" and listed[group]["protocol_type"] == "consumer"
        assert group not in {g["group"] for g in as_json("list", "-b", b, "--state", "empty")["groups"]}

        # an active group: reset refused, delete refused, offsets of a subscribed topic refused
        plan = as_json("reset-offsets", group, "-b", b, "--topic", ORDERS, "--to-earliest", "--execute", check=1)
        assert plan["plan"]["groups"][0]["status"] == "refused" and "Stable" in plan["plan"]["groups"][0]["live"][0]
        assert committed(b, group)[(ORDERS, 0)] == 3
        refused = kctl("delete", group, "-b", b, check=1)
        assert "NON_EMPTY_GROUP (68)" in refused.stdout
        result = as_json("delete-offsets", group, "-b", b, "--topic", ORDERS, check=1)
        assert {p["error"] for p in result["partitions"]} == {"GROUP_SUBSCRIBED_TO_TOPIC"}
        result = as_json("delete-offsets", group, "-b", b, "--topic", f"{PAYMENTS}:0")
        assert result["ok"] and result["partitions"] == [
            {"topic": PAYMENTS, "partition": 0, "deleted": True, "error": None}]
        assert (PAYMENTS, 0) not in committed(b, group)
    finally:
        consumer.close()

    # inactive now: plan, execute with a backup, verify, and the backup read back with --from-file
    args = ("reset-offsets", group, "-b", b, "--topic", ORDERS)
    plan = as_json(*args, "--to-earliest")
    assert plan["executed"] is False and plan["plan"]["source"] == "requested"
    assert [(p["target_offset"], p["planned_offset"], p["action"]) for p in plan["plan"]["groups"][0]["partitions"]] \
        == [(3, 0, "commit"), (5, 0, "commit"), (10, 0, "commit")]
    assert "dry run" in kctl(*args, "--to-earliest").stdout
    assert committed(b, group) == {(ORDERS, 0): 3, (ORDERS, 1): 5, (ORDERS, 2): 10}
    backup = tmp_path / "backup.csv"
    done = as_json(*args, "--to-earliest", "--execute", "--backup", str(backup))
    assert done["ok"] and done["verified"] and done["committed_groups"] == [group]
    assert backup.read_text() == "orders,0,3\norders,1,5\norders,2,10\n"
    assert committed(b, group) == {(ORDERS, p): 0 for p in range(3)}
    back = as_json("reset-offsets", group, "-b", b, "--from-file", str(backup), "--execute",
                   "--backup", str(tmp_path / "b2.csv"))
    assert back["ok"] and back["verified"]
    assert committed(b, group) == {(ORDERS, 0): 3, (ORDERS, 1): 5, (ORDERS, 2): 10}

    # the other scenarios, planned: clamped into the log like Kafka's tool
    def planned(*scenario: str, topic: str = ORDERS) -> list[tuple[int, str]]:
        doc = as_json("reset-offsets", group, "-b", b, "--topic", topic, *scenario)
        return [(p["planned_offset"], p["action"]) for p in doc["plan"]["groups"][0]["partitions"]]

    assert planned("--shift-by", "-4") == [(0, "commit"), (1, "commit"), (6, "commit")]
    assert planned("--shift-by", "5") == [(8, "commit"), (10, "commit"), (10, "unchanged")]
    assert planned("--to-offset", "99", topic=f"{ORDERS}:1") == [(10, "clamp")]
    assert planned("--to-latest") == [(10, "commit"), (10, "commit"), (10, "unchanged")]
    assert planned("--to-current") == [(3, "unchanged"), (5, "unchanged"), (10, "unchanged")]
    assert planned("--to-datetime", "2023-11-14T22:13:24Z") == [(4, "commit"), (4, "commit"), (4, "commit")]
    assert planned("--to-datetime", "2099-01-01T00:00:00") == [(10, "commit"), (10, "commit"), (10, "unchanged")]
    assert planned("--by-duration", "P36500D") == [(0, "commit"), (0, "commit"), (0, "commit")]
    all_topics = as_json("reset-offsets", group, "-b", b, "--all-topics", "--to-earliest")
    assert {p["topic"] for p in all_topics["plan"]["groups"][0]["partitions"]} == {ORDERS}
    assert kctl("reset-offsets", group, "-b", b, "--to-earliest", check=2).stderr
    assert "exactly one of" in kctl("reset-offsets", group, "-b", b, "--all-topics", check=2).stderr
    assert "does not exist" in kctl("reset-offsets", group, "-b", b, "--topic", "nope", "--to-earliest",
                                    check=1).stderr

    assert kctl("export", group, "-b", b).stdout == "orders,0,3\norders,1,5\norders,2,10\n"
    exported = json.loads(kctl("export", group, "-b", b, "--json").stdout)
    assert exported["groups"][0]["offsets"][0] == {"topic": ORDERS, "partition": 0, "offset": 3}

    assert as_json("delete", group, "-b", b)["groups"] == [
        {"group": group, "deleted": True, "error": None, "reason": None}]
    assert committed(b, group) == {}
    assert "does not exist" in kctl("describe", group, "-b", b, check=1).stderr
    assert "GROUP_ID_NOT_FOUND" in kctl("delete", group, "-b", b, check=1).stdout


def test_kafka_python_member_assignment(broker):
    from kafka import KafkaConsumer

    group = "kp"
    consumer = KafkaConsumer(PAYMENTS, bootstrap_servers=broker.bootstrap, group_id=group, client_id="kp-client",
                             enable_auto_commit=False, auto_offset_reset="earliest", consumer_timeout_ms=20000)
    try:
        messages = [next(consumer) for _ in range(2)]
        assert [m.offset for m in messages] == [0, 1]
        consumer.commit()
        doc = as_json("describe", group, "-b", broker.bootstrap)["groups"][0]
        assert doc["state"] == "Stable"
        (member,) = doc["members"]
        assert member["client_id"] == "kp-client"
        assert member["assignment"] == [{"topic": PAYMENTS, "partition": 0}]
        assert [(p["committed_offset"], p["lag"]) for p in doc["partitions"]] == [(2, 3)]
    finally:
        consumer.close()
    assert as_json("describe", group, "-b", broker.bootstrap)["groups"][0]["state"] == "Empty"
    # -b before the subcommand, as `kctl topics -b B ...` takes it
    assert json.loads(kctl("-b", broker.bootstrap, "describe", group, "--json").stdout)["groups"][0]["state"] == "Empty"


def test_usage_errors():
    assert "no Kafka given" in kctl("list", check=2).stderr
    assert "--all-groups" in kctl("describe", "-b", "127.0.0.1:1", check=2).stderr
    assert kctl("describe", "g", "-b", f"127.0.0.1:{free_port()}", check=3).stderr.startswith("kctl: ")


def test_kafka_consumer_groups_spellings_give_the_native_result(broker, tmp_path):
    """Runbook lines copied from kafka-consumer-groups.sh (--group, --describe, --reset-offsets, --dry-run, --list,
    --export, -b before the subcommand) give what the kctl spelling gives."""
    group, b = "runbook", broker.bootstrap
    commit(b, group, {(ORDERS, 0): 4, (ORDERS, 1): 6})
    same = [
        [("reset-offsets", group, "-b", b, "--topic", ORDERS, "--to-earliest"),
         ("-b", b, "reset-offsets", "--group", group, "--topic", ORDERS, "--to-earliest", "--dry-run"),
         ("--bootstrap-server", b, "--group", group, "--reset-offsets", "--topic", ORDERS, "--to-earliest",
          "--dry-run")],
        [("describe", group, "-b", b), ("describe", "--group", group, "-b", b),
         ("--bootstrap-server", b, "--describe", "--group", group)],
        [("describe", group, "-b", b, "--state"), ("--bootstrap-server", b, "--describe", "--group", group, "--state")],
        [("list", "-b", b), ("--bootstrap-server", b, "--list")],
        [("export", group, "-b", b), ("-b", b, "export", "--group", group)],
    ]
    for native, *kafka in same:
        for line in kafka:
            assert as_json(*line) == as_json(*native), line
    plan = as_json("-b", b, "reset-offsets", "--group", group, "--topic", ORDERS, "--to-earliest", "--dry-run")
    assert plan["executed"] is False and [p["planned_offset"] for p in plan["plan"]["groups"][0]["partitions"]] == [0] * 3
    assert "dry run" in kctl("-b", b, "reset-offsets", "--group", group, "--topic", ORDERS, "--to-earliest",
                             "--dry-run").stdout
    assert committed(b, group) == {(ORDERS, 0): 4, (ORDERS, 1): 6}  # --dry-run wrote nothing

    # --export: the plan as the CSV --from-file reads; then executed from that file
    exported = kctl("--bootstrap-server", b, "--group", group, "--reset-offsets", "--topic", f"{ORDERS}:0,1",
                    "--to-offset", "2", "--export")
    assert exported.stdout == "orders,0,2\norders,1,2\n" and exported.stderr == ""
    plan_file = tmp_path / "plan.csv"
    plan_file.write_text(exported.stdout)
    done = as_json("--bootstrap-server", b, "--group", group, "--reset-offsets", "--from-file", str(plan_file),
                   "--execute", "--backup", str(tmp_path / "before.csv"))
    assert done["ok"] and done["verified"] and committed(b, group) == {(ORDERS, 0): 2, (ORDERS, 1): 2}
    assert (tmp_path / "before.csv").read_text() == "orders,0,4\norders,1,6\n"
    assert kctl("--bootstrap-server", b, "--group", group, "--delete").exit_code == 0
    assert committed(b, group) == {}


def test_execute_with_no_previous_offsets_leaves_no_empty_backup(broker, tmp_path, monkeypatch):
    """--execute backs up the offsets it replaces; where the group held none, no empty CSV is left behind."""
    b = broker.bootstrap
    monkeypatch.chdir(tmp_path)  # where the default kctl-offsets-backup-<time>.csv would go
    backup = tmp_path / "fresh.csv"
    done = as_json("reset-offsets", "fresh", "-b", b, "--topic", PAYMENTS, "--to-offset", "2", "--execute",
                   "--backup", str(backup))
    assert done["ok"] and done["verified"] and done["committed_groups"] == ["fresh"]
    assert done["backup"] is None and not backup.exists()
    text = kctl("reset-offsets", "fresh2", "-b", b, "--topic", PAYMENTS, "--to-offset", "3", "--execute").stdout
    assert "no backup written: none of the 1 partitions had a previous offset" in text and "backup of" not in text
    assert committed(b, "fresh2") == {(PAYMENTS, 0): 3}
    assert list(tmp_path.iterdir()) == []
    # with a previous offset there is one, as before
    again = as_json("reset-offsets", "fresh", "-b", b, "--topic", PAYMENTS, "--to-offset", "4", "--execute",
                    "--backup", str(backup))
    assert again["backup"] == str(backup) and backup.read_text() == "payments,0,2\n"
    assert as_json("delete", "fresh", "fresh2", "-b", b)["groups"][1]["deleted"]
