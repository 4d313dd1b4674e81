"""A Kafka client's security settings and its side of the SASL exchange, sans-io.

``ClientSecurity`` is what ``security.protocol``, ``sasl.*`` and ``ssl.*`` say, read from Kafka client property
names: librdkafka's (``sasl.username``, ``ssl.ca.location``, ``ssl.certificate.location``...) and the Java
client's (``sasl.jaas.config``, ``ssl.truststore.*``, ``ssl.keystore.*``), so one client.properties serves kcat,
confluent-kafka, Kafka's own tools and kctl. The TLS context is built from it by ``kcli.tls`` (the ``ssl`` module
is not this layer's). ``sasl_exchange`` is the client's SaslHandshake v1 + SaslAuthenticate conversation (KIP-43,
KIP-152) as a generator of requests: the transport sends what it yields and sends back the response body, so the
blocking client, the broker's asyncio connections and the controller's sender threads share one implementation.
Re-authentication (KIP-368) is the same exchange again on the open connection, before ``reauth_deadline``.
"""

from __future__ import annotations

import enum
import random
import re
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from kcli.errors import KcliError

SASL_HANDSHAKE: Final = 17
SASL_AUTHENTICATE: Final = 36
SASL_HANDSHAKE_VERSION: Final = 1  # v1: tokens travel in SaslAuthenticate requests (v0's raw framing is not spoken)
SASL_AUTHENTICATE_MAX_VERSION: Final = 2


class SecurityConfigError(KcliError):
    """A client security setting is missing, unknown to Kafka's clients in a way that matters, or malformed."""


class SaslAuthenticationFailed(KcliError):
    """The broker refused the SASL exchange: an unsupported mechanism or SASL_AUTHENTICATION_FAILED."""


class SecurityProtocol(str, enum.Enum):
    """Kafka's SecurityProtocol (ids 0-3, permanent: UpdateMetadata carries them)."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @classmethod
    def parse(cls, text: str) -> SecurityProtocol:
        try:
            return cls(text.strip().upper())  # Kafka matches the names case-insensitively
        except ValueError:
            raise SecurityConfigError(f"security.protocol={text!r}: expected one of "
                                      f"{', '.join(p.value for p in cls)}") from None


MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
STORE_TYPES: Final = ("PEM", "PKCS12", "JKS")  # JKS: the Java default name; kcli.tls reads PKCS12 content under it


# The TLS settings a client reads (kcli.tls.client_ssl_context builds the context from them): Java's and librdkafka's
SSL_KEYS: Final = frozenset({
    "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location",
    "ssl.key.pem", "ssl.key.password", "ssl.truststore.location", "ssl.truststore.type", "ssl.truststore.password",
    "ssl.truststore.certificates", "ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.endpoint.identification.algorithm",
    "enable.ssl.certificate.verification", "ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites",
})


@dataclass(frozen=True)
class ClientSecurity:
    """A client's ``security.protocol`` with its SASL credentials and TLS settings."""

    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    mechanism: str | None = None
    username: str = ""
    password: str = ""
    token: str | None = None  # OAUTHBEARER: an (unsecured) JWS compact token
    ssl: Mapping[str, str] = field(default_factory=dict)  # the SSL_KEYS given, for kcli.tls.client_ssl_context
    warnings: tuple[str, ...] = ()  # settings read but not used (the CLI prints them on stderr)

    @property
    def plaintext(self) -> bool:
        return self.protocol is SecurityProtocol.PLAINTEXT

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ClientSecurity:
        """From Kafka client properties; see the module doc. Raises SecurityConfigError naming the key."""
        return _from_properties(props)

    def describe(self) -> str:
        """One line for messages: ``SASL_SSL (SCRAM-SHA-512 as admin)``."""
        if self.protocol.sasl:
            return f"{self.protocol.value} ({self.mechanism} as {self.username or '?'})"
        return self.protocol.value


PLAINTEXT: Final = ClientSecurity()


# -- properties -------------------------------------------------------------------------------------------------
# Client keys that configure something else than security, known to Kafka's or librdkafka's clients: accepted in a
# shared client.properties without a warning (kctl takes these from its own options, or does not need them).
_OTHER_CLIENT_KEYS: Final = frozenset({
    "bootstrap.servers", "client.id", "request.timeout.ms", "default.api.timeout.ms", "socket.timeout.ms",
    "metadata.max.age.ms", "retries", "retry.backoff.ms", "reconnect.backoff.ms", "reconnect.backoff.max.ms",
    "connections.max.idle.ms", "client.dns.lookup", "api.version.request", "debug", "log_level",
    "group.id", "auto.offset.reset", "enable.auto.commit", "acks", "linger.ms", "compression.type",
    "sasl.login.class", "sasl.login.callback.handler.class", "sasl.client.callback.handler.class",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.secure.random.implementation", "ssl.provider", "ssl.engine.factory.class", "ssl.curves.list",
    "ssl.sigalgs.list",
})


def _bool(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise SecurityConfigError(f"{key}={text!r}: expected true or false")


def _store_type(key: str, text: str) -> str:
    value = text.strip().upper()
    if value not in STORE_TYPES:
        raise SecurityConfigError(f"{key}={text!r}: expected PEM or PKCS12 (JKS stores cannot be read by Python)")
    return value


def _from_properties(props: Mapping[str, str]) -> ClientSecurity:
    values = {k.strip(): v.strip() for k, v in props.items()}
    warnings: list[str] = []
    used: set[str] = set()

    def take(*keys: str) -> str | None:
        found = None
        for key in keys:
            if key in values:
                used.add(key)
                if found is None and values[key] != "":
                    found = values[key]
        return found

    protocol = SecurityProtocol.parse(take("security.protocol") or "PLAINTEXT")
    mechanism = take("sasl.mechanism", "sasl.mechanisms")
    username = take("sasl.username")
    password = take("sasl.password")
    jaas = take("sasl.jaas.config")
    if jaas is not None:
        entry = parse_jaas_config(jaas, key="sasl.jaas.config")
        username = username if username is not None else entry.options.get("username")
        password = password if password is not None else entry.options.get("password")
        if mechanism is None:
            mechanism = _MODULE_MECHANISM.get(entry.login_module.rsplit(".", 1)[-1])
    token = None
    oauth = take("sasl.oauthbearer.config")
    take("enable.sasl.oauthbearer.unsecure.jwt")
    if mechanism is not None:
        mechanism = mechanism.strip().upper()
    if protocol.sasl:
        if mechanism is None or mechanism == "GSSAPI":
            raise SecurityConfigError(f"security.protocol={protocol.value} needs sasl.mechanism: one of "
                                      f"{', '.join(MECHANISMS)} (kctl does not speak GSSAPI/Kerberos)")
        if mechanism not in MECHANISMS:
            raise SecurityConfigError(f"sasl.mechanism={mechanism}: expected one of {', '.join(MECHANISMS)}")
        if mechanism == "OAUTHBEARER":
            token = unsecured_jwt(oauth or "")
            username = username or ""
        elif not username or password is None:
            raise SecurityConfigError(f"sasl.mechanism={mechanism} needs a user name and password: sasl.username and "
                                      "sasl.password, or sasl.jaas.config with username=\"...\" password=\"...\"")
    elif mechanism is not None or username is not None or jaas is not None:
        warnings.append(f"security.protocol={protocol.value}: the sasl.* settings are not used")

    ssl = _ssl_properties(values, used, protocol, warnings)
    for key in sorted(set(values) - used):
        if key in _OTHER_CLIENT_KEYS:
            continue
        if key.startswith(("ssl.", "sasl.")) or key == "security.providers":
            warnings.append(f"{key}: not supported by kctl's client; ignored")
        else:
            warnings.append(f"{key}: not a security setting; ignored")
    return ClientSecurity(protocol, mechanism if protocol.sasl else None, username or "", password or "", token,
                          MappingProxyType(ssl), tuple(warnings))


def _ssl_properties(values: Mapping[str, str], used: set[str], protocol: SecurityProtocol,
                    warnings: list[str]) -> dict[str, str]:
    ssl = {k: v for k, v in values.items() if k in SSL_KEYS}
    used.update(ssl)
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        if key in ssl:
            _store_type(key, ssl[key])
    algorithm = ssl.get("ssl.endpoint.identification.algorithm")
    if algorithm is not None and algorithm.lower() not in ("https", "none", ""):
        raise SecurityConfigError(f"ssl.endpoint.identification.algorithm={algorithm!r}: expected https, or none "
                                  "(or empty) to skip the host name check")
    if "enable.ssl.certificate.verification" in ssl:
        _bool("enable.ssl.certificate.verification", ssl["enable.ssl.certificate.verification"])
    for p in (ssl.get("ssl.enabled.protocols") or "").split(","):
        if p.strip() and p.strip() not in ("TLSv1.2", "TLSv1.3", "TLSv1.1", "TLSv1"):
            raise SecurityConfigError(f"ssl.enabled.protocols: {p.strip()!r} is not a TLS version (TLSv1.2, TLSv1.3)")
    if ("ssl.certificate.location" in ssl) != ("ssl.key.location" in ssl):
        raise SecurityConfigError("ssl.certificate.location and ssl.key.location go together (a client certificate "
                                  "needs its key)")
    if ssl and not protocol.tls:
        warnings.append(f"security.protocol={protocol.value}: the ssl.* settings are not used")
    return ssl


# -- JAAS ---------------------------------------------------------------------------------------------------------
_MODULE_MECHANISM: Final = {
    "PlainLoginModule": "PLAIN",
    "OAuthBearerLoginModule": "OAUTHBEARER",
}


@dataclass(frozen=True)
class JaasEntry:
    """One login module entry of a JAAS configuration: ``<class> <flag> key="value" ...;``."""

    login_module: str
    flag: str
    options: dict[str, str]


_JAAS_TOKEN: Final = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))', re.S)
_FLAGS: Final = ("required", "requisite", "sufficient", "optional")


def parse_jaas_config(text: str, *, key: str = "sasl.jaas.config") -> JaasEntry:
    """The first (Kafka reads exactly one) login module of a ``sasl.jaas.config`` value, as Kafka's JaasConfig
    parses it: ``org.apache.kafka.common.security.scram.ScramLoginModule required username="u" password="p";``.
    Quoted values may hold ``\\"`` and ``\\\\`` escapes."""
    tokens: list[tuple[str, str]] = []  # (kind, value): kind "word", "string", "=", ";"
    pos, text = 0, text.strip()
    while pos < len(text):
        match = _JAAS_TOKEN.match(text, pos)
        if match is None:
            if text[pos:].strip() == "":
                break
            raise SecurityConfigError(f"{key}: cannot read {text[pos:pos + 20]!r} (expected name=\"value\")")
        pos = match.end()
        if match.group(1) is not None:
            tokens.append(("string", re.sub(r"\\(.)", r"\1", match.group(1))))
        elif match.group(2) is not None:
            tokens.append(("word", match.group(2)))
        elif match.group(3):
            tokens.append(("=", "="))
        else:
            tokens.append((";", ";"))
    if len(tokens) < 2 or tokens[0][0] != "word" or tokens[1][0] != "word" or tokens[1][1].lower() not in _FLAGS:
        raise SecurityConfigError(f"{key}: expected '<LoginModule class> required key=\"value\" ...;'")
    module, flag = tokens[0][1], tokens[1][1].lower()
    options: dict[str, str] = {}
    i = 2
    while i < len(tokens) and tokens[i][0] != ";":
        if i + 2 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "=" or tokens[i + 2][0] == ";":
            raise SecurityConfigError(f"{key}: option {tokens[i][1]!r} is not key=\"value\"")
        options[tokens[i][1]] = tokens[i + 2][1]
        i += 3
    if i >= len(tokens):
        raise SecurityConfigError(f"{key}: the login module entry must end with ';'")
    if any(kind != ";" for kind, _ in tokens[i + 1:]):
        raise SecurityConfigError(f"{key}: Kafka reads exactly one login module; found more after ';'")
    return JaasEntry(module, flag, options)


def jaas_config(login_module: str, **options: str) -> str:
    """A one-entry ``sasl.jaas.config`` value (quotes and backslashes escaped)."""
    quoted = " ".join(f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                      for k, v in options.items())
    return f"{login_module} required {quoted};"


SCRAM_LOGIN_MODULE: Final = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_LOGIN_MODULE: Final = "org.apache.kafka.common.security.plain.PlainLoginModule"


def unsecured_jwt(config: str) -> str:
    """An unsecured OAUTHBEARER token from librdkafka's ``sasl.oauthbearer.config`` (``principal=alice
    scope=a,b lifeSeconds=3600``), as librdkafka's default token refresh builds one (KIP-255)."""
    import base64
    import json
    import time

    fields: dict[str, str] = {}
    for item in config.split():
        k, sep, v = item.partition("=")
        if not sep:
            raise SecurityConfigError(f"sasl.oauthbearer.config: {item!r} is not key=value")
        fields[k] = v
    principal = fields.get("principal")
    if not principal:
        raise SecurityConfigError("sasl.mechanism=OAUTHBEARER needs sasl.oauthbearer.config=principal=<name> "
                                  "(kctl makes unsecured tokens only)")
    now = int(time.time())
    claims: dict[str, Any] = {"sub": principal, "iat": now, "exp": now + int(fields.get("lifeSeconds", "3600"))}
    if "scope" in fields:
        claims["scope"] = fields["scope"].replace(",", " ")

    def b64(obj: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).rstrip(b"=").decode()

    return f"{b64({'alg': 'none'})}.{b64(claims)}."


# -- the SASL exchange --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SaslOutcome:
    mechanism: str
    session_lifetime_ms: int  # 0: no expiry announced (KIP-368)


def reauth_deadline(now: float, outcome: SaslOutcome) -> float | None:
    """When to re-authenticate (monotonic seconds), or None: Kafka's clients pick a random point in 85-95% of
    the session lifetime the broker announced (SaslClientAuthenticator), so connections do not all re-authenticate
    at once and none reaches its expiry (the broker then closes it, KIP-368), but no later than a second before
    the expiry."""
    if outcome.session_lifetime_ms <= 0:
        return None
    lifetime = outcome.session_lifetime_ms / 1000
    # and at least a second (a third of a short lifetime) before the expiry: a request sent just before Kafka's
    # point may be read by a busy broker after it, and the broker then closes the connection
    return now + min(lifetime * random.uniform(0.85, 0.95), lifetime - min(1.0, lifetime / 3))


Step = tuple[int, int, Any]  # (api key, version, kio request body) for the transport to send


def sasl_exchange(security: ClientSecurity, *, authenticate_version: int = SASL_AUTHENTICATE_MAX_VERSION,
                  peer: str = "the broker") -> Generator[Step, Any, SaslOutcome]:
    """SaslHandshake v1, then SaslAuthenticate requests carrying the mechanism's tokens until it completes.
    Yields each request; the caller sends it and ``.send()``s the response body back. Returns the outcome;
    raises SaslAuthenticationFailed with the broker's message (or an unsupported mechanism with the broker's
    list) or when the mechanism's own check of the broker fails (SCRAM's server signature)."""
    from kcli.protocol.sasl import SaslAuthenticationError
    from kcli.protocol.schema import load_request_schema

    mechanism = security.mechanism
    assert mechanism is not None and security.protocol.sasl
    client = _sasl_client(security)
    version = max(0, min(authenticate_version, SASL_AUTHENTICATE_MAX_VERSION))
    handshake = yield (SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION,
                       load_request_schema(SASL_HANDSHAKE, SASL_HANDSHAKE_VERSION)(mechanism=mechanism))
    if int(handshake.error_code) != 0:
        enabled = ", ".join(handshake.mechanisms) or "none"
        raise SaslAuthenticationFailed(f"{peer} does not enable SASL mechanism {mechanism} on this listener "
                                       f"(UNSUPPORTED_SASL_MECHANISM); it enables: {enabled}")
    authenticate = load_request_schema(SASL_AUTHENTICATE, version)
    try:
        token = client.initial()
        while True:
            response = yield (SASL_AUTHENTICATE, version, authenticate(auth_bytes=bytes(token)))
            if int(response.error_code) != 0:
                message = response.error_message or "authentication failed"
                raise SaslAuthenticationFailed(f"{peer} refused {mechanism} authentication as "
                                               f"{security.username or 'the token principal'}: {message} "
                                               f"(error {int(response.error_code)})")
            if client.complete:
                break
            token = client.evaluate(bytes(response.auth_bytes))
            if client.complete and not token:
                break
        lifetime = getattr(response, "session_lifetime", None)  # v1+ (kio: a timedelta); v0 announces none
        lifetime_ms = 0 if lifetime is None else int(lifetime.total_seconds() * 1000)
    except SaslAuthenticationError as exc:  # the mechanism's own check (a SCRAM server signature that does not verify)
        raise SaslAuthenticationFailed(f"{mechanism} with {peer} failed: {exc}") from None
    return SaslOutcome(mechanism, lifetime_ms)


def _sasl_client(security: ClientSecurity) -> Any:
    from kcli.protocol.sasl import create_client

    return create_client(security.mechanism or "", username=security.username, password=security.password,
                         token=security.token)


def drive(exchange: Generator[Step, Any, SaslOutcome], call: Callable[[int, int, Any], Any]) -> SaslOutcome:
    """Run an exchange over a blocking ``call(api_key, version, body) -> response body``."""
    try:
        step = next(exchange)
        while True:
            step = exchange.send(call(*step))
    except StopIteration as done:
        return done.value
