"""Shared CLI plumbing: exit codes, stderr messages, NDJSON writing, progress on terminals only."""

from __future__ import annotations

import copy
import functools
import json
import os
import sys
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timezone
from enum import Enum
from collections.abc import Iterator
from typing import Annotated, Any, Optional

import typer
from typer.core import TyperGroup

from kcli.cli.errors import ExitCode, err_console, exit_code_for, fail, guard_group, guarded, report_exit_code
from kcli.cli.lazy import LazyGroup, Mount
from kcli.errors import KcliError

__all__ = ["ExitCode", "err_console", "fail"]  # re-exported: commands import them from here


class Engine(str, Enum):
    """Where offline tools run: this machine (processes) or Spark (kcli/spark)."""

    LOCAL = "local"
    SPARK = "spark"


MasterOpt = Annotated[Optional[str], typer.Option(
    "--master", help="Spark master URL (--engine spark; default: spark.master from the environment, else local[*]).",
    show_default=False)]


def spark_session(engine: Engine, master: str | None, app_name: str):
    """The Spark engine's session (None for the local engine); exit 2 with one line when pyspark or Java is
    missing, or when --master comes without --engine spark. pyspark is imported only on this path."""
    if engine is not Engine.SPARK:
        if master is not None:
            raise fail("--master needs --engine spark", ExitCode.USAGE)
        return None
    try:
        from kcli.spark.session import SparkUnavailableError, get_session
    except ImportError as exc:
        raise fail(f"--engine spark needs pyspark: pip install 'kcli[spark]' ({exc})", ExitCode.USAGE) from None
    try:
        return get_session(master, app_name=app_name)
    except SparkUnavailableError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None


@contextmanager
def exit_on_errors(*usage: type[BaseException]):
    """Exceptions of the ``usage`` types exit 2; everything else goes to the exit-status table (cli/errors.py)."""
    try:
        yield
    except usage as exc:
        raise fail(exc.describe() if isinstance(exc, KcliError) else str(exc), ExitCode.USAGE) from None


def finish(report, render, *, json_out: bool, quiet: bool = False) -> typer.Exit:
    """A report on stdout (one JSON object, or the command's rendering), then the exit status it earns
    (``report_exit_code``: 0 ok, 1 problems, 3 unreadable input)."""
    if json_out:
        write_json_line(report.to_json())
    elif not quiet:
        render()
    return typer.Exit(int(report_exit_code(report)))


def escape(markup: str) -> str:
    """rich.markup.escape, imported when a command prints (rich.markup is not needed for --help)."""
    from rich.markup import escape as rich_escape

    return rich_escape(markup)


def write_json_line(obj: dict[str, Any], out=None) -> None:
    (out or sys.stdout).write(json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n")


def parse_timestamp(text: str | None) -> int | None:
    """Milliseconds since the epoch, or an ISO-8601 date-time (UTC unless it names a zone)."""
    if text is None:
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise typer.BadParameter(f"{text!r} is neither epoch milliseconds nor an ISO-8601 date-time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def progress_wanted(*, data_on_stdout: bool) -> bool:
    """Progress bars only for a person watching: stderr is a terminal and (if data goes to stdout) stdout is not."""
    if os.environ.get("CI") or not sys.stderr.isatty():
        return False
    return not (data_on_stdout and sys.stdout.isatty())


@contextmanager
def byte_progress(total: int, description: str, enabled: bool):
    """Yields an ``advance(n_bytes)`` callback; a rich bar on stderr when enabled."""
    if not enabled:
        yield lambda _n: None
        return
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err_console.get(),
        transient=True,
    )
    with progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)


@contextmanager
def stdout_pipe_guard():
    """`kctl dump-log ... | head` must end quietly when the reader goes away."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(0) from None


BOOTSTRAP_ENV = "KCTL_BOOTSTRAP_SERVER"


def bootstrap_server(given: str | None) -> str | None:
    """The broker an online command talks to: --bootstrap-server, else $KCTL_BOOTSTRAP_SERVER. The variable is
    read here, once a command has chosen to talk to Kafka, and not by the option parser: an exported variable
    never makes a --log-dir (offline) or ZooKeeper-only invocation an error ("not both") or another mode."""
    return given or os.environ.get(BOOTSTRAP_ENV) or None


def request_timeout_ms(timeout: float) -> int:
    """The timeout an admin request carries for the broker's own wait (an election, new partitions' leaders, a
    reassignment's start): a second less than the client waits for the answer, so the broker answers
    REQUEST_TIMED_OUT before the client gives up on the connection."""
    return max(100, int(timeout * 1000) - 1000)


@contextmanager
def config_entities_source(bootstrap: str | None, zookeeper: str | None, timeout: float, auth: str | None, *,
                           client_id: str, offline: Any, online: Any) -> Iterator[Any]:
    """kafka-configs' two ways to the user and client entities (SCRAM credentials, quotas): through a broker
    (``online(client)``) or straight in ZooKeeper (``offline(store)``, kcli.zk.scram.ZkScramStore), never both;
    -b on the command line beats $KCTL_ZOOKEEPER. Usage errors exit 2, ZooKeeper's failures their status."""
    if bootstrap and zookeeper and zookeeper == os.environ.get("KCTL_ZOOKEEPER"):
        zookeeper = None
    if bootstrap and zookeeper:
        raise fail("give --bootstrap-server or --zookeeper, not both", ExitCode.USAGE)
    if not zookeeper and not bootstrap_server(bootstrap):
        raise fail("no Kafka given: use --bootstrap-server host:port (or $KCTL_BOOTSTRAP_SERVER), or --zookeeper "
                   "host:port[/chroot] (or $KCTL_ZOOKEEPER) to work on ZooKeeper directly", ExitCode.USAGE)
    if zookeeper:
        from kcli.zk.scram import ZkScramStore

        if auth is not None and ":" not in auth:
            raise fail("ZooKeeper digest auth must be given as user:password", ExitCode.USAGE)
        try:
            store = ZkScramStore(zookeeper, timeout=timeout, auth=auth)
        except KcliError as exc:
            raise fail(exc.describe(), ExitCode.USAGE) from None
        try:
            yield offline(store)
        except KcliError as exc:
            raise fail(exc.describe(), exit_code_for(exc, generic=ExitCode.UNREADABLE) or ExitCode.UNREADABLE
                       ) from None
        finally:
            store.close()
        return
    with kafka_client(bootstrap, timeout, client_id) as client:
        yield online(client)


@contextmanager
def kafka_client(bootstrap: str | None, timeout: float, client_id: str) -> Iterator[Any]:
    """A KafkaClient for an online command (--bootstrap-server, else $KCTL_BOOTSTRAP_SERVER): none, or a malformed
    one, is a usage error (2); a library error inside the block becomes its one-line message and exit status;
    the client is closed."""
    from kcli.client import KafkaClient
    from kcli.client.client import parse_bootstrap

    bootstrap = bootstrap_server(bootstrap)
    if not bootstrap:
        raise fail(f"no Kafka given: use --bootstrap-server host:port or set {BOOTSTRAP_ENV}", ExitCode.USAGE)
    try:
        parse_bootstrap(bootstrap)
    except KcliError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    client = KafkaClient(bootstrap, timeout=timeout, client_id=client_id, security=client_security())
    try:
        yield client
    except KcliError as exc:
        raise fail(exc.describe(), exit_code_for(exc) or ExitCode.PROBLEMS) from None
    finally:
        client.close()


# -- client security: --command-config FILE and -X key=value on every online command ----------------------------
# ConnectionGroup adds both to every command of its group that takes --bootstrap-server (and to the group), so no
# command declares them: their values go to the click context's meta (one dict shared by the group's context and
# the subcommand's), and ``client_security()`` reads them when the command builds its client.
_COMMAND_CONFIG, _CLIENT_PROPERTIES = "kcli_command_config", "kcli_client_properties"
_CURRENT_META: ContextVar[dict[str, Any] | None] = ContextVar("kcli_cli_meta", default=None)


def _remember(ctx: typer.Context, param: typer.CallbackParam, value: Any) -> Any:
    if value:  # -X given before and after the subcommand name adds up; the later --command-config wins
        if param.name == _CLIENT_PROPERTIES:
            value = (*ctx.meta.get(_CLIENT_PROPERTIES, ()), *value)
        ctx.meta[param.name] = value
    return value


def security_params() -> list[Any]:
    """The two client security options as click parameters, a copy for each command that takes them."""
    return [copy.copy(param) for param in _security_params()]


@functools.cache
def _security_params() -> list[Any]:
    # typer builds them from this declaration once (it costs a signature evaluation per call, and ~40 commands
    # take them)
    from typer.main import get_command

    options = typer.Typer(add_completion=False)

    @options.command()
    def _declared(
        kcli_command_config: Annotated[Optional[str], typer.Option(
            "--command-config", metavar="FILE", expose_value=False, callback=_remember, show_default=False,
            help="Client properties for the connection to Kafka, as Kafka's tools' --command-config: "
            "security.protocol, sasl.mechanism, sasl.username + sasl.password or sasl.jaas.config, ssl.ca.location "
            "or ssl.truststore.*, ssl.certificate.location + ssl.key.location or ssl.keystore.*.")] = None,
        kcli_client_properties: Annotated[Optional[list[str]], typer.Option(
            "-X", metavar="KEY=VALUE", expose_value=False, callback=_remember, show_default=False,
            help="One client property (as kcat's -X), e.g. -X security.protocol=SASL_SSL; repeatable, wins over "
            "--command-config.")] = None,
    ) -> None:
        pass  # never run: only its parameters are used

    return list(get_command(options).params)


def with_client_security(command: Any) -> Any:
    """Give a click command the security options when it takes --bootstrap-server (idempotent)."""
    names = {opt for param in command.params for opt in param.opts}
    if "--bootstrap-server" in names and "--command-config" not in names:
        command.params.extend(security_params())
    return command


def client_security() -> Any:
    """The running command's ClientSecurity (--command-config, then -X); a bad setting exits 2, settings read
    but not used are warned about on stderr."""
    from kcli.client.security import load_client_security
    from kcli.protocol.security import SecurityConfigError

    meta = _CURRENT_META.get() or {}
    try:
        security = load_client_security(meta.get(_COMMAND_CONFIG), meta.get(_CLIENT_PROPERTIES, ()))
    except SecurityConfigError as exc:
        raise fail(exc.describe(), ExitCode.USAGE) from None
    for warning in security.warnings:
        err_console.print(f"kctl: warning: {warning}", markup=False)
    return security


# The connection options the commands share (one definition: the same flags, env var and help everywhere).
BootstrapOpt = Annotated[Optional[str], typer.Option(
    "--bootstrap-server", "-b", show_default=False,  # no envvar= here: bootstrap_server() reads it, see there
    help=f"host:port[,host:port...] of any Kafka-protocol broker of the cluster (default: ${BOOTSTRAP_ENV}).")]
ZookeeperOpt = Annotated[Optional[str], typer.Option(
    "--zookeeper", "-z", envvar="KCTL_ZOOKEEPER", show_default=False,
    help="host:port[,host:port...][/chroot] (default: $KCTL_ZOOKEEPER).")]
ZookeeperAuthOpt = Annotated[Optional[str], typer.Option(
    "--auth", envvar="KCTL_ZOOKEEPER_AUTH", show_default=False,
    help="ZooKeeper digest auth user:password (default: $KCTL_ZOOKEEPER_AUTH).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Write one JSON object to standard output.")]
# What a command group declares for `kctl GROUP --help`; ConnectionGroup hands the values to the subcommand.
GroupTimeoutOpt = Annotated[Optional[float], typer.Option(
    "--timeout", min=0.1, show_default=False, help="Seconds to wait for each broker or ZooKeeper request "
    "(default 10).")]

# -- connection options before or after the subcommand ------------------------------------------------------------
CONNECTION_OPTIONS = frozenset({"-b", "--bootstrap-server", "-z", "--zookeeper", "--timeout", "--auth",
                                "--command-config", "-X"})


def split_connection_options(args: list[str]) -> tuple[list[str], list[str]]:
    """The connection options (with their values) at the head of a command group's arguments, and the rest:
    ``-b B --timeout 5 describe g`` -> ``(["-b", "B", "--timeout", "5"], ["describe", "g"])``."""
    i = 0
    while i < len(args):
        word = args[i]
        if word in CONNECTION_OPTIONS:
            i += 2
        elif word.startswith("--") and word.partition("=")[0] in CONNECTION_OPTIONS:
            i += 1  # --bootstrap-server=B
        elif word[:2] in ("-b", "-z", "-X") and len(word) > 2:
            i += 1  # -bB
        else:
            break
    return args[:i], args[i:]


class KctlGroup(LazyGroup):
    """The root command: its commands are imported when used (cli/lazy.py; the root sets ``mounts``), each run
    through the exit-status table (``guarded``); its direct commands that talk to a broker (kctl acls) get the
    client security options too, and every command's options reach ``client_security()`` through the context
    meta set here."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from kcli.cli.coercion import install

        install()  # plain option values converted without pydantic (cli/coercion.py)
        super().__init__(*args, **kwargs)
        for name in self.commands:
            if self.commands.is_loaded(name):  # type: ignore[attr-defined]
                with_client_security(self.commands[name])

    def load_mount(self, mount: Mount) -> Any:
        """The mount's click command, run under cli/errors.py's exit-status table, with the client security
        options when it talks to a broker."""
        return with_client_security(super().load_mount(mount))

    def wrap_command(self, function: Any) -> Any:
        return guarded(function)

    def wrap_group(self, group: Any) -> Any:
        return guard_group(group)

    def invoke(self, ctx: Any) -> Any:
        token = _CURRENT_META.set(ctx.meta)
        try:
            return super().invoke(ctx)
        finally:
            _CURRENT_META.reset(token)


class ConnectionGroup(TyperGroup):
    """A command group (kctl groups, topics, transactions, offsets, zk) whose connection options -b, -z,
    --timeout and --auth go before or after the subcommand alike: those before its name are moved after it, so
    the subcommand's one parser reads them. Given twice, the later (the subcommand's own) wins, and an option on
    the command line always beats the environment ($KCTL_ZOOKEEPER, $KCTL_BOOTSTRAP_SERVER)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with_client_security(self)  # --command-config and -X wherever --bootstrap-server is
        for command in self.commands.values():  # type: ignore[union-attr]
            with_client_security(command)

    def invoke(self, ctx: Any) -> Any:
        token = _CURRENT_META.set(ctx.meta)  # the subcommand's options land in this same dict (client_security)
        try:
            return super().invoke(ctx)
        finally:
            _CURRENT_META.reset(token)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        leading, rest = split_connection_options(args)
        if leading and rest and rest[0] in self.commands:  # type: ignore[operator]
            command = self.commands[rest[0]]  # type: ignore[index]
            taken = {name for param in command.params for name in (*param.opts, *param.secondary_opts)}
            for word in leading:
                name = word.partition("=")[0] if word.startswith("--") else word[:2]
                if word.startswith("-") and name not in taken and not ctx.resilient_parsing:
                    ctx.fail(f"{rest[0]} takes no {name}")
            args = [rest[0], *leading, *rest[1:]]
        return super().parse_args(ctx, args)
