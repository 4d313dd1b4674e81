"""ZkRegistry against a real ZooKeeper (Debian's package) seeded with Kafka's ZooKeeper layout."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kazoo.client import KazooClient

from kcli.errors import KcliError
from kcli.zk.models import ZnodeFormatError
from kcli.zk.registry import ChrootMissingError, ZkRegistry, ZnodeMissingError, ZooKeeperConnectionError
from zookeeper_support import free_port

pytestmark = pytest.mark.zookeeper

TOPIC_ID = "Qx7bD3yGQ9uZ1lQJ8e9gZw"
CLUSTER_ID = "AbCdEfGhIjKlMnOpQrStUv"
MEMBER = "g1_host-1700000000000-0a1b2c3d"


def _j(value) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def seed(connect_root: str, chroot: str) -> None:
    """Kafka's layout as a 3-broker ZooKeeper-mode cluster with old consumers leaves it (key order shuffled)."""
    client = KazooClient(hosts=connect_root, timeout=10)
    client.start(timeout=10)
    try:
        def put(path: str, data: bytes = b"", **kwargs) -> None:
            client.create(chroot + path, data, makepath=True, **kwargs)

        for broker_id in (1, 2, 3):
            put(f"/brokers/ids/{broker_id}", _j({
                "features": {}, "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"},
                "endpoints": [f"PLAINTEXT://broker{broker_id}:9092", f"SSL://broker{broker_id}:9093"],
                "jmx_port": 9999 if broker_id == 1 else -1, "host": f"broker{broker_id}", "timestamp": "1700000000000",
                "port": 9092, "version": 5, **({"rack": "rack-a"} if broker_id == 1 else {})}))
        put("/brokers/topics/orders", _j({"version": 3, "topic_id": TOPIC_ID, "adding_replicas": {},
                                          "removing_replicas": {},
                                          "partitions": {"1": [2, 3, 1], "0": [1, 2, 3]}}))
        put("/brokers/topics/orders/partitions/0/state", _j({"isr": [1, 2, 3], "leader": 1, "version": 1,
                                                             "leader_epoch": 4, "controller_epoch": 7}))
        put("/brokers/topics/orders/partitions/1/state", _j({"controller_epoch": 7, "leader_epoch": 2, "version": 1,
                                                             "leader": 2, "isr": [2]}))  # under-replicated
        put("/brokers/topics/x", _j({"version": 2, "partitions": {"0": [3, 1]}, "adding_replicas": {"0": [1]},
                                     "removing_replicas": {}}))
        put("/brokers/topics/x/partitions/0/state", _j({"version": 1, "leader": 3, "leader_epoch": 0,
                                                        "controller_epoch": 6, "isr": [3, 1]}))
        put("/controller", _j({"timestamp": "1700000001000", "brokerid": 2, "version": 1}))
        put("/controller_epoch", b"7")
        put("/cluster/id", _j({"id": CLUSTER_ID, "version": "1"}))
        put("/config/topics/orders", _j({"config": {"retention.ms": "86400000", "cleanup.policy": "delete"},
                                         "version": 1}))
        put("/config/topics/x", _j({"version": 1, "config": {}}))
        put("/config/brokers/<default>", _j({"version": 1, "config": {"log.cleaner.threads": "2"}}))
        put("/admin/delete_topics/x")
        put("/consumers/g1/ids/" + MEMBER, _j({"version": 1, "subscription": {"orders": 1}, "pattern": "static",
                                               "timestamp": "1700000002000"}))
        put("/consumers/g1/owners/orders/0", f"{MEMBER}-0".encode())
        put("/consumers/g1/offsets/orders/0", b"1234")
        put("/consumers/g1/offsets/orders/1", b"99")
        put("/consumers/g2/offsets/x/0", b"5")
        put("/raw/binary", b"\x00\x01\xfe\xff")
    finally:
        client.stop()
        client.close()


@pytest.fixture
def seeded(zookeeper, chroot) -> str:
    seed(zookeeper.connect, chroot)
    return zookeeper.connect + chroot


@pytest.fixture
def registry(seeded):
    with ZkRegistry(seeded, timeout=10) as reg:
        yield reg


def test_brokers(registry):
    brokers = registry.brokers()
    assert [b.id for b in brokers] == [1, 2, 3]
    first = brokers[0]
    assert (first.host, first.port, first.rack, first.jmx_port, first.version) == ("broker1", 9092, "rack-a", 9999, 5)
    assert first.endpoints == ("PLAINTEXT://broker1:9092", "SSL://broker1:9093")
    assert first.timestamp == 1700000000000 and brokers[1].rack is None


def test_topics_and_partitions(registry):
    topics = {t.name: t for t in registry.topics()}
    assert sorted(topics) == ["orders", "x"]
    orders = registry.topic("orders")
    assert orders.topic_id == TOPIC_ID and orders.version == 3 and not orders.marked_for_deletion
    p0, p1 = orders.partitions
    assert (p0.partition, p0.leader, p0.isr, p0.replicas, p0.under_replicated) == (0, 1, (1, 2, 3), (1, 2, 3), False)
    assert (p0.leader_epoch, p0.controller_epoch) == (4, 7)
    assert (p1.partition, p1.leader, p1.isr, p1.replicas, p1.under_replicated) == (1, 2, (2,), (2, 3, 1), True)
    assert orders.under_replicated == 1 and orders.replication_factor == 3
    assert topics["x"].marked_for_deletion and topics["x"].partitions[0].adding_replicas == (1,)
    with pytest.raises(ZnodeMissingError, match="brokers/topics/nope"):
        registry.topic("nope")


def test_controller_cluster_config_admin(registry, chroot):
    controller = registry.controller()
    assert (controller.broker_id, controller.timestamp, controller.version) == (2, 1700000001000, 1)
    assert registry.controller_epoch() == 7
    assert registry.cluster_id().id == CLUSTER_ID
    configs = {(c.entity_type, c.name): c.config for c in registry.configs()}
    assert configs == {("topics", "orders"): {"cleanup.policy": "delete", "retention.ms": "86400000"},
                       ("topics", "x"): {}, ("brokers", "<default>"): {"log.cleaner.threads": "2"}}
    admin = registry.admin()
    assert admin.delete_topics == ("x",) and admin.reassignments == () and admin.preferred_replica_election == ()
    assert [(p.topic, p.partition, p.adding_replicas) for p in admin.ongoing_reassignments] == [("x", 0, (1,))]


def test_consumers(registry):
    groups = {g.group: g for g in registry.consumer_groups()}
    assert groups["g1"].members == 1 and groups["g1"].topics == ("orders",)
    assert groups["g2"].members == 0 and groups["g2"].topics == ("x",)
    g1 = registry.consumer_group("g1")
    assert [m.consumer_id for m in g1.members] == [MEMBER] and g1.members[0].subscription == {"orders": 1}
    assert g1.owners == {"orders": {0: f"{MEMBER}-0"}}
    assert g1.offsets == {"orders": {0: 1234, 1: 99}}
    with pytest.raises(ZnodeMissingError, match="/consumers/nope"):
        registry.consumer_group("nope")


def test_generic_views(registry, chroot):
    assert registry.ls("/brokers/ids") == ["1", "2", "3"]
    node = registry.get("/controller_epoch")
    assert node.data.kind == "json" and node.data.value == 7 and node.ephemeral_owner == 0
    assert registry.get("/consumers/g1/owners/orders/0").data.value == f"{MEMBER}-0"
    raw = registry.get("/raw/binary").data
    assert raw.kind == "bytes" and raw.hex == "0001feff"
    tree = registry.tree("/brokers", depth=1)
    assert [c.path for c in tree.children] == ["/brokers/ids", "/brokers/topics"]
    assert all(c.children == [] for c in tree.children)
    full = registry.tree("/consumers/g1")
    assert "/consumers/g1/offsets/orders/1" in _paths(full)
    with pytest.raises(ZnodeMissingError) as info:
        registry.get("/no/such")
    assert f"{chroot}/no/such" in str(info.value)


def _paths(node):
    yield node.path
    for c in node.children:
        yield from _paths(c)


def test_malformed_offset_names_the_path(zookeeper, chroot):
    seed(zookeeper.connect, chroot)
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    try:
        client.set(chroot + "/consumers/g1/offsets/orders/1", b"12x")
    finally:
        client.stop()
        client.close()
    with ZkRegistry(zookeeper.connect + chroot) as registry, pytest.raises(ZnodeFormatError) as info:
        registry.consumer_group("g1")
    assert f"{chroot}/consumers/g1/offsets/orders/1" in str(info.value) and "'12x'" in str(info.value)


def test_unreachable_and_missing_chroot(zookeeper):
    started = time.monotonic()
    with pytest.raises(ZooKeeperConnectionError, match="unreachable"):
        ZkRegistry(f"127.0.0.1:{free_port()}", timeout=120).brokers()
    assert time.monotonic() - started < 60  # refused at once, not retried until the 120 s timeout
    with pytest.raises(ChrootMissingError, match="chroot"):
        ZkRegistry(f"{zookeeper.connect}/t-missing-{uuid.uuid4().hex}").cluster_id()
    with pytest.raises(KcliError, match="user:password"):
        ZkRegistry(zookeeper.connect, auth="nopassword")


def test_digest_auth(zookeeper, chroot):
    from kazoo.security import make_digest_acl

    client = KazooClient(hosts=zookeeper.connect, timeout=10, auth_data=[("digest", "kafka:secret")])
    client.start(timeout=10)
    try:
        client.create(chroot, b"", acl=[make_digest_acl("kafka", "secret", all=True)])
        client.create(chroot + "/cluster/id", _j({"version": "1", "id": CLUSTER_ID}), makepath=True,
                      acl=[make_digest_acl("kafka", "secret", all=True)])
    finally:
        client.stop()
        client.close()
    with ZkRegistry(zookeeper.connect + chroot, auth="kafka:secret") as registry:
        assert registry.cluster_id().id == CLUSTER_ID
    with pytest.raises(KcliError, match="ACL"):
        with ZkRegistry(zookeeper.connect + chroot, auth="kafka:wrong") as registry:
            registry.cluster_id()


def test_empty_cluster(zookeeper, chroot):
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    try:
        client.create(chroot + "/brokers/ids", b"", makepath=True)
        client.create(chroot + "/controller", _j({"version": 2, "brokerid": 3000, "timestamp": "1",
                                                  "kraftControllerEpoch": 5}))
    finally:
        client.stop()
        client.close()
    with ZkRegistry(zookeeper.connect + chroot) as registry:
        assert registry.brokers() == [] and registry.topics() == [] and registry.consumer_groups() == []
        assert registry.configs() == [] and registry.controller_epoch() is None
        controller = registry.controller()
        assert (controller.broker_id, controller.version, controller.kraft_controller_epoch) == (3000, 2, 5)
        admin = registry.admin()
        assert admin.delete_topics == () and admin.ongoing_reassignments == () and admin.reassignments == ()
        with pytest.raises(ZnodeMissingError, match="/cluster/id"):
            registry.cluster_id()
