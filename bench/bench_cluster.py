#!/usr/bin/env python3
"""Replication on a 3-broker ZooKeeper-mode cluster: acks=all throughput at replication factor 3 against 1,
follower catch-up after a burst, produce latency at a fixed rate, and the brokers' CPU per byte replicated.

One run starts ZooKeeper and three `kctl broker run` brokers with kcli's cluster library (kcli/cluster/runner.py,
what `kctl cluster run` runs) in a fresh temporary directory, with the defaults it writes for 3 brokers
(offsets.topic.replication.factor=3, min.insync.replicas=1, replica.lag.time.max.ms=30000) and nothing
overridden. The client is confluent-kafka (librdkafka), with bench_broker.py's producer settings (linger.ms=5,
no compression, no idempotence) except acks. Before each timed phase the page cache is written back (sync).
Measured (latency first, then the rest in this order):

* throughput: for 1 KiB and for 100-byte values, N records with acks=all into a new topic of 3 partitions at
  replication factor 1 ("rf1") and into one at replication factor 3 ("rf3"); null keys, librdkafka's
  partitioner spreads them (so each broker leads one partition of each topic); timed from the first
  produce() to the end of flush(); payload MB/s and records/s, and rf3/rf1. With --repeat R the pairs are
  interleaved rf1,rf3 / rf3,rf1 / ... and medians reported.
* CPU: every broker's user+system CPU seconds (all threads, /proc/<pid>/stat) over each throughput phase, and
  this process's (the client, librdkafka's threads included). Per MiB of payload (2^20 bytes of values):
  - leader append = broker CPU of the rf1 phase / MiB: receiving, validating, appending and acknowledging
    each byte once, with nothing replicated;
  - replication = (broker CPU of rf3 - broker CPU of rf1) / (2 x MiB): the extra CPU at RF 3, spread over the
    2 follower copies of each byte (the leaders serving replica fetches and waiting on them for acks=all,
    the followers fetching and appending);
  - the goal is replication / leader append <= 1.0 (a copy costs no more than the leader's own append).
* catch-up, two ways, 1 KiB records:
  - live: a burst with acks=1 (the leaders do not wait for the followers) into a new 3-partition RF 3 topic
    while the followers fetch as usual; at the end of flush(), how many bytes the followers are behind, and
    the time until every follower's log (the summed size of its partition directory's .log files; replicas are
    byte-identical) equals its leader's;
  - paused: a 1-partition RF 3 topic led by broker 0; brokers 1 and 2 are stopped with SIGSTOP, a burst goes to
    the leader alone (acks=1, at most --pause-max seconds so that no ZooKeeper session (18 s) or ISR
    (replica.lag.time.max.ms, 30 s) times out), then SIGCONT, and the time until both followers hold the
    leader's log: catch-up MB/s per follower from a known backlog with no client competing for the CPU. Its
    CPU splits replication into its parts: the leader serving the fetches, the followers fetching and
    appending, against the leader's own append during the burst.
* latency: a producer at a fixed rate (2000 records/s of 1 KiB for 10 s by default, acks=all, linger.ms=5)
  into a new 3-partition topic at RF 1 and at RF 3: p50/p99/p99.9/max from produce() to the delivery callback.
  Measured first, on the fresh cluster, and once more at RF 3 at the end of the run, when every topic of the
  run (28 partitions of RF 3 by default, idle but for the new one) is in the followers' fetch requests.

Afterwards every broker's log (and ZooKeeper's) is searched for errors, warnings and tracebacks; they are
printed and the JSON carries them. Everything is on 127.0.0.1; the cluster and its temp dir are removed in
`finally` (SIGTERM/SIGHUP included); every wait is bounded (--phase-timeout).

Usage: bench/bench_cluster.py [--quick] [--large-records 500000] [--small-records 2000000] [--repeat 3]
         [--burst-records 300000] [--pause-max 6] [--latency-rate 2000] [--latency-seconds 10] [--json FILE]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_broker as bb  # bench/ is not a package: from this directory

MB = bb.MB
MIB = 1 << 20
PARTITIONS = 3
BROKERS = 3


# -- the cluster ---------------------------------------------------------------------------------------
class Cluster:
    """kcli's LocalCluster (what `kctl cluster run` runs) in a thread; `info` once every broker answers."""

    def __init__(self, data_dir: Path, overrides: tuple[str, ...] = (), verbose: bool = False) -> None:
        self.data_dir = data_dir
        self.overrides = overrides
        self.verbose = verbose
        self.stop_event = threading.Event()
        self.started = threading.Event()
        self.info = None
        self.exits: list = []
        self.error: BaseException | None = None
        self.result = None
        self.thread: threading.Thread | None = None

    def start(self, timeout: float = 180) -> None:
        from kcli.cluster.runner import ClusterSpec, ProcessExited, Progress, Started, run_cluster

        spec = ClusterSpec(brokers=BROKERS, data_dir=self.data_dir, overrides=self.overrides, start_timeout_s=90,
                           stop_timeout_s=30)

        def on_event(event) -> None:
            if isinstance(event, Started):
                self.info = event.cluster
                self.started.set()
            elif isinstance(event, ProcessExited):
                self.exits.append(event)
                print(f"!! {event.name} (pid {event.pid}) EXITED with status {event.status}:\n{event.log_tail}",
                      flush=True)
            elif isinstance(event, Progress) and self.verbose:
                print(f"  cluster: {event.message}", flush=True)

        def run() -> None:
            try:
                self.result = run_cluster(spec, stop=self.stop_event, on_event=on_event)
            except BaseException as exc:  # reported by start()
                self.error = exc
            finally:
                self.started.set()

        self.thread = threading.Thread(target=run, name="cluster", daemon=True)
        self.thread.start()
        self.started.wait(timeout)
        if self.info is None:
            self.close()
            raise RuntimeError(f"the cluster did not start: {self.error!r}")

    def close(self) -> None:
        self.stop_event.set()
        for b in (self.info.brokers if self.info else ()):  # never leave one stopped: it could not exit
            try:
                os.kill(b.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        if self.thread is not None:
            self.thread.join(120)

    @property
    def bootstrap(self) -> str:
        return self.info.bootstrap

    def broker(self, broker_id: int):
        return next(b for b in self.info.brokers if b.id == broker_id)

    def cpu(self) -> dict[int, float | None]:
        return {b.id: bb.process_cpu_seconds(b.pid) for b in self.info.brokers}

    def zookeeper_cpu(self) -> float | None:
        return bb.process_cpu_seconds(self.info.zookeeper_pid)

    def alive(self) -> bool:
        return not self.exits and all(bb.process_cpu_seconds(b.pid) is not None for b in self.info.brokers)


def cpu_delta(before: dict, after: dict) -> dict[int, float]:
    return {k: after[k] - before[k] for k in before if before[k] is not None and after.get(k) is not None}


def client_cpu() -> float:
    t = os.times()
    return t.user + t.system


# -- topics and replicas -------------------------------------------------------------------------------
def admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})


def new_topic(cluster: Cluster, topic: str, rf: int, timeout: float, partitions: int = PARTITIONS,
              replica_assignment: list[list[int]] | None = None) -> dict[int, dict]:
    """Create the topic, wait until every partition has a leader and its full ISR; {partition: {leader, replicas}}."""
    bb.create_topic(cluster.bootstrap, topic, timeout, partitions=partitions, replication_factor=rf,
                    replica_assignment=replica_assignment)
    a = admin(cluster.bootstrap)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = a.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and md.partitions:
            parts = md.partitions.values()
            if all(p.leader >= 0 and len(p.isrs) == len(p.replicas) == rf for p in parts):
                return {p.id: {"leader": p.leader, "replicas": list(p.replicas)} for p in parts}
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic}: not every partition has a leader and {rf} in-sync replicas after "
                       f"{timeout:.0f}s")


def partition_bytes(cluster: Cluster, broker_id: int, topic: str, partition: int) -> int:
    try:
        return sum(f.stat().st_size for f in (cluster.broker(broker_id).log_dir / f"{topic}-{partition}").glob("*.log"))
    except OSError:  # a segment rolled or was renamed between glob and stat: ask again
        return -1


def replica_bytes(cluster: Cluster, topic: str, layout: dict[int, dict]) -> dict[int, dict[int, int]]:
    """{partition: {broker: bytes of its .log files}}."""
    return {p: {b: partition_bytes(cluster, b, topic, p) for b in info["replicas"]} for p, info in layout.items()}


def behind(sizes: dict[int, dict[int, int]], layout: dict[int, dict]) -> int:
    """Bytes the followers miss, summed over partitions and followers."""
    return sum(max(0, s[layout[p]["leader"]] - s[b]) for p, s in sizes.items() for b in s if b != layout[p]["leader"])


def in_sync(sizes: dict[int, dict[int, int]], layout: dict[int, dict]) -> bool:
    return all(v == s[layout[p]["leader"]] and v >= 0 for p, s in sizes.items() for v in s.values())


def wait_replicated(cluster: Cluster, topic: str, layout: dict[int, dict], timeout: float,
                    interval: float = 0.005) -> float | None:
    """Seconds until every follower's log is its leader's size (polled every `interval`), None on timeout."""
    start = time.perf_counter()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if in_sync(replica_bytes(cluster, topic, layout), layout):
            return time.perf_counter() - start
        time.sleep(interval)
    return None


# -- phases --------------------------------------------------------------------------------------------
def settle() -> None:
    """Before a timed phase: write back what earlier phases left dirty in the page cache (tens of GB go through
    it in a run), so that the kernel's writeback of one phase does not land in the next."""
    os.sync()
    time.sleep(0.5)


def throughput(cluster: Cluster, args, topic: str, rf: int, count: int, size: int) -> dict:
    layout = new_topic(cluster, topic, rf, args.phase_timeout)
    settle()
    cpu0, c0 = cluster.cpu(), client_cpu()
    r = bb.produce_throughput(cluster.bootstrap, topic, count, size, args.linger_ms, args.phase_timeout,
                              acks="all", partition=-1)
    cpu = cpu_delta(cpu0, cluster.cpu())
    r["client_cpu_s"] = client_cpu() - c0
    r["broker_cpu_s"] = cpu
    r["broker_cpu_s_total"] = sum(cpu.values())
    mib = r["records"] * size / MIB
    r["payload_mib"] = mib
    r["broker_cpu_s_per_mib"] = r["broker_cpu_s_total"] / mib if mib else None
    r["broker_cpu_pct"] = 100 * r["broker_cpu_s_total"] / r["seconds"]
    sizes = replica_bytes(cluster, topic, layout)
    r["leader_bytes"] = sum(s[layout[p]["leader"]] for p, s in sizes.items())
    r["records_per_partition_bytes"] = {p: s[layout[p]["leader"]] for p, s in sizes.items()}
    # acks=all: every acknowledged byte is on every in-sync replica already.
    r["replicas_equal_at_flush"] = in_sync(sizes, layout)
    r["leaders"] = {p: info["leader"] for p, info in layout.items()}
    return r


def live_burst(cluster: Cluster, args) -> dict:
    topic = "burst-rf3"
    layout = new_topic(cluster, topic, 3, args.phase_timeout)
    settle()
    cpu0 = cluster.cpu()
    r = bb.produce_throughput(cluster.bootstrap, topic, args.burst_records, 1024, args.linger_ms, args.phase_timeout,
                              acks=1, partition=-1)
    at_flush = replica_bytes(cluster, topic, layout)
    catch_up = wait_replicated(cluster, topic, layout, args.phase_timeout)
    cpu = cpu_delta(cpu0, cluster.cpu())
    leader_bytes = sum(s[layout[p]["leader"]] for p, s in at_flush.items())
    out = {"records": r["records"], "complete": r["complete"], "burst_seconds": r["seconds"],
           "burst_mb_per_s": r["mb_per_s"], "leader_bytes": leader_bytes,
           "followers_behind_bytes_at_flush": behind(at_flush, layout),
           "catch_up_after_flush_s": catch_up, "broker_cpu_s": cpu}
    if catch_up is not None:
        # Every follower byte (2 copies of the leaders' bytes) from the first produce() to the last follower append.
        out["replicated_mb_per_s_overall"] = 2 * leader_bytes / (r["seconds"] + catch_up) / MB
    return out


def paused_catch_up(cluster: Cluster, args) -> dict:
    """Followers SIGSTOPped during a burst to the leader, then resumed: time to copy a known backlog."""
    from confluent_kafka import Producer

    topic = "catchup-rf3"
    layout = new_topic(cluster, topic, 3, args.phase_timeout, replica_assignment=[[0, 1, 2]])
    leader = layout[0]["leader"]
    followers = [b for b in layout[0]["replicas"] if b != leader]
    pids = {b.id: b.pid for b in cluster.info.brokers}
    size = 1024
    value = os.urandom(size)
    p = Producer(bb.producer_config(cluster.bootstrap, args.linger_ms, acks=1))
    p.produce(topic, value, partition=0)  # warm-up: connection and metadata before the followers stop
    if p.flush(30):
        raise RuntimeError("paused catch-up: warm-up produce not delivered")
    if wait_replicated(cluster, topic, layout, args.phase_timeout) is None:
        raise RuntimeError("paused catch-up: followers did not hold the warm-up record")
    settle()
    start_bytes = partition_bytes(cluster, leader, topic, 0)
    stopped_at = time.monotonic()
    cpu0 = cluster.cpu()
    try:
        for b in followers:
            os.kill(pids[b], signal.SIGSTOP)
        t0 = time.perf_counter()
        sent = 0
        deadline = stopped_at + args.pause_max
        while sent < args.burst_records and time.monotonic() < deadline:
            try:
                p.produce(topic, value, partition=0)
                sent += 1
            except BufferError:
                p.poll(0.005)
                continue
            if sent % 1000 == 0:
                p.poll(0)
        left = p.flush(max(1.0, stopped_at + args.pause_max + 5 - time.monotonic()))
        burst_s = time.perf_counter() - t0
        cpu_burst = cpu_delta(cpu0, cluster.cpu())
    finally:
        for b in followers:
            os.kill(pids[b], signal.SIGCONT)
    paused_s = time.monotonic() - stopped_at
    cpu1 = cluster.cpu()
    backlog = partition_bytes(cluster, leader, topic, 0) - start_bytes
    catch_up = wait_replicated(cluster, topic, layout, args.phase_timeout, interval=0.002)
    cpu_catch = cpu_delta(cpu1, cluster.cpu())
    if left:
        p.purge()
        p.flush(1)
    records = sent - left
    mib = records * size / MIB
    out = {"leader": leader, "followers": followers, "records": records, "requested": args.burst_records,
           "paused_s": paused_s, "burst_seconds": burst_s, "burst_mb_per_s": records * size / burst_s / MB,
           "backlog_bytes": backlog, "catch_up_s": catch_up, "broker_cpu_s_burst": cpu_burst,
           "broker_cpu_s_catch_up": cpu_catch}
    if catch_up:
        out["catch_up_mb_per_s_per_follower"] = backlog / catch_up / MB
        out["catch_up_payload_mb_per_s_per_follower"] = records * size / catch_up / MB
    if mib:
        out["leader_append_cpu_s_per_mib"] = cpu_burst.get(leader, 0) / mib  # acks=1, nobody fetching
        out["leader_serving_fetch_cpu_s_per_mib_copied"] = cpu_catch.get(leader, 0) / (len(followers) * mib)
        out["follower_cpu_s_per_mib_copied"] = sum(cpu_catch.get(b, 0) for b in followers) / (len(followers) * mib)
        out["replication_cpu_s_per_mib_copied"] = sum(cpu_catch.values()) / (len(followers) * mib)
    return out


def replicated_partitions(cluster: Cluster) -> int:
    """Partitions with more than one replica (each is in some follower's every fetch request)."""
    md = admin(cluster.bootstrap).list_topics(timeout=10)
    return sum(1 for t in md.topics.values() for p in t.partitions.values() if len(p.replicas) > 1)


def latency(cluster: Cluster, args, topic: str, rf: int) -> dict:
    from confluent_kafka import Producer

    layout = new_topic(cluster, topic, rf, args.phase_timeout)
    # Warm-up outside the measurement: a record to every partition (each follower then fetches all of them),
    # then a second for the cluster to settle.
    p = Producer(bb.producer_config(cluster.bootstrap, args.linger_ms, acks="all"))
    for partition in layout:
        p.produce(topic, b"warm-up", partition=partition)
    if p.flush(30):
        raise RuntimeError(f"latency warm-up to {topic} not delivered")
    del p
    settle()
    time.sleep(0.5)
    cpu0 = cluster.cpu()
    r = bb.produce_latency(cluster.bootstrap, topic, args.latency_rate, args.latency_seconds, args.latency_size,
                           args.linger_ms, acks="all", partition=-1)
    r["broker_cpu_s"] = cpu_delta(cpu0, cluster.cpu())
    return r


# -- logs ----------------------------------------------------------------------------------------------
PROBLEM = re.compile(r"\b(ERROR|CRITICAL|FATAL|WARNING|WARN|Traceback|Exception)\b")


def log_problems(cluster: Cluster, limit: int = 15) -> dict[str, dict]:
    """Per log: how many lines look like errors or warnings, and the first `limit` of them."""
    found: dict[str, dict] = {}
    logs = [(f"broker {b.id}", b.log) for b in cluster.info.brokers] + [("zookeeper", cluster.info.zookeeper_log)]
    for name, path in logs:
        try:
            lines = path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        hits = [ln for ln in lines if PROBLEM.search(ln)]
        if name == "zookeeper":  # ZooKeeper's own start-up and session chatter: keep its errors only
            hits = [ln for ln in hits if re.search(r"\b(ERROR|FATAL)\b", ln)]
        if hits:
            found[name] = {"count": len(hits), "first": hits[:limit], "log_lines": len(lines)}
    return found


# -- report --------------------------------------------------------------------------------------------
def fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


MEDIAN_KEYS = ("records", "seconds", "mb_per_s", "records_per_s", "broker_cpu_s_total", "broker_cpu_pct",
               "client_cpu_s", "broker_cpu_s_per_mib")


def summarise(runs: dict, cases) -> dict:
    out: dict = {}
    for label, _count, _size in cases:
        s: dict = {}
        for rf in ("rf1", "rf3"):
            rs = runs.get(label, {}).get(rf, [])
            if not rs:
                continue
            # Every figure is the median of its own runs (CPU and MB/s can peak in different runs).
            med = {key: statistics.median(r[key] for r in rs if r.get(key) is not None)
                   for key in MEDIAN_KEYS if any(r.get(key) is not None for r in rs)}
            med["runs_records_per_s"] = [round(r["records_per_s"]) for r in rs]
            med["runs_broker_cpu_s_per_mib"] = [round(r["broker_cpu_s_per_mib"], 4) for r in rs]
            med["complete"] = all(r["complete"] for r in rs)
            s[rf] = med
        if "rf1" in s and "rf3" in s:
            leader = s["rf1"]["broker_cpu_s_per_mib"]
            extra = s["rf3"]["broker_cpu_s_per_mib"] - leader
            s["throughput_ratio_rf3_rf1"] = s["rf3"]["mb_per_s"] / s["rf1"]["mb_per_s"]
            s["cpu_per_mib_ratio_rf3_rf1"] = s["rf3"]["broker_cpu_s_per_mib"] / leader
            s["leader_append_cpu_s_per_mib"] = leader
            s["replication_cpu_s_per_mib_replicated"] = extra / 2
            s["replication_vs_leader_append"] = extra / 2 / leader
        out[label] = s
    return out


def print_table(report: dict, cases) -> None:
    tp = report.get("throughput", {})
    head = f"{'figure':<50}{'rf1':>12}{'rf3':>12}{'rf3/rf1':>10}"
    print("\n" + head + "\n" + "-" * len(head))
    for label, _count, _size in cases:
        s = tp.get(label, {})
        one, three = s.get("rf1", {}), s.get("rf3", {})
        for key, name, spec in (("mb_per_s", "MB/s", ".1f"), ("records_per_s", "records/s", ",.0f"),
                                ("broker_cpu_s_total", "broker CPU s (3 brokers)", ".1f"),
                                ("broker_cpu_pct", "broker CPU % of one core", ".0f"),
                                ("client_cpu_s", "client CPU s", ".1f"),
                                ("broker_cpu_s_per_mib", "broker CPU s per MiB produced", ".3f")):
            a, b = one.get(key), three.get(key)
            r = "-" if a in (None, 0) or b is None else f"{b / a:.2f}x"
            print(f"{f'acks=all {label} {name}':<50}{fmt(a, spec):>12}{fmt(b, spec):>12}{r:>10}")
    print()
    for label, _count, _size in cases:
        s = tp.get(label, {})
        print(f"{f'{label} leader append CPU s/MiB (rf1)':<50}{fmt(s.get('leader_append_cpu_s_per_mib'), '.3f'):>12}")
        print(f"{f'{label} replication CPU s/MiB replicated':<50}"
              f"{fmt(s.get('replication_cpu_s_per_mib_replicated'), '.3f'):>12}")
        print(f"{f'{label} replication / leader append (goal <= 1)':<50}"
              f"{fmt(s.get('replication_vs_leader_append'), '.2f'):>12}")
    live = report.get("catch_up_live") or {}
    if live:
        print(f"\n{'live burst (acks=1, 1 KiB, RF 3, 3 partitions)':<50}")
        print(f"{'  burst MB/s (leaders)':<50}{fmt(live.get('burst_mb_per_s'), '.1f'):>12}"
              f"   {live.get('records', 0):,} records in {live.get('burst_seconds', 0):.2f} s")
        print(f"{'  followers behind at end of burst, MB':<50}"
              f"{fmt(live.get('followers_behind_bytes_at_flush', 0) / MB, '.2f'):>12}")
        print(f"{'  followers reach leaders end after, s':<50}{fmt(live.get('catch_up_after_flush_s'), '.3f'):>12}")
        print(f"{'  replicated MB/s overall (2 copies)':<50}{fmt(live.get('replicated_mb_per_s_overall'), '.1f'):>12}")
    paused = report.get("catch_up_paused") or {}
    if paused:
        print(f"\n{'paused followers (1 partition, 1 KiB, acks=1)':<50}")
        print(f"{'  backlog MB (leader bytes while stopped)':<50}{fmt(paused.get('backlog_bytes', 0) / MB, '.1f'):>12}"
              f"   {paused.get('records', 0):,} records, followers stopped {paused.get('paused_s', 0):.1f} s")
        print(f"{'  catch-up s (both followers)':<50}{fmt(paused.get('catch_up_s'), '.3f'):>12}")
        print(f"{'  catch-up MB/s per follower (log bytes)':<50}"
              f"{fmt(paused.get('catch_up_mb_per_s_per_follower'), '.1f'):>12}")
        print(f"{'  leader append CPU s/MiB (burst)':<50}{fmt(paused.get('leader_append_cpu_s_per_mib'), '.3f'):>12}")
        print(f"{'  leader serving fetches CPU s/MiB copied':<50}"
              f"{fmt(paused.get('leader_serving_fetch_cpu_s_per_mib_copied'), '.3f'):>12}")
        print(f"{'  follower fetch+append CPU s/MiB copied':<50}"
              f"{fmt(paused.get('follower_cpu_s_per_mib_copied'), '.3f'):>12}")
        rep, lead = paused.get("replication_cpu_s_per_mib_copied"), paused.get("leader_append_cpu_s_per_mib")
        print(f"{'  replication CPU s/MiB copied (both sides)':<50}{fmt(rep, '.3f'):>12}")
        print(f"{'  replication / leader append (goal <= 1)':<50}"
              f"{('-' if not rep or not lead else f'{rep / lead:.2f}'):>12}")
    lat = report.get("latency") or {}
    if lat:
        one, three, after = lat.get("rf1", {}), lat.get("rf3", {}), lat.get("rf3_after", {})
        n = after.get("replicated_partitions")
        print(f"\n{'latency (acks=all, 1 KiB)':<50}{'rf1':>12}{'rf3':>12}{'rf3/rf1':>10}"
              f"{f'rf3 {n}p' if n else 'rf3 after':>12}{'/rf1':>8}")
        for key in ("p50_ms", "p99_ms", "p999_ms", "max_ms"):
            a, b, c = one.get(key), three.get(key), after.get(key)
            r = "-" if not a or b is None else f"{b / a:.2f}x"
            rc = "-" if not a or c is None else f"{c / a:.1f}x"
            print(f"{f'  {key}':<50}{fmt(a, '.2f'):>12}{fmt(b, '.2f'):>12}{r:>10}{fmt(c, '.2f'):>12}{rc:>8}")
        print(f"{'  achieved rate rec/s':<50}{fmt(one.get('achieved_rate'), ',.0f'):>12}"
              f"{fmt(three.get('achieved_rate'), ',.0f'):>12}{'':>10}{fmt(after.get('achieved_rate'), ',.0f'):>12}")
        cpu = [sum(x.get("broker_cpu_s", {}).values()) / (x["records"] / x["rate"]) * 100 if x.get("records") else None
               for x in (one, three, after)]
        print(f"{'  broker CPU % of one core (3 brokers)':<50}{fmt(cpu[0], '.0f'):>12}{fmt(cpu[1], '.0f'):>12}"
              f"{'':>10}{fmt(cpu[2], '.0f'):>12}")
        print(f"{'  delivery errors':<50}{fmt(one.get('errors'), 'd'):>12}{fmt(three.get('errors'), 'd'):>12}"
              f"{'':>10}{fmt(after.get('errors'), 'd'):>12}")
        if n:
            print(f"  (rf1, rf3: on the fresh cluster, before anything else; rf3 {n}p: at the end of the run, with {n}"
                  f" partitions of RF 3 in the cluster, all but {PARTITIONS} idle)")
    print(f"\n(MB/s = payload 10^6 B/s; CPU per MiB = 2^20 B of payload; broker CPU = user+system of all 3 broker "
          f"processes; {report['repeat']} run(s) per case, median; load average at start "
          f"{report['machine']['loadavg_start'][0]:.2f}, {report['machine']['cpus']} CPUs shared by brokers, "
          f"ZooKeeper and client)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a fifth of the records, one run per case, 4 s of latency")
    ap.add_argument("--large-records", type=int, default=500_000, help="records of 1 KiB per throughput phase")
    ap.add_argument("--small-records", type=int, default=2_000_000, help="records of 100 B per throughput phase")
    ap.add_argument("--burst-records", type=int, default=300_000, help="records of 1 KiB per catch-up burst")
    ap.add_argument("--pause-max", type=float, default=6.0, help="seconds the followers stay stopped at most")
    ap.add_argument("--repeat", type=int, default=3, help="rf1/rf3 pairs per size, interleaved; medians")
    ap.add_argument("--linger-ms", type=float, default=5)
    ap.add_argument("--latency-rate", type=int, default=2000)
    ap.add_argument("--latency-seconds", type=float, default=10)
    ap.add_argument("--latency-size", type=int, default=1024)
    ap.add_argument("--phase-timeout", type=float, default=120, help="seconds at most for one phase or wait")
    ap.add_argument("--skip-paused", action="store_true", help="no SIGSTOP catch-up phase")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker configuration override for all three (as kctl cluster run --override)")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, segments) afterwards")
    ap.add_argument("--verbose", action="store_true", help="print the cluster runner's progress")
    ap.add_argument("--json", type=Path, help="also write the JSON report here")
    args = ap.parse_args()
    if args.quick:
        args.large_records //= 5
        args.small_records //= 5
        args.burst_records //= 5
        args.repeat = 1
        args.latency_seconds = min(args.latency_seconds, 4.0)
    if args.pause_max > 10:
        ap.error("--pause-max above 10 s risks the stopped brokers' ZooKeeper sessions (18 s)")

    cases = [("1KiB", args.large_records, 1024), ("100B", args.small_records, 100)]
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))

    import confluent_kafka

    workdir = Path(tempfile.mkdtemp(prefix="kcli-bench-cluster-"))
    report: dict = {
        "cases": {label: {"records": n, "value_bytes": s} for label, n, s in cases},
        "config": {"brokers": BROKERS, "partitions": PARTITIONS, "acks": "all", "linger_ms": args.linger_ms,
                   "compression": "none", "burst_records": args.burst_records, "overrides": args.override},
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "loadavg_start": os.getloadavg()},
        "client": f"confluent-kafka {confluent_kafka.__version__} / librdkafka {confluent_kafka.libversion()[0]}",
        "ours_source": bb.source_version(), "repeat": args.repeat, "quick": args.quick,
    }
    cluster = Cluster(workdir / "cluster", tuple(args.override), args.verbose)
    started = time.monotonic()
    try:
        print(f"workdir {workdir}; {report['client']}; kcli at {report['ours_source']}", flush=True)
        cluster.start()
        report["cluster"] = {"bootstrap": cluster.bootstrap, "zookeeper": cluster.info.zookeeper,
                             "brokers": {b.id: b.pid for b in cluster.info.brokers}}
        print(f"cluster: ZooKeeper {cluster.info.zookeeper}, brokers {cluster.bootstrap} "
              f"(pids {', '.join(str(b.pid) for b in cluster.info.brokers)})", flush=True)
        zk0 = cluster.zookeeper_cpu()
        idle0, t_idle = cluster.cpu(), time.perf_counter()
        time.sleep(2)
        idle = cpu_delta(idle0, cluster.cpu())
        report["idle_broker_cpu_pct"] = 100 * sum(idle.values()) / (time.perf_counter() - t_idle)

        if args.latency_seconds > 0:  # on the fresh cluster: only these two topics exist
            report["latency"] = {}
            for rf in ("rf1", "rf3"):
                lat = latency(cluster, args, f"lat-{rf}", int(rf[2]))
                report["latency"][rf] = lat
                print(f"  latency {rf}: p50 {fmt(lat.get('p50_ms'), '.2f')} ms, p99 {fmt(lat.get('p99_ms'), '.2f')} "
                      f"ms, p99.9 {fmt(lat.get('p999_ms'), '.2f')} ms, errors {lat.get('errors')}", flush=True)

        runs: dict = {}
        for rep in range(args.repeat):
            for label, count, size in cases:
                order = ("rf1", "rf3") if rep % 2 == 0 else ("rf3", "rf1")
                for rf in order:
                    topic = f"tp-{label}-{rf}-r{rep}"
                    r = throughput(cluster, args, topic, int(rf[2]), count, size)
                    runs.setdefault(label, {}).setdefault(rf, []).append(r)
                    per = " ".join(f"b{k}={v:.1f}" for k, v in sorted(r["broker_cpu_s"].items()))
                    print(f"  run {rep + 1}/{args.repeat} {label:<4} {rf}: {r['records_per_s']:>9,.0f} rec/s "
                          f"{r['mb_per_s']:6.1f} MB/s  broker CPU {r['broker_cpu_s_total']:.1f} s ({per}) "
                          f"= {r['broker_cpu_s_per_mib']:.3f} s/MiB, client CPU {r['client_cpu_s']:.1f} s"
                          f"{'' if r['complete'] else ' INCOMPLETE: ' + str(r['first_error'])}"
                          f"{'' if r['replicas_equal_at_flush'] else ' (replicas unequal at flush)'}", flush=True)
        report["throughput_runs"] = runs
        report["throughput"] = summarise(runs, cases)

        live = live_burst(cluster, args)
        report["catch_up_live"] = live
        print(f"  live burst: {live['records']:,} records in {live['burst_seconds']:.2f} s, followers "
              f"{live['followers_behind_bytes_at_flush'] / MB:.2f} MB behind at flush, in sync "
              f"{fmt(live['catch_up_after_flush_s'], '.3f')} s later", flush=True)
        if not args.skip_paused:
            paused = paused_catch_up(cluster, args)
            report["catch_up_paused"] = paused
            print(f"  paused followers: {paused['backlog_bytes'] / MB:.1f} MB backlog caught up in "
                  f"{fmt(paused['catch_up_s'], '.3f')} s", flush=True)

        if args.latency_seconds > 0:  # again, now that the brokers replicate every partition of the run
            followed = replicated_partitions(cluster)
            lat = latency(cluster, args, "lat-rf3-after", 3)
            lat["replicated_partitions"] = followed + PARTITIONS
            report["latency"]["rf3_after"] = lat
            print(f"  latency rf3 with {followed + PARTITIONS} RF 3 partitions in the cluster: p50 "
                  f"{fmt(lat.get('p50_ms'), '.2f')} ms, p99 {fmt(lat.get('p99_ms'), '.2f')} ms, p99.9 "
                  f"{fmt(lat.get('p999_ms'), '.2f')} ms, errors {lat.get('errors')}", flush=True)

        report["zookeeper_cpu_s"] = (cluster.zookeeper_cpu() or 0) - (zk0 or 0)
        report["brokers_alive_at_end"] = cluster.alive()
        report["log_problems"] = log_problems(cluster)
        report["elapsed_s"] = time.monotonic() - started
        print_table(report, cases)
        print(f"(idle broker CPU before the phases: {report['idle_broker_cpu_pct']:.1f}% of a core for all three; "
              f"ZooKeeper CPU over the run {report['zookeeper_cpu_s']:.1f} s; run took {report['elapsed_s']:.0f} s)")
        if report["log_problems"]:
            print("\nBROKER/ZOOKEEPER LOG LINES THAT LOOK LIKE PROBLEMS:")
            for name, found in report["log_problems"].items():
                print(f"  {name}: {found['count']} line(s) of {found['log_lines']}; first ones:")
                for line in found["first"]:
                    print(f"    {line}")
        else:
            print("\nno errors, warnings or tracebacks in the broker logs (nor errors in ZooKeeper's)")
    finally:
        if cluster.info is not None and "log_problems" not in report:  # failed midway: still show the logs
            try:
                report["log_problems"] = log_problems(cluster)
                for name, found in report["log_problems"].items():
                    print(f"  {name}: {found['count']} problem line(s); first: {found['first'][:5]}", flush=True)
            except Exception:
                pass
        cluster.close()
        if cluster.result is not None and not cluster.result.ok:
            report["cluster_stop"] = {"exited": [e.name for e in cluster.result.exited],
                                      "killed": list(cluster.result.killed)}
            print(f"!! cluster stop: {report['cluster_stop']}", flush=True)
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return bb.finish_report(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
