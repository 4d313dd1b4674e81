"""BrokerRegistration against a real ZooKeeper (Debian's package): the znodes and JSON a Kafka broker writes."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kazoo.client import KazooClient

from kcli.errors import KcliError
from kcli.storage.checkpoint import uuid_from_base64
from kcli.zk import paths
from kcli.zk.kafka_zk_client import KafkaZkClient
from kcli.zk.registration import SESSION_EXPIRED, SESSION_REESTABLISHED, BrokerRegistration, InvalidGroupIdError
from zookeeper_support import TcpProxy, free_port

pytestmark = pytest.mark.zookeeper

PLAINTEXT = [("PLAINTEXT", "127.0.0.1", 9092)]


@pytest.fixture
def connect(zookeeper, chroot) -> str:
    return zookeeper.connect + chroot


@pytest.fixture
def root(zookeeper):
    """A kazoo client at ZooKeeper's root, to look at what the registration wrote."""
    client = KazooClient(hosts=zookeeper.connect, timeout=10)
    client.start(timeout=10)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def register(connect):
    """Start registrations (stopped at teardown, also when a test fails)."""
    started: list[BrokerRegistration] = []

    def make(broker_id: int = 0, *, cluster_id: str | None = None, connect_to: str | None = None,
             **kwargs) -> BrokerRegistration:
        kwargs.setdefault("endpoints", PLAINTEXT)
        registration = BrokerRegistration(connect_to or connect, broker_id, **kwargs)
        started.append(registration)
        registration.start(cluster_id)
        return registration

    yield make
    for registration in started:
        registration.stop()


def read_json(client: KazooClient, path: str):
    data, _ = client.get(path)
    return json.loads(data)


def wait_for(condition, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_registration_json(register, root, chroot):
    before = int(time.time() * 1000)
    registration = register(3, endpoints=[("PLAINTEXT", "127.0.0.1", 9092), ("INTERNAL", "localhost", 9093),
                                          ("SSL", "::1", 9094)], rack="rack-a")
    data, stat = root.get(chroot + "/brokers/ids/3")
    info = json.loads(data)
    assert b" " not in data  # Kafka writes compact JSON
    assert info["version"] == 5
    assert (info["host"], info["port"], info["jmx_port"]) == ("127.0.0.1", 9092, -1)
    assert isinstance(info["timestamp"], str) and before <= int(info["timestamp"]) <= int(time.time() * 1000)
    assert info["endpoints"] == ["PLAINTEXT://127.0.0.1:9092", "INTERNAL://localhost:9093", "SSL://[::1]:9094"]
    assert info["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "INTERNAL": "PLAINTEXT",
                                                      "SSL": "SSL"}
    assert info["features"] == {}
    assert info["rack"] == "rack-a"
    assert stat.ephemeralOwner == registration._client.client_id[0]


def test_registration_writes_the_listener_security_protocol_map(register, root, chroot):
    """The protocols of listener.security.protocol.map, by listener name (BrokerIdZNode.encode); the first
    endpoint whose protocol is PLAINTEXT gives host and port, whatever its name."""
    register(2, endpoints=[("CLIENTS", "10.0.0.2", 9092), ("REPLICATION", "10.0.1.2", 9093)],
             security_protocols={"CLIENTS": "PLAINTEXT", "REPLICATION": "PLAINTEXT"})
    info = read_json(root, chroot + "/brokers/ids/2")
    assert info["listener_security_protocol_map"] == {"CLIENTS": "PLAINTEXT", "REPLICATION": "PLAINTEXT"}
    assert (info["host"], info["port"]) == ("10.0.0.2", 9092)


def test_registration_without_rack_or_plaintext(register, root, chroot):
    register(1, endpoints=[("SSL", "broker1", 9093)])
    info = read_json(root, chroot + "/brokers/ids/1")
    assert "rack" not in info
    assert info["host"] is None and info["port"] == -1  # no PLAINTEXT endpoint: BrokerIdZNode.encode's fallback
    assert info["endpoints"] == ["SSL://broker1:9093"]


def test_persistent_paths_created(register, root, chroot):
    register(0)
    for path in ("/brokers/ids", "/brokers/topics", "/brokers/seqid", "/config/topics", "/config/changes",
                 "/admin/delete_topics", "/isr_change_notification", "/consumers"):
        assert root.exists(chroot + path), path


def test_cluster_id_created_then_adopted(register, root, chroot):
    created = register(0).cluster_id
    document = read_json(root, chroot + "/cluster/id")
    assert document == {"version": "1", "id": created}  # "version" is a string in this node
    assert len(created) == 22 and uuid_from_base64(created)
    # A second broker proposing its own id adopts the one already in ZooKeeper.
    assert register(1, cluster_id="someOtherClusterIdxxxx").cluster_id == created
    assert read_json(root, chroot + "/cluster/id")["id"] == created


def test_cluster_id_proposed_when_missing(register, root, chroot):
    assert register(0, cluster_id="AAAAAAAAAAAAAAAAAAAAAA").cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"
    assert read_json(root, chroot + "/cluster/id")["id"] == "AAAAAAAAAAAAAAAAAAAAAA"


def test_start_returns_the_stored_id(connect):
    registration = BrokerRegistration(connect, 0, endpoints=PLAINTEXT)
    try:
        assert registration.start("proposed-id") == "proposed-id"
    finally:
        registration.stop()
    again = BrokerRegistration(connect, 0, endpoints=PLAINTEXT)
    try:
        assert again.start(None) == "proposed-id"
    finally:
        again.stop()


def test_duplicate_broker_id_refused(register, root, chroot):
    first = register(0, endpoints=[("PLAINTEXT", "127.0.0.1", 19092)])
    with pytest.raises(KcliError) as caught:
        register(0, endpoints=[("PLAINTEXT", "127.0.0.1", 29092)])
    message = str(caught.value)
    assert f"broker id 0 is already registered in ZooKeeper at {chroot}/brokers/ids/0 by 127.0.0.1:19092" in message
    # The refused broker left the first one's registration alone and holds no session.
    data, stat = root.get(chroot + "/brokers/ids/0")
    assert json.loads(data)["port"] == 19092 and stat.ephemeralOwner == first._client.client_id[0]


def test_registration_elects_nobody(register, root, chroot):
    """The election is the controller's (KafkaController.elect, tests/broker/test_controller_election.py): the
    registration writes the broker's node and the persistent paths, not /controller."""
    register(0)
    register(1)
    assert root.exists(chroot + "/controller") is None
    assert root.exists(chroot + "/controller_epoch") is None  # the first election creates it


def test_consumer_offsets_as_the_old_consumers_keep_them(register, root, chroot):
    """OffsetCommit/OffsetFetch v0 of a ZooKeeper-mode broker: /consumers/<group>/offsets/<topic>/<partition>,
    the offset as decimal text (Kafka's setOrCreateConsumerOffset / getConsumerOffset)."""
    registration = register(0)
    assert registration.consumer_offsets("old", [("t", 0)]) == {("t", 0): None}
    registration.set_consumer_offsets("old", {("t", 0): 42, ("t", 1): 7, ("u", 0): 0})
    assert root.get(chroot + "/consumers/old/offsets/t/0")[0] == b"42"
    assert root.get(chroot + "/consumers/old/offsets/u/0")[0] == b"0"
    registration.set_consumer_offsets("old", {("t", 0): 43})  # set, not create, the second time
    assert registration.consumer_offsets("old", [("t", 0), ("t", 1), ("t", 2), ("u", 0)]) == {
        ("t", 0): 43, ("t", 1): 7, ("t", 2): None, ("u", 0): 0}
    root.set(chroot + "/consumers/old/offsets/t/1", b"-1")  # Kafka reads any long back
    assert registration.consumer_offsets("old", [("t", 1)]) == {("t", 1): -1}
    root.set(chroot + "/consumers/old/offsets/t/1", b"seven")
    with pytest.raises(KcliError, match="does not hold an offset"):
        registration.consumer_offsets("old", [("t", 1)])
    for group in ("", ".", "..", "a/b"):
        with pytest.raises(InvalidGroupIdError):
            registration.set_consumer_offsets(group, {("t", 0): 1})
    assert root.get_children(chroot + "/consumers") == ["old"]


def test_nested_chroot_is_created(zookeeper, root):
    chroot = f"/t-{uuid.uuid4().hex}/kafka/cluster-1"
    assert root.exists(chroot) is None
    registration = BrokerRegistration(zookeeper.connect + chroot, 0, endpoints=PLAINTEXT)
    try:
        registration.start(None)
        assert root.exists(chroot + "/brokers/ids/0") is not None
    finally:
        registration.stop()


def test_stop_removes_ephemerals_only(connect, root, chroot):
    registration = BrokerRegistration(connect, 0, endpoints=PLAINTEXT)
    registration.start(None)
    # the controller's claim over this session (KafkaController.elect)
    KafkaZkClient.for_registration(registration).register_controller_and_increment_controller_epoch(0)
    assert read_json(root, chroot + "/controller")["brokerid"] == 0
    root.create(chroot + "/brokers/topics/t/partitions/0/state", b"{}", makepath=True)
    registration.stop()
    assert root.exists(chroot + "/brokers/ids/0") is None
    assert root.exists(chroot + "/controller") is None
    for path in ("/cluster/id", "/controller_epoch", "/brokers/topics/t/partitions/0/state"):
        assert root.exists(chroot + path) is not None, path
    registration.stop()  # twice is fine
    with pytest.raises(KcliError, match="not registered"):
        registration.consumer_offsets("g", [("t", 0)])


def test_stop_keeps_another_brokers_controller_node(register, root, chroot):
    KafkaZkClient.for_registration(register(0)).register_controller_and_increment_controller_epoch(0)
    follower = register(1)
    follower.stop()
    assert read_json(root, chroot + "/controller")["brokerid"] == 0
    assert root.exists(chroot + "/brokers/ids/0") is not None
    assert root.exists(chroot + "/brokers/ids/1") is None


def test_expired_session_registers_again(register, zookeeper, root, chroot):
    registration = register(0, session_timeout_ms=4000)
    events: list[str] = []
    registration.on_session_event(events.append)
    old_session = registration._client.client_id
    # Closing a second connection that shares the session id expires it, as a network partition would.
    twin = KazooClient(hosts=zookeeper.connect, client_id=old_session, timeout=4)
    twin.start(timeout=10)
    twin.stop()
    twin.close()

    def registered_again() -> bool:
        stat = root.exists(chroot + "/brokers/ids/0")
        client_id = registration._client.client_id
        return stat is not None and client_id is not None and stat.ephemeralOwner == client_id[0] != old_session[0]

    wait_for(registered_again, timeout=30)
    # what the controller hears (Kafka's Expire, then RegisterBrokerAndReelect), the node restored first
    wait_for(lambda: SESSION_REESTABLISHED in events, timeout=30)
    assert events[events.index(SESSION_REESTABLISHED) - 1] == SESSION_EXPIRED


@pytest.fixture
def proxy(zookeeper):
    """The session's ZooKeeper behind a TCP proxy the test can cut."""
    forward = TcpProxy(zookeeper.connect)
    forward.start()
    yield forward
    forward.stop()


def test_stop_while_disconnected_is_quick(proxy, chroot, caplog):
    registration = BrokerRegistration(proxy.connect + chroot, 0, endpoints=PLAINTEXT, session_timeout_ms=6000)
    registration.start(None)
    proxy.cut()
    wait_for(lambda: registration._client.state != "CONNECTED")
    started = time.monotonic()
    registration.stop()
    # Nothing is deleted through a dead connection (that waits STOP_TIMEOUT_S per node), nor the session awaited.
    assert time.monotonic() - started < 5
    assert "could not delete" not in caplog.text


def test_unreachable_zookeeper_fails_quickly():
    port = free_port()  # nothing listens on it
    registration = BrokerRegistration(f"127.0.0.1:{port}/kafka", 0, endpoints=PLAINTEXT)
    started = time.monotonic()
    with pytest.raises(KcliError, match=rf"ZooKeeper unreachable at 127\.0\.0\.1:{port}/kafka"):
        registration.start(None)
    assert time.monotonic() - started < 9  # a refused connection, not the 18 s session timeout
    registration.stop()  # nothing to undo


@pytest.mark.parametrize("text", ["", "127.0.0.1:2181/kafka/", "127.0.0.1:2181/a//b", "127.0.0.1:2181/a/../b",
                                     "127.0.0.1:notaport", "127.0.0.1:0"])
def test_bad_connect_strings(text):
    with pytest.raises(KcliError, match="zookeeper.connect"):
        BrokerRegistration(text, 0, endpoints=PLAINTEXT)


def test_connect_string_parsing():
    parsed = paths.parse_connect("zk1:2181,zk2,[::1]:2182/kafka/prod")
    assert parsed.hosts == (("zk1", 2181), ("zk2", 2181), ("::1", 2182))
    assert parsed.servers == "zk1:2181,zk2:2181,[::1]:2182"
    assert parsed.chroot == "/kafka/prod"
    assert parsed.absolute("/brokers/ids/0") == "/kafka/prod/brokers/ids/0"
    assert paths.parse_connect("zk1:2181/").chroot is None
