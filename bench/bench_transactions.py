#!/usr/bin/env python3
"""Transactions (KIP-98) on `kctl broker run`: committed transactions per second and transactional produce
throughput against idempotent produce, with confluent-kafka (librdkafka) as the client.

In one run, against one broker on a free loopback port with a temporary log dir and the default config
(transaction.state.log.num.partitions 50, created on the first FindCoordinator, outside the timings):

* committed transactions/s with 10 records of 100 bytes each, and with 1,000 each: begin_transaction(),
  produce(), commit_transaction() in a loop for --seconds (each commit waits for the coordinator's
  PrepareCommit write; the markers and CompleteCommit follow in the broker);
* transactional produce throughput: --records records of 100 bytes in transactions of 1,000, against the same
  records from an idempotent producer (enable.idempotence=true, no transaction) into a topic of its own;
  the ratio is transactional / idempotent records/s of the same run.

Producers use bench_broker.py's settings (linger.ms=5, no compression, acks=all as idempotence requires).
Each case runs --repeat times, interleaved, medians reported; the broker's CPU (from /proc) over each phase is
shown as a share of wall time. Everything is on 127.0.0.1; the broker and temp dir are removed on exit.

Usage: bench/bench_transactions.py [--seconds 8] [--records 200000] [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_broker as bb  # noqa: E402  (the helpers: processes, topics, producer settings, CPU)

VALUE = 100


def _producer(bootstrap: str, **extra):
    from confluent_kafka import Producer

    config = bb.producer_config(bootstrap, linger_ms=5, acks="all")
    config.update({"enable.idempotence": True, **extra})
    return Producer(config)


def transactions_per_second(peer: bb.Ours, topic: str, records: int, seconds: float, txn_id: str) -> dict:
    """Committed transactions of ``records`` records each, as many as fit in ``seconds``."""
    producer = _producer(peer.bootstrap, **{"transactional.id": txn_id})
    producer.init_transactions(60)
    value = os.urandom(VALUE)
    producer.begin_transaction()  # warm-up: connections, AddPartitionsToTxn path
    producer.produce(topic, value, partition=0)
    producer.commit_transaction(60)
    cpu0, done = peer.cpu_seconds(), 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        producer.begin_transaction()
        for _ in range(records):
            while True:
                try:
                    producer.produce(topic, value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.005)
        producer.commit_transaction(60)
        done += 1
    elapsed = time.perf_counter() - start
    cpu = (peer.cpu_seconds() or 0) - (cpu0 or 0)
    return {"transactions": done, "records_per_txn": records, "seconds": elapsed, "txn_per_s": done / elapsed,
            "records_per_s": done * records / elapsed, "broker_cpu_pct": 100 * cpu / elapsed}


def throughput(peer: bb.Ours, topic: str, count: int, txn_id: str | None, per_txn: int = 1000) -> dict:
    """``count`` records of 100 bytes, in transactions of ``per_txn`` (``txn_id``) or idempotent (None)."""
    producer = _producer(peer.bootstrap, **({"transactional.id": txn_id} if txn_id else {}))
    value = os.urandom(VALUE)
    if txn_id:
        producer.init_transactions(60)
        producer.begin_transaction()
    producer.produce(topic, value, partition=0)  # warm-up
    producer.commit_transaction(60) if txn_id else producer.flush(60)
    cpu0 = peer.cpu_seconds()
    start = time.perf_counter()
    sent = 0
    while sent < count:
        if txn_id:
            producer.begin_transaction()
        for _ in range(min(per_txn, count - sent)):
            while True:
                try:
                    producer.produce(topic, value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.005)
            sent += 1
            if sent % 1000 == 0:
                producer.poll(0)
        if txn_id:
            producer.commit_transaction(60)
    if producer.flush(120) != 0:
        raise RuntimeError("records left undelivered")
    elapsed = time.perf_counter() - start
    cpu = (peer.cpu_seconds() or 0) - (cpu0 or 0)
    return {"records": count, "seconds": elapsed, "records_per_s": count / elapsed,
            "mb_per_s": count * VALUE / elapsed / bb.MB, "broker_cpu_pct": 100 * cpu / elapsed}


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="length of each transactions/s phase")
    parser.add_argument("--records", type=int, default=200_000, help="records of each throughput phase")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write every run here as JSON")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="kctl-bench-txn-") as tmp:
        peer = bb.Ours(Path(tmp))
        peer.start()
        try:
            for topic in ("txn-small", "txn-large", "txn-tput", "idem-tput"):
                bb.create_topic(peer.bootstrap, topic, 60)
            from confluent_kafka import Producer

            probe = Producer({"bootstrap.servers": peer.bootstrap, "transactional.id": "bench-probe"})
            probe.init_transactions(60)  # creates __transaction_state outside the timings
            report: dict = {"source": bb.source_version(), "runs": {"small": [], "large": [], "txn": [], "idem": []}}
            for i in range(args.repeat):
                runs = report["runs"]
                runs["small"].append(transactions_per_second(peer, "txn-small", 10, args.seconds, f"bench-s-{i}"))
                runs["large"].append(transactions_per_second(peer, "txn-large", 1000, args.seconds, f"bench-l-{i}"))
                pair = [("idem", None), ("txn", f"bench-t-{i}")]
                for name, txn_id in (pair if i % 2 == 0 else pair[::-1]):
                    topic = "txn-tput" if txn_id else "idem-tput"
                    runs[name].append(throughput(peer, topic, args.records, txn_id))
        finally:
            peer.stop()
        bad = [line for line in peer.log_path.read_text().splitlines()
               if "Traceback" in line or "ERROR" in line or "internal error" in line]
    runs = report["runs"]
    report["median"] = {
        "txn_per_s_10": median(runs["small"], "txn_per_s"),
        "txn_per_s_1000": median(runs["large"], "txn_per_s"),
        "records_per_s_in_txns_of_1000": median(runs["large"], "records_per_s"),
        "transactional_records_per_s": median(runs["txn"], "records_per_s"),
        "idempotent_records_per_s": median(runs["idem"], "records_per_s"),
    }
    m = report["median"]
    m["transactional_over_idempotent"] = m["transactional_records_per_s"] / m["idempotent_records_per_s"]
    print(f"source {report['source']}, {args.repeat} runs, medians")
    print(f"{'figure':<52} {'value':>12} {'broker CPU':>11}")
    rows = [
        ("committed transactions/s, 10 records each", m["txn_per_s_10"], median(runs["small"], "broker_cpu_pct")),
        ("committed transactions/s, 1,000 records each", m["txn_per_s_1000"], median(runs["large"], "broker_cpu_pct")),
        ("  records/s in transactions of 1,000 (--seconds)", m["records_per_s_in_txns_of_1000"], None),
        (f"transactional produce, records/s ({args.records:,} x 100 B)", m["transactional_records_per_s"],
         median(runs["txn"], "broker_cpu_pct")),
        (f"idempotent produce, records/s ({args.records:,} x 100 B)", m["idempotent_records_per_s"],
         median(runs["idem"], "broker_cpu_pct")),
        ("transactional / idempotent", m["transactional_over_idempotent"], None),
    ]
    for label, value, cpu in rows:
        shown = f"{value:.2f}x" if label.startswith("transactional /") else f"{value:,.0f}" if value > 100 else f"{value:.1f}"
        print(f"{label:<52} {shown:>12} {'' if cpu is None else f'{cpu:.0f}%':>11}")
    if bad:
        print("broker log:\n" + "\n".join(bad[:20]))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
