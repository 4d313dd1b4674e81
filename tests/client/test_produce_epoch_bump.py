"""kctl produce --idempotent's epoch bump (KIP-360), against kcli's broker in process: a partition whose leader
lost the producer's last batches answers OUT_OF_ORDER_SEQUENCE_NUMBER, one that lost its state (retention)
UNKNOWN_PRODUCER_ID; the producer asks InitProducerId again with its id and epoch, renumbers what was not
acknowledged from sequence 0 and resends it, instead of failing the records."""

from __future__ import annotations

import asyncio
import types

from kio.schema.errors import ErrorCode

from broker_support import free_port
from inprocess_broker import run, running_broker
from kcli.client import KafkaClient
from kcli.client.consume import ConsumeOptions, Consumer, EndOfPartition, Fetched
from kcli.client.produce import Producer, ProducerRecord
from kcli.protocol.api import ApiKey


def _log(client: KafkaClient, topic: str) -> list[tuple[bytes, int, int, int]]:
    """(value, producer id, producer epoch, sequence) of every record of partition 0."""
    out = []
    for item in Consumer(client, topic, ConsumeOptions(partitions=[0])).items():
        if isinstance(item, EndOfPartition):
            return out
        if isinstance(item, Fetched):
            b = item.batch
            out.extend((r.value, b.producer_id, b.producer_epoch, b.base_sequence + i)
                       for i, r in enumerate(item.records))
    return out


def _with_broker(tmp_path, scenario) -> None:
    port = free_port()

    async def main() -> None:
        async with running_broker(tmp_path / "logs", listeners=f"PLAINTEXT://127.0.0.1:{port}",
                                  **{"num.partitions": "1"}):
            await asyncio.to_thread(scenario, f"127.0.0.1:{port}")

    run(main(), timeout=120)


def test_out_of_order_sequence_bumps_the_epoch_and_resends(tmp_path):
    def scenario(bootstrap: str) -> None:
        with KafkaClient(bootstrap) as client:
            producer = Producer(client, "t", idempotent=True, linger_ms=0)
            first = producer.summary.producer_id
            producer.send(ProducerRecord(b"a"))
            producer.flush()
            # the leader lost batches it had acknowledged (an unclean leader change): the next batch's sequence
            # is ahead of what the log has, and the broker refuses it
            producer._sequences[0] += 5
            producer.send(ProducerRecord(b"b"))
            producer.send(ProducerRecord(b"c"))
            producer.flush()
            producer.send(ProducerRecord(b"d"))  # after the bump: the new producer's next sequence
            summary = producer.close()
            assert summary.ok and summary.records == 4, summary.to_json()
            assert len(summary.epoch_bumps) == 1 and "OUT_OF_ORDER_SEQUENCE_NUMBER" in summary.epoch_bumps[0]
            second = summary.producer_id
            assert second != first and summary.to_json()["epoch_bumps"] == summary.epoch_bumps
            assert _log(client, "t") == [(b"a", first, 0, 0), (b"b", second, 0, 0), (b"c", second, 0, 1),
                                         (b"d", second, 0, 2)]

    _with_broker(tmp_path, scenario)


def test_unknown_producer_id_bumps_with_the_current_id_and_epoch(tmp_path):
    def scenario(bootstrap: str) -> None:
        with KafkaClient(bootstrap) as client:
            producer = Producer(client, "t", idempotent=True, linger_ms=0)
            first = (producer.summary.producer_id, producer.summary.producer_epoch)
            connection = client._node(producer._leaders[0])
            real_call_many = connection.call_many
            asked: list[tuple[int, int]] = []
            refused = []

            def call_many(api_key, bodies):
                if api_key == ApiKey.INIT_PRODUCER_ID:
                    asked.extend((int(b.producer_id), int(b.producer_epoch)) for b in bodies)
                if api_key == ApiKey.PRODUCE and not refused:
                    # what a Kafka leader answers once retention removed the producer's state: nothing written
                    refused.append(bodies[0])
                    answer = types.SimpleNamespace(responses=[types.SimpleNamespace(partition_responses=[
                        types.SimpleNamespace(index=0, error_code=ErrorCode.unknown_producer_id, base_offset=-1,
                                              error_message=None)])])
                    return [answer] + real_call_many(api_key, bodies[1:])
                return real_call_many(api_key, bodies)

            connection.call_many = call_many  # type: ignore[method-assign]
            client._any = lambda: connection  # type: ignore[method-assign]  # InitProducerId through it too
            producer.send(ProducerRecord(b"x"))
            summary = producer.close()
            assert summary.ok and refused, summary.to_json()
            assert asked == [first]  # InitProducerId v3+ named the producer id and epoch to bump (KIP-360)
            assert "UNKNOWN_PRODUCER_ID" in summary.epoch_bumps[0]
            assert _log(client, "t") == [(b"x", summary.producer_id, summary.producer_epoch, 0)]

    _with_broker(tmp_path, scenario)
