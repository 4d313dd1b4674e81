from __future__ import annotations

from pathlib import Path

import pytest

from support import FIXTURES
from hypothesis import given
from hypothesis import strategies as st

from kcli.errors import InputError
from kcli.storage import files
from kcli.storage.files import FileKind, classify

ZK_LOG_DIR = FIXTURES / "VolodymyrZee__kafka"
KRAFT_LOG_DIR = FIXTURES / "rjmfernandes__flink-on-prem" / "data"
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/kafka-fixtures is absent")

UUID_HEX = "0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize(
    ("offset", "prefix"),
    [(0, "00000000000000000000"), (368769, "00000000000000368769"), (2**63 - 1, "09223372036854775807")],
)
def test_filename_prefix_is_20_zero_padded_digits(offset, prefix):
    assert files.filename_prefix_from_offset(offset) == prefix


def test_filename_prefix_rejects_negative_offsets():
    with pytest.raises(ValueError):
        files.filename_prefix_from_offset(-1)


@pytest.mark.parametrize(
    ("name", "offset"),
    [
        ("00000000000000368769.index", 368769),
        ("00000000000000000000.log.swap", 0),  # text before the *first* dot
        ("00000000000000017204.snapshot", 17204),
        ("123.log", 123),
    ],
)
def test_offset_from_filename(name, offset):
    assert files.offset_from_filename(name) == offset


@pytest.mark.parametrize("name", ["leader-epoch-checkpoint", "abc.log", ".log", "-1.log", "00000000000000007752-0000000001.checkpoint"])
def test_offset_from_filename_rejects_names_without_offset(name):
    with pytest.raises(InputError) as info:
        files.offset_from_filename(name)
    assert info.value.path == name


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_filename_prefix_round_trips(offset):
    name = files.filename_prefix_from_offset(offset) + files.TIME_INDEX_SUFFIX
    assert len(name.split(".")[0]) >= 20
    assert files.offset_from_filename(name) == offset


def test_segment_path_and_temp_suffixes(tmp_path):
    swap = files.segment_path(tmp_path, 1234, files.LOG_SUFFIX + files.SWAP_SUFFIX)
    assert swap == tmp_path / "00000000000000001234.log.swap"
    assert files.strip_temp_suffix(swap.name) == "00000000000000001234.log"
    assert files.strip_temp_suffix("00000000000000001234.index.cleaned") == "00000000000000001234.index"
    assert files.strip_temp_suffix("00000000000000001234.index") == "00000000000000001234.index"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("__consumer_offsets-12", ("__consumer_offsets", 12)),
        ("my-topic-3", ("my-topic", 3)),  # split at the last dash
        ("a.b_c-0", ("a.b_c", 0)),
        (f"my-topic-3.{UUID_HEX}-delete", ("my-topic", 3)),
        (f"orders-0.{UUID_HEX}-future", ("orders", 0)),
        (f"orders-7.{UUID_HEX}-stray", ("orders", 7)),
        ("orders", None),
        ("orders-", None),
        ("-0", None),
        ("orders-x", None),
        ("orders-0-delete", None),  # marker suffix without the `.<uuid>` part
        ("orders-2147483648", None),  # partition must fit an int
        ("bench", None),
    ],
)
def test_parse_partition_dir_name(name, expected):
    assert files.parse_partition_dir_name(name) == expected


def test_partition_dir_marker():
    assert files.partition_dir_marker(f"t-0.{UUID_HEX}-delete") == "-delete"
    assert files.partition_dir_marker(f"t-0.{UUID_HEX}-future") == "-future"
    assert files.partition_dir_marker("t-0") is None


@given(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCXYZ0123456789._-", min_size=1, max_size=60),
    st.integers(min_value=0, max_value=2**31 - 1),
    st.sampled_from(["", f".{UUID_HEX}-delete", f".{UUID_HEX}-future", f".{UUID_HEX}-stray"]),
)
def test_partition_dir_name_round_trips(topic, partition, marker):
    assert files.parse_partition_dir_name(f"{topic}-{partition}{marker}") == (topic, partition)


def test_kraft_snapshot_names():
    assert files.kraft_snapshot_offset_epoch("00000000000000007752-0000000001.checkpoint") == (7752, 1)
    assert files.kraft_snapshot_offset_epoch("00000000000000007752-0000000001.checkpoint.part") == (7752, 1)
    assert files.kraft_snapshot_offset_epoch(files.BOOTSTRAP_CHECKPOINT) is None
    assert files.kraft_snapshot_offset_epoch("00000000000000007752.checkpoint") is None
    assert files.kraft_snapshot_name(14926, 1) == "00000000000000014926-0000000001.checkpoint"


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("00000000000000000000.log", FileKind.LOG),
        ("00000000000000000000.index", FileKind.INDEX),
        ("00000000000000000000.timeindex", FileKind.TIME_INDEX),
        ("00000000000000000000.txnindex", FileKind.TXN_INDEX),
        ("00000000000000017204.snapshot", FileKind.PRODUCER_SNAPSHOT),
        ("00000000000000007752-0000000001.checkpoint", FileKind.KRAFT_CHECKPOINT),
        ("bootstrap.checkpoint", FileKind.KRAFT_CHECKPOINT),
        ("leader-epoch-checkpoint", FileKind.LEADER_EPOCH_CHECKPOINT),
        ("recovery-point-offset-checkpoint", FileKind.OFFSET_CHECKPOINT),
        ("replication-offset-checkpoint", FileKind.OFFSET_CHECKPOINT),
        ("log-start-offset-checkpoint", FileKind.OFFSET_CHECKPOINT),
        ("cleaner-offset-checkpoint", FileKind.OFFSET_CHECKPOINT),
        ("partition.metadata", FileKind.PARTITION_METADATA),
        ("meta.properties", FileKind.META_PROPERTIES),
        (".kafka_cleanshutdown", FileKind.CLEAN_SHUTDOWN),
        ("quorum-state", FileKind.QUORUM_STATE),
        (".lock", FileKind.LOCK),
        ("00000000000000000000.log.deleted", FileKind.DELETED),
        ("00000000000000000000.index.cleaned", FileKind.CLEANED),
        ("00000000000000000000.timeindex.swap", FileKind.SWAP),
        ("00000000000000007752-0000000001.checkpoint.deleted", FileKind.DELETED),
        ("00000000000000007752-0000000001.checkpoint.part", FileKind.UNKNOWN),
        ("recovery-point-offset-checkpoint.tmp", FileKind.UNKNOWN),
        ("00000000000000000000.txt", FileKind.UNKNOWN),
        ("foo.log", FileKind.UNKNOWN),
        ("README.md", FileKind.UNKNOWN),
    ],
)
def test_classify(name, kind):
    assert classify(Path("/some/dir") / name) is kind


@needs_fixtures
def test_every_fixture_file_is_known():
    kinds = {path.relative_to(FIXTURES).as_posix(): classify(path) for root in (ZK_LOG_DIR, KRAFT_LOG_DIR)
             for path in root.rglob("*") if path.is_file()}
    assert [name for name, kind in kinds.items() if kind is FileKind.UNKNOWN] == []
    assert kinds["rjmfernandes__flink-on-prem/data/__cluster_metadata-0/00000000000000014926-0000000001.checkpoint"] \
        is FileKind.KRAFT_CHECKPOINT
    assert kinds["VolodymyrZee__kafka/.kafka_cleanshutdown"] is FileKind.CLEAN_SHUTDOWN
    counts = {kind: sum(1 for k in kinds.values() if k is kind) for kind in FileKind}
    assert counts[FileKind.LOG] == 24
    assert counts[FileKind.OFFSET_CHECKPOINT] == 8
    assert counts[FileKind.PARTITION_METADATA] == 14
    assert counts[FileKind.KRAFT_CHECKPOINT] == 3


@needs_fixtures
def test_partition_and_log_dirs_in_fixtures():
    assert files.is_log_dir(ZK_LOG_DIR)
    assert files.is_log_dir(KRAFT_LOG_DIR)
    partitions = sorted(p.name for p in KRAFT_LOG_DIR.iterdir() if files.is_partition_dir(p))
    assert len(partitions) == 14
    assert "__cluster_metadata-0" in partitions
    assert files.is_partition_dir(ZK_LOG_DIR / "first_topic-2")
    assert not files.is_log_dir(ZK_LOG_DIR / "first_topic-2")
    assert not files.is_partition_dir(ZK_LOG_DIR / "meta.properties")
    assert not files.is_log_dir(FIXTURES)


def test_is_log_dir_on_synthetic_dirs(tmp_path):
    assert not files.is_log_dir(tmp_path)
    (tmp_path / "orders-0").mkdir()
    assert files.is_log_dir(tmp_path)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / files.META_PROPERTIES).write_text("version=1\n")
    assert files.is_log_dir(fresh)
    assert not files.is_log_dir(tmp_path / "missing")


def test_write_atomically_leaves_no_temp_file(tmp_path):
    target = tmp_path / files.RECOVERY_POINT_CHECKPOINT
    target.write_bytes(b"old")
    files.write_atomically(target, b"0\n0\n")
    assert target.read_bytes() == b"0\n0\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [files.RECOVERY_POINT_CHECKPOINT]
