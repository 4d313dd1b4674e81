"""Commands mounted by name: the root command knows each command's name, help line and module, and imports the
module only when that command is run, completed into or asked for its own help (click's LazyGroup pattern).

``kctl --help``, a TAB on the command name and ``kctl verify FILE`` then import one command module, not all
of them (each pulls in typer's conversion of its functions, and the group modules dozens of subcommands).
The table is checked against the real commands by tests/cli/test_lazy_mount.py: its help lines are what the
commands' own help gives, so `kctl --help` reads the same as when every command was imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from typing import Any

from typer.core import TyperGroup

try:
    from typer._click.shell_completion import CompletionItem
    from typer._click.utils import make_default_short_help
except ImportError:  # pragma: no cover - typer < 0.25 runs on click itself
    from click.shell_completion import CompletionItem  # type: ignore[no-redef]
    from click.utils import make_default_short_help  # type: ignore[no-redef]


@dataclass(frozen=True)
class Mount:
    """One command of a group, before its module is imported."""

    name: str
    target: str  # "package.module:attribute": a command function, or a typer.Typer of subcommands
    panel: str  # the rich help panel it is mounted in
    help: str  # its help's first sentence: get_short_help_str() of the real command, unlimited


class LazyCommands(MutableMapping):
    """A group's ``commands``: names from the mounts (in their order), the command built on first access.
    Iterating or ``in`` never imports; ``[name]``, ``.get(name)`` and ``.values()`` do."""

    def __init__(self, mounts: tuple[Mount, ...], load: Callable[[Mount], Any], loaded: dict[str, Any]) -> None:
        self.mounts = {m.name: m for m in mounts}
        self._load = load
        self._loaded = dict(loaded)
        self._order = list(self.mounts) + [n for n in loaded if n not in self.mounts]

    def is_loaded(self, name: str) -> bool:
        return name in self._loaded or name not in self.mounts

    def __getitem__(self, name: str) -> Any:
        command = self._loaded.get(name)
        if command is None:
            mount = self.mounts[name]  # KeyError for an unknown name, as a dict
            command = self._loaded[name] = self._load(mount)
        return command

    def __setitem__(self, name: str, command: Any) -> None:
        if name not in self._order:
            self._order.append(name)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._order:
            raise KeyError(name)
        self._order.remove(name)
        self._loaded.pop(name, None)
        self.mounts.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __contains__(self, name: object) -> bool:
        return name in self._order


def import_target(target: str) -> Any:
    module, _, attribute = target.partition(":")
    # __import__ rather than importlib.import_module: the interpreter's own import, which -X importtime reports
    return getattr(__import__(module, fromlist=[attribute]), attribute)


class LazyGroup(TyperGroup):
    """A TyperGroup whose ``mounts`` are imported on use. Subclasses set ``mounts`` and ``load_mount`` (the
    click command of one mount); help and completion of the group itself read the mounts' names and help."""

    mounts: tuple[Mount, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands(self.mounts, self.load_mount, dict(self.commands))

    def load_mount(self, mount: Mount) -> Any:
        """The click command of a mount, as ``app.command(name)(f)`` or ``app.add_typer(sub, name=name)`` would
        have made it (typer converts the function's parameters here); ``wrap_command`` / ``wrap_group`` wrap
        the target first."""
        from typer import Typer
        from typer.main import get_group

        target = import_target(mount.target)
        holder = Typer(rich_markup_mode=getattr(self, "rich_markup_mode", None), pretty_exceptions_enable=False,
                             add_completion=False)
        if isinstance(target, Typer):
            holder.add_typer(self.wrap_group(target), name=mount.name, rich_help_panel=mount.panel)
        else:
            holder.command(mount.name, rich_help_panel=mount.panel)(self.wrap_command(target))
        return get_group(holder).commands[mount.name]

    def wrap_command(self, function: Any) -> Any:
        return function

    def wrap_group(self, group: Any) -> Any:
        return group

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # TyperGroup's reads .items(), which would import every command

    def _short_help(self, name: str, limit: int) -> str | None:
        """A command's help line without importing it (None: a hidden command)."""
        commands = self.commands
        if isinstance(commands, LazyCommands) and not commands.is_loaded(name):
            return make_default_short_help(commands.mounts[name].help, limit)
        command = commands.get(name)
        if command is None or command.hidden:
            return None
        return command.get_short_help_str(limit)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        # as click's: the help lines get the width the longest visible name leaves
        names = [name for name in self.list_commands(ctx) if self._short_help(name, 45) is not None]
        if names:
            limit = formatter.width - 6 - max(len(name) for name in names)
            with formatter.section("Commands"):
                formatter.write_dl([(name, self._short_help(name, limit) or "") for name in names])

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        results = [CompletionItem(name, help=text) for name in self.list_commands(ctx)
                   if name.startswith(incomplete) and (text := self._short_help(name, 45)) is not None]
        results.extend(super(TyperGroup, self).shell_complete(ctx, incomplete))  # the group's own options
        return results
