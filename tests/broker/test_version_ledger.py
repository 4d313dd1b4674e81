"""The version ledger: every advertised API is exercised by a real client, at the versions the ledger
(kcli/protocol/version_ledger.json) records. Regenerate it with KCTL_WRITE_LEDGER=1 after a client upgrade."""

from __future__ import annotations

import json
import os
import shutil
import uuid

import pytest

from broker_support import BrokerProcess, free_port, kcat, old_kafka_python_workload, seek_with_leader_epoch
from kcli.protocol import SUPPORTED_APIS
from support import REPO

LEDGER = REPO / "kcli" / "protocol" / "version_ledger.json"
BAD_LOG_LINES = ("internal error", "Traceback", "cannot encode")


def _workload(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as KafkaTopicPartition

    topic = f"ledger-{uuid.uuid4().hex[:6]}"
    if shutil.which("kcat"):
        assert kcat("-b", bootstrap, "-L").returncode == 0
        assert kcat("-b", bootstrap, "-P", "-t", topic, input=b"a\nb\n").returncode == 0
        assert kcat("-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e").returncode == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(f"{topic}-x", num_partitions=1, replication_factor=1)]).values():
        f.result(30)
    for f in admin.create_partitions([NewPartitions(f"{topic}-x", 2)]).values():
        f.result(30)
    for f in admin.describe_configs([ConfigResource("topic", f"{topic}-x")]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "zstd"})
    for i in range(20):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ledger-ck", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen = 0
    for _ in range(200):
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen += 1
            if seen >= 10:
                break
    consumer.commit(asynchronous=False)
    seek_with_leader_epoch(consumer, topic)  # OffsetForLeaderEpoch (KIP-320)
    consumer.offsets_for_times([TopicPartition(topic, 0, 1)], timeout=30)
    consumer.close()
    admin.list_consumer_groups().result(30)
    admin.describe_consumer_groups(["ledger-ck"])["ledger-ck"].result(30)
    _admin_workload(admin, topic)
    for f in admin.delete_topics([f"{topic}-x"]).values():
        f.result(30)
    kp = KafkaProducer(bootstrap_servers=bootstrap)
    kp.send(topic, b"kp").get(30)
    kp.close()
    kc = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="ledger-kp", auto_offset_reset="earliest",
                       consumer_timeout_ms=8000)
    for _msg in kc:
        break
    kc.commit()
    kc.close()
    ka = KafkaAdminClient(bootstrap_servers=bootstrap)
    ka.list_groups()
    ka.describe_cluster()  # DescribeCluster (KIP-700)
    _client_quota_workload(ka)  # Describe/AlterClientQuotas (KIP-546, issue 26)
    assert ka.describe_log_dirs()  # DescribeLogDirs (KIP-113)
    # AlterReplicaLogDirs (KIP-113): to the dir the replica is in, so nothing moves
    [here] = [d["log_dir"] for broker in ka.describe_log_dirs() for d in broker["log_dirs"]][:1]
    moved = ka.alter_replica_log_dirs({(topic, 0, ka.describe_cluster()["controller_id"]): here})
    assert [e.__name__ for e in moved.values()] == ["NoError"], moved
    ka.describe_groups(["ledger-kp"])
    ka.list_group_offsets({"ledger-kp": None})
    ka.delete_group_offsets("ledger-kp", [KafkaTopicPartition(topic, 1)])  # OffsetDelete (KIP-496)
    ka.delete_groups(["ledger-kp"])
    # KIP-455 on a broker that controls itself: the only valid target is the broker itself; cancelling finds nothing.
    controller_id = ka.describe_cluster()["controller_id"]
    moved = ka.alter_partition_reassignments({KafkaTopicPartition(topic, 0): [controller_id],
                                              KafkaTopicPartition(topic, 1): None})
    assert moved[KafkaTopicPartition(topic, 0)] is None
    assert moved[KafkaTopicPartition(topic, 1)].__name__ == "NoReassignmentInProgressError"
    assert ka.list_partition_reassignments() == {}
    ka.close()
    _transaction_workload(bootstrap, topic)
    old_kafka_python_workload(bootstrap, topic)


def _client_quota_workload(ka) -> None:
    """kafka-python ships the request classes of Describe/AlterClientQuotas but no admin method: sent raw. A quota
    set, described, then removed (too large to throttle anything meanwhile)."""
    from kafka.protocol.admin.client_quotas import AlterClientQuotasRequest, DescribeClientQuotasRequest

    Entry = AlterClientQuotasRequest.EntryData
    entity = [Entry.EntityData(entity_type="client-id", entity_name="ledger-quota")]

    def alter(remove: bool):
        return AlterClientQuotasRequest(validate_only=False, entries=[Entry(entity=entity, ops=[
            Entry.OpData(key="producer_byte_rate", value=1e12, remove=remove)])])

    async def work():
        altered = await ka._manager.send(alter(False))
        assert [e.error_code for e in altered.entries] == [0], altered
        described = await ka._manager.send(DescribeClientQuotasRequest(strict=True, components=[
            DescribeClientQuotasRequest.ComponentData(entity_type="client-id", match_type=0, match="ledger-quota")]))
        assert described.error_code == 0 and len(described.entries) == 1, described
        removed = await ka._manager.send(alter(True))
        assert [e.error_code for e in removed.entries] == [0], removed

    ka._manager.run(work)


def _sasl_workload(bootstrap: str) -> None:
    """SaslHandshake and SaslAuthenticate (issue 25): librdkafka and kafka-python log in with PLAIN."""
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    settings = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
                "sasl.password": "p"}
    AdminClient({"bootstrap.servers": bootstrap, **settings}).list_topics(timeout=30)
    ka = KafkaAdminClient(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_plain_username="u", sasl_plain_password="p")
    ka.describe_cluster()
    ka.close()


def _transaction_workload(bootstrap: str, topic: str) -> None:
    """KIP-98 and KIP-664: transactional producers of both clients (with offsets in the transaction), then
    kafka-python's transaction admin: list, describe, the producers of a partition, and an abort marker."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka import TopicPartition as CkTopicPartition
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient
    from kafka.admin._transactions import AbortTransactionSpec
    from kafka.structs import TopicPartition as KafkaTopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ledger-txn", "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "ledger-ck-txn"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"txn", partition=0)
    producer.send_offsets_to_transaction([CkTopicPartition(topic, 0, 1)], consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    consumer.close()
    kp = KafkaProducer(bootstrap_servers=bootstrap, transactional_id="ledger-kp-txn")
    kp.init_transactions()
    kp.begin_transaction()
    kp.send(topic, b"kp-txn", partition=0)
    kp.commit_transaction()
    kp.close()
    ka = KafkaAdminClient(bootstrap_servers=bootstrap)
    listed = {t.transactional_id for txns in ka.list_transactions().values() for t in txns}
    assert {"ledger-ck-txn", "ledger-kp-txn"} <= listed
    assert ka.describe_transactions(["ledger-ck-txn"])["ledger-ck-txn"].state.value == "CompleteCommit"
    tp = KafkaTopicPartition(topic, 0)
    producers = ka.describe_producers([tp])[tp].active_producers
    last = max(producers, key=lambda p: p.producer_id)
    ka.abort_transaction(AbortTransactionSpec(tp, last.producer_id, last.producer_epoch, last.coordinator_epoch))
    ka.close()


def _admin_workload(admin, topic: str) -> None:
    """The admin APIs librdkafka's AdminClient calls: configs, records, cluster, offsets, ACLs and SCRAM."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
                                       AlterConfigOpType, ConfigEntry, ConfigResource, ResourcePatternType,
                                       ResourceType, ScramMechanism, UserScramCredentialDeletion)

    resource = ConfigResource("topic", f"{topic}-x", set_config={"retention.ms": "3600000"})
    for f in admin.alter_configs([resource]).values():
        f.result(30)
    incremental = ConfigResource("topic", f"{topic}-x", incremental_configs=[
        ConfigEntry("retention.bytes", "1048576", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([incremental]).values():
        f.result(30)
    for f in admin.delete_records([TopicPartition(topic, 0, 1)]).values():
        f.result(30)
    admin.describe_cluster().result(30)
    # ElectLeaders: a standalone broker leads all it has, so the preferred leader is already elected.
    from confluent_kafka import ElectionType

    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30)
    assert [e.name() for e in elected.values()] == ["ELECTION_NOT_NEEDED"], elected
    binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:a", "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    every = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                             AclPermissionType.ANY)
    expected = []
    for future in (admin.describe_acls(every), *admin.create_acls([binding]).values(),
                   *admin.delete_acls([every]).values()):
        try:
            future.result(30)
        except KafkaException as exc:  # no authorizer: Kafka's SECURITY_DISABLED
            expected.append(exc.args[0].name())
    assert set(expected) == {"SECURITY_DISABLED"}, expected
    scram = []  # user "u" has no credential to describe or delete
    for future in (*admin.describe_user_scram_credentials(["u"]).values(),
                   *admin.alter_user_scram_credentials([UserScramCredentialDeletion("u", ScramMechanism.SCRAM_SHA_256)]).values()):
        try:
            future.result(30)
        except KafkaException as exc:
            scram.append(exc.args[0].name())
    assert scram == ["RESOURCE_NOT_FOUND", "RESOURCE_NOT_FOUND"], scram


@pytest.mark.broker_process
def test_every_advertised_api_is_exercised_by_a_real_client(tmp_path):
    observed_path = tmp_path / "served.json"
    port, sasl_port = free_port(), free_port()
    broker = BrokerProcess(port, tmp_path / "kafka-logs", [
        "group.initial.rebalance.delay.ms=0",
        f"listeners=PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "sasl.enabled.mechanisms=PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        'required user_u="p";'], env={"KCTL_BROKER_API_LEDGER": str(observed_path)})
    broker.start()
    try:
        _workload(broker.bootstrap)
        _sasl_workload(f"127.0.0.1:{sasl_port}")
    finally:
        assert broker.stop() == 0, broker.log()
    # A handler bug costs the client its connection and most clients retry past it: only the log tells.
    bad = [line for line in broker.log().splitlines() if any(b in line for b in BAD_LOG_LINES)]
    assert not bad, f"internal error in the broker's log:\n{broker.log()}"
    observed = json.loads(observed_path.read_text())
    exercised = {(row["api"], row["version"]) for row in observed}
    for api, supported in SUPPORTED_APIS.items():
        versions = sorted(v for a, v in exercised if a == api.name)
        assert versions, f"{api.name} v{supported.min_version}-v{supported.max_version} is advertised but no client used it"
        assert all(v in supported for v in versions)
    if os.environ.get("KCTL_WRITE_LEDGER"):
        LEDGER.write_text(json.dumps([{"api": r["api"], "version": r["version"], "clients": r["clients"]}
                                      for r in observed], indent=1) + "\n")
    ledger = json.loads(LEDGER.read_text())
    missing = [row for row in ledger if (row["api"], row["version"]) not in exercised]
    assert not missing, f"ledger rows no client exercised this time: {missing}"
