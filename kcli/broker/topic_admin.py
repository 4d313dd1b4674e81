"""Topic administration: create, delete and grow topics, and keep their configs (Kafka's ZkAdminManager and
the topic side of its ConfigHandler).

The one writer of topics: it asks the LogManager for logs, registers Partitions with the ReplicaManager,
updates the MetadataCache and tells ZooKeeper. Per-topic configs live where Kafka keeps them: in ZooKeeper
mode `/config/topics/<topic>` (Kafka's JSON, with a change notification), standalone a JSON file in the
first log dir (`kctl-topic-configs.json`), written atomically.
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcli.broker.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from kcli.broker.admin_utils import BrokerMetadata, assign_replicas_to_brokers, create_new_partitions_assignment
from kcli.broker.config import BrokerConfig
from kcli.broker.dynamic_config import BROKER_CONFIGS_FILE, DynamicBrokerConfig
from kcli.broker.log_manager import LogManager, TopicError, validate_topic_name
from kcli.broker.metadata_cache import MetadataCache, PartitionState, TopicMetadata
from kcli.broker.partition import Partition
from kcli.broker.replica_manager import ReplicaManager
from kcli.storage.cleanup_policy import KCTL_TOPIC_CONFIGS
from kcli.storage.log_config import CONFIG_KEYS, ConfigEntry, ConfigType, LogConfig

log = logging.getLogger("kcli.broker")

TOPIC_CONFIGS_FILE = KCTL_TOPIC_CONFIGS  # read offline by kctl compact (kcli.storage.cleanup_policy)
# Topic settings Kafka has and this broker does not implement: refused when a client sets them, rather than
# accepted and ignored. Tiered storage (KIP-405) is off, so Kafka itself refuses remote.storage.enable
# (LogConfig.validateRemoteStorageOnlyIfSystemEnabled); replication quotas (Kafka's ReplicationQuotaManager)
# are not implemented, so a non-empty throttled-replicas list is refused as an unknown config.
REMOTE_STORAGE_DISABLED = ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
                           "with remote log storage.")
THROTTLED_REPLICAS_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")


@dataclass
class CreatedTopic:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int
    configs: list[Any]  # described entries (name, value, source, ...)


class TopicAdmin:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, replica_manager: ReplicaManager,
                 metadata: MetadataCache, *, registry: Any = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.logs = log_manager
        self.replicas = replica_manager
        self.metadata = metadata
        self.registry = registry  # kcli.zk.registration.BrokerRegistration in ZooKeeper mode
        # ZooKeeper mode: kcli.zk.kafka_zk_client.KafkaZkClient. Topics then live in ZooKeeper (any broker
        # writes a new topic's assignment there; the controller elects leaders and tells the replicas with
        # LeaderAndIsr, which creates the logs: ensure_replica).
        self.zk: Any = None
        # the topic configs' broker synonyms: server.properties keys set explicitly (STATIC_BROKER_CONFIG), under
        # the dynamic broker configs (KIP-226), which move them at runtime
        self.dynamic = DynamicBrokerConfig(config)
        self.dynamic.on_change = self.broker_defaults_changed
        self.broker_defaults, self.broker_sources = self.dynamic.log_defaults()
        self.overrides: dict[str, dict[str, str]] = {}
        self._effective: dict[str, LogConfig] = {}

    # -- startup -----------------------------------------------------------------------------------
    def load(self) -> None:
        """Configs from disk (or ZooKeeper), then a Partition for every log the LogManager loaded (standalone;
        in a cluster the controller's LeaderAndIsr says which replicas this broker serves)."""
        self.dynamic.zk = self.zk
        self.dynamic.file = self.logs.log_dirs[0] / BROKER_CONFIGS_FILE
        self.dynamic.load()
        self.broker_defaults, self.broker_sources = self.dynamic.log_defaults()
        self.overrides = self._read_overrides()
        if self.zk is not None:
            return
        for name, topic in self.logs.topics.items():
            self._register(name, topic.topic_id)
            self._announce(name)

    def _register(self, name: str, topic_id: uuid.UUID) -> None:
        topic = self.logs.topics[name]
        states = []
        for managed in topic.partitions:
            managed.log.replace_config(self.topic_config(name))
            partition = self.replicas.find(name, managed.index)
            if partition is None:
                partition = Partition(name, managed.index, topic_id, managed, local_broker_id=self.broker_id)
                partition.make_standalone_leader()
                self.replicas.add_partition(partition)
            states.append(PartitionState(managed.index, self.broker_id, partition.leader_epoch, [self.broker_id],
                                         [self.broker_id]))
        self.metadata.put_topic(TopicMetadata(name, topic_id, states))

    # -- configs -----------------------------------------------------------------------------------
    def _log_config(self, name: str, overrides: Mapping[str, str]) -> LogConfig:
        """Kafka's LogConfig.fromProps: overrides over the broker's synonyms over the defaults; unknown keys
        and bad values raise storage's InvalidConfigError (INVALID_CONFIG, with Kafka's message)."""
        nulls = sorted(k for k, v in overrides.items() if v is None)
        if nulls:
            raise InvalidConfigError(f"Null value not supported for topic configs: {', '.join(nulls)}")
        if name == "__consumer_offsets" and "cleanup.policy" not in overrides:
            overrides = {**overrides, "cleanup.policy": "compact"}  # Kafka creates it compacted, always
        return LogConfig.from_props(overrides, self.broker_defaults, self.broker_sources)

    def broker_defaults_changed(self) -> None:
        """A dynamic broker config changed the topics' defaults: every log here uses its new config from its next
        append, retention pass or cleaning (Kafka's DynamicLogConfig.reconfigure)."""
        self.broker_defaults, self.broker_sources = self.dynamic.log_defaults()
        self._effective.clear()
        for name in list(self.logs.topics):
            try:
                self._apply(name, self.topic_config(name))
            except InvalidConfigError as exc:
                log.error("topic %s keeps its configs: %s", name, exc)

    def topic_config(self, name: str) -> LogConfig:
        cached = self._effective.get(name)
        if cached is None:
            cached = self._effective[name] = self._log_config(name, self.overrides.get(name, {}))
        return cached

    def describe_config(self, name: str) -> list[ConfigEntry]:
        """DescribeConfigs of a topic. In ZooKeeper mode the overrides are read from /config/topics/<topic>, as
        Kafka's ZkAdminManager.describeConfigs does: a change any broker just wrote shows at once, before its
        /config/changes notification reaches this broker's logs."""
        if name not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        if self.zk is not None:
            return list(self._log_config(name, self.zk.topic_config(name)).describe())
        return list(self.topic_config(name).describe())

    def _current_overrides(self, name: str) -> dict[str, str]:
        """What a change starts from: ZooKeeper's copy in a cluster (Kafka's incrementalAlterConfigs reads it),
        else this broker's."""
        if self.zk is not None:
            return dict(self.zk.topic_config(name))
        return dict(self.overrides.get(name, {}))

    @staticmethod
    def check_supported(overrides: Mapping[str, str | None], requested: Any = None) -> None:
        """Refuse the topic settings this broker does not implement (see REMOTE_STORAGE_DISABLED): every
        override for remote.storage.enable (Kafka validates the whole config), the keys a client sets for the
        throttled-replica lists (``requested``, default all)."""
        if str(overrides.get("remote.storage.enable") or "").strip().lower() == "true":
            raise InvalidConfigError(REMOTE_STORAGE_DISABLED)
        for key in THROTTLED_REPLICAS_KEYS:
            if (requested is None or key in requested) and (overrides.get(key) or "").strip():
                log.warning("refusing %s=%s: kctl broker does not implement replication quotas", key, overrides[key])
                raise InvalidConfigError(f"Unknown topic config name: {key}")

    def set_config(self, name: str, overrides: Mapping[str, str], *, validate_only: bool = False,
                   requested: Any = None) -> None:
        """Replace a topic's overrides (AlterConfigs) after validating every key and value; the topic's logs
        use the new config from their next append, retention pass or cleaning on. ``requested``: the keys the
        client changed (IncrementalAlterConfigs), default all of ``overrides``."""
        if name not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        self.check_supported(overrides, requested)
        config = self._log_config(name, overrides)
        if validate_only:
            return
        self._apply(name, config)
        self._write_overrides(name)

    def _apply(self, name: str, config: LogConfig) -> None:
        self.overrides[name] = config.overrides()
        self._effective[name] = config
        topic = self.logs.topics.get(name)
        for managed in topic.partitions if topic is not None else ():
            with managed.lock:
                managed.log.replace_config(config)

    def config_changed(self, name: str, overrides: Mapping[str, str]) -> bool:
        """Another broker changed a topic's overrides (a /config/changes notification; Kafka's
        TopicConfigHandler.processConfigChanges): use them here, nothing written. False if they do not parse."""
        try:
            config = self._log_config(name, overrides)
        except InvalidConfigError as exc:
            log.error("ignoring the new configs of topic %s: %s", name, exc)
            return False
        if self.overrides.get(name, {}) != config.overrides():
            log.info("topic %s configs now %s", name, config.overrides() or "the broker defaults")
        self._apply(name, config)
        return True

    def incremental_config(self, name: str, ops: list[tuple[str, int, str | None]], *,
                           validate_only: bool = False) -> None:
        """IncrementalAlterConfigs: (key, op, value) with op 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT (lists)."""
        if name not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        current = self._current_overrides(name)
        for key, op, value in ops:
            if op == 0:
                current[key] = value or ""
            elif op == 1:
                current.pop(key, None)
            elif op in (2, 3):
                definition = CONFIG_KEYS.get(key)
                if definition is None or definition.type is not ConfigType.LIST:
                    raise InvalidConfigError(f"Config value append/subtract is not allowed for config key {key}")
                # Kafka appends to the topic's override, else to the key's default
                items = [v for v in current.get(key, ",".join(definition.default)).split(",") if v]
                for v in (value or "").split(","):
                    if op == 2 and v and v not in items:
                        items.append(v)
                    elif op == 3 and v in items:
                        items.remove(v)
                current[key] = ",".join(items)
            else:
                raise InvalidConfigError(f"Unknown config operation {op}")
        self.set_config(name, current, validate_only=validate_only, requested={key for key, op, _ in ops if op != 1})

    def _config_file(self) -> Path:
        return self.logs.log_dirs[0] / TOPIC_CONFIGS_FILE

    def _read_overrides(self) -> dict[str, dict[str, str]]:
        if self.zk is not None:
            return self.zk.topic_configs()
        path = self._config_file()
        if not path.exists():
            return {}
        try:
            data = json.loads(path.read_text())
            return {str(t): {str(k): str(v) for k, v in c.items()} for t, c in data.get("topics", {}).items()}
        except (OSError, ValueError, AttributeError) as exc:
            log.error("ignoring unreadable topic configs %s: %s", path, exc)
            return {}

    def _write_overrides(self, name: str) -> None:
        if self.zk is not None:
            self.zk.set_topic_config(name, self.overrides.get(name, {}))
            return
        path = self._config_file()
        tmp = path.with_name(path.name + ".tmp")
        data = {"version": 1, "topics": {t: c for t, c in sorted(self.overrides.items()) if c}}
        with open(tmp, "w") as out:
            json.dump(data, out, indent=1, sort_keys=True)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)

    # -- topics ------------------------------------------------------------------------------------
    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     assignments: Mapping[int, list[int]] | None = None, configs: Mapping[str, str] | None = None,
                     *, validate_only: bool = False) -> CreatedTopic:
        """Kafka's createTopics checks, in its order: name, existence, partitions/replication or explicit
        assignment, configs. One broker: every replica must be this broker."""
        try:
            validate_topic_name(name)
        except TopicError as exc:
            raise InvalidTopicError(exc.reason) from None
        if name in self.metadata.topics or name in self.logs.topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                raise InvalidRequestError("Both numPartitions or replicationFactor and replicasAssignments were set. "
                                         "Both cannot be used at the same time.")
            indexes = sorted(assignments)
            if indexes != list(range(len(indexes))):
                raise InvalidReplicaAssignmentError("Partitions should be a consecutive 0-based integer sequence")
            for replicas in assignments.values():
                if len(set(replicas)) != len(replicas) or not replicas:
                    raise InvalidReplicaAssignmentError("Duplicate replicas or no replica in the assignment")
                unknown = [r for r in replicas if r not in self.metadata.brokers]
                if unknown:
                    raise InvalidReplicaAssignmentError(f"Unknown broker(s) {unknown} in the replica assignment")
            num_partitions = len(indexes)
            replication_factor = len(next(iter(assignments.values())))
        else:
            if num_partitions == -1:
                num_partitions = int(self.config["num.partitions"])
            if replication_factor == -1:
                replication_factor = int(self.config["default.replication.factor"])
            if num_partitions <= 0:
                raise InvalidPartitionsError("Number of partitions must be larger than 0.")
            if replication_factor <= 0:
                raise InvalidReplicationFactorError("Replication factor must be larger than 0.")
            if replication_factor > len(self.metadata.brokers) and self.zk is None:
                raise InvalidReplicationFactorError(
                    f"Replication factor: {replication_factor} larger than available brokers: "
                    f"{len(self.metadata.brokers)}.")
        self.check_supported(configs or {})
        config = self._log_config(name, configs or {})
        described = list(config.describe())
        if self.zk is not None:
            return self._create_in_zookeeper(name, num_partitions, replication_factor, assignments, config,
                                             described, validate_only)
        if validate_only:
            return CreatedTopic(name, uuid.UUID(int=0), num_partitions, replication_factor, described)
        clean = config.overrides()
        self._effective[name] = config
        if clean:
            self.overrides[name] = clean
            self._write_overrides(name)
        try:
            topic = self.logs.create_topic(name, num_partitions)
        except TopicError as exc:
            raise InvalidTopicError(exc.reason) from None
        self._register(name, topic.topic_id)
        self._announce(name)
        log.info("created topic %s with %d partitions%s", name, num_partitions,
                 f" and configs {clean}" if clean else "")
        return CreatedTopic(name, topic.topic_id, num_partitions, replication_factor, described)

    def _create_in_zookeeper(self, name: str, num_partitions: int, replication_factor: int,
                             assignments: Mapping[int, list[int]] | None, config: LogConfig,
                             described: list[Any], validate_only: bool) -> CreatedTopic:
        """ZooKeeper mode (Kafka's ZkAdminManager.createTopics): the assignment is computed over the live
        brokers (AdminUtils, rack-aware when every broker has a rack) or taken as given, then the config
        node and the topic node are written; the controller does the rest."""
        if not assignments:
            brokers = [BrokerMetadata(b.broker_id, b.rack) for b in self.metadata.alive_brokers()]
            assignments = assign_replicas_to_brokers(brokers, num_partitions, replication_factor)
        if validate_only:
            return CreatedTopic(name, uuid.UUID(int=0), num_partitions, replication_factor, described)
        topic_id = uuid.uuid4()
        clean = config.overrides()
        self.overrides[name] = clean
        self._effective[name] = config
        self.zk.create_topic(name, {p: list(r) for p, r in assignments.items()}, topic_id, clean)
        log.info("created topic %s with %d partitions, replication factor %d%s", name, num_partitions,
                 replication_factor, f" and configs {clean}" if clean else "")
        return CreatedTopic(name, topic_id, num_partitions, replication_factor, described)

    def ensure_replica(self, name: str, index: int, topic_id: uuid.UUID) -> Partition:
        """The Partition for a replica the controller assigned here (LeaderAndIsr), its log created if new,
        its high watermark from replication-offset-checkpoint."""
        partition = self.replicas.find(name, index)
        if partition is not None:
            return partition
        if name not in self.overrides and self.zk is not None:
            self.overrides[name] = self.zk.topic_config(name)
            self._effective.pop(name, None)
        if not topic_id.int:
            existing = self.logs.topics.get(name)
            topic_id = existing.topic_id if existing is not None else uuid.uuid4()
        managed = self.logs.get_or_create_log(name, index, topic_id, self.topic_config(name))
        managed.log.replace_config(self.topic_config(name))
        partition = Partition(name, index, topic_id, managed, local_broker_id=self.broker_id)
        partition.initialize_high_watermark(self.logs.checkpointed_high_watermarks.get((name, index)))
        self.replicas.add_partition(partition)
        return partition

    def delete_replica(self, name: str, index: int) -> None:
        """StopReplica with delete=true: this broker's log of the partition goes."""
        self.logs.delete_partition(name, index)
        if name not in self.logs.topics:
            self._effective.pop(name, None)

    def delete_topic(self, name: str) -> uuid.UUID:
        topic = self.metadata.topic(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        if self.zk is not None:
            self.zk.delete_topic(name)  # /admin/delete_topics/<t>: the controller deletes it everywhere
            log.info("marked topic %s for deletion", name)
            return topic.topic_id
        self.replicas.remove_topic(name)
        self.metadata.remove_topic(name)
        self.logs.delete_topic(name)
        if self.overrides.pop(name, None) is not None:
            self._effective.pop(name, None)
            self._write_overrides(name)
        if self.registry is not None:
            self.registry.topic_deleted(name)
        log.info("deleted topic %s", name)
        return topic.topic_id

    def create_partitions(self, name: str, total: int, assignments: list[list[int]] | None = None, *,
                          validate_only: bool = False) -> None:
        topic = self.metadata.topic(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        current = len(topic.partitions)
        if total < current:
            raise InvalidPartitionsError(f"Topic currently has {current} partitions, which is higher than the "
                                         f"requested {total}.")
        if total == current:
            raise InvalidPartitionsError(f"Topic already has {current} partitions.")
        if assignments is not None:
            if len(assignments) != total - current:
                raise InvalidReplicaAssignmentError(
                    f"Increasing the number of partitions by {total - current} but {len(assignments)} assignments "
                    "provided.")
            for replicas in assignments:
                unknown = [r for r in replicas if r not in self.metadata.brokers]
                if unknown or not replicas:
                    raise InvalidReplicaAssignmentError(f"Unknown broker(s) {unknown} in the replica assignment")
        if self.zk is not None:
            self._add_partitions_in_zookeeper(topic, total, assignments, validate_only)
            return
        if validate_only:
            return
        self.logs.add_partitions(name, total)
        self._register(name, topic.topic_id)
        self._announce(name)

    def _add_partitions_in_zookeeper(self, topic: TopicMetadata, total: int, assignments: list[list[int]] | None,
                                     validate_only: bool) -> None:
        """Kafka's AdminZkClient.createNewPartitionsAssignment: the new partitions continue the existing
        layout (start index from partition 0's first replica), then the whole assignment is rewritten."""
        existing = {p.index: list(p.replicas) for p in topic.partitions}
        current = len(existing)
        brokers = [BrokerMetadata(b.broker_id, b.rack) for b in self.metadata.alive_brokers()]
        proposed = None if assignments is None else {current + i: list(r) for i, r in enumerate(assignments)}
        new = create_new_partitions_assignment(topic.name, existing, brokers, total, proposed)
        if validate_only:
            return
        self.zk.add_partitions(topic.name, {**existing, **new})

    def _announce(self, name: str) -> None:
        topic = self.logs.topics.get(name)
        if self.registry is not None and topic is not None:
            self.registry.topic_created(name, len(topic.partitions), topic.topic_id)

