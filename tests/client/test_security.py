"""The client side of security, in process: Kafka client properties (librdkafka's and the Java client's names,
sasl.jaas.config), the TLS context from PEM and PKCS12 stores, and the SASL exchange against the broker side's
mechanisms (kcli.protocol.sasl) answering as a broker's authenticator does."""

from __future__ import annotations

import ssl
from datetime import timedelta

import pytest
from kio.static.constants import EntityType

from kcli.client.security import load_client_security, read_client_properties
from kcli.protocol.sasl import ScramCredential, SaslAuthenticationError, create_server
from kcli.protocol.schema import load_payload_module
from kcli.protocol.security import (
    PLAINTEXT,
    ClientSecurity,
    SaslAuthenticationFailed,
    SaslOutcome,
    SecurityConfigError,
    SecurityProtocol,
    drive,
    jaas_config,
    parse_jaas_config,
    reauth_deadline,
    sasl_exchange,
)
from kcli.tls import client_ssl_context
from security_support import KEY_PASSWORD, STORE_PASSWORD, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


# -- properties -------------------------------------------------------------------------------------------------
def test_librdkafka_names():
    security = ClientSecurity.from_properties({
        "security.protocol": "sasl_ssl", "sasl.mechanisms": "scram-sha-512", "sasl.username": "alice",
        "sasl.password": "alice-secret", "ssl.ca.location": "/tmp/ca.crt"})
    assert security.protocol is SecurityProtocol.SASL_SSL
    assert (security.mechanism, security.username, security.password) == ("SCRAM-SHA-512", "alice", "alice-secret")
    assert security.ssl == {"ssl.ca.location": "/tmp/ca.crt"}
    assert security.warnings == ()
    assert security.describe() == "SASL_SSL (SCRAM-SHA-512 as alice)"


def test_java_names_with_jaas():
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="bob" '
                            'password="p\\"w;d";'})
    assert (security.username, security.password) == ("bob", 'p"w;d')


def test_jaas_gives_plain_mechanism_when_none_is_named():
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.jaas.config": jaas_config("org.apache.kafka.common.security.plain.PlainLoginModule", username="u",
                                        password="p")})
    assert security.mechanism == "PLAIN"


def test_explicit_username_beats_jaas():
    security = ClientSecurity.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "x",
        "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" '
                            'password="p";'})
    assert (security.username, security.password) == ("x", "p")


def test_defaults_are_plaintext():
    assert ClientSecurity.from_properties({}) == PLAINTEXT
    assert PLAINTEXT.plaintext and not PLAINTEXT.protocol.tls and not PLAINTEXT.protocol.sasl


def test_unused_and_unknown_keys_are_warned_about():
    security = ClientSecurity.from_properties({
        "security.protocol": "PLAINTEXT", "sasl.mechanism": "PLAIN", "ssl.ca.location": "ca.crt",
        "client.id": "mine", "sasl.kerberos.service.name": "kafka", "colour": "blue"})
    assert security.protocol is SecurityProtocol.PLAINTEXT
    text = "\n".join(security.warnings)
    assert "the sasl.* settings are not used" in text
    assert "the ssl.* settings are not used" in text
    assert "sasl.kerberos.service.name: not supported" in text
    assert "colour: not a security setting" in text
    assert "client.id" not in text  # a client key kctl takes from its own options


@pytest.mark.parametrize("props,message", [
    ({"security.protocol": "TLS"}, "security.protocol='TLS'"),
    ({"security.protocol": "SASL_SSL"}, "needs sasl.mechanism"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}, "GSSAPI"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "DIGEST-MD5", "sasl.username": "u",
      "sasl.password": "p"}, "sasl.mechanism=DIGEST-MD5"),
    ({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u"},
     "needs a user name and password"),
    ({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": "http"}, "expected https"),
    ({"security.protocol": "SSL", "ssl.truststore.type": "BKS"}, "expected PEM or PKCS12"),
    ({"security.protocol": "SSL", "ssl.certificate.location": "c.pem"}, "go together"),
    ({"security.protocol": "SSL", "enable.ssl.certificate.verification": "maybe"}, "expected true or false"),
    ({"security.protocol": "SSL", "ssl.enabled.protocols": "SSLv3"}, "not a TLS version"),
    ({"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
      "sasl.jaas.config": "ScramLoginModule required username=\"u\""}, "must end with ';'"),
])
def test_bad_values_are_errors_naming_the_key(props, message):
    with pytest.raises(SecurityConfigError, match=message.replace("(", r"\(").replace("*", r"\*")):
        ClientSecurity.from_properties(props)


def test_properties_file_then_overrides(tmp_path):
    path = tmp_path / "client.properties"
    path.write_text("# Kafka's tools read this\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism : PLAIN\n"
                    "sasl.username=alice\nsasl.password=wrong\n")
    assert read_client_properties(path, ["sasl.password=right=really", "sasl.username= bob"]) == {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": " bob",
        "sasl.password": "right=really"}
    security = load_client_security(path, ["sasl.password=right"])
    assert (security.username, security.password) == ("alice", "right")


def test_properties_errors(tmp_path):
    with pytest.raises(SecurityConfigError, match="cannot read the client config file"):
        read_client_properties(tmp_path / "missing.properties")
    with pytest.raises(SecurityConfigError, match="-X expects key=value"):
        read_client_properties(None, ["security.protocol"])


# -- JAAS -------------------------------------------------------------------------------------------------------
def test_jaas_parsing():
    entry = parse_jaas_config('  org.apache.kafka.common.security.scram.ScramLoginModule Required\n'
                              '  username="admin"  password="a b\\\\c"  tokenauth=true ; ')
    assert entry.login_module == "org.apache.kafka.common.security.scram.ScramLoginModule"
    assert entry.flag == "required"
    assert entry.options == {"username": "admin", "password": "a b\\c", "tokenauth": "true"}
    assert parse_jaas_config(jaas_config("M", username='q"uote', password="back\\slash")).options == {
        "username": 'q"uote', "password": "back\\slash"}


@pytest.mark.parametrize("text,message", [
    ('M maybe username="u";', "required"),
    ('M required username;', "is not key"),
    ('M required username="u"', "must end with ';'"),
    ('M required; N required;', "exactly one login module"),
])
def test_jaas_errors(text, message):
    with pytest.raises(SecurityConfigError, match=message):
        parse_jaas_config(text)


# -- TLS --------------------------------------------------------------------------------------------------------
def _check_trusts_broker(context: ssl.SSLContext, pki) -> None:
    """The context verifies the test CA's broker certificate: a TLS handshake in memory with a server context."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pki.path("broker.crt"), pki.path("broker.key"))
    server.verify_mode = ssl.CERT_OPTIONAL
    server.load_verify_locations(pki.ca)
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = context.wrap_bio(c_in, c_out, server_hostname="127.0.0.1")
    peer = server.wrap_bio(s_in, s_out, server_side=True)
    done = set()
    for _ in range(10):
        for name, side, out, into in (("client", client, c_out, s_in), ("server", peer, s_out, c_in)):
            try:
                side.do_handshake()
                done.add(name)
            except ssl.SSLWantReadError:
                pass
            into.write(out.read())
        if done == {"client", "server"}:
            break
    assert done == {"client", "server"}
    return peer.getpeercert()


def test_tls_from_pem_ca_and_client_certificate(pki):
    security = load_client_security(None, ["security.protocol=SSL", f"ssl.ca.location={pki.ca}",
                                           f"ssl.certificate.location={pki.path('alice.crt')}",
                                           f"ssl.key.location={pki.path('alice-enc.key')}",
                                           f"ssl.key.password={KEY_PASSWORD}"])
    context = client_ssl_context(security.ssl)
    assert context.check_hostname and context.verify_mode == ssl.CERT_REQUIRED
    peer = _check_trusts_broker(context, pki)
    assert ("commonName", "alice") in [rdn[0] for rdn in peer["subject"]]  # the client certificate was sent


def test_tls_from_pkcs12_stores(pki):
    security = load_client_security(None, [
        "security.protocol=SSL", f"ssl.truststore.location={pki.path('broker.p12')}", "ssl.truststore.type=PKCS12",
        f"ssl.truststore.password={STORE_PASSWORD}", f"ssl.keystore.location={pki.path('alice.p12')}",
        "ssl.keystore.type=PKCS12", f"ssl.keystore.password={STORE_PASSWORD}"])
    peer = _check_trusts_broker(client_ssl_context(security.ssl), pki)
    assert ("commonName", "alice") in [rdn[0] for rdn in peer["subject"]]


def test_tls_host_name_check_can_be_turned_off(pki):
    security = load_client_security(None, ["security.protocol=SSL", f"ssl.ca.location={pki.ca}",
                                           "ssl.endpoint.identification.algorithm="])
    assert not client_ssl_context(security.ssl).check_hostname


@pytest.mark.parametrize("extra,message", [
    (["ssl.ca.location=/nonexistent/ca.crt"], "/nonexistent/ca.crt"),
    (["ssl.keystore.location={alice.p12}", "ssl.keystore.type=PKCS12", "ssl.keystore.password=wrong"],
     "wrong password"),
    (["ssl.certificate.location={alice.crt}", "ssl.key.location={alice-enc.key}"], "ssl.key.password"),
])
def test_tls_file_problems_are_settings_errors(pki, extra, message):
    extra = [e.replace("{alice.p12}", pki.path("alice.p12")).replace("{alice.crt}", pki.path("alice.crt"))
             .replace("{alice-enc.key}", pki.path("alice-enc.key")) for e in extra]
    with pytest.raises(SecurityConfigError, match=message):
        load_client_security(None, ["security.protocol=SSL", *extra])


# -- the SASL exchange --------------------------------------------------------------------------------------------
class _Users:
    def __init__(self, passwords: dict[str, str]) -> None:
        self.passwords = passwords

    def plain_password(self, username):
        return self.passwords.get(username)

    def scram_credential(self, username, mechanism):
        password = self.passwords.get(username)
        return None if password is None else ScramCredential.from_password(mechanism, password, 4096)


class _Authenticator:
    """A broker's side of SaslHandshake v1 + SaslAuthenticate, with the real mechanisms (kafka-security.md §2.1)."""

    def __init__(self, enabled: tuple[str, ...], users: dict[str, str], lifetime_ms: int = 0) -> None:
        self.enabled, self.users, self.lifetime_ms = enabled, _Users(users), lifetime_ms
        self.server = None
        self.requests: list[tuple[int, int]] = []

    def __call__(self, api_key: int, version: int, body):
        self.requests.append((api_key, version))
        module = load_payload_module(api_key, version, EntityType.response)
        if api_key == 17:
            if body.mechanism not in self.enabled:
                return module.SaslHandshakeResponse(error_code=33, mechanisms=self.enabled)
            self.server = create_server(body.mechanism, self.users)
            return module.SaslHandshakeResponse(error_code=0, mechanisms=self.enabled)
        assert api_key == 36 and self.server is not None
        try:
            challenge = self.server.evaluate(bytes(body.auth_bytes))
        except SaslAuthenticationError as exc:
            return module.SaslAuthenticateResponse(error_code=58, error_message=str(exc), auth_bytes=b"",
                                                   **self._lifetime(version, 0))
        lifetime = self.lifetime_ms if self.server.complete else 0
        return module.SaslAuthenticateResponse(error_code=0, error_message=None, auth_bytes=challenge,
                                               **self._lifetime(version, lifetime))

    @staticmethod
    def _lifetime(version: int, ms: int) -> dict:
        return {} if version == 0 else {"session_lifetime": timedelta(milliseconds=ms)}


def _security(mechanism: str, username: str = "alice", password: str = "alice-secret") -> ClientSecurity:
    return ClientSecurity.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                                           "sasl.username": username, "sasl.password": password})


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_exchange_succeeds(mechanism):
    broker = _Authenticator(("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), {"alice": "alice-secret"}, 60_000)
    outcome = drive(sasl_exchange(_security(mechanism)), broker)
    assert broker.server.complete and broker.server.authorization_id == "alice"
    assert outcome == SaslOutcome(mechanism, 60_000)
    rounds = {"PLAIN": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2}[mechanism]
    assert broker.requests == [(17, 1)] + [(36, 2)] * rounds


def test_sasl_exchange_speaks_the_brokers_version():
    broker = _Authenticator(("PLAIN",), {"alice": "alice-secret"})
    drive(sasl_exchange(_security("PLAIN"), authenticate_version=0), broker)
    assert broker.requests == [(17, 1), (36, 0)]


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_wrong_password_is_refused_with_the_brokers_message(mechanism):
    broker = _Authenticator((mechanism,), {"alice": "alice-secret"})
    with pytest.raises(SaslAuthenticationFailed, match=f"refused {mechanism} authentication as alice: .*error 58"):
        drive(sasl_exchange(_security(mechanism, password="nope"), peer="the broker at b:1"), broker)


def test_sasl_unsupported_mechanism_names_the_enabled_ones():
    broker = _Authenticator(("SCRAM-SHA-256",), {})
    with pytest.raises(SaslAuthenticationFailed, match="does not enable SASL mechanism PLAIN.*enables: SCRAM-SHA-256"):
        drive(sasl_exchange(_security("PLAIN")), broker)


def test_reauthentication_deadline_is_before_the_expiry():
    assert reauth_deadline(100.0, SaslOutcome("PLAIN", 0)) is None
    for _ in range(50):
        deadline = reauth_deadline(100.0, SaslOutcome("PLAIN", 10_000))
        assert 108.5 <= deadline <= 109.0  # 85-95% of the lifetime, as Kafka's clients, and a second before the end
    for _ in range(50):  # a short lifetime: a third of it left, whatever the random point
        assert reauth_deadline(100.0, SaslOutcome("PLAIN", 3000)) == pytest.approx(102.0)
    for _ in range(50):  # a long one: Kafka's point
        assert 100 + 3060 <= reauth_deadline(100.0, SaslOutcome("PLAIN", 3_600_000)) <= 100 + 3420


def test_oauthbearer_unsecured_token():
    security = ClientSecurity.from_properties({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                                               "sasl.oauthbearer.config": "principal=alice scope=a,b",
                                               "enable.sasl.oauthbearer.unsecure.jwt": "true"})
    assert security.token is not None and security.token.endswith(".")
    broker = _Authenticator(("OAUTHBEARER",), {})
    drive(sasl_exchange(security), broker)
    assert broker.server.authorization_id == "alice"


def test_a_scram_server_signature_that_does_not_verify_fails_the_login():
    """SCRAM authenticates the broker too: a server-final message with a wrong signature (a broker that does
    not know the password) is a failed login, even though the broker said yes."""
    import base64

    class Impostor(_Authenticator):
        def __call__(self, api_key, version, body):
            response = super().__call__(api_key, version, body)
            if api_key == 36 and self.server.complete:
                forged = b"v=" + base64.b64encode(bytes(64))
                return type(response)(error_code=0, error_message=None, auth_bytes=forged,
                                      **self._lifetime(version, 0))
            return response

    broker = Impostor(("SCRAM-SHA-512",), {"alice": "alice-secret"})
    with pytest.raises(SaslAuthenticationFailed, match="SCRAM-SHA-512 with the broker failed"):
        drive(sasl_exchange(_security("SCRAM-SHA-512")), broker)
