"""A network lab for fault tests and benchmarks: ZooKeeper, each broker and the clients in a network namespace of
their own, joined by one bridge (itself in a namespace), with addresses only on the lab's interfaces
(10.23.0.0/24) and no default route. Nothing outside the lab sees it, so labs of parallel runs do not collide.

Faults are blackhole routes: ``cut(a, b)`` adds ``blackhole <b>/32`` in a's namespace and ``<a>/32`` in b's, so
neither reaches the other (connects fail at once with EINVAL; connections already open stall, their TCP
retransmissions backing off, until the route goes); ``heal()`` removes them all. The clients' namespace is never
cut: clients and the observer (this process, inside ``entered()``) always reach every node. There is no netem
qdisc in this kernel: delay and loss would need a user-space relay.

Needs root and `ip netns` (``unavailable()`` says why not) and Debian's ZooKeeper. ``close()`` removes every
process and namespace the lab made, also after a failure; ``NetnsLab`` is a context manager that does.
Used by tests/broker/test_network_partition.py and bench/bench_partitions.py.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import tiers

REPO = Path(__file__).resolve().parents[1]
SUBNET = "10.23.0"
ZK_PORT = 2181
BROKER_PORT = 9092
CLONE_NEWNET = 0x40000000


def unavailable() -> str | None:
    """Why a lab cannot be built here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed"
    name = f"k23probe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", name], capture_output=True)
    try:
        ctypes.CDLL(None, use_errno=True).setns  # noqa: B018 - glibc has it
    except AttributeError:
        return "libc has no setns"
    return None


def _run(*argv: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


class NetnsLab:
    """Nodes "zk", "b0".."b{n-1}" and "cl" (the clients), each a namespace ``<prefix>-<node>``, plus
    ``<prefix>-br`` holding the bridge. ``create()`` builds it; ``start_zookeeper()`` and ``start_broker(i)`` start
    the servers (brokers from ``tree``'s kcli, this checkout by default); ``close()`` removes everything."""

    def __init__(self, workdir: Path, brokers: int = 3, *, tree: Path | None = None,
                 broker_config: dict[str, str] | None = None, zk_tick_ms: int = 500) -> None:
        self.workdir = Path(workdir)
        self.brokers = brokers
        self.tree = Path(tree) if tree is not None else REPO
        self.broker_config = dict(broker_config or {})
        self.zk_tick_ms = zk_tick_ms
        self.prefix = f"k23{os.getpid() % 100000}{random.randrange(1000):03d}"
        self.nodes = ["zk", *(f"b{i}" for i in range(brokers)), "cl"]
        self.made: list[str] = []  # namespaces, in creation order
        self.procs: dict[str, subprocess.Popen] = {}  # node -> its server process
        self._served: dict[int, int] = {}  # broker id -> size of its log when last started
        self.cuts: set[frozenset[str]] = set()  # pairs of nodes that cannot reach each other
        self.timeline: list[tuple[float, frozenset[frozenset[str]]]] = []  # (monotonic time, cuts from then)

    # -- naming --------------------------------------------------------------------------------------------
    def ns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def ip(self, node: str) -> str:
        if node == "zk":
            return f"{SUBNET}.2"
        if node == "cl":
            return f"{SUBNET}.100"
        return f"{SUBNET}.{10 + int(node[1:])}"

    @property
    def zk_connect(self) -> str:
        return f"{self.ip('zk')}:{ZK_PORT}"

    def bootstrap(self, broker_ids: Sequence[int] | None = None) -> str:
        ids = range(self.brokers) if broker_ids is None else broker_ids
        return ",".join(f"{self.ip(f'b{i}')}:{BROKER_PORT}" for i in ids)

    def node_of(self, broker_id: int) -> str:
        return f"b{broker_id}"

    # -- building and removing -----------------------------------------------------------------------------
    def __enter__(self) -> NetnsLab:
        self.create()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create(self) -> None:
        tiers.require("cluster", "a network lab of ZooKeeper and brokers")
        self.workdir.mkdir(parents=True, exist_ok=True)
        bridge = self.ns("br")
        _run("ip", "netns", "add", bridge)
        self.made.append(bridge)
        _run("ip", "-n", bridge, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", bridge, "link", "set", "br0", "up")
        for node in self.nodes:
            name = self.ns(node)
            _run("ip", "netns", "add", name)
            self.made.append(name)
            _run("ip", "-n", bridge, "link", "add", f"v-{node}", "type", "veth", "peer", "name", "eth0", "netns", name)
            _run("ip", "-n", bridge, "link", "set", f"v-{node}", "master", "br0", "up")
            _run("ip", "-n", name, "addr", "add", f"{self.ip(node)}/24", "dev", "eth0")
            _run("ip", "-n", name, "link", "set", "eth0", "up")
            _run("ip", "-n", name, "link", "set", "lo", "up")
        self.timeline.append((time.monotonic(), frozenset()))

    def close(self) -> list[str]:
        """Stop every server (SIGTERM, SIGKILL after 20 s): the brokers, then ZooKeeper (a broker stops cleanly
        only while ZooKeeper serves: it deregisters there); kill whatever else still runs in the lab's namespaces
        (by pid: only processes of this lab are there), delete the namespaces. Returns what it could not remove
        (nothing, normally)."""
        with contextlib.suppress(Exception):
            self.heal()  # a stopping broker's controlled shutdown needs its peers
        for group in ([p for node, p in self.procs.items() if node != "zk"],
                      [p for node, p in self.procs.items() if node == "zk"]):
            procs = [p for p in group if p.poll() is None]
            for proc in procs:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 20
            for proc in procs:
                try:
                    proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        left = []
        for name in reversed(self.made):
            pids = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            for _ in range(50):
                if not subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True).stdout.split():
                    break
                time.sleep(0.1)
            done = subprocess.run(["ip", "netns", "del", name], capture_output=True, text=True)
            if done.returncode != 0 and name in self.existing():
                left.append(f"{name}: {done.stderr.strip()}")
        self.made = [m for m in self.made if m in self.existing()]
        return left

    def existing(self) -> list[str]:
        """The lab's namespaces that exist now."""
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        return [line.split()[0] for line in out.splitlines() if line.startswith(self.prefix + "-")]

    # -- this process inside the lab ---------------------------------------------------------------------------
    @contextlib.contextmanager
    def entered(self, node: str = "cl") -> Iterator[None]:
        """The calling thread in ``node``'s namespace (threads it starts meanwhile stay there: kazoo's,
        librdkafka's), back in its own one afterwards."""
        libc = ctypes.CDLL(None, use_errno=True)
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{self.ns(node)}", os.O_RDONLY)
        try:
            if libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns into {self.ns(node)} failed")
            try:
                yield
            finally:
                if libc.setns(own, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns back failed")
        finally:
            os.close(target)
            os.close(own)

    # -- servers -------------------------------------------------------------------------------------------------
    def _spawn(self, node: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None
               ) -> subprocess.Popen:
        with open(log, "ab") as out:
            proc = subprocess.Popen(["ip", "netns", "exec", self.ns(node), *argv], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir, env=env,
                                    process_group=0)
        self.procs[node] = proc
        return proc

    def start_zookeeper(self, timeout: float = 60) -> None:
        from kcli.zk.server import CLASSPATH, JVM_OPTIONS, MAIN_CLASS, check_installed, serving

        java = check_installed()
        home = self.workdir / "zookeeper"
        (home / "data").mkdir(parents=True, exist_ok=True)
        config = home / "zoo.cfg"
        config.write_text("\n".join([
            f"tickTime={self.zk_tick_ms}", f"dataDir={(home / 'data').resolve()}", f"clientPort={ZK_PORT}",
            f"clientPortAddress={self.ip('zk')}", "admin.enableServer=false", "4lw.commands.whitelist=srvr,ruok",
            "maxClientCnxns=0", "forceSync=no", "preAllocSize=1024", ""]))
        self._spawn("zk", [java, "-Xmx256m", *JVM_OPTIONS, "-cp", CLASSPATH, f"-Dzookeeper.log.dir={home.resolve()}",
                           MAIN_CLASS, str(config.resolve())], home / "zookeeper.out")
        with self.entered():
            self._wait(lambda: serving(ZK_PORT, self.ip("zk")), timeout, "ZooKeeper serving", "zk")

    def broker_log(self, broker_id: int) -> Path:
        return self.workdir / f"broker-{broker_id}" / "broker.log"

    def start_brokers(self, timeout: float = 120) -> None:
        """Every broker, launched together, each then awaited until it serves."""
        for broker_id in range(self.brokers):
            self.start_broker(broker_id, wait=False)
        for broker_id in range(self.brokers):
            self._wait_serving(broker_id, timeout)

    def start_broker(self, broker_id: int, timeout: float = 60, *, wait: bool = True) -> None:
        from kcli.storage.checkpoint import format_java_properties

        home = self.workdir / f"broker-{broker_id}"
        home.mkdir(parents=True, exist_ok=True)
        node = self.node_of(broker_id)
        props = {"broker.id": str(broker_id), "listeners": f"PLAINTEXT://{self.ip(node)}:{BROKER_PORT}",
                 "log.dirs": str(home / "logs"), "zookeeper.connect": f"{self.zk_connect}/kafka",
                 "offsets.topic.replication.factor": str(min(3, self.brokers)),
                 "transaction.state.log.replication.factor": str(min(3, self.brokers)),
                 "transaction.state.log.min.isr": str(min(2, self.brokers)),
                 "default.replication.factor": str(min(3, self.brokers)),
                 # the last broker of a stopping lab has nowhere to move its leaderships: retry quickly
                 "controlled.shutdown.retry.backoff.ms": "500", **self.broker_config}
        (home / "server.properties").write_text(format_java_properties(props))
        env = {**os.environ, "PYTHONPATH": str(self.tree)}
        log = self.broker_log(broker_id)
        self._served[broker_id] = log.stat().st_size if log.exists() else 0
        self._spawn(node, [sys.executable, "-m", "kcli", "broker", "run", "--config",
                           str(home / "server.properties")], log, env)
        if wait:
            self._wait_serving(broker_id, timeout)

    def _wait_serving(self, broker_id: int, timeout: float) -> None:
        log, since = self.broker_log(broker_id), self._served.get(broker_id, 0)

        def serving() -> bool:
            with open(log, "rb") as f:
                f.seek(since)
                return b" serving " in f.read()
        self._wait(serving, timeout, f"broker {broker_id} serving", self.node_of(broker_id))

    def stop_broker(self, broker_id: int, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        proc = self.procs[self.node_of(broker_id)]
        if proc.poll() is None:
            proc.send_signal(sig)
        return proc.wait(timeout)

    def _wait(self, condition, timeout: float, what: str, node: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            proc = self.procs.get(node)
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{what}: {node} exited with {proc.returncode}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not within {timeout:g}s")
            time.sleep(0.1)

    # -- faults ----------------------------------------------------------------------------------------------
    def cut(self, a: str, b: str) -> None:
        """Nodes ``a`` and ``b`` no longer reach each other (both directions)."""
        pair = frozenset((a, b))
        if pair in self.cuts or a == b:
            return
        _run("ip", "-n", self.ns(a), "route", "add", "blackhole", f"{self.ip(b)}/32")
        _run("ip", "-n", self.ns(b), "route", "add", "blackhole", f"{self.ip(a)}/32")
        self.cuts.add(pair)
        self.timeline.append((time.monotonic(), frozenset(self.cuts)))

    def partition(self, *groups: Sequence[str]) -> None:
        """Nodes in different groups are cut from each other; nodes in no group (the clients) reach all."""
        for i, group in enumerate(groups):
            for other in groups[i + 1:]:
                for a in group:
                    for b in other:
                        self.cut(a, b)

    def heal(self) -> None:
        for pair in list(self.cuts):
            a, b = sorted(pair)
            for x, y in ((a, b), (b, a)):
                subprocess.run(["ip", "-n", self.ns(x), "route", "del", "blackhole", f"{self.ip(y)}/32"],
                               capture_output=True)
            self.cuts.discard(pair)
        self.timeline.append((time.monotonic(), frozenset()))

    def reaches(self, a: str, b: str, cuts: frozenset[frozenset[str]] | None = None) -> bool:
        return frozenset((a, b)) not in (self.cuts if cuts is None else cuts)


def majority_reachable(cuts: frozenset[frozenset[str]], brokers: int, needed: int) -> bool:
    """Is some set of ``needed`` brokers (min.insync.replicas) all reaching each other and ZooKeeper, so that a
    leader among them could be elected and have acks=all records replicated? (Clients reach everyone.)"""
    from itertools import combinations

    names = [f"b{i}" for i in range(brokers)]
    for group in combinations(names, needed):
        if all(frozenset(("zk", b)) not in cuts for b in group) and all(
                frozenset(pair) not in cuts for pair in combinations(group, 2)):
            return True
    return False


def reachable_seconds(timeline: list[tuple[float, frozenset[frozenset[str]]]], start: float, end: float,
                      brokers: int, needed: int) -> float:
    """Seconds of [start, end) during which ``majority_reachable`` held, from the lab's cut timeline."""
    total = 0.0
    for i, (at, cuts) in enumerate(timeline):
        until = timeline[i + 1][0] if i + 1 < len(timeline) else end
        lo, hi = max(at, start), min(until, end)
        if hi > lo and majority_reachable(cuts, brokers, needed):
            total += hi - lo
    return total
