"""Issue 22, defect 6: a directory in a log dir not named ``<topic>-<partition>`` is not a partition (Kafka's
LogManager.loadLogs refuses to start on it: UnifiedLog.parseTopicPartitionName throws). Given a log dir, dump-log,
verify, scan, recover and compact leave it unread and say so; named directly, it is read with a warning.

On copies of a real Kafka 2.x log dir (VolodymyrZee__kafka) in tmp_path, holding ``backup/``: an operator's copy of
``first_topic-0`` whose segment lost its last 10 bytes (a torn batch that recover would cut)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kcli.cli.app import app
from kcli.tools.inputs import collect_inputs

SEGMENT = "00000000000000000000.log"


def _log_dir_with_backup(fixtures_dir: Path, tmp_path: Path) -> Path:
    log_dir = Path(shutil.copytree(fixtures_dir / "VolodymyrZee__kafka", tmp_path / "logs"))
    for root, dirs, files in os.walk(log_dir):  # the shared fixtures are read-only
        for name in dirs + files:
            os.chmod(os.path.join(root, name), 0o755 if name in dirs else 0o644)
    backup = Path(shutil.copytree(log_dir / "first_topic-0", log_dir / "backup"))
    data = (backup / SEGMENT).read_bytes()
    (backup / SEGMENT).write_bytes(data[:-10])
    return log_dir


def _run(*args: str):
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    return result


COMMANDS = {
    "dump-log": ["dump-log"],
    "verify": ["verify"],
    "scan": ["scan", "--workers", "1"],
    "recover-dry-run": ["recover", "--dry-run"],
    "recover": ["recover"],
    "compact-dry-run": ["compact", "--dry-run", "-j", "1", "--config", "cleanup.policy=compact"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_log_dir_s_non_partition_directory_is_not_read(command, fixtures_dir, tmp_path):
    """Before, every tool walked into backup/ as if it were a partition: verify/scan/dump-log reported its torn
    tail as the log dir's damage, and recover cut (rewrote) it."""
    log_dir = _log_dir_with_backup(fixtures_dir, tmp_path)
    before = {p.name: p.read_bytes() for p in (log_dir / "backup").iterdir()}
    result = _run(*COMMANDS[command], str(log_dir))
    assert result.exit_code == 0, result.output
    assert f"{log_dir / 'backup'}: not read: not a partition directory" in result.output
    assert str(log_dir / "backup" / SEGMENT) not in result.output
    assert {p.name: p.read_bytes() for p in (log_dir / "backup").iterdir()} == before
    assert not list(tmp_path.glob("*.kctl-quarantine"))


@pytest.mark.parametrize("command", ["verify", "recover-dry-run"])
def test_named_directly_it_is_read_with_a_warning(command, fixtures_dir, tmp_path):
    log_dir = _log_dir_with_backup(fixtures_dir, tmp_path)
    result = _run(*COMMANDS[command], "--json", str(log_dir / "backup"))
    assert result.exit_code == 1, result.output  # its torn tail is found
    problems = json.loads(result.stdout)["problems"]
    assert {"file": str(log_dir / "backup"), "code": "not_a_partition_dir", "severity": "warning"}.items() <= \
        next(p for p in problems if p["code"] == "not_a_partition_dir").items()
    assert "Kafka would not load it" in result.output
    assert any(p["file"] == str(log_dir / "backup" / SEGMENT) and p["severity"] == "error" for p in problems)


def test_one_discovery_follows_kafka_s_naming(fixtures_dir, tmp_path):
    """Kafka's rules: <topic>-<partition>; marked dirs <topic>-<partition>.<id>-delete|-future|-stray (a
    malformed marked name is no partition); remote-log-index-cache skipped; files only inside a partition."""
    from kcli.tools.inputs import log_dir_partitions  # what offline groups and offsets list partitions with

    log_dir = _log_dir_with_backup(fixtures_dir, tmp_path)
    shutil.copytree(log_dir / "new_topic-0", log_dir / "new_topic-0.0123456789abcdef0123456789abcdef-delete")
    shutil.copytree(log_dir / "new_topic-0", log_dir / "new_topic-0-delete")  # no .<id>: Kafka throws
    (log_dir / "remote-log-index-cache").mkdir()
    (log_dir / "first_topic-1" / "sub").mkdir()
    shutil.copy(log_dir / "new_topic-0" / SEGMENT, log_dir / SEGMENT)  # a stray segment: the root stays a log dir
    inputs = collect_inputs([str(log_dir)])
    assert log_dir not in {p.path for p in inputs.partitions}
    found = {p.path.name: (p.topic, p.partition, p.marker) for p in inputs.partitions}
    assert found["new_topic-0.0123456789abcdef0123456789abcdef-delete"] == ("new_topic", 0, "-delete")
    assert found["first_topic-1"] == ("first_topic", 1, None)
    assert not {"backup", "new_topic-0-delete", "remote-log-index-cache", "sub"} & found.keys()
    assert sorted(Path(w.file).name for w in inputs.warnings) == ["backup", "new_topic-0-delete", "sub"]
    assert not any(f.path.parent.name in ("backup", "new_topic-0-delete") for f in inputs.files)
    served = log_dir_partitions(log_dir)
    assert ("new_topic", 0) in served and served[("new_topic", 0)].name == "new_topic-0"
    assert len(served) == 10 and ("backup", -1) not in served
