"""What an unauthorized client sees, with real clients against a `kctl broker run` process with Kafka's
AclAuthorizer: PLAINTEXT clients are User:ANONYMOUS, and ACLs for it allow some topics (literal, prefixed, a
wildcard principal), some groups (the wildcard group) and one transactional id, and deny others (no ACL with
allow.everyone.if.no.acl.found=false; a DENY over a prefixed ALLOW). confluent-kafka and kafka-python produce and
consume where allowed; elsewhere they get TOPIC_AUTHORIZATION_FAILED (the same for a topic that does not exist),
GROUP_AUTHORIZATION_FAILED or TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as from Kafka. A second broker has
allow.everyone.if.no.acl.found=true: a topic without ACLs is open, one with an ACL for someone else is not.

The ACLs are created through CreateAcls while ANONYMOUS is a super user; the broker then restarts without that
(they are kept in its log dir's store)."""

from __future__ import annotations

import json
import shutil
import socket
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from broker_support import BrokerProcess, free_port, kcat, read_response, receive_response, send_request
from kcli.protocol import ApiKey, minimal_request
from kcli.records import Record, build_record_batch

pytestmark = pytest.mark.broker_process

AUTHORIZER = "authorizer.class.name=kafka.security.authorizer.AclAuthorizer"
ANONYMOUS = "User:ANONYMOUS"
COMMON = [AUTHORIZER, "group.initial.rebalance.delay.ms=0", "offsets.topic.num.partitions=1",
          "transaction.state.log.num.partitions=1"]
ALLOWED, PREFIXED, DENIED_OVER_PREFIX, OPEN, SECRET = "allowed", "pre-a", "pre-denied", "open-to-all", "secret"
GROUP_DENIED = "forbidden-group"
TXN_OK, TXN_BAD = "txn-ok", "txn-bad"


def acl(resource: ResourceType, name: str, operation: AclOperation, *, pattern=ResourcePatternType.LITERAL,
        permission=AclPermissionType.ALLOW, principal: str = ANONYMOUS) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", operation, permission)


ACLS = [
    *(acl(ResourceType.TOPIC, ALLOWED, op) for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)),
    *(acl(ResourceType.TOPIC, "pre-", op, pattern=ResourcePatternType.PREFIXED)
      for op in (AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE)),
    acl(ResourceType.TOPIC, DENIED_OVER_PREFIX, AclOperation.WRITE, permission=AclPermissionType.DENY),
    acl(ResourceType.TOPIC, OPEN, AclOperation.ALL, principal="User:*"),
    acl(ResourceType.GROUP, "*", AclOperation.READ),  # every group (READ implies DESCRIBE)...
    acl(ResourceType.GROUP, GROUP_DENIED, AclOperation.ALL, permission=AclPermissionType.DENY),  # ...but this one
    acl(ResourceType.TRANSACTIONAL_ID, TXN_OK, AclOperation.WRITE),  # WRITE implies DESCRIBE (FindCoordinator)
]


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "socket.timeout.ms": 10000})


def _wait(futures: dict) -> None:
    for future in futures.values():
        future.result(timeout=30)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("enforced") / "kafka-logs",
                            [*COMMON, f"super.users={ANONYMOUS}"])
    process.start()
    client = admin(process)
    _wait(client.create_topics([NewTopic(t, 1, 1) for t in (ALLOWED, PREFIXED, DENIED_OVER_PREFIX, OPEN, SECRET)],
                               request_timeout=30))
    _wait(client.create_acls(ACLS, request_timeout=30))
    assert process.stop() == 0, process.log()
    process.overrides = [*COMMON, "super.users=User:admin", "allow.everyone.if.no.acl.found=false"]
    process.start()
    yield process
    code = process.stop()
    assert code == 0, process.log()


def produce(broker: BrokerProcess, topic: str, count: int = 3, **config) -> list:
    """Each message's delivery error (None when delivered)."""
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 15000, **config})
    errors: list = []
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(30)
    assert len(errors) == count
    return errors


def consume(broker: BrokerProcess, topic: str, group: str, want: int, timeout: float = 60.0) -> tuple[list, list]:
    """(values, errors) once ``want`` values arrived, or a consumer error was seen, or ``timeout`` passed."""
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    values: list = []
    errors: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(values) < want and not errors and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() != KafkaError._PARTITION_EOF:
                    errors.append(message.error().code())
                continue
            values.append(message.value())
    finally:
        consumer.close()
    return values, errors


def test_confluent_produces_and_consumes_where_acls_allow(broker):
    assert produce(broker, ALLOWED) == [None] * 3
    values, errors = consume(broker, ALLOWED, "app-group", 3)
    assert (sorted(values), errors) == ([b"v0", b"v1", b"v2"], [])
    # a wildcard principal's ACL (User:*) covers ANONYMOUS too
    assert produce(broker, OPEN, 1) == [None]


def test_kafka_python_produces_and_consumes_under_a_prefixed_acl(broker):
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    for i in range(3):
        producer.send(PREFIXED, b"k%d" % i).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(PREFIXED, bootstrap_servers=broker.bootstrap, group_id="kp-group",
                             auto_offset_reset="earliest", consumer_timeout_ms=20000)
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 3:
            break
    consumer.commit()
    consumer.close()
    assert sorted(values) == [b"k0", b"k1", b"k2"]


def test_metadata_lists_only_the_topics_the_caller_may_describe(broker):
    topics = admin(broker).list_topics(timeout=20).topics
    assert set(topics) >= {ALLOWED, PREFIXED, DENIED_OVER_PREFIX, OPEN}
    assert SECRET not in topics and "__consumer_offsets" not in topics


@pytest.mark.parametrize("topic", [SECRET, "no-such-topic"])
def test_an_unauthorized_topic_looks_the_same_whether_or_not_it_exists(broker, topic):
    named = admin(broker).list_topics(topic=topic, timeout=20).topics[topic]
    assert named.error is not None and named.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    errors = produce(broker, topic, 1, **{"message.timeout.ms": 10000})
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    values, consumer_errors = consume(broker, topic, "app-group", 1, timeout=30)
    assert (values, consumer_errors) == ([], [KafkaError.TOPIC_AUTHORIZATION_FAILED])


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed (scripts/setup.sh installs it)")
def test_kcat_lists_only_authorized_topics_and_cannot_produce_to_the_others(broker):
    listed = kcat("-b", broker.bootstrap, "-L", "-J")
    assert listed.returncode == 0, listed.stderr
    names = {t["topic"] for t in json.loads(listed.stdout)["topics"]}
    assert ALLOWED in names and SECRET not in names
    out = kcat("-b", broker.bootstrap, "-P", "-t", SECRET, "-X", "message.timeout.ms=10000", input=b"x\n")
    assert out.returncode != 0 and b"authorization failed" in out.stderr.lower()
    out = kcat("-b", broker.bootstrap, "-P", "-t", ALLOWED, input=b"from kcat\n")
    assert out.returncode == 0, out.stderr


def test_kafka_python_sees_topic_authorization_failed(broker):
    from kafka import KafkaProducer
    from kafka.errors import TopicAuthorizationFailedError

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, max_block_ms=15000)
    try:
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(SECRET, b"x").get(timeout=30)
    finally:
        producer.close()


def test_an_acks_0_produce_to_an_unauthorized_topic_closes_the_connection(broker):
    """Kafka's answer to an acks=0 produce that failed: no response, the connection closed (the producer then
    refreshes its metadata). Allowed, the same connection stays open and answers the next request."""
    batch = build_record_batch([Record(0, 1_700_000_000_000, None, b"x")])
    with socket.create_connection(("127.0.0.1", broker.port), timeout=20) as sock:
        send_request(sock, ApiKey.PRODUCE, 9, minimal_request(ApiKey.PRODUCE, 9, topic=ALLOWED, records=batch,
                                                              acks=0), correlation_id=1)
        send_request(sock, ApiKey.METADATA, 9, minimal_request(ApiKey.METADATA, 9, topic=ALLOWED),
                     correlation_id=2)
        assert receive_response(sock, ApiKey.METADATA, 9).topics[0].error_code == 0
        send_request(sock, ApiKey.PRODUCE, 9, minimal_request(ApiKey.PRODUCE, 9, topic=SECRET, records=batch,
                                                              acks=0), correlation_id=3)
        assert read_response(sock) is None
    log = broker.log()
    assert "closing connection" in log
    # the authorizer's audit line, as Kafka's (kafka.authorizer.logger, INFO for a denial the caller asked for)
    assert ("Principal = User:ANONYMOUS is Denied Operation = Write from host = " in log
            and "on resource = Topic:LITERAL:secret for request = Produce with resourceRefCount = 1" in log)


def test_an_idempotent_producer_needs_only_write_on_some_topic(broker):
    # KIP-679: no IDEMPOTENT_WRITE on the cluster, but WRITE on a topic is enough for InitProducerId
    assert produce(broker, ALLOWED, 2, **{"enable.idempotence": True}) == [None, None]


def test_deny_overrides_a_prefixed_allow(broker):
    # DESCRIBE and READ still come from the prefixed ACL; WRITE is denied on the literal name
    assert DENIED_OVER_PREFIX in admin(broker).list_topics(timeout=20).topics
    errors = produce(broker, DENIED_OVER_PREFIX, 1, **{"message.timeout.ms": 10000})
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]


def test_a_denied_group_fails_with_group_authorization_failed(broker):
    assert produce(broker, ALLOWED, 1) == [None]
    values, errors = consume(broker, ALLOWED, GROUP_DENIED, 1, timeout=30)
    assert values == [] and errors == [KafkaError.GROUP_AUTHORIZATION_FAILED]


def test_a_transaction_commits_with_write_on_its_transactional_id(broker):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": TXN_OK})
    producer.init_transactions(30)
    producer.begin_transaction()
    marker = uuid.uuid4().hex.encode()
    producer.produce(ALLOWED, value=marker)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "txn-reader",
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([ALLOWED])
    deadline = time.monotonic() + 60
    seen = False
    while not seen and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        seen = message is not None and not message.error() and message.value() == marker
    consumer.close()
    assert seen


def test_a_transactional_id_without_acls_is_refused(broker):
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": TXN_BAD})
    with pytest.raises(KafkaException) as raised:
        producer.init_transactions(30)
    assert raised.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_kafka_python_transactional_id_without_acls_is_refused(broker):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as PyKafkaError

    try:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=TXN_BAD)
    except TypeError:
        pytest.skip("this kafka-python has no transactional producer")
    try:
        with pytest.raises(PyKafkaError) as raised:
            producer.init_transactions()
        assert "TransactionalIdAuthorizationFailed" in type(raised.value).__name__ or \
            "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in str(raised.value).upper().replace(" ", "_")
    finally:
        producer.close(timeout=5)


# -- allow.everyone.if.no.acl.found=true -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def permissive(tmp_path_factory):
    process = BrokerProcess(free_port(), tmp_path_factory.mktemp("permissive") / "kafka-logs",
                            [*COMMON, "super.users=User:admin", "allow.everyone.if.no.acl.found=true"])
    process.start()
    client = admin(process)
    _wait(client.create_topics([NewTopic(t, 1, 1) for t in ("free", "claimed")], request_timeout=30))
    # one ACL for someone else makes "claimed" deny-by-default for everyone else
    _wait(client.create_acls([acl(ResourceType.TOPIC, "claimed", AclOperation.ALL, principal="User:bob")],
                             request_timeout=30))
    yield process
    code = process.stop()
    assert code == 0, process.log()


def test_allow_everyone_if_no_acl_found_opens_only_the_resources_without_acls(permissive):
    assert produce(permissive, "free", 2) == [None, None]
    values, errors = consume(permissive, "free", "any-group", 2)
    assert (sorted(values), errors) == ([b"v0", b"v1"], [])
    topics = admin(permissive).list_topics(timeout=20).topics
    assert "free" in topics and "claimed" not in topics
    errors = produce(permissive, "claimed", 1, **{"message.timeout.ms": 10000})
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
