"""`kctl groups`: consumer groups of a cluster (Kafka's kafka-consumer-groups.sh, rpk group), or offline of a stopped
broker's log dir: list, describe with lag, delete, delete offsets, reset offsets (plan, backup, commit, verify) and
export.

Thin: kcli.client.groups does the requests, kcli.tools.groups reads a log dir, kcli.tools.offsets plans and applies a
reset as it does `kctl offsets migrate` (shared with cli/offsets.py: the same plan table, backup and verification).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kcli.cli.common import (BootstrapOpt, ConnectionGroup, GroupTimeoutOpt, JsonOpt, bootstrap_server, kafka_client,
                             ExitCode, err_console, escape, fail, split_connection_options, write_json_line)
from kcli.cli.errors import exit_code_for
from kcli.cli.offsets import _transfer, write_offsets
from kcli.cli.zk import _cell, _console, _table
from kcli.errors import KcliError

# kafka-consumer-groups.sh's actions, as the subcommands they are here.
KAFKA_ACTIONS = {"--list": "list", "--describe": "describe", "--delete": "delete", "--delete-offsets": "delete-offsets",
                 "--reset-offsets": "reset-offsets"}


class _GroupsGroup(ConnectionGroup):
    """kafka-consumer-groups.sh's command lines work after `kctl groups`: where the subcommand's name would be, its
    action flag (--list, --describe, --delete, --delete-offsets, --reset-offsets) anywhere on the line names it,
    so `kctl groups --bootstrap-server B --describe --group G` is `kctl groups describe -b B --group G`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        leading, rest = split_connection_options(args)
        if rest and rest[0] not in self.commands and rest[0] not in ("-h", "--help"):  # type: ignore[operator]
            actions = list(dict.fromkeys(word for word in rest if word in KAFKA_ACTIONS))
            if len(actions) > 1:
                ctx.fail(f"give one action, not {' and '.join(actions)}")
            if actions:
                args = [KAFKA_ACTIONS[actions[0]], *leading, *(word for word in rest if word != actions[0])]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_GroupsGroup, no_args_is_help=True,
                  help="Consumer groups, as kafka-consumer-groups.sh: list, describe (members, assignment, committed "
                  "offsets, lag), delete, delete-offsets, reset-offsets (plan, backup, commit, verify) and export; "
                  "list and describe also offline on a stopped broker's log dir (--log-dir). Its spellings work too: "
                  "kctl groups -b B --describe --group G. -b/--timeout go before or after the subcommand.")

LogDirOpt = Annotated[Optional[Path], typer.Option(
    "--log-dir", show_default=False, help="Offline: a stopped broker's log dir, read from its __consumer_offsets "
    "partitions and segments instead of asking a broker.")]
OffsetsPartitionsOpt = Annotated[Optional[int], typer.Option(
    "--offsets-partitions", min=1, show_default=False, help="With --log-dir: __consumer_offsets' partition count "
    "(offsets.topic.num.partitions; default: what the log dir's directories and checkpoints show).")]
GroupsArg = Annotated[Optional[list[str]], typer.Argument(help="Group id(s) (or --group).", show_default=False)]
GroupOpt = Annotated[Optional[list[str]], typer.Option(
    "--group", "-g", show_default=False, help="A group id, as kafka-consumer-groups names it (repeat for several; "
    "the same as a GROUPS argument).")]
AllGroupsOpt = Annotated[bool, typer.Option("--all-groups", help="Every group of the cluster (or log dir).")]
TopicOpt = Annotated[Optional[list[str]], typer.Option(
    "--topic", "-t", show_default=False, help="topic or topic:0,1,2 (repeat for several; a bare topic: every "
    "partition).")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker.")]


@app.callback()
def groups_group(bootstrap: BootstrapOpt = None, timeout: GroupTimeoutOpt = None) -> None:
    """Consumer groups, as kafka-consumer-groups.sh, whose spellings work too (--describe --group G, --reset-offsets
    ... --dry-run). -b/--timeout go before or after the subcommand.
    Exit status: 0 ok, 1 a group failed, was refused or not found, 2 usage error, 3 unreadable input or no broker."""
    # Declared for --help; ConnectionGroup hands -b/--timeout given here to the subcommand.


@contextmanager
def _client(bootstrap: str | None, timeout: float) -> Iterator[Any]:
    with kafka_client(bootstrap, timeout, "kctl-groups") as client:
        yield client


def _source(bootstrap: str | None, log_dir: Path | None) -> None:
    # Only a given -b conflicts: an exported $KCTL_BOOTSTRAP_SERVER gives way to --log-dir (read by kafka_client).
    if bootstrap and log_dir:
        raise fail("give --bootstrap-server or --log-dir, not both", ExitCode.USAGE)


def _group_ids(arguments: list[str] | None, options: list[str] | None) -> list[str] | None:
    """The groups named as arguments and with --group (kafka-consumer-groups' spelling), each once."""
    return list(dict.fromkeys([*(arguments or ()), *(options or ())])) or None


def _names(groups: list[str] | None, all_groups: bool) -> None:
    if bool(groups) == all_groups:
        raise fail("name the group(s), or give --all-groups" if not groups else
                   "give group names or --all-groups, not both", ExitCode.USAGE)


def _read_log_dir(log_dir: Path, groups: list[str] | None, offsets_partitions: int | None) -> Any:
    from kcli.tools.groups import read_groups

    try:
        return read_groups(log_dir, groups=groups, offsets_partitions=offsets_partitions)
    except KcliError as exc:
        raise fail(exc.describe(), exit_code_for(exc) or ExitCode.PROBLEMS) from None


# -- list ----------------------------------------------------------------------------------------------------
def _print_names(groups: list[tuple[str, str | None]], *, with_state: bool) -> None:
    """kafka-consumer-groups --list: bare names; with --state, GROUP and STATE columns padded as Kafka pads them
    (the longest entry plus one space)."""
    if not with_state:
        for name, _state in groups:
            typer.echo(name)
        return
    width = max([len("GROUP")] + [len(name) for name, _ in groups]) + 1
    typer.echo(f"{'GROUP':<{width}}STATE")
    for name, group_state in groups:
        typer.echo(f"{name:<{width}}{group_state or '-'}")


@app.command("list")
def list_cmd(
    bootstrap: BootstrapOpt = None,
    log_dir: LogDirOpt = None,
    offsets_partitions: OffsetsPartitionsOpt = None,
    state: Annotated[Optional[list[str]], typer.Option(
        "--state", show_default=False, help="Only groups in this state (Stable, Empty, PreparingRebalance, "
        "CompletingRebalance, Dead; repeat for several; case-insensitive).")] = None,
    table_view: Annotated[bool, typer.Option("--table", help="A table: state, protocol type and coordinator (or, "
                                             "with --log-dir, the __consumer_offsets partition) of each group.")
                          ] = False,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Every group's name, one per line, as kafka-consumer-groups --list prints them; with --state, GROUP and STATE
    columns as it prints them then; --table for state, protocol type and coordinator (ListGroups to every
    broker; v4+ filters by state on the broker). With --log-dir: the groups a stopped broker's
    __consumer_offsets holds."""
    _source(bootstrap, log_dir)
    if log_dir is not None:
        found = _read_log_dir(log_dir, None, offsets_partitions)
        wanted = {s.lower() for s in state or ()}
        rows = [g for g in found.groups.values() if not wanted or g.state.lower() in wanted]
        if not as_json and not table_view:
            _print_names([(g.group, g.state) for g in rows], with_state=bool(state))
            return
        if as_json:
            write_json_line({"log_dir": found.log_dir, "groups": [
                {"group": g.group, "state": g.state, "protocol_type": g.protocol_type,
                 "offsets_topic_partition": g.offsets_topic_partition, "members": len(g.members)} for g in rows]})
            return
        table = _table("GROUP", "STATE", "PROTOCOL TYPE", "MEMBERS", "__consumer_offsets")
        for g in rows:
            table.add_row(_cell(g.group), g.state, _cell(g.protocol_type or None), str(len(g.members)),
                          _cell(g.offsets_topic_partition))
        _console().print(table)
        return
    from kcli.client.groups import list_groups

    with _client(bootstrap, timeout) as client:
        listings = list_groups(client, states=state or ())
    if as_json:
        write_json_line({"groups": [g.to_json() for g in listings]})
        return
    if not table_view:
        _print_names([(g.group, g.state) for g in listings], with_state=bool(state))
        return
    table = _table("GROUP", "STATE", "PROTOCOL TYPE", "COORDINATOR")
    for g in listings:
        table.add_row(_cell(g.group), _cell(g.state), _cell(g.protocol_type or None),
                      f"{g.coordinator_id} ({escape(g.coordinator)})")
    _console().print(table)


# -- describe --------------------------------------------------------------------------------------------------
def _header(d: Any) -> str:
    """Two lines of at most ~90 columns (for group names of usual length): what the group is, then where it lives."""
    protocol = d.protocol_type + (f"/{d.protocol}" if d.protocol else "") if d.protocol_type else "no protocol"
    lag = "-" if d.total_lag is None else str(d.total_lag)
    where = f"coordinator {d.coordinator_id} ({d.coordinator})" if d.coordinator_id is not None else "offline"
    holder = ("offsets in an unknown __consumer_offsets partition" if d.offsets_topic_partition is None else
              f"offsets in __consumer_offsets-{d.offsets_topic_partition}"
              + (f" (of {d.offsets_topic_partitions})" if d.offsets_topic_partitions else ""))
    return escape(f"group {d.group}: {d.state}, {protocol}, {len(d.members)} members, total lag {lag}\n"
                  f"  {where}, {holder}")


def _width(columns: list[str], rows: list[list[str]], keep: list[int]) -> tuple[dict[int, int], int]:
    natural = {i: max([len(columns[i])] + [len(r[i]) for r in rows]) for i in keep}
    return natural, sum(natural.values()) + 2 * (len(keep) - 1)


def _fit(columns: list[str], rows: list[list[str]], width: int, *, shorten: int | None = None,
         optional: tuple[int, ...] = ()) -> Any:
    """A table that fits ``width`` without folding a cell: the ``shorten`` column (long member ids) ends in an
    ellipsis while that leaves it 12 columns, else the ``optional`` columns are left out in turn (--json and
    --members have them all); if it still does not fit, the first column (topic or group names) folds."""
    keep = list(range(len(columns)))
    max_width = None
    for drop in (None, *optional):
        if drop is not None:
            keep.remove(drop)
        natural, total = _width(columns, rows, keep)
        if total <= width:
            break
        if shorten in keep and natural[shorten] - (total - width) >= 12:  # type: ignore[index]
            max_width = natural[shorten] - (total - width)  # type: ignore[index]
            break
    table = _table(*(columns[i] for i in keep))
    for index, column in zip(keep, table.columns):
        column.no_wrap = index != 0
        if index == shorten and max_width is not None:
            column.overflow, column.max_width = "ellipsis", max_width
    for row in rows:
        table.add_row(*(row[i] for i in keep))
    return table


def _render_describe(details: list[Any], view: str, verbose: bool = False) -> None:
    console = _console()
    if view == "state":
        rows = [[_cell(d.group), escape(f"{d.coordinator} ({d.coordinator_id})") if d.coordinator_id is not None
                 else "-", _cell(d.protocol or None), d.state, str(len(d.members)), _cell(d.offsets_topic_partition)]
                for d in details]
        console.print(_fit(["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS",
                            "OFFSETS PARTITION"], rows, console.width, optional=(1,)))
        return
    for index, d in enumerate(details):
        if index:
            console.print()
        if not d.exists:
            err_console.print(f"kctl: consumer group {d.group!r} does not exist", markup=False)
            continue
        if verbose:
            console.print(_header(d))
        if view == "members":
            # kafka-consumer-groups --members: ASSIGNMENT only with --verbose
            rows = [[_cell(d.group), _cell(m.member_id), _cell(m.client_host), _cell(m.client_id),
                     "-" if m.assignment is None else str(len(m.assignment)),
                     "-" if not m.assignment else escape(",".join(f"{t}-{p}" for t, p in m.assignment))]
                    for m in d.members]
            columns = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
            if not verbose:
                columns, rows = columns[:5], [row[:5] for row in rows]
                table = _fit(columns, rows, console.width, shorten=1)
            elif _width(columns, rows, list(range(6)))[1] > console.width:
                # too wide for a table: two lines per member, ids and assignments whole
                table = _table()
                for row in rows:
                    console.print(f"member {row[1]} of {row[0]}\n  client id {row[3]}, host {row[2]}, {row[4]} "
                                  f"partitions: {row[5]}")
            else:
                table = _fit(columns, rows, console.width)
        else:
            rows = [[_cell(d.group), _cell(p.topic), _cell(p.partition), _cell(p.committed_offset),
                     _cell(p.log_end_offset), _cell(p.lag), _cell(p.member_id), _cell(p.client_host),
                     _cell(p.client_id)] for p in d.partitions]
            table = _fit(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID",
                          "HOST", "CLIENT-ID"], rows, console.width, shorten=6, optional=(6, 8, 7))
        # Kafka's ConsumerGroupCommand says these on stderr: the table on stdout stays rows only.
        if not d.members and d.state != "Dead":
            err_console.print(f"Consumer group '{d.group}' has no active members.", markup=False)
        elif d.state in ("PreparingRebalance", "CompletingRebalance"):
            err_console.print(f"Warning: Consumer group '{d.group}' is rebalancing.", markup=False)
        if table.row_count:
            console.print(table)
        for note in d.notes:
            console.print(f"note: {escape(note)}")


@app.command("describe")
def describe_cmd(
    groups: GroupsArg = None,
    group: GroupOpt = None,
    all_groups: AllGroupsOpt = False,
    bootstrap: BootstrapOpt = None,
    log_dir: LogDirOpt = None,
    offsets_partitions: OffsetsPartitionsOpt = None,
    members: Annotated[bool, typer.Option("--members", help="One row per member: id, host, client id, "
                                          "partitions and assignment.")] = False,
    offsets: Annotated[bool, typer.Option("--offsets", help="One row per partition: committed offset, log end, "
                                          "lag and member (the default view).")] = False,
    state: Annotated[bool, typer.Option("--state", help="One row per group: coordinator, assignment strategy, "
                                        "state, member count and __consumer_offsets partition.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Before each group's rows, two lines on the "
                                          "group: state, protocol, members, total lag, coordinator and "
                                          "__consumer_offsets partition.")] = False,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """State, protocol, coordinator, members and their assignment, and per partition the committed offset, log end
    and lag (kafka-consumer-groups --describe); the __consumer_offsets partition that holds each group. With
    --log-dir: the same from a stopped broker's log dir. A group that does not exist exits 1."""
    groups = _group_ids(groups, group)
    _source(bootstrap, log_dir)
    _names(groups, all_groups)
    if members + offsets + state > 1:
        raise fail("give at most one of --members, --offsets, --state", ExitCode.USAGE)
    view = "members" if members else "state" if state else "offsets"
    if log_dir is not None:
        found = _read_log_dir(log_dir, groups or None, offsets_partitions)
        details = list(found.groups.values())
        for note in found.notes:
            err_console.print(f"kctl: {note}", markup=False)
    else:
        from kcli.client.groups import describe_groups

        with _client(bootstrap, timeout) as client:
            names = groups or client.list_groups()
            details = describe_groups(client, names) if names else []
    if as_json:
        write_json_line({"groups": [d.to_json() for d in details]})
    else:
        _render_describe(details, view, verbose)
    if any(not d.exists for d in details):
        raise typer.Exit(int(ExitCode.PROBLEMS))


# -- delete ------------------------------------------------------------------------------------------------------
@app.command("delete")
def delete_cmd(
    groups: GroupsArg = None,
    group: GroupOpt = None,
    bootstrap: BootstrapOpt = None,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Delete groups and their committed offsets (DeleteGroups). A group with members is refused by its coordinator
    (NON_EMPTY_GROUP) and exits 1."""
    from kcli.client.groups import delete_groups

    groups = _group_ids(groups, group)
    if not groups:
        raise fail("name the group(s) to delete", ExitCode.USAGE)
    with _client(bootstrap, timeout) as client:
        results = delete_groups(client, groups)
    if as_json:
        write_json_line({"groups": [r.to_json() for r in results]})
    else:
        console = _console()
        for r in results:
            console.print(f"group {escape(r.group)}: deleted" if r.ok else
                          f"group {escape(r.group)}: not deleted: {escape(r.reason or '')}")
    if not all(r.ok for r in results):
        raise typer.Exit(int(ExitCode.PROBLEMS))


@app.command("delete-offsets")
def delete_offsets_cmd(
    group_arg: Annotated[Optional[str], typer.Argument(metavar="[GROUP]", help="Group id (or --group).",
                                                       show_default=False)] = None,
    group_opt: Annotated[Optional[str], typer.Option("--group", "-g", show_default=False,
                                                     help="Group id, as kafka-consumer-groups names it.")] = None,
    topic: TopicOpt = None,
    bootstrap: BootstrapOpt = None,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Delete a group's committed offsets of some partitions (OffsetDelete, KIP-496). Topics its members subscribe
    to are refused (GROUP_SUBSCRIBED_TO_TOPIC); any refusal exits 1."""
    from kcli.client.groups import delete_offsets, resolve_partitions

    named = _group_ids([group_arg] if group_arg else None, [group_opt] if group_opt else None) or []
    if len(named) != 1:
        raise fail("name one group (GROUP or --group)", ExitCode.USAGE)
    group = named[0]
    if not topic:
        raise fail("name the partitions: --topic topic[:0,1,...]", ExitCode.USAGE)
    with _client(bootstrap, timeout) as client:
        result = delete_offsets(client, group, resolve_partitions(client, topic))
    if as_json:
        write_json_line(result.to_json())
    else:
        console = _console()
        if result.error:
            console.print(f"group {escape(group)}: offsets not deleted: {result.to_json()['error']}")
        table = _table("TOPIC", "PARTITION", "STATUS")
        for p in result.to_json()["partitions"]:
            table.add_row(_cell(p["topic"]), str(p["partition"]), "deleted" if p["deleted"] else _cell(p["error"]))
        if table.row_count:
            console.print(table)
    if not result.ok:
        raise typer.Exit(int(ExitCode.PROBLEMS))


# -- reset-offsets -----------------------------------------------------------------------------------------------
def _spec(to_earliest: bool, to_latest: bool, to_current: bool, to_datetime: str | None, by_duration: str | None,
          shift_by: int | None, to_offset: int | None, from_file: Path | None) -> Any:
    from kcli.client import groups as g
    from kcli.cli.common import parse_timestamp

    chosen = [name for name, on in (("--to-earliest", to_earliest), ("--to-latest", to_latest),
                                    ("--to-current", to_current), ("--to-datetime", to_datetime is not None),
                                    ("--by-duration", by_duration is not None), ("--shift-by", shift_by is not None),
                                    ("--to-offset", to_offset is not None), ("--from-file", from_file is not None))
              if on]
    if len(chosen) != 1:
        raise fail("give exactly one of --to-earliest, --to-latest, --to-current, --to-datetime, --by-duration, "
                   "--shift-by, --to-offset, --from-file" + (f" (got {', '.join(chosen)})" if chosen else ""),
                   ExitCode.USAGE)
    if from_file is not None:
        return None
    if to_datetime is not None:
        try:
            when = parse_timestamp(to_datetime)
        except typer.BadParameter as exc:
            raise fail(f"--to-datetime: {exc}", ExitCode.USAGE) from None
        return g.ResetSpec(g.TIMESTAMP, when, f"--to-datetime {to_datetime}")
    if by_duration is not None:
        try:
            ms = g.parse_duration(by_duration)
        except KcliError as exc:
            raise fail(f"--by-duration: {exc.describe()}", ExitCode.USAGE) from None
        now = int(datetime.now(timezone.utc).timestamp() * 1000)
        return g.ResetSpec(g.TIMESTAMP, now - ms, f"--by-duration {by_duration}")
    if shift_by is not None:
        return g.ResetSpec(g.SHIFT_BY, shift_by, f"--shift-by {shift_by}")
    if to_offset is not None:
        return g.ResetSpec(g.TO_OFFSET, to_offset, f"--to-offset {to_offset}")
    kind = g.EARLIEST if to_earliest else g.LATEST if to_latest else g.CURRENT
    return g.ResetSpec(kind, None, f"--{kind}")


@app.command("reset-offsets")
def reset_offsets_cmd(
    groups: GroupsArg = None,
    group: GroupOpt = None,
    all_groups: AllGroupsOpt = False,
    topic: TopicOpt = None,
    all_topics: Annotated[bool, typer.Option("--all-topics", help="Every partition the group has committed "
                                             "offsets for.")] = False,
    to_earliest: Annotated[bool, typer.Option("--to-earliest", help="To the log start offset.")] = False,
    to_latest: Annotated[bool, typer.Option("--to-latest", help="To the log end offset.")] = False,
    to_current: Annotated[bool, typer.Option("--to-current", help="To the committed offset (the log end where "
                                             "none is committed).")] = False,
    to_datetime: Annotated[Optional[str], typer.Option(
        "--to-datetime", show_default=False, help="To the first offset whose timestamp is >= this ISO-8601 time "
        "(UTC unless it names a zone) or epoch milliseconds; the log end where no record is that recent.")] = None,
    by_duration: Annotated[Optional[str], typer.Option(
        "--by-duration", show_default=False, help="As --to-datetime, now minus this ISO-8601 duration "
        "(PnDTnHnMnS, e.g. PT1H30M).")] = None,
    shift_by: Annotated[Optional[int], typer.Option(
        "--shift-by", show_default=False, help="Move the committed offset by N (negative: back).")] = None,
    to_offset: Annotated[Optional[int], typer.Option("--to-offset", min=0, show_default=False,
                                                     help="To this offset.")] = None,
    from_file: Annotated[Optional[Path], typer.Option(
        "--from-file", show_default=False, help="To the offsets of a CSV file: topic,partition,offset (one group) "
        "or group,topic,partition,offset, as kafka-consumer-groups and this command's backups write it.")] = None,
    execute: Annotated[bool, typer.Option("--execute", help="Commit the plan (default: a dry run that only "
                                          "plans).")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only plan: the default, spelled out as "
                                          "kafka-consumer-groups takes it.")] = False,
    export: Annotated[bool, typer.Option("--export", help="Write the planned offsets to standard output as the "
                                         "CSV --from-file reads (kafka-consumer-groups --export), problems to "
                                         "standard error, instead of the plan table.")] = False,
    backup: Annotated[Optional[Path], typer.Option(
        "--backup", show_default=False, help="Where --execute first writes the offsets it replaces, as a CSV "
        "--from-file reads (default: kctl-offsets-backup-<time>.csv in the current directory).")] = None,
    bootstrap: BootstrapOpt = None,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Plan (and with --execute commit) new committed offsets for inactive groups, as kafka-consumer-groups
    --reset-offsets: per partition the current offset, the requested one, the log range and the planned offset
    (requests outside the log are clamped to its start or end). A group that is not Empty or Dead is refused.
    --execute backs up the offsets it replaces, commits, and verifies with OffsetFetch."""
    from kcli.client import KafkaOffsetStore
    from kcli.client.groups import RequestedOffsets, reset_targets
    from kcli.tools.offsets import FileOffsetStore

    groups = _group_ids(groups, group)
    if dry_run and execute:
        raise fail("give --dry-run or --execute, not both", ExitCode.USAGE)
    if export and as_json:
        raise fail("give --export (CSV) or --json, not both", ExitCode.USAGE)
    spec = _spec(to_earliest, to_latest, to_current, to_datetime, by_duration, shift_by, to_offset, from_file)
    if from_file is None:
        _names(groups, all_groups)
        if bool(topic) == all_topics:
            raise fail("give --topic topic[:partitions] or --all-topics" if not topic else
                       "give --topic or --all-topics, not both", ExitCode.USAGE)
    elif all_topics or all_groups:
        raise fail("--from-file names its groups (or give one group for a 3-column CSV) and its partitions: "
                   "--all-topics and --all-groups do not go with it", ExitCode.USAGE)
    with _client(bootstrap, timeout) as client:
        store = KafkaOffsetStore(client)
        client.connect()
        if spec is None:
            source: Any = FileOffsetStore(from_file, group=groups[0] if groups and len(groups) == 1 else None)
            names = groups or None
            topics = sorted({t.partition(":")[0] for t in topic}) if topic else None
        else:
            names = groups or client.list_groups()
            source = RequestedOffsets(reset_targets(client, names, spec, topics=topic or (), all_topics=all_topics),
                                      spec.text)
            topics = None
        _transfer(source, store, store, [store], groups=names, topics=topics, execute=execute, clamp=True,
                  force=False, backup=backup, as_json=as_json, as_csv=export)


# -- export ------------------------------------------------------------------------------------------------------
@app.command("export")
def export_cmd(
    groups: GroupsArg = None,
    group: GroupOpt = None,
    all_groups: AllGroupsOpt = False,
    bootstrap: BootstrapOpt = None,
    log_dir: LogDirOpt = None,
    offsets_partitions: OffsetsPartitionsOpt = None,
    topic: Annotated[Optional[list[str]], typer.Option("--topic", "-t", show_default=False,
                                                       help="Only this topic (repeat for several).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of CSV.")] = False,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", show_default=False,
                                                   help="Write here (default: standard output).")] = None,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Committed offsets as kafka-consumer-groups' CSV (topic,partition,offset for one group,
    group,topic,partition,offset for several), which reset-offsets --from-file reads back, or --json."""
    groups = _group_ids(groups, group)
    _source(bootstrap, log_dir)
    _names(groups, all_groups)
    if log_dir is not None:
        found = _read_log_dir(log_dir, groups or None, offsets_partitions)
        offsets = {g.group: {(p.topic, p.partition): p.committed_offset for p in g.partitions
                             if p.committed_offset is not None} for g in found.groups.values()}
        kind, location = "log-dir", str(log_dir)
    else:
        with _client(bootstrap, timeout) as client:
            names = groups or client.list_groups()
            offsets = client.offset_fetch_many(names) if names else {}
        kind, location = "kafka", bootstrap_server(bootstrap) or ""
    write_offsets(offsets, "json" if as_json else "csv", kind, location, topic, output)
