"""``kctl completion SHELL``: the shell's completion script on stdout, for packaging and dotfiles.

Typer's ``--install-completion``/``--show-completion`` detect the running shell and edit rc files; operators who
manage dotfiles or build packages want the script itself, for a named shell, with no detection and no writes.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated

import typer
from typer._completion_shared import get_completion_script

PROG = "kctl"
COMPLETE_VAR = "_KCTL_COMPLETE"  # click's convention: _<PROG>_COMPLETE


class Shell(str, Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"
    powershell = "powershell"


def completion_cmd(
    shell: Annotated[Shell, typer.Argument(help="bash, zsh, fish or powershell.", case_sensitive=False)],
) -> None:
    """Print the completion script for SHELL: commands, subcommands, options and choices complete.

    bash: `kctl completion bash > /etc/bash_completion.d/kctl` (or `source <(kctl completion bash)` in ~/.bashrc);
    zsh: `kctl completion zsh > "${fpath[1]}/_kctl"`; fish: `kctl completion fish > ~/.config/fish/completions/kctl.fish`.
    """
    script = get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell.value)
    typer.echo(script.rstrip("\n"))
