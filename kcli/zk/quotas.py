"""Client quotas where ZooKeeper-mode Kafka keeps them (KIP-13, KIP-55, KIP-124; kafka-security.md §5.1), as
``kafka-configs --entity-type users|clients`` and AlterClientQuotas write them (AdminZkClient.changeConfigs):

| entity | node | notification entity_path |
|---|---|---|
| user + client id | ``/config/users/<u>/clients/<c>`` | ``users/<u>/clients/<c>`` |
| user | ``/config/users/<u>`` (shared with the SCRAM credentials) | ``users/<u>`` |
| client id | ``/config/clients/<c>`` | ``clients/<c>`` |
| ip | ``/config/ips/<ip>`` | ``ips/<ip>`` |

Names are sanitized (kcli.zk.scram.sanitize); the default entity is ``<default>``. Values are strings in
``{"version":1,"config":{...}}``. Writes change only the keys named and keep every other key (SCRAM credentials),
then announce the entity on ``/config/changes`` when the store can (``notify``). The functions work on any node
store with ZooKeeper's versioned get/set/children (kcli.zk.scram.NodeStore): ZooKeeper, or a standalone broker's
local metadata store with the same paths.

An entity is Kafka's ClientQuotaEntity: a tuple of (entity type, name) pairs, ``user`` before ``client-id``,
a None name for the default entity.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from kcli.errors import BadVersion, KcliError
from kcli.zk import models
from kcli.zk.scram import DEFAULT_ENTITY, NodeStore, desanitize, sanitize

log = logging.getLogger("kcli.zk")

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)
Entity = tuple[tuple[str, "str | None"], ...]

# QuotaConfigs / DynamicConfig.{User,Client,Ip}: key -> type
PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"  # KIP-599: stored and described, not enforced here
CONNECTION_CREATION_RATE = "connection_creation_rate"  # KIP-612 (ip entities): stored and described only
CLIENT_KEYS: Mapping[str, str] = {PRODUCER_BYTE_RATE: "LONG", CONSUMER_BYTE_RATE: "LONG",
                                  REQUEST_PERCENTAGE: "DOUBLE", CONTROLLER_MUTATION_RATE: "DOUBLE"}
IP_KEYS: Mapping[str, str] = {CONNECTION_CREATION_RATE: "INT"}
QUOTA_KEYS = frozenset(CLIENT_KEYS) | frozenset(IP_KEYS)
_MAX_ATTEMPTS = 20
_EPSILON = 1e-6
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


class InvalidQuota(KcliError):
    """Kafka's InvalidRequestException from the quota code: an entity or a value it refuses."""


def entity(user: Any = ..., client_id: Any = ...) -> Entity:
    """An entity from its components: ``...`` leaves a component out, None is its default entity."""
    out: list[tuple[str, str | None]] = []
    if user is not ...:
        out.append((USER, user))  # type: ignore[arg-type]
    if client_id is not ...:
        out.append((CLIENT_ID, client_id))  # type: ignore[arg-type]
    return tuple(out)


def normalize(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """Kafka's parseAndSanitizeQuotaEntity checks: known types, no empty name, no ip with user/client-id;
    ordered user, client-id, ip. InvalidQuota with Kafka's text otherwise."""
    found: dict[str, str | None] = {}
    for kind, name in pairs:
        if kind not in ENTITY_TYPES:
            raise InvalidQuota(f"Unhandled client quota entity type: {kind}")
        if name is not None and name == "":
            raise InvalidQuota(f"Empty {kind} not supported")
        found[kind] = name
    if not found:
        raise InvalidQuota("Invalid empty client quota entity")
    if IP in found and len(found) > 1:
        raise InvalidQuota("Invalid quota entity combination, IP entity should not be used with user/client ID "
                           "entity.")
    return tuple((k, found[k]) for k in ENTITY_TYPES if k in found)


def _name(name: str | None) -> str:
    return DEFAULT_ENTITY if name is None else sanitize(name)


def _from_name(sanitized: str) -> str | None:
    return None if sanitized == DEFAULT_ENTITY else desanitize(sanitized)


def location(e: Entity) -> tuple[str, str]:
    """(entity type of the notification, its sanitized name) for an entity: users/<u>[/clients/<c>],
    clients/<c>, ips/<ip>."""
    parts = dict(e)
    if IP in parts:
        return "ips", DEFAULT_ENTITY if parts[IP] is None else str(parts[IP])
    if USER in parts:
        name = _name(parts[USER])
        return ("users", f"{name}/clients/{_name(parts[CLIENT_ID])}") if CLIENT_ID in parts else ("users", name)
    return "clients", _name(parts[CLIENT_ID])


def node_path(e: Entity) -> str:
    kind, name = location(e)
    return f"/config/{kind}/{name}"


def entity_of(kind: str, sanitized_name: str) -> Entity | None:
    """The entity of a /config/changes notification (``users``/``clients``/``ips`` and the name after it), or None
    when it is not a quota entity path."""
    try:
        if kind == "clients" and "/" not in sanitized_name:
            return ((CLIENT_ID, _from_name(sanitized_name)),)
        if kind == "ips" and "/" not in sanitized_name:
            return ((IP, None if sanitized_name == DEFAULT_ENTITY else sanitized_name),)
        if kind == "users":
            parts = sanitized_name.split("/")
            if len(parts) == 1:
                return ((USER, _from_name(parts[0])),)
            if len(parts) == 3 and parts[1] == "clients":
                return ((USER, _from_name(parts[0])), (CLIENT_ID, _from_name(parts[2])))
    except (UnicodeDecodeError, ValueError):
        log.warning("config change for %s/%s: not a sanitized entity name; ignored", kind, sanitized_name)
    return None


def keys_for(e: Entity) -> Mapping[str, str]:
    return IP_KEYS if any(k == IP for k, _ in e) else CLIENT_KEYS


def quota_values(config: Mapping[str, str], *, where: str = "") -> dict[str, float]:
    """The quota keys of a node's config as numbers (Kafka's fromProps; SCRAM keys and others left out); a value
    that is not a number is logged and skipped."""
    out: dict[str, float] = {}
    for key, text in config.items():
        if key not in QUOTA_KEYS:
            continue
        try:
            out[key] = float(text)
        except ValueError:
            log.warning("%s: quota %s=%r is not a number; ignored", where or "a quota entity", key, text)
    return out


def stored_value(key: str, value: float, kind: str) -> str:
    """The string AlterClientQuotas stores (ZkAdminManager.alterClientQuotas): a DOUBLE as Java's Double.toString,
    a LONG/INT integral within 1e-6 as its integer; InvalidQuota otherwise."""
    if kind == "DOUBLE":
        return _java_double(value)
    integral = int(value + _EPSILON) if value == value and abs(value) != float("inf") else None
    limit = _LONG_MAX if kind == "LONG" else _INT_MAX
    if integral is None or abs(integral - value) > _EPSILON or not -limit - 1 <= integral <= limit:
        raise InvalidQuota(f"Configuration {key} must be a {kind} value")
    return str(integral)


def _java_double(value: float) -> str:
    """Java's Double.toString (the shortest digits that read back; d.dddE<n> outside 1e-3..1e7): 200.0, 1.0E7."""
    if value == 0 or 1e-3 <= abs(value) < 1e7 or value != value or abs(value) == float("inf"):
        text = repr(float(value))
        return {"inf": "Infinity", "-inf": "-Infinity", "nan": "NaN"}.get(text, text)
    from decimal import Decimal

    sign, digits, exponent = Decimal(repr(float(value))).normalize().as_tuple()
    text = "".join(map(str, digits))
    power = len(digits) - 1 + int(exponent)
    mantissa = text[0] + "." + (text[1:] or "0")
    return f"{'-' if sign else ''}{mantissa}E{power}"


def java_double(value: float) -> str:
    """A quota value as Kafka's tools print it (Java's Double.toString): 1024.0, 2.0E7."""
    return _java_double(value)


def _read(store: NodeStore, path: str) -> tuple[dict[str, str], int]:
    data, version = store.get(path)
    if data is None:
        return {}, -1
    return dict(models.parse_config(path, data, path.split("/")[2], path.rsplit("/", 1)[-1]).config), version


def read_entity(store: NodeStore, e: Entity) -> dict[str, float]:
    """The entity's quota values ({} without a node)."""
    path = node_path(e)
    config, _ = _read(store, path)
    return quota_values(config, where=path)


def read_all(store: NodeStore) -> dict[Entity, dict[str, float]]:
    """Every entity with at least one quota key: users, users' client ids, client ids, ips (Kafka's
    fetchAllEntityConfigs and fetchAllChildEntityConfigs); a malformed node is logged and skipped."""
    out: dict[Entity, dict[str, float]] = {}

    def add(e: Entity | None, path: str) -> None:
        if e is None:
            return
        try:
            values = quota_values(_read(store, path)[0], where=path)
        except KcliError as exc:
            log.warning("%s: %s", path, exc.describe())
            return
        if values:
            out[e] = values

    for user in store.children("/config/users"):
        add(entity_of("users", user), f"/config/users/{user}")
        for client in store.children(f"/config/users/{user}/clients"):
            add(entity_of("users", f"{user}/clients/{client}"), f"/config/users/{user}/clients/{client}")
    for client in store.children("/config/clients"):
        add(entity_of("clients", client), f"/config/clients/{client}")
    for ip in store.children("/config/ips"):
        add(entity_of("ips", ip), f"/config/ips/{ip}")
    return out


def validate(e: Entity, ops: Iterable[tuple[str, float | None]]) -> list[tuple[str, str | None]]:
    """Kafka's checks of one entity's ops (key, value; None removes): the strings to store, in order, or
    InvalidQuota with Kafka's text (an unknown key, a LONG/INT value that is not integral; and a negative
    value)."""
    keys = keys_for(e)
    out: list[tuple[str, str | None]] = []
    for key, value in ops:
        if value is None:
            out.append((key, None))
            continue
        kind = keys.get(key)
        if kind is None:
            raise InvalidQuota(f"Invalid configuration key {key}")
        if value < 0 or value != value:
            # ZooKeeper-mode Kafka 3.7 stores a negative bound (which then throttles every request); refused
            # here as an INVALID_REQUEST, as kctl never wants to write one
            raise InvalidQuota(f"Configuration {key} must be a non-negative value")
        out.append((key, stored_value(key, value, kind)))
    return out


def alter_entity(store: NodeStore, e: Entity, ops: Iterable[tuple[str, float | None]], *,
                 validate_only: bool = False) -> dict[str, float]:
    """Apply ``ops`` to the entity's node in one compare-and-set, keeping its other keys; a node left with no key
    and no child is deleted (AdminZkClient's tryCleanQuotaNodes). Then, on ZooKeeper, the change notification.
    Answers the entity's quota values after the change."""
    e = normalize(e)
    if any(k == IP for k, _ in e) and dict(e)[IP] is not None:
        _check_ip(str(dict(e)[IP]))
    changes = validate(e, ops)
    path = node_path(e)
    for _ in range(_MAX_ATTEMPTS):
        config, version = _read(store, path)
        for key, text in changes:
            if text is None:
                config.pop(key, None)
            else:
                config[key] = text
        if validate_only:
            return quota_values(config, where=path)
        try:
            delete = getattr(store, "delete", None)
            if not config and delete is not None and version >= 0 and not store.children(path):
                delete(path, version)
            elif config or version >= 0:
                store.set(path, models.encode_config(config), version)
            else:
                return {}  # nothing there, nothing to write
        except BadVersion:
            continue
        notify = getattr(store, "notify", None)
        if notify is not None:
            notify(*location(e))
        return quota_values(config, where=path)
    raise KcliError(f"{path} kept changing while being written; try again")


def _check_ip(ip: str) -> None:
    """DynamicConfig.Ip.isValidIpEntity: an address (a host name would be resolved; refused here)."""
    import ipaddress

    try:
        ipaddress.ip_address(ip)
    except ValueError:
        raise InvalidQuota(f"{ip} is not a valid IP or resolvable host.") from None


def describe(store: NodeStore, components: Iterable[tuple[str, Any]], strict: bool) -> dict[Entity, dict[str, float]]:
    """ZkAdminManager.describeClientQuotas over the stored entities: ``components`` are (entity type, match) with
    match a name (exact), None (the default entity) or ``...`` (any specified); ``strict`` leaves out entities
    with components not named. InvalidQuota for duplicate/empty types or ip mixed with user/client-id;
    UnsupportedEntityType for another type."""
    given: dict[str, Any] = {}
    for kind, match in components:
        if kind in given:
            raise InvalidQuota(f"Duplicate {'client' if kind == CLIENT_ID else kind} filter component entity type")
        if kind == "":
            raise InvalidQuota("Unexpected empty filter component entity type")
        if kind not in ENTITY_TYPES:
            raise UnsupportedEntityType(f"Custom entity type '{kind}' not supported")
        given[kind] = match
    if IP in given and (USER in given or CLIENT_ID in given):
        raise InvalidQuota("Invalid entity filter component combination, IP filter component should not be used "
                           "with user or clientId filter component.")

    def matches(kind: str, parts: dict[str, str | None]) -> bool:
        if kind not in given:
            return kind not in parts or not strict
        match = given[kind]
        if match is ...:
            return kind in parts
        return kind in parts and parts[kind] == match

    out = {}
    for e, values in read_all(store).items():
        parts = dict(e)
        if IP in parts:
            if USER in given or CLIENT_ID in given or (strict and IP not in given):
                continue
        elif IP in given:
            continue
        if all(matches(k, parts) for k in ENTITY_TYPES if k != IP or IP in parts or IP in given):
            out[e] = values
    return dict(sorted(out.items(), key=lambda item: [(k, n is not None, n or "") for k, n in item[0]]))


class UnsupportedEntityType(KcliError):
    """Kafka's UnsupportedVersionException for a filter on an entity type it does not know."""
