#!/usr/bin/env python3
"""What the metrics cost a broker: CPU per MiB produced and consumed with metrics.http.listener on and off, in the
same run (issue 26: under 3% at 100 B records).

Per round, two new `kctl broker run` processes on free loopback ports with temporary log dirs: one with metrics on
(scraped once a second during every run, as a Prometheus server with a short interval would), one without, started
and measured in alternating order (on/off, then off/on) so that background load and what differs between two
processes fall on both alike. After a warm-up run on each: RECORDS records of SIZE bytes are produced
into a new single-partition topic as Produce v9 requests (acks=1) of BATCH records each, one at a time, then read
back from offset 0 with Fetch v11 (up to 1 MiB a fetch). The requests are built here with kcli.protocol, the same
bytes for both brokers, so that what differs is the metrics, not a client's batching of the moment (librdkafka's
batches follow its timing, and its CPU per MiB with them). The broker's CPU (all threads, from /proc) is taken
before and after each run; CPU seconds per MiB of payload (produced + consumed) is the figure, medians over
--repeat rounds. The ratio on/off - 1 is the cost of the metrics.

Usage: bench/bench_metrics.py [--records 1000000] [--size 100] [--batch-records 200] [--repeat 5] [--json FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """CPU time of every thread of the process so far, in ns from the scheduler (/proc/PID/task/*/schedstat; the
    clock ticks of /proc/PID/stat are 10 ms, too coarse for runs of a second of CPU). A thread that ended
    meanwhile is missing: the broker's worker threads live as long as it."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total / 1e9


class Broker:
    def __init__(self, work: Path, name: str, metrics: bool) -> None:
        self.name = name
        self.port = free_port()
        self.metrics_port = free_port() if metrics else None
        overrides = [f"listeners=PLAINTEXT://127.0.0.1:{self.port}", f"log.dirs={work / name}",
                     "offsets.topic.num.partitions=1", "group.initial.rebalance.delay.ms=0"]
        if self.metrics_port:
            overrides.append(f"metrics.http.listener=http://127.0.0.1:{self.metrics_port}")
        self.log = work / f"{name}.log"
        args = [sys.executable, "-m", "kcli", "broker", "run", *sum((["--override", o] for o in overrides), [])]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"), cwd=ROOT,
                                     start_new_session=True)
        deadline = time.monotonic() + 60
        while " serving " not in self.log.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"broker {name} did not start:\n{self.log.read_text()}")
            time.sleep(0.1)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _read_frame(sock: socket.socket) -> bytes:
    head = sock.recv(4, socket.MSG_WAITALL)
    if len(head) < 4:
        raise SystemExit("the broker closed the connection")
    (size,) = struct.unpack(">i", head)
    data = sock.recv(size, socket.MSG_WAITALL)
    if len(data) < size:
        raise SystemExit("the broker closed the connection")
    return data


def produce(port: int, topic: str, requests: int, batch_records: int, size: int) -> None:
    """``requests`` Produce v9 requests (acks=1), one at a time, each the same batch of ``batch_records``
    records of ``size`` bytes: the broker gets the same requests whether metrics are on or off."""
    from kio.schema.produce.v9 import request as m

    from kcli.protocol import ApiKey, decode_response, encode_request
    from kcli.records import Record, build_record_batch

    batch = build_record_batch([Record(i, int(time.time() * 1000), None, b"x" * size)
                                for i in range(batch_records)])
    body = m.ProduceRequest(transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30), topic_data=(
        m.TopicProduceData(name=topic, partition_data=(m.PartitionProduceData(index=0, records=batch),)),))
    frame = encode_request(ApiKey.PRODUCE, 9, 1, "bench-metrics", body)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        for i in range(requests):
            sock.sendall(frame)
            answer = _read_frame(sock)
            if i == 0 or i == requests - 1:
                response = decode_response(ApiKey.PRODUCE, 9, answer)[1]
                code = response.responses[0].partition_responses[0].error_code
                if code != 0:
                    raise SystemExit(f"produce failed: {code!r}")


def consume(port: int, topic: str, count: int, max_bytes: int = 1 << 20) -> None:
    """Fetch v11 from offset 0 until ``count`` records are read, up to ``max_bytes`` a fetch (librdkafka's
    fetch.max.bytes per partition), the next offset taken from the last whole batch of each answer."""
    from kio.schema.fetch.v11 import request as m

    from kcli.protocol import ApiKey, decode_response, encode_request

    offset = 0
    with socket.create_connection(("127.0.0.1", port)) as sock:
        while offset < count:
            body = m.FetchRequest(max_wait=datetime.timedelta(milliseconds=500), min_bytes=1, max_bytes=max_bytes,
                                  topics=(m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
                                      partition=0, fetch_offset=offset, partition_max_bytes=max_bytes),)),),
                                  forgotten_topics_data=())
            sock.sendall(encode_request(ApiKey.FETCH, 11, 1, "bench-metrics", body))
            response = decode_response(ApiKey.FETCH, 11, _read_frame(sock))[1]
            partition = response.responses[0].partitions[0]
            if partition.error_code != 0:
                raise SystemExit(f"fetch failed: {partition.error_code!r}")
            records = bytes(partition.records or b"")
            position = 0
            while position + 61 <= len(records):  # v2 batches: base offset, length, ..., last offset delta
                base, length = struct.unpack_from(">qi", records, position)
                if position + 12 + length > len(records):
                    break
                (delta,) = struct.unpack_from(">i", records, position + 23)
                offset = base + delta + 1
                position += 12 + length


def scrape_while(broker: Broker, stop: threading.Event, sizes: list[int]) -> None:
    while not stop.wait(1.0):
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10) as response:
            sizes.append(len(response.read()))


def one_run(broker: Broker, count: int, size: int, batch_records: int) -> dict:
    topic = f"m-{uuid.uuid4().hex[:8]}"
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # the topic, outside the figure
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    requests = max(count // batch_records, 1)
    count = requests * batch_records
    stop, sizes = threading.Event(), []
    scraper = threading.Thread(target=scrape_while, args=(broker, stop, sizes)) if broker.metrics_port else None
    before, started = cpu_seconds(broker.proc.pid), time.monotonic()
    if scraper is not None:
        scraper.start()
    try:
        produce(broker.port, topic, requests, batch_records, size)
        consume(broker.port, topic, count)
    finally:
        stop.set()
        if scraper is not None:
            scraper.join()
    cpu, wall = cpu_seconds(broker.proc.pid) - before, time.monotonic() - started
    mib = 2 * count * size / MIB  # produced and consumed
    return {"broker": broker.name, "cpu_s": cpu, "wall_s": wall, "cpu_s_per_mib": cpu / mib, "scrapes": len(sizes),
            "scrape_bytes": max(sizes) if sizes else 0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--batch-records", type=int, default=200,
                        help="records per Produce request (librdkafka at linger.ms=5 sends larger ones)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        for round_ in range(args.repeat):
            # a new pair of brokers each round, started and measured in alternating order: what differs between
            # two processes (their heaps, where their pages landed) falls on both configurations alike
            order = (True, False) if round_ % 2 == 0 else (False, True)
            brokers: list[Broker] = []
            (Path(tmp) / f"round-{round_}").mkdir()
            try:
                for metrics in order:
                    brokers.append(Broker(Path(tmp) / f"round-{round_}", "on" if metrics else "off", metrics))
                for broker in brokers:  # warm-up, not counted: first allocations, imports, page cache
                    one_run(broker, max(args.records // 5, 1000), args.size, args.batch_records)
                for broker in brokers:
                    result = one_run(broker, args.records, args.size, args.batch_records)
                    runs[broker.name].append(result)
                    print(f"round {round_ + 1} {broker.name:>3}: {result['cpu_s']:.2f} CPU s in {result['wall_s']:.1f} s,"
                          f" {result['cpu_s_per_mib'] * 1000:.2f} CPU ms/MiB"
                          + (f", {result['scrapes']} scrapes of {result['scrape_bytes']} B" if result["scrapes"] else ""),
                          flush=True)
            finally:
                for broker in brokers:
                    broker.stop()
    median = {k: statistics.median(r["cpu_s_per_mib"] for r in v) for k, v in runs.items()}
    ratio = median["on"] / median["off"]
    # the same round's two runs side by side: background load of the moment falls on both
    paired = statistics.median(a["cpu_s_per_mib"] / b["cpu_s_per_mib"] for a, b in zip(runs["on"], runs["off"]))
    print(f"{args.records} records of {args.size} B, produced and consumed, {args.repeat} rounds: broker CPU per MiB "
          f"median on {median['on'] * 1000:.2f} ms, off {median['off'] * 1000:.2f} ms; on/off = {ratio:.3f} "
          f"({(ratio - 1) * 100:+.1f}%), median of the rounds' on/off {paired:.3f} ({(paired - 1) * 100:+.1f}%)")
    # The accounting alone, timed here on the same interpreter: what the socket edge, the ReplicaManager and the
    # Fetch handler do per Produce and per Fetch request with metrics on, against the broker CPU per request measured
    # above (with metrics off). This resolves what the runs above cannot when the machine's noise is larger.
    per_request = accounting_us()
    requests = max(args.records // args.batch_records, 1)
    off_cpu_us = statistics.median(r["cpu_s"] for r in runs["off"]) / requests * 1e6  # Produce + its share of Fetch
    share = per_request / off_cpu_us
    print(f"accounting alone: {per_request:.2f} us per Produce request and its share of the Fetches, "
          f"{off_cpu_us:.0f} us of broker CPU per Produce request (metrics off): {share * 100:.2f}%")
    if args.json:
        args.json.write_text(json.dumps({"records": args.records, "size": args.size, "runs": runs,
                                         "median_cpu_s_per_mib": median, "ratio": ratio, "paired_ratio": paired,
                                         "accounting_us_per_request": per_request,
                                         "broker_cpu_us_per_request": off_cpu_us}, indent=1))


def accounting_us(n: int = 200_000) -> float:
    """Microseconds of metrics work per Produce request (the socket edge's two clock reads, queue gauges and
    histogram; the ReplicaManager's topic counters), plus a Fetch's share (about one Fetch per 1 MiB read)."""
    import timeit
    from types import SimpleNamespace

    sys.path.insert(0, str(ROOT))
    from kcli.broker.metrics import BrokerMetrics
    from kcli.protocol import ApiKey

    metrics = BrokerMetrics()
    fetch_body = SimpleNamespace(replica_id=-1)

    def produce_request() -> None:
        received = time.perf_counter()
        metrics.requests_in_progress += 1
        metrics.appended("topic", 20_000, 200)
        metrics.requests_in_progress -= 1
        metrics.responses_in_progress += 1
        metrics.responses_in_progress -= 1
        metrics.request_done(ApiKey.PRODUCE, received, time.perf_counter())

    def fetch_request() -> None:
        received = time.perf_counter()
        metrics.requests_in_progress += 1
        metrics.requests_in_progress -= 1
        metrics.fetched("topic", 1 << 20, follower=False, failed=False)
        metrics.responses_in_progress += 1
        metrics.responses_in_progress -= 1
        metrics.request_done(ApiKey.FETCH, received, time.perf_counter(), fetch_body)

    produce_us = min(timeit.repeat(produce_request, number=n, repeat=5)) / n * 1e6
    fetch_us = min(timeit.repeat(fetch_request, number=n, repeat=5)) / n * 1e6
    return produce_us + fetch_us * 20_000 / (1 << 20)  # a 1 MiB Fetch per ~52 Produce requests of 20 KB


if __name__ == "__main__":
    main()
