"""`kctl offsets`: move consumer offsets between ZooKeeper, Kafka (``__consumer_offsets``) and CSV/JSON files.

Thin: wires the stores (kcli.zk.offsets, kcli.client, kcli.tools.offsets.LogDirOffsetStore) into
kcli.tools.offsets' plan/apply/verify and renders the reports.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kcli.cli.common import (BOOTSTRAP_ENV, BootstrapOpt, ConnectionGroup, ExitCode, GroupTimeoutOpt, JsonOpt,
                             ZookeeperAuthOpt, ZookeeperOpt, bootstrap_server, err_console, fail, parse_timestamp,
                             progress_wanted, write_json_line, escape, client_security)
from kcli.cli.errors import exit_code_for, report_exit_code
from kcli.cli.zk import _cell, _console, _table
from kcli.errors import KcliError

app = typer.Typer(cls=ConnectionGroup, no_args_is_help=True,
                  help="Move consumer offsets between ZooKeeper, Kafka and files: migrate ZooKeeper-stored offsets "
                  "into __consumer_offsets (plan, backup, commit, verify), roll back, export and import; find the "
                  "offsets for a time (for-time). -z/-b/--timeout/--auth go before or after the subcommand.")

LogDirOpt = Annotated[Optional[Path], typer.Option(
    "--log-dir", show_default=False, help="Offline mode: a stopped broker's log dir; append to __consumer_offsets "
    "directly instead of committing through a broker.")]
OffsetsPartitionsOpt = Annotated[Optional[int], typer.Option(
    "--offsets-partitions", min=1, show_default=False,
    help="With --log-dir: create __consumer_offsets with this many partitions when the log dir has none.")]
GroupOpt = Annotated[Optional[list[str]], typer.Option("--group", "-g", show_default=False,
                                                       help="A group (repeat for several; default: all).")]
TopicOpt = Annotated[Optional[list[str]], typer.Option("--topic", "-t", show_default=False,
                                                       help="Only this topic (repeat for several).")]
ExecuteOpt = Annotated[bool, typer.Option("--execute", help="Commit the plan (default: a dry run that only plans).")]
ClampOpt = Annotated[bool, typer.Option("--clamp", help="Clamp offsets outside the log to its start/end instead of "
                                        "refusing the group.")]
ForceOpt = Annotated[bool, typer.Option("--force", help="Write groups even when they have live members.")]
BackupOpt = Annotated[Optional[Path], typer.Option(
    "--backup", show_default=False, help="Where --execute writes the previous offsets as CSV (default: "
    "kctl-offsets-backup-<time>.csv in the current directory).")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for ZooKeeper and brokers.")]
AuthOpt = ZookeeperAuthOpt


@app.callback()
def offsets_group(zookeeper: ZookeeperOpt = None, bootstrap: BootstrapOpt = None, timeout: GroupTimeoutOpt = None,
                  auth: AuthOpt = None) -> None:
    """Move consumer offsets between ZooKeeper, Kafka and files. -z/-b/--timeout/--auth go before or after the
    subcommand (kctl offsets -z Z -b B migrate). Exit status: 0 ok, 1 a group refused, not found or not verified,
    2 usage error, 3 unreadable input or ZooKeeper/Kafka unreachable."""
    # Declared for --help; ConnectionGroup hands the options given here to the subcommand.


# -- wiring --------------------------------------------------------------------------------------------------
@contextmanager
def _errors(committed_note: bool = True) -> Iterator[None]:
    """Library errors with a note that nothing was written; their exit status from cli/errors.py's table."""
    suffix = " (nothing was written)" if committed_note else ""
    try:
        yield
    except KcliError as exc:
        raise fail(exc.describe() + suffix, exit_code_for(exc) or ExitCode.PROBLEMS) from None


def _zk_store(stack: ExitStack, zookeeper: str | None, timeout: float, auth: str | None, *, required: bool,
              why: str) -> Any:
    if not zookeeper:
        if required:
            raise fail(f"no ZooKeeper given ({why}): use --zookeeper host:port[/chroot] or set KCTL_ZOOKEEPER",
                       ExitCode.USAGE)
        return None
    from kcli.zk.offsets import ZkOffsetStore

    try:
        store = ZkOffsetStore(zookeeper, timeout=timeout, auth=auth)
    except KcliError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    stack.callback(store.close)
    return store


def _kafka_store(stack: ExitStack, bootstrap: str | None, log_dir: Path | None, offsets_partitions: int | None,
                 timeout: float) -> Any:
    from kcli.tools.offsets import LogDirOffsetStore

    if bootstrap and log_dir:  # only a given -b: an exported $KCTL_BOOTSTRAP_SERVER gives way to --log-dir
        raise fail("give --bootstrap-server or --log-dir, not both", ExitCode.USAGE)
    if log_dir is not None:
        store = LogDirOffsetStore(log_dir, offsets_partitions=offsets_partitions)
        stack.callback(store.close)
        return store
    bootstrap = bootstrap_server(bootstrap)
    if not bootstrap:
        raise fail(f"no Kafka given: use --bootstrap-server host:port or set {BOOTSTRAP_ENV} (or --log-dir DIR for "
                   "a stopped broker)", ExitCode.USAGE)
    from kcli.client import KafkaClient, KafkaOffsetStore
    from kcli.client.client import parse_bootstrap

    try:
        parse_bootstrap(bootstrap)
    except KcliError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    store = KafkaOffsetStore(KafkaClient(bootstrap, timeout=timeout, security=client_security()))
    stack.callback(store.close)
    store.client.connect()
    return store


@contextmanager
def _progress(description: str) -> Iterator[Any]:
    """Yields ``start(total) -> advance(n)``; a bar on stderr only when a person watches it."""
    if not progress_wanted(data_on_stdout=False):
        yield lambda total, label=None: (lambda n: None)
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=err_console.get(), transient=True)
    with bar:
        def start(total: int, label: str | None = None) -> Any:
            task = bar.add_task(label or description, total=total)
            return lambda n: bar.advance(task, n)

        yield start


def _default_backup() -> Path:
    return Path(f"kctl-offsets-backup-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}.csv")


MAX_TABLE_ROWS = 1000


# -- rendering -------------------------------------------------------------------------------------------------
def _render_plan(plan: Any) -> None:
    console = _console()
    table = _table("GROUP", "TOPIC", "PARTITION", plan.source.upper(), plan.target.upper(), "LOG START", "LOG END",
                   "PLANNED", "ACTION",
                   title=f"{escape(plan.source)} {escape(plan.source_location)} -> {escape(plan.target)} "
                         f"{escape(plan.target_location)}")
    rows = sum(len(g.partitions) for g in plan.groups)
    brief = rows > MAX_TABLE_ROWS  # a large migration: only what needs attention, --json has every row
    for g in plan.groups:
        refused = g.status == "refused"
        for p in g.partitions:
            if brief and p.action in ("commit", "unchanged") and not refused:
                continue
            # A refused group writes nothing: its rows say so, whatever each partition alone would do.
            action = "refused" if refused and p.action in ("commit", "clamped", "unchanged") else p.action
            table.add_row(escape(g.group), escape(p.topic), str(p.partition), str(p.source_offset),
                          _cell(p.target_offset), _cell(p.log_start_offset), _cell(p.log_end_offset),
                          _cell(p.planned_offset), action)
        if not g.partitions and (not brief or g.status in ("refused", "not_found")):
            action = {"refused": "refused", "not_found": "not found"}.get(g.status) or "; ".join(g.notes) or "-"
            table.add_row(escape(g.group), "-", "-", "-", "-", "-", "-", "-", action)
    if table.row_count:
        console.print(table)
    if brief:
        console.print(f"({rows} partitions: rows that commit or stay unchanged are not shown; --json has them all)")
    for g in plan.groups:
        for why in g.live:
            console.print(f"group {escape(g.group)}: live: {escape(why)}" + (" (--force)" if g.forced else ""))
        for refusal in g.refusals:
            if refusal not in g.live and refusal not in g.errors:
                console.print(f"group {escape(g.group)}: refused: {escape(refusal)}")
        for error in g.errors:
            err_console.print(f"kctl: group {g.group} refused: {error} (nothing was written for it)", markup=False)
        if g.missing:
            err_console.print(f"kctl: group {g.group}: not found in {plan.source} {plan.source_location}",
                              markup=False)
    s = plan.summary()
    console.print(f"plan: {s['groups']} groups ({s['groups_commit']} to commit, {s['groups_unchanged']} unchanged, "
                  f"{s['groups_refused']} refused, {s['groups_empty']} without offsets"
                  f"{', ' + str(s['groups_not_found']) + ' not found' if s['groups_not_found'] else ''}), "
                  f"{s['partitions_to_write']} partitions to write")


def _finish_plan(plan: Any, as_json: bool) -> None:
    if as_json:
        write_json_line({"executed": False, "plan": plan.to_json()})
    else:
        _render_plan(plan)
        _console().print("dry run: nothing written (add --execute to commit)")
    raise typer.Exit(int(ExitCode.OK if plan.ok else ExitCode.PROBLEMS))


def _finish_apply(result: Any, as_json: bool) -> None:
    if as_json:
        write_json_line(result.to_json())
    else:
        console = _console()
        _render_plan(result.plan)
        rate = f" ({result.partitions_written / result.elapsed_s:,.0f} partitions/s)" if result.elapsed_s else ""
        console.print(f"committed {len(result.committed)} groups, {result.partitions_written} partitions in "
                      f"{result.elapsed_s:.2f}s{rate}")
        if result.backup:
            console.print(f"backup of the previous offsets: {escape(result.backup)}")
        if result.no_previous and result.backup:
            console.print(f"{result.no_previous} partitions had no previous offset: a roll-back from the backup "
                          "leaves them as migrated")
        elif result.no_previous:
            console.print(f"no backup written: none of the {result.no_previous} partitions had a previous offset")
        for group, errors in result.partition_errors.items():
            for tp, error in errors.items():
                console.print(f"group {escape(group)}: {escape(tp)}: {escape(error)}")
        for d in result.differences:
            console.print(f"verification: group {escape(d.group)} {escape(d.topic)}-{d.partition}: planned "
                          f"{d.planned_offset}, found {_cell(d.found_offset)}")
        # Only groups written or found unchanged are read back: a refused group was not, and is no "verified".
        checked = [g for g in result.plan.groups if g.status in ("commit", "unchanged")]
        if result.verified and not result.differences and checked:
            skipped = len(result.plan.groups) - len(checked)
            console.print("verified: the target holds exactly the planned offsets" if not skipped else
                          f"verified: the target holds exactly the planned offsets of {len(checked)} groups "
                          f"({skipped} not written)")
    if result.error is not None:
        committed = ", ".join(result.committed) or "none"
        err_console.print(f"kctl: group {result.failed_group}: {result.error}", markup=False)
        err_console.print(f"kctl: groups committed before the failure: {committed}; not attempted: "
                          f"{len(result.not_attempted)}", markup=False)
        code = exit_code_for(result.exception) if result.exception is not None else None
        raise typer.Exit(int(code if code is ExitCode.UNREADABLE else ExitCode.PROBLEMS))
    raise typer.Exit(int(ExitCode.OK if result.ok else ExitCode.PROBLEMS))


def _finish_csv(plan: Any, result: Any) -> None:
    """kafka-consumer-groups --reset-offsets --export: the offsets the groups hold after the plan (the dry run's
    planned ones; after --execute, those of the groups committed or already there) on stdout as the CSV --from-file
    reads, each problem on stderr, then the exit status the table would earn."""
    from kcli.tools.offsets import dump_offsets

    done = set(result.committed) if result is not None else set()
    holding = {g.group: g.planned for g in plan.groups
               if g.status == "unchanged" or (g.status == "commit" and (result is None or g.group in done))}
    sys.stdout.write(dump_offsets({g: o for g, o in holding.items() if o}, "csv"))
    for problem in (result if result is not None else plan).problems:
        err_console.print(f"kctl: {problem.describe()}", markup=False)
    if result is not None and result.backup:
        err_console.print(f"kctl: backup of the previous offsets: {result.backup}", markup=False)
    ok = plan.ok if result is None else result.ok
    code = exit_code_for(result.exception) if result is not None and result.exception is not None else None
    raise typer.Exit(int(code if code is ExitCode.UNREADABLE else ExitCode.OK if ok else ExitCode.PROBLEMS))


def _transfer(source: Any, target: Any, ranges: Any, live_checks: list[Any], *, groups: list[str] | None,
              topics: list[str] | None, execute: bool, clamp: bool, force: bool, backup: Path | None,
              as_json: bool, as_csv: bool = False) -> None:
    from kcli.tools.offsets import apply_plan, plan_transfer

    with _progress("reading offsets") as progress:
        with _errors():
            bar: list[Any] = []
            plan = plan_transfer(source, target, ranges, groups=groups, topics=topics, clamp=clamp, force=force,
                                 live_checks=live_checks, progress=lambda n: bar[0](n) if bar else None,
                                 on_total=lambda total: bar.append(progress(total, f"reading {source.kind}")))
        if not execute:
            if as_csv:
                _finish_csv(plan, None)
            _finish_plan(plan, as_json)
        advance = progress(plan.count("commit"), f"writing {target.kind}")
        with _errors(committed_note=False):
            result = apply_plan(plan, target, backup=backup or _default_backup(), progress=advance)
    if as_csv:
        _finish_csv(plan, result)
    _finish_apply(result, as_json)


# -- commands ----------------------------------------------------------------------------------------------------
@app.command("migrate")
def migrate_cmd(
    zookeeper: ZookeeperOpt = None,
    bootstrap: BootstrapOpt = None,
    log_dir: LogDirOpt = None,
    offsets_partitions: OffsetsPartitionsOpt = None,
    group: GroupOpt = None,
    topic: TopicOpt = None,
    execute: ExecuteOpt = False,
    clamp: ClampOpt = False,
    force: ForceOpt = False,
    backup: BackupOpt = None,
    rollback: Annotated[Optional[Path], typer.Option(
        "--rollback", show_default=False, help="Restore the offsets saved in this backup file.")] = None,
    to_zookeeper: Annotated[bool, typer.Option(
        "--to-zookeeper", help="Copy the other way, Kafka -> ZooKeeper (a roll-back of the migration).")] = False,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
    auth: AuthOpt = None,
) -> None:
    """ZooKeeper-stored offsets (/consumers/G/offsets/T/P) into __consumer_offsets, through the groups' coordinators
    (or a stopped broker's log dir): plan, back up, commit one request per group, verify with OffsetFetch."""
    from kcli.tools.offsets import FileOffsetStore

    with ExitStack() as stack, _errors():
        kafka = _kafka_store(stack, bootstrap, log_dir, offsets_partitions, timeout)
        zk = _zk_store(stack, zookeeper, timeout, auth, required=rollback is None or to_zookeeper,
                       why="the offsets are read from ZooKeeper" if not to_zookeeper else "--to-zookeeper writes it")
        live = [s for s in (zk, kafka) if s is not None]
        if rollback is not None:
            if len(group or []) > 1:
                raise fail("--rollback restores what its file holds; give at most one --group (for a 3-column CSV)",
                           ExitCode.USAGE)
            source = FileOffsetStore(rollback, group=group[0] if group else None)
            target = zk if to_zookeeper else kafka
            groups = None
        else:
            source, target = (kafka, zk) if to_zookeeper else (zk, kafka)
            # Back to ZooKeeper: the old consumers' groups (those under /consumers), not every Kafka group.
            groups = group or (zk.list_groups() if to_zookeeper else None)
        _transfer(source, target, kafka, live, groups=groups, topics=topic, execute=execute, clamp=clamp,
                  force=force, backup=backup, as_json=as_json)


@app.command("export")
def export_cmd(
    source: Annotated[str, typer.Option("--from", help="zookeeper or kafka (kafka with --log-dir: a stopped broker's "
                                                      "log dir).")] = "zookeeper",
    zookeeper: ZookeeperOpt = None,
    bootstrap: BootstrapOpt = None,
    log_dir: LogDirOpt = None,
    group: GroupOpt = None,
    topic: TopicOpt = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="csv (kafka-consumer-groups' layout) or json.")] = "csv",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", show_default=False,
                                                   help="Write here (default: standard output).")] = None,
    timeout: TimeoutOpt = 10.0,
    auth: AuthOpt = None,
) -> None:
    """Offsets of groups from ZooKeeper or Kafka to a CSV or JSON file."""

    if source not in ("zookeeper", "kafka") or fmt not in ("csv", "json"):
        raise fail("--from takes zookeeper or kafka, --format csv or json", ExitCode.USAGE)
    with ExitStack() as stack, _errors(committed_note=False):
        store = (_zk_store(stack, zookeeper, timeout, auth, required=True, why="--from zookeeper")
                 if source == "zookeeper" else _kafka_store(stack, bootstrap, log_dir, None, timeout))
        names = sorted(set(group)) if group else store.list_groups()
        offsets = store.read(names)
    write_offsets(offsets, fmt, store.kind, store.location, topic, output)


def write_offsets(offsets: dict, fmt: str, kind: str, location: str, topics: list[str] | None,
                  output: Path | None) -> None:
    """Exported offsets (only ``topics``' if given) as CSV or JSON to stdout or ``output`` (offsets export,
    groups export)."""
    from kcli.tools.offsets import dump_offsets

    if topics:
        offsets = {g: {tp: o for tp, o in tps.items() if tp[0] in topics} for g, tps in offsets.items()}
    text = dump_offsets(offsets, fmt, source=kind, location=location)
    if output is None:
        sys.stdout.write(text)
        return
    try:
        output.write_text(text)
    except OSError as exc:
        raise fail(f"{output}: {exc.strerror}", ExitCode.UNREADABLE) from None
    err_console.print(f"kctl: wrote {sum(len(t) for t in offsets.values())} offsets of {len(offsets)} groups "
                      f"to {output}", markup=False)


@app.command("import")
def import_cmd(
    file: Annotated[Path, typer.Argument(help="A CSV (topic,partition,offset or group,topic,partition,offset) or "
                                              "JSON file, as export writes.", show_default=False)],
    to: Annotated[str, typer.Option("--to", help="kafka or zookeeper.")] = "kafka",
    zookeeper: ZookeeperOpt = None,
    bootstrap: BootstrapOpt = None,
    log_dir: LogDirOpt = None,
    offsets_partitions: OffsetsPartitionsOpt = None,
    group: GroupOpt = None,
    topic: TopicOpt = None,
    execute: ExecuteOpt = False,
    clamp: ClampOpt = False,
    force: ForceOpt = False,
    backup: BackupOpt = None,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
    auth: AuthOpt = None,
) -> None:
    """Offsets from a CSV or JSON file into Kafka or ZooKeeper, with migrate's plan, backup and verification."""
    from kcli.tools.offsets import FileOffsetStore

    if to not in ("kafka", "zookeeper"):
        raise fail("--to takes kafka or zookeeper", ExitCode.USAGE)
    with ExitStack() as stack, _errors():
        kafka = _kafka_store(stack, bootstrap, log_dir, offsets_partitions, timeout)
        zk = _zk_store(stack, zookeeper, timeout, auth, required=to == "zookeeper", why="--to zookeeper")
        single = group[0] if group and len(group) == 1 else None
        source = FileOffsetStore(file, group=single)
        target = zk if to == "zookeeper" else kafka
        _transfer(source, target, kafka, [s for s in (zk, kafka) if s is not None],
                  groups=group or None, topics=topic,
                  execute=execute, clamp=clamp, force=force, backup=backup, as_json=as_json)


# -- offsets for a time ----------------------------------------------------------------------------------------
_DURATION = re.compile(r"(\d+)([smhdw])")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
EARLIEST_TIME, LATEST_TIME = -2, -1


def parse_time_spec(text: str, now_ms: int | None = None) -> int:
    """TIME of `for-time`: epoch ms; an ISO-8601 date-time (UTC unless it names a zone); earliest (-2) or
    latest (-1), ListOffsets' special values; now; or a duration before now, -1h / now-90m / -1d12h
    (units s, m, h, d, w)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    word = text.strip().lower()
    if word in ("earliest", "-2", "beginning"):
        return EARLIEST_TIME
    if word in ("latest", "-1", "end"):
        return LATEST_TIME
    if word == "now":
        return now_ms
    relative = word[4:] if word.startswith("now-") else word[1:] if word.startswith("-") else None
    if relative is not None and relative and _DURATION.sub("", relative) == "":
        return now_ms - sum(int(n) * _UNIT_MS[u] for n, u in _DURATION.findall(relative))
    if word.isdigit():
        return int(word)
    if word.startswith("-"):
        raise typer.BadParameter(f"{text!r}: a negative TIME is -1 (latest), -2 (earliest) or a duration like -1h")
    try:
        stamp = parse_timestamp(text)
    except typer.BadParameter:
        raise typer.BadParameter(f"{text!r} is none of epoch milliseconds, ISO-8601, earliest, latest, now or a "
                                 "duration before now (-1h, now-30m, -2d)") from None
    assert stamp is not None
    return stamp


def _split_target(text: str) -> tuple[str, int | None]:
    topic, colon, partition = text.rpartition(":")
    if colon and partition.isdigit() and topic:
        return topic, int(partition)
    return text, None


@app.command("for-time", context_settings={"ignore_unknown_options": True, "help_option_names": ["--help"]})
def for_time_cmd(
    when: Annotated[str, typer.Argument(metavar="TIME", show_default=False, help=(
        "Epoch ms, ISO-8601 (UTC unless it names a zone), earliest (-2), latest (-1), now, or a duration before "
        "now: -1h, now-30m, -2d12h (units s m h d w)."))],
    targets: Annotated[Optional[list[str]], typer.Argument(metavar="TARGET", show_default=False,
                                                           help="Log dirs or partition dirs; with --bootstrap-server "
                                                           "topics, or topic:partition (default: every topic). With "
                                                           "only $KCTL_BOOTSTRAP_SERVER set, paths still read "
                                                           "offline.")] = None,
    bootstrap: BootstrapOpt = None,
    topic: Annotated[Optional[list[str]], typer.Option(
        "--topic", show_default=False, help="Offline: only this topic (repeat for several).")] = None,
    table_view: Annotated[bool, typer.Option("--table", help="A table with each answer's timestamp, the log end "
                                             "and where a consumer reset to TIME starts (SEEK).")] = False,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """The earliest offset whose timestamp is >= TIME, per partition: offline from a log dir through the time
    indexes (as Kafka's fetchOffsetByTimestamp), online with ListOffsets (kcat -Q, kafka-get-offsets --time).
    Printed as kafka-get-offsets prints it, topic:partition:offset lines; --table for timestamps, log ends and
    SEEK. A partition without such a record answers offset -1 (ListOffsets' answer); a consumer reset to TIME
    starts at its log end offset (SEEK). Exit 1 when a partition or topic could not be answered."""
    try:
        stamp = parse_time_spec(when)
    except typer.BadParameter as exc:
        raise fail(f"TIME: {exc}", ExitCode.USAGE) from None
    bootstrap = _for_time_broker(bootstrap, targets, topic)
    if bootstrap:
        if topic:
            raise fail("--topic is for a log dir; online, name topics as arguments (TOPIC or TOPIC:PARTITION)",
                       ExitCode.USAGE)
        from kcli.client import KafkaClient
        from kcli.client.client import parse_bootstrap
        from kcli.client.offsets_time import offsets_for_time as online

        with _errors(committed_note=False):
            parse_bootstrap(bootstrap)
            with KafkaClient(bootstrap, timeout=timeout, client_id="kctl-offsets", security=client_security()) as client:
                rows = online(client, [_split_target(t) for t in targets] if targets else None, stamp)
        document = {"ok": all(r.error is None for r in rows), "timestamp": stamp, "source": bootstrap,
                    "offsets": [r.to_json() for r in rows if r.error is None],
                    "problems": [{"topic": r.topic, "partition": r.partition, "reason": r.error}
                                 for r in rows if r.error is not None]}
        errors = [f"{r.topic}" + (f"-{r.partition}" if r.partition >= 0 else "") + f": {r.error}"
                  for r in rows if r.error is not None]
        rows = [r for r in rows if r.error is None]
        code = ExitCode.OK if document["ok"] else ExitCode.PROBLEMS
    else:
        if not targets:
            raise fail("give a log dir (or partition dirs), or --bootstrap-server host:port and topics",
                       ExitCode.USAGE)
        from kcli.tools.offsets_time import offsets_for_time as offline

        report = offline(targets, stamp, topics=topic)
        document = report.to_json()
        errors = [p.describe() for p in report.problems]
        rows = report.offsets
        code = report_exit_code(report)  # 3 when an input could not be read, else 1 for damage
    if as_json:
        write_json_line(document)
    elif table_view:
        _render_for_time(rows, stamp)
    else:
        # kafka-get-offsets (GetOffsetShell): topic:partition:offset, sorted by topic then partition
        for r in sorted(rows, key=lambda r: (r.topic, r.partition)):
            typer.echo(f"{r.topic}:{r.partition}:{r.offset}")
    for line in errors:
        err_console.print(f"kctl: {line}", markup=False)
    if code is not ExitCode.OK:
        raise typer.Exit(int(code))


def _for_time_broker(bootstrap: str | None, targets: list[str] | None, topic: list[str] | None) -> str | None:
    """for-time asks a broker when -b is given. With only $KCTL_BOOTSTRAP_SERVER it does unless the command line
    is an offline one: a target that is a path (one that exists, or has a /: topic names have none) or --topic."""
    if bootstrap:
        return bootstrap
    if topic or any(os.sep in t or os.path.exists(t) for t in targets or ()):
        return None
    return bootstrap_server(None)


def _render_for_time(rows: list[Any], stamp: int) -> None:
    from kcli.cli.zk import _time

    console = _console()
    label = {EARLIEST_TIME: "earliest (-2)", LATEST_TIME: "latest (-1)"}.get(stamp) or f"{stamp} ({_time(stamp)})"
    table = _table("TOPIC", "PARTITION", "OFFSET", "TIMESTAMP", "LOG END", "SEEK", title=f"offsets for {label}")
    for r in rows:
        table.add_row(escape(r.topic), str(r.partition), str(r.offset), _time(r.timestamp) if r.timestamp >= 0 else "-",
                      _cell(r.log_end_offset), _cell(r.seek_offset))
    console.print(table)
    if any(r.offset < 0 for r in rows) and stamp >= 0:
        console.print("offset -1: no record with a timestamp >= TIME (ListOffsets' answer); a consumer reset to "
                      "TIME starts at the log end (SEEK)")
