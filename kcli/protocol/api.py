"""API keys and the version table the broker advertises in ApiVersions (KIP-35), declared once as data.

Protocol guide: https://kafka.apache.org/protocol#protocol_api_keys
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Final


class ApiKey(IntEnum):
    """The APIs the broker serves or sends, numbered as in Kafka's ``ApiKeys``.

    Keys 4-7 are ZooKeeper mode's inter-broker APIs (controller to broker, and ControlledShutdown broker to
    controller), gone from Kafka 4: their schemas are ours (``kcli.protocol.schema``), their versions are in
    ``INTER_BROKER_APIS`` and they are advertised only once the broker serves them (``SUPPORTED_APIS``).
    """

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    LEADER_AND_ISR = 4
    STOP_REPLICA = 5
    UPDATE_METADATA = 6
    CONTROLLED_SHUTDOWN = 7
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66


@dataclass(frozen=True, slots=True)
class SupportedApi:
    """One row of the ApiVersions table, plus where the message turns flexible (KIP-482)."""

    min_version: int
    max_version: int
    # "flexibleVersions": "N+" in the message's JSON spec: compact strings and arrays,
    # tagged fields, and request header v2 / response header v1 from N on.
    flexible_since: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.min_version <= version <= self.max_version


# The release whose ApiVersions table we mirror (kafka-python's recorded Kafka 3.7 table).
# Kafka-python finds Fetch v16 in it and infers 3.7; librdkafka finds Produce v3/Fetch v4
# (MsgVer2), Produce v7/Fetch v10 (zstd), InitProducerId (idempotence) and the group APIs.
KAFKA_RELEASE: Final = (3, 7)

# Maxima are Kafka 3.7's (kio, generated from newer specs, knows them all). Minima are Kafka 3.7's for
# Produce, Fetch, ListOffsets, OffsetCommit, OffsetFetch and OffsetForLeaderEpoch: kio lacks their versions below
# Kafka 4.x's KIP-896 baseline, and kcli.protocol.legacy declares those layouts itself (Produce v0-v2, Fetch v0-v3,
# ListOffsets v0, OffsetCommit v0-v1, OffsetFetch v0, OffsetForLeaderEpoch v0-v1), so every advertised version is
# served. Other minima are raised to the
# lowest version kio can decode (the KIP-896 baseline): nothing a message-format-v2 client sends is lost.
# librdkafka < 2.10 enables gzip/snappy/lz4 only if Produce v0 is advertised (KAFKA-18659).
SUPPORTED_APIS: Final[Mapping[ApiKey, SupportedApi]] = MappingProxyType({
    #                                     min  max  flexible since
    ApiKey.PRODUCE:           SupportedApi(0, 10, 9),
    ApiKey.FETCH:             SupportedApi(0, 16, 12),
    ApiKey.LIST_OFFSETS:      SupportedApi(0, 8, 6),
    ApiKey.METADATA:          SupportedApi(0, 12, 9),
    ApiKey.OFFSET_COMMIT:     SupportedApi(0, 9, 8),
    ApiKey.OFFSET_FETCH:      SupportedApi(0, 9, 6),
    ApiKey.FIND_COORDINATOR:  SupportedApi(0, 4, 3),
    ApiKey.JOIN_GROUP:        SupportedApi(0, 9, 6),
    ApiKey.HEARTBEAT:         SupportedApi(0, 4, 4),
    ApiKey.LEAVE_GROUP:       SupportedApi(0, 5, 4),
    ApiKey.SYNC_GROUP:        SupportedApi(0, 5, 4),
    ApiKey.DESCRIBE_GROUPS:   SupportedApi(0, 5, 5),
    ApiKey.LIST_GROUPS:       SupportedApi(0, 4, 3),
    ApiKey.API_VERSIONS:      SupportedApi(0, 3, 3),
    # SASL (KIP-43, KIP-152): answered by a SASL listener's authenticator before any other request; the
    # handshake's version is never bumped (KAFKA-9577), so it never turns flexible
    ApiKey.SASL_HANDSHAKE:    SupportedApi(0, 1, 99),
    ApiKey.SASL_AUTHENTICATE: SupportedApi(0, 2, 2),
    ApiKey.CREATE_TOPICS:     SupportedApi(2, 7, 5),
    ApiKey.DELETE_TOPICS:     SupportedApi(1, 6, 4),
    ApiKey.INIT_PRODUCER_ID:  SupportedApi(0, 4, 2),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: SupportedApi(0, 4, 4),  # KIP-101, KIP-320 (consumers validate positions)
    ApiKey.ADD_PARTITIONS_TO_TXN: SupportedApi(0, 4, 3),  # v4+: brokers' batched, verify-only form (KIP-890)
    ApiKey.ADD_OFFSETS_TO_TXN: SupportedApi(0, 3, 3),
    ApiKey.END_TXN:           SupportedApi(0, 3, 3),
    ApiKey.WRITE_TXN_MARKERS: SupportedApi(1, 1, 1),  # Kafka 3.7 has v0 too; kio starts at v1
    ApiKey.TXN_OFFSET_COMMIT: SupportedApi(0, 3, 3),
    ApiKey.DESCRIBE_CONFIGS:  SupportedApi(1, 4, 4),
    ApiKey.ALTER_REPLICA_LOG_DIRS: SupportedApi(0, 2, 2),  # KIP-113; v0 (v1's layout) from kcli.protocol.legacy
    ApiKey.DESCRIBE_LOG_DIRS: SupportedApi(1, 4, 2),  # Kafka 3.7 has v0 too; kio starts at v1
    ApiKey.CREATE_PARTITIONS: SupportedApi(0, 3, 2),
    ApiKey.DELETE_GROUPS:     SupportedApi(0, 2, 2),
    ApiKey.ELECT_LEADERS:     SupportedApi(0, 2, 2),
    ApiKey.DELETE_RECORDS:    SupportedApi(0, 2, 2),
    ApiKey.DESCRIBE_ACLS:     SupportedApi(1, 3, 2),
    ApiKey.CREATE_ACLS:       SupportedApi(1, 3, 2),
    ApiKey.DELETE_ACLS:       SupportedApi(1, 3, 2),
    ApiKey.ALTER_CONFIGS:     SupportedApi(0, 2, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: SupportedApi(0, 1, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: SupportedApi(0, 0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: SupportedApi(0, 0, 0),
    ApiKey.OFFSET_DELETE:     SupportedApi(0, 0, 99),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: SupportedApi(0, 1, 1),  # KIP-546 (issue 26: client quotas)
    ApiKey.ALTER_CLIENT_QUOTAS: SupportedApi(0, 1, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: SupportedApi(0, 0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: SupportedApi(0, 0, 0),
    ApiKey.DESCRIBE_CLUSTER:  SupportedApi(0, 1, 0),
    ApiKey.DESCRIBE_PRODUCERS: SupportedApi(0, 0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: SupportedApi(0, 0, 0),
    ApiKey.LIST_TRANSACTIONS: SupportedApi(0, 0, 0),
})

# The inter-broker APIs, at the versions of the IBP 2.8-IV1 profile (kafka-cluster.md §5.1) that
# kcli.protocol.schema declares from Kafka 3.7's specs. Not advertised: the broker adds them to
# SUPPORTED_APIS when it serves them. ControlledShutdown v0 (a request header without client_id) is not declared.
INTER_BROKER_APIS: Final[Mapping[ApiKey, SupportedApi]] = MappingProxyType({
    #                                       min  max  flexible since
    ApiKey.LEADER_AND_ISR:      SupportedApi(5, 5, 4),
    ApiKey.STOP_REPLICA:        SupportedApi(3, 3, 2),
    ApiKey.UPDATE_METADATA:     SupportedApi(7, 7, 6),
    ApiKey.CONTROLLED_SHUTDOWN: SupportedApi(1, 3, 3),
})

def fetch_record_magic(fetch_version: int) -> int:
    """The newest record format a Fetch of ``fetch_version`` can read: magic 0 up to v1, magic 1 (KIP-32
    timestamps) for v2-v3, record batches v2 from v4 on (KIP-98); Kafka's KafkaApis.handleFetchRequest."""
    if fetch_version <= 1:
        return 0
    return 1 if fetch_version <= 3 else 2


def advertised_versions() -> list[tuple[ApiKey, int]]:
    """Every (api, version) the broker advertises in ApiVersions, in key then version order.

    ``SUPPORTED_APIS`` is the one table: the ApiVersions response (``codec.api_versions_response``)
    and the request decoder both read it, and every version in it is served.
    """
    return [(key, version) for key, api in sorted(SUPPORTED_APIS.items())
            for version in range(api.min_version, api.max_version + 1)]


def is_supported(api_key: int, api_version: int) -> bool:
    """True when ``api_version`` of ``api_key`` is inside the advertised range."""
    try:
        return api_version in SUPPORTED_APIS[ApiKey(api_key)]
    except (ValueError, KeyError):
        return False


def is_flexible(api_key: ApiKey | int, api_version: int) -> bool:
    """True from the message's first flexible version on (also past our maximum: ApiVersions v4+)."""
    key = ApiKey(api_key)
    api = SUPPORTED_APIS.get(key) or INTER_BROKER_APIS[key]
    return api_version >= api.flexible_since


def flexible_request_header(api_key: ApiKey | int, api_version: int) -> bool:
    """Whether the request header is v2 (tagged fields) rather than v1; v0 is ControlledShutdown's alone."""
    return is_flexible(api_key, api_version)


def request_header_version(api_key: ApiKey | int, api_version: int) -> int:
    """2 for flexible versions, else 1; 0 (no client_id) for ControlledShutdown v0 alone."""
    if ApiKey(api_key) is ApiKey.CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    return 2 if flexible_request_header(api_key, api_version) else 1


def response_header_version(api_key: ApiKey | int, api_version: int) -> int:
    """Response header v1 for flexible versions, except ApiVersions: always v0 (KIP-511).

    A client that does not yet know the broker's ApiVersions must still be able to read
    the correlation id of the answer, whatever version it asked for.
    """
    if ApiKey(api_key) is ApiKey.API_VERSIONS:
        return 0
    return 1 if is_flexible(api_key, api_version) else 0
