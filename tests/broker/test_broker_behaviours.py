"""Broker behaviours that held in live probes, pinned in process (a KafkaServer over a temp dir, its handlers
called with decoded requests): the scheduled flush (log.flush.interval.ms), OFFSET_OUT_OF_RANGE with empty
records, INVALID_REQUIRED_ACKS, a Fetch's min_bytes and max_wait, new partitions over two log.dirs, and
STALE_CONTROLLER_EPOCH. No timing assertions: outcomes, and orderings Kafka guarantees (a parked fetch is not
answered before what it waits for)."""

from __future__ import annotations

import asyncio
import datetime
import os
import threading
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_req

import inprocess_broker
from inprocess_broker import InProcessBroker, running_broker
from kcli.protocol import ApiKey, decode_request, decode_response, encode_request, encode_response, minimal_request
from kcli.protocol.schema.leader_and_isr.v5 import request as lai_req
from kcli.protocol.schema.stop_replica.v3 import request as sr_req
from kcli.protocol.schema.update_metadata.v7 import request as um_req
from kcli.records import Record, build_record_batch
from kcli.records.record_set import iter_batches

TOPIC = "t"


class Broker(InProcessBroker):
    async def produce(self, *values: bytes, acks: int = -1, topic: str = TOPIC) -> Any:
        batch = build_record_batch([Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)])
        response = await self.call(ApiKey.PRODUCE, 9, minimal_request(ApiKey.PRODUCE, 9, topic=topic, records=batch,
                                                                        acks=acks))
        return response.responses[0].partition_responses[0]

    @staticmethod
    def fetch_request(offset: int, *, min_bytes: int = 1, max_wait_ms: int = 0, topic: str = TOPIC) -> Any:
        return fetch_req.FetchRequest(
            cluster_id=None, replica_id=-1, max_wait=datetime.timedelta(milliseconds=max_wait_ms),
            min_bytes=min_bytes, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
            topics=(fetch_req.FetchTopic(topic=topic, partitions=(fetch_req.FetchPartition(
                partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20),)),),
            forgotten_topics_data=(), rack_id="")

    async def fetch(self, offset: int, **kwargs: Any) -> Any:
        response = await self.call(ApiKey.FETCH, 12, self.fetch_request(offset, **kwargs))
        return response.responses[0].partitions[0]

    def log(self, topic: str = TOPIC, index: int = 0):
        return self.server.log_manager.partition(topic, index)


def running(log_dirs: str, **overrides: str):
    return running_broker(log_dirs, Broker, **overrides)


run = inprocess_broker.run


async def eventually(condition, what: str, timeout: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, f"{what}: not within {timeout}s"
        await asyncio.sleep(0.05)


def _values(records: Any) -> list[bytes]:
    raw = records.read() if hasattr(records, "read") else bytes(records or b"")
    return [r.value for batch in iter_batches(raw) for r in batch.records()]


# -- the scheduled flush ------------------------------------------------------------------------------------
def test_log_flush_interval_ms_flushes_on_schedule(tmp_path):
    async def main() -> None:
        # flush.messages stays at its default (never): only the time-based flush can move the recovery point
        async with running(str(tmp_path / "logs"), **{"log.flush.interval.ms": "100"}) as b:
            b.server.admin.create_topic(TOPIC, 1, 1)
            assert (await b.produce(b"a", b"b", b"c")).error_code == ErrorCode.none
            managed = b.log()
            await eventually(lambda: managed.log.recovery_point == 3, "the scheduled flush")
            assert managed.unflushed_messages == 0

    run(main())


def test_a_roll_does_not_fsync_on_the_request_path_and_the_flush_follows(tmp_path, monkeypatch):
    # Kafka's roll does no fsync under the log's lock (KAFKA-15046): a broker whose appends wait on the disk
    # stops answering everyone (librdkafka's 0077 rolls every 10 kB; ApiVersions then timed out after 10 s).
    async def main() -> None:
        async with running(str(tmp_path / "logs")) as b:
            b.server.admin.create_topic(TOPIC, 1, 1, configs={"segment.bytes": "1024"})
            assert (await b.produce(b"first")).error_code == ErrorCode.none  # leader epoch and its checkpoint
            loop_thread = threading.get_ident()
            on_the_loop: list[int] = []
            fsync = os.fsync

            def watched_fsync(fd: int) -> None:
                if threading.get_ident() == loop_thread:
                    on_the_loop.append(fd)
                fsync(fd)
            monkeypatch.setattr(os, "fsync", watched_fsync)
            for i in range(10):
                assert (await b.produce(bytes(300), bytes(300))).error_code == ErrorCode.none
            managed = b.log()
            assert len(managed.log.segments) > 3  # it rolled
            assert on_the_loop == []
            # the closed segments are made durable in the background, and only then the recovery point moves
            await eventually(lambda: managed.log.recovery_point >= managed.log.segment.base_offset,
                             "the flush after the rolls")
            assert managed.log.unflushed_inactive() == []

    run(main())


def test_a_roll_during_a_flush_is_not_an_error(tmp_path, monkeypatch):
    """The flush fsyncs outside the log's lock: the segment it captured may roll meanwhile (closing sets its
    indexes to None). That raised AttributeError in the flush task and logged a traceback (seen under load)."""
    from kcli.storage.log import PartitionLog

    async def main() -> None:
        async with running(str(tmp_path / "logs")) as b:
            b.server.admin.create_topic(TOPIC, 1, 1, configs={"segment.bytes": "1024"})
            assert (await b.produce(b"first")).error_code == ErrorCode.none
            managed = b.log()
            real = PartitionLog.fsync_unflushed_inactive

            rolled: list[bool] = []

            def roll_meanwhile(inactive):  # runs after the lock was released: an append rolls the segment now
                if not rolled:  # once: the shutdown's own close calls it with the lock held
                    rolled.append(True)
                    with managed.lock:
                        managed.log.roll()
                return real(inactive)
            monkeypatch.setattr(PartitionLog, "fsync_unflushed_inactive", staticmethod(roll_meanwhile))
            before = len(managed.log.segments)
            await asyncio.to_thread(b.server.log_manager.flush, managed)
            assert len(managed.log.segments) == before + 1

    run(main())


# -- fairness between connections -------------------------------------------------------------------------
def test_a_pipelining_client_does_not_hold_up_the_other_connections(tmp_path):
    # Kafka's processors take one request per connection at a time: a client with 100 requests in flight is
    # served in turn with the others, not before them (a producer's backlog held ApiVersions for 10 s).
    async def main() -> None:
        async with running(str(tmp_path / "logs")) as b:
            b.server.admin.create_topic(TOPIC, 1, 1)
            sockets = b.server.socket_server
            order: list[str] = []
            answer = sockets._answer

            async def recording(conn: Any, request: Any, client_host: str, *session: Any) -> Any:
                order.append(request.client_id)
                return await answer(conn, request, client_host, *session)
            sockets._answer = recording  # type: ignore[method-assign]
            host, port = sockets.bound[0]
            (busy_r, busy_w), (other_r, other_w) = [await asyncio.open_connection(host, port) for _ in range(2)]
            metadata = minimal_request(ApiKey.METADATA, 12, topic=TOPIC)
            busy_w.write(b"".join(encode_request(ApiKey.METADATA, 12, i, "busy", metadata) for i in range(100)))
            other_w.write(encode_request(ApiKey.API_VERSIONS, 3, 0, "other",
                                         minimal_request(ApiKey.API_VERSIONS, 3)))
            for reader, count in ((busy_r, 100), (other_r, 1)):
                for _ in range(count):
                    size = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), 30), "big")
                    await reader.readexactly(size)
            for writer in (busy_w, other_w):
                writer.close()
            assert order.count("busy") == 100 and order.index("other") < 5, order.index("other")

    run(main())


# -- OFFSET_OUT_OF_RANGE ------------------------------------------------------------------------------------
def _on_the_wire(request: Any, response: Any) -> Any:
    """The response as a client decodes it from the frame the broker would send."""
    frame = encode_request(ApiKey.FETCH, 12, 7, "test", request)
    decoded = decode_request(frame[4:])
    _, body = decode_response(ApiKey.FETCH, 12, encode_response(decoded, response)[4:])
    return body.responses[0].partitions[0]


def test_offset_out_of_range_comes_with_empty_records_not_null(tmp_path):
    # librdkafka cannot parse a null record set ("invalid MessageSetSize -1") and retries forever instead of
    # applying auto.offset.reset; Kafka sends an empty one with the error.
    async def main() -> None:
        async with running(str(tmp_path / "logs")) as b:
            b.server.admin.create_topic(TOPIC, 1, 1)
            assert (await b.produce(*(f"v{i}".encode() for i in range(5)))).error_code == ErrorCode.none
            b.server.replica_manager.delete_records(TOPIC, 0, 3)  # a consumer at 0 is now behind retention
            for offset in (0, 9):  # behind the log start; past the end (the topic was deleted and made anew)
                request = b.fetch_request(offset)
                response = await b.call(ApiKey.FETCH, 12, request)
                partition = _on_the_wire(request, response)
                assert partition.error_code == ErrorCode.offset_out_of_range, offset
                assert partition.records == b"", offset
                assert (partition.log_start_offset, partition.high_watermark) == (3, 5)
            reset = await b.fetch(3)  # where auto.offset.reset=earliest leads: the batch holding offset 3
            assert reset.error_code == ErrorCode.none and _values(reset.records)[-2:] == [b"v3", b"v4"]

    run(main())


# -- INVALID_REQUIRED_ACKS ----------------------------------------------------------------------------------
def test_acks_outside_0_1_minus_1_are_invalid_required_acks_and_append_nothing(tmp_path):
    async def main() -> None:
        async with running(str(tmp_path / "logs")) as b:
            b.server.admin.create_topic(TOPIC, 1, 1)
            for acks in (2, -2, 3):
                assert (await b.produce(b"x", acks=acks)).error_code == ErrorCode.invalid_required_acks, acks
            assert b.log().log.log_end_offset == 0
            for acks in (1, -1):
                assert (await b.produce(b"y", acks=acks)).error_code == ErrorCode.none, acks
            assert b.log().log.log_end_offset == 2

    run(main())


# -- Fetch min_bytes and max_wait ---------------------------------------------------------------------------
def test_fetch_waits_for_min_bytes_and_answers_at_max_wait_with_what_it_has(tmp_path):
    async def main() -> None:
        async with running(str(tmp_path / "logs")) as b:
            b.server.admin.create_topic(TOPIC, 1, 1)
            # min_bytes 1 at the log end: parked until a record arrives, then answered with it
            waiting = asyncio.create_task(b.fetch(0, min_bytes=1, max_wait_ms=60_000))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            assert (await b.produce(b"first")).error_code == ErrorCode.none
            answered = await asyncio.wait_for(waiting, 30)
            assert (answered.error_code, _values(answered.records)) == (ErrorCode.none, [b"first"])

            # min_bytes above what arrives: one small record does not answer it, max_wait does, with that record
            waiting = asyncio.create_task(b.fetch(1, min_bytes=1 << 20, max_wait_ms=3000))
            await asyncio.sleep(0.2)
            assert (await b.produce(b"small")).error_code == ErrorCode.none
            await asyncio.sleep(0.2)
            assert not waiting.done()
            answered = await asyncio.wait_for(waiting, 30)
            assert (answered.error_code, _values(answered.records)) == (ErrorCode.none, [b"small"])

            # nothing at all arrives: max_wait expires with an empty answer
            answered = await asyncio.wait_for(b.fetch(2, min_bytes=1, max_wait_ms=300), 30)
            assert (answered.error_code, _values(answered.records), answered.high_watermark) == (
                ErrorCode.none, [], 2)

    run(main())


# -- two log.dirs -------------------------------------------------------------------------------------------
def _placed(dirs: list[Path]) -> dict[str, set[str]]:
    return {d.name: {p.name for p in d.iterdir() if p.is_dir() and p.name.startswith(("old-", "new-", "more-"))}
            for d in dirs}


def test_new_partitions_go_to_the_log_dir_with_fewest_partitions(tmp_path):
    a, b_dir = tmp_path / "a", tmp_path / "b"

    async def main() -> None:
        async with running(str(a)) as b:  # first one dir, three partitions in it
            b.server.admin.create_topic("old", 3, 1)
        async with running(f"{a},{b_dir}") as b:  # then a second, empty dir
            b.server.admin.create_topic("new", 3, 1)
            # a holds 3: every new partition goes to b until b holds as many
            assert _placed([a, b_dir]) == {"a": {"old-0", "old-1", "old-2"}, "b": {"new-0", "new-1", "new-2"}}
            b.server.admin.create_topic("more", 2, 1)
            # 3 and 3: whichever takes the first, the second goes to the other
            placed = _placed([a, b_dir])
            assert len(placed["a"]) == len(placed["b"]) == 4
            assert {"more-0", "more-1"} == (placed["a"] | placed["b"]) - {
                "old-0", "old-1", "old-2", "new-0", "new-1", "new-2"}
            assert not {"more-0", "more-1"} <= placed["a"] and not {"more-0", "more-1"} <= placed["b"]

    run(main())


# -- STALE_CONTROLLER_EPOCH ---------------------------------------------------------------------------------
def _update_metadata(epoch: int, rack: str) -> Any:
    return um_req.UpdateMetadataRequest(
        controller_id=0, controller_epoch=epoch, broker_epoch=-1, topic_states=(),
        live_brokers=(um_req.UpdateMetadataBroker(id=0, endpoints=(um_req.UpdateMetadataEndpoint(
            port=9092, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0),), rack=rack),))


def test_controller_requests_with_an_older_epoch_are_stale_and_change_nothing(tmp_path):
    async def main() -> None:
        async with running(str(tmp_path / "logs")) as b:
            b.server.admin.create_topic(TOPIC, 1, 1)
            ok = await b.call(ApiKey.UPDATE_METADATA, 7, _update_metadata(5, "rack-new"))
            assert ok.error_code == ErrorCode.none
            stale = await b.call(ApiKey.UPDATE_METADATA, 7, _update_metadata(4, "rack-stale"))
            assert stale.error_code == ErrorCode.stale_controller_epoch
            assert b.server.metadata.brokers[0].rack == "rack-new"

            stop = sr_req.StopReplicaRequest(controller_id=0, controller_epoch=4, broker_epoch=-1, topic_states=(
                sr_req.StopReplicaTopicState(topic_name=TOPIC, partition_states=(
                    sr_req.StopReplicaPartitionState(partition_index=0, leader_epoch=-2, delete_partition=True),)),))
            assert (await b.call(ApiKey.STOP_REPLICA, 3, stop)).error_code == ErrorCode.stale_controller_epoch
            assert b.log() is not None  # not deleted

            state = lai_req.LeaderAndIsrPartitionState(partition_index=0, controller_epoch=4, leader=1,
                                                       leader_epoch=99, isr=(1,), partition_epoch=9,
                                                       replicas=(0, 1), is_new=False)
            lai = lai_req.LeaderAndIsrRequest(controller_id=0, controller_epoch=4, broker_epoch=-1, type_=0,
                                              topic_states=(lai_req.LeaderAndIsrTopicState(
                                                  topic_name=TOPIC, topic_id=None, partition_states=(state,)),),
                                              live_leaders=())
            assert (await b.call(ApiKey.LEADER_AND_ISR, 5, lai)).error_code == ErrorCode.stale_controller_epoch
            partition = b.server.replica_manager.find(TOPIC, 0)
            assert partition.is_leader and partition.leader_epoch != 99  # still the leader it was

    run(main())
