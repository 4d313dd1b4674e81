"""What every SASL mechanism shares: the error a failed exchange raises, the callbacks a server asks for users'
secrets, and the two state-machine shapes (``SaslServer``, ``SaslClient``)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

SASL_AUTHENTICATION_FAILED = 58
ILLEGAL_SASL_STATE = 34


def generic_failure_message(mechanism: str, *, reauthentication: bool = False) -> str:
    """The fixed text Kafka's SaslServerAuthenticator sends for any SaslException (wrong proof, unknown user),
    so that a client cannot tell a missing user from a wrong password."""
    what = "re-authentication" if reauthentication else "authentication"
    return (f"Authentication failed during {what} due to invalid credentials with SASL mechanism "
            f"{mechanism}")


class SaslAuthenticationError(Exception):
    """A failed SASL exchange. ``str(error)`` is what Kafka puts in SaslAuthenticate's ``error_message``.

    ``generic`` is True where Kafka raises a plain SaslException: the message is then the fixed
    :func:`generic_failure_message` text and ``detail`` keeps Kafka's own (log-only) reason; an authenticator
    that is re-authenticating substitutes ``generic_failure_message(mech, reauthentication=True)``.
    ``error_code`` is SASL_AUTHENTICATION_FAILED (58), or ILLEGAL_SASL_STATE (34) for a token after the end."""

    error_code = SASL_AUTHENTICATION_FAILED

    def __init__(self, message: str, *, detail: str | None = None, generic: bool = False) -> None:
        super().__init__(message)
        self.detail = detail if detail is not None else message
        self.generic = generic

    @classmethod
    def hidden(cls, mechanism: str, detail: str) -> "SaslAuthenticationError":
        """Kafka's SaslException: the client sees only the generic text."""
        return cls(generic_failure_message(mechanism), detail=detail, generic=True)


class IllegalSaslStateError(SaslAuthenticationError):
    error_code = ILLEGAL_SASL_STATE


@runtime_checkable
class SaslServerCallbacks(Protocol):
    """Where a server finds users' secrets (Kafka's server callback handlers)."""

    def plain_password(self, username: str) -> str | None:
        """PLAIN: the JAAS ``user_<name>="<password>"`` entry of the listener's PlainLoginModule, None if none."""
        ...

    def scram_credential(self, username: str, mechanism: str) -> Any:
        """SCRAM: the user's ``kcli.protocol.sasl.scram.ScramCredential`` for ``SCRAM-SHA-256``/``SCRAM-SHA-512``,
        None if none."""
        ...


class SaslServer(Protocol):
    mechanism: str
    complete: bool
    # Wall-clock ms when the credential expires (OAUTHBEARER's ``exp``), else None: bounds the re-authentication
    # session lifetime (KIP-368; Kafka's CREDENTIAL_LIFETIME_MS negotiated property).
    expiry_ms: int | None

    @property
    def authorization_id(self) -> str: ...

    def evaluate(self, token: bytes) -> bytes:
        """The client's token in, the server's next token out (``b""`` when it has nothing to say).
        Raises SaslAuthenticationError."""
        ...


class SaslClient(Protocol):
    mechanism: str
    complete: bool

    def initial(self) -> bytes: ...

    def evaluate(self, challenge: bytes) -> bytes: ...
