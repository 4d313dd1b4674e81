"""Partition reassignment as kafka-reassign-partitions does it (Kafka 3.7's ReassignPartitionsCommand):
--generate a plan with Kafka's replica assignment, --execute it (AlterPartitionReassignments, KIP-455), --verify,
--cancel and --list (ListPartitionReassignments) it; both requests go to the controller. The log dirs a plan names
go to their brokers (AlterReplicaLogDirs, KIP-113) and --verify finds them with DescribeLogDirs.

--execute --throttle sets Kafka's replication throttles (KIP-73) before the reassignment starts, as the tool does
(IncrementalAlterConfigs): on every broker a moving partition leaves or reaches, leader.replication.throttled.rate
and follower.replication.throttled.rate; on each topic, leader.replication.throttled.replicas (the moving
partitions' current replicas) and follower.replication.throttled.replicas (the replicas being added). --verify,
once no partition of the plan is still moving, and --cancel remove them all again (unless --preserve-throttles).

The plan files are Kafka's: ``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],
"log_dirs":["any","any"]}]}`` (``log_dirs`` optional) and, for --generate, ``{"version":1,"topics":[{"topic":
"t"}]}``. Parsing checks what Kafka checks, with its messages. The assignment is AdminUtils.assignReplicasToBrokers
(rack-aware when every broker has a rack): the same algorithm as kcli.broker.admin_utils, which this layer may not
import (tests/cli/test_admin_commands.py checks that both give the same plans). Nothing here prints.
"""

from __future__ import annotations

import datetime
import json
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from kcli.client.client import KafkaClient, KafkaClientError, KafkaRequestError, _build, error_name
from kcli.client.topics import cluster_view, controller_call, is_not_controller, request_module
from kcli.errors import UsageError
from kcli.protocol.api import ApiKey

ANY_LOG_DIR = "any"
# ReassignPartitionsCommand's brokerLevelThrottles and topicLevelThrottles (KIP-73)
LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"
YOU_MUST_RUN_VERIFY_PERIODICALLY = ("Warning: You must run --verify periodically, until the reassignment completes, "
                                    "to ensure the throttle is removed.")
DEFAULT_TIMEOUT_MS = 30_000
ALTER_REPLICA_LOG_DIRS = int(ApiKey.ALTER_REPLICA_LOG_DIRS)
MOVE_RETRY_S = 0.1  # executeMoves' pause between AlterReplicaLogDirs rounds
CANNOT_EXECUTE_BECAUSE_OF_EXISTING = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional flag can also be used to "
    "change the throttle by resubmitting the current reassignment.")

Partition = tuple[str, int]


def partition_name(tp: Partition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _sorted(parts: Iterable[Partition]) -> list[Partition]:
    return sorted(parts, key=lambda tp: (tp[0], tp[1]))


# -- the JSON files -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ReassignmentPlan:
    """A parsed reassignment file: target replicas per partition (file order), and the log dir of each replica
    that names one (not "any")."""

    partitions: dict[Partition, list[int]]
    log_dirs: dict[tuple[str, int, int], str] = field(default_factory=dict)


def _load(text: str, source: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"The input string is not a valid JSON: {exc}", path=source) from None
    if not isinstance(doc, dict):
        raise UsageError("expected a JSON object", path=source)
    version = doc.get("version", 1)
    if version != 1:
        raise UsageError(f"Not supported version field value {version}", path=source)
    return doc


def parse_topics_to_move(text: str, source: str = "--topics-to-move-json-file") -> list[str]:
    """``{"version":1,"topics":[{"topic":"t"}]}``: the topic names, in order; a name listed twice is an error."""
    doc = _load(text, source)
    items = doc.get("topics", [])
    if not isinstance(items, list):
        raise UsageError('"topics" is not a list', path=source)
    topics = []
    for i, item in enumerate(items):
        name = item.get("topic") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name:
            raise UsageError(f'topics[{i}]: expected {{"topic": "name"}}', path=source)
        topics.append(name)
    duplicates = sorted({t for t in topics if topics.count(t) > 1})
    if duplicates:
        raise UsageError(f"List of topics to reassign contains duplicate entries: {', '.join(duplicates)}",
                         path=source)
    if not topics:
        raise UsageError("no topics to move", path=source)
    return topics


def _int_list(value: Any) -> list[int] | None:
    if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
        return None
    return list(value)


def parse_reassignment(text: str, source: str = "--reassignment-json-file") -> ReassignmentPlan:
    """A reassignment file, with ReassignPartitionsCommand's checks: not empty, no partition twice, no empty or
    duplicated replica list, as many log dirs as replicas."""
    doc = _load(text, source)
    items = doc.get("partitions", [])
    if not isinstance(items, list):
        raise UsageError('"partitions" is not a list', path=source)
    order: list[Partition] = []
    targets: dict[Partition, list[int]] = {}
    log_dirs: dict[tuple[str, int, int], str] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise UsageError(f"partitions[{i}] is not an object", path=source)
        topic, partition, replicas = item.get("topic"), item.get("partition"), _int_list(item.get("replicas"))
        if not isinstance(topic, str) or not topic or isinstance(partition, bool) or not isinstance(partition, int):
            raise UsageError(f'partitions[{i}]: expected "topic" (a string) and "partition" (a number)', path=source)
        if replicas is None:
            raise UsageError(f'partitions[{i}] ({topic}-{partition}): "replicas" is not a list of broker ids',
                             path=source)
        dirs = item.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
            raise UsageError(f'partitions[{i}] ({topic}-{partition}): "log_dirs" is not a list of strings',
                             path=source)
        if len(dirs) != len(replicas):
            raise UsageError(f"Size of replicas list {replicas} is different from size of log dirs list {dirs} for "
                             f"partition {topic}-{partition}", path=source)
        tp = (topic, partition)
        order.append(tp)
        targets[tp] = replicas
        for broker, log_dir in zip(replicas, dirs):
            if log_dir != ANY_LOG_DIR:
                log_dirs[(topic, partition, broker)] = log_dir
    if not order:
        raise UsageError("Partition reassignment list cannot be empty", path=source)
    if any(not r for r in targets.values()):
        raise UsageError("Partition replica list cannot be empty", path=source)
    duplicates = sorted({partition_name(tp) for tp in order if order.count(tp) > 1})
    if duplicates:
        raise UsageError(f"Partition reassignment contains duplicate topic partitions: {','.join(duplicates)}",
                         path=source)
    repeated = [f"{partition_name(tp)} contains multiple entries for "
                f"{','.join(str(b) for b in sorted({b for b in r if r.count(b) > 1}))}"
                for tp, r in targets.items() if len(set(r)) != len(r)]
    if repeated:
        raise UsageError(f"Partition replica lists may not contain duplicate entries: {'. '.join(repeated)}",
                         path=source)
    return ReassignmentPlan(targets, log_dirs)


def reassignment_json(assignment: Mapping[Partition, Sequence[int]],
                      log_dirs: Mapping[tuple[str, int, int], str] | None = None) -> dict[str, Any]:
    """formatAsReassignmentJson's object: partitions sorted by topic and partition, a log dir per replica."""
    log_dirs = log_dirs or {}
    return {"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": list(assignment[(t, p)]),
         "log_dirs": [log_dirs.get((t, p, b), ANY_LOG_DIR) for b in assignment[(t, p)]]}
        for t, p in _sorted(assignment)]}


def format_reassignment_json(assignment: Mapping[Partition, Sequence[int]],
                             log_dirs: Mapping[tuple[str, int, int], str] | None = None) -> str:
    """As Kafka's tool prints it (Jackson's compact JSON)."""
    return json.dumps(reassignment_json(assignment, log_dirs), separators=(",", ":"))


# -- Kafka's replica assignment (AdminUtils.assignReplicasToBrokers) ---------------------------------------------
class RandomSource(Protocol):
    def randrange(self, stop: int, /) -> int: ...


@dataclass(frozen=True)
class Broker:
    id: int
    rack: str | None = None


def _replica_index(first: int, shift: int, index: int, n: int) -> int:
    return (first + 1 + (shift + index) % (n - 1)) % n


def _rack_alternated(racks: Mapping[int, str]) -> list[int]:
    by_rack: dict[str, list[int]] = {}
    for broker, rack in racks.items():
        by_rack.setdefault(rack, []).append(broker)
    queues = [iter(sorted(by_rack[rack])) for rack in sorted(by_rack)]
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        broker = next(queues[i], None)
        if broker is not None:
            out.append(broker)
        i = (i + 1) % len(queues)
    return out


def assign_replicas(brokers: Sequence[Broker], n_partitions: int, replication_factor: int,
                    rng: RandomSource = random) -> dict[int, list[int]]:
    """Partition -> replicas (the first the preferred leader), drawing the start index and the follower shift from
    ``rng`` as Kafka draws them; rack-aware when every broker has a rack."""
    if n_partitions <= 0:
        raise UsageError("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise UsageError("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise UsageError(f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.")
    ordered = sorted(brokers, key=lambda b: b.id)
    racked = [b for b in ordered if b.rack is not None]
    if racked and len(racked) < len(ordered):
        raise UsageError("Not all brokers have rack information for replica rack aware assignment.")
    racks = {b.id: b.rack for b in racked}
    arranged = _rack_alternated(racks) if racks else [b.id for b in ordered]  # type: ignore[arg-type]
    n = len(arranged)
    num_racks = len(set(racks.values()))
    start, shift = rng.randrange(n), rng.randrange(n)
    out: dict[int, list[int]] = {}
    for partition in range(n_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        leader = arranged[first]
        if not racks:
            out[partition] = [leader] + [arranged[_replica_index(first, shift, j, n)]
                                         for j in range(replication_factor - 1)]
            continue
        replicas, racks_used, brokers_used = [leader], {racks[leader]}, {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                if ((racks[broker] not in racks_used or len(racks_used) == num_racks)
                        and (broker not in brokers_used or len(brokers_used) == n)):
                    replicas.append(broker)
                    racks_used.add(racks[broker])
                    brokers_used.add(broker)
                    break
        out[partition] = replicas
    return out


def calculate_assignment(current: Mapping[Partition, Sequence[int]], brokers: Sequence[Broker],
                         rng: RandomSource = random) -> dict[Partition, list[int]]:
    """ReassignPartitionsCommand.calculateAssignment: each topic's partitions spread over ``brokers`` anew, its
    replication factor kept (that of its first partition)."""
    by_topic: dict[str, list[Partition]] = {}
    for tp in _sorted(current):
        by_topic.setdefault(tp[0], []).append(tp)
    proposed: dict[Partition, list[int]] = {}
    for topic, parts in by_topic.items():
        for partition, replicas in assign_replicas(brokers, len(parts), len(current[parts[0]]), rng).items():
            proposed[(topic, partition)] = replicas
    return proposed


# -- the cluster ----------------------------------------------------------------------------------------------
def brokers_with_racks(client: KafkaClient) -> list[Broker]:
    """The live brokers and their racks (Metadata v1+)."""
    connection = client._any()
    version, m = request_module(connection, ApiKey.METADATA)
    body = connection.call(ApiKey.METADATA, _build(
        m, "MetadataRequest", topics=(), allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False))
    return sorted((Broker(int(b.node_id), getattr(b, "rack", None) or None) for b in body.brokers),
                  key=lambda b: b.id)


def current_assignment(client: KafkaClient, topics: Sequence[str]) -> dict[Partition, list[int]]:
    """Every partition's replicas of ``topics``; an unknown topic raises KafkaClientError ("Topic t not found.")."""
    view = cluster_view(client, list(dict.fromkeys(topics)))
    out: dict[Partition, list[int]] = {}
    for name in topics:
        topic = view.topics.get(name)
        if topic is None or topic.error:
            raise KafkaClientError(f"Topic {name} not found." + (f" ({topic.error})" if topic and topic.error else ""))
        for p in topic.partitions:
            out[(name, p.partition)] = list(p.replicas)
    return out


@dataclass(frozen=True)
class GeneratedPlan:
    current: dict[Partition, list[int]]
    proposed: dict[Partition, list[int]]


def generate(client: KafkaClient, topics: Sequence[str], broker_list: Sequence[int], *, rack_aware: bool = True,
             rng: RandomSource = random) -> GeneratedPlan:
    """--generate: the topics' current replicas and Kafka's proposal over ``broker_list`` (its live brokers)."""
    duplicates = sorted({b for b in broker_list if list(broker_list).count(b) > 1})
    if duplicates:
        raise UsageError(f"Broker list contains duplicate entries: {', '.join(map(str, duplicates))}")
    current = current_assignment(client, topics)
    live = {b.id: b for b in brokers_with_racks(client)}
    missing = [b for b in broker_list if b not in live]
    if missing:
        raise KafkaClientError(f"broker{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of "
                               f"--broker-list {'are' if len(missing) > 1 else 'is'} not alive in the cluster "
                               f"(live: {', '.join(map(str, sorted(live)))})")
    chosen = [live[b] if rack_aware else Broker(b) for b in broker_list]
    rackless = [b for b in chosen if b.rack is None]
    if rack_aware and rackless and len(rackless) < len(chosen):
        raise UsageError("Not all brokers have rack information. Add --disable-rack-aware in command line to make "
                         "replica assignment without rack information.")
    return GeneratedPlan(current, calculate_assignment(current, chosen, rng))


# -- the requests ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OngoingReassignment:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]

    def line(self) -> str:
        """curReassignmentsToString's line."""
        text = f"{self.topic}-{self.partition}: replicas: {','.join(map(str, self.replicas))}."
        if self.adding:
            text += f" adding: {','.join(map(str, self.adding))}."
        if self.removing:
            text += f" removing: {','.join(map(str, self.removing))}."
        return text

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "replicas": list(self.replicas),
                "adding_replicas": list(self.adding), "removing_replicas": list(self.removing)}


def _timeout(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


def list_reassignments(client: KafkaClient, partitions: Iterable[Partition] | None = None, *,
                       timeout_ms: int = DEFAULT_TIMEOUT_MS) -> dict[Partition, OngoingReassignment]:
    """ListPartitionReassignments: the ongoing reassignments (of ``partitions``, or all)."""
    wanted: dict[str, list[int]] | None = None
    if partitions is not None:
        wanted = {}
        for t, p in partitions:
            wanted.setdefault(t, []).append(p)

    def build(version: int, m: Any) -> Any:
        return _build(m, "ListPartitionReassignmentsRequest", timeout=_timeout(timeout_ms), topics=None
                      if wanted is None else tuple(_build(m, "ListPartitionReassignmentsTopics", name=t,
                                                          partition_indexes=tuple(ps)) for t, ps in wanted.items()))

    version, body = controller_call(client, ApiKey.LIST_PARTITION_REASSIGNMENTS, build,
                                    lambda b: is_not_controller(b.error_code))
    if body.error_code != ErrorCode.none:
        raise KafkaRequestError(body.error_message or "", request=f"ListPartitionReassignmentsResponse v{version}",
                                field="error_code", error=body.error_code)
    out = {}
    for t in body.topics:
        for p in t.partitions:
            out[(t.name, int(p.partition_index))] = OngoingReassignment(
                t.name, int(p.partition_index), tuple(map(int, p.replicas)), tuple(map(int, p.adding_replicas)),
                tuple(map(int, p.removing_replicas)))
    return dict(sorted(out.items()))


def alter_reassignments(client: KafkaClient, targets: Mapping[Partition, Sequence[int] | None], *,
                        timeout_ms: int = DEFAULT_TIMEOUT_MS) -> dict[Partition, str]:
    """AlterPartitionReassignments: a target replica list per partition, or None to cancel its reassignment.
    Returns the partitions that failed, each with the field, Kafka's error code and message."""
    if not targets:
        return {}
    by_topic: dict[str, list[tuple[int, Sequence[int] | None]]] = {}
    for (t, p), replicas in targets.items():
        by_topic.setdefault(t, []).append((p, replicas))

    def build(version: int, m: Any) -> Any:
        return _build(m, "AlterPartitionReassignmentsRequest", timeout=_timeout(timeout_ms), topics=tuple(
            _build(m, "ReassignableTopic", name=t, partitions=tuple(
                _build(m, "ReassignablePartition", partition_index=p,
                       replicas=None if r is None else tuple(int(b) for b in r)) for p, r in parts))
            for t, parts in by_topic.items()))

    version, body = controller_call(client, ApiKey.ALTER_PARTITION_REASSIGNMENTS, build,
                                    lambda b: is_not_controller(b.error_code))
    label = f"AlterPartitionReassignmentsResponse v{version}"
    if body.error_code != ErrorCode.none:
        raise KafkaRequestError(body.error_message or "", request=label, field="error_code", error=body.error_code)
    errors = {}
    for t in body.responses:
        for p in t.partitions:
            if p.error_code != ErrorCode.none:
                errors[(t.name, int(p.partition_index))] = (
                    f"{label} responses[{t.name}].partitions[{p.partition_index}].error_code = "
                    f"{error_name(p.error_code)}" + (f": {p.error_message}" if p.error_message else ""))
    return errors


# -- replication throttles (KIP-73) ----------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionMove:
    """ReassignPartitionsCommand's PartitionMove: the replicas a partition moves from and the ones it gains."""

    sources: frozenset[int]
    destinations: frozenset[int]


MoveMap = dict[str, dict[int, PartitionMove]]  # topic -> partition -> move


def proposed_move_map(ongoing: Mapping[Partition, OngoingReassignment], proposed: Mapping[Partition, Sequence[int]],
                      current: Mapping[Partition, Sequence[int]]) -> MoveMap:
    """calculateProposedMoveMap: every ongoing reassignment (its replicas before it began are the sources, the
    ones being added the destinations), then each proposed partition: the sources of its ongoing move, else its
    current replicas; the destinations its target replicas not among them."""
    moves: MoveMap = {}
    for (topic, partition), r in ongoing.items():
        moves.setdefault(topic, {})[partition] = PartitionMove(
            frozenset(r.replicas) - frozenset(r.adding), frozenset(r.adding))
    for (topic, partition), replicas in proposed.items():
        parts = moves.setdefault(topic, {})
        move = parts.get(partition)
        if move is not None:
            sources = move.sources
        elif (topic, partition) in current:
            sources = frozenset(current[(topic, partition)])
        else:
            raise KafkaClientError(f"Trying to reassign a topic partition {topic}-{partition} with 0 replicas")
        parts[partition] = PartitionMove(sources, frozenset(replicas) - sources)
    return moves


def leader_throttles(moves: MoveMap) -> dict[str, str]:
    """calculateLeaderThrottles: per topic, ``partition:source`` of every move (sorted as strings, Kafka's
    TreeSet[String])."""
    return {topic: ",".join(sorted(f"{p}:{b}" for p, move in parts.items() for b in move.sources))
            for topic, parts in moves.items()}


def follower_throttles(moves: MoveMap) -> dict[str, str]:
    """calculateFollowerThrottles: per topic, ``partition:destination`` of every replica being added."""
    return {topic: ",".join(sorted(f"{p}:{b}" for p, move in parts.items() for b in move.destinations
                                   if b not in move.sources))
            for topic, parts in moves.items()}


def reassigning_brokers(moves: MoveMap) -> list[int]:
    """calculateReassigningBrokers: every source and destination."""
    return sorted({b for parts in moves.values() for move in parts.values() for b in move.sources | move.destinations})


@dataclass(frozen=True)
class ThrottleResult:
    """What --execute --throttle / --replica-alter-log-dirs-throttle set."""

    rate: int | None  # the inter-broker throttle (leader and follower rates), None when not asked
    brokers: list[int]
    topics: dict[str, dict[str, str]]  # topic -> {throttled-replicas key: value}
    log_dirs_rate: int | None = None
    log_dir_brokers: list[int] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The tool's lines (executeAssignment, modifyInterBrokerThrottle, modifyLogDirThrottle)."""
        out = [YOU_MUST_RUN_VERIFY_PERIODICALLY]
        if self.rate is not None:
            out.append(f"The inter-broker throttle limit was set to {self.rate} B/s")
        if self.log_dirs_rate is not None:
            out.append(f"The replica-alter-dir throttle limit was set to {self.log_dirs_rate} B/s")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"rate": self.rate, "brokers": self.brokers, "topics": self.topics,
                "log_dirs_rate": self.log_dirs_rate, "log_dir_brokers": self.log_dir_brokers}


def _alter_or_raise(client: KafkaClient, entity_type: str, names: Iterable[str], set_configs: Mapping[str, str]
                    ) -> None:
    from kcli.client.configs import alter

    for result in alter(client, entity_type, list(names), set_configs=set_configs):
        if result.error is not None:
            raise KafkaClientError(f"setting the replication throttle of {entity_type[:-1]} {result.name}: "
                                   f"{result.error}")


def set_throttles(client: KafkaClient, plan: ReassignmentPlan, ongoing: Mapping[Partition, OngoingReassignment],
                  current: Mapping[Partition, Sequence[int]], rate: int | None,
                  log_dirs_rate: int | None = None) -> ThrottleResult:
    """modifyReassignmentThrottle (topics first, then brokers) and modifyLogDirThrottle (the brokers a plan's
    named log dir moves a replica on); a refusal raises KafkaClientError before the reassignment starts."""
    topics: dict[str, dict[str, str]] = {}
    brokers: list[int] = []
    if rate is not None:
        moves = proposed_move_map(ongoing, plan.partitions, current)
        leaders, followers = leader_throttles(moves), follower_throttles(moves)
        for topic in sorted(moves):
            topics[topic] = {LEADER_REPLICAS: leaders[topic], FOLLOWER_REPLICAS: followers[topic]}
            _alter_or_raise(client, "topics", [topic], topics[topic])
        brokers = reassigning_brokers(moves)
        _alter_or_raise(client, "brokers", map(str, brokers), {LEADER_RATE: str(rate), FOLLOWER_RATE: str(rate)})
    log_dir_brokers: list[int] = []
    if log_dirs_rate is not None:
        log_dir_brokers = sorted({b for _, _, b in plan.log_dirs})
        _alter_or_raise(client, "brokers", map(str, log_dir_brokers), {LOG_DIRS_RATE: str(log_dirs_rate)})
    return ThrottleResult(rate, brokers, topics, log_dirs_rate, log_dir_brokers)


@dataclass(frozen=True)
class ClearedThrottles:
    """What clearAllThrottles removed: the three broker rates of ``brokers``, the two lists of ``topics``."""

    brokers: list[int]
    topics: list[str]
    errors: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        return [f"Clearing broker-level throttles on broker{'' if len(self.brokers) == 1 else 's'} "
                f"{','.join(map(str, self.brokers))}",
                f"Clearing topic-level throttles on topic{'' if len(self.topics) == 1 else 's'} "
                f"{','.join(self.topics)}"]

    def to_json(self) -> dict[str, Any]:
        return {"brokers": self.brokers, "topics": self.topics, "errors": self.errors}


def clear_throttles(client: KafkaClient, plan: ReassignmentPlan) -> ClearedThrottles:
    """clearAllThrottles: every live broker's and every target broker's throttle rates, and the throttled-replica
    lists of the plan's topics, deleted whether set or not (the tool cannot know which brokers an earlier
    --execute throttled). A broker or topic that refuses is reported in ``errors``."""
    from kcli.client.configs import alter

    live = {b.id for b in brokers_with_racks(client)}
    brokers = sorted(live | {b for replicas in plan.partitions.values() for b in replicas})
    topics = sorted({t for t, _ in plan.partitions})
    errors = []
    for entity_type, names, keys in (("brokers", [str(b) for b in brokers], [LEADER_RATE, FOLLOWER_RATE,
                                                                             LOG_DIRS_RATE]),
                                     ("topics", topics, [LEADER_REPLICAS, FOLLOWER_REPLICAS])):
        for name in names:
            try:
                [result] = alter(client, entity_type, [name], set_configs={}, delete_configs=keys,
                                 require_present=False)
            except KafkaClientError as exc:  # a target broker not in the cluster
                errors.append(f"{entity_type[:-1]} {name}: {exc.describe()}")
                continue
            if result.error is not None:
                errors.append(f"{entity_type[:-1]} {name}: {result.error}")
    return ClearedThrottles(brokers, topics, errors)


@dataclass(frozen=True)
class ExecuteResult:
    current: dict[Partition, list[int]]  # the rollback plan: the partitions' replicas before
    started: list[Partition]
    errors: dict[Partition, str]
    throttle: ThrottleResult | None = None  # what --throttle / --replica-alter-log-dirs-throttle set
    moves_started: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, partition, broker)
    moves_pending: list[tuple[str, int, int]] = field(default_factory=list)  # not started before the timeout


def check_brokers(client: KafkaClient, brokers: Iterable[int]) -> None:
    live = {b.id for b in brokers_with_racks(client)}
    unknown = sorted(set(brokers) - live)
    if unknown:
        raise KafkaClientError(f"Unknown broker id {unknown[0]}" + (
            f" (and {', '.join(map(str, unknown[1:]))})" if len(unknown) > 1 else ""))


def current_replicas(client: KafkaClient, partitions: Iterable[Partition]) -> dict[Partition, list[int]]:
    """getReplicaAssignmentForPartitions: the replicas of each partition; a missing one raises
    KafkaClientError ("Unable to find partition: t-9")."""
    partitions = _sorted(set(partitions))
    view = cluster_view(client, sorted({t for t, _ in partitions}))
    out = {}
    for t, p in partitions:
        topic = view.topics.get(t)
        found = None if topic is None or topic.error else next((x for x in topic.partitions if x.partition == p),
                                                                None)
        if found is not None:
            out[(t, p)] = list(found.replicas)
    missing = [tp for tp in partitions if tp not in out]
    if missing:
        raise KafkaClientError(f"Unable to find partition: {', '.join(map(partition_name, missing))}")
    return out


def log_dir_support(client: KafkaClient) -> bool:
    """Whether the broker serves AlterReplicaLogDirs (moving replicas between its log dirs)."""
    return ALTER_REPLICA_LOG_DIRS in client._any().versions


def execute(client: KafkaClient, plan: ReassignmentPlan, *, additional: bool = False,
            timeout_ms: int = DEFAULT_TIMEOUT_MS, throttle: int | None = None,
            log_dirs_throttle: int | None = None) -> ExecuteResult:
    """--execute: refuse while another reassignment runs (unless ``additional``), check the brokers and the
    partitions exist, read the current replicas (the rollback plan), set the throttles asked for (``throttle``
    B/s between brokers, ``log_dirs_throttle`` B/s between log dirs; with ``additional`` this is how a running
    reassignment's throttle changes), then AlterPartitionReassignments. A plan that names log dirs has them sent
    (AlterReplicaLogDirs) before the reassignment, so a replica new on a broker is created in its dir, and again
    after it until every move started or ``timeout_ms`` passed (executeMoves)."""
    ongoing = list_reassignments(client, timeout_ms=timeout_ms)
    if not additional and ongoing:
        raise KafkaClientError(CANNOT_EXECUTE_BECAUSE_OF_EXISTING)
    check_brokers(client, {b for r in plan.partitions.values() for b in r})
    current = current_replicas(client, plan.partitions)
    throttled = None
    if throttle is not None or log_dirs_throttle is not None:
        throttled = set_throttles(client, plan, ongoing, current, throttle, log_dirs_throttle)
    pending = dict(plan.log_dirs)
    moved: list[Replica] = []
    if pending:  # a wrong dir fails here, before the reassignment started
        moved = start_log_dir_moves(client, pending)
        pending = {r: d for r, d in pending.items() if r not in moved}
    errors = alter_reassignments(client, plan.partitions, timeout_ms=timeout_ms)
    deadline = time.monotonic() + timeout_ms / 1000
    while pending and not errors:
        time.sleep(MOVE_RETRY_S)  # the replica is created when the controller's LeaderAndIsr reaches its broker
        started = start_log_dir_moves(client, pending)
        moved += started
        pending = {r: d for r, d in pending.items() if r not in started}
        if time.monotonic() >= deadline:
            break
    return ExecuteResult(current, [tp for tp in _sorted(plan.partitions) if tp not in errors], errors, throttled,
                         sorted(moved), sorted(pending))


# -- moves between a broker's log dirs (KIP-113) ----------------------------------------------------------------
Replica = tuple[str, int, int]  # (topic, partition, broker): Kafka's TopicPartitionReplica


def replica_name(replica: Replica) -> str:
    """TopicPartitionReplica.toString: topic-partition-broker."""
    return f"{replica[0]}-{replica[1]}-{replica[2]}"


def alter_replica_log_dirs(client: KafkaClient, moves: Mapping[Replica, str]) -> dict[Replica, ErrorCode]:
    """AlterReplicaLogDirs to each broker named: the dir each of its replicas is to be in. The error code per
    replica (a broker that cannot be asked: KafkaClientError)."""
    by_broker: dict[int, dict[str, dict[str, list[int]]]] = {}
    for (topic, partition, broker), path in moves.items():
        by_broker.setdefault(broker, {}).setdefault(path, {}).setdefault(topic, []).append(partition)
    out: dict[Replica, ErrorCode] = {}
    for broker, dirs in sorted(by_broker.items()):
        connection = client._node(broker)
        if ALTER_REPLICA_LOG_DIRS not in connection.versions:
            raise KafkaClientError(f"broker {broker} does not serve AlterReplicaLogDirs (moving a replica into a "
                                   "named log directory)")
        version, m = request_module(connection, ApiKey.ALTER_REPLICA_LOG_DIRS)
        body = connection.call(ApiKey.ALTER_REPLICA_LOG_DIRS, _build(m, "AlterReplicaLogDirsRequest", dirs=tuple(
            _build(m, "AlterReplicaLogDir", path=path, topics=tuple(
                _build(m, "AlterReplicaLogDirTopic", name=t, partitions=tuple(ps)) for t, ps in sorted(topics.items())))
            for path, topics in sorted(dirs.items()))))
        for t in body.results:
            for p in t.partitions:
                out[(t.topic_name, int(p.partition_index), broker)] = p.error_code
    return out


def start_log_dir_moves(client: KafkaClient, moves: Mapping[Replica, str]) -> list[Replica]:
    """ReassignPartitionsCommand.alterReplicaLogDirs: the replicas whose move started (or which are in their dir
    already); REPLICA_NOT_AVAILABLE (not on that broker yet) is left for the next round, any other error raises."""
    codes = alter_replica_log_dirs(client, moves)
    failed = {r: c for r, c in codes.items() if c not in (ErrorCode.none, ErrorCode.replica_not_available)}
    if failed:
        raise KafkaClientError("Failed to alter dir for " + ", ".join(
            f"{replica_name(r)} to {moves[r]}: {error_name(c)}" for r, c in sorted(failed.items())))
    return [r for r, c in codes.items() if c == ErrorCode.none]


@dataclass(frozen=True)
class LogDirMoveState:
    """findLogDirMoveStates' answer for one replica whose log dir the plan names."""

    topic: str
    partition: int
    broker: int
    target: str
    current: str | None  # the dir the replica is in (None: not found on the broker)
    future: str | None  # the dir it is being moved to

    @property
    def status(self) -> str:
        if self.current is None:
            return "missing"
        if self.future is not None:
            return "in_progress" if self.future == self.target else "moving_elsewhere"
        return "completed" if self.current == self.target else "cancelled"

    @property
    def done(self) -> bool:
        """LogDirMoveState.done: nothing is being copied any more (whatever the outcome)."""
        return self.future is None

    def line(self) -> str:
        """replicaMoveStatesToString's line."""
        replica, name = replica_name((self.topic, self.partition, self.broker)), f"{self.topic}-{self.partition}"
        return {
            "missing": f"Partition {name} cannot be found in any live log directory on broker {self.broker}.",
            "in_progress": f"Reassignment of replica {replica} is still in progress.",
            "moving_elsewhere": f"Partition {name} on broker {self.broker} is being moved to log dir {self.future} "
                                f"instead of {self.target}.",
            "cancelled": f"Partition {name} on broker {self.broker} is not being moved from log dir {self.current} "
                         f"to {self.target}.",
            "completed": f"Reassignment of replica {replica} completed successfully.",
        }[self.status]

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "broker": self.broker, "status": self.status,
                "target_log_dir": self.target, "current_log_dir": self.current, "future_log_dir": self.future}


def log_dir_move_states(client: KafkaClient, targets: Mapping[Replica, str]) -> list[LogDirMoveState]:
    """Where each replica's log is, and its future log if moving (DescribeLogDirs to each broker named)."""
    from kcli.client.log_dirs import describe_log_dirs

    brokers = sorted({b for _, _, b in targets})
    found: dict[Replica, dict[bool, str]] = {}
    for answer in describe_log_dirs(client, brokers=brokers, topics=sorted({t for t, _, _ in targets})):
        for log_dir in answer.log_dirs:
            for p in log_dir.partitions:
                found.setdefault((p.topic, p.partition, answer.broker), {})[p.is_future] = log_dir.path
    return [LogDirMoveState(*r, targets[r], found.get(r, {}).get(False), found.get(r, {}).get(True))
            for r in sorted(targets)]


@dataclass(frozen=True)
class PartitionState:
    """findPartitionReassignmentStates' answer for one partition of a plan."""

    topic: str
    partition: int
    current: tuple[int, ...]
    target: tuple[int, ...]
    done: bool

    @property
    def status(self) -> str:
        if not self.done:
            return "in_progress"
        return "completed" if self.current == self.target else "mismatch"

    def line(self) -> str:
        """partitionReassignmentStatesToString's line."""
        name = f"{self.topic}-{self.partition}"
        if self.status == "in_progress":
            return f"Reassignment of partition {name} is still in progress."
        if self.status == "completed":
            return f"Reassignment of partition {name} is completed."
        return (f"There is no active reassignment of partition {name}, but replica set is "
                f"{','.join(map(str, self.current))} rather than {','.join(map(str, self.target))}.")

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "status": self.status,
                "current_replicas": list(self.current), "target_replicas": list(self.target)}


def verify(client: KafkaClient, plan: ReassignmentPlan, *,
           timeout_ms: int = DEFAULT_TIMEOUT_MS) -> tuple[list[PartitionState], bool]:
    """--verify: each planned partition's state, and whether any reassignment (planned or not) is ongoing."""
    ongoing = list_reassignments(client, timeout_ms=timeout_ms)
    idle = [tp for tp in plan.partitions if tp not in ongoing]
    view = cluster_view(client, sorted({t for t, _ in idle})) if idle else None
    states = []
    for tp in _sorted(plan.partitions):
        target = tuple(plan.partitions[tp])
        if tp in ongoing:
            states.append(PartitionState(*tp, ongoing[tp].replicas, target, False))
            continue
        topic = view.topics.get(tp[0]) if view is not None else None
        found = None if topic is None or topic.error else next(
            (x for x in topic.partitions if x.partition == tp[1]), None)
        states.append(PartitionState(*tp, tuple(found.replicas) if found is not None else (), target, True))
    return states, bool(ongoing)


@dataclass(frozen=True)
class VerifyResult:
    states: list[PartitionState]
    ongoing: bool  # some reassignment (planned or not) is in progress
    cleared: ClearedThrottles | None = None  # the throttles removed once no planned partition is moving
    moves: list[LogDirMoveState] = field(default_factory=list)  # the replicas whose log dir the plan names

    @property
    def complete(self) -> bool:
        return all(s.status == "completed" for s in self.states) and all(m.status == "completed" for m in self.moves)


def verify_reassignment(client: KafkaClient, plan: ReassignmentPlan, *, preserve_throttles: bool = False,
                        timeout_ms: int = DEFAULT_TIMEOUT_MS) -> VerifyResult:
    """--verify as the tool does it (verifyAssignment): each planned partition's state; once none of them is still
    moving, and no replica between log dirs, every throttle is cleared (clearAllThrottles) unless
    ``preserve_throttles``."""
    states, ongoing = verify(client, plan, timeout_ms=timeout_ms)
    moves = log_dir_move_states(client, plan.log_dirs) if plan.log_dirs else []
    cleared = None
    if not preserve_throttles and all(s.done for s in states) and all(m.done for m in moves):
        cleared = clear_throttles(client, plan)
    return VerifyResult(states, ongoing, cleared, moves)


@dataclass(frozen=True)
class CancelResult:
    cancelled: list[Partition]
    errors: dict[Partition, str]
    cleared: ClearedThrottles | None = None  # the throttles removed (unless --preserve-throttles)
    moves_cancelled: list[tuple[str, int, int]] = field(default_factory=list)  # (topic, partition, broker)


def cancel(client: KafkaClient, plan: ReassignmentPlan, *, timeout_ms: int = DEFAULT_TIMEOUT_MS,
           preserve_throttles: bool = False) -> CancelResult:
    """--cancel: the planned partitions still being reassigned go back to their replicas before (a null target);
    the planned replicas still moving between log dirs are sent back to the dir they are in, which gives the move
    up; then, unless ``preserve_throttles``, every throttle is cleared as the tool's cancelAssignment does."""
    ongoing = list_reassignments(client, plan.partitions, timeout_ms=timeout_ms)
    active = [tp for tp in _sorted(ongoing) if tp in plan.partitions]
    errors = alter_reassignments(client, {tp: None for tp in active}, timeout_ms=timeout_ms)
    moving = {(m.topic, m.partition, m.broker): m.current for m in log_dir_move_states(client, plan.log_dirs)
              if m.future is not None and m.current is not None} if plan.log_dirs else {}
    moved = start_log_dir_moves(client, moving) if moving else []
    cleared = None if preserve_throttles else clear_throttles(client, plan)
    return CancelResult([tp for tp in active if tp not in errors], errors, cleared, sorted(moved))


def throttle_support(client: KafkaClient) -> str | None:
    """Whether the cluster takes replication throttles: None if a validate-only IncrementalAlterConfigs of
    leader.replication.throttled.rate on the brokers' default resource is accepted, else the refusal."""
    connection = client._any()
    if int(ApiKey.INCREMENTAL_ALTER_CONFIGS) not in connection.versions:
        return f"the broker at {connection.address} does not serve IncrementalAlterConfigs"
    version, m = request_module(connection, ApiKey.INCREMENTAL_ALTER_CONFIGS)
    body = connection.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, _build(
        m, "IncrementalAlterConfigsRequest", validate_only=True, resources=(_build(
            m, "AlterConfigsResource", resource_type=4, resource_name="", configs=(_build(
                m, "AlterableConfig", name="leader.replication.throttled.rate", config_operation=0,
                value="1048576"),)),)))
    for r in body.responses:
        if r.error_code != ErrorCode.none:
            return (f"IncrementalAlterConfigsResponse v{version}: leader.replication.throttled.rate refused: "
                    f"{error_name(r.error_code)}" + (f": {r.error_message}" if r.error_message else ""))
    return None
