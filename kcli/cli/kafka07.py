"""`kctl convert-07`, and `kctl dump-log` over Kafka 0.7 segments (.kafka): kcli.tools.kafka07, rendered."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from kcli.cli.common import ExitCode, err_console, exit_on_errors, finish, write_json_line


def convert07_cmd(
    source: Annotated[str, typer.Argument(help="A Kafka 0.7 partition directory (<topic>-<partition> holding .kafka segments).", show_default=False)],
    destination: Annotated[str, typer.Argument(help="The new partition directory, <log dir>/<topic>-<partition>: absent or empty.", show_default=False)],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be converted; write nothing.")] = False,
    segment_bytes: Annotated[int, typer.Option("--segment-bytes", help="segment.bytes of the new log.", min=1024)] = 1024 * 1024 * 1024,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON report on stdout.")] = False,
) -> None:
    """Convert a Kafka 0.7 log into a modern topic's partition, the broker stopped: each message becomes a record
    (a compressed wrapper one batch of the same codec), offsets renumbered from 0, and kafka07-offsets.csv
    (byte_offset,offset,records per 0.7 message) written beside the new segments.

    Exit status: 0 converted (or planned), 1 damaged source (nothing written), 2 usage error, 3 unreadable.
    """
    from kcli.errors import UsageError
    from kcli.tools.kafka07 import convert

    with exit_on_errors(UsageError):
        report = convert(source, destination, apply=not dry_run, segment_bytes=segment_bytes)

    def render() -> None:
        for p in report.problems:
            err_console.print(f"{p.severity.value}: {p.describe()}", markup=False)
        verb = "converted" if report.applied else "would convert"
        sys.stdout.write(f"{verb} {report.messages} messages ({report.records} records) from {report.segments} "
                         f"segments of {report.source} into {report.destination}: offsets 0..{report.log_end_offset - 1}"
                         f" for byte offsets {report.first_byte_offset}..{report.next_byte_offset}"
                         + (f"; offset map {report.offset_map}" if report.offset_map else "") + "\n")

    raise finish(report, render, json_out=json_out)


def dump_kafka07(paths: list[str], *, deep: bool, print_payload: bool, json_out: bool) -> None:
    """dump-log over .kafka segments: 0.7 DumpLogSegments' lines (or NDJSON); problems on stderr, exit 1."""
    from kcli.tools.kafka07 import dump_segments, dump_lines
    from kcli.tools.render import encode_bytes

    problems = 0
    for dump in dump_segments(paths, deep=deep):
        if json_out:
            write_json_line({"type": "file", "file": str(dump.path), "start_offset": dump.start_offset})
            for message in dump.messages:
                write_json_line(message.to_json(dump.path, encode_bytes))
            write_json_line({"type": "tail", "file": str(dump.path), "offset": dump.tail_offset})
        else:
            sys.stdout.write("\n".join(dump_lines(dump, print_payload=print_payload)) + "\n")
        if dump.problem is not None:
            problems += 1
            if json_out:
                write_json_line({"type": "problem", **dump.problem.to_json()})
            err_console.print(f"error: {dump.problem.describe()}", markup=False)
    sys.stdout.flush()
    if problems:
        raise typer.Exit(int(ExitCode.PROBLEMS))
