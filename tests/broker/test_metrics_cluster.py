"""The replication metrics of a ZooKeeper-mode cluster, scraped from every broker's /metrics while a broker is
killed and restarted: one active controller, the controller's offline partitions, under-replicated partitions on
the leaders, ISR shrinks and expansions (issue 26)."""

from __future__ import annotations

import signal

import pytest

from broker_support import free_port
from cluster_support import create_topic, produce, running_cluster, wait_for
from kcli.client.metrics import scrape_metrics

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    def metrics_on(c) -> None:
        for broker in c.brokers:
            broker.metrics = f"127.0.0.1:{free_port()}"  # type: ignore[attr-defined]
            broker.overrides.append(f"metrics.http.listener=http://{broker.metrics}")  # type: ignore[attr-defined]

    with running_cluster(zookeeper, tmp_path_factory.mktemp("metrics-cluster"), brokers=3,
                         before_start=metrics_on) as c:
        yield c


def value(broker, name: str) -> float:
    return sum(s.value for s in scrape_metrics(broker.metrics, prefix=name).samples if s.name == name)


def total(brokers, name: str) -> float:
    return sum(value(b, name) for b in brokers)


def test_followers_fetch_through_incremental_fetch_sessions(cluster):
    """KIP-227: each follower's fetcher holds one session on each leader it fetches from (a privileged one, never
    evicted here), and acks=all produces complete through incremental fetches."""
    create_topic(cluster, "sessions", partitions=3, rf=3)
    produce(cluster, "sessions", 30)  # acks=all: every follower fetched these records
    sessions = "kafka_server_fetchsessioncache_numincrementalfetchsessions"
    cached = "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached"
    # three partitions of three replicas: at least two followers fetch from some leader, each in its own session
    wait_for(lambda: total(cluster.brokers, sessions) >= 2, 60, "followers' fetch sessions on the leaders")
    wait_for(lambda: total(cluster.brokers, cached) >= 2 * 3, 60, "every follower's partitions in its session")
    assert total(cluster.brokers, "kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total") == 0


def test_replication_metrics_follow_a_paused_and_a_killed_broker(cluster):
    brokers = cluster.brokers
    controller = cluster.controller_id()
    victim = next(i for i in range(3) if i != controller)
    alive = [b for i, b in enumerate(brokers) if i != victim]
    create_topic(cluster, "replicated", partitions=3, rf=3)
    create_topic(cluster, "single", assignment=[[victim]])
    produce(cluster, "replicated", 30)
    assert total(brokers, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert value(brokers[controller], "kafka_controller_kafkacontroller_activecontrollercount") == 1
    # full ISRs (a loaded machine may have let a follower fall behind for a moment)
    wait_for(lambda: total(brokers, "kafka_server_replicamanager_underreplicatedpartitions") == 0, 60,
             "full ISRs before the pause")
    assert total(brokers, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    # a paused follower: the leaders shrink their ISRs themselves after replica.lag.time.max.ms ...
    shrinks = total(alive, "kafka_server_replicamanager_isrshrinks_total")
    expands = total(alive, "kafka_server_replicamanager_isrexpands_total")
    brokers[victim].proc.send_signal(signal.SIGSTOP)
    try:
        produce(cluster, "replicated", 30, acks=1, idempotent=False)
        wait_for(lambda: total(alive, "kafka_server_replicamanager_isrshrinks_total") > shrinks, 60,
                 "ISR shrinks on the leaders")
        wait_for(lambda: total(alive, "kafka_server_replicamanager_underreplicatedpartitions") >= 1, 60,
                 "under-replicated partitions on the leaders")
    finally:
        brokers[victim].proc.send_signal(signal.SIGCONT)
    # ... and expand them once it caught up
    wait_for(lambda: total(alive, "kafka_server_replicamanager_isrexpands_total") > expands, 60,
             "ISR expansions on the leaders")
    wait_for(lambda: total(brokers, "kafka_server_replicamanager_underreplicatedpartitions") == 0, 60,
             "full ISRs again")
    # a killed broker: the controller counts the partition whose only replica it held offline
    brokers[victim].stop(signal.SIGKILL)
    wait_for(lambda: value(brokers[controller], "kafka_controller_kafkacontroller_offlinepartitionscount") >= 1,
             60, "an offline partition on the controller")
    assert total(alive, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    brokers[victim].start()
    wait_for(lambda: value(brokers[controller], "kafka_controller_kafkacontroller_offlinepartitionscount") == 0,
             120, "the single partition back online")
