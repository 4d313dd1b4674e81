"""`kctl dump-log`: kafka-dump-log, line-compatible, plus NDJSON and index-assisted range filters."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from kcli.cli.common import ExitCode, byte_progress, fail, parse_timestamp, progress_wanted, stdout_pipe_guard
from kcli.tools.render import BytesEncoding  # an option type: needed to define the command (and cheap)

if TYPE_CHECKING:  # the reader and its renderings are imported when the command runs
    from kcli.tools.dump import DumpOptions, Encodings

_JAVA_STRING_DECODERS = {"kafka.serializer.StringDecoder", "org.apache.kafka.tools.api.StringDecoder"}


def dump_log(
    paths: Annotated[Optional[list[str]], typer.Argument(help="Segment, index, snapshot or checkpoint files, partition directories or log directories.", show_default=False)] = None,
    files: Annotated[Optional[list[str]], typer.Option("--files", help="Comma-separated files, as kafka-dump-log takes them (repeatable).", show_default=False)] = None,
    print_data_log: Annotated[bool, typer.Option("--print-data-log", help="Print record keys and payloads (implies --deep-iteration).")] = False,
    deep_iteration: Annotated[bool, typer.Option("--deep-iteration", help="Print every record inside each batch.")] = False,
    verify_index_only: Annotated[bool, typer.Option("--verify-index-only", help="For .index/.timeindex files: check entries against the log, print nothing per entry.")] = False,
    index_sanity_check: Annotated[bool, typer.Option("--index-sanity-check", help="Run the broker's index sanity check on .index/.timeindex files.")] = False,
    max_message_size: Annotated[int, typer.Option("--max-message-size", help="Bytes read per index entry when checking a .index.", min=1)] = 5 * 1024 * 1024,
    max_bytes: Annotated[Optional[int], typer.Option("--max-bytes", help="Only read batches within the first N bytes of each .log.", min=0, show_default=False)] = None,
    offsets_decoder: Annotated[bool, typer.Option("--offsets-decoder", help="Decode __consumer_offsets records.")] = False,
    transaction_log_decoder: Annotated[bool, typer.Option("--transaction-log-decoder", help="Decode __transaction_state records.")] = False,
    cluster_metadata_decoder: Annotated[bool, typer.Option("--cluster-metadata-decoder", help="Decode KRaft __cluster_metadata records and snapshots.")] = False,
    remote_log_metadata_decoder: Annotated[bool, typer.Option("--remote-log-metadata-decoder", help="Decode tiered storage's __remote_log_metadata records (KIP-405).")] = False,
    skip_record_metadata: Annotated[bool, typer.Option("--skip-record-metadata", help="Print only key and payload per record.")] = False,
    key_decoder_class: Annotated[Optional[str], typer.Option("--key-decoder-class", hidden=True)] = None,
    value_decoder_class: Annotated[Optional[str], typer.Option("--value-decoder-class", hidden=True)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="NDJSON on stdout: one object per file, batch, record, index entry and notice, then a summary.")] = False,
    record_format: Annotated[Optional[str], typer.Option("--format", "-f", help="Print each record with a kcat -f format string (%t %p %o %k %K %s %S %R %T %h %c %%, \\n \\t \\r \\xHH escapes) instead of kafka-dump-log lines.", show_default=False)] = None,
    key_encoding: Annotated[BytesEncoding, typer.Option("--key-encoding", help="How printed keys appear: auto (--json: text or base64; text: UTF-8; --format: raw bytes), utf8, hex, base64.", case_sensitive=False)] = BytesEncoding.AUTO,
    value_encoding: Annotated[BytesEncoding, typer.Option("--value-encoding", help="How printed values and header values appear (as --key-encoding).", case_sensitive=False)] = BytesEncoding.AUTO,
    start_offset: Annotated[Optional[int], typer.Option("--start-offset", help="First offset to show (seeks with the .index).", min=0, show_default=False)] = None,
    end_offset: Annotated[Optional[int], typer.Option("--end-offset", help="Last offset to show, inclusive.", min=0, show_default=False)] = None,
    start_time: Annotated[Optional[str], typer.Option("--start-time", help="First timestamp to show: epoch ms or ISO-8601 (seeks with the .timeindex).", show_default=False)] = None,
    end_time: Annotated[Optional[str], typer.Option("--end-time", help="Last timestamp to show, inclusive.", show_default=False)] = None,
    key: Annotated[Optional[str], typer.Option("--key", help="Only records whose key is exactly these bytes (UTF-8).", show_default=False)] = None,
    key_regex: Annotated[Optional[str], typer.Option("--key-regex", help="Only records whose key matches this regular expression (Python syntax, searched in the key's bytes).", show_default=False)] = None,
    header: Annotated[Optional[list[str]], typer.Option("--header", help="Only records with this header, NAME or NAME=VALUE (exact; repeatable, all must match).", show_default=False)] = None,
    grep: Annotated[Optional[str], typer.Option("--grep", help="Only records whose value matches this regular expression (Python syntax, searched in the value's bytes).", show_default=False)] = None,
    count: Annotated[Optional[int], typer.Option("--count", help="Stop after N records (after the filters).", min=1, show_default=False)] = None,
    follow: Annotated[bool, typer.Option("--follow", "-F", help="Tail a live partition directory like tail -F: follow segment rolls and retention deletes until interrupted.")] = False,
    poll_interval: Annotated[float, typer.Option("--poll-interval", help="Seconds between looks at a followed partition that has not grown.", min=0.01)] = 0.3,
    storage_option: Annotated[Optional[list[str]], typer.Option("--storage-option", help="KEY=VALUE for a remote store named by an fsspec URL (tiered storage; s3fs: endpoint_url, key, secret). Repeatable.", show_default=False)] = None,
) -> None:
    """Dump log segments, indexes, producer snapshots, checkpoints and internal topics.

    Text output matches kafka-dump-log line for line; its summaries (index mismatches, non-consecutive
    offsets) go to stderr. Exit status: 0 clean, 1 corrupt input found, 2 usage error, 3 unreadable input.
    """
    all_paths = list(paths or [])
    for group in files or []:
        all_paths.extend(p for p in group.split(",") if p)
    if not all_paths:
        raise fail('Missing required argument "[files]": name files or directories to dump', ExitCode.USAGE)
    from kcli.tools.kafka07 import is_kafka07_input

    if is_kafka07_input(all_paths):  # Kafka 0.7's .kafka segments (byte offsets): kcli.tools.kafka07
        from kcli.cli.kafka07 import dump_kafka07

        return dump_kafka07(all_paths, deep=deep_iteration or print_data_log, print_payload=print_data_log,
                            json_out=json_out)
    for cls in (key_decoder_class, value_decoder_class):
        if cls is not None and cls not in _JAVA_STRING_DECODERS:
            raise fail(f"Java decoder class {cls} is not available; use --json with --key-encoding/--value-encoding", ExitCode.USAGE)
    from kcli.tools.dump import Decoder, DumpOptions, Encodings

    decoders = [d for flag, d in ((offsets_decoder, Decoder.OFFSETS), (transaction_log_decoder, Decoder.TRANSACTION_LOG),
                                  (cluster_metadata_decoder, Decoder.CLUSTER_METADATA),
                                  (remote_log_metadata_decoder, Decoder.REMOTE_LOG_METADATA)) if flag]
    headers = parse_headers(header)
    if record_format is not None and json_out:
        raise fail("--format and --json are two ways to print records: choose one", ExitCode.USAGE)
    options = DumpOptions(
        deep_iteration=deep_iteration,
        print_data=print_data_log or key_decoder_class is not None or value_decoder_class is not None,
        verify_index_only=verify_index_only,
        index_sanity_check=index_sanity_check,
        max_message_size=max_message_size,
        max_bytes=max_bytes,
        decoder=decoders[0] if decoders else Decoder.NONE,  # kafka-dump-log's precedence: offsets first
        skip_record_metadata=skip_record_metadata,
        start_offset=start_offset,
        end_offset=end_offset,
        start_timestamp=parse_timestamp(start_time),
        end_timestamp=parse_timestamp(end_time),
        key=None if key is None else key.encode("utf-8", "surrogateescape"),
        key_regex=key_regex,
        headers=tuple(headers),
        grep=grep,
        count=count,
        skip_control=record_format is not None,  # kcat's view: control records are not records
    )
    encodings = Encodings(key_encoding, value_encoding)
    forced = key_encoding is not BytesEncoding.AUTO or value_encoding is not BytesEncoding.AUTO
    if forced and not (json_out or record_format is not None or options.print_data):
        # Without printed keys and values a forced encoding would do nothing: refuse rather than ignore.
        raise fail("--key-encoding and --value-encoding apply to printed keys and values: add --print-data-log, "
                   "--format or --json", ExitCode.USAGE)
    run_dump(all_paths, options, encodings, record_format, json_out=json_out, follow=follow,
             poll_interval=poll_interval, storage_option=storage_option)


def parse_headers(specs: list[str] | None) -> list[tuple[str, bytes | None]]:
    """--header NAME or NAME=VALUE, as (name, value bytes or None)."""
    headers = []
    for spec in specs or []:
        name, eq, value = spec.partition("=")
        if not name:
            raise fail(f"--header {spec!r}: give NAME or NAME=VALUE", ExitCode.USAGE)
        headers.append((name, value.encode("utf-8", "surrogateescape") if eq else None))
    return headers


def run_dump(paths: list[str], options: DumpOptions, encodings: Encodings, record_format: str | None, *,
             json_out: bool, follow: bool, poll_interval: float, records_only: bool = False,
             storage_option: list[str] | None = None) -> None:
    """The reading and printing behind dump-log and cat; raises typer.Exit with the exit status.
    ``records_only``: JSON output holds the record objects alone (kctl cat), notices go to stderr. Paths that
    are fsspec URLs (tiered storage's remote store) are fetched first and read as local files."""
    if any("://" in p for p in paths):
        from kcli.cli.common import err_console, exit_on_errors
        from kcli.tools.remote_inputs import parse_storage_options, remote_inputs

        if follow:
            raise fail("--follow reads a local partition directory, not a remote store", ExitCode.USAGE)
        with exit_on_errors(), remote_inputs(paths, parse_storage_options(storage_option)) as remote:
            dirs = {str(Path(local).parent): url.rsplit("/", 1)[0] for local, url in remote.names.items()}
            for local, url in dirs.items():  # the fetched copies' names appear in the dump: say whose they are
                err_console.print(f"remote: {url} is read as {local}", markup=False)
            for problem in remote.warnings:
                err_console.print(f"{problem.severity.value}: {problem.describe()}", markup=False)
            run_dump(remote.paths, options, encodings, record_format, json_out=json_out, follow=False,
                     poll_interval=poll_interval, records_only=records_only)
        return
    from kcli.tools.dump import DumpRun

    formatter = None
    if record_format is not None:
        from kcli.tools.dump_format import RecordFormat

        formatter = RecordFormat(record_format, encodings)
    out = sys.stdout
    if follow:
        if len(paths) != 1:
            raise fail("--follow takes one partition directory", ExitCode.USAGE)
        from kcli.tools.dump_follow import FollowRun

        def idle(seconds: float) -> None:  # nothing new: what was printed reaches the reader now
            out.flush()
            time.sleep(seconds)

        run = FollowRun(paths[0], options, poll_interval=poll_interval, sleep=idle)
    else:
        run = DumpRun(paths, options)
    printer = _Printer(run, options, encodings, formatter, json_out, records_only, out)
    with stdout_pipe_guard(), byte_progress(run.total_bytes, "dump-log",
                                            not follow and progress_wanted(data_on_stdout=True)) as advance:
        run.progress = advance
        if not follow:
            printer.write()
            printer.close()
        else:
            _follow(printer)
    if run.summary.unreadable:
        raise typer.Exit(int(ExitCode.UNREADABLE))
    if run.summary.errors:
        raise typer.Exit(int(ExitCode.PROBLEMS))


def _follow(printer: _Printer) -> None:
    """Until interrupted: Ctrl-C and SIGTERM end a follow cleanly (exit 0), after the closing summary."""

    def terminate(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        try:
            printer.write()
        except KeyboardInterrupt:
            pass
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        printer.close()
    except KeyboardInterrupt:
        pass  # a second Ctrl-C while closing
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Printer:
    def __init__(self, run, options: DumpOptions, encodings: Encodings, formatter, json_out: bool,
                 records_only: bool, out):
        self.run, self.options, self.encodings, self.formatter = run, options, encodings, formatter
        self.json_out, self.records_only, self.out = json_out, records_only, out

    def write(self) -> None:
        from kcli.tools.dump import DumpNotice, DumpRecord, DumpRecords
        from kcli.tools.dump_json import json_text
        from kcli.tools.dump_text import stderr_lines, stdout_lines

        run, options, encodings, out = self.run, self.options, self.encodings, self.out
        if self.formatter is not None:
            raw = out.buffer
            lines_of = self.formatter.lines
            for item in run:
                data = lines_of(item)
                if data:
                    raw.write(data)
                elif isinstance(item, DumpNotice):  # only records go to stdout; notices, even kafka-dump-log's, to stderr
                    sys.stderr.write(item.text + "\n")
            return
        if self.records_only:  # JSON record objects alone
            for item in run:
                if isinstance(item, (DumpRecords, DumpRecord)):
                    out.write(json_text(item, encodings))
                elif isinstance(item, DumpNotice):
                    sys.stderr.write(item.text + "\n")
            return
        json_out = self.json_out
        for item in run:
            if json_out:
                out.write(json_text(item, encodings))  # a batch of records in one piece (compiled formatter)
                continue
            lines = stdout_lines(item, options, encodings)
            if lines:
                out.write("\n".join(lines) + "\n")
            for line in stderr_lines(item):
                sys.stderr.write(line + "\n")

    def close(self) -> None:
        from kcli.tools.dump_json import json_lines
        from kcli.tools.dump_text import selection_line, summary_lines

        out, summary = self.out, self.run.summary
        if self.json_out and not self.records_only:
            out.write(json_lines(summary, self.encodings)[0] + "\n")
            out.flush()
            return
        out.flush()
        if self.records_only:
            return  # kctl cat: kafka-dump-log's closing sections (index checks, offset gaps) are not its business
        for line in summary_lines(summary):
            sys.stderr.write(line + "\n")
        if self.options.selecting and self.formatter is None:
            sys.stderr.write(selection_line(summary) + "\n")
