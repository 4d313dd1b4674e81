"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kcli.broker.errors import InvalidRequestError
from kio.schema.errors import ErrorCode

from kcli.broker.handlers import authz
from kcli.broker.handlers.common import ZERO, RequestContext, attempt, build, build_all, response_module
from kcli.protocol.acl import AclOperation, ResourceType
from kcli.storage.log_config import ConfigEntry, ConfigSource

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
# Kafka's Errors messages, which DescribeConfigs puts next to a denial
_DENIED = {TOPIC: (ErrorCode.topic_authorization_failed, "Topic authorization failed."),
           BROKER: (ErrorCode.cluster_authorization_failed, "Cluster authorization failed."),
           BROKER_LOGGER: (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")}


def _denied(ctx: RequestContext, operation: AclOperation, resource: Any) -> bool:
    """DESCRIBE_CONFIGS / ALTER_CONFIGS on the topic, or on the cluster for a broker or its loggers; other
    resource types are not this check's to refuse (the handler's InvalidRequest does)."""
    if resource.resource_type == TOPIC:
        return not ctx.authorize(operation, ResourceType.TOPIC, resource.resource_name)
    if resource.resource_type in (BROKER, BROKER_LOGGER):
        return not authz.cluster(ctx, operation)
    return False


def _entries(ctx: RequestContext, resource: Any) -> list[ConfigEntry]:
    if resource.resource_type == TOPIC:
        return ctx.services.admin.describe_config(resource.resource_name)
    if resource.resource_type == BROKER:
        dynamic = ctx.services.admin.dynamic
        return dynamic.describe(dynamic.per_broker_resource(resource.resource_name))
    if resource.resource_type == BROKER_LOGGER:
        return []
    raise InvalidRequestError(f"Unsupported resource type {resource.resource_type} for DescribeConfigs")


async def describe_configs(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    include_synonyms = getattr(req, "include_synonyms", False)
    results = []
    for resource in req.resources:
        if _denied(ctx, AclOperation.DESCRIBE_CONFIGS, resource):  # before existence
            error, message = _DENIED[resource.resource_type]
            results.append(build(R, "DescribeConfigsResult", error_code=error, error_message=message,
                                 resource_type=resource.resource_type, resource_name=resource.resource_name,
                                 configs=()))
            continue
        entries, error, message = attempt(lambda r=resource: _entries(ctx, r))
        keys = resource.configuration_keys
        configs = tuple(build(
            R, "DescribeConfigsResourceResult", name=d.name, value=d.value, read_only=d.read_only,
            config_source=d.source.value,  # v0's is_default is not served (KIP-896 removed v0)
            is_sensitive=d.sensitive, synonyms=build_all(R, "DescribeConfigsSynonym", (
                dict(name=y.name, value=y.value, source=y.source.value) for y in d.synonyms)) if include_synonyms
            else (), config_type=d.type.value, documentation=d.documentation or None)
            for d in entries or () if keys is None or d.name in keys)
        results.append(build(R, "DescribeConfigsResult", error_code=error, error_message=message,
                             resource_type=resource.resource_type, resource_name=resource.resource_name,
                             configs=configs))
    return build(R, "DescribeConfigsResponse", throttle_time=ZERO, results=tuple(results))


def _alter(ctx: RequestContext, req: Any, response: str, topic: Callable[[Any], None],
           broker: Callable[[Any], None]) -> Any:
    """AlterConfigs and IncrementalAlterConfigs: per resource, a topic's or this broker's configs (KIP-226,
    kcli.broker.dynamic_config); broker loggers (KIP-412) and other resource types are refused."""
    R = response_module(req)

    def one(resource: Any) -> None:
        if resource.resource_type == TOPIC:
            topic(resource)
        elif resource.resource_type == BROKER:
            broker(resource)
        elif resource.resource_type == BROKER_LOGGER:
            raise InvalidRequestError("broker loggers (KIP-412) are not supported by kctl broker")
        else:
            raise InvalidRequestError(f"Unknown resource type {resource.resource_type}")

    responses = []
    for resource in req.resources:
        if _denied(ctx, AclOperation.ALTER_CONFIGS, resource):
            error, message = _DENIED[resource.resource_type][0], None
        else:
            _, error, message = attempt(lambda r=resource: one(r))
        responses.append(build(R, "AlterConfigsResourceResponse", error_code=error, error_message=message,
                               resource_type=resource.resource_type, resource_name=resource.resource_name))
    return build(R, response, throttle_time=ZERO, responses=tuple(responses))


async def alter_configs(ctx: RequestContext, req: Any) -> Any:
    admin = ctx.services.admin
    return _alter(
        ctx, req, "AlterConfigsResponse",
        lambda r: admin.set_config(r.resource_name, {c.name: c.value for c in r.configs},
                                   validate_only=req.validate_only),
        lambda r: admin.dynamic.alter(r.resource_name, {c.name: c.value for c in r.configs},
                                      validate_only=req.validate_only))


async def incremental_alter_configs(ctx: RequestContext, req: Any) -> Any:
    admin = ctx.services.admin

    def ops(resource: Any) -> list[tuple[str, int, str | None]]:
        return [(c.name, int(c.config_operation), c.value) for c in resource.configs]

    return _alter(
        ctx, req, "IncrementalAlterConfigsResponse",
        lambda r: admin.incremental_config(r.resource_name, ops(r), validate_only=req.validate_only),
        lambda r: admin.dynamic.incremental_alter(r.resource_name, ops(r), validate_only=req.validate_only))
