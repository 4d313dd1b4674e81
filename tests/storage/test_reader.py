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


def test_checked_spans_refuse_a_negative_last_offset_delta_on_the_lean_path(tmp_path):
    """An empty v2 batch whose lastOffsetDelta is -1 fails header_problem: checked from the window (batches=False,
    the cleaner's listing) as when a Batch is built."""
    from kcli.records import build_record_batch
    from kcli.records.batch import HEADER
    from kcli.records.crc import crc32c
    from kcli.records.layout import ATTRIBUTES_OFFSET, stamp_crc
    from kcli.storage.checked import CheckedBatchReader, CorruptBatchError

    raw = bytearray(build_record_batch([], base_offset=0, max_timestamp=0, last_offset_delta=0))
    fields = list(HEADER.unpack_from(raw))
    fields[6] = -1  # lastOffsetDelta
    HEADER.pack_into(raw, 0, *fields)
    stamp_crc(raw, 0, crc32c(bytes(raw[ATTRIBUTES_OFFSET:])))
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(raw))
    for batches in (True, False):
        with pytest.raises(CorruptBatchError) as info:
            list(CheckedBatchReader(path).checked_spans(batches=batches))
        assert info.value.code == "bad_batch_header"
