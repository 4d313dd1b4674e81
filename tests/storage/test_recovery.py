"""Log recovery (LogLoader + LogSegment.recover) as plan, apply and restore; PartitionLog.open on top of it."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import struct
from pathlib import Path

import pytest

from builders import T0, build_partition
from kcli.errors import KcliError
from kcli.records import BatchReader, Record
from kcli.storage.checkpoint import LeaderEpochCheckpointFile
from kcli.storage.log import LogConfig, PartitionLog
from kcli.storage.recovery import ActionKind, apply_recovery, plan_recovery, restore_quarantine
from kcli.storage.snapshot import read_producer_snapshot
from kcli.tools.verify import verify

FIXTURE_LOG_DIRS = ("VolodymyrZee__kafka", "rjmfernandes__flink-on-prem/data")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    return build_partition(tmp_path_factory.mktemp("template") / "logs" / "t-0")


@pytest.fixture
def partition(template, tmp_path):
    return Path(shutil.copytree(template, tmp_path / "logs" / "t-0"))


def _logs(directory):
    return sorted(directory.glob("*.log"))


def _batches(log):
    return list(BatchReader(log.read_bytes()))


def _hashes(directory):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


def _recover(directory, quarantine, expected_log_end_offset, allowed_warnings=()):
    """Plan, apply, then everything the recovery promises: the expected end, a clean verify, a no-op second
    plan, every cut byte in quarantine under its SHA-256, and a restore that brings back the exact files."""
    before = {p.name: p.read_bytes() for p in directory.iterdir()}
    plan = plan_recovery(directory)
    assert plan.log_end_offset == expected_log_end_offset
    result = apply_recovery(plan, quarantine=quarantine)
    report = verify([str(directory)])
    assert report.is_clean() and {p.code for p in report.warnings} <= set(allowed_warnings), report.problems
    assert plan_recovery(directory).actions == []
    manifest = json.loads(result.manifest.read_text())
    assert len(manifest["actions"]) == len(plan.actions)
    for entry in manifest["actions"]:
        if entry["quarantine_file"] is not None:
            kept = (quarantine / entry["quarantine_file"]).read_bytes()
        elif entry.get("inline") is not None:  # a rebuilt file's small old content, kept in the manifest
            kept = base64.b64decode(entry["inline"])
        else:
            continue
        assert len(kept) == entry["stored_bytes"]  # trailing zeros (preallocated indexes) are not copied
        kept += bytes(entry["bytes"] - len(kept))
        assert hashlib.sha256(kept).hexdigest() == entry["sha256"]
        assert kept == before[entry["file"]][entry["position"] : entry["end"]]
    restore_quarantine(result.manifest)
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == before
    return plan


# -- intact partitions are left alone -------------------------------------------------------------------

def test_built_partition_needs_nothing(partition):
    for rebuild_only in (False, True):
        plan = plan_recovery(partition, rebuild_indexes_only=rebuild_only)
        assert (plan.actions, plan.problems, plan.log_end_offset, plan.segments) == ([], [], 364, 4)


def test_fixture_partitions_need_nothing(fixtures_dir, tmp_path):
    for name in FIXTURE_LOG_DIRS:
        copy = Path(shutil.copytree(fixtures_dir / name, tmp_path / name.replace("/", "_")))
        for directory in sorted(d for d in copy.iterdir() if d.is_dir()):
            for rebuild_only in (False, True):
                plan = plan_recovery(directory, rebuild_indexes_only=rebuild_only)
                assert (plan.actions, plan.problems) == ([], []), directory


def test_rebuilt_indexes_equal_the_writers(partition, tmp_path):
    """Appends and recovery share one set of per-batch rules: indexes rebuilt from the log are the bytes
    PartitionLog wrote, .txnindex (with its last stable offsets) included."""
    originals = {p.name: p.read_bytes() for p in partition.iterdir() if p.suffix in (".index", ".timeindex", ".txnindex")}
    for name in originals:
        (partition / name).unlink()
    plan = plan_recovery(partition)
    assert {a.file.name for a in plan.actions} == set(originals)
    assert {a.kind for a in plan.actions} == {ActionKind.REBUILD}
    apply_recovery(plan, quarantine=tmp_path / "q")
    assert {name: (partition / name).read_bytes() for name in originals} == originals


# -- the corruption matrix ------------------------------------------------------------------------------

def test_truncated_at_every_byte_of_the_last_batch(template, tmp_path):
    last_log = _logs(template)[-1]
    last = _batches(last_log)[-1]
    data = last_log.read_bytes()
    for cut in range(last.size):
        directory = Path(shutil.copytree(template, tmp_path / f"{cut}" / "logs" / "t-0"))
        (directory / last_log.name).write_bytes(data[: last.position + cut])
        _recover(directory, tmp_path / f"{cut}" / "q", last.base_offset)


@pytest.mark.parametrize("cut", [0, 1, 11, 12, 17, 18, 60, 61, -1])
def test_truncated_data_batch(tmp_path, cut):
    directory = build_partition(tmp_path / "logs" / "t-0", batches=30, transactions=False)
    log = _logs(directory)[-1]
    last = _batches(log)[-1]
    log.write_bytes(log.read_bytes()[: last.position + (cut if cut >= 0 else last.size - 1)])
    _recover(directory, tmp_path / "q", last.base_offset)


def test_garbage_appended(partition, tmp_path):
    log = _logs(partition)[-1]
    size = log.stat().st_size
    with open(log, "ab") as out:
        out.write(b"\xde\xad\xbe\xef" * 40)
    plan = _recover(partition, tmp_path / "q", 364)
    (cut,) = [a for a in plan.actions if a.kind is ActionKind.TRUNCATE]
    assert (cut.file, cut.position, cut.end) == (log, size, size + 160)


def test_flipped_bit_in_a_middle_batch_drops_later_segments(partition, tmp_path):
    logs = _logs(partition)
    victim = _batches(logs[1])[17]
    data = bytearray(logs[1].read_bytes())
    data[victim.position + 70] ^= 0x10
    logs[1].write_bytes(bytes(data))
    plan = _recover(partition, tmp_path / "q", victim.base_offset)
    (cut,) = [a for a in plan.actions if a.kind is ActionKind.TRUNCATE]
    assert (cut.file, cut.position, cut.end, cut.first_offset) == (logs[1], victim.position, len(data), victim.base_offset)
    assert cut.last_offset == _batches(logs[1])[-1].last_offset and "crc" in cut.reason
    dropped = {a.file.name for a in plan.actions if a.kind is ActionKind.DELETE}
    assert {p.name for p in logs[2:]} <= dropped and not any(n.startswith(logs[0].stem) for n in dropped)
    apply_recovery(plan_recovery(partition), quarantine=tmp_path / "q2")
    assert _logs(partition) == logs[:2]
    assert max(e.start_offset for e in LeaderEpochCheckpointFile(partition / "leader-epoch-checkpoint").read()) <= victim.base_offset
    assert read_producer_snapshot(partition / f"{victim.base_offset:020d}.snapshot").offset == victim.base_offset


def test_zeroed_index(partition, tmp_path):
    index = _logs(partition)[0].with_suffix(".index")
    index.write_bytes(bytes(index.stat().st_size))
    plan = _recover(partition, tmp_path / "q", 364)
    assert [(a.kind, a.file) for a in plan.actions] == [(ActionKind.REBUILD, index)]


def test_preallocated_index_and_log_tail_from_a_crash(partition, tmp_path):
    """An active segment with log.preallocate: zero-filled .log tail, 10 MiB indexes never trimmed."""
    log = _logs(partition)[-1]
    size = log.stat().st_size
    with open(log, "r+b") as out:
        out.truncate(size + 64 * 1024)
    for suffix, length in ((".index", 10485760), (".timeindex", 10485756)):
        with open(log.with_suffix(suffix), "r+b") as out:
            out.truncate(length)
    plan = _recover(partition, tmp_path / "q", 364)
    (cut,) = [a for a in plan.actions if a.kind is ActionKind.TRUNCATE]
    assert (cut.position, cut.end) == (size, size + 64 * 1024) and "smaller than minimum record overhead" in cut.reason
    assert {a.file.suffix for a in plan.actions if a.kind is ActionKind.REBUILD} >= {".index", ".timeindex"}
    apply_recovery(plan_recovery(partition), quarantine=tmp_path / "q2")
    assert log.with_suffix(".index").stat().st_size % 8 == 0 and log.with_suffix(".index").stat().st_size < 1024


def test_offsets_going_backwards(partition, tmp_path):
    log = _logs(partition)[0]
    batches = _batches(log)
    data = bytearray(log.read_bytes())
    struct.pack_into(">q", data, batches[5].position, batches[2].base_offset)  # the base offset is outside the CRC
    log.write_bytes(bytes(data))
    plan = _recover(partition, tmp_path / "q", batches[5].base_offset)
    assert [a.position for a in plan.actions if a.kind is ActionKind.TRUNCATE] == [batches[5].position]


def test_dry_plan_changes_nothing(partition):
    log = _logs(partition)[1]
    log.write_bytes(log.read_bytes()[:-7])
    before = _hashes(partition)
    assert plan_recovery(partition).actions
    assert _hashes(partition) == before


# -- LogLoader's leftovers --------------------------------------------------------------------------------

def test_temp_files_and_orphans(partition, tmp_path):
    logs = _logs(partition)
    shutil.copy(logs[0], str(logs[0]) + ".deleted")
    shutil.copy(logs[2], str(logs[2]) + ".cleaned")
    shutil.copy(logs[3], str(logs[3]) + ".swap")  # at or above the .cleaned base: an unfinished split
    (partition / "00000000000000009999.timeindex").write_bytes(b"")
    (partition / "leader-epoch-checkpoint.tmp").write_text("0\n")
    kraft = partition / "00000000000000000010-0000000001.checkpoint.deleted"
    kraft.write_bytes(b"kept")
    # KRaft snapshots' .checkpoint.deleted are the raft layer's to delete, not LogLoader's (verify warns)
    plan = _recover(partition, tmp_path / "q", 364, allowed_warnings={"leftover_temp_file"})
    assert sorted(a.file.name for a in plan.actions) == sorted([
        logs[0].name + ".deleted", logs[2].name + ".cleaned", logs[3].name + ".swap", "00000000000000009999.timeindex",
        "leader-epoch-checkpoint.tmp"])
    assert kraft.exists()


def test_interrupted_swap_is_completed(partition, tmp_path):
    """A compaction of segments 1 and 2 into one that stopped before the rename: the .swap replaces both."""
    logs = _logs(partition)
    merged = logs[1].read_bytes() + logs[2].read_bytes()
    swap = Path(str(logs[1]) + ".swap")
    swap.write_bytes(merged)
    originals = _hashes(partition)
    plan = _recover(partition, tmp_path / "q", 364)
    kinds = [(a.kind, a.file.name) for a in plan.actions]
    assert (ActionKind.RENAME, swap.name) in kinds
    replaced = {n for k, n in kinds if k is ActionKind.DELETE}
    assert {logs[1].name, logs[2].name, logs[2].with_suffix(".index").name} <= replaced
    assert _hashes(partition) == originals  # restored by _recover
    apply_recovery(plan_recovery(partition), quarantine=tmp_path / "q2")
    assert _logs(partition) == [logs[0], logs[1], logs[3]] and logs[1].read_bytes() == merged


def test_corrupt_snapshot_and_epoch_checkpoint(partition, tmp_path):
    snapshot = sorted(partition.glob("*.snapshot"))[0]
    data = bytearray(snapshot.read_bytes())
    data[-1] ^= 1
    snapshot.write_bytes(bytes(data))
    epochs = partition / "leader-epoch-checkpoint"
    good = epochs.read_bytes()
    epochs.write_text("0\n3\n0 0\nx\n")
    plan = _recover(partition, tmp_path / "q", 364)
    assert [(a.kind, a.file) for a in plan.actions] == [(ActionKind.DELETE, snapshot), (ActionKind.REBUILD, epochs)]
    apply_recovery(plan_recovery(partition), quarantine=tmp_path / "q2")
    assert epochs.read_bytes() == good  # every epoch is in the batches


# -- options ----------------------------------------------------------------------------------------------

def test_recovery_point_skips_earlier_segments(partition):
    first = _logs(partition)[0]
    first.write_bytes(first.read_bytes()[:-5])
    assert plan_recovery(partition, recovery_point=300).actions == []
    assert plan_recovery(partition, recovery_point=50).actions


def test_rebuild_indexes_only_leaves_the_log(partition, tmp_path):
    logs = _logs(partition)
    logs[-1].write_bytes(logs[-1].read_bytes()[:-5])
    index = logs[0].with_suffix(".index")
    index.write_bytes(bytes(index.stat().st_size))
    plan = plan_recovery(partition, rebuild_indexes_only=True)
    assert [(a.kind, a.file) for a in plan.actions] == [(ActionKind.REBUILD, index)]
    assert len(plan.problems) == 1 and logs[-1].name in plan.problems[0]
    size = logs[-1].stat().st_size
    apply_recovery(plan, quarantine=tmp_path / "q")
    assert logs[-1].stat().st_size == size
    assert [p.code for p in verify([str(partition)]).errors] == ["truncated_batch"]


# -- safety nets ------------------------------------------------------------------------------------------

def test_apply_refuses_a_quarantine_inside_the_log_dir(partition):
    log = _logs(partition)[-1]
    log.write_bytes(log.read_bytes()[:-3])
    plan = plan_recovery(partition)
    for inside in (partition / "q", partition.parent / "q"):
        with pytest.raises(KcliError, match="inside the log dir"):
            apply_recovery(plan, quarantine=inside)
    assert not (partition / "q").exists() and not (partition.parent / "q").exists()


def test_apply_refuses_a_partition_changed_since_planned(partition, tmp_path):
    log = _logs(partition)[-1]
    log.write_bytes(log.read_bytes()[:-3])
    plan = plan_recovery(partition)
    with open(log, "ab") as out:
        out.write(b"x")
    before = _hashes(partition)
    with pytest.raises(KcliError, match="plan again"):
        apply_recovery(plan, quarantine=tmp_path / "q")
    assert _hashes(partition) == before


def test_restore_refuses_a_file_that_moved_on(partition, tmp_path):
    log = _logs(partition)[-1]
    log.write_bytes(log.read_bytes()[:-3])
    result = apply_recovery(plan_recovery(partition), quarantine=tmp_path / "q")
    with open(log, "ab") as out:
        out.write(b"appended by a broker")
    before = _hashes(partition)
    with pytest.raises(KcliError, match="no longer ends"):
        restore_quarantine(result.manifest)
    assert _hashes(partition) == before


# -- PartitionLog.open ----------------------------------------------------------------------------------

def _append_rest(log: PartitionLog, start: int, end: int) -> None:
    for i in range(start, end):
        log.append([Record(0, T0 + i, f"k{i % 7}".encode(), bytes(300))], producer_id=77, producer_epoch=0,
                   base_sequence=i, partition_leader_epoch=i // 15)


def test_open_continues_as_if_never_closed(tmp_path):
    config = LogConfig(segment_bytes=8192, index_interval_bytes=1024)
    with PartitionLog(tmp_path / "a" / "t-0", config=config) as whole:
        _append_rest(whole, 0, 60)
    with PartitionLog(tmp_path / "b" / "t-0", config=config) as first:
        _append_rest(first, 0, 25)
    log = PartitionLog.open(tmp_path / "b" / "t-0", config=config)
    assert (log.log_end_offset, log.producers[77].last_sequence) == (25, 24)
    _append_rest(log, 25, 60)
    log.close()
    a, b = tmp_path / "a" / "t-0", tmp_path / "b" / "t-0"
    for suffix in (".log", ".index"):
        assert [p.read_bytes() for p in sorted(a.glob(f"*{suffix}"))] == [p.read_bytes() for p in sorted(b.glob(f"*{suffix}"))]
    assert (b / "leader-epoch-checkpoint").read_bytes() == (a / "leader-epoch-checkpoint").read_bytes()
    assert sorted(b.glob("*.snapshot"))[-1].read_bytes() == sorted(a.glob("*.snapshot"))[-1].read_bytes()
    assert verify([str(b)]).is_clean(strict=True)


def test_open_recovers_a_crashed_partition(partition, tmp_path):
    log_file = _logs(partition)[-1]
    last = _batches(log_file)[-1]
    with open(log_file, "r+b") as out:
        out.truncate(last.position + 20)
    for snapshot in partition.glob("*.snapshot"):
        snapshot.unlink()  # producer state now comes from replaying the whole log
    with pytest.raises(KcliError, match="open the log with recovery"):
        PartitionLog.open(partition, recover=False)
    log = PartitionLog.open(partition, quarantine=tmp_path / "q")
    assert (log.log_end_offset, log.segments, log.log_start_offset) == (last.base_offset, [0, 114, 228, 342], 0)
    assert log.producers[1001].current_txn_first_offset >= 0  # its COMMIT was cut
    assert (tmp_path / "q" / "manifest.json").exists()
    log.append([Record(0, T0, b"k", b"v")], partition_leader_epoch=3)
    log.close()
    assert verify([str(partition)], deep=True).is_clean(strict=True)
    with PartitionLog.open(partition) as reopened:
        assert reopened.log_end_offset == last.base_offset + 1


# -- one quarantine run per restart, small old contents kept in the manifest -------------------------------

def _killed(log_dir: Path, names: list[str], records: int = 60) -> list[PartitionLog]:
    """Partitions as a SIGKILLed broker leaves them: never closed, so their indexes keep the 10 MiB
    preallocation; each .index holds entries (records of 200 bytes, an entry every 4096 bytes)."""
    logs = []
    for name in names:
        log = PartitionLog(log_dir / name)
        for i in range(records):
            log.append([Record(0, T0 + i, f"k{i}".encode(), b"v" * 200)])
        log.flush_to_os()
        logs.append(log)
    return logs


def _drop_handles(log: PartitionLog) -> None:
    segment = log.segment
    segment.log.close()
    for index in (segment.indexes.index, segment.indexes.time_index):
        index._unmap()
        index._file.close()
        index._file = None
    segment.indexes.txn_index.close()


def _append_stray_index_entry(path: Path) -> None:
    """An offset index entry after the valid ones that points past the end of the log."""
    import struct

    with open(path, "r+b") as index:
        data = index.read(1 << 16)
        slot = next(i for i in range(1, len(data) // 8) if struct.unpack_from(">i", data, i * 8)[0] == 0)
        index.seek(slot * 8)
        index.write(struct.pack(">ii", 1_000_000, 1 << 30))


def _tree(root: Path) -> dict[str, tuple[int, str]]:
    return {str(p.relative_to(root)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_restart_opens_its_partitions_into_one_quarantine_run(tmp_path):
    """What a broker's startup does: every partition of a log dir opened with the same QuarantineRun; one run
    directory (created only once something is repaired), each rebuilt index's old entries in the manifest."""
    from kcli.storage.files import RUN_MANIFEST_NAME
    from kcli.storage.recovery import QuarantineRun, quarantine_root, restore_run, run_manifests

    log_dir = tmp_path / "logs"
    with PartitionLog(log_dir / "intact-0") as intact:
        intact.append([Record(0, T0, b"k", b"v")])
    idle = QuarantineRun.beside(log_dir)
    with PartitionLog.open(log_dir / "intact-0", quarantine=idle) as reopened_intact:
        assert reopened_intact.recovery is None
    assert not quarantine_root(log_dir).exists()  # nothing repaired, nothing on disk
    open_logs = _killed(log_dir, ["t-0", "t-1", "t-2"])
    assert all((log_dir / n / "00000000000000000000.index").stat().st_size == 10 << 20 for n in ("t-0", "t-1"))
    # A preallocated active index whose entries agree with the log is kept (Kafka's broker trims it); an entry
    # past the log end, as a torn write of the index could leave, is not: each of these gets its indexes rebuilt.
    for name in ("t-0", "t-1", "t-2"):
        _append_stray_index_entry(log_dir / name / "00000000000000000000.index")
    before = _tree(log_dir)
    run = QuarantineRun.beside(log_dir)
    reopened = {p.name: PartitionLog.open(p, quarantine=run) for p in sorted(log_dir.iterdir())}
    assert reopened["intact-0"].recovery is None
    assert [reopened[n].recovery for n in ("t-0", "t-1", "t-2")] == run.results
    (only,) = quarantine_root(log_dir).iterdir()
    assert only == run.directory and (only / RUN_MANIFEST_NAME).is_file()
    assert sorted(p.name for p in only.iterdir() if p.is_dir()) == ["t-0", "t-1", "t-2"]
    for result in run.results:
        assert [p.name for p in result.quarantine.iterdir()] == ["manifest.json"]  # no file per index
        index = next(i for i, a in enumerate(result.plan.actions) if a.file.name.endswith(".index"))
        assert result.kept_in(index) == result.manifest
        assert base64.b64decode(result.records[index]["inline"]).rstrip(b"\0")  # real entries, kept
    for log in reopened.values():
        log.segment.close()  # as a broker stopping: the rebuilt indexes trimmed again, the kept .timeindex trimmed
    for log in open_logs:
        _drop_handles(log)  # handles only (a close would trim the indexes)
    assert [r.partition_dir.name for r in restore_run(run_manifests(only))] == ["t-0", "t-1", "t-2"]
    after = _tree(log_dir)
    kept = [n for n in before if n.endswith(".timeindex") and n.startswith("t-")]
    assert {n: v for n, v in after.items() if n not in kept} == {n: v for n, v in before.items() if n not in kept}
    for name in kept:  # recovery kept it; the close trimmed its preallocated zeros, nothing else
        data = (log_dir / name).read_bytes()
        assert 0 < len(data) < before[name][0] and data.rstrip(b"\0") == data


def test_runs_started_in_the_same_second_do_not_share_a_directory(tmp_path):
    from datetime import datetime, timezone

    from kcli.storage.recovery import QuarantineRun

    log_dir = tmp_path / "logs"
    _killed(log_dir, ["t-0", "t-1"], records=20)  # past index.interval.bytes: the indexes were opened (preallocated)
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    first, second = QuarantineRun.beside(log_dir, now), QuarantineRun.beside(log_dir, now)
    assert first.directory == second.directory  # both chose the free name before either used it
    first.recover(log_dir / "t-0")
    second.recover(log_dir / "t-1")
    assert first.directory != second.directory
    assert [p.name for p in first.directory.iterdir() if p.is_dir()] == ["t-0"]
    assert [p.name for p in second.directory.iterdir() if p.is_dir()] == ["t-1"]


def test_old_index_content_inline_when_small_a_file_when_large(partition, tmp_path):
    """A rebuilt index's old entries go into the manifest when small (a file would cost a whole block), into a
    quarantine file of their own (without the trailing zeros) above the inline limit; both restore exactly."""
    large = build_partition(tmp_path / "big" / "t-0", batches=600, value_size=400, segment_bytes=1 << 30,
                            transactions=False)
    for directory, inline in ((partition, True), (large, False)):
        index = sorted(directory.glob("*.index"))[0]
        data = index.read_bytes()
        entries = len(data.rstrip(b"\0"))
        assert 0 < entries <= 1024 if inline else entries > 1024
        index.write_bytes(data + bytes(4096))  # a zero tail: rebuilt
        quarantine = tmp_path / f"q-{directory.parent.name}"
        _recover(directory, quarantine, plan_recovery(directory).log_end_offset)  # restores byte-exact too
        manifest = json.loads((quarantine / "manifest.json").read_text())
        (entry,) = [e for e in manifest["actions"] if e["file"] == index.name]
        assert entry["stored_bytes"] == entries
        if inline:
            assert entry["quarantine_file"] is None and base64.b64decode(entry["inline"]) == data[:entries]
            assert [p.name for p in quarantine.iterdir()] == ["manifest.json"]
        else:
            assert "inline" not in entry and (quarantine / entry["quarantine_file"]).read_bytes() == data[:entries]
