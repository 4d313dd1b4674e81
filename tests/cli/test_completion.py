"""Shell completion as a shell runs it: bash sources `kctl completion bash` (its output, written once a module)
and asks kctl for candidates."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from kcli.cli.app import app  # noqa: F401  (import check: the completion command is mounted)


@pytest.fixture(scope="module")
def kctl_bin(tmp_path_factory):
    """A `kctl` on PATH that runs this checkout (the completion script calls the program by name)."""
    bin_dir = tmp_path_factory.mktemp("bin")
    shim = bin_dir / "kctl"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kcli "$@"\n')
    shim.chmod(0o755)
    # what `source <(kctl completion bash)` reads, written once by the shim for every test of the module
    proc = subprocess.run([str(shim), "completion", "bash"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0 and proc.stdout, proc.stderr
    (bin_dir / "completion.bash").write_text(proc.stdout)
    return bin_dir


def complete(kctl_bin, words: str) -> list[str]:
    """COMPREPLY of bash's completion function for a command line ending in a partial word."""
    if not shutil.which("bash"):
        pytest.skip("bash not installed")
    parts = words.split(" ")
    script = (
        f'source "{kctl_bin / "completion.bash"}"\n'
        f'COMP_WORDS=({words})\n'
        f'COMP_CWORD={len(parts) - 1}\n'
        '_kctl_completion kctl\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{kctl_bin}:{os.environ['PATH']}", "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if line]


def test_commands_complete(kctl_bin):
    assert complete(kctl_bin, "kctl tr") == ["transactions"]
    assert {"dump-log"} <= set(complete(kctl_bin, "kctl du"))


def test_subcommands_and_options_complete(kctl_bin):
    assert "describe" in complete(kctl_bin, "kctl transactions de")
    assert "--deep-iteration" in complete(kctl_bin, "kctl dump-log --deep")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish", "powershell"])
def test_every_shell_gets_a_script(shell):
    proc = subprocess.run([sys.executable, "-m", "kcli", "completion", shell], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "_KCTL_COMPLETE" in proc.stdout.replace("_kctl_complete", "_KCTL_COMPLETE")


def test_unknown_shell_is_a_usage_error():
    proc = subprocess.run([sys.executable, "-m", "kcli", "completion", "tcsh"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "tcsh" in proc.stderr


def test_connection_options_before_the_subcommand_and_kafka_spellings_complete(kctl_bin):
    assert complete(kctl_bin, "kctl groups -b h:1 re") == ["reset-offsets"]
    assert complete(kctl_bin, "kctl zk -z h:1 br") == ["brokers"]
    assert complete(kctl_bin, "kctl transactions -b h:1 find") == ["find-hanging"]
    assert "--dry-run" in complete(kctl_bin, "kctl groups -b h:1 reset-offsets --dr")
    assert "--group" in complete(kctl_bin, "kctl groups describe --gr")


def test_admin_commands_complete(kctl_bin):
    assert complete(kctl_bin, "kctl elect-l") == ["elect-leaders"]
    assert "--election-type" in complete(kctl_bin, "kctl elect-leaders --elec")
    assert set(complete(kctl_bin, "kctl elect-leaders --election-type ")) == {"preferred", "unclean"}
    assert complete(kctl_bin, "kctl reass") == ["reassign"]
    assert "--reassignment-json-file" in complete(kctl_bin, "kctl reassign --reassignment")
    assert complete(kctl_bin, "kctl configs --entity-d") == ["--entity-default"]
    assert set(complete(kctl_bin, "kctl topics -b h:1 al")) == {"alter", "alter-config"}
    assert complete(kctl_bin, "kctl topics add") == ["add-partitions"]


def test_produce_and_consume_complete(kctl_bin):
    assert complete(kctl_bin, "kctl prod") == ["produce"]
    assert complete(kctl_bin, "kctl cons") == ["consume"]
    assert "--isolation-level" in complete(kctl_bin, "kctl consume t --iso")
    assert set(complete(kctl_bin, "kctl produce t --compression ")) >= {"gzip", "zstd"}
    assert "--command-config" in complete(kctl_bin, "kctl consume t --comm")
