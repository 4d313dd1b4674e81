"""Znode paths of Kafka's ZooKeeper layout (kafka.zk.ZkData, 2.0-3.9) and the `zookeeper.connect` string.

Every path is relative to the chroot; the kazoo client adds the chroot. This module is the only place
path strings are spelled out.
"""

from __future__ import annotations

from dataclasses import dataclass

from kcli.errors import KcliError

DEFAULT_PORT = 2181

CLUSTER = "/cluster"
CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
BROKER_SEQID = "/brokers/seqid"
CONFIG_TOPICS = "/config/topics"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"  # ConfigEntityChangeNotificationSequenceZNode
ADMIN_DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"  # ReassignPartitionsZNode: the legacy (pre-KIP-455) trigger
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"  # PreferredReplicaElectionZNode (legacy tools)
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"  # IsrChangeNotificationSequenceZNode: persistent sequential children
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
LOG_DIR_EVENT_PREFIX = "log_dir_event_"
CONSUMERS = "/consumers"

# ZkData.PersistentZkPaths: every Kafka broker creates these at startup, and Kafka's tools expect them.
PERSISTENT = (
    CONSUMERS,
    BROKER_IDS,
    BROKER_TOPICS,
    CONFIG_CHANGES,
    ADMIN_DELETE_TOPICS,
    BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION,
    "/latest_producer_id_block",
    LOG_DIR_EVENT_NOTIFICATION,
    CONFIG_TOPICS,
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
)


def child(parent: str, name: str) -> str:
    # A name is one znode: a "/" or a "."/".." segment would address some other node.
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise KcliError(f"{name!r} cannot name a znode under {parent}")
    return f"{parent}/{name}"


def broker(broker_id: int) -> str:
    """BrokerIdZNode: the ephemeral registration of one broker."""
    return child(BROKER_IDS, str(broker_id))


def topic(name: str) -> str:
    """TopicZNode: the replica assignment of a topic."""
    return child(BROKER_TOPICS, name)


def topic_partitions(name: str) -> str:
    return f"{topic(name)}/partitions"


def partition(name: str, index: int) -> str:
    return f"{topic_partitions(name)}/{index}"


def partition_state(name: str, index: int) -> str:
    """TopicPartitionStateZNode: leader, leader epoch and ISR of one partition."""
    return f"{partition(name, index)}/state"


def consumer_offset(group: str, topic_name: str, index: int) -> str:
    """ConsumerOffset: the old consumers' committed offset of one partition (plain decimal text)."""
    return f"{child(child(CONSUMERS, group) + '/offsets', topic_name)}/{index}"


def topic_config(name: str) -> str:
    """ConfigEntityZNode for a topic: its dynamic configuration overrides."""
    return child(CONFIG_TOPICS, name)


def entity_config(entity_type: str, name: str) -> str:
    """ConfigEntityZNode of any entity: /config/<type>/<name> ("brokers" and "<default>" for the cluster-wide
    broker defaults, ConfigEntityName.Default)."""
    return child(f"/config/{entity_type}", name)


def topic_deletion(name: str) -> str:
    """DeleteTopicsTopicZNode: a topic marked for deletion (AdminZkClient.deleteTopic)."""
    return child(ADMIN_DELETE_TOPICS, name)


def isr_change_notification(sequence: str) -> str:
    """One IsrChangeNotificationSequenceZNode, by its 10-digit sequence number."""
    return child(ISR_CHANGE_NOTIFICATION, ISR_CHANGE_PREFIX + sequence)


def log_dir_event_notification(sequence: str) -> str:
    return child(LOG_DIR_EVENT_NOTIFICATION, LOG_DIR_EVENT_PREFIX + sequence)


@dataclass(frozen=True)
class ConnectString:
    """`zookeeper.connect` taken apart: ``host:port[,host:port...][/chroot]``."""

    text: str
    servers: str  # the host list as kazoo takes it, without the chroot
    hosts: tuple[tuple[str, int], ...]
    chroot: str | None

    @property
    def hosts_with_chroot(self) -> str:
        return self.servers + (self.chroot or "")

    def absolute(self, path: str) -> str:
        """The path as seen from ZooKeeper's root, for messages."""
        return (self.chroot or "") + path


def parse_connect(text: str) -> ConnectString:
    """Split and check a connect string; a bad one raises KcliError naming what is wrong."""
    servers, slash, chroot = text.strip().partition("/")
    hosts = tuple(_host_port(item.strip(), text) for item in servers.split(",") if item.strip())
    if not hosts:
        raise KcliError(f"zookeeper.connect {text!r} names no ZooKeeper server")
    root: str | None = None
    if slash and chroot:
        root = "/" + chroot
        # ZooKeeper's PathUtils.validatePath rules, checked here so the error names the setting.
        if root.endswith("/") or any(part in ("", ".", "..") for part in chroot.split("/")) or "\0" in root:
            raise KcliError(f"zookeeper.connect {text!r} has an invalid chroot path {root!r}")
    return ConnectString(text, ",".join(f"{_bracket(h)}:{p}" for h, p in hosts), hosts, root)


def _host_port(item: str, text: str) -> tuple[str, int]:
    if item.startswith("["):  # IPv6 literal: [::1]:2181
        host, _, rest = item[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else rest
    elif item.count(":") > 1:  # a bare IPv6 address carries no port
        host, port_text = item, ""
    else:
        host, _, port_text = item.partition(":")
    try:
        port = int(port_text) if port_text else DEFAULT_PORT
    except ValueError:
        port = -1
    if not host or not 0 < port < 65536:
        raise KcliError(f"zookeeper.connect {text!r}: {item!r} is not host:port")
    return host, port


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
