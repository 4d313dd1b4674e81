"""A ZooKeeper-mode broker's SCRAM credentials (in process, real ZooKeeper): loaded at start, refreshed through
/config/changes when kafka-configs --zookeeper writes them (kazoo here, byte for byte as Kafka's tool), and
AlterUserScramCredentials writing the node and the notification every broker reads."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import pytest
from kio.schema.alter_user_scram_credentials.v0 import request as alter_req
from kio.schema.describe_user_scram_credentials.v0 import request as describe_req
from kio.schema.errors import ErrorCode

from inprocess_broker import run, running_broker
from kcli.protocol import ApiKey
from kcli.protocol.sasl import ScramCredential, create_client, create_server

pytestmark = pytest.mark.zookeeper


@pytest.fixture
def zk(chrooted_zk):
    return chrooted_zk


def kafka_configs_add(zk, user_node: str, **credentials: ScramCredential) -> None:
    """What `kafka-configs --zookeeper ... --alter --add-config 'SCRAM-SHA-256=[...]' --entity-type users` does:
    merge into /config/users/<user>, then the version-2 change notification."""
    path = f"/config/users/{user_node}"
    config = json.loads(zk.get(path)[0])["config"] if zk.exists(path) else {}
    config.update({k.replace("_", "-"): c.to_config_string() for k, c in credentials.items()})
    data = json.dumps({"version": 1, "config": config}, separators=(",", ":")).encode()
    if zk.exists(path):
        zk.set(path, data)
    else:
        zk.create(path, data, makepath=True)
    notify(zk, f"users/{user_node}")


def notify(zk, entity_path: str) -> None:
    zk.create("/config/changes/config_change_", json.dumps(
        {"version": 2, "entity_path": entity_path}, separators=(",", ":")).encode(), sequence=True, makepath=True)


async def eventually(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def logs_in(services, mechanism, user, password) -> bool:
    server = create_server(mechanism, services.credentials)
    client = create_client(mechanism, username=user, password=password)
    token = client.initial()
    try:
        while not server.complete:
            token = client.evaluate(server.evaluate(token))
    except Exception:
        return False
    return server.authorization_id == user


def test_credentials_written_straight_to_zookeeper_reach_a_running_broker(zookeeper, chroot, zk, tmp_path):
    early = ScramCredential.from_password("SCRAM-SHA-512", "early-pw", 4096)
    kafka_configs_add(zk, "early", SCRAM_SHA_512=early)

    async def body():
        async with running_broker(tmp_path / "logs", **{"zookeeper.connect": zookeeper.connect + chroot}) as broker:
            services = broker.server.services
            assert logs_in(services, "SCRAM-SHA-512", "early", "early-pw")  # loaded at start
            # a running broker picks up a new user within seconds
            kafka_configs_add(zk, "alice", SCRAM_SHA_256=ScramCredential.from_password(
                "SCRAM-SHA-256", "alice-secret", 8192))
            await eventually(lambda: services.credentials.scram_credential("alice", "SCRAM-SHA-256") is not None)
            assert logs_in(services, "SCRAM-SHA-256", "alice", "alice-secret")
            assert not logs_in(services, "SCRAM-SHA-256", "alice", "wrong")
            # a changed password replaces the old one
            kafka_configs_add(zk, "alice", SCRAM_SHA_256=ScramCredential.from_password("SCRAM-SHA-256", "new-pw"))
            await eventually(lambda: logs_in(services, "SCRAM-SHA-256", "alice", "new-pw"))
            # kafka-configs --delete-config 'SCRAM-SHA-256': the key goes, so does the credential
            config = json.loads(zk.get("/config/users/alice")[0])
            del config["config"]["SCRAM-SHA-256"]
            zk.set("/config/users/alice", json.dumps(config).encode())
            notify(zk, "users/alice")
            await eventually(lambda: services.credentials.scram_credential("alice", "SCRAM-SHA-256") is None)
            # quota entities (a user's client ids, the defaults) never touch credentials
            zk.create("/config/users/early/clients/app", b'{"version":1,"config":{"producer_byte_rate":"1"}}',
                      makepath=True)
            notify(zk, "users/early/clients/app")
            zk.create("/config/users/<default>", b'{"version":1,"config":{"producer_byte_rate":"1"}}')
            notify(zk, "users/<default>")
            # a sanitized name (kafka-configs sanitizes CN=bob,O=kctl)
            kafka_configs_add(zk, "CN%3Dbob%2CO%3Dkctl", SCRAM_SHA_256=ScramCredential.from_password(
                "SCRAM-SHA-256", "bob-pw"))
            await eventually(lambda: logs_in(services, "SCRAM-SHA-256", "CN=bob,O=kctl", "bob-pw"))
            assert logs_in(services, "SCRAM-SHA-512", "early", "early-pw")

    run(body())


def test_alter_writes_zookeeper_as_kafka_and_describe_reads_it(zookeeper, chroot, zk, tmp_path):
    async def body():
        async with running_broker(tmp_path / "logs", **{"zookeeper.connect": zookeeper.connect + chroot}) as broker:
            services = broker.server.services
            await eventually(lambda: services.controller.is_active)
            salt = b"0123456789abcdefghijklmnop"
            salted = hashlib.pbkdf2_hmac("sha512", b"alice-secret", salt, 8192)
            response = await broker.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                         alter_req.AlterUserScramCredentialsRequest(deletions=(), upsertions=(
                                             alter_req.ScramCredentialUpsertion(
                                                 name="alice", mechanism=2, iterations=8192, salt=salt,
                                                 salted_password=salted),)))
            assert [(r.user, r.error_code) for r in response.results] == [("alice", ErrorCode.none)]
            expected = ScramCredential.from_password("SCRAM-SHA-512", "alice-secret", 8192, salt=salt)
            assert json.loads(zk.get("/config/users/alice")[0]) == {
                "version": 1, "config": {"SCRAM-SHA-512": expected.to_config_string()}}
            notifications = [json.loads(zk.get(f"/config/changes/{c}")[0])
                             for c in zk.get_children("/config/changes")]
            assert {"version": 2, "entity_path": "users/alice"} in notifications
            assert logs_in(services, "SCRAM-SHA-512", "alice", "alice-secret")
            # one written by kafka-configs, seen by Describe
            kafka_configs_add(zk, "bob", SCRAM_SHA_256=ScramCredential.from_password("SCRAM-SHA-256", "b", 4096))
            described = await broker.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                                          describe_req.DescribeUserScramCredentialsRequest(users=None))
            assert [(r.user, [(int(c.mechanism), int(c.iterations)) for c in r.credential_infos])
                    for r in described.results] == [("alice", [(2, 8192)]), ("bob", [(1, 4096)])]

    run(body())


def test_a_credential_altered_on_the_controller_reaches_the_other_broker(zookeeper, chroot, zk, tmp_path):
    """Two brokers of one cluster (in process): AlterUserScramCredentials on the controller; the other broker
    answers NOT_CONTROLLER itself, and its credential cache has the new credential within seconds (through
    /config/changes, as every Kafka broker's UserConfigHandler)."""
    connect = {"zookeeper.connect": zookeeper.connect + chroot}

    async def body():
        async with running_broker(tmp_path / "a", **connect, **{"broker.id": "0"}) as first, \
                running_broker(tmp_path / "b", **connect, **{"broker.id": "1"}) as second:
            brokers = (first, second)
            await eventually(lambda: any(b.server.services.controller.is_active for b in brokers))
            controller = next(b for b in brokers if b.server.services.controller.is_active)
            other = second if controller is first else first
            salt = b"salt-salt-salt"
            request = alter_req.AlterUserScramCredentialsRequest(deletions=(), upsertions=(
                alter_req.ScramCredentialUpsertion(name="carol", mechanism=1, iterations=4096, salt=salt,
                                                   salted_password=hashlib.pbkdf2_hmac("sha256", b"c", salt, 4096)),))
            refused = await other.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, request)
            assert [(r.user, r.error_code) for r in refused.results] == [("carol", ErrorCode.not_controller)]
            done = await controller.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, request)
            assert [(r.user, r.error_code) for r in done.results] == [("carol", ErrorCode.none)]
            assert logs_in(controller.server.services, "SCRAM-SHA-256", "carol", "c")  # at once
            await eventually(lambda: logs_in(other.server.services, "SCRAM-SHA-256", "carol", "c"))

    run(body(), timeout=120)
