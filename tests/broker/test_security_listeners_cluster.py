"""Two ZooKeeper-mode brokers with a PLAINTEXT inter-broker listener and a SASL_SSL client listener each
(issue 25): /brokers/ids/<id> lists every endpoint and the protocol map as Kafka writes them, UpdateMetadata carries
every listener, and a SASL_SSL client is told every broker's SASL_SSL endpoint (kafka-security.md §1.2)."""

from __future__ import annotations

import uuid

import pytest

from broker_support import free_port
from cluster_support import Cluster, wait_for
from security_support import STORE_PASSWORD, make_pki

pytestmark = pytest.mark.cluster

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


@pytest.fixture(scope="module")
def secured(zookeeper, tmp_path_factory):
    base = tmp_path_factory.mktemp("sec-cluster")
    pki = make_pki(base / "pki")
    cluster = Cluster(zookeeper, base, brokers=2, extra=("offsets.topic.replication.factor=2",))
    external = {}
    for broker_id, broker in enumerate(cluster.brokers):
        external[broker_id] = free_port()
        broker.overrides += [
            f"listeners=PLAINTEXT://127.0.0.1:{broker.port},SASL_SSL://127.0.0.1:{external[broker_id]}",
            "inter.broker.listener.name=PLAINTEXT", "sasl.enabled.mechanisms=PLAIN",
            f"listener.name.sasl_ssl.plain.sasl.jaas.config={JAAS}",
            f"ssl.keystore.location={pki.path('broker.p12')}", f"ssl.keystore.password={STORE_PASSWORD}"]
    cluster.start()
    try:
        yield cluster, external, pki
    finally:
        cluster.stop()


def _registration(cluster, broker_id: int):
    from kazoo.exceptions import NoNodeError

    try:
        return cluster.read_json(f"/brokers/ids/{broker_id}")
    except NoNodeError:
        return None


def _client(pki) -> dict:
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "alice",
            "sasl.password": "alice-secret", "ssl.ca.location": pki.ca}


def test_registration_lists_every_endpoint(secured):
    cluster, external, _ = secured
    for broker_id, broker in enumerate(cluster.brokers):
        info = wait_for(lambda: _registration(cluster, broker_id), 30, "registration")
        assert info["endpoints"] == [f"PLAINTEXT://127.0.0.1:{broker.port}",
                                     f"SASL_SSL://127.0.0.1:{external[broker_id]}"]
        assert info["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL"}
        assert (info["host"], info["port"]) == ("127.0.0.1", broker.port)  # the first PLAINTEXT endpoint


def test_a_sasl_ssl_client_gets_every_broker_on_its_listener(secured):
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster, external, pki = secured
    bootstrap = f"127.0.0.1:{external[0]}"
    admin = AdminClient({"bootstrap.servers": bootstrap, **_client(pki)})

    def both_brokers():
        brokers = admin.list_topics(timeout=10).brokers
        return sorted((b.id, b.port) for b in brokers.values()) == [(0, external[0]), (1, external[1])]

    wait_for(both_brokers, 60, "both brokers at their SASL_SSL endpoints")
    topic = f"sec-{uuid.uuid4().hex[:6]}"
    for future in admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=2)]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **_client(pki)})
    for i in range(10):
        producer.produce(topic, value=b"%d" % i, partition=i % 2)  # leaders on both brokers
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
                         **_client(pki)})
    consumer.subscribe([topic])
    got = set()
    for _ in range(240):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.add(msg.value())
        if len(got) == 10:
            break
    consumer.close()
    assert got == {b"%d" % i for i in range(10)}
    # the PLAINTEXT listener still answers its own endpoints
    plain = AdminClient({"bootstrap.servers": cluster.brokers[1].bootstrap}).list_topics(timeout=10)
    assert sorted((b.id, b.port) for b in plain.brokers.values()) == [(0, cluster.brokers[0].port),
                                                                      (1, cluster.brokers[1].port)]
