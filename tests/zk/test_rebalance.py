"""The old consumer's range assignment (kafka.consumer.RangeAssignor) and `kctl zk consumers GROUP --check`
against a real ZooKeeper seeded with members, topics and owner znodes."""

from __future__ import annotations

import json
import uuid

import pytest
from kazoo.client import KazooClient
from typer.testing import CliRunner

from kcli.cli.app import app
from kcli.zk.models import ConsumerRegistration
from kcli.zk.rebalance import check_owners, expected_assignment, range_assign

C1, C2 = "g_host1-1700000000000-aaaaaaaa", "g_host2-1700000000001-bbbbbbbb"


def test_range_assign_extra_partitions_go_to_the_first_threads():
    # Kafka's own example: 10 partitions over C0..C2 -> 4, 3, 3
    got = range_assign(list(range(10)), ["C2", "C0", "C1"])
    assert [got[p] for p in range(10)] == ["C0"] * 4 + ["C1"] * 3 + ["C2"] * 3
    # RangeAssignor's doc comment: p0 -> C1-0, p1 -> C1-0, p2 -> C1-1, p3 -> C2-0, p4 -> C2-1
    got = range_assign([4, 3, 2, 1, 0], ["C2-1", "C1-0", "C2-0", "C1-1"])
    assert got == {0: "C1-0", 1: "C1-0", 2: "C1-1", 3: "C2-0", 4: "C2-1"}


def test_range_assign_more_threads_than_partitions_and_string_order():
    got = range_assign([0, 1], ["a-0", "a-1", "a-2"])
    assert got == {0: "a-0", 1: "a-1"}
    # ConsumerThreadId compares toString: "c-10" sorts before "c-2"
    threads = [f"c-{n}" for n in range(11)]
    got = range_assign(list(range(11)), threads)
    assert got[1] == "c-1" and got[2] == "c-10" and got[3] == "c-2"


def test_expected_assignment_over_subscriptions_and_wildcards():
    members = [ConsumerRegistration(C1, 1, {"orders": 2}, "static", None),
               ConsumerRegistration(C2, 1, {"ord.*,pay.*": 1}, "white_list", None)]
    got = expected_assignment(members, {"orders": [0, 1, 2, 3, 4], "payments": [0, 1], "__consumer_offsets": [0]})
    assert [got[("orders", p)] for p in range(5)] == [f"{C1}-0", f"{C1}-0", f"{C1}-1", f"{C1}-1", f"{C2}-0"]
    assert got[("payments", 0)] == got[("payments", 1)] == f"{C2}-0"
    assert ("__consumer_offsets", 0) not in got


def test_check_statuses():
    members = [ConsumerRegistration(C1, 1, {"t": 1}, "static", None)]
    result = check_owners("g", members, {"t": [0, 1]}, {("t", 0): [f"{C1}-0"], ("t", 5): [f"{C1}-0"],
                                                        ("u", 0): ["ghost-0"]})
    statuses = {(p.topic, p.partition): p.status for p in result.partitions}
    assert statuses == {("t", 0): "ok", ("t", 1): "unowned", ("t", 5): "orphaned", ("u", 0): "orphaned"}
    assert not result.ok and len(result.disagreements) == 3


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["zk", *args], env={"KCTL_ZOOKEEPER": None, "KCTL_BOOTSTRAP_SERVER": None,
                                                         "COLUMNS": "200"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.zookeeper
def test_check_against_real_zookeeper(zookeeper):
    chroot = f"/t-{uuid.uuid4().hex}"
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    try:
        def put(path: str, data: bytes = b"") -> None:
            client.create(chroot + path, data, makepath=True)

        put("/brokers/topics/orders", json.dumps({"version": 1, "partitions": {str(p): [0] for p in range(5)}}).encode())
        for cid, streams in ((C1, 2), (C2, 1)):
            put(f"/consumers/g/ids/{cid}", json.dumps({"version": 1, "subscription": {"orders": streams},
                                                       "pattern": "static", "timestamp": "1700000000000"}).encode())
        expected = {0: f"{C1}-0", 1: f"{C1}-0", 2: f"{C1}-1", 3: f"{C1}-1", 4: f"{C2}-0"}
        for p, owner in expected.items():
            put(f"/consumers/g/owners/orders/{p}", owner.encode())
        connect = zookeeper.connect + chroot

        code, out, _ = _run("consumers", "g", "--check", "-z", connect)
        assert code == 0 and "owners agree with the range assignment over 3 consumer threads" in out
        code, out, _ = _run("consumers", "g", "--check", "-z", connect, "--json")
        assert code == 0 and json.loads(out)["check"]["ok"] is True

        client.set(chroot + "/consumers/g/owners/orders/1", f"{C2}-0".encode())  # wrong owner (C1-0 should)
        client.delete(chroot + "/consumers/g/owners/orders/2")  # unowned
        client.set(chroot + "/consumers/g/owners/orders/4", b"gone_host-1-cccccccc-0")  # orphaned
        put("/consumers/g/owners/orders/03", f"{C2}-0".encode())  # a second znode for partition 3
        put("/consumers/g/owners/orders/7", f"{C1}-0".encode())  # no such partition
        code, out, _ = _run("consumers", "g", "--check", "-z", connect, "--json")
        assert code == 1
        check = json.loads(out)["check"]
        statuses = {p["partition"]: p["status"] for p in check["partitions"]}
        assert statuses == {0: "ok", 1: "wrong-owner", 2: "unowned", 3: "double-owned", 4: "orphaned", 7: "orphaned"}
        assert check["disagreements"] == 5 and check["threads"] == sorted([f"{C1}-0", f"{C1}-1", f"{C2}-0"])
        code, out, _ = _run("consumers", "g", "--check", "-z", connect)
        assert code == 1 and "wrong-owner" in out and "double-owned" in out and "Owner registry disagreements" in out
        code, _, err = _run("consumers", "--check", "-z", connect)
        assert code == 2 and "need a GROUP" in err
    finally:
        client.stop()
        client.close()


@pytest.mark.zookeeper
def test_pykafka_layout_malformed_members_and_mixed_groups(zookeeper):
    """Registries as pykafka 2.8 writes them on Python 3 (ids node: the bare topic; owners under b'orders', named
    <leader>-<partition>, holding the member id), a malformed ids node, then a Kafka-layout member beside them."""
    chroot = f"/t-{uuid.uuid4().hex}"
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    try:
        def put(path: str, data: bytes = b"") -> None:
            client.create(chroot + path, data, makepath=True)

        put("/brokers/topics/orders", json.dumps({"version": 1, "partitions": {str(p): [0, 1] for p in range(4)}}
                                                 ).encode())
        for p in range(4):
            put(f"/brokers/topics/orders/partitions/{p}/state", json.dumps(
                {"controller_epoch": 1, "leader": p % 2, "version": 1, "leader_epoch": 0, "isr": [0, 1]}).encode())
        a, b = "host:11111111-aaaa", "host:22222222-bbbb"
        put(f"/consumers/pk/ids/{a}", b"orders")
        put(f"/consumers/pk/ids/{b}", b"orders")
        put("/consumers/pk/ids/broken", b"\x00\x01")
        # pykafka's order: b'orders'-0-0, b'orders'-0-2, b'orders'-1-1, b'orders'-1-3 -> a: 0, 2; b: 1, 3
        for p, owner in ((0, a), (2, a), (1, b), (3, b)):
            put(f"/consumers/pk/owners/b'orders'/{p % 2}-{p}", owner.encode())
        connect = zookeeper.connect + chroot

        code, out, err = _run("consumers", "pk", "--check", "-z", connect, "--json")
        assert code == 0, out + err
        report = json.loads(out)
        assert report["layout"] == "pykafka" and report["check"]["ok"] and report["check"]["layout"] == "pykafka"
        assert [m["consumer_id"] for m in report["pykafka_members"]] == [a, b]
        assert report["malformed_members"][0]["consumer_id"] == "broken" and "broken" in err
        assert {r["partition"]: r["owner"] for r in report["partitions"]} == {0: a, 1: b, 2: a, 3: b}

        client.set(chroot + "/consumers/pk/owners/b'orders'/0-2", b.encode())  # b took a's partition
        code, out, _ = _run("consumers", "pk", "--check", "-z", connect, "--json")
        assert code == 1
        assert {p["partition"]: p["status"] for p in json.loads(out)["check"]["partitions"]}[2] == "wrong-owner"

        put(f"/consumers/pk/ids/{C1}", json.dumps({"version": 1, "subscription": {"orders": 1},
                                                    "pattern": "static", "timestamp": "1"}).encode())
        code, out, _ = _run("consumers", "pk", "--check", "-z", connect)
        assert code == 1 and "layout: mixed" in out and "cannot agree" in out
    finally:
        client.stop()
        client.close()
