"""Shared CLI plumbing: exit codes, stderr messages, NDJSON writing, progress on terminals only."""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from datetime import datetime, timezone
from enum import Enum
from collections.abc import Iterator
from typing import Annotated, Any, Optional

import typer
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from kcli.cli.errors import ExitCode, err_console, exit_code_for, fail, report_exit_code
from kcli.errors import KcliError

__all__ = ["ExitCode", "err_console", "fail"]  # re-exported: commands import them from here


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
    """Exceptions of the ``usage`` types exit 2; everything else goes to the exit-status table (cli/errors.py)."""
    try:
        yield
    except usage as exc:
        raise fail(exc.describe() if isinstance(exc, KcliError) else str(exc), ExitCode.USAGE) from None


def finish(report, render, *, json_out: bool, quiet: bool = False) -> typer.Exit:
    """A report on stdout (one JSON object, or the command's rendering), then the exit status it earns
    (``report_exit_code``: 0 ok, 1 problems, 3 unreadable input)."""
    if json_out:
        write_json_line(report.to_json())
    elif not quiet:
        render()
    return typer.Exit(int(report_exit_code(report)))


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


@contextmanager
def kafka_client(bootstrap: str | None, timeout: float, client_id: str) -> Iterator[Any]:
    """A KafkaClient for an online command: no --bootstrap-server or a malformed one is a usage error (2); a
    library error inside the block becomes its one-line message and exit status; the client is closed."""
    from kcli.client import KafkaClient
    from kcli.client.client import parse_bootstrap

    if not bootstrap:
        raise fail("no Kafka given: use --bootstrap-server host:port or set KCTL_BOOTSTRAP_SERVER", ExitCode.USAGE)
    try:
        parse_bootstrap(bootstrap)
    except KcliError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    client = KafkaClient(bootstrap, timeout=timeout, client_id=client_id)
    try:
        yield client
    except KcliError as exc:
        raise fail(exc.describe(), exit_code_for(exc) or ExitCode.PROBLEMS) from None
    finally:
        client.close()


# The options every online command shares (one definition: the same flags, env var and help everywhere).
BootstrapOpt = Annotated[Optional[str], typer.Option(
    "--bootstrap-server", "-b", envvar="KCTL_BOOTSTRAP_SERVER", show_default=False,
    help="host:port[,host:port...] of any Kafka-protocol broker of the cluster (default: $KCTL_BOOTSTRAP_SERVER).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Write one JSON object to standard output.")]
