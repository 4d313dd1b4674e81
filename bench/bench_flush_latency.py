#!/usr/bin/env python3
"""Produce latency while the broker fsyncs every message and another client consumes (issue 10, defect 9).

Two `kctl broker run` instances, measured in the same run: a baseline with the default config (no fsync on
the request path) and one with `log.flush.interval.messages=1`, so every append schedules an fsync. Against
each: one producer at a fixed rate (2000 records/s of 1 KiB for 10 s, acks=1, linger.ms=5, as
bench_broker.py's latency phase) while a second client consumes a pre-filled topic over and over from offset
0 in another process. The figures are p50/p99/p99.9 from produce() to the delivery callback, and the ratio
of the fsync broker's to the baseline's: fsyncs run in worker threads, so they must not stall the event loop
that answers the producer.

Usage: bench/bench_flush_latency.py [--rate 2000] [--seconds 10] [--size 1024] [--prefill 100000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_broker import Ours, consume_throughput, create_topic, produce_latency, produce_throughput  # noqa: E402


class FlushingOurs(Ours):
    name = "ours-flush-1"

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.log_dir = workdir / "flush-logs"

    def command(self) -> list[str]:
        return super().command() + ["--override", "log.flush.interval.messages=1"]


def _consume_forever(bootstrap: str, topic: str, count: int, size: int, stop_at: float) -> None:
    while time.time() < stop_at:
        consume_throughput(bootstrap, topic, count, size, max(1.0, stop_at - time.time()))


def measure(peer: Ours, args) -> dict:
    create_topic(peer.bootstrap, "load", 30)
    create_topic(peer.bootstrap, "latency", 30)
    produce_throughput(peer.bootstrap, "load", args.prefill, args.size, 5, 120)
    stop_at = time.time() + args.seconds + 5
    consumer = multiprocessing.Process(target=_consume_forever,
                                       args=(peer.bootstrap, "load", args.prefill, args.size, stop_at))
    consumer.start()
    try:
        time.sleep(1.0)  # the consumer is reading when the producer starts
        cpu0 = peer.cpu_seconds()
        result = produce_latency(peer.bootstrap, "latency", args.rate, args.seconds, args.size, 5)
        cpu1 = peer.cpu_seconds()
    finally:
        consumer.terminate()
        consumer.join(10)
    result["broker_cpu_s"] = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--prefill", type=int, default=100_000, help="records the concurrent consumer re-reads")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    report: dict = {}
    with tempfile.TemporaryDirectory(prefix="kctl-flush-bench-") as tmp:
        for peer_type in (Ours, FlushingOurs):
            workdir = Path(tmp) / peer_type.name
            workdir.mkdir()
            peer = peer_type(workdir)
            peer.start()
            try:
                report[peer.name] = measure(peer, args)
            finally:
                peer.stop()
    base, flush = report["ours"], report["ours-flush-1"]
    print(f"{'':14}{'p50 ms':>9}{'p99 ms':>9}{'p99.9 ms':>10}{'records':>9}{'errors':>8}{'cpu s':>8}")
    for name, r in report.items():
        print(f"{name:14}{r['p50_ms']:9.2f}{r['p99_ms']:9.2f}{r['p999_ms']:10.2f}{r['records']:9}{r['errors']:8}"
              f"{(r['broker_cpu_s'] or 0):8.2f}")
    print(f"ratio flush-1 / baseline: p50 {flush['p50_ms'] / base['p50_ms']:.2f}x, "
          f"p99 {flush['p99_ms'] / base['p99_ms']:.2f}x, p99.9 {flush['p999_ms'] / base['p999_ms']:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
