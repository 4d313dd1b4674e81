from __future__ import annotations

import os
import re
import struct
import tempfile
from itertools import accumulate
from pathlib import Path

import pytest

from support import FIXTURES, index_md_findings
from hypothesis import given, settings
from hypothesis import strategies as st

from kcli.errors import CorruptIndexError, InputError
from kcli.storage.index import (
    AbortedTxn,
    InvalidOffsetError,
    OffsetIndex,
    OffsetPosition,
    TimeIndex,
    TimestampOffset,
    TransactionIndex,
)

SOURCES = ("VolodymyrZee__kafka", "rjmfernandes__flink-on-prem")
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/kafka-fixtures is absent")
MIB10 = 10 * 1024 * 1024
T0 = 1_700_000_000_000


FINDINGS = index_md_findings()


def _fixture_files(pattern: str) -> list[Path]:
    return sorted(p for source in SOURCES for p in (FIXTURES / source).rglob(pattern)) if FIXTURES.is_dir() else []


def _finding(path: Path, kind: str) -> str:
    return FINDINGS[path.parent.relative_to(FIXTURES).as_posix() + "/"][kind]


def _expected_entries(finding: str) -> tuple[int, tuple[int, int], tuple[int, int]] | None:
    """'N entries, first (a, b), last (c, d)' -> (N, (a, b), (c, d)); 'empty (0 B)' -> None."""
    if finding.startswith("empty (0 B)"):
        return None
    m = re.match(r"(\d+) entries, first \((\d+), (\d+)\), last \((\d+), (\d+)\)", finding)
    assert m, finding
    n, a, b, c, d = map(int, m.groups())
    return n, (a, b), (c, d)


def _rel(path: Path) -> str:
    return path.relative_to(FIXTURES).as_posix()


def _floor(entries, target, key, empty):
    below = [entry for entry in entries if key(entry) <= target]
    return below[-1] if below else empty


def offset_entries(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">ii", rel, pos) for rel, pos in pairs)


def time_entries(*pairs: tuple[int, int]) -> bytes:
    return b"".join(struct.pack(">qi", ts, rel) for ts, rel in pairs)


# -- real Kafka data --------------------------------------------------------------------------------------


@needs_fixtures
def test_fixture_inventory_is_complete():
    assert len(_fixture_files("*.index")) == 24
    assert len(_fixture_files("*.timeindex")) == 24
    assert len(FINDINGS) == 26


@needs_fixtures
@pytest.mark.parametrize("path", _fixture_files("*.index"), ids=_rel)
def test_offset_index_fixture_matches_index_md(path):
    expected = _expected_entries(_finding(path, "index"))
    index = OffsetIndex(path)
    entries = list(index.entries())
    index.sanity_check()
    assert not index.is_preallocated
    assert index.trailing_bytes == 0
    if expected is None:
        assert entries == [] and index.length == 0
        assert index.lookup(5) == OffsetPosition(0, 0)
        return
    count, first, last = expected
    assert index.entry_count == index.file_entry_slots == len(entries) == count
    assert (entries[0].offset, entries[0].position) == first
    assert (entries[-1].offset, entries[-1].position) == last
    assert index.last_entry == entries[-1]
    assert all(a.offset < b.offset and a.position < b.position for a, b in zip(entries, entries[1:]))
    for target in {0, first[0] - 1, last[0], last[0] + 1000, *(e.offset for e in entries), *(e.offset - 1 for e in entries)}:
        assert index.lookup(target) == _floor(entries, target, lambda e: e.offset, OffsetPosition(0, 0))


@needs_fixtures
@pytest.mark.parametrize("path", _fixture_files("*.timeindex"), ids=_rel)
def test_time_index_fixture_matches_index_md(path):
    expected = _expected_entries(_finding(path, "timeindex"))
    index = TimeIndex(path)
    entries = list(index.entries())
    index.sanity_check()
    assert not index.is_preallocated
    if expected is None:
        assert entries == [] and index.length == 0
        assert index.lookup_by_timestamp(1) == TimestampOffset(-1, 0)
        return
    count, first, last = expected
    assert index.entry_count == index.file_entry_slots == len(entries) == count
    assert (entries[0].timestamp, entries[0].offset) == first
    assert (entries[-1].timestamp, entries[-1].offset) == last
    assert all(a.timestamp < b.timestamp and a.offset <= b.offset for a, b in zip(entries, entries[1:]))
    empty = TimestampOffset(-1, 0)
    for entry in entries:
        for ts in (entry.timestamp - 1, entry.timestamp, entry.timestamp + 1):
            assert index.lookup_by_timestamp(ts) == _floor(entries, ts, lambda e: e.timestamp, empty)
        for offset in (entry.offset - 1, entry.offset):
            assert index.lookup(offset) == _floor(entries, offset, lambda e: e.offset, empty)


@needs_fixtures
def test_loyalty_levels_index_lookups():
    directory = FIXTURES / "rjmfernandes__flink-on-prem/data/loyalty_levels-0"
    with OffsetIndex(directory / "00000000000000000000.index") as index:
        assert index.base_offset == 0
        assert index.entry_count == 100
        assert index.lookup(637) == OffsetPosition(0, 0)  # below the first entry: (base offset, 0)
        assert index.lookup(638) == OffsetPosition(638, 17421)
        assert index.lookup(639) == OffsetPosition(638, 17421)
        assert index.lookup(17203) == OffsetPosition(17184, 956633)
        assert index.entry(0) == OffsetPosition(638, 17421)
        with pytest.raises(IndexError):
            index.entry(100)
    with TimeIndex(directory / "00000000000000000000.timeindex") as tindex:
        assert tindex.entry_count == 101
        assert tindex.lookup_by_timestamp(1713541225349) == TimestampOffset(-1, 0)
        assert tindex.lookup_by_timestamp(1713541225350) == TimestampOffset(1713541225350, 564)
        assert tindex.lookup_by_timestamp(2**62) == TimestampOffset(1713541792339, 17203)
        assert tindex.last_entry == TimestampOffset(1713541792339, 17203)


def test_missing_index_is_an_input_error(tmp_path):
    with pytest.raises(InputError) as info:
        OffsetIndex(tmp_path / "00000000000000000000.index")
    assert info.value.path == str(tmp_path / "00000000000000000000.index")


# -- preallocated (crashed active segment) indexes ---------------------------------------------------------


def test_zero_padded_offset_index_stops_at_padding_and_passes_sanity_check(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    valid = offset_entries((0, 0), (37, 4295), (90, 9000))
    path.write_bytes(valid + bytes(MIB10 - len(valid)))
    index = OffsetIndex(path)
    assert index.base_offset == 100
    assert index.file_entry_slots == MIB10 // 8
    assert index.entry_count == 3
    assert index.is_preallocated
    assert list(index.entries()) == [OffsetPosition(100, 0), OffsetPosition(137, 4295), OffsetPosition(190, 9000)]
    assert index.lookup(10**9) == OffsetPosition(190, 9000)
    index.sanity_check()  # the last slot reads (base offset, 0): Kafka accepts it


def test_zero_padded_time_index_fails_sanity_check_like_kafka(tmp_path):
    path = tmp_path / "00000000000000000100.timeindex"
    valid = time_entries((1587580883405, 35), (1587581641137, 69))
    path.write_bytes(valid + bytes(10485756 - len(valid)))
    index = TimeIndex(path)
    assert index.file_entry_slots == 873813
    assert index.entry_count == 2
    assert index.is_preallocated
    assert list(index.entries())[-1] == TimestampOffset(1587581641137, 169)
    with pytest.raises(CorruptIndexError) as info:
        index.sanity_check()
    assert info.value.reason == (
        f"Corrupt time index found, time index file ({os.path.abspath(path)}) has non-zero size but the last "
        "timestamp is 0 which is less than the first timestamp 1587580883405"
    )
    assert info.value.position == (873813 - 1) * 12


def test_crashed_writer_leaves_a_preallocated_file_and_close_trims_it(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    writer = OffsetIndex(path, writable=True)
    assert path.stat().st_size == MIB10
    writer.append(45, 4321)
    writer.append(485, 55516)
    writer.flush()
    crashed = OffsetIndex(path)
    assert (crashed.entry_count, crashed.file_entry_slots, crashed.is_preallocated) == (2, MIB10 // 8, True)
    crashed.close()
    writer.close()
    assert path.read_bytes() == offset_entries((45, 4321), (485, 55516))
    trimmed = OffsetIndex(path)
    assert (trimmed.entry_count, trimmed.is_preallocated) == (2, False)


def test_reopened_padded_index_appends_after_valid_entries(tmp_path):
    path = tmp_path / "00000000000000000000.timeindex"
    path.write_bytes(time_entries((1000, 5)) + bytes(120))
    with TimeIndex(path, writable=True, max_index_size=240) as index:
        assert index.entry_count == 1 and index.length == 240
        index.maybe_append(2000, 9)
    assert path.read_bytes() == time_entries((1000, 5), (2000, 9))


def test_garbage_after_a_zero_entry_is_not_preallocation(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(offset_entries((3, 100), (0, 0), (9, 300)))
    index = OffsetIndex(path)
    assert index.entry_count == 1  # DumpLogSegments stops at the first zero relative offset after slot 0
    assert not index.is_preallocated


# -- sanity checks with Kafka's messages -------------------------------------------------------------------


def test_offset_index_with_partial_entry_fails_sanity_check(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(offset_entries((3, 100), (9, 300)) + b"\x00\x00\x00\x0c")
    index = OffsetIndex(path)
    assert (index.entry_count, index.trailing_bytes) == (2, 4)
    with pytest.raises(CorruptIndexError) as info:
        index.sanity_check()
    assert info.value.reason == (
        f"Index file {os.path.abspath(path)} is corrupt, found 20 bytes which is neither positive nor a multiple of 8"
    )
    assert info.value.position == 16


def test_offset_index_last_offset_below_base_fails_sanity_check(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    path.write_bytes(offset_entries((3, 100), (-5, 300)))
    with pytest.raises(CorruptIndexError) as info:
        OffsetIndex(path).sanity_check()
    assert info.value.reason == (
        f"Corrupt index found, index file {os.path.abspath(path)} has non-zero size but the last offset is 95 "
        "which is less than the base offset 100"
    )
    assert (info.value.position, info.value.base_offset) == (8, 100)


def test_time_index_sanity_checks(tmp_path):
    path = tmp_path / "00000000000000000100.timeindex"
    path.write_bytes(time_entries((5000, 1), (7000, -3)))
    with pytest.raises(CorruptIndexError, match="the last offset is 97 which is less than the first offset 100"):
        TimeIndex(path).sanity_check()
    path.write_bytes(time_entries((5000, 1), (7000, 4)) + b"\x01")
    with pytest.raises(CorruptIndexError) as info:
        TimeIndex(path).sanity_check()
    assert info.value.reason.endswith("is corrupt, found 25 bytes which is neither positive nor a multiple of 12")


# -- writers ---------------------------------------------------------------------------------------------


def test_offset_index_writer_rejects_non_increasing_offsets(tmp_path):
    path = tmp_path / "00000000000000000100.index"
    with OffsetIndex(path, writable=True, max_index_size=80) as index:
        assert index.length == 80
        index.append(150, 4096)
        with pytest.raises(InvalidOffsetError) as info:
            index.append(150, 8192)
        assert info.value.reason == (
            f"Attempt to append an offset 150 to position 1 no larger than the last offset appended (150) "
            f"to {os.path.abspath(path)}"
        )
        assert not index.can_append_offset(100 + 2**31)
        with pytest.raises(ValueError, match="Integer overflow for offset"):
            index.append(100 + 2**31, 8192)
    assert path.read_bytes() == offset_entries((50, 4096))


def test_offset_index_full(tmp_path):
    with OffsetIndex(tmp_path / "00000000000000000000.index", writable=True, max_index_size=30) as index:
        assert index.max_entries == 3  # floor(30 / 8)
        for offset in (1, 2, 3):
            index.append(offset, offset * 10)
        assert index.is_full
        with pytest.raises(ValueError, match=r"Attempt to append to a full index \(size = 3\)"):
            index.append(4, 40)


def test_time_index_maybe_append_semantics(tmp_path):
    path = tmp_path / "00000000000000000000.timeindex"
    with TimeIndex(path, writable=True, max_index_size=48) as index:
        index.maybe_append(-1, 3)  # v0 message: NO_TIMESTAMP never enters the index
        assert index.entry_count == 0
        index.maybe_append(1000, 3)
        index.maybe_append(1000, 3)  # re-offered last entry (roll/close): ignored
        index.maybe_append(1000, 7)  # timestamp not greater: ignored
        index.maybe_append(2000, 7)
        with pytest.raises(InvalidOffsetError, match=r"Attempt to append an offset \(6\) to slot 2"):
            index.maybe_append(3000, 6)
        with pytest.raises(CorruptIndexError, match=r"Attempt to append a timestamp \(1500\) to slot 2"):
            index.maybe_append(1500, 8)
        assert index.max_entries == 4 and not index.is_full
        index.maybe_append(3000, 9)
        assert index.is_full  # the last slot is kept for the roll-time entry
        with pytest.raises(ValueError, match="full time index"):
            index.maybe_append(4000, 10)
        index.maybe_append(4000, 10, skip_full_check=True)
    assert list(TimeIndex(path).entries()) == [
        TimestampOffset(1000, 3), TimestampOffset(2000, 7), TimestampOffset(3000, 9), TimestampOffset(4000, 10)
    ]


@pytest.mark.parametrize(
    ("offset", "kept"),
    [(50, [10, 20, 30]), (30, [10, 20]), (25, [10, 20]), (11, [10]), (10, []), (0, [])],
)
def test_truncate_to(tmp_path, offset, kept):
    path = tmp_path / "00000000000000000000.index"
    with OffsetIndex(path, writable=True, max_index_size=80) as index:
        for n in (10, 20, 30):
            index.append(n, n * 100)
        index.truncate_to(offset)
        assert [e.offset for e in index.entries()] == kept
        index.append(40, 4000)
    assert [e.offset for e in OffsetIndex(path).entries()] == [*kept, 40]


def test_time_index_truncate_to_uses_offsets(tmp_path):
    path = tmp_path / "00000000000000000000.timeindex"
    with TimeIndex(path, writable=True, max_index_size=120) as index:
        for ts, offset in ((100, 5), (200, 9), (300, 14)):
            index.maybe_append(ts, offset)
        index.truncate_to(9)
        assert index.last_entry == TimestampOffset(100, 5)
        index.flush()
        assert TimeIndex(path).entry_count == 1  # truncated slots are zeroed, not left for a crash to revive


def test_trim_and_resize(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    index = OffsetIndex(path, writable=True, max_index_size=4096)
    index.append(7, 70)
    index.trim_to_valid_size()
    assert path.stat().st_size == 8
    assert index.resize(4096) and path.stat().st_size == 4096
    assert not index.resize(4100)  # rounds down to the same 4096
    with pytest.raises(ValueError):
        index.resize(0)
    index.close()
    index.close()
    assert path.stat().st_size == 8
    with pytest.raises(ValueError, match="not open for append"):
        OffsetIndex(path).append(8, 80)


@settings(max_examples=60, deadline=None)
@given(
    base=st.integers(min_value=0, max_value=2**62),
    gaps=st.lists(st.integers(min_value=1, max_value=5000), max_size=40),
    first=st.integers(min_value=0, max_value=100),
    positions=st.lists(st.integers(min_value=0, max_value=2**31 - 1), min_size=41, max_size=41),
    targets=st.lists(st.integers(min_value=-10, max_value=250_000), max_size=10),
)
def test_offset_index_round_trip_property(base, gaps, first, positions, targets):
    relative = list(accumulate(gaps, initial=first))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.index"
        with OffsetIndex(path, base, writable=True, max_index_size=1024) as writer:
            for rel, pos in zip(relative, positions):
                writer.append(base + rel, pos)
        assert Path(path).read_bytes() == offset_entries(*zip(relative, positions))
        with OffsetIndex(path, base) as index:
            entries = list(index.entries())
            assert entries == [OffsetPosition(base + r, p) for r, p in zip(relative, positions)]
            for target in targets:
                want = _floor(entries, base + target, lambda e: e.offset, OffsetPosition(base, 0))
                assert index.lookup(base + target) == want


@settings(max_examples=60, deadline=None)
@given(
    start=st.integers(min_value=-1, max_value=2**50),
    ts_gaps=st.lists(st.integers(min_value=1, max_value=10**6), max_size=30),
    offset_gaps=st.lists(st.integers(min_value=1, max_value=10**4), min_size=30, max_size=30),
    targets=st.lists(st.integers(min_value=-5, max_value=3 * 10**7), max_size=10),
)
def test_time_index_round_trip_property(start, ts_gaps, offset_gaps, targets):
    timestamps = [start + t for t in accumulate(ts_gaps)]
    offsets = list(accumulate(offset_gaps))[: len(timestamps)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "00000000000000000000.timeindex"
        with TimeIndex(path, writable=True, max_index_size=1200) as writer:
            for ts, offset in zip(timestamps, offsets):
                writer.maybe_append(ts, offset)
        assert path.read_bytes() == time_entries(*zip(timestamps, offsets))
        with TimeIndex(path) as index:
            entries = list(index.entries())
            assert entries == [TimestampOffset(t, o) for t, o in zip(timestamps, offsets)]
            for target in targets:
                ts = start + target
                want = _floor(entries, ts, lambda e: e.timestamp, TimestampOffset(-1, 0))
                assert index.lookup_by_timestamp(ts) == want


# -- transaction index -------------------------------------------------------------------------------------

ABORTS = [AbortedTxn(0, 0, 10, 11), AbortedTxn(1, 5, 15, 13), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]


def _txn_index(tmp_path, txns=ABORTS, name="00000000000000000000.txnindex") -> TransactionIndex:
    index = TransactionIndex(tmp_path / name)
    for txn in txns:
        index.append(txn)
    return index


def test_txn_index_round_trip_and_layout(tmp_path):
    with _txn_index(tmp_path) as index:
        assert list(index.entries()) == ABORTS
    data = (tmp_path / "00000000000000000000.txnindex").read_bytes()
    assert len(data) == 4 * 34
    assert data[34:68] == struct.pack(">hqqqq", 0, 1, 5, 15, 13)


def test_missing_txn_index_is_empty_until_first_append(tmp_path):
    index = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    assert (index.entry_count, list(index.entries())) == (0, [])
    assert not index.path.exists()
    assert index.collect_aborted(0, 100).aborted_transactions == ()


@pytest.mark.parametrize(
    ("start", "end", "expected", "complete"),
    [(0, 100, ABORTS, False), (0, 32, ABORTS[:3], True), (0, 35, ABORTS, True), (10, 35, ABORTS, True),
     (11, 35, ABORTS[1:], True), (20, 41, ABORTS[2:], False)],
)
def test_collect_aborted_like_kafka(tmp_path, start, end, expected, complete):
    # Cases from Kafka's TransactionIndexTest.testCollectAbortedTransactions.
    result = _txn_index(tmp_path).collect_aborted(start, end)
    assert result.aborted_transactions == tuple(expected)
    assert result.is_complete is complete


def test_txn_index_rejects_non_increasing_last_offset_even_after_reopen(tmp_path):
    _txn_index(tmp_path).close()
    reopened = TransactionIndex(tmp_path / "00000000000000000000.txnindex")
    with pytest.raises(InvalidOffsetError) as info:
        reopened.append(AbortedTxn(9, 40, 50, 51))
    assert info.value.reason == (
        "The last offset of appended transactions must increase sequentially, but 50 is not greater than current "
        f"last offset 50 of index {os.path.abspath(reopened.path)}"
    )
    reopened.append(AbortedTxn(9, 40, 51, 52))
    assert reopened.entry_count == 5


def test_txn_index_truncate_to(tmp_path):
    txns = [AbortedTxn(0, 0, 10, 2), AbortedTxn(1, 5, 15, 16), AbortedTxn(2, 18, 35, 25), AbortedTxn(3, 32, 50, 40)]
    with _txn_index(tmp_path, txns) as index:
        index.truncate_to(51)
        assert list(index.entries()) == txns
        index.truncate_to(50)
        assert list(index.entries()) == txns[:3]
        index.append(AbortedTxn(4, 36, 45, 40))  # the last offset went back to 35
        index.truncate_to(0)
        assert list(index.entries()) == []
        assert index.length == 0


def test_txn_index_ignores_and_reports_a_partial_trailing_entry(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    _txn_index(tmp_path).close()
    with open(path, "ab") as out:
        out.write(b"\x00" * 10)
    index = TransactionIndex(path)
    assert (index.entry_count, index.trailing_bytes) == (4, 10)
    assert list(index.entries()) == ABORTS


def test_txn_index_unknown_version(tmp_path):
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 2, 3, 4) + struct.pack(">hqqqq", 1, 1, 5, 6, 7))
    index = TransactionIndex(path)
    entries = index.entries()
    assert next(entries) == AbortedTxn(1, 2, 3, 4)
    with pytest.raises(CorruptIndexError) as info:
        next(entries)
    assert info.value.reason == (
        f"Unexpected aborted transaction version 1 in transaction index {os.path.abspath(path)}, current version is 0"
    )
    assert info.value.position == 34


def test_txn_index_sanity_check(tmp_path):
    index = _txn_index(tmp_path, [AbortedTxn(7, 80, 99, 95)], name="00000000000000000100.txnindex")
    with pytest.raises(CorruptIndexError) as info:
        index.sanity_check()
    assert info.value.reason == (
        "Last offset of aborted transaction AbortedTxn(version=0, producerId=7, firstOffset=80, lastOffset=99, "
        f"lastStableOffset=95) in index {os.path.abspath(index.path)} is less than start offset 100"
    )
    (tmp_path / "ok").mkdir()
    _txn_index(tmp_path / "ok", [AbortedTxn(7, 80, 100, 95)], name="00000000000000000100.txnindex").sanity_check()


def test_txn_index_reads_across_chunks(tmp_path):
    txns = [AbortedTxn(pid, pid * 2, pid * 2 + 1, pid * 2) for pid in range(5000)]
    path = tmp_path / "00000000000000000000.txnindex"
    path.write_bytes(b"".join(struct.pack(">hqqqq", 0, t.producer_id, t.first_offset, t.last_offset,
                                          t.last_stable_offset) for t in txns))
    assert list(TransactionIndex(path).entries()) == txns


def _naive_count(data: bytes, size: int, field_at: int) -> int:
    slots = len(data) // size
    if slots > 1 and not any(data[: 2 * size]):
        return 0  # a preallocated index with no entry yet: slot 0's zeros are no entry
    for slot in range(1, slots):
        if data[slot * size + field_at: slot * size + field_at + 4] == bytes(4):
            return slot
    return slots


@pytest.mark.parametrize("index_class", [OffsetIndex, TimeIndex])
def test_valid_entries_counted_in_chunks_match_the_slot_by_slot_rule(tmp_path, index_class):
    """Entries up to the first slot after slot 0 whose relative offset is 0, across chunk boundaries, with a
    written (not sparse) zero tail, a hole, and entries after a zero slot."""
    import random

    size = index_class.ENTRY.size
    field_at = 0 if index_class is OffsetIndex else 8
    rng = random.Random(5)
    for entries, tail, junk_after in ((0, 10, False), (1, 0, False), (511, 3, False), (512, 1, False),
                                      (1536, 2, False), (9000, 3, False), (20000, 0, False),
                                      (8191, 1, True), (8192, 5000, True), (3, 100000, False)):
        data = bytearray()
        for slot in range(entries):
            rel = slot + 1 if slot else 0
            data += struct.pack(">ii", rel, slot * 100) if size == 8 else struct.pack(">qi", T0 + slot, rel)
        data += bytes(tail * size)
        if junk_after and tail:
            at = len(data) - size
            data[at + field_at: at + field_at + 4] = struct.pack(">i", rng.randrange(1, 1000))
        path = tmp_path / f"{entries}-{tail}{index_class.__name__}"
        path.write_bytes(bytes(data))
        with index_class(path, 0) as index:
            assert index.entry_count == _naive_count(bytes(data), size, field_at), (entries, tail)
            assert index.is_preallocated == (index.entry_count < index.file_entry_slots and not junk_after)
        sparse = tmp_path / f"sparse-{entries}-{tail}{index_class.__name__}"
        with open(sparse, "wb") as out:
            out.write(bytes(data[: entries * size]))
            out.truncate(len(data))  # a hole, as a preallocated index is
        with index_class(sparse, 0) as index:
            assert index.entry_count == _naive_count(bytes(data[: entries * size]) + bytes(tail * size), size,
                                                     field_at)
            assert index.is_preallocated == (index.entry_count < index.file_entry_slots)
