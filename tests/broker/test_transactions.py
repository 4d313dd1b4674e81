"""Transactions (KIP-98) against a real `kctl broker run`, with real clients: confluent-kafka and kafka-python
transactional producers commit and abort, read_committed consumers see exactly the committed records, zombies
are fenced, an exactly-once consume-transform-produce pipeline survives kill -9, timed-out transactions are
aborted, a broker restart in the middle of a transaction completes it, and `kctl transactions`, `kctl dump-log
--transaction-log-decoder` and `kctl verify` see the result. One broker for the module; the last test stops it."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import kctl_fork
from broker_support import BrokerProcess, free_port, read_response
from kcli.protocol import ApiKey, decode_response, encode_request, minimal_request
from kcli.records import Record, build_record_batch
from support import REPO

OVERRIDES = ["transaction.state.log.num.partitions=5", "offsets.topic.num.partitions=5",
             "group.initial.rebalance.delay.ms=0", "transaction.abort.timed.out.transaction.cleanup.interval.ms=500"]
WORKER = Path(__file__).resolve().parent.parent / "txn_worker.py"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("txn") / "kafka-logs", OVERRIDES)
    process.start()
    yield process
    if process.proc is not None:
        code = process.stop()
        assert code == 0, process.log()


def _topic(broker, partitions: int = 2) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    return name


def _consume(broker, topic: str, isolation: str, expected: int | None = None, timeout: float = 15.0) -> list:
    """(partition, offset, value) of every record of ``topic``, read from the start at ``isolation``."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"check-{uuid.uuid4().hex[:6]}",
                         "isolation.level": isolation, "enable.auto.commit": False, "enable.partition.eof": True})
    meta = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, -2) for p in meta.partitions])
    got, at_end = [], set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            if len(at_end) == len(meta.partitions) and (expected is None or len(got) >= expected):
                break
            continue
        if msg.error():
            if msg.error().code() == -191:  # _PARTITION_EOF
                at_end.add(msg.partition())
            continue
        at_end.discard(msg.partition())
        got.append((msg.partition(), msg.offset(), msg.value()))
    consumer.close()
    return sorted(got)


def _values(records: list) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for partition, _offset, value in records:
        out.setdefault(partition, []).append(value)
    return out


def _kctl(*args: str, check: bool = True, fresh: bool = False) -> subprocess.CompletedProcess:
    """kctl as a process forked from one that imported kcli once (tests/kctl_fork.py), or ``fresh``: a new
    interpreter, as an operator starts it."""
    if fresh:
        result = subprocess.run([sys.executable, "-m", "kcli", *args], capture_output=True, text=True, timeout=60,
                                cwd=REPO)
    else:
        result = kctl_fork.run(*args, cwd=REPO, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr + result.stdout
    return result


def test_confluent_commit_and_abort(broker):
    """read_committed sees exactly the committed records in order; read_uncommitted sees the aborted ones too;
    while a transaction is open the LSO holds read_committed back, and ListOffsets read_committed says so."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = _topic(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"ck-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"c1-%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"a-%d" % i, partition=i % 2)
    producer.flush(30)
    producer.abort_transaction(30)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    plain.produce(topic, value=b"plain", partition=0)
    assert plain.flush(30) == 0
    producer.begin_transaction()
    for i in range(6):
        producer.produce(topic, value=b"c2-%d" % i, partition=i % 2)
    producer.flush(30)

    # open: partition 0's LSO is the transaction's first offset, its high watermark past it
    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe", "isolation.level": "read_committed"})
    lso = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    probe.close()
    probe = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "probe", "isolation.level": "read_uncommitted"})
    hw = probe.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    probe.close()
    assert hw - lso == 3, (lso, hw)  # the three open records of partition 0
    open_view = _values(_consume(broker, topic, "read_committed"))
    assert open_view[0] == [b"c1-0", b"c1-2", b"c1-4", b"c1-6", b"c1-8", b"plain"]

    producer.commit_transaction(30)
    committed = _values(_consume(broker, topic, "read_committed", expected=17))
    assert committed == {0: [b"c1-%d" % i for i in (0, 2, 4, 6, 8)] + [b"plain"] + [b"c2-%d" % i for i in (0, 2, 4)],
                         1: [b"c1-%d" % i for i in (1, 3, 5, 7, 9)] + [b"c2-%d" % i for i in (1, 3, 5)]}
    everything = _values(_consume(broker, topic, "read_uncommitted", expected=27))
    assert everything[0] == ([b"c1-%d" % i for i in (0, 2, 4, 6, 8)] + [b"a-%d" % i for i in (0, 2, 4, 6, 8)]
                             + [b"plain"] + [b"c2-%d" % i for i in (0, 2, 4)])
    assert len(everything[1]) == 13


def test_kafka_python_commit_and_abort(broker):
    from kafka import KafkaConsumer, KafkaProducer

    topic = _topic(broker, 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"kp-{topic}")
    producer.init_transactions()
    for round_, outcome in enumerate(("commit", "abort", "commit")):
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, b"%s-%d-%d" % (outcome.encode(), round_, i))
        producer.flush()
        producer.commit_transaction() if outcome == "commit" else producer.abort_transaction()
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", consumer_timeout_ms=30_000)
    try:
        # the 10 committed records, not a wait for consumer_timeout_ms after the last: the aborted 5 lie between
        # them (and only the last commit marker after them), so a leaked aborted record shows among the 10
        seen = [next(consumer).value for _ in range(10)]
    finally:
        consumer.close()
    assert seen == [b"commit-0-%d" % i for i in range(5)] + [b"commit-2-%d" % i for i in range(5)]
    assert [v for _p, _o, v in _consume(broker, topic, "read_uncommitted", expected=15)][5:10] == \
        [b"abort-1-%d" % i for i in range(5)]


def test_a_new_instance_fences_the_old_one(broker):
    """InitProducerId bumps the epoch: the older instance's next transactional call fails as fenced, with
    confluent-kafka (PRODUCER_FENCED, fatal) and kafka-python."""
    from confluent_kafka import KafkaException, Producer
    from kafka import KafkaProducer

    topic = _topic(broker, 1)
    old = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"fence-{topic}"})
    old.init_transactions(30)
    old.begin_transaction()
    old.produce(topic, value=b"zombie")
    old.flush(30)
    new = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"fence-{topic}"})
    new.init_transactions(30)  # aborts the old one's open transaction first (CONCURRENT_TRANSACTIONS, retried)
    with pytest.raises(KafkaException) as raised:
        old.commit_transaction(30)
    assert raised.value.args[0].fatal() or raised.value.args[0].name() in ("PRODUCER_FENCED", "_FENCED")
    new.begin_transaction()
    new.produce(topic, value=b"new")
    new.commit_transaction(30)
    assert [v for _p, _o, v in _consume(broker, topic, "read_committed", expected=1)] == [b"new"]

    kp_old = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"kfence-{topic}")
    kp_old.init_transactions()
    kp_new = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"kfence-{topic}")
    kp_new.init_transactions()
    kp_old.begin_transaction()
    kp_old.send(topic, b"kp-zombie")
    with pytest.raises(Exception) as raised_kp:
        kp_old.commit_transaction()
    assert "Fenced" in type(raised_kp.value).__name__ or "fenced" in str(raised_kp.value).lower(), raised_kp.value
    kp_old.close(timeout=1)
    kp_new.close()


def _worker(broker, txn_id: str, group: str, source: str, sink: str, open_after: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(WORKER), broker.bootstrap, txn_id, group, source, sink, "2",
                             str(open_after)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)


def _wait_line(process: subprocess.Popen, wanted: str, timeout: float = 60) -> list[str]:
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line.strip())
        if line.startswith(wanted):
            return lines
    raise AssertionError(f"worker never printed {wanted}: {lines} (exit {process.poll()})")


def test_exactly_once_across_kill_9_and_a_fenced_zombie(broker):
    """consume-transform-produce with send_offsets_to_transaction: instance A is SIGKILLed with a transaction
    open, instance B takes over and is SIGSTOPped with one open, instance C fences B and finishes; B, continued,
    is told it is fenced. Every input has exactly one output, in order, for read_committed."""
    from confluent_kafka import Producer

    source, sink = _topic(broker), _topic(broker)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(120):
        producer.produce(source, value=b"%03d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    txn_id, group = f"eos-{source}", f"eos-group-{source}"

    a = _worker(broker, txn_id, group, source, sink, open_after=2)
    _wait_line(a, "OPEN")
    a.kill()  # kill -9 in the middle of a transaction: outputs written, offsets sent, no commit
    a.wait()
    b = _worker(broker, txn_id, group, source, sink, open_after=1)
    _wait_line(b, "OPEN")
    b.send_signal(signal.SIGSTOP)  # a zombie: alive, holding an open transaction
    try:
        c = _worker(broker, txn_id, group, source, sink, open_after=-1)
        _wait_line(c, "DONE", timeout=90)
        assert c.wait(30) == 0
    finally:
        b.send_signal(signal.SIGCONT)
    b.stdin.write("go\n")
    b.stdin.flush()
    fenced = _wait_line(b, "FENCED")
    assert b.wait(30) == 3, fenced

    outputs = _values(_consume(broker, sink, "read_committed", expected=120))
    assert outputs == {p: [b"out-%03d" % i for i in range(p, 120, 2)] for p in (0, 1)}
    uncommitted = _consume(broker, sink, "read_uncommitted", expected=121)
    assert len(uncommitted) > 120  # the zombies' aborted outputs are in the log, never delivered above


def test_timed_out_transaction_is_aborted(broker):
    """A transaction left open past transaction.timeout.ms is fenced and aborted by the coordinator: the LSO
    moves on and the producer is told it was fenced."""
    from confluent_kafka import KafkaException, Producer

    from kcli.client import KafkaClient
    from kcli.client.transactions import describe_transactions

    topic = _topic(broker, 1)
    txn_id = f"slow-{topic}"
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 4000, "message.timeout.ms": 4000})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"too-slow")
    producer.flush(30)
    with KafkaClient(broker.bootstrap) as client:
        before = describe_transactions(client, [txn_id])[txn_id]
        assert (before.state, before.partitions, before.timeout_ms) == ("Ongoing", ((topic, 0),), 4000)
        deadline = time.monotonic() + 20
        while (after := describe_transactions(client, [txn_id])[txn_id]).state != "CompleteAbort":
            assert time.monotonic() < deadline, after
            time.sleep(0.2)
    assert after.producer_epoch == before.producer_epoch + 1  # fenced, then aborted
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)
    assert _consume(broker, topic, "read_committed", timeout=5) == []
    assert [v for _p, _o, v in _consume(broker, topic, "read_uncommitted", expected=1)] == [b"too-slow"]
    shown = json.loads(_kctl("transactions", "describe", txn_id, "-b", broker.bootstrap, "--json").stdout)
    assert shown["transactions"][0]["state"] == "CompleteAbort"


def _call(port: int, api_key: ApiKey, version: int, body):
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(encode_request(api_key, version, 7, "kctl-test", body))
        return decode_response(api_key, version, read_response(sock))[1]


def test_kctl_transactions_list_describe_find_hanging_abort(broker):
    """A transactional batch no coordinator knows about (a hanging transaction, written with a raw Produce of an
    idempotent producer id) holds the LSO back; find-hanging names it, abort --start-offset ends it."""
    from confluent_kafka import Producer

    topic = _topic(broker, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"cli-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"listed")
    producer.commit_transaction(30)
    listed = json.loads(_kctl("transactions", "list", "-b", broker.bootstrap, "--json").stdout)["transactions"]
    mine = [t for t in listed if t["transactional_id"] == f"cli-{topic}"]
    assert mine and mine[0]["state"] == "CompleteCommit" and mine[0]["coordinator_id"] == 0
    ongoing = json.loads(_kctl("transactions", "list", "--state", "Ongoing", "-b", broker.bootstrap,
                               "--json").stdout)["transactions"]
    assert all(t["state"] == "Ongoing" for t in ongoing)
    missing = _kctl("transactions", "describe", "no-such-id", "-b", broker.bootstrap, check=False, fresh=True)
    assert missing.returncode == 1 and "TRANSACTIONAL_ID_NOT_FOUND" in missing.stderr

    pid = _call(broker.port, ApiKey.INIT_PRODUCER_ID, 4, minimal_request(ApiKey.INIT_PRODUCER_ID, 4)).producer_id
    batch = build_record_batch([Record(0, int(time.time() * 1000), b"k", b"hanging")], producer_id=pid,
                               producer_epoch=0, base_sequence=0, is_transactional=True)
    # a transactional batch must name a transactional id (Kafka answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    # otherwise, with or without an authorizer); no coordinator ever heard of this one
    produced = _call(broker.port, ApiKey.PRODUCE, 9, minimal_request(ApiKey.PRODUCE, 9, topic=topic, records=batch,
                                                                     transactional_id=f"hanging-{topic}"))
    start = produced.responses[0].partition_responses[0].base_offset
    assert start == 2  # after the committed record and its marker
    hanging = _kctl("transactions", "find-hanging", "-t", topic, "--max-transaction-timeout", "0",
                    "-b", broker.bootstrap, "--json", check=False)
    assert hanging.returncode == 1, hanging.stderr
    found = json.loads(hanging.stdout)["hanging"]
    assert [(h["producer_id"], h["start_offset"], h["transactional_id"]) for h in found] == [(pid, start, None)]
    _kctl("transactions", "abort", "-t", topic, "-p", "0", "--start-offset", str(start), "-b", broker.bootstrap)
    assert json.loads(_kctl("transactions", "find-hanging", "-t", topic, "--max-transaction-timeout", "0",
                            "-b", broker.bootstrap, "--json").stdout)["hanging"] == []
    assert [v for _p, _o, v in _consume(broker, topic, "read_committed", expected=1)] == [b"listed"]


def test_broker_restart_in_the_middle_of_a_transaction(broker):
    """The coordinator reloads __transaction_state after a restart: a transaction open across it commits (the
    producer retries through the restart), and the committed offsets it carried become visible."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic, source = _topic(broker, 1), _topic(broker, 1)
    group = f"restart-{topic}"
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"restart-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=b"across-%d" % i)
    producer.send_offsets_to_transaction([TopicPartition(source, 0, 42)], consumer.consumer_group_metadata(), 30)
    producer.flush(30)
    assert broker.stop() == 0
    broker.start()
    producer.commit_transaction(60)
    assert [v for _p, _o, v in _consume(broker, topic, "read_committed", expected=5)] == \
        [b"across-%d" % i for i in range(5)]
    assert consumer.committed([TopicPartition(source, 0)], 30)[0].offset == 42
    consumer.close()
    assert "loaded" in broker.log() and "transaction coordinator" in broker.log()


def test_dump_log_shows_the_states_and_verify_is_clean(broker):
    """Last: the broker stops; `kctl dump-log --transaction-log-decoder` shows the coordinator's states in
    __transaction_state, `kctl verify` finds the log dir (markers, .txnindex, snapshots) clean, and `kctl compact`
    cleans the internal topics by Kafka's rules and leaves them clean."""
    assert broker.stop() == 0, broker.log()
    bad = [line for line in broker.log().splitlines() if "Traceback" in line or "internal error" in line]
    assert not bad, broker.log()
    states = set()
    for segment in sorted(broker.log_dir.glob("__transaction_state-*/*.log")):
        out = _kctl("dump-log", "--transaction-log-decoder", str(segment)).stdout
        states |= {int(s) for s in __import__("re").findall(r'"transactionStatus":(\d)', out)}
    assert states >= {0, 1, 2, 3, 4, 5}, states  # Empty Ongoing PrepareCommit PrepareAbort CompleteCommit CompleteAbort
    assert list(broker.log_dir.glob("*/*.txnindex")), "no aborted transaction was indexed"
    verified = _kctl("verify", str(broker.log_dir), check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # the cleaner's rules for aborted data and markers: __consumer_offsets (TxnOffsetCommits and markers) and
    # __transaction_state compact, provably equivalent, and stay clean
    internal = [str(p) for p in sorted(broker.log_dir.glob("__*-*"))]
    compacted = _kctl("compact", "--include-active", "--verify", "--json", *internal, check=False)
    assert compacted.returncode == 0, compacted.stdout[-3000:] + compacted.stderr
    verified = _kctl("verify", str(broker.log_dir), check=False)
    assert verified.returncode == 0, verified.stdout + verified.stderr
