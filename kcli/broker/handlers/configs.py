"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import InvalidRequestError, error_code_for, error_message_for
from kcli.broker.handlers.common import ZERO, RequestContext, build, response_module
from kcli.broker.topic_config import STATIC_BROKER_CONFIG, STRING, Described

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8


def _broker_entries(ctx: RequestContext) -> list[Described]:
    config = ctx.services.config
    out = []
    for key, value in sorted(config.values.items()):
        if value is None:
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        source = STATIC_BROKER_CONFIG if key in config.explicit else 5
        out.append(Described(key, text, source, STRING, ((key, text, source),) if source != 5 else (),
                             read_only=True))
    return out


async def describe_configs(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    include_synonyms = getattr(req, "include_synonyms", False)
    results = []
    for resource in req.resources:
        error, message, entries = ErrorCode.none, None, []
        try:
            if resource.resource_type == TOPIC:
                entries = ctx.services.admin.describe_config(resource.resource_name)
            elif resource.resource_type == BROKER:
                if resource.resource_name not in ("", str(ctx.services.broker_id)):
                    raise InvalidRequestError(f"Unexpected broker id, expected {ctx.services.broker_id} or empty "
                                              f"string, but received {resource.resource_name}")
                entries = _broker_entries(ctx)
            elif resource.resource_type == BROKER_LOGGER:
                entries = []
            else:
                raise InvalidRequestError(f"Unsupported resource type {resource.resource_type} for DescribeConfigs")
        except Exception as exc:
            error, message = error_code_for(exc), error_message_for(exc)
        keys = resource.configuration_keys
        configs = tuple(build(
            R, "DescribeConfigsResourceResult", name=d.name, value=d.value, read_only=d.read_only,
            is_default=d.is_default, config_source=d.source, is_sensitive=d.sensitive,
            synonyms=tuple(build(R, "DescribeConfigsSynonym", name=n, value=v, source=s) for n, v, s in d.synonyms)
            if include_synonyms else (), config_type=d.config_type, documentation=None)
            for d in entries if keys is None or d.name in keys)
        results.append(build(R, "DescribeConfigsResult", error_code=error, error_message=message,
                             resource_type=resource.resource_type, resource_name=resource.resource_name,
                             configs=configs))
    return build(R, "DescribeConfigsResponse", throttle_time=ZERO, results=tuple(results))


def _alter(ctx: RequestContext, resource: Any, apply: Any) -> tuple[ErrorCode, str | None]:
    try:
        if resource.resource_type == TOPIC:
            apply()
        elif resource.resource_type in (BROKER, BROKER_LOGGER):
            raise InvalidRequestError("dynamic broker configs are not supported by kctl broker yet: "
                                      "set them in server.properties")
        else:
            raise InvalidRequestError(f"Unsupported resource type {resource.resource_type}")
    except Exception as exc:
        return error_code_for(exc), error_message_for(exc)
    return ErrorCode.none, None


async def alter_configs(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    admin = ctx.services.admin
    responses = []
    for resource in req.resources:
        configs = {c.name: c.value for c in resource.configs}
        error, message = _alter(ctx, resource, lambda r=resource, c=configs: admin.set_config(
            r.resource_name, c, validate_only=req.validate_only))
        responses.append(build(R, "AlterConfigsResourceResponse", error_code=error, error_message=message,
                               resource_type=resource.resource_type, resource_name=resource.resource_name))
    return build(R, "AlterConfigsResponse", throttle_time=ZERO, responses=tuple(responses))


async def incremental_alter_configs(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    admin = ctx.services.admin
    responses = []
    for resource in req.resources:
        ops = [(c.name, int(c.config_operation), c.value) for c in resource.configs]
        error, message = _alter(ctx, resource, lambda r=resource, o=ops: admin.incremental_config(
            r.resource_name, o, validate_only=req.validate_only))
        responses.append(build(R, "AlterConfigsResourceResponse", error_code=error, error_message=message,
                               resource_type=resource.resource_type, resource_name=resource.resource_name))
    return build(R, "IncrementalAlterConfigsResponse", throttle_time=ZERO, responses=tuple(responses))
