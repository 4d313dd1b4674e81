#!/usr/bin/env python3
"""Benchmark kctl's start-up (issue 31): whole `kctl` processes against the interpreter, typer and kcat alone,
in the same run; `kctl broker run` until it listens; whole-process `kctl verify` of a large segment against the
read + CRC ceiling.

1. Start-up. Every run is its own process (`python -m kcli ...`, as the `kctl` script runs it); wall time from
   the parent, CPU time (user + system) from the kernel's accounting of that child (os.wait4). The commands run
   round-robin, `--repeat` times each after one warm-up round, so a change in the machine's load hits them all
   alike; the table shows the minimum and the median wall time and the minimum CPU time. Cases: `--version`,
   `--help`, `dump-log --help`, one TAB of bash completion, `verify` / `dump-log` / `cat` of a small segment
   (sample-logs' orders-0, 24 KiB, every codec), `verify` of sample-logs/kafka-logs (59 files), and online
   commands up to their first connection (`consume` and `topics list` against a closed port: exit 3).
   Baselines: `python -c pass`, `python -c "import typer"` (the floor of any typer program) and `kcat -V`.
2. `kctl broker run` (a fresh log dir, a free port): process start until a TCP connect to its listener succeeds.
3. `--large-mib` (default 512; 0 skips): a segment of that size as Kafka's client writes it (kafka-python's
   DefaultRecordBatchBuilder, lz4, batches of 100 records of ~200 bytes; a pool of batches written again with
   new base offsets), built once under bench/data. The ceiling: the same bytes read in 8 MiB windows and
   CRC-32C'd batch by batch, timed inside its process (bench_verify_dump.py's); `kctl verify FILE` timed as a
   whole process; ratio = ceiling seconds / verify seconds (minimums of the interleaved runs), in wall time and
   in CPU time (on a shared machine the CPU ratio is the steadier one).

`--baseline-tree DIR` runs the same kctl commands from another kcli checkout too (say `git archive <commit>
kcli | tar -x -C DIR`), for before/after figures in one run. `--cached-bytecode` measures as an installed
package runs: bytecode written once to a temporary PYTHONPYCACHEPREFIX and reused (by default the environment
decides; with PYTHONDONTWRITEBYTECODE=1 every run compiles kcli from source, which the table's header notes).

Usage: bench/bench_startup.py [--repeat 15] [--baseline-tree DIR] [--cached-bytecode] [--large-mib 512]
                              [--broker-repeat 5] [--only startup,broker,large] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data"
SAMPLE = REPO / "sample-logs" / "kafka-logs"
SEGMENT = SAMPLE / "orders-0" / "00000000000000000000.log"

# (label, arguments of `python -m kcli`, extra environment, expected exit status)
KCTL_CASES: tuple[tuple[str, tuple[str, ...], dict[str, str], int], ...] = (
    ("kctl --version", ("--version",), {}, 0),
    ("kctl --help", ("--help",), {}, 0),
    ("kctl dump-log --help", ("dump-log", "--help"), {}, 0),
    ("TAB: kctl dump-log --key-enc", (), {"_KCTL_COMPLETE": "complete_bash", "COMP_WORDS": "kctl dump-log --key-enc",
                                          "COMP_CWORD": "2"}, 0),
    ("kctl verify SEGMENT (24 KiB)", ("verify", str(SEGMENT)), {}, 0),
    ("kctl dump-log SEGMENT", ("dump-log", str(SEGMENT)), {}, 0),
    ("kctl cat SEGMENT", ("cat", str(SEGMENT)), {}, 0),
    ("kctl verify sample-logs (59 files)", ("verify", str(SAMPLE)), {}, 0),
    ("kctl consume -b CLOSED (exit 3)", ("consume", "-b", "127.0.0.1:1", "t"), {}, 3),
    ("kctl topics list -b CLOSED (exit 3)", ("topics", "list", "-b", "127.0.0.1:1"), {}, 3),
)
BASELINES = (
    ("python -c pass", (sys.executable, "-c", "pass")),
    ("python -c 'import typer'", (sys.executable, "-c", "import typer")),
)
KCAT = ("kcat -V", ("kcat", "-V"))


def run_once(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit status) of one child process, its output thrown away."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _pid, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; keep Popen from waiting again
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode


def tree_env(base_env: dict[str, str], tree: Path) -> dict[str, str]:
    # cwd and PYTHONPATH both name the tree: `-m kcli` puts the working directory first on sys.path
    return {**base_env, "PYTHONPATH": str(tree)}


def startup_cases(trees: list[tuple[str, Path]], base_env: dict[str, str]) -> list[dict]:
    out = [{"label": label, "tree": None, "argv": list(argv), "env": base_env, "cwd": REPO, "expect": 0}
           for label, argv in BASELINES]
    if shutil.which("kcat"):
        out.append({"label": KCAT[0], "tree": None, "argv": list(KCAT[1]), "env": base_env, "cwd": REPO, "expect": 0})
    for tree_label, tree in trees:
        for label, args, extra, expect in KCTL_CASES:
            out.append({"label": label, "tree": tree_label, "argv": [sys.executable, "-m", "kcli", *args],
                        "env": {**tree_env(base_env, tree), **extra}, "cwd": tree, "expect": expect})
    return out


def run_rounds(todo: list[dict], repeat: int) -> None:
    for case in todo:
        case["runs"] = []
    for round_no in range(repeat + 1):  # round 0 is the warm-up (and writes bytecode if cached)
        for case in todo:
            wall, cpu, status = run_once(case["argv"], case["env"], case["cwd"])
            if status != case["expect"]:
                raise SystemExit(f"{case['label']} ({case['tree']}) exited {status}, not {case['expect']}")
            if round_no:
                case["runs"].append({"wall": wall, "cpu": cpu})
    for case in todo:
        case["wall_min"] = min(r["wall"] for r in case["runs"])
        case["wall_median"] = statistics.median(r["wall"] for r in case["runs"])
        case["cpu_min"] = min(r["cpu"] for r in case["runs"])


def report_startup(todo: list[dict]) -> None:
    baseline_of = {c["label"]: c for c in todo if c["tree"] == "baseline"}
    head = f"{'command':38} {'tree':10} {'wall min':>8} {'median':>7} {'CPU min':>8}"
    if baseline_of:
        head += f" {'wall min vs baseline':>21}"
    print(head)
    for case in todo:
        line = (f"{case['label']:38} {case['tree'] or '-':10} {case['wall_min']:8.3f} {case['wall_median']:7.3f} "
                f"{case['cpu_min']:8.3f}")
        if case["tree"] == "this tree" and case["label"] in baseline_of:
            line += f" {case['wall_min'] / baseline_of[case['label']]['wall_min']:20.2f}x"
        print(line)


# -- 2. kctl broker run: until it listens -----------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def broker_listen_seconds(env: dict[str, str], cwd: Path, timeout: float = 60.0) -> float:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="kcli-bench-broker-") as data:
        argv = [sys.executable, "-m", "kcli", "broker", "run", "--log-level", "warning",
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={data}"]
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=1):
                        return time.perf_counter() - started
                except OSError:
                    if proc.poll() is not None:
                        raise SystemExit(f"kctl broker run exited {proc.returncode} before it listened") from None
                    if time.perf_counter() - started > timeout:
                        raise SystemExit("kctl broker run did not listen in time") from None
                    time.sleep(0.002)
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# -- 3. whole-process verify of a large segment against the read + CRC ceiling ---------------------------------
def build_kafka_segment(size_mib: int) -> Path:
    """A segment of Kafka's client layout (kafka-python's DefaultRecordBatchBuilder: lz4, 100 records of ~200
    bytes a batch, a header on every tenth): 64 distinct batches, written again and again with new base offsets
    (outside the CRC), so building 512 MiB takes seconds."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from kcli.records.crc import crc32c

    directory = DATA / f"kafka-lz4-{size_mib}mib-0"
    log_file = directory / "00000000000000000000.log"
    marker = directory / ".complete"
    if marker.exists():
        return log_file
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    rng = random.Random(31)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"orders", b"customer", b"payment", b"status", b"shipped"]
    pool = []
    for n in range(64):
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=3, is_transactional=False, producer_id=-1,
                                            producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        ts = 1_700_000_000_000 + n * 100
        for i in range(100):
            key = b"customer-%d" % rng.randrange(100000)
            value = b" ".join(rng.choice(words) for _ in range(30))[:200].ljust(200, b".")
            builder.append(i, timestamp=ts + i, key=key, value=value, headers=[("h", b"v")] if i % 10 == 0 else [])
        raw = bytearray(builder.build())
        struct.pack_into(">i", raw, 12, 0)  # partition leader epoch 0, as a broker stamps it (inside the CRC)
        struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
        pool.append(raw)
    target = size_mib * 1024 * 1024
    offset = written = batches = 0
    with open(log_file, "wb") as out:
        while written < target:
            raw = pool[batches % len(pool)]
            struct.pack_into(">q", raw, 0, offset)
            out.write(raw)
            written += len(raw)
            offset += 100
            batches += 1
    marker.write_text(json.dumps({"bytes": written, "records": offset, "batches": batches}))
    return log_file


_CEILING = """import json, sys, time
sys.path.insert(0, sys.argv[1])
from bench_verify_dump import measure_ceiling
cpu = time.process_time()
result = measure_ceiling(sys.argv[2])
result["cpu"] = time.process_time() - cpu
print(json.dumps(result))
"""


def ceiling_seconds(path: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of bench_verify_dump.py's ceiling, timed inside its process (no start-up)."""
    out = subprocess.run([sys.executable, "-c", _CEILING, str(HERE), str(path)], capture_output=True, text=True,
                         check=True, cwd=REPO)
    result = json.loads(out.stdout)
    return result["seconds"], result["cpu"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15, help="counted runs of each start-up case")
    parser.add_argument("--baseline-tree", type=Path, help="another kcli checkout to run the same kctl commands from")
    parser.add_argument("--cached-bytecode", action="store_true",
                        help="write and reuse bytecode (a temporary PYTHONPYCACHEPREFIX), as an installed package")
    parser.add_argument("--large-mib", type=int, default=512, help="size of the large segment (0: skip)")
    parser.add_argument("--large-repeat", type=int, default=7, help="interleaved ceiling / verify runs")
    parser.add_argument("--broker-repeat", type=int, default=5, help="broker starts per tree")
    parser.add_argument("--only", default="startup,broker,large", help="which parts: startup, broker, large")
    parser.add_argument("--json", type=Path, help="write every run's figures here")
    args = parser.parse_args()
    parts = set(args.only.split(","))

    base_env = dict(os.environ)
    base_env.pop("PYTHONPATH", None)
    cache_dir = None
    if args.cached_bytecode:
        cache_dir = tempfile.TemporaryDirectory(prefix="kcli-bench-pyc-")
        base_env.pop("PYTHONDONTWRITEBYTECODE", None)
        base_env["PYTHONPYCACHEPREFIX"] = cache_dir.name
    trees = [("this tree", REPO)]
    if args.baseline_tree is not None:
        baseline = args.baseline_tree.resolve()
        if not (baseline / "kcli" / "__main__.py").is_file():
            raise SystemExit(f"{baseline} holds no kcli package (kcli/__main__.py)")
        trees.append(("baseline", baseline))
    results: dict = {"repeat": args.repeat, "cached_bytecode": args.cached_bytecode}
    bytecode = ("cached (PYTHONPYCACHEPREFIX)" if args.cached_bytecode else
                "compiled from source every run (PYTHONDONTWRITEBYTECODE)" if os.environ.get("PYTHONDONTWRITEBYTECODE")
                else "as the environment leaves it (written beside the sources)")
    try:
        if "startup" in parts:
            todo = startup_cases(trees, base_env)
            run_rounds(todo, args.repeat)
            print(f"# start-up: {args.repeat} interleaved runs per command (min, median); {os.cpu_count()} CPUs, "
                  f"load average {os.getloadavg()[0]:.1f}; bytecode: {bytecode}")
            report_startup(todo)
            results["startup"] = [{k: v for k, v in c.items() if k != "env"} for c in todo]
        if "broker" in parts:
            runs: dict[str, list[float]] = {label: [] for label, _tree in trees}
            for _ in range(args.broker_repeat):
                for label, tree in trees:
                    runs[label].append(broker_listen_seconds(tree_env(base_env, tree), tree))
            print(f"\n# kctl broker run until it listens: {args.broker_repeat} interleaved starts per tree")
            for label, seconds in runs.items():
                print(f"{label:10} min {min(seconds):.3f} s  median {statistics.median(seconds):.3f} s")
            results["broker_listen_s"] = runs
        if "large" in parts and args.large_mib:
            started = time.perf_counter()
            segment = build_kafka_segment(args.large_mib)
            meta = json.loads((segment.parent / ".complete").read_text())
            print(f"\n# {segment} ({meta['bytes'] / 2**20:.0f} MiB, {meta['batches']} batches; ready in "
                  f"{time.perf_counter() - started:.1f} s); {args.large_repeat} interleaved runs, minimums")
            ceilings: list[tuple[float, float]] = []
            verifies: dict[str, list[tuple[float, float]]] = {label: [] for label, _tree in trees}
            for round_no in range(args.large_repeat + 1):  # round 0 warms the page cache and the bytecode
                ceiling = ceiling_seconds(segment)
                if round_no:
                    ceilings.append(ceiling)
                for label, tree in trees:
                    wall, cpu, status = run_once([sys.executable, "-m", "kcli", "verify", str(segment)],
                                                 tree_env(base_env, tree), tree)
                    if status != 0:
                        raise SystemExit(f"kctl verify of {segment} ({label}) exited {status}")
                    if round_no:
                        verifies[label].append((wall, cpu))
            mib = meta["bytes"] / 2**20
            c_wall, c_cpu = min(c[0] for c in ceilings), min(c[1] for c in ceilings)
            print(f"ceiling (read + CRC-32C, in process)     {mib / c_wall:5.0f} MiB/s  wall {c_wall:.3f} s  "
                  f"CPU {c_cpu:.3f} s")
            for label, runs in verifies.items():
                v_wall, v_cpu = min(r[0] for r in runs), min(r[1] for r in runs)
                print(f"kctl verify, whole process ({label:9}) {mib / v_wall:5.0f} MiB/s  wall {v_wall:.3f} s  "
                      f"CPU {v_cpu:.3f} s  ratio to the ceiling: wall {c_wall / v_wall:.2f}, CPU {c_cpu / v_cpu:.2f}")
            results["large"] = {"file": str(segment), **meta, "ceiling_s": ceilings, "verify_s": verifies}
    finally:
        if cache_dir is not None:
            cache_dir.cleanup()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
