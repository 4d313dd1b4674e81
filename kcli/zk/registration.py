"""A broker's presence in ZooKeeper, as a ZooKeeper-mode Kafka broker (2.7-3.9) leaves it.

At startup: the chroot and Kafka's persistent paths, ``/cluster/id`` (get or create) and the ephemeral
``/brokers/ids/<id>`` registration (version 5 JSON). A broker whose session expired registers again. The
controller election is not here: the broker's controller runs it on its event thread (KafkaController.elect,
over KafkaZkClient.register_controller_and_increment_controller_epoch), told of the session's changes by
``on_session_event``. Topics are written by KafkaZkClient (any broker's admin, the controller).

Every call is synchronous and bounded by the session timeout; kazoo failures surface as KcliError.

The broker's controller (kcli.broker.controller) runs over this registration's session: ``zk_client``, the
broker epoch (the czxid of ``/brokers/ids/<id>``, KIP-380) and ``on_session_event`` callbacks: SESSION_EXPIRED
when the session (and every ephemeral node and watch with it) is gone, then SESSION_REESTABLISHED once a new
one is open and the broker registered again in it (Kafka's Expire and RegisterBrokerAndReelect), or
RECONNECTED when the connection came back within the same session.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    KazooException,
    NodeExistsError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import ZnodeStat

from kcli.errors import KcliError
from kcli.zk import paths
from kcli.zk.errors import ZooKeeperConnectionError
from kcli.zk.errors import describe as _describe, kazoo_errors, start_retrying_client
from kcli.zk.models import new_cluster_id

log = logging.getLogger("kcli.zk")

BROKER_INFO_VERSION = 5  # BrokerIdZNode layout written by Kafka 2.7+ (IBP >= 2.7): adds "features"
# Kafka's default listener.security.protocol.map maps these names to themselves.
SECURITY_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})
PROBE_TIMEOUT_S = 2.0
STOP_TIMEOUT_S = 2.0  # closing the session removes the ephemeral nodes anyway: shutdown must not wait longer
# Reconnect every quarter second at most (kazoo's default backs off to an hour; ZooKeeper's Java client sleeps up
# to a second): after a network partition heals, a broker whose session expired meanwhile learns it (and that it
# leads nothing any more) within that, and clients' requests parked on it as a zombie leader are answered. While
# ZooKeeper cannot be reached an attempt fails at once or times out, and costs the server nothing.
RECONNECT_MAX_DELAY_S = 0.25

# What on_session_event callbacks are told.
SESSION_EXPIRED = "expired"  # the session is gone, and its ephemeral nodes and watches with it
SESSION_REESTABLISHED = "reestablished"  # a new session is open and the broker registered again in it
RECONNECTED = "reconnected"  # the connection is back within the same session (kazoo has set no watch again)

class InvalidGroupIdError(KcliError):
    """A consumer group name that cannot name a znode under /consumers (empty, "/", "." or "..")."""

    error_code = "INVALID_GROUP_ID"  # the broker's answer (Kafka's Errors name)


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def probe(connect, timeout: float) -> None:
    """kazoo retries a refused connection until its timeout expires; a TCP connect tells "nothing listens
    there" at once, with the operating system's reason."""
    reasons = []
    for host, port in connect.hosts:
        try:
            with socket.create_connection((host, port), timeout=min(PROBE_TIMEOUT_S, timeout)):
                return
        except OSError as exc:
            reasons.append(f"{_address(host, port)}: {exc.strerror or exc}")
    raise ZooKeeperConnectionError(f"ZooKeeper unreachable at {connect.text} ({'; '.join(reasons)})")


def _address(host: str | None, port: int) -> str:
    if host is None:
        return f":{port}"
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class BrokerRegistration:
    """Registers broker ``broker_id`` in the ZooKeeper ensemble named by ``connect``."""

    def __init__(self, connect: str, broker_id: int, *, endpoints: list[tuple[str, str, int]],
                 security_protocols: dict[str, str] | None = None, session_timeout_ms: int = 18000,
                 rack: str | None = None) -> None:
        self.connect = paths.parse_connect(connect)
        self.broker_id = broker_id
        self.endpoints = list(endpoints)
        # listener name -> security protocol (listener.security.protocol.map); unnamed ones as Kafka's default map
        self.security_protocols = dict(security_protocols or {})
        self.session_timeout_ms = session_timeout_ms
        self.rack = rack
        self.cluster_id: str | None = None
        self.broker_epoch: int | None = None  # czxid of our /brokers/ids/<id> node (KIP-380)
        # Kafka's zookeeper.connection.timeout.ms defaults to the session timeout; a request queued while
        # disconnected is answered within it too, or the session (and every ephemeral node) is gone anyway.
        self._timeout = session_timeout_ms / 1000
        self._client: KazooClient | None = None
        self._lock = threading.RLock()  # the broker's thread and kazoo's watch threads share the state
        self._stopping = False
        self._registered = False  # the /brokers/ids node is (to be) ours: start(register=False) defers it
        self._session_lost = False
        self._session_listeners: list[Callable[[str], None]] = []
        self._listeners_lock = threading.Lock()  # never held across a ZooKeeper call: kazoo's threads take it

    # -- what the controller uses ------------------------------------------------------------------
    @property
    def zk_client(self) -> KazooClient:
        """The kazoo client of this registration's session (the controller's watches and writes use it)."""
        return self._require()

    def on_session_event(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(SESSION_EXPIRED)`` when the session expired (on kazoo's connection thread: enqueue only),
        ``callback(SESSION_REESTABLISHED)`` once a new session is open and this broker registered again in it, and
        ``callback(RECONNECTED)`` when the connection came back within the same session (both on a kazoo worker
        thread, which may call ZooKeeper). Nothing is said before ``register()`` has run."""
        with self._listeners_lock:
            self._session_listeners.append(callback)

    def remove_session_listener(self, callback: Callable[[str], None]) -> None:
        with self._listeners_lock:
            if callback in self._session_listeners:
                self._session_listeners.remove(callback)

    def _tell(self, event: str) -> None:
        with self._listeners_lock:
            listeners = list(self._session_listeners)
        for callback in listeners:
            try:
                callback(event)
            except Exception:  # a listener's failure must not silence the others
                log.exception("ZooKeeper session listener failed on %s", event)

    # -- the broker's calls ------------------------------------------------------------------------
    def start(self, cluster_id: str | None, *, register: bool = True) -> str:
        """Connect and register; returns the cluster id stored in ZooKeeper. With
        ``register=False`` only connect and read the cluster id: a broker registers (``register()``) once its
        logs are recovered and its listeners bound, as Kafka's KafkaServer.startup does, so that the controller
        never sends requests to a broker that cannot take them yet."""
        with self._lock:
            if self._client is not None:
                raise KcliError(f"broker {self.broker_id} is already registered in ZooKeeper at {self.connect.text}")
            self._stopping = False
            self._registered = False
            self._session_lost = False
            self._probe()
            with self._zk("creating the chroot"):
                if self.connect.chroot:
                    self._ensure_chroot(self.connect.chroot)
            self._client = self._open(self.connect.hosts_with_chroot)
            try:
                with self._zk("creating Kafka's persistent paths"):
                    for path in paths.PERSISTENT:
                        self._wait(self._client.ensure_path_async(path))
                with self._zk(f"reading {paths.CLUSTER_ID}"):
                    self.cluster_id = self._get_or_create_cluster_id(cluster_id)
                if register:
                    with self._zk(f"registering broker {self.broker_id}"):
                        self._register()
                    self._registered = True
            except BaseException:
                self._close()  # closing the session drops whatever ephemeral node it created
                raise
            self._client.add_listener(self._on_state)
            if not register:
                return self.cluster_id
            log.info("broker %d registered at %s in ZooKeeper %s (cluster id %s)", self.broker_id,
                     self.connect.absolute(paths.broker(self.broker_id)), self.connect.servers, self.cluster_id)
            return self.cluster_id

    def register(self) -> None:
        """The deferred half of ``start(register=False)``: the /brokers/ids node."""
        with self._lock:
            if self._client is None:
                raise KcliError(f"broker {self.broker_id} is not connected to ZooKeeper")
            if self._registered:
                return
            with self._zk(f"registering broker {self.broker_id}"):
                self._register()
            self._registered = True
        log.info("broker %d registered at %s in ZooKeeper %s (cluster id %s)", self.broker_id,
                 self.connect.absolute(paths.broker(self.broker_id)), self.connect.servers, self.cluster_id)

    def stop(self) -> None:
        """Delete the ephemeral nodes this session owns (/brokers/ids/<id>, /controller if its controller still
        holds it) and close the session; safe to call twice."""
        self._stopping = True
        with self._lock:
            client = self._client
            if client is None:
                return
            client.remove_listener(self._on_state)
            if client.connected:
                for path in (paths.broker(self.broker_id), paths.CONTROLLER):
                    try:
                        self._delete_if_ours(path, min(STOP_TIMEOUT_S, self._timeout))
                    except (KazooException, KazooTimeoutError) as exc:
                        # Closing the session below removes them anyway; only the timing is lost.
                        log.warning("could not delete %s from ZooKeeper: %s", self.connect.absolute(path),
                                    _describe(exc))
            self._close()
            log.info("broker %d unregistered from ZooKeeper %s", self.broker_id, self.connect.servers)

    # -- the old consumers' offsets (OffsetCommit/OffsetFetch v0 on a ZooKeeper-mode broker) ----------------
    def consumer_offsets(self, group: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int | None]:
        """The offsets stored at /consumers/<group>/offsets/<topic>/<partition>, None where there is none (Kafka's
        KafkaZkClient.getConsumerOffset, read in parallel). Raises InvalidGroupIdError for a group that cannot name
        a znode, ZooKeeperConnectionError when ZooKeeper does not answer, KcliError naming a malformed znode."""
        client = self._offsets_client(group)
        out: dict[tuple[str, int], int | None] = {}
        with self._zk(f"reading the offsets of group {group}"):
            pending = [(tp, client.get_async(paths.consumer_offset(group, *tp))) for tp in partitions]
            for tp, result in pending:
                try:
                    data, _ = self._wait(result)
                except NoNodeError:
                    out[tp] = None
                    continue
                out[tp] = _parse_offset(self.connect.absolute(paths.consumer_offset(group, *tp)), data)
        return out

    def set_consumer_offsets(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        """Store each offset as the old consumers did, plain decimal text (Kafka's setOrCreateConsumerOffset: set
        the znode's data, or create it with its parents). Raises as ``consumer_offsets``."""
        client = self._offsets_client(group)
        with self._zk(f"writing the offsets of group {group}"):
            pending = [(paths.consumer_offset(group, *tp), str(offset).encode("ascii"))
                       for tp, offset in offsets.items()]
            results = [(path, data, client.set_async(path, data)) for path, data in pending]
            for path, data, result in results:
                try:
                    self._wait(result)
                except NoNodeError:
                    try:
                        self._wait(client.create_async(path, data, makepath=True))
                    except NodeExistsError:  # another writer created it meanwhile
                        self._wait(client.set_async(path, data))

    def _offsets_client(self, group: str) -> KazooClient:
        try:
            paths.child(paths.CONSUMERS, group)
        except KcliError:
            raise InvalidGroupIdError(f"group id {group!r} cannot name a znode under {paths.CONSUMERS}") from None
        client = self._require()
        if client.state != KazooState.CONNECTED:
            raise ZooKeeperConnectionError(f"the connection to ZooKeeper at {self.connect.text} is down")
        return client

    # -- connection --------------------------------------------------------------------------------
    def _probe(self) -> None:
        probe(self.connect, self._timeout)

    def _open(self, hosts: str) -> KazooClient:
        return start_retrying_client(hosts, self.connect.text, self._timeout, max_delay=RECONNECT_MAX_DELAY_S)

    def _ensure_chroot(self, chroot: str) -> None:
        # A chrooted kazoo client cannot create its own root: a short session at "/" does it.
        root = self._open(self.connect.servers)
        try:
            if self._wait(root.exists_async(chroot)) is None:
                self._wait(root.ensure_path_async(chroot))
                log.info("created the ZooKeeper chroot %s", chroot)
        finally:
            root.stop()
            root.close()

    def _close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.stop()
            client.close()

    def _require(self) -> KazooClient:
        if self._client is None:
            raise KcliError(f"broker {self.broker_id} is not registered in ZooKeeper (start() was not called, "
                            "or stop() was)")
        return self._client

    def _session_id(self) -> int | None:
        client_id = self._client.client_id if self._client is not None else None
        return client_id[0] if client_id else None

    def _wait(self, result: Any, timeout: float | None = None) -> Any:
        return result.get(timeout=self._timeout if timeout is None else timeout)

    def _zk(self, doing: str):
        return kazoo_errors(f"ZooKeeper at {self.connect.text}", self._timeout, doing)

    # -- znodes ------------------------------------------------------------------------------------
    def _get_or_create_cluster_id(self, proposed: str | None) -> str:
        client = self._require()
        for _ in range(2):
            try:
                data, _ = self._wait(client.get_async(paths.CLUSTER_ID))
            except NoNodeError:
                pass
            else:
                return self._parse_cluster_id(data)
            created = proposed or new_cluster_id()
            try:
                self._wait(client.create_async(paths.CLUSTER_ID, _json({"version": "1", "id": created}),
                                               makepath=True))
            except NodeExistsError:
                continue  # another broker created it first: adopt that one
            log.info("created cluster id %s at %s", created, self.connect.absolute(paths.CLUSTER_ID))
            return created
        raise KcliError(f"{self.connect.absolute(paths.CLUSTER_ID)} keeps changing in ZooKeeper at "
                        f"{self.connect.text}")

    def _parse_cluster_id(self, data: bytes) -> str:
        document = _load(data)
        cluster_id = document.get("id") if isinstance(document, dict) else None
        if not isinstance(cluster_id, str) or not cluster_id:
            raise KcliError(f"{self.connect.absolute(paths.CLUSTER_ID)} in ZooKeeper at {self.connect.text} holds "
                            f"no cluster id: {data[:200]!r}")
        return cluster_id

    def _broker_info(self) -> dict[str, Any]:
        protocols = {name: self.security_protocols.get(name) or (name if name in SECURITY_PROTOCOLS else "PLAINTEXT")
                     for name, _, _ in self.endpoints}
        # host/port are for pre-0.9 clients: the first PLAINTEXT endpoint, else null and -1 (BrokerIdZNode.encode).
        host, port = next(((h, p) for n, h, p in self.endpoints if protocols[n] == "PLAINTEXT"), (None, -1))
        info: dict[str, Any] = {
            "version": BROKER_INFO_VERSION,
            "host": host,
            "port": port,
            "jmx_port": -1,
            "timestamp": _now_ms(),
            "endpoints": [f"{name}://{_address(h, p)}" for name, h, p in self.endpoints],
            "listener_security_protocol_map": protocols,
            "features": {},
        }
        if self.rack is not None:
            info["rack"] = self.rack
        return info

    def _register(self) -> None:
        client = self._require()
        path = paths.broker(self.broker_id)
        for _ in range(2):
            try:
                self._wait(client.create_async(path, _json(self._broker_info()), ephemeral=True, makepath=True))
            except NodeExistsError:
                pass
            try:
                data, stat = self._wait(client.get_async(path))
            except NoNodeError:
                continue  # the other registration just went away
            if stat.ephemeralOwner == self._session_id():
                # Ours (just created, or created before a dropped connection): its czxid is the broker epoch.
                self.broker_epoch = stat.czxid
                return
            raise KcliError(
                f"broker id {self.broker_id} is already registered in ZooKeeper at {self.connect.absolute(path)} "
                f"by {_registered_by(data)}; stop that broker or give this one another broker.id (the "
                "registration of a killed broker disappears when its ZooKeeper session times out)")
        raise KcliError(f"{self.connect.absolute(path)} keeps changing in ZooKeeper at {self.connect.text}")

    def _delete_if_ours(self, path: str, timeout: float) -> bool:
        client = self._require()
        stat: ZnodeStat | None = self._wait(client.exists_async(path), timeout)
        if stat is not None and stat.ephemeralOwner == self._session_id():
            try:
                self._wait(client.delete_async(path, stat.version), timeout)
            except NoNodeError:
                return False
            return True
        return False

    # -- kazoo's threads ---------------------------------------------------------------------------
    def _on_state(self, state: str) -> None:
        # Called on kazoo's connection thread, which must not block: the work goes to a thread of its own.
        if self._stopping:
            return
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("ZooKeeper session of broker %d expired; its ephemeral nodes are gone", self.broker_id)
            if self._registered:
                self._tell(SESSION_EXPIRED)  # /controller went with the session, and every watch with it
        elif state == KazooState.CONNECTED and (client := self._client) is not None:
            client.handler.spawn(self._resync)

    def _resync(self) -> None:
        """After a reconnection: register again if the session was new, then tell the session listeners."""
        try:
            with self._lock:
                if self._stopping or self._client is None:
                    return
                if not self._registered:  # still recovering logs: no node to restore, nobody to tell yet
                    return
                event = RECONNECTED
                if self._session_lost:
                    with self._zk(f"registering broker {self.broker_id} again"):
                        self._register()
                    self._session_lost = False
                    event = SESSION_REESTABLISHED
                    log.warning("broker %d registered again at %s", self.broker_id,
                                self.connect.absolute(paths.broker(self.broker_id)))
        except KcliError as exc:
            log.error("ZooKeeper: %s", exc)
            return
        except Exception:  # a watch thread has nobody to raise to
            log.exception("ZooKeeper: unexpected failure after a session change")
            return
        if not self._stopping:
            self._tell(event)


def _parse_offset(where: str, data: bytes | None) -> int:
    """A stored offset as Kafka reads it (``new String(data).toLong``): decimal text, a sign allowed."""
    try:
        return int((data or b"").decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise KcliError(f"{where} does not hold an offset: {(data or b'')[:40]!r}") from None


def _load(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, ValueError):
        return None


def _registered_by(data: bytes) -> str:
    document = _load(data)
    if isinstance(document, dict):
        if isinstance(document.get("host"), str):
            return _address(document["host"], document.get("port", -1))
        endpoints = document.get("endpoints")
        if isinstance(endpoints, list) and endpoints and isinstance(endpoints[0], str):
            return endpoints[0].partition("://")[2] or endpoints[0]
    return "an unknown broker"

