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
from kcli.errors import KcliError
from kcli.protocol.security import (
    PLAINTEXT,
    ClientSecurity,
    SaslAuthenticationFailed,
    SecurityConfigError,
    drive,
    reauth_deadline,
    sasl_exchange,
)


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
        """From the inter-broker listener's settings as kcli.broker.security.listener_config resolves them; the TLS
        files are loaded now. ConfigError naming the key when the client side cannot be set up."""
        from kcli.broker.security.listener_config import inter_broker_client_properties

        name = config.inter_broker_listener_name
        props = inter_broker_client_properties(config)
        mechanism = props.get("sasl.mechanism", "")
        if mechanism == "OAUTHBEARER" and "sasl.oauthbearer.config" not in props:
            props["sasl.oauthbearer.config"] = f"principal={props.get('sasl.username') or config.broker_id}"
        try:
            security = ClientSecurity.from_properties(props)
        except SecurityConfigError as exc:
            key = f"listener.name.{name.lower()}.{mechanism.lower()}.sasl.jaas.config"
            raise ConfigError(f"inter-broker listener {name}: {exc.reason} (a broker logs in to the others with the "
                              f"username=\"...\" password=\"...\" options of {key})") from None
        result = cls(security, name)
        try:
            result.ssl_context()
        except KcliError as exc:  # kcli.tls.TlsConfigError: a file missing, a wrong password
            raise ConfigError(f"inter-broker listener {name}: {exc.describe()}") from None
        return result

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
