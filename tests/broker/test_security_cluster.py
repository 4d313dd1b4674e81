"""A three-broker cluster whose only listener is SASL_SSL (issue 25): the brokers log in to each other with
SCRAM-SHA-512 over TLS as `kctl cluster run --security` sets them up (kcli.cluster.security: its test CA, broker
certificates, the broker and admin users written to ZooKeeper before the brokers start). Replica fetchers, the
controller's requests and transaction markers all cross that listener, so the cluster replicates, elects and
survives a leader's kill -9 with nothing acknowledged lost only if the inter-broker client side works. kctl's own
commands reach it with --command-config; a wrong password is refused."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

import kctl_fork
from cluster_support import Workload, create_topic, produce, consume_all, replica_bytes, running_cluster, wait_for
from kcli.cluster.security import ADMIN_USER, BROKER_USER, prepare
from kcli.zk.scram_setup import add_scram_users

pytestmark = pytest.mark.cluster

SESSION_MS = 4000  # zookeeper.session.timeout.ms: a kill -9 is noticed within this
REAUTH_MS = 3000  # connections.max.reauth.ms on the listener: every connection re-authenticates every few seconds


@pytest.fixture(scope="module")
def security(tmp_path_factory):
    return prepare(tmp_path_factory.mktemp("secured-cluster"), [0, 1, 2])


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory, security):
    def secure(c) -> None:
        for broker_id, broker in enumerate(c.brokers):
            broker.overrides += [f"{k}={v}" for k, v in security.broker_settings(broker_id, broker.port).items()]
            broker.overrides.append(f"listener.name.sasl_ssl.scram-sha-512.connections.max.reauth.ms={REAUTH_MS}")
        add_scram_users(c.connect, security.passwords)  # before any broker starts, as the cluster runner does
        c.client_config = security.client_settings(java=False)

    with running_cluster(zookeeper, tmp_path_factory.mktemp("sasl-ssl"), session_timeout_ms=SESSION_MS,
                         extra=("min.insync.replicas=2", "auto.leader.rebalance.enable=false"),
                         before_start=secure) as c:
        yield c
    bad = [line for line in c.logs().splitlines() if "Traceback" in line]
    assert not bad, c.logs()


def _kctl(*args: str, timeout: float = 60, fresh: bool = False) -> subprocess.CompletedProcess:
    """`kctl ARGS` forked from a process that imported kcli once (tests/kctl_fork.py), or ``fresh``."""
    if fresh:
        return subprocess.run([sys.executable, "-m", "kcli", *args], capture_output=True, text=True, timeout=timeout)
    return kctl_fork.run(*args, timeout=timeout)


def _leader(cluster, topic, partition=0) -> int:
    return int(cluster.state(topic, partition)["leader"])


def _full_isrs(cluster, topic, partitions) -> bool:
    return all(len(cluster.state(topic, p)["isr"]) == 3 for p in range(partitions))


def test_registration_lists_only_the_sasl_ssl_listener(cluster):
    for broker_id in range(3):
        registration = cluster.read_json(f"/brokers/ids/{broker_id}")
        assert [e.split("://")[0] for e in registration["endpoints"]] == ["SASL_SSL"]
        assert registration["listener_security_protocol_map"] == {"SASL_SSL": "SASL_SSL"}


def test_replicates_over_the_sasl_ssl_listener(cluster):
    create_topic(cluster, "secured", partitions=3, rf=3)  # full ISRs: every follower fetched over SASL_SSL
    assert all(err is None for err in produce(cluster, "secured", 300))
    assert len(consume_all(cluster, "secured", 300)) == 300

    def identical():
        return all(len(set(replica_bytes(cluster, "secured", p).values())) == 1 for p in range(3))
    wait_for(identical, 60, "byte-identical replicas on the three brokers")


def test_kill_9_of_a_leader_loses_no_acknowledged_record(cluster):
    create_topic(cluster, "secured-kill", partitions=3, rf=3)
    work = Workload(cluster, "secured-kill", 3).start()
    try:
        work.wait_acked(100, timeout=90)
        victim = _leader(cluster, "secured-kill", 0)
        epoch = int(cluster.state("secured-kill", 0)["leader_epoch"])
        cluster.brokers[victim].kill()
        # the controller's LeaderAndIsr/UpdateMetadata to the survivors cross SASL_SSL
        wait_for(lambda: _leader(cluster, "secured-kill", 0) not in (victim, -1), SESSION_MS / 1000 + 30,
                 "a new leader for secured-kill-0")
        assert int(cluster.state("secured-kill", 0)["leader_epoch"]) > epoch
        work.wait_acked(100, timeout=90)
        cluster.brokers[victim].start()
        wait_for(lambda: victim in cluster.live_broker_ids(), 60, f"broker {victim} registered again")
        # the restarted broker logs in to the leaders, fetches, and rejoins
        wait_for(lambda: _full_isrs(cluster, "secured-kill", 3), 120, "the restarted broker rejoins every ISR")
        work.wait_acked(100, timeout=90)
    finally:
        work.stop()
    counts = work.check()
    assert counts["acked"] >= 300, counts


def test_inter_broker_connections_reauthenticate_before_their_sessions_expire(cluster):
    """Every session lasts REAUTH_MS; replica fetchers and the controller's senders keep their connections for the
    whole module, re-authenticating (KIP-368) instead of being cut off: the brokers never close a broker's
    connection for an expired session."""
    create_topic(cluster, "secured-reauth", partitions=1, rf=3)
    started = time.monotonic()
    while time.monotonic() - started < 3 * REAUTH_MS / 1000:  # several sessions' worth of replication
        assert all(err is None for err in produce(cluster, "secured-reauth", 20))
        time.sleep(0.5)
    assert _full_isrs(cluster, "secured-reauth", 1)
    logs = "\n".join(broker.log() for broker in cluster.brokers)
    expired = [line for line in logs.splitlines() if "expired" in line and f"User:{BROKER_USER}" in line]
    # Without re-authentication every inter-broker connection (fetchers, controller senders: about eight) would
    # expire every REAUTH_MS, a score of lines here. With it, a session still expires when a request sent before
    # the client's deadline (a second early) is read more than a second later: a broker starved of CPU (a loaded
    # machine). Kafka closes those too; rare, never every session.
    assert len(expired) <= 2, expired


def test_kctl_commands_with_command_config(cluster, security):
    config = str(security.client_properties)
    created = _kctl("topics", "create", "from-kctl", "--partitions", "2", "--replication-factor", "3",
                    "-b", cluster.bootstrap, "--command-config", config, fresh=True)
    assert created.returncode == 0, created.stderr
    listed = _kctl("topics", "list", "-b", cluster.bootstrap, "--command-config", config)
    assert listed.returncode == 0, listed.stderr
    assert "from-kctl" in listed.stdout.split()
    groups = _kctl("groups", "list", "-b", cluster.bootstrap, "--command-config", config, "--json")
    assert groups.returncode == 0, groups.stderr
    # librdkafka's names through -X work as well as the Java client's file
    x = [arg for k, v in security.client_settings(java=False).items() for arg in ("-X", f"{k}={v}")]
    described = _kctl("topics", "describe", "from-kctl", "-b", cluster.bootstrap, *x)
    assert described.returncode == 0, described.stderr
    assert "PartitionCount: 2" in described.stdout


def test_wrong_password_and_plaintext_are_refused(cluster, security):
    config = str(security.client_properties)
    started = time.monotonic()
    wrong = _kctl("topics", "list", "-b", cluster.brokers[0].bootstrap, "--command-config", config,
                  "-X", f"sasl.jaas.config={security.client_settings(java=True)['sasl.jaas.config'].replace(security.passwords[ADMIN_USER], 'not-it')}")
    assert wrong.returncode == 1, wrong.stderr
    assert "refused SCRAM-SHA-512 authentication as admin" in wrong.stderr
    assert time.monotonic() - started < 60
    plain = _kctl("topics", "list", "-b", cluster.brokers[0].bootstrap, "--timeout", "5")
    assert plain.returncode != 0
    assert "security settings" in plain.stderr
    assert BROKER_USER in security.passwords  # the brokers' own user exists; clients never need it
