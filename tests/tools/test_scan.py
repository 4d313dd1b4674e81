"""kctl scan, local engine: numbers checked against independent counts (kctl dump-log's NDJSON, kafka-python),
timestamp anomalies on logs built to have them, damage, Parquet and SQL output, the CLI contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kctl_fork
from builders import T0
from kcli.cli.app import app
from kcli.records import Codec, Record
from kcli.storage.log import LogConfig, PartitionLog
from kcli.tools.scan import RECORD_COLUMNS, YEAR_2000_MS, query, scan
from kcli.tools.verify import verify
from support import FIXTURES, REPO, fixture_records

SAMPLES = REPO / "sample-logs"
NOW = 1_800_000_000_000


def kctl(*args: str) -> subprocess.CompletedProcess:
    """`kctl` as a process forked from one that imported kcli once (tests/kctl_fork.py)."""
    return kctl_fork.run(*args, env={"COLUMNS": "200"})


def expected_from_dump(path: Path) -> dict[str, dict]:
    """Per partition directory, the statistics recomputed from `kctl dump-log --deep-iteration --json`."""
    proc = kctl("dump-log", "--deep-iteration", "--json", str(path))
    assert proc.returncode == 0, proc.stderr
    out: dict[str, dict] = defaultdict(lambda: {"records": 0, "control_records": 0, "batches": 0, "bytes": 0,
                                                "codecs": {}, "keys": set(), "null_keys": 0, "tombstones": 0,
                                                "key_bytes": 0, "value_bytes": 0, "offsets": [], "stamps": [],
                                                "no_timestamp": 0, "sizes": []})
    batch = None
    for line in proc.stdout.splitlines():
        item = json.loads(line)
        if not item.get("file", "").endswith(".log"):
            continue
        e = out[str(Path(item["file"]).parent)]
        if item["type"] == "batch":
            batch = dict(item, data=0)
        elif item["type"] == "record":
            if item["is_control"]:
                e["control_records"] += 1
                continue
            if batch["data"] == 0:
                e["batches"] += 1
                e["bytes"] += batch["size"]
                c = e["codecs"].setdefault(batch["codec"], {"batches": 0, "records": 0, "bytes": 0})
                c["batches"] += 1
                c["bytes"] += batch["size"]
            batch["data"] += 1
            e["codecs"][batch["codec"]]["records"] += 1
            e["records"] += 1
            ks, vs = item["key_size"], item["value_size"]
            if ks < 0:
                e["null_keys"] += 1
            else:
                e["keys"].add(json.dumps(item["key"]))
                e["key_bytes"] += ks
            if vs < 0:
                e["tombstones"] += 1
            else:
                e["value_bytes"] += vs
            e["offsets"].append(item["offset"])
            if item["timestamp"] < 0:
                e["no_timestamp"] += 1
            else:
                e["stamps"].append(item["timestamp"])
            e["sizes"].append((-(max(ks, 0) + max(vs, 0)), item["offset"]))
    return out


def out_of_order(stamps: list[int]) -> int:
    n, high = 0, None
    for ts in stamps:
        if high is not None and ts < high:
            n += 1
        high = ts if high is None else max(high, ts)
    return n


def test_scan_matches_dump_log_on_samples():
    report = scan([str(SAMPLES / "kafka-logs")], workers=2, now_ms=NOW)
    assert report.is_ok() and report.problems == []
    expected = expected_from_dump(SAMPLES / "kafka-logs")
    got = {p.directory: p for p in report.partitions}
    assert set(got) == set(expected) and len(got) == 6
    for directory, e in expected.items():
        p = got[directory]
        assert (p.records, p.control_records, p.batches, p.bytes) == (e["records"], e["control_records"], e["batches"], e["bytes"])
        assert {k: v.to_json() for k, v in p.codecs.items()} == e["codecs"]
        assert (p.distinct_keys, p.null_keys, p.tombstones) == (len(e["keys"]), e["null_keys"], e["tombstones"])
        assert (p.key_bytes, p.value_bytes) == (e["key_bytes"], e["value_bytes"])
        assert (p.first_offset, p.last_offset) == (min(e["offsets"]), max(e["offsets"]))
        assert (p.min_timestamp, p.max_timestamp) == ((min(e["stamps"]), max(e["stamps"])) if e["stamps"] else (None, None))
        assert p.no_timestamp == e["no_timestamp"]
        assert p.out_of_order == out_of_order(e["stamps"])
        assert p.before_2000 == sum(ts < YEAR_2000_MS for ts in e["stamps"]) and p.future == 0
        assert [(-r.size, r.offset) for r in p.largest_records] == sorted(e["sizes"])[:5]
    totals = report.to_json()
    assert totals["records"] == 815 and totals["control_records"] == 6  # 2 orders x 373, the rest as generated
    assert got[str(SAMPLES / "kafka-logs/legacy-v0-0")].no_timestamp == 18  # magic 0: no timestamps at all
    assert set(got[str(SAMPLES / "kafka-logs/orders-0")].codecs) == {"none", "gzip", "snappy", "lz4", "zstd"}


@pytest.mark.skipif(not FIXTURES.is_dir(), reason="../shared/kafka-fixtures not present")
@pytest.mark.parametrize("source", ["VolodymyrZee__kafka", "rjmfernandes__flink-on-prem"])
def test_scan_matches_kafka_python_on_real_broker_logs(source):
    """Real brokers' log dirs, counted again by kafka-python's reader (an independent implementation)."""
    root = FIXTURES / source
    report = scan([str(root)], workers=2, now_ms=NOW)
    assert report.is_ok(), report.problems[:3]
    assert len(report.partitions) >= 8
    for p in report.partitions:
        data, control = [], 0
        for seg in sorted(Path(p.directory).glob("*.log")):
            for is_control, offset, key, value in fixture_records(seg):
                if is_control:
                    control += 1
                else:
                    data.append((offset, key, value))
        assert p.records == len(data), p.directory
        assert p.control_records == control
        assert p.distinct_keys == len({k for _o, k, _v in data if k is not None})
        assert p.null_keys == sum(k is None for _o, k, _v in data)
        assert p.tombstones == sum(v is None for _o, _k, v in data)
        assert p.value_bytes == sum(len(v) for _o, _k, v in data if v is not None)
        if data:
            assert (p.first_offset, p.last_offset) == (min(o for o, _k, _v in data), max(o for o, _k, _v in data))
    by_name = {f"{p.topic}-{p.partition}": p for p in report.partitions}
    if source == "rjmfernandes__flink-on-prem":
        assert "lz4" in by_name["__cluster_metadata-0"].codecs or by_name["__cluster_metadata-0"].records > 0


def test_worker_count_does_not_change_the_numbers():
    one = scan([str(SAMPLES / "kafka-logs"), str(SAMPLES / "corrupt-logs")], workers=1, now_ms=NOW).to_json()
    two = scan([str(SAMPLES / "kafka-logs"), str(SAMPLES / "corrupt-logs")], workers=2, now_ms=NOW).to_json()
    for r in (one, two):
        del r["seconds"], r["parallelism"]
    assert one == two


def _write(directory: Path, stamps_by_segment: list[list[int]], *, keys=None) -> Path:
    """One segment per list (rolled explicitly), records of 1000 per batch with the given timestamps."""
    with PartitionLog(directory, config=LogConfig(segment_bytes=2**30)) as log:
        for s, stamps in enumerate(stamps_by_segment):
            if s:
                log.roll()
            for start in range(0, len(stamps), 1000):
                chunk = stamps[start:start + 1000]
                log.append([Record(0, ts, None if keys is None else keys(start + i), b"v" if ts % 7 else None)
                            for i, ts in enumerate(chunk)], codec=Codec.NONE)
    return directory


def test_timestamp_anomalies_across_segments(tmp_path):
    # Segment 1 peaks at T0+500; segment 2 starts below it (2 late records), segment 3 holds a record from the
    # future, one from 1999, one without a timestamp... and everything after the future record is late.
    d = _write(tmp_path / "clock-0", [[T0, T0 + 500, T0 + 100], [T0 + 200, T0 + 400, T0 + 600, T0 + 550],
                                       [NOW + 1, T0 + 700, 946_684_799_999, -1]])
    assert len(list(d.glob("*.log"))) == 3
    (p,) = scan([str(d)], workers=2, now_ms=NOW).partitions
    assert p.records == 11 and p.no_timestamp == 1
    # late: T0+100 (seg 1), T0+200, T0+400, T0+550 (seg 2), T0+700 and the 1999 one (after the future record)
    assert (p.out_of_order, p.future, p.before_2000) == (6, 1, 1)
    assert (p.min_timestamp, p.max_timestamp) == (946_684_799_999, NOW + 1)


def test_out_of_order_beyond_the_kept_candidates(tmp_path):
    """70,000 distinct rising timestamps, all below the previous segment's maximum: more than the merge keeps
    per segment, so the merge re-reads the segment with the known maximum."""
    late = [T0 + i for i in range(70_000)]
    d = _write(tmp_path / "late-0", [[T0 + 10**9], late, [T0 + 2 * 10**9, T0 + 10]])
    (p,) = scan([str(d)], workers=2, now_ms=NOW).partitions
    assert p.records == 70_003
    assert p.out_of_order == 70_000 + 1


def test_corrupt_input_is_reported_with_file_and_position():
    report = scan([str(SAMPLES / "corrupt-logs")], workers=2, now_ms=NOW)
    assert not report.is_ok()
    found = {(p.file, p.position, p.code) for p in report.problems}
    checked = verify([str(SAMPLES / "corrupt-logs")])
    # verify finds the same damaged batch and the same torn tail, at the same byte positions
    assert found <= {(p.file, p.position, p.code) for p in checked.problems}
    assert {code for _f, _p, code in found} == {"crc_mismatch", "truncated_batch"}
    # independent count: the records of the batches kctl dump-log shows as valid (the torn tail is no batch)
    proc = kctl("dump-log", "--json", str(SAMPLES / "corrupt-logs/orders-0"))
    batches = [json.loads(line) for line in proc.stdout.splitlines() if '"type":"batch"' in line]
    (p,) = report.partitions
    assert p.records == sum(b["count"] for b in batches if b["is_valid"]) == 367
    assert p.last_offset == max(b["last_offset"] for b in batches if b["is_valid"])


def test_parquet_output_is_readable(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    out = tmp_path / "parquet"
    report = scan([str(SAMPLES / "kafka-logs/payments-0"), str(SAMPLES / "kafka-logs/legacy-v1-0")], workers=2,
                  now_ms=NOW, output=str(out))
    table = pq.read_table(out)
    assert table.column_names == list(RECORD_COLUMNS)
    assert table.num_rows == report.to_json()["records"] == 21 + 18
    assert not any(table.column("is_control").to_pylist())
    rows = [r for r in table.to_pylist() if r["topic"] == "payments"]
    assert sorted(r["offset"] for r in rows) == sorted(
        o for c, o, _k, _v in fixture_records(SAMPLES / "kafka-logs/payments-0/00000000000000000000.log") if not c)
    assert rows[0]["key"] == b"acct-0" and rows[0]["timestamp"].year == 2023


def test_sql_with_the_local_engine():
    result = query([str(SAMPLES / "kafka-logs")],
                   "SELECT topic, partition, count(*), sum(value_bytes IS NULL), count(DISTINCT key_bytes) FROM records "
                   "GROUP BY topic, partition ORDER BY topic, partition", workers=2)
    report = scan([str(SAMPLES / "kafka-logs")], workers=2, now_ms=NOW)
    assert result.columns[:2] == ["topic", "partition"]
    assert [tuple(r) for r in result.rows] == [(p.topic, p.partition, p.records, p.tombstones, p.distinct_keys)
                                               for p in report.partitions]


def test_cli_json_and_exit_codes(tmp_path):
    proc = kctl("scan", "--json", "--now", "2027-01-15T00:00:00Z", "--top", "2", str(SAMPLES / "kafka-logs"))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {"ok", "engine", "paths", "reference_time", "top", "partition_count", "segments", "segment_bytes",
            "batches", "bytes", "records", "control_records", "partitions", "problems", "output", "parallelism",
            "seconds"} == set(doc)
    assert doc["ok"] is True and doc["engine"] == "local" and doc["reference_time"] == 1_799_971_200_000
    part = doc["partitions"][0]
    assert {"topic", "partition", "records", "codecs", "largest_records", "timestamp_anomalies", "distinct_keys",
            "tombstone_ratio", "first_offset", "last_offset", "min_timestamp", "max_timestamp"} <= set(part)
    assert all(len(p["largest_records"]) <= 2 for p in doc["partitions"])

    proc = kctl("scan", str(SAMPLES / "corrupt-logs"))
    assert proc.returncode == 1
    assert "corrupt-logs/orders-0/00000000000000000000.log:2170 (offset 16)" in proc.stderr
    assert "PROBLEMS FOUND" in proc.stdout

    # the remaining exit statuses in-process (the same command object, no interpreter start-up each time)
    runner = CliRunner()

    def status(*args: str) -> int:
        return runner.invoke(app, ["scan", *args]).exit_code

    assert status(str(tmp_path / "missing")) == 3
    assert status(str(tmp_path)) == 3  # no .log segment at all
    assert status("--sql", "SELEC 1", str(SAMPLES / "kafka-logs/payments-0")) == 2
    assert status("--master", "local[1]", str(SAMPLES / "kafka-logs")) == 2
    assert status("--top", "-1", str(SAMPLES / "kafka-logs")) == 2
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    assert status("--output", str(tmp_path / "busy"), str(SAMPLES / "kafka-logs/payments-0")) == 2

    proc = kctl("scan", "--sql", "SELECT codec, count(*) AS n FROM records GROUP BY codec ORDER BY codec", "--json",
                str(SAMPLES / "kafka-logs/orders-0"))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["rows"]
    assert [r[0] for r in rows] == ["gzip", "lz4", "none", "snappy", "zstd"] and sum(r[1] for r in rows) == 373


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"}, cwd=REPO)


def test_local_engines_never_import_pyspark():
    proc = _run_python(
        "import sys\n"
        "from kcli.cli.app import app\n"
        "for args in (['verify', '-q', 'sample-logs/kafka-logs'], ['scan', '--json', 'sample-logs/kafka-logs/payments-0']):\n"
        "    try:\n"
        "        app(args)\n"
        "    except SystemExit as exc:\n"
        "        assert exc.code == 0, (args, exc.code)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("command", ["verify", "scan"])
def test_engine_spark_without_pyspark_is_a_usage_error(command):
    """pyspark made unimportable (None in sys.modules: `import pyspark` raises ImportError, as when absent)."""
    proc = _run_python(
        "import sys\n"
        "sys.modules['pyspark'] = None\n"
        "from kcli.cli.app import main\n"
        f"sys.argv = ['kctl', {command!r}, '--engine', 'spark', 'sample-logs/kafka-logs']\n"
        "main()\n")
    assert proc.returncode == 2, proc.stderr
    assert "--engine spark needs pyspark" in proc.stderr and "Traceback" not in proc.stderr


# -- text output at 80 and 100 columns ------------------------------------------------------------------------
def _render(paths: list[str], columns: int | None) -> str:
    proc = CliRunner().invoke(app, ["scan", "--workers", "1", "--now", str(NOW), *paths],
                              env={"COLUMNS": None if columns is None else str(columns)})
    assert proc.exit_code == 0, proc.output
    return proc.stdout


def _names(paths: list[str]) -> list[str]:
    """What names the partitions: topic-partition, or the directory when two log dirs hold the same one."""
    partitions = scan(paths, workers=1, now_ms=NOW).partitions
    names = [f"{p.topic}-{p.partition}" for p in partitions]
    return [p.directory if names.count(n) > 1 or p.partition < 0 else n for n, p in zip(names, partitions)]


@pytest.fixture(scope="module")
def long_names(tmp_path_factory) -> Path:
    """A log dir whose topic names are longer than a terminal is wide (Kafka allows 249 characters)."""
    root = tmp_path_factory.mktemp("long-names")
    for name in ("orders-12", "a-topic-with-a-name-longer-than-the-terminal-" + "x" * 60 + "-7", "b" * 120 + "-0"):
        _write(root / name, [[T0, T0 + 1]], keys=lambda i: b"k%d" % i)
    return root


@pytest.mark.parametrize("columns", [80, 100])
def test_text_output_fits_the_width_and_never_shortens_a_partition(columns, long_names):
    sources = [[str(SAMPLES / "kafka-logs")], [str(long_names)]]
    if FIXTURES.is_dir():
        # two real brokers' log dirs: both hold __consumer_offsets-0, named by their directories then
        sources.append([str(FIXTURES / "VolodymyrZee__kafka"), str(FIXTURES / "rjmfernandes__flink-on-prem")])
    for paths in sources:
        out = _render(paths, columns)
        lines = out.splitlines()
        names = _names(paths)
        assert "…" not in out and "..." not in out
        for name in names:
            assert name in lines, (name, out)  # whole, on a line of its own
        for line in lines:  # only a name longer than the terminal may be wider than it
            assert len(line) <= columns or line in names, line
        assert lines[-1].startswith("ok: ") or lines[-2].startswith("ok: ")
    out = _render([str(SAMPLES / "kafka-logs/orders-0")], columns)
    assert out.splitlines()[:5] == [
        "orders-0",
        "  records 373  batches 150  MiB 0.0  offsets 0..372  control 0",
        "  keys 23  tombstones 0.0%  late/future/<2000 0/0/0  largest 107",
        "  codecs gzip 18%, lz4 20%, none 23%, snappy 22%, zstd 17%",
        "  timestamps 2023-11-14T22:13:20Z..2023-11-14T22:23:17Z",
    ]


def test_text_output_is_one_row_per_partition_when_it_fits(long_names):
    """Into a pipe (no $COLUMNS) or on a wide terminal: the table, names whole however long."""
    for columns in (None, 400):
        out = _render([str(SAMPLES / "kafka-logs"), str(long_names)], columns)
        rows = [line for line in out.splitlines() if "│" in line]
        names = _names([str(SAMPLES / "kafka-logs"), str(long_names)])
        assert len(rows) == len(names) and "…" not in out
        for name, row in zip(names, rows):
            assert row.split("│")[0].strip() == name


# -- --sql: key and value as text, the bytes beside them --------------------------------------------------------
def test_sql_keys_and_values_are_text_with_the_bytes_beside_them(tmp_path):
    from kcli.records import Header
    from kcli.tools.scan import SQL_COLUMN_NAMES, headers_json

    proc = kctl("scan", "--json", "--sql", "SELECT partition, count(*) FROM records WHERE key = 'customer-4' "
                "GROUP BY partition ORDER BY partition", str(SAMPLES / "kafka-logs"))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == [[0, 16], [1, 16]]

    with PartitionLog(tmp_path / "mixed-0", config=LogConfig(segment_bytes=2**30)) as log:
        log.append([Record(0, T0, b"customer-4", b"Customer", (Header("trace", b"t\n1"), Header("bin", b"\xff"))),
                    Record(0, T0 + 1, b"\xff\xfe", b"\x00\xff", (Header("null", None),)),
                    Record(0, -1, None, None)], codec=Codec.NONE)
    result = query([str(tmp_path)], "SELECT * FROM records ORDER BY offset", workers=1)
    assert result.columns == list(SQL_COLUMN_NAMES)
    rows = [dict(zip(result.columns, row)) for row in result.rows]
    assert [(r["key"], r["key_bytes"], r["value"], r["value_bytes"]) for r in rows] == [
        ("customer-4", b"customer-4", "Customer", b"Customer"), (None, b"\xff\xfe", None, b"\x00\xff"),
        (None, None, None, None)]
    assert [r["headers"] for r in rows] == ['[{"key":"trace","value":"t\\n1"},{"key":"bin","value":{"base64":"/w=="}}]',
                                            '[{"key":"null","value":null}]', "[]"]
    assert json.loads(rows[0]["headers"]) == [{"key": "trace", "value": "t\n1"}, {"key": "bin", "value": {"base64": "/w=="}}]
    assert [(r["timestamp"], r["timestamp_ms"]) for r in rows] == [(T0, T0), (T0 + 1, T0 + 1), (None, None)]

    def count(where: str) -> int:
        return query([str(tmp_path)], f"SELECT count(*) FROM records WHERE {where}", workers=1).rows[0][0]

    assert count("key = 'customer-4'") == count("key_bytes = X'FFFE'") == count("key_bytes IS NULL") == 1
    assert count("key IS NULL") == 2 and count("value LIKE 'cust%'") == 0 and count("value LIKE 'Cust%'") == 1
    assert count("json_extract(headers, '$[0].value') = 't\n1'") == 1
    text = "".join(map(chr, range(0x80))) + "\u2028é😀"
    assert json.loads(headers_json([("k\"\\", text.encode())])) == [{"key": "k\"\\", "value": text}]
