"""The ACL model's wire codes (Kafka's ResourceType, PatternType, AclOperation, AclPermissionType) and their text
names: PascalCase in ZooKeeper's JSON and the audit log (``Topic``, ``IdempotentWrite``), the upper-case enum name
accepted on input as Kafka's SecurityUtils does."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class _Named(enum.IntEnum):
    @property
    def pascal(self) -> str:
        """``TRANSACTIONAL_ID`` -> ``TransactionalId`` (Kafka's SecurityUtils.toPascalCase)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @classmethod
    def parse(cls, text: str):
        """From the PascalCase or upper-case name, any case (``Read``, ``READ``, ``read``,
        ``transactional_id``); ValueError otherwise."""
        key = text.strip().replace("-", "_")
        for member in cls:
            if key.upper() in (member.name, member.pascal.upper()) or key.upper().replace("_", "") == \
                    member.name.replace("_", ""):
                return member
        raise ValueError(f"unknown {cls.__name__} {text!r} (one of {', '.join(m.pascal for m in cls)})")


class ResourceType(_Named):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_Named):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Named):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the one name of the CLUSTER resource
WILDCARD = "*"  # LITERAL resource name and principal/host wildcard


# -- the model (Kafka's common.acl / common.resource classes) ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """A resource type, a name and how the name matches: LITERAL (``*`` = every resource) or PREFIXED."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def __str__(self) -> str:  # the audit log's form: Topic:LITERAL:orders
        return f"{self.resource_type.pascal}:{self.pattern_type.name}:{self.name}"


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (``User:alice``, ``User:*``), from where (an IP or ``*``), what, and ALLOW or DENY."""

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def __str__(self) -> str:  # Kafka's AccessControlEntry.toString
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission_type.name})")


@dataclass(frozen=True, slots=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """What DescribeAcls and DeleteAcls select: a type (ANY for all), a name (None for any) and a pattern type:
    ANY, MATCH (every pattern that applies to the named resource), LITERAL or PREFIXED."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY

    def matches(self, pattern: ResourcePattern) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if self.pattern_type in (PatternType.ANY, pattern.pattern_type):
            return self.name == pattern.name
        if pattern.pattern_type == PatternType.LITERAL:  # MATCH
            return self.name == pattern.name or pattern.name == WILDCARD
        if pattern.pattern_type == PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        return False

    @property
    def matches_at_most_one(self) -> bool:
        """Every field specific: the filter names one pattern (or, with ANY, its LITERAL and PREFIXED forms)."""
        return (self.resource_type not in (ResourceType.ANY, ResourceType.UNKNOWN) and self.name is not None
                and self.pattern_type not in (PatternType.MATCH, PatternType.UNKNOWN))


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """None principal/host and ANY operation/permission match everything (Kafka's AccessControlEntryFilter)."""

    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission_type == AclPermissionType.ANY
                     or self.permission_type == entry.permission_type))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    pattern: ResourcePatternFilter = ResourcePatternFilter()
    entry: AccessControlEntryFilter = AccessControlEntryFilter()

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern.matches(binding.pattern) and self.entry.matches(binding.entry)


ANY_ACL = AclBindingFilter()
