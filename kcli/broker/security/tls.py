"""The broker's TLS: a listener's server SSLContext (kafka-security.md §3.2) and the principal of a client
certificate through ``ssl.principal.mapping.rules`` (Kafka's SslPrincipalMapper, KIP-371, §3.3).

The client side (``client_ssl_context``) lives in kcli.tls, shared with kctl's own clients; it is re-exported here.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass

from kcli.broker.config import ConfigError
from kcli.broker.security import ANONYMOUS, KafkaPrincipal
from kcli.broker.security.listener_config import SslSettings
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


# -- ssl.principal.mapping.rules --------------------------------------------------------------------------------
_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_RULE_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_RULE_PARSER = re.compile(_RULE)
_BACK_REFERENCE = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class _Rule:
    pattern: str | None = None  # None: DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        regex = re.compile(self.pattern)
        if regex.fullmatch(dn) is None:
            return None
        replacement = _escape_missing_groups(self.replacement, regex.groups)
        result = regex.sub(lambda m: _java_replacement(replacement, m), dn)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        return "RULE:" + self.pattern + "/" + self.replacement + ("/L" if self.lower else "/U" if self.upper else "")


def _escape_missing_groups(replacement: str, groups: int) -> str:
    """Kafka's Rule.escape (from Apache NiFi): a ``$n`` beyond the group count is literal (digits trimmed first)."""
    if groups == 0:
        return replacement
    value = replacement
    for match in list(_BACK_REFERENCE.finditer(replacement)):
        digits = match.group(1)
        if digits.startswith("0"):
            continue
        number = int(digits)
        while number > groups and number >= 10:
            number //= 10
        if number > groups:
            start = value.find("$" + digits)
            if start >= 0 and (start == 0 or value[start - 1] != "\\"):
                value = value[:start] + "\\" + value[start:]
    return value


def _java_replacement(replacement: str, match: re.Match[str]) -> str:
    """Java's Matcher.appendReplacement: ``\\x`` is x, ``$n`` is group n (as many digits as name a group)."""
    out: list[str] = []
    i = 0
    while i < len(replacement):
        char = replacement[i]
        if char == "\\" and i + 1 < len(replacement):
            out.append(replacement[i + 1])
            i += 2
        elif char == "$" and i + 1 < len(replacement) and replacement[i + 1].isdigit():
            number = int(replacement[i + 1])
            i += 2
            while i < len(replacement) and replacement[i].isdigit() and number * 10 + int(replacement[i]) <= (
                    match.re.groups):
                number = number * 10 + int(replacement[i])
                i += 1
            if number > match.re.groups:
                raise ValueError(f"No group {number}")
            out.append(match.group(number) or "")
        else:
            out.append(char)
            i += 1
    return "".join(out)


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``: a comma list of ``DEFAULT`` and ``RULE:<regex>/<replacement>/[L|U]``,
    tried in order on the certificate's RFC 2253 DN; the first that matches the whole DN gives the name."""

    def __init__(self, rules: list[_Rule]) -> None:
        self.rules = rules

    @classmethod
    def from_rules(cls, text: str | None) -> SslPrincipalMapper:
        parts = [m.group(1) for m in _RULE_SPLITTER.finditer((text if text is not None else "DEFAULT").strip())]
        rules = []
        for part in parts:
            match = _RULE_PARSER.match(part)
            if match is None:
                raise ValueError(f"Invalid rule: {part}")
            if match.end() != len(part):
                raise ValueError(f"Invalid rule: `{part}`, unmatched substring: `{part[match.end():]}`")
            if match.group(1) is not None:
                rules.append(_Rule())
            elif match.group(2) is not None:
                try:
                    re.compile(match.group(2))
                except re.error as exc:
                    raise ValueError(f"Invalid rule: {part}: {exc}") from None
                rules.append(_Rule(match.group(2), match.group(4), match.group(6) == "L", match.group(6) == "U"))
        return cls(rules)

    def name(self, dn: str) -> str:
        for rule in self.rules:
            principal = rule.apply(dn)
            if principal is not None:
                return principal
        raise LookupError(f"No rules apply to {dn}, rules [{', '.join(map(str, self.rules))}]")

    def __str__(self) -> str:
        return f"SslPrincipalMapper(rules = [{', '.join(map(str, self.rules))}])"


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
