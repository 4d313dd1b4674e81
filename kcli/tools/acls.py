"""What kafka-acls (Kafka's AclCommand) does with its options, without doing it: the bindings --add creates, the
filters --remove and --list use, checked as AclCommand checks them (UsageError). Online (kcli.client.acls) and
offline (the authorizer over ZooKeeper) kctl acls share it. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kcli.errors import UsageError
from kcli.protocol.acl import (CLUSTER_NAME, AccessControlEntry, AccessControlEntryFilter, AclBinding,
                               AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourcePattern,
                               ResourcePatternFilter, ResourceType)

Op = AclOperation
# the operations each resource type accepts (AclEntry.supportedOperations, plus ALL)
SUPPORTED: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.DELETE, Op.ALTER,
                                   Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({Op.READ, Op.DESCRIBE, Op.DELETE}),
    ResourceType.CLUSTER: frozenset({Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                     Op.IDEMPOTENT_WRITE, Op.ALTER, Op.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({Op.DESCRIBE, Op.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({Op.DESCRIBE}),
    ResourceType.USER: frozenset({Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS}),
}


@dataclass(frozen=True)
class AclCommandOptions:
    """kafka-acls' options, as given (names as Kafka spells them)."""

    topics: Sequence[str] = ()
    groups: Sequence[str] = ()
    cluster: bool = False
    transactional_ids: Sequence[str] = ()
    pattern_type: str | None = None  # --resource-pattern-type: LITERAL by default
    allow_principals: Sequence[str] = ()
    deny_principals: Sequence[str] = ()
    allow_hosts: Sequence[str] = ()
    deny_hosts: Sequence[str] = ()
    operations: Sequence[str] = ()
    principals: Sequence[str] = ()  # --principal (--list)
    producer: bool = False
    consumer: bool = False
    idempotent: bool = False


def _pattern_type(opts: AclCommandOptions, *, adding: bool) -> PatternType:
    try:
        pattern_type = PatternType.parse(opts.pattern_type) if opts.pattern_type else PatternType.LITERAL
    except ValueError as exc:
        raise UsageError(f"--resource-pattern-type: {exc}") from None
    if pattern_type == PatternType.UNKNOWN or adding and pattern_type not in (PatternType.LITERAL,
                                                                              PatternType.PREFIXED):
        raise UsageError(f"A '--resource-pattern-type' value of '{pattern_type.name}' is not valid when adding "
                         "acls." if adding else f"--resource-pattern-type {pattern_type.name} is not valid")
    return pattern_type


def _resources(opts: AclCommandOptions, pattern_type: PatternType) -> list[ResourcePatternFilter]:
    out = [ResourcePatternFilter(ResourceType.TOPIC, t, pattern_type) for t in opts.topics]
    out += [ResourcePatternFilter(ResourceType.GROUP, g, pattern_type) for g in opts.groups]
    out += [ResourcePatternFilter(ResourceType.TRANSACTIONAL_ID, t, pattern_type) for t in opts.transactional_ids]
    if opts.cluster:
        out.append(ResourcePatternFilter(ResourceType.CLUSTER, CLUSTER_NAME, pattern_type))
    for f in out:
        if not f.name:
            raise UsageError(f"an empty {f.resource_type.pascal} name is not valid")
    return out


def _principals(texts: Sequence[str], option: str) -> list[str]:
    out = []
    for text in texts:
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise UsageError(f"{option} {text!r} is not TYPE:NAME (e.g. User:alice)")
        out.append(f"{kind}:{name}")
    return out


def _operations(opts: AclCommandOptions) -> list[AclOperation]:
    if not opts.operations:
        return [Op.ALL]
    out = []
    for text in opts.operations:
        try:
            op = AclOperation.parse(text)
        except ValueError as exc:
            raise UsageError(f"--operation: {exc}") from None
        if op in (Op.ANY, Op.UNKNOWN):
            raise UsageError(f"--operation {text} is not an operation an ACL can grant")
        out.append(op)
    return out


def _entries(opts: AclCommandOptions, operations: Sequence[AclOperation]) -> list[AccessControlEntry]:
    """AclCommand.getAcl: principals x hosts (``*`` when none is given) x operations, for allow then deny."""
    out = []
    for principals, hosts, permission, option in (
            (opts.allow_principals, opts.allow_hosts, AclPermissionType.ALLOW, "--allow-principal"),
            (opts.deny_principals, opts.deny_hosts, AclPermissionType.DENY, "--deny-principal")):
        for principal in _principals(principals, option):
            for host in (hosts or ["*"]):
                out += [AccessControlEntry(principal, host, op, permission) for op in operations]
    return out


def _check_operations(resource_type: ResourceType, entries: Sequence[AccessControlEntry]) -> None:
    allowed = SUPPORTED[resource_type] | {Op.ALL}
    bad = sorted({e.operation.pascal for e in entries if e.operation not in allowed})
    if bad:
        raise UsageError(f"ResourceType {resource_type.pascal} only supports operations "
                         f"{', '.join(sorted(o.pascal for o in allowed))} (not {', '.join(bad)})")


def bindings_to_add(opts: AclCommandOptions) -> list[AclBinding]:
    """--add: the bindings per resource (AclCommand's getResourceToAcls, with --producer/--consumer)."""
    pattern_type = _pattern_type(opts, adding=True)
    if not opts.allow_principals and not opts.deny_principals:
        raise UsageError("--add needs --allow-principal or --deny-principal")
    if (opts.producer or opts.consumer) and opts.operations:
        raise UsageError("--operation cannot be combined with --producer or --consumer")
    if opts.idempotent and not opts.producer:
        raise UsageError("--idempotent goes with --producer")
    per_resource: dict[ResourcePattern, list[AccessControlEntry]] = {}

    def add(resource_type: ResourceType, name: str, operations: Sequence[AclOperation]) -> None:
        entries = _entries(opts, operations)
        _check_operations(resource_type, entries)
        per_resource.setdefault(ResourcePattern(resource_type, name, pattern_type), []).extend(entries)

    if opts.producer or opts.consumer:
        if not opts.topics:
            raise UsageError("--producer and --consumer need --topic")
        if opts.consumer and not opts.groups:
            raise UsageError("--consumer needs --group")
        for topic in opts.topics:
            if opts.producer:  # AclCommand.getProducerResourceFilterToAcls
                add(ResourceType.TOPIC, topic, [Op.WRITE, Op.DESCRIBE, Op.CREATE])
            if opts.consumer:  # getConsumerResourceFilterToAcls
                add(ResourceType.TOPIC, topic, [Op.READ, Op.DESCRIBE])
        if opts.producer:
            for tid in opts.transactional_ids:
                add(ResourceType.TRANSACTIONAL_ID, tid, [Op.WRITE, Op.DESCRIBE])
            if opts.idempotent:
                per_resource.setdefault(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL),
                                        []).extend(_entries(opts, [Op.IDEMPOTENT_WRITE]))
        if opts.consumer:
            for group in opts.groups:
                add(ResourceType.GROUP, group, [Op.READ])
    else:
        resources = _resources(opts, pattern_type)
        if not resources:
            raise UsageError("--add needs a resource: --topic, --group, --cluster or --transactional-id")
        operations = _operations(opts)
        for r in resources:
            assert r.name is not None
            add(r.resource_type, r.name, operations)
    out = []
    for pattern, entries in per_resource.items():
        out += [AclBinding(pattern, e) for e in dict.fromkeys(entries)]
    return out


def filters_to_remove(opts: AclCommandOptions) -> list[AclBindingFilter]:
    """--remove: with principals, exactly the bindings --add would create; without, every ACL of each resource
    (AclCommand.removeAcls)."""
    if opts.producer or opts.consumer:
        return [AclBindingFilter(ResourcePatternFilter(b.pattern.resource_type, b.pattern.name,
                                                       b.pattern.pattern_type), _exact(b.entry))
                for b in bindings_to_add(opts)]
    pattern_type = _pattern_type(opts, adding=False)
    resources = _resources(opts, pattern_type)
    if not resources:
        raise UsageError("--remove needs a resource: --topic, --group, --cluster or --transactional-id")
    if not opts.allow_principals and not opts.deny_principals:
        return [AclBindingFilter(r) for r in resources]
    entries = _entries(opts, _operations(opts))
    out = []
    for r in resources:
        if r.resource_type in SUPPORTED:
            _check_operations(r.resource_type, entries)
        out += [AclBindingFilter(r, _exact(e)) for e in entries]
    return out


def _exact(entry: AccessControlEntry) -> AccessControlEntryFilter:
    return AccessControlEntryFilter(entry.principal, entry.host, entry.operation, entry.permission_type)


def filters_to_list(opts: AclCommandOptions) -> list[AclBindingFilter]:
    """--list: the resources' ACLs (every ACL without a resource), optionally one --principal's."""
    pattern_type = _pattern_type(opts, adding=False)
    resources = _resources(opts, pattern_type) or [ResourcePatternFilter()]
    principals = _principals(opts.principals, "--principal") or [None]
    return [AclBindingFilter(r, AccessControlEntryFilter(principal=p)) for r in resources for p in principals]


# -- rendering helpers (text as kafka-acls prints it; JSON for --json) ----------------------------------------------
def pattern_text(pattern: ResourcePattern | ResourcePatternFilter) -> str:
    """Kafka's ResourcePattern.toString."""
    kind = "ResourcePattern" if isinstance(pattern, ResourcePattern) else "ResourcePatternFilter"
    return (f"{kind}(resourceType={pattern.resource_type.name}, name={pattern.name}, "
            f"patternType={pattern.pattern_type.name})")


def binding_json(binding: AclBinding) -> dict[str, str]:
    p, e = binding.pattern, binding.entry
    return {"resource_type": p.resource_type.name, "name": p.name, "pattern_type": p.pattern_type.name,
            "principal": e.principal, "host": e.host, "operation": e.operation.name,
            "permission_type": e.permission_type.name}


def group_by_pattern(bindings: Sequence[AclBinding]) -> dict[ResourcePattern, list[AccessControlEntry]]:
    out: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for b in bindings:
        out.setdefault(b.pattern, []).append(b.entry)
    return out
