"""Dynamic topic configs in a cluster: every broker applies what any broker wrote (Kafka's ZkConfigManager over a
ZkNodeChangeNotificationListener on /config/changes).

A broker that changes a topic's overrides (AlterConfigs, IncrementalAlterConfigs, CreateTopics) writes
/config/topics/<topic>, then a sequential /config/changes/config_change_<seq> node. Every broker watches the
children of /config/changes, re-reads the configs of the topics named by notifications newer than the last it
processed, and hands them to TopicAdmin: its logs use them from their next append, retention pass or cleaning,
and DescribeConfigs answers them. Dynamic broker configs (KIP-226) travel the same way: a notification for
/config/brokers/<default> or /config/brokers/<this broker's id> is read and applied (Kafka's BrokerConfigHandler).
SCRAM credentials too: a notification for users/<user> re-reads /config/users/<user> into the broker's credential
cache (Kafka's UserConfigHandler), so a credential kafka-configs writes straight to ZooKeeper is usable at once.
Client quotas: users/<u>, users/<u>/clients/<c>, clients/<c> (and <default>) re-read the entity's node into the
broker's ClientQuotaManager (Kafka's QuotaConfigHandler), applied from the next request on.
Notifications older than 15 minutes are purged (changeExpirationMs).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from kcli.broker.dynamic_config import DEFAULT_ENTITY
from kcli.errors import KcliError
from kcli.zk import models
from kcli.zk.quotas import entity_of

log = logging.getLogger("kcli.broker")

CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # ZkNodeChangeNotificationListener's default
_PREFIX_LEN = len("config_change_")


class ConfigChangeListener:
    """Processes /config/changes on the event loop; ZooKeeper reads run in a worker thread."""

    def __init__(self, zk: Any, admin: Any, loop: asyncio.AbstractEventLoop, credentials: Any = None,
                 quotas: Any = None) -> None:
        self.zk = zk  # kcli.zk.kafka_zk_client.KafkaZkClient
        self.admin = admin  # kcli.broker.topic_admin.TopicAdmin
        self.credentials = credentials  # kcli.broker.security.credentials.CredentialCache, or None
        self.quotas = quotas  # kcli.broker.quotas.ClientQuotaManager, or None
        self.loop = loop
        self.last_executed = -1  # the sequence number of the last notification processed
        self._pending = False
        self._running: asyncio.Task | None = None
        self._undo_reconnect: Any = None
        self.processed = 0

    def start(self) -> None:
        from kcli.zk import paths

        self.zk.register_child_change_handler(paths.CONFIG_CHANGES, self._on_children_changed)
        # a new session has no watches: read again (and re-arm) whenever the connection comes back
        self._undo_reconnect = self.zk.on_reconnect(self._on_children_changed)
        self._on_children_changed()  # the notifications already there, and arm the watch

    def stop(self) -> None:
        from kcli.zk import paths

        self.zk.unregister_child_change_handler(paths.CONFIG_CHANGES)
        if self._undo_reconnect is not None:
            self._undo_reconnect()
        if self._running is not None:
            self._running.cancel()

    def _on_children_changed(self) -> None:
        """kazoo's event thread (or start()): enqueue only."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._schedule)

    def _schedule(self) -> None:
        self._pending = True
        if self._running is None or self._running.done():
            self._running = self.loop.create_task(self._process())

    async def _process(self) -> None:
        while self._pending:
            self._pending = False
            try:
                changes = await asyncio.to_thread(self._read)
            except Exception as exc:  # noqa: BLE001 - a lost session re-arms on the next event; keep serving
                log.warning("reading /config/changes failed: %s", exc)
                return
            topics, brokers, users, quota_entities = changes
            for name, config in users:
                self.credentials.user_config_changed(name, config)
                self.processed += 1
            for kind, name, config in quota_entities:
                self.quotas.entity_config_changed(kind, name, config)
                self.processed += 1
            for topic, overrides in topics:
                self.admin.config_changed(topic, overrides)
                self.processed += 1
            for entity, configs in brokers:
                self.admin.dynamic.changed(entity, configs)
                self.processed += 1

    def _read(self) -> tuple[list[tuple[str, dict[str, str]]], list[tuple[str, dict[str, str]]],
                             list[tuple[str, dict[str, str]]], list[tuple[str, str, dict[str, str]]]]:
        """The topics, brokers and users named by new notifications with their current configs; purges expired
        notifications."""
        nodes = self.zk.get_config_change_notifications(watch=True)
        fresh = [n for n in nodes if _sequence(n) > self.last_executed]
        topics: list[str] = []
        brokers: list[str] = []
        users: list[str] = []
        quota_entities: list[tuple[str, str]] = []  # users/<u>[/clients/<c>], clients/<c>: Kafka's QuotaConfigHandler
        mine = (DEFAULT_ENTITY, str(self.admin.broker_id))
        now_ms = int(time.time() * 1000)
        expired: list[str] = []
        for node, entity, ctime in self.zk.read_config_changes(nodes):
            if node in fresh and entity is not None:
                kind, name = entity
                if self.quotas is not None and kind in ("users", "clients", "ips") and entity not in quota_entities:
                    quota_entities.append(entity)
                if kind == "topics" and name not in topics:
                    topics.append(name)
                elif kind == "brokers" and name in mine and name not in brokers:
                    brokers.append(name)
                elif kind == "users" and self.credentials is not None and "/" not in name and name not in users:
                    users.append(name)  # users/<u>/clients/<c> and <default> are quota entities only
                elif kind not in ("topics", "brokers", "users", "clients", "ips"):
                    log.debug("config change for %s/%s: nothing to apply here", kind, name)
            if ctime and now_ms - ctime > CHANGE_EXPIRATION_MS and _sequence(node) <= max(
                    self.last_executed, *(_sequence(n) for n in fresh), -1):
                expired.append(node)
        if fresh:
            self.last_executed = max(_sequence(n) for n in fresh)
        out = [(topic, self.zk.get_topic_configs(topic)) for topic in topics]
        broker_configs = [(entity, self.zk.entity_config("brokers", entity)) for entity in brokers]
        user_configs = []
        for name in users:
            try:
                user_configs.append((name, self.zk.entity_config("users", name)))
            except KcliError as exc:  # a malformed node: that user keeps what it had, the others are applied
                log.warning("config change for users/%s: %s", name, exc)
        quota_configs = []
        for kind, name in quota_entities:
            path = f"/config/{kind}/{name}"  # users/<u>/clients/<c> is one entity path of three znodes
            if entity_of(kind, name) is None:
                continue
            try:
                found = self.zk.get_data_and_version(path)
                config = models.parse_config(path, found[0], kind, name).config if found else {}
            except KcliError as exc:  # a malformed node: that entity keeps what it had
                log.warning("config change for %s/%s: %s", kind, name, exc)
                continue
            quota_configs.append((kind, name, config))
        if expired:
            self.zk.delete_config_changes(expired)
        return out, broker_configs, user_configs, quota_configs


def _sequence(node: str) -> int:
    try:
        return int(node[_PREFIX_LEN:])
    except ValueError:
        return -1
