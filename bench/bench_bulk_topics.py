#!/usr/bin/env python3
"""Other clients' latency while thousands of partitions are created and deleted (issue 23, defect 1).

One `kctl broker run` (standalone, temporary log dir, default config but log.segment.delete.delay.ms, see
below), or with --cluster N a ZooKeeper-mode cluster of N brokers (`kctl cluster run`), and, in processes of
their own:

* a producer (confluent-kafka, acks=all, linger.ms=0) sending one 100-byte record every --interval-ms to a
  one-partition topic `latency`; its latency is produce() to the delivery report;
* a group consumer (subscribe, session.timeout.ms 6000, heartbeat.interval.ms 1000, statistics every second)
  reading that topic; its end-to-end latency is now minus the record's CreateTime (ms resolution). From its
  statistics: the Heartbeat requests sent (a heartbeat not sent within an interval because the previous one
  was still unanswered is *missed*: missed = expected - sent - 1, expected = phase length / interval), the
  group coordinator's worst round-trip time (any request: JoinGroup's wait in the idle phase too), and its
  rebalances (assign/revoke callbacks after the first assignment).

Meanwhile the main process creates --partitions partitions with confluent-kafka's AdminClient (topics of
--partitions-per-topic, --topics-per-request per CreateTopics), then one more request while they are all
present (the creation time "at N present"), then deletes them all (--topics-per-request per DeleteTopics),
then waits --after-seconds, during which the deleted logs' files are removed (the broker runs with
log.segment.delete.delay.ms=--delete-delay-ms, 5 s, so that this happens within the run). Phases: idle (before),
create, delete, after. Reported per phase: produce and end-to-end latency p50/p99/max, heartbeats
sent/expected/missed, the coordinator's max RTT; and rebalances; creation time per partition of the requests
starting at 0, at ~2,000 and with all (--partitions) present; deletion time per partition; the brokers' CPU
seconds, peak open file descriptors and RSS (the largest broker's).

--baseline-tree DIR runs the same against the brokers of another kcli tree (a checkout of the commit to compare
with) with --baseline-partitions partitions (its creation slows with every partition present and it holds 5
descriptors per partition, so the full count may not be reachable: creation then stops at the first failed
request and the deletion phase deletes what exists); --repeat N runs each peer N times, interleaved, and
reports medians. Everything listens on 127.0.0.1; the brokers and the client processes are stopped and the
temporary directory removed at the end. The machine's other load shows in every figure: compare the idle phase.

Usage: bench/bench_bulk_topics.py [--partitions 10000] [--partitions-per-topic 100] [--topics-per-request 5]
         [--interval-ms 5] [--cluster N] [--baseline-tree DIR] [--baseline-partitions 2500] [--repeat 1]
         [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_broker as bb  # noqa: E402  (Peer, Ours, create_topic, process CPU)

LATENCY_TOPIC = "latency"
HEARTBEAT_INTERVAL_MS = 1000
SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms: a stall this long evicts the member
MARKS = (0, 2000)  # creation time per partition is reported for the requests starting at these counts


class Standalone(bb.Ours):
    """`kctl broker run` (standalone) from this tree, or from another one (--baseline-tree)."""

    def __init__(self, workdir: Path, tree: Path | None, overrides: list[str]) -> None:
        self.name = "base" if tree is not None else "ours"
        super().__init__(workdir)
        self.tree = tree
        self.overrides = overrides
        self.log_dir = workdir / "logs"

    def command(self) -> list[str]:
        command = super().command() + [arg for o in self.overrides for arg in ("--override", o)]
        if self.stalls is not None:  # the same broker, with an event-loop stall watcher (stall_watch.py)
            command = [sys.executable, str(Path(__file__).resolve().parent / "stall_watch.py"), str(self.stalls)] + \
                command[command.index("broker"):]
        if self._profiled is not None:  # bench_broker's Peer.start would wrap it without --threads --idle
            command = [bb.py_spy(), "record", "--format", "raw", "--rate", "100", "--nonblocking", "--threads",
                       *self.profile_flags, "--output", str(self._profiled), "--"] + command
        return command

    def start(self) -> None:
        self._profiled, self.profile = self.profile, None
        try:
            super().start()
        finally:
            self.profile = self._profiled

    _profiled: Path | None = None
    profile_flags: list[str] = []
    stalls: Path | None = None  # --watch-stalls: where stall_watch.py writes the event loop's stalls

    def env(self) -> dict[str, str]:
        env = super().env()
        if self.tree is not None:
            env["PYTHONPATH"] = str(self.tree) + os.pathsep + env["PYTHONPATH"]
        return env

    @property
    def broker_pids(self) -> list[int]:
        pid = self.broker_pid  # the broker itself, also under py-spy (--profile)
        return [pid] if pid is not None else []


class Cluster:
    """`kctl cluster run --brokers N` (ZooKeeper mode) from this tree or another one, as a subprocess."""

    def __init__(self, workdir: Path, tree: Path | None, overrides: list[str], brokers: int) -> None:
        self.name = "base" if tree is not None else "ours"
        self.workdir, self.tree, self.overrides, self.brokers = workdir, tree, overrides, brokers
        self.proc: subprocess.Popen | None = None
        self.info: dict = {}

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.tree or bb.REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                                           else "")
        command = [sys.executable, "-m", "kcli", "cluster", "run", "--brokers", str(self.brokers), "--data-dir",
                   str(self.workdir / "cluster"), "--json"] + [arg for o in self.overrides for arg in ("--override", o)]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=open(self.workdir / "cluster.err", "wb"),
                                     stdin=subprocess.DEVNULL, env=env, cwd=self.workdir, start_new_session=True)
        line = self.proc.stdout.readline()  # the JSON object, once every broker answers
        if not line:
            raise RuntimeError(f"the cluster did not start:\n{bb.tail(self.workdir / 'cluster.err')}")
        self.info = json.loads(line)

    @property
    def bootstrap(self) -> str:
        return self.info["bootstrap"]

    @property
    def broker_pids(self) -> list[int]:
        return [b["pid"] for b in self.info.get("brokers", ())]

    def stop(self) -> None:
        bb.stop_process(self.proc, grace=60)


def cpu_seconds(peer) -> float | None:
    values = [bb.process_cpu_seconds(pid) for pid in peer.broker_pids]
    return None if not values or None in values else sum(values)


# -- the client processes ---------------------------------------------------------------------------------
def run_producer(bootstrap: str, interval_ms: float, ready, stop, out) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "acks": "all",
                         "linger.ms": 0, "enable.idempotence": False, "message.timeout.ms": 120_000})
    samples: list[tuple[float, float]] = []  # (wall time sent, seconds to the delivery report)
    errors = [0]

    def report(sent_wall: float, sent: float):
        def on_delivery(err, msg) -> None:
            if err is None:
                samples.append((sent_wall, time.perf_counter() - sent))
            else:
                errors[0] += 1
        return on_delivery

    producer.produce(LATENCY_TOPIC, b"warm-up")
    producer.flush(60)
    ready.set()
    value = b"x" * 100
    next_at = time.perf_counter()
    while not stop.is_set():
        producer.produce(LATENCY_TOPIC, value, on_delivery=report(time.time(), time.perf_counter()))
        producer.poll(0)
        next_at += interval_ms / 1000
        if next_at < time.perf_counter():
            next_at = time.perf_counter()  # fell behind (a stall): no burst to catch up
        while (delay := next_at - time.perf_counter()) > 0:
            producer.poll(delay)  # returns early on a delivery report
    producer.flush(120)
    out.put(("producer", {"samples": samples, "errors": errors[0]}))


def run_consumer(bootstrap: str, ready, stop, out) -> None:
    from confluent_kafka import Consumer

    stats: list[tuple[float, int, float]] = []  # (wall time, Heartbeat requests sent so far, coordinator max RTT)
    assigned = [0]
    revoked = [0]

    def on_stats(text: str) -> None:
        data = json.loads(text)
        heartbeats = 0
        rtt_max = 0.0
        for broker in data.get("brokers", {}).values():
            heartbeats += int(broker.get("req", {}).get("Heartbeat", 0))
            if broker.get("name", "").startswith("GroupCoordinator"):
                rtt_max = max(rtt_max, broker.get("rtt", {}).get("max", 0) / 1e6)  # microseconds
        stats.append((time.time(), heartbeats, rtt_max))

    consumer = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4",
                         "group.id": f"bulk-topics-{os.getpid()}", "auto.offset.reset": "latest",
                         "session.timeout.ms": SESSION_TIMEOUT_MS, "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
                         "statistics.interval.ms": 1000, "stats_cb": on_stats, "fetch.wait.max.ms": 100,
                         "enable.auto.commit": True})
    consumer.subscribe([LATENCY_TOPIC], on_assign=lambda c, ps: assigned.__setitem__(0, assigned[0] + 1),
                       on_revoke=lambda c, ps: revoked.__setitem__(0, revoked[0] + 1))
    samples: list[tuple[float, float]] = []  # (wall time received, end-to-end seconds)
    errors: list[str] = []
    while not stop.is_set():
        msg = consumer.poll(0.05)
        if msg is None:
            if assigned[0] and not ready.is_set():
                ready.set()
            continue
        if msg.error() is not None:
            errors.append(str(msg.error()))
            continue
        now = time.time()
        if not ready.is_set():
            ready.set()
        created_ms = msg.timestamp()[1]
        if msg.value() != b"warm-up":
            samples.append((now, now - created_ms / 1000))
    counts = assigned[0], revoked[0]  # close() revokes once more
    consumer.close()
    out.put(("consumer", {"samples": samples, "stats": stats, "assigned": counts[0], "revoked": counts[1],
                          "errors": errors}))


# -- the admin work -----------------------------------------------------------------------------------------
def create_all(admin, names: list[str], per_topic: int, per_request: int, timeout: float, *,
               quiet: bool = False) -> list[dict]:
    from confluent_kafka.admin import NewTopic

    done = []
    present = 0
    for i in range(0, len(names), per_request):
        batch = names[i:i + per_request]
        started = time.perf_counter()
        futures = admin.create_topics([NewTopic(n, per_topic, 1) for n in batch], operation_timeout=timeout,
                                      request_timeout=timeout)
        for future in futures.values():
            future.result(timeout + 30)
        seconds = time.perf_counter() - started
        done.append({"present": present, "partitions": len(batch) * per_topic, "seconds": seconds})
        present += len(batch) * per_topic
        if not quiet:
            print(f"  created {present} partitions ({1000 * seconds / (len(batch) * per_topic):.2f} ms/partition)",
                  flush=True)
    return done


def delete_all(admin, names: list[str], per_topic: int, per_request: int, timeout: float) -> list[dict]:
    done = []
    for i in range(0, len(names), per_request):
        batch = names[i:i + per_request]
        started = time.perf_counter()
        for future in admin.delete_topics(batch, operation_timeout=timeout, request_timeout=timeout).values():
            future.result(timeout + 30)
        done.append({"partitions": len(batch) * per_topic, "seconds": time.perf_counter() - started})
    return done


def broker_fds_and_rss(pids: list[int]) -> tuple[int, int]:
    """The most file descriptors and the most resident memory of any of the brokers now."""
    fds = rss = 0
    for pid in pids:
        try:
            fds = max(fds, len(os.listdir(f"/proc/{pid}/fd")))
            rss = max(rss, int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE"))
        except (OSError, ValueError):
            pass
    return fds, rss


# -- figures ------------------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def latency_figures(samples: list[tuple[float, float]], start: float, end: float) -> dict:
    values = [lat * 1000 for t, lat in samples if start <= t < end]
    return {"n": len(values), "p50_ms": pct(values, 0.50), "p99_ms": pct(values, 0.99),
            "max_ms": max(values) if values else None}


def heartbeat_figures(stats: list[tuple[float, int, float]], start: float, end: float) -> dict:
    inside = [s for s in stats if start <= s[0] <= end]
    before = [s for s in stats if s[0] < start]
    if not inside:
        return {"sent": None, "expected": None, "missed": None, "coordinator_rtt_max_ms": None}
    first = before[-1] if before else inside[0]
    last = inside[-1]
    sent = last[1] - first[1]
    expected = (last[0] - first[0]) * 1000 / HEARTBEAT_INTERVAL_MS
    return {"sent": sent, "expected": round(expected, 1), "missed": max(0, int(expected - sent - 1)),
            "coordinator_rtt_max_ms": round(max(s[2] for s in inside) * 1000, 1)}


def creation_figures(created: list[dict], total: int) -> dict:
    out: dict = {}
    for mark in MARKS:
        row = min(created, key=lambda r: abs(r["present"] - mark)) if created else None
        out[f"at_{mark}"] = None if row is None else {
            "present": row["present"], "ms_per_partition": 1000 * row["seconds"] / row["partitions"]}
    final = [r for r in created if r["present"] >= total]
    out[f"at_{total}"] = None if not final else {
        "present": final[-1]["present"], "ms_per_partition": 1000 * final[-1]["seconds"] / final[-1]["partitions"]}
    return out


# -- one run ------------------------------------------------------------------------------------------------
def measure(peer, partitions: int, args) -> dict:
    from confluent_kafka.admin import AdminClient

    bb.create_topic(peer.bootstrap, LATENCY_TOPIC, 60)
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    stop = ctx.Event()
    p_ready, c_ready = ctx.Event(), ctx.Event()
    producer = ctx.Process(target=run_producer, args=(peer.bootstrap, args.interval_ms, p_ready, stop, out))
    consumer = ctx.Process(target=run_consumer, args=(peer.bootstrap, c_ready, stop, out))
    consumer.start()
    producer.start()
    results: dict = {}
    fds_peak = rss_peak = 0
    try:
        if not (p_ready.wait(120) and c_ready.wait(120)):
            raise RuntimeError("the producer or the consumer did not start")
        admin = AdminClient({"bootstrap.servers": peer.bootstrap, "broker.address.family": "v4"})
        # the first CreateTopics and DeleteTopics load their protocol schemas: not part of the figures
        create_all(admin, ["bulk-warm-up"], 1, 1, args.request_timeout, quiet=True)
        delete_all(admin, ["bulk-warm-up"], 1, 1, args.request_timeout)
        time.sleep(args.idle_seconds)
        per_topic = args.partitions_per_topic
        names = [f"bulk-{i:05d}" for i in range(partitions // per_topic)]
        probe = [f"bulk-probe-{i}" for i in range(args.topics_per_request)]
        cpu0 = cpu_seconds(peer)
        t_create = time.time()
        created: list[dict] = []
        error = None
        try:
            created = create_all(admin, names, per_topic, args.topics_per_request, args.request_timeout)
            reached = sum(r["partitions"] for r in created)
            # one more request with every partition present: the creation time "at N present"
            [extra] = create_all(admin, probe, per_topic, len(probe), args.request_timeout)
            created.append({**extra, "present": reached})
        except Exception as exc:  # the baseline may fail (too many open files) or time out
            error = f"{type(exc).__name__}: {exc}"
            print(f"  creation stopped: {error}", flush=True)
        fds_peak, rss_peak = broker_fds_and_rss(peer.broker_pids)
        if error is not None:
            # which topics exist: a Metadata request for all topics, outside the measured phases (it is an
            # O(partitions) request of its own, ~100 ms of the event loop with 10,000 partitions)
            listed = admin.list_topics(timeout=60).topics
            existing = [n for n in names + probe if n in listed]
        else:
            existing = names + probe
        time.sleep(1)
        t_delete = time.time()
        deleted = delete_all(admin, existing, per_topic, args.topics_per_request, args.request_timeout)
        t_end = time.time()
        time.sleep(args.after_seconds)  # the deleted logs' files go (log.segment.delete.delay.ms)
        t_after = time.time()
        cpu1 = cpu_seconds(peer)
        time.sleep(2)  # the last deliveries and statistics
    finally:
        stop.set()
        for _ in range(2):
            kind, data = out.get(timeout=180)
            results[kind] = data
        producer.join(30)
        consumer.join(30)
    prod, cons = results["producer"], results["consumer"]
    phases = {"idle": (t_create - args.idle_seconds, t_create), "create": (t_create, t_delete),
              "delete": (t_delete, t_end), "after": (t_end, t_after)}
    reached = sum(r["partitions"] for r in created if r["present"] < partitions) if error else partitions
    report = {"partitions_wanted": partitions, "partitions_created": reached, "creation_error": error,
              "create_seconds": t_delete - t_create, "delete_seconds": t_end - t_delete,
              "broker_cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
              "broker_fds_peak": fds_peak, "broker_rss_peak_mib": rss_peak / (1 << 20),
              "creation": creation_figures(created, partitions),
              "deletion_ms_per_partition": (1000 * sum(r["seconds"] for r in deleted)
                                            / max(1, sum(r["partitions"] for r in deleted))),
              "producer_errors": prod["errors"], "consumer_errors": cons["errors"][:5],
              "rebalances": max(0, cons["assigned"] - 1) + cons["revoked"], "phases": {}}
    stalls = read_stalls(getattr(peer, "stalls", None))
    for phase, (start, end) in phases.items():
        report["phases"][phase] = {"produce": latency_figures(prod["samples"], start, end),
                                   "end_to_end": latency_figures(cons["samples"], start, end),
                                   "heartbeats": heartbeat_figures(cons["stats"], start, end)}
        if stalls is not None:
            inside = sorted((s for s in stalls if start <= s["at"] < end and "gc" not in s), key=lambda s: -s["ms"])
            gcs = sorted((s for s in stalls if start <= s["at"] < end and "gc" in s), key=lambda s: -s["ms"])
            report["phases"][phase]["stalls"] = {"count": len(inside), "total_ms": sum(s["ms"] for s in inside),
                                                 "longest": inside[:3], "gc_over_20ms": len(gcs),
                                                 "gc_ms": sum(s["ms"] for s in gcs), "longest_gc": gcs[:2]}
    return report


def read_stalls(path: Path | None) -> list[dict] | None:
    if path is None:
        return None
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except OSError:
        return []


def median_report(runs: list[dict]) -> dict:
    """Medians of every numeric figure over the runs (the first run's structure)."""
    def merge(values: list) -> object:
        first = values[0]
        if isinstance(first, dict):
            return {k: merge([v.get(k) if isinstance(v, dict) else None for v in values]) for k in first}
        numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numbers and len(numbers) == len(values):
            return statistics.median(numbers)
        return first
    return merge(runs) if len(runs) > 1 else runs[0]


def fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_report(name: str, r: dict) -> None:
    print(f"\n== {name}: {r['partitions_created']} of {r['partitions_wanted']} partitions created in "
          f"{r['create_seconds']:.1f}s, deleted in {r['delete_seconds']:.1f}s"
          + (f" (creation stopped: {r['creation_error']})" if r.get("creation_error") else ""))
    print(f"{'phase':8}{'produce p50/p99/max ms':>26}{'e2e p50/p99/max ms':>24}{'heartbeats sent/exp/missed':>29}"
          f"{'coord rtt max':>15}")
    for phase, f in r["phases"].items():
        p, e, h = f["produce"], f["end_to_end"], f["heartbeats"]
        print(f"{phase:8}{fmt(p['p50_ms']):>10}/{fmt(p['p99_ms']):>7}/{fmt(p['max_ms']):>7}"
              f"{fmt(e['p50_ms']):>9}/{fmt(e['p99_ms']):>6}/{fmt(e['max_ms']):>7}"
              f"{fmt(h['sent'], 0):>15}/{fmt(h['expected'], 0):>5}/{fmt(h['missed'], 0):>5}"
              f"{fmt(h['coordinator_rtt_max_ms']):>13} ms")
    for phase, f in r["phases"].items():
        stalls = f.get("stalls")
        if stalls:
            print(f"  {phase}: {stalls['count']} event-loop stalls over 50 ms, {stalls['total_ms']:.0f} ms in all; "
                  f"{stalls['gc_over_20ms']} garbage collections over 20 ms, {stalls['gc_ms']:.0f} ms")
            for s in stalls["longest"]:
                print(f"    {s['ms']:.0f} ms in " + " <- ".join(reversed(s["stack"][-4:])))
            for s in stalls["longest_gc"]:
                print(f"    gc gen {s['gc']} {s['ms']:.0f} ms in {s['thread']}")
    creation = ", ".join(f"{v['ms_per_partition']:.2f} ms at {v['present']}" for v in r["creation"].values()
                         if v is not None)
    print(f"creation per partition: {creation}; deletion {r['deletion_ms_per_partition']:.2f} ms/partition")
    print(f"rebalances {r['rebalances']}, producer errors {r['producer_errors']}, broker CPU "
          f"{fmt(r['broker_cpu_s'])} s, peak fds {r['broker_fds_peak']}, peak RSS {r['broker_rss_peak_mib']:.0f} MiB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--partitions-per-topic", type=int, default=100)
    ap.add_argument("--topics-per-request", type=int, default=5)
    ap.add_argument("--interval-ms", type=float, default=5.0, help="between the producer's records")
    ap.add_argument("--idle-seconds", type=float, default=5.0, help="measured before the creations start")
    ap.add_argument("--request-timeout", type=float, default=300.0, help="CreateTopics / DeleteTopics timeout (s)")
    ap.add_argument("--delete-delay-ms", type=int, default=5000, help="the brokers' log.segment.delete.delay.ms")
    ap.add_argument("--after-seconds", type=float, default=10.0,
                    help="measured after the deletions (the deleted files are removed then)")
    ap.add_argument("--cluster", type=int, default=0, metavar="N",
                    help="a ZooKeeper-mode cluster of N brokers (`kctl cluster run`) instead of one standalone broker")
    ap.add_argument("--baseline-tree", type=Path, help="also run `kctl broker run` from this kcli tree")
    ap.add_argument("--baseline-partitions", type=int, default=2500)
    ap.add_argument("--skip-ours", action="store_true", help="only the baseline")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--watch-stalls", action="store_true",
                    help="standalone: record the broker's event-loop stalls over 50 ms with the loop thread's stack "
                    "(bench/stall_watch.py) and report the longest per phase")
    ap.add_argument("--profile", type=Path, help="run our standalone broker under `py-spy record --threads` (raw "
                    "format, to this file; py-spy slows the broker: take no figures from such a run)")
    ap.add_argument("--profile-flags", default="--idle", help="more py-spy record flags: --idle (what the event-loop "
                    "thread waits on) or --gil (which thread holds the GIL)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    peers: list[tuple[str, object, int]] = []
    if not args.skip_ours:
        peers.append(("ours", None, args.partitions))
    if args.baseline_tree:
        peers.append(("base", args.baseline_tree.resolve(), args.baseline_partitions))
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in peers}
    with tempfile.TemporaryDirectory(prefix="kctl-bulk-topics-") as tmp:
        for attempt in range(args.repeat):
            order = peers if attempt % 2 == 0 else list(reversed(peers))
            for name, tree, partitions in order:
                workdir = Path(tmp) / f"{name}-{attempt}"
                workdir.mkdir()
                overrides = [f"log.segment.delete.delay.ms={args.delete_delay_ms}"]
                peer = (Cluster(workdir, tree, overrides, args.cluster) if args.cluster
                        else Standalone(workdir, tree, overrides))
                if args.watch_stalls and not args.cluster:
                    peer.stalls = workdir / "stalls.jsonl"
                if args.profile and tree is None and not args.cluster:
                    peer.profile, peer.profile_flags = args.profile, args.profile_flags.split()
                print(f"run {attempt + 1}/{args.repeat}: {name} ({partitions} partitions)", flush=True)
                peer.start()
                try:
                    runs[name].append(measure(peer, partitions, args))
                finally:
                    peer.stop()
    report = {name: median_report(r) for name, r in runs.items()}
    for name, r in report.items():
        print_report(name + (f" (median of {len(runs[name])})" if len(runs[name]) > 1 else ""), r)
    if args.json:
        args.json.write_text(json.dumps({"report": report, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
