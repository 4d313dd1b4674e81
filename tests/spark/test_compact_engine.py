"""`kctl compact --engine spark`: Spark computes the offset map verdicts, executors rewrite; the result is byte
for byte the local engine's, on kcli's samples, real Kafka `__consumer_offsets` and a transactional log."""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builders import T0, build_partition
from kcli.records import Record
from kcli.records.control import ControlRecordType
from kcli.storage.log import LogConfig, PartitionLog
from kcli.tools.compact import compact as compact_local
from kcli.tools.verify import verify
from support import FIXTURES, REPO

pytestmark = pytest.mark.spark
NOW = T0 + 10_000_000


def _build_mixed_log(directory: Path) -> None:
    """Keys rewritten many times, keyless records, tombstones, committed and aborted transactions, many segments."""
    rng = random.Random(5)
    pid = 9000
    with PartitionLog(directory, config=LogConfig(segment_bytes=2000)) as log:
        for i in range(400):
            records = [Record(0, T0 + i, rng.choice([None, *[f"key-{k}".encode() for k in range(25)],
                                                      b"a-key-longer-than-sixteen-bytes"]),
                              rng.choice([None, b"v", f"value-{i}".encode()])) for _ in range(rng.randint(1, 5))]
            if i % 9 == 0:
                pid += 1
                log.append(records, producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)
                log.append_marker(ControlRecordType.ABORT if i % 2 else ControlRecordType.COMMIT, producer_id=pid,
                                  producer_epoch=0, timestamp=T0 + i)
            else:
                log.append(records)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sources") / "logs"
    shutil.copytree(REPO / "sample-logs" / "kafka-logs", root)
    for name in ("__consumer_offsets-12", "__consumer_offsets-18"):
        fixture = FIXTURES / "VolodymyrZee__kafka" / name
        if fixture.is_dir():
            shutil.copytree(fixture, root / name.replace("__consumer_offsets", "__consumer_offsets_real"))
    _build_mixed_log(root / "mixed-0")
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _normalized(report, root: Path) -> dict:
    data = report.to_json()
    text = json.dumps({k: v for k, v in data.items() if k not in ("seconds", "paths")})
    return json.loads(text.replace(str(root), "<root>"))


def test_spark_engine_leaves_what_the_local_engine_leaves(spark, sources, tmp_path):
    from kcli.spark.compact import compact as compact_spark

    local, remote = tmp_path / "local", tmp_path / "spark"
    shutil.copytree(sources, local)
    shutil.copytree(sources, remote)
    dry_run = False  # dry runs share the planning code (tests/storage/test_cleaner.py), each Spark run costs ~30 s
    options = dict(dry_run=dry_run, include_active=True, now_ms=NOW,
                   config_overrides={"cleanup.policy": "compact", "delete.retention.ms": "0"})
    expected = compact_local([str(local)], verify_after=not dry_run, **options)
    got = compact_spark(spark, [str(remote)], verify_after=not dry_run, **options)

    assert _normalized(got, remote) == _normalized(expected, local)
    assert _tree(remote) == _tree(local)
    by_name = {Path(p.directory).name: p for p in got.partitions}
    # The comparison means something: records were dropped, transactions cleaned, legacy logs compacted.
    assert by_name["mixed-0"].total("records_dropped") > 100
    assert by_name["mixed-0"].total("aborted_dropped") > 0
    assert by_name["legacy-v1-0"].passes and not by_name["legacy-v1-0"].problems
    if not dry_run:
        assert got.is_ok() and got.verified
        assert by_name["mixed-0"].applied and by_name["mixed-0"].checkpoint is not None
        assert not [p for p in verify([str(remote / "mixed-0")]).problems if p.code != "offset_gap"]


def test_cli_engine_spark_and_usage_errors(spark, sources, tmp_path):
    """The command on the active session (a second SparkSession, a second driver JVM, is never started here: the
    standalone tests run `kctl compact --engine spark` as its own driver and check that its stderr stays quiet)."""
    from typer.testing import CliRunner

    from kcli.cli.app import app

    target = shutil.copytree(sources / "mixed-0", tmp_path / "logs" / "mixed-0")
    env = {**os.environ, "COLUMNS": "200"}
    usage = subprocess.run([sys.executable, "-m", "kcli", "compact", "--master", "local[1]", str(target)],
                           capture_output=True, text=True, env=env, timeout=120)
    assert usage.returncode == 2 and "--master needs --engine spark" in usage.stderr
    # --force reaches the Spark engine: a delete policy given with --config is compacted anyway.
    proc = CliRunner().invoke(app, ["compact", "--engine", "spark", "--include-active", "--verify", "--json",
                                    "--force", "--config", "cleanup.policy=delete", str(target)])
    assert proc.exit_code == 0, proc.output[-3000:]
    report = json.loads(proc.stdout)
    assert report["ok"] and report["verified"] and report["records_dropped"] > 100
    assert not (target.parent / "cleaner-offset-checkpoint").exists()  # not a log dir: no checkpoint there


def test_spark_engine_follows_the_local_engines_safety_rules(spark, tmp_path):
    """The rules both engines share (kcli.tools.compact.compaction_targets): a known delete policy (the log dir's
    KRaft metadata, or --config) is refused unless forced, and the cleaner-offset-checkpoint goes only into a
    log dir; the reports match the local engine's."""
    from kcli.records.cluster_metadata import encode_metadata_record
    from kcli.spark.compact import compact as compact_spark
    from kcli.storage.cleanup_policy import KnownPolicies

    def build(root: Path) -> tuple[Path, Path]:
        scratch, log_dir = root / "scratch", root / "logs"
        build_partition(scratch / "t-0", batches=60)
        build_partition(log_dir / "u-0", batches=60)
        (log_dir / "meta.properties").write_text("version=0\nbroker.id=0\n")  # a broker's log dir
        with PartitionLog(log_dir / "__cluster_metadata-0") as log:
            log.append([Record(0, T0, None, encode_metadata_record("CONFIG_RECORD", 0, {
                "resourceType": 2, "resourceName": "u", "name": "cleanup.policy", "value": "delete"}))])
        return scratch, log_dir

    scratch, log_dir = build(tmp_path / "spark")
    local_scratch, local_log_dir = build(tmp_path / "local")
    # t is compacted (as ZooKeeper would say); u's policy comes from the log dir's KRaft metadata
    options = dict(now_ms=NOW, config_overrides={"delete.retention.ms": "0"},
                   topic_policies=KnownPolicies("a test", {"t": "compact"}))
    untouched = _tree(log_dir)
    got = compact_spark(spark, [str(scratch / "t-0"), str(log_dir / "u-0")], **options)
    expected = compact_local([str(local_scratch / "t-0"), str(local_log_dir / "u-0")], **options)
    assert _normalized(got, tmp_path / "spark") == _normalized(expected, tmp_path / "local")
    t0, u0 = got.partitions
    assert t0.applied and t0.total("records_dropped") > 0 and not t0.issues
    assert t0.checkpoint is None and not (scratch / "cleaner-offset-checkpoint").exists()
    assert [i.code for i in u0.issues] == ["cleanup_policy_delete"] and "__cluster_metadata" in u0.issues[0].reason
    assert _tree(log_dir) == untouched

    forced = compact_spark(spark, [str(log_dir / "u-0")], force=True,
                            config_overrides={"cleanup.policy": "delete", "delete.retention.ms": "0"}, now_ms=NOW)
    assert forced.is_ok() and forced.partitions[0].applied  # forced: the policy given is not a refusal
    assert forced.partitions[0].checkpoint is not None and (log_dir / "cleaner-offset-checkpoint").is_file()
    again = compact_spark(spark, [str(log_dir / "u-0")], config_overrides={"cleanup.policy": "delete"}, now_ms=NOW)
    assert [i.code for i in again.partitions[0].issues] == ["cleanup_policy_delete"]
    assert "(--config)" in again.partitions[0].issues[0].reason
