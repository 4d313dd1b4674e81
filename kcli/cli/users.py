"""`kctl users`: users' SCRAM credentials (kafka-configs' ``--entity-type users``), online through any broker
(Describe/AlterUserScramCredentials, KIP-554) or offline straight in ZooKeeper (``/config/users/<user>``, as
``kafka-configs --zookeeper`` writes it, with the change notification running brokers act on).

Thin: kcli.client.scram and kcli.zk.scram do the work; this parses, reads the password, and renders. Passwords
are never echoed nor taken on the command line: a hidden prompt, or --password-file (``-`` for standard input).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
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

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384

app = typer.Typer(cls=ConnectionGroup, no_args_is_help=True,
                  help="Users' SCRAM credentials (kafka-configs --entity-type users): list, describe, set-scram, "
                  "delete-scram, through a broker (-b) or straight in ZooKeeper (-z). -b/-z/--timeout/--auth go "
                  "before or after the subcommand.")

TimeoutOpt = Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds to wait for each broker or "
                                           "ZooKeeper request.")]
UsersArg = Annotated[list[str], typer.Argument(help="User names (as in User:<name>).", show_default=False)]
UserArg = Annotated[str, typer.Argument(help="User name (as in User:<name>).", show_default=False)]
MechanismOpt = Annotated[Optional[list[str]], typer.Option(
    "--mechanism", "-m", show_default=False,
    help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeat for both).")]


@app.callback()
def users_group(bootstrap: BootstrapOpt = None, zookeeper: ZookeeperOpt = None, timeout: GroupTimeoutOpt = None,
                auth: ZookeeperAuthOpt = None) -> None:
    """Users' SCRAM credentials, through a broker (-b, KIP-554's Describe/AlterUserScramCredentials) or offline in
    ZooKeeper (-z, /config/users/<user> as kafka-configs --zookeeper writes it). kafka-configs equivalents:
    `list`/`describe` = --describe --entity-type users [--entity-name U]; `set-scram U -m SCRAM-SHA-256
    --iterations 8192` = --alter --add-config 'SCRAM-SHA-256=[iterations=8192,password=...]' --entity-name U;
    `delete-scram U -m SCRAM-SHA-512` = --alter --delete-config SCRAM-SHA-512 --entity-name U.
    Exit status: 0 ok, 1 a user failed or has no credentials, 2 usage error, 3 no broker or ZooKeeper."""
    # Declared for --help; ConnectionGroup hands -b/-z/--timeout/--auth given here to the subcommand.


# -- where the credentials are ------------------------------------------------------------------------------------
class _Online:
    """Through a broker (kcli.client.scram)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def describe(self, users: list[str] | None) -> list[dict[str, Any]]:
        from kcli.client.scram import describe_user_scram_credentials

        return [dict(r.to_json(), error_code=r.error_code)
                for r in describe_user_scram_credentials(self.client, users)]

    def alter(self, upserts: list[tuple[str, str, int, str]], deletes: list[tuple[str, str]]) -> list[dict]:
        from kcli.client.scram import Deletion, Upsertion, alter_user_scram_credentials

        results = alter_user_scram_credentials(
            self.client, [Upsertion(u, m, p, i) for u, m, i, p in upserts], [Deletion(u, m) for u, m in deletes])
        return [r.to_json() for r in results]


class _Offline:
    """Straight in ZooKeeper (kcli.zk.scram), as kafka-configs --zookeeper."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def describe(self, users: list[str] | None) -> list[dict[str, Any]]:
        from kcli.zk import scram as zk_scram

        def entry(user: str, credentials: dict) -> dict[str, Any]:
            return {"user": user, "credentials": [{"mechanism": m, "iterations": c.iterations}
                                                  for m, c in sorted(credentials.items())], "error": None}

        if not users:
            return [entry(u, c) for u, c in sorted(zk_scram.read_all(self.store).items())]
        out = []
        for user in dict.fromkeys(users):
            credentials = zk_scram.read_user(self.store, user) if user else {}
            out.append(entry(user, credentials) if credentials else {
                "user": user, "credentials": [], "error": f"user {user!r} has no SCRAM credentials in "
                f"{zk_scram.user_path(user) if user else '/config/users'}", "error_code": 91})
        return out

    def alter(self, upserts: list[tuple[str, str, int, str]], deletes: list[tuple[str, str]]) -> list[dict]:
        from kcli.protocol.sasl import ScramCredential
        from kcli.zk import scram as zk_scram

        out = []
        for user in dict.fromkeys([u for u, *_ in upserts] + [u for u, _ in deletes]):
            upsert = {m: ScramCredential.from_password(m, p, i) for u, m, i, p in upserts if u == user}
            delete = [m for u, m in deletes if u == user]
            try:
                zk_scram.alter_user(self.store, user, upsert=upsert, delete=delete)
            except zk_scram.ScramCredentialNotFound as exc:
                out.append({"user": user, "ok": False, "error": exc.reason})
            else:
                out.append({"user": user, "ok": True, "error": None})
        return out


def _source(bootstrap: str | None, zookeeper: str | None, timeout: float, auth: str | None) -> Any:
    return config_entities_source(bootstrap, zookeeper, timeout, auth, client_id="kctl-users", offline=_Offline,
                                  online=_Online)


def _mechanisms(given: list[str] | None, *, default: tuple[str, ...] | None) -> list[str]:
    if not given:
        if default is None:
            raise fail("name the credential with --mechanism SCRAM-SHA-256 or SCRAM-SHA-512", ExitCode.USAGE)
        return list(default)
    out = []
    for text in given:
        name = text.strip().upper().replace("_", "-")
        if name not in MECHANISMS:
            raise fail(f"--mechanism {text!r}: one of {', '.join(MECHANISMS)}", ExitCode.USAGE)
        if name not in out:
            out.append(name)
    return out


def _read_password(password_file: Path | None, *, confirm: bool) -> str:
    """The password from --password-file (its first line; ``-`` reads standard input) or a hidden prompt."""
    if password_file is not None:
        try:
            text = sys.stdin.readline() if str(password_file) == "-" else password_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise fail(f"cannot read --password-file {password_file}: {exc.strerror or exc}",
                       ExitCode.UNREADABLE) from None
        except UnicodeDecodeError:
            raise fail(f"--password-file {password_file} is not UTF-8 text", ExitCode.UNREADABLE) from None
        password = text.splitlines()[0] if text.splitlines() else ""
    else:
        if not sys.stdin.isatty():
            raise fail("no terminal to ask the password on: give --password-file FILE (or - for standard input)",
                       ExitCode.USAGE)
        password = typer.prompt("Password", hide_input=True, confirmation_prompt=confirm, err=True)
    if not password:
        raise fail("the password is empty", ExitCode.USAGE)
    return password


def _exit_for(results: list[dict[str, Any]]) -> None:
    if any(r.get("error") for r in results):
        raise typer.Exit(int(ExitCode.PROBLEMS))


def _render_users(users: list[dict[str, Any]], as_json: bool) -> None:
    if as_json:
        write_json_line({"users": [{k: v for k, v in u.items() if k != "error_code"} for u in users]})
        return
    table = _table("USER", "MECHANISM", "ITERATIONS")
    for u in users:
        if u.get("error"):
            table.add_row(_cell(u["user"]), "-", "-")
        for c in u["credentials"]:
            table.add_row(_cell(u["user"]), c["mechanism"], str(c["iterations"]))
    _show(table)
    for u in users:
        if u.get("error"):
            typer.echo(f"kctl users: {u['error']}", err=True)


def _run(bootstrap: str | None, zookeeper: str | None, timeout: float, auth: str | None,
         work: Callable[[Any], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    with _source(bootstrap, zookeeper, timeout, auth) as source:
        return work(source)


# -- commands ---------------------------------------------------------------------------------------------------
@app.command("list")
def list_cmd(bootstrap: BootstrapOpt = None, zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False,
             timeout: TimeoutOpt = 10.0, auth: ZookeeperAuthOpt = None) -> None:
    """Every user with SCRAM credentials: mechanism and iterations (never keys). kafka-configs --describe
    --entity-type users."""
    users = _run(bootstrap, zookeeper, timeout, auth, lambda s: s.describe(None))
    _render_users(users, as_json)


@app.command("describe")
def describe_cmd(users: UsersArg, bootstrap: BootstrapOpt = None, zookeeper: ZookeeperOpt = None,
                 as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0, auth: ZookeeperAuthOpt = None) -> None:
    """The named users' SCRAM credentials; a user without any is an error (exit 1). kafka-configs --describe
    --entity-type users --entity-name U."""
    found = _run(bootstrap, zookeeper, timeout, auth, lambda s: s.describe(list(users)))
    _render_users(found, as_json)
    _exit_for(found)


@app.command("set-scram")
def set_scram_cmd(
    user: UserArg,
    mechanism: MechanismOpt = None,
    iterations: Annotated[int, typer.Option("--iterations", help=f"PBKDF2 iterations, {MIN_ITERATIONS}-"
                                            f"{MAX_ITERATIONS} (Kafka's limits).")] = MIN_ITERATIONS,
    password_file: Annotated[Optional[Path], typer.Option(
        "--password-file", show_default=False, help="Read the password from the first line of this file (- for "
        "standard input) instead of a hidden prompt.")] = None,
    bootstrap: BootstrapOpt = None, zookeeper: ZookeeperOpt = None, as_json: JsonOpt = False,
    timeout: TimeoutOpt = 10.0, auth: ZookeeperAuthOpt = None,
) -> None:
    """Create or replace the user's SCRAM credential (default: both mechanisms). kafka-configs --alter
    --add-config 'SCRAM-SHA-256=[iterations=N,password=...]' --entity-type users --entity-name U. Through a
    broker only the salted password travels (AlterUserScramCredentials); with -z the node is written and
    every running broker picks it up through /config/changes."""
    mechanisms = _mechanisms(mechanism, default=MECHANISMS)
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise fail(f"--iterations {iterations}: Kafka accepts {MIN_ITERATIONS}-{MAX_ITERATIONS}", ExitCode.USAGE)
    if not user:
        raise fail("the user name is empty", ExitCode.USAGE)
    password = _read_password(password_file, confirm=True)
    upserts = [(user, m, iterations, password) for m in mechanisms]
    results = _run(bootstrap, zookeeper, timeout, auth, lambda s: s.alter(upserts, []))
    _render_alteration(results, f"set {', '.join(mechanisms)} for", as_json)


@app.command("delete-scram")
def delete_scram_cmd(
    user: UserArg, mechanism: MechanismOpt = None, bootstrap: BootstrapOpt = None, zookeeper: ZookeeperOpt = None,
    as_json: JsonOpt = False, timeout: TimeoutOpt = 10.0, auth: ZookeeperAuthOpt = None,
) -> None:
    """Remove the user's SCRAM credential(s) named by --mechanism (default: every one it has). kafka-configs
    --alter --delete-config SCRAM-SHA-512 --entity-type users --entity-name U. A missing one is an error
    (exit 1)."""
    given = _mechanisms(mechanism, default=()) if mechanism else None

    def work(source: Any) -> list[dict[str, Any]]:
        wanted = given
        if wanted is None:
            found = source.describe([user])
            wanted = [c["mechanism"] for f in found for c in f["credentials"]]
            if not wanted:
                return [{"user": user, "ok": False, "error": found[0]["error"] if found else
                         f"user {user!r} has no SCRAM credentials"}]
        return source.alter([], [(user, m) for m in wanted])

    results = _run(bootstrap, zookeeper, timeout, auth, work)
    _render_alteration(results, "deleted SCRAM credentials of", as_json)


def _render_alteration(results: list[dict[str, Any]], done: str, as_json: bool) -> None:
    if as_json:
        write_json_line({"results": results})
    else:
        for r in results:
            if r["error"]:
                typer.echo(f"kctl users: {r['user']}: {r['error']}", err=True)
            else:
                typer.echo(f"{done} user {r['user']}")
    _exit_for(results)
