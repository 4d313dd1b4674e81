"""Control records (KIP-98): the key says which kind, the value of COMMIT/ABORT is an EndTxnMarker."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

from kcli.errors import CorruptRecordError

CONTROL_KEY = struct.Struct(">hh")  # version (0), type
END_TXN_MARKER = struct.Struct(">hi")  # version (0), coordinatorEpoch
CURRENT_CONTROL_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VERSION = 0


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2  # the rest appear only in KRaft logs
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6
    UNKNOWN = -1


@dataclass(slots=True, frozen=True)
class EndTxnMarker:
    control_type: ControlRecordType  # ABORT or COMMIT
    coordinator_epoch: int
    version: int = CURRENT_END_TXN_MARKER_VERSION


def parse_control_type(key: bytes | None) -> ControlRecordType:
    """Type of a control record from its key; unknown ids map to UNKNOWN as Kafka's parse does."""
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError(f"Invalid control record key: expected at least 4 bytes, got {0 if key is None else len(key)}")
    version, type_id = CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"Invalid version found for control record: {version}. May indicate data corruption")
    try:
        return ControlRecordType(type_id)
    except ValueError:
        return ControlRecordType.UNKNOWN


def control_type_id(key: bytes) -> int:
    """The raw type id, for rendering ``controlType: UNKNOWN(id)``."""
    return CONTROL_KEY.unpack_from(key)[1]


def parse_end_txn_marker(control_type: ControlRecordType, value: bytes | None) -> EndTxnMarker:
    if value is None or len(value) < END_TXN_MARKER.size:
        raise CorruptRecordError("Invalid end transaction marker: value shorter than 6 bytes")
    version, coordinator_epoch = END_TXN_MARKER.unpack_from(value)
    if version < 0:
        raise CorruptRecordError(f"Invalid version found for end transaction marker: {version}. May indicate data corruption")
    return EndTxnMarker(control_type, coordinator_epoch, version)


def control_key(control_type: ControlRecordType) -> bytes:
    return CONTROL_KEY.pack(CURRENT_CONTROL_KEY_VERSION, int(control_type))


def end_txn_marker_value(coordinator_epoch: int) -> bytes:
    return END_TXN_MARKER.pack(CURRENT_END_TXN_MARKER_VERSION, coordinator_epoch)
