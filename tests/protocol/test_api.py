"""The advertised version table: a real Kafka release's, what kio can decode, what clients need."""

from __future__ import annotations

import pytest
from kafka.producer.kafka import KafkaProducer
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS, infer_broker_version_from_api_versions
from kio.index import KioIndexError
from kio.index import load_request_schema as kio_load_request_schema

from kcli.protocol import (
    KAFKA_RELEASE,
    LEGACY_VERSIONS,
    SUPPORTED_APIS,
    ApiKey,
    flexible_request_header,
    is_flexible,
    advertised_versions,
    is_supported,
    request_header_version,
    request_schema,
    response_header_version,
    response_schema,
)
from kcli.protocol.api import INTER_BROKER_APIS

# The APIs issue #3 asks for, by Kafka's numbering.
WANTED = {18, 3, 0, 1, 2, 10, 11, 14, 12, 13, 8, 9, 15, 16, 42, 19, 20, 37, 32, 22,
          21, 29, 30, 31, 33, 44, 47, 50, 51, 60,  # admin APIs clients call (DeleteRecords ... DescribeCluster)
          43,  # ElectLeaders (issue 13: preferred and unclean leader elections on request)
          45, 46,  # Alter/ListPartitionReassignments (KIP-455), served by the controller (issue 13)
          23,  # OffsetForLeaderEpoch: followers truncate with it (KIP-101), consumers validate positions (KIP-320)
          24, 25, 26, 27, 28,  # transactions (KIP-98, issue 14): AddPartitions/AddOffsets/EndTxn/WriteTxnMarkers/TxnOffsetCommit
          17, 36,  # SaslHandshake, SaslAuthenticate (issue 25: SASL listeners)
          61, 65, 66,  # DescribeProducers, DescribeTransactions, ListTransactions (KIP-664, issue 14)
          35,  # DescribeLogDirs (KIP-113; issue 27: kctl log-dirs describe)
          34,  # AlterReplicaLogDirs (KIP-113; issue 27: moving a replica between log dirs, kctl reassign)
          48, 49}  # Describe/AlterClientQuotas (KIP-546; issue 26: client quotas)
INTER_BROKER = {4, 5, 6, 7}  # ZooKeeper mode's controller APIs: LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown
# The APIs whose schemas are kio's (the inter-broker ones are ours: Kafka 4 removed them).
KIO_APIS = sorted(set(SUPPORTED_APIS) - set(INTER_BROKER_APIS))


def _kio_versions(api_key: int) -> list[int]:
    found = []
    for version in range(0, 40):
        try:
            kio_load_request_schema(api_key, version)
        except KioIndexError:
            continue
        found.append(version)
    return found


def _advertised() -> dict[int, tuple[int, int]]:
    return {int(k): (a.min_version, a.max_version) for k, a in SUPPORTED_APIS.items()}


def test_exactly_the_wanted_apis():
    assert {int(k) for k in ApiKey} == WANTED | INTER_BROKER
    assert {int(k) for k in INTER_BROKER_APIS} == INTER_BROKER
    assert set(SUPPORTED_APIS) | set(INTER_BROKER_APIS) == set(ApiKey)


@pytest.mark.parametrize("api_key", KIO_APIS, ids=lambda k: k.name)
def test_table_is_the_release_table_within_kio(api_key):
    release_min, release_max = BROKER_API_VERSIONS[KAFKA_RELEASE][api_key]
    kio = _kio_versions(api_key)
    supported = SUPPORTED_APIS[api_key]
    assert supported.max_version == min(release_max, kio[-1])
    if api_key in LEGACY_VERSIONS:
        # Kafka 3.7's minimum: the versions below kio's are declared in kcli.protocol.legacy, up to kio's first.
        low, high = LEGACY_VERSIONS[api_key]
        assert supported.min_version == release_min == low == 0
        assert high + 1 == kio[0]
    else:
        assert supported.min_version == max(release_min, kio[0])


@pytest.mark.parametrize("api_key", KIO_APIS, ids=lambda k: k.name)
def test_raised_minima_are_kafka_4_baseline(api_key):
    # KIP-896 removed the same versions kio lacks; Kafka 4.1 is kafka-python's latest 4.x table. The APIs with
    # declared legacy versions go below it, to Kafka 3.7's minimum.
    expected = 0 if api_key in LEGACY_VERSIONS else BROKER_API_VERSIONS[(4, 1)][api_key][0]
    assert SUPPORTED_APIS[api_key].min_version == expected


def test_every_advertised_version_has_a_schema():
    for api_key, version in advertised_versions():
        assert request_schema(api_key, version) is not None, (api_key, version)
        assert response_schema(api_key, version) is not None, (api_key, version)


@pytest.mark.parametrize(
    ("api_key", "version"),
    sorted({(k, v) for k, a in [*SUPPORTED_APIS.items(), *INTER_BROKER_APIS.items()]
            for v in range(a.min_version, a.max_version + 1)}),
    ids=str,
)
def test_flexibility_and_header_versions_agree_with_the_schemas(api_key, version):
    # kio's schemas, the declared legacy ones (kcli.protocol.legacy) and ours for the inter-broker APIs.
    request = request_schema(api_key, version)
    response = response_schema(api_key, version)
    assert is_flexible(api_key, version) is request.__flexible__ is response.__flexible__
    assert flexible_request_header(api_key, version) is (request.__header_schema__.__version__ == 2)
    assert request_header_version(api_key, version) == request.__header_schema__.__version__
    assert response_header_version(api_key, version) == response.__header_schema__.__version__


def test_api_versions_response_header_is_always_v0():
    # KIP-511: also for versions we do not serve, so the client can read the correlation id.
    for version in range(0, 10):
        assert response_header_version(ApiKey.API_VERSIONS, version) == 0
    assert request_header_version(ApiKey.API_VERSIONS, 4) == 2
    assert request_header_version(ApiKey.API_VERSIONS, 2) == 1


def test_is_supported():
    assert is_supported(18, 3)
    assert not is_supported(18, 4)
    assert is_supported(17, 1) and not is_supported(17, 2)  # SaslHandshake v0-v1 (issue 25)
    assert is_supported(1, 3)  # Fetch v3: below the KIP-896 baseline, served from kcli.protocol.legacy
    assert not is_supported(19, 1)  # CreateTopics v1: below the baseline, not served
    assert is_supported(0, 0)


def test_kafka_python_infers_the_release_and_message_format_v2():
    inferred = infer_broker_version_from_api_versions(_advertised())
    assert inferred == KAFKA_RELEASE
    assert KafkaProducer.max_usable_produce_magic(inferred) == 2
    assert inferred >= (2, 1)  # kafka-python allows zstd from 2.1


# librdkafka's feature map (src/rdkafka_feature.c, shared/docs/peers.md 1b): a feature is on
# when every listed (api, min, max) overlaps the broker's advertised range.
LIBRDKAFKA_FEATURES = {
    "ApiVersion": [(18, 0, 0)],
    "MsgVer2": [(0, 3, 3), (1, 4, 4)],
    "BrokerGroupCoordinator": [(10, 0, 0)],
    "BrokerBalancedConsumer": [(10, 0, 0), (8, 1, 2), (9, 1, 1), (11, 0, 0), (14, 0, 0), (12, 0, 0), (13, 0, 0)],
    "OffsetTime": [(2, 1, 1)],
    "IdempotentProducer": [(22, 0, 0)],
    "ZSTD": [(0, 7, 7), (1, 10, 10)],
    # librdkafka < 2.10 checks Produce v0..v0 before it compresses with gzip/snappy/lz4.
    "compression (gzip, snappy, lz4)": [(0, 0, 0)],
}


@pytest.mark.parametrize("feature", sorted(LIBRDKAFKA_FEATURES))
def test_librdkafka_enables(feature):
    advertised = _advertised()
    for api_key, low, high in LIBRDKAFKA_FEATURES[feature]:
        broker_min, broker_max = advertised[api_key]
        assert low <= broker_max and high >= broker_min, (feature, api_key)
