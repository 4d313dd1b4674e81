"""`kctl scan`: per topic-partition statistics of log directories, locally or on Spark; SQL over the records."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

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
from kcli.tools.scan import DEFAULT_TOP, QueryResult, ScanReport, json_value, list_segments


def scan_cmd(
    paths: Annotated[list[str], typer.Argument(help="Segment files, partition directories or log directories.", show_default=False)],
    engine: Annotated[Engine, typer.Option("--engine", help="local: processes on this machine, one per segment; spark: a Spark job over the kafka-log data source.")] = Engine.LOCAL,
    master: MasterOpt = None,
    workers: Annotated[Optional[int], typer.Option("--workers", min=1, help="Local engine processes (default: all usable cores).", show_default=False)] = None,
    top: Annotated[int, typer.Option("--top", min=0, help="Largest records listed per partition.")] = DEFAULT_TOP,
    now: Annotated[Optional[str], typer.Option("--now", help="Reference time for 'future' timestamps: epoch ms or ISO-8601 (default: when the scan starts).", show_default=False)] = None,
    sql: Annotated[Optional[str], typer.Option("--sql", help="Run this query over the `records` view instead of the statistics (Spark SQL, or SQLite with the local engine).", show_default=False)] = None,
    output: Annotated[Optional[str], typer.Option("--output", help="Also write the data records as Parquet into this new or empty directory.", show_default=False)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON report on stdout.")] = False,
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
            from kcli.tools.scan import query, scan

            total = sum(s.size for s in list_segments(paths))
            with byte_progress(total, "scan", progress_wanted(data_on_stdout=True)) as advance:
                if sql is not None:
                    result = query(paths, sql, workers=workers, progress=advance)
                else:
                    report = scan(paths, workers=workers, top=top, now_ms=now_ms, output=output, progress=advance)
    if sql is not None:
        _problems(result.problems)
        raise finish(result, lambda: _render_query(result), json_out=json_out)
    _problems(report.problems)
    raise finish(report, lambda: _render(report), json_out=json_out)


def _problems(problems) -> None:
    for p in problems:
        err_console.print(f"error: {p.describe()}", markup=False)


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _console() -> Console:
    # On a terminal rich fits the table to it; into a pipe or file, keep rows on one line.
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 220)


def _render(report: ScanReport) -> None:
    out = _console()
    table = Table(show_edge=False, header_style="bold")
    for name, justify in (("partition", "left"), ("records", "right"), ("batches", "right"), ("MiB", "right"),
                          ("codecs (bytes)", "left"), ("offsets", "left"), ("timestamps", "left"),
                          ("keys", "right"), ("tombstones", "right"), ("late/future/<2000", "right"),
                          ("largest", "right"), ("control", "right")):
        table.add_column(name, justify=justify)
    names = [f"{p.topic}-{p.partition}" for p in report.partitions]
    for p in report.partitions:
        codecs = ", ".join(f"{name} {100 * c.bytes / p.bytes:.0f}%" for name, c in sorted(p.codecs.items())) if p.bytes else "-"
        offsets = "-" if p.first_offset is None else f"{p.first_offset}..{p.last_offset}"
        stamps = "-" if p.min_timestamp is None else f"{_iso(p.min_timestamp)}..{_iso(p.max_timestamp)}"
        largest = str(p.largest_records[0].size) if p.largest_records else "-"
        name = f"{p.topic}-{p.partition}"
        if p.partition < 0 or names.count(name) > 1:  # not a partition dir, or the same one in two log dirs
            name = p.directory
        cells = (name, str(p.records), str(p.batches), f"{p.bytes / 2**20:.1f}", codecs, offsets, stamps,
                 str(p.distinct_keys), f"{100 * p.tombstone_ratio:.1f}%",
                 f"{p.out_of_order}/{p.future}/{p.before_2000}", largest, str(p.control_records))
        table.add_row(*(Text(c) for c in cells))
    out.print(table)
    mib = report.total("segment_bytes") / 2**20
    rate = mib / report.seconds if report.seconds > 0 else 0.0
    verdict = "ok" if report.is_ok() else f"PROBLEMS FOUND ({len(report.problems)})"
    where = f"; Parquet in {report.output}" if report.output else ""
    sys.stdout.write(f"{verdict}: {len(report.partitions)} partitions, {report.total('segments')} segments, "
                     f"{report.total('records')} records, {mib:.1f} MiB in {report.seconds:.2f}s ({rate:.0f} MiB/s, "
                     f"{report.engine} engine){where}\n")


def _render_query(result: QueryResult) -> None:
    out = _console()
    table = Table(show_edge=False, header_style="bold")
    for name in result.columns:
        table.add_column(name)
    for row in result.rows:
        cells = []
        for value in row:
            v = json_value(value)
            cells.append("null" if v is None else v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))
        table.add_row(*(Text(c) for c in cells))
    out.print(table)
    sys.stdout.write(f"{len(result.rows)} rows in {result.seconds:.2f}s ({result.engine} engine)\n")


__all__ = ["scan_cmd"]
