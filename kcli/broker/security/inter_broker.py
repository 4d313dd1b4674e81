"""The broker as a client of the other brokers: the inter-broker listener's security (kafka-security.md §1.2).

Replica fetchers, the controller's request threads, transaction markers and controlled shutdown connect to the
*target* broker's endpoint of ``inter.broker.listener.name`` (or the listener named by
``security.inter.broker.protocol``) and speak that listener's protocol: TLS with the broker's own truststore (and
keystore, for a peer that requires client certificates) resolved with the listener's prefixes, then SASL with
``sasl.mechanism.inter.broker.protocol`` as the user named by the ``username``/``password`` options of the
listener's ``listener.name.<name>.<mechanism>.sasl.jaas.config`` (Kafka's broker logs in with those).
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from kcli.broker.config import BrokerConfig, ConfigError
from kcli.protocol.security import (
    PLAINTEXT,
    ClientSecurity,
    SaslAuthenticationFailed,
    SecurityConfigError,
    drive,
    parse_jaas_config,
    reauth_deadline,
    sasl_exchange,
)

# The listener's ssl.* a client side reads (ssl.client.auth, principal mapping rules are the server side's)
_CLIENT_SSL_KEYS = ("ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
                    "ssl.truststore.certificates", "ssl.keystore.type", "ssl.keystore.location",
                    "ssl.keystore.password", "ssl.key.password", "ssl.keystore.certificate.chain", "ssl.keystore.key",
                    "ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites",
                    "ssl.endpoint.identification.algorithm")


class InterBrokerSecurity:
    """One broker's client side of its inter-broker listener: the settings, one TLS context for every connection,
    and the SASL exchange for blocking sockets (the asyncio side is kcli.broker.network_client's)."""

    def __init__(self, security: ClientSecurity = PLAINTEXT, listener_name: str | None = None) -> None:
        self.security = security
        self.listener_name = listener_name
        self._context: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, config: BrokerConfig) -> InterBrokerSecurity:
        """Raises ConfigError naming the key when the inter-broker listener's client side cannot be set up."""
        name = config.inter_broker_listener_name
        protocol = config.inter_broker_security_protocol
        props: dict[str, str] = {"security.protocol": protocol}
        if protocol in ("SSL", "SASL_SSL"):
            for key in _CLIENT_SSL_KEYS:
                value = config.listener_value(name, key)
                if value is not None:
                    props[key] = str(value)
        if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
            mechanism = str(config["sasl.mechanism.inter.broker.protocol"]).strip().upper()
            key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
            if mechanism == "GSSAPI":
                raise ConfigError(f"inter-broker listener {name} ({protocol}): sasl.mechanism.inter.broker.protocol "
                                  f"is GSSAPI (Kafka's default), which kctl does not speak; set it to PLAIN, "
                                  f"SCRAM-SHA-256 or SCRAM-SHA-512")
            props["sasl.mechanism"] = mechanism
            text = config.prefixed.get(key)
            if mechanism != "OAUTHBEARER":
                if not text:
                    raise ConfigError(f"inter-broker listener {name} ({protocol}) with {mechanism}: set {key} with "
                                      f"the broker's own username=\"...\" password=\"...\"")
                try:
                    options = parse_jaas_config(text, key=key).options
                except SecurityConfigError as exc:
                    raise ConfigError(exc.reason) from None
                if "username" not in options or "password" not in options:
                    raise ConfigError(f"{key}: the broker's inter-broker login needs username=\"...\" and "
                                      f"password=\"...\" options")
                props["sasl.username"], props["sasl.password"] = options["username"], options["password"]
            else:
                props["sasl.oauthbearer.config"] = f"principal={config.broker_id}"
        try:
            security = ClientSecurity.from_properties(props)
        except SecurityConfigError as exc:
            raise ConfigError(f"inter-broker listener {name}: {exc.reason}") from None
        return cls(security, name)

    @property
    def tls(self) -> bool:
        return self.security.protocol.tls

    @property
    def sasl(self) -> bool:
        return self.security.protocol.sasl

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS client context (built once), None on a plaintext listener."""
        if not self.tls:
            return None
        with self._lock:
            if self._context is None:
                from kcli.tls import client_ssl_context

                self._context = client_ssl_context(self.security.ssl)
            return self._context

    # -- blocking sockets (the controller's request threads) -------------------------------------------------
    def wrap(self, sock: socket.socket, host: str) -> socket.socket:
        """``sock`` after the TLS handshake (the same socket on a plaintext listener)."""
        context = self.ssl_context()
        if context is None:
            return sock
        try:
            return context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise

    def authenticate(self, call: Callable[[int, int, Any], Any], peer: str) -> float | None:
        """The SASL exchange over a blocking ``call(api_key, version, body) -> response body``; returns when to
        re-authenticate (KIP-368), None for never. SaslAuthenticationFailed as a ConnectionError."""
        if not self.sasl:
            return None
        try:
            outcome = drive(sasl_exchange(self.security, peer=peer), call)
        except SaslAuthenticationFailed as exc:
            raise InterBrokerAuthenticationError(exc.reason) from None
        return reauth_deadline(time.monotonic(), outcome)


class InterBrokerAuthenticationError(ConnectionError):
    """The peer broker refused this broker's SASL login (its OSError nature puts it on every sender's
    reconnect-and-retry path, as Kafka's NetworkClient treats an authentication failure: logged, retried)."""


PLAINTEXT_INTER_BROKER = InterBrokerSecurity()
