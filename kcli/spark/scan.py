"""``kctl scan --engine spark``: the local engine's ScanReport, computed with DataFrame aggregations.

The rows come from the ``kafka-log`` data source (includeControl=true, mode=PERMISSIVE), read once and
persisted; every statistic is then one aggregation over them, following the definitions in
``kcli.tools.scan`` to the letter:

* per partition directory (the ``segment`` column's directory): counts, sums, min/max and the exact
  ``countDistinct(key)`` in one ``groupBy``;
* ``out_of_order``: ``max(ts)`` over the earlier rows of the directory in log order (segment, position,
  offset) - a window - compared with each row's timestamp;
* ``largest_records``: ``row_number()`` over (size desc, offset, segment, position);
* batches and bytes by codec: the distinct (segment, position) of data rows; a batch's on-disk size is read
  from its 12-byte header on the executors (``mapInArrow``), as the local engine takes it from the framing;
* damage: the data source's ``_corrupt`` rows name a segment and byte position; the driver re-reads that
  spot to report it as the local engine does (``describe_damage``).

The driver lists the segments (``list_segments``) and hands the data source that exact list, so both
engines read the same files; the driver and every executor must see the paths under the same names.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from kcli.spark.session import local_python
from kcli.tools.scan import (
    DEFAULT_TOP,
    YEAR_2000_MS,
    CodecStats,
    LargestRecord,
    SQL_COLUMN_NAMES,
    PartitionStats,
    QueryResult,
    ScanReport,
    describe_damage,
    list_segments,
    prepare_output,
)

FORMAT = "kafka-log"


def _read(spark, files: list[str], *, include_control: bool):
    reader = spark.read.format(FORMAT).option("mode", "PERMISSIVE")
    if include_control:
        reader = reader.option("includeControl", "true")
    return reader.load(files)


def _batch_sizes(batches: Any):
    """Append ``size``: the log overhead + the batch_length field read at (segment, position)."""
    import pyarrow as pa
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType(batches.schema.fields + [StructField("size", LongType(), False)])

    def read_sizes(chunks):
        import os

        from kcli.records.layout import LOG_OVERHEAD, entry_size

        fds: dict[str, int] = {}
        try:
            for chunk in chunks:
                sizes = []
                for segment, position in zip(chunk.column("segment").to_pylist(), chunk.column("position").to_pylist()):
                    fd = fds.get(segment)
                    if fd is None:
                        fd = fds[segment] = os.open(segment, os.O_RDONLY)
                    sizes.append(entry_size(os.pread(fd, LOG_OVERHEAD, position)))
                yield pa.RecordBatch.from_arrays(chunk.columns + [pa.array(sizes, pa.int64())], schema=chunk.schema.append(
                    pa.field("size", pa.int64(), False)))
        finally:
            for fd in fds.values():
                os.close(fd)

    return batches.mapInArrow(read_sizes, schema)


def scan_spark(spark, paths: list[str], *, top: int = DEFAULT_TOP, now_ms: int | None = None,
               output: str | None = None) -> ScanReport:
    """``kcli.tools.scan.scan`` on Spark: the same report (``engine`` "spark"), from ``spark``'s executors."""
    from pyspark import StorageLevel
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    started = time.perf_counter()
    if top < 0:
        raise ValueError("top must be >= 0")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    segments = list_segments(paths)
    if output is not None and "://" not in output:
        prepare_output(output)
    report = ScanReport(list(paths), "spark", now, top, parallelism=spark.sparkContext.defaultParallelism,
                        output=output)
    by_dir: dict[str, PartitionStats] = {}
    for seg in segments:
        stats = by_dir.get(seg.directory)
        if stats is None:
            stats = by_dir[seg.directory] = PartitionStats(seg.directory, seg.topic, seg.partition)
        stats.segments += 1
        stats.segment_bytes += seg.size
    report.partitions = sorted(by_dir.values(), key=lambda p: (p.topic, p.partition, p.directory))
    files = [s.path for s in segments if s.size > 0]
    if not files:
        report.seconds = time.perf_counter() - started
        return report

    with local_python(spark):
        raw = _read(spark, files, include_control=True)
        if output is not None:
            raw = raw.persist(StorageLevel.MEMORY_AND_DISK)
            # prepare_output allowed only a new or empty directory; Spark's writer wants it absent or replaced.
            mode = "overwrite" if "://" not in output and Path(output).is_dir() else "errorifexists"
            (raw.filter(F.col("_corrupt").isNull() & ~F.col("is_control")).drop("_corrupt")
             .write.mode(mode).parquet(output))
        ts = F.unix_millis("timestamp")
        rows = raw.select(
            F.regexp_extract("segment", r"^(.*)/[^/]*$", 1).alias("directory"), "segment", "position", "offset",
            ts.alias("ts"), "key", F.length("key").alias("ks"), F.length("value").alias("vs"), "codec",
            "is_control", "_corrupt",
        ).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            _fill(report, by_dir, rows, top, now, F, Window, [s.path for s in segments])
        finally:
            rows.unpersist()
            if output is not None:
                raw.unpersist()
    report.seconds = time.perf_counter() - started
    return report


def _fill(report: ScanReport, by_dir: dict[str, PartitionStats], rows, top: int, now: int, F, Window,
          listing: list[str]) -> None:
    """Two jobs over the persisted rows: one window + aggregation per directory, one for batch sizes."""
    corrupt = F.col("_corrupt").isNotNull()
    is_data = ~corrupt & ~F.col("is_control")
    ts = F.col("ts")
    stamped = is_data & ts.isNotNull() & (ts >= 0)

    def count_if(cond):
        return F.sum(F.when(cond, 1).otherwise(0))

    # Windows per directory, one shuffle: the largest timestamp of the earlier data records in log order
    # (other rows give null, which max ignores), and each data record's rank by size.
    log_order = Window.partitionBy("directory").orderBy("segment", "position", "offset")
    earlier = log_order.rowsBetween(Window.unboundedPreceding, -1)
    size = F.coalesce(F.col("ks"), F.lit(0)) + F.coalesce(F.col("vs"), F.lit(0))
    # Same partitioning as log_order (one shuffle); data rows (kind 0) rank first.
    ranking = Window.partitionBy("directory").orderBy("kind", F.desc("size"), "offset", "segment", "position")
    ranked = (rows.withColumn("kind", F.when(is_data, 0).when(corrupt, 2).otherwise(1))
              .withColumn("size", size)
              .withColumn("earlier_max", F.max(F.when(stamped, ts)).over(earlier))
              .withColumn("rank", F.row_number().over(ranking)))
    largest = F.struct("offset", "size", "ks", "vs", "ts", "segment", "position")
    aggregates = ranked.groupBy("directory").agg(
        count_if(is_data).alias("records"),
        count_if(~corrupt & F.col("is_control")).alias("control_records"),
        F.sum(F.when(is_data, F.col("ks"))).alias("key_bytes"),
        F.sum(F.when(is_data, F.col("vs"))).alias("value_bytes"),
        F.min(F.when(is_data, F.col("offset"))).alias("first_offset"),
        F.max(F.when(is_data, F.col("offset"))).alias("last_offset"),
        F.min(F.when(stamped, ts)).alias("min_timestamp"),
        F.max(F.when(stamped, ts)).alias("max_timestamp"),
        count_if(is_data & ~(ts.isNotNull() & (ts >= 0))).alias("no_timestamp"),
        F.countDistinct(F.when(is_data, F.col("key"))).alias("distinct_keys"),
        count_if(is_data & F.col("key").isNull()).alias("null_keys"),
        count_if(is_data & F.col("vs").isNull()).alias("tombstones"),
        count_if(stamped & (ts > F.lit(now))).alias("future"),
        count_if(stamped & (ts < F.lit(YEAR_2000_MS))).alias("before_2000"),
        count_if(stamped & (ts < F.col("earlier_max"))).alias("out_of_order"),
        F.collect_list(F.when(is_data & (F.col("rank") <= top), largest)).alias("largest"),
        F.collect_set(F.when(corrupt, F.struct("segment", "position"))).alias("damaged"),
    )
    damaged = []
    for r in aggregates.collect():
        p = by_dir[r["directory"]]
        for name in ("records", "control_records", "key_bytes", "value_bytes", "no_timestamp", "distinct_keys",
                     "null_keys", "tombstones", "future", "before_2000", "out_of_order"):
            setattr(p, name, r[name] or 0)
        for name in ("first_offset", "last_offset", "min_timestamp", "max_timestamp"):
            setattr(p, name, r[name])
        p.largest_records = sorted((LargestRecord(x["offset"], x["size"], -1 if x["ks"] is None else x["ks"],
                                                  -1 if x["vs"] is None else x["vs"], -1 if x["ts"] is None else x["ts"],
                                                  x["segment"], x["position"]) for x in r["largest"]),
                                   key=LargestRecord.sort_key)[:top]
        damaged.extend((x["segment"], x["position"]) for x in r["damaged"])

    data = rows.filter(is_data)
    batches = data.groupBy("directory", "segment", "position", "codec").agg(F.count(F.lit(1)).alias("records"))
    for r in (_batch_sizes(batches).groupBy("directory", "codec")
              .agg(F.count(F.lit(1)).alias("batches"), F.sum("records").alias("records"), F.sum("size").alias("bytes"))
              .collect()):
        p = by_dir[r["directory"]]
        p.codecs[r["codec"]] = CodecStats(r["batches"], r["records"], r["bytes"])
        p.batches += r["batches"]
        p.bytes += r["bytes"]

    # In the local engine's order: segments as listed, positions ascending.
    order = {path: i for i, path in enumerate(listing)}
    problems = [describe_damage(segment, position) for segment, position in damaged]
    report.problems = sorted(problems, key=lambda p: (order.get(p.file, len(order)), p.file, p.position))


def _utf8_text(F, column):
    """Binary as a string when valid UTF-8, else null: ``kcli.tools.scan.utf8_text`` (the same strict rules)."""
    return F.try_validate_utf8(column.cast("string"))


def _headers_json(F, headers):
    """``kcli.tools.scan.headers_json`` in Spark SQL expressions (no Python UDF): to_json escapes each string,
    base64 without the line breaks Spark may insert every 76 characters."""

    def json_string(text):
        wrapped = F.to_json(F.struct(text.alias("s")))  # {"s":"..."}
        return wrapped.substr(F.lit(6), F.length(wrapped) - 6)

    def one(h):
        value = h["value"]
        valid = F.try_validate_utf8(value.cast("string"))
        rendered = (F.when(value.isNull(), F.lit("null"))
                    .when(valid.isNotNull(), json_string(valid))
                    .otherwise(F.concat(F.lit('{"base64":"'), F.regexp_replace(F.base64(value), "[\\r\\n]", ""),
                                        F.lit('"}'))))
        return F.concat(F.lit('{"key":'), json_string(h["key"]), F.lit(',"value":'), rendered, F.lit("}"))

    return F.concat(F.lit("["), F.array_join(F.transform(headers, one), ","), F.lit("]"))


def records_view(raw):
    """The ``records`` view of ``--sql`` from the data source's rows: ``kcli.tools.scan.SQL_COLUMNS``, in order."""
    from pyspark.sql import functions as F

    derived = {
        "key": _utf8_text(F, F.col("key")), "value": _utf8_text(F, F.col("value")),
        "headers": _headers_json(F, F.col("headers")),
        "key_bytes": F.col("key"), "value_bytes": F.col("value"), "timestamp_ms": F.unix_millis("timestamp"),
    }
    return raw.select(*(derived[name].alias(name) if name in derived else F.col(name) for name in SQL_COLUMN_NAMES))


def register_records(spark, paths: list[str]):
    """Register the temporary view ``records`` (the data records of ``paths``, control records excluded, in
    ``records_view``'s columns) on ``spark``. Returns the view's DataFrame and the data source's rows (damaged
    ones included)."""
    from pyspark.sql import functions as F

    files = [s.path for s in list_segments(paths) if s.size > 0]
    raw = _read(spark, files, include_control=False)
    view = records_view(raw.filter(F.col("_corrupt").isNull()))
    view.createOrReplaceTempView("records")
    return view, raw


def query_spark(spark, paths: list[str], sql: str) -> QueryResult:
    """Spark SQL over a temporary view ``records`` (the data records; control records excluded), with the
    local engine's columns (``kcli.tools.scan.SQL_COLUMNS``)."""
    from pyspark.errors import PySparkException
    from pyspark.sql import functions as F

    started = time.perf_counter()
    listing = [s.path for s in list_segments(paths)]
    with local_python(spark):
        _view, raw = register_records(spark, paths)
        try:
            result = spark.sql(sql)  # analysed here: a bad query fails before any data is read
            columns = list(result.columns)
            rows = [tuple(r) for r in result.collect()]
        except PySparkException as exc:
            raise ValueError(f"--sql: {str(exc).splitlines()[0]}") from None
        damaged = raw.filter(F.col("_corrupt").isNotNull()).select("segment", "position").distinct().collect()
    order = {path: i for i, path in enumerate(listing)}
    problems = sorted((describe_damage(r["segment"], r["position"]) for r in damaged),
                      key=lambda p: (order.get(p.file, len(order)), p.file, p.position))
    return QueryResult("spark", sql, columns, rows, problems, time.perf_counter() - started)


__all__ = ["query_spark", "records_view", "register_records", "scan_spark"]
