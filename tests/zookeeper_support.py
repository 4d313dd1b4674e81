"""A real ZooKeeper server from Debian's `zookeeper` package, on a free loopback port with its own data dir.

The launcher is kcli's own (kcli/zk/server.py); this wrapper turns "Java or ZooKeeper not installed" into a skip.
Started once per test session (conftest.py's `zookeeper` fixture); tests keep apart with a chroot each.
"""

from __future__ import annotations

import select
import socket
import threading
from pathlib import Path

import pytest

from kcli.processes import free_port
from kcli.zk import server as zk_server

import tiers

__all__ = ["TcpProxy", "ZooKeeperServer", "free_port"]


class ZooKeeperServer(zk_server.ZooKeeperServer):
    """kcli's ZooKeeperServer with 500 ms ticks (sessions as short as 1 s), skipping when it cannot run here."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        super().__init__(workdir, port, tick_time_ms=500)

    def start(self, timeout: float = 60.0) -> None:
        tiers.require("zookeeper", "a ZooKeeper server")
        try:
            zk_server.check_installed(self.jar)
        except zk_server.ZooKeeperNotInstalledError as exc:
            pytest.skip(f"ZooKeeper tests: {exc.describe()}")
        pytest.importorskip("kazoo.client")
        super().start(timeout)


class TcpProxy:
    """Forwards a free loopback port to ``upstream``; ``cut()`` drops every connection and refuses new ones
    until ``restore()``: a network partition between a client and the session's one ZooKeeper."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen()
        listener.settimeout(0.1)
        self._listener = listener
        self._acceptor = threading.Thread(target=self._accept, args=(listener,), daemon=True)
        self._acceptor.start()

    restore = start

    def cut(self) -> None:
        self._listener = None
        if self._acceptor is not None:
            self._acceptor.join()  # it closes the listener: the port is free again once it returns
            self._acceptor = None
        with self._lock:
            for sock in self._connections:
                try:
                    sock.shutdown(socket.SHUT_RDWR)  # wakes the pump, which closes both ends
                except OSError:
                    pass

    stop = cut

    def _accept(self, listener: socket.socket) -> None:
        with listener:
            while self._listener is listener:
                try:
                    downstream, _ = listener.accept()
                except TimeoutError:
                    continue
                try:
                    upstream = socket.create_connection(self.upstream, timeout=5)
                except OSError:
                    downstream.close()
                    continue
                upstream.settimeout(None)
                downstream.settimeout(None)
                with self._lock:
                    self._connections.update((downstream, upstream))
                threading.Thread(target=self._pump, args=(downstream, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                readable, _, _ = select.select([a, b], [], [], 1.0)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (b if sock is a else a).sendall(data)
        except (OSError, ValueError):
            pass
        finally:
            with self._lock:
                self._connections.difference_update((a, b))
            a.close()
            b.close()
