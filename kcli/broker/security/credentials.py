"""The broker's SCRAM credentials (Kafka's CredentialProvider / CredentialCache): every user's credentials, read at
start from ``/config/users`` (ZooKeeper, or a standalone broker's local store with the same paths and JSON) and
kept current through the ``/config/changes`` listener (``users`` entity, Kafka's UserConfigHandler), so that a
credential written straight to ZooKeeper by ``kafka-configs --zookeeper`` is usable within seconds.

The SASL authenticator asks ``scram_credential(user, mechanism)`` on the event loop: a dict lookup, never I/O.
Reads and writes of the store block (ZooKeeper, fsync): callers run them in a worker thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kcli.errors import KcliError
from kcli.protocol.sasl import ScramCredential
from kcli.zk import scram as zk_scram

log = logging.getLogger("kcli.broker")


class CredentialCache:
    """user -> mechanism name -> ScramCredential, behind a lock (ZooKeeper's threads update it)."""

    def __init__(self, store: Any = None) -> None:
        # kcli.zk.scram.ZkNodes (a cluster member) or kcli.broker.security.local_store.LocalMetadataStore
        # (standalone); None: in memory only (tests)
        self.store = store
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, ScramCredential]] = {}

    # -- the authenticator's side (SaslServerCallbacks) ---------------------------------------------------------
    def scram_credential(self, username: str, mechanism: str) -> ScramCredential | None:
        with self._lock:
            return self._users.get(username, {}).get(mechanism)

    def plain_password(self, username: str) -> str | None:
        """PLAIN users live in the listener's JAAS config, not here."""
        return None

    # -- views ---------------------------------------------------------------------------------------------------
    def users(self) -> list[str]:
        with self._lock:
            return sorted(self._users)

    def credentials(self, username: str) -> dict[str, ScramCredential]:
        with self._lock:
            return dict(self._users.get(username, {}))

    # -- updates -------------------------------------------------------------------------------------------------
    def update(self, username: str, credentials: Mapping[str, ScramCredential]) -> None:
        """Replace the user's credentials for every SCRAM mechanism: one missing from ``credentials`` is removed
        (CredentialProvider.updateCredentials)."""
        with self._lock:
            if credentials:
                self._users[username] = dict(credentials)
            else:
                self._users.pop(username, None)

    def user_config_changed(self, sanitized_name: str, config: Mapping[str, str]) -> None:
        """A ``users/<sanitized>`` change notification with the node's config now: only plain user entities carry
        credentials (not ``<default>``, not ``<user>/clients/<client-id>``, which are quota entities)."""
        if sanitized_name == zk_scram.DEFAULT_ENTITY or "/" in sanitized_name:
            return
        try:
            user = zk_scram.desanitize(sanitized_name)
        except (UnicodeDecodeError, ValueError):
            log.warning("config change for users/%s: not a sanitized user name; ignored", sanitized_name)
            return
        credentials = zk_scram.credentials_of(config, where=f"/config/users/{sanitized_name}")
        self.update(user, credentials)
        log.info("SCRAM credentials of user %s: %s", user, ", ".join(sorted(credentials)) or "none")

    def load(self) -> int:
        """Every user's credentials from the store (the broker's start); answers how many users have some."""
        if self.store is None:
            return 0
        users = zk_scram.read_all(self.store)
        with self._lock:
            self._users = users
        if users:
            log.info("loaded SCRAM credentials of %d users", len(users))
        return len(users)

    def read_user(self, username: str) -> dict[str, ScramCredential]:
        """The user's credentials as stored now (DescribeUserScramCredentials reads the store, as Kafka's
        ZkAdminManager reads ZooKeeper, not the cache)."""
        return zk_scram.read_user(self.store, username) if self.store is not None else self.credentials(username)

    def stored_configs(self, usernames: Iterable[str]) -> dict[str, dict[str, str] | KcliError]:
        """Each user's raw config keys as stored now (SCRAM and quota keys), or the error of a malformed node."""
        if self.store is None:
            return {u: {k: c.to_config_string() for k, c in self.credentials(u).items()} for u in usernames}
        return zk_scram.user_configs(self.store, usernames)

    def stored_users(self) -> list[str]:
        return zk_scram.user_names(self.store) if self.store is not None else self.users()

    def alter(self, username: str, *, upsert: Mapping[str, ScramCredential] | None = None,
              delete: Iterable[str] = ()) -> dict[str, ScramCredential]:
        """Write through the store (ZooKeeper announces it on /config/changes, and every broker's listener
        refreshes, this one included); this broker's cache takes the result at once. Raises
        kcli.zk.scram.ScramCredentialNotFound for the deletion of a missing credential."""
        if self.store is None:
            current = self.credentials(username)
            missing = [m for m in delete if m not in current]
            if missing:
                raise zk_scram.ScramCredentialNotFound(f"user {username!r} has no {', '.join(missing)} credential")
            for m in delete:
                current.pop(m)
            current.update(upsert or {})
            self.update(username, current)
            return current
        after = zk_scram.alter_user(self.store, username, upsert=upsert, delete=delete)
        self.update(username, after)
        return after
