"""Exceptions the broker's services raise, and the one table that maps every exception to a wire error code.

Services and storage raise typed errors; handlers never pick an error code by matching message text.
`error_code_for` is the only place a Python exception becomes a Kafka ErrorCode (Kafka's `Errors.forException`).
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from kcli.errors import CorruptRecordError, KcliError

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


class InvalidRequiredAcksError(BrokerError):
    code = ErrorCode.invalid_required_acks


class InvalidRequestError(BrokerError):
    code = ErrorCode.invalid_request


class InvalidConfigError(BrokerError):
    code = ErrorCode.invalid_config


class PolicyViolationError(BrokerError):
    code = ErrorCode.policy_violation


class NotCoordinatorError(BrokerError):
    code = ErrorCode.not_coordinator


class CoordinatorLoadInProgressError(BrokerError):
    code = ErrorCode.coordinator_load_in_progress


class OffsetOutOfRangeError(BrokerError):
    code = ErrorCode.offset_out_of_range


class KafkaStorageError(BrokerError):
    code = ErrorCode.kafka_storage_error


class UnsupportedVersionError(BrokerError):
    code = ErrorCode.unsupported_version


class UnsupportedCompressionTypeError(BrokerError):
    code = ErrorCode.unsupported_compression_type


class SecurityDisabledError(BrokerError):
    code = ErrorCode.security_disabled


class GroupIdNotFoundError(BrokerError):
    code = ErrorCode.group_id_not_found


class NonEmptyGroupError(BrokerError):
    code = ErrorCode.non_empty_group


class GroupSubscribedToTopicError(BrokerError):
    code = ErrorCode.group_subscribed_to_topic


# Storage and records raise their own typed errors (kcli.storage.*); their wire codes are looked up by
# class name here so this table does not make the broker depend on every storage module's import order.
_BY_CLASS_NAME: dict[str, ErrorCode] = {
    "RecordTooLargeError": ErrorCode.message_too_large,
    "MessageTooLargeError": ErrorCode.message_too_large,
    "InvalidRecordError": ErrorCode.invalid_record,
    "InvalidTimestampError": ErrorCode.invalid_timestamp,
    "OutOfOrderSequenceError": ErrorCode.out_of_order_sequence_number,
    "InvalidProducerEpochError": ErrorCode.invalid_producer_epoch,
    "ProducerFencedError": ErrorCode.producer_fenced,
    "UnknownProducerIdError": ErrorCode.unknown_producer_id,
    "InvalidConfigError": ErrorCode.invalid_config,
    "UnsupportedCompressionTypeError": ErrorCode.unsupported_compression_type,
    "DownConversionError": ErrorCode.unsupported_compression_type,
    "TopicError": ErrorCode.invalid_topic_exception,
    "CorruptRecordError": ErrorCode.corrupt_message,
    "UnsupportedCodecError": ErrorCode.corrupt_message,
}


def error_code_for(exc: BaseException) -> ErrorCode:
    """The wire code for an exception (Kafka's Errors.forException): typed first, then storage's classes by
    name; anything else is UNKNOWN_SERVER_ERROR and is logged with its traceback, as it is a bug."""
    if isinstance(exc, BrokerError):
        return exc.code
    for cls in type(exc).__mro__:
        code = _BY_CLASS_NAME.get(cls.__name__)
        if code is not None:
            return code
    if isinstance(exc, CorruptRecordError):
        return ErrorCode.corrupt_message
    if isinstance(exc, KcliError):
        return ErrorCode.kafka_storage_error
    log.error("internal error: %r", exc, exc_info=exc)
    return ErrorCode.unknown_server_error


def error_message_for(exc: BaseException) -> str | None:
    return exc.reason if isinstance(exc, KcliError) else None
