"""`kctl produce TOPIC`: records from standard input (or -F FILE) to a topic, as kcat -P and
kafka-console-producer send them.

Thin: kcli.client.produce cuts the input into records, partitions, batches and sends them; this parses the options
and prints the summary (stderr, or --json on stdout).
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer

from kcli.cli.common import BootstrapOpt, ExitCode, JsonOpt, err_console, fail, kafka_client, write_json_line


class Compression(str, Enum):
    none = "none"
    gzip = "gzip"
    snappy = "snappy"
    lz4 = "lz4"
    zstd = "zstd"


class Acks(str, Enum):
    none = "0"
    leader = "1"
    all = "all"


def unescape_delimiter(text: str, option: str) -> bytes:
    """kcat's escapes in a delimiter (\\n, \\t, \\r, \\xHH, \\NNN, \\\\); empty is a usage error."""
    from kcli.tools.dump_format import _unescape

    data = _unescape(text)
    if not data:
        raise fail(f"{option} {text!r}: the delimiter is empty", ExitCode.USAGE)
    return data


def produce_cmd(
    topic: Annotated[str, typer.Argument(help="The topic to write to.", show_default=False)],
    bootstrap: BootstrapOpt = None,
    file: Annotated[Optional[str], typer.Option("--file", "-F", metavar="FILE", show_default=False,
                                                help="Read the records from FILE, not standard input.")] = None,
    delimiter: Annotated[str, typer.Option("--delimiter", "-D", metavar="DELIM",
                                           help="Record delimiter (kcat -D; escapes as \\n, \\t, \\x1e).")] = "\\n",
    key_delimiter: Annotated[Optional[str], typer.Option(
        "--key-delimiter", "-K", metavar="DELIM", show_default=False,
        help="Split each record at the first DELIM into key and value (kcat -K; kafka-console-producer's "
        "parse.key with key.separator); a record without it gets a null key.")] = None,
    header: Annotated[Optional[list[str]], typer.Option(
        "--header", "-H", metavar="NAME=VALUE", show_default=False,
        help="A header on every record (repeatable; NAME alone: a null value).")] = None,
    partition: Annotated[Optional[int], typer.Option(
        "--partition", "-p", min=0, show_default=False,
        help="Write every record to this partition (default: murmur2 of the key as the Java client, "
        "sticky partitions for null keys).")] = None,
    acks: Annotated[Acks, typer.Option("--acks", help="0 (no answer awaited), 1 (the leader) or all (the "
                                       "in-sync replicas).")] = Acks.all,
    compression: Annotated[Compression, typer.Option("--compression", "-z", case_sensitive=False,
                                                     help="Batch compression codec.")] = Compression.none,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, metavar="BYTES",
                                            help="Close a partition's batch at this many bytes (batch.size).")
                          ] = 16384,
    linger_ms: Annotated[float, typer.Option("--linger-ms", min=0, metavar="MS",
                                             help="Send a batch that is not full after this many milliseconds "
                                             "(linger.ms).")] = 5,
    idempotent: Annotated[bool, typer.Option(
        "--idempotent", help="An idempotent producer (InitProducerId; producer id, epoch and sequence numbers in "
        "the batches): a resent batch is never written twice. Needs --acks all.")] = False,
    delivery_timeout_ms: Annotated[int, typer.Option(
        "--delivery-timeout-ms", min=1, metavar="MS", help="How long a batch is retried after a retriable error "
        "(a leader moving, too few in-sync replicas) before it counts as failed (delivery.timeout.ms).")] = 120_000,
    as_json: JsonOpt = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker "
                                           "request.")] = 30.0,
) -> None:
    """Write records read from standard input (or -F FILE), one per line or per --delimiter, to TOPIC: kcat -P,
    kafka-console-producer. A summary (records, bytes, partitions) goes to standard error, or with --json one
    object to standard output. Exit status: 0 every record acknowledged, 1 a record was not (errors per
    partition), 2 usage error, 3 no broker reachable or the input unreadable."""
    from kcli.client.produce import ProducerRecord, produce, parse_header, read_chunks, split_records
    from kcli.records import Codec

    if idempotent and acks is not Acks.all:
        raise fail("--idempotent needs --acks all", ExitCode.USAGE)
    record_delimiter = unescape_delimiter(delimiter, "--delimiter")
    key_delim = None if key_delimiter is None else unescape_delimiter(key_delimiter, "--key-delimiter")
    try:
        headers = tuple(parse_header(h) for h in header or [])
    except ValueError as exc:
        raise fail(f"--header: {exc}", ExitCode.USAGE) from None
    stream = sys.stdin.buffer if file is None else open(file, "rb")  # OSError: exit 3 (cli/errors.py)
    linger = linger_ms / 1000

    def records():
        try:
            for item in split_records(read_chunks(stream, idle_s=max(linger, 0.01)), record_delimiter, key_delim):
                yield None if item is None else ProducerRecord(item[1], item[0], headers, partition)
        except KeyboardInterrupt:  # Ctrl-C while waiting for input: the end of it (what was read is sent)
            err_console.print("kctl: interrupted: sending the records read so far", markup=False)

    acks_value = {"0": 0, "1": 1, "all": -1}[acks.value]
    with kafka_client(bootstrap, timeout, "kctl-produce") as client:
        try:
            summary = produce(client, topic, records(), acks=acks_value, compression=Codec.from_label(
                compression.value), batch_size=batch_size, linger_ms=linger_ms, idempotent=idempotent,
                request_timeout_ms=int(timeout * 1000), delivery_timeout_ms=delivery_timeout_ms)
        finally:
            if file is not None:
                stream.close()
    if as_json:
        write_json_line(summary.to_json())
    else:
        parts = ", ".join(f"{p.partition}: {p.records}" for p in (summary.partitions[k] for k in
                                                                   sorted(summary.partitions)))
        verb = "sent (acks=0, not acknowledged)" if acks_value == 0 else "acknowledged"
        err_console.print(f"kctl: {summary.records} records ({summary.bytes} bytes) {verb} to {topic}"
                          + (f" (partitions {parts})" if parts else ""), markup=False)
        for note in summary.epoch_bumps:
            err_console.print(f"kctl: {topic}: epoch bump (KIP-360): {note}", markup=False)
        for result in (summary.partitions[k] for k in sorted(summary.partitions)):
            for error in dict.fromkeys(result.errors):
                err_console.print(f"kctl: {topic}-{result.partition}: {error}", markup=False)
            if result.failed:
                err_console.print(f"kctl: {topic}-{result.partition}: {result.failed} records not acknowledged",
                                  markup=False)
    if not summary.ok:
        raise typer.Exit(ExitCode.PROBLEMS)
