"""ACLs in ZooKeeper with two ZooKeeper-mode broker processes: Kafka's paths and JSON byte for byte, nodes written
straight to ZooKeeper as Kafka's tools write them (kazoo) picked up by running brokers through the change
notifications, CreateAcls on one broker seen by the other, and `kctl acls --zookeeper` / `kctl zk acls`.

The brokers allow everyone while no ACL applies (allow.everyone.if.no.acl.found=true, no super user): the
PLAINTEXT principal User:ANONYMOUS may use the ACL APIs until an ACL on the cluster names someone else."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)
from kazoo.client import KazooClient

import kctl_fork
from broker_support import BrokerProcess, free_port

pytestmark = pytest.mark.cluster

EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                              AclPermissionType.ANY)


@pytest.fixture(scope="module")
def chroot():
    return f"/acls-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def zk(zookeeper, chroot):
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="module")
def brokers(zookeeper, chroot, tmp_path_factory):
    started = []
    for broker_id in (0, 1):
        process = BrokerProcess(free_port(), tmp_path_factory.mktemp(f"b{broker_id}") / "kafka-logs", [
            f"zookeeper.connect={zookeeper.connect}{chroot}", f"broker.id={broker_id}",
            "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
            "allow.everyone.if.no.acl.found=true"])
        process.start()
        started.append(process)
    yield started
    for process in started:
        assert process.stop() == 0, process.log()


def described(broker) -> set[tuple]:
    client = AdminClient({"bootstrap.servers": broker.bootstrap})
    found = client.describe_acls(EVERYTHING, request_timeout=15).result(timeout=30)
    return {(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)
            for b in found}


def wait_for(condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def kctl(*args, check=True, fresh=False):
    """`kctl ARGS` forked from a process that imported kcli once (tests/kctl_fork.py), or ``fresh``."""
    if fresh:
        result = subprocess.run([sys.executable, "-m", "kcli", *args], capture_output=True, text=True, timeout=120)
    else:
        result = kctl_fork.run(*args)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_brokers_create_kafkas_acl_paths(brokers, zk, chroot):
    for path in ("/kafka-acl/Topic", "/kafka-acl/Cluster", "/kafka-acl/TransactionalId", "/kafka-acl/Group",
                 "/kafka-acl-extended/prefixed/Topic", "/kafka-acl-changes", "/kafka-acl-extended-changes"):
        assert zk.exists(chroot + path), path


def test_nodes_written_as_kafka_writes_them_reach_both_brokers(brokers, zk, chroot):
    # what Kafka's AclAuthorizer (kafka-acls --authorizer-properties) writes: the node, then the notification
    zk.create(chroot + "/kafka-acl/Topic/kafka-written", json.dumps(
        {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
                                 "host": "*"}]}, separators=(",", ":")).encode(), makepath=True)
    zk.create(chroot + "/kafka-acl-changes/acl_changes_", b"TOPIC:kafka-written", sequence=True)
    zk.create(chroot + "/kafka-acl-extended/prefixed/Group/kafka-", json.dumps(
        {"version": 1, "acls": [{"principal": "User:*", "permissionType": "Deny", "operation": "Delete",
                                 "host": "10.1.2.3"}]}).encode(), makepath=True)
    zk.create(chroot + "/kafka-acl-extended-changes/acl_changes_", json.dumps(
        {"version": 1, "resourceType": "GROUP", "name": "kafka-", "patternType": "PREFIXED"}).encode(),
        sequence=True)
    expected = {(ResourceType.TOPIC, "kafka-written", ResourcePatternType.LITERAL, "User:alice", "*",
                 AclOperation.READ, AclPermissionType.ALLOW),
                (ResourceType.GROUP, "kafka-", ResourcePatternType.PREFIXED, "User:*", "10.1.2.3",
                 AclOperation.DELETE, AclPermissionType.DENY)}
    for broker in brokers:
        wait_for(lambda: expected <= described(broker))
    # a change Kafka writes later (the node replaced, then notified) replaces the brokers' view
    zk.set(chroot + "/kafka-acl/Topic/kafka-written", json.dumps(
        {"version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow", "operation": "Write",
                                 "host": "*"}]}).encode())
    zk.create(chroot + "/kafka-acl-changes/acl_changes_", b"TOPIC:kafka-written", sequence=True)
    for broker in brokers:
        wait_for(lambda: (ResourceType.TOPIC, "kafka-written", ResourcePatternType.LITERAL, "User:alice", "*",
                          AclOperation.WRITE, AclPermissionType.ALLOW) in described(broker))
    zk.delete(chroot + "/kafka-acl/Topic/kafka-written")
    zk.delete(chroot + "/kafka-acl-extended/prefixed/Group/kafka-")
    zk.create(chroot + "/kafka-acl-changes/acl_changes_", b"TOPIC:kafka-written", sequence=True)
    zk.create(chroot + "/kafka-acl-extended-changes/acl_changes_", json.dumps(
        {"version": 1, "resourceType": "GROUP", "name": "kafka-", "patternType": "PREFIXED"}).encode(),
        sequence=True)
    for broker in brokers:
        wait_for(lambda: not described(broker))


def test_create_acls_on_one_broker_is_seen_by_the_other(brokers, zk, chroot):
    first, second = brokers
    client = AdminClient({"bootstrap.servers": first.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED, "User:bob", "*",
                         AclOperation.WRITE, AclPermissionType.ALLOW)
    assert client.create_acls([binding], request_timeout=15)[binding].result(timeout=30) is None
    data, _ = zk.get(chroot + "/kafka-acl-extended/prefixed/Topic/orders-")
    assert data == (b'{"version":1,"acls":[{"principal":"User:bob","permissionType":"Allow","operation":"Write",'
                    b'"host":"*"}]}')
    notes = [zk.get(f"{chroot}/kafka-acl-extended-changes/{n}")[0]
             for n in sorted(zk.get_children(chroot + "/kafka-acl-extended-changes"))]
    assert json.loads(notes[-1]) == {"version": 1, "resourceType": "TOPIC", "name": "orders-",
                                     "patternType": "PREFIXED"}
    wait_for(lambda: len(described(second)) == 1)
    other = AdminClient({"bootstrap.servers": second.bootstrap})
    deleted = list(other.delete_acls([EVERYTHING], request_timeout=15).values())[0].result(timeout=30)
    assert [b.name for b in deleted] == ["orders-"]
    assert not zk.exists(chroot + "/kafka-acl-extended/prefixed/Topic/orders-")
    wait_for(lambda: not described(first))


def test_kctl_acls_offline_writes_what_running_brokers_pick_up(brokers, zookeeper, chroot, zk):
    connect = f"{zookeeper.connect}{chroot}"
    added = kctl("acls", "--authorizer-properties", f"zookeeper.connect={connect}", "--add", "--allow-principal",
                 "User:carol", "--consumer", "--topic", "clicks", "--group", "analytics", "--json", fresh=True)
    assert len(json.loads(added.stdout)["created"]) == 3
    assert json.loads(zk.get(chroot + "/kafka-acl/Group/analytics")[0]) == {"version": 1, "acls": [
        {"principal": "User:carol", "permissionType": "Allow", "operation": "Read", "host": "*"}]}
    for broker in brokers:
        wait_for(lambda: {(b[1], b[5]) for b in described(broker)} == {
            ("clicks", AclOperation.READ), ("clicks", AclOperation.DESCRIBE), ("analytics", AclOperation.READ)})
    view = json.loads(kctl("zk", "acls", "-z", connect, "--json").stdout)["acls"]
    assert {(n["resource_type"], n["name"], len(n["entries"])) for n in view} == {("TOPIC", "clicks", 2),
                                                                                 ("GROUP", "analytics", 1)}
    listed = kctl("acls", "-z", connect, "--list", "--topic", "clicks", "--json")
    assert len(json.loads(listed.stdout)["acls"]) == 2
    online = kctl("acls", "-b", brokers[1].bootstrap, "--list", "--group", "analytics", "--json")
    assert len(json.loads(online.stdout)["acls"]) == 1
    kctl("acls", "-z", connect, "--remove", "--topic", "clicks", "--group", "analytics", "--force")
    for broker in brokers:
        wait_for(lambda: not described(broker))


def test_an_acl_on_the_cluster_for_someone_else_locks_anonymous_out(brokers, zk, chroot):
    """allow.everyone.if.no.acl.found stops applying to the cluster once one ACL names it (4.2 rule 3)."""
    zk.create(chroot + "/kafka-acl/Cluster/kafka-cluster", json.dumps(
        {"version": 1, "acls": [{"principal": "User:admin", "permissionType": "Allow", "operation": "All",
                                 "host": "*"}]}).encode(), makepath=True)
    zk.create(chroot + "/kafka-acl-changes/acl_changes_", b"CLUSTER:kafka-cluster", sequence=True)
    binding = AclBinding(ResourceType.TOPIC, "late", ResourcePatternType.LITERAL, "User:eve", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)

    def refused(broker) -> bool:
        client = AdminClient({"bootstrap.servers": broker.bootstrap})
        try:
            client.create_acls([binding], request_timeout=15)[binding].result(timeout=30)
        except KafkaException as exc:
            return exc.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"
        return False

    try:
        for broker in brokers:
            wait_for(lambda: refused(broker))
    finally:
        zk.delete(chroot + "/kafka-acl/Cluster/kafka-cluster")
        zk.create(chroot + "/kafka-acl-changes/acl_changes_", b"CLUSTER:kafka-cluster", sequence=True)
