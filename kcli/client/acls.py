"""ACLs through a broker (kafka-acls --bootstrap-server): CreateAcls, DescribeAcls, DeleteAcls at the highest
version both sides speak (v1+: pattern types, KIP-290). Failures per binding or filter come back as messages naming
the response, the field and Kafka's error code; a refusal of the whole request (SECURITY_DISABLED,
CLUSTER_AUTHORIZATION_FAILED) raises KafkaRequestError. Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from kcli.client.client import KafkaClient, KafkaClientError, KafkaRequestError, _build
from kcli.client.topics import _failure, request_module
from kcli.protocol.acl import (AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                               PatternType, ResourcePattern, ResourceType)
from kcli.protocol.api import ApiKey

MIN_VERSION = 1  # v0 knows only LITERAL patterns


def _module(client: KafkaClient, api_key: ApiKey) -> tuple[int, object, object]:
    connection = client._any()
    version, m = request_module(connection, api_key)
    if version < MIN_VERSION:
        raise KafkaClientError(f"the broker at {connection.address} serves only v0 of ACL requests "
                               "(before Kafka 2.0), which kctl does not speak")
    return version, m, connection


def _enum(cls, code):
    try:
        return cls(int(code))
    except ValueError:
        return cls.UNKNOWN


def create_acls(client: KafkaClient, bindings: Sequence[AclBinding]) -> list[str | None]:
    """Per binding, in order: None (created) or why not."""
    if not bindings:
        return []
    version, m, connection = _module(client, ApiKey.CREATE_ACLS)
    body = connection.call(ApiKey.CREATE_ACLS, _build(m, "CreateAclsRequest", creations=tuple(
        _build(m, "AclCreation", resource_type=int(b.pattern.resource_type), resource_name=b.pattern.name,
               resource_pattern_type=int(b.pattern.pattern_type), principal=b.entry.principal, host=b.entry.host,
               operation=int(b.entry.operation), permission_type=int(b.entry.permission_type))
        for b in bindings)))
    name = f"CreateAclsResponse v{version}"
    return [None if r.error_code == ErrorCode.none else _failure(name, f"results[{i}].error_code", r.error_code,
                                                                 r.error_message)
            for i, r in enumerate(body.results)]


def _filter_fields(f: AclBindingFilter) -> dict[str, object]:
    return dict(resource_type_filter=int(f.pattern.resource_type), resource_name_filter=f.pattern.name,
                pattern_type_filter=int(f.pattern.pattern_type), principal_filter=f.entry.principal,
                host_filter=f.entry.host, operation=int(f.entry.operation),
                permission_type=int(f.entry.permission_type))


def describe_acls(client: KafkaClient, binding_filter: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
    version, m, connection = _module(client, ApiKey.DESCRIBE_ACLS)
    body = connection.call(ApiKey.DESCRIBE_ACLS, _build(m, "DescribeAclsRequest", **_filter_fields(binding_filter)))
    if body.error_code != ErrorCode.none:
        raise KafkaRequestError(body.error_message or "", request=f"DescribeAclsResponse v{version}",
                                field="error_code", error=body.error_code)
    return [AclBinding(ResourcePattern(_enum(ResourceType, r.resource_type), r.resource_name,
                                       _enum(PatternType, r.pattern_type)),
                       AccessControlEntry(a.principal, a.host, _enum(AclOperation, a.operation),
                                          _enum(AclPermissionType, a.permission_type)))
            for r in body.resources for a in r.acls]


def delete_acls(client: KafkaClient, filters: Sequence[AclBindingFilter]
                ) -> list[tuple[str | None, list[tuple[AclBinding, str | None]]]]:
    """Per filter: (why it failed or None, the bindings deleted each with None or why its deletion failed)."""
    if not filters:
        return []
    version, m, connection = _module(client, ApiKey.DELETE_ACLS)
    body = connection.call(ApiKey.DELETE_ACLS, _build(m, "DeleteAclsRequest", filters=tuple(
        _build(m, "DeleteAclsFilter", **_filter_fields(f)) for f in filters)))
    name = f"DeleteAclsResponse v{version}"
    out = []
    for i, r in enumerate(body.filter_results):
        error = None if r.error_code == ErrorCode.none else _failure(
            name, f"filter_results[{i}].error_code", r.error_code, r.error_message)
        deleted = [(AclBinding(ResourcePattern(_enum(ResourceType, a.resource_type), a.resource_name,
                                               _enum(PatternType, a.pattern_type)),
                               AccessControlEntry(a.principal, a.host, _enum(AclOperation, a.operation),
                                                  _enum(AclPermissionType, a.permission_type))),
                    None if a.error_code == ErrorCode.none else _failure(
                        name, f"filter_results[{i}].matching_acls[{j}].error_code", a.error_code, a.error_message))
                   for j, a in enumerate(r.matching_acls)]
        out.append((error, deleted))
    return out
