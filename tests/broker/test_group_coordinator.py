"""The group coordinator at the protocol level, in process: a KafkaServer over a temp dir, its handlers called
with decoded requests. Group states and their valid transitions (Kafka's GroupState.validPreviousStates),
static membership (KIP-345: a restarted member takes its assignment back without a rebalance, the member id
it had is fenced), the initial rebalance delay that joins extend (Kafka's InitialDelayedJoin), and
OffsetCommit metadata through OffsetFetch and a restart."""

from __future__ import annotations

import asyncio
import datetime
import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kio.schema.delete_groups.v2 import request as delete_req
from kio.schema.describe_groups.v4 import request as describe_req
from kio.schema.errors import ErrorCode
from kio.schema.heartbeat.v3 import request as heartbeat_req
from kio.schema.join_group.v5 import request as join_v5
from kio.schema.join_group.v9 import request as join_v9
from kio.schema.leave_group.v4 import request as leave_req
from kio.schema.list_groups.v4 import request as list_req
from kio.schema.offset_commit.v7 import request as commit_req
from kio.schema.offset_fetch.v6 import request as fetch_req
from kio.schema.sync_group.v3 import request as sync_req

import inprocess_broker
from broker_support import free_port
from inprocess_broker import InProcessBroker, running_broker
from kcli.broker.config import build_config
from kcli.broker.errors import IllegalGroupStateError
from kcli.broker.group_coordinator import OFFSETS_TOPIC, VALID_PREVIOUS_STATES, Group, GroupCoordinator, GroupState
from kcli.broker.partition import LeaderAndIsrState
from kcli.broker.replica_manager import FetchParams, FetchPartition
from kcli.broker.server import KafkaServer
from kcli.protocol import ApiKey

GROUP = "static-app"
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x01t\xff\xff\xff\xff"  # ConsumerProtocolSubscription v0: topic "t"


class Broker(InProcessBroker):
    async def join(self, member_id: str = "", instance: str | None = None, *, version: int = 5,
                   session_ms: int = 30000, rebalance_ms: int = 30000, client_id: str = "test",
                   protocols: tuple[tuple[str, bytes], ...] = (("range", SUBSCRIPTION),)) -> Any:
        schema = join_v9 if version == 9 else join_v5
        request = schema.JoinGroupRequest(
            group_id=GROUP, session_timeout=datetime.timedelta(milliseconds=session_ms),
            rebalance_timeout=datetime.timedelta(milliseconds=rebalance_ms), member_id=member_id,
            group_instance_id=instance, protocol_type="consumer",
            protocols=tuple(schema.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols))
        return await self.call(ApiKey.JOIN_GROUP, version, request, client_id)

    async def sync(self, member_id: str, generation: int, instance: str | None = None,
                   assignments: dict[str, bytes] | None = None) -> Any:
        request = sync_req.SyncGroupRequest(
            group_id=GROUP, generation_id=generation, member_id=member_id, group_instance_id=instance,
            assignments=tuple(sync_req.SyncGroupRequestAssignment(member_id=m, assignment=a)
                              for m, a in (assignments or {}).items()))
        return await self.call(ApiKey.SYNC_GROUP, 3, request)

    async def heartbeat(self, member_id: str, generation: int, instance: str | None = None) -> ErrorCode:
        request = heartbeat_req.HeartbeatRequest(group_id=GROUP, generation_id=generation, member_id=member_id,
                                                 group_instance_id=instance)
        return (await self.call(ApiKey.HEARTBEAT, 3, request)).error_code

    async def commit(self, member_id: str, generation: int, instance: str | None = None,
                     offsets: dict[int, tuple[int, str | None]] | None = None, topic: str = "t") -> list[ErrorCode]:
        request = commit_req.OffsetCommitRequest(
            group_id=GROUP, generation_id_or_member_epoch=generation, member_id=member_id,
            group_instance_id=instance, topics=(commit_req.OffsetCommitRequestTopic(name=topic, partitions=tuple(
                commit_req.OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                                        committed_metadata=meta)
                for p, (o, meta) in (offsets or {0: (1, None)}).items())),))
        response = await self.call(ApiKey.OFFSET_COMMIT, 7, request)
        return [p.error_code for t in response.topics for p in t.partitions]

    async def fetch(self, topic: str, partitions: list[int]) -> dict[int, tuple[int, str | None]]:
        request = fetch_req.OffsetFetchRequest(group_id=GROUP, topics=(
            fetch_req.OffsetFetchRequestTopic(name=topic, partition_indexes=tuple(partitions)),))
        response = await self.call(ApiKey.OFFSET_FETCH, 6, request)
        assert response.error_code == ErrorCode.none
        return {p.partition_index: (p.committed_offset, p.metadata) for t in response.topics for p in t.partitions}

    async def leave(self, *members: tuple[str, str | None]) -> list[ErrorCode]:
        request = leave_req.LeaveGroupRequest(group_id=GROUP, members=tuple(
            leave_req.MemberIdentity(member_id=m, group_instance_id=i) for m, i in members))
        response = await self.call(ApiKey.LEAVE_GROUP, 4, request)
        assert response.error_code == ErrorCode.none
        return [m.error_code for m in response.members]

    async def describe(self) -> Any:
        request = describe_req.DescribeGroupsRequest(groups=(GROUP,), include_authorized_operations=False)
        return (await self.call(ApiKey.DESCRIBE_GROUPS, 4, request)).groups[0]

    async def delete(self) -> ErrorCode:
        response = await self.call(ApiKey.DELETE_GROUPS, 2, delete_req.DeleteGroupsRequest(groups_names=(GROUP,)))
        return response.results[0].error_code

    async def listed_states(self, *states: str) -> dict[str, str]:
        response = await self.call(ApiKey.LIST_GROUPS, 4, list_req.ListGroupsRequest(states_filter=states))
        return {g.group_id: g.group_state for g in response.groups}


def running(log_dir: Path, **overrides: str):
    return running_broker(log_dir, Broker, **{"offsets.topic.num.partitions": "1", **overrides})


def run(coro: Any) -> Any:
    return inprocess_broker.run(coro, 30)


# -- states --------------------------------------------------------------------------------------------
def test_group_state_transitions_follow_kafkas_table():
    S = GroupState
    # Kafka's GroupMetadata.scala, spelled out: the table is data, and this is what it must say.
    assert VALID_PREVIOUS_STATES == {
        S.PREPARING_REBALANCE: {S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY},
        S.COMPLETING_REBALANCE: {S.PREPARING_REBALANCE},
        S.STABLE: {S.COMPLETING_REBALANCE},
        S.DEAD: {S.STABLE, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.EMPTY, S.DEAD},
        S.EMPTY: {S.PREPARING_REBALANCE},
    }
    assert [str(s) for s in S] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    for source, target in itertools.product(S, S):
        group = Group("g", state=source)
        if source in VALID_PREVIOUS_STATES[target]:
            group.transition_to(target)
            assert group.state is target
        else:
            with pytest.raises(IllegalGroupStateError, match=f"moving to {target}"):
                group.transition_to(target)
            assert group.state is source
    # a whole rebalance cycle, then a member leaving the last generation: Empty only through a rebalance
    group = Group("g")
    for state in (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.STABLE, S.PREPARING_REBALANCE, S.EMPTY, S.DEAD):
        group.transition_to(state)
    with pytest.raises(IllegalGroupStateError):
        Group("g", state=S.STABLE).transition_to(S.EMPTY)


def test_last_member_leaving_goes_through_a_rebalance_to_empty(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            joined = await b.join("", "only")
            assert (await b.sync(joined.member_id, joined.generation_id, "only", {joined.member_id: b"x"})).error_code == 0
            assert (await b.describe()).group_state == "Stable"
            assert await b.listed_states("stable") == {GROUP: "Stable"}
            assert await b.leave(("", "only")) == [ErrorCode.none]
            described = await b.describe()
            assert (described.group_state, described.members) == ("Empty", ())
            assert await b.listed_states("Empty") == {GROUP: "Empty"}
            assert b.server.groups.groups[GROUP].generation == joined.generation_id + 1

    run(main())


# -- static membership (KIP-345) -------------------------------------------------------------------------
async def _stable_pair(b: Broker) -> tuple[Any, Any]:
    """Static members "a" (the leader: it joins first) and "b" in one generation, both synced."""
    first = asyncio.create_task(b.join("", "a", client_id="ca"))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(b.join("", "b", client_id="cb"))
    a, c = await asyncio.gather(first, second)
    assert (a.error_code, c.error_code) == (ErrorCode.none, ErrorCode.none)
    assert a.generation_id == c.generation_id and a.leader == a.member_id and len(a.members) == 2
    synced = await asyncio.gather(
        b.sync(a.member_id, a.generation_id, "a", {a.member_id: b"parts-a", c.member_id: b"parts-b"}),
        b.sync(c.member_id, c.generation_id, "b"))
    assert [s.assignment for s in synced] == [b"parts-a", b"parts-b"]
    return a, c


def test_static_member_rejoins_without_rebalance_and_old_id_is_fenced(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs", **{"group.initial.rebalance.delay.ms": "200"}) as b:
            b.server.admin.create_topic("t", 1, 1)
            a, old = await _stable_pair(b)
            generation = a.generation_id
            # "b" restarts: a JoinGroup without member id. No MEMBER_ID_REQUIRED round, no rebalance: the same
            # generation, a new member id, and not told it leads (the leader id returned is the current one).
            back = await b.join("", "b", client_id="cb")
            assert back.error_code == ErrorCode.none
            assert back.generation_id == generation and back.member_id not in ("", old.member_id)
            assert back.leader == a.member_id and back.members == () and back.protocol_name == "range"
            assert await b.heartbeat(a.member_id, generation, "a") == ErrorCode.none  # no rebalance for "a"
            assert (await b.describe()).group_state == "Stable"
            synced = await b.sync(back.member_id, generation, "b")
            assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"parts-b")
            # The member id "b" had before is fenced everywhere.
            assert await b.heartbeat(old.member_id, generation, "b") == ErrorCode.fenced_instance_id
            assert (await b.sync(old.member_id, generation, "b")).error_code == ErrorCode.fenced_instance_id
            assert await b.commit(old.member_id, generation, "b") == [ErrorCode.fenced_instance_id]
            assert (await b.join(old.member_id, "b")).error_code == ErrorCode.fenced_instance_id
            assert await b.leave((old.member_id, "b")) == [ErrorCode.fenced_instance_id]
            # ... and so is a member id that is another instance's
            assert await b.heartbeat(a.member_id, generation, "b") == ErrorCode.fenced_instance_id
            assert await b.heartbeat(back.member_id, generation, "nobody") == ErrorCode.unknown_member_id
            # the current one works
            assert await b.commit(back.member_id, generation, "b") == [ErrorCode.none]
            assert await b.heartbeat(back.member_id, generation, "b") == ErrorCode.none
            described = await b.describe()
            assert described.group_state == "Stable"
            assert sorted((m.group_instance_id, m.member_id) for m in described.members) == \
                [("a", a.member_id), ("b", back.member_id)]
            assert b.server.groups.groups[GROUP].generation == generation
            # LeaveGroup v3+ by group.instance.id alone: the group rebalances without "b".
            assert await b.leave(("", "b")) == [ErrorCode.none]
            assert await b.heartbeat(a.member_id, generation, "a") == ErrorCode.rebalance_in_progress
            rejoined = await b.join(a.member_id, "a")
            assert rejoined.generation_id == generation + 1 and [m.member_id for m in rejoined.members] == [a.member_id]

    run(main())


def test_static_leader_rejoins_with_skip_assignment_from_v9(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs", **{"group.initial.rebalance.delay.ms": "200"}) as b:
            a, c = await _stable_pair(b)
            # Before v9 the restarted leader is given the old leader id, so it does not assign.
            back = await b.join("", "a", client_id="ca")
            assert (back.generation_id, back.leader, back.members) == (a.generation_id, a.member_id, ())
            # From v9 it is told it leads, with the members, and to skip the assignment (KIP-814).
            again = await b.join("", "a", client_id="ca", version=9)
            assert again.error_code == ErrorCode.none and again.generation_id == a.generation_id
            assert again.leader == again.member_id and again.skip_assignment
            assert sorted(m.group_instance_id for m in again.members) == ["a", "b"]
            assert await b.heartbeat(back.member_id, a.generation_id, "a") == ErrorCode.fenced_instance_id
            assert await b.heartbeat(c.member_id, c.generation_id, "b") == ErrorCode.none
            assert (await b.sync(again.member_id, a.generation_id, "a")).assignment == b"parts-a"

    run(main())


def test_silent_static_member_is_removed_at_session_timeout(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs", **{"group.initial.rebalance.delay.ms": "200"}) as b:
            first = asyncio.create_task(b.join("", "a", session_ms=60000))
            await asyncio.sleep(0.05)
            second = asyncio.create_task(b.join("", "b", session_ms=6000))
            a, c = await asyncio.gather(first, second)
            await asyncio.gather(b.sync(a.member_id, a.generation_id, "a", {}), b.sync(c.member_id, c.generation_id, "b"))
            # Static members send no LeaveGroup when they close: only the session timeout removes one.
            b.server.groups.expire_sessions(time.monotonic() + 10)
            described = await b.describe()
            assert described.group_state == "PreparingRebalance"
            assert [m.group_instance_id for m in described.members] == ["a"]
            assert await b.heartbeat(c.member_id, c.generation_id, "b") == ErrorCode.unknown_member_id

    run(main())


def test_static_member_expires_exactly_at_its_session_deadline(tmp_path):
    """librdkafka's static-membership tests close a member, wait out session.timeout.ms and delete the group: by
    the coordinator's clock the member is gone at last heartbeat + session timeout, whatever request comes
    first (Kafka's DelayedHeartbeat expires it then), so DeleteGroups succeeds; a moment earlier it is still
    a member and the group is not empty. The clock here is the test's: nothing depends on timers firing."""

    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            now = [1000.0]
            b.server.groups.clock = lambda: now[0]
            joined = await b.join("", "only", session_ms=6000)
            synced = await b.sync(joined.member_id, joined.generation_id, "only", {joined.member_id: b"x"})
            assert synced.error_code == ErrorCode.none and (await b.describe()).group_state == "Stable"
            now[0] = 1004.0
            assert await b.heartbeat(joined.member_id, joined.generation_id, "only") == ErrorCode.none
            now[0] = 1009.5  # the last heartbeat was 5.5 s ago: still a member
            assert await b.delete() == ErrorCode.non_empty_group
            assert [m.group_instance_id for m in (await b.describe()).members] == ["only"]
            now[0] = 1010.0  # the deadline itself
            assert await b.delete() == ErrorCode.none
            assert (await b.describe()).group_state == "Dead"

    run(main())


def test_expired_member_is_gone_for_describe_and_list_too(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            now = [50.0]
            b.server.groups.clock = lambda: now[0]
            joined = await b.join("", "only", session_ms=6000)
            await b.sync(joined.member_id, joined.generation_id, "only", {joined.member_id: b"x"})
            now[0] = 56.0
            assert await b.listed_states() == {GROUP: "Empty"}
            assert (await b.describe()).members == ()
            assert await b.heartbeat(joined.member_id, joined.generation_id, "only") == ErrorCode.unknown_member_id

    run(main())


# -- group.initial.rebalance.delay.ms ------------------------------------------------------------------
def test_initial_rebalance_delay_waits_and_extends_while_members_join(tmp_path):
    """Delay 500 ms: "a" at 0, "b" at 0.2 s, "c" at 0.7 s, after the first delay ran out but within the
    extension "b" earned. All three are in the first generation, which starts after the delays."""

    async def main() -> None:
        async with running(tmp_path / "logs", **{"group.initial.rebalance.delay.ms": "500"}) as b:
            started = time.monotonic()

            async def join_at(at: float, client: str) -> tuple[Any, float]:
                await asyncio.sleep(at)
                first = await b.join(client_id=client)  # MEMBER_ID_REQUIRED round trip (KIP-394)
                assert first.error_code == ErrorCode.member_id_required
                response = await b.join(first.member_id, client_id=client)
                return response, time.monotonic() - started

            results = await asyncio.gather(join_at(0, "a"), join_at(0.2, "b"), join_at(0.7, "c"))
            assert [r.error_code for r, _ in results] == [ErrorCode.none] * 3
            assert {r.generation_id for r, _ in results} == {1}
            leader = next(r for r, _ in results if r.leader == r.member_id)
            assert len(leader.members) == 3
            assert min(t for _, t in results) >= 1.0  # three delays of 0.5 s: two were extensions

    run(main())


def test_initial_rebalance_delay_zero_completes_at_once(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            started = time.monotonic()
            first = await b.join()
            joined = await b.join(first.member_id)
            assert joined.error_code == ErrorCode.none and joined.leader == joined.member_id
            # Not waited: Kafka's default delay (3 s), had the 0 not been read. Below that, load may take its time.
            assert time.monotonic() - started < 3.0

    run(main())


# -- OffsetCommit metadata -----------------------------------------------------------------------------
def test_offset_commit_metadata_round_trips_through_offset_fetch_and_a_restart(tmp_path):
    async def commit_and_fetch() -> dict[int, tuple[int, str | None]]:
        async with running(tmp_path / "logs") as b:
            b.server.admin.create_topic("meta", 3, 1)
            offsets = {0: (10, "checkpoint=10;host=a"), 1: (20, ""), 2: (30, None)}
            assert await b.commit("", -1, offsets=offsets, topic="meta") == [ErrorCode.none] * 3
            return await b.fetch("meta", [0, 1, 2])

    async def fetch_after_restart() -> dict[int, tuple[int, str | None]]:
        async with running(tmp_path / "logs") as b:
            return await b.fetch("meta", [0, 1, 2])

    expected = {0: (10, "checkpoint=10;host=a"), 1: (20, ""), 2: (30, "")}  # null metadata is stored as ""
    assert run(commit_and_fetch()) == expected
    assert run(fetch_after_restart()) == expected


# -- loading and committing ------------------------------------------------------------------------------
def test_group_requests_get_coordinator_load_in_progress_until_the_offsets_are_replayed(tmp_path, monkeypatch):
    release = threading.Event()
    replay = GroupCoordinator.load

    def held_load(self) -> None:  # the replay of __consumer_offsets, held until the test lets it go
        release.wait(30)
        replay(self)

    async def main() -> None:
        async with running(tmp_path / "logs") as b:
            b.server.admin.create_topic("t", 1, 1)
            assert await b.commit("", -1, offsets={0: (42, "before")}) == [ErrorCode.none]
        monkeypatch.setattr(GroupCoordinator, "load", held_load)
        config = build_config({"listeners": f"PLAINTEXT://127.0.0.1:{free_port()}", "log.dirs": str(tmp_path / "logs"),
                               "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "1"})
        server = KafkaServer(config)
        await server.start()
        try:
            b = Broker(server)
            assert server.groups.loading
            loading = ErrorCode.coordinator_load_in_progress
            assert await b.commit("", -1, offsets={0: (43, None)}) == [loading]
            assert (await b.join("", None)).error_code == loading
            fetched = await b.call(ApiKey.OFFSET_FETCH, 6, fetch_req.OffsetFetchRequest(group_id=GROUP, topics=(
                fetch_req.OffsetFetchRequestTopic(name="t", partition_indexes=(0,)),)))
            assert fetched.error_code == loading
            assert (await b.call(ApiKey.LIST_GROUPS, 4, list_req.ListGroupsRequest(states_filter=()))).error_code \
                == loading
            release.set()
            while server.groups.loading:
                await asyncio.sleep(0.01)
            # served only once replayed: the commit made before the restart is there, and commits go on
            assert await b.fetch("t", [0]) == {0: (42, "before")}
            assert await b.commit("", -1, offsets={0: (43, None)}) == [ErrorCode.none]
            assert await b.fetch("t", [0]) == {0: (43, "")}
        finally:
            release.set()
            await server.stop()

    run(main())


async def _offsets_partition_with_a_silent_follower(b: Broker) -> Any:
    """The group's __consumer_offsets partition, led here with broker 1 in its ISR, which never fetches by
    itself: the high watermark stays where it is until the test fetches as broker 1."""
    b.server.admin.create_topic("t", 1, 1)
    assert await b.commit("", -1, offsets={0: (1, None)}) == [ErrorCode.none]  # __consumer_offsets exists now
    partition = b.server.replica_manager.find(OFFSETS_TOPIC, b.server.groups.partition_for(GROUP))
    assert partition.make_leader(LeaderAndIsrState(controller_epoch=1, leader=0, leader_epoch=partition.leader_epoch + 1,
                                                   isr=[0, 1], partition_epoch=1, replicas=[0, 1]))
    return partition


def test_offset_commit_fails_after_offsets_commit_timeout_ms_without_the_isr(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs", **{"offsets.commit.timeout.ms": "300"}) as b:
            await _offsets_partition_with_a_silent_follower(b)
            assert await b.commit("", -1, offsets={0: (2, None)}) == [ErrorCode.request_timed_out]
            assert await b.fetch("t", [0]) == {0: (1, "")}  # a commit not acknowledged is not served

    run(main())


def test_offset_commit_is_answered_once_the_isr_has_it(tmp_path):
    async def main() -> None:
        async with running(tmp_path / "logs", **{"offsets.commit.timeout.ms": "60000"}) as b:
            partition = await _offsets_partition_with_a_silent_follower(b)
            commit = asyncio.create_task(b.commit("", -1, offsets={0: (2, None)}))
            await asyncio.sleep(0.2)
            assert not commit.done()  # appended here, not yet on broker 1
            params = FetchParams(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, read_committed=False, replica_id=1,
                                 client_rack=None)
            await b.server.replica_manager.fetch_messages(params, [FetchPartition(
                OFFSETS_TOPIC, partition.index, partition.log_end_offset, 1 << 20, partition.topic_id)])
            assert await asyncio.wait_for(commit, 30) == [ErrorCode.none]
            assert await b.fetch("t", [0]) == {0: (2, "")}

    run(main())
