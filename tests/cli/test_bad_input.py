"""Bad-input matrix: every offline command x every filesystem condition gives one line, the documented exit
status, and never a traceback (tests run as root, so unreadability is simulated in-process as well)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from builders import build_partition
from kcli.cli.app import app

_MIX = "mix_stderr" in CliRunner.__init__.__code__.co_varnames

COMMANDS = {
    "dump-log": ["dump-log"],
    "dump-log-json": ["dump-log", "--json", "--deep-iteration"],
    "verify": ["verify"],
    "scan": ["scan", "--workers", "1"],
    "recover-dry-run": ["recover", "--dry-run"],
    "recover": ["recover"],
    "compact-dry-run": ["compact", "--dry-run", "-j", "1", "--config", "cleanup.policy=compact"],
    "compact": ["compact", "-j", "1", "--config", "cleanup.policy=compact"],
    "topics": ["topics", "--records"],
    "for-time": ["offsets", "for-time", "0"],
}


def _healthy(root: Path) -> Path:
    """A log dir with one small partition."""
    log_dir = root / "logs"
    build_partition(log_dir / "t-0", batches=6, records_per_batch=2, transactions=False)
    (log_dir / "meta.properties").write_text("version=0\nbroker.id=0\n")
    return log_dir


def _setup(condition: str, root: Path) -> tuple[Path, set[int], str | None]:
    """(path to give, acceptable exit statuses, text stderr must hold)."""
    if condition == "unrelated_files":
        d = root / "junk"
        d.mkdir()
        (d / "notes.txt").write_text("hello")
        (d / "sub").mkdir()
        (d / "sub" / "x.csv").write_text("a,b")
        return d, {3}, "no Kafka log data under"
    if condition == "empty_dir":
        d = root / "empty"
        d.mkdir()
        return d, {3}, "no Kafka log data under"
    if condition == "missing":
        return root / "nope", {3}, "No such file or directory"
    if condition == "log_named_dir":
        d = root / "00000000000000000000.log"
        d.mkdir()
        return d, {3}, "no Kafka log data under"
    if condition == "log_named_dir_in_partition":
        log_dir = _healthy(root)
        (log_dir / "t-0" / "00000000000000099999.log").mkdir()
        return log_dir, {3}, "00000000000000099999.log"
    if condition == "dangling_symlink_segment":
        log_dir = _healthy(root)
        (log_dir / "t-0" / "00000000000000099999.log").symlink_to(root / "gone.log")
        return log_dir, {3}, "dangling symbolic link"
    if condition == "fifo_segment":
        log_dir = _healthy(root)
        os.mkfifo(log_dir / "t-0" / "00000000000000099999.log")
        return log_dir, {3}, "FIFO"
    if condition == "fifo_given":
        fifo = root / "00000000000000000000.log"
        os.mkfifo(fifo)
        return fifo, {3}, "FIFO"
    if condition == "lost_and_found":
        log_dir = _healthy(root)
        lost = log_dir / "lost+found"
        lost.mkdir()
        lost.chmod(0)
        return log_dir, {0}, None
    if condition == "unrelated_file_given":
        f = root / "notes.txt"
        f.write_text("x")
        return f, {3}, "no Kafka log data"
    raise AssertionError(condition)


REAL_CONDITIONS = ["unrelated_files", "empty_dir", "missing", "log_named_dir", "log_named_dir_in_partition",
                   "dangling_symlink_segment", "fifo_segment", "fifo_given", "lost_and_found", "unrelated_file_given"]


def _check(command: str, condition: str, returncode: int, stdout: str, stderr: str, statuses, expected) -> None:
    out = stdout + stderr
    assert "Traceback" not in out and "internal error" not in out, out
    assert returncode in statuses, f"{command} on {condition}: exit {returncode}\n{out}"
    if expected is not None:
        assert expected in out, out
    if returncode == 3:
        assert "clean" not in stdout.split() and "nothing to do" not in stdout, stdout


@pytest.mark.parametrize("condition", REAL_CONDITIONS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_real_filesystem_conditions(command, condition, tmp_path):
    """In-process (fast): real FIFOs, dangling symlinks, directories named *.log, unrelated data."""
    path, statuses, expected = _setup(condition, tmp_path)
    if command in ("topics", "for-time") and condition == "unrelated_file_given":
        expected = "not a directory"  # they take directories only
    result = _run([*COMMANDS[command], str(path)])
    _check(command, condition, result.exit_code, result.stdout, result.stderr, statuses, expected)


@pytest.mark.parametrize("condition", ["fifo_segment", "unrelated_files", "lost_and_found"])
@pytest.mark.parametrize("command", ["dump-log", "verify", "recover"])
def test_real_conditions_through_the_entry_point(command, condition, tmp_path):
    """Subprocess: ``python -m kcli`` as users run it (a FIFO would hang a reader that opened it)."""
    path, statuses, expected = _setup(condition, tmp_path)
    proc = subprocess.run([sys.executable, "-m", "kcli", *COMMANDS[command], str(path)], capture_output=True,
                          text=True, env={**os.environ, "COLUMNS": "80"}, timeout=120)
    _check(command, condition, proc.returncode, proc.stdout, proc.stderr, statuses, expected)


def _run(args: list[str]):
    result = CliRunner(mix_stderr=False).invoke(app, args) if _MIX else CliRunner().invoke(app, args)
    out = result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in out and "internal error" not in out, out
    return result


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_permission_denied_listing_a_partition(command, tmp_path, monkeypatch):
    log_dir = _healthy(tmp_path)
    build_partition(log_dir / "u-0", batches=3, transactions=False)
    denied = str(log_dir / "u-0")
    real = os.listdir

    def listdir(path="."):
        if str(path) == denied:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    monkeypatch.setattr(Path, "iterdir", _iterdir_denying(denied))
    result = _run([*COMMANDS[command], str(log_dir)])
    assert result.exit_code == 3, result.output
    assert denied in result.output


def _iterdir_denying(denied: str):
    real = Path.iterdir

    def iterdir(self):
        if str(self) == denied:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real(self)

    return iterdir


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_eio_while_reading(command, tmp_path, monkeypatch):
    log_dir = _healthy(tmp_path)

    def pread(fd, n, pos):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "preadv", pread)  # verify reads into one reused buffer
    result = _run([*COMMANDS[command], str(log_dir)])
    assert result.exit_code == 3, result.output
    assert "Input/output error" in result.output


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_segment_deleted_between_listing_and_reading(command, tmp_path, monkeypatch):
    """A live broker's retention deletes a segment after kctl listed it."""
    log_dir = _healthy(tmp_path)
    victim = sorted((log_dir / "t-0").glob("*.log"))[0]
    real_open = os.open

    def open_(path, flags, *args, **kwargs):
        if str(path) == str(victim) and victim.exists():
            victim.unlink()
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    result = _run([*COMMANDS[command], str(log_dir)])
    assert result.exit_code == 3, result.output
    assert str(victim) in result.output


@pytest.mark.parametrize("command", ["verify", "recover-dry-run", "compact-dry-run", "scan"])
def test_unreadable_file_is_code_unreadable_not_damage(command, tmp_path, monkeypatch):
    log_dir = _healthy(tmp_path)
    real_open = os.open

    def open_(path, flags, *args, **kwargs):
        if str(path).endswith(".log"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    args = [*COMMANDS[command], "--json", str(log_dir)]
    result = _run(args)
    assert result.exit_code == 3, result.output
    doc = json.loads(result.stdout.strip().splitlines()[-1])
    codes = {p["code"] for p in doc["problems"]}
    assert "unreadable" in codes and "corrupt_batch_size" not in codes, doc["problems"]
