"""A real ZooKeeper server from Debian's `zookeeper` package, on a free loopback port with its own data dir.

Started once per test session (conftest.py's `zookeeper` fixture); tests keep apart with a chroot each.
"""

from __future__ import annotations

import select
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

ZOOKEEPER_HOME = Path("/usr/share/zookeeper")
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # where Debian's package puts the server's classes
CLASSPATH = "/usr/share/java/*:/usr/share/zookeeper/*:/etc/zookeeper/conf"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ZooKeeperServer:
    """One standalone ZooKeeper (QuorumPeerMain) process; ``connect`` is ``127.0.0.1:PORT``."""

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "zookeeper.out"

    def start(self, timeout: float = 60.0) -> None:
        java = shutil.which("java")
        if java is None:
            pytest.skip("ZooKeeper tests need Java (apt-get install -y default-jre-headless)")
        if not ZOOKEEPER_HOME.is_dir() or not ZOOKEEPER_JAR.is_file():
            pytest.skip(f"ZooKeeper tests need Debian's zookeeper package ({ZOOKEEPER_JAR} is missing; "
                        "apt-get install -y zookeeper)")
        kazoo = pytest.importorskip("kazoo.client")
        (self.workdir / "data").mkdir(parents=True, exist_ok=True)
        config = self.workdir / "zoo.cfg"
        config.write_text("\n".join([
            "tickTime=500",  # sessions may be as short as 2 ticks: lets tests use 1-second sessions
            f"dataDir={self.workdir / 'data'}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "maxClientCnxns=0",  # every test and broker connects from 127.0.0.1; the default caps that at 60
            "forceSync=no",  # a throwaway server: no fsync per transaction
            "preAllocSize=1024",
            "",
        ]))
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                [java, "-Xmx256m", "-cp", CLASSPATH, f"-Dzookeeper.log.dir={self.workdir}",
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(config)],
                cwd=self.workdir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"ZooKeeper did not answer on {self.connect} within {timeout}s:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    pass
            except OSError:
                time.sleep(0.1)
                continue
            # The port opens before the server serves sessions: a kazoo session proves it does. A short session
            # timeout keeps kazoo from waiting long on a server that accepted but does not answer yet.
            client = kazoo.KazooClient(hosts=self.connect, timeout=2)
            try:
                client.start(timeout=max(1.0, deadline - time.monotonic()))
                client.get_children("/")
                return
            except Exception:
                time.sleep(0.1)
            finally:
                client.stop()
                client.close()

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout)
        self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


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
