"""Real clients against client quotas (issue 26): producers paced at a target rate and consumers reading as fast as
they are let, each in a thread, recording (time, bytes) as records are acknowledged or received and the largest
throttle_time_ms its client library reported. Shared by the broker-process and the cluster quota tests."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

VALUE = b"q" * 4096


@dataclass
class Flow:
    """What one client achieved: acknowledged (producers) or received (consumers) value bytes over time."""

    name: str
    events: list[tuple[float, int]] = field(default_factory=list)
    max_throttle_ms: float = 0.0
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, size: int) -> None:
        with self.lock:
            self.events.append((time.monotonic(), size))

    def throttled(self, ms: float) -> None:
        self.max_throttle_ms = max(self.max_throttle_ms, ms)

    def rate(self, start: float, end: float) -> float:
        """Bytes per second between two monotonic times."""
        with self.lock:
            return sum(n for t, n in self.events if start <= t < end) / (end - start)

    def total(self) -> int:
        with self.lock:
            return sum(n for _, n in self.events)


def _kafka_python_throttle(metrics: dict) -> float:
    """kafka-python keeps throttle-time-max per connection in its metrics (KIP-219 client side)."""
    found = [v for group in metrics.values() for k, v in group.items() if k == "throttle-time-max"]
    return max([v for v in found if isinstance(v, (int, float)) and v == v] or [0.0])


def paced_producer(library: str, bootstrap: str, topic: str, client_id: str, rate: float, stop: threading.Event,
                   flow: Flow) -> None:
    """Send VALUE-sized records at ``rate`` bytes/s until ``stop``; acknowledged bytes go into ``flow``."""
    interval = len(VALUE) / rate
    if library == "confluent":
        from confluent_kafka import Producer

        # 16 KiB batches (kafka-python's default): a throttled client's overshoot is about one request per
        # throttle, so smaller requests keep the achieved rate closer to the quota
        producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                             "batch.size": 16384, "acks": 1,
                             "throttle_cb": lambda event: flow.throttled(event.throttle_time * 1000)})

        def delivered(err, msg):
            if err is None:
                flow.add(len(msg.value()))
            elif not stop.is_set():
                flow.errors.append(str(err))

        next_at = time.monotonic()
        while not stop.is_set():
            producer.produce(topic, VALUE, on_delivery=delivered)
            producer.poll(0)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                stop.wait(delay)
        producer.flush(1)  # what is still queued is not counted: the measurement is over
        return
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5, batch_size=16384, acks=1)

    def on_error(exc):
        if not stop.is_set():  # the backlog dropped at the end is not an error of the measurement
            flow.errors.append(repr(exc))

    next_at = time.monotonic()
    last_metrics = 0.0
    while not stop.is_set():
        future = producer.send(topic, VALUE)
        future.add_callback(lambda _meta: flow.add(len(VALUE)))
        future.add_errback(on_error)
        next_at += interval
        if time.monotonic() - last_metrics > 1:
            last_metrics = time.monotonic()
            flow.throttled(_kafka_python_throttle(producer.metrics()))
        delay = next_at - time.monotonic()
        if delay > 0:
            stop.wait(delay)
    flow.throttled(_kafka_python_throttle(producer.metrics()))
    try:
        producer.close(timeout=1)  # what is still queued is not counted: the measurement is over
    except Exception:  # noqa: BLE001 - kafka-python's close flushes first, and raises when the backlog stays
        producer._sender.force_close()  # drop the backlog (close would be retried, and raise, on collection)
        producer._closed = True


def greedy_consumer(library: str, bootstrap: str, topic: str, client_id: str, stop: threading.Event,
                    flow: Flow, partition_fetch_bytes: int = 256 * 1024) -> None:
    """Read ``topic`` from the beginning (no group) as fast as the broker lets; received bytes go into ``flow``."""
    if library == "confluent":
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": client_id,
                             "enable.auto.commit": False, "max.partition.fetch.bytes": partition_fetch_bytes,
                             "throttle_cb": lambda event: flow.throttled(event.throttle_time * 1000)})
        consumer.assign([TopicPartition(topic, 0, 0)])
        try:
            while not stop.is_set():
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    flow.add(len(msg.value()))
        finally:
            consumer.close()
        return
    from kafka import KafkaConsumer, TopicPartition as KTopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, enable_auto_commit=False,
                             max_partition_fetch_bytes=partition_fetch_bytes,
                             fetch_max_bytes=4 * partition_fetch_bytes)
    tp = KTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    last_metrics = 0.0
    try:
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=200).values():
                for record in records:
                    flow.add(len(record.value))
            if time.monotonic() - last_metrics > 1:
                last_metrics = time.monotonic()
                flow.throttled(_kafka_python_throttle(consumer.metrics()))
    finally:
        flow.throttled(_kafka_python_throttle(consumer.metrics()))
        consumer.close()


def run_flows(workers: list[tuple], seconds: float) -> float:
    """Start every worker (function, args...) in a thread with a shared stop event appended after the args but
    before the flow; stop them after ``seconds``. Answers the monotonic start time."""
    stop = threading.Event()
    threads = []
    started = time.monotonic()
    for function, *args in workers:
        flow = args[-1]
        thread = threading.Thread(target=function, args=(*args[:-1], stop, flow), daemon=True)
        thread.start()
        threads.append(thread)
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(30)
    return started
