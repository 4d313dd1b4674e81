"""KafkaClient: blocking request/response over one socket per broker, kio bodies, kcli.protocol framing.

Versions are negotiated with ApiVersions v0 (every Kafka since 0.10 answers it): per API the highest version
both the broker and this client speak, capped at ``PREFERRED`` so response shapes stay the single-group ones.
Requests to one broker may be pipelined (``call_many``): Kafka answers a connection's requests in order.
Errors name the request, the field and Kafka's error code (``OffsetCommitResponse v7: topics[orders]
.partitions[0].error_code = UNKNOWN_TOPIC_OR_PARTITION (3)``).
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.index import KioIndexError
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

from kcli.errors import KcliError
from kcli.protocol.api import ApiKey
from kcli.protocol.codec import SIZE_PREFIX, api_name
from kcli.protocol.connection import ClientConnection
from kcli.protocol.errors import ProtocolError
from kcli.protocol.legacy import build_entity
from kcli.protocol.schema import load_payload_module, load_request_schema
from kcli.protocol.security import (
    PLAINTEXT,
    SASL_AUTHENTICATE,
    ClientSecurity,
    SaslAuthenticationFailed,
    drive,
    reauth_deadline,
    sasl_exchange,
)

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_CLIENT_ID = "kctl"
MAX_RESPONSE_BYTES = 104857600
EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
RETRIABLE = frozenset({ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                       ErrorCode.not_coordinator})
RETRIES = 5

# The highest version the client asks for: past these the responses change shape (FindCoordinator v4
# batches keys, OffsetFetch v8 batches groups, ListGroups v4 adds states).
PREFERRED: dict[ApiKey, int] = {
    ApiKey.METADATA: 8,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.OFFSET_COMMIT: 7,
    ApiKey.OFFSET_FETCH: 7,
    ApiKey.LIST_OFFSETS: 5,
    ApiKey.DESCRIBE_GROUPS: 4,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.DELETE_GROUPS: 1,
    ApiKey.WRITE_TXN_MARKERS: 1,  # kio starts at v1
}

TopicPartition = tuple[str, int]


class KafkaClientError(KcliError):
    """A Kafka request failed: the broker refused it or answered nonsense."""


class BrokerUnreachableError(KafkaClientError):
    """No connection to the broker, or it went away mid-request."""


class UnknownNodeError(KafkaClientError):
    """A node id (a partition's leader, say) that the cluster's metadata does not list: a stale leader of a broker
    that just went away, which the next metadata refresh resolves (Kafka's clients: LEADER_NOT_AVAILABLE)."""


class BrokerAuthenticationError(KafkaClientError):
    """The TLS handshake or the SASL exchange with a broker failed (a certificate not trusted, wrong credentials,
    a mechanism the listener does not enable)."""


class KafkaRequestError(KafkaClientError):
    """The broker answered with an error code; ``error`` is kio's ErrorCode."""

    def __init__(self, reason: str, *, request: str, field: str, error: ErrorCode) -> None:
        self.error = error
        self.request = request
        self.field = field
        super().__init__(f"{field} = {error_name(error)}: {reason}" if reason else f"{field} = {error_name(error)}",
                         path=request)


def error_name(error: ErrorCode | int) -> str:
    code = ErrorCode(error)
    return f"{code.name.upper()} ({int(code)})"


@dataclass(frozen=True)
class GroupDescription:
    group: str
    state: str
    protocol_type: str
    members: tuple[str, ...]  # member ids

    @property
    def live(self) -> bool:
        return self.state not in ("Empty", "Dead") or bool(self.members)


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    error: ErrorCode
    partitions: dict[int, int]  # partition -> leader id (-1: none)


@dataclass(frozen=True)
class ClusterMetadata:
    cluster_id: str | None
    brokers: dict[int, tuple[str, int]]
    topics: dict[str, TopicMetadata]


@cache
def _kio_versions(api_key: ApiKey) -> range:
    """The versions kio has classes for (its minimum is Kafka 4's KIP-896 baseline)."""
    found = []
    for version in range(0, PREFERRED.get(api_key, 0) + 1):
        try:
            load_request_schema(api_key, version)
            found.append(version)
        except KioIndexError:
            continue
    return range(found[0], found[-1] + 1) if found else range(0)


_build = build_entity  # module.Class from values; a field no version has raises (kcli.protocol.schema)


class BrokerConnection:
    """One blocking connection to one broker; the API versions it serves, learnt at connect time."""

    def __init__(self, host: str, port: int, *, timeout: float = DEFAULT_TIMEOUT_S,
                 client_id: str = DEFAULT_CLIENT_ID, security: ClientSecurity = PLAINTEXT,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.address = f"{host}:{port}"
        self.timeout = timeout
        self.client_id = client_id
        self.security = security
        self._reauth_at: float | None = None
        # one request-response exchange at a time (call_many): answers are matched to requests in order, so two
        # threads interleaving their frames on one connection would each read the other's answer
        self._exchange = threading.Lock()
        self._wire = ClientConnection(client_id, max_frame_bytes=MAX_RESPONSE_BYTES, peer=f"the broker at {self.address}")
        try:
            self._sock: socket.socket | None = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise BrokerUnreachableError(f"cannot connect to the Kafka broker at {self.address}: "
                                         f"{exc.strerror or exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if security.protocol.tls:
            self._sock = self._tls(self._sock, host, ssl_context)
        self.versions: dict[int, tuple[int, int]] = {}
        # ApiVersions first, before SASL as Kafka's clients do: a SASL listener answers it unauthenticated
        body = self._call_raw(ApiKey.API_VERSIONS, 0, [load_request_schema(ApiKey.API_VERSIONS, 0)()])[0]
        if body.error_code != ErrorCode.none:
            raise KafkaRequestError("", request="ApiVersionsResponse v0", field="error_code", error=body.error_code)
        self.versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in body.api_keys}
        if security.protocol.sasl:
            self._authenticate()

    def _tls(self, sock: socket.socket, host: str, context: ssl.SSLContext | None) -> ssl.SSLSocket:
        if context is None:
            from kcli.tls import client_ssl_context

            context = client_ssl_context(self.security.ssl)
        try:
            return context.wrap_socket(sock, server_hostname=host)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise BrokerAuthenticationError(f"TLS handshake with the broker at {self.address} failed: "
                                            f"{exc.verify_message or exc.reason} (is ssl.ca.location the CA that signed "
                                            "the broker's certificate, and the host name in it?)") from None
        except (ssl.SSLError, OSError) as exc:
            sock.close()
            raise BrokerAuthenticationError(f"TLS handshake with the broker at {self.address} failed: "
                                            f"{getattr(exc, 'reason', None) or exc.strerror or exc} "
                                            "(is it a TLS listener?)") from None

    def _authenticate(self) -> None:
        """SaslHandshake + SaslAuthenticate on this connection (again before the session expires, KIP-368)."""
        theirs = self.versions.get(SASL_AUTHENTICATE)
        if theirs is None:
            self.close()
            raise BrokerAuthenticationError(f"the broker at {self.address} does not serve SaslAuthenticate "
                                            "(a PLAINTEXT listener, or a broker older than Kafka 1.0)")
        exchange = sasl_exchange(self.security, authenticate_version=theirs[1], peer=f"the broker at {self.address}")
        self._reauth_at = None
        try:
            outcome = drive(exchange, lambda key, version, body: self._call_raw(key, version, [body])[0])
        except SaslAuthenticationFailed as exc:
            self.close()
            raise BrokerAuthenticationError(exc.reason) from None
        self._reauth_at = reauth_deadline(time.monotonic(), outcome)

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def version(self, api_key: ApiKey) -> int:
        """The version to speak: the highest both sides know, at most PREFERRED."""
        ours = _kio_versions(api_key)
        theirs = self.versions.get(int(api_key))
        if theirs is None:
            raise KafkaClientError(f"the broker at {self.address} does not serve {api_name(api_key)}")
        version = min(ours.stop - 1, theirs[1])
        if version < max(ours.start, theirs[0]):
            raise KafkaClientError(f"the broker at {self.address} serves {api_name(api_key)} v{theirs[0]}-v{theirs[1]}; "
                                   f"kcli's client speaks v{ours.start}-v{ours.stop - 1}")
        return version

    def module(self, api_key: ApiKey) -> tuple[int, Any]:
        version = self.version(api_key)
        return version, load_payload_module(api_key, version, EntityType.request)

    def call(self, api_key: ApiKey, body: Any) -> Any:
        return self.call_many(api_key, [body])[0]

    def call_many(self, api_key: ApiKey, bodies: Sequence[Any]) -> list[Any]:
        """Send every body (pipelined), then read the answers in order."""
        if not bodies:
            return []
        with self._exchange:
            if self._reauth_at is not None and time.monotonic() >= self._reauth_at:
                self._authenticate()
            return self._call_raw(api_key, type(bodies[0]).__version__, bodies)

    def _call_raw(self, api_key: ApiKey, version: int, bodies: Sequence[Any]) -> list[Any]:
        """One exchange; callers hold ``_exchange`` (or own the connection alone, as __init__ does)."""
        if self._sock is None:
            raise BrokerUnreachableError(f"the connection to {self.address} is closed")
        name = f"{api_name(api_key)}Request v{version}"
        frames = []
        for body in bodies:
            try:
                frames.append(self._wire.send_request(api_key, version, body)[1])
            except ProtocolError as exc:
                raise KafkaClientError(exc.describe(), path=name) from None
        try:
            self._sock.sendall(b"".join(frames))
            answers = []
            for _ in bodies:
                try:
                    size = self._wire.frame_size(self._read_exactly(SIZE_PREFIX.size, name))
                    answers.append(self._wire.receive_frame(self._read_exactly(size, name)).body)
                except ProtocolError as exc:
                    raise KafkaClientError(f"undecodable answer from {self.address}: {exc.describe()}") from None
            return answers
        except (OSError, KafkaClientError) as exc:
            self.close()
            if isinstance(exc, KafkaClientError):
                raise
            raise BrokerUnreachableError(f"lost the connection to the Kafka broker at {self.address} during {name}: "
                                         f"{getattr(exc, 'strerror', None) or exc}") from None

    def _read_exactly(self, size: int, name: str) -> bytes:
        assert self._sock is not None
        chunks, left = [], size
        while left:
            chunk = self._sock.recv(min(left, 1 << 20))
            if not chunk:
                hint = ""
                if self.security.plaintext:  # a TLS or SASL listener closes on a plaintext client's first request
                    hint = (" (does its listener need security settings: --command-config FILE or "
                            "-X security.protocol=SSL, SASL_SSL...?)")
                raise BrokerUnreachableError(f"the broker at {self.address} closed the connection during {name}{hint}")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    servers = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        host, _, port = item.rpartition(":")
        host = host.strip("[]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise KcliError(f"bootstrap server {item!r} is not host:port")
        servers.append((host, int(port)))
    if not servers:
        raise KcliError(f"bootstrap servers {text!r} name no broker")
    return servers


class KafkaClient:
    """A client for one cluster, from its bootstrap servers; close() (or a with block) ends every connection."""

    def __init__(self, bootstrap: str, *, timeout: float = DEFAULT_TIMEOUT_S,
                 client_id: str = DEFAULT_CLIENT_ID, security: ClientSecurity | None = None) -> None:
        self.bootstrap = bootstrap
        self.servers = parse_bootstrap(bootstrap)
        self.timeout = timeout
        self.client_id = client_id
        self.security = security or PLAINTEXT
        self._ssl_context: ssl.SSLContext | None = None
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._coordinators: dict[str, int] = {}

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        """Connect to a bootstrap server now (BrokerUnreachableError when none answers)."""
        self._any()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # -- connections ---------------------------------------------------------------------------------
    def _connect(self, address: tuple[str, int]) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None or connection._sock is None:
            if self.security.protocol.tls and self._ssl_context is None:
                from kcli.tls import client_ssl_context

                self._ssl_context = client_ssl_context(self.security.ssl)  # one context for every broker
            connection = BrokerConnection(*address, timeout=self.timeout, client_id=self.client_id,
                                          security=self.security, ssl_context=self._ssl_context)
            self._connections[address] = connection
        return connection

    def _any(self) -> BrokerConnection:
        errors = []
        for address in list(self._connections) + self.servers:
            try:
                return self._connect(address)
            except BrokerUnreachableError as exc:
                errors.append(exc.reason)
        raise BrokerUnreachableError("no bootstrap server answered: " + "; ".join(dict.fromkeys(errors)))

    def _node(self, node_id: int) -> BrokerConnection:
        if node_id not in self._brokers:
            self.metadata([])
        address = self._brokers.get(node_id)
        if address is None:
            raise UnknownNodeError(f"broker {node_id} is not in the cluster's metadata")
        return self._connect(address)

    # -- Metadata ------------------------------------------------------------------------------------
    def metadata(self, topics: Iterable[str] | None = None) -> ClusterMetadata:
        """Brokers and the named topics (None: every topic). Never creates topics."""
        connection = self._any()
        version, m = connection.module(ApiKey.METADATA)
        wanted = None if topics is None else tuple(_build(m, "MetadataRequestTopic", name=t, topic_id=None)
                                                   for t in topics)
        if wanted is None and version == 0:
            wanted = ()  # v0: an empty list means all topics
        body = connection.call(ApiKey.METADATA, _build(
            m, "MetadataRequest", topics=wanted, allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False, include_topic_authorized_operations=False))
        self._brokers = {int(b.node_id): (b.host, int(b.port)) for b in body.brokers}
        result = {}
        for t in body.topics:
            result[t.name] = TopicMetadata(t.name, t.error_code,
                                           {int(p.partition_index): int(p.leader_id) for p in t.partitions})
        return ClusterMetadata(getattr(body, "cluster_id", None), dict(self._brokers), result)

    def topic_partitions(self, topics: Iterable[str]) -> dict[str, int | None]:
        """Partition count per topic; None for a topic the cluster does not have."""
        names = sorted(set(topics))
        if not names:
            return {}
        meta = self.metadata(names)
        out: dict[str, int | None] = {}
        for name in names:
            t = meta.topics.get(name)
            if t is None or t.error == ErrorCode.unknown_topic_or_partition:
                out[name] = None
            elif t.error != ErrorCode.none:
                raise KafkaRequestError(f"topic {name}", request="MetadataResponse", field=f"topics[{name}].error_code",
                                        error=t.error)
            else:
                out[name] = len(t.partitions)
        return out

    # -- ListOffsets ---------------------------------------------------------------------------------
    def log_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, tuple[int, int]]:
        """(log start offset, log end offset) per partition, asked of each partition's leader."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        meta = self.metadata(sorted({t for t, _ in wanted}))
        by_leader: dict[int, list[TopicPartition]] = {}
        for topic, partition in wanted:
            t = meta.topics.get(topic)
            leader = t.partitions.get(partition) if t is not None else None
            if leader is None:
                raise KafkaClientError(f"{topic}-{partition} is not in the cluster's metadata",
                                       path="MetadataResponse")
            if leader < 0:
                raise KafkaClientError(f"{topic}-{partition} has no leader", path="MetadataResponse")
            by_leader.setdefault(leader, []).append((topic, partition))
        result: dict[TopicPartition, list[int]] = {}
        for leader, tps in by_leader.items():
            connection = self._node(leader)
            version, m = connection.module(ApiKey.LIST_OFFSETS)
            bodies = []
            for timestamp in (EARLIEST, LATEST):
                topics: dict[str, list[Any]] = {}
                for topic, partition in tps:
                    topics.setdefault(topic, []).append(_build(
                        m, "ListOffsetsPartition", partition_index=partition, current_leader_epoch=-1,
                        timestamp=timestamp, max_num_offsets=1))
                bodies.append(_build(m, "ListOffsetsRequest", replica_id=-1, isolation_level=0, topics=tuple(
                    _build(m, "ListOffsetsTopic", name=name, partitions=tuple(parts)) for name, parts in topics.items())))
            for which, body in enumerate(connection.call_many(ApiKey.LIST_OFFSETS, bodies)):
                for t in body.topics:
                    for p in t.partitions:
                        if p.error_code != ErrorCode.none:
                            raise KafkaRequestError(
                                "", request=f"ListOffsetsResponse v{version}",
                                field=f"topics[{t.name}].partitions[{p.partition_index}].error_code", error=p.error_code)
                        offset = int(p.offset) if version > 0 else int(p.old_style_offsets[0])
                        result.setdefault((t.name, int(p.partition_index)), [0, 0])[which] = offset
        return {tp: (v[0], v[1]) for tp, v in result.items()}

    # -- groups --------------------------------------------------------------------------------------
    def find_coordinator(self, group: str) -> int:
        """The node id of the group's coordinator (cached)."""
        node = self._coordinators.get(group)
        if node is not None:
            return node
        for attempt in range(RETRIES):
            connection = self._any()
            version, m = connection.module(ApiKey.FIND_COORDINATOR)
            body = connection.call(ApiKey.FIND_COORDINATOR, _build(m, "FindCoordinatorRequest", key=group, key_type=0))
            if body.error_code == ErrorCode.none:
                self._brokers[int(body.node_id)] = (body.host, int(body.port))
                self._coordinators[group] = int(body.node_id)
                return int(body.node_id)
            if body.error_code not in RETRIABLE or attempt == RETRIES - 1:
                raise KafkaRequestError(f"group {group!r}" + (f": {body.error_message}" if body.error_message else ""),
                                        request=f"FindCoordinatorResponse v{version}", field="error_code",
                                        error=body.error_code)
            time.sleep(0.1 * (attempt + 1))
        raise AssertionError("unreachable")

    def find_coordinators(self, groups: Sequence[str]) -> dict[str, int]:
        """Coordinators of many groups: the unknown ones asked with pipelined FindCoordinator requests."""
        missing = [g for g in dict.fromkeys(groups) if g not in self._coordinators]
        if missing:
            connection = self._any()
            version, m = connection.module(ApiKey.FIND_COORDINATOR)
            bodies = [_build(m, "FindCoordinatorRequest", key=g, key_type=0) for g in missing]
            for group, body in zip(missing, connection.call_many(ApiKey.FIND_COORDINATOR, bodies)):
                if body.error_code == ErrorCode.none:
                    self._brokers[int(body.node_id)] = (body.host, int(body.port))
                    self._coordinators[group] = int(body.node_id)
        # what is still missing goes through the retrying single-group path
        return {g: self.find_coordinator(g) for g in groups}

    def _coordinator(self, group: str) -> BrokerConnection:
        return self._node(self.find_coordinator(group))

    def offset_fetch(self, group: str, partitions: Iterable[TopicPartition] | None = None
                     ) -> dict[TopicPartition, int]:
        """Committed offsets of a group (all, or the named partitions); partitions without one are left out."""
        return self.offset_fetch_many([group], partitions)[group]

    def offset_fetch_many(self, groups: Sequence[str], partitions: Iterable[TopicPartition] | None = None
                          ) -> dict[str, dict[TopicPartition, int]]:
        """OffsetFetch for many groups, pipelined per coordinator; retriable errors (a coordinator still
        loading __consumer_offsets, COORDINATOR_LOAD_IN_PROGRESS) are retried with a backoff."""
        wanted = None if partitions is None else sorted(set(partitions))
        for attempt in range(RETRIES * 4):
            try:
                return self._offset_fetch_many(groups, wanted)
            except KafkaRequestError as exc:
                if exc.error not in RETRIABLE or attempt == RETRIES * 4 - 1:
                    raise
                time.sleep(0.1 * (attempt + 1))
        raise AssertionError("unreachable")

    def _offset_fetch_many(self, groups: Sequence[str], partitions: Iterable[TopicPartition] | None
                           ) -> dict[str, dict[TopicPartition, int]]:
        wanted = None if partitions is None else sorted(set(partitions))
        by_node: dict[int, list[str]] = {}
        for group, node in self.find_coordinators(groups).items():
            by_node.setdefault(node, []).append(group)
        out: dict[str, dict[TopicPartition, int]] = {}
        for node, names in by_node.items():
            connection = self._node(node)
            version, m = connection.module(ApiKey.OFFSET_FETCH)
            topics = None
            if wanted is not None:
                per: dict[str, list[int]] = {}
                for t, p in wanted:
                    per.setdefault(t, []).append(p)
                topics = tuple(_build(m, "OffsetFetchRequestTopic", name=t, partition_indexes=tuple(ps))
                               for t, ps in per.items())
            bodies = [_build(m, "OffsetFetchRequest", group_id=g, topics=topics, require_stable=False) for g in names]
            for group, body in zip(names, connection.call_many(ApiKey.OFFSET_FETCH, bodies)):
                label = f"OffsetFetchResponse v{version}"
                error = getattr(body, "error_code", ErrorCode.none)
                if error != ErrorCode.none:
                    self._coordinators.pop(group, None)
                    raise KafkaRequestError(f"group {group!r}", request=label, field="error_code", error=error)
                committed = {}
                for t in body.topics:
                    for p in t.partitions:
                        if p.error_code != ErrorCode.none:
                            raise KafkaRequestError(f"group {group!r}", request=label,
                                                    field=f"topics[{t.name}].partitions[{p.partition_index}].error_code",
                                                    error=p.error_code)
                        if int(p.committed_offset) >= 0:
                            committed[(t.name, int(p.partition_index))] = int(p.committed_offset)
                out[group] = dict(sorted(committed.items()))
        return out

    def offset_commit(self, group: str, offsets: dict[TopicPartition, int], *, metadata: str = ""
                      ) -> dict[TopicPartition, ErrorCode]:
        """A standalone commit (generation -1, member ""), as kafka-consumer-groups --reset-offsets does: all
        partitions in one request. Returns the error code per partition (ErrorCode.none when committed)."""
        if not offsets:
            return {}
        for attempt in range(RETRIES):
            connection = self._coordinator(group)
            version, m = connection.module(ApiKey.OFFSET_COMMIT)
            per: dict[str, list[Any]] = {}
            for (topic, partition), offset in sorted(offsets.items()):
                per.setdefault(topic, []).append(_build(
                    m, "OffsetCommitRequestPartition", partition_index=partition, committed_offset=offset,
                    committed_leader_epoch=-1, committed_metadata=metadata, commit_timestamp=-1))
            body = connection.call(ApiKey.OFFSET_COMMIT, _build(
                # generation -1 and no member: a commit from outside the group (kafka-consumer-groups' own);
                # retention_time (v2-v4) keeps its default, -1: the broker's offsets.retention.minutes
                m, "OffsetCommitRequest", group_id=group, generation_id_or_member_epoch=-1,
                member_id="", group_instance_id=None,
                topics=tuple(_build(m, "OffsetCommitRequestTopic", name=t, partitions=tuple(ps))
                             for t, ps in per.items())))
            result = {(t.name, int(p.partition_index)): ErrorCode(p.error_code)
                      for t in body.topics for p in t.partitions}
            if any(e in RETRIABLE for e in result.values()) and attempt < RETRIES - 1:
                self._coordinators.pop(group, None)
                time.sleep(0.1 * (attempt + 1))
                continue
            return result
        raise AssertionError("unreachable")

    def describe_groups(self, groups: Sequence[str]) -> dict[str, GroupDescription]:
        by_node: dict[int, list[str]] = {}
        for group, node in self.find_coordinators(groups).items():
            by_node.setdefault(node, []).append(group)
        out = {}
        for node, names in by_node.items():
            connection = self._node(node)
            version, m = connection.module(ApiKey.DESCRIBE_GROUPS)
            body = connection.call(ApiKey.DESCRIBE_GROUPS, _build(m, "DescribeGroupsRequest", groups=tuple(names),
                                                                  include_authorized_operations=False))
            for g in body.groups:
                if g.error_code not in (ErrorCode.none, ErrorCode.group_id_not_found):
                    raise KafkaRequestError(f"group {g.group_id!r}", request=f"DescribeGroupsResponse v{version}",
                                            field=f"groups[{g.group_id}].error_code", error=g.error_code)
                state = g.group_state if g.error_code == ErrorCode.none else "Dead"
                out[g.group_id] = GroupDescription(g.group_id, state, g.protocol_type,
                                                   tuple(mb.member_id for mb in g.members))
        return out

    def list_groups(self) -> list[str]:
        """Every group any broker coordinates."""
        meta = self.metadata([])
        names: set[str] = set()
        for node in sorted(meta.brokers):
            connection = self._node(node)
            version, m = connection.module(ApiKey.LIST_GROUPS)
            body = connection.call(ApiKey.LIST_GROUPS, _build(m, "ListGroupsRequest", states_filter=()))
            if body.error_code != ErrorCode.none:
                raise KafkaRequestError("", request=f"ListGroupsResponse v{version}", field="error_code",
                                        error=body.error_code)
            names.update(g.group_id for g in body.groups)
        return sorted(names)

    def delete_groups(self, groups: Sequence[str]) -> dict[str, ErrorCode]:
        out = {}
        for group in groups:
            connection = self._coordinator(group)
            version, m = connection.module(ApiKey.DELETE_GROUPS)
            body = connection.call(ApiKey.DELETE_GROUPS, _build(m, "DeleteGroupsRequest", groups_names=(group,)))
            out.update({r.group_id: ErrorCode(r.error_code) for r in body.results})
        return out
