"""kctl's own client against a broker process's secured listeners: SASL_PLAINTEXT with re-authentication before
the session expires (KIP-368, connections.max.reauth.ms), SSL with client authentication required (the client's
certificate from PEM files with an encrypted key, or a PKCS12 keystore), and the failures a user meets."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from broker_support import BrokerProcess, free_port
from kcli.client import BrokerAuthenticationError, KafkaClient
from kcli.client.security import load_client_security
from security_support import KEY_PASSWORD, STORE_PASSWORD, make_pki

pytestmark = pytest.mark.broker_process

REAUTH_MS = 1500
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" '
        'user_admin="admin-secret";')


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, pki):
    ports = {"PLAINTEXT": free_port(), "SASL_PLAINTEXT": free_port(), "MTLS": free_port()}
    process = BrokerProcess(ports["PLAINTEXT"], tmp_path_factory.mktemp("secured") / "logs", [
        "listeners=" + ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,MTLS:SSL",
        "sasl.enabled.mechanisms=PLAIN", f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"listener.name.sasl_plaintext.plain.connections.max.reauth.ms={REAUTH_MS}",
        "ssl.keystore.type=PKCS12", f"ssl.keystore.location={pki.path('broker.p12')}",
        f"ssl.keystore.password={STORE_PASSWORD}", "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}",
        "listener.name.mtls.ssl.client.auth=required", "connection.failed.authentication.delay.ms=0",
        "num.partitions=2"])
    process.start()
    process.ports = ports  # type: ignore[attr-defined]
    yield process
    process.stop()
    assert "Traceback" not in process.log(), process.log()[-20000:]


def _kctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kcli", *args], capture_output=True, text=True, timeout=60)


def _at(broker, name: str) -> str:
    return f"127.0.0.1:{broker.ports[name]}"


SASL = ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=PLAIN", "sasl.username=alice",
        "sasl.password=alice-secret"]


def test_kctl_over_sasl_plaintext(broker):
    x = [a for item in SASL for a in ("-X", item)]
    created = _kctl("topics", "create", "sasl-topic", "-b", _at(broker, "SASL_PLAINTEXT"), *x)
    assert created.returncode == 0, created.stderr
    listed = _kctl("topics", "list", "-b", _at(broker, "SASL_PLAINTEXT"), *x)
    assert listed.returncode == 0 and "sasl-topic" in listed.stdout.split(), listed.stderr


def test_the_client_reauthenticates_before_its_session_expires(broker):
    """The broker announces a 1.5 s session; the connection outlives several of them, re-authenticating on its
    own: the same socket keeps answering (the broker closes one whose session expired without answering)."""
    security = load_client_security(None, SASL)
    with KafkaClient(_at(broker, "SASL_PLAINTEXT"), security=security) as client:
        client.metadata([])
        connection = next(iter(client._connections.values()))
        sock = connection._sock
        assert connection._reauth_at is not None  # the broker announced the session's lifetime
        for _ in range(3):
            deadline = connection._reauth_at
            while time.monotonic() < deadline + 0.2:  # past the point where it must re-authenticate
                time.sleep(0.05)
            client.metadata([])
            assert connection._sock is sock, "the connection was not kept"
            assert connection._reauth_at > deadline  # a new session, with a new deadline
    assert "Failed re-authentication" not in broker.log()


def test_wrong_password(broker):
    security = load_client_security(None, [*SASL, "sasl.password=nope"])
    with pytest.raises(BrokerAuthenticationError, match="Invalid username or password"):
        KafkaClient(_at(broker, "SASL_PLAINTEXT"), security=security).connect()


@pytest.mark.parametrize("identity", ["pem", "pkcs12"])
def test_kctl_with_a_client_certificate(broker, pki, tmp_path, identity):
    config = tmp_path / "client.properties"
    lines = ["security.protocol=SSL", f"ssl.ca.location={pki.ca}"]
    if identity == "pem":
        lines += [f"ssl.certificate.location={pki.path('alice.crt')}", f"ssl.key.location={pki.path('alice-enc.key')}",
                  f"ssl.key.password={KEY_PASSWORD}"]
    else:  # the Java client's names
        lines += [f"ssl.keystore.location={pki.path('alice.p12')}", "ssl.keystore.type=PKCS12",
                  f"ssl.keystore.password={STORE_PASSWORD}"]
    config.write_text("\n".join(lines) + "\n")
    listed = _kctl("topics", "list", "-b", _at(broker, "MTLS"), "--command-config", str(config))
    assert listed.returncode == 0, listed.stderr


def test_no_client_certificate_or_an_untrusted_ca(broker, pki):
    refused = _kctl("topics", "list", "-b", _at(broker, "MTLS"), "-X", "security.protocol=SSL",
                    "-X", f"ssl.ca.location={pki.ca}", "--timeout", "5")
    assert refused.returncode != 0 and "Traceback" not in refused.stderr  # the listener requires a certificate
    untrusted = _kctl("topics", "list", "-b", _at(broker, "MTLS"), "-X", "security.protocol=SSL",
                      "-X", f"ssl.ca.location={pki.path('stranger.crt')}")
    assert untrusted.returncode == 1
    assert "TLS handshake with the broker" in untrusted.stderr and "ssl.ca.location" in untrusted.stderr
