"""Helpers for tests that run a real `kctl broker run` subprocess."""

from __future__ import annotations

import fcntl
import functools
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import broker_fork
import tiers


# Ports for what the tests start come from below Linux's ephemeral range (32768-60999), where no outgoing
# connection's local port lands: a port the kernel hands out for bind(0) is also one it may give the next client
# connection a moment later (a broker then failed to start with "address already in use"). Each port is claimed
# by a byte-range lock on one file shared by every process of every tier (released when the process exits), so
# two xdist workers never pick the same one, and is checked free by binding it.
_PORTS = range(20000, 32700)
_taken: set[int] = set()  # tried by this process: claimed, or found held by someone else
_rng = random.SystemRandom()  # no state a fork would copy


@functools.cache
def _claims():
    """The lock file, opened once and kept for the process's life (closing any descriptor of it would drop every
    lock this process holds on it)."""
    return open(os.path.join(tempfile.gettempdir(), "kcli-test-ports.lock"), "a+b")


def free_port() -> int:
    claims = _claims()
    for _ in range(2000):
        port = _rng.choice(_PORTS)
        if port in _taken:  # a process's own locks never conflict with each other
            continue
        _taken.add(port)
        try:
            fcntl.lockf(claims, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port)
        except OSError:
            continue  # another process of the suite has it
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # something else holds it
        return port
    with socket.socket() as sock:  # the range is exhausted: the kernel's choice, as before
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


_started: list[tuple[str | None, Path]] = []  # (test module, broker log) of every broker start in this process


def broker_log_tails(module: str, brokers: int = 6, lines: int = 30) -> str:
    """The last lines of the logs of the latest brokers started by ``module``'s tests: shown under a failed test
    (tests/conftest.py), since CI keeps only what pytest prints."""
    logs = list(dict.fromkeys(path for started_by, path in _started if started_by == module))[-brokers:]
    parts = []
    for path in logs:
        try:
            tail = path.read_text(errors="replace").splitlines()[-lines:]
        except OSError:
            continue
        parts.append(f"== {path.name} (last {len(tail)} lines)\n" + "\n".join(tail))
    return "\n".join(parts)


@dataclass
class BrokerProcess:
    port: int
    log_dir: Path
    overrides: list[str]
    proc: subprocess.Popen | broker_fork.ForkedProcess | None = None
    stderr_path: Path | None = None
    env: dict | None = None
    extra_args: list[str] | None = None  # after `kctl broker run`, e.g. ["--log-level", "debug"]
    # a fresh interpreter (`python -m kcli broker run`) rather than a child of the fork server (tests/broker_fork.py)
    fresh: bool = False

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 120.0) -> None:  # returns once serving: only a loaded machine takes long
        tiers.require("broker_process", f"a kctl broker process on port {self.port}")
        self.stderr_path = self.log_dir.parent / f"broker-{self.port}-{int(time.time() * 1000)}.log"
        _started.append((tiers.current_module(), self.stderr_path))
        args = ["broker", "run", *(self.extra_args or []),
                "--override", f"listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "--override", f"log.dirs={self.log_dir}", *sum((["--override", o] for o in self.overrides), [])]
        env = None if self.env is None else {**os.environ, **self.env}
        if self.fresh or not broker_fork.enabled():
            with open(self.stderr_path, "w") as stderr:
                self.proc = subprocess.Popen([sys.executable, "-m", "kcli", *args], stdout=subprocess.DEVNULL,
                                             stderr=stderr, env=env)
        else:  # a child of the fork server: the same entry point without importing kcli again (1.7 CPU-s)
            self.proc = broker_fork.spawn(args, stderr=self.stderr_path, env=env)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"broker exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    pass
            except OSError:
                time.sleep(0.05)
                continue
            # listening comes before the ZooKeeper registration (Kafka's order): ready once it says so
            if "kctl broker " in (log := self.log()) and " serving " in log:
                return
            time.sleep(0.05)
        raise RuntimeError(f"broker did not listen within {timeout}s:\n{self.log()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # stuck: the broker logs its threads and tasks on SIGQUIT; show them, then kill it
            self.proc.send_signal(signal.SIGQUIT)
            time.sleep(1)
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            raise RuntimeError(f"broker did not stop within {timeout}s:\n{self.log()[-20000:]}") from None
        self.proc = None
        return code

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def log(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path and self.stderr_path.exists() else ""


# kafka-python pinned to old brokers' versions: Produce v0-v2, Fetch v0-v3, ListOffsets v0, OffsetCommit v0-v1 and
# OffsetFetch v0-v1 (kafka-python's BROKER_API_VERSIONS for 0.8.1 ... 0.10.1).
OLD_KAFKA_PYTHON_VERSIONS = ((0, 8, 1), (0, 8, 2), (0, 9), (0, 10), (0, 10, 1))


def old_kafka_python_workload(bootstrap: str, topic: str) -> None:
    """Per old version: produce one record to partition 0 of ``topic``, read it back, commit past it and read
    the commit back (the version ledger's and the frame capture's old-client workload)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    tp = TopicPartition(topic, 0)
    for api_version in OLD_KAFKA_PYTHON_VERSIONS:
        producer = KafkaProducer(bootstrap_servers=bootstrap, api_version=api_version)
        sent = producer.send(topic, b"old", partition=0).get(30)
        producer.close()
        group = "old-" + "-".join(map(str, api_version)) + "-" + topic
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, api_version=api_version, group_id=group,
                                 enable_auto_commit=False, consumer_timeout_ms=8000)
        try:
            consumer.assign([tp])
            consumer.seek(tp, sent.offset)
            assert next(consumer).value == b"old"
            consumer.commit({tp: OffsetAndMetadata(sent.offset + 1, "", -1)})
            assert consumer.committed(tp) == sent.offset + 1
            assert consumer.end_offsets([tp])[tp] == sent.offset + 1
        finally:
            consumer.close()


def seek_with_leader_epoch(consumer, topic: str) -> None:
    """librdkafka validates a position that carries a leader epoch with OffsetForLeaderEpoch before it fetches
    from it (KIP-320): a seek with one, then a poll that returns a record from there."""
    from confluent_kafka import TopicPartition

    consumer.seek(TopicPartition(topic, 0, 1, leader_epoch=0))
    for _ in range(150):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None and msg.partition() == 0:
            assert msg.offset() == 1, msg.offset()
            return
    raise AssertionError("no record after a seek with a leader epoch")


def kcat(*args: str, input: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *args], input=input, capture_output=True, timeout=timeout)



def read_exactly(sock: socket.socket, size: int) -> bytes | None:
    """``size`` bytes from ``sock``, or None when the peer closed (or reset) the connection first."""
    data = b""
    while len(data) < size:
        try:
            chunk = sock.recv(size - len(data))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def read_response(sock: socket.socket) -> bytes | None:
    """One size-prefixed response frame (without the prefix), or None when the broker closed the connection."""
    head = read_exactly(sock, 4)
    return None if head is None else read_exactly(sock, struct.unpack(">i", head)[0])


# -- raw requests on a socket (kio bodies) -------------------------------------------------------------------
def send_request(sock, api_key, version: int, body, correlation_id: int = 1) -> None:
    from kcli.protocol import encode_request

    sock.sendall(encode_request(api_key, version, correlation_id, "kctl-test", body))


def receive_response(sock, api_key, version: int):
    from kcli.protocol import decode_response

    frame = read_response(sock)
    assert frame is not None, f"the broker closed the connection instead of answering {api_key.name}"
    return decode_response(api_key, version, frame)[1]


def create_topics_body(names: list[str], partitions: int, timeout_ms: int = 120_000):
    import datetime

    from kio.schema.create_topics.v7 import request as m

    return m.CreateTopicsRequest(topics=tuple(m.CreatableTopic(name=n, num_partitions=partitions, replication_factor=1,
                                                               assignments=(), configs=()) for n in names),
                                 timeout=datetime.timedelta(milliseconds=timeout_ms), validate_only=False)


def metadata_body(names: list[str]):
    from kio.schema.metadata.v12 import request as m

    return m.MetadataRequest(topics=tuple(m.MetadataRequestTopic(topic_id=None, name=n) for n in names),
                             allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def produce_body(targets: list[tuple[str, int]]):
    import datetime

    from kio.schema.produce.v9 import request as m

    from kcli.records import Record, build_record_batch

    batch = build_record_batch([Record(0, int(time.time() * 1000), None, b"v")])
    by_topic: dict[str, list[int]] = {}
    for topic, index in targets:
        by_topic.setdefault(topic, []).append(index)
    return m.ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=10), topic_data=tuple(
        m.TopicProduceData(name=t, partition_data=tuple(m.PartitionProduceData(index=i, records=batch) for i in idx))
        for t, idx in by_topic.items()))


def whole_or_absent_topics(sock, names: list[str], partitions: int = 100) -> set[str]:
    """Metadata for ``names`` on ``sock``: the topics it shows; each shown one must be whole (``partitions``
    partitions, every one led by broker 0), the others UNKNOWN_TOPIC_OR_PARTITION."""
    from kio.schema.errors import ErrorCode

    from kcli.protocol import ApiKey

    send_request(sock, ApiKey.METADATA, 12, metadata_body(names))
    shown = set()
    for t in receive_response(sock, ApiKey.METADATA, 12).topics:
        if t.error_code == ErrorCode.none:
            assert sorted(p.partition_index for p in t.partitions) == list(range(partitions)), t.name
            assert {(p.error_code, p.leader_id) for p in t.partitions} == {(ErrorCode.none, 0)}, t.name
            shown.add(t.name)
        else:
            assert t.error_code == ErrorCode.unknown_topic_or_partition and not t.partitions, t
    return shown
