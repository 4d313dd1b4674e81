"""One listener's effective security settings, resolved as Kafka's ChannelBuilders and JaasContext resolve them
(kafka-security.md §1.2, §1.3): ``listener.name.<name>.<mechanism>.<key>``, then ``listener.name.<name>.<key>``, then
the broker-wide key.

``listener_security(config, listener)`` refuses, naming the listener, what cannot be served as its protocol says: a
SASL listener with no mechanism kctl serves (GSSAPI, Kafka's default, is not), PLAIN without users in the listener's
JAAS config, TLS without a keystore. Nothing is ever served with less security than configured.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from kcli.broker.config_error import ConfigError
from kcli.broker.security.principal_mapper import SslPrincipalMapper

# kcli.protocol.sasl.SERVER_MECHANISMS (H2's interface), repeated here so that config validation needs no import of
# the mechanisms themselves
SERVED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
CLIENT_AUTH = ("none", "requested", "required")
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"


@dataclass(frozen=True)
class JaasEntry:
    """One login module of a ``sasl.jaas.config``: ``<class> <flag> key="value" ...;``."""

    login_module: str
    control_flag: str
    options: Mapping[str, str]


_JAAS_TOKEN = re.compile(r'\s*(?:(;)|"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=))', re.S)


def parse_jaas_config(text: str, key: str = "sasl.jaas.config") -> list[JaasEntry]:
    """Kafka's JaasConfig parser: login modules, each ``<class> <required|requisite|sufficient|optional>`` then
    ``name=value`` options (values quoted or bare) and a ``;``."""
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _JAAS_TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            if text[pos:].strip() == "":
                break
            raise ConfigError(f"Invalid value for configuration {key}: cannot parse the JAAS configuration at "
                              f"{text[pos:pos + 30]!r}")
        pos = match.end()
        if match.group(1):
            tokens.append((";", ";"))
        elif match.group(2) is not None:
            tokens.append(("str", re.sub(r"\\(.)", r"\1", match.group(2))))
        elif match.group(3):
            tokens.append(("word", match.group(3)))
        else:
            tokens.append(("=", "="))
    entries: list[JaasEntry] = []
    i = 0
    while i < len(tokens):
        if i + 1 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "word":
            raise ConfigError(f"Invalid value for configuration {key}: expected '<LoginModuleClass> <ControlFlag> "
                              f"key=value ...;'")
        module, flag = tokens[i][1], tokens[i + 1][1]
        if flag.lower() not in ("required", "requisite", "sufficient", "optional"):
            raise ConfigError(f"Invalid value for configuration {key}: invalid control flag {flag!r} for {module}")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "=" or tokens[i + 2][0] == ";":
                raise ConfigError(f"Invalid value for configuration {key}: options of {module} must be key=value")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise ConfigError(f"Invalid value for configuration {key}: the login module {module} must end with ';'")
        i += 1
        entries.append(JaasEntry(module, flag.lower(), MappingProxyType(options)))
    return entries


@dataclass(frozen=True)
class SslSettings:
    """A listener's ``ssl.*`` settings after prefix resolution (kafka-security.md §3.1)."""

    keystore_type: str = "JKS"
    keystore_location: str | None = None
    keystore_password: str | None = None
    key_password: str | None = None
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = None
    truststore_type: str = "JKS"
    truststore_location: str | None = None
    truststore_password: str | None = None
    truststore_certificates: str | None = None
    client_auth: str = "none"
    enabled_protocols: str = "TLSv1.2,TLSv1.3"
    protocol: str = "TLSv1.3"
    cipher_suites: str | None = None
    principal_mapping_rules: str = "DEFAULT"
    endpoint_identification_algorithm: str = "https"


@dataclass(frozen=True)
class ListenerSecurity:
    """What the socket server needs to serve one listener: its protocol, TLS settings, SASL mechanisms and JAAS."""

    listener_name: str
    security_protocol: str
    ssl: SslSettings | None = None
    mechanisms: tuple[str, ...] = ()
    jaas: Mapping[str, JaasEntry] = field(default_factory=dict)  # mechanism -> its login module
    reauth_ms: Mapping[str, int] = field(default_factory=dict)  # mechanism -> connections.max.reauth.ms
    failed_authentication_delay_ms: int = 100
    max_receive_size: int = 524_288
    authentication_timeout_ms: int = 10_000

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def plain_users(self) -> dict[str, str]:
        """PLAIN's users: the ``user_<name>="<password>"`` options of the listener's PlainLoginModule."""
        entry = self.jaas.get("PLAIN")
        if entry is None:
            return {}
        return {k[len("user_"):]: v for k, v in entry.options.items() if k.startswith("user_")}


def _ssl_settings(config: Any, name: str, protocol: str) -> SslSettings:
    def value(key: str) -> object:
        return config.listener_value(name, key)

    client_auth = str(value("ssl.client.auth")).strip().lower()
    if protocol == "SASL_SSL" and not config.listener_has(name, "ssl.client.auth"):
        client_auth = "none"  # KIP-684: on SASL_SSL only the listener-prefixed ssl.client.auth counts
    if client_auth not in CLIENT_AUTH:
        raise ConfigError(f"listener {name}: Invalid value {client_auth!r} for configuration ssl.client.auth: "
                          f"one of none, requested, required")
    settings = SslSettings(**{
        attr: value("ssl." + attr.replace("_", "."))
        for attr in ("keystore_type", "keystore_location", "keystore_password", "key_password",
                     "keystore_certificate_chain", "keystore_key", "truststore_type", "truststore_location",
                     "truststore_password", "truststore_certificates", "enabled_protocols", "protocol",
                     "cipher_suites", "principal_mapping_rules", "endpoint_identification_algorithm")},
        client_auth=client_auth)
    if not (settings.keystore_location or settings.keystore_certificate_chain or settings.keystore_key):
        raise ConfigError(f"listener {name} ({protocol}) needs a keystore: set ssl.keystore.location (PKCS12 or PEM) "
                          f"or ssl.keystore.certificate.chain and ssl.keystore.key (PEM), or their "
                          f"listener.name.{name.lower()}. forms")
    return settings


def listener_security(config: Any, listener: Any) -> ListenerSecurity:
    """The listener's effective security settings; ConfigError naming the listener if it cannot be served."""
    name = listener.name
    protocol = config.security_protocol(listener)
    common = dict(listener_name=name, security_protocol=protocol,
                  failed_authentication_delay_ms=int(config.listener_value(  # type: ignore[arg-type]
                      name, "connection.failed.authentication.delay.ms")),
                  authentication_timeout_ms=int(config["kctl.authentication.timeout.ms"]))
    ssl = _ssl_settings(config, name, protocol) if protocol in ("SSL", "SASL_SSL") else None
    if ssl is not None:
        try:
            SslPrincipalMapper.from_rules(ssl.principal_mapping_rules)
        except ValueError as exc:
            raise ConfigError(f"listener {name}: ssl.principal.mapping.rules: {exc}") from None
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return ListenerSecurity(ssl=ssl, **common)  # type: ignore[arg-type]
    text = str(config.listener_value(name, "sasl.enabled.mechanisms"))
    mechanisms = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    unsupported = [m for m in mechanisms if m not in SERVED_MECHANISMS]
    if not mechanisms or unsupported:
        what = ("GSSAPI (Kerberos, Kafka's default for sasl.enabled.mechanisms)" if unsupported == ["GSSAPI"]
                else ", ".join(unsupported) or "no mechanism")
        raise ConfigError(f"listener {name} ({protocol}): sasl.enabled.mechanisms={text}: {what} is not served by "
                          f"kctl broker; set sasl.enabled.mechanisms (or listener.name.{name.lower()}."
                          f"sasl.enabled.mechanisms) to some of {', '.join(SERVED_MECHANISMS)}")
    jaas: dict[str, JaasEntry] = {}
    reauth: dict[str, int] = {}
    for mechanism in mechanisms:
        reauth[mechanism] = int(config.listener_value(name, "connections.max.reauth.ms", mechanism))  # type: ignore[arg-type]
        key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
        text = config.prefixed.get(key)  # only this form: a broker ignores the unprefixed sasl.jaas.config
        if text:
            entries = parse_jaas_config(text, key)
            if len(entries) != 1:
                raise ConfigError(f"listener {name}: JAAS config property {key} contains {len(entries)} login "
                                  f"modules, should be 1 module")
            jaas[mechanism] = entries[0]
    plain = jaas.get("PLAIN")
    if "PLAIN" in mechanisms and (plain is None or plain.login_module != PLAIN_LOGIN_MODULE):
        raise ConfigError(f"listener {name} ({protocol}) enables PLAIN but has no users: set "
                          f"listener.name.{name.lower()}.plain.sasl.jaas.config={PLAIN_LOGIN_MODULE} required "
                          f"user_<name>=\"<password>\" ...;")
    return ListenerSecurity(ssl=ssl, mechanisms=mechanisms, jaas=MappingProxyType(jaas),
                            reauth_ms=MappingProxyType(reauth),
                            max_receive_size=int(config.listener_value(  # type: ignore[arg-type]
                                name, "sasl.server.max.receive.size")), **common)  # type: ignore[arg-type]


def all_listener_security(config: Any) -> dict[str, ListenerSecurity]:
    return {l.name: listener_security(config, l) for l in config.listeners}


def inter_broker_client_properties(config: Any) -> dict[str, str]:
    """The Kafka client properties of the broker's own connections to other brokers (replica fetchers, the
    controller's channels, transaction markers): the inter-broker listener's protocol, its TLS settings after prefix
    resolution (truststore, and keystore for mTLS), ``sasl.mechanism.inter.broker.protocol`` and the username and
    password options of that mechanism's JAAS entry on the listener (Kafka's ChannelBuilders.clientChannelBuilder).
    Feed it to kcli.tls.client_ssl_context and kcli.protocol.sasl.create_client."""
    name = config.inter_broker_listener_name
    listener = next(l for l in config.listeners if l.name == name)
    security = listener_security(config, listener)
    props: dict[str, str] = {"security.protocol": security.security_protocol}
    if security.ssl is not None:
        s = security.ssl
        for key, value in (("ssl.truststore.type", s.truststore_type), ("ssl.truststore.location", s.truststore_location),
                           ("ssl.truststore.password", s.truststore_password),
                           ("ssl.truststore.certificates", s.truststore_certificates),
                           ("ssl.keystore.type", s.keystore_type), ("ssl.keystore.location", s.keystore_location),
                           ("ssl.keystore.password", s.keystore_password), ("ssl.key.password", s.key_password),
                           ("ssl.keystore.certificate.chain", s.keystore_certificate_chain),
                           ("ssl.keystore.key", s.keystore_key), ("ssl.enabled.protocols", s.enabled_protocols),
                           ("ssl.cipher.suites", s.cipher_suites),
                           ("ssl.endpoint.identification.algorithm", s.endpoint_identification_algorithm)):
            if value is not None:
                props[key] = str(value)
    if security.sasl:
        mechanism = str(config["sasl.mechanism.inter.broker.protocol"]).strip().upper()
        props["sasl.mechanism"] = mechanism
        entry = security.jaas.get(mechanism)
        if entry is not None:
            for option in ("username", "password"):
                if option in entry.options:
                    props[f"sasl.{option}"] = entry.options[option]
    return props

