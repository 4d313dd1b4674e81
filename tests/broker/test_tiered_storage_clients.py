"""Tiered storage with real clients against a real `kctl broker run` (KIP-405): a topic with small segments and
``local.retention.bytes`` of two segments gets 50 segments from a confluent-kafka producer; the local dir keeps
only the tail, and a confluent-kafka consumer and kcat from offset 0 read every record once and in order, the
remote part from the object store. The broker killed -9 while it uploads and restarted loses nothing and shows
no half segment."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from broker_support import kcat
from kcli.records.remote_log_metadata import REMOTE_LOG_METADATA_TOPIC

pytestmark = pytest.mark.broker_process

SEGMENT = 16 * 1024
VALUE_SIZE = 700
RECORDS = 1100  # ~50 segments of 16 KiB


def store_overrides(url: str, *options: str) -> list[str]:
    return ["remote.log.storage.system.enable=true", f"rsm.config.url={url}", *options,
            "remote.log.manager.task.interval.ms=100", "log.retention.check.interval.ms=100",
            "rlmm.config.remote.log.metadata.topic.num.partitions=2"]


def create_tiered_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={
        "remote.storage.enable": "true", "segment.bytes": str(SEGMENT),
        "local.retention.bytes": str(2 * SEGMENT), "file.delete.delay.ms": "0"})])
    futures[topic].result(30)


def produce(bootstrap: str, topic: str, start: int, count: int, *, stop_at: int | None = None) -> int:
    """Records ``start``.. with key and value prefix the offset; with ``stop_at``, stop there (the caller kills
    the broker) without waiting for the rest. Returns the number left undelivered."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "batch.size": 4000, "linger.ms": 1, "acks": "all",
                         "enable.idempotence": True, "log_level": 0})
    for i in range(start, start + count):
        if stop_at is not None and i == stop_at:
            producer.flush(1)  # some in flight, as the broker is killed
            return len(producer)
        producer.produce(topic, key=str(i).encode(), value=f"{i:08d}".encode() + b"x" * (VALUE_SIZE - 8), partition=0)
        if i % 100 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return 0


def consume_from_zero(bootstrap: str, topic: str, expected: int, timestamps: list[int] | None = None) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False,
                         "max.partition.fetch.bytes": 50_000,
                         "log_level": 0})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            assert int(msg.key()) == msg.offset()
            assert msg.value()[:8] == f"{msg.offset():08d}".encode()
            seen.append(msg.offset())
            if timestamps is not None:
                timestamps.append(msg.timestamp()[1])
    finally:
        consumer.close()
    return seen


def local_segments(log_dir: Path, topic: str) -> list[Path]:
    return sorted((log_dir / f"{topic}-0").glob("*.log"))


def wait_until(condition, timeout: float, what: str, broker=None) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}" + (f"\n{broker.log()[-4000:]}" if broker else ""))
        time.sleep(0.1)


def test_tiered_topic_with_real_clients_and_a_kill(make_broker, tmp_path):
    store = tmp_path / "remote"
    log_dir = tmp_path / "kafka-logs"
    overrides = store_overrides(store.as_uri())
    broker = make_broker(*overrides, log_dir=log_dir)
    topic = "tiered-clients"
    create_tiered_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, 0, RECORDS // 2)
    # the broker uploads every 100 ms as segments roll: a kill -9 while records stream in lands between (or
    # inside) copies; what was not acknowledged is produced again below
    produce(broker.bootstrap, topic, RECORDS // 2, RECORDS // 2, stop_at=RECORDS * 3 // 4)
    broker.stop(9)
    port = broker.port
    broker = make_broker(*overrides, log_dir=log_dir, port=port)
    # what the restarted broker has, then the rest again, so offsets and keys agree
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe", "log_level": 0})
    _, end = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    probe.close()
    produce(broker.bootstrap, topic, end, RECORDS - end)
    remote_logs = lambda: [p for p in store.rglob("*.log") if p.parent.name.startswith(f"{topic}-0-")]  # noqa: E731
    wait_until(lambda: len(local_segments(log_dir, topic)) <= 4 and len(remote_logs()) >= 40, 90,
               "local tail only, the rest remote", broker)
    # every record once and in order from offset 0: the remote part from the store, then the local tail
    timestamps: list[int] = []
    assert consume_from_zero(broker.bootstrap, topic, RECORDS, timestamps) == list(range(RECORDS))
    # ListOffsets by time into the remote part: the first offset at or after a remote record's timestamp
    from confluent_kafka import Consumer, TopicPartition

    wanted = timestamps[100]
    lookup = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "times", "log_level": 0})
    [found] = lookup.offsets_for_times([TopicPartition(topic, 0, wanted)], timeout=30)
    lookup.close()
    assert timestamps[found.offset] >= wanted and (found.offset == 0 or timestamps[found.offset - 1] < wanted)
    if shutil.which("kcat"):
        out = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o\n")
        assert out.returncode == 0, out.stderr
        assert [int(x) for x in out.stdout.split()] == list(range(RECORDS))
    # no half segment: every remote .log is whole (its size is its batches'), and none beyond the copies the
    # metadata finished
    from kcli.records import BatchReader

    for path in remote_logs():
        raw = path.read_bytes()
        reader = BatchReader(raw)
        batches = list(reader)
        assert batches and reader.valid_bytes == len(raw), path
    assert (log_dir / f"{REMOTE_LOG_METADATA_TOPIC}-0").exists() or (log_dir / f"{REMOTE_LOG_METADATA_TOPIC}-1").exists()


def test_tiered_topic_on_s3(make_broker, tmp_path, s3_store):
    """The same on S3 (SeaweedFS's gateway through s3fs): the local dir keeps the tail, the bucket holds the rest
    by topic, partition and offset, and a consumer from offset 0 reads every record once and in order."""
    bucket = s3_store.new_bucket()
    log_dir = tmp_path / "kafka-logs"
    overrides = [o for o in store_overrides("") if not o.startswith("rsm.config.url=")]
    broker = make_broker(*overrides, *s3_store.rsm_overrides(bucket), log_dir=log_dir)
    topic = "tiered-s3"
    records = 500
    create_tiered_topic(broker.bootstrap, topic)
    produce(broker.bootstrap, topic, 0, records)
    fs = s3_store.filesystem()

    def remote_logs() -> list[str]:
        fs.invalidate_cache()
        dirs = [d for d in fs.ls(f"{bucket}/tiered", detail=False) if d.rsplit("/", 1)[-1].startswith(f"{topic}-0-")]
        return [k for d in dirs for k in fs.ls(d, detail=False) if k.endswith(".log")] if dirs else []

    wait_until(lambda: len(local_segments(log_dir, topic)) <= 4 and len(remote_logs()) >= 15, 90,
               "local tail only, the rest in the bucket", broker)
    first = sorted(remote_logs())[0]
    assert first.rsplit("/", 1)[-1].startswith("00000000000000000000-")
    assert consume_from_zero(broker.bootstrap, topic, records) == list(range(records))
