"""Read-only, Kafka-aware views of a ZooKeeper ensemble (what `kctl zk` shows). Nothing here writes.

Every call is bounded by ``timeout``; kazoo failures surface as KcliError subclasses: ZooKeeperConnectionError
(unreachable, lost), ZnodeMissingError (a path that does not exist), ZnodeAccessError (ACL refused) and
models.ZnodeFormatError (content Kafka would not write).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from kcli.errors import InputError, KcliError
from kcli.storage.cleanup_policy import CLEANUP_POLICY, LOG_CLEANUP_POLICY, KnownPolicies
from kcli.zk import models, paths
from kcli.zk.registration import ZooKeeperConnectionError, _describe, probe

DEFAULT_TIMEOUT_S = 10.0
CONFIG_TYPES = ("topics", "brokers", "clients", "users", "ips")
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = paths.REASSIGN_PARTITIONS
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
CONSUMERS = paths.CONSUMERS

__all__ = ["ZkRegistry", "ZnodeMissingError", "ZnodeAccessError", "ZooKeeperConnectionError"]


class ChrootMissingError(InputError):
    """The chroot of the connect string does not exist: nothing under it can be read (a typo, usually)."""


class ZnodeMissingError(KcliError):
    """The znode (or the chroot) does not exist."""


class ZnodeAccessError(KcliError):
    """ZooKeeper's ACLs refuse the read (digest auth missing or wrong)."""


@dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int | None  # None: no state znode yet; -1: no leader (offline)
    isr: tuple[int, ...]
    leader_epoch: int | None
    controller_epoch: int | None
    under_replicated: bool
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicView:
    name: str
    version: int
    topic_id: str | None
    partitions: tuple[PartitionView, ...]
    marked_for_deletion: bool

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)


@dataclass(frozen=True)
class ConsumerGroupView:
    group: str
    members: tuple[models.ConsumerRegistration, ...]  # Kafka's layout
    owners: dict[str, dict[int, str]]  # topic -> partition -> owner (pykafka's: by the topic, not b'topic')
    offsets: dict[str, dict[int, int]]
    layout: str | None = None  # kafka, pykafka, mixed, or None (nothing tells)
    pykafka_members: dict[str, str] = field(default_factory=dict)  # member id -> its topic
    malformed: dict[str, str] = field(default_factory=dict)  # ids node -> why it is neither layout's
    owner_leaders: dict[tuple[str, int], int] = field(default_factory=dict)  # pykafka: <leader>-<partition>
    owner_nodes: dict[tuple[str, int], list[str]] = field(default_factory=dict)  # every owner node's owner


@dataclass(frozen=True)
class ConsumerGroupSummary:
    group: str
    members: int
    topics: tuple[str, ...]  # topics with owners or stored offsets


@dataclass(frozen=True)
class AdminView:
    delete_topics: tuple[str, ...]
    reassignments: tuple[models.PartitionRequest, ...]  # /admin/reassign_partitions (before KIP-455)
    ongoing_reassignments: tuple[PartitionView, ...]  # partitions with adding/removing replicas (KIP-455)
    preferred_replica_election: tuple[models.PartitionRequest, ...]


@dataclass(frozen=True)
class Znode:
    path: str
    data: models.Decoded
    version: int
    ephemeral_owner: int
    ctime: int
    mtime: int
    data_length: int
    num_children: int


@dataclass
class TreeNode:
    path: str
    num_children: int
    children: list[TreeNode] = field(default_factory=list)


@dataclass(frozen=True)
class AclNode:
    pattern: Any  # kcli.protocol.acl.ResourcePattern
    entries: tuple[Any, ...]  # kcli.protocol.acl.AccessControlEntry
    version: int  # the node's zkVersion


class ZkRegistry:
    """Reads Kafka's registries from the ensemble named by ``connect`` (``host:port[,host:port][/chroot]``).

    Use as a context manager, or call close(); the session opens on first use.
    """

    def __init__(self, connect: str, *, timeout: float = DEFAULT_TIMEOUT_S, auth: str | None = None) -> None:
        self.connect = paths.parse_connect(connect)
        if auth is not None and ":" not in auth:
            raise KcliError("ZooKeeper digest auth must be given as user:password")
        self.timeout = timeout
        self.auth = auth
        self._client: KazooClient | None = None

    def __enter__(self) -> ZkRegistry:
        self._require()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.stop()
            client.close()

    # -- connection ----------------------------------------------------------------------------------
    def _require(self) -> KazooClient:
        if self._client is None:
            self._probe()
            retry = KazooRetry(max_tries=3, delay=0.1, max_delay=1.0)
            client = KazooClient(hosts=self.connect.hosts_with_chroot, timeout=self.timeout, connection_retry=retry,
                                 auth_data=[("digest", self.auth)] if self.auth else None, read_only=True)
            try:
                with warnings.catch_warnings():  # kazoo warns of a missing chroot; we say so below, as an error
                    warnings.filterwarnings("ignore", message="No chroot path exists")
                    client.start(timeout=self.timeout)
            except KazooTimeoutError:
                raise ZooKeeperConnectionError(f"ZooKeeper at {self.connect.text} accepted a connection but opened "
                                               f"no session within {self.timeout:g}s") from None
            except KazooException as exc:
                client.stop()
                client.close()
                raise ZooKeeperConnectionError(f"cannot connect to ZooKeeper at {self.connect.text}: "
                                               f"{_describe(exc)}") from None
            self._client = client
            if self.connect.chroot:
                try:
                    present = self._call("exists", "/", doing="looking for the chroot")
                except BaseException:
                    self.close()
                    raise
                if present is None:
                    self.close()
                    raise ChrootMissingError(f"the chroot does not exist in ZooKeeper at {self.connect.servers} "
                                             "(check the path after the host:port list)", path=self.connect.chroot)
        return self._client

    def _probe(self) -> None:
        probe(self.connect, self.timeout)

    @contextmanager
    def _zk(self, doing: str, path: str) -> Iterator[None]:
        where = self.connect.absolute(path)
        try:
            yield
        except NoNodeError:
            raise ZnodeMissingError("no such znode", path=where) from None
        except NoAuthError:
            raise ZnodeAccessError("ZooKeeper's ACL refuses the read (is --auth user:password right?)",
                                   path=where) from None
        except KazooTimeoutError:
            raise ZooKeeperConnectionError(f"ZooKeeper at {self.connect.text} did not answer within "
                                           f"{self.timeout:g}s while {doing} {where}") from None
        except (ConnectionLoss, ConnectionClosedError, SessionExpiredError) as exc:
            raise ZooKeeperConnectionError(f"lost the connection to ZooKeeper at {self.connect.text} while {doing} "
                                           f"{where} ({_describe(exc)})") from None
        except KazooException as exc:
            raise KcliError(f"ZooKeeper at {self.connect.text} refused {doing} {where}: {_describe(exc)}") from None

    def _call(self, method: str, path: str, *, doing: str = "reading") -> Any:
        client = self._require()
        with self._zk(doing, path):
            return getattr(client, f"{method}_async")(path).get(timeout=self.timeout)

    def _data(self, path: str) -> bytes:
        data, _ = self._call("get", path)
        return data

    def _children(self, path: str) -> list[str]:
        return sorted(self._call("get_children", path, doing="listing"))

    def _children_or_empty(self, path: str) -> list[str]:
        try:
            return self._children(path)
        except ZnodeMissingError:
            return []

    def _data_or_none(self, path: str) -> bytes | None:
        try:
            return self._data(path)
        except ZnodeMissingError:
            return None

    def _where(self, path: str) -> str:
        return self.connect.absolute(path)

    # -- Kafka's views ------------------------------------------------------------------------------
    def brokers(self) -> list[models.BrokerRegistration]:
        result = []
        for name in self._children_or_empty(paths.BROKER_IDS):
            if not name.lstrip("-").isdigit():
                continue
            path = paths.child(paths.BROKER_IDS, name)
            data = self._data_or_none(path)  # ephemeral: may go between the listing and the read
            if data is not None:
                result.append(models.parse_broker(self._where(path), data, int(name)))
        return sorted(result, key=lambda b: b.id)

    def topic_names(self) -> list[str]:
        return self._children_or_empty(paths.BROKER_TOPICS)

    def topics(self) -> list[TopicView]:
        deleting = set(self._children_or_empty(DELETE_TOPICS))
        result = []
        for name in self.topic_names():
            try:
                result.append(self._topic(name, deleting))
            except ZnodeMissingError as exc:
                if exc.path != self._where(paths.topic(name)):
                    raise
                # deleted between the listing and the read
        return result

    def topic(self, name: str) -> TopicView:
        return self._topic(name, set(self._children_or_empty(DELETE_TOPICS)))

    def _topic(self, name: str, deleting: set[str]) -> TopicView:
        path = paths.topic(name)
        assignment = models.parse_topic(self._where(path), self._data(path), name)
        partitions = []
        for index, replicas in assignment.partitions.items():
            state_path = paths.partition_state(name, index)
            data = self._data_or_none(state_path)
            state = models.parse_partition_state(self._where(state_path), data) if data is not None else None
            isr = state.isr if state else ()
            partitions.append(PartitionView(
                topic=name, partition=index, replicas=replicas, leader=state.leader if state else None, isr=isr,
                leader_epoch=state.leader_epoch if state else None,
                controller_epoch=state.controller_epoch if state else None,
                under_replicated=len(isr) < len(replicas),
                adding_replicas=assignment.adding_replicas.get(index, ()),
                removing_replicas=assignment.removing_replicas.get(index, ())))
        return TopicView(name, assignment.version, assignment.topic_id, tuple(partitions), name in deleting)

    def controller(self) -> models.Controller | None:
        """The active controller, or None when no broker holds /controller."""
        data = self._data_or_none(paths.CONTROLLER)
        return models.parse_controller(self._where(paths.CONTROLLER), data) if data is not None else None

    def controller_epoch(self) -> int | None:
        data = self._data_or_none(paths.CONTROLLER_EPOCH)
        return models.parse_controller_epoch(self._where(paths.CONTROLLER_EPOCH), data) if data is not None else None

    def cluster_id(self) -> models.ClusterId:
        return models.parse_cluster_id(self._where(paths.CLUSTER_ID), self._data(paths.CLUSTER_ID))

    def consumer_groups(self) -> list[ConsumerGroupSummary]:
        result = []
        for group in self._children_or_empty(CONSUMERS):
            base = paths.child(CONSUMERS, group)
            from kcli.records.old_consumer import pykafka_topic_of_owners_dir

            owned = {pykafka_topic_of_owners_dir(d) or d for d in self._children_or_empty(f"{base}/owners")}
            topics = owned | set(self._children_or_empty(f"{base}/offsets"))  # pykafka's b'topic' dirs by topic
            result.append(ConsumerGroupSummary(group, len(self._children_or_empty(f"{base}/ids")),
                                               tuple(sorted(topics))))
        return result

    def consumer_group(self, group: str) -> ConsumerGroupView:
        """The group's members, owners and offsets in either layout (Kafka's or pykafka's, told apart by the ids
        nodes and owner names); an ids node neither layout writes is reported in ``malformed``, not fatal."""
        from kcli.records import old_consumer as oc
        from kcli.zk.consumer_group import classify_member, layout_of

        base = paths.child(CONSUMERS, group)
        self._call("get", base)  # a missing group is an error, not an empty one
        nodes = []
        for member in self._children_or_empty(f"{base}/ids"):
            path = paths.child(f"{base}/ids", member)
            data = self._data_or_none(path)
            if data is not None:
                nodes.append(classify_member(self._where(path), member, data))
        members = tuple(n.registration for n in nodes if n.registration is not None)
        owner_dirs = self._children_or_empty(f"{base}/owners")
        owners: dict[str, dict[int, str]] = {}
        leaders: dict[tuple[str, int], int] = {}
        nodes_of: dict[tuple[str, int], list[str]] = {}
        names = []
        for directory in owner_dirs:
            topic = oc.pykafka_topic_of_owners_dir(directory) or directory
            topic_path = paths.child(f"{base}/owners", directory)
            for name in self._children_or_empty(topic_path):
                names.append(name)
                path = paths.child(topic_path, name)
                pykafka = oc.parse_pykafka_owner_name(name)
                if pykafka is not None:
                    leader, partition = pykafka
                elif name.isascii() and name.isdigit():
                    leader, partition = None, int(name)
                else:
                    raise models.ZnodeFormatError(f"{name!r} is not a partition number (Kafka's owner nodes) nor "
                                                  "<leader>-<partition> (pykafka's)", path=self._where(path))
                data = self._data_or_none(path)
                if data is None:
                    continue
                owner = models.parse_owner(self._where(path), data)
                owners.setdefault(topic, {})[partition] = owner
                nodes_of.setdefault((topic, partition), []).append(owner)
                if leader is not None:
                    leaders[(topic, partition)] = leader
        owners = {t: dict(sorted(ps.items())) for t, ps in sorted(owners.items())}
        return ConsumerGroupView(group, members, owners, self._per_partition(f"{base}/offsets", models.parse_offset),
                                 layout_of(nodes, owner_dirs, names),
                                 {n.consumer_id: n.pykafka_topic for n in nodes if n.pykafka_topic is not None},
                                 {n.consumer_id: n.error for n in nodes if n.error is not None}, leaders,
                                 nodes_of)

    def _per_partition(self, base: str, parse: Any) -> dict[str, dict[int, Any]]:
        result: dict[str, dict[int, Any]] = {}
        for topic in self._children_or_empty(base):
            topic_path = paths.child(base, topic)
            values = {}
            for name in self._children_or_empty(topic_path):
                path = paths.child(topic_path, name)
                if not name.isdigit():
                    raise models.ZnodeFormatError(f"{name!r} is not a partition number", path=self._where(path))
                data = self._data_or_none(path)
                if data is not None:
                    values[int(name)] = parse(self._where(path), data)
            result[topic] = dict(sorted(values.items()))
        return result

    def configs(self) -> list[models.ConfigEntity]:
        """Dynamic config overrides: topics, brokers (incl. <default>), clients, users, ips."""
        result = []
        for entity_type in CONFIG_TYPES:
            base = f"/config/{entity_type}"
            for name in self._children_or_empty(base):
                path = paths.child(base, name)
                data = self._data_or_none(path)
                if data is not None:
                    result.append(models.parse_config(self._where(path), data, entity_type, name))
        return result

    def acls(self) -> list[AclNode]:
        """The ACL nodes (/kafka-acl, /kafka-acl-extended/prefixed) with their entries and zkVersion; a node Kafka
        could not read raises ZnodeFormatError naming it."""
        from kcli.protocol.acl import PatternType, ResourcePattern, ResourceType
        from kcli.zk import acls as layout

        result = []
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            root = layout.STORES[pattern_type]
            for type_name in self._children_or_empty(root):
                for name in self._children_or_empty(paths.child(root, type_name)):
                    path = paths.child(paths.child(root, type_name), name)
                    try:
                        data, stat = self._call("get", path)
                    except ZnodeMissingError:
                        continue  # removed since listed
                    try:
                        pattern = ResourcePattern(ResourceType.parse(type_name), name, pattern_type)
                        entries = layout.decode_acls(data)
                    except (ValueError, KeyError, TypeError) as exc:
                        raise models.ZnodeFormatError(f"not an ACL node as Kafka writes it: {exc}",
                                                      path=self._where(path)) from None
                    result.append(AclNode(pattern, tuple(sorted(entries, key=str)), stat.version))
        return result

    def cleanup_policies(self) -> KnownPolicies:
        """Every topic's ``cleanup.policy`` as the brokers apply it: the override under ``/config/topics``, else
        the dynamic cluster default ``log.cleanup.policy`` under ``/config/brokers/<default>``, else Kafka's."""
        overrides, default = {}, None
        for entity in self.configs():
            if entity.entity_type == "topics" and CLEANUP_POLICY in entity.config:
                overrides[entity.name] = entity.config[CLEANUP_POLICY]
            elif entity.entity_type == "brokers" and entity.name == "<default>":
                default = entity.config.get(LOG_CLEANUP_POLICY)
        where = f"ZooKeeper {self.connect.text}"
        if default is None:
            return KnownPolicies(where, overrides, frozenset(self.topic_names()))
        return KnownPolicies(where, overrides, frozenset(self.topic_names()), default,
                             "the cluster default log.cleanup.policy in /config/brokers/<default>")

    def admin(self) -> AdminView:
        reassign = self._data_or_none(REASSIGN_PARTITIONS)
        election = self._data_or_none(PREFERRED_REPLICA_ELECTION)
        ongoing = [p for t in self.topics() for p in t.partitions if p.adding_replicas or p.removing_replicas]
        return AdminView(
            delete_topics=tuple(self._children_or_empty(DELETE_TOPICS)),
            reassignments=models.parse_partition_list(self._where(REASSIGN_PARTITIONS), reassign, with_replicas=True)
            if reassign else (),
            ongoing_reassignments=tuple(ongoing),
            preferred_replica_election=models.parse_partition_list(
                self._where(PREFERRED_REPLICA_ELECTION), election, with_replicas=False) if election else ())

    # -- generic --------------------------------------------------------------------------------------
    def ls(self, path: str) -> list[str]:
        return self._children(_normalise(path))

    def get(self, path: str) -> Znode:
        path = _normalise(path)
        data, stat = self._call("get", path)
        return Znode(path, models.decode(data), stat.version, stat.ephemeralOwner, stat.ctime, stat.mtime,
                     stat.dataLength, stat.numChildren)

    def tree(self, path: str = "/", depth: int | None = None) -> TreeNode:
        path = _normalise(path)
        stat = self._call("exists", path)
        if stat is None:
            raise ZnodeMissingError("no such znode", path=self._where(path))
        node = TreeNode(path, stat.numChildren)
        if depth is None or depth > 0:
            for name in self._children_or_empty(path):
                child = (path.rstrip("/") + "/" + name)
                try:
                    node.children.append(self.tree(child, None if depth is None else depth - 1))
                except ZnodeMissingError:
                    continue  # gone meanwhile (ephemeral)
        return node


def _normalise(path: str) -> str:
    if not path.startswith("/"):
        path = "/" + path
    if len(path) > 1:
        path = path.rstrip("/")
    if any(part in (".", "..") for part in path.split("/")) or "\0" in path:
        raise KcliError(f"{path!r} is not a valid znode path")
    return path
