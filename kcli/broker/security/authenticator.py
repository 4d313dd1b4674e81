"""The server side of SASL on one connection (Kafka's SaslServerAuthenticator; kafka-security.md §2.1, §2.2, §2.6).

Sans-io: the socket server feeds whole frames (the bytes after the 4-byte size prefix) to ``receive`` and acts on
the ``Step`` it returns: write ``response`` (a whole size-prefixed frame); on ``fail`` wait
``connection.failed.authentication.delay.ms`` first, then write and close (KIP-306); on ``close`` close at once.

States (SSA's SaslState): INITIAL_REQUEST and HANDSHAKE_OR_VERSIONS_REQUEST take ApiVersions (answered with the full
table, KIP-511) or SaslHandshake; HANDSHAKE_REQUEST takes SaslHandshake only; AUTHENTICATE takes tokens: framed
SaslAuthenticate requests after SaslHandshake v1, raw ``[int32 size][token]`` frames after v0 (0.10.0 clients,
kafka-python with an old api_version). Any other request before the end fails authentication.
"""

from __future__ import annotations

import datetime
import enum
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.security import KafkaPrincipal, Session
from kcli.broker.security.listener_config import ListenerSecurity
from kcli.protocol import ApiKey, ProtocolError, Request, UnsupportedVersionError, api_versions_response, \
    decode_request, encode_response, response_types

log = logging.getLogger("kcli.broker.security")

REAUTH_MIN_INTERVAL_S = 1.0  # a SaslHandshake on a ready connection within 1 s of the last re-auth goes to KafkaApis


class State(enum.Enum):
    INITIAL_REQUEST = "INITIAL_REQUEST"
    HANDSHAKE_OR_VERSIONS_REQUEST = "HANDSHAKE_OR_VERSIONS_REQUEST"
    HANDSHAKE_REQUEST = "HANDSHAKE_REQUEST"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


@dataclass(frozen=True)
class Step:
    """What the socket server does after one frame."""

    response: bytes | None = None  # a whole frame (size prefix included) to write
    fail: bool = False  # authentication failed: delay, write ``response`` if any, close
    close: bool = False  # close now (no delay: not an authentication failure, or nothing to wait for)
    complete: bool = False  # authenticated: the connection's Session is ``Authenticator.session``
    reason: str = ""  # for the broker's log line


class PlainUsers:
    """PLAIN's callbacks from the listener's JAAS ``user_<name>`` options, SCRAM's from the credential cache."""

    def __init__(self, users: dict[str, str], credentials: Any = None) -> None:
        self.users = users
        self.credentials = credentials

    def plain_password(self, username: str) -> str | None:
        return self.users.get(username)

    def scram_credential(self, username: str, mechanism: str) -> Any:
        if self.credentials is None:
            return None
        return self.credentials.scram_credential(username, mechanism)


def _raw(token: bytes) -> bytes:
    return struct.pack(">i", len(token)) + token


class SaslAuthenticator:
    """One authentication (or re-authentication) exchange of one connection."""

    def __init__(self, security: ListenerSecurity, *, client_address: str = "", credentials: Any = None,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 reauthenticating: Session | None = None,
                 on_request: Callable[[Request], None] | None = None) -> None:
        self.security = security
        self.client_address = client_address
        self.callbacks = PlainUsers(security.plain_users(), credentials)
        self.clock = clock
        self.wall_clock = wall_clock
        self.previous = reauthenticating  # re-authentication (KIP-368): same mechanism, same principal
        self.on_request = on_request
        self.state = State.HANDSHAKE_REQUEST if reauthenticating is not None else State.INITIAL_REQUEST
        self.mechanism: str | None = None
        self.framed = True  # SaslHandshake v1: SaslAuthenticate requests; v0: raw tokens
        self.server: Any = None
        self.session: Session | None = None
        self.session_expiry: float | None = None  # monotonic deadline of the session (KIP-368), None: never
        self.started = clock()

    # -- frames in -----------------------------------------------------------------------------------------
    def max_frame(self) -> int:
        return self.security.max_receive_size

    def oversized(self, size: int) -> Step:
        """A size prefix above sasl.server.max.receive.size (or negative): authentication fails, nothing sent."""
        return self._failed(None, f"SASL frame of {size} bytes is above sasl.server.max.receive.size "
                                  f"({self.security.max_receive_size})")

    def receive(self, frame: bytes) -> Step:
        if self.state in (State.COMPLETE, State.FAILED):
            return Step(close=True, reason=f"frame after {self.state.value}")
        if self.state is State.AUTHENTICATE and not self.framed:
            return self._token(frame, None)
        try:
            request = decode_request(frame)
        except UnsupportedVersionError as exc:
            if exc.response is not None:  # ApiVersions newer than ours: our ranges in v0 (KIP-511)
                if self.state is State.INITIAL_REQUEST:
                    self.state = State.HANDSHAKE_OR_VERSIONS_REQUEST
                return Step(response=exc.response)
            return self._unexpected(f"{exc}")
        except ProtocolError as exc:
            if self.state is State.INITIAL_REQUEST:
                # A 0.9 client's raw GSSAPI token; GSSAPI is never enabled here (listener_config refuses it)
                return self._failed(None, f"first packet is not a Kafka request and GSSAPI is not enabled ({exc})")
            return self._unexpected(str(exc))
        if self.on_request is not None:
            self.on_request(request)
        key = request.api_key
        if key is ApiKey.API_VERSIONS and self.state in (State.INITIAL_REQUEST, State.HANDSHAKE_OR_VERSIONS_REQUEST):
            self.state = State.HANDSHAKE_REQUEST
            return Step(response=encode_response(request, api_versions_response(version=request.api_version)))
        if key is ApiKey.SASL_HANDSHAKE and self.state is not State.AUTHENTICATE:
            return self._handshake(request)
        if key is ApiKey.SASL_AUTHENTICATE and self.state is State.AUTHENTICATE:
            return self._token(request.body.auth_bytes, request)
        if self.state is State.AUTHENTICATE and key is ApiKey.SASL_HANDSHAKE:
            R = response_types(request.body)
            body = R.SaslHandshakeResponse(error_code=ErrorCode.illegal_sasl_state,
                                           mechanisms=tuple(self.security.mechanisms))
            return self._failed(encode_response(request, body), "SaslHandshake during SASL authentication")
        return self._unexpected(f"Unexpected Kafka request of type {request.name} during SASL handshake.")

    # -- the handshake -------------------------------------------------------------------------------------
    def _handshake(self, request: Request) -> Step:
        R = response_types(request.body)
        mechanism = request.body.mechanism
        enabled = tuple(self.security.mechanisms)
        if self.previous is not None and mechanism != self.previous.sasl_mechanism:
            body = R.SaslHandshakeResponse(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled)
            return self._failed(encode_response(request, body),
                                f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                f"re-authentication of mechanism '{self.previous.sasl_mechanism}'")
        if mechanism not in enabled:
            body = R.SaslHandshakeResponse(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled)
            return self._failed(encode_response(request, body),
                                f"Unsupported SASL mechanism {mechanism}")
        from kcli.protocol.sasl import create_server  # H2's mechanisms (sans-io)

        jaas = self.security.jaas.get(mechanism)
        self.server = create_server(mechanism, self.callbacks, options=dict(jaas.options) if jaas else None)
        self.mechanism = mechanism
        self.framed = request.api_version >= 1
        self.state = State.AUTHENTICATE
        log.debug("%s: SaslHandshake v%d, %s with %s tokens", self.client_address, request.api_version, mechanism,
                  "framed" if self.framed else "raw")
        body = R.SaslHandshakeResponse(error_code=ErrorCode.none, mechanisms=enabled)
        return Step(response=encode_response(request, body))

    # -- tokens --------------------------------------------------------------------------------------------
    def _token(self, token: bytes, request: Request | None) -> Step:
        from kcli.protocol.sasl import SaslAuthenticationError, generic_failure_message

        assert self.mechanism is not None
        try:
            challenge = self.server.evaluate(bytes(token))
        except SaslAuthenticationError as exc:
            message = str(exc)
            if getattr(exc, "generic", False) and self.previous is not None:
                message = generic_failure_message(self.mechanism, reauthentication=True)
            detail = getattr(exc, "detail", message)
            code = getattr(exc, "error_code", int(ErrorCode.sasl_authentication_failed))
            return self._failed(self._authenticate_response(request, ErrorCode(code), message, b""), detail)
        except Exception as exc:  # a mechanism's bug must fail this exchange, never the broker
            log.exception("SASL %s mechanism failed on a token from %s", self.mechanism, self.client_address)
            message = generic_failure_message(self.mechanism)
            return self._failed(self._authenticate_response(request, ErrorCode.sasl_authentication_failed, message,
                                                            b""), f"internal error: {exc}")
        lifetime_ms = 0
        if self.server.complete:
            principal = KafkaPrincipal("User", self.server.authorization_id)
            if self.previous is not None and principal != self.previous.principal:
                return self._failed(self._authenticate_response(
                    request, ErrorCode.sasl_authentication_failed,
                    f"Cannot change principals during re-authentication from {self.previous.principal}: "
                    f"{principal}", b""), "principal changed during re-authentication")
            lifetime_ms = self._session_lifetime_ms()
            self.session_expiry = None if lifetime_ms <= 0 else self.clock() + lifetime_ms / 1000
            self.session = Session(principal, self.client_address, self.security.listener_name,
                                   self.security.security_protocol, self.mechanism)
            self.state = State.COMPLETE
        response = (self._authenticate_response(request, ErrorCode.none, None, challenge, lifetime_ms)
                    if request is not None else _raw(challenge))
        return Step(response=response, complete=self.state is State.COMPLETE)

    def _session_lifetime_ms(self) -> int:
        """KIP-368: connections.max.reauth.ms of the listener and mechanism, bounded by the credential's expiry
        (OAUTHBEARER's exp); 0: the session does not expire."""
        max_reauth = int(self.security.reauth_ms.get(self.mechanism or "", 0))
        expiry_ms = getattr(self.server, "expiry_ms", None)
        if expiry_ms is not None:
            remaining = max(0, int(expiry_ms - self.wall_clock() * 1000))
            return min(remaining, max_reauth) if max_reauth > 0 else max(remaining, 1)
        return max_reauth

    def _authenticate_response(self, request: Request | None, code: ErrorCode, message: str | None, token: bytes,
                               lifetime_ms: int = 0) -> bytes | None:
        if request is None:
            return None  # raw mode: a failure has no error token, the broker just closes
        R = response_types(request.body)
        fields: dict[str, Any] = dict(error_code=code, error_message=message, auth_bytes=token)
        if request.api_version >= 1:
            fields["session_lifetime"] = datetime.timedelta(milliseconds=lifetime_ms)
        return encode_response(request, R.SaslAuthenticateResponse(**fields))

    # -- failures ------------------------------------------------------------------------------------------
    def _failed(self, response: bytes | None, reason: str) -> Step:
        self.state = State.FAILED
        what = "re-authentication" if self.previous is not None else "authentication"
        log.info("Failed %s with %s (%s)", what, self.client_address, reason)
        return Step(response=response, fail=True, reason=reason)

    def _unexpected(self, reason: str) -> Step:
        """IllegalSaslStateException: in the handshake states no response, fail and close."""
        return self._failed(None, reason)
