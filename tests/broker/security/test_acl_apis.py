"""CreateAcls / DescribeAcls / DeleteAcls handlers in process (kafka-security.md 4.4): results in request order,
per-binding INVALID_REQUEST, the CLUSTER checks, SECURITY_DISABLED without an authorizer, the standalone store."""

from __future__ import annotations

import json

from kio.schema.errors import ErrorCode

from inprocess_broker import running_broker, run
from kcli.broker.security import KafkaPrincipal, Session
from kcli.broker.security.local_store import FILE_NAME
from kcli.protocol import ApiKey
from kcli.protocol.acl import AclOperation as Op, AclPermissionType as Perm, PatternType as PT, ResourceType as RT
from kcli.protocol.schema import load_request_schema

ADMIN = Session(KafkaPrincipal("User", "admin"), client_address="127.0.0.1")
ALICE = Session(KafkaPrincipal("User", "alice"), client_address="127.0.0.1")
SECURED = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"}


def creation(version, rtype=RT.TOPIC, name="orders", pattern=PT.LITERAL, principal="User:alice", host="*",
             op=Op.READ, perm=Perm.ALLOW):
    module = load_request_schema(ApiKey.CREATE_ACLS, version)
    creation_type = __import__(module.__module__, fromlist=["AclCreation"]).AclCreation
    return creation_type(resource_type=rtype, resource_name=name, resource_pattern_type=pattern, principal=principal,
                         host=host, operation=op, permission_type=perm)


def create_request(version, *creations):
    return load_request_schema(ApiKey.CREATE_ACLS, version)(creations=tuple(creations))


def describe_request(version, rtype=RT.ANY, name=None, pattern=PT.ANY, principal=None, host=None, op=Op.ANY,
                     perm=Perm.ANY):
    return load_request_schema(ApiKey.DESCRIBE_ACLS, version)(
        resource_type_filter=rtype, resource_name_filter=name, pattern_type_filter=pattern, principal_filter=principal,
        host_filter=host, operation=op, permission_type=perm)


def delete_request(version, *filters):
    module = load_request_schema(ApiKey.DELETE_ACLS, version)
    filter_type = __import__(module.__module__, fromlist=["DeleteAclsFilter"]).DeleteAclsFilter
    return module(filters=tuple(filter_type(
        resource_type_filter=f.get("rtype", RT.ANY), resource_name_filter=f.get("name"),
        pattern_type_filter=f.get("pattern", PT.ANY), principal_filter=f.get("principal"),
        host_filter=f.get("host"), operation=f.get("op", Op.ANY), permission_type=f.get("perm", Perm.ANY))
        for f in filters))


async def call(broker, key, version, request, session=ADMIN):
    return await broker.apis.handle(key, version, request, client_id="test", client_host="127.0.0.1",
                                    session=session)


def test_without_an_authorizer_every_acl_api_is_security_disabled(tmp_path):
    async def scenario():
        async with running_broker(tmp_path / "logs") as broker:
            created = await call(broker, ApiKey.CREATE_ACLS, 2, create_request(2, creation(2), creation(2)))
            assert [r.error_code for r in created.results] == [ErrorCode.security_disabled] * 2
            described = await call(broker, ApiKey.DESCRIBE_ACLS, 2, describe_request(2))
            assert described.error_code == ErrorCode.security_disabled
            deleted = await call(broker, ApiKey.DELETE_ACLS, 2, delete_request(2, {}))
            assert [r.error_code for r in deleted.filter_results] == [ErrorCode.security_disabled]
    run(scenario())


def test_create_describe_delete_round_trip_in_request_order(tmp_path):
    async def scenario():
        async with running_broker(tmp_path / "logs", **SECURED) as broker:
            for version in (1, 2, 3):
                created = await call(broker, ApiKey.CREATE_ACLS, version, create_request(
                    version, creation(version), creation(version, name=""), creation(version, op=Op.WRITE),
                    creation(version, rtype=RT.CLUSTER, name="other-cluster", op=Op.ALTER),
                    creation(version, name="a/b"), creation(version, name="ord", pattern=PT.PREFIXED),
                    creation(version, rtype=RT.CLUSTER, name="kafka-cluster", op=Op.IDEMPOTENT_WRITE),
                    creation(version, op=Op.ANY)))
                assert [r.error_code for r in created.results] == [
                    ErrorCode.none, ErrorCode.invalid_request, ErrorCode.none, ErrorCode.invalid_request,
                    ErrorCode.invalid_request, ErrorCode.none, ErrorCode.none, ErrorCode.invalid_request]
                assert "kafka-cluster" in created.results[3].error_message
            described = await call(broker, ApiKey.DESCRIBE_ACLS, 2, describe_request(2, RT.TOPIC, "orders",
                                                                                     PT.MATCH))
            assert described.error_code == ErrorCode.none
            got = {(r.resource_name, r.pattern_type, a.operation) for r in described.resources for a in r.acls}
            assert got == {("orders", PT.LITERAL, Op.READ), ("orders", PT.LITERAL, Op.WRITE),
                           ("ord", PT.PREFIXED, Op.READ)}
            by_principal = await call(broker, ApiKey.DESCRIBE_ACLS, 3, describe_request(3, principal="User:bob"))
            assert by_principal.resources == ()
            deleted = await call(broker, ApiKey.DELETE_ACLS, 2, delete_request(
                2, {"rtype": RT.TOPIC, "name": "orders", "pattern": PT.LITERAL, "op": Op.WRITE},
                {"rtype": RT.CLUSTER}, {"rtype": RT.GROUP}))
            assert [[(m.resource_name, m.operation, m.error_code) for m in r.matching_acls]
                    for r in deleted.filter_results] == [[("orders", Op.WRITE, ErrorCode.none)],
                                                         [("kafka-cluster", Op.IDEMPOTENT_WRITE, ErrorCode.none)],
                                                         []]
            left = await call(broker, ApiKey.DESCRIBE_ACLS, 2, describe_request(2))
            assert {(r.resource_name, a.operation) for r in left.resources for a in r.acls} == {
                ("orders", Op.READ), ("ord", Op.READ)}
        # standalone: the ACLs are in the first log dir, in Kafka's JSON, and a restart keeps them
        document = json.loads((tmp_path / "logs" / FILE_NAME).read_text())
        assert json.loads(document["nodes"]["/kafka-acl/Topic/orders"]["data"]) == {
            "version": 1, "acls": [{"principal": "User:alice", "permissionType": "Allow", "operation": "Read",
                                    "host": "*"}]}
        async with running_broker(tmp_path / "logs", **SECURED) as broker:
            again = await call(broker, ApiKey.DESCRIBE_ACLS, 2, describe_request(2))
            assert len(again.resources) == 2
            assert broker.server.services.authorizer.authorize(ALICE, Op.READ, RT.TOPIC, "orders")
    run(scenario())


def test_the_acl_apis_need_describe_or_alter_on_the_cluster(tmp_path):
    async def scenario():
        async with running_broker(tmp_path / "logs", **SECURED) as broker:
            created = await call(broker, ApiKey.CREATE_ACLS, 2, create_request(2, creation(2)), session=ALICE)
            assert [r.error_code for r in created.results] == [ErrorCode.cluster_authorization_failed]
            described = await call(broker, ApiKey.DESCRIBE_ACLS, 2, describe_request(2), session=ALICE)
            assert described.error_code == ErrorCode.cluster_authorization_failed
            deleted = await call(broker, ApiKey.DELETE_ACLS, 2, delete_request(2, {}, {}), session=ALICE)
            assert [r.error_code for r in deleted.filter_results] == [ErrorCode.cluster_authorization_failed] * 2
            # DESCRIBE on the cluster (or ALTER, which implies it) lets alice describe, not create
            await call(broker, ApiKey.CREATE_ACLS, 2, create_request(
                2, creation(2, rtype=RT.CLUSTER, name="kafka-cluster", op=Op.ALTER, principal="User:alice")))
            described = await call(broker, ApiKey.DESCRIBE_ACLS, 2, describe_request(2), session=ALICE)
            assert described.error_code == ErrorCode.none and len(described.resources) == 1
            created = await call(broker, ApiKey.CREATE_ACLS, 2, create_request(2, creation(2)), session=ALICE)
            assert [r.error_code for r in created.results] == [ErrorCode.none]
    run(scenario())


def test_a_filter_with_unknown_elements_is_invalid(tmp_path):
    async def scenario():
        async with running_broker(tmp_path / "logs", **SECURED) as broker:
            described = await call(broker, ApiKey.DESCRIBE_ACLS, 2, describe_request(2, op=Op.UNKNOWN))
            assert described.error_code == ErrorCode.invalid_request
            deleted = await call(broker, ApiKey.DELETE_ACLS, 2, delete_request(2, {"perm": Perm.UNKNOWN}, {}))
            assert [r.error_code for r in deleted.filter_results] == [ErrorCode.invalid_request, ErrorCode.none]
    run(scenario())


def test_authorizer_class_names():
    import pytest

    from kcli.broker.config import ConfigError, build_config

    for name in ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer"):
        assert build_config({"authorizer.class.name": name})["authorizer.class.name"] == name
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        build_config({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer"})
    with pytest.raises(ConfigError, match="super.users"):
        build_config({"super.users": "admin"})
    assert build_config({})["allow.everyone.if.no.acl.found"] is False


def test_a_damaged_standalone_store_stops_the_start(tmp_path):
    import pytest

    from kcli.broker.security.local_store import StoreError

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / FILE_NAME).write_text("{torn")

    async def scenario():
        async with running_broker(tmp_path / "logs", **SECURED):
            pass

    with pytest.raises(StoreError, match="damaged"):
        run(scenario())

    async def without_authorizer():  # nothing reads the store: the broker starts
        async with running_broker(tmp_path / "logs"):
            pass

    run(without_authorizer())
