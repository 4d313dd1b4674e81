"""SCRAM credentials where Kafka keeps them: ``/config/users/<sanitized user>`` =
``{"version":1,"config":{"SCRAM-SHA-256":"salt=...,stored_key=...,server_key=...,iterations=8192"}}``, as
``kafka-configs --zookeeper ... --entity-type users --alter --add-config 'SCRAM-SHA-256=[password=...]'`` and
AlterUserScramCredentials write it (AdminZkClient.changeConfigs), followed by the notification
``/config/changes/config_change_<seq>`` = ``{"version":2,"entity_path":"users/<sanitized user>"}``.

The node is shared with the user's quotas (``producer_byte_rate`` ...): a write changes only the SCRAM keys and
keeps the others. The functions work on any *node store* with ZooKeeper's versioned get/set/children
(``ZkNodes`` over a KafkaZkClient here, or a standalone broker's LocalMetadataStore with the same paths and JSON).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Protocol
from urllib.parse import unquote_plus

from kcli.errors import BadVersion, KcliError
from kcli.protocol.sasl.scram import MECHANISMS, ScramCredential
from kcli.zk import models, paths

log = logging.getLogger("kcli.zk")

USERS = "/config/users"
ENTITY_TYPE = "users"
# ConfigEntityName.Default: the quota defaults' node, unsanitized; a user named "<default>" is %3Cdefault%3E
DEFAULT_ENTITY = "<default>"
_MAX_ATTEMPTS = 20


class ScramCredentialNotFound(KcliError):
    """A deletion named a mechanism the user has no credential for (kafka-configs: "Invalid config(s)")."""


class NodeStore(Protocol):
    def get(self, path: str) -> tuple[bytes | None, int]: ...

    def set(self, path: str, data: bytes, expected_version: int | None = None) -> int: ...

    def children(self, path: str) -> list[str]: ...


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: Java's URLEncoder (UTF-8; letters, digits and ``.-*_`` kept, space -> ``+``,
    the rest ``%XX``), then ``*`` -> ``%2A`` and ``+`` -> ``%20``, so a user name is one znode name."""
    out = []
    for byte in name.encode("utf-8"):
        c = chr(byte)
        if c.isascii() and (c.isalnum() or c in ".-_"):
            out.append(c)
        else:
            out.append(f"%{byte:02X}")  # "*" and " " land here directly as %2A and %20
    return "".join(out)


def desanitize(name: str) -> str:
    """Kafka's Sanitizer.desanitize (Java's URLDecoder: ``+`` is a space)."""
    return unquote_plus(name, encoding="utf-8", errors="strict")


def user_path(user: str) -> str:
    return paths.entity_config(ENTITY_TYPE, sanitize(user))


def credentials_of(config: Mapping[str, str], *, where: str = "") -> dict[str, ScramCredential]:
    """The SCRAM credentials among a user's config keys (other keys are quotas); a malformed value is logged and
    skipped, as a broker's credential cache must not fail on one bad user."""
    out: dict[str, ScramCredential] = {}
    for mechanism in MECHANISMS:
        text = config.get(mechanism)
        if text is None:
            continue
        try:
            out[mechanism] = ScramCredential.from_config_string(text)
        except ValueError:
            log.warning("%s: the %s credential is not salt=...,stored_key=...,server_key=...,iterations=N; "
                        "ignored", where or "a user", mechanism)
    return out


def _read_config(store: NodeStore, path: str) -> tuple[dict[str, str], int]:
    data, version = store.get(path)
    if data is None:
        return {}, -1
    return dict(models.parse_config(path, data, ENTITY_TYPE, path.rsplit("/", 1)[-1]).config), version


def read_user(store: NodeStore, user: str) -> dict[str, ScramCredential]:
    """The user's credentials by mechanism name ({} without the node or without SCRAM keys)."""
    path = user_path(user)
    config, _ = _read_config(store, path)
    return credentials_of(config, where=path)


def user_names(store: NodeStore) -> list[str]:
    """Every user with a /config/users node (desanitized; ``<default>`` left out), credentials or not."""
    out = []
    for child in store.children(USERS):
        if child == DEFAULT_ENTITY:
            continue
        try:
            out.append(desanitize(child))
        except (UnicodeDecodeError, ValueError):
            log.warning("%s/%s is not a sanitized user name; ignored", USERS, child)
    return sorted(out)


def user_configs(store: NodeStore, users: Iterable[str]) -> dict[str, dict[str, str] | KcliError]:
    """Each user's config keys ({} without a node), or the error its malformed node raised; ZooKeeper reads are
    pipelined when the store can (``get_many``), so thousands of users cost a few round trips."""
    users = list(users)
    nodes = [user_path(u) for u in users]
    get_many = getattr(store, "get_many", None)
    found = get_many(nodes) if get_many is not None else [store.get(n)[0] for n in nodes]
    out: dict[str, dict[str, str] | KcliError] = {}
    for user, path, data in zip(users, nodes, found):
        try:
            out[user] = {} if data is None else dict(
                models.parse_config(path, data, ENTITY_TYPE, path.rsplit("/", 1)[-1]).config)
        except KcliError as exc:
            out[user] = exc
    return out


def read_all(store: NodeStore) -> dict[str, dict[str, ScramCredential]]:
    """user -> mechanism -> credential, for every user with at least one SCRAM credential (what a broker loads
    at startup: CredentialProvider over all user configs)."""
    out = {}
    for user, config in user_configs(store, user_names(store)).items():
        if isinstance(config, KcliError):  # a malformed node: skip that user, serve the others
            log.warning("%s: %s", user_path(user), config.describe())
            continue
        credentials = credentials_of(config, where=user_path(user))
        if credentials:
            out[user] = credentials
    return out


def alter_user(store: NodeStore, user: str, *, upsert: Mapping[str, ScramCredential] | None = None,
               delete: Iterable[str] = ()) -> dict[str, ScramCredential]:
    """Replace/add (``upsert``, by mechanism name) and remove (``delete``) the user's credentials in one
    compare-and-set of its node, keeping every other key (quotas); then, on ZooKeeper, the change notification.
    ScramCredentialNotFound when a deletion names a credential the user does not have (nothing written).
    Answers the user's credentials after the change."""
    if not user:
        raise KcliError("a SCRAM user name cannot be empty")
    upsert = dict(upsert or {})
    delete = list(delete)
    for mechanism in [*upsert, *delete]:
        if mechanism not in MECHANISMS:
            raise KcliError(f"unknown SCRAM mechanism {mechanism!r} (one of {', '.join(MECHANISMS)})")
    path = user_path(user)
    for _ in range(_MAX_ATTEMPTS):
        config, version = _read_config(store, path)
        missing = [m for m in delete if m not in config]
        if missing:
            raise ScramCredentialNotFound(f"user {user!r} has no {', '.join(missing)} credential", path=path)
        for mechanism in delete:
            del config[mechanism]
        for mechanism, credential in upsert.items():
            config[mechanism] = credential.to_config_string()
        try:
            store.set(path, models.encode_config(config), version)
        except BadVersion:
            continue  # someone else (a quota change, another admin) wrote it since: read again
        notify = getattr(store, "notify", None)
        if notify is not None:
            notify(ENTITY_TYPE, sanitize(user))
        return credentials_of(config, where=path)
    raise KcliError(f"{path} kept changing while being written; try again")


class ZkNodes:
    """A NodeStore over a KafkaZkClient, whose writes announce themselves on /config/changes."""

    def __init__(self, zk: object) -> None:
        self.zk = zk  # kcli.zk.kafka_zk_client.KafkaZkClient

    def get(self, path: str) -> tuple[bytes | None, int]:
        found = self.zk.get_data_and_version(path)  # type: ignore[attr-defined]
        return (None, -1) if found is None else found

    def set(self, path: str, data: bytes, expected_version: int | None = None) -> int:
        if expected_version is None:
            raise ValueError("ZkNodes.set needs the version read")
        return self.zk.set_data_versioned(path, data, expected_version)  # type: ignore[attr-defined]

    def children(self, path: str) -> list[str]:
        return self.zk.get_children(path)  # type: ignore[attr-defined]

    def delete(self, path: str, expected_version: int | None = None) -> bool:
        """Remove the node if still at ``expected_version`` (a quota node left empty); BadVersion when it moved."""
        return self.zk.delete_versioned(path, -1 if expected_version is None else expected_version)  # type: ignore[attr-defined]

    def get_many(self, nodes: list[str]) -> list[bytes | None]:
        """The data of many nodes (None for a missing one), pipelined as Kafka's ZooKeeperClient sends them."""
        return [None if item is None else item[0]
                for item in self.zk._get_many(nodes, "reading user configs")]  # type: ignore[attr-defined]

    def notify(self, entity_type: str, sanitized_name: str) -> None:
        self.zk.create_config_change_notification(entity_type, sanitized_name)  # type: ignore[attr-defined]


class ZkScramStore:
    """A NodeStore over its own ZooKeeper session (``kctl users --zookeeper``, kafka-configs --zookeeper's side):
    the reads and errors of kcli.zk.registry.ZkRegistry, plus versioned writes and change notifications."""

    def __init__(self, connect: str, *, timeout: float, auth: str | None = None) -> None:
        from kcli.zk.registry import ZkRegistry

        self.registry = ZkRegistry(connect, timeout=timeout, auth=auth)

    def __enter__(self) -> "ZkScramStore":
        self.registry._require()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.registry.close()

    def get(self, path: str) -> tuple[bytes | None, int]:
        from kcli.zk.registry import ZnodeMissingError

        try:
            data, stat = self.registry._call("get", path)
        except ZnodeMissingError:
            return None, -1
        return data, stat.version

    def children(self, path: str) -> list[str]:
        return self.registry._children_or_empty(path)

    def set(self, path: str, data: bytes, expected_version: int | None = None) -> int:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        client = self.registry._require()
        timeout = self.registry.timeout
        with self.registry._zk("writing", path):
            try:
                if expected_version == -1:
                    client.create_async(path, data, makepath=True).get(timeout=timeout)
                    return 0
                version = -1 if expected_version is None else expected_version
                return client.set_async(path, data, version).get(timeout=timeout).version
            except (BadVersionError, NodeExistsError, NoNodeError):
                raise BadVersion(f"{path} changed since it was read", path=self.registry._where(path)) from None

    def delete(self, path: str, expected_version: int | None = None) -> bool:
        """Remove the node if still at ``expected_version``; BadVersion when it moved or gained children."""
        from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError

        client = self.registry._require()
        with self.registry._zk("deleting", path):
            try:
                client.delete_async(path, -1 if expected_version is None else expected_version).get(
                    timeout=self.registry.timeout)
            except NoNodeError:
                return False
            except (BadVersionError, NotEmptyError):
                raise BadVersion(f"{path} changed since it was read", path=self.registry._where(path)) from None
        return True

    def notify(self, entity_type: str, sanitized_name: str) -> None:
        client = self.registry._require()
        prefix = paths.child(paths.CONFIG_CHANGES, paths.CONFIG_CHANGE_PREFIX)
        with self.registry._zk("writing", prefix):
            client.create_async(prefix, models.encode_config_change(entity_type, sanitized_name), sequence=True,
                                makepath=True).get(timeout=self.registry.timeout)
