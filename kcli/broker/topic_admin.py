"""Topic administration: create, delete and grow topics, and keep their configs (Kafka's ZkAdminManager and
the topic side of its ConfigHandler).

The one writer of topics: it asks the LogManager for logs, registers Partitions with the ReplicaManager,
updates the MetadataCache and tells ZooKeeper. Per-topic configs live where Kafka keeps them: in ZooKeeper
mode `/config/topics/<topic>` (Kafka's JSON, with a change notification), standalone a JSON file in the
first log dir (`kctl-topic-configs.json`), written atomically.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcli.broker.errors import (
    BrokerError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    topic_exists,
)
from kcli.broker.admin_utils import BrokerMetadata, assign_replicas_to_brokers, create_new_partitions_assignment
from kcli.broker.config import BrokerConfig
from kcli.broker.dynamic_config import BROKER_CONFIGS_FILE, DynamicBrokerConfig
from kcli.broker.log_manager import LogDirError, LogManager, TopicError, validate_topic_name
from kcli.broker.metadata_cache import MetadataCache, PartitionState, TopicMetadata
from kcli.broker.partition import Partition
from kcli.broker.replica_manager import ReplicaManager
from kcli.storage.cleanup_policy import KCTL_TOPIC_CONFIGS
from kcli.storage.log_config import CONFIG_KEYS, ConfigEntry, ConfigType, LogConfig

log = logging.getLogger("kcli.broker")

TOPIC_CONFIGS_FILE = KCTL_TOPIC_CONFIGS  # read offline by kctl compact (kcli.storage.cleanup_policy)
# Topic settings Kafka has and this broker does not implement: refused when a client sets them, rather than
# accepted and ignored. Tiered storage (KIP-405) is off, so Kafka itself refuses remote.storage.enable
# (LogConfig.validateRemoteStorageOnlyIfSystemEnabled).
REMOTE_STORAGE_DISABLED = ("Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
                           "with remote log storage.")
# One topic operation's file work at a time (Kafka's controller is one thread too): every thread running
# Python competes with the event loop for the GIL (LogManager._create_logs).
ADMIN_THREADS = 1


@dataclass
class CreatedTopic:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    replication_factor: int
    configs: list[Any]  # described entries (name, value, source, ...)


@dataclass
class TopicCreation:
    """A checked CreateTopics entry with its name reserved: ``work`` (blocking: logs or znodes) is still to run,
    unless ``done`` (validate_only)."""

    result: CreatedTopic
    config: LogConfig
    work: Any  # () -> None
    done: bool = False

    def run(self) -> None:
        self.work()


class TopicAdmin:
    def __init__(self, config: BrokerConfig, log_manager: LogManager, replica_manager: ReplicaManager,
                 metadata: MetadataCache, *, zk: Any = None, logs_created: Any = None,
                 replication_quotas: Any = None) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.logs = log_manager
        self.replicas = replica_manager
        self.metadata = metadata
        # ZooKeeper mode: kcli.zk.kafka_zk_client.KafkaZkClient. Topics then live in ZooKeeper (any broker
        # writes a new topic's assignment there; the controller elects leaders and tells the replicas with
        # LeaderAndIsr, which creates the logs: ensure_replica).
        self.zk: Any = zk
        # the topic configs' broker synonyms: server.properties keys set explicitly (STATIC_BROKER_CONFIG), under
        # the dynamic broker configs (KIP-226), which move them at runtime
        self.dynamic = DynamicBrokerConfig(config)
        self.dynamic.on_change = self.broker_defaults_changed
        self.broker_defaults, self.broker_sources = self.dynamic.log_defaults()
        self.overrides: dict[str, dict[str, str]] = {}
        self._effective: dict[str, LogConfig] = {}
        # Topics whose creation, deletion or growth is in a worker thread: "creating", "deleting", "growing".
        self._busy: dict[str, str] = {}
        self._tasks: set[asyncio.Task] = set()
        self._grow_lock = asyncio.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self.logs_created: Any = logs_created  # (count) -> None: the server's hook after new logs (KafkaServer)
        self._overrides_file_lock = threading.Lock()
        self._overrides_version = self._overrides_written = 0
        # KIP-73 (kcli.broker.replication_quotas.ReplicationQuotas): the throttle rates follow the dynamic broker
        # configs and the throttled partitions the topics' overrides, as Kafka's Broker/TopicConfigHandler
        self.replication_quotas = replication_quotas
        if replication_quotas is not None:
            self.dynamic.reconfigurables.append(self._replication_rates_changed)

    # -- startup -----------------------------------------------------------------------------------
    def load(self) -> None:
        """Configs from disk (or ZooKeeper), then a Partition for every log the LogManager loaded (standalone;
        in a cluster the controller's LeaderAndIsr says which replicas this broker serves)."""
        self.dynamic.zk = self.zk
        self.dynamic.file = self.logs.log_dirs[0] / BROKER_CONFIGS_FILE
        self.dynamic.load()
        self.broker_defaults, self.broker_sources = self.dynamic.log_defaults()
        self.overrides = self._read_overrides()
        self._replication_rates_changed()
        for name in self.overrides:
            self._replication_throttles_changed(name)
        if self.zk is not None:
            return
        for name, topic in self.logs.topics.items():
            self._register(name, topic.topic_id)

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

    def _replication_rates_changed(self) -> None:
        if self.replication_quotas is not None:
            self.replication_quotas.broker_config_changed(self.dynamic.per_broker, self.dynamic.cluster_default)

    def _replication_throttles_changed(self, name: str) -> None:
        if self.replication_quotas is not None:
            self.replication_quotas.topic_config_changed(name, self.overrides.get(name, {}))

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

    def check_supported(self, overrides: Mapping[str, str | None], requested: Any = None, *,
                        current: Mapping[str, str] | None = None) -> None:
        """Refuse the topic settings Kafka refuses for tiered storage (KIP-405): remote.storage.enable=true
        without remote.log.storage.system.enable (REMOTE_STORAGE_DISABLED), on a compacted topic, or turned off
        again once on (``current``: the topic's overrides before the change). ``requested``: the keys a client
        sets (unused since the throttled-replica lists are implemented, KIP-73)."""
        remote = str(overrides.get("remote.storage.enable") or "").strip().lower() == "true"
        if remote and not self.config["remote.log.storage.system.enable"]:
            raise InvalidConfigError(REMOTE_STORAGE_DISABLED)
        if current is not None and str(current.get("remote.storage.enable") or "").strip().lower() == "true" \
                and not remote:
            raise InvalidConfigError("Disabling remote storage feature on the topic level is not supported.")
        if remote and "compact" in str(overrides.get("cleanup.policy") or ""):
            raise InvalidConfigError("Remote log storage is unsupported for the compacted topics")

    @staticmethod
    def check_local_retention(config: LogConfig) -> None:
        """Kafka's LogConfig.validateRemoteStorageRetentionSize/Time: the local part cannot outlast the whole."""
        if not config.remote_storage_enable:
            return
        for local_key, key in (("local.retention.ms", "retention.ms"), ("local.retention.bytes", "retention.bytes")):
            local, total = config.get(local_key), config.get(key)
            if total != -1 and local != -2 and (local == -1 or local > total):
                raise InvalidConfigError(f"Invalid value {local} for configuration {local_key}: Value must not be "
                                         f"more than {key} property value: {total}")

    def set_config(self, name: str, overrides: Mapping[str, str], *, validate_only: bool = False,
                   requested: Any = None) -> None:
        """Replace a topic's overrides (AlterConfigs) after validating every key and value; the topic's logs
        use the new config from their next append, retention pass or cleaning on. ``requested``: the keys the
        client changed (IncrementalAlterConfigs), default all of ``overrides``."""
        if name not in self.metadata.topics:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        self.check_supported(overrides, requested, current=self._current_overrides(name))
        config = self._log_config(name, overrides)
        self.check_local_retention(config)
        if validate_only:
            return
        self._apply(name, config)
        self._write_overrides(name)

    def _apply(self, name: str, config: LogConfig) -> None:
        self.overrides[name] = config.overrides()
        self._effective[name] = config
        self._replication_throttles_changed(name)
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
        self._overrides_writer()()

    def _overrides_writer(self) -> Any:
        """Standalone: the overrides as they are now, to be written by the returned call (in a worker thread,
        maybe): a newer snapshot already written is never replaced by an older one."""
        self._overrides_version += 1
        version = self._overrides_version
        data = json.dumps({"version": 1, "topics": {t: c for t, c in sorted(self.overrides.items()) if c}},
                          indent=1, sort_keys=True)
        path = self._config_file()

        def write() -> None:
            with self._overrides_file_lock:
                if version <= self._overrides_written:
                    return
                tmp = path.with_name(path.name + ".tmp")
                with open(tmp, "w") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, path)
                self._overrides_written = version
        return write

    # -- topics ------------------------------------------------------------------------------------
    # Each operation is checked on the event loop (validation, the name reserved), its file or ZooKeeper work
    # then runs in a worker thread (``*_async``), and its outcome is published on the event loop: the topic
    # reaches the ReplicaManager and the MetadataCache only once its logs exist, so Metadata shows it when it
    # can take produce requests, and a produce before that is UNKNOWN_TOPIC_OR_PARTITION (retriable). The
    # synchronous forms do the same work inline (internal topics, tests).
    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     assignments: Mapping[int, list[int]] | None = None, configs: Mapping[str, str] | None = None,
                     *, validate_only: bool = False) -> CreatedTopic:
        creation = self.begin_create_topic(name, num_partitions, replication_factor, assignments, configs,
                                           validate_only=validate_only)
        if creation.done:
            return creation.result
        try:
            creation.run()
        finally:
            self._release(creation)
        return self._finish_create(creation)

    async def create_topic_async(self, creation: TopicCreation) -> CreatedTopic:
        """The file work (standalone: the logs; ZooKeeper mode: the topic's znodes) in a worker thread."""
        if creation.done:
            return creation.result
        try:
            await self.off_loop(creation.run)
        finally:
            self._release(creation)
        return self._finish_create(creation)

    def start_create_topic(self, creation: TopicCreation) -> asyncio.Task:
        """create_topic_async as a task of its own: it finishes even when the request's timeout passes first
        (Kafka: the topic is then created anyway; the client sees REQUEST_TIMED_OUT). Shutdown waits for it."""
        return self.start(self.create_topic_async(creation))

    def start(self, operation: Any) -> asyncio.Task:
        """A topic operation (a coroutine) as a task that outlives its request; shutdown waits for it."""
        task = asyncio.get_running_loop().create_task(operation)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is not None:  # a refused request is the client's business; anything else is worth a line
            refused = isinstance(exc, BrokerError) or topic_exists(exc)
            log.log(logging.DEBUG if refused else logging.WARNING, "topic operation failed: %s", exc)

    async def drain(self) -> None:
        """Wait for the topic operations still in worker threads (before the logs are closed at shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        executor, self._executor = self._executor, None
        if executor is not None:  # also the work of requests whose connections closed meanwhile
            await asyncio.to_thread(executor.shutdown, True)

    async def off_loop(self, work: Any) -> Any:
        """Run blocking topic work (files, ZooKeeper) in the admin's own worker threads: a burst of creations
        and deletions must not queue ahead of the default executor's work (flushes, ISR writes, loads)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(ADMIN_THREADS, thread_name_prefix="kcli-topic-admin")
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    def begin_create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           assignments: Mapping[int, list[int]] | None = None,
                           configs: Mapping[str, str] | None = None, *, validate_only: bool = False
                           ) -> TopicCreation:
        """Kafka's createTopics checks, in its order: name, existence, partitions/replication or explicit
        assignment, configs (one broker: every replica must be this broker). Raises the first failed check;
        else the name is reserved (TOPIC_ALREADY_EXISTS for a second creation meanwhile) until the creation
        is run and finished, or done at once (validate_only)."""
        try:
            validate_topic_name(name)
        except TopicError as exc:
            raise InvalidTopicError(exc.reason) from None
        if name in self.metadata.topics or name in self.logs.topics or name in self._busy:
            if self._busy.get(name) == "deleting":
                raise TopicExistsError(f"Topic '{name}' is marked for deletion.")
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
        self.check_local_retention(config)
        described = list(config.describe())
        if self.zk is not None and not assignments:
            brokers = [BrokerMetadata(b.broker_id, b.rack) for b in self.metadata.alive_brokers()]
            assignments = assign_replicas_to_brokers(brokers, num_partitions, replication_factor)
        if validate_only:
            result = CreatedTopic(name, uuid.UUID(int=0), num_partitions, replication_factor, described)
            return TopicCreation(result, config, None, done=True)
        result = CreatedTopic(name, uuid.uuid4(), num_partitions, replication_factor, described)
        clean = config.overrides()
        if self.zk is not None:
            # Nothing cached here: the replicas read the configs from /config/topics/<t> at LeaderAndIsr
            # (prepare_replicas), as Kafka's LogManager does. A creation that fails (an auto-creation racing
            # a CreateTopics of the same name) must not leave its configs, or none, behind for the real topic.
            zk = self.zk
            work = lambda: zk.create_topic(name, {p: list(r) for p, r in (assignments or {}).items()},  # noqa: E731
                                           result.topic_id, clean)
        else:
            self._effective[name] = config
            persist = None
            if clean:
                self.overrides[name] = clean
                persist = self._overrides_writer()

            def work() -> None:
                if persist is not None:
                    persist()
                self.logs.create_topic(name, num_partitions, config, result.topic_id)
            self._replication_throttles_changed(name)
        self._busy[name] = "creating"
        return TopicCreation(result, config, work)

    def _release(self, creation: TopicCreation) -> None:
        if self._busy.get(creation.result.name) == "creating":
            del self._busy[creation.result.name]

    def _finish_create(self, creation: TopicCreation) -> CreatedTopic:
        """On the event loop, after the work: standalone, the Partitions and the metadata (produce-ready)."""
        created = creation.result
        name = created.name
        clean = creation.config.overrides()
        if self.zk is not None:
            log.info("created topic %s with %d partitions, replication factor %d%s", name, created.num_partitions,
                     created.replication_factor, f" and configs {clean}" if clean else "")
            return created
        self._register(name, created.topic_id)
        self._logs_created(created.num_partitions)
        log.info("created topic %s with %d partitions%s", name, created.num_partitions,
                 f" and configs {clean}" if clean else "")
        return created

    def is_busy(self, name: str) -> bool:
        """The topic is being created or deleted by a worker thread."""
        return name in self._busy

    async def prepare_replicas(self, wanted: list[tuple[str, int]], topic_ids: Mapping[str, uuid.UUID]) -> None:
        """LeaderAndIsr: the logs of the replicas new to this broker, created in worker threads before the
        request's leader and follower transitions run on the event loop (Kafka's makeLeaders/makeFollowers
        create them as they meet them, in a request handler thread). A topic whose configs do not parse is left
        to ensure_replica, which reports it per partition."""
        missing = [tp for tp in wanted if self.replicas.find(*tp) is None and self.logs.partition(*tp) is None]
        if not missing:
            return
        names = sorted({t for t, _ in missing})
        unknown = [n for n in names if n not in self.overrides]
        if unknown and self.zk is not None:
            zk = self.zk
            fetched = await self.off_loop(lambda: {n: zk.topic_config(n) for n in unknown})
            for n, overrides in fetched.items():
                if n not in self.overrides:
                    self.overrides[n] = overrides
                    self._effective.pop(n, None)
                    self._replication_throttles_changed(n)
        configs: dict[str, LogConfig] = {}
        for n in names:
            try:
                configs[n] = self.topic_config(n)
            except InvalidConfigError:
                continue
        ids = {n: topic_ids[n] for n in configs if n in topic_ids and topic_ids[n].int}
        wanted_logs = [tp for tp in missing if tp[0] in configs]
        await self.off_loop(lambda: self.logs.get_or_create_logs(wanted_logs, ids, configs.__getitem__))
        self._logs_created(len(wanted_logs))

    def _logs_created(self, count: int) -> None:
        if self.logs_created is not None and count:
            self.logs_created(count)

    def ensure_replica(self, name: str, index: int, topic_id: uuid.UUID, *, create: bool = True) -> Partition:
        """The Partition for a replica the controller assigned here (LeaderAndIsr), its log created if new
        (``create``; else it must exist: prepare_replicas made it), its high watermark from
        replication-offset-checkpoint."""
        partition = self.replicas.find(name, index)
        if partition is not None:
            return partition
        if name not in self.overrides and self.zk is not None:
            self.overrides[name] = self.zk.topic_config(name)
            self._effective.pop(name, None)
            self._replication_throttles_changed(name)
        config = self.topic_config(name)
        if create:
            existing = self.logs.topics.get(name)
            log_topic_id = topic_id if topic_id.int else existing.topic_id if existing is not None else uuid.uuid4()
            managed = self.logs.get_or_create_log(name, index, log_topic_id, config)
        else:
            found = self.logs.partition(name, index)
            if found is None:
                raise LogDirError(f"the log of {name}-{index} could not be created", path=str(self.logs.log_dirs[0]))
            managed = found
        if not topic_id.int:
            topic_id = managed.log.topic_id or uuid.uuid4()
        managed.log.replace_config(config)
        partition = Partition(name, index, topic_id, managed, local_broker_id=self.broker_id)
        partition.initialize_high_watermark(self.logs.checkpointed_high_watermarks.get((name, index)))
        self.replicas.add_partition(partition)
        return partition

    def delete_replica(self, name: str, index: int) -> None:
        """StopReplica with delete=true: this broker's log of the partition goes (inline; see delete_replicas)."""
        self.logs.delete_partition(name, index)
        self._forget_deleted([name])

    async def delete_replicas(self, partitions: list[tuple[str, int]]) -> None:
        """StopReplica with delete=true: the logs closed and renamed `-delete` in a worker thread (Kafka's
        asyncDelete); their files are removed log.segment.delete.delay.ms later."""
        await self.off_loop(lambda: self.logs.delete_partitions(partitions))
        self._forget_deleted([t for t, _ in partitions])

    def _forget_deleted(self, names: list[str]) -> None:
        for name in set(names):
            if name not in self.logs.topics:
                self._effective.pop(name, None)
                if self.zk is not None:  # a topic of the same name created later brings its own configs
                    self.overrides.pop(name, None)

    def delete_topic(self, name: str) -> uuid.UUID:
        """DeleteTopics, inline (see delete_topic_async)."""
        topic_id, work = self._begin_delete(name)
        try:
            if work is not None:
                work()
        finally:
            self._end_delete(name)
        return topic_id

    async def delete_topic_async(self, name: str) -> uuid.UUID:
        """DeleteTopics. ZooKeeper mode: /admin/delete_topics/<t>, the controller deletes it everywhere.
        Standalone: the topic leaves the metadata and the ReplicaManager at once (Metadata no longer shows it,
        produce and fetch get UNKNOWN_TOPIC_OR_PARTITION); its logs are then closed and renamed `-delete` in a
        worker thread, the answer waits for that (the name is free again after it), and the files are removed
        log.segment.delete.delay.ms later."""
        topic_id, work = self._begin_delete(name)
        try:
            if work is not None:
                await self.off_loop(work)
        finally:
            self._end_delete(name)
        return topic_id

    async def delete_topics_async(self, names: list[str]) -> list[uuid.UUID | Exception]:
        """DeleteTopics for several topics: every one leaves the metadata first, then their logs go."""
        begun: list[tuple[uuid.UUID, Any] | Exception] = []
        for name in names:
            try:
                begun.append(self._begin_delete(name))
            except Exception as exc:
                begun.append(exc)

        async def finish(name: str, work: Any) -> None:
            try:
                await self.off_loop(work)
            finally:
                self._end_delete(name)

        runs = {i: asyncio.ensure_future(finish(names[i], b[1])) for i, b in enumerate(begun)
                if not isinstance(b, Exception)}
        if runs:
            await asyncio.wait(runs.values())
        out: list[uuid.UUID | Exception] = []
        for i, b in enumerate(begun):
            if isinstance(b, Exception):
                out.append(b)
            else:
                exc = runs[i].exception()
                out.append(exc if exc is not None else b[0])
        return out

    def _begin_delete(self, name: str) -> tuple[uuid.UUID, Any]:
        topic = self.metadata.topic(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"Topic '{name}' does not exist.")
        if self.zk is not None:
            zk = self.zk
            self._busy[name] = "deleting"

            def mark() -> None:
                zk.delete_topic(name)  # /admin/delete_topics/<t>: the controller deletes it everywhere
                log.info("marked topic %s for deletion", name)
            return topic.topic_id, mark
        self.replicas.remove_topic(name)
        self.metadata.remove_topic(name)
        persist = None
        if self.overrides.pop(name, None) is not None:
            persist = self._overrides_writer()
        self._effective.pop(name, None)
        self._busy[name] = "deleting"

        def delete() -> None:
            if name in self.logs.topics:
                self.logs.delete_topic(name)
            if persist is not None:
                persist()
            log.info("deleted topic %s", name)
        return topic.topic_id, delete

    def _end_delete(self, name: str) -> None:
        if self._busy.get(name) == "deleting":
            del self._busy[name]

    def create_partitions(self, name: str, total: int, assignments: list[list[int]] | None = None, *,
                          validate_only: bool = False) -> None:
        """CreatePartitions, inline (see create_partitions_async)."""
        work = self._begin_create_partitions(name, total, assignments, validate_only)
        if work is not None:
            current = len(self.metadata.topics[name].partitions)
            work()
            self._finish_create_partitions(name, total - current)

    async def create_partitions_async(self, name: str, total: int, assignments: list[list[int]] | None = None, *,
                                      validate_only: bool = False) -> None:
        """CreatePartitions: the new logs (standalone) or the new assignment (ZooKeeper) written in a worker
        thread; the new partitions reach the metadata once their logs exist. One topic grows at a time."""
        async with self._grow_lock:
            work = self._begin_create_partitions(name, total, assignments, validate_only)
            if work is not None:
                current = len(self.metadata.topics[name].partitions)
                self._busy.setdefault(name, "growing")
                try:
                    await self.off_loop(work)
                finally:
                    if self._busy.get(name) == "growing":
                        del self._busy[name]
                self._finish_create_partitions(name, total - current)

    def _begin_create_partitions(self, name: str, total: int, assignments: list[list[int]] | None,
                                 validate_only: bool) -> Any:
        topic = self.metadata.topic(name)
        if topic is None or self._busy.get(name) == "deleting":
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
            return self._add_partitions_in_zookeeper(topic, total, assignments, validate_only)
        if validate_only:
            return None
        config = self.topic_config(name)
        return lambda: self.logs.add_partitions(name, total, config)

    def _finish_create_partitions(self, name: str, added: int) -> None:
        if self.zk is None and name in self.logs.topics and name in self.metadata.topics:  # not deleted meanwhile
            self._register(name, self.logs.topics[name].topic_id)
            self._logs_created(added)

    def _add_partitions_in_zookeeper(self, topic: TopicMetadata, total: int, assignments: list[list[int]] | None,
                                     validate_only: bool) -> Any:
        """Kafka's AdminZkClient.createNewPartitionsAssignment: the new partitions continue the existing
        layout (start index from partition 0's first replica), then the whole assignment is rewritten."""
        existing = {p.index: list(p.replicas) for p in topic.partitions}
        current = len(existing)
        brokers = [BrokerMetadata(b.broker_id, b.rack) for b in self.metadata.alive_brokers()]
        proposed = None if assignments is None else {current + i: list(r) for i, r in enumerate(assignments)}
        new = create_new_partitions_assignment(topic.name, existing, brokers, total, proposed)
        if validate_only:
            return None
        zk = self.zk
        return lambda: zk.add_partitions(topic.name, {**existing, **new})

