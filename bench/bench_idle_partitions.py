"""Idle replicated partitions and fetch sessions (KIP-227): produce latency and broker CPU at a fixed rate, acks=all,
on a 3-broker cluster, before and after ``--idle`` more RF 3 partitions that get no records.

For each mode (fetch sessions on: the default; off: ``max.incremental.fetch.session.cache.slots=0``, every
Fetch full, as before kctl had sessions) a new cluster (bench_cluster.py's ``Cluster``) gets a 3-partition RF 3
topic; latency is measured at ``--rate`` records/s of 1 KiB for ``--seconds`` (bench_cluster.py's ``latency``),
then ``--idle`` idle RF 3 partitions are created and the latency is measured again on a new 3-partition topic.
The modes alternate ``--repeat`` times (on, off, off, on, ...); the table shows medians: p50/p99 in ms, the brokers'
CPU over the phase (% of one core, all three) and, per mode, p99 with the idle partitions / p99 without (the goal
of issue 31: at most 1.5).

    .venv/bin/python bench/bench_idle_partitions.py [--idle 25] [--rate 2000] [--seconds 10] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_cluster as bc  # noqa: E402


def one(mode: str, args: argparse.Namespace) -> dict:
    overrides = () if mode == "on" else ("max.incremental.fetch.session.cache.slots=0",)
    workdir = Path(tempfile.mkdtemp(prefix="kcli-bench-idle-"))
    cluster = bc.Cluster(workdir / "cluster", overrides)
    lat_args = argparse.Namespace(phase_timeout=120, linger_ms=5, latency_rate=args.rate,
                                  latency_seconds=args.seconds, latency_size=1024)
    try:
        cluster.start()
        out = {}
        for phase in ("without", "with"):
            if phase == "with":
                bc.new_topic(cluster, "idle", 3, 120, partitions=args.idle)
            r = bc.latency(cluster, lat_args, f"lat-{phase}", 3)
            r["broker_cpu_pct"] = 100 * sum(r["broker_cpu_s"].values()) / args.seconds
            out[phase] = r
            print(f"  sessions {mode}, {phase} {args.idle} idle: p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms, "
                  f"brokers {r['broker_cpu_pct']:.0f}% of a core", flush=True)
        return out
    finally:
        cluster.close()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--idle", type=int, default=25)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"on": [], "off": []}
    for rep in range(args.repeat):
        for mode in (("on", "off") if rep % 2 == 0 else ("off", "on")):
            runs[mode].append(one(mode, args))
    print(f"\n| figure (medians of {args.repeat}) | sessions on | sessions off | on / off |\n| --- | ---: | ---: | ---: |")
    med = {m: {p: {k: statistics.median(r[p][k] for r in runs[m]) for k in ("p50_ms", "p99_ms", "broker_cpu_pct")}
               for p in ("without", "with")} for m in runs}
    for phase in ("without", "with"):
        for key, label in (("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("broker_cpu_pct", "broker CPU % of a core")):
            on, off = med["on"][phase][key], med["off"][phase][key]
            print(f"| {label}, {phase} {args.idle} idle RF 3 partitions | {on:.1f} | {off:.1f} | {on / off:.2f}x |")
    for mode in ("on", "off"):
        ratio = med[mode]["with"]["p99_ms"] / med[mode]["without"]["p99_ms"]
        print(f"p99 with / without the idle partitions, sessions {mode}: {ratio:.2f} (goal <= 1.5)")
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
