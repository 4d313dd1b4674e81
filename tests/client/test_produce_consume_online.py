"""kctl produce and kctl consume against one real `kctl broker run`, cross-checked with real clients:
confluent-kafka (librdkafka) and kcat read what kctl produce wrote, and kctl consume reads what they wrote
(keys, headers, gzip/zstd batches, a transaction aborted and hidden with read_committed)."""

from __future__ import annotations

import json
import uuid

import pytest
from typer.testing import CliRunner

from broker_support import BrokerProcess, free_port, kcat
from kcli.cli.app import app


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("produce-consume") / "kafka-logs",
                            ["num.partitions=3", "group.initial.rebalance.delay.ms=0"])
    process.start()
    try:
        yield process
    finally:
        process.stop()


def kctl(*args: str, input: bytes | None = None, code: int = 0):
    result = CliRunner().invoke(app, list(args), input=input, env={"COLUMNS": "200"})
    assert result.exit_code == code, f"exit {result.exit_code}\n{result.output}\n{result.stderr}"
    return result


def topic() -> str:
    return "t-" + uuid.uuid4().hex[:8]


def read_all(bootstrap: str, name: str, expected: int, **config) -> list:
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g-" + uuid.uuid4().hex[:6],
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, **config})
    consumer.subscribe([name])
    out = []
    try:
        for _ in range(300):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                out.append(msg)
                if len(out) == expected:
                    break
    finally:
        consumer.close()
    return out


def test_confluent_kafka_reads_what_kctl_produce_wrote(broker):
    from confluent_kafka import Producer

    name = topic()
    lines = b"".join(b"key-%d\tvalue %d\n" % (i, i) for i in range(60)) + b"\nno key here\n"
    result = kctl("produce", name, "-b", broker.bootstrap, "-K", "\\t", "-H", "origin=kctl", "-H", "empty",
                  "-z", "gzip", "--batch-size", "512", "--json", input=lines)
    summary = json.loads(result.stdout)
    assert summary["records"] == 61 and summary["failed"] == 0 and summary["compression"] == "gzip"
    assert sum(p["batches"] for p in summary["partitions"]) > 3  # --batch-size cut the input into batches

    got = read_all(broker.bootstrap, name, 61)
    assert sorted((m.key() or b"", m.value()) for m in got) == sorted(
        [(b"key-%d" % i, b"value %d" % i) for i in range(60)] + [(b"", b"no key here")])
    assert [m.key() for m in got if m.value() == b"no key here"] == [None]
    assert all(m.headers() == [("origin", b"kctl"), ("empty", None)] for m in got)
    # the partition of each key is the Java client's (librdkafka's murmur2_random is the same hash)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})
    placed = {}
    for i in range(60):
        producer.produce(name, b"again", key=b"key-%d" % i,
                         on_delivery=lambda err, msg: placed.__setitem__(msg.key(), msg.partition()))
    producer.flush(30)
    assert {m.key(): m.partition() for m in got if m.key() is not None} == placed
    # per-partition offsets in the summary are the ones the records got
    for p in summary["partitions"]:
        offsets = sorted(m.offset() for m in got if m.partition() == p["partition"])
        assert (offsets[0], offsets[-1], len(offsets)) == (p["first_offset"], p["last_offset"], p["records"])


def test_produce_options_and_kcat_reads_them(broker):
    name = topic()
    kctl("produce", name, "-b", broker.bootstrap, "-p", "2", "-D", ";", "--idempotent", "-z", "zstd",
         input=b"a;b;c")
    out = kcat("-b", broker.bootstrap, "-C", "-t", name, "-e", "-q", "-f", "%p:%o:%s\n")
    assert out.returncode == 0 and out.stdout == b"2:0:a\n2:1:b\n2:2:c\n", out.stderr
    # acks=0: sent, no answer awaited; the records still arrive
    kctl("produce", name, "-b", broker.bootstrap, "--acks", "0", "-p", "1", input=b"x\ny\n")
    assert len(read_all(broker.bootstrap, name, 5)) == 5
    assert "no partition 7" in kctl("produce", name, "-b", broker.bootstrap, "-p", "7", input=b"x\n",
                                    code=1).output
    assert "needs --acks all" in kctl("produce", name, "-b", broker.bootstrap, "--idempotent", "--acks", "1",
                                      input=b"", code=2).output


def test_kctl_consume_reads_what_confluent_kafka_and_kcat_wrote(broker):
    from confluent_kafka import Producer

    name = topic()
    # the topic and its leader known first: records produced while librdkafka waits for an auto-created topic can
    # leave its queue one by one
    kctl("topics", "create", name, "-b", broker.bootstrap, "--partitions", "2")
    for codec in ("gzip", "zstd"):
        # one batch per codec: librdkafka sends a batch uncompressed when compressing would not shrink it, which
        # a lone 30-byte record (a batch cut early by linger.ms on a loaded machine) would not
        producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": codec,
                             "linger.ms": 60000, "batch.num.messages": 5})
        producer.list_topics(name, timeout=30)
        for i in range(5):
            producer.produce(name, b"%s-%d" % (codec.encode(), i), key=b"k%d" % i, partition=0,
                             headers=[("codec", codec.encode()), ("n", None)])
        producer.flush(30)
    assert kcat("-b", broker.bootstrap, "-P", "-t", name, "-p", "1", "-K", ":",
                input=b"kk:from kcat\n").returncode == 0

    out = kctl("consume", name, "-b", broker.bootstrap, "-e", "-f", "%p %o %k=%s %h %c\\n").stdout.splitlines()
    assert out[:10] == [f"0 {i} k{i % 5}={c}-{i % 5} codec={c},n=NULL {c}"
                        for i, c in enumerate(["gzip"] * 5 + ["zstd"] * 5)]
    assert out[10:] == ["1 0 kk=from kcat  none"]

    docs = [json.loads(line) for line in kctl("consume", name, "-b", broker.bootstrap, "-p", "0", "-o", "-2",
                                              "-e", "--json").stdout.splitlines()]
    assert [(d["offset"], d["key"], d["value"]) for d in docs] == [(8, "k3", "zstd-3"), (9, "k4", "zstd-4")]
    assert docs[0]["headers"] == [{"key": "codec", "value": "zstd"}, {"key": "n", "value": None}]
    # kcat's -o spellings: an absolute offset with -c, the end (nothing), a timestamp
    assert kctl("consume", name, "-b", broker.bootstrap, "-p", "0", "-o", "3", "-c", "2").stdout == "gzip-3\ngzip-4\n"
    assert kctl("consume", name, "-b", broker.bootstrap, "-o", "end", "-e").stdout == ""
    ts = docs[0]["timestamp"]
    later = kctl("consume", name, "-b", broker.bootstrap, "-p", "0", "-o", f"s@{ts}", "-e", "-K", "/").stdout
    assert later.splitlines()[-2:] == ["k3/zstd-3", "k4/zstd-4"]
    assert "expected beginning" in kctl("consume", name, "-b", broker.bootstrap, "-o", "soon", code=2).output
    assert "does not exist" in kctl("consume", "nope-" + name, "-b", broker.bootstrap, "-e", code=1).output


def test_read_committed_hides_an_aborted_transaction(broker):
    from confluent_kafka import Producer

    name = topic()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tx-" + name})
    producer.init_transactions(30)
    for outcome, values in (("commit", [b"c1", b"c2"]), ("abort", [b"a1", b"a2", b"a3"]), ("commit", [b"c3"])):
        producer.begin_transaction()
        for value in values:
            producer.produce(name, value, partition=0)
        producer.flush(30)
        producer.commit_transaction(30) if outcome == "commit" else producer.abort_transaction(30)

    committed = kctl("consume", name, "-b", broker.bootstrap, "-p", "0", "-e",
                     "--isolation-level", "read_committed").stdout
    assert committed == "c1\nc2\nc3\n"
    everything = kctl("consume", name, "-b", broker.bootstrap, "-p", "0", "-e").stdout
    assert everything == "c1\nc2\na1\na2\na3\nc3\n"  # read_uncommitted: the aborted records too, never markers


def test_group_offsets_start_and_commit(broker):
    from kcli.client import KafkaClient

    name = topic()
    kctl("produce", name, "-b", broker.bootstrap, "-p", "0", input=b"".join(b"r%d\n" % i for i in range(6)))
    group = "grp-" + name
    assert kctl("consume", name, "-b", broker.bootstrap, "-G", group, "-c", "4").stdout == "r0\nr1\nr2\nr3\n"
    with KafkaClient(broker.bootstrap) as client:
        assert client.offset_fetch(group, [(name, 0)]) == {(name, 0): 4}
    assert kctl("consume", name, "-b", broker.bootstrap, "-G", group, "-e").stdout == "r4\nr5\n"
    with KafkaClient(broker.bootstrap) as client:
        assert client.offset_fetch(group, [(name, 0)]) == {(name, 0): 6}


def test_a_gone_leader_is_refreshed_and_the_batches_resent(broker):
    from kcli.client import KafkaClient
    from kcli.client.produce import Producer, ProducerRecord

    name = topic()
    with KafkaClient(broker.bootstrap) as client:
        producer = Producer(client, name, linger_ms=0)
        producer._leaders = {p: 99 for p in producer._leaders}  # stale metadata: a broker that is not there
        for i in range(3):
            producer.send(ProducerRecord(b"v%d" % i, b"k%d" % i))
        summary = producer.close()
    assert summary.ok and summary.records == 3, summary.to_json()
    assert sorted(m.value() for m in read_all(broker.bootstrap, name, 3)) == [b"v0", b"v1", b"v2"]
