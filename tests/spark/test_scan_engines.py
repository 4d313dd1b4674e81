"""kctl scan: the Spark engine gives the local engine's report, number for number (session-scoped `spark`)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from builders import T0, build_partition
from kcli.cli.app import app
from kcli.records import Codec, Record
from kcli.storage.log import LogConfig, PartitionLog
from kcli.tools.scan import RECORD_COLUMNS, scan
from support import FIXTURES, REPO

pytestmark = pytest.mark.spark

SAMPLES = REPO / "sample-logs"
NOW = 1_800_000_000_000


def _comparable(doc: dict) -> dict:
    doc = dict(doc)
    for key in ("engine", "seconds", "parallelism", "output"):
        doc.pop(key)
    return doc


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> list[str]:
    """Samples (clean and damaged), real brokers' log dirs, and logs built to stress the definitions:
    late and future timestamps across segments, null keys and values, a transaction."""
    root = tmp_path_factory.mktemp("scan-inputs")
    build_partition(root / "built-0")
    with PartitionLog(root / "clock-0", config=LogConfig(segment_bytes=2**30)) as log:
        for s, stamps in enumerate([[T0, T0 + 500, T0 + 100], [T0 + 200, -1, T0 + 600, T0 + 550],
                                    [NOW + 1, T0 + 700, 946_684_799_999]]):
            if s:
                log.roll()
            log.append([Record(0, ts, None if i % 2 else b"k%d" % (ts % 3), None if ts % 3 == 0 else b"x" * (ts % 50))
                        for i, ts in enumerate(stamps)], codec=Codec.GZIP)
    paths = [str(SAMPLES / "kafka-logs"), str(SAMPLES / "corrupt-logs"), str(root)]
    if FIXTURES.is_dir():
        paths += [str(FIXTURES / "VolodymyrZee__kafka"), str(FIXTURES / "rjmfernandes__flink-on-prem")]
    return paths


def test_spark_scan_equals_local_scan(spark, inputs, tmp_path):
    from kcli.spark.scan import scan_spark

    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "records.parquet"
    remote = scan_spark(spark, inputs, now_ms=NOW, output=str(out))
    local = scan(inputs, workers=2, now_ms=NOW)
    assert _comparable(remote.to_json()) == _comparable(local.to_json())
    # ... and the comparison is not vacuous
    doc = local.to_json()
    assert doc["records"] > 2000 and doc["control_records"] > 0 and len(doc["problems"]) == 2
    clock = next(p for p in local.partitions if p.topic == "clock")
    assert (clock.out_of_order, clock.future, clock.before_2000, clock.no_timestamp) == (5, 1, 1, 1)
    assert clock.tombstones > 0 and clock.null_keys > 0
    # Spark's Parquet output: the records, control records excluded
    table = pq.read_table(out)
    assert set(table.column_names) == set(RECORD_COLUMNS)
    assert table.num_rows == doc["records"]


def test_spark_sql_and_the_cli(spark, inputs):
    from kcli.spark.scan import query_spark

    result = query_spark(spark, [str(SAMPLES / "kafka-logs")],
                         "SELECT topic, partition, count(*) AS n, count(DISTINCT key) AS k, sum(CAST(value IS NULL AS INT)) AS t "
                         "FROM records GROUP BY topic, partition ORDER BY topic, partition")
    local = scan([str(SAMPLES / "kafka-logs")], workers=1, now_ms=NOW)
    assert result.rows == [(p.topic, p.partition, p.records, p.distinct_keys, p.tombstones) for p in local.partitions]
    with pytest.raises(ValueError, match="--sql"):
        query_spark(spark, [str(SAMPLES / "kafka-logs/payments-0")], "SELECT nope FROM records")

    # the command itself, on the active session (a second SparkSession is never created)
    runner = CliRunner()
    proc = runner.invoke(app, ["scan", "--engine", "spark", "--json", "--now", str(NOW), str(SAMPLES / "kafka-logs")])
    assert proc.exit_code == 0, proc.output
    assert _comparable(json.loads(proc.stdout)) == _comparable(local.to_json())
    proc = runner.invoke(app, ["scan", "--engine", "spark", str(SAMPLES / "corrupt-logs")])
    assert proc.exit_code == 1
    proc = runner.invoke(app, ["scan", "--engine", "spark", "--workers", "2", str(SAMPLES / "kafka-logs")])
    assert proc.exit_code == 2
