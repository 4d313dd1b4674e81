"""Kafka 0.7's log layout: byte offsets, contiguous .kafka segments, the flushed high water mark, recovery of the
last segment, retention by age and size, getOffsetsBefore, and partition checks of the log manager."""

from __future__ import annotations

import os

import pytest

from kcli.records.compression import Codec
from kcli.records.message07 import build_message_set, encode_message
from kcli.storage.log07 import (
    CorruptLog07Error,
    InvalidFetchSizeError07,
    InvalidMessageError07,
    Log07,
    Log07Config,
    LogManager07,
    LogManager07Config,
    OffsetOutOfRangeError07,
    WrongPartitionError07,
)


M = len(encode_message(b"a"))  # 11: size 4, magic 1, attributes 1, crc 4, one byte


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _log(tmp_path, **config) -> Log07:
    return Log07(tmp_path / "t-0", Log07Config(**{"flush_interval_messages": 1, **config}))


def test_appends_land_at_byte_offsets_in_20_digit_segments(tmp_path):
    first, second = encode_message(b"0123456789"), encode_message(b"abcdefghijklmnopqrstuvwxyz")
    log = _log(tmp_path, segment_bytes=len(first) + 1)
    assert log.append(first) == 0  # 20 bytes: not past the segment size, no roll
    assert log.append(second) == len(first)  # now past it: the segment rolls after this append
    assert log.append(first) == len(first) + len(second)
    names = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    assert names == ["00000000000000000000.kafka", f"{len(first) + len(second):020d}.kafka"]
    assert log.read(len(first), 1000) == second  # a read stays within the segment holding the offset
    assert log.read(0, len(first) + len(second) - 1) == first
    log.close()


def test_reads_see_only_flushed_data(tmp_path):
    log = _log(tmp_path, flush_interval_messages=2)
    log.append(encode_message(b"a"))
    assert log.high_watermark == 0 and log.log_end_offset == M
    assert log.read(0, 100) == b""
    log.append(encode_message(b"b"))
    assert log.high_watermark == 2 * M and len(log.read(0, 100)) == 2 * M
    log.close()


def test_read_errors(tmp_path):
    log = _log(tmp_path)
    log.append(build_message_set([b"x" * 20, b"y"]))
    with pytest.raises(OffsetOutOfRangeError07):
        log.read(10_000, 100)
    with pytest.raises(InvalidMessageError07):
        log.read(2, 100)
    with pytest.raises(InvalidFetchSizeError07):
        log.read(0, 10)
    with pytest.raises(InvalidFetchSizeError07):
        log.read(0, -1)
    assert log.read(log.high_watermark, 100) == b""
    log.close()


def test_append_refuses_invalid_sets_whole(tmp_path):
    log = _log(tmp_path)
    for bad in (encode_message(b"ok") + encode_message(b"bad", crc=1), encode_message(b"torn")[:-1],
                encode_message(b"\x00" * 8, magic=1, codec=Codec.GZIP)):
        with pytest.raises(InvalidMessageError07):
            log.append(bad)
    assert log.log_end_offset == 0
    log.close()


def test_recovery_truncates_after_the_last_valid_message(tmp_path):
    log = _log(tmp_path, segment_bytes=1 << 20)
    kept = build_message_set([b"one", b"two"])
    log.append(kept)
    log.close()
    segment = tmp_path / "t-0" / "00000000000000000000.kafka"
    with segment.open("ab") as f:
        f.write(encode_message(b"bad-crc", crc=7) + encode_message(b"after"))
    reopened = Log07(tmp_path / "t-0", Log07Config(), recover=True)
    assert segment.read_bytes() == kept
    assert reopened.recovery is not None and reopened.recovery.truncated_bytes > 0
    assert "CRC mismatch" in reopened.recovery.reason
    assert reopened.log_end_offset == len(kept)
    reopened.close()


def test_segments_that_do_not_add_up_refuse_to_open(tmp_path):
    directory = tmp_path / "t-0"
    directory.mkdir()
    (directory / "00000000000000000000.kafka").write_bytes(encode_message(b"a"))
    (directory / "00000000000000000100.kafka").write_bytes(encode_message(b"b"))
    with pytest.raises(CorruptLog07Error, match="do not validate"):
        Log07(directory, Log07Config())


def test_offsets_before(tmp_path):
    clock = Clock()
    log = Log07(tmp_path / "t-0", Log07Config(segment_bytes=M - 1, flush_interval_messages=1), clock=clock)
    for payload in (b"a", b"b", b"c"):
        log.append(encode_message(payload))
    starts = [s.start for s in log.segments]  # each append rolls; the last segment is empty: no end entry
    assert starts == [0, M, 2 * M, 3 * M]
    assert log.offsets_before(-1, 10) == [3 * M, 2 * M, M, 0]
    assert log.offsets_before(-2, 10) == [0]
    assert log.offsets_before(-1, 2) == [3 * M, 2 * M]
    for segment, mtime in zip(log.segments, (100, 200, 300, 400)):
        os.utime(segment.path, (mtime, mtime))
    assert log.offsets_before(250_000, 10) == [M, 0]  # segments modified at or before 250 s
    assert log.offsets_before(50_000, 10) == []
    log.close()


def test_retention_by_age_and_size_keeps_a_segment(tmp_path):
    clock = Clock()
    log = Log07(tmp_path / "t-0", Log07Config(segment_bytes=M - 1, flush_interval_messages=1, retention_ms=1000),
                clock=clock)
    for payload in (b"a", b"b"):
        log.append(encode_message(payload))
    for segment in log.segments:
        os.utime(segment.path, (clock.now - 10, clock.now - 10))
    deleted = log.delete_old_segments()
    assert len(deleted) == 2 and len(log.segments) == 1  # the empty active segment stays
    assert log.log_start_offset == 2 * M == log.log_end_offset  # a fresh segment where the log ended
    with pytest.raises(OffsetOutOfRangeError07):
        log.read(0, 100)
    log.close()
    sized = Log07(tmp_path / "u-0", Log07Config(segment_bytes=M - 1, flush_interval_messages=1,
                                                 retention_bytes=M + 1), clock=clock)
    for payload in (b"a", b"b", b"c"):
        sized.append(encode_message(payload))
    sized.delete_old_segments()
    assert sized.size_in_bytes == 2 * M and sized.log_start_offset == M  # never below the retention size
    sized.close()


def test_the_log_manager_checks_partitions_and_recovers_after_an_unclean_stop(tmp_path):
    created = []
    manager = LogManager07(tmp_path, LogManager07Config(num_partitions=2, topic_partitions={"big": 5}),
                           topic_created=created.append)
    manager.startup()
    manager.get_or_create("t", 1).append(encode_message(b"x"))
    manager.get_or_create("big", 4)
    with pytest.raises(WrongPartitionError07):
        manager.get_or_create("t", 2)
    with pytest.raises(WrongPartitionError07):
        manager.get_or_create("t", -1)
    assert created == ["t", "big"]
    manager.shutdown()
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    again = LogManager07(tmp_path, LogManager07Config(num_partitions=2))
    again.startup()
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # an unclean stop from here on is recovered
    assert again.topics() == ["big", "t"] and again.get_or_create("t", 1).log_end_offset == M
    again.shutdown()


@pytest.mark.parametrize("topic", ["", ".", "..", "a/b", "../up"])
def test_topic_names_that_are_no_directory_name_are_refused(tmp_path, topic):
    from kcli.storage.log07 import InvalidTopicError07

    manager = LogManager07(tmp_path / "k07", LogManager07Config())
    manager.startup()
    with pytest.raises(InvalidTopicError07):
        manager.get_or_create(topic, 0)
    assert not (tmp_path / "up-0").exists()
    manager.shutdown()
