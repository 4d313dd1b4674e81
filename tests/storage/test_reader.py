"""PartitionReader: whole batches from any offset, bounded by max_bytes, and offsets by timestamp."""

from __future__ import annotations

import pytest

from builders import build_partition
from kcli.records import BatchReader
from kcli.storage.reader import PartitionReader


@pytest.fixture(scope="module")
def partition(tmp_path_factory):
    directory = build_partition(tmp_path_factory.mktemp("r") / "t-0")
    bases = sorted(int(p.name.split(".")[0]) for p in directory.glob("*.log"))
    batches = []
    for base in bases:
        batches.extend(BatchReader((directory / f"{base:020d}.log").read_bytes()))
    return directory, bases, batches


def test_every_offset_starts_at_its_batch(partition):
    directory, bases, batches = partition
    end = batches[-1].last_offset + 1
    reader = PartitionReader(directory, bases, end)
    for batch in batches[::7]:
        for offset in (batch.base_offset, batch.last_offset):
            found = reader.read(offset, 1)  # less than one batch: still one whole batch (KIP-74)
            (got,) = list(BatchReader(found.read()))
            assert got.base_offset <= offset <= got.last_offset and got.raw == batch.raw
    assert reader.read(end, 1000) is None


def test_max_bytes_bounds_whole_batches(partition):
    directory, bases, batches = partition
    reader = PartitionReader(directory, bases, batches[-1].last_offset + 1)
    found = reader.read(0, 3000)
    got = list(BatchReader(found.read()))
    assert sum(b.size for b in got) <= 3000 and got[0].base_offset == 0
    assert [b.raw for b in got] == [b.raw for b in batches[: len(got)]]


def test_upper_bound_hides_later_batches(partition):
    directory, bases, batches = partition
    reader = PartitionReader(directory, bases, batches[-1].last_offset + 1)
    bound = batches[3].base_offset
    got = list(BatchReader(reader.read(0, 10**9, upper_bound=bound).read()))
    assert got[-1].last_offset < bound


def test_offset_for_timestamp_matches_brute_force(partition):
    directory, bases, batches = partition
    reader = PartitionReader(directory, bases, batches[-1].last_offset + 1)
    records = [r for b in batches for r in b.records()]
    for target in (records[0].timestamp - 1, records[10].timestamp, records[200].timestamp + 1, records[-1].timestamp):
        expected = next((r for r in records if r.timestamp >= target), None)
        match = reader.offset_for_timestamp(target)
        assert (match.offset, match.timestamp) == (expected.offset, expected.timestamp)
    assert reader.offset_for_timestamp(records[-1].timestamp + 10**9) is None
    best = max(records, key=lambda r: r.timestamp)
    assert reader.max_timestamp().timestamp == best.timestamp
