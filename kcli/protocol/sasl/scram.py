"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677; KIP-84) as Kafka's ScramSaslServer/ScramSaslClient:
the maths of ScramFormatter, the messages as ScramMessages parses them (its regular expressions, extensions,
``tokenauth``), the credential's stored form of ScramCredentialUtils, and Kafka 3.9's client-final nonce check."""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from kcli.protocol.sasl._base import IllegalSaslStateError, SaslAuthenticationError, SaslServerCallbacks


class ScramMechanism(enum.Enum):
    """Kafka's ScramMechanism; the value is the wire code of AlterUserScramCredentials (KIP-554)."""

    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def mechanism_name(self) -> str:
        return self.name.replace("_", "-")

    @property
    def hash_name(self) -> str:
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"

    @property
    def min_iterations(self) -> int:
        return MIN_ITERATIONS

    @property
    def max_iterations(self) -> int:
        return MAX_ITERATIONS

    @classmethod
    def from_name(cls, name: str) -> "ScramMechanism":
        """From ``SCRAM-SHA-256`` (any case, ``_`` accepted); ValueError otherwise."""
        key = name.strip().upper().replace("-", "_")
        try:
            return cls[key]
        except KeyError:
            raise ValueError(f"unknown SCRAM mechanism {name!r} (SCRAM-SHA-256 or SCRAM-SHA-512)") from None

    @classmethod
    def from_code(cls, code: int) -> "ScramMechanism | None":
        try:
            return cls(code)
        except ValueError:
            return None


MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384  # enforced only by AlterUserScramCredentials (ZkAdminManager), as Kafka does
MECHANISMS = tuple(m.mechanism_name for m in ScramMechanism)


def _mech(mechanism: "str | ScramMechanism") -> ScramMechanism:
    return mechanism if isinstance(mechanism, ScramMechanism) else ScramMechanism.from_name(mechanism)


# ---------------------------------------------------------------------------------------------- ScramFormatter


def secure_random_string() -> str:
    """Kafka's nonce and salt text: a random 130-bit number in base 36 (``BigInteger(130, rnd).toString(36)``)."""
    n = secrets.randbits(130)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = []
    while True:
        n, r = divmod(n, 36)
        out.append(digits[r])
        if not n:
            return "".join(reversed(out))


def _hmac(mech: ScramMechanism, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, mech.hash_name).digest()


def _hash(mech: ScramMechanism, data: bytes) -> bytes:
    return hashlib.new(mech.hash_name, data).digest()


def _xor(a: bytes, b: bytes) -> bytes:
    if len(a) != len(b):
        raise ValueError("Argument arrays must be of the same length")
    return bytes(x ^ y for x, y in zip(a, b))


def salted_password(mechanism: "str | ScramMechanism", password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(UTF-8(password), salt, i), i.e. PBKDF2-HMAC. Kafka applies no SASLprep (ScramFormatter.normalize)."""
    mech = _mech(mechanism)
    return hashlib.pbkdf2_hmac(mech.hash_name, password.encode("utf-8"), salt, iterations)


def client_key(mechanism: "str | ScramMechanism", salted: bytes) -> bytes:
    return _hmac(_mech(mechanism), salted, b"Client Key")


def server_key(mechanism: "str | ScramMechanism", salted: bytes) -> bytes:
    return _hmac(_mech(mechanism), salted, b"Server Key")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


@dataclass(frozen=True)
class ScramCredential:
    """What a broker keeps per user and mechanism (Kafka's ScramCredential): never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: "str | ScramMechanism", salt: bytes, salted: bytes,
                             iterations: int) -> "ScramCredential":
        """ScramFormatter.generateCredential(salt, saltedPassword, iterations): what AlterUserScramCredentials
        derives from the salt and salted password the client sent (KIP-554)."""
        mech = _mech(mechanism)
        return cls(salt=salt, stored_key=_hash(mech, client_key(mech, salted)), server_key=server_key(mech, salted),
                   iterations=iterations)

    @classmethod
    def from_password(cls, mechanism: "str | ScramMechanism", password: str, iterations: int = MIN_ITERATIONS,
                      salt: bytes | None = None) -> "ScramCredential":
        """As kafka-configs derives it: the salt is, like Kafka's, the UTF-8 of a random base-36 string."""
        if salt is None:
            salt = secure_random_string().encode("ascii")
        return cls.from_salted_password(mechanism, salt, salted_password(mechanism, password, salt, iterations),
                                        iterations)

    def to_config_string(self) -> str:
        """ScramCredentialUtils.credentialToString: the value under ``SCRAM-SHA-256`` in /config/users/<user>."""
        return (f"salt={_b64(self.salt)},stored_key={_b64(self.stored_key)},server_key={_b64(self.server_key)},"
                f"iterations={self.iterations}")

    @classmethod
    def from_config_string(cls, text: str) -> "ScramCredential":
        """ScramCredentialUtils.credentialFromString: exactly the four keys; ValueError otherwise."""
        props: dict[str, str] = {}
        for token in text.split(","):
            key, sep, value = token.partition("=")
            if not sep or not key:
                raise ValueError(f"Credentials not valid: {text}")
            props[key] = value
        if set(props) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ValueError(f"Credentials not valid: {text}")
        try:
            return cls(salt=_unb64(props["salt"]), stored_key=_unb64(props["stored_key"]),
                       server_key=_unb64(props["server_key"]), iterations=int(props["iterations"]))
        except (binascii.Error, ValueError, UnicodeEncodeError):
            raise ValueError(f"Credentials not valid: {text}") from None

    def __repr__(self) -> str:  # keys are secrets too: keep them out of logs and tracebacks
        return f"ScramCredential(iterations={self.iterations}, salt=<{len(self.salt)} bytes>)"


def sasl_name(username: str) -> str:
    """ScramFormatter.saslName: ``=`` -> ``=3D``, ``,`` -> ``=2C``."""
    return username.replace("=", "=3D").replace(",", "=2C")


def username_of(name: str) -> str:
    """ScramFormatter.username: undo :func:`sasl_name`; any other ``=`` is invalid (ValueError)."""
    text = name.replace("=2C", ",")
    if "=" in text.replace("=3D", ""):
        raise ValueError(f"Invalid username: {name}")
    return text.replace("=3D", "=")


# ---------------------------------------------------------------------------------------------- ScramMessages
# ScramMessages' Java character classes, spelled for Python's re (``[\x01-\x7F&&[^=,]]`` etc.).

_VALUE_SAFE = r"[\x01-\x2b\x2d-\x3c\x3e-\x7f]+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_B64C = r"[a-zA-Z0-9/+]"
_BASE64 = rf"(?:{_B64C}{{4}})*(?:{_B64C}{{3}}=|{_B64C}{{2}}==)?"
_RESERVED = rf"(?:m={_VALUE},)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"

_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<bare>{_RESERVED}n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))")
_SERVER_FIRST = re.compile(
    rf"{_RESERVED}r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]+){_EXTENSIONS}")
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_BASE64})")
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>{_VALUE_SAFE}))|(?:v=(?P<signature>{_BASE64}){_EXTENSIONS})")


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _parse_extensions(text: str) -> dict[str, str]:
    # Utils.parseMap(ext, "=", ","): split on commas, then at the first '='.
    out: dict[str, str] = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        out[key] = value
    return out


@dataclass(frozen=True)
class ClientFirstMessage:
    authorization_id: str
    sasl_name: str
    nonce: str
    extensions: dict[str, str]
    bare: str  # client-first-message-bare as sent: the first part of AuthMessage

    @classmethod
    def parse(cls, data: bytes) -> "ClientFirstMessage":
        message = _text(data)
        m = _CLIENT_FIRST.fullmatch(message)
        if not m:
            raise ValueError(f"Invalid SCRAM client first message format: {message}")
        return cls(authorization_id=m["authzid"] or "", sasl_name=m["saslname"], nonce=m["nonce"],
                   extensions=_parse_extensions(m["extensions"]), bare=m["bare"])

    @property
    def token_authenticated(self) -> bool:
        """ScramExtensions.tokenAuthenticated: ``tokenauth=true`` (Java's Boolean.parseBoolean) selects a
        delegation token (KIP-48)."""
        return self.extensions.get("tokenauth", "").lower() == "true"


@dataclass(frozen=True)
class ServerFirstMessage:
    nonce: str
    salt: bytes
    iterations: int
    text: str

    @classmethod
    def build(cls, client_nonce: str, server_nonce: str, salt: bytes, iterations: int) -> "ServerFirstMessage":
        nonce = client_nonce + server_nonce
        return cls(nonce, salt, iterations, f"r={nonce},s={_b64(salt)},i={iterations}")

    @classmethod
    def parse(cls, data: bytes) -> "ServerFirstMessage":
        message = _text(data)
        m = _SERVER_FIRST.fullmatch(message)
        if not m:
            raise ValueError(f"Invalid SCRAM server first message format: {message}")
        iterations = int(m["iterations"]) if len(m["iterations"]) < 11 else -1
        if iterations <= 0 or iterations > 0x7FFFFFFF:
            raise ValueError(f"Invalid SCRAM server first message format: invalid iterations {m['iterations']}")
        return cls(m["nonce"], _unb64(m["salt"]), iterations, message)


@dataclass(frozen=True)
class ClientFinalMessage:
    channel_binding: bytes
    nonce: str
    proof: bytes
    without_proof: str  # client-final-message-without-proof as sent: the last part of AuthMessage

    @classmethod
    def parse(cls, data: bytes) -> "ClientFinalMessage":
        message = _text(data)
        m = _CLIENT_FINAL.fullmatch(message)
        if not m:
            raise ValueError(f"Invalid SCRAM client final message format: {message}")
        return cls(_unb64(m["channel"]), m["nonce"], _unb64(m["proof"]), m["without_proof"])


def _auth_message(first: str, server_first: str, final_without_proof: str) -> bytes:
    return f"{first},{server_first},{final_without_proof}".encode("utf-8")


# ---------------------------------------------------------------------------------------------- server


class ScramServer:
    """ScramSaslServer: RECEIVE_CLIENT_FIRST_MESSAGE -> RECEIVE_CLIENT_FINAL_MESSAGE -> COMPLETE (or FAILED)."""

    expiry_ms: int | None = None

    def __init__(self, mechanism: str, callbacks: SaslServerCallbacks) -> None:
        self._mech = ScramMechanism.from_name(mechanism)
        self.mechanism = self._mech.mechanism_name
        self._callbacks = callbacks
        self._state = "first"
        self.complete = False
        self._authorization_id: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first: ClientFirstMessage | None = None
        self._server_first: ServerFirstMessage | None = None
        self.token_authenticated = False

    @property
    def authorization_id(self) -> str:
        if not self.complete:
            raise IllegalSaslStateError("Authentication exchange has not completed")
        return self._authorization_id or ""

    def _fail(self, detail: str) -> SaslAuthenticationError:
        return SaslAuthenticationError.hidden(self.mechanism, detail)

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state == "first":
                return self._first(token)
            if self._state == "final":
                return self._final(token)
            raise IllegalSaslStateError(f"Unexpected challenge in Sasl server state {self._state.upper()}")
        except SaslAuthenticationError:
            self._state = "failed"
            self._credential = self._client_first = self._server_first = None
            raise

    def _first(self, token: bytes) -> bytes:
        try:
            first = ClientFirstMessage.parse(token)
        except ValueError as e:
            raise self._fail(str(e)) from None
        server_nonce = secure_random_string()
        try:
            username = username_of(first.sasl_name)
        except ValueError as e:
            raise self._fail("Authentication failed: Credentials could not be obtained") from e
        if first.token_authenticated:
            # Delegation tokens (KIP-48): only when the callbacks know them (a broker with a token store).
            lookup = getattr(self._callbacks, "delegation_token", None)
            found = lookup(username, self.mechanism) if lookup is not None else None
            if found is None:
                raise self._fail(f"Token Authentication failed: Invalid tokenId : {username}")
            owner, credential, expiry_ms = found
            self._authorization_id = owner
            self.expiry_ms = expiry_ms
            self.token_authenticated = True
        else:
            try:
                credential = self._callbacks.scram_credential(username, self.mechanism)
            except SaslAuthenticationError:
                raise
            except Exception as e:
                raise self._fail("Authentication failed: Credentials could not be obtained") from e
            self._authorization_id = username
        if credential is None:
            raise self._fail("Authentication failed: Invalid user credentials")
        if first.authorization_id and first.authorization_id != username:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        if credential.iterations < self._mech.min_iterations:
            raise self._fail(f"Iterations {credential.iterations} is less than the minimum "
                             f"{self._mech.min_iterations} for {self.mechanism}")
        self._credential = credential
        self._client_first = first
        self._server_first = ServerFirstMessage.build(first.nonce, server_nonce, credential.salt,
                                                      credential.iterations)
        self._state = "final"
        return self._server_first.text.encode("ascii")

    def _final(self, token: bytes) -> bytes:
        assert self._credential is not None and self._client_first is not None and self._server_first is not None
        try:
            final = ClientFinalMessage.parse(token)
        except ValueError as e:
            raise self._fail(str(e)) from None
        # Kafka 3.9's check (3.7 had none): the final nonce must end with the server-first nonce (client nonce
        # + server nonce). Not strict equality: Debian's kcat (librdkafka 2.0) repeats its own nonce in front.
        if not final.nonce.endswith(self._server_first.nonce):
            raise self._fail("Invalid client nonce in the final client message.")
        auth = _auth_message(self._client_first.bare, self._server_first.text, final.without_proof)
        signature = _hmac(self._mech, self._credential.stored_key, auth)
        if len(final.proof) != len(signature):
            raise self._fail("Invalid client credentials")
        computed = _hash(self._mech, _xor(signature, final.proof))
        if not hmac.compare_digest(computed, self._credential.stored_key):
            raise self._fail("Invalid client credentials")
        server_signature = _hmac(self._mech, self._credential.server_key, auth)
        self._credential = self._client_first = self._server_first = None
        self._state = "complete"
        self.complete = True
        return f"v={_b64(server_signature)}".encode("ascii")


# ---------------------------------------------------------------------------------------------- client


class ScramClient:
    """ScramSaslClient: client-first, then client-final from server-first, then the server signature checked."""

    def __init__(self, mechanism: str, username: str, password: str, *, extensions: dict[str, str] | None = None,
                 nonce: str | None = None) -> None:
        self._mech = ScramMechanism.from_name(mechanism)
        self.mechanism = self._mech.mechanism_name
        self._username = username
        self._password = password
        self._extensions = dict(extensions or {})
        self._nonce = nonce or secure_random_string()
        self._state = "initial"
        self.complete = False
        self._bare = ""
        self._salted = b""
        self._auth = b""

    def initial(self) -> bytes:
        if self._state != "initial":
            raise IllegalSaslStateError(f"Unexpected challenge in Sasl client state {self._state.upper()}")
        ext = "".join(f",{k}={v}" for k, v in self._extensions.items())
        self._bare = f"n={sasl_name(self._username)},r={self._nonce}{ext}"
        self._state = "server-first"
        return f"n,,{self._bare}".encode("utf-8")

    def evaluate(self, challenge: bytes) -> bytes:
        try:
            if self._state == "server-first":
                return self._server_first(challenge)
            if self._state == "server-final":
                return self._server_final(challenge)
            raise IllegalSaslStateError(f"Unexpected challenge in Sasl client state {self._state.upper()}")
        except SaslAuthenticationError:
            self._state = "failed"
            raise

    def _server_first(self, challenge: bytes) -> bytes:
        try:
            first = ServerFirstMessage.parse(challenge)
        except ValueError as e:
            raise SaslAuthenticationError(str(e)) from None
        if not first.nonce.startswith(self._nonce):
            raise SaslAuthenticationError("Invalid server nonce: does not start with client nonce")
        if first.iterations < self._mech.min_iterations:
            raise SaslAuthenticationError(f"Requested iterations {first.iterations} is less than the minimum "
                                          f"{self._mech.min_iterations} for {self.mechanism}")
        self._salted = salted_password(self._mech, self._password, first.salt, first.iterations)
        without_proof = f"c=biws,r={first.nonce}"  # biws = base64("n,,"): no channel binding, no authzid
        self._auth = _auth_message(self._bare, first.text, without_proof)
        ck = client_key(self._mech, self._salted)
        proof = _xor(ck, _hmac(self._mech, _hash(self._mech, ck), self._auth))
        self._state = "server-final"
        return f"{without_proof},p={_b64(proof)}".encode("ascii")

    def _server_final(self, challenge: bytes) -> bytes:
        message = _text(challenge)
        m = _SERVER_FINAL.fullmatch(message)
        if not m:
            raise SaslAuthenticationError(f"Invalid SCRAM server final message format: {message}")
        if m["error"] is not None:
            raise SaslAuthenticationError(
                f"Sasl authentication using {self.mechanism} failed with error: {m['error']}")
        expected = _hmac(self._mech, server_key(self._mech, self._salted), self._auth)
        if not hmac.compare_digest(expected, _unb64(m["signature"])):
            raise SaslAuthenticationError("Invalid server signature in server final message")
        self._state = "complete"
        self.complete = True
        return b""
