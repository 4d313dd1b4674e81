"""`kctl scan|compact --engine spark --master spark://...` against a real standalone Spark cluster on loopback (one
Master, two Workers with one core each, started from pyspark's bin/spark-class): the operator's path, each command
its own Spark driver, with the local engine's answers. The data source's read (scan) and the executors' rewrite
(compact) are the two paths that run on the workers; `verify --engine spark` ships the same kind of task as compact
(a pickled function over file groups, kcli imported on the executor) and is checked on the session's local engine
(tests/spark/test_verify_engine.py): each driver here costs three JVMs, about 50 CPU-seconds on the CI machine.

The cluster is module-scoped; the session's in-process local SparkSession is not used here (each kctl is a
separate driver process), so the "one SparkSession per test session" rule holds.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from builders import T0
from kcli.records import Record
from kcli.storage.log import LogConfig, PartitionLog
from kcli.tools.compact import compact as compact_local
from kcli.tools.scan import scan
from support import REPO

sys.path.insert(0, str(Path(__file__).resolve().parent))
from standalone_support import StandaloneCluster, kctl  # noqa: E402

pytestmark = pytest.mark.spark

SAMPLES = REPO / "sample-logs"
NOW = 1_800_000_000_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    pytest.importorskip("pyspark")
    if shutil.which("java") is None:
        pytest.skip("no java on PATH")
    with StandaloneCluster(tmp_path_factory.mktemp("spark-standalone"), workers=2, cores=1) as running:
        yield running


@pytest.fixture(scope="module")
def logs(tmp_path_factory) -> Path:
    """A log dir with several partitions (so both executors get tasks): the samples plus keyed, rewritten logs."""
    root = tmp_path_factory.mktemp("standalone-logs") / "logs"
    shutil.copytree(SAMPLES / "kafka-logs", root)
    for p in range(2):
        _keyed(root / f"keyed-{p}")
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return root


def _keyed(directory: Path) -> None:
    """Keys rewritten many times over several segments; no tombstones or transaction markers, whose cleaning
    stamps a delete horizon that depends on when the cleaner runs."""
    with PartitionLog(directory, config=LogConfig(segment_bytes=4000)) as log:
        for i in range(120):
            log.append([Record(0, T0 + i * 10 + j, b"k%d" % ((i * 7 + j) % 40), b"v%d-%d" % (i, j))
                        for j in range(4)])


def _spark(cluster: StandaloneCluster, command: str, *args: str) -> subprocess.CompletedProcess:
    return kctl(cluster.env, command, "--engine", "spark", "--master", cluster.master_url, *args)


def _json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.stdout.strip(), proc.stderr[-3000:]
    _quiet(proc)
    return json.loads(proc.stdout)


def _quiet(proc: subprocess.CompletedProcess) -> None:
    """Spark's start-up chatter stays off the operator's terminal (the JVM's own notice about incubator modules
    aside): each kctl here is a fresh driver process."""
    assert [line for line in proc.stderr.splitlines() if line.strip() and "incubator modules" not in line] == [], (
        proc.stderr[-3000:])


def _without(doc: dict, *keys: str) -> dict:
    return {k: v for k, v in doc.items() if k not in keys}


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_scan(cluster, logs):
    proc = _spark(cluster, "scan", "--json", "--now", str(NOW), str(logs))
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = _json(proc)
    assert got["engine"] == "spark" and got["parallelism"] == 2  # two workers, one core each
    expected = scan([str(logs)], workers=1, now_ms=NOW).to_json()
    volatile = ("engine", "seconds", "parallelism", "output")
    assert _without(got, *volatile) == _without(expected, *volatile)
    assert expected["records"] > 1000 and expected["control_records"] > 0
    # both workers ran tasks: each holds the application's executor directory
    assert len({p.parent.parent for p in (cluster.root / "work").glob("app-*/*/stderr")}) == 1
    assert len(list((cluster.root / "work").glob("app-*/*/stderr"))) == 2


def test_compact(cluster, tmp_path):
    local, remote = tmp_path / "local" / "logs", tmp_path / "spark" / "logs"
    for root in (local, remote):
        for p in range(2):
            _keyed(root / f"keyed-{p}")
    proc = _spark(cluster, "compact", "--include-active", "--verify", "--json", "--config", "cleanup.policy=compact",
                  str(remote))
    assert proc.returncode == 0, proc.stderr[-3000:]
    _quiet(proc)
    got = json.loads(proc.stdout.replace(str(remote), "<root>"))
    expected = json.loads(json.dumps(compact_local([str(local)], include_active=True, verify_after=True,
                                                    config_overrides={"cleanup.policy": "compact"}).to_json())
                          .replace(str(local), "<root>"))
    assert _without(got, "seconds", "paths") == _without(expected, "seconds", "paths")
    assert expected["records_dropped"] > 500 and expected["verified"]
    assert _tree(remote) == _tree(local)
