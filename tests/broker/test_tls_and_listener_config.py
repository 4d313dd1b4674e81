"""Listener security settings (prefix resolution, JAAS, inter-broker listener), TLS contexts from PEM and PKCS12 on
both ends with the client-auth modes, and ssl.principal.mapping.rules (Kafka's SslPrincipalMapperTest cases). In
process: handshakes run through memory BIOs."""

from __future__ import annotations

import ssl

import pytest

from kcli.broker.config import ConfigError, load_config
from kcli.broker.security import ANONYMOUS, KafkaPrincipal
from kcli.broker.security.listener_config import all_listener_security, parse_jaas_config
from kcli.broker.security.principal_mapper import SslPrincipalMapper
from kcli.broker.security.tls import principal_from_certificate, server_ssl_context, subject_dn
from kcli.tls import TlsConfigError, client_ssl_context
from security_support import KEY_PASSWORD, STORE_PASSWORD, dn, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


# -- configuration -------------------------------------------------------------------------------------------------
def _config(*overrides: str):
    return load_config(None, list(overrides))


def test_per_listener_and_per_mechanism_prefixes_override_the_broker_wide_keys(pki):
    config = _config(
        "listeners=PLAINTEXT://127.0.0.1:9092,INTERNAL://127.0.0.1:9093,EXTERNAL://127.0.0.1:9094",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL,EXTERNAL:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.external.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        'listener.name.external.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule '
        'required user_alice="a-pw" user_bob=b-pw;',
        "connections.max.reauth.ms=1000", "listener.name.external.scram-sha-256.connections.max.reauth.ms=7000",
        f"ssl.keystore.location={pki.path('broker.p12')}", "ssl.keystore.type=PKCS12",
        f"ssl.keystore.password={STORE_PASSWORD}", "ssl.client.auth=required",
        "connection.failed.authentication.delay.ms=0",
    )
    security = all_listener_security(config)
    internal, external = security["INTERNAL"], security["EXTERNAL"]
    assert internal.mechanisms == ("SCRAM-SHA-512",) and internal.tls and internal.sasl
    assert internal.ssl.client_auth == "none"  # KIP-684: only listener.name.internal.ssl.client.auth would count
    assert external.mechanisms == ("PLAIN", "SCRAM-SHA-256") and not external.tls
    assert external.plain_users() == {"alice": "a-pw", "bob": "b-pw"}
    assert dict(external.reauth_ms) == {"PLAIN": 1000, "SCRAM-SHA-256": 7000}
    assert external.failed_authentication_delay_ms == 0
    assert security["PLAINTEXT"].ssl is None and not security["PLAINTEXT"].sasl
    assert config.unknown == []


def test_ssl_listener_takes_the_global_client_auth(pki):
    config = _config("listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
                     f"ssl.keystore.location={pki.path('broker.p12')}", f"ssl.keystore.password={STORE_PASSWORD}",
                     "ssl.client.auth=requested", "listener.name.ssl.ssl.principal.mapping.rules=RULE:^CN=(.*?),.*$/$1/")
    ssl_listener = all_listener_security(config)["SSL"]
    assert ssl_listener.ssl.client_auth == "requested"
    assert ssl_listener.ssl.principal_mapping_rules == "RULE:^CN=(.*?),.*$/$1/"
    assert ssl_listener.ssl.keystore_type == "JKS"  # Kafka's default: PKCS12 content is read as PKCS12


def test_inter_broker_listener():
    config = _config("listeners=PLAINTEXT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093",
                     "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,REPLICATION:PLAINTEXT",
                     "inter.broker.listener.name=replication")
    assert config.inter_broker_listener_name == "REPLICATION"
    assert config.inter_broker_security_protocol == "PLAINTEXT"
    assert _config().inter_broker_listener_name == "PLAINTEXT"


@pytest.mark.parametrize("overrides,message", [
    (["listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093", "ssl.keystore.location=/x",
      "ssl.principal.mapping.rules=RULE:x/y/LU"],
     "listener SSL: ssl.principal.mapping.rules: Invalid rule"),
    (["listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093", "ssl.keystore.location=/x",
      "ssl.client.auth=always"], "listener SSL: Invalid value 'always' for configuration ssl.client.auth"),
    (["listeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093", "sasl.enabled.mechanisms=PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config=Foo required a=b; Bar required c=d;"],
     "contains 2 login modules, should be 1 module"),
])
def test_unusable_listener_settings_name_the_listener(overrides, message):
    with pytest.raises(ConfigError, match=message):
        _config(*overrides)


def test_jaas_parser():
    entries = parse_jaas_config('org.a.B required  username="ad min" password=x\nuser_q="a\\"b";')
    assert len(entries) == 1
    assert entries[0].login_module == "org.a.B" and entries[0].control_flag == "required"
    assert dict(entries[0].options) == {"username": "ad min", "password": "x", "user_q": 'a"b'}
    for bad in ("org.a.B required", "org.a.B maybe;", "org.a.B required a=;"):
        with pytest.raises(ConfigError):
            parse_jaas_config(bad)


# -- TLS contexts and handshakes ----------------------------------------------------------------------------------
def _settings(pki, **changes):
    from kcli.broker.security.listener_config import SslSettings

    base = dict(keystore_type="PKCS12", keystore_location=pki.path("broker.p12"), keystore_password=STORE_PASSWORD,
                truststore_type="PEM", truststore_location=pki.ca)
    base.update(changes)
    return SslSettings(**base)


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> bytes | None:
    """A TLS handshake through memory BIOs; the peer certificate the server saw (DER) or None."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    s = server.wrap_bio(s_in, s_out, server_side=True)
    c = client.wrap_bio(c_in, c_out, server_hostname="localhost")
    done = {"s": False, "c": False}
    for _ in range(20):
        for name, end in (("c", c), ("s", s)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            # TLS 1.3: the server's verdict on the client certificate arrives after the client's handshake
            try:
                c.write(b"x")
                s_in.write(c_out.read())
                s.read(1)
            except ssl.SSLWantReadError:
                pass
            return s.getpeercert(binary_form=True)
    raise AssertionError("handshake did not finish")


@pytest.mark.parametrize("keystore", ["pkcs12", "pem-file-encrypted", "pem-inline", "pkcs12-as-default-jks"])
def test_server_context_from_each_keystore_kind(pki, keystore):
    settings = {
        "pkcs12": _settings(pki),
        "pem-file-encrypted": _settings(pki, keystore_type="PEM", keystore_location=pki.path("bundle.pem"),
                                        key_password=KEY_PASSWORD),
        "pem-inline": _settings(pki, keystore_type="PEM", keystore_location=None,
                                keystore_certificate_chain=pki.text("broker-chain.pem"),
                                keystore_key=pki.text("broker.key")),
        "pkcs12-as-default-jks": _settings(pki, keystore_type="JKS"),
    }[keystore]
    (pki.directory / "bundle.pem").write_text(pki.text("broker-enc.key") + pki.text("broker-chain.pem"))
    server = server_ssl_context(settings, "SSL")
    assert _handshake(server, client_ssl_context({"ssl.ca.location": pki.ca})) is None


def test_bad_keystores_are_config_errors_naming_the_listener(pki):
    (pki.directory / "bundle.pem").write_text(pki.text("broker-enc.key") + pki.text("broker-chain.pem"))
    (pki.directory / "fake.jks").write_bytes(b"\xfe\xed\xfe\xed" + b"\x00" * 40)
    cases = [
        (_settings(pki, keystore_password="wrong"), "wrong password"),
        (_settings(pki, keystore_type="PEM", keystore_location=pki.path("bundle.pem")), "ssl.key.password"),
        (_settings(pki, keystore_location=pki.path("fake.jks")), "JKS store"),
        (_settings(pki, keystore_location=pki.path("missing.p12")), "cannot read"),
        (_settings(pki, enabled_protocols="SSLv3"), "unknown protocol SSLv3"),
    ]
    for settings, message in cases:
        with pytest.raises(ConfigError, match=f"listener EXTERNAL: .*{message}"):
            server_ssl_context(settings, "EXTERNAL")


@pytest.mark.parametrize("client_auth,with_cert,expected", [
    ("none", True, None), ("none", False, None),
    ("requested", True, dn("alice")), ("requested", False, None),
    ("required", True, dn("alice")), ("required", False, "fails"),
])
def test_client_auth_modes(pki, client_auth, with_cert, expected):
    server = server_ssl_context(_settings(pki, client_auth=client_auth), "SSL")
    props = {"ssl.ca.location": pki.ca}
    if with_cert:
        props.update({"ssl.certificate.location": pki.path("alice.crt"), "ssl.key.location": pki.path("alice-enc.key"),
                      "ssl.key.password": KEY_PASSWORD})
    client = client_ssl_context(props)
    if expected == "fails":
        with pytest.raises(ssl.SSLError):
            _handshake(server, client)
        return
    der = _handshake(server, client)
    assert (subject_dn(der) if der else None) == expected


def test_a_certificate_from_another_ca_is_refused(pki):
    server = server_ssl_context(_settings(pki, client_auth="requested"), "SSL")
    client = client_ssl_context({"ssl.ca.location": pki.ca, "ssl.certificate.location": pki.path("stranger.crt"),
                                 "ssl.key.location": pki.path("stranger.key")})
    with pytest.raises(ssl.SSLError):
        _handshake(server, client)


def test_client_context_from_java_properties(pki):
    """kafka-console-*'s --command-config style: PKCS12 truststore and keystore."""
    server = server_ssl_context(_settings(pki, client_auth="required"), "SSL")
    (pki.directory / "truststore.p12").write_bytes(_truststore(pki))
    client = client_ssl_context({"ssl.truststore.location": pki.path("truststore.p12"),
                                 "ssl.truststore.type": "PKCS12", "ssl.truststore.password": STORE_PASSWORD,
                                 "ssl.keystore.location": pki.path("alice.p12"), "ssl.keystore.type": "PKCS12",
                                 "ssl.keystore.password": STORE_PASSWORD})
    assert subject_dn(_handshake(server, client)) == dn("alice")
    # the host name is checked by default (ssl.endpoint.identification.algorithm=https), not with ""
    assert client.check_hostname
    assert not client_ssl_context({"ssl.ca.location": pki.ca,
                                   "ssl.endpoint.identification.algorithm": ""}).check_hostname


def test_client_context_refuses_unreadable_settings(pki):
    with pytest.raises(TlsConfigError, match="cannot read"):
        client_ssl_context({"ssl.ca.location": pki.path("nope.pem")})
    with pytest.raises(TlsConfigError, match="both"):
        client_ssl_context({"ssl.ca.location": pki.ca, "ssl.certificate.location": pki.path("alice.crt")})


def _truststore(pki) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

    ca = x509.load_pem_x509_certificate((pki.directory / "ca.crt").read_bytes())
    return pkcs12.serialize_key_and_certificates(None, None, None, [ca], BestAvailableEncryption(STORE_PASSWORD.encode()))


# -- ssl.principal.mapping.rules (SslPrincipalMapperTest) -----------------------------------------------------------
def test_mapping_rules_as_kafka_applies_them():
    mapper = SslPrincipalMapper.from_rules(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT"]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"
    assert SslPrincipalMapper.from_rules(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT").name(
        "CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


@pytest.mark.parametrize("rules,expected", [
    ("", "[]"), ("DEFAULT", "[DEFAULT]"), ("RULE://", "[RULE:/]"), ("RULE:/.*/", "[RULE:/.*]"),
    ("RULE:/.*/L", "[RULE:/.*/L]"), ("RULE://,DEFAULT", "[RULE:/, DEFAULT]"),
    ("  RULE:// ,  DEFAULT  ", "[RULE:/, DEFAULT]"), ("  RULE:   /     / ,  DEFAULT  ", "[RULE:   /     , DEFAULT]"),
    ("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ", "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]"),
    (",   , , ,      , , ,   ", "[]"), (",,RULE://,,,DEFAULT,,", "[RULE:/, DEFAULT]"),
    ("RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
     "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]"),
])
def test_rules_splitting(rules, expected):
    assert str(SslPrincipalMapper.from_rules(rules)) == f"SslPrincipalMapper(rules = {expected})"


@pytest.mark.parametrize("rules", ["default", "DEFAUL", "DEFAULT/L", "DEFAULT/U",
                                   "RULE:CN=(.*?),OU=ServiceUsers.*/$1", "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/",
                                   "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U", "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
                                   "RULE:^CN=(.*?),OU=ServiceUsers.*$/U", "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU"])
def test_invalid_rules(rules):
    with pytest.raises(ValueError):
        SslPrincipalMapper.from_rules(rules)


def test_no_rule_applies_fails_and_no_certificate_is_anonymous(pki):
    mapper = SslPrincipalMapper.from_rules("RULE:^CN=admin,.*$/admin/")
    with pytest.raises(LookupError, match="No rules apply to CN=alice,OU=test,O=kctl,C=US"):
        mapper.name(dn("alice"))
    assert principal_from_certificate(None, mapper) == ANONYMOUS
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    der = x509.load_pem_x509_certificate((pki.directory / "alice.crt").read_bytes()).public_bytes(Encoding.DER)
    assert principal_from_certificate(der, SslPrincipalMapper.from_rules("DEFAULT")) == KafkaPrincipal(
        "User", "CN=alice,OU=test,O=kctl,C=US")


def test_inter_broker_client_properties(pki):
    from kcli.broker.security.listener_config import inter_broker_client_properties

    config = _config(
        "listeners=CLIENT://127.0.0.1:9092,REPLICATION://127.0.0.1:9093",
        "listener.security.protocol.map=CLIENT:SASL_PLAINTEXT,REPLICATION:SASL_SSL",
        "inter.broker.listener.name=REPLICATION", "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
        'listener.name.client.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule '
        'required user_a="b";',
        'listener.name.client.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule '
        'required user_a="b";',
        'listener.name.replication.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule '
        'required user_a="b";',
        'listener.name.replication.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.'
        'ScramLoginModule required username="broker" password="broker-pw";',
        f"ssl.keystore.location={pki.path('broker.p12')}", f"ssl.keystore.password={STORE_PASSWORD}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}")
    props = inter_broker_client_properties(config)
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert (props["sasl.username"], props["sasl.password"]) == ("broker", "broker-pw")
    assert props["ssl.truststore.location"] == pki.ca
    client_ssl_context(props)  # usable as it is
    with pytest.raises(ConfigError, match="sasl.mechanism.inter.broker.protocol must be included"):
        _config("listeners=PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9093",
                "inter.broker.listener.name=SASL_PLAINTEXT", "sasl.enabled.mechanisms=SCRAM-SHA-256")


def test_a_keystore_that_does_not_load_stops_the_config(pki):
    with pytest.raises(ConfigError, match=r"listener SSL: cannot read ssl.keystore .* \(wrong password\?\)"):
        _config("listeners=PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093",
                f"ssl.keystore.location={pki.path('broker.p12')}", "ssl.keystore.password=nope")
