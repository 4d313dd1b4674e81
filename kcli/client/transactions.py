"""Transactions for operators (KIP-664, Kafka's kafka-transactions.sh): list, describe, find hanging, abort.

ListTransactions goes to every broker (each coordinates the ``__transaction_state`` partitions it leads),
DescribeTransactions to each id's coordinator (FindCoordinator key type 1), DescribeProducers to partition
leaders; an abort is a WriteTxnMarkers(ABORT) to the partition's leader, as the Java admin client sends it.
Results are dataclasses; nothing here prints.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.client.client import (
    RETRIABLE,
    RETRIES,
    KafkaClient,
    KafkaClientError,
    KafkaRequestError,
    TopicPartition,
    _build,
)
from kcli.protocol.api import ApiKey

# Kafka's transaction.max.timeout.ms default: an open transaction older than this is past any client's timeout
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000
ACTIVE_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int  # -1 without an open transaction
    partitions: tuple[TopicPartition, ...]

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["partitions"] = [f"{t}-{p}" for t, p in self.partitions]
        return out


@dataclass(frozen=True)
class ProducerState:
    """One producer a partition leader knows (DescribeProducers)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class HangingTransaction:
    """An open transaction in a partition that no coordinator is going to finish (Kafka's find-hanging)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    start_offset: int
    last_timestamp: int
    age_ms: int
    transactional_id: str | None  # the coordinator's id for this producer id, if any
    coordinator_state: str | None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _check(error: Any, request: str, field: str, reason: str = "") -> None:
    if error != ErrorCode.none:
        raise KafkaRequestError(reason, request=request, field=field, error=ErrorCode(error))


def find_transaction_coordinator(client: KafkaClient, transactional_id: str) -> int:
    """FindCoordinator with key type 1 (TRANSACTION); retried while the coordinator loads."""
    for attempt in range(RETRIES):
        connection = client._any()
        version, m = connection.module(ApiKey.FIND_COORDINATOR)
        if version < 1:
            raise KafkaClientError(f"the broker at {connection.address} cannot find transaction coordinators "
                                   "(FindCoordinator v0)")
        body = connection.call(ApiKey.FIND_COORDINATOR, _build(m, "FindCoordinatorRequest", key=transactional_id,
                                                               key_type=1))
        if body.error_code == ErrorCode.none:
            client._brokers[int(body.node_id)] = (body.host, int(body.port))
            return int(body.node_id)
        if body.error_code not in RETRIABLE or attempt == RETRIES - 1:
            _check(body.error_code, f"FindCoordinatorResponse v{version}", "error_code",
                   f"transactional id {transactional_id!r}")
        time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def list_transactions(client: KafkaClient, *, states: Iterable[str] = (), producer_ids: Iterable[int] = ()
                      ) -> list[TransactionListing]:
    """Every broker's transactional ids (ListTransactions), optionally only in ``states`` / of ``producer_ids``."""
    brokers = client.metadata([]).brokers
    out = []
    for node in sorted(brokers):
        connection = client._node(node)
        for attempt in range(RETRIES):
            version, m = connection.module(ApiKey.LIST_TRANSACTIONS)
            body = connection.call(ApiKey.LIST_TRANSACTIONS, _build(
                m, "ListTransactionsRequest", state_filters=tuple(states), producer_id_filters=tuple(producer_ids),
                duration_filter=-1))
            if body.error_code in RETRIABLE and attempt < RETRIES - 1:
                time.sleep(0.2 * (attempt + 1))
                continue
            _check(body.error_code, f"ListTransactionsResponse v{version}", "error_code", f"broker {node}")
            out.extend(TransactionListing(t.transactional_id, int(t.producer_id), t.transaction_state, node)
                       for t in body.transaction_states)
            break
    return sorted(out, key=lambda t: t.transactional_id)


def describe_transactions(client: KafkaClient, transactional_ids: Sequence[str]) -> dict[str, TransactionDescription]:
    """Each id's state from its coordinator; an unknown id raises (TRANSACTIONAL_ID_NOT_FOUND)."""
    by_coordinator: dict[int, list[str]] = {}
    for transactional_id in dict.fromkeys(transactional_ids):
        by_coordinator.setdefault(find_transaction_coordinator(client, transactional_id), []).append(transactional_id)
    out = {}
    for node, ids in by_coordinator.items():
        connection = client._node(node)
        version, m = connection.module(ApiKey.DESCRIBE_TRANSACTIONS)
        body = connection.call(ApiKey.DESCRIBE_TRANSACTIONS, _build(m, "DescribeTransactionsRequest",
                                                                     transactional_ids=tuple(ids)))
        for s in body.transaction_states:
            _check(s.error_code, f"DescribeTransactionsResponse v{version}",
                   f"transaction_states[{s.transactional_id}].error_code", f"transactional id {s.transactional_id!r}")
            start = int(s.transaction_start_time_ms)
            out[s.transactional_id] = TransactionDescription(
                s.transactional_id, node, s.transaction_state, int(s.producer_id), int(s.producer_epoch),
                int(s.transaction_timeout.total_seconds() * 1000), start,
                tuple(sorted((t.topic, int(p)) for t in s.topics for p in t.partitions)))
    return out


def _leaders(client: KafkaClient, partitions: Iterable[TopicPartition]) -> dict[int, list[TopicPartition]]:
    wanted = sorted(set(partitions))
    meta = client.metadata(sorted({t for t, _ in wanted}))
    by_leader: dict[int, list[TopicPartition]] = {}
    for topic, partition in wanted:
        t = meta.topics.get(topic)
        leader = t.partitions.get(partition) if t is not None else None
        if leader is None or leader < 0:
            raise KafkaClientError(f"{topic}-{partition} has no leader in the cluster's metadata",
                                   path="MetadataResponse")
        by_leader.setdefault(leader, []).append((topic, partition))
    return by_leader


def describe_producers(client: KafkaClient, partitions: Iterable[TopicPartition]
                       ) -> dict[TopicPartition, list[ProducerState]]:
    """The producers each partition's leader knows, with their open transaction's first offset."""
    out: dict[TopicPartition, list[ProducerState]] = {}
    for leader, tps in _leaders(client, partitions).items():
        connection = client._node(leader)
        version, m = connection.module(ApiKey.DESCRIBE_PRODUCERS)
        topics: dict[str, list[int]] = {}
        for topic, partition in tps:
            topics.setdefault(topic, []).append(partition)
        body = connection.call(ApiKey.DESCRIBE_PRODUCERS, _build(m, "DescribeProducersRequest", topics=tuple(
            _build(m, "TopicRequest", name=t, partition_indexes=tuple(ps)) for t, ps in topics.items())))
        for t in body.topics:
            for p in t.partitions:
                _check(p.error_code, f"DescribeProducersResponse v{version}",
                       f"topics[{t.name}].partitions[{p.partition_index}].error_code", p.error_message or "")
                out[(t.name, int(p.partition_index))] = [ProducerState(
                    t.name, int(p.partition_index), int(s.producer_id), int(s.producer_epoch), int(s.last_sequence),
                    int(s.last_timestamp), int(s.coordinator_epoch), int(s.current_txn_start_offset))
                    for s in p.active_producers]
    return out


def find_hanging(client: KafkaClient, *, topics: Iterable[str] | None = None,
                 max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
                 now_ms: int | None = None) -> list[HangingTransaction]:
    """Kafka's FindHangingTransactionsCommand: transactions open in a partition (DescribeProducers) for longer
    than ``max_transaction_timeout_ms`` whose coordinator does not have them open with that partition
    (ListTransactions by producer id, then DescribeTransactions): no client or coordinator will end them."""
    names = sorted(set(topics)) if topics is not None else sorted(
        t for t in client.metadata(None).topics if not t.startswith("__"))
    meta = client.metadata(names)
    partitions = [(t, p) for t in names if t in meta.topics for p in meta.topics[t].partitions]
    now = int(time.time() * 1000) if now_ms is None else now_ms
    candidates = [s for states in describe_producers(client, partitions).values() for s in states
                  if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_transaction_timeout_ms]
    if not candidates:
        return []
    listed = {t.producer_id: t for t in list_transactions(client, producer_ids={s.producer_id for s in candidates})}
    described = describe_transactions(client, sorted({t.transactional_id for t in listed.values()})) if listed else {}
    hanging = []
    for s in candidates:
        listing = listed.get(s.producer_id)
        description = described.get(listing.transactional_id) if listing is not None else None
        if (description is not None and description.state in ACTIVE_STATES
                and description.producer_id == s.producer_id and (s.topic, s.partition) in description.partitions):
            continue  # the coordinator will finish it (or time it out)
        hanging.append(HangingTransaction(
            s.topic, s.partition, s.producer_id, s.producer_epoch, s.coordinator_epoch, s.current_txn_start_offset,
            s.last_timestamp, now - s.last_timestamp, listing.transactional_id if listing else None,
            description.state if description else None))
    return hanging


def abort_transaction(client: KafkaClient, topic: str, partition: int, *, producer_id: int | None = None,
                      producer_epoch: int | None = None, coordinator_epoch: int | None = None,
                      start_offset: int | None = None) -> ProducerState | None:
    """Write an ABORT marker into ``topic-partition`` for an open transaction, named by its producer (id, epoch,
    coordinator epoch) or by its first offset (looked up with DescribeProducers, as kafka-transactions.sh
    abort --start-offset). Returns the producer state it aborted, when looked up."""
    found = None
    if start_offset is not None:
        states = describe_producers(client, [(topic, partition)]).get((topic, partition), [])
        found = next((s for s in states if s.current_txn_start_offset == start_offset), None)
        if found is None:
            raise KafkaClientError(f"no transaction of {topic}-{partition} starts at offset {start_offset}")
        producer_id, producer_epoch = found.producer_id, found.producer_epoch
        coordinator_epoch = max(0, found.coordinator_epoch) if coordinator_epoch is None else coordinator_epoch
    if producer_id is None or producer_epoch is None:
        raise KafkaClientError("an abort needs --start-offset, or --producer-id and --producer-epoch")
    leader = next(iter(_leaders(client, [(topic, partition)])))
    connection = client._node(leader)
    version, m = connection.module(ApiKey.WRITE_TXN_MARKERS)
    marker = _build(m, "WritableTxnMarker", producer_id=producer_id, producer_epoch=producer_epoch,
                    transaction_result=False, coordinator_epoch=0 if coordinator_epoch is None else coordinator_epoch,
                    topics=(_build(m, "WritableTxnMarkerTopic", name=topic, partition_indexes=(partition,)),))
    body = connection.call(ApiKey.WRITE_TXN_MARKERS, _build(m, "WriteTxnMarkersRequest", markers=(marker,)))
    for result in body.markers:
        for t in result.topics:
            for p in t.partitions:
                _check(p.error_code, f"WriteTxnMarkersResponse v{version}",
                       f"markers[{result.producer_id}].topics[{t.name}].partitions[{p.partition_index}].error_code")
    return found
