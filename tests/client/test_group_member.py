"""kctl's consumer-group member, in process: the range and roundrobin assignors against Kafka's documented
examples and kafka-python's assignors, the consumer protocol's subscription and assignment bytes against
kafka-python's, and the member's protocol against kcli's broker started in this process (JoinGroup with KIP-394's
member id, SyncGroup with the leader's assignment, heartbeats that notice a rebalance, commits with the
generation, LeaveGroup), plus the group consumer reading its assignment, committing what was stored, and the
leader rebalancing when a subscribed topic grows."""

from __future__ import annotations

import asyncio
import random
import threading
import time
import types

import pytest
from kio.schema.errors import ErrorCode

from broker_support import free_port
from inprocess_broker import run, running_broker
from kcli.client import KafkaClient
from kcli.client.consume import ConsumeNotice, ConsumeOptions, EndOfPartition, Fetched, OffsetSpec
from kcli.client.group_consumer import GroupConsumer, Rebalanced
from kcli.client.group_member import (GroupMember, Subscriber, assignment_bytes, parse_assignors, range_assign,
                                      read_assignment, read_subscription, roundrobin_assign, subscription_bytes)
from kcli.client.produce import Producer, ProducerRecord
from kcli.client.topics import cluster_view, create_partitions, plan_partition_growth
from kcli.errors import UsageError


def _tp(*names: str) -> list[tuple[str, int]]:
    """``t0p1`` -> ("t0", 1), as Kafka's javadoc names partitions."""
    return [(n[:n.index("p")], int(n[n.index("p") + 1:])) for n in names]


# -- assignors ---------------------------------------------------------------------------------------------
def test_range_assignor_is_kafkas_javadoc_example():
    # RangeAssignor's javadoc: C0 and C1 on t0 and t1 of 3 partitions each
    members = [Subscriber("C1", ("t0", "t1")), Subscriber("C0", ("t0", "t1"))]
    assert range_assign({"t0": 3, "t1": 3}, members) == {"C0": _tp("t0p0", "t0p1", "t1p0", "t1p1"),
                                                         "C1": _tp("t0p2", "t1p2")}
    # more members than partitions: the last get nothing; a topic nobody has metadata for is left out
    three = [Subscriber(f"m{i}", ("t",)) for i in range(3)]
    assert range_assign({"t": 2}, three) == {"m0": [("t", 0)], "m1": [("t", 1)], "m2": []}
    assert range_assign({}, three) == {"m0": [], "m1": [], "m2": []}


def test_roundrobin_assignor_is_kafkas_javadoc_examples():
    members = [Subscriber("C0", ("t0", "t1")), Subscriber("C1", ("t0", "t1"))]
    assert roundrobin_assign({"t0": 3, "t1": 3}, members) == {"C0": _tp("t0p0", "t0p2", "t1p1"),
                                                              "C1": _tp("t0p1", "t1p0", "t1p2")}
    # different subscriptions: a member not subscribed to a partition's topic is skipped
    members = [Subscriber("C2", ("t0", "t1", "t2")), Subscriber("C0", ("t0",)), Subscriber("C1", ("t0", "t1"))]
    assert roundrobin_assign({"t0": 1, "t1": 2, "t2": 3}, members) == {
        "C0": _tp("t0p0"), "C1": _tp("t1p0"), "C2": _tp("t1p1", "t2p0", "t2p1", "t2p2")}


def test_static_members_come_first_by_instance_id():
    # AbstractPartitionAssignor.MemberInfo: static members sorted by group.instance.id before dynamic ones
    members = [Subscriber("a-dynamic", ("t",)), Subscriber("z-static", ("t",), "instance-1"),
               Subscriber("b-static", ("t",), "instance-2")]
    assert range_assign({"t": 5}, members) == {"z-static": [("t", 0), ("t", 1)], "b-static": [("t", 2), ("t", 3)],
                                               "a-dynamic": [("t", 4)]}
    assert roundrobin_assign({"t": 4}, members) == {"z-static": [("t", 0), ("t", 3)], "b-static": [("t", 1)],
                                                    "a-dynamic": [("t", 2)]}


def _kafka_python_assign(assignor, partitions: dict[str, int], members: list[Subscriber]):
    cluster = types.SimpleNamespace(partitions_for_topic=lambda t: set(range(partitions[t])) if t in partitions
                                    else None)
    kp_members = [types.SimpleNamespace(member_id=m.member_id, group_instance_id=None,
                                        metadata=types.SimpleNamespace(topics=list(m.topics))) for m in members]
    return {mid: sorted((t, p) for t, ps in a.assigned_partitions for p in ps)
            for mid, a in assignor.assign(cluster, kp_members).items()}


def test_assignors_agree_with_kafka_python():
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    rng = random.Random(27)
    for _ in range(200):
        partitions = {f"t{i}": rng.randint(1, 9) for i in range(rng.randint(1, 4))}
        ids = [f"consumer-{rng.randrange(10**6)}" for _ in range(rng.randint(1, 6))]
        same = tuple(rng.sample(sorted(partitions), rng.randint(1, len(partitions))))
        # range: any subscriptions; roundrobin: identical ones (kafka-python's skips a member wrongly otherwise)
        varied = [Subscriber(i, tuple(rng.sample(sorted(partitions), rng.randint(1, len(partitions))))) for i in ids]
        identical = [Subscriber(i, same) for i in ids]
        assert range_assign(partitions, varied) == _kafka_python_assign(RangePartitionAssignor, partitions, varied)
        assert roundrobin_assign(partitions, identical) == _kafka_python_assign(RoundRobinPartitionAssignor,
                                                                                partitions, identical)


def test_assignor_names():
    assert parse_assignors("range,roundrobin") == ("range", "roundrobin")
    assert parse_assignors("org.apache.kafka.clients.consumer.RoundRobinAssignor") == ("roundrobin",)
    for bad in ("cooperative-sticky", "", "sticky,range"):
        with pytest.raises(UsageError):
            parse_assignors(bad)


# -- the consumer protocol's bytes ------------------------------------------------------------------------------
def test_subscription_and_assignment_bytes_are_kafka_pythons():
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription
    from kafka.protocol.old.consumer_protocol import (ConsumerProtocolMemberAssignment_v0,
                                                      ConsumerProtocolMemberMetadata_v0)

    # v0, the layout every client reads (kafka-python's old structs write an empty user data)
    assert subscription_bytes(["orders", "payments"], version=0, user_data=b"") == \
        ConsumerProtocolMemberMetadata_v0(0, ["orders", "payments"], b"").encode()
    assert assignment_bytes([("orders", 2), ("orders", 0), ("payments", 1)], version=0, user_data=b"") == \
        ConsumerProtocolMemberAssignment_v0(0, [("orders", [0, 2]), ("payments", [1])], b"").encode()
    # v1 (KIP-429's owned partitions), as kafka-python 3 writes it with a null user data
    S, A = ConsumerProtocolSubscription, ConsumerProtocolAssignment
    theirs = S(topics=["orders"], user_data=None, version=1,
               owned_partitions=[S.TopicPartition(topic="orders", partitions=[1, 3])]).encode()
    assert subscription_bytes(["orders"], [("orders", 3), ("orders", 1)]) == theirs
    assert read_subscription("m", "i", theirs) == Subscriber("m", ("orders",), "i", (("orders", 1), ("orders", 3)))
    theirs = A(assigned_partitions=[A.TopicPartition(topic="orders", partitions=[0, 2])], user_data=None,
               version=1).encode()
    assert assignment_bytes([("orders", 0), ("orders", 2)]) == theirs
    assert read_assignment(theirs) == (("orders", 0), ("orders", 2))
    # and kafka-python reads kctl's
    decoded = S.decode(subscription_bytes(["a", "b"], [("a", 0)]))
    assert (decoded.version, decoded.topics, decoded.owned_partitions[0].partitions) == (1, ["a", "b"], [0])
    assert A.decode(assignment_bytes([("b", 4)])).partitions()[0] == ("b", 4)
    assert read_assignment(b"") == ()  # SyncGroup's answer to a member left out


# -- against kcli's broker, in process ------------------------------------------------------------------------
class _Runner:
    """A member's main loop on a thread: poll, and rejoin when the heartbeats say so."""

    def __init__(self, member: GroupMember) -> None:
        self.member = member
        self.joined: list = []
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.member.poll()
                if self.member.rejoin_needed:
                    self.joined.append(self.member.join())
                self.member.wait_for_news(0.05)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(30)


def _wait(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def _topic(bootstrap: str, name: str, records: int) -> None:
    with KafkaClient(bootstrap) as client:
        producer = Producer(client, name, linger_ms=0)  # auto-created with num.partitions
        for i in range(records):
            producer.send(ProducerRecord(b"v%d" % i, partition=i % producer.partition_count))
        assert producer.close().ok


BROKER = {"num.partitions": "4", "group.min.session.timeout.ms": "100", "offsets.topic.num.partitions": "1"}


def test_two_members_split_the_partitions_and_rebalance_when_one_leaves(tmp_path):
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"

    def scenario() -> None:
        _topic(bootstrap, "t", 8)
        clients = [KafkaClient(bootstrap, client_id=f"member-{i}") for i in range(2)]
        members = [GroupMember(c, "g", ["t"], session_timeout_ms=3000, heartbeat_interval_ms=100)
                   for c in clients]
        first = _Runner(members[0])
        _wait(lambda: first.joined)
        assert first.joined[0].assignment == tuple(("t", p) for p in range(4)) and first.joined[0].is_leader
        assert members[0].member_id.startswith("member-0-")  # the id the coordinator gave (KIP-394)
        second = _Runner(members[1])
        # both hold the same generation, each partition with exactly one of them
        _wait(lambda: second.joined and members[0].generation == members[1].generation
              and not members[0].rejoin_needed and len(members[0].assignment) == 2)
        assert sorted(members[0].assignment + members[1].assignment) == [("t", p) for p in range(4)]
        assert members[0].protocol == "range"
        # a commit with the member's generation is taken; one with a generation the group left is refused
        assert members[1].commit({("t", p): 1 for _, p in members[1].assignment}) == {
            tp: ErrorCode.none for tp in members[1].assignment}
        with clients[1] as client:
            assert client.offset_fetch("g") == {tp: 1 for tp in members[1].assignment}
        members[1].generation -= 1
        assert set(members[1].commit({members[1].assignment[0]: 2}).values()) == {ErrorCode.illegal_generation}
        assert members[1].rejoin_needed and members[1].generation_lost
        second.halt()
        assert members[1].close() == ErrorCode.none  # LeaveGroup: the other member takes everything
        _wait(lambda: len(members[0].assignment) == 4 and not members[0].rejoin_needed)
        first.halt()
        assert first.error is None and second.error is None
        assert members[0].close() == ErrorCode.none
        clients[0].close()

    async def main() -> None:
        async with running_broker(tmp_path / "logs", listeners=f"PLAINTEXT://127.0.0.1:{port}", **BROKER):
            await asyncio.to_thread(scenario)

    run(main(), timeout=120)


def test_the_group_consumer_reads_its_assignment_and_commits_what_was_stored(tmp_path):
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"

    def scenario() -> None:
        _topic(bootstrap, "orders", 12)
        with KafkaClient(bootstrap) as client:
            client.offset_commit("readers", {("orders", 1): 2})  # a committed offset: the start there
            member = GroupMember(client, "readers", ["orders"], session_timeout_ms=3000, heartbeat_interval_ms=100)
            consumer = GroupConsumer(client, member, ConsumeOptions(start=OffsetSpec("stored")),
                                     commit_interval_s=None)
            seen, ended, events = [], set(), []
            items = consumer.items()
            for item in items:
                if isinstance(item, Rebalanced):
                    events.append(item)
                elif isinstance(item, Fetched):
                    seen.extend((item.partition, r.offset) for r in item.records)
                    consumer.store(item.topic, item.partition, item.next_offset)
                elif isinstance(item, EndOfPartition):
                    ended.add(item.partition)
                    if ended == {0, 1, 2, 3}:
                        break
            assert [(e.kind, e.partitions) for e in events] == [("assigned", tuple(("orders", p) for p in range(4)))]
            # partition 1 from its commit (offset 2), the others from the beginning (3 records each)
            assert sorted(seen) == sorted([(p, o) for p in (0, 2, 3) for o in range(3)] + [(1, 2)])
            # the topic grows: the leader's metadata check rebalances the group so the new partitions are read
            view = cluster_view(client, ["orders"])
            assert create_partitions(client, plan_partition_growth(view, ["orders"], 6))[0].error is None
            consumer.metadata_check_s = 0
            notices = []
            for item in items:
                if isinstance(item, ConsumeNotice):
                    notices.append(item.text)
                elif isinstance(item, Rebalanced):
                    events.append(item)
                    if item.kind == "assigned":
                        break
            assert [(e.kind, len(e.partitions)) for e in events[1:]] == [("revoked", 4), ("assigned", 6)]
            assert any("orders 4 -> 6" in n for n in notices), notices
            events[1:] = []
            closing = consumer.close()
            assert [(e.kind, e.partitions) for e in closing if isinstance(e, Rebalanced)] == [
                ("revoked", tuple(("orders", p) for p in range(6)))]
            # committed before the revocation: what was read of the first four partitions
            assert client.offset_fetch("readers") == {("orders", p): 3 for p in range(4)}
            assert client.describe_groups(["readers"])["readers"].members == ()  # it left

    async def main() -> None:
        async with running_broker(tmp_path / "logs", listeners=f"PLAINTEXT://127.0.0.1:{port}", **BROKER):
            await asyncio.to_thread(scenario)

    run(main(), timeout=120)


def test_static_member_returns_without_a_rebalance_and_a_stalled_loop_leaves(tmp_path):
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"

    def scenario() -> None:
        _topic(bootstrap, "s", 4)
        with KafkaClient(bootstrap) as client:
            options = dict(session_timeout_ms=3000, heartbeat_interval_ms=100)
            static = GroupMember(client, "statics", ["s"], group_instance_id="reader-1", **options)
            before = static.join()
            assert static.close() is None  # a static member does not leave (KIP-345)
            again = GroupMember(client, "statics", ["s"], group_instance_id="reader-1", **options)
            after = again.join()
            # the same partitions in the same generation: no rebalance; the old member id is fenced
            assert (after.generation, after.assignment) == (before.generation, before.assignment)
            assert after.member_id != before.member_id
            assert again.commit({("s", 0): 1}) == {("s", 0): ErrorCode.none}
            static.member_id, static.generation = before.member_id, before.generation
            assert static.commit({("s", 0): 2}) == {("s", 0): ErrorCode.fenced_instance_id}
            again.close()

            # max.poll.interval.ms: a main loop that stops polling is taken out of the group by its own heartbeat
            # thread (LeaveGroup), and rejoins when it polls again
            stalled = GroupMember(client, "stalls", ["s"], max_poll_interval_ms=500, **options)
            stalled.join()
            _wait(lambda: stalled.rejoin_needed)
            assert stalled.generation_lost
            assert any("max.poll.interval.ms" in n for n in stalled.poll())
            assert client.describe_groups(["stalls"])["stalls"].members == ()
            assert len(stalled.join().assignment) == 4
            stalled.close()

    async def main() -> None:
        async with running_broker(tmp_path / "logs", listeners=f"PLAINTEXT://127.0.0.1:{port}", **BROKER):
            await asyncio.to_thread(scenario)

    run(main(), timeout=120)


@pytest.mark.parametrize("args,why", [
    (["a", "b"], "give -G GROUP"),
    (["a", "b", "-G", "g", "-p", "0"], "give -G GROUP"),
    (["a", "-G", "g", "--assignor", "cooperative-sticky"], "cooperative-sticky is not one of them"),
])
def test_consume_usage_errors_come_before_any_connection(args, why):
    from typer.testing import CliRunner

    from kcli.cli.app import app

    result = CliRunner().invoke(app, ["consume", *args, "-b", "127.0.0.1:1"])
    assert result.exit_code == 2 and why in result.output, result.output


def test_a_coordinator_that_moved_is_found_again(tmp_path):
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    refusals = {"left": 0}

    def scenario() -> None:
        _topic(bootstrap, "m", 4)
        with KafkaClient(bootstrap) as client:
            lookups = []
            find = client.find_coordinator

            def counting(group: str) -> int:
                if group not in client._coordinators:
                    lookups.append(group)  # a FindCoordinator request, not the cached answer
                return find(group)

            client.find_coordinator = counting  # type: ignore[method-assign]
            # (heartbeats 10 s apart: the refusals go to the JoinGroups and the commit)
            member = GroupMember(client, "movers", ["m"], session_timeout_ms=30000, heartbeat_interval_ms=10000)
            refusals["left"] = 2  # NOT_COORDINATOR to the first two JoinGroups
            joined = member.join()
            assert refusals["left"] == 0 and len(lookups) == 3 and len(joined.assignment) == 4
            refusals["left"] = 1
            assert member.commit({("m", 0): 1}) == {("m", 0): ErrorCode.none} and len(lookups) == 4
            assert member.close() == ErrorCode.none

            member = GroupMember(client, "movers", ["m"], session_timeout_ms=3000, heartbeat_interval_ms=100)
            joined = member.join()
            refusals["left"] = 3  # to the heartbeats: the member finds the coordinator again, keeps its generation
            _wait(lambda: refusals["left"] == 0)
            time.sleep(0.3)
            assert not member.rejoin_needed and member.poll() == []
            assert member.commit({("m", 0): 2}) == {("m", 0): ErrorCode.none}
            assert member.generation == joined.generation
            member.close()

    async def main() -> None:
        async with running_broker(tmp_path / "logs", listeners=f"PLAINTEXT://127.0.0.1:{port}", **BROKER) as b:
            real = b.server.groups.coordinator_error

            def moved(group_id: str):
                if refusals["left"] > 0:
                    refusals["left"] -= 1
                    return ErrorCode.not_coordinator
                return real(group_id)

            b.server.groups.coordinator_error = moved
            await asyncio.to_thread(scenario)

    run(main(), timeout=120)
