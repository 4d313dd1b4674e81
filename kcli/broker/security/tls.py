"""The broker's TLS: a listener's server SSLContext (kafka-security.md §3.2) and the principal of a client
certificate through ``ssl.principal.mapping.rules`` (Kafka's SslPrincipalMapper, KIP-371, §3.3).

The client side (``client_ssl_context``) lives in kcli.tls, shared with kctl's own clients; it is re-exported here.
"""

from __future__ import annotations

import ssl

from kcli.broker.config_error import ConfigError
from kcli.broker.security import ANONYMOUS, KafkaPrincipal
from kcli.broker.security.listener_config import SslSettings
from kcli.broker.security.principal_mapper import SslPrincipalMapper
from kcli.tls import (
    TlsConfigError,
    apply_ciphers,
    apply_protocols,
    client_ssl_context,
    load_cert_chain,
    load_key_material,
    load_trusted_certificates,
)

__all__ = ["SslPrincipalMapper", "client_ssl_context", "principal_from_certificate", "server_ssl_context",
           "subject_dn"]

_VERIFY_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def server_ssl_context(settings: SslSettings, listener_name: str = "") -> ssl.SSLContext:
    """A listener's server context: its keystore (PKCS12 or PEM, file or inline), truststore (the CAs client
    certificates must chain to; the system's without one), ``ssl.client.auth`` as the verify mode (none:
    no certificate is asked for; requested: asked for, verified if sent; required: no certificate, no
    connection), ``ssl.enabled.protocols`` and the TLS 1.2 ``ssl.cipher.suites``. ConfigError names the listener."""
    where = f"listener {listener_name}" if listener_name else "ssl"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        apply_protocols(context, settings.enabled_protocols, settings.protocol)
        apply_ciphers(context, settings.cipher_suites)
        material = load_key_material(
            store_type=settings.keystore_type, location=settings.keystore_location,
            store_password=settings.keystore_password, key_password=settings.key_password,
            chain_pem=settings.keystore_certificate_chain, key_pem=settings.keystore_key)
        if material is None:
            raise TlsConfigError("no keystore (ssl.keystore.location, or ssl.keystore.certificate.chain and "
                                 "ssl.keystore.key)")
        load_cert_chain(context, material)
        context.verify_mode = _VERIFY_MODES[settings.client_auth]
        if settings.client_auth != "none":
            cadata = load_trusted_certificates(
                store_type=settings.truststore_type, location=settings.truststore_location,
                store_password=settings.truststore_password, certificates_pem=settings.truststore_certificates)
            if cadata is None:
                context.load_default_certs(ssl.Purpose.CLIENT_AUTH)
            else:
                context.load_verify_locations(cadata=cadata)
    except (TlsConfigError, ssl.SSLError) as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return context


def subject_dn(der: bytes) -> str:
    """The certificate subject as Java's X500Principal.getName() prints it (RFC 2253: most specific RDN first)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


def principal_from_certificate(der: bytes | None, mapper: SslPrincipalMapper) -> KafkaPrincipal:
    """Kafka's DefaultKafkaPrincipalBuilder for SSL: the peer certificate's DN through the rules, or
    ``User:ANONYMOUS`` without a certificate. LookupError when no rule applies (the connection fails)."""
    if not der:
        return ANONYMOUS
    return KafkaPrincipal("User", mapper.name(subject_dn(der)))
