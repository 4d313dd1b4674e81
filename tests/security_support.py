"""A throw-away test CA for TLS tests (kafka-security.md §3.5), made with Python's ``cryptography``.

``make_pki(directory)`` writes, in PEM unless said otherwise:
- ``ca.crt`` / ``ca.key``: the CA (CN=kctl-test-ca);
- ``broker.crt`` / ``broker.key``: the broker's certificate, SAN DNS:localhost and IP:127.0.0.1 (clients verify
  the host name by default), key unencrypted; ``broker-enc.key``: the same key encrypted with ``KEY_PASSWORD``;
  ``broker.p12``: a PKCS12 keystore (key, certificate and CA) with password ``STORE_PASSWORD``;
  ``broker-chain.pem``: certificate then CA, for ``ssl.keystore.certificate.chain``;
- ``alice.*``, ``bob.*``: client certificates with DNs ``CN=<name>,OU=test,O=kctl,C=US`` (``dn(name)``);
  ``alice-enc.key`` encrypted with ``KEY_PASSWORD``; ``alice.p12`` (PKCS12, ``STORE_PASSWORD``);
- ``stranger.*``: a client certificate from another CA (not trusted by the broker).

``pki`` in a test module: ``pki = pytest.fixture(scope="session")(lambda tmp_path_factory: make_pki(...))`` or use
``session_pki`` below through conftest.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_PASSWORD = "key-secret"
STORE_PASSWORD = "changeit"


def dn(cn: str) -> str:
    """The RFC 2253 subject Kafka's X500Principal.getName() gives for ``name(cn)``."""
    return f"CN={cn},OU=test,O=kctl,C=US"


@dataclass(frozen=True)
class Pki:
    directory: Path

    def path(self, name: str) -> str:
        return str(self.directory / name)

    @property
    def ca(self) -> str:
        return self.path("ca.crt")

    def text(self, name: str) -> str:
        return (self.directory / name).read_text()


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kctl"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "test"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _ca(cn: str, now: datetime.datetime):
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(_name(cn))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    return key, cert


def _leaf(cn: str, ca_key, ca, now: datetime.datetime, *, server: bool):
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(ca.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=30))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                              critical=False)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                                                    if server else [ExtendedKeyUsageOID.CLIENT_AUTH]),
                              critical=False))
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _pem_key(key, password: str | None = None) -> bytes:
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)


def _pem_cert(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_pki(out: Path) -> Pki:
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, ca = _ca("kctl-test-ca", now)
    (out / "ca.key").write_bytes(_pem_key(ca_key))
    (out / "ca.crt").write_bytes(_pem_cert(ca))
    for stem, cn, server in (("broker", "localhost", True), ("alice", "alice", False), ("bob", "bob", False)):
        key, cert = _leaf(cn, ca_key, ca, now, server=server)
        (out / f"{stem}.key").write_bytes(_pem_key(key))
        (out / f"{stem}-enc.key").write_bytes(_pem_key(key, KEY_PASSWORD))
        (out / f"{stem}.crt").write_bytes(_pem_cert(cert))
        (out / f"{stem}-chain.pem").write_bytes(_pem_cert(cert) + _pem_cert(ca))
        (out / f"{stem}.p12").write_bytes(pkcs12.serialize_key_and_certificates(
            stem.encode(), key, cert, [ca], serialization.BestAvailableEncryption(STORE_PASSWORD.encode())))
    other_key, other = _ca("other-ca", now)
    key, cert = _leaf("stranger", other_key, other, now, server=False)
    (out / "stranger.key").write_bytes(_pem_key(key))
    (out / "stranger.crt").write_bytes(_pem_cert(cert))
    return Pki(out)
