"""advertised_versions (the one table ApiVersions is built from), minimal_request, requested_topics."""

from __future__ import annotations

import io
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequestTopic
from kio.serial import entity_reader, entity_writer

from kcli.protocol import (
    SUPPORTED_APIS,
    ApiKey,
    api_versions_response,
    advertised_versions,
    decode_request,
    encode_request,
    minimal_request,
    requested_topics,
)
from kcli.protocol.legacy import request_schema

SERVED = advertised_versions()


def test_advertised_versions_is_the_table():
    listed = advertised_versions()
    assert listed == sorted(listed)
    assert len(listed) == len(set(listed)) == sum(a.max_version - a.min_version + 1 for a in SUPPORTED_APIS.values())
    assert (ApiKey.PRODUCE, 0) in listed and (ApiKey.FETCH, 0) in listed and (ApiKey.CREATE_TOPICS, 1) not in listed


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_response_lists_exactly_the_table(version):
    body = api_versions_response(version=version)
    assert body.error_code == ErrorCode.none
    assert {(ApiKey(int(a.api_key)), v) for a in body.api_keys
            for v in range(a.min_version, a.max_version + 1)} == set(advertised_versions())


@pytest.mark.parametrize("api_key,version", SERVED, ids=lambda x: x.name if isinstance(x, ApiKey) else f"v{x}")
def test_minimal_request_round_trips_every_served_version(api_key, version):
    body = minimal_request(api_key, version, topic="t1", group_id="g1", topic_id=uuid.uuid4(), records=b"")
    assert type(body) is request_schema(api_key, version)
    frame = encode_request(api_key, version, 7, "probe", body)
    request = decode_request(frame[4:])
    assert (request.api_key, request.api_version, request.body, request.trailing_bytes) == (api_key, version, body, 0)


def test_minimal_request_names_the_topic_and_group():
    assert minimal_request(ApiKey.METADATA, 1, topic="a").topics[0].name == "a"
    assert minimal_request(ApiKey.JOIN_GROUP, 5, group_id="g").group_id == "g"
    assert minimal_request(ApiKey.JOIN_GROUP, 5).protocols[0].name == "range"
    assert minimal_request(ApiKey.FIND_COORDINATOR, 4, group_id="g").coordinator_keys == ("g",)
    assert minimal_request(ApiKey.DESCRIBE_GROUPS, 0, group_id="g").groups == ("g",)
    assert minimal_request(ApiKey.PRODUCE, 9, records=b"x").topic_data[0].partition_data[0].records == b"x"
    assert minimal_request(ApiKey.PRODUCE, 9).acks == -1  # a response always comes back
    assert minimal_request(ApiKey.METADATA, 12, topics=None).topics is None
    with pytest.raises(TypeError, match="no field nope"):
        minimal_request(ApiKey.METADATA, 12, nope=1)


@pytest.mark.parametrize("version", range(0, 13))
def test_requested_topics_null_and_empty(version):
    empty = minimal_request(ApiKey.METADATA, version, topics=())
    # v0: empty means all topics; v1+: empty means none.
    assert requested_topics(empty, version) == (None if version == 0 else [])
    named = minimal_request(ApiKey.METADATA, version, topic="a")
    assert requested_topics(named, version) == ["a"]
    if version >= 1:
        assert requested_topics(minimal_request(ApiKey.METADATA, version, topics=None), version) is None


def test_requested_topics_from_a_decoded_request():
    frame = encode_request(ApiKey.METADATA, 0, 1, "c", minimal_request(ApiKey.METADATA, 0, topics=()))
    assert requested_topics(decode_request(frame[4:])) is None
    frame = encode_request(ApiKey.METADATA, 4, 1, "c", minimal_request(ApiKey.METADATA, 4, topics=()))
    assert requested_topics(decode_request(frame[4:])) == []
    with pytest.raises(TypeError):
        requested_topics(minimal_request(ApiKey.METADATA, 4))


def test_requested_topics_by_id():
    topic_id = uuid.uuid4()
    body = minimal_request(ApiKey.METADATA, 12, topics=(MetadataRequestTopic(topic_id=topic_id, name=None),))
    assert requested_topics(body, 12) == [topic_id]


# APIs the broker may come to serve (ACLs, configs, records, SCRAM, cluster): minimal_request takes any key kio knows.
MORE = [(21, 2), (29, 3), (30, 3), (31, 3), (33, 2), (44, 1), (47, 0), (50, 0), (51, 0), (60, 1)]


@pytest.mark.parametrize("api_key,version", MORE)
def test_minimal_request_for_keys_beyond_the_table(api_key, version):
    body = minimal_request(api_key, version, topic="t1")
    out = io.BytesIO()
    entity_writer(type(body))(out, body)
    assert entity_reader(type(body))(out.getvalue(), 0)[0] == body
    if api_key in (33, 44):
        assert body.validate_only  # a probe never rewrites a config


def test_delete_acls_probe_matches_only_its_own_principal():
    [acl_filter] = minimal_request(31, 3, topic="t1").filters
    assert (acl_filter.resource_name_filter, acl_filter.principal_filter) == ("t1", "User:kctl-probe")
