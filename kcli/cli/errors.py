"""The one exit-status table of kctl and the one place that applies it: exceptions and reports to 0/1/2/3.

Every command is mounted through ``guarded`` (cli/app.py), so no library exception and no filesystem condition
reaches the user as a traceback: each becomes one ``kctl: PATH: reason`` line on stderr and its exit status.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Callable

import typer

from kcli.errors import KcliError, describe_os_error

if TYPE_CHECKING:
    from rich.console import Console


class _StderrConsole:
    """kctl's stderr console, made on first use: rich.console costs ~25 ms to import, and most runs of kctl
    (``--help``, completion, a clean verify) print nothing through it. Attribute access is forwarded."""

    _console: Console | None = None

    def get(self) -> Console:
        if self._console is None:
            from rich.console import Console

            # soft_wrap: a message to a pipe or a file stays on one line (rich would wrap it at 80 columns).
            self._console = Console(stderr=True, highlight=False, soft_wrap=True)
        return self._console

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """Console.print; a plain line (printable ASCII, no markup, nothing rich would turn into an emoji) goes
        straight to stderr, as rich would write it: a warning or an error message does not import rich."""
        if (self._console is None and kwargs == {"markup": False} and len(objects) == 1
                and isinstance(objects[0], str) and not _NOT_PLAIN.search(objects[0])):
            sys.stderr.write(objects[0] + "\n")
            sys.stderr.flush()
            return
        self.get().print(*objects, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.get(), name)


# What rich would change in a line printed with markup=False: any character but printable ASCII (tabs are
# expanded, control codes stripped, wide characters measured) and a possible :emoji: code.
_NOT_PLAIN = re.compile(r"[^\x20-\x7e]|:\S*?:")


err_console = _StderrConsole()  # err_console.print(...) as on a Console; err_console.get() where one is required

DEBUG_ENV = "KCTL_DEBUG"  # set to 1 for a traceback instead of the one-line message


class ExitCode(IntEnum):
    """Documented in kctl(1): scripts branch on these."""

    OK = 0
    PROBLEMS = 1  # corruption or inconsistencies found, a refusal, something asked for not found
    USAGE = 2  # bad options or arguments (click's own usage errors exit 2 as well)
    UNREADABLE = 3  # input missing, unreadable, or not Kafka data at all; a service unreachable


# Exception class -> exit status, most specific first (looked up with isinstance), by module and name: a class
# whose module was never imported cannot have raised, so a failing command does not import the admin client or
# ZooKeeper's modules (kio and kazoo: most of a second) just to find its exit status.
_TABLE: tuple[tuple[str, str, ExitCode], ...] = (
    ("kcli.errors", "UsageError", ExitCode.USAGE),
    ("kcli.tools.recover", "QuarantinePlacementError", ExitCode.USAGE),
    ("kcli.errors", "InputError", ExitCode.UNREADABLE),  # includes a missing ZooKeeper chroot
    ("kcli.client.client", "BrokerUnreachableError", ExitCode.UNREADABLE),
    ("kcli.zk.errors", "ZooKeeperConnectionError", ExitCode.UNREADABLE),
    ("kcli.zk.registry", "ZnodeAccessError", ExitCode.UNREADABLE),
    ("kcli.zk.registry", "ZnodeMissingError", ExitCode.UNREADABLE),
    ("kcli.zk.server", "ZooKeeperNotInstalledError", ExitCode.UNREADABLE),  # with the apt-get command installing it
    ("kcli.zk.server", "ZooKeeperStartError", ExitCode.UNREADABLE),
    ("kcli.zk.models", "ZnodeFormatError", ExitCode.PROBLEMS),
    ("kcli.errors", "KcliError", ExitCode.PROBLEMS),
    ("builtins", "OSError", ExitCode.UNREADABLE),
)


def _table() -> tuple[tuple[type[BaseException], ExitCode], ...]:
    """The rows of ``_TABLE`` whose module is imported."""
    return tuple((getattr(sys.modules[module], name), code) for module, name, code in _TABLE if module in sys.modules)


def exit_code_for(exc: BaseException, *, generic: ExitCode = ExitCode.PROBLEMS) -> ExitCode | None:
    """The exit status of an exception; ``generic`` for a KcliError no more specific row names (what a bare
    library error means where it was raised: a refusal for the offline tools, ZooKeeper's refusal for zk)."""
    for cls, code in _table():
        if isinstance(exc, cls):
            return generic if cls is KcliError else code
    return None


def report_exit_code(report: Any) -> ExitCode:
    """A report's exit status: 0 ok; 3 when an input could not be read (the verdict is incomplete); else 1."""
    if report.ok:
        return ExitCode.OK
    if any(getattr(p, "unreadable", False) for p in report.problems):
        return ExitCode.UNREADABLE
    return ExitCode.PROBLEMS


def message(exc: BaseException) -> str:
    if isinstance(exc, KcliError):
        return exc.describe()
    if isinstance(exc, OSError):
        return describe_os_error(exc)
    return str(exc) or type(exc).__name__


def fail(text: str, code: ExitCode) -> typer.Exit:
    err_console.print(f"kctl: {text}", markup=False)
    return typer.Exit(int(code))


def guarded(command: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command with the exit-status table applied to whatever it raises."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, sys.stdout.fileno())
            except OSError:
                pass
            raise typer.Exit(0) from None
        except Exception as exc:  # noqa: BLE001 - the point: one line and a status, never a traceback
            if os.environ.get(DEBUG_ENV):
                raise
            code = exit_code_for(exc)
            if code is None:
                raise fail(f"internal error: {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for the traceback)",
                           ExitCode.PROBLEMS) from None
            raise fail(message(exc), code) from None

    run.kctl_guarded = True  # type: ignore[attr-defined]  # (tests check every command carries it)
    return run


def guard_group(group: typer.Typer) -> typer.Typer:
    """Apply ``guarded`` to every command of a sub-app (and of its sub-apps) before it is mounted."""
    for info in group.registered_commands:
        if info.callback is not None and not getattr(info.callback, "kctl_guarded", False):
            info.callback = guarded(info.callback)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            guard_group(sub.typer_instance)
    return group
