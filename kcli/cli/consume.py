"""`kctl consume TOPIC`: a topic's records on standard output, as kcat -C and kafka-console-consumer print them.

Thin: kcli.client.consume fetches (start offsets, leaders, read_committed); the records are rendered with the
formatter `kctl cat` and `dump-log --format` use (kcli.tools.dump_format), or as `kctl cat --json` objects.
"""

from __future__ import annotations

import sys
import time
from enum import Enum
from typing import Annotated, Optional

import typer

from kcli.cli.common import BootstrapOpt, ExitCode, err_console, fail, kafka_client
from kcli.cli.zk_consume import (BlacklistOpt, ConsumerPropertyOpt, StreamsOpt, WhitelistOpt, ZookeeperConsumeOpt,
                                 consume_zookeeper)
from kcli.tools.render import BytesEncoding

COMMIT_INTERVAL_S = 5.0


class Isolation(str, Enum):
    read_uncommitted = "read_uncommitted"
    read_committed = "read_committed"


def consume_cmd(
    topics: Annotated[Optional[list[str]], typer.Argument(
        metavar="TOPIC...", help="The topic to read (with --zookeeper: the topics to subscribe to).",
        show_default=False)] = None,
    bootstrap: BootstrapOpt = None,
    partition: Annotated[Optional[list[int]], typer.Option(
        "--partition", "-p", min=0, show_default=False,
        help="Only this partition (repeatable; default: every partition).")] = None,
    offset: Annotated[Optional[list[str]], typer.Option(
        "--offset", "-o", metavar="OFFSET", show_default=False,
        help="Where to start (kcat -o): beginning (default), end, stored (-G's committed offsets), OFFSET, -N "
        "(N records before the end), s@TS or @TS (the first record at or after TS, epoch ms); e@TS (another -o) "
        "stops each partition before its first record at or after TS.")] = None,
    count: Annotated[Optional[int], typer.Option("--count", "-c", min=1, show_default=False,
                                                 help="Exit after N records (kcat -c).")] = None,
    exit_at_end: Annotated[bool, typer.Option(
        "--exit", "-e", help="Exit when every partition is read to its end (kcat -e); without it, wait for new "
        "records until Ctrl-C.")] = False,
    isolation_level: Annotated[Isolation, typer.Option(
        "--isolation-level", case_sensitive=False,
        help="read_committed hides aborted transactions' records and stops at the last stable offset.")
    ] = Isolation.read_uncommitted,
    record_format: Annotated[Optional[str], typer.Option(
        "--format", "-f", show_default=False,
        help="kcat -f format string, as kctl cat's: %t %p %o %k %K %s %S %R %T %h %c %% (default %s\\n, or "
        "%k<delim>%s\\n with -K).")] = None,
    key_delimiter: Annotated[Optional[str], typer.Option(
        "--key-delimiter", "-K", metavar="DELIM", show_default=False,
        help="Print the key, this delimiter, then the value (kcat -K).")] = None,
    group: Annotated[Optional[str], typer.Option(
        "--group", "-G", metavar="GROUP", show_default=False,
        help="Start at this consumer group's committed offsets (where it has none: at -o, default the beginning) "
        "and commit the offsets of what was printed. kctl does not join the group: it reads the partitions "
        "given (-p) or all of them, as one standalone consumer, and commits as kafka-consumer-groups "
        "--reset-offsets does; do not run it beside the group's live members.")] = None,
    key_encoding: Annotated[BytesEncoding, typer.Option(
        "--key-encoding", case_sensitive=False,
        help="Keys as auto (raw bytes; --json: text or base64), utf8, hex or base64.")] = BytesEncoding.AUTO,
    value_encoding: Annotated[BytesEncoding, typer.Option(
        "--value-encoding", case_sensitive=False,
        help="Values and header values, as --key-encoding.")] = BytesEncoding.AUTO,
    json_out: Annotated[bool, typer.Option(
        "--json", help="One JSON object per record (kctl cat --json's record objects, with file null).")] = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker "
                                           "request.")] = 30.0,
    zookeeper: ZookeeperConsumeOpt = None,
    whitelist: WhitelistOpt = None,
    blacklist: BlacklistOpt = None,
    streams: StreamsOpt = 1,
    consumer_property: ConsumerPropertyOpt = None,
) -> None:
    """Print the records of TOPIC as kcat -C prints them: the value per line, or a -f format, or --json.
    Follows new records until Ctrl-C (exit 0) unless -e or -c ends it; with -G, commits what was printed.
    Exit status: 0 ok, 1 a partition could not be read, 2 usage error, 3 no broker reachable."""
    from kcli.client.consume import (READ_COMMITTED, READ_UNCOMMITTED, ConsumeNotice, ConsumeOptions, Consumer,
                                     EndOfPartition, OffsetSpec, parse_offset)
    from kcli.errors import UsageError
    from kcli.tools.dump import DumpRecord, Encodings
    from kcli.tools.dump_format import RecordFormat

    if json_out and record_format is not None:
        raise fail("--format and --json are two ways to print records: choose one", ExitCode.USAGE)
    if record_format is None and not json_out:
        record_format = "%s\\n" if key_delimiter is None else "%k" + key_delimiter.replace("%", "%%") + "%s\\n"
    encodings = Encodings(key_encoding, value_encoding)
    start, stop = None, None
    try:
        formatter = None if json_out else RecordFormat(record_format, encodings)
        for text in offset or []:
            spec, stop_ts = parse_offset(text)
            if spec is not None:
                if start is not None:
                    raise UsageError("-o: give one start (and at most one e@TIMESTAMP)")
                start = spec
            if stop_ts is not None:
                stop = stop_ts
    except UsageError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    if zookeeper is not None:  # a member of a ZooKeeper-era group (kcli/cli/zk_consume.py)
        if partition or bootstrap or stop is not None or exit_at_end or (
                start is not None and start.kind not in ("beginning", "end")):
            raise fail("--zookeeper takes no -p, -b, -e or e@TS, and -o only as beginning or end (where the group "
                       "has no offset: auto.offset.reset)", ExitCode.USAGE)
        return consume_zookeeper(zookeeper, group, topics or [], whitelist=whitelist, blacklist=blacklist,
                                 streams=streams, properties=consumer_property or [],
                                 start_kind=start.kind if start else None, count=count, json_out=json_out,
                                 formatter=formatter, encodings=encodings, timeout=timeout)
    if whitelist is not None or blacklist is not None or consumer_property or streams != 1:
        raise fail("--whitelist, --blacklist, --streams and --consumer-property go with --zookeeper", ExitCode.USAGE)
    if not topics or len(topics) != 1:
        raise fail("give one TOPIC (several only with --zookeeper)", ExitCode.USAGE)
    topic = topics[0]
    if start is None:
        start = OffsetSpec("stored") if group else OffsetSpec("beginning")
    if start.kind == "stored" and not group:
        raise fail("-o stored needs a group (-G GROUP)", ExitCode.USAGE)
    options = ConsumeOptions(partitions=partition or None, start=start, stop_timestamp=stop, group=group,
                             isolation_level=READ_COMMITTED if isolation_level is Isolation.read_committed
                             else READ_UNCOMMITTED)
    out = sys.stdout.buffer
    printed = 0
    to_commit: dict[tuple[str, int], int] = {}
    committed: dict[tuple[str, int], int] = {}

    def commit(client) -> None:
        pending = {tp: o for tp, o in to_commit.items() if committed.get(tp) != o}
        if group and pending:
            errors = client.offset_commit(group, pending)
            committed.update(pending)
            for (t, p), error in sorted(errors.items()):
                if int(error):
                    err_console.print(f"kctl: commit of {t}-{p} for group {group} failed: {error.name}",
                                      markup=False)

    with kafka_client(bootstrap, timeout, "kctl-consume") as client:
        try:
            consumer = Consumer(client, topic, options)
        except UsageError as exc:
            raise fail(exc.describe(), ExitCode.USAGE) from None
        ended: set[int] = set()
        last_commit = time.monotonic()
        try:
            for item in consumer.items():
                if isinstance(item, ConsumeNotice):
                    err_console.print(f"kctl: {item.text}", markup=False)
                    continue
                if isinstance(item, EndOfPartition):
                    ended.add(item.partition)
                    to_commit[(item.topic, item.partition)] = item.offset
                    out.flush()
                    if exit_at_end and ended >= {p for p, pos in consumer.positions.items() if not pos.done}:
                        break
                    continue
                ended.discard(item.partition)
                records = item.records
                if count is not None and printed + len(records) > count:
                    records = records[:count - printed]
                if json_out:
                    from kcli.tools.dump_json import _dumps

                    lines = [_dumps(DumpRecord(None, item.batch, r, topic=item.topic,  # type: ignore[arg-type]
                                               partition=item.partition).to_json(encodings)) + "\n"
                             for r in records]
                    out.write("".join(lines).encode("utf-8"))
                else:
                    assert formatter is not None
                    out.write(b"".join(formatter.render(item.topic, item.partition, item.batch, r)
                                       for r in records))
                printed += len(records)
                to_commit[(item.topic, item.partition)] = (records[-1].offset + 1 if len(records) <
                                                           len(item.records) else item.next_offset)
                if count is not None and printed >= count:
                    break
                out.flush()
                if group and time.monotonic() - last_commit >= COMMIT_INTERVAL_S:
                    commit(client)
                    last_commit = time.monotonic()
        except KeyboardInterrupt:
            # Ctrl-C: a normal end. A fetch may have been cut mid-answer: new connections for the commit below.
            client.close()
        try:
            out.flush()
        finally:
            if group:
                commit(client)
