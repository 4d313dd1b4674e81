"""A consume-transform-produce worker for the exactly-once tests, run as its own process so a test can
SIGKILL or SIGSTOP it in the middle of a transaction.

    python tests/txn_worker.py BOOTSTRAP TRANSACTIONAL_ID GROUP IN_TOPIC OUT_TOPIC PARTITIONS OPEN_AFTER

It reads IN_TOPIC from the group's committed offsets (read_committed, assign(): no rebalance waits on a
stopped instance), and per batch, in one transaction, writes ``out-<value>`` to the same partition of
OUT_TOPIC and commits the offsets with send_offsets_to_transaction. After OPEN_AFTER committed transactions
(-1: never) it leaves the next one open (records written, offsets sent), prints ``OPEN`` and waits for a
line on its standard input (or its end), then tries to commit. It prints ``COMMITTED n`` after each commit, ``DONE`` and
exits 0 after 2 s without input, and prints ``FENCED`` and exits 3 when a newer instance fenced it.
"""

from __future__ import annotations

import sys
import time


def main(argv: list[str]) -> int:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    bootstrap, txn_id, group, in_topic, out_topic, partitions, open_after = argv
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5})
    producer.init_transactions(60)
    tps = [TopicPartition(in_topic, p) for p in range(int(partitions))]
    committed = consumer.committed(tps, 60)
    consumer.assign([TopicPartition(in_topic, tp.partition, tp.offset if tp.offset >= 0 else -2)
                     for tp in committed])
    count, idle_since = 0, time.monotonic()
    while True:
        messages = [m for m in consumer.consume(20, 0.3) if m.error() is None]
        if not messages:
            if time.monotonic() - idle_since > 2:
                print("DONE", flush=True)
                consumer.close()
                return 0
            continue
        idle_since = time.monotonic()
        try:
            producer.begin_transaction()
            for m in messages:
                producer.produce(out_topic, value=b"out-" + m.value(), partition=m.partition())
            positions = consumer.position([TopicPartition(in_topic, p.partition) for p in tps])
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
            if count == int(open_after):
                producer.flush(60)
                print("OPEN", flush=True)
                sys.stdin.readline()  # killed or stopped here; told to go on, it tries to commit
            producer.commit_transaction(60)
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal() or error.name() in ("PRODUCER_FENCED", "_FENCED", "INVALID_PRODUCER_EPOCH"):
                print(f"FENCED {error.name()}", flush=True)
                return 3
            raise
        count += 1
        print(f"COMMITTED {count}", flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
