"""One exit-status table applied in one place, one report contract, messages unwrapped into pipes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from builders import build_partition
from kcli.cli.app import app
from kcli.errors import KcliError
from support import REPO


def test_one_exit_code_table():
    sources = {p.name: p.read_text() for p in (REPO / "kcli" / "cli").glob("*.py")}
    assert [name for name, text in sources.items() if "class ExitCode" in text] == ["errors.py"]
    group = typer.main.get_command(app)

    def leaves(cmd):
        subs = getattr(cmd, "commands", None)
        if subs:
            for sub in subs.values():
                yield from leaves(sub)
        else:
            yield cmd

    def guarded(fn) -> bool:
        while fn is not None:
            if getattr(fn, "kctl_guarded", False):
                return True
            fn = getattr(fn, "__wrapped__", None)
        return False

    names = [leaf.name for leaf in leaves(group)]
    assert len(names) > 15
    for leaf in leaves(group):
        assert guarded(leaf.callback), f"{leaf.name} is not run through guarded()"


def test_compact_failure_is_not_reported_as_compacted(tmp_path, monkeypatch):
    partition = build_partition(tmp_path / "logs" / "t-0", batches=20, transactions=False)

    def broken(plan, **kwargs):
        raise KcliError("disk full", path=str(partition))

    monkeypatch.setattr("kcli.tools.compact.apply_compaction", broken)
    result = CliRunner().invoke(app, ["compact", "-j", "1", "--config", "cleanup.policy=compact", str(partition)])
    assert result.exit_code == 1, result.output
    assert "compacted: 1 partition" not in result.stdout
    assert "compacted: 0 partitions; PROBLEMS FOUND (1)" in result.stdout
    doc = json.loads(CliRunner().invoke(app, ["compact", "-j", "1", "--config", "cleanup.policy=compact", "--json", str(partition)]).stdout)
    assert doc["ok"] is False and doc["problems"][0]["code"] == "not_applied" and doc["problems"][0]["file"]


@pytest.mark.parametrize("command", [["verify"], ["recover", "--dry-run"], ["scan", "--workers", "1"]])
def test_one_report_contract(command, tmp_path):
    partition = build_partition(tmp_path / "logs" / "t-0", batches=30, transactions=False)
    log = sorted(partition.glob("*.log"))[0]
    with open(log, "r+b") as f:  # damage the last batch
        f.seek(log.stat().st_size - 5)
        f.write(b"\xff\xff\xff\xff\xff")
    result = CliRunner().invoke(app, [*command, "--json", str(partition)])
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and result.exit_code == 1
    assert doc["problems"], doc
    for p in doc["problems"]:
        assert {"file", "position", "code", "reason"} <= p.keys()


def test_messages_into_a_pipe_are_not_wrapped(tmp_path):
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    deep.mkdir(parents=True)
    (deep / "notes.txt").write_text("x")
    proc = subprocess.run([sys.executable, "-m", "kcli", "verify", str(deep)], capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if k != "COLUMNS"}, timeout=120)
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(deep) in lines[0] and "no Kafka log data under" in lines[0]
