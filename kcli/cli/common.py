"""Shared CLI plumbing: exit codes, stderr messages, NDJSON writing, progress on terminals only."""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from enum import Enum, IntEnum
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from kcli.errors import InputError, KcliError
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

err_console = Console(stderr=True, highlight=False)


class ExitCode(IntEnum):
    """Documented in kctl(1): scripts branch on these."""

    OK = 0
    PROBLEMS = 1  # corruption or inconsistencies found
    USAGE = 2  # bad options or arguments (click's own usage errors exit 2 as well)
    UNREADABLE = 3  # input missing, unreadable, or not a Kafka file at all


def fail(message: str, code: ExitCode) -> typer.Exit:
    err_console.print(f"kctl: {message}", markup=False)
    return typer.Exit(int(code))


class Engine(str, Enum):
    """Where offline tools run: this machine (processes) or Spark (kcli/spark)."""

    LOCAL = "local"
    SPARK = "spark"


MasterOpt = Annotated[Optional[str], typer.Option(
    "--master", help="Spark master URL (--engine spark; default: spark.master from the environment, else local[*]).",
    show_default=False)]


def spark_session(engine: Engine, master: str | None, app_name: str):
    """The Spark engine's session (None for the local engine); exit 2 with one line when pyspark or Java is
    missing, or when --master comes without --engine spark. pyspark is imported only on this path."""
    if engine is not Engine.SPARK:
        if master is not None:
            raise fail("--master needs --engine spark", ExitCode.USAGE)
        return None
    try:
        from kcli.spark.session import SparkUnavailableError, get_session
    except ImportError as exc:
        raise fail(f"--engine spark needs pyspark: pip install 'kcli[spark]' ({exc})", ExitCode.USAGE) from None
    try:
        return get_session(master, app_name=app_name)
    except SparkUnavailableError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None


@contextmanager
def exit_on_errors(*usage: type[BaseException]):
    """The one mapping from library errors to exit codes: InputError 3, ``usage`` types 2, other KcliError 1."""
    try:
        yield
    except usage as exc:
        raise fail(exc.describe() if isinstance(exc, KcliError) else str(exc), ExitCode.USAGE) from None
    except InputError as exc:
        raise fail(exc.describe(), ExitCode.UNREADABLE) from None
    except KcliError as exc:
        raise fail(exc.describe(), ExitCode.PROBLEMS) from None


def finish(report_json: dict[str, Any], ok: bool, render, *, json_out: bool, quiet: bool = False) -> typer.Exit:
    """A report on stdout (one JSON object, or the command's rendering), then the exit status it earns."""
    if json_out:
        write_json_line(report_json)
    elif not quiet:
        render()
    return typer.Exit(int(ExitCode.OK if ok else ExitCode.PROBLEMS))


def write_json_line(obj: dict[str, Any], out=None) -> None:
    (out or sys.stdout).write(json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n")


def parse_timestamp(text: str | None) -> int | None:
    """Milliseconds since the epoch, or an ISO-8601 date-time (UTC unless it names a zone)."""
    if text is None:
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{text!r} is neither epoch milliseconds nor an ISO-8601 date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def progress_wanted(*, data_on_stdout: bool) -> bool:
    """Progress bars only for a person watching: stderr is a terminal and (if data goes to stdout) stdout is not."""
    if os.environ.get("CI") or not sys.stderr.isatty():
        return False
    return not (data_on_stdout and sys.stdout.isatty())


@contextmanager
def byte_progress(total: int, description: str, enabled: bool):
    """Yields an ``advance(n_bytes)`` callback; a rich bar on stderr when enabled."""
    if not enabled:
        yield lambda _n: None
        return
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
    )
    with progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)


@contextmanager
def stdout_pipe_guard():
    """`kctl dump-log ... | head` must end quietly when the reader goes away."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(0) from None
