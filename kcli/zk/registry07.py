"""A 0.7 broker's presence in ZooKeeper, as Kafka 0.7's KafkaZooKeeper leaves it, in a chroot of its own.

    /brokers/ids/<broker id>              ephemeral, "<creator>:<host>:<port>" (creator: "<host>-<start millis>")
    /brokers/topics/<topic>/<broker id>   ephemeral, the topic's partition count on this broker, as text

0.7 clients that find brokers through ZooKeeper (the Scala ZookeeperConsumerConnector, franz-kafka) read these.
After a lost session the nodes are written again (0.7's SessionExpireListener). A node left by this broker's
previous life (a kill -9: the old session has not expired yet) is replaced; one naming another host or port is a
conflict, as 0.7's createEphemeralPathExpectConflict makes it. Kafka 0.7: kafka/server/KafkaZooKeeper.scala,
kafka/utils/ZkUtils.scala, kafka/cluster/Broker.scala.
"""

from __future__ import annotations

import logging
import threading
import time

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError

from kcli.errors import KcliError
from kcli.zk.errors import kazoo_errors, short_session, start_retrying_client

log = logging.getLogger("kcli.zk")

BROKER_IDS_PATH = "/brokers/ids"  # ZkUtils.BrokerIdsPath
BROKER_TOPICS_PATH = "/brokers/topics"  # ZkUtils.BrokerTopicsPath


def broker_id_path(broker_id: int) -> str:
    return f"{BROKER_IDS_PATH}/{broker_id}"


def broker_topic_path(topic: str, broker_id: int) -> str:
    return f"{BROKER_TOPICS_PATH}/{topic}/{broker_id}"


def broker_info(creator: str, host: str, port: int) -> str:
    """Broker.getZKString."""
    return f"{creator}:{host}:{port}"


def parse_broker_info(text: str) -> tuple[str, str, int]:
    """(creator, host, port) of a /brokers/ids/<id> value; the creator may hold ':' itself only before the last two."""
    creator, host, port = text.rsplit(":", 2)
    return creator, host, int(port)


def split_chroot(connect: str) -> tuple[str, str]:
    """("host:port,...", "/chroot") of a zk.connect string ("" when it has no chroot)."""
    hosts, slash, chroot = connect.partition("/")
    return hosts, ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else ""


class Registry07:
    """The broker's 0.7 registration; every call is synchronous and bounded by the session timeout."""

    def __init__(self, connect: str, broker_id: int, host: str, port: int, *, timeout: float = 6.0) -> None:
        self.connect = connect
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.timeout = timeout
        self.creator = f"{host}-{int(time.time() * 1000)}"
        self.topics: dict[str, int] = {}
        self.lock = threading.Lock()
        self.client: KazooClient | None = None
        self._lost = False

    def start(self) -> None:
        hosts, chroot = split_chroot(self.connect)
        if chroot:  # a chrooted client cannot create its own root
            with short_session(hosts, self.timeout) as root, self._zk("creating the chroot"):
                root.ensure_path(chroot)
        self.client = start_retrying_client(self.connect, self.connect, self.timeout, max_delay=1.0)
        self.client.add_listener(self._state_changed)
        try:
            self._register_all()
        except BaseException:
            self.close()  # a refused registration leaves no session behind
            raise

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            client.stop()
            client.close()

    def register_topic(self, topic: str, partitions: int) -> None:
        """KafkaZooKeeper.registerTopicInZk: this broker holds ``partitions`` partitions of ``topic``."""
        with self.lock:
            self.topics[topic] = partitions
        self._write(broker_topic_path(topic, self.broker_id), str(partitions))

    def _zk(self, doing: str):
        return kazoo_errors(f"ZooKeeper at {self.connect}", self.timeout, doing)

    def _register_all(self) -> None:
        self._write(broker_id_path(self.broker_id), broker_info(self.creator, self.host, self.port))
        with self.lock:
            topics = dict(self.topics)
        for topic, partitions in topics.items():
            self._write(broker_topic_path(topic, self.broker_id), str(partitions))

    def _write(self, path: str, value: str) -> None:
        client = self.client
        if client is None:
            return
        data = value.encode()
        with self._zk(f"registering {path}"):
            client.ensure_path(path.rsplit("/", 1)[0])
            try:
                client.create(path, data, ephemeral=True)
                return
            except NodeExistsError:
                pass
            try:
                old, stat = client.get(path)
            except NoNodeError:
                client.create(path, data, ephemeral=True)
                return
            if stat.ephemeralOwner == client.client_id[0]:
                if old != data:
                    client.set(path, data)
                return
            if path.startswith(BROKER_IDS_PATH) and not self._ours(old):
                raise KcliError(f"{path} is registered by another broker ({old.decode(errors='replace')}): "
                                f"this one is {self.host}:{self.port}")
            client.delete(path)  # a previous life of this broker whose session has not expired yet
            client.create(path, data, ephemeral=True)

    def _ours(self, old: bytes) -> bool:
        try:
            _creator, host, port = parse_broker_info(old.decode())
        except ValueError:
            return False
        return (host, port) == (self.host, self.port)

    def _state_changed(self, state: str) -> None:
        # Called on kazoo's thread, which must not block: a lost session is re-registered from a thread of ours.
        if state == KazooState.LOST:
            self._lost = True
        elif state == KazooState.CONNECTED and self._lost:
            self._lost = False
            threading.Thread(target=self._reregister, name="kafka07-zk-reregister", daemon=True).start()

    def _reregister(self) -> None:
        try:
            self._register_all()
            log.info("kafka07: registered broker %d again in ZooKeeper after a new session", self.broker_id)
        except KcliError as exc:
            log.warning("kafka07: could not register again in ZooKeeper: %s", exc)
