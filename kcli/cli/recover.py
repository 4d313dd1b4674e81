"""`kctl recover`: repair partitions offline the way a broker's log recovery would, keeping what it cuts."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kcli.cli.common import ExitCode, byte_progress, err_console, exit_on_errors, fail, finish, progress_wanted, write_json_line

if TYPE_CHECKING:  # recovery is imported when the command runs
    from kcli.storage.recovery import RecoveryAction, RestoreResult
    from kcli.tools.recover import RecoverReport


def recover_cmd(
    paths: Annotated[Optional[list[str]], typer.Argument(help="Segment files, partition directories or log directories.", show_default=False)] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be cut, dropped and rebuilt; change nothing.")] = False,
    quarantine: Annotated[Optional[Path], typer.Option("--quarantine", help="Where cut bytes and replaced files are kept (default: <log dir>.kctl-quarantine beside the log dir).", show_default=False)] = None,
    rebuild_indexes: Annotated[bool, typer.Option("--rebuild-indexes", help="Only rebuild .index, .timeindex and .txnindex files that disagree with the log.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON report on stdout.")] = False,
    restore_from: Annotated[Optional[Path], typer.Option("--restore", help="Undo a recovery: its quarantine manifest.json, or a quarantine directory.", show_default=False)] = None,
) -> None:
    """Recover partitions as a broker's LogLoader would: finish or discard leftovers of interrupted operations,
    truncate each partition at its first invalid byte (dropping later segments), rebuild indexes, snapshots
    and leader epochs. Every byte removed is kept in a quarantine that --restore puts back.

    Exit status: 0 nothing to do or recovered, 1 damage left (or found by --dry-run) or a locked log dir (a dry
    run, which changes nothing, is allowed), 2 usage error, 3 unreadable input.
    """
    if restore_from is not None:
        if paths:
            raise fail("--restore undoes a recovery from its quarantine; it takes no paths", ExitCode.USAGE)
        _restore(restore_from, json_out)
        return
    if not paths:
        raise fail("Missing argument 'PATHS...': name segment files, partition directories or log directories", ExitCode.USAGE)
    from kcli.tools.recover import QuarantinePlacementError, recover, total_log_bytes

    with exit_on_errors(QuarantinePlacementError):
        total = total_log_bytes(paths)
        with byte_progress(total, "recover", progress_wanted(data_on_stdout=False) and not json_out) as advance:
            report = recover(paths, dry_run=dry_run, quarantine=quarantine, rebuild_indexes=rebuild_indexes, progress=advance)
    raise finish(report, lambda: _render(report), json_out=json_out)

def _restore(path: Path, json_out: bool) -> None:
    from kcli.tools.recover import restore

    with exit_on_errors():
        results = restore(path)
    if json_out:
        write_json_line({"restored": [_restore_json(r) for r in results]})
        return
    for r in results:
        sys.stdout.write(f"restored {r.partition_dir}: {len(r.restored)} changes undone, {len(r.skipped)} already "
                         f"as they were ({r.manifest})\n")


def _restore_json(result: RestoreResult) -> dict:
    return {"manifest": str(result.manifest), "partition": str(result.partition_dir),
            "restored": result.restored, "skipped": result.skipped}


def _render(report: RecoverReport) -> None:
    """Each action on stdout with file and byte range, problems on stderr, then the verdict and the restore commands."""
    from kcli.tools.report import Severity

    out = sys.stdout
    for p in report.partitions:
        if p.actions:
            verb = "would apply" if report.dry_run else ("applied" if p.applied else "not applied:")
            out.write(f"{p.directory}: log end offset {p.log_end_offset}; {verb} {_count(len(p.actions), 'action')}\n")
            for action in p.actions:
                out.write(f"  {_describe(action)}\n")
    for problem in report.problems:
        if not problem.code.startswith("needs_"):  # a dry run's repairs are listed above as actions
            err_console.print(f"{problem.severity.value}: {problem.describe()}", markup=False)
    for lock in report.locked:
        err_console.print(f"note: {lock} is held by another process (a running broker?): this dry run read the "
                          "files as they were; stop it before recovering", markup=False)
    changed = [p for p in report.partitions if p.actions]
    checked = (f"{_count(len(report.partitions), 'partition')}, {_count(report.segments, 'segment')}, "
               f"{report.bytes / 2**20:.1f} MiB checked")
    actions = f"{_count(len(report.actions), 'action')} in {_count(len(changed), 'partition')}"
    if not changed:
        errors = [p for p in report.problems if p.severity is Severity.ERROR]
        verdict = "nothing to do" if report.ok else f"PROBLEMS FOUND ({len(errors)}), nothing changed"
        out.write(f"{verdict}: {checked}\n")
    elif report.dry_run:
        out.write(f"dry run: {actions}, nothing changed; {checked}\n")
    else:
        # what the quarantine holds, not the size of the files replaced (a preallocated index is 10 MiB of zeros)
        out.write(f"recovered: {actions}, {report.stored_bytes} bytes kept in quarantine; {checked}\n")
        for command in report.restore_commands:
            out.write(f"to undo: {command}\n")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _describe(action: RecoveryAction) -> str:
    from kcli.storage.recovery import ActionKind

    offsets = ""
    if action.first_offset is not None:
        at_least = "at least " if action.lower_bound else ""
        offsets = (f", offsets {action.first_offset}..{action.last_offset} ({at_least}{_count(action.offsets or 0, 'offset')})"
                   if action.last_offset is not None else f", from offset {action.first_offset} (an unknown number)")
    if action.kind is ActionKind.RENAME:
        return f"rename   {action.file} -> {action.target}: {action.reason}"
    if action.kind is ActionKind.TRUNCATE:
        return (f"truncate {action.file} at byte {action.position}: bytes {action.position}..{action.end} "
                f"({action.bytes} bytes{offsets}): {action.reason}")
    if action.kind is ActionKind.DELETE:
        return f"delete   {action.file} ({action.bytes} bytes{offsets}): {action.reason}"
    return f"rebuild  {action.file}: {action.reason}"


__all__ = ["recover_cmd"]
