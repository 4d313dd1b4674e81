"""`kctl cat`: kcat's consumer output from log files, on dump-log's reader (records only, kcat's options)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kcli.cli.common import parse_timestamp
from kcli.cli.dump_log import parse_headers, run_dump
from kcli.tools.render import BytesEncoding


def cat_cmd(
    paths: Annotated[list[str], typer.Argument(help="Partition directories, segments (.log) or log directories.", show_default=False)],
    record_format: Annotated[Optional[str], typer.Option("--format", "-f", help="kcat -f format string (default %s\\n, or %k<delim>%s\\n with -K).", show_default=False)] = None,
    key_delimiter: Annotated[Optional[str], typer.Option("--key-delimiter", "-K", help="Print the key, this delimiter, then the value (kcat -K).", show_default=False)] = None,
    start_offset: Annotated[Optional[int], typer.Option("--start-offset", "-o", help="First offset (seeks with the .index).", min=0, show_default=False)] = None,
    end_offset: Annotated[Optional[int], typer.Option("--end-offset", help="Last offset, inclusive.", min=0, show_default=False)] = None,
    start_time: Annotated[Optional[str], typer.Option("--start-time", help="First timestamp: epoch ms or ISO-8601 (seeks with the .timeindex).", show_default=False)] = None,
    end_time: Annotated[Optional[str], typer.Option("--end-time", help="Last timestamp, inclusive.", show_default=False)] = None,
    count: Annotated[Optional[int], typer.Option("--count", "-c", help="Stop after N records (kcat -c).", min=1, show_default=False)] = None,
    key: Annotated[Optional[str], typer.Option("--key", help="Only records whose key is exactly these bytes (UTF-8).", show_default=False)] = None,
    key_regex: Annotated[Optional[str], typer.Option("--key-regex", help="Only records whose key matches this regular expression.", show_default=False)] = None,
    header: Annotated[Optional[list[str]], typer.Option("--header", help="Only records with this header, NAME or NAME=VALUE (repeatable).", show_default=False)] = None,
    grep: Annotated[Optional[str], typer.Option("--grep", help="Only records whose value matches this regular expression.", show_default=False)] = None,
    follow: Annotated[bool, typer.Option("--follow", "-F", help="Tail a live partition directory until interrupted.")] = False,
    poll_interval: Annotated[float, typer.Option("--poll-interval", help="Seconds between looks at a followed partition that has not grown.", min=0.01)] = 0.3,
    key_encoding: Annotated[BytesEncoding, typer.Option("--key-encoding", help="Keys as auto (raw bytes; --json: text or base64), utf8, hex or base64.", case_sensitive=False)] = BytesEncoding.AUTO,
    value_encoding: Annotated[BytesEncoding, typer.Option("--value-encoding", help="Values and header values, as --key-encoding.", case_sensitive=False)] = BytesEncoding.AUTO,
    json_out: Annotated[bool, typer.Option("--json", help="One JSON object per record (dump-log's record objects), nothing else.")] = False,
    storage_option: Annotated[Optional[list[str]], typer.Option("--storage-option", help="KEY=VALUE for a remote store named by an fsspec URL (tiered storage; s3fs: endpoint_url, key, secret). Repeatable.", show_default=False)] = None,
) -> None:
    """Print the records of log files as kcat -C prints a topic: the value per line, or a -f format.

    The same reader, filters and options as `kctl dump-log --format`; control records are left out.
    Exit status: 0 ok, 1 corrupt input found, 2 usage error, 3 unreadable input.
    """
    from kcli.tools.dump import DumpOptions, Encodings

    if record_format is None and not json_out:
        record_format = "%s\\n" if key_delimiter is None else "%k" + key_delimiter.replace("%", "%%") + "%s\\n"
    options = DumpOptions(
        deep_iteration=True,
        start_offset=start_offset,
        end_offset=end_offset,
        start_timestamp=parse_timestamp(start_time),
        end_timestamp=parse_timestamp(end_time),
        key=None if key is None else key.encode("utf-8", "surrogateescape"),
        key_regex=key_regex,
        headers=tuple(parse_headers(header)),
        grep=grep,
        count=count,
        skip_control=True,
        logs_only=True,  # records only: indexes, snapshots and checkpoints would add dump-log's notes on stderr
    )
    if json_out and record_format is not None:
        from kcli.cli.common import ExitCode, fail

        raise fail("--format and --json are two ways to print records: choose one", ExitCode.USAGE)
    run_dump(paths, options, Encodings(key_encoding, value_encoding), record_format, json_out=json_out,
             follow=follow, poll_interval=poll_interval, records_only=True, storage_option=storage_option)
