"""SCRAM credentials with real clients against a ZooKeeper-mode broker process: confluent-kafka's and
kafka-python's admin clients (Alter/DescribeUserScramCredentials), credentials written straight to ZooKeeper as
kafka-configs --zookeeper writes them, and `kctl users` online and offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from kazoo.client import KazooClient

import kctl_fork
from broker_support import BrokerProcess, free_port
from kcli.protocol.sasl import ScramCredential

pytestmark = [pytest.mark.broker_process, pytest.mark.zookeeper, pytest.mark.interop]


@pytest.fixture(scope="module")
def chroot() -> str:
    return f"/scram-{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def broker(zookeeper, chroot, tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("scram") / "kafka-logs",
                            [f"zookeeper.connect={zookeeper.connect}{chroot}"])
    process.start()
    process.zk_connect = f"{zookeeper.connect}{chroot}"
    yield process
    if process.proc is not None:
        assert process.stop() == 0, process.log()
    assert "Traceback" not in process.log(), process.log()


@pytest.fixture(scope="module")
def zk(zookeeper, chroot, broker):
    client = KazooClient(hosts=zookeeper.connect + chroot, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="module")
def admin(broker):
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})
    deadline = time.monotonic() + 30  # the controller is elected once the broker registered
    while time.monotonic() < deadline:
        if client.list_topics(timeout=10).controller_id >= 0:
            return client
        time.sleep(0.1)
    raise AssertionError("no controller")


def stored(zk, user_node: str) -> dict:
    return json.loads(zk.get(f"/config/users/{user_node}")[0])


def matches(credential_text: str, mechanism: str, password: str) -> bool:
    """The stored credential is the one this password makes with the stored salt and iterations."""
    credential = ScramCredential.from_config_string(credential_text)
    return ScramCredential.from_password(mechanism, password, credential.iterations, salt=credential.salt) == credential


def confluent_describe(admin, users):
    return {user: future.result(30) for user, future in admin.describe_user_scram_credentials(users).items()}


def test_confluent_kafka_alter_and_describe(admin, zk):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)

    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("ck-alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192),
                                     b"alice-secret"),
        UserScramCredentialUpsertion("ck-alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                     b"alice-secret", b"my-own-salt")])
    for future in futures.values():
        assert future.result(30) is None
    config = stored(zk, "ck-alice")["config"]
    assert matches(config["SCRAM-SHA-256"], "SCRAM-SHA-256", "alice-secret")
    assert ScramCredential.from_config_string(config["SCRAM-SHA-512"]) == ScramCredential.from_password(
        "SCRAM-SHA-512", "alice-secret", 4096, salt=b"my-own-salt")
    described = confluent_describe(admin, ["ck-alice"])["ck-alice"]
    assert sorted((i.mechanism, i.iterations) for i in described.scram_credential_infos) == [
        (ScramMechanism.SCRAM_SHA_256, 8192), (ScramMechanism.SCRAM_SHA_512, 4096)]
    # Kafka's refusals reach the client as Kafka's errors
    refused = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("ck-few", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw"),
        UserScramCredentialDeletion("ck-nobody", ScramMechanism.SCRAM_SHA_512)])
    errors = {}
    for user, future in refused.items():
        with pytest.raises(KafkaException) as e:
            future.result(30)
        errors[user] = e.value.args[0].name()
    assert errors == {"ck-few": "UNACCEPTABLE_CREDENTIAL", "ck-nobody": "RESOURCE_NOT_FOUND"}
    with pytest.raises(KafkaException) as e:
        confluent_describe(admin, ["ck-nobody"])
    assert e.value.args[0].name() == "RESOURCE_NOT_FOUND"
    deleted = admin.alter_user_scram_credentials([
        UserScramCredentialDeletion("ck-alice", ScramMechanism.SCRAM_SHA_512)])
    assert deleted["ck-alice"].result(30) is None
    assert list(stored(zk, "ck-alice")["config"]) == ["SCRAM-SHA-256"]


def test_kafka_python_alter_and_describe(broker, admin, zk):
    from kafka.admin import (KafkaAdminClient, ScramMechanism, UserScramCredentialDeletion,
                             UserScramCredentialUpsertion)

    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=30000)
    try:
        assert client.alter_user_scram_credentials([
            UserScramCredentialUpsertion("kp-bob", ScramMechanism.SCRAM_SHA_512, "bob-secret", iterations=4096)]) == {
            "kp-bob": None}
        assert matches(stored(zk, "kp-bob")["config"]["SCRAM-SHA-512"], "SCRAM-SHA-512", "bob-secret")
        described = client.describe_user_scram_credentials(["kp-bob"])["kp-bob"]
        assert described["error"] is None
        assert [(int(c["mechanism"]), c["iterations"]) for c in described["credential_infos"]] == [(2, 4096)]
        missing = client.alter_user_scram_credentials([UserScramCredentialDeletion("kp-bob",
                                                                                   ScramMechanism.SCRAM_SHA_256)])
        assert missing == {"kp-bob": "Attempt to delete a user credential that does not exist"}
    finally:
        client.close()


def test_credential_written_straight_to_zookeeper_is_described(admin, zk):
    """As `kafka-configs --zookeeper Z --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=p]'
    --entity-type users --entity-name CN=zk user` writes it: a sanitized node, Kafka's JSON, the notification."""
    credential = ScramCredential.from_password("SCRAM-SHA-256", "p", 8192)
    zk.create("/config/users/CN%3Dzk%20user", json.dumps(
        {"version": 1, "config": {"SCRAM-SHA-256": credential.to_config_string(), "producer_byte_rate": "1024"}},
        separators=(",", ":")).encode(), makepath=True)
    zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"users/CN%3Dzk%20user"}',
              sequence=True, makepath=True)
    described = confluent_describe(admin, ["CN=zk user"])["CN=zk user"]
    assert [(i.mechanism.name, i.iterations) for i in described.scram_credential_infos] == [("SCRAM_SHA_256", 8192)]
    everyone = admin.describe_user_scram_credentials().result(30)
    assert "CN=zk user" in everyone and "ck-alice" in everyone


def kctl(*args: str, input: str | None = None, **env: str) -> subprocess.CompletedProcess:
    """`kctl users ...` forked from the suite's kctl server (tests/kctl_fork.py): a real process, minus the start-up."""
    return kctl_fork.run("users", *args, input=input, env={"COLUMNS": "200", **env})


def kctl_fresh(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kcli", "users", *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "COLUMNS": "200", **env})


def test_kctl_users_online_and_offline(broker, admin, zk, tmp_path):
    password_file = tmp_path / "pw"
    password_file.write_text("carol-secret\n")
    done = kctl("-b", broker.bootstrap, "set-scram", "kc-carol", "-m", "SCRAM-SHA-256", "--iterations", "8192",
                "--password-file", str(password_file))
    assert done.returncode == 0, done.stderr
    assert "carol-secret" not in done.stdout + done.stderr
    assert matches(stored(zk, "kc-carol")["config"]["SCRAM-SHA-256"], "SCRAM-SHA-256", "carol-secret")
    # the password from standard input, both mechanisms, JSON
    done = kctl("set-scram", "kc-dave", "--password-file", "-", "-b", broker.bootstrap, "--json", input="dave-pw\n")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"results": [{"user": "kc-dave", "ok": True, "error": None}]}
    assert sorted(stored(zk, "kc-dave")["config"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    listed = kctl("-b", broker.bootstrap, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    users = {u["user"]: u for u in json.loads(listed.stdout)["users"]}
    assert users["kc-carol"]["credentials"] == [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]
    # offline: the same credentials read from ZooKeeper, and one written there seen through the broker
    offline = kctl("-z", broker.zk_connect, "describe", "kc-carol", "kc-dave", "--json")
    assert offline.returncode == 0, offline.stderr
    assert [(u["user"], [c["mechanism"] for c in u["credentials"]]) for u in json.loads(offline.stdout)["users"]] == [
        ("kc-carol", ["SCRAM-SHA-256"]), ("kc-dave", ["SCRAM-SHA-256", "SCRAM-SHA-512"])]
    done = kctl("-z", broker.zk_connect, "set-scram", "kc-erin", "-m", "SCRAM-SHA-512", "--password-file",
                str(password_file))
    assert done.returncode == 0, done.stderr
    assert matches(stored(zk, "kc-erin")["config"]["SCRAM-SHA-512"], "SCRAM-SHA-512", "carol-secret")
    online = kctl("-b", broker.bootstrap, "describe", "kc-erin")
    assert online.returncode == 0 and "kc-erin" in online.stdout and "SCRAM-SHA-512" in online.stdout
    # deleting: a named mechanism, then every remaining one; a user without credentials is an error
    assert kctl("-b", broker.bootstrap, "delete-scram", "kc-dave", "-m", "SCRAM-SHA-512").returncode == 0
    assert list(stored(zk, "kc-dave")["config"]) == ["SCRAM-SHA-256"]
    assert kctl("-z", broker.zk_connect, "delete-scram", "kc-dave").returncode == 0
    assert stored(zk, "kc-dave")["config"] == {}
    gone = kctl("-b", broker.bootstrap, "describe", "kc-dave")
    assert gone.returncode == 1 and "RESOURCE_NOT_FOUND" in gone.stderr
    again = kctl("-b", broker.bootstrap, "delete-scram", "kc-dave", "-m", "SCRAM-SHA-256", "--json")
    assert again.returncode == 1
    assert json.loads(again.stdout)["results"][0]["ok"] is False
    assert kctl("-z", broker.zk_connect, "delete-scram", "kc-dave", "-m", "SCRAM-SHA-256").returncode == 1


def test_kctl_users_usage_errors(broker, tmp_path):
    assert kctl_fresh("list").returncode == 2  # one as an operator starts it
    assert kctl("-b", broker.bootstrap, "-z", broker.zk_connect, "list").returncode == 2
    # an option on the command line beats the other mode's environment variable
    assert kctl("-b", broker.bootstrap, "list", KCTL_ZOOKEEPER=broker.zk_connect).returncode == 0
    assert kctl("-z", broker.zk_connect, "list", KCTL_BOOTSTRAP_SERVER=broker.bootstrap).returncode == 0
    assert kctl("-b", broker.bootstrap, "set-scram", "u", "-m", "SCRAM-SHA-1", "--password-file", "-",
                input="x\n").returncode == 2
    assert kctl("-b", broker.bootstrap, "set-scram", "u", "--iterations", "100", "--password-file", "-",
                input="x\n").returncode == 2
    assert kctl("-b", broker.bootstrap, "set-scram", "u", "--password-file", "-", input="\n").returncode == 2
    no_tty = kctl("-b", broker.bootstrap, "set-scram", "u")  # no terminal and no --password-file
    assert no_tty.returncode == 2 and "--password-file" in no_tty.stderr
    missing = kctl("-b", broker.bootstrap, "set-scram", "u", "--password-file", str(tmp_path / "nope"))
    assert missing.returncode == 3 and "Traceback" not in missing.stderr
    unreachable = kctl("-b", f"127.0.0.1:{free_port()}", "list")
    assert unreachable.returncode == 3 and "Traceback" not in unreachable.stderr


def test_librdkafka_0081_credentials_with_nul_bytes(admin, zk):
    """librdkafka's 0081 do_test_UserScramCredentials (null_bytes variant): salt and password with NUL bytes,
    10000 iterations, described as such, then deleted."""
    import hashlib

    from confluent_kafka.admin import (ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                       UserScramCredentialUpsertion)

    salt, password = b"s\x00l\x00", b"\x00as\x00word"
    futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
        "rd-0081", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 10000), password, salt)])
    assert futures["rd-0081"].result(30) is None
    expected = ScramCredential.from_salted_password(
        "SCRAM-SHA-256", salt, hashlib.pbkdf2_hmac("sha256", password, salt, 10000), 10000)
    assert ScramCredential.from_config_string(stored(zk, "rd-0081")["config"]["SCRAM-SHA-256"]) == expected
    described = confluent_describe(admin, ["rd-0081"])["rd-0081"]
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (ScramMechanism.SCRAM_SHA_256, 10000)]
    deleted = admin.alter_user_scram_credentials([UserScramCredentialDeletion("rd-0081",
                                                                              ScramMechanism.SCRAM_SHA_256)])
    assert deleted["rd-0081"].result(30) is None
