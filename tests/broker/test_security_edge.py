"""The broker's edge with real clients (issue 25): TLS listeners (client auth none/requested/required, a DN mapping
rule), SASL PLAIN over SASL_PLAINTEXT and SASL_SSL with confluent-kafka, kafka-python and kcat, a wrong password, an
unsupported mechanism, and bad input on secured ports. One standalone broker with five listeners serves the module."""

from __future__ import annotations

import shutil
import socket
import ssl
import struct
import time
import uuid

import pytest

from broker_support import BrokerProcess, free_port, kcat
from security_support import KEY_PASSWORD, STORE_PASSWORD, make_pki

pytestmark = pytest.mark.broker_process

USERS = {"alice": "alice-secret", "admin": "admin-secret"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required username=\"admin\" "
        "password=\"admin-secret\" " + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", "MTLS", "OPT", "REAUTH")}
    tmp = tmp_path_factory.mktemp("security-broker")
    listeners = ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items())
    overrides = [
        f"listeners={listeners}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,"
        "MTLS:SSL,OPT:SSL,REAUTH:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        f"listener.name.reauth.plain.sasl.jaas.config={JAAS}",
        "listener.name.reauth.connections.max.reauth.ms=2000",  # KIP-368
        "listener.name.reauth.sasl.enabled.mechanisms=PLAIN",
        # SSL: a PKCS12 keystore; SASL_SSL: PEM with an encrypted key; MTLS: inline PEM (KIP-651)
        "ssl.keystore.type=PKCS12", f"ssl.keystore.location={pki.path('broker.p12')}",
        f"ssl.keystore.password={STORE_PASSWORD}",
        "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}",
        "listener.name.sasl_ssl.ssl.keystore.type=PEM",
        f"listener.name.sasl_ssl.ssl.keystore.location={pki.path('broker-enc-bundle.pem')}",
        f"listener.name.sasl_ssl.ssl.key.password={KEY_PASSWORD}",
        "listener.name.mtls.ssl.keystore.type=PEM",
        "listener.name.mtls.ssl.keystore.location=",
        "listener.name.mtls.ssl.keystore.certificate.chain=" + pki.text("broker-chain.pem"),
        "listener.name.mtls.ssl.keystore.key=" + pki.text("broker.key"),
        "listener.name.mtls.ssl.client.auth=required",
        "listener.name.opt.ssl.client.auth=requested",
        "ssl.principal.mapping.rules=RULE:^CN=(.*?),OU=test,O=kctl,C=US$/$1/U,DEFAULT",
        "connection.failed.authentication.delay.ms=300",
        "kctl.authentication.timeout.ms=2000",
        "group.initial.rebalance.delay.ms=0",
    ]
    (pki.directory / "broker-enc-bundle.pem").write_text(pki.text("broker-enc.key") + pki.text("broker-chain.pem"))
    process = BrokerProcess(ports["PLAINTEXT"], tmp / "logs", overrides, extra_args=["--log-level", "debug"])
    process.start()
    process.ports = ports  # type: ignore[attr-defined]
    yield process
    process.stop()
    bad = [line for line in process.log().splitlines() if "Traceback" in line or "internal error" in line]
    assert not bad, process.log()[-20000:]


def _addr(broker, name: str) -> str:
    return f"127.0.0.1:{broker.ports[name]}"


def _refused(config: dict) -> list:
    """A confluent-kafka admin client that ``config`` does not let in: the errors it reports (error_cb) once it has
    tried, and it gets no metadata. Waits for the error, not for a metadata request to time out."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list = []
    admin = AdminClient({**config, "error_cb": errors.append})
    deadline = time.monotonic() + 60
    while not errors and time.monotonic() < deadline:
        admin.poll(0.1)
    assert errors, "the client reported no error"
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=1)
    return errors


def _ck_roundtrip(bootstrap: str, settings: dict, topic: str | None = None) -> list[bytes]:
    from confluent_kafka import Consumer, Producer

    topic = topic or f"sec-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": bootstrap, **settings})
    for i in range(3):
        producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         **settings})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.close()
    return got


def _ssl(pki, **extra) -> dict:
    return {"security.protocol": "SSL", "ssl.ca.location": pki.ca, **extra}


def _principal_lines(broker, port: int) -> list[str]:
    return [l for l in broker.log().splitlines() if f"on listener" in l and " is User:" in l]


# -- TLS ----------------------------------------------------------------------------------------------------------
def test_ssl_produce_and_consume_with_confluent_kafka(broker, pki):
    assert _ck_roundtrip(_addr(broker, "SSL"), _ssl(pki)) == [b"v0", b"v1", b"v2"]


def test_metadata_answers_the_listener_the_client_came_in_on(broker, pki):
    from confluent_kafka.admin import AdminClient

    for name, settings in (("PLAINTEXT", {}), ("SSL", _ssl(pki))):
        metadata = AdminClient({"bootstrap.servers": _addr(broker, name), **settings}).list_topics(timeout=30)
        assert [(b.host, b.port) for b in metadata.brokers.values()] == [("127.0.0.1", broker.ports[name])]


def test_client_auth_required_takes_a_certificate_and_maps_the_dn(broker, pki):
    with_cert = _ssl(pki, **{"ssl.certificate.location": pki.path("alice.crt"),
                             "ssl.key.location": pki.path("alice-enc.key"), "ssl.key.password": KEY_PASSWORD})
    assert _ck_roundtrip(_addr(broker, "MTLS"), with_cert) == [b"v0", b"v1", b"v2"]
    # the mapping rule upper-cases the CN: the session's principal
    assert any("is User:ALICE" in l and "listener MTLS" in l for l in broker.log().splitlines())
    # no certificate: the handshake fails (logged with the client's address), nothing is served
    from confluent_kafka.admin import AdminClient

    _refused({"bootstrap.servers": _addr(broker, "MTLS"), **_ssl(pki)})
    assert any("TLS handshake with 127.0.0.1:" in l and "listener MTLS" in l for l in broker.log().splitlines())


def test_client_auth_requested_and_none(broker, pki):
    # requested: a certificate gives its principal, none gives ANONYMOUS
    result = _python_tls_principal(broker, pki, "OPT", cert="bob")
    assert result
    assert any("is User:BOB" in l and "listener OPT" in l for l in broker.log().splitlines())
    assert _python_tls_principal(broker, pki, "OPT", cert=None)
    # none (the SSL listener): a certificate is not even asked for
    assert _python_tls_principal(broker, pki, "SSL", cert="alice")
    ssl_lines = [l for l in broker.log().splitlines() if "listener SSL is User:" in l]
    assert ssl_lines and all("User:ANONYMOUS" in l for l in ssl_lines)


def _python_tls_principal(broker, pki, listener: str, cert: str | None) -> bool:
    """An ApiVersions round trip over TLS with Python's ssl (with or without a client certificate)."""
    context = ssl.create_default_context(cafile=pki.ca)
    if cert:
        context.load_cert_chain(pki.path(f"{cert}.crt"), pki.path(f"{cert}.key"))
    with socket.create_connection(("127.0.0.1", broker.ports[listener]), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as sock:
            sock.sendall(_api_versions_frame())
            return _read_frame(sock) is not None


def test_ssl_with_kcat(broker, pki):
    if not shutil.which("kcat"):
        pytest.skip("kcat is not installed")
    topic = f"kcat-ssl-{uuid.uuid4().hex[:6]}"
    common = ["-b", _addr(broker, "MTLS"), "-X", "security.protocol=SSL", "-X", f"ssl.ca.location={pki.ca}",
              "-X", f"ssl.certificate.location={pki.path('alice.crt')}", "-X", f"ssl.key.location={pki.path('alice.key')}"]
    assert kcat(*common, "-P", "-t", topic, input=b"a\nb\n").returncode == 0
    out = kcat(*common, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert out.returncode == 0 and out.stdout.split() == [b"a", b"b"], out


# -- SASL ---------------------------------------------------------------------------------------------------------
def _plain(protocol: str, pki, user: str = "alice", password: str = "alice-secret") -> dict:
    settings = {"security.protocol": protocol, "sasl.mechanism": "PLAIN", "sasl.username": user,
                "sasl.password": password}
    if protocol == "SASL_SSL":
        settings["ssl.ca.location"] = pki.ca
    return settings


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_plain_with_confluent_kafka(broker, pki, protocol):
    assert _ck_roundtrip(_addr(broker, protocol), _plain(protocol, pki)) == [b"v0", b"v1", b"v2"]
    assert any(f"listener {protocol} is User:alice" in l for l in broker.log().splitlines())


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_plain_with_kafka_python(broker, pki, protocol):
    from kafka import KafkaConsumer, KafkaProducer

    settings = dict(security_protocol=protocol, sasl_mechanism="PLAIN", sasl_plain_username="alice",
                    sasl_plain_password="alice-secret")
    if protocol == "SASL_SSL":
        settings.update(ssl_cafile=pki.ca)
    topic = f"kp-{protocol.lower()}-{uuid.uuid4().hex[:6]}"
    producer = KafkaProducer(bootstrap_servers=_addr(broker, protocol), **settings)
    producer.send(topic, b"kp").get(60)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=_addr(broker, protocol), auto_offset_reset="earliest",
                             consumer_timeout_ms=20000, **settings)
    try:
        assert next(consumer).value == b"kp"  # the first record, not a wait for consumer_timeout_ms after the last
    finally:
        consumer.close()


def test_plain_raw_tokens_of_an_old_client(broker):
    """kafka-python pinned to 0.10.0: SaslHandshake v0, then the PLAIN token raw, without a Kafka header."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=_addr(broker, "SASL_PLAINTEXT"), api_version=(0, 10, 0),
                             security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                             sasl_plain_username="alice", sasl_plain_password="alice-secret")
    producer.send(f"old-{uuid.uuid4().hex[:6]}", b"old").get(60)
    producer.close()
    assert any("SaslHandshake v0, PLAIN with raw tokens" in l for l in broker.log().splitlines())


@pytest.mark.parametrize("protocol", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_plain_with_kcat(broker, pki, protocol):
    if not shutil.which("kcat"):
        pytest.skip("kcat is not installed")
    topic = f"kcat-{protocol.lower()}-{uuid.uuid4().hex[:6]}"
    common = ["-b", _addr(broker, protocol), "-X", f"security.protocol={protocol}", "-X", "sasl.mechanisms=PLAIN",
              "-X", "sasl.username=alice", "-X", "sasl.password=alice-secret"]
    if protocol == "SASL_SSL":
        common += ["-X", f"ssl.ca.location={pki.ca}"]
    assert kcat(*common, "-P", "-t", topic, input=b"x\ny\n").returncode == 0
    out = kcat(*common, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert out.returncode == 0 and out.stdout.split() == [b"x", b"y"], out


def test_wrong_password_fails_after_the_delay(broker, pki):
    """SASL_AUTHENTICATION_FAILED with Kafka's message, sent after connection.failed.authentication.delay.ms, then
    the connection is closed (raw socket, SaslHandshake v1 + SaslAuthenticate v2)."""
    with socket.create_connection(("127.0.0.1", broker.ports["SASL_PLAINTEXT"]), timeout=10) as sock:
        sock.sendall(_frame(17, 1, 1, _string("PLAIN")))
        body = _read_frame(sock)
        assert struct.unpack(">h", body[4:6])[0] == 0
        sock.sendall(_sasl_authenticate_v2(2, b"\x00alice\x00wrong"))
        started = time.monotonic()
        body = _read_frame(sock)
        waited = time.monotonic() - started
        assert body is not None
        error_code = struct.unpack(">h", body[5:7])[0]  # correlation id, tagged fields, then the error code
        assert error_code == 58, body
        assert b"Invalid username or password" in body
        assert waited >= 0.25  # a lower bound only: the configured 300 ms pass before the answer is written
        assert _read_frame(sock) is None  # closed


def test_wrong_password_with_confluent_kafka(broker, pki):
    errors = _refused({"bootstrap.servers": _addr(broker, "SASL_PLAINTEXT"),
                       **_plain("SASL_PLAINTEXT", pki, password="nope")})
    assert any("Invalid username or password" in e.str() for e in errors), errors


def test_wrong_password_with_kafka_python_and_kcat(broker, pki):
    from kafka import KafkaProducer

    with pytest.raises(Exception):  # kafka-python may see only the dropped connection
        KafkaProducer(bootstrap_servers=_addr(broker, "SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                      sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="nope",
                      api_version_auto_timeout_ms=5000, max_block_ms=5000).send("t", b"x").get(5)
    if shutil.which("kcat"):
        out = kcat("-b", _addr(broker, "SASL_PLAINTEXT"), "-X", "security.protocol=SASL_PLAINTEXT",
                   "-X", "sasl.mechanisms=PLAIN", "-X", "sasl.username=alice", "-X", "sasl.password=nope",
                   "-m", "5", "-L", timeout=60)
        assert out.returncode != 0
        assert b"Invalid username or password" in out.stderr, out.stderr[-2000:]


def test_a_mechanism_the_listener_does_not_enable_from_confluent_kafka(broker, pki):
    """The REAUTH listener enables PLAIN only: a SCRAM client is refused (UNSUPPORTED_SASL_MECHANISM)."""
    _refused({"bootstrap.servers": _addr(broker, "REAUTH"), "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "x"})
    assert any("Unsupported SASL mechanism SCRAM-SHA-256" in l for l in broker.log().splitlines())


def test_unsupported_mechanism(broker):
    with socket.create_connection(("127.0.0.1", broker.ports["SASL_PLAINTEXT"]), timeout=10) as sock:
        sock.sendall(_frame(17, 1, 1, _string("GSSAPI")))
        body = _read_frame(sock)
        assert struct.unpack(">h", body[4:6])[0] == 33  # UNSUPPORTED_SASL_MECHANISM
        assert b"PLAIN" in body and b"SCRAM-SHA-256" in body  # the enabled list
        assert _read_frame(sock) is None


def test_scram_credentials_from_alter_user_scram_credentials(broker, pki):
    """A credential made through AlterUserScramCredentials (no authorizer: anyone may) logs in over SASL_PLAINTEXT
    and SASL_SSL with SCRAM-SHA-256 and SCRAM-SHA-512, from confluent-kafka, kafka-python and kcat."""
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": _addr(broker, "PLAINTEXT")})
    for future in admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"carol-pw"),
            UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                         b"carol-pw")]).values():
        future.result(30)
    for protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            settings = {"security.protocol": protocol, "sasl.mechanism": mechanism, "sasl.username": "carol",
                        "sasl.password": "carol-pw", **({"ssl.ca.location": pki.ca} if protocol == "SASL_SSL" else {})}
            assert _ck_roundtrip(_addr(broker, protocol), settings) == [b"v0", b"v1", b"v2"], (protocol, mechanism)
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=_addr(broker, "SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="carol",
                             sasl_plain_password="carol-pw")
    producer.send(f"kp-scram-{uuid.uuid4().hex[:6]}", b"s").get(60)
    producer.close()
    if shutil.which("kcat"):
        out = kcat("-b", _addr(broker, "SASL_PLAINTEXT"), "-X", "security.protocol=SASL_PLAINTEXT",
                   "-X", "sasl.mechanisms=SCRAM-SHA-256", "-X", "sasl.username=carol", "-X", "sasl.password=carol-pw",
                   "-L")
        assert out.returncode == 0, out
    # a wrong SCRAM password: the generic message, which does not say whether the user exists
    _refused({"bootstrap.servers": _addr(broker, "SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
              "sasl.mechanism": "SCRAM-SHA-256", "sasl.username": "carol", "sasl.password": "nope"})
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in broker.log() or "Failed authentication" in \
        broker.log()


def test_oauthbearer_unsecured_token_with_confluent_kafka(broker, pki):
    """KIP-255's unsecured JWS (librdkafka's enable.sasl.oauthbearer.unsecure.jwt): the principal is its sub."""
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "ssl.ca.location": pki.ca,
                "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "principal=oauth-user"}
    assert _ck_roundtrip(_addr(broker, "SASL_SSL"), settings) == [b"v0", b"v1", b"v2"]
    assert any("listener SASL_SSL is User:oauth-user" in l for l in broker.log().splitlines())


def test_reauthentication_keeps_a_client_connected(broker, pki):
    """KIP-368: the REAUTH listener's sessions last 2 s. librdkafka re-authenticates on the same connection
    (SaslHandshake on a ready connection); kafka-python does not and is disconnected, then reconnects."""
    from confluent_kafka import Producer

    settings = _plain("SASL_PLAINTEXT", pki)
    topic = f"reauth-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": _addr(broker, "REAUTH"), **settings})
    deadline = time.monotonic() + 6
    sent = 0
    while time.monotonic() < deadline:
        producer.produce(topic, value=b"r%d" % sent)
        sent += 1
        producer.flush(30)
        time.sleep(0.2)
    assert producer.flush(30) == 0
    assert any("re-authenticated" in l and "User:alice" in l for l in broker.log().splitlines())
    from kafka import KafkaProducer

    kp = KafkaProducer(bootstrap_servers=_addr(broker, "REAUTH"), security_protocol="SASL_PLAINTEXT",
                       sasl_mechanism="PLAIN", sasl_plain_username="alice", sasl_plain_password="alice-secret")
    kp.send(topic, b"a").get(30)
    time.sleep(3)  # past the session's lifetime: re-authenticated, or disconnected and connected again
    kp.send(topic, b"b").get(60)
    kp.close()


def test_the_first_reauthentication_may_come_at_once_and_the_next_not_within_a_second(broker):
    """Kafka's once-a-second limit is between re-authentications (KafkaChannel's lastReauthenticationStartNanos is
    0 until the first): a session that ends within a second of its login (an OAUTHBEARER token about to expire, as
    librdkafka 0142 has them) re-authenticates at once; a SaslHandshake within a second of that re-authentication's
    start is an ordinary request, answered ILLEGAL_SASL_STATE (34)."""
    token = b"\x00alice\x00alice-secret"

    def login(sock, correlation_id: int) -> int:
        sock.sendall(_frame(17, 1, correlation_id, _string("PLAIN")))
        error = struct.unpack(">h", _read_frame(sock)[4:6])[0]
        if error:
            return error
        sock.sendall(_frame(36, 1, correlation_id + 1, struct.pack(">i", len(token)) + token))
        return struct.unpack(">h", _read_frame(sock)[4:6])[0]

    with socket.create_connection(("127.0.0.1", broker.ports["REAUTH"]), timeout=10) as sock:
        assert login(sock, 1) == 0
        assert login(sock, 3) == 0  # at once: the first re-authentication
        assert login(sock, 5) == 34  # within a second of it
        sock.sendall(_api_versions_frame())
        assert _read_frame(sock) is not None  # still connected, still authenticated


def test_a_v0_client_is_disconnected_after_its_session_expires(broker):
    """SaslAuthenticate v0 carries no lifetime: the broker enforces it anyway, closing the connection at the first
    request after the expiry without answering it (kafka-security.md §2.2)."""
    with socket.create_connection(("127.0.0.1", broker.ports["REAUTH"]), timeout=10) as sock:
        sock.sendall(_frame(17, 1, 1, _string("PLAIN")))
        assert struct.unpack(">h", _read_frame(sock)[4:6])[0] == 0
        token = b"\x00alice\x00alice-secret"
        sock.sendall(_frame(36, 0, 2, struct.pack(">i", len(token)) + token))
        assert struct.unpack(">h", _read_frame(sock)[4:6])[0] == 0
        sock.sendall(_api_versions_frame())
        assert _read_frame(sock) is not None  # within the session
        time.sleep(2.5)
        sock.sendall(_api_versions_frame())
        assert _read_frame(sock) is None
    assert any("session of User:alice on listener REAUTH expired" in l for l in broker.log().splitlines())


# -- bad input ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("listener,payload", [
    ("SASL_PLAINTEXT", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),  # garbage first packet (size prefix 'GET ')
    ("SASL_PLAINTEXT", struct.pack(">i", 600_000) + b"x" * 100),  # a SASL token above 512 KiB
    ("SASL_PLAINTEXT", struct.pack(">i", 12) + b"\x00\x03\x00\x0c\x00\x00\x00\x01\xff\xff\x00\x00"),  # Metadata first
    ("SASL_PLAINTEXT", bytes.fromhex("160301020001000001fc0303") + b"\x00" * 40),  # a TLS ClientHello
    ("SASL_SSL", b"\x00\x00\x00\x0e" + b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff" + b"\x00" * 4),  # plaintext on TLS
    ("SSL", b"\x00\x00\x00\x0e" + b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff" + b"\x00" * 4),
])
def test_bad_input_closes_the_connection_and_the_broker_serves_on(broker, pki, listener, payload):
    with socket.create_connection(("127.0.0.1", broker.ports[listener]), timeout=10) as sock:
        sock.sendall(payload)
        sock.settimeout(10)
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if listener.endswith("SSL") and data:
            assert data[:1] in (b"\x15", b"\x16")  # a TLS alert or record, never a Kafka answer
        else:
            assert data == b""
    assert _ck_roundtrip(_addr(broker, "SASL_PLAINTEXT"), _plain("SASL_PLAINTEXT", pki))


def test_a_handshake_that_never_finishes_is_closed(broker, pki):
    for listener in ("SSL", "SASL_PLAINTEXT"):
        with socket.create_connection(("127.0.0.1", broker.ports[listener]), timeout=10) as sock:
            sock.sendall(b"\x00")  # a first byte, then nothing (kctl.authentication.timeout.ms=2000)
            sock.settimeout(60)  # closed by the broker after 2 s; a socket.timeout here fails the test
            assert sock.recv(100) == b""
    assert _python_tls_principal(broker, pki, "SSL", cert=None)


# -- raw frames -----------------------------------------------------------------------------------------------------
def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def _frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    payload = struct.pack(">hhih", api_key, version, correlation_id, -1) + body
    return struct.pack(">i", len(payload)) + payload


def _sasl_authenticate_v2(correlation_id: int, token: bytes) -> bytes:
    # flexible header v2: client id (nullable string, int16) + tagged fields; compact bytes; tagged fields
    payload = (struct.pack(">hhih", 36, 2, correlation_id, -1) + b"\x00" + _uvarint(len(token) + 1) + token + b"\x00")
    return struct.pack(">i", len(payload)) + payload


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _api_versions_frame() -> bytes:
    return _frame(18, 0, 7, b"")


def _read_frame(sock) -> bytes | None:
    header = b""
    while len(header) < 4:
        try:
            chunk = sock.recv(4 - len(header))
        except (ConnectionResetError, ssl.SSLError):
            return None
        if not chunk:
            return None
        header += chunk
    (size,) = struct.unpack(">i", header)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def test_describe_configs_hides_the_secrets(broker):
    from confluent_kafka.admin import AdminClient, ConfigResource

    admin = AdminClient({"bootstrap.servers": _addr(broker, "PLAINTEXT")})
    configs = admin.describe_configs([ConfigResource("broker", "0")])[ConfigResource("broker", "0")].result(30)
    for key in ("ssl.keystore.password", "listener.name.sasl_ssl.ssl.key.password",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config"):
        if key in configs:
            assert configs[key].is_sensitive and configs[key].value is None, configs[key]
    assert "alice-secret" not in repr({k: v.value for k, v in configs.items()})
    assert "changeit" not in repr({k: v.value for k, v in configs.items()})
