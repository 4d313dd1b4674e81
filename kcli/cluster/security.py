"""What `kctl cluster run --security` adds: a test CA and a certificate per broker (Python's ``cryptography``),
SCRAM passwords for the brokers' inter-broker user and an ``admin`` user, the brokers' SASL_SSL settings and the
client settings files to use against the cluster.

Everything lives in ``<data dir>/security/`` and is kept across restarts (the CA, the keys, the passwords), so
clients configured once keep working. The files holding keys or passwords are readable by their owner only.
Not for production: the CA key sits next to the certificates it signs.

    ca.crt, ca.key               the CA (CN=kctl-cluster-ca)
    broker-<id>.pem              a broker's key, certificate and the CA (an ssl.keystore of type PEM, KIP-651)
    credentials.json             the SCRAM passwords of ``broker`` and ``admin``
    client.properties            Kafka's Java tools (--command-config) and kctl's --command-config
    librdkafka.properties        kcat -F and confluent-kafka's settings (librdkafka's property names)
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kcli.processes import LOOPBACK

MECHANISM = "SCRAM-SHA-512"
BROKER_USER = "broker"
ADMIN_USER = "admin"
LISTENER = "SASL_SSL"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
VALID_DAYS = 365


@dataclass(frozen=True)
class ClusterSecurity:
    """The secured cluster's files and credentials (under ``directory``)."""

    directory: Path
    passwords: dict[str, str]

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def client_properties(self) -> Path:
        return self.directory / "client.properties"

    @property
    def librdkafka_properties(self) -> Path:
        return self.directory / "librdkafka.properties"

    def keystore(self, broker_id: int) -> Path:
        return self.directory / f"broker-{broker_id}.pem"

    def client_settings(self, *, java: bool) -> dict[str, str]:
        """The admin user's client settings: Java's names (``java``) or librdkafka's."""
        settings = {"security.protocol": LISTENER, "sasl.mechanism": MECHANISM}
        if java:
            settings["sasl.jaas.config"] = jaas(ADMIN_USER, self.passwords[ADMIN_USER])
            settings["ssl.truststore.type"] = "PEM"
            settings["ssl.truststore.location"] = str(self.ca)
        else:
            settings["sasl.username"] = ADMIN_USER
            settings["sasl.password"] = self.passwords[ADMIN_USER]
            settings["ssl.ca.location"] = str(self.ca)
        return settings

    def broker_settings(self, broker_id: int, port: int) -> dict[str, str]:
        """A broker's server.properties keys: one SASL_SSL listener for clients and brokers alike, SCRAM-SHA-512
        between brokers as ``broker`` (a super user with ``admin``, once an authorizer decides: ``super_users``)."""
        return {
            "listeners": f"{LISTENER}://{LOOPBACK}:{port}",
            "security.inter.broker.protocol": LISTENER,
            "sasl.enabled.mechanisms": f"{MECHANISM},SCRAM-SHA-256",
            "sasl.mechanism.inter.broker.protocol": MECHANISM,
            f"listener.name.{LISTENER.lower()}.{MECHANISM.lower()}.sasl.jaas.config":
                jaas(BROKER_USER, self.passwords[BROKER_USER]),
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.keystore(broker_id)),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
        }

    @property
    def super_users(self) -> str:
        return f"User:{BROKER_USER};User:{ADMIN_USER}"

    def to_json(self) -> dict[str, Any]:
        return {"protocol": LISTENER, "mechanism": MECHANISM, "ca": str(self.ca), "user": ADMIN_USER,
                "password": self.passwords[ADMIN_USER], "client_properties": str(self.client_properties),
                "librdkafka_properties": str(self.librdkafka_properties)}


def jaas(user: str, password: str) -> str:
    escaped = password.replace("\\", "\\\\").replace('"', '\\"')
    return f'{SCRAM_LOGIN_MODULE} required username="{user}" password="{escaped}";'


def prepare(data_dir: Path, broker_ids: list[int]) -> ClusterSecurity:
    """Make (or reuse) the CA, each broker's certificate, the passwords and the client settings files."""
    directory = data_dir / "security"
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca_key, ca_cert = _load_or_make_ca(directory)
    for broker_id in broker_ids:
        path = directory / f"broker-{broker_id}.pem"
        if not path.exists():
            key, cert = _leaf(f"kctl-broker-{broker_id}", ca_key, ca_cert)
            _write_private(path, _key_pem(key) + _cert_pem(cert) + _cert_pem(ca_cert))
    credentials = directory / "credentials.json"
    try:
        passwords = json.loads(credentials.read_text())
    except FileNotFoundError:
        passwords = {}
    for user in (BROKER_USER, ADMIN_USER):
        passwords.setdefault(user, secrets.token_urlsafe(18))
    _write_private(credentials, (json.dumps(passwords, indent=1) + "\n").encode())
    security = ClusterSecurity(directory, passwords)
    for path, java in ((security.client_properties, True), (security.librdkafka_properties, False)):
        # plain key=value lines: kcat -F reads them as written (no Java escapes)
        lines = [f"# the admin user of the kctl cluster in {data_dir}; written by kctl cluster run --security"]
        lines += [f"{k}={v}" for k, v in security.client_settings(java=java).items()]
        _write_private(path, ("\n".join(lines) + "\n").encode())
    return security


def _load_or_make_ca(directory: Path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key_path, cert_path = directory / "ca.key", directory / "ca.crt"
    if key_path.exists() and cert_path.exists():
        return (serialization.load_pem_private_key(key_path.read_bytes(), None),
                x509.load_pem_x509_certificate(cert_path.read_bytes()))
    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("kctl-cluster-ca")
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    _write_private(key_path, _key_pem(key))
    cert_path.write_bytes(_cert_pem(cert))
    return key, cert


def _leaf(cn: str, ca_key, ca_cert):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            # a broker is a TLS server to clients and a TLS client to the other brokers
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            # clients check the host name (ssl.endpoint.identification.algorithm=https): the brokers listen on
            # 127.0.0.1, and "localhost" for clients that bootstrap with it
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address(LOOPBACK))]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return key, cert


def _name(cn: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kctl"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _key_pem(key) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _cert_pem(cert) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _write_private(path: Path, data: bytes) -> None:
    """Owner-only, replaced whole (a temporary file renamed over it)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    tmp.replace(path)
