"""The session's principal reaches the authorizer (issue 25): a TLS client's DN through ssl.principal.mapping.rules,
a SASL client's authorization id, PLAINTEXT's ANONYMOUS; one `kctl broker run` with AclAuthorizer, no ACLs and
allow.everyone.if.no.acl.found=false, so that only super users are let in."""

from __future__ import annotations

import pytest

from broker_support import BrokerProcess, free_port
from security_support import STORE_PASSWORD, make_pki

pytestmark = pytest.mark.broker_process

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-pw" '
        'user_mallory="mallory-pw";')


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("principals")
    pki = make_pki(tmp / "pki")
    ports = {n: free_port() for n in ("PLAINTEXT", "SSL", "SASL_SSL")}
    process = BrokerProcess(ports["PLAINTEXT"], tmp / "logs", [
        "listeners=" + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "authorizer.class.name=kafka.security.authorizer.AclAuthorizer",
        # ALICE: the SSL listener's rule upper-cases the CN; alice: the SASL user
        "super.users=User:ALICE;User:alice", "allow.everyone.if.no.acl.found=false",
        f"ssl.keystore.location={pki.path('broker.p12')}", f"ssl.keystore.password={STORE_PASSWORD}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}", "ssl.client.auth=required",
        "ssl.principal.mapping.rules=RULE:^CN=([a-z]+),OU=test,O=kctl,C=US$/$1/U,DEFAULT",
        "sasl.enabled.mechanisms=PLAIN", f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        "group.initial.rebalance.delay.ms=0"])
    process.start()
    process.ports, process.pki = ports, pki  # type: ignore[attr-defined]
    yield process
    assert process.stop() == 0, process.log()


def _create_acl(bootstrap: str, settings: dict) -> str | None:
    """CreateAcls (ALTER on the cluster, checked by the authorizer alone): None when the ACL was created, else the
    error's name."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType, \
        ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
    binding = AclBinding(ResourceType.TOPIC, "unrelated", ResourcePatternType.LITERAL, "User:nobody", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    try:
        admin.create_acls([binding], request_timeout=20)[binding].result(timeout=30)
    except KafkaException as exc:
        return exc.args[0].name()
    return None


def _tls(broker, cert: str) -> dict:
    pki = broker.pki
    return {"security.protocol": "SSL", "ssl.ca.location": pki.ca, "ssl.certificate.location": pki.path(f"{cert}.crt"),
            "ssl.key.location": pki.path(f"{cert}.key")}


def _sasl(broker, user: str, password: str) -> dict:
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": broker.pki.ca, "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": password}


def test_certificate_dn_mapped_to_a_super_user(broker):
    ssl_bootstrap = f"127.0.0.1:{broker.ports['SSL']}"
    assert _create_acl(ssl_bootstrap, _tls(broker, "alice")) is None  # User:ALICE, a super user
    assert _create_acl(ssl_bootstrap, _tls(broker, "bob")) == "CLUSTER_AUTHORIZATION_FAILED"  # User:BOB


def test_sasl_authorization_id_is_the_principal(broker):
    sasl_bootstrap = f"127.0.0.1:{broker.ports['SASL_SSL']}"
    assert _create_acl(sasl_bootstrap, _sasl(broker, "alice", "alice-pw")) is None
    assert _create_acl(sasl_bootstrap, _sasl(broker, "mallory", "mallory-pw")) == "CLUSTER_AUTHORIZATION_FAILED"


def test_plaintext_is_anonymous(broker):
    assert _create_acl(f"127.0.0.1:{broker.ports['PLAINTEXT']}", {}) == "CLUSTER_AUTHORIZATION_FAILED"
