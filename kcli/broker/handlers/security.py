"""ACL and SCRAM APIs: answered SECURITY_DISABLED as Kafka answers them when no authorizer / SASL is configured
(DescribeAcls 29, CreateAcls 30, DeleteAcls 31, DescribeUserScramCredentials 50, AlterUserScramCredentials 51)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers.common import ZERO, RequestContext, build, response_module

DISABLED = ErrorCode.security_disabled
MESSAGE = "No Authorizer is configured on the broker"


async def describe_acls(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    return build(R, "DescribeAclsResponse", throttle_time=ZERO, error_code=DISABLED, error_message=MESSAGE,
                 resources=())


async def create_acls(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    return build(R, "CreateAclsResponse", throttle_time=ZERO, results=tuple(
        build(R, "AclCreationResult", error_code=DISABLED, error_message=MESSAGE) for _ in req.creations))


async def delete_acls(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    return build(R, "DeleteAclsResponse", throttle_time=ZERO, filter_results=tuple(
        build(R, "DeleteAclsFilterResult", error_code=DISABLED, error_message=MESSAGE, matching_acls=())
        for _ in req.filters))

