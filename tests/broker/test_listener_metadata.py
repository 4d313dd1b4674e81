"""Metadata answers the endpoints of the listener the request came in on, leaving out brokers without it
(kafka-security.md §1.2, ZkMetadataCache.getAliveBrokerNodes / getPartitionMetadata). In process."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from kcli.protocol import ApiKey
def _cluster_cache():
    import uuid
    from types import SimpleNamespace

    from kcli.broker.metadata_cache import BrokerEndpoint, MetadataCache, PartitionState, TopicMetadata

    cache = MetadataCache(cluster_id="c", controller_id=1)
    both = (("PLAINTEXT", "10.0.0.1", 9092), ("EXTERNAL", "broker1.example", 19092))
    cache.add_broker(BrokerEndpoint(1, "10.0.0.1", 9092, None, both))
    cache.add_broker(BrokerEndpoint(2, "10.0.0.2", 9092, None, (("PLAINTEXT", "10.0.0.2", 9092),)))
    cache.put_topic(TopicMetadata("t", uuid.uuid4(), [PartitionState(0, 1, 0, [1, 2], [1, 2]),
                                                      PartitionState(1, 2, 0, [2, 1], [2, 1])]))
    return SimpleNamespace(metadata=cache, config={"auto.create.topics.enable": False}, authorizer=None)


@pytest.mark.parametrize("version,missing", [(12, ErrorCode.listener_not_found), (5, ErrorCode.leader_not_available)])
def test_metadata_gives_the_endpoints_of_the_request_listener(version, missing):
    import asyncio

    from kio.schema.metadata.v5.request import MetadataRequest as MetadataV5
    from kio.schema.metadata.v5.request import MetadataRequestTopic as TopicV5
    from kio.schema.metadata.v12.request import MetadataRequest as MetadataV12
    from kio.schema.metadata.v12.request import MetadataRequestTopic as TopicV12

    from kcli.broker.kafka_apis import KafkaApis
    from kcli.broker.security import Session

    apis = KafkaApis(_cluster_cache())
    request = (MetadataV12(topics=(TopicV12(name="t", topic_id=None),), allow_auto_topic_creation=False,
                           include_topic_authorized_operations=False) if version == 12 else
               MetadataV5(topics=(TopicV5(name="t"),), allow_auto_topic_creation=False))

    def ask(listener: str):
        return asyncio.run(apis.handle(ApiKey.METADATA, version, request, client_id="c", client_host="h",
                                       session=Session(listener_name=listener)))

    internal = ask("PLAINTEXT")
    assert [(b.node_id, b.host, b.port) for b in internal.brokers] == [(1, "10.0.0.1", 9092), (2, "10.0.0.2", 9092)]
    assert [p.error_code for p in internal.topics[0].partitions] == [ErrorCode.none, ErrorCode.none]
    external = ask("EXTERNAL")
    assert [(b.node_id, b.host, b.port) for b in external.brokers] == [(1, "broker1.example", 19092)]
    # partition 1's leader (broker 2) has no EXTERNAL listener
    assert [p.error_code for p in external.topics[0].partitions] == [ErrorCode.none, missing]
