"""The message layouts kio has no schema for, declared once as data, and the one lookup of a message's class.

kio is generated from Kafka 4.x's JSON specs, which dropped the versions KIP-896 retired. Kafka 3.7 (whose
ApiVersions table we mirror) still serves them, and so do we:

* Produce v0-v2 (message format v0/v1 records; up-converted on append by the storage validator),
* Fetch v0-v3 (records down-converted to magic 0 or 1, ``api.fetch_record_magic``),
* ListOffsets v0 (``max_num_offsets`` and the ``old_style_offsets`` array),
* OffsetCommit v0-v1 and OffsetFetch v0 (v0: offsets in ZooKeeper on a ZooKeeper-mode broker),
* OffsetForLeaderEpoch v0-v1 (KIP-101's follower truncation; no CurrentLeaderEpoch to fence with),
* AlterReplicaLogDirs v0 (v1's layout).

Each message below is declared as Kafka's JSON spec declares it (clients/src/main/resources/common/message/
<Name>.json of Kafka 3.7): fields in wire order, each with the versions that have it. Names and kafka types are
kio's, so a handler reads an old request and builds an old response exactly as it does a newer version. From
each declaration one frozen dataclass per struct and version is generated, shaped like kio's own (``__type__``,
``__version__``, ``__api_key__``, field metadata ``kafka_type``): kio's reader and writer, ``guard.walk`` and
``minimal_request`` take them as they take kio's. None of these versions is flexible (KIP-482 came later).

``request_schema``, ``response_schema`` and ``response_types`` are the one lookup of a message's classes for the
codec, the broker's handlers and the tests: kio's for the versions it has, these for the others.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Mapping
from dataclasses import MISSING, dataclass
from functools import cache
from types import MappingProxyType, ModuleType, SimpleNamespace
from typing import Any, Final

from kio.index import KioIndexError
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader
from kio.schema.response_header.v0.header import ResponseHeader
from kio.static.constants import EntityType
from kio.static.primitive import Records, TZAware, i8, i16, i32, i32Timedelta, i64

from kcli.protocol.api import ApiKey
from kcli.protocol.errors import LocalProtocolError
from kcli.protocol.schema import load_payload_module, load_request_schema, load_response_schema

# kio's kafka types used below and the Python type of a field holding one (kio.static.primitive).
_PYTHON_TYPES: Final = MappingProxyType({
    "int8": i8, "int16": i16, "int32": i32, "int64": i64, "string": str, "records": Records,
    "error_code": ErrorCode, "timedelta_i32": i32Timedelta, "datetime_i64": TZAware,
})


@dataclass(frozen=True, slots=True)
class Versions:
    """A version range as the JSON specs write it: "0+", "1", "0-3"."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str) -> Versions:
        if text.endswith("+"):
            return cls(int(text[:-1]), 1 << 15)
        low, _, high = text.partition("-")
        return cls(int(low), int(high or low))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high


NO_DEFAULT: Final = object()  # the field has no default (kio's dataclasses: a required argument)


@dataclass(frozen=True, slots=True)
class Field:
    """One field: a kio kafka type (``array``: an array of it), or an array of ``struct``."""

    name: str
    kafka_type: str | None = None
    versions: str = "0+"
    nullable: bool = False
    array: bool = False
    struct: Struct | None = None
    default: Any = NO_DEFAULT


@dataclass(frozen=True, slots=True)
class Struct:
    name: str
    fields: tuple[Field, ...]


@dataclass(frozen=True, slots=True)
class Message:
    api_key: ApiKey
    kind: EntityType  # request or response
    versions: str
    struct: Struct


def F(name: str, kafka_type: str, versions: str = "0+", *, nullable: bool = False, default: Any = NO_DEFAULT) -> Field:
    return Field(name, kafka_type, versions, nullable=nullable, default=default)


def Array(name: str, struct: str, *fields: Field, versions: str = "0+") -> Field:
    return Field(name, versions=versions, struct=Struct(struct, fields))


REQUEST, RESPONSE = EntityType.request, EntityType.response

# -- the declarations (Kafka 3.7's JSON specs, restricted to the versions kio lacks) ---------------------
MESSAGES: Final[tuple[Message, ...]] = (
    # ProduceRequest.json: v3 added TransactionalId; v0-v2 differ only in the record format they carry.
    Message(ApiKey.PRODUCE, REQUEST, "0-2", Struct("ProduceRequest", (
        F("acks", "int16"),
        F("timeout", "timedelta_i32"),
        Array("topic_data", "TopicProduceData",
              F("name", "string"),
              Array("partition_data", "PartitionProduceData",
                    F("index", "int32"),
                    F("records", "records", nullable=True))),
    ))),
    Message(ApiKey.PRODUCE, RESPONSE, "0-2", Struct("ProduceResponse", (
        Array("responses", "TopicProduceResponse",
              F("name", "string"),
              Array("partition_responses", "PartitionProduceResponse",
                    F("index", "int32"),
                    F("error_code", "error_code"),
                    F("base_offset", "int64"),
                    F("log_append_time", "datetime_i64", "2+", nullable=True, default=None))),
        F("throttle_time", "timedelta_i32", "1+"),
    ))),
    # FetchRequest.json: v3 added MaxBytes, v4 IsolationLevel (and record format v2).
    Message(ApiKey.FETCH, REQUEST, "0-3", Struct("FetchRequest", (
        F("replica_id", "int32", default=i32(-1)),
        F("max_wait", "timedelta_i32"),
        F("min_bytes", "int32"),
        F("max_bytes", "int32", "3+", default=i32(0x7FFFFFFF)),
        Array("topics", "FetchTopic",
              F("topic", "string"),
              Array("partitions", "FetchPartition",
                    F("partition", "int32"),
                    F("fetch_offset", "int64"),
                    F("partition_max_bytes", "int32"))),
    ))),
    # FetchResponse.json: v1 added ThrottleTimeMs; v4 LastStableOffset and AbortedTransactions.
    Message(ApiKey.FETCH, RESPONSE, "0-3", Struct("FetchResponse", (
        F("throttle_time", "timedelta_i32", "1+"),
        Array("responses", "FetchableTopicResponse",
              F("topic", "string"),
              Array("partitions", "PartitionData",
                    F("partition_index", "int32"),
                    F("error_code", "error_code"),
                    F("high_watermark", "int64"),
                    F("records", "records", nullable=True))),
    ))),
    # ListOffsetsRequest.json: v0 asks for up to MaxNumOffsets offsets before a time (v1: one offset).
    Message(ApiKey.LIST_OFFSETS, REQUEST, "0", Struct("ListOffsetsRequest", (
        F("replica_id", "int32"),
        Array("topics", "ListOffsetsTopic",
              F("name", "string"),
              Array("partitions", "ListOffsetsPartition",
                    F("partition_index", "int32"),
                    F("timestamp", "int64"),
                    F("max_num_offsets", "int32", default=i32(1)))),
    ))),
    Message(ApiKey.LIST_OFFSETS, RESPONSE, "0", Struct("ListOffsetsResponse", (
        Array("topics", "ListOffsetsTopicResponse",
              F("name", "string"),
              Array("partitions", "ListOffsetsPartitionResponse",
                    F("partition_index", "int32"),
                    F("error_code", "error_code"),
                    Field("old_style_offsets", "int64", array=True))),
    ))),
    # OffsetCommitRequest.json: v1 added the generation, member id and a per-partition CommitTimestamp,
    # v2 replaced that timestamp with RetentionTimeMs. v0 commits go to ZooKeeper on a ZooKeeper-mode broker.
    Message(ApiKey.OFFSET_COMMIT, REQUEST, "0-1", Struct("OffsetCommitRequest", (
        F("group_id", "string"),
        F("generation_id_or_member_epoch", "int32", "1+", default=i32(-1)),
        F("member_id", "string", "1+"),
        Array("topics", "OffsetCommitRequestTopic",
              F("name", "string"),
              Array("partitions", "OffsetCommitRequestPartition",
                    F("partition_index", "int32"),
                    F("committed_offset", "int64"),
                    F("commit_timestamp", "int64", "1", default=i64(-1)),
                    F("committed_metadata", "string", nullable=True))),
    ))),
    Message(ApiKey.OFFSET_COMMIT, RESPONSE, "0-1", Struct("OffsetCommitResponse", (
        Array("topics", "OffsetCommitResponseTopic",
              F("name", "string"),
              Array("partitions", "OffsetCommitResponsePartition",
                    F("partition_index", "int32"),
                    F("error_code", "error_code"))),
    ))),
    # OffsetFetchRequest.json: v0 is v1's layout; v0 reads ZooKeeper on a ZooKeeper-mode broker, v1 the
    # coordinator. Topics is not nullable before v2.
    Message(ApiKey.OFFSET_FETCH, REQUEST, "0", Struct("OffsetFetchRequest", (
        F("group_id", "string"),
        Array("topics", "OffsetFetchRequestTopic",
              F("name", "string"),
              Field("partition_indexes", "int32", array=True)),
    ))),
    Message(ApiKey.OFFSET_FETCH, RESPONSE, "0", Struct("OffsetFetchResponse", (
        Array("topics", "OffsetFetchResponseTopic",
              F("name", "string"),
              Array("partitions", "OffsetFetchResponsePartition",
                    F("partition_index", "int32"),
                    F("committed_offset", "int64"),
                    F("metadata", "string", nullable=True),
                    F("error_code", "error_code"))),
    ))),
    # OffsetForLeaderEpochRequest.json: v1 is v0 (the response adds LeaderEpoch); v2 added CurrentLeaderEpoch.
    Message(ApiKey.OFFSET_FOR_LEADER_EPOCH, REQUEST, "0-1", Struct("OffsetForLeaderEpochRequest", (
        Array("topics", "OffsetForLeaderTopic",
              F("topic", "string"),
              Array("partitions", "OffsetForLeaderPartition",
                    F("partition", "int32"),
                    F("leader_epoch", "int32"))),
    ))),
    # OffsetForLeaderEpochResponse.json: v1 added LeaderEpoch, v2 ThrottleTimeMs.
    Message(ApiKey.OFFSET_FOR_LEADER_EPOCH, RESPONSE, "0-1", Struct("OffsetForLeaderEpochResponse", (
        Array("topics", "OffsetForLeaderTopicResult",
              F("topic", "string"),
              Array("partitions", "EpochEndOffset",
                    F("error_code", "error_code"),
                    F("partition", "int32"),
                    F("leader_epoch", "int32", "1+", default=i32(-1)),
                    F("end_offset", "int64", default=i64(-1)))),
    ))),
    # AlterReplicaLogDirsRequest.json: "Version 1 is the same as version 0", v2 flexible (KIP-113).
    Message(ApiKey.ALTER_REPLICA_LOG_DIRS, REQUEST, "0", Struct("AlterReplicaLogDirsRequest", (
        Array("dirs", "AlterReplicaLogDir",
              F("path", "string"),
              Array("topics", "AlterReplicaLogDirTopic",
                    F("name", "string"),
                    Field("partitions", "int32", array=True))),
    ))),
    Message(ApiKey.ALTER_REPLICA_LOG_DIRS, RESPONSE, "0", Struct("AlterReplicaLogDirsResponse", (
        F("throttle_time", "timedelta_i32"),
        Array("results", "AlterReplicaLogDirTopicResult",
              F("topic_name", "string"),
              Array("partitions", "AlterReplicaLogDirPartitionResult",
                    F("partition_index", "int32"),
                    F("error_code", "error_code"))),
    ))),
)


# -- classes from the declarations -----------------------------------------------------------------------
def _generate(message: Message, version: int) -> dict[str, type]:
    """The classes of ``message`` at ``version`` by struct name, shaped like kio's generated ones."""
    header = RequestHeader if message.kind is REQUEST else ResponseHeader
    classes: dict[str, type] = {}

    def build(struct: Struct, kind: EntityType) -> type:
        specs = []
        for f in struct.fields:
            if version not in Versions.parse(f.versions):
                continue
            if f.struct is not None:
                specs.append((f.name, tuple[build(f.struct, EntityType.nested), ...], dataclasses.field()))  # type: ignore[misc]
                continue
            assert f.kafka_type is not None
            python_type: Any = _PYTHON_TYPES[f.kafka_type]
            if f.array:
                python_type = tuple[python_type, ...]
            if f.nullable:
                python_type = python_type | None
            default = MISSING if f.default is NO_DEFAULT else f.default
            specs.append((f.name, python_type, dataclasses.field(metadata={"kafka_type": f.kafka_type},
                                                                 default=default)))
        namespace = {"__type__": kind, "__version__": i16(version), "__flexible__": False,
                     "__api_key__": i16(int(message.api_key)), "__header_schema__": header}
        cls = dataclasses.make_dataclass(struct.name, specs, namespace=namespace, frozen=True, slots=True,
                                         kw_only=True)
        cls.__module__ = __name__
        classes[struct.name] = cls
        return cls

    build(message.struct, message.kind)
    return classes


class _Declared(Mapping):
    """(api key, request or response, version) -> the namespace of that version's classes, each generated on first
    use: making them all (~150 dataclasses) cost every process that imports the codec tens of milliseconds, a
    client's start-up included, though a process only ever meets a few old versions. Under a lock: a version's
    classes are made once, whichever thread asks first."""

    def __init__(self, messages: tuple[Message, ...]) -> None:
        self._messages = {}
        for message in messages:
            versions = Versions.parse(message.versions)
            for version in range(versions.low, versions.high + 1):
                self._messages[(int(message.api_key), message.kind, version)] = message
        self._made: dict[tuple[int, EntityType, int], SimpleNamespace] = {}
        self._lock = threading.Lock()

    def __getitem__(self, key: tuple[int, EntityType, int]) -> SimpleNamespace:
        namespace = self._made.get(key)
        if namespace is None:
            message = self._messages[key]  # KeyError for a version not declared here
            with self._lock:
                namespace = self._made.get(key)
                if namespace is None:
                    namespace = self._made[key] = SimpleNamespace(**_generate(message, key[2]))
        return namespace

    def __contains__(self, key: object) -> bool:
        return key in self._messages

    def __iter__(self) -> Iterator[tuple[int, EntityType, int]]:
        return iter(self._messages)

    def __len__(self) -> int:
        return len(self._messages)


_CLASSES: Final[Mapping[tuple[int, EntityType, int], SimpleNamespace]] = _Declared(MESSAGES)
_TOP_NAMES: Final = {(int(m.api_key), m.kind): m.struct.name for m in MESSAGES}

# The versions each API serves from these declarations (below kio's first version of it).
LEGACY_VERSIONS: Final[Mapping[ApiKey, tuple[int, int]]] = MappingProxyType({
    m.api_key: (Versions.parse(m.versions).low, Versions.parse(m.versions).high) for m in MESSAGES if m.kind is REQUEST
})


def is_legacy(api_key: int, version: int) -> bool:
    """True for a version served from the declarations here rather than kio's schemas."""
    return (int(api_key), REQUEST, version) in _CLASSES


def _legacy(api_key: int, kind: EntityType, version: int) -> type | None:
    namespace = _CLASSES.get((int(api_key), kind, version))
    return None if namespace is None else getattr(namespace, _TOP_NAMES[(int(api_key), kind)])


@cache
def request_schema(api_key: int, version: int) -> type | None:
    """The request class of (api, version): kio's, else the declared one here; None when neither has it."""
    try:
        return load_request_schema(api_key, version)
    except KioIndexError:
        return _legacy(api_key, REQUEST, version)


@cache
def response_schema(api_key: int, version: int) -> type | None:
    """The response class of (api, version): kio's, else the declared one here; None when neither has it."""
    try:
        return load_response_schema(api_key, version)
    except KioIndexError:
        return _legacy(api_key, RESPONSE, version)


@cache
def _field_names_in_any_version(api_key: int, kind: EntityType, class_name: str) -> frozenset[str]:
    names: set[str] = set()
    for version in range(0, 64):
        classes: Any = _CLASSES.get((api_key, kind, version))
        if classes is None:
            try:
                classes = load_payload_module(api_key, version, kind)
            except KioIndexError:
                continue
        cls = getattr(classes, class_name, None)
        if cls is not None:
            names.update(f.name for f in dataclasses.fields(cls))
    return frozenset(names)


def _message_of(classes: ModuleType | SimpleNamespace) -> tuple[int, EntityType]:
    """(api key, request or response) of a module or namespace of one message version's classes."""
    for value in vars(classes).values():
        kind = getattr(value, "__type__", None)
        if kind in (REQUEST, RESPONSE) and dataclasses.is_dataclass(value):
            return int(value.__api_key__), kind
    raise LocalProtocolError(f"{classes!r} holds no request or response class")


def build_entity(classes: ModuleType | SimpleNamespace, class_name: str, **values: Any) -> Any:
    """``classes.class_name`` (one version of a message, kio's or declared here) from ``values``: a value for a
    field this version has goes in; one for a field only other versions of the message have is left out (the
    negotiated version has no place for it); a name no version has raises ``LocalProtocolError``, so a
    misspelt field fails loudly instead of vanishing."""
    cls = getattr(classes, class_name)
    names = tuple(values)
    keep = _KEPT.get((cls, names), _UNSEEN)
    if keep is _UNSEEN:  # the first call with these names: what this version keeps, or a misspelt name raises
        own = _own_fields(cls)
        keep = None
        if any(k not in own for k in names):
            api_key, kind = _message_of(classes)
            known = _field_names_in_any_version(api_key, kind, class_name)
            unknown = sorted(k for k in names if k not in known)
            if unknown:
                raise LocalProtocolError(f"{class_name} has no field {', '.join(unknown)} in any version")
            keep = frozenset(own)
        _KEPT[(cls, names)] = keep
    if keep is not None:
        values = {k: v for k, v in values.items() if k in keep}
    return cls(**values)


# build_entity's decision per (class, the names given, in order): None when every name is a field of the class, else
# the class's fields (the others are dropped). A handler passes the same names on every call, so a response of many
# partitions decides once.
_KEPT: dict[tuple[type, tuple[str, ...]], frozenset[str] | None] = {}
_UNSEEN = object()


@cache
def _own_fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def response_types(request: Any) -> ModuleType | SimpleNamespace:
    """The classes a response to ``request`` (a request body) is built from, by name: kio's response module
    of its version, or the namespace of the declared classes here."""
    return _response_types(type(request))


@cache
def _response_types(request_type: type) -> ModuleType | SimpleNamespace:
    api_key, version = int(request_type.__api_key__), int(request_type.__version__)  # type: ignore[attr-defined]
    namespace = _CLASSES.get((api_key, RESPONSE, version))
    if namespace is not None:
        return namespace
    return load_payload_module(api_key, version, EntityType.response)
