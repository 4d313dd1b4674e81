"""SCRAM APIs: answered SECURITY_DISABLED as Kafka answers them when SASL is not configured
(DescribeUserScramCredentials 50, AlterUserScramCredentials 51). The ACL APIs are in handlers.acls."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers.common import ZERO, RequestContext, build, response_module

DISABLED = ErrorCode.security_disabled
MESSAGE = "No Authorizer is configured on the broker"


async def describe_user_scram_credentials(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    message = "SCRAM credentials need SASL, which kctl broker does not serve yet"
    if req.users is None:  # all users: one top-level error
        return build(R, "DescribeUserScramCredentialsResponse", throttle_time=ZERO, error_code=DISABLED,
                     error_message=message, results=())
    # librdkafka expects one result per asked user (it aborts on a short list): the error goes on each.
    return build(R, "DescribeUserScramCredentialsResponse", throttle_time=ZERO, error_code=ErrorCode.none,
                 error_message=None, results=tuple(
                     build(R, "DescribeUserScramCredentialsResult", user=u.name, error_code=DISABLED,
                           error_message=message, credential_infos=()) for u in req.users))


async def alter_user_scram_credentials(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    users = [d.name for d in req.deletions] + [u.name for u in req.upsertions]
    return build(R, "AlterUserScramCredentialsResponse", throttle_time=ZERO, results=tuple(
        build(R, "AlterUserScramCredentialsResult", user=u, error_code=DISABLED,
              error_message="SCRAM credentials need SASL, which kctl broker does not serve yet") for u in users))
