"""ZooKeeperServer: one standalone ZooKeeper from Debian's `zookeeper` package (QuorumPeerMain from
/usr/share/java) on a loopback port, with a generated zoo.cfg and its data in one directory.

No kazoo here: ZooKeeper's "srvr" four-letter word tells when it serves. Used by `kctl cluster run` and the tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from kcli.errors import KcliError
from kcli.processes import LOOPBACK, check_ports_free, free_port, spawn, tail, terminate

ZOOKEEPER_HOME = Path("/usr/share/zookeeper")
ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")  # where Debian's package puts the server's classes
CLASSPATH = "/usr/share/java/*:/usr/share/zookeeper/*:/etc/zookeeper/conf"
MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
# Debian's `zookeeper` depends on default-jre, so installing it brings Java along.
INSTALL_ZOOKEEPER = "apt-get install -y zookeeper"
INSTALL_JAVA = "apt-get install -y default-jre-headless"
PROBE_TIMEOUT_S = 1.0


class ZooKeeperNotInstalledError(KcliError):
    """Java or Debian's zookeeper package is missing: nothing was started. ``fix`` is the command that helps."""

    def __init__(self, reason: str, *, fix: str) -> None:
        self.fix = fix
        super().__init__(f"{reason}; install it with: {fix}")


class ZooKeeperStartError(KcliError):
    """ZooKeeper exited while starting, or did not serve in time; the reason ends with the tail of its log."""


def _apt(command: str) -> str:
    return command if os.geteuid() == 0 else f"sudo {command}"


def find_java() -> str:
    """$JAVA_HOME/bin/java if set, else java from PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and os.access(Path(home) / "bin" / "java", os.X_OK):
        return str(Path(home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise ZooKeeperNotInstalledError("ZooKeeper needs Java, and there is no java on PATH (nor in $JAVA_HOME)",
                                         fix=_apt(INSTALL_JAVA))
    return java


def check_installed(jar: Path = ZOOKEEPER_JAR) -> str:
    """The java to run ZooKeeper with; ZooKeeperNotInstalledError when Java or the package is missing."""
    java = find_java()
    if not jar.is_file():
        raise ZooKeeperNotInstalledError(f"Debian's zookeeper package is not installed ({jar} is missing)",
                                         fix=_apt(INSTALL_ZOOKEEPER))
    return java


JVM_OPTIONS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


class ZooKeeperServer:
    """One standalone ZooKeeper (QuorumPeerMain) process; ``connect`` is ``127.0.0.1:PORT``.

    ``workdir`` holds zoo.cfg, data/ and zookeeper.out. A short ``tick_time_ms`` allows short sessions (ZooKeeper
    grants between 2 and 20 ticks); the tests use 500 ms for 1-second sessions.
    """

    def __init__(self, workdir: Path, port: int | None = None, *, tick_time_ms: int = 2000, heap_mb: int = 256,
                 jar: Path = ZOOKEEPER_JAR) -> None:
        self.workdir = Path(workdir)
        self.port = port or free_port()
        self.tick_time_ms = tick_time_ms
        self.heap_mb = heap_mb
        self.jar = jar
        self.proc: subprocess.Popen | None = None

    @property
    def connect(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "zookeeper.out"

    @property
    def config_path(self) -> Path:
        return self.workdir / "zoo.cfg"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def write_config(self) -> None:
        data = self.workdir / "data"
        data.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("\n".join([
            f"tickTime={self.tick_time_ms}",
            f"dataDir={data.resolve()}",
            f"clientPort={self.port}",
            f"clientPortAddress={LOOPBACK}",
            "admin.enableServer=false",  # its Jetty would take port 8080
            "4lw.commands.whitelist=srvr,ruok",
            "maxClientCnxns=0",  # every client and broker connects from 127.0.0.1; the default caps that at 60
            "forceSync=no",  # a server on one machine for trying things out: no fsync per transaction
            "preAllocSize=1024",  # KiB of transaction log allocated ahead (64 MiB by default)
            "",
        ]))

    def launch(self) -> None:
        """Start the process and return at once (``ready()`` tells when it serves)."""
        java = check_installed(self.jar)
        check_ports_free({"ZooKeeper": self.port})
        self.write_config()
        # A small server on one machine: C1 only and the serial collector start it with a third less CPU (about
        # 1.2 CPU-s instead of 1.8 here) than the JVM's defaults, whose C2 compiler threads and G1 suit long runs.
        self.proc = spawn([java, f"-Xmx{self.heap_mb}m", *JVM_OPTIONS, "-cp", CLASSPATH,
                           f"-Dzookeeper.log.dir={self.workdir.resolve()}", MAIN_CLASS, str(self.config_path.resolve())],
                          log_path=self.log_path, cwd=self.workdir)

    def ready(self) -> bool:
        """True once ZooKeeper serves sessions; ZooKeeperStartError if the process has exited."""
        if self.proc is None:
            raise ZooKeeperStartError("ZooKeeper was not started")
        if self.proc.poll() is not None:
            code = self.proc.returncode
            self.proc = None
            raise ZooKeeperStartError(f"ZooKeeper exited with status {code}; the end of {self.log_path}:\n"
                                      f"{tail(self.log_path)}")
        return serving(self.port)

    def start(self, timeout: float = 60.0) -> None:
        self.launch()
        deadline = time.monotonic() + timeout
        while not self.ready():
            if time.monotonic() > deadline:
                self.stop()
                raise ZooKeeperStartError(f"ZooKeeper did not serve on {self.connect} within {timeout:g}s; "
                                          f"the end of {self.log_path}:\n{tail(self.log_path)}")
            time.sleep(0.1)

    def poll(self) -> int | None:
        """None while it runs (or was never started), else its exit status."""
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout: float = 30.0) -> bool:
        """SIGTERM, then SIGKILL after ``timeout``; False when it had to be killed. Safe to call twice."""
        if self.proc is None:
            return True
        killed = terminate([self.proc], timeout)
        self.proc = None
        return not killed

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def serving(port: int, host: str = LOOPBACK) -> bool:
    """ZooKeeper's "srvr" answer names its mode once it serves; before that it answers "not currently serving"
    (the port opens before sessions are served) or nothing at all."""
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S) as sock:
            sock.sendall(b"srvr")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
    except OSError:
        return False
    return b"Mode: " in answer
