"""Every API checks what Kafka's KafkaApis checks (kafka-security.md §4.5), in process: a standalone KafkaServer's
handlers called as the socket edge calls them, for the session of User:alice, with a test double of the
authorizer's decision (an explicit allow-list; the real AclAuthorizer's algorithm is tested on its own).

One test per row of ``kcli.broker.handlers.authz.CHECKS`` (a test below walks the table and fails on a row
without one): denied gives Kafka's error, allowed gives the usual answer, and an unauthorized caller cannot tell
whether a topic exists (TOPIC_AUTHORIZATION_FAILED for a topic that is not there either).
"""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.offset_fetch.v8.request import OffsetFetchRequestTopics

import inprocess_broker
from inprocess_broker import InProcessBroker, running_broker
from kcli.broker.handlers import authz
from kcli.broker.handlers.common import CloseConnection, NOT_REQUESTED
from kcli.broker.security import KafkaPrincipal, Session
from kcli.protocol import ApiKey, minimal_request
from kcli.protocol.acl import CLUSTER_NAME, AclOperation, ResourceType
from kcli.records import Record, build_record_batch

Op, Res = AclOperation, ResourceType
ALICE = Session(KafkaPrincipal("User", "alice"), "127.0.0.1")
TOPIC, SECRET, MISSING, GROUP, TXN = "t", "secret", "missing", "g", "tx"
NONE = ErrorCode.none
TOPIC_DENIED = ErrorCode.topic_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
TXN_DENIED = ErrorCode.transactional_id_authorization_failed
UNKNOWN = ErrorCode.unknown_topic_or_partition
run = inprocess_broker.run


@dataclasses.dataclass
class Decision:
    operation: AclOperation
    resource_type: ResourceType
    name: str
    allowed: bool
    log_if_allowed: bool
    log_if_denied: bool
    ref_count: int


class AllowList:
    """The Authorizer protocol over an explicit set of (operation, resource type, name): a test double of the
    decision. ``everything`` allows all (to set the scene); ``decisions`` records each check."""

    def __init__(self) -> None:
        self.allowed: set[tuple[AclOperation, ResourceType, str]] = set()
        self.everything = False
        self.decisions: list[Decision] = []

    def allow(self, operation: AclOperation, resource_type: ResourceType, name: str = CLUSTER_NAME) -> None:
        self.allowed.add((operation, resource_type, name))

    def authorize(self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str, *,
                  request: str = "", log_if_allowed: bool = True, log_if_denied: bool = True,
                  ref_count: int = 1) -> bool:
        assert session is ALICE and request  # the context hands the session and the API's name through
        ok = self.everything or (operation, resource_type, name) in self.allowed
        self.decisions.append(Decision(operation, resource_type, name, ok, log_if_allowed, log_if_denied,
                                       ref_count))
        return ok

    def authorize_by_resource_type(self, session: Session, operation: AclOperation,
                                   resource_type: ResourceType, *, request: str = "") -> bool:
        return self.everything or any(op == operation and rt == resource_type for op, rt, _ in self.allowed)

    def close(self) -> None:  # the server closes its authorizer when it stops
        pass


class Broker(InProcessBroker):
    authorizer: AllowList

    async def call(self, key: ApiKey, version: int, request: Any, client_id: str = "test") -> Any:
        return await self.apis.handle(key, version, request, client_id=client_id, client_host="127.0.0.1",
                                      session=ALICE)

    async def as_everyone(self, key: ApiKey, version: int, request: Any) -> Any:
        """The request with every check allowed (to set the scene)."""
        self.authorizer.everything = True
        try:
            return await self.call(key, version, request)
        finally:
            self.authorizer.everything = False


@contextlib.asynccontextmanager
async def secured(tmp_path, **overrides: str) -> AsyncIterator[Broker]:
    options = {"offsets.topic.num.partitions": "1", "transaction.state.log.num.partitions": "1", **overrides}
    async with running_broker(str(tmp_path / "logs"), Broker, transactions_loaded=True, **options) as b:
        b.server.admin.create_topic(TOPIC, 1, 1)
        b.server.admin.create_topic(SECRET, 1, 1)
        assert b.server.transactions.ensure_topic() is None
        b.authorizer = AllowList()
        b.server.services.authorizer = b.authorizer
        yield b


def req(key: ApiKey, version: int, **overrides: Any) -> Any:
    return minimal_request(key, version, topic=TOPIC, group_id=GROUP, **overrides)


def with_topics(request: Any, field: str, *names: str) -> Any:
    """``request`` with its one-element topic array ``field`` repeated once per name (the name field replaced)."""
    (one,) = getattr(request, field)
    name_field = next(f for f in ("name", "topic", "topic_name") if hasattr(one, f))
    return dataclasses.replace(request, **{field: tuple(dataclasses.replace(one, **{name_field: n})
                                                           for n in names)})


def records(**kwargs: Any) -> bytes:
    return build_record_batch([Record(0, 1_700_000_000_000, None, b"v")], **kwargs)


def by_topic(topics: Any, partitions: str, name: str = "name") -> dict[str, Any]:
    return {getattr(t, name): [getattr(p, "error_code", getattr(p, "partition_error_code", None))
                               for p in getattr(t, partitions)] for t in topics}


# -- the table ----------------------------------------------------------------------------------------------
ROWS: dict[tuple[ApiKey, AclOperation, ResourceType], Any] = {}


def row(api: ApiKey, operation: AclOperation, resource: ResourceType):
    def register(test):
        ROWS[(api, operation, resource)] = test
        return test
    return register


def test_every_row_of_the_table_has_a_test():
    rows = {(c.api, c.operation, c.resource) for c in authz.CHECKS}
    assert rows - set(ROWS) == set()
    assert set(ROWS) - rows == set()


def test_the_table_covers_every_api_the_broker_serves_but_the_acl_scram_and_unchecked_ones():
    from kcli.broker.kafka_apis import HANDLERS
    # checked by their own handlers: DescribeAcls, CreateAcls, DeleteAcls, Describe/AlterUserScramCredentials;
    # checked by nobody (Kafka's too): SaslHandshake, ApiVersions, SaslAuthenticate
    own = {29, 30, 31, 50, 51, 17, 18, 36}
    assert {int(k) for k in HANDLERS} - own == {int(c.api) for c in authz.CHECKS}


def test_without_an_authorizer_every_check_passes_and_the_bit_fields_are_the_supported_sets(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.server.services.authorizer = None
            m = await b.call(ApiKey.METADATA, 9, req(ApiKey.METADATA, 9, topics=None,
                                                     include_cluster_authorized_operations=True,
                                                     include_topic_authorized_operations=True))
            assert {t.name for t in m.topics} >= {TOPIC, SECRET}
            topic_ops = sum(1 << op for op in authz.SUPPORTED_OPERATIONS[Res.TOPIC])
            assert all(t.topic_authorized_operations == topic_ops for t in m.topics)
            assert m.cluster_authorized_operations == sum(1 << op for op in authz.SUPPORTED_OPERATIONS[Res.CLUSTER])
            p = await b.call(ApiKey.PRODUCE, 9, req(ApiKey.PRODUCE, 9, records=records()))
            assert p.responses[0].partition_responses[0].error_code == NONE
    run(main())


# -- Produce ------------------------------------------------------------------------------------------------
@row(ApiKey.PRODUCE, Op.WRITE, Res.TOPIC)
def test_produce_needs_write_on_each_topic_before_existence(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = with_topics(req(ApiKey.PRODUCE, 9, records=records()), "topic_data", TOPIC, MISSING)
            answer = await b.call(ApiKey.PRODUCE, 9, request)
            assert by_topic(answer.responses, "partition_responses") == {TOPIC: [TOPIC_DENIED],
                                                                         MISSING: [TOPIC_DENIED]}
            assert b.server.log_manager.partition(TOPIC, 0).log.log_end_offset == 0  # nothing appended
            b.authorizer.allow(Op.WRITE, Res.TOPIC, TOPIC)
            answer = await b.call(ApiKey.PRODUCE, 9, request)
            assert by_topic(answer.responses, "partition_responses") == {TOPIC: [NONE], MISSING: [TOPIC_DENIED]}
            b.authorizer.allow(Op.WRITE, Res.TOPIC, MISSING)
            answer = await b.call(ApiKey.PRODUCE, 9, request)
            assert by_topic(answer.responses, "partition_responses")[MISSING] == [UNKNOWN]
            # the audit log's ref count: how often the request names the topic
            twice = with_topics(req(ApiKey.PRODUCE, 9, records=records()), "topic_data", SECRET, SECRET)
            b.authorizer.decisions.clear()
            await b.call(ApiKey.PRODUCE, 9, twice)
            assert [(d.name, d.ref_count, d.allowed) for d in b.authorizer.decisions] == [(SECRET, 2, False)]
    run(main())


def test_an_acks_0_produce_with_an_error_closes_the_connection(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            with pytest.raises(CloseConnection, match="TOPIC_AUTHORIZATION_FAILED"):
                await b.call(ApiKey.PRODUCE, 9, req(ApiKey.PRODUCE, 9, records=records(), acks=0))
            assert b.server.log_manager.partition(TOPIC, 0).log.log_end_offset == 0
            b.authorizer.allow(Op.WRITE, Res.TOPIC, TOPIC)
            assert await b.call(ApiKey.PRODUCE, 9, req(ApiKey.PRODUCE, 9, records=records(), acks=0)) is None
            assert b.server.log_manager.partition(TOPIC, 0).log.log_end_offset == 1
            # as Kafka: the authorized partitions are appended, then any error closes the connection
            both = with_topics(req(ApiKey.PRODUCE, 9, records=records(), acks=0), "topic_data", TOPIC, SECRET)
            with pytest.raises(CloseConnection, match="secret-0: TOPIC_AUTHORIZATION_FAILED"):
                await b.call(ApiKey.PRODUCE, 9, both)
            assert b.server.log_manager.partition(TOPIC, 0).log.log_end_offset == 2
            # any error, not only a denial (here a topic that does not exist, for a caller who may know it)
            b.authorizer.allow(Op.WRITE, Res.TOPIC, MISSING)
            with pytest.raises(CloseConnection, match="UNKNOWN_TOPIC_OR_PARTITION"):
                await b.call(ApiKey.PRODUCE, 9, with_topics(req(ApiKey.PRODUCE, 9, records=records(), acks=0),
                                                            "topic_data", MISSING))
    run(main())


@row(ApiKey.PRODUCE, Op.WRITE, Res.TRANSACTIONAL_ID)
def test_a_transactional_produce_needs_write_on_the_transactional_id_for_the_whole_request(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.WRITE, Res.TOPIC, TOPIC)
            batch = records(producer_id=1000, producer_epoch=0, base_sequence=0, is_transactional=True)
            request = req(ApiKey.PRODUCE, 9, records=batch, transactional_id=TXN)
            answer = await b.call(ApiKey.PRODUCE, 9, request)
            assert answer.responses[0].partition_responses[0].error_code == TXN_DENIED
            # without a transactional id a transactional batch cannot be authorized at all
            answer = await b.call(ApiKey.PRODUCE, 9, dataclasses.replace(request, transactional_id=None))
            assert answer.responses[0].partition_responses[0].error_code == TXN_DENIED
            b.authorizer.allow(Op.WRITE, Res.TRANSACTIONAL_ID, TXN)
            answer = await b.call(ApiKey.PRODUCE, 9, request)
            # past authorization: the transaction coordinator never heard of this producer
            assert answer.responses[0].partition_responses[0].error_code not in (TXN_DENIED, TOPIC_DENIED)
            # plain batches do not ask about a transactional id
            b.authorizer.decisions.clear()
            await b.call(ApiKey.PRODUCE, 9, req(ApiKey.PRODUCE, 9, records=records(), transactional_id=TXN))
            assert {d.resource_type for d in b.authorizer.decisions} == {Res.TOPIC}
    run(main())


# -- Fetch --------------------------------------------------------------------------------------------------
def fetch_request(replica_id: int = -1, *names: str) -> Any:
    return with_topics(req(ApiKey.FETCH, 12, replica_id=replica_id), "topics", *(names or (TOPIC,)))


@row(ApiKey.FETCH, Op.READ, Res.TOPIC)
def test_a_consumer_fetch_needs_read_on_each_topic_before_existence(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            await b.as_everyone(ApiKey.PRODUCE, 9, req(ApiKey.PRODUCE, 9, records=records()))
            answer = await b.call(ApiKey.FETCH, 12, fetch_request(-1, TOPIC, MISSING))
            assert by_topic(answer.responses, "partitions", "topic") == {TOPIC: [TOPIC_DENIED],
                                                                         MISSING: [TOPIC_DENIED]}
            assert all(p.records in (b"", None) for t in answer.responses for p in t.partitions)
            b.authorizer.allow(Op.READ, Res.TOPIC, TOPIC)
            b.authorizer.allow(Op.READ, Res.TOPIC, MISSING)
            answer = await b.call(ApiKey.FETCH, 12, fetch_request(-1, TOPIC, MISSING))
            assert by_topic(answer.responses, "partitions", "topic") == {TOPIC: [NONE], MISSING: [UNKNOWN]}
            assert answer.responses[0].partitions[0].high_watermark == 1
    run(main())


@row(ApiKey.FETCH, Op.CLUSTER_ACTION, Res.CLUSTER)
def test_a_follower_fetch_needs_cluster_action(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.READ, Res.TOPIC, TOPIC)  # a consumer's right is not a follower's
            answer = await b.call(ApiKey.FETCH, 12, fetch_request(1))
            assert answer.responses[0].partitions[0].error_code == TOPIC_DENIED
            b.authorizer.allow(Op.CLUSTER_ACTION, Res.CLUSTER)
            answer = await b.call(ApiKey.FETCH, 12, fetch_request(1))
            assert answer.responses[0].partitions[0].error_code != TOPIC_DENIED
    run(main())


# -- ListOffsets, OffsetForLeaderEpoch, DescribeProducers, DeleteRecords --------------------------------------
@row(ApiKey.LIST_OFFSETS, Op.DESCRIBE, Res.TOPIC)
@pytest.mark.parametrize("version", [0, 7])
def test_list_offsets_needs_describe_on_each_topic(tmp_path, version):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = with_topics(req(ApiKey.LIST_OFFSETS, version), "topics", TOPIC, MISSING)
            answer = await b.call(ApiKey.LIST_OFFSETS, version, request)
            assert by_topic(answer.topics, "partitions") == {TOPIC: [TOPIC_DENIED], MISSING: [TOPIC_DENIED]}
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, TOPIC)
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, MISSING)
            answer = await b.call(ApiKey.LIST_OFFSETS, version, request)
            assert by_topic(answer.topics, "partitions") == {TOPIC: [NONE], MISSING: [UNKNOWN]}
    run(main())


def leader_epoch_request(*names: str) -> Any:
    request = with_topics(req(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4), "topics", *names)
    return request


@row(ApiKey.OFFSET_FOR_LEADER_EPOCH, Op.CLUSTER_ACTION, Res.CLUSTER)
def test_offset_for_leader_epoch_is_allowed_to_brokers_with_cluster_action(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            answer = await b.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, leader_epoch_request(TOPIC, MISSING))
            assert by_topic(answer.topics, "partitions", "topic") == {TOPIC: [TOPIC_DENIED],
                                                                      MISSING: [TOPIC_DENIED]}
            b.authorizer.allow(Op.CLUSTER_ACTION, Res.CLUSTER)
            answer = await b.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, leader_epoch_request(TOPIC, MISSING))
            assert by_topic(answer.topics, "partitions", "topic") == {TOPIC: [NONE], MISSING: [UNKNOWN]}
    run(main())


@row(ApiKey.OFFSET_FOR_LEADER_EPOCH, Op.DESCRIBE, Res.TOPIC)
def test_offset_for_leader_epoch_is_allowed_to_consumers_with_describe_on_the_topic(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, TOPIC)
            answer = await b.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, leader_epoch_request(TOPIC, SECRET))
            assert by_topic(answer.topics, "partitions", "topic") == {TOPIC: [NONE], SECRET: [TOPIC_DENIED]}
            # the cluster check that failed first is not an audit-log denial (logIfDenied = false)
            first = b.authorizer.decisions[0]
            assert (first.resource_type, first.allowed, first.log_if_denied) == (Res.CLUSTER, False, False)
    run(main())


@row(ApiKey.DESCRIBE_PRODUCERS, Op.READ, Res.TOPIC)
def test_describe_producers_needs_read_on_the_topic(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = with_topics(req(ApiKey.DESCRIBE_PRODUCERS, 0), "topics", TOPIC, MISSING)
            request = dataclasses.replace(request, topics=tuple(dataclasses.replace(t, partition_indexes=(0,))
                                                                for t in request.topics))
            answer = await b.call(ApiKey.DESCRIBE_PRODUCERS, 0, request)
            assert by_topic(answer.topics, "partitions") == {TOPIC: [TOPIC_DENIED], MISSING: [TOPIC_DENIED]}
            b.authorizer.allow(Op.READ, Res.TOPIC, TOPIC)
            b.authorizer.allow(Op.READ, Res.TOPIC, MISSING)
            answer = await b.call(ApiKey.DESCRIBE_PRODUCERS, 0, request)
            assert by_topic(answer.topics, "partitions") == {TOPIC: [NONE], MISSING: [UNKNOWN]}
    run(main())


@row(ApiKey.DELETE_RECORDS, Op.DELETE, Res.TOPIC)
def test_delete_records_needs_delete_on_the_topic(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            await b.as_everyone(ApiKey.PRODUCE, 9, req(ApiKey.PRODUCE, 9, records=records()))
            request = with_topics(req(ApiKey.DELETE_RECORDS, 2), "topics", TOPIC, MISSING)
            answer = await b.call(ApiKey.DELETE_RECORDS, 2, request)
            assert by_topic(answer.topics, "partitions") == {TOPIC: [TOPIC_DENIED], MISSING: [TOPIC_DENIED]}
            assert b.server.log_manager.partition(TOPIC, 0).log.log_start_offset == 0
            b.authorizer.allow(Op.DELETE, Res.TOPIC, TOPIC)
            b.authorizer.allow(Op.DELETE, Res.TOPIC, MISSING)
            answer = await b.call(ApiKey.DELETE_RECORDS, 2, request)
            assert by_topic(answer.topics, "partitions") == {TOPIC: [NONE], MISSING: [UNKNOWN]}
    run(main())


# -- Metadata and DescribeCluster ---------------------------------------------------------------------------
def metadata_request(version: int, *names: str, auto_create: bool = False, ops: bool = False) -> Any:
    flags = dict(include_topic_authorized_operations=ops)
    if 8 <= version <= 10:
        flags["include_cluster_authorized_operations"] = ops
    request = req(ApiKey.METADATA, version, allow_auto_topic_creation=auto_create, **flags)
    if not names:
        return dataclasses.replace(request, topics=None)
    return with_topics(request, "topics", *names)


@row(ApiKey.METADATA, Op.DESCRIBE, Res.TOPIC)
def test_metadata_lists_only_the_topics_described_and_denies_named_ones_whether_or_not_they_exist(tmp_path):
    async def main() -> None:
        async with secured(tmp_path, **{"auto.create.topics.enable": "false"}) as b:
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, TOPIC)
            every = await b.call(ApiKey.METADATA, 9, metadata_request(9))
            assert [(t.name, t.error_code) for t in every.topics] == [(TOPIC, NONE)]
            # the all-topics filter does not log its denials (Kafka: TRACE)
            assert all(not d.log_if_denied for d in b.authorizer.decisions)
            named = await b.call(ApiKey.METADATA, 12, metadata_request(12, TOPIC, SECRET, MISSING))
            got = {t.name: t for t in named.topics}
            assert got[TOPIC].error_code == NONE and got[TOPIC].partitions
            for name in (SECRET, MISSING):
                assert got[name].error_code == TOPIC_DENIED
                assert got[name].topic_id == uuid.UUID(int=0) and not got[name].partitions
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, MISSING)
            named = await b.call(ApiKey.METADATA, 12, metadata_request(12, MISSING))
            assert named.topics[0].error_code == UNKNOWN
    run(main())


def test_metadata_by_topic_id_denied_keeps_the_id_and_drops_the_name(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            topic_id = b.server.services.metadata.topic(SECRET).topic_id
            request = req(ApiKey.METADATA, 12, topic_id=topic_id)
            request = dataclasses.replace(request, topics=tuple(dataclasses.replace(t, name=None)
                                                                for t in request.topics))
            answer = await b.call(ApiKey.METADATA, 12, request)
            (topic,) = answer.topics
            assert (topic.error_code, topic.name, topic.topic_id) == (TOPIC_DENIED, None, topic_id)
    run(main())


@row(ApiKey.METADATA, Op.CREATE, Res.CLUSTER)
def test_metadata_auto_creates_with_create_on_the_cluster(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, "new1")
            answer = await b.call(ApiKey.METADATA, 9, metadata_request(9, "new1", auto_create=True))
            assert answer.topics[0].error_code == TOPIC_DENIED
            assert b.server.services.metadata.topic("new1") is None
            b.authorizer.allow(Op.CREATE, Res.CLUSTER)
            answer = await b.call(ApiKey.METADATA, 9, metadata_request(9, "new1", auto_create=True))
            assert answer.topics[0].error_code == ErrorCode.leader_not_available  # being created
    run(main())


@row(ApiKey.METADATA, Op.CREATE, Res.TOPIC)
def test_metadata_auto_creates_with_create_on_the_topic(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, "new2")
            b.authorizer.allow(Op.CREATE, Res.TOPIC, "other")
            answer = await b.call(ApiKey.METADATA, 9, metadata_request(9, "new2", auto_create=True))
            assert answer.topics[0].error_code == TOPIC_DENIED
            b.authorizer.allow(Op.CREATE, Res.TOPIC, "new2")
            answer = await b.call(ApiKey.METADATA, 9, metadata_request(9, "new2", auto_create=True))
            assert answer.topics[0].error_code == ErrorCode.leader_not_available
            # CREATE without DESCRIBE: the topic is denied before anything is created
            b.authorizer.allow(Op.CREATE, Res.TOPIC, "new3")
            answer = await b.call(ApiKey.METADATA, 9, metadata_request(9, "new3", auto_create=True))
            assert answer.topics[0].error_code == TOPIC_DENIED
    run(main())


def test_metadata_authorized_operations_come_from_the_authorizer(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, TOPIC)
            b.authorizer.allow(Op.READ, Res.TOPIC, TOPIC)
            answer = await b.call(ApiKey.METADATA, 9, metadata_request(9, ops=True))
            assert [(t.name, t.topic_authorized_operations) for t in answer.topics] == [
                (TOPIC, (1 << Op.DESCRIBE) | (1 << Op.READ))]
            assert answer.cluster_authorized_operations == 0  # no DESCRIBE on the cluster
            b.authorizer.allow(Op.DESCRIBE, Res.CLUSTER)
            b.authorizer.allow(Op.CREATE, Res.CLUSTER)
            answer = await b.call(ApiKey.METADATA, 9, metadata_request(9, ops=True))
            assert answer.cluster_authorized_operations == (1 << Op.DESCRIBE) | (1 << Op.CREATE)
            answer = await b.call(ApiKey.METADATA, 9, metadata_request(9))
            assert answer.cluster_authorized_operations == NOT_REQUESTED
            assert answer.topics[0].topic_authorized_operations == NOT_REQUESTED
    run(main())


@row(ApiKey.DESCRIBE_CLUSTER, Op.DESCRIBE, Res.CLUSTER)
def test_describe_cluster_answers_everyone_with_the_authorized_operations_of_the_caller(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = req(ApiKey.DESCRIBE_CLUSTER, 0, include_cluster_authorized_operations=True)
            answer = await b.call(ApiKey.DESCRIBE_CLUSTER, 0, request)
            assert (answer.error_code, answer.cluster_authorized_operations) == (NONE, 0)
            assert answer.brokers
            b.authorizer.allow(Op.DESCRIBE, Res.CLUSTER)
            b.authorizer.allow(Op.ALTER, Res.CLUSTER)
            answer = await b.call(ApiKey.DESCRIBE_CLUSTER, 0, request)
            assert answer.cluster_authorized_operations == (1 << Op.DESCRIBE) | (1 << Op.ALTER)
    run(main())


@row(ApiKey.DESCRIBE_LOG_DIRS, Op.DESCRIBE, Res.CLUSTER)
@pytest.mark.parametrize("version", [1, 4])
def test_describe_log_dirs_needs_describe_on_the_cluster(tmp_path, version):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = req(ApiKey.DESCRIBE_LOG_DIRS, version, topics=None)
            answer = await b.call(ApiKey.DESCRIBE_LOG_DIRS, version, request)
            assert answer.results == ()
            assert getattr(answer, "error_code", CLUSTER_DENIED) == CLUSTER_DENIED
            b.authorizer.allow(Op.DESCRIBE, Res.CLUSTER)
            answer = await b.call(ApiKey.DESCRIBE_LOG_DIRS, version, request)
            assert getattr(answer, "error_code", NONE) == NONE
            [log_dir] = answer.results
            assert {t.name for t in log_dir.topics} >= {TOPIC, SECRET}
    run(main())


@row(ApiKey.ALTER_REPLICA_LOG_DIRS, Op.ALTER, Res.CLUSTER)
@pytest.mark.parametrize("version", [0, 2])
def test_alter_replica_log_dirs_needs_alter_on_the_cluster(tmp_path, version):
    """Denied: every partition CLUSTER_AUTHORIZATION_FAILED and nothing moves; allowed: the replica's own dir is
    accepted (nothing to move), an unconfigured one is LOG_DIR_NOT_FOUND."""
    async def main() -> None:
        async with secured(tmp_path) as b:
            here = str(b.server.log_manager.partition(TOPIC, 0).directory.parent.absolute())

            def request(path: str) -> Any:
                (entry,) = req(ApiKey.ALTER_REPLICA_LOG_DIRS, version).dirs
                (topic,) = entry.topics
                return dataclasses.replace(req(ApiKey.ALTER_REPLICA_LOG_DIRS, version), dirs=(dataclasses.replace(
                    entry, path=path, topics=(dataclasses.replace(topic, partitions=(0,)),)),))

            def codes(answer: Any) -> dict[str, list[Any]]:
                return {t.topic_name: [p.error_code for p in t.partitions] for t in answer.results}

            answer = await b.call(ApiKey.ALTER_REPLICA_LOG_DIRS, version, request(here))
            assert codes(answer) == {TOPIC: [CLUSTER_DENIED]}
            b.authorizer.allow(Op.ALTER, Res.CLUSTER)
            answer = await b.call(ApiKey.ALTER_REPLICA_LOG_DIRS, version, request(here))
            assert codes(answer) == {TOPIC: [NONE]}
            answer = await b.call(ApiKey.ALTER_REPLICA_LOG_DIRS, version, request(str(tmp_path / "elsewhere")))
            assert codes(answer) == {TOPIC: [ErrorCode.log_dir_not_found]}
            assert not b.server.log_manager.future_logs
    run(main())


@row(ApiKey.DESCRIBE_CLIENT_QUOTAS, Op.DESCRIBE_CONFIGS, Res.CLUSTER)
@row(ApiKey.ALTER_CLIENT_QUOTAS, Op.ALTER_CONFIGS, Res.CLUSTER)
def test_client_quotas_need_describe_configs_or_alter_configs_on_the_cluster(tmp_path):
    """Kafka's handleDescribeClientQuotasRequest and handleAlterClientQuotasRequest: the whole describe fails, each
    alteration entry is answered CLUSTER_AUTHORIZATION_FAILED and nothing is written."""
    from kio.schema.alter_client_quotas.v1 import request as alter
    from kio.schema.describe_client_quotas.v1 import request as describe

    describing = describe.DescribeClientQuotasRequest(components=(), strict=False)
    altering = alter.AlterClientQuotasRequest(validate_only=False, entries=(alter.EntryData(
        entity=(alter.EntityData(entity_type="client-id", entity_name="billing"),),
        ops=(alter.OpData(key="producer_byte_rate", value=1024.0, remove=False),)),))

    async def main() -> None:
        async with secured(tmp_path) as b:
            answer = await b.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describing)
            assert answer.error_code == CLUSTER_DENIED and not answer.entries
            [entry] = (await b.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, altering)).entries
            assert entry.error_code == CLUSTER_DENIED
            b.authorizer.allow(Op.DESCRIBE_CONFIGS, Res.CLUSTER)
            answer = await b.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describing)
            assert answer.error_code == NONE and answer.entries == ()  # the denied alteration wrote nothing
            b.authorizer.allow(Op.ALTER_CONFIGS, Res.CLUSTER)
            [entry] = (await b.call(ApiKey.ALTER_CLIENT_QUOTAS, 1, altering)).entries
            assert entry.error_code == NONE
            [found] = (await b.call(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, describing)).entries
            assert [(v.key, v.value) for v in found.values] == [("producer_byte_rate", 1024.0)]
    run(main())


# -- the controller's requests --------------------------------------------------------------------------------
@pytest.mark.parametrize("key,version", [(ApiKey.LEADER_AND_ISR, 5), (ApiKey.STOP_REPLICA, 3),
                                         (ApiKey.UPDATE_METADATA, 7), (ApiKey.CONTROLLED_SHUTDOWN, 3)])
def test_the_controllers_requests_need_cluster_action(tmp_path, key, version):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.ALTER, Res.CLUSTER)  # ALTER is not CLUSTER_ACTION
            answer = await b.call(key, version, minimal_request(key, version, topic=TOPIC))
            assert answer.error_code == CLUSTER_DENIED
            assert b.server.replica_manager.find(TOPIC, 0).is_leader  # nothing applied
            b.authorizer.allow(Op.CLUSTER_ACTION, Res.CLUSTER)
            answer = await b.call(key, version, minimal_request(key, version, topic=TOPIC))
            assert answer.error_code != CLUSTER_DENIED
    run(main())


for _key in (ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN):
    ROWS[(_key, Op.CLUSTER_ACTION, Res.CLUSTER)] = test_the_controllers_requests_need_cluster_action


@row(ApiKey.WRITE_TXN_MARKERS, Op.CLUSTER_ACTION, Res.CLUSTER)
@pytest.mark.parametrize("operation", [Op.CLUSTER_ACTION, Op.ALTER])
def test_write_txn_markers_needs_cluster_action_or_alter(tmp_path, operation):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = req(ApiKey.WRITE_TXN_MARKERS, 1)
            request = dataclasses.replace(request, markers=tuple(dataclasses.replace(m, producer_id=5, topics=tuple(
                dataclasses.replace(t, partition_indexes=(0,)) for t in m.topics)) for m in request.markers))
            answer = await b.call(ApiKey.WRITE_TXN_MARKERS, 1, request)
            assert by_topic(answer.markers[0].topics, "partitions") == {TOPIC: [CLUSTER_DENIED]}
            assert b.server.log_manager.partition(TOPIC, 0).log.log_end_offset == 0
            b.authorizer.allow(operation, Res.CLUSTER)
            answer = await b.call(ApiKey.WRITE_TXN_MARKERS, 1, request)
            assert by_topic(answer.markers[0].topics, "partitions") == {TOPIC: [NONE]}
    run(main())


# -- groups -------------------------------------------------------------------------------------------------
def commit_request(*names: str) -> Any:
    return with_topics(req(ApiKey.OFFSET_COMMIT, 8), "topics", *names)


@row(ApiKey.OFFSET_COMMIT, Op.READ, Res.GROUP)
def test_offset_commit_needs_read_on_the_group(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.READ, Res.TOPIC, TOPIC)
            answer = await b.call(ApiKey.OFFSET_COMMIT, 8, commit_request(TOPIC, MISSING))
            assert by_topic(answer.topics, "partitions") == {TOPIC: [GROUP_DENIED], MISSING: [GROUP_DENIED]}
            assert b.server.groups.group(GROUP) is None
            b.authorizer.allow(Op.READ, Res.GROUP, GROUP)
            answer = await b.call(ApiKey.OFFSET_COMMIT, 8, commit_request(TOPIC))
            assert by_topic(answer.topics, "partitions") == {TOPIC: [NONE]}
    run(main())


@row(ApiKey.OFFSET_COMMIT, Op.READ, Res.TOPIC)
def test_offset_commit_needs_read_on_each_topic(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.READ, Res.GROUP, GROUP)
            b.authorizer.allow(Op.READ, Res.TOPIC, TOPIC)
            answer = await b.call(ApiKey.OFFSET_COMMIT, 8, commit_request(TOPIC, SECRET, MISSING))
            assert by_topic(answer.topics, "partitions") == {TOPIC: [NONE], SECRET: [TOPIC_DENIED],
                                                             MISSING: [TOPIC_DENIED]}
            b.authorizer.allow(Op.READ, Res.TOPIC, MISSING)
            answer = await b.call(ApiKey.OFFSET_COMMIT, 8, commit_request(MISSING))
            assert by_topic(answer.topics, "partitions") == {MISSING: [UNKNOWN]}
            stored = b.server.groups.fetch_offsets(GROUP, None)
            assert set(stored) == {TOPIC}
    run(main())


@row(ApiKey.OFFSET_FETCH, Op.DESCRIBE, Res.GROUP)
@pytest.mark.parametrize("version", [1, 7, 8])
def test_offset_fetch_needs_describe_on_the_group(tmp_path, version):
    async def main() -> None:
        async with secured(tmp_path) as b:
            await b.as_everyone(ApiKey.OFFSET_COMMIT, 8, commit_request(TOPIC))
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, TOPIC)
            request = req(ApiKey.OFFSET_FETCH, version)
            if version == 1:
                request = dataclasses.replace(request, topics=tuple(dataclasses.replace(t, partition_indexes=(0,))
                                                                    for t in request.topics))
            answer = await b.call(ApiKey.OFFSET_FETCH, version, request)
            if version >= 8:
                assert answer.groups[0].error_code == GROUP_DENIED and answer.groups[0].topics == ()
            elif version == 7:
                assert answer.error_code == GROUP_DENIED and answer.topics == ()
            else:
                assert by_topic(answer.topics, "partitions") == {TOPIC: [GROUP_DENIED]}
            b.authorizer.allow(Op.DESCRIBE, Res.GROUP, GROUP)
            answer = await b.call(ApiKey.OFFSET_FETCH, version, request)
            topics = answer.groups[0].topics if version >= 8 else answer.topics
            assert by_topic(topics, "partitions") == {TOPIC: [NONE]}
    run(main())


@row(ApiKey.OFFSET_FETCH, Op.DESCRIBE, Res.TOPIC)
def test_offset_fetch_denies_named_topics_and_leaves_them_out_of_all_partitions(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            await b.as_everyone(ApiKey.OFFSET_COMMIT, 8, commit_request(TOPIC, SECRET))
            b.authorizer.allow(Op.DESCRIBE, Res.GROUP, GROUP)
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, TOPIC)
            every = await b.call(ApiKey.OFFSET_FETCH, 8, req(ApiKey.OFFSET_FETCH, 8))
            assert [t.name for t in every.groups[0].topics] == [TOPIC]
            named = req(ApiKey.OFFSET_FETCH, 8)
            group = dataclasses.replace(named.groups[0], topics=tuple(
                OffsetFetchRequestTopics(name=n, partition_indexes=(0,)) for n in (TOPIC, SECRET, MISSING)))
            answer = await b.call(ApiKey.OFFSET_FETCH, 8, dataclasses.replace(named, groups=(group,)))
            assert by_topic(answer.groups[0].topics, "partitions") == {TOPIC: [NONE], SECRET: [TOPIC_DENIED],
                                                                       MISSING: [TOPIC_DENIED]}
            assert {p.committed_offset for t in answer.groups[0].topics if t.name != TOPIC
                    for p in t.partitions} == {-1}
    run(main())


@row(ApiKey.FIND_COORDINATOR, Op.DESCRIBE, Res.GROUP)
@pytest.mark.parametrize("version", [3, 4])
def test_find_coordinator_of_a_group_needs_describe_on_it(tmp_path, version):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = req(ApiKey.FIND_COORDINATOR, version, key_type=0)
            answer = await b.call(ApiKey.FIND_COORDINATOR, version, request)
            errors = [c.error_code for c in answer.coordinators] if version >= 4 else [answer.error_code]
            assert errors == [GROUP_DENIED]
            b.authorizer.allow(Op.DESCRIBE, Res.GROUP, GROUP)
            answer = await b.call(ApiKey.FIND_COORDINATOR, version, request)
            errors = [c.error_code for c in answer.coordinators] if version >= 4 else [answer.error_code]
            assert errors == [NONE]
    run(main())


@row(ApiKey.FIND_COORDINATOR, Op.DESCRIBE, Res.TRANSACTIONAL_ID)
def test_find_coordinator_of_a_transactional_id_needs_describe_on_it(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = req(ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=(TXN,))
            b.authorizer.allow(Op.DESCRIBE, Res.GROUP, TXN)  # a group of that name is another resource
            answer = await b.call(ApiKey.FIND_COORDINATOR, 4, request)
            assert [c.error_code for c in answer.coordinators] == [TXN_DENIED]
            b.authorizer.allow(Op.DESCRIBE, Res.TRANSACTIONAL_ID, TXN)
            answer = await b.call(ApiKey.FIND_COORDINATOR, 4, request)
            assert [c.error_code for c in answer.coordinators] == [NONE]
    run(main())


MEMBER_APIS = [(ApiKey.JOIN_GROUP, 7), (ApiKey.HEARTBEAT, 4), (ApiKey.LEAVE_GROUP, 4), (ApiKey.SYNC_GROUP, 5)]


@pytest.mark.parametrize("key,version", MEMBER_APIS)
def test_the_member_apis_need_read_on_the_group(tmp_path, key, version):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.DESCRIBE, Res.GROUP, GROUP)  # DESCRIBE does not imply READ
            answer = await b.call(key, version, req(key, version))
            assert answer.error_code == GROUP_DENIED
            b.authorizer.allow(Op.READ, Res.GROUP, GROUP)
            answer = await b.call(key, version, req(key, version))
            assert answer.error_code != GROUP_DENIED  # the coordinator's own answer (MEMBER_ID_REQUIRED, ...)
    run(main())


for _key, _ in MEMBER_APIS:
    ROWS[(_key, Op.READ, Res.GROUP)] = test_the_member_apis_need_read_on_the_group


@row(ApiKey.DESCRIBE_GROUPS, Op.DESCRIBE, Res.GROUP)
def test_describe_groups_needs_describe_per_group_and_answers_the_authorized_operations(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            await b.as_everyone(ApiKey.OFFSET_COMMIT, 8, commit_request(TOPIC))
            request = req(ApiKey.DESCRIBE_GROUPS, 5, groups=(GROUP, "other"), include_authorized_operations=True)
            b.authorizer.allow(Op.DESCRIBE, Res.GROUP, "other")
            answer = await b.call(ApiKey.DESCRIBE_GROUPS, 5, request)
            got = {g.group_id: g for g in answer.groups}
            assert got[GROUP].error_code == GROUP_DENIED and got[GROUP].group_state == ""
            assert got["other"].error_code == NONE and got["other"].authorized_operations == 1 << Op.DESCRIBE
            b.authorizer.allow(Op.DESCRIBE, Res.GROUP, GROUP)
            b.authorizer.allow(Op.DELETE, Res.GROUP, GROUP)
            answer = await b.call(ApiKey.DESCRIBE_GROUPS, 5, request)
            got = {g.group_id: g for g in answer.groups}
            assert got[GROUP].error_code == NONE and got[GROUP].group_state == "Empty"
            assert got[GROUP].authorized_operations == (1 << Op.DESCRIBE) | (1 << Op.DELETE)
    run(main())


@row(ApiKey.LIST_GROUPS, Op.DESCRIBE, Res.CLUSTER)
@row(ApiKey.LIST_GROUPS, Op.DESCRIBE, Res.GROUP)
def test_list_groups_lists_all_with_describe_on_the_cluster_else_the_groups_described(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            for group in (GROUP, "h"):
                await b.as_everyone(ApiKey.OFFSET_COMMIT, 8, minimal_request(
                    ApiKey.OFFSET_COMMIT, 8, topic=TOPIC, group_id=group))

            async def listed() -> list[str]:
                answer = await b.call(ApiKey.LIST_GROUPS, 4, req(ApiKey.LIST_GROUPS, 4))
                assert answer.error_code == NONE  # never an error
                return sorted(g.group_id for g in answer.groups)
            b.authorizer.decisions.clear()
            assert await listed() == []
            assert all(not d.log_if_denied for d in b.authorizer.decisions)  # a filter: not logged
            b.authorizer.allow(Op.DESCRIBE, Res.GROUP, "h")
            assert await listed() == ["h"]
            b.authorizer.allow(Op.DESCRIBE, Res.CLUSTER)
            assert await listed() == [GROUP, "h"]
    run(main())


@row(ApiKey.DELETE_GROUPS, Op.DELETE, Res.GROUP)
def test_delete_groups_needs_delete_per_group(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            await b.as_everyone(ApiKey.OFFSET_COMMIT, 8, commit_request(TOPIC))
            request = req(ApiKey.DELETE_GROUPS, 2, groups_names=(GROUP, "nobody"))
            b.authorizer.allow(Op.DESCRIBE, Res.GROUP, GROUP)
            answer = await b.call(ApiKey.DELETE_GROUPS, 2, request)
            assert {r.group_id: r.error_code for r in answer.results} == {GROUP: GROUP_DENIED,
                                                                          "nobody": GROUP_DENIED}
            assert b.server.groups.group(GROUP) is not None
            b.authorizer.allow(Op.DELETE, Res.GROUP, GROUP)
            b.authorizer.allow(Op.DELETE, Res.GROUP, "nobody")
            answer = await b.call(ApiKey.DELETE_GROUPS, 2, request)
            assert {r.group_id: r.error_code for r in answer.results} == {GROUP: NONE,
                                                                          "nobody": ErrorCode.group_id_not_found}
    run(main())


@row(ApiKey.OFFSET_DELETE, Op.DELETE, Res.GROUP)
def test_offset_delete_needs_delete_on_the_group(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            await b.as_everyone(ApiKey.OFFSET_COMMIT, 8, commit_request(TOPIC))
            b.authorizer.allow(Op.READ, Res.TOPIC, TOPIC)
            answer = await b.call(ApiKey.OFFSET_DELETE, 0, req(ApiKey.OFFSET_DELETE, 0))
            assert (answer.error_code, answer.topics) == (GROUP_DENIED, ())
            b.authorizer.allow(Op.DELETE, Res.GROUP, GROUP)
            answer = await b.call(ApiKey.OFFSET_DELETE, 0, req(ApiKey.OFFSET_DELETE, 0))
            assert answer.error_code == NONE and by_topic(answer.topics, "partitions") == {TOPIC: [NONE]}
    run(main())


@row(ApiKey.OFFSET_DELETE, Op.READ, Res.TOPIC)
def test_offset_delete_needs_read_on_each_topic(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            await b.as_everyone(ApiKey.OFFSET_COMMIT, 8, commit_request(TOPIC))
            b.authorizer.allow(Op.DELETE, Res.GROUP, GROUP)
            answer = await b.call(ApiKey.OFFSET_DELETE, 0, with_topics(req(ApiKey.OFFSET_DELETE, 0), "topics",
                                                                       TOPIC, MISSING))
            assert answer.error_code == NONE
            assert by_topic(answer.topics, "partitions") == {TOPIC: [TOPIC_DENIED], MISSING: [TOPIC_DENIED]}
            assert set(b.server.groups.fetch_offsets(GROUP, None)) == {TOPIC}  # not deleted
    run(main())


# -- topics and configs -------------------------------------------------------------------------------------
def create_request(*names: str) -> Any:
    return with_topics(req(ApiKey.CREATE_TOPICS, 7), "topics", *names)


@row(ApiKey.CREATE_TOPICS, Op.CREATE, Res.CLUSTER)
def test_create_topics_with_create_on_the_cluster(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            answer = await b.call(ApiKey.CREATE_TOPICS, 7, create_request("n1"))
            assert answer.topics[0].error_code == TOPIC_DENIED
            assert answer.topics[0].error_message == "Authorization failed."
            b.authorizer.allow(Op.CREATE, Res.CLUSTER)
            answer = await b.call(ApiKey.CREATE_TOPICS, 7, create_request("n1", TOPIC))
            assert {t.name: t.error_code for t in answer.topics} == {"n1": NONE,
                                                                     TOPIC: ErrorCode.topic_already_exists}
    run(main())


@row(ApiKey.CREATE_TOPICS, Op.CREATE, Res.TOPIC)
def test_create_topics_with_create_on_the_topic_never_reveals_an_existing_one(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            answer = await b.call(ApiKey.CREATE_TOPICS, 7, create_request(SECRET, "n2"))
            assert {t.name: t.error_code for t in answer.topics} == {SECRET: TOPIC_DENIED, "n2": TOPIC_DENIED}
            b.authorizer.allow(Op.CREATE, Res.TOPIC, SECRET)
            b.authorizer.allow(Op.CREATE, Res.TOPIC, "n2")
            answer = await b.call(ApiKey.CREATE_TOPICS, 7, create_request(SECRET, "n2"))
            assert {t.name: t.error_code for t in answer.topics} == {SECRET: ErrorCode.topic_already_exists,
                                                                     "n2": NONE}
    run(main())


@row(ApiKey.CREATE_TOPICS, Op.DESCRIBE_CONFIGS, Res.TOPIC)
def test_create_topics_answers_the_configs_only_with_describe_configs(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.CREATE, Res.CLUSTER)
            answer = await b.call(ApiKey.CREATE_TOPICS, 7, create_request("n3"))
            (topic,) = answer.topics
            assert (topic.error_code, topic.topic_config_error_code) == (NONE, TOPIC_DENIED)
            assert (topic.num_partitions, topic.replication_factor, topic.configs) == (-1, -1, ())
            b.authorizer.allow(Op.DESCRIBE_CONFIGS, Res.TOPIC, "n4")
            answer = await b.call(ApiKey.CREATE_TOPICS, 7, create_request("n4"))
            (topic,) = answer.topics
            assert (topic.error_code, topic.topic_config_error_code, topic.num_partitions) == (NONE, NONE, 1)
            assert topic.configs
    run(main())


@row(ApiKey.DELETE_TOPICS, Op.DELETE, Res.TOPIC)
def test_delete_topics_needs_delete_on_each_topic_before_existence(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = with_topics(req(ApiKey.DELETE_TOPICS, 6), "topics", SECRET, MISSING)
            answer = await b.call(ApiKey.DELETE_TOPICS, 6, request)
            assert {t.name: t.error_code for t in answer.responses} == {SECRET: TOPIC_DENIED, MISSING: TOPIC_DENIED}
            assert b.server.services.metadata.topic(SECRET) is not None
            b.authorizer.allow(Op.DELETE, Res.TOPIC, SECRET)
            b.authorizer.allow(Op.DELETE, Res.TOPIC, MISSING)
            answer = await b.call(ApiKey.DELETE_TOPICS, 6, request)
            assert {t.name: t.error_code for t in answer.responses} == {SECRET: NONE, MISSING: UNKNOWN}
    run(main())


@row(ApiKey.DELETE_TOPICS, Op.DESCRIBE, Res.TOPIC)
def test_delete_topics_by_id_without_describe_hides_the_name(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            topic_id = b.server.services.metadata.topic(SECRET).topic_id
            request = req(ApiKey.DELETE_TOPICS, 6, topic_id=topic_id)
            request = dataclasses.replace(request, topics=tuple(dataclasses.replace(t, name=None)
                                                                for t in request.topics))
            b.authorizer.allow(Op.DELETE, Res.TOPIC, SECRET)
            answer = await b.call(ApiKey.DELETE_TOPICS, 6, request)
            (topic,) = answer.responses
            assert (topic.error_code, topic.name, topic.topic_id) == (TOPIC_DENIED, None, topic_id)
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, SECRET)
            answer = await b.call(ApiKey.DELETE_TOPICS, 6, request)
            assert (answer.responses[0].error_code, answer.responses[0].name) == (NONE, SECRET)
    run(main())


@row(ApiKey.CREATE_PARTITIONS, Op.ALTER, Res.TOPIC)
def test_create_partitions_needs_alter_on_the_topic(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = with_topics(req(ApiKey.CREATE_PARTITIONS, 3, validate_only=False), "topics", TOPIC, MISSING)
            request = dataclasses.replace(request, topics=tuple(dataclasses.replace(t, count=2)
                                                                for t in request.topics))
            answer = await b.call(ApiKey.CREATE_PARTITIONS, 3, request)
            assert {r.name: r.error_code for r in answer.results} == {TOPIC: TOPIC_DENIED, MISSING: TOPIC_DENIED}
            assert len(b.server.services.metadata.topic(TOPIC).partitions) == 1
            b.authorizer.allow(Op.ALTER, Res.TOPIC, TOPIC)
            b.authorizer.allow(Op.ALTER, Res.TOPIC, MISSING)
            answer = await b.call(ApiKey.CREATE_PARTITIONS, 3, request)
            assert {r.name: r.error_code for r in answer.results} == {TOPIC: NONE, MISSING: UNKNOWN}
    run(main())


def config_request(key: ApiKey, version: int, *resources: tuple[int, str]) -> Any:
    request = req(key, version)
    (one,) = request.resources
    return dataclasses.replace(request, resources=tuple(dataclasses.replace(one, resource_type=t, resource_name=n)
                                                        for t, n in resources))


@row(ApiKey.DESCRIBE_CONFIGS, Op.DESCRIBE_CONFIGS, Res.TOPIC)
@row(ApiKey.DESCRIBE_CONFIGS, Op.DESCRIBE_CONFIGS, Res.CLUSTER)
def test_describe_configs_needs_describe_configs_on_the_topic_or_the_cluster(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = config_request(ApiKey.DESCRIBE_CONFIGS, 4, (2, TOPIC), (2, MISSING), (4, "0"))
            answer = await b.call(ApiKey.DESCRIBE_CONFIGS, 4, request)
            assert [(r.resource_name, r.error_code, r.configs) for r in answer.results] == [
                (TOPIC, TOPIC_DENIED, ()), (MISSING, TOPIC_DENIED, ()), ("0", CLUSTER_DENIED, ())]
            assert answer.results[0].error_message == "Topic authorization failed."
            b.authorizer.allow(Op.DESCRIBE_CONFIGS, Res.TOPIC, TOPIC)
            b.authorizer.allow(Op.DESCRIBE_CONFIGS, Res.TOPIC, MISSING)
            b.authorizer.allow(Op.DESCRIBE_CONFIGS, Res.CLUSTER)
            answer = await b.call(ApiKey.DESCRIBE_CONFIGS, 4, request)
            assert [(r.resource_name, r.error_code) for r in answer.results] == [
                (TOPIC, NONE), (MISSING, UNKNOWN), ("0", NONE)]
            assert answer.results[0].configs and answer.results[2].configs
    run(main())


@row(ApiKey.ALTER_CONFIGS, Op.ALTER_CONFIGS, Res.TOPIC)
@row(ApiKey.ALTER_CONFIGS, Op.ALTER_CONFIGS, Res.CLUSTER)
@row(ApiKey.INCREMENTAL_ALTER_CONFIGS, Op.ALTER_CONFIGS, Res.TOPIC)
@row(ApiKey.INCREMENTAL_ALTER_CONFIGS, Op.ALTER_CONFIGS, Res.CLUSTER)
@pytest.mark.parametrize("key,version", [(ApiKey.ALTER_CONFIGS, 2), (ApiKey.INCREMENTAL_ALTER_CONFIGS, 1)])
def test_alter_configs_needs_alter_configs_on_the_topic_or_the_cluster(tmp_path, key, version):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = config_request(key, version, (2, TOPIC), (2, MISSING), (4, "0"))
            b.authorizer.allow(Op.DESCRIBE_CONFIGS, Res.TOPIC, TOPIC)  # not ALTER_CONFIGS
            answer = await b.call(key, version, request)
            assert [(r.resource_name, r.error_code) for r in answer.responses] == [
                (TOPIC, TOPIC_DENIED), (MISSING, TOPIC_DENIED), ("0", CLUSTER_DENIED)]
            b.authorizer.allow(Op.ALTER_CONFIGS, Res.TOPIC, TOPIC)
            b.authorizer.allow(Op.ALTER_CONFIGS, Res.TOPIC, MISSING)
            b.authorizer.allow(Op.ALTER_CONFIGS, Res.CLUSTER)
            answer = await b.call(key, version, request)
            assert [(r.resource_name, r.error_code) for r in answer.responses] == [
                (TOPIC, NONE), (MISSING, UNKNOWN), ("0", NONE)]
    run(main())


# -- the cluster's admin APIs -------------------------------------------------------------------------------
@row(ApiKey.ELECT_LEADERS, Op.ALTER, Res.CLUSTER)
def test_elect_leaders_needs_alter_on_the_cluster(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = req(ApiKey.ELECT_LEADERS, 2)
            request = dataclasses.replace(request, topic_partitions=tuple(dataclasses.replace(t, partitions=(0,))
                                                                          for t in request.topic_partitions))
            b.authorizer.allow(Op.CLUSTER_ACTION, Res.CLUSTER)  # the security doc's, not the code's
            answer = await b.call(ApiKey.ELECT_LEADERS, 2, request)
            assert answer.error_code == CLUSTER_DENIED
            assert by_topic(answer.replica_election_results, "partition_result", "topic") == {
                TOPIC: [CLUSTER_DENIED]}
            b.authorizer.allow(Op.ALTER, Res.CLUSTER)
            answer = await b.call(ApiKey.ELECT_LEADERS, 2, request)
            assert answer.error_code == NONE
            assert by_topic(answer.replica_election_results, "partition_result", "topic") == {
                TOPIC: [ErrorCode.election_not_needed]}
    run(main())


@row(ApiKey.ALTER_PARTITION_REASSIGNMENTS, Op.ALTER, Res.CLUSTER)
@row(ApiKey.LIST_PARTITION_REASSIGNMENTS, Op.DESCRIBE, Res.CLUSTER)
@pytest.mark.parametrize("key,operation", [(ApiKey.ALTER_PARTITION_REASSIGNMENTS, Op.ALTER),
                                           (ApiKey.LIST_PARTITION_REASSIGNMENTS, Op.DESCRIBE)])
def test_partition_reassignments_need_alter_or_describe_on_the_cluster(tmp_path, key, operation):
    async def main() -> None:
        async with secured(tmp_path) as b:
            answer = await b.call(key, 0, req(key, 0))
            assert answer.error_code == CLUSTER_DENIED
            b.authorizer.allow(operation, Res.CLUSTER)
            answer = await b.call(key, 0, req(key, 0))
            assert answer.error_code == NONE
    run(main())


# -- transactions -------------------------------------------------------------------------------------------
async def init_producer(b: Broker, transactional_id: str | None) -> Any:
    return await b.call(ApiKey.INIT_PRODUCER_ID, 4, req(ApiKey.INIT_PRODUCER_ID, 4,
                                                        transactional_id=transactional_id))


@row(ApiKey.INIT_PRODUCER_ID, Op.WRITE, Res.TRANSACTIONAL_ID)
def test_init_producer_id_with_a_transactional_id_needs_write_on_it(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.IDEMPOTENT_WRITE, Res.CLUSTER)  # not enough for a transactional producer
            answer = await init_producer(b, TXN)
            assert (answer.error_code, answer.producer_id) == (TXN_DENIED, -1)
            b.authorizer.allow(Op.WRITE, Res.TRANSACTIONAL_ID, TXN)
            answer = await init_producer(b, TXN)
            assert answer.error_code == NONE and answer.producer_id >= 0
    run(main())


@row(ApiKey.INIT_PRODUCER_ID, Op.IDEMPOTENT_WRITE, Res.CLUSTER)
@pytest.mark.parametrize("grant", ["idempotent_write", "write_on_some_topic"])
def test_init_producer_id_of_an_idempotent_producer_needs_idempotent_write_or_write_on_some_topic(tmp_path, grant):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.READ, Res.TOPIC, TOPIC)
            answer = await init_producer(b, None)
            assert (answer.error_code, answer.producer_id) == (CLUSTER_DENIED, -1)
            if grant == "idempotent_write":
                b.authorizer.allow(Op.IDEMPOTENT_WRITE, Res.CLUSTER)
            else:  # KIP-679: idempotence on by default for producers that may write somewhere
                b.authorizer.allow(Op.WRITE, Res.TOPIC, "anything")
            answer = await init_producer(b, None)
            assert answer.error_code == NONE and answer.producer_id >= 0
    run(main())


def add_partitions_request(version: int, *names: str) -> Any:
    request = req(ApiKey.ADD_PARTITIONS_TO_TXN, version)
    if version >= 4:
        (txn,) = request.transactions
        topic = txn.topics[0]
        return dataclasses.replace(request, transactions=(dataclasses.replace(
            txn, transactional_id=TXN, topics=tuple(dataclasses.replace(topic, name=n, partitions=(0,))
                                                    for n in names)),))
    topic = request.v3_and_below_topics[0]
    return dataclasses.replace(request, v3_and_below_transactional_id=TXN, v3_and_below_topics=tuple(
        dataclasses.replace(topic, name=n, partitions=(0,)) for n in names))


@row(ApiKey.ADD_PARTITIONS_TO_TXN, Op.WRITE, Res.TRANSACTIONAL_ID)
def test_add_partitions_to_txn_needs_write_on_the_transactional_id(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.WRITE, Res.TOPIC, TOPIC)
            answer = await b.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_partitions_request(3, TOPIC))
            assert by_topic(answer.results_by_topic_v3_and_below, "results_by_partition") == {TOPIC: [TXN_DENIED]}
            b.authorizer.allow(Op.WRITE, Res.TRANSACTIONAL_ID, TXN)
            answer = await b.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, add_partitions_request(3, TOPIC))
            codes = [p.partition_error_code for t in answer.results_by_topic_v3_and_below
                     for p in t.results_by_partition]
            assert TXN_DENIED not in codes and TOPIC_DENIED not in codes  # the coordinator's answer now
    run(main())


@row(ApiKey.ADD_PARTITIONS_TO_TXN, Op.WRITE, Res.TOPIC)
def test_add_partitions_to_txn_needs_write_on_each_topic_and_never_takes_an_internal_one(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.WRITE, Res.TRANSACTIONAL_ID, TXN)
            b.authorizer.allow(Op.WRITE, Res.TOPIC, TOPIC)
            b.authorizer.allow(Op.WRITE, Res.TOPIC, "__consumer_offsets")
            answer = await b.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3,
                                  add_partitions_request(3, TOPIC, SECRET, MISSING, "__consumer_offsets"))
            assert by_topic(answer.results_by_topic_v3_and_below, "results_by_partition") == {
                TOPIC: [ErrorCode.operation_not_attempted], SECRET: [TOPIC_DENIED], MISSING: [TOPIC_DENIED],
                "__consumer_offsets": [TOPIC_DENIED]}
    run(main())


@row(ApiKey.ADD_PARTITIONS_TO_TXN, Op.CLUSTER_ACTION, Res.CLUSTER)
def test_add_partitions_to_txn_from_brokers_needs_cluster_action(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.allow(Op.WRITE, Res.TRANSACTIONAL_ID, TXN)
            b.authorizer.allow(Op.WRITE, Res.TOPIC, TOPIC)
            answer = await b.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, add_partitions_request(4, TOPIC))
            assert (answer.error_code, answer.results_by_transaction) == (CLUSTER_DENIED, ())
            b.authorizer.allowed.clear()
            b.authorizer.allow(Op.CLUSTER_ACTION, Res.CLUSTER)  # and nothing on the topic: a broker's request
            answer = await b.call(ApiKey.ADD_PARTITIONS_TO_TXN, 4, add_partitions_request(4, TOPIC))
            assert answer.error_code == NONE
            codes = by_topic(answer.results_by_transaction[0].topic_results, "results_by_partition")
            assert codes[TOPIC] != [TOPIC_DENIED]
    run(main())


@row(ApiKey.ADD_OFFSETS_TO_TXN, Op.WRITE, Res.TRANSACTIONAL_ID)
@row(ApiKey.ADD_OFFSETS_TO_TXN, Op.READ, Res.GROUP)
def test_add_offsets_to_txn_needs_write_on_the_transactional_id_then_read_on_the_group(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = req(ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id=TXN)
            assert (await b.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, request)).error_code == TXN_DENIED
            b.authorizer.allow(Op.WRITE, Res.TRANSACTIONAL_ID, TXN)
            assert (await b.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, request)).error_code == GROUP_DENIED
            b.authorizer.allow(Op.READ, Res.GROUP, GROUP)
            assert (await b.call(ApiKey.ADD_OFFSETS_TO_TXN, 3, request)).error_code not in (TXN_DENIED,
                                                                                           GROUP_DENIED)
    run(main())


@row(ApiKey.END_TXN, Op.WRITE, Res.TRANSACTIONAL_ID)
def test_end_txn_needs_write_on_the_transactional_id(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = req(ApiKey.END_TXN, 3, transactional_id=TXN)
            b.authorizer.allow(Op.DESCRIBE, Res.TRANSACTIONAL_ID, TXN)
            assert (await b.call(ApiKey.END_TXN, 3, request)).error_code == TXN_DENIED
            b.authorizer.allow(Op.WRITE, Res.TRANSACTIONAL_ID, TXN)
            assert (await b.call(ApiKey.END_TXN, 3, request)).error_code != TXN_DENIED
    run(main())


def txn_commit_request(*names: str) -> Any:
    return with_topics(req(ApiKey.TXN_OFFSET_COMMIT, 3, transactional_id=TXN), "topics", *names)


@row(ApiKey.TXN_OFFSET_COMMIT, Op.WRITE, Res.TRANSACTIONAL_ID)
@row(ApiKey.TXN_OFFSET_COMMIT, Op.READ, Res.GROUP)
@row(ApiKey.TXN_OFFSET_COMMIT, Op.READ, Res.TOPIC)
def test_txn_offset_commit_needs_write_on_the_transactional_id_read_on_the_group_and_each_topic(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            request = txn_commit_request(TOPIC, MISSING)

            async def codes() -> dict[str, list[ErrorCode]]:
                return by_topic((await b.call(ApiKey.TXN_OFFSET_COMMIT, 3, request)).topics, "partitions")
            b.authorizer.allow(Op.READ, Res.GROUP, GROUP)
            b.authorizer.allow(Op.READ, Res.TOPIC, TOPIC)
            assert await codes() == {TOPIC: [TXN_DENIED], MISSING: [TXN_DENIED]}
            b.authorizer.allowed.clear()
            b.authorizer.allow(Op.WRITE, Res.TRANSACTIONAL_ID, TXN)
            b.authorizer.allow(Op.READ, Res.TOPIC, TOPIC)
            assert await codes() == {TOPIC: [GROUP_DENIED], MISSING: [GROUP_DENIED]}
            b.authorizer.allow(Op.READ, Res.GROUP, GROUP)
            got = await codes()
            assert got[MISSING] == [TOPIC_DENIED] and got[TOPIC] != [TOPIC_DENIED]
            b.authorizer.allow(Op.READ, Res.TOPIC, MISSING)
            assert (await codes())[MISSING] == [UNKNOWN]
    run(main())


@row(ApiKey.DESCRIBE_TRANSACTIONS, Op.DESCRIBE, Res.TRANSACTIONAL_ID)
@row(ApiKey.DESCRIBE_TRANSACTIONS, Op.DESCRIBE, Res.TOPIC)
def test_describe_transactions_needs_describe_on_the_id_and_shows_only_the_topics_described(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.everything = True
            init = await init_producer(b, TXN)
            request = add_partitions_request(3, TOPIC)
            request = dataclasses.replace(request, v3_and_below_producer_id=init.producer_id,
                                          v3_and_below_producer_epoch=init.producer_epoch)
            added = await b.call(ApiKey.ADD_PARTITIONS_TO_TXN, 3, request)
            assert by_topic(added.results_by_topic_v3_and_below, "results_by_partition") == {TOPIC: [NONE]}
            b.authorizer.everything = False
            request = req(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=(TXN,))
            (state,) = (await b.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, request)).transaction_states
            assert (state.error_code, state.producer_id, state.topics) == (TXN_DENIED, -1, ())
            b.authorizer.allow(Op.DESCRIBE, Res.TRANSACTIONAL_ID, TXN)
            (state,) = (await b.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, request)).transaction_states
            assert (state.error_code, state.producer_id, state.topics) == (NONE, init.producer_id, ())
            b.authorizer.allow(Op.DESCRIBE, Res.TOPIC, TOPIC)
            (state,) = (await b.call(ApiKey.DESCRIBE_TRANSACTIONS, 0, request)).transaction_states
            assert [(t.topic, t.partitions) for t in state.topics] == [(TOPIC, (0,))]
    run(main())


@row(ApiKey.LIST_TRANSACTIONS, Op.DESCRIBE, Res.TRANSACTIONAL_ID)
def test_list_transactions_lists_only_the_ids_described(tmp_path):
    async def main() -> None:
        async with secured(tmp_path) as b:
            b.authorizer.everything = True
            for transactional_id in (TXN, "other"):
                assert (await init_producer(b, transactional_id)).error_code == NONE
            b.authorizer.everything = False
            answer = await b.call(ApiKey.LIST_TRANSACTIONS, 0, req(ApiKey.LIST_TRANSACTIONS, 0))
            assert (answer.error_code, answer.transaction_states) == (NONE, ())
            b.authorizer.allow(Op.DESCRIBE, Res.TRANSACTIONAL_ID, "other")
            answer = await b.call(ApiKey.LIST_TRANSACTIONS, 0, req(ApiKey.LIST_TRANSACTIONS, 0))
            assert [t.transactional_id for t in answer.transaction_states] == ["other"]
    run(main())
