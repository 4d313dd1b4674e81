"""LogSegment (append, read regions, truncate_to), PartitionLog.truncate_to/read and the LeaderEpochCache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kcli.records import BatchReader, Record, build_record_batch
from kcli.storage.checkpoint import EpochEntry
from kcli.storage.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from kcli.storage.log import PartitionLog
from kcli.storage.log_config import LogConfig
from kcli.storage.segment import LogSegment
from kcli.storage.snapshot import read_producer_snapshot

T0 = 1_700_000_000_000


def fill(log: PartitionLog, batches: int, *, per_batch: int = 2, epoch_every: int = 0, pid: int = -1) -> None:
    for i in range(batches):
        log.append([Record(0, T0 + i, b"k%d" % i, b"x" * 100) for _ in range(per_batch)],
                   partition_leader_epoch=i // epoch_every if epoch_every else 0,
                   producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                   base_sequence=i * per_batch if pid >= 0 else -1)


def test_segment_append_and_read_regions(tmp_path):
    config = LogConfig(index_interval_bytes=300)
    segment = LogSegment.open(tmp_path, 0, config)
    sizes = []
    for i in range(10):
        raw = build_record_batch([Record(i * 2 + j, T0 + i, b"k", b"v" * 50) for j in range(2)])
        batch = next(iter(BatchReader(raw)))
        segment.append(raw, batch)
        sizes.append(len(raw))
    segment.flush()
    assert segment.next_offset == 20 and segment.size == sum(sizes)
    assert segment.indexes.index.entry_count > 0  # the interval was crossed
    region = segment.read(7, 1)  # at least one batch: the one holding offset 7 (6..7)
    assert (region.position, region.length) == (sum(sizes[:3]), sizes[3])
    assert [b.base_offset for b in BatchReader(region.read())] == [6]
    region = segment.read(7, sizes[3] + sizes[4] + 5)
    assert [b.base_offset for b in BatchReader(region.read())] == [6, 8]
    assert segment.read(7, 1, min_one_batch=False) is None
    assert segment.read(7, 10**6, max_offset=10).length == sizes[3] + sizes[4]
    assert segment.read(7, 10**6, max_position=sum(sizes[:4])).length == sizes[3]
    assert segment.read(20, 100) is None
    segment.close()
    reread = LogSegment(segment.log_path)  # the read side, after close, through the trimmed index
    assert reread.read(19, 10**6).position == sum(sizes[:9])
    assert reread.largest_timestamp() == T0 + 9


def test_reads_at_the_tail_start_at_the_recent_batch_and_equal_reads_through_the_index(tmp_path):
    """The active segment remembers where its last batches start; every read it answers from them is the read a
    segment without that memory (the index and a header scan) answers, also after a truncation and new appends."""
    config = LogConfig(index_interval_bytes=4096)
    segment = LogSegment.open(tmp_path, 0, config)

    def append(values):
        raw = build_record_batch([Record(segment.next_offset + j, T0, None, v) for j, v in enumerate(values)])
        segment.append(raw, next(iter(BatchReader(raw))))

    for i in range(300):  # batches of one and of three records: offsets inside batches too
        append([b"v" * 40] * (1 + 2 * (i % 2)))
    segment.flush_to_os()

    def reads(seg):
        return [(r.position, r.length) if (r := seg.read(o, size)) else None
                for o in range(0, segment.next_offset + 2) for size in (1, 500)]

    assert segment._recent[0][0] > 0  # the memory does not reach back to the start: both paths are exercised
    assert reads(segment) == reads(LogSegment(segment.log_path))
    segment.truncate_to(400)
    for _ in range(5):
        append([b"w" * 7])  # other batches at the same positions
    segment.flush_to_os()
    assert reads(segment) == reads(LogSegment(segment.log_path))
    segment.close()


def test_a_kept_open_region_survives_retention_deleting_the_segment(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=1000))
    fill(log, 20)
    assert len(log.segments) > 2
    region = log.read(0, 10**6, keep_open=True)
    plain = log.read(0, 10**6)
    expected = region.read()
    renamed = log.delete_oldest_segment()
    for path in renamed:
        path.unlink()  # the delayed delete ran while the fetch response was being sent
    assert not region.path.exists()
    assert region.read() == expected
    with region.opened() as handle:
        assert os.pread(handle.fileno(), region.length, region.position) == expected
    with pytest.raises(FileNotFoundError):
        plain.read()
    region.close()
    assert log.log_start_offset == log.segments[0]
    log.close()


def test_truncate_to_cuts_segments_epochs_and_producer_state(tmp_path):
    directory = tmp_path / "t-0"
    log = PartitionLog(directory, config=LogConfig(segment_bytes=1500, index_interval_bytes=200))
    fill(log, 30, epoch_every=10, pid=8)
    assert [e.epoch for e in log.epochs] == [0, 1, 2] and len(log.segments) > 3
    segments_before = log.segments
    renamed = log.truncate_to(25)  # in the middle of epoch 1 (offsets 20..39), at a batch boundary (2 per batch)
    assert log.log_end_offset == 24  # the batch 24..25 straddles the point: removed whole, as Kafka does
    assert log.epochs == [EpochEntry(0, 0), EpochEntry(1, 20)]
    assert all(p.name.endswith(".deleted") for p in renamed)
    assert log.segments == [b for b in segments_before if b <= 25]
    assert log.producers[8].last_sequence == log.log_end_offset - 1
    log.truncate_to(20)
    assert log.log_end_offset == 20 and log.epochs == [EpochEntry(0, 0)]
    fill(log, 1, pid=-1)
    log.close()
    reopened = PartitionLog.open(directory, recover=True)
    assert reopened.log_end_offset == 22
    assert [b.base_offset for base in reopened.segments
            for b in LogSegment(directory / f"{base:020d}.log", base).batches()][-2:] == [18, 20]
    snapshot = read_producer_snapshot(directory / "00000000000000000022.snapshot")
    assert snapshot.entries[0].last_sequence == 19
    reopened.close()


def test_truncate_below_the_log_start_starts_over(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=1000))
    fill(log, 10)
    log.delete_oldest_segment()
    log.truncate_to(log.log_start_offset - 1)
    assert log.segments == [log.log_end_offset] and log.log_start_offset == log.log_end_offset
    log.close()


def test_leader_epoch_cache_end_offsets_and_truncation(tmp_path):
    cache = LeaderEpochCache([EpochEntry(1, 0), EpochEntry(3, 10), EpochEntry(5, 30)])
    assert cache.end_offset_for(5, 42) == (5, 42)  # the latest epoch ends at the log end
    assert cache.end_offset_for(3, 42) == (3, 30)
    assert cache.end_offset_for(4, 42) == (3, 30)  # unknown epoch: the largest below it
    assert cache.end_offset_for(0, 42) == (0, 0)  # older than all: the first epoch's start
    assert cache.end_offset_for(6, 42) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert cache.end_offset_for(-1, 42) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert LeaderEpochCache().end_offset_for(0, 5) == (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert cache.latest_epoch == 5 and cache.epoch_for_offset(15) == 3
    assert not cache.assign(4, 50) and cache.assign(6, 50)
    cache.truncate_from_start(12)
    assert cache.entries == [EpochEntry(3, 12), EpochEntry(5, 30), EpochEntry(6, 50)]
    cache.truncate_from_end(50)
    assert cache.entries[-1] == EpochEntry(6, 50)  # recovery keeps an epoch starting at the end
    cache.truncate_from_end(50, keep_at_end=False)
    assert cache.entries[-1] == EpochEntry(5, 30)
    cache.path = tmp_path / "leader-epoch-checkpoint"
    cache.flush()
    assert LeaderEpochCache.load(tmp_path).entries == cache.entries


def test_retention_by_time_size_and_log_start(tmp_path):
    config = LogConfig(segment_bytes=1000, retention_bytes=2500, retention_ms=10**12)
    log = PartitionLog(tmp_path / "t-0", config=config)
    fill(log, 20)
    sizes = [log.segment_stats(b)[0] for b in log.segments]
    done = log.delete_retention_breached(now_ms=T0)
    assert {reason for _base, reason, _files in done} == {"size"}
    assert sum(log.segment_stats(b)[0] for b in log.segments) < 2500 + max(sizes)
    by_time = log.replace_config(config.replace(retention_bytes=-1, retention_ms=1000))
    done = by_time.delete_retention_breached(now_ms=T0 + 10**6)
    assert [reason for _b, reason, _f in done] == ["time"] * len(done) and len(log.segments) == 1
    assert log.log_start_offset == log.segments[0]
    log.close()


def test_validated_appends_roll_on_segment_ms(tmp_path):
    from kcli.storage.validator import validate_records

    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_ms=1000))
    for ts in (T0, T0 + 1000, T0 + 1001):
        raw = build_record_batch([Record(0, ts, b"k", b"v")])
        log.append_validated(validate_records(raw, log.config, log_end_offset=log.log_end_offset, leader_epoch=0,
                                              producer_state=log.producer_state, now_ms=ts))
    assert log.segments == [0, 2]  # the third batch is more than segment.ms after the segment's first
    log.close()


def test_loader_cleans_leftovers_after_a_clean_shutdown(tmp_path):
    from kcli.storage.loader import LogLoader

    directory = tmp_path / "logs" / "t-0"
    with PartitionLog(directory, config=LogConfig(segment_bytes=1000)) as log:
        fill(log, 10, pid=3)
    (directory / "00000000000000000000.log.cleaned").write_bytes(b"partial")
    (directory / "00000000000000000000.index.tmp").write_bytes(b"")
    loaded = LogLoader(directory, recover=False, quarantine=tmp_path / "quarantine").load()
    assert not list(directory.glob("*.cleaned")) and not list(directory.glob("*.tmp"))
    assert loaded.recovery is not None and (tmp_path / "quarantine" / "manifest.json").exists()
    assert loaded.log_end_offset == 20 and loaded.producer_state.producers[3].last_sequence == 19
    loaded.active.close()
    untouched = LogLoader(directory, recover=False).load()
    assert untouched.recovery is None
    untouched.active.close()


def test_legacy_offsets_before_answers_segment_bases_by_modification_time(tmp_path):
    """ListOffsets v0 (Kafka's UnifiedLog.legacyFetchOffsetsBefore): segment base offsets whose file was last
    modified at or before the time, plus the log end (at now) while the active segment holds data."""
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(segment_bytes=1000))
    assert log.legacy_offsets_before(-1, 10, now_ms=T0) == [0]  # empty: the active segment's base, no log end
    fill(log, 12)
    bases = log.segments
    assert len(bases) >= 3 and log.log_segments[-1].size > 0
    for i, segment in enumerate(log.log_segments):  # segment i last modified at second i
        os.utime(segment.log_path, (T0 / 1000 + i, T0 / 1000 + i))
    now = T0 + 3_600_000
    end = log.log_end_offset
    newest_first = [end, *reversed(bases)]
    assert log.legacy_offsets_before(-1, 100, now_ms=now) == newest_first
    assert log.legacy_offsets_before(-1, 2, now_ms=now) == newest_first[:2]
    assert log.legacy_offsets_before(-2, 100, now_ms=now) == [0]
    assert log.legacy_offsets_before(T0 + 1000, 100, now_ms=now) == [bases[1], bases[0]]
    assert log.legacy_offsets_before(T0 + 1999, 1, now_ms=now) == [bases[1]]
    assert log.legacy_offsets_before(T0 - 1, 100, now_ms=now) == []  # older than every segment
    assert log.legacy_offsets_before(now, 100, now_ms=now) == newest_first
    assert log.legacy_offsets_before(-1, 0, now_ms=now) == []
    log.log_start_offset = bases[0] + 1  # a DeleteRecords inside the first segment: its entry is the log start
    assert log.legacy_offsets_before(-2, 100, now_ms=now) == [bases[0] + 1]
    log.close()


def _open_fds(directory: Path) -> int:
    """This process's descriptors of files under ``directory`` (other threads of a test worker open and close
    their own meanwhile: counting all of them made the test fail now and then)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(directory) + os.sep)
    return count


def test_a_new_segment_opens_its_indexes_on_first_use(tmp_path):
    """Kafka's LazyIndex: a new segment's .index and .timeindex exist (empty) but are opened and mapped only
    when an entry is due, so a partition that never got index.interval.bytes holds one file descriptor (the
    .log) instead of five; the close trims and keeps what was written as before."""
    before = _open_fds(tmp_path)
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(index_interval_bytes=1000))
    index = tmp_path / "t-0" / "00000000000000000000.index"
    time_index = tmp_path / "t-0" / "00000000000000000000.timeindex"
    assert _open_fds(tmp_path) == before + 1
    assert index.stat().st_size == 0 and time_index.stat().st_size == 0
    fill(log, 4)  # ~500 bytes: no entry due yet
    assert _open_fds(tmp_path) == before + 1
    fill(log, 10)
    assert _open_fds(tmp_path) == before + 5 and log.segment.indexes.index.entry_count > 0
    entries = list(log.segment.indexes.index.entries())
    log.close()
    assert _open_fds(tmp_path) == before
    reopened = PartitionLog.open(tmp_path / "t-0", config=LogConfig(index_interval_bytes=1000))
    assert reopened.recovery is None and list(reopened.segment.indexes.index.entries()) == entries
    reopened.close()


def test_an_empty_log_closes_with_empty_indexes_and_reopens_clean(tmp_path):
    log = PartitionLog(tmp_path / "t-0", config=LogConfig())
    log.close()
    assert (tmp_path / "t-0" / "00000000000000000000.index").stat().st_size == 0
    reopened = PartitionLog.open(tmp_path / "t-0", config=LogConfig())
    assert reopened.recovery is None and reopened.log_end_offset == 0
    reopened.close()


def test_close_handlers_releases_every_file_without_writing(tmp_path):
    before = _open_fds(tmp_path)
    log = PartitionLog(tmp_path / "t-0", config=LogConfig(index_interval_bytes=100))
    fill(log, 10)
    log.roll()
    fill(log, 10)
    assert _open_fds(tmp_path) > before
    log.close_handlers()
    assert _open_fds(tmp_path) == before
    assert not (tmp_path / "t-0" / "leader-epoch-checkpoint").exists()  # a clean close would have written it
