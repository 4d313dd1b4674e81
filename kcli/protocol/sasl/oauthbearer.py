"""OAUTHBEARER (RFC 7628; KIP-255) with Kafka's *unsecured* token validator: the token is an unsigned JWS
(``alg: none``) whose claims name the principal and the expiry. For tests and development only, as in Kafka."""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from collections.abc import Callable, Mapping

from kcli.protocol.sasl._base import IllegalSaslStateError, SaslAuthenticationError

MECHANISM = "OAUTHBEARER"
CONTROL_A = "\x01"

# OAuthBearerClientInitialResponse's patterns.
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7e \t\r\n]+"
_KVPAIRS = rf"(?:{_KEY}={_VALUE}\x01)*"
_INITIAL = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<kvpairs>{_KVPAIRS})\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)", re.ASCII)


class _InvalidToken(Exception):
    def __init__(self, reason: str, scope: str | None = None) -> None:
        super().__init__(reason)
        self.scope = scope


def _b64url_json(split: str) -> dict:
    try:
        raw = base64.urlsafe_b64decode(split + "=" * (-len(split) % 4))
    except (binascii.Error, ValueError):
        raise _InvalidToken("malformed Base64 URL encoded value") from None
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _InvalidToken("malformed JSON") from None
    if not isinstance(value, dict):
        raise _InvalidToken("malformed JSON")
    return value


def _number(claims: dict, name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _InvalidToken(f"The '{name}' claim was not of type Number: {type(value).__name__}")
    return float(value)


def _scope(claims: dict, name: str) -> set[str]:
    value = claims.get(name)
    if value is None:
        return set()
    if isinstance(value, str):
        return {s for s in value.split(" ") if s}
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return {s.strip() for s in value if s.strip()}
    raise _InvalidToken(f"The '{name}' claim was not of type String or List: {type(value).__name__}")


def validate_unsecured_token(token: str, *, now_ms: int, principal_claim: str = "sub", scope_claim: str = "scope",
                             required_scope: tuple[str, ...] = (), clock_skew_ms: int = 0) -> tuple[str, int]:
    """OAuthBearerUnsecuredJws + OAuthBearerUnsecuredValidatorCallbackHandler: (principal, exp in ms), or
    ``_InvalidToken`` naming Kafka's reason."""
    if ".." in token:
        raise _InvalidToken("Malformed compact serialization contains '..'")
    splits = token.split(".")
    if len(splits) != 3:
        raise _InvalidToken(
            "Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded values")
    header = _b64url_json(splits[0])
    claims = _b64url_json(splits[1])
    if header.get("alg") != "none":
        raise _InvalidToken("Unsecured JWS must have 'none' for an algorithm")
    if splits[2]:
        raise _InvalidToken("Unsecured JWS must not contain a digital signature")
    exp = _number(claims, "exp")
    if exp is None:
        raise _InvalidToken("No expiration time in JWT")
    principal = claims.get(principal_claim)
    if principal is None or (isinstance(principal, str) and not principal.strip()):
        raise _InvalidToken(f"No principal name in JWT claim: {principal_claim}")
    if not isinstance(principal, str):
        raise _InvalidToken(f"The {principal_claim} claim had the incorrect type: {type(principal).__name__}")
    iat = _number(claims, "iat")
    if iat is not None and 1000 * iat > now_ms + clock_skew_ms:
        raise _InvalidToken(f"The Issued At value ({iat:f} seconds) was after the indicated time ({now_ms} ms) "
                            f"plus allowable clock skew ({clock_skew_ms} ms)")
    if now_ms - clock_skew_ms >= 1000 * exp:
        raise _InvalidToken(f"The indicated time ({now_ms} ms) minus allowable clock skew ({clock_skew_ms} ms) was "
                            f"on or after the Expiration Time value ({exp:f} seconds)")
    if iat is not None and exp <= iat:
        raise _InvalidToken(f"The Expiration Time time ({exp:f} seconds) was not after the Issued At time "
                            f"({iat:f} seconds)")
    granted = _scope(claims, scope_claim)
    for needed in required_scope:
        if needed not in granted:
            listed = "[" + ", ".join(required_scope) + "]"
            raise _InvalidToken(f"The provided scope ({sorted(granted)}) was missing a required scope ({needed}).  "
                                f"All required scope elements: {listed}", scope=listed)
    return principal, int(1000 * exp)


def _json_error(status: str, scope: str | None) -> str:
    # OAuthBearerSaslServer.jsonErrorResponse, byte for byte (note the space after each comma).
    out = f'{{"status":"{status}"'
    if scope is not None:
        out += f', "scope":"{scope}"'
    return out + "}"


class OAuthBearerServer:
    """OAuthBearerSaslServer with the unsecured validator. ``options`` are the JAAS options of Kafka's
    OAuthBearerLoginModule: ``unsecuredValidatorPrincipalClaimName`` (sub), ``unsecuredValidatorScopeClaimName``
    (scope), ``unsecuredValidatorRequiredScope`` (space-separated), ``unsecuredValidatorAllowableClockSkewMs``."""

    mechanism = MECHANISM

    def __init__(self, options: Mapping[str, str] | None = None, *,
                 clock: Callable[[], float] = time.time) -> None:
        options = options or {}
        self._principal_claim = (options.get("unsecuredValidatorPrincipalClaimName") or "sub").strip()
        self._scope_claim = (options.get("unsecuredValidatorScopeClaimName") or "scope").strip()
        self._required = tuple(s for s in (options.get("unsecuredValidatorRequiredScope") or "").split(" ") if s)
        self._skew = int(options.get("unsecuredValidatorAllowableClockSkewMs") or 0)
        self._clock = clock
        self.complete = False
        self.expiry_ms: int | None = None
        self.extensions: dict[str, str] = {}
        self._principal: str | None = None
        self._error: str | None = None
        self.invalid_reason: str | None = None  # Kafka's (log-only) reason the last token was refused

    @property
    def authorization_id(self) -> str:
        if not self.complete:
            raise IllegalSaslStateError("Authentication exchange has not completed")
        return self._principal or ""

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise IllegalSaslStateError("Authentication exchange already completed")
        if token == b"\x01" and self._error is not None:
            # The client acknowledged our error token (RFC 7628 3.2.2): now fail, with that JSON as the message.
            raise SaslAuthenticationError(self._error)
        self._error = None
        message = token.decode("utf-8", errors="replace")
        m = _INITIAL.fullmatch(message)
        if not m:
            raise SaslAuthenticationError.hidden(MECHANISM, "Invalid OAUTHBEARER client first message")
        props: dict[str, str] = {}
        for item in filter(None, m["kvpairs"].split(CONTROL_A)):
            key, _, value = item.partition("=")
            props[key] = value
        auth = props.pop("auth", None)
        if auth is None:
            raise SaslAuthenticationError.hidden(
                MECHANISM, "Invalid OAUTHBEARER client first message: 'auth' not specified")
        a = _AUTH.fullmatch(auth)
        if not a:
            raise SaslAuthenticationError.hidden(
                MECHANISM, "Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if a["scheme"].lower() != "bearer":
            raise SaslAuthenticationError.hidden(
                MECHANISM, f"Invalid scheme in OAUTHBEARER client first message: {a['scheme']}")
        try:
            principal, expiry = validate_unsecured_token(
                a["token"], now_ms=int(self._clock() * 1000), principal_claim=self._principal_claim,
                scope_claim=self._scope_claim, required_scope=self._required, clock_skew_ms=self._skew)
        except _InvalidToken as e:
            self._error = _json_error("insufficient_scope" if e.scope is not None else "invalid_token", e.scope)
            self.invalid_reason = str(e)
            return self._error.encode("utf-8")
        authzid = m["authzid"] or ""
        if authzid and authzid != principal:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different from "
                f"the token's principal name ({principal})")
        # The unsecured validator accepts every extension (OAuthBearerUnsecuredValidatorCallbackHandler).
        self.extensions = props
        self._principal = principal
        self.expiry_ms = expiry
        self.complete = True
        return b""


def _b64url(data: dict) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode("utf-8")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def unsecured_token(principal: str, *, lifetime_s: float = 3600, scope: tuple[str, ...] = (),
                    now: float | None = None, principal_claim: str = "sub", **claims: object) -> str:
    """An unsigned JWS as Kafka's OAuthBearerUnsecuredLoginCallbackHandler makes one (``{"alg":"none"}``)."""
    issued = time.time() if now is None else now
    body: dict[str, object] = {"iat": int(issued), "exp": int(issued + lifetime_s), principal_claim: principal}
    if scope:
        body["scope"] = list(scope)
    body.update(claims)
    return f"{_b64url({'alg': 'none'})}.{_b64url(body)}."


class OAuthBearerClient:
    """OAuthBearerSaslClient: the initial response carries the token; an error challenge is answered 0x01."""

    mechanism = MECHANISM

    def __init__(self, token: str, *, authorization_id: str = "", extensions: Mapping[str, str] | None = None) -> None:
        self._token = token
        self._authzid = authorization_id
        self._extensions = dict(extensions or {})
        self._state = "initial"
        self.complete = False
        self.server_error: str | None = None

    def initial(self) -> bytes:
        if self._state != "initial":
            raise IllegalSaslStateError(f"Unexpected challenge in Sasl client state {self._state.upper()}")
        self._state = "server-first"
        ext = "".join(f"{k}={v}{CONTROL_A}" for k, v in self._extensions.items())
        authzid = f"a={self._authzid}" if self._authzid else ""
        return f"n,{authzid},{CONTROL_A}auth=Bearer {self._token}{CONTROL_A}{ext}{CONTROL_A}".encode("utf-8")

    def evaluate(self, challenge: bytes) -> bytes:
        if self._state != "server-first":
            raise IllegalSaslStateError(f"Unexpected challenge in Sasl client state {self._state.upper()}")
        if challenge:
            # The server's JSON error: acknowledge it; its SaslAuthenticate answer then carries the failure.
            self.server_error = challenge.decode("utf-8", errors="replace")
            self._state = "after-failure"
            return CONTROL_A.encode("ascii")
        self._state = "complete"
        self.complete = True
        return b""
