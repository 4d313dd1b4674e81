"""`kctl configs --entity-type users|clients|ips`: kafka-configs' describe and alter of the entities quotas and
SCRAM credentials belong to, with its option spellings and its output lines (Kafka 3.7's ConfigCommand:
"Quota configs for user-principal 'alice' are producer_byte_rate=1024.0", "SCRAM credential configs for
user-principal 'alice' are SCRAM-SHA-256=iterations=8192", "Completed updating config for user alice.").

Thin: the work is kctl quotas' and kctl users' (their entity parsing and their sources over kcli.client.quotas,
kcli.client.scram, kcli.zk.quotas and kcli.zk.scram), through a broker (-b) or straight in ZooKeeper (-z).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any

import typer

from kcli.cli import quotas as quota_cli
from kcli.cli import users as users_cli
from kcli.cli.common import ExitCode, config_entities_source, err_console, fail, write_json_line

QUOTA_KINDS = ("users", "clients", "ips")
_SCRAM_SPEC = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.S)
DEFAULT_SCRAM_ITERATIONS = 4096  # ConfigCommand's DefaultScramIterations


@dataclass
class QuotaEntityArgs:
    """kafka-configs' entity options for users, clients and ips, as given."""

    kinds: list[str]
    names: list[str]
    defaults: int
    user: str | None = None
    client: str | None = None
    user_defaults: bool = False
    client_defaults: bool = False
    ip: str | None = None
    ip_defaults: bool = False
    shorthand: bool = field(init=False)

    def __post_init__(self) -> None:
        self.shorthand = (self.user is not None or self.client is not None or self.user_defaults
                          or self.client_defaults or self.ip is not None or self.ip_defaults)


# -- the entity ---------------------------------------------------------------------------------------------------
def _components(a: QuotaEntityArgs, *, describe: bool) -> list[tuple[str, Any]]:
    """(protocol entity type, name | None for <default> | ... for any) pairs, as ConfigCommand builds its filter
    (describe) or its ClientQuotaEntity (alter)."""
    if a.shorthand and (a.kinds or a.names or a.defaults):
        raise fail("--entity-{type,name,default} should not be used in conjunction with specific entity flags",
                   ExitCode.USAGE)
    if any(k not in QUOTA_KINDS for k in a.kinds):
        raise fail("Only 'users' and 'clients' entity types may be specified together", ExitCode.USAGE)
    ip_given = "ips" in a.kinds or a.ip is not None or a.ip_defaults
    if ip_given:
        others = [k for k in a.kinds if k != "ips"] or (["users"] if a.user is not None or a.user_defaults else []) \
            or (["clients"] if a.client is not None or a.client_defaults else [])
        if others:
            raise fail("Only 'users' and 'clients' entity types may be specified together", ExitCode.USAGE)
        if a.ip is not None and a.ip_defaults:
            raise fail("give an ip or --ip-defaults, not both", ExitCode.USAGE)
        if a.kinds.count("ips") > 1:
            raise fail("Duplicate entity type(s) specified: ips", ExitCode.USAGE)
        names = a.names + ([a.ip] if a.ip is not None else [])
        defaults = a.defaults + int(a.ip_defaults)
        if names and defaults or len(names) + defaults > 1:
            raise fail("give one --entity-name or --entity-default per --entity-type", ExitCode.USAGE)
        if not names and not defaults:
            if not describe:
                raise fail("An entity-name or default entity must be specified with --alter of users, clients, "
                           "brokers or ips", ExitCode.USAGE)
            return [("ip", ...)]
        if names:
            _check_ip(names[0])
            return [("ip", names[0])]
        return [("ip", None)]
    if describe and not a.shorthand and len(a.names) + a.defaults < len(a.kinds):
        # ConfigCommand's zipAll: a type without a name matches every entity of that type
        if len(set(a.kinds)) != len(a.kinds):
            raise fail("each --entity-type may be given once", ExitCode.USAGE)
        if a.names and a.defaults:
            raise fail("a name and a default for two entity types is ambiguous here: use --user/--client and "
                       "--user-defaults/--client-defaults", ExitCode.USAGE)
        given: list[Any] = list(a.names) if a.names else [None] * a.defaults
        for name in given:
            if name == "":
                raise fail("an --entity-name is empty (use --entity-default for <default>)", ExitCode.USAGE)
        given += [...] * (len(a.kinds) - len(given))
        parts = {quota_cli.ENTITY_TYPES[k]: n for k, n in zip(a.kinds, given)}
        return [(k, parts[k]) for k in ("user", "client-id") if k in parts]
    entity = quota_cli._entity(a.kinds, a.names, a.defaults, a.user, a.client, a.user_defaults, a.client_defaults,
                               required=True)
    return list(entity)


def _check_ip(ip: str) -> None:
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        raise fail(f"The entity name for ips must be a valid IP, but it is: {ip}", ExitCode.USAGE) from None


def _head(a: QuotaEntityArgs, entity: list[tuple[str, Any]]) -> tuple[str, str]:
    """ConfigCommand's entityTypeHead and entityNameHead ("" for the default): the first --entity-type and its
    name, or with the shorthands client, user, ip names before their defaults."""
    plural = {"user": "users", "client-id": "clients", "ip": "ips"}
    parts = dict(entity)
    if a.shorthand:
        order = [("client-id", a.client), ("user", a.user), ("ip", a.ip)]
        for kind, name in order:
            if name is not None:
                return plural[kind], name
        for kind, flag in (("client-id", a.client_defaults), ("user", a.user_defaults), ("ip", a.ip_defaults)):
            if flag:
                return plural[kind], ""
    kind = a.kinds[0]
    name = parts[{"users": "user", "clients": "client-id", "ips": "ip"}[kind]]
    return kind, "" if name is None else str(name)


def _text_entity(entity: dict[str, Any]) -> str:
    """ConfigCommand.describeQuotaConfigs' entity: user-principal 'alice', client-id 'app', the default ip."""
    words = {"user": "user-principal", "client-id": "client-id", "ip": "ip"}
    return ", ".join(f"{words[k]} '{entity[k]}'" if entity[k] is not None else f"the default {words[k]}"
                     for k in ("user", "client-id", "ip") if k in entity)


def _double(value: float) -> str:
    from kcli.zk.quotas import java_double

    return java_double(value)


# -- the configs --------------------------------------------------------------------------------------------------
@dataclass
class _Changes:
    quota_ops: list[tuple[str, float | None]] = field(default_factory=list)
    scram_set: list[tuple[str, int, str]] = field(default_factory=list)  # mechanism, iterations, password
    scram_deleted: list[str] = field(default_factory=list)
    set_keys: list[str] = field(default_factory=list)
    deleted_keys: list[str] = field(default_factory=list)


def _scram(mechanism: str, spec: str) -> tuple[str, int, str]:
    """SCRAM-SHA-256=[iterations=8192,password=secret]'s value (brackets already dropped), as
    ConfigCommand.alterUserScramCredentialConfigs reads it; the password is never echoed."""
    expected = f"expected {mechanism}=[iterations=N,password=P] or {mechanism}=[password=P]"
    if "password=" not in spec:
        raise fail(f"{mechanism}: the password is missing ({expected})", ExitCode.USAGE)
    match = _SCRAM_SPEC.fullmatch(spec)
    if match is None or match.group(1) == "":
        raise fail(f"{mechanism}: invalid credential property ({expected})", ExitCode.USAGE)
    iterations = DEFAULT_SCRAM_ITERATIONS if match.group(1) in (None, "-1") else int(match.group(1))
    if iterations < users_cli.MIN_ITERATIONS:
        raise fail(f"{mechanism}: Iterations {iterations} is less than the minimum {users_cli.MIN_ITERATIONS} "
                   f"required for {mechanism}", ExitCode.USAGE)
    if iterations > users_cli.MAX_ITERATIONS:
        raise fail(f"{mechanism}: Iterations {iterations} is more than the maximum {users_cli.MAX_ITERATIONS} "
                   f"Kafka accepts for {mechanism}", ExitCode.USAGE)
    if not match.group(2):
        raise fail(f"{mechanism}: the password is empty", ExitCode.USAGE)
    return mechanism, iterations, match.group(2)


def _changes(entity: list[tuple[str, Any]], add: dict[str, str], delete: list[str], validate_only: bool) -> _Changes:
    """Kafka's checks of --add-config/--delete-config for the entity (ConfigCommand.alterConfig), as usage
    errors naming the keys."""
    from kcli.zk.quotas import CLIENT_KEYS, IP_KEYS

    kinds = dict(entity)
    out = _Changes(set_keys=list(add), deleted_keys=list(delete))
    if "ip" in kinds:
        unknown = [k for k in [*add, *delete] if k not in IP_KEYS]
        if unknown:
            raise fail(f"Only connection quota configs can be added for 'ips'. Unexpected config names: "
                       f"{','.join(unknown)}", ExitCode.USAGE)
        allowed_scram = False
    else:
        allowed_scram = "client-id" not in kinds
    scram_keys = set(users_cli.MECHANISMS) if allowed_scram else set()
    quota_keys = set(CLIENT_KEYS) if "ip" not in kinds else set(IP_KEYS)
    what = "'users'" if allowed_scram else "'clients'"
    configs = "quota and SCRAM credential configs" if allowed_scram else "quota configs"
    for verb, keys in (("added", list(add)), ("deleted", delete)):
        unknown = [k for k in keys if k not in quota_keys | scram_keys]
        if unknown:
            raise fail(f"Only {configs} can be {verb} for {what}. Unexpected config names: {','.join(unknown)}",
                       ExitCode.USAGE)
    scram_add = [k for k in add if k in scram_keys]
    scram_delete = [k for k in delete if k in scram_keys]
    quota_add = [k for k in add if k in quota_keys]
    quota_delete = [k for k in delete if k in quota_keys]
    if scram_add or scram_delete:
        if kinds.get("user", "") is None:
            raise fail("The use of --entity-default or --user-defaults is not allowed with User SCRAM Credentials.",
                       ExitCode.USAGE)
        if quota_add or quota_delete:
            raise fail("Cannot alter both quota and SCRAM credential configs simultaneously for 'users'.",
                       ExitCode.USAGE)
        if validate_only:
            raise fail("--validate-only: SCRAM credentials have no validate-only change (AlterUserScramCredentials)",
                       ExitCode.USAGE)
        out.scram_set = [_scram(k, add[k]) for k in scram_add]
        out.scram_deleted = scram_delete
        return out
    out.quota_ops = quota_cli._configs([f"{k}={add[k]}" for k in quota_add], quota_delete)
    return out


# -- running ------------------------------------------------------------------------------------------------------
def _source(bootstrap: str | None, zookeeper: str | None, timeout: float, auth: str | None) -> Any:
    """One connection for both: (quotas' source, users' source) through a broker or in ZooKeeper."""
    return config_entities_source(
        bootstrap, zookeeper, timeout, auth, client_id="kctl-configs",
        offline=lambda store: (quota_cli._Offline(store), users_cli._Offline(store)),
        online=lambda client: (quota_cli._Online(client), users_cli._Online(client)))


def run(a: QuotaEntityArgs, *, describe: bool, add_config: list[str], delete_config: list[str],
        validate_only: bool, bootstrap: str | None, zookeeper: str | None, timeout: float, auth: str | None,
        as_json: bool) -> None:
    from kcli.client.configs import parse_add_config, parse_delete_config
    from kcli.errors import UsageError

    entity = _components(a, describe=describe)
    if describe:
        if add_config or delete_config or validate_only:
            raise fail("--add-config, --delete-config and --validate-only go with --alter", ExitCode.USAGE)
        _describe(entity, bootstrap, zookeeper, timeout, auth, as_json)
        return
    try:
        add = parse_add_config(add_config)
    except UsageError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    delete = parse_delete_config(delete_config)
    if not add and not delete:
        raise fail("At least one of --add-config or --delete-config must be specified with --alter",
                   ExitCode.USAGE)
    both = sorted(set(add) & set(delete))
    if both:
        raise fail(f"{', '.join(both)}: both added and deleted", ExitCode.USAGE)
    changes = _changes(entity, add, delete, validate_only)
    _alter(a, entity, changes, validate_only, bootstrap, zookeeper, timeout, auth, as_json)


def _describe(entity: list[tuple[str, Any]], bootstrap: str | None, zookeeper: str | None, timeout: float,
              auth: str | None, as_json: bool) -> None:
    kinds = dict(entity)
    # ConfigCommand describes SCRAM credentials only for users alone, and not for the default user
    with_scram = "client-id" not in kinds and "ip" not in kinds and kinds.get("user", ...) is not None
    with _source(bootstrap, zookeeper, timeout, auth) as (quotas, users):
        entries = quotas.describe(entity, strict=True)
        scram: list[dict[str, Any]] = []
        if with_scram:
            named = kinds["user"]
            scram = users.describe(None if named is ... else [named])
    scram = [s for s in scram if s.get("error_code") != 91]  # RESOURCE_NOT_FOUND: no credentials, not listed
    if as_json:
        write_json_line({
            "entities": [{"entity": e["entity"], "configs": e["quotas"]} for e in entries],
            "scram_credentials": [{k: v for k, v in s.items() if k != "error_code"} for s in scram]})
    else:
        for e in entries:
            values = ", ".join(f"{k}={_double(v)}" for k, v in e["quotas"].items())
            typer.echo(f"Quota configs for {_text_entity(e['entity'])} are {values}")
        for s in scram:
            if s.get("error"):
                continue
            text = ", ".join(f"{c['mechanism']}=iterations={c['iterations']}" for c in s["credentials"])
            typer.echo(f"SCRAM credential configs for user-principal '{s['user']}' are {text}")
    failed = [s for s in scram if s.get("error")]
    for s in failed:
        err_console.print(f"kctl: Error retrieving SCRAM credential configs for user-principal '{s['user']}': "
                          f"{s['error']}", markup=False)
    if failed:
        raise typer.Exit(int(ExitCode.PROBLEMS))


def _alter(a: QuotaEntityArgs, entity: list[tuple[str, Any]], changes: _Changes, validate_only: bool,
           bootstrap: str | None, zookeeper: str | None, timeout: float, auth: str | None, as_json: bool) -> None:
    key = tuple(entity)
    error: str | None = None
    with _source(bootstrap, zookeeper, timeout, auth) as (quotas, users):
        if changes.quota_ops:
            deleted = [k for k, v in changes.quota_ops if v is None]
            if deleted:  # kafka-configs refuses to delete a key the entity has no value for
                found = quotas.describe(entity, strict=True)
                present = {k for e in found if tuple(e["entity"].items()) == key for k in e["quotas"]}
                absent = [k for k in deleted if k not in present]
                if absent:
                    error = f"Invalid config(s): {','.join(absent)}"
            if error is None:
                error = quotas.alter(key, changes.quota_ops, validate_only)["error"]
        else:
            user = str(dict(entity)["user"])
            results = users.alter([(user, m, i, p) for m, i, p in changes.scram_set],
                                  [(user, m) for m in changes.scram_deleted])
            error = "; ".join(r["error"] for r in results if r.get("error")) or None
    kind, name = _head(a, entity)
    if as_json:
        write_json_line({"validate_only": validate_only, "results": [{
            "entity": {k: v for k, v in entity}, "ok": error is None, "set": changes.set_keys,
            "deleted": changes.deleted_keys, "error": error}]})
    elif error is None:
        what = f"config for {kind[:-1]} {name}" if name else f"default config for {kind} in the cluster"
        typer.echo(f"Validated the update of {what} (validate only: nothing changed)." if validate_only
                   else f"Completed updating {what}.")
    if error is not None:
        err_console.print(f"kctl: {_text_entity(dict(entity))}: {error}", markup=False)
        raise typer.Exit(int(ExitCode.PROBLEMS))
