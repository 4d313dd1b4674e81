"""Transactions (KIP-98): AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26), WriteTxnMarkers (27),
TxnOffsetCommit (28); for operators (KIP-664) DescribeProducers (61), DescribeTransactions (65) and
ListTransactions (66). InitProducerId and FindCoordinator's transaction key type live with their APIs
(handlers.producers, handlers.groups); the state machine is kcli.broker.transaction_coordinator."""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.broker.group_coordinator import OFFSETS_TOPIC
from kcli.broker.handlers import authz
from kcli.broker.handlers.common import ZERO, RequestContext, build, response_module
from kcli.protocol.acl import AclOperation, ResourceType
from kcli.broker import transaction_markers
from kcli.broker.transaction_markers import TxnMarker

WRITE, READ, DESCRIBE = AclOperation.WRITE, AclOperation.READ, AclOperation.DESCRIBE
TXN_ID, GROUP, TOPIC = ResourceType.TRANSACTIONAL_ID, ResourceType.GROUP, ResourceType.TOPIC
TXN_DENIED = ErrorCode.transactional_id_authorization_failed
GROUP_DENIED = ErrorCode.group_authorization_failed
TOPIC_DENIED = ErrorCode.topic_authorization_failed
CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
_INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state"})  # Kafka's Topic.isInternal

# Kafka's PRODUCER_FENCED (KIP-588) is answered as INVALID_PRODUCER_EPOCH below these versions.
_PRODUCER_FENCED_SINCE = {"AddPartitionsToTxn": 2, "AddOffsetsToTxn": 2, "EndTxn": 2, "InitProducerId": 4}


def client_error(error: ErrorCode, api: str, version: int) -> ErrorCode:
    if error == ErrorCode.producer_fenced and version < _PRODUCER_FENCED_SINCE[api]:
        return ErrorCode.invalid_producer_epoch
    return error


def _coordinator(ctx: RequestContext) -> Any:
    return ctx.services.transactions


def _unknown_partitions(ctx: RequestContext, partitions: list[tuple[str, int]]) -> set[tuple[str, int]]:
    return {tp for tp in partitions if ctx.services.metadata.partition_state(*tp) is None}


async def _add_partitions(ctx: RequestContext, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]], verify_only: bool = False) -> dict[tuple[str, int], ErrorCode]:
    """Kafka's handleAddPartitionsToTxnRequest: partitions the client may not write (WRITE on the topic, before
    existence; never an internal topic) or that do not exist fail the call (the others get
    OPERATION_NOT_ATTEMPTED); otherwise one coordinator answer for all. Other brokers' requests (v4+) were
    authorized as a whole (CLUSTER_ACTION)."""
    if ctx.api_version < 4:
        writable = authz.authorized_names(ctx, WRITE, TOPIC, (t for t, _ in partitions if t not in _INTERNAL_TOPICS))
    else:
        writable = {t for t, _ in partitions}
    denied = {tp for tp in partitions if tp[0] not in writable}
    unknown = _unknown_partitions(ctx, [tp for tp in partitions if tp not in denied])
    if unknown or denied:
        return {tp: TOPIC_DENIED if tp in denied else ErrorCode.unknown_topic_or_partition if tp in unknown
                else ErrorCode.operation_not_attempted for tp in partitions}
    coordinator = _coordinator(ctx)
    if coordinator is None:
        return {tp: ErrorCode.coordinator_not_available for tp in partitions}
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
    error = await coordinator.handle_add_partitions(transactional_id, producer_id, producer_epoch, partitions)
    return {tp: error for tp in partitions}


def _topic_results(R: Any, errors: dict[tuple[str, int], ErrorCode], topics: Any) -> tuple[Any, ...]:
    return tuple(build(R, "AddPartitionsToTxnTopicResult", name=t.name, results_by_partition=tuple(
        build(R, "AddPartitionsToTxnPartitionResult", partition_index=p, partition_error_code=errors[(t.name, p)])
        for p in t.partitions)) for t in topics)


async def add_partitions_to_txn(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    if hasattr(req, "transactions"):  # v4+ (KIP-890): batched, from other brokers, possibly verify-only
        if not authz.cluster(ctx, AclOperation.CLUSTER_ACTION):
            return build(R, "AddPartitionsToTxnResponse", throttle_time=ZERO, error_code=CLUSTER_DENIED,
                         results_by_transaction=())
        results = []
        for txn in req.transactions:
            partitions = [(t.name, p) for t in txn.topics for p in t.partitions]
            errors = await _add_partitions(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                           partitions, verify_only=txn.verify_only)
            results.append(build(R, "AddPartitionsToTxnResult", transactional_id=txn.transactional_id,
                                 topic_results=_topic_results(R, errors, txn.topics)))
        return build(R, "AddPartitionsToTxnResponse", throttle_time=ZERO, error_code=ErrorCode.none,
                     results_by_transaction=tuple(results))
    topics = req.v3_and_below_topics
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    if not ctx.authorize(WRITE, TXN_ID, req.v3_and_below_transactional_id):
        return build(R, "AddPartitionsToTxnResponse", throttle_time=ZERO,
                     results_by_topic_v3_and_below=_topic_results(R, {tp: TXN_DENIED for tp in partitions}, topics))
    errors = await _add_partitions(ctx, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                                   req.v3_and_below_producer_epoch, partitions)
    errors = {tp: client_error(e, "AddPartitionsToTxn", ctx.api_version) for tp, e in errors.items()}
    return build(R, "AddPartitionsToTxnResponse", throttle_time=ZERO,
                 results_by_topic_v3_and_below=_topic_results(R, errors, topics))


async def add_offsets_to_txn(ctx: RequestContext, req: Any) -> Any:
    """The group's __consumer_offsets partition joins the transaction (its markers settle the offsets)."""
    R = response_module(req)
    coordinator = _coordinator(ctx)
    if not ctx.authorize(WRITE, TXN_ID, req.transactional_id):
        error = TXN_DENIED
    elif not ctx.authorize(READ, GROUP, req.group_id):
        error = GROUP_DENIED
    elif coordinator is None:
        error = ErrorCode.coordinator_not_available
    else:
        index = ctx.services.groups.partition_for(req.group_id)
        error = await coordinator.handle_add_partitions(req.transactional_id, req.producer_id, req.producer_epoch,
                                                        [(OFFSETS_TOPIC, index)])
    return build(R, "AddOffsetsToTxnResponse", throttle_time=ZERO,
                 error_code=client_error(error, "AddOffsetsToTxn", ctx.api_version))


async def end_txn(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    coordinator = _coordinator(ctx)
    if not ctx.authorize(WRITE, TXN_ID, req.transactional_id):
        error = TXN_DENIED
    elif coordinator is None:
        error = ErrorCode.coordinator_not_available
    else:
        error = await coordinator.handle_end_transaction(req.transactional_id, req.producer_id, req.producer_epoch,
                                                         bool(req.committed))
    return build(R, "EndTxnResponse", throttle_time=ZERO, error_code=client_error(error, "EndTxn", ctx.api_version))


async def txn_offset_commit(ctx: RequestContext, req: Any) -> Any:
    """To the group coordinator: the offsets wait, invisible, for the transaction's marker."""
    R = response_module(req)
    groups = ctx.services.groups
    offsets = [(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata) for t in req.topics for p in t.partitions]
    # WRITE on the transactional id, READ on the group (either denial fails every partition), then READ on each
    # topic, before existence
    top = (TXN_DENIED if not ctx.authorize(WRITE, TXN_ID, req.transactional_id) else
           GROUP_DENIED if not ctx.authorize(READ, GROUP, req.group_id) else None)
    readable = authz.authorized_names(ctx, READ, TOPIC, (t.name for t in req.topics)) if top is None else set()
    denied = {(t, p) for t, p, *_ in offsets if t not in readable}
    unknown = {(t, p) for t, p, *_ in offsets
               if (t, p) not in denied and ctx.services.metadata.partition_state(t, p) is None}
    wanted = [o for o in offsets if (o[0], o[1]) not in unknown and (o[0], o[1]) not in denied]
    error = top if top is not None else groups.coordinator_error(req.group_id)
    if error == ErrorCode.coordinator_load_in_progress and ctx.api_version < 2:
        error = ErrorCode.coordinator_not_available
    if error is None and not wanted:
        error = ErrorCode.none  # nothing to commit: the per-partition errors are the answer
    if error is None:
        error = await groups.commit_transactional(
            req.group_id, req.producer_id, req.producer_epoch, wanted,
            member_id=getattr(req, "member_id", ""), group_instance_id=getattr(req, "group_instance_id", None),
            generation=getattr(req, "generation_id", -1))
    topics = tuple(build(R, "TxnOffsetCommitResponseTopic", name=t.name, partitions=tuple(
        build(R, "TxnOffsetCommitResponsePartition", partition_index=p.partition_index,
              error_code=top if top is not None else TOPIC_DENIED if (t.name, p.partition_index) in denied else
              ErrorCode.unknown_topic_or_partition if (t.name, p.partition_index) in unknown else error)
        for p in t.partitions)) for t in req.topics)
    return build(R, "TxnOffsetCommitResponse", throttle_time=ZERO, topics=topics)


async def write_txn_markers(ctx: RequestContext, req: Any) -> Any:
    """A transaction coordinator (or an operator's abort, KIP-664) writes markers into partitions led here."""
    R = response_module(req)
    markers = [TxnMarker(m.producer_id, m.producer_epoch, bool(m.transaction_result), m.coordinator_epoch,
                         tuple((t.name, p) for t in m.topics for p in t.partition_indexes)) for m in req.markers]
    # ALTER on the cluster (an operator's abort, KIP-664; its denial not logged) or CLUSTER_ACTION (a
    # coordinator); denied: every partition CLUSTER_AUTHORIZATION_FAILED (Kafka's getErrorResponse)
    if (authz.cluster(ctx, AclOperation.ALTER, log_if_denied=False)
            or authz.cluster(ctx, AclOperation.CLUSTER_ACTION)):
        results = await write_txn_markers_locally(ctx, markers)
    else:
        results = [{tp: CLUSTER_DENIED for tp in m.partitions} for m in markers]
    out = []
    for marker, errors in zip(req.markers, results):
        topics = tuple(build(R, "WritableTxnMarkerTopicResult", name=t.name, partitions=tuple(
            build(R, "WritableTxnMarkerPartitionResult", partition_index=p, error_code=errors[(t.name, p)])
            for p in t.partition_indexes)) for t in marker.topics)
        out.append(build(R, "WritableTxnMarkerResult", producer_id=marker.producer_id, topics=topics))
    return build(R, "WriteTxnMarkersResponse", markers=tuple(out))


async def write_txn_markers_locally(ctx: RequestContext, markers: list[TxnMarker]) -> list[dict[tuple[str, int], ErrorCode]]:
    services = ctx.services
    return await transaction_markers.write_txn_markers(services.replica_manager, services.groups, markers,
                                                       services.config["request.timeout.ms"])


async def describe_transactions(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    coordinator = _coordinator(ctx)
    states = []
    for transactional_id in req.transactional_ids:
        denied = not ctx.authorize(DESCRIBE, TXN_ID, transactional_id)
        if coordinator is None or denied:
            states.append(build(R, "TransactionState",
                                error_code=TXN_DENIED if denied else ErrorCode.coordinator_not_available,
                                transactional_id=transactional_id, transaction_state="",
                                transaction_timeout=ZERO, transaction_start_time_ms=-1, producer_id=-1,
                                producer_epoch=-1, topics=()))
            continue
        d = coordinator.describe(transactional_id)
        by_topic: dict[str, list[int]] = {}
        for topic, index in d.partitions:
            by_topic.setdefault(topic, []).append(index)
        # only the partitions of topics the caller may describe
        by_topic = {t: ps for t, ps in by_topic.items() if ctx.authorize(DESCRIBE, TOPIC, t)}
        states.append(build(R, "TransactionState", error_code=d.error, transactional_id=transactional_id,
                            transaction_state=d.state, transaction_timeout=datetime.timedelta(milliseconds=d.timeout_ms),
                            transaction_start_time_ms=d.start_timestamp, producer_id=d.producer_id,
                            producer_epoch=d.producer_epoch,
                            topics=tuple(build(R, "TopicData", topic=t, partitions=tuple(ps))
                                         for t, ps in by_topic.items())))
    return build(R, "DescribeTransactionsResponse", throttle_time=ZERO, transaction_states=tuple(states))


async def list_transactions(ctx: RequestContext, req: Any) -> Any:
    R = response_module(req)
    coordinator = _coordinator(ctx)
    if coordinator is None:
        error, listings, unknown = ErrorCode.coordinator_not_available, [], []
    else:
        error, listings, unknown = coordinator.list_transactions(req.producer_id_filters, req.state_filters)
        # only the transactional ids the caller may describe
        listings = [t for t in listings if ctx.authorize(DESCRIBE, TXN_ID, t.transactional_id)]
    return build(R, "ListTransactionsResponse", throttle_time=ZERO, error_code=error,
                 unknown_state_filters=tuple(unknown),
                 transaction_states=tuple(build(R, "TransactionState", transactional_id=t.transactional_id,
                                                producer_id=t.producer_id, transaction_state=t.state)
                                          for t in listings))


async def describe_producers(ctx: RequestContext, req: Any) -> Any:
    """The producers a partition leader knows (Kafka's Partition.activeProducerState), for finding hanging
    transactions: an open transaction shows its first offset."""
    R = response_module(req)
    replicas = ctx.services.replica_manager
    topics = []
    for t in req.topics:
        partitions = []
        readable = ctx.authorize(READ, TOPIC, t.name)  # before existence
        for index in t.partition_indexes:
            if not readable:
                partitions.append(build(R, "PartitionResponse", partition_index=index, error_code=TOPIC_DENIED,
                                        error_message=None, active_producers=()))
                continue
            partition = replicas.find(t.name, index)
            if partition is None or not partition.is_leader:
                code = ErrorCode.unknown_topic_or_partition if partition is None else ErrorCode.not_leader_or_follower
                partitions.append(build(R, "PartitionResponse", partition_index=index, error_code=code,
                                        error_message=None, active_producers=()))
                continue
            with partition.managed.lock:
                entries = [e.copy() for e in partition.log.producers.values()]
            producers = tuple(build(R, "ProducerState", producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                                    last_sequence=e.last_sequence, last_timestamp=e.last_timestamp,
                                    coordinator_epoch=e.coordinator_epoch,
                                    current_txn_start_offset=e.current_txn_first_offset)
                              for e in sorted(entries, key=lambda e: e.producer_id))
            partitions.append(build(R, "PartitionResponse", partition_index=index, error_code=ErrorCode.none,
                                    error_message=None, active_producers=producers))
        topics.append(build(R, "TopicResponse", name=t.name, partitions=tuple(partitions)))
    return build(R, "DescribeProducersResponse", throttle_time=ZERO, topics=tuple(topics))
