"""The ACL model's wire codes (Kafka's ResourceType, PatternType, AclOperation, AclPermissionType) and their text
names: PascalCase in ZooKeeper's JSON and the audit log (``Topic``, ``IdempotentWrite``), the upper-case enum name
accepted on input as Kafka's SecurityUtils does."""

from __future__ import annotations

import enum


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
