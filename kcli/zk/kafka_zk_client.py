"""KafkaZkClient: Kafka's ZooKeeper reads and writes for the controller, topic creators and partition leaders
(kafka.zk.KafkaZkClient, kafka.utils.ReplicationUtils), over a broker's kazoo session.

Controller writes are fenced: each goes as ``multi{check(/controller_epoch, epochZkVersion), op}``, and a failed
check raises ControllerMovedError (another controller was elected since; the caller resigns). Partition state
nodes are compare-and-set on their zkVersion, the partition epoch. Watches follow Kafka's ZooKeeperClient:
handlers are registered per path, a read of a path with a handler sets the one-shot watch, and unregistering
a handler mutes a watch still set in ZooKeeper. Handlers run on kazoo's event thread and must only enqueue.

Every call is synchronous and bounded by the session timeout; failures are KcliError subclasses.
"""

from __future__ import annotations

import json

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, WatchedEvent

from kcli.errors import KcliError
from kcli.storage.checkpoint import uuid_from_base64, uuid_to_base64
from kcli.zk import models, paths
from kcli.zk.models import LeaderAndIsr, LeaderIsrAndControllerEpoch, TopicPartition
from kcli.zk.errors import ZooKeeperConnectionError
from kcli.zk.errors import describe as _describe, kazoo_errors

log = logging.getLogger("kcli.zk")

__all__ = [
    "BrokerAndEpoch",
    "ControllerMovedError",
    "ElectionInProgressError",
    "InvalidReplicaAssignmentError",
    "KafkaZkClient",
    "TopicAlreadyMarkedForDeletionError",
    "TopicExistsError",
    "UnknownTopicError",
    "UpdateLeaderAndIsrResult",
    "ZNodeChangeHandler",
    "ZooKeeperConnectionError",
]


LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"
PRODUCER_ID_BLOCK_SIZE = 1000  # Kafka's ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE


class ControllerMovedError(KcliError):
    """A controller write's /controller_epoch check failed: another controller was elected since
    (Kafka's ControllerMovedException). The controller resigns."""

    error_code = "NOT_CONTROLLER"


class TopicExistsError(KcliError):
    """The topic exists, or is marked for deletion (Kafka's TopicExistsException)."""

    error_code = "TOPIC_ALREADY_EXISTS"


class UnknownTopicError(KcliError):
    """No such topic in ZooKeeper (Kafka's UnknownTopicOrPartitionException)."""

    error_code = "UNKNOWN_TOPIC_OR_PARTITION"


class TopicAlreadyMarkedForDeletionError(KcliError):
    """/admin/delete_topics/<topic> exists already."""


class ElectionInProgressError(KcliError):
    """/admin/preferred_replica_election exists already: the controller has not finished the last one."""


class InvalidReplicaAssignmentError(KcliError):
    """A replica assignment Kafka would refuse: gaps in the partition numbers, duplicate or negative ids,
    replication factors that differ, existing partitions changed."""

    error_code = "INVALID_REPLICA_ASSIGNMENT"


@dataclass(frozen=True)
class BrokerAndEpoch:
    """A live broker's registration and its broker epoch (the czxid of /brokers/ids/<id>)."""

    broker: models.BrokerRegistration
    epoch: int

    @property
    def id(self) -> int:
        return self.broker.id


@dataclass(frozen=True)
class UpdateLeaderAndIsrResult:
    """KafkaZkClient.UpdateLeaderAndIsrResult: the written states (their new partition epochs) or the error
    per partition, and the partitions to re-read and decide again (BADVERSION: someone wrote meanwhile)."""

    finished: dict[TopicPartition, LeaderAndIsr | Exception]
    retry: list[TopicPartition]


@dataclass(frozen=True)
class ZNodeChangeHandler:
    """Callbacks for one path's exists/data watch (kazoo's event thread: enqueue only)."""

    on_created: Callable[[], None] | None = None
    on_deleted: Callable[[], None] | None = None
    on_data_change: Callable[[], None] | None = None


def _now_ms() -> str:
    return str(int(time.time() * 1000))


class KafkaZkClient:
    """Kafka's znode operations over ``client`` (a started kazoo client, chrooted as the broker's)."""

    def __init__(self, client: KazooClient | Callable[[], KazooClient], *, timeout: float,
                 where: str = "ZooKeeper") -> None:
        # a kazoo client, or where to find the session's (a registration's, which may not be connected yet)
        self._client: Callable[[], KazooClient] = client if callable(client) else lambda: client
        self._timeout = timeout
        self._where = where
        self._lock = threading.Lock()
        self._child_handlers: dict[str, Callable[[], None]] = {}
        self._change_handlers: dict[str, ZNodeChangeHandler] = {}

    @classmethod
    def for_registration(cls, registration: Any) -> KafkaZkClient:
        """A client over a kcli.zk.registration.BrokerRegistration's session: built before the registration starts (the broker's
        services are given it at construction), usable once it has."""
        return cls(lambda: registration.zk_client, timeout=registration.session_timeout_ms / 1000,
                   where=f"ZooKeeper at {registration.connect.text}")

    @property
    def _zk(self) -> KazooClient:
        return self._client()

    # -- plumbing ----------------------------------------------------------------------------------------------
    def _zk_call(self, doing: str):
        return kazoo_errors(self._where, self._timeout, doing)

    def _gather(self, pending: Sequence[Any], doing: str) -> list[Any]:
        """Results of async calls sent together (pipelined, as Kafka's ZooKeeperClient does); a per-call
        ZooKeeper error comes back as the exception, a lost connection or a timeout raises."""
        deadline = time.monotonic() + self._timeout
        out: list[Any] = []
        with self._zk_call(doing):
            for item in pending:
                try:
                    out.append(item.get(timeout=max(0.0, deadline - time.monotonic())))
                except (ConnectionLoss, ConnectionClosedError, SessionExpiredError):
                    raise
                except KazooException as exc:
                    out.append(exc)
        return out

    def _one(self, pending: Any, doing: str) -> Any:
        """One async call's result; the ZooKeeper errors callers act on (no node, node exists, bad version) are
        raised as kazoo's, any other as KcliError."""
        result = self._gather([pending], doing)[0]
        if isinstance(result, (NoNodeError, NodeExistsError, BadVersionError)):
            raise result
        if isinstance(result, Exception):
            raise KcliError(f"{self._where} refused {doing}: {_describe(result)}")
        return result

    def _checked(self, expected_controller_epoch_zk_version: int, op: Callable[[Any], None]) -> Any:
        """One controller write, fenced: ``multi{check(/controller_epoch, version), op}`` (async result)."""
        transaction = self._zk.transaction()
        transaction.check(paths.CONTROLLER_EPOCH, expected_controller_epoch_zk_version)
        op(transaction)
        return transaction.commit_async()

    def _unwrap_checked(self, results: Any, expected_controller_epoch_zk_version: int) -> Any:
        """The op's result (or its error); a failed epoch check raises ControllerMovedError."""
        if isinstance(results, Exception):
            return results
        check, result = results
        if isinstance(check, Exception) and not isinstance(check, RolledBackError):
            raise ControllerMovedError(f"{paths.CONTROLLER_EPOCH} is no longer at version "
                                       f"{expected_controller_epoch_zk_version} in {self._where}: another "
                                       f"controller was elected ({_describe(check)})")
        return result

    def _checked_all(self, ops: Sequence[Callable[[Any], None]], expected_controller_epoch_zk_version: int,
                     doing: str) -> list[Any]:
        pending = [self._checked(expected_controller_epoch_zk_version, op) for op in ops]
        return [self._unwrap_checked(r, expected_controller_epoch_zk_version) for r in self._gather(pending, doing)]

    # -- watches (ZooKeeperClient's handler registry) ----------------------------------------------------------
    def register_child_change_handler(self, path: str, handler: Callable[[], None]) -> None:
        """``handler()`` when the children of ``path`` change; armed by the next read of them with watch."""
        with self._lock:
            self._child_handlers[path] = handler

    def unregister_child_change_handler(self, path: str) -> None:
        with self._lock:
            self._child_handlers.pop(path, None)

    def register_change_handler_and_check_existence(self, path: str, handler: ZNodeChangeHandler) -> bool:
        """Register ``handler`` for ``path`` and arm its watch; True if the node exists."""
        with self._lock:
            self._change_handlers[path] = handler
        return self._one(self._zk.exists_async(path, watch=self._on_data_event), f"watching {path}") is not None

    def register_change_handler(self, path: str, handler: ZNodeChangeHandler) -> None:
        """Register ``handler`` for ``path``; the next read of the node arms its watch."""
        with self._lock:
            self._change_handlers[path] = handler

    def unregister_change_handler(self, path: str) -> None:
        with self._lock:
            self._change_handlers.pop(path, None)

    def on_reconnect(self, callback: Callable[[], None]) -> Callable[[], None]:
        """``callback()`` (on kazoo's thread: enqueue only) each time the connection is back, in the same session or
        a new one, whose watches are gone (Kafka's StateChangeHandler.afterInitializingSession); returns the undo."""
        from kazoo.protocol.states import KazooState

        def listener(state: Any) -> None:
            if state == KazooState.CONNECTED:
                callback()

        self._zk.add_listener(listener)
        return lambda: self._zk.remove_listener(listener)

    def unregister_all_handlers(self) -> None:
        """Mute every watch (controller resignation); those still set in ZooKeeper fire into nothing."""
        with self._lock:
            self._child_handlers.clear()
            self._change_handlers.clear()

    def _child_watch(self, path: str) -> Callable[[WatchedEvent], None] | None:
        with self._lock:
            return self._on_child_event if path in self._child_handlers else None

    def _data_watch(self, path: str) -> Callable[[WatchedEvent], None] | None:
        with self._lock:
            return self._on_data_event if path in self._change_handlers else None

    def _on_child_event(self, event: WatchedEvent) -> None:
        if event.type == EventType.NONE:
            return
        with self._lock:
            handler = self._child_handlers.get(event.path)
        if handler is not None and event.type == EventType.CHILD:
            handler()

    def _on_data_event(self, event: WatchedEvent) -> None:
        with self._lock:
            handler = self._change_handlers.get(event.path)
        if handler is None:
            return
        callback = {EventType.CREATED: handler.on_created, EventType.DELETED: handler.on_deleted,
                    EventType.CHANGED: handler.on_data_change}.get(event.type)
        if callback is not None:
            callback()

    # -- generic reads -----------------------------------------------------------------------------------------
    def get_children(self, path: str, *, watch: bool = False) -> list[str]:
        """Children of ``path`` (sorted); [] if it does not exist. ``watch`` arms a registered child handler."""
        watcher = self._child_watch(path) if watch else None
        try:
            return sorted(self._one(self._zk.get_children_async(path, watch=watcher), f"listing {path}"))
        except NoNodeError:
            return []

    def get_data_and_version(self, path: str) -> tuple[bytes, int] | None:
        """The node's data and zkVersion, None if absent (sets the watch of a registered change handler)."""
        try:
            data, stat = self._one(self._zk.get_async(path, watch=self._data_watch(path)), f"reading {path}")
        except NoNodeError:
            return None
        return data, stat.version

    def exists(self, path: str) -> bool:
        return self._one(self._zk.exists_async(path, watch=self._data_watch(path)), f"looking for {path}") is not None

    def _get_many(self, nodes: Sequence[str], doing: str) -> list[tuple[bytes, Any] | None]:
        pending = [self._zk.get_async(path, watch=self._data_watch(path)) for path in nodes]
        out: list[tuple[bytes, Any] | None] = []
        for path, result in zip(nodes, self._gather(pending, doing)):
            if isinstance(result, NoNodeError):
                out.append(None)
            elif isinstance(result, Exception):
                raise KcliError(f"{self._where} refused reading {path}: {_describe(result)}")
            else:
                out.append(result)
        return out

    # -- controller: /controller, /controller_epoch ----------------------------------------------------------
    def get_controller_id(self) -> int | None:
        found = self.get_data_and_version(paths.CONTROLLER)
        return models.parse_controller(paths.CONTROLLER, found[0]).broker_id if found else None

    def get_controller_epoch(self) -> tuple[int, int] | None:
        """(epoch, zkVersion) of /controller_epoch, None if absent."""
        found = self.get_data_and_version(paths.CONTROLLER_EPOCH)
        return (models.parse_controller_epoch(paths.CONTROLLER_EPOCH, found[0]), found[1]) if found else None

    def get_controller_claim(self) -> tuple[int | None, bool] | None:
        """Who holds /controller and whether this session's ephemeral node it is (a claim made before a dropped
        connection); None if nobody does. Sets the watch of a registered /controller change handler."""
        try:
            data, stat = self._one(self._zk.get_async(paths.CONTROLLER, watch=self._data_watch(paths.CONTROLLER)),
                                   f"reading {paths.CONTROLLER}")
        except NoNodeError:
            return None
        client_id = self._zk.client_id
        ours = client_id is not None and stat.ephemeralOwner == client_id[0]
        try:
            broker_id: int | None = models.parse_controller(paths.CONTROLLER, data).broker_id
        except KcliError:
            broker_id = None
        return broker_id, ours

    def register_controller_and_increment_controller_epoch(self, controller_id: int) -> tuple[int, int]:
        """Claim /controller for ``controller_id`` (ephemeral) and bump /controller_epoch in one transaction (Kafka's
        KafkaZkClient.registerControllerAndIncrementControllerEpoch); returns the new epoch and the zkVersion of
        /controller_epoch it left, the fencing token of every controller write after it. Raises
        ControllerMovedError when another broker holds /controller or moved the epoch first."""
        found = self.get_controller_epoch()
        epoch, epoch_zk_version = found if found is not None else self._maybe_create_controller_epoch_znode()
        new_epoch = epoch + 1
        claim = json.dumps({"version": 1, "brokerid": controller_id, "timestamp": _now_ms()},
                           separators=(",", ":")).encode()
        transaction = self._zk.transaction()
        transaction.create(paths.CONTROLLER, claim, ephemeral=True)
        transaction.set_data(paths.CONTROLLER_EPOCH, str(new_epoch).encode(), epoch_zk_version)
        results = self._gather([transaction.commit_async()], "electing the controller")[0]
        if isinstance(results, Exception):
            raise KcliError(f"{self._where} refused electing the controller: {_describe(results)}")
        create, set_data = results
        if not isinstance(create, Exception) and not isinstance(set_data, Exception):
            return new_epoch, set_data.version
        if isinstance(create, NodeExistsError) or isinstance(set_data, BadVersionError):
            # Kafka's checkControllerAndEpoch: the transaction may be ours, retried after a dropped connection
            claim_now = self.get_controller_claim()
            now = self.get_controller_epoch()
            if claim_now is not None and claim_now == (controller_id, True) and now is not None and now[0] == new_epoch:
                return now
            raise ControllerMovedError(f"the controller moved to broker {claim_now[0] if claim_now else None} in "
                                       f"{self._where}: not elected")
        failure = next(r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError))
        raise KcliError(f"{self._where} refused electing the controller: {_describe(failure)}")

    def _maybe_create_controller_epoch_znode(self) -> tuple[int, int]:
        """/controller_epoch with Kafka's initial epoch 0 (KafkaZkClient.maybeCreateControllerEpochZNode)."""
        try:
            self._one(self._zk.create_async(paths.CONTROLLER_EPOCH, b"0"), f"creating {paths.CONTROLLER_EPOCH}")
        except NodeExistsError:
            found = self.get_controller_epoch()
            if found is None:
                raise KcliError(f"{paths.CONTROLLER_EPOCH} keeps changing in {self._where}") from None
            return found
        return 0, 0

    def delete_controller_if_ours(self) -> bool:
        """Give up /controller if this session's ephemeral node it is (a controller that resigned, possibly while
        the connection was down); True if it was deleted here."""
        stat = self._one(self._zk.exists_async(paths.CONTROLLER), f"reading {paths.CONTROLLER}")
        client_id = self._zk.client_id
        if stat is None or client_id is None or stat.ephemeralOwner != client_id[0]:
            return False
        try:
            self._one(self._zk.delete_async(paths.CONTROLLER, stat.version), f"deleting {paths.CONTROLLER}")
        except (NoNodeError, BadVersionError):
            return False
        return True

    def delete_controller(self, expected_controller_epoch_zk_version: int) -> None:
        """Give up /controller, fenced (KafkaController.triggerControllerMove): the brokers elect again."""
        self._delete_all([paths.CONTROLLER], expected_controller_epoch_zk_version)

    # -- brokers ---------------------------------------------------------------------------------------------
    def get_all_broker_ids(self, *, watch: bool = False) -> list[int]:
        return sorted(int(c) for c in self.get_children(paths.BROKER_IDS, watch=watch) if c.isdigit())

    def get_all_brokers_and_epochs(self, *, watch: bool = False) -> dict[int, BrokerAndEpoch]:
        """Every registered broker with its endpoints, rack and epoch (KafkaZkClient.getAllBrokerAndEpochsInCluster);
        ``watch`` arms the /brokers/ids child handler. A broker gone between the listing and the read is left out."""
        ids = self.get_all_broker_ids(watch=watch)
        nodes = [paths.broker(i) for i in ids]
        out = {}
        for broker_id, path, found in zip(ids, nodes, self._get_many(nodes, "reading the broker registrations")):
            if found is not None:
                data, stat = found
                out[broker_id] = BrokerAndEpoch(models.parse_broker(path, data, broker_id), stat.czxid)
        return out

    def get_broker(self, broker_id: int) -> BrokerAndEpoch | None:
        """One broker's registration (sets its data watch if a change handler is registered for it)."""
        path = paths.broker(broker_id)
        found = self._get_many([path], f"reading {path}")[0]
        if found is None:
            return None
        data, stat = found
        return BrokerAndEpoch(models.parse_broker(path, data, broker_id), stat.czxid)

    # -- topics ----------------------------------------------------------------------------------------------
    def get_all_topics(self, *, watch: bool = False) -> set[str]:
        return set(self.get_children(paths.BROKER_TOPICS, watch=watch))

    def get_topic_assignments(self, topics: Iterable[str]) -> dict[str, tuple[models.TopicAssignment, int]]:
        """Each existing topic's znode (assignment, adding/removing replicas, topic id) and its zkVersion; sets
        the data watches of registered PartitionModifications handlers."""
        names = sorted(set(topics))
        nodes = [paths.topic(t) for t in names]
        out = {}
        for name, path, found in zip(names, nodes, self._get_many(nodes, "reading the topic assignments")):
            if found is not None:
                out[name] = (models.parse_topic(path, found[0], name), found[1].version)
        return out

    def get_topic_configs(self, topic: str) -> dict[str, str]:
        """The overrides in /config/topics/<topic> ({} without the node)."""
        path = paths.topic_config(topic)
        found = self.get_data_and_version(path)
        return models.parse_config(path, found[0], "topics", topic).config if found else {}

    def topic_config(self, topic: str) -> dict[str, str]:
        """The overrides of one topic (what topic creators and LeaderAndIsr handling read)."""
        return self.get_topic_configs(topic)

    def topic_configs(self) -> dict[str, dict[str, str]]:
        """The overrides of every topic with a /config/topics node."""
        names = self.get_children(paths.CONFIG_TOPICS)
        nodes = [paths.topic_config(t) for t in names]
        return {name: models.parse_config(path, found[0], "topics", name).config
                for name, path, found in zip(names, nodes, self._get_many(nodes, "reading topic configs"))
                if found is not None}

    def set_topic_config(self, topic: str, config: Mapping[str, str]) -> None:
        """Write a topic's overrides, then a /config/changes/config_change_<seq> node (version 2) so that every
        broker applies them (AdminZkClient.changeTopicConfig)."""
        self._set_or_create_config(topic, dict(config))
        prefix = paths.child(paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX)
        self._one(self._zk.create_async(prefix, models.encode_config_change("topics", topic), sequence=True,
                                        makepath=True), "writing a config change notification")

    def entity_config(self, entity_type: str, name: str) -> dict[str, str]:
        """The configs in /config/<type>/<name> ({} without the node): AdminZkClient.fetchEntityConfig."""
        path = paths.entity_config(entity_type, name)
        found = self.get_data_and_version(path)
        return models.parse_config(path, found[0], entity_type, name).config if found else {}

    def set_entity_config(self, entity_type: str, name: str, config: Mapping[str, str]) -> None:
        """Write /config/<type>/<name>, then its change notification (AdminZkClient.changeEntityConfig, e.g.
        changeBrokerConfig for "brokers")."""
        self._set_or_create_config(name, dict(config), paths.entity_config(entity_type, name))
        prefix = paths.child(paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX)
        self._one(self._zk.create_async(prefix, models.encode_config_change(entity_type, name), sequence=True,
                                        makepath=True), "writing a config change notification")

    def set_data_versioned(self, path: str, data: bytes, expected_version: int) -> int:
        """Compare-and-set of one node: create it (with its parents) when ``expected_version`` is -1, else replace
        its data if its zkVersion is still ``expected_version``. Answers the new version; kcli.errors.BadVersion
        when someone else changed (or created) it since it was read. The read-modify-write of shared entity
        configs (SCRAM credentials and quotas share /config/users/<user>) loops on this."""
        from kcli.errors import BadVersion

        try:
            if expected_version == -1:
                self._one(self._zk.create_async(path, data, makepath=True), f"creating {path}")
                return 0
            return self._one(self._zk.set_async(path, data, version=expected_version), f"writing {path}").version
        except (BadVersionError, NodeExistsError, NoNodeError):
            raise BadVersion(f"{path} changed since it was read (expected version {expected_version})",
                             path=path) from None

    def delete_versioned(self, path: str, expected_version: int) -> bool:
        """Delete one node if its zkVersion is still ``expected_version`` (-1: any); False when it is gone;
        kcli.errors.BadVersion when it changed (a quota node someone wrote meanwhile)."""
        from kcli.errors import BadVersion

        try:
            self._one(self._zk.delete_async(path, expected_version), f"deleting {path}")
        except NoNodeError:
            return False
        except BadVersionError:
            raise BadVersion(f"{path} changed since it was read", path=path) from None
        return True

    def create_config_change_notification(self, entity_type: str, name: str) -> None:
        """/config/changes/config_change_<seq> = ``{"version":2,"entity_path":"<type>/<name>"}``
        (KafkaZkClient.createConfigChangeNotification)."""
        prefix = paths.child(paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX)
        self._one(self._zk.create_async(prefix, models.encode_config_change(entity_type, name), sequence=True,
                                        makepath=True), "writing a config change notification")

    def get_config_change_notifications(self, *, watch: bool = False) -> list[str]:
        """The config_change_<seq> nodes under /config/changes, oldest first (``watch`` arms a registered child
        handler: ZkNodeChangeNotificationListener)."""
        return [c for c in self.get_children(paths.CONFIG_CHANGES, watch=watch) if c.startswith(paths.CONFIG_CHANGE_PREFIX)]

    def read_config_changes(self, nodes: Sequence[str]) -> list[tuple[str, tuple[str, str] | None, int]]:
        """Per notification node: (node, (entity type, name) or None if gone or malformed, ctime in ms)."""
        found = self._get_many([paths.child(paths.CONFIG_CHANGES, n) for n in nodes], "reading config changes")
        out: list[tuple[str, tuple[str, str] | None, int]] = []
        for node, item in zip(nodes, found):
            if item is None:
                out.append((node, None, 0))
                continue
            try:
                entity = models.parse_config_change(paths.child(paths.CONFIG_CHANGES, node), item[0])
            except KcliError:
                entity = None
            out.append((node, entity, int(item[1].ctime)))
        return out

    def delete_config_changes(self, nodes: Sequence[str]) -> None:
        """Purge processed notifications (unfenced, as ZkNodeChangeNotificationListener.purgeObsoleteNotifications;
        another broker deleting the same node first is fine)."""
        pending = [self._zk.delete_async(paths.child(paths.CONFIG_CHANGES, n)) for n in nodes]
        for node, result in zip(nodes, self._gather(pending, "purging config change notifications")):
            if isinstance(result, Exception) and not isinstance(result, NoNodeError):
                raise KcliError(f"{self._where} refused deleting {paths.CONFIG_CHANGES}/{node}: {_describe(result)}")

    def set_topic_assignment(self, topic: str, assignment: models.TopicAssignment,
                             expected_controller_epoch_zk_version: int, *, expected_version: int = -1) -> int:
        """Controller write of a topic znode (missing topic ids, reassignment, restored assignments)."""
        path = paths.topic(topic)
        data = models.encode_topic(assignment.partitions, assignment.topic_id,
                                   adding_replicas=assignment.adding_replicas,
                                   removing_replicas=assignment.removing_replicas)
        result = self._checked_all([lambda t: t.set_data(path, data, expected_version)],
                                   expected_controller_epoch_zk_version, f"writing {path}")[0]
        if isinstance(result, Exception):
            raise KcliError(f"{self._where} refused writing {path}: {_describe(result)}")
        return result.version

    # -- partition states --------------------------------------------------------------------------------------
    def get_topic_partition_states(self, partitions: Iterable[TopicPartition]
                                   ) -> dict[TopicPartition, LeaderIsrAndControllerEpoch | None]:
        """Each state node's leadership, with the node's zkVersion as ``partition_epoch``; None if absent."""
        wanted = list(dict.fromkeys(partitions))
        nodes = [paths.partition_state(tp.topic, tp.partition) for tp in wanted]
        out: dict[TopicPartition, LeaderIsrAndControllerEpoch | None] = {}
        for tp, path, found in zip(wanted, nodes, self._get_many(nodes, "reading partition states")):
            out[tp] = (models.decode_leader_isr_and_controller_epoch(path, found[0], found[1].version)
                       if found is not None else None)
        return out

    def create_topic_partition_states(self, states: Mapping[TopicPartition, LeaderIsrAndControllerEpoch],
                                      expected_controller_epoch_zk_version: int) -> dict[TopicPartition, Exception | None]:
        """Create the /partitions parents and the state nodes, each write fenced (createTopicPartitionStatesRaw).
        None for a created node, the ZooKeeper error otherwise (NodeExistsError: a state is there already)."""
        if not states:
            return {}
        topics = sorted({tp.topic for tp in states})
        parents = [paths.topic_partitions(t) for t in topics]
        parents += [paths.partition(tp.topic, tp.partition) for tp in sorted(states)]
        for parent, result in zip(parents, self._checked_all(
                [_create(p, b"") for p in parents], expected_controller_epoch_zk_version, "creating partitions")):
            if isinstance(result, Exception) and not isinstance(result, NodeExistsError):
                raise KcliError(f"{self._where} refused creating {parent}: {_describe(result)}")
        wanted = sorted(states)
        ops = [_create(paths.partition_state(tp.topic, tp.partition), models.encode_partition_state(states[tp]))
               for tp in wanted]
        results = self._checked_all(ops, expected_controller_epoch_zk_version, "creating partition states")
        return {tp: (r if isinstance(r, Exception) else None) for tp, r in zip(wanted, results)}

    def update_partition_states(self, leader_and_isrs: Mapping[TopicPartition, LeaderAndIsr], controller_epoch: int,
                                expected_controller_epoch_zk_version: int) -> UpdateLeaderAndIsrResult:
        """The controller's CAS write of state nodes (KafkaZkClient.updateLeaderAndIsr): each at the version in
        its ``partition_epoch``; success gives the new partition epoch, BADVERSION a retry."""
        wanted = sorted(leader_and_isrs)
        ops = []
        for tp in wanted:
            leadership = leader_and_isrs[tp]
            data = models.encode_partition_state(LeaderIsrAndControllerEpoch(leadership, controller_epoch))
            ops.append(_set(paths.partition_state(tp.topic, tp.partition), data, leadership.partition_epoch))
        finished: dict[TopicPartition, LeaderAndIsr | Exception] = {}
        retry: list[TopicPartition] = []
        try:
            results = self._checked_all(ops, expected_controller_epoch_zk_version, "writing partition states")
        except ControllerMovedError:
            raise
        except KcliError as exc:
            return UpdateLeaderAndIsrResult({tp: exc for tp in wanted}, [])
        for tp, result in zip(wanted, results):
            if isinstance(result, BadVersionError):
                retry.append(tp)
            elif isinstance(result, Exception):
                finished[tp] = KcliError(f"{self._where} refused writing the state of {tp}: {_describe(result)}")
            else:
                finished[tp] = leader_and_isrs[tp].with_partition_epoch(result.version)
        return UpdateLeaderAndIsrResult(finished, retry)

    # -- preferred replica election: /admin/preferred_replica_election -----------------------------------------
    def get_preferred_replica_election(self) -> set[TopicPartition]:
        """The partitions the node names (empty if it is absent); a malformed node raises ZnodeFormatError."""
        found = self.get_data_and_version(paths.PREFERRED_REPLICA_ELECTION)
        if found is None:
            return set()
        requests = models.parse_partition_list(paths.PREFERRED_REPLICA_ELECTION, found[0], with_replicas=False)
        return {TopicPartition(r.topic, r.partition) for r in requests}

    def delete_preferred_replica_election(self, expected_controller_epoch_zk_version: int) -> None:
        """The controller's delete after the election, fenced (deletePreferredReplicaElection); absent is fine."""
        self._delete_all([paths.PREFERRED_REPLICA_ELECTION], expected_controller_epoch_zk_version)

    def create_preferred_replica_election(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Ask the controller for a preferred replica election, as the legacy tool does
        (kafka-preferred-replica-election.sh --zookeeper). Raises ElectionInProgressError if one is pending."""
        path = paths.PREFERRED_REPLICA_ELECTION
        data = models.encode_preferred_replica_election(sorted(set(partitions)))
        try:
            self._one(self._zk.create_async(path, data, makepath=True), f"creating {path}")
        except NodeExistsError:
            raise ElectionInProgressError("a preferred replica leader election is already in progress "
                                          f"({path} exists)") from None

    # -- partition leaders: the ZK-direct ISR path (IBP < 2.7-IV2) --------------------------------------------
    def update_leader_and_isr(self, topic: str, partition: int, leader: int, leader_epoch: int, isr: Sequence[int],
                              controller_epoch: int, expected_version: int, *,
                              leader_recovery_state: int = models.RECOVERED) -> int | None:
        """A leader's ISR write (ReplicationUtils.updateLeaderAndIsr): set the state node at ``expected_version``
        (the partition epoch the leader knows); the new zkVersion, or None if the node changed meanwhile. On
        BADVERSION the node is re-read: holding exactly this state (a retried write that had succeeded) counts as
        success. ``controller_epoch`` is the one from the LeaderAndIsr that made this broker leader. Raises
        ZooKeeperConnectionError when ZooKeeper does not answer."""
        path = paths.partition_state(topic, partition)
        wanted = LeaderIsrAndControllerEpoch(
            LeaderAndIsr(leader, leader_epoch, tuple(isr), leader_recovery_state), controller_epoch)
        try:
            stat = self._one(self._zk.set_async(path, models.encode_partition_state(wanted), expected_version),
                             f"writing {path}")
            return stat.version
        except NoNodeError:
            return None
        except BadVersionError:
            pass
        found = self.get_data_and_version(path)
        if found is None:
            return None
        try:
            written = models.decode_leader_isr_and_controller_epoch(path, found[0], found[1])
        except models.ZnodeFormatError:
            return None
        if written == LeaderIsrAndControllerEpoch(wanted.leader_and_isr.with_partition_epoch(found[1]),
                                                  controller_epoch):
            return found[1]
        return None

    def allocate_producer_id_block(self, broker_id: int, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> tuple[int, int]:
        """The next block of producer ids, unique in the cluster (Kafka's ZkProducerIdManager before IBP 3.0):
        /latest_producer_id_block holds the last block handed out, {"version":1,"broker":N,"block_start":"0",
        "block_end":"999"} (the ends are strings); the next starts after it. Conditional writes, retried."""
        path = LATEST_PRODUCER_ID_BLOCK
        for _ in range(100):
            found = self.get_data_and_version(path)
            start = 0
            if found is not None and found[0]:
                try:
                    start = int(json.loads(found[0])["block_end"]) + 1
                except (ValueError, KeyError, TypeError):
                    raise KcliError(f"{path} holds no producer id block: {found[0][:200]!r}") from None
            end = start + block_size - 1
            data = json.dumps({"version": 1, "broker": broker_id, "block_start": str(start), "block_end": str(end)},
                              separators=(",", ":")).encode()
            try:
                if found is None:
                    self._one(self._zk.create_async(path, data, makepath=True), f"creating {path}")
                else:
                    self._one(self._zk.set_async(path, data, found[1]), f"writing {path}")
                return start, end
            except (NodeExistsError, BadVersionError):
                continue  # another broker took a block meanwhile: read again
        raise KcliError(f"{path} kept changing while allocating a producer id block")

    def propagate_isr_changes(self, partitions: Iterable[tuple[str, int]]) -> str:
        """Write one /isr_change_notification/isr_change_<seq> node naming ``partitions`` (a leader's batched ISR
        changes); returns its path."""
        data = models.encode_isr_change_notification(sorted(set(partitions)))
        prefix = paths.child(paths.ISR_CHANGE_NOTIFICATION, paths.ISR_CHANGE_PREFIX)
        return self._one(self._zk.create_async(prefix, data, sequence=True, makepath=True),
                         "writing an ISR change notification")

    # -- controller: notifications ---------------------------------------------------------------------------
    def get_all_isr_change_notifications(self, *, watch: bool = False) -> list[str]:
        """Sequence numbers of the /isr_change_notification children (``watch`` arms the child handler)."""
        return _sequence_numbers(self.get_children(paths.ISR_CHANGE_NOTIFICATION, watch=watch),
                                 paths.ISR_CHANGE_PREFIX)

    def get_partitions_from_isr_change_notifications(self, sequence_numbers: Iterable[str]) -> set[TopicPartition]:
        nodes = [paths.isr_change_notification(s) for s in sequence_numbers]
        out: set[TopicPartition] = set()
        for path, found in zip(nodes, self._get_many(nodes, "reading ISR change notifications")):
            if found is not None:
                out.update(TopicPartition(t, p) for t, p in models.parse_isr_change_notification(path, found[0]))
        return out

    def delete_isr_change_notifications(self, expected_controller_epoch_zk_version: int,
                                        sequence_numbers: Iterable[str] | None = None) -> None:
        """Delete the given notifications, fenced; without ``sequence_numbers``, all of them (the listing arms a
        registered child handler, as at controller failover)."""
        if sequence_numbers is None:
            sequence_numbers = self.get_all_isr_change_notifications(watch=True)
        self._delete_all([paths.isr_change_notification(s) for s in sequence_numbers],
                         expected_controller_epoch_zk_version)

    def get_all_log_dir_event_notifications(self, *, watch: bool = False) -> list[str]:
        return _sequence_numbers(self.get_children(paths.LOG_DIR_EVENT_NOTIFICATION, watch=watch),
                                 paths.LOG_DIR_EVENT_PREFIX)

    def get_broker_ids_from_log_dir_events(self, sequence_numbers: Iterable[str]) -> list[int]:
        nodes = [paths.log_dir_event_notification(s) for s in sequence_numbers]
        found = self._get_many(nodes, "reading log dir event notifications")
        return sorted({models.parse_log_dir_event(p, f[0]) for p, f in zip(nodes, found) if f is not None})

    def delete_log_dir_event_notifications(self, expected_controller_epoch_zk_version: int,
                                           sequence_numbers: Iterable[str] | None = None) -> None:
        if sequence_numbers is None:
            sequence_numbers = self.get_all_log_dir_event_notifications(watch=True)
        self._delete_all([paths.log_dir_event_notification(s) for s in sequence_numbers],
                         expected_controller_epoch_zk_version)

    # -- controller: topic deletion ----------------------------------------------------------------------------
    def get_topic_deletions(self, *, watch: bool = False) -> set[str]:
        return set(self.get_children(paths.ADMIN_DELETE_TOPICS, watch=watch))

    def delete_topic_deletions(self, topics: Iterable[str], expected_controller_epoch_zk_version: int) -> None:
        self._delete_all([paths.topic_deletion(t) for t in topics], expected_controller_epoch_zk_version)

    def delete_topic_znode(self, topic: str, expected_controller_epoch_zk_version: int) -> None:
        """/brokers/topics/<topic> and everything under it, each delete fenced (deleteRecursive)."""
        self._delete_recursive(paths.topic(topic), expected_controller_epoch_zk_version)

    def delete_topic_configs(self, topics: Iterable[str], expected_controller_epoch_zk_version: int) -> None:
        self._delete_all([paths.topic_config(t) for t in topics], expected_controller_epoch_zk_version)

    # -- controller: /admin/reassign_partitions (the legacy reassignment trigger) ----------------------------------
    def reassign_partitions_in_progress(self) -> bool:
        """Whether /admin/reassign_partitions exists (sets its watch if a change handler is registered)."""
        return self.exists(paths.REASSIGN_PARTITIONS)

    def get_partition_reassignment(self) -> dict[TopicPartition, tuple[int, ...]]:
        """The target replicas per partition in /admin/reassign_partitions ({} without the node). Content that does
        not parse is ignored with a warning, as Kafka's getPartitionReassignment does; of duplicate entries the
        last one counts."""
        path = paths.REASSIGN_PARTITIONS
        found = self.get_data_and_version(path)
        if found is None:
            return {}
        try:
            entries = models.parse_partition_list(path, found[0], with_replicas=True)
        except models.ZnodeFormatError as exc:
            log.warning("ignoring the partition reassignment in %s: %s", path, exc)
            return {}
        return {TopicPartition(e.topic, e.partition): tuple(e.replicas or ()) for e in entries}

    def set_or_create_partition_reassignment(self, reassignment: Mapping[TopicPartition, Sequence[int]],
                                             expected_controller_epoch_zk_version: int) -> None:
        """Controller write of /admin/reassign_partitions (the entries still to do), fenced; created if absent."""
        path = paths.REASSIGN_PARTITIONS
        data = models.encode_partition_reassignment((tp.topic, tp.partition, replicas)
                                                    for tp, replicas in sorted(reassignment.items()))
        result = self._checked_all([_set(path, data, -1)], expected_controller_epoch_zk_version, f"writing {path}")[0]
        if isinstance(result, NoNodeError):
            result = self._checked_all([_create(path, data)], expected_controller_epoch_zk_version,
                                       f"creating {path}")[0]
        if isinstance(result, Exception):
            raise KcliError(f"{self._where} refused writing {path}: {_describe(result)}")

    def delete_partition_reassignment(self, expected_controller_epoch_zk_version: int) -> None:
        """Delete /admin/reassign_partitions, fenced (all its partitions are done)."""
        self._delete_recursive(paths.REASSIGN_PARTITIONS, expected_controller_epoch_zk_version)

    def _delete_all(self, nodes: Sequence[str], expected_controller_epoch_zk_version: int) -> None:
        results = self._checked_all([_delete(p) for p in nodes], expected_controller_epoch_zk_version,
                                    "deleting znodes")
        for path, result in zip(nodes, results):
            if isinstance(result, Exception) and not isinstance(result, NoNodeError):
                raise KcliError(f"{self._where} refused deleting {path}: {_describe(result)}")

    def _delete_recursive(self, path: str, expected_controller_epoch_zk_version: int) -> None:
        for child in self.get_children(path):
            self._delete_recursive(paths.child(path, child), expected_controller_epoch_zk_version)
        self._delete_all([path], expected_controller_epoch_zk_version)

    # -- topic creators (any broker; AdminZkClient) ---------------------------------------------------------------
    def create_topic(self, name: str, assignment: Mapping[int, Sequence[int]], topic_id: uuid.UUID | str | None = None,
                     configs: Mapping[str, str] | None = None) -> str:
        """Write /config/topics/<name>, then /brokers/topics/<name> (version 3, with the topic id), as
        AdminZkClient.createTopicWithAssignment does; returns the topic id as Kafka prints it. The controller's
        topic watch does the rest. TopicExistsError if the topic exists or is marked for deletion."""
        topic_path = paths.topic(name)
        _validate_assignment(name, assignment)
        topic_id_text = _topic_id_text(topic_id)
        if self.exists(topic_path):
            raise TopicExistsError(f"Topic '{name}' already exists.")
        if self.exists(paths.topic_deletion(name)):
            raise TopicExistsError(f"Topic '{name}' is marked for deletion.")
        self._set_or_create_config(name, dict(configs or {}))
        data = models.encode_topic({p: list(r) for p, r in assignment.items()}, topic_id_text)
        try:
            self._one(self._zk.create_async(topic_path, data, makepath=True), f"creating {topic_path}")
        except NodeExistsError:
            raise TopicExistsError(f"Topic '{name}' already exists.") from None
        return topic_id_text

    def add_partitions(self, name: str, full_assignment: Mapping[int, Sequence[int]]) -> None:
        """Rewrite /brokers/topics/<name> with the existing partitions (unchanged) plus new ones; the topic id
        and any reassignment state are kept. The controller's data watch creates the new partitions."""
        path = paths.topic(name)
        found = self.get_data_and_version(path)
        if found is None:
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        current = models.parse_topic(path, found[0], name)
        _validate_assignment(name, full_assignment)
        for partition, replicas in current.partitions.items():
            if tuple(full_assignment.get(partition, ())) != tuple(replicas):
                raise InvalidReplicaAssignmentError(
                    f"the assignment of existing partition {partition} of topic '{name}' cannot change "
                    f"({list(replicas)} -> {list(full_assignment.get(partition, []))})")
        data = models.encode_topic({p: list(r) for p, r in full_assignment.items()}, current.topic_id,
                                   adding_replicas=current.adding_replicas, removing_replicas=current.removing_replicas)
        try:
            self._one(self._zk.set_async(path, data, found[1]), f"writing {path}")
        except BadVersionError:
            raise KcliError(f"{path} changed while partitions were being added to topic '{name}'; "
                            "try again") from None
        except NoNodeError:
            raise UnknownTopicError(f"Topic '{name}' does not exist.") from None

    def delete_topic(self, name: str) -> None:
        """Mark the topic for deletion: /admin/delete_topics/<name> (AdminZkClient.deleteTopic)."""
        if not self.exists(paths.topic(name)):
            raise UnknownTopicError(f"Topic '{name}' does not exist.")
        path = paths.topic_deletion(name)
        try:
            self._one(self._zk.create_async(path, b"", makepath=True), f"creating {path}")
        except NodeExistsError:
            raise TopicAlreadyMarkedForDeletionError(f"Topic '{name}' is already marked for deletion.") from None

    def _set_or_create_config(self, name: str, config: dict[str, str], path: str | None = None) -> None:
        path = path or paths.topic_config(name)
        data = models.encode_config(config)
        try:
            self._one(self._zk.set_async(path, data), f"writing {path}")
        except NoNodeError:
            try:
                self._one(self._zk.create_async(path, data, makepath=True), f"creating {path}")
            except NodeExistsError:
                self._one(self._zk.set_async(path, data), f"writing {path}")


def _create(path: str, data: bytes) -> Callable[[Any], None]:
    return lambda transaction: transaction.create(path, data)


def _set(path: str, data: bytes, version: int) -> Callable[[Any], None]:
    return lambda transaction: transaction.set_data(path, data, version)


def _delete(path: str) -> Callable[[Any], None]:
    return lambda transaction: transaction.delete(path)


def _sequence_numbers(children: Iterable[str], prefix: str) -> list[str]:
    return sorted(c[len(prefix):] for c in children if c.startswith(prefix))


def _topic_id_text(topic_id: uuid.UUID | str | None) -> str:
    if topic_id is None:
        return models.new_cluster_id()  # a random Kafka Uuid, never starting with "-"
    if isinstance(topic_id, uuid.UUID):
        return uuid_to_base64(topic_id)
    try:
        uuid_from_base64(topic_id)
    except ValueError as exc:
        raise KcliError(f"topic id {topic_id!r} is not a Kafka Uuid: {exc}") from None
    return topic_id


def _validate_assignment(name: str, assignment: Mapping[int, Sequence[int]]) -> None:
    """AdminZkClient.validateTopicCreate's assignment rules."""
    if not assignment:
        raise InvalidReplicaAssignmentError(f"topic '{name}': the assignment names no partition")
    if sorted(assignment) != list(range(len(assignment))):
        raise InvalidReplicaAssignmentError(
            f"topic '{name}': partitions should be a consecutive 0-based integer sequence, got {sorted(assignment)}")
    factors = {len(r) for r in assignment.values()}
    if len(factors) != 1 or 0 in factors:
        raise InvalidReplicaAssignmentError(f"topic '{name}': all partitions should have the same, non-zero number "
                                            "of replicas")
    for partition, replicas in assignment.items():
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignmentError(f"topic '{name}': duplicate replica assignment found for partition "
                                                f"{partition}: {list(replicas)}")
        if any(r < 0 for r in replicas):
            raise InvalidReplicaAssignmentError(f"topic '{name}': negative broker id in partition {partition}: "
                                                f"{list(replicas)}")
