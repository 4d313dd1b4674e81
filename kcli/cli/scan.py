"""`kctl scan`: per topic-partition statistics of log directories, locally or on Spark; SQL over the records."""

from __future__ import annotations

import json
import os
import shutil
import sys
import textwrap
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kcli.cli.common import (
    Engine,
    ExitCode,
    MasterOpt,
    byte_progress,
    err_console,
    exit_on_errors,
    fail,
    finish,
    parse_timestamp,
    progress_wanted,
    spark_session,
)

if TYPE_CHECKING:  # the engine and rich's tables are imported when the command runs
    from rich.table import Table

    from kcli.tools.scan import QueryResult, ScanReport

# kcli.tools.scan.DEFAULT_TOP, which --top's default shows (kept here: importing the engine for --help costs
# tens of milliseconds; tests/cli/test_startup.py checks the two agree).
DEFAULT_TOP = 5


def scan_cmd(
    paths: Annotated[list[str], typer.Argument(help="Segment files, partition directories or log directories.", show_default=False)],
    engine: Annotated[Engine, typer.Option("--engine", help="local: processes on this machine, one per segment; spark: a Spark job over the kafka-log data source.")] = Engine.LOCAL,
    master: MasterOpt = None,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Local engine processes (default: all usable cores).", show_default=False)] = None,
    top: Annotated[int, typer.Option("--top", min=0, help="Largest records listed per partition.")] = DEFAULT_TOP,
    now: Annotated[Optional[str], typer.Option("--now", help="Reference time for 'future' timestamps: epoch ms or ISO-8601 (default: when the scan starts).", show_default=False)] = None,
    sql: Annotated[Optional[str], typer.Option("--sql", help="Run this query over the `records` view instead of the statistics (Spark SQL, or SQLite with the local engine). key and value are text (NULL unless valid UTF-8), key_bytes and value_bytes the raw bytes: WHERE key = 'customer-4' works in both engines.", show_default=False)] = None,
    output: Annotated[Optional[str], typer.Option("--output", help="Also write the data records as Parquet into this new or empty directory (needs pyarrow: pip install 'kcli[parquet]').", show_default=False)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON report on stdout.")] = False,
    storage_option: Annotated[Optional[list[str]], typer.Option("--storage-option", help="KEY=VALUE for a remote store named by an fsspec URL (tiered storage; s3fs: endpoint_url, key, secret; local engine). Repeatable.", show_default=False)] = None,
) -> None:
    """Per topic-partition statistics: record counts, bytes by codec, offset and timestamp ranges, distinct keys,
    tombstone ratio, largest records, timestamp anomalies. Control records (transaction markers) are counted apart,
    never as records.

    Exit status: 0 ok, 1 damaged batches found (the rest is still counted), 2 usage error, 3 unreadable input.
    """
    if engine is Engine.SPARK and workers is not None:
        raise fail("--workers is for the local engine; Spark's parallelism comes from --master", ExitCode.USAGE)
    if sql is not None and output is not None:
        raise fail("--sql and --output are exclusive: write the records, or query them", ExitCode.USAGE)
    now_ms = parse_timestamp(now)
    session = spark_session(engine, master, "kctl scan")
    with exit_on_errors(ValueError):
        if session is not None:
            from kcli.spark.scan import query_spark, scan_spark

            if sql is not None:
                result = query_spark(session, paths, sql)
            else:
                report = scan_spark(session, paths, top=top, now_ms=now_ms, output=output)
        else:
            from kcli.tools.remote_inputs import parse_storage_options, remote_inputs
            from kcli.tools.scan import list_segments, query, scan

            # remote segments (fsspec URLs, tiered storage) are fetched and scanned as local ones
            with remote_inputs(paths, parse_storage_options(storage_option)) as remote:
                local = remote.paths
                total = sum(s.size for s in list_segments(local))
                with byte_progress(total, "scan", progress_wanted(data_on_stdout=True)) as advance:
                    if sql is not None:
                        result = query(local, sql, workers=workers, progress=advance)
                        result.problems = remote.rename_problems(result.problems) + remote.warnings
                    else:
                        report = scan(local, workers=workers, top=top, now_ms=now_ms, output=output,
                                      progress=advance)
                        report.problems = remote.rename_problems(report.problems) + remote.warnings
    if sql is not None:
        _problems(result.problems)
        raise finish(result, lambda: _render_query(result), json_out=json_out)
    _problems(report.problems)
    raise finish(report, lambda: _render(report), json_out=json_out)


def _problems(problems) -> None:
    for p in problems:
        err_console.print(f"{p.severity.value}: {p.describe()}", markup=False)


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _width() -> int | None:
    """The width to fit: $COLUMNS when set, else the terminal's; None (no limit) into a pipe or a file."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    return None


def _print_fitted(table: Table, width: int | None) -> bool:
    """Print ``table`` when it fits ``width`` at its natural width (every cell on one line); False otherwise."""
    from rich.console import Console

    natural = Console(width=10**6).measure(table).maximum
    if width is not None and natural > width:
        return False
    Console(highlight=False, soft_wrap=False, width=max(natural, 1)).print(table)
    return True


_COLUMNS = (("partition", "left"), ("records", "right"), ("batches", "right"), ("MiB", "right"),
            ("codecs (bytes)", "left"), ("offsets", "left"), ("timestamps", "left"), ("keys", "right"),
            ("tombstones", "right"), ("late/future/<2000", "right"), ("largest", "right"), ("control", "right"))
# The block layout: one line per group, fields "name value" (a group wider than the terminal breaks between fields).
_BLOCK_LINES = (("records", "batches", "MiB", "offsets", "control"),
                ("keys", "tombstones", "late/future/<2000", "largest"),
                ("codecs (bytes)",), ("timestamps",))


def _cells(report: ScanReport) -> list[dict[str, str]]:
    names = [f"{p.topic}-{p.partition}" for p in report.partitions]
    rows = []
    for p in report.partitions:
        name = f"{p.topic}-{p.partition}"
        if p.partition < 0 or names.count(name) > 1:  # not a partition dir, or the same one in two log dirs
            name = p.directory
        rows.append({
            "partition": name, "records": str(p.records), "batches": str(p.batches), "MiB": f"{p.bytes / 2**20:.1f}",
            "codecs (bytes)": ", ".join(f"{codec} {100 * c.bytes / p.bytes:.0f}%" for codec, c in sorted(p.codecs.items()))
            if p.bytes else "-",
            "offsets": "-" if p.first_offset is None else f"{p.first_offset}..{p.last_offset}",
            "timestamps": "-" if p.min_timestamp is None else f"{_iso(p.min_timestamp)}..{_iso(p.max_timestamp)}",
            "keys": str(p.distinct_keys), "tombstones": f"{100 * p.tombstone_ratio:.1f}%",
            "late/future/<2000": f"{p.out_of_order}/{p.future}/{p.before_2000}",
            "largest": str(p.largest_records[0].size) if p.largest_records else "-", "control": str(p.control_records),
        })
    return rows


def _render(report: ScanReport) -> None:
    """One row per partition when the table fits the width; else one block per partition. A partition's
    name is never shortened."""
    from rich.table import Table
    from rich.text import Text

    width = _width()
    rows = _cells(report)
    table = Table(show_edge=False, header_style="bold")
    for name, justify in _COLUMNS:
        table.add_column(name, justify=justify, no_wrap=True)
    for row in rows:
        table.add_row(*(Text(row[name]) for name, _justify in _COLUMNS))
    if not _print_fitted(table, width):
        _print_blocks(rows, width or 80)
    mib = report.total("segment_bytes") / 2**20
    rate = mib / report.seconds if report.seconds > 0 else 0.0
    verdict = "ok" if report.is_ok() else f"PROBLEMS FOUND ({len(report.problems)})"
    where = f"; Parquet in {report.output}" if report.output else ""
    summary = (f"{verdict}: {len(report.partitions)} partitions, {report.total('segments')} segments, "
               f"{report.total('records')} records, {mib:.1f} MiB in {report.seconds:.2f}s ({rate:.0f} MiB/s, "
               f"{report.engine} engine){where}")
    sys.stdout.write((textwrap.fill(summary, width, break_long_words=False, break_on_hyphens=False)
                      if width else summary) + "\n")


def _print_blocks(rows: list[dict[str, str]], width: int) -> None:
    from rich.console import Console
    from rich.text import Text

    out = Console(highlight=False, soft_wrap=True, width=width)
    for row in rows:
        out.print(Text(row["partition"], style="bold"))
        for group in _BLOCK_LINES:
            line = ""
            for name in group:
                field = f"{name.split(' ')[0]} {row[name]}"
                if line and 2 + len(line) + 2 + len(field) > width:
                    out.print(Text("  " + line))
                    line = ""
                line = f"{line}  {field}" if line else field
            out.print(Text("  " + line))


def _render_query(result: QueryResult) -> None:
    """The rows as a table: at its natural width when it fits (or into a pipe), else folded to the width."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from kcli.tools.scan import json_value

    width = _width()
    table = Table(show_edge=False, header_style="bold")
    for name in result.columns:
        table.add_column(name, overflow="fold")
    for row in result.rows:
        cells = []
        for value in row:
            v = json_value(value)
            cells.append("null" if v is None else v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
        table.add_row(*(Text(c) for c in cells))
    if not _print_fitted(table, width):
        Console(highlight=False, soft_wrap=False, width=width).print(table)
    sys.stdout.write(f"{len(result.rows)} rows in {result.seconds:.2f}s ({result.engine} engine)\n")


__all__ = ["scan_cmd"]
