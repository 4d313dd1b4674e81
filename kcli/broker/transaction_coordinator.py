"""The transaction coordinator (KIP-98): transactional ids, their producer ids and epochs, and the two-phase
commit of their transactions (Kafka's TransactionCoordinator, TransactionStateManager and TransactionMetadata).

Each transactional id lives in one partition of ``__transaction_state`` (Java ``String.hashCode`` rule, as
groups in ``__consumer_offsets``); the coordinator is that partition's leader. Every state change is prepared
(``pending_state``: one at a time, others get CONCURRENT_TRANSACTIONS), written to the partition in Kafka's
record format (kcli.records.transaction_log) with acks=-1, and completed once the write is acknowledged:

    Empty -> Ongoing (AddPartitionsToTxn / AddOffsetsToTxn) -> PrepareCommit | PrepareAbort (EndTxn)
          -> COMMIT/ABORT markers to every partition (kcli.broker.transaction_markers) -> CompleteCommit | CompleteAbort

InitProducerId bumps the producer epoch on every call, so an older instance of the same transactional id is
fenced (PRODUCER_FENCED); an open transaction is aborted first under a bumped epoch (PrepareEpochFence).
Transactions open past their timeout are aborted the same way. After a restart or a leadership change the
partition is replayed (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and transactions found in a Prepare state are
completed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from kcli.broker.errors import BrokerError, topic_exists
from kcli.errors import KcliError
from kcli.records import Record, build_record_batch
from kcli.records.consumer_offsets import java_string_hashcode
from kcli.records.transaction_log import (
    TransactionLogValue,
    TransactionState,
    TxnPartitions,
    encode_transaction,
    encode_transaction_tombstone,
)
from kcli.storage.producer_state import AppendOrigin
from kcli.storage.transaction_topic import load_transaction_topic

if TYPE_CHECKING:
    from kcli.broker.config import BrokerConfig

log = logging.getLogger("kcli.broker.transactions")

TRANSACTION_STATE_TOPIC = "__transaction_state"
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767

TopicPartition = tuple[str, int]

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = (
    TransactionState.EMPTY, TransactionState.ONGOING, TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT,
    TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT, TransactionState.DEAD,
    TransactionState.PREPARE_EPOCH_FENCE)

# The names DescribeTransactions and ListTransactions use (Kafka's TransactionState.name).
STATE_NAMES: dict[TransactionState, str] = {
    EMPTY: "Empty", ONGOING: "Ongoing", PREPARE_COMMIT: "PrepareCommit", PREPARE_ABORT: "PrepareAbort",
    COMPLETE_COMMIT: "CompleteCommit", COMPLETE_ABORT: "CompleteAbort", DEAD: "Dead",
    PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}
STATES_BY_NAME = {name: state for state, name in STATE_NAMES.items()}

# The states each state may be entered from (Kafka's TransactionState.validPreviousStates).
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    EMPTY: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    ONGOING: frozenset({ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_COMMIT: frozenset({ONGOING}),
    PREPARE_ABORT: frozenset({ONGOING, PREPARE_EPOCH_FENCE}),
    COMPLETE_COMMIT: frozenset({PREPARE_COMMIT}),
    COMPLETE_ABORT: frozenset({PREPARE_ABORT}),
    DEAD: frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT}),
    PREPARE_EPOCH_FENCE: frozenset({ONGOING}),
}

# An append error as the coordinator's caller sees it (Kafka's TransactionStateManager.appendTransactionToLog).
_APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
}


class IllegalTransactionStateError(BrokerError):
    """A coordinator bug: a transition TransactionMetadata forbids (Kafka's IllegalStateException)."""


def now_ms() -> int:
    return int(time.time() * 1000)


def partition_for_transactional_id(transactional_id: str, num_partitions: int) -> int:
    """``Utils.abs(transactionalId.hashCode) % transaction.state.log.num.partitions``; Utils.abs(MIN_VALUE) is 0."""
    h = java_string_hashcode(transactional_id)
    return (0 if h == -0x8000_0000 else abs(h)) % num_partitions


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps Short.MaxValue for the coordinator's fencing bump: a client epoch stops one below it."""
    return epoch >= SHORT_MAX - 1


@dataclass(frozen=True)
class TxnTransitMetadata:
    """The target of one prepared transition (Kafka's TxnTransitMetadata): written, then applied."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int

    def log_value(self) -> TransactionLogValue:
        """The ``__transaction_state`` value (v0, as Kafka 3.x writes): no partitions in Empty (null)."""
        if self.state is EMPTY and self.topic_partitions:
            raise IllegalTransactionStateError("Empty transaction with partitions cannot be written")
        partitions = None
        if self.state is not EMPTY:
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(self.topic_partitions):
                by_topic.setdefault(topic, []).append(index)
            partitions = tuple(TxnPartitions(topic=t, partition_ids=tuple(ps)) for t, ps in by_topic.items())
        return TransactionLogValue(
            producer_id=self.producer_id, producer_epoch=self.producer_epoch, transaction_timeout_ms=self.txn_timeout_ms,
            transaction_status=int(self.state), transaction_partitions=partitions,
            transaction_last_update_timestamp_ms=self.txn_last_update_timestamp,
            transaction_start_timestamp_ms=self.txn_start_timestamp)


@dataclass
class TransactionMetadata:
    """One transactional id's state (Kafka's TransactionMetadata); changed only through prepare/complete."""

    transactional_id: str
    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    pending_state: TransactionState | None = None
    # A fence whose write failed bumped the epoch already: the next fence does not bump it again.
    has_failed_epoch_fence: bool = False

    @classmethod
    def from_log(cls, transactional_id: str, value: TransactionLogValue) -> TransactionMetadata:
        """As Kafka's TransactionLog.readTxnRecordValue: the last producer id and epoch are not persisted."""
        state = value.state
        if state is None:
            raise IllegalTransactionStateError(f"unknown transaction status {value.transaction_status} of "
                                               f"{transactional_id}")
        partitions = {(p.topic, i) for p in value.transaction_partitions or () for i in p.partition_ids}
        return cls(transactional_id, value.producer_id, NO_PRODUCER_ID, value.producer_epoch, NO_PRODUCER_EPOCH,
                   value.transaction_timeout_ms, state, partitions, value.transaction_start_timestamp_ms,
                   value.transaction_last_update_timestamp_ms)

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (ONGOING, PREPARE_ABORT, PREPARE_COMMIT)

    def remove_partition(self, tp: TopicPartition) -> None:
        """A marker reached ``tp``; only in a Prepare state."""
        if self.state not in (PREPARE_COMMIT, PREPARE_ABORT):
            raise IllegalTransactionStateError(f"{self.transactional_id}: removing {tp} in state {self.state.name}")
        self.topic_partitions.discard(tp)

    # -- preparing transitions (Kafka's prepare* methods) ------------------------------------------------
    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        if self.producer_epoch == SHORT_MAX:
            raise IllegalTransactionStateError("Cannot fence producer with epoch equal to Short.MaxValue")
        bumped = self.producer_epoch if self.has_failed_epoch_fence else self.producer_epoch + 1
        return self._prepare(PREPARE_EPOCH_FENCE, self.producer_id, bumped, NO_PRODUCER_EPOCH, self.txn_timeout_ms,
                             frozenset(self.topic_partitions), self.txn_start_timestamp, self.txn_last_update_timestamp)

    def prepare_increment_producer_epoch(self, new_timeout_ms: int, expected_epoch: int | None,
                                         update_timestamp: int) -> TxnTransitMetadata | ErrorCode:
        if self.is_producer_epoch_exhausted:
            raise IllegalTransactionStateError(f"Cannot allocate any more producer epochs for producerId "
                                               f"{self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            # no expected epoch: a new instance; in the case of a new producer, -1 becomes 0
            next_epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            next_epoch, last_epoch = bumped, self.producer_epoch  # the producer recovers from an error (KIP-360)
        elif expected_epoch == self.last_producer_epoch:
            next_epoch, last_epoch = self.producer_epoch, self.last_producer_epoch  # a retry of a bump that worked
        else:
            log.info("%s: expected producer epoch %d matches neither the current %d nor the last %d",
                     self.transactional_id, expected_epoch, self.producer_epoch, self.last_producer_epoch)
            return ErrorCode.producer_fenced
        return self._prepare(EMPTY, self.producer_id, next_epoch, last_epoch, new_timeout_ms, frozenset(), -1,
                             update_timestamp)

    def prepare_producer_id_rotation(self, new_producer_id: int, new_timeout_ms: int, update_timestamp: int,
                                     record_last_epoch: bool) -> TxnTransitMetadata:
        if self.has_pending_transaction:
            raise IllegalTransactionStateError("Cannot rotate producer ids while a transaction is still pending")
        return self._prepare(EMPTY, new_producer_id, 0, self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             new_timeout_ms, frozenset(), -1, update_timestamp)

    def prepare_add_partitions(self, added: Iterable[TopicPartition], update_timestamp: int) -> TxnTransitMetadata:
        start = update_timestamp if self.state in (EMPTY, COMPLETE_ABORT, COMPLETE_COMMIT) else self.txn_start_timestamp
        return self._prepare(ONGOING, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(self.topic_partitions | set(added)), start,
                             update_timestamp)

    def prepare_abort_or_commit(self, new_state: TransactionState, update_timestamp: int) -> TxnTransitMetadata:
        return self._prepare(new_state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(self.topic_partitions), self.txn_start_timestamp,
                             update_timestamp)

    def prepare_complete(self, update_timestamp: int) -> TxnTransitMetadata:
        new_state = COMPLETE_COMMIT if self.state is PREPARE_COMMIT else COMPLETE_ABORT
        self.has_failed_epoch_fence = False  # the Prepare state is written: the fence went through
        return self._prepare(new_state, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, update_timestamp)

    def prepare_dead(self) -> TxnTransitMetadata:
        return self._prepare(DEAD, self.producer_id, self.producer_epoch, self.last_producer_epoch,
                             self.txn_timeout_ms, frozenset(), self.txn_start_timestamp, self.txn_last_update_timestamp)

    def _prepare(self, new_state: TransactionState, producer_id: int, epoch: int, last_epoch: int, timeout_ms: int,
                 partitions: frozenset[TopicPartition], start: int, update: int) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransactionStateError(f"{self.transactional_id}: preparing a transition to {new_state.name} "
                                               f"while {self.pending_state.name} is pending")
        if producer_id < 0:
            raise IllegalTransactionStateError(f"Illegal new producer id {producer_id}")
        if new_state is not DEAD and epoch < 0:
            raise IllegalTransactionStateError(f"Illegal new producer epoch {epoch}")
        if self.state not in VALID_PREVIOUS_STATES[new_state]:
            raise IllegalTransactionStateError(f"{self.transactional_id}: {new_state.name} cannot follow "
                                               f"{self.state.name}")
        self.pending_state = new_state
        return TxnTransitMetadata(producer_id, self.producer_id, epoch, last_epoch, timeout_ms, new_state, partitions,
                                  start, update)

    # -- completing (Kafka's completeTransitionTo: after the write) ------------------------------------------
    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        to_state = self.pending_state
        if to_state is None or to_state is not transit.state:
            raise IllegalTransactionStateError(f"{self.transactional_id}: completing {transit.state.name} with "
                                               f"pending state {to_state}")
        if to_state is EMPTY:
            if ((self.producer_epoch != transit.producer_epoch and not self._valid_epoch_bump(transit))
                    or transit.topic_partitions or transit.txn_start_timestamp != -1):
                self._transition_failure(transit)
            self.txn_timeout_ms = transit.txn_timeout_ms
            self.producer_epoch = transit.producer_epoch
            self.last_producer_epoch = transit.last_producer_epoch
            self.producer_id = transit.producer_id
            self.last_producer_id = transit.last_producer_id
        elif to_state is ONGOING:
            if (not self._valid_epoch(transit) or not self.topic_partitions <= transit.topic_partitions
                    or self.txn_timeout_ms != transit.txn_timeout_ms):
                self._transition_failure(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions |= transit.topic_partitions
        elif to_state in (PREPARE_ABORT, PREPARE_COMMIT):
            if (not self._valid_epoch(transit) or set(self.topic_partitions) != set(transit.topic_partitions)
                    or self.txn_timeout_ms != transit.txn_timeout_ms
                    or self.txn_start_timestamp != transit.txn_start_timestamp):
                self._transition_failure(transit)
        elif to_state in (COMPLETE_ABORT, COMPLETE_COMMIT):
            if (not self._valid_epoch(transit) or self.txn_timeout_ms != transit.txn_timeout_ms
                    or transit.txn_start_timestamp == -1):
                self._transition_failure(transit)
            self.txn_start_timestamp = transit.txn_start_timestamp
            self.topic_partitions.clear()
        elif to_state is DEAD:
            if (self.state not in VALID_PREVIOUS_STATES[DEAD] or transit.topic_partitions
                    or self.producer_id != transit.producer_id or self.producer_epoch != transit.producer_epoch):
                self._transition_failure(transit)
        else:  # PrepareEpochFence is only ever pending: the internal abort replaces it
            self._transition_failure(transit)
        self.state = to_state
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None

    def _valid_epoch(self, transit: TxnTransitMetadata) -> bool:
        return self.producer_epoch == transit.producer_epoch and self.producer_id == transit.producer_id

    def _valid_epoch_bump(self, transit: TxnTransitMetadata) -> bool:
        # the epoch goes up by one, or a new producer id starts at 0 (rotation)
        return transit.producer_epoch == self.producer_epoch + 1 or transit.producer_epoch == 0

    def _transition_failure(self, transit: TxnTransitMetadata) -> None:
        raise IllegalTransactionStateError(f"{self.transactional_id}: cannot complete the transition from "
                                           f"{self.state.name} to {transit}")


@dataclass
class TxnPartitionCache:
    """The transactional ids of one ``__transaction_state`` partition led here, at one coordinator epoch."""

    coordinator_epoch: int
    metadata: dict[str, TransactionMetadata] = field(default_factory=dict)


CoordinatorEpochAndMetadata = tuple[int, TransactionMetadata]


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    error: ErrorCode
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 0
    start_timestamp: int = -1
    partitions: tuple[TopicPartition, ...] = ()


class TransactionCoordinator:
    """Kafka's TransactionCoordinator with its TransactionStateManager: the cache of the ``__transaction_state``
    partitions led here, the appends to them, the request handling and the timers. ``markers`` (a
    kcli.broker.transaction_markers.TransactionMarkerChannelManager) writes the COMMIT/ABORT markers."""

    def __init__(self, config: BrokerConfig, replica_manager: Any, admin: Any, log_manager: Any,
                 producer_ids: Any, *, clustered: bool = False,
                 markers: Callable[[TransactionCoordinator], Any] | None = None) -> None:
        self.config = config
        self.replicas = replica_manager
        self.admin = admin
        self.log_manager = log_manager
        self.producer_ids = producer_ids
        # kcli.broker.transaction_markers.TransactionMarkerChannelManager, built over this coordinator (as Kafka's
        # TransactionCoordinator.apply builds its TransactionMarkerChannelManager)
        self.markers: Any = markers(self) if markers is not None else None
        self.cache: dict[int, TxnPartitionCache] = {}
        self.loading: dict[int, int] = {}  # partition -> coordinator epoch being loaded
        self.clustered = clustered
        self.active = False  # the standalone startup load is done (ListTransactions answers)
        self._timers: list[asyncio.Task] = []
        self._tasks: set[asyncio.Task] = set()
        # set once the standalone startup load is done: idempotent producers get ids above the loaded ones
        self.loaded = asyncio.Event()

    # -- where transactional ids live ------------------------------------------------------------------
    @property
    def max_timeout_ms(self) -> int:
        return int(self.config["transaction.max.timeout.ms"])

    def partition_count(self) -> int | None:
        return self.admin.metadata.partition_count(TRANSACTION_STATE_TOPIC)

    def partition_for(self, transactional_id: str) -> int:
        count = self.partition_count() or int(self.config["transaction.state.log.num.partitions"])
        return partition_for_transactional_id(transactional_id, count)

    def topic_configs(self, replication_factor: int) -> dict[str, str]:
        """Kafka's TransactionStateManager.transactionTopicConfigs; min.insync.replicas is capped at the
        replication factor, so a one-broker setup can write (as Kafka 3.7 does)."""
        return {"cleanup.policy": "compact", "compression.type": "uncompressed",
                "unclean.leader.election.enable": "false",
                "min.insync.replicas": str(min(int(self.config["transaction.state.log.min.isr"]), replication_factor)),
                "segment.bytes": str(self.config["transaction.state.log.segment.bytes"])}

    def ensure_topic(self) -> ErrorCode | None:
        """Standalone: create ``__transaction_state`` on first use (every partition led here, empty); in a
        cluster ask the controller and answer COORDINATOR_NOT_AVAILABLE until it has leaders. None: it exists."""
        if self.partition_count():
            return None
        count = int(self.config["transaction.state.log.num.partitions"])
        rf = 1 if not self.clustered else int(self.config["transaction.state.log.replication.factor"])
        try:
            self.admin.create_topic(TRANSACTION_STATE_TOPIC, count, rf, configs=self.topic_configs(rf))
        except Exception as exc:  # another broker creates it, or too few brokers yet
            if not topic_exists(exc):  # Kafka lets an existing one go: its leaders are coming
                log.warning("cannot create %s yet: %s", TRANSACTION_STATE_TOPIC, getattr(exc, "reason", exc))
            return ErrorCode.coordinator_not_available
        if self.clustered:
            return ErrorCode.coordinator_not_available
        for index in range(count):  # new and empty: nothing to load
            partition = self.replicas.find(TRANSACTION_STATE_TOPIC, index)
            self.cache[index] = TxnPartitionCache(partition.leader_epoch if partition is not None else 0)
        return None

    def get_transaction_state(self, transactional_id: str
                              ) -> tuple[ErrorCode | None, CoordinatorEpochAndMetadata | None]:
        """(error, None) when this broker cannot answer for the id now (COORDINATOR_LOAD_IN_PROGRESS,
        NOT_COORDINATOR); else (None, (coordinator epoch, metadata)) or (None, None) for an unknown id."""
        if not self.partition_count():
            return ErrorCode.not_coordinator, None
        index = self.partition_for(transactional_id)
        if index in self.loading:
            return ErrorCode.coordinator_load_in_progress, None
        entry = self.cache.get(index)
        if entry is None:
            return ErrorCode.not_coordinator, None
        metadata = entry.metadata.get(transactional_id)
        return None, (None if metadata is None else (entry.coordinator_epoch, metadata))

    def coordinator_error(self, transactional_id: str) -> ErrorCode | None:
        return self.get_transaction_state(transactional_id)[0]

    def _put_if_not_exists(self, metadata: TransactionMetadata) -> tuple[ErrorCode | None,
                                                                        CoordinatorEpochAndMetadata | None]:
        error, found = self.get_transaction_state(metadata.transactional_id)
        if error is not None or found is not None:
            return error, found
        entry = self.cache[self.partition_for(metadata.transactional_id)]
        entry.metadata[metadata.transactional_id] = metadata
        return None, (entry.coordinator_epoch, metadata)

    # -- the log -----------------------------------------------------------------------------------------
    async def append_transaction_to_log(self, transactional_id: str, coordinator_epoch: int,
                                        transit: TxnTransitMetadata,
                                        retry_on_error: Callable[[ErrorCode], bool] | None = None) -> ErrorCode:
        """Write the transition (acks=-1, the transaction timeout as the produce timeout) and complete it when
        the write is acknowledged under the same coordinator epoch; a failed write clears the pending state
        unless ``retry_on_error`` wants it kept (Kafka's appendTransactionToLog)."""
        error, found = self.get_transaction_state(transactional_id)
        if error is not None:
            return error
        if found is None or found[0] != coordinator_epoch:
            return ErrorCode.not_coordinator
        index = self.partition_for(transactional_id)
        tp = (TRANSACTION_STATE_TOPIC, index)
        if transit.state is DEAD:
            key, value = encode_transaction_tombstone(transactional_id)
        else:
            key, value = encode_transaction(transactional_id, transit.log_value())
        batch = build_record_batch([Record(0, now_ms(), key, value)])
        try:
            result = (await self.replicas.append_and_wait(-1, max(transit.txn_timeout_ms, 1), {tp: batch},
                                                          origin=AppendOrigin.COORDINATOR))[tp]
            code = ErrorCode(result.error)
        except Exception:
            log.exception("appending to %s-%d failed", *tp)
            code = ErrorCode.unknown_server_error
        code = _APPEND_ERRORS.get(code, code)
        error, found = self.get_transaction_state(transactional_id)
        if code == ErrorCode.none:
            if error is not None:
                code = error
            elif found is None or found[0] != coordinator_epoch:
                code = ErrorCode.not_coordinator
            else:
                found[1].complete_transition_to(transit)
        elif error is None and found is not None and found[0] == coordinator_epoch:
            if retry_on_error is not None and retry_on_error(code):
                log.info("appending %s of %s failed with %s; will retry", transit.state.name, transactional_id,
                         code.name)
            else:
                found[1].pending_state = None
        if code != ErrorCode.none:
            log.info("appending %s of %s to %s-%d: %s", transit.state.name, transactional_id, *tp, code.name)
        return code

    # -- InitProducerId ------------------------------------------------------------------------------------
    async def handle_init_producer_id(self, transactional_id: str, timeout_ms: int,
                                      expected: tuple[int, int] | None = None) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for a transactional id (Kafka's handleInitProducerId); ``expected`` is
        the (producer id, epoch) an InitProducerId v3+ carries to recover from an error (KIP-360)."""
        if not transactional_id:
            return ErrorCode.invalid_request, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if not 0 < timeout_ms <= self.max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        error, found = self.get_transaction_state(transactional_id)
        if error is None and found is None:
            producer_id = await self._next_producer_id()
            error, found = self._put_if_not_exists(TransactionMetadata(
                transactional_id, producer_id, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, timeout_ms,
                EMPTY, set(), -1, now_ms()))
        if error is not None or found is None:
            return error or ErrorCode.not_coordinator, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        coordinator_epoch, metadata = found
        result = await self._prepare_init_producer_id(transactional_id, timeout_ms, metadata, expected)
        if isinstance(result, ErrorCode):
            return result, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if result.state is PREPARE_EPOCH_FENCE:
            # abort the open transaction under the bumped epoch; the client retries and gets the next one
            error = await self._end_transaction(transactional_id, result.producer_id, result.producer_epoch,
                                                commit=False, from_client=False)
            return (error if error != ErrorCode.none else ErrorCode.concurrent_transactions), -1, -1
        error = await self.append_transaction_to_log(transactional_id, coordinator_epoch, result)
        if error != ErrorCode.none:
            return error, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        log.info("initialized transactional id %s with producer id %d and epoch %d on partition %s-%d",
                 transactional_id, result.producer_id, result.producer_epoch, TRANSACTION_STATE_TOPIC,
                 self.partition_for(transactional_id))
        return ErrorCode.none, result.producer_id, result.producer_epoch

    async def _next_producer_id(self) -> int:
        if not self.producer_ids.may_block:
            return self.producer_ids.next_id()
        return await asyncio.to_thread(self.producer_ids.next_id)  # may take a block from ZooKeeper

    async def _prepare_init_producer_id(self, transactional_id: str, timeout_ms: int, metadata: TransactionMetadata,
                                        expected: tuple[int, int] | None) -> TxnTransitMetadata | ErrorCode:
        def valid(expected_pid: int, expected_epoch: int) -> bool:
            return (metadata.producer_epoch == NO_PRODUCER_EPOCH or expected_pid == metadata.producer_id
                    or (expected_pid == metadata.last_producer_id and is_epoch_exhausted(expected_epoch)))

        if metadata.pending_transition_in_progress:
            return ErrorCode.concurrent_transactions
        if expected is not None and not valid(*expected):
            return ErrorCode.producer_fenced
        if metadata.state in (PREPARE_ABORT, PREPARE_COMMIT):
            return ErrorCode.concurrent_transactions
        if metadata.state in (COMPLETE_ABORT, COMPLETE_COMMIT, EMPTY):
            if metadata.is_producer_epoch_exhausted and (expected is None or expected[1] == metadata.producer_epoch):
                new_pid = await self._next_producer_id()
                if metadata.pending_transition_in_progress:  # something moved while the id was allocated
                    return ErrorCode.concurrent_transactions
                return metadata.prepare_producer_id_rotation(new_pid, timeout_ms, now_ms(), expected is not None)
            return metadata.prepare_increment_producer_epoch(timeout_ms, None if expected is None else expected[1],
                                                             now_ms())
        if metadata.state is ONGOING:
            # fence: the bumped epoch is never returned; the retry after the abort bumps it again
            return metadata.prepare_fence_producer_epoch()
        raise IllegalTransactionStateError(f"Found transactionalId {transactional_id} with state "
                                           f"{metadata.state.name}")

    # -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------------------
    async def handle_add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                    partitions: Iterable[TopicPartition]) -> ErrorCode:
        """One error for all the partitions (Kafka's handleAddPartitionsToTransaction)."""
        if not transactional_id:
            return ErrorCode.invalid_request
        wanted = set(partitions)
        error, found = self.get_transaction_state(transactional_id)
        if error is not None:
            return error
        if found is None:
            return ErrorCode.invalid_producer_id_mapping
        coordinator_epoch, metadata = found
        if metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if metadata.pending_transition_in_progress or metadata.state in (PREPARE_COMMIT, PREPARE_ABORT):
            return ErrorCode.concurrent_transactions
        if metadata.state is ONGOING and wanted <= metadata.topic_partitions:
            return ErrorCode.none  # nothing new: no write
        transit = metadata.prepare_add_partitions(wanted, now_ms())
        return await self.append_transaction_to_log(transactional_id, coordinator_epoch, transit)

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[TopicPartition]) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn v4+ with VerifyOnly (KIP-890): are these partitions in the open transaction?"""
        wanted = list(partitions)
        error, found = self.get_transaction_state(transactional_id) if transactional_id else (
            ErrorCode.invalid_request, None)
        if error is None:
            if found is None or found[1].producer_id != producer_id:
                error = ErrorCode.invalid_producer_id_mapping
            elif found[1].producer_epoch != producer_epoch:
                error = ErrorCode.producer_fenced
        if error is not None:
            return {tp: error for tp in wanted}
        metadata = found[1]  # type: ignore[index]
        return {tp: ErrorCode.none if metadata.state is ONGOING and tp in metadata.topic_partitions
                else ErrorCode.invalid_txn_state for tp in wanted}

    # -- EndTxn --------------------------------------------------------------------------------------------
    async def handle_end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                                     commit: bool) -> ErrorCode:
        return await self._end_transaction(transactional_id, producer_id, producer_epoch, commit, from_client=True)

    async def _end_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                               *, from_client: bool) -> ErrorCode:
        """Kafka's endTransaction: write PrepareCommit/PrepareAbort, answer, then send the markers; the
        Complete state is written when every partition has its marker."""
        if not transactional_id:
            return ErrorCode.invalid_request
        error, found = self.get_transaction_state(transactional_id)
        if error is not None:
            return error
        if found is None:
            return ErrorCode.invalid_producer_id_mapping
        coordinator_epoch, metadata = found
        is_epoch_fence = False
        if metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        # clients must give the current epoch; the coordinator's own aborts carry the bumped one
        if (from_client and producer_epoch != metadata.producer_epoch) or producer_epoch < metadata.producer_epoch:
            return ErrorCode.producer_fenced
        if metadata.pending_transition_in_progress and metadata.pending_state is not PREPARE_EPOCH_FENCE:
            return ErrorCode.concurrent_transactions
        state = metadata.state
        if state is ONGOING:
            next_state = PREPARE_COMMIT if commit else PREPARE_ABORT
            if next_state is PREPARE_ABORT and metadata.pending_state is PREPARE_EPOCH_FENCE:
                is_epoch_fence = True
                metadata.pending_state = None
                metadata.producer_epoch = producer_epoch
                metadata.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = metadata.prepare_abort_or_commit(next_state, now_ms())
        elif state is COMPLETE_COMMIT:
            return ErrorCode.none if commit else self._invalid_state(transactional_id, state, commit)
        elif state is COMPLETE_ABORT:
            return ErrorCode.none if not commit else self._invalid_state(transactional_id, state, commit)
        elif state is PREPARE_COMMIT:
            return ErrorCode.concurrent_transactions if commit else self._invalid_state(transactional_id, state, commit)
        elif state is PREPARE_ABORT:
            return ErrorCode.concurrent_transactions if not commit else self._invalid_state(transactional_id, state,
                                                                                            commit)
        elif state is EMPTY:
            return self._invalid_state(transactional_id, state, commit)
        else:
            raise IllegalTransactionStateError(f"Found transactionalId {transactional_id} with state {state.name}")

        error = await self.append_transaction_to_log(transactional_id, coordinator_epoch, transit)
        if error != ErrorCode.none:
            if is_epoch_fence:
                _, again = self.get_transaction_state(transactional_id)
                if again is not None and again[0] == coordinator_epoch:
                    again[1].has_failed_epoch_fence = True
                    log.warning("fencing %s failed (%s): its epoch was bumped to %d but not returned", transactional_id,
                                error.name, transit.producer_epoch)
            return error
        error, found = self.get_transaction_state(transactional_id)
        if error is not None:
            return error
        if found is None or found[0] != coordinator_epoch:
            return ErrorCode.not_coordinator
        metadata = found[1]
        if metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if metadata.pending_transition_in_progress:
            return ErrorCode.concurrent_transactions
        if metadata.state is not (PREPARE_COMMIT if commit else PREPARE_ABORT):
            return self._invalid_state(transactional_id, metadata.state, commit)
        complete = metadata.prepare_complete(now_ms())
        self.markers.add_markers_to_send(transactional_id, coordinator_epoch, commit, metadata, complete)
        return ErrorCode.none

    @staticmethod
    def _invalid_state(transactional_id: str, state: TransactionState, commit: bool) -> ErrorCode:
        log.debug("%s is %s but was asked to %s", transactional_id, state.name, "commit" if commit else "abort")
        return ErrorCode.invalid_txn_state

    async def complete_transaction(self, transactional_id: str, coordinator_epoch: int,
                                   complete: TxnTransitMetadata) -> ErrorCode:
        """Every marker is written: CompleteCommit/CompleteAbort, retried while the coordinator is not available
        (Kafka's TransactionMarkerChannelManager.writeTxnCompletion)."""
        backoff = 0.05
        while True:
            error = await self.append_transaction_to_log(
                transactional_id, coordinator_epoch, complete,
                retry_on_error=lambda e: e == ErrorCode.coordinator_not_available)
            if error != ErrorCode.coordinator_not_available:
                if error not in (ErrorCode.none, ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress):
                    log.error("completing the transaction of %s failed: %s", transactional_id, error.name)
                return error
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    # -- timeouts and expiration ------------------------------------------------------------------------
    def timed_out_transactions(self, now: int) -> list[tuple[str, int, int]]:
        return [(m.transactional_id, m.producer_id, m.producer_epoch)
                for index, entry in self.cache.items() if index not in self.loading
                for m in entry.metadata.values()
                if m.pending_state is None and m.state is ONGOING and m.txn_start_timestamp + m.txn_timeout_ms < now]

    async def abort_timed_out_transactions(self) -> int:
        """Fence and abort every transaction open past its timeout (Kafka's abortTimedOutTransactions)."""
        aborted = 0
        for transactional_id, producer_id, _epoch in self.timed_out_transactions(now_ms()):
            error, found = self.get_transaction_state(transactional_id)
            if error is not None or found is None:
                continue
            metadata = found[1]
            if metadata.producer_id != producer_id or metadata.pending_transition_in_progress:
                continue
            try:
                transit = metadata.prepare_fence_producer_epoch()
            except IllegalTransactionStateError as exc:
                log.warning("cannot abort the timed-out transaction of %s: %s", transactional_id, exc.reason)
                continue
            log.info("aborting the transaction of %s (producer id %d): open past its timeout of %d ms",
                     transactional_id, producer_id, metadata.txn_timeout_ms)
            error = await self._end_transaction(transactional_id, transit.producer_id, transit.producer_epoch,
                                                commit=False, from_client=False)
            if error == ErrorCode.none:
                aborted += 1
            elif error not in (ErrorCode.invalid_producer_id_mapping, ErrorCode.producer_fenced,
                               ErrorCode.concurrent_transactions):
                log.warning("rolling back the timed-out transaction of %s failed: %s", transactional_id, error.name)
        return aborted

    async def remove_expired_transactional_ids(self) -> int:
        """Ids idle for transactional.id.expiration.ms in Empty/Complete* become Dead: a tombstone each
        (Kafka's removeExpiredTransactionalIds)."""
        horizon = now_ms() - int(self.config["transactional.id.expiration.ms"])
        expired = [(m.transactional_id, entry.coordinator_epoch, m)
                   for index, entry in self.cache.items() if index not in self.loading
                   for m in entry.metadata.values()
                   if m.pending_state is None and m.state in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT)
                   and m.txn_last_update_timestamp <= horizon]
        removed = 0
        for transactional_id, coordinator_epoch, metadata in expired:
            transit = metadata.prepare_dead()
            error = await self.append_transaction_to_log(transactional_id, coordinator_epoch, transit)
            if error == ErrorCode.none:
                entry = self.cache.get(self.partition_for(transactional_id))
                if entry is not None and entry.metadata.get(transactional_id) is metadata:
                    del entry.metadata[transactional_id]
                    removed += 1
        if removed:
            log.info("removed %d expired transactional ids", removed)
        return removed

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._timers = [
            loop.create_task(self._every("transaction.abort.timed.out.transaction.cleanup.interval.ms",
                                         self.abort_timed_out_transactions)),
            loop.create_task(self._every("transaction.remove.expired.transaction.cleanup.interval.ms",
                                         self.remove_expired_transactional_ids)),
        ]

    async def _every(self, key: str, work: Callable[[], Any]) -> None:
        interval = int(self.config[key]) / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await work()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("transaction coordinator timer %s failed; retrying next round", key)

    def stop(self) -> None:
        for task in [*self._timers, *self._tasks]:
            task.cancel()
        if self.markers is not None:
            self.markers.shutdown()

    # -- loading and leadership (Kafka's onElection / onResignation) ----------------------------------------
    def on_election(self, index: int, coordinator_epoch: int) -> None:
        """This broker leads ``__transaction_state-index`` now: COORDINATOR_LOAD_IN_PROGRESS until
        `finish_loading` installs what `load_partition` read."""
        if self.markers is not None:
            self.markers.remove_markers_for_partition(index)
        self.cache.pop(index, None)
        self.loading[index] = coordinator_epoch

    def on_resignation(self, index: int) -> None:
        self.loading.pop(index, None)
        if self.cache.pop(index, None) is not None:
            log.info("resigned as transaction coordinator of %s-%d", TRANSACTION_STATE_TOPIC, index)
        if self.markers is not None:
            self.markers.remove_markers_for_partition(index)

    def on_leadership_change(self, leaders: list[Any], followers: list[Any]) -> list[int]:
        """LeaderAndIsr / StopReplica moved ``__transaction_state`` partitions: returns those to load."""
        for partition in followers:
            if partition.topic == TRANSACTION_STATE_TOPIC:
                self.on_resignation(partition.index)
        to_load = []
        for partition in leaders:
            if partition.topic == TRANSACTION_STATE_TOPIC:
                self.on_election(partition.index, partition.leader_epoch)
                to_load.append(partition.index)
        return to_load

    def load_partition(self, index: int) -> dict[str, TransactionLogValue]:
        """Read one partition to its log end (in a worker thread); `finish_loading` applies it."""
        managed = self.log_manager.partition(TRANSACTION_STATE_TOPIC, index)
        if managed is None:
            return {}

        def undecodable(offset: int, exc: KcliError) -> None:
            log.warning("skipping undecodable %s-%d record at offset %d: %s", TRANSACTION_STATE_TOPIC, index, offset,
                        exc)

        return load_transaction_topic(managed.directory, undecodable)

    def finish_loading(self, index: int, coordinator_epoch: int, values: dict[str, TransactionLogValue]) -> None:
        """Install the loaded ids, then complete the transactions found in a Prepare state: their markers are
        sent again and the Complete state written (Kafka's loadTransactionsForTxnTopicPartition)."""
        if self.loading.get(index) != coordinator_epoch:
            return  # resigned, or elected again, meanwhile
        entry = TxnPartitionCache(coordinator_epoch)
        for transactional_id, value in values.items():
            try:
                entry.metadata[transactional_id] = TransactionMetadata.from_log(transactional_id, value)
            except IllegalTransactionStateError as exc:
                log.warning("skipping %s: %s", transactional_id, exc.reason)
        self.cache[index] = entry
        del self.loading[index]
        pending = 0
        for metadata in entry.metadata.values():
            if metadata.state in (PREPARE_COMMIT, PREPARE_ABORT):
                commit = metadata.state is PREPARE_COMMIT
                complete = metadata.prepare_complete(now_ms())
                self.markers.add_markers_to_send(metadata.transactional_id, coordinator_epoch, commit, metadata,
                                                 complete)
                pending += 1
        log.info("transaction coordinator of %s-%d at epoch %d: loaded %d transactional ids (%d to complete)",
                 TRANSACTION_STATE_TOPIC, index, coordinator_epoch, len(entry.metadata), pending)

    def load_all(self) -> dict[int, tuple[int, dict[str, TransactionLogValue]]]:
        """Standalone startup (in a worker thread): every partition of ``__transaction_state`` is led here."""
        out = {}
        for index, epoch in list(self.loading.items()):
            out[index] = (epoch, self.load_partition(index))
        return out

    def begin_standalone_load(self) -> None:
        count = self.partition_count() or 0
        for index in range(count):
            partition = self.replicas.find(TRANSACTION_STATE_TOPIC, index)
            self.loading[index] = partition.leader_epoch if partition is not None else 0

    # -- operators: DescribeTransactions / ListTransactions ---------------------------------------------------
    def describe(self, transactional_id: str) -> TransactionDescription:
        if not transactional_id:
            return TransactionDescription(transactional_id, ErrorCode.invalid_request)
        error, found = self.get_transaction_state(transactional_id)
        if error is not None:
            return TransactionDescription(transactional_id, error)
        if found is None or found[1].state is DEAD:
            return TransactionDescription(transactional_id, ErrorCode.transactional_id_not_found)
        m = found[1]
        return TransactionDescription(transactional_id, ErrorCode.none, STATE_NAMES[m.state], m.producer_id,
                                      m.producer_epoch, m.txn_timeout_ms, m.txn_start_timestamp,
                                      tuple(sorted(m.topic_partitions)))

    def list_transactions(self, producer_ids: Iterable[int] = (), states: Iterable[str] = ()
                          ) -> tuple[ErrorCode, list[TransactionListing], list[str]]:
        """(error, listings, unknown state filters), Kafka's listTransactionStates: Dead ids are never listed."""
        if self.loading:
            return ErrorCode.coordinator_load_in_progress, [], []
        pids, names = set(producer_ids), list(states)
        unknown = [n for n in names if n not in STATES_BY_NAME]
        wanted = {STATES_BY_NAME[n] for n in names if n in STATES_BY_NAME}
        out = []
        for entry in self.cache.values():
            for m in entry.metadata.values():
                if m.state is DEAD or (pids and m.producer_id not in pids) or (names and m.state not in wanted):
                    continue
                out.append(TransactionListing(m.transactional_id, m.producer_id, STATE_NAMES[m.state]))
        return ErrorCode.none, sorted(out, key=lambda t: t.transactional_id), unknown
