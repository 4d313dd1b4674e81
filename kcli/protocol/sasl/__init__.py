"""SASL mechanisms as sans-io state machines (no sockets, no clock but the OAUTHBEARER expiry check): the
broker's authenticator feeds a ``SaslServer`` the client's tokens and sends back what it returns; kctl's client
does the same with a ``SaslClient``.

Server: ``create_server(mechanism, callbacks)`` -> ``.evaluate(token) -> bytes`` (raises SaslAuthenticationError,
whose ``str`` is what Kafka puts in SaslAuthenticate's error_message), ``.complete``, ``.authorization_id``,
``.mechanism``, ``.expiry_ms`` (OAUTHBEARER's token expiry, for KIP-368's session lifetime).
Client: ``create_client(mechanism, username=..., password=..., token=...)`` -> ``.initial()``,
``.evaluate(challenge)``, ``.complete``.

``SaslServerCallbacks`` supplies secrets: ``plain_password(user)`` for PLAIN (the JAAS ``user_<name>`` entries),
``scram_credential(user, mechanism)`` for SCRAM; optionally ``delegation_token(token_id, mechanism) ->
(owner, ScramCredential, expiry_ms) | None`` for SCRAM's ``tokenauth=true`` (KIP-48; without it such logins fail).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
import time

from kcli.protocol.sasl._base import (
    ILLEGAL_SASL_STATE,
    SASL_AUTHENTICATION_FAILED,
    IllegalSaslStateError,
    SaslAuthenticationError,
    SaslClient,
    SaslServer,
    SaslServerCallbacks,
    generic_failure_message,
)
from kcli.protocol.sasl.oauthbearer import OAuthBearerClient, OAuthBearerServer, unsecured_token
from kcli.protocol.sasl.plain import PlainClient, PlainServer
from kcli.protocol.sasl.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramClient,
    ScramCredential,
    ScramMechanism,
    ScramServer,
)

SERVER_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")

__all__ = [
    "ILLEGAL_SASL_STATE", "MAX_ITERATIONS", "MIN_ITERATIONS", "SASL_AUTHENTICATION_FAILED", "SCRAM_MECHANISMS",
    "SERVER_MECHANISMS", "IllegalSaslStateError", "SaslAuthenticationError", "SaslClient", "SaslServer",
    "SaslServerCallbacks", "ScramCredential", "ScramMechanism", "create_client", "create_server",
    "generic_failure_message", "unsecured_token",
]


def create_server(mechanism: str, callbacks: SaslServerCallbacks, *, options: Mapping[str, str] | None = None,
                  clock: Callable[[], float] = time.time) -> SaslServer:
    """A fresh server for one exchange. ``options``: the mechanism's JAAS options (OAUTHBEARER's
    ``unsecuredValidator*``). ValueError for a mechanism not in SERVER_MECHANISMS (the handshake refuses it
    before this is called)."""
    if mechanism == "PLAIN":
        return PlainServer(callbacks)
    if mechanism in SCRAM_MECHANISMS:
        return ScramServer(mechanism, callbacks)
    if mechanism == "OAUTHBEARER":
        return OAuthBearerServer(options, clock=clock)
    raise ValueError(f"Unsupported SASL mechanism {mechanism}")


def create_client(mechanism: str, *, username: str = "", password: str = "", token: str | None = None,
                  authorization_id: str = "", extensions: Mapping[str, str] | None = None) -> SaslClient:
    """A client for one exchange. OAUTHBEARER without ``token`` sends an unsecured token for ``username``
    (as librdkafka's ``enable.sasl.oauthbearer.unsecure.jwt``)."""
    if mechanism == "PLAIN":
        return PlainClient(username, password, authorization_id)
    if mechanism in SCRAM_MECHANISMS:
        return ScramClient(mechanism, username, password, extensions=dict(extensions or {}))
    if mechanism == "OAUTHBEARER":
        return OAuthBearerClient(token if token is not None else unsecured_token(username),
                                 authorization_id=authorization_id, extensions=extensions)
    raise ValueError(f"Unsupported SASL mechanism {mechanism}")
