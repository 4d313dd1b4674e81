#!/usr/bin/env python3
"""Benchmark `kctl recover` and `kctl compact` against `kctl verify` on the same partition, in the same run.

Builds (once, under bench/data/, kept between runs) a log directory with one partition of >= 1 GiB:
segments of 128 MiB, all five codecs, ~100-byte and ~1 KiB values, keys drawn so that each key is written
about four times (so compaction keeps roughly a quarter of the records) and 2 % tombstones. Then, each
measurement in its own process on a fresh copy of the partition where it changes files:

* ceiling: the same bytes read in 8 MiB windows and CRC-32C'd batch by batch, with no other parsing;
* `kctl verify` (library call): MiB/s, the baseline the other figures are divided by;
* recovery: planning over every segment (what `kctl recover --dry-run` does with no recovery point), and
  recovery of a copy whose last segment has garbage appended (plan + quarantine + truncate + index rebuild);
* compaction: `kctl compact --dry-run` (plan: offset map + decisions) and `kctl compact` (plan, rewrite, swap)
  with one process and with `--jobs 2`, MiB/s of the partition's size before cleaning, plus records kept;
  `compact-pure` is `kctl compact` on the pure-Python path (KCLI_NO_EXTENSIONS=1), the others use the
  compiled cleaner (kcli/storage/_cleaner.c) when it is built. The offset map's memory is printed per key.

Kafka's cleaner reports its own rate in log-cleaner.log ("Processed X MB ... Y MB/sec"): on one core it
typically cleans 100 MB/s or more; compare `compact` MiB per CPU-second against that anchor. MiB/CPU-s
counts this process and its worker processes, steadier than wall time on a shared machine; `--repeat N`
runs every measurement N times, interleaved, and prints medians.

Usage: bench/bench_recover_compact.py [--size-mib 1024] [--repeat 3] [--json FILE] [--profile compact]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
SEGMENT_BYTES = 128 * 1024 * 1024
TOPIC = "bench-compact-0"
sys.path.insert(0, str(HERE))


# -- data -------------------------------------------------------------------------------------------
def build_log_dir(size_mib: int) -> Path:
    """``bench/data/compact-<size>mib/bench-compact-0``: fresh batches (not a repeated pool), so key
    repetition is what the key space makes it."""
    from kcli.records import Codec, Header, Record, build_record_batch
    from kcli.storage.log import LogConfig, PartitionLog

    log_dir = DATA / f"compact-{size_mib}mib"
    partition = log_dir / TOPIC
    marker = log_dir / ".complete"
    if marker.exists():
        return log_dir
    shutil.rmtree(log_dir, ignore_errors=True)
    partition.mkdir(parents=True)
    rng = random.Random(size_mib)
    words = [rng.randbytes(6).hex().encode() for _ in range(500)]
    target = size_mib * 1024 * 1024
    # ~330 bytes a record on average: records ~= target / 330; keys ~= records / 4.
    key_space = max(1000, target // 330 // 4)
    timestamp = 1_700_000_000_000
    with PartitionLog(partition, config=LogConfig(segment_bytes=SEGMENT_BYTES)) as log:
        written = batches = records = 0
        while written < target:
            small = batches % 2 == 0
            count, size = (40, 100) if small else (12, 1024)
            batch = []
            base = log.log_end_offset
            for j in range(count):
                key = b"key-%09d" % rng.randrange(key_space)
                if rng.random() < 0.02:
                    value = None
                else:
                    start = rng.randrange(400)
                    value = b" ".join(words[start:start + size // 13 + 1])[:size]
                headers = (Header("trace", rng.randbytes(8)),) if j % 4 == 0 else ()
                batch.append(Record(base + j, timestamp, key, value, headers))
                timestamp += 1
            raw = build_record_batch(batch, base_offset=base, codec=Codec(batches % 5),
                                     partition_leader_epoch=0)
            log.append_raw(raw)
            written += len(raw)
            batches += 1
            records += count
    marker.write_text(json.dumps({"bytes": written, "records": records, "batches": batches, "keys": key_space}))
    return log_dir


def fresh_copy(log_dir: Path, name: str) -> Path:
    target = DATA / "work" / name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(log_dir, target, ignore=shutil.ignore_patterns(".complete"))
    return target


def partition_bytes(log_dir: Path) -> int:
    return sum(p.stat().st_size for p in (log_dir / TOPIC).glob("*.log"))


# -- measurements (each in its own process) -----------------------------------------------------------
def measure_ceiling(log_dir: str) -> dict:
    from bench_verify_dump import measure_ceiling as one_file

    started = time.perf_counter()
    batches = sum(one_file(str(p))["batches"] for p in sorted((Path(log_dir) / TOPIC).glob("*.log")))
    return {"seconds": time.perf_counter() - started, "batches": batches}


def measure_verify(log_dir: str) -> dict:
    from kcli.tools.verify import verify

    started = time.perf_counter()
    report = verify([log_dir])
    assert report.is_clean(), report.problems[:3]
    return {"seconds": time.perf_counter() - started, "records": report.records}


def measure_recover_plan(log_dir: str) -> dict:
    from kcli.tools.recover import recover

    started = time.perf_counter()
    report = recover([log_dir], dry_run=True)
    assert report.is_ok(), report.problems[:3]
    return {"seconds": time.perf_counter() - started, "actions": len(report.actions)}


def measure_recover_apply(log_dir: str) -> dict:
    from kcli.tools.recover import recover

    last = sorted((Path(log_dir) / TOPIC).glob("*.log"))[-1]
    with open(last, "ab") as f:
        f.write(os.urandom(4096))
    started = time.perf_counter()
    report = recover([log_dir], dry_run=False, quarantine=str(Path(log_dir).parent / "quarantine"))
    seconds = time.perf_counter() - started
    assert report.is_ok() and report.actions, report.problems[:3]
    return {"seconds": seconds, "actions": len(report.actions)}


def measure_compact(log_dir: str, dry_run: bool, jobs: int) -> dict:
    from kcli.tools.compact import compact

    started = time.perf_counter()
    report = compact([log_dir], dry_run=dry_run, jobs=jobs, config_overrides={"cleanup.policy": "compact"})
    seconds = time.perf_counter() - started
    assert report.is_ok(), report.problems[:3]
    from kcli.storage.cleaner import native_cleaner

    return {"seconds": seconds, "records_before": report.total("records_before"),
            "records_kept": report.total("records_kept"), "bytes_after": report.total("bytes_after"),
            "keys_mapped": sum(p.keys_mapped for p in report.partitions),
            "offset_map_bytes": sum(p.offset_map_bytes for p in report.partitions),
            "compiled": native_cleaner() is not None}


MEASURES = {
    "ceiling": measure_ceiling,
    "verify": measure_verify,
    "recover-plan": measure_recover_plan,
    "recover-apply": measure_recover_apply,
    "compact-plan": lambda d: measure_compact(d, True, 1),
    "compact-pure": lambda d: measure_compact(d, False, 1),
    "compact": lambda d: measure_compact(d, False, 1),
    "compact-2-jobs": lambda d: measure_compact(d, False, 2),
}
PURE = {"compact-pure"}  # run with KCLI_NO_EXTENSIONS=1
CHANGES_FILES = {"recover-apply", "compact-pure", "compact", "compact-2-jobs"}


def _child(kind: str, log_dir: Path, profile: str | None) -> dict:
    command = [sys.executable, __file__, "--measure", kind, str(log_dir)]
    if profile == kind:
        out = DATA / f"profile-{kind}.txt"
        command = [str(Path(sys.executable).with_name("py-spy")), "record", "-f", "raw", "-o", str(out), "--", *command]
        print(f"# profiling {kind} into {out}", file=sys.stderr)
    env = {**os.environ, "KCLI_NO_EXTENSIONS": "1"} if kind in PURE else None
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{proc.stderr[-4000:]}")
    return json.loads([line for line in proc.stdout.splitlines() if line.startswith("{")][-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--json", help="Also write the results as JSON to this file.")
    parser.add_argument("--repeat", type=int, default=1, help="Runs of each measurement (medians are printed).")
    parser.add_argument("--only", action="append", choices=sorted(MEASURES), help="Run only these (repeatable).")
    parser.add_argument("--profile", choices=sorted(MEASURES), help="Run this measurement under py-spy.")
    parser.add_argument("--measure", nargs=2, metavar=("KIND", "LOG_DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        kind, log_dir = args.measure
        result = MEASURES[kind](log_dir)
        me, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        result["maxrss_mib"] = me.ru_maxrss / 1024
        # CPU seconds (this process and its worker processes): steadier than wall time on a shared machine.
        result["cpu_seconds"] = me.ru_utime + me.ru_stime + workers.ru_utime + workers.ru_stime
        print(json.dumps(result))
        return
    started = time.perf_counter()
    log_dir = build_log_dir(args.size_mib)
    meta = json.loads((log_dir / ".complete").read_text())
    mib = partition_bytes(log_dir) / 2**20
    print(f"# {log_dir}: {mib:.0f} MiB, {meta['records']} records, {meta['keys']} keys "
          f"(ready in {time.perf_counter() - started:.1f}s)", file=sys.stderr)
    wanted = args.only or list(MEASURES)
    if "verify" not in wanted:
        wanted.insert(0, "verify")
    runs: dict[str, list[dict]] = {kind: [] for kind in MEASURES if kind in wanted}
    for round_ in range(args.repeat):  # interleaved: background load hits every measurement alike
        for kind in runs:
            target = fresh_copy(log_dir, kind) if kind in CHANGES_FILES else log_dir
            r = _child(kind, target, args.profile if round_ == 0 else None)
            r["mib_s"] = mib / r["seconds"]
            r["mib_per_cpu_s"] = mib / r["cpu_seconds"]
            runs[kind].append(r)
            print(f"# {kind}: {r['seconds']:.1f}s, {r['cpu_seconds']:.1f} CPU s", file=sys.stderr)
            if target != log_dir:
                shutil.rmtree(target.parent, ignore_errors=True)
    results = {kind: {name: statistics.median(r[name] for r in rs) if isinstance(rs[0][name], (int, float))
                      and not isinstance(rs[0][name], bool) else rs[0][name] for name in rs[0]}
               for kind, rs in runs.items()}
    base = results["verify"]["mib_s"]
    base_cpu = results["verify"]["mib_per_cpu_s"]
    print(f"\n== {mib:.0f} MiB partition, {meta['records']} records, {meta['keys']} distinct keys at most, "
          f"segments of {SEGMENT_BYTES >> 20} MiB; medians of {args.repeat} run(s)")
    print(f"{'measurement':<16}{'seconds':>9}{'MiB/s':>8}{'x verify':>10}{'CPU s':>8}{'MiB/CPU-s':>11}"
          f"{'x verify':>10}{'peak RSS':>10}")
    for kind, r in results.items():
        print(f"{kind:<16}{r['seconds']:9.1f}{r['mib_s']:8.0f}{r['mib_s'] / base:10.2f}{r['cpu_seconds']:8.1f}"
              f"{r['mib_per_cpu_s']:11.0f}{r['mib_per_cpu_s'] / base_cpu:10.2f}{r['maxrss_mib']:6.0f} MiB")
    for kind in ("compact-pure", "compact", "compact-2-jobs"):
        r = results.get(kind)
        if r and r["keys_mapped"]:
            print(f"{kind}: {'compiled' if r['compiled'] else 'pure'} cleaner, offset map "
                  f"{r['offset_map_bytes'] / 2**20:.1f} MiB for {r['keys_mapped']} keys = "
                  f"{r['offset_map_bytes'] / r['keys_mapped']:.0f} bytes a key")
    if "compact" in results:
        r = results["compact"]
        print(f"compaction kept {r['records_kept']} of {r['records_before']} records; "
              f"{r['bytes_after'] / 2**20:.0f} MiB after; Kafka's cleaner: about 100 MB/s per core")
        if "compact-pure" in results:
            pure = results["compact-pure"]
            print(f"compiled / pure: {r['mib_s'] / pure['mib_s']:.2f}x wall, "
                  f"{r['mib_per_cpu_s'] / pure['mib_per_cpu_s']:.2f}x per CPU-second")
        if "compact-2-jobs" in results:
            two = results["compact-2-jobs"]
            print(f"--jobs 2 / --jobs 1: {two['mib_s'] / r['mib_s']:.2f}x wall (2.00x is linear), "
                  f"{two['mib_per_cpu_s'] / r['mib_per_cpu_s']:.2f}x per CPU-second (1.00x: no parallel overhead)")
    if args.json:
        Path(args.json).write_text(json.dumps({"mib": mib, **meta, "results": results, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
