"""Recover segments, partition directories or log directories offline, as a broker's LogLoader would.

Refuses a log dir whose ``.lock`` another process holds (a running broker), plans every partition, and
unless it is a dry run applies the plans with quarantine: ``<log dir>.kctl-quarantine/<timestamp>/<partition>``
by default, beside the log dir. Returns a ``RecoverReport``; never prints.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kcli.errors import InputError, KcliError
from kcli.storage.files import DELETE_DIR_SUFFIX, LOCK_FILE, FileKind, offset_from_filename
from kcli.storage.recovery import (
    ActionKind,
    QuarantineRun,
    RecoveryAction,
    RestoreResult,
    plan_recovery,
    restore_run,
    run_manifests,
)
from kcli.tools.inputs import collect_inputs, file_size
from kcli.tools.report import UNREADABLE, Problem, Severity, as_problem, os_problem

_SEGMENT_KINDS = (FileKind.LOG, FileKind.INDEX, FileKind.TIME_INDEX, FileKind.TXN_INDEX)


class RecoveryRefusedError(KcliError):
    """A log dir is in use: another process (a broker) holds its .lock (recovery and compaction refuse it)."""


class QuarantinePlacementError(KcliError):
    """The quarantine would land inside a log dir, where a broker takes sub-directories for partitions."""


@dataclass
class PartitionRecovery:
    directory: str
    log_end_offset: int | None
    actions: list[RecoveryAction]
    problems: list[Problem]
    applied: bool = False
    quarantine: str | None = None
    manifest: str | None = None
    stored_bytes: int = 0  # old bytes actually kept (quarantine files and inline), zero-filled tails not stored

    @property
    def restore_command(self) -> str | None:
        return None if self.manifest is None else f"kctl recover --restore {shlex.quote(self.manifest)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "partition": self.directory,
            "log_end_offset": self.log_end_offset,
            "applied": self.applied,
            "actions": [a.to_json() for a in self.actions],
            "problems": [p.to_json() for p in self.problems],
            "quarantine": self.quarantine,
            "manifest": self.manifest,
            "stored_bytes": self.stored_bytes,
            "restore_command": self.restore_command,
        }


@dataclass
class RecoverReport:
    paths: list[str]
    dry_run: bool
    rebuild_indexes: bool
    partitions: list[PartitionRecovery] = field(default_factory=list)
    segments: int = 0
    bytes: int = 0
    seconds: float = 0.0
    unreadable: list[Problem] = field(default_factory=list)  # entries that could not be read at all, and warnings
    locked: list[str] = field(default_factory=list)  # dry run: .lock files another process (a broker) holds

    @property
    def actions(self) -> list[RecoveryAction]:
        return [a for p in self.partitions for a in p.actions]

    @property
    def problems(self) -> list[Problem]:
        """Unreadable inputs, damage left, and in a dry run the repairs still to make (one per action)."""
        found = [problem for p in self.partitions for problem in p.problems]
        if self.dry_run:
            found += [Problem(str(a.file), a.position if a.kind is ActionKind.TRUNCATE else None, a.first_offset,
                              a.reason, f"needs_{a.kind.value}") for a in self.actions]
        return self.unreadable + found

    @property
    def ok(self) -> bool:
        return self.is_ok()

    @property
    def stored_bytes(self) -> int:
        """What the quarantine holds: the bytes actually stored, not the size of the (preallocated) files replaced."""
        return sum(p.stored_bytes for p in self.partitions)

    @property
    def quarantine_runs(self) -> list[str]:
        runs = [str(Path(p.quarantine).parent) for p in self.partitions if p.quarantine]
        return list(dict.fromkeys(runs))

    @property
    def restore_commands(self) -> list[str]:
        """One per quarantine run: it undoes every partition of the run, all or nothing."""
        return [f"kctl recover --restore {shlex.quote(run)}" for run in self.quarantine_runs]

    def is_ok(self) -> bool:
        """Nothing left to repair: no errors remain, and a dry run found nothing to do."""
        return not any(p.severity is Severity.ERROR for p in self.problems)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.is_ok(),
            "dry_run": self.dry_run,
            "rebuild_indexes": self.rebuild_indexes,
            "paths": self.paths,
            "segments": self.segments,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "partitions": [p.to_json() for p in self.partitions],
            "problems": [p.to_json() for p in self.problems],
            "stored_bytes": self.stored_bytes,
            "locked": self.locked,
            "restore_commands": self.restore_commands,
        }


def recover(paths: list[str], *, dry_run: bool, quarantine: str | os.PathLike[str] | None = None,
            rebuild_indexes: bool = False, progress: Callable[[int], None] | None = None) -> RecoverReport:
    """Plan (and unless ``dry_run`` apply) recovery of every partition named: a segment file recovers its
    partition from that segment on (its base offset is the recovery point), a directory every segment."""
    started = time.perf_counter()
    report = RecoverReport(list(paths), dry_run, rebuild_indexes)
    partitions = find_partitions(paths, report.unreadable)
    log_dirs = sorted({d.resolve().parent for d in partitions})
    if quarantine is not None:
        root = Path(quarantine).absolute()
        for log_dir in log_dirs:
            if root.resolve().is_relative_to(log_dir):
                raise QuarantinePlacementError(f"quarantine must not lie inside the log dir {log_dir}: a broker takes "
                                               "every sub-directory there for a partition", path=str(quarantine))
    runs: dict[Path, QuarantineRun] = {}  # one run per log dir (or the one --quarantine)
    with ExitStack() as locks:
        for log_dir in log_dirs:
            if dry_run:  # changes nothing: allowed beside a running broker, which the report says
                if log_dir_in_use(log_dir):
                    report.locked.append(str(log_dir / LOCK_FILE))
                continue
            locks.enter_context(log_dir_lock(log_dir, "recovery"))
        blocked = {Path(p.file).parent.absolute() for p in report.unreadable if p.unreadable}
        for directory, recovery_point in partitions.items():
            if directory in blocked:  # a segment-like entry we cannot read: its data would be misjudged
                report.partitions.append(PartitionRecovery(str(directory), None, [], [Problem(
                    str(directory), None, None, "not recovered: it holds entries that cannot be read", "skipped")]))
                continue
            try:
                plan = plan_recovery(directory, recovery_point=recovery_point, rebuild_indexes_only=rebuild_indexes,
                                     progress=progress)
            except (OSError, InputError) as exc:  # unreadable, or a file deleted since it was listed
                problem = os_problem(directory, exc) if isinstance(exc, OSError) else \
                    Problem(str(exc.path or directory), None, None, exc.reason, UNREADABLE)
                report.partitions.append(PartitionRecovery(str(directory), None, [], [problem]))
                continue
            result = PartitionRecovery(str(directory), plan.log_end_offset, plan.actions,
                                       [as_problem(p, str(directory), "damage_left") for p in plan.problems])
            report.partitions.append(result)
            report.segments += plan.segments
            report.bytes += plan.bytes
            if dry_run or not plan.actions:
                continue
            log_dir = directory.resolve().parent
            key = Path(quarantine).absolute() if quarantine else log_dir
            if key not in runs:
                runs[key] = QuarantineRun(key) if quarantine else QuarantineRun.beside(log_dir)
            try:
                applied = runs[key].apply(plan)
            except (KcliError, OSError) as exc:
                result.problems.append(Problem(str(directory), None, None, f"recovery not applied: {exc}",
                                               "not_applied"))
                continue
            result.applied = True
            result.quarantine, result.manifest = str(applied.quarantine), str(applied.manifest)
            result.stored_bytes = sum(r.get("stored_bytes", 0) for r in applied.records)
    report.seconds = time.perf_counter() - started
    return report


def restore(path: str | os.PathLike[str]) -> list[RestoreResult]:
    """Undo ONE recovery run (its directory or run.json), or one partition of it (its manifest.json), all or
    nothing: every file is checked before any is changed. A directory holding several runs is refused."""
    return restore_run(run_manifests(path))


def find_partitions(paths: list[str], problems: list[Problem] | None = None) -> dict[Path, int | None]:
    """Partition dir -> recovery point (None: every segment), for the partitions ``collect_inputs`` finds that hold
    a segment, leaving out those renamed ``-delete`` (the broker deletes them). Entries that look like Kafka data
    but cannot be read go to ``problems`` (code ``unreadable``), with warnings about directories Kafka would not
    load as partitions; a path holding no Kafka data at all is an InputError."""
    found: dict[Path, int | None] = {}

    def add(directory: Path, point: int | None) -> None:
        directory = directory.absolute()
        if directory not in found:
            found[directory] = point
        elif found[directory] is not None:
            found[directory] = None if point is None else min(point, found[directory])  # type: ignore[type-var]

    for given in paths:
        inputs = collect_inputs([given])
        if problems is not None:
            problems.extend(Problem(s.path, None, None, s.reason, UNREADABLE) for s in inputs.unreadable)
            problems.extend(inputs.warnings)
        if len(inputs.files) == 1 and inputs.files[0].given == given:  # a file named on its own
            item = inputs.files[0]
            add(item.path.parent, offset_from_filename(item.path.name) if item.kind in _SEGMENT_KINDS else None)
            continue
        with_segments = {f.path.parent for f in inputs.files if f.kind is FileKind.LOG}
        for partition in inputs.partitions:
            if partition.path in with_segments and partition.marker != DELETE_DIR_SUFFIX:
                add(partition.path, None)
    return found


@contextmanager
def log_dir_lock(log_dir: Path, operation: str) -> Iterator[None]:
    """Hold ``<log dir>/.lock`` during ``operation`` ("recovery", "compaction"), if the log dir has one; refuse
    (RecoveryRefusedError naming the operation) if another process holds it.

    Kafka locks it with FileChannel.tryLock (a POSIX fcntl lock), kcli's broker with flock: both are tried.
    A missing .lock is not created.
    """
    lock = log_dir / LOCK_FILE
    if not lock.is_file():
        yield
        return
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError as exc:
        raise InputError(f"cannot open the lock file: {exc.strerror}", path=str(lock)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise RecoveryRefusedError(f"{operation} refused: another process (a running broker?) holds this log "
                                       "dir's lock: stop it first", path=str(lock)) from None
        yield
    finally:
        os.close(fd)  # releases both locks


def log_dir_in_use(log_dir: Path) -> bool:
    """Whether another process holds ``<log dir>/.lock``, tested with shared locks on a read-only descriptor
    and released at once: a dry run neither writes nor keeps a broker from starting."""
    try:
        fd = os.open(log_dir / LOCK_FILE, os.O_RDONLY)
    except OSError:
        return False  # no .lock (or none we may open): nothing says a broker runs
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def total_log_bytes(paths: list[str]) -> int:
    """Bytes of the .log files recovery reads (for a progress bar)."""
    return sum(file_size(f.path) for f in collect_inputs(paths).files if f.kind is FileKind.LOG)
