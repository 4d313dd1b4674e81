#!/usr/bin/env python3
"""Benchmark `kctl scan`: the local engine at 1 and 2 workers and the Spark engine at local[1] and local[2],
on one >= 1 GiB log directory, against a baseline measured in the same run.

Builds (or reuses) bench/data/scan-<size>mib/: 4 partitions of 3 segments each (mixed codecs, ~100-byte and
~1 KiB records, some tombstones), written with kcli's PartitionLog from a pool of batches whose base offsets
are rewritten (as bench_verify_dump.py does). Each measurement runs in its own process:

* baseline: the same segments read in 8 MiB windows and CRC-32C'd batch by batch (no record decoding),
  one process;
* local engine, --workers 1 and 2 (`kcli.tools.scan.scan`);
* Spark engine, local[1] and local[2] (`kcli.spark.scan.scan_spark`: the local engine's per-segment scan
  as Spark tasks, merged on the driver): session start-up, a first scan of the small sample logs (Python
  workers starting), then the big scan; the fixed cost is start-up + that first small scan. In the same
  session, the ``kafka-log`` data source alone (what ``--sql`` and ``--output`` read through), after one
  untimed read of the sample logs to warm it up: every column of every record read into Spark and reduced
  to a count and a sum;
* the same on a standalone Spark cluster on loopback (tests/spark/standalone_support.py: a Master and one,
  then two Workers with one core each; the driver is this machine's process, submitting to
  spark://127.0.0.1:PORT), unless --skip-cluster.

Every run must produce the same report (engine, timings aside); the figures are records/s and MiB/s of
segment bytes, the ratio to the baseline, the 2-vs-1 scaling of each engine, and the Spark data source and
engine per core against the local engine per core (1 worker).

Usage: bench/bench_scan.py [--size-mib 1024] [--skip-spark] [--skip-cluster] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data"
PARTITIONS = 4
NOW = 1_800_000_000_000


# -- data -------------------------------------------------------------------------------------------
def build_log_dir(root: Path, size_mib: int) -> Path:
    """PARTITIONS partition dirs of three segments each (the last one short), size_mib MiB in all."""
    from kcli.records import Codec, Header, Record, build_record_batch
    from kcli.records.layout import read_records_count, stamp_base_offset
    from kcli.storage.log import LogConfig, PartitionLog

    marker = root / ".complete"
    if marker.exists():
        return root
    if root.exists():
        for d in root.iterdir():
            if d.is_dir():
                for f in d.iterdir():
                    f.unlink()
                d.rmdir()
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(size_mib)
    words = [rng.randbytes(6).hex() for _ in range(500)]
    pool = []
    for i in range(400):
        small = i % 2 == 0
        count, size = (40, 100) if small else (12, 1024)
        records = []
        for j in range(count):
            text = " ".join(rng.choice(words) for _ in range(size // 13 + 1)).encode()[:size]
            headers = (Header("trace", rng.randbytes(8)),) if j % 4 == 0 else ()
            value = None if j % 50 == 49 else text  # a tombstone now and then
            records.append(Record(j, 1_700_000_000_000 + i * 100 + j, f"key-{rng.randrange(100000)}".encode(), value,
                                  headers))
        pool.append(build_record_batch(records, codec=Codec(i % 5), partition_leader_epoch=0))
    per_partition = size_mib * 1024 * 1024 // PARTITIONS
    totals = {"bytes": 0, "records": 0, "batches": 0}
    for p in range(PARTITIONS):
        directory = root / f"scan-bench-{p}"
        # rolled at half the partition's size: two full segments and a short third
        with PartitionLog(directory, config=LogConfig(segment_bytes=per_partition // 2 + 1)) as log:
            offset = written = 0
            i = p * 37
            while written < per_partition:
                raw = bytearray(pool[i % len(pool)])
                stamp_base_offset(raw, 0, offset)
                log.append_raw(bytes(raw))
                offset += read_records_count(raw)
                written += len(raw)
                i += 1
        totals["bytes"] += written
        totals["records"] += offset
        totals["batches"] += i - p * 37
    marker.write_text(json.dumps(totals))
    return root


def segments(root: Path) -> list[str]:
    return sorted(str(p) for p in root.glob("*/*.log"))


# -- measurements (each in its own process) -------------------------------------------------------------
def measure_baseline(root: str) -> dict:
    """The same bytes read in windows and CRC-32C'd batch by batch (bench_verify_dump's ceiling, per segment)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_verify_dump import measure_ceiling

    started = time.perf_counter()
    total = batches = 0
    for path in segments(Path(root)):
        one = measure_ceiling(path)
        total += one["bytes"]
        batches += one["batches"]
    return {"seconds": time.perf_counter() - started, "bytes": total, "batches": batches}


def _strip(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("engine", "seconds", "parallelism", "output")}


def measure_local(root: str, workers: str) -> dict:
    from kcli.tools.scan import scan

    started = time.perf_counter()
    report = scan([root], workers=int(workers), now_ms=NOW)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "report": _strip(report.to_json())}


def measure_spark(root: str, master: str) -> dict:
    started = time.perf_counter()
    from kcli.spark.scan import scan_spark
    from kcli.spark.session import get_session

    spark = get_session(master, app_name="bench-scan", config={"spark.driver.memory": "3g"})
    session_seconds = time.perf_counter() - started
    t = time.perf_counter()
    scan_spark(spark, [str(REPO / "sample-logs" / "kafka-logs")], now_ms=NOW)
    first_small = time.perf_counter() - t
    t = time.perf_counter()
    scan_spark(spark, [str(REPO / "sample-logs" / "kafka-logs")], now_ms=NOW)
    second_small = time.perf_counter() - t
    t = time.perf_counter()
    report = scan_spark(spark, [root], now_ms=NOW)
    seconds = time.perf_counter() - t
    source_seconds, source_rows, source_cpu = measure_source(spark, root)
    parallelism = spark.sparkContext.defaultParallelism
    spark.stop()
    return {"seconds": seconds, "session_seconds": session_seconds, "first_small_scan_seconds": first_small,
            "small_scan_seconds": second_small, "source_seconds": source_seconds, "source_rows": source_rows,
            "source_cpu_s": source_cpu,
            "parallelism": parallelism, "report": _strip(report.to_json())}


def measure_source(spark, root: str) -> tuple[float, int, dict[str, float]]:
    """The kafka-log data source alone: every record, every column built (Spark prunes only after the
    source), reduced to a count and the sum of key and value lengths; with the CPU seconds it took in the
    driver's Python, the JVM and the Python workers."""
    from pyspark.sql import functions as F

    from kcli.spark.session import local_python

    def count(path: str):
        return (spark.read.format("kafka-log").option("includeControl", "true").load(path)
                .agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("v")).collect()[0])

    with local_python(spark):
        count(str(REPO / "sample-logs" / "kafka-logs"))  # warm-up: the data source's first plan and workers
        before = _tree_cpu()
        t = time.perf_counter()
        row = count(root)
        seconds = time.perf_counter() - t
        after = _tree_cpu()
        cpu = {k: round(after.get(k, 0.0) - before.get(k, 0.0), 2) for k in after}
        return seconds, row["n"], cpu


def _tree_cpu() -> dict[str, float]:
    """CPU seconds (own + reaped children) of this process and its descendants by kind: the driver's Python,
    the JVM, the Python workers (pyspark.daemon and the workers it forks)."""
    tick = os.sysconf("SC_CLK_TCK")
    parents: dict[int, int] = {}
    stats: dict[int, tuple[str, float]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = raw.rsplit(")", 1)[1].split()
        parents[int(entry)] = int(fields[1])
        own = (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / tick
        stats[int(entry)] = (cmd, own)
    me = os.getpid()
    out: dict[str, float] = {}
    for pid, (cmd, cpu) in stats.items():
        p = pid
        while p not in (0, 1, me) and p in parents:
            p = parents[p]
        if p != me and pid != me:
            continue
        kind = "driver" if pid == me else "jvm" if "java" in cmd.split(" ")[0] else "python_workers"
        out[kind] = out.get(kind, 0.0) + cpu
    return out


def _child(kind: str, *args: str, env: dict | None = None) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", kind, *args], capture_output=True, text=True,
                         env=env)
    if out.returncode != 0:
        raise SystemExit(f"{kind} {args} failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--skip-spark", action="store_true")
    parser.add_argument("--skip-cluster", action="store_true", help="no standalone cluster runs")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--measure", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        kind, *rest = args.measure
        fn = {"baseline": measure_baseline, "local": measure_local, "spark": measure_spark}[kind]
        result = fn(*rest)
        result["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result["children_maxrss_kib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(json.dumps(result))
        return

    started = time.perf_counter()
    root = build_log_dir(DATA / f"scan-{args.size_mib}mib", args.size_mib)
    meta = json.loads((root / ".complete").read_text())
    print(f"# {root}: {meta['bytes'] / 2**20:.0f} MiB, {meta['records']} records, {len(segments(root))} segments, "
          f"ready in {time.perf_counter() - started:.1f}s; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
          file=sys.stderr)
    mib = meta["bytes"] / 2**20
    runs: list[dict] = []
    base = _child("baseline", str(root))
    runs.append({"name": "baseline (read + CRC-32C per batch)", "seconds": base["seconds"]})
    reports = []
    for workers in ("1", "2"):
        r = _child("local", str(root), workers)
        reports.append(r.pop("report"))
        runs.append({"name": f"local engine, {workers} worker{'s' if workers != '1' else ''}", **r})
        print(f"# {runs[-1]['name']}: {r['seconds']:.1f}s", file=sys.stderr)
    if not args.skip_spark:
        for master in ("local[1]", "local[2]"):
            r = _child("spark", str(root), master)
            reports.append(r.pop("report"))
            runs.append({"name": f"spark engine, {master}", **r})
            print(f"# {runs[-1]['name']}: {r['seconds']:.1f}s", file=sys.stderr)
        if not args.skip_cluster:
            sys.path[:0] = [str(REPO / "tests" / "spark"), str(REPO / "tests")]  # standalone_support imports tiers
            import tempfile

            from standalone_support import StandaloneCluster

            for workers in (1, 2):
                with tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp, \
                        StandaloneCluster(Path(tmp), workers=workers, cores=1, memory="2g") as cluster:
                    r = _child("spark", str(root), cluster.master_url, env=cluster.env)
                reports.append(r.pop("report"))
                runs.append({"name": f"spark standalone, {workers} worker{'s' if workers > 1 else ''} x 1 core", **r})
                print(f"# {runs[-1]['name']}: {r['seconds']:.1f}s", file=sys.stderr)
    same = all(rep == reports[0] for rep in reports)
    records = reports[0]["records"]
    assert all(r.get("source_rows", records) >= records for r in runs), "the data source lost records"
    assert records == meta["records"], (records, meta["records"])
    base_rate = mib / base["seconds"]
    print(f"\n{mib:.0f} MiB, {records} records, {len(segments(root))} segments in {PARTITIONS} partitions; "
          f"reports identical across runs: {same}")
    print(f"{'run':40} {'seconds':>8} {'records/s':>11} {'MiB/s':>7} {'vs baseline':>12}")
    for run in runs:
        run["records_per_s"] = records / run["seconds"]
        run["mib_per_s"] = mib / run["seconds"]
        run["ratio_to_baseline"] = run["mib_per_s"] / base_rate
        print(f"{run['name']:40} {run['seconds']:8.1f} {run['records_per_s']:11.0f} {run['mib_per_s']:7.1f} "
              f"{run['ratio_to_baseline']:12.3f}")
    by = {r["name"]: r for r in runs}
    summary = {"mib": round(mib, 1), "records": records, "reports_identical": same,
               "local_scaling_2_vs_1": by["local engine, 1 worker"]["seconds"] / by["local engine, 2 workers"]["seconds"]}
    print(f"\nlocal engine scaling, 2 workers vs 1: {summary['local_scaling_2_vs_1']:.2f}x")
    if not args.skip_spark:
        s1, s2 = by["spark engine, local[1]"], by["spark engine, local[2]"]
        summary["spark_scaling_2_vs_1"] = s1["seconds"] / s2["seconds"]
        summary["spark_fixed_cost_seconds"] = {m: round(r["session_seconds"] + r["first_small_scan_seconds"], 1)
                                               for m, r in (("local[1]", s1), ("local[2]", s2))}
        summary["spark_vs_local_2"] = by["local engine, 2 workers"]["seconds"] / s2["seconds"]
        print(f"spark engine scaling, local[2] vs local[1]: {summary['spark_scaling_2_vs_1']:.2f}x")
        for m, r in (("local[1]", s1), ("local[2]", s2)):
            print(f"spark {m} fixed cost: session start-up {r['session_seconds']:.1f}s + first small scan "
                  f"{r['first_small_scan_seconds']:.1f}s (a warm small scan: {r['small_scan_seconds']:.1f}s)")
        print(f"spark local[2] vs local engine 2 workers: {summary['spark_vs_local_2']:.2f}x the speed")
        local1 = by["local engine, 1 worker"]["seconds"]
        summary["spark_engine_per_core_vs_local"] = local1 / s1["seconds"]
        summary["spark_source_per_core_vs_local"] = local1 / s1["source_seconds"]
        summary["spark_source_scaling_2_vs_1"] = s1["source_seconds"] / s2["source_seconds"]
        print(f"per core, against the local engine with 1 worker ({local1:.1f}s): spark engine local[1] "
              f"{summary['spark_engine_per_core_vs_local']:.2f}x, the kafka-log data source alone local[1] "
              f"{summary['spark_source_per_core_vs_local']:.2f}x ({s1['source_seconds']:.1f}s; local[2] "
              f"{s2['source_seconds']:.1f}s, {summary['spark_source_scaling_2_vs_1']:.2f}x)")
        for run in (s1, s2):
            cpu = run.get("source_cpu_s") or {}
            print(f"  data source at parallelism {run['parallelism']}: {run['source_seconds']:.1f} s wall; CPU-s "
                  + ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu.items())))
        one = by.get("spark standalone, 1 worker x 1 core")
        two = by.get("spark standalone, 2 workers x 1 core")
        if one and two:
            summary["standalone_scaling_2_vs_1"] = one["seconds"] / two["seconds"]
            summary["standalone_source_scaling_2_vs_1"] = one["source_seconds"] / two["source_seconds"]
            print(f"standalone cluster, 2 workers vs 1: engine {summary['standalone_scaling_2_vs_1']:.2f}x, "
                  f"data source {summary['standalone_source_scaling_2_vs_1']:.2f}x (fixed cost: session "
                  f"{one['session_seconds']:.1f}s / {two['session_seconds']:.1f}s + first small scan "
                  f"{one['first_small_scan_seconds']:.1f}s / {two['first_small_scan_seconds']:.1f}s)")
    result = {"summary": summary, "runs": runs, "load_average": os.getloadavg()}
    print("\n" + json.dumps(result, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
