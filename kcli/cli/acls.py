"""`kctl acls`: kafka-acls. --add, --remove and --list ACLs through any broker with an authorizer
(--bootstrap-server: CreateAcls, DeleteAcls, DescribeAcls) or straight in ZooKeeper (--zookeeper, or Kafka's
--authorizer-properties zookeeper.connect=...: the nodes Kafka's AclCommand writes, announced to running brokers).

Thin: kcli.tools.acls turns the options into bindings and filters; kcli.client.acls or the authorizer applies
them; this renders.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from kcli.cli.common import (BootstrapOpt, ExitCode, JsonOpt, ZookeeperAuthOpt, ZookeeperOpt, fail, kafka_client,
                             write_json_line)

Repeat = Optional[list[str]]


def acls_cmd(
    add: Annotated[bool, typer.Option("--add", help="Add ACLs (needs a resource and --allow-principal or "
                                      "--deny-principal).")] = False,
    remove: Annotated[bool, typer.Option("--remove", help="Remove ACLs: with principals, exactly those; without, "
                                         "every ACL of the resources.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="List ACLs (of the resources given, else all).")] = False,
    topic: Annotated[Repeat, typer.Option("--topic", metavar="TOPIC", show_default=False, help="Topic ('*' for all topics; "
                                          "repeat for several).")] = None,
    group: Annotated[Repeat, typer.Option("--group", metavar="GROUP", show_default=False, help="Consumer group ('*' for all; "
                                          "repeat for several).")] = None,
    cluster: Annotated[bool, typer.Option("--cluster", help="The cluster resource (kafka-cluster).")] = False,
    transactional_id: Annotated[Repeat, typer.Option("--transactional-id", metavar="ID", show_default=False,
                                                     help="Transactional id ('*' for all; repeat).")] = None,
    pattern_type: Annotated[Optional[str], typer.Option(
        "--resource-pattern-type", metavar="TYPE", show_default=False, help="LITERAL (default) or PREFIXED; to list or remove "
        "also ANY or MATCH (every pattern that applies to the named resource).")] = None,
    allow_principal: Annotated[Repeat, typer.Option("--allow-principal", metavar="PRINCIPAL", show_default=False,
                                                    help="TYPE:NAME to allow (User:alice, User:* for all).")] = None,
    deny_principal: Annotated[Repeat, typer.Option("--deny-principal", metavar="PRINCIPAL", show_default=False,
                                                   help="TYPE:NAME to deny.")] = None,
    allow_host: Annotated[Repeat, typer.Option("--allow-host", metavar="HOST", show_default=False,
                                               help="IP address the allowed principals come from (default *).")] = None,
    deny_host: Annotated[Repeat, typer.Option("--deny-host", metavar="HOST", show_default=False,
                                              help="IP address the denied principals come from (default *).")] = None,
    operation: Annotated[Repeat, typer.Option("--operation", metavar="OPERATION", show_default=False, help="Read, Write, Create, "
                                              "Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                                              "AlterConfigs, IdempotentWrite, All (default All; repeat).")] = None,
    principal: Annotated[Repeat, typer.Option("--principal", metavar="PRINCIPAL", show_default=False,
                                              help="With --list: only this principal's ACLs.")] = None,
    producer: Annotated[bool, typer.Option("--producer", help="The ACLs a producer needs: Write, Describe and "
                                           "Create on the topics (Write and Describe on --transactional-id).")] = False,
    consumer: Annotated[bool, typer.Option("--consumer", help="The ACLs a consumer needs: Read and Describe on "
                                           "the topics, Read on the --group.")] = False,
    idempotent: Annotated[bool, typer.Option("--idempotent", help="With --producer: IdempotentWrite on the "
                                             "cluster.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Remove without asking.")] = False,
    bootstrap: BootstrapOpt = None,
    zookeeper: ZookeeperOpt = None,
    authorizer_properties: Annotated[Repeat, typer.Option(
        "--authorizer-properties", metavar="KEY=VALUE", show_default=False, help="Kafka's offline form: zookeeper.connect=host:port"
        "[/chroot] (the same as --zookeeper).")] = None,
    auth: ZookeeperAuthOpt = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker or "
                                           "ZooKeeper request.")] = 10.0,
    as_json: JsonOpt = False,
) -> None:
    """ACLs as kafka-acls manages them: --add, --remove or --list, through a broker (--bootstrap-server; the
    broker needs authorizer.class.name) or offline in ZooKeeper (--zookeeper). Exit status: 0 ok, 1 an ACL was
    refused, 2 usage error, 3 no broker or ZooKeeper."""
    from kcli.tools.acls import AclCommandOptions, bindings_to_add, filters_to_list, filters_to_remove

    if sum((add, remove, list_)) != 1:
        raise fail("give exactly one of --add, --remove, --list", ExitCode.USAGE)
    for item in authorizer_properties or []:
        key, _, value = item.partition("=")
        if key.strip() == "zookeeper.connect":
            zookeeper = value.strip()
    if bootstrap and zookeeper:
        raise fail("give either --bootstrap-server or --zookeeper, not both", ExitCode.USAGE)
    opts = AclCommandOptions(
        topics=topic or (), groups=group or (), cluster=cluster, transactional_ids=transactional_id or (),
        pattern_type=pattern_type, allow_principals=allow_principal or (), deny_principals=deny_principal or (),
        allow_hosts=allow_host or (), deny_hosts=deny_host or (), operations=operation or (),
        principals=principal or (), producer=producer, consumer=consumer, idempotent=idempotent)
    if add:
        bindings = bindings_to_add(opts)
        _run(zookeeper, bootstrap, auth, timeout, lambda backend: _add(backend, bindings, as_json))
    elif remove:
        filters = filters_to_remove(opts)
        if not force:
            _confirm(filters)
        _run(zookeeper, bootstrap, auth, timeout, lambda backend: _remove(backend, filters, as_json))
    else:
        filters = filters_to_list(opts)
        _run(zookeeper, bootstrap, auth, timeout, lambda backend: _list(backend, filters, as_json))


class _Online:
    def __init__(self, client: Any) -> None:
        from kcli.client import acls

        self.client, self.api = client, acls

    def create(self, bindings):
        return self.api.create_acls(self.client, bindings)

    def delete(self, filters):
        return self.api.delete_acls(self.client, filters)

    def describe(self, f):
        return self.api.describe_acls(self.client, f)


class _Offline:
    def __init__(self, authorizer: Any) -> None:
        self.authorizer = authorizer

    def create(self, bindings):
        return [None if e is None else str(e) for e in self.authorizer.create_acls(bindings)]

    def delete(self, filters):
        return [(None, [(b, None if e is None else str(e)) for b, e in deleted])
                for deleted in self.authorizer.delete_acls(filters)]

    def describe(self, f):
        return self.authorizer.acls(f)


def _run(zookeeper: str | None, bootstrap: str | None, auth: str | None, timeout: float, work: Any) -> None:
    if zookeeper:
        from kcli.broker.security.authorizer import zookeeper_acls

        with zookeeper_acls(zookeeper, timeout=timeout, auth=auth) as authorizer:
            code = work(_Offline(authorizer))
    else:
        with kafka_client(bootstrap, timeout, "kctl-acls") as client:
            code = work(_Online(client))
    raise typer.Exit(int(code))


def _confirm(filters: list[Any]) -> None:
    from kcli.tools.acls import pattern_text

    for f in filters:
        entry = f.entry
        what = "all ACLs" if entry.principal is None else (
            f"(principal={entry.principal}, host={entry.host}, operation={entry.operation.name}, "
            f"permissionType={entry.permission_type.name})")
        if not typer.confirm(f"Are you sure you want to remove {what} from resource filter "
                             f"`{pattern_text(f.pattern)}`?", err=True):
            raise fail("nothing removed", ExitCode.PROBLEMS)


def _print_bindings(header: str, bindings: list[Any]) -> None:
    from kcli.tools.acls import group_by_pattern, pattern_text

    for pattern, entries in group_by_pattern(bindings).items():
        typer.echo(f"{header} `{pattern_text(pattern)}`: ")
        for entry in entries:
            typer.echo(f" \t{entry} ")
        typer.echo("")


def _add(backend: Any, bindings: list[Any], as_json: bool) -> ExitCode:
    from kcli.cli.errors import err_console
    from kcli.tools.acls import binding_json

    errors = backend.create(bindings)
    created = [b for b, e in zip(bindings, errors) if e is None]
    failed = [(b, e) for b, e in zip(bindings, errors) if e is not None]
    if as_json:
        write_json_line({"created": [binding_json(b) for b in created],
                         "errors": [{**binding_json(b), "error": e} for b, e in failed]})
    else:
        _print_bindings("Adding ACLs for resource", created)
        for b, e in failed:
            err_console.print(f"kctl: cannot add {b.entry} to {b.pattern}: {e}", markup=False)
    return ExitCode.PROBLEMS if failed else ExitCode.OK


def _remove(backend: Any, filters: list[Any], as_json: bool) -> ExitCode:
    from kcli.cli.errors import err_console
    from kcli.tools.acls import binding_json

    results = backend.delete(filters)
    deleted = [b for _, matched in results for b, e in matched if e is None]
    failed = [(str(b.pattern), e) for _, matched in results for b, e in matched if e is not None]
    failed += [("filter", error) for error, _ in results if error is not None]
    if as_json:
        write_json_line({"deleted": [binding_json(b) for b in deleted],
                         "errors": [{"what": w, "error": e} for w, e in failed]})
    else:
        _print_bindings("Removed ACLs from resource", deleted)
        for what, e in failed:
            err_console.print(f"kctl: cannot remove ACLs ({what}): {e}", markup=False)
    return ExitCode.PROBLEMS if failed else ExitCode.OK


def _list(backend: Any, filters: list[Any], as_json: bool) -> ExitCode:
    from kcli.tools.acls import binding_json

    found: dict[Any, None] = {}
    for f in filters:
        for b in backend.describe(f):
            found[b] = None
    bindings = list(found)
    if as_json:
        write_json_line({"acls": [binding_json(b) for b in bindings]})
    else:
        _print_bindings("Current ACLs for resource", bindings)
    return ExitCode.OK
