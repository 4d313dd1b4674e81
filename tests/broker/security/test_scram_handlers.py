"""DescribeUserScramCredentials (50) / AlterUserScramCredentials (51) in process: Kafka's validation and errors
(ZkAdminManager), the credential cache the SASL authenticator reads, the standalone broker's local store."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

from kio.schema.alter_user_scram_credentials.v0 import request as alter_req
from kio.schema.describe_user_scram_credentials.v0 import request as describe_req
from kio.schema.errors import ErrorCode

from inprocess_broker import running_broker, run
from kcli.broker.handlers import scram as scram_handlers
from kcli.broker.handlers.common import RequestContext
from kcli.broker.security.local_store import FILE_NAME, LocalMetadataStore
from kcli.protocol import ApiKey
from kcli.protocol.sasl import ScramCredential, create_client, create_server

SHA256, SHA512 = 1, 2


def upsert(name, mechanism=SHA256, password="secret", iterations=8192, salt=b"salt-of-" + b"x" * 8):
    algorithm = "sha256" if mechanism == SHA256 else "sha512"
    salted = hashlib.pbkdf2_hmac(algorithm, password.encode(), salt, iterations) if mechanism in (1, 2) else b"x"
    return alter_req.ScramCredentialUpsertion(name=name, mechanism=mechanism, iterations=iterations, salt=salt,
                                              salted_password=salted)


def delete(name, mechanism=SHA256):
    return alter_req.ScramCredentialDeletion(name=name, mechanism=mechanism)


async def alter(broker, upsertions=(), deletions=()):
    response = await broker.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, alter_req.AlterUserScramCredentialsRequest(
        upsertions=tuple(upsertions), deletions=tuple(deletions)))
    return [(r.user, r.error_code, r.error_message) for r in response.results]


async def describe(broker, users=None):
    response = await broker.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                                 describe_req.DescribeUserScramCredentialsRequest(
                                     users=None if users is None else tuple(describe_req.UserName(name=u)
                                                                            for u in users)))
    return response


def infos(result):
    return sorted((int(c.mechanism), int(c.iterations)) for c in result.credential_infos)


def authenticate(services, mechanism, user, password):
    server = create_server(mechanism, services.credentials)
    client = create_client(mechanism, username=user, password=password)
    token = client.initial()
    while not server.complete:
        token = client.evaluate(server.evaluate(token))
    return server.authorization_id


def test_alter_then_describe_and_authenticate(tmp_path):
    async def body():
        async with running_broker(tmp_path / "logs") as broker:
            assert await alter(broker, [upsert("alice"), upsert("alice", SHA512, iterations=4096),
                                        upsert("bob", password="bob-pw")]) == [
                ("alice", ErrorCode.none, None), ("bob", ErrorCode.none, None)]
            everyone = await describe(broker)
            assert everyone.error_code == ErrorCode.none
            assert [(r.user, r.error_code, infos(r)) for r in everyone.results] == [
                ("alice", ErrorCode.none, [(1, 8192), (2, 4096)]), ("bob", ErrorCode.none, [(1, 8192)])]
            services = broker.server.services
            assert authenticate(services, "SCRAM-SHA-256", "alice", "secret") == "alice"
            assert authenticate(services, "SCRAM-SHA-512", "alice", "secret") == "alice"
            # deleting one mechanism: the other stays, and the deleted one no longer authenticates
            assert await alter(broker, deletions=[delete("alice", SHA512)]) == [("alice", ErrorCode.none, None)]
            assert services.credentials.scram_credential("alice", "SCRAM-SHA-512") is None
            named = await describe(broker, ["alice", "bob"])
            assert [(r.user, infos(r)) for r in named.results] == [("alice", [(1, 8192)]), ("bob", [(1, 8192)])]
            # the standalone store: /config/users/<user> in the first log dir, Kafka's JSON
            document = json.loads((tmp_path / "logs" / FILE_NAME).read_text())
            stored = json.loads(document["nodes"]["/config/users/alice"]["data"])
            assert list(stored) == ["version", "config"] and list(stored["config"]) == ["SCRAM-SHA-256"]
            credential = ScramCredential.from_config_string(stored["config"]["SCRAM-SHA-256"])
            assert credential == ScramCredential.from_password("SCRAM-SHA-256", "secret", 8192,
                                                               salt=b"salt-of-xxxxxxxx")
        # a restarted broker loads them from its store
        async with running_broker(tmp_path / "logs") as broker:
            assert authenticate(broker.server.services, "SCRAM-SHA-256", "bob", "bob-pw") == "bob"
            assert broker.server.services.credentials.users() == ["alice", "bob"]

    run(body())


def test_alter_validation_as_kafka(tmp_path):
    async def body():
        async with running_broker(tmp_path / "logs") as broker:
            results = await alter(broker, [
                upsert(""), upsert("few", iterations=4095), upsert("many", iterations=16385),
                upsert("mech", mechanism=3), upsert("twice"), upsert("twice"),
                upsert("ok", iterations=16384)], [delete("delmech", mechanism=0), delete("missing")])
            assert results == [
                ("delmech", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
                ("", ErrorCode.unacceptable_credential, "Username must not be empty"),
                ("few", ErrorCode.unacceptable_credential, "Too few iterations"),
                ("many", ErrorCode.unacceptable_credential, "Too many iterations"),
                ("mech", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
                ("twice", ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
                ("missing", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
                ("ok", ErrorCode.none, None),
            ]
            # an upsert and a deletion of the same mechanism are a duplicate too; nothing of that user is written
            assert await alter(broker, [upsert("ok", password="changed")], [delete("ok")]) == [
                ("ok", ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")]
            assert authenticate(broker.server.services, "SCRAM-SHA-256", "ok", "secret") == "ok"
            # an invalid deletion fails the whole user: its upsertion is not written either
            assert await alter(broker, [upsert("ok", SHA512)], [delete("ok")]) == [("ok", ErrorCode.none, None)]
            assert await alter(broker, [upsert("ok", password="changed")], [delete("ok", SHA512), delete("ok", 1)]
                               ) == [("ok", ErrorCode.duplicate_resource,
                                      "A user credential cannot be altered twice in the same request")]
            assert await alter(broker, [upsert("ok", SHA512, password="changed")], [delete("ok", SHA256)]) == [
                ("ok", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")]
            assert authenticate(broker.server.services, "SCRAM-SHA-512", "ok", "secret") == "ok"

    run(body())


def test_describe_errors_as_kafka(tmp_path):
    async def body():
        async with running_broker(tmp_path / "logs") as broker:
            await alter(broker, [upsert("alice")])
            response = await describe(broker, ["alice", "nobody", "", "dup", "dup"])
            assert response.error_code == ErrorCode.none
            assert [(r.user, r.error_code, r.error_message) for r in response.results] == [
                ("alice", ErrorCode.none, None),
                ("nobody", ErrorCode.resource_not_found,
                 "Attempt to describe a user credential that does not exist: nobody"),
                ("", ErrorCode.resource_not_found, "Username must not be empty"),
                ("dup", ErrorCode.duplicate_resource,
                 "Cannot describe SCRAM credentials for the same user twice in a single request: dup"),
            ]
            # an empty list describes everyone, as no list does
            assert [r.user for r in (await describe(broker, [])).results] == ["alice"]
            # a user with only quota keys has no SCRAM credentials
            store = broker.server.services.credentials.store
            store.set("/config/users/quota-only", b'{"version":1,"config":{"producer_byte_rate":"1024"}}')
            assert [r.user for r in (await describe(broker)).results] == ["alice"]
            named = await describe(broker, ["quota-only"])
            assert named.results[0].error_code == ErrorCode.resource_not_found
            # a damaged node is that user's error, not the request's
            store.set("/config/users/bad", b"not json")
            store.set("/config/users/bad-key", b'{"version":1,"config":{"SCRAM-SHA-256":"salt=x"}}')
            named = await describe(broker, ["bad", "bad-key", "alice"])
            assert [(r.user, r.error_code) for r in named.results] == [
                ("bad", ErrorCode.unknown_server_error), ("bad-key", ErrorCode.unknown_server_error),
                ("alice", ErrorCode.none)]
            assert "Credentials not valid" in named.results[1].error_message
        # and a broker with damaged nodes still starts, serving the good users
        async with running_broker(tmp_path / "logs") as broker:
            assert broker.server.services.credentials.users() == ["alice"]

    run(body())


def test_quota_keys_in_the_user_node_are_kept(tmp_path):
    async def body():
        async with running_broker(tmp_path / "logs") as broker:
            store = broker.server.services.credentials.store
            store.set("/config/users/alice", b'{"version":1,"config":{"producer_byte_rate":"1024"}}')
            assert await alter(broker, [upsert("alice")]) == [("alice", ErrorCode.none, None)]
            data, _ = store.get("/config/users/alice")
            config = json.loads(data)["config"]
            assert config["producer_byte_rate"] == "1024" and config["SCRAM-SHA-256"].startswith("salt=")
            assert await alter(broker, deletions=[delete("alice")]) == [("alice", ErrorCode.none, None)]
            assert json.loads(store.get("/config/users/alice")[0]) == {
                "version": 1, "config": {"producer_byte_rate": "1024"}}

    run(body())


def test_user_names_are_sanitized_as_kafka(tmp_path):
    async def body():
        async with running_broker(tmp_path / "logs") as broker:
            assert await alter(broker, [upsert("CN=alice smith,O=kctl*")]) == [
                ("CN=alice smith,O=kctl*", ErrorCode.none, None)]
            store = broker.server.services.credentials.store
            assert store.children("/config/users") == ["CN%3Dalice%20smith%2CO%3Dkctl%2A"]
            assert [r.user for r in (await describe(broker)).results] == ["CN=alice smith,O=kctl*"]

    run(body())


class Deny:
    def __init__(self):
        self.asked = []

    def authorize(self, session, operation, resource_type, name, **kwargs):
        self.asked.append((operation.name, resource_type.name, name))
        return False

    def close(self):
        pass


def test_cluster_authorization(tmp_path):
    async def body():
        async with running_broker(tmp_path / "logs") as broker:
            deny = broker.server.services.authorizer = Deny()
            results = await alter(broker, [upsert("b"), upsert("a")], [delete("b")])
            assert results == [("a", ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
                               ("b", ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")]
            response = await describe(broker, ["a"])
            assert response.error_code == ErrorCode.cluster_authorization_failed
            assert [(r.error_code) for r in response.results] == [ErrorCode.cluster_authorization_failed]
            assert deny.asked == [("ALTER", "CLUSTER", "kafka-cluster"), ("DESCRIBE", "CLUSTER", "kafka-cluster")]
            assert broker.server.services.credentials.users() == []

    run(body())


def test_alter_on_a_cluster_member_that_is_not_the_controller():
    services = SimpleNamespace(clustered=True, controller=SimpleNamespace(is_active=False), authorizer=None,
                               credentials=None)
    ctx = RequestContext(services=services, api_version=0, client_id="t", client_host="127.0.0.1")
    request = alter_req.AlterUserScramCredentialsRequest(upsertions=(upsert("b"), upsert("a")),
                                                         deletions=(delete("a"),))
    response = run(scram_handlers.alter_user_scram_credentials(ctx, request))
    assert [(r.user, r.error_code) for r in response.results] == [("a", ErrorCode.not_controller),
                                                                  ("b", ErrorCode.not_controller)]


def test_local_store_written_by_the_broker_is_kafkas_json(tmp_path):
    """The same document a ZooKeeper node would hold: kcli.zk.scram reads it back through the store interface."""
    from kcli.zk import scram as zk_scram

    store = LocalMetadataStore(tmp_path)
    credential = ScramCredential.from_password("SCRAM-SHA-512", "pw")
    zk_scram.alter_user(store, "alice", upsert={"SCRAM-SHA-512": credential})
    assert zk_scram.read_all(LocalMetadataStore(tmp_path)) == {"alice": {"SCRAM-SHA-512": credential}}
    assert store.get("/config/users/alice")[0] == (
        b'{"version":1,"config":{"SCRAM-SHA-512":"' + credential.to_config_string().encode() + b'"}}')
