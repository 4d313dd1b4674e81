"""Request handlers: a kio request dataclass plus the broker context in, a kio response dataclass out.

Handlers never touch sockets. Responses are built from the response module of the request's own
version (kio generates one per version), keeping only the fields that version has, so one handler
serves every advertised version.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import logging
import time
import uuid
from functools import cache
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kcli.errors import KcliError
from kcli.records import BatchReader, RecordBatch
from kcli.records.layout import stamp_base_offset, stamp_leader_epoch
from kcli.records.types import NO_SEQUENCE, increment_sequence

if TYPE_CHECKING:
    from kcli.broker.server import Broker

log = logging.getLogger("kcli.broker")

ZERO = datetime.timedelta(0)


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """Who asked: the decoded request (version, client id) and the peer's host."""

    request: Any
    client_host: str

_ZERO_UUID = uuid.UUID(int=0)
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3


@cache
def _fields(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def response_module(request: Any):
    name = type(request).__module__.rsplit(".", 1)[0] + ".response"
    return importlib.import_module(name)


def build(module: Any, class_name: str, **values: Any) -> Any:
    """Instantiate ``module.class_name`` with the values that version has (others are dropped)."""
    cls = getattr(module, class_name)
    names = _fields(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


# -- Metadata -------------------------------------------------------------------------------------
async def metadata(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    requested = None if req.topics is None else [t for t in req.topics]
    auto_create = getattr(req, "allow_auto_topic_creation", True) and broker.config["auto.create.topics.enable"]
    names: list[tuple[str | None, Any]] = []
    if requested is None:
        names = [(name, None) for name in sorted(broker.logs.topics)]
    else:
        for t in requested:
            name = getattr(t, "name", None)
            topic_id = getattr(t, "topic_id", None)
            if name is None and topic_id is not None:
                name = broker.topic_name_by_id(topic_id)
            names.append((name, topic_id))
    topics = []
    for name, topic_id in names:
        error = ErrorCode.none
        entry = broker.logs.topics.get(name) if name else None
        if entry is None and name and auto_create:
            error = broker.auto_create(name)
            entry = broker.logs.topics.get(name)
        elif entry is None:
            error = ErrorCode.unknown_topic_or_partition
        partitions = []
        if entry is not None:
            error = ErrorCode.none
            for p in entry.partitions:
                partitions.append(build(
                    R, "MetadataResponsePartition", error_code=ErrorCode.none, partition_index=p.index,
                    leader_id=broker.broker_id, leader_epoch=0, replica_nodes=(broker.broker_id,),
                    isr_nodes=(broker.broker_id,), offline_replicas=(),
                ))
        topics.append(build(
            R, "MetadataResponseTopic", error_code=error, name=name,
            topic_id=entry.topic_id if entry is not None else (topic_id or _ZERO_UUID), is_internal=bool(
                name and name.startswith("__")), partitions=tuple(partitions), topic_authorized_operations=-2147483648,
        ))
    host, port = broker.advertised
    return build(
        R, "MetadataResponse", throttle_time=ZERO,
        brokers=(build(R, "MetadataResponseBroker", node_id=broker.broker_id, host=host, port=port, rack=None),),
        cluster_id=broker.logs.cluster_id, controller_id=broker.broker_id, topics=tuple(topics),
        cluster_authorized_operations=-2147483648,
    )


# -- Produce --------------------------------------------------------------------------------------
async def produce(broker: Broker, req: Any, call: Call) -> Any | None:
    R = response_module(req)
    topics = []
    for topic in req.topic_data:
        parts = []
        for pd in topic.partition_data:
            error, base, message = broker.append(topic.name, pd.index, bytes(pd.records or b""))
            parts.append(build(
                R, "PartitionProduceResponse", index=pd.index, error_code=error, base_offset=base,
                log_append_time=None, log_start_offset=broker.log_start(topic.name, pd.index), record_errors=(),
                error_message=message,
            ))
        topics.append(build(R, "TopicProduceResponse", name=topic.name, partition_responses=tuple(parts)))
    if req.acks == 0:
        return None  # acks=0: the producer reads no response, so none is sent
    return build(R, "ProduceResponse", responses=tuple(topics), throttle_time=ZERO)


def assign_offsets(raw: bytes, log_end_offset: int, max_message_bytes: int) -> tuple[bytes, list[RecordBatch]]:
    """Validate a produced record set and stamp base offsets and leader epoch (neither is under the CRC)."""
    reader = BatchReader(raw)
    batches = list(reader)
    if not batches or reader.valid_bytes != len(raw):
        raise ProduceError(ErrorCode.corrupt_message, "record set does not hold whole batches")
    out = bytearray(raw)
    next_offset = log_end_offset
    for batch in batches:
        if not isinstance(batch, RecordBatch) or batch.magic != 2:
            raise ProduceError(ErrorCode.invalid_record, "Produce v3+ requires record batches of magic 2")
        if not batch.is_valid:
            raise ProduceError(ErrorCode.corrupt_message, batch.invalid_reason() or "invalid batch")
        if batch.size > max_message_bytes:
            raise ProduceError(ErrorCode.message_too_large,
                                f"batch of {batch.size} bytes exceeds message.max.bytes {max_message_bytes}")
        stamp_base_offset(out, batch.position, next_offset)
        stamp_leader_epoch(out, batch.position, 0)
        batch.base_offset = next_offset
        next_offset += batch.last_offset_delta + 1
    return bytes(out), batches


def check_sequence(state: Any, batch: RecordBatch) -> tuple[ErrorCode, int | None]:
    """Idempotent producer checks against the partition's producer state (KIP-98):
    returns (error, duplicate_base_offset)."""
    if batch.producer_id < 0 or batch.base_sequence == NO_SEQUENCE:
        return ErrorCode.none, None
    if state is None:
        return ErrorCode.none, None  # a new producer (or one whose state expired): accept, as Kafka does
    if batch.producer_epoch < state.producer_epoch:
        return ErrorCode.invalid_producer_epoch, None
    if batch.producer_epoch > state.producer_epoch:
        return (ErrorCode.none, None) if batch.base_sequence == 0 else (ErrorCode.out_of_order_sequence_number, None)
    if state.last_sequence >= 0 and batch.base_sequence == state.first_sequence and \
            batch.last_sequence == state.last_sequence:
        return ErrorCode.none, state.first_offset  # a retry of the last batch: answer with its offset
    expected = increment_sequence(state.last_sequence, 1) if state.last_sequence >= 0 else 0
    if batch.base_sequence != expected:
        return ErrorCode.out_of_order_sequence_number, None
    return ErrorCode.none, None


class ProduceError(KcliError):
    def __init__(self, code: ErrorCode, reason: str) -> None:
        super().__init__(reason)
        self.code = code


# -- Fetch ----------------------------------------------------------------------------------------
async def fetch(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    deadline = time.monotonic() + req.max_wait.total_seconds()
    while True:
        topics, total = _fetch_once(broker, req, R)
        if total >= req.min_bytes or time.monotonic() >= deadline or _has_errors(topics):
            break
        # Parked, not polled: woken by the next append (or the deadline).
        await broker.wait_for_append(deadline - time.monotonic())
    return build(R, "FetchResponse", throttle_time=ZERO, error_code=ErrorCode.none, session_id=0,
                 responses=tuple(topics))


def _has_errors(topics: list[Any]) -> bool:
    return any(p.error_code != ErrorCode.none for t in topics for p in t.partitions)


def _fetch_once(broker: Broker, req: Any, R: Any) -> tuple[list[Any], int]:
    remaining = req.max_bytes
    total = 0
    topics = []
    for topic in req.topics:
        name = getattr(topic, "topic", None)
        topic_id = getattr(topic, "topic_id", None)
        if name is None and topic_id is not None:
            name = broker.topic_name_by_id(topic_id)
        parts = []
        for fp in topic.partitions:
            partition = broker.logs.partition(name, fp.partition) if name else None
            values: dict[str, Any] = dict(partition_index=fp.partition, high_watermark=-1, last_stable_offset=-1,
                                          log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
                                          records=None)
            if partition is None:
                error = ErrorCode.unknown_topic_id if (name is None and topic_id is not None) else \
                    ErrorCode.unknown_topic_or_partition
                parts.append(build(R, "PartitionData", error_code=error, **values))
                continue
            end = partition.log.log_end_offset
            start = partition.log.log_start_offset
            # The last stable offset stops at the first offset of the oldest open transaction (KIP-98).
            open_txns = [e.current_txn_first_offset for e in partition.log.producers.values()
                         if e.current_txn_first_offset >= 0]
            stable = min(open_txns, default=end)
            values.update(high_watermark=end, last_stable_offset=stable, log_start_offset=start)
            if fp.fetch_offset < start or fp.fetch_offset > end:
                parts.append(build(R, "PartitionData", error_code=ErrorCode.offset_out_of_range, **values))
                continue
            records: Any = b""
            if remaining > 0 and fp.fetch_offset < end:
                limit = min(fp.partition_max_bytes, remaining)
                read_committed = getattr(req, "isolation_level", 0) == 1
                reader = partition.reader()
                found = reader.read(fp.fetch_offset, limit, upper_bound=stable if read_committed else None)
                if found is not None:
                    records = found  # a file region: the server sends it with sendfile, zero-copy
                    if read_committed:
                        # read_committed consumers drop these ranges themselves (the data stays in the batches)
                        values["aborted_transactions"] = tuple(
                            build(R, "AbortedTransaction", producer_id=t.producer_id, first_offset=t.first_offset)
                            for t in reader.aborted_transactions(fp.fetch_offset, stable))
            remaining -= len(records)
            total += len(records)
            values["records"] = records
            parts.append(build(R, "PartitionData", error_code=ErrorCode.none, **values))
        topics.append(build(R, "FetchableTopicResponse", topic=name, topic_id=topic_id, partitions=tuple(parts)))
    return topics, total


# -- ListOffsets ----------------------------------------------------------------------------------
async def list_offsets(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    topics = []
    for topic in req.topics:
        parts = []
        for lp in topic.partitions:
            partition = broker.logs.partition(topic.name, lp.partition_index)
            values: dict[str, Any] = dict(partition_index=lp.partition_index, timestamp=-1, offset=-1, leader_epoch=0,
                                          old_style_offsets=())
            if partition is None:
                parts.append(build(R, "ListOffsetsPartitionResponse", error_code=ErrorCode.unknown_topic_or_partition,
                                   **values))
                continue
            if lp.timestamp == LATEST:
                values["offset"] = partition.log.log_end_offset
            elif lp.timestamp == EARLIEST:
                values["offset"] = partition.log.log_start_offset
            else:
                reader = partition.reader()
                match = reader.max_timestamp() if lp.timestamp == MAX_TIMESTAMP else reader.offset_for_timestamp(lp.timestamp)
                if match is not None:
                    values.update(offset=match.offset, timestamp=match.timestamp)
            values["old_style_offsets"] = (values["offset"],)
            parts.append(build(R, "ListOffsetsPartitionResponse", error_code=ErrorCode.none, **values))
        topics.append(build(R, "ListOffsetsTopicResponse", name=topic.name, partitions=tuple(parts)))
    return build(R, "ListOffsetsResponse", throttle_time=ZERO, topics=tuple(topics))


# -- Topics ---------------------------------------------------------------------------------------
async def create_topics(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    results = []
    for t in req.topics:
        count = t.num_partitions if t.num_partitions > 0 else broker.config["num.partitions"]
        error, message = ErrorCode.none, None
        if t.replication_factor not in (-1, 1):
            error, message = ErrorCode.invalid_replication_factor, "Replication factor must be 1: one broker"
        elif t.name in broker.logs.topics:
            error, message = ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists."
        elif t.num_partitions == 0 or t.num_partitions < -1:
            error, message = ErrorCode.invalid_partitions, "Number of partitions must be larger than 0."
        elif not req.validate_only:
            error, message = broker.create_topic(t.name, count)
        entry = broker.logs.topics.get(t.name)
        results.append(build(
            R, "CreatableTopicResult", name=t.name, topic_id=entry.topic_id if entry else _ZERO_UUID,
            error_code=error, error_message=message, topic_config_error_code=ErrorCode.none,
            num_partitions=count if error == ErrorCode.none else -1,
            replication_factor=1 if error == ErrorCode.none else -1, configs=(),
        ))
    return build(R, "CreateTopicsResponse", throttle_time=ZERO, topics=tuple(results))


async def delete_topics(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    names = list(getattr(req, "topic_names", ()) or ())
    for state in getattr(req, "topics", ()) or ():
        names.append(state.name or broker.topic_name_by_id(state.topic_id))
    results = []
    for name in names:
        entry = broker.logs.topics.get(name) if name else None
        if entry is None:
            results.append(build(R, "DeletableTopicResult", name=name, topic_id=_ZERO_UUID,
                                 error_code=ErrorCode.unknown_topic_or_partition, error_message=None))
            continue
        topic_id = entry.topic_id
        broker.delete_topic(name)
        results.append(build(R, "DeletableTopicResult", name=name, topic_id=topic_id, error_code=ErrorCode.none,
                             error_message=None))
    return build(R, "DeleteTopicsResponse", throttle_time=ZERO, responses=tuple(results))


async def create_partitions(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    results = []
    for t in req.topics:
        error, message = ErrorCode.none, None
        if t.name not in broker.logs.topics:
            error, message = ErrorCode.unknown_topic_or_partition, f"Topic '{t.name}' does not exist."
        elif not req.validate_only:
            try:
                broker.logs.add_partitions(t.name, t.count)
                broker._announce(t.name)
            except KcliError as exc:
                error, message = ErrorCode.invalid_partitions, exc.reason
        results.append(build(R, "CreatePartitionsTopicResult", name=t.name, error_code=error, error_message=message))
    return build(R, "CreatePartitionsResponse", throttle_time=ZERO, results=tuple(results))


# -- Coordinators and producers -------------------------------------------------------------------
async def find_coordinator(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    host, port = broker.advertised
    keys = getattr(req, "coordinator_keys", None) or (getattr(req, "key", ""),)
    coordinators = tuple(build(R, "Coordinator", key=k, node_id=broker.broker_id, host=host, port=port,
                               error_code=ErrorCode.none, error_message=None) for k in keys
                         ) if hasattr(R, "Coordinator") else ()  # v4+ (KIP-699) batches keys
    return build(R, "FindCoordinatorResponse", throttle_time=ZERO, error_code=ErrorCode.none, error_message=None,
                 node_id=broker.broker_id, host=host, port=port, coordinators=coordinators)


async def init_producer_id(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    timeout_ms = req.transaction_timeout.total_seconds() * 1000
    if req.transactional_id is not None and timeout_ms > broker.config["transaction.max.timeout.ms"]:
        return build(R, "InitProducerIdResponse", throttle_time=ZERO, error_code=ErrorCode.invalid_transaction_timeout,
                     producer_id=-1, producer_epoch=-1)
    producer_id, epoch = broker.next_producer_id(req.transactional_id)
    return build(R, "InitProducerIdResponse", throttle_time=ZERO, error_code=ErrorCode.none,
                 producer_id=producer_id, producer_epoch=epoch)


async def describe_configs(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    results = []
    for resource in req.resources:
        configs = broker.describe_config(resource.resource_type, resource.resource_name)
        error = ErrorCode.none if configs is not None else ErrorCode.unknown_topic_or_partition
        entries = tuple(build(R, "DescribeConfigsResourceResult", name=k, value=v, read_only=False,
                              is_default=True, config_source=5, is_sensitive=False, synonyms=(), config_type=2,
                              documentation=None)
                        for k, v in (configs or {}).items()
                        if resource.configuration_keys is None or k in resource.configuration_keys)
        results.append(build(R, "DescribeConfigsResult", error_code=error, error_message=None,
                             resource_type=resource.resource_type, resource_name=resource.resource_name,
                             configs=entries))
    return build(R, "DescribeConfigsResponse", throttle_time=ZERO, results=tuple(results))


# -- Groups ---------------------------------------------------------------------------------------
async def join_group(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    result = await broker.groups.join(req, call.request.api_version, call.request.client_id or "", call.client_host)
    members = tuple(build(R, "JoinGroupResponseMember", member_id=mid, group_instance_id=instance, metadata=meta)
                    for mid, instance, meta in result.get("members", ()))
    return build(R, "JoinGroupResponse", throttle_time=ZERO, error_code=result["error_code"],
                 generation_id=result.get("generation_id", -1), protocol_type=result.get("protocol_type"),
                 protocol_name=result.get("protocol_name") or "", leader=result.get("leader") or "",
                 skip_assignment=False, member_id=result.get("member_id", ""), members=members)


async def sync_group(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    result = await broker.groups.sync(req)
    return build(R, "SyncGroupResponse", throttle_time=ZERO, error_code=result["error_code"],
                 protocol_type=result.get("protocol_type"), protocol_name=result.get("protocol_name"),
                 assignment=result.get("assignment", b""))


async def heartbeat(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    return build(R, "HeartbeatResponse", throttle_time=ZERO, error_code=broker.groups.heartbeat(req))


async def leave_group(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    identities = list(getattr(req, "members", None) or ())
    member_ids = [m.member_id for m in identities] if identities else [req.member_id]
    errors = broker.groups.leave(req.group_id, member_ids)
    members = tuple(build(R, "MemberResponse", member_id=mid, group_instance_id=getattr(m, "group_instance_id", None),
                          error_code=err) for mid, m, err in zip(member_ids, identities or [None] * len(member_ids), errors))
    top = errors[0] if not identities else ErrorCode.none
    return build(R, "LeaveGroupResponse", throttle_time=ZERO, error_code=top, members=members)


async def offset_commit(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    generation = getattr(req, "generation_id_or_member_epoch", getattr(req, "generation_id", -1))
    offsets = [(t.name, p.partition_index, p.committed_offset, getattr(p, "committed_leader_epoch", -1),
                p.committed_metadata) for t in req.topics for p in t.partitions]
    unknown = {(t, p) for t, p, *_ in offsets if broker.logs.partition(t, p) is None}
    error = broker.groups.commit(req.group_id, generation, req.member_id,
                                 [o for o in offsets if (o[0], o[1]) not in unknown])
    topics = tuple(build(R, "OffsetCommitResponseTopic", name=t.name, partitions=tuple(
        build(R, "OffsetCommitResponsePartition", partition_index=p.partition_index,
              error_code=ErrorCode.unknown_topic_or_partition if (t.name, p.partition_index) in unknown else error)
        for p in t.partitions)) for t in req.topics)
    return build(R, "OffsetCommitResponse", throttle_time=ZERO, topics=topics)


async def offset_fetch(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)

    def partitions_of(cls: str, committed: dict[int, Any]) -> tuple[Any, ...]:
        return tuple(build(R, cls, partition_index=p, committed_offset=c.offset if c else -1,
                           committed_leader_epoch=c.leader_epoch if c else -1, metadata=c.metadata if c else "",
                           error_code=ErrorCode.none) for p, c in sorted(committed.items()))

    if hasattr(req, "groups"):  # v8+: several groups per request
        groups = []
        for g in req.groups:
            wanted = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            found = broker.groups.fetch_offsets(g.group_id, wanted)
            topics = tuple(build(R, "OffsetFetchResponseTopics", name=t,
                                 partitions=partitions_of("OffsetFetchResponsePartitions", parts))
                           for t, parts in found.items())
            groups.append(build(R, "OffsetFetchResponseGroup", group_id=g.group_id, topics=topics,
                                error_code=ErrorCode.none))
        return build(R, "OffsetFetchResponse", throttle_time=ZERO, groups=tuple(groups))
    wanted = None if req.topics is None else [(t.name, list(t.partition_indexes)) for t in req.topics]
    found = broker.groups.fetch_offsets(req.group_id, wanted)
    topics = tuple(build(R, "OffsetFetchResponseTopic", name=t, partitions=partitions_of("OffsetFetchResponsePartition", parts))
                   for t, parts in found.items())
    return build(R, "OffsetFetchResponse", throttle_time=ZERO, topics=topics, error_code=ErrorCode.none)


async def describe_groups(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    described = []
    for group_id in req.groups:
        group = broker.groups.groups.get(group_id)
        if group is None:
            described.append(build(R, "DescribedGroup", error_code=ErrorCode.none, group_id=group_id, group_state="Dead",
                                   protocol_type="", protocol_data="", members=(), authorized_operations=-2147483648))
            continue
        members = tuple(build(R, "DescribedGroupMember", member_id=m.member_id, group_instance_id=m.group_instance_id,
                              client_id=m.client_id, client_host=m.client_host,
                              member_metadata=m.metadata_for(group.protocol_name), member_assignment=m.assignment)
                        for m in group.members.values())
        described.append(build(R, "DescribedGroup", error_code=ErrorCode.none, group_id=group_id, group_state=group.state,
                               protocol_type=group.protocol_type or "", protocol_data=group.protocol_name or "",
                               members=members, authorized_operations=-2147483648))
    return build(R, "DescribeGroupsResponse", throttle_time=ZERO, groups=tuple(described))


async def list_groups(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    wanted = set(getattr(req, "states_filter", None) or ())
    groups = tuple(build(R, "ListedGroup", group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state)
                   for g in broker.groups.groups.values() if not wanted or g.state in wanted)
    return build(R, "ListGroupsResponse", throttle_time=ZERO, error_code=ErrorCode.none, groups=groups)


async def delete_groups(broker: Broker, req: Any, call: Call) -> Any:
    R = response_module(req)
    results = tuple(build(R, "DeletableGroupResult", group_id=g, error_code=broker.groups.delete(g))
                    for g in req.groups_names)
    return build(R, "DeleteGroupsResponse", throttle_time=ZERO, results=results)
