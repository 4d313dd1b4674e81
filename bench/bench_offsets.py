"""`kctl offsets migrate` throughput: ZooKeeper-stored offsets of many groups into `kctl broker run`.

Starts a throwaway ZooKeeper (Debian's package) and a `kctl broker run` on free loopback ports, creates the
topics and a few records per partition, seeds ``/consumers/<group>/offsets/<topic>/<partition>`` for
--groups x --topics x --partitions group-partitions with pipelined kazoo transactions, then times the
migration as the CLI runs it (kcli.tools.offsets: plan with async ZooKeeper reads, OffsetFetch, ListOffsets
and DescribeGroups; backup; one OffsetCommit per group; OffsetFetch verification) and a re-run, which must
plan every group unchanged. Prints group-partitions/s; --json writes the figures.

    .venv/bin/python bench/bench_offsets.py                       # 1000 groups x 2 topics x 50 = 100k
    .venv/bin/python bench/bench_offsets.py --groups 200 --json out.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from broker_support import BrokerProcess, free_port  # noqa: E402
from zookeeper_support import ZooKeeperServer  # noqa: E402


def seed(connect: str, groups: int, topics: list[str], partitions: int, end: int) -> dict[str, dict]:
    """Kafka's layout for the old consumers, created with multi-op transactions, many in flight."""
    from kazoo.client import KazooClient

    rng = random.Random(5)
    client = KazooClient(hosts=connect, timeout=30)
    client.start(timeout=30)
    expected: dict[str, dict] = {}
    try:
        client.ensure_path("/kafka/consumers")
        for topic in topics:
            client.create(f"/kafka/brokers/topics/{topic}", json.dumps({"version": 1, "partitions": {
                str(p): [0] for p in range(partitions)}}).encode(), makepath=True)
        pending = []
        for g in range(groups):
            group = f"group-{g:05d}"
            txn = client.transaction()
            base = f"/kafka/consumers/{group}"
            txn.create(base)
            txn.create(f"{base}/ids")
            txn.create(f"{base}/owners")
            txn.create(f"{base}/offsets")
            offsets = expected[group] = {}
            for topic in topics:
                txn.create(f"{base}/offsets/{topic}")
                for p in range(partitions):
                    offset = rng.randint(0, end)
                    offsets[(topic, p)] = offset
                    txn.create(f"{base}/offsets/{topic}/{p}", str(offset).encode())
            pending.append(txn.commit_async())
            if len(pending) >= 64:
                for result in pending:
                    result.get(timeout=60)
                pending.clear()
        for result in pending:
            result.get(timeout=60)
    finally:
        client.stop()
        client.close()
    return expected


def produce(bootstrap: str, topics: list[str], partitions: int, records: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in topics]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for topic in topics:
        for p in range(partitions):
            for i in range(records):
                producer.produce(topic, value=b"x", partition=p)
    assert producer.flush(60) == 0


def migrate(zk_connect: str, bootstrap: str, backup: Path) -> tuple[object, dict[str, float]]:
    from kcli.client import KafkaClient, KafkaOffsetStore
    from kcli.tools.offsets import apply_plan, plan_transfer
    from kcli.zk.offsets import ZkOffsetStore

    times = {}
    started = time.perf_counter()
    with ZkOffsetStore(zk_connect, timeout=30) as zk:
        kafka = KafkaOffsetStore(KafkaClient(bootstrap, timeout=30))
        try:
            plan = plan_transfer(zk, kafka, kafka, live_checks=[zk, kafka])
            times["plan_s"] = time.perf_counter() - started
            applied = time.perf_counter()
            result = apply_plan(plan, kafka, backup=backup)
            times["apply_and_verify_s"] = time.perf_counter() - applied
        finally:
            kafka.close()
    times["total_s"] = time.perf_counter() - started
    return result, times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--topics", type=int, default=2)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--records", type=int, default=10, help="records per partition (the log end offset)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    topics = [f"events-{t}" for t in range(args.topics)]
    total = args.groups * args.topics * args.partitions

    with tempfile.TemporaryDirectory(prefix="kctl-bench-offsets-") as tmp:
        work = Path(tmp)
        server = ZooKeeperServer(work / "zk")
        broker = BrokerProcess(free_port(), work / "kafka-logs", ["group.initial.rebalance.delay.ms=0",
                                                                  "auto.create.topics.enable=false"])
        server.start()
        broker.start()
        try:
            produce(broker.bootstrap, topics, args.partitions, args.records)
            started = time.perf_counter()
            seed(server.connect, args.groups, topics, args.partitions, args.records)
            seed_s = time.perf_counter() - started
            print(f"seeded {total:,} offset znodes in {args.groups:,} groups in {seed_s:.1f}s "
                  f"({total / seed_s:,.0f} znodes/s)")
            result, times = migrate(server.connect + "/kafka", broker.bootstrap, work / "backup.csv")
            assert result.ok, result.to_json()
            assert result.partitions_written == total or not result.plan.summary()["partitions_to_write"] == total
            rate = total / times["total_s"]
            print(f"migrated {result.partitions_written:,} group-partitions ({len(result.committed):,} groups) in "
                  f"{times['total_s']:.1f}s: plan {times['plan_s']:.1f}s, commit+verify "
                  f"{times['apply_and_verify_s']:.1f}s -> {rate:,.0f} group-partitions/s")
            again, again_times = migrate(server.connect + "/kafka", broker.bootstrap, work / "again.csv")
            assert again.ok and not again.committed and again.plan.count("unchanged") == args.groups
            print(f"re-run (no-op, every group unchanged): {again_times['total_s']:.1f}s "
                  f"({total / again_times['total_s']:,.0f} group-partitions/s)")
            figures = {"group_partitions": total, "groups": args.groups, "seed_s": round(seed_s, 2),
                       **{k: round(v, 2) for k, v in times.items()}, "group_partitions_per_s": round(rate),
                       "rerun_s": round(again_times["total_s"], 2)}
            print(json.dumps(figures))
            if args.json:
                args.json.write_text(json.dumps(figures, indent=1) + "\n")
        finally:
            broker.stop()
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
