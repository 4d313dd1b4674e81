"""kctl recover: log dirs and partitions, dry runs, quarantine and restore, the .lock, crashes at every step."""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kctl_fork
from builders import build_partition
from kcli.records import BatchReader
from kcli.storage.recovery import CRASH_AFTER_ENV, MANIFEST_NAME
from kcli.tools.recover import QuarantinePlacementError, RecoveryRefusedError, recover, restore
from kcli.tools.verify import verify

FIXTURE_LOG_DIRS = ("VolodymyrZee__kafka", "rjmfernandes__flink-on-prem/data")


def _logs(directory):
    return sorted(directory.glob("*.log"))


def _tree(root: Path) -> dict[str, str]:
    """sha256 of every file under root, by relative path."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def _damage(directory: Path) -> int:
    """A flipped bit in the middle of the second segment, a torn tail, a zeroed index in the first segment and
    a leftover .deleted file. Returns the log end offset recovery must reach."""
    logs = _logs(directory)
    victim = list(BatchReader(logs[1].read_bytes()))[7]
    data = bytearray(logs[1].read_bytes())
    data[victim.position + victim.size // 2] ^= 0x04
    logs[1].write_bytes(bytes(data))
    logs[-1].write_bytes(logs[-1].read_bytes()[:-9])
    index = logs[0].with_suffix(".index")
    index.write_bytes(bytes(index.stat().st_size))
    shutil.copy(logs[0], str(logs[0]) + ".deleted")
    return victim.base_offset


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("damaged") / "logs"
    partition = build_partition(log_dir / "t-0")
    build_partition(log_dir / "u-0", batches=30)
    return log_dir, _damage(partition)


@pytest.fixture
def log_dir(damaged, tmp_path):
    return Path(shutil.copytree(damaged[0], tmp_path / "logs"))


def kctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`kctl` as a process forked from one that imported kcli once (tests/kctl_fork.py)."""
    return kctl_fork.run(*args, env={"COLUMNS": "200", **(env or {})})


def kctl_fresh(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`kctl` started as an operator starts it: a fresh interpreter."""
    return subprocess.run([sys.executable, "-m", "kcli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


# -- the tool ---------------------------------------------------------------------------------------------

def test_dry_run_changes_nothing(log_dir, damaged):
    before = _tree(log_dir.parent)
    report = recover([str(log_dir)], dry_run=True)
    assert _tree(log_dir.parent) == before
    assert not report.is_ok() and report.problems  # a dry run's repairs to make are its problems
    assert all(p.code.startswith("needs_") for p in report.problems)
    (changed,) = [p for p in report.partitions if p.actions]
    assert changed.directory.endswith("t-0") and changed.log_end_offset == damaged[1]
    assert changed.manifest is None and changed.to_json()["restore_command"] is None


def test_recover_log_dir_with_default_quarantine(log_dir, damaged):
    report = recover([str(log_dir)], dry_run=False)
    assert report.is_ok()
    assert verify([str(log_dir)]).is_clean(strict=True)
    (changed,) = [p for p in report.partitions if p.actions]
    manifest = Path(changed.manifest)
    # <log dir>.kctl-quarantine/<timestamp>/<partition>/manifest.json, beside the log dir, not in it
    assert manifest.parent.parent.parent == log_dir.with_name("logs.kctl-quarantine")
    assert manifest.parent.name == "t-0" and manifest.name == MANIFEST_NAME
    assert not any(p.is_dir() for p in (log_dir / "t-0").iterdir()) and sorted(p.name for p in log_dir.iterdir()) == ["t-0", "u-0"]
    data = report.to_json()
    (entry,) = [p for p in data["partitions"] if p["actions"]]
    assert entry["restore_command"] == f"kctl recover --restore {manifest}"
    assert data["restore_commands"] == [f"kctl recover --restore {manifest.parent.parent}"]  # the whole run
    truncate = next(a for a in entry["actions"] if a["action"] == "truncate")
    assert set(truncate) == {"action", "file", "position", "end", "bytes", "first_offset", "last_offset", "offsets",
                             "lower_bound", "target", "reason"}
    assert truncate["first_offset"] == damaged[1] and truncate["bytes"] == truncate["end"] - truncate["position"] > 0
    again = recover([str(log_dir)], dry_run=False)
    assert again.actions == [] and again.is_ok()


def test_restore_puts_every_byte_back(log_dir):
    before = _tree(log_dir)
    report = recover([str(log_dir)], dry_run=False, quarantine=log_dir.parent / "q")
    assert _tree(log_dir) != before
    (run,) = report.quarantine_runs
    (result,) = restore(run)  # one run: every partition recovered in it
    assert _tree(log_dir) == before and result.restored
    assert Path(report.partitions[0].manifest or report.partitions[1].manifest).is_file()


def test_segment_file_recovers_from_that_segment(log_dir):
    partition = log_dir / "t-0"
    report = recover([str(_logs(partition)[-1])], dry_run=True)
    (only,) = report.partitions
    assert only.directory == str(partition) and {a.file.name for a in only.actions if a.kind.value == "truncate"} == {
        _logs(partition)[-1].name}
    whole = recover([str(partition)], dry_run=True)
    assert len(whole.actions) > len(only.actions)


def test_refuses_a_log_dir_locked_by_another_process(log_dir):
    (log_dir / ".lock").write_bytes(b"")
    for style in ("flock", "lockf"):  # kcli's broker uses flock, Kafka a POSIX fcntl lock
        holder = subprocess.Popen([sys.executable, "-c", (
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(log_dir / '.lock')!r}, os.O_RDWR)\n"
            f"fcntl.{style}(fd, fcntl.LOCK_EX)\n"
            "print('locked', flush=True)\n"
            "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline().strip() == "locked"
            before = _tree(log_dir.parent)
            with pytest.raises(RecoveryRefusedError, match="holds this log dir's lock"):
                recover([str(log_dir / "t-0")], dry_run=False)
            proc = kctl("recover", str(log_dir))
            assert proc.returncode == 1 and "lock" in proc.stderr
            assert _tree(log_dir.parent) == before
        finally:
            holder.kill()
            holder.wait()
    fd = os.open(log_dir / ".lock", os.O_RDWR)  # released: recovery goes ahead, and holds the lock meanwhile
    try:
        assert recover([str(log_dir)], dry_run=False).is_ok()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_refuses_a_quarantine_inside_the_log_dir(log_dir):
    for inside in (log_dir / "q", log_dir / "t-0" / "q"):
        with pytest.raises(QuarantinePlacementError):
            recover([str(log_dir / "t-0")], dry_run=False, quarantine=inside)
    assert kctl("recover", "--quarantine", str(log_dir / "q"), str(log_dir)).returncode == 2
    assert not (log_dir / "q").exists()


def test_fixture_log_dirs_are_left_alone(fixtures_dir, tmp_path):
    for name in FIXTURE_LOG_DIRS:
        copy = tmp_path / name.replace("/", "_")
        shutil.copytree(fixtures_dir / name, copy)
        for path in (copy, *copy.rglob("*")):
            path.chmod(path.stat().st_mode | 0o200)
        before = _tree(tmp_path)
        report = recover([str(copy)], dry_run=False)
        assert report.actions == [] and report.is_ok() and report.segments >= 10
        assert _tree(tmp_path) == before


# -- the command --------------------------------------------------------------------------------------------

def test_cli_text_json_restore_and_exit_codes(log_dir, tmp_path):
    before = _tree(log_dir)
    dry = kctl_fresh("recover", "--dry-run", "--json", str(log_dir))
    assert dry.returncode == 1 and _tree(log_dir) == before
    assert not json.loads(dry.stdout)["ok"]
    proc = kctl_fresh("recover", "--quarantine", str(tmp_path / "q"), str(log_dir))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    truncate = next(line for line in lines if line.lstrip().startswith("truncate "))
    assert "00000000000000000114.log at byte " in truncate and "bytes " in truncate and "offsets " in truncate
    assert lines[-1].startswith("to undo: kctl recover --restore ") and lines[-1].startswith(
        f"to undo: kctl recover --restore {tmp_path / 'q'}/")  # the run, not a partition or the root
    command = lines[-1].removeprefix("to undo: kctl ").split()
    assert kctl_fresh("recover", str(log_dir)).stdout.startswith("nothing to do")
    restored = kctl_fresh(*command)
    assert restored.returncode == 0 and restored.stdout.startswith("restored ") and _tree(log_dir) == before
    assert kctl_fresh("recover", str(tmp_path / "missing")).returncode == 3
    assert kctl_fresh("recover").returncode == 2
    assert kctl_fresh("recover", "--restore", str(tmp_path / "nothing-here.json")).returncode == 3


def test_rebuild_indexes_only(log_dir):
    proc = kctl("recover", "--rebuild-indexes", "--json", str(log_dir / "t-0"))
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["partitions"][0]["problems"]  # the log damage is left, and said so
    assert {a["action"] for p in report["partitions"] for a in p["actions"]} == {"rebuild"}


# -- crash safety -------------------------------------------------------------------------------------------

def _quarantined(root: Path) -> list[tuple[str, int, bytes]]:
    out = []
    for manifest in root.rglob(MANIFEST_NAME):
        for entry in json.loads(manifest.read_text())["actions"]:
            if entry["quarantine_file"]:
                kept = (manifest.parent / entry["quarantine_file"]).read_bytes()  # without its trailing zeros
            elif entry.get("inline") is not None:
                kept = base64.b64decode(entry["inline"])  # a rebuilt file's small old content, in the manifest
            else:
                continue
            out.append((entry["file"], entry["position"], kept + bytes(entry["bytes"] - len(kept))))
    return out


@pytest.mark.slow
def test_killed_at_every_step_then_recovered(damaged, tmp_path):
    """SIGKILL `kctl recover` after each mutating step in turn, then run recover again: the partition ends
    clean at the expected offset, and quarantine plus partition still hold every original byte."""
    template = damaged[0] / "t-0"
    originals = {p.name: p.read_bytes() for p in template.iterdir()}
    crashes = 0
    # Each step's kctl is its own process, forked from one that imported kcli once (kctl_fork); the first step
    # also in a fresh interpreter, as an operator starts it.
    for step in range(1, 200):
        partition = Path(shutil.copytree(template, tmp_path / f"{step}" / "logs" / "t-0"))
        quarantine = tmp_path / f"{step}" / "q"
        if step == 1:
            fresh = Path(shutil.copytree(template, tmp_path / "fresh" / "logs" / "t-0"))
            proc = kctl_fresh("recover", "--quarantine", str(tmp_path / "fresh" / "q"), str(fresh),
                              env={CRASH_AFTER_ENV: "1"})
            assert proc.returncode == -9, proc.stderr
        proc = kctl("recover", "--quarantine", str(quarantine), str(partition), env={CRASH_AFTER_ENV: str(step)})
        if proc.returncode == 0:
            break
        assert proc.returncode == -9, proc.stderr
        crashes += 1
        report = recover([str(partition)], dry_run=False, quarantine=quarantine)
        assert report.is_ok() and report.partitions[0].log_end_offset == damaged[1], (step, report.to_json())
        assert verify([str(partition)]).is_clean(strict=True), (step, verify([str(partition)]).problems)
        assert recover([str(partition)], dry_run=True).actions == []
        kept = _quarantined(quarantine)
        for name, data in originals.items():
            now = (partition / name).read_bytes() if (partition / name).exists() else b""
            if now == data:
                continue
            assert any(file == name and position <= len(now) and data[:position] == now[:position]
                       and data[position:] == piece for file, position, piece in kept), (step, name)
    assert crashes > 20


# -- quarantine runs: compact, one per restart, restored whole or not at all ------------------------------

def _killed_broker_log_dir(root: Path, partitions: int = 8) -> Path:
    """Partitions written by PartitionLog and never closed (a kill -9): 10 MiB preallocated indexes each."""
    import uuid

    from kcli.records import Record
    from kcli.storage.log import PartitionLog

    log_dir = root / "logs"
    logs = []
    for n in range(partitions):
        log = PartitionLog(log_dir / f"events-{n}", topic_id=uuid.UUID(int=n + 1))
        for i in range(40):
            log.append([Record(0, 1700000000000 + i, f"k{i}".encode(), b"v" * 200)])
        logs.append(log)  # kept open: the files stay as a killed broker leaves them
    _killed_broker_log_dir.open_logs = logs  # type: ignore[attr-defined]  # never closed, as after a SIGKILL
    return log_dir


def _disk_bytes(root: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in root.rglob("*") if p.is_file())


def test_quarantine_of_preallocated_indexes_is_compact_and_restore_exact(tmp_path):
    log_dir = _killed_broker_log_dir(tmp_path)
    indexes = sorted(log_dir.rglob("*.index"))
    assert indexes and all(p.stat().st_size == 10 * 1024 * 1024 for p in indexes)  # preallocated
    before = _tree(log_dir)
    sizes = {str(p.relative_to(log_dir)): p.stat().st_size for p in log_dir.rglob("*") if p.is_file()}
    data = sum(p.stat().st_size for p in log_dir.rglob("*.log"))
    report = recover([str(log_dir)], dry_run=False)
    assert report.is_ok() and len([p for p in report.partitions if p.actions]) == 8
    assert any(a.kind.value == "rebuild" and a.file.suffix == ".index" for a in report.actions)
    (run,) = report.quarantine_runs  # ONE run for the whole log dir
    kept = sum(p.stat().st_size for p in Path(run).rglob("*") if p.is_file())
    assert kept < data and _disk_bytes(Path(run)) < 1024 * 1024, (kept, _disk_bytes(Path(run)), data)
    (command,) = report.restore_commands
    assert command == f"kctl recover --restore {run}"
    results = restore(run)
    assert len(results) == 8
    assert _tree(log_dir) == before
    assert {str(p.relative_to(log_dir)): p.stat().st_size for p in log_dir.rglob("*") if p.is_file()} == sizes


def test_quarantine_run_groups_a_restart(tmp_path):
    """The storage API a broker uses at startup: one QuarantineRun for every partition it recovers."""
    from kcli.storage.files import RUN_MANIFEST_NAME
    from kcli.storage.recovery import QuarantineRun, quarantine_root

    log_dir = _killed_broker_log_dir(tmp_path, partitions=3)
    before = _tree(log_dir)
    run = QuarantineRun.beside(log_dir)
    results = [run.recover(p) for p in sorted(log_dir.iterdir())]
    assert all(r is not None for r in results) and len(run.results) == 3
    assert run.directory.parent == quarantine_root(log_dir) and (run.directory / RUN_MANIFEST_NAME).is_file()
    assert sorted(p.name for p in run.directory.iterdir() if p.is_dir()) == ["events-0", "events-1", "events-2"]
    assert run.recover(log_dir / "events-0") is None  # nothing left to do: nothing quarantined
    restore(run.directory)
    assert _tree(log_dir) == before


def test_restore_takes_one_run_and_nothing_else(log_dir, tmp_path):
    from kcli.errors import InputError

    first = recover([str(log_dir)], dry_run=False, quarantine=tmp_path / "q")
    (log_dir / "u-0" / _logs(log_dir / "u-0")[-1].name).open("ab").write(b"torn")
    second = recover([str(log_dir)], dry_run=False, quarantine=tmp_path / "q")
    assert first.quarantine_runs != second.quarantine_runs
    state = _tree(log_dir)
    for not_a_run in (tmp_path / "q", tmp_path):
        with pytest.raises(InputError, match="not a quarantine run"):
            restore(not_a_run)
        assert _tree(log_dir) == state
    proc = kctl("recover", "--restore", str(tmp_path))
    assert proc.returncode == 3 and "not a quarantine run" in proc.stderr and _tree(log_dir) == state


def test_restore_is_all_or_nothing(log_dir, tmp_path):
    """A run of two partitions: one of them moved on since (a broker appended); nothing is restored."""
    from kcli.storage.recovery import RestoreRefusedError

    (log_dir / "u-0" / _logs(log_dir / "u-0")[-1].name).open("ab").write(b"torn")
    report = recover([str(log_dir)], dry_run=False, quarantine=tmp_path / "q")
    (run,) = report.quarantine_runs
    assert len([p for p in report.partitions if p.actions]) == 2
    with open(_logs(log_dir / "u-0")[-1], "ab") as out:
        out.write(b"appended by a broker since")
    state = _tree(log_dir)
    with pytest.raises(RestoreRefusedError, match="no longer ends"):
        restore(run)
    assert _tree(log_dir) == state  # t-0 (checked first or not) untouched too
    proc = kctl("recover", "--restore", run)
    assert proc.returncode == 1 and "not restoring" in proc.stderr and _tree(log_dir) == state


# -- what a dry run says it will remove ------------------------------------------------------------------

def _one_segment(tmp_path: Path, batches: int = 30) -> Path:
    return build_partition(tmp_path / "logs" / "t-0", batches=batches, records_per_batch=1, segment_bytes=1 << 30,
                           transactions=False)


def test_dry_run_counts_what_a_damaged_length_removes(tmp_path):
    """The length field of the batch at offset 4 is damaged: the repair removes offsets 4..29, not 4..4."""
    partition = _one_segment(tmp_path)
    log = _logs(partition)[0]
    batches = list(BatchReader(log.read_bytes()))
    data = bytearray(log.read_bytes())
    data[batches[4].position + 8: batches[4].position + 12] = (5).to_bytes(4, "big")  # below any batch
    log.write_bytes(bytes(data))
    report = recover([str(partition)], dry_run=True)
    (cut,) = [a for a in report.actions if a.kind.value == "truncate"]
    assert (cut.first_offset, cut.last_offset, cut.offsets, cut.lower_bound) == (4, 29, 26, False)
    proc = kctl("recover", "--dry-run", str(partition))
    assert proc.returncode == 1 and "offsets 4..29 (26 offsets)" in proc.stdout


def test_dry_run_says_a_zeroed_tail_is_a_lower_bound(tmp_path):
    """The last 21 batches were zeroed (a torn write); the index still names offsets in them."""
    partition = _one_segment(tmp_path, batches=300)
    log = _logs(partition)[0]
    batches = list(BatchReader(log.read_bytes()))
    cut = batches[-21].position
    data = bytearray(log.read_bytes())
    data[cut:] = bytes(len(data) - cut)
    log.write_bytes(bytes(data))
    report = recover([str(partition)], dry_run=True)
    (action,) = [a for a in report.actions if a.kind.value == "truncate"]
    assert action.first_offset == 279 and action.lower_bound
    assert action.offsets is not None and action.offsets > 1  # the index names offsets past the cut
    doc = json.loads(kctl("recover", "--dry-run", "--json", str(partition)).stdout)
    entry = next(a for p in doc["partitions"] for a in p["actions"] if a["action"] == "truncate")
    assert entry["lower_bound"] is True and entry["offsets"] == action.offsets
    assert f"(at least {action.offsets} offsets)" in kctl("recover", "--dry-run", str(partition)).stdout


def test_dump_log_salvages_quarantined_bytes(tmp_path):
    """After a repair, dump-log reads the cut bytes from the quarantine: the records that still parse, at
    their offsets and positions in the original segment (exit 0, no 'Ignoring unknown file')."""
    partition = _one_segment(tmp_path)
    log = _logs(partition)[0]
    batches = list(BatchReader(log.read_bytes()))
    data = bytearray(log.read_bytes())
    data[batches[4].position + 8: batches[4].position + 12] = (5).to_bytes(4, "big")
    log.write_bytes(bytes(data))
    report = recover([str(partition)], dry_run=False)
    quarantine = Path(report.partitions[0].quarantine)
    (fragment,) = [p for p in quarantine.iterdir() if ".log." in p.name]
    proc = kctl("dump-log", "--deep-iteration", "--print-data-log", str(fragment))
    assert proc.returncode == 0, proc.stderr
    assert "Ignoring unknown file" not in proc.stdout + proc.stderr
    offsets = [int(line.split("offset: ")[1].split()[0]) for line in proc.stdout.splitlines() if line.startswith("| offset: ")]
    assert offsets == list(range(5, 30))
    assert f"position: {batches[5].position} " in proc.stdout  # positions in the original segment
    items = [json.loads(line) for line in kctl("dump-log", "--json", "--deep-iteration", str(quarantine)).stdout.splitlines()]
    records = [i for i in items if i["type"] == "record"]
    assert [r["offset"] for r in records] == list(range(5, 30)) and all(r["value"] is not None for r in records)
