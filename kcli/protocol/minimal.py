"""A minimal valid request body for any (api, version): kio's dataclass (or kcli.protocol.legacy's, shaped alike),
filled from its field metadata.

For tests and probes (the api sweep, fuzzing seeds), not for clients: every request names one topic,
one partition (0) and one group, and asks for as little as the version allows. Values are chosen by
field name from the tables below (protocol rules as data); a field missing from them takes kio's
default (the spec's ``default``) or the neutral value of its type (0, "", false, empty array).
Arrays of structs get one element so the request actually addresses the topic or group.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta
from typing import Any, Final

from kio.index import KioIndexError
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)

from kcli.protocol.api import ApiKey
from kcli.protocol.legacy import request_schema

# Structs arrays left empty: a replica assignment next to num_partitions is an error (CreateTopics),
# a config list or assignment list is optional, a forgotten-topic list means "stop fetching".
_EMPTY_ARRAYS: Final = frozenset({
    "assignments", "configs", "forgotten_topics_data", "states_filter", "types_filter",
})

# Values by field name, whatever the API: "topic" / "group" are replaced by the caller's names.
_BY_NAME: Final[dict[str, Any]] = {
    "name": "topic",
    "topic": "topic",
    "topic_name": "topic",
    "topic_names": ("topic",),
    "resource_name": "topic",
    "group_id": "group",
    "groups": ("group",),
    "groups_names": ("group",),
    "key": "group",
    "coordinator_keys": ("group",),
    "member_id": "",
    "group_instance_id": None,
    "protocol_type": "consumer",
    "protocol_name": "range",
    "transactional_id": None,
    "client_software_name": "kctl-probe",
    "client_software_version": "1.0",
    "acks": -1,
    "replica_id": -1,
    "generation_id": -1,
    "generation_id_or_member_epoch": -1,
    "producer_id": -1,
    "producer_epoch": -1,
    "timestamp": -1,  # ListOffsets: LATEST_TIMESTAMP
    "partition_max_bytes": 1 << 20,
    "max_bytes": 1 << 20,
    "min_bytes": 1,
    "num_partitions": 1,
    "replication_factor": 1,
    "count": 1,
    "resource_type": 2,  # DescribeConfigs: TOPIC
    "configuration_keys": None,  # all of them
    "committed_metadata": "",
    "retention_time": timedelta(milliseconds=-1),
    "timeout": timedelta(seconds=5),
    "timeout_ms": timedelta(seconds=5),
    "session_timeout": timedelta(seconds=10),
    "rebalance_timeout": timedelta(seconds=10),
    "transaction_timeout": timedelta(seconds=60),
    "max_wait": timedelta(0),
    "allow_auto_topic_creation": False,
    "require_stable": False,
}

# ACL filters that match one literal topic ACL of a probe principal (DescribeAcls, DeleteAcls).
_ACL_FILTER: Final[dict[str, Any]] = {
    "resource_type_filter": 2, "resource_name_filter": "topic", "pattern_type_filter": 3,  # TOPIC, LITERAL
    "principal_filter": "User:kctl-probe", "host_filter": None, "operation": 1, "permission_type": 1,  # ANY
}

# Per-API exceptions to the table above, by api key number (also for keys ApiKey does not list yet).
_BY_API: Final[dict[int, dict[str, Any]]] = {
    ApiKey.METADATA: {"include_cluster_authorized_operations": False,
                      "include_topic_authorized_operations": False},
    ApiKey.OFFSET_FETCH: {"topics": None},  # all committed offsets of the group (v2+; v0-v1 need a list)
    ApiKey.CREATE_PARTITIONS: {"assignments": None},
    ApiKey.JOIN_GROUP: {"name": "range"},  # JoinGroupRequestProtocol.name: the assignor
    29: _ACL_FILTER,  # DescribeAcls
    30: {"resource_type": 2, "resource_pattern_type": 3, "principal": "User:kctl-probe", "host": "*",
         "operation": 3, "permission_type": 3},  # CreateAcls: TOPIC, LITERAL, READ, ALLOW
    31: _ACL_FILTER,  # DeleteAcls
    33: {"validate_only": True},  # AlterConfigs replaces a resource's whole config: never for real
    44: {"validate_only": True},  # IncrementalAlterConfigs
    50: {"users": None},  # DescribeUserScramCredentials: all users
    51: {"deletions": (), "upsertions": ()},  # AlterUserScramCredentials: nothing to change
}

_NEUTRAL: Final[dict[str, Any]] = {
    "int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "float64": 0.0, "bool": False,
    "string": "", "bytes": b"", "records": None, "uuid": None,
    "timedelta_i32": timedelta(0), "timedelta_i64": timedelta(0),
}


def minimal_request(
    api_key: int,
    api_version: int,
    *,
    topic: str = "kctl-probe",
    group_id: str = "kctl-probe",
    topic_id: uuid.UUID | None = None,
    records: bytes | None = None,
    protocol_metadata: bytes = b"",
    **overrides: Any,
) -> Any:
    """The kio request dataclass of ``api_key`` at ``api_version`` with sensible minimal values.

    ``topic_id`` fills uuid topic ids (Fetch v13+, Metadata v10+; None sends the zero UUID), ``records``
    the Produce records field, ``protocol_metadata`` JoinGroup's protocol metadata (a consumer
    subscription). ``overrides`` replace top-level fields by name. Raises ``KioIndexError`` for a
    version neither kio nor kcli.protocol.legacy has a schema of.
    """
    api_key = int(api_key)
    body_type = request_schema(api_key, api_version)
    if body_type is None:
        raise KioIndexError(f"no schema of api key {api_key} v{api_version}")
    values = {**_BY_NAME, **_BY_API.get(api_key, {})}
    names = {"topic": topic, "group": group_id}

    def value(name: str, kafka_type: str, optional: bool, is_array: bool) -> Any:
        if name.endswith("topic_id") or kafka_type == "uuid":
            return topic_id
        if kafka_type == "records":
            return records
        if name == "metadata" and kafka_type == "bytes":
            return protocol_metadata
        if name in values:
            got = values[name]
            if isinstance(got, str) and got in names and kafka_type == "string":
                return names[got]
            if isinstance(got, tuple):
                return tuple(names.get(g, g) for g in got)
            if got is None and not optional:
                return () if is_array else _NEUTRAL[kafka_type]
            return got
        return () if is_array else _NEUTRAL[kafka_type]

    def build(entity_type: type, top: bool) -> Any:
        kwargs: dict[str, Any] = {}
        for f in dataclasses.fields(entity_type):
            if top and f.name in overrides:
                kwargs[f.name] = overrides[f.name]
                continue
            kind = classify_field(f)
            optional = is_optional(f)
            if isinstance(kind, (EntityField, EntityTupleField)):
                if f.name in values and values[f.name] is None and optional:
                    kwargs[f.name] = None
                elif f.name in values and values[f.name] == ():
                    kwargs[f.name] = ()
                elif isinstance(kind, EntityTupleField):
                    kwargs[f.name] = () if f.name in _EMPTY_ARRAYS else (build(kind.type_, False),)
                else:
                    kwargs[f.name] = build(kind.type_, False)
                continue
            is_array = isinstance(kind, PrimitiveTupleField)
            if f.name not in values and (f.default is not dataclasses.MISSING):
                continue  # kio's (the spec's) default
            kwargs[f.name] = value(f.name, get_schema_field_type(f), optional, is_array)
        return entity_type(**kwargs)

    unknown = set(overrides) - {f.name for f in dataclasses.fields(body_type)}
    if unknown:
        raise TypeError(f"{body_type.__name__} v{api_version} has no field {', '.join(sorted(unknown))}")
    return build(body_type, True)
