"""``kctl scan --engine spark``: the local engine's ScanReport, its per-segment scan run as Spark tasks.

Statistics: the driver lists the segments (``list_segments``, as the local engine does) and ships them to
the executors in bins, largest segments first; each executor runs the local engine's unit of work on each of
its segments (``kcli.tools.scan.scan_segment_file``: every record decoded, partial aggregates returned - counts,
offsets, timestamps, the set of keys, the largest records, the new-maximum timestamps for ``out_of_order``).
The driver merges the partials per partition directory exactly as the local engine merges its worker
processes' (``fill_report``), so the two reports are the same, problems and their order included. The rare
rescan ``out_of_order`` may need runs on the driver. The driver and every executor must see the paths under
the same names (a shared filesystem), with kcli installed on the executors' Python.

``--output``: the data records are also written as Parquet by Spark's writer from the ``kafka-log`` data
source (control records and damaged spots excluded), a second job. ``--sql`` runs Spark SQL over the data
source's rows (``register_records``).
"""

from __future__ import annotations

import time
from pathlib import Path

from kcli.spark.session import local_python
from kcli.tools.report import Problem
from kcli.tools.scan import (
    DEFAULT_TOP,
    SQL_COLUMN_NAMES,
    QueryResult,
    ScanReport,
    SegmentFile,
    SegmentPartial,
    describe_damage,
    fill_report,
    list_segments,
    prepare_output,
    scan_segment_file,
)

FORMAT = "kafka-log"
BINS_PER_CORE = 4  # Spark tasks per core: small enough to balance uneven segments, few enough to stay cheap


def _read(spark, files: list[str], *, include_control: bool):
    reader = spark.read.format(FORMAT).option("mode", "PERMISSIVE")
    if include_control:
        reader = reader.option("includeControl", "true")
    return reader.load(files)


def _scan_bin(units: list[tuple[int, SegmentFile]], top: int, now: int) -> list[tuple[int, SegmentPartial]]:
    """Executor side: the local engine's scan of each segment of one bin, with the segment's index."""
    return [(index, scan_segment_file(seg, top, now)) for index, seg in units]


def segment_bins(segments: list[SegmentFile], cores: int) -> list[list[tuple[int, SegmentFile]]]:
    """The non-empty segments (with their index in ``segments``) dealt into at most ``BINS_PER_CORE * cores``
    bins: largest first, each to the bin with the fewest bytes so far, so the bins are about even and the
    first bins Spark starts hold the largest segments."""
    units = sorted(((i, s) for i, s in enumerate(segments) if s.size > 0), key=lambda u: (-u[1].size, u[0]))
    n = min(len(units), max(1, cores) * BINS_PER_CORE)
    bins: list[list[tuple[int, SegmentFile]]] = [[] for _ in range(n)]
    loads = [0] * n
    for unit in units:
        j = min(range(n), key=lambda k: (loads[k], k))
        bins[j].append(unit)
        loads[j] += unit[1].size
    return bins


def scan_spark(spark, paths: list[str], *, top: int = DEFAULT_TOP, now_ms: int | None = None,
               output: str | None = None) -> ScanReport:
    """``kcli.tools.scan.scan`` on Spark: the same report (``engine`` "spark"), from ``spark``'s executors."""
    started = time.perf_counter()
    if top < 0:
        raise ValueError("top must be >= 0")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    unreadable: list[Problem] = []
    segments = list_segments(paths, unreadable)
    if output is not None and "://" not in output:
        prepare_output(output)
    sc = spark.sparkContext
    report = ScanReport(list(paths), "spark", now, top, parallelism=sc.defaultParallelism, output=output)
    partials: list[SegmentPartial | None] = [None] * len(segments)
    bins = segment_bins(segments, sc.defaultParallelism)
    with local_python(spark):
        if bins:
            results = (sc.parallelize(bins, numSlices=len(bins))
                       .flatMap(lambda units, top=top, now=now: _scan_bin(units, top, now)).collect())
            for index, part in results:
                partials[index] = part
        if output is not None:
            _write_output(spark, [s.path for s in segments if s.size > 0], output)
    for i, seg in enumerate(segments):
        if partials[i] is None:  # empty segments: nothing to ship
            partials[i] = scan_segment_file(seg, top, now)
    fill_report(report, segments, partials, lambda seg, prefix: scan_segment_file(seg, top, now, prefix))
    report.problems[:0] = unreadable
    report.seconds = time.perf_counter() - started
    return report


def _write_output(spark, files: list[str], output: str) -> None:
    """The data records (control records and damaged spots excluded) as Parquet, by Spark's writer."""
    from pyspark.sql import functions as F

    if not files:
        return
    raw = _read(spark, files, include_control=True)
    # prepare_output allowed only a new or empty directory; Spark's writer wants it absent or replaced.
    mode = "overwrite" if "://" not in output and Path(output).is_dir() else "errorifexists"
    (raw.filter(F.col("_corrupt").isNull() & ~F.col("is_control")).drop("_corrupt")
     .write.mode(mode).parquet(output))


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
