"""Transaction markers: writing COMMIT/ABORT control batches into a transaction's partitions (KIP-98).

``write_txn_markers`` is the partition leader's side (Kafka's KafkaApis.handleWriteTxnMarkersRequest): one
control batch per partition, appended with origin COORDINATOR and acks=-1, then the group coordinator settles
the transactional offsets of the ``__consumer_offsets`` partitions that took a marker. The WriteTxnMarkers
handler (key 27) calls it for requests from other brokers' coordinators; the coordinator here calls it for the
partitions led here.

``TransactionMarkerChannelManager`` is the coordinator's side (Kafka's TransactionMarkerChannelManager and
TransactionMarkerRequestCompletionHandler): per transaction in PrepareCommit/PrepareAbort, the partitions are
grouped by leader, written locally or sent as WriteTxnMarkers to the leader's endpoint, retried until each has
its marker, and then the coordinator writes CompleteCommit/CompleteAbort.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kcli.records import Record, build_record_batch
from kcli.records.control import ControlRecordType, control_key, end_txn_marker_value
from kcli.records.types import TimestampType
from kcli.storage.producer_state import AppendOrigin

log = logging.getLogger("kcli.broker.transactions")

OFFSETS_TOPIC = "__consumer_offsets"
TopicPartition = tuple[str, int]

# TMRCH: the partition has its marker (or never will take one: an old format or version)
_DONE = frozenset({ErrorCode.none, ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version})
# TMRCH: the producer moved on, or another coordinator took over: stop sending for this transaction
_ABANDON = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})
RETRY_BACKOFF_S = 0.1


@dataclass(frozen=True)
class TxnMarker:
    """One marker of a WriteTxnMarkers request: a transaction's outcome for some partitions."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


def marker_batch(marker: TxnMarker, timestamp: int) -> bytes:
    """Kafka's MemoryRecords.withEndTransactionMarker: one control record, transactional, no sequence."""
    kind = ControlRecordType.COMMIT if marker.commit else ControlRecordType.ABORT
    return build_record_batch([Record(0, timestamp, control_key(kind), end_txn_marker_value(marker.coordinator_epoch))],
                              producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                              is_transactional=True, is_control=True, timestamp_type=TimestampType.CREATE_TIME)


async def write_txn_markers(replica_manager: Any, groups: Any, markers: Iterable[TxnMarker], timeout_ms: int
                            ) -> list[dict[TopicPartition, ErrorCode]]:
    """Per marker, each partition's error: appended (acks=-1) by this broker as leader, or why not
    (UNKNOWN_TOPIC_OR_PARTITION when not hosted, NOT_LEADER_OR_FOLLOWER, INVALID_PRODUCER_EPOCH,
    TRANSACTION_COORDINATOR_FENCED ...)."""
    out = []
    for marker in markers:
        now = int(time.time() * 1000)
        batch = marker_batch(marker, now)
        entries = {tp: batch for tp in marker.partitions}
        results = await replica_manager.append_and_wait(-1, timeout_ms, entries, origin=AppendOrigin.COORDINATOR)
        errors = {tp: ErrorCode(r.error) for tp, r in results.items()}
        settled = {index for (topic, index), code in errors.items() if topic == OFFSETS_TOPIC and code == ErrorCode.none}
        if settled and groups is not None:
            # Kafka's GroupCoordinator.onTransactionCompleted: the pending transactional offsets move or go
            groups.on_transaction_completed(marker.producer_id, settled, marker.commit)
        out.append(errors)
    return out


@dataclass
class PendingCompleteTxn:
    """A transaction whose markers are on their way (Kafka's PendingCompleteTxn)."""

    transactional_id: str
    coordinator_epoch: int
    commit: bool
    metadata: Any  # kcli.broker.transaction_coordinator.TransactionMetadata: its partitions shrink as markers land
    complete: Any  # the CompleteCommit/CompleteAbort transition to write at the end
    producer_id: int
    producer_epoch: int


class TransactionMarkerChannelManager:
    """Sends the markers of completed transactions and then completes them in the coordinator.

    ``leader_of(topic, index)``: the partition's leader id, -1 while it has none, None when the partition is
    gone (its markers are dropped, as Kafka does for deleted topics). ``endpoint(broker_id)``: host and port.
    ``write_local(markers)``: ``write_txn_markers`` on this broker."""

    def __init__(self, coordinator: Any, *, local_broker_id: int,
                 leader_of: Callable[[str, int], int | None],
                 endpoint: Callable[[int], tuple[str, int] | None],
                 write_local: Callable[[list[TxnMarker]], Awaitable[list[dict[TopicPartition, ErrorCode]]]],
                 request_timeout_ms: int, security: Any = None) -> None:
        self.coordinator = coordinator
        self.security = security  # kcli.broker.security.inter_broker.InterBrokerSecurity (None: PLAINTEXT)
        self.local_broker_id = local_broker_id
        self.leader_of = leader_of
        self.endpoint = endpoint
        self.write_local = write_local
        self.request_timeout_ms = request_timeout_ms
        self.pending: dict[str, tuple[PendingCompleteTxn, asyncio.Task]] = {}

    def add_markers_to_send(self, transactional_id: str, coordinator_epoch: int, commit: bool, metadata: Any,
                            complete: Any) -> None:
        pending = PendingCompleteTxn(transactional_id, coordinator_epoch, commit, metadata, complete,
                                     metadata.producer_id, metadata.producer_epoch)
        previous = self.pending.pop(transactional_id, None)
        if previous is not None:
            previous[1].cancel()
        task = asyncio.get_running_loop().create_task(self._drive(pending), name=f"txn-markers-{transactional_id}")
        self.pending[transactional_id] = (pending, task)

    def remove_markers_for_partition(self, txn_partition: int) -> None:
        """The coordinator resigned or reloads ``__transaction_state-txn_partition``: its markers stop."""
        for transactional_id, (pending, task) in list(self.pending.items()):
            if self.coordinator.partition_for(transactional_id) == txn_partition:
                task.cancel()
                del self.pending[transactional_id]

    def shutdown(self) -> None:
        for _pending, task in self.pending.values():
            task.cancel()
        self.pending.clear()

    def _still_coordinator(self, pending: PendingCompleteTxn) -> bool:
        error, found = self.coordinator.get_transaction_state(pending.transactional_id)
        return error is None and found is not None and found[0] == pending.coordinator_epoch \
            and found[1] is pending.metadata

    async def _drive(self, pending: PendingCompleteTxn) -> None:
        try:
            await self._send_all(pending)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("sending the markers of %s failed", pending.transactional_id)
        finally:
            entry = self.pending.get(pending.transactional_id)
            if entry is not None and entry[0] is pending:
                del self.pending[pending.transactional_id]

    async def _send_all(self, pending: PendingCompleteTxn) -> None:
        metadata = pending.metadata
        backoff = RETRY_BACKOFF_S
        while metadata.topic_partitions:
            if not self._still_coordinator(pending):
                log.info("no longer the coordinator of %s at epoch %d: its markers stop", pending.transactional_id,
                         pending.coordinator_epoch)
                return
            by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
            for tp in sorted(metadata.topic_partitions):
                leader = self.leader_of(*tp)
                if leader is None:
                    log.info("%s-%d is gone: no marker for it (transaction %s)", *tp, pending.transactional_id)
                    metadata.remove_partition(tp)
                elif leader >= 0:
                    by_leader[leader].append(tp)
            results = await asyncio.gather(*(self._send(leader, pending, tps) for leader, tps in by_leader.items()))
            if not self._still_coordinator(pending):
                return
            for errors in results:
                for tp, code in errors.items():
                    if code in _DONE:
                        metadata.remove_partition(tp)
                    elif code in _ABANDON:
                        log.warning("marker for %s-%d of %s refused with %s: sending stops", *tp,
                                    pending.transactional_id, code.name)
                        return
            if metadata.topic_partitions:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
        await self.coordinator.complete_transaction(pending.transactional_id, pending.coordinator_epoch,
                                                    pending.complete)

    async def _send(self, leader: int, pending: PendingCompleteTxn, partitions: list[TopicPartition]
                    ) -> dict[TopicPartition, ErrorCode]:
        marker = TxnMarker(pending.producer_id, pending.producer_epoch, pending.commit, pending.coordinator_epoch,
                           tuple(partitions))
        if leader == self.local_broker_id:
            try:
                return (await self.write_local([marker]))[0]
            except Exception:
                log.exception("writing markers of %s locally failed", pending.transactional_id)
                return {tp: ErrorCode.unknown_server_error for tp in partitions}
        endpoint = self.endpoint(leader)
        if endpoint is None:
            return {tp: ErrorCode.not_leader_or_follower for tp in partitions}
        return await self._send_remote(leader, endpoint, marker)

    async def _send_remote(self, leader: int, endpoint: tuple[str, int], marker: TxnMarker
                           ) -> dict[TopicPartition, ErrorCode]:
        """WriteTxnMarkers v1 to the leader; a disconnect re-queues every partition (TMRCH onComplete)."""
        from kio.schema.write_txn_markers.v1 import request as req

        from kcli.broker.network_client import send_request
        from kcli.protocol import ApiKey

        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, index in marker.partitions:
            by_topic[topic].append(index)
        body = req.WriteTxnMarkersRequest(markers=(req.WritableTxnMarker(
            producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
            transaction_result=marker.commit, coordinator_epoch=marker.coordinator_epoch,
            topics=tuple(req.WritableTxnMarkerTopic(name=t, partition_indexes=tuple(ps)) for t, ps in by_topic.items())),))
        try:
            response = await send_request(*endpoint, ApiKey.WRITE_TXN_MARKERS, 1, body,
                                          client_id=f"broker-{self.local_broker_id}-txn-marker-sender",
                                          timeout=self.request_timeout_ms / 1000,
                                          **({} if self.security is None else {"security": self.security}))
        except (OSError, asyncio.TimeoutError, ConnectionError) as exc:
            log.info("WriteTxnMarkers to broker %d at %s:%d failed (%r); retrying", leader, *endpoint, exc)
            return {tp: ErrorCode.request_timed_out for tp in marker.partitions}
        errors = {tp: ErrorCode.request_timed_out for tp in marker.partitions}
        for result in response.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    errors[(topic.name, p.partition_index)] = ErrorCode(p.error_code)
        return errors
