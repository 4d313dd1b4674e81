"""The ``kafka-log`` Spark data source (Spark 4 Python Data Source API); imports pyspark and pyarrow.

Planning (in Spark's Python planner process): options -> bounds (plus pushed-down filters) -> one input
partition per segment split (plan.py). Reading (in executor Python workers): each split through
kcli's FileBatchReader and batch decoders (read.py), returned as Arrow RecordBatches, not rows.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from kcli.records.types import NO_TIMESTAMP
from kcli.spark.schema import CORRUPT_COLUMN, FORMAT, PERMISSIVE_SCHEMA, SCHEMA
from kcli.spark.plan import Bounds, Range, ReadOptions, SegmentSplit, expand_paths, plan
from kcli.spark.read import Chunk, SplitReader

_INT_COLUMNS = ("partition", "offset")


class KafkaLogDataSource(DataSource):
    """``spark.read.format("kafka-log").load(path)``: the records of Kafka log segments on disk."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return PERMISSIVE_SCHEMA if ReadOptions.parse(self.options).permissive else SCHEMA

    default_min_partitions: int | None = None

    def reader(self, schema: StructType) -> KafkaLogReader:
        reader = KafkaLogReader(ReadOptions.parse(self.options), schema)
        reader.default_min_partitions = self.default_min_partitions
        return reader


def with_parallelism(parallelism: int | None) -> type[KafkaLogDataSource]:
    """The data source class to register on a session whose parallelism is ``parallelism``: planning runs in a
    Python worker with no SparkContext to ask, so the value travels in the class (a class made here is pickled
    by value). Reads without ``minPartitions`` then get at least that many splits, where the bytes allow."""
    if not parallelism or parallelism < 2:
        return KafkaLogDataSource
    return type("KafkaLogDataSource", (KafkaLogDataSource,), {
        "default_min_partitions": parallelism, "__module__": __name__,
        "__doc__": KafkaLogDataSource.__doc__})


class SplitPartition(InputPartition):
    """One input partition: a SegmentSplit (pickled to the executor)."""

    def __init__(self, split: SegmentSplit) -> None:
        super().__init__(split)
        self.split = split


class KafkaLogReader(DataSourceReader):
    default_min_partitions: int | None = None  # the session's parallelism (see with_parallelism)

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.bounds = Bounds.from_options(opts)

    # -- planning -------------------------------------------------------------------------------
    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        """Take filters on topic, partition, offset and timestamp (applied exactly, per record, and used to
        prune and seek); hand every other filter back to Spark."""
        for f in filters:
            narrowed = _narrow(self.bounds, f)
            if narrowed is None:
                yield f
            else:
                self.bounds = narrowed

    def partitions(self) -> list[InputPartition]:
        min_partitions = self.opts.min_partitions or self.default_min_partitions
        dirs = expand_paths(self.opts.paths)
        splits = plan(dirs, self.bounds, self.opts.max_bytes_per_partition, min_partitions)
        if self.opts.remote_storage:  # tiered storage: the remote segments below each partition's local ones
            from kcli.spark.remote import plan_remote

            splits = plan_remote(dirs, self.bounds, self.opts.remote_storage,
                                 self.opts.remote_storage_options) + splits
        return [SplitPartition(s) for s in splits]

    # -- reading (executor) ---------------------------------------------------------------------------
    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        split = partition.split if isinstance(partition, SplitPartition) else None
        if split is None:  # Spark's placeholder when planning found nothing
            return iter(())
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")  # what Spark checks each batch against
        return _batches(SplitReader(split, self.opts, self.bounds).chunks(), arrow_schema)


def _batches(chunks: Iterator[Chunk], arrow_schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for chunk in chunks:
        yield to_record_batch(chunk, arrow_schema)


def to_record_batch(chunk: Chunk, schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow RecordBatch from a chunk, with bulk operations: per-record columns converted from their lists
    in one call each, per-batch columns taken from one small array per chunk with a run index
    (``np.repeat``), the timestamps scaled in numpy; no Python loop over rows."""
    runs = chunk.runs
    n = chunk.rows
    counts = np.fromiter((run[0] for run in runs), dtype=np.int64, count=len(runs))
    take = pa.array(np.repeat(np.arange(len(runs), dtype=np.int32), counts))
    data = [run[1] for run in runs]

    def per_run(index: int, typ: pa.DataType) -> pa.Array:
        return pa.array([run[index] for run in runs], type=typ).take(take)

    def per_split(value, typ: pa.DataType, always: bool = False) -> pa.Array:
        return pa.array([value if always or d else None for d in data], type=typ).take(take)

    stamps = np.fromiter(chunk.timestamp, dtype=np.int64, count=n)
    no_stamp = stamps == NO_TIMESTAMP
    columns = {
        "topic": lambda t: per_split(chunk.topic, t),
        "partition": lambda t: per_split(chunk.partition, t),
        "offset": lambda t: pa.array(chunk.offset, type=t),
        "timestamp": lambda t: pa.array(stamps * 1000, type=t, mask=no_stamp if no_stamp.any() else None),
        "timestampType": lambda t: per_run(2, t),
        "key": lambda t: pa.array(chunk.key, type=t),
        "value": lambda t: pa.array(chunk.value, type=t),
        "headers": lambda t: _headers(chunk, t, data, counts),
        "magic": lambda t: per_run(3, t),
        "codec": lambda t: per_run(4, t),
        "producer_id": lambda t: per_run(5, t),
        "producer_epoch": lambda t: per_run(6, t),
        "sequence": lambda t: pa.array(chunk.sequence, type=t),
        "is_transactional": lambda t: per_run(7, t),
        "is_control": lambda t: per_run(8, t),
        "segment": lambda t: per_split(chunk.segment, t, always=True),
        "position": lambda t: per_run(9, t),
        CORRUPT_COLUMN: lambda t: per_run(10, t),
    }
    return pa.RecordBatch.from_arrays([columns[f.name](f.type) for f in schema], schema=schema)


def _headers(chunk: Chunk, typ: pa.DataType, data: list, counts: np.ndarray) -> pa.Array:
    """list<struct<key, value>> from the sparse headers: offsets from the per-row counts, one flat struct array;
    null on corrupt rows, [] on records without headers."""
    n = chunk.rows
    lengths = np.zeros(n, dtype=np.int32)
    if chunk.header_rows:
        lengths[np.array(chunk.header_rows, dtype=np.int64)] = [len(hs) for hs in chunk.header_lists]
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    pairs = [pair for hs in chunk.header_lists for pair in hs]
    item = typ.value_type
    keys = pa.array([k for k, _ in pairs], type=item.field(0).type)
    values = pa.array([v for _, v in pairs], type=item.field(1).type)
    struct = pa.StructArray.from_arrays([keys, values], fields=[item.field(0), item.field(1)])
    mask = None
    if not all(data):
        mask = pa.array(np.repeat(np.array([d is None for d in data], dtype=bool), counts))
    return pa.ListArray.from_arrays(pa.array(offsets), struct, type=typ, mask=mask)


# -- filter pushdown --------------------------------------------------------------------------------


def _micros(value: _dt.datetime) -> int:
    # Naive datetimes are local time, as pyspark's TimestampType.fromInternal makes them.
    return int(value.replace(microsecond=0).timestamp()) * 1_000_000 + value.microsecond


def _narrow(bounds: Bounds, f: Filter) -> Bounds | None:
    """``bounds`` narrowed by ``f``, or None when ``f`` is not one this source applies itself."""
    if not isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, In)):
        return None
    if len(f.attribute) != 1:
        return None
    column = f.attribute[0]
    if column == "topic":
        if isinstance(f, EqualTo) and isinstance(f.value, str):
            return replace(bounds.with_topics([f.value]), sql=True)
        if isinstance(f, In) and all(isinstance(v, str) for v in f.value):
            return replace(bounds.with_topics(f.value), sql=True)
        return None
    if column in _INT_COLUMNS:
        convert = _as_int
    elif column == "timestamp":
        convert = _as_micros
    else:
        return None
    if isinstance(f, In):
        values = [convert(v) for v in f.value]
        if any(v is None for v in values):
            return None
        narrowed = _range(bounds, column).narrow(values=values)
    else:
        value = convert(f.value)
        if value is None:
            return None
        narrowed = _range(bounds, column)
        if isinstance(f, EqualTo):
            narrowed = narrowed.narrow(lo=value, hi=value)
        elif isinstance(f, GreaterThan):
            narrowed = narrowed.narrow(lo=value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            narrowed = narrowed.narrow(lo=value)
        elif isinstance(f, LessThan):
            narrowed = narrowed.narrow(hi=value - 1)
        else:
            narrowed = narrowed.narrow(hi=value)
    return replace(bounds, **{column: narrowed}, sql=True)


def _range(bounds: Bounds, column: str) -> Range:
    return getattr(bounds, column)


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_micros(value: object) -> int | None:
    return _micros(value) if isinstance(value, _dt.datetime) else None
