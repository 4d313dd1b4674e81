"""Real faults on a three-broker kctl cluster (issue 13): kill -9 of leaders and of the controller, a SIGSTOPped
leader (a zombie), SIGTERM (controlled shutdown), each under a confluent-kafka idempotent acks=all producer and a
consumer group, counting what was acknowledged and what came back. One cluster for the module, a short ZooKeeper
session so that a killed broker's node goes quickly; each test uses its own topic."""

from __future__ import annotations

import datetime
import random
import re
import signal
import socket
import time

import pytest

import kctl_fork
from cluster_support import Workload, create_topic, replica_bytes, running_cluster, wait_for

pytestmark = pytest.mark.cluster

SESSION_MS = 4000  # zookeeper.session.timeout.ms: a kill -9 is noticed within this


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with running_cluster(zookeeper, tmp_path_factory.mktemp("faults"), session_timeout_ms=SESSION_MS,
                         extra=("min.insync.replicas=2", "auto.leader.rebalance.enable=false")) as c:
        yield c


@pytest.fixture(autouse=True)
def whole_cluster(cluster):
    """Every test starts with every broker up and registered, whatever an earlier test (one that failed halfway
    through a kill or a pause) left behind: one failure stays one failure."""
    for broker_id, broker in enumerate(cluster.brokers):
        if broker.proc is not None and broker.proc.poll() is None:
            try:
                broker.proc.send_signal(signal.SIGCONT)  # paused by a test that stopped before resuming it
            except ProcessLookupError:
                pass
        else:
            _restart(cluster, broker_id)
    wait_for(lambda: cluster.live_broker_ids() == list(range(len(cluster.brokers))), 60, "every broker registered")
    yield


def _leader(cluster, topic, partition=0) -> int:
    return int(cluster.state(topic, partition)["leader"])


def _restart(cluster, broker_id: int) -> None:
    cluster.brokers[broker_id].start()
    wait_for(lambda: broker_id in cluster.live_broker_ids(), 30, f"broker {broker_id} registered again")


def _full_isrs(cluster, topic, partitions) -> bool:
    return all(len(cluster.state(topic, p)["isr"]) == 3 for p in range(partitions))


def _assert_replicas_identical_and_verified(cluster, topic, partitions):
    def identical():
        return all(len(set(replica_bytes(cluster, topic, p).values())) == 1 for p in range(partitions))
    wait_for(identical, 60, "byte-identical replicas")
    for broker in cluster.brokers:
        for p in range(partitions):
            out = kctl_fork.run("verify", str(broker.log_dir / f"{topic}-{p}"))  # forked: tests/kctl_fork.py
            assert out.returncode == 0, out.stdout + out.stderr


def test_sigterm_of_a_leader_is_a_controlled_shutdown(cluster):
    create_topic(cluster, "drain", partitions=3, rf=3)
    work = Workload(cluster, "drain", 3).start()
    try:
        work.wait_acked(200)
        victim = _leader(cluster, "drain")
        broker = cluster.brokers[victim]
        assert broker.stop(signal.SIGTERM) == 0
        log = broker.log()
        assert "controlled shutdown succeeded" in log, log[-3000:]
        assert all(_leader(cluster, "drain", p) != victim for p in range(3))
        work.wait_acked(200)
        _restart(cluster, victim)
        wait_for(lambda: _full_isrs(cluster, "drain", 3), 60, "the restarted broker rejoins every ISR")
        work.wait_acked(100)
    finally:
        work.stop()
    counts = work.check()
    assert not work.errors, f"the producer saw errors: {work.errors[:5]}"
    assert counts["acked"] >= 500


_ISR_CHANGE = re.compile(r"^(\S+ \S+) .*: ISR \[([\d, ]*)\] -> \[([\d, ]*)\]", re.M)


def test_sigterm_of_the_controller_hands_over_first_and_it_fetches_no_more(cluster):
    """A stopping controller resigns and gives up /controller before it closes its logs (the others need not
    wait for its session to close), and once its controlled shutdown has moved its leaderships it fetches no more
    (Kafka's isShuttingDown): no ISR takes it back (issue 23)."""
    create_topic(cluster, "handover", partitions=3, rf=3)
    work = Workload(cluster, "handover", 3).start()
    try:
        work.wait_acked(200)
        victim = cluster.controller_id()
        broker = cluster.brokers[victim]
        assert broker.stop(signal.SIGTERM) == 0
        log = broker.log()
        assert "controlled shutdown succeeded" in log, log[-3000:]
        gave_up = log.index(f"broker {victim} gave up ")
        assert gave_up < log.index("unregistered from ZooKeeper")
        succeeded = next(line[:23] for line in log.splitlines() if "controlled shutdown succeeded" in line)
        wait_for(lambda: cluster.zk.exists(cluster.chroot + "/controller") and cluster.controller_id() != victim,
                 15, "another controller")
        for other, peer in enumerate(cluster.brokers):
            if other == victim:
                continue
            rejoined = [m.group(0) for m in _ISR_CHANGE.finditer(peer.log()) if m.group(1) > succeeded
                        and str(victim) in m.group(3).split(", ") and str(victim) not in m.group(2).split(", ")]
            assert not rejoined, f"broker {other} took the stopped broker back: {rejoined}"
        work.wait_acked(200)
        _restart(cluster, victim)
        wait_for(lambda: _full_isrs(cluster, "handover", 3), 60, "the restarted broker rejoins every ISR")
        work.wait_acked(100)
    finally:
        work.stop()
    work.check()
    assert not work.errors, f"the producer saw errors: {work.errors[:5]}"


def test_kill_9_of_leaders_loses_no_acknowledged_record(cluster):
    create_topic(cluster, "kills", partitions=3, rf=3)
    work = Workload(cluster, "kills", 3).start()
    rng = random.Random(13)
    kills = []
    try:
        work.wait_acked(100)
        for round_ in range(3):
            partition = rng.randrange(3)
            victim = _leader(cluster, "kills", partition)
            epoch = int(cluster.state("kills", partition)["leader_epoch"])
            time.sleep(rng.uniform(0.0, 1.0))  # a random moment in the stream
            cluster.brokers[victim].kill()
            killed_at = time.monotonic()
            wait_for(lambda: _leader(cluster, "kills", partition) not in (victim, -1), SESSION_MS / 1000 + 15,
                     f"a new leader for kills-{partition}")
            assert int(cluster.state("kills", partition)["leader_epoch"]) > epoch
            work.wait_acked(100, timeout=60)
            kills.append(time.monotonic() - killed_at)
            _restart(cluster, victim)
            wait_for(lambda: _full_isrs(cluster, "kills", 3), 60, "the restarted broker rejoins every ISR")
        work.wait_acked(100)
    finally:
        work.stop()
    counts = work.check()
    assert counts["acked"] >= 400, counts
    _assert_replicas_identical_and_verified(cluster, "kills", 3)


def _controller_and_epoch(cluster) -> tuple[int, int]:
    """The controller and its epoch, read consistently: the same epoch before and after /controller (on a
    loaded machine an election can come between two reads, pairing a controller with the next one's epoch)."""
    deadline = time.monotonic() + 30
    while True:
        epoch = cluster.controller_epoch()
        controller = cluster.controller_id()
        if controller is not None and cluster.controller_epoch() == epoch:
            return controller, epoch
        if time.monotonic() > deadline:
            raise AssertionError("no steady controller for 30 s")
        time.sleep(0.1)


def test_kill_9_of_the_controller_elects_a_new_one(cluster):
    create_topic(cluster, "ctl", partitions=3, rf=3)
    old, epoch = _controller_and_epoch(cluster)
    led = [p for p in range(3) if _leader(cluster, "ctl", p) == old]
    cluster.brokers[old].kill()
    killed_at = time.monotonic()
    # the old controller's /controller may go between the exists() and the read (its session expiring): None is
    # no controller yet, not a new one
    wait_for(lambda: cluster.controller_id() not in (None, old), SESSION_MS / 1000 + 5, "a new controller")
    took = time.monotonic() - killed_at
    assert cluster.controller_epoch() > epoch
    wait_for(lambda: all(_leader(cluster, "ctl", p) not in (old, -1) for p in led), 15,
             "the new controller moves the dead broker's leaderships")
    # the new controller keeps working: a topic created now gets leaders, and the old one rejoins
    _restart(cluster, old)
    create_topic(cluster, "ctl-after", partitions=2, rf=3)
    wait_for(lambda: _full_isrs(cluster, "ctl", 3), 60, "the old controller rejoins as a follower")
    print(f"new controller after {took:.2f}s (session {SESSION_MS} ms)")


def _produce_direct(broker, topic, partition, value: bytes, timeout_ms: int = 3000):
    """One acks=-1 Produce v8 to one broker, bypassing client metadata: the wire answer."""
    from kio.schema.produce.v8 import request as produce
    from kio.static.primitive import i16, i32  # noqa: F401

    from broker_support import read_response
    from kcli.protocol import ApiKey, decode_response, encode_request
    records = _one_record_batch(value)
    body = produce.ProduceRequest(transactional_id=None, acks=i16(-1), timeout=datetime.timedelta(milliseconds=timeout_ms), topic_data=(
        produce.TopicProduceData(name=topic, partition_data=(
            produce.PartitionProduceData(index=i32(partition), records=records),)),))
    with socket.create_connection(("127.0.0.1", broker.port), timeout=timeout_ms / 1000 + 10) as sock:
        sock.sendall(encode_request(ApiKey.PRODUCE, 8, 1, "zombie-probe", body))
        frame = read_response(sock)
    [topic_response] = decode_response(ApiKey.PRODUCE, 8, frame)[1].responses
    [p] = topic_response.partition_responses
    return p


def _one_record_batch(value: bytes) -> bytes:
    from kcli.records.batch import build_record_batch
    from kcli.records.types import Record

    return build_record_batch([Record(0, int(time.time() * 1000), None, value)], base_offset=0)


def test_a_paused_leader_is_fenced_and_truncates(cluster):
    """SIGSTOP a leader past the session timeout: the controller moves its leaderships; on SIGCONT nothing it
    accepts is acknowledged unless it is in the new leader's log, and it truncates and follows."""
    create_topic(cluster, "zombie", partitions=1, rf=3)
    work = Workload(cluster, "zombie", 1).start()
    zombie = None
    try:
        work.wait_acked(100)
        zombie = _leader(cluster, "zombie")
        broker = cluster.brokers[zombie]
        broker.proc.send_signal(signal.SIGSTOP)
        wait_for(lambda: _leader(cluster, "zombie") not in (zombie, -1), SESSION_MS / 1000 + 15, "a new leader")
        work.wait_acked(100)
        broker.proc.send_signal(signal.SIGCONT)
        answer = _produce_direct(broker, "zombie", 0, b"sent-to-the-zombie")
        wait_for(lambda: zombie in cluster.live_broker_ids(), 30, "the zombie registers again")
        wait_for(lambda: _full_isrs(cluster, "zombie", 1), 60, "the old leader follows and rejoins the ISR")
        work.wait_acked(50)
    finally:
        if zombie is not None and cluster.brokers[zombie].proc is not None:
            cluster.brokers[zombie].proc.send_signal(signal.SIGCONT)
        work.stop()
    work.check()
    print(f"the zombie answered {answer.error_code!r} to an acks=-1 produce")
    if answer.error_code == 0:  # acknowledged: then it must be in the log every replica agrees on
        assert any(v == b"sent-to-the-zombie" for v in work.consumed.values()) or _in_log(
            cluster, "zombie", b"sent-to-the-zombie")
    _assert_replicas_identical_and_verified(cluster, "zombie", 1)


def _in_log(cluster, topic, value: bytes) -> bool:
    return all(value in data for data in replica_bytes(cluster, topic, 0).values())


def _controller_log(cluster) -> str:
    return "\n".join(b.log() for b in cluster.brokers)


def test_no_live_isr_member_goes_offline_unless_unclean_election_is_allowed(cluster):
    """Follower 2 dies, then leader 1: both partitions go offline (leader -1). Broker 2 returns out of sync: the
    topic with unclean.leader.election.enable=true elects it (logged as data loss), the other stays offline
    until broker 1 returns; then broker 1 follows the unclean leader and truncates what only it had."""
    from cluster_support import produce

    for name, unclean in (("clean", "false"), ("unclean", "true")):
        create_topic(cluster, name, assignment=[[1, 2]],
                     config={"unclean.leader.election.enable": unclean, "min.insync.replicas": "1"})
        assert produce(cluster, name, 10).count(None) == 10
    try:
        cluster.brokers[2].kill()
        wait_for(lambda: all(cluster.state(t, 0)["isr"] == [1] for t in ("clean", "unclean")), SESSION_MS / 1000 + 15,
                 "the dead follower leaves the ISR")
        for name in ("clean", "unclean"):
            outcomes = produce(cluster, name, 10)
            assert outcomes.count(None) == 10, outcomes  # only broker 1 has these
        cluster.brokers[1].kill()
        wait_for(lambda: all(cluster.state(t, 0)["leader"] == -1 for t in ("clean", "unclean")),
                 SESSION_MS / 1000 + 15, "both partitions offline")
        _restart(cluster, 2)
        wait_for(lambda: cluster.state("unclean", 0)["leader"] == 2, 30, "the unclean election")
        assert "unclean leader election for unclean-0" in _controller_log(cluster)
        time.sleep(2)
        assert cluster.state("clean", 0)["leader"] == -1, "a clean topic must wait for an ISR member"
    finally:
        for broker_id in (1, 2):
            if cluster.brokers[broker_id].proc is None:
                _restart(cluster, broker_id)
    wait_for(lambda: cluster.state("clean", 0)["leader"] == 1, 30, "the ISR member leads again")
    wait_for(lambda: sorted(cluster.state("unclean", 0)["isr"]) == [1, 2], 60, "broker 1 follows the new leader")
    wait_for(lambda: len(set(replica_bytes(cluster, "unclean", 0).values())) == 1, 30,
             "broker 1 truncated to the unclean leader's log")


def _group_call(broker, api_key, version, body):
    from broker_support import read_response
    from kcli.protocol import decode_response, encode_request

    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        sock.sendall(encode_request(api_key, version, 3, "coordinator-probe", body))
        frame = read_response(sock)
    assert frame is not None, f"broker closed the connection on {api_key.name} v{version}"
    return decode_response(api_key, version, frame)[1]


def _coordinator(broker, group) -> tuple[int, int]:
    """FindCoordinator v4 to ``broker``: (error code, node id)."""
    from kcli.protocol import ApiKey, minimal_request

    [found] = _group_call(broker, ApiKey.FIND_COORDINATOR, 4,
                          minimal_request(ApiKey.FIND_COORDINATOR, 4, group_id=group)).coordinators
    return found.error_code, found.node_id


def _commit(broker, group, topic, offset: int) -> int:
    """A simple commit (no generation, as an empty group takes it) of ``offset`` for partition 0: its error code."""
    import dataclasses

    from kcli.protocol import ApiKey, minimal_request

    body = minimal_request(ApiKey.OFFSET_COMMIT, 8, group_id=group, topic=topic)
    [t] = body.topics
    body = dataclasses.replace(body, topics=(dataclasses.replace(t, partitions=(
        dataclasses.replace(t.partitions[0], committed_offset=offset),)),))
    [t] = _group_call(broker, ApiKey.OFFSET_COMMIT, 8, body).topics
    return t.partitions[0].error_code


def _committed(broker, group, topic) -> tuple[int, int | None]:
    """OffsetFetch v7 of every offset of ``group``: (group error code, the committed offset of partition 0)."""
    from kcli.protocol import ApiKey, minimal_request

    response = _group_call(broker, ApiKey.OFFSET_FETCH, 7, minimal_request(ApiKey.OFFSET_FETCH, 7, group_id=group))
    offsets = {(t.name, p.partition_index): p.committed_offset for t in response.topics for p in t.partitions}
    return response.error_code, offsets.get((topic, 0))


def test_other_brokers_say_not_coordinator_and_a_new_coordinator_serves_commits_after_kill_9(cluster):
    from kio.schema.errors import ErrorCode

    create_topic(cluster, "coord", partitions=1, rf=3)
    group = "failover-group"
    wait_for(lambda: _coordinator(cluster.brokers[0], group)[0] == ErrorCode.none, 30, "a coordinator for the group")
    old = _coordinator(cluster.brokers[0], group)[1]
    # a commit waits for the offsets partition's ISR; a slow one (a loaded machine) is COORDINATOR_NOT_AVAILABLE
    # (Kafka's mapping of NOT_ENOUGH_REPLICAS and REQUEST_TIMED_OUT), which a client retries: so does this test
    wait_for(lambda: _commit(cluster.brokers[old], group, "coord", 7) == ErrorCode.none, 60,
             "a commit the coordinator acknowledges")
    for other in (b for i, b in enumerate(cluster.brokers) if i != old):
        # (a broker whose metadata does not have the new topic yet answers UNKNOWN_TOPIC_OR_PARTITION first, as
        # Kafka's handler checks the topic before the coordinator)
        wait_for(lambda: _commit(other, group, "coord", 8) == ErrorCode.not_coordinator, 30,
                 "NOT_COORDINATOR from a broker that is not the group's coordinator")
        assert _committed(other, group, "coord")[0] == ErrorCode.not_coordinator
    assert _committed(cluster.brokers[old], group, "coord") == (ErrorCode.none, 7)

    cluster.brokers[old].kill()
    alive = next(b for i, b in enumerate(cluster.brokers) if i != old)

    def moved() -> int | None:
        error, node = _coordinator(alive, group)
        return node if error == ErrorCode.none and node not in (old, -1) else None
    new = wait_for(moved, SESSION_MS / 1000 + 30, "the group's coordinator moves off the killed broker")
    # the commit acknowledged by the old coordinator is there (commits wait for the ISR), and commits go on
    wait_for(lambda: _committed(cluster.brokers[new], group, "coord") == (ErrorCode.none, 7), 30,
             "the new coordinator serves the offset committed before the kill")
    wait_for(lambda: _commit(cluster.brokers[new], group, "coord", 9) == ErrorCode.none, 60,
             "a commit the new coordinator acknowledges")
    assert _committed(cluster.brokers[new], group, "coord") == (ErrorCode.none, 9)
    _restart(cluster, old)
    wait_for(lambda: _full_isrs(cluster, "coord", 1), 60, "the killed broker rejoins")
