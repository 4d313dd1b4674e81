"""ListOffsets' leader epochs in process (UnifiedLog.fetchOffsetByTimestamp): EARLIEST answers the epoch of the
log start (the first cached epoch), not the leader's current one; LATEST the current one."""

from __future__ import annotations

from kio.schema.list_offsets.v7 import request as list_offsets
from kio.static.primitive import i8, i32, i64

from inprocess_broker import run, running_broker
from kcli.protocol import ApiKey
from kcli.records import Record, build_record_batch


def _request(timestamp: int):
    return list_offsets.ListOffsetsRequest(replica_id=i32(-1), isolation_level=i8(0), topics=(
        list_offsets.ListOffsetsTopic(name="epochs", partitions=(list_offsets.ListOffsetsPartition(
            partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(timestamp)),)),))


def test_earliest_answers_the_log_starts_epoch(tmp_path):
    async def scenario():
        async with running_broker(tmp_path / "logs") as broker:
            server = broker.server
            server.admin.create_topic("epochs", 1, 1)
            partition = server.replica_manager.get_partition("epochs", 0)
            got = {}

            async def ask(label):
                for timestamp in (-2, -1):
                    answer = await broker.call(ApiKey.LIST_OFFSETS, 7, _request(timestamp))
                    p = answer.topics[0].partitions[0]
                    got[label, timestamp] = (p.error_code, p.offset, p.leader_epoch)

            await ask("empty")
            result = server.replica_manager.append_records(1, {("epochs", 0): build_record_batch([Record(0, 0, None, b"a")])})
            assert int(result[("epochs", 0)].error) == 0
            partition.leader_epoch = 3  # a later leadership (what a cluster's elections leave)
            result = server.replica_manager.append_records(1, {("epochs", 0): build_record_batch([Record(0, 0, None, b"b")])})
            assert int(result[("epochs", 0)].error) == 0
            await ask("written")
            return got

    got = run(scenario())
    assert got[("empty", -2)][1:] == (0, 0) and got[("empty", -1)][1:] == (0, 0)
    assert got[("written", -2)][1:] == (0, 0), got  # the log start's epoch, not the current 3
    assert got[("written", -1)][1:] == (2, 3), got
