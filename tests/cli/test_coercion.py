"""kcli/cli/coercion.py converts plain option values without pydantic: for every parameter of every kctl command,
its answer must be typer's own (the same value of the same type, or the same refusal), defaults included."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer

from kcli.cli.app import MOUNTS, app
from kcli.cli.coercion import _Shortcut, _shortcut, install
from support import REPO

SAMPLES = ("0", "7", "-1", "+3", "007", "1_000", " 5", "1.5", "1.", ".5", "-0.25", "1e3", "inf", "abc", "", "\u0663",
           "-", "~/x", "sample-logs", "sample-logs/kafka-logs", "no/such/path", "NONE", "gzip", "Zstd", "hex", "local",
           "bash", "Info", "12345678901234567890123456789012345")


def leaves(command, path=()):
    subs = getattr(command, "commands", None)
    if subs:
        for name in list(subs):
            yield from leaves(subs[name], (*path, name))
    yield path, command


def all_params():
    root = typer.main.get_command(app)
    for path, command in leaves(root):
        for param in command.params:
            if getattr(param, "type_descriptor", None) is not None:
                yield pytest.param(command, param, id=" ".join(path) + ":" + param.name)


def outcome(convert):
    try:
        value = convert()
    except typer.BadParameter as exc:
        return ("refused", exc.format_message())
    except Exception as exc:  # noqa: BLE001 - compared, whatever it is
        return ("raised", type(exc).__name__, str(exc))
    return ("value", type(value), value if value == value else "nan")


def typer_answer(param, value, ctx):
    from typer._coercion import build_runtime_param

    return outcome(lambda: build_runtime_param(param.type_descriptor).coerce(value, param=param, ctx=ctx))


@pytest.mark.parametrize(("command", "param"), list(all_params()))
def test_the_shortcut_answers_as_typer(command, param, monkeypatch):
    monkeypatch.chdir(REPO)
    shortcut = _shortcut(param)
    assert isinstance(shortcut, _Shortcut)
    multi = param.multiple or param.nargs == -1
    values = [param.default] + ([(s,) for s in SAMPLES] + [SAMPLES[:3], ()] if multi else list(SAMPLES))
    with typer.Context(command, info_name=command.name) as ctx:
        for value in values:
            fresh = _shortcut(param)  # a refusal replaces the parameter's converter: each value from the start
            param._runtime_param = fresh
            ours = outcome(lambda: fresh.coerce(value, param=param, ctx=ctx))
            assert ours == typer_answer(param, value, ctx), f"{param.name} = {value!r}"
    param._runtime_param = None


def test_plain_values_take_the_shortcut(tmp_path):
    """The shortcut answers the common cases itself (pydantic stays unimported: see test_startup.py)."""
    root = typer.main.get_command(app)
    dump = root.commands["dump-log"]
    by_name = {p.name: p for p in dump.params}
    with typer.Context(dump, info_name="dump-log") as ctx:
        for name, value, expected in (("max_message_size", "12", 12), ("max_message_size", 5 * 1024 * 1024, 5242880),
                                      ("poll_interval", "0.5", 0.5), ("poll_interval", 0.3, 0.3),
                                      ("files", ("a", "b"), ["a", "b"])):
            param = by_name[name]
            shortcut = _shortcut(param)
            assert shortcut.leaf(value, ctx, param) is not None or name == "files"
            assert shortcut.coerce(value, param=param, ctx=ctx) == expected
        param = by_name["key_encoding"]
        choice = _shortcut(param).coerce("HEX", param=param, ctx=ctx)
        assert choice.value == "hex"


def test_install_is_idempotent():
    from typer.core import _TyperParameter

    install()
    first = _TyperParameter.get_runtime_param
    install()
    assert _TyperParameter.get_runtime_param is first and first.kcli_shortcut


def test_a_refused_value_gets_typers_message_in_the_process():
    proc = subprocess.run([sys.executable, "-m", "kcli", "dump-log", "--max-bytes", "-5", "sample-logs/kafka-logs"],
                          capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 2
    assert "Invalid value for '--max-bytes': Input should be greater than or equal to 0" in proc.stderr, proc.stderr
