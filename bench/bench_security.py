#!/usr/bin/env python3
"""Produce and consume throughput over PLAINTEXT, SSL and SASL_SSL (PLAIN) listeners of one `kctl broker run`, in the
same run, with confluent-kafka; and SASL connections authenticated per second (PLAIN and SCRAM-SHA-256 over
SASL_PLAINTEXT: the handshake cost).

One standalone broker with four listeners (a test CA made with `cryptography`, as tests/security_support.py does).
Per listener and record size: produce COUNT records into a new single-partition topic (linger.ms=5, acks=1, no
compression), then consume them from the beginning (one consumer, no group commits); throughput from the first send
to the last delivery report, and from the consumer's first record to the last. --repeat runs, medians reported.

Usage: bench/bench_security.py [--records 200000] [--small-records 500000] [--repeat 3] [--logins 300] [--json F]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from security_support import STORE_PASSWORD, make_pki  # noqa: E402

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required user_bench="bench-secret";')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_broker(work: Path, pki) -> tuple[subprocess.Popen, dict[str, int]]:
    ports = {n: free_port() for n in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    overrides = [
        "listeners=" + ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256",
        f"listener.name.sasl_plaintext.plain.sasl.jaas.config={JAAS}",
        f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
        f"ssl.keystore.location={pki.path('broker.p12')}", "ssl.keystore.type=PKCS12",
        f"ssl.keystore.password={STORE_PASSWORD}", f"log.dirs={work / 'logs'}",
        "connection.failed.authentication.delay.ms=0",
    ]
    args = [sys.executable, "-m", "kcli", "broker", "run", *sum((["--override", o] for o in overrides), [])]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(work / "broker.log", "w"), cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if " serving " in (work / "broker.log").read_text():
            return proc, ports
        time.sleep(0.1)
    raise SystemExit("broker did not start:\n" + (work / "broker.log").read_text())


def settings(listener: str, pki) -> dict:
    out: dict = {"security.protocol": listener}
    if listener.endswith("SSL"):
        out["ssl.ca.location"] = pki.ca
    if listener.startswith("SASL"):
        out.update({"sasl.mechanism": "PLAIN", "sasl.username": "bench", "sasl.password": "bench-secret"})
    return out


def produce(bootstrap: str, extra: dict, topic: str, count: int, size: int) -> float:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1,
                         "queue.buffering.max.messages": 1_000_000, **extra})
    producer.produce(topic, value=b"w")  # metadata and connection outside the timing
    producer.flush(60)
    payload = b"x" * size
    started = time.monotonic()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, value=payload)
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(300)
    return time.monotonic() - started


def consume(bootstrap: str, extra: dict, topic: str, count: int) -> float:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"b-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **extra})
    consumer.subscribe([topic])
    seen, started = 0, None
    deadline = time.monotonic() + 300
    while seen < count + 1 and time.monotonic() < deadline:
        for msg in consumer.consume(10000, 0.5):
            if msg.error() is None:
                if started is None:
                    started = time.monotonic()
                seen += 1
    consumer.close()
    return time.monotonic() - (started or time.monotonic())


def logins(port: int, mechanism: str, n: int) -> float:
    """Connections authenticated per second: connect, SaslHandshake v1, SaslAuthenticate v2 exchange, close."""
    import struct

    from kcli.protocol import ApiKey, decode_response, encode_request
    from kcli.protocol.sasl import create_client
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    def read(sock):
        head = b""
        while len(head) < 4:
            head += sock.recv(4 - len(head))
        size = struct.unpack(">i", head)[0]
        data = b""
        while len(data) < size:
            data += sock.recv(size - len(data))
        return data

    started = time.monotonic()
    for _ in range(n):
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(encode_request(ApiKey.SASL_HANDSHAKE, 1, 1, "b", SaslHandshakeRequest(mechanism=mechanism)))
            read(sock)
            client = create_client(mechanism, username="bench", password="bench-secret")
            token, cid = client.initial(), 2
            while True:
                sock.sendall(encode_request(ApiKey.SASL_AUTHENTICATE, 2, cid, "b",
                                            SaslAuthenticateRequest(auth_bytes=token)))
                answer = decode_response(ApiKey.SASL_AUTHENTICATE, 2, read(sock))[1]
                assert answer.error_code == 0, answer
                if client.complete or mechanism == "PLAIN":
                    break
                token = client.evaluate(answer.auth_bytes)
                cid += 1
                if client.complete:
                    break
    return n / (time.monotonic() - started)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000, help="records of 1 KiB")
    ap.add_argument("--small-records", type=int, default=500_000, help="records of 100 bytes")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--logins", type=int, default=300)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kctl-bench-sec-") as tmp:
        work = Path(tmp)
        pki = make_pki(work / "pki")
        proc, ports = start_broker(work, pki)
        report: dict = {"cases": []}
        try:
            from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, \
                UserScramCredentialUpsertion

            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
            for f in admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
                    "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"bench-secret")]).values():
                f.result(30)
            for size, count in ((1024, args.records), (100, args.small_records)):
                for listener in ("PLAINTEXT", "SSL", "SASL_SSL"):
                    runs = []
                    for _ in range(args.repeat):
                        bootstrap, extra = f"127.0.0.1:{ports[listener]}", settings(listener, pki)
                        topic = f"bench-{listener.lower()}-{size}-{uuid.uuid4().hex[:6]}"
                        p = produce(bootstrap, extra, topic, count, size)
                        c = consume(bootstrap, extra, topic, count)
                        runs.append((count * size / p / 1e6, count * size / c / 1e6))
                    case = {"listener": listener, "size": size, "records": count,
                            "produce_MBps": round(statistics.median(r[0] for r in runs), 1),
                            "consume_MBps": round(statistics.median(r[1] for r in runs), 1)}
                    report["cases"].append(case)
                    print(f"{listener:10s} {size:5d} B  produce {case['produce_MBps']:7.1f} MB/s  "
                          f"consume {case['consume_MBps']:7.1f} MB/s", flush=True)
            for mechanism in ("PLAIN", "SCRAM-SHA-256"):
                rate = logins(ports["SASL_PLAINTEXT"], mechanism, args.logins)
                report[f"logins_per_s_{mechanism}"] = round(rate, 1)
                print(f"{mechanism:14s} {rate:7.1f} connections authenticated per second", flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
        if args.json:
            args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
