"""``__transaction_state`` records: the transaction coordinator's per-transactional-id state.

Key bytes = int16 key version (0, the only record type) + TransactionLogKey; value bytes = int16
value version + TransactionLogValue (v0, or v1 = flexible with tagged fields added by KIP-890 for
transaction version 2); a null value is a tombstone.  Layouts are Kafka's JSON specs as data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from kcli.errors import CorruptRecordError
from kcli.records.schema import CoordinatorSerde, UnknownRecordTypeError, message

__all__ = [
    "KEY_SCHEMA",
    "SERDE",
    "VALUE_SCHEMA",
    "TransactionLogKey",
    "TransactionLogValue",
    "TransactionState",
    "TxnPartitions",
    "UnknownRecordTypeError",
    "decode_key",
    "decode_record",
    "decode_value",
    "encode_key",
    "encode_transaction",
    "encode_transaction_tombstone",
    "encode_value",
]

# fmt: off
# transaction-coordinator/src/main/resources/common/message/TransactionLogKey.json
KEY_SCHEMA = message({
    "name": "TransactionLogKey",
    "validVersions": "0",
    "flexibleVersions": "none",
    "fields": [{"name": "TransactionalId", "type": "string", "versions": "0"}],
})

# transaction-coordinator/src/main/resources/common/message/TransactionLogValue.json
VALUE_SCHEMA = message({
    "name": "TransactionLogValue",
    "validVersions": "0-1",
    "flexibleVersions": "1+",  # KIP-915
    "fields": [
        {"name": "ProducerId", "type": "int64", "versions": "0+"},
        {"name": "PreviousProducerId", "type": "int64", "taggedVersions": "1+", "tag": 0, "default": -1},
        {"name": "NextProducerId", "type": "int64", "taggedVersions": "1+", "tag": 1, "default": -1},
        {"name": "ProducerEpoch", "type": "int16", "versions": "0+"},
        {"name": "TransactionTimeoutMs", "type": "int32", "versions": "0+"},
        {"name": "TransactionStatus", "type": "int8", "versions": "0+"},
        {"name": "TransactionPartitions", "type": "[]PartitionsSchema", "versions": "0+", "nullableVersions": "0+",
         "fields": [
             {"name": "Topic", "type": "string", "versions": "0+"},
             {"name": "PartitionIds", "type": "[]int32", "versions": "0+"},
         ]},
        {"name": "TransactionLastUpdateTimestampMs", "type": "int64", "versions": "0+"},
        {"name": "TransactionStartTimestampMs", "type": "int64", "versions": "0+"},
        {"name": "ClientTransactionVersion", "type": "int16", "default": 0, "taggedVersions": "1+", "tag": 2},
    ],
})

# fmt: on
SERDE = CoordinatorSerde(keys={0: KEY_SCHEMA}, values={0: VALUE_SCHEMA})


class TransactionState(IntEnum):
    """``TransactionState`` ids as stored in ``transactionStatus``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogKey:
    transactional_id: str
    version: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnPartitions:
    topic: str
    partition_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionLogValue:
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_status: int
    transaction_partitions: tuple[TxnPartitions, ...] | None
    transaction_last_update_timestamp_ms: int
    transaction_start_timestamp_ms: int
    previous_producer_id: int = -1  # v1 tagged (KIP-890)
    next_producer_id: int = -1
    client_transaction_version: int = 0
    version: int = 0  # brokers write 1 once transaction.version >= 2

    @property
    def state(self) -> TransactionState | None:
        try:
            return TransactionState(self.transaction_status)
        except ValueError:
            return None


def decode_key(key: bytes) -> TransactionLogKey:
    record_type, data = SERDE.decode_key(key)
    return TransactionLogKey(version=record_type, transactional_id=data["transactionalId"])


def decode_value(value: bytes | None) -> TransactionLogValue | None:
    version, v = SERDE.decode_value(0, value)
    if v is None:
        return None
    assert version is not None
    partitions = v["transactionPartitions"]
    return TransactionLogValue(
        version=version,
        producer_id=v["producerId"],
        previous_producer_id=v["previousProducerId"],
        next_producer_id=v["nextProducerId"],
        producer_epoch=v["producerEpoch"],
        transaction_timeout_ms=v["transactionTimeoutMs"],
        transaction_status=v["transactionStatus"],
        transaction_partitions=None
        if partitions is None
        else tuple(TxnPartitions(topic=p["topic"], partition_ids=tuple(p["partitionIds"])) for p in partitions),
        transaction_last_update_timestamp_ms=v["transactionLastUpdateTimestampMs"],
        transaction_start_timestamp_ms=v["transactionStartTimestampMs"],
        client_transaction_version=v["clientTransactionVersion"],
    )


def decode_record(key: bytes | None, value: bytes | None) -> tuple[TransactionLogKey, TransactionLogValue | None]:
    if key is None:
        raise CorruptRecordError("__transaction_state record has no key")
    return decode_key(key), decode_value(value)


def encode_key(key: TransactionLogKey | str) -> bytes:
    transactional_id = key if isinstance(key, str) else key.transactional_id
    return SERDE.encode_key(0, {"transactionalId": transactional_id})


def _partition_fields(parts: Iterable[TxnPartitions] | None) -> list[dict[str, object]] | None:
    if parts is None:
        return None
    return [{"topic": p.topic, "partitionIds": list(p.partition_ids)} for p in parts]


def encode_value(value: TransactionLogValue | None) -> bytes | None:
    """Value bytes at ``value.version``; at v0 the v1-only tagged fields must keep their defaults
    (writing them would silently lose them, so the codec refuses)."""
    if value is None:
        return None
    data = {
        "producerId": value.producer_id,
        "previousProducerId": value.previous_producer_id,
        "nextProducerId": value.next_producer_id,
        "producerEpoch": value.producer_epoch,
        "transactionTimeoutMs": value.transaction_timeout_ms,
        "transactionStatus": value.transaction_status,
        "transactionPartitions": _partition_fields(value.transaction_partitions),
        "transactionLastUpdateTimestampMs": value.transaction_last_update_timestamp_ms,
        "transactionStartTimestampMs": value.transaction_start_timestamp_ms,
        "clientTransactionVersion": value.client_transaction_version,
    }
    return SERDE.encode_value(0, value.version, data)


def encode_transaction(transactional_id: str, value: TransactionLogValue) -> tuple[bytes, bytes]:
    encoded = encode_value(value)
    assert encoded is not None
    return encode_key(transactional_id), encoded


def encode_transaction_tombstone(transactional_id: str) -> tuple[bytes, None]:
    return encode_key(transactional_id), None
