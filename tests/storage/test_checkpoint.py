from __future__ import annotations

import os
import re
import tempfile
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from support import FIXTURES, index_md_findings
from hypothesis import given
from hypothesis import strategies as st

from kcli.errors import CorruptCheckpointError, InputError
from kcli.storage import files
from kcli.storage.checkpoint import (
    CleanShutdown,
    EpochEntry,
    LeaderEpochCheckpointFile,
    MetaProperties,
    OffsetCheckpointFile,
    QuorumState,
    format_java_properties,
    parse_java_properties,
    read_clean_shutdown,
    read_meta_properties,
    read_partition_metadata,
    read_quorum_state,
    uuid_from_base64,
    uuid_to_base64,
    write_clean_shutdown,
    write_meta_properties,
    write_partition_metadata,
)

SOURCES = ("VolodymyrZee__kafka", "rjmfernandes__flink-on-prem")
ZK = FIXTURES / "VolodymyrZee__kafka"
KRAFT = FIXTURES / "rjmfernandes__flink-on-prem" / "data"
needs_fixtures = pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/kafka-fixtures is absent")


FINDINGS = index_md_findings()


def _files(name: str) -> list[Path]:
    return sorted(p for s in SOURCES for p in (FIXTURES / s).rglob(name)) if FIXTURES.is_dir() else []


def _finding(path: Path) -> str:
    return FINDINGS[path.parent.relative_to(FIXTURES).as_posix() + "/"][path.name]


def _quoted(finding: str) -> str:
    """The '...' file content INDEX.md quotes, with its `\\n` escapes."""
    return re.match(r"'(.*)'", finding)[1].replace("\\n", "\n")


def _ids(path: Path) -> str:
    return path.relative_to(FIXTURES).as_posix()


# -- offset checkpoints ----------------------------------------------------------------------------------

ROOT_CHECKPOINTS = [p for name in sorted(files.OFFSET_CHECKPOINTS) for p in _files(name)]


@needs_fixtures
def test_fixture_inventory_is_complete():
    assert len(ROOT_CHECKPOINTS) == 8
    assert len(_files(files.LEADER_EPOCH_CHECKPOINT)) == 24
    assert len(_files(files.PARTITION_METADATA)) == 14


@needs_fixtures
@pytest.mark.parametrize("path", ROOT_CHECKPOINTS, ids=_ids)
def test_offset_checkpoint_fixture_matches_index_md(path, tmp_path):
    finding = _finding(path)
    offsets = OffsetCheckpointFile(path).read_offsets()
    if finding == "0 bytes":
        assert path.stat().st_size == 0 and offsets == {}
        return
    count, example = re.match(r"version 0, (\d+) entries, e\.g\. '(.*)'", finding).groups()
    assert len(offsets) == int(count)
    if example:
        topic, partition, offset = example.split()
        assert offsets[(topic, int(partition))] == int(offset)
    # Rewriting the parsed entries reproduces Kafka's bytes: entry order is kept.
    copy = OffsetCheckpointFile(tmp_path / path.name)
    copy.write_offsets(offsets)
    assert copy.path.read_bytes() == path.read_bytes()
    assert list(tmp_path.iterdir()) == [copy.path]  # the .tmp file was renamed away


@needs_fixtures
@pytest.mark.parametrize("log_dir", [ZK, KRAFT], ids=["zk", "kraft"])
def test_recovery_points_match_producer_snapshots(log_dir):
    # Both brokers shut down cleanly: every partition's recovery point and high watermark equal its log end
    # offset, which is also the offset its last producer snapshot is named after.
    recovery = OffsetCheckpointFile(log_dir / files.RECOVERY_POINT_CHECKPOINT).read_offsets()
    replication = OffsetCheckpointFile(log_dir / files.REPLICATION_OFFSET_CHECKPOINT).read_offsets()
    checked = 0
    for snapshot in log_dir.glob("*/*.snapshot"):
        partition = files.parse_partition_dir_name(snapshot.parent.name)
        if partition[0] == "__cluster_metadata":
            assert partition not in recovery  # the KRaft metadata log is not in the broker's checkpoints
            continue
        assert recovery[partition] == replication[partition] == files.offset_from_filename(snapshot.name)
        checked += 1
    assert checked >= 9


@needs_fixtures
def test_kraft_log_start_offsets():
    offsets = OffsetCheckpointFile(KRAFT / files.LOG_START_OFFSET_CHECKPOINT).read_offsets()
    assert offsets == {
        ("_confluent-controlcenter-7-6-0-1-aggregatedTopicPartitionTableWindows-ONE_MINUTE-repartition", 0): 1734,
        ("_confluent-controlcenter-7-6-0-1-aggregatedTopicPartitionTableWindows-THREE_HOURS-repartition", 0): 1734,
    }


# -- leader-epoch-checkpoint -----------------------------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("path", _files(files.LEADER_EPOCH_CHECKPOINT), ids=_ids)
def test_leader_epoch_checkpoint_fixture(path, tmp_path):
    lines = _quoted(_finding(path)).split("\n")
    assert lines[:2] == ["0", str(len(lines) - 2)]
    expected = [EpochEntry(int(a), int(b)) for a, b in (line.split() for line in lines[2:])]
    checkpoint = LeaderEpochCheckpointFile(path)
    assert checkpoint.read() == expected
    copy = LeaderEpochCheckpointFile(tmp_path / files.LEADER_EPOCH_CHECKPOINT)
    copy.write(expected)
    assert copy.path.read_bytes() == path.read_bytes()


@needs_fixtures
def test_metadata_log_leader_epoch_is_one():
    assert LeaderEpochCheckpointFile(KRAFT / "__cluster_metadata-0" / files.LEADER_EPOCH_CHECKPOINT).read() == [
        EpochEntry(1, 0)
    ]


# -- generic CheckpointFile rules --------------------------------------------------------------------------


def _checkpoint(tmp_path: Path, text: str | bytes) -> LeaderEpochCheckpointFile:
    path = tmp_path / files.LEADER_EPOCH_CHECKPOINT
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return LeaderEpochCheckpointFile(path)


@pytest.mark.parametrize(
    ("text", "entries"),
    [
        ("", []),
        ("0\n", []),
        ("0", []),
        ("0\n2\n0 0\n3 1520\n", [EpochEntry(0, 0), EpochEntry(3, 1520)]),
        ("0\r\n1\r\n5\t\t42", [EpochEntry(5, 42)]),  # any line terminator, runs of whitespace
        ("0\n1\n7 9223372036854775807 \n", [EpochEntry(7, 2**63 - 1)]),  # Java split drops trailing empties
    ],
)
def test_checkpoint_read(tmp_path, text, entries):
    assert _checkpoint(tmp_path, text).read() == entries


def test_checkpoint_version_mismatch(tmp_path):
    checkpoint = _checkpoint(tmp_path, "1\n0\n")
    with pytest.raises(CorruptCheckpointError) as info:
        checkpoint.read()
    assert info.value.reason == (
        f"Unrecognised version:1, expected version: 0 in checkpoint file at: {os.path.abspath(checkpoint.path)}"
    )


@pytest.mark.parametrize(
    ("text", "line", "position"),
    [
        ("zero\n0\n", "zero", 0),
        ("0\n\n", "", 2),
        ("0\n1\n3\n", "3", 4),
        ("0\n1\n 3 4\n", " 3 4", 4),  # a leading empty field makes three fields
        ("0\n1\n3 x\n", "3 x", 4),
        ("0\n1\n2147483648 0\n", "2147483648 0", 4),  # epochs are ints
        ("0 \n0\n", "0 ", 0),  # Integer.parseInt does not trim
    ],
)
def test_checkpoint_malformed_line(tmp_path, text, line, position):
    checkpoint = _checkpoint(tmp_path, text)
    with pytest.raises(CorruptCheckpointError) as info:
        checkpoint.read()
    assert info.value.reason == f"Malformed line in checkpoint file [{os.path.abspath(checkpoint.path)}]: {line}"
    assert info.value.position == position


@pytest.mark.parametrize(("text", "expected", "found"), [("0\n2\n0 0\n", 2, 1), ("0\n1\n0 0\n1 5\n", 1, 2)])
def test_checkpoint_count_mismatch_either_way(tmp_path, text, expected, found):
    checkpoint = _checkpoint(tmp_path, text)
    with pytest.raises(CorruptCheckpointError) as info:
        checkpoint.read()
    assert info.value.reason == (
        f"Expected [{expected}] entries in checkpoint file [{os.path.abspath(checkpoint.path)}], "
        f"but found only [{found}]"
    )


def test_checkpoint_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError):
        LeaderEpochCheckpointFile(tmp_path / "nope").read()


def test_offset_checkpoint_write_format(tmp_path):
    checkpoint = OffsetCheckpointFile(tmp_path / files.CLEANER_OFFSET_CHECKPOINT)
    checkpoint.write_offsets({("orders", 0): 17204, ("__consumer_offsets", 49): 0})
    assert checkpoint.path.read_text() == "0\n2\norders 0 17204\n__consumer_offsets 49 0\n"
    checkpoint.write_offsets({})
    assert checkpoint.path.read_text() == "0\n0\n"
    assert checkpoint.read_offsets() == {}


@given(st.dictionaries(
    st.tuples(st.text("abcxyz._-0123", min_size=1, max_size=20), st.integers(0, 2**31 - 1)),
    st.integers(-(2**63), 2**63 - 1),
    max_size=20,
))
def test_offset_checkpoint_round_trip_property(offsets):
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = OffsetCheckpointFile(Path(tmp) / files.REPLICATION_OFFSET_CHECKPOINT)
        checkpoint.write_offsets(offsets)
        assert checkpoint.read_offsets() == offsets


# -- partition.metadata ------------------------------------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("path", _files(files.PARTITION_METADATA), ids=_ids)
def test_partition_metadata_fixture(path, tmp_path):
    text = _quoted(_finding(path))
    topic_id = re.fullmatch(r"version: 0\ntopic_id: ([A-Za-z0-9_-]{22})", text)[1]
    metadata = read_partition_metadata(path)
    assert metadata.version == 0
    assert uuid_to_base64(metadata.topic_id) == topic_id
    write_partition_metadata(tmp_path / files.PARTITION_METADATA, metadata.topic_id)
    assert (tmp_path / files.PARTITION_METADATA).read_bytes() == path.read_bytes()  # no trailing newline


@needs_fixtures
def test_metadata_topic_id_is_kafkas_reserved_one():
    # Uuid.METADATA_TOPIC_ID = new Uuid(0L, 1L)
    assert read_partition_metadata(KRAFT / "__cluster_metadata-0" / files.PARTITION_METADATA).topic_id == uuid.UUID(int=1)
    assert read_partition_metadata(KRAFT / "loyalty_levels-0" / files.PARTITION_METADATA).topic_id == uuid_from_base64(
        "WO0oNwVNRcCPB4BrgUz-LA"
    )


def _partition_metadata(tmp_path: Path, text: str) -> Path:
    path = tmp_path / files.PARTITION_METADATA
    path.write_text(text)
    return path


def test_partition_metadata_tolerates_a_trailing_newline(tmp_path):
    path = _partition_metadata(tmp_path, "version: 0\ntopic_id:   7B-J9HsITNi_ibx5MV4oqA\n")
    assert uuid_to_base64(read_partition_metadata(path).topic_id) == "7B-J9HsITNi_ibx5MV4oqA"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA", "Invalid topic ID in partition metadata file ({path})"),
        ("version: 1\ntopic_id: 7B-J9HsITNi_ibx5MV4oqA", "Unrecognized version of partition metadata file ({path}): 1"),
        ("version:0\ntopic_id: 7B-J9HsITNi_ibx5MV4oqA", "Malformed line in checkpoint file {path}: version:0"),
        ("version: zero\n", "Malformed line in checkpoint file {path}: version: zero"),
        ("version: 0\n", "Malformed line in checkpoint file {path}: null"),
        ("version: 0\ntopic_id 7B-J9HsITNi_ibx5MV4oqA", "Malformed line in checkpoint file {path}: topic_id 7B-J9HsITNi_ibx5MV4oqA"),
        ("", "Malformed line in checkpoint file {path}: null"),
    ],
)
def test_partition_metadata_errors(tmp_path, text, message):
    path = _partition_metadata(tmp_path, text)
    with pytest.raises(CorruptCheckpointError) as info:
        read_partition_metadata(path)
    assert info.value.reason == message.format(path=os.path.abspath(path))


def test_partition_metadata_rejects_bad_base64(tmp_path):
    with pytest.raises(CorruptCheckpointError, match="not URL-safe base64"):
        read_partition_metadata(_partition_metadata(tmp_path, "version: 0\ntopic_id: 7B+J9HsITNi/ibx5MV4oqA"))
    with pytest.raises(ValueError):
        write_partition_metadata(tmp_path / "x", uuid.UUID(int=0))


@given(st.uuids())
def test_uuid_base64_round_trip(value):
    text = uuid_to_base64(value)
    assert len(text) == 22 and "=" not in text
    assert uuid_from_base64(text) == value


@pytest.mark.parametrize("text", ["", "AAAA", "AAAAAAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAA!", "AAAAAAAAAAAAAAAAAAAAAAAA"])
def test_uuid_from_base64_rejects(text):
    with pytest.raises(ValueError):
        uuid_from_base64(text)


# -- meta.properties ---------------------------------------------------------------------------------------


@needs_fixtures
def test_meta_properties_fixtures():
    assert read_meta_properties(ZK / files.META_PROPERTIES) == MetaProperties(0, 0, "lRaQCIBoRh2xRKLuP9CAQg")
    assert read_meta_properties(KRAFT / files.META_PROPERTIES) == MetaProperties(1, 1, "MkU3OEVBNTcwNTJENDM2Qg")


@needs_fixtures
def test_meta_properties_written_in_properties_store_shape(tmp_path):
    fixture = (KRAFT / files.META_PROPERTIES).read_text()
    path = tmp_path / files.META_PROPERTIES
    meta = read_meta_properties(KRAFT / files.META_PROPERTIES)
    write_meta_properties(path, meta, now=datetime(2024, 4, 19, 13, 20, 44, tzinfo=timezone.utc))
    written = path.read_text()
    assert written.splitlines()[:2] == fixture.splitlines()[:2] == ["#", "#Fri Apr 19 13:20:44 UTC 2024"]
    assert sorted(written.splitlines()[2:]) == sorted(fixture.splitlines()[2:])
    assert read_meta_properties(path) == meta


def test_meta_properties_date_uses_the_zone_name():
    cdt = timezone(timedelta(hours=-5), "CDT")
    text = format_java_properties({"version": "0"}, now=datetime(2020, 4, 22, 11, 14, 59, tzinfo=cdt))
    assert text == "#\n#Wed Apr 22 11:14:59 CDT 2020\nversion=0\n"


def test_meta_properties_directory_id_round_trip(tmp_path):
    meta = MetaProperties(1, 3, "MkU3OEVBNTcwNTJENDM2Qg", uuid.UUID("e23501fa-ceac-4df2-a7b0-4257832d4540"))
    path = tmp_path / files.META_PROPERTIES
    write_meta_properties(path, meta)
    assert "directory.id=4jUB-s6sTfKnsEJXgy1FQA\n" in path.read_text()
    assert read_meta_properties(path) == meta


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version=1\nnode.id=1\n", "cluster.id was not found."),
        ("version=1\ncluster.id=x\n", "Failed to find node.id"),
        ("cluster.id=x\n", "Failed to find broker.id"),  # no version: version 0
        ("version=0\nbroker.id=one\n", "Unable to read broker.id as a base-10 number."),
        ("version=3\nnode.id=1\n", "Unknown meta.properties version number 3"),
        ("version=x\n", "Invalid meta.properties version string 'x'"),
        ("version=1\nnode.id=1\ncluster.id=c\ndirectory.id=bad\n", "Unable to read directory.id as a Uuid: "),
    ],
)
def test_meta_properties_errors(tmp_path, text, message):
    path = tmp_path / files.META_PROPERTIES
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError) as info:
        read_meta_properties(path)
    assert info.value.reason.startswith(message)
    assert info.value.path == str(path)


def test_java_properties_syntax():
    text = (
        "# comment\n! also a comment\n  \n"
        "a=1\n b : 2\nc 3\nd\\=e=4\nlong = one \\\n    two\nuni=caf\\u00e9\\ttab\nempty=\nbare\n"
    )
    assert parse_java_properties(text) == {
        "a": "1", "b": "2", "c": "3", "d=e": "4", "long": "one two", "uni": "café\ttab", "empty": "", "bare": "",
    }


@given(st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=10), max_size=8))
def test_java_properties_round_trip(props):
    assert parse_java_properties(format_java_properties(props)) == props


# -- .kafka_cleanshutdown and quorum-state ------------------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("log_dir", [ZK, KRAFT], ids=["zk", "kraft"])
def test_clean_shutdown_fixtures_are_empty_markers(log_dir):
    assert read_clean_shutdown(log_dir / files.CLEAN_SHUTDOWN) == CleanShutdown(None)


def test_clean_shutdown_marker(tmp_path):
    path = tmp_path / files.CLEAN_SHUTDOWN
    assert read_clean_shutdown(path) is None
    write_clean_shutdown(path, 4242)
    assert path.read_text() == '{"version":"0","broker_epoch":"4242"}'
    assert read_clean_shutdown(path) == CleanShutdown(4242)
    write_clean_shutdown(path)
    assert path.read_bytes() == b""
    assert read_clean_shutdown(path) == CleanShutdown(None)
    path.write_text("{not json")
    assert read_clean_shutdown(path) == CleanShutdown(None)


@needs_fixtures
def test_quorum_state_fixture():
    state = read_quorum_state(KRAFT / "__cluster_metadata-0" / files.QUORUM_STATE)
    assert state == QuorumState(
        data_version=0, leader_id=1, leader_epoch=1, voted_id=-1, applied_offset=0, current_voters=(1,), cluster_id=""
    )


def test_quorum_state_v1_and_garbage(tmp_path):
    path = tmp_path / files.QUORUM_STATE
    path.write_text('{"leaderId":3,"leaderEpoch":9,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}')
    state = read_quorum_state(path)
    assert (state.data_version, state.leader_id, state.leader_epoch, state.current_voters) == (1, 3, 9, None)
    path.write_text("[1, 2]")
    with pytest.raises(CorruptCheckpointError):
        read_quorum_state(path)
