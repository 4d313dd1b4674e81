"""`kctl consume TOPIC`: a topic's records on standard output, as kcat -C and kafka-console-consumer print them.

Thin: kcli.client.consume fetches (start offsets, leaders, read_committed); the records are rendered with the
formatter `kctl cat` and `dump-log --format` use (kcli.tools.dump_format), or as `kctl cat --json` objects.
"""

from __future__ import annotations

import signal
import sys
import time
from enum import Enum
from typing import Annotated, Optional

import typer

from kcli.cli.common import BootstrapOpt, ExitCode, err_console, fail, kafka_client, write_json_line
from kcli.tools.render import BytesEncoding

COMMIT_INTERVAL_S = 5.0


class Isolation(str, Enum):
    read_uncommitted = "read_uncommitted"
    read_committed = "read_committed"


def consume_cmd(
    topics: Annotated[list[str], typer.Argument(
        metavar="TOPIC", show_default=False,
        help="The topic to read; with -G (and no -p) one or more topics the group member subscribes to, as "
        "kcat -G GROUP TOPIC... does.")],
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
        help="Join this consumer group (kcat -G, kafka-console-consumer --group) and read the partitions it "
        "assigns, from the group's committed offsets (where it has none: at -o, default the beginning), "
        "committing the offsets of what was printed every 5 s, before a rebalance and at exit; rebalances are "
        "reported on stderr. With -p kctl does not join: it reads the partitions given as a standalone consumer "
        "and commits as kafka-consumer-groups --reset-offsets does (not beside the group's live members).")] = None,
    assignor: Annotated[str, typer.Option(
        "--assignor", metavar="NAMES", help="With -G: the assignors this member offers, in preference order "
        "(partition.assignment.strategy): range, roundrobin, or both.")] = "range,roundrobin",
    session_timeout: Annotated[int, typer.Option(
        "--session-timeout", metavar="MS", min=1, help="With -G: session.timeout.ms, how long the coordinator "
        "waits for a heartbeat before it gives this member's partitions to the others.")] = 45_000,
    group_instance_id: Annotated[Optional[str], typer.Option(
        "--group-instance-id", metavar="ID", show_default=False,
        help="With -G: a static member (group.instance.id, KIP-345): a restart within the session timeout "
        "keeps its partitions without a rebalance, and it does not leave the group at exit.")] = None,
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
) -> None:
    """Print the records of TOPIC as kcat -C prints them: the value per line, or a -f format, or --json.
    Follows new records until Ctrl-C (exit 0) unless -e or -c ends it; with -G, joins the group and commits what
    was printed. Exit status: 0 ok, 1 a partition could not be read, 2 usage error, 3 no broker reachable."""
    from kcli.client.consume import READ_COMMITTED, READ_UNCOMMITTED, ConsumeOptions, OffsetSpec, parse_offset
    from kcli.errors import UsageError
    from kcli.tools.dump import Encodings
    from kcli.tools.dump_format import RecordFormat

    if json_out and record_format is not None:
        raise fail("--format and --json are two ways to print records: choose one", ExitCode.USAGE)
    joins = bool(group) and not partition
    if len(topics) > 1 and not joins:
        raise fail("several topics are read by a group member: give -G GROUP (and no -p)", ExitCode.USAGE)
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
        if joins:
            from kcli.client.group_member import parse_assignors

            parse_assignors(assignor)
    except UsageError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    if start is None:
        start = OffsetSpec("stored") if group else OffsetSpec("beginning")
    if start.kind == "stored" and not group:
        raise fail("-o stored needs a group (-G GROUP)", ExitCode.USAGE)
    options = ConsumeOptions(partitions=partition or None, start=start, stop_timestamp=stop, group=group,
                             isolation_level=READ_COMMITTED if isolation_level is Isolation.read_committed
                             else READ_UNCOMMITTED)
    printer = _Printer(formatter, encodings, count)
    if joins:
        assert group is not None
        _consume_in_group(bootstrap, timeout, topics, group, options, printer, exit_at_end=exit_at_end,
                          json_out=json_out, assignor=assignor, session_timeout=session_timeout,
                          group_instance_id=group_instance_id)
    else:
        _consume_standalone(bootstrap, timeout, topics[0], group, options, printer, exit_at_end=exit_at_end)


class _Printer:
    """Records to standard output (a -f format or kctl cat's JSON objects), at most ``count`` of them."""

    def __init__(self, formatter, encodings, count: int | None) -> None:
        self.formatter, self.encodings, self.count = formatter, encodings, count
        self.printed = 0
        self.out = sys.stdout.buffer

    @property
    def done(self) -> bool:
        return self.count is not None and self.printed >= self.count

    def write(self, item) -> int:
        """Print a Fetched item's records (cut at the count); the offset after the last one printed."""
        records = item.records
        if self.count is not None and self.printed + len(records) > self.count:
            records = records[:self.count - self.printed]
        if self.formatter is None:
            from kcli.tools.dump import DumpRecord
            from kcli.tools.dump_json import _dumps

            lines = [_dumps(DumpRecord(None, item.batch, r, topic=item.topic,  # type: ignore[arg-type]
                                       partition=item.partition).to_json(self.encodings)) + "\n"
                     for r in records]
            self.out.write("".join(lines).encode("utf-8"))
        else:
            self.out.write(b"".join(self.formatter.render(item.topic, item.partition, item.batch, r)
                                    for r in records))
        self.printed += len(records)
        return records[-1].offset + 1 if len(records) < len(item.records) else item.next_offset


def _consume_standalone(bootstrap, timeout: float, topic: str, group: str | None, options, printer: _Printer, *,
                        exit_at_end: bool) -> None:
    """Today's -p (and no -G) path: the partitions given, or all, without joining; -G commits standalone."""
    from kcli.client.consume import ConsumeNotice, Consumer, EndOfPartition
    from kcli.errors import UsageError

    out = printer.out
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
                to_commit[(item.topic, item.partition)] = printer.write(item)
                if printer.done:
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


def _consume_in_group(bootstrap, timeout: float, topics: list[str], group: str, options, printer: _Printer, *,
                      exit_at_end: bool, json_out: bool, assignor: str, session_timeout: int,
                      group_instance_id: str | None) -> None:
    """kcat -G: a member of GROUP reading what it is assigned; Ctrl-C, SIGTERM, -e and -c commit and leave."""
    from kcli.client.consume import ConsumeNotice, EndOfPartition
    from kcli.client.group_consumer import GroupConsumer, Rebalanced
    from kcli.client.group_member import GroupMember
    from kcli.errors import UsageError

    out = printer.out

    def notice(text: str) -> None:
        err_console.print(f"kctl: {text}", markup=False)

    def terminate(_signum, _frame):
        raise KeyboardInterrupt

    with kafka_client(bootstrap, timeout, "kctl-consume") as client:
        missing = [t for t, count in client.topic_partitions(topics).items() if count is None]
        if missing:
            raise fail(f"topic {missing[0]!r} does not exist", ExitCode.PROBLEMS)
        try:
            member = GroupMember(client, group, topics, assignors=assignor, session_timeout_ms=session_timeout,
                                 group_instance_id=group_instance_id)
            consumer = GroupConsumer(client, member, options, commit_interval_s=COMMIT_INTERVAL_S)
        except UsageError as exc:
            raise fail(exc.describe(), ExitCode.USAGE) from None
        previous = signal.signal(signal.SIGTERM, terminate)
        assigned: set[tuple[str, int]] = set()
        ended: set[tuple[str, int]] = set()
        try:
            if not json_out:
                err_console.print("% Waiting for group rebalance", markup=False, highlight=False)
            for item in consumer.items():
                if isinstance(item, ConsumeNotice):
                    notice(item.text)
                elif isinstance(item, Rebalanced):
                    _report_rebalance(item, json_out)
                    if item.kind == "assigned":
                        assigned, ended = set(item.partitions), set()
                elif isinstance(item, EndOfPartition):
                    ended.add((item.topic, item.partition))
                    consumer.store(item.topic, item.partition, item.offset)
                    out.flush()
                    if exit_at_end and assigned and ended >= assigned:
                        break  # kcat -e: every assigned partition reached its end
                else:
                    ended.discard((item.topic, item.partition))
                    consumer.store(item.topic, item.partition, printer.write(item))
                    if printer.done:
                        break
                    out.flush()
        except KeyboardInterrupt:
            client.close()  # a request may have been cut mid-answer: the commit and LeaveGroup reconnect
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                out.flush()
            finally:
                try:
                    for event in consumer.close():
                        if isinstance(event, Rebalanced):
                            _report_rebalance(event, json_out)
                        else:
                            notice(event.text)
                except KeyboardInterrupt:
                    pass  # a second Ctrl-C while committing and leaving: the session timeout does the rest
                finally:
                    signal.signal(signal.SIGTERM, previous)


def _report_rebalance(event, json_out: bool) -> None:
    """kcat's line (% Group G rebalanced (memberid M): assigned: t [0], t [1]) or, with --json, a JSON notice;
    both on standard error."""
    if json_out:
        write_json_line(event.to_json(), sys.stderr)
        sys.stderr.flush()
        return
    listed = ", ".join(f"{t} [{p}]" for t, p in event.partitions)
    err_console.print(f"% Group {event.group} rebalanced (memberid {event.member_id}): {event.kind}: {listed}",
                      markup=False, highlight=False, soft_wrap=True)
