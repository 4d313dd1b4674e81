"""SCRAM credentials in ZooKeeper (kcli.zk.scram) against a real ZooKeeper: the node and notification byte for byte
as kafka-configs --zookeeper writes them, and read back from nodes kazoo wrote as Kafka's tools do."""

from __future__ import annotations

import json

import pytest

from kcli.errors import KcliError
from kcli.protocol.sasl import ScramCredential
from kcli.zk import scram as zk_scram
from kcli.zk.kafka_zk_client import KafkaZkClient

pytestmark = pytest.mark.zookeeper

RFC_STORED = ("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=,"
              "server_key=wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=,iterations=4096")


@pytest.fixture
def chrooted(chrooted_zk):
    return chrooted_zk


@pytest.fixture
def store(chrooted):
    return zk_scram.ZkNodes(KafkaZkClient(chrooted, timeout=10))


def test_written_as_kafka_configs_writes_it(store, chrooted):
    credential = ScramCredential.from_config_string(RFC_STORED)
    after = zk_scram.alter_user(store, "alice", upsert={"SCRAM-SHA-256": credential})
    assert after == {"SCRAM-SHA-256": credential}
    data, _ = chrooted.get("/config/users/alice")
    assert data == b'{"version":1,"config":{"SCRAM-SHA-256":"' + RFC_STORED.encode() + b'"}}'
    changes = chrooted.get_children("/config/changes")
    assert len(changes) == 1 and changes[0].startswith("config_change_") and len(changes[0]) == 24
    assert chrooted.get(f"/config/changes/{changes[0]}")[0] == b'{"version":2,"entity_path":"users/alice"}'


def test_read_what_kafka_configs_wrote(store, chrooted):
    """kafka-configs --zookeeper --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]' leaves this
    (AdminZkClient.changeConfigs): the quota key beside it is another tool's and must survive our writes."""
    theirs = ScramCredential.from_password("SCRAM-SHA-256", "alice-secret", 8192)
    chrooted.create("/config/users/alice", json.dumps({"version": 1, "config": {
        "SCRAM-SHA-256": theirs.to_config_string(), "consumer_byte_rate": "2048"}}).encode(), makepath=True)
    chrooted.create("/config/users/%3Cdefault%3E", b'{"version":1,"config":{}}')
    chrooted.create("/config/users/<default>", b'{"version":1,"config":{"producer_byte_rate":"1"}}')
    chrooted.create("/config/users/bob%40example.com", json.dumps({"version": 1, "config": {
        "SCRAM-SHA-512": theirs.to_config_string()}}).encode())
    chrooted.create("/config/users/carol", b'{"version":1,"config":{"SCRAM-SHA-256":"not a credential"}}')
    assert zk_scram.read_all(store) == {"alice": {"SCRAM-SHA-256": theirs}, "bob@example.com": {"SCRAM-SHA-512": theirs}}
    assert zk_scram.user_names(store) == ["<default>", "alice", "bob@example.com", "carol"]  # %3C..%3E is a user
    mine = ScramCredential.from_password("SCRAM-SHA-512", "other")
    zk_scram.alter_user(store, "alice", upsert={"SCRAM-SHA-512": mine})
    config = json.loads(chrooted.get("/config/users/alice")[0])["config"]
    assert config == {"SCRAM-SHA-256": theirs.to_config_string(), "consumer_byte_rate": "2048",
                      "SCRAM-SHA-512": mine.to_config_string()}
    zk_scram.alter_user(store, "alice", delete=["SCRAM-SHA-256", "SCRAM-SHA-512"])
    assert json.loads(chrooted.get("/config/users/alice")[0]) == {"version": 1, "config": {"consumer_byte_rate": "2048"}}
    with pytest.raises(zk_scram.ScramCredentialNotFound):
        zk_scram.alter_user(store, "alice", delete=["SCRAM-SHA-256"])
    with pytest.raises(KcliError):
        zk_scram.alter_user(store, "", upsert={"SCRAM-SHA-512": mine})
    zk_scram.alter_user(store, "<default>", upsert={"SCRAM-SHA-512": mine})  # a user of that name, sanitized
    assert json.loads(chrooted.get("/config/users/<default>")[0])["config"] == {"producer_byte_rate": "1"}


def test_a_concurrent_writer_is_not_overwritten(store, chrooted):
    """Read-modify-write with the zkVersion: a quota written between our read and our write survives."""
    chrooted.create("/config/users/alice", b'{"version":1,"config":{}}', makepath=True)

    class Racing:
        raced = False

        def get(self, path):
            found = store.get(path)
            if not self.raced:
                self.raced = True
                chrooted.set(path, b'{"version":1,"config":{"request_percentage":"50"}}')
            return found

        def set(self, path, data, expected_version=None):
            return store.set(path, data, expected_version)

        def children(self, path):
            return store.children(path)

    credential = ScramCredential.from_password("SCRAM-SHA-256", "pw")
    zk_scram.alter_user(Racing(), "alice", upsert={"SCRAM-SHA-256": credential})
    assert json.loads(chrooted.get("/config/users/alice")[0])["config"] == {
        "request_percentage": "50", "SCRAM-SHA-256": credential.to_config_string()}


@pytest.mark.parametrize("user,node", [
    ("alice", "alice"), ("a b", "a%20b"), ("a*b", "a%2Ab"), ("a+b", "a%2Bb"), ("CN=x,O=y", "CN%3Dx%2CO%3Dy"),
    ("é~", "%C3%A9%7E"), ("a.b-c_d", "a.b-c_d"), ("<default>", "%3Cdefault%3E"),
])
def test_sanitized_user_names_as_kafkas_sanitizer(user, node):
    assert zk_scram.sanitize(user) == node
    assert zk_scram.desanitize(node) == user


def test_malformed_user_node_is_reported(store, chrooted):
    chrooted.create("/config/users/alice", b"not json", makepath=True)
    with pytest.raises(KcliError):
        zk_scram.read_user(store, "alice")
    with pytest.raises(KcliError):
        zk_scram.alter_user(store, "alice", upsert={"SCRAM-SHA-256": ScramCredential.from_password(
            "SCRAM-SHA-256", "pw")})
    assert chrooted.get("/config/users/alice")[0] == b"not json"  # never clobbered
    assert zk_scram.read_all(store) == {}  # the broker's load skips it
