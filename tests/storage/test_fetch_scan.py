"""LogSegment.read's header-only scan (the Fetch hot path) against the whole-window scan it replaced.

The segment mixes batches smaller and larger than the 64 KiB header window, legacy (magic 0 and 1) messages, a
gzip wrapper larger than the window, and ends in a partial batch; every (offset, max_bytes, max_position,
max_offset, min_one_batch) of a grid must give the same region both ways."""

from __future__ import annotations

import itertools
import os

import pytest

from kcli.errors import CorruptRecordError
from kcli.records import Codec, Record, build_legacy_messages, build_record_batch
from kcli.storage.segment import DEFAULT_WINDOW, FileBatchReader, LogSegment, batch_offsets


def _records(start: int, count: int, size: int) -> list[Record]:
    return [Record(start + i, 1_700_000_000_000 + i, b"k%d" % i, os.urandom(size)) for i in range(count)]


def _segment(tmp_path) -> tuple[LogSegment, int]:
    parts, offset = [], 0
    for count, size, kind in [(1, 10, "v2"), (3, 100, "v2"), (200, 1024, "v2"), (1, 10, "v0"), (2, 50, "v1"),
                              (300, 1024, "v2"), (80, 1024, "gzip-v1"), (5, 10, "v2"), (1, 70_000, "v2"),
                              (50, 10, "v2"), (120, 1024, "v2")]:
        records = _records(offset, count, size)
        if kind == "v2":
            parts.append(build_record_batch(records, base_offset=offset))
        elif kind == "gzip-v1":
            # incompressible values: the wrapper stays larger than the window
            parts.append(build_legacy_messages(records, magic=1, codec=Codec.GZIP))
        else:
            parts.append(build_legacy_messages(records, magic=int(kind[1])))
        offset += count
    parts.append(build_record_batch(_records(offset, 10, 1024), base_offset=offset)[:5000])  # partial tail
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(parts))
    return LogSegment(path), offset


def _reference(segment: LogSegment, offset: int, max_bytes: int, max_position, max_offset, min_one_batch: bool):
    """The scan before: every batch read whole through FileBatchReader (no index here: from position 0)."""
    size = segment.log_path.stat().st_size
    end = size if max_position is None else min(max_position, size)
    first_position = end_position = None
    reader = FileBatchReader(segment.log_path, 0, end, window=DEFAULT_WINDOW)
    for chunk, local, total in reader.spans():
        position = reader.window_position + local
        first, last = batch_offsets(chunk, local, total)
        if max_offset is not None and first >= max_offset:
            break
        if first_position is None:
            if last < offset:
                continue
            if not min_one_batch and total > max_bytes:
                return None
            first_position = position
        elif position + total - first_position > max_bytes:
            break
        end_position = position + total
    if first_position is None or end_position is None:
        return None
    return first_position, end_position - first_position


def test_header_scan_matches_the_whole_batch_scan(tmp_path):
    segment, last = _segment(tmp_path)
    size = segment.log_path.stat().st_size
    offsets = sorted({0, 1, 3, 4, 150, 204, 205, 206, 207, 400, 504, 505, 584, 585, 589, 590, 591, 640, last - 1,
                      last, last + 5})
    grid = itertools.product(offsets, (1, 500, 60_000, 200_000, 1 << 20, 8 << 20),
                             (None, 100_000, size - 3000), (None, 300, last), (True, False))
    checked = 0
    for offset, max_bytes, max_position, max_offset, min_one in grid:
        got = segment.read(offset, max_bytes, max_position=max_position, max_offset=max_offset, min_one_batch=min_one)
        want = _reference(segment, offset, max_bytes, max_position, max_offset, min_one)
        assert (None if got is None else (got.position, got.length)) == want, (offset, max_bytes, max_position,
                                                                                max_offset, min_one)
        checked += want is not None
    assert checked > 100


def test_header_scan_raises_on_a_size_below_the_minimum(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    good = build_record_batch(_records(0, 2, 10), base_offset=0)
    path.write_bytes(good + b"\x00" * 40)  # a zero-filled tail: declared size 0
    segment = LogSegment(path)
    with pytest.raises(CorruptRecordError):  # as FileBatchReader: the scan reaches the bad header
        segment.read(0, 1 << 20)


def _mixed_segment(tmp_path) -> tuple[LogSegment, list[tuple[int, int]]]:
    """Batches of 300 KiB and of 100-byte records, in runs: (first offset, last offset) of each batch."""
    parts, spans, offset = [], [], 0
    for count, size, batches in [(300, 1024, 2), (5, 100, 150), (300, 1024, 1), (1, 100, 400), (300, 1024, 3),
                                 (3, 100, 50)]:
        for _ in range(batches):
            parts.append(build_record_batch(_records(offset, count, size), base_offset=offset))
            spans.append((offset, offset + count - 1))
            offset += count
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(parts))
    return LogSegment(path), spans


def test_header_scan_after_large_batches_reads_headers_only_and_matches_the_whole_batch_scan(tmp_path, monkeypatch):
    segment, spans = _mixed_segment(tmp_path)
    last = spans[-1][1] + 1
    offsets = sorted({0, 299, 300, 600, 604, 1345, 1349, 1350, 1649, 1650, 1700, 2049, 2050, 2649, 2950, 3000,
                      last - 1})
    for offset, max_bytes, min_one in itertools.product(offsets, (1, 500, 70_000, 400_000, 1 << 20, 4 << 20),
                                                        (True, False)):
        got = segment.read(offset, max_bytes, min_one_batch=min_one)
        want = _reference(segment, offset, max_bytes, None, None, min_one)
        assert (None if got is None else (got.position, got.length)) == want, (offset, max_bytes, min_one)

    # three 300 KiB batches and small ones: a 64 KiB window, then 4 KiB at each header past a large batch (the last
    # of them holds the first small batches' headers too), not 64 KiB at each
    big = tmp_path / "big" / "00000000000000000000.log"
    big.parent.mkdir()
    big.write_bytes(b"".join(build_record_batch(_records(300 * i, 300, 1024), base_offset=300 * i) for i in range(3))
                    + b"".join(build_record_batch(_records(900 + i, 1, 100), base_offset=900 + i) for i in range(9)))
    segment = LogSegment(big)
    want = _reference(segment, 0, 940_000, None, None, True)
    reads: list[int] = []
    pread = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: reads.append(n) or pread(fd, n, at))
    got = segment.read(0, 940_000)
    assert got is not None and (got.position, got.length) == want and got.length > 3 * 300 * 1024
    assert len(reads) == 4 and reads[0] == 64 * 1024 and all(n <= 4096 for n in reads[1:])


def test_a_fetch_of_many_small_batches_cut_at_max_bytes_is_whole_batches_and_the_next_fetch_continues(tmp_path):
    segment, spans = _mixed_segment(tmp_path)
    small = [s for s in spans if s[1] - s[0] < 5]
    offset, seen = small[0][0], []
    while offset < 1350:  # the run of 150 batches of five 100-byte records, 10 KiB at a time
        got = segment.read(offset, 10_000)
        assert got is not None and 0 < got.length <= 10_000
        batches = list(FileBatchReader(segment.log_path, got.position, got.position + got.length))
        assert sum(b.size for b in batches) == got.length  # whole batches only
        assert batches[0].base_offset == offset
        seen += [(b.base_offset, b.last_offset) for b in batches]
        offset = batches[-1].last_offset + 1
    assert seen == [s for s in small if s[0] < 1350] and offset == 1350
