"""What a broker's startup reads (kcli.storage.loader through kcli.broker.log_manager.LogManager).

After a clean shutdown no segment below the log end is read and no inactive segment's index is opened; after
an unclean one only the segments from each partition's recovery point on are, and whatever is torn there is
still cut. The files opened are counted by wrapping os.open and open, on a real log dir."""

from __future__ import annotations

import builtins
import os
import struct
from pathlib import Path

import pytest

from kcli.broker.log_manager import LogManager
from kcli.records import Record
from kcli.records.batch import build_record_batch
from kcli.storage.checkpoint import OffsetCheckpointFile
from kcli.storage.files import CLEAN_SHUTDOWN, RECOVERY_POINT_CHECKPOINT
from kcli.storage.index import OffsetIndex, TimeIndex
from kcli.storage.log import LogConfig, PartitionLog

T0 = 1_700_000_000_000
PARTITIONS = 3
BATCHES = 40  # of 4 records of ~300 bytes: about 1.2 KiB each, segments of 4 KiB


def _batch(offset: int) -> bytes:
    return build_record_batch([Record(offset + i, T0 + offset + i, f"k{offset + i}".encode(), b"v" * 300)
                               for i in range(4)], base_offset=offset)


def _manager(log_dir: Path) -> LogManager:
    return LogManager([log_dir], broker_id=0, log_config=LogConfig(segment_bytes=4096, index_interval_bytes=1024))


@pytest.fixture
def log_dir(tmp_path) -> Path:
    """A log dir a broker stopped cleanly: PARTITIONS partitions of several segments each."""
    log_dir = tmp_path / "logs"
    manager = _manager(log_dir)
    manager.startup()
    manager.create_topic("t", PARTITIONS)
    for p in manager.topics["t"].partitions:
        for i in range(BATCHES):
            p.log.append_raw(_batch(4 * i))
    manager.shutdown()
    assert len(list((log_dir / "t-0").glob("*.log"))) >= 5
    return log_dir


class _Opened:
    """Paths opened (os.open and open) while active, relative to the log dir."""

    def __init__(self, monkeypatch, log_dir: Path) -> None:
        self.paths: list[str] = []
        real_os_open, real_open = os.open, builtins.open

        def os_open(path, *args, **kwargs):
            self._note(path)
            return real_os_open(path, *args, **kwargs)

        def open_(file, *args, **kwargs):
            if isinstance(file, (str, os.PathLike)):
                self._note(file)
            return real_open(file, *args, **kwargs)

        self.root = log_dir.resolve()
        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr(builtins, "open", open_)

    def _note(self, path) -> None:
        path = Path(os.fsdecode(path)).resolve()
        if path.is_relative_to(self.root):
            self.paths.append(str(path.relative_to(self.root)))

    def segment_files(self, partition: str, *suffixes: str) -> set[str]:
        return {p for p in self.paths if p.startswith(partition + "/") and p.endswith(suffixes)}


def _segments(log_dir: Path, partition: str) -> list[str]:
    return sorted(p.name for p in (log_dir / partition).glob("*.log"))


def test_a_clean_start_reads_no_inactive_segment(log_dir, monkeypatch):
    ends = {p: OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read_offsets()[("t", int(p[-1]))]
            for p in ("t-0", "t-1", "t-2")}
    opened = _Opened(monkeypatch, log_dir)
    manager = _manager(log_dir)
    manager.startup()
    monkeypatch.undo()
    for partition in ("t-0", "t-1", "t-2"):
        active = _segments(log_dir, partition)[-1]
        assert opened.segment_files(partition, ".log") == {f"{partition}/{active}"}
        stem = active[: -len(".log")]
        assert opened.segment_files(partition, ".index", ".timeindex") == {
            f"{partition}/{stem}.index", f"{partition}/{stem}.timeindex"}
        log = manager.partition("t", int(partition[-1])).log
        assert log.log_end_offset == ends[partition] == 4 * BATCHES
        assert log.recovery_point == log.log_end_offset  # a clean load: everything is on disk
    # reads still work through the lazily opened indexes of the inactive segments
    log = manager.partition("t", 1).log
    found = log.read(9, 1 << 20)
    assert found is not None and found.read()[:8] == struct.pack(">q", 8)
    manager.shutdown()


def test_an_unclean_start_validates_from_the_recovery_point_and_cuts_a_torn_tail(log_dir, monkeypatch):
    """After a clean stop the recovery points are the log ends; appends after a restart and then a crash: the
    restart validates the active segments only (the ones above the recovery point), and a torn write there is
    cut. A partition without a checkpoint entry is validated whole."""
    manager = _manager(log_dir)
    manager.startup()
    for p in manager.topics["t"].partitions:
        for i in range(BATCHES, BATCHES + 3):
            p.log.append_raw(_batch(4 * i))
        p.log.flush_to_os()
    torn_segment = _segments(log_dir, "t-1")[-1]
    # SIGKILL: no close, no checkpoint, no marker; the checkpoint on disk is the clean stop's
    assert not (log_dir / CLEAN_SHUTDOWN).exists()
    for fd in manager._locks:
        os.close(fd)
    with open(log_dir / "t-1" / torn_segment, "ab") as out:
        out.write(_batch(4 * (BATCHES + 3))[:50])
    points = OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read_offsets()
    del points[("t", 2)]  # t-2 crashed before its first checkpoint
    OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).write_offsets(points)

    opened = _Opened(monkeypatch, log_dir)
    restarted = _manager(log_dir)
    restarted.startup()
    monkeypatch.undo()
    below = [s for s in _segments(log_dir, "t-0") if int(s[:20]) <= 4 * BATCHES]
    validated = {f"t-0/{s}" for s in _segments(log_dir, "t-0")[len(below) - 1:]}
    assert opened.segment_files("t-0", ".log") == validated  # from the segment holding the recovery point on
    assert opened.segment_files("t-2", ".log") == {f"t-2/{s}" for s in _segments(log_dir, "t-2")}  # all
    (run,) = restarted.recoveries
    assert [r.plan.partition_dir.name for r in run.results] == ["t-1"]
    (cut,) = [a for a in run.results[0].plan.actions if a.kind.value == "truncate"]
    assert cut.file.name == torn_segment and cut.bytes == 50
    for index, partition in enumerate(("t-0", "t-1", "t-2")):
        log = restarted.partition("t", index).log
        assert log.log_end_offset == 4 * (BATCHES + 3)
        # Kafka: after recovery the recovery point stays (at most the log end) until the next flush
        assert log.recovery_point == (4 * BATCHES if partition != "t-2" else 0)
    restarted.shutdown()
    assert OffsetCheckpointFile(log_dir / RECOVERY_POINT_CHECKPOINT).read_offsets()[("t", 2)] == 4 * (BATCHES + 3)


def test_the_recovery_point_follows_flushes_rolls_and_truncations(tmp_path):
    manager = _manager(tmp_path / "logs")
    manager.startup()
    manager.create_topic("t", 1)
    managed = manager.partition("t", 0)
    log = managed.log
    log.append_raw(_batch(0))
    assert log.recovery_point == 0  # appended, not flushed
    manager.write_checkpoints()
    assert OffsetCheckpointFile(tmp_path / "logs" / RECOVERY_POINT_CHECKPOINT).read_offsets() == {("t", 0): 0}
    manager.flush(managed)
    assert log.recovery_point == 4
    for i in range(1, 8):
        log.append_raw(_batch(4 * i))
    assert len(log.segments) > 1
    # a broker's roll does not fsync (Kafka 3.6+, KAFKA-15046): the rolled segments wait for the flush its
    # housekeeping runs at once, and the recovery point with them
    assert log.recovery_point == 4 and len(log.unflushed_inactive()) == len(log.segments) - 1
    assert manager.flush_due(managed)
    manager.flush(managed)
    assert log.recovery_point == log.log_end_offset and log.unflushed_inactive() == []
    manager.truncate_to(managed, 6)
    assert log.recovery_point == 4  # the batch holding offset 6 goes whole: the log ends at 4
    # Kafka checkpoints a lowered recovery point at once
    assert OffsetCheckpointFile(tmp_path / "logs" / RECOVERY_POINT_CHECKPOINT).read_offsets() == {("t", 0): 4}
    manager.shutdown()
    assert OffsetCheckpointFile(tmp_path / "logs" / RECOVERY_POINT_CHECKPOINT).read_offsets() == {
        ("t", 0): log.log_end_offset}


def test_a_crash_keeps_the_active_preallocated_indexes_when_they_agree(tmp_path):
    """Kafka's broker trims an active segment's preallocated indexes, it does not rebuild them; the max
    timestamp comes back from the batches after the last index entry."""
    directory = tmp_path / "t-0"
    log = PartitionLog(directory, config=LogConfig(index_interval_bytes=1024))
    for i in range(20):
        log.append_raw(_batch(4 * i))
    log.flush_to_os()
    entries = list(log.segment.indexes.index.entries())
    assert entries and (directory / "00000000000000000000.index").stat().st_size == 10 << 20
    reopened = PartitionLog.open(directory, config=LogConfig(index_interval_bytes=1024))
    assert reopened.recovery is None
    assert list(reopened.segment.indexes.index.entries()) == entries
    assert reopened.segment.indexes.indexer.max_timestamp == T0 + 79
    assert reopened.log_end_offset == 80
    reopened.close()
    with OffsetIndex(directory / "00000000000000000000.index") as index:
        assert list(index.entries()) == entries and not index.is_preallocated
    with TimeIndex(directory / "00000000000000000000.timeindex") as tindex:
        assert tindex.last_entry.timestamp == T0 + 79


def test_a_crash_before_the_first_index_entry_rebuilds_rather_than_keeps(tmp_path):
    """Batches below index.interval.bytes leave the preallocated indexes all zeros: slot 0 then reads as an entry
    (offset base, position 0 / timestamp 0) that the log does not back. Such indexes are rebuilt, and verify is
    clean after the broker's reopen (found by test_failures' kill -9 run)."""
    from kcli.tools.verify import verify

    directory = tmp_path / "t-0"
    log = PartitionLog(directory, config=LogConfig(index_interval_bytes=1 << 20))
    for i in range(3):
        log.append_raw(_batch(4 * i))
    log.flush_to_os()
    assert not any((directory / "00000000000000000000.timeindex").read_bytes()[:12])
    reopened = PartitionLog.open(directory, config=LogConfig(index_interval_bytes=1 << 20))
    assert reopened.log_end_offset == 12
    assert list(reopened.segment.indexes.time_index.entries()) in ([], [(T0 + 11, 8)])
    reopened.close()
    report = verify([str(directory)])
    assert report.is_clean(), [p.reason for p in report.problems]
