"""Clients on one listener, brokers on another (KIP-103): each broker has a PLAINTEXT listener CLIENT for clients
and a SASL_SSL listener INTERNAL that inter.broker.listener.name names. The controller finds the INTERNAL
endpoints in /brokers/ids, the followers fetch from the leaders' INTERNAL endpoints, logging in with SCRAM-SHA-512
over TLS; clients see only CLIENT endpoints. Replication, a leader's kill -9 and the restarted broker's return
all go through INTERNAL."""

from __future__ import annotations

import pytest

from cluster_support import create_topic, consume_all, metadata, produce, running_cluster, wait_for
from broker_support import free_port
from kcli.cluster.security import prepare
from kcli.zk.scram_setup import add_scram_users

pytestmark = pytest.mark.cluster

SESSION_MS = 4000


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    security = prepare(tmp_path_factory.mktemp("internal-pki"), [0, 1, 2])

    def two_listeners(c) -> None:
        for broker_id, broker in enumerate(c.brokers):
            internal = free_port()
            settings = security.broker_settings(broker_id, internal)
            del settings["security.inter.broker.protocol"]
            settings.update({
                "listeners": f"CLIENT://127.0.0.1:{broker.port},INTERNAL://127.0.0.1:{internal}",
                "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:SASL_SSL",
                "inter.broker.listener.name": "INTERNAL",
                "listener.name.internal.scram-sha-512.sasl.jaas.config":
                    settings.pop("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"),
            })
            broker.overrides += [f"{k}={v}" for k, v in settings.items()]
            broker.internal_port = internal  # type: ignore[attr-defined]
        add_scram_users(c.connect, security.passwords)

    with running_cluster(zookeeper, tmp_path_factory.mktemp("internal"), session_timeout_ms=SESSION_MS,
                         extra=("min.insync.replicas=2", "auto.leader.rebalance.enable=false"),
                         before_start=two_listeners) as c:
        yield c
    assert "Traceback" not in "\n".join(b.log() for b in c.brokers)


def test_registration_has_both_listeners_and_clients_see_theirs(cluster):
    registration = cluster.read_json("/brokers/ids/0")
    assert sorted(e.split("://")[0] for e in registration["endpoints"]) == ["CLIENT", "INTERNAL"]
    assert registration["listener_security_protocol_map"] == {"CLIENT": "PLAINTEXT", "INTERNAL": "SASL_SSL"}
    ports = {b.port for b in metadata(cluster).brokers.values()}
    assert ports == {b.port for b in cluster.brokers}  # the CLIENT endpoints, never INTERNAL's


def test_replication_and_failover_cross_the_internal_listener(cluster):
    create_topic(cluster, "internal", partitions=2, rf=3)  # full ISRs: followers logged in to INTERNAL
    assert all(err is None for err in produce(cluster, "internal", 200))
    victim = int(cluster.state("internal", 0)["leader"])
    cluster.brokers[victim].kill()
    wait_for(lambda: int(cluster.state("internal", 0)["leader"]) not in (victim, -1), SESSION_MS / 1000 + 30,
             "a new leader elected")
    assert all(err is None for err in produce(cluster, "internal", 100))
    cluster.brokers[victim].start()
    wait_for(lambda: all(len(cluster.state("internal", p)["isr"]) == 3 for p in range(2)), 120,
             "the restarted broker rejoins over INTERNAL")
    assert len(consume_all(cluster, "internal", 300)) == 300
