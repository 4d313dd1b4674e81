"""The ACL nodes in ZooKeeper through the store interface the authorizer shares with the standalone broker's file
(get/set/delete/children with versions: kcli.broker.security.local_store), and the change notifications every
broker watches (Kafka's ZkNodeChangeNotificationListener over /kafka-acl-changes and /kafka-acl-extended-changes).

The authorizer has its own session, as Kafka's AclAuthorizer has its own KafkaZkClient: its watches and their
thread are independent of the broker's registration. kctl acls --zookeeper uses the same classes without
listening, as Kafka's AclCommand uses the authorizer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (BadVersionError, NodeExistsError, NoNodeError)

from kcli.errors import BadVersion
from kcli.protocol.acl import ResourcePattern
from kcli.zk import acls as layout
from kcli.zk import paths
from kcli.zk.errors import kazoo_errors, start_retrying_client

log = logging.getLogger("kcli.zk")
CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # ZkNodeChangeNotificationListener's changeExpirationMs


class ZkMetadataStore:
    """Versioned reads and writes of znodes under the chroot of ``connect``; the session opens on first use."""

    def __init__(self, connect: str, *, timeout: float = 18.0, auth: str | None = None) -> None:
        self.connect = paths.parse_connect(connect)
        self.timeout = timeout
        self.auth = auth
        self._client: KazooClient | None = None
        self._lock = threading.Lock()

    # -- the session ----------------------------------------------------------------------------------------------
    @property
    def client(self) -> KazooClient:
        with self._lock:
            if self._client is None:
                self._client = self._open()
            return self._client

    def _open(self) -> KazooClient:
        from kcli.zk.registration import probe

        probe(self.connect, self.timeout)
        return start_retrying_client(self.connect.hosts_with_chroot, self.connect.text, self.timeout, max_delay=2.0,
                                     auth=self.auth)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.stop()
            client.close()

    def _zk(self, doing: str, path: str):
        return kazoo_errors(f"ZooKeeper at {self.connect.text}", self.timeout, f"{doing} {path}")

    # -- the store interface ----------------------------------------------------------------------------------------
    def get(self, path: str) -> tuple[bytes | None, int]:
        with self._zk("reading", path):
            try:
                data, stat = self.client.get_async(path).get(timeout=self.timeout)
            except NoNodeError:
                return None, -1
        return data, stat.version

    def set(self, path: str, data: bytes, expected_version: int | None = None) -> int:
        """Create (expected -1: NODEEXISTS is BadVersion; parents are created as needed) or setData with the
        expected zkVersion (BADVERSION or NONODE is BadVersion); None writes whatever is there."""
        client = self.client
        with self._zk("writing", path):
            if expected_version == -1:
                try:
                    client.create_async(path, data, makepath=True).get(timeout=self.timeout)
                except NodeExistsError:
                    raise BadVersion("the node exists", path=path) from None
                return 0
            try:
                stat = client.set_async(path, data, -1 if expected_version is None else expected_version).get(
                    timeout=self.timeout)
            except BadVersionError:
                raise BadVersion(f"not at version {expected_version}", path=path) from None
            except NoNodeError:
                if expected_version is not None:
                    raise BadVersion("the node is gone", path=path) from None
                return self.set(path, data, -1)
            return stat.version

    def delete(self, path: str, expected_version: int | None = None) -> bool:
        with self._zk("deleting", path):
            try:
                self.client.delete_async(path, -1 if expected_version is None else expected_version).get(
                    timeout=self.timeout)
            except BadVersionError:
                raise BadVersion(f"not at version {expected_version}", path=path) from None
            except NoNodeError:
                if expected_version is not None:
                    raise BadVersion("the node is gone", path=path) from None
                return False
        return True

    def children(self, path: str) -> list[str]:
        with self._zk("listing", path):
            try:
                return sorted(self.client.get_children_async(path).get(timeout=self.timeout))
            except NoNodeError:
                return []

    def ensure_paths(self, nodes: list[str]) -> None:
        """Create the persistent nodes that are missing (empty data, as KafkaZkClient.createRecursive)."""
        client = self.client
        for node in nodes:
            with self._zk("creating", node):
                try:
                    client.create_async(node, b"", makepath=True).get(timeout=self.timeout)
                except NodeExistsError:
                    pass


class ZkAclChangeChannel:
    """Publishes and watches the ACL change sequences: ``start(on_change)`` creates Kafka's ACL paths, arms the
    watches of both change roots and calls ``on_change(pattern)`` (on its own thread) for every notification newer
    than the last one processed, the existing ones included; notifications older than 15 minutes are deleted by
    whichever broker sees them."""

    def __init__(self, store: ZkMetadataStore, *, expiration_ms: int = CHANGE_EXPIRATION_MS,
                 poll_s: float = 60.0) -> None:
        self.store = store
        self.expiration_ms = expiration_ms
        self.poll_s = poll_s  # the purge runs at least this often, with no new notification
        self.last_executed = {root: -1 for root in layout.CHANGE_ROOTS.values()}
        self.processed = 0
        self._on_change: Callable[[ResourcePattern], None] | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._listener: Callable[[Any], None] | None = None

    def publish(self, pattern: ResourcePattern) -> None:
        """A persistent sequential ``acl_changes_`` node naming the pattern (KafkaZkClient.createAclChangeNotification)."""
        root, data = layout.encode_change(pattern)
        with self.store._zk("creating a change notification under", root):
            self.store.client.create_async(f"{root}/{layout.CHANGE_PREFIX}", data, sequence=True,
                                           makepath=True).get(timeout=self.store.timeout)

    def start(self, on_change: Callable[[ResourcePattern], None]) -> None:
        self.store.ensure_paths(layout.initial_paths())
        self._on_change = on_change
        self._stopping = False

        def on_state(state: Any) -> None:  # a new session has no watches: read again, which re-arms them
            if state == KazooState.CONNECTED:
                self._wake.set()

        self._listener = on_state
        self.store.client.add_listener(on_state)
        self.process()  # the notifications already there, and the watches armed, before the initial load
        self._thread = threading.Thread(target=self._run, name="acl-change-listener", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._thread = None
        client = self.store._client
        if self._listener is not None and client is not None:
            client.remove_listener(self._listener)
        self._listener = None

    def _run(self) -> None:
        while not self._stopping:
            self._wake.wait(self.poll_s)
            self._wake.clear()
            if self._stopping:
                return
            try:
                self.process()
            except Exception as exc:  # noqa: BLE001 - a lost session re-arms on reconnection; keep listening
                log.warning("reading the ACL change notifications failed: %s", exc)
                time.sleep(0.5)
                self._wake.set()

    def _watch(self, event: Any) -> None:  # kazoo's event thread: wake the listener only
        self._wake.set()

    def process(self) -> None:
        """Read both change roots (re-arming their watches), hand new notifications over, purge old ones."""
        client = self.store.client
        timeout = self.store.timeout
        for root in layout.CHANGE_ROOTS.values():
            with self.store._zk("listing", root):
                try:
                    nodes = client.get_children_async(root, watch=self._watch).get(timeout=timeout)
                except NoNodeError:
                    continue
            nodes = sorted((n for n in nodes if layout.change_sequence(n) >= 0), key=layout.change_sequence)
            now_ms = time.time() * 1000
            for node in nodes:
                sequence = layout.change_sequence(node)
                path = f"{root}/{node}"
                fresh = sequence > self.last_executed[root]
                with self.store._zk("reading", path):
                    try:
                        data, stat = client.get_async(path).get(timeout=timeout)
                    except NoNodeError:
                        continue
                if fresh:
                    self.last_executed[root] = sequence
                    try:
                        pattern = layout.decode_change(root, data)
                    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
                        log.warning("ignoring the malformed ACL change notification %s: %s", path, exc)
                    else:
                        if self._on_change is not None:
                            try:
                                self._on_change(pattern)
                            except Exception:  # noqa: BLE001 - one bad node must not stop the others
                                log.exception("processing the ACL change notification %s failed", path)
                        self.processed += 1
                if now_ms - stat.ctime > self.expiration_ms and sequence <= self.last_executed[root]:
                    with self.store._zk("purging", path):
                        try:
                            client.delete_async(path).get(timeout=timeout)
                        except NoNodeError:
                            pass
