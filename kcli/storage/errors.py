"""Errors of appending to a partition log: what Kafka's LogValidator and ProducerAppendInfo throw.

Each class names the Kafka error code the broker answers with (``error_code``, Kafka's Errors enum
name) so the broker maps them without storage knowing the protocol. ``CorruptRecordError`` (bad CRC or
framing -> CORRUPT_MESSAGE) is kcli's shared one, from kcli.errors.
"""

from __future__ import annotations

from dataclasses import dataclass

from kcli.errors import CorruptRecordError, KcliError

__all__ = [
    "AppendError",
    "CorruptRecordError",
    "DuplicateSequence",
    "InvalidProducerEpochError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "InvalidTxnStateError",
    "OutOfOrderSequenceError",
    "RecordTooLargeError",
    "TransactionCoordinatorFencedError",
    "error_code_of",
]


class AppendError(KcliError):
    """A produced record set the log refuses; ``error_code`` is the Kafka error to answer with."""

    error_code = "UNKNOWN_SERVER_ERROR"


class RecordTooLargeError(AppendError):
    """A batch larger than max.message.bytes (Kafka RecordTooLargeException)."""

    error_code = "MESSAGE_TOO_LARGE"


class InvalidRecordError(AppendError):
    """A batch Kafka's LogValidator refuses (InvalidRecordException): a keyless record for a compacted topic,
    a magic mismatch, a control batch from a client, inconsistent offsets or counts."""

    error_code = "INVALID_RECORD"


class InvalidTimestampError(AppendError):
    """A CreateTime timestamp outside message.timestamp.{before,after}.max.ms of now (InvalidTimestampException)."""

    error_code = "INVALID_TIMESTAMP"


class OutOfOrderSequenceError(AppendError):
    """An idempotent producer's sequence does not follow its last one (OutOfOrderSequenceException)."""

    error_code = "OUT_OF_ORDER_SEQUENCE_NUMBER"


class InvalidProducerEpochError(AppendError):
    """A producer epoch older than the one the log has seen (InvalidProducerEpochException since Kafka 2.7;
    a transactional producer's client reports it as fenced)."""

    error_code = "INVALID_PRODUCER_EPOCH"


class InvalidTxnStateError(AppendError):
    """A non-transactional batch from a producer with an open transaction (InvalidTxnStateException)."""

    error_code = "INVALID_TXN_STATE"


class TransactionCoordinatorFencedError(AppendError):
    """A transaction marker from a coordinator epoch older than the partition's last marker of that producer
    (TransactionCoordinatorFencedException): a coordinator that lost its __transaction_state partition."""

    error_code = "TRANSACTION_COORDINATOR_FENCED"


@dataclass(frozen=True, slots=True)
class DuplicateSequence:
    """Not an error: the batch repeats one of the producer's last five batches (a retry after a lost
    response). Kafka answers with the original batch's offsets and appends nothing."""

    producer_id: int
    first_offset: int
    last_offset: int
    timestamp: int

    @property
    def base_offset(self) -> int:
        return self.first_offset


def error_code_of(error: BaseException) -> str:
    """The Kafka error name for an append failure (CORRUPT_MESSAGE for corrupt records)."""
    if isinstance(error, CorruptRecordError):
        return "CORRUPT_MESSAGE"
    return getattr(error, "error_code", "UNKNOWN_SERVER_ERROR")
