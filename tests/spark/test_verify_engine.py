"""kctl verify --engine spark: the local engine's report, output and exit status (session-scoped `spark`)."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from kcli.cli.app import app
from kcli.tools.verify import verify
from support import FIXTURES, REPO

pytestmark = pytest.mark.spark

SAMPLES = REPO / "sample-logs"


def _comparable(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "seconds"}


def test_clean_inputs(spark):
    from kcli.spark.verify import verify_spark

    paths = [str(SAMPLES / "kafka-logs")]
    if FIXTURES.is_dir():
        paths += [str(FIXTURES / "VolodymyrZee__kafka"), str(FIXTURES / "rjmfernandes__flink-on-prem")]
    for deep in (False, True):
        local = verify(paths, deep=deep)
        remote = verify_spark(spark, paths, deep=deep)
        assert _comparable(remote.to_json()) == _comparable(local.to_json())
        assert local.records > 800 and local.segments > 20


def test_damaged_inputs(spark, tmp_path):
    """The sample damage (flipped bit, torn write) plus damage of our own: a cut index, a lost .log, an
    index entry pointing nowhere, a stray snapshot."""
    from kcli.spark.verify import verify_spark

    broken = tmp_path / "broken"
    shutil.copytree(SAMPLES / "kafka-logs", broken)
    orders = broken / "orders-0"
    index = orders / "00000000000000000000.index"
    index.write_bytes(index.read_bytes()[:-3])
    (orders / "00000000000000000183.log").unlink()
    raw = bytearray((broken / "orders-1" / "00000000000000000183.index").read_bytes())
    raw[4:8] = (10**6).to_bytes(4, "big")
    (broken / "orders-1" / "00000000000000000183.index").write_bytes(bytes(raw))
    (broken / "payments-0" / "00000000000000099999.snapshot").write_bytes(
        (broken / "payments-0").glob("*.snapshot").__next__().read_bytes())
    # a directory Kafka would not load as a partition: not read, with the local engine's warning
    shutil.copytree(broken / "orders-1", broken / "backup")
    paths = [str(SAMPLES / "corrupt-logs"), str(broken)]
    local = verify(paths)
    remote = verify_spark(spark, paths)
    assert _comparable(remote.to_json()) == _comparable(local.to_json())
    assert len(local.errors) >= 4 and len(local.warnings) >= 1
    assert any(p.code == "not_a_partition_dir" for p in remote.problems)
    assert _comparable(verify_spark(spark, paths, deep=True).to_json(strict=True)) == _comparable(
        verify(paths, deep=True).to_json(strict=True))

    # the command: same JSON and exit statuses as the local engine
    runner = CliRunner()
    for args, status in ((["--json", *paths], 1), (["--json", "--strict", str(SAMPLES / "kafka-logs")], 0),
                         ([str(tmp_path / "missing")], 3)):
        local_run = runner.invoke(app, ["verify", *args])
        spark_run = runner.invoke(app, ["verify", "--engine", "spark", *args])
        assert local_run.exit_code == spark_run.exit_code == status, spark_run.output
        if "--json" in args:
            assert _comparable(json.loads(spark_run.stdout)) == _comparable(json.loads(local_run.stdout))
