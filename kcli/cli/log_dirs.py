"""`kctl log-dirs`: kafka-log-dirs' --describe against a running cluster (DescribeLogDirs to every broker).

Thin: kcli.client.log_dirs asks the brokers; this parses and renders. ``--json`` prints the object kafka-log-dirs
prints (``{"version":1,"brokers":[...]}``), so scripts written for it keep working.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kcli.cli.common import (BootstrapOpt, ConnectionGroup, ExitCode, GroupTimeoutOpt, JsonOpt, fail, kafka_client,
                             write_json_line)

app = typer.Typer(cls=ConnectionGroup, no_args_is_help=True,
                  help="Log directories of a running cluster's brokers: sizes per partition, volume space "
                  "(kafka-log-dirs). -b/--timeout go before or after the subcommand.")


@app.callback()
def log_dirs_group(bootstrap: BootstrapOpt = None, timeout: GroupTimeoutOpt = None) -> None:
    """Log directories of a running cluster's brokers (kafka-log-dirs).
    Exit status: 0 ok, 1 a broker or log dir reported an error, 2 usage error, 3 no broker reachable."""


def _ids(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise fail(f"--broker-list {text!r}: expected broker ids separated by commas (1,2,3)", ExitCode.USAGE) \
            from None


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


@app.command("describe")
def describe_cmd(
    bootstrap: BootstrapOpt = None,
    broker_list: Annotated[Optional[str], typer.Option(
        "--broker-list", show_default=False, help="Broker ids to ask, comma-separated (default: every broker).")] = None,
    topic_list: Annotated[Optional[str], typer.Option(
        "--topic-list", show_default=False, help="Topics to report, comma-separated (default: every topic).")] = None,
    partitions: Annotated[bool, typer.Option("--partitions", help="One line per partition, not only per log "
                                             "dir.")] = False,
    remote_sizes: Annotated[bool, typer.Option(
        "--remote-sizes", help="Also each partition's remote size (tiered storage, read from "
        "__remote_log_metadata) and local log start offset; implies --partitions.")] = False,
    as_json: JsonOpt = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker "
                                           "request.")] = 10.0,
) -> None:
    """Each broker's log directories, their partitions' sizes and offset lags, and the volume's total and usable
    bytes (DescribeLogDirs). --json prints kafka-log-dirs' JSON."""
    from kcli.client.log_dirs import describe_log_dirs

    topics = None if topic_list is None else [t.strip() for t in topic_list.split(",") if t.strip()]
    with kafka_client(bootstrap, timeout, "kctl-log-dirs") as client:
        brokers = describe_log_dirs(client, brokers=_ids(broker_list), topics=topics,
                                    remote_sizes=remote_sizes)
    problems = any(b.error or any(d.error for d in b.log_dirs) for b in brokers)
    if as_json:
        write_json_line({"version": 1, "brokers": [b.to_json() for b in brokers]})
    else:
        for broker in brokers:
            if broker.error:
                typer.echo(f"broker {broker.broker}\terror: {broker.error}")
                continue
            for log_dir in broker.log_dirs:
                space = ""
                if log_dir.total_bytes >= 0:
                    space = f"\tvolume {_size(log_dir.usable_bytes)} free of {_size(log_dir.total_bytes)}"
                status = f"\terror: {log_dir.error}" if log_dir.error else ""
                typer.echo(f"broker {broker.broker}\t{log_dir.path}\t{len(log_dir.partitions)} partitions\t"
                           f"{_size(log_dir.size)}{space}{status}")
                if partitions or remote_sizes:
                    for p in log_dir.partitions:
                        remote = "" if p.remote_size is None else f"\tremote {p.remote_size} ({p.remote_segments} " \
                            "segments)"
                        if p.local_log_start_offset is not None:
                            remote += f"\tlocal log start {p.local_log_start_offset}"
                        typer.echo(f"\t{p.topic}-{p.partition}\tsize {p.size}\toffset lag {p.offset_lag}{remote}"
                                   + ("\tfuture" if p.is_future else ""))
    if problems:
        raise typer.Exit(ExitCode.PROBLEMS)
