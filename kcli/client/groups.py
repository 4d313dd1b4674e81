"""Consumer groups for operators (Kafka's kafka-consumer-groups.sh, rpk group): list, describe with lag, delete,
delete offsets (KIP-496), and the offsets a reset asks for.

Describe joins DescribeGroups (members; their assignment decoded from the consumer protocol's MemberAssignment),
OffsetFetch (committed offsets) and ListOffsets (log ends) as Kafka's ConsumerGroupCommand does, and names the
``__consumer_offsets`` partition that holds the group (abs(groupId.hashCode) % its partition count). A reset
only computes the requested offsets here (``reset_targets``); kcli.tools.offsets plans, backs up, commits and
verifies them. Results are dataclasses; nothing here prints.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.index import KioIndexError
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from kcli.client.client import (
    RETRIABLE,
    RETRIES,
    BrokerConnection,
    KafkaClient,
    KafkaClientError,
    KafkaRequestError,
    TopicPartition,
    _build,
)
from kcli.errors import UsageError
from kcli.protocol.api import ApiKey
from kcli.protocol.schema import load_payload_module
from kcli.records.consumer_offsets import partition_for_group
from kcli.records.groups import GroupDetails, MemberInfo, PartitionLag, decode_member_assignment, lag_rows

OFFSETS_TOPIC = "__consumer_offsets"
LIST_GROUPS_STATES = 4  # ListGroups v4 (KIP-518) filters by and answers the group state
INACTIVE_STATES = frozenset({"Empty", "Dead"})

Offsets = dict[TopicPartition, int]


# -- versions ----------------------------------------------------------------------------------------------
def _module_up_to(connection: BrokerConnection, api_key: ApiKey, highest: int) -> tuple[int, Any]:
    """The request module of the highest version <= ``highest`` both sides serve (past the client's PREFERRED
    cap, for APIs whose newer versions only add fields this module reads)."""
    base, module = connection.module(api_key)
    theirs = connection.versions.get(int(api_key), (0, base))[1]
    for version in range(min(highest, theirs), base, -1):
        try:
            return version, load_payload_module(api_key, version, EntityType.request)
        except KioIndexError:
            continue
    return base, module


def _retrying(call: Any) -> Any:
    """A call answering (body, error code), repeated while the coordinator loads __consumer_offsets."""
    for attempt in range(RETRIES * 4):
        body, error = call()
        if error not in RETRIABLE or attempt == RETRIES * 4 - 1:
            return body
        time.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")


# -- list --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupListing:
    group: str
    state: str | None  # None: the broker answers ListGroups below v4 and the group was not described
    protocol_type: str
    coordinator_id: int
    coordinator: str  # host:port

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "state": self.state, "protocol_type": self.protocol_type,
                "coordinator_id": self.coordinator_id, "coordinator": self.coordinator}


def list_groups(client: KafkaClient, *, states: Iterable[str] = ()) -> list[GroupListing]:
    """Every group of every broker (ListGroups to each; v4+ filters by state on the broker). Below v4 the states
    come from DescribeGroups. ``states`` match case-insensitively, as Kafka's tool matches them."""
    wanted = {s.lower() for s in states}
    meta = client.metadata([])
    out: list[GroupListing] = []
    for node in sorted(meta.brokers):
        connection = client._node(node)
        version, m = _module_up_to(connection, ApiKey.LIST_GROUPS, 5)
        request = _build(m, "ListGroupsRequest", states_filter=tuple(sorted(wanted)), types_filter=())

        def ask() -> tuple[Any, Any]:
            body = connection.call(ApiKey.LIST_GROUPS, request)
            return body, body.error_code

        body = _retrying(ask)
        if body.error_code != ErrorCode.none:
            raise KafkaRequestError(f"broker {node}", request=f"ListGroupsResponse v{version}", field="error_code",
                                    error=body.error_code)
        host, port = meta.brokers[node]
        for g in body.groups:
            out.append(GroupListing(g.group_id, getattr(g, "group_state", None) if version >= LIST_GROUPS_STATES
                                    else None, g.protocol_type, node, f"{host}:{port}"))
    missing = [g.group for g in out if g.state is None]
    if missing:
        described = client.describe_groups(missing)
        out = [GroupListing(g.group, described[g.group].state, g.protocol_type, g.coordinator_id, g.coordinator)
               if g.state is None and g.group in described else g for g in out]
    if wanted:
        out = [g for g in out if g.state is not None and g.state.lower() in wanted]
    return sorted(out, key=lambda g: g.group)


# -- describe ----------------------------------------------------------------------------------------------
def existing_ranges(client: KafkaClient, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
    """Log start and end of the partitions the cluster has (those of deleted topics are left out)."""
    wanted = sorted(set(partitions))
    if not wanted:
        return {}
    meta = client.metadata(sorted({t for t, _ in wanted}))
    known = [(t, p) for t, p in wanted if t in meta.topics and meta.topics[t].partitions.get(p, -1) >= 0]
    return client.log_offsets(known) if known else {}


def describe_groups(client: KafkaClient, groups: Sequence[str]) -> list[GroupDetails]:
    """State, protocol, coordinator, members with their assignment, and per partition the committed offset, log
    end and lag (Kafka's ConsumerGroupCommand --describe), in the order asked."""
    names = list(dict.fromkeys(groups))
    coordinators = client.find_coordinators(names)
    by_node: dict[int, list[str]] = {}
    for group, node in coordinators.items():
        by_node.setdefault(node, []).append(group)
    raw: dict[str, Any] = {}
    for node, chunk in by_node.items():
        connection = client._node(node)
        version, m = connection.module(ApiKey.DESCRIBE_GROUPS)
        request = _build(m, "DescribeGroupsRequest", groups=tuple(chunk), include_authorized_operations=False)

        def ask() -> tuple[Any, Any]:
            body = connection.call(ApiKey.DESCRIBE_GROUPS, request)
            errors = [g.error_code for g in body.groups if g.error_code in RETRIABLE]
            return body, errors[0] if errors else ErrorCode.none

        for g in _retrying(ask).groups:
            if g.error_code not in (ErrorCode.none, ErrorCode.group_id_not_found):
                raise KafkaRequestError(f"group {g.group_id!r}", request=f"DescribeGroupsResponse v{version}",
                                        field=f"groups[{g.group_id}].error_code", error=g.error_code)
            raw[g.group_id] = g
    committed = client.offset_fetch_many(names)
    details = []
    for group in names:
        g = raw.get(group)
        found = g is not None and g.error_code == ErrorCode.none
        protocol_type = g.protocol_type if found else ""
        members = []
        for mb in (g.members if found else ()):
            assignment, why = decode_member_assignment(protocol_type, mb.member_assignment)
            members.append(MemberInfo(mb.member_id, getattr(mb, "group_instance_id", None), mb.client_id,
                                      mb.client_host, assignment, why))
        node = coordinators.get(group)
        host_port = client._brokers.get(node) if node is not None else None
        details.append(GroupDetails(group, g.group_state if found else "Dead", protocol_type,
                                    g.protocol_data if found else "", node,
                                    f"{host_port[0]}:{host_port[1]}" if host_port else None, None, None, members))
    wanted = {tp for group in names for tp in committed.get(group, {})}
    wanted |= {tp for d in details for m in d.members for tp in m.assignment or ()}
    ranges = existing_ranges(client, wanted)
    count = client.topic_partitions([OFFSETS_TOPIC]).get(OFFSETS_TOPIC)
    for d in details:
        d.partitions = lag_rows(d.members, committed.get(d.group, {}), ranges)
        d.offsets_topic_partitions = count
        d.offsets_topic_partition = partition_for_group(d.group, count) if count else None
        gone = sorted({f"{p.topic}-{p.partition}" for p in d.partitions
                       if p.topic is not None and (p.topic, p.partition) not in ranges})
        if gone:
            d.notes.append(f"not in the cluster's metadata (deleted topics?): {', '.join(gone)}")
        for m in d.members:
            if m.assignment_error:
                d.notes.append(f"member {m.member_id}: {m.assignment_error}")
    return details


# -- delete ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeleteResult:
    group: str
    error: ErrorCode

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.none

    @property
    def reason(self) -> str | None:
        if self.ok:
            return None
        why = {ErrorCode.non_empty_group: "the group has active members (stop its consumers first)",
               ErrorCode.group_id_not_found: "no such group"}.get(self.error)
        name = f"{ErrorCode(self.error).name.upper()} ({int(self.error)})"
        return f"{name}: {why}" if why else name

    def to_json(self) -> dict[str, Any]:
        return {"group": self.group, "deleted": self.ok,
                "error": None if self.ok else ErrorCode(self.error).name.upper(), "reason": self.reason}


def delete_groups(client: KafkaClient, groups: Sequence[str]) -> list[DeleteResult]:
    """DeleteGroups to each group's coordinator; a group with members answers NON_EMPTY_GROUP."""
    names = list(dict.fromkeys(groups))
    errors = client.delete_groups(names)
    return [DeleteResult(g, errors.get(g, ErrorCode.unknown_server_error)) for g in names]


@dataclass
class OffsetDeleteResult:
    group: str
    error: ErrorCode  # the request's (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP ...)
    partitions: dict[TopicPartition, ErrorCode]

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.none and all(e == ErrorCode.none for e in self.partitions.values())

    def to_json(self) -> dict[str, Any]:
        def name(e: ErrorCode) -> str | None:
            return None if e == ErrorCode.none else ErrorCode(e).name.upper()

        return {"group": self.group, "ok": self.ok, "error": name(self.error),
                "partitions": [{"topic": t, "partition": p, "deleted": e == ErrorCode.none, "error": name(e)}
                               for (t, p), e in sorted(self.partitions.items())]}


def delete_offsets(client: KafkaClient, group: str, partitions: Sequence[TopicPartition]) -> OffsetDeleteResult:
    """OffsetDelete (KIP-496) to the group's coordinator: partitions of topics its members subscribe to are
    refused per partition with GROUP_SUBSCRIBED_TO_TOPIC."""
    wanted = sorted(set(partitions))
    connection = client._node(client.find_coordinator(group))
    version, m = connection.module(ApiKey.OFFSET_DELETE)
    per: dict[str, list[int]] = {}
    for topic, partition in wanted:
        per.setdefault(topic, []).append(partition)
    request = _build(m, "OffsetDeleteRequest", group_id=group, topics=tuple(
        _build(m, "OffsetDeleteRequestTopic", name=t, partitions=tuple(
            _build(m, "OffsetDeleteRequestPartition", partition_index=p) for p in ps)) for t, ps in per.items()))

    def ask() -> tuple[Any, Any]:
        body = connection.call(ApiKey.OFFSET_DELETE, request)
        return body, body.error_code

    body = _retrying(ask)
    result = {(t.name, int(p.partition_index)): ErrorCode(p.error_code) for t in body.topics for p in t.partitions}
    if body.error_code == ErrorCode.none:
        for tp in wanted:
            result.setdefault(tp, ErrorCode.none)
    return OffsetDeleteResult(group, ErrorCode(body.error_code), result)


# -- topics and partitions named on the command line -------------------------------------------------------
def parse_topic_partitions(spec: str) -> tuple[str, tuple[int, ...] | None]:
    """``topic`` or ``topic:0,1,2`` (kafka-consumer-groups' --topic)."""
    topic, colon, rest = spec.partition(":")
    if not topic:
        raise UsageError(f"--topic {spec!r} names no topic")
    if not colon:
        return topic, None
    try:
        partitions = tuple(sorted({int(p) for p in rest.split(",") if p.strip()}))
    except ValueError:
        raise UsageError(f"--topic {spec!r}: partitions are integers (topic:0,1,2)") from None
    if not partitions or min(partitions) < 0:
        raise UsageError(f"--topic {spec!r}: partitions are non-negative integers (topic:0,1,2)")
    return topic, partitions


def resolve_partitions(client: KafkaClient, specs: Sequence[str]) -> list[TopicPartition]:
    """The partitions ``--topic`` options name: every partition of a bare topic; unknown topics and partitions
    are errors, as in Kafka's tool."""
    parsed = [parse_topic_partitions(s) for s in specs]
    counts = client.topic_partitions([t for t, _ in parsed])
    out: set[TopicPartition] = set()
    for topic, partitions in parsed:
        count = counts.get(topic)
        if count is None:
            raise KafkaClientError(f"topic {topic} does not exist", path=client.bootstrap)
        for p in partitions if partitions is not None else range(count):
            if p >= count:
                raise KafkaClientError(f"topic {topic} has {count} partitions: there is no partition {p}",
                                       path=client.bootstrap)
            out.add((topic, p))
    return sorted(out)


# -- reset -------------------------------------------------------------------------------------------------
EARLIEST, LATEST, CURRENT, TO_OFFSET, SHIFT_BY, TIMESTAMP = ("to-earliest", "to-latest", "to-current", "to-offset",
                                                            "shift-by", "to-datetime")


@dataclass(frozen=True)
class ResetSpec:
    """One of kafka-consumer-groups' reset scenarios; ``value`` is the offset, the shift or the timestamp (ms)."""

    kind: str
    value: int | None = None
    label: str = ""  # how the command line said it, for the plan's title

    @property
    def text(self) -> str:
        return self.label or (f"--{self.kind}" + (f" {self.value}" if self.value is not None else ""))


_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{1,9}))?S)?)?",
                       re.IGNORECASE)


def parse_duration(text: str) -> int:
    """An ISO-8601 duration as Java's Duration.parse reads it (``PnDTnHnMn.nS``, e.g. PT1H30M, P1D) in ms."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.group(i) for i in (2, 3, 4, 5)):
        raise UsageError(f"{text!r} is not an ISO-8601 duration such as PT1H30M or P1DT12H (PnDTnHnMn.nS)")
    sign, days, hours, minutes, seconds, fraction = match.groups()
    ms = ((int(days or 0) * 24 + int(hours or 0)) * 60 + int(minutes or 0)) * 60_000 + int(seconds or 0) * 1000
    if fraction:
        ms += (-1 if (seconds or "").startswith("-") else 1) * int(fraction.ljust(3, "0")[:3])
    return -ms if sign == "-" else ms


def offsets_for_time(client: KafkaClient, partitions: Sequence[TopicPartition], timestamp: int
                     ) -> dict[TopicPartition, int | None]:
    """ListOffsets with a timestamp (kcli.client.offsets_time): the earliest offset whose timestamp is >= it,
    per partition (None when no record is that recent)."""
    from kcli.client.offsets_time import offsets_for_time as for_time

    out: dict[TopicPartition, int | None] = {}
    for found in for_time(client, sorted(set(partitions)), timestamp):
        if found.error is not None:
            raise KafkaClientError(found.error, path="ListOffsetsResponse")
        out[(found.topic, found.partition)] = found.offset if found.offset >= 0 else None
    return out


def reset_targets(client: KafkaClient, groups: Sequence[str], spec: ResetSpec, *,
                  topics: Sequence[str] = (), all_topics: bool = False) -> dict[str, Offsets]:
    """The offsets each group is asked to move to, per partition, before clamping into the log (the plan
    clamps, kcli.tools.offsets.plan_transfer). ``topics`` are --topic specs; ``all_topics``: every partition the
    group has committed offsets for. As Kafka's tool: --to-datetime falls back to the log end where no record
    is that recent, --to-current to the log end where nothing is committed, --shift-by needs a commit."""
    committed = client.offset_fetch_many(list(groups)) if groups else {}
    named = resolve_partitions(client, topics) if topics else []
    partitions = {g: sorted(set(named) | (set(committed.get(g, {})) if all_topics else set())) for g in groups}
    every = sorted({tp for tps in partitions.values() for tp in tps})
    ranges = existing_ranges(client, every) if spec.kind in (EARLIEST, LATEST, CURRENT, TIMESTAMP) else {}
    by_time = offsets_for_time(client, every, spec.value) if spec.kind == TIMESTAMP and every else {}
    out: dict[str, Offsets] = {}
    for group in groups:
        current = committed.get(group, {})
        targets: Offsets = {}
        for tp in partitions[group]:
            start, end = ranges.get(tp, (0, 0))
            if spec.kind == EARLIEST:
                targets[tp] = start
            elif spec.kind == LATEST:
                targets[tp] = end
            elif spec.kind == CURRENT:
                targets[tp] = current.get(tp, end)
            elif spec.kind == TO_OFFSET:
                targets[tp] = int(spec.value)  # type: ignore[arg-type]
            elif spec.kind == SHIFT_BY:
                if tp not in current:
                    raise KafkaClientError(f"cannot shift the offset of {tp[0]}-{tp[1]}: group {group} has no "
                                           "committed offset there", path=client.bootstrap)
                targets[tp] = max(0, current[tp] + int(spec.value))  # type: ignore[arg-type]
            elif spec.kind == TIMESTAMP:
                found = by_time.get(tp)
                targets[tp] = end if found is None else found
            else:
                raise UsageError(f"unknown reset scenario {spec.kind!r}")
        out[group] = targets
    return out


class RequestedOffsets:
    """Offsets a reset asks for, in the shape kcli.tools.offsets reads a source store (never live, never
    written)."""

    kind = "requested"

    def __init__(self, offsets: dict[str, Offsets], location: str) -> None:
        self.offsets = offsets
        self.location = location

    def list_groups(self) -> list[str]:
        return sorted(self.offsets)

    def read(self, groups: Sequence[str], progress: Any = None) -> dict[str, Offsets]:
        if progress is not None:
            progress(len(groups))
        return {g: dict(self.offsets.get(g, {})) for g in groups}

    def live_members(self, groups: Sequence[str]) -> dict[str, str | None]:
        return {g: None for g in groups}

    def write(self, group: str, offsets: Offsets) -> dict[TopicPartition, str | None]:
        raise KafkaClientError("requested offsets are not a target")


__all__ = ["DeleteResult", "GroupDetails", "GroupListing", "MemberInfo", "OffsetDeleteResult", "PartitionLag",
           "RequestedOffsets", "ResetSpec", "decode_member_assignment", "delete_groups", "delete_offsets",
           "describe_groups", "lag_rows", "list_groups", "offsets_for_time", "parse_duration",
           "parse_topic_partitions", "reset_targets", "resolve_partitions"]
