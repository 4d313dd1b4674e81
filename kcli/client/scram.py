"""SCRAM credentials of users through any broker (KIP-554; kafka-configs --bootstrap-server --entity-type users):
DescribeUserScramCredentials (50) to any broker, AlterUserScramCredentials (51) to the controller (once more after
NOT_CONTROLLER), as Kafka's admin client sends them.

The client salts and hashes: the request carries a random salt and the salted password (PBKDF2), never the
password itself. Per-user failures are reported, not raised, naming the response, the field and the error code.
Nothing here prints.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client.client import KafkaClient, KafkaRequestError, _build
from kcli.client.topics import cluster_view
from kcli.protocol.api import ApiKey
from kcli.protocol.sasl.scram import MIN_ITERATIONS, ScramMechanism, salted_password, secure_random_string


@dataclass(frozen=True)
class CredentialInfo:
    mechanism: str  # SCRAM-SHA-256 / SCRAM-SHA-512 (or UNKNOWN(n) for a code this client does not know)
    iterations: int

    def to_json(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "iterations": self.iterations}


@dataclass(frozen=True)
class UserCredentials:
    """One user's credentials as a broker describes them (mechanisms and iterations only, never keys)."""

    user: str
    credentials: tuple[CredentialInfo, ...] = ()
    error: str | None = None  # the user-level error (no credentials: RESOURCE_NOT_FOUND ...)
    error_code: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "credentials": [c.to_json() for c in self.credentials], "error": self.error}


@dataclass(frozen=True)
class Upsertion:
    user: str
    mechanism: str
    password: str = field(repr=False)
    iterations: int = MIN_ITERATIONS


@dataclass(frozen=True)
class Deletion:
    user: str
    mechanism: str


@dataclass(frozen=True)
class UserAlteration:
    """The outcome for one user of an AlterUserScramCredentials request (all its changes, or none)."""

    user: str
    error: str | None = None
    error_code: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {"user": self.user, "ok": self.ok, "error": self.error}


def _mechanism_name(code: int) -> str:
    mechanism = ScramMechanism.from_code(code)
    return mechanism.mechanism_name if mechanism else f"UNKNOWN({code})"


def _failure(request: str, field_path: str, error: Any, message: str | None) -> str:
    return KafkaRequestError(message or "", request=request, field=field_path, error=ErrorCode(error)).describe()


def describe_user_scram_credentials(client: KafkaClient, users: Sequence[str] | None = None
                                    ) -> list[UserCredentials]:
    """Every user with credentials (``users`` None or empty), else the named ones in the order given. A top-level
    error (CLUSTER_AUTHORIZATION_FAILED ...) raises KafkaRequestError."""
    connection = client._any()
    version, m = connection.module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
    body = connection.call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, _build(
        m, "DescribeUserScramCredentialsRequest",
        users=None if not users else tuple(_build(m, "UserName", name=u) for u in users)))
    label = f"DescribeUserScramCredentialsResponse v{version}"
    if body.error_code != ErrorCode.none:
        raise KafkaRequestError(body.error_message or "", request=label, field="error_code", error=body.error_code)
    out = []
    for r in body.results:
        error = None
        if r.error_code != ErrorCode.none:
            error = _failure(label, f"results[{r.user}].error_code", r.error_code, r.error_message)
        out.append(UserCredentials(r.user, tuple(
            CredentialInfo(_mechanism_name(int(c.mechanism)), int(c.iterations)) for c in r.credential_infos),
            error, int(r.error_code)))
    return out


def alter_user_scram_credentials(client: KafkaClient, upsertions: Sequence[Upsertion] = (),
                                 deletions: Sequence[Deletion] = ()) -> list[UserAlteration]:
    """Set and remove credentials; one result per user named. Salts are random (as Kafka's admin client makes
    them: the UTF-8 of a random base-36 string); salted passwords are PBKDF2 of the UTF-8 password."""
    ups = []
    for u in upsertions:
        mechanism = ScramMechanism.from_name(u.mechanism)
        salt = secure_random_string().encode("ascii")
        ups.append((u.user, mechanism.value, u.iterations, salt,
                    salted_password(mechanism, u.password, salt, u.iterations)))
    dels = [(d.user, ScramMechanism.from_name(d.mechanism).value) for d in deletions]
    for attempt in range(2):
        view = cluster_view(client, [])
        connection = client._node(view.controller_id) if view.controller_id in view.brokers else client._any()
        version, m = connection.module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS)
        body = connection.call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, _build(
            m, "AlterUserScramCredentialsRequest",
            deletions=tuple(_build(m, "ScramCredentialDeletion", name=n, mechanism=c) for n, c in dels),
            upsertions=tuple(_build(m, "ScramCredentialUpsertion", name=n, mechanism=c, iterations=i, salt=s,
                                    salted_password=p) for n, c, i, s, p in ups)))
        if attempt == 0 and any(r.error_code == ErrorCode.not_controller for r in body.results):
            time.sleep(0.2)  # the controller moved: ask Metadata again
            continue
        label = f"AlterUserScramCredentialsResponse v{version}"
        return [UserAlteration(r.user, None if r.error_code == ErrorCode.none else _failure(
            label, f"results[{r.user}].error_code", r.error_code, r.error_message), int(r.error_code))
            for r in body.results]
    raise AssertionError("unreachable")
