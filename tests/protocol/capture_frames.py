"""Capture the request frames real Kafka clients send, for tests/protocol/test_captured_frames.py.

A recording TCP proxy on loopback sits in front of a `kctl broker run` subprocess whose
advertised.listeners is the proxy, so every connection a client opens (bootstrap, then the
broker it learns from Metadata) passes through it. The proxy relays bytes both ways untouched
and cuts the client-to-broker stream into frames at the size prefixes.

Clients and what they do (each client's frames go to its own file):
  librdkafka 2.16 (confluent-kafka): AdminClient list_topics, create/describe/partitions/delete topics,
      groups list/describe/offsets/delete; idempotent zstd Producer; acks=0 and acks=1 Producers;
      group Consumer (subscribe, poll, commit, seek with a leader epoch, committed, offsets_for_times, watermarks,
      close).
  kcat, Debian's librdkafka 2.0.2: -L, -P, -C -e, -G (a balanced consumer group).
  kafka-python 3.0: KafkaProducer, group KafkaConsumer (commit), KafkaAdminClient; then pinned to 0.8.1-0.10.1
      (Produce v0-v2, Fetch v0-v3, ListOffsets v0, OffsetCommit v0-v1, OffsetFetch v0-v1).
  aiokafka: AIOKafkaProducer, group AIOKafkaConsumer (commit), AIOKafkaAdminClient.
Kafka's own Java client is not on this machine (no Maven access), so no frames of it are captured.

Frames are stored compactly: one per (api key, version, bytes after the body), plus each distinct
Metadata topics shape (null / empty / named), base64 in tests/data/client_frames/<client>.json.

Re-capture (starts its own broker on free ports; about a minute):
    PYTHONPATH=. python tests/protocol/capture_frames.py [client ...]
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from broker_support import BrokerProcess, free_port, old_kafka_python_workload, seek_with_leader_epoch  # noqa: E402

from kcli.protocol import ApiKey, ProtocolError, api_name, decode_request  # noqa: E402

DATA = TESTS / "data" / "client_frames"


class RecordingProxy:
    """Loopback TCP proxy: relays both directions, records complete client-to-broker frames."""

    def __init__(self, upstream: tuple[str, int], port: int) -> None:
        self.upstream = upstream
        self.port = port
        self.frames: list[bytes] = []
        self.label = ""
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", port))
        self._closing = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def take(self) -> list[bytes]:
        with self._lock:
            frames, self.frames = self.frames, []
        return frames

    def close(self) -> None:
        self._closing = True
        self._listener.close()
        for sock in self._sockets:
            try:
                sock.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, record: bool) -> None:
        buffer = bytearray()
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if record:
                    buffer += data
                    while len(buffer) >= 4:
                        (size,) = struct.unpack_from(">i", buffer)
                        if len(buffer) < 4 + size:
                            break
                        with self._lock:
                            self.frames.append(bytes(buffer[4:4 + size]))
                        del buffer[:4 + size]
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _topics_shape(frame: bytes) -> str:
    try:
        request = decode_request(frame)
    except ProtocolError:
        return ""
    if request.api_key is not ApiKey.METADATA:
        return ""
    topics = request.body.topics
    return "null" if topics is None else "empty" if not topics else "named"


def summarize(frames: list[bytes]) -> list[dict]:
    """One row per distinct (api, version, trailing bytes, Metadata topics shape), first frame of each."""
    rows: dict[tuple, dict] = {}
    for frame in frames:
        api_key, version = struct.unpack_from(">hh", frame)
        try:
            trailing: int | str = decode_request(frame).trailing_bytes
        except ProtocolError as e:
            trailing = f"error: {e}"
        key = (api_key, version, trailing, _topics_shape(frame))
        if key not in rows:
            rows[key] = {"api": api_name(api_key), "api_key": api_key, "version": version,
                         "trailing_bytes": trailing if isinstance(trailing, int) else None,
                         "frame": base64.b64encode(frame).decode()}
    return [rows[k] for k in sorted(rows, key=lambda k: (k[0], k[1], str(k[2]), k[3]))]


# -- the workloads ---------------------------------------------------------------------------------------------
def _confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    topic = f"cap-rd-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.list_topics(timeout=30)
    for f in admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1),
                                  NewTopic(f"{topic}-x", num_partitions=1, replication_factor=1)]).values():
        f.result(30)
    for f in admin.create_partitions([NewPartitions(f"{topic}-x", 2)]).values():
        f.result(30)
    for f in admin.describe_configs([ConfigResource("topic", topic)]).values():
        f.result(30)
    for config in ({"enable.idempotence": True, "compression.type": "zstd"}, {"acks": 0}, {"acks": 1}):
        producer = Producer({"bootstrap.servers": bootstrap, **config})
        for i in range(5):
            producer.produce(topic, key=b"k", value=b"%d" % i)
        assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen = 0
    for _ in range(150):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen += 1
            if seen >= 5:
                break
    consumer.commit(asynchronous=False)
    seek_with_leader_epoch(consumer, topic)
    consumer.committed([TopicPartition(topic, 0)], timeout=30)
    consumer.offsets_for_times([TopicPartition(topic, 0, 1)], timeout=30)
    consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    consumer.close()
    admin.list_consumer_groups().result(30)
    admin.describe_consumer_groups([f"{topic}-g"])[f"{topic}-g"].result(30)
    from confluent_kafka import ConsumerGroupTopicPartitions
    for f in admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(f"{topic}-g")]).values():
        f.result(30)
    for f in admin.delete_consumer_groups([f"{topic}-g"]).values():
        f.result(30)
    for f in admin.delete_topics([f"{topic}-x"]).values():
        f.result(30)


def _kcat(bootstrap: str) -> None:
    topic = f"cap-kcat-{uuid.uuid4().hex[:6]}"

    def run(*args: str, data: bytes | None = None, timeout: float = 60) -> None:
        subprocess.run(["kcat", "-b", bootstrap, *args], input=data, capture_output=True, timeout=timeout,
                       check=True)

    run("-L")
    run("-P", "-t", topic, data=b"a\nb\nc\n")
    run("-L", "-J", "-t", topic)
    run("-C", "-t", topic, "-o", "beginning", "-e")
    run("-G", f"{topic}-g", "-o", "beginning", "-e", topic, timeout=90)


def _kafka_python(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    topic = f"cap-kp-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1), NewTopic(f"{topic}-x", 1, 1)])
    admin.create_partitions({f"{topic}-x": 2})
    admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    admin.list_topics()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(5):
        producer.send(topic, b"%d" % i).get(30)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-g",
                             auto_offset_reset="earliest", consumer_timeout_ms=8000)
    for _msg in consumer:
        break
    consumer.commit()
    consumer.close()
    admin.list_groups()
    admin.describe_groups([f"{topic}-g"])
    admin.list_group_offsets({f"{topic}-g": None})
    admin.delete_groups([f"{topic}-g"])
    admin.delete_topics([f"{topic}-x"])
    admin.close()
    old_kafka_python_workload(bootstrap, topic)  # pinned to 0.8.1-0.10.1: the versions below kio's


def _aiokafka(bootstrap: str) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    topic = f"cap-aio-{uuid.uuid4().hex[:6]}"

    async def main() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 1, 1), NewTopic(f"{topic}-x", 1, 1)])
        await admin.create_partitions({f"{topic}-x": NewPartitions(2)})
        await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        await admin.list_topics()
        await admin.describe_topics([topic])
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        for i in range(5):
            await producer.send_and_wait(topic, b"%d" % i)
        await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"{topic}-g",
                                    auto_offset_reset="earliest", enable_auto_commit=False)
        await consumer.start()
        await asyncio.wait_for(consumer.getone(), 30)
        await consumer.commit()
        await consumer.stop()
        await admin.list_consumer_groups()
        await admin.describe_consumer_groups([f"{topic}-g"])
        await admin.list_consumer_group_offsets(f"{topic}-g")
        await admin.delete_topics([f"{topic}-x"])
        await admin.close()

    asyncio.run(main())


def _versions() -> dict[str, str]:
    import aiokafka
    import confluent_kafka
    import kafka

    kcat_version = subprocess.run(["kcat", "-V"], capture_output=True, text=True).stdout
    line = next((line for line in kcat_version.splitlines() if line.startswith("Version ")), "Version ? (librdkafka ?")
    kcat, librdkafka = line.split()[1], line.split("librdkafka ")[1].split()[0]
    return {"librdkafka": f"confluent-kafka {confluent_kafka.version()}, librdkafka {confluent_kafka.libversion()[0]}",
            "kcat": f"kcat {kcat}, librdkafka {librdkafka}", "kafka-python": f"kafka-python {kafka.__version__}",
            "aiokafka": f"aiokafka {aiokafka.__version__}"}


WORKLOADS: dict[str, Callable[[str], None]] = {
    "librdkafka": _confluent, "kcat": _kcat, "kafka-python": _kafka_python, "aiokafka": _aiokafka}


def capture(clients: list[str], out: Path = DATA) -> dict[str, list[dict]]:
    base = Path(tempfile.mkdtemp(prefix="kctl-capture-"))
    proxy_port = free_port()
    broker = BrokerProcess(free_port(), base / "kafka-logs", [
        f"advertised.listeners=PLAINTEXT://127.0.0.1:{proxy_port}", "group.initial.rebalance.delay.ms=0"])
    broker.start()
    proxy = RecordingProxy(("127.0.0.1", broker.port), proxy_port)
    versions = _versions()
    captured = {}
    try:
        for client in clients:
            proxy.take()
            WORKLOADS[client](f"127.0.0.1:{proxy_port}")
            time.sleep(0.5)  # the last frames of closing clients (LeaveGroup)
            rows = summarize(proxy.take())
            captured[client] = rows
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{client}.json").write_text(json.dumps(
                {"client": versions[client], "captured_with": "tests/protocol/capture_frames.py", "frames": rows},
                indent=1) + "\n")
            print(f"{client}: {len(rows)} frames: "
                  + ", ".join(f"{r['api']} v{r['version']}" for r in rows), flush=True)
    finally:
        proxy.close()
        broker.stop()
        print(broker.log()[-3000:], file=sys.stderr)
        shutil.rmtree(base, ignore_errors=True)
    return captured


if __name__ == "__main__":
    capture(sys.argv[1:] or list(WORKLOADS))
