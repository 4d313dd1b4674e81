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


def read_all(store: NodeStore) -> dict[str, dict[str, ScramCredential]]:
    """user -> mechanism -> credential, for every user with at least one SCRAM credential (what a broker loads
    at startup: CredentialProvider over all user configs)."""
    out = {}
    for user in user_names(store):
        try:
            credentials = read_user(store, user)
        except KcliError as exc:  # a malformed node: skip that user, serve the others
            log.warning("%s: %s", user_path(user), exc)
            continue
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

    def notify(self, entity_type: str, sanitized_name: str) -> None:
        self.zk.create_config_change_notification(entity_type, sanitized_name)  # type: ignore[attr-defined]
