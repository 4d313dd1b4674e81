"""CreateAcls (30), DescribeAcls (29), DeleteAcls (31): Kafka's AclApis over the broker's AclAuthorizer.

Each needs an operation on the CLUSTER resource (DESCRIBE to describe, ALTER to create or delete); a refusal is
CLUSTER_AUTHORIZATION_FAILED for the whole request. Without an authorizer every answer is SECURITY_DISABLED.
Creation results come in request order; an invalid binding (empty name, a name with '/', a CLUSTER resource not
named kafka-cluster, an ANY/UNKNOWN element) is INVALID_REQUEST for that binding only. v0 knows no pattern types
(KIP-290): its bindings and filters are LITERAL. Writes go to the store (ZooKeeper) in a worker thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers.common import ZERO, RequestContext, build, response_module
from kcli.broker.security.authorizer import InvalidAclError
from kcli.protocol.acl import (AccessControlEntry, AccessControlEntryFilter, AclBinding, AclBindingFilter,
                               AclOperation, AclPermissionType, PatternType, ResourcePattern, ResourcePatternFilter,
                               ResourceType)

DISABLED_MESSAGE = "No Authorizer is configured on the broker"
CLUSTER_DENIED = "Cluster authorization failed."


def _enum(cls: Any, code: int) -> Any:
    try:
        return cls(int(code))
    except ValueError:
        return cls.UNKNOWN


def _pattern_type(ctx: RequestContext, item: Any, field: str) -> PatternType:
    if ctx.api_version == 0:  # v0 has no pattern type: LITERAL (KIP-290)
        return PatternType.LITERAL
    return _enum(PatternType, getattr(item, field, PatternType.LITERAL))


def _binding_filter(ctx: RequestContext, f: Any) -> AclBindingFilter:
    return AclBindingFilter(
        ResourcePatternFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                              _pattern_type(ctx, f, "pattern_type_filter")),
        AccessControlEntryFilter(f.principal_filter, f.host_filter, _enum(AclOperation, f.operation),
                                 _enum(AclPermissionType, f.permission_type)))


def _filter_problem(f: AclBindingFilter) -> str | None:
    """What makes Kafka's filter unusable (AclBindingFilter.isUnknown, findIndefiniteField's UNKNOWN cases)."""
    if (f.pattern.resource_type == ResourceType.UNKNOWN or f.pattern.pattern_type == PatternType.UNKNOWN
            or f.entry.operation == AclOperation.UNKNOWN or f.entry.permission_type == AclPermissionType.UNKNOWN):
        return "The filter contains UNKNOWN elements"
    return None


def _error(exc: Exception) -> tuple[ErrorCode, str]:
    if isinstance(exc, InvalidAclError):
        return ErrorCode.invalid_request, exc.reason
    return ErrorCode.unknown_server_error, str(exc)


async def describe_acls(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)

    def answer(code: ErrorCode, message: str | None, resources: tuple = ()) -> Any:
        return build(R, "DescribeAclsResponse", throttle_time=ZERO, error_code=code, error_message=message,
                     resources=resources)

    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster"):
        return answer(ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return answer(ErrorCode.security_disabled, DISABLED_MESSAGE)
    binding_filter = _binding_filter(ctx, req)
    problem = _filter_problem(binding_filter)
    if problem is not None:
        return answer(ErrorCode.invalid_request, problem)
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in authorizer.acls(binding_filter):
        grouped.setdefault(binding.pattern, []).append(binding.entry)
    return answer(ErrorCode.none, None, tuple(
        build(R, "DescribeAclsResource", resource_type=int(p.resource_type), resource_name=p.name,
              pattern_type=int(p.pattern_type), acls=tuple(
                  build(R, "AclDescription", principal=e.principal, host=e.host, operation=int(e.operation),
                        permission_type=int(e.permission_type)) for e in entries))
        for p, entries in grouped.items()))


async def create_acls(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)

    def answer(results: list[tuple[ErrorCode, str | None]]) -> Any:
        return build(R, "CreateAclsResponse", throttle_time=ZERO, results=tuple(
            build(R, "AclCreationResult", error_code=code, error_message=message) for code, message in results))

    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster"):
        return answer([(ErrorCode.cluster_authorization_failed, CLUSTER_DENIED)] * len(req.creations))
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return answer([(ErrorCode.security_disabled, DISABLED_MESSAGE)] * len(req.creations))
    bindings = [AclBinding(ResourcePattern(_enum(ResourceType, c.resource_type), c.resource_name,
                                           _pattern_type(ctx, c, "resource_pattern_type")),
                           AccessControlEntry(c.principal, c.host, _enum(AclOperation, c.operation),
                                              _enum(AclPermissionType, c.permission_type)))
                for c in req.creations]
    outcomes = await asyncio.to_thread(authorizer.create_acls, bindings)
    return answer([(ErrorCode.none, None) if exc is None else _error(exc) for exc in outcomes])


async def delete_acls(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)

    def answer(results: list[tuple[ErrorCode, str | None, tuple]]) -> Any:
        return build(R, "DeleteAclsResponse", throttle_time=ZERO, filter_results=tuple(
            build(R, "DeleteAclsFilterResult", error_code=code, error_message=message, matching_acls=matching)
            for code, message, matching in results))

    if not ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, "kafka-cluster"):
        return answer([(ErrorCode.cluster_authorization_failed, CLUSTER_DENIED, ())] * len(req.filters))
    authorizer = ctx.services.authorizer
    if authorizer is None:
        return answer([(ErrorCode.security_disabled, DISABLED_MESSAGE, ())] * len(req.filters))
    filters = [_binding_filter(ctx, f) for f in req.filters]
    usable = [i for i, f in enumerate(filters) if _filter_problem(f) is None]
    deleted = await asyncio.to_thread(authorizer.delete_acls, [filters[i] for i in usable])
    by_index = dict(zip(usable, deleted))
    results: list[tuple[ErrorCode, str | None, tuple]] = []
    for i, f in enumerate(filters):
        if i not in by_index:
            results.append((ErrorCode.invalid_request, _filter_problem(f), ()))
            continue
        matching = []
        for binding, exc in by_index[i]:
            code, message = (ErrorCode.none, None) if exc is None else _error(exc)
            p, e = binding.pattern, binding.entry
            matching.append(build(R, "DeleteAclsMatchingAcl", error_code=code, error_message=message,
                                  resource_type=int(p.resource_type), resource_name=p.name,
                                  pattern_type=int(p.pattern_type), principal=e.principal, host=e.host,
                                  operation=int(e.operation), permission_type=int(e.permission_type)))
        results.append((ErrorCode.none, None, tuple(matching)))
    return answer(results)
