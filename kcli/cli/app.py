"""The `kctl` root command: mounts every subcommand, --version, and the exit-code contract."""

from __future__ import annotations

import functools
from typing import Annotated, Optional

import typer
from typer.main import get_command

from kcli import __version__
from kcli.cli.errors import guard_group, guarded
from kcli.cli import broker as broker_cli
from kcli.cli import cluster as cluster_cli
from kcli.cli import zk as zk_cli
from kcli.cli import offsets as offsets_cli
from kcli.cli import transactions as transactions_cli
from kcli.cli import groups as groups_cli
from kcli.cli import topics as topics_cli
from kcli.cli import log_dirs as log_dirs_cli
from kcli.cli import quotas as quotas_cli
from kcli.cli import users as users_cli
from kcli.cli.dump_log import dump_log
from kcli.cli.cat import cat_cmd
from kcli.cli.verify import verify_cmd
from kcli.cli.recover import recover_cmd
from kcli.cli.compact import compact_cmd
from kcli.cli.scan import scan_cmd
from kcli.cli.completion import completion_cmd
from kcli.cli.acls import acls_cmd
from kcli.cli.metrics import metrics_cmd
from kcli.cli.elect_leaders import elect_leaders_cmd
from kcli.cli.reassign import reassign_cmd
from kcli.cli.configs import configs_cmd
from kcli.cli.produce import produce_cmd
from kcli.cli.consume import consume_cmd
from kcli.cli.kafka07 import convert07_cmd
from kcli.cli.common import KctlGroup

app = typer.Typer(
    cls=KctlGroup,  # --command-config and -X for the direct commands that talk to a broker
    name="kctl",
    help="Operations toolkit for Kafka logs: dump and verify segments, indexes, snapshots and log directories.",
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kctl {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    version: Annotated[Optional[bool], typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = None,
) -> None:
    """Operations toolkit for Kafka logs. Exit status: 0 ok, 1 problems found, 2 usage error, 3 unreadable input."""


# Every command runs under cli/errors.py's exit-status table (guarded): one line and a status, never a traceback.
app.command("dump-log", rich_help_panel="Offline tools")(guarded(dump_log))
app.command("cat", rich_help_panel="Offline tools")(guarded(cat_cmd))
app.command("verify", rich_help_panel="Offline tools")(guarded(verify_cmd))
app.add_typer(guard_group(broker_cli.app), name="broker", rich_help_panel="Broker")
app.add_typer(guard_group(cluster_cli.app), name="cluster", rich_help_panel="Broker")
app.add_typer(guard_group(zk_cli.app), name="zk", rich_help_panel="ZooKeeper")
app.command("recover", rich_help_panel="Offline tools")(guarded(recover_cmd))
app.command("compact", rich_help_panel="Offline tools")(guarded(compact_cmd))
app.command("scan", rich_help_panel="Offline tools")(guarded(scan_cmd))
app.command("convert-07", rich_help_panel="Offline tools")(guarded(convert07_cmd))
app.add_typer(guard_group(offsets_cli.app), name="offsets", rich_help_panel="ZooKeeper")
app.add_typer(guard_group(transactions_cli.app), name="transactions", rich_help_panel="Broker")
app.add_typer(guard_group(groups_cli.app), name="groups", rich_help_panel="Broker")
app.add_typer(guard_group(topics_cli.app), name="topics", rich_help_panel="Broker")
app.add_typer(guard_group(log_dirs_cli.app), name="log-dirs", rich_help_panel="Broker")
app.add_typer(guard_group(users_cli.app), name="users", rich_help_panel="Broker")
app.add_typer(guard_group(quotas_cli.app), name="quotas", rich_help_panel="Broker")
app.command("acls", rich_help_panel="Broker")(guarded(acls_cmd))
app.command("metrics", rich_help_panel="Broker")(guarded(metrics_cmd))
app.command("elect-leaders", rich_help_panel="Broker")(guarded(elect_leaders_cmd))
app.command("reassign", rich_help_panel="Broker")(guarded(reassign_cmd))
app.command("configs", rich_help_panel="Broker")(guarded(configs_cmd))
app.command("produce", rich_help_panel="Broker")(guarded(produce_cmd))
app.command("consume", rich_help_panel="Broker")(guarded(consume_cmd))

app.command("completion", rich_help_panel="Shell")(guarded(completion_cmd))


@functools.cache
def command():  # -> typer's click Command (typer vendors click)
    """kctl's click command tree. typer builds it from every command's signature (tenths of a CPU second), so it is
    built once per process; processes forked from one that built it (the test suite's fork servers) reuse it."""
    return get_command(app)


def main() -> None:
    # One program name however it is started (`kctl`, `python -m kcli`): usage lines, and the completion
    # variable _KCTL_COMPLETE that `kctl completion` scripts set. What typer's app() does, with the tree cached
    # (its pretty exceptions are off: cli/errors.py's table reports every error).
    command()(prog_name="kctl")
