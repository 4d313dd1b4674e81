"""Real Kafka 0.7 clients (the npm packages kafka 0.2.3 and franz-kafka 0.7.5, on Node.js) produce and consume through
a `kctl broker run` process's legacy 0.7 listener: static and ZooKeeper-based (in a chroot), gzip and snappy, across
segment boundaries, and after a kill -9. One broker for the module; the clients are installed once per machine.

franz-kafka's ZooKeeper consumer assigns partitions correctly only while one topic is registered: its test runs
first, before the other tests add topics.
"""

from __future__ import annotations

import signal
import uuid

import pytest

from broker_support import BrokerProcess, free_port
from kafka07_support import Client07, NpmUnavailable, install_npm_clients07, run_node
from kcli.protocol.legacy07 import FetchRequest07, MultiFetchRequest07, OffsetsRequest07
from kcli.records.compression import Codec
from kcli.records.message07 import encode_message, scan_message_set
from kcli.zk.registry07 import parse_broker_info

pytestmark = [pytest.mark.broker_process, pytest.mark.zookeeper]

SEGMENT_BYTES = 300


@pytest.fixture(scope="module")
def node_modules():
    try:
        return install_npm_clients07()
    except NpmUnavailable as exc:
        pytest.skip(f"the 0.7 npm clients cannot be installed: {exc}")


@pytest.fixture(scope="module")
def chroot07():
    return f"/kafka07-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def broker07(tmp_path_factory, zookeeper, chroot07, node_modules):
    port07 = free_port()
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("broker07") / "kafka-logs", [
        f"kafka07.listeners=PLAINTEXT://127.0.0.1:{port07}",
        f"kafka07.zookeeper.connect={zookeeper.connect}{chroot07}",
        "kafka07.log.file.size=%d" % SEGMENT_BYTES,
        "kafka07.log.flush.interval=1",
        "kafka07.log.default.flush.scheduler.interval.ms=100",
        "kafka07.topic.partition.count.map=zk-topic:2",
    ])
    process.port07 = port07  # type: ignore[attr-defined]
    process.start()
    yield process
    if process.proc is not None:
        assert process.stop() == 0, process.log()


def _segments(broker: BrokerProcess, topic: str, partition: int = 0):
    directory = broker.log_dir.parent / (broker.log_dir.name + "-kafka07") / f"{topic}-{partition}"
    return sorted(directory.glob("*.kafka"))


def test_franz_kafka_finds_the_broker_in_its_zookeeper_chroot(broker07, zookeeper, root, chroot07, node_modules):
    got = run_node(node_modules, "franz.js", "zk", zookeeper.connect, chroot07, "zk-topic", "gzip", 10, "zk")
    assert sorted(got["messages"]) == sorted(f"zk-gzip-{i}" for i in range(10))
    # the 0.7 registry, in the chroot: /brokers/ids/<id> = creator:host:port, /brokers/topics/<t>/<id> = partitions
    value, _stat = root.get(f"{chroot07}/brokers/ids/0")
    creator, host, port = parse_broker_info(value.decode())
    assert (host, port) == ("127.0.0.1", broker07.port07) and creator.startswith("127.0.0.1-")
    assert root.get_children(f"{chroot07}/brokers/topics") == ["zk-topic"]
    assert root.get(f"{chroot07}/brokers/topics/zk-topic/0")[0] == b"2"
    # the client's own consumer registry went to the same chroot (zkjs's root), none to ZooKeeper's top
    assert root.get_children(f"{chroot07}/consumers/franz-kafka/ids")
    assert not root.exists("/brokers/ids/0")


def test_kafka_023_produces_and_consumes_across_segments(broker07, node_modules):
    count = 30
    got = run_node(node_modules, "kafka023.js", broker07.port07, "node-kafka", 0, count)
    sent = [f"kafka023-{i}" for i in range(count)]
    assert got["messages"] == sent
    # its offsets: byte positions, each message's next offset = offset + 4 + message length
    entries = [encode_message(p.encode(), magic=0) for p in sent]
    ends = [sum(len(e) for e in entries[: i + 1]) for i in range(count)]
    assert got["offsets"] == ends
    segments = _segments(broker07, "node-kafka")
    assert len(segments) > 1
    # the stored segments, byte for byte: the produced messages, named by the byte offset of their first message
    assert b"".join(s.read_bytes() for s in segments) == b"".join(entries)
    starts = [int(s.name.split(".")[0]) for s in segments]
    assert starts[0] == 0 and set(starts[1:]) <= set(ends)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy"])
def test_franz_kafka_produces_and_consumes_each_codec(broker07, node_modules, codec):
    got = run_node(node_modules, "franz.js", "static", broker07.port07, f"franz-{codec}", codec, 12)
    # every message once; franz-kafka compresses each batch of 5 asynchronously (snappy's callback) and sends it when
    # done, so on a loaded machine a later batch can arrive first: the order is the broker's, checked below
    assert sorted(got["messages"]) == sorted(f"franz-{codec}-{i}" for i in range(12))
    stored = b"".join(s.read_bytes() for s in _segments(broker07, f"franz-{codec}"))
    messages = scan_message_set(stored).messages
    assert all(m.magic == 1 and m.codec == Codec[codec.upper()] for m in messages)
    stored_batches = [[i.payload.decode() for i in m.inner()] for m in messages]
    if codec == "none":
        assert [p for batch in stored_batches for p in batch] == got["messages"]
    else:
        # the consumer decompresses each wrapper asynchronously too (client/message.js: zlib.gunzip and
        # snappy.uncompress with callbacks), so under load its order of wrappers may
        # differ from the log's; each wrapper holds one batch of consecutive messages, stored once
        assert sorted(p for batch in stored_batches for p in batch) == sorted(got["messages"])
        for batch in stored_batches:
            numbers = [int(p.rsplit("-", 1)[1]) for p in batch]
            assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), stored_batches


def test_multi_fetch_of_both_clients_topics(broker07):
    """MULTIFETCH, which neither npm client implements, over what they wrote (frames built from the seed's layout)."""
    with Client07(broker07.port07) as client:
        multi = client.request(MultiFetchRequest07((FetchRequest07("node-kafka", 0, 0, 1 << 20),
                                                    FetchRequest07("franz-gzip", 0, 0, 1 << 20))))
        assert [r.error_code for r in multi.responses] == [0, 0]
        assert scan_message_set(multi.responses[0].messages).messages[0].payload == b"kafka023-0"
        assert scan_message_set(multi.responses[1].messages).messages[0].codec == Codec.GZIP


def test_kill_9_then_the_log_recovers_to_its_last_valid_message(broker07, root, chroot07, node_modules):
    with Client07(broker07.port07) as client:
        (end,) = client.request(OffsetsRequest07("node-kafka", 0, -1, 1)).offsets
    broker07.stop(signal.SIGKILL)
    last = _segments(broker07, "node-kafka")[-1]
    kept = last.read_bytes()
    with last.open("ab") as f:  # what a crash in the middle of a write leaves
        f.write(encode_message(b"torn", magic=0)[:-2])
    broker07.start()
    assert last.read_bytes() == kept
    assert "kafka07: recovered" in broker07.log()
    with Client07(broker07.port07) as client:
        assert client.request(OffsetsRequest07("node-kafka", 0, -1, 1)).offsets == (end,)
    # the registration of the killed broker's session is replaced by this one's
    creator, _host, port = parse_broker_info(root.get(f"{chroot07}/brokers/ids/0")[0].decode())
    assert port == broker07.port07
    got = run_node(node_modules, "kafka023.js", broker07.port07, "node-kafka", 0, 1)
    assert got["messages"] == ["kafka023-0"]  # reads from offset 0 again: the old data is all there
    with Client07(broker07.port07) as client:  # and what it wrote after the restart follows the recovered end
        response = client.request(FetchRequest07("node-kafka", 0, end, 1 << 20))
        assert [m.payload for m in scan_message_set(response.messages).messages] == [b"kafka023-0"]


def test_bad_input_gets_0_7s_answer_from_the_process(broker07):
    """A wrong request type, a truncated message set and a CRC mismatch close the connection; a fetch in the
    middle of a message answers error 2; the broker logs one line each and keeps serving, never a traceback."""
    import struct

    from kcli.protocol.legacy07 import ErrorCode07, ProduceRequest07, encode_frame

    frames = [encode_frame(7, b"\x00\x01t"),
              encode_frame(0, b"\x00\x03bad\x00\x00\x00\x00" + struct.pack(">i", 30) + encode_message(b"short")),
              encode_frame(0, b"\x00\x03bad\x00\x00\x00\x00" + struct.pack(">i", 15) + encode_message(b"abcde", crc=1))]
    for frame in frames:
        with Client07(broker07.port07) as client:
            client.send_raw(frame)
            assert client.closed_by_broker()
    with Client07(broker07.port07) as client:
        client.send(ProduceRequest07("bad", 0, encode_message(b"fine")))
        response = client.request(FetchRequest07("node-kafka", 0, 2, 1 << 20))
        assert response.error_code == ErrorCode07.INVALID_MESSAGE
        assert client.request(OffsetsRequest07("bad", 0, -1, 1)).offsets == (len(encode_message(b"fine")),)
    log = broker07.log()
    assert "no request type 7" in log and "CRC mismatch" in log and "Traceback" not in log


def test_modern_clients_and_0_7_clients_see_their_own_topics(broker07):
    """The two listeners share a process, not topics: a modern produce lands in the modern log dir, the 0.7
    topics are not in the modern metadata, and the 0.7 listener does not see the modern topic."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient

    producer = Producer({"bootstrap.servers": broker07.bootstrap})
    producer.produce("modern-topic", b"v2 record")
    assert producer.flush(30) == 0
    topics = AdminClient({"bootstrap.servers": broker07.bootstrap}).list_topics(timeout=30).topics
    assert "modern-topic" in topics and "node-kafka" not in topics and "franz-gzip" not in topics
    assert (broker07.log_dir / "modern-topic-0").is_dir() and not (broker07.log_dir / "node-kafka-0").exists()
    with Client07(broker07.port07) as client:
        assert client.request(OffsetsRequest07("modern-topic", 0, -1, 5)).offsets == (0,)  # an empty 0.7 log


def test_what_the_clients_wrote_verifies_and_converts(broker07, tmp_path):
    """The migration path over real clients' data: kctl verify finds the 0.7 log dir clean, and kctl convert-07
    turns kafka 0.2.3's and franz-kafka's partitions into modern ones holding the same payloads."""
    from kcli.records import BatchReader
    from kcli.tools.kafka07 import convert, dump_segments
    from kcli.tools.verify import verify

    log_dir07 = broker07.log_dir.parent / (broker07.log_dir.name + "-kafka07")
    report = verify([str(log_dir07)], deep=True)
    assert report.is_clean(), report.problems
    for topic in ("node-kafka", "franz-snappy"):
        source = log_dir07 / f"{topic}-0"
        expected = [p for d in dump_segments([str(source)], deep=True) for m in d.messages
                    for p in (m.inner or (m.payload,))]
        result = convert(str(source), str(tmp_path / "logs" / f"{topic}-0"), apply=True)
        assert result.applied and result.records == len(expected)
        values = [r.value for s in sorted((tmp_path / "logs" / f"{topic}-0").glob("*.log"))
                  for b in BatchReader(s.read_bytes()) for r in b.records()]
        assert values == expected
