"""`kctl configs`: kafka-configs' --describe and --alter for topics and brokers (DescribeConfigs with synonyms,
IncrementalAlterConfigs), through any broker.

Thin: kcli.client.configs does the requests; this checks the options and prints Kafka's lines. Users' and clients'
quotas and SCRAM credentials are other commands' (kctl quotas, kctl users).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kcli.cli.common import BootstrapOpt, ExitCode, JsonOpt, err_console, fail, kafka_client, write_json_line
from kcli.errors import UsageError

ELSEWHERE = {
    "users": "users' quotas are managed with kctl quotas, their SCRAM credentials with kctl users "
             "(set-scram, delete-scram)",
    "clients": "client quotas are managed with kctl quotas",
    "ips": "IP connection-rate quotas are managed with kctl quotas",
    "broker-loggers": "broker loggers (KIP-412) are not served by kctl broker; a Kafka broker's are kafka-configs' "
                      "--entity-type broker-loggers",
}


def configs_cmd(
    describe: Annotated[bool, typer.Option("--describe", help="Show the entities' configs.")] = False,
    alter: Annotated[bool, typer.Option("--alter", help="Change them: --add-config and/or --delete-config.")] = False,
    entity_type: Annotated[Optional[str], typer.Option(
        "--entity-type", metavar="TYPE", show_default=False, help="topics or brokers.")] = None,
    entity_name: Annotated[Optional[list[str]], typer.Option(
        "--entity-name", metavar="NAME", show_default=False,
        help="A topic, or a broker id (repeat for several; --describe "
        "without it: every topic, or every broker and the default).")] = None,
    entity_default: Annotated[bool, typer.Option(
        "--entity-default", help="brokers: the cluster-wide default (<default>), which every broker without "
        "its own value takes.")] = False,
    topic: Annotated[Optional[str], typer.Option(
        "--topic", metavar="TOPIC", show_default=False,
        help="kafka-configs' shorthand for --entity-type topics --entity-name TOPIC.")] = None,
    broker: Annotated[Optional[str], typer.Option(
        "--broker", metavar="ID", show_default=False,
        help="kafka-configs' shorthand for --entity-type brokers --entity-name ID.")] = None,
    broker_defaults: Annotated[bool, typer.Option(
        "--broker-defaults", help="kafka-configs' shorthand for --entity-type brokers --entity-default.")] = False,
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
    as_json: JsonOpt = False,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker "
                                           "request.")] = 10.0,
) -> None:
    """Topic and broker configs as kafka-configs shows and changes them: --describe (DescribeConfigs, with each
    value's source and synonyms) or --alter (IncrementalAlterConfigs) of --entity-type topics|brokers,
    --entity-name N or --entity-default. Exit status: 0 ok, 1 an entity failed or is unknown, 2 usage error,
    3 no broker."""
    from kcli.client.configs import (DEFAULT_ENTITY, ENTITY_TYPES, parse_add_config, parse_delete_config,
                                     resource_name)

    if describe == alter:
        raise fail("give one of --describe, --alter", ExitCode.USAGE)
    shorthand = [(flag, kind, name) for flag, kind, name in (("--topic", "topics", topic), ("--broker", "brokers",
                                                                                           broker))
                 if name is not None]
    if broker_defaults:
        shorthand.append(("--broker-defaults", "brokers", None))
    if shorthand:
        if entity_type is not None or entity_name or entity_default or len({k for _, k, _ in shorthand}) > 1:
            raise fail(f"{shorthand[0][0]} stands for --entity-type and --entity-name: give one or the other, and "
                       "one entity type", ExitCode.USAGE)
        entity_type = shorthand[0][1]
        entity_name = [name for _, _, name in shorthand if name is not None]
        entity_default = broker_defaults
    if entity_type is None:
        raise fail("--entity-type is required: topics or brokers", ExitCode.USAGE)
    kind = {"topic": "topics", "broker": "brokers", "user": "users", "client": "clients"}.get(entity_type,
                                                                                             entity_type)
    if kind in ELSEWHERE:
        raise fail(f"--entity-type {entity_type}: {ELSEWHERE[kind]}", ExitCode.USAGE)
    if kind not in ENTITY_TYPES:
        raise fail(f"--entity-type {entity_type}: expected topics or brokers", ExitCode.USAGE)
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
