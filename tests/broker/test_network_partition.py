"""A network partition between real brokers, healed (issue 23): three `kctl broker run` and ZooKeeper, each in a
network namespace of its own (tests/netns_lab.py), a follower cut from the other brokers by blackhole routes under
an idempotent acks=all producer and a consumer group (cluster_support.Workload). Skipped unless root with
`ip netns`; every namespace and process it makes is removed, also when it fails. The longer lab, with the other
faults and the figures: bench/bench_partitions.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from cluster_support import LAG_MS, Workload, wait_for
from netns_lab import NetnsLab, unavailable

pytestmark = pytest.mark.cluster

TOPIC = "cut"


@pytest.fixture
def lab(tmp_path):
    why = unavailable()
    if why is not None:
        pytest.skip(f"network lab: {why}")
    from kcli.zk.server import ZooKeeperNotInstalledError, check_installed

    try:
        check_installed()
    except ZooKeeperNotInstalledError as exc:
        pytest.skip(f"network lab: {exc.describe()}")
    lab = NetnsLab(tmp_path / "lab", 3, broker_config={
        "zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": str(LAG_MS),
        "replica.socket.timeout.ms": "30000", "offsets.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0", "auto.leader.rebalance.enable": "false"})
    try:
        lab.create()
        lab.start_zookeeper()
        lab.start_brokers()
        yield lab
    finally:
        left = lab.close()
        assert not left and not lab.existing(), f"lab namespaces left behind: {left or lab.existing()}"


def test_a_follower_cut_off_and_healed_rejoins_the_isr_and_nothing_acknowledged_is_lost(lab):
    from confluent_kafka.admin import AdminClient, NewTopic
    from kazoo.client import KazooClient

    with lab.entered():
        admin = AdminClient({"bootstrap.servers": lab.bootstrap()})
        admin.create_topics([NewTopic(TOPIC, 1, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(60)
        zk = KazooClient(hosts=f"{lab.zk_connect}/kafka", timeout=10)
        zk.start(timeout=20)
        work = None
        try:
            def state() -> dict:
                return json.loads(zk.get(f"/brokers/topics/{TOPIC}/partitions/0/state")[0])

            wait_for(lambda: len(state()["isr"]) == 3, 60, "a full ISR")
            work = Workload(SimpleNamespace(bootstrap=lab.bootstrap()), TOPIC, 1, rate=200).start()
            work.wait_acked(200)
            leader = state()["leader"]
            follower = next(b for b in range(3) if b != leader)
            # The follower's fetch connection stalls; the leader drops it from the ISR and goes on with the other.
            lab.partition([f"b{follower}"], [f"b{b}" for b in range(3) if b != follower])
            wait_for(lambda: follower not in state()["isr"], 30, f"broker {follower} out of the ISR")
            work.wait_acked(200)  # min.insync.replicas=2: the leader and the other follower
            lab.heal()
            # Fetching again over a new connection, not after replica.socket.timeout.ms on the stalled one.
            wait_for(lambda: sorted(state()["isr"]) == [0, 1, 2], 15, f"broker {follower} back in the ISR")
            assert state()["leader"] == leader
            work.wait_acked(200)
        finally:
            if work is not None:
                work.stop()
            zk.stop()
            zk.close()
    counts = work.check()
    assert counts["acked"] >= 600
