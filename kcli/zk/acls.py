"""Kafka's ACL layout in ZooKeeper (ZkData's ZkAclStore and ZkAclChangeStore, AclEntry's JSON), byte for byte, so
that Kafka's own kafka-acls and a Kafka broker on the same ZooKeeper read and write the same nodes as kctl:

* ``/kafka-acl/<ResourceType>/<name>``: LITERAL patterns (name ``*`` = every resource of the type);
* ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``: PREFIXED patterns (KIP-290);
* data ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}``;
* change notifications, persistent sequential: ``/kafka-acl-changes/acl_changes_<seq>`` holding ``TOPIC:orders``
  and ``/kafka-acl-extended-changes/acl_changes_<seq>`` holding the pattern as JSON.

Pure: paths and codecs only (the standalone broker's store uses the same paths and JSON); kazoo is in acl_store.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from kcli.protocol.acl import (AccessControlEntry, AclOperation, AclPermissionType, PatternType, ResourcePattern,
                               ResourceType)

ACL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
PREFIXED_ROOT = EXTENDED_ROOT + "/prefixed"  # the pattern type's name in lower case (ZkAclStore)
ACL_CHANGES = "/kafka-acl-changes"
EXTENDED_ACL_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
VERSION = 1

# the types an ACL can name (AclEntry.ResourceTypes: every type but UNKNOWN and ANY)
RESOURCE_TYPES = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID,
                  ResourceType.DELEGATION_TOKEN, ResourceType.USER)
STORES = {PatternType.LITERAL: ACL_ROOT, PatternType.PREFIXED: PREFIXED_ROOT}
CHANGE_ROOTS = {PatternType.LITERAL: ACL_CHANGES, PatternType.PREFIXED: EXTENDED_ACL_CHANGES}


def store_root(pattern_type: PatternType) -> str:
    try:
        return STORES[pattern_type]
    except KeyError:
        raise ValueError(f"ACLs are stored for LITERAL and PREFIXED patterns, not {pattern_type.name}") from None


def resource_path(pattern: ResourcePattern) -> str:
    """``/kafka-acl/Topic/orders``, ``/kafka-acl-extended/prefixed/Topic/ord``."""
    if "/" in pattern.name or not pattern.name:
        raise ValueError(f"invalid resource name {pattern.name!r} (empty, or holds '/')")
    return f"{store_root(pattern.pattern_type)}/{pattern.resource_type.pascal}/{pattern.name}"


def initial_paths() -> list[str]:
    """What an authorizer creates at start (KafkaZkClient.createAclPaths): both stores, a child per resource type
    in each, and both change roots."""
    out = [ACL_ROOT, EXTENDED_ROOT, PREFIXED_ROOT]
    for root in (ACL_ROOT, PREFIXED_ROOT):
        out += [f"{root}/{t.pascal}" for t in RESOURCE_TYPES]
    return out + [ACL_CHANGES, EXTENDED_ACL_CHANGES]


def encode_acls(entries: Iterable[AccessControlEntry]) -> bytes:
    """The node's data: compact JSON, keys in AclEntry's order (version, acls; principal, permissionType,
    operation, host)."""
    acls = [{"principal": e.principal, "permissionType": e.permission_type.pascal, "operation": e.operation.pascal,
             "host": e.host} for e in sorted(entries, key=_entry_order)]
    return json.dumps({"version": VERSION, "acls": acls}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _entry_order(e: AccessControlEntry) -> tuple[str, str, int, int]:
    return (e.principal, e.host, int(e.operation), int(e.permission_type))


def decode_acls(data: bytes | None) -> frozenset[AccessControlEntry]:
    """AclEntry.fromBytes: empty for no data; ValueError for another version or a malformed entry."""
    if not data:
        return frozenset()
    document = json.loads(data)
    if not isinstance(document, dict) or document.get("version") != VERSION:
        raise ValueError(f"ACL node version {document.get('version') if isinstance(document, dict) else None!r} "
                         f"is not {VERSION}")
    out = set()
    for item in document.get("acls") or []:
        principal = str(item["principal"])
        if ":" not in principal:
            raise ValueError(f"principal {principal!r} is not TYPE:NAME")
        out.add(AccessControlEntry(principal, str(item["host"]), AclOperation.parse(str(item["operation"])),
                                   AclPermissionType.parse(str(item["permissionType"]))))
    return frozenset(out)


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(the change root, the notification's data) for a change of ``pattern``'s ACLs."""
    if pattern.pattern_type == PatternType.LITERAL:
        return ACL_CHANGES, f"{pattern.resource_type.name}:{pattern.name}".encode("utf-8")
    if pattern.pattern_type == PatternType.PREFIXED:
        return EXTENDED_ACL_CHANGES, json.dumps(
            {"version": VERSION, "resourceType": pattern.resource_type.name, "name": pattern.name,
             "patternType": pattern.pattern_type.name}, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    raise ValueError(f"no change notification for a {pattern.pattern_type.name} pattern")


def decode_change(root: str, data: bytes) -> ResourcePattern:
    """The pattern a notification under ``root`` names (types parsed case-insensitively, as Kafka does)."""
    text = data.decode("utf-8")
    if root == ACL_CHANGES:
        kind, sep, name = text.partition(":")
        if not sep:
            raise ValueError(f"ACL change {text!r} is not TYPE:NAME")
        return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)
    document = json.loads(text)
    if document.get("version") != VERSION:
        raise ValueError(f"ACL change version {document.get('version')!r} is not {VERSION}")
    return ResourcePattern(ResourceType.parse(document["resourceType"]), str(document["name"]),
                           PatternType.parse(document["patternType"]))


def change_sequence(node: str) -> int:
    try:
        return int(node[len(CHANGE_PREFIX):]) if node.startswith(CHANGE_PREFIX) else -1
    except ValueError:
        return -1
