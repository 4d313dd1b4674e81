"""The legacy Kafka 0.7 listener in-process over a real socket, with frames built from the seed's layout: the five
request types, byte offsets across segment boundaries, compressed sets, 0.7's error codes and bad input (always 0.7's
answer, never a traceback), and recovery after a torn write."""

from __future__ import annotations

import struct
import time

import pytest

from kafka07_support import Client07, InProcessListener07, settings
from kcli.protocol.legacy07 import (
    ErrorCode07,
    FetchRequest07,
    FetchResponse07,
    MultiFetchRequest07,
    MultiProduceRequest07,
    OffsetsRequest07,
    ProduceRequest07,
    encode_frame,
)
from kcli.records.compression import Codec
from kcli.records.message07 import build_message_set, encode_message, scan_message_set

EARLIEST, LATEST = -2, -1


@pytest.fixture
def listener(tmp_path):
    running = InProcessListener07(settings(tmp_path / "k07", segment_bytes=100))
    yield running
    running.stop()


def _fetch(client: Client07, topic: str, offset: int, partition: int = 0, max_size: int = 1 << 20) -> FetchResponse07:
    response = client.request(FetchRequest07(topic, partition, offset, max_size))
    assert isinstance(response, FetchResponse07)
    return response


def _wait_for(predicate, what: str, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _consume(client: Client07, topic: str, partition: int = 0, start: int = 0, max_size: int = 1 << 20):
    """What a 0.7 SimpleConsumer loop reads: (offset of each message, payload), until a fetch returns nothing."""
    out, offset = [], start
    while True:
        response = _fetch(client, topic, offset, partition, max_size)
        assert response.error_code == ErrorCode07.NO_ERROR
        if not response.messages:
            return out, offset
        for message in scan_message_set(response.messages).messages:
            out += [(offset + message.position, inner.payload) for inner in message.inner()]
        offset += len(response.messages)


def _consume_until(client: Client07, topic: str, count: int, partition: int = 0):
    """_consume once ``count`` messages are there (a 0.7 produce has no response to wait on)."""
    return _wait_for(lambda: (r if len((r := _consume(client, topic, partition))[0]) >= count else None),
                     f"{count} messages in {topic}-{partition}")


def test_produce_then_fetch_by_byte_offsets(listener):
    payloads = [b"one", b"two", b"three"]
    sent = build_message_set(payloads, magic=0)
    with listener.client() as client:
        client.send(ProduceRequest07("t", 0, sent))  # no response: the fetch below waits on the data
        response = _wait_for(lambda: _fetch(client, "t", 0).messages or None, "the produced messages")
        assert response == sent  # the broker hands back the bytes as stored
        messages = scan_message_set(response).messages
        assert [m.payload for m in messages] == payloads
        # the next offset is offset + 4 + message length
        assert [m.position for m in messages] == [0, 4 + 5 + 3, 2 * (4 + 5 + 3)]
        second = _fetch(client, "t", messages[1].position)
        assert scan_message_set(second.messages).messages[0].payload == b"two"
        end = len(sent)
        assert client.request(OffsetsRequest07("t", 0, LATEST, 10)).offsets == (end, 0)
        assert client.request(OffsetsRequest07("t", 0, EARLIEST, 10)).offsets == (0,)
        assert _fetch(client, "t", end).messages == b""  # caught up: an empty set, no error
    stored = (listener.settings.log_dir / "t-0" / "00000000000000000000.kafka").read_bytes()
    assert stored == sent  # byte for byte: [size][magic 0][crc][payload] per message


def test_segments_roll_and_fetches_cross_their_boundaries(listener):
    with listener.client() as client:
        for i in range(12):
            message = encode_message(b"message-%02d" % i)
            client.send(ProduceRequest07("roll", 1, message))
        got, end = _consume_until(client, "roll", 12, 1)
        assert [p for _o, p in got] == [b"message-%02d" % i for i in range(12)]
        offsets = [o for o, _p in got]
        names = sorted(p.name for p in (listener.settings.log_dir / "roll-1").glob("*.kafka"))
        assert len(names) > 1
        starts = [int(n.split(".")[0]) for n in names]
        assert all(len(n) == len("00000000000000000000.kafka") for n in names)
        assert set(starts) <= set(offsets) | {end}  # each segment is named by the byte offset of its first message
        # a fetch answers within one segment: the one holding the offset
        second = starts[1]
        before = _fetch(client, "roll", offsets[offsets.index(second) - 1], 1)
        assert len(scan_message_set(before.messages).messages) == 1
        # offsets: one per segment start, plus the end when the last segment holds data, newest first
        points = [*starts, end] if end > starts[-1] else starts
        latest = client.request(OffsetsRequest07("roll", 1, LATEST, 100)).offsets
        assert latest == tuple(reversed(points)) and latest[0] == end
        assert client.request(OffsetsRequest07("roll", 1, LATEST, 2)).offsets == latest[:2]
        # multi-fetch over both partitions and a segment boundary
        multi = client.request(MultiFetchRequest07((FetchRequest07("roll", 1, second, 1 << 20),
                                                    FetchRequest07("roll", 0, 0, 1 << 20),
                                                    FetchRequest07("roll", 7, 0, 1 << 20))))
        assert [r.error_code for r in multi.responses] == [0, 0, ErrorCode07.WRONG_PARTITION]
        assert scan_message_set(multi.responses[0].messages).messages[0].position == 0
        assert multi.responses[1].messages == b""


def test_multi_produce_and_compressed_sets(listener):
    gzip_set = build_message_set([b"g1", b"g2", b"g3"], codec=Codec.GZIP)
    snappy_set = build_message_set([b"s1", b"s2"], codec=Codec.SNAPPY)
    plain = build_message_set([b"p1"])
    with listener.client() as client:
        client.send(MultiProduceRequest07((ProduceRequest07("a", 0, gzip_set), ProduceRequest07("b", 1, snappy_set),
                                           ProduceRequest07("a", 0, plain))))
        got, end = _consume_until(client, "a", 4)
        # the wrapper's inner messages share its offset; the next message follows the whole wrapper
        assert got == [(0, b"g1"), (0, b"g2"), (0, b"g3"), (len(gzip_set), b"p1")]
        got_b, _ = _consume_until(client, "b", 1, 1)
        assert got_b == [(0, b"s1"), (0, b"s2")]
    assert (listener.settings.log_dir / "a-0" / "00000000000000000000.kafka").read_bytes() == gzip_set + plain


def test_error_codes_of_fetch_and_offsets(listener):
    with listener.client() as client:
        client.send(ProduceRequest07("e", 0, build_message_set([b"x" * 40, b"y"])))
        data = _wait_for(lambda: _fetch(client, "e", 0).messages or None, "the messages")
        end = len(data)
        assert _fetch(client, "e", end + 1).error_code == ErrorCode07.OFFSET_OUT_OF_RANGE
        assert _fetch(client, "e", -5).error_code == ErrorCode07.OFFSET_OUT_OF_RANGE
        assert _fetch(client, "e", 3).error_code == ErrorCode07.INVALID_MESSAGE  # the middle of the first message
        assert _fetch(client, "e", 0, max_size=10).error_code == ErrorCode07.INVALID_FETCH_SIZE
        assert _fetch(client, "e", 0, max_size=-1).error_code == ErrorCode07.INVALID_FETCH_SIZE
        # a fetch size that cuts the second message returns the whole first one only
        first = scan_message_set(data).messages[0]
        assert _fetch(client, "e", 0, max_size=first.entry_size + 3).messages == data[: first.entry_size]
        assert _fetch(client, "e", 0, partition=2).error_code == ErrorCode07.WRONG_PARTITION
        assert client.request(OffsetsRequest07("e", 9, LATEST, 1)).error_code == ErrorCode07.WRONG_PARTITION
        assert _fetch(client, "../e", 0).error_code == ErrorCode07.UNKNOWN  # 0.7's InvalidTopicException
        # the connection still serves after all of that
        assert _fetch(client, "e", 0).messages == data


@pytest.mark.parametrize("frame", [
    pytest.param(encode_frame(9, b"\x00\x01t\x00\x00\x00\x00"), id="unknown-request-type"),
    pytest.param(encode_frame(0, b"\x00\x01t\x00\x00\x00\x00\x00\x00\x00\x20" + encode_message(b"abc")),
                 id="truncated-message-set"),
    pytest.param(encode_frame(0, b"\x00\x01t\x00\x00\x00\x00" + struct.pack(">i", 12) + encode_message(b"abc")[:-1]
                              + b"\x00"), id="torn-last-message"),
    pytest.param(encode_frame(0, b"\x00\x01t\x00\x00\x00\x00" + struct.pack(">i", 12)
                              + encode_message(b"abc", crc=12345)), id="crc-mismatch"),
    pytest.param(encode_frame(0, b"\x00\x01t\x00\x00\x00\x05" + struct.pack(">i", 12) + encode_message(b"abc")),
                 id="wrong-partition"),
    pytest.param(encode_frame(1, b"\x00\x01t\x00\x00"), id="truncated-fetch"),
])
def test_bad_input_closes_the_connection_and_stores_nothing(listener, frame):
    with listener.client() as client:
        client.send_raw(frame)
        assert _wait_for(client.closed_by_broker, "the broker to close the connection")
    with listener.client() as client:  # the listener still serves, and nothing was stored
        assert client.request(OffsetsRequest07("t", 0, LATEST, 10)).offsets == (0,)  # an empty log: its one start
        assert _fetch(client, "t", 0).messages == b""


def test_a_torn_write_is_recovered_to_the_last_valid_message(tmp_path):
    config = settings(tmp_path / "k07")
    running = InProcessListener07(config)
    sent = build_message_set([b"kept-1", b"kept-2"])
    with running.client() as client:
        client.send(ProduceRequest07("r", 0, sent))
        _wait_for(lambda: _fetch(client, "r", 0).messages, "the messages")
    running.stop()
    segment = config.log_dir / "r-0" / "00000000000000000000.kafka"
    (config.log_dir / ".kafka_cleanshutdown").unlink()  # as after a kill -9
    with segment.open("ab") as f:
        f.write(encode_message(b"torn-in-the-middle")[:-4])
    running = InProcessListener07(config)
    try:
        assert segment.read_bytes() == sent
        assert [r.truncated_bytes for r in running.server.logs.recoveries] == [len(encode_message(b"torn-in-the-middle")) - 4]
        with running.client() as client:
            assert client.request(OffsetsRequest07("r", 0, LATEST, 1)).offsets == (len(sent),)
            client.send(ProduceRequest07("r", 0, encode_message(b"after")))
            got, _ = _consume_until(client, "r", 3)
            assert [p for _o, p in got] == [b"kept-1", b"kept-2", b"after"]
    finally:
        running.stop()


def test_data_is_readable_once_flushed(tmp_path):
    running = InProcessListener07(settings(tmp_path / "k07", flush_interval=3))
    try:
        with running.client() as client:
            log = running.server.logs.get_or_create("f", 0)
            log.config.flush_interval_ms = 3_600_000  # only the message count flushes here
            for payload in (b"1", b"2"):
                client.send(ProduceRequest07("f", 0, encode_message(payload)))
            _wait_for(lambda: log.log_end_offset == 2 * len(encode_message(b"1")), "two appends")
            assert _fetch(client, "f", 0).messages == b""  # written, not yet flushed: not visible (0.7's high water mark)
            client.send(ProduceRequest07("f", 0, encode_message(b"3")))
            got, _ = _consume_until(client, "f", 3)
            assert [p for _o, p in got] == [b"1", b"2", b"3"]
    finally:
        running.stop()


def test_the_kafka07_keys_parse_and_default_as_0_7_does(tmp_path):
    from kcli.broker.config import ConfigError, build_config
    from kcli.broker.kafka07 import Kafka07Settings

    config = build_config({"log.dirs": str(tmp_path / "logs"), "kafka07.listeners": "PLAINTEXT://127.0.0.1:9093",
                           "kafka07.topic.partition.count.map": "a:3, b:2", "kafka07.log.retention.hours": "2"})
    settings_ = Kafka07Settings.from_config(config)
    assert (settings_.host, settings_.port, settings_.log_dir) == ("127.0.0.1", 9093, tmp_path / "logs-kafka07")
    assert settings_.manager.topic_partitions == {"a": 3, "b": 2} and settings_.manager.num_partitions == 1
    assert settings_.manager.log.retention_ms == 2 * 3_600_000 and settings_.manager.log.flush_interval_messages == 500
    assert settings_.zookeeper_connect is None
    # unset, the keys hold no value: the listener is off and DescribeConfigs does not list them
    assert build_config({}).values["kafka07.listeners"] is None
    assert build_config({}).values["kafka07.num.partitions"] is None
    for bad in ({"kafka07.listeners": "SSL://127.0.0.1:9093"}, {"kafka07.topic.partition.count.map": "a"},
                {"kafka07.num.partitions": "0"}):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            build_config(bad)


def test_the_time_based_flusher_makes_data_readable(tmp_path):
    running = InProcessListener07(settings(tmp_path / "k07", flush_interval=1000))  # flushes every 100 ms
    try:
        with running.client() as client:
            client.send(ProduceRequest07("timed", 0, encode_message(b"late")))
            got, _ = _consume_until(client, "timed", 1)
            assert got == [(0, b"late")]
            assert running.server.logs.get_or_create("timed", 0).unflushed == 0
    finally:
        running.stop()


def test_an_unreachable_zookeeper_stops_the_start_and_frees_the_port(tmp_path):
    import socket

    from broker_support import free_port
    from kcli.zk.errors import ZooKeeperConnectionError

    port = free_port()
    with pytest.raises(ZooKeeperConnectionError):
        InProcessListener07(settings(tmp_path / "k07", port=port, zookeeper=f"127.0.0.1:{free_port()}/k07",
                                     zookeeper_timeout_s=1.0))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # the listener let go of its port
    assert (tmp_path / "k07" / ".kafka_cleanshutdown").exists()
