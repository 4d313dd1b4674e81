"""TLS contexts from Kafka's ``ssl.*`` settings, for both ends (Python's ssl plus ``cryptography``; kafka-security.md §3).

Shared by the broker's listeners (kcli.broker.security.tls) and the clients (kctl's own client, the broker's
inter-broker connections): stdlib and ``cryptography`` only, so every layer above the wire may use it.

Key material: PEM (files, or inline text as KIP-651's ``ssl.keystore.certificate.chain``/``ssl.keystore.key``/
``ssl.truststore.certificates``) and PKCS12 (read with ``cryptography``); JKS cannot be read by Python and is refused
with a message saying so. Python 3.11 loads a private key from files only: the key and chain are written to a
0600 temporary file for ``load_cert_chain`` and removed at once.
"""

from __future__ import annotations

import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kcli.errors import KcliError

JKS_MAGIC = b"\xfe\xed\xfe\xed"
_PROTOCOLS = {"TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1, "TLSv1.2": ssl.TLSVersion.TLSv1_2,
              "TLSv1.3": ssl.TLSVersion.TLSv1_3}


class TlsConfigError(KcliError):
    """TLS settings that cannot be used (a missing file, a wrong password, a JKS store, a bad protocol name)."""


@dataclass(frozen=True)
class KeyMaterial:
    """A private key (PEM, PKCS8, possibly encrypted with ``password``) and its certificate chain (PEM)."""

    key_pem: bytes
    chain_pem: bytes
    password: bytes | None = None


def _read(location: str, what: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as exc:
        raise TlsConfigError(f"cannot read {what} {location}: {exc.strerror or exc}") from None


def _is_pkcs12(data: bytes) -> bool:
    return data[:1] == b"\x30"  # a DER SEQUENCE (PEM starts with text, JKS with FEEDFEED)


def _pkcs12(data: bytes, password: str | None, what: str):
    from cryptography.hazmat.primitives.serialization import pkcs12

    try:
        return pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
        raise TlsConfigError(f"cannot read {what} as PKCS12 (wrong password?): {exc}") from None


def _store_type(store_type: str | None, data: bytes | None, what: str) -> str:
    """The store's real type: PKCS12 content under the default type JKS is read as PKCS12 (as Java 9+'s
    keystore.type.compat does); a real JKS store is refused."""
    kind = (store_type or "JKS").upper()
    if data is not None and data.startswith(JKS_MAGIC):
        raise TlsConfigError(f"{what} is a JKS store, which kctl cannot read: convert it to PKCS12 (keytool "
                             f"-importkeystore -deststoretype PKCS12) or PEM")
    if kind == "JKS" and data is not None:
        return "PKCS12" if _is_pkcs12(data) else "PEM"
    if kind not in ("PKCS12", "PEM"):
        raise TlsConfigError(f"{what}: store type {kind} is not supported (PKCS12 or PEM)")
    return kind


def load_key_material(*, store_type: str | None = None, location: str | None = None,
                      store_password: str | None = None, key_password: str | None = None,
                      chain_pem: str | None = None, key_pem: str | None = None,
                      what: str = "ssl.keystore") -> KeyMaterial | None:
    """The keystore as PEM: PKCS12 or PEM file at ``location``, or inline PEM (KIP-651). None when nothing is set."""
    from cryptography.hazmat.primitives import serialization

    if chain_pem or key_pem:
        if not (chain_pem and key_pem):
            raise TlsConfigError(f"{what}: ssl.keystore.certificate.chain and ssl.keystore.key go together")
        return KeyMaterial(key_pem.encode(), chain_pem.encode(), key_password.encode() if key_password else None)
    if not location:
        return None
    data = _read(location, what)
    kind = _store_type(store_type, data, f"{what} {location}")
    if kind == "PKCS12":
        key, cert, extra = _pkcs12(data, store_password, f"{what} {location}")
        if key is None or cert is None:
            raise TlsConfigError(f"{what} {location} holds no private key and certificate")
        pem_key = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        chain = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in [cert, *(extra or [])])
        return KeyMaterial(pem_key, chain, None)
    # a PEM file: the key and the chain in one file; an encrypted key needs ssl.key.password (Kafka 2.7-3.x)
    text = data.decode("latin-1")
    blocks = _pem_blocks(text)
    keys = [b for b in blocks if "PRIVATE KEY" in b.splitlines()[0]]
    certs = [b for b in blocks if "CERTIFICATE" in b.splitlines()[0]]
    if not keys or not certs:
        raise TlsConfigError(f"{what} {location} (PEM) must hold the private key and its certificate chain")
    return KeyMaterial(keys[0].encode(), "".join(certs).encode(), key_password.encode() if key_password else None)


def _pem_blocks(text: str) -> list[str]:
    blocks, current = [], None
    for line in text.splitlines():
        if line.startswith("-----BEGIN "):
            current = [line]
        elif current is not None:
            current.append(line)
            if line.startswith("-----END "):
                blocks.append("\n".join(current) + "\n")
                current = None
    return blocks


def load_trusted_certificates(*, store_type: str | None = None, location: str | None = None,
                              store_password: str | None = None, certificates_pem: str | None = None,
                              what: str = "ssl.truststore") -> str | None:
    """The trusted CAs as PEM text (``cadata``), from a PKCS12 or PEM store or inline PEM; None when nothing is set."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    if certificates_pem:
        return certificates_pem
    if not location:
        return None
    data = _read(location, what)
    kind = _store_type(store_type, data, f"{what} {location}")
    if kind == "PEM":
        text = data.decode("latin-1")
        if "-----BEGIN CERTIFICATE" not in text:
            raise TlsConfigError(f"{what} {location} holds no PEM certificate")
        return text
    try:
        from cryptography.hazmat.primitives.serialization import pkcs12

        store = pkcs12.load_pkcs12(data, store_password.encode() if store_password else None)
    except ValueError as exc:
        raise TlsConfigError(f"cannot read {what} {location} as PKCS12 (wrong password?): {exc}") from None
    certs: list[x509.Certificate] = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certs.append(store.cert.certificate)
    if not certs:
        raise TlsConfigError(f"{what} {location} holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)


def load_cert_chain(context: ssl.SSLContext, material: KeyMaterial, what: str = "ssl.keystore") -> None:
    """``context.load_cert_chain`` from memory: through a 0600 temporary file, removed straight after."""
    fd, path = tempfile.mkstemp(prefix="kctl-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(material.key_pem)
            out.write(b"\n" if not material.key_pem.endswith(b"\n") else b"")
            out.write(material.chain_pem)
        try:
            context.load_cert_chain(path, path, password=material.password or _no_password)
        except (ssl.SSLError, ValueError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise TlsConfigError(f"{what}: cannot load the key and certificate ({reason}); an encrypted key needs "
                                 f"ssl.key.password") from None
    finally:
        os.unlink(path)


def _no_password() -> bytes:
    """Never prompt on a terminal for an encrypted key: without ssl.key.password it fails."""
    raise ssl.SSLError("the private key is encrypted and no ssl.key.password is set")


def apply_protocols(context: ssl.SSLContext, enabled: str | None, protocol: str | None = None) -> None:
    """``ssl.enabled.protocols`` (a list such as TLSv1.2,TLSv1.3) as the context's minimum and maximum version."""
    names = [p.strip() for p in (enabled or "").split(",") if p.strip()] or [protocol or "TLSv1.3", "TLSv1.2"]
    versions = []
    for name in names:
        if name not in _PROTOCOLS:
            raise TlsConfigError(f"ssl.enabled.protocols: unknown protocol {name} (TLSv1.2 or TLSv1.3)")
        versions.append(_PROTOCOLS[name])
    context.minimum_version = min(versions)
    context.maximum_version = max(versions)


def apply_ciphers(context: ssl.SSLContext, cipher_suites: str | None) -> None:
    """``ssl.cipher.suites``: names in OpenSSL's or IANA's spelling; Python can restrict TLS 1.2 suites only."""
    names = [c.strip() for c in (cipher_suites or "").split(",") if c.strip()]
    tls12 = [n for n in names if not n.startswith("TLS_AES") and not n.startswith("TLS_CHACHA20")]
    if not tls12:
        return
    try:
        context.set_ciphers(":".join(_openssl_cipher_name(n) for n in tls12))
    except ssl.SSLError:
        raise TlsConfigError(f"ssl.cipher.suites: no usable cipher in {cipher_suites}") from None


def _openssl_cipher_name(name: str) -> str:
    """IANA names (Java's: TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256) to OpenSSL's (ECDHE-ECDSA-AES128-GCM-SHA256)."""
    if not name.startswith("TLS_"):
        return name
    return _iana_table().get(name, name)


_IANA: dict[str, str] | None = None


def _iana_table() -> dict[str, str]:
    global _IANA
    if _IANA is None:
        _IANA = {}
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            ctx.set_ciphers("ALL:@SECLEVEL=0")
        except ssl.SSLError:
            pass
        for cipher in ctx.get_ciphers():
            # get_ciphers has no IANA name; derive the usual mapping for the (EC)DHE AEAD suites
            name = cipher["name"]
            parts = name.split("-")
            if len(parts) >= 4 and parts[0] in ("ECDHE", "DHE"):
                kx = f"{parts[0]}_{parts[1]}"
                rest = parts[2:]
                if rest[0].startswith("AES"):
                    bits = rest[0][3:]
                    iana = f"TLS_{kx}_WITH_AES_{bits}_{rest[1]}_{rest[2]}"
                elif rest[0] == "CHACHA20":
                    iana = f"TLS_{kx}_WITH_CHACHA20_POLY1305_SHA256"
                else:
                    continue
                _IANA[iana] = name
    return _IANA


def _truthy(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    return value.strip().lower() in ("true", "1", "yes")


def client_ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    """A client's TLS context from Kafka's (Java) or librdkafka's client properties.

    Trust: ``ssl.truststore.location``/``.type``/``.password`` or ``ssl.truststore.certificates`` (Java),
    ``ssl.ca.location``/``ssl.ca.pem`` (librdkafka); none: the system's CAs. Own certificate (mTLS):
    ``ssl.keystore.location``/``.type``/``.password`` + ``ssl.key.password`` or ``ssl.keystore.certificate.chain`` +
    ``ssl.keystore.key`` (Java), ``ssl.certificate.location``/``ssl.certificate.pem`` + ``ssl.key.location``/
    ``ssl.key.pem`` + ``ssl.key.password``, or a PKCS12 ``ssl.keystore.location`` (librdkafka). Host name check:
    ``ssl.endpoint.identification.algorithm`` ``https`` (the default, as in Kafka 2.0+ and librdkafka 2.0+) or empty/
    ``none``; ``enable.ssl.certificate.verification=false`` (librdkafka) turns verification off. Protocols and TLS 1.2
    ciphers from ``ssl.enabled.protocols`` and ``ssl.cipher.suites``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    apply_protocols(context, props.get("ssl.enabled.protocols"), props.get("ssl.protocol"))
    apply_ciphers(context, props.get("ssl.cipher.suites"))
    cadata = load_trusted_certificates(
        store_type=props.get("ssl.truststore.type"), location=props.get("ssl.truststore.location"),
        store_password=props.get("ssl.truststore.password"),
        certificates_pem=props.get("ssl.truststore.certificates") or props.get("ssl.ca.pem"))
    if cadata is None and props.get("ssl.ca.location"):
        cadata = load_trusted_certificates(store_type="PEM", location=props["ssl.ca.location"], what="ssl.ca.location")
    if cadata is not None:
        try:
            context.load_verify_locations(cadata=cadata)
        except ssl.SSLError as exc:
            raise TlsConfigError(f"cannot use the trusted certificates: {exc.reason or exc}") from None
    else:
        context.load_default_certs()
    algorithm = props.get("ssl.endpoint.identification.algorithm", "https").strip().lower()
    context.check_hostname = algorithm == "https"
    if not _truthy(props.get("enable.ssl.certificate.verification"), True):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    material = _client_key_material(props)
    if material is not None:
        load_cert_chain(context, material, "client keystore")
    return context


def _client_key_material(props: Mapping[str, str]) -> KeyMaterial | None:
    cert_location, key_location = props.get("ssl.certificate.location"), props.get("ssl.key.location")
    cert_pem, key_pem = props.get("ssl.certificate.pem"), props.get("ssl.key.pem")
    password = props.get("ssl.key.password")
    if cert_location or key_location or cert_pem or key_pem:  # librdkafka's PEM settings
        chain = cert_pem.encode() if cert_pem else _read(cert_location, "ssl.certificate.location") if cert_location \
            else None
        key = key_pem.encode() if key_pem else _read(key_location, "ssl.key.location") if key_location else None
        if chain is None or key is None:
            raise TlsConfigError("a client certificate needs both ssl.certificate.location (or .pem) and "
                                 "ssl.key.location (or .pem)")
        return KeyMaterial(key, chain, password.encode() if password else None)
    store_type = props.get("ssl.keystore.type")
    if props.get("ssl.keystore.location") and store_type is None:
        store_type = "JKS"  # Java's default; PKCS12 content is read as such (librdkafka's keystore is PKCS12)
    return load_key_material(store_type=store_type, location=props.get("ssl.keystore.location"),
                             store_password=props.get("ssl.keystore.password"), key_password=password,
                             chain_pem=props.get("ssl.keystore.certificate.chain"),
                             key_pem=props.get("ssl.keystore.key"))
