"""`kctl configs`: kafka-configs' --describe and --alter for topics and brokers (DescribeConfigs with synonyms,
IncrementalAlterConfigs), through any broker; and for users, clients and ips (quotas and SCRAM credentials), through
a broker or straight in ZooKeeper, with kcli.cli.config_entities.

Thin: kcli.client.configs does the requests; this checks the options and prints Kafka's lines.
"""

from __future__ import annotations

import os
from typing import Annotated, Optional

import typer

from kcli.cli.common import (
    BootstrapOpt,
    ExitCode,
    JsonOpt,
    ZookeeperAuthOpt,
    ZookeeperOpt,
    err_console,
    fail,
    kafka_client,
    write_json_line,
)
from kcli.errors import UsageError

ELSEWHERE = {
    "broker-loggers": "broker loggers (KIP-412) are not served by kctl broker; a Kafka broker's are kafka-configs' "
                      "--entity-type broker-loggers",
}


def configs_cmd(
    describe: Annotated[bool, typer.Option("--describe", help="Show the entities' configs.")] = False,
    alter: Annotated[bool, typer.Option("--alter", help="Change them: --add-config and/or --delete-config.")] = False,
    entity_type: Annotated[Optional[list[str]], typer.Option(
        "--entity-type", metavar="TYPE", show_default=False,
        help="topics, brokers, users, clients or ips; users and clients together for a (user, client id) "
        "pair.")] = None,
    entity_name: Annotated[Optional[list[str]], typer.Option(
        "--entity-name", metavar="NAME", show_default=False,
        help="A topic, a broker id, a user, a client id or an ip (topics, brokers: repeat for several; --describe "
        "without it: every entity of the type).")] = None,
    entity_default: Annotated[int, typer.Option(
        "--entity-default", count=True, show_default=False,
        help="The default entity (<default>) of brokers, users, clients or ips, which every one without its own "
        "value takes.")] = 0,
    topic: Annotated[Optional[str], typer.Option(
        "--topic", metavar="TOPIC", show_default=False,
        help="kafka-configs' shorthand for --entity-type topics --entity-name TOPIC.")] = None,
    broker: Annotated[Optional[str], typer.Option(
        "--broker", metavar="ID", show_default=False,
        help="kafka-configs' shorthand for --entity-type brokers --entity-name ID.")] = None,
    broker_defaults: Annotated[bool, typer.Option(
        "--broker-defaults", help="kafka-configs' shorthand for --entity-type brokers --entity-default.")] = False,
    user: Annotated[Optional[str], typer.Option(
        "--user", metavar="USER", show_default=False,
        help="kafka-configs' shorthand for --entity-type users --entity-name USER.")] = None,
    client: Annotated[Optional[str], typer.Option(
        "--client", metavar="ID", show_default=False,
        help="kafka-configs' shorthand for --entity-type clients --entity-name ID.")] = None,
    user_defaults: Annotated[bool, typer.Option("--user-defaults", help="The default user.")] = False,
    client_defaults: Annotated[bool, typer.Option("--client-defaults", help="The default client id.")] = False,
    ip: Annotated[Optional[str], typer.Option(
        "--ip", metavar="IP", show_default=False,
        help="kafka-configs' shorthand for --entity-type ips --entity-name IP.")] = None,
    ip_defaults: Annotated[bool, typer.Option("--ip-defaults", help="The default ip.")] = False,
    all_: Annotated[bool, typer.Option("--all", help="--describe: every config with its source, not only the "
                                       "entity's own dynamic ones.")] = False,
    add_config: Annotated[Optional[list[str]], typer.Option(
        "--add-config", metavar="K=V,...", show_default=False,
        help="--alter: k1=v1,k2=[v1,v2] (a list value in brackets; "
        "repeatable).")] = None,
    delete_config: Annotated[Optional[list[str]], typer.Option(
        "--delete-config", metavar="K,...", show_default=False, help="--alter: k1,k2 (repeatable).")] = None,
    validate_only: Annotated[bool, typer.Option(
        "--validate-only", help="--alter: the broker checks the change and applies nothing.")] = False,
    bootstrap: BootstrapOpt = None,
    zookeeper: ZookeeperOpt = None,
    auth: ZookeeperAuthOpt = None,
    as_json: JsonOpt = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker or "
                                           "ZooKeeper request.")] = 10.0,
) -> None:
    """Configs as kafka-configs shows and changes them: --describe or --alter of --entity-type
    topics|brokers (DescribeConfigs, with each value's source and synonyms; IncrementalAlterConfigs) or
    users|clients|ips (quotas and users' SCRAM credentials, through a broker or in ZooKeeper with -z),
    --entity-name N or --entity-default. Exit status: 0 ok, 1 an entity failed or is unknown, 2 usage error,
    3 no broker."""
    from kcli.cli import config_entities
    from kcli.client.configs import (DEFAULT_ENTITY, ENTITY_TYPES, parse_add_config, parse_delete_config,
                                     resource_name)

    if describe == alter:
        raise fail("give one of --describe, --alter", ExitCode.USAGE)
    kinds = [{"topic": "topics", "broker": "brokers", "user": "users", "client": "clients", "ip": "ips"}.get(t, t)
             for t in entity_type or ()]
    quota_args = config_entities.QuotaEntityArgs(kinds, list(entity_name or ()), entity_default, user, client,
                                                 user_defaults, client_defaults, ip, ip_defaults)
    if quota_args.shorthand or any(k in config_entities.QUOTA_KINDS for k in kinds):
        if topic is not None or broker is not None or broker_defaults:
            raise fail("--topic, --broker and --broker-defaults name another entity type", ExitCode.USAGE)
        if all_:
            raise fail("--all is for topics and brokers", ExitCode.USAGE)
        config_entities.run(quota_args, describe=describe, add_config=list(add_config or ()),
                            delete_config=list(delete_config or ()), validate_only=validate_only,
                            bootstrap=bootstrap, zookeeper=zookeeper, timeout=timeout, auth=auth, as_json=as_json)
        return
    if zookeeper and zookeeper != os.environ.get("KCTL_ZOOKEEPER"):
        raise fail("--zookeeper is for users, clients and ips: topic and broker configs go through a broker (-b)",
                   ExitCode.USAGE)
    if len(kinds) > 1:
        raise fail("Only 'users' and 'clients' entity types may be specified together", ExitCode.USAGE)
    single: str | None = kinds[0] if kinds else None
    shorthand = [(flag, kind, name) for flag, kind, name in (("--topic", "topics", topic), ("--broker", "brokers",
                                                                                           broker))
                 if name is not None]
    if broker_defaults:
        shorthand.append(("--broker-defaults", "brokers", None))
    if shorthand:
        if single is not None or entity_name or entity_default or len({k for _, k, _ in shorthand}) > 1:
            raise fail(f"{shorthand[0][0]} stands for --entity-type and --entity-name: give one or the other, and "
                       "one entity type", ExitCode.USAGE)
        single = shorthand[0][1]
        entity_name = [name for _, _, name in shorthand if name is not None]
        entity_default = int(broker_defaults)
    if single is None:
        raise fail("--entity-type is required: topics, brokers, users, clients or ips", ExitCode.USAGE)
    kind = single
    if kind in ELSEWHERE:
        raise fail(f"--entity-type {single}: {ELSEWHERE[kind]}", ExitCode.USAGE)
    if kind not in ENTITY_TYPES:
        raise fail(f"--entity-type {single}: expected topics, brokers, users, clients or ips", ExitCode.USAGE)
    names = list(dict.fromkeys(entity_name or ()))
    if entity_default:
        if kind != "brokers":
            raise fail("--entity-default is for --entity-type brokers (topics have no default entity)",
                       ExitCode.USAGE)
        names.append(DEFAULT_ENTITY)
    try:
        for name in names:
            resource_name(kind, name)
    except UsageError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    if describe:
        if add_config or delete_config or validate_only:
            raise fail("--add-config, --delete-config and --validate-only go with --alter", ExitCode.USAGE)
        _describe(kind, names or None, all_, bootstrap, timeout, as_json)
        return
    if all_:
        raise fail("--all goes with --describe", ExitCode.USAGE)
    if not names:
        raise fail("--alter needs --entity-name" + (" or --entity-default" if kind == "brokers" else ""),
                   ExitCode.USAGE)
    try:
        set_configs = parse_add_config(add_config or ())
    except UsageError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    deleted = parse_delete_config(delete_config or ())
    if not set_configs and not deleted:
        raise fail("nothing to change: give --add-config k=v or --delete-config k", ExitCode.USAGE)
    both = sorted(set(set_configs) & set(deleted))
    if both:
        raise fail(f"{', '.join(both)}: both added and deleted", ExitCode.USAGE)
    _alter(kind, names, set_configs, deleted, validate_only, bootstrap, timeout, as_json)


def _heading(entity: object, include_all: bool) -> str:
    """ConfigCommand.describeResourceConfig's line before an entity's configs."""
    if entity.is_default:  # type: ignore[attr-defined]
        return "Default configs for brokers in the cluster are:"
    kind = entity.entity_type[:-1]  # type: ignore[attr-defined]
    return f"{'All' if include_all else 'Dynamic'} configs for {kind} {entity.name} are:"  # type: ignore[attr-defined]


def _describe(kind: str, names: list[str] | None, include_all: bool, bootstrap: str | None, timeout: float,
              as_json: bool) -> None:
    from kcli.client.configs import describe, entity_names

    with kafka_client(bootstrap, timeout, "kctl-configs") as client:
        entities = describe(client, kind, names if names is not None else entity_names(client, kind),
                            include_all=include_all)
    if as_json:
        write_json_line({"entities": [e.to_json() for e in entities]})
    else:
        for e in entities:
            if e.error:
                continue
            typer.echo(_heading(e, include_all))
            for c in e.configs:
                typer.echo(f"  {c.line()}")
    failed = [e for e in entities if e.error]
    for e in failed:
        err_console.print(f"kctl: {e.entity_type[:-1]} {e.name}: {e.error}", markup=False)
    if failed:
        raise typer.Exit(int(ExitCode.PROBLEMS))


def _alter(kind: str, names: list[str], set_configs: dict[str, str], deleted: list[str], validate_only: bool,
           bootstrap: str | None, timeout: float, as_json: bool) -> None:
    from kcli.client.configs import DEFAULT_ENTITY, alter

    with kafka_client(bootstrap, timeout, "kctl-configs") as client:
        results = alter(client, kind, names, set_configs=set_configs, delete_configs=deleted,
                        validate_only=validate_only)
    if as_json:
        write_json_line({"validate_only": validate_only, "results": [r.to_json() for r in results]})
    else:
        for r in results:
            if not r.ok:
                continue
            what = ("default config for brokers in the cluster" if r.name == DEFAULT_ENTITY
                    else f"config for {kind[:-1]} {r.name}")
            typer.echo(f"Validated the update of {what} (validate only: nothing changed)." if validate_only
                       else f"Completed updating {what}.")
    failed = [r for r in results if not r.ok]
    for r in failed:
        err_console.print(f"kctl: {kind[:-1]} {r.name}: {r.error}", markup=False)
    if failed:
        raise typer.Exit(int(ExitCode.PROBLEMS))
