"""Value types shared by the record codecs: Record, Header, TimestampType."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class TimestampType(IntEnum):
    """Kafka's TimestampType; ``label`` is the spelling kafka-dump-log prints."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def label(self) -> str:
        return _TS_LABELS[self]


_TS_LABELS = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
NO_PARTITION_LEADER_EPOCH = -1
INT32_MAX = 2**31 - 1


@dataclass(slots=True, frozen=True)
class Header:
    """A record header (magic 2). Kafka's key is a Java String: decoded from UTF-8 with
    surrogateescape so that invalid bytes survive a rewrite byte for byte."""

    key: str
    value: bytes | None

    def key_bytes(self) -> bytes:
        return self.key.encode("utf-8", "surrogateescape")


@dataclass(slots=True)
class Record:
    """One record as a reader sees it: absolute offset and effective timestamp.

    ``crc`` and ``valid`` are per-message for magic 0/1 (v2 records have no own CRC: None / True).
    """

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    sequence: int = NO_SEQUENCE
    crc: int | None = None
    valid: bool = True


def increment_sequence(sequence: int, increment: int) -> int:
    """Producer sequences wrap from Integer.MAX_VALUE back to 0 (DefaultRecordBatch.incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment
