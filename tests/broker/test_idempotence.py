"""Idempotent producers at the protocol level, against a real broker: a retried duplicate of any of the
producer's last five batches is answered with its original offset and not appended again; a sequence gap
is OUT_OF_ORDER_SEQUENCE_NUMBER; a stale epoch is INVALID_PRODUCER_EPOCH; in-flight batches that arrive
out of order are refused until the missing one comes (Kafka's ProducerStateEntry keeps five batches)."""

from __future__ import annotations

import datetime
import io
import socket
import struct
import time

from kio.schema.errors import ErrorCode
from kio.schema.produce.v9 import request as produce_req
from kio.schema.produce.v9 import response as produce_resp
from kio.schema.request_header.v2.header import RequestHeader
from kio.serial import entity_reader, entity_writer

from broker_support import read_response
from kcli.records import Record, build_record_batch

PRODUCER = 4242


def _batch(seq: int, epoch: int = 0, count: int = 2) -> bytes:
    now = int(time.time() * 1000)
    return build_record_batch([Record(i, now, b"k%d" % (seq + i), b"v") for i in range(count)],
                              producer_id=PRODUCER, producer_epoch=epoch, base_sequence=seq)


class Producer:
    def __init__(self, port: int, topic: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.topic = topic
        self.correlation_id = 0

    def send(self, records: bytes) -> tuple[ErrorCode, int]:
        self.correlation_id += 1
        body = produce_req.ProduceRequest(
            transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=5),
            topic_data=(produce_req.TopicProduceData(name=self.topic, partition_data=(
                produce_req.PartitionProduceData(index=0, records=records),)),))
        buf = io.BytesIO()
        entity_writer(RequestHeader)(buf, RequestHeader(request_api_key=0, request_api_version=9,
                                                        correlation_id=self.correlation_id, client_id="idempotence"))
        entity_writer(produce_req.ProduceRequest)(buf, body)
        self.sock.sendall(struct.pack(">i", buf.tell()) + buf.getvalue())
        data = read_response(self.sock)
        assert data is not None, "the broker closed the connection"
        response, _ = entity_reader(produce_resp.ProduceResponse)(data, 5)  # correlation id + empty tagged fields
        part = response.responses[0].partition_responses[0]
        return part.error_code, part.base_offset


def _create(broker, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)


def test_duplicates_gaps_epochs_and_reordered_batches(broker):
    _create(broker, "idempotent")
    producer = Producer(broker.port, "idempotent")
    offsets = {}
    for seq in range(0, 12, 2):  # six batches of two records
        error, base = producer.send(_batch(seq))
        assert error == ErrorCode.none
        offsets[seq] = base
    assert [offsets[s] for s in sorted(offsets)] == list(range(0, 12, 2))
    # A retry of any of the last five batches gets its original offset and appends nothing.
    for seq in range(2, 12, 2):
        assert producer.send(_batch(seq)) == (ErrorCode.none, offsets[seq])
    # The sixth batch back is no longer remembered: out of order, as Kafka answers.
    assert producer.send(_batch(0))[0] == ErrorCode.out_of_order_sequence_number
    # A gap, and a batch sent ahead of one still in flight, are refused; the missing one then goes in.
    assert producer.send(_batch(14))[0] == ErrorCode.out_of_order_sequence_number
    assert producer.send(_batch(12)) == (ErrorCode.none, 12)
    assert producer.send(_batch(14)) == (ErrorCode.none, 14)
    # A newer epoch starts at sequence 0; after it the old epoch is fenced.
    assert producer.send(_batch(5, epoch=1))[0] == ErrorCode.out_of_order_sequence_number
    assert producer.send(_batch(0, epoch=1)) == (ErrorCode.none, 16)
    assert producer.send(_batch(16, epoch=0))[0] == ErrorCode.invalid_producer_epoch
    # Nothing was appended twice: the log end is where the accepted batches put it.
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "idem-check"})
    low, high = consumer.get_watermark_offsets(TopicPartition("idempotent", 0), timeout=20)
    consumer.close()
    assert (low, high) == (0, 18)
