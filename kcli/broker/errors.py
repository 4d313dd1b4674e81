"""Exceptions the broker's services raise, and the one table that maps every exception to a wire error code.

Services and storage raise typed errors; handlers never pick an error code by matching message text.
`error_code_for` is the only place a Python exception becomes a Kafka ErrorCode (Kafka's `Errors.forException`).
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from kcli.errors import CorruptRecordError, KcliError, UnsupportedCodecError

log = logging.getLogger("kcli.broker")


class BrokerError(KcliError):
    """Base of the broker's typed errors; each subclass carries its wire code."""

    code: ErrorCode = ErrorCode.unknown_server_error


class UnknownTopicOrPartitionError(BrokerError):
    code = ErrorCode.unknown_topic_or_partition


class TopicExistsError(BrokerError):
    code = ErrorCode.topic_already_exists


class InvalidTopicError(BrokerError):
    code = ErrorCode.invalid_topic_exception


class InvalidPartitionsError(BrokerError):
    code = ErrorCode.invalid_partitions


class InvalidReplicationFactorError(BrokerError):
    code = ErrorCode.invalid_replication_factor


class InvalidReplicaAssignmentError(BrokerError):
    code = ErrorCode.invalid_replica_assignment


class NoReassignmentInProgressError(BrokerError):
    """AlterPartitionReassignments cancelling a partition that is not being reassigned."""

    code = ErrorCode.no_reassignment_in_progress


class BrokerNotAvailableError(BrokerError):
    code = ErrorCode.broker_not_available


class AdminOperationError(BrokerError):
    """Kafka's AdminOperationException (e.g. only some brokers have a rack): a RuntimeException, not an
    ApiException, so ZkAdminManager answers it as UNKNOWN_SERVER_ERROR (ApiError.fromThrowable)."""

    code = ErrorCode.unknown_server_error


class InvalidRequiredAcksError(BrokerError):
    code = ErrorCode.invalid_required_acks


class InvalidRequestError(BrokerError):
    code = ErrorCode.invalid_request


class InvalidConfigError(BrokerError):
    code = ErrorCode.invalid_config


class OffsetOutOfRangeError(BrokerError):
    code = ErrorCode.offset_out_of_range


class OffsetMovedToTieredStorageError(BrokerError):
    """A follower fetched below the leader's local log start (KIP-405): that part is in the remote store."""

    code = ErrorCode.offset_moved_to_tiered_storage


class OffsetNotAvailableError(BrokerError):
    """A new leader's high watermark has not reached the start of its epoch yet (KIP-207): retriable."""

    code = ErrorCode.offset_not_available


class NotLeaderOrFollowerError(BrokerError):
    code = ErrorCode.not_leader_or_follower


class FencedLeaderEpochError(BrokerError):
    code = ErrorCode.fenced_leader_epoch


class UnknownLeaderEpochError(BrokerError):
    code = ErrorCode.unknown_leader_epoch


class NotEnoughReplicasError(BrokerError):
    code = ErrorCode.not_enough_replicas


class NotEnoughReplicasAfterAppendError(BrokerError):
    code = ErrorCode.not_enough_replicas_after_append


class NotControllerError(BrokerError):
    code = ErrorCode.not_controller


class StaleControllerEpochError(BrokerError):
    code = ErrorCode.stale_controller_epoch


class StaleBrokerEpochError(BrokerError):
    code = ErrorCode.stale_broker_epoch


class ElectionNotNeededError(BrokerError):
    """ElectLeaders: the partition already has the leader the election would give it."""

    code = ErrorCode.election_not_needed


class PreferredLeaderNotAvailableError(BrokerError):
    """A PREFERRED election: the preferred replica is not live or not in the ISR."""

    code = ErrorCode.preferred_leader_not_available


class EligibleLeadersNotAvailableError(BrokerError):
    """An UNCLEAN election: no live replica to elect."""

    code = ErrorCode.eligible_leaders_not_available


class IllegalGroupStateError(BrokerError):
    """A group coordinator bug: a transition Kafka's GroupState.validPreviousStates forbids (Kafka's
    IllegalStateException from GroupMetadata.assertValidTransition); answered UNKNOWN_SERVER_ERROR."""


def error_code_for(exc: BaseException) -> ErrorCode:
    """The wire code for an exception (Kafka's Errors.forException): the broker's own errors carry theirs;
    storage's and records' typed errors name theirs in ``error_code`` (Kafka's Errors enum name, so those
    layers need no protocol); a corrupt batch is CORRUPT_MESSAGE, any other kcli error a storage error.
    Anything else is UNKNOWN_SERVER_ERROR and is logged with its traceback, as it is a bug."""
    if isinstance(exc, BrokerError):
        return exc.code
    name = getattr(exc, "error_code", None)
    if isinstance(name, str) and name.lower() in ErrorCode.__members__:
        return ErrorCode[name.lower()]
    if isinstance(exc, (CorruptRecordError, UnsupportedCodecError)):
        return ErrorCode.corrupt_message
    if isinstance(exc, KcliError):
        log.error("storage error: %s", exc)
        return ErrorCode.kafka_storage_error
    log.error("internal error: %r", exc, exc_info=exc)
    return ErrorCode.unknown_server_error


def topic_exists(exc: BaseException) -> bool:
    """A creation refused because the topic exists (the broker's TopicExistsError, or ZooKeeper's: another broker
    created it first). Kafka lets it go: whoever created it, it is there."""
    if isinstance(exc, BrokerError):
        return exc.code == ErrorCode.topic_already_exists
    return getattr(exc, "error_code", None) == "TOPIC_ALREADY_EXISTS"


def error_message_for(exc: BaseException) -> str | None:
    return exc.reason if isinstance(exc, KcliError) else None
