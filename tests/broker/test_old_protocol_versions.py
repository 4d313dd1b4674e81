"""The old protocol versions a Kafka 3.7 broker still serves, against a real `kctl broker run`.

kafka-python pinned to old brokers' versions (its ``api_version``) is the real client: 0.8.1 sends Produce v0,
Fetch v0, ListOffsets v0 and OffsetCommit/OffsetFetch v0; 0.8.2 OffsetCommit/OffsetFetch v1; 0.9 Produce v1 and
Fetch v1; 0.10 Produce v2 and Fetch v2; 0.10.1 Fetch v3. The protocol-level tests below check what those versions
carry: stored v2 batches down-converted to magic 0 (Fetch v0-v1) or 1 (v2-v3) with their offsets, compressed
batches as one wrapper, message.downconversion.enable=false and zstd topics refused per partition as Kafka
refuses them, and ListOffsets v0's offsets before a time. This broker has no ZooKeeper: OffsetCommit/OffsetFetch
v0 use the group coordinator (__consumer_offsets) like v1+; test_zookeeper_mode.py has the ZooKeeper side.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.record.memory_records import MemoryRecords
from kafka.structs import OffsetAndMetadata
from kio.schema.errors import ErrorCode

from broker_support import BrokerProcess, free_port, read_response
from kcli.protocol import ApiKey, decode_response, encode_request, minimal_request
from kcli.records import Record, build_record_batch
from kcli.records.compression import Codec

OLD_CLIENTS = [(0, 8, 1), (0, 8, 2), (0, 9), (0, 10), (0, 10, 1)]
BAD_LOG_LINES = ("internal error", "Traceback", "cannot encode")
T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    base = tmp_path_factory.mktemp("old-versions")
    process = BrokerProcess(free_port(), base / "kafka-logs", ["group.initial.rebalance.delay.ms=0"],
                            env={"KCTL_BROKER_API_LEDGER": str(base / "served.json")})
    process.start()
    process.served = base / "served.json"
    yield process
    if process.proc is not None:
        assert process.stop() == 0, process.log()


def _ids(api_version) -> str:
    return ".".join(map(str, api_version))


def _create(broker, topic: str, **configs: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs=configs)])
    finally:
        admin.close()


def _call(broker, api_key: ApiKey, version: int, body):
    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        sock.sendall(encode_request(api_key, version, 9, "kctl-old-versions", body))
        data = read_response(sock)
    assert data is not None, f"{api_key.name} v{version}: the broker closed the connection"
    correlation_id, response = decode_response(api_key, version, data)
    assert correlation_id == 9
    return response


def _produce(broker, topic: str, batches: list[bytes]) -> None:
    for batch in batches:
        response = _call(broker, ApiKey.PRODUCE, 9, minimal_request(ApiKey.PRODUCE, 9, topic=topic, records=batch))
        assert response.responses[0].partition_responses[0].error_code == ErrorCode.none, response


def _fetch(broker, version: int, topic: str, offset: int):
    body = minimal_request(ApiKey.FETCH, version, topic=topic)
    [fetch_topic] = body.topics
    partition = dataclasses.replace(fetch_topic.partitions[0], fetch_offset=offset)
    body = dataclasses.replace(body, topics=(dataclasses.replace(fetch_topic, partitions=(partition,)),))
    [answer] = _call(broker, ApiKey.FETCH, version, body).responses
    return answer.partitions[0]


def _messages(records: bytes) -> list[tuple[int, int, object, bytes | None, bytes | None, int]]:
    """(magic, offset, timestamp, key, value, wrapper codec) of every message, read by kafka-python's own
    legacy reader (compressed wrappers unpacked), in order."""
    out = []
    reader = MemoryRecords(bytes(records))
    while (batch := reader.next_batch()) is not None:
        for record in batch:
            out.append((batch.magic, record.offset, record.timestamp, record.key, record.value,
                        batch.compression_type))
    return out


# -- kafka-python as an 0.8-0.10 client -------------------------------------------------------------------
@pytest.mark.parametrize("compression", [None, "gzip"])
@pytest.mark.parametrize("api_version", OLD_CLIENTS, ids=_ids)
def test_old_client_produces_consumes_and_commits(broker, api_version, compression):
    topic = f"old-{_ids(api_version)}-{compression}-{uuid.uuid4().hex[:6]}"
    tp = TopicPartition(topic, 0)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                             compression_type=compression, linger_ms=5)
    sent = [(b"k%d" % i if i % 3 else None, b"value-%d" % i) for i in range(20)]
    futures = [producer.send(topic, key=k, value=v, partition=0, timestamp_ms=T0 + i)
               for i, (k, v) in enumerate(sent)]
    acks = [f.get(30) for f in futures]
    producer.close()
    assert [a.offset for a in acks] == list(range(20))

    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version, group_id=f"g-{topic}",
                             enable_auto_commit=False, auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        consumer.assign([tp])
        got = []
        for message in consumer:
            got.append(message)
            if len(got) == len(sent):
                break
        assert [(m.offset, m.key, m.value) for m in got] == [(i, k, v) for i, (k, v) in enumerate(sent)]
        # magic 1 (0.10+) keeps the producer's timestamps; magic 0 has none
        expected_ts = [T0 + i for i in range(20)] if api_version >= (0, 10) else [None] * 20
        assert [m.timestamp for m in got] == expected_ts
        assert consumer.end_offsets([tp]) == {tp: 20}
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        consumer.commit({tp: OffsetAndMetadata(13, "meta", -1)})
        assert consumer.committed(tp) == 13
        consumer.seek(tp, 17)  # a fetch from inside what was one batch
        rest = [next(consumer) for _ in range(3)]
        assert [(m.offset, m.value) for m in rest] == [(17, b"value-17"), (18, b"value-18"), (19, b"value-19")]
    finally:
        consumer.close()


@pytest.mark.parametrize("api_version", OLD_CLIENTS, ids=_ids)
def test_old_client_reads_what_a_current_producer_wrote(broker, api_version):
    """Record batches v2 (lz4 and snappy, with headers) from a 3.7-era producer, read by an old client."""
    topic = f"new-to-old-{_ids(api_version)}-{uuid.uuid4().hex[:6]}"
    tp = TopicPartition(topic, 0)
    for codec in ("lz4", "snappy"):
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=20)
        for i in range(5):
            producer.send(topic, key=b"%s-%d" % (codec.encode(), i), value=b"v%d" % i, partition=0,
                          headers=[("h", b"dropped")])
        producer.flush(30)
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, api_version=api_version,
                             auto_offset_reset="earliest", consumer_timeout_ms=10_000)
    try:
        consumer.assign([tp])
        got = [next(consumer) for _ in range(10)]
    finally:
        consumer.close()
    assert [m.offset for m in got] == list(range(10))
    assert [m.key for m in got] == [b"%s-%d" % (c, i) for c in (b"lz4", b"snappy") for i in range(5)]


# -- the wire, version by version --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def stored(broker):
    """A topic holding three v2 batches: uncompressed (offsets 0-2), gzip (3-5), snappy (6-8)."""
    topic = f"stored-{uuid.uuid4().hex[:6]}"
    _create(broker, topic)
    batches = [build_record_batch([Record(i, T0 + base + i, b"k%d" % (base + i), b"v%d" % (base + i))
                                   for i in range(3)], codec=codec)
               for base, codec in ((0, Codec.NONE), (3, Codec.GZIP), (6, Codec.SNAPPY))]
    _produce(broker, topic, batches)
    return topic


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_fetch_v0_to_v3_down_converts_stored_batches(broker, stored, version):
    magic = 0 if version <= 1 else 1
    partition = _fetch(broker, version, stored, 0)
    assert (partition.error_code, partition.high_watermark) == (ErrorCode.none, 9)
    messages = _messages(partition.records)
    assert [m[0] for m in messages] == [magic] * 9
    assert [(m[1], m[3], m[4]) for m in messages] == [(i, b"k%d" % i, b"v%d" % i) for i in range(9)]
    assert [m[2] for m in messages] == ([None] * 9 if magic == 0 else [T0 + i for i in range(9)])
    assert [m[5] for m in messages] == [0] * 3 + [1] * 3 + [2] * 3  # none, one gzip wrapper, one snappy wrapper
    # From inside a batch: an uncompressed one loses the records before the offset, a compressed wrapper is
    # sent whole (the client skips them), as Kafka's down-conversion does.
    assert [m[1] for m in _messages(_fetch(broker, version, stored, 1).records)] == list(range(1, 9))
    assert [m[1] for m in _messages(_fetch(broker, version, stored, 4).records)] == list(range(3, 9))
    assert _messages(_fetch(broker, version, stored, 9).records) == []


def test_downconversion_disabled_refuses_old_fetches(broker):
    topic = f"no-downconversion-{uuid.uuid4().hex[:6]}"
    _create(broker, topic, **{"message.downconversion.enable": "false"})
    _produce(broker, topic, [build_record_batch([Record(0, T0, b"k", b"v")])])
    for version in (0, 1, 2, 3):
        partition = _fetch(broker, version, topic, 0)
        assert partition.error_code == ErrorCode.unsupported_version, version
        assert (partition.high_watermark, bytes(partition.records)) == (-1, b"")
    partition = _fetch(broker, 4, topic, 0)  # v4 reads record batches v2: nothing to convert
    assert partition.error_code == ErrorCode.none and partition.high_watermark == 1
    assert bytes(partition.records)[16] == 2  # the batch's magic byte


def test_zstd_cannot_be_down_converted(broker):
    topic = f"zstd-{uuid.uuid4().hex[:6]}"
    _create(broker, topic, **{"compression.type": "zstd"})
    _produce(broker, topic, [build_record_batch([Record(0, T0, b"k", b"v")], codec=Codec.ZSTD)])
    for version in (0, 3):
        assert _fetch(broker, version, topic, 0).error_code == ErrorCode.unsupported_compression_type
    producer_topic = f"zstd-batch-{uuid.uuid4().hex[:6]}"  # compression.type=producer: the batch itself is zstd
    _create(broker, producer_topic)
    _produce(broker, producer_topic, [build_record_batch([Record(0, T0, b"k", b"v")], codec=Codec.ZSTD)])
    assert _fetch(broker, 1, producer_topic, 0).error_code == ErrorCode.unsupported_compression_type


def _offsets_before(broker, topic: str, timestamp: int, max_num_offsets: int):
    body = minimal_request(ApiKey.LIST_OFFSETS, 0, topic=topic)
    [wanted] = body.topics
    partition = dataclasses.replace(wanted.partitions[0], timestamp=timestamp, max_num_offsets=max_num_offsets)
    body = dataclasses.replace(body, topics=(dataclasses.replace(wanted, partitions=(partition,)),))
    [answer] = _call(broker, ApiKey.LIST_OFFSETS, 0, body).topics
    return answer.partitions[0]


def test_list_offsets_v0_answers_offsets_before_a_time(broker):
    topic = f"segments-{uuid.uuid4().hex[:6]}"
    _create(broker, topic, **{"segment.bytes": "200"})
    before = int(time.time() * 1000) - 1000
    _produce(broker, topic, [build_record_batch([Record(i, T0, b"k", b"x" * 100)]) for i in range(4)])
    time.sleep(0.01)
    latest = _offsets_before(broker, topic, -1, 100)
    assert latest.error_code == ErrorCode.none
    # Newest first: the log end, then the base offset of each segment (one batch each here).
    assert list(latest.old_style_offsets) == [4, 3, 2, 1, 0]
    assert list(_offsets_before(broker, topic, -1, 1).old_style_offsets) == [4]
    assert list(_offsets_before(broker, topic, -2, 100).old_style_offsets) == [0]
    far_future = int(time.time() * 1000) + 3_600_000
    assert list(_offsets_before(broker, topic, far_future, 2).old_style_offsets) == [4, 3]
    assert list(_offsets_before(broker, topic, before, 100).old_style_offsets) == []  # before any segment
    missing = _offsets_before(broker, f"missing-{uuid.uuid4().hex[:6]}", -1, 1)
    assert missing.error_code == ErrorCode.unknown_topic_or_partition and list(missing.old_style_offsets) == []


def test_offset_commit_v0_without_zookeeper_goes_to_the_coordinator(broker, stored):
    """No zookeeper.connect: a v0 commit is kept in __consumer_offsets like v1+ (a ZooKeeper-mode Kafka writes
    ZooKeeper; a KRaft Kafka 3.7 refuses v0), so every OffsetFetch version reads it back."""
    group = f"v0-{uuid.uuid4().hex[:6]}"
    body = minimal_request(ApiKey.OFFSET_COMMIT, 0, topic=stored, group_id=group)
    [topic] = body.topics
    partition = dataclasses.replace(topic.partitions[0], committed_offset=5, committed_metadata="m")
    body = dataclasses.replace(body, topics=(dataclasses.replace(topic, partitions=(partition,)),))
    committed = _call(broker, ApiKey.OFFSET_COMMIT, 0, body)
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none
    for version in (0, 1, 5):
        fetched = _call(broker, ApiKey.OFFSET_FETCH, version, minimal_request(
            ApiKey.OFFSET_FETCH, version, topic=stored, group_id=group, topics=None) if version >= 2 else
            _offset_fetch_request(version, stored, group))
        [answer] = [p for t in fetched.topics if t.name == stored for p in t.partitions]
        assert (answer.committed_offset, answer.metadata, answer.error_code) == (5, "m", ErrorCode.none), version


def _offset_fetch_request(version: int, topic: str, group: str):
    body = minimal_request(ApiKey.OFFSET_FETCH, version, topic=topic, group_id=group)
    [wanted] = body.topics
    return dataclasses.replace(body, topics=(dataclasses.replace(wanted, partition_indexes=(0,)),))


def test_every_old_version_was_used_and_nothing_failed(broker):
    """Last in the module: stops the broker and reads which versions the tests above exercised."""
    assert broker.stop() == 0, broker.log()
    served = {(row["api"], row["version"]) for row in json.loads(broker.served.read_text())}
    expected = {("PRODUCE", v) for v in (0, 1, 2)} | {("FETCH", v) for v in (0, 1, 2, 3)} | {
        ("LIST_OFFSETS", 0), ("OFFSET_COMMIT", 0), ("OFFSET_COMMIT", 1), ("OFFSET_FETCH", 0), ("OFFSET_FETCH", 1)}
    assert expected <= served, expected - served
    bad = [line for line in broker.log().splitlines() if any(b in line for b in BAD_LOG_LINES)]
    assert not bad, broker.log()
