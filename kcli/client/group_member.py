"""A member of a consumer group (the classic group protocol, as kcat -G and kafka-console-consumer --group join
one through librdkafka's and the Java client's coordinators).

``GroupMember.join()`` finds the coordinator (FindCoordinator), joins (JoinGroup, with KIP-394's
MEMBER_ID_REQUIRED round trip and KIP-345's group.instance.id for a static member), and syncs (SyncGroup); the
member the coordinator names leader computes everyone's assignment with the protocol the group chose, ``range``
or ``roundrobin`` as Kafka's RangeAssignor and RoundRobinAssignor compute them, in the ``consumer`` protocol's
subscription and assignment bytes (ConsumerProtocol, kcli.records.consumer_offsets), so kctl shares a group with
Java, librdkafka and kafka-python members. A thread heartbeats the coordinator on its own connection every
heartbeat.interval.ms while a generation is held; REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION and
UNKNOWN_MEMBER_ID there (or in a commit) ask for a rejoin, and a main loop that stops calling ``poll()`` for
max.poll.interval.ms leaves the group as Java's consumer does. ``commit()`` commits with the generation and
member id; ``close()`` leaves (LeaveGroup; a static member does not, KIP-345). A coordinator that moved
(NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE) is found again. Nothing here prints: notices are returned.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client.client import (
    RETRIABLE,
    BrokerConnection,
    BrokerUnreachableError,
    KafkaClient,
    KafkaClientError,
    KafkaRequestError,
    TopicPartition,
    _build,
    error_name,
)
from kcli.client.topics import request_module
from kcli.errors import CorruptRecordError, KcliError, UsageError
from kcli.protocol.api import ApiKey
from kcli.records.consumer_offsets import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    Subscription,
    TopicPartitions,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

# The highest versions asked for: JoinGroup v4+ answers MEMBER_ID_REQUIRED (KIP-394), v5+ takes
# group.instance.id (KIP-345); v8's reason and v9's skip_assignment (KIP-814) are not used.
CAPS: dict[ApiKey, int] = {ApiKey.JOIN_GROUP: 7, ApiKey.SYNC_GROUP: 5, ApiKey.HEARTBEAT: 4,
                           ApiKey.LEAVE_GROUP: 4, ApiKey.OFFSET_COMMIT: 7, ApiKey.FIND_COORDINATOR: 3}
DEFAULT_ASSIGNORS = ("range", "roundrobin")  # librdkafka's partition.assignment.strategy default
DEFAULT_SESSION_TIMEOUT_MS = 45_000  # session.timeout.ms (Kafka 3.0+, KIP-735)
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000  # heartbeat.interval.ms
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000  # max.poll.interval.ms: also the rebalance timeout JoinGroup sends
SUBSCRIPTION_VERSION = 1  # ConsumerProtocolSubscription v1: topics, user data, owned partitions (KIP-429)
COORDINATOR_ERRORS = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
GENERATION_ERRORS = frozenset({ErrorCode.illegal_generation, ErrorCode.unknown_member_id})
FATAL_ERRORS = frozenset({ErrorCode.fenced_instance_id, ErrorCode.group_authorization_failed,
                          ErrorCode.inconsistent_group_protocol, ErrorCode.group_max_size_reached,
                          ErrorCode.invalid_session_timeout, ErrorCode.unsupported_version,
                          ErrorCode.invalid_group_id})
JOIN_ATTEMPTS = 30  # consecutive JoinGroup/SyncGroup rounds that end in an error before giving up


class GroupMemberError(KafkaClientError):
    """The member cannot be (or stay) in the group: fenced, not authorized, no protocol in common..."""


# -- assignors ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Subscriber:
    """A member as the leader's assignor sees it (JoinGroupResponse's members, their subscriptions decoded)."""

    member_id: str
    topics: tuple[str, ...]
    group_instance_id: str | None = None
    owned: tuple[TopicPartition, ...] = ()
    version: int = SUBSCRIPTION_VERSION


def member_order(member: Subscriber) -> tuple[int, str, str]:
    """AbstractPartitionAssignor.MemberInfo's order: static members first by group.instance.id, then dynamic
    members by member id."""
    if member.group_instance_id is not None:
        return 0, member.group_instance_id, member.member_id
    return 1, "", member.member_id


def range_assign(partitions: Mapping[str, int], members: Sequence[Subscriber]) -> dict[str, list[TopicPartition]]:
    """Kafka's RangeAssignor: per topic, its partitions in order cut into ranges over the topic's subscribers in
    ``member_order``; the first ``partitions % subscribers`` get one more. Topics without metadata are left out."""
    out: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
    per_topic: dict[str, list[Subscriber]] = {}
    for member in members:
        for topic in dict.fromkeys(member.topics):
            per_topic.setdefault(topic, []).append(member)
    for topic in sorted(per_topic):
        count = partitions.get(topic)
        if not count:
            continue
        subscribers = sorted(per_topic[topic], key=member_order)
        each, extra = divmod(count, len(subscribers))
        for i, member in enumerate(subscribers):
            start = each * i + min(i, extra)
            out[member.member_id].extend((topic, p) for p in range(start, start + each + (1 if i < extra else 0)))
    return {m: sorted(tps) for m, tps in out.items()}


def roundrobin_assign(partitions: Mapping[str, int], members: Sequence[Subscriber]
                      ) -> dict[str, list[TopicPartition]]:
    """Kafka's RoundRobinAssignor: every subscribed partition (topics in name order, partitions in order) to
    the members in ``member_order`` in turn, skipping a member not subscribed to the partition's topic."""
    out: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
    ordered = sorted(members, key=member_order)
    topics = sorted({t for m in members for t in m.topics})
    turn = 0
    for topic in topics:
        for partition in range(partitions.get(topic) or 0):
            while topic not in ordered[turn % len(ordered)].topics:
                turn += 1
            out[ordered[turn % len(ordered)].member_id].append((topic, partition))
            turn += 1
    return out


ASSIGNORS: dict[str, Callable[[Mapping[str, int], Sequence[Subscriber]], dict[str, list[TopicPartition]]]] = {
    "range": range_assign, "roundrobin": roundrobin_assign}


def parse_assignors(text: str | Sequence[str]) -> tuple[str, ...]:
    """``range,roundrobin`` (partition.assignment.strategy's spelling; Java's class names are accepted too)."""
    words = text.split(",") if isinstance(text, str) else list(text)
    names = []
    for word in (w.strip() for w in words):
        if not word:
            continue
        name = {"org.apache.kafka.clients.consumer.RangeAssignor": "range",
                "org.apache.kafka.clients.consumer.RoundRobinAssignor": "roundrobin"}.get(word, word.lower())
        if name not in ASSIGNORS:
            raise UsageError(f"assignor {word!r}: kctl assigns with {' or '.join(ASSIGNORS)} (the consumer protocol's "
                             "eager assignors; cooperative-sticky is not one of them)")
        names.append(name)
    if not names:
        raise UsageError("no assignor given: expected range, roundrobin or range,roundrobin")
    return tuple(dict.fromkeys(names))


# -- the consumer protocol's bytes ----------------------------------------------------------------------------
def _topic_partitions(partitions: Sequence[TopicPartition]) -> tuple[TopicPartitions, ...]:
    per: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        per.setdefault(topic, []).append(partition)
    return tuple(TopicPartitions(topic=t, partitions=tuple(ps)) for t, ps in per.items())


def subscription_bytes(topics: Sequence[str], owned: Sequence[TopicPartition] = (), *,
                       version: int = SUBSCRIPTION_VERSION, user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolSubscription as the Java client writes it (a null user data for range and roundrobin)."""
    return encode_subscription(Subscription(version=version, topics=tuple(topics), user_data=user_data,
                                            owned_partitions=_topic_partitions(owned) if version >= 1 else ()))


def assignment_bytes(partitions: Sequence[TopicPartition], *, version: int = SUBSCRIPTION_VERSION,
                     user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolAssignment (its layout is the same in every version; the version is the member's
    subscription's, at most 1, so a v0 decoder reads it)."""
    return encode_assignment(Assignment(version=version, assigned_partitions=_topic_partitions(partitions),
                                        user_data=user_data))


def read_subscription(member_id: str, group_instance_id: str | None, data: bytes) -> Subscriber:
    sub = decode_subscription(bytes(data))
    return Subscriber(member_id, sub.topics, group_instance_id,
                      tuple((tp.topic, p) for tp in sub.owned_partitions for p in tp.partitions), sub.version)


def read_assignment(data: bytes) -> tuple[TopicPartition, ...]:
    if not data:
        return ()  # SyncGroup's answer to a member the leader left out
    assignment = decode_assignment(bytes(data))
    return tuple(sorted((tp.topic, p) for tp in assignment.assigned_partitions for p in tp.partitions))


# -- the member ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Joined:
    """A generation the member holds, and its partitions in it."""

    group: str
    generation: int
    member_id: str
    leader_id: str
    protocol: str | None
    assignment: tuple[TopicPartition, ...]

    @property
    def is_leader(self) -> bool:
        return self.member_id == self.leader_id


class GroupMember:
    """One consumer-group member for ``topics``. ``join()`` (again whenever ``rejoin_needed``) returns the
    assignment; ``poll()`` says the main loop is alive and returns the heartbeat thread's notices; ``commit()``;
    ``close()`` stops heartbeating and leaves the group. The heartbeat thread has its own KafkaClient."""

    def __init__(self, client: KafkaClient, group: str, topics: Sequence[str], *,
                 assignors: Sequence[str] = DEFAULT_ASSIGNORS, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int | None = None, max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS,
                 group_instance_id: str | None = None) -> None:
        if not group:
            raise UsageError("the group id is empty")
        if not topics:
            raise UsageError("a group member subscribes to at least one topic")
        self.client = client
        self.group = group
        self.topics = tuple(dict.fromkeys(topics))
        self.assignors = parse_assignors(assignors)
        self.session_timeout_ms = session_timeout_ms
        # Java's rule: the interval below the session timeout; a third of it (at most 3 s) as librdkafka's default
        self.heartbeat_interval_ms = heartbeat_interval_ms or max(1, min(DEFAULT_HEARTBEAT_INTERVAL_MS,
                                                                         session_timeout_ms // 3))
        if self.heartbeat_interval_ms >= session_timeout_ms:
            raise UsageError(f"heartbeat.interval.ms {self.heartbeat_interval_ms} must be below session.timeout.ms "
                             f"{session_timeout_ms}")
        self.max_poll_interval_ms = max_poll_interval_ms
        self.group_instance_id = group_instance_id or None
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.leader_id = ""
        self.assignment: tuple[TopicPartition, ...] = ()
        self._lock = threading.Lock()
        self._rejoin = True  # no generation yet
        self._lost = False  # the generation is gone (ILLEGAL_GENERATION...): its partitions cannot be committed
        self._fatal: KcliError | None = None
        self._notices: list[str] = []
        self._last_poll = time.monotonic()
        self._active = False  # heartbeats run (a generation is held, no JoinGroup in flight)
        self._stop = threading.Event()
        self._wake = threading.Event()  # a heartbeat thread's news: the main loop need not wait out a fetch
        self._thread: threading.Thread | None = None
        self._heartbeat_client: KafkaClient | None = None
        self._assigned_counts: dict[str, int] | None = None  # the leader's: partition counts it assigned from

    # -- state the main loop reads ----------------------------------------------------------------------------
    @property
    def rejoin_needed(self) -> bool:
        with self._lock:
            return self._rejoin

    @property
    def generation_lost(self) -> bool:
        """The partitions held are lost, not revoked: a commit would be refused (Java's onPartitionsLost)."""
        with self._lock:
            return self._lost

    def request_rejoin(self, reason: str | None = None) -> None:
        with self._lock:
            self._rejoin = True
            if reason:
                self._notices.append(reason)

    def poll(self) -> list[str]:
        """The main loop is alive (max.poll.interval.ms); the heartbeat thread's notices since the last call.
        Raises the thread's fatal error (a fenced static member...)."""
        with self._lock:
            self._last_poll = time.monotonic()
            notices, self._notices = self._notices, []
            fatal = self._fatal
        if fatal is not None:
            raise fatal
        return notices

    # -- coordinator ----------------------------------------------------------------------------------------------
    def _coordinator(self, client: KafkaClient) -> BrokerConnection:
        return client._node(client.find_coordinator(self.group))

    def _forget_coordinator(self, client: KafkaClient) -> None:
        client._coordinators.pop(self.group, None)

    def _module(self, connection: BrokerConnection, api_key: ApiKey) -> tuple[int, Any]:
        return request_module(connection, api_key, CAPS)

    # -- join -----------------------------------------------------------------------------------------------
    def join(self) -> Joined:
        """JoinGroup and SyncGroup until the member holds a generation; heartbeats (re)start."""
        with self._lock:
            self._active = False  # no heartbeat beside a JoinGroup: the coordinator answers it when all joined
            if self._lost:
                self.assignment = ()  # lost partitions are not owned ones (the subscription's, KIP-429)
            self._lost = False
            self._last_poll = time.monotonic()
        failures = rounds = 0
        while True:
            rounds += 1
            try:
                joined = self._join_once()
            except BrokerUnreachableError as exc:  # the coordinator went away mid-join
                self._forget_coordinator(self.client)
                retry = _Retry(exc.describe())
            except _Retry as caught:
                retry = caught
            else:
                retry = None
            if retry is not None:
                failures += 1 if retry.counts else 0
                if failures >= JOIN_ATTEMPTS or rounds >= JOIN_ATTEMPTS * 10:
                    raise GroupMemberError(f"group {self.group!r}: could not join: {retry.reason}") from None
                time.sleep(min(0.1 * failures, 1.0) if retry.counts else 0)
                continue
            with self._lock:
                self.generation, self.member_id = joined.generation, joined.member_id
                self.protocol, self.leader_id, self.assignment = joined.protocol, joined.leader_id, joined.assignment
                self._rejoin = self._lost = False
                self._active = True
                self._last_poll = time.monotonic()
            self._start_heartbeats()
            return joined

    def _join_once(self) -> Joined:
        try:
            connection = self._coordinator(self.client)
        except KafkaRequestError as exc:
            if exc.error in RETRIABLE:
                raise _Retry(exc.describe()) from None
            raise
        version, m = self._module(connection, ApiKey.JOIN_GROUP)
        if self.group_instance_id is not None and version < 5:
            raise GroupMemberError(f"the broker at {connection.address} serves JoinGroup up to v{version}: static "
                                   "membership (group.instance.id, KIP-345) needs v5 (Kafka 2.3)")
        with self._lock:
            member_id, owned = self.member_id, self.assignment
        self._assigned_counts = None
        protocols = tuple(_build(m, "JoinGroupRequestProtocol", name=name,
                                 metadata=subscription_bytes(self.topics, owned)) for name in self.assignors)
        request = _build(m, "JoinGroupRequest", group_id=self.group, session_timeout=_ms(self.session_timeout_ms),
                         rebalance_timeout=_ms(self.max_poll_interval_ms), member_id=member_id,
                         group_instance_id=self.group_instance_id, protocol_type=CONSUMER_PROTOCOL_TYPE,
                         protocols=protocols, reason=None)
        # the coordinator holds a JoinGroup until every member rejoined or the rebalance timeout passed
        body = self._long_call(connection, ApiKey.JOIN_GROUP, request, self.max_poll_interval_ms / 1000 + 5)
        label = f"JoinGroupResponse v{version}"
        error = ErrorCode(body.error_code)
        if error == ErrorCode.member_id_required:  # KIP-394: join again with the id the coordinator gave
            with self._lock:
                self.member_id = body.member_id
            raise _Retry("MEMBER_ID_REQUIRED", counts=False)
        if error != ErrorCode.none:
            self._join_error(error, label)
        generation, member_id, leader = int(body.generation_id), body.member_id, body.leader
        protocol = body.protocol_name
        with self._lock:
            self.member_id = member_id
        assignments: tuple[Any, ...] = ()
        s = None
        if member_id == leader:
            version_s, s = self._module(connection, ApiKey.SYNC_GROUP)
            plan = self._assign(protocol, body.members)
            assignments = tuple(_build(s, "SyncGroupRequestAssignment", member_id=mid, assignment=data)
                                for mid, data in plan.items())
        if s is None:
            version_s, s = self._module(connection, ApiKey.SYNC_GROUP)
        # a follower's SyncGroup waits for the leader's, at worst until the leader's session expires
        sync = self._long_call(connection, ApiKey.SYNC_GROUP, _build(
            s, "SyncGroupRequest", group_id=self.group, generation_id=generation, member_id=member_id,
            group_instance_id=self.group_instance_id, protocol_type=CONSUMER_PROTOCOL_TYPE, protocol_name=protocol,
            assignments=assignments), self.session_timeout_ms / 1000 + 5)
        error = ErrorCode(sync.error_code)
        if error != ErrorCode.none:
            self._join_error(error, f"SyncGroupResponse v{version_s}")
        try:
            assignment = read_assignment(sync.assignment)
        except (CorruptRecordError, KcliError, ValueError, IndexError) as exc:
            raise GroupMemberError(f"group {self.group!r}: the leader's assignment is undecodable: {exc}") from None
        return Joined(self.group, generation, member_id, leader, protocol, assignment)

    def _join_error(self, error: ErrorCode, label: str) -> None:
        if error in COORDINATOR_ERRORS:
            self._forget_coordinator(self.client)
            raise _Retry(f"{label} error_code = {error_name(error)}")
        if error == ErrorCode.coordinator_load_in_progress:
            raise _Retry(f"{label} error_code = {error_name(error)}")
        if error == ErrorCode.unknown_member_id:
            with self._lock:
                self.member_id = ""  # joins as a new member
            raise _Retry(f"{label} error_code = {error_name(error)}", counts=False)
        if error in (ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation):
            raise _Retry(f"{label} error_code = {error_name(error)}", counts=False)  # another round of joins
        why = {ErrorCode.inconsistent_group_protocol: "the group's members share no assignor with kctl's "
               f"({', '.join(self.assignors)}), or the group is not a consumer group",
               ErrorCode.fenced_instance_id: f"another member joined with group.instance.id {self.group_instance_id}",
               ErrorCode.invalid_session_timeout: f"session.timeout.ms {self.session_timeout_ms} is outside the "
               "broker's group.min.session.timeout.ms..group.max.session.timeout.ms"}.get(error, "")
        raise GroupMemberError(f"group {self.group!r}: {label} error_code = {error_name(error)}"
                               + (f": {why}" if why else ""))

    def _assign(self, protocol: str | None, members: Sequence[Any]) -> dict[str, bytes]:
        """The leader's job: every member's assignment bytes, by the assignor the group chose."""
        assign = ASSIGNORS.get(protocol or "")
        if assign is None:
            raise GroupMemberError(f"group {self.group!r} chose assignor {protocol!r}, which kctl does not have")
        subscribers = []
        for member in members:
            try:
                subscribers.append(read_subscription(member.member_id, getattr(member, "group_instance_id", None),
                                                     member.metadata))
            except (CorruptRecordError, KcliError, ValueError, IndexError) as exc:
                raise GroupMemberError(f"group {self.group!r}: member {member.member_id}'s subscription is "
                                       f"undecodable: {exc}") from None
        counts = self.client.topic_partitions({t for s in subscribers for t in s.topics})
        self._assigned_counts = dict(counts)
        plan = assign({t: c for t, c in counts.items() if c}, subscribers)
        return {s.member_id: assignment_bytes(plan.get(s.member_id, ()), version=min(s.version, SUBSCRIPTION_VERSION))
                for s in subscribers}

    @staticmethod
    def _long_call(connection: BrokerConnection, api_key: ApiKey, body: Any, seconds: float) -> Any:
        """A request the broker may hold longer than the client's timeout (Java: rebalance timeout + 5 s)."""
        sock = connection._sock
        if sock is not None:
            sock.settimeout(max(connection.timeout, seconds))
        try:
            return connection.call(api_key, body)
        finally:
            if connection._sock is not None:
                connection._sock.settimeout(connection.timeout)

    def check_metadata(self) -> str | None:
        """The leader's watch (Java's ConsumerCoordinator: the assignment snapshot against the metadata): when a
        subscribed topic gained partitions (or appeared, or went) since the leader assigned, a rejoin is asked
        for so the new partitions get an owner; the reason, or None."""
        counts = self._assigned_counts
        if counts is None or self.leader_id != self.member_id:
            return None
        now = self.client.topic_partitions(counts)
        changed = [f"{t} {counts[t] or 0} -> {now.get(t) or 0}" for t in sorted(counts) if now.get(t) != counts[t]]
        if not changed:
            return None
        self._assigned_counts = None
        reason = f"the partitions of subscribed topics changed ({', '.join(changed)}): rebalancing group {self.group}"
        self.request_rejoin()
        return reason

    # -- commit ---------------------------------------------------------------------------------------------
    def commit(self, offsets: Mapping[TopicPartition, int]) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit with the member's generation and id; the error per partition (ErrorCode.none: committed).
        A generation error asks for a rejoin; a moved coordinator is found again and the commit retried."""
        if not offsets:
            return {}
        with self._lock:
            generation, member_id = self.generation, self.member_id
        result: dict[TopicPartition, ErrorCode] = {}
        for attempt in range(5):
            try:
                connection = self._coordinator(self.client)
                version, m = self._module(connection, ApiKey.OFFSET_COMMIT)
                per: dict[str, list[Any]] = {}
                for (topic, partition), offset in sorted(offsets.items()):
                    per.setdefault(topic, []).append(_build(
                        m, "OffsetCommitRequestPartition", partition_index=partition, committed_offset=offset,
                        committed_leader_epoch=-1, committed_metadata="", commit_timestamp=-1))
                body = connection.call(ApiKey.OFFSET_COMMIT, _build(
                    m, "OffsetCommitRequest", group_id=self.group, generation_id_or_member_epoch=generation,
                    member_id=member_id, group_instance_id=self.group_instance_id,
                    topics=tuple(_build(m, "OffsetCommitRequestTopic", name=t, partitions=tuple(ps))
                                 for t, ps in per.items())))
            except BrokerUnreachableError:
                self._forget_coordinator(self.client)
                if attempt == 4:
                    raise
                time.sleep(0.1 * (attempt + 1))
                continue
            except KafkaRequestError as exc:  # FindCoordinator's
                if exc.error not in RETRIABLE or attempt == 4:
                    raise
                time.sleep(0.1 * (attempt + 1))
                continue
            result = {(t.name, int(p.partition_index)): ErrorCode(p.error_code)
                      for t in body.topics for p in t.partitions}
            errors = set(result.values())
            if errors & (COORDINATOR_ERRORS | {ErrorCode.coordinator_load_in_progress}) and attempt < 4:
                self._forget_coordinator(self.client)
                time.sleep(0.1 * (attempt + 1))
                continue
            if errors & (GENERATION_ERRORS | {ErrorCode.rebalance_in_progress, ErrorCode.fenced_instance_id}):
                with self._lock:
                    self._rejoin = True
                    if errors & GENERATION_ERRORS:
                        self._lost = True
                    if ErrorCode.unknown_member_id in errors:
                        self.member_id = ""
            return result
        return result

    # -- heartbeats -----------------------------------------------------------------------------------------
    def _start_heartbeats(self) -> None:
        if self._thread is not None:
            return
        self._heartbeat_client = KafkaClient(self.client.bootstrap, timeout=self.client.timeout,
                                             client_id=self.client.client_id, security=self.client.security)
        self._thread = threading.Thread(target=self._heartbeat_loop, name=f"kctl-heartbeat-{self.group}",
                                        daemon=True)
        self._thread.start()

    def wait_for_news(self, seconds: float) -> bool:
        """Sleep up to ``seconds``, less if the heartbeat thread learns of a rebalance; True when it did."""
        woke = self._wake.wait(seconds)
        self._wake.clear()
        return woke

    def _heartbeat_loop(self) -> None:
        assert self._heartbeat_client is not None
        client = self._heartbeat_client
        last_ok = time.monotonic()
        while not self._stop.wait(self.heartbeat_interval_ms / 1000):
            with self._lock:
                active, generation, member_id = self._active, self.generation, self.member_id
                idle = time.monotonic() - self._last_poll
            if not active:
                last_ok = time.monotonic()
                continue
            if idle * 1000 > self.max_poll_interval_ms:
                self._poll_timeout(client)
                continue
            try:
                error = self._heartbeat(client, generation, member_id)
            except KcliError as exc:
                self._forget_coordinator(client)
                self._forget_coordinator(self.client)
                if time.monotonic() - last_ok > self.session_timeout_ms / 1000:
                    self._note(f"no heartbeat reached the coordinator of group {self.group} for "
                               f"{self.session_timeout_ms} ms (session.timeout.ms): {exc.describe()}")
                    last_ok = time.monotonic()
                continue
            if error == ErrorCode.none:
                last_ok = time.monotonic()
            elif error in COORDINATOR_ERRORS or error == ErrorCode.coordinator_load_in_progress:
                self._forget_coordinator(client)
                self._forget_coordinator(self.client)
            elif error == ErrorCode.rebalance_in_progress:
                last_ok = time.monotonic()
                self._set_rejoin(lost=False)
            elif error in GENERATION_ERRORS:
                self._set_rejoin(lost=True, reset_member=error == ErrorCode.unknown_member_id,
                                 why=f"Heartbeat error_code = {error_name(error)}: the group moved on without "
                                 "this member")
            elif error in FATAL_ERRORS:
                with self._lock:
                    self._fatal = GroupMemberError(f"group {self.group!r}: Heartbeat error_code = {error_name(error)}"
                                                   + (f": another member joined with group.instance.id "
                                                      f"{self.group_instance_id}"
                                                      if error == ErrorCode.fenced_instance_id else ""))
                    self._active = False
                self._wake.set()
            else:
                self._note(f"Heartbeat of group {self.group}: error_code = {error_name(error)}")

    def _heartbeat(self, client: KafkaClient, generation: int, member_id: str) -> ErrorCode:
        connection = self._coordinator(client)
        version, m = self._module(connection, ApiKey.HEARTBEAT)
        body = connection.call(ApiKey.HEARTBEAT, _build(
            m, "HeartbeatRequest", group_id=self.group, generation_id=generation, member_id=member_id,
            group_instance_id=self.group_instance_id))
        return ErrorCode(body.error_code)

    def _set_rejoin(self, *, lost: bool, reset_member: bool = False, why: str | None = None) -> None:
        with self._lock:
            if not self._active:
                return  # a JoinGroup began meanwhile: it is the rejoin
            self._rejoin = True
            self._lost = self._lost or lost
            if lost:
                self._active = False
            if reset_member:
                self.member_id = ""
            if why:
                self._notices.append(why)
        self._wake.set()

    def _note(self, text: str) -> None:
        with self._lock:
            self._notices.append(text)

    def _poll_timeout(self, client: KafkaClient) -> None:
        """Java's rule: a consumer whose poll loop stalled past max.poll.interval.ms leaves (a static member just
        stops heartbeating) so the group can move its partitions; it rejoins when the loop comes back."""
        with self._lock:
            member_id = self.member_id
        if self.group_instance_id is None and member_id:
            try:  # before the rejoin is asked for: the main loop's next JoinGroup comes after it
                self._leave(client, member_id)
            except KcliError as exc:
                self._note(f"LeaveGroup of group {self.group} failed: {exc.describe()}")
        self._set_rejoin(lost=True, reset_member=self.group_instance_id is None,
                         why=f"no poll for {self.max_poll_interval_ms} ms (max.poll.interval.ms): left group "
                         f"{self.group} (it rejoins when the consumer reads again)")

    # -- leave ----------------------------------------------------------------------------------------------
    def leave(self, member_id: str | None = None) -> ErrorCode | None:
        """LeaveGroup for this (dynamic) member; None when there is nothing to leave."""
        with self._lock:
            member_id = member_id if member_id is not None else self.member_id
            self._active = False
        if not member_id or self.group_instance_id is not None:
            return None  # a static member keeps its place until its session times out (KIP-345)
        return self._leave(self.client, member_id)

    def _leave(self, client: KafkaClient, member_id: str) -> ErrorCode:
        connection = self._coordinator(client)
        version, m = self._module(connection, ApiKey.LEAVE_GROUP)
        body = connection.call(ApiKey.LEAVE_GROUP, _build(
            m, "LeaveGroupRequest", group_id=self.group, member_id=member_id,
            members=(_build(m, "MemberIdentity", member_id=member_id, group_instance_id=None, reason=None),)))
        error = ErrorCode(body.error_code)
        for member in getattr(body, "members", None) or ():
            if error == ErrorCode.none and member.error_code != ErrorCode.none:
                error = ErrorCode(member.error_code)
        return error

    def close(self, *, leave: bool = True) -> ErrorCode | None:
        """Stop the heartbeats and leave the group (unless ``leave`` is False or the member is static)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=self.client.timeout + 1)
        if self._heartbeat_client is not None:
            self._heartbeat_client.close()
            self._heartbeat_client = None
        with self._lock:
            member_id = self.member_id
            self.generation, self.assignment = -1, ()
        if not leave:
            return None
        return self.leave(member_id)


class _Retry(Exception):
    def __init__(self, reason: str, *, counts: bool = True) -> None:
        super().__init__(reason)
        self.reason = reason
        self.counts = counts


def _ms(ms: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=ms)
