"""Figures and messages that say what happened, on copies of real brokers' log dirs: recover counts the bytes
its quarantine stores, `kctl cat` on healthy partitions writes nothing to stderr, a refused reset never says
"verified", the lock refusal names the operation refused, and `recover --dry-run` runs beside a broker."""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kcli.cli.app import app
from support import writable_copy

INDEX_MAX, TIME_INDEX_MAX = 10 * 2**20, 10 * 2**20 - 4  # what a broker preallocates (segment.index.bytes)


@pytest.fixture
def zk_log_dir(fixtures_dir, tmp_path) -> Path:
    """A Kafka 2.x broker's log dir (first_topic-0..2, __consumer_offsets-N, meta.properties)."""
    return writable_copy(fixtures_dir / "VolodymyrZee__kafka", tmp_path / "kafka-logs")


def _run(*args: str):
    result = CliRunner().invoke(app, list(args), env={"KCTL_BOOTSTRAP_SERVER": None, "COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "internal error" not in result.output, result.output
    return result


def test_recover_reports_the_bytes_its_quarantine_stores(zk_log_dir):
    """Three active segments after a crash (indexes preallocated, as a broker leaves them): recover trims six
    indexes and said "62914548 bytes kept in quarantine" for what is a few bytes of entries."""
    entries = 0
    for partition in sorted(zk_log_dir.glob("first_topic-*")):
        for name, size in (("00000000000000000000.index", INDEX_MAX), ("00000000000000000000.timeindex", TIME_INDEX_MAX)):
            path = partition / name
            entries += len(path.read_bytes().rstrip(b"\0"))
            with open(path, "r+b") as f:
                f.truncate(size)
    targets = [str(p) for p in sorted(zk_log_dir.glob("first_topic-*"))]
    result = _run("recover", *targets)
    assert result.exit_code == 0, result.output
    kept = re.search(r"recovered: 6 actions in 3 partitions, (\d+) bytes kept in quarantine", result.stdout)
    assert kept, result.stdout
    assert int(kept[1]) == entries and "62914548" not in result.stdout
    # the quarantine holds what it says: manifests (small old contents inline) and no copy of the zeros
    stored = sum(a.get("stored_bytes", 0) for m in zk_log_dir.parent.glob("kafka-logs.kctl-quarantine/*/*/manifest.json")
                 for a in json.loads(m.read_text())["actions"])
    assert stored == entries


def test_recover_json_counts_stored_bytes(zk_log_dir):
    index = zk_log_dir / "first_topic-2" / "00000000000000000000.timeindex"
    entries = len(index.read_bytes().rstrip(b"\0"))
    with open(index, "r+b") as f:
        f.truncate(TIME_INDEX_MAX)
    doc = json.loads(_run("recover", "--json", str(index.parent)).stdout)
    assert doc["stored_bytes"] == entries and doc["partitions"][0]["stored_bytes"] == entries
    assert doc["partitions"][0]["actions"][0]["bytes"] == TIME_INDEX_MAX  # what was replaced, as before


@pytest.mark.parametrize("source", ["VolodymyrZee__kafka", "rjmfernandes__flink-on-prem/data"])
def test_cat_on_healthy_partitions_writes_nothing_to_stderr(fixtures_dir, tmp_path, source):
    """Was "<dir>/00000000000000000000.index is empty." and "The following indexed offsets are not found in the
    log." for partitions that verify finds clean."""
    log_dir = writable_copy(fixtures_dir / source, tmp_path / "kafka-logs")
    partitions = sorted(p for p in log_dir.iterdir() if p.is_dir())
    assert len(partitions) >= 10
    for partition in partitions:
        result = _run("cat", str(partition))
        assert result.exit_code == 0, (partition, result.output)
        assert result.stderr == "", (partition.name, result.stderr)
    whole = _run("cat", str(log_dir))  # the log dir itself: its checkpoints and meta.properties are left alone
    assert whole.exit_code == 0 and whole.stderr == "" and whole.stdout


def test_refused_reset_never_prints_verified(zk_log_dir, tmp_path):
    """Every group refused (a topic the log dir does not have): nothing was written or read back, yet the
    output ended with "verified: the target holds exactly the planned offsets"."""
    from kcli.records.consumer_offsets import partition_for_group

    held = {int(p.name.rsplit("-", 1)[1]) for p in zk_log_dir.glob("__consumer_offsets-*")}
    group = next(f"orders-app{i}" for i in range(1000) if partition_for_group(f"orders-app{i}", 50) in held)
    plan = tmp_path / "reset.csv"
    plan.write_text(f"{group},no_such_topic,0,3\n")
    result = _run("offsets", "import", str(plan), "--log-dir", str(zk_log_dir), "--execute",
                  "--backup", str(tmp_path / "backup.csv"))
    assert result.exit_code == 1, result.output
    assert "refuse-unknown-topic" in result.stdout and "verified" not in result.output.lower()
    assert "committed 0 groups" in result.stdout
    document = json.loads(_run("offsets", "import", str(plan), "--log-dir", str(zk_log_dir), "--execute", "--json",
                               "--backup", str(tmp_path / "backup2.csv")).stdout)
    assert document["ok"] is False and document["verified"] is False  # nothing was read back


@pytest.fixture
def broker_lock(zk_log_dir):
    """The log dir's .lock held as a running broker holds it (flock, as kctl broker; another open file)."""
    fd = os.open(zk_log_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        yield zk_log_dir / ".lock"
    finally:
        os.close(fd)


def test_lock_refusal_names_the_operation(zk_log_dir, broker_lock):
    """compact said "stop it before recovering"."""
    compact = _run("compact", "-j", "1", str(zk_log_dir))
    assert compact.exit_code == 1, compact.output
    assert f"{broker_lock}: compaction refused: another process" in compact.stderr, compact.stderr
    assert "recover" not in compact.stderr
    recover = _run("recover", str(zk_log_dir))
    assert recover.exit_code == 1, recover.output
    assert f"{broker_lock}: recovery refused: another process" in recover.stderr, recover.stderr


def test_recover_dry_run_beside_a_running_broker(zk_log_dir, broker_lock):
    """A dry run changes nothing: it was refused (exit 1) on a locked log dir."""
    before = sorted((p.relative_to(zk_log_dir), p.stat().st_size) for p in zk_log_dir.rglob("*"))
    result = _run("recover", "--dry-run", str(zk_log_dir))
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("nothing to do: 10 partitions")
    assert f"note: {broker_lock} is held by another process" in result.stderr
    doc = json.loads(_run("recover", "--dry-run", "--json", str(zk_log_dir)).stdout)
    assert doc["ok"] and doc["locked"] == [str(broker_lock)]
    assert sorted((p.relative_to(zk_log_dir), p.stat().st_size) for p in zk_log_dir.rglob("*")) == before


def test_offline_offsets_hash_over_the_topic_s_partition_count(zk_log_dir, tmp_path):
    """The log dir holds 6 of __consumer_offsets' 50 partitions (its checkpoints name all 50): groups hash over
    50, as the broker does. Before, they hashed over the 6 directories found, and a write whose group hashed
    past them ended in "internal error: KeyError"; a group whose partition is not here is refused by name, never
    answered "no offsets"."""
    from kcli.records.consumer_offsets import partition_for_group

    held = {int(p.name.rsplit("-", 1)[1]) for p in zk_log_dir.glob("__consumer_offsets-*")}
    assert len(held) == 6
    here = next(f"g{i}" for i in range(1000) if partition_for_group(f"g{i}", 50) in held)
    away = next(f"g{i}" for i in range(1000) if partition_for_group(f"g{i}", 50) not in held)
    plan = tmp_path / "plan.csv"
    plan.write_text(f"{here},first_topic,0,3\n")
    done = _run("offsets", "import", str(plan), "--log-dir", str(zk_log_dir), "--execute", "--json")
    assert done.exit_code == 0, done.output
    listed = _run("groups", "list", "--log-dir", str(zk_log_dir), "--json")
    assert here in listed.stdout
    plan.write_text(f"{away},first_topic,0,3\n")
    refused = _run("offsets", "import", str(plan), "--log-dir", str(zk_log_dir), "--execute")
    assert refused.exit_code == 1, refused.output
    assert f"__consumer_offsets-{partition_for_group(away, 50)} is not in this log dir" in refused.output
