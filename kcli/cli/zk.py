"""`kctl zk`: read-only, Kafka-aware views of the registries a ZooKeeper-mode Kafka cluster keeps in ZooKeeper."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from kcli.cli.common import (ConnectionGroup, GroupTimeoutOpt, JsonOpt, ZookeeperAuthOpt, ZookeeperOpt, ExitCode,
                             client_security, err_console, escape, fail, write_json_line)
from kcli.cli.errors import exit_code_for
from kcli.errors import KcliError

app = typer.Typer(cls=ConnectionGroup, no_args_is_help=True,
                  help="Read-only views of Kafka's registries in ZooKeeper (brokers, topics, controller, consumers, "
                  "configs, admin requests) and generic ls/get/tree. -z/--timeout/--auth go before or after the "
                  "subcommand.")

TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for ZooKeeper.")]
AuthOpt = ZookeeperAuthOpt


@app.callback()
def zk_group(zookeeper: ZookeeperOpt = None, timeout: GroupTimeoutOpt = None, auth: AuthOpt = None) -> None:
    """Read-only views of Kafka's registries in ZooKeeper. -z/--timeout/--auth go before or after the subcommand
    (kctl zk -z Z brokers). Exit status: 0 ok, 1 a malformed znode or (consumers --check) owners that disagree,
    2 usage error, 3 ZooKeeper unreachable, a chroot or znode missing, or an ACL refusal."""
    # Declared for --help; ConnectionGroup hands -z/--timeout/--auth given here to the subcommand.


@contextmanager
def _registry(zookeeper: str | None, timeout: float, auth: str | None) -> Iterator[Any]:
    from kcli.zk.registry import ZkRegistry

    if not zookeeper:
        raise fail("no ZooKeeper given: use --zookeeper host:port[/chroot] or set KCTL_ZOOKEEPER", ExitCode.USAGE)
    try:
        registry = ZkRegistry(zookeeper, timeout=timeout, auth=auth)
    except KcliError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    try:
        yield registry
    except KcliError as exc:  # a bare KcliError here is ZooKeeper refusing a request: 3
        raise fail(exc.describe(), exit_code_for(exc, generic=ExitCode.UNREADABLE) or ExitCode.UNREADABLE) from None
    finally:
        registry.close()


if TYPE_CHECKING:  # rich's console, tables and trees are imported when a command prints
    from rich.console import Console
    from rich.table import Table
    from rich.tree import Tree


def _console() -> Console:
    from rich.console import Console

    # Piped output (no terminal, no $COLUMNS) gets room enough that table cells do not fold mid-value.
    wide = not sys.stdout.isatty() and not os.environ.get("COLUMNS")
    return Console(highlight=False, soft_wrap=True, width=200 if wide else None)


def _table(*columns: str, title: str | None = None) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, box=None,
                  header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=len(column) > 8 and " " in column)
    return table


def _show(table: Table) -> None:
    _console().print(table)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) if value else "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) if value else "-"
    return escape(str(value))


def _time(ms: int | None) -> str:
    if ms is None:
        return "-"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    except (OverflowError, OSError, ValueError):
        return str(ms)


def _plain(value: Any) -> Any:
    """Dataclasses to JSON-ready values: tuples become lists, dict keys strings."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _run(zookeeper: str | None, timeout: float, auth: str | None, as_json: bool, read: Callable[[Any], Any],
         to_json: Callable[[Any], dict], human: Callable[[Any], None]) -> None:
    with _registry(zookeeper, timeout, auth) as registry:
        result = read(registry)
    if as_json:
        write_json_line(to_json(result))
    else:
        human(result)


# -- brokers -----------------------------------------------------------------------------------------------
@app.command("brokers")
def brokers_cmd(zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0,
                auth: AuthOpt = None) -> None:
    """Registered brokers (/brokers/ids): id, host, port, endpoints, rack, JMX port, registration time."""

    def human(brokers: list) -> None:
        table = _table("ID", "HOST", "PORT", "ENDPOINTS", "RACK", "JMX PORT", "REGISTERED", "VERSION")
        for b in brokers:
            table.add_row(str(b.id), _cell(b.host), str(b.port), escape("\n".join(b.endpoints)) or "-", _cell(b.rack),
                          str(b.jmx_port),
                          _time(b.timestamp), str(b.version))
        _show(table)

    _run(zookeeper, timeout, auth, as_json, lambda r: r.brokers(), lambda bs: {"brokers": _plain(bs)}, human)


# -- topics ------------------------------------------------------------------------------------------------
def _topic_json(topic: Any, *, with_partitions: bool = True) -> dict:
    result = {"name": topic.name, "topic_id": topic.topic_id, "version": topic.version,
              "partition_count": len(topic.partitions), "replication_factor": topic.replication_factor,
              "under_replicated_partitions": topic.under_replicated, "marked_for_deletion": topic.marked_for_deletion}
    if with_partitions:
        result["partitions"] = [{k: v for k, v in _plain(p).items() if k != "topic"} for p in topic.partitions]
    return result


@app.command("topics")
def topics_cmd(zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0,
               auth: AuthOpt = None) -> None:
    """Topics (/brokers/topics): id, partitions, replication factor, under-replicated partitions."""

    def human(topics: list) -> None:
        table = _table("TOPIC", "TOPIC ID", "PARTITIONS", "RF", "UNDER-REPLICATED", "DELETING")
        for t in topics:
            table.add_row(escape(t.name), _cell(t.topic_id), str(len(t.partitions)), str(t.replication_factor),
                          str(t.under_replicated), "yes" if t.marked_for_deletion else "")
        _show(table)

    _run(zookeeper, timeout, auth, as_json, lambda r: r.topics(),
         lambda ts: {"topics": [_topic_json(t) for t in ts]}, human)


@app.command("topic")
def topic_cmd(name: Annotated[str, typer.Argument(help="The topic.", show_default=False)],
              zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0,
              auth: AuthOpt = None) -> None:
    """One topic: per partition its replicas, leader, ISR, leader and controller epochs, under-replication."""

    def human(topic: Any) -> None:
        title = (f"Topic {escape(topic.name)}  id {topic.topic_id or '-'}  partitions {len(topic.partitions)}  "
                 f"replication factor {topic.replication_factor}" + ("  (marked for deletion)"
                                                                      if topic.marked_for_deletion else ""))
        table = _table("PARTITION", "LEADER", "REPLICAS", "ISR", "LEADER EPOCH", "CTRL EPOCH",
                       "UNDER-REPLICATED", "ADDING", "REMOVING", title=title)
        for p in topic.partitions:
            table.add_row(str(p.partition), _cell(p.leader), _cell(p.replicas), _cell(p.isr), _cell(p.leader_epoch),
                          _cell(p.controller_epoch), "yes" if p.under_replicated else "no", _cell(p.adding_replicas),
                          _cell(p.removing_replicas))
        _show(table)

    _run(zookeeper, timeout, auth, as_json, lambda r: r.topic(name), _topic_json, human)


# -- controller, cluster id ---------------------------------------------------------------------------------
@app.command("controller")
def controller_cmd(zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0,
                   auth: AuthOpt = None) -> None:
    """The active controller (/controller) and the controller epoch (/controller_epoch)."""

    def read(registry: Any) -> dict:
        controller = registry.controller()
        return {"broker_id": controller.broker_id if controller else None,
                "controller_epoch": registry.controller_epoch(),
                "timestamp": controller.timestamp if controller else None,
                "version": controller.version if controller else None,
                "kraft_controller_epoch": controller.kraft_controller_epoch if controller else None}

    def human(info: dict) -> None:
        table = _table("FIELD", "VALUE")
        table.add_row("controller", _cell(info["broker_id"]) if info["broker_id"] is not None else "none")
        table.add_row("controller epoch", _cell(info["controller_epoch"]))
        table.add_row("elected", _time(info["timestamp"]))
        table.add_row("kraft controller epoch", _cell(info["kraft_controller_epoch"]))
        table.add_row("version", _cell(info["version"]))
        _show(table)

    _run(zookeeper, timeout, auth, as_json, read, lambda info: info, human)


@app.command("cluster-id")
def cluster_id_cmd(zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0,
                   auth: AuthOpt = None) -> None:
    """The cluster id (/cluster/id)."""
    _run(zookeeper, timeout, auth, as_json, lambda r: r.cluster_id(),
         lambda c: {"cluster_id": c.id, "version": c.version}, lambda c: _console().print(c.id, markup=False))


# -- consumers ---------------------------------------------------------------------------------------------
class Strategy(str, Enum):
    range = "range"
    roundrobin = "roundrobin"


@app.command("consumers")
def consumers_cmd(group: Annotated[Optional[str], typer.Argument(help="Show this group in detail.",
                                                                 show_default=False)] = None,
                  zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0,
                  auth: AuthOpt = None,
                  bootstrap: Annotated[Optional[str], typer.Option(
                      "--bootstrap-server", "-b", show_default=False,  # not $KCTL_BOOTSTRAP_SERVER: never implied
                      help="With GROUP: host:port of a Kafka-protocol broker; adds each partition's log end offset "
                           "(ListOffsets) and lag. Only when given: $KCTL_BOOTSTRAP_SERVER is not read.")] = None,
                  check: Annotated[bool, typer.Option(
                      "--check", help="With GROUP: run the old consumer's range assignment over the registered "
                                      "members and report owner znodes that disagree (exit 1 if any); a pykafka "
                                      "group is checked against pykafka's range assignment.")] = False,
                  strategy: Annotated[Strategy, typer.Option(
                      "--strategy", case_sensitive=False,
                      help="With --check: the group's partition.assignment.strategy (Kafka's layout).")
                  ] = Strategy.range,
                  ) -> None:
    """Old (ZooKeeper-based) consumer groups (/consumers); with GROUP its members, owners and stored offsets."""
    if group is None:
        if check or bootstrap:
            raise fail("--check and --bootstrap-server need a GROUP", ExitCode.USAGE)

        def human_list(groups: list) -> None:
            table = _table("GROUP", "MEMBERS", "TOPICS")
            for g in groups:
                table.add_row(escape(g.group), str(g.members), _cell(g.topics))
            _show(table)

        _run(zookeeper, timeout, auth, as_json, lambda r: r.consumer_groups(),
             lambda gs: {"groups": _plain(gs)}, human_list)
        return

    def read(registry: Any) -> dict:
        from kcli.zk.rebalance import read_and_check

        result: dict[str, Any] = {"view": registry.consumer_group(group), "lag": None, "check": None}
        if check:
            result["check"] = read_and_check(registry, group, strategy.value)
        if bootstrap:
            from kcli.client import KafkaClient
            from kcli.zk.offsets import consumer_lag

            try:
                with KafkaClient(bootstrap, timeout=timeout, security=client_security()) as client:
                    result["lag"] = consumer_lag(result["view"].offsets, client)
            except KcliError as exc:
                raise fail(exc.describe(), exit_code_for(exc) or ExitCode.PROBLEMS) from None
        return result

    def to_json(result: dict) -> dict:
        view, lag = result["view"], result["lag"]
        partitions = []
        for topic in sorted(set(view.owners) | set(view.offsets)):
            owners, offsets = view.owners.get(topic, {}), view.offsets.get(topic, {})
            for partition in sorted(set(owners) | set(offsets)):
                row = {"topic": topic, "partition": partition, "offset": offsets.get(partition),
                       "owner": owners.get(partition)}
                if lag is not None:
                    end, behind = lag.get((topic, partition), (None, None))
                    row.update(log_end_offset=end, lag=behind)
                partitions.append(row)
        out = {"group": view.group, "layout": view.layout, "members": _plain(view.members),
               "pykafka_members": [{"consumer_id": m, "topic": t} for m, t in sorted(view.pykafka_members.items())],
               "malformed_members": [{"consumer_id": m, "reason": r} for m, r in sorted(view.malformed.items())],
               "partitions": partitions}
        if lag is not None:
            out["total_lag"] = sum(r["lag"] for r in partitions if r.get("lag") is not None)
        if result["check"] is not None:
            out["check"] = result["check"].to_json()
        return out

    def human(result: dict) -> None:
        view = result["view"]
        console = _console()
        members = _table("CONSUMER ID", "SUBSCRIPTION", "PATTERN", "REGISTERED", title=f"Group {escape(view.group)}")
        for m in view.members:
            members.add_row(escape(m.consumer_id), _cell(m.subscription), escape(m.pattern), _time(m.timestamp))
        for member, topic in sorted(view.pykafka_members.items()):
            members.add_row(escape(member), escape(topic), "pykafka", "-")
        console.print(members)
        if view.layout is not None:
            console.print(f"layout: {view.layout}" + {"kafka": " (Kafka's ZookeeperConsumerConnector)",
                                                      "pykafka": " (pykafka's BalancedConsumer)",
                                                      "mixed": " (both Kafka's and pykafka's nodes: the "
                                                               "members disagree)"}.get(view.layout, ""))
        console.print()
        columns = ["TOPIC", "PARTITION", "OFFSET", "OWNER"] + (["LOG END", "LAG"] if result["lag"] is not None else [])
        table = _table(*columns)
        info = to_json(result)
        for row in info["partitions"]:
            cells = [escape(row["topic"]), str(row["partition"]), _cell(row["offset"]), _cell(row["owner"])]
            if result["lag"] is not None:
                cells += [_cell(row["log_end_offset"]), _cell(row["lag"])]
            table.add_row(*cells)
        console.print(table)
        if result["lag"] is not None:
            console.print(f"total lag: {info['total_lag']}")
        check_result = result["check"]
        if check_result is not None:
            console.print()
            what = ("pykafka's range assignment over" if check_result.layout == "pykafka"
                    else f"the {strategy.value} assignment over")
            if check_result.ok:
                console.print(f"owners agree with {what} {len(check_result.threads)} consumer "
                              + ("members" if check_result.layout == "pykafka" else "threads"))
            elif check_result.layout == "mixed":
                console.print("the group holds both Kafka's and pykafka's registry nodes: its members cannot agree")
            else:
                problems = _table("TOPIC", "PARTITION", "STATUS", "OWNER", "EXPECTED OWNER", "REASON",
                                  title="Owner registry disagreements")
                for p in check_result.disagreements:
                    problems.add_row(escape(p.topic), str(p.partition), p.status, _cell(list(p.owners)),
                                     _cell(p.expected_owner), _cell(p.reason))
                console.print(problems)

    outcome: list[dict] = []
    _run(zookeeper, timeout, auth, as_json, lambda r: outcome.append(read(r)) or outcome[-1], to_json, human)
    for member, reason in sorted(outcome[-1]["view"].malformed.items()):
        err_console.print(f"kctl: group {group}: member {member}'s ids node is malformed, skipped: {reason}",
                          markup=False)
    if check and not outcome[-1]["check"].ok:
        raise typer.Exit(int(ExitCode.PROBLEMS))  # owner znodes disagree with the range assignment


# -- config, admin -----------------------------------------------------------------------------------------
@app.command("config")
def config_cmd(zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0,
               auth: AuthOpt = None) -> None:
    """Dynamic config overrides (/config/topics, brokers, clients, users, ips)."""

    def human(entities: list) -> None:
        table = _table("TYPE", "NAME", "KEY", "VALUE")
        for e in entities:
            if not e.config:
                table.add_row(e.entity_type, escape(e.name), "-", "-")
            for key, value in e.config.items():
                table.add_row(e.entity_type, escape(e.name), escape(key), escape(value))
        _show(table)

    _run(zookeeper, timeout, auth, as_json, lambda r: r.configs(),
         lambda es: {"configs": [{"entity_type": e.entity_type, "name": e.name, "config": e.config} for e in es]},
         human)


@app.command("acls")
def acls_cmd(zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0,
             auth: AuthOpt = None) -> None:
    """ACLs as Kafka's AclAuthorizer stores them (/kafka-acl, /kafka-acl-extended/prefixed), read-only; kctl acls
    changes them."""

    def to_json(nodes: list) -> dict:
        return {"acls": [{"resource_type": n.pattern.resource_type.name, "name": n.pattern.name,
                          "pattern_type": n.pattern.pattern_type.name, "zk_version": n.version,
                          "entries": [{"principal": e.principal, "host": e.host, "operation": e.operation.name,
                                       "permission_type": e.permission_type.name} for e in n.entries]}
                         for n in nodes]}

    def human(nodes: list) -> None:
        table = _table("TYPE", "PATTERN", "NAME", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION")
        for n in nodes:
            for e in n.entries:
                table.add_row(n.pattern.resource_type.pascal, n.pattern.pattern_type.name, escape(n.pattern.name),
                              escape(e.principal), escape(e.host), e.operation.pascal, e.permission_type.pascal)
        if not table.row_count:
            _console().print("no ACLs")
            return
        _show(table)

    _run(zookeeper, timeout, auth, as_json, lambda r: r.acls(), to_json, human)


@app.command("admin")
def admin_cmd(zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0,
              auth: AuthOpt = None) -> None:
    """Pending admin requests: topic deletions, partition reassignments, preferred replica election."""

    def to_json(view: Any) -> dict:
        return {"delete_topics": list(view.delete_topics),
                "reassignments": [{"topic": r.topic, "partition": r.partition, "replicas": list(r.replicas or ())}
                                  for r in view.reassignments],
                "ongoing_reassignments": [{"topic": p.topic, "partition": p.partition, "replicas": list(p.replicas),
                                           "adding_replicas": list(p.adding_replicas),
                                           "removing_replicas": list(p.removing_replicas)}
                                          for p in view.ongoing_reassignments],
                "preferred_replica_election": [{"topic": r.topic, "partition": r.partition}
                                               for r in view.preferred_replica_election]}

    def human(view: Any) -> None:
        info = to_json(view)
        table = _table("REQUEST", "TOPIC", "PARTITION", "REPLICAS")
        for name in info["delete_topics"]:
            table.add_row("delete topic", escape(name), "-", "-")
        for r in info["reassignments"]:
            table.add_row("reassign", escape(r["topic"]), str(r["partition"]), _cell(r["replicas"]))
        for r in info["ongoing_reassignments"]:
            changes = [f"{what} {_cell(r[key])}" for what, key in (("adding", "adding_replicas"),
                                                                  ("removing", "removing_replicas")) if r[key]]
            table.add_row("reassigning", escape(r["topic"]), str(r["partition"]),
                          f"{_cell(r['replicas'])} ({', '.join(changes)})")
        for r in info["preferred_replica_election"]:
            table.add_row("preferred leader", escape(r["topic"]), str(r["partition"]), "-")
        if not table.row_count:
            _console().print("no pending admin requests")
            return
        _show(table)

    _run(zookeeper, timeout, auth, as_json, lambda r: r.admin(), to_json, human)


# -- generic ------------------------------------------------------------------------------------------------
PathArg = Annotated[str, typer.Argument(help="A znode path (under the chroot).", show_default=False)]


@app.command("ls")
def ls_cmd(path: PathArg = "/", zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False,
           timeout: TimeoutOpt = 10.0, auth: AuthOpt = None) -> None:
    """The children of a znode."""

    def human(children: list) -> None:
        for name in children:
            typer.echo(name)

    _run(zookeeper, timeout, auth, as_json, lambda r: r.ls(path), lambda cs: {"path": path, "children": cs}, human)


@app.command("get")
def get_cmd(path: PathArg, zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0,
            auth: AuthOpt = None) -> None:
    """A znode's data (decoded JSON, UTF-8 text, or raw bytes as hex) and its stat."""

    def to_json(node: Any) -> dict:
        result = {"path": node.path, "encoding": node.data.kind, "data": node.data.value}
        if node.data.hex is not None:
            result["encoding"] = "base64"
            result["hex"] = node.data.hex
        result.update(version=node.version, ephemeral_owner=node.ephemeral_owner, ctime=node.ctime,
                      mtime=node.mtime, data_length=node.data_length, num_children=node.num_children)
        return result

    def human(node: Any) -> None:
        import json

        console = _console()
        if node.data.kind == "json":
            console.print(json.dumps(node.data.value, indent=2, ensure_ascii=False), markup=False)
        elif node.data.kind == "text":
            console.print(node.data.value, markup=False)
        elif node.data.kind == "bytes":
            raw = bytes.fromhex(node.data.hex)
            for offset in range(0, len(raw), 16):
                chunk = raw[offset:offset + 16]
                printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
                console.print(f"{offset:08x}  {chunk.hex(' '):<47}  {printable}", markup=False)
        else:
            console.print("(no data)", markup=False)
        ephemeral = f"ephemeral (session 0x{node.ephemeral_owner:x})" if node.ephemeral_owner else "persistent"
        console.print(f"-- version {node.version}, {node.data_length} bytes, {node.num_children} children, "
                      f"{ephemeral}, modified {_time(node.mtime)}", markup=False)

    _run(zookeeper, timeout, auth, as_json, lambda r: r.get(path), to_json, human)


@app.command("tree")
def tree_cmd(path: PathArg = "/",
             depth: Annotated[Optional[int], typer.Option("--depth", min=0, show_default=False,
                                                          help="Levels below PATH to show (default: all).")] = None,
             zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0,
             auth: AuthOpt = None) -> None:
    """The znodes under a path, as a tree."""

    def to_json(node: Any) -> dict:
        return {"path": node.path, "num_children": node.num_children, "children": [to_json(c) for c in node.children]}

    def human(node: Any) -> None:
        from rich.tree import Tree

        def add(branch: Tree, n: Any) -> None:
            for c in n.children:
                label = escape(c.path.rsplit("/", 1)[-1])
                if c.num_children and not c.children:
                    label += f" ({c.num_children} children)"
                add(branch.add(label), c)

        root = Tree(escape(node.path))
        add(root, node)
        _console().print(root)

    _run(zookeeper, timeout, auth, as_json, lambda r: r.tree(path, depth), to_json, human)
