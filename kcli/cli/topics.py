"""`kctl topics`: a per-topic rollup of log dirs (``kctl topics DIR``), and kafka-topics' jobs against any broker
(``list``, ``describe``, ``create``, ``delete``, ``alter-config``, ``add-partitions``/``alter``).

Thin: kcli.tools.topics reads the log dirs, kcli.client.topics does the requests; this parses and renders.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Annotated, Any, Optional

import typer

from kcli.cli.common import (BootstrapOpt, ConnectionGroup, GroupTimeoutOpt, JsonOpt, kafka_client, ExitCode,
                             err_console, escape, fail, request_timeout_ms, split_connection_options,
                             write_json_line)
from kcli.cli.errors import report_exit_code
from kcli.cli.zk import _cell, _console
from kcli.errors import KcliError, UsageError

LOGDIR_COMMAND = "logdir"


# kafka-topics.sh's actions, as the subcommands they are here (its --topic T is the subcommand's TOPIC argument).
KAFKA_ACTIONS = {"--list": "list", "--describe": "describe", "--create": "create", "--delete": "delete",
                 "--alter": "alter"}


def _kafka_spelling(action: str, words: list[str]) -> list[str]:
    """``--alter --topic T --partitions 6`` -> ``alter --partitions 6 T``."""
    options, topics = [], []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--topic" and i + 1 < len(words):
            topics.append(words[i + 1])
            i += 2
            continue
        if word.startswith("--topic="):
            topics.append(word.partition("=")[2])
        elif word != action:
            options.append(word)
        i += 1
    return [KAFKA_ACTIONS[action], *options, *topics]


class _TopicsGroup(ConnectionGroup):
    """`kctl topics DIR ...` is `kctl topics logdir DIR ...`: a first word that names no subcommand (after the
    group's own options) starts the offline rollup, unless -b came before it (then it is a mistyped online
    subcommand, and the usage error says so). kafka-topics.sh's command lines work too: an action flag (--list,
    --describe, --create, --delete, --alter) anywhere names the subcommand and --topic T gives its topic, so
    `kctl topics -b B --alter --topic T --partitions 6` is `kctl topics alter T -b B --partitions 6`."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        leading, rest = split_connection_options(args)
        if rest and rest[0] not in self.commands and rest[0] not in ("-h", "--help"):  # type: ignore[operator]
            actions = list(dict.fromkeys(word for word in rest if word in KAFKA_ACTIONS))
            if len(actions) > 1:
                ctx.fail(f"give one action, not {' and '.join(actions)}")
            if actions:
                command, *words = _kafka_spelling(actions[0], rest)
                return super().parse_args(ctx, [command, *leading, *words])
        if rest and rest[0] not in self.commands and rest[0] not in ("-h", "--help") and not leading:
            word = rest[0]
            if not word.startswith("-") and os.sep not in word and not os.path.lexists(word) \
                    and not ctx.resilient_parsing:
                # a mistyped subcommand (kctl topics lsit), not a log dir: no path separator and nothing there
                close = difflib.get_close_matches(word, sorted(self.commands), n=1)  # type: ignore[arg-type]
                hint = f" Did you mean {close[0]!r}?" if close else ""
                ctx.fail(f"No such command {word!r} (and no log dir of that name: give a path, ./{word}).{hint}")
            args = [LOGDIR_COMMAND, *rest]
        return super().parse_args(ctx, args)


app = typer.Typer(cls=_TopicsGroup, no_args_is_help=True,
                  help="Topics: a per-topic rollup of log dirs (kctl topics DIR), and kafka-topics' list, describe, "
                  "create, delete, alter-config and add-partitions (alter) against any Kafka-protocol broker. "
                  "-b/--timeout go before or after the subcommand.")

TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker request.")]
TopicsArg = Annotated[list[str], typer.Argument(help="Topic names.", show_default=False)]
ValidateOnlyOpt = Annotated[bool, typer.Option("--validate-only", help="Ask the broker to check the request "
                                               "without applying it.")]


@app.callback()
def topics_group(bootstrap: BootstrapOpt = None, timeout: GroupTimeoutOpt = None) -> None:
    """Topics: a per-topic rollup of log dirs (kctl topics DIR), and kafka-topics' jobs against any broker.
    -b/--timeout go before or after the subcommand (kctl topics -b B list).
    Exit status: 0 ok, 1 a topic failed or was not found, 2 usage error, 3 unreadable input or no broker."""
    # Declared for --help; ConnectionGroup hands -b/--timeout given here to the subcommand.


@contextmanager
def _client(bootstrap: str | None, timeout: float) -> Iterator[Any]:
    with kafka_client(bootstrap, timeout, "kctl-topics") as client:
        yield client


def _size(n: int) -> str:
    """du -h's style: 304B, 4.9K, 341K, 1.2M (powers of 1024)."""
    value = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            if unit == "B":
                return f"{int(value)}B"
            return f"{value:.1f}{unit}" if value < 10 else f"{value:.0f}{unit}"
        value /= 1024
    return str(n)


def _minute(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _time_range(first: int | None, last: int | None) -> str:
    a, b = _minute(first), _minute(last)
    if a == "-" and b == "-":
        return "-"
    if a != "-" and b != "-" and a[:10] == b[:10]:
        return f"{a}..{b[11:]}"  # 2024-04-19 13:20..15:49
    if a != "-" and b != "-" and a[:4] == b[:4]:
        return f"{a}..{b[5:]}"  # 2024-04-19 13:20..04-20 09:00
    return f"{a}..{b}"


# -- offline: the rollup of log dirs ---------------------------------------------------------------------
@app.command(LOGDIR_COMMAND)
def logdir_cmd(
    paths: Annotated[list[str], typer.Argument(help="Log dirs (or partition dirs) of a stopped or running broker.",
                                               show_default=False)],
    records: Annotated[bool, typer.Option("--records", help="Count records exactly (reads every batch header) "
                                          "instead of the offset span.")] = False,
    topic: Annotated[Optional[list[str]], typer.Option("--topic", "-t", show_default=False,
                                                       help="Only this topic (repeat for several).")] = None,
    partitions: Annotated[bool, typer.Option("--partitions", "-p", help="One row per partition, with its log "
                                             "start and end offsets.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Per topic of a log dir: partitions, segments, bytes, records, offset and time ranges, codecs and the topic
    config where the log dir holds it (`kctl topics DIR` is short for `kctl topics logdir DIR`). Reads sizes,
    indexes and each segment's first and last batches; --records reads every batch header."""
    from kcli.tools.topics import summarize_topics

    report = summarize_topics(paths, exact=records, topics=topic)
    if as_json:
        write_json_line(report.to_json())
    else:
        _render_rollup(report, partitions)
    raise typer.Exit(int(report_exit_code(report)))


def _rollup_table(first: str, *middle: str) -> Any:
    """Names and numbers stay on one line; only the codec list wraps (at its commas) on a narrow terminal."""
    from rich.table import Table

    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold", padding=(0, 2, 0, 0))
    table.add_column(first, overflow="fold", min_width=20)
    for column in middle:
        table.add_column(column, no_wrap=True, justify="right" if column in ("PARTS", "SEGS", "SIZE", "RECORDS")
                         else "left")
    table.add_column("CODECS", overflow="fold", min_width=6)
    return table


def _render_rollup(report: Any, per_partition: bool) -> None:
    console = _console()
    if per_partition:
        table = _rollup_table("PARTITION", "SEGS", "SIZE", "OFFSETS", "RECORDS", "TIME RANGE UTC")
        for t in report.topics:
            for p in t.partitions:
                count = str(p.records) if p.records is not None else f"~{p.offsets}"
                table.add_row(escape(f"{p.topic}-{p.partition}"), str(p.segments), _size(p.bytes),
                              f"{_cell(p.log_start_offset)}..{_cell(p.log_end_offset)}", count,
                              _time_range(p.first_timestamp, p.max_timestamp), ",".join(sorted(p.codecs)) or "-")
    else:
        table = _rollup_table("TOPIC", "PARTS", "SEGS", "SIZE", "RECORDS", "TIME RANGE UTC")
        for t in report.topics:
            count = str(t.records) if t.records is not None else f"~{t.offsets}"
            table.add_row(escape(t.topic), str(len(t.partitions)), str(t.segments), _size(t.bytes), count,
                          _time_range(t.first_timestamp, t.max_timestamp), ",".join(t.codecs) or "-")
    console.print(table)
    if not report.exact_records:
        console.print("~N: log end - log start offset, an upper bound (compaction, transaction markers); "
                      "--records counts")
    known = [t for t in report.topics if t.config is not None]
    for t in known:
        overrides = ", ".join(f"{k}={v}" for k, v in sorted(t.config.items())) or "no overrides (broker defaults)"
        console.print(f"config {escape(t.topic)}: {escape(overrides)}")
    if len(known) < len(report.topics):
        console.print(("other configs" if known else "config") + ": unknown here (kept in ZooKeeper or KRaft "
                      "metadata): kctl topics -b HOST:PORT describe")
    for problem in report.problems:
        err_console.print(f"kctl: {problem.describe()}", markup=False)


# -- online ------------------------------------------------------------------------------------------------
@app.command("list")
def list_cmd(
    bootstrap: BootstrapOpt = None,
    exclude_internal: Annotated[bool, typer.Option("--exclude-internal", help="Leave out internal topics "
                                                   "(__consumer_offsets, __transaction_state).")] = False,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Every topic of the cluster, one per line (Metadata)."""
    from kcli.client.topics import list_topics

    with _client(bootstrap, timeout) as client:
        names = list_topics(client, exclude_internal=exclude_internal)
    if as_json:
        write_json_line({"topics": names})
    else:
        for name in names:
            typer.echo(name)


def _partition_line(topic: str, p: Any) -> str:
    line = (f"\tTopic: {topic}\tPartition: {p.partition}\tLeader: {p.leader if p.leader >= 0 else 'none'}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}")
    if p.offline_replicas:
        line += f"\tOffline: {','.join(map(str, p.offline_replicas))}"
    if p.error:
        line += f"\tError: {p.error}"
    return line


@app.command("describe")
def describe_cmd(
    topic: Annotated[Optional[list[str]], typer.Argument(help="Topic names (default: every topic).",
                                                         show_default=False)] = None,
    bootstrap: BootstrapOpt = None,
    exclude_internal: Annotated[bool, typer.Option("--exclude-internal", help="Leave out internal topics.")] = False,
    under_replicated: Annotated[bool, typer.Option("--under-replicated-partitions", help="Only partitions whose ISR "
                                                   "is smaller than their replica set.")] = False,
    unavailable: Annotated[bool, typer.Option("--unavailable-partitions", help="Only partitions without a leader or "
                                              "whose leader is not a live broker.")] = False,
    under_min_isr: Annotated[bool, typer.Option("--under-min-isr-partitions", help="Only partitions whose ISR is "
                                                "smaller than the topic's min.insync.replicas.")] = False,
    at_min_isr: Annotated[bool, typer.Option("--at-min-isr-partitions", help="Only partitions whose ISR equals the "
                                             "topic's min.insync.replicas.")] = False,
    remote_sizes: Annotated[bool, typer.Option("--remote-sizes", help="Also whether each topic is tiered "
                                               "(RemoteStorage) and its remote size per topic and partition, read "
                                               "from __remote_log_metadata.")] = False,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Partitions (leader, replicas, ISR, offline replicas) and configs of topics, in kafka-topics --describe's
    lines. The partition filters print only the matching partition lines. An unknown topic exits 1."""
    from kcli.client.topics import describe_topics

    filtered = under_replicated or unavailable or under_min_isr or at_min_isr
    sizes: Any = None
    with _client(bootstrap, timeout) as client:
        view = describe_topics(client, topic or None, configs=True, exclude_internal=exclude_internal)
        if remote_sizes:
            from kcli.client.remote_log import read_remote_sizes

            sizes = read_remote_sizes(client, [n for n, t in view.topics.items() if not t.error])
    live = set(view.brokers)

    def tiered(t: Any) -> bool:
        return next((c.value for c in t.configs or () if c.name == "remote.storage.enable"), "false") == "true"

    def remote_size(name: str, partition: int | None = None) -> int:
        if partition is None:
            return sizes.topic_size(name)
        found = sizes.get(name, partition)
        return found.size if found is not None else 0

    def min_isr(t: Any) -> int:
        value = next((c.value for c in t.configs or () if c.name == "min.insync.replicas"), None)
        return int(value) if value and value.isdigit() else 1

    def keep(t: Any, p: Any) -> bool:
        return ((under_replicated and p.under_replicated) or (unavailable and p.unavailable(live))
                or (under_min_isr and len(p.isr) < min_isr(t)) or (at_min_isr and len(p.isr) == min_isr(t)))

    names = list(dict.fromkeys(topic)) if topic else sorted(view.topics)
    failed = [n for n in names if n not in view.topics or view.topics[n].error]
    if as_json:
        docs = []
        for name in names:
            t = view.topics.get(name)
            if t is None:
                docs.append({"topic": name, "error": "not in the MetadataResponse"})
                continue
            doc = t.to_json()
            if filtered:
                doc["partitions"] = [p.to_json() for p in t.partitions if keep(t, p)]
            if sizes is not None:
                doc["remote_storage"] = tiered(t)
                doc["remote_size"] = remote_size(name)
                for p in doc["partitions"]:
                    found = sizes.get(name, p["partition"])
                    p["remote_size"] = found.size if found is not None else 0
                    p["remote_segments"] = found.segments if found is not None else 0
            docs.append(doc)
        write_json_line({"cluster_id": view.cluster_id, "controller_id": view.controller_id,
                         "brokers": sorted(view.brokers), "topics": docs})
    else:
        for name in names:
            t = view.topics.get(name)
            if t is None or t.error:
                continue
            if not filtered:
                configs = ",".join(f"{k}={v}" for k, v in sorted(t.overrides().items()))
                remote = ""
                if sizes is not None:
                    remote = f"\tRemoteStorage: {str(tiered(t)).lower()}\tRemoteSize: {remote_size(name)}"
                typer.echo(f"Topic: {t.name}\tTopicId: {t.topic_id or '-'}\tPartitionCount: {len(t.partitions)}\t"
                           f"ReplicationFactor: {t.replication_factor}\tConfigs: {configs}{remote}")
                if t.config_error:
                    err_console.print(f"kctl: {t.name}: configs: {t.config_error}", markup=False)
            for p in t.partitions:
                if not filtered or keep(t, p):
                    extra = "" if sizes is None else f"\tRemoteSize: {remote_size(name, p.partition)}"
                    typer.echo(_partition_line(t.name, p) + extra)
    for name in failed:
        t = view.topics.get(name)
        err_console.print(f"kctl: {name}: {t.error if t is not None else 'not in the MetadataResponse'}", markup=False)
    if failed:
        raise typer.Exit(int(ExitCode.PROBLEMS))


def _config_pairs(values: list[str] | None, option: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for text in values or ():
        key, eq, value = text.partition("=")
        if not eq or not key.strip():
            raise fail(f"{option} {text!r}: expected key=value", ExitCode.USAGE)
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):  # kafka-configs' list syntax: [a,b]
            value = value[1:-1]
        out[key.strip()] = value
    return out


def _finish_results(results: list[Any], verb: str, as_json: bool) -> None:
    if as_json:
        write_json_line({"results": [r.to_json() for r in results]})
    else:
        messages = {"created": "Created topic {}.", "validated": "Topic {} is valid (validate only: nothing done).",
                    "exists": "Topic {} already exists (--if-not-exists).", "deleted": "Deleted topic {}.",
                    "absent": "Topic {} does not exist (--if-exists).",
                    "altered": "Updated the configs of topic {}."}
        for r in results:
            if r.ok:
                typer.echo(messages.get(r.action, "{}: " + r.action).format(r.topic))
    for r in results:
        if not r.ok:
            err_console.print(f"kctl: {verb} {r.topic}: {r.error}", markup=False)
    if any(not r.ok for r in results):
        raise typer.Exit(int(ExitCode.PROBLEMS))


@app.command("create")
def create_cmd(
    topic: TopicsArg,
    bootstrap: BootstrapOpt = None,
    partitions: Annotated[Optional[int], typer.Option("--partitions", min=1, show_default=False,
                                                      help="Partitions (default: the broker's num.partitions).")] = None,
    replication_factor: Annotated[Optional[int], typer.Option(
        "--replication-factor", min=1, show_default=False,
        help="Replicas per partition (default: the broker's default.replication.factor).")] = None,
    config: Annotated[Optional[list[str]], typer.Option("--config", show_default=False,
                                                        help="A topic config key=value (repeat for several).")] = None,
    replica_assignment: Annotated[Optional[str], typer.Option(
        "--replica-assignment", show_default=False, help="Replicas per partition, kafka-topics' syntax: partitions "
        "separated by commas, broker ids by colons (1:2,2:3,3:1).")] = None,
    if_not_exists: Annotated[bool, typer.Option("--if-not-exists", help="A topic that exists already is not an "
                                                "error.")] = False,
    validate_only: ValidateOnlyOpt = False,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Create topics (CreateTopics to the controller). Exit 1 when any was refused."""
    from kcli.client.topics import NewTopic, create_topics, parse_replica_assignment

    configs = _config_pairs(config, "--config")
    assignment = None
    if replica_assignment is not None:
        if partitions is not None or replication_factor is not None:
            raise fail("--replica-assignment fixes the partitions and replicas: leave out --partitions and "
                       "--replication-factor", ExitCode.USAGE)
        try:
            assignment = parse_replica_assignment(replica_assignment)
        except KcliError as exc:
            raise fail(exc.describe(), ExitCode.USAGE) from None
    specs = [NewTopic(t, partitions or -1, replication_factor or -1, assignment, configs) for t in topic]
    with _client(bootstrap, timeout) as client:
        results = create_topics(client, specs, validate_only=validate_only, if_not_exists=if_not_exists)
    _finish_results(results, "create", as_json)


@app.command("delete")
def delete_cmd(
    topic: TopicsArg,
    bootstrap: BootstrapOpt = None,
    if_exists: Annotated[bool, typer.Option("--if-exists", help="A topic that does not exist is not an "
                                            "error.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Delete internal topics too (__consumer_offsets, "
                                        "__transaction_state): refused without it.")] = False,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Delete topics (DeleteTopics to the controller). Internal topics are refused unless --force. Exit 1 when
    any was refused or not found."""
    from kcli.client.topics import delete_topics

    with _client(bootstrap, timeout) as client:
        results = delete_topics(client, topic, if_exists=if_exists, force=force)
    _finish_results(results, "delete", as_json)


@app.command("alter-config")
def alter_config_cmd(
    topic: TopicsArg,
    bootstrap: BootstrapOpt = None,
    add_config: Annotated[Optional[list[str]], typer.Option(
        "--add-config", show_default=False, help="Set a topic config key=value (repeat for several; [a,b] for a "
        "list value).")] = None,
    delete_config: Annotated[Optional[list[str]], typer.Option(
        "--delete-config", show_default=False, help="Remove a topic-level override, back to the broker default "
        "(repeat for several).")] = None,
    use_alter_configs: Annotated[bool, typer.Option(
        "--use-alter-configs", help="Use AlterConfigs (read the overrides, write them all back) even when the "
        "broker serves IncrementalAlterConfigs.")] = False,
    validate_only: ValidateOnlyOpt = False,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Set and delete topic-level config overrides (IncrementalAlterConfigs; AlterConfigs with a broker before
    Kafka 2.3). Exit 1 when any topic refused them."""
    from kcli.client.topics import alter_topic_configs

    set_configs = _config_pairs(add_config, "--add-config")
    if not set_configs and not delete_config:
        raise fail("nothing to change: give --add-config key=value or --delete-config key", ExitCode.USAGE)
    both = set(set_configs) & set(delete_config or ())
    if both:
        raise fail(f"{', '.join(sorted(both))}: both added and deleted", ExitCode.USAGE)
    with _client(bootstrap, timeout) as client:
        results = alter_topic_configs(client, topic, set_configs=set_configs, delete_configs=delete_config or (),
                                      validate_only=validate_only, incremental=False if use_alter_configs else None)
    _finish_results(results, "alter-config", as_json)


def _add_partitions(topic: list[str], bootstrap: str | None, partitions: int, replica_assignment: str | None,
                    validate_only: bool, as_json: bool, timeout: float, verb: str) -> None:
    from kcli.client.topics import (cluster_view, create_partitions, parse_replica_assignment,
                                    plan_partition_growth)

    assignment = None
    if replica_assignment is not None:
        try:
            assignment = parse_replica_assignment(replica_assignment)
        except KcliError as exc:
            raise fail(exc.describe(), ExitCode.USAGE) from None
    with _client(bootstrap, timeout) as client:
        view = cluster_view(client, list(dict.fromkeys(topic)))
        try:
            growths = plan_partition_growth(view, topic, partitions, assignment)
        except UsageError as exc:
            raise fail(f"{verb}: {exc.describe()}", ExitCode.USAGE) from None
        except KcliError as exc:  # an unknown topic: not found (1)
            raise fail(f"{verb}: {exc.describe()}", ExitCode.PROBLEMS) from None
        results = create_partitions(client, growths, validate_only=validate_only,
                                    timeout_ms=request_timeout_ms(timeout))
    if as_json:
        write_json_line({"results": [r.to_json() for r in results]})
    else:
        for r in results:
            if r.ok:
                before, after = r.detail.get("previous_partitions"), r.detail.get("partitions")
                typer.echo(f"Topic {r.topic} can grow from {before} to {after} partitions (validate only: nothing "
                           "done)." if r.action == "validated" else
                           f"Increased the partitions of topic {r.topic} from {before} to {after}.")
    for r in results:
        if not r.ok:
            err_console.print(f"kctl: {verb} {r.topic}: {r.error}", markup=False)
    if any(not r.ok for r in results):
        raise typer.Exit(int(ExitCode.PROBLEMS))


PartitionsOpt = Annotated[int, typer.Option("--partitions", min=1, show_default=False,
                                            help="The topic's new partition count (only an increase).")]
GrowAssignmentOpt = Annotated[Optional[str], typer.Option(
    "--replica-assignment", show_default=False, help="Replicas of the partitions, kafka-topics' syntax (1:2,2:3): "
    "every partition (the existing ones first, as kafka-topics --alter takes it) or only the new ones.")]


@app.command("add-partitions")
def add_partitions_cmd(
    topic: TopicsArg,
    partitions: PartitionsOpt,
    bootstrap: BootstrapOpt = None,
    replica_assignment: GrowAssignmentOpt = None,
    validate_only: ValidateOnlyOpt = False,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """Increase topics' partition counts (CreatePartitions to the controller; kafka-topics --alter --partitions).
    A count below the current one is a usage error: Kafka never removes partitions. Records with keys map to
    other partitions afterwards. Exit 1 when a topic is unknown or the broker refused."""
    _add_partitions(topic, bootstrap, partitions, replica_assignment, validate_only, as_json, timeout,
                    "add-partitions")


@app.command("alter")
def alter_cmd(
    topic: TopicsArg,
    partitions: PartitionsOpt,
    bootstrap: BootstrapOpt = None,
    replica_assignment: GrowAssignmentOpt = None,
    validate_only: ValidateOnlyOpt = False,
    as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0,
) -> None:
    """kafka-topics --alter --partitions N, spelt as a subcommand: the same as add-partitions (topic configs are
    changed with alter-config)."""
    _add_partitions(topic, bootstrap, partitions, replica_assignment, validate_only, as_json, timeout, "alter")
