"""DescribeClientQuotas (48) and AlterClientQuotas (49) (KIP-546), as ZooKeeper-mode Kafka answers them
(KafkaApis.handle*ClientQuotasRequest, ZkAdminManager): DESCRIBE_CONFIGS / ALTER_CONFIGS on the CLUSTER, Kafka's
validation and error texts, the quotas in ``/config/users``, ``/config/clients`` (a standalone broker: its local
store, same paths and JSON) through kcli.zk.quotas. Any broker answers both (no forwarding to the controller in
ZooKeeper mode); an alteration is announced on /config/changes, so every broker applies it, and this broker
applies it at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.handlers.common import ZERO, RequestContext, build, response_module
from kcli.errors import KcliError
from kcli.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from kcli.zk import quotas as zk_quotas

CLUSTER_AUTHORIZATION_FAILED = "Cluster authorization failed."
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2  # DescribeClientQuotasRequest's match types


def _code_for(exc: Exception) -> ErrorCode:
    if isinstance(exc, zk_quotas.InvalidQuota):
        return ErrorCode.invalid_request
    if isinstance(exc, zk_quotas.UnsupportedEntityType):
        return ErrorCode.unsupported_version
    return ErrorCode.unknown_server_error


def _message(exc: Exception) -> str:
    return getattr(exc, "reason", None) or str(exc)


def _store(ctx: RequestContext) -> Any:
    quotas = getattr(ctx.services, "quotas", None)
    return None if quotas is None else quotas.store


async def describe_client_quotas(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)

    def failed(code: ErrorCode, message: str | None) -> Any:  # DescribeClientQuotasRequest.getErrorResponse
        return build(R, "DescribeClientQuotasResponse", throttle_time=ZERO, error_code=code, error_message=message,
                     entries=None)

    if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return failed(ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED)
    components: list[tuple[str, Any]] = []
    for c in req.components:
        match_type = int(c.match_type)
        if match_type == MATCH_EXACT:
            if c.match is None:  # ClientQuotaFilterComponent.ofEntity refuses a null name
                return failed(ErrorCode.invalid_request, f"Exact match for entity type {c.entity_type} needs a name")
            components.append((c.entity_type, c.match))
        elif match_type == MATCH_DEFAULT:
            components.append((c.entity_type, None))
        elif match_type == MATCH_SPECIFIED:
            components.append((c.entity_type, ...))
        else:
            return failed(ErrorCode.invalid_request, f"Unexpected match type: {match_type}")
    store = _store(ctx)
    if store is None:
        return failed(ErrorCode.unknown_server_error, "this broker keeps no client quotas")
    try:
        found = await asyncio.to_thread(zk_quotas.describe, store, components, bool(req.strict))
    except KcliError as exc:
        return failed(_code_for(exc), _message(exc))
    entries = tuple(
        build(R, "EntryData",
              entity=tuple(build(R, "EntityData", entity_type=k, entity_name=n) for k, n in entity),
              values=tuple(build(R, "ValueData", key=key, value=value) for key, value in sorted(values.items())))
        for entity, values in found.items())
    return build(R, "DescribeClientQuotasResponse", throttle_time=ZERO, error_code=ErrorCode.none,
                 error_message=None, entries=entries)


async def alter_client_quotas(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    allowed = ctx.authorize(AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)
    store = _store(ctx)
    quotas = getattr(ctx.services, "quotas", None)
    results: list[tuple[ErrorCode, str | None]] = []
    applied: list[tuple[zk_quotas.Entity, dict[str, float]]] = []
    for entry in req.entries:
        if not allowed:
            results.append((ErrorCode.cluster_authorization_failed, CLUSTER_AUTHORIZATION_FAILED))
            continue
        if store is None:
            results.append((ErrorCode.unknown_server_error, "this broker keeps no client quotas"))
            continue
        pairs = [(e.entity_type, e.entity_name) for e in entry.entity]
        ops = [(op.key, None if op.remove else float(op.value)) for op in entry.ops]
        try:
            entity = zk_quotas.normalize(pairs)
            after = await asyncio.to_thread(zk_quotas.alter_entity, store, entity, ops,
                                            validate_only=bool(req.validate_only))
        except KcliError as exc:
            results.append((_code_for(exc), _message(exc)))
            continue
        if not req.validate_only:
            applied.append((entity, after))
        results.append((ErrorCode.none, None))
    for entity, after in applied:  # this broker at once; the others through /config/changes
        quotas.update(entity, after)
    return build(R, "AlterClientQuotasResponse", throttle_time=ZERO, entries=tuple(
        build(R, "EntryData", error_code=code, error_message=message,
              entity=tuple(build(R, "EntityData", entity_type=e.entity_type, entity_name=e.entity_name)
                           for e in entry.entity))
        for entry, (code, message) in zip(req.entries, results)))
