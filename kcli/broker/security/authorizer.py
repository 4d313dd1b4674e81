"""Kafka's AclAuthorizer (``authorizer.class.name=kafka.security.authorizer.AclAuthorizer``): ACLs kept in the
metadata store in Kafka's ZooKeeper layout (kcli.zk.acls), a cache of all of them, and the decision of
AclAuthorizer.authorizeAction.

The decision for operation O on resource (T, N) by principal P from host H:

1. P in ``super.users``: allowed.
2. The ACLs that apply: LITERAL (T, N), LITERAL (T, ``*``), and PREFIXED (T, p) for every prefix p of N.
3. None at all: ``allow.everyone.if.no.acl.found`` (default false).
4. A DENY for P or ``User:*``, H or ``*``, O or ALL: denied (DENY wins).
5. An ALLOW for P or ``User:*``, H or ``*``, and O, ALL or an operation implying O (READ, WRITE, DELETE or ALTER
   imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; for ALLOW only): allowed. Otherwise denied.

The cache is a dict keyed by (type, pattern type, name); a PREFIXED lookup probes the prefixes of N whose lengths
some PREFIXED ACL of T has (at most len(N) probes, never a scan of all ACLs). Each decision is logged on
``kafka.authorizer.logger`` in Kafka's format (DEBUG allowed, INFO denied, TRACE for filtering checks).

Writes (CreateAcls, DeleteAcls, offline kctl acls --zookeeper) are read-modify-write on one node with its version,
retried on a conflict (AclAuthorizer.updateResourceAcls), then announced through the change channel; every broker
re-reads the named node (ZooKeeper mode: kcli.zk.acl_store.ZkAclChangeChannel). Writes block: call them from a
worker thread.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from kcli.errors import BadVersion, KcliError
from kcli.protocol.acl import (CLUSTER_NAME, WILDCARD, AccessControlEntry, AccessControlEntryFilter, AclBinding,
                               AclBindingFilter, AclOperation, AclPermissionType, PatternType, ResourcePattern,
                               ResourcePatternFilter, ResourceType)
from kcli.broker.security import KafkaPrincipal, Session
from kcli.zk import acls as layout

__all__ = [
    "AccessControlEntry", "AccessControlEntryFilter", "AclAuthorizer", "AclBinding", "AclBindingFilter",
    "AUTHORIZER_CLASS_NAMES", "InvalidAclError", "ResourcePattern", "ResourcePatternFilter", "parse_super_users",
]

audit = logging.getLogger("kafka.authorizer.logger")
log = logging.getLogger("kcli.broker.authorizer")
TRACE = 5  # log4j's TRACE, below DEBUG
logging.addLevelName(TRACE, "TRACE")

# authorizer.class.name values that mean this authorizer: Kafka's (2.4+), the pre-2.4 name (removed in 3.0, still in
# old server.properties) and kctl's own
AUTHORIZER_CLASS_NAMES = frozenset({"kafka.security.authorizer.AclAuthorizer",
                                    "kafka.security.auth.SimpleAclAuthorizer", "kctl.AclAuthorizer", "AclAuthorizer"})
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"
MAX_UPDATE_RETRIES = 10  # AclAuthorizer.maxUpdateRetries
_ALL = AclOperation.ALL
_ALLOW, _DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
_LITERAL, _PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
# operations an ALLOW of another implies (AclAuthorizer.authorizeAction's allowOps; KIP-? in AclOperation's javadoc)
_IMPLIED: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
}

Key = tuple[int, int, str]  # (resource type, pattern type, name): the cache's key


class MetadataStore(Protocol):
    """The znode-like store both modes share (kcli.broker.security.local_store, kcli.zk.acl_store)."""

    def get(self, path: str) -> tuple[bytes | None, int]: ...
    def set(self, path: str, data: bytes, expected_version: int | None = None) -> int: ...
    def delete(self, path: str, expected_version: int | None = None) -> bool: ...
    def children(self, path: str) -> list[str]: ...


class AclChangeChannel(Protocol):
    """How brokers tell each other an ACL node changed (ZooKeeper: the acl_changes_ sequences)."""

    def start(self, on_change: Callable[[ResourcePattern], None]) -> None: ...
    def publish(self, pattern: ResourcePattern) -> None: ...
    def stop(self) -> None: ...


class InvalidAclError(KcliError):
    """An ACL binding Kafka refuses (INVALID_REQUEST): an empty name, a name with '/', a cluster resource not
    named kafka-cluster, an ANY/UNKNOWN/MATCH element."""

    error_code = "INVALID_REQUEST"


def parse_super_users(text: str | None) -> frozenset[str]:
    """``User:admin;User:CN=broker,O=kctl``: semicolon-separated principals (AclAuthorizer.configure)."""
    out = set()
    for item in (text or "").split(";"):
        if item.strip():
            out.add(str(KafkaPrincipal.parse(item.strip())))
    return frozenset(out)


def validate_binding(binding: AclBinding) -> None:
    """What AclApis and AclAuthorizer.validateAclBinding refuse, as InvalidAclError."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAclError(f"resource type {pattern.resource_type.name} is not a concrete resource type")
    if pattern.pattern_type not in (_LITERAL, _PREFIXED):
        raise InvalidAclError(f"pattern type {pattern.pattern_type.name} is not LITERAL or PREFIXED")
    if entry.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAclError(f"operation {entry.operation.name} is not a concrete operation")
    if entry.permission_type not in (_ALLOW, _DENY):
        raise InvalidAclError(f"permission type {entry.permission_type.name} is not ALLOW or DENY")
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        raise InvalidAclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        raise InvalidAclError("Invalid empty resource name specified.")
    if "/" in pattern.name:
        raise InvalidAclError(f"ACL binding contains invalid resource name: {pattern.name}")
    try:
        KafkaPrincipal.parse(entry.principal)
    except ValueError as exc:
        raise InvalidAclError(str(exc)) from None


class AclAuthorizer:
    """Implements kcli.broker.security.Authorizer; ``start()`` before use, ``close()`` at the end."""

    def __init__(self, store: MetadataStore, *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False, changes: AclChangeChannel | None = None,
                 retry_backoff_ms: int = 100) -> None:
        self.store = store
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.changes = changes
        self.retry_backoff_ms = retry_backoff_ms
        self._lock = threading.RLock()  # writers and change processing; readers use the dicts as they are
        self._acls: dict[Key, tuple[frozenset[AccessControlEntry], int]] = {}  # -> (entries, node version)
        # per resource type, the lengths of its PREFIXED names (with how many names have each): the prefixes a
        # lookup probes
        self._prefix_counts: dict[int, Counter[int]] = {}
        self._prefix_lengths: dict[int, tuple[int, ...]] = {}
        # (type, pattern type, permission, principal, host, operation) -> names: authorize_by_resource_type
        # (AclAuthorizer's resourceCache)
        self._by_type: dict[tuple[int, int, int, str, str, int], frozenset[str]] = {}

    # -- life -----------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Change listening first, then the initial load, so that nothing changed in between is missed."""
        if self.changes is not None:
            self.changes.start(self.process_change)
        self.load()

    def close(self) -> None:
        """Stop following changes; the store is its owner's to close (the broker shares it)."""
        if self.changes is not None:
            self.changes.stop()

    def load(self) -> None:
        """Every ACL node of both stores into the cache (AclAuthorizer.loadCache)."""
        with self._lock:
            for pattern_type, root in layout.STORES.items():
                for type_name in self.store.children(root):
                    try:
                        resource_type = ResourceType.parse(type_name)
                    except ValueError:
                        log.warning("ignoring unknown ResourceType %s in %s", type_name, root)
                        continue
                    for name in self.store.children(f"{root}/{type_name}"):
                        pattern = ResourcePattern(resource_type, name, pattern_type)
                        entries, version = self._read(pattern)
                        self._update_cache(pattern, entries, version)

    def process_change(self, pattern: ResourcePattern) -> None:
        """A change notification: re-read the named node and replace its cache entry."""
        with self._lock:
            entries, version = self._read(pattern)
            log.info("Processing Acl change notification for %s, versionedAcls : %s, zkVersion : %d",
                     _kafka_pattern(pattern), _entries_text(entries), version)
            self._update_cache(pattern, entries, version)

    # -- decisions ------------------------------------------------------------------------------------------------
    def authorize(self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str, *,
                  request: str = "", log_if_allowed: bool = True, log_if_denied: bool = True,
                  ref_count: int = 1) -> bool:
        principal = str(session.principal)
        allowed = principal in self.super_users or self._acls_allow(
            principal, session.client_address, operation, resource_type, name)
        self._audit(session, operation, ResourcePattern(resource_type, name, _LITERAL), allowed, request,
                    log_if_allowed, log_if_denied, ref_count)
        return allowed

    def matching_acls(self, resource_type: ResourceType, name: str) -> list[AccessControlEntry]:
        """The ACLs that apply to the resource: its literal name, the literal wildcard, and the prefixed patterns
        that are prefixes of the name (probing only the prefix lengths in use)."""
        acls = self._acls
        t = int(resource_type)
        out: list[AccessControlEntry] = []
        for key in ((t, _LITERAL, name), (t, _LITERAL, WILDCARD)):
            found = acls.get(key)
            if found is not None:
                out.extend(found[0])
        for length in self._prefix_lengths.get(t, ()):
            if length > len(name):
                break
            found = acls.get((t, _PREFIXED, name[:length]))
            if found is not None:
                out.extend(found[0])
        return out

    def _acls_allow(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                    name: str) -> bool:
        acls = self.matching_acls(resource_type, name)
        if not acls:
            return self.allow_everyone_if_no_acl_found
        principals = (principal, WILDCARD_PRINCIPAL)
        hosts = (host, WILDCARD_HOST)
        for acl in acls:  # DENY wins, for the operation itself or ALL only (no implication)
            if (acl.permission_type == _DENY and acl.principal in principals and acl.host in hosts
                    and (acl.operation == operation or acl.operation == _ALL)):
                return False
        allow_ops = _IMPLIED.get(operation, (operation,))
        for acl in acls:
            if (acl.permission_type == _ALLOW and acl.principal in principals and acl.host in hosts
                    and (acl.operation == _ALL or acl.operation in allow_ops)):
                return True
        return False

    def authorize_by_resource_type(self, session: Session, operation: AclOperation, resource_type: ResourceType,
                                   *, request: str = "") -> bool:
        """Could the principal do ``operation`` on some resource of the type (KIP-679,
        AclAuthorizer.authorizeByResourceType): a LITERAL ``*`` DENY says no; allow.everyone.if.no.acl.found says
        yes; else yes if an ALLOW (literal or prefixed) is not dominated by a DENY on the same literal name or on
        a prefix of it."""
        if operation in (AclOperation.ANY, AclOperation.UNKNOWN) or resource_type in (ResourceType.ANY,
                                                                                       ResourceType.UNKNOWN):
            raise ValueError(f"authorize_by_resource_type needs a concrete operation and resource type, not "
                             f"{operation.name} on {resource_type.name}")
        principal = str(session.principal)
        pattern = ResourcePattern(resource_type, "NONE", PatternType.UNKNOWN)
        if principal in self.super_users:
            allowed = True
        else:
            allowed = self._by_resource_type(principal, session.client_address, operation, resource_type)
        self._audit(session, operation, pattern, allowed, request, True, True, 0)
        return allowed

    def _by_resource_type(self, principal: str, host: str, operation: AclOperation,
                          resource_type: ResourceType) -> bool:
        index = self._by_type

        def names(permission: AclPermissionType, pattern_type: PatternType) -> list[frozenset[str]]:
            out = []
            for p in (principal, WILDCARD_PRINCIPAL):
                for h in (host, WILDCARD_HOST):
                    for o in (operation, _ALL):
                        found = index.get((int(resource_type), int(pattern_type), int(permission), p, h, int(o)))
                        if found:
                            out.append(found)
            return out

        deny_literals = names(_DENY, _LITERAL)
        if any(WILDCARD in s for s in deny_literals):
            return False
        if self.allow_everyone_if_no_acl_found:
            return True
        deny_prefixes = names(_DENY, _PREFIXED)

        def dominated_by_prefix(resource: str) -> bool:
            return any(resource[:i] in s for i in range(1, len(resource) + 1) for s in deny_prefixes)

        allow_prefixes = names(_ALLOW, _PREFIXED)
        allow_literals = names(_ALLOW, _LITERAL)
        if any(not dominated_by_prefix(p) for s in allow_prefixes for p in s):
            return True
        return any(literal == WILDCARD or (not any(literal in d for d in deny_literals)
                                           and not dominated_by_prefix(literal))
                   for s in allow_literals for literal in s)

    def _audit(self, session: Session, operation: AclOperation, pattern: ResourcePattern, allowed: bool,
               request: str, log_if_allowed: bool, log_if_denied: bool, ref_count: int) -> None:
        """AclAuthorizer.logAuditMessage: DEBUG for access granted, INFO for access the caller asked for and was
        refused, TRACE for filtering checks either way."""
        if allowed:
            level = logging.DEBUG if log_if_allowed else TRACE
        else:
            level = logging.INFO if log_if_denied else TRACE
        if audit.isEnabledFor(level):
            audit.log(level, "Principal = %s is %s Operation = %s from host = %s on resource = %s for request = %s "
                      "with resourceRefCount = %d", session.principal, "Allowed" if allowed else "Denied",
                      operation.pascal, session.client_address, _kafka_pattern(pattern), request, ref_count)

    # -- the ACLs -------------------------------------------------------------------------------------------------
    def acls(self, binding_filter: AclBindingFilter = AclBindingFilter()) -> list[AclBinding]:
        """Every cached binding the filter matches (DescribeAcls), in a stable order."""
        out = []
        for (t, p, name), (entries, _) in sorted(self._acls.copy().items()):  # copy: atomic beside writers
            pattern = ResourcePattern(ResourceType(t), name, PatternType(p))
            if binding_filter.pattern.matches(pattern):
                out.extend(AclBinding(pattern, e) for e in sorted(entries, key=layout._entry_order)
                           if binding_filter.entry.matches(e))
        return out

    def create_acls(self, bindings: Sequence[AclBinding]) -> list[Exception | None]:
        """Add the bindings (CreateAcls): per binding None or the error, in the given order. Bindings on the
        same pattern are written together, in one update of its node."""
        results: list[Exception | None] = [None] * len(bindings)
        by_pattern: dict[ResourcePattern, list[int]] = {}
        for index, binding in enumerate(bindings):
            try:
                validate_binding(binding)
            except InvalidAclError as exc:
                results[index] = exc
                continue
            by_pattern.setdefault(binding.pattern, []).append(index)
        with self._lock:
            for pattern, indexes in by_pattern.items():
                added = {bindings[i].entry for i in indexes}
                try:
                    self._update_resource_acls(pattern, lambda current: current | added)
                except Exception as exc:  # noqa: BLE001 - reported per binding, as Kafka's AclCreateResult
                    for i in indexes:
                        results[i] = exc
        return results

    def delete_acls(self, filters: Sequence[AclBindingFilter]
                    ) -> list[list[tuple[AclBinding, Exception | None]]]:
        """Remove what each filter matches (DeleteAcls): per filter, the bindings deleted (each with None or the
        error of its node's update). A specific filter also looks its pattern up directly; MATCH and other general
        filters select from the cache (ACLs created elsewhere and not yet propagated here may be missed, as in
        Kafka)."""
        deleted: dict[AclBinding, int] = {}
        errors: dict[AclBinding, Exception] = {}
        with self._lock:
            candidates: dict[ResourcePattern, None] = {}
            for t, p, name in list(self._acls):
                candidates[ResourcePattern(ResourceType(t), name, PatternType(p))] = None
            for f in filters:
                if f.pattern.matches_at_most_one:
                    assert f.pattern.name is not None
                    types = (f.pattern.pattern_type,) if f.pattern.pattern_type != PatternType.ANY else (
                        _LITERAL, _PREFIXED)
                    for pattern_type in types:
                        candidates[ResourcePattern(f.pattern.resource_type, f.pattern.name, pattern_type)] = None
            for pattern in candidates:
                matching = [(i, f) for i, f in enumerate(filters) if f.pattern.matches(pattern)]
                if not matching or "/" in pattern.name or not pattern.name:
                    continue
                removing: dict[AclBinding, int] = {}

                def remove(current: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
                    gone = set()
                    for entry in current:
                        for i, f in matching:
                            if f.entry.matches(entry):
                                removing.setdefault(AclBinding(pattern, entry), i)
                                gone.add(entry)
                                break
                    return current - gone

                try:
                    self._update_resource_acls(pattern, remove)
                except Exception as exc:  # noqa: BLE001 - reported per binding (AclBindingDeleteResult)
                    for binding in removing:
                        errors.setdefault(binding, exc)
                for binding, i in removing.items():
                    deleted.setdefault(binding, i)
        out: list[list[tuple[AclBinding, Exception | None]]] = [[] for _ in filters]
        for binding, i in deleted.items():
            out[i].append((binding, errors.get(binding)))
        return out

    # -- the store ------------------------------------------------------------------------------------------------
    def _read(self, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int]:
        data, version = self.store.get(layout.resource_path(pattern))
        try:
            return layout.decode_acls(data), version
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the unreadable ACL node %s: %s", layout.resource_path(pattern), exc)
            return frozenset(), version

    def _update_resource_acls(self, pattern: ResourcePattern,
                              change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]]
                              ) -> bool:
        """Read-modify-write of the pattern's node with its version (create when absent, delete when empty),
        retried on a conflict with a fresh read (AclAuthorizer.updateResourceAcls); announces a real change."""
        path = layout.resource_path(pattern)
        key = (int(pattern.resource_type), int(pattern.pattern_type), pattern.name)
        cached = self._acls.get(key)
        current, version = cached if cached is not None else self._read(pattern)
        for attempt in range(MAX_UPDATE_RETRIES + 1):
            new = frozenset(change(current))
            try:
                if new:
                    new_version = self.store.set(path, layout.encode_acls(new), version)
                else:
                    if version != -1:
                        self.store.delete(path, version)
                    new_version = -1
            except BadVersion:
                if attempt == MAX_UPDATE_RETRIES:
                    break
                time.sleep((self.retry_backoff_ms + random.randrange(50)) / 1000)
                current, version = self._read(pattern)
                continue
            self._update_cache(pattern, new, new_version)
            if new != current:
                log.info("Updated ACLs for %s with new version %d", _kafka_pattern(pattern), new_version)
                if self.changes is not None:
                    self.changes.publish(pattern)
                return True
            return False
        raise KcliError(f"Failed to update ACLs for {_kafka_pattern(pattern)} after trying a maximum of "
                        f"{MAX_UPDATE_RETRIES} times")

    def _update_cache(self, pattern: ResourcePattern, entries: frozenset[AccessControlEntry], version: int) -> None:
        t, p = int(pattern.resource_type), int(pattern.pattern_type)
        key = (t, p, pattern.name)
        old = self._acls.get(key, (frozenset(), -1))[0]
        for entry in entries - old:
            index_key = (t, p, int(entry.permission_type), entry.principal, entry.host, int(entry.operation))
            self._by_type[index_key] = self._by_type.get(index_key, frozenset()) | {pattern.name}
        for entry in old - entries:
            index_key = (t, p, int(entry.permission_type), entry.principal, entry.host, int(entry.operation))
            remaining = self._by_type.get(index_key, frozenset()) - {pattern.name}
            if remaining:
                self._by_type[index_key] = remaining
            else:
                self._by_type.pop(index_key, None)
        if p == _PREFIXED and bool(old) != bool(entries):
            counts = self._prefix_counts.setdefault(t, Counter())
            counts[len(pattern.name)] += 1 if entries else -1
            if counts[len(pattern.name)] <= 0:
                del counts[len(pattern.name)]
            self._prefix_lengths[t] = tuple(sorted(counts))
        if entries:
            self._acls[key] = (entries, version)
        else:
            self._acls.pop(key, None)


def _kafka_pattern(pattern: ResourcePattern) -> str:
    """Kafka's ResourcePattern.toString for log lines; the audit line's ``Topic:LITERAL:orders`` is str()."""
    return str(pattern)


def _entries_text(entries: Iterable[AccessControlEntry]) -> str:
    return "Set(" + ", ".join(f"{e.principal} has {e.permission_type.name} permission for operations: "
                               f"{e.operation.name} from hosts: {e.host}" for e in entries) + ")"


def parse_authorizer_class(text: str) -> str:
    """The ``authorizer.class.name`` config parser: empty (no authorizer) or a name of this authorizer; any other
    class stops the start (Kafka would fail to load it)."""
    name = text.strip()
    if name and name not in AUTHORIZER_CLASS_NAMES:
        raise ValueError(f"kctl implements only Kafka's AclAuthorizer ({', '.join(sorted(AUTHORIZER_CLASS_NAMES))})")
    return name


def parse_super_users_config(text: str) -> str:
    """The ``super.users`` config parser: checked now, kept as text."""
    try:
        parse_super_users(text)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    return text.strip()


@contextmanager
def zookeeper_acls(connect: str, *, timeout: float = 18.0, auth: str | None = None) -> Iterator[AclAuthorizer]:
    """An authorizer over the ACL nodes of the ZooKeeper at ``connect``, for kctl acls --zookeeper (Kafka's
    AclCommand with --authorizer-properties zookeeper.connect=...): Kafka's paths created, every node loaded, each
    change announced through the change notifications so that running brokers pick it up; nothing is watched."""
    from kcli.zk.acl_store import ZkAclChangeChannel, ZkMetadataStore

    store = ZkMetadataStore(connect, timeout=timeout, auth=auth)
    try:
        store.ensure_paths(layout.initial_paths())
        authorizer = AclAuthorizer(store, changes=ZkAclChangeChannel(store))
        authorizer.load()
        yield authorizer
    finally:
        store.close()
