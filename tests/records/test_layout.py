"""kcli.records.layout: the header layouts are declared once, derive Kafka's offsets, read real batches,
and no other module under kcli/ declares them again."""

from __future__ import annotations

import ast
import struct
from pathlib import Path

import pytest

from kcli.records import BatchReader, LegacyMessage, RecordBatch, build_legacy_messages, build_record_batch, layout
from kcli.records.crc import crc32, crc32c
from kcli.records.types import Record
from support import FIXTURES

KCLI = Path(__file__).resolve().parents[2] / "kcli"
LAYOUT = KCLI / "records" / "layout.py"

# DefaultRecordBatch.java and LegacyRecord.java's constants.
KAFKA_V2_OFFSETS = {
    "base_offset": 0, "batch_length": 8, "partition_leader_epoch": 12, "magic": 16, "crc": 17, "attributes": 21,
    "last_offset_delta": 23, "base_timestamp": 27, "max_timestamp": 35, "producer_id": 43, "producer_epoch": 51,
    "base_sequence": 53, "records_count": 57,
}


def test_v2_offsets_are_kafkas():
    assert layout.BATCH_V2_OFFSETS == KAFKA_V2_OFFSETS
    assert layout.BATCH_V2_FORMAT == ">qiibIhiqqqhii"
    assert layout.RECORD_BATCH_OVERHEAD == 61
    assert layout.LOG_OVERHEAD == 12
    assert layout.HEADER_SIZE_UP_TO_MAGIC == 17
    assert layout.CRC_COVERED_FROM == layout.ATTRIBUTES_OFFSET == 21
    assert layout.ATTRIBUTES_LOW_BYTE == 22
    assert layout.HEADER_SIZE_UP_TO_LAST_OFFSET_DELTA == 27
    assert layout.RECORDS_COUNT_OFFSET + layout.RECORDS_COUNT_FIELD.size == layout.RECORD_BATCH_OVERHEAD
    assert layout.BatchHeader._fields == tuple(KAFKA_V2_OFFSETS)


def test_offsets_agree_with_kafka_python():
    from kafka.record.default_records import DefaultRecordBase
    from kafka.record.legacy_records import LegacyRecordBase

    assert layout.BATCH_HEADER.format == DefaultRecordBase.HEADER_STRUCT.format
    assert layout.CRC_OFFSET == DefaultRecordBase.CRC_OFFSET
    assert layout.ATTRIBUTES_OFFSET == DefaultRecordBase.ATTRIBUTES_OFFSET
    assert layout.LEGACY_LOG_OVERHEAD == LegacyRecordBase.LOG_OVERHEAD
    assert layout.RECORD_OVERHEAD_V0 == LegacyRecordBase.RECORD_OVERHEAD_V0
    assert layout.RECORD_OVERHEAD_V1 == LegacyRecordBase.RECORD_OVERHEAD_V1
    assert layout.LEGACY_MAGIC_OFFSET == LegacyRecordBase.MAGIC_OFFSET
    assert layout.LEGACY_CRC_OFFSET == LegacyRecordBase.CRC_OFFSET
    # the same sizes (kcli reads the legacy magic unsigned, kafka-python signed)
    assert layout.LEGACY_LOG_OVERHEAD + layout.MESSAGE_V1.size == LegacyRecordBase.HEADER_STRUCT_V1.size
    assert layout.LEGACY_LOG_OVERHEAD + layout.MESSAGE_V1.size == LegacyRecordBase.KEY_OFFSET_V1  # the key length


def test_every_magic_frames_and_dispatches_alike():
    """The log overhead and the magic byte sit at the same place in every magic (FileLogInputStream relies on it)."""
    assert layout.LEGACY_LOG_ENTRY.format == layout.LOG_OVERHEAD_STRUCT.format
    assert layout.LEGACY_MAGIC_OFFSET == layout.MAGIC_OFFSET
    assert layout.MIN_RECORD_OVERHEAD == 14
    assert layout.LEGACY_OFFSETS == {"offset": 0, "message_size": 8, "crc": 12, "magic": 16, "attributes": 17,
                                     "timestamp": 18}


def _fixture(rel: str) -> bytes:
    path = FIXTURES / rel
    if not path.is_file():
        pytest.skip(f"fixture {rel} not found")
    return path.read_bytes()


def _field_at(buf: bytes, pos: int, name: str) -> int:
    code = dict(layout.BATCH_V2_FIELDS)[name]
    return struct.unpack_from(">" + code, buf, pos + layout.BATCH_V2_OFFSETS[name])[0]


@pytest.mark.parametrize("rel", [
    "VolodymyrZee__kafka/first_topic-0/00000000000000000000.log",  # Kafka 2.x, uncompressed
    "rjmfernandes__flink-on-prem/data/_schemas-0/00000000000000000000.log",  # Kafka 3.6, lz4 idempotent
    "tulios__kafkajs/_extracted/v4_response_gzip.records.bin",
])
def test_derived_offsets_read_real_batches(rel):
    data = _fixture(rel)
    batches = [b for b in BatchReader(data) if isinstance(b, RecordBatch)]
    assert batches
    pos = 0
    for batch in batches:
        pos = batch.position
        header = layout.read_header(data, pos)
        for name in layout.BatchHeader._fields:  # each field where its derived offset says
            assert getattr(header, name) == _field_at(data, pos, name) == getattr(batch, name)
        assert header.magic == data[pos + layout.MAGIC_OFFSET] == 2
        assert layout.entry_size(data, pos) == batch.size == layout.LOG_OVERHEAD + header.batch_length
        assert layout.read_log_overhead(data, pos) == (header.base_offset, header.batch_length)
        assert header.crc == crc32c(data[pos + layout.CRC_COVERED_FROM : pos + batch.size])
        records = batch.records()
        assert layout.read_records_count(data, pos) == len(records)
        assert header.base_offset + layout.read_last_offset_delta(data, pos) == records[-1].offset


def test_derived_legacy_offsets_read_a_real_magic1_message():
    data = _fixture("segmentio__kafka-go/_extracted/v1-v1.records.bin")
    from kafka.record.legacy_records import LegacyRecordBatch

    for message in BatchReader(data):
        assert isinstance(message, LegacyMessage)
        raw = message.raw
        assert raw[layout.LEGACY_MAGIC_OFFSET] == 1
        (crc,) = layout.LEGACY_CRC_FIELD.unpack_from(raw, layout.LEGACY_CRC_OFFSET)
        assert crc == crc32(raw[layout.LEGACY_CRC_COVERED_FROM :]) == message.crc
        (timestamp,) = layout.LEGACY_TIMESTAMP_FIELD.unpack_from(raw, layout.LEGACY_TIMESTAMP_OFFSET)
        theirs = next(iter(LegacyRecordBatch(raw, 1)))
        assert timestamp == theirs.timestamp == message.timestamp


def test_stamps_stay_outside_the_crc():
    raw = bytearray(build_record_batch([Record(0, 1000, b"k", b"v")]))
    layout.stamp_base_offset(raw, 0, 1234)
    layout.stamp_leader_epoch(raw, 0, 7)
    batch = RecordBatch(bytes(raw))
    assert (batch.base_offset, batch.partition_leader_epoch, batch.is_valid) == (1234, 7, True)
    layout.stamp_crc(raw, 0, 0)
    assert not RecordBatch(bytes(raw)).is_valid
    legacy = bytearray(build_legacy_messages([Record(5, 1000, b"k", b"v")], magic=1))
    layout.stamp_base_offset(legacy, 0, 99)
    assert LegacyMessage(bytes(legacy)).offset == 99 and LegacyMessage(bytes(legacy)).is_valid


# -- the guard: nothing else declares the layouts ---------------------------------------------------------
# Struct formats that are (a prefix of) the v2 header, the log overhead or a magic 0/1 message header.
_V2 = layout.BATCH_V2_FORMAT[1:]
_FORBIDDEN_FORMATS = {_V2[:n] for n in range(2, len(_V2) + 1)} | {"IBb", "IBbq", "Bb"}
# Formats that look like one of those but mean something else, with the reason.
_ALLOWED_FORMATS = {("storage/index.py", "qi"): "time index entry: timestamp int64, relative offset int32"}
# Header byte offsets (any magic) other than 0; a literal one in a read or write means a re-declaration.
_HEADER_OFFSETS = set(layout.BATCH_V2_OFFSETS.values()) | set(layout.LEGACY_OFFSETS.values()) | {
    layout.RECORD_BATCH_OVERHEAD, layout.ATTRIBUTES_LOW_BYTE, layout.HEADER_SIZE_UP_TO_MAGIC,
    layout.HEADER_SIZE_UP_TO_LAST_OFFSET_DELTA}
_HEADER_OFFSETS.discard(0)
_STRUCT_CALLS = {"unpack_from", "pack_into", "unpack", "pack", "Struct", "calcsize"}
_BUFFER_LAYERS = ("records", "storage", "tools", "spark", "broker")
_CONSTANT_NAME_SUFFIXES = ("OVERHEAD", "_OFFSET", "_AT", "UP_TO_MAGIC", "_BYTE", "_PEEK", "PEEK")


def _struct_format(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value[:1] in "<>!=@" and node.value:
        body = node.value[1:]
        if body and all(c in "xcbB?hHiIlLqQnNefdspP0123456789" for c in body):
            return body
    return None


def _int_literals(node: ast.AST) -> list[int]:
    """Integer literals in an offset expression (``57``, ``pos + 57``, ``8:12``)."""
    return [n.value for n in ast.walk(node)
            if isinstance(n, ast.Constant) and type(n.value) is int and n.value in _HEADER_OFFSETS]


def _violations(path: Path, source: str) -> list[str]:
    rel = path.relative_to(KCLI).as_posix()
    buffer_layer = rel.split("/")[0] in _BUFFER_LAYERS
    out = []
    for node in ast.walk(ast.parse(source)):
        fmt = _struct_format(node)
        if fmt is not None and fmt in _FORBIDDEN_FORMATS and (rel, fmt) not in _ALLOWED_FORMATS:
            out.append(f"{rel}:{node.lineno}: struct format {node.value!r} re-declares a header layout")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _STRUCT_CALLS:
            for arg in node.args[1:]:
                for value in _int_literals(arg):
                    out.append(f"{rel}:{node.lineno}: {node.func.attr} at literal header offset {value}")
        if buffer_layer and isinstance(node, ast.Subscript):
            index = node.slice
            # buf[pos + 16], buf[21:], buf[8:12], buf[pos + 21 : end]; not text[:22] (a length, not an offset)
            if isinstance(index, ast.Slice):
                exprs = [index.lower, index.upper if isinstance(index.upper, ast.BinOp) else None]
            else:
                exprs = [index if isinstance(index, ast.BinOp) else None]
            for expr in exprs:
                if expr is not None:
                    for value in _int_literals(expr):
                        out.append(f"{rel}:{node.lineno}: subscript at literal header offset {value}")
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and type(node.value.value) is int:
            for target in node.targets:
                if (isinstance(target, ast.Name) and target.id.isupper() and target.id.endswith(_CONSTANT_NAME_SUFFIXES)
                        and node.value.value in _HEADER_OFFSETS | {layout.LOG_OVERHEAD, layout.MIN_RECORD_OVERHEAD}):
                    out.append(f"{rel}:{node.lineno}: {target.id} = {node.value.value} re-declares a header offset")
    return out


def test_no_module_redeclares_a_header_layout():
    found = []
    for path in sorted(KCLI.rglob("*.py")):
        if path == LAYOUT:
            continue
        found += _violations(path, path.read_text(encoding="utf-8"))
    assert not found, "declare header layouts in kcli/records/layout.py only:\n" + "\n".join(found)


@pytest.mark.parametrize("snippet", [
    'import struct\nHEADER = struct.Struct(">qiibIhiqqqhii")\n',
    'import struct\nstruct.pack_into(">i", buf, 12, 0)\n',
    'import struct\nx = struct.unpack_from(">i", raw, 57)[0]\n',
    'import struct\n_OFFSET_SIZE = struct.Struct(">qi")\n',
    'magic = chunk[local + 16]\n',
    'n = 12 + struct.unpack(">i", head[8:12])[0]\n',
    'LAST_OFFSET_DELTA_AT = 23\n',
])
def test_the_guard_catches_redeclarations(snippet):
    assert _violations(KCLI / "storage" / "example.py", snippet)
