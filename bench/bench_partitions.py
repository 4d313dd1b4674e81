#!/usr/bin/env python3
"""Availability under network faults (issue 23): three `kctl broker run` and ZooKeeper, each in a network
namespace of its own on one bridge (tests/netns_lab.py), partitioned from each other with blackhole routes while an
idempotent acks=all producer writes and, at the end, a consumer reads everything back.

Needs root and `ip netns`. The lab: 10.23.0.0/24 inside the lab's namespaces only; ZooKeeper (tickTime 500 ms) at
.2, brokers at .10-.12, the clients (this process, which enters that namespace) at .100, never cut. Brokers:
zookeeper.session.timeout.ms=--session-timeout-ms (6000), replica.lag.time.max.ms=--lag-ms (5000),
min.insync.replicas=2, topic `faults` with --partitions (6) partitions at RF 3 (and, with --idle-partitions N, a
topic `idle` of N partitions at RF 3 nobody writes to: more logs to close, more to follow); otherwise Kafka's
defaults (replica.fetch.wait.max.ms 500, replica.fetch.backoff.ms 1000). The producer (confluent-kafka,
enable.idempotence, acks=all, linger.ms 5, request.timeout.ms 10000, message.timeout.ms 300000, metadata
refreshed every second, retry backoff 100 ms without librdkafka's exponential growth) sends --rate (600)
records/s round robin over the partitions, values "<partition>:<seq>"; the time of every delivery report is kept.

Scenarios, in this order, each started once every ISR is full and every partition is acknowledging; the cuts are
held --hold seconds (15) unless said otherwise, then healed:
  leader-cut     the leader of partition 0 cut from the other brokers (all still reach ZooKeeper);
  zombie         the leader of partition 0 cut from the other brokers and from ZooKeeper (clients still reach it);
  controller-zk  the controller cut from ZooKeeper only;
  random         --rounds (8) rounds: a random split of {zk, b0, b1, b2} into two non-empty groups, each cut from
                 the other for a random 10-20 s, then healed (and the next round once the ISRs are full again).
  rolling        each broker in turn: SIGTERM (a controlled shutdown), started again, until every ISR is full:
                 acks available over the whole restart; for the controller's stop, the time from its log's
                 "controlled shutdown succeeded" line to another broker in /controller, and to its exit; the
                 time from a restarted broker serving to full ISRs.
For each cut (a "fault window", from the cut to the heal):
  acks available   share of the window's 250 ms slots in which a partition got at least one acknowledgement,
                   averaged over the partitions;
  majority reach   share of the window during which some min.insync.replicas (2) brokers reached each other and
                   ZooKeeper: a leader that could be elected and have its acks=all records replicated, provably
                   reachable by a majority (the clients reach every broker);
  heal -> full ISR from the heal until ZooKeeper shows every partition's ISR with all 3 replicas (polled 50 ms);
  heal -> acks     from the heal until the first acknowledgement of each partition that had none in the second
                   before the heal; the largest (n/a: none stalled).
  +10s acks / maj  the same two over the window and the 10 s after its heal, when everything is reachable: what
                   the heal left to recover counts too.
The table gives, per scenario kind (the random rounds together), medians over the runs of: acks available and
majority reach (time-weighted), acks available in the windows where a majority was reachable (acks|maj), both
again with the 10 s after each heal (+10s), and the median and largest heal -> full ISR and heal -> acks.
At the end the producer is flushed and the topic read back from the beginning: acknowledged records missing
(lost), read twice (duplicates), out of order within a partition, or read at another offset than acknowledged.

--baseline-tree PATH also runs the same with the brokers' kcli from PATH (e.g. the tree before the fixes:
`git worktree add` or `git archive | tar -x`), printed as "before" beside "after" (this checkout). --repeat N runs
each tree N times and prints medians. Every namespace and process is removed at the end, also after a failure.

Usage: sudo bench/bench_partitions.py [--baseline-tree PATH] [--repeat 3] [--scenarios leader-cut,...,rolling]
         [--rounds 8] [--hold 15] [--partitions 6] [--idle-partitions 0] [--rate 600]
         [--session-timeout-ms 6000] [--lag-ms 5000] [--seed N] [--json FILE] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import random
import shutil
import signal
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from netns_lab import NetnsLab, reachable_seconds, unavailable  # noqa: E402

TOPIC = "faults"
SLOT_S = 0.25
AFTER_HEAL_S = 10.0  # "with recovery": a window and the 10 s after its heal
MIN_ISR = 2
SCENARIOS = ("leader-cut", "zombie", "controller-zk", "random", "rolling")


class Producer:
    """An idempotent acks=all producer in a thread of its own; every acknowledgement's time per partition."""

    def __init__(self, bootstrap: str, partitions: int, rate: int) -> None:
        self.bootstrap, self.partitions, self.rate = bootstrap, partitions, rate
        self.acks: list[list[float]] = [[] for _ in range(partitions)]
        self.acked: dict[tuple[int, int], int] = {}  # (partition, seq) -> offset
        self.errors: list[str] = []
        self.fatal: list[str] = []
        self.sent = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> Producer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(360)

    def _run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        def on_error(err):
            if err.fatal():
                self.fatal.append(str(err))

        producer = KafkaProducer({"bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 5, "message.timeout.ms": 300000, "request.timeout.ms": 10000,
                                  "socket.timeout.ms": 10000, "retry.backoff.ms": 100,
                                  # librdkafka backs retries off exponentially up to 1 s: keep its own retry
                                  # cadence out of "heal -> acks"
                                  "retry.backoff.max.ms": 100,
                                  "topic.metadata.refresh.interval.ms": 1000, "error_cb": on_error,
                                  "log_level": 3})
        seq = [0] * self.partitions
        interval, next_at, p = 1.0 / self.rate, time.monotonic(), 0
        while not self._stop.is_set():
            def delivered(err, msg, p=p, s=seq[p]):
                if err is None:
                    self.acks[p].append(time.monotonic())
                    self.acked[(p, s)] = msg.offset()
                else:
                    self.errors.append(str(err))
            try:
                producer.produce(TOPIC, value=f"{p}:{seq[p]}".encode(), partition=p, on_delivery=delivered)
            except BufferError:
                producer.poll(0.05)
                continue
            self.sent += 1
            seq[p] += 1
            p = (p + 1) % self.partitions
            producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            elif delay < -1:
                next_at = time.monotonic()
        producer.flush(300)

    def acking(self, within: float = 1.0) -> bool:
        now = time.monotonic()
        return all(a and a[-1] > now - within for a in self.acks)


class Observer:
    """Reads partition states and the controller from ZooKeeper (kazoo, pipelined)."""

    def __init__(self, lab: NetnsLab, partitions: int) -> None:
        from kazoo.client import KazooClient

        self.partitions = partitions
        self.zk = KazooClient(hosts=f"{lab.zk_connect}/kafka", timeout=10)
        self.zk.start(timeout=20)

    def close(self) -> None:
        self.zk.stop()
        self.zk.close()

    def states(self) -> list[dict]:
        pending = [self.zk.get_async(f"/brokers/topics/{TOPIC}/partitions/{p}/state") for p in range(self.partitions)]
        return [json.loads(r.get(timeout=10)[0]) for r in pending]

    def leader(self, partition: int) -> int:
        return int(self.states()[partition]["leader"])

    def controller(self) -> int:
        return int(json.loads(self.zk.get("/controller")[0])["brokerid"])

    def full_isrs(self) -> bool:
        try:
            return all(len(s["isr"]) == 3 and s["leader"] >= 0 for s in self.states())
        except Exception:
            return False


def wait_until(condition, timeout: float, what: str, interval: float = 0.05) -> float:
    """Seconds until condition() held; raises after ``timeout``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not within {timeout:g}s")
        time.sleep(interval)
    return time.monotonic() - start


def availability(acks: list[list[float]], start: float, end: float) -> float:
    """Mean over partitions of the share of [start, end)'s SLOT_S slots with at least one acknowledgement."""
    slots = max(1, int((end - start) / SLOT_S))
    shares = []
    for times in acks:
        hit = {int((t - start) / SLOT_S) for t in times if start <= t < start + slots * SLOT_S}
        shares.append(len(hit) / slots)
    return sum(shares) / len(shares)


def first_acks_after(acks: list[list[float]], heal: float, deadline: float) -> float | None:
    """Largest delay from ``heal`` to the first acknowledgement of the partitions that had none in the second
    before it; None when none had stalled. A partition still without one at ``deadline`` counts up to it."""
    delays = []
    for times in acks:
        if any(heal - 1.0 <= t < heal for t in times):
            continue
        after = [t for t in times if t >= heal]
        delays.append((after[0] if after else deadline) - heal)
    return max(delays) if delays else None


class Run:
    """One lab, one tree: the scenarios in order; ``windows`` holds one dict per fault window."""

    def __init__(self, args, tree: Path | None, label: str, workdir: Path, rng: random.Random) -> None:
        self.args, self.tree, self.label, self.rng = args, tree, label, rng
        config = {"zookeeper.session.timeout.ms": str(args.session_timeout_ms),
                  "replica.lag.time.max.ms": str(args.lag_ms), "min.insync.replicas": str(MIN_ISR),
                  "offsets.topic.num.partitions": "3", "auto.leader.rebalance.enable": "false"}
        self.lab = NetnsLab(workdir, 3, tree=tree, broker_config=config)
        self.windows: list[dict] = []
        self.restarts: list[dict] = []  # the rolling restart, one per broker
        self.rolling: dict = {}
        self.check: dict = {}

    def go(self) -> None:
        lab = self.lab
        lab.create()
        try:
            lab.start_zookeeper()
            lab.start_brokers()
            with lab.entered():
                self._inside()
        finally:
            left = lab.close()
            if left:
                print(f"could not remove: {left}", file=sys.stderr)

    def _inside(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        args, lab = self.args, self.lab
        admin = AdminClient({"bootstrap.servers": lab.bootstrap()})
        admin.create_topics([NewTopic(TOPIC, args.partitions, 3)])[TOPIC].result(60)
        if args.idle_partitions:  # logs to close at a broker's stop, replicas to follow: a busier broker
            admin.create_topics([NewTopic("idle", args.idle_partitions, 3)])["idle"].result(120)
        observer = Observer(lab, args.partitions)
        try:
            wait_until(observer.full_isrs, 60, "full ISRs after creation")
            producer = Producer(lab.bootstrap(), args.partitions, args.rate).start()
            try:
                for scenario in args.scenarios:
                    getattr(self, "_" + scenario.replace("-", "_"))(observer, producer)
            finally:
                producer.stop()
            self.check = read_back(lab.bootstrap(), args.partitions, producer)
        finally:
            observer.close()

    # -- scenarios -------------------------------------------------------------------------------------------
    def _settle(self, observer: Observer, producer: Producer) -> None:
        wait_until(lambda: observer.full_isrs() and producer.acking(), 120, "full ISRs and every partition acking",
                   0.2)
        time.sleep(2)

    def _window(self, name: str, cut, observer: Observer, producer: Producer, hold: float) -> None:
        self._settle(observer, producer)
        lab = self.lab
        cut()
        start, cut_at = time.monotonic(), time.strftime("%H:%M:%S")
        time.sleep(hold)
        heal, heal_at = time.monotonic(), time.strftime("%H:%M:%S")
        lab.heal()
        try:
            to_isr = wait_until(observer.full_isrs, 120, "full ISRs after the heal", 0.05)
        except TimeoutError:
            to_isr = None
        time.sleep(max(0.0, 3.0 - (time.monotonic() - heal)))
        ack_deadline = heal + 60
        while first_acks_after(producer.acks, heal, ack_deadline) == ack_deadline - heal and \
                time.monotonic() < ack_deadline:
            time.sleep(0.2)
        heal_to_acks = first_acks_after(producer.acks, heal, min(ack_deadline, time.monotonic()))
        end = heal + AFTER_HEAL_S  # the window with what the heal left to recover
        time.sleep(max(0.0, end - time.monotonic()))
        window = {"scenario": name, "cut_at": cut_at, "heal_at": heal_at, "seconds": heal - start,
                  "acks_available": availability(producer.acks, start, heal),
                  "majority_reachable": reachable_seconds(lab.timeline, start, heal, 3, MIN_ISR) / (heal - start),
                  "acks_available_healed": availability(producer.acks, start, end),
                  "majority_reachable_healed": reachable_seconds(lab.timeline, start, end, 3, MIN_ISR) / (end - start),
                  "heal_to_full_isr": to_isr, "heal_to_acks": heal_to_acks}
        self.windows.append(window)
        print(f"  [{self.label}] {name}: {format_window(window)}", flush=True)

    def _leader_cut(self, observer: Observer, producer: Producer) -> None:
        def cut():
            leader = f"b{observer.leader(0)}"
            self.lab.partition([leader], [b for b in ("b0", "b1", "b2") if b != leader])
        self._window("leader-cut", cut, observer, producer, self.args.hold)

    def _zombie(self, observer: Observer, producer: Producer) -> None:
        def cut():
            leader = f"b{observer.leader(0)}"
            self.lab.partition([leader], ["zk", *(b for b in ("b0", "b1", "b2") if b != leader)])
        self._window("zombie", cut, observer, producer, self.args.hold)

    def _controller_zk(self, observer: Observer, producer: Producer) -> None:
        def cut():
            self.lab.cut(f"b{observer.controller()}", "zk")
        self._window("controller-zk", cut, observer, producer, self.args.hold)

    def _random(self, observer: Observer, producer: Producer) -> None:
        nodes = ["zk", "b0", "b1", "b2"]
        for _ in range(self.args.rounds):
            while True:
                side = [n for n in nodes if self.rng.random() < 0.5]
                if 0 < len(side) < len(nodes):
                    break
            other = [n for n in nodes if n not in side]
            hold = self.rng.uniform(10, 20)
            self._window(f"random {'+'.join(side)} | {'+'.join(other)}",
                         lambda side=side, other=other: self.lab.partition(side, other), observer, producer, hold)


    def _rolling(self, observer: Observer, producer: Producer) -> None:
        """SIGTERM each broker in turn (a controlled shutdown), start it again, wait for full ISRs."""
        lab = self.lab
        self._settle(observer, producer)
        start = time.monotonic()
        for broker_id in range(lab.brokers):
            self._settle(observer, producer)
            was_controller = observer.controller() == broker_id
            log = lab.broker_log(broker_id)
            since = log.stat().st_size
            proc = lab.procs[lab.node_of(broker_id)]
            sent_wall, sent = time.time(), time.monotonic()
            proc.send_signal(signal.SIGTERM)
            new_controller = None
            while proc.poll() is None:
                if was_controller and new_controller is None:
                    with contextlib.suppress(Exception):
                        if observer.controller() != broker_id:
                            new_controller = time.monotonic() - sent
                time.sleep(0.02)
            exited = time.monotonic() - sent
            if was_controller and new_controller is None:
                wait_until(lambda: _controller_other_than(observer, broker_id), 60, "another controller", 0.02)
                new_controller = time.monotonic() - sent
            with open(log, "rb") as f:
                f.seek(since)
                text = f.read().decode(errors="replace")
            succeeded = next((_wall(line) - sent_wall for line in text.splitlines()
                              if "controlled shutdown succeeded" in line), None)
            restarted = time.monotonic()
            lab.start_broker(broker_id)
            serving = time.monotonic() - restarted
            to_isr = wait_until(observer.full_isrs, 120, "full ISRs after a restart", 0.05)
            row = {"broker": broker_id, "controller": was_controller, "sigterm_to_exit": exited,
                   "sigterm_to_succeeded": succeeded, "sigterm_to_new_controller": new_controller,
                   "succeeded_to_new_controller": (new_controller - succeeded
                                                   if new_controller is not None and succeeded is not None else None),
                   "succeeded_to_exit": exited - succeeded if succeeded is not None else None,
                   "start_to_serving": serving, "serving_to_full_isr": to_isr}
            self.restarts.append(row)
            print(f"  [{self.label}] rolling: broker {broker_id}{' (controller)' if was_controller else ''}: "
                  f"controlled shutdown succeeded {_fmt(succeeded)} after SIGTERM, exit {_fmt(exited)}"
                  + (f", new controller {_fmt(row['succeeded_to_new_controller'])} after the success"
                     if was_controller else "") + f"; restarted, full ISRs {_fmt(to_isr)} after serving",
                  flush=True)
        end = time.monotonic()
        self.rolling = {"seconds": end - start, "acks_available": availability(producer.acks, start, end)}
        print(f"  [{self.label}] rolling: acks {_fmt(self.rolling['acks_available'], True)} of "
              f"{self.rolling['seconds']:.0f}s", flush=True)


def _controller_other_than(observer: Observer, broker_id: int) -> bool:
    try:
        return observer.controller() != broker_id
    except Exception:
        return False


def _wall(line: str) -> float:
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def read_back(bootstrap: str, partitions: int, producer: Producer) -> dict:
    """Every record of the topic, from the beginning to the high watermark: what was acknowledged and not read
    (lost), read twice, out of order, or read at another offset."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-partitions-check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    read: dict[tuple[int, int], bytes] = {}
    behind = {p for p in range(partitions) if ends[p] > 0}
    deadline = time.monotonic() + 120
    while behind and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            read[(msg.partition(), msg.offset())] = msg.value()
            if msg.offset() >= ends[msg.partition()] - 1:
                behind.discard(msg.partition())
    consumer.close()
    where: dict[bytes, list[int]] = {}
    order: dict[int, list[int]] = {}
    for (p, offset), value in sorted(read.items()):
        where.setdefault(value, []).append(offset)
        order.setdefault(p, []).append(int(value.split(b":")[1]))
    lost = [k for k in producer.acked if f"{k[0]}:{k[1]}".encode() not in where]
    # an offset of None: librdkafka could not tell it (the record must still be read, once)
    moved = [k for k, off in producer.acked.items()
             if off is not None and off not in where.get(f"{k[0]}:{k[1]}".encode(), [off])]
    return {"sent": producer.sent, "acked": len(producer.acked), "read": len(read),
            "lost": len(lost), "duplicates": sum(len(o) - 1 for o in where.values() if len(o) > 1),
            "out_of_order": sum(1 for seqs in order.values() for a, b in zip(seqs, seqs[1:]) if b <= a),
            "moved": len(moved), "producer_errors": len(producer.errors), "fatal": producer.fatal[:3]}


def _fmt(value, pct: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.0f}%" if pct else f"{value:.1f}s"


def format_window(w: dict) -> str:
    return (f"acks {_fmt(w['acks_available'], True)} of {w['seconds']:.0f}s, majority reach "
            f"{_fmt(w['majority_reachable'], True)} (+10s: {_fmt(w['acks_available_healed'], True)}, "
            f"{_fmt(w['majority_reachable_healed'], True)}), heal->full ISR {_fmt(w['heal_to_full_isr'])}, heal->acks "
            f"{_fmt(w['heal_to_acks'])}")


def summarize(runs: list[Run]) -> dict:
    """Per scenario kind (random rounds together), medians over runs of: acks available and majority reach
    (time-weighted over the windows of a run), acks available over the windows a majority was reachable in
    (acks|maj), heal->full ISR and heal->acks (median and max over windows)."""
    out: dict[str, dict] = {}
    for kind in SCENARIOS:
        per_run = []
        for run in runs:
            ws = [w for w in run.windows if w["scenario"].split()[0] == kind]
            if not ws:
                continue
            total = sum(w["seconds"] for w in ws)
            isr = [w["heal_to_full_isr"] for w in ws if w["heal_to_full_isr"] is not None]
            acks = [w["heal_to_acks"] for w in ws if w["heal_to_acks"] is not None]
            reach = [w for w in ws if w["majority_reachable"] >= 0.5]
            reach_total = sum(w["seconds"] for w in reach)
            healed_total = total + AFTER_HEAL_S * len(ws)
            per_run.append({"acks_available": sum(w["acks_available"] * w["seconds"] for w in ws) / total,
                            "acks_healed": sum(w["acks_available_healed"] * (w["seconds"] + AFTER_HEAL_S)
                                               for w in ws) / healed_total,
                            "majority_healed": sum(w["majority_reachable_healed"] * (w["seconds"] + AFTER_HEAL_S)
                                                   for w in ws) / healed_total,
                            "acks_when_reachable": (sum(w["acks_available"] * w["seconds"] for w in reach)
                                                    / reach_total) if reach_total else None,
                            "majority_reachable": sum(w["majority_reachable"] * w["seconds"] for w in ws) / total,
                            "isr_median": statistics.median(isr) if isr else None, "isr_max": max(isr, default=None),
                            "acks_median": statistics.median(acks) if acks else None,
                            "acks_max": max(acks, default=None), "unhealed": len(ws) - len(isr)})
        if per_run:
            out[kind] = {key: _median([r[key] for r in per_run]) for key in per_run[0]}
    return out


def _median(values):
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def print_table(results: dict[str, list[Run]]) -> None:
    labels = list(results)
    summaries = {label: summarize(runs) for label, runs in results.items()}
    print(f"\nmedians over {max(len(r) for r in results.values())} run(s); windows per scenario kind")
    header = f"{'scenario':<14} {'':<7} {'acks avail':>10} {'majority':>9} {'acks|maj':>9} {'+10s acks':>10} " \
             f"{'+10s maj':>9} {'ISR med':>8} {'ISR max':>8} {'acks med':>9} {'acks max':>9}"
    print(header)
    for kind in SCENARIOS:
        for label in labels:
            s = summaries[label].get(kind)
            if s is None:
                continue
            print(f"{kind:<14} {label:<7} {_fmt(s['acks_available'], True):>10} "
                  f"{_fmt(s['majority_reachable'], True):>9} {_fmt(s['acks_when_reachable'], True):>9} "
                  f"{_fmt(s['acks_healed'], True):>10} {_fmt(s['majority_healed'], True):>9} "
                  f"{_fmt(s['isr_median']):>8} {_fmt(s['isr_max']):>8} "
                  f"{_fmt(s['acks_median']):>9} {_fmt(s['acks_max']):>9}")
    if any(r.rolling for runs in results.values() for r in runs):
        print("\nrolling restart (SIGTERM, start, full ISRs; each broker once), medians over the runs")
        for label, runs in results.items():
            done = [r for r in runs if r.rolling]
            if not done:
                continue
            ctl = [row for r in done for row in r.restarts if row["controller"]]
            rows = [row for r in done for row in r.restarts]
            print(f"  {label:<7} acks {_fmt(_median([r.rolling['acks_available'] for r in done]), True)}; the "
                  f"controller's stop: controlled shutdown done -> new controller "
                  f"{_fmt(_median([c['succeeded_to_new_controller'] for c in ctl]))}, -> exit "
                  f"{_fmt(_median([c['succeeded_to_exit'] for c in ctl]))}; any broker: serving again -> full ISRs "
                  f"{_fmt(_median([row['serving_to_full_isr'] for row in rows]))} (max "
                  f"{_fmt(max((row['serving_to_full_isr'] for row in rows), default=None))})")
    print("\nsafety (each run): acknowledged / lost / duplicates / out of order / moved")
    for label, runs in results.items():
        for i, run in enumerate(runs):
            c = run.check
            print(f"  {label} #{i + 1}: {c.get('acked')} / {c.get('lost')} / {c.get('duplicates')} / "
                  f"{c.get('out_of_order')} / {c.get('moved')}  (sent {c.get('sent')}, read {c.get('read')}, "
                  f"producer errors {c.get('producer_errors')}, fatal {c.get('fatal')})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-tree", type=Path, help="a kcli source tree to run as 'before'")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--hold", type=float, default=15.0)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--idle-partitions", type=int, default=0,
                        help="a second topic of this many partitions (RF 3) nobody writes to")
    parser.add_argument("--rate", type=int, default=600)
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument("--lag-ms", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", action="store_true", help="keep the work directory (broker logs)")
    args = parser.parse_args()
    args.scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    unknown = set(args.scenarios) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}")
    def interrupt(signum, frame):  # SIGTERM/SIGHUP as Ctrl-C: the labs are removed in `finally`
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    why = unavailable()
    if why:
        print(f"bench_partitions: {why}", file=sys.stderr)
        return 2
    trees = ([("before", args.baseline_tree.resolve())] if args.baseline_tree else []) + [("after", None)]
    workdir = Path(tempfile.mkdtemp(prefix="bench-partitions-"))
    results: dict[str, list[Run]] = {label: [] for label, _ in trees}
    try:
        for i in range(args.repeat):
            for label, tree in trees:
                # the same fault sequence for both trees in a repeat
                run = Run(args, tree, label, workdir / f"{label}-{i + 1}", random.Random(args.seed + i))
                print(f"run {i + 1} of {args.repeat}: {label} ({tree or REPO})", flush=True)
                run.go()
                results[label].append(run)
        print_table(results)
        if args.json:
            args.json.write_text(json.dumps({label: [{"windows": r.windows, "restarts": r.restarts,
                                                       "rolling": r.rolling, "check": r.check} for r in runs]
                                             for label, runs in results.items()}, indent=1))
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    bad = [r for runs in results.values() for r in runs
           if r.check.get("lost") or r.check.get("duplicates") or r.check.get("out_of_order") or r.check.get("moved")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
