"""Preferred and unclean leader elections on a real three-broker cluster: ElectLeaders from confluent-kafka's
AdminClient, the legacy /admin/preferred_replica_election node, auto rebalance, and an unclean election on
request.

Broker 0 starts first and controls with auto.leader.rebalance.enable=false, so that the elections asked for
are the only ones while it does; brokers 1 and 2 run with auto rebalance every 2 s. The last test stops broker 0:
the new controller rebalances by itself. A stopped broker gets SIGTERM (a controlled shutdown, then it
deregisters at once)."""

from __future__ import annotations

import json
import signal
import time

import pytest

from cluster_support import Cluster, Workload, create_topic, metadata, produce, wait_for

pytestmark = pytest.mark.cluster

AUTO = ("auto.leader.rebalance.enable=true", "leader.imbalance.check.interval.seconds=2",
        "leader.imbalance.per.broker.percentage=10")
# A SIGTERM'd broker that still leads something (a partition whose ISR is itself) retries its controlled
# shutdown this often before it stops anyway.
EXTRA = (*AUTO, "controlled.shutdown.retry.backoff.ms=500")


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    c = Cluster(zookeeper, tmp_path_factory.mktemp("preferred"), brokers=3, extra=EXTRA)
    c.brokers[0].overrides.append("auto.leader.rebalance.enable=false")  # later overrides win
    c.zk.start(timeout=10)
    try:
        c.brokers[0].start()
        wait_for(lambda: c.zk.exists(c.chroot + "/controller") and c.controller_id() == 0, 30, "broker 0 controlling")
        for broker in c.brokers[1:]:
            broker.start()
        wait_for(lambda: len(metadata(c).brokers) == 3, 60, "three live brokers in Metadata")
        yield c
    finally:
        c.stop()


def admin(cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def elect(cluster, election_type, partitions) -> dict:
    """partition -> error name (None: elected), from confluent-kafka's AdminClient.elect_leaders."""
    from confluent_kafka import ElectionType, TopicPartition

    kind = ElectionType.PREFERRED if election_type == "preferred" else ElectionType.UNCLEAN
    wanted = None if partitions is None else [TopicPartition(t, p) for t, p in partitions]
    # (confluent-kafka 2.16.1 fails on elect_leaders' keyword arguments: the default timeouts, 60 s, it is)
    client = admin(cluster)  # held until the answer: a collected client destroys its handle
    result = client.elect_leaders(kind, wanted).result(90)
    return {(tp.topic, tp.partition): (None if error is None else error.name()) for tp, error in result.items()}


def bounce(cluster, broker_id: int, topic: str) -> None:
    """Stop the broker (SIGTERM), wait for leadership of ``topic``-0 to move, start it and wait until it is back
    in the ISR."""
    cluster.brokers[broker_id].stop(signal.SIGTERM)
    wait_for(lambda: cluster.state(topic, 0)["leader"] not in (broker_id, -1), 30, f"{topic}-0 led elsewhere")
    cluster.brokers[broker_id].start()
    wait_for(lambda: broker_id in cluster.state(topic, 0)["isr"], 60, f"broker {broker_id} back in the ISR")


def test_elect_leaders_moves_leadership_back_under_acks_all_load(cluster):
    create_topic(cluster, "pref", assignment=[[1, 2, 0], [2, 0, 1]])
    work = Workload(cluster, "pref", 2).start()
    try:
        work.wait_acked(100)
        bounce(cluster, 1, "pref")
        before = cluster.state("pref", 0)
        assert before["leader"] in (2, 0)
        assert elect(cluster, "preferred", [("pref", 0), ("pref", 1)]) == {("pref", 0): None,
                                                                            ("pref", 1): "ELECTION_NOT_NEEDED"}
        after = cluster.state("pref", 0)
        # one election (the ISR is the leader's to shrink meanwhile on a loaded machine, and the new leader's)
        assert (after["leader"], after["leader_epoch"]) == (1, before["leader_epoch"] + 1) and 1 in after["isr"]
        # The answer came once the broker that answered knew the new leader; clients learn it from Metadata.
        wait_for(lambda: metadata(cluster, "pref").topics["pref"].partitions[0].leader == 1, 30,
                 "Metadata naming broker 1")
        assert elect(cluster, "preferred", [("pref", 0)]) == {("pref", 0): "ELECTION_NOT_NEEDED"}
        work.wait_acked(200)
    finally:
        work.stop()
    counts = work.check()  # nothing acknowledged lost, no duplicates, order kept, no fatal error
    assert all(error.retriable() for error in work.errors), work.errors
    assert counts["acked"] >= 300

    # Every partition (a null list): the ones whose preferred leader was not leading are elected (broker 1's
    # __consumer_offsets partitions moved with it); those that needed nothing are left out of the answer.
    wait_for(lambda: all(len(p.isrs) == len(p.replicas) for t in metadata(cluster).topics.values()
                         for p in t.partitions.values()), 60, "every ISR full again")
    everything = elect(cluster, "preferred", None)
    assert all(error is None for error in everything.values()), everything
    assert ("pref", 0) not in everything and ("pref", 1) not in everything
    assert elect(cluster, "preferred", None) == {}


def test_zookeeper_node_triggers_a_preferred_election(cluster):
    create_topic(cluster, "zkpref", assignment=[[2, 0, 1]])
    bounce(cluster, 2, "zkpref")
    node = cluster.chroot + "/admin/preferred_replica_election"
    # What kafka-preferred-replica-election.sh --zookeeper writes; the controller deletes it when done.
    cluster.zk.create(node, json.dumps({"version": 1, "partitions": [{"topic": "zkpref", "partition": 0},
                                                                      {"topic": "nope", "partition": 0}]}).encode())
    wait_for(lambda: not cluster.zk.exists(node), 30, "the election node deleted")
    assert cluster.state("zkpref", 0)["leader"] == 2


def test_unclean_election_on_request(cluster):
    """ISR [1] (broker 2 paused long enough to leave it); broker 1 stops: no leader, ISR [1]. An unclean
    election on request makes broker 2, out of sync, the leader with ISR [2]; what only broker 1 had is lost."""
    create_topic(cluster, "unclean", assignment=[[1, 2]])
    assert produce(cluster, "unclean", 10).count(None) == 10
    wait_for(lambda: cluster.state("unclean", 0)["isr"] == [1, 2], 30, "both in sync")
    paused = cluster.brokers[2].proc
    paused.send_signal(signal.SIGSTOP)
    try:
        # A fetch broker 2 sent before the pause may be parked at the leader (replica.fetch.wait.max.ms=200):
        # records arriving then would still land in its socket. Past that, it cannot ask for more.
        time.sleep(0.6)
        assert produce(cluster, "unclean", 5, acks="1", idempotent=False).count(None) == 5
        wait_for(lambda: cluster.state("unclean", 0)["isr"] == [1], 30, "broker 2 out of the ISR")
        cluster.brokers[1].stop(signal.SIGTERM)
        wait_for(lambda: cluster.state("unclean", 0)["leader"] == -1, 30, "no leader")
    finally:
        paused.send_signal(signal.SIGCONT)
    assert cluster.state("unclean", 0)["isr"] == [1]
    assert elect(cluster, "preferred", [("unclean", 0)]) == {("unclean", 0): "PREFERRED_LEADER_NOT_AVAILABLE"}
    assert elect(cluster, "unclean", [("unclean", 0)]) == {("unclean", 0): None}
    state = cluster.state("unclean", 0)
    assert (state["leader"], state["isr"]) == (2, [2])
    assert elect(cluster, "unclean", [("unclean", 0)]) == {("unclean", 0): "ELECTION_NOT_NEEDED"}
    assert produce(cluster, "unclean", 3).count(None) == 3
    cluster.brokers[1].start()
    wait_for(lambda: cluster.state("unclean", 0)["isr"] == [2, 1], 60, "broker 1 follows broker 2")
    # Broker 1 truncated to broker 2's log: the 5 records only it had are gone, the 3 after the election stay.
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unclean-check"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition("unclean", 0), timeout=10) == (0, 13)
    finally:
        consumer.close()


def test_auto_rebalance_moves_leadership_back(cluster):
    """Broker 0 (the controller, its preferred leader) stops: 1 or 2 takes over with auto rebalance every 2 s
    (the first check 5 s after failover). Once broker 0 is back in the ISR, the controller elects it again."""
    create_topic(cluster, "auto", assignment=[[0, 1, 2]])
    old_epoch = cluster.controller_epoch()
    cluster.brokers[0].stop(signal.SIGTERM)
    wait_for(lambda: cluster.zk.exists(cluster.chroot + "/controller") and cluster.controller_id() in (1, 2), 30,
             "a new controller")
    assert cluster.controller_epoch() > old_epoch
    wait_for(lambda: cluster.state("auto", 0)["leader"] in (1, 2), 30, "auto-0 led elsewhere")
    cluster.brokers[0].start()
    wait_for(lambda: cluster.state("auto", 0)["leader"] == 0, 60, "broker 0 leading auto-0 again")
    assert not cluster.zk.exists(cluster.chroot + "/admin/preferred_replica_election")
    assert "automatic preferred replica leader election" in cluster.brokers[cluster.controller_id()].log()
