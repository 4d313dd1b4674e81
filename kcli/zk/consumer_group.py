"""The ZooKeeper side of an old (ZooKeeper-era) consumer group member: the ids node, the watches that start a
rebalance, owner claims and releases, and offsets under ``/consumers/<group>`` (Kafka 0.8.2's
ZookeeperConsumerConnector and ZkUtils), plus the layout a group's registry is in (Kafka's, or pykafka's).

kcli.client.zk_consumer runs the member over this (its GroupRegistry); nothing here fetches or prints.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState

from kcli.errors import KcliError
from kcli.records import old_consumer as oc
from kcli.zk import models, paths
from kcli.zk.errors import ZooKeeperConnectionError, kazoo_errors, start_retrying_client

CONSUMERS = paths.CONSUMERS


class GroupLayoutError(KcliError):
    """The group's registry is in another client's layout: joining would corrupt it."""


def group_dir(group: str) -> str:
    return paths.child(CONSUMERS, group)


def ids_dir(group: str) -> str:
    return f"{group_dir(group)}/ids"


def owners_dir(group: str, topic: str) -> str:
    return paths.child(f"{group_dir(group)}/owners", topic)


def owner_path(group: str, topic: str, partition: int) -> str:
    """ZkUtils.getConsumerPartitionOwnerPath: ``/consumers/<g>/owners/<t>/<p>``."""
    return f"{owners_dir(group, topic)}/{partition}"


# -- what a group's ids nodes say ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemberNode:
    """One child of ``/consumers/<group>/ids`` as read: Kafka's JSON (``subscription``), pykafka's bare topic
    name (``pykafka_topic``), or neither (``error``: reported and skipped)."""

    consumer_id: str
    subscription: oc.Subscription | None = None
    pykafka_topic: str | None = None
    error: str | None = None
    registration: models.ConsumerRegistration | None = None  # Kafka's, as parsed (with its timestamp)


def classify_member(where: str, consumer_id: str, data: bytes | None) -> MemberNode:
    """Tell the two layouts' ids nodes apart: a JSON object is Kafka's (and must parse as Kafka writes it); text
    that is a legal topic name and no JSON is pykafka's; anything else is malformed."""
    text = None
    if data:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    document = None
    if text is not None:
        try:
            document = json.loads(text)
        except ValueError:
            pass
    if isinstance(document, dict):
        try:
            registration = models.parse_consumer(where, data, consumer_id)
        except models.ZnodeFormatError as exc:
            return MemberNode(consumer_id, error=exc.reason)
        if registration.pattern not in oc.PATTERNS:
            return MemberNode(consumer_id, error=f"unknown pattern {registration.pattern!r}")
        if any(n < 1 for n in registration.subscription.values()):
            return MemberNode(consumer_id, error="a stream count below 1")
        return MemberNode(consumer_id, oc.Subscription(consumer_id, registration.subscription, registration.pattern),
                          registration=registration)
    if text is not None and oc.is_topic_name(text):  # also a topic named like a JSON number ("123")
        return MemberNode(consumer_id, pykafka_topic=text)
    return MemberNode(consumer_id, error="neither Kafka's JSON registration nor pykafka's topic name: "
                                         f"{(data or b'')[:60]!r}")


def layout_of(members: Iterable[MemberNode], owner_dirs: Iterable[str], owner_names: Iterable[str]) -> str | None:
    """kafka, pykafka, mixed, or None (nothing registered or owned that tells)."""
    kinds = set()
    for m in members:
        if m.subscription is not None:
            kinds.add(oc.KAFKA_LAYOUT)
        elif m.pykafka_topic is not None:
            kinds.add(oc.PYKAFKA_LAYOUT)
    if any(oc.pykafka_topic_of_owners_dir(d) is not None for d in owner_dirs):
        kinds.add(oc.PYKAFKA_LAYOUT)
    for name in owner_names:
        if name.isascii() and name.isdigit():
            kinds.add(oc.KAFKA_LAYOUT)
        elif oc.parse_pykafka_owner_name(name) is not None:
            kinds.add(oc.PYKAFKA_LAYOUT)
    if len(kinds) > 1:
        return "mixed"
    return next(iter(kinds), None)


# -- a member's view at one rebalance --------------------------------------------------------------------------------
@dataclass
class GroupSnapshot:
    """What a rebalance reads: the members (Kafka's layout, parsed), the ids nodes skipped as malformed, the
    pykafka members (a group in the other layout), every topic of the cluster, and the partitions of the
    topics some member subscribes to."""

    members: list[oc.Subscription]
    malformed: dict[str, str] = field(default_factory=dict)  # consumer id -> why it was skipped
    foreign: dict[str, str] = field(default_factory=dict)  # pykafka member id -> its topic
    topics: list[str] = field(default_factory=list)
    partitions: dict[str, list[int]] = field(default_factory=dict)


class ZkGroupMember:
    """One member's session with ZooKeeper (``connect``: ``host:port[,...][/chroot]``): its ephemeral ids and
    owner nodes live and die with the session (``session_timeout_s``, zookeeper.session.timeout.ms).

    Watch events and session expiry only set flags (``rebalance_needed``, ``session_renewed``): the member's
    loop acts on them, as ZookeeperConsumerConnector's watcher executor thread does.
    """

    def __init__(self, connect: str, group: str, *, session_timeout_s: float = 6.0, auth: str | None = None
                 ) -> None:
        self.connect = paths.parse_connect(connect)
        paths.child(CONSUMERS, group)  # refuses a group name that is no znode
        self.group = group
        self.session_timeout_s = session_timeout_s
        self.where = f"ZooKeeper at {self.connect.text}"
        self._changed = threading.Event()
        self._session_lost = threading.Event()
        self._registration: tuple[str, bytes] | None = None
        # kazoo's one timeout is the session timeout it asks for (the server bounds it by its tickTime)
        self._client = start_retrying_client(self.connect.hosts_with_chroot, self.connect.text, session_timeout_s,
                                             max_delay=1.0, auth=auth)
        self._client.add_listener(self._state)

    def _state(self, state: str) -> None:
        if state == KazooState.LOST:  # the session expired: our ephemerals are gone; re-register, rebalance
            self._session_lost.set()
            self._changed.set()

    def _watch(self, event: Any) -> None:
        self._changed.set()

    def _do(self, doing: str, path: str, call: Any, *args: Any, missing: Any = ..., exists: Any = ...,
            **kwargs: Any) -> Any:
        """One retried kazoo call; ``missing``/``exists``: what to return on NoNode/NodeExists instead of raising."""
        with kazoo_errors(self.where, self.session_timeout_s, f"{doing} {self.connect.absolute(path)}"):
            try:
                return self._client.retry(call, path, *args, **kwargs)
            except NoNodeError:
                if missing is ...:
                    raise
                return missing
            except NodeExistsError:
                if exists is ...:
                    raise
                return exists

    def close(self) -> None:
        """Delete the ids node and end the session (its owner nodes go with it)."""
        client = self._client
        try:
            if self._registration is not None and client.connected:
                try:
                    client.delete(paths.child(ids_dir(self.group), self._registration[0]))
                except Exception:  # closing: the session's end removes it anyway
                    pass
        finally:
            client.stop()
            client.close()

    # -- events --------------------------------------------------------------------------------------------------
    def take_rebalance(self) -> bool:
        """True once after each watch event or session renewal (and before the first rebalance)."""
        if self._changed.is_set():
            self._changed.clear()
            return True
        return False

    def request_rebalance(self) -> None:
        self._changed.set()

    def take_session_loss(self) -> bool:
        """True once after the session expired (kazoo has opened a new one, or is trying)."""
        if self._session_lost.is_set() and self._client.connected:
            self._session_lost.clear()
            return True
        return False

    # -- registration --------------------------------------------------------------------------------------------
    def register(self, consumer_id: str, data: bytes) -> None:
        """Create ``/consumers/<group>/ids/<consumerId>`` (ephemeral), after checking the group is in Kafka's
        layout; again after a session expiry (ZKSessionExpireListener.handleNewSession)."""
        self.check_layout()
        path = paths.child(ids_dir(self.group), consumer_id)
        self._registration = (consumer_id, data)
        if self._do("registering at", path, self._client.create, data, ephemeral=True, makepath=True,
                    exists=False) is False:
            raise KcliError(f"consumer id {consumer_id} is already registered in group {self.group}",
                            path=self.connect.absolute(path))
        self._changed.set()

    def reregister(self) -> None:
        if self._registration is not None:
            consumer_id, data = self._registration
            path = paths.child(ids_dir(self.group), consumer_id)
            self._do("registering at", path, self._client.create, data, ephemeral=True, makepath=True,
                     exists=None)

    def check_layout(self) -> None:
        """GroupLayoutError when pykafka's members or owner nodes are in the group."""
        members = self._members(watch=False)
        owner_dirs = self._children(f"{group_dir(self.group)}/owners")
        names = [n for d in owner_dirs for n in self._children(paths.child(f"{group_dir(self.group)}/owners", d))]
        layout = layout_of(members, owner_dirs, names)
        if layout in (oc.PYKAFKA_LAYOUT, "mixed"):
            raise GroupLayoutError(
                f"group {self.group} is in pykafka's registry layout (ids nodes holding a bare topic name, owner "
                "nodes named <leader>-<partition>): kctl's consumer would corrupt it; use another group, or stop "
                "the pykafka members and remove /consumers/" + self.group,
                path=self.connect.absolute(group_dir(self.group)))

    # -- reads -----------------------------------------------------------------------------------------------------
    def _children(self, path: str, watch: bool = False) -> list[str]:
        return sorted(self._do("listing", path, self._client.get_children, watch=self._watch if watch else None,
                               missing=[]))

    def _data(self, path: str, watch: bool = False) -> bytes | None:
        found = self._do("reading", path, self._client.get, watch=self._watch if watch else None, missing=None)
        if found is None and watch:  # a watch on a node that does not exist yet (a topic created later)
            self._do("watching", path, self._client.exists, watch=self._watch)
        return None if found is None else found[0]

    def _members(self, watch: bool) -> list[MemberNode]:
        base = ids_dir(self.group)
        out = []
        for consumer_id in self._children(base, watch=watch):
            path = paths.child(base, consumer_id)
            data = self._data(path)
            if data is None:
                continue  # gone between the listing and the read
            out.append(classify_member(self.connect.absolute(path), consumer_id, data))
        return out

    def snapshot(self, own: oc.Subscription) -> GroupSnapshot:
        """Members, topics and partitions for one rebalance, setting the watches that start the next: the ids
        children (ZKRebalancerListener), each subscribed topic's node (ZKTopicPartitionChangeListener: partitions
        added), and the topic list when a wildcard is subscribed (ZookeeperTopicEventWatcher)."""
        members = self._members(watch=True)
        snapshot = GroupSnapshot([m.subscription for m in members if m.subscription is not None])
        for m in members:
            if m.error is not None:
                snapshot.malformed[m.consumer_id] = m.error
            elif m.pykafka_topic is not None:
                snapshot.foreign[m.consumer_id] = m.pykafka_topic
        wildcard = any(s.pattern != oc.STATIC for s in [own, *snapshot.members])
        snapshot.topics = self._children(paths.BROKER_TOPICS, watch=wildcard)
        wanted = set()
        for member in [own, *snapshot.members]:
            wanted.update(oc.subscribed_topics(member, snapshot.topics))
        for topic in sorted(wanted):
            path = paths.topic(topic)
            data = self._data(path, watch=True)
            if data is None:
                continue  # subscribed but not created (yet): the exists watch tells when it is
            try:
                assignment = models.parse_topic(self.connect.absolute(path), data, topic)
            except models.ZnodeFormatError:
                continue
            snapshot.partitions[topic] = sorted(assignment.partitions)
        return snapshot

    # -- ownership -------------------------------------------------------------------------------------------------
    def claim(self, topic: str, partition: int, thread_id: str) -> bool:
        """createEphemeralPathExpectConflict: False while another thread's owner node is still there."""
        path = owner_path(self.group, topic, partition)
        if self._do("claiming", path, self._client.create, thread_id.encode(), ephemeral=True, makepath=True,
                    exists=False) is not False:
            return True
        return self._data(path) == thread_id.encode()  # ours already (a retry after a lost answer)

    def release(self, topic: str, partition: int) -> None:
        """deletePartitionOwnershipFromZK: delete the owner node (gone already is fine)."""
        self._do("releasing", owner_path(self.group, topic, partition), self._client.delete, missing=None)

    # -- offsets ---------------------------------------------------------------------------------------------------
    def read_offsets(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """fetchOffsetFromZooKeeper per partition; a partition without an offset node is left out, a malformed one
        raises ZnodeFormatError naming it."""
        out = {}
        for topic, partition in partitions:
            path = paths.consumer_offset(self.group, topic, partition)
            data = self._data(path)
            if data is not None:
                out[(topic, partition)] = models.parse_offset(self.connect.absolute(path), data)
        return out

    def write_offsets(self, offsets: Mapping[tuple[str, int], int]) -> None:
        """ZkUtils.updatePersistentPath per partition: plain decimal text, parents created when missing."""
        for (topic, partition), offset in sorted(offsets.items()):
            path = paths.consumer_offset(self.group, topic, partition)
            data = str(offset).encode()
            if self._do("writing", path, self._client.set, data, missing=False) is False:
                if self._do("writing", path, self._client.create, data, makepath=True, exists=False) is False:
                    self._do("writing", path, self._client.set, data)

    # -- brokers ---------------------------------------------------------------------------------------------------
    def bootstrap(self) -> str:
        """host:port of every registered broker (the old consumer found its brokers in ZooKeeper)."""
        addresses = []
        for name in self._children(paths.BROKER_IDS):
            if not name.isdigit():
                continue
            path = paths.broker(int(name))
            data = self._data(path)
            if data is None:
                continue
            broker = models.parse_broker(self.connect.absolute(path), data, int(name))
            if broker.host and broker.port > 0:
                addresses.append(f"{_bracket(broker.host)}:{broker.port}")
            elif broker.listeners:
                addresses.append(f"{_bracket(broker.listeners[0].host)}:{broker.listeners[0].port}")
        if not addresses:
            raise ZooKeeperConnectionError(f"no broker is registered in {self.where} (/brokers/ids is empty)")
        return ",".join(addresses)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host else host
