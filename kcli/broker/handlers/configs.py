"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kcli.broker.errors import InvalidRequestError
from kcli.broker.handlers.common import ZERO, RequestContext, attempt, build, build_all, response_module
from kcli.storage.log_config import ConfigEntry, ConfigSource, ConfigSynonym, ConfigType

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


def _broker_entries(ctx: RequestContext) -> list[ConfigEntry]:
    config = ctx.services.config
    explicit = config.explicit_values()
    out = []
    for key, value in sorted(config.values.items()):
        if value is None:
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        source = ConfigSource.STATIC_BROKER_CONFIG if key in explicit else ConfigSource.DEFAULT_CONFIG
        synonyms = (ConfigSynonym(key, text, source),) if key in explicit else ()
        out.append(ConfigEntry(key, text, source, synonyms, ConfigType.STRING, read_only=True))
    return out


def _entries(ctx: RequestContext, resource: Any) -> list[ConfigEntry]:
    if resource.resource_type == TOPIC:
        return ctx.services.admin.describe_config(resource.resource_name)
    if resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(ctx.services.broker_id)):
            raise InvalidRequestError(f"Unexpected broker id, expected {ctx.services.broker_id} or empty "
                                      f"string, but received {resource.resource_name}")
        return _broker_entries(ctx)
    if resource.resource_type == BROKER_LOGGER:
        return []
    raise InvalidRequestError(f"Unsupported resource type {resource.resource_type} for DescribeConfigs")


async def describe_configs(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    include_synonyms = getattr(req, "include_synonyms", False)
    results = []
    for resource in req.resources:
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


def _alter(req: Any, response: str, apply: Callable[[Any], None]) -> Any:
    """AlterConfigs and IncrementalAlterConfigs: ``apply(resource)`` per topic resource; dynamic broker configs
    are refused (not served yet), as are other resource types."""
    R = response_module(req)

    def one(resource: Any) -> None:
        if resource.resource_type == TOPIC:
            apply(resource)
        elif resource.resource_type in (BROKER, BROKER_LOGGER):
            raise InvalidRequestError("dynamic broker configs are not supported by kctl broker yet: "
                                      "set them in server.properties")
        else:
            raise InvalidRequestError(f"Unsupported resource type {resource.resource_type}")

    responses = []
    for resource in req.resources:
        _, error, message = attempt(lambda r=resource: one(r))
        responses.append(build(R, "AlterConfigsResourceResponse", error_code=error, error_message=message,
                               resource_type=resource.resource_type, resource_name=resource.resource_name))
    return build(R, response, throttle_time=ZERO, responses=tuple(responses))


async def alter_configs(ctx: RequestContext, req: Any) -> Any:
    admin = ctx.services.admin
    return _alter(req, "AlterConfigsResponse", lambda r: admin.set_config(
        r.resource_name, {c.name: c.value for c in r.configs}, validate_only=req.validate_only))


async def incremental_alter_configs(ctx: RequestContext, req: Any) -> Any:
    admin = ctx.services.admin
    return _alter(req, "IncrementalAlterConfigsResponse", lambda r: admin.incremental_config(
        r.resource_name, [(c.name, int(c.config_operation), c.value) for c in r.configs],
        validate_only=req.validate_only))
