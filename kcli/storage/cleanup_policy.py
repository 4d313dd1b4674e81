"""Which partitions Kafka's log cleaner compacts: each topic's effective ``cleanup.policy``, from what is known.

Kafka's LogCleaner only touches logs whose effective ``cleanup.policy`` contains ``compact`` (LogCleanerManager
``grabFilthiestCompactedLog`` filters on ``config.compact``), and never KRaft's ``__cluster_metadata``, whose
history snapshots replace (KIP-630). An offline compaction therefore needs to *know* the policy: the topic
config lives outside the partition directory (ZooKeeper's ``/config/topics``, KRaft ConfigRecords in
``__cluster_metadata``, a kctl broker's ``kctl-topic-configs.json``). What nobody names is not compacted: the
broker default is ``delete``, and compacting a delete topic destroys records it keeps until retention.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kcli.errors import KcliError
from kcli.storage.files import KRAFT_CHECKPOINT_SUFFIX, kraft_snapshot_offset_epoch

CLEANUP_POLICY = "cleanup.policy"
LOG_CLEANUP_POLICY = "log.cleanup.policy"  # the broker's default for topics without an override
KAFKA_DEFAULT_POLICY = "delete"

METADATA_TOPIC = "__cluster_metadata"
QUORUM_STATE = "quorum-state"  # a KRaft (Raft) log's own file: only metadata logs hold one
# Kafka creates its own state topics compacted, always (GroupCoordinator.offsetsTopicConfigs,
# TransactionStateManager.transactionTopicConfigs).
COMPACTED_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})

# A kctl broker without ZooKeeper keeps its topics' config overrides here, in its first log dir.
KCTL_TOPIC_CONFIGS = "kctl-topic-configs.json"
KCTL_BROKER_CONFIGS = "kctl-broker-configs.json"  # and its dynamic broker configs (KIP-226)

_TOPIC_RECORD, _CONFIG_RECORD, _REMOVE_TOPIC_RECORD = 2, 4, 9  # metadata record apiKeys
_TOPIC_RESOURCE, _BROKER_RESOURCE = 2, 4  # ConfigResource.Type


def policy_compacts(policy: str) -> bool:
    """``compact`` or ``compact,delete`` (``delete,compact``): the cleaner compacts the log."""
    return "compact" in (p.strip() for p in policy.split(","))


@dataclass(frozen=True)
class CleanupPolicy:
    """A topic's effective cleanup.policy and where it was learnt; ``policy`` None: not known."""

    policy: str | None
    source: str

    @property
    def compacts(self) -> bool:
        return self.policy is not None and policy_compacts(self.policy)


@dataclass(frozen=True)
class KnownPolicies:
    """What one source knows of topic configs: per-topic ``cleanup.policy`` overrides, the topics it knows
    (None: every topic) and, for those without an override, the cluster default (``log.cleanup.policy``)."""

    source: str
    overrides: Mapping[str, str] = field(default_factory=dict)
    topics: frozenset[str] | None = frozenset()
    default: str = KAFKA_DEFAULT_POLICY
    default_source: str = "Kafka's default"
    damage: str | None = None  # the source could not be read completely: its answers are not to be trusted

    def override(self, topic: str) -> CleanupPolicy | None:
        if topic in self.overrides:
            return CleanupPolicy(self.overrides[topic], f"topic config in {self.source}")
        return None

    def default_for(self, topic: str) -> CleanupPolicy | None:
        if self.topics is None or topic in self.topics:
            return CleanupPolicy(self.default, f"no override in {self.source}: {self.default_source}")
        return None


def is_metadata_log(directory: Path, topic: str | None) -> bool:
    """KRaft's metadata log (by its topic name, or by the quorum-state file any Raft log holds)."""
    return topic == METADATA_TOPIC or (directory / QUORUM_STATE).exists()


def resolve_policy(topic: str, sources: Iterable[KnownPolicies]) -> CleanupPolicy:
    """The effective policy: an override in the first source naming one, else Kafka's own compacted topics,
    else the default of the first source that knows the topic; unknown otherwise. A damaged source makes
    every answer unknown (a record past the damage might have changed the policy)."""
    sources = list(sources)
    damaged = next((s for s in sources if s.damage), None)
    if damaged is not None:
        return CleanupPolicy(None, f"{damaged.source} cannot be read completely ({damaged.damage})")
    for source in sources:
        found = source.override(topic)
        if found is not None:
            return found
    if topic in COMPACTED_INTERNAL_TOPICS:
        return CleanupPolicy("compact", "Kafka creates this internal topic compacted")
    for source in sources:
        found = source.default_for(topic)
        if found is not None:
            return found
    return CleanupPolicy(None, "no topic config found")


def kraft_policies(log_dir: Path) -> KnownPolicies | None:
    """Topic configs from a KRaft log dir's ``__cluster_metadata``: the latest snapshot (``.checkpoint``), then
    the log records after it, as a broker replays them (TopicRecord, RemoveTopicRecord, ConfigRecord; last one
    wins, a null value removes the override). None for a log dir without metadata (ZooKeeper mode)."""
    from kcli.records.cluster_metadata import UnknownRecordTypeError, decode_metadata_record
    from kcli.storage.segment import FileBatchReader

    metadata = log_dir / f"{METADATA_TOPIC}-0"
    if not metadata.is_dir():
        return None
    snapshots = sorted((kraft_snapshot_offset_epoch(p.name), p) for p in metadata.glob(f"*{KRAFT_CHECKPOINT_SUFFIX}")
                       if kraft_snapshot_offset_epoch(p.name) is not None)
    files: list[tuple[Path, int]] = []  # (file, first offset to apply)
    replay_from = 0
    if snapshots:
        (replay_from, _epoch), snapshot = snapshots[-1]
        files.append((snapshot, 0))
    files += [(log, replay_from) for log in sorted(metadata.glob("*.log"))]

    names: dict[str, str] = {}  # topic id -> name
    overrides: dict[str, str] = {}
    default: str | None = None
    damage: str | None = None
    for path, first in files:
        try:
            reader = FileBatchReader(path)
            for batch in reader:
                if batch.last_offset < first or batch.is_control:
                    continue
                if not batch.is_valid:
                    damage = f"{path}:{batch.position}: batch CRC mismatch"
                    break
                for record in batch.records():
                    if record.offset < first or record.value is None:
                        continue
                    try:
                        decoded = decode_metadata_record(record.value)
                    except UnknownRecordTypeError:
                        continue  # a newer record type: not one that carries topic configs
                    data = decoded.data
                    if decoded.type_id == _TOPIC_RECORD:
                        names[str(data.get("topicId"))] = data["name"]
                    elif decoded.type_id == _REMOVE_TOPIC_RECORD:
                        removed = names.pop(str(data.get("topicId")), None)
                        if removed is not None:
                            overrides.pop(removed, None)
                    elif decoded.type_id == _CONFIG_RECORD:
                        resource, name, value = data.get("resourceType"), data.get("name"), data.get("value")
                        if resource == _TOPIC_RESOURCE and name == CLEANUP_POLICY:
                            if value is None:
                                overrides.pop(data.get("resourceName"), None)
                            else:
                                overrides[data["resourceName"]] = value
                        elif resource == _BROKER_RESOURCE and name == LOG_CLEANUP_POLICY \
                                and data.get("resourceName") == "":  # the cluster-wide dynamic default
                            default = value
            else:
                if reader.stop.value != "end":
                    damage = f"{path}:{reader.valid_bytes}: {reader.stop.value.replace('_', ' ')}"
        except KcliError as exc:
            damage = exc.at(path=str(path)).describe()
        except OSError as exc:
            damage = f"{path}: {exc.strerror or exc}"
        if damage:
            break
    return KnownPolicies(f"{metadata.name} (KRaft metadata)", overrides, frozenset(names.values()),
                         default or KAFKA_DEFAULT_POLICY,
                         "the cluster default log.cleanup.policy in KRaft metadata" if default else "Kafka's default",
                         damage)


def kctl_broker_policies(log_dir: Path) -> KnownPolicies | None:
    """Topic overrides a kctl broker without ZooKeeper wrote into its log dir, and its dynamic broker default
    (``log.cleanup.policy`` in ``kctl-broker-configs.json``, the broker's own entry over ``<default>``); the
    topics it knows are the partitions there. A default set only in the broker's config file is not known
    here: Kafka's, delete, is assumed, which refuses rather than compacts. None without either file."""
    topics_file, brokers_file = log_dir / KCTL_TOPIC_CONFIGS, log_dir / KCTL_BROKER_CONFIGS
    if not topics_file.is_file() and not brokers_file.is_file():
        return None
    source = str(topics_file if topics_file.is_file() else brokers_file)
    overrides: dict[str, str] = {}
    default, default_source = KAFKA_DEFAULT_POLICY, "the kctl broker's default (delete unless its config sets it)"
    try:
        if topics_file.is_file():
            topics = json.loads(topics_file.read_text()).get("topics", {})
            overrides = {str(t): str(c[CLEANUP_POLICY]) for t, c in topics.items() if CLEANUP_POLICY in c}
        if brokers_file.is_file():
            entities = json.loads(brokers_file.read_text()).get("brokers", {})
            own = [c for e, c in entities.items() if e != "<default>"]  # one log dir, one broker
            for config in (entities.get("<default>", {}), *own):
                if LOG_CLEANUP_POLICY in config:
                    default = str(config[LOG_CLEANUP_POLICY])
                    default_source = f"the dynamic log.cleanup.policy in {brokers_file}"
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        return KnownPolicies(source, damage=f"unreadable: {exc}")
    from kcli.storage.files import parse_partition_dir_name

    present = frozenset(parsed[0] for child in log_dir.iterdir()
                        if (parsed := parse_partition_dir_name(child.name)) is not None)
    return KnownPolicies(source, overrides, present, default, default_source)


def log_dir_policies(log_dir: Path) -> list[KnownPolicies]:
    """Every source of topic configs a log dir itself holds."""
    return [s for s in (kraft_policies(log_dir), kctl_broker_policies(log_dir)) if s is not None]


__all__ = ["CLEANUP_POLICY", "COMPACTED_INTERNAL_TOPICS", "CleanupPolicy", "KCTL_BROKER_CONFIGS", "KCTL_TOPIC_CONFIGS", "KnownPolicies",
           "METADATA_TOPIC", "is_metadata_log", "kctl_broker_policies", "kraft_policies", "log_dir_policies",
           "policy_compacts", "resolve_policy"]
