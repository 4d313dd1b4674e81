"""ACLs through a `kctl broker run` process with authorizer.class.name set, from real clients: confluent-kafka's
AdminClient and kafka-python's KafkaAdminClient (CreateAcls / DescribeAcls / DeleteAcls), and `kctl acls` online.
PLAINTEXT clients are User:ANONYMOUS: the broker names it a super user, except where the test is the refusal."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

import kctl_fork
from broker_support import BrokerProcess, free_port

pytestmark = pytest.mark.broker_process

AUTHORIZER = "authorizer.class.name=kafka.security.authorizer.AclAuthorizer"


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("acl-broker") / "kafka-logs",
                            [AUTHORIZER, "super.users=User:admin;User:ANONYMOUS"])
    process.start()
    yield process
    code = process.stop()
    assert code == 0, process.log()


def admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})


def kctl(*args, check=True, fresh=False):
    """`kctl ARGS` forked from a process that imported kcli once (tests/kctl_fork.py), or ``fresh``."""
    if fresh:
        result = subprocess.run([sys.executable, "-m", "kcli", *args], capture_output=True, text=True, timeout=120)
    else:
        result = kctl_fork.run(*args)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_confluent_admin_create_describe_delete(secured):
    client = admin(secured)
    bindings = [
        AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "ord", ResourcePatternType.PREFIXED, "User:bob", "10.0.0.1",
                   AclOperation.WRITE, AclPermissionType.DENY),
        AclBinding(ResourceType.GROUP, "app", ResourcePatternType.LITERAL, "User:alice", "*", AclOperation.READ,
                   AclPermissionType.ALLOW),
    ]
    for future in client.create_acls(bindings, request_timeout=15).values():
        assert future.result(timeout=30) is None
    match = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.MATCH, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    found = client.describe_acls(match, request_timeout=15).result(timeout=30)
    assert {(b.name, b.resource_pattern_type, b.principal, b.operation, b.permission_type) for b in found} == {
        ("orders", ResourcePatternType.LITERAL, "User:alice", AclOperation.READ, AclPermissionType.ALLOW),
        ("ord", ResourcePatternType.PREFIXED, "User:bob", AclOperation.WRITE, AclPermissionType.DENY)}
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                  AclPermissionType.ANY)
    assert len(client.describe_acls(everything, request_timeout=15).result(timeout=30)) == 3
    bob = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None, AclOperation.ANY,
                           AclPermissionType.ANY)
    deleted = list(client.delete_acls([bob], request_timeout=15).values())[0].result(timeout=30)
    assert [(b.name, b.principal) for b in deleted] == [("ord", "User:bob")]
    assert len(client.describe_acls(everything, request_timeout=15).result(timeout=30)) == 2
    list(client.delete_acls([everything], request_timeout=15).values())[0].result(timeout=30)
    assert client.describe_acls(everything, request_timeout=15).result(timeout=30) == []


def test_confluent_admin_invalid_binding_fails_alone(secured):
    client = admin(secured)
    good = AclBinding(ResourceType.TOPIC, "fine", ResourcePatternType.LITERAL, "User:carol", "*", AclOperation.READ,
                      AclPermissionType.ALLOW)
    bad = AclBinding(ResourceType.BROKER, "not-kafka-cluster", ResourcePatternType.LITERAL, "User:carol", "*",
                     AclOperation.ALTER, AclPermissionType.ALLOW)
    futures = client.create_acls([good, bad], request_timeout=15)
    assert futures[good].result(timeout=30) is None
    with pytest.raises(KafkaException) as raised:
        futures[bad].result(timeout=30)
    assert raised.value.args[0].name() == "INVALID_REQUEST"
    list(client.delete_acls([AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:carol", None,
                                              AclOperation.ANY, AclPermissionType.ANY)],
                            request_timeout=15).values())[0].result(timeout=30)


def test_kafka_python_admin(secured):
    from kafka.admin import (ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType,
                             KafkaAdminClient, ResourcePattern, ResourcePatternFilter)
    from kafka.admin import ResourceType as KpResourceType

    client = KafkaAdminClient(bootstrap_servers=secured.bootstrap, request_timeout_ms=15000)
    try:
        acl = ACL(principal="User:dave", host="*", operation=ACLOperation.DESCRIBE,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KpResourceType.TRANSACTIONAL_ID, "tx-",
                                                   ACLResourcePatternType.PREFIXED))
        result = client.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        dave = ACLFilter(principal="User:dave", host=None, operation=ACLOperation.ANY,
                         permission_type=ACLPermissionType.ANY,
                         resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY))
        acls, error = client.describe_acls(dave)
        assert [(a.resource_pattern.resource_name, a.resource_pattern.pattern_type, a.operation) for a in acls] == [
            ("tx-", ACLResourcePatternType.PREFIXED, ACLOperation.DESCRIBE)]
        [(_, matched, error)] = client.delete_acls([dave])
        assert [a.resource_pattern.resource_name for a in matched] == ["tx-"]
        assert client.describe_acls(dave)[0] == []
    finally:
        client.close()


def test_kctl_acls_online_round_trip(secured):
    b = secured.bootstrap
    added = kctl("acls", "-b", b, "--add", "--allow-principal", "User:erin", "--producer", "--topic", "payments",
                 "--transactional-id", "pay-tx", "--idempotent", "--json")
    created = json.loads(added.stdout)["created"]
    assert {(c["resource_type"], c["name"], c["operation"]) for c in created} == {
        ("TOPIC", "payments", "WRITE"), ("TOPIC", "payments", "DESCRIBE"), ("TOPIC", "payments", "CREATE"),
        ("TRANSACTIONAL_ID", "pay-tx", "WRITE"), ("TRANSACTIONAL_ID", "pay-tx", "DESCRIBE"),
        ("CLUSTER", "kafka-cluster", "IDEMPOTENT_WRITE")}
    listed = kctl("acls", "-b", b, "--list", "--topic", "payments")
    assert "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=payments, patternType=LITERAL)`" \
        in listed.stdout
    assert "(principal=User:erin, host=*, operation=WRITE, permissionType=ALLOW)" in listed.stdout
    removed = kctl("acls", "-b", b, "--remove", "--topic", "payments", "--transactional-id", "pay-tx", "--cluster",
                   "--force", "--json")
    assert len(json.loads(removed.stdout)["deleted"]) == 6
    assert json.loads(kctl("acls", "-b", b, "--list", "--principal", "User:erin", "--json").stdout) == {"acls": []}


def test_kctl_acls_usage_errors(secured):
    for args in (["--add", "--topic", "t"], ["--list", "--add"], ["--add", "--allow-principal", "alice",
                                                                 "--topic", "t"],
                 ["--add", "--allow-principal", "User:a", "--group", "g", "--operation", "Write"],
                 ["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"]):
        result = kctl("acls", "-b", secured.bootstrap, *args, check=False)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr


def test_without_alter_on_the_cluster_create_acls_is_refused(tmp_path):
    """A broker whose super users do not include the PLAINTEXT principal: CLUSTER_AUTHORIZATION_FAILED."""
    process = BrokerProcess(free_port(), tmp_path / "kafka-logs", [AUTHORIZER, "super.users=User:admin"])
    process.start()
    try:
        binding = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                             AclOperation.READ, AclPermissionType.ALLOW)
        client = admin(process)
        with pytest.raises(KafkaException) as raised:
            client.create_acls([binding], request_timeout=15)[binding].result(timeout=30)
        assert raised.value.args[0].name() == "CLUSTER_AUTHORIZATION_FAILED"
        result = kctl("acls", "-b", process.bootstrap, "--list", check=False)
        assert result.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in result.stderr
        # the audit line of the refusal (INFO on kafka.authorizer.logger)
        assert ("Principal = User:ANONYMOUS is Denied Operation = Alter from host = 127.0.0.1 on resource = "
                "Cluster:LITERAL:kafka-cluster for request = CreateAcls with resourceRefCount = 1") in process.log()
    finally:
        assert process.stop() == 0, process.log()


def test_without_an_authorizer_acls_are_security_disabled(broker):
    binding = AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    client = admin(broker)
    with pytest.raises(KafkaException) as raised:
        client.create_acls([binding], request_timeout=15)[binding].result(timeout=30)
    assert raised.value.args[0].name() == "SECURITY_DISABLED"


def test_kctl_acls_unreachable_is_exit_3():
    for args in (["-z", "127.0.0.1:1"], ["-b", "127.0.0.1:1"]):
        result = kctl("acls", *args, "--list", check=False, fresh=True)
        assert result.returncode == 3, result.stderr
        assert "Traceback" not in result.stderr
