"""kctl compact: log dirs, dry runs, --verify, configs, the .lock, exit codes, and SIGKILL between swap steps."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kctl_fork
from builders import T0, build_partition
from kcli.records import Record
from kcli.storage.cleanup_policy import KCTL_TOPIC_CONFIGS
from kcli.storage.log import LogConfig, PartitionLog
from kcli.storage.recovery import CRASH_AFTER_ENV
from kcli.storage.segment import FileBatchReader
from kcli.tools.compact import KeyState, compact, compare
from kcli.tools.recover import RecoveryRefusedError, recover
from kcli.tools.verify import verify

COMPACTED = {"cleanup.policy": "compact"}  # the synthetic topics here are compacted ones: say so


def kctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`kctl` as a process forked from one that imported kcli once (tests/kctl_fork.py)."""
    return kctl_fork.run(*args, env={"COLUMNS": "200", **(env or {})})


def kctl_fresh(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`kctl` started as an operator starts it: a fresh interpreter."""
    return subprocess.run([sys.executable, "-m", "kcli", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200", **(env or {})})


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def _data(partition: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for log in sorted(partition.glob("*.log")) for b in FileBatchReader(log)
            if not b.is_control for r in b.records()]


def _clean(path: Path) -> bool:
    return all(p.code == "offset_gap" for p in verify([str(path)]).problems)


@pytest.fixture
def log_dir(tmp_path) -> Path:
    root = tmp_path / "logs"
    build_partition(root / "t-0", batches=60)
    with PartitionLog(root / "t-1", config=LogConfig(segment_bytes=400)) as log:
        for i in range(30):
            log.append([Record(0, T0 + i, f"k{i % 4}".encode(), None if i % 7 == 3 else f"v{i}".encode())])
    (root / "meta.properties").write_text("version=0\nbroker.id=0\n")  # a broker's log dir
    # a kctl broker's log dir where topic t is compacted (what compaction needs to know before touching it)
    (root / KCTL_TOPIC_CONFIGS).write_text(json.dumps({"version": 1, "topics": {"t": {"cleanup.policy": "compact"}}}))
    return root


def test_dry_run_changes_nothing(log_dir):
    before = _tree(log_dir)
    report = compact([str(log_dir)], dry_run=True)
    assert report.is_ok() and len(report.partitions) == 2
    assert report.total("records_dropped") > 0 and report.total("bytes_after") < report.total("bytes_before")
    assert _tree(log_dir) == before
    proc = kctl_fresh("compact", "--dry-run", "--json", str(log_dir))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["dry_run"] is True
    assert _tree(log_dir) == before


def test_compact_verify_then_nothing_to_do(log_dir):
    proc = kctl("compact", "--verify", "--config", "delete.retention.ms=3600000", str(log_dir))
    assert proc.returncode == 0, proc.stderr
    assert "verified equivalent" in proc.stdout
    assert _clean(log_dir)
    assert (log_dir / "cleaner-offset-checkpoint").is_file()
    after = _tree(log_dir)
    proc = kctl("compact", "--verify", "--json", "--config", "delete.retention.ms=3600000", str(log_dir))
    assert proc.returncode == 0, proc.stderr
    assert [p["groups_changed"] for p in json.loads(proc.stdout)["partitions"]] == [0, 0]
    assert _tree(log_dir) == after


def test_include_active_and_max_memory(log_dir):
    report = compact([str(log_dir / "t-1")], include_active=True, max_memory=24 * 3, verify_after=True)
    assert report.is_ok(), report.to_json()
    assert len(report.partitions[0].passes) > 1
    keys = {}
    for offset, key, value in _data(log_dir / "t-1"):
        keys.setdefault(key, []).append((offset, value))
    assert all(len(v) == 1 for v in keys.values())  # one record per key left, tombstones included
    assert _clean(log_dir)


def test_usage_and_unreadable_exit_codes(log_dir, tmp_path):
    assert kctl_fresh("compact", "--config", "bogus.config=1", str(log_dir)).returncode == 2
    assert kctl_fresh("compact", "--config", "delete.retention.ms", str(log_dir)).returncode == 2
    assert kctl_fresh("compact", str(tmp_path / "missing")).returncode == 3


def test_refuses_a_locked_log_dir(log_dir):
    (log_dir / ".lock").write_bytes(b"")
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, time\n"
        f"fd = os.open({str(log_dir / '.lock')!r}, os.O_RDWR)\n"
        "fcntl.lockf(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(60)\n")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = _tree(log_dir)
        with pytest.raises(RecoveryRefusedError):
            compact([str(log_dir)])
        proc = kctl("compact", str(log_dir))
        assert proc.returncode == 1 and "lock" in proc.stderr
        assert _tree(log_dir) == before
        # a dry run changes nothing: it runs, and says the log dir is held (as recover --dry-run does)
        dry = kctl("compact", "--dry-run", "--json", str(log_dir))
        assert dry.returncode == 0, dry.stderr
        assert json.loads(dry.stdout)["locked"] == [str(log_dir / ".lock")]
        assert "is held by another process" in kctl("compact", "--dry-run", str(log_dir)).stderr
        assert _tree(log_dir) == before
    finally:
        holder.kill()
        holder.wait()


def test_compare_reports_mismatches():
    before = KeyState({b"a": (5, b"x", None), b"b": (6, None, None)}, {5: (b"a", b"x"), 6: (b"b", None)})
    assert compare(before, before, 0, 1000) == []
    lost = KeyState({}, {})
    found = compare(before, lost, 0, 1000)
    assert any("lost" in m for m in found) and any("delete horizon" in m for m in found)
    moved = KeyState({b"a": (7, b"x", None)}, {7: (b"a", b"x")})
    assert len(compare(before, moved, 0, 0)) == 2  # offset 7 never held it, and a's latest moved


@pytest.mark.parametrize("name", ["__consumer_offsets-12", "__consumer_offsets-18"])
def test_real_consumer_offsets_with_verify(tmp_path, name):
    from support import FIXTURES

    directory = shutil.copytree(FIXTURES / "VolodymyrZee__kafka" / name, tmp_path / name)
    for p in directory.iterdir():
        p.chmod(0o644)
    proc = kctl("compact", "--include-active", "--verify", str(directory))
    assert proc.returncode == 0, proc.stderr
    assert _clean(directory)


def test_killed_between_swap_steps_then_recovered(tmp_path):
    """SIGKILL `kctl compact` after each step of the write-and-swap in turn; `kctl recover` then leaves either the
    old or the new partition, never a mix, and verify is clean."""
    template = tmp_path / "template" / "t-0"
    with PartitionLog(template, config=LogConfig(segment_bytes=500)) as log:
        for i in range(40):
            log.append([Record(0, T0 + i, f"k{i % 5}".encode(), f"v{i}".encode())])
    old = _data(template)
    done = tmp_path / "done" / "t-0"
    shutil.copytree(template, done)
    assert compact([str(done)], config_overrides=COMPACTED).is_ok()
    new = _data(done)
    assert new != old
    crashes = 0
    for step in range(1, 100):  # each kctl its own process (forked: kctl_fork), killed for real
        partition = Path(shutil.copytree(template, tmp_path / f"{step}" / "logs" / "t-0"))
        proc = kctl("compact", "--config", "cleanup.policy=compact", str(partition), env={CRASH_AFTER_ENV: str(step)})
        if proc.returncode == 0:
            break
        assert proc.returncode == -9, proc.stderr
        crashes += 1
        report = recover([str(partition)], dry_run=False, quarantine=tmp_path / f"{step}" / "q")
        assert report.is_ok(), report.to_json()
        assert _data(partition) in (old, new), step
        assert _clean(partition), (step, verify([str(partition)]).problems)
    assert crashes >= 4


# -- where the checkpoint goes, and which topics are not for compacting ---------------------------------------

def test_cleaner_checkpoint_only_in_a_log_dir(tmp_path):
    scratch = tmp_path / "scratch"
    build_partition(scratch / "t-0", batches=60)
    report = compact([str(scratch / "t-0")], config_overrides={**COMPACTED, "delete.retention.ms": "0"})
    assert report.is_ok() and report.partitions[0].applied
    assert not (scratch / "cleaner-offset-checkpoint").exists() and report.partitions[0].checkpoint is None
    (scratch / "meta.properties").write_text("version=0\nbroker.id=0\n")
    build_partition(scratch / "u-0", batches=60)
    report = compact([str(scratch / "u-0")], config_overrides=COMPACTED)
    assert report.partitions[0].checkpoint is not None and (scratch / "cleaner-offset-checkpoint").is_file()


def test_delete_policy_from_config_is_refused_unless_forced(log_dir):
    before = _tree(log_dir)
    proc = kctl("compact", "--config", "cleanup.policy=delete", str(log_dir / "t-0"))
    assert proc.returncode == 1 and "cleanup.policy is delete" in proc.stderr and "--force" in proc.stderr
    assert "compacted: 0 partitions" in proc.stdout and _tree(log_dir) == before
    assert kctl("compact", "--config", "cleanup.policy=compact,delete", "--dry-run", str(log_dir / "t-0")).returncode == 0
    forced = kctl("compact", "--force", "--config", "cleanup.policy=delete", str(log_dir / "t-0"))
    assert forced.returncode == 0 and "compacted: 1 partition" in forced.stdout


def test_delete_policy_from_kraft_metadata_is_refused(log_dir):
    from kcli.records.cluster_metadata import encode_metadata_record

    def config(value):
        return Record(0, T0, None, encode_metadata_record("CONFIG_RECORD", 0, {
            "resourceType": 2, "resourceName": "t", "name": "cleanup.policy", "value": value}))

    with PartitionLog(log_dir / "__cluster_metadata-0") as log:
        log.append([config("compact")])
        log.append([config("delete")])
    report = compact([str(log_dir / "t-0"), str(log_dir / "t-1")], dry_run=True)
    assert [[i.code for i in p.issues] for p in report.partitions] == [["cleanup_policy_delete"]] * 2  # topic t
    assert "__cluster_metadata" in report.partitions[0].issues[0].reason
    assert compact([str(log_dir / "t-0")], dry_run=True, force=True).is_ok()


def test_policies_of_a_real_kraft_log_dir(fixtures_dir, tmp_path):
    """Confluent's monitoring topic is delete-only in the fixture's metadata; _schemas is compacted."""
    source = fixtures_dir / "rjmfernandes__flink-on-prem/data"
    log_dir = tmp_path / "data"
    shutil.copytree(source, log_dir)  # a scratch copy: compaction may rewrite it
    report = compact([str(log_dir / "_confluent-monitoring-0"), str(log_dir / "_schemas-0")], dry_run=True)
    by_name = {Path(p.directory).name: p for p in report.partitions}
    assert [i.code for i in by_name["_confluent-monitoring-0"].issues] == ["cleanup_policy_delete"]
    assert not by_name["_schemas-0"].issues


# -- issue 22: compact only what Kafka's cleaner would compact ----------------------------------------------------

@pytest.fixture
def kraft_copy(fixtures_dir, tmp_path) -> Path:
    """A writable copy of a real Kafka 3.6 (KRaft) log dir."""
    log_dir = shutil.copytree(fixtures_dir / "rjmfernandes__flink-on-prem/data", tmp_path / "data")
    for p in log_dir.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return log_dir


@pytest.mark.parametrize("flags", [[], ["--include-active"], ["--dry-run"], ["--include-active", "--dry-run"]],
                         ids=["default", "include-active", "dry-run", "include-active-dry-run"])
def test_real_kraft_log_dir_only_compacted_topics_are_touched(kraft_copy, flags):
    """The data loss of issue 22: __cluster_metadata-0 and loyalty_levels-0 (no cleanup.policy override: delete,
    Kafka's default) were rewritten with exit 0. Both are refused by name, with the override spelled out, and
    their bytes are unchanged; the topics the metadata calls compacted are compacted."""
    # a second metadata segment: the first one is then no longer active, and was compacted with default flags
    (kraft_copy / "__cluster_metadata-0" / "00000000000000017027.log").write_bytes(b"")
    untouched = {name: _tree(kraft_copy / name) for name in ("__cluster_metadata-0", "loyalty_levels-0",
                                                              "promotions-0", "_confluent-monitoring-0")}
    proc = kctl("compact", "--json", *flags, str(kraft_copy))
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    refused = {Path(p["partition"]).name: [i["code"] for i in p["problems"]] for p in report["partitions"]
               if p["problems"]}
    assert refused == {"__cluster_metadata-0": ["metadata_log"], "loyalty_levels-0": ["cleanup_policy_delete"],
                       "promotions-0": ["cleanup_policy_delete"], "_confluent-monitoring-0": ["cleanup_policy_delete"],
                       "_confluent-controlcenter-7-6-0-1-monitoring-trigger-event-rekey-0": ["cleanup_policy_delete"]}
    for name, tree in untouched.items():
        assert _tree(kraft_copy / name) == tree, name
    done = {Path(p["partition"]).name for p in report["partitions"] if not p["problems"]}
    assert {"connect-configs-0", "connect-offsets-14", "_schemas-0", "__consumer_offsets-28"} <= done
    text = kctl("compact", *flags, str(kraft_copy))
    assert text.returncode == 1
    line = next(x for x in text.stderr.splitlines() if "loyalty_levels-0" in x)
    assert "cleanup.policy is delete" in line and "--config cleanup.policy=compact" in line
    assert "__cluster_metadata-0" in text.stderr


def test_metadata_log_is_refused_whatever_the_flags(kraft_copy):
    metadata = kraft_copy / "__cluster_metadata-0"
    before = _tree(metadata)
    for flags in (["--force"], ["--config", "cleanup.policy=compact"], ["--force", "--include-active"]):
        proc = kctl("compact", *flags, str(metadata))
        assert proc.returncode == 1 and "[metadata_log]" in proc.stderr, (flags, proc.stderr)
    # a Raft log is known by its quorum-state, whatever its directory is called
    other = shutil.copytree(metadata, kraft_copy / "renamed-0")
    report = compact([str(other)], force=True, include_active=True)
    assert [i.code for i in report.partitions[0].issues] == ["metadata_log"]
    assert _tree(metadata) == before


def test_unknown_policy_is_refused_until_stated(fixtures_dir, tmp_path):
    """A ZooKeeper-mode log dir holds no topic configs: its topics are refused (the override named), Kafka's own
    compacted topics are compacted; --config cleanup.policy=compact states the policy."""
    log_dir = shutil.copytree(fixtures_dir / "VolodymyrZee__kafka", tmp_path / "kafka")
    for p in log_dir.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    before = _tree(log_dir / "first_topic-0")
    report = compact([str(log_dir / "first_topic-0"), str(log_dir / "__consumer_offsets-12")], include_active=True)
    first, offsets = report.partitions
    assert [i.code for i in first.issues] == ["cleanup_policy_unknown"] and not first.applied
    assert "-z" in first.issues[0].reason and "--config cleanup.policy=compact" in first.issues[0].reason
    assert offsets.applied and not offsets.issues
    assert _tree(log_dir / "first_topic-0") == before
    stated = compact([str(log_dir / "first_topic-0")], include_active=True, config_overrides=COMPACTED)
    assert stated.is_ok() and stated.partitions[0].applied


def test_kraft_cluster_default_and_removed_topics(log_dir):
    """KRaft metadata: a cluster-wide log.cleanup.policy=compact makes topics without an override compacted; a
    snapshot is read before the log records after it; damaged metadata makes every policy unknown."""
    from kcli.records.cluster_metadata import encode_metadata_record
    from kcli.storage.cleanup_policy import kraft_policies, resolve_policy

    (log_dir / KCTL_TOPIC_CONFIGS).unlink()

    def record(kind, **data):
        return Record(0, T0, None, encode_metadata_record(kind, 0, data))

    topic_id = "WO0oNwVNRcCPB4BrgUz-LA"  # Kafka prints topic ids in base64
    with PartitionLog(log_dir / "__cluster_metadata-0") as log:
        log.append([record("TOPIC_RECORD", name="t", topicId=topic_id)])
        log.append([record("CONFIG_RECORD", resourceType=4, resourceName="", name="log.cleanup.policy",
                           value="compact")])
    known = kraft_policies(log_dir)
    assert known.damage is None and resolve_policy("t", [known]).compacts
    assert resolve_policy("unheard-of", [known]).policy is None
    assert compact([str(log_dir / "t-0")], dry_run=True).is_ok()
    with PartitionLog(log_dir / "__cluster_metadata-0") as log:
        log.append([record("REMOVE_TOPIC_RECORD", topicId=topic_id)])
    assert resolve_policy("t", [kraft_policies(log_dir)]).policy is None
    segment = next((log_dir / "__cluster_metadata-0").glob("*.log"))
    data = bytearray(segment.read_bytes())
    data[-1] ^= 0xFF  # the last record's CRC no longer matches
    segment.write_bytes(bytes(data))
    damaged = kraft_policies(log_dir)
    assert damaged.damage and str(segment) in damaged.damage
    report = compact([str(log_dir / "t-0")], dry_run=True)
    assert [i.code for i in report.partitions[0].issues] == ["cleanup_policy_unknown"]
    assert "cannot be read completely" in report.partitions[0].issues[0].reason


def test_kctl_broker_dynamic_default_policy(log_dir):
    """A standalone kctl broker's dynamic log.cleanup.policy (kctl-broker-configs.json, as AlterConfigs on the
    BROKER resource writes it) is the default for topics without an override."""
    from kcli.storage.cleanup_policy import KCTL_BROKER_CONFIGS

    (log_dir / KCTL_TOPIC_CONFIGS).write_text(json.dumps({"version": 1, "topics": {}}))
    build_partition(log_dir / "u-0", batches=10)
    assert [i.code for i in compact([str(log_dir / "u-0")], dry_run=True).partitions[0].issues] == \
        ["cleanup_policy_delete"]
    (log_dir / KCTL_BROKER_CONFIGS).write_text(json.dumps({"version": 1, "brokers": {
        "<default>": {"log.cleanup.policy": "compact"}}}))
    assert compact([str(log_dir / "u-0")], dry_run=True).is_ok()
    (log_dir / KCTL_BROKER_CONFIGS).write_text(json.dumps({"version": 1, "brokers": {
        "<default>": {"log.cleanup.policy": "compact"}, "0": {"log.cleanup.policy": "delete"}}}))
    report = compact([str(log_dir / "u-0")], dry_run=True)
    assert [i.code for i in report.partitions[0].issues] == ["cleanup_policy_delete"]
    assert KCTL_BROKER_CONFIGS in report.partitions[0].issues[0].reason


def test_a_damaged_batch_stops_compaction_before_anything_is_rewritten(kraft_copy):
    """A CRC-corrupt batch in a compacted topic (connect-offsets: one key) was compacted away with exit 0 and the
    rewritten partition verified clean: the damage vanished. Planning now reads through the checked path and
    refuses the partition, naming the file, byte position and verify's code, and nothing changes."""
    partition = kraft_copy / "connect-offsets-14"
    segment = partition / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[40000] ^= 0xFF  # inside the records of the batch at byte 39860 (offset 214)
    segment.write_bytes(bytes(data))
    before = _tree(partition)
    for flags in ([], ["--dry-run"]):
        proc = kctl("compact", "--include-active", *flags, str(partition))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert f"{segment}:39860" in proc.stderr and "[crc_mismatch]" in proc.stderr and "kctl recover" in proc.stderr
    assert _tree(partition) == before
