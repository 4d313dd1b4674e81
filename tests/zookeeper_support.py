"""A real ZooKeeper server from Debian's `zookeeper` package, on a free loopback port with its own data dir.

Started once per test session (conftest.py's `zookeeper` fixture); tests keep apart with a chroot each.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
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
            # The port opens before the server serves sessions: a kazoo session proves it does.
            client = kazoo.KazooClient(hosts=self.connect, timeout=10)
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
