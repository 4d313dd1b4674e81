"""Connection limits and the metrics endpoint of a real `kctl broker run` with real clients (issue 26).

One broker for the module, with two listeners (PLAINTEXT for clients, INTERNAL the inter-broker one) and
metrics.http.listener on. Each test sets the limits it needs as dynamic broker configs through kafka-python's admin
client (KIP-226: applied live) and clears them afterwards; connections are counted through /metrics, so each test
waits for the previous one's to close first."""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest

import kctl_fork
from broker_support import BrokerProcess, free_port
from kcli.client.metrics import scrape_metrics

pytestmark = pytest.mark.broker_process

LIMIT_KEYS = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides",
              "max.connection.creation.rate")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("limits-broker")
    port, internal, metrics = free_port(), free_port(), free_port()
    process = BrokerProcess(port, tmp / "logs", [
        f"listeners=PLAINTEXT://127.0.0.1:{port},INTERNAL://127.0.0.1:{internal}",
        "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name=INTERNAL",
        f"metrics.http.listener=http://127.0.0.1:{metrics}",
        "group.initial.rebalance.delay.ms=0",
    ])
    process.start()
    process.internal = internal  # type: ignore[attr-defined]
    process.metrics = f"127.0.0.1:{metrics}"  # type: ignore[attr-defined]
    yield process
    code = process.stop()
    assert code == 0, process.log()[-20000:]
    bad = [line for line in process.log().splitlines() if "Traceback" in line or "internal error" in line]
    assert not bad, process.log()[-20000:]


# -- helpers ------------------------------------------------------------------------------------------------
def values(broker, name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels``."""
    scrape = scrape_metrics(broker.metrics, prefix=name)
    return sum(s.value for s in scrape.samples if s.name == name and labels.items() <= s.labels.items())


def wait_for(condition, what: str, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def set_limits(broker, **limits: str | None) -> None:
    """Dynamic configs of broker 0 through the INTERNAL listener (exempt from max.connections); None deletes."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker.internal}", request_timeout_ms=30_000)
    try:
        configs = {key.replace("_", "."): (("SET", value) if value is not None else ("DELETE", None))
                   for key, value in limits.items()}
        admin.alter_configs([ConfigResource(ConfigResourceType.BROKER, "0", configs=configs)])
    finally:
        admin.close()


@contextlib.contextmanager
def limits(broker, **given: str):
    wait_for(lambda: values(broker, "kafka_server_socket_server_metrics_connection_count") == 0,
             "the previous test's connections to close")
    set_limits(broker, **given)
    wait_for(lambda: values(broker, "kafka_server_socket_server_metrics_connection_count") == 0,
             "the admin client's connections to close")
    try:
        yield
    finally:
        set_limits(broker, **dict.fromkeys(given))


def api_versions_frame(correlation_id: int = 1) -> bytes:
    body = struct.pack(">hhih", 18, 0, correlation_id, 4) + b"test"  # ApiVersions v0, client id "test"
    return struct.pack(">i", len(body)) + body


def connect(port: int, source: str | None = None) -> socket.socket:
    sock = socket.socket()
    if source is not None:
        sock.bind((source, 0))
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    return sock


def outcome(sock: socket.socket, timeout: float) -> str:
    """"answered" (a response came), "closed" (EOF or reset) or "waiting" (nothing within ``timeout``)."""
    ready, _, _ = select.select([sock], [], [], timeout)
    if not ready:
        return "waiting"
    try:
        head = sock.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return "closed"
        (size,) = struct.unpack(">i", head)
        return "answered" if len(sock.recv(size, socket.MSG_WAITALL)) == size else "closed"
    except ConnectionResetError:
        return "closed"


def outcomes(socks: list[socket.socket], timeout: float = 60.0) -> list[str]:
    """Send ApiVersions on every socket, then each one's outcome (none left waiting after ``timeout``)."""
    for sock in socks:
        try:
            sock.sendall(api_versions_frame())
        except (BrokenPipeError, ConnectionResetError):
            pass
    deadline = time.monotonic() + timeout
    return [outcome(sock, max(deadline - time.monotonic(), 0.01)) for sock in socks]


def produce(bootstrap: str, topic: str, count: int, size: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    value = b"x" * size
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0


# -- connection limits ----------------------------------------------------------------------------------------
def test_per_ip_limit_closes_a_burst_of_200_and_serves_the_rest(broker):
    from confluent_kafka import Producer

    topic = f"per-ip-{uuid.uuid4().hex[:8]}"
    with limits(broker, max_connections_per_ip="30", max_connections_per_ip_overrides="127.0.0.2:250"):
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
        producer.produce(topic, b"before", partition=0)
        assert producer.flush(30) == 0
        rejected_before = values(broker, "kctl_network_connections_rejected_total")
        burst = [connect(broker.port) for _ in range(200)]
        try:
            seen = outcomes(burst)
            assert "waiting" not in seen
            answered, closed = seen.count("answered"), seen.count("closed")
            assert answered + closed == 200
            # the producer's connections count towards 127.0.0.1's 30 as well
            assert 0 < answered <= 30 and closed >= 170, (answered, closed)
            assert values(broker, "kctl_network_connections_rejected_total") - rejected_before == closed
            # the connections already open are served on: the producer keeps producing over them
            for i in range(100):
                producer.produce(topic, b"during-%d" % i, partition=0)
            assert producer.flush(30) == 0
            # another address has its override: all of its 200 are served
            others = [connect(broker.port, source="127.0.0.2") for _ in range(200)]
            try:
                assert outcomes(others) == ["answered"] * 200
            finally:
                for sock in others:
                    sock.close()
        finally:
            for sock in burst:
                sock.close()
        del producer
    assert "Rejected connection from 127.0.0.1, address already has the configured maximum of 30 connections." \
        in broker.log()


def test_max_connections_holds_new_connections_until_a_slot_frees(broker):
    blocked_before = values(broker, "kafka_network_acceptor_acceptorblockedpercent_count", listener="PLAINTEXT")
    with limits(broker, max_connections="3"):
        held = [connect(broker.port) for _ in range(3)]
        try:
            assert outcomes(held) == ["answered"] * 3
            extra = connect(broker.port)  # taken by the kernel's backlog; the broker does not accept it yet
            try:
                extra.sendall(api_versions_frame())
                assert outcome(extra, 1.5) == "waiting"
                assert values(broker, "kafka_server_socket_server_metrics_connection_count") == 3
                held.pop(0).close()  # a slot frees: the waiting connection is accepted and answered
                assert outcome(extra, 30) == "answered"
            finally:
                extra.close()
        finally:
            for sock in held:
                sock.close()
    assert values(broker, "kafka_network_acceptor_acceptorblockedpercent_count", listener="PLAINTEXT") > blocked_before


def test_inter_broker_listener_is_exempt_and_another_listener_gives_way(broker):
    with limits(broker, max_connections="2"):
        clients = [connect(broker.port) for _ in range(2)]
        try:
            assert outcomes(clients) == ["answered"] * 2
            internal = connect(broker.internal)  # type: ignore[attr-defined]
            try:
                assert outcomes([internal]) == ["answered"]
                # over max.connections now: the oldest client connection is closed for it (Kafka: the LRU one)
                assert outcome(clients[0], 30) == "closed"
                assert outcomes([clients[1]]) == ["answered"]
            finally:
                internal.close()
        finally:
            for sock in clients:
                sock.close()


def test_creation_rate_delays_accepts_and_refuses_none(broker):
    from confluent_kafka.admin import AdminClient

    throttled_before = values(broker, "kctl_network_connection_accepts_throttled_total")
    with limits(broker, max_connection_creation_rate="2"):
        # 11 one-second windows, the rate over at least 10 s: about 20 are accepted at once, the rest paced (half
        # a second each: a few beyond the 20 show the pacing without waiting for many)
        burst = [connect(broker.port) for _ in range(26)]
        try:
            assert outcomes(burst, timeout=120) == ["answered"] * 26
        finally:
            for sock in burst:
                sock.close()
        assert values(broker, "kctl_network_connection_accepts_throttled_total") > throttled_before
        # a real client connects too (delayed, not refused)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert admin.list_topics(timeout=60).brokers


# -- metrics --------------------------------------------------------------------------------------------------
def test_metrics_move_under_load_and_match_the_bytes_produced(broker):
    from confluent_kafka import Consumer, TopicPartition

    topic = f"load-{uuid.uuid4().hex[:8]}"
    count, size = 30_000, 100
    name = "kafka_server_brokertopicmetrics_bytesin_total"
    worker = threading.Thread(target=produce, args=(broker.bootstrap, topic, count, size))
    worker.start()
    try:
        first = wait_for(lambda: values(broker, name, topic=topic), "bytes in to be counted")
        wait_for(lambda: not worker.is_alive() or values(broker, name, topic=topic) > first,
                 "the counter to move while producing")
    finally:
        worker.join(120)
    assert not worker.is_alive()
    log_bytes = sum(f.stat().st_size for f in (broker.log_dir / f"{topic}-0").glob("*.log"))
    bytes_in = values(broker, name, topic=topic)
    assert abs(bytes_in - log_bytes) <= 0.01 * log_bytes, (bytes_in, log_bytes)
    assert values(broker, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == count
    assert values(broker, name) >= bytes_in  # all topics
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic, "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        read = 0
        deadline = time.monotonic() + 120
        while read < count and time.monotonic() < deadline:
            for message in consumer.consume(1000, 1.0):
                assert message.error() is None
                read += 1
        assert read == count
    finally:
        consumer.close()
    bytes_out = values(broker, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic)
    assert abs(bytes_out - log_bytes) <= 0.01 * log_bytes, (bytes_out, log_bytes)
    assert values(broker, "kafka_network_requestmetrics_requests_total", request="Produce") > 0
    assert values(broker, "kafka_network_requestmetrics_totaltimems_count", request="Produce") > 0
    assert values(broker, "kafka_network_requestmetrics_totaltimems_count", request="Fetch") > 0
    assert values(broker, "kafka_network_requestmetrics_totaltimems_count", request="FetchConsumer") > 0
    assert values(broker, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert values(broker, "kafka_server_replicamanager_partitioncount") >= 1


# -- kctl metrics ---------------------------------------------------------------------------------------------
def kctl(*args: str, fresh: bool = False) -> subprocess.CompletedProcess:
    """`kctl *args`: forked from a process that imported kcli once (tests/kctl_fork.py), or ``fresh``."""
    if not fresh:
        return kctl_fork.run(*args, env={"COLUMNS": "200"})
    return subprocess.run([sys.executable, "-m", "kcli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})


def test_kctl_metrics_prints_filters_and_fails_as_documented(broker):
    proc = kctl("metrics", broker.metrics, "--prefix", "kafka_server_brokertopicmetrics_bytesin", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["url"] == f"http://{broker.metrics}/metrics"
    assert data["samples"] and all(s["name"].startswith("kafka_server_brokertopicmetrics_bytesin")
                                   for s in data["samples"])
    assert {s["type"] for s in data["samples"]} == {"counter"}
    table = kctl("metrics", f"http://{broker.metrics}/metrics", "--prefix", "kafka_controller_")
    assert table.returncode == 0, table.stderr
    assert "kafka_controller_kafkacontroller_activecontrollercount" in table.stdout
    none = kctl("metrics", broker.metrics, "--prefix", "no_such_metric")
    assert none.returncode == 1 and "no metric" in none.stderr and not none.stdout
    missing = kctl("metrics", f"http://{broker.metrics}/elsewhere")
    assert missing.returncode == 3 and "HTTP 404" in missing.stderr
    unreachable = kctl("metrics", f"127.0.0.1:{free_port()}", "--timeout", "5", fresh=True)
    assert unreachable.returncode == 3 and "cannot read metrics" in unreachable.stderr
    usage = kctl("metrics", "ftp://127.0.0.1:1")
    assert usage.returncode == 2
    for proc in (none, missing, unreachable, usage):
        assert "Traceback" not in proc.stderr
