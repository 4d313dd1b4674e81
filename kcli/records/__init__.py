"""Pure record codecs: bytes <-> batches (magic 0, 1, 2), compression, CRC. No files, no sockets."""

from kcli.records.batch import RecordBatch, build_record_batch
from kcli.records.compression import Codec
from kcli.records.control import ControlRecordType, EndTxnMarker
from kcli.records.convert import downconvert, upconvert_to_v2
from kcli.records.legacy import LegacyMessage, build_legacy_messages
from kcli.records.record_set import Batch, BatchReader, StopReason, iter_batches, make_batch
from kcli.records.types import Header, Record, TimestampType

__all__ = [
    "Batch",
    "BatchReader",
    "Codec",
    "ControlRecordType",
    "EndTxnMarker",
    "Header",
    "LegacyMessage",
    "Record",
    "RecordBatch",
    "StopReason",
    "TimestampType",
    "build_legacy_messages",
    "build_record_batch",
    "downconvert",
    "iter_batches",
    "make_batch",
    "upconvert_to_v2",
]
