"""Topics for operators (Kafka's kafka-topics.sh and the topic side of kafka-configs.sh): list, describe,
create, delete, alter configs, against any Kafka-protocol broker.

Metadata (v12 at most) gives partitions, leaders, replicas, ISR and offline replicas; DescribeConfigs the
configs; CreateTopics and DeleteTopics go to the controller (Metadata's controller_id), retried once on
NOT_CONTROLLER; IncrementalAlterConfigs sets and deletes single keys, and a broker without it (before Kafka
2.3) gets AlterConfigs with the topic's whole set of overrides (read first with DescribeConfigs). Every
per-topic failure is reported, not raised, as a message naming the response, the field and the error code
(``CreateTopicsResponse v7: topics[t].error_code = TOPIC_ALREADY_EXISTS (36): ...``). Nothing here prints.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kio.index import KioIndexError
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from kcli.client.client import BrokerConnection, KafkaClient, KafkaClientError, KafkaRequestError, _build
from kcli.errors import UsageError
from kcli.protocol.api import ApiKey
from kcli.protocol.codec import api_name
from kcli.protocol.schema import load_payload_module, load_request_schema
from kcli.records.schema import kafka_uuid_to_string

# The highest version asked for per API (the response shapes read below); lower ones are used when the broker
# or kio stops earlier.
CAPS: dict[ApiKey, int] = {
    ApiKey.METADATA: 12,
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 6,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
}
TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
DEFAULT_TIMEOUT_MS = 30_000
# DescribeConfigs config_source values (ConfigEntry.ConfigSource)
CONFIG_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                  3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                  6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
DYNAMIC_TOPIC_CONFIG = 1
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})  # Kafka's Topic.INTERNAL_TOPICS


# -- results -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionInfo:
    partition: int
    leader: int  # -1: none
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    error: str | None = None  # the partition's error code, when not NONE (LEADER_NOT_AVAILABLE ...)

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    def unavailable(self, live_brokers: Iterable[int]) -> bool:
        """kafka-topics --unavailable-partitions: no leader, or a leader that is not a live broker."""
        return self.leader < 0 or self.leader not in set(live_brokers)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("replicas", "isr", "offline_replicas"):
            out[key] = list(out[key])
        return out


@dataclass(frozen=True)
class ConfigValue:
    name: str
    value: str | None
    source: str
    read_only: bool
    sensitive: bool

    @property
    def is_default(self) -> bool:
        return self.source == "DEFAULT_CONFIG"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class TopicDescription:
    name: str
    topic_id: str | None
    internal: bool
    partitions: list[PartitionInfo] = field(default_factory=list)
    configs: list[ConfigValue] | None = None  # None: not asked, or the broker refused (see config_error)
    error: str | None = None  # the topic could not be described (unknown topic ...)
    config_error: str | None = None

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    def overrides(self) -> dict[str, str | None]:
        return {c.name: c.value for c in self.configs or () if c.source == "DYNAMIC_TOPIC_CONFIG"}

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.name, "topic_id": self.topic_id, "internal": self.internal,
                "partition_count": len(self.partitions), "replication_factor": self.replication_factor,
                "partitions": [p.to_json() for p in self.partitions],
                "configs": None if self.configs is None else [c.to_json() for c in self.configs],
                "error": self.error, "config_error": self.config_error}


@dataclass(frozen=True)
class ClusterView:
    cluster_id: str | None
    controller_id: int
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, TopicDescription]


@dataclass(frozen=True)
class TopicResult:
    """The outcome of create, delete or alter-config for one topic: ``error`` None when it was done."""

    topic: str
    action: str  # created, validated, exists, deleted, absent, refused, altered, failed
    error: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "action": self.action, "ok": self.ok, "error": self.error, **self.detail}


@dataclass(frozen=True)
class NewTopic:
    name: str
    partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    assignment: Mapping[int, Sequence[int]] | None = None  # partition -> replica broker ids
    configs: Mapping[str, str] = field(default_factory=dict)


def parse_replica_assignment(text: str) -> dict[int, list[int]]:
    """kafka-topics' --replica-assignment: partitions separated by commas, their replicas by colons
    (``1:2,2:3,3:1`` is three partitions of two replicas)."""
    out: dict[int, list[int]] = {}
    for index, part in enumerate(text.split(",")):
        try:
            replicas = [int(b) for b in part.strip().split(":")]
        except ValueError:
            raise KafkaClientError(f"--replica-assignment {text!r}: partition {index} is not broker ids "
                                   "separated by colons") from None
        if len(set(replicas)) != len(replicas):
            raise KafkaClientError(f"--replica-assignment {text!r}: partition {index} lists a broker twice")
        out[index] = replicas
    if len({len(r) for r in out.values()}) > 1:
        raise KafkaClientError(f"--replica-assignment {text!r}: partitions have different replica counts")
    return out


# -- versions ------------------------------------------------------------------------------------------
def request_module(connection: BrokerConnection, api_key: ApiKey,
                   caps: dict[ApiKey, int] | None = None) -> tuple[int, Any]:
    """The highest version of ``api_key`` that the broker serves, kio has and is at most ``caps[api_key]``
    (CAPS unless given)."""
    caps = CAPS if caps is None else caps
    theirs = connection.versions.get(int(api_key))
    if theirs is None:
        raise KafkaClientError(f"the broker at {connection.address} does not serve {api_name(api_key)}")
    for version in range(min(caps.get(api_key, theirs[1]), theirs[1]), theirs[0] - 1, -1):
        try:
            load_request_schema(api_key, version)
        except KioIndexError:
            continue
        return version, load_payload_module(api_key, version, EntityType.request)
    raise KafkaClientError(f"the broker at {connection.address} serves {api_name(api_key)} "
                           f"v{theirs[0]}-v{theirs[1]}, none of which kcli's client speaks")


def _failure(request: str, field_path: str, error: Any, message: str | None = None) -> str:
    return KafkaRequestError(message or "", request=request, field=field_path, error=ErrorCode(error)).describe()


def _timeout(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


# -- Metadata ------------------------------------------------------------------------------------------
def cluster_view(client: KafkaClient, topics: Sequence[str] | None = None) -> ClusterView:
    """Brokers, the controller and the named topics (None: every topic) with their partitions' replicas."""
    connection = client._any()
    version, m = request_module(connection, ApiKey.METADATA)
    wanted = None if topics is None else tuple(_build(m, "MetadataRequestTopic", name=t, topic_id=None)
                                               for t in topics)
    if wanted is None and version == 0:
        wanted = ()
    body = connection.call(ApiKey.METADATA, _build(
        m, "MetadataRequest", topics=wanted, allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False))
    brokers = {int(b.node_id): (b.host, int(b.port)) for b in body.brokers}
    client._brokers = dict(brokers)
    label = f"MetadataResponse v{version}"
    described: dict[str, TopicDescription] = {}
    for t in body.topics:
        name = t.name or str(getattr(t, "topic_id", ""))
        topic_id = getattr(t, "topic_id", None)
        # Kafka's tools print topic ids as Uuid.toString does: 22 characters of URL-safe base64
        known_id = None if topic_id in (None, uuid.UUID(int=0)) else kafka_uuid_to_string(topic_id)
        topic = TopicDescription(name, known_id,
                                 bool(getattr(t, "is_internal", False)) or name in INTERNAL_TOPICS)
        if t.error_code != ErrorCode.none:
            topic.error = _failure(label, f"topics[{name}].error_code", t.error_code)
        for p in sorted(t.partitions, key=lambda p: int(p.partition_index)):
            error = None
            if p.error_code not in (ErrorCode.none, ErrorCode.replica_not_available):
                error = _failure(label, f"topics[{name}].partitions[{p.partition_index}].error_code", p.error_code)
            topic.partitions.append(PartitionInfo(
                int(p.partition_index), int(p.leader_id), int(getattr(p, "leader_epoch", -1)),
                tuple(int(b) for b in p.replica_nodes), tuple(int(b) for b in p.isr_nodes),
                tuple(int(b) for b in getattr(p, "offline_replicas", ())), error))
        described[name] = topic
    return ClusterView(getattr(body, "cluster_id", None), int(getattr(body, "controller_id", -1)), brokers,
                       described)


def list_topics(client: KafkaClient, *, exclude_internal: bool = False) -> list[str]:
    view = cluster_view(client, None)
    return sorted(n for n, t in view.topics.items() if not (exclude_internal and t.internal))


# -- DescribeConfigs -----------------------------------------------------------------------------------
def describe_configs(client: KafkaClient, topics: Sequence[str]) -> dict[str, list[ConfigValue] | str]:
    """Each topic's configs (every key, with its source), or the error message naming the field."""
    if not topics:
        return {}
    connection = client._any()
    version, m = request_module(connection, ApiKey.DESCRIBE_CONFIGS)
    body = connection.call(ApiKey.DESCRIBE_CONFIGS, _build(
        m, "DescribeConfigsRequest", include_synonyms=False, include_documentation=False,
        resources=tuple(_build(m, "DescribeConfigsResource", resource_type=TOPIC_RESOURCE, resource_name=t,
                               configuration_keys=None) for t in topics)))
    label = f"DescribeConfigsResponse v{version}"
    out: dict[str, list[ConfigValue] | str] = {}
    for r in body.results:
        if r.error_code != ErrorCode.none:
            out[r.resource_name] = _failure(label, f"results[{r.resource_name}].error_code", r.error_code,
                                            r.error_message)
            continue
        values = []
        for c in r.configs:
            source = int(getattr(c, "config_source", -1))
            if version == 0:  # v0 has is_default instead of a source
                source = 5 if getattr(c, "is_default", False) else 1
            values.append(ConfigValue(c.name, c.value, CONFIG_SOURCES.get(source, str(source)), bool(c.read_only),
                                      bool(c.is_sensitive)))
        out[r.resource_name] = sorted(values, key=lambda v: v.name)
    return out


def describe_topics(client: KafkaClient, topics: Sequence[str] | None = None, *, configs: bool = True,
                    exclude_internal: bool = False) -> ClusterView:
    """Partitions and (with ``configs``) configs of the named topics, or of every topic; an unknown topic
    comes back with ``error`` set."""
    view = cluster_view(client, None if topics is None else list(dict.fromkeys(topics)))
    if exclude_internal:
        for name in [n for n, t in view.topics.items() if t.internal]:
            del view.topics[name]
    if configs:
        found = [n for n, t in view.topics.items() if t.error is None]
        for name, result in describe_configs(client, found).items():
            if name in view.topics:
                if isinstance(result, str):
                    view.topics[name].config_error = result
                else:
                    view.topics[name].configs = result
    return view


# -- CreateTopics / DeleteTopics -----------------------------------------------------------------------
def _controller_call(client: KafkaClient, api_key: ApiKey, build: Any) -> tuple[int, Any]:
    """Send ``build(version, module)`` to the controller; once more after NOT_CONTROLLER in any result."""
    for attempt in range(2):
        view = cluster_view(client, [])
        node = view.controller_id if view.controller_id >= 0 else next(iter(view.brokers), -1)
        connection = client._node(node) if node >= 0 else client._any()
        version, m = request_module(connection, api_key)
        body = connection.call(api_key, build(version, m))
        results = getattr(body, "topics", None) or getattr(body, "responses", None) or ()
        if attempt == 0 and any(r.error_code == ErrorCode.not_controller for r in results):
            time.sleep(0.2)
            continue
        return version, body
    raise AssertionError("unreachable")


CONTROLLER_ATTEMPTS = 3


def controller_call(client: KafkaClient, api_key: ApiKey, build: Any, not_controller: Any) -> tuple[int, Any]:
    """``build(version, module)`` sent to the controller Metadata names (ElectLeaders, CreatePartitions, the
    reassignment requests: only the active controller serves them); sent again, the metadata read anew, while
    ``not_controller(body)`` says the answer came from a broker that no longer controls, as Kafka's admin client
    retries them. Returns (version, response body)."""
    for attempt in range(CONTROLLER_ATTEMPTS):
        view = cluster_view(client, [])
        node = view.controller_id if view.controller_id >= 0 else next(iter(sorted(view.brokers)), -1)
        connection = client._node(node) if node >= 0 else client._any()
        version, m = request_module(connection, api_key)
        body = connection.call(api_key, build(version, m))
        if attempt < CONTROLLER_ATTEMPTS - 1 and not_controller(body):
            time.sleep(0.2 * (attempt + 1))
            continue
        return version, body
    raise AssertionError("unreachable")


def is_not_controller(code: Any) -> bool:
    return code == ErrorCode.not_controller


def create_topics(client: KafkaClient, specs: Sequence[NewTopic], *, validate_only: bool = False,
                  if_not_exists: bool = False, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> list[TopicResult]:
    """CreateTopics for every spec (one request, to the controller)."""
    if not specs:
        return []

    def build(version: int, m: Any) -> Any:
        return _build(m, "CreateTopicsRequest", timeout=_timeout(timeout_ms), validate_only=validate_only,
                      topics=tuple(_build(
                          m, "CreatableTopic", name=s.name,
                          num_partitions=-1 if s.assignment else s.partitions,
                          replication_factor=-1 if s.assignment else s.replication_factor,
                          assignments=tuple(_build(m, "CreatableReplicaAssignment", partition_index=p,
                                                   broker_ids=tuple(r)) for p, r in sorted((s.assignment or {}).items())),
                          configs=tuple(_build(m, "CreatableTopicConfig", name=k, value=v)
                                        for k, v in s.configs.items())) for s in specs))

    version, body = _controller_call(client, ApiKey.CREATE_TOPICS, build)
    label = f"CreateTopicsResponse v{version}"
    results = []
    for t in body.topics:
        detail: dict[str, Any] = {}
        if getattr(t, "num_partitions", -1) != -1:
            detail = {"partitions": int(t.num_partitions), "replication_factor": int(t.replication_factor)}
            topic_id = getattr(t, "topic_id", None)
            if topic_id not in (None, uuid.UUID(int=0)):
                detail["topic_id"] = kafka_uuid_to_string(topic_id)
        if t.error_code == ErrorCode.none:
            results.append(TopicResult(t.name, "validated" if validate_only else "created", None, detail))
        elif t.error_code == ErrorCode.topic_already_exists and if_not_exists:
            results.append(TopicResult(t.name, "exists", None, detail))
        else:
            results.append(TopicResult(t.name, "failed", _failure(label, f"topics[{t.name}].error_code",
                                                                  t.error_code, t.error_message), detail))
    return results


def delete_topics(client: KafkaClient, names: Sequence[str], *, if_exists: bool = False, force: bool = False,
                  timeout_ms: int = DEFAULT_TIMEOUT_MS) -> list[TopicResult]:
    """DeleteTopics (to the controller). Internal topics are refused unless ``force``, as kafka-topics refuses
    them; with ``if_exists`` an unknown topic is not an error."""
    names = list(dict.fromkeys(names))
    view = cluster_view(client, names)
    results: dict[str, TopicResult] = {}
    wanted = []
    for name in names:
        topic = view.topics.get(name)
        known = topic is not None and topic.error is None
        if not known:
            if if_exists:
                results[name] = TopicResult(name, "absent")
            else:
                results[name] = TopicResult(name, "failed", topic.error if topic is not None and topic.error else
                                            f"MetadataResponse: topics[{name}]: no such topic")
        elif (topic.internal or name in INTERNAL_TOPICS) and not force:
            results[name] = TopicResult(name, "refused", f"{name} is a Kafka internal topic: not deleted "
                                        "(--force deletes it)")
        else:
            wanted.append(name)
    if wanted:
        def build(version: int, m: Any) -> Any:
            return _build(m, "DeleteTopicsRequest", timeout=_timeout(timeout_ms), topic_names=tuple(wanted),
                          topics=tuple(_build(m, "DeleteTopicState", name=n, topic_id=uuid.UUID(int=0)) for n in wanted))

        version, body = _controller_call(client, ApiKey.DELETE_TOPICS, build)
        label = f"DeleteTopicsResponse v{version}"
        for r in body.responses:
            name = r.name
            if r.error_code == ErrorCode.none:
                results[name] = TopicResult(name, "deleted")
            elif r.error_code == ErrorCode.unknown_topic_or_partition and if_exists:
                results[name] = TopicResult(name, "absent")
            else:
                results[name] = TopicResult(name, "failed", _failure(label, f"responses[{name}].error_code",
                                                                     r.error_code, getattr(r, "error_message", None)))
    return [results[n] for n in names if n in results]


# -- configs -------------------------------------------------------------------------------------------
def alter_topic_configs(client: KafkaClient, topics: Sequence[str], *, set_configs: Mapping[str, str] | None = None,
                        delete_configs: Sequence[str] = (), validate_only: bool = False,
                        incremental: bool | None = None) -> list[TopicResult]:
    """Set and delete topic-level overrides. IncrementalAlterConfigs when the broker serves it (``incremental``
    None), else AlterConfigs with the topic's current overrides merged (a read-modify-write: a concurrent
    change in between is lost, as with kafka-configs against old brokers)."""
    set_configs = dict(set_configs or {})
    delete_configs = list(dict.fromkeys(delete_configs))
    topics = list(dict.fromkeys(topics))
    if not topics:
        return []
    connection = client._any()
    if incremental is None:
        incremental = int(ApiKey.INCREMENTAL_ALTER_CONFIGS) in connection.versions
    action = "validated" if validate_only else "altered"
    results: list[TopicResult] = []
    detail = {"set": set_configs, "deleted": delete_configs, "request": ""}
    if incremental:
        version, m = request_module(connection, ApiKey.INCREMENTAL_ALTER_CONFIGS)
        ops = [(k, SET, v) for k, v in set_configs.items()] + [(k, DELETE, None) for k in delete_configs]
        body = connection.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, _build(
            m, "IncrementalAlterConfigsRequest", validate_only=validate_only, resources=tuple(_build(
                m, "AlterConfigsResource", resource_type=TOPIC_RESOURCE, resource_name=t, configs=tuple(
                    _build(m, "AlterableConfig", name=k, config_operation=op, value=v) for k, op, v in ops))
                for t in topics)))
        label = f"IncrementalAlterConfigsResponse v{version}"
    else:
        current = describe_configs(client, topics)
        bodies = {}
        for t in topics:
            found = current.get(t)
            if isinstance(found, str) or found is None:
                results.append(TopicResult(t, "failed", found or f"DescribeConfigsResponse: results[{t}]: missing"))
                continue
            merged = {c.name: c.value for c in found if c.source == "DYNAMIC_TOPIC_CONFIG"}
            for k in delete_configs:
                merged.pop(k, None)
            merged.update(set_configs)
            bodies[t] = merged
        if not bodies:
            return results
        version, m = request_module(connection, ApiKey.ALTER_CONFIGS)
        body = connection.call(ApiKey.ALTER_CONFIGS, _build(
            m, "AlterConfigsRequest", validate_only=validate_only, resources=tuple(_build(
                m, "AlterConfigsResource", resource_type=TOPIC_RESOURCE, resource_name=t, configs=tuple(
                    _build(m, "AlterableConfig", name=k, value=v) for k, v in merged.items()))
                for t, merged in bodies.items())))
        label = f"AlterConfigsResponse v{version}"
    for r in body.responses:
        info = {**detail, "request": label.split("Response")[0]}
        if r.error_code == ErrorCode.none:
            results.append(TopicResult(r.resource_name, action, None, info))
        else:
            results.append(TopicResult(r.resource_name, "failed", _failure(
                label, f"responses[{r.resource_name}].error_code", r.error_code, r.error_message), info))
    order = {t: i for i, t in enumerate(topics)}
    return sorted(results, key=lambda r: order.get(r.topic, len(order)))


# -- CreatePartitions ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionGrowth:
    """kafka-topics --alter --partitions for one topic: the count it has and the count asked for."""

    topic: str
    current: int
    wanted: int
    assignment: tuple[tuple[int, ...], ...] | None = None  # the new partitions' replicas, in order


def plan_partition_growth(view: ClusterView, topics: Sequence[str], count: int,
                          assignment: Mapping[int, Sequence[int]] | None = None) -> list[PartitionGrowth]:
    """Check an increase to ``count`` partitions against the topics' current counts, as kafka-topics does before
    CreatePartitions: an unknown topic raises KafkaClientError, a count below the current one ("The number of
    partitions for a topic can only be increased") UsageError. ``assignment`` is kafka-topics' --replica-assignment: either
    every partition (the existing ones first, which are skipped, as TopicCommand skips them) or only the new ones."""
    out = []
    for name in dict.fromkeys(topics):
        topic = view.topics.get(name)
        if topic is None:
            raise KafkaClientError(f"topic {name} not found", path="MetadataResponse")
        if topic.error:
            raise KafkaClientError(topic.error)
        current = len(topic.partitions)
        if count < current:
            raise UsageError(f"The number of partitions for a topic can only be increased: {name} has "
                                   f"{current}, --partitions {count} asks for fewer")
        new: tuple[tuple[int, ...], ...] | None = None
        if assignment is not None:
            rows = [tuple(assignment[p]) for p in sorted(assignment)]
            if len(rows) == count:
                rows = rows[current:]
            if len(rows) != count - current:
                raise UsageError(f"--replica-assignment lists {len(assignment)} partitions: {name} grows from "
                                       f"{current} to {count}, so give all {count} or the {count - current} new ones")
            new = tuple(rows)
        out.append(PartitionGrowth(name, current, count, new))
    return out


def create_partitions(client: KafkaClient, growths: Sequence[PartitionGrowth], *, validate_only: bool = False,
                      timeout_ms: int = DEFAULT_TIMEOUT_MS) -> list[TopicResult]:
    """CreatePartitions (to the controller) for every growth; one result per topic (action ``altered`` or
    ``validated``, or ``failed`` with the response's field and error code)."""
    if not growths:
        return []
    def build(version: int, m: Any) -> Any:
        return _build(m, "CreatePartitionsRequest", timeout=_timeout(timeout_ms), validate_only=validate_only,
                      topics=tuple(_build(m, "CreatePartitionsTopic", name=g.topic, count=g.wanted, assignments=None
                                          if g.assignment is None else tuple(
                                              _build(m, "CreatePartitionsAssignment", broker_ids=tuple(r))
                                              for r in g.assignment)) for g in growths))

    version, body = controller_call(client, ApiKey.CREATE_PARTITIONS, build,
                                    lambda b: any(is_not_controller(r.error_code) for r in b.results))
    label = f"CreatePartitionsResponse v{version}"
    by_name = {g.topic: g for g in growths}
    results = []
    for r in body.results:
        g = by_name.get(r.name)
        detail = {"partitions": g.wanted, "previous_partitions": g.current} if g is not None else {}
        if r.error_code == ErrorCode.none:
            results.append(TopicResult(r.name, "validated" if validate_only else "partitions", None, detail))
        else:
            results.append(TopicResult(r.name, "failed", _failure(label, f"results[{r.name}].error_code",
                                                                  r.error_code, r.error_message), detail))
    return results
