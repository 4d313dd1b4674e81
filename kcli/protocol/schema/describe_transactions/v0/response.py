"""
DescribeTransactionsResponse v0, declared in kio's layout from Kafka 3.7.0's
``clients/src/main/resources/common/message/DescribeTransactionsResponse.json``.

kio types ``TransactionStartTimeMs`` as a datetime and its reader refuses negative values, but Kafka sends -1
for a transactional id without an open transaction (TransactionMetadata.txnStartTimestamp): here it is the
spec's int64, ``transaction_start_time_ms``.
"""

from dataclasses import dataclass
from dataclasses import field
from typing import ClassVar

from kio.schema.errors import ErrorCode
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import ProducerId
from kio.schema.types import TopicName
from kio.schema.types import TransactionalId
from kio.static.constants import EntityType
from kio.static.primitive import i16
from kio.static.primitive import i32
from kio.static.primitive import i32Timedelta
from kio.static.primitive import i64


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicData:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    topic: TopicName = field(metadata={"kafka_type": "string"})
    """The topic name."""
    partitions: tuple[i32, ...] = field(metadata={"kafka_type": "int32"}, default=())
    """The partition ids included in the current transaction."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionState:
    __type__: ClassVar = EntityType.nested
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    error_code: ErrorCode = field(metadata={"kafka_type": "error_code"})
    """The error code."""
    transactional_id: TransactionalId = field(metadata={"kafka_type": "string"})
    """The transactional id."""
    transaction_state: str = field(metadata={"kafka_type": "string"})
    """The current transaction state of the producer."""
    transaction_timeout: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The timeout in milliseconds for the transaction."""
    transaction_start_time_ms: i64 = field(metadata={"kafka_type": "int64"})
    """The start time of the transaction in milliseconds; -1 without one."""
    producer_id: ProducerId = field(metadata={"kafka_type": "int64"})
    """The current producer id associated with the transaction."""
    producer_epoch: i16 = field(metadata={"kafka_type": "int16"})
    """The current epoch associated with the producer id."""
    topics: tuple[TopicData, ...]
    """The set of partitions included in the current transaction (if active). When a transaction is preparing to
    commit or abort, this will include only partitions which do not have markers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescribeTransactionsResponse:
    __type__: ClassVar = EntityType.response
    __version__: ClassVar[i16] = i16(0)
    __flexible__: ClassVar[bool] = True
    __api_key__: ClassVar[i16] = i16(65)
    __header_schema__: ClassVar[type[ResponseHeader]] = ResponseHeader
    throttle_time: i32Timedelta = field(metadata={"kafka_type": "timedelta_i32"})
    """The duration in milliseconds for which the request was throttled due to a quota violation, or zero if the
    request did not violate any quota."""
    transaction_states: tuple[TransactionState, ...]
    """The current state of the transaction."""
