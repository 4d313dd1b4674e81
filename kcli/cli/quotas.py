"""`kctl quotas`: client quotas (KIP-13, KIP-55, KIP-124) of users, client ids and (user, client id) pairs, with
kafka-configs' entity options: online through any broker (Describe/AlterClientQuotas, KIP-546) or offline straight
in ZooKeeper (``/config/users/<u>``, ``/config/users/<u>/clients/<c>``, ``/config/clients/<c>``, as
``kafka-configs --zookeeper`` writes them, with the change notification running brokers act on).

Thin: kcli.client.quotas and kcli.zk.quotas do the work; this parses the entity and the configs, and renders.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from kcli.cli.common import (
    BootstrapOpt,
    ConnectionGroup,
    ExitCode,
    GroupTimeoutOpt,
    JsonOpt,
    ZookeeperAuthOpt,
    ZookeeperOpt,
    config_entities_source,
    fail,
    write_json_line,
)
from kcli.cli.zk import _cell, _show, _table

ENTITY_TYPES = {"users": "user", "clients": "client-id"}  # kafka-configs' names -> the protocol's

app = typer.Typer(cls=ConnectionGroup, no_args_is_help=True,
                  help="Client quotas of users and client ids (kafka-configs --entity-type users|clients): "
                  "describe, alter, through a broker (-b) or straight in ZooKeeper (-z). -b/-z/--timeout/--auth go "
                  "before or after the subcommand.")

TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker or "
                                           "ZooKeeper request.")]
EntityTypeOpt = Annotated[Optional[list[str]], typer.Option(
    "--entity-type", show_default=False,
    help="users or clients; give both (users first) for a (user, client id) pair.")]
EntityNameOpt = Annotated[Optional[list[str]], typer.Option(
    "--entity-name", show_default=False, help="The entity's name, one per --entity-type, in the same order.")]
EntityDefaultOpt = Annotated[int, typer.Option(
    "--entity-default", count=True, show_default=False,
    help="The default entity (<default>) for an --entity-type without --entity-name.")]
UserOpt = Annotated[Optional[str], typer.Option("--user", show_default=False,
                                                help="Shortcut: --entity-type users --entity-name NAME.")]
ClientOpt = Annotated[Optional[str], typer.Option("--client", show_default=False,
                                                  help="Shortcut: --entity-type clients --entity-name NAME.")]
UserDefaultsOpt = Annotated[bool, typer.Option("--user-defaults", help="Shortcut: the default user.")]
ClientDefaultsOpt = Annotated[bool, typer.Option("--client-defaults", help="Shortcut: the default client id.")]


@app.callback()
def quotas_group(bootstrap: BootstrapOpt = None, zookeeper: ZookeeperOpt = None, timeout: GroupTimeoutOpt = None,
                 auth: ZookeeperAuthOpt = None) -> None:
    """Client quotas: producer_byte_rate, consumer_byte_rate (bytes/s), request_percentage (% of one request
    handler thread) and controller_mutation_rate, for users, client ids and (user, client id) pairs, each also as
    <default>. Through a broker (-b, KIP-546's Describe/AlterClientQuotas) or offline in ZooKeeper (-z, the nodes
    kafka-configs --zookeeper writes). Exit status: 0 ok, 1 an entity failed, 2 usage error, 3 no broker or
    ZooKeeper."""
    # Declared for --help; ConnectionGroup hands -b/-z/--timeout/--auth given here to the subcommand.


# -- the entity ---------------------------------------------------------------------------------------------------
def _entity(types: list[str] | None, names: list[str] | None, defaults: int, user: str | None, client: str | None,
            user_defaults: bool, client_defaults: bool, *, required: bool) -> tuple[tuple[str, Any], ...]:
    """(protocol entity type, name or None for <default>) pairs, users before clients; kafka-configs' rules."""
    parts: dict[str, Any] = {}
    types = list(types or [])
    names = list(names or [])
    for kind in types:
        if kind not in ENTITY_TYPES:
            raise fail(f"--entity-type {kind!r}: quotas are kept for users and clients", ExitCode.USAGE)
    if len(set(types)) != len(types):
        raise fail("each --entity-type may be given once", ExitCode.USAGE)
    if types:
        if len(names) + defaults != len(types):
            raise fail("give one --entity-name or --entity-default per --entity-type", ExitCode.USAGE)
        if names and defaults:
            if len(types) > 1:
                raise fail("a name and a default for two entity types is ambiguous here: use --user/--client and "
                           "--user-defaults/--client-defaults", ExitCode.USAGE)
        values = names if names else [None] * len(types)
        for kind, name in zip(types, values):
            parts[ENTITY_TYPES[kind]] = name
    elif names or defaults:
        raise fail("--entity-name and --entity-default need --entity-type", ExitCode.USAGE)
    for kind, name, default in (("user", user, user_defaults), ("client-id", client, client_defaults)):
        if name is not None and default:
            raise fail(f"give a {kind} name or its defaults, not both", ExitCode.USAGE)
        if name is not None or default:
            if kind in parts:
                raise fail(f"the {kind} is given twice", ExitCode.USAGE)
            parts[kind] = name
    for kind, name in parts.items():
        if name == "":
            raise fail(f"the {kind} name is empty (use the defaults option for <default>)", ExitCode.USAGE)
    if required and not parts:
        raise fail("name the entity: --entity-type users|clients with --entity-name N or --entity-default (or "
                   "--user/--client/--user-defaults/--client-defaults)", ExitCode.USAGE)
    return tuple((k, parts[k]) for k in ("user", "client-id") if k in parts)


def _configs(add: list[str] | None, delete: list[str] | None) -> list[tuple[str, float | None]]:
    """--add-config 'k=v,k2=v2' (repeatable) and --delete-config 'k,k2' as (key, value or None) ops."""
    ops: list[tuple[str, float | None]] = []
    for text in add or []:
        for item in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise fail(f"--add-config {item!r} is not key=value", ExitCode.USAGE)
            try:
                number = float(value)
            except ValueError:
                raise fail(f"--add-config {item!r}: {value!r} is not a number", ExitCode.USAGE) from None
            ops.append((key.strip(), number))
    for text in delete or []:
        ops.extend((key.strip(), None) for key in text.split(",") if key.strip())
    if not ops:
        raise fail("nothing to change: give --add-config k=v,... and/or --delete-config k,...", ExitCode.USAGE)
    keys = [k for k, _ in ops]
    if len(set(keys)) != len(keys):
        raise fail("a config key is named twice", ExitCode.USAGE)
    return ops


def _json_entity(entity: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {kind: name for kind, name in entity}


def _text_entity(entity: tuple[tuple[str, Any], ...]) -> str:
    return ", ".join(f"{kind}={'<default>' if name is None else name}" for kind, name in entity)


# -- where the quotas are -----------------------------------------------------------------------------------------
class _Online:
    def __init__(self, client: Any) -> None:
        self.client = client

    def describe(self, components: list[tuple[str, Any]], strict: bool) -> list[dict[str, Any]]:
        from kcli.client.quotas import describe_client_quotas

        return [e.to_json() for e in describe_client_quotas(self.client, components, strict=strict)]

    def alter(self, entity: tuple, ops: list[tuple[str, float | None]], validate_only: bool) -> dict[str, Any]:
        from kcli.client.quotas import alter_client_quotas

        (result,) = alter_client_quotas(self.client, [(entity, ops)], validate_only=validate_only)
        return {"entity": _json_entity(entity), "ok": result.ok, "error": result.error}


class _Offline:
    def __init__(self, store: Any) -> None:
        self.store = store

    def describe(self, components: list[tuple[str, Any]], strict: bool) -> list[dict[str, Any]]:
        from kcli.zk import quotas as zk_quotas

        found = zk_quotas.describe(self.store, components, strict)
        return [{"entity": _json_entity(e), "quotas": dict(sorted(v.items()))} for e, v in found.items()]

    def alter(self, entity: tuple, ops: list[tuple[str, float | None]], validate_only: bool) -> dict[str, Any]:
        from kcli.zk import quotas as zk_quotas

        try:
            zk_quotas.alter_entity(self.store, entity, ops, validate_only=validate_only)
        except zk_quotas.InvalidQuota as exc:
            return {"entity": _json_entity(entity), "ok": False, "error": exc.reason}
        return {"entity": _json_entity(entity), "ok": True, "error": None}


def _source(bootstrap: str | None, zookeeper: str | None, timeout: float, auth: str | None) -> Any:
    return config_entities_source(bootstrap, zookeeper, timeout, auth, client_id="kctl-quotas", offline=_Offline,
                                  online=_Online)


# -- commands ---------------------------------------------------------------------------------------------------
@app.command("describe")
def describe_cmd(
    entity_type: EntityTypeOpt = None, entity_name: EntityNameOpt = None, entity_default: EntityDefaultOpt = 0,
    user: UserOpt = None, client: ClientOpt = None, user_defaults: UserDefaultsOpt = False,
    client_defaults: ClientDefaultsOpt = False,
    bootstrap: BootstrapOpt = None, zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0, auth: ZookeeperAuthOpt = None,
) -> None:
    """The quotas of the entity named (exactly that entity, as kafka-configs --describe), of every entity of the
    types named with --entity-type alone, or of every entity when none is named."""
    types = list(entity_type or [])
    components: list[tuple[str, Any]]
    if types and not entity_name and not entity_default:
        for kind in types:
            if kind not in ENTITY_TYPES:
                raise fail(f"--entity-type {kind!r}: quotas are kept for users and clients", ExitCode.USAGE)
        components = [(ENTITY_TYPES[k], ...) for k in types]
        shortcut = _entity(None, None, 0, user, client, user_defaults, client_defaults, required=False)
        components = [c for c in components if c[0] not in dict(shortcut)] + list(shortcut)
    else:
        components = list(_entity(types, entity_name, entity_default, user, client, user_defaults,
                                  client_defaults, required=False))
    with _source(bootstrap, zookeeper, timeout, auth) as source:
        entries = source.describe(components, strict=bool(components))
    if as_json:
        write_json_line({"quotas": entries})
        return
    table = _table("ENTITY", "QUOTA", "VALUE")
    for entry in entries:
        for key, value in entry["quotas"].items():
            table.add_row(_cell(_text_entity(tuple(entry["entity"].items()))), key, f"{value:g}")
    _show(table)


@app.command("alter")
def alter_cmd(
    add_config: Annotated[Optional[list[str]], typer.Option(
        "--add-config", show_default=False, help="key=value[,key=value...]: producer_byte_rate, consumer_byte_rate, "
        "request_percentage, controller_mutation_rate.")] = None,
    delete_config: Annotated[Optional[list[str]], typer.Option(
        "--delete-config", show_default=False, help="key[,key...] to remove.")] = None,
    validate_only: Annotated[bool, typer.Option(
        "--validate-only", help="Check the change (AlterClientQuotas' validateOnly) without writing it.")] = False,
    entity_type: EntityTypeOpt = None, entity_name: EntityNameOpt = None, entity_default: EntityDefaultOpt = 0,
    user: UserOpt = None, client: ClientOpt = None, user_defaults: UserDefaultsOpt = False,
    client_defaults: ClientDefaultsOpt = False,
    bootstrap: BootstrapOpt = None, zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0, auth: ZookeeperAuthOpt = None,
) -> None:
    """Set and remove quotas of one entity. kafka-configs --alter --add-config 'producer_byte_rate=1048576'
    --entity-type clients --entity-name app. Every broker applies the change within seconds (the
    /config/changes notification); with -z the nodes are written as kafka-configs --zookeeper writes them."""
    entity = _entity(entity_type, entity_name, entity_default, user, client, user_defaults, client_defaults,
                     required=True)
    ops = _configs(add_config, delete_config)
    with _source(bootstrap, zookeeper, timeout, auth) as source:
        result = source.alter(entity, ops, validate_only)
    if as_json:
        write_json_line({"results": [result], "validate_only": validate_only})
    elif result["error"]:
        typer.echo(f"kctl quotas: {_text_entity(entity)}: {result['error']}", err=True)
    else:
        done = "validated" if validate_only else "altered"
        typer.echo(f"{done} quotas of {_text_entity(entity)}")
    if result["error"]:
        raise typer.Exit(int(ExitCode.PROBLEMS))
