"""`kctl reassign`: kafka-reassign-partitions. --generate a plan, --execute it, --verify, --cancel, --list
(AlterPartitionReassignments and ListPartitionReassignments to the controller, KIP-455; AlterReplicaLogDirs to the
brokers for the log dirs a plan names, KIP-113).

Thin: kcli.client.reassign parses the plans, computes the assignment and does the requests; this checks the
options and prints Kafka's lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kcli.cli.common import (BootstrapOpt, ExitCode, JsonOpt, err_console, fail, kafka_client, request_timeout_ms,
                             write_json_line)
from kcli.errors import UsageError

ACTIONS = ("--generate", "--execute", "--verify", "--cancel", "--list")
# kafka-reassign-partitions' permitted options per action (validateAndParseArgs)
ALLOWED = {"--generate": {"--topics-to-move-json-file", "--broker-list", "--disable-rack-aware"},
           "--execute": {"--reassignment-json-file", "--additional", "--throttle",
                         "--replica-alter-log-dirs-throttle"},
           "--verify": {"--reassignment-json-file", "--preserve-throttles"},
           "--cancel": {"--reassignment-json-file", "--preserve-throttles"},
           "--list": set()}
REQUIRED = {"--generate": ("--topics-to-move-json-file", "--broker-list"), "--execute": ("--reassignment-json-file",),
            "--verify": ("--reassignment-json-file",), "--cancel": ("--reassignment-json-file",), "--list": ()}


def reassign_cmd(
    generate: Annotated[bool, typer.Option("--generate", help="Propose a plan: the topics of "
                                           "--topics-to-move-json-file spread over --broker-list.")] = False,
    execute: Annotated[bool, typer.Option("--execute", help="Start the reassignment of --reassignment-json-file "
                                          "(prints the current assignment first, for a rollback).")] = False,
    verify: Annotated[bool, typer.Option("--verify", help="Whether each partition of --reassignment-json-file "
                                         "has reached its target.")] = False,
    cancel: Annotated[bool, typer.Option("--cancel", help="Cancel the reassignments of --reassignment-json-file "
                                         "still in progress (their replicas go back).")] = False,
    list_: Annotated[bool, typer.Option("--list", help="Every reassignment in progress, with the replicas "
                                        "being added and removed.")] = False,
    topics_to_move: Annotated[Optional[Path], typer.Option(
        "--topics-to-move-json-file", metavar="FILE", show_default=False,
        help='--generate: {"version":1,"topics":[{"topic":'
        '"t"}]}.')] = None,
    broker_list: Annotated[Optional[str], typer.Option(
        "--broker-list", metavar="IDS", show_default=False,
        help="--generate: the broker ids to spread the replicas over, "
        "comma-separated (1,2,3).")] = None,
    disable_rack_aware: Annotated[bool, typer.Option(
        "--disable-rack-aware", help="--generate: ignore the brokers' racks.")] = False,
    reassignment_file: Annotated[Optional[Path], typer.Option(
        "--reassignment-json-file", metavar="FILE", show_default=False,
        help='The plan: {"version":1,"partitions":[{"topic":"t",'
        '"partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}; a log dir other than "any" is an absolute '
        "path of that broker's log.dirs, where the replica is moved (AlterReplicaLogDirs).")] = None,
    additional: Annotated[bool, typer.Option(
        "--additional", help="--execute even while other reassignments are in progress.")] = False,
    throttle: Annotated[Optional[int], typer.Option(
        "--throttle", min=0, metavar="BYTES/S", show_default=False,
        help="--execute: throttle the replication between brokers to this many B/s (KIP-73: the brokers' leader "
        "and follower rates, the topics' throttled replicas); with --additional, change a running "
        "reassignment's throttle. --verify removes it once the reassignment is complete.")] = None,
    log_dirs_throttle: Annotated[Optional[int], typer.Option(
        "--replica-alter-log-dirs-throttle", min=0, metavar="BYTES/S", show_default=False,
        help="--execute: a throttle in B/s on "
        "moves between log dirs (replica.alter.log.dirs.io.max.bytes.per.second).")] = None,
    preserve_throttles: Annotated[bool, typer.Option(
        "--preserve-throttles", help="--verify, --cancel: leave the throttles in place.")] = False,
    bootstrap: BootstrapOpt = None,
    as_json: JsonOpt = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker "
                                           "request.")] = 10.0,
) -> None:
    """Partition reassignment as kafka-reassign-partitions does it: exactly one of --generate, --execute, --verify,
    --cancel, --list. Exit status: 0 ok (--verify: every partition completed), 1 a partition failed, is still
    moving or is not where the plan says (--verify), 2 usage error or a malformed plan, 3 unreadable file or no
    broker."""
    given = {"--generate": generate, "--execute": execute, "--verify": verify, "--cancel": cancel, "--list": list_}
    actions = [a for a in ACTIONS if given[a]]
    if len(actions) != 1:
        raise fail(f"Command must include exactly one action: {', '.join(ACTIONS)}", ExitCode.USAGE)
    action = actions[0]
    options = {"--topics-to-move-json-file": topics_to_move is not None, "--broker-list": broker_list is not None,
               "--disable-rack-aware": disable_rack_aware, "--reassignment-json-file": reassignment_file is not None,
               "--additional": additional, "--throttle": throttle is not None,
               "--replica-alter-log-dirs-throttle": log_dirs_throttle is not None,
               "--preserve-throttles": preserve_throttles}
    for option in REQUIRED[action]:
        if not options[option]:
            raise fail(f"{action} needs {option}", ExitCode.USAGE)
    for option, on in options.items():
        if on and option not in ALLOWED[action]:
            raise fail(f'Option "{option}" can\'t be used with action "{action}"', ExitCode.USAGE)

    if action == "--generate":
        assert topics_to_move is not None and broker_list is not None
        _generate(_read(topics_to_move), str(topics_to_move), broker_list, not disable_rack_aware, bootstrap, timeout,
                  as_json)
    elif action == "--list":
        _list(bootstrap, timeout, as_json)
    else:
        from kcli.client.reassign import parse_reassignment

        assert reassignment_file is not None
        plan = _usage(lambda: parse_reassignment(_read(reassignment_file), str(reassignment_file)))
        if action == "--execute":
            _execute(plan, additional, throttle, log_dirs_throttle, bootstrap, timeout, as_json)
        elif action == "--verify":
            _verify(plan, preserve_throttles, bootstrap, timeout, as_json)
        else:
            _cancel(plan, preserve_throttles, bootstrap, timeout, as_json)


def _read(path: Path) -> str:
    return path.read_text()  # a missing or unreadable file: the exit-status table's 3


def _usage(work: Any) -> Any:
    """A malformed plan or option value is a usage error (2)."""
    try:
        return work()
    except UsageError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None


def _client(bootstrap: str | None, timeout: float) -> Any:
    return kafka_client(bootstrap, timeout, "kctl-reassign")


def _generate(text: str, source: str, broker_list: str, rack_aware: bool, bootstrap: str | None, timeout: float,
              as_json: bool) -> None:
    from kcli.client.reassign import format_reassignment_json, generate, parse_topics_to_move, reassignment_json

    topics = _usage(lambda: parse_topics_to_move(text, source))
    try:
        brokers = [int(b) for b in broker_list.split(",") if b.strip()]
    except ValueError:
        raise fail(f"--broker-list {broker_list!r}: expected broker ids separated by commas (1,2,3)",
                   ExitCode.USAGE) from None
    if not brokers:
        raise fail("--broker-list names no broker", ExitCode.USAGE)
    with _client(bootstrap, timeout) as client:
        plan = _usage(lambda: generate(client, topics, brokers, rack_aware=rack_aware))
    if as_json:
        write_json_line({"current": reassignment_json(plan.current), "proposed": reassignment_json(plan.proposed)})
        return
    typer.echo(f"Current partition replica assignment\n{format_reassignment_json(plan.current)}\n")
    typer.echo(f"Proposed partition reassignment configuration\n{format_reassignment_json(plan.proposed)}")


def _refuse_log_dirs(plan: Any, client: Any) -> None:
    from kcli.client.reassign import log_dir_support

    if not plan.log_dirs or log_dir_support(client):
        return
    named = ", ".join(f"{t}-{p} on broker {b}: {d}" for (t, p, b), d in sorted(plan.log_dirs.items()))
    raise fail(f"the plan names log dirs ({named}), but the broker does not serve AlterReplicaLogDirs (moving a "
               "replica into a named log directory): give \"any\" or leave out log_dirs", ExitCode.USAGE)


def _refuse_throttles(client: Any, throttle: int | None, log_dirs_throttle: int | None) -> None:
    """A broker that does not implement replication throttles (an older kctl broker) refuses the rate: said
    before anything is set or started."""
    from kcli.client.reassign import throttle_support

    option = "--throttle" if throttle is not None else "--replica-alter-log-dirs-throttle"
    refusal = throttle_support(client)
    if refusal is not None:
        raise fail(f"{option} needs replication throttles (the brokers' leader/follower.replication.throttled.rate "
                   "and the topics' throttled-replicas lists, Kafka's ReplicationQuotaManager), which the broker "
                   f"does not implement ({refusal}): run without {option}", ExitCode.USAGE)


def _execute(plan: Any, additional: bool, throttle: int | None, log_dirs_throttle: int | None,
             bootstrap: str | None, timeout: float, as_json: bool) -> None:
    from kcli.client.reassign import (execute, format_reassignment_json, partition_name, reassignment_json,
                                      replica_name)

    with _client(bootstrap, timeout) as client:
        if throttle is not None or log_dirs_throttle is not None:
            _refuse_throttles(client, throttle, log_dirs_throttle)
        _refuse_log_dirs(plan, client)
        result = _usage(lambda: execute(client, plan, additional=additional, timeout_ms=request_timeout_ms(timeout),
                                        throttle=throttle, log_dirs_throttle=log_dirs_throttle))
    if as_json:
        write_json_line({"rollback": reassignment_json(result.current),
                         "started": [partition_name(tp) for tp in result.started],
                         "errors": {partition_name(tp): e for tp, e in sorted(result.errors.items())},
                         "throttle": result.throttle.to_json() if result.throttle is not None else None,
                         **({"log_dir_moves_started": [replica_name(r) for r in result.moves_started],
                             "log_dir_moves_pending": [replica_name(r) for r in result.moves_pending]}
                            if plan.log_dirs else {})})
    else:
        typer.echo(f"Current partition replica assignment\n\n{format_reassignment_json(result.current)}\n\n"
                   "Save this to use as the --reassignment-json-file option during rollback")
        if result.throttle is not None:
            typer.echo("\n".join(result.throttle.lines()))
        if result.started:
            typer.echo(f"Successfully started partition reassignment{'' if len(result.started) == 1 else 's'} for "
                       f"{','.join(partition_name(tp) for tp in result.started)}")
        if result.moves_started:
            typer.echo(f"Successfully started log directory move{'' if len(result.moves_started) == 1 else 's'} "
                       f"for: {','.join(replica_name(r) for r in result.moves_started)}")
    if result.errors:
        err_console.print("kctl: Error reassigning partition(s):\n" + "\n".join(
            f"{partition_name(tp)}: {e}" for tp, e in sorted(result.errors.items())), markup=False)
        raise typer.Exit(int(ExitCode.PROBLEMS))
    if result.moves_pending:
        many = len(result.moves_pending) > 1
        err_console.print(f"kctl: Timed out before log directory move{'s' if many else ''} could be started for: "
                          f"{','.join(replica_name(r) for r in result.moves_pending)}", markup=False)
        raise typer.Exit(int(ExitCode.PROBLEMS))


def _cleared(cleared: Any, as_json: bool) -> bool:
    """The tool's "Clearing ... throttles" lines (not with --json), and any broker or topic that refused on
    stderr; whether all went."""
    if cleared is None:
        return True
    if not as_json:
        typer.echo("\n".join(cleared.lines()))
    if cleared.errors:
        err_console.print("kctl: Error clearing throttles:\n" + "\n".join(cleared.errors), markup=False)
    return not cleared.errors


def _verify(plan: Any, preserve_throttles: bool, bootstrap: str | None, timeout: float, as_json: bool) -> None:
    from kcli.client.reassign import verify_reassignment

    with _client(bootstrap, timeout) as client:
        result = verify_reassignment(client, plan, preserve_throttles=preserve_throttles,
                                     timeout_ms=request_timeout_ms(timeout))
    if as_json:
        write_json_line({"partitions": [s.to_json() for s in result.states], "complete": result.complete,
                         "reassignments_in_progress": result.ongoing,
                         "throttles_cleared": result.cleared.to_json() if result.cleared is not None else None,
                         **({"log_dirs": [m.to_json() for m in result.moves]} if plan.log_dirs else {})})
    else:
        typer.echo("Status of partition reassignment:")
        for s in result.states:
            typer.echo(s.line())
        for m in result.moves:  # replicaMoveStatesToString, right after the partitions' lines
            typer.echo(m.line())
    if not _cleared(result.cleared, as_json) or not result.complete:
        raise typer.Exit(int(ExitCode.PROBLEMS))


def _cancel(plan: Any, preserve_throttles: bool, bootstrap: str | None, timeout: float, as_json: bool) -> None:
    from kcli.client.reassign import cancel, partition_name, replica_name

    with _client(bootstrap, timeout) as client:
        result = cancel(client, plan, timeout_ms=request_timeout_ms(timeout), preserve_throttles=preserve_throttles)
    if as_json:
        write_json_line({"cancelled": [partition_name(tp) for tp in result.cancelled],
                         "errors": {partition_name(tp): e for tp, e in sorted(result.errors.items())},
                         "throttles_cleared": result.cleared.to_json() if result.cleared is not None else None,
                         **({"log_dir_moves_cancelled": [replica_name(r) for r in result.moves_cancelled]}
                            if plan.log_dirs else {})})
    else:
        if result.cancelled:
            typer.echo(f"Successfully cancelled partition reassignment{'' if len(result.cancelled) == 1 else 's'} "
                       f"for: {','.join(partition_name(tp) for tp in result.cancelled)}")
        elif not result.errors:
            typer.echo("None of the specified partition reassignments are active.")
        if plan.log_dirs and result.moves_cancelled:  # executeMoves back to the current dirs, as Kafka prints it
            typer.echo(f"Successfully started log directory move{'' if len(result.moves_cancelled) == 1 else 's'} "
                       f"for: {','.join(replica_name(r) for r in result.moves_cancelled)}")
        elif plan.log_dirs:
            typer.echo("None of the specified partition moves are active.")
    cleared = _cleared(result.cleared, as_json)
    if result.errors:
        err_console.print(f"kctl: Error cancelling partition reassignment{'' if len(result.errors) == 1 else 's'} "
                          "for:\n" + "\n".join(f"{partition_name(tp)}: {e}" for tp, e in sorted(result.errors.items())),
                          markup=False)
    if result.errors or not cleared:
        raise typer.Exit(int(ExitCode.PROBLEMS))


def _list(bootstrap: str | None, timeout: float, as_json: bool) -> None:
    from kcli.client.reassign import list_reassignments

    with _client(bootstrap, timeout) as client:
        ongoing = list_reassignments(client, timeout_ms=request_timeout_ms(timeout))
    if as_json:
        write_json_line({"reassignments": [r.to_json() for r in ongoing.values()]})
    elif not ongoing:
        typer.echo("No partition reassignments found.")
    else:
        typer.echo("Current partition reassignments:")
        for r in ongoing.values():
            typer.echo(r.line())

