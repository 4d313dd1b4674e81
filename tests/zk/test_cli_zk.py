"""`kctl zk` as users run it (a process) against a real ZooKeeper seeded with Kafka's layout: most commands in
processes forked from one that imported kcli once (tests/kctl_fork.py), some in a fresh interpreter."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient

import kctl_fork
from zookeeper_support import free_port

pytestmark = pytest.mark.zookeeper

_spec = importlib.util.spec_from_file_location("zk_registry_seed", Path(__file__).with_name("test_registry.py"))
_seed_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_seed_module)
seed, MEMBER, TOPIC_ID, CLUSTER_ID = (_seed_module.seed, _seed_module.MEMBER, _seed_module.TOPIC_ID,
                                      _seed_module.CLUSTER_ID)


def kctl(*args: str, check: int | None = 0, env: dict | None = None,
         fresh: bool = False) -> subprocess.CompletedProcess:
    """`kctl zk ARGS` as a process forked from one that imported kcli once (tests/kctl_fork.py), or ``fresh``: a
    new interpreter, as an operator starts it."""
    environment = {key: value for key, value in os.environ.items() if not key.startswith("KCTL_ZOOKEEPER")}
    environment.update(COLUMNS="200", **(env or {}))
    if fresh:
        proc = subprocess.run([sys.executable, "-m", "kcli", "zk", *args], capture_output=True, text=True,
                              env=environment, timeout=120)
    else:
        unset = {key: None for key in os.environ if key not in environment}
        proc = kctl_fork.run("zk", *args, env={**environment, **unset})
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def as_json(*args: str, **kwargs) -> dict:
    return json.loads(kctl(*args, "--json", **kwargs).stdout)


@pytest.fixture(scope="module")
def chroot() -> str:
    return f"/t-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def zk(zookeeper, chroot) -> str:
    """The seeded connect string (one seeded chroot for this module's read-only commands)."""
    seed(zookeeper.connect, chroot)
    return zookeeper.connect + chroot


def test_brokers(zk):
    table = kctl("brokers", "--zookeeper", zk, fresh=True).stdout
    assert "broker1" in table and "rack-a" in table and "PLAINTEXT://broker3:9092" in table
    assert "2023-11-14T22:13:20.000Z" in table  # the registration time, readable
    data = as_json("brokers", "--zookeeper", zk)["brokers"]
    assert [b["id"] for b in data] == [1, 2, 3]
    assert data[0]["host"] == "broker1" and data[0]["port"] == 9092 and data[0]["jmx_port"] == 9999
    assert data[0]["rack"] == "rack-a" and data[0]["timestamp"] == 1700000000000
    assert data[0]["endpoints"] == ["PLAINTEXT://broker1:9092", "SSL://broker1:9093"]


def test_topics_and_topic(zk):
    table = kctl("topics", "--zookeeper", zk).stdout
    assert "orders" in table and TOPIC_ID in table
    topics = {t["name"]: t for t in as_json("topics", "--zookeeper", zk)["topics"]}
    assert topics["orders"]["under_replicated_partitions"] == 1 and topics["orders"]["partition_count"] == 2
    assert topics["x"]["marked_for_deletion"] is True
    detail = kctl("topic", "orders", "--zookeeper", zk).stdout
    assert "under-replicated" in detail.lower() and "2,3,1" in detail and "yes" in detail
    orders = as_json("topic", "orders", "--zookeeper", zk)
    assert orders["topic_id"] == TOPIC_ID and orders["replication_factor"] == 3
    partitions = {p["partition"]: p for p in orders["partitions"]}
    assert {k: partitions[0][k] for k in ("leader", "isr", "replicas", "under_replicated")} == {
        "leader": 1, "isr": [1, 2, 3], "replicas": [1, 2, 3], "under_replicated": False}
    assert {k: partitions[1][k] for k in ("leader", "isr", "replicas", "under_replicated")} == {
        "leader": 2, "isr": [2], "replicas": [2, 3, 1], "under_replicated": True}
    assert partitions[0]["leader_epoch"] == 4 and partitions[0]["controller_epoch"] == 7
    missing = kctl("topic", "nope", "--zookeeper", zk, check=3)
    assert "/brokers/topics/nope" in missing.stderr and "no such znode" in missing.stderr


def test_controller_and_cluster_id(zk):
    table = kctl("controller", "--zookeeper", zk).stdout
    assert "controller" in table and "2" in table and "7" in table
    assert as_json("controller", "--zookeeper", zk) == {
        "broker_id": 2, "controller_epoch": 7, "timestamp": 1700000001000, "version": 1,
        "kraft_controller_epoch": None}
    assert kctl("cluster-id", "--zookeeper", zk).stdout.strip() == CLUSTER_ID
    assert as_json("cluster-id", "--zookeeper", zk) == {"cluster_id": CLUSTER_ID, "version": 1}


def test_consumers(zk):
    table = kctl("consumers", "--zookeeper", zk).stdout
    assert "g1" in table and "g2" in table
    groups = {g["group"]: g for g in as_json("consumers", "--zookeeper", zk)["groups"]}
    assert groups["g1"] == {"group": "g1", "members": 1, "topics": ["orders"]}
    detail = kctl("consumers", "g1", "--zookeeper", zk).stdout
    assert MEMBER in detail and "1234" in detail and "orders=1" in detail
    g1 = as_json("consumers", "g1", "--zookeeper", zk)
    assert g1["members"][0]["consumer_id"] == MEMBER and g1["members"][0]["subscription"] == {"orders": 1}
    assert g1["partitions"] == [{"topic": "orders", "partition": 0, "offset": 1234, "owner": f"{MEMBER}-0"},
                                {"topic": "orders", "partition": 1, "offset": 99, "owner": None}]
    assert "/consumers/nope" in kctl("consumers", "nope", "--zookeeper", zk, check=3).stderr


def test_exported_bootstrap_server_does_not_change_consumers(zk):
    """`zk consumers` reads ZooKeeper only, KCTL_BOOTSTRAP_SERVER exported or not (without GROUP it was a usage
    error, with GROUP a lag lookup against that broker); -z goes before the subcommand as after it."""
    exported = {"KCTL_BOOTSTRAP_SERVER": f"127.0.0.1:{free_port()}"}
    for args in (["consumers"], ["consumers", "g1"]):
        alone = kctl(*args, "--zookeeper", zk)
        assert kctl(*args, "--zookeeper", zk, env=exported).stdout == alone.stdout, args
        assert kctl("-z", zk, *args, env=exported).stdout == alone.stdout, args
        assert as_json(*args, "--zookeeper", zk, env=exported) == as_json(*args, "--zookeeper", zk), args
    assert "LAG" not in kctl("consumers", "g1", "-z", zk, env=exported).stdout
    assert kctl("-z", zk, "brokers").stdout == kctl("brokers", "-z", zk).stdout


def test_config_and_admin(zk):
    table = kctl("config", "--zookeeper", zk).stdout
    assert "retention.ms" in table and "86400000" in table and "<default>" in table
    configs = {(c["entity_type"], c["name"]): c["config"] for c in as_json("config", "--zookeeper", zk)["configs"]}
    assert configs[("topics", "orders")] == {"cleanup.policy": "delete", "retention.ms": "86400000"}
    assert configs[("brokers", "<default>")] == {"log.cleaner.threads": "2"}
    table = kctl("admin", "--zookeeper", zk).stdout
    assert "delete topic" in table and "reassigning" in table
    admin = as_json("admin", "--zookeeper", zk)
    assert admin["delete_topics"] == ["x"] and admin["reassignments"] == []
    assert admin["ongoing_reassignments"] == [{"topic": "x", "partition": 0, "replicas": [3, 1],
                                               "adding_replicas": [1], "removing_replicas": []}]


def test_ls_get_tree(zk, chroot):
    assert kctl("ls", "/brokers/ids", "--zookeeper", zk).stdout.split() == ["1", "2", "3"]
    assert as_json("ls", "/brokers/ids", "--zookeeper", zk)["children"] == ["1", "2", "3"]
    text = kctl("get", "/controller", "--zookeeper", zk).stdout
    assert '"brokerid": 2' in text and "version 0" in text
    node = as_json("get", "/brokers/topics/orders", "--zookeeper", zk)
    assert node["encoding"] == "json" and node["data"]["topic_id"] == TOPIC_ID
    assert as_json("get", "/consumers/g1/offsets/orders/0", "--zookeeper", zk)["data"] == 1234
    raw = as_json("get", "/raw/binary", "--zookeeper", zk)
    assert raw["encoding"] == "base64" and raw["hex"] == "0001feff" and raw["data"] == "AAH+/w=="
    assert "00 01 fe ff" in kctl("get", "/raw/binary", "--zookeeper", zk).stdout
    tree = kctl("tree", "/consumers", "--zookeeper", zk).stdout
    assert "g1" in tree and MEMBER in tree and "offsets" in tree
    shallow = as_json("tree", "/brokers", "--depth", "1", "--zookeeper", zk)
    assert [c["path"] for c in shallow["children"]] == ["/brokers/ids", "/brokers/topics"]
    missing = kctl("get", "/no/such", "--zookeeper", zk, check=3)
    assert f"{chroot}/no/such" in missing.stderr


def test_zookeeper_from_environment_and_missing(zk):
    assert as_json("cluster-id", env={"KCTL_ZOOKEEPER": zk})["cluster_id"] == CLUSTER_ID
    usage = kctl("brokers", check=2, fresh=True)
    assert "--zookeeper" in usage.stderr and "KCTL_ZOOKEEPER" in usage.stderr
    assert kctl("brokers", "--zookeeper", "host:notaport", check=2, fresh=True).stderr


def test_unreachable_zookeeper_exits_3_quickly():
    started = time.monotonic()
    proc = kctl("brokers", "--zookeeper", f"127.0.0.1:{free_port()}", "--timeout", "300", check=3, fresh=True)
    assert "unreachable" in proc.stderr and proc.stdout == ""
    assert time.monotonic() - started < 150  # refused at once, not retried until the 300 s timeout


def test_malformed_offsets_znode(zookeeper):
    chroot = f"/t-{uuid.uuid4().hex}"
    seed(zookeeper.connect, chroot)
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    try:
        client.set(chroot + "/consumers/g1/offsets/orders/0", b"-7")
        before = client.get(chroot + "/consumers/g1/offsets/orders/0")[1].version
    finally:
        client.stop()
        client.close()
    proc = kctl("consumers", "g1", "--zookeeper", zookeeper.connect + chroot, check=1)
    assert f"{chroot}/consumers/g1/offsets/orders/0" in proc.stderr and "'-7'" in proc.stderr
    # read-only: the znode was not touched
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    try:
        assert client.get(chroot + "/consumers/g1/offsets/orders/0")[1].version == before
    finally:
        client.stop()
        client.close()
