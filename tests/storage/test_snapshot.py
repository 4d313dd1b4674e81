from __future__ import annotations

import re
import struct
from pathlib import Path

import crc32c
import pytest

from support import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from kcli.errors import CorruptSnapshotError
from kcli.storage.snapshot import (
    ProducerStateEntry,
    decode_producer_snapshot,
    decrement_sequence,
    encode_producer_snapshot,
    inspect_producer_snapshot,
    read_producer_snapshot,
    write_producer_snapshot,
)

SOURCES = ("VolodymyrZee__kafka", "rjmfernandes__flink-on-prem")
KRAFT = FIXTURES / "rjmfernandes__flink-on-prem" / "data"
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/kafka-fixtures is absent")
INT32_MAX = 2**31 - 1


def _snapshot_findings() -> dict[str, str]:
    """INDEX.md '**snapshot**: ...' text per partition dir ("<source>/.../<dir>/")."""
    index_md = FIXTURES / "INDEX.md"
    if not index_md.is_file():
        return {}
    found = {}
    for line in index_md.read_text(encoding="utf-8").splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) == 5 and cells[0][3:].startswith(SOURCES):
            match = re.search(r"\*\*snapshot\*\*: ([^<]*)", cells[4])
            if match:
                found[cells[0][3:].strip("`")] = match[1]
    return found


FINDINGS = _snapshot_findings()
SNAPSHOTS = sorted(p for s in SOURCES for p in (FIXTURES / s).rglob("*.snapshot")) if FIXTURES.is_dir() else []


def _copy(src: Path, tmp_path: Path, mutate=lambda data: data) -> Path:
    dst = tmp_path / src.name
    dst.write_bytes(mutate(src.read_bytes()))
    return dst


def entry(**fields) -> ProducerStateEntry:
    defaults = dict(producer_id=1, producer_epoch=0, last_sequence=0, last_offset=0, offset_delta=0,
                    timestamp=1713541726610, coordinator_epoch=-1, current_txn_first_offset=-1)
    return ProducerStateEntry(**{**defaults, **fields})


@needs_fixtures
def test_fixture_inventory_is_complete():
    assert len(SNAPSHOTS) == 22
    assert len(FINDINGS) == 22


@needs_fixtures
@pytest.mark.parametrize("path", SNAPSHOTS, ids=lambda p: p.relative_to(FIXTURES).as_posix())
def test_fixture_snapshot_matches_index_md(path):
    finding = FINDINGS[path.parent.relative_to(FIXTURES).as_posix() + "/"]
    assert finding.startswith("version 1, CRC32C OK, ")
    count = int(re.search(r"(\d+) producer entr", finding)[1])
    expected = [tuple(map(int, m)) for m in re.findall(
        r"pid (\d+) epoch (-?\d+) lastSeq (-?\d+) lastOffset (-?\d+) txnFirstOffset (-?\d+)", finding)]
    snapshot = read_producer_snapshot(path)
    assert snapshot.offset == int(path.name.split(".")[0])
    assert snapshot.version == 1
    assert snapshot.stored_crc == snapshot.computed_crc
    assert snapshot.problems == ()
    assert len(snapshot.entries) == count == len(expected)
    got = [(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.current_txn_first_offset)
           for e in snapshot.entries]
    assert got == expected
    # Our encoder reproduces Kafka's bytes exactly.
    assert encode_producer_snapshot(snapshot.entries) == path.read_bytes()


@needs_fixtures
def test_loyalty_levels_snapshot():
    snapshot = read_producer_snapshot(KRAFT / "loyalty_levels-0" / "00000000000000017204.snapshot")
    assert snapshot.offset == 17204
    assert snapshot.stored_crc == 2137208034
    (producer,) = snapshot.entries
    assert (producer.producer_id, producer.producer_epoch, producer.last_sequence, producer.last_offset) == (43, 0, 17203, 17203)
    assert (producer.first_sequence, producer.first_offset) == (17203, 17203)
    assert producer.has_batch_metadata
    assert producer.coordinator_epoch == -1


@needs_fixtures
def test_promotions_snapshot_has_two_producers():
    snapshot = read_producer_snapshot(KRAFT / "promotions-0" / "00000000000000000029.snapshot")
    assert [e.producer_id for e in snapshot.entries] == [45, 46]
    p45, p46 = snapshot.entries
    assert (p45.last_sequence, p45.last_offset, p45.offset_delta) == (2, 26, 0)
    assert (p46.last_sequence, p46.last_offset, p46.offset_delta) == (25, 28, 1)
    assert (p46.first_sequence, p46.first_offset) == (24, 27)


@needs_fixtures
def test_empty_snapshot_is_ten_bytes():
    path = FIXTURES / "VolodymyrZee__kafka" / "__consumer_offsets-12" / "00000000000000000470.snapshot"
    assert path.read_bytes() == bytes.fromhex("0001" "48674bc7" "00000000")
    snapshot = read_producer_snapshot(path)
    assert (snapshot.offset, snapshot.entries, snapshot.stored_crc) == (470, (), 0x48674BC7)


@needs_fixtures
def test_flipped_byte_is_a_crc_mismatch(tmp_path):
    source = KRAFT / "promotions-0" / "00000000000000000029.snapshot"

    def flip(data: bytes) -> bytes:
        return data[:20] + bytes([data[20] ^ 0x01]) + data[21:]

    path = _copy(source, tmp_path, flip)
    computed = crc32c.crc32c(path.read_bytes()[6:])
    with pytest.raises(CorruptSnapshotError) as info:
        read_producer_snapshot(path)
    assert info.value.reason == (
        f"Snapshot is corrupt (CRC is no longer valid). Stored crc: 2583987673. Computed crc: {computed}"
    )
    assert (info.value.path, info.value.position) == (str(path), 2)
    inspected = inspect_producer_snapshot(path)
    assert (inspected.stored_crc, inspected.computed_crc) == (2583987673, computed)
    assert len(inspected.entries) == 2  # still decoded for the report


@needs_fixtures
def test_truncated_snapshot_fails_schema_validation(tmp_path):
    path = _copy(KRAFT / "promotions-0" / "00000000000000000029.snapshot", tmp_path, lambda data: data[:80])
    with pytest.raises(CorruptSnapshotError) as info:
        read_producer_snapshot(path)
    assert info.value.reason == (
        "Snapshot failed schema validation: Error reading field 'producer_entries': "
        "Error reading field 'offset_delta': java.nio.BufferUnderflowException"
    )
    assert info.value.position == 10 + 46 + 22
    inspected = inspect_producer_snapshot(path)
    assert [p.reason.split(":")[0] for p in inspected.problems] == [
        "Snapshot failed schema validation", "Snapshot is corrupt (CRC is no longer valid). Stored crc"]
    assert [e.producer_id for e in inspected.entries] == [45]


@pytest.mark.parametrize(
    ("data", "message", "position"),
    [
        (b"", "Error reading field 'version': java.nio.BufferUnderflowException", 0),
        (b"\x00\x01\x00", "Error reading field 'crc': java.nio.BufferUnderflowException", 2),
        (b"\x00\x01\x00\x00\x00\x00\x00", "Error reading field 'producer_entries': java.nio.BufferUnderflowException", 6),
        (struct.pack(">hIi", 1, 0, -1), "Error reading field 'producer_entries': Array size -1 cannot be negative", 6),
        (struct.pack(">hIi", 1, 0, 93) + bytes(92),
         "Error reading field 'producer_entries': Error reading array of size 93, only 92 bytes available", 6),
        (struct.pack(">hIi", 1, 0, 3) + bytes(50),
         "Error reading field 'producer_entries': Error reading field 'producer_id': java.nio.BufferUnderflowException",
         10 + 46),
    ],
)
def test_schema_failures_use_kafka_messages(data, message, position):
    snapshot = decode_producer_snapshot(data, offset=0)
    first = snapshot.problems[0]
    assert first.reason == "Snapshot failed schema validation: " + message
    assert first.position == position


def test_unknown_version_is_reported_before_crc():
    data = bytearray(encode_producer_snapshot([entry()]))
    data[0:2] = struct.pack(">h", 2)
    problems = decode_producer_snapshot(bytes(data), offset=5).problems
    assert [p.reason for p in problems] == ["Snapshot contained an unknown file version 2"]
    data[30] ^= 0xFF
    problems = decode_producer_snapshot(bytes(data), offset=5).problems
    assert problems[0].reason == "Snapshot contained an unknown file version 2"
    assert problems[1].reason.startswith("Snapshot is corrupt (CRC is no longer valid)")


def test_write_is_atomic_and_reads_back(tmp_path):
    path = tmp_path / "00000000000000000029.snapshot"
    entries = [entry(producer_id=45, last_sequence=2, last_offset=26),
               entry(producer_id=46, last_sequence=25, last_offset=28, offset_delta=1, current_txn_first_offset=20,
                     coordinator_epoch=3)]
    write_producer_snapshot(path, entries)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    snapshot = read_producer_snapshot(path)
    assert snapshot.entries == tuple(entries)
    assert snapshot.offset == 29
    assert path.stat().st_size == 10 + 2 * 46


def test_entry_without_batch_metadata():
    producer = entry(last_offset=-1, last_sequence=-1, offset_delta=0)
    assert not producer.has_batch_metadata
    assert (producer.first_sequence, producer.first_offset) == (-1, -1)


def test_sequences_wrap_at_int_max():
    assert decrement_sequence(10, 3) == 7
    assert decrement_sequence(0, 1) == INT32_MAX
    assert decrement_sequence(5, 10) == INT32_MAX - 4
    assert entry(last_sequence=2, offset_delta=5, last_offset=100).first_sequence == INT32_MAX - 2
    assert entry(last_sequence=2, offset_delta=5, last_offset=100).first_offset == 95


ENTRIES = st.builds(
    ProducerStateEntry,
    producer_id=st.integers(-(2**63), 2**63 - 1),
    producer_epoch=st.integers(-(2**15), 2**15 - 1),
    last_sequence=st.integers(-(2**31), 2**31 - 1),
    last_offset=st.integers(-(2**63), 2**63 - 1),
    offset_delta=st.integers(-(2**31), 2**31 - 1),
    timestamp=st.integers(-(2**63), 2**63 - 1),
    coordinator_epoch=st.integers(-(2**31), 2**31 - 1),
    current_txn_first_offset=st.integers(-(2**63), 2**63 - 1),
)


@given(st.lists(ENTRIES, max_size=20), st.integers(0, 2**63 - 1))
def test_snapshot_codec_round_trips(entries, offset):
    data = encode_producer_snapshot(entries)
    assert len(data) == 10 + 46 * len(entries)
    snapshot = decode_producer_snapshot(data, offset=offset)
    assert snapshot.problems == ()
    assert snapshot.entries == tuple(entries)
    assert snapshot.offset == offset


@given(st.lists(ENTRIES, min_size=1, max_size=5), st.data())
def test_any_flipped_bit_after_the_crc_is_detected(entries, data):
    encoded = bytearray(encode_producer_snapshot(entries))
    position = data.draw(st.integers(6, len(encoded) - 1))
    encoded[position] ^= 1 << data.draw(st.integers(0, 7))
    problems = decode_producer_snapshot(bytes(encoded), offset=0).problems
    assert any(p.reason.startswith("Snapshot is corrupt (CRC is no longer valid)") for p in problems)
