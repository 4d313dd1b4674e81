"""kctl's commands are mounted by name (kcli/cli/lazy.py): the table in kcli/cli/app.py (MOUNTS) must say what the
commands themselves say, `kctl --help` must read as if every command were imported, and the root imports a
command's module only when that command is used."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer

from kcli.cli.app import MOUNTS, app
from kcli.cli.errors import guard_group, guarded
from kcli.cli.lazy import LazyCommands, import_target
from support import REPO

COMMAND_MODULES = {mount.target.partition(":")[0] for mount in MOUNTS}


def eager_command(mount):
    """The command as app.py built it before the table: app.command(name)(guarded(f)) or add_typer(...)."""
    target = import_target(mount.target)
    holder = typer.Typer(rich_markup_mode=None, add_completion=False)
    if isinstance(target, typer.Typer):
        holder.add_typer(guard_group(target), name=mount.name, rich_help_panel=mount.panel)
    else:
        holder.command(mount.name, rich_help_panel=mount.panel)(guarded(target))
    return typer.main.get_group(holder).commands[mount.name]


@pytest.mark.parametrize("mount", MOUNTS, ids=lambda m: m.name)
def test_the_table_says_what_the_command_says(mount):
    command = eager_command(mount)
    assert command.name == mount.name
    assert not command.hidden and not command.deprecated and not command.short_help
    assert mount.help == command.get_short_help_str(10**9), (
        f"MOUNTS in kcli/cli/app.py: the help line of {mount.name!r} should read {command.get_short_help_str(10**9)!r}")
    assert command.rich_help_panel == mount.panel


def test_names_are_unique_and_every_command_module_is_mounted():
    names = [mount.name for mount in MOUNTS]
    assert len(names) == len(set(names))
    cli = REPO / "kcli" / "cli"
    defining = {f"kcli.cli.{p.stem}" for p in cli.glob("*.py")
                if "typer.Typer(" in p.read_text() or "_cmd(" in p.read_text()} - {"kcli.cli.app", "kcli.cli.common"}
    assert defining <= COMMAND_MODULES, f"command modules not in MOUNTS: {sorted(defining - COMMAND_MODULES)}"


def test_the_root_builds_only_what_is_asked_for():
    group = typer.main.get_command(app)
    assert isinstance(group.commands, LazyCommands)
    assert list(group.commands) == [mount.name for mount in MOUNTS]
    assert not any(group.commands.is_loaded(name) for name in group.commands)
    verify = group.commands["verify"]
    assert verify.name == "verify" and getattr(verify.callback, "__wrapped__", None) is not None
    assert [name for name in group.commands if group.commands.is_loaded(name)] == ["verify"]
    assert group.get_command(None, "no-such-command") is None


@pytest.mark.parametrize("columns", ["60", "80", "200"])
def test_help_reads_as_with_every_command_imported(columns, monkeypatch):
    monkeypatch.setenv("COLUMNS", columns)
    lazy = typer.main.get_command(app)
    with typer.Context(lazy, info_name="kctl") as ctx:
        lazy_help = lazy.get_help(ctx)
    loaded = typer.main.get_command(app)
    for name in list(loaded.commands):
        loaded.commands[name]  # noqa: B018 - imports and builds it
    assert all(loaded.commands.is_loaded(name) for name in loaded.commands)
    with typer.Context(loaded, info_name="kctl") as ctx:
        assert loaded.get_help(ctx) == lazy_help
    for mount in MOUNTS:
        assert f"  {mount.name} " in lazy_help


def _kctl(*args, env=None):
    code = ("import sys; from kcli.cli.app import main; sys.argv = ['kctl', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n"
            "print('MODULES', ' '.join(sorted(sys.modules)), file=sys.stderr); sys.exit(code)")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **(env or {})})
    modules = set(proc.stderr.rpartition("MODULES ")[2].split())
    return proc, modules


def test_help_and_name_completion_import_no_command_module():
    proc, modules = _kctl("--help")
    assert proc.returncode == 0 and "  verify " in proc.stdout
    assert modules & COMMAND_MODULES == set()
    proc, modules = _kctl(env={"_KCTL_COMPLETE": "complete_zsh", "COMP_WORDS": "kctl ve", "COMP_CWORD": "1"})
    assert proc.returncode == 0 and "verify" in proc.stdout and "Verify CRCs" in proc.stdout, proc.stdout
    assert modules & COMMAND_MODULES == set()


def test_a_command_imports_its_own_module_only():
    proc, modules = _kctl("verify", "--help")
    assert proc.returncode == 0 and "--deep" in proc.stdout
    assert modules & COMMAND_MODULES == {"kcli.cli.verify"}
    proc, modules = _kctl("zk", "--help")
    assert proc.returncode == 0 and "brokers" in proc.stdout
    assert modules & COMMAND_MODULES == {"kcli.cli.zk"}


def test_a_mistyped_command_is_still_suggested():
    proc, modules = _kctl("verfy")
    assert proc.returncode == 2 and "verify" in proc.stderr
    assert modules & COMMAND_MODULES == set()
