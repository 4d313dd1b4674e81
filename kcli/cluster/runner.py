"""LocalCluster: a ZooKeeper and N kctl brokers on 127.0.0.1, with every byte under one data directory.

Layout of the data directory (the ports of a first start are kept in cluster.json, so a restart reuses the
ports and the data):

    cluster.json                 ports (and the pids while running) of ZooKeeper and each broker
    cluster.lock                 held by the running `kctl cluster run`: one runner per directory
    zookeeper/                   zoo.cfg, data/, zookeeper.out
    server-<id>.properties       generated at every start: broker.id, listeners, log.dirs, zookeeper.connect, ...
    broker-<id>/                 the broker's log dir; broker.log holds its stderr

Stopping: SIGTERM to every broker (they deregister and close their logs cleanly), SIGKILL to those still
running after the stop timeout, then ZooKeeper the same way.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import kcli
from kcli.broker.config import KNOWN, ConfigError, build_config
from kcli.cluster.security import ClusterSecurity
from kcli.errors import KcliError, UsageError
from kcli.processes import LOOPBACK, check_ports_free, command_line, free_ports, pid_alive, spawn, stop_pid, tail, \
    terminate, wait_ports_free
from kcli.storage.checkpoint import format_java_properties
from kcli.zk.server import ZooKeeperServer, ZooKeeperStartError, check_installed

CHROOT = "/kctl"
STATE_FILE = "cluster.json"
LOCK_FILE = "cluster.lock"
STATE_FORMAT = 1
MAX_REPLICATION_FACTOR = 3  # Kafka's defaults for internal topics; fewer brokers cannot hold more copies
# The runner assigns these; an --override of one would leave it unable to find or watch its brokers.
RESERVED_KEYS = frozenset({"broker.id", "node.id", "listeners", "advertised.listeners", "log.dirs", "log.dir",
                           "zookeeper.connect"})
POLL_S = 0.1  # while starting
WATCH_S = 0.5  # while running
PROBE_TIMEOUT_S = 1.0
CONTROLLED_SHUTDOWN_BACKOFF_MS = 500


class ClusterBusyError(KcliError):
    """Another `kctl cluster run` holds the data directory's lock."""


class ClusterStartError(KcliError):
    """A broker exited while starting or did not answer in time; the reason ends with the tail of its log."""


@dataclass(frozen=True)
class ClusterSpec:
    """What `kctl cluster run` was asked for. ``base_port`` puts broker i on base_port + i; without it (and without
    ports recorded by an earlier start) the ports are free ones the kernel picks."""

    brokers: int
    data_dir: Path = Path("kctl-cluster")
    base_port: int | None = None
    zookeeper_port: int | None = None
    overrides: tuple[str, ...] = ()
    racks: int = 0
    rack_prefix: str = "r"
    exit_on_failure: bool = False
    start_timeout_s: float = 60.0
    stop_timeout_s: float = 30.0
    # SASL_SSL everywhere, SCRAM-SHA-512 between brokers, a test CA, an admin user (kcli.cluster.security)
    security: bool = False


@dataclass(frozen=True)
class BrokerInfo:
    id: int
    port: int
    rack: str | None
    log_dir: Path
    config: Path
    log: Path
    pid: int

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "port": self.port, "rack": self.rack, "log_dir": str(self.log_dir),
                "config": str(self.config), "log": str(self.log), "pid": self.pid}


@dataclass(frozen=True)
class ClusterInfo:
    bootstrap: str  # host:port,host:port,... as clients take bootstrap.servers
    zookeeper: str  # host:port/chroot as brokers and `kctl zk --zookeeper` take it
    zookeeper_pid: int
    zookeeper_log: Path
    data_dir: Path
    brokers: tuple[BrokerInfo, ...]
    security: ClusterSecurity | None = None  # --security: the CA, the admin user, the client settings files

    def to_json(self) -> dict[str, Any]:
        out = {"bootstrap": self.bootstrap, "zookeeper": self.zookeeper, "zookeeper_pid": self.zookeeper_pid,
               "zookeeper_log": str(self.zookeeper_log), "data_dir": str(self.data_dir),
               "brokers": [b.to_json() for b in self.brokers]}
        if self.security is not None:
            out["security"] = self.security.to_json()
        return out


@dataclass(frozen=True)
class Progress:
    message: str


@dataclass(frozen=True)
class Started:
    cluster: ClusterInfo


@dataclass(frozen=True)
class ProcessExited:
    """A broker or ZooKeeper exited on its own while the cluster ran. ``fatal``: the runner stops the rest."""

    name: str
    pid: int
    status: int
    log: Path
    log_tail: str
    fatal: bool


ClusterEvent = Union[Progress, Started, ProcessExited]


@dataclass(frozen=True)
class ClusterRun:
    """How a run ended. ``cluster`` is None when it was stopped before every broker answered."""

    cluster: ClusterInfo | None
    exited: tuple[ProcessExited, ...] = ()
    killed: tuple[str, ...] = ()  # what did not stop on SIGTERM within the timeout

    @property
    def ok(self) -> bool:
        return not self.exited and not self.killed


@dataclass
class _Broker:
    id: int
    port: int
    rack: str | None
    log_dir: Path
    config: Path
    proc: subprocess.Popen | None = None
    exited: bool = False

    @property
    def name(self) -> str:
        return f"broker {self.id}"

    @property
    def log(self) -> Path:
        return self.log_dir / "broker.log"


class _Interrupted(Exception):
    """The stop event was set while the cluster was starting."""


def parse_overrides(overrides: tuple[str, ...], *, racks: int) -> dict[str, str]:
    """``key=value`` items to a dict (later wins); UsageError for a malformed item or a key the runner owns."""
    result: dict[str, str] = {}
    for item in overrides:
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UsageError(f"--override expects key=value, got {item!r}")
        if key in RESERVED_KEYS:
            raise UsageError(f"--override cannot set {key}: kctl cluster run assigns it to each broker")
        if key == "broker.rack" and racks:
            raise UsageError("--override broker.rack and --racks contradict each other: use one")
        result[key] = value
    return result


def broker_properties(broker_id: int, port: int, log_dir: Path, zookeeper: str, brokers: int, rack: str | None,
                      overrides: dict[str, str], security: ClusterSecurity | None = None) -> dict[str, str]:
    """One broker's server.properties: the runner's keys, replication defaults for ``brokers`` brokers, the
    secured cluster's listener, TLS and SASL keys (``security``), then the overrides."""
    replicas = str(min(MAX_REPLICATION_FACTOR, brokers))
    props = {
        "broker.id": str(broker_id),
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port}",
        "log.dirs": str(log_dir),
        "zookeeper.connect": zookeeper,
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": str(min(2, brokers)),  # Kafka's default 2, at most the brokers there are
        "default.replication.factor": replicas,
        "min.insync.replicas": "1",  # Kafka's default
        # Stopping the whole cluster, the last broker holding a leadership has no live replica to hand it to: its
        # controlled shutdown fails every attempt; 500 ms apart rather than Kafka's 5 s, a Ctrl-C takes a second
        # instead of 10 s (--override restores Kafka's 5000)
        "controlled.shutdown.retry.backoff.ms": str(CONTROLLED_SHUTDOWN_BACKOFF_MS),
    }
    if rack is not None:
        props["broker.rack"] = rack
    if security is not None:
        props.update(security.broker_settings(broker_id, port))
        if "authorizer.class.name" in KNOWN:  # ACLs, where this kctl has the authorizer (super.users: the brokers)
            props["authorizer.class.name"] = "kafka.security.authorizer.AclAuthorizer"
            props["super.users"] = security.super_users
    props.update(overrides)
    return props


def broker_rack(broker_id: int, spec: ClusterSpec) -> str | None:
    """broker.rack of broker ``broker_id``: the racks dealt round robin, named prefix + number."""
    return f"{spec.rack_prefix}{broker_id % spec.racks}" if spec.racks else None


class LocalCluster:
    """Starts, watches and stops one local cluster; ``run()`` does all three until ``stop`` is set."""

    def __init__(self, spec: ClusterSpec, *, stop: threading.Event,
                 on_event: Callable[[ClusterEvent], None] = lambda _event: None) -> None:
        self.spec = spec
        self.stop_event = stop
        self.on_event = on_event
        self.data_dir = spec.data_dir.resolve()
        self.overrides = self._validate(spec)
        self.zookeeper: ZooKeeperServer | None = None
        self.brokers: list[_Broker] = []
        self._lock_fd: int | None = None
        self._state_base: dict[str, Any] = {"format": STATE_FORMAT, "zookeeper": {}, "brokers": {}}
        self._exited: list[ProcessExited] = []
        self._killed: list[str] = []
        self.security: ClusterSecurity | None = None
        self._probe_security: Any = None  # the admin's kcli.protocol.security.ClientSecurity (--security)

    # -- the one call ------------------------------------------------------------------------------
    def run(self) -> ClusterRun:
        """Start everything, block until the stop event (or a fatal exit), stop everything; always cleans up."""
        check_installed()  # before any directory is made: nothing to undo
        self._lock()
        info = None
        try:
            try:
                info = self._start()
            except _Interrupted:
                self.on_event(Progress("interrupted while starting"))
            else:
                self.on_event(Started(info))
                self._watch()
        finally:
            try:
                self._stop_all()
            finally:
                self._unlock()
        return ClusterRun(info, tuple(self._exited), tuple(self._killed))

    # -- checks and state --------------------------------------------------------------------------
    @staticmethod
    def _validate(spec: ClusterSpec) -> dict[str, str]:
        if spec.brokers < 1:
            raise UsageError(f"--brokers must be at least 1, got {spec.brokers}")
        if spec.racks < 0:
            raise UsageError(f"--racks must be 0 (no racks) or more, got {spec.racks}")
        if spec.base_port is not None and not 1 <= spec.base_port <= 65536 - spec.brokers:
            raise UsageError(f"--base-port {spec.base_port} leaves no room for {spec.brokers} broker ports "
                             "(1-65535)")
        if spec.zookeeper_port is not None and not 1 <= spec.zookeeper_port <= 65535:
            raise UsageError(f"--zookeeper-port {spec.zookeeper_port} is not a port (1-65535)")
        if spec.base_port is not None and spec.zookeeper_port is not None and \
                spec.base_port <= spec.zookeeper_port < spec.base_port + spec.brokers:
            raise UsageError(f"--zookeeper-port {spec.zookeeper_port} is one of the broker ports "
                             f"{spec.base_port}-{spec.base_port + spec.brokers - 1}")
        overrides = parse_overrides(spec.overrides, racks=spec.racks)
        try:  # what a broker would refuse at start, refused before anything starts
            build_config(broker_properties(0, 9092, Path("/"), "127.0.0.1:2181/kctl", spec.brokers,
                                           broker_rack(0, spec), overrides))
        except ConfigError as exc:
            raise UsageError(f"--override: {exc.reason}") from None
        return overrides

    def _lock(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip()
            os.close(fd)
            raise ClusterBusyError(f"another kctl cluster run (pid {holder or 'unknown'}) uses this directory; stop "
                                   "it first or give --data-dir another directory", path=str(self.data_dir)) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _read_state(self) -> dict[str, Any]:
        path = self.data_dir / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise KcliError(f"unreadable ({exc}); remove it to start afresh (the ports are chosen again)",
                            path=str(path)) from None
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise KcliError(f"not a format {STATE_FORMAT} state file; remove it to start afresh", path=str(path))
        return state

    def _write_state(self) -> None:
        zk = self.zookeeper
        state = self._state_base
        state["zookeeper"] = {"port": zk.port if zk else None, "pid": zk.pid if zk else None}
        for b in self.brokers:
            state["brokers"][str(b.id)] = {"port": b.port, "pid": b.proc.pid if b.proc and not b.exited else None}
        path = self.data_dir / STATE_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        tmp.replace(path)

    def _stop_leftovers(self, state: dict[str, Any]) -> None:
        """Processes an earlier runner left behind (it was killed before it could stop them) hold the log dirs'
        locks and the ports: stop them, when their command line shows they are this directory's."""
        # Brokers first: they deregister from ZooKeeper as they stop.
        entries = [(f"broker {i}", e) for i, e in sorted((state.get("brokers") or {}).items())]
        entries.append(("ZooKeeper", state.get("zookeeper") or {}))
        released: list[int] = []
        for name, entry in entries:
            pid = entry.get("pid") if isinstance(entry, dict) else None
            if isinstance(pid, int) and pid_alive(pid) and str(self.data_dir) in command_line(pid):
                self.on_event(Progress(f"stopping {name} (pid {pid}), left running by an earlier run"))
                stop_pid(pid, self.spec.stop_timeout_s)
                if isinstance(entry.get("port"), int):
                    released.append(entry["port"])
        # a stopped process closes its sockets last: its ports are reused below
        wait_ports_free(released, self.spec.stop_timeout_s)

    def _plan_ports(self, state: dict[str, Any]) -> tuple[int, dict[int, int], bool]:
        """ZooKeeper's port, each broker's, and whether any came from the state file."""
        recorded_brokers = {int(k): v.get("port") for k, v in (state.get("brokers") or {}).items()
                            if isinstance(v, dict) and isinstance(v.get("port"), int)}
        recorded_zk = (state.get("zookeeper") or {}).get("port")
        from_state = False
        ports: dict[int, int] = {}
        for i in range(self.spec.brokers):
            if self.spec.base_port is not None:
                ports[i] = self.spec.base_port + i
            elif i in recorded_brokers:
                ports[i] = recorded_brokers[i]
                from_state = True
        zk_port = self.spec.zookeeper_port
        if zk_port is None and isinstance(recorded_zk, int) and recorded_zk not in ports.values():
            zk_port, from_state = recorded_zk, True
        missing = [i for i in range(self.spec.brokers) if i not in ports] + ([None] if zk_port is None else [])
        taken = frozenset(ports.values()) | frozenset(recorded_brokers.values()) | \
            (frozenset({zk_port}) if zk_port else frozenset())
        for slot, port in zip(missing, free_ports(len(missing), exclude=taken)):
            if slot is None:
                zk_port = port
            else:
                ports[slot] = port
        assert zk_port is not None
        return zk_port, ports, from_state

    # -- start ---------------------------------------------------------------------------------------
    def _start(self) -> ClusterInfo:
        state = self._read_state()
        self._state_base = {"format": STATE_FORMAT, "zookeeper": {},
                            "brokers": {k: {"port": v.get("port"), "pid": None}
                                        for k, v in (state.get("brokers") or {}).items() if isinstance(v, dict)}}
        self._stop_leftovers(state)
        zk_port, ports, from_state = self._plan_ports(state)
        hint = "choose others with --base-port and --zookeeper-port, or stop what listens there"
        if from_state:
            hint += f" (this directory's earlier ports are in {self.data_dir / STATE_FILE})"
        check_ports_free({"ZooKeeper": zk_port, **{f"broker {i}": p for i, p in ports.items()}}, hint=hint)

        zookeeper = f"{LOOPBACK}:{zk_port}{CHROOT}"
        if self.spec.security:
            from kcli.cluster.security import prepare
            from kcli.protocol.security import ClientSecurity

            self.security = prepare(self.data_dir, sorted(ports))
            self._probe_security = ClientSecurity.from_properties(self.security.client_settings(java=False))
            self.on_event(Progress(f"TLS and SASL: CA, broker certificates and passwords in {self.security.directory}"))
        for i, port in sorted(ports.items()):
            rack = broker_rack(i, self.spec)
            broker = _Broker(i, port, rack, self.data_dir / f"broker-{i}", self.data_dir / f"server-{i}.properties")
            props = broker_properties(i, port, broker.log_dir, zookeeper, self.spec.brokers, rack, self.overrides,
                                      self.security)
            broker.config.write_text("# written by kctl cluster run at every start: edits are lost, use --override\n"
                                     + format_java_properties(props))
            self.brokers.append(broker)
        unknown = build_config(props).unknown
        if unknown:
            self.on_event(Progress(f"the brokers will ignore unknown configuration keys: {', '.join(sorted(unknown))}"))

        self.zookeeper = ZooKeeperServer(self.data_dir / "zookeeper", zk_port)
        self.on_event(Progress(f"starting ZooKeeper on {self.zookeeper.connect} "
                               f"(log: {self.zookeeper.log_path})"))
        self.zookeeper.launch()
        self._write_state()
        self._wait(f"ZooKeeper on {self.zookeeper.connect}", self.zookeeper.ready, self.zookeeper.log_path,
                   ZooKeeperStartError)
        self.on_event(Progress(f"ZooKeeper serves on {self.zookeeper.connect} (pid {self.zookeeper.pid})"))
        # None of this directory's brokers runs now: any registration is a dead broker's, and would keep a new
        # broker with its id from registering until the dead one's session times out.
        from kcli.zk.cleanup import clear_stale_registrations

        stale = clear_stale_registrations(zookeeper, timeout=self.spec.start_timeout_s)
        if stale:
            self.on_event(Progress(f"removed what brokers that did not stop cleanly left in ZooKeeper: "
                                   f"{', '.join(stale)}"))
        if self.security is not None:
            from kcli.zk.scram_setup import add_scram_users

            # before the brokers: they log in to each other as the broker user from the start
            add_scram_users(zookeeper, self.security.passwords, timeout=self.spec.start_timeout_s)
            self.on_event(Progress(f"SCRAM users {', '.join(sorted(self.security.passwords))} written to ZooKeeper"))

        env = _child_env()
        for broker in self.brokers:
            self.on_event(Progress(f"starting broker {broker.id} on {LOOPBACK}:{broker.port} (log: {broker.log})"))
            broker.log_dir.mkdir(parents=True, exist_ok=True)
            broker.proc = spawn([sys.executable, "-m", "kcli", "broker", "run", "--config", str(broker.config)],
                                log_path=broker.log, cwd=self.data_dir, env=env)
        self._write_state()
        for broker in self.brokers:
            self._wait(f"broker {broker.id} on {LOOPBACK}:{broker.port}",
                       lambda b=broker: self._broker_ready(b, self._probe_security), broker.log)
            self.on_event(Progress(f"broker {broker.id} serves on {LOOPBACK}:{broker.port} (pid {broker.proc.pid})"))
        return ClusterInfo(
            bootstrap=",".join(f"{LOOPBACK}:{b.port}" for b in self.brokers), zookeeper=zookeeper,
            zookeeper_pid=self.zookeeper.pid or -1, zookeeper_log=self.zookeeper.log_path, data_dir=self.data_dir,
            brokers=tuple(BrokerInfo(b.id, b.port, b.rack, b.log_dir, b.config, b.log, b.proc.pid)
                          for b in self.brokers if b.proc is not None), security=self.security)

    def _wait(self, what: str, ready: Callable[[], bool], log: Path,
              error: type[KcliError] = ClusterStartError) -> None:
        deadline = time.monotonic() + self.spec.start_timeout_s
        while not ready():
            if self.stop_event.is_set():
                raise _Interrupted
            if time.monotonic() > deadline:
                raise error(f"{what} did not answer within {self.spec.start_timeout_s:g}s; the end of {log}:\n"
                            f"{tail(log)}")
            time.sleep(POLL_S)
        if self.stop_event.is_set():
            raise _Interrupted

    @staticmethod
    def _broker_ready(broker: _Broker, security: Any = None) -> bool:
        from kcli.client.client import BrokerConnection

        assert broker.proc is not None
        if broker.proc.poll() is not None:
            broker.exited = True
            raise ClusterStartError(f"broker {broker.id} exited with status {broker.proc.returncode} while starting; "
                                    f"the end of {broker.log}:\n{tail(broker.log)}")
        try:
            # it answers ApiVersions (and, secured, the admin user logs in)
            BrokerConnection(LOOPBACK, broker.port, timeout=PROBE_TIMEOUT_S,
                             **({} if security is None else {"security": security})).close()
        except (KcliError, OSError):
            return False
        return True

    # -- run and stop ----------------------------------------------------------------------------------
    def _watch(self) -> None:
        # Polls with sleep rather than Event.wait: a signal handler may set the event (processes.stop_on_signals).
        while not self.stop_event.is_set():
            time.sleep(WATCH_S)
            for broker in self.brokers:
                if broker.exited or broker.proc is None or broker.proc.poll() is None:
                    continue
                broker.exited = True
                self._report_exit(broker.name, broker.proc, broker.log, fatal=self.spec.exit_on_failure)
                self._write_state()
            zk = self.zookeeper
            if zk is not None and zk.proc is not None and zk.proc.poll() is not None:
                self._report_exit("ZooKeeper", zk.proc, zk.log_path, fatal=True)
                return
            if any(e.fatal for e in self._exited):
                return
            if all(b.exited for b in self.brokers):
                self.on_event(Progress("no broker is left running"))
                return

    def _report_exit(self, name: str, proc: subprocess.Popen, log: Path, *, fatal: bool) -> None:
        event = ProcessExited(name, proc.pid, proc.returncode, log, tail(log), fatal)
        self._exited.append(event)
        self.on_event(event)

    def _stop_all(self) -> None:
        running = [b for b in self.brokers if b.proc is not None and b.proc.poll() is None]
        if running:
            self.on_event(Progress(f"stopping {len(running)} broker{'s' if len(running) > 1 else ''}"))
            killed = {id(p) for p in terminate([b.proc for b in running if b.proc], self.spec.stop_timeout_s)}
            for b in running:
                if b.proc is not None and id(b.proc) in killed:
                    self._killed.append(b.name)
                    self.on_event(Progress(f"{b.name} (pid {b.proc.pid}) did not stop within "
                                           f"{self.spec.stop_timeout_s:g}s: killed"))
        for b in self.brokers:
            b.exited = True
        zk = self.zookeeper
        if zk is not None and zk.proc is not None:
            if zk.proc.poll() is None:
                self.on_event(Progress("stopping ZooKeeper"))
                pid = zk.pid
                if not zk.stop(self.spec.stop_timeout_s):
                    self._killed.append("ZooKeeper")
                    self.on_event(Progress(f"ZooKeeper (pid {pid}) did not stop within "
                                           f"{self.spec.stop_timeout_s:g}s: killed"))
            zk.proc = None
        if self.zookeeper is not None or self.brokers:
            self._write_state()
            self.on_event(Progress("stopped"))


def _child_env() -> dict[str, str]:
    """The brokers run the kcli this process runs, also from a source checkout that is not installed."""
    env = dict(os.environ)
    root = Path(kcli.__file__).resolve().parent.parent
    if root.name not in ("site-packages", "dist-packages"):  # never put site-packages before the stdlib
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    return env


def run_cluster(spec: ClusterSpec, *, stop: threading.Event,
                on_event: Callable[[ClusterEvent], None] = lambda _event: None) -> ClusterRun:
    """Start ZooKeeper and ``spec.brokers`` brokers, report ``Started`` through ``on_event``, keep them running
    until ``stop`` is set (or, with ``exit_on_failure``, one exits), then stop them all."""
    return LocalCluster(spec, stop=stop, on_event=on_event).run()


__all__ = ["BrokerInfo", "ClusterBusyError", "ClusterEvent", "ClusterInfo", "ClusterRun", "ClusterSpec",
           "ClusterStartError", "LocalCluster", "Progress", "ProcessExited", "Started", "run_cluster"]
