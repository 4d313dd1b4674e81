#!/usr/bin/env python3
"""Failover on a 3-broker ZooKeeper-mode cluster: kill -9 of a partition leader under an idempotent acks=all
producer, kill -9 of the controller with 1,000 partitions, and the controlled shutdown (SIGTERM) of a broker
leading 500 partitions.

One run starts a real ZooKeeper (Debian's package, kcli/zk/server.py) and, for each of the three phases, a fresh
cluster of three `python -m kcli broker run --config FILE` processes in their own ZooKeeper chroot and temp dirs
(server.properties from kcli's cluster library, kcli/cluster/runner.py broker_properties: what `kctl cluster
run` writes for 3 brokers, plus zookeeper.session.timeout.ms=--session-timeout-ms and the phase's overrides),
ready once all three are registered and every broker's Metadata lists all three and the controller.
The bench starts each broker process itself, so that it can kill -9, SIGTERM and restart any one of them. The
ZooKeeper tickTime bounds the sessions a broker can get (2 to 20 ticks), and ZooKeeper expires sessions in
buckets of one tick, counted from the last time it heard from the broker (a ping or request, which may be a
while before the kill): a kill is noticed a little before the timeout to one tick after it. --tick-time-ms defaults to 500 ms (as the tests' ZooKeeper) or, for sessions above 10 s, the smallest tick that
grants --session-timeout-ms. ZooKeeper state is read with kazoo (pipelined reads for many partitions),
polled every 10 ms for one znode and every 100 ms for many.

1. leader kills (--kills 20): topic `failover`, --kill-partitions 3 partitions at RF 3, min.insync.replicas=2
   (broker-wide); kcli has no automatic preferred-leader rebalance, so leaders move only when killed (a round's
   victim is often the controller too: the round then includes a controller election). A confluent-kafka producer
   (enable.idempotence, acks=all, linger.ms=5, librdkafka's defaults otherwise, message.timeout.ms 300 s)
   sends --rate 1000 records/s of --value-bytes 100 continuously, round robin over the partitions, from its own
   thread; every record's produce() time and delivery-callback time are kept. Each round: wait until every
   partition's ISR is full and the producer is acknowledging, wait a random 0-0.5 s, read the leader of
   partition 0 from /brokers/topics/failover/partitions/0/state, kill -9 it, then measure
   - new leader in ZooKeeper: from the kill until that znode names another live leader (leader_epoch higher);
   - new leader in Metadata: until a Metadata request to the live brokers (polled every 50 ms) names it;
   - first ack after the kill: from the kill until the delivery callback of the first acknowledged record to
     partition 0 whose produce() came after the kill;
   then restart the killed broker and time until it listens (after recovering its logs), until it is
   registered in ZooKeeper, and until it is back in every partition's ISR (in ZooKeeper).
   At the end the producer is flushed and the whole topic read back (assign from the beginning to the high
   watermark): acknowledged records missing from it (lost), records read twice (duplicates), acknowledged at
   one offset but read at another.
2. controller failover: --controller-partitions 1000 partitions (topics of 100) at --controller-rf 3, created
   with one CreateTopics request; timed until ZooKeeper has a leader for every partition, until a broker's
   Metadata shows them all led, and until every ISR is full. Then kill -9 the controller and time
   (a) until /controller names another broker and /controller_epoch is higher, (b) until every partition the
   dead broker led has another leader in ZooKeeper (and the first of them), (c) until Metadata from the live
   brokers shows that; then restart it and time until it is back in every ISR.
3. controlled shutdown: one topic of --shutdown-partitions 500 partitions at RF 3 with explicit assignments,
   the victim (a broker that is not the controller) first in each, so it leads all 500 once their ISRs are
   full. SIGTERM it and time until its log says "controlled shutdown succeeded in X s" (the bench takes the
   line's own timestamp, and X), and until the process exits; then check in ZooKeeper that it leads none of
   them, and how many ISRs still name it.

It prints a table and the JSON (--json FILE), and the errors and tracebacks of the brokers' logs (warnings
counted; a kill makes the survivors warn about the dead one). Every wait is bounded (--phase-timeout); the
brokers, ZooKeeper and the temp dir are removed in `finally` (SIGTERM/SIGHUP included). Everything is on
127.0.0.1. --quick: 3 kills, 100 and 50 partitions.

Usage: bench/bench_failover.py [--quick] [--kills 20] [--session-timeout-ms 6000] [--rate 1000]
         [--controller-partitions 1000] [--controller-rf 3] [--shutdown-partitions 500]
         [--override KEY=VALUE] [--producer-config KEY=VALUE] [--skip-kills] [--skip-controller]
         [--skip-shutdown] [--keep] [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_broker as bb  # bench/ is not a package: from this directory
import bench_cluster as bc

BROKERS = 3
TOPICS_OF = 100  # partitions per topic in the controller phase
SUCCEEDED = re.compile(r"^(\S+ \S+) .*controlled shutdown succeeded in ([0-9.]+)s \(controller (\d+), attempt (\d+)\)")
ERRORISH = re.compile(r"\b(ERROR|CRITICAL|FATAL|Traceback|Exception)\b")


class Timeout(RuntimeError):
    pass


def wait_until(condition, timeout: float, what: str, interval: float = 0.01):
    """The first truthy value of condition(), polled every `interval`; Timeout after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Timeout(f"{what}: not within {timeout:.0f}s")
        time.sleep(interval)


# -- processes -----------------------------------------------------------------------------------------
class Broker(bb.Ours):
    """One `kctl broker run` with a fixed port and config; every (re)start logs to its own file."""

    def __init__(self, workdir: Path, broker_id: int, connect: str, overrides: dict[str, str]) -> None:
        from kcli.cluster.runner import broker_properties
        from kcli.storage.checkpoint import format_java_properties

        workdir.mkdir(parents=True)
        super().__init__(workdir)
        self.id = broker_id
        self.name = f"broker-{broker_id}"
        self.log_dir = workdir / "logs"
        self.config = workdir / "server.properties"
        self.config.write_text(format_java_properties(
            broker_properties(broker_id, self.port, self.log_dir, connect, BROKERS, None, overrides)))
        self.logs: list[Path] = []

    def command(self) -> list[str]:
        return [sys.executable, "-m", "kcli", "broker", "run", "--config", str(self.config)]

    def launch(self) -> None:
        """bench_broker's Peer.start without the wait (after a kill -9 the broker recovers every partition's log
        before it listens, which can take minutes), each start into a log file of its own."""
        self.log_path = self.workdir / f"broker-{self.id}.{len(self.logs) + 1}.log"
        self.logs.append(self.log_path)
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.env(), cwd=self.workdir, start_new_session=True)

    def start(self, timeout: float = 60) -> None:
        self.launch()
        bb.wait_listening(self.proc, self.port, timeout, self.log_path)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive:
            self.proc.kill()
            self.proc.wait(30)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class FailoverCluster:
    """Three brokers in their own chroot of the bench's ZooKeeper; `zk` is the bench's kazoo client (root)."""

    extra: ClassVar[dict[str, str]] = {}  # --override, for every broker of every phase

    def __init__(self, zookeeper, zk, workdir: Path, name: str, overrides: dict[str, str]) -> None:
        overrides = {**overrides, **self.extra}
        self.name = name
        self.chroot = f"/{name}"
        self.zk = zk
        zk.ensure_path(self.chroot)
        connect = f"{zookeeper.connect}{self.chroot}"
        self.brokers = [Broker(workdir / f"broker-{i}", i, connect, overrides) for i in range(BROKERS)]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def bootstrap_without(self, broker_id: int) -> str:
        return ",".join(b.bootstrap for b in self.brokers if b.id != broker_id)

    def start(self, timeout: float) -> None:
        for b in self.brokers:
            b.start()
        wait_until(lambda: self.live_ids() == list(range(BROKERS)), timeout, f"{self.name}: 3 registered brokers", 0.1)
        wait_until(lambda: self.controller_id() is not None, timeout, f"{self.name}: a controller", 0.1)
        # Until the controller's first UpdateMetadata reaches it, a broker's Metadata names the controller but lists
        # only itself, and librdkafka then waits for that controller until its next metadata refresh (5 min): a
        # CreateTopics sent that early hangs. Wait until every broker lists all three and the controller.
        wait_until(self.metadata_complete, timeout, f"{self.name}: every broker's Metadata complete", 0.1)

    def metadata_complete(self) -> bool:
        for b in self.brokers:
            try:
                md = admin(b.bootstrap).list_topics(timeout=5)
            except Exception:  # not answering yet
                return False
            if sorted(md.brokers) != list(range(BROKERS)) or md.controller_id not in md.brokers:
                return False
        return True

    def restart(self, broker_id: int, timeout: float) -> dict[str, float]:
        """Start it again; seconds until it listens and until it is registered in ZooKeeper (kcli registers
        before it recovers its logs and listens, so usually the second comes first)."""
        from kcli.processes import listening

        t0 = time.monotonic()
        broker = self.brokers[broker_id]
        broker.launch()
        out: dict[str, float] = {}

        def up() -> bool:
            if broker.proc.poll() is not None:
                raise RuntimeError(f"broker {broker_id} exited with {broker.proc.returncode} while starting:\n"
                                   f"{bb.tail(broker.log_path)}")
            if "registered_s" not in out and broker_id in self.live_ids():
                out["registered_s"] = time.monotonic() - t0
            if "serving_s" not in out and listening(broker.port, timeout=0.2):
                out["serving_s"] = time.monotonic() - t0
            return len(out) == 2
        wait_until(up, timeout, f"broker {broker_id} listening and registered again", 0.05)
        return out

    def dump_stacks(self) -> None:
        """SIGQUIT: every live broker logs its threads and asyncio tasks (after a failed wait)."""
        live = [b for b in self.brokers if b.alive]
        for b in live:
            b.proc.send_signal(signal.SIGQUIT)
        if live:
            time.sleep(2)

    def close(self) -> None:
        for b in self.brokers:  # throwaway cluster: no controlled shutdowns on the way out
            if b.proc is not None and b.proc.poll() is None:
                try:
                    b.proc.send_signal(signal.SIGCONT)
                    b.proc.kill()
                    b.proc.wait(30)
                except (ProcessLookupError, OSError):
                    pass

    # ZooKeeper reads
    def get_json(self, path: str):
        from kazoo.exceptions import NoNodeError

        try:
            data, _ = self.zk.get(self.chroot + path)
        except NoNodeError:
            return None
        return json.loads(data) if data else None

    def state(self, topic: str, partition: int) -> dict | None:
        return self.get_json(f"/brokers/topics/{topic}/partitions/{partition}/state")

    def states(self, tps) -> dict[tuple[str, int], dict | None]:
        """Many partition states at once: kazoo's async gets, pipelined on the one session."""
        from kazoo.exceptions import NoNodeError

        pending = [(tp, self.zk.get_async(f"{self.chroot}/brokers/topics/{tp[0]}/partitions/{tp[1]}/state"))
                   for tp in tps]
        out: dict = {}
        for tp, result in pending:
            try:
                data, _ = result.get(timeout=30)
                out[tp] = json.loads(data)
            except NoNodeError:
                out[tp] = None
        return out

    def controller_id(self) -> int | None:
        c = self.get_json("/controller")
        return None if c is None else int(c["brokerid"])

    def controller_epoch(self) -> int | None:
        from kazoo.exceptions import NoNodeError

        try:
            return int(self.zk.get(self.chroot + "/controller_epoch")[0])
        except NoNodeError:
            return None

    def live_ids(self) -> list[int]:
        from kazoo.exceptions import NoNodeError

        try:
            return sorted(int(b) for b in self.zk.get_children(self.chroot + "/brokers/ids"))
        except NoNodeError:
            return []

    # for bench_cluster.log_problems: every log of every (re)start
    def log_info(self, zookeeper_log: Path | None):
        logs = [SimpleNamespace(id=f"{b.id} ({self.name}, start {n})", log=path)
                for b in self.brokers for n, path in enumerate(b.logs, 1)]
        return SimpleNamespace(info=SimpleNamespace(brokers=logs, zookeeper_log=zookeeper_log or Path("/nonexistent")))


def full_isr(states: dict, rf: int = BROKERS) -> bool:
    return all(s is not None and s["leader"] >= 0 and len(s["isr"]) == rf for s in states.values())


def admin(bootstrap: str):
    """bench_cluster's admin client, without librdkafka's log lines (each refused connection to a killed broker)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "log_level": 2})


def create_topics(cluster: FailoverCluster, topics: dict[str, int | list[list[int]]], rf: int, timeout: float) -> None:
    """One CreateTopics request for all of them (a partition count, or explicit assignments); waits for its answer."""
    from confluent_kafka.admin import NewTopic

    new = [NewTopic(t, len(spec), replica_assignment=spec) if isinstance(spec, list) else
           NewTopic(t, num_partitions=spec, replication_factor=rf) for t, spec in topics.items()]
    import concurrent.futures

    client = admin(cluster.bootstrap)  # held until the answer: a collected client fails its futures (_DESTROY)
    futures = client.create_topics(new, operation_timeout=timeout, request_timeout=timeout)
    try:
        for f in futures.values():
            f.result(timeout)
    except concurrent.futures.TimeoutError:
        seen = {}
        for b in cluster.brokers:  # what each broker's Metadata says now (controller, brokers, topics)
            try:
                md = admin(b.bootstrap).list_topics(timeout=5)
                seen[b.id] = f"controller {md.controller_id}, brokers {sorted(md.brokers)}, {len(md.topics)} topics"
            except Exception as exc:
                seen[b.id] = repr(exc)
        raise Timeout(f"CreateTopics of {len(new)} topics: no answer within {timeout:.0f}s; ZooKeeper has "
                      f"{len(cluster.zk.get_children(cluster.chroot + '/brokers/topics'))} topics, controller "
                      f"{cluster.controller_id()}; Metadata now: {seen}") from None


def metadata_leaders(bootstrap: str, topics) -> dict[tuple[str, int], int]:
    md = admin(bootstrap).list_topics(timeout=10)
    return {(t, p.id): p.leader for t in topics if (tm := md.topics.get(t)) is not None and tm.error is None
            for p in tm.partitions.values()}


# -- phase 1: leader kills -----------------------------------------------------------------------------
class SteadyProducer:
    """An idempotent acks=all producer at a fixed rate in its own thread; values are the 10-digit sequence
    number padded to `size` bytes, partition = seq % partitions. Keeps produce() and delivery times."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: int, size: int,
                 extra: dict[str, str] | None = None) -> None:
        self.config = {"bootstrap.servers": bootstrap, "broker.address.family": "v4", "acks": "all",
                       "enable.idempotence": True, "linger.ms": 5, "compression.type": "none",
                       "message.timeout.ms": 300_000, "log_level": 2,  # no line per refused connection
                       **(extra or {})}
        self.topic, self.partitions, self.rate, self.size = topic, partitions, rate, size
        self.produced: list[float] = []  # seq -> produce() time (monotonic)
        self.acked: dict[int, tuple[float, int]] = {}  # seq -> (delivery time, offset)
        self.failed: dict[int, str] = {}
        self.client_errors: Counter = Counter()
        self.fatal: list[str] = []
        self.stop_event = threading.Event()
        self.left = None
        self.watch: tuple[float, int] | None = None  # (time, partition): note the first ack of a later record
        self.watch_hit: tuple[int, float, float] | None = None  # (seq, produce() time, delivery time)
        self.thread = threading.Thread(target=self._run, name="producer", daemon=True)

    def start(self) -> SteadyProducer:
        self.thread.start()
        return self

    def _run(self) -> None:
        from confluent_kafka import Producer

        def on_error(err) -> None:
            self.client_errors[err.name()] += 1
            if err.fatal():
                self.fatal.append(str(err))

        def on_delivery(err, msg) -> None:
            now = time.monotonic()
            seq = int(msg.value()[:10])
            if err is None:
                self.acked[seq] = (now, msg.offset())
                w = self.watch
                if w is not None and self.watch_hit is None and msg.partition() == w[1] and self.produced[seq] > w[0]:
                    self.watch_hit = (seq, self.produced[seq], now)  # callbacks come in delivery order
            else:
                self.failed[seq] = str(err)

        p = Producer({**self.config, "error_cb": on_error})
        pad = b"x" * (self.size - 10)
        start = time.monotonic()
        seq = 0
        while not self.stop_event.is_set():
            due = int((time.monotonic() - start) * self.rate)
            while seq < due:
                try:
                    p.produce(self.topic, b"%010d" % seq + pad, partition=seq % self.partitions,
                              on_delivery=on_delivery)
                except BufferError:
                    break
                self.produced.append(time.monotonic())
                seq += 1
            p.poll(0.002)
        self.left = p.flush(120)
        if self.left:
            p.purge()
            p.flush(1)

    def acking(self, within: float = 0.5) -> bool:
        """Some record was acknowledged in the last `within` seconds."""
        now = time.monotonic()
        n = len(self.produced)
        return any(now - self.acked[s][0] < within for s in range(max(0, n - 2 * self.rate), n) if s in self.acked)

    def watch_from(self, t: float, partition: int) -> None:
        """From now on, `watch_hit` is the first acknowledged record to `partition` whose produce() came after t."""
        self.watch_hit = None
        self.watch = (t, partition)

    def stop(self, timeout: float) -> None:
        self.stop_event.set()
        self.thread.join(timeout)


def read_back(bootstrap: str, topic: str, partitions: int, timeout: float) -> list[tuple[int, int, int]]:
    """Every record of the topic, (partition, offset, seq), from the start to the high watermark."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "group.id": "bench-read-back",
                  "enable.auto.commit": False, "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        high = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[tuple[int, int, int]] = []
        done = {p for p, h in high.items() if h == 0}
        deadline = time.monotonic() + timeout
        while len(done) < partitions and time.monotonic() < deadline:
            for msg in c.consume(num_messages=10_000, timeout=0.5):
                if msg.error() is None:
                    out.append((msg.partition(), msg.offset(), int(msg.value()[:10])))
                    if msg.offset() + 1 >= high[msg.partition()]:
                        done.add(msg.partition())
                elif msg.error().code() == KafkaError._PARTITION_EOF and msg.offset() >= high[msg.partition()]:
                    done.add(msg.partition())
        if len(done) < partitions:
            raise Timeout(f"read back {topic}: partitions {sorted(set(range(partitions)) - done)} not read to their "
                          f"high watermark {high} within {timeout:.0f}s")
        return out
    finally:
        c.close()


def leader_kills(zookeeper, zk, workdir: Path, args, session_ms: int) -> tuple[dict, FailoverCluster]:
    topic, n = "failover", args.kill_partitions
    rng = random.Random(13)
    cluster = FailoverCluster(zookeeper, zk, workdir / "kills", "kills", {
        "zookeeper.session.timeout.ms": str(session_ms), "min.insync.replicas": "2"})
    out: dict = {"topic": topic, "partitions": n, "rf": 3, "min_insync_replicas": 2, "rate": args.rate,
                 "value_bytes": args.value_bytes, "kills": []}
    producer = None
    try:
        cluster.start(args.phase_timeout)
        bc.new_topic(cluster, topic, 3, args.phase_timeout, partitions=n)
        tps = [(topic, p) for p in range(n)]
        producer = SteadyProducer(cluster.bootstrap, topic, n, args.rate, args.value_bytes,
                                  dict(kv.split("=", 1) for kv in args.producer_config)).start()
        out["producer_config"] = {k: v for k, v in producer.config.items() if k != "bootstrap.servers"}
        wait_until(producer.acking, 60, "the producer's first acknowledgements", 0.05)
        for i in range(args.kills):
            wait_until(lambda: full_isr(cluster.states(tps)), args.phase_timeout, "full ISRs before a kill", 0.1)
            wait_until(producer.acking, args.phase_timeout, "the producer acknowledging before a kill", 0.05)
            time.sleep(rng.uniform(0, 0.5))
            state = cluster.state(topic, 0)
            victim, epoch = int(state["leader"]), int(state["leader_epoch"])
            was_controller = cluster.controller_id() == victim
            survivors = admin(cluster.bootstrap_without(victim))  # Metadata from the live brokers
            survivors.list_topics(topic, timeout=10)
            killed_at = time.monotonic()
            producer.watch_from(killed_at, 0)
            cluster.brokers[victim].kill9()
            row: dict = {"victim": victim, "victim_was_controller": was_controller, "leader_epoch_before": epoch}
            try:
                deadline = killed_at + session_ms / 1000 + args.phase_timeout
                next_md = 0.0
                while "new_leader_zk_s" not in row or "new_leader_metadata_s" not in row:
                    if time.monotonic() > deadline:
                        raise Timeout(f"a new leader for {topic}-0: not in ZooKeeper and Metadata within "
                                      f"{deadline - killed_at:.0f}s")
                    if "new_leader_zk_s" not in row:
                        s = cluster.state(topic, 0)
                        if s and s["leader"] not in (victim, -1) and s["leader_epoch"] > epoch:
                            row["new_leader_zk_s"] = time.monotonic() - killed_at
                            row["new_leader"], row["leader_epoch_after"] = s["leader"], s["leader_epoch"]
                    if "new_leader_metadata_s" not in row and time.monotonic() >= next_md:
                        next_md = time.monotonic() + 0.05
                        try:
                            md = survivors.list_topics(topic, timeout=5).topics[topic].partitions[0]
                            if md.leader not in (victim, -1):
                                row["new_leader_metadata_s"] = time.monotonic() - killed_at
                        except Exception:  # a Metadata timeout: ask again
                            pass
                    time.sleep(0.01)
                first = wait_until(lambda: producer.watch_hit, args.phase_timeout,
                                   "an acknowledged record produced after the kill", 0.02)
                row["first_ack_s"] = first[2] - killed_at
                row["first_ack_produce_delay_s"] = first[1] - killed_at
                row["first_ack_record_latency_s"] = first[2] - first[1]
            finally:
                restart_at = time.monotonic()
                times = cluster.restart(victim, args.phase_timeout)
                row["restart_serving_s"], row["restart_registered_s"] = times["serving_s"], times["registered_s"]
            wait_until(lambda: full_isr(cluster.states(tps)), args.phase_timeout, "the restarted broker in every ISR",
                       0.05)
            row["back_in_isr_s"] = time.monotonic() - restart_at
            out["kills"].append(row)
            print(f"  kill {i + 1}/{args.kills}: broker {victim}{' (controller)' if was_controller else ''} -> "
                  f"leader {row['new_leader']} in ZooKeeper after {row['new_leader_zk_s']:.3f} s, in Metadata "
                  f"{row['new_leader_metadata_s']:.3f} s, first ack {row['first_ack_s']:.3f} s; restarted: listening "
                  f"after {row['restart_serving_s']:.1f} s, back in every ISR after {row['back_in_isr_s']:.1f} s",
                  flush=True)
        time.sleep(1)
        producer.stop(150)
        out["produced"], out["acked"] = len(producer.produced), len(producer.acked)
        out["delivery_failures"] = len(producer.failed)
        out["first_failures"] = list(producer.failed.items())[:5]
        out["undelivered_at_flush"] = producer.left
        out["client_errors"] = dict(producer.client_errors)
        out["fatal_errors"] = producer.fatal
        rows = read_back(cluster.bootstrap, topic, n, args.phase_timeout)
        counts = Counter(seq for _, _, seq in rows)
        where = {seq: (p, o) for p, o, seq in rows}
        out["read_back"] = len(rows)
        out["lost"] = sorted(s for s in producer.acked if s not in counts)
        out["duplicates"] = sorted(s for s, c in counts.items() if c > 1)
        out["moved"] = sorted(s for s, (_, o) in producer.acked.items()
                              if s in where and where[s] != (s % n, o))
        out["unacknowledged_but_written"] = sum(1 for s in counts if s not in producer.acked)
        for key in ("lost", "duplicates", "moved"):
            out[f"{key}_count"] = len(out[key])
            out[key] = out[key][:20]
        print(f"  read back: {len(rows):,} records; acknowledged {out['acked']:,} of {out['produced']:,} produced; "
              f"lost {out['lost_count']}, duplicates {out['duplicates_count']}, at another offset "
              f"{out['moved_count']}", flush=True)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        print(f"!! leader kills: {out['error']}", flush=True)
        cluster.dump_stacks()
    finally:
        if producer is not None and producer.thread.is_alive():
            producer.stop(30)
        cluster.close()
    summarise_kills(out)
    return out, cluster


def summarise_kills(out: dict) -> None:
    for r in out["kills"]:
        if r.get("first_ack_s") is not None:
            r["zk_leader_to_first_ack_s"] = r["first_ack_s"] - r["new_leader_zk_s"]
    for key in ("new_leader_zk_s", "new_leader_metadata_s", "first_ack_s", "zk_leader_to_first_ack_s",
                "restart_serving_s", "restart_registered_s", "back_in_isr_s"):
        for suffix, rows in (("", out["kills"]),
                             ("_controller_victim", [r for r in out["kills"] if r["victim_was_controller"]]),
                             ("_other_victim", [r for r in out["kills"] if not r["victim_was_controller"]])):
            vals = [r[key] for r in rows if r.get(key) is not None]
            if vals:
                out[key + suffix] = {"median": statistics.median(vals), "max": max(vals), "min": min(vals),
                                     "n": len(vals)}


# -- phase 2: controller failover ----------------------------------------------------------------------
def controller_failover(zookeeper, zk, workdir: Path, args, session_ms: int) -> tuple[dict, FailoverCluster]:
    total, rf = args.controller_partitions, args.controller_rf
    cluster = FailoverCluster(zookeeper, zk, workdir / "controller", "controller",
                              {"zookeeper.session.timeout.ms": str(session_ms)})
    topics = {f"ctl-{i:02d}": min(TOPICS_OF, total - i * TOPICS_OF) for i in range((total + TOPICS_OF - 1) // TOPICS_OF)}
    tps = [(t, p) for t, n in topics.items() for p in range(n)]
    out: dict = {"partitions": total, "rf": rf, "topics": len(topics)}
    try:
        cluster.start(args.phase_timeout)
        t0 = time.monotonic()
        create_topics(cluster, topics, rf, args.phase_timeout)
        out["create_request_s"] = time.monotonic() - t0
        wait_until(lambda: all(s is not None and s["leader"] >= 0 for s in cluster.states(tps).values()),
                   args.phase_timeout, f"leaders for {total} partitions in ZooKeeper", 0.1)
        out["all_led_zk_s"] = time.monotonic() - t0
        def all_led_in_metadata() -> bool:
            md = metadata_leaders(cluster.bootstrap, topics)
            return len(md) == total and all(v >= 0 for v in md.values())
        wait_until(all_led_in_metadata, args.phase_timeout, "leaders in Metadata", 0.2)
        out["all_led_metadata_s"] = time.monotonic() - t0
        wait_until(lambda: full_isr(cluster.states(tps), rf), args.phase_timeout, f"full ISRs for {total} partitions",
                   0.25)
        out["all_full_isr_s"] = time.monotonic() - t0
        print(f"  {total} partitions (RF {rf}) created: request {out['create_request_s']:.1f} s, all led in "
              f"ZooKeeper {out['all_led_zk_s']:.1f} s, in Metadata {out['all_led_metadata_s']:.1f} s, "
              f"full ISRs {out['all_full_isr_s']:.1f} s", flush=True)
        time.sleep(2)  # the last LeaderAndIsr/UpdateMetadata settle

        old, epoch = cluster.controller_id(), cluster.controller_epoch()
        states = cluster.states(tps)
        led = [tp for tp, s in states.items() if s["leader"] == old]
        out.update(controller=old, controller_epoch=epoch, led_by_controller=len(led),
                   leaders_before=dict(Counter(s["leader"] for s in states.values())))
        killed_at = time.monotonic()
        cluster.brokers[old].kill9()

        def new_controller():
            c = cluster.controller_id()
            e = cluster.controller_epoch()
            return (c, e) if c is not None and c != old and e is not None and e > epoch else None
        c, e = wait_until(new_controller, session_ms / 1000 + args.phase_timeout, "a new controller")
        out["new_controller_s"] = time.monotonic() - killed_at
        out["new_controller"], out["new_controller_epoch"] = c, e
        live = cluster.bootstrap_without(old)
        zk_done = md_done = None
        first_moved = None
        next_md = 0.0
        deadline = time.monotonic() + args.phase_timeout
        while (zk_done is None or md_done is None) and time.monotonic() < deadline:
            if zk_done is None:
                moved = [s is not None and s["leader"] not in (old, -1) for s in cluster.states(led).values()]
                if first_moved is None and any(moved):
                    first_moved = time.monotonic() - killed_at
                if all(moved):
                    zk_done = time.monotonic() - killed_at
            if md_done is None and time.monotonic() >= next_md:
                try:
                    md = metadata_leaders(live, topics)
                    if all(md.get(tp, -1) not in (old, -1) for tp in led):
                        md_done = time.monotonic() - killed_at
                except Exception:  # a Metadata timeout while the brokers are busy: ask again
                    pass
                next_md = time.monotonic() + 0.5
            time.sleep(0.1)
        out["first_reelected_zk_s"], out["all_reelected_zk_s"], out["all_reelected_metadata_s"] = \
            first_moved, zk_done, md_done
        after = cluster.states(tps)
        out["offline_after"] = sum(1 for s in after.values() if s["leader"] == -1)
        out["still_led_by_dead"] = sum(1 for s in after.values() if s["leader"] == old)
        print(f"  controller {old} killed: new controller {c} (epoch {epoch} -> {e}) after "
              f"{out['new_controller_s']:.2f} s; {len(led)} partitions it led: first re-elected after "
              f"{bb.fmt(first_moved, '.2f')} s, all in ZooKeeper after {bb.fmt(zk_done, '.2f')} s, in Metadata "
              f"after {bb.fmt(md_done, '.2f')} s", flush=True)
        if zk_done is None or md_done is None:
            raise Timeout(f"the dead controller's partitions were not all re-elected within {args.phase_timeout:.0f}s")
        restart_at = time.monotonic()
        times = cluster.restart(old, args.restart_timeout)
        out["restart_serving_s"], out["restart_registered_s"] = times["serving_s"], times["registered_s"]
        try:
            wait_until(lambda: full_isr(cluster.states(tps), rf), args.phase_timeout,
                       "the restarted broker in every ISR", 0.25)
            out["restarted_back_in_isr_s"] = time.monotonic() - restart_at
            print(f"  restarted broker {old}: registered after {times['registered_s']:.1f} s, listening after "
                  f"{times['serving_s']:.1f} s, back in every ISR after {out['restarted_back_in_isr_s']:.1f} s",
                  flush=True)
        except Timeout as exc:
            out["restarted_back_in_isr_s"] = None
            out["restart_note"] = str(exc)
            print(f"  restarted broker {old}: {exc}", flush=True)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        print(f"!! controller failover: {out['error']}", flush=True)
        cluster.dump_stacks()
    finally:
        cluster.close()
    return out, cluster


# -- phase 3: controlled shutdown ----------------------------------------------------------------------
def controlled_shutdown(zookeeper, zk, workdir: Path, args, session_ms: int) -> tuple[dict, FailoverCluster]:
    total = args.shutdown_partitions
    cluster = FailoverCluster(zookeeper, zk, workdir / "shutdown", "shutdown",
                              {"zookeeper.session.timeout.ms": str(session_ms)})
    topic = "drain"
    out: dict = {"partitions": total, "rf": 3, "topic": topic}
    try:
        cluster.start(args.phase_timeout)
        controller = cluster.controller_id()
        victim = (controller + 1) % BROKERS
        a, b = [x for x in range(BROKERS) if x != victim]
        assignment = [[victim, a, b] if p % 2 == 0 else [victim, b, a] for p in range(total)]
        tps = [(topic, p) for p in range(total)]
        t0 = time.monotonic()
        create_topics(cluster, {topic: assignment}, 3, args.phase_timeout)
        wait_until(lambda: full_isr(cluster.states(tps)), args.phase_timeout, f"full ISRs for {total} partitions", 0.25)
        out["created_full_isr_s"] = time.monotonic() - t0
        before = cluster.states(tps)
        out.update(victim=victim, controller=controller,
                   led_by_victim_before=sum(1 for s in before.values() if s["leader"] == victim))
        time.sleep(2)
        broker = cluster.brokers[victim]
        log_offset = len(broker.log_text())
        term_wall, term_at = time.time(), time.monotonic()
        broker.proc.send_signal(signal.SIGTERM)
        line_seen = exited = None
        deadline = term_at + args.phase_timeout
        while exited is None and time.monotonic() < deadline:
            if line_seen is None and "controlled shutdown succeeded" in broker.log_text()[log_offset:]:
                line_seen = time.monotonic() - term_at
            if broker.proc.poll() is not None:
                exited = time.monotonic() - term_at
            time.sleep(0.01)
        if exited is None:
            broker.proc.send_signal(signal.SIGQUIT)  # the broker logs its threads and tasks
            time.sleep(2)
            raise Timeout(f"broker {victim} did not exit within {args.phase_timeout:.0f}s of SIGTERM "
                          f"(its threads and tasks are in {broker.log_path})")
        out["exit_status"] = broker.proc.returncode
        out["sigterm_to_exit_s"] = exited
        out["sigterm_to_log_line_polled_s"] = line_seen
        text = broker.log_text()[log_offset:]
        match = next((m for m in map(SUCCEEDED.match, text.splitlines()) if m), None)
        if match:
            stamp = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            out["sigterm_to_log_line_s"] = stamp - term_wall
            out["logged_controlled_shutdown_s"] = float(match.group(2))
            out["logged_controller"], out["logged_attempt"] = int(match.group(3)), int(match.group(4))
        out["failed_attempts"] = [ln for ln in text.splitlines() if "controlled shutdown attempt" in ln][:5]
        out["unclean"] = "proceeding to an unclean shutdown" in text
        out["log_after_sigterm"] = [ln[:300] for ln in text.splitlines() if " kcli.broker.replica: " not in ln
                                    and "state changed to" not in ln][-40:]
        after = cluster.states(tps)
        out["led_by_victim_after"] = sum(1 for s in after.values() if s["leader"] == victim)
        out["offline_after"] = sum(1 for s in after.values() if s["leader"] == -1)
        out["isr_with_victim_after"] = sum(1 for s in after.values() if victim in s["isr"])
        out["leaders_after"] = dict(Counter(s["leader"] for s in after.values()))
        print(f"  SIGTERM to broker {victim} leading {out['led_by_victim_before']} partitions: "
              f"\"controlled shutdown succeeded in {bb.fmt(out.get('logged_controlled_shutdown_s'), '.2f')}s\" "
              f"{bb.fmt(out.get('sigterm_to_log_line_s'), '.2f')} s after SIGTERM, exit {out['exit_status']} after "
              f"{exited:.2f} s; partitions it still leads in ZooKeeper: {out['led_by_victim_after']}, ISRs naming it "
              f"{out['isr_with_victim_after']}", flush=True)
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        print(f"!! controlled shutdown: {out['error']}", flush=True)
        cluster.dump_stacks()
    finally:
        cluster.close()
    return out, cluster


# -- report --------------------------------------------------------------------------------------------
def log_findings(clusters: list[FailoverCluster], zookeeper_log: Path) -> dict:
    """bench_cluster's log scan over every broker log of every phase: errors/tracebacks apart from warnings."""
    found: dict = {}
    for i, cluster in enumerate(clusters):
        for name, hits in bc.log_problems(cluster.log_info(zookeeper_log if i == 0 else None), limit=10**9).items():
            errors = [ln for ln in hits["first"] if ERRORISH.search(ln)]
            warnings = [ln for ln in hits["first"] if not ERRORISH.search(ln)]
            found[name] = {"errors": len(errors), "warnings": len(warnings), "log_lines": hits["log_lines"],
                           "first_errors": errors[:10], "first_warnings": warnings[:5]}
    return found


def stat(d: dict | None, key: str) -> str:
    return "-" if not d else f"{d[key]:.2f}"


def print_table(report: dict) -> None:
    head = f"{'figure':<62}{'median':>10}{'max':>10}{'n':>6}"
    print("\n" + head + "\n" + "-" * len(head))
    k = report.get("kills") or {}
    if k:
        print(f"leader kills: {k['partitions']} partitions RF 3, min.insync.replicas=2, {k['rate']} rec/s of "
              f"{k['value_bytes']} B, idempotent acks=all")
        for key, name in (("new_leader_zk_s", "kill -9 leader -> new leader in ZooKeeper, s"),
                          ("new_leader_zk_s_other_victim", "  the same, victim not the controller, s"),
                          ("new_leader_zk_s_controller_victim", "  the same, victim also the controller, s"),
                          ("new_leader_metadata_s", "kill -9 leader -> new leader in live brokers' Metadata, s"),
                          ("first_ack_s", "kill -9 leader -> first ack of a record produced after it, s"),
                          ("zk_leader_to_first_ack_s", "  of which new leader in ZooKeeper -> that ack, s"),
                          ("restart_serving_s", "restart -> listening (log recovery included), s"),
                          ("restart_registered_s", "restart -> registered in ZooKeeper, s"),
                          ("back_in_isr_s", "restart -> back in every ISR, s")):
            d = k.get(key)
            print(f"  {name:<60}{stat(d, 'median'):>10}{stat(d, 'max'):>10}{(d or {}).get('n', 0):>6}")
        ctl = sum(1 for r in k["kills"] if r.get("victim_was_controller"))
        print(f"  ({ctl} of the {len(k['kills'])} killed leaders were also the controller)")
        print(f"  acknowledged {bb.fmt(k.get('acked'), ',d')} of {bb.fmt(k.get('produced'), ',d')} produced; read back "
              f"{bb.fmt(k.get('read_back'), ',d')}; lost {bb.fmt(k.get('lost_count'), 'd')}, duplicates "
              f"{bb.fmt(k.get('duplicates_count'), 'd')}, at another offset {bb.fmt(k.get('moved_count'), 'd')}; "
              f"delivery failures {bb.fmt(k.get('delivery_failures'), 'd')}, fatal producer errors "
              f"{len(k.get('fatal_errors') or [])}")
    c = report.get("controller") or {}
    if c:
        print(f"controller failover: {c['partitions']} partitions in {c['topics']} topics, RF {c['rf']}")
        for key, name in (("create_request_s", "CreateTopics request answered, s"),
                          ("all_led_zk_s", "create -> every partition led in ZooKeeper, s"),
                          ("all_led_metadata_s", "create -> every partition led in Metadata, s"),
                          ("all_full_isr_s", "create -> every ISR full, s"),
                          ("new_controller_s", "kill -9 controller -> new /controller, higher epoch, s"),
                          ("first_reelected_zk_s", "kill -9 controller -> first of its partitions re-led (ZK), s"),
                          ("all_reelected_zk_s", (f"kill -9 controller -> all {c.get('led_by_controller', '?')} it "
                                                  f"led re-led (ZK), s")),
                          ("all_reelected_metadata_s", "kill -9 controller -> same in live brokers' Metadata, s"),
                          ("restart_registered_s", "restart -> registered in ZooKeeper, s"),
                          ("restart_serving_s", "restart -> listening (log recovery included), s"),
                          ("restarted_back_in_isr_s", "restart -> back in every ISR, s")):
            print(f"  {name:<60}{bb.fmt(c.get(key), '.2f'):>10}")
    s = report.get("shutdown") or {}
    if s:
        print(f"controlled shutdown: broker {s.get('victim', '?')} leading {s.get('led_by_victim_before', '?')} of "
              f"{s['partitions']} partitions (RF 3), SIGTERM")
        for key, name in (("logged_controlled_shutdown_s", "broker logs: controlled shutdown succeeded in, s"),
                          ("sigterm_to_log_line_s", "SIGTERM -> that log line (its timestamp), s"),
                          ("sigterm_to_exit_s", "SIGTERM -> process exit, s")):
            print(f"  {name:<60}{bb.fmt(s.get(key), '.2f'):>10}")
        if s.get("sigterm_to_exit_s") is not None and s.get("sigterm_to_log_line_s") is not None:
            print(f"  {'  of which after that line (stopping, closing its logs), s':<60}"
                  f"{s['sigterm_to_exit_s'] - s['sigterm_to_log_line_s']:>10.2f}")
        print(f"  exit status {s.get('exit_status')}; partitions it leads afterwards (ZooKeeper): "
              f"{s.get('led_by_victim_after')}; offline {s.get('offline_after')}; ISRs still naming it "
              f"{s.get('isr_with_victim_after')}; failed attempts {len(s.get('failed_attempts') or [])}")
    for phase in ("kills", "controller", "shutdown"):
        if (report.get(phase) or {}).get("error"):
            print(f"!! {phase} phase FAILED: {report[phase]['error']}")
    cfg = report["config"]
    print(f"(zookeeper.session.timeout.ms={cfg['session_timeout_ms']}, ZooKeeper tickTime {cfg['tick_time_ms']} ms: "
          f"sessions {2 * cfg['tick_time_ms']}-{20 * cfg['tick_time_ms']} ms; {report['machine']['cpus']} CPUs shared "
          f"by 3 brokers, ZooKeeper and the client; load average at start {report['machine']['loadavg_start'][0]:.2f})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 kills, 100 controller partitions, 50 shutdown partitions")
    ap.add_argument("--kills", type=int, default=20, help="leader kill -9 rounds")
    ap.add_argument("--kill-partitions", type=int, default=3, help="partitions of the produced topic")
    ap.add_argument("--rate", type=int, default=1000, help="records/s the producer sends during the kills")
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--session-timeout-ms", type=int, default=6000, help="the brokers' zookeeper.session.timeout.ms")
    ap.add_argument("--tick-time-ms", type=int, help="ZooKeeper's tickTime (default: one that grants the session)")
    ap.add_argument("--producer-config", action="append", default=[], metavar="KEY=VALUE",
                    help="a librdkafka setting for the leader-kill producer (e.g. retry.backoff.max.ms=100)")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker configuration override for every broker of every phase")
    ap.add_argument("--controller-partitions", type=int, default=1000)
    ap.add_argument("--controller-rf", type=int, default=3, choices=(2, 3))
    ap.add_argument("--shutdown-partitions", type=int, default=500)
    ap.add_argument("--phase-timeout", type=float, default=300, help="seconds at most for one wait")
    ap.add_argument("--restart-timeout", type=float, default=900,
                    help="seconds at most for the controller phase's restarted broker to listen (log recovery)")
    ap.add_argument("--skip-kills", action="store_true")
    ap.add_argument("--skip-controller", action="store_true")
    ap.add_argument("--skip-shutdown", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs) afterwards")
    ap.add_argument("--json", type=Path, help="also write the JSON report here")
    args = ap.parse_args()
    if args.quick:
        args.kills, args.controller_partitions, args.shutdown_partitions = 3, 100, 50
    if args.value_bytes < 10:
        ap.error("--value-bytes: at least 10 (the sequence number)")
    session_ms = args.session_timeout_ms
    tick = args.tick_time_ms or max(-(-session_ms // 20), min(500, session_ms // 2))
    if not 2 * tick <= session_ms <= 20 * tick:
        ap.error(f"ZooKeeper grants sessions of 2 to 20 ticks: {session_ms} ms is outside {2 * tick}-{20 * tick} ms "
                 f"with --tick-time-ms {tick}")
    FailoverCluster.extra = dict(kv.split("=", 1) for kv in args.override)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: sys.exit(128 + signum))

    import confluent_kafka
    from kazoo.client import KazooClient

    from kcli.zk.server import ZooKeeperServer

    workdir = Path(tempfile.mkdtemp(prefix="kcli-bench-failover-"))
    report: dict = {
        "config": {"brokers": BROKERS, "session_timeout_ms": session_ms, "tick_time_ms": tick, "kills": args.kills,
                   "kill_partitions": args.kill_partitions, "rate": args.rate, "value_bytes": args.value_bytes,
                   "controller_partitions": args.controller_partitions, "controller_rf": args.controller_rf,
                   "shutdown_partitions": args.shutdown_partitions, "overrides": args.override,
                   "producer_config": args.producer_config},
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0], "loadavg_start": os.getloadavg()},
        "client": f"confluent-kafka {confluent_kafka.__version__} / librdkafka {confluent_kafka.libversion()[0]}",
        "ours_source": bb.source_version(), "quick": args.quick,
    }
    zookeeper = ZooKeeperServer(workdir / "zookeeper", tick_time_ms=tick)
    zk = None
    clusters: list[FailoverCluster] = []
    started = time.monotonic()
    try:
        print(f"workdir {workdir}; {report['client']}; kcli at {report['ours_source']}", flush=True)
        zookeeper.start()
        zk = KazooClient(hosts=zookeeper.connect, timeout=10)
        zk.start(timeout=30)
        print(f"ZooKeeper on {zookeeper.connect} (tickTime {tick} ms); zookeeper.session.timeout.ms={session_ms}",
              flush=True)
        phases = (("kills", args.skip_kills, leader_kills), ("controller", args.skip_controller, controller_failover),
                  ("shutdown", args.skip_shutdown, controlled_shutdown))
        for name, skip, run in phases:
            if skip:
                continue
            print(f"{name}:", flush=True)
            t0 = time.monotonic()
            result, cluster = run(zookeeper, zk, workdir, args, session_ms)
            clusters.append(cluster)
            result["phase_s"] = time.monotonic() - t0
            result["loadavg_end"] = os.getloadavg()
            report[name] = result
        report["elapsed_s"] = time.monotonic() - started
        report["log_findings"] = log_findings(clusters, zookeeper.log_path)
        print_table(report)
        print(f"(run took {report['elapsed_s']:.0f} s)")
        if any(f["errors"] for f in report["log_findings"].values()):
            print("\nERRORS AND TRACEBACKS IN THE BROKER/ZOOKEEPER LOGS:")
        else:
            print("\nno errors or tracebacks in the broker logs (nor errors in ZooKeeper's)")
        for name, f in report["log_findings"].items():
            print(f"  {name}: {f['errors']} error line(s), {f['warnings']} warning(s) of {f['log_lines']} lines")
            for line in f["first_errors"]:
                print(f"    {line[:300]}")
    finally:
        for cluster in clusters:
            cluster.close()
        if zk is not None:
            try:
                zk.stop()
                zk.close()
            except Exception:
                pass
        zookeeper.stop()
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return bb.finish_report(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
