"""`kctl verify`: check segments, indexes, snapshots and checkpoints; exit status for scripts."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from kcli.cli.common import (
    Engine,
    MasterOpt,
    byte_progress,
    err_console,
    exit_on_errors,
    finish,
    progress_wanted,
    spark_session,
)

if TYPE_CHECKING:  # the checks are imported when the command runs
    from kcli.tools.verify import VerifyReport


def verify_cmd(
    paths: Annotated[list[str], typer.Argument(help="Segment or index files, partition directories or log directories.", show_default=False)],
    deep: Annotated[bool, typer.Option("--deep", help="Also decompress and decode every record (slower).")] = False,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings (offset gaps, preallocated indexes, leftovers) also fail.")] = False,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON report on stdout.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No output; the exit status tells.")] = False,
    engine: Annotated[Engine, typer.Option("--engine", help="local: this process; spark: one Spark task per partition directory (same checks, same report).")] = Engine.LOCAL,
    master: MasterOpt = None,
    storage_option: Annotated[list[str] | None, typer.Option("--storage-option", help="KEY=VALUE for a remote store named by an fsspec URL (tiered storage; s3fs: endpoint_url, key, secret). Repeatable.", show_default=False)] = None,
) -> None:
    """Verify CRCs, batch framing, offsets, indexes, the .txnindex, producer snapshots and checkpoints.

    Exit status: 0 clean, 1 problems found, 2 usage error, 3 unreadable input.
    """
    session = spark_session(engine, master, "kctl verify")  # None for the local engine; pyspark only if spark
    with exit_on_errors():
        if session is not None:
            from kcli.spark.verify import verify_spark

            report = verify_spark(session, paths, deep=deep)
        else:
            from kcli.tools.remote_inputs import parse_storage_options, remote_inputs
            from kcli.tools.verify import total_bytes, verify

            # remote segments (fsspec URLs) are fetched and read as local ones; problems name the objects
            with remote_inputs(paths, parse_storage_options(storage_option)) as remote:
                total = total_bytes(remote.paths)
                with byte_progress(total, "verify", progress_wanted(data_on_stdout=False) and not quiet) as advance:
                    report = verify(remote.paths, deep=deep, strict=strict, progress=advance)
                report.problems = remote.rename_problems(report.problems) + remote.warnings
                report.paths = list(paths)
    report.strict = strict
    raise finish(report, lambda: _render(report, strict), json_out=json_out, quiet=quiet)

def _render(report: VerifyReport, strict: bool) -> None:
    """Problems on stderr, one grep-friendly line each; the verdict on stdout."""
    for p in report.problems:
        err_console.print(f"{p.severity.value}: {p.describe()}", markup=False)
    for note in report.notes:
        err_console.print(f"note: {note}", markup=False)
    errors, warnings = len(report.errors), len(report.warnings)
    verdict = "clean" if report.is_clean(strict=strict) else "PROBLEMS FOUND"
    mib = report.bytes / (1024 * 1024)
    rate = mib / report.seconds if report.seconds > 0 else 0.0
    sys.stdout.write(
        f"{verdict}: {report.files} files, {report.segments} segments, {report.batches} batches, "
        f"{report.records} records, {mib:.1f} MiB in {report.seconds:.2f}s ({rate:.0f} MiB/s); "
        f"{errors} errors, {warnings} warnings\n"
    )


__all__ = ["verify_cmd"]
