#!/usr/bin/env python3
"""Replication throttles (KIP-73): how long `kctl reassign --execute --throttle` takes to move a partition, against
the same move unthrottled, on a 3-broker ZooKeeper-mode cluster.

One run starts ZooKeeper and three `kctl broker run` brokers with kcli's cluster library (bench_cluster.py's
Cluster: what `kctl cluster run` runs) in a fresh temporary directory. For each case (unthrottled first, then each
--throttle-mib) a new single-partition topic at replication factor 1 on broker 0 gets --size-mib MiB of records
(16 KiB values, acks=1, no compression), then `kctl reassign --execute` moves it to broker 1 (with
`--throttle` for a throttled case) and `kctl reassign --verify` is run every --poll seconds until it exits 0; that
last --verify also clears the throttles. Measured per case:

* the copy: seconds from the new replica's first byte to its last (its log's size sampled every 20 ms), and its
  MiB/s: the part the throttle governs; against the expected size / throttle and the unthrottled copy;
* seconds from --execute to the first --verify that finds the move complete (each --verify is a `kctl` process:
  on a loaded machine its start-up dominates an unthrottled move), and whether the throttles were gone from
  ZooKeeper afterwards.

Kafka's rate is averaged over 11 one-second samples and a leader sends up to replica.fetch.max.bytes (1 MiB) per
fetch once under the bound, so a throttled move runs at about the throttle, a little above it for moves of a few
MiB. Everything is on 127.0.0.1; the cluster and its temp dir are removed in `finally`.

Usage: bench/bench_replication_throttle.py [--size-mib 100] [--throttle-mib 10 [--throttle-mib 20]] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_broker as bb  # bench/ is not a package: from this directory
import bench_cluster as bc

MIB = 1 << 20
VALUE = 16 * 1024


def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def kctl(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "kcli", *args], capture_output=True, text=True, timeout=120)
    if check and result.returncode != 0:
        raise RuntimeError(f"kctl {' '.join(args)} exited {result.returncode}:\n{result.stdout}{result.stderr}")
    return result


def fill(cluster: bc.Cluster, topic: str, size: int, timeout: float) -> None:
    from confluent_kafka import Producer

    bc.new_topic(cluster, topic, 1, timeout, replica_assignment=[[0]])
    producer = Producer(bb.producer_config(cluster.bootstrap, 5, acks=1))
    value = os.urandom(VALUE)  # incompressible, though nothing compresses here
    for _ in range(size // VALUE):
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(timeout) != 0:
        raise RuntimeError(f"{topic}: records still unacknowledged after {timeout:.0f}s")


class Sampler:
    """The new replica's log size every `interval` seconds, in a thread: (monotonic time, bytes)."""

    def __init__(self, cluster: bc.Cluster, topic: str, interval: float = 0.02) -> None:
        self.cluster, self.topic, self.interval = cluster, topic, interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            size = bc.partition_bytes(self.cluster, 1, self.topic, 0)
            if size >= 0:
                self.samples.append((time.monotonic(), size))
            self._stop.wait(self.interval)

    def copy(self, total: int) -> tuple[float, float] | None:
        """(when the first byte arrived, when the last did), or None if the copy was not seen whole."""
        first = next((t for t, b in self.samples if b > 0), None)
        last = next((t for t, b in self.samples if b >= total), None)
        return None if first is None or last is None else (first, last)


def move(cluster: bc.Cluster, args, topic: str, throttle: int | None, workdir: Path) -> dict:
    size = args.size_mib * MIB
    fill(cluster, topic, size, args.phase_timeout)
    leader_bytes = bc.partition_bytes(cluster, 0, topic, 0)
    plan = workdir / f"{topic}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1]}]}))
    bc.settle()
    common = ["--reassignment-json-file", str(plan), "-b", cluster.bootstrap]
    done = None
    with Sampler(cluster, topic) as sampler:
        started = time.monotonic()
        kctl("reassign", "--execute", *common, *(["--throttle", str(throttle)] if throttle is not None else []))
        executed = time.monotonic() - started
        deadline = started + args.phase_timeout
        while time.monotonic() < deadline:
            if kctl("reassign", "--verify", *common, check=False).returncode == 0:
                done = time.monotonic() - started
                break
            time.sleep(args.poll)
    if done is None:
        raise RuntimeError(f"{topic}: the move did not complete within {args.phase_timeout:.0f}s")
    copy = sampler.copy(leader_bytes)
    described = {b: kctl("configs", "--describe", "--entity-type", "brokers", "--entity-name", str(b), "--json",
                         "-b", cluster.bootstrap).stdout for b in (0, 1, 2)}
    left = [b for b, text in described.items() if "replication.throttled" in text]
    topic_left = "replication.throttled" in kctl("configs", "--describe", "--entity-type", "topics", "--entity-name",
                                                 topic, "--json", "-b", cluster.bootstrap).stdout
    return {"throttle_bytes_per_s": throttle, "size_mib": args.size_mib, "leader_log_bytes": leader_bytes,
            "seconds": done, "execute_seconds": executed,
            "copy_start_seconds": copy[0] - started if copy else None,
            "copy_seconds": copy[1] - copy[0] if copy else None,
            "copy_mib_per_s": leader_bytes / MIB / (copy[1] - copy[0]) if copy and copy[1] > copy[0] else None,
            "expected_copy_seconds": leader_bytes / throttle if throttle else None,
            "throttles_left_on_brokers": left, "throttles_left_on_topic": topic_left}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size-mib", type=int, default=100, help="MiB of records to move")
    ap.add_argument("--throttle-mib", type=float, action="append", default=None,
                    help="a throttled case at this many MiB/s (repeatable; default 10)")
    ap.add_argument("--poll", type=float, default=0.5, help="seconds between two --verify runs")
    ap.add_argument("--phase-timeout", type=float, default=600, help="seconds at most for one fill or move")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker configuration override for all three (as kctl cluster run --override)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, segments) afterwards")
    ap.add_argument("--json", type=Path, help="also write the JSON report here")
    args = ap.parse_args()
    throttles = [int(t * MIB) for t in (args.throttle_mib or [10.0])]
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))

    workdir = Path(tempfile.mkdtemp(prefix="kcli-bench-throttle-"))
    report: dict = {"size_mib": args.size_mib, "value_bytes": VALUE, "ours_source": bb.source_version(),
                    "machine": {"cpus": os.cpu_count(), "loadavg_start": os.getloadavg()}, "cases": []}
    cluster = bc.Cluster(workdir / "cluster", tuple(args.override))
    try:
        cluster.start()
        print(f"cluster: brokers {cluster.bootstrap}; kcli at {report['ours_source']}", flush=True)
        for i, throttle in enumerate([None, *throttles]):
            label = "unthrottled" if throttle is None else f"--throttle {throttle} ({throttle / MIB:g} MiB/s)"
            print(f"moving {args.size_mib} MiB from broker 0 to broker 1, {label} ...", flush=True)
            case = move(cluster, args, f"throttle-{i}", throttle, workdir)
            report["cases"].append(case)
            print(f"  verified after {case['seconds']:.1f} s; copy {fmt(case['copy_seconds'], '.1f')} s at "
                  f"{fmt(case['copy_mib_per_s'], '.1f')} MiB/s"
                  + ("" if not case["throttles_left_on_brokers"] and not case["throttles_left_on_topic"]
                     else f", THROTTLES LEFT: brokers {case['throttles_left_on_brokers']}, topic "
                          f"{case['throttles_left_on_topic']}"), flush=True)
        base = report["cases"][0]
        print("\ncase            copy s  expected  copy MiB/s  x unthrottled  execute->verified s")
        for case in report["cases"]:
            t = case["throttle_bytes_per_s"]
            name = "unthrottled" if t is None else f"{t / MIB:g} MiB/s"
            slower = (case["copy_seconds"] / base["copy_seconds"]
                      if case["copy_seconds"] and base["copy_seconds"] else None)
            print(f"{name:<15} {fmt(case['copy_seconds'], '6.1f'):>6}  {fmt(case['expected_copy_seconds'], '8.1f'):>8}"
                  f"  {fmt(case['copy_mib_per_s'], '10.1f'):>10}  {fmt(slower, '12.1f'):>12}x  "
                  f"{case['seconds']:>19.1f}")
        report["loadavg_end"] = os.getloadavg()
    finally:
        cluster.close()
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
