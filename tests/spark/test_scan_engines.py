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
                         "SELECT topic, partition, count(*) AS n, count(DISTINCT key_bytes) AS k, "
                         "sum(CAST(value_bytes IS NULL AS INT)) AS t "
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


# -- --sql: the same `records` view and the same answers in both engines --------------------------------------
CONTROL_TEXT = 'quote " backslash \\ newline \n tab \t bell \x07 unit-sep \x1f del \x7f é 😀'


def build_sql_partition(directory) -> None:
    """Keys and values of every kind the view must agree on: text, null, empty, not UTF-8 (invalid byte, overlong
    form, surrogate), tombstones; headers with text, binary (long: base64 past 76 characters), null and control
    characters; a committed transaction (its marker is no record)."""
    from kcli.records import ControlRecordType, Header

    keys = [b"customer-4", None, b"\xff\xfe", b"\xc0\x80", b"\xed\xa0\x80", "clé-é".encode(), b"", b"customer-40",
            b"Customer-4"]
    values = [b"order for customer-4", None, b"\x00\xffbinary", CONTROL_TEXT.encode(), b"", b"CUSTOMER", b"customer"]
    headers = [(), (Header("trace", b"abc"),), (Header("bin", bytes(range(200, 256)) * 2), Header("null", None)),
               (Header("ctl", CONTROL_TEXT.encode()), Header("trace", b"abc"), Header("k\u00e9", b"\xc3"))]
    with PartitionLog(directory, config=LogConfig(segment_bytes=2**30)) as log:
        n = 0
        for b in range(8):
            batch = []
            for _ in range(3 + b % 3):
                ts = -1 if n == 5 else T0 + 1000 * (n % 7)
                batch.append(Record(0, ts, keys[n % len(keys)], values[(n * 5) % len(values)],
                                    headers[n % len(headers)]))
                n += 1
            log.append(batch, codec=Codec(b % 5))
        log.append([Record(0, T0 + 9000, b"customer-4", b"in a transaction")], producer_id=77, producer_epoch=0,
                   base_sequence=0, is_transactional=True)
        log.append_marker(ControlRecordType.COMMIT, producer_id=77, producer_epoch=0, timestamp=T0 + 9001)


PARITY_QUERIES = [
    "SELECT key, count(*) AS n FROM records GROUP BY key ORDER BY n DESC, key",
    "SELECT count(*) FROM records WHERE key = 'customer-4'",
    "SELECT topic, partition, count(*) FROM records WHERE key = 'customer-4' GROUP BY topic, partition "
    "ORDER BY topic, partition",
    "SELECT count(*) FROM records WHERE key IN ('clé-é', '', 'Customer-4')",
    "SELECT topic, partition, count(*) AS n, min(offset), max(offset), count(DISTINCT key_bytes) AS k, "
    "count(DISTINCT key) AS t FROM records GROUP BY topic, partition ORDER BY topic, partition",
    "SELECT topic, min(timestamp_ms), max(timestamp_ms), count(timestamp_ms), count(*) - count(timestamp_ms) "
    "FROM records GROUP BY topic ORDER BY topic",
    f"SELECT count(*) FROM records WHERE timestamp_ms >= {T0 + 2000} AND timestamp_ms < {T0 + 5000}",
    "SELECT count(*) FROM records WHERE value LIKE '%customer%'",
    "SELECT count(*) FROM records WHERE value LIKE '%Customer%' OR key LIKE 'CUSTOMER%'",  # LIKE is case-sensitive
    "SELECT topic, partition, offset, value FROM records WHERE value LIKE '%\"%' ORDER BY segment, offset",
    "SELECT count(*) FROM records WHERE key IS NULL",
    "SELECT count(*) FROM records WHERE key_bytes IS NULL",  # null keys only
    "SELECT hex(key_bytes), length(key_bytes), count(*) FROM records WHERE key IS NULL AND key_bytes IS NOT NULL "
    "GROUP BY key_bytes ORDER BY 1",  # not UTF-8: no text, the bytes are there
    "SELECT count(*) FROM records WHERE key_bytes = X'FFFE'",
    "SELECT topic, partition, count(*) FROM records WHERE value_bytes IS NULL GROUP BY topic, partition "
    "ORDER BY topic, partition",  # tombstones
    "SELECT count(*) FROM records WHERE value IS NULL AND value_bytes IS NOT NULL",
    "SELECT length(key), length(key_bytes), count(*) FROM records WHERE topic = 'mixed' GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT headers, count(*) FROM records GROUP BY headers ORDER BY headers",
    "SELECT offset, key, value, key_bytes, value_bytes, headers, timestamp_ms, timestampType, magic, codec, "
    "producer_id, sequence FROM records WHERE topic = 'mixed' ORDER BY offset",
    "SELECT count(*) FROM records WHERE is_transactional",
    "SELECT codec, count(*) FROM records GROUP BY codec ORDER BY codec",
]


def _normal(rows) -> list[tuple]:
    """Cells in one type per value: bytes for BINARY/BLOB, 0/1 for booleans."""
    def cell(v):
        if isinstance(v, (bytearray, memoryview)):
            return bytes(v)
        if isinstance(v, bool):
            return int(v)
        return v
    return [tuple(cell(v) for v in row) for row in rows]


@pytest.fixture(scope="module")
def sql_inputs(tmp_path_factory) -> list[str]:
    root = tmp_path_factory.mktemp("sql-inputs")
    build_sql_partition(root / "mixed-0")
    paths = [str(root), str(SAMPLES / "kafka-logs"), str(SAMPLES / "corrupt-logs")]
    if FIXTURES.is_dir():
        paths.append(str(FIXTURES / "VolodymyrZee__kafka"))
    return paths


def test_sql_view_and_answers_are_the_same_in_both_engines(spark, sql_inputs):
    """Every row and column of the view, then each query of PARITY_QUERIES, in both engines. The records are
    read once per engine (one SQLite database; Spark's view cached in one partition) to keep Spark's time small."""
    from kcli.spark.scan import register_records
    from kcli.tools.scan import SQL_COLUMN_NAMES, records_database, run_sql

    db, _problems = records_database(sql_inputs, workers=1)
    view, _raw = register_records(spark, sql_inputs)
    cached = view.coalesce(1).cache()
    cached.createOrReplaceTempView("records")
    try:
        every_row = "SELECT * FROM records ORDER BY segment, offset"
        columns, local = run_sql(db, every_row)
        remote = spark.sql(every_row)
        assert columns == remote.columns == list(SQL_COLUMN_NAMES)
        remote = [tuple(r) for r in remote.collect()]
        assert len(local) == len(remote) > 1000
        # TIMESTAMP and BOOLEAN in Spark; epoch milliseconds and 0/1 in SQLite
        ts, txn, ctl = (SQL_COLUMN_NAMES.index(name) for name in ("timestamp", "is_transactional", "is_control"))
        remote = [tuple(None if v is None else round(v.timestamp() * 1000) if i == ts else int(v) if i in (txn, ctl)
                        else v for i, v in enumerate(row)) for row in remote]
        assert _normal(remote) == _normal(local)

        answers = {}
        for sql in PARITY_QUERIES:
            _columns, want = run_sql(db, sql)
            got = [tuple(r) for r in spark.sql(sql).collect()]
            assert _normal(got) == _normal(want), sql
            answers[sql] = want
    finally:
        cached.unpersist()
        db.close()
    # ... and the answers are not vacuous
    assert answers[PARITY_QUERIES[1]][0][0] == sum(n for *_tp, n in answers[PARITY_QUERIES[2]]) > 32
    assert answers[PARITY_QUERIES[10]][0][0] > answers[PARITY_QUERIES[11]][0][0] > 0  # not UTF-8 keys count as NULL
    assert len(answers[PARITY_QUERIES[12]]) == 3


def test_sql_where_key_equals_text_in_both_engines(spark):
    """The issue's query, end to end through each engine's query function and the command: 16 records."""
    from kcli.spark.scan import query_spark
    from kcli.tools.scan import query

    damaged = [str(SAMPLES / "corrupt-logs/orders-0")]
    sql = "SELECT count(*) AS n FROM records WHERE key = 'customer-4'"
    local, remote = query(damaged, sql, workers=1), query_spark(spark, damaged, sql)
    assert local.rows == remote.rows == [(16,)]
    assert [p.to_json() for p in local.problems] == [p.to_json() for p in remote.problems] != []
    proc = CliRunner().invoke(app, ["scan", "--engine", "spark", "--json", "--sql", sql, str(SAMPLES / "kafka-logs/orders-1")])
    assert json.loads(proc.stdout)["rows"] == [[16]]


def test_segment_bins_deal_every_non_empty_segment_once_largest_first():
    from kcli.spark.scan import BINS_PER_CORE, segment_bins
    from kcli.tools.scan import SegmentFile

    sizes = [0, 900, 10, 500, 500, 0, 300, 200, 100, 50, 40, 30, 20]
    segs = [SegmentFile("/d", "t", 0, f"/d/{i:020d}.log", i, size) for i, size in enumerate(sizes)]
    bins = segment_bins(segs, 2)
    assert len(bins) == min(2 * BINS_PER_CORE, 11)
    dealt = sorted(i for b in bins for i, _seg in b)
    assert dealt == [i for i, size in enumerate(sizes) if size]  # each once, empty ones left to the driver
    assert all(seg is segs[i] for b in bins for i, seg in b)
    assert bins[0][0][0] == 1  # the largest segment opens the first bin
    assert segment_bins([segs[0], segs[5]], 2) == []
    one = segment_bins(segs, 1)
    loads = [sum(seg.size for _i, seg in b) for b in one]
    assert max(loads) == 900 and len(one) == BINS_PER_CORE
