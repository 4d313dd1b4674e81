"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer: ``[authzid] NUL authcid NUL password``, every failure a
SaslAuthenticationException whose text reaches the client."""

from __future__ import annotations

import hmac

from kcli.protocol.sasl._base import IllegalSaslStateError, SaslAuthenticationError, SaslServerCallbacks

MECHANISM = "PLAIN"


def _tokens(text: str) -> list[str]:
    # PlainSaslServer.extractTokens: at most 4 NUL-separated pieces looked at, exactly 3 wanted.
    parts = text.split("\0", 3)
    if len(parts) != 3:
        raise SaslAuthenticationError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
    return parts


class PlainServer:
    mechanism = MECHANISM
    expiry_ms = None

    def __init__(self, callbacks: SaslServerCallbacks) -> None:
        self._callbacks = callbacks
        self.complete = False
        self._authorization_id: str | None = None

    @property
    def authorization_id(self) -> str:
        if not self.complete:
            raise IllegalSaslStateError("Authentication exchange has not completed")
        return self._authorization_id or ""

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslStateError("Authentication exchange already completed")
        authzid, username, password = _tokens(token.decode("utf-8", errors="replace"))
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        try:
            expected = self._callbacks.plain_password(username)
        except Exception as e:  # the callback's own failure, as PlainSaslServer wraps it
            raise SaslAuthenticationError("Authentication failed: credentials for user could not be verified",
                                          detail=f"{type(e).__name__}: {e}") from e
        # Constant-time compare (Kafka 3.x's PlainServerCallbackHandler uses MessageDigest.isEqual).
        if expected is None or not hmac.compare_digest(expected.encode("utf-8"), password.encode("utf-8")):
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        self._authorization_id = username
        self.complete = True
        return b""


class PlainClient:
    mechanism = MECHANISM

    def __init__(self, username: str, password: str, authorization_id: str = "") -> None:
        self._token = f"{authorization_id}\0{username}\0{password}".encode("utf-8")
        self.complete = False

    def initial(self) -> bytes:
        self.complete = True  # PLAIN has one message; the server's answer is empty
        return self._token

    def evaluate(self, challenge: bytes) -> bytes:
        if challenge:
            raise SaslAuthenticationError("Unexpected challenge to SASL/PLAIN client")
        return b""
