"""DescribeUserScramCredentials (50) and AlterUserScramCredentials (51) (KIP-554), as ZooKeeper-mode Kafka answers
them (KafkaApis.handle*UserScramCredentialsRequest, ZkAdminManager): DESCRIBE / ALTER on the CLUSTER, Alter only
on the active controller, Kafka's validation and error texts, credentials in ``/config/users/<user>`` (a
standalone broker: its local store, same paths and JSON) through the broker's CredentialCache.

The client salts and hashes (Alter carries salt + salted password, never the password); the broker derives
StoredKey and ServerKey from them (ScramFormatter.generateCredential).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers.common import ZERO, RequestContext, build, response_module
from kcli.errors import KcliError
from kcli.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from kcli.protocol.sasl import MAX_ITERATIONS, MIN_ITERATIONS, ScramCredential, ScramMechanism
from kcli.zk.scram import ScramCredentialNotFound

# ZkAdminManager's texts
USERNAME_EMPTY = "Username must not be empty"
DESCRIBE_MISSING = "Attempt to describe a user credential that does not exist"
DESCRIBE_TWICE = "Cannot describe SCRAM credentials for the same user twice in a single request"
UNKNOWN_MECHANISM = "Unknown SCRAM mechanism"
TOO_FEW = "Too few iterations"
TOO_MANY = "Too many iterations"
ALTER_TWICE = "A user credential cannot be altered twice in the same request"
DELETE_MISSING = "Attempt to delete a user credential that does not exist"
# ApiError messages of Errors' default exceptions
CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."
NOT_CONTROLLER = "This is not the correct controller for this cluster."


def _unavailable(ctx: RequestContext) -> str | None:
    if ctx.services.credentials is None:
        return "this broker keeps no SCRAM credentials"
    return None


# -- DescribeUserScramCredentials --------------------------------------------------------------------------------
async def describe_user_scram_credentials(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    users = None if req.users is None else [u.name for u in req.users]

    def top_level(code: ErrorCode, message: str) -> Any:
        # DescribeUserScramCredentialsRequest.getErrorResponse: the error at the top and on each asked user
        return build(R, "DescribeUserScramCredentialsResponse", throttle_time=ZERO, error_code=code,
                     error_message=message, results=tuple(
                         build(R, "DescribeUserScramCredentialsResult", user=u, error_code=code, error_message=message,
                               credential_infos=()) for u in users or ()))

    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return top_level(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED)
    problem = _unavailable(ctx)
    if problem:
        return top_level(ErrorCode.unknown_server_error, problem)
    credentials = ctx.services.credentials
    try:
        results = await asyncio.to_thread(_describe, credentials, users)
    except KcliError as exc:  # the store cannot be read (ZooKeeper gone): Kafka's top-level error
        return top_level(ErrorCode.unknown_server_error, exc.reason)
    return build(R, "DescribeUserScramCredentialsResponse", throttle_time=ZERO, error_code=ErrorCode.none,
                 error_message=None, results=tuple(
                     build(R, "DescribeUserScramCredentialsResult", user=user, error_code=code, error_message=message,
                           credential_infos=tuple(build(R, "CredentialInfo", mechanism=m, iterations=i)
                                                  for m, i in infos))
                     for user, code, message, infos in results))


def _infos(config: dict[str, str]) -> list[tuple[int, int]] | None:
    """(mechanism code, iterations) per SCRAM key, None without any; ValueError for a malformed one."""
    found = [(m, config[m.mechanism_name]) for m in ScramMechanism if m.mechanism_name in config]
    if not found:
        return None
    return [(m.value, ScramCredential.from_config_string(text).iterations) for m, text in found]


def _describe(credentials: Any, users: list[str] | None) -> list[tuple[str, ErrorCode, str | None, list]]:
    """ZkAdminManager.describeUserScramCredentials: all users (sorted, only those with credentials) when none or
    an empty list is named; else one result per distinct name, in the order asked."""
    out: dict[str, tuple[str, ErrorCode, str | None, list]] = {}

    def add(user: str, config: dict[str, str] | KcliError, explicit: bool) -> None:
        try:
            if isinstance(config, KcliError):
                raise ValueError(config.describe())
            infos = _infos(config)
        except ValueError as exc:
            out[user] = (user, ErrorCode.unknown_server_error, str(exc), [])
            return
        if infos is not None:
            out[user] = (user, ErrorCode.none, None, infos)
        elif explicit:
            out[user] = (user, ErrorCode.resource_not_found, f"{DESCRIBE_MISSING}: {user}", [])

    if not users:
        for user, config in credentials.stored_configs(credentials.stored_users()).items():
            add(user, config, False)
        return [out[u] for u in sorted(out)]
    counts = Counter(users)
    for user in dict.fromkeys(users):
        if not user:
            out[user] = (user, ErrorCode.resource_not_found, USERNAME_EMPTY, [])
        elif counts[user] > 1:
            out[user] = (user, ErrorCode.duplicate_resource, f"{DESCRIBE_TWICE}: {user}", [])
    for user, config in credentials.stored_configs([u for u in dict.fromkeys(users) if u not in out]).items():
        add(user, config, True)
    return [out[u] for u in dict.fromkeys(users)]


# -- AlterUserScramCredentials -----------------------------------------------------------------------------------
async def alter_user_scram_credentials(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)

    def everyone(code: ErrorCode, message: str) -> Any:
        # AlterUserScramCredentialsRequest.getErrorResponse: each distinct user, sorted
        names = sorted({d.name for d in req.deletions} | {u.name for u in req.upsertions})
        return build(R, "AlterUserScramCredentialsResponse", throttle_time=ZERO, results=tuple(
            build(R, "AlterUserScramCredentialsResult", user=u, error_code=code, error_message=message)
            for u in names))

    controller = ctx.services.controller
    if ctx.services.clustered and (controller is None or not getattr(controller, "is_active", False)):
        return everyone(ErrorCode.not_controller, NOT_CONTROLLER)  # the admin client retries on the controller
    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return everyone(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED)
    problem = _unavailable(ctx)
    if problem:
        return everyone(ErrorCode.unknown_server_error, problem)
    results = await asyncio.to_thread(_alter, ctx.services.credentials, req.upsertions, req.deletions)
    return build(R, "AlterUserScramCredentialsResponse", throttle_time=ZERO, results=tuple(
        build(R, "AlterUserScramCredentialsResult", user=user, error_code=code, error_message=message)
        for user, code, message in results))


def _alter(credentials: Any, upsertions: Any, deletions: Any) -> list[tuple[str, ErrorCode, str | None]]:
    """ZkAdminManager.alterUserScramCredentials: per-user validation (the whole user fails), then one write per
    user of all its changes; results: refused users, duplicates, missing deletions, failed writes, successes."""
    illegal: dict[str, str] = {}
    for d in deletions:
        if not d.name:
            illegal[d.name] = USERNAME_EMPTY
        elif ScramMechanism.from_code(int(d.mechanism)) is None:
            illegal[d.name] = UNKNOWN_MECHANISM
    for u in upsertions:
        if not u.name:
            illegal[u.name] = USERNAME_EMPTY
        elif ScramMechanism.from_code(int(u.mechanism)) is None:
            illegal[u.name] = UNKNOWN_MECHANISM
        elif int(u.iterations) < MIN_ITERATIONS:
            illegal[u.name] = TOO_FEW
        elif int(u.iterations) > MAX_ITERATIONS:
            illegal[u.name] = TOO_MANY
    results: list[tuple[str, ErrorCode, str | None]] = [
        (user, ErrorCode.unsupported_sasl_mechanism if message == UNKNOWN_MECHANISM
         else ErrorCode.unacceptable_credential, message) for user, message in illegal.items()]

    pairs = [(x.name, int(x.mechanism)) for x in [*upsertions, *deletions] if x.name not in illegal]
    duplicated = list(dict.fromkeys(user for (user, _), n in Counter(pairs).items() if n > 1))
    results += [(user, ErrorCode.duplicate_resource, ALTER_TWICE) for user in duplicated]

    valid = [user for user in dict.fromkeys(user for user, _ in pairs) if user not in duplicated]
    missing: list[tuple[str, ErrorCode, str | None]] = []
    failed: list[tuple[str, ErrorCode, str | None]] = []
    done: list[tuple[str, ErrorCode, str | None]] = []
    for user in sorted(valid):
        try:
            upsert = {}
            for u in upsertions:
                if u.name == user:
                    mechanism = ScramMechanism(int(u.mechanism))
                    if not u.salted_password:  # Java's HMAC refuses an empty key
                        raise ValueError("Empty key")
                    upsert[mechanism.mechanism_name] = ScramCredential.from_salted_password(
                        mechanism, bytes(u.salt), bytes(u.salted_password), int(u.iterations))
            delete = [ScramMechanism(int(d.mechanism)).mechanism_name for d in deletions if d.name == user]
            credentials.alter(user, upsert=upsert, delete=delete)
        except ScramCredentialNotFound:
            missing.append((user, ErrorCode.resource_not_found, DELETE_MISSING))
        except (KcliError, ValueError) as exc:
            failed.append((user, ErrorCode.unknown_server_error, getattr(exc, "reason", None) or str(exc)))
        else:
            done.append((user, ErrorCode.none, None))
    return results + missing + failed + done
