"""The kafka-log Spark data source: rows equal `kctl dump-log --deep-iteration --json`, splits neither lose nor
repeat batches, pushdown prunes segments (counted through the trace file executors append to), isolation,
control records, corrupt input in both modes, globs. Spark jobs are slow: each test runs few of them."""

from __future__ import annotations

import base64
import functools
import os
import json
import shutil
import struct
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from builders import build_partition
from kcli.storage.index import TransactionIndex
from support import FIXTURES, REPO

SAMPLES = REPO / "sample-logs" / "kafka-logs"
CORRUPT = REPO / "sample-logs" / "corrupt-logs"
FIXTURE_LOG_DIRS = [FIXTURES / "VolodymyrZee__kafka", FIXTURES / "rjmfernandes__flink-on-prem" / "data"]
CONTRACT = [
    ("topic", "string"), ("partition", "int"), ("offset", "bigint"), ("timestamp", "timestamp"),
    ("timestampType", "int"), ("key", "binary"), ("value", "binary"),
    ("headers", "array<struct<key:string,value:binary>>"), ("magic", "int"), ("codec", "string"),
    ("producer_id", "bigint"), ("producer_epoch", "int"), ("sequence", "int"), ("is_transactional", "boolean"),
    ("is_control", "boolean"), ("segment", "string"), ("position", "bigint"),
]
TS_TYPES = {"NoTimestampType": -1, "CreateTime": 0, "LogAppendTime": 1}

pytestmark = pytest.mark.spark


# -- expected rows, from kctl dump-log's NDJSON -----------------------------------------------------


@functools.cache
def dump_rows(*paths: Path) -> list[dict]:
    """Every record of every .log under ``paths`` as `kctl dump-log --deep-iteration --json` reports it, in
    the data source's columns (bytes forced to base64 so nothing is lost to the auto rendering)."""
    proc = subprocess.run([sys.executable, "-m", "kcli", "dump-log", "--deep-iteration", "--json", "--key-encoding",
                           "base64", "--value-encoding", "base64", *map(str, paths)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode in (0, 1), proc.stderr
    rows, batch = [], None
    for line in proc.stdout.splitlines():
        item = json.loads(line)
        if not item.get("file", "").endswith(".log"):
            continue  # KRaft .checkpoint snapshots are not segments
        if item["type"] == "batch":
            batch = item
        elif item["type"] == "record":
            assert batch["file"] == item["file"]
            directory = Path(item["file"]).parent.name
            topic, _, partition = directory.rpartition("-")
            b64 = lambda s: None if s is None else base64.b64decode(s)  # noqa: E731
            rows.append({
                "topic": topic, "partition": int(partition), "offset": item["offset"],
                "timestamp": None if item["timestamp"] == -1 else item["timestamp"],
                "timestampType": TS_TYPES[item["timestamp_type"]], "key": b64(item["key"]), "value": b64(item["value"]),
                "headers": [(h["key"], b64(h["value"])) for h in item["headers"]], "magic": batch["magic"],
                "codec": batch["codec"], "producer_id": batch["producer_id"], "producer_epoch": batch["producer_epoch"],
                "sequence": item.get("sequence", -1), "is_transactional": batch["is_transactional"],
                "is_control": item["is_control"], "segment": item["file"], "position": batch["position"],
            })
    return rows


def as_dicts(df) -> list[dict]:
    """The rows of ``df`` (collected as Arrow: ~4x faster than Row objects) in dump_rows' value types."""
    out = []
    for d in df.toArrow().to_pylist():
        ts = d["timestamp"]  # timezone-aware (the session zone): exact milliseconds back
        d["timestamp"] = None if ts is None else int(ts.replace(microsecond=0).timestamp()) * 1000 + ts.microsecond // 1000
        if d["headers"] is not None:
            d["headers"] = [(h["key"], h["value"]) for h in d["headers"]]
        out.append(d)
    return out


def keyed(rows: list[dict]) -> dict:
    out = {(r["segment"], r["offset"], r["position"]): r for r in rows}
    assert len(out) == len(rows), "duplicate rows"
    return out


def reader(spark, trace: Path | None = None, **options):
    r = spark.read.format("kafka-log")
    if trace is not None:
        r = r.option("traceFile", str(trace))
    for name, value in options.items():
        r = r.option(name, str(value).lower() if isinstance(value, bool) else str(value))
    return r


def opened(trace: Path) -> Counter:
    """segment -> how many splits of it executors read."""
    if not trace.exists():
        return Counter()
    return Counter(line.split(" ")[1] for line in trace.read_text().splitlines())


@pytest.fixture(scope="module")
def session_utc(spark):
    return spark


# -- the contract ----------------------------------------------------------------------------------


def test_import_without_pyspark_and_schema_string():
    code = ("import sys; sys.modules['pyspark'] = None; sys.modules['pyarrow'] = None\n"
            "import kcli.spark, kcli.spark.plan, kcli.spark.read\n"
            "print(kcli.spark.SCHEMA)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ", ".join(f"{n} {t.replace('bigint', 'long')}" for n, t in CONTRACT)


def test_schema(session_utc):
    spark = session_utc
    df = reader(spark).load(str(SAMPLES / "orders-0"))
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == CONTRACT
    permissive = reader(spark, mode="PERMISSIVE").load(str(SAMPLES / "orders-0"))
    assert [(f.name, f.dataType.simpleString()) for f in permissive.schema.fields] == CONTRACT + [("_corrupt", "string")]


# -- parity with dump-log ------------------------------------------------------------------------------


def test_equals_dump_log_one_partition_per_segment(session_utc, tmp_path):
    """sample-logs (magic 0/1/2, every codec, headers, transactions) and, when present, the real Kafka log
    dirs of ../shared/kafka-fixtures, read in one job from a comma-separated path list."""
    spark = session_utc
    trace = tmp_path / "trace"
    dirs = [SAMPLES] + [d for d in FIXTURE_LOG_DIRS if d.is_dir()]
    got = as_dicts(reader(spark, trace, includeControl=True).load(",".join(map(str, dirs))))
    expected = dump_rows(*dirs)
    assert keyed(got) == keyed(expected)
    assert {r["magic"] for r in got} == {0, 1, 2}
    assert {r["codec"] for r in got} == {"none", "gzip", "snappy", "lz4", "zstd"}
    assert any(r["headers"] for r in got) and any(r["is_control"] for r in got)
    assert any(r["timestampType"] == -1 and r["timestamp"] is None for r in got)
    assert any(r["timestampType"] == 1 for r in got)  # LogAppendTime (legacy-v1 and the KRaft fixture)
    segments = [str(p) for d in dirs for p in d.rglob("*.log") if p.stat().st_size]
    assert opened(trace) == Counter(segments)  # one task per non-empty segment, each read once
    if len(dirs) > 1:
        assert len(expected) > 20000  # the fixtures were read, not skipped


# -- splitting -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_partition(tmp_path_factory):
    """One ~0.25 MiB segment (segment_bytes large enough never to roll), indexed every 4 KiB, all codecs."""
    directory = build_partition(tmp_path_factory.mktemp("big") / "big-0", batches=200, records_per_batch=4,
                                segment_bytes=64 * 1024 * 1024, value_size=300)
    assert len(list(directory.glob("*.log"))) == 1
    return directory


def test_split_segment_equals_unsplit_and_seeks(session_utc, big_partition, tmp_path):
    from pyspark.sql.functions import lit

    spark = session_utc
    path = str(big_partition)
    whole_trace, split_trace, seek_trace = tmp_path / "whole", tmp_path / "split", tmp_path / "seek"
    whole = reader(spark, whole_trace).load(path).withColumn("run", lit("whole"))
    split = reader(spark, split_trace, maxBytesPerPartition=40_000).load(path).withColumn("run", lit("split"))
    seek = (reader(spark, seek_trace, maxBytesPerPartition=40_000).load(path)
            .where("offset >= 500 and offset < 510").withColumn("run", lit("seek")))
    rows = as_dicts(whole.unionByName(split).unionByName(seek))  # one Spark job for all three
    by_run = {name: [dict((k, v) for k, v in r.items() if k != "run") for r in rows if r["run"] == name]
              for name in ("whole", "split", "seek")}
    assert keyed(by_run["split"]) == keyed(by_run["whole"])  # keyed() also fails on duplicates
    assert keyed(by_run["whole"]) == keyed([r for r in dump_rows(big_partition) if not r["is_control"]])
    (segment,) = opened(whole_trace)
    size = Path(segment).stat().st_size
    assert opened(whole_trace)[segment] == 1
    assert opened(split_trace)[segment] >= size // 40_000 - 1 > 3  # cut at index entries, >= 40 kB apart
    assert [r["offset"] for r in sorted(by_run["seek"], key=lambda r: r["offset"])] == list(range(500, 510))
    assert opened(seek_trace)[segment] == 1  # the other splits pruned
    starts = [int(line.split(" ")[2]) for line in seek_trace.read_text().splitlines()]
    assert starts[0] > 0  # the .index moved the start of the read


def test_planner_splits_lose_and_repeat_nothing(big_partition):
    """Without Spark: every split size over the same segment reads the same batches."""
    from kcli.spark.plan import Bounds, ReadOptions, expand_paths, plan
    from kcli.spark.read import SplitReader

    def read_all(max_bytes: int) -> tuple[list[tuple[int, int]], int]:
        opts = ReadOptions.parse({"path": str(big_partition), "maxBytesPerPartition": str(max_bytes)})
        bounds = Bounds.from_options(opts)
        splits = plan(expand_paths(opts.paths), bounds, opts.max_bytes_per_partition)
        rows = []
        for split in splits:
            for cols in SplitReader(split, opts, bounds).chunks():
                rows.extend(zip(cols["offset"], cols["position"], strict=True))
        return rows, len(splits)

    unsplit, n = read_all(1 << 30)
    assert n == 1
    for max_bytes in (1, 4096, 20_000, 123_457):
        rows, n = read_all(max_bytes)
        assert rows == unsplit and n > 1


def test_min_partitions_cuts_splits_for_the_cluster(big_partition, monkeypatch):
    """minPartitions (default: the session's parallelism) lowers the split size to bytes / minPartitions; the
    rows stay the same and the columnar chunks agree with their Arrow batches."""
    import pyarrow as pa

    import kcli.spark.plan as plan_module
    from kcli.spark.datasource import to_record_batch, with_parallelism
    from kcli.spark.plan import Bounds, ReadOptions, expand_paths, plan
    from kcli.spark.read import SplitReader

    monkeypatch.setattr(plan_module, "MIN_SPLIT_BYTES", 1)  # the segment is far below the real floor
    opts = ReadOptions.parse({"path": str(big_partition), "minPartitions": "5"})
    bounds = Bounds.from_options(opts)
    assert len(plan(expand_paths(opts.paths), bounds, opts.max_bytes_per_partition)) == 1
    splits = plan(expand_paths(opts.paths), bounds, opts.max_bytes_per_partition, opts.min_partitions)
    assert len(splits) >= 5
    schema = pa.schema([pa.field("offset", pa.int64()), pa.field("headers", pa.list_(pa.struct(
        [("key", pa.string()), ("value", pa.binary())]))), pa.field("segment", pa.string())])
    offsets = []
    for split in splits:
        for chunk in SplitReader(split, opts, bounds).chunks():
            got = to_record_batch(chunk, schema).to_pydict()
            got["headers"] = [[(h["key"], h["value"]) for h in hs] for hs in got["headers"]]
            assert got == {name: chunk[name] for name in schema.names}
            offsets.extend(chunk["offset"])
    whole = [o for split in plan(expand_paths(opts.paths), bounds, 1 << 30)
             for chunk in SplitReader(split, opts, bounds).chunks() for o in chunk["offset"]]
    assert offsets == whole and len(whole) > 500
    # the registered class carries the session's parallelism to the planner (pickled by value)
    assert with_parallelism(1).default_min_partitions is None
    assert with_parallelism(8).default_min_partitions == 8


# -- pushdown and pruning ----------------------------------------------------------------------------------


def test_pushdown_prunes_partitions_and_segments(session_utc, tmp_path):
    spark = session_utc
    traces = {name: tmp_path / name for name in ("offsets", "options", "time", "topics")}
    orders1 = SAMPLES / "orders-1"
    # Offsets 200..209 live in orders-1's second segment (base offset 183): the only one to open.
    by_filter = reader(spark, traces["offsets"]).load(str(SAMPLES)).where(
        "topic = 'orders' and partition = 1 and offset >= 200 and offset < 210")
    by_options = reader(spark, traces["options"], startingOffset=200, endingOffset=210).load(str(orders1))
    # The time index of segment 0 ends below this timestamp: pruned without being opened.
    second_segment_ts = min_timestamp(orders1 / "00000000000000000183.log")
    by_time = reader(spark, traces["time"]).load(str(orders1)).where(
        f"timestamp >= timestamp_millis({second_segment_ts})")  # folded to a literal before pushdown
    by_topics = reader(spark, traces["topics"]).load(str(SAMPLES)).where("topic in ('payments', 'legacy-v1')")
    traces["none"] = tmp_path / "none"
    by_none = reader(spark, traces["none"]).load(str(SAMPLES)).where("partition in (7, 8)")
    from pyspark.sql.functions import lit

    union = (by_filter.withColumn("q", lit("offsets")).unionByName(by_options.withColumn("q", lit("options")))
             .unionByName(by_time.withColumn("q", lit("time"))).unionByName(by_topics.withColumn("q", lit("topics")))
             .unionByName(by_none.withColumn("q", lit("none"))))
    rows = as_dicts(union)
    everything = dump_rows(SAMPLES)
    q = lambda name: sorted((r["topic"], r["partition"], r["offset"]) for r in rows if r["q"] == name)  # noqa: E731
    wanted_offsets = sorted(("orders", 1, o) for o in range(200, 210))
    assert q("offsets") == wanted_offsets and q("options") == wanted_offsets
    assert q("time") == sorted((r["topic"], r["partition"], r["offset"]) for r in everything
                               if r["topic"] == "orders" and r["partition"] == 1
                               and r["timestamp"] >= second_segment_ts and not r["is_control"])
    assert q("topics") == sorted((r["topic"], r["partition"], r["offset"]) for r in everything
                                 if r["topic"] in ("payments", "legacy-v1") and not r["is_control"])
    second = str(orders1 / "00000000000000000183.log")
    assert opened(traces["offsets"]) == Counter([second])
    assert opened(traces["options"]) == Counter([second])
    assert str(orders1 / "00000000000000000000.log") not in opened(traces["time"])
    assert {Path(s).parent.name for s in opened(traces["topics"])} == {"payments-0", "legacy-v1-0"}
    assert q("none") == [] and opened(traces["none"]) == Counter()


def min_timestamp(log: Path) -> int:
    from kcli.storage.segment import FileBatchReader

    return min(r.timestamp for b in FileBatchReader(log) for r in b.records())


# -- isolation and control records --------------------------------------------------------------------------


def test_read_committed_and_include_control(session_utc):
    from pyspark.sql.functions import lit

    spark = session_utc
    path = str(SAMPLES / "payments-0")
    frames = [reader(spark, **opts).load(path).withColumn("q", lit(name)) for name, opts in (
        ("default", {}), ("committed", {"isolation": "read_committed"}),
        ("committed+control", {"isolation": "read_committed", "includeControl": True}))]
    rows = as_dicts(frames[0].unionByName(frames[1]).unionByName(frames[2]))
    q = lambda name: sorted(r["offset"] for r in rows if r["q"] == name)  # noqa: E731
    everything = dump_rows(SAMPLES / "payments-0")
    # Independent of the reader: a record is aborted when its producer has an aborted transaction in a
    # .txnindex whose [first offset, ABORT marker offset] range holds it.
    aborted_txns = [t for p in (SAMPLES / "payments-0").glob("*.txnindex") for t in TransactionIndex(p).entries()]
    assert aborted_txns
    aborted = {r["offset"] for r in everything if r["is_transactional"] and not r["is_control"]
               and any(t.producer_id == r["producer_id"] and t.first_offset <= r["offset"] <= t.last_offset
                       for t in aborted_txns)}
    control = {r["offset"] for r in everything if r["is_control"]}
    data = {r["offset"] for r in everything if not r["is_control"]}
    assert aborted and control
    assert any(r["is_transactional"] and r["offset"] not in aborted for r in everything if not r["is_control"])
    assert q("default") == sorted(data)  # read_uncommitted: aborted records too, control records hidden
    assert q("committed") == sorted(data - aborted)
    assert q("committed+control") == sorted((data - aborted) | control)


# -- corrupt input -----------------------------------------------------------------------------------------


def flip_bit(path: Path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        byte = f.read(1)[0]
        f.seek(position)
        f.write(bytes([byte ^ 0x10]))


def test_corrupt_failfast_and_permissive(session_utc, tmp_path):
    from pyspark.sql.functions import lit

    spark = session_utc
    # The sample's damage: a CRC mismatch at byte 2170 of segment 0, a torn batch at byte 691 of segment 366.
    with pytest.raises(Exception) as failed:
        reader(spark).load(str(CORRUPT / "orders-0" / "00000000000000000000.log")).count()
    message = str(failed.value)
    assert "00000000000000000000.log, byte 2170" in message and "Record is corrupt" in message

    # Our own damage: a flipped bit inside a middle batch (framing intact: the read goes on after it) and,
    # in a second copy, a batch length overwritten with 3 (framing lost: the segment stops there).
    flipped, framing = tmp_path / "flipped" / "orders-0", tmp_path / "framing" / "orders-0"
    for copy in (flipped, framing):
        shutil.copytree(SAMPLES / "orders-0", copy)
    log = flipped / "00000000000000000000.log"
    batches = [(b["position"], b["size"], b["base_offset"], b["codec"]) for b in dump_batches(log)]
    plain = [b for b in batches if b[3] == "none"]  # uncompressed: with validate=false the flip only alters a value
    victim = plain[len(plain) // 2]
    flip_bit(log, victim[0] + victim[1] - 3)
    cut = batches[len(batches) // 3]
    with open(framing / "00000000000000000000.log", "r+b") as f:
        f.seek(cut[0] + 8)
        f.write(struct.pack(">i", 3))

    segment0 = "00000000000000000000.log"  # only segment 0 is damaged: read just that file of each copy
    frames = [reader(spark, mode="PERMISSIVE").load(str(CORRUPT)).withColumn("q", lit("sample")),
              reader(spark, mode="PERMISSIVE").load(str(flipped / segment0)).withColumn("q", lit("flipped")),
              reader(spark, mode="PERMISSIVE").load(str(framing / segment0)).withColumn("q", lit("framing")),
              reader(spark, mode="PERMISSIVE", validate=False).load(str(flipped / segment0))
              .withColumn("q", lit("unchecked")),
              # A pushed-down filter on a column that corrupt rows leave null drops them, as Spark itself would.
              reader(spark, mode="PERMISSIVE").load(str(CORRUPT)).where("partition = 0").withColumn("q", lit("sql"))]
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    rows = as_dicts(union)

    def corrupt(name):
        return sorted((Path(r["segment"]).name, r["position"], r["_corrupt"]) for r in rows
                      if r["q"] == name and r["_corrupt"] is not None)

    def good(name):
        return [r for r in rows if r["q"] == name and r["_corrupt"] is None]

    sample = corrupt("sample")
    assert [(s, p) for s, p, _ in sample] == [("00000000000000000000.log", 2170), ("00000000000000000366.log", 691)]
    assert "stored crc" in sample[0][2] and "truncated batch" in sample[1][2]
    for r in rows:
        if r["_corrupt"] is not None:  # only segment, position and _corrupt are set
            assert all(r[c] is None for c, _ in CONTRACT if c not in ("segment", "position"))
    expected_sample = [r for r in dump_rows(CORRUPT) if not r["is_control"] and r["position"] != 2170]
    assert keyed(drop_q(good("sample"))) == keyed(expected_sample)
    assert not corrupt("sql") and keyed(drop_q(good("sql"))) == keyed(expected_sample)

    offsets = lambda rs: sorted(r["offset"] for r in rs)  # noqa: E731
    all_offsets = offsets([r for r in dump_rows(SAMPLES / "orders-0" / segment0) if not r["is_control"]])
    assert [(s, p) for s, p, _ in corrupt("flipped")] == [("00000000000000000000.log", victim[0])]
    victim_offsets = {r["offset"] for r in good("unchecked") if r["position"] == victim[0]}
    assert victim_offsets and offsets(good("flipped")) == sorted(set(all_offsets) - victim_offsets)
    assert offsets(good("unchecked")) == all_offsets and not corrupt("unchecked")  # validate=false: no CRC check
    (framing_error,) = corrupt("framing")
    assert framing_error[:2] == ("00000000000000000000.log", cut[0]) and "minimum record overhead" in framing_error[2]
    assert offsets(good("framing")) == [o for o in all_offsets if o < cut[2]]  # the segment stops at the cut


def drop_q(rows):
    return [{k: v for k, v in r.items() if k not in ("q", "_corrupt")} for r in rows]


def dump_batches(log: Path) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "kcli", "dump-log", "--json", str(log)], capture_output=True,
                          text=True, timeout=60)
    return [item for item in map(json.loads, proc.stdout.splitlines()) if item["type"] == "batch"]


# -- paths --------------------------------------------------------------------------------------------------


def test_globs_and_path_lists(session_utc, tmp_path):
    from pyspark.sql.functions import lit

    spark = session_utc
    globbed = reader(spark).load(str(SAMPLES / "orders-*")).withColumn("q", lit("glob"))
    listed = reader(spark).load([str(SAMPLES / "legacy-v0-0"), str(SAMPLES / "legacy-v1-0" / "00000000000000000000.log")])
    rows = globbed.unionByName(listed.withColumn("q", lit("list"))).select("q", "topic", "partition").collect()
    assert Counter((r.q, r.topic, r.partition) for r in rows) == Counter(
        ("glob" if r["topic"] == "orders" else "list", r["topic"], r["partition"]) for r in dump_rows(SAMPLES)
        if r["topic"] in ("orders", "legacy-v0", "legacy-v1") and not r["is_control"])
    with pytest.raises(Exception, match="no file or directory matches"):
        reader(spark).load(str(tmp_path / "nothing-*")).count()


# -- without Spark jobs: the planner and reader pieces --------------------------------------------------------


def test_pushed_filters_become_bounds():
    pytest.importorskip("pyspark")
    from datetime import datetime, timezone

    from pyspark.sql.datasource import (EqualTo, GreaterThan, GreaterThanOrEqual, In, IsNotNull, LessThan,
                                        LessThanOrEqual, Not, StringStartsWith)

    from kcli.spark.datasource import KafkaLogReader
    from kcli.spark.plan import ReadOptions

    r = KafkaLogReader(ReadOptions.parse({"path": "x", "endingOffset": "100"}), None)
    filters = [EqualTo(("topic",), "orders"), GreaterThan(("offset",), 10), LessThan(("offset",), 500),
               In(("partition",), (0, 2)), Not(EqualTo(("offset",), 5)), StringStartsWith(("topic",), "ord"),
               GreaterThanOrEqual(("timestamp",), datetime(2023, 11, 14, 22, 13, 20, 5, tzinfo=timezone.utc)),
               LessThanOrEqual(("partition",), 1), IsNotNull(("key",)), EqualTo(("codec",), "lz4")]
    left = list(r.pushFilters(filters))
    assert left == [filters[i] for i in (4, 5, 8, 9)]  # handed back to Spark, by reference
    b = r.bounds
    assert b.topics == {"orders"} and b.sql
    assert (b.offset.lo, b.offset.hi) == (11, 99)  # endingOffset is exclusive, the filter narrows further
    assert b.partition.values == {0, 2} and b.partition.hi == 1 and b.partition.low == b.partition.high == 0
    assert b.timestamp.lo == 1_700_000_000_000_005
    assert not b.timestamp.contains(None) and not b.offset.contains(10) and b.offset.contains(11)


def test_read_committed_across_splits_and_segments(tmp_path):
    """An aborted transaction whose batches span split cuts and a segment roll, interleaved with a committed
    one of another producer and plain batches: every split plan hides exactly the aborted records."""
    from kcli.records import Record
    from kcli.records.control import ControlRecordType
    from kcli.spark.plan import Bounds, ReadOptions, expand_paths, plan
    from kcli.spark.read import SplitReader
    from kcli.storage.log import LogConfig, PartitionLog

    directory = tmp_path / "txn-0"
    aborted, committed = set(), set()
    with PartitionLog(directory, config=LogConfig(segment_bytes=30_000)) as log:
        seq = {1: 0, 2: 0}
        for i in range(300):
            value = os.urandom(200)
            pid = (1, 2, None)[i % 3]
            if pid is None:
                log.append([Record(0, 1_700_000_000_000 + i, b"k", value)])
                continue
            batch = log.append([Record(0, 1_700_000_000_000 + i, b"k", value)], producer_id=pid, producer_epoch=0,
                               base_sequence=seq[pid], is_transactional=True)
            seq[pid] += 1
            (aborted if pid == 1 else committed).add(batch.base_offset)
        log.append_marker(ControlRecordType.ABORT, producer_id=1, producer_epoch=0, timestamp=1_700_000_001_000)
        log.append_marker(ControlRecordType.COMMIT, producer_id=2, producer_epoch=0, timestamp=1_700_000_001_000)
    assert len(list(directory.glob("*.log"))) > 1

    def read(max_bytes: int, **options) -> list[int]:
        opts = ReadOptions.parse({"path": str(directory), "maxBytesPerPartition": str(max_bytes), **options})
        bounds = Bounds.from_options(opts)
        out = []
        for split in plan(expand_paths(opts.paths), bounds, opts.max_bytes_per_partition):
            for cols in SplitReader(split, opts, bounds).chunks():
                out.extend(cols["offset"])
        return out

    everything = read(1 << 30)
    assert set(everything) >= aborted | committed
    for max_bytes in (1 << 30, 5_000, 12_345):
        assert read(max_bytes, isolation="read_committed") == [o for o in everything if o not in aborted]
        assert read(max_bytes, isolation="read_committed", startingOffset=150) == [
            o for o in everything if o not in aborted and o >= 150]
